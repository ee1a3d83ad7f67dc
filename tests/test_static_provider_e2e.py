"""Own hosts, end to end: the static provider with a non-root `ansible_user` (passwordless sudo), a key
of its own per host written with `~` and `$HOME`, driven from a controller user that is not root.

Narrative: a docker-provider lab (`static-src`, one server and one client, not provisioned) stands in
for a user's machines. On each node a user `fieldlab-op` gets passwordless sudo and its own SSH key
(sudo is installed from the controller's package: nodes have no network); the keys live in the home
of a controller user `fieldlab-ctl` created for the test, mode 0600, and the static inventory names
them `~/.ssh/...` and `$HOME/.ssh/...`. As `fieldlab-ctl`, with HOME set to that home:
`fieldlab lab up --provider static` provisions every role through become, `fieldlab lab status` and
`lab ssh` reach the nodes with their own key and user, a few e2e tests run node commands as root
through `sudo -n` (host checks, testinfra, an agent job whose files and the agent's are read as
root, a clean reboot through the static provider), and `fieldlab lab down` ends it. Then, as the
harness: a file written and read back as root through sudo, and a user whose sudo wants a password is
refused by name. Both labs always go down, the controller user is removed.

The venv's interpreter may live under a home the controller user cannot enter (pyenv in /root, mode
0700): then the user's processes get CAP_DAC_READ_SEARCH (read and enter directories, nothing else:
writes, docker, sudo stay out of reach) and the test says so. Runs in `make integration-nightly` (so
in `make nightly`, before its lab; 100-120 s on 2 cores, 80 of them the static lab-up's full
provisioning of the bare nodes, too long for `make test`), or alone: `.venv/bin/pytest
tests/test_static_provider_e2e.py -s`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from e2e.harness.cluster import load_cluster
from e2e.harness.remote import Remote
from e2e.harness.waits import AGENT_HEALTHY, wait_until
from lab.config import LAB_DIR, PROJECT_DIR, LabPaths
from lab.keys import ensure_ssh_key
from lab.providers.base import LabRecord, SudoRefused
from lab.ssh import SshTarget, connect, run
from lab.wheelhouse import build_wheelhouse, source_hash

pytestmark = [
    pytest.mark.root,
    pytest.mark.slow,
    pytest.mark.nightly,  # two minutes of a lab of its own: `make nightly`'s integration phase
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (docker, a controller user)"),
]

SRC_LAB = "static-src"
LAB = "static-e2e"
SUBNET = "10.213.103.0/24"
OP = "fieldlab-op"  # the nodes' non-root user with passwordless sudo
NOPW = "fieldlab-nopw"  # a node user whose sudo wants a password
CTL = "fieldlab-ctl"  # the controller's non-root user
BIN = Path(sys.executable).parent
# The quickest e2e tests that need root on the nodes and run with one client (the suites' invariants
# probe an alloc's network from a second client): host checks over ssh, testinfra, an agent job whose
# files and the agent's are read as root, a reboot by the static provider.
E2E_TESTS = (
    "e2e/suites/test_smoke.py::test_every_node_answers_over_ssh",
    "e2e/suites/test_smoke.py::test_nodes_are_healthy",
    "e2e/suites/test_smoke.py::test_testinfra_sees_the_agent_unit_as_systemd_configured_it",
    "e2e/suites/test_hostile_workload.py::test_an_exec_task_sees_nothing_of_the_agent",
    "e2e/suites/test_smoke.py::test_client_is_healthy_after_reboot[clean]",
)
LAB_UP_TIMEOUT = 900.0
E2E_TIMEOUT = 900.0


@dataclass
class Steps:
    """What ran and how long it took, printed at the end (and on failure)."""

    rows: list[tuple[str, float, str]] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def run(
        self, what: str, argv: list[str], *, env: dict[str, str], timeout: float, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        t0 = time.monotonic()
        proc = subprocess.run(
            argv, env=env, cwd=PROJECT_DIR, capture_output=True, text=True, timeout=timeout, check=False
        )
        secs = time.monotonic() - t0
        self.rows.append((what, secs, f"exit {proc.returncode}"))
        print(f"[static-e2e] {what}: exit {proc.returncode} in {secs:.1f}s", flush=True)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-60:])
            self.failures.append(f"{what} exited {proc.returncode}:\n{' '.join(argv)}\n{tail}")
            if check:
                pytest.fail(f"{self.failures[-1]}\n\n{self}", pytrace=False)
        return proc

    def __str__(self) -> str:
        return "\n".join(f"  {what:<55} {secs:7.1f}s  {detail}" for what, secs, detail in self.rows)


def _needs_read_search(path: Path) -> bool:
    """Whether a user other than root cannot enter some directory on the way to `path`."""
    return any(not p.stat().st_mode & stat.S_IXOTH for p in Path(os.path.realpath(path)).parents)


@dataclass(frozen=True)
class Controller:
    """The non-root controller user: how to run a command as it, with its HOME and FIELDLAB_HOME."""

    uid: int
    gid: int
    home: Path
    read_search: bool

    @property
    def fieldlab_home(self) -> Path:
        return self.home / "fieldlab"

    @property
    def env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),
            "USER": CTL,
            "LOGNAME": CTL,
            "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "FIELDLAB_HOME": str(self.fieldlab_home),
            "PYTHONDONTWRITEBYTECODE": "1",
            "E2E_PROGRESS": "0",
        }

    def argv(self, argv: list[str]) -> list[str]:
        caps = ["--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"] if self.read_search else []
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", *caps, "--", *argv]


@pytest.fixture
def base() -> Iterator[Path]:
    """A directory every user can enter (pytest's tmp_path is root's, 0700)."""
    d = Path(tempfile.mkdtemp(prefix="fieldlab-static-e2e-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def controller(base: Path) -> Iterator[Controller]:
    home = base / "ctl"
    subprocess.run(["userdel", CTL], capture_output=True, check=False)  # a killed run's
    useradd = ["useradd", "--system", "--user-group", "--no-create-home", "--home-dir", str(home)]
    subprocess.run([*useradd, "--shell", "/usr/sbin/nologin", CTL], check=True)
    pw = pwd.getpwnam(CTL)
    home.mkdir(mode=0o700)
    os.chown(home, pw.pw_uid, pw.pw_gid)
    try:
        yield Controller(pw.pw_uid, pw.pw_gid, home, _needs_read_search(Path(sys.executable)))
    finally:
        subprocess.run(["userdel", CTL], capture_output=True, check=False)


def _chown_tree(path: Path, c: Controller) -> None:
    for p in [path, *path.rglob("*")]:
        os.lchown(p, c.uid, c.gid)


def _sudo_deb(dest: Path) -> Path:
    """The controller's sudo package (the same Debian release as the nodes), for nodes with no network."""
    dest.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["apt-get", "download", "sudo"], cwd=dest, capture_output=True, text=True, check=False
    )
    debs = sorted(dest.glob("sudo_*.deb"))
    assert debs, f"apt-get download sudo on the controller failed: {proc.stderr.strip()[-500:]}"
    return debs[0]


def _prepare_node(target: SshTarget, deb: Path, pubkey: str) -> None:
    """As root with the source lab's key: sudo, `fieldlab-op` (passwordless sudo, our key) and
    `fieldlab-nopw` (sudo with a password it does not have, same key)."""
    client = connect(target)
    try:
        client.open_sftp().put(str(deb), "/root/sudo.deb")
    finally:
        client.close()
    script = f"""set -e
command -v sudo >/dev/null || dpkg -i /root/sudo.deb >/dev/null
for u in {OP} {NOPW}; do
  id "$u" >/dev/null 2>&1 || useradd --create-home --shell /bin/bash --password '*' "$u"
  install -d -m 700 -o "$u" -g "$u" /home/$u/.ssh
  printf '%s\\n' '{pubkey}' > /home/$u/.ssh/authorized_keys
  chown "$u:$u" /home/$u/.ssh/authorized_keys && chmod 600 /home/$u/.ssh/authorized_keys
done
printf '%s\\n' '{OP} ALL=(ALL) NOPASSWD: ALL' > /etc/sudoers.d/{OP}
printf '%s\\n' '{NOPW} ALL=(ALL) ALL' > /etc/sudoers.d/{NOPW}
chmod 440 /etc/sudoers.d/{OP} /etc/sudoers.d/{NOPW}
visudo -c >/dev/null
"""
    res = run(target, script, timeout=120.0)
    assert res.rc == 0, f"{target.name}: preparing the node failed: {res.stderr.strip()[-1000:]}"


def _inventory(record: LabRecord) -> str:
    """server1 with a `$HOME` key of its own, the client with the inventory-wide `~` key."""
    server = next(n for n in record.nodes if n.role == "server")
    client = next(n for n in record.nodes if n.role == "client")
    return f"""---
all:
  vars:
    ansible_user: {OP}
    ansible_ssh_private_key_file: ~/.ssh/id-{client.name}
  children:
    servers:
      hosts:
        {server.name}:
          ansible_host: {server.address}
          ansible_ssh_private_key_file: $HOME/.ssh/id-{server.name}
    clients:
      hosts:
        {client.name}:
          ansible_host: {client.address}
"""


def _seed_wheelhouse(paths: LabPaths) -> None:
    """The agent's wheelhouse for the static lab, built as root: pip builds a project in its tree, and
    this checkout is root's (a user's own checkout builds it at lab-up). A lab's current one is copied."""
    digest = source_hash()
    for found in sorted((LAB_DIR / "state").glob(f"*/wheelhouse/{digest}/.complete")):
        shutil.copytree(found.parent, paths.wheelhouse / digest)
        return
    build_wheelhouse(paths.wheelhouse)


def test_own_hosts_with_a_sudo_user_from_a_non_root_controller(
    base: Path, controller: Controller, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = Steps()
    root_env = {**os.environ, "FIELDLAB_HOME": str(base / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    ctl = controller
    fieldlab = str(BIN / "fieldlab")
    if ctl.read_search:
        print(
            f"[static-e2e] {sys.executable} lies under a directory {CTL} cannot enter: its processes get"
            " CAP_DAC_READ_SEARCH (nothing else)",
            flush=True,
        )
    t_all = time.monotonic()
    try:
        steps.run(
            f"root: lab up {SRC_LAB} (docker, not provisioned)",
            [fieldlab, "lab", "up", "--lab", SRC_LAB, "--no-provision", "--subnet", SUBNET, "--clients", "1"],
            env=root_env,
            timeout=LAB_UP_TIMEOUT,
        )
        src_paths = LabPaths(SRC_LAB, home=base / "src")
        src = LabRecord.load(src_paths)
        assert src is not None

        t0 = time.monotonic()
        deb = _sudo_deb(base / "debs")
        ssh_dir = ctl.home / ".ssh"
        for n in src.nodes:
            pub = ensure_ssh_key(ssh_dir / f"id-{n.name}", f"{OP}@{n.name}")
            _prepare_node(n.target(src_paths), deb, pub)
        inv = ctl.home / "hosts.yml"
        inv.write_text(_inventory(src))
        _seed_wheelhouse(LabPaths(LAB, home=ctl.fieldlab_home))
        _chown_tree(ctl.home, ctl)
        steps.rows.append(
            ("root: sudo, users and keys on the nodes; the inventory", time.monotonic() - t0, "")
        )

        steps.run(
            f"{CTL}: lab up {LAB} (static, {OP} with sudo)",
            ctl.argv([fieldlab, "lab", "up", "--provider", "static", "--inventory", str(inv), "--lab", LAB]),
            env=ctl.env,
            timeout=LAB_UP_TIMEOUT,
        )
        steps.run(
            f"{CTL}: lab status", ctl.argv([fieldlab, "lab", "status", "--lab", LAB]), env=ctl.env, timeout=60
        )
        for n in src.nodes:
            # OpenSSH (not paramiko) with the node's own expanded key and user; root through sudo.
            who = steps.run(
                f"{CTL}: lab ssh {n.name} -- sudo -n id -un",
                ctl.argv([fieldlab, "lab", "ssh", "--lab", LAB, n.name, "--", "whoami; sudo -n id -un"]),
                env=ctl.env,
                timeout=60,
            )
            assert who.stdout.split() == [OP, "root"], who.stdout
        # The agent's unit is Type=simple: lab up returns before its API listens, and the suites'
        # session fixture asks it for its allocs at once.
        monkeypatch.setenv("FIELDLAB_HOME", str(ctl.fieldlab_home))
        cluster = load_cluster(LAB)
        t0 = time.monotonic()
        for c in cluster.clients:
            wait_until(cluster.agent(c).healthy, timeout=AGENT_HEALTHY, what=f"{c.name}: agent healthy")
        steps.rows.append(("root: wait until the agents answer healthy", time.monotonic() - t0, ""))
        report = ["--report-dir", str(ctl.home / "report")]
        e2e = steps.run(
            f"{CTL}: e2e ({len(E2E_TESTS)} tests)",
            ctl.argv(
                [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--lab", LAB, *report, *E2E_TESTS]
            ),
            env=ctl.env,
            timeout=E2E_TIMEOUT,
        )
        print("\n".join(e2e.stdout.strip().splitlines()[-12:]), flush=True)

        # The harness as a non-root user sees it: files as root through sudo, a refusal by name.
        client = cluster.clients[0]
        assert client.target.user == OP
        assert client.target.key_file == ssh_dir / f"id-{client.name}"
        assert cluster.servers[0].target.key_file == ssh_dir / f"id-{cluster.servers[0].name}"
        client.put("/etc/fieldlab-static-e2e", b"\x00secret\xff", mode=0o600)
        assert client.get("/etc/fieldlab-static-e2e") == b"\x00secret\xff"
        assert (
            client.out("stat -c '%U %a' /etc/fieldlab-static-e2e; rm /etc/fieldlab-static-e2e") == "root 600"
        )
        nopw = Remote(SshTarget(client.name, client.address, 22, NOPW, client.target.key_file, None))
        with pytest.raises(SudoRefused) as refused:
            nopw.run("true", retry_for=30.0)
        assert f"{client.name} ({client.address}): user {NOPW} cannot run commands as root" in str(
            refused.value
        )
        assert "a password is required" in str(refused.value)
    finally:
        # Both labs go down whatever happened above (a failure here is reported, after both).
        failed = len(steps.failures)
        if (ctl.fieldlab_home / "state" / LAB / "lab.json").exists():
            down = [fieldlab, "lab", "down", "--lab", LAB]
            steps.run(f"{CTL}: lab down {LAB}", ctl.argv(down), env=ctl.env, timeout=120, check=False)
        down = [fieldlab, "lab", "down", "--lab", SRC_LAB]
        steps.run(f"root: lab down {SRC_LAB}", down, env=root_env, timeout=300, check=False)
        print(f"[static-e2e] steps:\n{steps}\n  total {time.monotonic() - t_all:.1f}s", flush=True)
    assert not steps.failures[failed:], "\n".join(steps.failures[failed:])
