# The tag-matching device layer: one backend, which speaks rdma-core's API
# only and drives NICs (through libibverbs) and the software NIC alike.
# Consumers also link src/matcher/libtm_matcher.la (the software NIC's
# matching list is a matcher).
noinst_LTLIBRARIES += src/dev/libtm_dev.la
src_dev_libtm_dev_la_SOURCES = \
	src/dev/tm_dev.h \
	src/dev/tm_dev.c \
	src/dev/verbs/verbs_dev.h \
	src/dev/verbs/verbs_lib.h \
	src/dev/verbs/verbs_lib.c \
	src/dev/verbs/verbs_caps.c \
	src/dev/verbs/verbs_dev.c \
	src/dev/verbs/verbs_port.c \
	src/dev/verbs/verbs_queue.c \
	src/dev/verbs/verbs_conn.c
src_dev_libtm_dev_la_LIBADD  = src/softnic/libsoftnic.la $(VERBS_LIBS)
