# MPI tests: our own programs under Open MPI (pml ucx) with the rc_tm module
# of this build tree LD_PRELOADed; see test/mpi/README.md.
#
# The programs are built with $(MPICC) (not $(CC)) by the explicit rules
# below, only for 'make check' / 'make check-mpi'.  'make check' runs them
# after the other tests (check-TESTS): oversubscribed MPI ranks and the
# googletest suites would otherwise share the cores under 'make -j'.

MPI_TEST_BINS = \
	test/mpi/pingpong test/mpi/order test/mpi/anysrc test/mpi/manyrecv \
	test/mpi/flood test/mpi/cancel test/mpi/probe test/mpi/ssend \
	test/mpi/truncate test/mpi/alltoall
MPI_TEST_CFLAGS = -std=gnu11 -Wall -Wextra $(CFLAGS) \
	-I$(srcdir)/test/mpi
MPI_TEST_HELPER = test/mpi/rc_tm_check.o

test/mpi/rc_tm_check.o: $(srcdir)/test/mpi/rc_tm_check.c \
		$(srcdir)/test/mpi/rc_tm_check.h
	@$(MKDIR_P) test/mpi
	$(AM_V_CC)$(MPICC) $(MPI_TEST_CFLAGS) -c -o $@ \
		$(srcdir)/test/mpi/rc_tm_check.c

$(MPI_TEST_BINS): $(MPI_TEST_HELPER) $(srcdir)/test/mpi/rc_tm_check.h
	$(AM_V_CCLD)$(MPICC) $(MPI_TEST_CFLAGS) -o $@ $(srcdir)/$@.c \
		$(MPI_TEST_HELPER) -ldl

# each program from its own source
test/mpi/pingpong: $(srcdir)/test/mpi/pingpong.c
test/mpi/order: $(srcdir)/test/mpi/order.c
test/mpi/anysrc: $(srcdir)/test/mpi/anysrc.c
test/mpi/manyrecv: $(srcdir)/test/mpi/manyrecv.c
test/mpi/flood: $(srcdir)/test/mpi/flood.c
test/mpi/cancel: $(srcdir)/test/mpi/cancel.c
test/mpi/probe: $(srcdir)/test/mpi/probe.c
test/mpi/ssend: $(srcdir)/test/mpi/ssend.c
test/mpi/truncate: $(srcdir)/test/mpi/truncate.c
test/mpi/alltoall: $(srcdir)/test/mpi/alltoall.c

# 'make check-mpi' runs the MPI tests alone ('make check-mpi
# MPI_TESTS="order flood"' some of them)
check-mpi: $(MPI_TEST_BINS) test/bench/mpi_overlap test/bench/mpi_many_peers test/bench/mpi_halo src/uct/rc_tm/libuct_rc_tm.la
	@MPIRUN='$(MPIRUN)' \
	RC_TM_MODULE='$(abs_top_builddir)/src/uct/rc_tm/.libs/libuct_rc_tm.so' \
	RC_TM_MPI_BINDIR='$(abs_top_builddir)/test/mpi' \
	RC_TM_BENCH_BINDIR='$(abs_top_builddir)/test/bench' \
	$(SHELL) $(srcdir)/test/mpi/run_mpi_tests.sh $(MPI_TESTS)

# and once more with the software NIC's engine thread
# (UCX_RC_TM_SOFT_PROGRESS=thread): 'make check-mpi-thread'
check-mpi-thread: $(MPI_TEST_BINS) test/bench/mpi_overlap test/bench/mpi_many_peers test/bench/mpi_halo src/uct/rc_tm/libuct_rc_tm.la
	@MPIRUN='$(MPIRUN)' \
	RC_TM_MODULE='$(abs_top_builddir)/src/uct/rc_tm/.libs/libuct_rc_tm.so' \
	RC_TM_MPI_BINDIR='$(abs_top_builddir)/test/mpi' \
	RC_TM_BENCH_BINDIR='$(abs_top_builddir)/test/bench' \
	RC_TM_MPI_SOFT_PROGRESS=thread \
	$(SHELL) $(srcdir)/test/mpi/run_mpi_tests.sh $(MPI_TESTS)

# and wired up as on a cluster, by worker address over each auxiliary
# transport this UCX can use (test/aux_tls.sh):
# 'make check-mpi-aux'
check-mpi-aux: $(MPI_TEST_BINS) test/bench/mpi_overlap test/bench/mpi_many_peers test/bench/mpi_halo src/uct/rc_tm/libuct_rc_tm.la test/interpose/libsoftnic_verbs.la
	@rc=0; \
	auxs=$$($(SHELL) $(srcdir)/test/aux_tls.sh $(UCX_VERSION)) || exit 1; \
	for aux in $$auxs; do \
	    MPIRUN='$(MPIRUN)' \
	    RC_TM_MODULE='$(abs_top_builddir)/src/uct/rc_tm/.libs/libuct_rc_tm.so' \
	    RC_TM_INTERPOSER='$(abs_top_builddir)/test/interpose/.libs/libsoftnic_verbs.so' \
	    RC_TM_MPI_BINDIR='$(abs_top_builddir)/test/mpi' \
	    RC_TM_BENCH_BINDIR='$(abs_top_builddir)/test/bench' \
	    RC_TM_MPI_AUX=$$aux \
	    $(SHELL) $(srcdir)/test/mpi/run_mpi_tests.sh $(MPI_TESTS) || rc=1; \
	done; exit $$rc

check-local: check-mpi-after-tests
check-mpi-after-tests: check-TESTS
	@$(MAKE) $(AM_MAKEFLAGS) check-mpi
	@$(MAKE) $(AM_MAKEFLAGS) check-mpi-thread
	@$(MAKE) $(AM_MAKEFLAGS) check-mpi-aux

.PHONY: check-mpi check-mpi-thread check-mpi-aux check-mpi-after-tests

CLEANFILES += $(MPI_TEST_BINS) $(MPI_TEST_HELPER) test/mpi/*.mpilog
EXTRA_DIST += test/mpi/README.md test/mpi/run_mpi_tests.sh test/aux_tls.sh \
	test/mpi/rc_tm_check.h test/mpi/rc_tm_check.c \
	test/mpi/pingpong.c test/mpi/order.c test/mpi/anysrc.c \
	test/mpi/manyrecv.c test/mpi/flood.c test/mpi/cancel.c \
	test/mpi/probe.c test/mpi/ssend.c test/mpi/truncate.c \
	test/mpi/alltoall.c
