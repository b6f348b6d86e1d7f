# The software NIC: a TM-capable RC NIC in software, reached through
# rdma-core's objects (softnic.h).  Its matching list is a src/matcher
# matcher: consumers link src/matcher/libtm_matcher.la too.
noinst_LTLIBRARIES += src/softnic/libsoftnic.la
src_softnic_libsoftnic_la_SOURCES = \
	src/softnic/softnic.h \
	src/softnic/softnic_test.h \
	src/softnic/softnic_wire.h \
	src/softnic/softnic_int.h \
	src/softnic/softnic_engine.h \
	src/softnic/softnic_aside.h \
	src/softnic/softnic_cq.h \
	src/softnic/softnic_ring.h \
	src/softnic/softnic_rq.h \
	src/softnic/softnic_srq.h \
	src/softnic/softnic_port.h \
	src/softnic/softnic_channel.h \
	src/softnic/softnic_qp_ex.h \
	src/softnic/softnic_ud.h \
	src/softnic/softnic_port.c \
	src/softnic/softnic_context.c \
	src/softnic/softnic_mr.c \
	src/softnic/softnic_rdma.c \
	src/softnic/softnic_cq.c \
	src/softnic/softnic_channel.c \
	src/softnic/softnic_hold.c \
	src/softnic/softnic_srq.c \
	src/softnic/softnic_qp.c \
	src/softnic/softnic_qp_ex.c \
	src/softnic/softnic_accept.c \
	src/softnic/softnic_req.c \
	src/softnic/softnic_pull.c \
	src/softnic/softnic_resp.c \
	src/softnic/softnic_rq.c \
	src/softnic/softnic_ud.c \
	src/softnic/softnic_ah.c \
	src/softnic/softnic_comp.c \
	src/softnic/softnic_park.c \
	src/softnic/softnic_async.c \
	src/softnic/softnic_engine.c \
	src/softnic/softnic_aside.c \
	src/softnic/softnic_wire.c \
	src/softnic/softnic_test.c
