#!/usr/bin/env bash
# Build the Debian package ucx-rc-tm from this tree (Debian 12 or 13), and
# optionally install it and check the installed module.
#
#   contrib/build-deb.sh [--test] [--install] [--verify]
#
#   (no option)  build build/deb/ucx-rc-tm_<version>_<arch>.deb
#   --test       run the test suite inside the package build (dh_auto_test)
#   --install    apt-get install the .deb just built
#   --verify     with the installed package: ucx_info -d lists rc_tm through
#                the installed module, the environment file and rc_tm-run
#                load it, and an MPI program passes with the README's
#                mpirun line and the installed module
#
# The package is built from 'make dist' of the build tree with debhelper
# (contrib/debian/), configured for UCX's module directory, and depends on
# exactly the libucx0 it was built against.  Run as root (or with sudo for
# the installs).  Environment: RC_TM_DEPS, RC_TM_BUILD as for setup.sh.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
build=${RC_TM_BUILD:-$top/build}
deps=${RC_TM_DEPS:-$top/.deps}
out=$build/deb
pkg=ucx-rc-tm

log() { printf '[deb] %s\n' "$*"; }
die() { printf '[deb] error: %s\n' "$*" >&2; exit 1; }
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root to run: $*"; fi
}

opt_test=no opt_install=no opt_verify=no
for arg in "$@"; do
    case $arg in
        --test)    opt_test=yes ;;
        --install) opt_install=yes ;;
        --verify)  opt_verify=yes ;;
        -h|--help) sed -n '2,20s/^# \{0,1\}//p' "$0"; exit 0 ;;
        *) die "unknown option '$arg' (use --test, --install, --verify)" ;;
    esac
done

install_tools() {
    local missing=() p
    for p in debhelper dpkg-dev; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q
    as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
}

build_package() {
    # Dependencies, the UCX source and a configured build tree (for 'make
    # dist'), unless setup.sh, which calls us, has just done that
    if [ "${RC_TM_SETUP_DONE:-0}" != 1 ]; then
        RC_TM_DEPS=$deps RC_TM_BUILD=$build "$top/contrib/setup.sh" build
    fi
    install_tools

    local version ucx_deb tarball srcdir revision release
    version=$(sed -n 's/^PACKAGE_VERSION = //p' "$build/Makefile")
    ucx_deb=$(dpkg-query -W -f='${Version}' libucx0)
    [ -n "$version" ] || die "no PACKAGE_VERSION in $build/Makefile"
    log "make dist (rc_tm $version)"
    make -C "$build" dist >/dev/null
    tarball=$build/rc_tm-$version.tar.gz

    rm -rf "$out"
    mkdir -p "$out"
    cp "$tarball" "$out/${pkg}_$version.orig.tar.gz"
    tar -C "$out" -xzf "$tarball"
    srcdir=$out/rc_tm-$version
    cp -r "$top/contrib/debian" "$srcdir/debian"
    # The Debian revision names the UCX the module is bound to
    revision="1+ucx${ucx_deb%%-*}"
    # The changelog names the machine's release (/etc/os-release)
    release=$(. /etc/os-release && echo "${VERSION_CODENAME:-unstable}")
    cat > "$srcdir/debian/changelog" <<EOF
$pkg ($version-$revision) $release; urgency=medium

  * Built from rc_tm $version against libucx0 $ucx_deb.

 -- rc_tm developers <rc-tm@localhost>  $(date -R)
EOF

    local build_opts="nocheck"
    [ $opt_test = yes ] && build_opts=""
    log "dpkg-buildpackage (DEB_BUILD_OPTIONS='$build_opts${DEB_BUILD_OPTIONS:+ $DEB_BUILD_OPTIONS}')"
    (cd "$srcdir" &&
     RC_TM_UCX_SRC=$(cat "$deps/ucx-src.path") \
     DEB_BUILD_OPTIONS="$build_opts${DEB_BUILD_OPTIONS:+ $DEB_BUILD_OPTIONS}" \
     dpkg-buildpackage -b -us -uc -j"$(nproc)") > "$out/build.log" 2>&1 ||
        { tail -n 40 "$out/build.log"; die "package build failed (log: $out/build.log)"; }
    deb=$(ls "$out/${pkg}_$version-${revision}_"*.deb)
    log "built $deb"
    dpkg-deb --field "$deb" Package Version Architecture Depends
    dpkg-deb --contents "$deb" | awk '$6 !~ /\/$/ { print "    " $6 ($7 ? " " $7 " " $8 : "") }'
    # The dependency that keeps the module off any other UCX
    dpkg-deb --field "$deb" Depends | grep -q "libucx0 (= $ucx_deb)" ||
        die "$deb does not depend on libucx0 (= $ucx_deb)"
}

install_package() {
    log "installing $deb"
    export DEBIAN_FRONTEND=noninteractive
    printf '[deb] $ apt-get install -y %s\n' "$deb"
    as_root apt-get install -y -q --no-install-recommends "$deb" > "$out/install.log" 2>&1 ||
        { tail -n 20 "$out/install.log"; die "apt-get install failed (log: $out/install.log)"; }
    grep '^Setting up' "$out/install.log" | sed 's/^/    /'
}

# The checks of an installed package, with installed paths only
verify_package() {
    local module tls env wrapper rc=0
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' ||
        die "$pkg is not installed"
    module=$(pkg-config --variable=libdir ucx)/ucx/libuct_rc_tm.so
    env=/usr/share/rc_tm/rc_tm-env.sh
    wrapper=/usr/bin/rc_tm-run
    log "installed: $(dpkg-query -W -f='${Package} ${Version}, Depends: ${Depends}' $pkg)"
    dpkg -L "$pkg" | grep -E 'libuct_rc_tm|rc_tm-env|rc_tm-run' | sed 's/^/    /'
    [ -f "$module" ] || die "$module not installed"

    printf '[deb] $ LD_PRELOAD=%s ucx_info -d | grep rc_tm\n' "$module"
    LD_PRELOAD=$module ucx_info -d | grep -E '^# *(Component|Memory domain|Transport): *(rc_tm|soft)$' |
        sed 's/^/    /'
    LD_PRELOAD=$module ucx_info -d | grep -q '^# *Transport: rc_tm$' ||
        { log "FAIL: the installed module does not register rc_tm"; rc=1; }

    printf '[deb] $ . %s; ucx_info -d | grep Transport: rc_tm\n' "$env"
    tls=$(. "$env" && ucx_info -d | grep '^# *Transport: rc_tm$' && echo "UCX_TLS=$UCX_TLS") ||
        true
    echo "$tls" | sed 's/^/    /'
    echo "$tls" | grep -q '^UCX_TLS=rc_tm$' ||
        { log "FAIL: $env does not load rc_tm"; rc=1; }

    printf '[deb] $ %s ucx_info -d | grep Transport: rc_tm\n' "$wrapper"
    "$wrapper" ucx_info -d | grep '^# *Transport: rc_tm$' | sed 's/^/    /' ||
        { log "FAIL: $wrapper does not load rc_tm"; rc=1; }

    # The README's mpirun line with the installed module: first which module
    # file the ranks map, then an MPI program that checks rc_tm carried its
    # traffic (test/mpi/pingpong, built from this tree)
    make -C "$build" test/mpi/pingpong >/dev/null
    local mpirun_line=(mpirun --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any
                       --mca btl self --mca mpi_yield_when_idle 1
                       --allow-run-as-root --oversubscribe --bind-to none
                       -x LD_PRELOAD="$module" -x UCX_TLS=rc_tm)
    printf '[deb] $ %s -np 2 grep -m1 -o "/[^ ]*libuct_rc_tm[^ ]*" /proc/self/maps\n' \
        "${mpirun_line[*]}"
    "${mpirun_line[@]}" -np 2 grep -m1 -o '/[^ ]*libuct_rc_tm[^ ]*' /proc/self/maps </dev/null |
        sed 's/^/    /'
    printf '[deb] $ %s -np 2 %s\n' "${mpirun_line[*]}" "$build/test/mpi/pingpong"
    local mpiout
    mpiout=$(timeout -k 10 120 "${mpirun_line[@]}" -np 2 "$build/test/mpi/pingpong" </dev/null 2>&1) ||
        { echo "$mpiout" | tail -n 20; log "FAIL: MPI pingpong over the installed module"; rc=1; }
    echo "$mpiout" | grep -E '^(pingpong|rc_tm)' | sed 's/^/    /'
    echo "$mpiout" | grep -q '^pingpong: OK' || rc=1

    if [ $rc -eq 0 ]; then log "installed package: PASS"; else log "installed package: FAIL"; fi
    return $rc
}

deb=
build_package
if [ $opt_install = yes ]; then install_package; fi
if [ $opt_verify = yes ]; then verify_package; fi
