# Installation extras and packaging: the environment file and wrapper that
# load the installed module, 'make installcheck', and what 'make distcheck'
# needs.  The module itself is installed by src/uct/rc_tm/local.mk.

# . $(pkgdatadir)/rc_tm-env.sh: LD_PRELOAD of the installed module, UCX_TLS
pkgdata_DATA = contrib/rc_tm-env.sh
# rc_tm-run PROGRAM: the same for one command
bin_SCRIPTS  = contrib/rc_tm-run

# Installed paths are substituted at make time (they follow 'make prefix=')
rc_tm_edit = $(SED) \
	-e 's|@uctmoduledir[@]|$(uctmoduledir)|g' \
	-e 's|@pkgdatadir[@]|$(pkgdatadir)|g' \
	-e 's|@UCX_VERSION[@]|$(UCX_VERSION)|g'

contrib/rc_tm-env.sh contrib/rc_tm-run: Makefile
	$(AM_V_GEN)$(MKDIR_P) contrib && rm -f $@ $@.tmp && \
	$(rc_tm_edit) $(srcdir)/$@.in > $@.tmp && \
	chmod a-w $@.tmp && mv $@.tmp $@
contrib/rc_tm-env.sh: $(srcdir)/contrib/rc_tm-env.sh.in
contrib/rc_tm-run: $(srcdir)/contrib/rc_tm-run.in

CLEANFILES += contrib/rc_tm-env.sh contrib/rc_tm-run

# Named one by one: the build tree has generated files in contrib/ too
EXTRA_DIST += contrib/setup.sh contrib/build-deb.sh contrib/debian \
	contrib/build-ucx.sh contrib/debian-root.sh \
	contrib/rc_tm-env.sh.in contrib/rc_tm-run.in

# UCX's module directory holds shared objects only: no libtool archive, so
# 'make uninstall' removes the shared objects by name.
install-data-hook:
	rm -f $(DESTDIR)$(uctmoduledir)/libuct_rc_tm.la
uninstall-hook:
	rm -f $(DESTDIR)$(uctmoduledir)/libuct_rc_tm.so \
	      $(DESTDIR)$(uctmoduledir)/libuct_rc_tm.so.0 \
	      $(DESTDIR)$(uctmoduledir)/libuct_rc_tm.so.0.0.0

# 'make installcheck': the installed module registers into UCX (ucx_info),
# the environment file and the wrapper load it, and an MPI program passes
# over it with the README's mpirun line.  The environment file names the
# final paths, so with DESTDIR only the module itself is checked.
installcheck-local: $(MPI_TEST_BINS)
	@module='$(DESTDIR)$(uctmoduledir)/libuct_rc_tm.so'; \
	echo "installcheck: LD_PRELOAD=$$module $(UCX_INFO) -d"; \
	LD_PRELOAD=$$module $(UCX_INFO) -d | grep -q '^# *Transport: rc_tm$$' || \
	    { echo "FAIL: $$module does not register rc_tm"; exit 1; }; \
	if test -z '$(DESTDIR)'; then \
	    echo "installcheck: . $(pkgdatadir)/rc_tm-env.sh; $(UCX_INFO) -d"; \
	    (. '$(pkgdatadir)/rc_tm-env.sh' && \
	     test "$$UCX_TLS" = rc_tm && \
	     $(UCX_INFO) -d | grep -q '^# *Transport: rc_tm$$') || \
	        { echo "FAIL: rc_tm-env.sh does not load rc_tm"; exit 1; }; \
	    echo "installcheck: $(bindir)/rc_tm-run $(UCX_INFO) -d"; \
	    '$(bindir)/rc_tm-run' $(UCX_INFO) -d | \
	        grep -q '^# *Transport: rc_tm$$' || \
	        { echo "FAIL: rc_tm-run does not load rc_tm"; exit 1; }; \
	fi; \
	MPIRUN='$(MPIRUN)' RC_TM_MODULE=$$module \
	RC_TM_MPI_BINDIR='$(abs_top_builddir)/test/mpi' \
	$(SHELL) $(srcdir)/test/mpi/run_mpi_tests.sh pingpong

# distcheck builds from the tarball, which has no .deps/: it needs the UCX
# source, and the module directory under its temporary prefix (make expands
# ${libdir})
AM_DISTCHECK_CONFIGURE_FLAGS = --with-ucx-src='$(UCX_SRC)' \
	--with-module-dir='$${libdir}/ucx'

# setup.sh's deb-src entry, derived from apt's sources (fake apt directories)
TESTS      += test/setup_test.sh
EXTRA_DIST += test/setup_test.sh
