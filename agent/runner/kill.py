"""Killing an alloc's tasks off the main loop (Nomad's alloc runner's killTasks and its task runner's
kill): each with its kill_signal, SIGKILL after its kill_timeout, all at once, so that an alloc's stop
takes its longest kill_timeout, not their sum; and the stop of tasks to start them again (a restart,
a network recovery)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence

from agent.drivers.base import TaskDriver, TaskHandle
from agent.errors import AgentError
from agent.jobspec.durations import format_duration
from agent.runner.interfaces import AllocHost
from agent.structs.model import Task
from agent.structs.records import TaskState

log = logging.getLogger(__name__)


def kill_off_loop(
    ar: AllocHost,
    what: str,
    tasks: list[tuple[Task, TaskHandle]],
    then: Callable[[], None],
    *,
    delays: Mapping[str, float] | None = None,
) -> None:
    """Stop the tasks off the main loop (in the alloc's Serial: its next operations wait), then
    `then` on it. `delays`: the seconds each task waits first (its shutdown_delay), in its own
    thread. A stop that fails is an event; the driver's next start of the task or the teardown
    removes what is left."""
    if not tasks:
        then()
        return
    stops = [
        (t.name, ar.driver(t), h, t.kill_timeout, t.kill_signal, (delays or {}).get(t.name, 0.0))
        for t, h in tasks
    ]

    def blocking() -> list[tuple[str, str]]:
        failed: list[tuple[str, str]] = []

        def one(name: str, driver: TaskDriver, h: TaskHandle, timeout: float, sig: str, delay: float) -> None:
            if delay:
                ar.d.sleep(delay)
            try:
                driver.stop(h, timeout, sig)
            except AgentError as exc:
                failed.append((name, str(exc)))

        threads = [threading.Thread(target=one, args=stop, daemon=True) for stop in stops[1:]]
        for th in threads:
            th.start()
        one(*stops[0])
        for th in threads:
            th.join()
        return failed

    def done(result: object, exc: Exception | None) -> None:
        if exc is not None:
            log.error("alloc=%s: %s failed: %s", ar.id[:8], what, exc)
            ar.event("", "Kill Failed", f"{what}: {exc}")
        for name, reason in result if isinstance(result, list) else ():
            ar.event(name, "Kill Failed", reason)
        then()

    ar.serial.off_loop(what, blocking, done)


def kill_in_phases(
    ar: AllocHost,
    reason: str,
    phases: list[list[tuple[Task, TaskHandle]]],
    then: Callable[[], None],
    delays: Mapping[str, float],
) -> None:
    """An alloc's stop: each phase's tasks killed together (each after its shutdown_delay, capped at
    the client's max_shutdown_delay), the next phase once they are all dead
    (agent.decide.lifecycle.plan_kill_order: sidecars last), then `then`."""
    if not phases:
        then()
        return
    tasks, rest = phases[0], phases[1:]
    limit = ar.d.max_shutdown_delay
    waits = {name: capped_delay(asked, limit) for name, asked in delays.items()}
    for t, _ in tasks:
        if waits.get(t.name):  # Nomad's task runner: services gone, then this wait, then the signal
            shown = format_duration(waits[t.name])
            why = capped_why(delays[t.name], limit)
            message = f"Waiting for shutdown_delay of {shown} before killing the task{why}."
            ar.event(t.name, "Waiting for shutdown delay", message)
        sent = t.kill_signal or "the image's STOPSIGNAL"
        ar.event(t.name, "Killing", f"Sent {sent} ({reason})")
    kill_off_loop(ar, "stop", tasks, lambda: kill_in_phases(ar, reason, rest, then, delays), delays=waits)


def stop_for_restart(
    ar: AllocHost, tasks: Sequence[Task], then: Callable[[], None], *, events: bool = False
) -> None:
    """Stop tasks to start them again: recorded dead first, so a kill before the start leaves a
    task the restore starts again (uncounted), never an 'exit' it would count. `events`: each
    stopped task's exit and its restart are told, as Nomad's task runner tells a restart it was
    asked for (restartImpl: the kill's exit is "Terminated", then the restart tracker's
    triggered restart "Restarting" with no delay, then "Started")."""
    stopping: list[tuple[Task, TaskHandle]] = []
    for t in tasks:
        h = ar.state.handle(t.name)
        if h is not None:
            ar.state.update_task(t.name, state=TaskState.DEAD)
            stopping.append((t, h))

    def stopped() -> None:
        for t, h in stopping if events else ():
            try:
                code = ar.driver(t).status(h).exit_code
            except AgentError:
                code = None  # its engine cannot say: the exit is told without a code
            ar.event(t.name, "Terminated", f"Exit Code: {exit_text(code)}", exit_code=code)
            ar.event(t.name, "Restarting", "Task restarting in 0s", start_delay=0)
        then()

    kill_off_loop(ar, "stop for restart", stopping, stopped)


def exit_text(code: int | None, while_down: bool = False) -> str:
    """A task's exit code as its events and failure reasons show it; an unknown one says why."""
    if code is not None:
        return str(code)
    return "unknown (the task died while the agent was down)" if while_down else "unknown"


def capped_delay(asked: float, limit: float) -> float:
    """The seconds a stop waits for a shutdown_delay: as asked, at most the client's
    max_shutdown_delay. A submission above it is refused (agent.jobspec.build); a record stored before
    that refusal existed (a restore reads it as it was) is capped here, so a jobspec's "87600h" can
    no longer hold a stop, and the GC and purge behind it, for ten years."""
    return min(asked, limit)


def capped_why(asked: float, limit: float) -> str:
    """What an event adds when the wait was capped ("" when not)."""
    if asked <= limit:
        return ""
    return f" ({format_duration(asked)} capped at the client's max_shutdown_delay)"
