"""A one-host agent lab on the controller for integration tests: real dockerd, real CNI plugins on a
bridge of the test's own (10.213.251.0/24), the lab's workload images built by the workload_images
role, and a Core driven like the daemon drives it. Traffic stays on that bridge.

Beside it, the agent's Nomad API over a Core called in-process (`NomadRoutes`, no server, no root),
and what the tests read of Nomad's answers: a job run as `nomad job run` does it (`run_job`), an
alloc's events (`alloc_events`), a log's StreamFrames (`stream_frames`)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.api import handler as agent_api
from agent.api.client import ApiClient, ApiError
from agent.api.handler import Response, Streamed
from agent.client.core import Core
from agent.command.wiring import CoreSettings, build_core, start_core
from agent.drivers.base import LABEL_ALLOC, LABEL_MANAGED
from agent.drivers.docker import DockerDriver
from agent.fieldbugs.faults import Faults
from agent.network import iptables
from agent.network.cni import CniNetwork
from agent.node.nodeinfo import driver_health
from agent.nomadapi.node import NodeIdentity
from agent.nomadapi.routes import NomadApi, build_nomad_routes
from agent.state import SqliteStore
from agent.structs import layout
from agent.structs.layout import netns_owner
from lab.config import PROJECT_DIR
from lab.waits import wait_until
from tests.cniconf import bridge_conflist
from tests.pki import TestCA

PLUGIN_DIR = Path("/usr/lib/cni")
NETWORK = "flrun"
BRIDGE = "flrun0"
GATEWAY = "10.213.251.1"


NODE = NodeIdentity("5f8e2d1c-0000-4000-8000-000000000001", "client1", "dc1", "global", "127.0.0.1:4646")

Request = Callable[..., Any]  # (method, path, body=None) -> the JSON answer; ApiError on a 4xx/5xx


class NomadRoutes:
    """The agent's Nomad API over `core`, each handler called in this thread as the API server calls
    it (the path's groups, the body, the query in the thread): what the daemon serves, without a
    server. The core's loop must run (a thread on `core.loop.run`)."""

    def __init__(self, core: Core, node: NodeIdentity = NODE, *, nomad: NomadApi | None = None) -> None:
        """`nomad`: the NomadApi to serve (the daemon's, say); by default one over `core` as `node`."""
        self.core = core
        self.nomad = nomad or NomadApi(core, node, driver_health=lambda: driver_health(core.drivers.all()))
        self.table = build_nomad_routes(self.nomad)  # (method, path regex, handler): an ApiServer's
        self.routes = [(m, re.compile(rx), h) for m, rx, h in self.table]

    def answer(self, method: str, target: str, body: Any = None) -> Response | Streamed:
        """The handler's answer as it is (a Streamed one not read yet)."""
        raw = body if isinstance(body, bytes) else (b"" if body is None else json.dumps(body).encode())
        path, _, agent_api.current_request.query = target.partition("?")
        for m, rx, handler in self.routes:
            match = rx.fullmatch(path)
            if m == method and match:
                return handler(match.groups(), raw)
        raise AssertionError(f"no route for {method} {path}")

    def call(self, method: str, target: str, body: Any = None) -> tuple[int, Any]:
        """(status, body): JSON decoded, a plain-text answer (Nomad's errors) as str, a stream's
        bytes joined (a stream that is not followed: it ends)."""
        out = self.answer(method, target, body)
        if isinstance(out, Streamed):
            try:
                return out.status, b"".join(out.chunks)
            finally:
                out.close()
        status, ctype, data = out
        return status, json.loads(data) if ctype == "application/json" else data.decode()

    def request(self, method: str, target: str, body: Any = None) -> Any:
        """As agent.api.client.ApiClient.request: the JSON answer, ApiError for a 4xx or 5xx."""
        status, out = self.call(method, target, body)
        if status >= 400:
            raise ApiError(status, out)
        return out


def run_job(request: Request, hcl: str) -> list[str]:
    """`nomad job run` through Nomad's API: parse the HCL (`/v1/jobs/parse`), register the Job with
    its Submission (`PUT /v1/jobs`); the IDs of the allocs its evaluation placed."""
    job = request("POST", "/v1/jobs/parse", {"JobHCL": hcl, "Canonicalize": True})
    out = request("PUT", "/v1/jobs", {"Job": job, "Submission": {"Source": hcl, "Format": "hcl2"}})
    return [str(a["ID"]) for a in request("GET", f"/v1/evaluation/{out['EvalID']}/allocations")]


def alloc_events(alloc: dict[str, Any]) -> list[dict[str, Any]]:
    """An api.Allocation's task events, oldest first, each once: an alloc-wide event is in every
    task's list (as Nomad's alloc runner appends it to each); `Task` says whose list it was in first."""
    seen: dict[tuple[Any, ...], dict[str, Any]] = {}
    for task, state in sorted((alloc.get("TaskStates") or {}).items()):
        for ev in state.get("Events") or []:
            seen.setdefault((ev["Time"], ev["Type"], ev["DisplayMessage"]), {**ev, "Task": task})
    return sorted(seen.values(), key=lambda e: int(e["Time"]))


def stream_frames(data: bytes) -> list[dict[str, Any]]:
    """Nomad's StreamFrames as a log or file stream sends them (JSON objects one after the other),
    each frame's Data decoded to bytes; heartbeats (`{}`) left out."""
    text, at, out = data.decode(), 0, []
    decoder = json.JSONDecoder()
    while at < len(text):
        frame, at = decoder.raw_decode(text, at)
        if frame:
            out.append({**frame, "Data": base64.b64decode(frame.get("Data") or "")})
    return out


def why_not_ready() -> str | None:

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


def task_report(data_dir: Path, alloc: str, task: str, timeout: float = 30.0) -> str:
    """A task's stdout (alloc/logs/<task>.stdout.0) once it printed its closing `done` line: the
    report of a task that writes what it saw and then sleeps."""
    logs = data_dir / "alloc" / alloc / "alloc" / "logs" / f"{task}.stdout.0"

    def done() -> tuple[str | None, str]:
        got = logs.read_text() if logs.exists() else ""
        return (got if "done" in got else None), got[-300:]

    return str(wait_until(done, timeout=timeout, what=f"task {task}'s report"))


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
            "HOME": str(tmp),
        },
    )
    if proc.returncode != 0:
        raise RuntimeError(f"workload images did not build:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}")


def write_conflist(path: Path, ipam_dir: Path) -> Path:
    return bridge_conflist(
        path,
        network=NETWORK,
        bridge=BRIDGE,
        subnet="10.213.251.0/24",
        ipam_dir=ipam_dir,
        admin_chain="FLRUN-ADMIN",
    )


@dataclass
class AgentUnderTest:
    """One incarnation of the agent: a Core with its loop and docker event threads."""

    core: Core
    threads: list[threading.Thread]

    def settle(self, timeout: float = 120.0) -> None:
        """Wait (polling) until no alloc has a step off the main loop or operations behind one."""

        def idle() -> tuple[bool | None, str]:
            busy = self.core.call(self.core.allocs.busy)
            return (True if not busy else None), f"busy: {busy}"

        wait_until(idle, timeout=timeout, what="the agent's allocs to settle", interval=0.05)

    def stop_job(self, job: str, timeout: float = 60.0) -> list[str]:
        """Stop a job as the API does and wait (polling, `timeout`) until each of its allocs is
        complete: the tasks' stops run off the main loop, so the call returns before they end."""
        stopped = self.core.call(lambda: self.core.job_registry.stop_job(job))

        def done() -> tuple[bool | None, str]:
            states = self.core.call(lambda: {a: self.core.runners[a].rec.status.value for a in stopped})
            return (True if all(s == "complete" for s in states.values()) else None), str(states)

        wait_until(done, timeout=timeout, what=f"the allocs of job {job} to complete", interval=0.05)
        return stopped

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

    def start_agent(
        self,
        faults: str = "",
        sweep_grace: float = 60.0,
        cni_check: bool | None = None,
        vault: Any = None,
        exec_allow_root: bool = False,
        docker_enabled: bool = True,
        raw_exec_enabled: bool = False,
        host_volumes: tuple[tuple[str, str, bool], ...] = (),
        conflist: Path | None = None,
        former_conflists: tuple[Path, ...] = (),
        advertise_address: str = "",
    ) -> AgentUnderTest:
        """`conflist`: the network new allocs join (the lab's own by default); `former_conflists`: an
        earlier layout's networks, kept for the allocs attached to them (agent.structs.layout)."""
        store = SqliteStore(self.data_dir / "state" / "state.db")
        cni = CniNetwork(conflist or self.conflist, PLUGIN_DIR, self.data_dir / "cni")
        former = [CniNetwork(p, PLUGIN_DIR, self.data_dir / "cni") for p in former_conflists]
        settings = CoreSettings(
            data_dir=self.data_dir,
            bridge=BRIDGE,
            sweep_grace=sweep_grace,
            cni_check=cni_check,
            exec_allow_root=exec_allow_root,
            docker_enabled=docker_enabled,
            raw_exec_enabled=raw_exec_enabled,
            host_volumes=host_volumes,
            advertise_address=advertise_address,
        )
        docker = self.docker if docker_enabled else None
        core = build_core(
            settings, store, cni, Faults.parse(faults), docker=docker, vault=vault, former_cni=former
        )
        agent = AgentUnderTest(core, start_core(core, restore_timeout=120))
        agent.settle()  # what the restore set off the loop (a recovery's stops) has finished
        return agent

    # -- observations -------------------------------------------------------------------------
    def containers(self, alloc_id: str | None = None) -> list[Any]:
        label = f"{LABEL_ALLOC}={alloc_id}" if alloc_id else f"{LABEL_MANAGED}=true"
        return list(
            self.docker.client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
        )

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
        import docker.errors

        from agent.allocdir.fsutil import unmount_below
        from agent.drivers.cgroups import Cgroups
        from agent.network import netns

        for c in self.containers():
            with contextlib.suppress(docker.errors.NotFound):  # gone meanwhile: its agent removed it
                c.remove(force=True)
        for name in Cgroups.names():  # exec tasks of this lab's allocs (the agent leaves tasks running)
            if (self.data_dir / "alloc" / name.rsplit(".", 1)[0]).exists():
                Cgroups(name).kill_all()
        from agent.runner.logmonhook import HOST_LOGMON

        allocs = self.data_dir / "alloc"
        for alloc_dir in allocs.iterdir() if allocs.is_dir() else ():  # their logmons go on too
            HOST_LOGMON.stop_all(alloc_dir)
        prefixes = [lay.netns_prefix for lay in layout.recognised()]
        for name in netns.list_names():
            alloc = netns_owner(name, prefixes)
            if alloc is not None and (self.data_dir / "alloc" / alloc).exists():
                netns.delete(name)
        unmount_below(self.root)
        for c in iptables.list_cni_chains():
            if c.network == NETWORK:
                iptables.remove_chain(c.table, c.name)
        subprocess.run(["ip", "link", "del", BRIDGE], capture_output=True, check=False)
        shutil.rmtree(self.root, ignore_errors=True)


class Daemon:
    def __init__(
        self,
        lab: AgentLab,
        ca: TestCA,
        root: Path,
        *,
        vault: dict[str, str] | None = None,
        faults: str = "",
        chroot_env: dict[str, str] | None = None,
    ) -> None:
        self.faults = faults
        srv = ca.issue("bench.agent.fieldlab", server=True)
        op = ca.issue("controller.operator.fieldlab", server=False)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.config = root / "config.json"
        self.config.write_text(
            json.dumps(
                {
                    "node_name": "bench",
                    "data_dir": str(lab.data_dir),
                    "bind_address": "127.0.0.1",
                    "port": self.port,
                    "tls": {"cert_file": str(srv.cert), "key_file": str(srv.key), "ca_file": str(ca.ca_file)},
                    "cni_conf_dir": str(lab.root),
                    "cni_network": NETWORK,
                    "cni_bridge": BRIDGE,
                    "log_level": "INFO",
                    **({"vault": vault} if vault else {}),
                    **({"chroot_env": chroot_env} if chroot_env else {}),
                }
            )
        )
        self.api = ApiClient(f"https://127.0.0.1:{self.port}", str(ca.ca_file), str(op.cert), str(op.key))
        self.log = root / "agent.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        t0 = time.monotonic()
        with self.log.open("ab") as fh:
            self.proc = subprocess.Popen(
                [str(Path(sys.executable).parent / "fieldlab-agent"), "--config", str(self.config), "run"],
                stdout=fh,
                stderr=fh,
                env={**os.environ, "FIELDLAB_AGENT_FAULTS": self.faults},
            )

        def healthy() -> tuple[bool | None, str]:
            assert self.proc is not None
            if self.proc.poll() is not None:
                raise RuntimeError(f"agent exited {self.proc.returncode}; see {self.log}")
            try:
                self.api.request("GET", "/v1/jobs")  # Nomad's routes are served once the core runs
                return True, "up"
            except Exception as exc:
                return None, str(exc)

        wait_until(healthy, timeout=300, what="agent API", interval=0.1)
        return time.monotonic() - t0

    def metric(self, name: str) -> float:
        import ssl
        import urllib.request

        ctx = ssl.create_default_context(cafile=self.api.ca_file)
        ctx.load_cert_chain(self.api.cert_file, self.api.key_file)
        url = f"{self.api.address}/v1/metrics?format=prometheus"
        with urllib.request.urlopen(url, context=ctx, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        return float("nan")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)

    def kill(self) -> None:
        """SIGKILL: the agent dies wherever it is; its tasks keep running."""
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


# -- fixtures a root test module imports (`from tests.agent_lab import images, lab`) ----------------
@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> None:
    """The lab's workload images built once per module (none when the host is not ready)."""
    if why_not_ready() is None:
        build_workload_images(tmp_path_factory.mktemp("images"))


@pytest.fixture
def lab(images: None, tmp_path: Path) -> Iterator[AgentLab]:
    """A fresh AgentLab under tmp_path, cleaned up after; skipped with the reason when not ready."""
    reason = why_not_ready()
    if reason:
        pytest.skip(reason)
    agent_lab = AgentLab(tmp_path / "agentlab")
    yield agent_lab
    agent_lab.cleanup()
