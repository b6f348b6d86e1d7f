#!/bin/sh
# Runs the MPI test programs of test/mpi under mpirun with the rc_tm module
# of this build tree; prints PASS/FAIL per program and "N passed, M failed",
# exits non-zero if any failed.  See test/mpi/README.md.
#
# Environment (set by 'make check-mpi'):
#   MPIRUN             mpirun of Open MPI 4.1 (pml ucx)
#   RC_TM_MODULE       the module to LD_PRELOAD (.../.libs/libuct_rc_tm.so)
#   RC_TM_MPI_BINDIR   where the programs are (and their logs go)
#   RC_TM_MPI_TIMEOUT  seconds one program may take (default 120)
#   RC_TM_MPI_SOFT_PROGRESS  inline or thread: UCX_RC_TM_SOFT_PROGRESS of
#                      the ranks (default: UCX's default); the checks of
#                      the checks (nomodule, othertransport) run without it
# Arguments: names of the tests to run (default: all).

MPIRUN=${MPIRUN:-mpirun}
BINDIR=${RC_TM_MPI_BINDIR:-.}
TIMEOUT=${RC_TM_MPI_TIMEOUT:-120}
MODULE=${RC_TM_MODULE:?RC_TM_MODULE must name libuct_rc_tm.so}
PROGRESS=${RC_TM_MPI_SOFT_PROGRESS:-}
if [ -n "$PROGRESS" ]; then
    echo "MPI tests with UCX_RC_TM_SOFT_PROGRESS=$PROGRESS"
fi

# The mpirun line (test/mpi/README.md says why each option is there)
mpi_run() {
    np=$1; shift
    timeout -k 10 "$TIMEOUT" "$MPIRUN" \
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
nomodule       2 pingpong
othertransport 2 pingpong
'

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
    if [ -n "$PROGRESS" ]; then
        case $name in nomodule|othertransport) continue ;; esac
        extra="-x UCX_RC_TM_SOFT_PROGRESS=$PROGRESS $extra"
    fi
    log="$BINDIR/$name${PROGRESS:+.$PROGRESS}.mpilog"
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
    *)
        # shellcheck disable=SC2086
        mpi_run "$np" -x LD_PRELOAD="$MODULE" -x UCX_TLS=rc_tm $extra \
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
        elif ! grep -q "^$prog: OK" "$log"; then
            why="no OK line"
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
