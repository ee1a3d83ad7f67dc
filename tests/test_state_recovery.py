"""A corrupt state database on a real dockerd (root): the agent still starts, moves the file aside,
adopts the docker and exec tasks that are still running (the orphan sweeper, even with no grace
period, leaves them alone), lists them in Nomad's API as running allocs whose description and event
name the moved file, and removes them when an operator stops them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.drivers.cgroups import Cgroups
from agent.network import netns
from agent.runner.adopt import EVENT_ADOPTED
from lab.waits import wait_until
from tests.agent_lab import (
    AgentLab,
    AgentUnderTest,
    NomadRoutes,
    alloc_events,
    build_workload_images,
    why_not_ready,
)

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

JOBS = Path(__file__).parent / "jobspecs"
TIMEOUT = 60.0
PAGE = 4096


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> None:
    build_workload_images(tmp_path_factory.mktemp("images"))


@pytest.fixture
def lab(images: None, tmp_path: Path) -> Iterator[AgentLab]:
    lab = AgentLab(tmp_path / "agentlab")
    yield lab
    lab.cleanup()


def _submit(agent: AgentUnderTest, name: str) -> str:
    text = (JOBS / name).read_text()
    out = agent.core.call(lambda: agent.core.job_registry.submit(text, None, source=name))
    assert len(out["allocs"]) == 1, out
    agent.settle()  # a task's templates render off the main loop: its setup goes on after them
    return str(out["allocs"][0])


def _port(agent: AgentUnderTest, alloc: str) -> int:
    view = agent.core.call(lambda: agent.core.allocs.runner(alloc).view())
    assert view["status"] == "running", view
    return int(view["network"]["ports"][0]["host"])


def _running(lab: AgentLab, alloc: str) -> dict[str, str]:
    return {c.name: c.id for c in lab.containers(alloc) if c.status == "running"}


def _smash_a_middle_page(db: Path) -> None:
    pages = db.stat().st_size // PAGE
    assert pages >= 3, f"{db}: {pages} pages"
    with db.open("r+b") as f:
        f.seek((pages // 2) * PAGE)
        f.write(bytes((i * 37 + 11) % 256 for i in range(PAGE)))


def test_a_corrupt_state_db_is_moved_aside_and_running_tasks_are_adopted_until_stopped(lab: AgentLab) -> None:
    agent = lab.start_agent(sweep_grace=0.0)
    web = _submit(agent, "cni-check-on-restore.hcl")
    exe = _submit(agent, "exec-bridge.hcl")
    web_port, exe_port = _port(agent, web), _port(agent, exe)
    lab.wait_http(web_port, TIMEOUT, "/bin/busybox")
    assert lab.wait_http(exe_port, TIMEOUT, "/index.html")[0] == 200
    containers = _running(lab, web)
    assert len(containers) == 2  # the task and its pause container
    pid = int((agent.core.store.get("handle", f"{exe}/httpd") or {})["id"])
    agent.stop()

    db = lab.data_dir / "state" / "state.db"
    _smash_a_middle_page(db)
    damaged = db.read_bytes()

    agent = lab.start_agent(sweep_grace=0.0)  # restore, adoption, then a sweep with no grace period
    try:
        moved = Path(agent.core.store.recovered_from)
        assert moved.parent == db.parent and moved.name.startswith("state.db.corrupt-")
        assert moved.read_bytes() == damaged and moved.stat().st_mode & 0o777 == 0o600
        assert agent.core.sweeps == 1

        # Still running, untouched: the same containers, the same exec process, both still answer.
        assert _running(lab, web) == containers
        os.kill(pid, 0)
        assert f"{exe}.httpd" in Cgroups.names() and exe in netns.list_names()
        assert lab.wait_http(web_port, TIMEOUT, "/bin/busybox")[0] == 200
        assert lab.wait_http(exe_port, TIMEOUT, "/index.html")[0] == 200

        api = NomadRoutes(agent.core)
        status, allocs = api.call("GET", "/v1/allocations")
        assert status == 200
        assert {a["ID"]: (a["ClientStatus"], a["JobID"]) for a in allocs} == {
            web: ("running", "example"),
            exe: ("running", "exec-web"),
        }
        assert all(str(moved) in a["ClientDescription"] for a in allocs)
        events = alloc_events(api.request("GET", f"/v1/allocation/{web}"))
        assert [e["Type"] for e in events] == [EVENT_ADOPTED]
        assert str(moved) in events[0]["DisplayMessage"]
        assert "not restarted, replaced" in events[0]["DisplayMessage"]

        # A second sweep changes nothing either.
        agent.core.call(agent.core.sweep)
        assert _running(lab, web) == containers

        # The operator stops them: removed, and the sweep after takes their network along.
        status, out = api.call("DELETE", "/v1/job/example")  # `nomad job stop example`
        assert status == 200 and out["EvalID"]
        assert lab.containers(web) == []
        status, out = api.call("POST", f"/v1/allocation/{exe}/stop")
        assert status == 200 and out["EvalID"]
        wait_until(
            lambda: (True if not os.path.exists(f"/proc/{pid}") else None, f"pid {pid}"),
            timeout=TIMEOUT,
            what="the adopted exec task to be gone",
        )
        agent.core.call(agent.core.sweep)
        assert f"{exe}.httpd" not in Cgroups.names() and exe not in netns.list_names()
        assert api.call("GET", "/v1/allocations") == (200, [])
        assert moved.exists()  # never deleted
    finally:
        agent.stop()
