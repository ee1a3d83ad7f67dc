"""The task's templates (Nomad's template hook): the hook owns the task's template runner
(agent.templates.runner.TaskTemplates, made at its first use): the first render before the task's
first start, off the main loop (agent.templates.runner.SetupPass), and the variables of its `env =
true` templates for each start. Re-renders and change_mode live in the template runner; a restore's
render is the restorer's (all tasks' at once, agent.runner.restorer). Made only for a task with
templates."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.allocdir.sandbox import SandboxError, read_file
from agent.client.offload import Serial
from agent.decide.taskdecisions import plan_env_templates
from agent.errors import AgentError
from agent.fieldbugs.bugs import Bugs
from agent.runner.interfaces import TaskEvents, Then
from agent.structs.model import Template
from agent.templates.envfile import parse_env_file
from agent.templates.render import TemplateRenderError
from agent.templates.runner import TaskTemplates


@dataclass(frozen=True)
class TemplatePorts:
    """What the template hook is handed: how its template runner is made, where it says what
    happened, the alloc's turn (a render runs off the loop in it), the task dir and the bugs."""

    make: Callable[[], TaskTemplates]
    events: TaskEvents
    serial: Serial
    task_dir: Path
    bugs: Bugs


class TemplateHook:
    name = "template"

    def __init__(self, task: str, templates: tuple[Template, ...], ports: TemplatePorts) -> None:
        self.task, self.specs, self.p = task, templates, ports
        self._runner: TaskTemplates | None = None

    @property
    def templates(self) -> TaskTemplates:
        if self._runner is None:
            self._runner = self.p.make()
        return self._runner

    def setup(self, then: Then) -> None:
        tt = self.templates
        try:
            setup = tt.begin_render_all()
        except (AgentError, OSError) as exc:
            then(exc)
            return
        if setup is None:
            then(None)
            return

        def done(result: object, exc: Exception | None) -> None:
            try:
                tt.finish_render_all(setup, result if isinstance(result, list) else None, exc)
            except Exception as failed:
                if isinstance(failed, TemplateRenderError):
                    self.p.events.event("Template Failed", str(failed))
                then(failed)
                return
            then(None)

        self.p.serial.off_loop(f"render {self.task}", lambda: tt.run_render_all(setup), done)

    def render_again(self, then: Callable[[], None], failed: Callable[[Exception], None]) -> None:
        """Every template rendered anew, off the main loop in the alloc's turn (a restart with
        `restart { render_templates }`, as Nomad's hook's prestart), then `then`; `failed(exc)`
        when a render failed (the task's start fails)."""
        tt = self.templates
        setup = tt.begin_render_all()
        if setup is None:
            then()
            return

        def done(result: object, exc: Exception | None) -> None:
            try:
                tt.finish_render_all(setup, result if isinstance(result, list) else None, exc)
            except Exception as render_failed:
                failed(render_failed)
                return
            then()

        self.p.serial.off_loop(f"render {self.task}", lambda: tt.run_render_all(setup), done)

    def rendered_env(self) -> dict[str, str]:
        """The variables of the task's `env = true` templates as the agent rendered them, kept with
        the templates' states (agent.templates.changemode.TemplateState.env), at every start, so a
        change_mode restart picks up new values; they win over the task's env, as in Nomad. The file
        in the task dir is never read back: the task can write it. A line that was not KEY=VALUE was
        a "Template Env Failed" event when it was rendered. A state from an agent that kept no values
        falls back to the file only while it holds exactly what was rendered (its sha256)."""
        env: dict[str, str] = {}
        if not any(tpl.env for tpl in self.specs):
            return env
        states = {s.dest: s for s in self.templates.states()}
        envs = [(tpl, states[tpl.destination]) for tpl in self.specs if tpl.env and tpl.destination in states]
        read = plan_env_templates([st.rendered != st.delivered for _, st in envs], self.p.bugs)
        for (tpl, st), wanted in zip(envs, read, strict=True):
            if not wanted:
                continue
            if st.env is not None:
                env.update(st.env)
                continue
            why = "not rendered yet"
            if st.rendered:
                try:
                    text = read_file(self.p.task_dir, tpl.destination)
                except (SandboxError, OSError) as exc:
                    why = str(exc)
                else:
                    if hashlib.sha256(text.encode()).hexdigest() == st.rendered:
                        env.update(parse_env_file(text)[0])
                        continue
                    why = "changed since it was rendered: not used"
            self.p.events.event("Template Env Failed", f"{tpl.destination}: {why}")
        return env
