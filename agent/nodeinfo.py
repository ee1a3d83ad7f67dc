"""What `GET /v1/node` says of the agent's node beyond its allocs: each driver it runs and whether
that driver's runtime answers (the docker engine is pinged, with a deadline; the process drivers
need nothing that could be down). Runs in an API handler thread, never on the main loop."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

PING_TIMEOUT = 3.0  # seconds the docker engine has to answer


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
