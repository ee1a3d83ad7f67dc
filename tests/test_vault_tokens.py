"""Per-task Vault tokens (agent.runner.vaulttoken), as Nomad's client derives them.

- `plan_token`, the one decision (when to renew, when to derive anew), as a pure function.
- `TaskVaultToken` and the alloc runner with a made-up Vault (tests/fakes.py FakeVault) and a clock the
  test moves: where the token goes, renewal, replacement and the task's change_mode, restore, revoke.
- Against a real OpenBao configured as the lab's (tests/openbao_server.py: the token role, the jobs'
  policies, the agent's AppRole that may only create and revoke tasks' tokens), with fake drivers: a
  job reads and issues only what its policy allows (a 403 is a Template Failed event naming the path),
  the token is renewed before it expires, revoked when the alloc stops, kept across an agent restart,
  and the agent's own token is never written into a task dir.
- With root: the agent's real Core (as the daemon builds it) and a docker task: VAULT_TOKEN and
  /secrets/vault_token inside the container, an agent restart that keeps the token, its revocation.
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from agent.runner.alloc import AllocRunner
from agent.runner.vaultlease import TokenAction, TokenLease, plan_token
from agent.runner.vaulttoken import KIND_VAULT_TOKEN, NoVaultBlock, TaskVaultToken, TokenIssuer
from agent.state import SqliteStore
from agent.structs.model import Group, Job, Task, Template, Vault
from agent.structs.records import AllocRecord, AllocStatus
from agent.templates.runner import TemplateDeps
from agent.vault import TokenGrant, VaultClient
from tests.fakes import OUTSIDE_THE_ROLE, FakeNode, FakeVault
from tests.openbao_server import (
    JOB_OTHER,
    JOB_PROBE,
    TOKEN_ROLE,
    OpenBaoServer,
    job_kv_path,
)

ALLOC = "a1b2c3d4-0000-4000-8000-0000000000aa"
ISSUE = "pki_int/issue/fieldlab-workload"


# --- the decision: when to renew, when to derive anew ----------------------------------------------


def _lease(
    ttl: float = 90.0, *, at: float = 1000.0, renewable: bool = True, capped: bool = False
) -> TokenLease:
    return TokenLease("acc", ("default", "p"), ttl, at, renewable, 90.0, capped)


def test_a_token_is_renewed_at_two_thirds_of_its_ttl() -> None:
    lease = _lease(90.0)
    wait = plan_token(lease, 1000.0)
    assert (wait.action, wait.at) == (TokenAction.WAIT, 1060.0)
    assert plan_token(lease, 1059.9).action is TokenAction.WAIT
    assert plan_token(lease, 1060.0).action is TokenAction.RENEW
    assert plan_token(lease, 1089.9).action is TokenAction.RENEW


@pytest.mark.parametrize(
    ("lease", "now", "action", "reason"),
    [
        (None, 5.0, TokenAction.DERIVE, "no token yet"),
        (_lease(90.0), 1090.0, TokenAction.DERIVE, "the token expired"),
        (_lease(90.0, renewable=False), 1070.0, TokenAction.DERIVE, "not renewable"),
        (_lease(90.0, renewable=False), 1010.0, TokenAction.WAIT, "renewal due"),
        (_lease(30.0, capped=True), 1021.0, TokenAction.DERIVE, "near its max TTL"),
        (_lease(30.0), 1021.0, TokenAction.RENEW, "of its TTL passed"),  # a restored token's rest of TTL
        (_lease(0.0), 99999.0, TokenAction.NEVER, "does not expire"),
    ],
)
def test_a_token_that_cannot_be_renewed_is_derived_anew(
    lease: TokenLease | None, now: float, action: TokenAction, reason: str
) -> None:
    plan = plan_token(lease, now)
    assert plan.action is action and reason in plan.reason


@given(
    ttl=st.floats(1.0, 1e6),
    granted=st.floats(0.0, 1e9),
    offset=st.floats(-1e6, 2e6),
    renewable=st.booleans(),
    capped=st.booleans(),
)
def test_the_plan_never_renews_an_expired_token_and_waits_only_for_the_future(
    ttl: float, granted: float, offset: float, renewable: bool, capped: bool
) -> None:
    lease = TokenLease("a", (), ttl, granted, renewable, ttl, capped)
    now = granted + offset
    plan = plan_token(lease, now)
    if plan.action is TokenAction.WAIT:
        assert plan.at > now and now < lease.expires_at
    elif plan.action is TokenAction.RENEW:
        assert renewable and not lease.capped and now < lease.expires_at
    else:
        assert plan.action is TokenAction.DERIVE and plan.at == now
    if now >= lease.expires_at:
        assert plan.action is TokenAction.DERIVE


def test_the_renew_fraction_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match="fraction"):
        plan_token(_lease(), 0.0, fraction=1.0)


def test_the_lease_record_round_trips_and_holds_no_token() -> None:
    lease = _lease()
    assert TokenLease.from_record(lease.to_record()) == lease
    assert set(lease.to_record()) == {
        "accessor",
        "policies",
        "ttl",
        "granted_at",
        "renewable",
        "first_ttl",
        "capped",
    }
    grant = TokenGrant("acc", 30.0, True, 2000.0)
    assert lease.renewed(grant).capped and not lease.looked_up(grant).capped
    assert not lease.renewed(dataclasses.replace(grant, ttl=89.5)).capped  # whole seconds: not capped


def test_the_token_role_is_configured_under_vault_and_defaults_to_the_labs(tmp_path: Path) -> None:
    from agent.command.config import load_config
    from agent.command.wiring import CoreSettings
    from agent.errors import ConfigError

    def load(vault: dict[str, Any]) -> Any:
        path = tmp_path / "config.json"
        path.write_text(json.dumps({"node_name": "c", "vault": vault}))
        return load_config(path)

    assert load({"address": "http://10.0.0.1:8200"}).vault.token_role == TOKEN_ROLE == "fieldlab-task"
    cfg = load({"address": "http://10.0.0.1:8200", "token_role": "nomad-cluster"})
    assert cfg.vault.token_role == "nomad-cluster"
    assert CoreSettings.from_config(cfg).vault_token_role == "nomad-cluster"
    for bad in ("", "a/b", 7):
        with pytest.raises(ConfigError, match=r"vault\.token_role"):
            load({"token_role": bad})


# --- TaskVaultToken against a made-up Vault, on a clock the test moves ---------------------------------


class Loop:
    """The agent's timers on a clock the test moves (`advance` runs what falls due, in order)."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now
        self._timers: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = itertools.count()

    def __call__(self) -> float:
        return self.now

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (self.now + delay, next(self._seq), fn))

    def forget(self) -> None:
        self._timers.clear()

    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self._timers and self._timers[0][0] <= end:
            due, _, fn = heapq.heappop(self._timers)
            self.now = max(self.now, due)
            fn()
        self.now = end


@dataclasses.dataclass
class Keeper:
    token: TaskVaultToken
    vault: FakeVault
    loop: Loop
    events: list[tuple[str, str]]
    changes: list[str]


def _keeper(
    tmp_path: Path,
    vault: FakeVault | None = None,
    loop: Loop | None = None,
    *,
    file: bool = True,
    driver: str = "docker",
) -> Keeper:
    loop = loop or Loop()
    vault = vault or FakeVault(ttl=90.0, clock=loop)
    issuer: TokenIssuer = vault  # the fake satisfies the protocol (mypy checks this line)
    events: list[tuple[str, str]] = []
    changes: list[str] = []
    task = Task("web", driver, vault=Vault(policies=(JOB_PROBE,), file=file))
    token = TaskVaultToken(
        alloc_id=ALLOC,
        job="probe",
        task=task,
        issuer=issuer,
        role=TOKEN_ROLE,
        store=SqliteStore(tmp_path / "state.db"),
        secrets_dir=tmp_path / "web" / "secrets",
        schedule=loop.schedule,
        event=lambda type_, message: events.append((type_, message)),
        on_new_token=changes.append,
        clock=loop,
    )
    return Keeper(token, vault, loop, events, changes)


def test_a_derived_token_goes_to_a_0600_file_and_only_its_accessor_to_the_state(tmp_path: Path) -> None:
    k = _keeper(tmp_path)
    assert k.token.ensure() is True
    assert k.vault.created == [(TOKEN_ROLE, (JOB_PROBE,), {"alloc_id": ALLOC, "job": "probe", "task": "web"})]
    assert k.token.token == "task-token-1"
    assert k.token.token_file.read_text() == "task-token-1"
    assert k.token.token_file.stat().st_mode & 0o777 == 0o600
    rec = k.token.store.get(KIND_VAULT_TOKEN, f"{ALLOC}/web")
    assert rec is not None and rec["accessor"] == "acc-1" and "task-token-1" not in json.dumps(rec)
    assert "task-token-1" not in repr(k.token)
    assert [t for t, _ in k.events] == ["Vault Token"] and JOB_PROBE in k.events[0][1]
    assert k.token.ensure() is False and len(k.vault.created) == 1  # valid by our clock: kept


def test_the_token_is_renewed_before_it_expires_and_keeps_its_accessor(tmp_path: Path) -> None:
    k = _keeper(tmp_path)
    k.token.ensure()
    k.loop.advance(59.0)
    assert k.vault.renewed == []
    k.loop.advance(1.0)  # 2/3 of 90 s
    assert k.vault.renewed == ["task-token-1"] and k.token.lease is not None
    assert k.token.lease.granted_at == k.loop.now and k.token.lease.accessor == "acc-1"
    k.loop.advance(10 * 60.0)  # renewed every 60 s from then on
    assert len(k.vault.renewed) == 11 and len(k.vault.created) == 1 and k.changes == []


def test_a_refused_renewal_gets_a_new_token_revokes_the_old_and_tells_the_task(tmp_path: Path) -> None:
    k = _keeper(tmp_path)
    k.token.ensure()
    k.vault.refuse_renewals = True
    k.loop.advance(60.0)
    assert k.token.token == "task-token-2" and k.token.token_file.read_text() == "task-token-2"
    assert k.vault.revoked == ["acc-1"] and list(k.vault.live) == ["task-token-2"]
    assert k.changes == ["the token's renewal was refused"]


def test_vault_down_at_renewal_is_retried_with_backoff_and_the_token_kept(tmp_path: Path) -> None:
    k = _keeper(tmp_path)
    k.token.ensure()
    k.vault.down = True
    k.loop.advance(60.0)
    assert k.token.failures == 1 and k.token.token == "task-token-1"
    k.loop.advance(20.0)
    assert k.token.failures >= 2 and k.vault.created[1:] == []
    k.vault.down = False
    k.loop.advance(9.0)  # retried before the token expires at 90 s
    assert k.vault.renewed == ["task-token-1"] and k.token.failures == 0 and k.changes == []


def test_a_token_expired_while_vault_was_down_is_replaced_when_it_returns(tmp_path: Path) -> None:
    k = _keeper(tmp_path)
    k.token.ensure()
    k.vault.down = True
    k.loop.advance(200.0)
    k.vault.down = False
    k.loop.advance(70.0)
    assert k.token.token == "task-token-2" and k.changes == ["the token expired"]


def test_after_an_agent_restart_the_stored_token_is_kept_if_it_still_works(tmp_path: Path) -> None:
    first = _keeper(tmp_path)
    first.token.ensure()
    first.loop.advance(30.0)  # the agent was down for a while: the token has 60 s left of its 90
    first.loop.forget()  # the first agent's timers die with it
    again = _keeper(tmp_path, first.vault, first.loop)  # a new agent: same store, same secrets dir
    assert again.token.token == "" and again.token.lease is not None  # the lease is read back
    assert again.token.restore() is False
    assert again.token.token == "task-token-1" and len(first.vault.created) == 1
    first.vault.renewed.clear()
    again.loop.advance(40.0)  # 2/3 of what it had left: renewed, not replaced
    assert first.vault.renewed == ["task-token-1"] and len(first.vault.created) == 1 and again.changes == []
    first.vault.source = Serials()
    assert again.token.fetch("secret/data/x", {})[0]["serial_number"] == "serial-1"  # reads with it
    assert first.vault.fetched == [("task-token-1", "secret/data/x")]


def test_after_an_agent_restart_a_token_that_no_longer_works_is_revoked_and_derived_anew(
    tmp_path: Path,
) -> None:
    first = _keeper(tmp_path)
    first.token.ensure()
    first.vault.live.clear()  # expired or revoked behind the agent's back
    again = _keeper(tmp_path, first.vault, first.loop)
    assert again.token.restore() is True
    assert again.token.token == "task-token-2" and first.vault.revoked == ["acc-1"]


def test_a_token_file_the_task_replaced_is_not_taken(tmp_path: Path) -> None:
    first = _keeper(tmp_path)
    first.token.ensure()
    other = first.vault.create_token(TOKEN_ROLE, [JOB_OTHER])  # some other valid token
    first.token.token_file.write_text(other.token)
    again = _keeper(tmp_path, first.vault, first.loop)
    assert again.token.restore() is True and again.token.token not in ("task-token-1", other.token)
    assert first.vault.revoked == ["acc-1"]


@pytest.mark.parametrize("planted", ["fifo", "link"])
def test_a_token_file_the_task_turned_into_a_trap_neither_hangs_nor_leaks_the_restore(
    tmp_path: Path, planted: str
) -> None:
    """The task owns secrets/: a FIFO there must not block the agent's restore (it would never reach
    its API), a link must not make the agent read a host file and send it to Vault as a token."""
    first = _keeper(tmp_path)
    first.token.ensure()
    host_file = tmp_path / "host-secret"
    host_file.write_text("task-token-1")  # a valid token: taken, if the link were followed
    path = first.token.token_file
    path.unlink()
    if planted == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(host_file)
    again = _keeper(tmp_path, first.vault, first.loop)
    done: list[bool] = []
    reader = threading.Thread(target=lambda: done.append(again.token.restore()), daemon=True)
    reader.start()
    reader.join(10.0)
    assert done == [True], "the restore hung on (or took) the planted token file"
    assert again.token.token == "task-token-2" and first.vault.revoked == ["acc-1"]


def test_without_a_file_the_token_cannot_be_read_back_and_is_derived_anew(tmp_path: Path) -> None:
    first = _keeper(tmp_path, file=False)
    first.token.ensure()
    assert not first.token.token_file.exists() and first.token.token == "task-token-1"
    again = _keeper(tmp_path, first.vault, first.loop, file=False)
    assert again.token.restore() is True and first.vault.revoked == ["acc-1"]


def test_vault_down_at_restore_keeps_the_stored_token_and_down_without_one_retries(tmp_path: Path) -> None:
    first = _keeper(tmp_path)
    first.token.ensure()
    first.vault.down = True
    again = _keeper(tmp_path, first.vault, first.loop)
    assert again.token.restore() is False and again.token.token == "task-token-1"
    fresh = _keeper(tmp_path / "fresh", first.vault, first.loop)
    assert fresh.token.restore() is False and fresh.token.token == ""
    assert [t for t, _ in fresh.events] == ["Vault Token Failed"]
    first.vault.down = False
    first.loop.advance(2.0)
    assert fresh.token.token.startswith("task-token-")


def test_revoke_revokes_by_accessor_and_forgets_the_token(tmp_path: Path) -> None:
    k = _keeper(tmp_path)
    k.token.ensure()
    k.token.revoke()
    assert k.vault.revoked == ["acc-1"] and k.vault.live == {}
    assert not k.token.token_file.exists() and k.token.token == ""
    assert k.token.store.get(KIND_VAULT_TOKEN, f"{ALLOC}/web") is None
    k.loop.advance(3600.0)  # its renewal timer is void
    assert k.vault.renewed == [] and len(k.vault.created) == 1


def test_a_revocation_vault_refuses_is_reported_not_raised(tmp_path: Path) -> None:
    k = _keeper(tmp_path)
    k.token.ensure()
    k.vault.down = True
    k.token.revoke()
    assert k.events[-1][0] == "Vault Token" and "could not revoke" in k.events[-1][1]


def test_a_task_without_a_vault_block_has_a_source_that_refuses() -> None:
    with pytest.raises(Exception, match="the task has no vault block"):
        NoVaultBlock().fetch("secret/data/x", {})


# --- the alloc runner with a made-up Vault ---------------------------------------------------------------


class Serials:
    """Stand-in secrets: a new serial per fetch."""

    def __init__(self) -> None:
        self.n = 0

    def list_keys(self, path: str) -> list[str]:

        return []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        self.n += 1
        return {"serial_number": f"serial-{self.n}", "value": path}, 3600.0


def _task(name: str = "web", *, vault: Vault | None = None, data: str | None = None) -> Task:
    tpl = Template(
        "secrets/out.txt",
        data=data or '{{ with secret "pki_int/issue/fieldlab-workload" }}{{ .Data.serial_number }}{{ end }}',
        splay=0,
    )
    return Task(name, "docker", config={"image": "x"}, templates=(tpl,), vault=vault)


def _runner(
    node: FakeNode, vault: TokenIssuer | None, *tasks: Task, loop: Loop | None = None, alloc: str = ALLOC
) -> AllocRunner:
    loop = loop or Loop()
    deps = dataclasses.replace(
        node.deps(network=None),
        vault=vault,
        clock=loop,
        schedule=loop.schedule,
        templates=TemplateDeps(node.store, loop.schedule),
    )
    group = Group("g", tasks)
    stored = node.store.get("alloc", alloc)  # an agent restarted: the runner Core.restore builds
    rec = AllocRecord.from_record(stored) if stored else AllocRecord(id=alloc, job="probe", group="g")
    node.store.put("alloc", alloc, rec.to_record())
    return AllocRunner(deps, rec, Job("probe", (group,)), group)


def _events(node: FakeNode, alloc: str = ALLOC) -> list[tuple[str, str]]:
    return [(e.type, e.message) for e in node.store.events(alloc)]


def test_the_task_gets_its_own_token_in_env_file_and_templates_never_the_agents(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    vault = FakeVault(Serials())
    plain = Task("sidecar", "docker", config={"image": "x"})
    quiet = _task("quiet", vault=Vault(policies=(JOB_OTHER,), env=False))
    r = _runner(node, vault, _task(vault=Vault(policies=(JOB_PROBE,))), quiet, plain)
    r.start()
    assert r.rec.status is AllocStatus.RUNNING, _events(node)
    envs = {c.task.name: c.env for c in node.docker.starts}
    assert envs["web"]["VAULT_TOKEN"] == "task-token-1" and envs["web"]["VAULT_ADDR"] == vault.address
    assert "VAULT_TOKEN" not in envs["quiet"] and envs["quiet"]["VAULT_ADDR"] == vault.address
    assert "VAULT_TOKEN" not in envs["sidecar"] and "VAULT_ADDR" not in envs["sidecar"]
    assert [(role, pol) for role, pol, _ in vault.created] == [
        (TOKEN_ROLE, (JOB_PROBE,)),
        (TOKEN_ROLE, (JOB_OTHER,)),
    ]
    # Each task's templates fetched with that task's own token.
    assert [tok for tok, _ in vault.fetched] == ["task-token-1", "task-token-2"]
    web = r.tasks[r.group.tasks[0].name].task_dir
    assert (web / "secrets" / "vault_token").read_text() == "task-token-1"
    assert not (r.tasks[plain.name].task_dir / "secrets" / "vault_token").exists()


def test_a_task_without_a_vault_block_cannot_use_secret(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    vault = FakeVault(Serials())
    r = _runner(node, vault, _task())
    r.start()
    assert r.rec.status is AllocStatus.FAILED
    failed = [m for t, m in _events(node) if t == "Template Failed"]
    assert len(failed) == 1 and "task has no vault block" in failed[0], _events(node)
    assert vault.created == [] and vault.fetched == []


def test_an_agent_without_vault_still_says_so(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, None, _task(vault=Vault(policies=(JOB_PROBE,))))
    r.start()
    assert any(
        "no Vault is configured for this agent" in m for t, m in _events(node) if t == "Template Failed"
    )


def test_stopping_the_alloc_revokes_every_tasks_token(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    vault = FakeVault(Serials())
    r = _runner(
        node, vault, _task(vault=Vault(policies=(JOB_PROBE,))), _task("b", vault=Vault(policies=(JOB_OTHER,)))
    )
    r.start()
    r.stop()
    assert sorted(vault.revoked) == ["acc-1", "acc-2"] and vault.live == {}
    assert node.store.list(KIND_VAULT_TOKEN).records == {}


def test_a_failed_derivation_fails_the_setup_and_revokes_what_was_derived(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    vault = FakeVault(Serials())
    bad = Task("bad", "docker", config={"image": "x"}, vault=Vault(policies=(OUTSIDE_THE_ROLE,)))
    r = _runner(node, vault, _task(vault=Vault(policies=(JOB_PROBE,))), bad)
    r.start()
    assert r.rec.status is AllocStatus.FAILED and "not allowed by the role" in r.rec.reason
    assert vault.revoked == ["acc-1"]


def test_a_restart_by_policy_keeps_the_token(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    vault = FakeVault(Serials())
    loop = Loop()
    r = _runner(node, vault, _task(vault=Vault(policies=(JOB_PROBE,))), loop=loop)
    r.start()
    (handle,) = node.docker.running()
    node.docker.exit(handle)
    r.on_task_exit(handle)
    loop.advance(20.0)
    assert len(node.docker.starts) == 2 and node.docker.starts[1].env["VAULT_TOKEN"] == "task-token-1"
    assert len(vault.created) == 1 and vault.revoked == []


@pytest.mark.parametrize("mode", ["restart", "signal", "noop"])
def test_a_replaced_token_reaches_the_task_as_its_change_mode_says(tmp_path: Path, mode: str) -> None:
    node = FakeNode(tmp_path)
    vault = FakeVault(Serials(), ttl=90.0)
    loop = Loop()
    vault.clock = loop
    spec = Vault(policies=(JOB_PROBE,), change_mode=mode, change_signal="SIGHUP" if mode == "signal" else "")
    r = _runner(node, vault, _task(vault=spec), loop=loop)
    r.start()
    vault.refuse_renewals = True
    loop.advance(61.0)
    assert (r.tasks[r.group.tasks[0].name].task_dir / "secrets" / "vault_token").read_text() == "task-token-2"
    if mode == "restart":
        assert len(node.docker.starts) == 2 and node.docker.starts[1].env["VAULT_TOKEN"] == "task-token-2"
        assert ("Restart Signaled", "new Vault token acquired (the token's renewal was refused)") in _events(
            node
        )
    elif mode == "signal":
        assert [sig for _, sig in node.docker.signals] == ["SIGHUP"] and len(node.docker.starts) == 1
    else:
        assert node.docker.signals == [] and len(node.docker.starts) == 1


def test_after_an_agent_restart_the_running_task_keeps_its_token(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    vault = FakeVault(Serials())
    loop = Loop()
    task = _task(vault=Vault(policies=(JOB_PROBE,)))
    first = _runner(node, vault, task, loop=loop)
    first.start()
    again = _runner(node, vault, task, loop=loop)  # what Core.restore builds after a restart
    again.restore()
    assert len(vault.created) == 1 and vault.revoked == []
    assert vault.fetched[-1] == ("task-token-1", "pki_int/issue/fieldlab-workload")  # the re-render
    assert again.tasks[task.name].env()["VAULT_TOKEN"] == "task-token-1"


def test_after_an_agent_restart_a_lost_token_is_replaced_and_the_task_restarted(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    vault = FakeVault(Serials())
    loop = Loop()
    task = _task(vault=Vault(policies=(JOB_PROBE,)))
    first = _runner(node, vault, task, loop=loop)
    first.start()
    vault.live.clear()
    again = _runner(node, vault, task, loop=loop)
    again.restore()
    assert vault.revoked == ["acc-1"] and len(node.docker.starts) == 2
    assert node.docker.starts[1].env["VAULT_TOKEN"] == "task-token-2"


# --- against a real OpenBao, configured as the lab's ------------------------------------------------


def _lookup_accessor(openbao: OpenBaoServer, accessor: str) -> int:
    """HTTP status of a root lookup of the accessor (200: the token exists; 400: it does not)."""
    resp = requests.post(
        f"{openbao.address}/v1/auth/token/lookup-accessor",
        json={"accessor": accessor},
        headers={"X-Vault-Token": openbao.root_token},
        timeout=5,
    )
    return resp.status_code


def _lookup_self(openbao: OpenBaoServer, token: str) -> dict[str, Any] | None:
    resp = requests.get(
        f"{openbao.address}/v1/auth/token/lookup-self", headers={"X-Vault-Token": token}, timeout=5
    )
    return dict(resp.json()["data"]) if resp.status_code == 200 else None


def _files_text(root: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in root.rglob("*") if p.is_file())


@pytest.fixture
def agent_vault(openbao: OpenBaoServer) -> VaultClient:
    """The agent's own client: logged in with its AppRole (bound to 127.0.0.1, as the lab binds it)."""
    client = VaultClient(openbao.address, openbao.approle_file)
    client.login()
    return client


def _real_task(
    name: str, data: str, policies: tuple[str, ...] | None, *, mode: str = "noop", dest: str = "local/out"
) -> Task:
    vault = Vault(policies=policies) if policies else None
    return Task(
        name,
        "docker",
        config={"image": "x"},
        templates=(Template(dest, data=data, change_mode=mode, splay=0),),
        vault=vault,
    )


KV_PROBE = '{{ with secret "%s" }}{{ .Data.data.owner }}{{ end }}' % job_kv_path(JOB_PROBE)  # noqa: UP031
CERT = '{{ with secret "%s" "common_name=%s" "ttl=1h" }}{{ .Data.serial_number }}{{ end }}'


def test_the_agents_approle_creates_tokens_only_through_the_role_and_reads_nothing(
    openbao: OpenBaoServer, agent_vault: VaultClient
) -> None:
    from agent.vault import VaultDenied

    with pytest.raises(VaultDenied, match="permission denied"):
        agent_vault.read(job_kv_path(JOB_PROBE))
    with pytest.raises(VaultDenied, match=f"{ISSUE}: permission denied"):
        agent_vault.write(ISSUE, common_name="probe.service.fieldlab")
    with pytest.raises(VaultDenied, match="auth/token/create: permission denied"):
        agent_vault.write("auth/token/create", policies=[JOB_PROBE])
    with pytest.raises(VaultDenied, match="must be subset of the role's allowed policies"):
        agent_vault.create_token(TOKEN_ROLE, ["fieldlab-agent-test"])
    grant = agent_vault.create_token(TOKEN_ROLE, [JOB_PROBE])
    assert grant.policies == ("default", JOB_PROBE)
    agent_vault.revoke_accessor(grant.accessor)


def test_the_agents_approle_logs_in_only_from_the_clients_address(
    openbao: OpenBaoServer, tmp_path: Path
) -> None:
    from agent.vault import VaultDenied

    creds = tmp_path / "elsewhere.json"
    openbao.add_approle("fieldlab-agent-elsewhere", creds, bound_address="127.0.0.2")
    with pytest.raises(VaultDenied, match="AppRole credentials refused"):
        VaultClient(openbao.address, creds).login()


@pytest.mark.parametrize(
    ("what", "data", "path"),
    [
        ("another job's KV entry", KV_PROBE, job_kv_path(JOB_PROBE)),
        ("a cert for another job's service", CERT % (ISSUE, "probe.service.fieldlab"), ISSUE),
        (
            "a client cert for another job's service",
            CERT % (ISSUE + "-client", "p.service.fieldlab"),
            ISSUE + "-client",
        ),
    ],
)
def test_a_job_without_the_policy_gets_a_template_failed_event_naming_the_path(
    openbao: OpenBaoServer, agent_vault: VaultClient, tmp_path: Path, what: str, data: str, path: str
) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, agent_vault, _real_task("other", data, (JOB_OTHER,)))
    r.start()
    assert r.rec.status is AllocStatus.FAILED, what
    failed = [m for t, m in _events(node) if t == "Template Failed"]
    assert len(failed) == 1 and f"{path}: permission denied" in failed[0], (what, failed)
    token = next(c for c in [r.tasks[r.group.tasks[0].name].vault_token()] if c is not None)
    assert token.lease is None  # the failed setup revoked it


def test_a_job_with_the_policy_reads_its_kv_and_issues_its_certs(
    openbao: OpenBaoServer, agent_vault: VaultClient, tmp_path: Path
) -> None:
    node = FakeNode(tmp_path)
    kv = _real_task("kv", KV_PROBE, (JOB_PROBE,))
    cert = _real_task("cert", CERT % (ISSUE, "probe.service.fieldlab"), (JOB_PROBE,))
    r = _runner(node, agent_vault, kv, cert)
    r.start()
    assert r.rec.status is AllocStatus.RUNNING, _events(node)
    assert (r.tasks[kv.name].task_dir / "local" / "out").read_text() == JOB_PROBE
    assert len((r.tasks[cert.name].task_dir / "local" / "out").read_text().split(":")) > 8  # a serial number
    for t in (kv, cert):
        token = (r.tasks[t.name].task_dir / "secrets" / "vault_token").read_text()
        info = _lookup_self(openbao, token)
        assert info is not None and info["policies"] == ["default", JOB_PROBE] and info["role"] == TOKEN_ROLE
        assert info["orphan"] and info["meta"] == {"alloc_id": r.id, "job": "probe", "task": t.name}
    r.stop()


def test_the_tasks_token_is_revoked_when_the_alloc_stops(
    openbao: OpenBaoServer, agent_vault: VaultClient, tmp_path: Path
) -> None:
    node = FakeNode(tmp_path)
    task = _real_task("web", KV_PROBE, (JOB_PROBE,))
    r = _runner(node, agent_vault, task)
    r.start()
    token = (r.tasks[task.name].task_dir / "secrets" / "vault_token").read_text()
    lease = r.tasks[task.name].vault_token().lease  # type: ignore[union-attr]
    assert lease is not None and _lookup_accessor(openbao, lease.accessor) == 200
    r.stop()
    assert _lookup_self(openbao, token) is None, "the task's token still works after the alloc stopped"
    assert _lookup_accessor(openbao, lease.accessor) == 400


def test_a_task_without_a_vault_block_cannot_read_vault_with_the_agents_token(
    openbao: OpenBaoServer, agent_vault: VaultClient, tmp_path: Path
) -> None:
    node = FakeNode(tmp_path)
    r = _runner(node, agent_vault, _real_task("web", KV_PROBE, None))
    r.start()
    failed = [m for t, m in _events(node) if t == "Template Failed"]
    assert len(failed) == 1 and "task has no vault block" in failed[0]


@pytest.fixture
def short_period(openbao: OpenBaoServer) -> Iterator[float]:
    """Tasks' tokens live 6 s unless renewed; the lab's period again afterwards."""
    openbao.set_token_role("6s")
    yield 6.0
    openbao.set_token_role(openbao.task_token_period)


class RealTimeLoop(Loop):
    """Timers on the real clock (the server's TTLs are real)."""

    def __init__(self) -> None:
        super().__init__(time.time())

    def __call__(self) -> float:
        return time.time()

    def run_for(self, seconds: float) -> None:
        end = time.time() + seconds
        while time.time() < end:
            self.now = time.time()
            self.advance(0.0)
            time.sleep(0.1)


def test_the_token_is_renewed_before_it_expires(
    openbao: OpenBaoServer, agent_vault: VaultClient, tmp_path: Path, short_period: float
) -> None:
    node = FakeNode(tmp_path)
    loop = RealTimeLoop()
    task = _real_task("web", KV_PROBE, (JOB_PROBE,))
    r = _runner(node, agent_vault, task, loop=loop)
    r.start()
    keeper = r.tasks[task.name].vault_token()
    assert keeper is not None and keeper.lease is not None and keeper.lease.ttl == short_period
    token = keeper.token
    loop.run_for(2.5 * short_period)  # the token would have expired twice over without renewals
    info = _lookup_self(openbao, token)
    assert info is not None, "the task's token expired: it was not renewed"
    assert keeper.renewals >= 3 and keeper.derived == 1 and keeper.token == token
    assert info["ttl"] > short_period / 4
    r.stop()


def test_after_an_agent_restart_the_task_keeps_working_with_its_token(
    openbao: OpenBaoServer, agent_vault: VaultClient, tmp_path: Path
) -> None:
    node = FakeNode(tmp_path)
    task = _real_task("web", CERT % (ISSUE, "probe.service.fieldlab"), (JOB_PROBE,))
    first = _runner(node, agent_vault, task)
    first.start()
    out = first.tasks[task.name].task_dir / "local" / "out"
    token_file = first.tasks[task.name].task_dir / "secrets" / "vault_token"
    token, serial = token_file.read_text(), out.read_text()

    restarted = VaultClient(openbao.address, openbao.approle_file)  # a new agent: a new login
    restarted.login()  # at start-up (agent.vault.check_vault)
    again = _runner(node, restarted, task)
    again.restore()
    assert again.rec.status is AllocStatus.RUNNING, _events(node)
    assert token_file.read_text() == token and _lookup_self(openbao, token) is not None
    assert out.read_text() != serial, "the restored agent issued a new cert with the task's token"
    assert [t for t, _ in _events(node)].count("Vault Token") == 1  # derived once, at the first start
    # The agent's own tokens (both logins) are nowhere in the task dirs; the task's token is, once.
    text = _files_text(first.alloc_dir)
    assert agent_vault._token and agent_vault._token not in text
    assert restarted._token and restarted._token not in text
    assert text.count(token) == 1
    again.stop()
    assert _lookup_self(openbao, token) is None


# --- with root: the real agent (its Core, as the daemon builds it) and a docker task ---------------------

ROOT_JOB = """
job "vault-token" {
  group "g" {
    task "web" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "sleep"
        args    = ["3600"]
      }
      vault {
        policies = ["%s"]
      }
      template {
        data        = "{{ with secret \\"%s\\" }}{{ .Data.data.owner }}{{ end }}"
        destination = "local/owner"
        change_mode = "noop"
      }
    }
  }
}
""" % (JOB_PROBE, job_kv_path(JOB_PROBE))  # noqa: UP031 - HCL and template braces


@pytest.mark.root
def test_a_docker_task_gets_its_token_keeps_it_across_an_agent_restart_and_loses_it_at_stop(
    openbao: OpenBaoServer, tmp_path: Path
) -> None:
    from tests.agent_lab import AgentLab, build_workload_images, why_not_ready

    reason = why_not_ready()
    if reason:
        pytest.skip(reason)
    (tmp_path / "images").mkdir()
    build_workload_images(tmp_path / "images")
    lab = AgentLab(tmp_path / "agentlab")
    first_client = VaultClient(openbao.address, openbao.approle_file)
    first_client.login()
    agent = lab.start_agent(vault=first_client)
    try:
        out = agent.core.call(
            lambda: agent.core.job_registry.submit(ROOT_JOB, None, source="vault-token.hcl")
        )
        alloc = str(out["allocs"][0])
        agent.settle()  # its templates render off the main loop
        view = agent.core.call(lambda: agent.core.allocs.runner(alloc).view())
        assert view["status"] == "running", [(e.type, e.message) for e in agent.core.store.events(alloc)]
        task_dir = lab.data_dir / "alloc" / alloc / "web"
        token_file = task_dir / "secrets" / "vault_token"
        token = token_file.read_text()
        assert token_file.stat().st_mode & 0o777 == 0o600
        assert (task_dir / "local" / "owner").read_text() == JOB_PROBE
        container = lab.docker.client.containers.get(view["tasks"]["web"]["container"])
        env = dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])
        assert env["VAULT_TOKEN"] == token and env["VAULT_ADDR"] == openbao.address
        code, seen = container.exec_run(["cat", "/secrets/vault_token"])
        assert code == 0 and seen.decode() == token  # the task reads its own token at /secrets

        agent.stop()  # the agent goes; the task keeps running; a new agent logs in afresh
        (task_dir / "local" / "owner").unlink()
        second_client = VaultClient(openbao.address, openbao.approle_file)
        second_client.login()
        agent = lab.start_agent(vault=second_client)
        # Restore re-rendered with the task's token, which it read back: same token, no restart.
        assert (task_dir / "local" / "owner").read_text() == JOB_PROBE
        assert token_file.read_text() == token
        view = agent.core.call(lambda: agent.core.allocs.runner(alloc).view())
        assert view["status"] == "running" and view["tasks"]["web"]["restarts"] == 0
        info = _lookup_self(openbao, token)
        assert info is not None and info["policies"] == ["default", JOB_PROBE]
        # Every Vault token under the alloc dir is the task's own, never one of the agent's.
        text = _files_text(lab.data_dir / "alloc")
        for agent_token in (first_client._token, second_client._token):
            assert agent_token and agent_token not in text
        assert {w for w in text.split() if w.startswith("s.")} == {token}

        agent.stop_job("vault-token")
        assert _lookup_self(openbao, token) is None, "the task's token still works after its job stopped"
    finally:
        agent.stop()
        lab.cleanup()


def test_the_token_file_never_follows_a_link_the_task_planted_and_belongs_to_the_task(tmp_path: Path) -> None:
    """The task can write to secrets/: symlinks it plants at the token file's old temp name and at
    the file itself must never make the agent (root) write a host file; the file gets the owner of
    secrets/ (the task's user, set by the exec driver) so a task running as nobody can read it."""
    k = _keeper(tmp_path)
    secrets_dir = k.token.token_file.parent
    secrets_dir.mkdir(parents=True)
    host = tmp_path / "host-file"
    host.write_text("host data\n")
    host.chmod(0o644)
    (secrets_dir / ".vault_token.tmp").symlink_to(host)
    k.token.token_file.symlink_to(host)
    os.chown(secrets_dir, 65534, 65534)
    assert k.token.ensure() is True
    assert host.read_text() == "host data\n" and host.stat().st_mode & 0o777 == 0o644
    assert not k.token.token_file.is_symlink() and k.token.token_file.read_text() == "task-token-1"
    st = k.token.token_file.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (65534, 65534, 0o600)
    assert [p.name for p in secrets_dir.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()] == []


# -- a first render or token derivation that Vault cannot answer (Nomad's vault_retry) ---------------
def _setup_with_vault_down(
    tmp_path: Path, source: Serials | None = None
) -> tuple[FakeNode, Loop, FakeVault, AllocRunner]:
    """A runner whose task has a vault block and a PKI template, on a Vault that is down (`source`
    None: up, but denying every read); not started yet."""
    node, loop = FakeNode(tmp_path), Loop()
    vault = FakeVault(source, clock=loop)
    vault.down = source is not None
    return node, loop, vault, _runner(node, vault, _task(vault=Vault(policies=(JOB_PROBE,))), loop=loop)


def test_a_setup_vault_cannot_answer_is_retried_with_backoff_until_it_runs(tmp_path: Path) -> None:
    node, loop, vault, r = _setup_with_vault_down(tmp_path, Serials())
    r.start()
    assert r.rec.status is AllocStatus.PENDING and node.docker.starts == [], _events(node)
    loop.advance(0.25 + 0.5 + 1.0)  # three retries at 0.25 s, 0.5 s and 1 s: Vault still down
    retrying = [m for t, m in _events(node) if t == "Setup Retrying"]
    assert len(retrying) == 4 and "again in 2s (attempt 4 of 12)" in retrying[-1], retrying
    assert "connection failed" in retrying[0]
    vault.down = False
    loop.advance(2.0)
    assert r.rec.status is AllocStatus.RUNNING, _events(node)
    types = [t for t, _ in _events(node)]
    assert types.count("Received") == 1 and types.count("Started") == 1 and "Setup Failure" not in types
    assert len(vault.created) == 1  # the token derived once, by the retry that got through


def test_a_setup_vault_never_answers_fails_after_the_attempts(tmp_path: Path) -> None:
    node, loop, _vault, r = _setup_with_vault_down(tmp_path, Serials())
    r.start()
    loop.advance(600)
    types = [t for t, _ in _events(node)]
    assert types.count("Setup Retrying") == 12 and types.count("Setup Failure") == 1
    assert r.rec.status is AllocStatus.FAILED and "connection failed" in r.rec.reason


def test_a_denied_first_render_fails_the_setup_at_once(tmp_path: Path) -> None:
    node, _loop, _, r = _setup_with_vault_down(tmp_path, None)
    r.start()
    types = [t for t, _ in _events(node)]
    assert r.rec.status is AllocStatus.FAILED and "Setup Retrying" not in types, _events(node)
    assert "permission denied" in r.rec.reason


def test_an_alloc_stopped_while_its_setup_waits_to_retry_is_never_started(tmp_path: Path) -> None:
    node, loop, vault, r = _setup_with_vault_down(tmp_path, Serials())
    r.start()
    r.stop()
    vault.down = False
    loop.advance(600)
    assert r.rec.status is AllocStatus.COMPLETE and node.docker.starts == [], _events(node)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root gives a file to another user")
def test_an_exec_tasks_token_is_its_users_before_the_driver_chowns_its_dirs(tmp_path: Path) -> None:
    """At the first start the token is written (setup) before the exec driver chowns secrets/ to
    the task's user: the file itself goes to that user (nobody), or the task could not read it."""
    k = _keeper(tmp_path, driver="exec")
    secrets_dir = k.token.token_file.parent
    secrets_dir.mkdir(parents=True)  # root's, as the task dir hook leaves it
    assert k.token.ensure() is True
    st = k.token.token_file.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (65534, 65534, 0o600)
