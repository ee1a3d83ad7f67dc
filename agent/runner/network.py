"""An alloc's bridge network (Nomad's network hook and its recovery): the netns owner, CNI ADD and
DEL, and the network part of a recovery (`recreate`: DEL, a fresh owner, ADD) when its owner died
or a task could not start in it; the recovery itself (the tasks stopped, this, the tasks started) is
the alloc runner's `recover_network`. The owner and the CNI network are known only by their
protocols (agent.network.base, agent.drivers.base.NetnsOwner); what a fault flag changes is decided
by the pure `plan_*` functions.
"""

from __future__ import annotations

from agent.decide.decisions import plan_network_recovery, plan_network_teardown
from agent.decide.taskdecisions import (
    plan_mapped_ports,
    plan_remove_agent_netns,
    plan_teardown_restored_network,
)
from agent.drivers.base import Sandbox
from agent.errors import AgentError
from agent.identity.claims import DEFAULT_NAMESPACE, DEFAULT_REGION
from agent.network.base import AttachSpec, plan_cni_args
from agent.runner.interfaces import AllocHost
from agent.runner.state import NETNS_OWNER
from agent.structs.records import NetworkState

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

    # -- recovery (the alloc runner's recover_network: its tasks stopped, this, its tasks started) ----
    def recreate(self) -> None:
        """The network part of a recovery: DEL, a fresh netns owner, ADD (plan_network_recovery)."""
        ar = self.ar
        plan = plan_network_recovery(ar.d.bugs)
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
