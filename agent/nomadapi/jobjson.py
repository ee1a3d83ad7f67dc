"""The agent's `Job` as Nomad's api.Job (api/jobs.go, api/tasks.go, api/services.go, api/resources.go), the
JSON `nomad job inspect` prints (the job list's stubs and summaries, and evaluations, are
agent.nomadapi.joblists). The Go encodings every view shares (durations and times in nanoseconds,
time.Time, os.FileMode) are agent.nomadapi.gojson.

Go writes every field of a struct: a nil pointer, slice or map as null, a zero value as itself. Where the
agent has no value for a field, the view writes the value Nomad's JSON jobspec reader (agent.jobspec.api_json)
takes as unset, so that the job read back from GET /v1/job/<id> and registered again is the same job, with
no warning about fields the user never wrote. That is null for Nomad's defaulted blocks the agent does not
implement (`Migrate`), where a Nomad server
would show its defaults; and "" for `Vault.Cluster`, where Nomad shows "default".
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from agent.nomadapi.gojson import nil_list, nil_map, ns, plain
from agent.structs.model import (
    Check,
    CheckRestart,
    Constraint,
    Group,
    Job,
    Network,
    ReschedulePolicy,
    RestartPolicy,
    Scaling,
    Service,
    Task,
    Template,
    UpdateStrategy,
    Vault,
    WorkloadIdentity,
)

DEFAULT_PRIORITY = 50  # api.JobDefaultPriority
HORIZONTAL = "horizontal"  # a group's scaling policy type (Nomad's ScalingPolicyTypeHorizontal)
_POLICY_IDS = uuid.UUID("6a5c1f0e-3b8e-4c61-9d2a-51f0c7e2a9b4")  # the namespace of scaling_policy_id
# A service name the jobspec reader (agent.jobspec.build) takes when it is written out: RFC 1123, as Nomad.
_RFC1123 = re.compile(r"^(?i:[a-z0-9]|[a-z0-9][a-z0-9-]{0,61}[a-z0-9])$")


def _constraints(constraints: Sequence[Constraint]) -> list[dict[str, str]] | None:
    """[]*api.Constraint (api/constraint.go), null when there is none."""
    return [{"LTarget": c.ltarget, "RTarget": c.rtarget, "Operand": c.operand} for c in constraints] or None


def job_json(
    job: Job,
    *,
    region: str,
    namespace: str,
    status: str,
    version: int,
    stable: bool,
    submit_time: float,
    create_index: int,
    modify_index: int,
    job_modify_index: int,
    node_pool: str = "default",
    stop: bool = False,
) -> dict[str, Any]:
    """api.Job (api/jobs.go: type Job struct), as `nomad job inspect` prints it inside {"Job": ...}.
    `submit_time` is a Unix time in seconds (SubmitTime: ns); `stop`: stopped (`job stop`, not purged)."""
    return {
        "Region": region,
        "Namespace": namespace,
        "ID": job.id,
        "Name": job.name or job.id,
        "Type": job.type,
        "Priority": DEFAULT_PRIORITY,
        "AllAtOnce": False,
        "Datacenters": list(job.datacenters),
        "NodePool": node_pool,
        "Constraints": _constraints(job.constraints),
        "Affinities": None,
        "TaskGroups": [_group(job, g, create_index, job_modify_index) for g in job.groups],
        "Update": None,
        "Multiregion": None,
        "Spreads": None,
        "Periodic": _periodic(job),
        "ParameterizedJob": _parameterized(job),
        "Reschedule": None,
        "Migrate": None,
        "Meta": nil_map(job.meta),
        "UI": None,
        "Stop": stop,
        "ParentID": job.parent_id,
        "Dispatched": job.dispatched,
        "DispatchIdempotencyToken": job.dispatch_token,
        "Payload": job.payload or None,  # []byte: base64, as Go encodes it
        "ConsulNamespace": "",
        "VaultNamespace": "",
        "NomadTokenID": "",
        # Nomad's state store: a registered parameterized or periodic parent is "running" (its children run)
        "Status": ("dead" if stop else "running") if job.places_nothing and status else status,
        "StatusDescription": "",
        "Stable": stable,
        "Version": version,
        "SubmitTime": ns(submit_time),
        "CreateIndex": create_index,
        "ModifyIndex": modify_index,
        "JobModifyIndex": job_modify_index,
        "VersionTag": None,
    }


def _parameterized(job: Job) -> dict[str, Any] | None:
    """api.ParameterizedJobConfig (api/jobs.go); a dispatched child keeps its parent's, as Nomad's."""
    p = job.parameterized
    if p is None:
        return None
    return {
        "Payload": p.payload,
        "MetaRequired": nil_list(p.meta_required),
        "MetaOptional": nil_list(p.meta_optional),
    }


def _periodic(job: Job) -> dict[str, Any] | None:
    """api.PeriodicConfig (api/jobs.go), as Nomad's server canonicalises it."""
    p = job.periodic
    if p is None:
        return None
    return {
        "Enabled": p.enabled,
        "Spec": p.spec,
        "Specs": nil_list(p.specs),
        "SpecType": "cron",
        "ProhibitOverlap": p.prohibit_overlap,
        "TimeZone": p.time_zone,
    }


# What Nomad's server sets on a job: null in a job that was parsed but not registered.
SERVER_SET = (
    "Status",
    "StatusDescription",
    "Stable",
    "Version",
    "SubmitTime",
    "CreateIndex",
    "ModifyIndex",
    "JobModifyIndex",
)


def parsed_job_json(job: Job, region: str = "global") -> dict[str, Any]:
    """A jobspec just parsed, as Nomad's api.Job before any register (`/v1/jobs/parse`, and what
    `job run` registers): the server's fields null, so a register reads none of them."""
    out = job_json(
        job,
        region=region,
        namespace="default",
        status="",
        version=0,
        stable=False,
        submit_time=0.0,
        create_index=0,
        modify_index=0,
        job_modify_index=0,
    )
    out.update(dict.fromkeys(SERVER_SET))
    return out


def scaling_policy_id(job_id: str, group: str) -> str:
    """A group's scaling policy ID: a UUID named by the job and group, so that it is the same at
    every version of the job and after an agent restart (Nomad's server keeps the ID it drew while
    the job has the policy; a job purged and registered again gets a new one there, the same here)."""
    return str(uuid.uuid5(_POLICY_IDS, f"{job_id}\x00{group}"))


def scaling_policy(
    job_id: str, group: str, s: Scaling, *, namespace: str = "default", create_index: int, modify_index: int
) -> dict[str, Any]:
    """A group's scaling policy as Nomad's server shows it (structs.ScalingPolicy: in the job's
    TaskGroups[].Scaling and at /v1/scaling/policy/:id); `create_index` 0: a job only parsed, with
    none of the server's fields yet (api.ScalingPolicy as /v1/jobs/parse answers it)."""
    registered = create_index > 0
    return {
        "ID": scaling_policy_id(job_id, group) if registered else "",
        "Type": HORIZONTAL,
        "Target": {"Namespace": namespace, "Job": job_id, "Group": group} if registered else None,
        "Policy": plain(s.policy) if s.policy else None,
        "Min": s.min,
        "Max": s.max,
        "Enabled": s.enabled,
        "CreateIndex": create_index,
        "ModifyIndex": modify_index,
    }


def _update(u: UpdateStrategy) -> dict[str, Any]:
    """api.UpdateStrategy of a group (its job's merged in, Nomad's defaults under both)."""
    return {
        "Stagger": ns(u.stagger),
        "MaxParallel": u.max_parallel,
        "HealthCheck": u.health_check,
        "MinHealthyTime": ns(u.min_healthy_time),
        "HealthyDeadline": ns(u.healthy_deadline),
        "ProgressDeadline": ns(u.progress_deadline),
        "Canary": u.canary,
        "AutoRevert": u.auto_revert,
        "AutoPromote": u.auto_promote,
    }


def _reschedule(r: ReschedulePolicy) -> dict[str, Any]:
    """api.ReschedulePolicy of a group (its job's merged in, the job type's defaults under both)."""
    return {
        "Attempts": r.attempts,
        "Interval": ns(r.interval),
        "Delay": ns(r.delay),
        "DelayFunction": r.delay_function,
        "MaxDelay": ns(r.max_delay),
        "Unlimited": r.unlimited,
    }


def scaling_stub(policy: Mapping[str, Any]) -> dict[str, Any]:
    """api.ScalingPolicyListStub of `scaling_policy`'s answer."""
    return {k: policy[k] for k in ("ID", "Enabled", "Type", "Target", "CreateIndex", "ModifyIndex")}


def _group(job: Job, g: Group, create_index: int = 0, modify_index: int = 0) -> dict[str, Any]:
    """api.TaskGroup (api/tasks.go)."""
    return {
        "Name": g.name,
        "Count": g.count,
        "Constraints": _constraints(g.constraints),
        "Affinities": None,
        "Tasks": [_task(job, g, t) for t in g.tasks],
        "Spreads": None,
        "Volumes": {
            v.alias: {
                "Name": v.alias,
                "Type": "host",
                "Source": v.source,
                "ReadOnly": v.read_only,
                "AccessMode": "",
                "AttachmentMode": "",
                "MountOptions": None,
                "PerAlloc": False,
                "Sticky": False,
            }
            for v in g.volumes
        }
        or None,
        "RestartPolicy": _restart(g.restart),
        "Disconnect": None,
        "ReschedulePolicy": _reschedule(g.reschedule) if g.reschedule is not None else None,
        "EphemeralDisk": {
            "Sticky": g.ephemeral_disk.sticky,
            "Migrate": g.ephemeral_disk.migrate,
            "SizeMB": g.ephemeral_disk.size,
        },
        "Update": _update(g.update) if g.update is not None else None,
        "Migrate": None,
        "Networks": [_network(g.network)] if g.network is not None else None,
        "Meta": nil_map(g.meta),
        "Services": [_service(s, _default_service_name(job, g)) for s in g.services] or None,
        "ShutdownDelay": ns(g.shutdown_delay) if g.shutdown_delay else None,
        "MaxRunDuration": ns(g.max_run_duration) if g.max_run_duration else None,
        "StopAfterClientDisconnect": None,
        "MaxClientDisconnect": None,
        "Scaling": (
            scaling_policy(job.id, g.name, g.scaling, create_index=create_index, modify_index=modify_index)
            if g.scaling is not None
            else None
        ),
        "Consul": None,
        "PreventRescheduleOnLost": None,
    }


def network_json(
    mode: str, reserved: list[dict[str, Any]], dynamic: list[dict[str, Any]], *, ip: str = ""
) -> dict[str, Any]:
    """api.NetworkResource (api/resources.go): static ports in ReservedPorts, dynamic ones in
    DynamicPorts."""
    return {
        "Mode": mode,
        "Device": "",
        "CIDR": "",
        "IP": ip,
        "DNS": None,
        "ReservedPorts": reserved or None,
        "DynamicPorts": dynamic or None,
        "Hostname": "",
        "MBits": None,
        "CNI": None,
    }


def port_json(label: str, value: int, to: int, host_network: str = "default") -> dict[str, Any]:
    """api.Port (api/resources.go): `value` is the host port (0: a dynamic port not assigned yet)."""
    return {"Label": label, "Value": value, "To": to, "HostNetwork": host_network, "IgnoreCollision": False}


def _network(net: Network) -> dict[str, Any]:
    reserved = [port_json(p.label, p.static, p.to, p.host_network) for p in net.ports if p.static]
    dynamic = [port_json(p.label, 0, p.to, p.host_network) for p in net.ports if not p.static]
    out = network_json(net.mode, reserved, dynamic)
    out["Hostname"] = net.hostname
    if net.dns_servers or net.dns_searches or net.dns_options:  # api.DNSConfig: nil lists as null
        out["DNS"] = {
            "Servers": list(net.dns_servers) or None,
            "Searches": list(net.dns_searches) or None,
            "Options": list(net.dns_options) or None,
        }
    if net.cni_args:
        out["CNI"] = {"Args": dict(net.cni_args)}
    return out


def _default_service_name(job: Job, g: Group, t: Task | None = None) -> str:
    return f"{job.id}-{g.name}-{t.name}" if t is not None else f"{job.id}-{g.name}"


def _task(job: Job, g: Group, t: Task) -> dict[str, Any]:
    """api.Task (api/tasks.go); `CSIPluginConfig` is `omitempty` and nil: left out."""
    return {
        "Name": t.name,
        "Driver": t.driver,
        "User": t.user,
        "Lifecycle": (
            {"Hook": t.lifecycle.hook, "Sidecar": t.lifecycle.sidecar} if t.lifecycle is not None else None
        ),
        "Config": plain(t.config),
        "Constraints": _constraints(t.constraints),
        "Affinities": None,
        "Env": nil_map(t.env),
        "Services": [_service(s, _default_service_name(job, g, t)) for s in t.services] or None,
        "Resources": resources(
            t.resources.cpu,
            t.resources.memory,
            memory_max=t.resources.memory_max,
            secrets=t.resources.secrets,
        ),
        "RestartPolicy": _restart(t.restart) if t.restart is not None else None,
        "Meta": nil_map(t.meta),
        "KillTimeout": ns(t.kill_timeout),
        "LogConfig": {
            "MaxFiles": t.logs.max_files,
            "MaxFileSizeMB": t.logs.max_file_size,
            "Enabled": None,
            "Disabled": t.logs.disabled,
        },
        "Artifacts": [
            {
                "GetterSource": a.source,
                "GetterOptions": nil_map(a.options),
                "GetterHeaders": nil_map(a.headers),
                "GetterMode": a.mode,
                "GetterInsecure": a.insecure,
                "RelativeDest": a.destination,
                "Chown": a.chown,
            }
            for a in t.artifacts
        ]
        or None,
        "Vault": _vault(t.vault) if t.vault is not None else None,
        "Consul": None,
        "Templates": [_template(x) for x in t.templates] or None,
        "DispatchPayload": {"File": t.dispatch_payload} if t.dispatch_payload else None,
        "VolumeMounts": [
            {
                "Volume": m.volume,
                "Destination": m.destination,
                "ReadOnly": m.read_only,
                "PropagationMode": m.propagation_mode,
                "SELinuxLabel": "",
            }
            for m in t.volume_mounts
        ]
        or None,
        "Leader": t.leader,
        "ShutdownDelay": ns(t.shutdown_delay),
        "KillSignal": t.kill_signal,
        "Kind": "",
        "ScalingPolicies": None,
        "Secrets": None,
        "Identity": next((_identity(w) for w in t.identities if w.name == "default"), None),
        "Identities": [_identity(w) for w in t.identities if w.name != "default"] or None,
        "Actions": None,
        "Schedule": None,
    }


def _identity(w: WorkloadIdentity) -> dict[str, Any]:
    """api.WorkloadIdentity (api/tasks.go)."""
    return {
        "Name": w.name,
        "Audience": list(w.audience),
        "ChangeMode": w.change_mode,
        "ChangeSignal": w.change_signal,
        "Env": w.env,
        "File": w.file,
        "Filepath": w.filepath,
        "ServiceName": "",
        "TTL": ns(w.ttl),
        "ExtraClaims": None,
    }


def resources(
    cpu: int,
    memory: int,
    *,
    disk: int = 0,
    networks: list[dict[str, Any]] | None = None,
    memory_max: int = 0,
    secrets: int = 0,
) -> dict[str, Any]:
    """api.Resources (api/resources.go), the zero values of what the agent does not reserve."""
    return {
        "CPU": cpu,
        "Cores": 0,
        "MemoryMB": memory,
        "MemoryMaxMB": memory_max,
        "DiskMB": disk,
        "Networks": networks,
        "Devices": None,
        "NUMA": None,
        "SecretsMB": secrets,
        "IOPS": 0,
    }


def _service(s: Service, default_name: str) -> dict[str, Any]:
    """api.Service (api/services.go). A service left unnamed in the jobspec got the default name
    (job-group[-task]), which is written as Nomad shows it, unless it is not an RFC 1123 name (a job
    ID with "_"): the jobspec reader refuses such a name written out, so it is written unset ("")
    and read back as the same default."""
    unset = s.name == default_name and not _RFC1123.match(s.name)
    return {
        "Name": "" if unset else s.name,
        "Tags": nil_list(s.tags),
        "CanaryTags": nil_list(s.canary_tags),
        "EnableTagOverride": s.enable_tag_override,
        "PortLabel": s.port,
        "AddressMode": s.address_mode,
        "Address": s.address,
        "Checks": [_check(c) for c in s.checks] or None,
        "CheckRestart": None,
        "Connect": None,
        "Meta": dict(s.meta) or None,
        "CanaryMeta": dict(s.canary_meta) or None,
        "TaggedAddresses": dict(s.tagged_addresses) or None,
        "TaskName": "",
        "OnUpdate": s.on_update,
        "Identity": None,
        "Weights": {"Passing": s.weights[0], "Warning": s.weights[1]} if s.weights else None,
        "Provider": s.provider,
        "Cluster": "",
        "Kind": s.kind,
    }


def _check_restart(r: CheckRestart | None) -> dict[str, Any] | None:
    """api.CheckRestart."""
    if r is None:
        return None
    return {"Limit": r.limit, "Grace": ns(r.grace), "IgnoreWarnings": r.ignore_warnings}


def _check(c: Check) -> dict[str, Any]:
    """api.ServiceCheck (api/services.go)."""
    return {
        "Name": c.name,
        "Type": c.type,
        "Command": c.command,
        "Args": nil_list(c.args),
        "Path": c.path,
        "Protocol": c.protocol,
        "PortLabel": c.port,
        "Expose": False,
        "AddressMode": c.address_mode,
        "Advertise": "",
        "Interval": ns(c.interval),
        "Timeout": ns(c.timeout),
        "InitialStatus": c.initial_status,
        "Notes": "",
        "TLSServerName": c.tls_server_name,
        "TLSSkipVerify": c.tls_skip_verify,
        "Header": {k: list(v) for k, v in c.header.items()} or None,
        "Method": c.method if c.type == "http" else "",
        "CheckRestart": _check_restart(c.restart),
        "GRPCService": c.grpc_service,
        "GRPCUseTLS": c.grpc_use_tls,
        "TaskName": c.task,
        "SuccessBeforePassing": c.success_before_passing,
        "FailuresBeforeCritical": c.failures_before_critical,
        "FailuresBeforeWarning": c.failures_before_warning,
        "Body": c.body,
        "OnUpdate": c.on_update,
    }


def _restart(r: RestartPolicy) -> dict[str, Any]:
    """api.RestartPolicy of a group, or of a task with its own (merged over its group's; null for a
    task without one, which the JSON reader takes as the group's, as Nomad's client does)."""
    return {
        "Interval": ns(r.interval),
        "Attempts": r.attempts,
        "Delay": ns(r.delay),
        "Mode": r.mode,
        "RenderTemplates": r.render_templates,
    }


def _template(t: Template) -> dict[str, Any]:
    """api.Template (api/tasks.go), with api.ChangeScript and api.WaitConfig."""
    script = t.change_script
    wait = t.wait_min or t.wait_max
    return {
        "SourcePath": t.source,
        "DestPath": t.destination,
        "EmbeddedTmpl": t.data,
        "ChangeMode": t.change_mode,
        "ChangeScript": None
        if script is None
        else {
            "Command": script.command,
            "Args": list(script.args),
            "Timeout": ns(script.timeout),
            "FailOnError": script.fail_on_error,
            "RunOnFirstRender": script.run_on_first_render,
        },
        "ChangeSignal": t.change_signal,
        "Once": t.once,
        "Splay": ns(t.splay),
        "Perms": t.perms,
        "Uid": t.uid,
        "Gid": t.gid,
        "LeftDelim": t.left_delimiter,
        "RightDelim": t.right_delimiter,
        "Envvars": t.env,
        "VaultGrace": 0,
        "Wait": {"Min": ns(t.wait_min), "Max": ns(t.wait_max)} if wait else None,
        "ErrMissingKey": t.error_on_missing_key,
    }


def _vault(v: Vault) -> dict[str, Any]:
    """api.Vault (api/tasks.go)."""
    return {
        "Policies": list(v.policies),
        "Role": v.role,
        "Namespace": "",
        "Cluster": "",
        "Env": v.env,
        "DisableFile": not v.file,
        "ChangeMode": v.change_mode,
        "ChangeSignal": v.change_signal,
        "AllowTokenExpiration": v.allow_token_expiration,
    }
