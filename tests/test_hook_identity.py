"""The identity hook (agent.runner.identityhook.IdentityHook), handed its task's lifecycle, a signer,
the task dir, a timer and a clock (fakes): the exposed identities' tokens in the environment and in
their files, renewed half way to their expiry, the task told by each identity's change_mode; a
renewal timer of before a stop does nothing."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.decide.decisions import StartCause
from agent.drivers.base import TaskHandle
from agent.runner.identityhook import IdentityError, IdentityHook, IdentityPorts
from agent.runner.interfaces import StartRequest
from agent.structs.model import Task, WorkloadIdentity
from tests.fakes import FakeNode
from tests.hook_fakes import Task_

NOW = 1_000_000.0


class Signer:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, wid: WorkloadIdentity) -> str:
        self.n += 1
        return f"jwt-{wid.name}-{self.n}"


class Timers:
    def __init__(self) -> None:
        self.due: list[tuple[float, Callable[[], None]]] = []

    def __call__(self, delay: float, fn: Callable[[], None]) -> None:
        self.due.append((delay, fn))

    def fire_all(self) -> None:
        due, self.due = self.due, []
        for _, fn in due:
            fn()


def made(tmp_path: Path, *identities: WorkloadIdentity) -> tuple[IdentityHook, Task_, Signer, Timers, Path]:
    t = Task(name="web", driver="exec", identities=identities)
    lifecycle = Task_(FakeNode(tmp_path), t)
    task_dir = tmp_path / "web"
    (task_dir / "secrets").mkdir(parents=True)
    signer, timers = Signer(), Timers()
    ports = IdentityPorts(lifecycle, signer, task_dir, lambda fn: fn(), timers, lambda: NOW, 3600.0, "a1")
    return IdentityHook(t, ports), lifecycle, signer, timers, task_dir


def setup(h: IdentityHook) -> None:
    done: list[Exception | None] = []
    h.setup(done.append)
    assert done == [None]


def test_the_setup_puts_each_exposed_token_in_the_env_and_its_file(tmp_path: Path) -> None:
    h, _, _, _, task_dir = made(
        tmp_path,
        WorkloadIdentity(env=True, file=True),
        WorkloadIdentity(name="aws", env=True, ttl=60.0),
        WorkloadIdentity(name="db", file=True, filepath="local/db.jwt"),
    )
    (task_dir / "local").mkdir()
    setup(h)
    assert h.env() == {"NOMAD_TOKEN": "jwt-default-1", "NOMAD_TOKEN_aws": "jwt-aws-2"}
    token = task_dir / "secrets" / "nomad_token"
    assert token.read_text() == "jwt-default-1" and stat.S_IMODE(os.stat(token).st_mode) == 0o600
    assert (task_dir / "local" / "db.jwt").read_text() == "jwt-db-3"
    assert not (task_dir / "secrets" / "nomad_aws.jwt").exists()  # env only


def test_a_start_after_a_restore_signs_once_and_a_restart_does_not_sign_again(tmp_path: Path) -> None:
    h, _, signer, _, _ = made(tmp_path, WorkloadIdentity(env=True))
    h.prestart(StartRequest())  # a restore's start: none signed by this agent process yet
    h.prestart(StartRequest())  # a restart: the tokens are current
    assert signer.n == 1 and h.env() == {"NOMAD_TOKEN": "jwt-default-1"}


def test_a_reattached_task_gets_fresh_tokens(tmp_path: Path) -> None:
    h, _, signer, _, _ = made(tmp_path, WorkloadIdentity(env=True))
    h.reattached(TaskHandle("exec", "h1", "t0"))
    assert signer.n == 1 and h.env() == {"NOMAD_TOKEN": "jwt-default-1"}


@pytest.mark.parametrize(
    ("mode", "signals", "restarts"),
    [
        ("signal", ["SIGHUP"], []),
        ("restart", [], [(StartCause.CHANGE_MODE, "identity default renewed")]),
        ("noop", [], []),
    ],
)
def test_a_renewal_half_way_re_signs_and_tells_the_task_by_its_change_mode(
    tmp_path: Path, mode: str, signals: list[str], restarts: list[tuple[StartCause, str]]
) -> None:
    wid = WorkloadIdentity(env=True, ttl=600.0, change_mode=mode, change_signal="SIGHUP")
    h, task, _, timers, _ = made(tmp_path, wid)
    setup(h)
    assert [d for d, _ in timers.due] == [300.0]  # half way to its expiry
    timers.fire_all()
    assert h.env() == {"NOMAD_TOKEN": "jwt-default-2"}
    assert task.signals == signals and task.restarts == restarts
    assert [d for d, _ in timers.due] == [300.0]  # armed again


def test_a_renewal_while_the_task_waits_for_its_restart_only_re_signs(tmp_path: Path) -> None:
    h, task, _, timers, _ = made(tmp_path, WorkloadIdentity(env=True, ttl=600.0, change_mode="restart"))
    setup(h)
    task.is_running = False
    timers.fire_all()
    assert h.env() == {"NOMAD_TOKEN": "jwt-default-2"} and task.restarts == []


def test_a_renewal_timer_of_before_a_stop_does_nothing(tmp_path: Path) -> None:
    h, task, signer, timers, _ = made(tmp_path, WorkloadIdentity(env=True, ttl=600.0, change_mode="restart"))
    setup(h)
    h.stop()
    timers.fire_all()
    assert signer.n == 1 and task.restarts == [] and timers.due == []


def test_a_token_file_out_of_the_task_dir_is_refused_naming_the_identity(tmp_path: Path) -> None:
    h, _, _, _, _ = made(tmp_path, WorkloadIdentity(name="x", file=True, filepath="../../etc/x.jwt"))
    with pytest.raises(IdentityError, match="identity x"):
        h.setup(lambda exc: None)
