"""Collect what a person needs to debug a failed test from every node, into the run's directory.

`nodes/<node>/<test>/`: the agent's and the system's journal, the agent's state db, `docker ps -a`,
`ip netns`, `iptables-save`, the IPAM files and the CNI cache; for a VM node (the qemu provider) the
tail of its serial console too, read on the controller, so a node that never came back still says
why. Collection never fails the run: a node that does not answer gets a `collect-error.txt` saying so.
"""

from __future__ import annotations

import re
from pathlib import Path

from e2e.harness import history
from e2e.harness.cluster import Cluster
from e2e.harness.remote import Remote, RemoteCommandError
from e2e.harness.target import Target
from lab.errors import LabError
from lab.providers.qemu import console_log


def client_commands(target: Target) -> dict[str, str]:
    """What is collected of a client, by the names of its target profile."""
    data, unit = target.data_dir, target.unit
    return {
        "agent.log": f"journalctl -u {unit} -b --no-pager -o short-precise | tail -n 3000",
        "docker-ps.txt": "docker ps -a --no-trunc",
        "ip-netns.txt": "ip netns list; echo; ip -br addr",
        "iptables-save.txt": "iptables-save",
        "ipam.txt": "for f in /var/run/cni/*/*; do echo \"$f: $(tr '\\n' ' ' < $f)\"; done",
        "cni-cache.txt": f"ls -l {data}/cni; cat {data}/cni/*.json",
        "alloc-dirs.txt": f"find {data}/alloc -maxdepth 3 | sort",
        "docker.log": "journalctl -u docker -b --no-pager -o short-precise | tail -n 500",
        "journal.log": "journalctl -b --no-pager -o short-precise -p warning | tail -n 1000",
        "systemctl-failed.txt": f"systemctl --failed --no-pager; systemctl status {unit} --no-pager",
    }


SERVER_COMMANDS = {
    "openbao.log": "journalctl -u openbao -b --no-pager -o short-precise | tail -n 1000",
    "seal-status.json": "curl -s -m 3 http://127.0.0.1:8200/v1/sys/seal-status",
    "iptables-save.txt": "iptables-save",
    "journal.log": "journalctl -b --no-pager -o short-precise -p warning | tail -n 1000",
}
STATE_FILES = ("state.db", "state.db-wal", "state.db-shm")
CONSOLE_LINES = 2000  # of a VM node's serial console, the last


def safe_name(nodeid: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-120:] or "session"


def collect_node(node: Remote, dest: Path, *, client: bool, target: Target) -> list[str]:
    """Write the node's state into `dest`; return the names written."""
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        for name, cmd in (client_commands(target) if client else SERVER_COMMANDS).items():
            res = node.run(f"bash -c {_q(cmd)}", check=False, timeout=60)
            (dest / name).write_text(
                res.stdout + (f"\n--- stderr ---\n{res.stderr}" if res.stderr.strip() else "")
            )
            written.append(name)
        if client:
            for f in STATE_FILES:
                try:
                    (dest / f).write_bytes(node.get(f"{target.data_dir}/state/{f}"))
                    written.append(f)
                except (OSError, LabError, RemoteCommandError):
                    continue  # e.g. the WAL, checkpointed away since: collect what is there
    except LabError as exc:
        (dest / "collect-error.txt").write_text(f"{node.name}: could not collect: {exc}\n")
        written.append("collect-error.txt")
    return written


def collect_console(console: Path, dest: Path) -> list[str]:
    """The tail of a VM node's serial console, when the node is a VM (else nothing)."""
    try:
        lines = console.read_text(errors="replace").splitlines()[-CONSOLE_LINES:]
    except OSError:
        return []
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "console.log").write_text("\n".join(lines) + "\n")
    return ["console.log"]


def collect(cluster: Cluster, run_dir: Path, nodeid: str) -> Path:
    """Collect from every node of the lab for the failed test `nodeid`."""
    base = run_dir / "nodes"
    for node in cluster.nodes:
        dest = base / node.name / safe_name(nodeid)
        names = collect_node(node, dest, client=node in cluster.clients, target=cluster.target)
        names += collect_console(console_log(cluster.paths, node.name), dest)
        history.record(history.NOTE, f"collected {len(names)} files", node=node.name, detail=str(dest))
    return base


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)
