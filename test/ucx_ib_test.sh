#!/bin/sh
# UCX's own ib transports (ud_verbs, rc_verbs; Debian's libuct_ib, or the
# UCX of RC_TM_UCX) on the software NIC, through the test-only interposer
# (test/interpose), with the device node UCX looks for provided by
# test/softnic_dev_node.sh:
#  1. ucx_info -d lists ud_verbs and rc_verbs on soft:1, no mlx5 transport,
#     and prints no error or warning; with rc_tm preloaded as well, rc_tm's
#     soft:1 is listed once;
#  2. ucx_perftest, server and client: UCX_TLS=ud_verbs (UCT am_lat, UCP
#     tag_lat and tag_bw) and UCX_TLS=rc_v (rc_verbs, ud_verbs as the
#     auxiliary transport: tag_lat, tag_bw);
#  3. rc_tm with the interposer loaded: UCX_TLS=rc_tm alone (its extension
#     connects to the remote interface: rc_tm has the software NIC itself,
#     not the interposer's copy), and with the extension withheld
#     (UCX_RC_TM_SOFT_CONNECT_TO_SRQ=n) wired up by worker address over
#     ud_verbs as UCP's auxiliary transport (UCX_TLS=rc_tm,ud_verbs:aux):
#     tag_lat at 4 KiB and tag_bw at 64 KiB, whose tag lanes are rc_tm's
#     and whose tags the device matched (the receivers' rc_tm counters
#     RX_EXP, RX_RNDV_EXP or RX_RNDV_REQ_EXP).
# Every program runs under timeout; a missing program or device node is a
# failure, never a skip.
set -u
build=${RC_TM_BUILDDIR:?}
srcdir=${RC_TM_SRCDIR:?}

# The whole test where the device node exists (its own mount namespace
# when it must be made): a failure to provide it fails the test
if [ -z "${RC_TM_UCX_IB_NODE:-}" ]; then
    RC_TM_UCX_IB_NODE=1 exec sh "$srcdir/test/softnic_dev_node.sh" \
        sh "$0" "$@"
fi

ipose=$build/test/interpose/.libs/libsoftnic_verbs.so
module=$build/src/uct/rc_tm/.libs/libuct_rc_tm.so
ucx_info=$(command -v "${RC_TM_UCX_INFO:-ucx_info}") || {
    echo "FAIL: ucx_info not found: install Debian's ucx-utils (contrib/setup.sh does)"
    exit 1
}
perftest=$(dirname "$ucx_info")/ucx_perftest
tmo=${RC_TM_UCX_IB_TIMEOUT:-60}
fails=0 passes=0

for f in "$ipose" "$module" "$perftest"; do
    [ -e "$f" ] || { echo "FAIL: $f not found"; exit 1; }
done
version=$("$ucx_info" -v | sed -n -e 's/^# Version \([0-9.]*\).*/\1/p' \
          -e 's/^# Library version: \([0-9.]*\).*/\1/p')
echo "UCX $version ($ucx_info)"
# A ucx_perftest built with MPI (Debian 13's) runs as an MPI job of one
# rank unless told -P 0, and then refuses a server and client pair
mpi_off=
if "$perftest" -h 2>&1 | grep -q 'MPI mode'; then
    mpi_off="-P 0"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# What every run shares: only the software NIC's port, no warning about a
# variable a UCX version does not know
UCX_NET_DEVICES=soft:1
UCX_WARN_UNUSED_ENV_VARS=n
export UCX_NET_DEVICES UCX_WARN_UNUSED_ENV_VARS

check() { # name, command...
    name=$1; shift
    if "$@"; then
        passes=$((passes + 1)); echo "PASS: $name"
    else
        fails=$((fails + 1)); echo "FAIL: $name"
    fi
}

# free_port, listening, server_client
. "$srcdir/test/server_client.sh"

# ucx_perftest server and client with arguments "$@"; the environment of
# both: LD_PRELOAD=$preload; outputs in $tmp/server.out and client.out
perf() {
    # shellcheck disable=SC2086
    server_client "$preload" 'bind() failed' "$perftest" $mpi_off "$@"
    perf_result
}

perf_result() {
    ok=1
    [ "$server_rc" -eq 0 ] || { ok=0; echo "  server exited $server_rc"; }
    [ "$client_rc" -eq 0 ] || { ok=0; echo "  client exited $client_rc"; }
    grep -q '^Final:' "$tmp/client.out" || { ok=0; echo "  client printed no result"; }
    if [ $ok -eq 1 ]; then
        grep -h '^Final:' "$tmp/client.out" | sed 's/^/  /'
    else
        for side in server client; do
            grep -v '^[|+]' "$tmp/$side.out" | tail -n 15 | sed "s/^/  $side: /"
        done
    fi
    [ $ok -eq 1 ]
}

# A receiver's (either side's) rc_tm counter matching $1 above 0 (printed
# when its interface closes, UCX_LOG_LEVEL=debug)
counted() {
    cat "$tmp/server.out" "$tmp/client.out" |
        grep -E "rc_tm iface [^ ]*: ($1) [1-9]" >/dev/null ||
        { echo "  no $1 counted: the device matched no tag"; return 1; }
}

# The tag lanes are rc_tm's, and (UCX 1.18 on, UCX_PROTO_INFO) no
# protocol (a table row of a message size range) runs over ud_verbs
tag_lanes_rc_tm() {
    out=$(cat "$tmp/server.out" "$tmp/client.out")
    printf '%s\n' "$out" | grep -q 'tag(rc_tm/soft:1)' ||
        { echo "  no tag lane of rc_tm/soft:1"; return 1; }
    bad=$(printf '%s\n' "$out" |
          grep -E -e ' tag\(' -e '\| *[0-9]+\.\.([0-9]+|inf) *\|' |
          grep ud_verbs)
    if [ -n "$bad" ]; then
        echo "  ud_verbs carries tagged messages:"
        printf '%s\n' "$bad" | head -n 5 | sed 's/^/    /'
        return 1
    fi
}

# ---- 1. ucx_info ----
preload=$ipose
out=$(LD_PRELOAD=$preload "$ucx_info" -d 2>&1); rc=$?
check "ucx_info -d exits 0" test "$rc" -eq 0
for tl in ud_verbs rc_verbs; do
    check "ucx_info -d lists $tl on soft:1" \
          sh -c 'printf "%s\n" "$1" | grep -A1 "Transport: $2\$" |
                 grep -q "Device: soft:1\$"' - "$out" "$tl"
done
check "ucx_info -d lists no mlx5 transport (mlx5dv_is_supported says no)" \
      sh -c '! printf "%s\n" "$1" | grep -q "Transport: [a-z]*_mlx5"' - "$out"
check "ucx_info -d prints no error or warning" \
      sh -c '! printf "%s\n" "$1" | grep -E " (ERROR|WARN) "' - "$out"
preload=$module:$ipose
out=$(LD_PRELOAD=$preload "$ucx_info" -d 2>&1)
check "with rc_tm: rc_tm lists soft:1 once" \
      sh -c '[ "$(printf "%s\n" "$1" | grep -c "Transport: rc_tm$")" -eq 1 ] &&
             printf "%s\n" "$1" | grep -A1 "Transport: rc_tm$" |
             grep -q "Device: soft:1$"' - "$out"

# ---- 2. UCX's ud_verbs and rc_verbs ----
preload=$ipose
export UCX_TLS=ud_verbs
check "ud_verbs: UCT am_lat" perf -x ud_verbs -d soft:1 -t am_lat -w 100 -n 2000
check "ud_verbs: tag_lat" perf -t tag_lat -w 100 -n 2000
check "ud_verbs: tag_bw 64 KiB" perf -t tag_bw -s 65536 -w 10 -n 200
export UCX_TLS=rc_v
check "rc_v (rc_verbs, ud_verbs:aux): tag_lat" perf -t tag_lat -w 100 -n 2000
check "rc_v (rc_verbs, ud_verbs:aux): tag_bw 1 MiB" \
      perf -t tag_bw -s 1048576 -w 10 -n 100

# ---- 3. rc_tm beside the interposer ----
preload=$module:$ipose
export UCX_TLS=rc_tm
check "rc_tm alone (the extension): tag_lat" perf -t tag_lat -w 100 -n 2000
export UCX_TLS=rc_tm,ud_verbs:aux UCX_RC_TM_SOFT_CONNECT_TO_SRQ=n
export UCX_LOG_LEVEL=debug UCX_PROTO_INFO=y
aux_lat() {
    perf -t tag_lat -s 4096 -w 100 -n 2000 && tag_lanes_rc_tm &&
        counted RX_EXP
}
# a rendezvous the device matched: its own (RX_RNDV_EXP), or software's
# request (RX_RNDV_REQ_EXP: UCX 1.22's protocol for tag_bw)
aux_bw() {
    perf -t tag_bw -s 65536 -w 10 -n 200 && tag_lanes_rc_tm &&
        counted 'RX_RNDV_EXP|RX_RNDV_REQ_EXP'
}
check "rc_tm,ud_verbs:aux: tag_lat 4 KiB (rc_tm's lanes, tags matched by the device)" \
      aux_lat
check "rc_tm,ud_verbs:aux: tag_bw 64 KiB (rc_tm's lanes, tags matched by the device)" \
      aux_bw
unset UCX_LOG_LEVEL UCX_PROTO_INFO UCX_RC_TM_SOFT_CONNECT_TO_SRQ UCX_TLS

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
