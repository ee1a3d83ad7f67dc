"""A template that reads Nomad variables or services renders again when what it read changes, as
consul-template's blocking queries wake its runner (agent.templates.nomadwatch): a unit test of the
watch, then the agent's Core on a fake node with its main loop running, a variable written and a
service started as the Nomad API would."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent.client.core import Core
from agent.fieldbugs.faults import Faults
from agent.runner.services import NomadData
from agent.state import SqliteStore
from agent.state.changes import ChangeIndex
from agent.state.watched import WatchedStore
from agent.structs.model import Service, Task, Template
from agent.structs.records import DesiredStatus, PortAlloc
from agent.templates import nomadfuncs
from agent.templates.nomadwatch import NomadWatch, follow, task_view
from tests.fakes import FakeNode


class Timers:
    def __init__(self) -> None:
        self.due: list[Callable[[], None]] = []

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        self.due.append(fn)

    def run(self) -> None:
        due, self.due = self.due, []
        for fn in due:
            fn()


def test_the_watch_probes_on_a_change_of_the_index_or_a_new_watch_and_fires_once() -> None:
    timers, index = Timers(), [10]
    watch = NomadWatch(lambda: index[0], timers.schedule)
    probes: list[str] = []
    fired: list[str] = []
    answer: dict[str, bool | None] = {"a": False, "b": False}

    def probe(key: str) -> Callable[[], bool | None]:
        return lambda: probes.append(key) or answer[key]

    watch.watch("a", probe("a"), lambda: fired.append("a"))
    assert len(timers.due) == 1
    watch.watch("b", probe("b"), lambda: fired.append("b"))
    assert len(timers.due) == 1  # one timer for every watched task
    timers.run()
    assert probes == ["a", "b"] and not fired  # new watches are probed once whatever the index
    timers.run()
    assert probes == ["a", "b"]  # the index did not move: nothing asked
    index[0] = 11
    answer["a"] = True
    timers.run()
    assert probes == ["a", "b", "a", "b"] and fired == ["a"]
    assert watch.watching == 1  # fired once; the task's next pass watches it again
    index[0] = 12
    answer["b"] = None  # its alloc stopped: dropped
    timers.run()
    assert watch.watching == 0 and fired == ["a"]
    assert not timers.due  # nothing runs while nothing is watched


JOB = """
job "app" {
  group "g" {
    network {
      port "http" {}
    }
    service {
      name     = "web"
      provider = "nomad"
      port     = "http"
      tags     = ["v1"]
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/app" }}password={{ .password }}{{ end }}
          {{ range nomadService "web" }}web={{ .Address }}:{{ .Port }} {{ end }}
        EOT
        destination = "local/app.conf"
        change_mode = "noop"
      }
    }
  }
}
"""


def _put_var(core: Core, path: str, password: str) -> None:
    def write() -> None:
        index = core.changes.current() + 1
        core.store.put(
            "var",
            path,
            {
                "items": {"password": password},
                "create_index": index,
                "modify_index": index,
                "create_time": time.time_ns(),
                "modify_time": time.time_ns(),
            },
        )

    core.call(write)


def _wait_for(path: Path, want: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    text = ""
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if want in text:
            return text
        time.sleep(0.05)
    raise AssertionError(f"{want!r} never rendered; last: {text!r}")


def test_a_variable_written_and_a_service_started_re_render_the_template(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    core = Core(
        node.store,
        node.registry,
        node.network,
        data_dir=tmp_path / "data",
        faults=Faults(),
        task_dirs=node.dirs,
    )
    nomad = core.deps.templates.nomad
    assert isinstance(nomad, NomadData)
    nomad.watcher.interval = 0.05
    loop = threading.Thread(target=core.loop.run, daemon=True)
    loop.start()
    try:
        _put_var(core, "nomad/jobs/app", "first-password")
        (alloc,) = core.call(lambda: core.job_registry.submit(JOB, "hcl"))["allocs"]
        conf = tmp_path / "data" / "alloc" / alloc / "t" / "local" / "app.conf"
        # The first render ran in the alloc's setup, before its service was registered; the alloc's
        # start registers it, and the template renders again with it.
        first = _wait_for(conf, "web=")
        assert "password=first-password" in first
        _put_var(core, "nomad/jobs/app", "second-password")
        assert "password=second-password" in _wait_for(conf, "second-password")
        fired = nomad.watcher.fired
        _put_var(core, "nomad/jobs/other", "not-read")  # another job's variable: no pass
        time.sleep(0.5)
        assert nomad.watcher.fired == fired
        assert "not-read" not in conf.read_text()
    finally:
        core.stop()
        loop.join(timeout=10)


# -- one change, many watching tasks (issue 51) --------------------------------------------------


class CountedGroup:
    """An alloc's group whose services count how often they are read (a build of its registrations)."""

    def __init__(self, services: tuple[Service, ...], tasks: tuple[Task, ...] = ()) -> None:
        self.name = "g"
        self._services = services
        self.tasks = tasks
        self.reads = 0

    @property
    def services(self) -> tuple[Service, ...]:
        self.reads += 1
        return self._services


def _runner(alloc_id: str, group: CountedGroup) -> Any:
    """What NomadData reads of an alloc runner (agent.runner.alloc.AllocRunner)."""
    return SimpleNamespace(
        id=alloc_id,
        alloc_id=alloc_id,
        job=SimpleNamespace(id=f"job-{alloc_id}"),
        group=group,
        rec=SimpleNamespace(
            address="10.0.0.9", ports=(PortAlloc("http", 25000, 8080),), desired=DesiredStatus.RUN
        ),
        alloc_running=lambda: True,
    )


class Node:
    """NomadData over a store that moves the change index, one alloc registering `services`, and
    watching tasks (one per alloc) that read what `reads` says, as the template runner follows them."""

    def __init__(self, tmp_path: Path, services: tuple[Service, ...], reads: list[set[str]]) -> None:
        (tmp_path / "client").mkdir()
        (tmp_path / "client" / "client-id").write_text("node-1\n")
        self.changes = ChangeIndex()
        self.store = WatchedStore(SqliteStore(tmp_path / "state.db"), self.changes)
        self.big = CountedGroup(services)
        self.runners: dict[str, Any] = {"alloc-big": _runner("alloc-big", self.big)}
        self.timers = Timers()
        self.data = NomadData(
            self.store, lambda: self.runners, self.changes, self.timers.schedule, "dc1", "", tmp_path
        )
        self.fired: list[str] = []
        self.reads = reads
        for i, _ in enumerate(reads):
            task = Task("t", "exec", templates=(Template("local/x", data="{{ nomadServices }}"),))
            self.runners[f"alloc-w{i}"] = _runner(f"alloc-w{i}", CountedGroup((), (task,)))
            self.follow(i)
        self.timers.run()  # the first look probes each new watch

    def follow(self, i: int) -> None:
        """Task i's render pass ended: watch what it read."""
        host = self.runners[f"alloc-w{i}"]
        (task,) = host.group.tasks
        view = task_view(self.data, host.alloc_id, task)
        follow(self.data, host, task, view, [self.reads[i]], lambda: self.fired.append(f"w{i}"))

    def set_services(self, services: tuple[Service, ...]) -> None:
        """The services' alloc changed (a new version of it, written to the store)."""
        self.big._services = services
        self.store.put("alloc", "alloc-big", {"status": "running"})

    def look(self) -> list[str]:
        """One look of the watch; the tasks it fired (each then renders and is followed again)."""
        self.fired.clear()
        self.timers.run()
        fired = sorted(self.fired)
        for name in fired:
            self.follow(int(name[1:]))
        return fired


def _services(n: int, tag: str = "v1") -> tuple[Service, ...]:
    return tuple(
        Service(f"svc-{i % 10}", port="http", tags=(tag, f"i{i}"), provider="nomad") for i in range(n)
    )


def test_one_change_builds_and_hashes_the_service_catalogue_once_however_many_tasks_watch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stubs: list[int] = []
    as_json: list[int] = []
    real_stubs, real_json = nomadfuncs.service_stubs, nomadfuncs._service_json

    def counted_stubs(services: Any) -> Any:
        stubs.append(1)
        return real_stubs(services)

    def counted_json(service: Any) -> Any:
        as_json.append(1)
        return real_json(service)

    monkeypatch.setattr(nomadfuncs, "service_stubs", counted_stubs)
    monkeypatch.setattr(nomadfuncs, "_service_json", counted_json)
    watchers = 8
    node = Node(tmp_path, _services(100), [{"services"}, {"service:svc-3"}] * (watchers // 2))
    node.big.reads, stubs[:], as_json[:] = 0, [], []
    node.set_services(_services(100, tag="v2"))  # every service changed: each watching task fires
    assert node.look() == sorted(f"w{i}" for i in range(watchers))
    # once per change, not once per watching task: the services' alloc read once, the
    # nomadServices list worked out once, the 10 instances of svc-3 shaped once
    assert (node.big.reads, len(stubs), len(as_json)) == (1, 1, 10)
    node.big.reads, stubs[:], as_json[:] = 0, [], []
    node.store.put("alloc", "alloc-other", {"status": "running"})  # another alloc's event
    assert node.look() == []
    assert (node.big.reads, len(stubs), len(as_json)) == (0, 0, 0)  # nothing of the services again


def test_a_watching_task_renders_again_exactly_when_what_it_reads_changes(tmp_path: Path) -> None:
    # As consul-template's watcher: a blocking query that returns the same data wakes no render
    # (its view keeps the last data and renders on a difference only); the catalogue is shared,
    # the answer is still each task's own.
    svc = _services(30)
    node = Node(tmp_path, svc, [{"services"}, {"service:svc-3"}, {"service:svc-4"}, {"var"}])
    assert node.look() == []
    node.set_services(svc)  # the alloc written, its services as they were: indexes move, no pass
    assert node.look() == []
    moved = tuple(
        Service(s.name, port="9001", tags=s.tags, provider="nomad") if s.name == "svc-3" else s for s in svc
    )
    node.set_services(moved)  # svc-3's port: its reader only (nomadServices lists names and tags)
    assert node.look() == ["w1"]
    assert node.look() == []  # fired once; nothing moved since
    node.set_services((*moved, Service("new", port="http", provider="nomad")))  # a new name
    assert node.look() == ["w0"]
    tagged = tuple(replace_tags(s, ("v9",)) if s.name == "svc-4" else s for s in (*moved,))
    node.set_services(tagged)  # svc-4's tags, and "new" gone: the list and svc-4's reader
    assert node.look() == ["w0", "w2"]
    node.store.put("var", "nomad/jobs/job-alloc-w3", {"items": {"a": "1"}})  # w3's own variable
    assert node.look() == ["w3"]
    node.store.put("var", "nomad/jobs/another", {"items": {"a": "1"}})  # no task's variable
    node.store.put("alloc", "alloc-other", {"status": "running"})
    assert node.look() == []
    node.runners["alloc-big"].alloc_running = lambda: False  # stopped (then written, as AllocState.save)
    node.store.put("alloc", "alloc-big", {"status": "complete"})
    assert node.look() == ["w0", "w1", "w2"]


def replace_tags(s: Service, tags: tuple[str, ...]) -> Service:
    return Service(s.name, port=s.port, tags=tags, provider=s.provider)
