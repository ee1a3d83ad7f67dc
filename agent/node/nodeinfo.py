"""What the agent's node is, as Nomad's client fingerprints it: its ID (kept in the data dir), the
attributes `GET /v1/node/:id` shows and constraints are checked against (agent.decide.placement), and each
driver it runs with whether that driver's runtime answers (the docker engine is pinged, with a deadline;
the process drivers need nothing that could be down; an API handler thread asks, never the main loop)."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from agent import __version__

PING_TIMEOUT = 3.0  # seconds the docker engine has to answer
OS_RELEASE = (Path("/etc/os-release"), Path("/usr/lib/os-release"))
# uname's machine -> Go's GOARCH, Nomad's cpu.arch
GOARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "i386": "386",
    "i686": "386",
    "armv6l": "arm",
    "armv7l": "arm",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


def load_node_id(data_dir: Path) -> str:
    """The node ID from `<data dir>/client/client-id`, made (a random UUID) the first time, as Nomad's
    client keeps its own."""
    path = data_dir / "client" / "client-id"
    try:
        node_id = path.read_text().strip()  # node: the agent's own data dir
        uuid.UUID(node_id)
    except (OSError, ValueError):
        node_id = str(uuid.uuid4())
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        tmp = path.with_name(".client-id.tmp")
        tmp.write_text(node_id + "\n")
        os.replace(tmp, path)
    return node_id


def node_attributes(
    drivers: Iterable[str],
    *,
    uname: os.uname_result | None = None,
    os_release: str | None = None,
    cpu_count: int | None = None,
    memory_bytes: int | None = None,
) -> dict[str, str]:
    """The node's attributes under Nomad's fingerprint names (client/fingerprint: host.go, arch.go,
    cpu.go, memory.go, nomad.go; driver.<name> = "1" for each driver the client runs). Each argument
    left out is read from this host: uname, /etc/os-release (ID and VERSION_ID: gopsutil's platform),
    the CPUs and the memory."""
    u = uname or os.uname()
    release = _os_release(os_release)
    cores = cpu_count if cpu_count is not None else os.cpu_count()
    memory = memory_bytes if memory_bytes is not None else _memory_bytes()
    attributes = {
        "kernel.name": u.sysname.lower(),
        "kernel.version": u.release,
        "kernel.arch": u.machine,
        "cpu.arch": GOARCH.get(u.machine, u.machine),
        "unique.hostname": u.nodename,
        "nomad.version": __version__,
        "os.name": release.get("ID", ""),
        "os.version": release.get("VERSION_ID", ""),
    }
    if cores:
        attributes["cpu.numcores"] = str(cores)
    if memory:
        attributes["memory.totalbytes"] = str(memory)
    attributes |= {f"driver.{name}": "1" for name in drivers}
    return attributes


def _os_release(text: str | None) -> dict[str, str]:
    if text is None:
        for path in OS_RELEASE:
            try:
                text = path.read_text(errors="replace")
                break
            except OSError:
                continue
    out = {}
    for line in (text or "").splitlines():
        key, eq, value = line.strip().partition("=")
        if eq and key and not key.startswith("#"):
            out[key] = value.strip().strip("\"'")
    return out


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 0


def docker_health(driver: object, timeout: float = PING_TIMEOUT) -> tuple[bool, str] | None:
    """(healthy, detail) of the engine behind the agent's docker driver; None for any other driver."""
    from agent.drivers.docker import DockerDriver

    if not isinstance(driver, DockerDriver):
        return None
    result: dict[str, Any] = {}

    def ping() -> None:
        try:
            client = driver.client
            client.ping()
            result["version"] = str(client.version().get("Version", ""))
        except Exception as exc:  # any SDK, HTTP or DriverError: reported as the detail
            result["error"] = str(exc) or type(exc).__name__

    t = threading.Thread(target=ping, name="docker-ping", daemon=True)
    t.start()
    t.join(timeout)
    if t.is_alive():
        return False, f"the docker engine did not answer within {timeout:g}s"
    if "error" in result:
        return False, f"docker engine: {result['error']}"
    return True, f"docker engine {result['version']}".rstrip()


def driver_health(drivers: Mapping[str, object], timeout: float = PING_TIMEOUT) -> dict[str, dict[str, Any]]:
    """{driver name: {"healthy": bool, "detail": str}} for every driver the agent runs."""
    out: dict[str, dict[str, Any]] = {}
    for name, driver in sorted(drivers.items()):
        probed = docker_health(driver, timeout)
        healthy, detail = probed if probed is not None else (True, "runs processes on the node")
        out[name] = {"healthy": healthy, "detail": detail}
    return out


def disk_free_mb(data_dir: Path) -> int | None:
    """MB free in the data dir's file system (Nomad's node disk, its storage fingerprint)."""
    try:
        st = os.statvfs(data_dir)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize // (1024 * 1024)


def storage_attributes(data_dir: Path) -> dict[str, str]:
    """Nomad's storage fingerprint: `unique.storage.volume`, `.bytestotal`, `.bytesfree`."""
    try:
        st = os.statvfs(data_dir)
    except OSError:
        return {}
    return {
        "unique.storage.volume": str(data_dir),
        "unique.storage.bytestotal": str(st.f_blocks * st.f_frsize),
        "unique.storage.bytesfree": str(st.f_bavail * st.f_frsize),
    }
