"""Pure views: the agent's plain data as the JSON of Nomad's Go `api` structs (api/*.go).

Every function returns what Go's encoding/json writes for the struct: every field, a nil pointer, slice
or map as null, `omitempty` fields left out when empty. Units are Go's: durations and Unix times in int64
nanoseconds, time.Time fields as RFC 3339 strings (Go's zero time "0001-01-01T00:00:00Z"). Inputs are the
agent's: times in seconds since the epoch (float), alloc views as agent.runner.view.alloc_view (or
agent.runner.adopt's) builds them. No I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent.nomadapi.gojson import (
    ZERO_TIME,
    go_int,
    go_string,
    go_time,
    ns,
)
from agent.nomadapi.jobjson import job_json, network_json, port_json, resources
from agent.nomadapi.joblists import evaluation, job_stub, job_summary
from agent.nomadapi.taskstates import TaskEventLike, events_by_task, task_event, task_state

__all__ = [  # re-exported
    "ZERO_TIME",
    "evaluation",
    "events_by_task",
    "go_time",
    "job_json",
    "job_stub",
    "job_summary",
    "ns",
    "task_event",
]

# The agent's alloc statuses -> Nomad's ClientStatus (an adopted alloc's tasks were found running).
CLIENT_STATUS = {s: s for s in ("pending", "running", "failed", "complete")} | {"adopted": "running"}
SERF_PORT = 4648  # Nomad's default serf port: what AgentMember.Port is on a Nomad agent
# Serf's protocol and delegate versions, as a Nomad agent reports them (api/agent.go: AgentMember)
_PROTOCOL = {"ProtocolMin": 1, "ProtocolMax": 5, "ProtocolCur": 2}
_DELEGATE = {"DelegateMin": 2, "DelegateMax": 5, "DelegateCur": 4}


# --- allocations -----------------------------------------------------------------------------------


def _job_group(job: Mapping[str, Any] | None, group: str) -> Mapping[str, Any] | None:
    if job is None:
        return None
    return next((g for g in job.get("TaskGroups") or [] if g.get("Name") == group), None)


def _task_resources(job: Mapping[str, Any] | None, view: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """{task: (CPU, MemoryMB)} of the alloc's tasks: the job's, zero for a task the job does not name
    (an adopted alloc has no job)."""
    tg = _job_group(job, str(view.get("group", "")))
    asked = {
        t["Name"]: (int(t["Resources"]["CPU"]), int(t["Resources"]["MemoryMB"]))
        for t in (tg or {}).get("Tasks") or []
        if t.get("Resources")
    }
    return {name: asked.get(name, (0, 0)) for name in view.get("tasks") or {}}


def _alloc_network(view: Mapping[str, Any], job: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The alloc's network as api.NetworkResource, its host ports assigned; None without one."""
    net = view.get("network") or {}
    mode = str(net.get("mode") or "none")
    ports = list(net.get("ports") or [])
    if mode in ("none", "unknown") and not ports:
        return None
    tg = _job_group(job, str(view.get("group", "")))
    static: set[str] = set()
    named: dict[str, str] = {}  # label -> the port's host network, as the job asks
    for n in (tg or {}).get("Networks") or []:
        static |= {p["Label"] for p in n.get("ReservedPorts") or []}
        for p in (n.get("ReservedPorts") or []) + (n.get("DynamicPorts") or []):
            named[p["Label"]] = str(p.get("HostNetwork") or "default")
    reserved: list[dict[str, Any]] = []
    dynamic: list[dict[str, Any]] = []
    for p in ports:
        out = port_json(p["label"], int(p["host"]), int(p["to"]), named.get(p["label"], "default"))
        (reserved if p["label"] in static else dynamic).append(out)
    return network_json(mode, reserved, dynamic, ip=str(net.get("address") or ""))


def _allocated(view: Mapping[str, Any], job: Mapping[str, Any] | None) -> dict[str, Any]:
    """api.AllocatedResources (api/allocations.go)."""
    net = view.get("network") or {}
    network = _alloc_network(view, job)
    ip = str(net.get("address") or "")
    mappings = [  # a port on a named host network: its address there (Nomad's AssignPorts HostIP)
        {"Label": p["label"], "Value": int(p["host"]), "To": int(p["to"]), "HostIP": p.get("host_ip") or ip}
        for p in net.get("ports") or []
    ]
    return {
        "Tasks": {
            name: {
                "Cpu": {"CpuShares": cpu},
                "Memory": {"MemoryMB": memory, "MemoryMaxMB": 0},
                "Networks": None,
                "Devices": None,
            }
            for name, (cpu, memory) in _task_resources(job, view).items()
        },
        "Shared": {"DiskMB": 0, "Networks": [network] if network else None, "Ports": mappings or None},
    }


def _task_states(
    view: Mapping[str, Any], events_by_task: Mapping[str, Sequence[TaskEventLike]]
) -> dict[str, Any]:
    return {
        name: task_state(
            str(t.get("state", "pending")),
            bool(t.get("failed")),
            int(t.get("restarts") or 0),
            events_by_task.get(name, ()),
        )
        for name, t in (view.get("tasks") or {}).items()
    }


def _metrics() -> dict[str, Any]:
    """api.AllocationMetric (api/allocations.go) of a placement on the one node there is (the Nomad
    CLI's `alloc status -verbose` reads it: never null)."""
    return {
        **dict.fromkeys(("NodesEvaluated", "NodesFiltered", "NodesInPool"), 0),
        "NodePool": "",
        **dict.fromkeys(("NodesAvailable", "ClassFiltered", "ConstraintFiltered"), None),
        "NodesExhausted": 0,
        **dict.fromkeys(
            ("ClassExhausted", "DimensionExhausted", "QuotaExhausted", "ResourcesExhausted"), None
        ),
        "Scores": None,
        "AllocationTime": 0,
        "CoalescedFailures": 0,
        "ScoreMetaData": None,
    }


# api.AllocationListStub's fields, in its order.
_STUB_FIELDS = (  # noqa: SIM905 (26 names, a line)
    "ID EvalID Name Namespace NodeID NodeName JobID JobType JobVersion TaskGroup AllocatedResources "
    "DesiredStatus DesiredDescription ClientStatus ClientDescription TaskStates DeploymentStatus "
    "FollowupEvalID NextAllocation RescheduleTracker PreemptedAllocations PreemptedByAllocation "
    "CreateIndex ModifyIndex CreateTime ModifyTime"
).split()


def alloc_json(
    view: Mapping[str, Any],
    *,
    job: dict[str, Any] | None,
    events_by_task: Mapping[str, Sequence[TaskEventLike]],
    node_id: str,
    node_name: str,
    namespace: str,
    create_index: int,
    modify_index: int,
    alloc_modify_index: int,
    modify_time: float,
    desc: str = "",
    eval_id: str = "",
    index: int = 0,
    deployment_id: str = "",
    deployment_status: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """api.Allocation (api/allocations.go) of an alloc view; `job` is `job_json`'s (None: an adopted
    alloc, whose jobspec is lost), `desc` the DesiredDescription, `index` the alloc's index in its group
    (Name "<job>.<group>[index]")."""
    net = view.get("network") or {}
    per_task = _task_resources(job, view)
    network = _alloc_network(view, job)
    networks = [network] if network else None
    address = str(net.get("address") or "")
    return {
        "ID": view["id"],
        "Namespace": namespace,
        "EvalID": eval_id,
        "Name": f"{view.get('job', '')}.{view.get('group', '')}[{index}]",
        "NodeID": node_id,
        "NodeName": node_name,
        "JobID": view.get("job", ""),
        "Job": job,
        "TaskGroup": view.get("group", ""),
        "Resources": resources(
            sum(c for c, _ in per_task.values()), sum(m for _, m in per_task.values()), networks=networks
        ),
        "TaskResources": {name: resources(cpu, mem) for name, (cpu, mem) in per_task.items()},
        "AllocatedResources": _allocated(view, job),
        "Services": None,
        "Metrics": _metrics(),
        "DesiredStatus": "stop" if view.get("desired") == "stop" or _rescheduled(view) else "run",
        "DesiredDescription": desc or (RESCHEDULED if _rescheduled(view) else ""),
        "DesiredTransition": dict.fromkeys(
            ("Migrate", "Reschedule", "ForceReschedule", "NoShutdownDelay", "MigrateDisablePlacement")
        ),
        "ClientStatus": CLIENT_STATUS.get(str(view.get("status")), "pending"),
        "ClientDescription": view.get("reason") or "",
        "TaskStates": _task_states(view, events_by_task),
        "DeploymentID": deployment_id,  # agent.nomadapi.deploywatch: its job version's deployment
        "DeploymentStatus": _deployment_status(deployment_status),
        "FollowupEvalID": view.get("followup_eval_id") or "",
        "PreviousAllocation": view.get("replaces") or "",
        "NextAllocation": view.get("replaced_by") or "",
        "RescheduleTracker": reschedule_tracker(view, node_id),
        "NetworkStatus": {"InterfaceName": "eth0", "Address": address, "AddressIPv6": "", "DNS": None}
        if (net.get("mode") == "bridge" or str(net.get("mode", "")).startswith("cni/")) and address
        else None,
        "PreemptedAllocations": None,
        "PreemptedByAllocation": "",
        "CreateIndex": create_index,
        "ModifyIndex": modify_index,
        "AllocModifyIndex": alloc_modify_index,
        "CreateTime": ns(float(view.get("created") or 0.0)),
        "ModifyTime": ns(modify_time),
    }


RESCHEDULED = "alloc was rescheduled because it failed"  # Nomad's StatusAllocRescheduled


def _rescheduled(view: Mapping[str, Any]) -> bool:
    """A failed alloc that was replaced: Nomad's scheduler stopped it as it rescheduled it."""
    return view.get("status") == "failed" and bool(view.get("replaced_by"))


def reschedule_tracker(view: Mapping[str, Any], node_id: str) -> dict[str, Any] | None:
    """Nomad's RescheduleTracker (nomad/structs): the reschedules that led to the alloc (times and
    delays in ns), LastReschedule "ok" on a replacement and on a failed alloc that was replaced;
    null when neither. Every reschedule was on this node (`node_id` when the record names none)."""
    events = [
        {
            "RescheduleTime": ns(float(e["time"])),
            "PrevAllocID": e["prev_alloc"],
            "PrevNodeID": e["prev_node"] or node_id,
            "Delay": ns(float(e["delay"])),
        }
        for e in view.get("reschedule_events") or ()
    ]
    if not events and not _rescheduled(view):
        return None
    return {"Events": events or None, "LastReschedule": "ok"}


def _deployment_status(status: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """api.AllocDeploymentStatus: health decided (Healthy, when) or null while undecided."""
    if status is None:
        return None
    return {
        "Healthy": bool(status["Healthy"]),
        "Timestamp": go_time(float(status["Timestamp"])),
        "Canary": bool(status.get("Canary")),
        "ModifyIndex": int(status.get("ModifyIndex") or 0),
    }


def alloc_stub(
    view: Mapping[str, Any],
    *,
    job: dict[str, Any] | None = None,
    events_by_task: Mapping[str, Sequence[TaskEventLike]],
    node_id: str,
    node_name: str,
    namespace: str,
    create_index: int,
    modify_index: int,
    alloc_modify_index: int,
    modify_time: float,
    desc: str = "",
    eval_id: str = "",
    index: int = 0,
    with_resources: bool = False,
    deployment_id: str = "",
    deployment_status: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """api.AllocationListStub (api/allocations.go), from the same inputs as `alloc_json` (JobType and
    JobVersion come from `job` when given). AllocatedResources is `omitempty`: only `with_resources`
    (Nomad's `?resources=true`) writes it."""
    full = alloc_json(
        view,
        job=job,
        events_by_task=events_by_task,
        node_id=node_id,
        node_name=node_name,
        namespace=namespace,
        create_index=create_index,
        modify_index=modify_index,
        alloc_modify_index=alloc_modify_index,
        modify_time=modify_time,
        desc=desc,
        eval_id=eval_id,
        index=index,
        deployment_id=deployment_id,
        deployment_status=deployment_status,
    )
    version = view.get("job_version", (job or {}).get("Version"))  # the alloc's own, else its job's
    full |= {"JobType": (job or {}).get("Type") or "", "JobVersion": int(version or 0)}
    return {k: full[k] for k in _STUB_FIELDS if with_resources or k != "AllocatedResources"}


# --- the node ---------------------------------------------------------------------------------------


def _driver_info(name: str, d: Mapping[str, Any]) -> dict[str, Any]:
    """api.DriverInfo (api/nodes.go) from {"healthy", "detected", "description"[, "attributes",
    "update_time" (seconds)]}; a detected driver's attributes default to Nomad's driver.<name> = true."""
    detected = bool(d.get("detected"))
    attributes = d.get("attributes")
    if attributes is None and detected:
        attributes = {f"driver.{name}": "true"}
    update = d.get("update_time")
    return {
        "Attributes": dict(attributes) if attributes is not None else None,
        "Detected": detected,
        "Healthy": bool(d.get("healthy")),
        "HealthDescription": str(d.get("description") or ""),
        "UpdateTime": go_time(float(update) if update is not None else None),
    }


def _host(address: str) -> str:
    """The IP of "ip:port" ("[v6]:port" too); an address without a port as it is."""
    if address.startswith("["):
        return address[1 : address.find("]")] if "]" in address else address
    return address.rsplit(":", 1)[0] if address.count(":") == 1 else address


def _node_resources(
    attributes: Mapping[str, str], node_networks: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """api.NodeResources (api/nodes.go) from the fingerprint attributes Nomad derives them from
    (cpu.totalcompute, cpu.numcores, memory.totalbytes, unique.storage.bytestotal); 0 when absent.
    NodeNetworks as the server's structs.NodeResources has them (the node's host networks: each
    address with its Alias, agent.node.hostnetworks)."""
    mb = 1024 * 1024
    return {
        "Cpu": {
            "CpuShares": go_int(attributes.get("cpu.totalcompute")),
            "TotalCpuCores": go_int(attributes.get("cpu.numcores")),
            "ReservableCpuCores": None,
        },
        "Memory": {"MemoryMB": go_int(attributes.get("memory.totalbytes")) // mb},
        "Disk": {"DiskMB": go_int(attributes.get("unique.storage.bytestotal")) // mb},
        "Networks": None,
        "NodeNetworks": [dict(n) for n in node_networks] or None,
        "Devices": None,
        "MinDynamicPort": 20000,  # Nomad's default dynamic port range
        "MaxDynamicPort": 32000,
    }


def _reserved() -> dict[str, Any]:
    """api.NodeReservedResources (api/nodes.go): the agent reserves nothing of the node."""
    return {
        "Cpu": {"CpuShares": 0},
        "Memory": {"MemoryMB": 0},
        "Disk": {"DiskMB": 0},
        "Networks": {"ReservedHostPorts": ""},
    }


def node_json(
    *,
    node_id: str,
    name: str,
    datacenter: str,
    address: str,
    drivers: Mapping[str, Mapping[str, Any]],
    attributes: Mapping[str, str],
    meta: Mapping[str, str],
    status: str = "ready",
    node_class: str = "",
    node_pool: str = "default",
    host_volumes: Mapping[str, tuple[str, bool]] | None = None,
    node_networks: Sequence[Mapping[str, Any]] = (),
    host_networks: Mapping[str, Mapping[str, str]] | None = None,
    create_index: int,
    modify_index: int,
    tls: bool = True,
    status_updated_at: float = 0.0,
    events: list[dict[str, Any]] | None = None,
    eligibility: str = "eligible",
    drain_strategy: Mapping[str, Any] | None = None,
    last_drain: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """api.Node (api/nodes.go) of the agent's node; `address` is the HTTP API's "ip:port" (HTTPAddr).
    NodeResources and ReservedResources are never null: the Nomad CLI's `node status` reads them."""
    return {
        "ID": node_id,
        "Datacenter": datacenter,
        "Name": name,
        "HTTPAddr": address,
        "TLSEnabled": tls,
        "Attributes": dict(attributes),
        "Resources": None,
        "Reserved": None,
        "NodeResources": _node_resources(attributes, node_networks),
        "ReservedResources": _reserved(),
        "Links": None,
        "Meta": dict(meta),
        "NodeClass": node_class,
        "NodePool": node_pool,
        "CgroupParent": "",
        "Drain": drain_strategy is not None,
        "DrainStrategy": dict(drain_strategy) if drain_strategy is not None else None,
        "SchedulingEligibility": eligibility,
        "Status": status,
        "StatusDescription": "",
        "StatusUpdatedAt": int(status_updated_at),
        "Events": events or None,
        "Drivers": {n: _driver_info(n, d) for n, d in drivers.items()},
        "HostVolumes": {n: {"Path": p, "ReadOnly": ro} for n, (p, ro) in sorted((host_volumes or {}).items())}
        or None,
        "GCVolumesOnNodeGC": False,
        "HostNetworks": {n: dict(h) for n, h in sorted((host_networks or {}).items())} or None,
        "CSIControllerPlugins": None,
        "CSINodePlugins": None,
        "LastDrain": dict(last_drain) if last_drain is not None else None,
        "CreateIndex": create_index,
        "ModifyIndex": modify_index,
        "NodeMaxAllocs": 0,
    }


def node_event(
    message: str, subsystem: str, details: Mapping[str, str], timestamp: float, index: int
) -> dict[str, Any]:
    """api.NodeEvent (api/nodes.go)."""
    return {
        "Message": message,
        "Subsystem": subsystem,
        "Details": dict(details) or None,
        "Timestamp": go_time(timestamp),
        "CreateIndex": index,
    }


def node_stub(
    *,
    node_id: str,
    name: str,
    datacenter: str,
    address: str,
    drivers: Mapping[str, Mapping[str, Any]],
    attributes: Mapping[str, str],
    meta: Mapping[str, str],
    status: str = "ready",
    node_class: str = "",
    node_pool: str = "default",
    node_networks: Sequence[Mapping[str, Any]] = (),
    create_index: int,
    modify_index: int,
    with_resources: bool = False,
    with_os: bool = False,
    eligibility: str = "eligible",
    drain_strategy: Mapping[str, Any] | None = None,
    last_drain: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """api.NodeListStub (api/nodes.go), as the server's Node.Stub (nomad/structs) fills it: Address the
    IP of HTTPAddr, Version the `nomad.version` attribute. Attributes, NodeResources and
    ReservedResources are `omitempty`, written only when asked: `?os=true` (`with_os`: the os.name
    attribute alone) and `?resources=true` (`with_resources`)."""
    del meta  # not a field of the stub
    out: dict[str, Any] = {"Address": _host(address), "ID": node_id}
    if with_os:
        out["Attributes"] = {"os.name": attributes.get("os.name", "")}
    out |= {
        "Datacenter": datacenter,
        "Name": name,
        "NodeClass": node_class,
        "NodePool": node_pool,
        "Version": attributes.get("nomad.version", ""),
        "Drain": drain_strategy is not None,
        "SchedulingEligibility": eligibility,
        "Status": status,
        "StatusDescription": "",
        "Drivers": {n: _driver_info(n, d) for n, d in drivers.items()},
    }
    if with_resources:
        out["NodeResources"] = _node_resources(attributes, node_networks)
        out["ReservedResources"] = _reserved()
    drained = dict(last_drain) if last_drain is not None else None
    return out | {"LastDrain": drained, "CreateIndex": create_index, "ModifyIndex": modify_index}


# --- the agent ---------------------------------------------------------------------------------------


def agent_member(
    *,
    node_name: str,
    datacenter: str,
    region: str,
    version: str,
    addr: str,
    port: int = SERF_PORT,
    status: str = "alive",
) -> dict[str, Any]:
    """api.AgentMember (api/agent.go): Name "<node>.<region>" as Nomad names its members, Addr the IP
    (a port in `addr` is dropped), Tags the region, datacenter and build."""
    return {
        "Name": f"{node_name}.{region}",
        "Addr": _host(addr),
        "Port": port,
        "Tags": {"region": region, "dc": datacenter, "build": version},
        "Status": status,
        **_PROTOCOL,
        **_DELEGATE,
    }


def agent_self(
    *,
    node_name: str,
    datacenter: str,
    region: str,
    version: str,
    config: Mapping[str, Any],
    node_id: str = "",
    addr: str = "",
    client_stats: Mapping[str, str] | None = None,
    extra_stats: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """api.AgentSelf (api/agent.go): {"config", "member", "stats"}. `config` is the agent's, over the
    fields Nomad's API client reads (Region, Datacenter, NodeName, Version as Nomad's VersionInfo);
    stats["client"]["node_id"] is what `nomad node status -self` looks up. The member is filled in
    (a Nomad client without a server answers an empty one): api.Agent.NodeName() reads its Name."""
    full: dict[str, Any] = {
        "Region": region,
        "Datacenter": datacenter,
        "NodeName": node_name,
        "Version": {
            "BuildDate": ZERO_TIME,
            "Revision": "",
            "Version": version,
            "VersionPrerelease": "",
            "VersionMetadata": "",
        },
    }
    for key, value in config.items():
        before = full.get(key)
        full[key] = {**before, **value} if isinstance(before, dict) and isinstance(value, Mapping) else value
    member = agent_member(
        node_name=node_name, datacenter=datacenter, region=region, version=version, addr=addr
    )
    member["Name"] = node_name  # api.Agent.NodeName() is the member's name
    # a Nomad client's stats (client/client.go: Stats); no servers, so no heartbeats: ""
    client = dict.fromkeys(("known_servers", "last_heartbeat", "heartbeat_ttl"), "")
    client |= {"node_id": node_id, "num_allocations": "0"} | dict(client_stats or {})
    stats: dict[str, dict[str, str]] = {"client": client}
    stats |= {k: dict(v) for k, v in (extra_stats or {}).items()}
    return {"config": full, "member": member, "stats": stats}


def health(ok_client: bool, message: str, *, server_asked: bool = False) -> dict[str, Any]:
    """api.AgentHealthResponse (api/agent.go). A Nomad agent without a server leaves "server" out
    (`omitempty`); asked for it (`?type=server`) it answers {"ok": false, "message": "server not
    enabled"} (command/agent/agent_endpoint.go: HealthRequest)."""
    out: dict[str, Any] = {"client": {"ok": ok_client, "message": message}}
    if server_asked:
        out["server"] = {"ok": False, "message": "server not enabled"}
    return out


# --- a job's submission ----------------------------------------------------------------------------


def job_submission(source: str, fmt: str | None, variables: Mapping[str, object]) -> dict[str, Any]:
    """api.JobSubmission (api/jobs.go): the jobspec as it was submitted, `fmt` the agent's ("hcl" is
    Nomad's "hcl2"; None: as the text reads), its -var flags as strings."""
    if fmt not in ("hcl", "json"):
        fmt = "json" if source.lstrip().startswith("{") else "hcl"
    return {
        "Source": source,
        "Format": "hcl2" if fmt == "hcl" else "json",
        "VariableFlags": {str(k): go_string(v) for k, v in variables.items()} or None,
        "Variables": "",
    }
