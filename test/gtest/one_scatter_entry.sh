#!/bin/sh
# The UCX-level suites (uct, ucp, fault) once more with list entries of one
# scatter entry, as mlx5's (UCX_RC_TM_SOFT_TM_MAX_SGE=1): receives shorter
# than an eager message are then listed with bounce segments, the path a
# ConnectX NIC takes; make check runs them with the software NIC's two
# (a spill segment behind the receive) first.
: "${RC_TM_BUILDDIR:?RC_TM_BUILDDIR must name the build tree}"
UCX_RC_TM_SOFT_TM_MAX_SGE=1
export UCX_RC_TM_SOFT_TM_MAX_SGE
rc=0
for t in uct/test_uct ucp/test_ucp fault/test_fault; do
    echo "== $t (UCX_RC_TM_SOFT_TM_MAX_SGE=1)"
    "$RC_TM_BUILDDIR/test/gtest/$t" || rc=1
done
exit $rc
