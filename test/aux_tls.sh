#!/bin/sh
# The auxiliary transports over which UCP can wire rc_tm up by worker
# address, with rc_tm connecting endpoint to endpoint only (as on a NIC), on
# the UCX named by $1 (MAJOR.MINOR.PATCH), one word each: RC_TM_AUX_TLS
# when it is set; else ud_verbs (UCX's own, on the software NIC through the
# test interposer) on every UCX, and tcp and posix from UCX 1.16 on, which
# also takes an auxiliary transport without asynchronous callbacks
# (ucp/wireup/select.c, ucp_wireup_select_aux_transport; 1.13 to 1.15
# require UCT_IFACE_FLAG_CB_ASYNC, which only ud has).
if [ -n "${RC_TM_AUX_TLS+set}" ]; then
    echo "$RC_TM_AUX_TLS"
    exit 0
fi
minor=${1#*.}
minor=${minor%%.*}
case $minor in
''|*[!0-9]*) echo "aux_tls.sh: '$1' is not a UCX version" >&2; exit 2 ;;
esac
if [ "${1%%.*}" -gt 1 ] || [ "$minor" -ge 16 ]; then
    echo "ud_verbs tcp posix"
else
    echo "ud_verbs"
fi
