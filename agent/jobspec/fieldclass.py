"""What becomes of a Nomad jobspec field that fieldlab-agent does not implement (agent.jobspec.fields'
UNIMPLEMENTED): a replay is only worth something if it runs what the jobspec says, so no client-side
field is accepted and then ignored.

- **Server-side** (`SERVER_SIDE`): a decision Nomad's servers make (placement among nodes, deployments,
  the UI, what happens when a client loses its servers). One client node with no
  servers has nothing to decide: the field is accepted with a warning that says so and what the lab
  does instead (docs/jobspec-fields.md lists them).
- **Ignored by Nomad too** (`NOMAD_IGNORES`): deprecated fields Nomad itself reads and drops; a warning.
- **Accepted for some values** (`ONLY_VALUES`): the field is honoured by being what this node is
  (the job's region, its node pool); any other value is refused, naming it.
- **Refused** (`REFUSED`): a client-side field the agent does not do; the jobspec is refused with the
  reason, never replayed without it.
- **Anything else** (a field added to UNIMPLEMENTED without a class here) is refused too
  (`UNCLASSIFIED`): no client-side field is ever accepted and ignored. None is today (issue 52 item 6
  took the 82 there were to none: each implemented, refused, or classed above).
"""

from __future__ import annotations

from collections.abc import Mapping

from agent.jobspec.fields import UNIMPLEMENTED

_PLACEMENT = "placement among nodes is the scheduler's: this one node takes every alloc it fits"
_DISCONNECT = (
    "what the servers do when a client stops heartbeating: this agent is its own server and never "
    "loses contact with itself"
)
_DRAIN = "the servers' drainer: a drained node's allocs are stopped, there is no other node to move them to"
_SCALING = "the autoscaler's policy, read by the autoscaler, not by a client"

SERVER_SIDE: Mapping[str, Mapping[str, str]] = {
    "job": {
        "affinity": _PLACEMENT,
        "spread": _PLACEMENT,
        "all_at_once": "how the scheduler submits its plan: one node has one plan",
        "priority": "the scheduler's order of evaluations and its preemption: this node runs each at once",
        "migrate": _DRAIN,
        "multiregion": "regions and their federation are the servers'",
        "ui": "shown by Nomad's web UI, which the lab does not serve",
        "version_tag": "a label the servers keep on a job version",
        "consul_token": (
            "checked by the servers at submission (deprecated in Nomad 1.7, gone from its Job since): "
            "services use identities"
        ),
        "vault_token": "checked by the servers at submission (deprecated, Nomad 1.7): tasks use identities",
    },
    "group": {
        "affinity": _PLACEMENT,
        "spread": _PLACEMENT,
        "migrate": _DRAIN,
        "disconnect": _DISCONNECT,
        "max_client_disconnect": _DISCONNECT,
        "stop_after_client_disconnect": _DISCONNECT,
        "prevent_reschedule_on_lost": _DISCONNECT,
    },
    "task": {"affinity": _PLACEMENT, "scaling": _SCALING},
    "network": {"mbits": "bandwidth the scheduler accounts for; nothing on a client limits it"},
    "volume": {"sticky": "which node a host volume claim sticks to is the scheduler's"},
}

# A register request's options in a job file: Nomad's `job run` decodes only the file's Job
# (command/helpers.go JobGetter.Get); over HTTP the agent's register reads them (nomadapi.jobwrites).
_FILE_OPTIONS = (
    "a register option in a job file: Nomad's job run reads only the file's Job (its flags "
    "-check-index, -preserve-counts, -eval-priority set these; POST /v1/jobs honours them)"
)

NOMAD_IGNORES: Mapping[str, Mapping[str, str]] = {
    "resources": {
        "iops": "deprecated since Nomad 0.9: Nomad ignores it too",
        "disk": "deprecated: Nomad takes disk from ephemeral_disk and ignores it here too",
    },
    "template": {"vault_grace": "deprecated since Nomad 0.11: Nomad ignores it too"},
    # Nomad's api.ServiceCheck reads both; its server keeps no Advertise, and sends no Notes to Consul
    "check": {
        "advertise": "Nomad's server drops it (its ServiceCheck has no such field): Nomad ignores it too",
        "notes": "Nomad keeps it (at most 255 characters) and sends it nowhere: Nomad ignores it too",
    },
    "job": {"consul_namespace": "set by Nomad's servers: a submitted value is dropped by Nomad's API too"},
    # COMPAT(1.6.0) in Nomad's api.LogConfig: its HTTP API reads only `disabled` (apiLogConfigToStructs)
    "logs": {"enabled": "Nomad's pre-1.5.4 spelling: Nomad's API drops it too; use disabled"},
    "config.docker": {
        "cpuset_cpus": "no longer supported by Nomad's docker driver, which logs so and ignores it too"
    },
    # Nomad's claims read a service's name from the service, never from a task's identity block
    "identity": {
        "service_name": "set by Nomad on a service's identity: a task's identity's is ignored by Nomad too"
    },
    "request": dict.fromkeys(sorted(UNIMPLEMENTED["request"]), _FILE_OPTIONS),  # POST /v1/jobs' envelope
}

# Refused at submission, with the reason: client-side fields the agent does not do, where doing
# nothing would replay a different system. A field leaves UNIMPLEMENTED when it is implemented.
_NO_DEVICES = "place device requests: this node fingerprints no devices (no device plugins)"
REFUSED: Mapping[str, Mapping[str, str]] = {
    "service": {
        "connect": "run Consul Connect: the lab has no Envoy sidecars, gateways or Connect CA",
        "identity": (
            "log services in to Consul with a workload identity (Consul's ACL auth method): its "
            "Consul registrations carry no token"
        ),
    },
    "resources": {
        "device": _NO_DEVICES,
        "numa": "place tasks by NUMA topology (Nomad Enterprise's numa block): this node reports none",
    },
    "task": {
        "csi_plugin": "run CSI plugins: the lab's nodes have no CSI (host volumes only)",
        "schedule": "run tasks on a time schedule (Nomad Enterprise's time-based task execution)",
        "secret": (
            "fetch secret blocks (Nomad 1.11's secrets providers): read secrets with a template "
            "(Vault or Nomad variables)"
        ),
        "kind": "run Consul Connect proxies or gateways, the tasks a kind names",
        "action": (
            "run task actions (nomad action): run the command in the task with fieldlab-agent alloc exec"
        ),
    },
    # api.NetworkResource's CIDR, Device and IP: no jobspec field on Nomad's network page; the
    # scheduler fills them in on the alloc's network
    "network": {
        "cidr": "take a network's CIDR from a jobspec: Nomad's scheduler sets it on the alloc",
        "device": "take a network's device from a jobspec: Nomad's scheduler sets it on the alloc",
        "ip": "take a network's IP from a jobspec: Nomad's scheduler sets it on the alloc",
    },
}

# Accepted when the value is what this node is; any other value is refused, naming it.
ONLY_VALUES: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "job": {"region": ("global",), "node_pool": ("default", "all")},
    # Nomad's PeriodicConfig.Validate: "cron" (and its tests' "test")
    "periodic": {"spec_type": ("cron",)},
    "vault": {"cluster": ("default",)},
    "service": {"cluster": ("default",)},  # one Consul (Nomad Enterprise names others)
}

UNCLASSIFIED = (
    "refused: not implemented by fieldlab-agent (a client-side field it does not do is refused, never "
    "accepted and ignored)"
)


def server_side_warning(context: str, name: str) -> str | None:
    """The warning for a field that is the servers' or that Nomad ignores; None for a client-side one."""
    if (why := SERVER_SIDE.get(context, {}).get(name)) is not None:
        return f"a server-side decision, accepted and left to the servers: {why}"
    if (why := NOMAD_IGNORES.get(context, {}).get(name)) is not None:
        return f"ignored: {why}"
    return None


def field_refusal(context: str, name: str) -> str | None:
    """Why a client-side field the agent does not do is refused; None when it is not refused."""
    why = REFUSED.get(context, {}).get(name)
    return None if why is None else f"refused: fieldlab-agent does not {why}"


def value_refusal(context: str, name: str, value: object) -> str | None:
    """For a field accepted only with this node's values: why `value` is refused, "" when it is
    accepted (it is what this node is); None for a field without such values."""
    allowed = ONLY_VALUES.get(context, {}).get(name)
    if allowed is None:
        return None
    if isinstance(value, str) and value in allowed:
        return ""
    shown = " or ".join(f'"{a}"' for a in allowed)
    return f"{str(value)[:64]!r} is not served here: fieldlab-agent takes {shown} only"
