"""The artifact hook (agent.runner.hooks.ArtifactHook), handed a fake getter, the task's env, the
alloc's serial (its steps at once: run_inline) and the stop's cancel: the task's artifacts fetched
in order off the loop with the env read at the setup; a failed download is its event and the
setup's error naming the source, retryable when the server did not answer; a stop meanwhile is no
failure to report."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from agent.client.offload import Serial, run_inline
from agent.errors import AgentError, Unavailable
from agent.runner.hooks import ARTIFACT_DOWNLOAD_FAILED, DOWNLOADING_ARTIFACTS, ArtifactHook
from agent.structs.model import Artifact, Task


class Getter:
    def __init__(self, fail: dict[str, Exception] | None = None) -> None:
        self.fetched: list[tuple[str, dict[str, str], bool]] = []
        self.fail = fail or {}

    def fetch(
        self,
        task_dir: Path,
        artifact: Artifact,
        env: dict[str, str],
        owner: tuple[int, int] | None = None,
        cancel: threading.Event | None = None,
    ) -> int:
        self.fetched.append((artifact.source, env, cancel is not None))
        if artifact.source in self.fail:
            raise self.fail[artifact.source]
        return 1


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def event(self, type_: str, message: str, **details: Any) -> None:
        self.seen.append((type_, message))


SOURCES = ("https://a.invalid/one.tgz", "https://a.invalid/two.tgz")


def run(tmp_path: Path, getter: Getter, cancel: threading.Event | None = None) -> tuple[list[Any], Events]:
    t = Task(name="web", driver="exec", artifacts=tuple(Artifact(source=s) for s in SOURCES))
    events = Events()
    env = {"NOMAD_TASK_NAME": "web"}
    h = ArtifactHook(
        t, events, getter, tmp_path, lambda: env, Serial(run_inline, "t"), cancel or threading.Event(), "a1"
    )
    done: list[Any] = []
    h.setup(done.append)
    return done, events


def test_the_artifacts_are_fetched_in_order_with_the_tasks_env_and_the_stops_cancel(tmp_path: Path) -> None:
    getter = Getter()
    done, events = run(tmp_path, getter)
    assert done == [None]
    assert getter.fetched == [(s, {"NOMAD_TASK_NAME": "web"}, True) for s in SOURCES]
    assert events.seen == [(DOWNLOADING_ARTIFACTS, "Client is downloading artifacts")]


@pytest.mark.parametrize(
    ("exc", "kind"), [(AgentError("404 Not Found"), AgentError), (Unavailable("timed out"), Unavailable)]
)
def test_a_failed_download_is_an_event_and_the_setups_error_naming_its_source(
    tmp_path: Path, exc: Exception, kind: type[Exception]
) -> None:
    getter = Getter({SOURCES[0]: exc})
    done, events = run(tmp_path, getter)
    (failed,) = done
    message = f'failed to download artifact "{SOURCES[0]}": {exc}'
    assert type(failed) is kind and str(failed) == message
    assert events.seen[-1] == (ARTIFACT_DOWNLOAD_FAILED, message)
    assert [s for s, _, _ in getter.fetched] == [SOURCES[0]]  # the second is not fetched


def test_a_download_ended_by_the_stop_is_no_failure_to_report(tmp_path: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    ended = AgentError("cancelled")
    done, events = run(tmp_path, Getter({SOURCES[0]: ended}), cancel)
    assert done == [ended]
    assert [t for t, _ in events.seen] == [DOWNLOADING_ARTIFACTS]
