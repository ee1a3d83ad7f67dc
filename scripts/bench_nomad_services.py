"""How long a change of this node's Nomad data holds the agent's main loop while tasks watch the
Nomad services they render (issue 51): one alloc registering SERVICES `provider = "nomad"`
services (a jobspec of that many services), and N tasks, each in its own alloc, whose templates
read `nomadServices` (half of them) or `nomadService "<name>"` (the other half), watched by the
agent's NomadData and NomadWatch as the agent runs them (agent.runner.services,
agent.templates.nomadwatch).

Each change is what the watch wakes on: another alloc's record written (an alloc event), a variable
written, and the services' own alloc written (its registrations' indexes move). A look runs on
this thread exactly as the main loop runs it, so the time a look takes is the time the loop is
held. Prints figures (ms per look, and the builds and digests of the service catalogue per look
when the agent counts them); asserts nothing about speed.

`--each`: every watching alloc registers the services too (the jobspec's group with a count).
`--agent`: the agent's own Core on a fake node (tests.fakes: no processes, no network) with its
main loop running, the jobspec submitted through it, variables written; each look of the watch
timed where it runs, on the loop.

    .venv/bin/python scripts/bench_nomad_services.py [--services 1000] [--tasks 1,10,50] [--changes 5]
        [--each] [--agent]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.runner.services import NomadData
from agent.state import SqliteStore
from agent.state.changes import ChangeIndex
from agent.state.watched import WatchedStore
from agent.structs.model import Service, Task, Template
from agent.structs.records import DesiredStatus, PortAlloc
from agent.templates.nomadwatch import follow, task_view

LIST_ALL = Template("local/all.conf", data="{{ range nomadServices }}{{ .Name }} {{ end }}")
ONE_NAME = Template("local/one.conf", data='{{ range nomadService "svc-7" }}{{ .Port }} {{ end }}')


class Timers:
    """The main loop's timers, run by hand: a look is the only thing that runs."""

    def __init__(self) -> None:
        self.due: list[Callable[[], None]] = []

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        self.due.append(fn)

    def run(self) -> float:
        due, self.due = self.due, []
        started = time.perf_counter()
        for fn in due:
            fn()
        return time.perf_counter() - started


def runner(alloc_id: str, job: str, services: tuple[Service, ...], tasks: tuple[Task, ...]) -> Any:
    """What NomadData reads of an alloc runner (agent.runner.alloc.AllocRunner)."""
    rec = SimpleNamespace(
        address="10.0.0.9", ports=(PortAlloc("http", 25000, 8080),), desired=DesiredStatus.RUN
    )
    return SimpleNamespace(
        id=alloc_id,
        alloc_id=alloc_id,
        job=SimpleNamespace(id=job),
        group=SimpleNamespace(name="g", services=services, tasks=tasks),
        rec=rec,
        alloc_running=lambda: True,
    )


def bench(
    n_services: int, n_tasks: int, n_changes: int, tmp: Path, *, each: bool = False
) -> dict[str, float]:
    """`each`: every watching alloc registers the services too (the jobspec's group with a count)."""
    (tmp / "client").mkdir(exist_ok=True)
    (tmp / "client" / "client-id").write_text("bench-node\n")  # as the agent writes it at start
    changes = ChangeIndex()
    store = WatchedStore(SqliteStore(tmp / f"state-{n_tasks}.db"), changes)
    services = tuple(
        Service(f"svc-{i % 250}", port="http", tags=("v1", f"i{i}"), provider="nomad")
        for i in range(n_services)
    )
    runners: dict[str, Any] = {"alloc-big": runner("alloc-big", "big", services, ())}
    timers = Timers()
    data = NomadData(store, lambda: runners, changes, timers.schedule, "dc1", "", tmp)
    fired: list[str] = []
    watching = []
    for i in range(n_tasks):
        tpl = LIST_ALL if i % 2 == 0 else ONE_NAME
        task = Task("t", "exec", templates=(tpl,))
        alloc = f"alloc-w{i}"
        runners[alloc] = runner(alloc, f"w{i}", services if each else (), (task,))
        watching.append((runners[alloc], task, {"services"} if tpl is LIST_ALL else {"service:svc-7"}))
    for host, task, reads in watching:
        view = task_view(data, host.alloc_id, task)
        follow(data, host, task, view, [reads], partial(fired.append, host.alloc_id))
    timers.run()  # the first look probes every new watch
    counted = hasattr(data, "catalogue_builds")
    figures: dict[str, float] = {}
    for what, change in (
        ("another alloc written", lambda: store.put("alloc", "alloc-other", {"status": "running"})),
        ("a variable written", lambda: store.put("var", "nomad/jobs/x", {"items": {"a": "1"}})),
        ("the services' alloc written", lambda: changes.bump("alloc", "alloc-big")),
    ):
        held = []
        builds_before = getattr(data, "catalogue_builds", 0)
        for _ in range(n_changes):
            change()
            held.append(timers.run())
        figures[what] = statistics.mean(held) * 1000
        figures[what + " max"] = max(held) * 1000
        if counted:
            figures[what + " builds/look"] = (
                getattr(data, "catalogue_builds", 0) - builds_before
            ) / n_changes
    assert not fired, f"no watched service changed, yet {len(fired)} passes fired"
    return figures


def agent_job(n_services: int, n_tasks: int, *, each: bool = False) -> str:
    """A jobspec of `n_services` nomad services (one group), and a group of `n_tasks` allocs whose
    task renders `nomadServices`; `each`: one group of `n_tasks` allocs, each registering the
    services and rendering them."""
    services = "\n".join(
        f"""    service {{
      name     = "svc-{i}"
      provider = "nomad"
      port     = "http"
      tags     = ["v1", "i{i}"]
    }}"""
        for i in range(n_services)
    )
    template = """      template {
        data        = "{{ range nomadServices }}{{ .Name }} {{ end }}"
        destination = "local/all.conf"
        change_mode = "noop"
      }"""
    if each:
        return f"""job "bench" {{
  group "w" {{
    count = {n_tasks}
    network {{
      port "http" {{}}
    }}
{services}
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/sleep"
      }}
{template}
    }}
  }}
}}
"""
    return f"""job "bench" {{
  group "services" {{
    network {{
      port "http" {{}}
    }}
{services}
    task "s" {{
      driver = "exec"
      config {{
        command = "/bin/sleep"
      }}
    }}
  }}
  group "w" {{
    count = {n_tasks}
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/sleep"
      }}
{template}
    }}
  }}
}}
"""


def poll(condition: Callable[[], bool], *, timeout: float, what: str) -> None:
    """Poll `condition` every 20 ms until it holds, or fail after `timeout` seconds naming `what`."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:g}s")
        time.sleep(0.02)


class _Quiet:
    """Holds once the watch has fired no task (and every task is watched again) for `quiet` seconds."""

    def __init__(self, watch: Any, quiet: float) -> None:
        self.watch, self.quiet = watch, quiet
        self.seen: tuple[int, int] = (-1, -1)
        self.since = time.monotonic()

    def __call__(self) -> bool:
        now = (self.watch.fired, self.watch.watching)
        if now != self.seen:
            self.seen, self.since = now, time.monotonic()
        return time.monotonic() - self.since >= self.quiet


def _grown(seen: list[float], before: int) -> bool:
    return len(seen) > before


def bench_agent(
    n_services: int, n_tasks: int, n_changes: int, tmp: Path, *, each: bool = False
) -> tuple[int, list[float]]:
    """The agent's Core on a fake node (tests.fakes: no processes, no network) with its main loop
    running: the jobspec submitted, then `n_changes` variables written through the loop; the time
    each look of the watch held the loop. Returns the jobspec's size and the looks' times."""
    import threading

    from agent.client.core import Core
    from agent.fieldbugs.faults import Faults
    from tests.fakes import FakeNode

    node = FakeNode(tmp)
    core = Core(
        node.store, node.registry, node.network, data_dir=tmp / "data", faults=Faults(), task_dirs=node.dirs
    )
    nomad = core.deps.templates.nomad
    assert isinstance(nomad, NomadData)
    watch = nomad.watcher
    watch.interval = 0.05
    held: list[float] = []
    look = watch._look

    def timed() -> None:
        started = time.perf_counter()
        look()
        held.append(time.perf_counter() - started)

    watch._look = timed  # type: ignore[method-assign]
    loop = threading.Thread(target=core.loop.run, daemon=True)
    loop.start()
    spec = agent_job(n_services, n_tasks, each=each)
    try:
        core.call(lambda: core.job_registry.submit(spec, "hcl"))
        poll(lambda: watch.watching >= n_tasks, timeout=300, what=f"{n_tasks} tasks watched")
        poll(_Quiet(watch, 1.0), timeout=300, what="no watched task fired for 1 s (the allocs started)")
        looks: list[float] = []
        for i in range(n_changes):

            def write(i: int = i) -> None:
                core.store.put("var", "nomad/jobs/unread", {"items": {"n": str(i)}})

            core.call(write)
            before = len(held)  # the next look begins after the write (both on the loop)
            poll(partial(_grown, held, before), timeout=60, what="a look after the write")
            looks.append(held[-1])
        return len(spec.encode()), looks
    finally:
        core.stop()
        loop.join(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--services", type=int, default=1000)
    ap.add_argument("--tasks", default="1,10,50")
    ap.add_argument("--changes", type=int, default=5)
    ap.add_argument(
        "--each", action="store_true", help="every watching alloc registers the services too (a group count)"
    )
    ap.add_argument(
        "--agent", action="store_true", help="the agent's Core on a fake node, the jobspec submitted"
    )
    args = ap.parse_args()
    if args.agent:
        for n in (int(x) for x in args.tasks.split(",")):
            with tempfile.TemporaryDirectory() as tmp:
                size, looks = bench_agent(args.services, n, args.changes, Path(tmp), each=args.each)
            total = args.services * (n if args.each else 1)
            print(
                f"agent: jobspec of {args.services} nomad services ({size / 1000:.0f} KB; {total} "
                f"registered), {n:3d} watching tasks, a variable written: main loop held "
                f"{statistics.mean(looks) * 1000:8.1f} ms per look (max {max(looks) * 1000:.1f})"
            )
        return
    with tempfile.TemporaryDirectory() as tmp:
        for n in (int(x) for x in args.tasks.split(",")):
            figures = bench(args.services, n, args.changes, Path(tmp), each=args.each)
            total = args.services * (n + 1 if args.each else 1)
            for what in ("another alloc written", "a variable written", "the services' alloc written"):
                builds = figures.get(what + " builds/look")
                extra = f", catalogue builds per look {builds:g}" if builds is not None else ""
                print(
                    f"{total} nomad services, {n:3d} watching tasks, {what}: main loop held "
                    f"{figures[what]:8.1f} ms per look (max {figures[what + ' max']:.1f}){extra}"
                )


if __name__ == "__main__":
    main()
