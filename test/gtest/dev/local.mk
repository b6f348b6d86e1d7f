# Device-layer tests: the software TM-SRQ device (every rule of the device
# semantics, the wire, processes, steering).  The verbs backend builds its
# own test (test_verbs.cc) from src/dev/verbs/local.mk.
check_PROGRAMS += test/gtest/dev/test_soft
TESTS          += test/gtest/dev/test_soft
test_gtest_dev_test_soft_SOURCES = test/gtest/dev/test_soft.cc
test_gtest_dev_test_soft_LDADD   = \
	src/dev/libtm_dev.la \
	src/matcher/libtm_matcher.la \
	test/gtest/libgtest_main.la \
	$(GTEST_LIBS)
