#!/usr/bin/env bash
# contrib/setup.sh's deb-src entry, derived from apt's own sources: fake apt
# directories (RC_TM_APT_DIR) with deb822 and one-line entries, a site
# mirror, a proxy, a third-party repository, disabled and commented-out
# entries, none at all.  Where apt-get is installed, apt itself reads each
# fake directory and the entry written into it (apt-get indextargets): the
# entry's URI is one apt serves bookworm main from, and apt then lists a
# deb-src target for bookworm main there.
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

# A setup.sh function run with a fake apt directory, in a shell of its own
in_setup() { # apt dir, function, args...
    local dir=$1; shift
    # shellcheck source=../contrib/setup.sh
    (export RC_TM_APT_DIR=$dir; . "$setup"; "$@")
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

# The derived entry's URI is one apt itself serves deb bookworm main from
apt_agrees() { # dir, entry
    [ $have_apt = no ] && return 0
    local uri
    uri=$(printf '%s\n' "$2" | sed -n 's/^URIs: //p')
    apt_targets "$1" | grep -qx "deb ${uri%/}/ bookworm main"
}

# expect_entry NAME DIR EXPECTED: the stanza setup.sh derives, exactly
expect_entry() {
    local out
    out=$(in_setup "$2" debsrc_entry 2>&1)
    check "$1: entry" test "$out" = "$3"
    [ "$out" = "$3" ] || printf 'got:\n%s\nexpected:\n%s\n' "$out" "$3"
    check "$1: apt serves bookworm main from its URI" apt_agrees "$2" "$out"
}

# expect_failure NAME DIR: no entry, status 1, the reason on stderr
expect_failure() {
    local out rc=0
    out=$(in_setup "$2" debsrc_entry 2>&1 >/dev/null) || rc=$?
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

echo "setup_test: $passes passed, $fails failed"
[ $fails -eq 0 ]
