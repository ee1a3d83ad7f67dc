"""The daemon leaves out the SDKs it never uses (agent.command.lean): the docker SDK still loads and builds
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
import agent.command.daemon  # everything the daemon imports
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
    lean_rss, lean_loaded = _run(
        "from agent.command.lean import leave_out_unused_sdks; leave_out_unused_sdks()"
    )
    assert full_loaded and not lean_loaded
    print(f"RSS after importing the daemon: {full_rss} MB, lean {lean_rss} MB (figures: make bench-agent)")


PARSER_PROBE = """
import sys
import agent.command.daemon  # everything the daemon imports
before = [m for m in sys.modules if m.startswith("agent.jobspec.hcl") or m == "agent.jobspec.build"]
from agent.jobspec import parse_jobspec
spec = 'job "j" { group "g" { task "t" {\\n driver = "exec"\\n config { command = "/bin/true" }\\n } } }'
parsed = parse_jobspec(spec, source="probe")
after = "agent.jobspec.hcl" in sys.modules and "agent.jobspec.build" in sys.modules
print(",".join(sorted(before)) or "-", after, parsed.job.id)
"""


def test_the_daemon_loads_the_jobspec_parsers_with_its_first_jobspec_not_at_start() -> None:
    run = subprocess.run([sys.executable, "-c", PARSER_PROBE], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    loaded_at_import, loaded_by_parse, job_id = run.stdout.split()
    assert loaded_at_import == "-", f"the daemon's imports load the parsers: {loaded_at_import}"
    assert (loaded_by_parse, job_id) == ("True", "j")


ARENA_PROBE = """
import ctypes, ctypes.util, os, sys, tempfile, threading
{cap}
def work():
    keep = [bytes(4096) for _ in range(200)]  # above pymalloc's 512 bytes: glibc's malloc
    barrier.wait()
barrier = threading.Barrier(12)
threads = [threading.Thread(target=work) for _ in range(12)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
path = os.path.join(tempfile.mkdtemp(), "info.xml")
f = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, f)
libc.fclose(f)
print(open(path).read().count("<heap nr="))
"""


def _arenas(cap: str) -> int:
    run = subprocess.run(
        [sys.executable, "-c", ARENA_PROBE.format(cap=cap)], capture_output=True, text=True, check=False
    )
    assert run.returncode == 0, run.stderr
    return int(run.stdout)


def test_the_daemon_caps_glibcs_malloc_arenas_before_its_threads_start() -> None:
    """Twelve threads that each allocate through glibc: an arena each (up to 8 per core) without the
    cap, at most two with it, as `fieldlab-agent run` sets it."""
    capped = _arenas("from agent.command.lean import fewer_malloc_arenas; assert fewer_malloc_arenas()")
    uncapped = _arenas("")
    assert capped <= 2 < uncapped, (capped, uncapped)
