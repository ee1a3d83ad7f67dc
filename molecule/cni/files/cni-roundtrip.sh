#!/bin/bash
# cni-roundtrip.sh add|check|del|del-again|observe|cleanup
#
# Drives the lab's bridge network (nomad) the way a container runtime does, per the CNI spec: each plugin
# of the conflist is executed with CNI_COMMAND, CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME and CNI_PATH
# in its environment and its network configuration on stdin. As libcni does for a conflist:
#   ADD    runs the plugins in order; each one after the first gets the previous one's result as
#          prevResult; the final result is kept (the "cache") for CHECK and DEL;
#   CHECK  runs the plugins in order, each with the cached ADD result as prevResult;
#   DEL    runs the plugins in reverse order with the cached result, then forgets it;
#   a repeated DEL has no cached result any more, so it runs without prevResult.
# Plugins that declare the portMappings capability get runtimeConfig.portMappings on every command.
#
# Each command prints one JSON object of observations on stdout; the molecule verify asserts on it.
set -euo pipefail

CONFLIST=${CONFLIST:-/etc/cni/net.d/nomad.conflist}
CNI_PATH=${CNI_PATH:-/usr/lib/cni}
# Kept on disk, as a runtime keeps its cached results: a DEL after a reboot still has them.
STATE=${STATE:-/var/tmp/fieldlab-cni-verify}
NS=${NS:-fieldlab-verify}
CID=${CID:-fieldlab-verify-0123456789abcdef}
IFNAME=eth0
HOST_PORT=${HOST_PORT:-28080}
CONTAINER_PORT=${CONTAINER_PORT:-8080}
NETNS=/var/run/netns/$NS

PORTMAPS=$(jq -cn --argjson h "$HOST_PORT" --argjson c "$CONTAINER_PORT" \
    '[{hostPort: $h, containerPort: $c, protocol: "tcp"}]')
NET_NAME=$(jq -r .name "$CONFLIST")
BRIDGE=$(jq -r '.plugins[] | select(.type == "bridge") | .bridge' "$CONFLIST")
DATA_DIR=$(jq -r '.plugins[] | select(.type == "bridge") | .ipam.dataDir // "/var/lib/cni/networks"' "$CONFLIST")
NPLUGINS=$(jq '.plugins | length' "$CONFLIST")

mkdir -p "$STATE"

# plugin_conf INDEX PREV_RESULT_JSON|null -> the network configuration for that plugin
plugin_conf() {
    jq -c --argjson i "$1" --argjson prev "$2" --argjson pm "$PORTMAPS" '
        . as $list
        | $list.plugins[$i] + {cniVersion: $list.cniVersion, name: $list.name}
        + (if $prev == null then {} else {prevResult: $prev} end)
        + (if ($list.plugins[$i].capabilities.portMappings // false)
           then {runtimeConfig: {portMappings: $pm}} else {} end)' "$CONFLIST"
}

# invoke COMMAND INDEX PREV_RESULT_JSON|null -> one JSON record {plugin, rc, stdout, stderr}
invoke() {
    local cmd=$1 i=$2 prev=$3 type rc=0
    type=$(jq -r ".plugins[$i].type" "$CONFLIST")
    plugin_conf "$i" "$prev" >"$STATE/$cmd-$i.conf"
    env CNI_COMMAND="$cmd" CNI_CONTAINERID="$CID" CNI_NETNS="$NETNS" CNI_IFNAME="$IFNAME" \
        CNI_PATH="$CNI_PATH" "$CNI_PATH/$type" <"$STATE/$cmd-$i.conf" \
        >"$STATE/$cmd-$i.out" 2>"$STATE/$cmd-$i.err" || rc=$?
    jq -cn --arg plugin "$type" --argjson rc "$rc" \
        --rawfile out "$STATE/$cmd-$i.out" --rawfile err "$STATE/$cmd-$i.err" \
        '{plugin: $plugin, rc: $rc, stdout: ($out | fromjson? // $out), stderr: $err}'
}

# observe -> what the host and the netns look like now
observe() {
    local addrs routes bridge reservations nat filter
    addrs='[]'; routes='[]'
    if [ -e "$NETNS" ]; then
        addrs=$(ip -n "$NS" -j addr show 2>/dev/null || echo '[]')
        routes=$(ip -n "$NS" -j route show default 2>/dev/null || echo '[]')
    fi
    bridge=$(ip -j addr show dev "$BRIDGE" 2>/dev/null || echo '[]')
    reservations=$( (grep -rl -- "$CID" "$DATA_DIR/$NET_NAME" 2>/dev/null || true) | jq -Rsc 'split("\n") | map(select(. != ""))')
    nat=$(iptables-save -t nat | jq -Rsc 'split("\n") | map(select(test("^-A CNI-")))')
    filter=$(iptables-save -t filter | jq -Rsc 'split("\n") | map(select(test("^-A CNI-")))')
    jq -cn --argjson addrs "$addrs" --argjson routes "$routes" --argjson bridge "$bridge" \
        --argjson reservations "$reservations" --argjson nat "$nat" --argjson filter "$filter" \
        --arg ifname "$IFNAME" '{
            netns_addresses: [$addrs[] | select(.ifname == $ifname) | .addr_info[]
                              | select(.family == "inet") | "\(.local)/\(.prefixlen)"],
            netns_default_routes: [$routes[] | .gateway],
            bridge_exists: ($bridge | length > 0),
            bridge_addresses: [$bridge[] | .addr_info[] | select(.family == "inet") | "\(.local)/\(.prefixlen)"],
            reservations: $reservations,
            nat_rules: $nat,
            filter_rules: $filter}'
}

# run_chain COMMAND ORDER PREV_RESULT_JSON|null -> JSON array of per-plugin records
run_chain() {
    local cmd=$1 order=$2 prev=$3 i records='[]' rec
    for i in $order; do
        rec=$(invoke "$cmd" "$i" "$prev")
        records=$(jq -c --argjson r "$rec" '. + [$r]' <<<"$records")
    done
    echo "$records"
}

forward=$(seq 0 $((NPLUGINS - 1)) | tr '\n' ' ')
reverse=$(seq $((NPLUGINS - 1)) -1 0 | tr '\n' ' ')

case ${1:-} in
add)
    ip netns add "$NS"
    prev=null
    records='[]'
    for i in $forward; do
        rec=$(invoke ADD "$i" "$prev")
        records=$(jq -c --argjson r "$rec" '. + [$r]' <<<"$records")
        if [ "$(jq .rc <<<"$rec")" != 0 ]; then
            break
        fi
        prev=$(jq -c .stdout <<<"$rec")
    done
    ok=$(jq 'all(.rc == 0)' <<<"$records")
    if [ "$ok" = true ]; then
        echo "$prev" >"$STATE/result.json"
        # Something to reach through the mapped port: a web server in the netns naming the container.
        mkdir -p "$STATE/www"
        echo "$CID" >"$STATE/www/index.html"
        ip netns exec "$NS" busybox httpd -f -p "$CONTAINER_PORT" -h "$STATE/www" \
            </dev/null >/dev/null 2>&1 &
        echo $! >"$STATE/httpd.pid"
        for _ in $(seq 1 50); do
            ip netns exec "$NS" busybox nc -z 127.0.0.1 "$CONTAINER_PORT" 2>/dev/null && break
            sleep 0.1
        done
    fi
    jq -cn --argjson records "$records" --argjson ok "$ok" --argjson obs "$(observe)" \
        --slurpfile result <(cat "$STATE/result.json" 2>/dev/null || echo null) \
        '{ok: $ok, plugins: $records, result: $result[0], observed: $obs}'
    ;;
check)
    records=$(run_chain CHECK "$forward" "$(cat "$STATE/result.json")")
    jq -cn --argjson records "$records" '{plugins: $records}'
    ;;
del)
    records=$(run_chain DEL "$reverse" "$(cat "$STATE/result.json")")
    rm -f "$STATE/result.json"
    jq -cn --argjson records "$records" --argjson obs "$(observe)" '{plugins: $records, observed: $obs}'
    ;;
del-again)
    # No cached result any more, and the container is gone: its netns has been deleted.
    if [ -f "$STATE/httpd.pid" ]; then kill "$(cat "$STATE/httpd.pid")" 2>/dev/null || true; fi
    ip netns del "$NS" 2>/dev/null || true
    records=$(run_chain DEL "$reverse" null)
    jq -cn --argjson records "$records" --argjson obs "$(observe)" '{plugins: $records, observed: $obs}'
    ;;
observe)
    jq -cn --argjson obs "$(observe)" '{observed: $obs}'
    ;;
cleanup)
    if [ -f "$STATE/httpd.pid" ]; then kill "$(cat "$STATE/httpd.pid")" 2>/dev/null || true; fi
    if [ -f "$STATE/result.json" ]; then run_chain DEL "$reverse" "$(cat "$STATE/result.json")" >/dev/null; fi
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$STATE"
    echo '{"cleaned": true}'
    ;;
*)
    echo "usage: $0 add|check|del|del-again|observe|cleanup" >&2
    exit 2
    ;;
esac
