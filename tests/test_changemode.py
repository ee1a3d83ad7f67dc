"""The change_mode state machine over random interleavings (hypothesis): renders that change the
content, no-op renders, task restarts, the window where a task is starting, agent crashes (with a
crash between delivering and recording), and ticks of the agent. Invariant: once things settle, the
content the task has loaded equals the content on disk for every acting template, and no action is
ever delivered without an undelivered change. The `last-event-wins` fault (nomad-24140) and the
`signal-while-restarting` fault (nomad-25861) must each break it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.templates.changemode import (
    Plan,
    TemplateState,
    on_delivered,
    on_render,
    on_task_started,
    plan_actions,
)

MODES = [("signal", "SIGHUP"), ("restart", ""), ("script", ""), ("noop", ""), ("signal", "SIGUSR1")]


@dataclass
class World:
    """The task, the disk and the agent's persisted states; `crash` loses only what is unpersisted."""

    last_event_wins: bool = False
    signal_while_restarting: bool = False
    disk: dict[str, str] = field(default_factory=dict)
    loaded: dict[str, str] = field(default_factory=dict)
    persisted: list[TemplateState] = field(default_factory=list)
    running: bool = False
    version: int = 0
    deliveries: int = 0
    spurious: int = 0

    def __post_init__(self) -> None:
        self.persisted = [TemplateState(f"t{i}", m, s) for i, (m, s) in enumerate(MODES)]
        for i in range(len(MODES)):
            self.render(i, changed=True)
        self.start_task()

    def render(self, i: int, changed: bool) -> None:
        dest = f"t{i}"
        if changed:
            self.version += 1
            self.disk[dest] = f"v{self.version}"
        self.persisted = [on_render(s, self.disk[dest]) if s.dest == dest else s for s in self.persisted]

    def start_task(self) -> None:
        """The process (re)starts: it reads the disk. The agent records that before marking it running."""
        self.running = False
        self.loaded = dict(self.disk)
        self.persisted = on_task_started(self.persisted)

    def mark_running(self) -> None:
        self.running = True

    def deliver(self, plan: Plan) -> None:
        pending = [s for s in self.persisted if s.rendered != s.delivered and s.change_mode != "noop"]
        if (plan.restart or plan.signals or plan.scripts) and not pending:
            self.spurious += 1
        self.deliveries += 1
        if not self.running:
            return  # fired into a task that is not running: lost (the 25861 bug)
        if plan.restart:
            self.start_task()
            self.mark_running()
            return
        for s in self.persisted:
            if (s.change_mode == "signal" and s.change_signal in plan.signals) or s.dest in plan.scripts:
                self.loaded[s.dest] = self.disk[s.dest]

    def tick(self, crash_before_record: bool = False) -> None:
        plan = plan_actions(
            self.persisted,
            task_running=self.running,
            last_event_wins=self.last_event_wins,
            signal_while_restarting=self.signal_while_restarting,
        )
        if plan.empty:
            return
        was_restart = plan.restart
        self.deliver(plan)
        if crash_before_record:
            return  # the agent died after acting, before recording: it will plan again (at least once)
        if not was_restart:
            self.persisted = on_delivered(self.persisted, plan, last_event_wins=self.last_event_wins)

    def settle(self) -> None:
        self.mark_running()
        for _ in range(5):
            self.tick()

    def stale(self) -> dict[str, tuple[str, str]]:
        return {
            s.dest: (self.loaded.get(s.dest, ""), self.disk[s.dest])
            for s in self.persisted
            if s.change_mode != "noop" and self.loaded.get(s.dest) != self.disk[s.dest]
        }


event = st.one_of(
    st.tuples(st.just("render"), st.integers(0, len(MODES) - 1), st.booleans()),
    st.tuples(st.just("tick"), st.booleans()),
    st.tuples(st.just("task-restarts")),
    st.tuples(st.just("task-running")),
    st.tuples(st.just("agent-crash")),
)


def run(events: list[tuple[object, ...]], **faults: bool) -> World:
    w = World(**faults)
    w.mark_running()
    for ev in events:
        if ev[0] == "render":
            w.render(int(ev[1]), bool(ev[2]))  # type: ignore[call-overload]
        elif ev[0] == "tick":
            w.tick(crash_before_record=bool(ev[1]))
        elif ev[0] == "task-restarts":
            w.start_task()
        elif ev[0] == "task-running":
            w.mark_running()
        # "agent-crash": everything that matters is persisted; memory holds nothing else.
    w.settle()
    return w


def check(w: World) -> None:
    assert w.stale() == {}, f"task runs stale content (loaded, on disk): {w.stale()}"
    assert w.spurious == 0, "an action was delivered with no undelivered change"


SETTINGS = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(event, max_size=40))
def test_loaded_content_always_catches_up_with_the_disk(events: list[tuple[object, ...]]) -> None:
    check(run(events))


def test_first_start_never_fires_an_action() -> None:
    w = World()
    w.mark_running()
    w.tick()
    assert w.deliveries == 0


def test_a_no_op_render_after_a_real_one_does_not_lose_the_action() -> None:
    """The exact nomad-24140 interleaving: changed render, then a no-op render, then the agent reads."""
    w = run([("render", 0, True), ("render", 0, False)])
    check(w)
    assert w.deliveries == 1


def test_restart_wins_and_signals_are_deduplicated() -> None:
    states = [
        TemplateState("a", "signal", "SIGHUP", "2", "1"),
        TemplateState("b", "signal", "SIGHUP", "2", "1"),
        TemplateState("c", "restart", "", "2", "1"),
    ]
    assert plan_actions(states, task_running=True) == Plan(restart=True, settle=("a", "b", "c"))
    assert plan_actions(states[:2], task_running=True).signals == ("SIGHUP",)
    assert plan_actions(states, task_running=False).empty  # queued while the task is not running


def _fails_under(known: list[tuple[object, ...]], **faults: bool) -> None:
    """The property must fail with the fault: on the known field interleaving (run first, always)
    and, independently, by hypothesis's own search (derandomized, so the run is reproducible)."""

    @settings(
        max_examples=1000,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(st.lists(event, max_size=40))
    def search(events: list[tuple[object, ...]]) -> None:
        check(run(events, **faults))

    with pytest.raises(AssertionError, match="stale content"):
        check(run(known, **faults))
    with pytest.raises(AssertionError, match="stale content"):
        search()


def test_fault_last_event_wins_breaks_the_property() -> None:
    """nomad-24140: a changed render, then a no-op render, before the agent reads the event."""
    _fails_under([("render", 0, True), ("render", 0, False), ("tick", False)], last_event_wins=True)


def test_fault_signal_while_restarting_breaks_the_property() -> None:
    """nomad-27960: the task's process has started (read the old content), a render lands before it
    is marked running, and the action is fired into it instead of queued."""
    _fails_under([("task-restarts",), ("render", 0, True), ("tick", False)], signal_while_restarting=True)
