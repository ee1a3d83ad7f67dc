"""What an alloc runner is given (RunnerDeps): the node's state store, drivers, network, timers
and the agent's services the alloc's tasks use. Fakes of each make the runner testable without
root (tests/fakes.py)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.client.offload import Offload, run_inline
from agent.command.config import DEFAULT_TOKEN_ROLE
from agent.drivers.registry import DriverRegistry
from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.fieldbugs.killpoints import KillHook, no_kill
from agent.getter.getter import ArtifactGetter, HttpGetter
from agent.identity.claims import DEFAULT_IDENTITY_TTL
from agent.identity.keyring import Keyring
from agent.identity.vaultlogin import VaultJwt
from agent.jobspec.limits import DEFAULT_MAX_SHUTDOWN_DELAY
from agent.network.base import Network
from agent.runner.checkresults import CheckResults
from agent.runner.logmonhook import HOST_LOGMON, TaskLogs
from agent.runner.registrar import ServiceRegistrar
from agent.runner.taskdirs import HostTaskDirs, TaskDirs
from agent.runner.vaulttoken import TokenIssuer
from agent.state import StateStore
from agent.templates.runner import TemplateDeps


@dataclass
class RunnerDeps:
    store: StateStore
    drivers: DriverRegistry
    network: Network | None
    data_dir: Path
    schedule: Callable[[float, Callable[[], None]], None]
    # the failed alloc's replacement, given its AllocRunner (agent.runner.alloc; typed Any: the deps sit
    # below the runner, which they must not import: agent.runner.interfaces)
    replace: Callable[[Any, str], None]
    templates: TemplateDeps
    bugs: Bugs = NO_BUGS
    dirs: TaskDirs | None = None
    task_logs: TaskLogs = HOST_LOGMON  # process tasks' logmons (agent.runner.logmonhook)
    services: ServiceRegistrar | None = None
    advertise_address: str = ""
    # the node's address fingerprinted at start (agent.client.checktarget.fingerprinted_address): where a
    # host-mode check goes when advertise_address is "" (Nomad: the port mapping's HostIP)
    node_address: str = ""
    vault: TokenIssuer | None = None  # the agent's Vault client: creates and revokes tasks' tokens
    vault_token_role: str = DEFAULT_TOKEN_ROLE
    vault_jwt: VaultJwt = field(default_factory=VaultJwt)  # the workload identity workflow's settings
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep  # a task's shutdown_delay, in its stop's thread
    # At each named step (agent.fieldbugs.killpoints): a no-op, the `crash-at` SIGKILL, or a test's Killed.
    kill_point: KillHook = no_kill
    # Where blocking steps run (agent.client.offload): threads whose continuations come back to the loop.
    offload: Offload = run_inline
    host_volumes: Mapping[str, tuple[str, bool]] = field(default_factory=dict)  # the node's, by name
    # The agent's own files and dirs besides data_dir: a host volume never leads into them
    # (agent.allocdir.hostvolumes)
    own_paths: tuple[Path, ...] = ()
    getter: ArtifactGetter = field(default_factory=HttpGetter)  # tasks' artifacts (agent.getter)
    max_kill_timeout: float = 30.0  # the client's cap on a task's kill_timeout (Nomad's max_kill_timeout)
    max_shutdown_delay: float = DEFAULT_MAX_SHUTDOWN_DELAY  # the client's cap on a shutdown_delay's wait
    identity_ttl: float = DEFAULT_IDENTITY_TTL  # a workload identity without a ttl: its tokens' (seconds)
    node_table: Mapping[str, str] = field(default_factory=dict)  # ${node.*}, ${attr.*}, ${meta.*} (taskenv)
    check_results: CheckResults = field(default_factory=CheckResults)  # nomad checks (runner.checks)
    keyring: Keyring | None = None  # signs the tasks' workload identities (None: the data dir's)

    def __post_init__(self) -> None:
        if self.dirs is None:
            self.dirs = HostTaskDirs()
        if self.keyring is None:
            self.keyring = Keyring(self.data_dir)  # its key is made at its first use

    @property
    def task_dirs(self) -> TaskDirs:
        assert self.dirs is not None  # set in __post_init__
        return self.dirs
