"""The docker driver's reads of the engine: one listing and one inspect per container inside a
`one_look` window, the agent's containers as docker lists them, and the watch of their deaths over
the engine's event stream. agent.drivers.docker builds the tasks' containers on top of these; every
engine error either of them does not handle becomes a DriverError through `engine_errors`."""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Iterator
from functools import wraps
from typing import Any, ParamSpec, TypeVar

import docker
import docker.errors
import requests

from agent.drivers.base import LABEL_ALLOC, LABEL_MANAGED, DriverError, ExitReport, KnownDeaths
from agent.drivers.dockernames import ManagedContainer

log = logging.getLogger(__name__)
WATCH_RECONNECT = 1.0  # seconds between tries to reopen the event stream while dockerd restarts
FULL_ID_LEN = 64  # a container's full id; a shorter one (a name, a prefix) is always inspected

P = ParamSpec("P")
R = TypeVar("R")


def engine_errors(what: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Every docker SDK or HTTP error that a method does not handle itself becomes a DriverError;
    one where the engine did not answer (connection refused or reset, a timeout, the socket gone
    while dockerd restarts) is `unavailable`, so that the caller retries rather than gives up."""

    def wrap(fn: Callable[P, R]) -> Callable[P, R]:
        @wraps(fn)
        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            try:
                return fn(*args, **kwargs)
            except docker.errors.APIError as exc:
                raise DriverError("docker", what, str(exc.explanation or exc)) from None
            except (requests.ConnectionError, requests.Timeout) as exc:
                raise DriverError("docker", what, f"engine unavailable: {exc}", unavailable=True) from None
            except (docker.errors.DockerException, requests.RequestException) as exc:
                unavailable = "Connection" in str(exc) or "connect" in str(exc)
                raise DriverError("docker", what, str(exc), unavailable=unavailable) from None

        return guarded

    return wrap


class EngineReads:
    """The engine's listings, inspects and event watch, on the `client` of the class that uses it."""

    client: Any  # the docker SDK's client (DockerDriver's property: made on first use)

    def __init__(self) -> None:
        self._look = _Look()
        self._events: Any = None

    # -- reads: one look at the engine inside a window -----------------------------------------
    @contextlib.contextmanager
    def one_look(self) -> Iterator[None]:
        """Inside: which containers exist comes from one listing of the managed ones (a handle not
        in it is gone, with no inspect), and each one that exists is inspected once, whatever number
        of questions (status, pid, netns, the pause container's) the threads ask about it."""
        look = self._look
        with look.lock:
            if not look.open:
                look.reset()
            look.open += 1
        try:
            yield
        finally:
            with look.lock:
                look.open -= 1
                if not look.open:
                    look.reset()

    def _attrs(self, cid: str) -> dict[str, Any] | None:
        """A container's inspect attributes, None when it does not exist (see `one_look`)."""
        look = self._look
        with look.lock:
            shared = look.open > 0
            one = look.per_id.setdefault(cid, threading.Lock()) if shared else None
        if one is None:
            return self._inspect(cid)
        with one:  # the first thread asking about `cid` inspects it; the others wait for its answer
            with look.lock:
                if cid in look.inspected:
                    return look.inspected[cid]
            attrs = None if not self._listed(cid) else self._inspect(cid)
            with look.lock:
                if look.open:
                    look.inspected[cid] = attrs
            return attrs

    def _listed(self, cid: str) -> bool:
        """Whether the window's one listing of managed containers has `cid` (a name or a short id
        is not in its terms: True, so that it is inspected)."""
        if len(cid) != FULL_ID_LEN:
            return True
        look = self._look
        with look.list_lock:
            with look.lock:
                listed = look.listed
            if listed is None:
                found = self.client.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=true"})
                listed = frozenset(str(c["Id"]) for c in found)
                with look.lock:
                    look.listed = listed
        return cid in listed

    def _inspect(self, cid: str) -> dict[str, Any] | None:
        try:
            attrs: dict[str, Any] = self.client.api.inspect_container(cid)
        except docker.errors.NotFound:
            return None
        return attrs

    def looks(self) -> tuple[bool, int]:
        """(inside a window, containers inspected in it): for tests and the bench."""
        with self._look.lock:
            return self._look.open > 0, len(self._look.inspected)

    @engine_errors("list containers")
    def managed_containers(self) -> list[ManagedContainer]:
        """The agent's containers as docker lists them: one request, no inspect per container (a
        container removed meanwhile is simply not listed)."""
        found = self.client.api.containers(all=True, filters={"label": f"{LABEL_MANAGED}=true"})
        return [ManagedContainer.listed(entry) for entry in found]

    @engine_errors("list containers")
    def alloc_labels(self, alloc_id: str) -> dict[str, str] | None:
        """The labels of a container of this alloc (job, group): who it was, when its record is lost."""
        for c in self.managed_containers():
            if c.labels.get(LABEL_ALLOC) == alloc_id:
                return dict(c.labels)
        return None

    def watch(self, report: ExitReport, stop: threading.Event, reconnect: float = WATCH_RECONNECT) -> None:
        """Report deaths of managed containers until `stop` is set (run in a thread; reconnects
        while dockerd restarts). A death while the stream was broken (dockerd stopping closes it,
        and may not send the die events of the containers it stops last) is found when it comes
        back: each managed container dead then whose death was not reported is reported. Those dead
        at the first connection are the restore's, not reported here. A task container's id is never
        reused (each start creates one); a pause container's is (docker restarts it), and each of
        its deaths the stream sends is reported."""
        known = KnownDeaths()
        first = True
        while not stop.is_set():
            try:
                stream = self.client.events(
                    decode=True,
                    filters={"type": "container", "event": ["die"], "label": [f"{LABEL_MANAGED}=true"]},
                )
                self._events = stream
                dead = self._dead_managed()  # listed after the stream opened: no death falls between
                for cid, alloc in dead:
                    if known.add(cid) and not first:
                        log.warning("container %s died while the docker event stream was down", cid[:12])
                        report(alloc, cid)
                first = False
                for ev in stream:
                    cid = str(ev.get("id") or ev.get("Actor", {}).get("ID", ""))
                    alloc = ev.get("Actor", {}).get("Attributes", {}).get(LABEL_ALLOC, "")
                    known.add(cid)  # every die is reported: a pause container docker restarted dies again
                    report(str(alloc), cid)
                    if stop.is_set():
                        return
            except Exception as exc:  # dockerd restarting: reconnect
                if stop.is_set():
                    return
                log.warning("docker event stream broke (%s); reconnecting", exc)
                stop.wait(reconnect)

    def _dead_managed(self) -> list[tuple[str, str]]:
        """(container id, alloc id) of each managed container that exited or is dead."""
        found = self.client.api.containers(
            all=True, filters={"label": f"{LABEL_MANAGED}=true", "status": ["exited", "dead"]}
        )
        return [(c.id, c.labels.get(LABEL_ALLOC, "")) for c in map(ManagedContainer.listed, found)]

    def close(self) -> None:
        """Ends a running watch (the blocking event stream)."""
        if self._events is not None:
            self._events.close()


class _Look:
    """What one `one_look` window has seen (guarded by `lock`; `open` counts nested windows)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.list_lock = threading.Lock()  # one listing per window, however many threads ask
        self.open = 0
        self.listed: frozenset[str] | None = None
        self.inspected: dict[str, dict[str, Any] | None] = {}
        self.per_id: dict[str, threading.Lock] = {}

    def reset(self) -> None:
        self.listed, self.inspected, self.per_id = None, {}, {}
