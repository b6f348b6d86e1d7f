#!/usr/bin/env bash
# Build a UCX release into a prefix the way a vendor's stack has it, to
# build and test rc_tm against a UCX that Debian does not package:
#
#   contrib/build-ucx.sh TARBALL PREFIX
#   RC_TM_UCX=PREFIX RC_TM_UCX_SRC=TARBALL ./contrib/setup.sh check
#
# TARBALL is a UCX source tarball: a release tag's archive (ucx-1.22.0.tar.gz,
# autogen.sh is run) or a release tarball with its configure.  UCX is built
# with verbs (rdma-core's libibverbs-dev; rdmacm and cma where found), the
# multi-threaded mode (--enable-mt), logging at UCX's default, shared
# libraries only, no CUDA, ROCm, oneAPI, gdrcopy, xpmem, knem, Java or Go,
# no documentation and no examples; make -j$(nproc).  UCX checks the
# parameters of every call (--enable-params-check, UCX's own default, as
# Debian's packages have it): a bad UCT call fails with UCS_ERR_INVALID_PARAM
# and an error that names it, and rc_tm's tests of those checks are built;
# RC_TM_UCX_PARAMS_CHECK=no builds UCX without (--disable-params-check, as
# UCX's contrib/configure-release has it: the checks compile away, in UCX
# and in rc_tm built against it).  The build packages are installed from
# Debian's (run as root, or with sudo).  A stamp in PREFIX
# names the tarball's sha256 and the configure arguments: a second run with
# the same ones does nothing.  Each step's time is printed.  The build
# directory is PREFIX.build (RC_TM_UCX_WORK names another), removed once
# UCX is installed; its log stays there when a step fails.
set -euo pipefail

log() { printf '[ucx] %s\n' "$*"; }
die() { printf '[ucx] error: %s\n' "$*" >&2; exit 1; }
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root to run: $*"; fi
}

case ${1:-} in -h|--help) sed -n '2,25s/^# \{0,1\}//p' "$0"; exit 0 ;; esac
[ $# -eq 2 ] || die "usage: contrib/build-ucx.sh TARBALL PREFIX (a UCX source tarball, and where to install UCX)"
tarball=$1 prefix=$2
[ -f "$tarball" ] || die "$tarball does not exist: name a UCX source tarball (ucx-X.Y.Z.tar.gz from UCX's releases)"
case $tarball in /*) ;; *) tarball=$PWD/$tarball ;; esac
case $prefix in /*) ;; *) prefix=$PWD/$prefix ;; esac
prefix=${prefix%/}
work=${RC_TM_UCX_WORK:-$prefix.build}
stamp=$prefix/.rc_tm-build-ucx.stamp
params_check=${RC_TM_UCX_PARAMS_CHECK:-yes}
case $params_check in
    yes|no) ;;
    *) die "RC_TM_UCX_PARAMS_CHECK=$params_check: yes (check every call's parameters, the default) or no" ;;
esac

configure_args=(
    --prefix="$prefix"
    --enable-mt
    --disable-static
    --disable-doxygen-doc --disable-examples
    --with-verbs
    --without-cuda --without-rocm --without-ze --without-gdrcopy
    --without-xpmem --without-knem --without-java --without-go
    "$([ "$params_check" = yes ] && echo --enable-params-check || echo --disable-params-check)"
)

packages=(build-essential autoconf automake libtool pkg-config
          libibverbs-dev librdmacm-dev)

t_start=$(date +%s)
sum=$(sha256sum < "$tarball" | cut -d' ' -f1)
want="$sum ${configure_args[*]}"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$prefix/bin/ucx_info" ]; then
    log "UCX in $prefix: ready ($(basename "$tarball"), stamp $stamp)"
    log "took $(( $(date +%s) - t_start )) s"
    exit 0
fi

missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
        missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "packages: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q
    as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# One step: its output to the log, its time on the terminal
step() { # name, command...
    local name=$1 t0 rc=0
    shift
    t0=$(date +%s)
    printf '\n=== %s: %s\n' "$name" "$*" >> "$work/build.log"
    "$@" >> "$work/build.log" 2>&1 || rc=$?
    if [ $rc -ne 0 ]; then
        tail -n 30 "$work/build.log" >&2
        die "$name failed (exit $rc; log: $work/build.log)"
    fi
    log "$name: $(( $(date +%s) - t0 )) s"
}

rm -rf "$work"
mkdir -p "$work"
log "building $(basename "$tarball") into $prefix (log: $work/build.log)"
step unpack tar -C "$work" -xzf "$tarball"
src=$(find "$work" -mindepth 1 -maxdepth 1 -type d)
[ "$(printf '%s\n' "$src" | wc -l)" -eq 1 ] && [ -f "$src/configure.ac" ] ||
    die "$tarball does not hold one UCX source directory with configure.ac"
cd "$src"
if [ ! -x configure ]; then
    step autogen ./autogen.sh
fi
mkdir -p "$work/build"
cd "$work/build"
step configure "$src/configure" "${configure_args[@]}"
grep -q '^#define HAVE_IB 1' config.h ||
    die "UCX configured without verbs (no HAVE_IB in $work/build/config.h): install libibverbs-dev"
want_check=$([ "$params_check" = yes ] && echo 1 || echo 0)
grep -q "^#define ENABLE_PARAMS_CHECK $want_check\$" config.h ||
    die "UCX configured with parameter checks other than asked (RC_TM_UCX_PARAMS_CHECK=$params_check: ENABLE_PARAMS_CHECK $want_check not in $work/build/config.h)"
step make make -j"$(nproc)"
rm -f "$stamp"
step install make install
echo "$want" > "$stamp"
cd /
rm -rf "$work"
log "installed: $("$prefix/bin/ucx_info" -v | sed -n 's/^# *Library version: *//p' | head -1) in $prefix"
log "took $(( $(date +%s) - t_start )) s"
