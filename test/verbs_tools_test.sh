#!/bin/sh
# Standard verbs tools, unmodified (Debian's ibverbs-utils and perftest), on
# the software NIC through the test-only interposer (test/interpose):
#  1. ibv_rc_pingpong and ibv_srq_pingpong, server and client on localhost,
#     at a few sizes, polling, and with completion events (-e);
#     ibv_ud_pingpong likewise, up to the port's MTU (a datagram is one
#     packet), with a GRH (-g 0: the port requires one, and mlx5 refuses
#     an address handle without it where it does);
#  2. perftest's ib_send_lat, ib_send_bw, ib_write_lat, ib_write_bw,
#     ib_read_lat and ib_read_bw at a few sizes, up to the software NIC's
#     largest SEND (softnic.h max_send_size, 64 KiB by default) and a few
#     MiB for RDMA.
# Both sides of each pair must exit 0 and print their result line.  Every
# program runs under timeout: a hang fails the test.
set -u
build=${RC_TM_BUILDDIR:?}
ipose=$build/test/interpose/.libs/libsoftnic_verbs.so
dev=${RC_TM_SOFT_DEV:-soft}
tmo=${RC_TM_TOOL_TIMEOUT:-60}
fails=0 passes=0

[ -f "$ipose" ] || { echo "FAIL: $ipose not built"; exit 1; }
for p in ibv_rc_pingpong:ibverbs-utils ibv_srq_pingpong:ibverbs-utils \
         ibv_ud_pingpong:ibverbs-utils ib_send_lat:perftest; do
    command -v "${p%%:*}" >/dev/null || {
        echo "FAIL: ${p%%:*} not found: install Debian's ${p#*:} (contrib/setup.sh does)"
        exit 1
    }
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# free_port, listening, server_client
. "$(dirname "$0")/server_client.sh"

# name, regex of the result line, which sides print it (both, client), command...
pair() {
    name=$1 result=$2 sides=$3
    shift 3
    echo "run: $* (server and client, LD_PRELOAD=$ipose)"
    server_client "$ipose" "Couldn't listen to port" "$@"
    ok=1
    [ "$server_rc" -eq 0 ] || { ok=0; echo "  server exited $server_rc"; }
    [ "$client_rc" -eq 0 ] || { ok=0; echo "  client exited $client_rc"; }
    grep -Eq "$result" "$tmp/client.out" || { ok=0; echo "  client printed no result line"; }
    if [ "$sides" = both ]; then
        grep -Eq "$result" "$tmp/server.out" || { ok=0; echo "  server printed no result line"; }
    fi
    if [ $ok -eq 1 ]; then
        passes=$((passes + 1)); echo "PASS: $name"
        grep -Eh "$result" "$tmp/client.out" | sed 's/^/  client: /'
    else
        fails=$((fails + 1)); echo "FAIL: $name"
        grep -v ' address' "$tmp/server.out" | sed 's/^/  server: /' | tail -n 15
        grep -v ' address' "$tmp/client.out" | sed 's/^/  client: /' | tail -n 15
    fi
}

pp_result='[0-9]+ iters in [0-9.]+ seconds = [0-9.]+ usec/iter'
for tool in ibv_rc_pingpong ibv_srq_pingpong; do
    for size in 1 4096 65536; do
        pair "$tool -s $size" "$pp_result" both \
             "$tool" -d "$dev" -g 0 -s "$size" -n 20
    done
done
# ibv_srq_pingpong posts up to num_qp - 1 replies past its iterations,
# which the peer exits without taking: they must fail only once the QP's
# retries run out, after the run, as on a NIC (docs/verbs-device.md row 31)
for tool in ibv_rc_pingpong ibv_srq_pingpong; do
    pair "$tool -s 4096 -e (completion events)" "$pp_result" both \
         "$tool" -d "$dev" -g 0 -s 4096 -n 20 -e
done

for size in 1 2048 4096; do
    pair "ibv_ud_pingpong -s $size" "$pp_result" both \
         ibv_ud_pingpong -d "$dev" -g 0 -s "$size" -n 20
done
pair "ibv_ud_pingpong -s 2048 -e (completion events)" "$pp_result" both \
     ibv_ud_pingpong -d "$dev" -g 0 -s 2048 -n 20 -e

# perftest prints a row "#bytes #iterations figures..." per size.  The
# software NIC reports mlx5's vendor ids (ConnectX-5), for which perftest
# posts through the extended QP's ibv_wr_* API (ibv_create_qp_ex with send
# ops, softnic_qp_ex.c): every tool runs so, and ib_send_bw and ib_write_bw
# once more with --use_old_post_send (ibv_post_send), so both paths run.
# Debian 13's perftest first asks mlx5dv for the device's capabilities on
# that path, which only mlx5's provider answers ("Failed to query device
# capabilities, ret=95"): there every tool runs with --use_old_post_send
# and the default path is said not run.
pt_result() { # size iterations
    printf '^ *%s +%s +[0-9.]+' "$1" "$2"
}
iters=20
path=
server_client "$ipose" "Couldn't listen to port" ib_send_bw -d "$dev" -x 0 -s 2 -n "$iters"
if grep -q 'Failed to query device capabilities' "$tmp/server.out"; then
    path=--use_old_post_send
    echo "NOT RUN (this perftest asks mlx5dv, which only mlx5 answers): perftest's ibv_wr_* path; the tools run with $path"
fi
for tool in ib_send_lat ib_send_bw; do
    for size in 2 4096 65536; do
        pair "$tool -s $size $path" "$(pt_result "$size" "$iters")" both \
             "$tool" -d "$dev" -x 0 -s "$size" -n "$iters" $path
    done
done
for tool in ib_write_lat ib_write_bw ib_read_lat ib_read_bw; do
    for size in 2 65536 4194304; do
        pair "$tool -s $size $path" "$(pt_result "$size" "$iters")" client \
             "$tool" -d "$dev" -x 0 -s "$size" -n "$iters" $path
    done
done
if [ -z "$path" ]; then
    pair "ib_send_bw -s 4096 --use_old_post_send" \
         "$(pt_result 4096 "$iters")" both \
         ib_send_bw -d "$dev" -x 0 -s 4096 -n "$iters" --use_old_post_send
    pair "ib_write_bw -s 65536 --use_old_post_send" \
         "$(pt_result 65536 "$iters")" client \
         ib_write_bw -d "$dev" -x 0 -s 65536 -n "$iters" --use_old_post_send
fi

echo "$passes passed, $fails failed"
[ "$fails" -eq 0 ]
