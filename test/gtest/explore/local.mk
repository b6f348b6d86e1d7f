# Interleaving explorer for the tag-matching protocol.  Its reference model
# of MPI matching comes with its own tests; the interleavings it found are
# replayed by hand in test_regressions.cc.  Reuses the UCT test fixture.
check_PROGRAMS += test/gtest/explore/test_explore
TESTS          += test/gtest/explore/test_explore
test_gtest_explore_test_explore_SOURCES = \
	test/gtest/uct/uct_fixture.h \
	test/gtest/uct/uct_fixture.cc \
	test/gtest/explore/mpi_model.h \
	test/gtest/explore/mpi_model.cc \
	test/gtest/explore/test_mpi_model.cc \
	test/gtest/explore/test_regressions.cc
test_gtest_explore_test_explore_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_gtest_explore_test_explore_LDADD = \
	src/uct/rc_tm/libuct_rc_tm.la \
	test/gtest/libgtest_main.la \
	$(UCX_LIBS) $(GTEST_LIBS)
test_gtest_explore_test_explore_LDFLAGS = -Wl,--no-as-needed
