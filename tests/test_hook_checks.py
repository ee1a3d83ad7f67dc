"""The check watcher (agent.runner.checks.ChecksHook) over the fakes of its ports (CheckPorts): no
task runner, no alloc runner, no agent. Its timers and offloaded steps are queued and run by the
test, so each round of checks is one step; a check's target that cannot be reached is a failure
without any traffic (a port the alloc never reserved)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from agent.fieldbugs.bugs import NO_BUGS
from agent.runner.checkresults import CheckResults
from agent.runner.checks import CheckPorts, ChecksHook
from agent.structs.model import Check, CheckRestart, Group, Service, Task

Done = Callable[[object, Exception | None], None]  # an offloaded step's end
ALLOC = "a1b2c3d4-0000-4000-8000-0000000000cc"


@dataclass
class _Task:
    """The task as the watcher reads and acts on it (CheckedTask), recording what it is told."""

    handle_id: str | None = "h1"
    events: list[tuple[str, str]] = field(default_factory=list)
    execs: list[list[str]] = field(default_factory=list)
    exec_code: int = 0
    env: dict[str, str] = field(default_factory=lambda: {"NOMAD_TASK_DIR": "/local"})

    def handle(self) -> Any:
        return None if self.handle_id is None else SimpleNamespace(id=self.handle_id)

    def event(self, type_: str, message: str, **details: Any) -> None:
        self.events.append((type_, message))

    def exec_env(self) -> dict[str, str]:
        return dict(self.env)

    def exec(self, argv: list[str], timeout: float, then: Callable[[int, str], None]) -> None:
        self.execs.append(argv)
        then(self.exec_code, "script said so")


@dataclass
class _World:
    task: _Task
    hook: ChecksHook
    results: CheckResults
    timers: list[Callable[[], None]] = field(default_factory=list)
    failed_marks: list[bool] = field(default_factory=list)
    stops: list[tuple[str, float, str]] = field(default_factory=list)
    offloaded: list[str] = field(default_factory=list)
    now: float = 1000.0

    def round(self) -> None:
        """A second later, run what is due: the timers set so far (each check's next run sets the
        next one)."""
        self.now += 1.0
        due, self.timers = self.timers, []
        for fn in due:
            fn()

    def statuses(self) -> dict[str, str]:
        return {str(r["Check"]): str(r["Status"]) for r in self.results.of(ALLOC).values()}


def _world(task: Task, group: Group, *, consul: bool = False) -> _World:
    lifecycle = _Task()
    results = CheckResults()
    w = _World(task=lifecycle, hook=None, results=results)  # type: ignore[arg-type]

    def offload(
        name: str, blocking: Callable[[], object], done: Callable[[object, Exception | None], None]
    ) -> None:
        w.offloaded.append(name)
        if name.startswith("check-ttl-"):
            return  # Consul's TTL update: not sent anywhere here
        try:
            got, exc = blocking(), None
        except Exception as e:
            got, exc = None, e
        done(got, exc)

    alloc = SimpleNamespace(
        id=ALLOC,
        group=group,
        job=SimpleNamespace(id="web"),
        rec=SimpleNamespace(ports=(), address=""),
        alloc_running=lambda: True,
    )
    ports = CheckPorts(
        task=task,
        alloc=alloc,  # type: ignore[arg-type]
        lifecycle=lifecycle,
        stop_task=lambda h, timeout, sig: w.stops.append((h.id, timeout, sig)),
        mark_failed=lambda: w.failed_marks.append(True),
        results=results,
        services=SimpleNamespace(consul=None) if consul else None,  # type: ignore[arg-type]
        address=lambda: "10.213.1.5",
        max_kill_timeout=3.0,
        bugs=NO_BUGS,
        clock=lambda: w.now,
        schedule=lambda delay, fn: w.timers.append(fn),
        offload=offload,
    )
    w.hook = ChecksHook(ports)
    return w


def _unreachable(limit: int, *more: Check) -> tuple[Task, Group]:
    """A nomad service whose http check names a port the alloc never reserved: every run fails."""
    check = Check(
        name="alive", type="http", port="nope", interval=1.0, restart=CheckRestart(limit=limit, grace=0.0)
    )
    svc = Service(name="web", port="nope", checks=(check, *more), provider="nomad")
    task = Task(name="server", driver="raw_exec", services=(svc,), kill_timeout=10.0)
    return task, Group(name="g", tasks=(task,))


def test_checks_start_pending_and_report_each_run_under_nomads_names() -> None:
    task, group = _unreachable(limit=0)
    w = _world(task, group)
    w.hook.poststart(w.task.handle())
    assert w.statuses() == {"alive": "pending"}
    w.round()
    (result,) = w.results.of(ALLOC).values()
    assert (result["Status"], result["Task"], result["Group"]) == ("failure", "server", "web.g[0]")
    assert "nope" in str(result["Output"]), result["Output"]
    assert w.failed_marks == [] and w.stops == [], "a check without check_restart restarts nothing"


def test_check_restart_kills_the_task_as_a_failure_with_its_kill_signal_and_capped_timeout() -> None:
    task, group = _unreachable(2, Check(name="other", type="tcp", port="nope", interval=1.0))
    w = _world(task, group)
    w.hook.poststart(w.task.handle())
    w.round()
    assert w.stops == [], "one failure is under the limit of 2"
    w.round()
    assert w.failed_marks == [True], "the kill's exit must go to the restart policy as a failure"
    assert w.stops == [("h1", 3.0, "SIGINT")], "raw_exec's SIGINT, kill_timeout 10 s capped at 3"
    assert w.task.events == [("Restart Signaled", 'healthcheck: check "alive" unhealthy')]
    w.round()
    assert w.timers == [] and len(w.stops) == 1, "no check of the task runs until its next start"


def test_a_new_run_of_the_task_leaves_the_old_runs_checks_behind() -> None:
    task, group = _unreachable(limit=0)
    w = _world(task, group)
    w.hook.poststart(w.task.handle())
    w.task.handle_id = "h2"  # restarted: the timers of h1's checks are stale
    w.round()
    assert w.statuses() == {"alive": "pending"} and w.timers == []
    w.hook.poststart(w.task.handle())
    w.round()
    assert w.statuses() == {"alive": "failure"}
    w.hook.exited()
    assert w.statuses() == {}, "a task done for good has no check results left"


def test_a_group_check_naming_no_task_runs_in_the_first_main_task_and_restarts_nothing() -> None:
    check = Check(name="grp", type="tcp", port="nope", interval=1.0, restart=CheckRestart(limit=1, grace=0.0))
    svc = Service(name="web", port="nope", checks=(check,), provider="nomad")
    main, side = Task(name="main", driver="raw_exec"), Task(name="side", driver="raw_exec")
    group = Group(name="g", tasks=(main, side), services=(svc,))
    ran = _world(main, group)
    ran.hook.poststart(ran.task.handle())
    ran.round()
    (result,) = ran.results.of(ALLOC).values()
    assert (result["Status"], result["Task"]) == ("failure", "")
    assert ran.stops == [], "the alloc's own check restarts no task"
    other = _world(side, group)
    other.hook.poststart(other.task.handle())
    assert other.statuses() == {}, "only the group's first main task carries it"


def test_a_script_check_runs_in_the_task_with_its_env_and_restarts_it_when_critical() -> None:
    check = Check(
        name="probe",
        type="script",
        command="${NOMAD_TASK_DIR}/probe.sh",
        args=("--quick",),
        interval=5.0,
        restart=CheckRestart(limit=1, grace=0.0),
    )
    svc = Service(name="web", checks=(check,), provider="consul")
    task = Task(name="server", driver="docker", services=(svc,), kill_signal="SIGUSR1", kill_timeout=1.0)
    w = _world(task, Group(name="g", tasks=(task,)), consul=True)
    w.task.exec_code = 2  # critical
    w.hook.poststart(w.task.handle())
    w.round()
    assert w.task.execs == [["/local/probe.sh", "--quick"]]
    assert "check-ttl-server" in w.offloaded, "the status goes to Consul's TTL check"
    assert w.failed_marks == [True] and w.stops == [("h1", 1.0, "SIGUSR1")]


def test_script_checks_wait_for_a_consul_to_tell() -> None:
    check = Check(name="probe", type="script", command="/bin/true", interval=5.0)
    task = Task(name="server", driver="docker", services=(Service(name="web", checks=(check,)),))
    w = _world(task, Group(name="g", tasks=(task,)), consul=False)
    w.hook.poststart(w.task.handle())
    w.round()
    assert w.task.execs == [] and w.timers == []
