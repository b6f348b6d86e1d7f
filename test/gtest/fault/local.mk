# Faults: killed peers in the middle of rendezvous (UCT, and UCP with peer
# error handling), receive resources exhausted, invalid rkeys, malformed
# wire headers from a peer that speaks to the device directly, faults the
# receive CQ reports (docs/testing.md).
check_PROGRAMS += test/gtest/fault/test_fault
TESTS          += test/gtest/fault/test_fault
test_gtest_fault_test_fault_SOURCES = \
	test/gtest/uct/uct_fixture.h \
	test/gtest/uct/uct_fixture.cc \
	test/gtest/fault/fault_fixture.h \
	test/gtest/fault/test_fault.cc \
	test/gtest/fault/test_fault_rx.cc \
	test/gtest/fault/test_fault_wire.cc \
	test/gtest/fault/test_fault_cq.cc \
	test/gtest/fault/test_fault_ucp.cc
test_gtest_fault_test_fault_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_gtest_fault_test_fault_LDADD = \
	src/uct/rc_tm/libuct_rc_tm.la \
	test/gtest/libgtest_main.la \
	$(UCX_LIBS) $(GTEST_LIBS)
test_gtest_fault_test_fault_LDFLAGS = -Wl,--no-as-needed
