"""No kill point loses or doubles anything (issue 12).

For every named step in `agent.fieldbugs.killpoints.POINTS` and every scenario that reaches it (a start, a
task
crash with a restart, an operator restart, a pause death with network recovery, an alloc failure with
replacement, a job stop), the agent is killed there (the hook raises `Killed`, which nothing in the
agent catches, as after a SIGKILL). Then a NEW core is built on the same fake node and state store (the
tasks that were started keep running in the fake drivers, the store holds what was written), restored,
its timers run and the orphan sweep done. Then: the job runs exactly one alloc (none after a stop),
each of its tasks has exactly one live instance, the one recorded; nothing is left of any other alloc;
a failed alloc is replaced exactly once; restarts are counted once; the events say what happened.

Which scenario reaches which point is found by running each once with a recording hook, so a new
point is enumerated by itself (and `test_every_point_is_reached` fails until a scenario reaches it).
The points x outcomes table is printed at the end of the module (visible without -s).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.client.core import Core
from agent.client.offload import run_inline
from agent.errors import AgentError
from agent.fieldbugs.faults import ENV_VAR, Faults
from agent.fieldbugs.killpoints import DOCS, POINTS, Killed, no_kill, sigkill_at
from agent.runner.state import NETNS_OWNER
from agent.structs.records import AllocRecord, AllocStatus, DesiredStatus, NetworkState, TaskRecord, TaskState
from tests.fakes import FakeNode, FakeSweeper

SPEC = """
job "web" {
  group "g" {
    network {
      mode = "bridge"
      port "http" { to = 8080 }
    }
    restart {
      attempts = 1
      interval = "10m"
      delay    = "3s"
      mode     = "fail"
    }
    task "t0" {
      driver = "docker"
      config { image = "x" }
    }
    task "t1" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""
TASKS = ("t0", "t1")


class Hook:
    """The runner's and the core's kill_point: records the points reached once `go` was called,
    and kills at the armed one (its first hit)."""

    def __init__(self) -> None:
        self.armed = ""
        self.recording = False
        self.reached: list[str] = []
        self.killed = ""

    def go(self, point: str = "") -> None:
        self.armed, self.recording = point, True

    def __call__(self, name: str) -> None:
        assert name in POINTS, f"kill point {name!r} is not in agent.fieldbugs.killpoints.POINTS"
        if self.recording:
            self.reached.append(name)
        if name == self.armed:
            self.armed, self.killed = "", name
            raise Killed(name)


@dataclass
class Agent:
    node: FakeNode
    hook: Hook
    core: Core = field(init=False)

    def __post_init__(self) -> None:
        self.core = Core(
            self.node.store,
            self.node.registry,
            self.node.network,
            data_dir=self.node.root / "data",
            faults=Faults(),
            task_dirs=self.node.dirs,
            sweeper=FakeSweeper(self.node),
            kill_point=self.hook,
            offload=run_inline,  # a stop's continuation at once: the kill points stay in one order
        )

    def drain(self) -> None:
        """Run every timer now (the fake clock jumps to it), and those they set, in order."""
        for _ in range(100):
            if not self.core.loop._timers:
                return
            self.core.loop._timers.sort()
            self.core.loop._timers.pop(0).fn()
        raise AssertionError("timers keep coming")

    def alloc(self) -> str:
        (live,) = [a for a, r in self.core.runners.items() if r.rec.live]
        return live

    def crash(self, task: str = "t0", code: int = 3) -> None:
        alloc = self.alloc()
        (hid,) = [h for h, p in self.node.docker.procs.items() if p.running and p.ctx.alloc_id == alloc]
        assert task == "t0"
        self.node.docker.exit(hid, code)
        self.core.allocs._task_exited(alloc, hid)


# -- scenarios: set up (not armed), then `hook.go` and the action -----------------------------------
def _start(a: Agent, point: str) -> None:
    a.hook.go(point)
    a.core.job_registry.submit(SPEC, "hcl")
    a.drain()


def _restart(a: Agent, point: str) -> None:
    a.core.job_registry.submit(SPEC, "hcl")
    a.hook.go(point)
    a.crash()
    a.drain()


def _operator_restart(a: Agent, point: str) -> None:
    a.core.job_registry.submit(SPEC, "hcl")
    r = a.core.runners[a.alloc()]
    a.hook.go(point)
    r.user_restart(r.group.tasks[0])
    a.drain()


def _recovery(a: Agent, point: str) -> None:
    a.core.job_registry.submit(SPEC, "hcl")
    alloc = a.alloc()
    pause = a.core.runners[alloc].state.handle(NETNS_OWNER)
    assert pause is not None
    a.hook.go(point)
    a.node.pause.alive[pause.id] = False
    a.core.allocs._task_exited(alloc, pause.id)
    a.drain()


def _replace(a: Agent, point: str) -> None:
    a.core.job_registry.submit(SPEC, "hcl")
    a.crash()
    a.drain()  # the one restart attempts = 1 allows
    a.hook.go(point)
    a.crash()  # attempts used up: the alloc fails and is replaced
    a.drain()


def _stop(a: Agent, point: str) -> None:
    a.core.job_registry.submit(SPEC, "hcl")
    a.hook.go(point)
    a.core.job_registry.stop_job("web")
    a.drain()


SCENARIOS: dict[str, Callable[[Agent, str], None]] = {
    "start": _start,
    "restart": _restart,
    "operator-restart": _operator_restart,
    "recovery": _recovery,
    "replace": _replace,
    "stop": _stop,
}


def _reached() -> dict[str, list[str]]:
    """Each scenario run once, killed nowhere: the points it reaches after `go`."""
    out = {}
    for name, scenario in SCENARIOS.items():
        with tempfile.TemporaryDirectory() as tmp:
            node = FakeNode(Path(tmp))
            agent = Agent(node, Hook())
            scenario(agent, "")
            node.store.close()
            out[name] = list(dict.fromkeys(agent.hook.reached))
    return out


REACHED = _reached()
CASES = [(point, name) for point in POINTS for name in SCENARIOS if point in REACHED[name]]
ROWS: list[dict[str, str]] = []


def test_every_point_is_reached() -> None:
    assert list(dict.fromkeys(p for p, _ in CASES)) == list(POINTS), "a point no scenario reaches"
    assert all(DOCS[p] for p in POINTS)


def test_crash_at_is_off_unless_set_and_checks_its_point(tmp_path: Path) -> None:
    assert Faults.from_env({}).crash_at == "" and sigkill_at("") is no_kill
    f = Faults.from_env({ENV_VAR: "reuse-dead-pause, crash-at=stop.after-teardown"})
    assert f.crash_at == "stop.after-teardown" and f.active == frozenset({"reuse-dead-pause"})
    with pytest.raises(AgentError, match=r"did you mean 'stop\.after-teardown'"):
        Faults.from_env({ENV_VAR: "crash-at=stop.after-teardwn"})
    with pytest.raises(AgentError, match="unknown kill point"):
        Faults(crash_at="nowhere")
    core = Agent(FakeNode(tmp_path), Hook()).core
    assert core.deps.kill_point is core.kill_point


def test_crash_at_sigkills_the_agent_once_per_data_dir(tmp_path: Path) -> None:
    code = (
        "import sys; from pathlib import Path; from agent.fieldbugs.killpoints import sigkill_at; "
        "hook = sigkill_at('recovery.after-del', Path(sys.argv[1])); "
        "hook('recovery.after-stop'); hook('recovery.after-del'); print('past it')"
    )
    root = Path(__file__).parent.parent
    run = [sys.executable, "-c", code, str(tmp_path)]
    first = subprocess.run(run, cwd=root, capture_output=True, text=True, check=False)
    assert first.returncode == -9 and "past it" not in first.stdout, first
    assert (tmp_path / "crash-at.recovery.after-del.done").exists()
    again = subprocess.run(run, cwd=root, capture_output=True, text=True, check=False)
    assert again.returncode == 0 and "past it" in again.stdout, again


# -- what the agent left -----------------------------------------------------------------------------
def _records(node: FakeNode) -> dict[str, AllocRecord]:
    return {a: AllocRecord.from_record(raw, a) for a, raw in node.store.list("alloc").records.items()}


def _task(node: FakeNode, alloc: str, task: str) -> TaskRecord:
    raw = node.store.get("task", f"{alloc}/{task}")
    return TaskRecord.from_record(raw) if raw else TaskRecord()


def _live_instances(node: FakeNode) -> Counter[tuple[str, str]]:
    return Counter(
        (p.ctx.alloc_id, p.ctx.task.name)
        for d in (node.docker, node.exec)
        for p in d.procs.values()
        if p.running
    )


def _check(node: FakeNode, scenario: str, before: dict[str, int]) -> dict[str, str]:
    """Assert the outcome; return the table row's cells."""
    recs = _records(node)
    live = [r for r in recs.values() if r.live]
    instances = _live_instances(node)
    # No task runs twice, nothing of a dead alloc is left (after the sweep).
    assert all(n == 1 for n in instances.values()), f"a task runs twice: {instances}"
    assert {a for a, _ in instances} <= {r.id for r in live}, "an orphan task survived the sweep"
    assert {node.pause.allocs[o] for o, up in node.pause.alive.items() if up} <= {r.id for r in live}
    assert set(node.network.results) <= {r.id for r in live}, "a dead alloc's CNI result is left"
    # A failed alloc is replaced exactly once; nothing owed is left.
    for r in recs.values():
        replacing = [x.id for x in recs.values() if x.replaces == r.id]
        assert len(replacing) <= 1, f"alloc {r.id} replaced {len(replacing)} times"
        if r.status is AllocStatus.FAILED and r.desired is DesiredStatus.RUN:
            assert replacing == [r.replaced_by] and not r.replace_pending, "a failed alloc not replaced once"
    if scenario == "stop":
        assert not live and not instances and not node.network.results
        assert all(r.desired is DesiredStatus.STOP for r in recs.values())
        assert all(r.status is AllocStatus.COMPLETE for r in recs.values())
        alive = None
    else:
        (alive,) = live
        assert alive.status is AllocStatus.RUNNING and alive.network_state is NetworkState.READY
        assert alive.address and node.network.results[alive.id] == alive.address
        pause = node.store.get("handle", f"{alive.id}/{NETNS_OWNER}")
        assert pause and node.pause.alive.get(pause["id"]), "the live alloc's pause is not running"
        for t in TASKS:
            handle = node.store.get("handle", f"{alive.id}/{t}")
            driver = node.docker if t == "t0" else node.exec
            assert handle and driver.procs[handle["id"]].running, f"task {t} is not running (lost)"
            assert instances[(alive.id, t)] == 1
            assert _task(node, alive.id, t).state is TaskState.RUNNING
    # Nothing failed that should not have: one alloc, or the failed one and its one replacement.
    assert len(recs) == (2 if scenario == "replace" else 1), f"{len(recs)} allocs: one failed or was lost"
    # Restarts are counted once (the original alloc, when it is the one running).
    original = min(recs.values(), key=lambda r: r.created)
    t0 = _task(node, original.id, "t0")
    terminated = [e for e in node.store.events(original.id, "t0") if e.type == "Terminated"]
    if alive is not None and alive.id == original.id:
        want = {
            "start": (0, 0, 0),
            "restart": (1, 1, 1),
            "operator-restart": (1, 0, 1),  # its kill is told (Terminated), as Nomad's restartImpl
            "recovery": (1, 0, 0),
        }[scenario]
        assert (t0.restarts, len(t0.restart_times), len(terminated)) == want, (
            "a restart counted twice or lost"
        )
        if scenario == "recovery":
            assert _task(node, original.id, "t1").restarts == 1
    if scenario == "replace":
        assert len(terminated) == 2 and len(t0.restart_times) == 1 and original.status is AllocStatus.FAILED
    # The events say what happened after the kill.
    after = [
        e
        for a in sorted(recs, key=lambda a: recs[a].created)
        for e in node.store.events(a)
        if e.seq > before.get(a, 0)
    ]
    assert after, "nothing in the events says what the restore did"
    started: dict[str, int] = {}
    if alive is not None:
        started = {t: sum(1 for e in node.store.events(alive.id, t) if e.type == "Started") for t in TASKS}
        assert all(started.values()), "a running task has no Started event"
    types = list(dict.fromkeys(e.type for e in after if e.type not in ("Received", "Task Setup")))
    return {
        "allocs": f"{len(recs)}/{len(live)}",
        "starts": "-" if alive is None else "/".join(str(started[t]) for t in TASKS),
        "leftovers": str(len(node.docker.leftovers) + len(node.exec.leftovers)),
        "swept": str(len(node.docker.swept) + len(node.exec.swept)),
        "events after the kill": ", ".join(types),
    }


def _outcome(types: str, scenario: str) -> str:
    for key, what in (
        ("Stop Resumed", "stop finished"),
        ("Setup Resumed", "setup redone"),
        ("Restore Network", "network recreated"),
        ("Restore Failed", "replaced"),
    ):
        if key in types:
            return what
    if "Replaced" in types:
        return "replacement recorded" if "Started" not in types else "replaced"
    if "Restarting" in types:
        return "restart resumed"
    if "Started" in types:
        return "task started again"
    if scenario == "stop":
        return "stopped"
    return "reattached"


@pytest.mark.parametrize(("point", "scenario"), CASES, ids=[f"{s}:{p}" for p, s in CASES])
def test_a_kill_at_each_point_loses_and_doubles_nothing(tmp_path: Path, point: str, scenario: str) -> None:
    node = FakeNode(tmp_path)
    first = Agent(node, Hook())
    with pytest.raises(Killed):
        SCENARIOS[scenario](first, point)
    assert first.hook.killed == point
    before = {
        a: max((e.seq for e in node.store.events(a)), default=0) for a in node.store.list("alloc").records
    }
    # A new agent on the same node and state: restore, its timers, the periodic sweep.
    second = Agent(node, Hook())
    second.core.restorer.restore()
    second.drain()
    second.core.sweep()
    cells = _check(node, scenario, before)
    ROWS.append(
        {"point": point, "scenario": scenario, "outcome": _outcome(cells["events after the kill"], scenario)}
        | cells
    )


@pytest.fixture(scope="module", autouse=True)
def _table(pytestconfig: pytest.Config) -> Iterator[None]:
    yield
    if not ROWS:
        return
    cols = list(ROWS[0])
    width = {c: max(len(c), *(len(r[c]) for r in ROWS)) for c in cols}
    lines = [" | ".join(c.ljust(width[c]) for c in cols), "-+-".join("-" * width[c] for c in cols)]
    lines += [" | ".join(r[c].ljust(width[c]) for c in cols) for r in ROWS]
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        print("\n\nkill points x outcomes (after a new agent restored, ran its timers and swept):")
        print("\n".join(lines))
