"""The main loop alone (agent.client.loop.Loop), with no Core: its timers, a call it did not take,
a piece of work that fails."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from agent.client.loop import Loop
from agent.errors import NotRun

SETTLE = 5.0  # seconds a loop on an idle machine takes to run what it was given, at most


@pytest.fixture
def running() -> Iterator[tuple[Loop, threading.Thread]]:
    loop = Loop()
    thread = threading.Thread(target=loop.run, name="test-loop", daemon=True)
    thread.start()
    yield loop, thread
    loop.stop()
    thread.join(SETTLE)


def test_timers_run_on_the_loop_in_the_order_they_come_due(running: tuple[Loop, threading.Thread]) -> None:
    loop, thread = running
    ran: list[tuple[str, str]] = []
    done = threading.Event()

    def timer(name: str) -> None:
        ran.append((name, threading.current_thread().name))
        if len(ran) == 3:
            done.set()

    def arm() -> None:  # scheduled from the loop, as the parts do
        loop.schedule(0.3, lambda: timer("late"))
        loop.schedule(0.0, lambda: timer("now"))
        loop.schedule(0.15, lambda: timer("soon"))

    loop.call(arm, timeout=SETTLE)
    assert done.wait(SETTLE), f"the timers did not all run: {ran}"
    assert ran == [("now", thread.name), ("soon", thread.name), ("late", thread.name)]


def test_a_call_the_loop_did_not_take_is_withdrawn_and_never_runs() -> None:
    loop = Loop()  # not running yet: nothing takes the call
    ran: list[str] = []
    with pytest.raises(NotRun, match="retrying is safe"):
        loop.call(lambda: ran.append("withdrawn"), timeout=0.05)
    thread = threading.Thread(target=loop.run, daemon=True)
    thread.start()
    try:
        assert loop.call(lambda: "after", timeout=SETTLE) == "after"  # behind the withdrawn one
    finally:
        loop.stop()
        thread.join(SETTLE)
    assert ran == [], "a withdrawn call ran behind its caller's back"


def test_work_that_fails_does_not_stop_the_loop(running: tuple[Loop, threading.Thread]) -> None:
    loop, _ = running

    def broken() -> None:
        raise RuntimeError("a handler's bug")

    loop.post(broken)
    loop.post(lambda: loop.schedule(0.0, broken))  # a timer that fails, too
    assert loop.call(lambda: "still turning", timeout=SETTLE) == "still turning"
    with pytest.raises(ZeroDivisionError):  # a call's own error goes back to its caller
        loop.call(lambda: 1 // 0, timeout=SETTLE)
