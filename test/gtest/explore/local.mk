# Interleaving explorer for the tag-matching protocol.  Its reference model
# of MPI matching comes with its own tests.
check_PROGRAMS += test/gtest/explore/test_explore
TESTS          += test/gtest/explore/test_explore
test_gtest_explore_test_explore_SOURCES = \
	test/gtest/explore/mpi_model.h \
	test/gtest/explore/mpi_model.cc \
	test/gtest/explore/test_mpi_model.cc
test_gtest_explore_test_explore_LDADD = \
	test/gtest/libgtest_main.la \
	$(GTEST_LIBS)
