"""A template that reads Nomad variables or services renders again when what it read changes, as
consul-template's blocking queries wake its runner (agent.templates.nomadwatch): a unit test of the
watch, then the agent's Core on a fake node with its main loop running, a variable written and a
service started as the Nomad API would."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from agent.core import Core
from agent.faults import Faults
from agent.runner.services import NomadData
from agent.templates.nomadwatch import NomadWatch
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
    loop = threading.Thread(target=core.run_loop, daemon=True)
    loop.start()
    try:
        _put_var(core, "nomad/jobs/app", "first-password")
        (alloc,) = core.call(lambda: core.submit(JOB, "hcl"))["allocs"]
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
