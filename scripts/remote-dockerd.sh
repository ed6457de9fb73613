#!/usr/bin/env bash
# A second Docker engine on this machine that plbbench reaches as a remote
# one (tests/remote_engine.rs; docs/backends.md, "A remote engine"). The
# machine's own engine (/var/run/docker.sock) is left alone.
#
# The second dockerd runs in a network namespace of its own, so it is a
# different network host in every way plbbench can see: its own loopback,
# its own address (ENGINE below, on a veth pair to this host's HOSTSIDE),
# its own default bridge, iptables rules and published ports. It listens
# on tcp://ENGINE:PORT with mutual TLS (a CA, a server certificate with
# SAN IP:ENGINE and a client certificate, made with openssl in the state
# directory) and on a unix socket in the state directory (for the test's
# own look at it). Its data root, exec root, pid file, log, containerd and
# config file are its own; /etc/docker/daemon.json is not read. Traffic
# stays on this machine: between this host and the namespace, and from the
# namespace's containers (masqueraded as ENGINE) back to this host.
#
# Usage (as root):
#   eval "$(scripts/remote-dockerd.sh start)"   # starts it (idempotent); prints the env lines
#   scripts/remote-dockerd.sh env               # prints them again
#   scripts/remote-dockerd.sh status            # "running PID" or "stopped" (exit 1)
#   scripts/remote-dockerd.sh stop              # kills it and removes its state, containers included
#
# `start` prints `export DOCKER_HOST=tcp://ENGINE:PORT DOCKER_TLS_VERIFY=1
# DOCKER_CERT_PATH=DIR/certs/client PLBBENCH_DOCKER_PUBLISH=ENGINE` and a
# comment line naming the unix socket. When the daemon cannot start it prints
# ONE line naming the cause (not root, a missing tool, the port busy, or the
# last error line of the daemon's log) on stderr and exits 1, leaving no
# namespace or process behind.
#
# Settings (environment): PLBBENCH_REMOTE_DIR (state directory, default
# /var/tmp/plbbench-remote-engine), PLBBENCH_REMOTE_NETNS (default
# plbbench-remote), PLBBENCH_REMOTE_NET (first three octets of the veth
# pair's /30 and the engine's bridges, default 10.211), PLBBENCH_REMOTE_PORT
# (default 2376), PLBBENCH_REMOTE_STORAGE (storage driver, default
# fuse-overlayfs where installed, else overlay2, as on this machine's engine).
set -euo pipefail

dir=${PLBBENCH_REMOTE_DIR:-/var/tmp/plbbench-remote-engine}
ns=${PLBBENCH_REMOTE_NETNS:-plbbench-remote}
net=${PLBBENCH_REMOTE_NET:-10.211}
port=${PLBBENCH_REMOTE_PORT:-2376}
hostside="$net.0.1"
engine="$net.0.2"
# Interface names from the network's octets, so two such engines (the
# test's and a developer's) never share one.
veth_host="plbr${net//./}h"
veth_ns="plbr${net//./}e"
sock="$dir/docker.sock"
pidfile="$dir/dockerd.pid"
log="$dir/dockerd.log"
certs="$dir/certs"

die() {
    echo "remote-dockerd: $*" >&2
    exit 1
}

# Runs a command quietly; on failure dies with its last line of output.
quiet() {
    local what=$1 out
    shift
    out=$("$@" 2>&1) || die "$what failed: $(printf '%s\n' "$out" | tail -n 1)"
}

storage_driver() {
    if [[ -n ${PLBBENCH_REMOTE_STORAGE:-} ]]; then
        echo "$PLBBENCH_REMOTE_STORAGE"
    elif command -v fuse-overlayfs >/dev/null 2>&1; then
        echo fuse-overlayfs
    else
        echo overlay2
    fi
}

# The docker CLI on the engine's unix socket, whatever the caller exported.
dk() {
    env -u DOCKER_HOST -u DOCKER_TLS_VERIFY -u DOCKER_CERT_PATH -u DOCKER_CONTEXT docker -H "unix://$sock" "$@"
}

running_pid() {
    local pid
    [[ -f $pidfile ]] || return 1
    pid=$(cat "$pidfile" 2>/dev/null) || return 1
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == dockerd ]] || return 1
    echo "$pid"
}

print_env() {
    echo "export DOCKER_HOST=tcp://$engine:$port DOCKER_TLS_VERIFY=1 DOCKER_CERT_PATH=$certs/client PLBBENCH_DOCKER_PUBLISH=$engine"
    echo "# second engine: pid $(running_pid), unix socket unix://$sock, log $log"
}

preflight() {
    [[ $(id -u) == 0 ]] || die "must run as root (dockerd, ip netns)"
    local tool
    for tool in dockerd docker openssl ip iptables nsenter; do
        command -v "$tool" >/dev/null 2>&1 || die "$tool missing (Debian: docker.io, openssl, iproute2, iptables, util-linux)"
    done
}

created_ns=0
make_netns() {
    if ! ip netns list | grep -q "^$ns\b"; then
        quiet "ip netns add $ns" ip netns add "$ns"
        created_ns=1
    fi
    if ! ip link show "$veth_host" >/dev/null 2>&1; then
        quiet "creating the veth pair" ip link add "$veth_host" type veth peer name "$veth_ns" netns "$ns"
    fi
    quiet "addressing $veth_host" ip addr replace "$hostside/30" dev "$veth_host"
    quiet "bringing $veth_host up" ip link set "$veth_host" up
    quiet "addressing $veth_ns" ip -n "$ns" addr replace "$engine/30" dev "$veth_ns"
    quiet "bringing $veth_ns up" ip -n "$ns" link set "$veth_ns" up
    quiet "bringing lo up in $ns" ip -n "$ns" link set lo up
    # The engine's default route points back at this host, so its
    # containers' masqueraded traffic to this host has a way out.
    quiet "routing $ns" ip -n "$ns" route replace default via "$hostside"
}

remove_netns() {
    ip link del "$veth_host" 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
}

# A CA, a server certificate for IP:ENGINE and a client certificate (ECDSA
# P-256, v3 with the extensions rustls requires), each in the layout
# DOCKER_CERT_PATH expects (ca.pem, cert.pem, key.pem).
make_certs() {
    [[ -f $certs/client/key.pem && -f $certs/server/key.pem ]] &&
        openssl x509 -in "$certs/server/cert.pem" -noout -ext subjectAltName 2>/dev/null | grep -q "IP Address:$engine$" &&
        return 0
    rm -rf "$certs"
    mkdir -p "$certs/ca" "$certs/server" "$certs/client"
    chmod 0700 "$certs"
    local ca="$certs/ca"
    quiet "making the CA key" openssl ecparam -name prime256v1 -genkey -noout -out "$ca/key.pem"
    quiet "making the CA certificate" openssl req -x509 -new -key "$ca/key.pem" -days 30 -subj "/CN=plbbench remote engine CA" \
        -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" -out "$ca/cert.pem"
    local who ext
    for who in server client; do
        if [[ $who == server ]]; then
            ext="subjectAltName=IP:$engine\nextendedKeyUsage=serverAuth"
        else
            ext="extendedKeyUsage=clientAuth"
        fi
        printf "basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n$ext\n" >"$certs/$who/ext.cnf"
        quiet "making the $who key" openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$certs/$who/key.pem"
        quiet "making the $who request" openssl req -new -key "$certs/$who/key.pem" -subj "/CN=plbbench-$who" -out "$certs/$who/req.pem"
        quiet "signing the $who certificate" openssl x509 -req -in "$certs/$who/req.pem" -CA "$ca/cert.pem" -CAkey "$ca/key.pem" \
            -CAcreateserial -days 30 -extfile "$certs/$who/ext.cnf" -out "$certs/$who/cert.pem"
        cp "$ca/cert.pem" "$certs/$who/ca.pem"
        rm -f "$certs/$who/req.pem" "$certs/$who/ext.cnf"
    done
    chmod 0600 "$certs"/*/key.pem
}

# The last line of the daemon's log that says what went wrong.
log_cause() {
    local line
    line=$(grep -E 'level=(fatal|error)|failed to start daemon' "$log" 2>/dev/null | tail -n 1 || true)
    [[ -n $line ]] || line=$(tail -n 1 "$log" 2>/dev/null || true)
    line=${line#*msg=}
    printf '%s' "${line:-no log line}"
}

start() {
    preflight
    if running_pid >/dev/null; then
        print_env
        return 0
    fi
    make_netns
    if nsenter --net="/var/run/netns/$ns" ss -Hltn "sport = :$port" 2>/dev/null | grep -q .; then
        ((created_ns == 0)) || remove_netns
        die "port $port is busy in network namespace $ns (PLBBENCH_REMOTE_PORT picks another)"
    fi
    mkdir -p "$dir"
    chmod 0700 "$dir"
    make_certs
    echo '{}' >"$dir/daemon.json"
    rm -f "$sock" "$pidfile"
    : >"$log"
    # nsenter, not `ip netns exec`: only the network namespace changes (ip
    # netns exec also remounts /sys, hiding the cgroup mounts dockerd
    # needs). setsid: the daemon outlives this script and its caller.
    nsenter --net="/var/run/netns/$ns" setsid dockerd \
        --config-file "$dir/daemon.json" \
        --data-root "$dir/data" \
        --exec-root "$dir/exec" \
        --pidfile "$pidfile" \
        --storage-driver "$(storage_driver)" \
        -H "unix://$sock" \
        -H "tcp://$engine:$port" \
        --tlsverify --tlscacert "$certs/server/ca.pem" --tlscert "$certs/server/cert.pem" --tlskey "$certs/server/key.pem" \
        --bip "$net.1.1/24" \
        --default-address-pool "base=$net.16.0/20,size=24" \
        --mtu 1400 \
        --log-driver json-file \
        </dev/null >>"$log" 2>&1 &
    local launched=$! deadline=$((SECONDS + 60))
    while ((SECONDS < deadline)); do
        if dk version --format '{{.Server.Version}}' >/dev/null 2>&1; then
            print_env
            return 0
        fi
        if ! kill -0 "$launched" 2>/dev/null; then
            local cause
            cause=$(log_cause)
            stop_quietly
            die "dockerd exited: $cause"
        fi
        sleep 0.5
    done
    local cause
    cause=$(log_cause)
    stop_quietly
    die "dockerd did not answer within 60 s: $cause"
}

# Removes every container, then the daemon (SIGTERM, SIGKILL after 20 s),
# whatever it left mounted, its namespace and its state directory.
stop_quietly() {
    local pid
    if pid=$(running_pid); then
        local ids
        ids=$(dk ps -aq 2>/dev/null || true)
        if [[ -n $ids ]]; then
            # shellcheck disable=SC2086
            dk rm -f -v $ids >/dev/null 2>&1 || true
        fi
        kill -TERM "$pid" 2>/dev/null || true
        local deadline=$((SECONDS + 20))
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
        kill -KILL "$pid" 2>/dev/null || true
    fi
    # A daemon that died without a pid file may have left its containerd.
    local p
    for p in $(pgrep -f -- "$dir/exec/containerd" 2>/dev/null || true); do
        kill -KILL "$p" 2>/dev/null || true
    done
    if [[ -d $dir ]]; then
        local m
        for m in $(awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r); do
            umount -l "$m" 2>/dev/null || true
        done
    fi
    remove_netns
    rm -rf "$dir"
}

case ${1:-} in
    start) start ;;
    env)
        running_pid >/dev/null || die "not running (start it: scripts/remote-dockerd.sh start)"
        print_env
        ;;
    status)
        if pid=$(running_pid); then echo "running $pid"; else
            echo stopped
            exit 1
        fi
        ;;
    stop)
        [[ $(id -u) == 0 ]] || die "must run as root"
        stop_quietly
        ;;
    *)
        echo "usage: $0 start|env|status|stop" >&2
        exit 2
        ;;
esac
