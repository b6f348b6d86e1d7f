# Interleaving explorer: every order of device events, software progress and
# receive posts/cancels for small scenarios, checked against a reference
# model of MPI matching (docs/explorer.md).  Reuses the UCT test fixture.
# The state fingerprint reads rc_tm's and the device's internals: C, with
# the module's flags
check_LTLIBRARIES += test/gtest/explore/libexplore_state.la
test_gtest_explore_libexplore_state_la_SOURCES = \
	test/gtest/explore/explore_state.h \
	test/gtest/explore/explore_state.c
test_gtest_explore_libexplore_state_la_CPPFLAGS = \
	$(AM_CPPFLAGS) $(UCX_INTERNAL_CPPFLAGS) $(UCX_CFLAGS)
test_gtest_explore_libexplore_state_la_LDFLAGS = -rpath /nowhere

check_PROGRAMS += test/gtest/explore/test_explore
TESTS          += test/gtest/explore/test_explore
test_gtest_explore_test_explore_SOURCES = \
	test/gtest/uct/uct_fixture.h \
	test/gtest/uct/uct_fixture.cc \
	test/gtest/explore/mpi_model.h \
	test/gtest/explore/mpi_model.cc \
	test/gtest/explore/test_mpi_model.cc \
	test/gtest/explore/test_regressions.cc \
	test/gtest/explore/explore_state.h \
	test/gtest/explore/explorer.h \
	test/gtest/explore/explorer_int.h \
	test/gtest/explore/explorer.cc \
	test/gtest/explore/explorer_ucp.cc \
	test/gtest/explore/explorer_checks.cc \
	test/gtest/explore/test_explore.cc
test_gtest_explore_test_explore_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_gtest_explore_test_explore_LDADD = \
	test/gtest/explore/libexplore_state.la \
	src/uct/rc_tm/libuct_rc_tm.la \
	test/gtest/libgtest_main.la \
	$(UCX_LIBS) $(GTEST_LIBS)
test_gtest_explore_test_explore_LDFLAGS = -Wl,--no-as-needed
