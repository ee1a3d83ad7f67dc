"""An alloc restored after an agent restart (Nomad's alloc runner's Restore and its task runners'):
what is on the node is observed first, changing nothing; the templates render again (dynamic secrets
are issued again on every agent start); then `plan_restore` decides: reattach, restart the dead
tasks, recreate the network, or fail and replace the alloc.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from agent.decide.decisions import (
    ObservedAlloc,
    RestoreAction,
    RestorePlan,
    StartCause,
    plan_restore,
)
from agent.decide.taskdecisions import plan_cleanup_failed_restore
from agent.drivers.base import RESTARTED
from agent.errors import AgentError, Unavailable
from agent.runner.interfaces import AllocHost, RunningTask
from agent.runner.state import NETNS_OWNER
from agent.structs.records import NetworkState, TaskState
from agent.templates.render import TemplateRenderError
from agent.templates.runner import SetupPass, TaskTemplates

log = logging.getLogger(__name__)
RESTORE_RENDER = "render on restore"  # the restore's re-render, off the main loop (its Serial's step)


class Restorer:
    def __init__(self, ar: AllocHost) -> None:
        self.ar = ar

    def observe(self) -> ObservedAlloc:
        """What is on the node for this alloc, before anything is changed."""
        ar = self.ar
        tasks_running: list[bool] = []
        share: list[bool] = []
        owner_handle = ar.state.handle(NETNS_OWNER)
        if ar.bridge:
            owner_status = ar.owner.status(ar.id, owner_handle)
            owner_alive, same_start = owner_status.running, owner_status.detail != RESTARTED
        else:
            owner_alive, same_start = False, True
        for tr in ar.tasks.values():
            h = tr.handle()
            driver = tr.driver
            st = driver.status(h) if h else None
            running = bool(st and st.running and st.detail != RESTARTED)
            tasks_running.append(running)
            pid = driver.pid(h) if (h and running) else 0
            share.append(bool(pid and ar.bridge and ar.owner.holds(ar.id, owner_handle, pid)))
            if running and h:
                driver.reattach(ar.id, h)
        diffs: list[str] = []
        has_result = bool(ar.bridge and ar.d.network and ar.d.network.has_result(ar.id))
        ns_path = ar.netns_path()
        if has_result and ns_path is not None and ar.d.network is not None:
            diffs = ar.d.network.check(ar.id, ns_path, ar.rec.ports, spec=ar.network.spec())
        if ar.bridge and ar.rec.network_state is not NetworkState.READY:
            # Killed between CNI ADD and recording its address (or during a DEL): the address the
            # tasks would be given is not the attachment's.
            diffs = [*diffs, f"network recorded {ar.rec.network_state.value or 'not set up'}, not ready"]
        return ObservedAlloc(
            alloc_dir_exists=ar.alloc_dir.is_dir(),
            bridge=ar.bridge,
            pause_running=owner_alive,
            pause_same_start=same_start,
            tasks_running=tasks_running,
            tasks_share_pause_netns=share,
            network_diffs=diffs,
            has_cni_result=has_result,
            tasks_completed=[ar.state.task(name).completed for name in ar.tasks],
            netns_by_agent=ar.owner.kind == "netns",
        )

    def restore(self, observed: ObservedAlloc | None = None) -> RestoreAction:
        """`observed`: what `observe` found, when the core looked at every alloc at once. The
        templates render off the main loop first (`_rerender`); what the plan calls for follows on
        the loop."""
        ar = self.ar
        ar.network_from_state = ar.bridge  # until the plan recreates it (AllocNetwork.setup)
        obs = observed if observed is not None else self.observe()
        plan = plan_restore(obs, ar.d.bugs, [tr.running() for tr in ar.tasks.values()])
        log.info("alloc=%s restore: %s (%s)", ar.id[:8], plan.action.value, plan.reason)
        if plan.action is RestoreAction.REPLACE:
            self._act(plan, obs)
        else:
            self._rerender(lambda: self._after_render(plan, obs))
        return plan.action

    def _rerender(self, then: Callable[[], None]) -> None:
        """Each task's hooks restored (secrets tmpfs, Vault token), then its templates rendered
        before anything restarts, so a restarted task reads fresh content. The renders run off the
        main loop (the alloc's next operations wait behind them); `then` on the loop after them."""
        pending: list[tuple[RunningTask, TaskTemplates, SetupPass]] = []
        for tr in self.ar.tasks.values():
            for hook in tr.hooks.restore:
                hook.restore()
            if not tr.t.templates:
                continue
            tt = tr.templates()
            try:
                setup = tt.begin_render_all()
            except AgentError as exc:
                self._render_failed(tr, exc)
                continue
            if setup is not None:
                pending.append((tr, tt, setup))
        if not pending:
            then()
            return

        def blocking() -> list[tuple[object, Exception | None]]:
            out: list[tuple[object, Exception | None]] = []
            for _, tt, setup in pending:
                try:
                    out.append((tt.run_render_all(setup), None))
                except Exception as exc:
                    out.append((None, exc))
            return out

        def done(result: object, exc: Exception | None) -> None:
            results = result if isinstance(result, list) else [(None, exc)] * len(pending)
            for (tr, tt, setup), (renders, failed) in zip(pending, results, strict=True):
                try:
                    tt.finish_render_all(setup, renders if isinstance(renders, list) else None, failed)
                except Exception as err:
                    self._render_failed(tr, err)
            then()

        self.ar.serial.off_loop(RESTORE_RENDER, blocking, done)

    def _render_failed(self, tr: RunningTask, exc: Exception) -> None:
        """A task's render at restore failed: an event and a retry (at once when Vault answers again,
        if it could not answer)."""
        if not isinstance(exc, AgentError):
            log.error("alloc=%s task=%s: render at restore failed: %r", self.ar.id[:8], tr.name, exc)
        tr.event("Template Failed", f"{exc}; retrying")
        tt = tr.templates()
        tt.schedule_rerender(1.0)
        down = isinstance(exc, Unavailable) or (isinstance(exc, TemplateRenderError) and exc.unavailable)
        tt.wake_when_vault_answers(down)

    def _after_render(self, plan: RestorePlan, obs: ObservedAlloc) -> None:
        try:
            self._act(plan, obs)
        except Exception as exc:  # as agent.client.restore does for a restore that raises
            log.exception("alloc=%s: restore failed", self.ar.id[:8])
            self.ar.fail(f"restore failed: {exc}")

    def _act(self, plan: RestorePlan, obs: ObservedAlloc) -> None:
        ar = self.ar
        if plan.action is RestoreAction.REATTACH:
            self._record_reattached(obs)
            ar.event("", "Restored", f"reattached: {plan.reason}")
            for tr in ar.tasks.values():
                if tr.t.templates:
                    tr.templates().after_restore()
            for tr in ar.tasks.values():
                if tr.vault_changed_on_restore:
                    tr.vault_token_changed("the stored token no longer works")
            ar.lifecycle_changed()
        elif plan.action is RestoreAction.RESTART_TASKS:
            ar.event("", "Restored", plan.reason)
            self._record_reattached(obs)
            for tr, running in zip(ar.tasks.values(), obs.tasks_running, strict=True):
                if not running:
                    tr.restore_dead()
                elif tr.vault_changed_on_restore:
                    tr.vault_token_changed("the stored token no longer works")
            ar.lifecycle_changed()
        elif plan.action is RestoreAction.RECREATE_NETWORK:
            ar.event("", "Restore Network", plan.reason)
            ar.recover_network(plan.reason, StartCause.RESTORE)
        else:
            ar.event("", "Restore Failed", plan.reason)
            ar.fail(plan.reason, teardown=plan_cleanup_failed_restore(ar.d.bugs))

    def _record_reattached(self, obs: ObservedAlloc) -> None:
        """A task found running whose record is not 'running' (the agent was killed between the
        start being recorded and the state catching up): recorded running now; its hooks hear that
        it was reattached (a process task whose logmon is gone gets a new one). "Found running" is
        the observation the plan was made from (`observe`: the driver asked once per task, as
        Nomad's task runner recovers a handle once); a task that dies after it was observed is
        reported by its driver's exit watch as any exit is, handled after the restore's turn."""
        for tr, running in zip(self.ar.tasks.values(), obs.tasks_running, strict=True):
            h = tr.handle()
            if h is None or not running:
                continue
            record = tr.state.task(tr.name)
            if record.state is not TaskState.RUNNING:
                tr.state.put_task(tr.name, record.with_(state=TaskState.RUNNING))
            for hook in tr.hooks.reattached:
                hook.reattached(h)
