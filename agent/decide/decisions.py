"""Pure decisions of the agent: (desired, persisted, observed) -> what to do. No I/O here, so every
branch is unit-tested without docker, CNI or a clock (the time is an argument)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.structs.model import RestartPolicy
from agent.structs.records import AllocRecord, AllocStatus, DesiredStatus, TaskState


class RestoreAction(Enum):
    REATTACH = "reattach"  # everything is as recorded: touch nothing
    RESTART_TASKS = "restart-tasks"  # network fine, some tasks exited while the agent was down
    RECREATE_NETWORK = "recreate-network"  # DEL, ADD again, restart the group's tasks
    REPLACE = "replace"  # cannot be restored: mark failed, start a replacement alloc


@dataclass(frozen=True)
class ObservedAlloc:
    """What the agent sees of one alloc on start, before it changes anything."""

    alloc_dir_exists: bool
    bridge: bool  # the group uses bridge networking (a pause container owns the netns)
    pause_running: bool = True
    pause_same_start: bool = True  # the pause container is the very one the agent started
    tasks_running: Sequence[bool] = ()
    tasks_share_pause_netns: Sequence[bool] = ()
    network_diffs: Sequence[str] = ()  # the agent's own verification (and CNI CHECK where supported)
    has_cni_result: bool = True
    # Tasks recorded complete (a batch task that exited 0): not running, and nothing to restore.
    tasks_completed: Sequence[bool] = ()
    netns_by_agent: bool = False  # the netns is the agent's own (exec, raw_exec), not a pause container's


@dataclass(frozen=True)
class RestorePlan:
    action: RestoreAction
    reason: str


def network_problem(obs: ObservedAlloc) -> str | None:
    """Why a bridge alloc's network cannot be trusted after a restart, or None when it can."""
    if not obs.has_cni_result:
        return "no CNI result recorded for the alloc"
    if not obs.pause_running:
        return "pause container is not running"
    if not obs.pause_same_start:
        return "pause container was restarted by docker (new, empty network namespace)"
    split = sum(
        1
        for run, same in zip(obs.tasks_running, obs.tasks_share_pause_netns, strict=True)
        if run and not same
    )
    if split:
        return f"{split} running task(s) are in another network namespace than the pause container"
    if obs.network_diffs:
        return "network verification failed: " + "; ".join(obs.network_diffs)
    return None


def plan_restore(
    obs: ObservedAlloc, bugs: Bugs = NO_BUGS, recorded_running: Sequence[bool] = ()
) -> RestorePlan:
    """Decide how to restore an alloc after an agent restart or a host reboot.

    `recorded_running` is what the state store says of each task (used only by the nomad-23684
    bug, `half-alive-restore`: the record is believed over the driver). `no-network-check-on-restore`
    is nomad-24292: a running pause container is taken at its word and the network is never
    verified. `restore-missing-alloc-dir` is nomad-27933: restore goes on as if the alloc directory
    were there. `recreate-netns-on-restore` is nomad-9757: the netns the agent made for exec and
    raw_exec tasks is not taken over, so the network is recreated and those tasks restarted.
    """
    if bugs.half_alive_restore and recorded_running:
        obs = trust_recorded_tasks(obs, recorded_running)
    if bugs.rerun_completed_on_restore:  # nomad-5883: what completed is not known any more
        obs = replace(obs, tasks_completed=[])
    check_network = not bugs.no_network_check_on_restore
    if not obs.alloc_dir_exists and not bugs.restore_missing_alloc_dir:
        return RestorePlan(RestoreAction.REPLACE, "alloc directory is missing (nomad-27933)")
    problem = network_problem(obs) if obs.bridge and check_network else None
    if obs.bridge and obs.netns_by_agent and bugs.recreate_netns_on_restore:
        problem = "no network restored for the agent's own netns (nomad-9757)"
    if problem:
        return RestorePlan(RestoreAction.RECREATE_NETWORK, problem)
    done = list(obs.tasks_completed) or [False] * len(obs.tasks_running)
    if all(run or complete for run, complete in zip(obs.tasks_running, done, strict=True)):
        tasks = "every task running or complete" if any(done) else "all tasks running"
        why = f"{tasks}, network verified" if obs.bridge and check_network else tasks
        return RestorePlan(RestoreAction.REATTACH, why)
    return RestorePlan(RestoreAction.RESTART_TASKS, "task(s) exited while the agent was down")


def trust_recorded_tasks(obs: ObservedAlloc, recorded_running: Sequence[bool]) -> ObservedAlloc:
    """The nomad-23684/17079 behaviour (the `half-alive-restore` fault): a task the state store
    records as running is believed to be running, and to be in the alloc's network namespace,
    whatever the driver says. A task whose container or process vanished while the agent was down
    is then neither restarted nor reported: the alloc stays "running" with no live task."""
    rows = list(zip(obs.tasks_running, obs.tasks_share_pause_netns, recorded_running, strict=True))
    return replace(
        obs,
        tasks_running=[live or rec for live, _, rec in rows],
        # A live task keeps what was observed of its netns; a vanished one is assumed in place.
        tasks_share_pause_netns=[same if live else rec for live, same, rec in rows],
    )


class StartCause(Enum):
    """Why a task is started: the `cause` of its "Started" event, so that every start is explained by
    exactly one decision. Only a restart caused by the task's own exit counts against the restart
    policy (Nomad's restart tracker): the client's own restarts (network recovery, change_mode,
    restore) and an operator's restart are not counted."""

    FIRST_START = "first start"
    RESTART_POLICY = "restart policy"  # the task exited (or was found exited at restore)
    NETWORK_RECOVERY = "network recovery"
    CHANGE_MODE = "change_mode restart"  # a template's or a Vault token's change_mode "restart"
    RESTORE = "restore"  # restore recreated the network, or started a task with no exit to count
    OPERATOR = "operator restart"  # the API's task restart

    @property
    def counted(self) -> bool:
        return self is StartCause.RESTART_POLICY


@dataclass(frozen=True)
class RestartDecision:
    restart: bool
    delay: float
    reason: str
    counted: bool = False  # the restart goes into the history the policy's attempts are checked against
    # No restart and no failure: the task finished its work (a batch task's exit 0). It stays dead,
    # not failed; the alloc completes once all its tasks have.
    complete: bool = False
    # The start of the restart interval a counted restart falls in (the tracker's state to keep).
    interval_start: float = 0.0


TASK_COMPLETED = "Restart unnecessary as task terminated successfully"


def restarts_on_success(job_type: str, hook: str = "", sidecar: bool = False) -> bool:
    """Whether a task that exits 0 is restarted, as Nomad's restart tracker: a service or system
    job's task is (it is meant to run for ever), a batch or sysbatch job's task is done. A lifecycle
    task (`hook`) decides by itself, whatever the job: a prestart or poststart sidecar is restarted,
    an ephemeral one (not a sidecar) and a poststop task are done."""
    if hook in ("prestart", "poststart"):
        return sidecar
    if hook == "poststop":
        return False
    return job_type not in ("batch", "sysbatch")


def plan_task_restart(
    policy: RestartPolicy,
    counted_restarts: Sequence[float],
    now: float,
    cause: StartCause = StartCause.RESTART_POLICY,
    *,
    exit_code: int | None = None,
    job_type: str = "service",
    hook: str = "",
    sidecar: bool = False,
    interval_start: float | None = None,
    bugs: Bugs = NO_BUGS,
    failure: bool = False,
) -> RestartDecision:
    """Nomad's restart stanza: `attempts` restarts within `interval`; then fail (mode fail) or wait
    out the rest of the interval (mode delay). The interval tumbles as Nomad's restart tracker's
    (`restart_interval`): `interval_start` is the current interval's start (the task's first start
    for its first exit; None: the first of `counted_restarts`).

    `counted_restarts` are the times of the earlier restarts the policy counted (those caused by the
    task's own exit). A restart the agent or an operator triggers (`cause` not RESTART_POLICY) is
    done at once and not counted, whatever the history: only the task's failures use up attempts.

    `exit_code` is the task's (None: unknown, a failure). A batch or sysbatch job's task that exits 0
    is complete whatever its history or attempts: no restart, no failure (`restarts_on_success`).
    A service job's task is restarted on any exit, 0 included, and each one counts. A lifecycle
    task's exit 0 is decided by its `hook` and `sidecar` (restarts_on_success).

    `failure`: the exit follows a kill that restarts the task as a failure (check_restart: Nomad's
    watcher restarts with failure = true), so an exit 0 is not the task's success.

    `restart-batch-on-success` is nomad-491: a batch task's exit 0 is counted like a failure and
    restarted. `restart-without-delay` is nomad-15215: the restart timer fires at once (a zero-duration timer
    that ticks although it was reset), so a failing task is restarted without its delay.
    """
    if not cause.counted:
        return RestartDecision(True, 0.0, f"{cause.value}: not counted against the restart policy")
    batch_bug = bugs.restart_batch_on_success and not hook  # nomad-491: exit 0 is not seen as done
    if exit_code == 0 and not failure and not restarts_on_success(job_type, hook, sidecar) and not batch_bug:
        return RestartDecision(False, 0.0, TASK_COMPLETED, complete=True)
    if policy.attempts == 0:  # Nomad's hot path: whatever the mode, no restart at all
        return RestartDecision(False, 0.0, f"exceeded 0 restart(s): {NO_RESTARTS_ALLOWED}")
    start, used = restart_interval(policy, counted_restarts, now, interval_start)
    if used < policy.attempts:
        return RestartDecision(
            True,
            0.0 if bugs.restart_without_delay else policy.delay,
            f"restart {used + 1} of {policy.attempts} in {policy.interval:.0f}s",
            counted=True,
            interval_start=start,
        )
    if policy.mode == "delay":
        return RestartDecision(
            True,
            max(0.0, start + policy.interval - now),
            "attempts exhausted; delaying until the interval ends",
            counted=True,
            interval_start=start,
        )
    return RestartDecision(False, 0.0, f"exceeded {policy.attempts} restart(s) in {policy.interval:.0f}s")


NO_RESTARTS_ALLOWED = "Policy allows no restarts"


def restart_interval(
    policy: RestartPolicy, counted_restarts: Sequence[float], now: float, interval_start: float | None
) -> tuple[float, int]:
    """Nomad's restart tracker counts in tumbling intervals, not a sliding window: an interval
    starts when the tracker does (`interval_start`: the task's first start) and a new one starts at
    the first counted exit after it ended; the count starts again from 0 there. Returns the start of
    the interval `now` falls in and how many counted restarts it already holds."""
    if interval_start is None:
        interval_start = min(counted_restarts, default=now)
    if now > interval_start + policy.interval:
        return now, 0
    return interval_start, sum(1 for t in counted_restarts if t >= interval_start)


@dataclass(frozen=True)
class PendingRestart:
    """A restart the policy put on a timer (its delay). The runner keeps one generation per task and
    bumps it with every later decision about the task (every start, every exit it handles, a stop):
    the timer starts the task only if the generation it was scheduled with is still the current one,
    so a recovery, an operator restart or a stop that came first cancels it (one start per decision)."""

    task: str
    generation: int


def plan_pending_restart(
    pending: PendingRestart, current_generation: int, alloc_running: bool, bugs: Bugs = NO_BUGS
) -> bool:
    """Whether a restart timer that fires now still starts its task: not when a later decision (a
    network recovery, an operator's restart, a stop) came first, as Nomad's restart tracker. Under
    the `stale-restart-timer` fault it fires anyway: the task is started a second time."""
    return alloc_running and (pending.generation == current_generation or bugs.stale_restart_timer)


class DeadOnRestore(Enum):
    """What restore does with a task that is not running."""

    RESUME_PENDING = "resume-pending"  # its exit was handled before: the owed restart is put on a timer again
    RESTART_POLICY = "restart-policy"  # it exited while the agent was down: Terminated, then the policy
    START_AGAIN = "start-again"  # nothing to count: never started, vanished, or restarted under the agent
    COMPLETE = "complete"  # it completed before (a batch task's exit 0): it stays dead


def plan_dead_on_restore(
    recorded: TaskState,
    restart_due: float,
    exit_code: int | None,
    *,
    exit_lost: bool = False,
    completed: bool = False,
    bugs: Bugs = NO_BUGS,
) -> DeadOnRestore:
    """A task found exited at restore (the driver has its exit status, `exit_code`) goes through the
    same restart policy as one that dies while the agent runs: the exit counts, the policy's delay
    and mode apply (attempts = 0 fails the alloc). So does one whose exit status was lost with the
    agent (`exit_lost`: an exec or raw_exec task, the agent's child, found gone: it died while the
    agent was down, with an unknown exit code, which the policy counts as a failure). A task whose
    exit the agent had already handled (recorded dead, a restart owed at `restart_due`) is not
    counted again: the owed restart resumes; one recorded `completed` stays dead. A task with no
    exit status otherwise (no handle: the agent died while starting it; the container is gone;
    docker restarted it) is started again by the restore, not counted, as Nomad's task runner
    starts a task whose handle it cannot recover. `rerun-completed-on-restore` is nomad-5883: the
    task's completion is not seen, and a task that finished successfully is started again."""
    if completed and not bugs.rerun_completed_on_restore:
        return DeadOnRestore.COMPLETE
    if recorded is TaskState.DEAD and restart_due > 0:
        return DeadOnRestore.RESUME_PENDING
    if (exit_code is not None or exit_lost) and recorded is not TaskState.DEAD:
        return DeadOnRestore.RESTART_POLICY
    return DeadOnRestore.START_AGAIN


LIVE_STATUSES = (AllocStatus.PENDING, AllocStatus.RUNNING)


def plan_restore_statuses(bugs: Bugs = NO_BUGS) -> tuple[AllocStatus, ...]:
    """The alloc statuses an agent's restore picks up: the live ones. A terminal alloc the GC has
    not collected yet is history, read and never acted on. `rerun-completed-on-restore` is
    nomad-5883 (0.9.0 to 0.9.3): a complete alloc not yet collected is restored as if it still
    ran (its status back to running), and its tasks that had finished successfully run again.
    `rerun-old-allocs-on-restore` is nomad-1795 (0.3.2 to 0.9.1): every alloc still in the client's
    state is picked up, failed ones (already replaced) included, and run again beside what replaced
    them."""
    statuses: tuple[AllocStatus, ...] = LIVE_STATUSES
    if bugs.rerun_completed_on_restore or bugs.rerun_old_allocs_on_restore:
        statuses = (*statuses, AllocStatus.COMPLETE)
    if bugs.rerun_old_allocs_on_restore:
        statuses = (*statuses, AllocStatus.FAILED)
    return statuses


@dataclass(frozen=True)
class OwedReplacement:
    failed: str  # the failed alloc's id
    existing: str  # an alloc already replacing it (its replacement started but was not recorded), or ""


def plan_owed_replacements(records: Sequence[AllocRecord]) -> list[OwedReplacement]:
    """Failed allocs whose replacement was still owed (on a timer) when the agent stopped: each is
    replaced once at restore. One already named by another alloc's `replaces` only needs its
    `replaced_by` written; one whose job was stopped since is owed nothing."""
    replacing = {r.replaces: r.id for r in records if r.replaces}
    return [
        OwedReplacement(r.id, replacing.get(r.id, ""))
        for r in records
        if r.replace_pending
        and r.status is AllocStatus.FAILED
        and r.desired is DesiredStatus.RUN
        and not r.replaced_by
    ]


# -- network recovery, teardown and task start failures -------------------------------------------
class PauseDeathAction(Enum):
    RECOVER_NETWORK = "recover-network"  # DEL, fresh netns owner, ADD, restart the group's tasks
    RESTART_INTO_DEAD_PAUSE = "restart-into-dead-pause"  # nomad-12216: the tasks fail there


def plan_pause_death(bugs: Bugs = NO_BUGS) -> PauseDeathAction:
    """The container owning the group's netns died: docker restarts it with a new, empty netns."""
    if bugs.reuse_dead_pause:
        return PauseDeathAction.RESTART_INTO_DEAD_PAUSE
    return PauseDeathAction.RECOVER_NETWORK


class StartFailure(Enum):
    RECOVER_NETWORK = "recover the group's network"
    RESTART_POLICY = "through the restart policy"
    FAIL = "fail"


def plan_start_failure(bridge: bool, recoverable: bool = False, bugs: Bugs = NO_BUGS) -> StartFailure:
    """A task could not start. In a bridge group the usual cause is a network owner that died
    ("cannot join network of a non running container"), so the network is rebuilt rather than
    retried into the same dead end. Elsewhere, as Nomad's task runner: an error the driver calls
    recoverable (the docker engine not answering, a container it could not create or start) goes
    through the restart policy like an exit (counted, after its delay); any other fails the task
    ("Error was unrecoverable")."""
    if bridge:
        return StartFailure.FAIL if bugs.reuse_dead_pause else StartFailure.RECOVER_NETWORK
    if bugs.start_errors_unrecoverable:  # nomad-1858: recoverable errors were not handled
        return StartFailure.FAIL
    return StartFailure.RESTART_POLICY if recoverable else StartFailure.FAIL


UNRECOVERABLE = "Error was unrecoverable"


@dataclass(frozen=True)
class NetworkRecoveryPlan:
    run_del: bool  # CNI DEL on the old attachment (frees IPAM, removes chains)
    forget_cached_result: bool  # drop the cached ADD result without DEL (nomad-11272)
    keep_old_address: bool  # the alloc keeps the address it had before (nomad-24236)


def plan_network_recovery(bugs: Bugs = NO_BUGS) -> NetworkRecoveryPlan:
    stale_ipam = bugs.ipam_stale_after_reboot
    return NetworkRecoveryPlan(
        run_del=not stale_ipam,
        forget_cached_result=stale_ipam,
        keep_old_address=bugs.stale_network_status_on_restore,
    )


@dataclass(frozen=True)
class TeardownPlan:
    run_del: bool  # CNI DEL (every plugin undoes what it did)
    release_only: bool  # free the IP reservations and forget the result, leave chains (nomad-6385)


def plan_network_teardown(bugs: Bugs = NO_BUGS) -> TeardownPlan:
    if bugs.leak_portmap_chains:
        return TeardownPlan(run_del=False, release_only=True)
    return TeardownPlan(run_del=True, release_only=False)


@dataclass(frozen=True)
class SweepPlan:
    run: bool
    reap_untracked_pause: bool  # nomad-16338: restored allocs' pause containers look untracked


def plan_orphan_sweep(bugs: Bugs = NO_BUGS) -> SweepPlan:
    return SweepPlan(run=not bugs.no_orphan_sweep, reap_untracked_pause=bugs.sweep_untracked_pause)


# -- templates -----------------------------------------------------------------------------------
class AfterRestore(Enum):
    ACT_ON_LOOP = "act-on-loop"  # the owed action goes through the task's reattached handle
    FORGET = "forget"  # nomad-9636: pretend the task was given the new content
    ACT_BEFORE_HANDLE = "act-before-handle"  # nomad-15851/24051: delivered with no handle; lost


def plan_after_restore(bugs: Bugs = NO_BUGS) -> AfterRestore:
    if bugs.no_change_on_restore:
        return AfterRestore.FORGET
    if bugs.script_change_before_handle:
        return AfterRestore.ACT_BEFORE_HANDLE
    return AfterRestore.ACT_ON_LOOP


TEMPLATE_RETRY_BASE, TEMPLATE_RETRY_MAX = 1.0, 60.0
NOOP_RUNNER_GIVES_UP_AFTER = 3  # only under the noop-runner-dies bug


@dataclass(frozen=True)
class RenderRetry:
    give_up: bool
    delay: float  # before jitter
    # Retry as soon as the agent sees Vault answer again, before the backoff runs out
    # (agent.templates.wake): the render failed because Vault could not answer.
    wake_on_vault: bool = False


def plan_render_retry(
    failures: int, all_noop: bool, bugs: Bugs = NO_BUGS, *, vault_down: bool = False
) -> RenderRetry:
    """A re-render failed for the `failures`-th time in a row: retry with capped exponential
    backoff, forever, and at once when Vault answers again if it failed because Vault could not
    (`vault_down`: sealed, unreachable, 5xx; not a rate limit, which has its own backoff).
    nomad-28016: with only noop templates the runner gave up after its retries."""
    if bugs.noop_runner_dies and all_noop and failures >= NOOP_RUNNER_GIVES_UP_AFTER:
        return RenderRetry(True, 0.0)
    delay = min(TEMPLATE_RETRY_MAX, TEMPLATE_RETRY_BASE * 2 ** min(failures, 6))
    return RenderRetry(False, delay, wake_on_vault=vault_down)


# A task's first render, at the alloc's setup, when Vault (or Consul) cannot answer: retried as
# Nomad's template runner retries Vault (client config vault_retry: 12 attempts, backoff 250 ms
# doubling to at most 1 minute, about 5 minutes in all) before the setup fails. A template error, a
# denial or a bad path fails the setup at once.
SETUP_RETRY_ATTEMPTS = 12
SETUP_RETRY_BASE, SETUP_RETRY_MAX = 0.25, 60.0


def plan_setup_retry(attempt: int, unavailable: bool) -> float | None:
    """The setup's first render failed for the `attempt`-th time in a row (1-based): seconds until
    the setup is tried again, or None when it fails now (not a server that could not answer, or the
    attempts are spent)."""
    if not unavailable or attempt > SETUP_RETRY_ATTEMPTS:
        return None
    return float(min(SETUP_RETRY_MAX, SETUP_RETRY_BASE * 2.0 ** (attempt - 1)))


def plan_restore_render(
    *,
    task_running: bool,
    content_intact: bool,
    now: float,
    renew_by: float | None,
    spread: float | None,
    bugs: Bugs = NO_BUGS,
) -> float | None:
    """After an agent restart, when to re-issue a task's secrets and re-render its templates: None is
    at once, inside the restore (as before the restart window existed); a number is that many
    seconds later, on a timer, so that agents restarted together spread their re-issues over the
    window (`spread`: the task's random point of it; None: no window).

    Deferred only when that is safe: the task is running on what is on disk, every file is still as
    it was rendered (`content_intact`: a reboot empties secrets/), and its secrets are not due yet
    (`renew_by`, the wall-clock time the pass before the restart scheduled its re-issue for; 0: no
    dynamic secret; None: not known). Never later than `renew_by`. The faults that put nomad-9636
    and nomad-15851 back need the render inside the restore, so they keep it there."""
    if spread is None or bugs.no_change_on_restore or bugs.script_change_before_handle:
        return None
    if not task_running or not content_intact or renew_by is None:
        return None
    if renew_by == 0:
        return max(0.0, spread)
    if now >= renew_by:
        return None
    return max(0.0, min(spread, renew_by - now))


@dataclass(frozen=True)
class GcLimits:
    """The client's GC settings, Nomad's names and defaults (gc_interval is the core's timer)."""

    max_allocs: int = 50  # allocs tracked (live and terminal) before terminal ones are collected
    disk_usage_threshold: float = 80.0  # percent of the alloc dir's filesystem
    inodes_usage_threshold: float = 70.0  # percent of its inodes


@dataclass(frozen=True)
class GcCandidate:
    alloc_id: str
    finished: float  # when it became terminal (its record's last write): the oldest go first


def plan_gc(
    candidates: Sequence[GcCandidate],
    tracked: int,
    limits: GcLimits,
    *,
    disk_used: float,
    inodes_used: float,
    force: bool = False,
) -> list[str]:
    """Which terminal allocs to collect now, oldest first, as Nomad's client GC: all of them when
    forced (`POST /v1/client/gc`); while the disk or its inodes are over their thresholds, one at a
    time (the caller measures again after each); else as many as bring the allocs tracked
    (live and terminal) down to `max_allocs`. `candidates` holds only allocs that may go: terminal,
    no replacement owed."""
    oldest = [c.alloc_id for c in sorted(candidates, key=lambda c: (c.finished, c.alloc_id))]
    if force:
        return oldest
    if disk_used >= limits.disk_usage_threshold or inodes_used >= limits.inodes_usage_threshold:
        return oldest[:1]
    return oldest[: max(0, tracked - limits.max_allocs)]
