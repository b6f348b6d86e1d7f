# Randomized stress through UCP over rc_tm between two processes, every
# outcome checked against a model of MPI matching (docs/testing.md).
# RC_TM_STRESS_SEED=<n> reruns one traffic script, RC_TM_STRESS_MESSAGES=<n>
# sets its length.
check_LTLIBRARIES += test/gtest/stress/libucp_ifaces.la
test_gtest_stress_libucp_ifaces_la_SOURCES  = test/gtest/stress/ucp_ifaces.c
test_gtest_stress_libucp_ifaces_la_CPPFLAGS = \
	$(AM_CPPFLAGS) $(UCX_INTERNAL_CPPFLAGS) $(UCX_CFLAGS)

check_PROGRAMS += test/gtest/stress/test_stress
TESTS          += test/gtest/stress/test_stress
test_gtest_stress_test_stress_SOURCES = \
	test/gtest/stress/mpi_model.h \
	test/gtest/stress/ucp_stress.h \
	test/gtest/stress/stress_int.h \
	test/gtest/stress/stress_script.cc \
	test/gtest/stress/stress_recv.cc \
	test/gtest/stress/ucp_stress.cc \
	test/gtest/stress/test_stress.cc
test_gtest_stress_test_stress_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_gtest_stress_test_stress_LDADD    = \
	test/gtest/stress/libucp_ifaces.la \
	src/uct/rc_tm/libuct_rc_tm.la \
	test/gtest/libgtest_main.la \
	$(UCX_LIBS) $(GTEST_LIBS)
test_gtest_stress_test_stress_LDFLAGS  = -Wl,--no-as-needed

# The UCX-level suites once more, with the software NIC on its engine
# thread (after them: it runs their programs)
TESTS      += test/gtest/thread_mode.sh
EXTRA_DIST += test/gtest/thread_mode.sh
# ... and with list entries of one scatter entry, as mlx5's
TESTS      += test/gtest/one_scatter_entry.sh
EXTRA_DIST += test/gtest/one_scatter_entry.sh
# ... and the UCP-level ones wired up by worker address over an auxiliary
# transport, as on a cluster (rc_tm connected endpoint to endpoint)
TESTS      += test/gtest/aux_wireup.sh
EXTRA_DIST += test/gtest/aux_wireup.sh
