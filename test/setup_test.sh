#!/usr/bin/env bash
# contrib/setup.sh's deb-src entry, derived from apt's own sources: fake apt
# directories (RC_TM_APT_DIR) with deb822 and one-line entries, a site
# mirror, a proxy, a third-party repository, disabled and commented-out
# entries, none at all, on a Debian 12 and a Debian 13 machine (a fake
# /etc/os-release, RC_TM_OS_RELEASE), and entries of both releases.  Where
# apt-get is installed, apt itself reads each fake directory and the entry
# written into it (apt-get indextargets): the entry's URI is one apt serves
# the release's main from, and apt then lists a deb-src target for it
# there.  Then the sources of a root of another release (release_entries),
# and where the UCX source comes from: RC_TM_UCX_SRC (a tarball or a tree,
# its version against the installed UCX's), RC_TM_UCX (a prefix), and
# Debian's source package by its source version (fake dpkg-query and
# apt-get in PATH).
# shellcheck disable=SC2016  # $(...) in apt's --format, "$1" in sh -c
set -u
srcdir=${RC_TM_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
setup=$srcdir/contrib/setup.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/rc_tm_setup_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0 passes=0

check() { # name, command...
    local name=$1; shift
    if "$@"; then passes=$((passes + 1)); echo "PASS: $name"
    else fails=$((fails + 1)); echo "FAIL: $name"; fi
}

# Fake /etc/os-release files: a Debian 12 and a Debian 13 machine
printf 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_ID="12"\nVERSION_CODENAME=bookworm\nID=debian\n' > "$tmp/os-bookworm"
printf 'PRETTY_NAME="Debian GNU/Linux 13 (trixie)"\nVERSION_ID="13"\nVERSION_CODENAME=trixie\nID=debian\n' > "$tmp/os-trixie"
printf 'PRETTY_NAME="Debian GNU/Linux trixie/sid"\nID=debian\n' > "$tmp/os-none"
os_release=$tmp/os-bookworm

# A setup.sh function run with a fake apt directory, on the machine
# $os_release describes, in a shell of its own
in_setup() { # apt dir, function, args...
    local dir=$1; shift
    # shellcheck source=../contrib/setup.sh
    (export RC_TM_APT_DIR=$dir RC_TM_OS_RELEASE=$os_release; . "$setup"; "$@")
}

# A fake apt directory: fake NAME FILE CONTENT [FILE CONTENT]...
fake() {
    local dir=$tmp/$1; shift
    mkdir -p "$dir/sources.list.d"
    while [ $# -ge 2 ]; do
        printf '%s\n' "$2" > "$dir/$1"
        shift 2
    done
    echo "$dir"
}

# What apt reads from a directory: "type uri suite component" per target
apt_targets() { # dir
    apt-get indextargets -o Dir::Etc::SourceList="$1/sources.list" \
        -o Dir::Etc::SourceParts="$1/sources.list.d" \
        -o APT::Get::IndexTargets::ReleaseInfo=false \
        --format '$(TARGET_OF) $(REPO_URI) $(RELEASE) $(COMPONENT)' | sort -u
}
have_apt=no
command -v apt-get >/dev/null && have_apt=yes

# The derived entry's URI is one apt itself serves deb RELEASE main from
apt_agrees() { # dir, entry, release
    [ $have_apt = no ] && return 0
    local uri
    uri=$(printf '%s\n' "$2" | sed -n 's/^URIs: //p')
    apt_targets "$1" | grep -qx "deb ${uri%/}/ $3 main"
}

# expect_entry NAME DIR EXPECTED [RELEASE]: the stanza setup.sh derives on
# a machine of RELEASE (default bookworm), exactly
expect_entry() {
    local out rel=${4:-bookworm}
    out=$(os_release=$tmp/os-$rel in_setup "$2" debsrc_entry 2>&1)
    check "$1: entry" test "$out" = "$3"
    [ "$out" = "$3" ] || printf 'got:\n%s\nexpected:\n%s\n' "$out" "$3"
    check "$1: apt serves $rel main from its URI" apt_agrees "$2" "$out" "$rel"
}

# expect_failure NAME DIR REASON [RELEASE]: no entry, status 1, the reason
# on stderr
expect_failure() {
    local out rc=0
    out=$(os_release=$tmp/os-${4:-bookworm} in_setup "$2" debsrc_entry 2>&1 >/dev/null) || rc=$?
    check "$1: fails" test $rc -eq 1
    check "$1: says why" sh -c 'printf "%s\n" "$1" | grep -q "$2"' - "$out" "$3"
}

# A site mirror in deb822, with apt's comment lines inside the stanza and
# security from another URI
d=$(fake mirror822 sources.list.d/debian.sources "Types: deb
# the site's mirror of Debian
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.invalid/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg")
expect_entry "deb822 site mirror" "$d" "Types: deb-src
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"

# One-line entries through a caching proxy, options in brackets, suites on
# lines of their own, a commented-out entry and a .list file; a file apt
# does not read (other suffix) names another mirror
d=$(fake proxy1 sources.list "# deb http://old.invalid/debian bookworm main
deb [ arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg ] http://proxy.invalid:3142/debian/ bookworm main non-free-firmware
deb [arch=amd64 signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://proxy.invalid:3142/debian/ bookworm-updates main
deb http://proxy.invalid:3142/debian-security bookworm-security main" \
    sources.list.d/extra.list "deb http://proxy.invalid:3142/debian bookworm-backports main  contrib" \
    sources.list.d/old.sources.disabled "Types: deb
URIs: http://old.invalid/debian
Suites: bookworm
Components: main")
expect_entry "one-line proxy" "$d" "Types: deb-src
URIs: http://proxy.invalid:3142/debian
Suites: bookworm bookworm-updates bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"

# A third-party repository with a suite bookworm and a component main comes
# first in apt's order, with its own key; a disabled stanza names another
# mirror; Debian's own entry has no Signed-By (trusted.gpg.d)
d=$(fake vendor sources.list.d/a-vendor.list \
    "deb [signed-by=/usr/share/keyrings/vendor.gpg] https://vendor.invalid/apt bookworm main" \
    sources.list.d/b-old.sources "Types: deb
URIs: http://old.invalid/debian
Suites: bookworm
Components: main
Enabled: no" \
    sources.list.d/debian.sources "Types: deb
URIs: file:/srv/mirror/debian
Suites: bookworm
Components: main")
expect_entry "third-party repository first" "$d" "Types: deb-src
URIs: file:/srv/mirror/debian
Suites: bookworm
Components: main"

# An inline key (a deb822 multi-line field) and trusted=yes, carried over
d=$(fake inline sources.list.d/debian.sources "Types: deb
URIs: http://mirror.invalid/debian
Suites: bookworm
Components: main
Signed-By:
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mDMEZFAKEKEY
 -----END PGP PUBLIC KEY BLOCK-----")
expect_entry "inline key" "$d" "Types: deb-src
URIs: http://mirror.invalid/debian
Suites: bookworm
Components: main
Signed-By: 
 -----BEGIN PGP PUBLIC KEY BLOCK-----
 .
 mDMEZFAKEKEY
 -----END PGP PUBLIC KEY BLOCK-----"
d=$(fake trusted sources.list "deb [trusted=yes] http://mirror.invalid/debian bookworm main")
expect_entry "trusted=yes" "$d" "Types: deb-src
URIs: http://mirror.invalid/debian
Suites: bookworm
Components: main
Trusted: yes"

# Nothing serves bookworm main: disabled, another component, another suite
d=$(fake none sources.list "deb http://mirror.invalid/debian bookworm contrib non-free
deb http://mirror.invalid/debian trixie main" \
    sources.list.d/debian.sources "Types: deb
URIs: http://mirror.invalid/debian
Suites: bookworm
Components: main
Enabled: no")
expect_failure "no bookworm main" "$d" "no deb entry serves Debian bookworm main"
d=$(fake empty)
expect_failure "no sources" "$d" "no apt sources in"

# Writing it: once, then nothing to do; a new mirror rewrites it; the
# machine's own deb-src entry leaves it alone
d=$(fake write sources.list.d/debian.sources "Types: deb
URIs: http://mirror.invalid/debian
Suites: bookworm
Components: main")
ours=$d/sources.list.d/rc-tm-deb-src.sources
check "write: first call writes" in_setup "$d" update_debsrc_entry
check "write: the entry written" test "$(cat "$ours" 2>/dev/null)" = "Types: deb-src
URIs: http://mirror.invalid/debian
Suites: bookworm
Components: main"
touch -d @1000000000 "$ours"
if in_setup "$d" update_debsrc_entry >/dev/null; then rc=0; else rc=1; fi
check "write: second call changes nothing" test $rc -eq 1
check "write: file untouched" test "$(stat -c %Y "$ours")" = 1000000000
if [ $have_apt = yes ]; then
    check "write: apt lists deb-src bookworm main from the mirror" \
        sh -c 'printf "%s\n" "$1" | grep -qx "deb-src http://mirror.invalid/debian/ bookworm main"' \
        - "$(apt_targets "$d")"
fi
sed -i 's|mirror.invalid|mirror2.invalid|' "$d/sources.list.d/debian.sources"
check "write: a new mirror rewrites it" in_setup "$d" update_debsrc_entry
check "write: the new mirror's entry" grep -qx "URIs: http://mirror2.invalid/debian" "$ours"
d=$(fake own sources.list "deb http://mirror.invalid/debian bookworm main
deb-src http://mirror.invalid/debian bookworm main")
if in_setup "$d" update_debsrc_entry >/dev/null; then rc=0; else rc=1; fi
check "machine's own deb-src: nothing to do" test $rc -eq 1
check "machine's own deb-src: nothing written" \
    test ! -e "$d/sources.list.d/rc-tm-deb-src.sources"

# The machine's release, from its os-release
check "release: Debian 12" test "$(os_release=$tmp/os-bookworm in_setup "$tmp" machine_release)" = bookworm
check "release: Debian 13" test "$(os_release=$tmp/os-trixie in_setup "$tmp" machine_release)" = trixie
out=$(os_release=$tmp/os-none in_setup "$tmp" machine_release 2>&1) && rc=0 || rc=$?
check "release: no codename fails" test "$rc" -eq 1
check "release: no codename, says so" sh -c 'printf "%s\n" "$1" | grep -q "names no VERSION_CODENAME"' - "$out"
out=$(os_release=$tmp/nowhere in_setup "$tmp" machine_release 2>&1) && rc=0 || rc=$?
check "release: no os-release fails" test "$rc" -eq 1

# A Debian 13 machine: its own entries, and never the other release's
d=$(fake trixie822 sources.list.d/debian.sources "Types: deb
URIs: http://mirror.invalid/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.invalid/debian-security
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg")
expect_entry "Debian 13 deb822 mirror" "$d" "Types: deb-src
URIs: http://mirror.invalid/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" trixie
expect_failure "Debian 12 with only trixie entries" "$d" "no deb entry serves Debian bookworm main" bookworm

# Both releases on one machine (a half-done upgrade, a pinned release):
# each machine takes its own suites, bookworm-backports is not trixie's
d=$(fake mixed sources.list "deb http://mirror.invalid/debian bookworm main
deb http://mirror.invalid/debian bookworm-updates main
deb http://mirror.invalid/debian bookworm-backports main
deb http://other.invalid/debian trixie main
deb http://other.invalid/debian trixie-updates main
deb http://other.invalid/debian trixie-backports main
deb http://other.invalid/debian bookwormish main")
expect_entry "mixed releases, Debian 12" "$d" "Types: deb-src
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates bookworm-backports
Components: main"
expect_entry "mixed releases, Debian 13" "$d" "Types: deb-src
URIs: http://other.invalid/debian
Suites: trixie trixie-updates trixie-backports
Components: main" trixie

# A deb-src entry of the other release is not one for this release
d=$(fake othersrc sources.list "deb http://mirror.invalid/debian trixie main
deb-src http://mirror.invalid/debian bookworm main")
if os_release=$tmp/os-trixie in_setup "$d" update_debsrc_entry >/dev/null; then rc=0; else rc=1; fi
check "bookworm deb-src on Debian 13: writes trixie's" test $rc -eq 0
check "bookworm deb-src on Debian 13: the entry written" \
    grep -qx "Suites: trixie" "$d/sources.list.d/rc-tm-deb-src.sources"
if [ $have_apt = yes ]; then
    check "Debian 13: apt lists deb-src trixie main from the mirror" \
        sh -c 'printf "%s\n" "$1" | grep -qx "deb-src http://mirror.invalid/debian/ trixie main"' \
        - "$(apt_targets "$d")"
fi
# The machine upgraded from 12 to 13: the entry written for 12 is rewritten
d=$(fake upgraded sources.list.d/debian.sources "Types: deb
URIs: http://mirror.invalid/debian
Suites: bookworm
Components: main")
in_setup "$d" update_debsrc_entry >/dev/null
sed -i 's/bookworm/trixie/' "$d/sources.list.d/debian.sources"
if os_release=$tmp/os-trixie in_setup "$d" update_debsrc_entry >/dev/null; then rc=0; else rc=1; fi
check "upgrade to 13: rewrites the entry" test $rc -eq 0
check "upgrade to 13: trixie's entry" grep -qx "Suites: trixie" "$d/sources.list.d/rc-tm-deb-src.sources"

# The sources of a Debian 13 root on a Debian 12 machine (debian-root.sh):
# the machine's mirrors for its release, Debian's key, main only; a
# third-party repository and other releases left out
d=$(fake rootsrc sources.list.d/debian.sources "Types: deb
URIs: http://mirror.invalid/debian
Suites: bookworm bookworm-updates
Components: main contrib
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.invalid/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" \
    sources.list.d/vendor.list "deb [signed-by=/usr/share/keyrings/vendor.gpg] https://vendor.invalid/apt bookworm main
deb http://mirror.invalid/debian sid main")
out=$(in_setup "$d" release_entries trixie 2>&1)
expected="Types: deb
URIs: http://mirror.invalid/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://mirror.invalid/debian-security
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg"
check "root sources: trixie from bookworm's mirrors" test "$out" = "$expected"
[ "$out" = "$expected" ] || printf 'got:\n%s\nexpected:\n%s\n' "$out" "$expected"
if [ $have_apt = yes ]; then
    mkdir -p "$tmp/rootapt/sources.list.d"
    printf '%s\n' "$out" > "$tmp/rootapt/sources.list.d/debian.sources"
    check "root sources: apt lists deb trixie-security main" \
        sh -c 'printf "%s\n" "$1" | grep -qx "deb http://mirror.invalid/debian-security/ trixie-security main"' \
        - "$(apt_targets "$tmp/rootapt")"
fi
d=$(fake rootnone sources.list "deb [signed-by=/usr/share/keyrings/vendor.gpg] https://vendor.invalid/apt bookworm main")
out=$(in_setup "$d" release_entries trixie 2>&1 >/dev/null) && rc=0 || rc=$?
check "root sources: none fails" test $rc -eq 1
check "root sources: none, says what to do" sh -c 'printf "%s\n" "$1" | grep -q "RC_TM_ROOT_MIRROR"' - "$out"

# Where the UCX source comes from.  A fake installed UCX (a prefix with
# uct/api/version.h), fake UCX sources (configure.ac with UCX's version
# lines, src/uct/base/uct_iface.h), tarballs of them
fake_prefix() { # dir, version
    local IFS=.
    # shellcheck disable=SC2086
    set -- "$1" $2
    mkdir -p "$1/include/uct/api" "$1/bin"
    printf '#define UCT_VERNO_MAJOR            %s\n#define UCT_VERNO_MINOR            %s\n#define UCT_VERNO_PATCH            %s\n' \
        "$2" "$3" "$4" > "$1/include/uct/api/version.h"
    printf '#!/bin/sh\n' > "$1/bin/ucx_info"; chmod +x "$1/bin/ucx_info"
}
fake_ucx_tree() { # dir, version
    local IFS=.
    # shellcheck disable=SC2086
    set -- "$1" $2
    mkdir -p "$1/src/uct/base"
    : > "$1/src/uct/base/uct_iface.h"
    printf 'AC_PREREQ([2.63])\n\ndefine([ucx_ver_major], %s)  # Major version.\ndefine([ucx_ver_minor], %s) # Minor version.\ndefine([ucx_ver_patch], %s)  # Patch version.\ndefine([ucx_ver_extra], )\n' \
        "$2" "$3" "$4" > "$1/configure.ac"
}
fake_prefix "$tmp/ucx-1.22.0-install" 1.22.0
fake_ucx_tree "$tmp/trees/ucx-1.22.0" 1.22.0
fake_ucx_tree "$tmp/trees/ucx-1.18.1" 1.18.1
tar -C "$tmp/trees" -czf "$tmp/ucx-1.22.0.tar.gz" ucx-1.22.0
tar -C "$tmp/trees" -czf "$tmp/ucx-1.18.1.tar.gz" ucx-1.18.1
echo "not a tarball" > "$tmp/junk.tar.gz"

# in_ucx DEPS PREFIX SRC function args...: with RC_TM_UCX and RC_TM_UCX_SRC
in_ucx() {
    local deps=$1 prefix=$2 src=$3; shift 3
    mkdir -p "$deps"
    (export RC_TM_DEPS=$deps RC_TM_UCX=$prefix RC_TM_UCX_SRC=$src; in_setup "$tmp" "$@")
}
check "ucx version: a prefix's version.h" \
    test "$(in_ucx "$tmp/d0" "$tmp/ucx-1.22.0-install" "" ucx_installed_version)" = 1.22.0
check "ucx version: a UCX configure.ac" \
    test "$(in_setup "$tmp" ucx_configure_ac_version < "$tmp/trees/ucx-1.18.1/configure.ac")" = 1.18.1

# A tarball of the prefix's version: unpacked once, its path for configure
out=$(in_ucx "$tmp/d1" "$tmp/ucx-1.22.0-install" "$tmp/ucx-1.22.0.tar.gz" fetch_ucx_source 2>&1) && rc=0 || rc=$?
check "tarball: unpacked" test $rc -eq 0 -a -f "$tmp/d1/ucx-1.22.0-src/src/uct/base/uct_iface.h"
check "tarball: its path for configure" test "$(cat "$tmp/d1/ucx-src.path" 2>/dev/null)" = "$tmp/d1/ucx-1.22.0-src"
touch "$tmp/d1/ucx-1.22.0-src/mark"
out=$(in_ucx "$tmp/d1" "$tmp/ucx-1.22.0-install" "$tmp/ucx-1.22.0.tar.gz" fetch_ucx_source 2>&1)
check "tarball: second run unpacks nothing" test -f "$tmp/d1/ucx-1.22.0-src/mark"
check "tarball: second run says ready" sh -c 'printf "%s\n" "$1" | grep -q "ready"' - "$out"
# Of another version: refused, with the version wanted
out=$(in_ucx "$tmp/d2" "$tmp/ucx-1.22.0-install" "$tmp/ucx-1.18.1.tar.gz" fetch_ucx_source 2>&1) && rc=0 || rc=$?
check "tarball of another version: fails" test $rc -eq 1
check "tarball of another version: says which" \
    sh -c 'printf "%s\n" "$1" | grep -q "is UCX 1.18.1, but the installed UCX is 1.22.0"' - "$out"
check "tarball of another version: nothing unpacked" test ! -e "$tmp/d2/ucx-1.18.1-src" -a ! -e "$tmp/d2/ucx-src.path"
out=$(in_ucx "$tmp/d3" "$tmp/ucx-1.22.0-install" "$tmp/junk.tar.gz" fetch_ucx_source 2>&1) && rc=0 || rc=$?
check "not a tarball: fails" test $rc -eq 1
check "not a tarball: says so" sh -c 'printf "%s\n" "$1" | grep -q "is not a UCX source tarball"' - "$out"
out=$(in_ucx "$tmp/d3" "$tmp/ucx-1.22.0-install" "$tmp/nowhere.tar.gz" fetch_ucx_source 2>&1) && rc=0 || rc=$?
check "no such tarball: fails, says what to name" \
    sh -c '[ "$2" -eq 1 ] && printf "%s\n" "$1" | grep -q "does not exist: name UCX 1.22.0"' - "$out" "$rc"
# An unpacked tree: used where it is
out=$(in_ucx "$tmp/d4" "$tmp/ucx-1.22.0-install" "$tmp/trees/ucx-1.22.0" fetch_ucx_source 2>&1) && rc=0 || rc=$?
check "tree: used as it is" test $rc -eq 0 -a "$(cat "$tmp/d4/ucx-src.path" 2>/dev/null)" = "$tmp/trees/ucx-1.22.0"
out=$(in_ucx "$tmp/d5" "$tmp/ucx-1.22.0-install" "$tmp/trees/ucx-1.18.1" fetch_ucx_source 2>&1) && rc=0 || rc=$?
check "tree of another version: fails" test $rc -eq 1
out=$(in_ucx "$tmp/d5" "$tmp/ucx-1.22.0-install" "$tmp/trees" fetch_ucx_source 2>&1) && rc=0 || rc=$?
check "not a UCX tree: fails, says so" \
    sh -c '[ "$2" -eq 1 ] && printf "%s\n" "$1" | grep -q "is not a UCX source tree"' - "$out" "$rc"
# A prefix without its source: says what to set
out=$(in_ucx "$tmp/d6" "$tmp/ucx-1.22.0-install" "" fetch_ucx_source 2>&1) && rc=0 || rc=$?
check "prefix without source: fails, names RC_TM_UCX_SRC" \
    sh -c '[ "$2" -eq 1 ] && printf "%s\n" "$1" | grep -q "RC_TM_UCX_SRC=/path/to/ucx-1.22.0.tar.gz"' - "$out" "$rc"
out=$(in_ucx "$tmp/d6" "$tmp/trees" "$tmp/ucx-1.22.0.tar.gz" use_ucx_prefix 2>&1) && rc=0 || rc=$?
check "not a prefix: fails, names build-ucx.sh" \
    sh -c '[ "$2" -eq 1 ] && printf "%s\n" "$1" | grep -q "contrib/build-ucx.sh"' - "$out" "$rc"

# Debian's source package by its source version, not the binNMU's binary
# version; where the mirror has none, what to do.  Fake dpkg-query and
# apt-get first in PATH; the apt directory has its deb-src entry already.
mkdir -p "$tmp/bin"
cat > "$tmp/bin/dpkg-query" <<'EOF_Q'
#!/bin/sh
# libucx0 1.18.1+ds-2+b1, a binNMU of the source ucx 1.18.1+ds-2
case "$*" in
    *'${source:Version}'*) echo 1.18.1+ds-2 ;;
    *'${Version}'*) echo 1.18.1+ds-2+b1 ;;
    *) exit 1 ;;
esac
EOF_Q
cat > "$tmp/bin/apt-get" <<'EOF_A'
#!/bin/sh
echo "apt-get $*" >> "$FAKE_APT_LOG"
[ "$1" = source ] || exit 0
[ "$FAKE_APT_SERVES" = yes ] || { echo "E: Failed to fetch" >&2; exit 100; }
mkdir -p ucx-1.18.1+ds/src/uct
EOF_A
chmod +x "$tmp/bin/dpkg-query" "$tmp/bin/apt-get"
d=$(fake srcpkg sources.list "deb http://mirror.invalid/debian trixie main
deb-src http://mirror.invalid/debian trixie main")
in_pkg() { # deps, serves, function...
    local deps=$1 serves=$2; shift 2
    mkdir -p "$deps"
    (export PATH=$tmp/bin:$PATH RC_TM_DEPS=$deps RC_TM_UCX='' RC_TM_UCX_SRC='' \
        FAKE_APT_LOG=$deps/apt.log FAKE_APT_SERVES=$serves
     os_release=$tmp/os-trixie in_setup "$d" "$@")
}
out=$(in_pkg "$tmp/p1" yes fetch_ucx_source 2>&1) && rc=0 || rc=$?
check "source package: fetched" test $rc -eq 0
check "source package: asked by source version" grep -qx "apt-get source -q ucx=1.18.1+ds-2" "$tmp/p1/apt.log"
check "source package: its tree for configure" test "$(cat "$tmp/p1/ucx-src.path" 2>/dev/null)" = "$tmp/p1/ucx-1.18.1+ds"
out=$(in_pkg "$tmp/p1" yes fetch_ucx_source 2>&1)
check "source package: second run asks nothing" test "$(grep -c source "$tmp/p1/apt.log")" = 1
out=$(in_pkg "$tmp/p2" no fetch_ucx_source 2>&1) && rc=0 || rc=$?
check "no source package: fails" test $rc -eq 1
check "no source package: one line that names RC_TM_UCX_SRC and the version" \
    sh -c 'printf "%s\n" "$1" | grep "error:" | grep -q "ucx=1.18.1+ds-2.*RC_TM_UCX_SRC=/path/to/ucx-1.18.1.tar.gz"' - "$out"
[ $rc -eq 1 ] || printf '%s\n' "$out"

# RC_TM_SANITIZERS
for v in both asan tsan none; do
    check "RC_TM_SANITIZERS=$v" test "$(RC_TM_SANITIZERS=$v in_setup "$tmp" sanitizers)" = $v
done
out=$(RC_TM_SANITIZERS=all in_setup "$tmp" sanitizers 2>&1) && rc=0 || rc=$?
check "RC_TM_SANITIZERS=all: fails, says the choices" \
    sh -c '[ "$2" -eq 1 ] && printf "%s\n" "$1" | grep -q "both, asan, tsan or none"' - "$out" "$rc"

echo "setup_test: $passes passed, $fails failed"
[ $fails -eq 0 ]
