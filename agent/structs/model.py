"""The agent's data model: what a job asks for (immutable specs) and what the agent keeps about it.

Specs are produced by `agent.jobspec` from HCL or JSON and never change after parsing. Durations
are seconds (float), sizes are MB, signals are names ("SIGHUP").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Constraint:
    """A `constraint` block, as Nomad's api.Constraint: `ltarget` (the jobspec's `attribute`) and
    `rtarget` (`value`) are node targets ("${attr.kernel.name}", "${meta.rack}", "${node.unique.name}")
    or literals; `operand` (`operator`) is one of agent.decide.placement.OPERANDS. Nomad's String() of it,
    what a placement failure names, is `str(constraint)`."""

    ltarget: str = ""
    rtarget: str = ""
    operand: str = "="

    def __str__(self) -> str:
        return f"{self.ltarget} {self.operand} {self.rtarget}"


@dataclass(frozen=True)
class Port:
    """A port of a group's network, as Nomad means it.

    - `label`: the name services, checks and the docker driver's `ports` refer to; Nomad allows any
      characters (a dash too): in environment variable names (NOMAD_PORT_<label>, NOMAD_HOST_PORT_<label>)
      every character other than a letter, digit, "_" or "." becomes "_", as Nomad's CleanEnvVar does;
    - `static`: the fixed host port; 0: the agent picks a dynamic host port;
    - `to`: the port the workload listens on, that the host port is mapped to. 0 (the jobspec's `to`
      left out, `to = 0` or `to = -1`) means "the same as the host port". In network mode "bridge" the
      host port is forwarded to `to` inside the alloc's network namespace. In mode "host" the docker driver
      still maps host port -> `to` (published ports) for a task that lists the label in its config's
      `ports`, as Nomad's docker driver does; an exec or raw_exec task in host mode gets no mapping: it
      must listen on the host port itself. NOMAD_PORT_<label> is `to` when set, else the host port.
    """

    label: str
    to: int = 0
    static: int = 0
    # the client host network it is bound on: "default" (its advertise address), or one of the
    # client's `host_network` blocks (config host_networks: the port's HostIP is its address there,
    # agent.node.hostnetworks); a name the node lacks fails placement (agent.decide.placement.refusals)
    host_network: str = "default"


@dataclass(frozen=True)
class Network:
    # "bridge" (CNI, own netns), "cni/<name>" (the client's conflist of that name, own netns), "host"
    # or "none"
    mode: str = "none"
    ports: tuple[Port, ...] = ()
    cni_args: tuple[tuple[str, str], ...] = ()  # `cni { args = {...} }`: CNI_ARGS (agent.network.base)
    # `hostname` and `dns { servers, searches, options }`: the pause container's (agent.drivers.base.Sandbox)
    hostname: str = ""
    dns_servers: tuple[str, ...] = ()
    dns_searches: tuple[str, ...] = ()
    dns_options: tuple[str, ...] = ()

    @property
    def group_netns(self) -> bool:
        """Whether the group has a netns of its own attached by CNI (bridge and cni/<name>)."""
        return self.mode == "bridge" or self.mode.startswith("cni/")

    @property
    def driver_mode(self) -> str:
        """The mode a task driver sees: "bridge" for any group netns (a cni/<name> one is joined as a
        bridge one is, Nomad's NetIsolationModeGroup), else the group's own."""
        return "bridge" if self.group_netns else self.mode


@dataclass(frozen=True)
class RestartPolicy:
    attempts: int = 2
    interval: float = 1800.0
    delay: float = 15.0
    mode: str = "fail"  # "fail" or "delay"
    render_templates: bool = False  # every template rendered anew before each restart (Nomad 1.6)


@dataclass(frozen=True)
class ChangeScript:
    command: str
    args: tuple[str, ...] = ()
    timeout: float = 5.0
    fail_on_error: bool = False
    # Nomad's RunOnFirstRender: the script runs once the task is first running after the first render
    # (its template's manager: a `once` template's never runs it, agent.templates.runner)
    run_on_first_render: bool = False


@dataclass(frozen=True)
class Template:
    destination: str  # relative to the task dir: "local/..." or "secrets/..."
    data: str = ""
    source: str = ""
    change_mode: str = "restart"  # "noop", "signal", "restart", "script"
    change_signal: str = ""
    change_script: ChangeScript | None = None
    perms: str = "0644"
    splay: float = 5.0
    wait_min: float = 0.0
    wait_max: float = 0.0
    error_on_missing_key: bool = False
    env: bool = False  # the rendered file (KEY=VALUE lines) is read into the task's environment
    left_delimiter: str = "{{"
    right_delimiter: str = "}}"
    once: bool = False  # rendered at the task's setup (and restore) only, never re-rendered on a change
    uid: int | None = None  # the rendered file's owner (Nomad's Uid; None: the agent's own)
    gid: int | None = None


@dataclass(frozen=True)
class CheckRestart:
    """A check's `check_restart` (its own, else its service's): the task is restarted once the
    check has been unhealthy for `limit` checks in a row (0: never), not within `grace` seconds of
    the task's start; warnings count as healthy with `ignore_warnings` (Consul's; Nomad's own
    checks have none)."""

    limit: int = 0
    grace: float = 1.0
    ignore_warnings: bool = False


@dataclass(frozen=True)
class Check:
    name: str
    type: str  # "http", "tcp", "script"
    path: str = ""
    interval: float = 10.0
    timeout: float = 2.0
    port: str = ""  # a port label of the group's network, or a port number ("8080"); "": the service's
    command: str = ""  # script checks: run inside the task
    args: tuple[str, ...] = ()
    task: str = ""  # a group-level script check: the task it runs in
    restart: CheckRestart | None = None  # check_restart (agent.runner.checks for provider "nomad")
    method: str = "GET"  # http checks
    address_mode: str = ""  # "" (host), "host" or "alloc" (agent.client.checktarget)
    # http checks: the scheme ("": http), headers (name -> values), body, TLS verification; grpc
    # checks (Consul's): the service asked about and TLS. Sent as Nomad sends them (agent.consul.catalog,
    # agent.runner.checks).
    protocol: str = ""
    header: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    body: str = ""
    tls_skip_verify: bool = False
    tls_server_name: str = ""  # Consul's checks only (Nomad's rule)
    grpc_service: str = ""
    grpc_use_tls: bool = False
    # Consul's check thresholds and first status (Consul counts them; Nomad refuses them for its own)
    initial_status: str = ""
    success_before_passing: int = 0
    failures_before_critical: int = 0
    failures_before_warning: int = 0
    # Nomad's on_update: "require_healthy", "ignore_warnings" (Consul's), "ignore" (a readiness check:
    # its failures hold back no deployment)
    on_update: str = "require_healthy"


@dataclass(frozen=True)
class Service:
    name: str
    port: str = ""  # a port label of the group's network, or a port number ("9001": advertised as it is)
    tags: tuple[str, ...] = ()
    checks: tuple[Check, ...] = ()
    provider: str = "consul"
    # Where the registration points (Nomad's GetAddress: "auto", "host", "alloc"; a custom `address`
    # with "auto" only), its tags and meta when the alloc is a canary, and Consul's own fields
    # (agent.consul.catalog.registrations; agent.runner.services for provider "nomad")
    address: str = ""
    address_mode: str = "auto"
    canary_tags: tuple[str, ...] = ()
    meta: Mapping[str, str] = field(default_factory=dict)
    canary_meta: Mapping[str, str] = field(default_factory=dict)
    enable_tag_override: bool = False
    tagged_addresses: Mapping[str, str] = field(default_factory=dict)
    weights: tuple[int, int] | None = None  # Consul's (passing, warning)
    kind: str = ""  # Consul's service kind
    on_update: str = "require_healthy"  # its checks' default


@dataclass(frozen=True)
class Resources:
    cpu: int = 100  # MHz shares, as Nomad: applied as cpu shares
    memory: int = 300  # MB, applied as a hard limit (the reservation when memory_max is set)
    # Nomad's MemoryMaxMB: the hard limit over `memory` (-1: none), as its docker driver and executor
    memory_max: int = 0
    secrets: int = 0  # Nomad's SecretsMB: the secrets/ tmpfs's size (0: the agent's default)


@dataclass(frozen=True)
class Vault:
    """A task's `vault` block: the policies its Vault token is limited to (Nomad's legacy token
    workflow), or a role; where the token goes and what a token change does to the task."""

    policies: tuple[str, ...] = ()
    role: str = ""
    change_mode: str = "restart"  # "noop", "signal", "restart"
    change_signal: str = ""
    env: bool = True  # VAULT_TOKEN in the task's environment
    file: bool = True  # secrets/vault_token
    # Nomad's AllowTokenExpiration: no renewal loop; the token expires and the task keeps running
    allow_token_expiration: bool = False


@dataclass(frozen=True)
class LogConfig:
    """A task's `logs` block (Nomad's LogConfig): its logmon keeps `max_files` files of each stream,
    each up to `max_file_size` MB; `disabled`: the output goes nowhere and no logmon runs."""

    max_files: int = 10
    max_file_size: int = 10  # MB
    disabled: bool = False


@dataclass(frozen=True)
class HostVolume:
    """A group's `volume "<alias>"` of type host (Nomad's VolumeRequest): the client's host volume
    `source`, read only when the request, the mount or the client's config says so."""

    alias: str
    source: str
    read_only: bool = False


@dataclass(frozen=True)
class VolumeMount:
    """A task's `volume_mount` (Nomad's VolumeMount): the group volume `volume` at `destination`."""

    volume: str
    destination: str
    read_only: bool = False
    propagation_mode: str = "private"


@dataclass(frozen=True)
class Artifact:
    """A task's `artifact` (Nomad's TaskArtifact): `source` fetched into `destination` (relative to
    the task dir) before the task's first start; `mode` any, file or dir; `options` go-getter's
    (checksum, archive) and the URL's query; `headers` sent with the request."""

    source: str
    destination: str = "local/"
    mode: str = "any"
    options: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    chown: bool = False  # what it wrote goes to the task's `user` (Nomad 1.7+)
    insecure: bool = False  # https without certificate checks (go-getter's Insecure)


@dataclass(frozen=True)
class WorkloadIdentity:
    """A task's `identity` block (Nomad's WorkloadIdentity): a JWT the agent signs for the task
    (agent.identity). The default one (name "default") is for Nomad itself (its audience is always
    "nomadproject.io"); `env`: NOMAD_TOKEN (NOMAD_TOKEN_<name> for another), `file`:
    secrets/nomad_token (secrets/nomad_<name>.jwt), or `filepath` in the task dir. `ttl` seconds (0:
    no expiry); a token is signed again before it expires and `change_mode` tells the task."""

    name: str = "default"
    audience: tuple[str, ...] = ("nomadproject.io",)
    env: bool = False
    file: bool = False
    filepath: str = ""
    ttl: float = 0.0
    change_mode: str = "noop"
    change_signal: str = ""


@dataclass(frozen=True)
class Lifecycle:
    """A task's `lifecycle` block (Nomad's TaskLifecycleConfig): `hook` prestart, poststart or
    poststop; `sidecar`: it runs beside the main tasks instead of running to completion."""

    hook: str
    sidecar: bool = False


@dataclass(frozen=True)
class Task:
    name: str
    driver: str  # "docker", "exec" or "raw_exec"
    config: Mapping[str, Any] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    resources: Resources = field(default_factory=Resources)
    kill_timeout: float = 5.0
    kill_signal: str = ""  # "": the driver's default (taskdecisions.plan_kill_signal)
    templates: tuple[Template, ...] = ()
    services: tuple[Service, ...] = ()
    user: str = ""  # the user the task runs as ("": the driver's default, nobody for exec)
    vault: Vault | None = None
    meta: Mapping[str, str] = field(default_factory=dict)  # NOMAD_META_<key>, over the group's and job's
    constraints: tuple[Constraint, ...] = ()  # its group is placed only on a node that meets them
    logs: LogConfig = field(default_factory=LogConfig)
    shutdown_delay: float = 0.0  # seconds between its services' deregistration and its kill signal
    lifecycle: Lifecycle | None = None  # None: a main task
    leader: bool = (
        False  # the group's leader: killed first at a stop (agent.decide.lifecycle.plan_kill_order)
    )
    volume_mounts: tuple[VolumeMount, ...] = ()
    artifacts: tuple[Artifact, ...] = ()
    identities: tuple[WorkloadIdentity, ...] = ()  # the default one first, when the job has it
    dispatch_payload: str = ""  # Nomad's DispatchPayloadConfig.File: under local/, a dispatch's payload
    # the task's own `restart` merged over its group's (Nomad's Task.Canonicalize); None: the group's
    restart: RestartPolicy | None = None


@dataclass(frozen=True)
class EphemeralDisk:
    """A group's `ephemeral_disk` (Nomad's EphemeralDisk): the alloc dir's size in MB, checked against
    the node; `sticky` or `migrate`: an alloc that replaces one of the group on this node takes over
    its `alloc/data` and each task's `local/`."""

    size: int = 300
    sticky: bool = False
    migrate: bool = False


@dataclass(frozen=True)
class UpdateStrategy:
    """A service or system group's `update` block over its job's (Nomad's UpdateStrategy, with its
    defaults): what the group's deployment waits for (agent.nomadapi.deploywatch). `max_parallel`
    0: no deployment; `health_check` "checks" or "task_states": healthy by task states, "manual":
    by the operator's word only (agent.jobspec.update says what one node does with each)."""

    max_parallel: int = 1
    stagger: float = 30.0
    health_check: str = "checks"
    min_healthy_time: float = 10.0
    healthy_deadline: float = 300.0
    progress_deadline: float = 600.0
    auto_revert: bool = False  # a failed deployment registers the job's newest stable version again
    canary: int = 0  # a new version's canaries: refused when it replaces allocs (agent.jobspec.update)
    auto_promote: bool = False


@dataclass(frozen=True)
class ReschedulePolicy:
    """A service or batch group's `reschedule` block over its job's (Nomad's ReschedulePolicy, its
    defaults per job type): whether and when a failed alloc is replaced (agent.decide.decisions
    .plan_reschedule). Durations in seconds; `delay_function` "constant", "exponential" or
    "fibonacci"; `attempts` in `interval` unless `unlimited`. Disabled when `attempts` is 0 and
    not `unlimited`."""

    attempts: int = 0
    interval: float = 0.0
    delay: float = 30.0
    delay_function: str = "exponential"
    max_delay: float = 3600.0
    unlimited: bool = True

    @property
    def enabled(self) -> bool:
        return self.attempts > 0 or self.unlimited


@dataclass(frozen=True)
class Scaling:
    """A group's `scaling` block (Nomad's ScalingPolicy of type "horizontal"): the bounds `nomad
    job scale` keeps the group's count within, and the Nomad Autoscaler's `policy`, kept as written
    (opaque to Nomad as to the agent). Served by `/v1/scaling/policies` (agent.nomadapi.deployments)."""

    min: int
    max: int
    enabled: bool = True
    policy: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Group:
    name: str
    tasks: tuple[Task, ...]
    count: int = 1
    network: Network | None = None
    restart: RestartPolicy = field(default_factory=RestartPolicy)
    services: tuple[Service, ...] = ()
    meta: Mapping[str, str] = field(default_factory=dict)
    constraints: tuple[Constraint, ...] = ()
    ephemeral_disk: EphemeralDisk = field(default_factory=EphemeralDisk)
    shutdown_delay: float = 0.0  # seconds at the alloc's stop between its services' deregistration and kills
    volumes: tuple[HostVolume, ...] = ()  # its host volumes (a csi one is warned about and left out)
    scaling: Scaling | None = None  # its `scaling` block
    update: UpdateStrategy | None = None  # a service or system group's (Nomad's defaults when none)
    # Nomad's ReschedulePolicy (a service or batch group's, its type's defaults when none is written);
    # None: a system or sysbatch job's, which Nomad never reschedules
    reschedule: ReschedulePolicy | None = None
    # Nomad's MaxRunDuration (batch, sysbatch): seconds after the alloc's creation it is stopped
    max_run_duration: float | None = None


@dataclass(frozen=True)
class Parameterized:
    """A job's `parameterized` block (Nomad's ParameterizedJobConfig): whether a dispatch carries a
    payload ("optional", "required", "forbidden") and the meta keys it must or may give."""

    payload: str = "optional"
    meta_required: tuple[str, ...] = ()
    meta_optional: tuple[str, ...] = ()


@dataclass(frozen=True)
class Periodic:
    """A job's `periodic` block (Nomad's PeriodicConfig): child jobs `<job>/periodic-<unix>` launched
    at each time one of its cron specs names, in `time_zone`; `prohibit_overlap`: not while a child
    still runs; `enabled` false: the job is kept and launches nothing. `spec` is `cron`, `specs`
    `crons` (one of them is set)."""

    spec: str = ""
    specs: tuple[str, ...] = ()
    time_zone: str = "UTC"
    prohibit_overlap: bool = False
    enabled: bool = True


@dataclass(frozen=True)
class Job:
    id: str
    groups: tuple[Group, ...]
    type: str = "service"
    meta: Mapping[str, str] = field(default_factory=dict)
    name: str = ""  # Nomad's display name ("": the ID)
    datacenters: tuple[str, ...] = ("*",)  # globs; the client runs the job only if its datacenter matches
    constraints: tuple[Constraint, ...] = ()  # every group's, besides its own and its tasks'
    # Nomad's ParameterizedJobConfig: a parent registered without allocs, run by `dispatch`
    parameterized: Parameterized | None = None
    parent_id: str = ""  # a dispatched child's parent job
    dispatched: bool = False  # a child made by a dispatch (Nomad's Job.Dispatched)
    payload: str = ""  # a dispatched child's payload, base64 (what its tasks' dispatch_payload write)
    dispatch_token: str = ""  # the dispatch's idempotency token (Nomad's DispatchIdempotencyToken)
    periodic: Periodic | None = None  # Nomad's PeriodicConfig: a parent launching child jobs on a schedule

    @property
    def parameterized_parent(self) -> bool:
        """Nomad's IsParameterized: a parent that places nothing itself."""
        return self.parameterized is not None and not self.dispatched

    @property
    def places_nothing(self) -> bool:
        """A parent of child jobs (parameterized, periodic): registered, it places no alloc itself."""
        return self.parameterized_parent or self.periodic is not None
