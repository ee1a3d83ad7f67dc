"""`fieldlab-agent` as Nomad users type it: the parsing (single-dash flags, `--` before a command),
what it prints (pure formatting: tables, `Key = value`, relative times), the shell completion, and
each verb end to end over real mTLS against the real routes on a fake node."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent import __version__, cli
from agent.api import ApiServer, json_response
from agent.cli import commands, completion
from agent.cli import format as fmt
from agent.cli.parser import split_command
from agent.client import ApiClient
from agent.config import Config, TLSConfig
from agent.core import Core
from agent.drivers.base import TaskHandle
from agent.errors import AgentError
from agent.nomadapi.node import NodeIdentity
from agent.nomadapi.routes import NomadApi, build_nomad_routes
from agent.routes import build_routes
from tests.fakes import FakeNode
from tests.pki import Issued, TestCA

OPERATOR = "controller.operator.fieldlab"
NOW = 1_700_000_000.0


def parse(*argv: str) -> argparse.Namespace:
    head, command = split_command(list(argv))
    args = cli.parser_().parse_args(head)
    if command is not None:
        args.command = command
    return args


# -- parsing


def test_nomad_single_dash_flags_with_a_space_or_an_equals_sign() -> None:
    args = parse(
        "alloc", "logs", "-address=https://10.0.0.1:4646", "-ca-cert", "ca.pem", "-stderr", "-f", "abcdef12"
    )
    assert (args.address, args.ca_cert, args.stderr, args.follow, args.alloc_id, args.task) == (
        "https://10.0.0.1:4646",
        "ca.pem",
        True,
        True,
        "abcdef12",
        None,
    )
    assert args.func is commands.alloc_logs
    args = parse("alloc", "logs", "--client-cert", "op.crt", "--client-key=op.key", "abcdef12", "web")
    assert (args.client_cert, args.client_key, args.task, args.stderr) == ("op.crt", "op.key", "web", False)


def test_no_flag_is_taken_for_a_prefix_of_another() -> None:
    with pytest.raises(SystemExit):
        parse("alloc", "logs", "-std", "abcdef12")
    with pytest.raises(SystemExit):
        parse("job", "status", "-js")


def test_exec_takes_its_flags_before_the_double_dash_and_the_command_after_it() -> None:
    args = parse("alloc", "exec", "abcdef12", "web", "-timeout", "5", "--", "ls", "-la", "--", "/tmp")
    assert (args.alloc_id, args.task, args.timeout) == ("abcdef12", "web", 5.0)
    assert args.command == ["ls", "-la", "--", "/tmp"] and args.func is commands.alloc_exec
    args = parse(
        "--config", "x.json", "alloc", "exec", "-task", "web", "abcdef12", "--", "sh", "-c", "echo hi"
    )
    assert (args.task_flag, args.task, args.command) == ("web", None, ["sh", "-c", "echo hi"])
    assert parse("alloc", "exec", "abcdef12").command == []
    # Anything else keeps argparse's own `--`.
    assert parse("job", "validate", "--", "-odd.hcl").paths == [Path("-odd.hcl")]


def test_signal_takes_nomads_form_and_the_older_one() -> None:
    args = parse("alloc", "signal", "-s", "HUP", "abcdef12", "web")
    assert (args.signal, args.alloc_id, args.task, args.legacy_signal) == ("HUP", "abcdef12", "web", None)
    args = parse("alloc", "signal", "abcdef12", "web", "SIGHUP")
    assert (args.signal, args.task, args.legacy_signal) == (None, "web", "SIGHUP")
    assert parse("alloc", "signal", "abcdef12").task is None


def test_version_and_every_verb_of_the_issue_are_there(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["version"]) == 0
    assert capsys.readouterr().out == f"fieldlab-agent v{__version__}\n"
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"fieldlab-agent v{__version__}\n"
    for path in [
        "job status",
        "job inspect",
        "job validate",
        "job run",
        "job stop",
        "alloc status",
        "alloc logs",
    ]:
        assert path in cli.COMMANDS
    for path in ["alloc exec", "alloc signal", "alloc restart", "node status", "completion", "version"]:
        assert path in cli.COMMANDS


def test_the_api_flags_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "FIELDLAB_AGENT_ADDR": "https://env:4646",
        "FIELDLAB_AGENT_CACERT": "env-ca.pem",
        "FIELDLAB_AGENT_CLIENT_CERT": "env.crt",
        "FIELDLAB_AGENT_CLIENT_KEY": "env.key",
    }.items():
        monkeypatch.setenv(key, value)
    args = parse("node", "status", "-address", "https://flag:4646", "-client-key", "flag.key")
    assert commands.client(args) == ApiClient("https://flag:4646", "env-ca.pem", "env.crt", "flag.key")
    assert commands.client(parse("node", "status")) == ApiClient(
        "https://env:4646", "env-ca.pem", "env.crt", "env.key"
    )
    monkeypatch.delenv("FIELDLAB_AGENT_CACERT")
    with pytest.raises(AgentError, match=r"set FIELDLAB_AGENT_CACERT \(or -ca-cert\)"):
        commands.client(parse("node", "status"))
    assert commands.client(parse("node", "status", "-ca-cert", "f.pem")).ca_file == "f.pem"


def test_exec_takes_i_and_t_apart_and_wants_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("alloc", "exec", "-i", "-t", "abcdef12", "web", "--", "sh", "-l")
    assert (args.stdin, args.tty, args.task, args.command) == (True, True, "web", ["sh", "-l"])
    args = parse("alloc", "exec", "-i", "abcdef12", "--", "cat")
    assert (args.stdin, args.tty) == (True, False)
    assert (
        parse("alloc", "exec", "abcdef12", "--", "ls").stdin,
        parse("alloc", "exec", "x", "--", "ls").tty,
    ) == (
        False,
        False,
    )
    assert cli.main(["alloc", "exec", "abcdef12"]) == 2
    assert "say the command" in capsys.readouterr().err


def test_exec_takes_nomads_form_without_the_double_dash() -> None:
    """`nomad alloc exec [-task T] ALLOC CMD ARGS...`: the first word after the options is ALLOC,
    everything after it is the command, its own flags included."""
    args = parse("alloc", "exec", "-task", "web", "-i", "-t", "ab12", "sh", "-c", "echo hi")
    assert (args.task_flag, args.stdin, args.tty, args.alloc_id, args.task) == (
        "web",
        True,
        True,
        "ab12",
        None,
    )
    assert args.command == ["sh", "-c", "echo hi"]
    args = parse("alloc", "exec", "-timeout=5", "ab12", "ls", "-la")
    assert (args.timeout, args.alloc_id, args.command) == (5.0, "ab12", ["ls", "-la"])
    args = parse("--config", "x.json", "alloc", "exec", "-timeout", "5", "ab12", "ls")
    assert (args.timeout, args.command) == (5.0, ["ls"])


# -- what it prints (pure)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (45.4, "45s"),
        (60, "1m"),
        (192, "3m12s"),
        (3600, "1h"),
        (7500, "2h5m"),
        (86400 * 3 + 3600 * 4, "3d4h"),
    ],
)
def test_durations_as_nomad_prints_them(seconds: float, text: str) -> None:
    assert fmt.duration(seconds) == text


def test_relative_times() -> None:
    assert fmt.ago(NOW - 12, NOW) == "12s ago"
    assert fmt.ago(NOW - 192, NOW) == "3m12s ago"
    assert fmt.ago(NOW - 0.4, NOW) == "just now"
    assert fmt.ago(NOW + 5, NOW) == "in 5s"
    assert fmt.ago(None, NOW) == "-" and fmt.ago(0, NOW) == "-"


def test_tables_and_key_value_blocks_align_without_trailing_spaces() -> None:
    assert fmt.table(["ID", "Status"], [["abc", "running"], ["abcdef", None]]) == (
        "ID      Status\nabc     running\nabcdef  -"
    )
    assert fmt.kv([("ID", "x"), ("Job ID", ""), ("Client Status", "running")]) == (
        "ID            = x\nJob ID        = <none>\nClient Status = running"
    )


@pytest.mark.parametrize(
    ("given", "name"), [("SIGHUP", "SIGHUP"), ("hup", "SIGHUP"), ("1", "SIGHUP"), ("usr1", "SIGUSR1")]
)
def test_signal_names(given: str, name: str) -> None:
    assert fmt.signal_name(given) == name


@pytest.mark.parametrize("given", ["SIGNOPE", "999", ""])
def test_bad_signal_names_say_what_is_wrong(given: str) -> None:
    with pytest.raises(ValueError, match="signal"):
        fmt.signal_name(given)


ALLOC = {
    "id": "8c1a2b3c-0000-4000-8000-000000000001",
    "job": "web",
    "group": "cache",
    "status": "running",
    "desired": "run",
    "reason": "",
    "replaced_by": "",
    "replaces": "77777777-0000-4000-8000-000000000000",
    "created": NOW - 300,
    "network": {
        "mode": "bridge",
        "address": "10.213.251.5",
        "ports": [{"label": "http", "host": 20000, "to": 8080}],
        "pause_container": "f" * 64,
    },
    "tasks": {
        "redis": {"state": "running", "restarts": 2, "failed": False, "container": "a" * 64},
        "side": {"state": "dead", "restarts": 0, "failed": True, "container": None},
    },
}
EVENTS = [
    {"time": NOW - 290 + i, "task": "redis", "type": "Started", "message": f"start {i}", "details": {}}
    for i in range(12)
] + [{"time": NOW - 5, "task": "side", "type": "Terminated", "message": "Exit Code: 1", "details": {}}]


def test_alloc_status_is_a_kv_block_a_task_table_and_the_recent_events_newest_first() -> None:
    text = fmt.alloc_status(ALLOC, EVENTS, NOW)
    assert text.splitlines()[:11] == [
        "ID              = 8c1a2b3c-0000-4000-8000-000000000001",
        "Job ID          = web",
        "Task Group      = cache",
        "Client Status   = running",
        "Desired Status  = run",
        "Reason          = <none>",
        "Created         = 5m ago",
        "Network         = bridge, 10.213.251.5",
        "Ports           = http 20000 -> 8080",
        "Pause Container = ffffffffffff",
        "Replaces        = 77777777-0000-4000-8000-000000000000",
    ]
    assert "\nTasks\nName   State    Restarts  Failed  Container\n" in text
    assert "redis  running  2         false   aaaaaaaaaaaa\nside   dead     0         true    -\n" in text
    events = text.split("Recent Events:\n")[1].splitlines()
    assert events[0] == "Time       Task   Type        Description"
    assert events[1] == "5s ago     side   Terminated  Exit Code: 1"
    assert events[2] == "4m39s ago  redis  Started     start 11"
    assert len(events) == 1 + fmt.RECENT_EVENTS + 1 and "3 older events not shown" in events[-1]
    verbose = fmt.alloc_status(ALLOC, EVENTS, NOW, verbose=True)
    assert "older events" not in verbose and "start 0" in verbose and "a" * 64 in verbose


def test_an_adopted_alloc_shows_its_cgroup_and_where_the_state_went() -> None:
    adopted = {
        **ALLOC,
        "status": "adopted",
        "network": {"mode": "unknown", "address": "", "ports": [], "pause_container": None},
        "tasks": {
            "worker": {
                "state": "running",
                "restarts": 0,
                "failed": False,
                "container": None,
                "cgroup": "x.worker",
            }
        },
        "adopted": {"state_db": "/var/lib/state.db.corrupt-1", "at": NOW - 60},
    }
    text = fmt.alloc_status(adopted, [], NOW)
    assert "Adopted        = 1m ago, state database moved to /var/lib/state.db.corrupt-1" in text
    assert "worker  running  0         false   cgroup x.worker" in text
    assert text.endswith("Recent Events:\nNo events")


def test_job_list_and_job_status() -> None:
    jobs = [
        {"id": "web", "type": "service", "allocs": ["a1"]},
        {"id": "batch", "type": "batch", "allocs": []},
    ]
    allocs = [
        {"id": "a1" * 4, "job": "web", "status": "running"},
        {"id": "b" * 8, "job": "web", "status": "failed"},
    ]
    assert fmt.job_list(jobs, allocs) == (
        "ID     Type     Status   Running/Allocs\nbatch  batch    dead     0/0\nweb    service  running  1/2"
    )
    assert fmt.job_list([], []) == "No running jobs"
    job = {
        "id": "web",
        "name": "web",
        "type": "service",
        "datacenters": ["dc1", "dc2"],
        "status": "running",
        "summary": {"cache": {"pending": 0, "running": 1, "failed": 1, "complete": 0, "adopted": 0}},
        "allocs": [
            {"id": ALLOC["id"], "group": "cache", "desired": "run", "status": "running", "created": NOW - 60},
        ],
    }
    assert fmt.job_status(job, NOW) == "\n".join(
        [
            "ID          = web",
            "Name        = web",
            "Type        = service",
            "Datacenters = dc1,dc2",
            "Status      = running",
            "",
            "Summary",
            "Task Group  Pending  Running  Failed  Complete  Adopted",
            "cache       0        1        1       0         0",
            "",
            "Allocations",
            "ID        Task Group  Desired  Status   Created",
            "8c1a2b3c  cache       run      running  1m ago",
        ]
    )


def test_node_status() -> None:
    health = {
        "status": "ok",
        "node": "client1",
        "version": "0.1.0",
        "uptime_seconds": 7500.0,
        "vault": {"configured": True, "authenticated": False, "error": "sealed"},
        "vault_status": {"state": "sealed", "error": "Vault is sealed"},
    }
    node = {
        "datacenter": "dc1",
        "jobs": 2,
        "allocs": {"pending": 0, "running": 3, "failed": 1, "complete": 0, "adopted": 0},
        "restore_seconds": 0.25,
        "sweeps": 4,
        "drivers": {
            "docker": {"healthy": False, "detail": "docker engine: connection refused"},
            "exec": {"healthy": True, "detail": "runs processes on the node"},
        },
    }
    text = fmt.node_status(health, node)
    assert text.startswith(
        "Name          = client1\nStatus        = ready\nVersion       = 0.1.0\nUptime        = 2h5m\n"
    )
    assert "Vault         = sealed (Vault is sealed)" in text and "Restore Time  = 0.250s" in text
    assert "docker  false    docker engine: connection refused" in text
    assert text.endswith("Pending  Running  Failed  Complete  Adopted\n0        3        1       0         0")
    older = fmt.node_status({**health, "vault": {}}, None)
    assert "Jobs    = unknown: the agent has no GET /fieldlab/v1/node" in older


def test_last_lines() -> None:
    assert fmt.last_lines(b"a\nb\nc\n", 2) == b"b\nc\n"
    assert fmt.last_lines(b"a\nb\nno newline", 1) == b"no newline"
    assert fmt.last_lines(b"a\n", 5) == b"a\n" and fmt.last_lines(b"a\n", 0) == b""


# -- completion


def test_the_bash_completion_lists_the_verbs_of_each_level() -> None:
    script = completion.bash_script(cli.parser_())
    tree = completion.levels(cli.parser_())
    assert tree[""].verbs == ["run", "check-config", "version", "completion", "job", "alloc", "node"]
    assert tree["alloc"].verbs == ["list", "status", "logs", "exec", "signal", "restart", "stop"]
    assert "-stderr" in tree["alloc logs"].flags and "-address" in tree["alloc logs"].valued
    assert tree["job run"].files and tree["completion"].choices == ["bash", "zsh"]
    assert "complete -F _fieldlab_agent_complete fieldlab-agent" in script
    assert "legacy_signal" not in script


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
@pytest.mark.parametrize(
    ("words", "offered"),
    [
        ([""], ["run", "check-config", "version", "completion", "job", "alloc", "node"]),
        (["alloc", ""], ["list", "status", "logs", "exec", "signal", "restart", "stop"]),
        (["job", "st"], ["status", "stop"]),
        (["alloc", "logs", "-address", "x", "-std"], ["-stderr"]),
        (["node", ""], ["status"]),
        (["alloc", "exec", "abc", "--", ""], []),
    ],
)
def test_the_completion_script_completes_in_bash(
    words: list[str], offered: list[str], tmp_path: Path
) -> None:
    script = tmp_path / "c.bash"
    script.write_text(completion.bash_script(cli.parser_()))
    quoted = " ".join(json.dumps(w) for w in ["fieldlab-agent", *words])
    run = subprocess.run(
        [
            "bash",
            "-c",
            f"source {script}; COMP_WORDS=({quoted}); COMP_CWORD={len(words)}; "
            '_fieldlab_agent_complete; printf "%s\\n" "${COMPREPLY[@]}"',
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    )
    assert [w for w in run.stdout.splitlines() if w] == offered


# -- every verb end to end: the CLI, real mTLS, the real routes on a fake node

ONE_TASK = """
job "web" {
  group "g" {
    task "srv" {
      driver = "exec"
      config { command = "/bin/sleep" }
    }
  }
}
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Agent:
    node: FakeNode
    core: Core
    flags: list[str]  # -address, -ca-cert, -client-cert, -client-key


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Agent]:
    for key in (
        "FIELDLAB_AGENT_ADDR",
        "FIELDLAB_AGENT_CACERT",
        "FIELDLAB_AGENT_CLIENT_CERT",
        "FIELDLAB_AGENT_CLIENT_KEY",
    ):
        monkeypatch.delenv(key, raising=False)
    node = FakeNode(tmp_path)
    core = node.core()
    threading.Thread(target=core.run_loop, daemon=True).start()
    ca = TestCA(tmp_path)
    srv = ca.issue("client1.agent.fieldlab", server=True)
    op: Issued = ca.issue(OPERATOR, server=False)
    cfg = Config(
        node_name="client1",
        data_dir=tmp_path / "data",
        bind_address="127.0.0.1",
        port=_free_port(),
        tls=TLSConfig(srv.cert, srv.key, ca.ca_file),
    )
    health: dict[str, Any] = {
        "status": "ok",
        "node": "client1",
        "version": __version__,
        "uptime_seconds": 3.0,
    }
    nomad = NomadApi(
        core,
        NodeIdentity("5f8e2d1c-0000-4000-8000-000000000001", "client1", "dc1", "global", "127.0.0.1:4646"),
    )
    server = ApiServer(
        cfg,
        {"/fieldlab/v1/agent/health": lambda: json_response(200, health)},
        build_nomad_routes(nomad) + build_routes(core),
    )
    server.start()
    flags = [
        f"-address=https://127.0.0.1:{server.port}",
        "-ca-cert",
        str(ca.ca_file),
        "-client-cert",
        str(op.cert),
        "-client-key",
        str(op.key),
    ]
    yield Agent(node, core, flags)
    server.stop(5)
    core.stop()


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_verb_against_an_agent(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = agent.flags
    spec = tmp_path / "web.hcl"
    spec.write_text(ONE_TASK)
    code, out, _ = _run(capsys, "job", "run", *f, str(spec))
    assert code == 0 and out.startswith('==> Job "web" registered (version 0)\n    Evaluation "'), out
    assert '    Allocation "' in out
    alloc = agent.core.call(lambda: next(iter(agent.core.runners)))

    code, out, _ = _run(capsys, "job", "status", *f)
    assert code == 0 and out.splitlines() == [
        "ID   Type     Status   Running/Allocs",
        "web  service  running  1/1",
    ]
    code, out, _ = _run(capsys, "job", "status", *f, "web")
    assert (
        code == 0 and "Status      = running" in out and f"{alloc[:8]}  g           run      running" in out
    )
    code, out, _ = _run(capsys, "job", "inspect", *f, "web")
    inspected = json.loads(out)
    assert inspected["job"]["id"] == "web" and inspected["submission"]["source"] == ONE_TASK

    code, out, _ = _run(capsys, "alloc", "status", *f, alloc[:8])
    assert code == 0 and f"ID             = {alloc}" in out and "srv   running  0         false" in out
    assert re.search(r"\n(just now|\d+s ago) +srv +Started", out), out
    code, out, _ = _run(capsys, "alloc", "status", "-json", *f, alloc[:8])
    assert json.loads(out)["alloc"]["id"] == alloc

    logs = agent.node.root / "data" / "alloc" / alloc / "srv" / "logs"
    logs.mkdir(parents=True)
    (logs / "stdout").write_bytes(b"line 1\nline 2\n")
    (logs / "stderr").write_bytes(b"warning\n")
    assert _run(capsys, "alloc", "logs", *f, alloc[:8])[:2] == (0, "line 1\nline 2\n")
    assert _run(capsys, "alloc", "logs", "-stderr", *f, alloc[:8], "srv")[:2] == (0, "warning\n")
    assert _run(capsys, "alloc", "logs", "-tail", "-n", "1", *f, alloc[:8])[:2] == (0, "line 2\n")
    assert _run(capsys, "alloc", "logs", "-tail", "-c", "3", *f, alloc[:8])[:2] == (0, " 2\n")

    def exec_(
        handle: TaskHandle, argv: list[str], timeout: float, env: Mapping[str, str] | None = None
    ) -> tuple[int, str]:
        return (7, f"ran {' '.join(argv)} for {timeout:g}s\n")

    agent.node.exec.exec = exec_  # type: ignore[method-assign]
    code, out, _ = _run(capsys, "alloc", "exec", *f, "-timeout", "9", alloc[:8], "--", "ls", "-la")
    assert (code, out) == (7, "ran ls -la for 9s\n")

    code, out, _ = _run(capsys, "alloc", "signal", "-s", "hup", *f, alloc[:8])
    assert code == 0 and out == f"Sent SIGHUP to task srv of alloc {alloc[:8]}\n"
    assert agent.node.exec.signals[-1][1] == "SIGHUP"
    code, out, _ = _run(capsys, "alloc", "restart", *f, alloc[:8], "srv")
    assert code == 0 and out == f"Restarting task srv of alloc {alloc[:8]}\n"

    code, out, _ = _run(capsys, "node", "status", *f)
    assert code == 0 and "Name          = client1" in out and "exec    true" in out
    assert "Pending  Running  Failed  Complete  Adopted\n0        1        0       0         0" in out

    code, out, _ = _run(capsys, "job", "stop", *f, "web")
    assert code == 0 and out == f'==> Job "web" stopped\n    Allocation "{alloc[:8]}" stopped\n'


def test_errors_are_one_line_with_the_apis_reason(agent: Agent, capsys: pytest.CaptureFixture[str]) -> None:
    f = agent.flags
    code, _, err = _run(capsys, "alloc", "status", *f, "ffffffff")
    assert code == 2 and err == "fieldlab-agent: error: HTTP 404: no alloc ffffffff\n"
    code, _, err = _run(capsys, "alloc", "logs", *f, "XYZ", "srv")
    assert code == 2 and "HTTP 400: alloc id 'XYZ' in the path" in err
    code, _, err = _run(capsys, "alloc", "signal", "-s", "NOPE", *f, "ffffffff")
    assert code == 2 and "signal 'NOPE': not a signal name" in err
    code, _, err = _run(capsys, "alloc", "exec", *f, "-timeout", "0", "ffffffff", "--", "ls")
    assert code == 2 and "-timeout 0: more than 0" in err
    code, _, err = _run(capsys, "job", "inspect", *f, "nope")
    assert code == 2 and "HTTP 404: no job 'nope'" in err


def test_a_terminal_without_a_size_is_taken_as_24_by_80(monkeypatch: pytest.MonkeyPatch) -> None:
    from agent.cli import session as cli_session

    monkeypatch.setattr(cli_session.os, "get_terminal_size", lambda fd: os.terminal_size((0, 0)))
    assert cli_session.terminal_size() == (24, 80)
    monkeypatch.setattr(cli_session.os, "get_terminal_size", lambda fd: os.terminal_size((132, 50)))
    assert cli_session.terminal_size() == (50, 132)
