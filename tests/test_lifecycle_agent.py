"""Task lifecycle on a real agent (raw_exec and docker tasks, real processes and containers): the
order Nomad's coordinator gives prestart, sidecar, main and poststop tasks, sidecars killed when the
main task is done, poststop at a job stop, and a prestart never run twice across an agent restart.

Each task appends its name to `alloc/data/order` (the alloc's shared dir, /alloc in a container);
a poststop task copies that file out of the alloc dir, which the teardown removes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lab.waits import wait_until
from tests.agent_lab import AgentLab, AgentUnderTest

WAIT = 60.0  # seconds for a task to do its part, or for the alloc to end

pytestmark = [pytest.mark.root]


def _sh(name: str, script: str, hook: str = "", sidecar: bool = False) -> str:
    lifecycle = f'lifecycle {{\n hook = "{hook}"\n sidecar = {str(sidecar).lower()}\n }}' if hook else ""
    return f"""
    task "{name}" {{
      driver = "raw_exec"
      {lifecycle}
      config {{
        command = "/bin/sh"
        args    = ["-c", <<EOT
{script}
EOT
        ]
      }}
    }}"""


def _poststop_copy(out: Path) -> str:
    """A poststop task "bye" that appends its name, then copies the order out of the alloc dir."""
    script = f'echo bye >> "$NOMAD_ALLOC_DIR/data/order"; cp "$NOMAD_ALLOC_DIR/data/order" {out}'
    return _sh("bye", script, "poststop")


def _job(name: str, job_type: str, *tasks: str) -> str:
    body = "".join(tasks)
    return f"""
job "{name}" {{
  type = "{job_type}"
  group "g" {{
    restart {{
      attempts = 0
      mode     = "fail"
    }}
    {body}
  }}
}}
"""


SIDECAR = """
    task "side" {
      driver = "docker"
      lifecycle {
        hook    = "prestart"
        sidecar = true
      }
      config {
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "/bin/sh"
        args    = ["-c", "echo side >> $NOMAD_ALLOC_DIR/data/order; exec sleep 600"]
      }
    }"""


def _submit(agent: AgentUnderTest, text: str) -> str:
    (alloc,) = agent.core.call(lambda: agent.core.job_registry.submit(text, None, source="test"))["allocs"]
    return str(alloc)


def _view(agent: AgentUnderTest, alloc: str) -> dict[str, Any]:
    views = agent.core.call(agent.core.allocs.views)
    return next(v for v in views if v["id"] == alloc)


def _status(agent: AgentUnderTest, alloc: str, want: str) -> dict[str, Any]:
    def reached() -> tuple[dict[str, Any] | None, str]:
        v = _view(agent, alloc)
        states = {t: s["state"] for t, s in v["tasks"].items()}
        return (v if v["status"] == want else None), f"alloc {v['status']}, tasks {states}"

    return wait_until(reached, timeout=WAIT, what=f"alloc {alloc[:8]} {want}")


def _there(path: Path) -> tuple[str | None, str]:
    return (
        path.read_text() if path.exists() else None
    ), f"{path.name} {'there' if path.exists() else 'not yet'}"


def test_prestart_then_main_then_sidecar_killed_then_poststop_in_a_batch_job(
    lab: AgentLab, tmp_path: Path
) -> None:
    out = tmp_path / "order.out"
    job = _job(
        "lcbatch",
        "batch",
        # the prestart task ends once the sidecar has written (30 s at most): started beside it, the
        # sidecar is there before main however slow docker is; started after it, it is not
        _sh(
            "init",
            'for i in $(seq 300); do grep -qx side "$NOMAD_ALLOC_DIR/data/order" 2>/dev/null && break\n'
            "sleep 0.1; done\n"
            'echo init >> "$NOMAD_ALLOC_DIR/data/order"',
            "prestart",
        ),
        SIDECAR,
        _sh("main", 'echo main >> "$NOMAD_ALLOC_DIR/data/order"; sleep 1'),
        _poststop_copy(out),
    )
    agent = lab.start_agent(raw_exec_enabled=True)
    try:
        alloc = _submit(agent, job)
        view = _status(agent, alloc, "complete")
        order = out.read_text().split()
        assert sorted(order[:2]) == ["init", "side"] and order[2:] == ["main", "bye"], order
        tasks = view["tasks"]
        assert {t: (s["state"], s["failed"]) for t, s in tasks.items()} == {
            "init": ("dead", False),
            "side": ("dead", False),
            "main": ("dead", False),
            "bye": ("dead", False),
        }
        side_events = [e.type for e in agent.core.call(lambda: agent.core.store.events(alloc, "side"))]
        assert "Main Tasks Dead" in side_events, side_events
        assert lab.containers(alloc) == [], "the sidecar's container was stopped and removed"
    finally:
        agent.stop()


WEB_UNTIL_KILLED = """order="$NOMAD_ALLOC_DIR/data/order"
echo web >> "$order"
trap 'echo web-killed >> "$order"; exit 0' INT TERM
while :; do sleep 0.1; done"""


def test_a_job_stop_runs_poststop_after_the_main_task_is_killed(lab: AgentLab, tmp_path: Path) -> None:
    out = tmp_path / "stopped.out"
    job = _job(
        "lcstop",
        "service",
        _sh("web", WEB_UNTIL_KILLED),
        _poststop_copy(out),
    )
    agent = lab.start_agent(raw_exec_enabled=True)
    try:
        alloc = _submit(agent, job)
        alloc_dir = lab.data_dir / "alloc" / alloc
        wait_until(lambda: _there(alloc_dir / "alloc" / "data" / "order"), timeout=WAIT, what="web up")
        assert not out.exists(), "poststop ran before the stop"
        agent.stop_job("lcstop")
        assert out.read_text().split() == ["web", "web-killed", "bye"]
        assert _view(agent, alloc)["tasks"]["bye"]["state"] == "dead"
    finally:
        agent.stop()


def test_a_prestart_finished_before_an_agent_restart_is_not_run_again(lab: AgentLab, tmp_path: Path) -> None:
    gate = tmp_path / "go"
    job = _job(
        "lcrestore",
        "service",
        _sh(
            "init",
            f'echo init >> "$NOMAD_ALLOC_DIR/data/order"; while [ ! -e {gate} ]; do sleep 0.1; done',
            "prestart",
        ),
        _sh("web", 'echo web >> "$NOMAD_ALLOC_DIR/data/order"; exec sleep 600'),
    )
    agent = lab.start_agent(raw_exec_enabled=True)
    alloc = _submit(agent, job)
    order = lab.data_dir / "alloc" / alloc / "alloc" / "data" / "order"
    wait_until(lambda: _there(order), timeout=WAIT, what="the prestart task running")
    # the agent stops while the prestart runs: the main task has not started, nor will at restore
    agent.stop()
    agent = lab.start_agent(raw_exec_enabled=True)
    try:
        assert order.read_text().split() == ["init"]
        assert _view(agent, alloc)["tasks"]["web"]["state"] == "pending"
        gate.write_text("")

        def main_started() -> tuple[list[str] | None, str]:
            lines = order.read_text().split()
            return (lines if "web" in lines else None), str(lines)

        wait_until(main_started, timeout=WAIT, what="the main task started after the prestart's exit")
        # and once more across a restart: the prestart completed, it is not run again
        agent.stop()
        agent = lab.start_agent(raw_exec_enabled=True)
        view = _status(agent, alloc, "running")
        assert order.read_text().split() == ["init", "web"], "a task ran twice"
        assert view["tasks"]["init"]["state"] == "dead" and not view["tasks"]["init"]["failed"]
        agent.stop_job("lcrestore")
    finally:
        agent.stop()


def test_a_batch_leader_that_exits_stops_the_group_and_the_alloc_completes(
    lab: AgentLab, tmp_path: Path
) -> None:
    """`leader = true`: its exit 0 ends the group: the other main task (trapping the kill signal to
    write it down) is stopped with "Leader Task Dead", then the poststop runs, then complete."""
    out = tmp_path / "leader.out"
    lead = _sh("lead", 'echo lead >> "$NOMAD_ALLOC_DIR/data/order"; sleep 1').replace(
        'driver = "raw_exec"', 'driver = "raw_exec"\n      leader = true'
    )
    job = _job("lcleader", "batch", lead, _sh("web", WEB_UNTIL_KILLED), _poststop_copy(out))
    agent = lab.start_agent(raw_exec_enabled=True)
    try:
        alloc = _submit(agent, job)
        view = _status(agent, alloc, "complete")
        assert sorted(out.read_text().split()[:2]) == ["lead", "web"]
        assert out.read_text().split()[2:] == ["web-killed", "bye"], "web was killed by the leader's end"
        assert view["tasks"]["web"]["state"] == "dead" and not view["tasks"]["web"]["failed"]
        web_events = [e.type for e in agent.core.call(lambda: agent.core.store.events(alloc, "web"))]
        assert "Leader Task Dead" in web_events, web_events
    finally:
        agent.stop()


def test_restart_all_tasks_runs_the_finished_prestart_again_then_the_main_task(lab: AgentLab) -> None:
    """`nomad alloc restart -all-tasks` on real processes: the prestart that had finished runs
    again, and the main task (stopped) starts only after it, as at the alloc's first start."""
    job = _job(
        "lcrestartall",
        "service",
        _sh("init", 'echo init >> "$NOMAD_ALLOC_DIR/data/order"', "prestart"),
        _sh("web", 'echo web >> "$NOMAD_ALLOC_DIR/data/order"; exec sleep 600'),
    )
    agent = lab.start_agent(raw_exec_enabled=True)
    try:
        alloc = _submit(agent, job)
        order = lab.data_dir / "alloc" / alloc / "alloc" / "data" / "order"

        def lines(n: int) -> tuple[list[str] | None, str]:
            got = order.read_text().split() if order.exists() else []
            return (got if len(got) >= n else None), str(got)

        wait_until(lambda: lines(2), timeout=WAIT, what="init then web")
        agent.core.call(lambda: agent.core.allocs.runner(alloc).user_restart_all())
        assert wait_until(lambda: lines(4), timeout=WAIT, what="init then web again") == [
            "init",
            "web",
            "init",
            "web",
        ]
        view = _status(agent, alloc, "running")
        assert (view["tasks"]["init"]["restarts"], view["tasks"]["web"]["restarts"]) == (1, 1)
        agent.stop_job("lcrestartall")
    finally:
        agent.stop()
