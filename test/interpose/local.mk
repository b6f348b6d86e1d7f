# A test-only interposer: LD_PRELOAD=.../libsoftnic_verbs.so lets unmodified
# programs linked against libibverbs (ibv_devinfo, the pingpongs, perftest,
# pyverbs) use the software NIC.  Not installed, not loaded by the
# transport.  The build fails when it misses a function of the installed
# libibverbs that takes an object (check-coverage.sh).
noinst_LTLIBRARIES += test/interpose/libsoftnic_verbs.la
test_interpose_libsoftnic_verbs_la_SOURCES = \
	test/interpose/interpose.h \
	test/interpose/interpose_device.c \
	test/interpose/interpose_objects.c \
	test/interpose/interpose_unsupported.c \
	test/interpose/interpose_compat.c
test_interpose_libsoftnic_verbs_la_CFLAGS  = $(AM_CFLAGS) -fvisibility=hidden
test_interpose_libsoftnic_verbs_la_LIBADD  = src/softnic/libsoftnic.la \
	src/matcher/libtm_matcher.la $(VERBS_LIBS) -ldl -lpthread
test_interpose_libsoftnic_verbs_la_LDFLAGS = -rpath /nowhere -module \
	-avoid-version -no-undefined \
	-Wl,--version-script=$(srcdir)/test/interpose/softnic_verbs.map
EXTRA_test_interpose_libsoftnic_verbs_la_DEPENDENCIES = \
	test/interpose/softnic_verbs.map

# The coverage check, run by 'make' (all): a stamp made only when it passes
noinst_DATA = test/interpose/coverage.stamp
test/interpose/coverage.stamp: test/interpose/libsoftnic_verbs.la \
		$(srcdir)/test/interpose/check-coverage.sh
	$(AM_V_GEN)$(SHELL) $(srcdir)/test/interpose/check-coverage.sh \
		test/interpose/.libs/libsoftnic_verbs.so && touch $@
CLEANFILES += test/interpose/coverage.stamp

EXTRA_DIST += test/interpose/softnic_verbs.map \
	test/interpose/check-coverage.sh

# Unmodified verbs programs on the software NIC through the interposer:
# the pingpongs and perftest (Debian's ibverbs-utils, perftest),
# rdma-core's tag-matching test (python3-pyverbs), and UCX's own ib
# transports (ud_verbs, rc_verbs; rc_tm wired up over ud_verbs), for which
# test/softnic_dev_node.sh provides the device node UCX looks for
TESTS      += test/verbs_tools_test.sh test/tag_matching_test.sh \
	test/ucx_ib_test.sh
EXTRA_DIST += test/verbs_tools_test.sh test/server_client.sh test/tag_matching_test.sh \
	test/ucx_ib_test.sh test/softnic_dev_node.sh

# The interposer as a program linked against libibverbs alone sees it (it
# preloads the interposer itself; not under test/gtest/: the sanitizer
# builds' check-gtest cannot preload a library into an instrumented program)
check_PROGRAMS += test/interpose/test_interpose
TESTS          += test/interpose/test_interpose
test_interpose_test_interpose_SOURCES = test/interpose/test_interpose.cc
test_interpose_test_interpose_LDADD   = $(VERBS_LIBS) $(GTEST_LIBS)
