"""Faults as inject/heal pairs, and the agent's fault flags.

Each fault checks that it took effect (a reboot gives a new boot id, a partition makes the node
unreachable from the others, a Vault outage makes Vault refuse) and raises `FaultError` naming the
node, the step and what was seen when it did not. `injected(fault)` heals in a `finally`, so a failing
suite never leaves a partitioned node or a dead Vault behind; partitions and outages also carry a
timer on the node that heals them by itself should the controller die mid-run.

Disruptions that take the node or the agent down run detached on the node, so the SSH call returns
first. Every inject and heal goes to the run's history with its duration.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

from e2e.harness import history
from e2e.harness.cluster import Agent, Cluster
from e2e.harness.nomadview import PAUSE_PREFIXES
from e2e.harness.remote import Remote, q
from e2e.harness.target import Target
from e2e.harness.waits import (
    AGENT_HEALTHY,
    DOCKER_BACK,
    FAULT_EFFECT,
    SAFETY_HEAL,
    SWEEPS_DONE,
    WaitTimeout,
    wait_until,
)
from lab.errors import LabError
from lab.providers import provider_for
from lab.providers.base import LabRecord

FAULTS_DROPIN_NAME = "50-fieldlab-faults.conf"  # in /etc/systemd/system/<the agent's unit>.service.d


def faults_dropin(target: Target) -> str:
    """The systemd drop-in that gives the agent its fault flags."""
    return f"/etc/systemd/system/{target.unit}.service.d/{FAULTS_DROPIN_NAME}"


PARTITION_CHAIN = "FIELDLAB-PARTITION"
VAULT_OUTAGE_CHAIN = "FIELDLAB-VAULT-OUTAGE"
REGISTRY_SLOW_CHAIN = "FIELDLAB-REGISTRY-SLOW"
REGISTRY_PORT = 5000  # the registry role's registry_port


class FaultError(LabError):
    """A fault did not inject or heal; the message names the node, the step and what was seen."""


def _wait(cond: object, *, timeout: float, what: str, node: str, step: str) -> object:
    try:
        return wait_until(cond, timeout=timeout, what=what)  # type: ignore[arg-type]
    except WaitTimeout as exc:
        raise FaultError(f"{node}: {step}: {exc}") from None


@dataclass
class Fault(ABC):
    """One disruption of one node of `cluster`. `inject` returns once the disruption is in effect;
    `heal` once the node is back to normal (for a reboot: the agent answers again)."""

    cluster: Cluster
    node: Remote
    kind: str = field(init=False, default="fault")
    # True for a disruption the system under test recovers from by itself (a kill): its heal is no
    # step of the harness, and the report must not call it never healed when no heal is recorded.
    heals_itself: ClassVar[bool] = False

    @abstractmethod
    def _inject(self) -> None: ...

    @abstractmethod
    def _heal(self) -> None: ...

    def describe(self) -> str:
        return f"{self.kind} {self.node.name}"

    def inject(self) -> None:
        healing = {"heals": history.HEALS_ITSELF} if self.heals_itself else {}
        with history.span(history.FAULT, self.describe(), node=self.node.name, **healing):
            self._inject()

    def heal(self) -> None:
        with history.span(history.HEAL, self.describe(), node=self.node.name):
            self._heal()

    def in_effect(self) -> bool:
        """Whether the disruption still holds (faults that heal themselves at once say True)."""
        return True

    def hold(self, seconds: float) -> None:
        """Keep the fault injected for `seconds`, checking every second that it still holds (a
        disruption that went away early would make the test after it meaningless)."""
        end = time.monotonic() + seconds

        def held() -> tuple[bool | None, str]:
            if not self.in_effect():
                held_for = seconds - (end - time.monotonic())
                raise FaultError(f"{self.node.name}: {self.kind} stopped holding after {held_for:.0f}s")
            return (True if time.monotonic() >= end else None), f"{self.kind} holding"

        wait_until(
            held, timeout=seconds + FAULT_EFFECT, what=f"{self.kind} held for {seconds:.0f}s", interval=1.0
        )


@contextmanager
def injected(fault: Fault) -> Iterator[Fault]:
    """Inject, run the block, heal: the heal runs even when the block (or the inject) fails."""
    try:
        fault.inject()
        yield fault
    finally:
        fault.heal()


# --- the node ----------------------------------------------------------------------------------
@dataclass
class Reboot(Fault):
    """Clean (systemctl reboot) or hard (power cut) reboot through the lab's provider."""

    hard: bool = False

    def __post_init__(self) -> None:
        self.kind = "hard-reboot" if self.hard else "clean-reboot"
        self.seconds_to_ssh = 0.0

    def _inject(self) -> None:
        record = LabRecord.load(self.cluster.paths)
        if record is None:
            raise FaultError(f"{self.node.name}: reboot: lab {self.cluster.name} has no lab record")
        try:
            self.seconds_to_ssh = provider_for(record.provider).reboot(
                record, self.cluster.paths, self.node.name, hard=self.hard
            )
        except LabError as exc:
            raise FaultError(f"{self.node.name}: {self.kind}: {exc}") from None
        history.measure(f"{self.kind}: power off to ssh answering", self.seconds_to_ssh, node=self.node.name)

    def _heal(self) -> None:
        if self.node in self.cluster.clients:
            wait_agent(self.cluster.agent(self.node), step=f"after {self.kind}")


def wait_agent(agent: Agent, *, step: str, timeout: float = AGENT_HEALTHY) -> float:
    """Wait until the agent answers healthy; return the seconds it took."""
    t0 = time.monotonic()
    _wait(
        agent.healthy,
        timeout=timeout,
        what=f"{agent.node.name} agent healthy",
        node=agent.node.name,
        step=step,
    )
    return time.monotonic() - t0


# --- the agent ---------------------------------------------------------------------------------
@dataclass
class AgentRestart(Fault):
    """Stop the agent with a signal (SIGTERM: a clean shutdown; SIGKILL: a crash), then start it.

    Tasks survive (KillMode=process). `restore_seconds` is from the kill to the agent answering with
    its restore done."""

    signal: str = "SIGTERM"
    # How long the agent may take to exit, and to answer again: longer in a storm (STORM_AGENT).
    exit_timeout: float = FAULT_EFFECT
    healthy_timeout: float = AGENT_HEALTHY

    def __post_init__(self) -> None:
        self.kind = f"agent-{self.signal.lower()}"
        self.restore_seconds = 0.0
        self._t0 = 0.0

    def _main_pid(self) -> str:
        return self.node.out(f"systemctl show -p MainPID --value {self.cluster.target.unit}")

    def _inject(self) -> None:
        before = self._main_pid()
        if before in ("", "0"):
            raise FaultError(f"{self.node.name}: {self.kind}: the agent is not running (MainPID {before!r})")
        self._t0 = time.monotonic()
        self.node.run(f"systemctl kill --kill-who=main -s {self.signal} {self.cluster.target.unit}")

        def gone() -> tuple[bool | None, str]:
            alive = self.node.run(f"kill -0 {before} 2>/dev/null", check=False).rc == 0
            return (None if alive else True), f"pid {before} {'alive' if alive else 'gone'}"

        _wait(
            gone,
            timeout=self.exit_timeout,
            what=f"agent pid {before} to exit",
            node=self.node.name,
            step=self.kind,
        )

    def _heal(self) -> None:
        # SIGKILL: systemd restarts it (Restart=on-failure); SIGTERM: it exited cleanly and stays down.
        unit = self.cluster.target.unit
        self.node.run(f"systemctl reset-failed {unit}; systemctl start {unit}")
        wait_agent(
            self.cluster.agent(self.node), step=f"start after {self.kind}", timeout=self.healthy_timeout
        )
        self.restore_seconds = time.monotonic() - self._t0 if self._t0 else 0.0
        history.measure(
            f"{self.kind}: kill to restore done", self.restore_seconds, node=self.node.name, target=5.0
        )


@dataclass
class AgentDown(Fault):
    """The agent stopped (systemctl stop) for as long as the block runs: things change under it."""

    def __post_init__(self) -> None:
        self.kind = "agent-down"

    def _inject(self) -> None:
        unit = self.cluster.target.unit
        self.node.run(f"systemctl stop {unit}")
        state = self.node.run(f"systemctl is-active {unit}", check=False).stdout.strip()
        if state == "active":
            raise FaultError(f"{self.node.name}: agent-down: the agent is still {state} after systemctl stop")

    def _heal(self) -> None:
        unit = self.cluster.target.unit
        self.node.run(f"systemctl reset-failed {unit}; systemctl start {unit}")
        wait_agent(self.cluster.agent(self.node), step="start after agent-down")


def set_agent_faults(cluster: Cluster, flags: list[str], nodes: list[Remote] | None = None) -> None:
    """Run the agents with FIELDLAB_AGENT_FAULTS=<flags> (a systemd drop-in; empty flags remove it),
    restart them and check that the agent announced every flag. An unknown flag is refused before
    any node is touched (the agent would refuse to start with it)."""
    from agent.fieldbugs.catalogue import IMPLEMENTED_FAULTS

    unit = cluster.target.unit
    if flags and not cluster.target.fault_flags:
        raise FaultError(
            f"the {cluster.target.name} target's clients take no fault flags: "
            f"{flags} need this project's agent"
        )
    dropin = faults_dropin(cluster.target)
    dropin_dir = dropin.rsplit("/", 1)[0]
    unknown = sorted(set(flags) - IMPLEMENTED_FAULTS)
    if unknown:
        from e2e.harness.scenario_ids import unknown_flags_message

        raise FaultError(unknown_flags_message(unknown, IMPLEMENTED_FAULTS))
    for node in nodes or cluster.clients:
        if flags:
            node.run(f"mkdir -p {dropin_dir}")
            node.put(dropin, f"[Service]\nEnvironment=FIELDLAB_AGENT_FAULTS={','.join(flags)}\n")
        else:
            node.run(f"rm -f {dropin}")
        since = node.out("date '+%Y-%m-%d %H:%M:%S'")
        node.run(f"systemctl daemon-reload; systemctl reset-failed {unit}; systemctl restart {unit}")
        wait_agent(cluster.agent(node), step=f"restart with fault flags {flags or 'none'}")
        log = node.run(f"journalctl -u {unit} --since {q(since)} --no-pager -o cat", check=False).stdout
        missing = [f for f in flags if f"FAULT INJECTION ACTIVE: {f} " not in log]
        if missing:
            raise FaultError(f"{node.name}: the agent did not announce fault flags {missing} after restart")
        history.record(history.NOTE, f"agent fault flags: {','.join(flags) or 'none'}", node=node.name)


# --- docker and containers ---------------------------------------------------------------------
@dataclass
class DockerRestart(Fault):
    """Restart the docker daemon (a package upgrade, an OOM kill): containers die, pause containers
    come back with a new, empty network namespace (restart policy), task containers do not."""

    def __post_init__(self) -> None:
        self.kind = "docker-restart"

    def _inject(self) -> None:
        before = self.node.out("systemctl show -p MainPID --value docker")
        # reset-failed first: repeated restarts in a chaos run hit docker's start rate limit.
        self.node.run(
            "systemctl reset-failed docker.service docker.socket; systemctl restart docker", timeout=120
        )
        after = self.node.out("systemctl show -p MainPID --value docker")
        if after in ("0", before):
            raise FaultError(
                f"{self.node.name}: docker-restart: dockerd pid {before} -> {after}: not restarted"
            )

    def _heal(self) -> None:
        def up() -> tuple[bool | None, str]:
            res = self.node.run("docker info --format '{{.ServerVersion}}'", check=False)
            return (True if res.rc == 0 else None), res.stderr.strip()[-200:] or "ok"

        _wait(
            up, timeout=DOCKER_BACK, what="docker answering", node=self.node.name, step="after docker-restart"
        )
        wait_agent(self.cluster.agent(self.node), step="after docker-restart")


@dataclass
class DockerDown(Fault):
    """Stop the docker daemon and its socket (no socket activation brings it back) until healed:
    containers die, and every call of the agent's docker driver meets a refused connection. A
    safety timer on the node starts it again should the controller never come back to heal."""

    def __post_init__(self) -> None:
        self.kind = "docker-down"

    def _docker_answers(self) -> bool:
        return self.node.run("docker info --format '{{.ServerVersion}}'", check=False).rc == 0

    def in_effect(self) -> bool:
        return not self._docker_answers()

    def _inject(self) -> None:
        start = "systemctl reset-failed docker.service docker.socket; systemctl start docker.socket docker"
        _safety_timer(self.node, "fieldlab-heal-docker", start)
        self.node.run("systemctl stop docker.socket docker.service", timeout=120)
        if self._docker_answers():
            raise FaultError(f"{self.node.name}: docker-down: dockerd still answers")

    def _heal(self) -> None:
        self.node.run(
            "systemctl reset-failed docker.service docker.socket; systemctl start docker.socket docker",
            timeout=120,
        )
        _cancel_safety_timer(self.node, "fieldlab-heal-docker")

        def up() -> tuple[bool | None, str]:
            return (True if self._docker_answers() else None), "docker does not answer yet"

        _wait(up, timeout=DOCKER_BACK, what="docker answering", node=self.node.name, step="after docker-down")
        wait_agent(self.cluster.agent(self.node), step="after docker-down")


def alloc_containers(node: Remote, alloc_id: str, role: str | None = None, *, target: Target) -> list[str]:
    """Ids of the alloc's running containers (role: "pause" or "task"), by the target's alloc label;
    the pause container is told by its name (nomad_init_<alloc>), as on a Nomad client."""
    fmt = "{{.ID}} {{.Names}}"
    out = node.out(
        f"docker ps --no-trunc --filter label={target.docker_alloc_label}={alloc_id} --format {q(fmt)}"
    )
    found = []
    for line in out.splitlines():
        cid, _, name = line.partition(" ")
        if role is None or (role == "pause") == name.startswith(PAUSE_PREFIXES):
            found.append(cid)
    return sorted(found)


@dataclass
class ContainerKill(Fault):
    """SIGKILL one alloc's pause container, its task containers, or both (in that order)."""

    heals_itself: ClassVar[bool] = True
    alloc_id: str = ""
    which: str = "pause"  # pause | task | both

    def __post_init__(self) -> None:
        if self.which not in ("pause", "task", "both"):
            raise ValueError(f"ContainerKill.which must be pause, task or both, not {self.which!r}")
        self.kind = f"kill-{self.which}"
        self.killed: list[str] = []

    def describe(self) -> str:
        return f"{self.kind} {self.node.name} alloc {self.alloc_id[:8]}"

    def _inject(self) -> None:
        roles = ["pause", "task"] if self.which == "both" else [self.which]
        ids = []
        for role in roles:  # all ids first: once the pause dies the agent starts stopping the tasks
            found = alloc_containers(self.node, self.alloc_id, role, target=self.cluster.target)
            if not found:
                raise FaultError(
                    f"{self.node.name}: {self.kind}: alloc {self.alloc_id} has no running {role} container"
                )
            ids += found
        self.node.run("docker kill -s KILL " + " ".join(ids))
        self.killed = ids

    def _heal(self) -> None:
        """The agent heals this one; the suite's checkers say whether it did."""


@dataclass
class ProcessKill(Fault):
    """SIGKILL an exec (or raw_exec) task: its whole process group (the process the agent tracks
    and the workload under it), as a crash or the OOM killer would end it. `task` "" is the alloc's
    first task."""

    heals_itself: ClassVar[bool] = True
    alloc_id: str = ""
    task: str = ""

    def __post_init__(self) -> None:
        self.kind = "kill-process"
        self.killed: list[str] = []

    def describe(self) -> str:
        return f"{self.kind} {self.node.name} alloc {self.alloc_id[:8]} {self.task}".rstrip()

    def _inject(self) -> None:
        tasks = self.cluster.agent(self.node).alloc(self.alloc_id)["tasks"]
        name = self.task or next(iter(tasks))
        pid = str(tasks[name].get("container") or "")
        if not pid.isdigit():
            raise FaultError(
                f"{self.node.name}: {self.kind}: task {name} of alloc {self.alloc_id} has no process "
                f"(handle {pid!r}: not an exec task?)"
            )
        # procps' kill, not the shell's: dash (sh through sudo on own hosts) takes no `--` before a
        # process group, bash does; the node_base role installs procps.
        self.node.run(f"/usr/bin/env kill -KILL -- -{pid}")
        self.killed = [pid]

        def gone() -> tuple[bool | None, str]:
            # A zombie (state Z) until the agent reaps it: dead all the same.
            state = self.node.run(f"cut -d')' -f2 /proc/{pid}/stat 2>/dev/null", check=False).stdout.split()
            return (True if not state or state[0] == "Z" else None), f"pid {pid} state {state[:1]}"

        _wait(gone, timeout=FAULT_EFFECT, what=f"pid {pid} to die", node=self.node.name, step=self.kind)

    def _heal(self) -> None:
        """The agent heals this one (its restart policy); the suite's checkers say whether it did."""


# --- the network -------------------------------------------------------------------------------
def _controller_address(node: Remote) -> str:
    out = node.out("echo $SSH_CLIENT")
    if not out:
        raise FaultError(f"{node.name}: cannot tell the controller's address (SSH_CLIENT is empty)")
    return out.split()[0]


def _safety_timer(node: Remote, unit: str, command: str) -> None:
    """Heal by itself after SAFETY_HEAL seconds, should the controller never come back to heal."""
    node.run(f"systemctl stop {unit}.timer {unit}.service; systemctl reset-failed {unit}", check=False)
    node.run(
        f"systemd-run --unit {unit} --on-active={int(SAFETY_HEAL)} --timer-property=AccuracySec=1s "
        f"/bin/sh -c {q(command)}"
    )


def _cancel_safety_timer(node: Remote, unit: str) -> None:
    node.run(f"systemctl stop {unit}.timer; systemctl reset-failed {unit}", check=False)


def _remove_chain(chain: str) -> str:
    """Shell that deletes every rule jumping to `chain` (whatever its matches), then the chain."""
    return (
        f"iptables-save -t filter | grep -- ' -j {chain}$' | sed 's/^-A /-D /' | "
        f"while read -r rule; do eval iptables $rule; done; "
        f"iptables -F {chain} 2>/dev/null; iptables -X {chain} 2>/dev/null; true"
    )


@dataclass
class Partition(Fault):
    """Cut a node off the lab network (iptables on the node), keeping SSH from the controller.

    Traffic inside the node (loopback, its CNI bridge) is untouched: only the lab interface."""

    def __post_init__(self) -> None:
        self.kind = "partition"

    def _peer(self) -> Remote:
        return next(n for n in self.cluster.nodes if n != self.node)

    def _reach(self) -> bool:
        peer = self._peer()
        return peer.run(f"ping -c1 -W1 {self.node.address}", check=False).rc == 0

    def _inject(self) -> None:
        ctl = _controller_address(self.node)
        iface = self.node.out(
            f"ip -o route get {self._peer().address} | sed -n 's/.* dev \\([^ ]*\\).*/\\1/p'"
        )
        c = PARTITION_CHAIN
        rules = [
            _remove_chain(c),
            f"iptables -N {c}",
            f"iptables -A {c} -s {ctl} -p tcp --dport 22 -j RETURN",
            f"iptables -A {c} -d {ctl} -p tcp --sport 22 -j RETURN",
            f"iptables -A {c} -j DROP",
            f"iptables -I INPUT -i {iface} -j {c}",
            f"iptables -I OUTPUT -o {iface} -j {c}",
            # Allocs' traffic (mapped ports in, Vault out) is forwarded, not input/output.
            f"iptables -I FORWARD -i {iface} -j {c}",
            f"iptables -I FORWARD -o {iface} -j {c}",
        ]
        _safety_timer(self.node, "fieldlab-heal-partition", _remove_chain(c))
        self.node.run("; ".join(rules[:1]) + "; set -e; " + "; ".join(rules[1:]))
        if self._reach():
            raise FaultError(
                f"{self.node.name}: partition: {self._peer().name} still reaches it after the rules went in"
            )

    def in_effect(self) -> bool:
        return not self._reach()

    def _heal(self) -> None:
        self.node.run(_remove_chain(PARTITION_CHAIN), retry_for=30)
        _cancel_safety_timer(self.node, "fieldlab-heal-partition")

        def back() -> tuple[bool | None, str]:
            return (True if self._reach() else None), "no ping answer"

        _wait(
            back,
            timeout=FAULT_EFFECT,
            what="the lab to reach it again",
            node=self.node.name,
            step="heal partition",
        )


@dataclass
class VaultOutage(Fault):
    """OpenBao refuses every connection from outside its node (iptables REJECT on :8200)."""

    def __post_init__(self) -> None:
        self.kind = "vault-outage"

    def in_effect(self) -> bool:
        return not self._answers_from(self.cluster.clients[0])

    def _answers_from(self, node: Remote) -> bool:
        url = f"{self.cluster.vault_addr}/v1/sys/health"
        return node.run(f"curl -s -o /dev/null -m 3 {url}", check=False).rc == 0

    def _inject(self) -> None:
        c = VAULT_OUTAGE_CHAIN
        remove = _remove_chain(c)
        _safety_timer(self.node, "fieldlab-heal-vault", remove)
        self.node.run(
            f"{remove}; set -e; iptables -N {c}; iptables -A {c} -i lo -j RETURN; "
            f"iptables -A {c} -p tcp --dport 8200 -j REJECT --reject-with tcp-reset; iptables -I INPUT -j {c}"
        )
        client = self.cluster.clients[0]
        if self._answers_from(client):
            raise FaultError(
                f"{self.node.name}: vault-outage: {client.name} still reaches {self.cluster.vault_addr}"
            )

    def _heal(self) -> None:
        c = VAULT_OUTAGE_CHAIN
        self.node.run(_remove_chain(c), retry_for=30)
        _cancel_safety_timer(self.node, "fieldlab-heal-vault")
        client = self.cluster.clients[0]

        def back() -> tuple[bool | None, str]:
            return (True if self._answers_from(client) else None), "Vault still refuses"

        _wait(
            back,
            timeout=FAULT_EFFECT,
            what="Vault answering again",
            node=self.node.name,
            step="heal vault-outage",
        )


@dataclass
class RegistryFault(Fault):
    """The lab's image registry on its server (the registry role) `down` (`systemctl stop
    docker-registry`: a pull fails at once, connection refused) or `slow` (every packet to its port
    from outside the node dropped: a pull hangs until image_pull_timeout or pull_activity_timeout).
    A safety timer on the node heals it should the controller never come back."""

    mode: str = "down"

    def __post_init__(self) -> None:
        if self.mode not in ("down", "slow"):
            raise FaultError(f"{self.node.name}: registry fault {self.mode!r}: must be down or slow")
        self.kind = f"registry-{self.mode}"

    def _answers_from(self, node: Remote) -> bool:
        url = f"https://{self.node.address}:{REGISTRY_PORT}/v2/"
        return node.run(f"curl -sk -o /dev/null -m 3 {url}", check=False).rc == 0

    def in_effect(self) -> bool:
        return not self._answers_from(self.cluster.clients[0])

    def _heal_command(self) -> str:
        if self.mode == "down":
            return "systemctl start docker-registry"
        return _remove_chain(REGISTRY_SLOW_CHAIN)

    def _inject(self) -> None:
        _safety_timer(self.node, "fieldlab-heal-registry", self._heal_command())
        if self.mode == "down":
            self.node.run("systemctl stop docker-registry")
        else:
            c = REGISTRY_SLOW_CHAIN
            self.node.run(
                f"{_remove_chain(c)}; set -e; iptables -N {c}; iptables -A {c} -i lo -j RETURN; "
                f"iptables -A {c} -p tcp --dport {REGISTRY_PORT} -j DROP; iptables -I INPUT -j {c}"
            )
        client = self.cluster.clients[0]
        if self._answers_from(client):
            raise FaultError(f"{self.node.name}: {self.kind}: {client.name} still reaches the registry")

    def _heal(self) -> None:
        self.node.run(self._heal_command(), retry_for=30)
        _cancel_safety_timer(self.node, "fieldlab-heal-registry")
        client = self.cluster.clients[0]

        def back() -> tuple[bool | None, str]:
            return (True if self._answers_from(client) else None), "the registry still does not answer"

        _wait(back, timeout=FAULT_EFFECT, what="the registry answering again", node=self.node.name,
              step=f"heal {self.kind}")  # fmt: skip


def reboot(cluster: Cluster, node: str, *, hard: bool) -> float:
    """Reboot a node and wait for its agent (if a client); return the seconds until ssh answered."""
    fault = Reboot(cluster, cluster.node(node), hard=hard)
    with injected(fault):
        pass
    return fault.seconds_to_ssh


def wait_sweeps(agent: Agent, n: int) -> int:
    """Wait until the agent has done `n` more orphan sweeps; return the count done since its start."""
    start = (agent.metrics() or {}).get("fieldlab_agent_sweeps_total", 0.0)

    def swept() -> tuple[int | None, str]:
        now = (agent.metrics() or {}).get("fieldlab_agent_sweeps_total", 0.0)
        return (int(now) if now >= start + n else None), f"{now - start:.0f} sweeps"

    return wait_until(swept, timeout=SWEEPS_DONE, what=f"{agent.node.name}: {n} orphan sweeps")
