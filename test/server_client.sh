# Sourced by the tests that run a tool's server and client on this host
# (verbs_tools_test.sh, ucx_ib_test.sh); they set $tmp and $tmo.

# A TCP port nobody listens on now
free_port() {
    /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Whether something listens on TCP port $1 (/proc/net/tcp{,6}: state 0A);
# a probe connection would be taken for the client
listening() {
    hex=$(printf ':%04X' "$1")
    awk -v p="$hex" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 }
                     END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# server_client PRELOAD BIND_ERROR COMMAND...: the server, COMMAND -p PORT,
# in the background, then the client, COMMAND -p PORT 127.0.0.1, once the
# server listens; both with LD_PRELOAD=PRELOAD under timeout $tmo.  Outputs
# in $tmp/server.out and $tmp/client.out, statuses in $server_rc and
# $client_rc.  A port free when picked may be taken before the server binds
# it (make check runs other programs beside): a server that printed
# BIND_ERROR runs again on another port, up to 3 times.
server_client() {
    preload=$1 bind_error=$2
    shift 2
    for attempt in 1 2 3; do
        port=$(free_port)
        LD_PRELOAD=$preload timeout "$tmo" "$@" -p "$port" \
            > "$tmp/server.out" 2>&1 &
        spid=$!
        while ! listening "$port"; do
            kill -0 "$spid" 2>/dev/null || break
            sleep 0.05
        done
        client_rc=0
        LD_PRELOAD=$preload timeout "$tmo" "$@" -p "$port" 127.0.0.1 \
            > "$tmp/client.out" 2>&1 || client_rc=$?
        server_rc=0
        wait "$spid" || server_rc=$?
        if [ "$server_rc" -eq 0 ] ||
           ! grep -q "$bind_error" "$tmp/server.out"; then
            return
        fi
        echo "  port $port was taken before the server bound it (attempt $attempt)"
    done
}
