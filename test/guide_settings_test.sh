#!/bin/sh
# docs/guide.md's table of UCX_RC_TM_* settings is rc_tm's configuration
# table: every setting, its default and description, each with when to
# change it, and UCX's own settings under rc_tm's prefix listed.  A setting
# added, removed or changed without the guide fails here; 'make
# guide-settings' rewrites the table (contrib/guide-settings.py).
b=${RC_TM_BUILDDIR:?} s=${RC_TM_SRCDIR:?}
settings=$("$b/test/rc_tm_settings") || {
    echo "FAIL: $b/test/rc_tm_settings did not run"; exit 1; }
printf '%s\n' "$settings" | python3 "$s/contrib/guide-settings.py" \
    --check "$s/docs/guide.md"
