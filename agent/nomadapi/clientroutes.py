"""Nomad's client allocation endpoints for this node (the client half of
command/agent/alloc_endpoint.go, and stats_endpoint.go): restart, signal, GC an allocation, its
resource usage and check results; GC the node; the host's stats. An alloc's files and logs are
agent.nomadapi.clientfs.
"""

from __future__ import annotations

from typing import Any, Protocol
from urllib.parse import unquote

from agent.api.handler import Handler, Response, query_params
from agent.decide.taskdecisions import plan_user_restart
from agent.errors import Conflict, NotFound
from agent.nomadapi.context import Allocs, Changes, NodeParts, OnLoop, find_alloc
from agent.nomadapi.hoststats import host_stats
from agent.nomadapi.http import HttpError, answer, body_json, meta_headers
from agent.nomadapi.signals import NOT_SENT, signal_error, signal_name
from agent.nomadapi.usage import CpuSamples, alloc_usage, no_usage


class ClientAllocPort(OnLoop, Changes, Allocs, NodeParts, Protocol):
    cpu_samples: CpuSamples  # the last CPU sample per task, for the stats' percentages


def managed_alloc(api: Allocs, ref: str) -> Any:
    """On the loop: the managed alloc `ref` names, to act in (restart, signal, exec, GC); an adopted
    one (agent.runner.adopt) is refused with a 409 saying how to end it."""
    adopted = api.adoption.find(ref)
    if adopted is not None:
        raise Conflict(
            f"alloc {adopted.id} is adopted (found running after the state database was lost): the agent "
            f"does not manage it; stop it with `fieldlab-agent alloc stop {adopted.id}`"
        )
    return find_alloc(api, ref)


def client_routes(api: ClientAllocPort) -> list[tuple[str, str, Handler]]:
    def managed(ref: str) -> Any:
        return managed_alloc(api, ref)

    def restart(groups: tuple[str, ...], body: bytes) -> Response:
        data = body_json(body)
        name, all_tasks = data.get("TaskName") or "", data.get("AllTasks") or False
        if not isinstance(name, str):
            raise HttpError(400, '"TaskName" must be a task name')
        if not isinstance(all_tasks, bool):
            raise HttpError(400, '"AllTasks" must be true or false')
        if all_tasks and name:  # Nomad's client refuses it in these words
            raise HttpError(400, "task name cannot be set when restarting all tasks")

        def do() -> None:
            r = managed(unquote(groups[0]))
            if all_tasks:  # finished lifecycle tasks too, from the first stage (Nomad 1.3.4+)
                if not r.alloc_running():
                    raise Conflict(
                        f"Failed to restart: alloc {r.id}: restart of an alloc that should not run"
                    )
                r.user_restart_all()
                return
            if name:
                task = next((t for t in r.group.tasks if t.name == name), None)
                if task is None:
                    raise NotFound(f"Failed to restart task {name!r}: task not found in alloc {r.id}")
                tasks = [task]
            else:
                tasks = list(r.group.tasks)
            names, refused = plan_user_restart(
                [(t.name, r.tasks[t.name].running()) for t in tasks], name, api.bugs
            )
            if refused:
                raise Conflict(f"Failed to restart: alloc {r.id}: {refused}")
            reason = "User requested task to restart" if name else "User requested running tasks to restart"
            for t in tasks:
                if t.name in names:
                    r.user_restart(t, reason)

        api.call(do)
        meta_headers(api.changes.current())
        return answer({})

    def send_signal(groups: tuple[str, ...], body: bytes) -> Response:
        name, sig = _signal_request(body_json(body))

        def do() -> None:
            r = managed(unquote(groups[0]))
            names = [
                t.name for t in r.group.tasks if r.tasks[t.name].running() and (not name or t.name == name)
            ]
            if name and name not in {t.name for t in r.group.tasks}:
                raise NotFound(f"Failed to signal task: {name!r} not found in alloc {r.id}")
            if not names:
                raise Conflict(
                    f"Failed to signal: no running task{' ' + name if name else ''} in alloc {r.id}"
                )
            if sig is None:  # Nomad's drivers' error, in its words (agent.nomadapi.signals)
                raise HttpError(400, signal_error(name, names))
            for n in names:
                r.user_signal(n, sig)

        api.call(do)
        meta_headers(api.changes.current())
        return answer({})

    routes: list[tuple[str, str, Handler]] = [
        ("PUT", r"/v1/client/allocation/([^/]+)/restart", restart),
        ("POST", r"/v1/client/allocation/([^/]+)/restart", restart),
        ("PUT", r"/v1/client/allocation/([^/]+)/signal", send_signal),
        ("POST", r"/v1/client/allocation/([^/]+)/signal", send_signal),
    ]
    return routes + _gc_routes(api, managed)


def _signal_request(data: dict[str, Any]) -> tuple[str, str | None]:
    """(task, signal name; None: a name Nomad's drivers refuse) of api.AllocSignalRequest's body."""
    name, raw = data.get("Task") or "", data.get("Signal") or "SIGKILL"
    if not isinstance(raw, str):
        raise HttpError(400, f'"Signal" {str(raw)[:32]!r} is not a signal name like SIGHUP')
    if not isinstance(name, str):
        raise HttpError(400, '"Task" must be a task name')
    if raw.upper() == NOT_SENT:
        raise HttpError(400, f'"Signal" {raw!r}: signal 0 (a liveness probe) is not sent to a task here')
    return name, signal_name(raw)


def _gc_routes(api: ClientAllocPort, managed: Any) -> list[tuple[str, str, Handler]]:
    def gc_alloc(groups: tuple[str, ...], body: bytes) -> Response:
        def do() -> None:
            r = managed(unquote(groups[0]))
            if r.rec.live:
                raise Conflict(f"alloc {r.id} is still running: stop it first (nomad alloc stop {r.id[:8]})")
            api.collector.collect_one(r.id)

        api.call(do)
        return answer({})

    def gc_node(groups: tuple[str, ...], body: bytes) -> Response:
        api.call(lambda: api.collector.gc(force=True))
        return answer({})

    def stats(groups: tuple[str, ...], body: bytes) -> Response:
        """As Nomad's client (allocRunner.LatestAllocStats): the running tasks' usage (`?task=`: that
        task's alone), summed; an alloc with none running (stopped, not yet collected) answers 200
        with zero usage, as Nomad's does until GC."""
        only = query_params().get("task", "")

        def running() -> tuple[str, list[tuple[str, Any, Any]]]:
            r = managed(unquote(groups[0]))
            tasks = [
                (t.name, r.driver(t), h)
                for t in r.group.tasks
                if (not only or t.name == only)
                and r.tasks[t.name].running()
                and (h := r.state.handle(t.name)) is not None
            ]
            return r.id, tasks

        alloc_id, tasks = api.call(running)
        found = {}
        for name, driver, handle in tasks:  # off the loop: the engine's stats, cgroup files
            u = driver.usage(alloc_id, name, handle)
            if u is not None:
                found[name] = u
        return answer(alloc_usage(alloc_id, found, api.cpu_samples) if found else no_usage())

    def checks(groups: tuple[str, ...], body: bytes) -> Response:
        """api.AllocCheckStatuses: the last result of each nomad service check (agent.runner.checks)."""
        alloc_id = api.call(lambda: str(managed(unquote(groups[0])).id))
        return answer(api.deps.check_results.of(alloc_id))

    return [
        ("GET", r"/v1/client/allocation/([^/]+)/checks", checks),
        ("GET", r"/v1/client/allocation/([^/]+)/gc", gc_alloc),
        ("PUT", r"/v1/client/allocation/([^/]+)/gc", gc_alloc),
        ("GET", r"/v1/client/allocation/([^/]+)/stats", stats),
        ("GET", r"/v1/client/stats", lambda groups, body: answer(host_stats(api.deps.data_dir))),
        ("GET", r"/v1/client/gc", gc_node),
        ("PUT", r"/v1/client/gc", gc_node),
        ("POST", r"/v1/client/gc", gc_node),
    ]
