"""Which driver runs a task, and which owner holds a bridge group's network namespace.

The only place that knows drivers by name. A new driver is one module implementing
`agent.drivers.base.TaskDriver` plus one line in `build_registry`. A driver the client config turns
off (raw_exec unless `raw_exec_enabled`) is not registered: the registry only knows why, so that a job
asking for it is refused at submission with that reason (`refusal`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING

from agent.drivers.base import DriverError, ExitReport, NetnsOwner, TaskDriver
from agent.structs.model import Group, Task

# A driver's check of a task's `config` against this node's plugin config: (config key, why) each
ConfigCheck = Callable[[Task, str], list[tuple[str, str]]]

if TYPE_CHECKING:
    from agent.drivers.docker import DockerDriver
    from agent.drivers.exec import ExecDriver
    from agent.drivers.raw_exec import RawExecDriver


DOCKER = "docker"
DOCKER_DISABLED = (
    "driver docker is disabled on this client (docker_enabled = false: it has no docker engine); "
    "run the task with driver exec or raw_exec, or on a client with docker"
)


class DriverRegistry:
    def __init__(
        self,
        drivers: Iterable[TaskDriver],
        *,
        container_netns: NetnsOwner | None = None,
        path_netns: NetnsOwner | None = None,
        disabled: Mapping[str, str] | None = None,
        config_checks: Mapping[str, ConfigCheck] | None = None,
    ) -> None:
        self._drivers: dict[str, TaskDriver] = {}
        self._config_checks = dict(config_checks or {})
        self._disabled = dict(disabled or {})
        for d in drivers:
            if d.name in self._drivers:
                raise ValueError(f"driver {d.name!r} registered twice")
            self._drivers[d.name] = d
        both = sorted(set(self._drivers) & set(self._disabled))
        if both:
            raise ValueError(f"driver {both[0]!r} is both registered and disabled")
        self._container_netns = container_netns
        self._path_netns = path_netns

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(sorted(self._drivers))

    def all(self) -> Mapping[str, TaskDriver]:
        return dict(self._drivers)

    @contextlib.contextmanager
    def one_look(self) -> Iterator[None]:
        """Every driver's read-only window at once (`TaskDriver.one_look`)."""
        with contextlib.ExitStack() as stack:
            for d in self._drivers.values():
                stack.enter_context(d.one_look())
            yield

    def enabled(self, name: str) -> bool:
        return name in self._drivers

    def refusal(self, name: str) -> str | None:
        """Why a task of driver `name` cannot run on this client (None: it can)."""
        if name in self._drivers:
            return None
        if name in self._disabled:
            return self._disabled[name]
        return f"driver {name} is not run by this agent (it runs {', '.join(self.names)})"

    def config_refusals(self, task: Task, group_network: str) -> list[tuple[str, str]]:
        """(config key, why) of each option of the task's `config` this node refuses: its driver's
        plugin gates (docker: allow_privileged, allow_caps, volumes, ...; agent.drivers.dockeropts;
        exec and raw_exec: agent.drivers.execopts),
        for a task in a group of network mode `group_network`."""
        check = self._config_checks.get(task.driver)
        return check(task, group_network) if check is not None and task.driver in self._drivers else []

    def get(self, name: str) -> TaskDriver:
        try:
            return self._drivers[name]
        except KeyError:
            if name in self._disabled:
                raise DriverError(name, "driver", self._disabled[name]) from None
            raise DriverError(
                name, "driver", f"not run by this agent (it runs {', '.join(self.names)})"
            ) from None

    def needs_container_netns(self, group: Group) -> bool:
        """A bridge group with a task that joins a container's netns gets a pause container."""
        return any(self.get(t.driver).joins_container_netns for t in group.tasks)

    def netns_owner(self, group: Group) -> NetnsOwner:
        owner = self._container_netns if self.needs_container_netns(group) else self._path_netns
        if owner is None:
            kind = "container" if self.needs_container_netns(group) else "named"
            raise DriverError("agent", f"group {group.name}", f"no {kind} network namespace owner configured")
        return owner

    def owner_kinds(self) -> dict[str, NetnsOwner]:
        return {o.kind: o for o in (self._container_netns, self._path_netns) if o is not None}

    def watch(self, report: ExitReport, stop: threading.Event) -> list[threading.Thread]:
        """Start each driver's exit watch in a thread of its own."""
        threads = []
        for name, d in self._drivers.items():
            t = threading.Thread(target=d.watch, args=(report, stop), name=f"{name}-exits", daemon=True)
            t.start()
            threads.append(t)
        return threads


def build_registry(
    docker: DockerDriver | None,
    exec_driver: ExecDriver,
    *,
    raw_exec_enabled: bool = False,
    raw_exec: RawExecDriver | None = None,
) -> DriverRegistry:
    """The agent's drivers (one line each) and netns owners. raw_exec only when the client config
    enables it (`raw_exec` is the driver to use then, a new one when None); docker unless `docker` is
    None (docker_enabled false: a client without a docker engine, which has no pause containers
    either)."""
    from agent.drivers import raw_exec as raw
    from agent.drivers.dockerpause import PauseContainer
    from agent.network.owner import NamedNetns

    disabled = {} if raw_exec_enabled else {raw.NAME: raw.DISABLED}
    if docker is None:
        disabled[DOCKER] = DOCKER_DISABLED
    raw_driver = (raw_exec or raw.RawExecDriver()) if raw_exec_enabled else None
    checks: dict[str, ConfigCheck] = {exec_driver.name: exec_driver.refusals}
    if raw_driver is not None:
        checks[raw.NAME] = raw_driver.refusals
    if docker is not None:
        checks[DOCKER] = docker.refusals
    return DriverRegistry(
        [
            *([docker] if docker is not None else []),
            exec_driver,
            *([raw_driver] if raw_driver is not None else []),
        ],
        container_netns=PauseContainer(docker) if docker is not None else None,
        path_netns=NamedNetns(),
        disabled=disabled,
        config_checks=checks,
    )
