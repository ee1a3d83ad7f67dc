"""The daemon leaves out the SDKs it never uses (agent.lean): the docker SDK still loads and builds
a client for a unix socket without paramiko (the memory it saves is a figure of make bench-agent)."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import sys
{lean}
def rss():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) // 1024
import docker
import agent.daemon  # everything the daemon imports
client = docker.DockerClient(base_url="unix:///nonexistent.sock", version="1.43")
print(rss(), "paramiko" in sys.modules and sys.modules["paramiko"] is not None)
"""


def _run(lean: str) -> tuple[int, bool]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(lean=lean)], capture_output=True, text=True, check=True
    ).stdout.split()
    return int(out[0]), out[1] == "True"


def test_the_daemon_process_runs_the_docker_sdk_without_paramiko_and_is_lighter() -> None:
    full_rss, full_loaded = _run("")
    lean_rss, lean_loaded = _run("from agent.lean import leave_out_unused_sdks; leave_out_unused_sdks()")
    assert full_loaded and not lean_loaded
    print(f"RSS after importing the daemon: {full_rss} MB, lean {lean_rss} MB (figures: make bench-agent)")
