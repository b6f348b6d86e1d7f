#!/bin/sh
# The module as users load it: LD_PRELOAD into Debian's stock ucx_info.
#  1. ucx_info -d lists component, memory domain and transport rc_tm, on
#     device soft:1 (device:port, as UCX names its ib devices), and neither
#     with UCX_RC_TM_SOFT=n (no NIC here: ucx_info then shows no rc_tm);
#  2. ucx_info -c lists its configuration variables (UCX_RC_TM_*);
#  3. a module built for another UCX version registers nothing, prints one
#     error naming both versions, and ucx_info still succeeds.
set -u
build=${RC_TM_BUILDDIR:?}
ucx_info=${RC_TM_UCX_INFO:-ucx_info}
module=$build/src/uct/rc_tm/.libs/libuct_rc_tm.so
other=$build/src/uct/rc_tm/.libs/libuct_rc_tm_otherver.so
fails=0 passes=0

check() { # name, command...
    name=$1; shift
    if "$@"; then passes=$((passes + 1)); echo "PASS: $name"
    else fails=$((fails + 1)); echo "FAIL: $name"; fi
}

out=$(LD_PRELOAD=$module "$ucx_info" -d 2>&1)
check "ucx_info -d lists Component: rc_tm" \
      sh -c 'printf "%s\n" "$1" | grep -q "Component: rc_tm"' - "$out"
check "ucx_info -d lists Memory domain: soft" \
      sh -c 'printf "%s\n" "$1" | grep -q "Memory domain: soft"' - "$out"
check "ucx_info -d lists Transport: rc_tm" \
      sh -c 'printf "%s\n" "$1" | grep -q "Transport: rc_tm"' - "$out"
check "ucx_info -d lists Device: soft:1" \
      sh -c 'printf "%s\n" "$1" | grep -q "Device: soft:1$"' - "$out"

out=$(UCX_RC_TM_SOFT=n LD_PRELOAD=$module "$ucx_info" -d 2>&1); rc=$?
check "UCX_RC_TM_SOFT=n: ucx_info exits 0" test "$rc" -eq 0
check "UCX_RC_TM_SOFT=n: no Memory domain: soft, no Transport: rc_tm" \
      sh -c '! printf "%s\n" "$1" | grep -q "Memory domain: soft\|Transport: rc_tm"' - "$out"

out=$(LD_PRELOAD=$module "$ucx_info" -c 2>&1)
check "ucx_info -c lists UCX_RC_TM_LIST_SIZE" \
      sh -c 'printf "%s\n" "$1" | grep -q "^UCX_RC_TM_LIST_SIZE="' - "$out"
check "ucx_info -c lists UCX_RC_TM_SEG_SIZE" \
      sh -c 'printf "%s\n" "$1" | grep -q "^UCX_RC_TM_SEG_SIZE="' - "$out"
check "ucx_info -c lists UCX_RC_TM_SOFT=auto" \
      sh -c 'printf "%s\n" "$1" | grep -q "^UCX_RC_TM_SOFT=auto$"' - "$out"
check "ucx_info -c lists UCX_RC_TM_FORK_INIT=try" \
      sh -c 'printf "%s\n" "$1" | grep -q "^UCX_RC_TM_FORK_INIT=try$"' - "$out"

running=$("$ucx_info" -v | sed -n 's/^# Version \([0-9.]*\).*/\1/p')
out=$(LD_PRELOAD=$other "$ucx_info" -d 2>&1); rc=$?
check "other-version module: ucx_info exits 0" test "$rc" -eq 0
check "other-version module: rc_tm not registered" \
      sh -c '! printf "%s\n" "$1" | grep -q "rc_tm"' - \
      "$(printf '%s\n' "$out" | grep -v '^\[rc_tm\]')"
check "other-version module: one error naming both versions" \
      sh -c '[ "$(printf "%s\n" "$1" | grep -c "^\[rc_tm\] UCX ERROR.*built for UCX [0-9.]*, but this process runs UCX $2")" -eq 1 ]' \
      - "$out" "$running"

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
