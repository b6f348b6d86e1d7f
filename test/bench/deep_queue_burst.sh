#!/bin/sh
# The deep-queue benchmark as a test: in every round the sender posts a
# burst far deeper than the receiver's ring, waits for its sends to
# complete, then blocks outside UCX until the receiver is done, so every
# round hangs unless a send that completed is delivered without the
# sender's help.  1k, 16k and 64k receives of 512 B, 1 KiB and 2 KiB, with
# the software NIC inline and on its engine thread; a round that does not
# finish in the time limit is a hang.  The figures are not checked (make
# check is no benchmark).
: "${RC_TM_BUILDDIR:?RC_TM_BUILDDIR must name the build tree}"
bench=$RC_TM_BUILDDIR/test/bench/ucp_deep_queue
rc=0
for mode in inline thread; do
    for size in 512 1024 2048; do
        echo "== ucp_deep_queue -n 1024,16384,65536 -s $size -t rc_tm -r 2 (UCX_RC_TM_SOFT_PROGRESS=$mode)"
        UCX_RC_TM_SOFT_PROGRESS=$mode timeout 120 \
            "$bench" -n 1024,16384,65536 -s "$size" -t rc_tm -r 2 2>/dev/null
        status=$?
        echo
        if [ $status -ne 0 ]; then
            echo "FAIL: exit status $status (124: hung)"
            rc=1
        fi
    done
done
exit $rc
