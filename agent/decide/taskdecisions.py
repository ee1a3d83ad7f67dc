"""Decisions about one task's life on the node (pure, over plain data), beside agent.decide.decisions: the
signal and the waits of its stop, the addresses its start is given, its dirs across a restore or a
replacement, what a failed restore leaves, its logs' rotation as read back. Each fault flag of
these bugs is a parameter here, as in agent.decide.decisions."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.structs.records import PortAlloc


def plan_kill_signal(asked: str, driver: str, bugs: Bugs = NO_BUGS) -> str:
    """The signal a task's stop sends first: its `kill_signal` when the jobspec set one; else the
    driver's default, as Nomad's drivers: SIGINT for exec and raw_exec, and for docker "" (the
    image's STOPSIGNAL through `docker stop`, SIGTERM when the image sets none; PR #10441).
    `ignore-image-stopsignal` is nomad-9989: docker's default is SIGTERM whatever the image says."""
    if asked:
        return asked
    if driver == "docker":
        return "SIGTERM" if bugs.ignore_image_stopsignal else ""
    return "SIGINT"


def plan_kill_timeout(asked: float, max_kill_timeout: float, bugs: Bugs = NO_BUGS) -> float:
    """How long a task's stop waits after its kill signal before SIGKILL: its `kill_timeout`, capped
    at the client's `max_kill_timeout` (Nomad's client, PR #13626). `no-max-kill-timeout` is
    nomad-10005: the cap is not used and a task asking for 10m holds its stop for 10m."""
    if bugs.no_max_kill_timeout:
        return asked
    return min(asked, max_kill_timeout)


def plan_shutdown_delay(delay: float, has_services: bool, bugs: Bugs = NO_BUGS) -> float:
    """The seconds a task waits at its stop between its services' deregistration and its kill signal:
    its `shutdown_delay`, whether it registers services or not (Nomad's task runner since PR #7663).
    `shutdown-delay-needs-service` is nomad-7271: the delay lives in the service hook, so a task
    with no service of its own is killed at once."""
    if bugs.shutdown_delay_needs_service and not has_services:
        return 0.0
    return delay


def plan_group_shutdown_delay(delay: float, tasks_alive: bool, bugs: Bugs = NO_BUGS) -> float:
    """The seconds an alloc's stop waits (its group's shutdown_delay) between its services leaving
    and its tasks' kill signals: none when no task is alive to be killed (all dead, or waiting out a
    restart delay), as Nomad's client since PR #25157. `group-delay-for-dead-tasks` is nomad-25157:
    the delay is waited anyway, holding the stop of an alloc with nothing left to drain."""
    if tasks_alive or bugs.group_delay_for_dead_tasks:
        return delay
    return 0.0


def plan_alloc_addr_port(to: int, host: int, bugs: Bugs = NO_BUGS) -> int:
    """The port in a task's NOMAD_ALLOC_ADDR_<label> (the alloc's own address in its network
    namespace): the port's `to` when the jobspec set one, else the host port (a static port, or a
    dynamic one with no `to`). `alloc-addr-port-zero` is nomad-27305: `to` is taken as it is, so
    a port without one gives an address ending in :0."""
    if bugs.alloc_addr_port_zero or to:
        return to
    return host


def plan_task_network_address(address: str, from_state: bool, bugs: Bugs = NO_BUGS) -> str:
    """The alloc address a task's start is given (NOMAD_ALLOC_IP, NOMAD_ALLOC_*_<label>): the
    recorded one. `from_state` says the alloc's network was taken over from the state at a restore
    (not created in this run of the agent). `network-status-lost-on-restore` is nomad-26699: the
    network hook does not read its status back from the state, so a task restarted after an agent
    restart starts with no alloc address."""
    if bugs.network_status_lost_on_restore and from_state:
        return ""
    return address


def plan_remount_secrets(bugs: Bugs = NO_BUGS) -> bool:
    """Whether a restore mounts a task's secrets/ tmpfs again when it is gone (after a reboot), as
    Nomad's task dir hook does since PR #28345. `no-tmpfs-remount-on-restore` is nomad-28345: the
    hook's state says done, so a rebooted node's recovered tasks keep their secrets on disk."""
    return not bugs.no_tmpfs_remount_on_restore


def plan_keep_previous_alloc_dir(bugs: Bugs = NO_BUGS) -> bool:
    """Whether the previous alloc's dir stays after a sticky ephemeral disk was taken over from it on
    this node: it does, its logs with it, until the GC (Nomad's allocwatcher since PR #18108).
    `migrate-destroys-previous-alloc` is nomad-18034: the whole previous alloc dir is destroyed once
    its data moved, and the logs of the alloc that failed go with it."""
    return not bugs.migrate_destroys_previous_alloc


def plan_interpolate_meta(bugs: Bugs = NO_BUGS) -> bool:
    """Whether a task's NOMAD_META_* values are interpolated with its environment and the node (as
    Nomad's client since PR #10876). `meta-not-interpolated` is nomad-10876: they reach the task with
    their `${...}` references as written."""
    return not bugs.meta_not_interpolated


def plan_optional_meta_defaults(bugs: Bugs = NO_BUGS) -> bool:
    """Whether a dispatched job's `meta_optional` keys start empty in its tasks' environment (the
    dispatch's meta over them), as Nomad's client since PR #4403, so `${NOMAD_META_<key>}` of a key
    the dispatch left out reads "". `dispatch-optional-meta-unset` is nomad-3720: such a key is not
    in the environment and the reference reaches the task as written."""
    return not bugs.dispatch_optional_meta_unset


def plan_next_log_file(pos: int, size: int, has_next: bool, bugs: Bugs = NO_BUGS) -> bool:
    """Whether a log read moves on to the next rotated file: once it has read this one to its end
    (`pos` >= `size`) and a later one exists. `log-skips-rotated-tail` is nomad-11721: it moves on
    as soon as a later file exists, and the frames left in this one (across the rotation) are
    never streamed."""
    if not has_next:
        return False
    return bugs.log_skips_rotated_tail or pos >= size


def plan_cleanup_failed_restore(bugs: Bugs = NO_BUGS) -> bool:
    """Whether an alloc whose restore failed (replaced) has its tasks killed and what it holds torn
    down, as any failed alloc (Nomad's client since PR #17104). `failed-restore-leaks-tasks` is
    nomad-17104: it is marked failed and replaced, and its containers and network are left."""
    return not bugs.failed_restore_leaks_tasks


def plan_restart_logmon(bugs: Bugs = NO_BUGS) -> bool:
    """Whether a restore starts a reattached task's logmon again when it is gone (it died, or the
    node rebooted under a task that survived): as Nomad's client since PR #5577. `no-logmon-recovery`
    is nomad-5577: none is started, the task's next write to its log pipe finds no reader and
    SIGPIPE kills it."""
    return not bugs.no_logmon_recovery


def plan_vault_token_allowed(alloc_stopping: bool, bugs: Bugs = NO_BUGS) -> bool:
    """Whether a task's Vault token may be derived now: until the alloc is done on the client, so a
    poststop task (which runs after the alloc was told to stop) gets its own, as Nomad since PR
    #19268. `no-vault-token-after-stop` is nomad-19268: the derivation is refused once the alloc is
    told to stop ("Can't request Vault token for terminal allocation") and the poststop task fails."""
    return not (bugs.no_vault_token_after_stop and alloc_stopping)


def plan_templates_to_render(templates: Sequence[tuple[str, str, str]], bugs: Bugs = NO_BUGS) -> list[int]:
    """Which of a task's templates ((source, data, destination) each, in order) a render pass renders:
    one per identity, the first of each. A template's identity is all three, as consul-template's
    since PR 2096 (Nomad PR #26880), so only exact repeats merge. `templates-merged-by-content` is
    nomad-26880: the identity is the text alone, so a later template with the same text as an
    earlier one is merged into it and its destination is never written."""
    seen: set[object] = set()
    out: list[int] = []
    for i, (source, data, dest) in enumerate(templates):
        ident: object = data if bugs.templates_merged_by_content else (source, data, dest)
        if ident not in seen:
            seen.add(ident)
            out.append(i)
    return out


def plan_teardown_restored_network(bugs: Bugs = NO_BUGS) -> bool:
    """Whether an alloc's teardown tears down a network it took over at a restore (not created in
    this run of the agent): it does, found from the state, as Nomad's network hook finds the pause
    container by its alloc id since PR #17455. `no-teardown-after-restore` is nomad-17455 (and
    #15214 for other drivers): the hook knows only a network it set up itself, so after an agent
    restart a stopped alloc's pause container, netns and iptables rules stay behind."""
    return not bugs.no_teardown_after_restore


def plan_task_dir_mounts(bugs: Bugs = NO_BUGS) -> tuple[str, ...]:
    """The task dirs a container driver mounts into the task's root, as Nomad's docker driver does:
    the alloc's shared alloc/, and the task's local/ and secrets/. `no-local-mount` is nomad-1830
    (0.4.0): local/ is not mounted, so the templates and artifacts the agent put there are not at
    /local inside the container."""
    return ("alloc", "secrets") if bugs.no_local_mount else ("alloc", "local", "secrets")


def plan_mapped_ports(ports: Sequence[PortAlloc], bugs: Bugs = NO_BUGS) -> list[PortAlloc]:
    """The host ports an alloc's network forwards (each to its `to` port inside): every one, so two
    host ports may reach the same container port, as Nomad since PR #9951. `ports-keyed-by-container-port`
    is nomad-9951: the mappings are keyed by the container port, so of several host ports forwarded
    to one container port only the last is mapped."""
    if not bugs.ports_keyed_by_container_port:
        return list(ports)
    by_to = {p.to: p for p in ports}
    return list(by_to.values())


def plan_remove_agent_netns(batch: bool, bugs: Bugs = NO_BUGS) -> bool:
    """Whether a teardown removes the network namespace the agent made itself (exec and raw_exec
    tasks in bridge mode): always, as Nomad since PR #25714 (it closes its handle on the netns file
    and unmounts lazily). `netns-left-after-batch` is nomad-25714: a batch alloc's netns file is
    still held open at its teardown, the unmount fails, and the netns stays behind."""
    return not (bugs.netns_left_after_batch and batch)


@dataclass(frozen=True)
class ValidationChecks:
    main_task: bool  # a group needs a task without lifecycle
    lifecycle_hook: bool  # a lifecycle block needs its hook
    cores_not_negative: bool  # resources.cores >= 0 (the agent pins no cores, but checks the value)


def plan_validation(bugs: Bugs = NO_BUGS) -> ValidationChecks:
    """The submission checks a fault flag can take out (Nomad's TaskGroup and TaskLifecycleConfig
    Validate). `group-without-main-task-accepted` is nomad-17570: a group of lifecycle tasks only is
    accepted. `lifecycle-without-hook-accepted` is nomad-26285: a lifecycle block without `hook` is
    accepted, and the task becomes a main task. `negative-cores-accepted` is nomad-10511: a negative
    `cores` is accepted."""
    return ValidationChecks(
        main_task=not bugs.group_without_main_task_accepted,
        lifecycle_hook=not bugs.lifecycle_without_hook_accepted,
        cores_not_negative=not bugs.negative_cores_accepted,
    )


def plan_user_restart(
    running: Sequence[tuple[str, bool]], task: str, bugs: Bugs = NO_BUGS
) -> tuple[list[str], str]:
    """Which tasks an alloc restart (`nomad alloc restart`) restarts, from each task's (name,
    running), and why it fails ("" when it goes ahead): a named task, which must be running; with
    no name, the running ones (a prestart task that finished stays done). `restart-dead-prestart`
    is nomad-9841: with no name every task is asked, and a prestart task that already finished
    fails the whole restart with "Task not running"; the main task is not restarted."""
    if task:
        return ([task], "") if dict(running).get(task) else ([], "no running task to restart")
    dead = [name for name, alive in running if not alive]
    if bugs.restart_dead_prestart and dead:
        return [], f"Task not running: {', '.join(dead)}"
    alive_names = [name for name, alive in running if alive]
    return alive_names, "" if alive_names else "no running task to restart"


HOST_NAMESPACE_KEYS = (
    "pid_mode",
    "ipc_mode",
    "uts_mode",
)  # a docker task's config keys that can ask for "host"


def plan_host_namespaces(asked: Sequence[str], bugs: Bugs = NO_BUGS) -> tuple[tuple[str, ...], str]:
    """A docker task asking for the node's own namespaces (`asked`: the HOST_NAMESPACE_KEYS set to
    "host"): which it gets, and why its start is refused ("" when it is not). This agent does not
    allow privileged modes (Nomad's allow_privileged / allowed_modes), so the start is refused, as
    Nomad's docker driver since PR #28190. `host-namespaces-allowed` is nomad-28190
    (CVE-2026-14891): the host modes are honoured, and the workload sees the node's processes."""
    if not asked:
        return (), ""
    if bugs.host_namespaces_allowed:
        return tuple(asked), ""
    keys = ", ".join(f'{k} = "host"' for k in asked)
    return (), f"{keys} is not allowed: this node does not allow privileged modes"


def plan_logs_read_only(bugs: Bugs = NO_BUGS) -> bool:
    """Whether a container task sees its alloc's logs dir (alloc/logs) read-only, as Nomad binds it
    since PR #27918 (CVE-2026-6959): the task writes its logs through its output, never into that
    dir. `logs-dir-writable` is nomad-27918: /alloc/logs is writable like the rest of /alloc, and a
    workload can forge or truncate the logs of the alloc's other tasks."""
    return not bugs.logs_dir_writable


def plan_env_templates(changed: Sequence[bool], bugs: Bugs = NO_BUGS) -> list[bool]:
    """Which of a task's `env = true` templates (each: whether its content changed since the task
    last started) its next start reads variables from: all of them, as Nomad since 0.7.1 (#3529).
    `env-from-changed-templates-only` is nomad-3529: after one of them re-rendered, only the changed
    ones are read, and the variables of the others are missing from the restarted task."""
    if bugs.env_from_changed_templates_only and any(changed):
        return list(changed)
    return [True] * len(changed)


CHECK_OUTPUT_LIMIT = 3 * 1024  # bytes of a failing http check's body kept as its output (Nomad's)


def check_result(kind: str, status_code: int | None, error: str, body: str = "") -> tuple[str, str]:
    """A Nomad check's status and output from one probe (Nomad's client checker): tcp passes when
    it connects; http passes on 200 ("nomad: http ok") and on any other code below 400 (its body
    as the output), and fails from 400 up or when no answer came (the error, "nomad: " first)."""
    if error:
        return "failure", f"nomad: {error}" if kind == "http" else error
    if kind == "tcp":
        return "success", "nomad: tcp ok"
    if status_code == 200:
        return "success", "nomad: http ok"
    status = "success" if status_code is not None and status_code < 400 else "failure"
    return status, body[:CHECK_OUTPUT_LIMIT]


@dataclass(frozen=True)
class CheckWatch:
    """One watched check of a running task (Nomad's check watcher's restarter): the end of its
    grace after the task's start, and when it first went unhealthy since (0: it is healthy)."""

    interval: float
    limit: int
    grace_until: float
    ignore_warnings: bool = False
    unhealthy_since: float = 0.0


def plan_check_restart(watch: CheckWatch, status: str, now: float) -> tuple[CheckWatch, bool]:
    """After one result of a watched check (`check_restart`): the watch's new state, and whether its
    task is restarted now, as Nomad's check watcher decides: a healthy result (a warning too with
    ignore_warnings) clears it; a failure within the grace is not counted; otherwise the task is
    restarted once the check has stayed unhealthy for interval x (limit - 1) since its first
    failure (limit 1: at the first failure past the grace)."""
    healthy = status == "success" or (status == "warning" and watch.ignore_warnings)
    if healthy or watch.limit <= 0:
        return (replace(watch, unhealthy_since=0.0) if watch.unhealthy_since else watch), False
    if now < watch.grace_until:
        return watch, False
    since = watch.unhealthy_since or now
    if now >= since + watch.interval * (watch.limit - 1):
        return replace(watch, unhealthy_since=0.0), True
    return replace(watch, unhealthy_since=since), False


def plan_watched_group(group: str, bugs: Bugs = NO_BUGS) -> str:
    """The group the check watcher (check_restart) hashes a nomad check's ID with, to find the
    status the checker stored under the ID it hashed: the alloc's group, as the checker's. Nomad's
    IDs are computed at several callsites and must agree (PR #16240). `check-id-without-group` is
    nomad-16240: the service hook left the group out, the watcher finds no status under its ID
    and never restarts the task."""
    return "" if bugs.check_id_without_group else group
