# docs/guide.md's table of settings comes from rc_tm's configuration
# tables: test/rc_tm_settings prints them, contrib/guide-settings.py writes
# the table ('make guide-settings') and checks it (make check).
check_PROGRAMS += test/rc_tm_settings
test_rc_tm_settings_SOURCES  = test/rc_tm_settings.c
test_rc_tm_settings_CPPFLAGS = $(src_uct_rc_tm_libuct_rc_tm_core_la_CPPFLAGS)
test_rc_tm_settings_LDADD    = src/uct/rc_tm/libuct_rc_tm.la $(UCX_LIBS)
test_rc_tm_settings_LDFLAGS  = -Wl,--no-as-needed

TESTS      += test/guide_settings_test.sh
EXTRA_DIST += test/guide_settings_test.sh contrib/guide-settings.py

guide-settings: test/rc_tm_settings
	test/rc_tm_settings | python3 $(srcdir)/contrib/guide-settings.py \
		--update $(srcdir)/docs/guide.md
.PHONY: guide-settings
