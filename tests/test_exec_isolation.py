"""Exec task isolation on the real thing (root): a hostile exec workload, run by a real Core through
AgentLab, tries to read the agent's config, its state db and another alloc's secrets, to write the
node's /usr and /bin, to see host processes, to be root; `user = "root"` is refused unless the client
allows it. Signals from the agent reach the workload (not a pid-1 trap, not an in-between process),
stop works (kill_signal, exit code reported), a change_mode script runs inside the task's chroot as
its user, and the task survives an agent restart (reattached, same pid). Docker tasks run with
no-new-privileges and the pids limit.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from agent.drivers.exec import children, task_init
from lab.waits import wait_until
from tests.agent_lab import AgentLab, AgentUnderTest, build_workload_images, why_not_ready

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

TIMEOUT = 30.0
JOBS = Path(__file__).parent / "jobspecs"
NOBODY = 65534
INIT_MARK = "fieldlab-task"  # $0 of a task's init (agent.drivers.exec.INIT_NAME)


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[AgentLab]:
    lab = AgentLab(tmp_path / "agentlab")
    yield lab
    lab.cleanup()


def _submit(agent: AgentUnderTest, text: str) -> str:
    out = agent.core.call(lambda: agent.core.job_registry.submit(text, None, source="test"))
    assert len(out["allocs"]) == 1, out
    agent.settle()  # a task's templates render off the main loop: its setup goes on after them
    return str(out["allocs"][0])


def _view(agent: AgentUnderTest, alloc: str) -> dict[str, object]:
    return agent.core.call(lambda: agent.core.allocs.runner(alloc).view())


def _events(agent: AgentUnderTest, alloc: str) -> list[tuple[str, str]]:
    return [(e.type, e.message) for e in agent.core.store.events(alloc)]


def _pid(agent: AgentUnderTest, alloc: str, task: str) -> int:
    rec = agent.core.store.get("handle", f"{alloc}/{task}")
    assert rec is not None
    return int(rec["id"])


def _workload(pid: int) -> int:
    """The workload's host pid: the child of the task's init (which is the child of the tracked pid)."""
    found = task_init(pid)
    assert found is not None, f"pid {pid} has no task init below it"
    kids = children(found[0])
    assert len(kids) == 1, kids
    return kids[0]


def _status_field(pid: int, name: str) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{name} not in /proc/{pid}/status")


def _host_mounts_below(path: Path) -> list[str]:
    prefix = str(path.resolve())
    with open("/proc/self/mounts") as fh:
        return [ln.split()[1] for ln in fh if ln.split()[1].startswith(prefix + "/")]


def _wait_file(path: Path, needle: str, what: str, timeout: float = TIMEOUT) -> str:
    def seen() -> tuple[str | None, str]:
        text = path.read_text() if path.exists() else ""
        return (text if needle in text else None), text[-300:]

    return wait_until(seen, timeout=timeout, what=what, interval=0.1)


# -- a hostile workload --------------------------------------------------------------------------------
VICTIM = """
job "victim" {
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command = "/bin/busybox"
        args    = ["sleep", "600"]
      }
      template {
        data        = "victim-secret-4711"
        destination = "secrets/token"
      }
      resources {
        memory = 32
      }
    }
  }
}
"""

# Each probe prints "check <name> <outcome>"; controls that must work print "ok", escapes "LEAK".
HOSTILE_SCRIPT = r"""
r() { echo "check $1 $2"; }
readable() { if cat "$2" >/dev/null 2>&1; then r "$1" LEAK; else r "$1" denied; fi; }
writable() { if touch "$2" 2>/dev/null; then r "$1" LEAK; else r "$1" denied; fi; }
r uid "$(id -u)"
r gid "$(id -g)"
r nnp "$(grep NoNewPrivs /proc/self/status | tr -d ' \t')"
r capeff "$(grep CapEff /proc/self/status | tr -d ' \t')"
readable etc_agent_config /etc/fieldlab-agent/config.json
readable fake_agent_config "$FAKE_CONFIG"
readable state_db "$STATE_DB"
readable victim_secret "$VICTIM_SECRET"
if ls "$VICTIM_DIR" >/dev/null 2>&1; then r victim_dir LEAK; else r victim_dir denied; fi
readable shadow /etc/shadow
writable write_usr /usr/pwned
writable write_bin /bin/pwned
writable write_root /pwned
writable write_etc /etc/pwned
if mount -t tmpfs x /tmp 2>/dev/null; then r mount LEAK; else r mount denied; fi
if chroot / /bin/true 2>/dev/null; then r chroot LEAK; else r chroot denied; fi
if su -c id root </dev/null >/dev/null 2>&1; then r su LEAK; else r su denied; fi
if cat /local/hostile.sh >/dev/null && cat /secrets/own >/dev/null; then r own_dirs ok; fi
if echo x > /tmp/scratch && echo x > /local/scratch; then r write_tmp_local ok; fi
if cat /etc/passwd >/dev/null; then r allowlisted_etc ok; fi
r alloc_dir_var "$NOMAD_ALLOC_DIR"
r root_dir "$(ls / | tr '\n' ' ')"
r etc_dir "$(ls /etc | tr '\n' ' ')"
r nosuid_usr "$(grep ' /usr ' /proc/self/mountinfo | grep -c nosuid)"
r mounts_of_host "$(grep -c -e ' /home' -e ' /var' -e ' /root' -e fieldlab-agent /proc/self/mountinfo)"
for p in /proc/[0-9]*; do r proc "$(tr '\0' ' ' < "$p/cmdline")"; done
echo done
exec /bin/busybox sleep 600
"""

HOSTILE = """
job "hostile" {
  group "g" {
    network {
      mode = "bridge"
    }
    task "t" {
      driver = "exec"
      config {
        command = "/bin/sh"
        args    = ["/local/hostile.sh"]
      }
      env {
        FAKE_CONFIG   = "@FAKE_CONFIG@"
        STATE_DB      = "@STATE_DB@"
        VICTIM_SECRET = "@VICTIM_SECRET@"
        VICTIM_DIR    = "@VICTIM_DIR@"
      }
      template {
        data        = <<EOT
@SCRIPT@
EOT
        destination = "local/hostile.sh"
      }
      template {
        data        = "hostile's own secret"
        destination = "secrets/own"
      }
      resources {
        memory = 64
      }
    }
  }
}
"""


def _checks(stdout: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in stdout.splitlines():
        m = re.match(r"check (\S+) ?(.*)$", line)
        if m:
            out.setdefault(m.group(1), []).append(m.group(2))
    return out


def test_a_hostile_exec_task_sees_only_its_own_chroot_as_nobody(lab: AgentLab) -> None:
    from agent.network import netns

    fake_conf = lab.root / "etc-fieldlab-agent" / "config.json"  # stands in for /etc/fieldlab-agent
    fake_conf.parent.mkdir(parents=True)
    fake_conf.write_text('{"approle_file": "secret-id-4711"}')
    agent = lab.start_agent()
    try:
        victim = _submit(agent, VICTIM)
        victim_secrets = lab.data_dir / "alloc" / victim / "t" / "secrets"
        assert (victim_secrets / "token").read_text() == "victim-secret-4711"
        job = HOSTILE
        for key, value in {
            "@FAKE_CONFIG@": str(fake_conf),
            "@STATE_DB@": str(lab.data_dir / "state" / "state.db"),
            "@VICTIM_SECRET@": str(victim_secrets / "token"),
            "@VICTIM_DIR@": str(victim_secrets),
            "@SCRIPT@": HOSTILE_SCRIPT.strip(),
        }.items():
            job = job.replace(key, value)
        alloc = _submit(agent, job)
        assert _view(agent, alloc)["status"] == "running", _events(agent, alloc)
        task_dir = lab.data_dir / "alloc" / alloc / "t"
        stdout = _wait_file(
            task_dir.parent / "alloc" / "logs" / f"{task_dir.name}.stdout.0",
            "done",
            "the hostile script to finish",
        )
        checks = _checks(stdout)
        stderr = (task_dir.parent / "alloc" / "logs" / f"{task_dir.name}.stderr.0").read_text()

        leaks = {k: v for k, v in checks.items() if "LEAK" in v}
        assert leaks == {}, f"escapes: {leaks}\n{stderr[-2000:]}"
        for name in ("etc_agent_config", "fake_agent_config", "state_db", "victim_secret", "victim_dir"):
            assert checks[name] == ["denied"], (name, checks)
        for name in ("shadow", "write_usr", "write_bin", "write_root", "write_etc", "mount", "chroot", "su"):
            assert checks[name] == ["denied"], (name, checks)
        for name in ("own_dirs", "write_tmp_local", "allowlisted_etc"):  # controls: not all is denied
            assert checks.get(name) == ["ok"], (name, checks, stderr[-1000:])
        assert checks["uid"] == [str(NOBODY)] and checks["gid"] == [str(NOBODY)]
        assert checks["nnp"] == ["NoNewPrivs:1"]
        assert checks["capeff"] == ["CapEff:0000000000000000"]
        assert set(checks["root_dir"][0].split()) <= {
            *("alloc", "bin", "dev", "etc", "lib", "lib64", "local", "proc", "sbin", "secrets", "tmp", "usr"),
        }, checks["root_dir"]
        assert "fieldlab-agent" not in checks["etc_dir"][0] and "shadow" not in checks["etc_dir"][0]
        assert checks["alloc_dir_var"] in ([""], ["/alloc"]), "NOMAD_ALLOC_DIR must be the chroot's path"
        assert checks["nosuid_usr"] == ["1"] and checks["mounts_of_host"] == ["0"], checks
        # Only its own pid namespace: the init, the script and what it ran to list /proc.
        procs = checks["proc"]
        assert 2 <= len(procs) <= 6, procs
        assert any(INIT_MARK in p for p in procs), procs
        assert not any("python" in p or "pytest" in p or "dockerd" in p for p in procs), procs

        # From the host: namespaces and credentials of the workload process itself.
        pid = _pid(agent, alloc, "t")
        w = _workload(pid)
        assert _status_field(w, "Uid").split()[0] == str(NOBODY)
        for ns in ("pid", "mnt", "ipc", "uts"):
            assert os.readlink(f"/proc/{w}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"), ns
        assert netns.pid_netns_id(w) == netns.netns_id(netns.netns_path(alloc))  # Nomad's name: the alloc id
        assert _status_field(w, "NSpid").split()[-1] != str(w), "the workload is not in a pid namespace"
        # The chroot's mounts live in the task's mount namespace only: the host sees just secrets/.
        alloc_dir = lab.data_dir / "alloc" / alloc
        assert _host_mounts_below(alloc_dir) == [str((task_dir / "secrets").resolve())]
        agent.stop_job("hostile")
        assert not os.path.exists(f"/proc/{pid}") and not os.path.exists(f"/proc/{w}")
        assert _host_mounts_below(alloc_dir) == []
    finally:
        agent.stop()


ROOT_JOB = """
job "@JOB@" {
  group "g" {
    task "t" {
      driver = "exec"
      user   = "@USER@"
      config {
        command = "/bin/sh"
        args    = ["-c", "id -u; grep CapBnd /proc/self/status; chroot / true || echo no-chroot; sleep 600"]
      }
    }
  }
}
"""


def test_user_root_is_refused_unless_the_client_allows_it(lab: AgentLab) -> None:
    agent = lab.start_agent()
    try:
        for user, says in (
            ("root", "exec_allow_root"),
            ("0", "exec_allow_root"),
            ("nosuchuser", "not exist"),
        ):
            alloc = _submit(agent, ROOT_JOB.replace("@JOB@", f"as-{user}").replace("@USER@", user))
            view = _view(agent, alloc)
            events = _events(agent, alloc)
            assert view["status"] == "failed", (user, view)
            assert any(t == "Setup Failure" and says in m and user in m for t, m in events), events
            assert agent.core.store.get("handle", f"{alloc}/t") is None, "a refused task has no handle"
    finally:
        agent.stop()
    agent = lab.start_agent(exec_allow_root=True)
    try:
        alloc = _submit(agent, ROOT_JOB.replace("@JOB@", "as-root-allowed").replace("@USER@", "root"))
        assert _view(agent, alloc)["status"] == "running", _events(agent, alloc)
        out = _wait_file(
            lab.data_dir / "alloc" / alloc / "alloc" / "logs" / "t.stdout.0", "no-chroot", "root task"
        )
        uid, capbnd = out.splitlines()[:2]
        assert uid == "0"
        bounding = int(capbnd.split()[1], 16)
        for cap in (21, 18, 16, 19, 27):  # sys_admin, sys_chroot, sys_module, sys_ptrace, mknod
            assert not bounding & (1 << cap), f"root task keeps capability {cap}: {capbnd}"
        assert bounding & (1 << 10), "net_bind_service is kept for root tasks"
    finally:
        agent.stop()


# -- signals, stop, change script, agent restart -----------------------------------------------------------
SIGNALS_SCRIPT = r"""
trap 'echo HUP >> /local/signals' HUP
trap 'echo USR1 >> /local/signals' USR1
trap 'echo TERM >> /local/signals; exit 0' TERM
echo up >> /local/signals
while :; do /bin/busybox sleep 1 & wait $!; done
"""

CHANGE_SCRIPT = r"""
{
  echo "uid $(id -u)"
  echo "root $(ls / | tr '\n' ' ')"
  echo "init $(tr '\0' ' ' < /proc/1/cmdline | grep -c fieldlab-task)"
  echo "env $NOMAD_TASK_NAME"
  echo "cgroup $(grep /nomad.slice/ /proc/self/cgroup | head -n 1 | cut -d: -f3)"
  if cat "$STATE_DB" >/dev/null 2>&1; then echo "state LEAK"; else echo "state denied"; fi
} > /local/change.out
echo changed
"""

SIGNALS_JOB = """
job "signals" {
  group "g" {
    network {
      mode = "bridge"
    }
    task "t" {
      driver       = "exec"
      kill_signal  = "SIGTERM"
      kill_timeout = "30s"
      config {
        command = "/bin/sh"
        args    = ["/local/workload.sh"]
      }
      env {
        STATE_DB = "@STATE_DB@"
      }
      template {
        data        = <<EOT
@WORKLOAD@
EOT
        destination = "local/workload.sh"
        change_mode = "noop"
      }
      template {
        data        = <<EOT
@CHANGE@
EOT
        destination = "local/change.sh"
        change_mode = "noop"
      }
    }
  }
}
"""


def _signal(agent: AgentUnderTest, alloc: str, sig: str) -> None:
    def send() -> None:
        r = agent.core.allocs.runner(alloc)
        r.tasks[r.group.tasks[0].name].signal(sig)

    agent.core.call(send)


def test_signals_change_script_restart_and_stop_reach_the_isolated_workload(lab: AgentLab) -> None:
    job = SIGNALS_JOB
    for key, value in {
        "@STATE_DB@": str(lab.data_dir / "state" / "state.db"),
        "@WORKLOAD@": SIGNALS_SCRIPT.strip(),
        "@CHANGE@": CHANGE_SCRIPT.strip(),
    }.items():
        job = job.replace(key, value)
    agent = lab.start_agent()
    alloc = _submit(agent, job)
    assert _view(agent, alloc)["status"] == "running", _events(agent, alloc)
    local = lab.data_dir / "alloc" / alloc / "t" / "local"
    signals = local / "signals"
    _wait_file(signals, "up", "the workload to start")
    pid = _pid(agent, alloc, "t")
    w = _workload(pid)
    _signal(agent, alloc, "SIGHUP")
    _wait_file(signals, "HUP", "SIGHUP to reach the workload's trap")
    _signal(agent, alloc, "SIGUSR1")
    _wait_file(signals, "USR1", "SIGUSR1 to reach the workload's trap")
    assert _workload(pid) == w, "a signal ended the workload or its init"
    agent.stop()

    agent = lab.start_agent()
    try:
        assert _pid(agent, alloc, "t") == pid, "a plain agent restart restarted the exec task"
        assert _workload(pid) == w
        view = _view(agent, alloc)
        assert view["tasks"]["t"]["restarts"] == 0, view  # type: ignore[index]

        # What change_mode "script" runs through (TaskHost.exec_in_task -> ExecDriver.exec), on the
        # reattached task: inside its namespaces and chroot, as its user, with its environment.
        ran: Future[tuple[int, str]] = Future()

        def change_script() -> None:
            r = agent.core.allocs.runner(alloc)
            r.tasks[r.group.tasks[0].name].exec(
                ["/bin/sh", "/local/change.sh"],
                10.0,
                lambda rc, out: ran.set_result((rc, out)),
            )

        agent.core.call(change_script)
        assert ran.result(timeout=30) == (0, "changed\n")
        out = (local / "change.out").read_text()
        lines = dict(line.split(" ", 1) for line in out.splitlines())
        assert lines["uid"] == str(NOBODY), out
        assert "home" not in lines["root"].split() and "local" in lines["root"].split(), out
        assert lines["init"] == "1", out  # pid 1 is the task's init: its own pid namespace
        assert lines["env"] == "t" and lines["state"] == "denied", out
        assert lines["cgroup"] == f"/nomad.slice/{alloc}.t", out  # the task's cgroups (limits, sweeper)
        _signal(agent, alloc, "SIGHUP")  # the reattached task still hears the agent
        wait_until(
            lambda: (True if signals.read_text().count("HUP") == 2 else None, signals.read_text()),
            timeout=TIMEOUT,
            what="a second SIGHUP after the restart",
        )
        assert _workload(pid) == w, "the workload is gone before the stop"
        t0 = time.monotonic()
        agent.stop_job("signals")
        took = time.monotonic() - t0
        assert "TERM" in signals.read_text(), (took, signals.read_text(), _events(agent, alloc)[-6:])
        assert took < 10, f"stop took {took:.1f}s: SIGTERM did not end the task (kill_timeout is 30s)"
        assert not os.path.exists(f"/proc/{pid}") and not os.path.exists(f"/proc/{w}")
    finally:
        agent.stop()


EXIT_JOB = """
job "@JOB@" {
  group "g" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    task "t" {
      driver       = "exec"
      kill_timeout = "30s"
      config {
        command = "/bin/sh"
        args    = ["-c", "echo started; exec /bin/busybox sleep 600"]
      }
    }
  }
}
"""


def test_a_workload_without_handlers_dies_of_the_agents_signal_and_its_exit_is_reported(
    lab: AgentLab,
) -> None:
    """Not pid 1 of its namespace, signals at their defaults: a SIGTERM from the agent ends it at
    once (a pid-1 workload would ignore it) and its exit is reported as 128+15 (as docker reports
    it); a stop with the exec default kill_signal SIGINT (which a shell's `&` would have ignored) ends
    it well before kill_timeout."""
    agent = lab.start_agent()
    try:
        signalled = _submit(agent, EXIT_JOB.replace("@JOB@", "signalled"))
        stopped = _submit(agent, EXIT_JOB.replace("@JOB@", "stopped"))
        for alloc in (signalled, stopped):
            _wait_file(
                lab.data_dir / "alloc" / alloc / "alloc" / "logs" / "t.stdout.0", "started", "the task"
            )
        pids = {a: _pid(agent, a, "t") for a in (signalled, stopped)}
        t0 = time.monotonic()
        _signal(agent, signalled, "SIGTERM")

        def terminated() -> tuple[str | None, str]:
            found = [m for t, m in _events(agent, signalled) if t == "Terminated"]
            return (found[0] if found else None), str(_events(agent, signalled)[-3:])

        message = wait_until(terminated, timeout=TIMEOUT, what="the task's exit to be reported")
        assert time.monotonic() - t0 < 10
        assert message == "Exit Code: 143", message
        assert not os.path.exists(f"/proc/{pids[signalled]}")
        t0 = time.monotonic()
        agent.stop_job("stopped")
        assert time.monotonic() - t0 < 10, "SIGINT did not end the workload: stopped only by SIGKILL"
        assert not os.path.exists(f"/proc/{pids[stopped]}")
    finally:
        agent.stop()


# -- docker ------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> None:
    build_workload_images(tmp_path_factory.mktemp("images"))


def test_docker_tasks_and_the_pause_container_get_no_new_privileges_and_the_pids_limit(
    lab: AgentLab, images: None
) -> None:
    lab.docker.pids_limit = 321  # what the client config's docker_pids_limit gives the driver
    agent = lab.start_agent()
    try:
        alloc = _submit(agent, (JOBS / "cni-check-on-restore.hcl").read_text())
        assert _view(agent, alloc)["status"] == "running", _events(agent, alloc)
        by_role = {c.labels["org.fieldlab.role"]: c.attrs["HostConfig"] for c in lab.containers(alloc)}
        assert set(by_role) == {"pause", "task"}
        assert by_role["task"]["SecurityOpt"] == ["no-new-privileges"]
        assert by_role["task"]["PidsLimit"] == 321
        assert by_role["pause"]["SecurityOpt"] == ["no-new-privileges"]
    finally:
        agent.stop()
