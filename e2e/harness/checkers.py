"""Checkers: functions over observed state that return what is wrong (an empty list when all is well).

They say exactly what they saw, so a failing suite reads like a diagnosis, not like `False`.
"""

from __future__ import annotations

import json
import re
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.harness.cluster import Cluster
from e2e.harness.remote import Remote, q
from e2e.harness.waits import SYSTEMD_READY

CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap", "firewall")
CNI_CONFLIST = "/etc/cni/net.d/fieldlab.conflist"
BUSYBOX = "fieldlab/busybox:latest"


def systemd_problems(node: Remote) -> list[str]:
    state = node.run(
        f"timeout {int(SYSTEMD_READY)} systemctl is-system-running --wait", check=False
    ).stdout.strip()
    failed = node.out("systemctl --failed --plain --no-legend --no-pager | awk '{print $1}'")
    problems = []
    if state != "running":
        problems.append(f"{node.name}: systemd state is {state!r}, not 'running'")
    if failed:
        problems.append(f"{node.name}: failed units: {failed.split()}")
    return problems


def docker_problems(node: Remote) -> list[str]:
    res = node.run(f"docker run --rm --init {BUSYBOX} sh -c 'echo fieldlab-ok'", check=False, timeout=60)
    if res.rc != 0 or res.stdout.strip() != "fieldlab-ok":
        return [
            f"{node.name}: `docker run {BUSYBOX}` gave rc={res.rc} out={res.stdout.strip()!r} "
            f"err={res.stderr.strip()[-300:]!r}"
        ]
    return []


def cni_problems(node: Remote) -> list[str]:
    problems = []
    res = node.run(f"jq -r '.plugins[].type' {CNI_CONFLIST}", check=False)
    if res.rc != 0:
        return [f"{node.name}: {CNI_CONFLIST} missing or not JSON ({res.stderr.strip()})"]
    types = res.stdout.split()
    if types[:2] != ["loopback", "bridge"] or "portmap" not in types:
        problems.append(f"{node.name}: conflist plugin chain is {types}")
    missing = node.out("for p in " + " ".join(CNI_PLUGINS) + "; do [ -x /usr/lib/cni/$p ] || echo $p; done")
    if missing:
        problems.append(f"{node.name}: CNI plugins missing from /usr/lib/cni: {missing.split()}")
    return problems


def vault_problems(server: Remote) -> list[str]:
    res = server.run("curl -sf http://127.0.0.1:8200/v1/sys/seal-status", check=False)
    if res.rc != 0:
        return [f"{server.name}: OpenBao does not answer on :8200 (curl rc={res.rc})"]
    st = json.loads(res.stdout)
    problems = []
    if not st.get("initialized"):
        problems.append(f"{server.name}: OpenBao is not initialised")
    if st.get("sealed"):
        problems.append(f"{server.name}: OpenBao is sealed ({st.get('progress')}/{st.get('t')} keys given)")
    return problems


def approle_problems(client: Remote, vault_addr: str) -> list[str]:
    """Log in with the node's own AppRole (on the node: the token never leaves it) and probe its policy."""
    login = f"curl -sf -X POST -d @/etc/fieldlab-agent/approle.json {vault_addr}/v1/auth/approle/login"
    probes = {
        "workload": (
            "POST",
            "pki_int/issue/fieldlab-workload",
            '{"common_name":"web.service.fieldlab","ttl":"5m"}',
        ),
        "own_agent": (
            "POST",
            "pki_int/issue/fieldlab-agent",
            f'{{"common_name":"{client.name}.agent.fieldlab"}}',
        ),
        "other_agent": ("POST", "pki_int/issue/fieldlab-agent", '{"common_name":"intruder.agent.fieldlab"}'),
        "sys_mounts": ("GET", "sys/mounts", ""),
        "root_ca": ("POST", "pki/root/generate/internal", '{"common_name":"evil"}'),
    }
    lines = [
        "set -u",
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
    script = "\n".join(lines)
    out = client.out(f"bash -c {q(script)}")
    seen = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    want = {"login": "ok", "workload": "200", "own_agent": "200"}
    problems = [
        f"{client.name}: approle {k} gave {seen.get(k)!r}, expected {v!r}"
        for k, v in want.items()
        if seen.get(k) != v
    ]
    for k in ("other_agent", "sys_mounts", "root_ca"):
        if seen.get(k) not in ("403", "400"):
            problems.append(
                f"{client.name}: approle policy allowed {k} (HTTP {seen.get(k)}), expected a refusal"
            )
    return problems


def _agent_get(url: str, secrets: Path, *, with_cert: bool) -> tuple[int, dict[str, object]]:
    ctx = ssl.create_default_context(cafile=str(secrets / "ca.pem"))
    if with_cert:
        ctx.load_cert_chain(str(secrets / "operator.crt"), str(secrets / "operator.key"))
    with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


def agent_problems(cluster: Cluster, client: Remote) -> list[str]:
    url = f"https://{client.address}:4646/v1/agent/health"
    problems = []
    try:
        status, body = _agent_get(url, cluster.secrets, with_cert=True)
        if status != 200 or body.get("status") != "ok" or body.get("node") != client.name:
            problems.append(f"{client.name}: agent health answered {status} {body}")
        vault = body.get("vault")
        if not isinstance(vault, dict) or not vault.get("authenticated"):
            problems.append(f"{client.name}: agent is not logged in to Vault: {vault}")
    except (OSError, ssl.SSLError, urllib.error.URLError) as exc:
        problems.append(f"{client.name}: agent health over mTLS failed: {exc}")
    try:
        _agent_get(url, cluster.secrets, with_cert=False)
        problems.append(f"{client.name}: agent answered a client that presented no certificate")
    except (OSError, ssl.SSLError, urllib.error.URLError):
        pass  # refused at TLS, as it must be
    return problems


def node_problems(cluster: Cluster, node: Remote) -> list[str]:
    """Everything the smoke suite expects of a node of its role."""
    problems = systemd_problems(node)
    if node in cluster.servers:
        problems += vault_problems(node)
    else:
        problems += docker_problems(node) + cni_problems(node)
        problems += approle_problems(node, cluster.vault_addr) + agent_problems(cluster, node)
    return problems


# --- agent-managed resources: orphans, alloc health, networking, delivered changes ----------------
# What the checkers look at on a client, from outside the agent (shell on the node): the agent's own
# view is exactly what a bug gets wrong, so it is only used for which allocs are live.
NETWORK = "fieldlab"
IPAM_DIR = f"/var/run/cni/{NETWORK}"
SHARED_CNI_CHAINS = {
    "CNI-HOSTPORT-DNAT",
    "CNI-HOSTPORT-MASQ",
    "CNI-HOSTPORT-SETMARK",
    "CNI-FORWARD",
    "CNI-ADMIN",
}
LIVE = ("running", "pending")

_OBSERVE = r"""
set -u
D={data}
echo "## containers"
L='{{{{.Label "org.fieldlab.alloc"}}}} {{{{.Label "org.fieldlab.role"}}}}'
F="{{{{.ID}}}} {{{{.State}}}} $L {{{{.Names}}}}"
docker ps -a --filter label=org.fieldlab.managed --no-trunc --format "$F"
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
for g in /sys/fs/cgroup/fieldlab/*/; do
  [ -d "$g" ] || continue
  echo "$(basename "$g") $(tr '\n' ',' < "$g/cgroup.procs")"
done
echo "## iptables"
iptables-save -t nat; iptables-save -t filter
"""


@dataclass(frozen=True)
class Resource:
    kind: str  # container, netns, ipam, cni_cache, alloc_dir, task_process, cni_chain, cni_rule
    name: str
    owner: str  # the alloc id it belongs to ("?" when nothing says)
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.name} (owner {self.owner}{', ' + self.detail if self.detail else ''})"


def _sections(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    cur = ""
    for line in text.splitlines():
        if line.startswith("## "):
            cur = line[3:].strip()
            out[cur] = []
        elif line.strip() and cur:
            out[cur].append(line.strip())
    return out


_COMMENT_ID = re.compile(r'id: \\?"([0-9a-f-]{36})\\?"')


def parse_resources(text: str) -> list[Resource]:
    """Every agent-made resource on a node, each with the alloc that owns it."""
    sec = _sections(text)
    res: list[Resource] = []
    for line in sec.get("containers", []):
        cid, state, alloc, role, name = [*line.split(), "", "", "", "", ""][:5]
        res.append(Resource("container", f"{name or cid[:12]}", alloc or "?", f"{role or '?'} {state}"))
    res += [
        Resource("netns", n, n[3:] if n.startswith("fl-") else "?")
        for n in sec.get("netns", [])
        if n.startswith("fl-")
    ]
    for line in sec.get("ipam", []):
        ip, _, owner = line.partition(" ")
        res.append(Resource("ipam", ip, owner.strip() or "?", f"host-local reservation in {IPAM_DIR}"))
    for name in sec.get("cache", []):
        parts = name.removesuffix(".json").split(":")
        res.append(Resource("cni_cache", name, parts[1] if len(parts) == 3 else "?"))
    res += [Resource("alloc_dir", d, d) for d in sec.get("allocdirs", [])]
    for line in sec.get("cgroups", []):
        name, _, pids = line.partition(" ")
        pids = pids.strip(",")
        if pids:
            res.append(Resource("task_process", name, name.rsplit(".", 1)[0], f"pids {pids}"))
    res += _iptables_resources(sec.get("iptables", []))
    return res


def _iptables_resources(lines: list[str]) -> list[Resource]:
    """Per-alloc CNI chains (owner from the comment on the rule that jumps to them) and the firewall
    plugin's per-address rules (owner resolved later from the address)."""
    chains: set[str] = set()
    owners: dict[str, str] = {}
    out: list[Resource] = []
    for line in lines:
        if line.startswith(":CNI-"):
            chains.add(line[1:].split()[0])
        elif line.startswith("-A "):
            m = _COMMENT_ID.search(line)
            jump = re.search(r" -j (CNI-\S+)", line)
            if m and jump:
                owners[jump.group(1)] = m.group(1)
            fw = re.match(r"-A CNI-FORWARD (?:-d|-s) (\d+\.\d+\.\d+\.\d+)/32 ", line)
            if fw:
                out.append(Resource("cni_rule", line, f"address {fw.group(1)}", "firewall plugin rule"))
    for c in sorted(chains - SHARED_CNI_CHAINS):
        out.append(Resource("cni_chain", c, owners.get(c, "?")))
    return out


def observe_resources(node: Remote, data_dir: str = "/var/lib/fieldlab-agent") -> list[Resource]:
    return parse_resources(node.out(f"bash -c {q(_OBSERVE.format(data=data_dir, ipam=IPAM_DIR))}"))


def orphan_problems(resources: list[Resource], allocs: list[dict[str, Any]], node: str) -> list[str]:
    """Resources no live alloc owns: each listed with its owner. Zero is the only good answer."""
    live = {a["id"] for a in allocs if a.get("status") in LIVE}
    addresses = {a["network"]["address"]: a["id"] for a in allocs if a.get("status") in LIVE}
    problems = []
    for r in resources:
        owner = (
            addresses.get(r.owner.removeprefix("address "), "?")
            if r.owner.startswith("address ")
            else r.owner
        )
        if owner not in live:
            problems.append(f"{node}: orphan {r}")
    return problems


def container_set_problems(resources: list[Resource], allocs: list[dict[str, Any]], node: str) -> list[str]:
    """One live set per alloc: at most one running pause container and one running container per
    docker task, never two."""
    problems = []
    for a in allocs:
        if a.get("status") not in LIVE:
            continue
        running = [
            r
            for r in resources
            if r.kind == "container" and r.owner == a["id"] and r.detail.endswith("running")
        ]
        pauses = [r for r in running if r.detail.startswith("pause")]
        tasks = [r for r in running if r.detail.startswith("task")]
        docker_tasks = [
            t for t, st in a["tasks"].items() if st.get("container") and len(st["container"]) == 64
        ]
        if len(pauses) > 1 or len(tasks) > len(docker_tasks):
            problems.append(
                f"{node}: alloc {a['id'][:8]} has {len(pauses)} running pause and {len(tasks)} running task "
                f"containers for {len(docker_tasks)} docker tasks: {[r.name for r in running]}"
            )
    return problems


def chain_set_problems(resources: list[Resource], allocs: list[dict[str, Any]], node: str) -> list[str]:
    """One set of CNI chains per live alloc: a second DNAT or masquerade chain for the same alloc is a
    leak from an earlier network of it, and the first one matching a host port wins (a blackhole)."""
    problems = []
    for a in allocs:
        if a.get("status") not in LIVE:
            continue
        mine = [r.name for r in resources if r.kind == "cni_chain" and r.owner == a["id"]]
        dnat = [c for c in mine if c.startswith("CNI-DN-")]
        masq = [c for c in mine if not c.startswith("CNI-DN-")]
        if len(dnat) > 1 or len(masq) > 1:
            problems.append(
                f"{node}: alloc {a['id'][:8]} owns more than one set of CNI chains (leaked): {mine}"
            )
    return problems


def alloc_health_problems(node: Remote, allocs: list[dict[str, Any]], resources: list[Resource]) -> list[str]:
    """Every alloc running (with a live container or process for each task and its alloc dir) or
    ended with a reason (failed ones replaced): none half-alive, none stuck pending."""
    by_id = {a["id"]: a for a in allocs}
    running_ctr = {r.name for r in resources if r.kind == "container" and r.detail.endswith("running")}
    cgroups = {r.name for r in resources if r.kind == "task_process"}
    dirs = {r.name for r in resources if r.kind == "alloc_dir"}
    ids = {n: c for n, c in _container_names(node).items()}
    problems = []
    for a in allocs:
        aid, st = a["id"], a.get("status")
        if st == "running":
            if aid not in dirs:
                problems.append(f"{node.name}: alloc {aid[:8]} is running but its alloc dir is missing")
            for task, ts in a["tasks"].items():
                ctr = ts.get("container") or ""
                alive = (ids.get(ctr) in running_ctr) if len(ctr) == 64 else f"{aid}.{task}" in cgroups
                if ts.get("state") != "running" or not alive:
                    what = "no live container" if len(ctr) == 64 else "no live process"
                    problems.append(
                        f"{node.name}: alloc {aid[:8]} is running but task {task} is {ts.get('state')} "
                        f"with {what} ({ctr[:12] or 'none'})"
                    )
        elif st == "pending":
            problems.append(f"{node.name}: alloc {aid[:8]} is still pending")
        elif st == "failed" and a.get("desired") != "stop":
            nxt = by_id.get(a.get("replaced_by") or "")
            if nxt is None:
                problems.append(
                    f"{node.name}: alloc {aid[:8]} failed ({a.get('reason')}) and was not replaced"
                )
    return problems


def _container_names(node: Remote) -> dict[str, str]:
    out = node.out(
        "docker ps -a --no-trunc --filter label=org.fieldlab.managed --format '{{.ID}} {{.Names}}'"
    )
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if len(line.split()) == 2}


def task_pid(node: Remote, alloc: dict[str, Any], task: str | None = None) -> int | None:
    """A pid inside the alloc's network namespace (its task container, else its pause container)."""
    tasks = alloc["tasks"]
    name = task or next(iter(tasks))
    ctr = tasks[name].get("container") or alloc["network"].get("pause_container") or ""
    if len(ctr) != 64:
        return None
    res = node.run(f"docker inspect -f '{{{{.State.Pid}}}}' {ctr}", check=False)
    pid = res.stdout.strip()
    return int(pid) if res.rc == 0 and pid.isdigit() and pid != "0" else None


def network_problems(
    cluster: Cluster, node: Remote, alloc: dict[str, Any], *, path: str = "/", vault: bool = True
) -> list[str]:
    """The alloc's mapped ports answer from another client; its netns has the address the agent
    reports; from inside it reaches Vault."""
    problems = []
    other = cluster.other_client(node)
    for p in alloc["network"].get("ports", []):
        url = f"http://{node.address}:{p['host']}{path}"
        code = other.run(f"curl -s -o /dev/null -m 3 -w '%{{http_code}}' {url}", check=False).stdout.strip()
        if code in ("", "000"):
            problems.append(
                f"{node.name}: alloc {alloc['id'][:8]} port {p['label']} ({url}) "
                f"does not answer from {other.name}"
            )
    pid = task_pid(node, alloc)
    if pid is None:
        return [*problems, f"{node.name}: alloc {alloc['id'][:8]} has no running container to look into"]
    seen = node.run(f"nsenter -t {pid} -n ip -4 -o addr show dev eth0", check=False).stdout
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", seen)
    want = alloc["network"].get("address")
    if not m:
        problems.append(
            f"{node.name}: alloc {alloc['id'][:8]} netns has no IPv4 address on eth0 (agent says {want})"
        )
    elif m.group(1) != want:
        problems.append(
            f"{node.name}: alloc {alloc['id'][:8]} netns has {m.group(1)} but the agent reports {want}"
        )
    if vault:
        res = node.run(
            f"nsenter -t {pid} -n curl -s -o /dev/null -m 3 -w '%{{http_code}}' "
            f"{cluster.vault_addr}/v1/sys/health",
            check=False,
        )
        if res.stdout.strip() in ("", "000"):
            problems.append(
                f"{node.name}: alloc {alloc['id'][:8]} cannot reach Vault at {cluster.vault_addr} "
                "from its netns"
            )
    return problems


def cert_sha256_on_disk(
    node: Remote,
    alloc_id: str,
    task: str,
    rel: str = "secrets/cert.pem",
    data_dir: str = "/var/lib/fieldlab-agent",
) -> str | None:
    path = f"{data_dir}/alloc/{alloc_id}/{task}/{rel}"
    res = node.run(f"openssl x509 -in {path} -outform der | sha256sum", check=False)
    return res.stdout.split()[0] if res.rc == 0 and res.stdout.strip() else None


def probe_status(node: Remote, port: int) -> dict[str, Any] | None:
    """The probe's /status, read from the node itself through the mapped port."""
    res = node.run(f"curl -sf -m 3 http://127.0.0.1:{port}/status", check=False)
    if res.rc != 0:
        return None
    try:
        return dict(json.loads(res.stdout))
    except json.JSONDecodeError:
        return None


def delivery_problems(node: Remote, alloc: dict[str, Any], task: str) -> list[str]:
    """The certificate the probe has LOADED is the one on disk."""
    port = int(alloc["network"]["ports"][0]["host"])
    st = probe_status(node, port)
    disk = cert_sha256_on_disk(node, alloc["id"], task)
    if st is None:
        return [f"{node.name}: alloc {alloc['id'][:8]} probe does not answer on :{port}"]
    cert = st.get("cert") or {}
    live = cert.get("sha256") if isinstance(cert, dict) else None
    if disk is None:
        return [f"{node.name}: alloc {alloc['id'][:8]} has no readable cert on disk"]
    if live != disk:
        return [
            f"{node.name}: alloc {alloc['id'][:8]} probe has loaded {str(live)[:16]} but disk has {disk[:16]}"
        ]
    return []
