"""Probes: what is observed on the lab's nodes, over SSH and the agents' mTLS API.

Each probe gathers plain data (the observation dataclasses of `e2e.harness.checkers`, a dict, a
pid, a hash) and decides nothing: the checkers say what is wrong with it. A caller probes, then
checks:

    problems = checkers.network_problems(probes.observe_network(cluster, node, alloc))
"""

from __future__ import annotations

import json
from typing import Any

from agent.command.config import DEFAULT_TOKEN_ROLE as TOKEN_ROLE
from agent.drivers.cgroups import CGROUP_ROOT
from agent.errors import AgentError
from e2e.harness.checkers import (
    BUSYBOX,
    CNI_CONFLIST,
    CNI_PLUGINS,
    AgentSeen,
    AppRoleSeen,
    CniSeen,
    DeliverySeen,
    DockerRunSeen,
    FileSeen,
    NetworkSeen,
    NodeSeen,
    PortSeen,
    Resource,
    SystemdSeen,
    VaultSeen,
    parse_container_names,
    parse_resources,
)
from e2e.harness.cluster import Agent, Cluster
from e2e.harness.jobs import PROBE_POLICY
from e2e.harness.remote import Remote, q
from e2e.harness.target import Target
from e2e.harness.waits import SYSTEMD_READY

# A read the checks make of a node (no side effect) is tried again for this long when the SSH
# connection breaks under it: seen once in a nightly's fleet storm, 100 nodes on 2 busy cores.
READ_RETRY = 15.0


# --- a node of its role ---------------------------------------------------------------------------
def observe_systemd(node: Remote) -> SystemdSeen:
    state = node.run(
        f"timeout {int(SYSTEMD_READY)} systemctl is-system-running --wait", check=False
    ).stdout.strip()
    failed = node.out("systemctl --failed --plain --no-legend --no-pager | awk '{print $1}'")
    return SystemdSeen(node.name, state, failed.split())


def observe_docker_run(node: Remote) -> DockerRunSeen:
    res = node.run(f"docker run --rm --init {BUSYBOX} sh -c 'echo fieldlab-ok'", check=False, timeout=60)
    return DockerRunSeen(node.name, res.rc, res.stdout, res.stderr)


def observe_cni(node: Remote) -> CniSeen:
    res = node.run(f"jq -r '.plugins[].type' {CNI_CONFLIST}", check=False)
    if res.rc != 0:
        return CniSeen(node.name, res.stderr.strip())
    missing = node.out("for p in " + " ".join(CNI_PLUGINS) + "; do [ -x /usr/lib/cni/$p ] || echo $p; done")
    return CniSeen(node.name, None, res.stdout.split(), missing.split())


def observe_vault(server: Remote) -> VaultSeen:
    res = server.run("curl -sf http://127.0.0.1:8200/v1/sys/seal-status", check=False)
    if res.rc != 0:
        return VaultSeen(server.name, res.rc)
    return VaultSeen(server.name, res.rc, dict(json.loads(res.stdout)))


def observe_approle(client: Remote, vault_addr: str, target: Target) -> AppRoleSeen:
    """Log in with the node's own AppRole (on the node: the token never leaves it) and try what its
    policy must allow and what it must refuse; each answer by name. The agent's token creates tasks'
    tokens through the token role only (`task_token`, revoked again at once); it issues no workload
    cert and reads no KV entry itself. The file is in the target's config dir; a target other than
    this agent may have none (login=absent)."""
    approle = f"{target.config_dir}/approle.json"
    login = f"curl -sf -X POST -d @{approle} {vault_addr}/v1/auth/approle/login"
    probes = {
        "workload": (
            "POST",
            "pki_int/issue/fieldlab-workload",
            '{"common_name":"web.service.fieldlab","ttl":"5m"}',
        ),
        "kv": ("GET", "secret/data/fieldlab/shared", ""),
        "own_agent": (
            "POST",
            "pki_int/issue/fieldlab-agent",
            f'{{"common_name":"{client.name}.agent.fieldlab"}}',
        ),
        "other_agent": ("POST", "pki_int/issue/fieldlab-agent", '{"common_name":"intruder.agent.fieldlab"}'),
        "sys_mounts": ("GET", "sys/mounts", ""),
        "root_ca": ("POST", "pki/root/generate/internal", '{"common_name":"evil"}'),
        "plain_token": ("POST", "auth/token/create", f'{{"policies":["{PROBE_POLICY}"]}}'),
        "wide_token": (
            "POST",
            f"auth/token/create/{TOKEN_ROLE}",
            f'{{"policies":["fieldlab-agent-{client.name}"]}}',
        ),
    }
    lines = [
        "set -u",
        f"[ -r {approle} ] || {{ echo login=absent; exit 0; }}",
        f"tok=$({login} | jq -r .auth.client_token)",
        '[ -n "$tok" ] && [ "$tok" != null ] || { echo login=failed; exit 0; }',
        "echo login=ok",
    ]
    for name, (method, path, body) in probes.items():
        data = f"-d {q(body)}" if body else ""
        lines.append(
            f"echo {name}=$(curl -s -o /dev/null -w '%{{http_code}}' -X {method} {data} "
            f'-H "X-Vault-Token: $tok" {vault_addr}/v1/{path})'
        )
    create = q(f'{{"policies":["{PROBE_POLICY}"]}}')
    lines += [
        f"resp=$(curl -s -w '\\n%{{http_code}}' -X POST -d {create} "
        f'-H "X-Vault-Token: $tok" {vault_addr}/v1/auth/token/create/{TOKEN_ROLE})',
        "echo task_token=$(printf '%s\\n' \"$resp\" | tail -n 1)",
        "acc=$(printf '%s\\n' \"$resp\" | sed '$d' | jq -r '.auth.accessor // empty' 2>/dev/null)",
        '[ -z "$acc" ] || curl -s -o /dev/null -X POST -d "{\\"accessor\\":\\"$acc\\"}" '
        f'-H "X-Vault-Token: $tok" {vault_addr}/v1/auth/token/revoke-accessor',
        f'curl -s -o /dev/null -X POST -H "X-Vault-Token: $tok" {vault_addr}/v1/auth/token/revoke-self',
    ]
    script = "\n".join(lines)
    out = client.out(f"bash -c {q(script)}")
    answers = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return AppRoleSeen(client.name, answers, required=target.name == "fieldlab")


def observe_agent(cluster: Cluster, client: Remote) -> AgentSeen:
    """Nomad's /v1/agent/health and /v1/agent/self with the operator's certificate, then health once
    more with no certificate at all (which the agent must refuse), all through the agent's own API
    client. The body is {"health": ..., "self": ...}."""
    path = "/v1/agent/health"
    error, status, body = None, None, None
    try:
        status, raw = cluster.api(client, timeout=10.0).request_raw("GET", path)
        _, own = cluster.api(client, timeout=10.0).request_raw("GET", "/v1/agent/self")
        body = {"health": json.loads(raw), "self": json.loads(own)}
    except (AgentError, OSError) as exc:  # OSError: the lab's ca.pem or operator cert unreadable
        error = str(exc)
    try:
        cluster.api(client, client_cert=False, timeout=10.0).request_raw("GET", path)
        answered = True
    except (AgentError, OSError):
        answered = False  # refused at TLS, as it must be
    return AgentSeen(client.name, error, status, body, answered)


def observe_node(cluster: Cluster, node: Remote) -> NodeSeen:
    """Everything the smoke suite looks at on a node of its role."""
    systemd = observe_systemd(node)
    if node in cluster.servers:
        return NodeSeen(systemd, vault=observe_vault(node))
    return NodeSeen(
        systemd,
        docker=observe_docker_run(node),
        cni=observe_cni(node),
        approle=observe_approle(node, cluster.vault_addr, cluster.target),
        agent=observe_agent(cluster, node),
    )


# --- agent-managed resources ----------------------------------------------------------------------
_OBSERVE = r"""
set -u
D={data}
echo "## containers"
L='{{{{.Label "{alloc_label}"}}}}{role_field}'
F="{{{{.ID}}}} {{{{.State}}}} $L {{{{.Names}}}}"
# A light client has no docker engine (its socket masked): no containers. A full client whose engine
# is down still has the socket (socket activation), and the failing `docker ps` fails the observation.
if [ -S /var/run/docker.sock ]; then
  docker ps -a --filter label={managed_label} --no-trunc --format "$F"
fi
echo "## netns"
ip netns list 2>/dev/null | awk '{{print $1}}'
echo "## ipam"
for f in {ipam}/*; do
  b=$(basename "$f"); case "$b" in lock|last_reserved_ip*|'*') continue;; esac
  echo "$b $(head -n1 "$f")"
done
echo "## cache"
ls $D/cni 2>/dev/null
echo "## allocdirs"
ls $D/alloc 2>/dev/null
echo "## cgroups"
# v2: <root>/<parent>/<alloc>.<task>; v1: the same below each controller the agent uses (memory,
# cpu): every hierarchy is listed, the checker merges them. Each process as <pid>:<process group>.
for g in {cgroup_root}/{cgroup_parent}/*/ {cgroup_root}/*/{cgroup_parent}/*/; do
  [ -f "$g/cgroup.procs" ] || continue
  procs=""
  for p in $(cat "$g/cgroup.procs" 2>/dev/null); do
    st=$(cat /proc/$p/stat 2>/dev/null) || continue
    set -- ${{st##*) }}
    procs="$procs$p:$3,"
  done
  echo "$(basename "$g") $procs"
done
echo "## looseprocs"
# Processes of a task (NOMAD_ALLOC_ID in their environment) in no task cgroup, docker's excepted
# (a container is a resource of its own): an exec process that escaped, or outlived its cgroup.
for f in $(grep -lz '^NOMAD_ALLOC_ID=' /proc/[0-9]*/environ 2>/dev/null); do
  p=${{f#/proc/}}; p=${{p%/environ}}
  cg=$(cat /proc/$p/cgroup 2>/dev/null) || continue
  case "$cg" in ""|*/{cgroup_parent}/*|*docker*) continue;; esac
  env=$(tr '\0' '\n' < "$f" 2>/dev/null) || continue
  a=$(printf '%s\n' "$env" | sed -n 's/^NOMAD_ALLOC_ID=//p' | head -n1)
  t=$(printf '%s\n' "$env" | sed -n 's/^NOMAD_TASK_NAME=//p' | head -n1)
  [ -n "$a" ] && echo "$p $a $t"
done
echo "## iptables"
iptables-save -t nat; iptables-save -t filter
"""


def observe_resources(node: Remote, target: Target) -> list[Resource]:
    """Every agent-made resource on the node (containers, netns, IP reservations, CNI cache, alloc
    dirs, task processes, CNI chains and rules), each with the alloc that owns it, by the names of
    the node's target profile."""
    role = f' {{{{.Label "{target.docker_role_label}"}}}}' if target.docker_role_label else ""
    script = _OBSERVE.format(
        data=target.data_dir,
        ipam=target.ipam_dir,
        alloc_label=target.docker_alloc_label,
        role_field=role,
        managed_label=target.docker_managed_label,
        cgroup_root=CGROUP_ROOT,
        cgroup_parent=target.cgroup_parent,
    )
    return parse_resources(node.out(f"bash -c {q(script)}"), target)


def container_names(node: Remote, target: Target) -> dict[str, str]:
    """{full id: name} of every container the agent made on the node."""
    return parse_container_names(
        node.out(
            "if [ -S /var/run/docker.sock ]; then "
            f"docker ps -a --no-trunc --filter label={target.docker_managed_label} "
            "--format '{{.ID}} {{.Names}}'; fi"
        )
    )


def _live_pid(node: Remote, handle: str) -> int | None:
    """The host pid of a task handle: a docker container's (its id), or a process driver's (the pid
    itself, if that process is alive)."""
    if len(handle) == 64:
        res = node.run(f"docker inspect -f '{{{{.State.Pid}}}}' {handle}", check=False)
        pid = res.stdout.strip()
        return int(pid) if res.rc == 0 and pid.isdigit() and pid != "0" else None
    if handle.isdigit() and node.run(f"test -d /proc/{handle}", check=False).rc == 0:
        return int(handle)
    return None


def task_pid(node: Remote, alloc: dict[str, Any], task: str | None = None) -> int | None:
    """A pid inside the alloc's network namespace: its task's (a container's, or an exec task's
    process), else (the task has no handle) its pause container's."""
    tasks = alloc["tasks"]
    name = task or next(iter(tasks))
    handle = tasks[name].get("container") or alloc["network"].get("pause_container") or ""
    return _live_pid(node, str(handle))


_NETNS = r"""
ns() {{ [ -n "$1" ] && readlink "/proc/$1/ns/net" 2>/dev/null | tr -dc 0-9; }}
dpid() {{ docker inspect -f '{{{{.State.Pid}}}}' "$1" 2>/dev/null; }}
echo "alloc $({alloc_ns})"
{tasks}
"""


def observe_netns(node: Remote, alloc: dict[str, Any], target: Target) -> tuple[str, dict[str, str]]:
    """(the alloc's netns, {task: its process's netns}), each as its inode ("" when there is none):
    the pause container's netns, or the named netns (the target's name for it) exec tasks join."""
    pause = alloc["network"].get("pause_container") or ""
    if pause:
        alloc_ns = f"ns $(dpid {pause})"
    else:
        alloc_ns = f"stat -L -c %i {target.netns_dir}/{target.netns_name(alloc['id'])} 2>/dev/null"
    lines = []
    for task, ts in alloc["tasks"].items():
        handle = str(ts.get("container") or "")
        if len(handle) == 64:
            lines.append(f'echo "task {task} $(ns $(dpid {handle}))"')
        elif handle.isdigit():
            lines.append(f'echo "task {task} $(ns {handle})"')
    script = _NETNS.format(alloc_ns=alloc_ns, tasks="\n".join(lines))
    out = node.run(f"bash -c {q(script)}", check=False).stdout
    netns, tasks = "", {}
    for line in out.splitlines():
        parts = line.split()
        if parts[:1] == ["alloc"]:
            netns = parts[1] if len(parts) > 1 else ""
        elif parts[:1] == ["task"] and len(parts) >= 2:
            tasks[parts[1]] = parts[2] if len(parts) > 2 else ""
    return netns, tasks


def observe_network(
    cluster: Cluster, node: Remote, alloc: dict[str, Any], *, path: str = "/", vault: bool = True
) -> NetworkSeen:
    """The alloc's mapped ports tried from another client; the address in its netns; Vault tried
    from inside (unless `vault` is False); the netns of the alloc and of each task's process."""
    other = cluster.other_client(node)
    ports = []
    for p in alloc["network"].get("ports", []):
        url = f"http://{node.address}:{p['host']}{path}"
        code = other.run(f"curl -s -o /dev/null -m 3 -w '%{{http_code}}' {url}", check=False).stdout.strip()
        ports.append(PortSeen(p["label"], url, code))
    pid = task_pid(node, alloc)
    eth0, vault_code = "", None
    if pid is not None:
        eth0 = node.run(f"nsenter -t {pid} -n ip -4 -o addr show dev eth0", check=False).stdout
        if vault:
            vault_code = node.run(
                f"nsenter -t {pid} -n curl -s -o /dev/null -m 3 -w '%{{http_code}}' "
                f"{cluster.vault_addr}/v1/sys/health",
                check=False,
            ).stdout.strip()
    netns, task_netns = observe_netns(node, alloc, cluster.target)
    return NetworkSeen(
        node.name,
        alloc["id"],
        alloc["network"].get("address"),
        other.name,
        ports,
        pid,
        eth0,
        cluster.vault_addr,
        vault_code,
        netns,
        task_netns,
    )


# --- the probe workload: the certificate it has loaded, the one on disk ------------------------------
def cert_sha256_on_disk(
    node: Remote,
    alloc_id: str,
    task: str,
    *,
    data_dir: str,
    rel: str = "secrets/cert.pem",
) -> str | None:
    path = f"{data_dir}/alloc/{alloc_id}/{task}/{rel}"
    res = node.run(f"openssl x509 -in {path} -outform der | sha256sum", check=False, retry_for=READ_RETRY)
    return res.stdout.split()[0] if res.rc == 0 and res.stdout.strip() else None


def probe_status(node: Remote, port: int) -> dict[str, Any] | None:
    """The probe's /status, read from the node itself through the mapped port."""
    res = node.run(f"curl -sf -m 3 http://127.0.0.1:{port}/status", check=False, retry_for=READ_RETRY)
    if res.rc != 0:
        return None
    try:
        return dict(json.loads(res.stdout))
    except json.JSONDecodeError:
        return None


def observe_delivery(agent: Agent, alloc: dict[str, Any], task: str) -> DeliverySeen:
    """What the probe of `alloc` has loaded, and the certificate on disk for its `task` (in the
    agent's data dir, as its target profile names it)."""
    node = agent.node
    port = int(alloc["network"]["ports"][0]["host"])
    status = probe_status(node, port)
    disk = cert_sha256_on_disk(node, alloc["id"], task, data_dir=agent.data_dir)
    return DeliverySeen(node.name, alloc["id"], port, status, disk)


def observe_files(node: Remote, paths: list[str]) -> list[FileSeen]:
    """Hash, mode, owner and link count of host files (globs expanded on the node; a symlink at the
    path itself is hashed as its own target text, never followed)."""
    script = (
        "for f in " + " ".join(paths) + '; do [ -f "$f" ] || [ -L "$f" ] || continue; '
        'echo "$(sha256sum < "$f" | cut -d\' \' -f1) $(stat -c \'%a %u:%g %h\' "$f") $f"; done'
    )
    seen = []
    for line in node.run(script, check=False).stdout.splitlines():
        parts = line.split(" ", 4)
        if len(parts) == 5:
            sha, mode, owner, links, path = parts
            seen.append(FileSeen(path, sha, mode, owner, links))
    return seen
