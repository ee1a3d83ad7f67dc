"""Checkers: functions over observed state that return what is wrong (an empty list when all is well).

They say exactly what they saw, so a failing suite reads like a diagnosis, not like `False`.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

from e2e.harness.cluster import Cluster
from e2e.harness.remote import Remote, q
from e2e.harness.waits import SYSTEMD_READY

CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap", "firewall")
CNI_CONFLIST = "/etc/cni/net.d/fieldlab.conflist"
BUSYBOX = "fieldlab/busybox:latest"


def systemd_problems(node: Remote) -> list[str]:
    state = node.run(
        f"timeout {int(SYSTEMD_READY)} systemctl is-system-running --wait", check=False
    ).stdout.strip()
    failed = node.out("systemctl --failed --plain --no-legend --no-pager | awk '{print $1}'")
    problems = []
    if state != "running":
        problems.append(f"{node.name}: systemd state is {state!r}, not 'running'")
    if failed:
        problems.append(f"{node.name}: failed units: {failed.split()}")
    return problems


def docker_problems(node: Remote) -> list[str]:
    res = node.run(f"docker run --rm --init {BUSYBOX} sh -c 'echo fieldlab-ok'", check=False, timeout=60)
    if res.rc != 0 or res.stdout.strip() != "fieldlab-ok":
        return [
            f"{node.name}: `docker run {BUSYBOX}` gave rc={res.rc} out={res.stdout.strip()!r} "
            f"err={res.stderr.strip()[-300:]!r}"
        ]
    return []


def cni_problems(node: Remote) -> list[str]:
    problems = []
    res = node.run(f"jq -r '.plugins[].type' {CNI_CONFLIST}", check=False)
    if res.rc != 0:
        return [f"{node.name}: {CNI_CONFLIST} missing or not JSON ({res.stderr.strip()})"]
    types = res.stdout.split()
    if types[:2] != ["loopback", "bridge"] or "portmap" not in types:
        problems.append(f"{node.name}: conflist plugin chain is {types}")
    missing = node.out("for p in " + " ".join(CNI_PLUGINS) + "; do [ -x /usr/lib/cni/$p ] || echo $p; done")
    if missing:
        problems.append(f"{node.name}: CNI plugins missing from /usr/lib/cni: {missing.split()}")
    return problems


def vault_problems(server: Remote) -> list[str]:
    res = server.run("curl -sf http://127.0.0.1:8200/v1/sys/seal-status", check=False)
    if res.rc != 0:
        return [f"{server.name}: OpenBao does not answer on :8200 (curl rc={res.rc})"]
    st = json.loads(res.stdout)
    problems = []
    if not st.get("initialized"):
        problems.append(f"{server.name}: OpenBao is not initialised")
    if st.get("sealed"):
        problems.append(f"{server.name}: OpenBao is sealed ({st.get('progress')}/{st.get('t')} keys given)")
    return problems


def approle_problems(client: Remote, vault_addr: str) -> list[str]:
    """Log in with the node's own AppRole (on the node: the token never leaves it) and probe its policy."""
    login = f"curl -sf -X POST -d @/etc/fieldlab-agent/approle.json {vault_addr}/v1/auth/approle/login"
    probes = {
        "workload": (
            "POST",
            "pki_int/issue/fieldlab-workload",
            '{"common_name":"web.service.fieldlab","ttl":"5m"}',
        ),
        "own_agent": (
            "POST",
            "pki_int/issue/fieldlab-agent",
            f'{{"common_name":"{client.name}.agent.fieldlab"}}',
        ),
        "other_agent": ("POST", "pki_int/issue/fieldlab-agent", '{"common_name":"intruder.agent.fieldlab"}'),
        "sys_mounts": ("GET", "sys/mounts", ""),
        "root_ca": ("POST", "pki/root/generate/internal", '{"common_name":"evil"}'),
    }
    lines = [
        "set -u",
        f"tok=$({login} | jq -r .auth.client_token)",
        '[ -n "$tok" ] && [ "$tok" != null ] || { echo login=failed; exit 0; }',
        "echo login=ok",
    ]
    for name, (method, path, body) in probes.items():
        data = f"-d {q(body)}" if body else ""
        lines.append(
            f"echo {name}=$(curl -s -o /dev/null -w '%{{http_code}}' -X {method} {data} "
            f'-H "X-Vault-Token: $tok" {vault_addr}/v1/{path})'
        )
    script = "\n".join(lines)
    out = client.out(f"bash -c {q(script)}")
    seen = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    want = {"login": "ok", "workload": "200", "own_agent": "200"}
    problems = [
        f"{client.name}: approle {k} gave {seen.get(k)!r}, expected {v!r}"
        for k, v in want.items()
        if seen.get(k) != v
    ]
    for k in ("other_agent", "sys_mounts", "root_ca"):
        if seen.get(k) not in ("403", "400"):
            problems.append(
                f"{client.name}: approle policy allowed {k} (HTTP {seen.get(k)}), expected a refusal"
            )
    return problems


def _agent_get(url: str, secrets: Path, *, with_cert: bool) -> tuple[int, dict[str, object]]:
    ctx = ssl.create_default_context(cafile=str(secrets / "ca.pem"))
    if with_cert:
        ctx.load_cert_chain(str(secrets / "operator.crt"), str(secrets / "operator.key"))
    with urllib.request.urlopen(url, context=ctx, timeout=10) as resp:
        return resp.status, json.loads(resp.read())


def agent_problems(cluster: Cluster, client: Remote) -> list[str]:
    url = f"https://{client.address}:4646/v1/agent/health"
    problems = []
    try:
        status, body = _agent_get(url, cluster.secrets, with_cert=True)
        if status != 200 or body.get("status") != "ok" or body.get("node") != client.name:
            problems.append(f"{client.name}: agent health answered {status} {body}")
        vault = body.get("vault")
        if not isinstance(vault, dict) or not vault.get("authenticated"):
            problems.append(f"{client.name}: agent is not logged in to Vault: {vault}")
    except (OSError, ssl.SSLError, urllib.error.URLError) as exc:
        problems.append(f"{client.name}: agent health over mTLS failed: {exc}")
    try:
        _agent_get(url, cluster.secrets, with_cert=False)
        problems.append(f"{client.name}: agent answered a client that presented no certificate")
    except (OSError, ssl.SSLError, urllib.error.URLError):
        pass  # refused at TLS, as it must be
    return problems


def node_problems(cluster: Cluster, node: Remote) -> list[str]:
    """Everything the smoke suite expects of a node of its role."""
    problems = systemd_problems(node)
    if node in cluster.servers:
        problems += vault_problems(node)
    else:
        problems += docker_problems(node) + cni_problems(node)
        problems += approle_problems(node, cluster.vault_addr) + agent_problems(cluster, node)
    return problems
