"""Every field of Nomad's jobspec is known to both front-ends: implemented, or accepted with a warning.

NOMAD below is copied by hand from Nomad's api/*.go structs (jobs.go, tasks.go, services.go, resources.go,
consul.go, constraint.go; Nomad 1.10/1.11): for each block the agent reads, each Go field name with its
HCL name (the `hcl:"..."` tag, as jobspec2 decodes it; "" for a field without one, only in the API JSON).
Blocks the agent accepts whole without reading them (WHOLESALE) need only their own key to be known in
their parent.
"""

from __future__ import annotations

import json

import pytest

from agent.jobspec import parse_jobspec
from agent.jobspec.api_json import hcl_name
from agent.jobspec.fieldclass import field_refusal, server_side_warning, value_refusal
from agent.jobspec.fields import API_ONLY, IMPLEMENTED, SERVER_SET, UNIMPLEMENTED, known

LABEL = "<label>"  # the block's label in HCL; a field of the object in the API JSON

NOMAD: dict[str, dict[str, str]] = {
    "job": {
        "Region": "region",
        "Namespace": "namespace",
        "ID": "id",
        "Name": "name",
        "Type": "type",
        "Priority": "priority",
        "AllAtOnce": "all_at_once",
        "Datacenters": "datacenters",
        "NodePool": "node_pool",
        "Constraints": "constraint",
        "Affinities": "affinity",
        "TaskGroups": "group",
        "Update": "update",
        "Multiregion": "multiregion",
        "Spreads": "spread",
        "Periodic": "periodic",
        "ParameterizedJob": "parameterized",
        "Reschedule": "reschedule",
        "Migrate": "migrate",
        "Meta": "meta",
        "ConsulToken": "consul_token",
        "VaultToken": "vault_token",
        "UI": "ui",
        "VersionTag": "version_tag",
        # set by the server, API JSON only
        "Stop": "",
        "ParentID": "",
        "Dispatched": "",
        "DispatchIdempotencyToken": "",
        "Payload": "",
        "ConsulNamespace": "",
        "VaultNamespace": "",
        "NomadTokenID": "",
        "Status": "",
        "StatusDescription": "",
        "Stable": "",
        "Version": "",
        "SubmitTime": "",
        "CreateIndex": "",
        "ModifyIndex": "",
        "JobModifyIndex": "",
    },
    "group": {
        "Name": LABEL,
        "Count": "count",
        "Constraints": "constraint",
        "Affinities": "affinity",
        "Tasks": "task",
        "Spreads": "spread",
        "Volumes": "volume",
        "RestartPolicy": "restart",
        "Disconnect": "disconnect",
        "ReschedulePolicy": "reschedule",
        "EphemeralDisk": "ephemeral_disk",
        "Update": "update",
        "Migrate": "migrate",
        "Networks": "network",
        "Meta": "meta",
        "Services": "service",
        "ShutdownDelay": "shutdown_delay",
        "MaxRunDuration": "max_run_duration",
        "StopAfterClientDisconnect": "stop_after_client_disconnect",
        "MaxClientDisconnect": "max_client_disconnect",
        "Scaling": "scaling",
        "Consul": "consul",
        "PreventRescheduleOnLost": "prevent_reschedule_on_lost",
    },
    "network": {
        "Mode": "mode",
        "Device": "device",
        "CIDR": "cidr",
        "IP": "ip",
        "DNS": "dns",
        "ReservedPorts": "reserved_ports",
        "DynamicPorts": "port",
        "Hostname": "hostname",
        "MBits": "mbits",
        "CNI": "cni",
    },
    "port": {
        "Label": LABEL,
        "Value": "static",
        "To": "to",
        "HostNetwork": "host_network",
        "IgnoreCollision": "ignore_collision",
    },
    "cni": {"Args": "args"},  # api.CNIConfig
    "dns": {"Servers": "servers", "Searches": "searches", "Options": "options"},  # api.DNSConfig
    "ephemeral_disk": {"Sticky": "sticky", "Migrate": "migrate", "SizeMB": "size"},  # api.EphemeralDisk
    "consul": {"Namespace": "namespace", "Cluster": "cluster", "Partition": "partition"},  # api.Consul
    "lifecycle": {"Hook": "hook", "Sidecar": "sidecar"},  # api.TaskLifecycle
    "update": {  # api.UpdateStrategy (api/jobs.go)
        "Stagger": "stagger",
        "MaxParallel": "max_parallel",
        "HealthCheck": "health_check",
        "MinHealthyTime": "min_healthy_time",
        "HealthyDeadline": "healthy_deadline",
        "ProgressDeadline": "progress_deadline",
        "Canary": "canary",
        "AutoRevert": "auto_revert",
        "AutoPromote": "auto_promote",
    },
    "reschedule": {  # api.ReschedulePolicy (api/tasks.go)
        "Attempts": "attempts",
        "Interval": "interval",
        "Delay": "delay",
        "DelayFunction": "delay_function",
        "MaxDelay": "max_delay",
        "Unlimited": "unlimited",
    },
    "scaling": {  # api.ScalingPolicy (api/scaling.go); the server's fields have no HCL name
        **{f: f.lower() for f in ("Min", "Max", "Policy", "Enabled", "Type")},
        **dict.fromkeys(("ID", "Namespace", "Target", "CreateIndex", "ModifyIndex"), ""),
    },
    "volume": {  # api.VolumeRequest
        "Name": LABEL,
        "Type": "type",
        "Source": "source",
        "ReadOnly": "read_only",
        "Sticky": "sticky",
        "AccessMode": "access_mode",
        "AttachmentMode": "attachment_mode",
        "MountOptions": "mount_options",
        "PerAlloc": "per_alloc",
    },
    "volume_mount": {  # api.VolumeMount
        "Volume": "volume",
        "Destination": "destination",
        "ReadOnly": "read_only",
        "PropagationMode": "propagation_mode",
        "SELinuxLabel": "selinux_label",
    },
    "artifact": {  # api.TaskArtifact
        "GetterSource": "source",
        "GetterOptions": "options",
        "GetterHeaders": "headers",
        "GetterMode": "mode",
        "GetterInsecure": "insecure",
        "RelativeDest": "destination",
        "Chown": "chown",
    },
    "logs": {  # api.LogConfig
        "MaxFiles": "max_files",
        "MaxFileSizeMB": "max_file_size",
        "Enabled": "enabled",
        "Disabled": "disabled",
    },
    "restart": {
        "Interval": "interval",
        "Attempts": "attempts",
        "Delay": "delay",
        "Mode": "mode",
        "RenderTemplates": "render_templates",
    },
    "task": {
        "Name": LABEL,
        "Driver": "driver",
        "User": "user",
        "Lifecycle": "lifecycle",
        "Config": "config",
        "Constraints": "constraint",
        "Affinities": "affinity",
        "Env": "env",
        "Services": "service",
        "Resources": "resources",
        "RestartPolicy": "restart",
        "Meta": "meta",
        "KillTimeout": "kill_timeout",
        "LogConfig": "logs",
        "Artifacts": "artifact",
        "Vault": "vault",
        "Consul": "consul",
        "Templates": "template",
        "DispatchPayload": "dispatch_payload",
        "VolumeMounts": "volume_mount",
        "CSIPluginConfig": "csi_plugin",
        "Leader": "leader",
        "ShutdownDelay": "shutdown_delay",
        "KillSignal": "kill_signal",
        "Kind": "kind",
        "ScalingPolicies": "scaling",
        "Secrets": "secret",
        "Identity": "",
        "Identities": "identity",
        "Actions": "action",
        "Schedule": "schedule",
    },
    "resources": {
        "CPU": "cpu",
        "Cores": "cores",
        "MemoryMB": "memory",
        "MemoryMaxMB": "memory_max",
        "DiskMB": "disk",
        "Networks": "network",
        "Devices": "device",
        "NUMA": "numa",
        "SecretsMB": "secrets",
        "IOPS": "iops",
    },
    "template": {
        "SourcePath": "source",
        "DestPath": "destination",
        "EmbeddedTmpl": "data",
        "ChangeMode": "change_mode",
        "ChangeScript": "change_script",
        "ChangeSignal": "change_signal",
        "Once": "once",
        "Splay": "splay",
        "Perms": "perms",
        "Uid": "uid",
        "Gid": "gid",
        "LeftDelim": "left_delimiter",
        "RightDelim": "right_delimiter",
        "Envvars": "env",
        "VaultGrace": "vault_grace",
        "Wait": "wait",
        "ErrMissingKey": "error_on_missing_key",
    },
    "change_script": {
        "Command": "command",
        "Args": "args",
        "Timeout": "timeout",
        "FailOnError": "fail_on_error",
        "RunOnFirstRender": "run_on_first_render",
    },
    "wait": {"Min": "min", "Max": "max"},
    "constraint": {"LTarget": "attribute", "RTarget": "value", "Operand": "operator"},
    "vault": {
        "Policies": "policies",
        "Role": "role",
        "Namespace": "namespace",
        "Cluster": "cluster",
        "Env": "env",
        "DisableFile": "disable_file",
        "ChangeMode": "change_mode",
        "ChangeSignal": "change_signal",
        "AllowTokenExpiration": "allow_token_expiration",
    },
    "service": {
        "Id": "",  # older Nomad; ignored
        "Name": "name",
        "Tags": "tags",
        "CanaryTags": "canary_tags",
        "EnableTagOverride": "enable_tag_override",
        "PortLabel": "port",
        "AddressMode": "address_mode",
        "Address": "address",
        "Checks": "check",
        "CheckRestart": "check_restart",
        "Connect": "connect",
        "Meta": "meta",
        "CanaryMeta": "canary_meta",
        "TaggedAddresses": "tagged_addresses",
        "TaskName": "task",
        "OnUpdate": "on_update",
        "Identity": "identity",
        "Weights": "weights",
        "Provider": "provider",
        "Cluster": "cluster",
        "Kind": "kind",
    },
    "check": {
        "Id": "",  # older Nomad; ignored
        "Name": "name",
        "Type": "type",
        "Command": "command",
        "Args": "args",
        "Path": "path",
        "Protocol": "protocol",
        "PortLabel": "port",
        "Expose": "expose",
        "AddressMode": "address_mode",
        "Advertise": "advertise",
        "Interval": "interval",
        "Timeout": "timeout",
        "InitialStatus": "initial_status",
        "Notes": "notes",
        "TLSServerName": "tls_server_name",
        "TLSSkipVerify": "tls_skip_verify",
        "Header": "header",
        "Method": "method",
        "CheckRestart": "check_restart",
        "GRPCService": "grpc_service",
        "GRPCUseTLS": "grpc_use_tls",
        "TaskName": "task",
        "SuccessBeforePassing": "success_before_passing",
        "FailuresBeforeCritical": "failures_before_critical",
        "FailuresBeforeWarning": "failures_before_warning",
        "Body": "body",
        "OnUpdate": "on_update",
    },
    "check_restart": {"Limit": "limit", "Grace": "grace", "IgnoreWarnings": "ignore_warnings"},
    # api.WorkloadIdentity (a task's; a service's is accepted whole, in the service's table)
    "identity": {
        "Name": "name",
        "Audience": "aud",
        "ChangeMode": "change_mode",
        "ChangeSignal": "change_signal",
        "Env": "env",
        "File": "file",
        "Filepath": "filepath",
        "ServiceName": "service_name",
        "TTL": "ttl",
        "ExtraClaims": "extra_claims",
    },
}

# jobspec2's extras at job level (types.config.go): a job-level vault block and tasks outside groups.
HCL_ONLY = {"job": {"vault", "task"}}

# Nomad structs inside blocks the agent accepts whole (one warning for the block): their parent's key.
WHOLESALE: dict[str, tuple[str, str]] = {
    "Affinity": ("job", "affinity"),
    "Spread": ("job", "spread"),
    "SpreadTarget": ("job", "spread"),
    "Multiregion": ("job", "multiregion"),
    "MultiregionStrategy": ("job", "multiregion"),
    "MultiregionRegion": ("job", "multiregion"),
    "MigrateStrategy": ("group", "migrate"),
    "DisconnectStrategy": ("group", "disconnect"),
    "TaskCSIPluginConfig": ("task", "csi_plugin"),
    "Secret": ("task", "secret"),
    "Action": ("task", "action"),
    "TaskSchedule": ("task", "schedule"),
    "RequestedDevice": ("resources", "device"),
    "NUMAResource": ("resources", "numa"),
    "ConsulConnect": ("service", "connect"),
    "ConsulSidecarService": ("service", "connect"),
    "SidecarTask": ("service", "connect"),
    "ConsulProxy": ("service", "connect"),
    "ConsulUpstream": ("service", "connect"),
    "ConsulMeshGateway": ("service", "connect"),
    "ConsulTransparentProxy": ("service", "connect"),
    "ConsulExposeConfig": ("service", "connect"),
    "ConsulExposePath": ("service", "connect"),
    "ConsulGateway": ("service", "connect"),
    "ConsulGatewayProxy": ("service", "connect"),
    "ConsulGatewayBindAddress": ("service", "connect"),
    "ConsulGatewayTLSConfig": ("service", "connect"),
    "ConsulGatewayTLSSDSConfig": ("service", "connect"),
    "ConsulHTTPHeaderModifiers": ("service", "connect"),
    "ConsulIngressConfigEntry": ("service", "connect"),
    "ConsulIngressListener": ("service", "connect"),
    "ConsulIngressService": ("service", "connect"),
    "ConsulTerminatingConfigEntry": ("service", "connect"),
    "ConsulLinkedService": ("service", "connect"),
    "ConsulMeshConfigEntry": ("service", "connect"),
}


def _fields() -> list[tuple[str, str, str]]:
    return [(ctx, go, hcl) for ctx, table in NOMAD.items() for go, hcl in table.items()]


def test_the_table_is_big_enough_to_mean_something() -> None:
    assert len(_fields()) >= 200
    assert set(NOMAD) <= set(IMPLEMENTED) and set(NOMAD) <= set(UNIMPLEMENTED)


@pytest.mark.parametrize(("context", "go", "hcl"), [f for f in _fields() if f[2] not in ("", LABEL)])
def test_every_hcl_field_is_known(context: str, go: str, hcl: str) -> None:
    assert hcl in known(context), f"{context}.{hcl} (Go {go}) is neither implemented nor accepted"


@pytest.mark.parametrize(("context", "go", "hcl"), [f for f in _fields() if f[2] != LABEL])
def test_every_api_field_is_known(context: str, go: str, hcl: str) -> None:
    if go in SERVER_SET.get(context, ()) or go in API_ONLY.get(context, ()):
        return
    if context == "job" and go == "ID":
        return  # the job's label
    assert hcl_name(context, go) in known(context), f"API {context}.{go} -> {hcl_name(context, go)}"


# sorted: a set's order changes with the hash seed, and pytest-xdist's workers must collect alike
@pytest.mark.parametrize(("context", "name"), [(c, n) for c, ns in HCL_ONLY.items() for n in sorted(ns)])
def test_hcl_only_fields_are_known(context: str, name: str) -> None:
    assert name in known(context)


@pytest.mark.parametrize("struct", sorted(WHOLESALE))
def test_blocks_accepted_whole_are_known_in_their_parent(struct: str) -> None:
    parent, key = WHOLESALE[struct]
    assert key in UNIMPLEMENTED[parent], f"{struct} sits in {parent}.{key}, which is not accepted"


def test_implemented_and_unimplemented_do_not_overlap() -> None:
    for context in IMPLEMENTED:
        assert not IMPLEMENTED[context] & UNIMPLEMENTED[context], context


# --- the API JSON front-end: each unimplemented field given a value warns once, nothing is refused ----------

_API_PATHS = {
    "job": "job.w",
    "group": "job.w.group.g",
    "network": "job.w.group.g.network",
    "port": "job.w.group.g.network.port.www",
    "restart": "job.w.group.g.restart",
    "task": "job.w.group.g.task.t",
    "resources": "job.w.group.g.task.t.resources",
    "template": "job.w.group.g.task.t.template[0]",
    "service": "job.w.group.g.service[0]",
    "check": "job.w.group.g.service[0].check[0]",
    "vault": "job.w.group.g.task.t.vault",
    "change_script": "job.w.group.g.task.t.template[0].change_script",
}


def _api_job(extra: dict[str, dict[str, object]]) -> str:
    check = {"Type": "tcp", "Interval": 10_000_000_000, "Timeout": 2_000_000_000, **extra.get("check", {})}
    service = {"PortLabel": "www", "Checks": [check], **extra.get("service", {})}
    script = {"Command": "/bin/true", **extra.get("change_script", {})}
    template = {
        "EmbeddedTmpl": "x",
        "DestPath": "local/x",
        "ChangeMode": "script",
        "ChangeScript": script,
        **extra.get("template", {}),
    }
    task = {
        "Name": "t",
        "Driver": "docker",
        "Config": {"image": "fieldlab/busybox:latest", "ports": ["www"]},
        "Resources": {"CPU": 100, "MemoryMB": 64, **extra.get("resources", {})},
        "Templates": [template],
        "Vault": {"Policies": ["p"], **extra.get("vault", {})},
        **extra.get("task", {}),
    }
    port = {"Label": "www", "To": 8080, **extra.get("port", {})}
    group = {
        "Name": "g",
        "Networks": [{"Mode": "bridge", "DynamicPorts": [port], **extra.get("network", {})}],
        "RestartPolicy": {"Attempts": 1, **extra.get("restart", {})},
        "Services": [service],
        "Tasks": [task],
        **extra.get("group", {}),
    }
    return json.dumps({"Job": {"ID": "w", "TaskGroups": [group], **extra.get("job", {})}})


def test_the_api_json_base_is_valid_without_warnings() -> None:
    assert parse_jobspec(_api_job({}), source="<t>").warnings == ()


@pytest.mark.parametrize("context", sorted(_API_PATHS))
def test_every_unimplemented_api_field_warns_once_with_its_path_and_its_kind(context: str) -> None:
    """As the HCL front-end (tests/test_jobspec.py): a server-side field warns saying so, a client-side
    one as not implemented; one taken only as this node's value is left to its own test there."""
    given: dict[str, object] = {
        go: "anything"
        for go, hcl in NOMAD[context].items()
        if hcl not in ("", LABEL)
        and hcl_name(context, go) in UNIMPLEMENTED[context]
        and value_refusal(context, hcl_name(context, go), "anything") is None
        and field_refusal(context, hcl_name(context, go)) is None  # test_jobspec_clientfields.py
    }
    parsed = parse_jobspec(_api_job({context: given}), source="<t>")
    names = sorted(hcl_name(context, go) for go in given)
    assert sorted(parsed.warnings) == sorted(
        f"{_API_PATHS[context]}.{n}: {server_side_warning(context, n)}" for n in names
    )


def test_server_set_fields_are_ignored_with_one_warning_per_object() -> None:
    text = _api_job(
        {
            "job": {"Status": "running", "Version": 3, "CreateIndex": 10, "Stop": False},
            "service": {"Id": "abc"},
            "check": {"Id": "def"},
        }
    )
    assert sorted(parse_jobspec(text, source="<t>").warnings) == sorted(
        [
            "job.w: set by the Nomad server, ignored by fieldlab-agent: CreateIndex, Status, Version",
            "job.w.group.g.service[0].check[0]: set by the Nomad server, ignored by fieldlab-agent: Id",
            "job.w.group.g.service[0]: set by the Nomad server, ignored by fieldlab-agent: Id",
        ]
    )
