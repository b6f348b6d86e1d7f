#!/usr/bin/env bash
# A minimal root of another Debian release, made with debootstrap from
# Debian's packages, to run rc_tm's setup and tests there (CI runs
# './contrib/setup.sh check' in a Debian 13 root on a Debian 12 machine).
#
#   contrib/debian-root.sh RELEASE [DIR] [-- COMMAND [ARG]...]
#
#   RELEASE  a Debian codename (trixie)
#   DIR      where the root lives (default .deps/root-RELEASE in the tree;
#            RC_TM_DEPS is the command's, inside the root)
#   COMMAND  run inside the root with chroot, as root, in the repository's
#            top directory (the same path as outside); without one the root
#            is only made
#
# The root is made once (debootstrap --variant=minbase, then a stamp in
# DIR); a second run only enters it.  Its apt sources are the machine's own
# deb entries for its release's main component (its mirror, its security
# mirror, their keys) with the release's name swapped, so the root uses the
# same mirror or proxy the machine does; RC_TM_ROOT_MIRROR=URI names
# another mirror instead (RELEASE and RELEASE-updates, main, Debian's key).  Every run copies the machine's
# /etc/resolv.conf and /etc/hosts into the root.
#
# For the command, in a mount namespace of its own (unshare), the script
# mounts /proc, /sys, /dev and /dev/pts (the machine's), a tmpfs on /dev/shm
# (the software NIC keeps its queues in POSIX shared memory; size
# RC_TM_ROOT_SHM, default half the memory), the repository (read-write) and
# the directory shared/ beside it (read-only, where the UCX tarballs are;
# RC_TM_ROOT_SHARED names another, 'none' for none) at their own paths, and
# unmounts them all when the command ends, failed or not.  The command's
# environment: PATH, HOME, LANG, TERM, CI, the proxy variables and every
# RC_TM_* variable.  Its exit status is the script's.  Run as root.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf '[root] %s\n' "$*" >&2; }
die() { printf '[root] error: %s\n' "$*" >&2; exit 1; }

usage="contrib/debian-root.sh RELEASE [DIR] [-- COMMAND [ARG]...]"
[ $# -ge 1 ] || die "no release given (use: $usage)"
case $1 in
    -h|--help) sed -n '2,30s/^# \{0,1\}//p' "$0"; exit 0 ;;
    -*|'') die "'$1' is not a Debian release codename (use: $usage)" ;;
esac
release=$1; shift
root=$top/.deps/root-$release
if [ $# -gt 0 ] && [ "$1" != -- ]; then root=$1; shift; fi
if [ $# -gt 0 ]; then
    [ "$1" = -- ] || die "unexpected argument '$1' (use: $usage)"
    shift
fi
[ "$(id -u)" -eq 0 ] || die "debootstrap, mount and chroot need root: run this as root (sudo $0 ...)"
case $root in /*) ;; *) root=$PWD/$root ;; esac
root=${root%/}
stamp=$root/.rc_tm-root.stamp

# Mount points under a path, from this mount namespace's table
mounts_under() { # path
    awk -v p="$1" '$5 == p || index($5, p "/") == 1 { print $5 }' /proc/self/mountinfo
}

# Removes a half-made root, refusing when anything is mounted inside it
remove_tree() { # dir
    [ -e "$1" ] || return 0
    [ -z "$(mounts_under "$1")" ] ||
        die "$1 has mounts inside ($(mounts_under "$1" | head -3 | tr '\n' ' ')): unmount them (umount -R) and run again"
    rm -rf --one-file-system "$1"
}

# The root's apt sources: setup.sh's reading of the machine's own entries
release_sources() {
    # shellcheck source=setup.sh
    (. "$top/contrib/setup.sh"
     if [ -n "${RC_TM_ROOT_MIRROR:-}" ]; then
         printf 'Types: deb\nURIs: %s\nSuites: %s %s-updates\nComponents: main\n' \
             "$RC_TM_ROOT_MIRROR" "$release" "$release"
     else
         release_entries "$release"
     fi)
}

# Makes the root, unless its stamp says it is made
make_root() {
    if [ -f "$stamp" ]; then
        log "debian $release root: $root (ready)"
        return
    fi
    if ! command -v debootstrap >/dev/null; then
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap ||
            { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap; } ||
            die "could not install debootstrap (apt-get install debootstrap)"
    fi
    [ -f "/usr/share/debootstrap/scripts/$release" ] ||
        die "this debootstrap ($(dpkg-query -W -f='${Version}' debootstrap 2>/dev/null)) does not know Debian '$release': install a newer debootstrap"
    local sources mirror keyring opts=() t0 tmp=$root.tmp
    sources=$(release_sources) || exit 1
    mirror=$(printf '%s\n' "$sources" | awk '/^URIs:/ { u = $2 } /^Suites:/ && (" " $0 " ") ~ (" " r " ") { print u; exit }' r="$release")
    [ -n "$mirror" ] || die "no apt entry for Debian $release main to make the root from (set RC_TM_ROOT_MIRROR=URI of a Debian mirror)"
    keyring=$(printf '%s\n' "$sources" | awk '/^URIs:/ { u = $2 } /^Signed-By: \// && u == m { print $2; exit }' m="$mirror")
    [ -n "$keyring" ] && opts+=(--keyring="$keyring")
    case $mirror in https:*) opts+=(--include=ca-certificates) ;; esac
    remove_tree "$tmp"
    mkdir -p "$(dirname "$root")"
    log "debootstrap --variant=minbase $release $tmp $mirror"
    t0=$(date +%s)
    debootstrap --variant=minbase "${opts[@]}" "$release" "$tmp" "$mirror" > "$tmp.log" 2>&1 ||
        { tail -n 20 "$tmp.log" >&2; die "debootstrap failed (log: $tmp.log)"; }
    # No service starts inside the root when a package is installed
    printf '#!/bin/sh\nexit 101\n' > "$tmp/usr/sbin/policy-rc.d"
    chmod 755 "$tmp/usr/sbin/policy-rc.d"
    rm -f "$tmp/etc/apt/sources.list"
    remove_tree "$root"
    mv "$tmp" "$root"
    mv "$tmp.log" "$root/.rc_tm-debootstrap.log"
    echo "$release $mirror $(date -u +%FT%TZ)" > "$stamp"
    log "debian $release root made in $(( $(date +%s) - t0 )) s: $root"
}

# The machine's apt sources, name service files, and what a key path
# names, into the root (written only when they changed)
update_root_files() {
    local sources f k
    sources=$(release_sources) || exit 1
    f=$root/etc/apt/sources.list.d/debian.sources
    if [ ! -f "$f" ] || [ "$(cat "$f")" != "$sources" ]; then
        log "apt sources in the root ($f):"
        printf '%s\n' "$sources" | sed 's/^/[root]   /' >&2
        printf '%s\n' "$sources" > "$f"
    fi
    for k in $(printf '%s\n' "$sources" | sed -n 's|^Signed-By: \(/.*\)|\1|p' | sort -u); do
        [ -f "$root$k" ] || { mkdir -p "$(dirname "$root$k")" && cp "$k" "$root$k"; }
    done
    for f in /etc/resolv.conf /etc/hosts; do
        [ -f "$f" ] && cp -L "$f" "$root$f"
    done
    return 0
}

# In the mount namespace: mount, run the command, unmount
mounted=()
unmount_all() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
        umount -R "${mounted[i]}" 2>/dev/null || umount -R -l "${mounted[i]}" ||
            log "could not unmount ${mounted[i]}"
    done
    mounted=()
}
mnt() { # target, mount arguments...
    local target=$1; shift
    mkdir -p "$target"
    mount "$@" "$target" || die "mount $* $target failed"
    mounted+=("$target")
}

run_inside() {
    local shared=${RC_TM_ROOT_SHARED:-} rc=0 v env=()
    if [ -z "$shared" ] && [ -d "$top/../shared" ]; then
        shared=$(cd "$top/../shared" && pwd)
    fi
    trap unmount_all EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    mnt "$root/proc" -t proc proc
    mnt "$root/sys" --rbind /sys
    mnt "$root/dev" --bind /dev
    mnt "$root/dev/pts" --bind /dev/pts
    mnt "$root/dev/shm" -t tmpfs -o "mode=1777,nosuid,nodev${RC_TM_ROOT_SHM:+,size=$RC_TM_ROOT_SHM}" tmpfs
    mnt "$root$top" --bind "$top"
    if [ -n "$shared" ] && [ "$shared" != none ]; then
        [ -d "$shared" ] || die "RC_TM_ROOT_SHARED=$shared is not a directory"
        mnt "$root$shared" --bind "$shared"
        mount -o remount,bind,ro "$root$shared" || die "could not make $root$shared read-only"
    fi
    env=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
         HOME=/root LANG=C.UTF-8 TERM="${TERM:-dumb}")
    for v in CI http_proxy https_proxy no_proxy $(compgen -e RC_TM_ || true); do
        case $v in RC_TM_ROOT_NS) continue ;; esac
        [ -n "${!v+x}" ] && env+=("$v=${!v}")
    done
    log "chroot $root (Debian $(cat "$root/etc/debian_version")): $*"
    chroot "$root" /usr/bin/env -i "${env[@]}" /bin/bash -c 'cd "$1" && shift && exec "$@"' - "$top" "$@" ||
        rc=$?
    unmount_all
    return $rc
}

if [ "${RC_TM_ROOT_NS:-}" != 1 ]; then
    # Once more in a mount namespace of its own: nothing mounted here is seen
    # by the machine, and it all goes when the last process in it ends
    command -v unshare >/dev/null || die "unshare (util-linux) not found: apt-get install util-linux"
    RC_TM_ROOT_NS=1 exec unshare --mount --propagation private -- "$0" "$release" "$root" -- "$@"
fi

make_root
update_root_files
[ $# -eq 0 ] && exit 0
run_inside "$@"
