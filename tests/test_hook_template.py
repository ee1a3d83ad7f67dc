"""The template hook (agent.runner.templatehook.TemplateHook), handed a fake template runner, the
alloc's serial (steps at once) and the task dir: the first render off the loop before the first
start, a failed render its event and the setup's error; the `env = true` templates' variables as
rendered, never read back from a file the task changed."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, cast

from agent.client.offload import Serial, run_inline
from agent.fieldbugs.bugs import NO_BUGS
from agent.runner.templatehook import TemplateHook, TemplatePorts
from agent.structs.model import Template
from agent.templates.changemode import TemplateState
from agent.templates.render import TemplateRenderError
from agent.templates.runner import TaskTemplates


class Runner:
    """What the hook calls of the task's template runner."""

    def __init__(self, *, nothing: bool = False, fail: Exception | None = None) -> None:
        self.nothing, self.fail = nothing, fail
        self.calls: list[str] = []
        self.kept: list[TemplateState] = []

    def begin_render_all(self) -> object | None:
        self.calls.append("begin")
        return None if self.nothing else "setup"

    def run_render_all(self, setup: object) -> list[str]:
        self.calls.append("run")
        return ["rendered"]

    def finish_render_all(self, setup: object, results: list[str] | None, exc: Exception | None) -> None:
        self.calls.append(f"finish {results}")
        if self.fail is not None:
            raise self.fail

    def states(self) -> list[TemplateState]:
        return self.kept


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def event(self, type_: str, message: str, **details: Any) -> None:
        self.seen.append((type_, message))


def hook(tmp_path: Path, runner: Runner, *templates: Template) -> tuple[TemplateHook, Events, list[int]]:
    events, made = Events(), []

    def make() -> TaskTemplates:
        made.append(1)
        return cast(TaskTemplates, runner)

    ports = TemplatePorts(make, events, Serial(run_inline, "t"), tmp_path, NO_BUGS)
    specs = templates or (Template(destination="local/a"),)
    return TemplateHook("web", specs, ports), events, made


def test_the_first_render_runs_off_the_loop_before_the_first_start(tmp_path: Path) -> None:
    runner = Runner()
    h, events, made = hook(tmp_path, runner)
    done: list[Exception | None] = []
    h.setup(done.append)
    assert done == [None] and runner.calls == ["begin", "run", "finish ['rendered']"]
    assert events.seen == [] and made == [1]
    assert cast(object, h.templates) is runner and made == [1]  # one runner, the hook's


def test_nothing_to_render_goes_on_at_once(tmp_path: Path) -> None:
    runner = Runner(nothing=True)
    h, _, _ = hook(tmp_path, runner)
    done: list[Exception | None] = []
    h.setup(done.append)
    assert done == [None] and runner.calls == ["begin"]


def test_a_failed_render_is_its_event_and_the_setups_error(tmp_path: Path) -> None:
    failed = TemplateRenderError("local/a", "missing key")
    h, events, _ = hook(tmp_path, Runner(fail=failed))
    done: list[Exception | None] = []
    h.setup(done.append)
    assert done == [failed] and events.seen == [("Template Failed", str(failed))]


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def test_the_env_templates_variables_are_those_rendered_not_the_files(tmp_path: Path) -> None:
    runner = Runner()
    env_tpl = Template(destination="local/app.env", env=True)
    plain = Template(destination="local/plain.txt")
    h, events, _ = hook(tmp_path, runner, env_tpl, plain)
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "app.env").write_text("A=changed-by-the-task\n")
    runner.kept = [
        TemplateState("local/app.env", "restart", rendered=sha("A=1\n"), delivered="", env=(("A", "1"),)),
        TemplateState("local/plain.txt", "restart", rendered=sha("x")),
    ]
    assert h.rendered_env() == {"A": "1"} and events.seen == []


def test_an_old_state_without_values_reads_the_file_only_while_it_is_what_was_rendered(
    tmp_path: Path,
) -> None:
    runner = Runner()
    h, events, _ = hook(tmp_path, runner, Template(destination="local/app.env", env=True))
    (tmp_path / "local").mkdir()
    (tmp_path / "local" / "app.env").write_text("A=1\n")
    runner.kept = [TemplateState("local/app.env", "restart", rendered=sha("A=1\n"))]
    assert h.rendered_env() == {"A": "1"}
    (tmp_path / "local" / "app.env").write_text("A=evil\n")
    assert h.rendered_env() == {}
    assert events.seen == [("Template Env Failed", "local/app.env: changed since it was rendered: not used")]


def test_a_task_without_env_templates_makes_no_runner_for_its_env(tmp_path: Path) -> None:
    h, _, made = hook(tmp_path, Runner())
    assert h.rendered_env() == {} and made == []


def test_a_restarts_re_render_goes_on_or_fails_the_start(tmp_path: Path) -> None:
    """restart { render_templates }: every template rendered anew off the loop, then the restart
    goes on; a failed render goes to `failed` (the start fails) and the restart does not go on."""
    runner = Runner()
    h, _, _ = hook(tmp_path, runner)
    went_on: list[bool] = []
    failed: list[Exception] = []
    h.render_again(lambda: went_on.append(True), failed.append)
    assert went_on == [True] and failed == [] and runner.calls == ["begin", "run", "finish ['rendered']"]

    broken = TemplateRenderError("local/a", "missing key")
    h, _, _ = hook(tmp_path, Runner(fail=broken))
    went_on.clear()
    h.render_again(lambda: went_on.append(True), failed.append)
    assert went_on == [] and failed == [broken]

    h, _, _ = hook(tmp_path, Runner(nothing=True))
    h.render_again(lambda: went_on.append(True), failed.append)
    assert went_on == [True] and failed == [broken]
