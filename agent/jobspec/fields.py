"""Which jobspec fields fieldlab-agent implements, and which Nomad fields it accepts without implementing.

One table each, keyed by the block a field sits in. A field in IMPLEMENTED is read and validated; a field in
UNIMPLEMENTED is Nomad's, accepted, and produces one warning naming its path; anything else is not a
Nomad jobspec field and is rejected. Names are HCL's (Nomad's `hcl:"..."` struct tags in api/*.go); the API
JSON front-end maps its names onto these (`API_RENAMES`, else snake_case of the Go field name).

A block the agent does not implement (`affinity`, `update`, `lifecycle`, ...) is accepted whole with
one warning: its own fields are not looked at, so no table describes them.

SERVER_SET lists API JSON fields that the Nomad server sets (indexes, status, versions), or that Nomad
ignores (`Id` on services and checks): a job taken from `nomad job inspect` carries them; they are ignored,
with one warning per object naming them. API_ONLY lists API JSON fields without an HCL name that the agent
does not implement (a warning, as UNIMPLEMENTED).
"""

from __future__ import annotations

from collections.abc import Mapping

IMPLEMENTED: Mapping[str, frozenset[str]] = {
    # `id` overrides the job's label as its ID; `task` directly in a job is a group of its own, named after
    # the task; `vault` is the default of every task without one (both as Nomad's HCL2 jobspec)
    "job": frozenset(
        {
            "type",
            "meta",
            "group",
            "id",
            "task",
            "vault",
            "name",
            "datacenters",
            "constraint",
            "update",  # merged into each group's (agent.jobspec.update)
            "reschedule",  # merged into each group's (agent.jobspec.reschedule)
            "namespace",  # "default" only (agent.jobspec.jobtypes)
            "parameterized",
            "periodic",
            "vault_namespace",  # refused when set, as Nomad CE (agent.jobspec.clientfields)
        }
    ),
    # Nomad's ParameterizedJobConfig and a task's DispatchPayloadConfig (agent.jobspec.jobtypes)
    "parameterized": frozenset({"payload", "meta_required", "meta_optional"}),
    "dispatch_payload": frozenset({"file"}),
    # Nomad's ReschedulePolicy: a failed alloc replaced on this node (agent.jobspec.reschedule)
    "reschedule": frozenset({"attempts", "interval", "delay", "delay_function", "max_delay", "unlimited"}),
    # Nomad's PeriodicConfig: child jobs launched on a schedule (agent.nomadapi.jobperiodic)
    "periodic": frozenset({"cron", "crons", "time_zone", "prohibit_overlap", "enabled"}),
    "group": frozenset(
        {
            "count",
            "network",
            "restart",
            "task",
            "service",
            "meta",
            "constraint",
            "ephemeral_disk",
            "shutdown_delay",
            "volume",
            "scaling",
            "update",
            "reschedule",
            "vault",  # HCL2: the default of each task without one (as the job's)
            "consul",  # Nomad CE's: the default cluster, namespace and partition (agent.jobspec.clientfields)
            "max_run_duration",  # batch and sysbatch: the alloc stopped past it (agent.runner)
        }
    ),
    # Nomad's Consul block of a group: what Nomad CE takes (agent.jobspec.clientfields)
    "consul": frozenset({"namespace", "cluster", "partition"}),
    # Nomad's UpdateStrategy: what a service group's deployment waits for (agent.jobspec.update)
    "update": frozenset(
        {
            "max_parallel",
            "stagger",
            "health_check",
            "min_healthy_time",
            "healthy_deadline",
            "progress_deadline",
            "auto_revert",
            "canary",  # a new version's canaries (agent.jobspec.update)
            "auto_promote",
        }
    ),
    # Nomad's ScalingPolicy of a group (horizontal): the bounds of `nomad job scale`, the Autoscaler's
    # opaque `policy` (agent.jobspec.scaling)
    "scaling": frozenset({"min", "max", "enabled", "policy", "type"}),
    # Nomad's VolumeRequest: a host volume of the client (`host_volumes` in its config)
    "volume": frozenset(
        {"type", "source", "read_only", "per_alloc", "access_mode", "attachment_mode", "mount_options"}
    ),
    # Nomad's VolumeMount: where a task sees a group volume
    "volume_mount": frozenset({"volume", "destination", "read_only", "propagation_mode", "selinux_label"}),
    # Nomad's TaskArtifact: fetched into the task dir before its first start (agent.getter)
    "artifact": frozenset({"source", "destination", "mode", "options", "headers", "chown", "insecure"}),
    # Nomad's WorkloadIdentity: a JWT the agent signs for the task (agent.identity)
    "identity": frozenset(
        {"name", "aud", "env", "file", "filepath", "ttl", "change_mode", "change_signal", "extra_claims"}
    ),
    # Nomad's EphemeralDisk: the alloc dir's size, and whether a replacement on this node takes over
    # the data of the alloc it replaces (sticky; migrate: from another node too, here the same)
    "ephemeral_disk": frozenset({"size", "sticky", "migrate"}),
    # `reserved_ports` is Nomad's other spelling of a port block (static ports)
    # `cni { args }`: CNI_ARGS of a bridge or cni/<name> network (agent.network.base.plan_cni_args)
    # hostname and dns: the docker pause container's (agent.drivers.base.Sandbox)
    "network": frozenset({"mode", "port", "reserved_ports", "cni", "hostname", "dns"}),
    "cni": frozenset({"args"}),
    "dns": frozenset({"servers", "searches", "options"}),
    # host_network: "default" or a host network of the client's config (agent.node.hostnetworks: placed
    # on its address there, the port's HostIP; another name fails placement); ignore_collision: false only
    "port": frozenset({"to", "static", "host_network", "ignore_collision"}),
    "restart": frozenset({"attempts", "interval", "delay", "mode", "render_templates"}),
    "task": frozenset(
        {
            "driver",
            "config",
            "env",
            "resources",
            "kill_timeout",
            "kill_signal",
            "template",
            "service",
            "user",
            "meta",
            "vault",
            "constraint",
            "logs",
            "shutdown_delay",
            "lifecycle",
            "volume_mount",
            "artifact",
            "leader",
            "identity",
            "dispatch_payload",
            "restart",  # over the group's (Nomad's Task.Canonicalize)
            "consul",  # as the group's (agent.jobspec.clientfields)
        }
    ),
    # Nomad's TaskLifecycleConfig: the task's place in the alloc's order (agent.decide.lifecycle)
    "lifecycle": frozenset({"hook", "sidecar"}),
    # Nomad's LogConfig: rotation of alloc/logs/<task>.<stream>.N by the task's logmon
    "logs": frozenset({"max_files", "max_file_size", "disabled"}),
    # attribute/value/operator and jobspec2's shorthands (agent.jobspec.constraints)
    "constraint": frozenset(
        {
            "attribute",
            "value",
            "operator",
            "version",
            "semver",
            "regexp",
            "set_contains",
            "set_contains_all",
            "set_contains_any",
            "is_set",
            "is_not_set",
            "distinct_hosts",
            "distinct_property",
        }
    ),
    "vault": frozenset(
        {
            "policies",
            "role",
            "change_mode",
            "change_signal",
            "env",
            "disable_file",
            "allow_token_expiration",
            "namespace",  # refused when set, as Nomad CE (agent.jobspec.clientfields)
        }
    ),
    # a task's `network` is deprecated in Nomad: its ports join the group's network
    # cores: refused above 0 (agent.jobspec.clientfields); memory_max, secrets as Nomad's client
    "resources": frozenset({"cpu", "memory", "network", "cores", "memory_max", "secrets"}),
    "template": frozenset(
        {
            "data",
            "source",
            "destination",
            "perms",
            "change_mode",
            "change_signal",
            "change_script",
            "splay",
            "wait",
            "error_on_missing_key",
            "env",
            "left_delimiter",
            "right_delimiter",
            "once",
            "uid",
            "gid",
        }
    ),
    "change_script": frozenset({"command", "args", "timeout", "fail_on_error", "run_on_first_render"}),
    "wait": frozenset({"min", "max"}),
    # a group service's `task`: its checks' default (script checks run there: agent.runner.checks_script)
    # Nomad's Service: where its registration points, canary tags and meta, Consul's own fields
    # (agent.jobspec.serviceopts; sent by agent.consul.catalog, listed by agent.runner.services)
    "service": frozenset(
        {
            "name",
            "port",
            "tags",
            "provider",
            "check",
            "check_restart",
            "task",
            "address",
            "address_mode",
            "canary_meta",
            "canary_tags",
            "enable_tag_override",
            "kind",
            "meta",
            "on_update",
            "tagged_addresses",
            "weights",
        }
    ),
    "check": frozenset(
        {
            "name",
            "type",
            "path",
            "interval",
            "timeout",
            "port",
            "command",
            "args",
            "task",
            "check_restart",
            "method",
            "address_mode",
            # agent.jobspec.serviceopts: run by agent.runner.checks, sent to Consul by agent.consul.catalog
            "body",
            "expose",
            "failures_before_critical",
            "failures_before_warning",
            "grpc_service",
            "grpc_use_tls",
            "header",
            "initial_status",
            "on_update",
            "protocol",
            "success_before_passing",
            "tls_server_name",
            "tls_skip_verify",
        }
    ),
    "check_restart": frozenset({"limit", "grace", "ignore_warnings"}),
    # Every option of Nomad's docker driver (drivers/docker/config.go): each is honoured or refused at
    # submission with the reason by the client (agent.drivers.dockeropts; docs/drivers.md)
    "config.docker": frozenset(
        {
            "image",
            "command",
            "args",
            "ports",
            "advertise_ipv6_address",
            "auth",
            "auth_soft_fail",
            "cap_add",
            "cap_drop",
            "cgroupns",
            "container_exists_attempts",
            "cpu_cfs_period",
            "cpu_hard_limit",
            "devices",
            "dns_options",
            "dns_search_domains",
            "dns_servers",
            "entrypoint",
            "extra_hosts",
            "force_pull",
            "group_add",
            "healthchecks",
            "hostname",
            "image_pull_timeout",
            "init",
            "interactive",
            "ipc_mode",
            "ipv4_address",
            "ipv6_address",
            "isolation",
            "labels",
            "load",
            "logging",
            "mac_address",
            "memory_hard_limit",
            "mount",
            "mounts",
            "network_aliases",
            "network_mode",
            "oom_score_adj",
            "pid_mode",
            "pids_limit",
            "platform",
            "port_map",
            "privileged",
            "readonly_rootfs",
            "runtime",
            "security_opt",
            "shm_size",
            "storage_opt",
            "sysctl",
            "tty",
            "ulimit",
            "userns_mode",
            "uts_mode",
            "volume_driver",
            "volumes",
            "work_dir",
        }
    ),
    # Nomad's exec and raw_exec TaskConfig: each honoured or refused by the client with the reason
    # (agent.drivers.execopts; docs/drivers.md)
    "config.exec": frozenset(
        {
            "command",
            "args",
            "work_dir",
            "cap_add",
            "cap_drop",
            "pid_mode",
            "ipc_mode",
            "cgroup_v1_override",
            "cgroup_v2_override",
            "oom_score_adj",
        }
    ),
    "config.raw_exec": frozenset(
        {
            "command",
            "args",
            "work_dir",
            "oom_score_adj",
            "denied_envvars",
            "cgroup_v1_override",
            "cgroup_v2_override",
        }
    ),
    "request": frozenset({"job"}),
}

UNIMPLEMENTED: Mapping[str, frozenset[str]] = {
    "job": frozenset(
        {
            "all_at_once",
            "affinity",
            "consul_namespace",
            "consul_token",
            "migrate",
            "multiregion",
            "node_pool",
            "priority",
            "region",
            "spread",
            "ui",
            "vault_token",
            "version_tag",
        }
    ),
    "group": frozenset(
        {
            "affinity",
            "disconnect",
            "max_client_disconnect",
            "migrate",
            "prevent_reschedule_on_lost",
            "spread",
            "stop_after_client_disconnect",
        }
    ),
    "volume": frozenset({"sticky"}),
    "volume_mount": frozenset(),
    "artifact": frozenset(),
    "identity": frozenset({"service_name"}),
    "network": frozenset({"cidr", "device", "ip", "mbits"}),
    "cni": frozenset(),
    "dns": frozenset(),
    "port": frozenset(),
    "restart": frozenset(),
    "logs": frozenset({"enabled"}),  # Nomad's pre-1.5.4 spelling: its API drops it (fieldclass)
    "lifecycle": frozenset(),
    "parameterized": frozenset(),
    "dispatch_payload": frozenset(),
    "periodic": frozenset({"spec_type"}),  # "cron" is Nomad's only one outside its tests: unset
    "scaling": frozenset(),
    "update": frozenset(),
    "reschedule": frozenset(),
    "ephemeral_disk": frozenset(),
    "constraint": frozenset(),
    "task": frozenset(
        {
            "action",
            "affinity",
            "csi_plugin",
            "kind",
            "scaling",
            "schedule",
            "secret",
        }
    ),
    "resources": frozenset({"device", "disk", "iops", "numa"}),
    "template": frozenset({"vault_grace"}),
    "vault": frozenset({"cluster"}),
    "consul": frozenset(),
    "change_script": frozenset(),
    "wait": frozenset(),
    "check_restart": frozenset(),
    # cluster: "default" only; connect and identity refused (agent.jobspec.fieldclass)
    "service": frozenset({"cluster", "connect", "identity"}),
    "check": frozenset({"advertise", "notes"}),  # Nomad ignores both (agent.jobspec.fieldclass)
    # as Nomad's driver: accepted, no effect ("cpuset_cpus is no longer supported" in its log: fieldclass)
    "config.docker": frozenset({"cpuset_cpus"}),
    "config.exec": frozenset(),  # all honoured or refused (agent.drivers.execopts)
    "config.raw_exec": frozenset(),
    # the envelope of POST /v1/jobs around "Job"
    "request": frozenset(
        {
            "enforce_index",
            "eval_priority",
            "idempotency_token",
            "job_modify_index",
            "namespace",
            "policy_override",
            "preserve_counts",
            "region",
            "secret_id",
            "submission",
        }
    ),
}

# API JSON names (as Nomad's Go structs spell them) whose HCL name is not their snake_case spelling.
API_RENAMES: Mapping[str, Mapping[str, str]] = {
    "job": {
        "TaskGroups": "group",
        "Constraints": "constraint",
        "Affinities": "affinity",
        "Spreads": "spread",
        "ParameterizedJob": "parameterized",
    },
    "periodic": {"Spec": "cron", "Specs": "crons"},
    "group": {
        "Tasks": "task",
        "Networks": "network",
        "Services": "service",
        "RestartPolicy": "restart",
        "ReschedulePolicy": "reschedule",
        "Constraints": "constraint",
        "Affinities": "affinity",
        "Spreads": "spread",
        "Volumes": "volume",
    },
    # both lists of Port: `port` blocks, with or without `static`, as the HCL jobspec writes them
    "network": {"DynamicPorts": "port", "ReservedPorts": "port", "MBits": "mbits"},
    "port": {"Value": "static"},
    "task": {
        "Templates": "template",
        "Services": "service",
        "Artifacts": "artifact",
        "LogConfig": "logs",
        "RestartPolicy": "restart",
        "Constraints": "constraint",
        "Affinities": "affinity",
        "VolumeMounts": "volume_mount",
        "CSIPluginConfig": "csi_plugin",
        "ScalingPolicies": "scaling",
        "Secrets": "secret",
        "Identities": "identity",
        "Identity": "identity",
        "Actions": "action",
    },
    "resources": {
        "MemoryMB": "memory",
        "MemoryMaxMB": "memory_max",
        "DiskMB": "disk",
        "SecretsMB": "secrets",
        "Networks": "network",
        "Devices": "device",
    },
    "template": {
        "SourcePath": "source",
        "DestPath": "destination",
        "EmbeddedTmpl": "data",
        "LeftDelim": "left_delimiter",
        "RightDelim": "right_delimiter",
        "Envvars": "env",
        "ErrMissingKey": "error_on_missing_key",
    },
    "service": {"PortLabel": "port", "Checks": "check", "TaskName": "task"},
    "check": {"PortLabel": "port", "TaskName": "task"},
    "constraint": {"LTarget": "attribute", "RTarget": "value", "Operand": "operator"},
    "logs": {"MaxFileSizeMB": "max_file_size"},
    "ephemeral_disk": {"SizeMB": "size"},
    "volume_mount": {"SELinuxLabel": "selinux_label"},
    "identity": {"Audience": "aud", "TTL": "ttl"},
    "artifact": {
        "GetterSource": "source",
        "GetterOptions": "options",
        "GetterHeaders": "headers",
        "GetterMode": "mode",
        "GetterInsecure": "insecure",
        "RelativeDest": "destination",
    },
}

# API JSON fields the Nomad server sets or ignores: ignored, with one warning per object naming them.
SERVER_SET: Mapping[str, frozenset[str]] = {
    "job": frozenset(
        {
            "CreateIndex",
            "DispatchIdempotencyToken",
            "Dispatched",
            "JobModifyIndex",
            "ModifyIndex",
            "NomadTokenID",
            "ParentID",
            "Payload",
            "Stable",
            "Status",
            "StatusDescription",
            "Stop",
            "SubmitTime",
            "Version",
        }
    ),
    # a group's ScalingPolicy as the server shows it (agent.nomadapi.deployments makes these)
    "scaling": frozenset({"ID", "Namespace", "Target", "CreateIndex", "ModifyIndex"}),
    "service": frozenset({"Id"}),
    "check": frozenset({"Id"}),
}

# API JSON fields without an HCL name, not implemented: one warning each.
API_ONLY: Mapping[str, frozenset[str]] = {}


def known(context: str) -> frozenset[str]:
    return IMPLEMENTED[context] | UNIMPLEMENTED[context]
