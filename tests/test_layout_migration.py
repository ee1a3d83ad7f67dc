"""A node an earlier agent laid out with this project's names (netns `fl-<alloc>`, task cgroups under
`fieldlab`, the CNI network `fieldlab`) moves to Nomad's names with the agent's upgrade, as `make
deploy-agent` does it: the running alloc keeps its task (no restart) and its names until it stops,
its record gets them written (the state schema upgrade: the earlier agent's record held none), new
allocs get the new names and never an address the old one holds, and the old alloc's stop leaves
nothing behind under either network. Real dockerd, real CNI plugins on the test's own bridge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.drivers.cgroups import Cgroups
from agent.network import iptables, netns
from agent.structs import layout
from agent.structs.layout import FIELDLAB, NOMAD, NodeLayout
from agent.structs.records import AllocRecord
from tests.agent_lab import BRIDGE, NETWORK, AgentLab, AgentUnderTest, why_not_ready
from tests.cniconf import bridge_conflist

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

TIMEOUT = 60.0
JOB = (Path(__file__).parent / "jobspecs" / "exec-bridge.hcl").read_text()  # job "exec-web"


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[AgentLab]:
    agent_lab = AgentLab(tmp_path / "agentlab")
    yield agent_lab
    layout.bind(NOMAD)
    for c in iptables.list_cni_chains():  # the earlier network's, should the test have failed
        if c.network == FIELDLAB.cni_network:
            iptables.remove_chain(c.table, c.name)
    agent_lab.cleanup()


def _submit(agent: AgentUnderTest, job_id: str) -> str:
    text = JOB.replace('job "exec-web"', f'job "{job_id}"', 1)
    out = agent.core.call(lambda: agent.core.job_registry.submit(text, None, source=job_id))
    assert len(out["allocs"]) == 1, out
    agent.settle()
    return str(out["allocs"][0])


def _pid(agent: AgentUnderTest, alloc: str) -> int:
    rec = agent.core.store.get("handle", f"{alloc}/httpd")
    assert rec is not None
    return int(rec["id"])


def _view(agent: AgentUnderTest, alloc: str) -> dict[str, object]:
    return agent.core.call(lambda: agent.core.allocs.runner(alloc).view())


def _reserved(lab: AgentLab, network: str) -> dict[str, str]:
    """host-local's reservations of `network`: address -> container id."""
    d = lab.ipam_dir / network
    files = [p for p in d.iterdir() if p.name[0].isdigit()] if d.is_dir() else []
    return {p.name: p.read_text().splitlines()[0].strip() for p in files}


def test_an_earlier_layouts_alloc_keeps_its_task_and_names_and_new_ones_get_nomads(lab: AgentLab) -> None:
    old_conf = bridge_conflist(
        lab.root / f"{FIELDLAB.cni_network}.conflist",
        network=FIELDLAB.cni_network,
        bridge=BRIDGE,
        subnet="10.213.251.0/24",
        ipam_dir=lab.ipam_dir,
        admin_chain="FLRUN-ADMIN",
    )
    # The earlier agent: this project's names.
    layout.bind(FIELDLAB)
    agent = lab.start_agent(conflist=old_conf)
    old = _submit(agent, "old-web")
    pid = _pid(agent, old)
    old_ip = str(agent.core.store.get("alloc", old)["address"])  # type: ignore[index]
    assert netns.exists(f"fl-{old}") and old_ip in _reserved(lab, "fieldlab")
    # Its record as the agents before this one wrote it: no names in it.
    raw = agent.core.store.get("alloc", old)
    assert raw is not None
    del raw["layout"]
    agent.core.store.put("alloc", old, raw)
    agent.stop()

    # The upgraded agent: Nomad's netns and cgroup names, the lab's network `flrun` beside `fieldlab`.
    current = NodeLayout("", "nomad.slice", NETWORK)
    layout.bind(current)
    agent = lab.start_agent(former_conflists=(old_conf,))
    try:
        assert _pid(agent, old) == pid, "the upgrade restarted the earlier layout's task"
        assert _view(agent, old)["tasks"]["httpd"]["restarts"] == 0  # type: ignore[index]
        written = AllocRecord.from_record(agent.core.store.get("alloc", old) or {})
        assert written.layout == FIELDLAB, "the names found on the node were not written to the record"
        assert layout.for_alloc(old) == FIELDLAB
        # The address the old alloc holds is reserved in the new network too.
        assert _reserved(lab, NETWORK) == {old_ip: old}
        port = int(_view(agent, old)["network"]["ports"][0]["host"])  # type: ignore[index]
        assert lab.wait_http(port, TIMEOUT, "/index.html")[0] == 200

        new = _submit(agent, "new-web")
        new_pid = _pid(agent, new)
        assert netns.pid_netns_id(new_pid) == netns.netns_id(netns.netns_path(new)), "not Nomad's netns name"
        assert Cgroups.of_task(new, "httpd").parent == "nomad.slice"
        assert any(str(new_pid) in p.read_text().split() for p in Cgroups.of_task(new, "httpd").procs_files())
        new_ip = str(agent.core.store.get("alloc", new)["address"])  # type: ignore[index]
        assert new_ip != old_ip and _reserved(lab, NETWORK) == {old_ip: old, new_ip: new}
        assert (lab.data_dir / "cni" / f"{NETWORK}:{new}:eth0.json").exists()
        report = agent.core.call(agent.core.sweep)
        assert report is not None and not report.planned, report.planned  # nothing of either is an orphan

        # Another restart: the record's names hold.
        agent.stop()
        agent = lab.start_agent(former_conflists=(old_conf,))
        assert _pid(agent, old) == pid and _pid(agent, new) == new_pid

        agent.stop_job("old-web")
        assert not netns.exists(f"fl-{old}")
        assert not list(Path("/sys/fs/cgroup").glob(f"**/fieldlab/{old}.httpd"))
        assert _reserved(lab, FIELDLAB.cni_network) == {}
        assert _reserved(lab, NETWORK) == {new_ip: new}, "the carried reservation outlived the alloc"
        assert not (lab.data_dir / "cni" / f"{FIELDLAB.cni_network}:{old}:eth0.json").exists()
        assert [c.name for c in iptables.list_cni_chains() if c.network == FIELDLAB.cni_network] == []
        agent.stop_job("new-web")
        assert _reserved(lab, NETWORK) == {} and not netns.exists(new)
    finally:
        agent.stop()
