#!/usr/bin/env bash
# Set up everything rc_tm needs on a Debian machine (Debian 12 bookworm,
# Debian 13 trixie: the release is read from /etc/os-release), configure
# and build it, then run what was asked.  Run as root (or with sudo).
#
#   contrib/setup.sh [build]    install deps, fetch UCX source, configure, build
#   contrib/setup.sh demo       ... then show the module loaded into ucx_info
#                               and benchmark rc_tm against UCX's sm (the
#                               reference), posix and tcp, deep receive
#                               queues, the overlap of a message with
#                               computation under Open MPI, latency with
#                               many idle peers, and a halo exchange between
#                               2 and 4 ranks (tables, and a plot in
#                               build/demo/)
#   contrib/setup.sh check      ... then run the whole test suite (make check),
#                               the Debian package built, installed and
#                               checked, and the googletest programs once more
#                               built with ASan and UBSan (build-asan/) and
#                               with TSan (build-tsan/)
#   contrib/setup.sh deps       only install deps and fetch the UCX source
#
# Every step leaves a stamp under $RC_TM_DEPS (default .deps/ in the tree), so
# a second run repeats no finished work.  The UCX source is fetched from
# Debian's source package of the installed libucx0 into .deps/ and never
# committed; the deb-src entry that needs, when the machine has none, is
# made from the machine's own deb entry for its release's main component
# (its mirror or proxy).
#
# Environment:
#   RC_TM_UCX_SRC    UCX's source, a release tarball (ucx-X.Y.Z.tar.gz) or
#                    an unpacked tree, of exactly the UCX built against:
#                    used instead of Debian's source package (where the
#                    mirror does not serve it)
#   RC_TM_UCX        a UCX installed into a prefix (contrib/build-ucx.sh)
#                    to build and test against instead of Debian's libucx0
#                    (configure --with-ucx=PREFIX; needs RC_TM_UCX_SRC; the
#                    tests run with PREFIX/bin and PREFIX/lib first in PATH
#                    and LD_LIBRARY_PATH; no Debian package check)
#   RC_TM_SANITIZERS which sanitizer builds 'check' adds: both (default),
#                    asan, tsan or none
#   RC_TM_CHECK_TESTS the programs 'make check' runs before the MPI tests
#                    (its TESTS; default: all)
#   RC_TM_DEPS, RC_TM_BUILD, RC_TM_BUILD_ASAN, RC_TM_BUILD_TSAN
#                    where stamps and sources, the build, and the sanitizer
#                    builds go (.deps/, build/, build-asan/, build-tsan/)
#   RC_TM_CONFIGURE_FLAGS  more arguments for configure
#   RC_TM_SKIP_PACKAGE=1   no Debian package check
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
deps=${RC_TM_DEPS:-$top/.deps}
build=${RC_TM_BUILD:-$top/build}
ucx_prefix=${RC_TM_UCX:-}
case $ucx_prefix in /*|'') ;; *) ucx_prefix=$PWD/$ucx_prefix ;; esac
ucx_prefix=${ucx_prefix%/}
ucx_src_given=${RC_TM_UCX_SRC:-}

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root to run: $*"; fi
}

# The machine's Debian release, its codename (VERSION_CODENAME in
# /etc/os-release; RC_TM_OS_RELEASE names another file, for the tests)
machine_release() {
    local f=${RC_TM_OS_RELEASE:-/etc/os-release} name
    [ -r "$f" ] || die "cannot read $f to tell the Debian release: this script needs Debian 12 (bookworm) or later"
    # shellcheck disable=SC1090
    name=$(. "$f" && echo "${VERSION_CODENAME:-}")
    [ -n "$name" ] || die "$f names no VERSION_CODENAME: this script needs a Debian release with a codename (bookworm, trixie)"
    printf '%s\n' "$name"
}

# The same package names on Debian 12 and 13 (13: UCX 1.18.1, rdma-core 56,
# Open MPI 5)
packages=(
    build-essential autoconf automake libtool pkg-config dpkg-dev
    libucx-dev libucx0 ucx-utils
    libibverbs-dev rdma-core ibverbs-providers librdmacm-dev
    libgtest-dev
    openmpi-bin libopenmpi-dev
    python3 python3-matplotlib
    python3-pyverbs ibverbs-utils perftest
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
    log "packages (Debian $(machine_release)): installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    as_root apt-get update -q
    as_root apt-get install -y -q --no-install-recommends "${missing[@]}"
}

# The UCX built against: MAJOR.MINOR.PATCH from its uct/api/version.h
# (RC_TM_UCX's, else Debian's libucx-dev)
ucx_installed_version() {
    local h=${ucx_prefix:-/usr}/include/uct/api/version.h
    [ -f "$h" ] || die "$h not found: ${ucx_prefix:+RC_TM_UCX=$ucx_prefix is not a UCX install prefix (build one with contrib/build-ucx.sh TARBALL PREFIX)}${ucx_prefix:-install libucx-dev}"
    awk '$1 == "#define" && $2 ~ /^UCT_VERNO_(MAJOR|MINOR|PATCH)$/ && !($2 in v) { v[$2] = $3; n++ }
         END { if (n == 3) print v["UCT_VERNO_MAJOR"] "." v["UCT_VERNO_MINOR"] "." v["UCT_VERNO_PATCH"] }' "$h"
}

# The version a UCX configure.ac (read from stdin) declares
ucx_configure_ac_version() {
    awk -F'[][(), \t]+' '/^(m4_)?define\(\[ucx_ver_(major|minor|patch)\]/ && !($2 in v) { v[$2] = $3; n++ }
         END { if (n == 3) print v["ucx_ver_major"] "." v["ucx_ver_minor"] "." v["ucx_ver_patch"] }'
}

# The UCX source: RC_TM_UCX_SRC when set, else Debian's source package.
# Leaves the tree's path in $deps/ucx-src.path (configure reads it too).
fetch_ucx_source() {
    if [ -n "$ucx_src_given" ]; then
        ucx_source_given
    elif [ -n "$ucx_prefix" ]; then
        die "RC_TM_UCX=$ucx_prefix needs its UCX source too: run again with RC_TM_UCX_SRC=/path/to/ucx-$(ucx_installed_version).tar.gz (the tarball it was built from, or its unpacked tree)"
    else
        ucx_source_package
    fi
}

# RC_TM_UCX_SRC: a tarball (unpacked once into $deps) or a tree, of
# exactly the installed UCX's version
ucx_source_given() {
    local want have srcdir sum stampf tmp tops
    want=$(ucx_installed_version)
    [ -n "$want" ] || die "could not read the installed UCX's version"
    if [ -d "$ucx_src_given" ]; then
        srcdir=$(cd "$ucx_src_given" && pwd)
        if [ ! -f "$srcdir/configure.ac" ] || [ ! -f "$srcdir/src/uct/base/uct_iface.h" ]; then
            die "RC_TM_UCX_SRC=$ucx_src_given is not a UCX source tree (configure.ac, src/uct/base/uct_iface.h): name UCX $want's source tarball or its unpacked tree"
        fi
        have=$(ucx_configure_ac_version < "$srcdir/configure.ac")
        [ "$have" = "$want" ] ||
            die "RC_TM_UCX_SRC=$ucx_src_given is UCX ${have:-of unknown version}, but the installed UCX is $want: name UCX $want's source (ucx-$want.tar.gz or its tree)"
        log "ucx source: $srcdir (RC_TM_UCX_SRC, UCX $have)"
        echo "$srcdir" > "$deps/ucx-src.path"
        return
    fi
    [ -f "$ucx_src_given" ] ||
        die "RC_TM_UCX_SRC=$ucx_src_given does not exist: name UCX $want's source tarball (ucx-$want.tar.gz) or an unpacked tree"
    srcdir=$deps/ucx-$want-src
    stampf=$deps/ucx-src.tarball.stamp
    sum=$(sha256sum < "$ucx_src_given" | cut -d' ' -f1)
    if [ -f "$stampf" ] && [ "$(cat "$stampf")" = "$sum $srcdir" ] && [ -d "$srcdir/src/uct" ]; then
        log "ucx source: $srcdir (from $ucx_src_given, ready)"
        echo "$srcdir" > "$deps/ucx-src.path"
        return
    fi
    have=$(tar -xzOf "$ucx_src_given" --wildcards --no-wildcards-match-slash '*/configure.ac' 2>/dev/null |
           ucx_configure_ac_version) || true
    [ -n "$have" ] ||
        die "RC_TM_UCX_SRC=$ucx_src_given is not a UCX source tarball (no */configure.ac with UCX's version in it): name UCX $want's source tarball (ucx-$want.tar.gz) or an unpacked tree"
    [ "$have" = "$want" ] ||
        die "RC_TM_UCX_SRC=$ucx_src_given is UCX $have, but the installed UCX is $want: the internal headers must match exactly, name ucx-$want.tar.gz"
    log "ucx source: unpacking $ucx_src_given (UCX $have) into $srcdir"
    tmp=$deps/ucx-src.tmp
    rm -rf "$tmp" "$srcdir"
    mkdir -p "$tmp"
    tar -C "$tmp" -xzf "$ucx_src_given" || die "could not unpack $ucx_src_given"
    tops=$(find "$tmp" -mindepth 1 -maxdepth 1)
    if [ "$(printf '%s\n' "$tops" | wc -l)" -ne 1 ] || [ ! -d "$tops/src/uct" ]; then
        die "$ucx_src_given does not hold one UCX source directory (with src/uct)"
    fi
    mv "$tops" "$srcdir"
    rmdir "$tmp"
    echo "$sum $srcdir" > "$stampf"
    echo "$srcdir" > "$deps/ucx-src.path"
}

# Debian's UCX source package, the same version as the installed libucx0:
# its source version (a binNMU's libucx0 1.18.1+ds-2+b1 comes from the
# source 1.18.1+ds-2)
ucx_source_package() {
    local ver upstream srcdir release
    ver=$(dpkg-query -W -f='${source:Version}' libucx0)
    upstream=${ver#*:}
    upstream=${upstream%-*}
    srcdir=$deps/ucx-$upstream
    if [ -f "$deps/ucx-src.$ver.stamp" ] && [ -d "$srcdir/src/uct" ]; then
        log "ucx source: $srcdir (ready)"
        echo "$srcdir" > "$deps/ucx-src.path"
        return
    fi
    release=$(machine_release)
    if update_debsrc_entry "$release"; then
        as_root apt-get update -q
    fi
    log "ucx source: apt-get source ucx=$ver"
    rm -rf "$srcdir"
    (cd "$deps" && apt-get source -q "ucx=$ver") ||
        die "Debian's mirror did not serve the source package ucx=$ver (the installed libucx0's, Debian $release): download UCX ${upstream%%[+~]*}'s source (ucx-${upstream%%[+~]*}.tar.gz, UCX's releases on GitHub) and run again with RC_TM_UCX_SRC=/path/to/ucx-${upstream%%[+~]*}.tar.gz"
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
# suite.  The release is awk's variable rel (bookworm, trixie); entries of
# other releases are never used.  mode=have-src: succeeds when a deb-src
# entry serves rel main.  mode=entry: prints a deb822 deb-src stanza for
# rel main made from the deb entry that serves it (its URI, its suites of
# rel at that URI, its Signed-By and Trusted), or fails (status 3) when
# there is none.  A third-party repository with a suite rel and a
# component main names its own key: an entry with Debian's key, or none,
# goes first.  mode=release: prints deb822 deb stanzas for the release
# named by awk's variable to, main only, made from the machine's deb
# entries of rel that have Debian's key or none (rel, rel-updates,
# rel-security...: their URIs, keys, and suites with to for rel), or fails
# (status 3) when there are none: the sources of a root of another Debian
# release on the same mirror (contrib/debian-root.sh).
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
function of_rel(suite) {
    return suite == rel || substr(suite, 1, length(rel) + 1) == rel "-"
}
function debian_key(i) { return K[i] == "" || K[i] ~ /debian-archive-keyring/ }
function keys(i) {
    if (K[i] != "") print "Signed-By: " K[i]
    if (R[i] != "") print "Trusted: " R[i]
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
    if (rel == "") exit 2
    if (mode == "release") {
        for (i = 1; i <= n; i++) {
            if (T[i] != "deb" || C[i] !~ / main / || !of_rel(S[i]) || !debian_key(i))
                continue
            for (g = 1; g <= ng; g++)
                if (U[G[g]] == U[i] && K[G[g]] == K[i] && R[G[g]] == R[i]) break
            if (g > ng) { ng++; G[ng] = i; GS[ng] = "" }
            s = to substr(S[i], length(rel) + 1)
            if (index(" " GS[g] " ", " " s " ") == 0)
                GS[g] = GS[g] (GS[g] == "" ? "" : " ") s
        }
        if (!ng) exit 3
        for (g = 1; g <= ng; g++) {
            if (g > 1) print ""
            print "Types: deb"
            print "URIs: " U[G[g]]
            print "Suites: " GS[g]
            print "Components: main"
            keys(G[g])
        }
        exit 0
    }
    for (i = 1; i <= n; i++)
        if (S[i] == rel && C[i] ~ / main /) {
            if (mode == "have-src" && T[i] == "deb-src") exit 0
            if (mode == "entry" && T[i] == "deb") {
                debian = debian_key(i)
                if (!d || (debian && !d_debian)) { d = i; d_debian = debian }
            }
        }
    if (mode == "have-src") exit 1
    if (!d) exit 3
    for (i = 1; i <= n; i++)
        if (T[i] == "deb" && U[i] == U[d] && C[i] ~ / main / &&
            of_rel(S[i]) && index(" " suites " ", " " S[i] " ") == 0)
            suites = suites (suites == "" ? "" : " ") S[i]
    print "Types: deb-src"
    print "URIs: " U[d]
    print "Suites: " suites
    print "Components: main"
    keys(d)
}'

# The deb-src stanza for the release's main ($1, default the machine's),
# from this machine's deb entry for it
debsrc_entry() {
    local release=${1:-} files rc=0
    [ -n "$release" ] || release=$(machine_release)
    mapfile -t files < <(apt_source_files)
    [ ${#files[@]} -gt 0 ] || die "no apt sources in $apt_dir (sources.list, sources.list.d/*.list or *.sources)"
    awk -v mode=entry -v rel="$release" "$apt_sources_awk" "${files[@]}" || rc=$?
    [ $rc -eq 3 ] && die "no deb entry serves Debian $release main in $apt_dir/sources.list or $apt_dir/sources.list.d/ (*.list, *.sources): add your site's Debian mirror for $release main, and setup.sh derives the deb-src entry from it (or set RC_TM_UCX_SRC to UCX's source)"
    [ $rc -eq 0 ] || die "could not read apt's sources in $apt_dir (awk exited with $rc)"
}

# deb822 stanzas for Debian release $1 (main) on the mirrors this machine
# uses for its own release (contrib/debian-root.sh's apt sources)
release_entries() {
    local to=$1 release files rc=0
    release=$(machine_release)
    mapfile -t files < <(apt_source_files)
    [ ${#files[@]} -gt 0 ] || die "no apt sources in $apt_dir (sources.list, sources.list.d/*.list or *.sources)"
    awk -v mode=release -v rel="$release" -v to="$to" "$apt_sources_awk" "${files[@]}" || rc=$?
    [ $rc -eq 3 ] && die "no deb entry with Debian's key serves Debian $release main in $apt_dir/sources.list or $apt_dir/sources.list.d/: add your site's Debian mirror, or name one with RC_TM_ROOT_MIRROR=URI"
    [ $rc -eq 0 ] || die "could not read apt's sources in $apt_dir (awk exited with $rc)"
}

# Makes sure apt has a deb-src entry for the release's main ($1, default
# the machine's): the machine's own if it has one, else setup.sh's
# ($debsrc_file), derived from the deb entry, so a site's mirror or proxy
# serves the source package too.  Succeeds when it wrote the file (apt-get
# update needed), fails when nothing changed.
update_debsrc_entry() {
    local release=${1:-} files entry
    [ -n "$release" ] || release=$(machine_release)
    mapfile -t files < <(apt_source_files)
    if [ ${#files[@]} -gt 0 ] &&
       awk -v mode=have-src -v rel="$release" "$apt_sources_awk" "${files[@]}"; then
        return 1
    fi
    entry=$(debsrc_entry "$release") || exit 1
    if [ -f "$debsrc_file" ] && [ "$(cat "$debsrc_file")" = "$entry" ]; then
        return 1
    fi
    log "apt: deb-src entry for $release main, from the deb entry: $debsrc_file"
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

# With RC_TM_UCX: its programs and libraries come first for everything
# setup.sh runs (ucx_info, ucx_perftest, and Open MPI's UCX under mpirun)
use_ucx_prefix() {
    [ -n "$ucx_prefix" ] || return 0
    local libdir=$ucx_prefix/lib version
    version=$(ucx_installed_version) || exit 1
    [ -x "$ucx_prefix/bin/ucx_info" ] ||
        die "RC_TM_UCX=$ucx_prefix has no bin/ucx_info: name the prefix UCX was installed into (contrib/build-ucx.sh TARBALL PREFIX)"
    [ -d "$ucx_prefix/lib64" ] && libdir=$ucx_prefix/lib64
    export PATH=$ucx_prefix/bin:$PATH
    export LD_LIBRARY_PATH=$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    log "ucx: $ucx_prefix (UCX $version; PATH and LD_LIBRARY_PATH lead there)"
}

# Configures build directory $1 with the UCX source and prefix, and more
# arguments ($2...), when it has never been, when configure is newer, or
# when the arguments changed (another UCX, say)
configure_dir() {
    local dir=$1 srcdir args
    shift
    srcdir=$(cat "$deps/ucx-src.path")
    # shellcheck disable=SC2206  # RC_TM_CONFIGURE_FLAGS: words
    args=(--with-ucx-src="$srcdir" ${ucx_prefix:+--with-ucx="$ucx_prefix"} "$@" ${RC_TM_CONFIGURE_FLAGS:-})
    mkdir -p "$dir"
    if [ ! -f "$dir/config.status" ] || [ "$top/configure" -nt "$dir/config.status" ] ||
       [ "$(cat "$dir/.rc_tm-configure-args" 2>/dev/null)" != "${args[*]}" ]; then
        log "configure ${args[*]} (build dir $dir)"
        rm -f "$dir/.rc_tm-configure-args"
        (cd "$dir" && "$top/configure" "${args[@]}")
        printf '%s\n' "${args[*]}" > "$dir/.rc_tm-configure-args"
    fi
}

configure_and_build() {
    if needs_autogen; then
        log "autogen"
        (cd "$top" && ./autogen.sh)
    fi
    configure_dir "$build"
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
    log "benchmark: $(command -v ucx_perftest) over rc_tm, UCX's rc_verbs on the same software NIC, sm, posix and tcp, then deep receive queues (ucp_deep_queue) over rc_tm, sm and posix, then overlap with computation (mpi_overlap under mpirun) over rc_tm with its engine thread and inline, sm and posix, then latency with many idle peers (mpi_many_peers under mpirun, 2 and 34 ranks) over rc_tm and sm, then a halo exchange (mpi_halo under mpirun, 2 and 4 ranks, 1 KiB to 256 KiB) over rc_tm, posix and sm (5 minutes on an idle 2-core machine)"
    log "this host: $(nproc) CPUs (nproc), $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)"
    /usr/bin/python3 "$top/test/bench/perftest_compare.py" --module "$module" \
        --interposer "$build/test/interpose/.libs/libsoftnic_verbs.so" \
        --deep-queue "$build/test/bench/ucp_deep_queue" \
        --overlap "$build/test/bench/mpi_overlap" \
        --peers "$build/test/bench/mpi_many_peers" \
        --halo "$build/test/bench/mpi_halo" \
        --line-pingpong "$build/test/bench/line_pingpong" \
        --png "$out/perftest.png" | tee "$out/perftest.txt"
    log "table: $out/perftest.txt"
    log "plot:  $out/perftest.png"
}

# The Debian package: built from this tree, installed, and checked with
# installed paths only (contrib/build-deb.sh --install --verify).  A package
# this check installed is removed again, so the machine is left as it was;
# RC_TM_SKIP_PACKAGE=1 skips it, and so does RC_TM_UCX (the package is
# built for Debian's libucx0).
check_package() {
    if [ "${RC_TM_SKIP_PACKAGE:-0}" = 1 ]; then
        log "package: skipped (RC_TM_SKIP_PACKAGE=1)"
        return 0
    fi
    if [ -n "$ucx_prefix" ]; then
        log "package: skipped (RC_TM_UCX: the Debian package is built for Debian's libucx0)"
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
    # shellcheck disable=SC2086
    make -C "$build" -j"$(nproc)" check \
        ${RC_TM_CHECK_TESTS:+TESTS="$RC_TM_CHECK_TESTS"} || rc=$?
    check_package || rc=$?
    # One closing line for whoever reads the log: test programs passed/failed
    local pass fail
    pass=$(sed -n 's/^# PASS: *//p' "$build/test-suite.log" 2>/dev/null | head -1)
    fail=$(sed -n 's/^# FAIL: *//p' "$build/test-suite.log" 2>/dev/null | head -1)
    echo "tests: ${pass:-0} passed, ${fail:-0} failed"
    print_failed_logs "$build"
    print_stress_figures "$build"
    case $(sanitizers) in
        both) run_sanitizer_check || rc=$?; run_tsan_check || rc=$? ;;
        asan) run_sanitizer_check || rc=$?; log "ThreadSanitizer build: skipped (RC_TM_SANITIZERS=asan)" ;;
        tsan) log "AddressSanitizer build: skipped (RC_TM_SANITIZERS=tsan)"; run_tsan_check || rc=$? ;;
        none) log "sanitizer builds: skipped (RC_TM_SANITIZERS=none)" ;;
    esac
    return $rc
}

# Which sanitizer builds 'check' adds (RC_TM_SANITIZERS)
sanitizers() {
    case ${RC_TM_SANITIZERS:-both} in
        both|asan|tsan|none) echo "${RC_TM_SANITIZERS:-both}" ;;
        *) die "RC_TM_SANITIZERS=$RC_TM_SANITIZERS: use both, asan, tsan or none" ;;
    esac
}

# What each failed test program said, for a CI log that shows only this
# output: its failure lines and its last lines
print_failed_logs() { # build directory
    local trs log
    for trs in $(grep -rl '^:test-result: FAIL' "$1" --include='*.trs' 2>/dev/null); do
        log=${trs%.trs}.log
        echo "=== failed: ${log#"$1"/}"
        grep -E -m 40 'Failure|FAILED|FAIL:|Expected|Which is|actual|Value of|ERROR' "$log" || true
        echo "--- its last lines:"
        tail -n 30 "$log"
    done
}

# The stress test's figures (seed, messages, time, rate) for the log
print_stress_figures() {
    sed -n 's/^\[stress\] \(seed [0-9]*: .*\)/stress: \1/p' \
        "$1/test/gtest/stress/test_stress.log" 2>/dev/null || true
}

# The googletest programs once more, in a build directory of their own
# configured with $2 ($3 names it in the log): any report fails the run
run_gtest_build_check() {
    local dir=$1 flag=$2 what=$3 rc=0
    configure_dir "$dir" "$flag"
    log "make check-gtest in $dir ($what)"
    rm -f "$dir/test-suite.log"
    make -C "$dir" -j"$(nproc)" >/dev/null &&
        make -C "$dir" -j"$(nproc)" check-gtest || rc=$?
    local pass fail
    pass=$(sed -n 's/^# PASS: *//p' "$dir/test-suite.log" 2>/dev/null | head -1)
    fail=$(sed -n 's/^# FAIL: *//p' "$dir/test-suite.log" 2>/dev/null | head -1)
    echo "tests under $what: ${pass:-0} passed, ${fail:-0} failed"
    print_failed_logs "$dir"
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

sanitizers >/dev/null
mkdir -p "$deps"
install_packages
use_ucx_prefix
fetch_ucx_source
[ "$action" = deps ] && exit 0
configure_and_build
case $action in
    demo)  run_demo ;;
    check) run_check ;;
esac
