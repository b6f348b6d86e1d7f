# rdma-core verbs backend of the tag-matching device (real TM-capable NICs).
# Built into the device library when configure finds libibverbs.
if HAVE_TM_DEV_VERBS
src_dev_libtm_dev_la_SOURCES += \
	src/dev/verbs/verbs_dev.h \
	src/dev/verbs/verbs_dev.c \
	src/dev/verbs/verbs_queue.c \
	src/dev/verbs/verbs_conn.c

check_PROGRAMS += test/gtest/dev/test_verbs
TESTS          += test/gtest/dev/test_verbs
test_gtest_dev_test_verbs_SOURCES = test/gtest/dev/test_verbs.cc
test_gtest_dev_test_verbs_LDADD   = src/dev/libtm_dev.la \
                                    src/matcher/libtm_matcher.la \
                                    test/gtest/libgtest_main.la $(GTEST_LIBS)
endif
