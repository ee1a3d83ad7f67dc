"""A hostile workload: jobs that nobody here wrote (they come from field reports) try each way out
of their task, and the node must not notice.

Narrative: the node's own files (the agent's config, AppRole credentials and TLS key, and a canary
file of the test's) are fingerprinted. Then workloads try, one after another: to make the agent
(root) write through a symlink planted at a template's temp name or destination, to block it with a
FIFO at a destination, to read host files through a template's `source` or a Vault path outside the
template sandbox, to use Vault paths outside their job's policy, to call the agent's API with a
certificate of their own, and to stall the API with idle and slow connections; an exec task tries to
read the agent's files and to write to the system; an artifact's archive tries to write past its
destination and to plant a link (test_hostile_files.py). Throughout, the agent keeps answering the
operator; afterwards every fingerprinted file is unchanged and the agent's events name each refusal.
"""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from agent.api.client import ApiClient
from agent.errors import AgentError
from e2e.harness import history
from e2e.harness.checkers import FileSeen, unchanged_problems
from e2e.harness.cluster import AGENT_DATA_DIR, AGENT_PORT, Agent, Cluster
from e2e.harness.faults import AgentRestart, injected
from e2e.harness.hostile import CANARY, alloc_events, fingerprint
from e2e.harness.jobs import PKI_ISSUE, running_job
from e2e.harness.remote import Remote
from e2e.harness.waits import wait_until

# The agent's own files, credentials and config are what these workloads attack.
pytestmark = [pytest.mark.e2e, pytest.mark.agent_own]

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
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
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
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
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
cat {data_dir}/server/keystore/*.pem || echo "keystore: unreadable"
echo "token=$(head -c 12 /secrets/nomad_token || echo none)"
echo owned > /usr/owned || echo "usr: read-only"
echo "procs=$(ls /proc | grep -c '^[0-9]')"
echo done
exec sleep 3600
EOS
        ]
      }}
      identity {{
        file = true
      }}
    }}
  }}
}}
"""


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
            failed = [m for t, m in alloc_events(agent, job.alloc_id) if t == "Template Failed"]
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
    after = fingerprint(node)
    problems = history.check("host files unchanged", unchanged_problems(node.name, canary, after))
    assert not problems, problems


@pytest.mark.parametrize("attempt", sorted(REFUSED_AT_SUBMISSION))
def test_template_reads_outside_the_sandbox_are_refused_at_submission(cluster: Cluster, attempt: str) -> None:
    agent = cluster.agent(cluster.clients[0])
    job, template = REFUSED_AT_SUBMISSION[attempt]
    spec = SLEEPER_JOB.format(job=job, blocks=template)
    before = agent.jobs()
    with pytest.raises(AgentError) as refused:
        agent.run_job(spec, f"hostile: {attempt}")
    msg = str(refused.value)
    assert "400" in msg and "template[0]" in msg, msg
    assert agent.jobs() == before, "a refused job must store nothing"


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
        events = alloc_events(agent, allocs[0])
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
            api.request("POST", "/v1/jobs/parse", {"JobHCL": 'job "x" {}'})
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
    # its own workload identity it reads (owned by its user); the agent's signing key it cannot
    assert "token=eyJ" in out, f"the task cannot read its own secrets/nomad_token: {out}"
    node.run(f"ls {AGENT_DATA_DIR}/server/keystore/*.pem")  # the key is there to be tried
    assert "keystore: unreadable" in out and "PRIVATE KEY" not in out, out
    procs = int(out.split("procs=")[1].split()[0])
    assert procs < 10, f"the exec task sees {procs} processes: not in a pid namespace of its own"
    problems = unchanged_problems(node.name, canary, fingerprint(node))
    assert not problems, problems


# --- round two (issue 32): the task's environment, its files, and a batch job's end ------------------
# A preload library that appends the euid of each process that loads it to `marks` beside itself.
# Built on the controller (the lab's nodes have no compiler); the task could have written it to its
# alloc/ dir itself, the test puts it there for it.
PRELOAD_LIBRARY = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <unistd.h>
__attribute__((constructor)) static void loaded(void) {
    Dl_info info;
    char dir[4096], path[4200], line[64];
    if (!dladdr((void *)loaded, &info) || !info.dli_fname) return;
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    snprintf(path, sizeof path, "%s/marks", dirname(dir));
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0666);
    if (fd < 0) return;
    int n = snprintf(line, sizeof line, "uid %d\n", (int)geteuid());
    if (n > 0) (void)!write(fd, line, (size_t)n);
    close(fd);
}
"""
# The task rewrites its rendered env file (local/ is its own) to name the library by its host path,
# and makes itself restart: an agent that re-read the file at the restart would hand LD_PRELOAD to its
# own root processes outside the chroot. Its jobspec env names the library by the chroot's path: the
# control, loaded by the task itself as nobody.
PRELOAD_JOB = """
job "hostile-preload" {{
  group "g" {{
    restart {{
      attempts = 5
      delay    = "1s"
      interval = "5m"
      mode     = "fail"
    }}
    task "t" {{
      driver = "exec"
      config {{
        command = "/bin/sh"
        args    = ["-c", <<EOS
if [ -e /alloc/restarted ]; then env > /local/env-after; exec sleep 3600; fi
until [ -e /alloc/preload.so ]; do sleep 0.2; done
rm -f /local/app.env
lib="{data_dir}/alloc/$NOMAD_ALLOC_ID/alloc/preload.so"
printf 'LD_PRELOAD=%s:/alloc/preload.so\\n' "$lib" > /local/app.env
touch /alloc/restarted
exit 1
EOS
        ]
      }}
      env {{
        LD_PRELOAD = "/alloc/preload.so"
      }}
      template {{
        data        = "GREETING=hello"
        destination = "local/app.env"
        env         = true
      }}
      resources {{
        memory = 64
      }}
    }}
  }}
}}
"""
NOBODY = 65534


def _preload_library(tmp_path: Path) -> bytes:
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler on the controller to build the preload library")
    source, lib = tmp_path / "preload.c", tmp_path / "preload.so"
    source.write_text(PRELOAD_LIBRARY)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(source), "-ldl"], check=True)
    return lib.read_bytes()


def test_a_tasks_preload_library_never_runs_as_root(cluster: Cluster, tmp_path: Path) -> None:
    """Issue 32: an exec task that rewrote its env template and restarted got its LD_PRELOAD loaded
    by the agent's root setup shell outside the chroot."""
    node = cluster.clients[0]
    agent = cluster.agent(node)
    library = _preload_library(tmp_path)
    with running_job(agent, PRELOAD_JOB.format(data_dir=AGENT_DATA_DIR), "hostile-preload") as job:
        shared = f"{AGENT_DATA_DIR}/alloc/{job.alloc_id}/alloc"
        node.put(f"{shared}/preload.so", library, mode=0o755)

        def restarted() -> tuple[str | None, str]:
            env = node.run(f"cat {AGENT_DATA_DIR}/alloc/{job.alloc_id}/t/local/env-after", check=False)
            return (env.stdout if env.rc == 0 and env.stdout else None), "no env-after yet"

        env_after = wait_until(restarted, timeout=60, what=f"{node.name}: hostile-preload restarted")
        marks = node.run(f"cat {shared}/marks", check=False).stdout.split()
        uids = [int(m) for m in marks[1::2]]
    history.record(history.NOTE, "preload library loads (euid)", node=node.name, uids=uids)
    assert NOBODY in uids, f"the control: the library never loaded in the task: {uids}"
    assert 0 not in uids, f"the task's preload library ran as root on the node: {uids}"
    env = dict(line.split("=", 1) for line in env_after.splitlines() if "=" in line)
    assert env.get("LD_PRELOAD") == "/alloc/preload.so", "the restart took the task's rewritten env file"
    assert env.get("GREETING") == "hello", "the rendered env template's values are gone"


TOKEN_TRAPS = {
    "fifo": "rm -f /secrets/vault_token && mkfifo /secrets/vault_token",
    "link": "rm -f /secrets/vault_token && ln -s /etc/fieldlab-agent/approle.json /secrets/vault_token",
}
TOKEN_TRAP_JOB = """
job "hostile-token-{kind}" {{
  group "g" {{
    task "t" {{
      driver = "docker"
      config {{
        image   = "fieldlab/busybox:latest"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "/bin/sh"
        args    = ["-c", <<EOS
until [ -s /secrets/vault_token ]; do sleep 0.2; done
if [ ! -e /local/planted ]; then {plant}; touch /local/planted; fi
exec sleep 3600
EOS
        ]
      }}
      vault {{
        policies = ["{policy}"]
      }}
    }}
  }}
}}
"""


@pytest.mark.parametrize("kind", sorted(TOKEN_TRAPS))
def test_a_trapped_token_file_never_keeps_the_agent_down(cluster: Cluster, kind: str) -> None:
    """Issue 32: after a restart the agent read secrets/vault_token with a plain read: a FIFO there
    hung its restore before the API started (and systemd's retries hung the same way), a link made
    it read a host file as the token. It must come back, and give the task a real token file. The
    task plants its trap once (a restarted task planting it again would hide the new token file
    from the check, as it did when the agent restored fast enough for the task to restart first)."""
    node = cluster.clients[0]
    agent = cluster.agent(node)
    spec = TOKEN_TRAP_JOB.format(kind=kind, plant=TOKEN_TRAPS[kind], policy=HOSTILE_POLICY)
    with running_job(agent, spec, f"hostile-token-{kind}") as job:
        task_dir = f"{AGENT_DATA_DIR}/alloc/{job.alloc_id}/t"
        wait_until(
            lambda: (
                True if node.run(f"test -e {task_dir}/local/planted", check=False).rc == 0 else None,
                "",
            ),
            timeout=60,
            what=f"{node.name}: the task planted a {kind} at its token file",
        )
        restart = AgentRestart(cluster, node, signal="SIGTERM")
        with injected(restart):
            pass  # the heal waits for the agent to answer healthy, its restore done
        history.measure(
            f"agent restart over a {kind} token file: kill to restore done", restart.restore_seconds
        )

        def token_again() -> tuple[bool | None, str]:
            token = f"{task_dir}/secrets/vault_token"
            probe = node.run(f"test -f {token} && ! test -L {token}", check=False)
            return (True if probe.rc == 0 else None), "no regular token file yet"

        wait_until(token_again, timeout=60, what=f"{node.name}: a new token file in place of the {kind}")
        assert agent.alloc(job.alloc_id)["status"] == "running"


BATCH_JOB = """
job "hostile-batch" {
  type = "batch"
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo done"]
      }
    }
  }
}
"""
BATCH_SETTLED = 30.0  # past Nomad's restart delay (15 s): a restart would have shown by then


def test_a_batch_task_that_exits_0_is_complete_not_restarted(cluster: Cluster) -> None:
    """Issue 32: a batch exec task exiting 0 was restarted three times, failed and replaced, forever
    (and a task that ended at once was taken for a failed isolation setup)."""
    agent = cluster.agent(cluster.clients[0])
    allocs = agent.run_job(BATCH_JOB, "hostile: batch exit 0")
    try:

        def complete() -> tuple[dict[str, Any] | None, str]:
            a = agent.alloc(allocs[0])
            return (a if a["status"] == "complete" else None), str(a["status"])

        wait_until(complete, timeout=60, what="hostile-batch complete")
        settled_at = time.monotonic() + BATCH_SETTLED

        def stays_complete() -> tuple[bool | None, str]:
            a = agent.alloc(allocs[0])
            assert a["status"] == "complete" and a["tasks"]["t"]["restarts"] == 0, a
            # Allocs of earlier runs of the job stay listed, stopped, until GC (as Nomad keeps them)
            others = [
                x
                for x in agent.allocs()
                if x.get("job") == "hostile-batch" and x["id"] != allocs[0] and x.get("desired") != "stop"
            ]
            assert not others, f"a complete batch alloc was replaced: {others}"
            return (True if time.monotonic() >= settled_at else None), "complete, not replaced"

        wait_until(
            stays_complete, timeout=BATCH_SETTLED + 30, interval=2.0, what="hostile-batch stays complete"
        )
        events = alloc_events(agent, allocs[0])
        assert not [m for t, m in events if t in ("Restarting", "Driver Failure", "Setup Failure")], events
    finally:
        agent.stop_job("hostile-batch")


RAW_EXEC_JOB = """
job "hostile-raw" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "id > /etc/owned-by-a-field-jobspec; sleep 3600"]
      }
    }
  }
}
"""


def test_a_raw_exec_jobspec_is_refused_unless_the_lab_trusts_its_jobspecs(cluster: Cluster) -> None:
    """Issue 32: the lab enabled raw_exec everywhere, so any field jobspec run in it was root on a node
    with all capabilities. Off unless the lab was made with --raw-exec."""
    if cluster.raw_exec:
        pytest.skip(f"lab {cluster.name} was made with --raw-exec (trusted jobspecs only)")
    node = cluster.clients[0]
    agent = cluster.agent(node)
    before = agent.jobs()
    with pytest.raises(AgentError, match="raw_exec is disabled"):
        agent.run_job(RAW_EXEC_JOB, "hostile: raw_exec")
    assert agent.jobs() == before, "a refused job must store nothing"
    assert node.run("test -e /etc/owned-by-a-field-jobspec", check=False).rc != 0


def test_a_ten_year_shutdown_delay_is_refused_at_submission(cluster: Cluster) -> None:
    """Issue 51: `shutdown_delay = "87600h"` made a stop sleep ten years (the task outlived `job
    stop`, GC and purge waited behind it). Above the client's max_shutdown_delay it is refused."""
    agent = cluster.agent(cluster.clients[0])
    spec = SLEEPER_JOB.format(job="hostile-shutdown-delay", blocks='      shutdown_delay = "87600h"\n')
    before = agent.jobs()
    with pytest.raises(AgentError) as refused:
        agent.run_job(spec, "hostile: shutdown_delay 87600h")
    msg = str(refused.value)
    assert "400" in msg and "task.t.shutdown_delay: 87600h" in msg and "max_shutdown_delay" in msg, msg
    assert agent.jobs() == before, "a refused job must store nothing"


# (a|a)*b backtracks exponentially under Python's re (43.9 s at 28 a's, doubling per character);
# Go's regexp, RE2, is linear. Parsed at submission: the agent's API must answer throughout.
REGEX_BOMB_JOB = SLEEPER_JOB.format(
    job="hostile-regex",
    blocks='      env {\n        BOMB = length(regexall("(a|a)*b", "' + "a" * 40 + 'c"))\n      }\n',
)
# A 121-byte template whose `env` calls ask for 16 MiB names: the agent held 238 MB and stalled
# its loop 2.3 s serving them, outside the template's own budget.
ENV_BOMB = (
    '{{ $s := "x" }}{{ range loop 24 }}{{ $s = print $s $s }}{{ end }}'
    "{{ range $i := loop 9 }}{{ env (print $s $i) }}{{ end }}"
)
BOMB_SECONDS = 30.0  # submission to a settled alloc, generous for CI


def _stop_if_stored(agent: Agent, job: str) -> None:
    """Stop `job` unless the agent refused it at submission (then it stored nothing to stop)."""
    try:
        agent.stop_job(job)
    except AgentError as exc:
        if "404" not in str(exc):
            raise


def _rss_kb(node: Remote) -> int:
    pid = node.out("systemctl show -p MainPID --value fieldlab-agent")
    return int(node.out(f"awk '/^VmRSS/ {{print $2}}' /proc/{pid}/status"))


def test_a_regex_bomb_in_a_jobspec_never_stalls_the_agent(cluster: Cluster) -> None:
    node = cluster.clients[0]
    agent = cluster.agent(node)
    t0 = time.monotonic()
    try:
        allocs = agent.run_job(REGEX_BOMB_JOB, "hostile: regex bomb")
        took = time.monotonic() - t0
        history.measure("submission of a (a|a)*b regex over 40 chars", took, node=node.name)
        assert took < BOMB_SECONDS, f"the submission took {took:.1f}s"
        latency = _health_latency(agent)
        assert latency < 5.0, f"the agent answered health in {latency:.1f}s after the bomb"
        assert allocs, "the job was not placed"
    finally:
        _stop_if_stored(agent, "hostile-regex")


def test_a_template_env_bomb_costs_its_own_budget_not_the_agent(cluster: Cluster) -> None:
    node = cluster.clients[0]
    agent = cluster.agent(node)
    before = _rss_kb(node)
    spec = SLEEPER_JOB.format(job="hostile-env-bomb", blocks=DATA_TEMPLATE.format(text=ENV_BOMB))
    latencies: list[float] = []
    try:
        try:
            allocs = agent.run_job(spec, "hostile: template env bomb")
        except AgentError as exc:  # refused at submission is as good: it never rendered
            refusal = str(exc)
            assert "400" in refusal, refusal
        else:

            def settled() -> tuple[str | None, str]:
                latencies.append(_health_latency(agent))
                kinds = ("Template Failed", "Setup Failure")
                failed = [m for t, m in alloc_events(agent, allocs[0]) if t in kinds]
                return (failed[0] if failed else None), str(agent.alloc(allocs[0])["status"])

            refusal = wait_until(settled, timeout=BOMB_SECONDS, interval=1.0, what="the env bomb refused")
        grown = _rss_kb(node) - before
        history.measure("agent RSS growth under a template env bomb (MB)", grown / 1024, node=node.name)
        history.record(history.NOTE, "template env bomb refused", node=node.name, refusal=refusal)
        assert max(latencies, default=0.0) < 5.0, f"the agent stalled under the env bomb: {latencies}"
        assert grown < 64 * 1024, f"the agent grew by {grown} kB under the env bomb"
    finally:
        _stop_if_stored(agent, "hostile-env-bomb")


OTHER_JOBS_POLICY = "fieldlab-job-probe"  # the probe jobs' policy (pki role): not a hostile-* job's


def test_a_job_cannot_name_another_jobs_vault_policy(cluster: Cluster) -> None:
    """Issue 32: any job could name another job's fieldlab-job-* policy and read what it may."""
    agent = cluster.agent(cluster.clients[0])
    blocks = VAULT_BLOCK.format(policy=OTHER_JOBS_POLICY) + DATA_TEMPLATE.format(
        text='{{ with secret "secret/data/fieldlab/jobs/probe/canary" }}{{ .Data.data.value }}{{ end }}'
    )
    allocs = agent.run_job(SLEEPER_JOB.format(job="hostile-policy", blocks=blocks), "hostile: policy")
    try:

        def settled() -> tuple[dict[str, Any] | None, str]:
            a = agent.alloc(allocs[0])
            return (a if a["status"] != "pending" else None), str(a["status"])

        alloc = wait_until(settled, timeout=60, what="hostile-policy settles")
        events = alloc_events(agent, allocs[0])
        refused = [m for t, m in events if t == "Vault Policy Refused"]
        assert alloc["status"] == "failed" and refused, f"{alloc['status']}: {events}"
        assert OTHER_JOBS_POLICY in refused[0] and "hostile-policy" in refused[0], refused
    finally:
        agent.stop_job("hostile-policy")


# A task with a Vault identity (Nomad 1.7+'s workflow): its vault block names no policy; the agent
# logs it in to the pki role's JWT auth method, whose policy is templated on the job id claim.
WID_BLOCKS = """      identity {
        name = "vault_default"
        aud  = ["vault.io"]
        ttl  = "1h"
      }
      vault {}
"""


def test_a_workload_identity_login_reads_its_own_jobs_paths_and_not_another_jobs(cluster: Cluster) -> None:
    """The JWT login's token reads the shared entry (its policy's) and is denied another job's KV
    entry: the job id claim, signed by the agent, binds what the token may read."""
    agent = cluster.agent(cluster.clients[0])
    attempts = {
        "hostile-wid-own": (
            '{{ with secret "secret/data/fieldlab/shared" }}{{ .Data.data.greeting }}{{ end }}',
            "running",
        ),
        "hostile-wid-steal": (
            '{{ with secret "secret/data/fieldlab/jobs/probe/canary" }}{{ .Data.data.value }}{{ end }}',
            "failed",
        ),
    }
    submitted: list[str] = []
    try:
        for job, (text, want) in attempts.items():
            blocks = WID_BLOCKS + DATA_TEMPLATE.format(text=text)
            (alloc_id,) = agent.run_job(SLEEPER_JOB.format(job=job, blocks=blocks), f"hostile: {job}")
            submitted.append(job)

            def settled(alloc_id: str = alloc_id) -> tuple[dict[str, Any] | None, str]:
                a = agent.alloc(alloc_id)
                return (a if a["status"] != "pending" else None), str(a["status"])

            alloc = wait_until(settled, timeout=60, what=f"{job} settles")
            events = alloc_events(agent, alloc_id)
            logins = [
                m for t, m in events if t == "Vault Token" and "logged in with identity vault_default" in m
            ]
            assert alloc["status"] == want and logins, f"{job}: {alloc['status']}: {events}"
            out = f"{AGENT_DATA_DIR}/alloc/{alloc_id}/t/secrets/out"
            rendered = cluster.clients[0].run(f"cat {out}", check=False)
            if want == "running":
                assert rendered.stdout.strip() == "hello from fieldlab", rendered
            else:
                denied = [
                    m
                    for t, m in events
                    if t in ("Setup Failure", "Template Failed") and "denied" in m.lower()
                ]
                assert denied and rendered.rc != 0, f"{job}: {events}"
    finally:
        for job in submitted:
            agent.stop_job(job)
