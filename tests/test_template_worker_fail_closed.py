"""The template render worker fails closed (issue 32, item 5): a root agent's worker must drop to
nobody; when it cannot, with `template_worker_fail_closed` every render fails with the reason and the
agent's health says why, instead of rendering as root from then on.

The worker really cannot drop here: the Python it runs is reached through a directory only root may
enter (as when nobody cannot read the agent's venv on a node), so its exec as nobody fails."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.command.config import Config
from agent.command.daemon import Agent, health_stats
from agent.structs.model import Template
from agent.templates import worker
from agent.templates.errors import TemplateRenderError
from lab.waits import wait_until

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (the worker drops to nobody)"),
]

REQUEST = {"text": "hello {{ 1 }}", "name": "t", "left": "{{", "right": "}}", "missing_key_error": False}
TPL = Template(destination="local/out.txt", data=REQUEST["text"])


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[worker._WorkerPool]:
    """A fresh pool in place of the agent's (configure, run_in_worker and status use it)."""
    fresh = worker._WorkerPool()
    monkeypatch.setattr(worker, "_POOL", fresh)
    yield fresh
    fresh.close()


# A Python that nobody may run (the controller's own may live under root's 0700 home): the system's.
SYSTEM_PYTHON = Path(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")


@pytest.fixture
def nobody_python(monkeypatch: pytest.MonkeyPatch) -> Path:
    """sys.executable as a node's agent has it: a Python nobody may run."""
    if not SYSTEM_PYTHON.exists():
        pytest.skip(f"no {SYSTEM_PYTHON} (a Python of this version that nobody may run)")
    monkeypatch.setattr(sys, "executable", str(SYSTEM_PYTHON))
    return SYSTEM_PYTHON


@pytest.fixture
def unreadable_python(nobody_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """sys.executable through a 0700 root directory: nobody cannot exec it."""
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    python = private / "python3"
    python.symlink_to(nobody_python)
    monkeypatch.setattr(sys, "executable", str(python))
    return python


def _render() -> str:
    return worker.run_in_worker(TPL, dict(REQUEST), {}, timeout=10.0, max_bytes=1 << 20)


def _worker_uid(pool: worker._WorkerPool) -> int:
    assert pool.worker is not None
    return os.stat(f"/proc/{pool.worker.proc.pid}").st_uid


def test_fail_closed_refuses_every_render_with_the_reason_and_tries_again_each_time(
    pool: worker._WorkerPool, unreadable_python: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    worker.configure(fail_closed=True)
    for _ in range(2):  # not once and then as root: every render
        with pytest.raises(TemplateRenderError) as refused:
            _render()
        msg = str(refused.value)
        assert "local/out.txt" in msg and "cannot run as nobody" in msg, msg
        assert "template_worker_fail_closed" in msg, msg
        assert pool.worker is None and pool.unprivileged, "a worker ran as the agent's user (root)"
    status = worker.status()
    assert status["state"] == "refused" and status["fail_closed"] is True and status["user"] == "nobody"
    assert "Permission denied" in status["error"] or "permission" in status["error"].lower(), status
    # The cause fixed (nobody may run the agent's Python again): the next render works, as nobody.
    monkeypatch.setattr(sys, "executable", str(SYSTEM_PYTHON))
    assert _render() == "hello 1"
    assert _worker_uid(pool) == 65534
    assert worker.status() == {"user": "nobody", "fail_closed": True, "state": "ok", "error": ""}


def test_without_fail_closed_the_worker_runs_as_root_and_health_says_so(
    pool: worker._WorkerPool, unreadable_python: Path
) -> None:
    """The agent's default (tests, development): one warning, then renders as the agent's user;
    health shows the fallback and its reason."""
    worker.configure(fail_closed=False)
    assert _render() == "hello 1"
    assert _worker_uid(pool) == 0 and not pool.unprivileged
    status = worker.status()
    assert status["state"] == "fallback" and status["user"] == "agent" and status["error"], status


def test_the_agents_health_says_why_templates_are_not_rendered(
    pool: worker._WorkerPool, unreadable_python: Path, tmp_path: Path
) -> None:
    """The daemon reads template_worker_fail_closed, starts the worker at once, and its health
    reports the refusal (status degraded, with the reason) before any template asked."""
    agent = Agent(Config(node_name="client1", data_dir=tmp_path / "data", template_worker_fail_closed=True))
    agent._bind_vault_and_templates()

    def refused() -> tuple[dict[str, Any] | None, str]:
        body = agent.health_body()
        return (body if body["template_worker"]["state"] == "refused" else None), str(body["template_worker"])

    body = wait_until(refused, timeout=30, what="the render worker's refusal in health")
    assert body["status"] == "degraded", body
    assert "templates are not rendered" in str(body["error"]) and "nobody" in str(body["error"]), body
    assert pool.fail_closed
    # Nomad's /v1/agent/health: 500 with the reason, as Nomad's agent answers an unhealthy client
    status, _, raw = agent._nomad_health()
    client = json.loads(raw)["client"]
    assert status == 500 and client["ok"] is False and "templates are not rendered" in client["message"]
    stats = health_stats(body)
    assert stats["status"] == "degraded" and stats["template_worker_state"] == "refused", stats


def test_the_worker_that_can_drop_keeps_health_ok(
    pool: worker._WorkerPool, nobody_python: Path, tmp_path: Path
) -> None:
    agent = Agent(Config(node_name="client1", data_dir=tmp_path / "data", template_worker_fail_closed=True))
    agent._bind_vault_and_templates()

    def started() -> tuple[dict[str, Any] | None, str]:
        body = agent.health_body()
        return (body if body["template_worker"]["state"] != "not started" else None), str(body)

    body = wait_until(started, timeout=30, what="the render worker's start in health")
    assert body["status"] == "ok" and body["template_worker"]["state"] == "ok", body
    assert agent._nomad_health()[0] == 200
    assert _worker_uid(pool) == 65534
