"""A task's Nomad service checks (Nomad's client checker and check watcher): the `http` and `tcp`
checks of its `provider = "nomad"` services (and of its group's services whose check names it as
`task`) are run every `interval` while the task runs, the first after half an interval, each with
its `timeout`; their last results are what `GET /v1/client/allocation/:id/checks` answers. A check
with `check_restart` (limit > 0) restarts the task once it has stayed unhealthy for its limit
(agent.decide.taskdecisions.plan_check_restart): the task is killed with its kill signal, and its exit
goes to the restart policy as any failure does (Nomad's watcher restarts with failure = true).

Where a check goes (agent.client.checktarget, Nomad's GetAddress): a port the alloc reserved at the node's
advertise address (`address_mode = "host"`, the default), or the alloc's own address
(`address_mode = "alloc"`, and a bridge alloc on a node with no advertise address): never another
host, never loopback, resolved once per probe. Consul services' checks are Consul's to run.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import socket
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from agent.client.checktarget import CheckTarget, check_target, http_request, is_local_address
from agent.client.offload import Offload
from agent.decide.taskdecisions import (
    CHECK_OUTPUT_LIMIT,
    CheckWatch,
    check_result,
    plan_check_restart,
    plan_kill_signal,
    plan_kill_timeout,
    plan_watched_group,
)
from agent.drivers.base import TaskHandle
from agent.fieldbugs.bugs import Bugs
from agent.runner.checkresults import CheckResults
from agent.runner.checks_script import (
    PASSING,
    ScriptCheck,
    script_argv,
    script_checks,
    script_status,
    update_ttl,
)
from agent.runner.interfaces import AllocContext, TaskEvents
from agent.runner.registrar import ServiceRegistrar
from agent.structs.model import Check, Service, Task

log = logging.getLogger(__name__)
RUN_TYPES = ("http", "tcp")  # the check types Nomad's client runs for its own services
USER_AGENT = "Nomad/fieldlab-agent"


@dataclass(frozen=True)
class Watched:
    id: str  # the checker's: its results are stored under it
    watcher_id: str  # the check watcher's, which finds the status it judges under it (the same)
    check: Check
    service: Service
    group_level: bool


def check_id(alloc_id: str, group: str, task: str, c: Check) -> str:
    """A stable ID for one check of one alloc (Nomad hashes the same parts with sha256)."""
    parts: tuple[str, ...] = (alloc_id, group, task, c.name, c.type, c.port, f"{c.interval}", f"{c.timeout}")
    parts += (c.path, c.method)
    parts += (c.address_mode,) if c.address_mode else ()  # only when set, as Nomad's Hash
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


def check_mode(c: Check) -> str:
    """Nomad's CheckMode: a check with `on_update = "ignore"` is a readiness check (its failures
    hold back no deployment), any other a healthiness check."""
    return "readiness" if c.on_update == "ignore" else "healthiness"


def _connect_address(address: str, port: int) -> str:
    """The IP a check connects to: the target resolved once, and refused when it is loopback or
    unspecified (a name given as the node's address is looked up here, and that answer is used)."""
    infos = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM)
    if not infos:
        raise OSError(f"{address}: no address")
    ip = str(infos[0][4][0])
    if is_local_address(ip):
        raise OSError(f"{address} is {ip}, a loopback address: checks never go to loopback")
    return ip


def _probe(kind: str, target: CheckTarget, c: Check) -> tuple[int | None, str, str]:
    """One probe (off the loop): (http status or None, error, body). It goes to `target` only."""
    request = http_request(c.method, c.path) if kind == "http" else ("", "")
    if isinstance(request, str):
        return None, request, ""
    try:
        ip = _connect_address(target.address, target.port)
        if kind == "tcp":
            socket.create_connection((ip, target.port), timeout=c.timeout).close()
            return None, "", ""
        conn = _connection(c, ip, target.port)
        try:
            _send(conn, request[0], request[1], c)
            resp = conn.getresponse()
            return resp.status, "", resp.read(CHECK_OUTPUT_LIMIT).decode(errors="replace")
        finally:
            conn.close()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        return None, str(exc) or type(exc).__name__, ""


def _connection(c: Check, ip: str, port: int) -> http.client.HTTPConnection:
    """The check's connection: https when its `protocol` says so, verifying the server's
    certificate against the address connected to unless `tls_skip_verify` (Nomad's checker)."""
    if c.protocol != "https":
        return http.client.HTTPConnection(ip, port, timeout=c.timeout)
    context = ssl.create_default_context()
    if c.tls_skip_verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return http.client.HTTPSConnection(ip, port, timeout=c.timeout, context=context)


def _send(conn: http.client.HTTPConnection, method: str, target: str, c: Check) -> None:
    """The request as Nomad's checker sends it: the check's headers (every value of each; a `Host`
    header is the request's host), its User-Agent unless the check gives one, its body."""
    names = {n.lower() for n in c.header}
    conn.putrequest(method, target, skip_host="host" in names, skip_accept_encoding=True)
    for name, values in c.header.items():
        for value in values:
            conn.putheader(name, value)
    if "user-agent" not in names:
        conn.putheader("User-Agent", USER_AGENT)
    body = c.body.encode()
    if body or method in ("POST", "PUT", "PATCH"):  # as Go's client: no length for an empty GET
        conn.putheader("Content-Length", str(len(body)))
    conn.endheaders(body or None)


class CheckedTask(TaskEvents, Protocol):
    """What the check watcher reads and does of its task: its handle (which run it watches), a
    command run in it (a script check) in the environment its last start had, its events."""

    def handle(self) -> TaskHandle | None: ...

    def exec_env(self) -> dict[str, str]: ...

    def exec(self, argv: list[str], timeout: float, then: Callable[[int, str], None]) -> None: ...


@dataclass(frozen=True)
class CheckPorts:
    """What the check watcher is handed (agent.runner.taskhooks): its task, the alloc it reads,
    the task's lifecycle as it uses it, where results go, Consul (script checks' TTLs), and the
    loop's clock, timers and offload."""

    task: Task
    alloc: AllocContext
    lifecycle: CheckedTask
    stop_task: Callable[[TaskHandle, float, str], None]  # the driver's stop (blocking: offloaded)
    mark_failed: Callable[[], None]  # the task's next exit is a failure (a check_restart kill)
    results: CheckResults
    services: ServiceRegistrar | None
    address: Callable[[], str]  # the node's advertise address, else its fingerprinted one
    max_kill_timeout: float
    bugs: Bugs
    clock: Callable[[], float]
    schedule: Callable[[float, Callable[[], None]], None]
    offload: Offload


class ChecksHook:
    name = "checks"

    def __init__(self, ports: CheckPorts) -> None:
        self.p = ports
        self._generation = 0
        self._ids: set[str] = set()

    def _checks(self) -> list[Watched]:
        """The task's checks; a group service's check that names no task is run by the group's
        first main task (Nomad's alloc-level checker runs it while the alloc runs: here while that
        task does), shown with no task, and restarts nothing."""
        ar, task = self.p.alloc, self.p.task.name
        watched_group = plan_watched_group(ar.group.name, self.p.bugs)
        carrier = next((t.name for t in ar.group.tasks if t.lifecycle is None), "")
        found = [(s, False) for s in self.p.task.services] + [(s, True) for s in ar.group.services]
        out = []
        for s, grp in found:
            for c in s.checks if s.provider == "nomad" else ():
                if c.type not in RUN_TYPES or (grp and c.task != task and (c.task or task != carrier)):
                    continue
                owner = c.task if grp else task  # "" for a group check that names no task
                ids = check_id(ar.id, ar.group.name, owner, c), check_id(ar.id, watched_group, owner, c)
                out.append(Watched(*ids, c, s, grp))
        return out

    def poststart(self, handle: TaskHandle) -> None:
        self._watch(handle)

    def reattached(self, handle: TaskHandle) -> None:
        self._watch(handle)

    def exited(self) -> None:
        self._unwatch()

    def stop(self) -> None:
        self._unwatch()

    def _unwatch(self) -> None:
        self._generation += 1
        self.p.results.drop(self.p.alloc.id, self._ids)

    def _watch(self, handle: TaskHandle) -> None:
        """Start (again) watching the task's checks: a new run of the task, a new grace."""
        p = self.p
        self._generation += 1
        generation, now = self._generation, p.clock()
        for w in self._checks():
            self._ids.add(w.id)
            r = w.check.restart if not (w.group_level and not w.check.task) else None
            watch = CheckWatch(
                interval=w.check.interval,
                limit=r.limit if r else 0,
                grace_until=now + (r.grace if r else 0.0),
                ignore_warnings=r.ignore_warnings if r else False,
            )
            p.results.put(p.alloc.id, self._result(w, "pending", "", None, now))
            self._schedule(handle, w, watch, generation, w.check.interval / 2)
        scripts = script_checks(p.alloc.id, p.alloc.group, p.task)  # Consul's TTL checks
        for sc in scripts if scripts and p.services is not None else ():  # when there is a Consul
            # the first run at once, as Nomad's (once the loop has seen the alloc's tasks started)
            self._schedule_script(handle, sc, self._script_watch(sc.check, now), generation, 0.0)

    def _schedule_script(
        self, handle: TaskHandle, sc: ScriptCheck, watch: CheckWatch, gen: int, delay: float
    ) -> None:
        self.p.schedule(delay, lambda: self._run_script(handle, sc, watch, gen))

    @staticmethod
    def _script_watch(c: Check, now: float) -> CheckWatch:
        r = c.restart
        return CheckWatch(
            interval=c.interval,
            limit=r.limit if r else 0,
            grace_until=now + (r.grace if r else 0.0),
            ignore_warnings=r.ignore_warnings if r else False,
        )

    def _run_script(self, handle: TaskHandle, sc: ScriptCheck, watch: CheckWatch, gen: int) -> None:
        """One run of a script check in its task (agent.runner.checks_script), its result sent to
        Consul, check_restart applied; the next one an interval later."""
        p = self.p
        if not self._current(handle, gen):
            if gen == self._generation and (h := p.lifecycle.handle()) is not None and h.id == handle.id:
                self._schedule_script(handle, sc, watch, gen, sc.check.interval)  # not running yet
            return
        services = p.services

        def ran(code: int, output: str) -> None:
            if not self._current(handle, gen) or services is None:
                return
            status, text = script_status(code, output)
            p.offload(
                f"check-ttl-{p.task.name}",
                lambda: update_ttl(services.consul, sc.consul_id, status, text),
                lambda why, exc: self._ttl_failed(sc, why, exc),
            )
            seen = "success" if status == PASSING else status  # the watcher's word for healthy
            after, restart = plan_check_restart(watch, seen, p.clock())
            if restart:
                self._restart(handle, sc.check)
                return
            self._schedule_script(handle, sc, after, gen, sc.check.interval)

        p.lifecycle.exec(script_argv(sc.check, p.lifecycle.exec_env()), sc.check.timeout, ran)

    def _schedule(self, handle: TaskHandle, w: Watched, watch: CheckWatch, gen: int, delay: float) -> None:
        self.p.schedule(delay, lambda: self._run(handle, w, watch, gen))

    def _current(self, handle: TaskHandle, gen: int) -> bool:
        h = self.p.lifecycle.handle()
        same_run = gen == self._generation and h is not None and h.id == handle.id
        return same_run and self.p.alloc.alloc_running()

    def _target(self, w: Watched) -> CheckTarget | str:
        """Where the check goes (agent.client.checktarget): the alloc's own reserved ports and addresses."""
        rec = self.p.alloc.rec
        return check_target(
            mode=w.check.address_mode,
            label=w.check.port or w.service.port,
            ports=rec.ports,
            alloc_address=rec.address,
            node_address=self.p.address(),
            custom=w.service.address,
        )

    def _run(self, handle: TaskHandle, w: Watched, watch: CheckWatch, gen: int) -> None:
        if not self._current(handle, gen):
            return
        p, target = self.p, self._target(w)

        def blocking() -> tuple[int | None, str, str]:
            if isinstance(target, str):
                return None, target, ""
            return _probe(w.check.type, target, w.check)

        def done(got: object, exc: Exception | None) -> None:
            if not self._current(handle, gen):
                return
            code, error, body = got if isinstance(got, tuple) else (None, str(exc), "")
            status, output = check_result(w.check.type, code, error, body)
            now = p.clock()
            p.results.put(p.alloc.id, self._result(w, status, output, code, now))
            # the watcher judges the status it finds under its own ID of the check (Nomad's)
            found = p.results.of(p.alloc.id).get(w.watcher_id)
            if found is None:
                if now >= watch.grace_until and watch.limit > 0:
                    where = f"alloc={p.alloc.id[:8]} task={p.task.name}"
                    log.warning("%s: watched check %r not found", where, w.check.name)
                self._schedule(handle, w, watch, gen, w.check.interval)
                return
            after, restart = plan_check_restart(watch, str(found["Status"]), now)
            if restart:
                self._restart(handle, w.check)
                return
            self._schedule(handle, w, after, gen, w.check.interval)

        p.offload(f"check-{p.task.name}", blocking, done)

    def _restart(self, handle: TaskHandle, check: Check) -> None:
        """check_restart: the task is killed; its exit is the restart policy's (a failure)."""
        p, t = self.p, self.p.task
        self._generation += 1  # every check of the task waits for its next start
        p.mark_failed()  # its exit is a failure, whatever its code
        p.lifecycle.event("Restart Signaled", f'healthcheck: check "{check.name}" unhealthy')
        log.info("alloc=%s task=%s: check %r unhealthy: restarting", p.alloc.id[:8], t.name, check.name)
        sig = plan_kill_signal(t.kill_signal, t.driver, p.bugs)
        timeout = plan_kill_timeout(t.kill_timeout, p.max_kill_timeout, p.bugs)
        p.offload(f"check-restart-{t.name}", lambda: p.stop_task(handle, timeout, sig), _ignore)

    def _result(self, w: Watched, status: str, output: str, code: int | None, now: float) -> dict[str, Any]:
        """api.AllocCheckStatus."""
        ar = self.p.alloc
        return {
            "ID": w.id,
            "Check": w.check.name,
            "Group": f"{ar.job.id}.{ar.group.name}[0]",  # the alloc's Name, as Nomad's
            "Mode": check_mode(w.check),
            "Output": output,
            "Service": w.service.name,
            "Task": "" if w.group_level else self.p.task.name,  # the service's task: none for a group's
            "Status": status,
            "StatusCode": code or 0,
            "Timestamp": int(now),
        }

    def _ttl_failed(self, sc: ScriptCheck, why: object, exc: Exception | None) -> None:
        """A TTL update Consul did not take: logged (Nomad's hook logs it and tries at the next run)."""
        if exc is not None or why:
            log.warning(
                "alloc=%s task=%s: script check %r: %s",
                self.p.alloc.id[:8],
                self.p.task.name,
                sc.check.name,
                exc or why,
            )


def _ignore(result: object, exc: Exception | None) -> None:
    if exc is not None:
        log.warning("check restart: the task's stop failed: %s", exc)
