"""python-nomad's own integration suite, pointed at a lab client over mTLS.

python-nomad (Nomad's maintained Python client) ships its tests in its PyPI sdist; upstream runs them
against `nomad agent -dev` with the example job `nomad init` writes, as `example.json`. Here they run
against one lab client's agent instead:

    make python-nomad-suite [LAB=default] [NODE=client1]

1. the sdist of the python-nomad version in the controller venv is downloaded from PyPI and checked
   against its pinned sha256; its `tests/` are unpacked under build/python-nomad-suite/;
2. a venv of its own holds python-nomad and its test dependencies (pinned below), so the project's
   venv is not touched;
3. the fixtures upstream's suite expects (`tests/common.py`, `tests/conftest.py`, which the sdist does
   not ship) are written here, pointing at the node with the lab's operator certificate; the example
   job is `nomad init`'s (group "cache", task "redis", port "db") parsed by the agent itself;
4. pytest runs upstream's files in their order (`--runxfail`, as upstream's run_tests.sh), JUnit XML is
   read back, and each failure is judged: one a one-node client has no part in (ONE_NODE below, with
   the reason) is reported as such; any other failure fails the run.

The suite is upstream's code, run as it is and never copied into this repository.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "python-nomad-suite"
VERSION = "2.1.0"
SDIST_SHA256 = "53e6d9ec6f66b672ae9d6d03591a24be2d8b5450dd7fdbe1003831cb9b77f847"
# upstream's requirements-dev.txt pins (coverage and mkdocs left out: not needed to run the tests)
# the newest Nomad of upstream's CI matrix: the API the agent answers as (upstream's tests skip the calls
# of versions older than this one)
NOMAD_VERSION = "1.9.5"
TEST_DEPS = ("pytest==7.2.0", "mock==4.0.3", "flaky==3.7.0", "responses==0.22.0")

# What a one-node client agent has no part in (a test failing for one of these reasons is reported,
# not counted as a failure). Keyed by upstream's test file, or file::test for one test.
NO_ACL = "the agent has no ACL system (a token is not read): the lab's client certificates are the gate"
NAMESPACES = "namespaces other than default are not served (the agent is one node's default namespace)"
ONE_NODE: dict[str, str] = {
    "test_search.py": "search is a server-side index over the cluster's state",
    "test_operator.py": "the operator endpoints manage the servers' raft peers and autopilot",
    "test_regions.py::test_get_regions": "regions are federated server clusters",
    "test_status.py::test_get_peers": "raft peers are servers",
    "test_agent.py::test_get_members": "serf gossip membership is among servers",
    "test_agent.py::test_force_leave": "serf gossip membership is among servers",
    "test_agent.py::test_join_agent": "serf gossip membership is among servers",
    "test_agent.py::test_get_servers": "a client's server list",
    "test_agent.py::test_update_servers": "a client's server list",
    "test_acl.py": NO_ACL,
    "test_base.py::test_base_get_connnection_not_authorized": NO_ACL,
    "test_sentinel.py": "Sentinel policies are Nomad Enterprise",
    "test_namespace.py": NAMESPACES,
    "test_namespaces.py": NAMESPACES,
}

# What upstream's own set-up gives its tests and a lab client cannot: run_tests.sh starts `nomad agent
# -dev -node pynomad1`, and these tests find the node by that name (the lab's clients are named by
# the inventory). The same calls are made, on the lab's node, by e2e/suites/test_nomad_conformance.py.
DEV_AGENT: dict[str, str] = {
    "test_node.py": "finds its node by the name `nomad agent -dev -node pynomad1` gives it",
    "test_nodes.py::test_dunder_getitem_exist": "finds its node by the name `-node pynomad1` gives it",
    "test_nodes.py::test_dunder_contain_exists": "finds its node by the name `-node pynomad1` gives it",
    # Deployments are served (issue 52); these three take the first or every deployment of the agent
    # to be their example job's, as on upstream's fresh dev agent (a lab that ran other service jobs
    # holds theirs too, as a Nomad cluster would). On a fresh lab they pass.
    "test_deployments.py::test_dunder_len": "counts every deployment: upstream's fresh dev agent has one",
    "test_deployment.py::test_fail_deployment": "fails the first deployment listed, upstream's running "
    "example's on its fresh dev agent: here an earlier run's, terminal (Nomad refuses that alike)",
    "test_deployment.py::test_get_deployment_allocations": "reads the allocs of the first deployment "
    "listed, upstream's example's on its fresh dev agent: here an older one's, gone",
}

# Upstream's tests that test python-nomad itself, not the agent: a test whose `responses` mock was
# written for plain http (the lab is https) never reaches any agent; these two fail on Nomad too.
MOCKED = "Connection refused by Responses"  # in the failure of a mocked call the mock did not match
UPSTREAM: dict[str, str] = {
    "test_job.py::test_delete_job_with_invalid_purge_param_raises": "expects `purge=True` refused: "
    "Nomad's agent parses it as strconv.ParseBool does and purges (agent/nomadapi/jobwrites.py)",
    "test_job.py::test_delete_job_with_purge": "runs after the test above purged the job: Nomad answers "
    "404 job not found too",
    "test_job.py::test_dispatch_job_idempotency": "registers example-batch's job under the path of "
    "example-batch-idempotent: Nomad's agent refuses that with 400 too (Job ID does not match name)",
    "test_base.py::test_use_custom_user_agent": "python-nomad 2.1.0 sets the User-Agent into headers=None "
    "(a TypeError before any request is sent)",
}

# A literal IPv4 address in a test's source: upstream's connection-error tests send requests to an
# address outside the lab (162.16.10.102), which no lab run may do. Every test naming one is deselected
# before pytest runs, whatever upstream's version.
IPV4 = re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b")

# `nomad init`'s example job (group "cache", task "redis", port "db"), with the lab's image in place of
# redis:7: the lab has no registry yet and the agent does not pull (issue 52), so the image is one
# every lab client has; the task stays up through the signals upstream's tests send (HUP, USR1).
EXAMPLE_HCL = """
job "example" {
  group "cache" {
    network {
      port "db" {
        to = 6379
      }
    }
    task "redis" {
      driver = "docker"
      config {
        image          = "fieldlab/busybox:latest"
        command        = "sh"
        args           = ["-c", "trap 'echo hup' HUP; trap 'echo usr1' USR1; while true; do sleep 1; done"]
        ports          = ["db"]
        auth_soft_fail = true
      }
      identity {
        env  = true
        file = true
      }
      resources {
        cpu    = 500
        memory = 256
      }
    }
  }
}
"""

# upstream's dispatch tests register example_batch_parameterized.json (in its repository, not its sdist):
# a parameterized batch job "example-batch" requiring the meta key "time"
BATCH_HCL = """
job "example-batch" {
  type = "batch"
  parameterized {
    payload       = "optional"
    meta_required = ["time"]
  }
  group "example-task-group" {
    task "example-task" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:latest"
        command = "sleep"
        args    = ["${NOMAD_META_time}"]
      }
      resources {
        cpu    = 100
        memory = 200
      }
    }
  }
}
"""

CONFTEST = '''"""Written by fieldlab's scripts/python_nomad_suite.py: upstream's fixtures, mTLS to the lab."""
import os

import nomad
import pytest

import tests.common as common


def _client(**kw):
    return nomad.Nomad(host=common.IP, port=common.NOMAD_PORT, secure=True, timeout=30,
                       verify=os.environ["FIELDLAB_SUITE_CACERT"],
                       cert=(os.environ["FIELDLAB_SUITE_CLIENT_CERT"],
                             os.environ["FIELDLAB_SUITE_CLIENT_KEY"]),
                       token=common.NOMAD_TOKEN, **kw)


@pytest.fixture
def nomad_setup():
    return _client()


@pytest.fixture
def nomad_setup_with_namespace():
    return _client(namespace=common.NOMAD_NAMESPACE)
'''

COMMON = '''"""Written by fieldlab's scripts/python_nomad_suite.py (upstream's tests read these names)."""
import os

IP = os.environ["NOMAD_IP"]
NOMAD_PORT = os.environ["NOMAD_PORT"]
NOMAD_TOKEN = os.environ.get("NOMAD_TOKEN")
NOMAD_NAMESPACE = "admin"
'''


def log(msg: str) -> None:
    print(f"[python-nomad-suite {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def lab_env(lab: str, node: str) -> dict[str, str]:
    out = subprocess.run(
        [str(ROOT / ".venv/bin/fieldlab"), "lab", "env", node, "--lab", lab],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    env = {}
    for line in out.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export ") :].partition("=")
            env[key] = value.strip("'")
    return env


def fetch_sdist() -> Path:
    sdist = WORK / f"python_nomad-{VERSION}.tar.gz"
    if not sdist.exists():
        WORK.mkdir(parents=True, exist_ok=True)
        log(f"downloading python-nomad {VERSION}'s sdist from PyPI")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
             "-d", str(WORK), f"python-nomad=={VERSION}"],
            check=True,
        )  # fmt: skip
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        sdist.unlink()
        raise SystemExit(f"{sdist.name}: sha256 {digest}, pinned {SDIST_SHA256}: refused")
    return sdist


def prepare(sdist: Path) -> tuple[Path, Path]:
    suite = WORK / "suite"
    shutil.rmtree(suite, ignore_errors=True)
    suite.mkdir(parents=True)
    prefix = f"python_nomad-{VERSION}/tests/"
    with tarfile.open(sdist) as tar:
        for member in tar.getmembers():
            if member.isreg() and member.name.startswith(prefix) and "/" not in member.name[len(prefix) :]:
                data = tar.extractfile(member)
                assert data is not None
                (suite / "tests").mkdir(exist_ok=True)
                (suite / "tests" / Path(member.name).name).write_bytes(data.read())
    (suite / "tests" / "__init__.py").touch()
    (suite / "tests" / "common.py").write_text(COMMON)
    (suite / "tests" / "conftest.py").write_text(CONFTEST)
    (suite / "pytest.ini").write_text("[pytest]\n")  # the suite's own rootdir: not this project's pyproject
    venv = WORK / "venv"
    stamp = venv / f".installed-{VERSION}"
    if not stamp.exists():
        log("creating the suite's venv (python-nomad and upstream's test dependencies)")
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        pip = [str(venv / "bin/pip"), "install", "--quiet"]
        subprocess.run([*pip, str(sdist), *TEST_DEPS], check=True)
        stamp.touch()
    return suite, venv


def off_lab_tests(tests: Path) -> dict[str, str]:
    """{pytest node id: the addresses it names} of upstream's tests whose source names an IPv4 address."""
    found: dict[str, str] = {}
    for path in sorted(tests.glob("test_*.py")):
        source = path.read_text()
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_"):
                addresses = sorted(set(IPV4.findall(ast.get_source_segment(source, node) or "")))
                if addresses:
                    found[f"tests/{path.name}::{node.name}"] = ", ".join(addresses)
    return found


def write_examples(suite: Path, env: dict[str, str]) -> None:
    """The job files upstream's tests read: `nomad init`'s example job, as HCL and as `nomad job run
    -output` writes it (the agent parses the HCL), and the parameterized batch job."""
    import nomad  # the controller venv's python-nomad

    n = nomad.Nomad(
        address=env["NOMAD_ADDR"],
        secure=True,
        verify=env["NOMAD_CACERT"],
        cert=(env["NOMAD_CLIENT_CERT"], env["NOMAD_CLIENT_KEY"]),
        timeout=30,
    )
    (suite / "example.nomad").write_text(EXAMPLE_HCL)  # `nomad init example.nomad`
    (suite / "example.json").write_text(json.dumps({"Job": n.jobs.parse(EXAMPLE_HCL)}, indent=2))
    batch = {"Job": n.jobs.parse(BATCH_HCL)}
    (suite / "example_batch_parameterized.json").write_text(json.dumps(batch, indent=2))
    for stale in n.jobs.get_jobs():  # a run before this one may have left its jobs
        n.job.deregister_job(stale["ID"], purge=True)


def judge(junit: Path) -> dict[str, list[tuple[str, str]]]:
    """Each test of a JUnit report by outcome: passed, skipped, one-node (a failure of what a one-node
    client has no part in), dev-agent (of upstream's own set-up), mocked and upstream (python-nomad's
    own tests of itself), failed; a test run more than once (upstream's flaky reruns) counts once, by
    its last run."""
    last: dict[str, ET.Element] = {}
    for case in ET.parse(junit).iter("testcase"):  # noqa: S314 (written by the pytest run above)
        file = case.get("classname", "").rsplit(".", 1)[-1] + ".py"
        last[f"{file}::{case.get('name')}"] = case
    kinds = ("passed", "skipped", "one-node", "dev-agent", "mocked", "upstream", "failed")
    out: dict[str, list[tuple[str, str]]] = {k: [] for k in kinds}
    for name, case in last.items():
        file = name.split("::", 1)[0]
        if case.find("skipped") is not None:
            out["skipped"].append((name, ""))
        elif case.find("failure") is None and case.find("error") is None:
            out["passed"].append((name, ""))
        elif reason := ONE_NODE.get(name) or ONE_NODE.get(file):
            out["one-node"].append((name, reason))
        elif reason := DEV_AGENT.get(name) or DEV_AGENT.get(file):
            out["dev-agent"].append((name, reason))
        elif reason := UPSTREAM.get(name):
            out["upstream"].append((name, reason))
        else:
            failure = case.find("failure")
            if failure is None:
                failure = case.find("error")
            message = (failure.get("message") or "") if failure is not None else ""
            if MOCKED in message:
                out["mocked"].append((name, "a `responses` mock for http://: never reaches the agent"))
            else:
                out["failed"].append((name, message[:200]))
    return out


def main() -> int:
    try:
        return run()
    except subprocess.CalledProcessError as exc:
        log(f"failed: {' '.join(map(str, exc.cmd))} exited with {exc.returncode}")
        return 2


def run() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lab", default=os.environ.get("LAB", "default"))
    ap.add_argument("--node", default=os.environ.get("NODE", "client1"))
    ap.add_argument("-k", default="", help="pytest -k for upstream's tests")
    ap.add_argument(
        "--nomad-version",
        default=NOMAD_VERSION,
        help="the Nomad version upstream's tests gate their calls on (run_tests.sh reads `nomad --version`)",
    )
    args = ap.parse_args()
    started = time.monotonic()
    env = lab_env(args.lab, args.node)
    suite, venv = prepare(fetch_sdist())
    write_examples(suite, env)
    version = args.nomad_version
    host_port = env["NOMAD_ADDR"].split("://", 1)[1]
    ip, _, port = host_port.rpartition(":")
    # upstream's CI sets no NOMAD_ADDR/NOMAD_CACERT/...: python-nomad would read them in the tests that
    # make a client of their own, so the fixtures get the lab's certificates under names of their own
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("NOMAD_", "FIELDLAB_AGENT_"))}
    run_env |= {
        "NOMAD_IP": ip,
        "NOMAD_PORT": port,
        "NOMAD_VERSION": version,
        "FIELDLAB_SUITE_CACERT": env["NOMAD_CACERT"],
        "FIELDLAB_SUITE_CLIENT_CERT": env["NOMAD_CLIENT_CERT"],
        "FIELDLAB_SUITE_CLIENT_KEY": env["NOMAD_CLIENT_KEY"],
    }
    junit = WORK / "junit.xml"
    junit.unlink(missing_ok=True)
    log(f"upstream's suite against {args.node} ({env['NOMAD_ADDR']}), as Nomad {version}")
    cmd = [str(venv / "bin/pytest"), "-q", "-p", "no:cacheprovider", "--runxfail", "--junitxml", str(junit)]
    off_lab = off_lab_tests(suite / "tests")
    for test, addresses in off_lab.items():
        log(f"not run: {test} sends requests to {addresses}, outside the lab")
    cmd += [f"--deselect={test}" for test in off_lab]
    subprocess.run([*cmd, *(["-k", args.k] if args.k else []), "tests"], cwd=suite, env=run_env, check=False)
    if not junit.exists():
        log("pytest wrote no report: see its output above")
        return 2
    verdicts = judge(junit)
    for kind in ("one-node", "dev-agent", "mocked", "upstream", "failed"):
        for name, why in verdicts[kind]:
            print(f"  {kind:<9} {name}: {why}")
    log(
        f"upstream's suite: {len(verdicts['passed'])} passed, {len(verdicts['failed'])} failed, "
        f"{len(verdicts['one-node'])} one-node (not a client's), {len(verdicts['dev-agent'])} of upstream's "
        f"dev agent, {len(verdicts['mocked'])} mocked, {len(verdicts['upstream'])} upstream's own, "
        f"{len(verdicts['skipped'])} skipped, {len(off_lab)} not run (off the lab); "
        f"done in {time.monotonic() - started:.0f} s"
    )
    return 1 if verdicts["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
