# Device-layer tests.  test_soft: the software NIC through the device layer,
# rule by rule (the device semantics, the wire, processes, steering).
# test_verbs: the verbs backend's pure parts, and a NIC where there is one
# (test_verbs_port.cc: routes and the first listed device; test_verbs_perf.cc:
# a NIC port's performance figures).
check_PROGRAMS += test/gtest/dev/test_soft test/gtest/dev/test_verbs
TESTS          += test/gtest/dev/test_soft test/gtest/dev/test_verbs
test_gtest_dev_test_soft_SOURCES = \
	test/gtest/dev/soft_fixture.h \
	test/gtest/dev/verbs_connect.h \
	test/gtest/dev/log_capture.h \
	test/gtest/dev/test_soft.cc \
	test/gtest/dev/test_soft_phase.cc \
	test/gtest/dev/test_soft_wire.cc \
	test/gtest/dev/test_soft_proc.cc \
	test/gtest/dev/test_soft_mlx5.cc \
	test/gtest/dev/test_soft_mlx5_list.cc \
	test/gtest/dev/test_soft_qpn.cc \
	test/gtest/dev/test_soft_port.cc \
	test/gtest/dev/test_soft_pkey.cc \
	test/gtest/dev/test_soft_async.cc \
	test/gtest/dev/test_soft_engine.cc \
	test/gtest/dev/test_soft_aside.cc \
	test/gtest/dev/test_soft_park.cc \
	test/gtest/dev/test_soft_rdma.cc \
	test/gtest/dev/test_soft_scatter.cc \
	test/gtest/dev/test_soft_backlog.cc \
	test/gtest/dev/test_soft_order.cc \
	test/gtest/dev/test_soft_rq.cc \
	test/gtest/dev/ud_fixture.h \
	test/gtest/dev/test_soft_ud.cc \
	test/gtest/dev/test_soft_ud_qp.cc \
	test/gtest/dev/test_soft_qp_ex.cc \
	test/gtest/dev/test_soft_gid.cc \
	test/gtest/dev/test_soft_channel.cc
test_gtest_dev_test_soft_LDADD   = \
	src/dev/libtm_dev.la \
	src/matcher/libtm_matcher.la \
	test/gtest/libgtest_main.la \
	$(GTEST_LIBS)
test_gtest_dev_test_verbs_SOURCES = \
	test/gtest/dev/log_capture.h \
	test/gtest/dev/test_verbs.cc \
	test/gtest/dev/test_verbs_port.cc \
	test/gtest/dev/test_verbs_perf.cc \
	test/gtest/dev/test_verbs_poll.cc
test_gtest_dev_test_verbs_LDADD   = $(test_gtest_dev_test_soft_LDADD)
