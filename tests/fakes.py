"""In-memory stand-ins for the alloc runner's seams (drivers, netns owners, the group network and
task directories): no root, no docker, no CNI. Each records what it was asked to do, and can be
told to fail, so the runner's every outcome is reachable in a unit test."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.client.core import Core
from agent.decide.decisions import NO_BUGS, Bugs
from agent.drivers.base import (
    NO_SANDBOX,
    RESTARTED,
    DriverError,
    ExitReport,
    Sandbox,
    TaskContext,
    TaskHandle,
    TaskStatus,
)
from agent.drivers.registry import DriverRegistry
from agent.drivers.session import ExecSession
from agent.drivers.usage import Usage
from agent.network.base import BRIDGE, AttachSpec, Network
from agent.node.sweeper import Removal, Sweeper, SweepReport
from agent.runner.alloc import AllocRunner
from agent.runner.deps import RunnerDeps
from agent.state import SqliteStore
from agent.structs.model import Task
from agent.structs.records import AllocRecord, PortAlloc
from agent.templates.render import SecretSource
from agent.templates.runner import TemplateDeps
from agent.vault import TokenGrant, VaultDenied, VaultUnavailable


@dataclass
class FakeProc:
    ctx: TaskContext
    running: bool = True
    exit_code: int | None = None
    restarted_by_engine: bool = False


class FakeDriver:
    """A driver. As the real ones, a start replaces a live leftover of the same alloc and task (one
    whose start an agent killed before recording it): docker removes the container of that name,
    exec and raw_exec kill what is in the task's cgroup (tests/test_exec_no_double.py)."""

    def __init__(self, name: str, *, joins_container_netns: bool) -> None:
        self.name = name
        self.joins_container_netns = joins_container_netns
        self.keeps_exit_status = joins_container_netns  # as the real ones: docker yes, exec no
        self.log_files = False  # no logmon for a fake task (tests/test_logmon_hook.py runs real ones)
        self.container_log = False
        self.procs: dict[str, FakeProc] = {}
        self.starts: list[TaskContext] = []
        self.stops: list[str] = []
        self.removed: list[str] = []
        self.reattached: list[str] = []
        self.signals: list[tuple[str, str]] = []
        self.exec_envs: list[dict[str, str] | None] = []
        self.fail_starts = 0  # the next N starts raise DriverError
        self.fail_recoverable = False  # ... a recoverable one (a container docker could not create)
        self.unavailable_once: set[str] = set()  # tasks whose next start finds the engine away
        self.leftovers: list[str] = []  # live instances a start replaced
        self.swept: list[str] = []  # what the orphan sweep removed (FakeSweeper)
        self._n = 0

    def start(self, ctx: TaskContext) -> TaskHandle:
        self.starts.append(ctx)
        if ctx.task.name in self.unavailable_once:
            self.unavailable_once.discard(ctx.task.name)
            raise DriverError(self.name, f"task {ctx.task.name}", "engine unavailable", unavailable=True)
        if self.fail_starts:
            self.fail_starts -= 1
            raise DriverError(
                self.name,
                f"task {ctx.task.name}",
                "cannot join network of a non running container",
                recoverable=self.fail_recoverable,
            )
        for old, p in list(self.procs.items()):
            if p.running and (p.ctx.alloc_id, p.ctx.task.name) == (ctx.alloc_id, ctx.task.name):
                self.procs.pop(old)
                self.leftovers.append(old)
        self._n += 1
        hid = f"{self.name}-{ctx.task.name}-{self._n}"
        self.procs[hid] = FakeProc(ctx)
        return TaskHandle(self.name, hid, "t0")

    def running(self) -> list[str]:
        return [h for h, p in self.procs.items() if p.running]

    def exit(self, handle_id: str, code: int = 1) -> None:
        self.procs[handle_id].running = False
        self.procs[handle_id].exit_code = code

    def status(self, handle: TaskHandle) -> TaskStatus:
        p = self.procs.get(handle.id)
        if p is None:
            return TaskStatus(False, None, "gone")
        if p.running and p.restarted_by_engine:
            return TaskStatus(True, None, RESTARTED)
        return TaskStatus(p.running, p.exit_code)

    def pid(self, handle: TaskHandle) -> int:
        p = self.procs.get(handle.id)
        return 1000 + list(self.procs).index(handle.id) if p and p.running else 0

    def signal(self, handle: TaskHandle, sig: str) -> None:
        self.signals.append((handle.id, sig))

    def exec(
        self, handle: TaskHandle, argv: list[str], timeout: float, env: Mapping[str, str] | None = None
    ) -> tuple[int, str]:
        self.exec_envs.append(dict(env) if env is not None else None)
        return 0, ""

    def exec_session(
        self,
        handle: TaskHandle,
        argv: list[str],
        *,
        tty: bool,
        rows: int = 24,
        cols: int = 80,
        env: Mapping[str, str] | None = None,
    ) -> ExecSession:
        raise DriverError(self.name, "interactive exec", "the fake driver runs no commands")

    def usage(self, alloc_id: str, task: str, handle: TaskHandle) -> Usage | None:
        p = self.procs.get(handle.id)
        return Usage(rss=1 << 20, usage=2 << 20, cpu_total_ns=10**7) if p and p.running else None

    def stop(self, handle: TaskHandle, timeout: float, sig: str) -> None:
        self.stops.append(handle.id)
        if handle.id in self.procs:
            self.exit(handle.id, 0)

    def remove(self, alloc_id: str, task: Task, handle: TaskHandle) -> None:
        self.removed.append(handle.id)
        self.procs.pop(handle.id, None)

    def reattach(self, alloc_id: str, handle: TaskHandle) -> None:
        self.reattached.append(handle.id)

    def watch(self, report: ExitReport, stop: threading.Event) -> None:
        return None

    def close(self) -> None:
        return None

    def alloc_labels(self, alloc_id: str) -> dict[str, str] | None:
        return None

    def one_look(self) -> contextlib.AbstractContextManager[None]:
        return contextlib.nullcontext()


class FakeOwner:
    """A netns owner. `records_handle`: a pause container (has a handle) or a named netns (none)."""

    def __init__(self, kind: str, *, records_handle: bool) -> None:
        self.kind = kind
        self.records_handle = records_handle
        self.alive: dict[str, bool] = {}  # owner id -> alive
        self.restarted: set[str] = set()  # owner ids docker restarted with an empty netns
        self.created: list[str] = []
        self.removed: list[str] = []
        self.foreign_pids: set[int] = set()  # pids that are in another netns
        self.allocs: dict[str, str] = {}  # owner id -> alloc id (what the sweeper goes by)
        self.unavailable = 0  # the next N creates find the engine away (docker restarting)
        self.sandboxes: list[Sandbox] = []  # the hostname and DNS each create was given
        self._n = 0

    def _oid(self, alloc_id: str, handle: TaskHandle | None) -> str:
        return handle.id if handle else f"ns-{alloc_id}"

    def create(
        self, job: str, group: str, alloc_id: str, *, sandbox: Sandbox = NO_SANDBOX
    ) -> TaskHandle | None:
        self.sandboxes.append(sandbox)
        if self.unavailable:
            self.unavailable -= 1
            raise DriverError(self.kind, f"netns owner of {alloc_id}", "engine unavailable", unavailable=True)
        self._n += 1
        oid = f"{self.kind}-{self._n}" if self.records_handle else f"ns-{alloc_id}"
        self.alive[oid] = True
        self.allocs[oid] = alloc_id
        self.restarted.discard(oid)
        self.created.append(oid)
        return TaskHandle(self.kind, oid, "t0") if self.records_handle else None

    def path(self, alloc_id: str, handle: TaskHandle | None) -> Path | None:
        oid = self._oid(alloc_id, handle)
        return Path(f"/fake/netns/{oid}") if self.alive.get(oid) else None

    def status(self, alloc_id: str, handle: TaskHandle | None) -> TaskStatus:
        oid = self._oid(alloc_id, handle)
        if not self.alive.get(oid):
            return TaskStatus(False, 137)
        return TaskStatus(True, None, RESTARTED if oid in self.restarted else "")

    def holds(self, alloc_id: str, handle: TaskHandle | None, pid: int) -> bool:
        return self.path(alloc_id, handle) is not None and pid not in self.foreign_pids

    def remove(self, alloc_id: str, handle: TaskHandle | None) -> None:
        oid = self._oid(alloc_id, handle)
        self.removed.append(oid)
        self.alive.pop(oid, None)


@dataclass
class FakeNetwork:
    results: dict[str, str] = field(default_factory=dict)  # alloc id -> address of the kept result
    adds: list[tuple[str, Path]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)
    forgotten: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    diffs: list[str] = field(default_factory=list)  # what check() reports
    specs: list[AttachSpec] = field(default_factory=list)  # the spec of each add()
    checked: list[AttachSpec] = field(default_factory=list)  # the spec of each check()
    fail_adds: int = 0
    _n: int = 0

    def add(
        self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc], *, spec: AttachSpec = BRIDGE
    ) -> str:
        from agent.network.result import CniError

        self.adds.append((alloc_id, netns))
        self.specs.append(spec)
        if self.fail_adds:
            self.fail_adds -= 1
            raise CniError("bridge ADD: duplicate allocation is not allowed")
        self._n += 1
        self.results[alloc_id] = f"10.9.0.{self._n}"
        return self.results[alloc_id]

    def has_result(self, alloc_id: str) -> bool:
        return alloc_id in self.results

    def check(
        self, alloc_id: str, netns: Path, ports: Sequence[PortAlloc], *, spec: AttachSpec = BRIDGE
    ) -> list[str]:
        self.checked.append(spec)
        return list(self.diffs)

    def delete(
        self,
        alloc_id: str,
        netns: Path | None,
        *,
        address: str = "",
        ports: Sequence[PortAlloc] = (),
        spec: AttachSpec = BRIDGE,
    ) -> list[str]:
        self.deletes.append(alloc_id)
        self.results.pop(alloc_id, None)
        return []

    def forget(self, alloc_id: str) -> None:
        self.forgotten.append(alloc_id)
        self.results.pop(alloc_id, None)

    def release_addresses(self, alloc_id: str) -> None:
        self.released.append(alloc_id)
        self.results.pop(alloc_id, None)


class FakeDirs:
    def __init__(self) -> None:
        self.cleaned: list[Path] = []
        self.removed: list[Path] = []
        self.secrets_mb: dict[str, int] = {}  # task dir name -> the secrets/ size asked for

    def prepare(self, task_dir: Path, secrets_mb: int = 0) -> None:
        (task_dir / "local").mkdir(parents=True, exist_ok=True)
        (task_dir / "secrets").mkdir(parents=True, exist_ok=True)
        self.secrets_mb[task_dir.name] = secrets_mb

    def remount_secrets(self, task_dir: Path, secrets_mb: int = 0) -> bool:
        return False

    def migrate(self, previous: Path, alloc_dir: Path, tasks: Sequence[str]) -> list[str]:
        from agent.runner.taskdirs import migrate_dirs  # plain renames in the test's tmp dir

        return migrate_dirs(previous, alloc_dir, tasks)

    def cleanup(self, alloc_dir: Path) -> None:
        self.cleaned.append(alloc_dir)

    def remove(self, alloc_dir: Path) -> None:
        self.removed.append(alloc_dir)


class FakeNode:
    """A node: two drivers ("docker" joins a container's netns, "exec" joins one by path), both
    netns owners, a network, a timer list and the replacements asked for."""

    def __init__(self, root: Path, bugs: Bugs = NO_BUGS) -> None:
        self.root = root
        self.store = SqliteStore(root / "state" / "state.db")
        self.docker = FakeDriver("docker", joins_container_netns=True)
        self.exec = FakeDriver("exec", joins_container_netns=False)
        self.pause = FakeOwner("pause", records_handle=True)
        self.named = FakeOwner("netns", records_handle=False)
        self.network = FakeNetwork()
        self.dirs = FakeDirs()
        self.timers: list[tuple[float, Callable[[], None]]] = []
        self.replaced: list[tuple[str, str]] = []
        self.slept: list[float] = []  # shutdown_delay waits, recorded rather than slept
        self.bugs = bugs
        self.registry = DriverRegistry(
            [self.docker, self.exec], container_netns=self.pause, path_netns=self.named
        )

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        self.timers.append((delay, fn))

    def run_timers(self) -> int:
        """Run every timer due so far (and those they schedule at once); how many ran."""
        n = 0
        while self.timers:
            timers, self.timers = self.timers, []
            for _, fn in sorted(timers, key=lambda t: t[0]):
                fn()
                n += 1
        return n

    def deps(self, network: Network | None = None) -> RunnerDeps:
        return RunnerDeps(
            store=self.store,
            drivers=self.registry,
            network=self.network if network is None else network,
            data_dir=self.root / "data",
            schedule=self.schedule,
            replace=lambda runner, reason: self.replaced.append((runner.id, reason)),
            templates=TemplateDeps(self.store, self.schedule, bugs=self.bugs),
            bugs=self.bugs,
            dirs=self.dirs,
            sleep=self.slept.append,
        )

    def core(self, **overrides: Any) -> Core:
        """An agent's Core on this node (its store, drivers, network and task dirs); `overrides`
        are Core's keyword arguments (sweeper, offload, gc_limits, ...)."""
        from agent.fieldbugs.faults import Faults

        kw: dict[str, Any] = {"data_dir": self.root / "data", "faults": Faults(), "task_dirs": self.dirs}
        return Core(self.store, self.registry, self.network, **{**kw, **overrides})

    def runner(self, record: AllocRecord, job_group: tuple[object, object]) -> AllocRunner:
        from agent.structs.model import Group, Job

        job, group = job_group
        assert isinstance(job, Job) and isinstance(group, Group)
        return AllocRunner(self.deps(), record, job, group)


OUTSIDE_THE_ROLE = "outside-the-role"  # a policy FakeVault's token role refuses (not in allowed_policies)


class FakeVault:
    """The agent's Vault client for tasks' tokens (agent.runner.vaulttoken.TokenIssuer), made up:
    tokens "task-token-<n>" with accessors "acc-<n>", each valid until revoked; a task token's reads
    go to `source` (None: denied). Records what was created, renewed and revoked; `down` makes every
    call unavailable, `refuse_renewals` makes renew-self denied."""

    address = "http://vault.invalid:8200"

    def __init__(
        self,
        source: SecretSource | None = None,
        *,
        ttl: float = 3600.0,
        clock: Callable[[], float] | None = None,
    ):
        self.source = source
        self.ttl = ttl
        self.clock = clock or time.time
        self.created: list[tuple[str, tuple[str, ...], dict[str, str]]] = []  # (role, policies, meta)
        self.live: dict[str, str] = {}  # token -> accessor
        self.granted: dict[str, float] = {}  # token -> when its TTL was last granted (create, renew)
        self.revoked: list[str] = []
        self.renewed: list[str] = []
        self.fetched: list[tuple[str, str]] = []  # (token, path)
        self.down = False
        self.refuse_renewals = False
        self.issued = 0
        self.logins: list[tuple[str, str, str]] = []  # (mount, role, jwt) of each JWT login
        self.jwt_policies: tuple[str, ...] = ("nomad-workloads",)

    def _check(self, op: str, path: str) -> None:
        if self.down:
            raise VaultUnavailable(op, path, "connection failed (server down or unreachable)")

    def create_token(
        self,
        role: str,
        policies: Sequence[str],
        *,
        meta: dict[str, str] | None = None,
        display_name: str = "",
    ) -> TokenGrant:
        self._check("create token", f"auth/token/create/{role}")
        if not policies:
            raise VaultDenied("create token", f"auth/token/create/{role}", "no policies asked for")
        if OUTSIDE_THE_ROLE in policies:
            raise VaultDenied("create token", f"auth/token/create/{role}", "policy not allowed by the role")
        self.created.append((role, tuple(policies), dict(meta or {})))
        return self._new_token(("default", *policies))

    def login_jwt(self, mount: str, role: str, jwt: str) -> TokenGrant:
        """A JWT login: recorded (mount, role, jwt); the role's policies are `jwt_policies`."""
        self._check("login", f"auth/{mount}/login")
        self.logins.append((mount, role, jwt))
        return self._new_token(("default", *self.jwt_policies))

    def _new_token(self, policies: tuple[str, ...]) -> TokenGrant:
        self.issued += 1
        n = self.issued
        token, accessor = f"task-token-{n}", f"acc-{n}"
        self.live[token] = accessor
        self.granted[token] = self.clock()
        return TokenGrant(accessor, self.ttl, True, self.clock(), policies, token=token)

    def revoke_accessor(self, accessor: str) -> None:
        self._check("write", "auth/token/revoke-accessor")
        self.revoked.append(accessor)
        self.live = {t: a for t, a in self.live.items() if a != accessor}

    def token_client(self, token: str) -> FakeTokenClient:
        return FakeTokenClient(self, token)


class FakeTokenClient:
    def __init__(self, vault: FakeVault, token: str) -> None:
        self.vault, self.token = vault, token

    def _grant(self, op: str, path: str) -> TokenGrant:
        self.vault._check(op, path)
        now = self.vault.clock()
        left = self.vault.ttl - (now - self.vault.granted.get(self.token, now))
        if self.token not in self.vault.live or left <= 0:
            raise VaultDenied(op, path, "permission denied")
        return TokenGrant(self.vault.live[self.token], left, True, now)

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        self._grant("read", path)
        self.vault.fetched.append((self.token, path))
        if self.vault.source is None:
            raise VaultDenied("read", path, "permission denied")
        return self.vault.source.fetch(path, params)

    def list_keys(self, path: str) -> list[str]:
        self._grant("list", path)
        if self.vault.source is None:
            raise VaultDenied("list", path, "permission denied")
        return self.vault.source.list_keys(path)

    def lookup_self(self) -> TokenGrant:
        return self._grant("lookup", "auth/token/lookup-self")

    def renew_self(self) -> TokenGrant:
        grant = self._grant("renew", "auth/token/renew-self")
        if self.vault.refuse_renewals:
            raise VaultDenied("renew", "auth/token/renew-self", "permission denied")
        self.vault.renewed.append(self.token)
        self.vault.granted[self.token] = grant.granted_at
        return dataclasses.replace(grant, ttl=self.vault.ttl)


class FakeSweeper(Sweeper):
    """The orphan sweeper on a FakeNode: removes every task instance, netns owner and CNI result of
    an alloc that is neither live nor adopted (as agent.node.sweeper does by labels, cgroup and netns
    names); records what it removed."""

    def __init__(self, node: FakeNode) -> None:  # no docker, no CNI: nothing of Sweeper's own
        self.node = node
        self.totals: Counter[str] = Counter()

    def sweep(
        self, live: Iterable[str], adopted: Iterable[str] = (), recorded: Iterable[str] = ()
    ) -> SweepReport:
        keep = set(live) | set(adopted)
        report = SweepReport()
        for driver in (self.node.docker, self.node.exec):
            for hid, p in list(driver.procs.items()):
                if p.ctx.alloc_id not in keep:
                    driver.procs.pop(hid)
                    driver.swept.append(hid)
                    report.planned.append(Removal("task", hid, p.ctx.alloc_id))
        for owner in (self.node.pause, self.node.named):
            for oid, alive in list(owner.alive.items()):
                alloc = owner.allocs.get(oid, "")
                if alloc not in keep:
                    owner.alive.pop(oid)
                    owner.removed.append(oid)
                    if alive:
                        report.planned.append(Removal("netns_owner", oid, alloc))
        for alloc in list(self.node.network.results):
            if alloc not in keep:
                self.node.network.results.pop(alloc)
                report.planned.append(Removal("cni", alloc, alloc))
        report.removed.update(r.kind for r in report.planned)
        self.totals.update(report.removed)
        return report
