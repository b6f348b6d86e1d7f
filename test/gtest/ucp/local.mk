# UCP-level tests: the tag API over rc_tm, module linked in
check_PROGRAMS += test/gtest/ucp/test_ucp
TESTS          += test/gtest/ucp/test_ucp
test_gtest_ucp_test_ucp_SOURCES  = test/gtest/ucp/test_ucp_tag.cc \
	test/gtest/ucp/test_ucp_report.cc \
	test/gtest/ucp/test_ucp_teardown.cc \
	test/gtest/ucp/test_ucp_devices.cc \
	test/gtest/ucp/test_ucp_p2p.cc
test_gtest_ucp_test_ucp_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_gtest_ucp_test_ucp_LDADD    = \
	src/uct/rc_tm/libuct_rc_tm.la \
	test/gtest/libgtest_main.la \
	$(UCX_LIBS) $(GTEST_LIBS)
test_gtest_ucp_test_ucp_LDFLAGS  = -Wl,--no-as-needed
