#!/bin/sh
# Runs a command where /dev/infiniband/softnic0 exists: the character device
# UCX's ib memory domain looks for before it lists the software NIC, as it
# looks for an RDMA device's /dev/infiniband/uverbsN (uct_ib_device_is_accessible
# in ib_md.c, UCX 1.13 to 1.22: stat, S_ISCHR, access(R_OK | W_OK) on
# /dev/infiniband/<dev_name>).  Nothing opens the node: the interposer
# (test/interpose) serves the device.
#
#   test/softnic_dev_node.sh COMMAND [ARG]...
#
# LD_PRELOAD, or SOFTNIC_DEV_NODE_PRELOAD where what runs before COMMAND
# (libtool --mode=execute, this script) must not have it, is what COMMAND
# preloads.
#
# When the node is there and readable and writable, COMMAND runs as it is.
# Otherwise, as root, COMMAND runs in a mount namespace of its own
# (unshare) in which a tmpfs lies over /dev/infiniband, holding what the
# directory held and the node (the numbers of /dev/null: a character
# device nothing reaches through).  The namespace, the tmpfs and the node
# go with COMMAND; the one trace left is the directory /dev/infiniband,
# made empty where it is missing (on the machine's devtmpfs: gone at
# reboot).  Anything that cannot be done fails, with what is missing, and
# the command does not run: a test that needs the node must not pass
# without it.
set -eu

node=/dev/infiniband/softnic0
self=$0

# What COMMAND preloads (the interposer, a UCX module) is COMMAND's: this
# script's own programs run without it
if [ -n "${LD_PRELOAD+x}" ]; then
    SOFTNIC_DEV_NODE_PRELOAD=$LD_PRELOAD
    export SOFTNIC_DEV_NODE_PRELOAD
    unset LD_PRELOAD
fi
run() {
    if [ -n "${SOFTNIC_DEV_NODE_PRELOAD+x}" ]; then
        LD_PRELOAD=$SOFTNIC_DEV_NODE_PRELOAD
        export LD_PRELOAD
        unset SOFTNIC_DEV_NODE_PRELOAD
    fi
    exec "$@"
}

fail() {
    printf 'softnic_dev_node: %s\n' "$*" >&2
    exit 1
}

usable() { [ -c "$node" ] && [ -r "$node" ] && [ -w "$node" ]; }

[ $# -gt 0 ] || fail "no command given (use: $self COMMAND [ARG]...)"

if usable; then
    run "$@"
fi

if [ -z "${SOFTNIC_DEV_NODE_NS:-}" ]; then
    [ "$(id -u)" -eq 0 ] ||
        fail "$node is missing and only root can provide it: run as root," \
             "or create it once (as root: mkdir -p /dev/infiniband &&" \
             "mknod -m 666 $node c 1 3)"
    command -v unshare >/dev/null 2>&1 ||
        fail "$node is missing and unshare (util-linux) is not installed"
    if [ ! -d /dev/infiniband ]; then
        mkdir -p /dev/infiniband || fail "cannot create /dev/infiniband"
    fi
    # (--propagation unchanged: in a chroot, such as the Debian 13 root,
    # / is no mount point and cannot be made private; /dev is, below)
    unshare --mount --propagation unchanged -- true ||
        fail "$node is missing, and no mount namespace of its own can" \
             "be made to provide it (unshare --mount)"
    SOFTNIC_DEV_NODE_NS=1 exec unshare --mount --propagation unchanged \
        -- sh "$self" "$@"
fi

# In the namespace: nothing mounted here reaches another namespace (/dev
# may be a shared mount), then a tmpfs over the directory, with what it held
mount --make-rprivate /dev ||
    fail "cannot make /dev private in the namespace (is /dev a mount point?)"
orig=$(mktemp -d "${TMPDIR:-/tmp}/softnic_dev_node.XXXXXX") ||
    fail "cannot make a temporary directory"
mount --bind /dev/infiniband "$orig" ||
    fail "cannot bind-mount /dev/infiniband (in the namespace)"
mount -t tmpfs -o mode=0755,size=64k softnic_dev_node /dev/infiniband ||
    fail "cannot mount a tmpfs on /dev/infiniband (in the namespace)"
cp -a "$orig"/. /dev/infiniband/ ||
    fail "cannot copy the entries of /dev/infiniband"
umount "$orig" && rmdir "$orig"
mknod -m 0666 "$node" c 1 3 || fail "cannot create $node"
usable || fail "$node was created but is not a readable, writable" \
               "character device"
unset SOFTNIC_DEV_NODE_NS
run "$@"
