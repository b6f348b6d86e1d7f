# Microbenchmarks (built with 'make', run by hand; see docs/matcher.md).
noinst_PROGRAMS += test/bench/matcher_bench
test_bench_matcher_bench_SOURCES = test/bench/matcher_bench.h \
	test/bench/matcher_bench.c test/bench/matcher_bench_ucp.c
test_bench_matcher_bench_LDADD   = src/matcher/libtm_matcher.la
EXTRA_DIST += test/bench/perftest_compare.py test/bench/perftest_common.py \
	test/bench/perftest_mpi.py

# What one cache line costs between two CPUs of this host (the demo prints
# it with its figures: docs/performance.md)
noinst_PROGRAMS += test/bench/line_pingpong
test_bench_line_pingpong_SOURCES = test/bench/line_pingpong.c test/bench/bench_cpu.h
test_bench_line_pingpong_LDADD   = -lpthread

# What the state of a ring's lines costs its producer: records released as
# read, or handed back written (docs/one-host.md)
noinst_PROGRAMS += test/bench/ring_lines
test_bench_ring_lines_SOURCES = test/bench/ring_lines.c test/bench/bench_cpu.h
test_bench_ring_lines_LDADD   = -lpthread

# Deep receive queues through UCP: rc_tm against posix (docs/design.md)
noinst_PROGRAMS += test/bench/ucp_deep_queue
test_bench_ucp_deep_queue_SOURCES  = test/bench/ucp_deep_queue.c
test_bench_ucp_deep_queue_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_bench_ucp_deep_queue_LDADD    = src/uct/rc_tm/libuct_rc_tm.la $(UCX_LIBS)
test_bench_ucp_deep_queue_LDFLAGS  = -Wl,--no-as-needed

# What an empty progress call costs, counted with callgrind (docs/one-host.md)
noinst_PROGRAMS += test/bench/ucp_idle_poll
test_bench_ucp_idle_poll_SOURCES  = test/bench/ucp_idle_poll.c
test_bench_ucp_idle_poll_CPPFLAGS = $(AM_CPPFLAGS) $(UCX_CFLAGS)
test_bench_ucp_idle_poll_LDADD    = src/uct/rc_tm/libuct_rc_tm.la $(UCX_LIBS)
test_bench_ucp_idle_poll_LDFLAGS  = -Wl,--no-as-needed

# Overlap of one MPI message with computation on the receiver (Open MPI's
# pml ucx over any transport; docs/demo.md).  Built with $(MPICC), as the
# MPI tests are, by 'make' itself: the demo runs it.
test/bench/mpi_overlap: $(srcdir)/test/bench/mpi_overlap.c
	@$(MKDIR_P) test/bench
	$(AM_V_CCLD)$(MPICC) -std=gnu11 -Wall -Wextra $(CFLAGS) -o $@ \
		$(srcdir)/test/bench/mpi_overlap.c

# Latency between two ranks while the others, connected to both, stay idle:
# what a poll costs with many peers (docs/demo.md)
test/bench/mpi_many_peers: $(srcdir)/test/bench/mpi_many_peers.c
	@$(MKDIR_P) test/bench
	$(AM_V_CCLD)$(MPICC) -std=gnu11 -Wall -Wextra $(CFLAGS) -o $@ \
		$(srcdir)/test/bench/mpi_many_peers.c

# A halo exchange between 2 to 4 ranks, each step a nonblocking exchange
# with both neighbours and a little computation, timed per step: an
# application's shape (docs/performance.md)
test/bench/mpi_halo: $(srcdir)/test/bench/mpi_halo.c
	@$(MKDIR_P) test/bench
	$(AM_V_CCLD)$(MPICC) -std=gnu11 -Wall -Wextra $(CFLAGS) -o $@ \
		$(srcdir)/test/bench/mpi_halo.c

all-local: test/bench/mpi_overlap test/bench/mpi_many_peers \
	test/bench/mpi_halo
CLEANFILES += test/bench/mpi_overlap test/bench/mpi_many_peers \
	test/bench/mpi_halo
EXTRA_DIST += test/bench/mpi_overlap.c test/bench/mpi_many_peers.c \
	test/bench/mpi_halo.c

# ... and as a test: bursts whose sends completed, then a sender blocked
# outside UCX (issue 34), inline and with the engine thread
TESTS      += test/bench/deep_queue_burst.sh
EXTRA_DIST += test/bench/deep_queue_burst.sh
