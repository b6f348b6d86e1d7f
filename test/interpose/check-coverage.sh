#!/bin/sh
# The interposer covers the installed libibverbs: every function
# libibverbs.so.1 exports (name@version) is either defined by the
# interposer with the same version, or named below as taking no object of
# the software NIC.  A function the interposer misses would receive a
# software NIC's object in the real libibverbs: a crash, not an error.
#
#   check-coverage.sh INTERPOSER.so
#
# The libibverbs checked is the one the interposer is linked against
# (ldd), so the check follows the machine (rdma-core 44, 56, ...).
set -euf   # -f: the patterns below are not file names
so=${1:?usage: check-coverage.sh INTERPOSER.so}

# Functions that take no object of the software NIC (device, context, PD,
# MR, CQ, QP, SRQ, channel, ...): the real ones serve every caller.
exempt='
ibv_wc_status_str          # strings of enums
ibv_node_type_str
ibv_port_state_str
ibv_event_type_str
ibv_rate_to_mult           # rate conversions
mult_to_ibv_rate
ibv_rate_to_mbps
mbps_to_ibv_rate
ibv_dofork_range           # madvise on the caller'"'"'s memory
ibv_dontfork_range
ibv_get_sysfs_path         # sysfs, read by other rdma-core libraries
ibv_read_sysfs_file
ibv_copy_path_rec_from_kern    # kernel structs to user structs
ibv_copy_path_rec_to_kern
ibv_copy_qp_attr_from_kern
ibv_copy_ah_attr_from_kern
ibv_register_driver        # a provider registers itself (old ABI)
ibv_import_device          # a kernel command fd: a real device
'
# IBVERBS_PRIVATE_* functions that are the providers' interface to the
# kernel, called by providers on their own objects (the software NIC has no
# provider).  Other private functions are rdma-core's programs' (ibv_devinfo
# calls ibv_query_gid_type) and must be interposed.
exempt_private='
ibv_cmd_*                  # kernel commands of a provider
verbs_*                    # registration and contexts of providers
_verbs_init_and_alloc_context
execute_ioctl
__ioctl_final_num_attrs
__verbs_log                # the log of providers
ibv_read_ibdev_sysfs_file  # sysfs of a kernel device
ibv_wr_opcode_str          # a string of an enum
'

lib=$(ldd "$so" | awk '$1 == "libibverbs.so.1" { print $3 }')
[ -n "$lib" ] && [ -f "$lib" ] || {
    echo "check-coverage: $so is not linked against libibverbs.so.1" >&2
    exit 1
}

# name@version of each defined function (readelf writes name@@V for the
# default version, name@V for an older one, with " (N)" on newer binutils)
functions() {
    readelf --dyn-syms -W "$1" |
        awk '$4 == "FUNC" && $7 != "UND" { print $8 }' |
        sed -e 's/ *([0-9]*)$//' -e 's/@@/@/' | sort -u
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
functions "$lib" > "$tmp/real"
functions "$so" > "$tmp/ours"
printf '%s\n' "$exempt" | sed -e 's/#.*//' -e 's/[[:space:]]//g' -e '/^$/d' |
    sort -u > "$tmp/exempt"

[ -s "$tmp/real" ] || { echo "check-coverage: no functions read from $lib" >&2; exit 1; }

# Whether private function $1 (a name) is the providers' (a pattern above)
providers() {
    for p in $(printf '%s\n' "$exempt_private" | sed 's/#.*//'); do
        # shellcheck disable=SC2254
        case $1 in $p) return 0 ;; esac
    done
    return 1
}

missing=$(while IFS= read -r f; do
    grep -qxF "$f" "$tmp/ours" && continue
    case $f in
        *@IBVERBS_PRIVATE_*) providers "${f%@*}" && continue ;;
        *) grep -qxF "${f%@*}" "$tmp/exempt" && continue ;;
    esac
    echo "$f"
done < "$tmp/real")
# A defined name@version the library does not export binds nothing
extra=$(while IFS= read -r f; do
    grep -qxF "$f" "$tmp/real" || echo "$f"
done < "$tmp/ours")

total=$(wc -l < "$tmp/real")
ours=$(grep -cxF -f "$tmp/real" "$tmp/ours" || true)
if [ -n "$missing" ] || [ -n "$extra" ]; then
    [ -z "$missing" ] || printf 'check-coverage: %s exports, and %s neither defines nor exempts:\n%s\n' \
        "$lib" "$so" "$missing" >&2
    [ -z "$extra" ] || printf 'check-coverage: %s defines what %s does not export (wrong version?):\n%s\n' \
        "$so" "$lib" "$extra" >&2
    exit 1
fi
echo "check-coverage: $so covers $lib: $ours of its $total functions interposed, the rest take no object of the software NIC"
