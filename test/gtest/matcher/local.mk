# Software tag matcher tests: targeted cases and a randomized comparison with
# a reference model (TM_MATCHER_SEED=<n> reruns one sequence).
check_PROGRAMS += test/gtest/matcher/test_matcher
TESTS          += test/gtest/matcher/test_matcher
test_gtest_matcher_test_matcher_SOURCES = test/gtest/matcher/test_matcher.cc
test_gtest_matcher_test_matcher_LDADD   = \
	src/matcher/libtm_matcher.la \
	test/gtest/libgtest_main.la \
	$(GTEST_LIBS)
