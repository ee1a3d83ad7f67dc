"""A task's templates over time: render, persist the change_mode states, re-render before dynamic
secrets expire, and deliver exactly one action per change (see agent.templates.changemode).

Driven on the agent's main loop by whatever hosts the task (`TaskHost`: the task runner, or a
fake in the unit tests); every pass's renders run off it (a setup and a restore too: `SetupPass`).
Vault being down is retried with backoff and reported as task events, and retried at once when Vault
answers again (agent.templates.wake); the watcher never stops silently (nomad-28016) unless the
`noop-runner-dies` fault puts that bug back. A pass is held to the task's budgets
(agent.templates.budget: templates per task, one pass's time).

Vault under a storm (docs/vault-load.md):
- A pass that Vault refused over its rate limit (HTTP 429, or the agent's own cap) is retried with
  exponential backoff and full jitter after the server's Retry-After (`plan_rate_limit_retry`), as a
  "Vault Rate Limited" event, "rate limited by Vault, retrying in Xs"; the window grows with the
  refused passes that got none of their secrets. The secrets the refused pass did get are kept for
  its retry (never issued twice for one change), and its change is delivered
  once, by the pass that completes. A setup or restore pass (`run_render_all`) waits out a refusal
  on its own thread, at most RENDER_ALL_RATE_LIMIT_RETRIES times, for a few seconds each.
- After an agent restart, a running task whose files are still as rendered and not due yet gets its
  re-issue at a random point of the restart window (`plan_restore_render`), on a timer, instead of
  inside the restore: agents restarted together do not all issue their certificates in one second.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from agent.allocdir.sandbox import SandboxError, read_file
from agent.decide.decisions import AfterRestore, plan_after_restore, plan_render_retry, plan_restore_render
from agent.decide.taskdecisions import plan_templates_to_render
from agent.decide.vaultrate import plan_rate_limit_retry
from agent.errors import AgentError, Unavailable
from agent.structs.model import ChangeScript, Task
from agent.templates.budget import too_many_templates
from agent.templates.changemode import (
    Plan,
    TemplateState,
    on_delivered,
    on_render,
    on_task_started,
    plan_actions,
)
from agent.templates.deps import SetupPass, TaskHost, TemplateDeps
from agent.templates.errors import TemplateRenderError, rate_limited_cause
from agent.templates.held import Held, after_pass, next_due, reusable
from agent.templates.nomadwatch import follow, task_view
from agent.templates.render import Reads, RenderContext, RestartPaced, prefetch, render
from agent.templates.wake import WAKE_SPREAD

__all__ = [
    "PREFETCH_PARALLEL",
    "RATE_LIMITED_EVENT",
    "SetupPass",
    "TaskHost",
    "TaskTemplates",
    "TemplateDeps",
]
log = logging.getLogger(__name__)
PREFETCH_PARALLEL = 8  # Vault requests of one render pass in flight at once
# A setup or restore pass (run_render_all, off the main loop) waits out a rate limit at most this many
# times, each wait at most RENDER_ALL_RATE_LIMIT_WAIT seconds, then fails.
RENDER_ALL_RATE_LIMIT_RETRIES = 2
RENDER_ALL_RATE_LIMIT_WAIT = 2.0
RATE_LIMITED_EVENT = "Vault Rate Limited"


class TaskTemplates:
    def __init__(self, host: TaskHost, task: Task, deps: TemplateDeps) -> None:
        self.r = host
        self.d = deps
        self.t = task
        self.failures = 0
        self.generation = 0  # invalidates timers of an earlier schedule
        self.dead = False  # the noop-runner-dies fault: the watcher gave up
        self.passes = 0
        self.fetches = 0  # Vault/Consul requests made by render passes (no thundering herd: one per secret)
        self._last_used: set[str] = set()  # the secrets the last pass read: the next one prefetches them
        # What each template's last successful render read: a periodic pass skips a template whose
        # secrets it holds unchanged and that read nothing else (Reads.same_when).
        self._reads: dict[str, Reads] = {}
        # The dynamic secrets held between passes, each due on its own (agent.templates.held): a
        # periodic pass fetches only the due ones, so a hundred certificates issued together drift
        # apart instead of being issued again in one burst every cycle.
        self._held: dict[str, Held] = {}
        self._rendering = False  # a periodic pass is off the main loop
        # An agent restore's render put on a timer (`_spread_restore`): that pass renders the `once`
        # templates too, as the restore would have (Nomad's template hook renders them anew then).
        self._restore_pending = False
        self.rate_limited = 0  # passes Vault (or the agent's own cap) refused over its rate limit
        self._stalled = 0  # refused passes in a row that got no secret at all: the backoff's attempt
        self.spread_restores = 0  # restores whose re-issue went on a timer in the restart window
        # What a pass refused over a rate limit had fetched, for its retry: key -> (data, ttl, when
        # fetched, monotonic). Its retry renders from these rather than issuing them again.
        self._carry: dict[str, tuple[dict[str, Any], float, float]] = {}
        # Timings for `make bench-templates`: when the periodic pass whose change is owed began, its
        # off-loop length, and per delivered action the seconds from that pass's start (the agent
        # set out to re-read the secret) to the action (signal sent, script started).
        self._owed_since: float | None = None
        self.pass_seconds: deque[float] = deque(maxlen=1000)
        self.action_latencies: deque[float] = deque(maxlen=1000)
        # ... and from the end of the pass's prefetch (the secrets are in hand) to the action: the
        # agent's own part, without the secrets engine's (a PKI issue generates a key).
        self._fetched_at: float | None = None
        self._owed_fetched: float | None = None
        self.after_fetch_latencies: deque[float] = deque(maxlen=1000)

    # -- persisted states ----------------------------------------------------------------------
    def _key(self, dest: str) -> str:
        return f"{self.r.alloc_id}/{self.t.name}/{dest}"

    def states(self) -> list[TemplateState]:
        out = []
        for tpl in self.t.templates:
            rec = self.d.store.get("template", self._key(tpl.destination))
            out.append(
                TemplateState.from_record(rec)
                if rec and "dest" in rec
                else TemplateState(tpl.destination, tpl.change_mode, tpl.change_signal)
            )
        return out

    def save(self, states: list[TemplateState]) -> None:
        with self.d.store.transaction():
            for s in states:
                self.d.store.put("template", self._key(s.dest), s.to_record())

    # -- rendering -----------------------------------------------------------------------------
    def render_all(self) -> bool:
        """Render every template now, on the caller's thread (tests; the agent renders a task's setup
        and restore off its main loop with begin/run/finish_render_all): one fetch per distinct
        secret; persist; schedule the next pass. Returns whether any content changed. Raises
        TemplateRenderError (a task event upstream). A rate limit is waited out a few times
        (RENDER_ALL_RATE_LIMIT_RETRIES), keeping what was fetched. After an agent restart the
        re-issue may go on a timer in the restart window instead (`_spread_restore`): then nothing
        is rendered now and False is returned."""
        setup = self.begin_render_all()
        if setup is None:
            return False
        try:
            renders = self.run_render_all(setup)
        except Exception as exc:
            return self.finish_render_all(setup, None, exc)
        return self.finish_render_all(setup, renders, None)

    def begin_render_all(self) -> SetupPass | None:
        """On the main loop: a pass that reads every secret anew, or None when an agent restart's
        re-issue went on a timer in the restart window (nothing to render now)."""
        if self.passes == 0 and self._spread_restore():
            return None
        self._rendering = True  # no periodic pass overlaps it
        return SetupPass(self._context(reuse_held=False), time.monotonic(), self.d.monotonic())

    def run_render_all(self, setup: SetupPass) -> list[tuple[str, str, bool]]:
        """The blocking part (off the main loop in the agent): the renders, a rate limit waited out
        a few times on this thread with the same context (what was fetched is not fetched again)."""
        attempt = 0
        while True:
            try:
                return self._render_pass(setup.ctx)
            except AgentError as exc:
                limited = rate_limited_cause(exc)
                attempt += 1
                if limited is None or attempt > RENDER_ALL_RATE_LIMIT_RETRIES:
                    raise
                delay = plan_rate_limit_retry(
                    attempt,
                    limited.retry_after,
                    random.random(),  # noqa: S311 - jitter, not crypto
                    cap=RENDER_ALL_RATE_LIMIT_WAIT,
                )
                setup.rate_limited += 1
                setup.events.append(
                    (RATE_LIMITED_EVENT, f"{exc}: rate limited by Vault, retrying in {delay:.1f}s")
                )
                self.d.sleep(delay)

    def finish_render_all(
        self, setup: SetupPass, renders: list[tuple[str, str, bool]] | None, exc: Exception | None
    ) -> bool:
        """On the main loop: what the pass rendered becomes the templates' states, events and the
        next pass's timer (whether any content changed), or its failure is raised."""
        self._rendering = False
        self.rate_limited += setup.rate_limited
        for type_, message in setup.events:
            self.r.event(type_, message)
        if exc is not None:
            if rate_limited_cause(exc) is not None:
                self._keep_fetched(setup.ctx, setup.started)
            raise exc
        assert renders is not None
        return self._apply(setup.ctx, renders, setup.began)

    def _spread_restore(self) -> bool:
        """After an agent restart: put the re-issue on a timer at this task's point of the restart
        window when that is safe (agent.decide.decisions.plan_restore_render). Returns whether it did."""
        states = self.states()
        if not states or any(s.renew_by is None or not s.rendered for s in states):
            return False  # never rendered, or rendered by an agent that kept no re-issue time
        vault = self.r.task_vault()
        spread = vault.restart_delay() if isinstance(vault, RestartPaced) else None
        if spread is None:
            return False
        due = [s.renew_by for s in states if s.renew_by]
        delay = plan_restore_render(
            task_running=self.r.running(),
            content_intact=self._content_intact(states),
            now=self.d.clock(),
            renew_by=min(due) if due else 0.0,
            spread=spread,
            bugs=self.d.bugs,
        )
        if delay is None:
            return False
        log.info(
            "alloc=%s task=%s: files still valid; re-issue in %.1fs (restart window)",
            self.r.alloc_id[:8],
            self.t.name,
            delay,
        )
        self.spread_restores += 1
        self._restore_pending = True
        self.schedule_rerender(delay)
        return True

    def _content_intact(self, states: list[TemplateState]) -> bool:
        """Every destination holds what was rendered there (its sha256), read inside the sandbox."""
        task_dir = self.r.task_dir
        for s in states:
            try:
                text = read_file(task_dir, s.dest, self.d.max_bytes)
            except (SandboxError, OSError):
                return False
            if hashlib.sha256(text.encode()).hexdigest() != s.rendered:
                return False
        return True

    def _context(self, *, reuse_held: bool) -> RenderContext:
        """A pass's render context. `reuse_held`: the held secrets not due yet are rendered from as
        they are (a periodic pass); otherwise every secret is fetched (a setup, a restore)."""
        ctx = RenderContext(self.r.env(), vault=self.r.task_vault(), consul=self.d.consul)
        ctx.nomad = task_view(self.d.nomad, self.r.alloc_id, self.t)
        if reuse_held:
            ctx.cache.update(reusable(self._held, self.d.monotonic()))
            ctx.reused.update(ctx.cache)
        carry, self._carry = self._carry, {}
        now = time.monotonic()
        for key, (data, ttl, fetched) in carry.items():
            if ttl <= 0:
                ctx.cache[key] = (data, ttl)
            elif ttl - (now - fetched) > 0:  # what is left of it (an expired one is fetched again)
                ctx.cache[key] = (data, ttl - (now - fetched))
        return ctx

    def _keep_fetched(self, ctx: RenderContext, since: float) -> None:
        """A pass was refused over a rate limit: keep what it fetched (since `since`) for its retry
        (what it reused is still held)."""
        self._carry = {
            key: (data, ttl, since) for key, (data, ttl) in ctx.cache.items() if key not in ctx.reused
        }

    def _render_pass(
        self, ctx: RenderContext, *, periodic: bool = False, with_once: bool = False
    ) -> list[tuple[str, str, bool]]:
        """The blocking part of a pass (Vault, the render worker, the files): no store, no events, so
        it may run off the main loop. The secrets the last pass read and that are not held (due, or
        without a TTL) are fetched first, several at once; then the templates render, twice, as
        consul-template's runner does (the second run re-renders on the data already fetched: a
        no-op render). A `periodic` pass renders only the templates whose dependencies changed: one
        that read only secrets still held (not fetched anew) would render what it rendered, so it
        is skipped, as consul-template does. Returns (destination, sha256, changed) of each render,
        in order. A periodic pass skips the `once` templates unless `with_once` (a restore's)."""
        if why := too_many_templates(self.t.name, len(self.t.templates), self.d.max_templates):
            raise TemplateRenderError(self.t.templates[self.d.max_templates].destination, why)
        prefetch(ctx, self._last_used, PREFETCH_PARALLEL)
        self._fetched_at = time.monotonic()
        same: set[str] = set()
        if periodic:
            for tpl in self.t.templates:
                last = self._reads.get(tpl.destination)
                if last is not None and last.same_when(ctx.reused, ctx.env):
                    same.add(tpl.destination)
                    ctx.reads[tpl.destination] = last
                    ctx.used |= last.keys  # still read: held on, prefetched when due
        out = []
        budget = self.d.pass_budget
        keys = [(t.source, t.data, t.destination) for t in self.t.templates]
        templates = [self.t.templates[i] for i in plan_templates_to_render(keys, self.d.bugs)]
        for _pass in range(2):
            for tpl in templates:
                if tpl.destination in same or (periodic and tpl.once and not with_once):
                    continue
                left = budget - ctx.meter.charged
                if left <= 0:
                    raise self._over_pass_budget(tpl.destination)
                try:
                    _, digest, did_change = render(
                        tpl,
                        self.r.task_dir,
                        ctx,
                        timeout=min(self.d.render_timeout, left),
                        max_bytes=self.d.max_bytes,
                    )
                except TemplateRenderError as exc:
                    if ctx.meter.charged < budget:
                        raise
                    raise self._over_pass_budget(tpl.destination) from exc  # stopped at the budget
                out.append((tpl.destination, digest, did_change))
        return out

    def _over_pass_budget(self, dest: str) -> TemplateRenderError:
        return TemplateRenderError(
            dest,
            f"task {self.t.name}'s templates took more than the {self.d.pass_budget:g}s one render pass "
            "may take (template_pass_budget): stopped",
        )

    def _apply(self, ctx: RenderContext, renders: list[tuple[str, str, bool]], began: float) -> bool:
        """On the main loop: what the pass (begun at `began`, deps.monotonic) rendered becomes
        the templates' states (one transaction), events, the secrets held, and the next pass's timer
        (the earliest due secret). The sticky change_mode state does not care about the second,
        no-op render; under the last-event-wins fault it overwrites the change (nomad-24140)."""
        states = {s.dest: s for s in self.states()}
        changed = False
        used, watched = self._watched(ctx)
        self._held = after_pass(
            self._held,
            used,
            ctx.cache,
            ctx.reused,
            began,
            self.d.jitter,
        )
        due = next_due(self._held)
        delay = max(0.0, due - self.d.monotonic()) if due is not None else None
        renew_by = self.d.clock() + delay if delay is not None else 0.0
        states = {dest: replace(st, renew_by=renew_by) for dest, st in states.items()}  # skipped ones too
        for dest, digest, did_change in renders:
            states[dest] = on_render(states[dest], digest)
            changed |= did_change
            if did_change:
                self.r.event("Template Rendered", f"rendered {dest}")
        changed_dests = {dest for dest, _, did_change in renders if did_change}
        for dest, (values, bad) in ctx.env_files.items():
            if bad and (dest in changed_dests or states[dest].env is None):
                lines = ", ".join(str(n) for n in bad[:10])
                self.r.event("Template Env Failed", f"{dest}: not KEY=VALUE at line(s) {lines}")
            states[dest] = replace(states[dest], env=tuple(values.items()))
        self.save(list(states.values()))
        self.failures = 0
        self._stalled = 0
        if self.d.vault_wake is not None:
            self.d.vault_wake.unsubscribe(self._wake_key)
        self.passes += 1
        self.fetches += ctx.fetches
        self._last_used = used
        self._reads = dict(ctx.reads)
        self._follow_nomad(ctx, watched)
        if delay is not None:
            self.schedule_rerender(delay)
        return changed

    def _watched(self, ctx: RenderContext) -> tuple[set[str], list[Reads]]:
        """What a pass read that later passes watch: the secrets (held, re-issued when due) and each
        template's reads, without what only `once` templates read (Nomad renders those by a runner
        of their own in consul-template's once mode, never again on a change)."""
        once = {tpl.destination for tpl in self.t.templates if tpl.once}
        watch = [r for dest, r in ctx.reads.items() if dest not in once]
        if not once:
            return set(ctx.used), watch
        kept: set[str] = set().union(*(r.keys for r in watch))
        only_once = set().union(*(r.keys for dest, r in ctx.reads.items() if dest in once)) - kept
        return set(ctx.used) - only_once, watch

    def _follow_nomad(self, ctx: RenderContext, watched: list[Reads]) -> None:
        """A pass as soon as the Nomad data the watched templates read changes
        (agent.templates.nomadwatch)."""
        reads = [r.nomad for r in watched]
        follow(self.d.nomad, self.r, self.t, ctx.nomad, reads, lambda: self.schedule_rerender(0.0))

    def schedule_rerender(self, delay: float) -> None:
        self.generation += 1
        gen = self.generation
        self.d.schedule(delay, lambda: self._rerender(gen))

    def _rerender(self, gen: int) -> None:
        """A periodic pass: its renders run off the main loop (a hundred templates and their Vault
        requests hold up no other alloc); the states, events and actions come back to the loop."""
        if gen != self.generation or self.dead or not self.r.alloc_running() or self._rendering:
            return
        try:
            ctx = self._context(reuse_held=True)
        except Exception as exc:
            self._failed(exc)
            return
        self._rendering = True
        started = time.monotonic()
        began = self.d.monotonic()
        with_once = self._restore_pending

        def done(result: object, exc: Exception | None) -> None:
            self._rendering = False
            self.pass_seconds.append(time.monotonic() - started)
            if self.dead or not self.r.alloc_running():
                return
            if exc is not None:
                if rate_limited_cause(exc) is not None:
                    self._keep_fetched(ctx, started)
                self._failed(exc, progressed=ctx.fetches > 0)
                return
            try:
                assert isinstance(result, list)
                if with_once:
                    self._restore_pending = False
                if self._apply(ctx, result, began) and self._owed_since is None:
                    self._owed_since, self._owed_fetched = started, self._fetched_at
            except Exception as failure:
                self._failed(failure)
                return
            self.act_after_splay()

        self.d.offload(
            f"render-{self.t.name}", lambda: self._render_pass(ctx, periodic=True, with_once=with_once), done
        )

    def _failed(self, exc: Exception, *, progressed: bool = False) -> None:
        """Any failure of a pass: a retried event, never a watcher that dies silently. `progressed`:
        the pass got some of its secrets before it failed (kept for the retry after a rate limit)."""
        if not isinstance(exc, AgentError):
            log.error(
                "alloc=%s task=%s template render failed",
                self.r.alloc_id[:8],
                self.t.name,
                exc_info=(type(exc), exc, exc.__traceback__),
            )
        self.failures += 1
        all_noop = all(tpl.change_mode == "noop" for tpl in self.t.templates)
        vault_down = isinstance(exc, Unavailable) or (
            isinstance(exc, TemplateRenderError) and exc.unavailable
        )
        retry = plan_render_retry(self.failures, all_noop, self.d.bugs, vault_down=vault_down)
        if retry.give_up:
            self.dead = True
            self.r.event("Template Failed", f"{exc}; the template runner stops (fault)")
            log.error(
                "alloc=%s task=%s template runner gave up after %d failures",
                self.r.alloc_id[:8],
                self.t.name,
                self.failures,
            )
            return
        limited = rate_limited_cause(exc)
        if limited is not None:
            # A storm: full jitter after the server's Retry-After, so that the refused come back apart.
            # The window grows with the refused passes that got nothing; one that got some of its
            # secrets (kept for the retry) is gaining ground at the quota's pace: its window stays small.
            self.rate_limited += 1
            self._stalled = 0 if progressed else self._stalled + 1
            attempt = max(1, self._stalled)
            delay = plan_rate_limit_retry(attempt, limited.retry_after, random.random())  # noqa: S311
            self.r.event(RATE_LIMITED_EVENT, f"{exc}: rate limited by Vault, retrying in {delay:.1f}s")
            self.schedule_rerender(delay)
            return
        delay = retry.delay * random.uniform(0.8, 1.2)  # noqa: S311
        self.r.event("Template Failed", f"{exc}; retrying in {delay:.1f}s")
        self.schedule_rerender(delay)
        self.wake_when_vault_answers(retry.wake_on_vault)

    @property
    def _wake_key(self) -> str:
        return f"{self.r.alloc_id}/{self.t.name}"

    def wake_when_vault_answers(self, wanted: bool = True) -> None:
        """The retry now on a timer also runs as soon as Vault answers again (agent.templates.wake),
        after a short random spread; a pass scheduled since supersedes it."""
        wake = self.d.vault_wake
        if not wanted or wake is None:
            return
        gen = self.generation

        def still_wanted() -> bool:
            return gen == self.generation and not self.dead and self.r.alloc_running()

        def woken() -> None:
            if still_wanted():
                self.schedule_rerender(random.uniform(0.0, WAKE_SPREAD))  # noqa: S311 - spreading load

        wake.subscribe(self._wake_key, woken, still_wanted)

    # -- actions -------------------------------------------------------------------------------
    def task_started(self) -> None:
        """The task's process started and read the templates: nothing is owed to it. At its first
        start (no template was given to it before, kept across agent restarts) the change scripts
        with `run_on_first_render` run too, once it is running (Nomad's template hook runs them at
        poststart); not a `once` template's (Nomad collects them from the watching runner only)."""
        self._owed_since = self._owed_fetched = None
        states = self.states()
        fresh = {s.dest for s in states if s.rendered and not s.delivered}
        self.save(on_task_started(states))
        scripts = [
            tpl.change_script
            for tpl in self.t.templates
            if tpl.destination in fresh
            and not tpl.once
            and tpl.change_mode == "script"
            and tpl.change_script is not None
            and tpl.change_script.run_on_first_render
        ]
        if scripts:
            self.d.schedule(0.0, lambda: self._first_render_scripts(scripts))

    def _first_render_scripts(self, scripts: list[ChangeScript]) -> None:
        if not self.r.alloc_running() or not self.r.running():
            return  # exited (or stopped) before: nothing to exec in, as Nomad's poststart
        for script in scripts:
            self._run_script(script)

    def act_after_splay(self) -> None:
        splay = min((tpl.splay for tpl in self.t.templates), default=0.0)
        wait = max((tpl.wait_min for tpl in self.t.templates), default=0.0)
        self.d.schedule(wait + random.uniform(0, splay), self.act)  # noqa: S311 - spreading load

    def act(self, *, handle_ready: bool = True) -> None:
        """Deliver the one action the changed templates call for, if the task is running.
        `handle_ready=False` is only the `script-change-before-handle` fault (see after_restore)."""
        if not self.r.alloc_running():
            return
        lew = self.d.bugs.last_event_wins
        running = self.r.running()
        states = self.states()
        plan = plan_actions(
            states,
            task_running=running,
            last_event_wins=lew,
            signal_while_restarting=self.d.bugs.signal_while_restarting,
        )
        if plan.empty:
            return
        if plan.restart:
            self.r.event("Restart Signaled", "Template with change_mode restart re-rendered")
            self.r.restart_for_template()  # its start records on_task_started
            return
        self._deliver(plan, running, handle_ready)
        self.save(on_delivered(states, plan, last_event_wins=lew))

    def _deliver(self, plan: Plan, running: bool, handle_ready: bool = True) -> None:
        if self._owed_since is not None:
            now = time.monotonic()
            self.action_latencies.append(now - self._owed_since)
            if self._owed_fetched is not None:
                self.after_fetch_latencies.append(now - self._owed_fetched)
            self._owed_since = self._owed_fetched = None
        for sig in plan.signals:
            self.r.event("Signaling", f"Template re-rendered; sending {sig}")
            if running:
                self.r.signal(sig)
        for dest in plan.scripts:
            tpl = next(x for x in self.t.templates if x.destination == dest)
            if tpl.change_script is None or not running:
                continue
            if not handle_ready:
                # nomad-15851/24051: no driver handle to exec in yet; the script is skipped, not
                # retried, and the caller records the action as delivered: it is lost.
                self.r.event(
                    "Template Script Failed",
                    f"{tpl.change_script.command}: no driver handle for the restored task yet; "
                    "change script not run",
                )
                continue
            self._run_script(tpl.change_script)

    def _run_script(self, script: ChangeScript) -> None:
        def ran(rc: int, out: str) -> None:
            kind = "Template Script" if rc == 0 else "Template Script Failed"
            self.r.event(kind, f"{script.command} exited {rc}: {out.strip()[-200:]}")
            if rc != 0 and script.fail_on_error:
                self.r.restart_for_template()

        # Off the main loop: a script that hangs until its timeout holds nothing else up.
        self.r.exec([script.command, *script.args], script.timeout, ran)

    def after_restore(self) -> None:
        """After an agent restart and re-render: the running task is owed exactly one action if the
        content differs from what it was given (nomad-9636)."""
        action = plan_after_restore(self.d.bugs)
        if action is AfterRestore.FORGET:
            self.save(on_task_started(self.states()))  # the pre-9636 behaviour: pretend it was given
            return
        if action is AfterRestore.ACT_BEFORE_HANDLE:
            # nomad-15851/24051: the owed action is delivered at once, inside restore, as if the
            # restored task's driver handle were not reattached yet (the fixed path below acts
            # later on the main loop, through the task's handle).
            self.act(handle_ready=False)
            return
        self.act_after_splay()


Factory = Callable[[Task], TaskTemplates]
