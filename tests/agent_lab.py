"""A one-host agent lab on the controller for integration tests: real dockerd, real CNI plugins on a
bridge of the test's own (10.213.251.0/24), the lab's workload images built by the workload_images
role, and a Core driven like the daemon drives it. Traffic stays on that bridge."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.core import Core
from agent.drivers.base import LABEL_ALLOC, LABEL_MANAGED
from agent.drivers.docker import DockerDriver
from agent.faults import Faults
from agent.network import iptables
from agent.network.cni import CniNetwork
from agent.state import SqliteStore
from lab.config import PROJECT_DIR
from lab.waits import wait_until

PLUGIN_DIR = Path("/usr/lib/cni")
NETWORK = "flrun"
BRIDGE = "flrun0"
GATEWAY = "10.213.251.1"


def why_not_ready() -> str | None:
    import os

    if os.geteuid() != 0:
        return "needs root (docker, netns, iptables)"
    if not (PLUGIN_DIR / "bridge").exists():
        return f"CNI plugins missing in {PLUGIN_DIR}"
    if not Path("/bin/busybox").exists():
        return "busybox-static is not installed (make bootstrap installs it)"
    try:
        DockerDriver().client.ping()
    except Exception as exc:
        return f"dockerd not reachable: {exc}"
    return None


def build_workload_images(tmp: Path) -> None:
    """Build fieldlab/pause and fieldlab/busybox here with the lab's own role (no second recipe)."""
    inv = tmp / "inventory.ini"
    inv.write_text(
        f"[clients]\nlocalhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    venv_bin = Path(sys.executable).parent
    proc = subprocess.run(
        [
            str(venv_bin / "ansible-playbook"),
            "-i",
            str(inv),
            str(PROJECT_DIR / "lab/playbooks/workloads.yml"),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={
            "PATH": f"{venv_bin}:/usr/sbin:/usr/bin:/sbin:/bin",
            "ANSIBLE_CONFIG": str(PROJECT_DIR / "lab/ansible.cfg"),
            "ANSIBLE_ROLES_PATH": str(PROJECT_DIR / "lab/roles"),
            "HOME": str(tmp),
        },
    )
    if proc.returncode != 0:
        raise RuntimeError(f"workload images did not build:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")


def write_conflist(path: Path, ipam_dir: Path) -> Path:
    plugins: list[dict[str, Any]] = [
        {"type": "loopback"},
        {
            "type": "bridge",
            "bridge": BRIDGE,
            "isGateway": True,
            "ipMasq": True,
            "forceAddress": True,
            "hairpinMode": True,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": "10.213.251.0/24"}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": str(ipam_dir),
            },
        },
        {"type": "firewall", "backend": "iptables", "iptablesAdminChainName": "FLRUN-ADMIN"},
        {"type": "portmap", "capabilities": {"portMappings": True}, "snat": True},
    ]
    path.write_text(json.dumps({"cniVersion": "0.4.0", "name": NETWORK, "plugins": plugins}))
    return path


@dataclass
class AgentUnderTest:
    """One incarnation of the agent: a Core with its loop and docker event threads."""

    core: Core
    threads: list[threading.Thread]

    def stop(self) -> None:
        """Like SIGTERM to the real agent: the loop ends, tasks keep running, the store closes."""
        self.core.stop()
        for t in self.threads[:1]:
            t.join(10)
        self.core.store.close()


class AgentLab:
    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        self.data_dir = root / "data"
        self.ipam_dir = root / "ipam"
        self.conflist = write_conflist(root / f"{NETWORK}.conflist", self.ipam_dir)
        self.docker = DockerDriver()

    def start_agent(self, faults: str = "", sweep_grace: float = 60.0) -> AgentUnderTest:
        store = SqliteStore(self.data_dir / "state" / "state.db")
        cni = CniNetwork(self.conflist, PLUGIN_DIR, self.data_dir / "cni")
        core = Core(
            store,
            self.docker,
            cni,
            bridge=BRIDGE,
            data_dir=self.data_dir,
            faults=Faults.parse(faults),
            sweep_grace=sweep_grace,
        )
        loop = threading.Thread(target=core.run_loop, daemon=True)
        loop.start()
        core.call(core.restore)
        events = threading.Thread(target=core.watch_docker, daemon=True)
        events.start()
        return AgentUnderTest(core, [loop, events])

    # -- observations -------------------------------------------------------------------------
    def containers(self, alloc_id: str | None = None) -> list[Any]:
        label = f"{LABEL_ALLOC}={alloc_id}" if alloc_id else f"{LABEL_MANAGED}=true"
        return list(self.docker.client.containers.list(all=True, filters={"label": label}))

    def reservations(self) -> list[str]:
        d = self.ipam_dir / NETWORK
        return sorted(p.name for p in d.iterdir() if p.name[0].isdigit()) if d.exists() else []

    def chains(self) -> list[str]:
        return sorted(c.name for c in iptables.list_cni_chains() if c.network == NETWORK)

    def http_get(self, port: int, path: str = "/") -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://{GATEWAY}:{port}{path}", timeout=3) as resp:
                return resp.status, resp.read().decode(errors="replace")
        except urllib.error.HTTPError as exc:
            return exc.code, ""
        except OSError as exc:
            return 0, str(exc)

    def wait_http(self, port: int, timeout: float = 30.0, path: str = "/") -> tuple[int, str]:
        def answered() -> tuple[tuple[int, str] | None, str]:
            status, body = self.http_get(port, path)
            return ((status, body) if status else None), body

        return wait_until(answered, timeout=timeout, what=f"HTTP answer on {GATEWAY}:{port}", interval=0.5)

    def cleanup(self) -> None:
        for c in self.containers():
            c.remove(force=True)
        for c in iptables.list_cni_chains():
            if c.network == NETWORK:
                iptables.remove_chain(c.table, c.name)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
