"""change_mode: what to do when a template's content changes. Pure, persisted, and sticky.

For each template the agent keeps the hash of the content on disk (`rendered`) and of the content
the running task was last given (`delivered`: at its start, its last signal or restart). A task
needs an action exactly when `rendered != delivered`; that comparison is the "dirty" flag, so it
cannot be overwritten by a later no-op render (nomad-24140: Nomad kept one event per template,
"last event wins", and a no-op render after a real one lost the action). Actions are only planned
for a running task; for a task that is starting or restarting they wait (nomad-25861, 27960).

Crash safety: the runner persists the states before acting and after delivering; an action whose
delivery was not recorded is planned again after a restart (at least once), one that was recorded
is never repeated (at most once after the record).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class TemplateState:
    dest: str
    change_mode: str  # noop, signal, restart, script
    change_signal: str = ""
    rendered: str = ""  # sha256 of what is on disk ("" = never rendered)
    delivered: str = ""  # sha256 of what the running task was given
    # Only under the `last-event-wins` fault: the changed-flag of the LAST render event, which a
    # no-op render overwrites (the bug). The fixed machine never reads it.
    last_event_changed: bool = False
    # When the pass that rendered this content scheduled its re-issue (wall clock, at 60-80 % of the
    # shortest TTL it read); 0: it read no dynamic secret; None: not known (a record from before).
    # After an agent restart the re-issue may be spread over the restart window until then.
    renew_by: float | None = None
    # An `env = true` template: the variables of the content the agent rendered (KEY=VALUE lines),
    # what the task's next start gets, never re-read from the task-writable file. None: not an env
    # template, or a record from before (agent.runner.alloc falls back to the file if it is intact).
    env: tuple[tuple[str, str], ...] | None = None

    def to_record(self) -> dict[str, Any]:
        rec: dict[str, Any] = {
            "dest": self.dest,
            "change_mode": self.change_mode,
            "change_signal": self.change_signal,
            "rendered": self.rendered,
            "delivered": self.delivered,
            "last_event_changed": self.last_event_changed,
            "renew_by": self.renew_by,
        }
        if self.env is not None:
            rec["env"] = dict(self.env)
        return rec

    @classmethod
    def from_record(cls, rec: dict[str, Any]) -> TemplateState:
        env = rec.get("env")
        return cls(
            str(rec["dest"]),
            str(rec["change_mode"]),
            str(rec.get("change_signal", "")),
            str(rec.get("rendered", "")),
            str(rec.get("delivered", "")),
            bool(rec.get("last_event_changed", False)),
            float(rec["renew_by"]) if isinstance(rec.get("renew_by"), int | float) else None,
            tuple((str(k), str(v)) for k, v in env.items()) if isinstance(env, dict) else None,
        )


def needs_action(st: TemplateState, *, last_event_wins: bool = False) -> bool:
    if last_event_wins:
        return st.last_event_changed and st.rendered != st.delivered
    return st.rendered != st.delivered


def on_render(st: TemplateState, content_sha: str) -> TemplateState:
    """A render finished and wrote `content_sha` (the same as before for a no-op render)."""
    return replace(st, rendered=content_sha, last_event_changed=content_sha != st.rendered)


def on_task_started(states: Iterable[TemplateState]) -> list[TemplateState]:
    """The task's process started: it read every template as it is on disk now. A first start
    never fires an action."""
    return [replace(s, delivered=s.rendered, last_event_changed=False) for s in states]


@dataclass(frozen=True)
class Plan:
    restart: bool = False
    signals: tuple[str, ...] = ()
    scripts: tuple[str, ...] = ()  # destinations whose change_script must run
    settle: tuple[str, ...] = ()  # destinations satisfied without an action (noop, or covered)

    @property
    def empty(self) -> bool:
        return not (self.restart or self.signals or self.scripts or self.settle)


def plan_actions(
    states: Sequence[TemplateState],
    *,
    task_running: bool,
    last_event_wins: bool = False,
    signal_while_restarting: bool = False,
) -> Plan:
    """One plan for all of a task's changed templates: restart wins over signals, signals are
    de-duplicated, each changed script template runs its script once, noop templates just settle.
    Nothing is planned for a task that is not running (queued, not dropped) unless the
    `signal-while-restarting` fault fires it anyway."""
    dirty = [s for s in states if needs_action(s, last_event_wins=last_event_wins)]
    if not dirty or (not task_running and not signal_while_restarting):
        return Plan()
    noop = tuple(s.dest for s in dirty if s.change_mode == "noop")
    acting = [s for s in dirty if s.change_mode != "noop"]
    if any(s.change_mode == "restart" for s in acting):
        return Plan(restart=True, settle=tuple(s.dest for s in dirty))
    signals = tuple(sorted({s.change_signal for s in acting if s.change_mode == "signal"}))
    scripts = tuple(s.dest for s in acting if s.change_mode == "script")
    return Plan(signals=signals, scripts=scripts, settle=noop)


def on_delivered(
    states: Sequence[TemplateState], plan: Plan, *, last_event_wins: bool = False
) -> list[TemplateState]:
    """Record that `plan` was delivered: every template it covered now counts as given to the task.
    A restart reloads everything, so it covers all templates."""
    covered = set(plan.settle) | set(plan.scripts)
    if plan.signals:
        covered |= {
            s.dest
            for s in states
            if s.change_mode == "signal" and needs_action(s, last_event_wins=last_event_wins)
        }
    if plan.restart:
        covered = {s.dest for s in states}
    return [
        replace(s, delivered=s.rendered, last_event_changed=False) if s.dest in covered else s for s in states
    ]
