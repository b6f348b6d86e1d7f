#!/bin/sh
# The UCX-level suites (uct, ucp, fault, stress) once more with the
# software NIC's work on its engine thread (UCX_RC_TM_SOFT_PROGRESS=thread);
# make check runs them inline first.  The device-level suites (test_soft,
# test_verbs) drive the device through its API and test the engine
# themselves (test_soft_engine.cc); the explorer's steps are the device's
# (SOFTNIC_MODE_MANUAL): they stay inline.
: "${RC_TM_BUILDDIR:?RC_TM_BUILDDIR must name the build tree}"
if [ "${UCX_RC_TM_SOFT_PROGRESS:-}" = thread ]; then
    echo "the suites ran in thread mode already (the ThreadSanitizer build)"
    exit 77
fi
UCX_RC_TM_SOFT_PROGRESS=thread
# the engine's semantics are what these runs test: it works even where it
# has no CPU of its own (test_soft_aside.cc tests its standing aside)
UCX_RC_TM_SOFT_ENGINE_ASIDE=n
export UCX_RC_TM_SOFT_PROGRESS UCX_RC_TM_SOFT_ENGINE_ASIDE
rc=0
for t in uct/test_uct ucp/test_ucp fault/test_fault stress/test_stress; do
    echo "== $t (UCX_RC_TM_SOFT_PROGRESS=thread)"
    "$RC_TM_BUILDDIR/test/gtest/$t" || rc=1
done
exit $rc
