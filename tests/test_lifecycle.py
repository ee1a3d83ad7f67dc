"""Task lifecycle (prestart, poststart, poststop, sidecars) as Nomad's task coordinator orders it:
the pure plan (agent.decide.lifecycle), the restart tracker's rule for lifecycle tasks, the jobspec's
`lifecycle` block, and the alloc runner driving it against the fake node (tests/fakes.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent.decide.decisions import Bugs, RestoreAction, plan_task_restart, restarts_on_success
from agent.decide.lifecycle import (
    LifecycleStep,
    Phase,
    Stage,
    TaskPhase,
    plan_kill_order,
    plan_lifecycle,
    stage_of,
)
from agent.jobspec import JobspecError, parse_jobspec
from agent.nomadapi.jobjson import parsed_job_json
from agent.runner.alloc import AllocRunner
from agent.structs.model import Group, Job, Lifecycle, RestartPolicy, Task
from agent.structs.records import AllocRecord, AllocStatus, TaskState
from tests.fakes import FakeNode

POLICY = RestartPolicy(attempts=1, interval=600, delay=3, mode="fail")
PENDING, LIVE, DEAD = Phase.PENDING, Phase.LIVE, Phase.DEAD


# -- the plan --------------------------------------------------------------------------------------
def _p(name: str, stage: Stage, phase: Phase, ok: bool = False) -> TaskPhase:
    return TaskPhase(name, stage, phase, successful=ok)


def test_stages_from_the_lifecycle_block() -> None:
    assert stage_of("", False) is Stage.MAIN
    assert stage_of("prestart", False) is Stage.PRESTART
    assert stage_of("prestart", True) is Stage.PRESTART_SIDECAR
    assert stage_of("poststart", False) is Stage.POSTSTART
    assert stage_of("poststart", True) is Stage.POSTSTART_SIDECAR
    assert stage_of("poststop", False) is Stage.POSTSTOP


def test_prestart_tasks_go_first_and_main_tasks_wait_for_their_success() -> None:
    tasks = [
        _p("init", Stage.PRESTART, PENDING),
        _p("side", Stage.PRESTART_SIDECAR, PENDING),
        _p("web", Stage.MAIN, PENDING),
        _p("warm", Stage.POSTSTART, PENDING),
        _p("bye", Stage.POSTSTOP, PENDING),
    ]
    assert plan_lifecycle(tasks) == LifecycleStep(start=("init", "side"))
    tasks[0:2] = [_p("init", Stage.PRESTART, LIVE), _p("side", Stage.PRESTART_SIDECAR, LIVE)]
    assert plan_lifecycle(tasks) == LifecycleStep(), "an ephemeral prestart still running holds the main"
    tasks[0] = _p("init", Stage.PRESTART, DEAD, ok=False)  # failed: the alloc fails, nothing starts
    assert plan_lifecycle(tasks) == LifecycleStep(), "nothing starts after a failed prestart"
    tasks[0] = _p("init", Stage.PRESTART, DEAD, ok=True)
    assert plan_lifecycle(tasks) == LifecycleStep(start=("web",))
    tasks[2] = _p("web", Stage.MAIN, LIVE)
    assert plan_lifecycle(tasks) == LifecycleStep(start=("warm",)), "poststart once the main started"


def test_a_failed_prestart_never_opens_the_main_stage() -> None:
    tasks = [_p("init", Stage.PRESTART, DEAD), _p("web", Stage.MAIN, PENDING)]
    assert plan_lifecycle(tasks).start == ()


def test_sidecars_left_alone_are_killed_then_poststop_runs_then_the_alloc_is_done() -> None:
    tasks = [
        _p("side", Stage.PRESTART_SIDECAR, LIVE),
        _p("web", Stage.MAIN, DEAD, ok=True),
        _p("tail", Stage.POSTSTART_SIDECAR, LIVE),
        _p("bye", Stage.POSTSTOP, PENDING),
    ]
    assert plan_lifecycle(tasks) == LifecycleStep(kill=("side", "tail"))
    tasks[0] = _p("side", Stage.PRESTART_SIDECAR, DEAD, ok=True)
    tasks[2] = _p("tail", Stage.POSTSTART_SIDECAR, DEAD, ok=True)
    assert plan_lifecycle(tasks) == LifecycleStep(start=("bye",))
    tasks[3] = _p("bye", Stage.POSTSTOP, LIVE)
    assert plan_lifecycle(tasks) == LifecycleStep()
    tasks[3] = _p("bye", Stage.POSTSTOP, DEAD, ok=True)
    assert plan_lifecycle(tasks) == LifecycleStep(done=True)


def test_nomad_8165_sidecars_outlive_their_main_tasks_only_under_the_flag() -> None:
    """Fixed: a sidecar left alone is killed. With `sidecar-outlives-main` (nomad-8165) nothing is
    killed and nothing starts: the batch alloc stays running for ever."""
    tasks = [_p("proxy", Stage.PRESTART_SIDECAR, LIVE), _p("main", Stage.MAIN, DEAD, ok=True)]
    assert plan_lifecycle(tasks).kill == ("proxy",)
    assert plan_lifecycle(tasks, Bugs(sidecar_outlives_main=True)) == LifecycleStep()


def test_nomad_13055_sidecars_are_killed_after_the_other_tasks() -> None:
    tasks = [("proxy", Stage.PRESTART_SIDECAR), ("web", Stage.MAIN), ("tail", Stage.POSTSTART_SIDECAR)]
    assert plan_kill_order(tasks) == (("web",), ("proxy", "tail"))
    assert plan_kill_order([("web", Stage.MAIN)]) == (("web",),)
    assert plan_kill_order([]) == ()
    assert plan_kill_order(tasks, Bugs(sidecars_killed_with_main=True)) == (("proxy", "web", "tail"),)


def test_a_leader_done_kills_every_live_task_sidecars_included() -> None:
    """Nomad's alloc runner: a leader dead without failing ends the group ("Leader Task Dead");
    a poststop task is not killed (it runs after); a failed leader is the restart policy's."""
    tasks = [
        _p("side", Stage.PRESTART_SIDECAR, LIVE),
        TaskPhase("lead", Stage.MAIN, DEAD, successful=True, leader=True),
        _p("web", Stage.MAIN, LIVE),
        _p("bye", Stage.POSTSTOP, PENDING),
    ]
    step = plan_lifecycle(tasks)
    assert step.kill == ("side", "web") and step.why == ("Leader Task Dead", "Leader Task in Group dead")
    tasks[1] = TaskPhase("lead", Stage.MAIN, DEAD, successful=False, leader=True)
    assert plan_lifecycle(tasks) == LifecycleStep(), "a failed leader: the alloc fails by its policy"
    tasks[1] = TaskPhase("lead", Stage.MAIN, LIVE, leader=True)
    tasks[2] = _p("web", Stage.MAIN, DEAD, ok=True)
    assert plan_lifecycle(tasks) == LifecycleStep(), "a task that is not the leader ends alone"


def test_an_ephemeral_poststart_still_running_keeps_the_sidecars() -> None:
    tasks = [
        _p("side", Stage.PRESTART_SIDECAR, LIVE),
        _p("web", Stage.MAIN, DEAD, ok=True),
        _p("warm", Stage.POSTSTART, LIVE),
    ]
    assert plan_lifecycle(tasks) == LifecycleStep()


def test_a_group_without_lifecycle_starts_every_task_at_once() -> None:
    tasks = [_p("a", Stage.MAIN, PENDING), _p("b", Stage.MAIN, PENDING)]
    assert plan_lifecycle(tasks) == LifecycleStep(start=("a", "b"))


@pytest.mark.parametrize(
    ("job_type", "hook", "sidecar", "restarted"),
    [
        ("service", "", False, True),
        ("batch", "", False, False),
        ("service", "prestart", False, False),  # an ephemeral prestart's exit 0 is its success
        ("batch", "prestart", True, True),  # a sidecar runs for as long as the main tasks
        ("service", "poststart", False, False),
        ("batch", "poststart", True, True),
        ("service", "poststop", False, False),
    ],
)
def test_restart_on_success_follows_the_hook_as_nomads_restart_tracker(
    job_type: str, hook: str, sidecar: bool, restarted: bool
) -> None:
    assert restarts_on_success(job_type, hook, sidecar) is restarted
    decision = plan_task_restart(
        POLICY, [], 100.0, exit_code=0, job_type=job_type, hook=hook, sidecar=sidecar
    )
    assert decision.complete is not restarted and decision.restart is restarted


# -- the jobspec -----------------------------------------------------------------------------------
_SPEC = """
job "lc" {
  group "g" {
    task "init" {
      driver = "raw_exec"
      lifecycle {
        hook    = "%s"
        sidecar = %s
      }
      config { command = "/bin/true" }
    }
    task "web" {
      driver = "raw_exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""


def _errors(text: str) -> list[str]:
    with pytest.raises(JobspecError) as caught:
        parse_jobspec(text, source="lc.hcl")
    return caught.value.lines()


def test_the_lifecycle_block_is_read_and_shown_in_nomads_json() -> None:
    parsed = parse_jobspec(_SPEC % ("prestart", "true"), source="lc.hcl")
    tasks = parsed.job.groups[0].tasks
    assert tasks[0].lifecycle == Lifecycle("prestart", sidecar=True) and tasks[1].lifecycle is None
    assert not any("lifecycle" in w for w in parsed.warnings), "no longer ignored"
    shown = parsed_job_json(parsed.job)["TaskGroups"][0]["Tasks"]
    assert shown[0]["Lifecycle"] == {"Hook": "prestart", "Sidecar": True} and shown[1]["Lifecycle"] is None
    # and Nomad's JSON of it reads back the same (the API's register, `job run -output`)
    again = parse_jobspec(json.dumps({"Job": parsed_job_json(parsed.job)}), source="lc.json")
    assert again.job.groups[0].tasks[0].lifecycle == Lifecycle("prestart", sidecar=True)


def test_a_bad_hook_is_refused_naming_it() -> None:
    (line,) = _errors(_SPEC % ("after", "false"))
    assert "task.init.lifecycle.hook" in line and '"after"' in line


def test_a_group_of_lifecycle_tasks_only_is_refused_as_nomad_does() -> None:
    spec = (_SPEC % ("prestart", "false")).replace(
        'task "web" {\n      driver = "raw_exec"\n',
        'task "web" {\n      lifecycle { hook = "poststop" }\n      driver = "raw_exec"\n',
    )
    (line,) = _errors(spec)
    assert 'group "g" must have at least one main task' in line


# -- the runner -------------------------------------------------------------------------------------
def _task(name: str, hook: str = "", sidecar: bool = False, leader: bool = False) -> Task:
    return Task(name=name, driver="exec", lifecycle=Lifecycle(hook, sidecar) if hook else None, leader=leader)


def _runner(node: FakeNode, tasks: tuple[Task, ...], job_type: str = "service") -> AllocRunner:
    group = Group(name="g", tasks=tasks, network=None, restart=POLICY)
    job = Job(id="web", groups=(group,), type=job_type)
    rec = AllocRecord(id="a1b2c3d4-0000-4000-8000-000000000009", job="web", group="g")
    runner = AllocRunner(node.deps(), rec, job, group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    runner.start()
    return runner


def _started(node: FakeNode) -> list[str]:
    return [ctx.task.name for ctx in node.exec.starts]


def _exit(node: FakeNode, r: AllocRunner, task: str, code: int) -> None:
    (hid,) = [h for h in node.exec.running() if h.startswith(f"exec-{task}-")]
    node.exec.exit(hid, code)
    r.on_task_exit(hid)


def _again(node: FakeNode, r: AllocRunner) -> AllocRunner:
    rec = AllocRecord.from_record(node.store.get("alloc", r.id) or {})
    return AllocRunner(node.deps(), rec, r.job, r.group)


def _events(node: FakeNode, r: AllocRunner, task: str) -> list[str]:
    return [e.type for e in node.store.events(r.id, task)]


def test_main_waits_for_its_prestart_then_poststart_follows(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, (_task("init", "prestart"), _task("web"), _task("warm", "poststart")))
    assert _started(node) == ["init"] and r.rec.status is AllocStatus.RUNNING
    assert r.state.task("web").state is TaskState.PENDING and r.view()["tasks"]["web"]["state"] == "pending"
    _exit(node, r, "init", 0)
    init = r.state.task("init")
    assert (init.state, init.completed, init.failed, init.restarts) == (TaskState.DEAD, True, False, 0)
    assert _started(node) == ["init", "web", "warm"], "a service job's prestart is done at exit 0"
    assert node.timers == []
    _exit(node, r, "warm", 0)
    assert r.state.task("warm").completed and r.rec.status is AllocStatus.RUNNING, "web still runs"
    _exit(node, r, "web", 0)  # a service job's main task: restarted by the policy
    assert [d for d, _ in node.timers] == [POLICY.delay]


def test_a_failing_prestart_is_restarted_by_policy_and_fails_the_alloc_without_starting_main(
    tmp_path: Path,
) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, (_task("init", "prestart"), _task("web")))
    _exit(node, r, "init", 1)
    node.run_timers()
    assert _started(node) == ["init", "init"]
    _exit(node, r, "init", 1)
    assert r.rec.status is AllocStatus.FAILED and r.state.task("init").failed
    assert "web" not in _started(node) and node.replaced == [(r.id, r.rec.reason)]


def test_a_batch_alloc_kills_its_sidecar_when_main_is_done_runs_poststop_then_completes(
    tmp_path: Path,
) -> None:
    node = FakeNode(tmp_path)
    tasks = (_task("side", "prestart", sidecar=True), _task("job"), _task("bye", "poststop"))
    r = _runner(node, tasks, job_type="batch")
    assert _started(node) == ["side", "job"], "main waits only for a sidecar's start"
    _exit(node, r, "side", 0)  # a sidecar that exits 0 is restarted, even in a batch job
    assert [d for d, _ in node.timers] == [POLICY.delay]
    node.run_timers()
    _exit(node, r, "job", 0)
    assert "Main Tasks Dead" in _events(node, r, "side")
    side = r.state.task("side")
    assert (side.state, side.completed, side.failed) == (TaskState.DEAD, True, False)
    assert _started(node) == ["side", "job", "side", "bye"]
    assert r.rec.status.value == "running", "poststop still runs"
    assert len(node.exec.stops) == 1, "the sidecar was stopped"
    _exit(node, r, "bye", 0)
    assert r.rec.status is AllocStatus.COMPLETE and node.replaced == []
    assert node.dirs.cleaned == [r.alloc_dir]


def test_a_batch_leader_done_stops_the_group_then_poststop_runs_and_the_alloc_completes(
    tmp_path: Path,
) -> None:
    node = FakeNode(tmp_path)
    tasks = (_task("side", "prestart", sidecar=True), _task("lead", leader=True), _task("web"))
    r = _runner(node, (*tasks, _task("bye", "poststop")), job_type="batch")
    _exit(node, r, "lead", 0)
    for name in ("side", "web"):
        assert _events(node, r, name)[-2:] == ["Leader Task Dead", "Killing"], name
        t = r.state.task(name)
        assert (t.state, t.completed, t.failed) == (TaskState.DEAD, True, False), name
    assert len(node.exec.stops) == 2 and _started(node)[-1] == "bye"
    _exit(node, r, "bye", 0)
    assert r.rec.status is AllocStatus.COMPLETE and node.replaced == []


def test_a_service_leader_that_exits_is_restarted_and_the_group_lives_on(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, (_task("lead", leader=True), _task("web")))
    _exit(node, r, "lead", 0)
    assert "Leader Task Dead" not in _events(node, r, "web") and node.exec.stops == []
    assert [d for d, _ in node.timers] == [POLICY.delay]


def test_restart_all_tasks_runs_a_finished_prestart_again_before_main(tmp_path: Path) -> None:
    """`nomad alloc restart -all-tasks`: the finished prestart runs again, the main task waits for
    it as at the alloc's start; each restart is counted; a poststop task is left for the end."""
    node = FakeNode(tmp_path)
    r = _runner(node, (_task("init", "prestart"), _task("web"), _task("bye", "poststop")))
    _exit(node, r, "init", 0)
    assert _started(node) == ["init", "web"]
    r.user_restart_all()
    assert _started(node) == ["init", "web", "init"], "web waits for init's second run"
    assert r.state.task("web").state is TaskState.PENDING and "exec-web-2" in node.exec.stops
    _exit(node, r, "init", 0)
    assert _started(node) == ["init", "web", "init", "web"]
    assert (r.state.task("init").restarts, r.state.task("web").restarts) == (1, 1)
    assert _events(node, r, "init").count("Restart Signaled") == 1
    assert r.state.task("bye").state is TaskState.PENDING and r.rec.status is AllocStatus.RUNNING


def test_a_stop_kills_the_main_tasks_then_runs_poststop_to_its_end(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, (_task("web"), _task("bye", "poststop")))
    assert _started(node) == ["web"]
    r.stop("job stopped")
    assert _started(node) == ["web", "bye"]
    assert r.rec.status.value == "running", "the stop waits for bye"
    assert node.dirs.cleaned == []
    _exit(node, r, "bye", 0)
    assert r.rec.status is AllocStatus.COMPLETE and node.dirs.cleaned == [r.alloc_dir]
    assert r.state.task("bye").completed and r.state.task("web").state is TaskState.DEAD
    # a stop again (a restore of the stopped alloc) runs nothing twice
    r.stop("job stopped")
    assert _started(node) == ["web", "bye"]


def test_a_failed_alloc_runs_its_poststop_before_it_is_replaced(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, (_task("web"), _task("bye", "poststop")))
    _exit(node, r, "web", 1)
    node.run_timers()
    _exit(node, r, "web", 1)  # attempts used up
    assert r.rec.status is AllocStatus.FAILED and _started(node) == ["web", "web", "bye"]
    assert node.replaced == [], "the replacement waits for the poststop task"
    _exit(node, r, "bye", 3)  # bye's own attempt (POLICY: 1): restarted, as Nomad's task runner does
    assert node.replaced == [] and _events(node, r, "bye")[-1] == "Restarting"
    node.run_timers()
    assert _started(node) == ["web", "web", "bye", "bye"]
    _exit(node, r, "bye", 3)  # its attempts used up: failed, and the alloc's end goes on
    assert node.replaced == [(r.id, r.rec.reason)] and r.state.task("bye").failed
    assert _events(node, r, "bye")[-1] == "Not Restarting"


def test_a_poststop_task_that_fails_at_a_stop_is_restarted_by_the_policy_then_the_alloc_ends(
    tmp_path: Path,
) -> None:
    """Nomad's task runner does not shut a poststop task down for the alloc's stop, so its failure
    goes to the restart tracker: restarted after the policy's delay; its exit 0 completes it and
    the alloc; a restart timer outrun by a later decision starts nothing."""
    node = FakeNode(tmp_path)
    r = _runner(node, (_task("web"), _task("bye", "poststop")))
    r.stop("job stopped")
    _exit(node, r, "bye", 1)
    assert r.rec.status is AllocStatus.RUNNING and node.dirs.cleaned == [], "the stop waits for bye"
    assert _events(node, r, "bye")[-2:] == ["Terminated", "Restarting"] and r.state.task("bye").restarts == 0
    assert r.state.task("bye").restart_times, "the restart is counted against bye's attempts"
    node.run_timers()
    assert _started(node) == ["web", "bye", "bye"]
    _exit(node, r, "bye", 0)
    assert r.rec.status is AllocStatus.COMPLETE and node.dirs.cleaned == [r.alloc_dir]
    bye = r.state.task("bye")
    assert (bye.completed, bye.failed, bye.restarts) == (True, False, 1)


def test_a_restore_never_runs_a_finished_prestart_again_and_starts_main_in_its_turn(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, (_task("init", "prestart"), _task("web")))
    # killed with the prestart still running: the restore reattaches it, main still waits
    again = _again(node, r)
    assert again.restore() in (RestoreAction.RESTART_TASKS, RestoreAction.REATTACH)
    assert _started(node) == ["init"]
    _exit(node, again, "init", 0)
    assert _started(node) == ["init", "web"]
    # and once more: the prestart completed, the main runs: nothing is started
    third = _again(node, again)
    assert third.restore() is RestoreAction.REATTACH and _started(node) == ["init", "web"]


def test_a_kill_between_prestart_success_and_main_start_is_finished_by_the_restore(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, (_task("init", "prestart"), _task("web")))
    (hid,) = node.exec.running()
    node.exec.exit(hid, 0)
    # the exit recorded, then killed before main was started: what the store holds
    r.state.put_task("init", r.state.task("init").with_(state=TaskState.DEAD, completed=True))
    again = _again(node, r)
    again.restore()
    assert _started(node) == ["init", "web"], "prestart not again, main started by the restore"


def test_an_exit_0_after_a_check_restart_kill_is_a_failure_not_a_completion(tmp_path: Path) -> None:
    """Nomad's check watcher restarts a task with failure = true: a batch task that traps the kill
    signal and exits 0 is restarted by the policy, not completed; its next exit 0 completes it."""
    assert plan_task_restart(POLICY, [], 100.0, exit_code=0, job_type="batch").complete
    killed = plan_task_restart(POLICY, [], 100.0, exit_code=0, job_type="batch", failure=True)
    assert (killed.complete, killed.restart, killed.counted) == (False, True, True)

    node = FakeNode(tmp_path)
    r = _runner(node, (_task("web"),), job_type="batch")
    r.tasks["web"].killed_as_failure = True  # what the check hook sets before its kill
    _exit(node, r, "web", 0)
    assert _events(node, r, "web")[-1] == "Restarting" and not r.state.task("web").completed
    node.run_timers()
    _exit(node, r, "web", 0)  # a plain exit 0 of the restarted task: done
    assert r.state.task("web").completed and r.rec.status is AllocStatus.COMPLETE
