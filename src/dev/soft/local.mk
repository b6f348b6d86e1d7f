# Software TM-SRQ device: shared-memory wire, matching engine run in poll_cq
# (its matching list is a src/matcher matcher: link libtm_matcher.la too)
src_dev_libtm_dev_la_SOURCES += \
	src/dev/soft/soft_dev.h \
	src/dev/soft/soft_dev_test.h \
	src/dev/soft/soft_dev.c \
	src/dev/soft/soft_wire.c \
	src/dev/soft/soft_mr.c \
	src/dev/soft/soft_conn.c \
	src/dev/soft/soft_tm.c \
	src/dev/soft/soft_test.c
