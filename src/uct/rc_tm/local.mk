# The rc_tm transport: the module UCX loads.
#
# Everything but the registration object goes into a convenience library, so
# that tests can link the same code into a module built for another UCX
# version (the version guard test).
noinst_LTLIBRARIES += src/uct/rc_tm/libuct_rc_tm_core.la
src_uct_rc_tm_libuct_rc_tm_core_la_SOURCES = \
	src/uct/rc_tm/rc_tm_compat.h \
	src/uct/rc_tm/rc_tm_compat.c \
	src/uct/rc_tm/rc_tm_md.h \
	src/uct/rc_tm/rc_tm_md.c \
	src/uct/rc_tm/rc_tm_mem.c \
	src/uct/rc_tm/rc_tm_iface.h \
	src/uct/rc_tm/rc_tm_iface.c \
	src/uct/rc_tm/rc_tm_progress.c \
	src/uct/rc_tm/rc_tm_counters.c \
	src/uct/rc_tm/rc_tm_report.c \
	src/uct/rc_tm/rc_tm_ep.h \
	src/uct/rc_tm/rc_tm_ep.c \
	src/uct/rc_tm/rc_tm_ep_send.c \
	src/uct/rc_tm/rc_tm_tag.h \
	src/uct/rc_tm/rc_tm_tag.c \
	src/uct/rc_tm/rc_tm_tag_list.c \
	src/uct/rc_tm/rc_tm_tag_rx.c
src_uct_rc_tm_libuct_rc_tm_core_la_CPPFLAGS = \
	$(AM_CPPFLAGS) $(UCX_INTERNAL_CPPFLAGS) $(UCX_CFLAGS)
src_uct_rc_tm_libuct_rc_tm_core_la_LIBADD = src/dev/libtm_dev.la \
	src/matcher/libtm_matcher.la

# Installed next to UCX's own modules.  The .so.0 name also lets UCX >= 1.21
# find it through UCX_PLUGIN_PATH.
uctmoduledir = $(UCX_MODULE_DIR)
uctmodule_LTLIBRARIES = src/uct/rc_tm/libuct_rc_tm.la
src_uct_rc_tm_libuct_rc_tm_la_SOURCES  = src/uct/rc_tm/rc_tm_component.c
src_uct_rc_tm_libuct_rc_tm_la_CPPFLAGS = $(src_uct_rc_tm_libuct_rc_tm_core_la_CPPFLAGS)
src_uct_rc_tm_libuct_rc_tm_la_LIBADD   = src/uct/rc_tm/libuct_rc_tm_core.la $(UCX_LIBS)
# -Bsymbolic-functions: the module's calls to its own functions (the
# device layer's poll and post, the matcher) are direct, not through the
# PLT; nothing interposes them
src_uct_rc_tm_libuct_rc_tm_la_LDFLAGS  = -version-info 0:0:0 -no-undefined \
	-Wl,--no-as-needed -Wl,-Bsymbolic-functions

# The same module, built as if for another UCX minor version: the version
# guard test loads it into this UCX and expects it to register nothing.
check_LTLIBRARIES += src/uct/rc_tm/libuct_rc_tm_otherver.la
src_uct_rc_tm_libuct_rc_tm_otherver_la_SOURCES  = src/uct/rc_tm/rc_tm_component.c
src_uct_rc_tm_libuct_rc_tm_otherver_la_CPPFLAGS = \
	$(src_uct_rc_tm_libuct_rc_tm_core_la_CPPFLAGS) \
	-URC_TM_UCX_MINOR -DRC_TM_UCX_MINOR=$(UCX_OTHER_MINOR)
src_uct_rc_tm_libuct_rc_tm_otherver_la_LIBADD   = $(src_uct_rc_tm_libuct_rc_tm_la_LIBADD)
src_uct_rc_tm_libuct_rc_tm_otherver_la_LDFLAGS  = -rpath /nowhere -module \
	-avoid-version -no-undefined
