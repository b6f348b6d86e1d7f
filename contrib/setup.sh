#!/usr/bin/env bash
# Set up everything rc_tm needs on a Debian 12 (bookworm) machine, configure
# and build it, then run what was asked.  Run as root (or with sudo).
#
#   contrib/setup.sh [build]    install deps, fetch UCX source, configure, build
#   contrib/setup.sh demo       ... then show the module loaded into ucx_info
#                               and benchmark rc_tm against UCX's sm (the
#                               reference), posix and tcp, deep receive
#                               queues, the overlap of a message with
#                               computation under Open MPI, and latency with
#                               many idle peers (tables, and a plot in
#                               build/demo/)
#   contrib/setup.sh check      ... then run the whole test suite (make check),
#                               the Debian package built, installed and
#                               checked, and the googletest programs once more
#                               built with ASan and UBSan (build-asan/)
#   contrib/setup.sh deps       only install deps and fetch the UCX source
#
# Every step leaves a stamp under $RC_TM_DEPS (default .deps/ in the tree), so
# a second run repeats no finished work.  The UCX source is fetched from
# Debian's source package into .deps/ and never committed; the deb-src entry
# that needs, when the machine has none, is made from the machine's own deb
# entry for bookworm main (its mirror or proxy).
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${RC_TM_DEPS:-$top/.deps}
build=${RC_TM_BUILD:-$top/build}

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root to run: $*"; fi
}

packages=(
    build-essential autoconf automake libtool pkg-config dpkg-dev
    libucx-dev libucx0 ucx-utils
    libibverbs-dev rdma-core ibverbs-providers librdmacm-dev
    libgtest-dev
    openmpi-bin libopenmpi-dev
    python3 python3-matplotlib
)

install_packages() {
    local missing=()
    for p in "${packages[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
            missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then
        log "packages: all installed"
        return
    fi
    log "packages: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q
    as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# Debian's UCX source package, the same version as the installed libucx0.
fetch_ucx_source() {
    local ver upstream srcdir
    ver=$(dpkg-query -W -f='${Version}' libucx0)
    upstream=${ver%%-*}
    srcdir=$deps/ucx-$upstream
    if [ -f "$deps/ucx-src.$ver.stamp" ] && [ -d "$srcdir/src/uct" ]; then
        log "ucx source: $srcdir (ready)"
        echo "$srcdir" > "$deps/ucx-src.path"
        return
    fi
    if update_debsrc_entry; then
        as_root apt-get update -q
    fi
    log "ucx source: apt-get source ucx=$ver"
    rm -rf "$srcdir"
    (cd "$deps" && apt-get source -q "ucx=$ver") ||
        die "could not fetch Debian's source package ucx=$ver (needs a deb-src entry and network access to Debian's archive)"
    [ -d "$srcdir/src/uct" ] || die "ucx source unpacked, but $srcdir/src/uct is missing"
    touch "$deps/ucx-src.$ver.stamp"
    echo "$srcdir" > "$deps/ucx-src.path"
}

# apt's sources: one-line entries (sources.list, sources.list.d/*.list) and
# deb822 stanzas (sources.list.d/*.sources), under RC_TM_APT_DIR (default
# /etc/apt; the tests point it at a directory of their own).
apt_dir=${RC_TM_APT_DIR:-/etc/apt}
debsrc_file=$apt_dir/sources.list.d/rc-tm-deb-src.sources

# The files apt reads, in its order, except the deb-src entry setup.sh writes
apt_source_files() {
    local f
    for f in "$apt_dir/sources.list" "$apt_dir"/sources.list.d/*; do
        case $f in
            "$debsrc_file") ;;
            "$apt_dir/sources.list"|*.list|*.sources)
                [ -f "$f" ] && printf '%s\n' "$f" ;;
        esac
    done
    return 0
}

# Reads apt source files; each entry becomes one record per type, URI and
# suite.  mode=have-src: succeeds when a deb-src entry serves bookworm main.
# mode=entry: prints a deb822 deb-src stanza for bookworm main made from the
# deb entry that serves it (its URI, its suites of bookworm at that URI,
# its Signed-By and Trusted), or fails (status 3) when there is none.  A
# third-party repository with a suite bookworm and a component main names
# its own key: an entry with Debian's key, or none, goes first.
# shellcheck disable=SC2016
apt_sources_awk='
function trim(s) { gsub(/^[ \t]+|[ \t]+$/, "", s); return s }
function add(type, uri, suite, comps, signed, trusted) {
    sub(/\/+$/, "", uri); gsub(/[ \t]+/, " ", comps)
    n++; T[n] = type; U[n] = uri; S[n] = suite; C[n] = " " comps " "
    K[n] = signed; R[n] = trusted
}
function stanza(   nt, nu, ns, t, u, s, i, j, k) {
    if (tolower(trim(f["enabled"])) != "no") {
        nt = split(f["types"], t, /[ \t]+/)
        nu = split(f["uris"], u, /[ \t]+/)
        ns = split(f["suites"], s, /[ \t]+/)
        for (i = 1; i <= nt; i++) for (j = 1; j <= nu; j++)
            for (k = 1; k <= ns; k++)
                if (t[i] != "" && u[j] != "" && s[k] != "")
                    add(t[i], u[j], s[k], trim(f["components"]),
                        f["signed-by"], trim(f["trusted"]))
    }
    split("", f); key = ""
}
function option(opts, name,   o, i, no) {
    no = split(opts, o, /[ \t]+/)
    for (i = 1; i <= no; i++)
        if (tolower(substr(o[i], 1, length(name) + 1)) == name "=")
            return substr(o[i], length(name) + 2)
    return ""
}
FNR == 1 { if (deb822) stanza(); deb822 = (FILENAME ~ /\.sources$/) }
deb822 && /^#/ { next }
deb822 && /^[ \t]*$/ { stanza(); next }
deb822 && /^[ \t]/ { if (key != "") f[key] = f[key] "\n" $0; next }
deb822 {
    key = tolower(trim(substr($0, 1, index($0, ":") - 1)))
    f[key] = trim(substr($0, index($0, ":") + 1))
    next
}
{
    line = $0; sub(/#.*/, "", line); opts = ""
    if (match(line, /\[[^]]*\]/)) {
        opts = substr(line, RSTART + 1, RLENGTH - 2)
        line = substr(line, 1, RSTART - 1) " " substr(line, RSTART + RLENGTH)
    }
    nw = split(trim(line), w, /[ \t]+/)
    if (nw < 3 || (w[1] != "deb" && w[1] != "deb-src")) next
    comps = ""
    for (i = 4; i <= nw; i++) comps = comps " " w[i]
    add(w[1], w[2], w[3], trim(comps), option(opts, "signed-by"),
        option(opts, "trusted"))
}
END {
    if (deb822) stanza()
    for (i = 1; i <= n; i++)
        if (S[i] == "bookworm" && C[i] ~ / main /) {
            if (mode == "have-src" && T[i] == "deb-src") exit 0
            if (mode == "entry" && T[i] == "deb") {
                debian = (K[i] == "" || K[i] ~ /debian-archive-keyring/)
                if (!d || (debian && !d_debian)) { d = i; d_debian = debian }
            }
        }
    if (mode == "have-src") exit 1
    if (!d) exit 3
    for (i = 1; i <= n; i++)
        if (T[i] == "deb" && U[i] == U[d] && C[i] ~ / main / &&
            S[i] ~ /^bookworm(-|$)/ && index(" " suites " ", " " S[i] " ") == 0)
            suites = suites (suites == "" ? "" : " ") S[i]
    print "Types: deb-src"
    print "URIs: " U[d]
    print "Suites: " suites
    print "Components: main"
    if (K[d] != "") print "Signed-By: " K[d]
    if (R[d] != "") print "Trusted: " R[d]
}'

# The deb-src stanza for bookworm main, from this machine's deb entry for it
debsrc_entry() {
    local files rc=0
    mapfile -t files < <(apt_source_files)
    [ ${#files[@]} -gt 0 ] || die "no apt sources in $apt_dir (sources.list, sources.list.d/*.list or *.sources)"
    awk -v mode=entry "$apt_sources_awk" "${files[@]}" || rc=$?
    [ $rc -eq 3 ] && die "no deb entry serves Debian bookworm main in $apt_dir/sources.list or $apt_dir/sources.list.d/ (*.list, *.sources): add your site's Debian mirror for bookworm main, and setup.sh derives the deb-src entry from it"
    [ $rc -eq 0 ] || die "could not read apt's sources in $apt_dir (awk exited with $rc)"
}

# Makes sure apt has a deb-src entry for bookworm main: the machine's own if
# it has one, else setup.sh's ($debsrc_file), derived from the deb entry, so
# a site's mirror or proxy serves the source package too.  Succeeds when it
# wrote the file (apt-get update needed), fails when nothing changed.
update_debsrc_entry() {
    local files entry
    mapfile -t files < <(apt_source_files)
    if [ ${#files[@]} -gt 0 ] &&
       awk -v mode=have-src "$apt_sources_awk" "${files[@]}"; then
        return 1
    fi
    entry=$(debsrc_entry) || exit 1
    if [ -f "$debsrc_file" ] && [ "$(cat "$debsrc_file")" = "$entry" ]; then
        return 1
    fi
    log "apt: deb-src entry for bookworm main, from the deb entry: $debsrc_file"
    printf '%s\n' "$entry" | sed 's/^/[setup]   /'
    # (called as a condition, so errexit is off in here: failures said)
    if [ -w "$(dirname "$debsrc_file")" ]; then
        printf '%s\n' "$entry" > "$debsrc_file"
    else
        printf '%s\n' "$entry" | as_root tee "$debsrc_file" >/dev/null
    fi || die "could not write $debsrc_file"
}

# autogen when its outputs are missing or older than their inputs
needs_autogen() {
    [ -x "$top/configure" ] && [ -f "$top/Makefile.in" ] || return 0
    [ -n "$(find "$top/configure.ac" "$top/Makefile.am" "$top/src" "$top/test" "$top/contrib" \
            \( -name configure.ac -o -name '*.am' -o -name '*.mk' \) \
            -newer "$top/Makefile.in" -print -quit)" ]
}

configure_and_build() {
    local srcdir
    srcdir=$(cat "$deps/ucx-src.path")
    if needs_autogen; then
        log "autogen"
        (cd "$top" && ./autogen.sh)
    fi
    mkdir -p "$build"
    if [ ! -f "$build/config.status" ] || [ "$top/configure" -nt "$build/config.status" ]; then
        log "configure (build dir $build)"
        (cd "$build" && "$top/configure" --with-ucx-src="$srcdir" ${RC_TM_CONFIGURE_FLAGS:-})
    fi
    log "make"
    make -C "$build" -j"$(nproc)" >/dev/null
    log "built $(module_path)"
}

module_path() {
    echo "$build/src/uct/rc_tm/.libs/libuct_rc_tm.so"
}

run_demo() {
    local module out
    module=$(module_path)
    out=$build/demo
    mkdir -p "$out"
    log "LD_PRELOAD=$module ucx_info -d (rc_tm's part)"
    LD_PRELOAD=$module ucx_info -d | awk '
        /^# Memory domain:/ { show = 0 }
        /^# Memory domain:/ { md = $0 }
        /^# +Component: rc_tm$/ { show = 1; print md }
        /error handling/ { show = 0 }
        show && /Component|Transport|Device|Type|latency|bandwidth|am_short|am_bcopy|get_zcopy|connection/'
    # Debian's python3 (python3-matplotlib), whatever python3 comes first in PATH
    log "benchmark: Debian's ucx_perftest over rc_tm, sm, posix and tcp, then deep receive queues (ucp_deep_queue) over rc_tm, sm and posix, then overlap with computation (mpi_overlap under mpirun) over rc_tm with its engine thread and inline, sm and posix, then latency with many idle peers (mpi_many_peers under mpirun, 2 and 34 ranks) over rc_tm and sm (4 minutes on an idle 2-core machine)"
    log "this host: $(nproc) CPUs (nproc), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    /usr/bin/python3 "$top/test/bench/perftest_compare.py" --module "$module" \
        --deep-queue "$build/test/bench/ucp_deep_queue" \
        --overlap "$build/test/bench/mpi_overlap" \
        --peers "$build/test/bench/mpi_many_peers" \
        --png "$out/perftest.png" | tee "$out/perftest.txt"
    log "table: $out/perftest.txt"
    log "plot:  $out/perftest.png"
}

# The Debian package: built from this tree, installed, and checked with
# installed paths only (contrib/build-deb.sh --install --verify).  A package
# this check installed is removed again, so the machine is left as it was;
# RC_TM_SKIP_PACKAGE=1 skips it.
check_package() {
    if [ "${RC_TM_SKIP_PACKAGE:-0}" = 1 ]; then
        log "package: skipped (RC_TM_SKIP_PACKAGE=1)"
        return 0
    fi
    local installed=no rc=0
    dpkg-query -W -f='${Status}' ucx-rc-tm 2>/dev/null | grep -q 'install ok installed' &&
        installed=yes
    log "package: contrib/build-deb.sh --install --verify"
    RC_TM_DEPS=$deps RC_TM_BUILD=$build RC_TM_SETUP_DONE=1 \
        "$top/contrib/build-deb.sh" --install --verify ||
        rc=$?
    if [ $installed = no ]; then
        as_root dpkg --purge ucx-rc-tm >/dev/null 2>&1 || true
    fi
    return $rc
}

run_check() {
    log "make check"
    local rc=0
    make -C "$build" -j"$(nproc)" check || rc=$?
    check_package || rc=$?
    # One closing line for whoever reads the log: test programs passed/failed
    local pass fail
    pass=$(sed -n 's/^# PASS: *//p' "$build/test-suite.log" 2>/dev/null | head -1)
    fail=$(sed -n 's/^# FAIL: *//p' "$build/test-suite.log" 2>/dev/null | head -1)
    echo "tests: ${pass:-0} passed, ${fail:-0} failed"
    print_stress_figures "$build"
    run_sanitizer_check || rc=$?
    run_tsan_check || rc=$?
    return $rc
}

# The stress test's figures (seed, messages, time, rate) for the log
print_stress_figures() {
    sed -n 's/^\[stress\] \(seed [0-9]*: .*\)/stress: \1/p' \
        "$1/test/gtest/stress/test_stress.log" 2>/dev/null || true
}

# The googletest programs once more, in a build directory of their own
# configured with $2 ($3 names it in the log): any report fails the run
run_gtest_build_check() {
    local dir=$1 flag=$2 what=$3 srcdir rc=0
    srcdir=$(cat "$deps/ucx-src.path")
    mkdir -p "$dir"
    if [ ! -f "$dir/config.status" ] || [ "$top/configure" -nt "$dir/config.status" ]; then
        log "configure with $what (build dir $dir)"
        (cd "$dir" && "$top/configure" --with-ucx-src="$srcdir" \
             "$flag" ${RC_TM_CONFIGURE_FLAGS:-})
    fi
    log "make check-gtest in $dir ($what)"
    rm -f "$dir/test-suite.log"
    make -C "$dir" -j"$(nproc)" >/dev/null &&
        make -C "$dir" -j"$(nproc)" check-gtest || rc=$?
    local pass fail
    pass=$(sed -n 's/^# PASS: *//p' "$dir/test-suite.log" 2>/dev/null | head -1)
    fail=$(sed -n 's/^# FAIL: *//p' "$dir/test-suite.log" 2>/dev/null | head -1)
    echo "tests under $what: ${pass:-0} passed, ${fail:-0} failed"
    print_stress_figures "$dir"
    return $rc
}

# AddressSanitizer and UndefinedBehaviorSanitizer (RC_TM_BUILD_ASAN,
# default build-asan/)
run_sanitizer_check() {
    run_gtest_build_check "${RC_TM_BUILD_ASAN:-$top/build-asan}" \
        --enable-sanitizers "AddressSanitizer, UndefinedBehaviorSanitizer"
}

# ThreadSanitizer (RC_TM_BUILD_TSAN, default build-tsan/), with the
# software NIC on its engine thread (Makefile.am sets
# UCX_RC_TM_SOFT_PROGRESS=thread in that build)
run_tsan_check() {
    run_gtest_build_check "${RC_TM_BUILD_TSAN:-$top/build-tsan}" \
        --enable-sanitizers=thread "ThreadSanitizer, engine threads"
}

# Sourced (by test/setup_test.sh): the functions only
[ "${BASH_SOURCE[0]}" = "$0" ] || return 0

action=${1:-build}
case $action in
    deps|build|demo|check) ;;
    *) die "unknown action '$action' (use: deps, build, demo or check)" ;;
esac

mkdir -p "$deps"
install_packages
fetch_ucx_source
[ "$action" = deps ] && exit 0
configure_and_build
case $action in
    demo)  run_demo ;;
    check) run_check ;;
esac
