"""Workload identity on a real agent (root: the exec driver's chroot as nobody): the task reads its
own token from /secrets and NOMAD_TOKEN, both the one the agent signed, and not the agent's
signing key; the file on the host is nobody's, 0600."""

from __future__ import annotations

import hashlib
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent_lab import AgentLab, task_report, why_not_ready
from tests.test_identity import verify

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

TIMEOUT = 30.0
NOBODY = 65534

JOB = """
job "wid" {
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["-c", <<EOS
echo "file=$(sha256sum < /secrets/nomad_token | cut -c1-64)"
echo "env=$(printf %s "$NOMAD_TOKEN" | sha256sum | cut -c1-64)"
echo "vault=$(head -c 3 /secrets/nomad_vault_default.jwt || echo none)"
cat @KEYSTORE@/*.pem >/dev/null 2>&1 && echo "keystore=LEAK" || echo "keystore=denied"
echo done
exec sleep 600
EOS
        ]
      }
      identity {
        env  = true
        file = true
      }
      identity {
        name = "vault_default"
        aud  = ["vault.io"]
        ttl  = "1h"
        file = true
      }
    }
  }
}
"""


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[AgentLab]:
    lab = AgentLab(tmp_path / "agentlab")
    yield lab
    lab.cleanup()


def test_an_exec_task_reads_its_own_identity_and_not_the_agents_key(lab: AgentLab) -> None:
    agent = lab.start_agent()
    try:
        keystore = lab.data_dir / "server" / "keystore"
        text = JOB.replace("@KEYSTORE@", str(keystore))
        out = agent.core.call(lambda: agent.core.job_registry.submit(text, None, source="test"))
        (alloc,) = out["allocs"]
        agent.settle()
        lines = task_report(lab.data_dir, alloc, "t", TIMEOUT).splitlines()
        report = dict(line.split("=", 1) for line in lines if "=" in line)
        secrets = lab.data_dir / "alloc" / alloc / "t" / "secrets"
        token = (secrets / "nomad_token").read_text()
        digest = hashlib.sha256(token.encode()).hexdigest()
        assert report["file"] == digest and report["env"] == digest, report
        assert report["vault"] == "eyJ", report
        assert report["keystore"] == "denied", report
        assert list(keystore.glob("*.pem")), "the key the task tried to read is there"
        st = (secrets / "nomad_token").stat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (NOBODY, 0o600)
        keyring = agent.core.deps.keyring
        assert keyring is not None
        claims = verify(token, keyring.jwks())
        assert (claims["nomad_job_id"], claims["nomad_task"], claims["nomad_allocation_id"]) == (
            "wid",
            "t",
            alloc,
        )
    finally:
        agent.stop()
