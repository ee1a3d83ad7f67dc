"""A hostile workload: jobs that nobody here wrote (they come from field reports) try each way out
of their task, and the node must not notice.

Narrative: the node's own files (the agent's config, AppRole credentials and TLS key, and a canary
file of the test's) are fingerprinted. Then workloads try, one after another: to make the agent
(root) write through a symlink planted at a template's temp name or destination, to block it with a
FIFO at a destination, to read host files through a template's `source` or a Vault path outside the
template sandbox, to use Vault paths outside their job's policy, to call the agent's API with a
certificate of their own, and to stall the API with idle and slow connections; an exec task tries to
read the agent's files and to write to the system. Throughout, the agent keeps answering the
operator; afterwards every fingerprinted file is unchanged and the agent's events name each refusal.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.client import ApiClient
from agent.errors import AgentError
from e2e.harness import history
from e2e.harness.checkers import FileSeen, unchanged_problems
from e2e.harness.cluster import AGENT_DATA_DIR, AGENT_PORT, Agent, Cluster
from e2e.harness.jobs import PKI_ISSUE, running_job
from e2e.harness.probes import observe_files
from e2e.harness.remote import Remote
from e2e.harness.waits import wait_until

pytestmark = pytest.mark.e2e

CANARY = "/etc/fieldlab-canary"
HOST_FILES = [CANARY, "/etc/fieldlab-agent/*.json", "/etc/fieldlab-agent/tls/*"]
HOSTILE_POLICY = "fieldlab-job-hostile"  # the lab's policy for jobs named hostile-* (pki role)
REFUSAL_SEEN = 90.0  # a re-render (TTL 20 s, re-issued at 60-80 %) after the attack, with room
PARKED_CLIENTS = 50
SLOW_CLIENTS = 5

# Two templates share one short-lived secret, so both re-render every 12-16 s. Once the first
# render is there, the task replaces x.txt with a symlink to a host file (or a FIFO), and keeps
# planting symlinks at the temp names an earlier renderer used (.<name>.tmp).
PLANTED = {
    "symlink": "rm -f /local/x.txt && ln -s {canary} /local/x.txt",
    "fifo": "rm -f /local/x.txt && mkfifo /local/x.txt",
}
REFUSAL = {"symlink": "symbolic link", "fifo": "FIFO"}
PLANTING_JOB = """
job "hostile-{kind}" {{
  group "g" {{
    task "t" {{
      driver = "docker"
      config {{
        image   = "fieldlab/busybox:latest"
        command = "/bin/sh"
        args    = ["-c", <<EOS
until [ -s /local/x.txt ]; do sleep 0.2; done
{plant}
echo planted > /local/planted
i=0
while [ $i -lt 600 ]; do
  for n in a x; do ln -sf {canary} /local/.$n.txt.tmp; done
  i=$((i+1)); sleep 0.1
done
exec sleep 3600
EOS
        ]
      }}
      vault {{
        policies = ["{policy}"]
      }}
{templates}    }}
  }}
}}
"""
TEMPLATE = """      template {{
        data        = <<EOT
{{{{ with secret "{pki}" "common_name={cn}" "ttl=20s" }}}}{{{{ .Data.serial_number }}}}{{{{ end }}}}
EOT
        destination = "local/{name}.txt"
        change_mode = "noop"
        splay       = "0s"
      }}
"""

# A sleeping busybox task whose only interesting part is the blocks it adds (a template, a vault block).
SLEEPER_JOB = """
job "{job}" {{
  group "g" {{
    task "t" {{
      driver = "docker"
      config {{
        image   = "fieldlab/busybox:latest"
        command = "sleep"
        args    = ["3600"]
      }}
{blocks}    }}
  }}
}}
"""
SOURCE_TEMPLATE = """      template {{
        source      = "{source}"
        destination = "local/stolen.json"
      }}
"""
DATA_TEMPLATE = """      template {{
        data        = <<EOT
{text}
EOT
        destination = "secrets/out"
      }}
"""
VAULT_BLOCK = """      vault {{
        policies = ["{policy}"]
      }}
"""

# Refused before anything is stored: each names template[0].
REFUSED_AT_SUBMISSION = {
    "source outside the sandbox": (
        "hostile-source",
        SOURCE_TEMPLATE.format(source="/etc/fieldlab-agent/approle.json"),
    ),
    "source escaping with ..": (
        "hostile-source-dots",
        SOURCE_TEMPLATE.format(source="../../../../../etc/fieldlab-agent/approle.json"),
    ),
    "the agent's own token": (
        "hostile-token",
        DATA_TEMPLATE.format(text='{{ with secret "auth/token/lookup-self" }}{{ .Data.id }}{{ end }}'),
    ),
}

# A job whose policy allows hostile-* names and its own KV path asks for another job's.
VICTIM_CN = "pki-victim.service.fieldlab"  # a name of the probe jobs' policy, not of hostile-*
OUTSIDE_POLICY = {
    "a cert for another job's service": (
        f'{{{{ with secret "{PKI_ISSUE}" "common_name={VICTIM_CN}" }}}}'
        "{{ .Data.certificate }}{{ end }}"
    ),
    "another job's KV secret": (
        '{{ with secret "secret/data/fieldlab/jobs/probe/canary" }}{{ .Data.data.value }}{{ end }}'
    ),
}

EXEC_JOB = """
job "hostile-exec" {{
  group "g" {{
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", <<EOS
exec > /local/report 2>&1
echo "uid=$(id -u)"
cat /etc/fieldlab-agent/approle.json || echo "approle: unreadable"
ls {data_dir}/state || echo "state: unreadable"
echo owned > /usr/owned || echo "usr: read-only"
echo "procs=$(ls /proc | grep -c '^[0-9]')"
echo done
exec sleep 3600
EOS
        ]
      }}
    }}
  }}
}}
"""


def _fingerprint(node: Remote) -> list[FileSeen]:
    seen = observe_files(node, HOST_FILES)
    assert any(f.path == CANARY for f in seen), f"{node.name}: canary {CANARY} not seen"
    assert len(seen) >= 3, f"{node.name}: the agent's config files were not seen: {seen}"
    return seen


@pytest.fixture
def canary(cluster: Cluster) -> Iterator[list[FileSeen]]:
    node = cluster.clients[0]
    node.run(f"printf 'fieldlab canary\\n' > {CANARY} && chmod 0644 {CANARY}")
    try:
        yield _fingerprint(node)
    finally:
        node.run(f"rm -f {CANARY}", check=False)


def _events(agent: Agent, alloc_id: str) -> list[tuple[str, str]]:
    return [(str(e["type"]), str(e["message"])) for e in agent.events(alloc_id)]


def _health_latency(agent: Agent) -> float:
    t0 = time.monotonic()
    agent.request("GET", "/v1/agent/health")
    return time.monotonic() - t0


@pytest.mark.parametrize("kind", sorted(PLANTED))
def test_a_planted_link_or_fifo_never_moves_the_agent(
    cluster: Cluster, canary: list[FileSeen], kind: str
) -> None:
    """The agent (root) re-renders into a destination the task replaced with a symlink to a host file
    or a FIFO, with symlinks at the old temp names: it refuses, says so, keeps retrying, answers."""
    node = cluster.clients[0]
    agent = cluster.agent(node)
    cn = f"hostile-{kind}.service.fieldlab"
    templates = "".join(TEMPLATE.format(pki=PKI_ISSUE, cn=cn, name=n) for n in ("a", "x"))
    plant = PLANTED[kind].format(canary=CANARY)
    spec = PLANTING_JOB.format(
        kind=kind, plant=plant, canary=CANARY, policy=HOSTILE_POLICY, templates=templates
    )
    with running_job(agent, spec, f"hostile-{kind}") as job:
        local = f"{AGENT_DATA_DIR}/alloc/{job.alloc_id}/t/local"
        wait_until(
            lambda: (True if node.run(f"test -e {local}/planted", check=False).rc == 0 else None, "not yet"),
            timeout=60,
            what=f"{node.name}: the workload planted its {kind}",
        )
        latencies: list[float] = []

        def refused_twice() -> tuple[list[str] | None, str]:
            latencies.append(_health_latency(agent))  # the agent answers while it renders
            failed = [m for t, m in _events(agent, job.alloc_id) if t == "Template Failed"]
            refused = [m for m in failed if "local/x.txt" in m and REFUSAL[kind] in m]
            # Two refusals: the first, and a retry after it (the template runner did not die).
            return (refused if len(refused) >= 2 else None), f"Template Failed so far: {failed}"

        refusals = wait_until(
            refused_twice, timeout=REFUSAL_SEEN, interval=2.0, what=f"refusals of the {kind}"
        )
        history.record(history.NOTE, f"template refusals ({kind})", node=node.name, events=refusals[:2])
        history.measure(
            f"agent health latency during hostile renders ({kind}, max)", max(latencies), node=node.name
        )
        assert max(latencies) < 5.0, f"the agent stalled while rendering into a {kind}: {latencies}"
        assert node.run(f"test -f {CANARY} && ! test -L {CANARY}", check=False).rc == 0
    after = _fingerprint(node)
    problems = history.check("host files unchanged", unchanged_problems(node.name, canary, after))
    assert not problems, problems


@pytest.mark.parametrize("attempt", sorted(REFUSED_AT_SUBMISSION))
def test_template_reads_outside_the_sandbox_are_refused_at_submission(cluster: Cluster, attempt: str) -> None:
    agent = cluster.agent(cluster.clients[0])
    job, template = REFUSED_AT_SUBMISSION[attempt]
    spec = SLEEPER_JOB.format(job=job, blocks=template)
    before = agent.request("GET", "/v1/jobs")
    with pytest.raises(AgentError) as refused:
        agent.run_job(spec, f"hostile: {attempt}")
    msg = str(refused.value)
    assert "400" in msg and "template[0]" in msg, msg
    assert agent.request("GET", "/v1/jobs") == before, "a refused job must store nothing"


@pytest.mark.parametrize("attempt", sorted(OUTSIDE_POLICY))
def test_vault_paths_outside_the_jobs_policy_are_denied(cluster: Cluster, attempt: str) -> None:
    node = cluster.clients[0]
    agent = cluster.agent(node)
    n = sorted(OUTSIDE_POLICY).index(attempt)
    blocks = VAULT_BLOCK.format(policy=HOSTILE_POLICY) + DATA_TEMPLATE.format(text=OUTSIDE_POLICY[attempt])
    spec = SLEEPER_JOB.format(job=f"hostile-vault-{n}", blocks=blocks)
    allocs = agent.run_job(spec, f"hostile: {attempt}")
    try:

        def settled() -> tuple[dict[str, Any] | None, str]:
            a = agent.alloc(allocs[0])
            return (a if a["status"] != "pending" else None), str(a["status"])

        alloc = wait_until(settled, timeout=60, what=f"hostile-vault-{n} settles")
        events = _events(agent, allocs[0])
        denied = [m for t, m in events if t in ("Setup Failure", "Template Failed") and "denied" in m.lower()]
        assert alloc["status"] == "failed" and denied, f"{attempt}: {alloc['status']}: {events}"
        out = f"{AGENT_DATA_DIR}/alloc/{allocs[0]}/t/secrets/out"
        assert node.run(f"test -s {out}", check=False).rc != 0, f"{attempt}: something was rendered"
    finally:
        agent.stop_job(f"hostile-vault-{n}")


def _issue(cluster: Cluster, role: str, cn: str) -> dict[str, str]:
    init = json.loads((cluster.secrets / "openbao-init.json").read_text())
    req = urllib.request.Request(
        f"{cluster.vault_addr}/v1/pki_int/issue/{role}",
        data=json.dumps({"common_name": cn, "ttl": "5m"}).encode(),
        headers={"X-Vault-Token": init["root_token"]},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=20) as resp:
        return dict(json.load(resp)["data"])


def test_the_api_refuses_a_workloads_own_certificate(cluster: Cluster, tmp_path: Path) -> None:
    node = cluster.clients[0]
    outcomes = {}
    for role in ("fieldlab-workload-client", "fieldlab-workload"):
        cert = _issue(cluster, role, "hostile-api.service.fieldlab")
        crt, key = tmp_path / f"{role}.crt", tmp_path / f"{role}.key"
        crt.write_text(cert["certificate"] + "\n" + "\n".join(cert.get("ca_chain", [])))
        key.write_text(cert["private_key"])
        key.chmod(0o600)
        api = ApiClient(
            f"https://{node.address}:{AGENT_PORT}", str(cluster.secrets / "ca.pem"), str(crt), str(key)
        )
        with pytest.raises(AgentError) as refused:
            api.request("POST", "/v1/jobs", {"jobspec": 'job "x" {}', "source": "hostile"})
        outcomes[role] = str(refused.value)
    history.record(history.NOTE, "API refusals of workload certificates", node=node.name, outcomes=outcomes)
    # A client cert a job may ask for chains to the lab CA, but it is not the operator: 403.
    assert (
        "403" in outcomes["fieldlab-workload-client"]
        and "may not call" in outcomes["fieldlab-workload-client"]
    )
    # A workload's server cert is not a client cert at all: refused before any request is read.
    assert "403" not in outcomes["fieldlab-workload"], outcomes


def test_idle_and_slow_clients_do_not_stop_the_api(cluster: Cluster) -> None:
    node = cluster.clients[0]
    agent = cluster.agent(node)
    parked: list[socket.socket | ssl.SSLSocket] = []
    try:
        for _ in range(PARKED_CLIENTS):  # TCP only: never starts the TLS handshake
            parked.append(socket.create_connection((node.address, AGENT_PORT), timeout=5))
        ctx = ssl.create_default_context(cafile=str(cluster.secrets / "ca.pem"))
        ctx.load_cert_chain(str(cluster.secrets / "operator.crt"), str(cluster.secrets / "operator.key"))
        for _ in range(SLOW_CLIENTS):  # handshake done, then a request head one byte at a time
            raw = socket.create_connection((node.address, AGENT_PORT), timeout=5)
            tls = ctx.wrap_socket(raw, server_hostname=node.address)
            tls.send(b"G")
            parked.append(tls)
        latencies = [_health_latency(agent) for _ in range(10)]
        history.measure(
            f"API latency with {len(parked)} parked clients (max)", max(latencies), node=node.name, target=1.0
        )
        assert max(latencies) < 5.0, f"the API stalled behind parked clients: {latencies}"
    finally:
        for conn in parked:
            conn.close()


def test_an_exec_task_sees_nothing_of_the_agent(cluster: Cluster, canary: list[FileSeen]) -> None:
    node = cluster.clients[0]
    agent = cluster.agent(node)
    with running_job(agent, EXEC_JOB.format(data_dir=AGENT_DATA_DIR), "hostile-exec") as job:
        report = f"{AGENT_DATA_DIR}/alloc/{job.alloc_id}/t/local/report"

        def reported() -> tuple[str | None, str]:
            out = node.run(f"cat {report}", check=False).stdout
            return (out if "done" in out else None), out

        out = wait_until(reported, timeout=60, what=f"{node.name}: the exec task's report")
    approle = node.run("cat /etc/fieldlab-agent/approle.json").stdout
    role_id = json.loads(approle)["role_id"]
    history.record(history.NOTE, "exec task report", node=node.name, report=out)
    assert "uid=65534" in out, f"exec task not run as nobody: {out}"
    assert role_id not in out and "approle: unreadable" in out, out
    assert "state: unreadable" in out and "usr: read-only" in out, out
    procs = int(out.split("procs=")[1].split()[0])
    assert procs < 10, f"the exec task sees {procs} processes: not in a pid namespace of its own"
    problems = unchanged_problems(node.name, canary, _fingerprint(node))
    assert not problems, problems
