# UCT-level tests: through UCX's public API, with the module linked in as an
# application would load it.
check_PROGRAMS += test/gtest/uct/test_uct
TESTS          += test/gtest/uct/test_uct
test_gtest_uct_test_uct_SOURCES = \
	test/gtest/uct/uct_fixture.h \
	test/gtest/uct/uct_component.h \
	test/gtest/uct/uct_fixture.cc \
	test/gtest/uct/test_component.cc \
	test/gtest/uct/test_am_rma.cc \
	test/gtest/uct/test_empty_iov.cc \
	test/gtest/uct/test_params.cc \
	test/gtest/uct/test_tag.cc \
	test/gtest/uct/test_tag_rndv_request.cc \
	test/gtest/uct/test_overflow.cc \
	test/gtest/uct/test_cancel_race.cc \
	test/gtest/uct/test_rndv_incomplete.cc \
	test/gtest/uct/test_contract.cc \
	test/gtest/uct/test_tx_moderation.cc \
	test/gtest/uct/test_rcache.cc \
	test/gtest/uct/test_backlog.cc \
	test/gtest/uct/test_wireup.cc \
	test/gtest/uct/test_partition.cc \
	test/gtest/uct/test_devices.cc \
	test/gtest/uct/test_closing.cc \
	test/gtest/uct/test_control.cc \
	test/gtest/uct/test_perf.cc \
	test/gtest/uct/test_report.cc
# uct_v2.h (test_wireup.cc) is in UCX's source, not installed
test_gtest_uct_test_uct_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS) -isystem $(UCX_SRC)/src
# libibverbs: test_devices.cc asks it whether fork init was done
test_gtest_uct_test_uct_LDADD = \
	src/uct/rc_tm/libuct_rc_tm.la \
	test/gtest/libgtest_main.la \
	$(UCX_LIBS) $(GTEST_LIBS) $(VERBS_LIBS)
test_gtest_uct_test_uct_LDFLAGS = -Wl,--no-as-needed

# The module as users load it: LD_PRELOAD into stock ucx_info, and the
# version guard with a module built for another UCX.
TESTS      += test/ucx_info_test.sh
EXTRA_DIST += test/ucx_info_test.sh
