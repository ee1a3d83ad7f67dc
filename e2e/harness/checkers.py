"""Checkers: pure functions over observed state that return what is wrong (an empty list when all is
well). They never do I/O: `e2e.harness.probes` gathers the observations (the dataclasses below) from
the nodes, the caller hands them over.

They say exactly what they saw, so a failing suite reads like a diagnosis, not like `False`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from e2e.harness.target import Target, load_target

BUSYBOX = "fieldlab/busybox:latest"
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap", "firewall")
CNI_CONFLIST = "/etc/cni/net.d/nomad.conflist"  # the network of both target profiles


# --- a node of its role: systemd, docker, CNI, Vault, AppRole, the agent's API -----------------------
@dataclass(frozen=True)
class SystemdSeen:
    node: str
    state: str  # what `systemctl is-system-running --wait` said
    failed: list[str]  # failed units


def systemd_problems(seen: SystemdSeen) -> list[str]:
    problems = []
    if seen.state != "running":
        problems.append(f"{seen.node}: systemd state is {seen.state!r}, not 'running'")
    if seen.failed:
        problems.append(f"{seen.node}: failed units: {seen.failed}")
    return problems


@dataclass(frozen=True)
class DockerRunSeen:
    """`docker run --rm --init BUSYBOX sh -c 'echo fieldlab-ok'` on the node."""

    node: str
    rc: int
    stdout: str
    stderr: str


def docker_problems(seen: DockerRunSeen) -> list[str]:
    if seen.rc != 0 or seen.stdout.strip() != "fieldlab-ok":
        return [
            f"{seen.node}: `docker run {BUSYBOX}` gave rc={seen.rc} out={seen.stdout.strip()!r} "
            f"err={seen.stderr.strip()[-300:]!r}"
        ]
    return []


@dataclass(frozen=True)
class CniSeen:
    node: str
    conflist_error: str | None  # why the conflist could not be read (None: it was read)
    plugin_types: list[str] = field(default_factory=list)  # the conflist's plugin chain, in order
    missing_plugins: list[str] = field(default_factory=list)  # of CNI_PLUGINS, not in /usr/lib/cni


def cni_problems(seen: CniSeen) -> list[str]:
    if seen.conflist_error is not None:
        return [f"{seen.node}: {CNI_CONFLIST} missing or not JSON ({seen.conflist_error})"]
    problems = []
    types = seen.plugin_types
    if types[:2] != ["loopback", "bridge"] or "portmap" not in types:
        problems.append(f"{seen.node}: conflist plugin chain is {types}")
    if seen.missing_plugins:
        problems.append(f"{seen.node}: CNI plugins missing from /usr/lib/cni: {seen.missing_plugins}")
    return problems


@dataclass(frozen=True)
class VaultSeen:
    node: str
    curl_rc: int  # of the seal-status request on the server itself
    seal_status: dict[str, Any] = field(default_factory=dict)


def vault_problems(seen: VaultSeen) -> list[str]:
    if seen.curl_rc != 0:
        return [f"{seen.node}: OpenBao does not answer on :8200 (curl rc={seen.curl_rc})"]
    st = seen.seal_status
    problems = []
    if not st.get("initialized"):
        problems.append(f"{seen.node}: OpenBao is not initialised")
    if st.get("sealed"):
        problems.append(f"{seen.node}: OpenBao is sealed ({st.get('progress')}/{st.get('t')} keys given)")
    return problems


# What a client's own AppRole must be allowed, and what its policy must refuse.
# The agent's AppRole: its own cert, and tasks' tokens through the token role with a job's policy;
# no workload cert, no KV read, no token outside the role or beyond the role's allowed policies.
APPROLE_ALLOWED = {"login": "ok", "own_agent": "200", "task_token": "200"}
APPROLE_REFUSED = ("other_agent", "sys_mounts", "root_ca", "workload", "kv", "plain_token", "wide_token")


@dataclass(frozen=True)
class AppRoleSeen:
    node: str
    answers: dict[str, str]  # probe name -> "ok"/"failed"/"absent" (login) or the HTTP status
    # The node must have the lab's AppRole file: this agent's (the fieldlab target's). A Nomad
    # client logs in to Vault its own way and may have none: then nothing is checked.
    required: bool = True


def approle_problems(seen: AppRoleSeen) -> list[str]:
    got = seen.answers
    if got.get("login") == "absent":
        return [f"{seen.node}: no AppRole credentials file"] if seen.required else []
    problems = [
        f"{seen.node}: approle {k} gave {got.get(k)!r}, expected {v!r}"
        for k, v in APPROLE_ALLOWED.items()
        if got.get(k) != v
    ]
    for k in APPROLE_REFUSED:
        if got.get(k) not in ("403", "400"):
            problems.append(
                f"{seen.node}: approle policy allowed {k} (HTTP {got.get(k)}), expected a refusal"
            )
    return problems


@dataclass(frozen=True)
class AgentSeen:
    """The agent's /v1/agent/health over mTLS, and whether it answered a client with no certificate."""

    node: str
    error: str | None  # why the health request with the operator's certificate failed (None: answered)
    status: int | None = None
    body: Any = None
    answered_without_cert: bool = False


def agent_problems(seen: AgentSeen) -> list[str]:
    problems = []
    if seen.error is not None:
        problems.append(f"{seen.node}: agent health over mTLS failed: {seen.error}")
    else:
        body: dict[str, Any] = seen.body if isinstance(seen.body, dict) else {}
        health, own = body.get("health") or {}, body.get("self") or {}
        name = (own.get("member") or {}).get("Name")
        if seen.status != 200 or not (health.get("client") or {}).get("ok") or name != seen.node:
            problems.append(f"{seen.node}: agent health answered {seen.status} {health}, self {name!r}")
        # This agent's own Vault login (Stats["fieldlab"]); a Nomad client has no such stats.
        stats = (own.get("stats") or {}).get("fieldlab")
        if stats is not None and stats.get("vault_authenticated") != "true":
            vault = {k: v for k, v in stats.items() if k.startswith("vault_")}
            problems.append(f"{seen.node}: agent is not logged in to Vault: {vault}")
    if seen.answered_without_cert:
        problems.append(f"{seen.node}: agent answered a client that presented no certificate")
    return problems


@dataclass(frozen=True)
class NodeSeen:
    """Everything the smoke suite looks at on a node: a server has `vault`, a client the rest."""

    systemd: SystemdSeen
    vault: VaultSeen | None = None
    docker: DockerRunSeen | None = None
    cni: CniSeen | None = None
    approle: AppRoleSeen | None = None
    agent: AgentSeen | None = None


def node_problems(seen: NodeSeen) -> list[str]:
    """Everything the smoke suite expects of a node of its role."""
    problems = systemd_problems(seen.systemd)
    if seen.vault is not None:
        problems += vault_problems(seen.vault)
    if seen.docker is not None:
        problems += docker_problems(seen.docker)
    if seen.cni is not None:
        problems += cni_problems(seen.cni)
    if seen.approle is not None:
        problems += approle_problems(seen.approle)
    if seen.agent is not None:
        problems += agent_problems(seen.agent)
    return problems


# --- agent-managed resources: orphans, alloc health, networking, delivered changes ----------------
# What the checkers look at on a client, from outside the agent (shell on the node): the agent's own
# view is exactly what a bug gets wrong, so it is only used for which allocs are live.
SHARED_CNI_CHAINS = {
    "CNI-HOSTPORT-DNAT",
    "CNI-HOSTPORT-MASQ",
    "CNI-HOSTPORT-SETMARK",
    "CNI-FORWARD",
    "CNI-ADMIN",
}
LIVE = ("running", "pending")
FIELDLAB = load_target("fieldlab")  # what a parse reads unless told another target


@dataclass(frozen=True)
class Resource:
    # container, netns, ipam, cni_cache, alloc_dir, task_process (a task cgroup with processes),
    # loose_process (a process of a task outside any task cgroup), cni_chain, cni_rule
    kind: str
    name: str
    owner: str  # the alloc id it belongs to ("?" when nothing says)
    detail: str = ""
    procs: tuple[tuple[int, int], ...] = ()  # task_process: (pid, process group) of each process in it

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


def parse_resources(text: str, target: Target = FIELDLAB) -> list[Resource]:
    """Every agent-made resource on a node, each with the alloc that owns it (from the text the
    observation script of `probes.observe_resources` prints; the names are the target's)."""
    sec = _sections(text)
    res: list[Resource] = []
    for line in sec.get("containers", []):
        cid, state, alloc, *rest = [*line.split(), "", "", ""]
        # "<role> <name>" where the containers carry a role label, else "<name>": a Nomad client
        # tells its pause container by its name (nomad_init_<alloc>)
        role, name = (rest[0], rest[1]) if target.docker_role_label else ("", rest[0])
        if not role and name:
            role = "pause" if name.startswith(target.pause_prefix) else "task"
        res.append(Resource("container", f"{name or cid[:12]}", alloc or "?", f"{role or '?'} {state}"))
    # `ip netns list` prints "<name> (id: N)" for a netns with an id: the name is the first word.
    spaces = [line.split()[0] for line in sec.get("netns", []) if line.strip()]
    res += [Resource("netns", n, n[len(target.netns_prefix) :]) for n in spaces if target.is_alloc_netns(n)]
    for line in sec.get("ipam", []):
        ip, _, owner = line.partition(" ")
        where = f"host-local reservation in {target.ipam_dir}"
        res.append(Resource("ipam", ip, owner.strip() or "?", where))
    for name in sec.get("cache", []):
        parts = name.removesuffix(".json").split(":")
        res.append(Resource("cni_cache", name, parts[1] if len(parts) == 3 else "?"))
    res += [Resource("alloc_dir", d, d) for d in sec.get("allocdirs", [])]
    res += _cgroup_resources(sec.get("cgroups", []))
    for line in sec.get("looseprocs", []):
        pid, alloc, task = [*line.split(), "", "", ""][:3]
        if alloc:
            res.append(Resource("loose_process", f"pid {pid} ({task or '?'})", alloc, "in no task cgroup"))
    res += _iptables_resources(sec.get("iptables", []))
    return res


def _cgroup_resources(lines: list[str]) -> list[Resource]:
    """Task cgroups with processes in them, one resource per task: on cgroup v1 the same task cgroup
    is listed once per controller hierarchy (memory, cpu), its processes merged. A process is
    "<pid>:<process group>" (or a bare "<pid>", group unknown: 0)."""
    procs: dict[str, dict[int, int]] = {}
    for line in lines:
        name, _, listed = line.partition(" ")
        mine = procs.setdefault(name, {})
        for item in listed.replace(",", " ").split():
            pid, _, group = item.partition(":")
            if pid.isdigit():
                mine[int(pid)] = int(group) if group.isdigit() else mine.get(int(pid), 0)
    out = []
    for name, seen in procs.items():
        if seen:
            pids = ",".join(str(p) for p in sorted(seen))
            out.append(
                Resource(
                    "task_process",
                    name,
                    name.rsplit(".", 1)[0],
                    f"pids {pids}",
                    tuple(sorted(seen.items())),
                )
            )
    return out


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


def parse_container_names(text: str) -> dict[str, str]:
    """`docker ps --format '{{.ID}} {{.Names}}'` as {full id: name}."""
    return {line.split()[0]: line.split()[1] for line in text.splitlines() if len(line.split()) == 2}


def orphan_problems(resources: list[Resource], allocs: list[dict[str, Any]], node: str) -> list[str]:
    """Resources no live alloc owns: each listed with its owner. Zero is the only good answer. An
    alloc dir is the one exception: a terminal alloc the agent still lists (not collected yet) keeps
    its dir (its logs) until the GC removes dir, record and events together, as Nomad's client."""
    live = {a["id"] for a in allocs if a.get("status") in LIVE}
    tracked = {a["id"] for a in allocs}
    addresses = {a["network"]["address"]: a["id"] for a in allocs if a.get("status") in LIVE}
    problems = []
    for r in resources:
        owner = (
            addresses.get(r.owner.removeprefix("address "), "?")
            if r.owner.startswith("address ")
            else r.owner
        )
        if owner not in (tracked if r.kind == "alloc_dir" else live):
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


def alloc_health_problems(
    node: str, allocs: list[dict[str, Any]], resources: list[Resource], container_names: dict[str, str]
) -> list[str]:
    """Every alloc running (with a live container or process for each task and its alloc dir; a
    finished prestart/poststart task or a waiting poststop task excepted, as Nomad's alloc health
    reads them) or ended with a reason (failed ones replaced): none half-alive, none stuck pending.

    `container_names` maps the full id of every agent-made container to its name."""
    by_id = {a["id"]: a for a in allocs}
    running_ctr = {r.name for r in resources if r.kind == "container" and r.detail.endswith("running")}
    cgroups = {r.name: {pid for pid, _ in r.procs} for r in resources if r.kind == "task_process"}
    dirs = {r.name for r in resources if r.kind == "alloc_dir"}
    problems = []
    for a in allocs:
        aid, st = a["id"], a.get("status")
        if st == "running":
            if aid not in dirs:
                problems.append(f"{node}: alloc {aid[:8]} is running but its alloc dir is missing")
            for task, ts in a["tasks"].items():
                if _finished_or_waiting(ts):
                    continue
                ctr = ts.get("container") or ""
                alive = (
                    (container_names.get(ctr) in running_ctr)
                    if len(ctr) == 64
                    else _process_alive(ctr, cgroups.get(f"{aid}.{task}"))
                )
                if ts.get("state") != "running" or not alive:
                    what = "no live container" if len(ctr) == 64 else "no live process"
                    failed = " (failed)" if ts.get("failed") else ""
                    problems.append(
                        f"{node}: alloc {aid[:8]} is running but task {task} is {ts.get('state')}{failed} "
                        f"with {what} ({ctr[:12] or 'none'})"
                    )
        elif st == "pending":
            problems.append(f"{node}: alloc {aid[:8]} is still pending")
        elif st == "failed" and a.get("desired") != "stop" and a.get("followup_eval_id"):
            # a reschedule is owed (Nomad's follow-up evaluation): until its replacement is placed,
            # after the policy's delay; one whose policy said no more attempts is owed nothing
            nxt = by_id.get(a.get("replaced_by") or "")
            if nxt is None:
                problems.append(f"{node}: alloc {aid[:8]} failed ({a.get('reason')}) and was not replaced")
    return problems


def _finished_or_waiting(task: dict[str, Any]) -> bool:
    """A lifecycle task that a running alloc does not need running, as Nomad's alloc health tracker
    (client/allochealth/tracker.go) reads it: a non-sidecar prestart or poststart task that finished
    without failing, a poststop task that has not failed (it waits for the main tasks to end). A
    sidecar, a failed task and a main task are judged as running tasks."""
    lifecycle = task.get("lifecycle") or {}
    hook, sidecar = lifecycle.get("hook") or "", bool(lifecycle.get("sidecar"))
    if not hook or sidecar or task.get("failed"):
        return False
    return hook == "poststop" or task.get("state") == "dead"


def _process_alive(handle: str, cgroup_pids: set[int] | None) -> bool:
    """An exec/raw_exec task is alive when its cgroup has processes, the pid the agent tracks among
    them (when the agent names a pid: the handle of a process driver is its pid)."""
    if not cgroup_pids:
        return False
    return int(handle) in cgroup_pids if handle.isdigit() else True


def steady_allocs(before: list[dict[str, Any]], after: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The allocs as read before an observation of the node, less every task whose state or handle
    the read after it shows changed (a restart in progress while the node was looked at: a fleet's
    restart probes restart somewhere at any moment), and less every alloc gone or changed status.
    What is left was the same throughout, so its processes can be judged against it (pure)."""
    later = {a["id"]: a for a in after}
    out = []
    for a in before:
        b = later.get(a["id"])
        if b is None or b.get("status") != a.get("status"):
            continue
        tasks = {
            name: ts
            for name, ts in a["tasks"].items()
            if (ts.get("state"), ts.get("container"))
            == ((b["tasks"].get(name) or {}).get("state"), (b["tasks"].get(name) or {}).get("container"))
        }
        out.append({**a, "tasks": tasks})
    return out


def process_set_problems(resources: list[Resource], allocs: list[dict[str, Any]], node: str) -> list[str]:
    """One running instance per exec/raw_exec task: every process in the task's cgroup is in the
    process group of the pid the agent tracks (the driver starts the task as the leader of a
    session of its own, and no process of it changes group). A process in another group is a second
    start's, or a leftover the start should have killed: the task runs twice."""
    cgroups = {r.name: r.procs for r in resources if r.kind == "task_process"}
    problems = []
    for a in allocs:
        if a.get("status") not in LIVE:
            continue
        for task, ts in a["tasks"].items():
            handle = str(ts.get("container") or "")
            if not handle.isdigit() or ts.get("state") != "running":
                continue
            leader = int(handle)
            procs = cgroups.get(f"{a['id']}.{task}", ())
            others = [(pid, grp) for pid, grp in procs if grp and grp != leader]
            if others:
                listed = ", ".join(f"{pid} (group {grp})" for pid, grp in others)
                problems.append(
                    f"{node}: alloc {a['id'][:8]} task {task} runs processes outside the process group "
                    f"of its pid {leader}: {listed} (a second instance of the task)"
                )
    return problems


@dataclass(frozen=True)
class PortSeen:
    label: str
    url: str  # http://<node>:<host port><path>
    code: str  # the HTTP status curl printed from the other client ("" or "000": no answer)


@dataclass(frozen=True)
class NetworkSeen:
    """One alloc's network from outside: its mapped ports from another client, the address in its
    netns (through a pid in it) and whether Vault answers from inside."""

    node: str
    alloc_id: str
    reported_address: str | None  # what the agent reports
    from_node: str  # the client the ports were tried from
    ports: list[PortSeen]
    pid: int | None  # a pid in the alloc's netns (None: no running container to look into)
    eth0: str = ""  # `ip -4 -o addr show dev eth0` in the netns
    vault_addr: str = ""
    vault_code: str | None = None  # what curl printed for Vault from the netns (None: not tried)
    # The alloc's netns (the inode of its pause container's netns, or of its named netns fl-<alloc>
    # for tasks that join by path, exec): "" when it has none any more.
    netns: str = ""
    # The netns of each task's process (docker: its container's; exec: the pid the agent tracks),
    # "" when the task has no live process to look at.
    task_netns: dict[str, str] = field(default_factory=dict)


def network_problems(seen: NetworkSeen) -> list[str]:
    """The alloc's mapped ports answer from another client; its netns has the address the agent
    reports; from inside it reaches Vault; every task with a live process is in the alloc's netns
    (not in one a dead pause container or a deleted named netns left behind)."""
    short = seen.alloc_id[:8]
    problems = [
        f"{seen.node}: alloc {short} port {p.label} ({p.url}) does not answer from {seen.from_node}"
        for p in seen.ports
        if p.code in ("", "000")
    ]
    if seen.pid is None:
        return [*problems, f"{seen.node}: alloc {short} has no running container to look into"]
    m = re.search(r"inet (\d+\.\d+\.\d+\.\d+)/", seen.eth0)
    want = seen.reported_address
    if not m:
        problems.append(f"{seen.node}: alloc {short} netns has no IPv4 address on eth0 (agent says {want})")
    elif m.group(1) != want:
        problems.append(f"{seen.node}: alloc {short} netns has {m.group(1)} but the agent reports {want}")
    if seen.vault_code is not None and seen.vault_code.strip() in ("", "000"):
        problems.append(f"{seen.node}: alloc {short} cannot reach Vault at {seen.vault_addr} from its netns")
    if seen.task_netns and not seen.netns:
        problems.append(f"{seen.node}: alloc {short} has no network namespace of its own any more")
    elif seen.netns:
        problems += [
            f"{seen.node}: alloc {short} task {task} runs in netns {ns}, not in the alloc's {seen.netns}"
            for task, ns in sorted(seen.task_netns.items())
            if ns and ns != seen.netns
        ]
    return problems


@dataclass(frozen=True)
class DeliverySeen:
    """The probe workload's /status (None: it did not answer) and the sha256 of the cert on disk."""

    node: str
    alloc_id: str
    port: int
    status: dict[str, Any] | None
    disk_sha256: str | None

    @property
    def loaded_sha256(self) -> Any:
        cert = (self.status or {}).get("cert") or {}
        return cert.get("sha256") if isinstance(cert, dict) else None


def delivery_problems(seen: DeliverySeen) -> list[str]:
    """The certificate the probe has LOADED is the one on disk."""
    short = seen.alloc_id[:8]
    if seen.status is None:
        return [f"{seen.node}: alloc {short} probe does not answer on :{seen.port}"]
    live = seen.loaded_sha256
    disk = seen.disk_sha256
    if disk is None:
        return [f"{seen.node}: alloc {short} has no readable cert on disk"]
    if live != disk:
        return [f"{seen.node}: alloc {short} probe has loaded {str(live)[:16]} but disk has {disk[:16]}"]
    return []


# -- host files a workload must never reach ---------------------------------------------------------
@dataclass(frozen=True)
class FileSeen:
    """One host file as a probe saw it: content hash, mode, owner, link count ("" when missing)."""

    path: str
    sha256: str = ""
    mode: str = ""
    owner: str = ""
    links: str = ""


def unchanged_problems(node: str, before: list[FileSeen], after: list[FileSeen]) -> list[str]:
    """Every host file seen before a hostile workload ran is the same after it: content, mode,
    owner and link count (a hard link planted to it would raise the count)."""
    now = {f.path: f for f in after}
    problems = []
    for f in before:
        g = now.get(f.path)
        if g is None or not g.sha256:
            problems.append(f"{node}: {f.path} is gone")
        elif g != f:
            changed = [
                f"{what} {a!r} -> {b!r}"
                for what, a, b in (
                    ("content", f.sha256[:12], g.sha256[:12]),
                    ("mode", f.mode, g.mode),
                    ("owner", f.owner, g.owner),
                    ("links", f.links, g.links),
                )
                if a != b
            ]
            problems.append(f"{node}: {f.path} changed: {', '.join(changed)}")
    return problems
