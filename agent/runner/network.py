"""An alloc's bridge network (Nomad's network hook and its recovery): the netns owner, CNI ADD and
DEL, and the recovery that recreates the whole network when its owner died or a task could not
start in it. The owner and the CNI network are known only by their protocols (agent.network.base,
agent.drivers.base.NetnsOwner); what a fault flag changes is decided by the pure `plan_*` functions.
"""

from __future__ import annotations

from agent.decisions import StartCause, plan_network_recovery, plan_network_teardown
from agent.drivers.base import DriverError, Sandbox
from agent.errors import AgentError
from agent.identity.claims import DEFAULT_NAMESPACE, DEFAULT_REGION
from agent.network.base import AttachSpec, plan_cni_args
from agent.records import AllocStatus, DesiredStatus, NetworkState
from agent.runner.interfaces import AllocHost
from agent.runner.state import NETNS_OWNER
from agent.taskdecisions import plan_mapped_ports, plan_remove_agent_netns, plan_teardown_restored_network
from agent.vault import VaultError

RECOVERY_RETRY_MAX = 30.0  # seconds between tries of a network recovery while the engine is away


class AllocNetwork:
    def __init__(self, ar: AllocHost) -> None:
        self.ar = ar

    def sandbox(self) -> Sandbox:
        """The group network's hostname and DNS, for its netns owner (a docker pause container)."""
        net = self.ar.group.network
        if net is None:
            return Sandbox()
        return Sandbox(net.hostname, net.dns_servers, net.dns_searches, net.dns_options)

    def spec(self) -> AttachSpec:
        """The group network's mode and CNI_ARGS, as Nomad's network hook passes them."""
        ar = self.ar
        net = ar.group.network
        args = plan_cni_args(
            net.cni_args if net else (),
            region=DEFAULT_REGION,
            namespace=DEFAULT_NAMESPACE,
            job_id=ar.job.id,
            group=ar.group.name,
            alloc_id=ar.id,
        )
        return AttachSpec(net.mode if net else "bridge", args)

    def setup(self, *, keep_address: bool = False) -> None:
        """Create the alloc's netns owner and run CNI ADD on it; record the address ADD gave.
        `keep_address` is only the `stale-network-status-on-restore` fault (see recover)."""
        ar = self.ar
        if ar.d.network is None:
            raise AgentError("bridge networking needs a CNI conflist (config cni_conf_dir)")
        handle = ar.owner.create(ar.job.id, ar.group.name, ar.id, sandbox=self.sandbox())
        if handle is not None:
            ar.state.put_handle(NETNS_OWNER, handle)
        ns = ar.owner.path(ar.id, handle)
        if ns is None:
            raise AgentError(f"the {ar.owner.kind} owning the network namespace is not running")
        ar.state.save(network_state=NetworkState.ADDING)
        ar.kill_point("start.before-network-add")
        address = ar.d.network.add(ar.id, ns, plan_mapped_ports(ar.rec.ports, ar.d.bugs), spec=self.spec())
        ar.kill_point("start.after-network-add")
        if keep_address and ar.rec.address:
            # nomad-24236/16893: the recreated network's address is not written back; the alloc
            # (API, NOMAD_ALLOC_IP of the tasks restarted next) keeps the one from before.
            address = ar.rec.address
        ar.state.save(network_state=NetworkState.READY, address=address)
        ar.network_from_state = False

    def delete(self) -> None:
        ar = self.ar
        if ar.d.network is None:
            return
        if plan_network_teardown(ar.d.bugs).release_only:
            # nomad-6385 family: teardown frees the address but leaves every iptables chain and
            # DNAT rule behind, so the host port stays pointed at a dead address.
            ar.d.network.release_addresses(ar.id)
        else:
            errors = ar.d.network.delete(
                ar.id, ar.netns_path(), address=ar.rec.address, ports=ar.rec.ports, spec=self.spec()
            )
            if errors:
                ar.event("", "Network Teardown", "CNI DEL reported: " + "; ".join(errors))
        ar.state.save(network_state=NetworkState.DELETED)

    def teardown(self) -> None:
        """At the alloc's teardown: DEL (its failure is an event), then the owner goes."""
        ar = self.ar
        if ar.network_from_state and not plan_teardown_restored_network(ar.d.bugs):
            ar.state.save(network_state=NetworkState.DELETED)  # nomad-17455: nothing torn down
            return
        try:
            self.delete()
        except AgentError as exc:
            ar.event("", "Network Teardown", str(exc))
        if ar.owner.kind != "netns" or plan_remove_agent_netns(ar.job.type == "batch", ar.d.bugs):
            ar.owner.remove(ar.id, ar.state.handle(NETNS_OWNER))

    # -- recovery ---------------------------------------------------------------------------------
    def recover(self, why: str, cause: StartCause) -> None:
        """Recreate the whole network of the group (DEL, fresh netns owner, ADD) and restart its
        tasks (`cause`: not counted against the restart policy; a restart on a timer is cancelled).
        If that fails, the alloc is failed and replaced: never a dead end, never a second set."""
        self._stop_then_recreate(why, cause, 1, f"network recreated: {why}")

    def _live(self) -> bool:
        return self.ar.rec.status is AllocStatus.RUNNING and self.ar.rec.desired is not DesiredStatus.STOP

    def _stop_then_recreate(self, why: str, cause: StartCause, attempt: int, signaled: str) -> None:
        ar = self.ar
        if not self._live():
            return
        for t in ar.unfinished():
            ar.event(t.name, "Restart Signaled", signaled)
        ar.stop_for_restart(ar.unfinished(), lambda: self._recreate(why, cause, attempt))

    def _recreate(self, why: str, cause: StartCause, attempt: int) -> None:
        """DEL, a fresh netns owner, ADD, then every task started once for this recovery. An engine
        that does not answer (docker restarting) is waited out: the recovery is tried again, with
        an event, until it completes; any other failure fails the alloc (and it is replaced)."""
        ar = self.ar
        ar.kill_point("recovery.after-stop")
        plan = plan_network_recovery(ar.d.bugs)
        try:
            if plan.forget_cached_result and ar.d.network is not None:
                # nomad-11272: forget the old attachment without DEL, so a reservation that
                # survived the reboot is still held by this very alloc id.
                ar.d.network.forget(ar.id)
            if plan.run_del:
                self.delete()
            ar.kill_point("recovery.after-del")
            ar.owner.remove(ar.id, ar.state.handle(NETNS_OWNER))
            ar.kill_point("recovery.after-owner-remove")
            self.setup(keep_address=plan.keep_old_address)
            ar.kill_point("recovery.before-tasks")
            for t in ar.unfinished():
                ar.kill_point("restart.before-start")
                ar.tasks[t.name].start(cause, why, restart=True)
            ar.event("", "Network Recovered", f"network recreated ({why})", address=ar.rec.address)
        except DriverError as exc:
            if not exc.unavailable:
                ar.event("", "Driver Failure", str(exc))
                ar.fail(f"network recovery failed: {exc}")
                return
            delay = min(RECOVERY_RETRY_MAX, 2.0 ** (attempt - 1))
            ar.event(
                "",
                "Network Recovery Retrying",
                f"{exc}; trying again in {delay:.0f}s (attempt {attempt + 1})",
            )
            # The recovery again from the start, once the engine may answer: what the interrupted
            # attempt started is stopped first (a new decision for each task, with its event).
            signaled = f"network recreated: {why} (attempt {attempt + 1})"
            ar.d.schedule(
                delay,
                lambda: ar.serial.run(lambda: self._stop_then_recreate(why, cause, attempt + 1, signaled)),
            )
        except VaultError as exc:
            ar.fail(f"network recovery failed: no Vault token: {exc}")
        except (AgentError, OSError) as exc:
            ar.fail(f"network recovery failed: {exc}")
