"""A task's templates after an agent restart, against a stand-in task host (no docker): a
change_mode script owed to a restored task runs exactly once, inside the task; the
`script-change-before-handle` fault (nomad-15851/24051) loses it with a "no driver handle" event."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.fieldbugs.faults import Faults
from agent.state import SqliteStore
from agent.structs.model import ChangeScript, Task, Template
from agent.templates.runner import TaskHost, TaskTemplates, TemplateDeps

SCRIPT = ChangeScript("/bin/sh", ("-c", "date >> /local/script-runs"), timeout=5.0)
TASK = Task(
    name="web",
    driver="docker",
    templates=(
        Template(
            "local/serial.txt",
            data='{{ with secret "pki_int/issue/web" }}{{ .Data.serial }}{{ end }}',
            change_mode="script",
            change_script=SCRIPT,
            splay=0.0,
        ),
    ),
)


class NewSerialEachFetch:
    """A dynamic secret issued anew on every fetch, as a PKI cert is on every agent start."""

    def __init__(self) -> None:
        self.issued = 0

    def list_keys(self, path: str) -> list[str]:

        return []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        self.issued += 1
        return {"serial": f"serial-{self.issued}"}, 3600.0


class StandInHost:
    """A TaskHost whose task is running and has a handle; it records what it was asked to do."""

    def __init__(self, root: Path, vault: NewSerialEachFetch | None = None) -> None:
        self.root = root
        self.vault = vault  # the task's own Vault source (a task with a vault block)
        self.timers: list[tuple[float, Callable[[], None]]] = []
        self.events: list[tuple[str, str]] = []
        self.scripts_run: list[list[str]] = []
        self.task_name = TASK.name  # the one task it hosts

    @property
    def alloc_id(self) -> str:
        return "11111111-2222-4333-8444-555555555555"

    def alloc_running(self) -> bool:
        return True

    def env(self) -> dict[str, str]:
        return {"NOMAD_ALLOC_ID": self.alloc_id}

    @property
    def task_dir(self) -> Path:
        return self.root / self.task_name

    def task_vault(self) -> NewSerialEachFetch | None:
        return self.vault

    def running(self) -> bool:
        return True

    def event(self, type_: str, message: str) -> None:
        self.events.append((type_, message))

    def signal(self, sig: str) -> None:
        raise AssertionError("no signal templates here")

    def restart_for_template(self) -> None:
        raise AssertionError("no restart expected")

    def exec(self, argv: list[str], timeout: float, then: Callable[[int, str], None]) -> None:
        self.scripts_run.append(argv)
        then(0, "")

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        self.timers.append((delay, fn))

    def run_due_timers(self, horizon: float = 60.0) -> None:
        """Run the timers due within `horizon` seconds (the change actions), not the re-renders
        scheduled at 60-80 % of the secret's hour-long TTL."""
        due = [t for t in self.timers if t[0] < horizon]
        self.timers[:] = [t for t in self.timers if t[0] >= horizon]
        for _, fn in due:
            fn()


def _templates(
    host: StandInHost, store: SqliteStore, vault: NewSerialEachFetch, faults: str
) -> TaskTemplates:
    checked: TaskHost = host  # the stand-in satisfies the protocol (mypy checks this line)
    host.vault = vault
    deps = TemplateDeps(store, host.schedule, bugs=Faults.parse(faults).bugs())
    return TaskTemplates(checked, TASK, deps)


def _restart_agent(tmp_path: Path, faults: str) -> tuple[StandInHost, TaskTemplates]:
    """Start the task (it loads serial-1), then 'restart the agent': a new runner on the same state
    re-renders (serial-2 on disk) and restores. Returns the restored runner after restore."""
    vault = NewSerialEachFetch()
    store = SqliteStore(tmp_path / "state" / "state.db")
    first = StandInHost(tmp_path / "alloc")
    tt = _templates(first, store, vault, faults)
    tt.render_all()
    tt.task_started()
    first.timers.clear()  # the first agent's re-render timers die with it
    restored = StandInHost(tmp_path / "alloc")
    tt = _templates(restored, store, vault, faults)
    assert tt.render_all(), "the re-issued secret changes the file"
    tt.after_restore()
    restored.run_due_timers()
    return restored, tt


def test_script_owed_after_restore_runs_exactly_once(tmp_path: Path) -> None:
    runner, tt = _restart_agent(tmp_path, faults="")
    assert runner.scripts_run == [[SCRIPT.command, *SCRIPT.args]]
    assert [t for t, _ in runner.events if t.startswith("Template Script")] == ["Template Script"]
    (state,) = tt.states()
    assert state.delivered == state.rendered
    tt.act()  # nothing is owed any more: no second run
    assert len(runner.scripts_run) == 1


@pytest.mark.parametrize("later_ticks", [0, 3])
def test_fault_script_change_before_handle_loses_the_script(tmp_path: Path, later_ticks: int) -> None:
    runner, tt = _restart_agent(tmp_path, faults="script-change-before-handle")
    for _ in range(later_ticks):
        tt.act()
        runner.run_due_timers()
    assert runner.scripts_run == [], "the script must not run: there is no driver handle yet"
    failed = [m for t, m in runner.events if t == "Template Script Failed"]
    assert len(failed) == 1 and "no driver handle" in failed[0], runner.events
    (state,) = tt.states()
    assert state.delivered == state.rendered, "the lost action is recorded as delivered"


class CountingSource:
    """Issues a new serial per fetch after a short wait, and records how many fetches overlapped."""

    def __init__(self, round_trip: float = 0.02) -> None:
        self.round_trip = round_trip
        self.lock = threading.Lock()
        self.fetched: list[str] = []
        self.issued = 0
        self.in_flight = 0
        self.most = 0

    def list_keys(self, path: str) -> list[str]:
        return []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        with self.lock:
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.fetched.append(params["common_name"])
            self.issued += 1
            n = self.issued
        time.sleep(self.round_trip)  # a Vault round trip: what lets fetches overlap, not a synchronisation
        with self.lock:
            self.in_flight -= 1
        return {"serial": f"{params['common_name']}-{n}"}, 3600.0


SERIAL_OF = '{{ with secret "pki_int/issue/web" "common_name=NAME" }}{{ .Data.serial }}{{ end }}'


def _twenty_certs(
    tmp_path: Path, clock: Callable[[], float], seed: int = 0, round_trip: float = 0.02
) -> tuple[StandInHost, CountingSource, TaskTemplates, list[str]]:
    """A task of 20 templates, each its own certificate (one hour), rendered at its setup; each fetch
    takes `round_trip` seconds (what lets a pass's fetches overlap)."""
    names = [f"t{i}" for i in range(20)]
    task = Task(
        name="web",
        driver="docker",
        templates=tuple(
            Template(f"secrets/{n}", data=SERIAL_OF.replace("NAME", n), change_mode="noop", splay=0.0)
            for n in names
        ),
    )
    source = CountingSource(round_trip)
    host = StandInHost(tmp_path / "alloc")
    host.vault = source  # type: ignore[assignment]
    store = SqliteStore(tmp_path / "state" / "state.db")
    deps = TemplateDeps(store, host.schedule, monotonic=clock, jitter=random.Random(seed).random)
    tt = TaskTemplates(host, task, deps)
    tt.render_all()
    assert sorted(source.fetched) == sorted(names) and source.most == 1
    source.fetched.clear()
    source.most = 0
    return host, source, tt, names


def _serials(tmp_path: Path, names: list[str]) -> dict[str, int]:
    files = {n: (tmp_path / "alloc" / "web" / "secrets" / n).read_text() for n in names}
    return {n: int(text.split("-")[1]) for n, text in files.items()}


def _next_pass(host: StandInHost) -> tuple[float, Callable[[], None]]:
    """The one re-render timer the last pass left (and forget it: the test runs it); the other
    timers are the change action's. The next secret may be due within a second of the last."""
    (timer,) = [
        (delay, fn) for delay, fn in host.timers if getattr(fn, "__func__", None) is not TaskTemplates.act
    ]
    host.timers.clear()
    return timer


def test_a_periodic_pass_fetches_the_due_secrets_concurrently_once_each(tmp_path: Path) -> None:
    """20 templates, each its own certificate: the first pass (nothing known yet) fetches one after
    the other; a pass once all 20 are due fetches them again, several at once (at most
    PREFETCH_PARALLEL), each exactly once, and every file gets its own new serial."""
    from agent.templates.runner import PREFETCH_PARALLEL

    now = [1000.0]
    host, source, tt, names = _twenty_certs(tmp_path, lambda: now[0])
    _, rerender = _next_pass(host)
    now[0] += 0.8 * 3600 + 1  # past the latest point any of them may be renewed at
    rerender()
    assert sorted(source.fetched) == sorted(names), "each secret fetched exactly once in the pass"
    assert 1 < source.most <= PREFETCH_PARALLEL, source.most
    assert all(serial > 20 for serial in _serials(tmp_path, names).values())
    assert tt.passes == 2 and tt.fetches == 40


# Seeds 2-5 put two of the 20 due within a second of each other (the next pass's timer < 1 s).
@pytest.mark.parametrize("seed", range(6))
def test_secrets_issued_together_are_renewed_each_on_its_own_schedule(tmp_path: Path, seed: int) -> None:
    """consul-template renews each secret at its own random point late in its life, so certificates
    issued together drift apart: a pass fetches only those due, renders the others from what it
    holds (their files unchanged), and its next pass is timed at the next one due. A hundred
    certificates in one task are then never issued again in one burst (make bench-templates)."""
    now = [1000.0]
    # no round trip: which secrets a pass fetches is the point here, not how they overlap
    host, source, tt, names = _twenty_certs(tmp_path, lambda: now[0], seed, round_trip=0.0)
    before = _serials(tmp_path, names)
    delay, rerender = _next_pass(host)
    assert 0.6 * 3600 <= delay <= 0.8 * 3600
    passes = 0
    while set(before) - set(source.fetched):
        now[0] += delay
        fetched_before = len(source.fetched)
        rerender()
        passes += 1
        got = source.fetched[fetched_before:]
        assert got, f"pass {passes} at +{now[0] - 1000:.0f}s fetched nothing: it was timed for none"
        after = _serials(tmp_path, names)
        assert {n for n in names if after[n] != before[n]} == set(source.fetched), (
            "a file changes exactly when its own secret was fetched again"
        )
        assert len(got) == len(set(got)), "no secret fetched twice in one pass"
        delay, rerender = _next_pass(host)
    assert passes > 1, "20 secrets issued together were all renewed in one pass: no drift"
    assert now[0] - 1000 <= 0.8 * 3600 + 1, "every secret renewed before 80 % of its life"
    assert tt.fetches == 40


def test_a_periodic_pass_renders_only_the_templates_whose_reads_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """consul-template re-renders a template only when one of its dependencies changed. A periodic
    pass renders (twice, as consul-template's runner does) the templates whose secret it fetched
    again and every template that read something no hold covers (a file), and skips the others:
    their files and states stay, their secrets stay held. A hundred certificates in one task then
    cost a pass the few that are due, not two hundred renders (make bench-templates)."""
    import agent.templates.runner as runner_module

    names = [f"t{i}" for i in range(20)]
    task = Task(
        name="web",
        driver="docker",
        templates=(
            *(
                Template(f"secrets/{n}", data=SERIAL_OF.replace("NAME", n), change_mode="noop", splay=0.0)
                for n in names
            ),
            Template("local/copy", data='{{ file "local/input" }}', change_mode="noop"),
            Template("local/env", data='{{ env "NOMAD_ALLOC_ID" }}', change_mode="noop"),
        ),
    )
    now = [1000.0]
    source = CountingSource()
    host = StandInHost(tmp_path / "alloc")
    host.vault = source  # type: ignore[assignment]
    (host.task_dir / "local").mkdir(parents=True)
    (host.task_dir / "local" / "input").write_text("one")
    deps = TemplateDeps(
        SqliteStore(tmp_path / "state" / "state.db"),
        host.schedule,
        monotonic=lambda: now[0],
        jitter=random.Random(7).random,
    )
    tt = TaskTemplates(host, task, deps)
    rendered: list[str] = []
    real_render = runner_module.render

    def counting(tpl: Template, *args: Any, **kwargs: Any) -> Any:
        rendered.append(tpl.destination)
        return real_render(tpl, *args, **kwargs)

    monkeypatch.setattr(runner_module, "render", counting)
    tt.render_all()
    assert len(rendered) == 2 * 22, "a task's setup renders every template"
    source.fetched.clear()
    before = _serials(tmp_path, names)
    (host.task_dir / "local" / "input").write_text("two")
    passes = 0
    while set(before) - set(source.fetched):
        delay, rerender = _next_pass(host)
        now[0] += delay
        fetched_before, rendered_before = len(source.fetched), len(rendered)
        rerender()
        passes += 1
        due = {f"secrets/{n}" for n in source.fetched[fetched_before:]}
        this_pass = rendered[rendered_before:]
        assert sorted(this_pass) == sorted([*due, *due, "local/copy", "local/copy"]), this_pass
        assert (host.task_dir / "local" / "copy").read_text() == "two"
        states = tt.states()
        assert len({s.renew_by for s in states}) == 1, "every template's state has the next re-issue time"
    assert passes > 1 and sorted(source.fetched) == sorted(names), "each secret renewed, on its own"
    after = _serials(tmp_path, names)
    assert all(after[n] != before[n] for n in names)
    assert "local/env" not in rendered[2 * 22 :], "nothing the env template read changed"
