#!/bin/sh
# Runs the MPI test programs of test/mpi under mpirun with the rc_tm module
# of this build tree; prints PASS/FAIL per program and "N passed, M failed",
# exits non-zero if any failed.  See test/mpi/README.md.
#
# Environment (set by 'make check-mpi'):
#   MPIRUN             mpirun of Open MPI 4.1 (pml ucx)
#   RC_TM_MODULE       the module to LD_PRELOAD (.../.libs/libuct_rc_tm.so)
#   RC_TM_MPI_BINDIR   where the programs are (and their logs go)
#   RC_TM_BENCH_BINDIR where test/bench/mpi_overlap, mpi_many_peers and
#                      mpi_halo are (default: BINDIR/../bench)
#   RC_TM_MPI_TIMEOUT  seconds one program may take (default 120)
#   RC_TM_MPI_SOFT_PROGRESS  inline or thread: UCX_RC_TM_SOFT_PROGRESS of
#                      the ranks (default: UCX's default); the checks of
#                      the checks (nomodule, othertransport) run without it
#   RC_TM_MPI_AUX      tcp, posix or ud_verbs: rc_tm wired up as on a
#                      cluster, endpoint to endpoint by worker address over
#                      that auxiliary transport (UCX_TLS=rc_tm,AUX:aux,
#                      UCX_RC_TM_SOFT_CONNECT_TO_SRQ=n); ud_verbs runs on the
#                      software NIC through the test interposer
#                      (RC_TM_INTERPOSER); the checks of the checks and
#                      overlap_sm run without it
#   RC_TM_INTERPOSER   libsoftnic_verbs.so (test/interpose), for ud_verbs
# Arguments: names of the tests to run (default: all).

MPIRUN=${MPIRUN:-mpirun}
BINDIR=${RC_TM_MPI_BINDIR:-.}
BENCHDIR=${RC_TM_BENCH_BINDIR:-$BINDIR/../bench}
TIMEOUT=${RC_TM_MPI_TIMEOUT:-120}
MODULE=${RC_TM_MODULE:?RC_TM_MODULE must name libuct_rc_tm.so}
PROGRESS=${RC_TM_MPI_SOFT_PROGRESS:-}
if [ -n "$PROGRESS" ]; then
    echo "MPI tests with UCX_RC_TM_SOFT_PROGRESS=$PROGRESS"
fi

# What carries the tagged messages: UCX_TLS and what is preloaded
AUX=${RC_TM_MPI_AUX:-}
TLS=rc_tm
PRELOAD=$MODULE
WRAP=
NET_DEVICES=
if [ -n "$AUX" ]; then
    TLS="rc_tm,$AUX:aux"
    if [ "$AUX" = ud_verbs ]; then
        # UCX's own ud_verbs on the software NIC: the interposer, and the
        # device node UCX's ib md looks for (mpirun and its ranks in a
        # mount namespace that has it)
        PRELOAD="$MODULE:${RC_TM_INTERPOSER:?RC_TM_INTERPOSER must name libsoftnic_verbs.so for ud_verbs}"
        WRAP="sh $(dirname "$0")/../softnic_dev_node.sh"
        # and the port named, as the README's cluster line names mlx5_0:1
        NET_DEVICES="-x UCX_NET_DEVICES=soft:1"
    fi
    echo "MPI tests with UCX_TLS=$TLS and UCX_RC_TM_SOFT_CONNECT_TO_SRQ=n (wired up by worker address over $AUX)"
fi

# The mpirun line (test/mpi/README.md says why each option is there)
mpi_run() {
    np=$1; shift
    $WRAP timeout -k 10 "$TIMEOUT" "$MPIRUN" \
        --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any \
        --mca btl self --mca mpi_yield_when_idle 1 \
        --allow-run-as-root --oversubscribe --bind-to none \
        -np "$np" "$@" </dev/null
}

# name  ranks  program  extra mpirun arguments
TESTS_LIST='
pingpong       3 pingpong
order          2 order
anysrc         4 anysrc
manyrecv       2 manyrecv  -x UCX_RC_TM_LIST_SIZE=16
flood          4 flood
cancel         2 cancel
probe          3 probe
ssend          2 ssend
truncate       2 truncate
alltoall       8 alltoall
overlap        2 mpi_overlap
overlap_sm     2 mpi_overlap
many_peers     8 mpi_many_peers
halo           4 mpi_halo
halo_pair      2 mpi_halo
nomodule       2 pingpong
othertransport 2 pingpong
'

# overlap and overlap_sm: the overlap benchmark (test/bench/mpi_overlap)
# at a few iterations, over rc_tm and over sm, not timed: it must complete,
# receive the right data (it checks it), and print well-formed figures.
OVERLAP_ARGS='-R -r 2 -n 3 -w 2 -b 0.001 -f 20 -s 8,64k,1m,4m'
OVERLAP_SIZES='8 65536 1048576 4194304'
OVERLAP_REPS=2
OVERLAP_FLOOR=20

# many_peers: the many-peers benchmark (test/bench/mpi_many_peers), not
# timed: ranks 2.. stay idle while 0 and 1 exchange long enough for their
# rings from the idle ranks to be parked, then every pair exchanges again
# (the parked rings must wake); it checks every payload and must print
# well-formed figures
PEERS_ARGS='-R -r 2 -n 3000'

# halo and halo_pair: the halo exchange benchmark (test/bench/mpi_halo)
# over a ring of 4 ranks and of 2 (both neighbours the same rank, its two
# halos told apart by their tags), a few steps, not timed: every halo
# received is checked (-C), rc_tm must carry the tagged messages, and the
# figures must be well formed
HALO_ARGS='-R -r 2 -n 20 -w 5 -C -s 1k,16k,256k'
HALO_SIZES='1024 16384 262144'

# Why the output of mpi_halo $HALO_ARGS is not what it must be (nothing
# when it is): for every size and repetition one line of a positive step
# time, and the OK line
check_halo_output() {
    awk -v sizes="$HALO_SIZES" -v reps=2 '
        BEGIN { n = split(sizes, want, " ") }
        /^# mpi_halo: OK$/ { ok = 1 }
        /^[0-9]/ {
            f = split($0, v, ",")
            if (f != 3 || v[3] !~ /^[0-9]+\.[0-9]+$/ || v[3] + 0 <= 0) {
                print "not a size, a repetition and a step time: " $0
                bad = 1; next
            }
            if (seen[v[1] "," v[2]]++) { print "twice: " $0; bad = 1 }
            rows++
        }
        END {
            for (i = 1; i <= n; i++)
                for (r = 1; r <= reps; r++)
                    if (!((want[i] "," r) in seen)) {
                        print "no figure for size " want[i] " repetition " r
                        bad = 1
                    }
            if (rows != n * reps) { print rows " figure lines, not " n * reps; bad = 1 }
            if (!ok) { print "no OK line"; bad = 1 }
            exit bad
        }' "$1" | head -n 5
}

# Why the output of mpi_overlap $OVERLAP_ARGS is not what it must be
# (nothing when it is): the header, for every size and repetition one line
# of three positive figures, the busy loop at least a quarter of its floor
# (a loop the compiler removed would take nothing), the closing OK line.
check_overlap_output() {
    awk -v sizes="$OVERLAP_SIZES" -v reps=$OVERLAP_REPS \
        -v floor=$OVERLAP_FLOOR '
        BEGIN { n = split(sizes, want, " ") }
        /^# size,repetition,transfer_us,compute_us,total_us$/ { header = 1 }
        /^# mpi_overlap: OK$/ { ok = 1 }
        /^[0-9]/ {
            f = split($0, v, ",")
            if (f != 5) { print "not 5 fields: " $0; bad = 1; next }
            for (i = 3; i <= 5; i++)
                if (v[i] !~ /^[0-9]+\.[0-9]+$/ || v[i] + 0 <= 0) {
                    print "not a positive figure: " $0; bad = 1; next
                }
            if (v[4] < floor / 4) {
                print "busy loop shorter than a quarter of " floor " us: " $0
                bad = 1
            }
            if (seen[v[1] "," v[2]]++) { print "twice: " $0; bad = 1 }
            rows++
        }
        END {
            if (!header) { print "no header line"; bad = 1 }
            for (i = 1; i <= n; i++)
                for (r = 1; r <= reps; r++)
                    if (!((want[i] "," r) in seen)) {
                        print "no figures for size " want[i] " repetition " r
                        bad = 1
                    }
            if (rows != n * reps) { print rows " figure lines, not " n * reps; bad = 1 }
            if (!ok) { print "no OK line"; bad = 1 }
            exit bad
        }' "$1" | head -n 5
}

# Every rank over rc_tm runs with the offload report on (UCX_RC_TM_REPORT=y):
# each prints one report when its interface closes.  Why the log's reports
# are not what they must be (nothing when they are): one per rank, each with
# advice (or saying it saw no tagged traffic), and the advice the program's
# workload must get (expect_advice).
check_reports() {
    n=$(grep -c 'rc_tm offload report, ' "$1")
    if [ "$n" != "$2" ]; then
        echo "$n offload reports, not $2 (one per rank)"
        return
    fi
    # the ranks' lines may interleave: each report by its [host:pid:thread]
    awk '{ key = $0; sub(/^\[[^]]*\] \[/, "", key); sub(/\].*/, "", key) }
         /rc_tm offload report, / { seen[key] = 1 }
         /  (advice: |no tagged message arrived)/ { advised[key] = 1 }
         END { for (k in seen) if (!(k in advised)) bad = 1; exit bad }' "$1" ||
        echo "a report without advice"
    want=$(expect_advice "$3")
    if [ -n "$want" ] && ! grep -qF "$want" "$1"; then
        echo "no report advises '$want'"
    fi
}

# The advice a program's workload must get from the report
expect_advice() {
    case $1 in
    manyrecv) echo 'because the device list (16) was full: raise UCX_RC_TM_LIST_SIZE' ;;
    *)        echo '' ;;
    esac
}

# The last two check the checks: they must fail, and say why.
#   nomodule: no LD_PRELOAD (UCX over tcp): "rc_tm module is not loaded"
#   othertransport: module loaded, but UCX_TLS=tcp carries the traffic: the
#     counter check must catch it
expect_failure() {
    case $1 in
    nomodule)       echo 'rc_tm module is not loaded' ;;
    othertransport) echo 'tag offload not used' ;;
    *)              echo '' ;;
    esac
}

if [ ! -f "$MODULE" ]; then
    echo "FAIL: rc_tm module $MODULE not found (build it first)"
    echo "0 passed, 1 failed"
    exit 1
fi
if ! command -v "$MPIRUN" >/dev/null 2>&1; then
    echo "FAIL: $MPIRUN not found: install openmpi-bin libopenmpi-dev"
    echo "0 passed, 1 failed"
    exit 1
fi

npass=0
nfail=0
failed=
start_all=$(date +%s)
while read -r name np prog extra; do
    [ -n "$name" ] || continue
    if [ $# -gt 0 ]; then
        case " $* " in *" $name "*) ;; *) continue ;; esac
    fi
    if [ -n "$PROGRESS$AUX" ]; then
        case $name in nomodule|othertransport|overlap_sm) continue ;; esac
    fi
    # the engine works even without a CPU of its own: these runs test it
    [ -z "$PROGRESS" ] || extra="-x UCX_RC_TM_SOFT_PROGRESS=$PROGRESS -x UCX_RC_TM_SOFT_ENGINE_ASIDE=n $extra"
    [ -z "$AUX" ] || extra="-x UCX_RC_TM_SOFT_CONNECT_TO_SRQ=n ${NET_DEVICES:-} $extra"
    log="$BINDIR/$name${PROGRESS:+.$PROGRESS}${AUX:+.$AUX}.mpilog"
    expect=$(expect_failure "$name")
    t0=$(date +%s)
    case $name in
    nomodule)
        # shellcheck disable=SC2086
        mpi_run "$np" -x UCX_TLS=tcp $extra "$BINDIR/$prog" >"$log" 2>&1 ;;
    othertransport)
        # shellcheck disable=SC2086
        mpi_run "$np" -x LD_PRELOAD="$MODULE" -x UCX_TLS=tcp $extra \
            "$BINDIR/$prog" >"$log" 2>&1 ;;
    overlap|overlap_sm)
        # UCX's log names the transports of the endpoints: rc_tm must
        # carry the tagged messages of the first
        tls=$TLS
        [ "$name" = overlap_sm ] && tls=sm
        # shellcheck disable=SC2086
        mpi_run "$np" -x LD_PRELOAD="$PRELOAD" -x UCX_TLS=$tls \
            -x UCX_LOG_LEVEL=info -x UCX_RC_TM_REPORT=y $extra \
            "$BENCHDIR/$prog" $OVERLAP_ARGS >"$log" 2>&1 ;;
    many_peers)
        # shellcheck disable=SC2086
        mpi_run "$np" -x LD_PRELOAD="$PRELOAD" -x UCX_TLS=$TLS \
            -x UCX_RC_TM_REPORT=y $extra \
            "$BENCHDIR/$prog" $PEERS_ARGS >"$log" 2>&1 ;;
    halo|halo_pair)
        # shellcheck disable=SC2086
        mpi_run "$np" -x LD_PRELOAD="$PRELOAD" -x UCX_TLS=$TLS \
            -x UCX_LOG_LEVEL=info -x UCX_RC_TM_REPORT=y $extra \
            "$BENCHDIR/$prog" $HALO_ARGS >"$log" 2>&1 ;;
    *)
        # shellcheck disable=SC2086
        mpi_run "$np" -x LD_PRELOAD="$PRELOAD" -x UCX_TLS=$TLS \
            -x UCX_RC_TM_REPORT=y $extra \
            "$BINDIR/$prog" >"$log" 2>&1 ;;
    esac
    rc=$?
    t1=$(date +%s)
    why=
    if [ -z "$expect" ]; then
        if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
            why="timed out after ${TIMEOUT}s"
        elif [ $rc -ne 0 ]; then
            why="exit status $rc"
        elif [ "$prog" = mpi_overlap ]; then
            why=$(grep -v '^\[' "$log" | check_overlap_output /dev/stdin)
            # UCX 1.13 logs an endpoint's lanes as "ep_cfg[1]: tag(...)",
            # 1.18 and later as "... cfg#1 tag(...)"
            if [ -z "$why" ] && [ "$name" = overlap ] &&
                ! grep -qE '(ep_cfg\[[0-9]*\]:|cfg#[0-9]*) tag\(rc_tm/' "$log"; then
                why="UCX's log names no rc_tm endpoint for tagged messages"
            fi
            [ -z "$why" ] || why="output: $(echo "$why" | tr '\n' ';')"
        elif [ "$prog" = mpi_halo ]; then
            why=$(grep -v '^\[' "$log" | check_halo_output /dev/stdin)
            if [ -z "$why" ] &&
                ! grep -qE '(ep_cfg\[[0-9]*\]:|cfg#[0-9]*) tag\(rc_tm/' "$log"; then
                why="UCX's log names no rc_tm endpoint for tagged messages"
            fi
            [ -z "$why" ] || why="output: $(echo "$why" | tr '\n' ';')"
        elif [ "$prog" = mpi_many_peers ]; then
            if ! grep -q '^# mpi_many_peers: OK$' "$log" ||
                [ "$(grep -c "^$np,[12],[0-9.]*$" "$log")" != 2 ]; then
                why="output: not 2 figures and the OK line"
            fi
        elif ! grep -q "^$prog: OK" "$log"; then
            why="no OK line"
        fi
        # over rc_tm (not overlap_sm): the offload reports
        if [ -z "$why" ] && [ "$name" != overlap_sm ]; then
            why=$(check_reports "$log" "$np" "$name")
            [ -z "$why" ] || why="offload report: $why"
        fi
    else
        if [ $rc -eq 0 ]; then
            why="passed although it must fail ($expect)"
        elif ! grep -q "$expect" "$log"; then
            why="failed (status $rc) but not with '$expect'"
        fi
    fi
    if [ -z "$why" ]; then
        echo "PASS: $name (np $np, $((t1 - t0))s)"
        npass=$((npass + 1))
    else
        echo "FAIL: $name (np $np, $((t1 - t0))s): $why; log $log:"
        grep -v '^\[.*\] \(Set MCA\|[0-9]* more process\)' "$log" | tail -n 25 |
            sed 's/^/    /'
        nfail=$((nfail + 1))
        failed="$failed $name"
    fi
done <<EOF_LIST
$TESTS_LIST
EOF_LIST

echo "MPI tests took $(( $(date +%s) - start_all ))s${failed:+; failed:$failed}"
echo "$npass passed, $nfail failed"
[ $nfail -eq 0 ] && [ $npass -gt 0 ]
