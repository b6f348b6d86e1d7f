#!/bin/sh
# The UCP-level suites (test_ucp, the stress test's UCP part) once more
# wired up as on a cluster: rc_tm connects endpoint to endpoint only, as on
# a NIC (UCX_RC_TM_SOFT_CONNECT_TO_SRQ=n), so UCP wires an endpoint made
# from a worker address up over an auxiliary transport
# (UCX_TLS=rc_tm,AUX:aux through RC_TM_TEST_TLS).  The suites' own counter
# checks show that the device still matched the tags.
#
# Over every auxiliary transport this UCX can use (test/aux_tls.sh).
: "${RC_TM_BUILDDIR:?RC_TM_BUILDDIR must name the build tree}"
: "${RC_TM_SRCDIR:?RC_TM_SRCDIR must name the source tree}"
: "${RC_TM_UCX_VERSION:?RC_TM_UCX_VERSION must name the UCX built against}"
if [ "${UCX_RC_TM_SOFT_PROGRESS:-}" = thread ]; then
    echo "not in the ThreadSanitizer build: its engine-thread runs are enough"
    exit 77
fi

aux_tls=$(sh "$RC_TM_SRCDIR/test/aux_tls.sh" "$RC_TM_UCX_VERSION") || exit 1
interposer=$RC_TM_BUILDDIR/test/interpose/.libs/libsoftnic_verbs.so
# In the AddressSanitizer build the interposer is instrumented, and ASan's
# run time must come first among what a process loads
asan=$(ldd "$interposer" 2>/dev/null | awk '$1 ~ /^libasan\.so/ { print $3 }')

# What does not run in this mode, and why:
#  rc_tm_ucp_p2p.*   set the mode themselves
#  forked_child      UCX's async thread does not survive fork: in the
#                    forked child, the auxiliary interface that UCP left
#                    inactive is woken by a wireup message only through
#                    that thread, so the child's wireup never completes
#                    (UCX's, whatever the data transport: docs/testing.md)
#  rc_tm_ucp_devices with tcp: UCX_NET_DEVICES=soft:1 leaves tcp's device
#                    out, as a site's choice of an ib port leaves tcp out
#  with ud_verbs:
#   context_cleaned_up_without_destroying_its_endpoints,
#   hundreds_of_contexts_in_every_order: they clean a context up with its
#                    workers alive; UCX's ib md then destroys its
#                    registration cache with ud_verbs' buffers in it, and
#                    UCX asserts (rcache.c, "region->refcount == 0")
#   failed_wireup    connects to a worker that is gone: over ud_verbs the
#                    endpoint is made and its wireup datagrams are dropped,
#                    as on a fabric, so creation does not fail
ucp_filter='-rc_tm_ucp_p2p.*:rc_tm_teardown.forked_child'

rc=0
for aux in $aux_tls; do
    filter=$ucp_filter
    wrap=
    case $aux in
    tcp)      filter="$filter:rc_tm_ucp_devices.*" ;;
    ud_verbs) # UCX's own ud_verbs on the software NIC: the interposer,
              # preloaded into the test program alone (not into libtool's
              # wrapper and the tools it runs), where the device node UCX's
              # ib md looks for exists
              filter="$filter:rc_tm_teardown.context_cleaned_up_without_destroying_its_endpoints:rc_tm_teardown.hundreds_of_contexts_in_every_order:rc_tm_teardown.failed_wireup"
              wrap="env SOFTNIC_DEV_NODE_PRELOAD=${asan:+$asan:}$interposer${LD_PRELOAD:+:$LD_PRELOAD}
                    $RC_TM_BUILDDIR/libtool --mode=execute
                    sh $RC_TM_SRCDIR/test/softnic_dev_node.sh" ;;
    esac
    for t in "ucp/test_ucp --gtest_filter=$filter" \
             "stress/test_stress --gtest_filter=rc_tm_stress.*"; do
        echo "== ${t%% *} (UCX_TLS=rc_tm,$aux:aux, connected endpoint to endpoint)"
        # shellcheck disable=SC2086
        RC_TM_TEST_TLS="rc_tm,$aux:aux" UCX_RC_TM_SOFT_CONNECT_TO_SRQ=n \
            $wrap "$RC_TM_BUILDDIR/test/gtest/"$t || rc=1
    done
done
exit $rc
