"""`fieldlab-agent` as Nomad users type it: the parsing (single-dash flags, `--` before a command),
what it prints from Nomad's structs (pure formatting: tables, `Key = value`, relative times), the
shell completion, and each verb end to end over real mTLS against the agent's Nomad routes (and its
exec websocket) on a fake node: the CLI speaks nothing but Nomad's HTTP API."""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import requests
import wsproto
import wsproto.events as wsevents

from agent import __version__, cli
from agent.api.client import ApiClient
from agent.cli import allocformat, allocstatus, commands, completion, wsclient
from agent.cli import format as fmt
from agent.cli import logs as cli_logs
from agent.cli import session as cli_session
from agent.cli.calls import Nomad
from agent.cli.parser import split_command
from agent.command.daemon import health_stats
from agent.drivers import execframes as ef
from agent.drivers.base import TaskHandle
from agent.errors import AgentError
from agent.nomadapi import fsjson, structs
from agent.nomadapi.gojson import go_time, ns
from agent.nomadapi.structs import events_by_task
from agent.state.store import Event
from lab.waits import wait_until
from tests.agent_api import NODE_ID, Agent

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
    args = parse("alloc", "signal", "-s", "HUP", "-task", "web", "abcdef12")
    assert (args.task_flag, args.task) == ("web", None)
    args = parse("alloc", "restart", "-all-tasks", "abcdef12")
    assert (args.all_tasks, args.task_flag, args.task) == (True, None, None)
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
    for key in ("NOMAD_ADDR", "NOMAD_CACERT", "NOMAD_CLIENT_CERT", "NOMAD_CLIENT_KEY", "NOMAD_SKIP_VERIFY"):
        monkeypatch.delenv(key, raising=False)  # Nomad's, under these (tests/test_cli_nomad_user.py)
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
    with pytest.raises(AgentError, match=r"set FIELDLAB_AGENT_CACERT or NOMAD_CACERT \(or -ca-cert\)"):
        commands.client(parse("node", "status"))
    assert commands.client(parse("node", "status", "-ca-cert", "f.pem")).ca_file == "f.pem"


def test_exec_takes_i_and_t_apart_and_wants_a_command(capsys: pytest.CaptureFixture[str]) -> None:
    args = parse("alloc", "exec", "-i", "-t", "abcdef12", "web", "--", "sh", "-l")
    assert (args.stdin, args.tty, args.task, args.command) == (True, True, "web", ["sh", "-l"])
    args = parse("alloc", "exec", "-i", "abcdef12", "--", "cat")
    assert (args.stdin, args.tty) == (True, None)  # -t: Nomad's default, whether there are terminals
    assert (
        parse("alloc", "exec", "abcdef12", "--", "ls").stdin,
        parse("alloc", "exec", "x", "--", "ls").tty,
    ) == (None, None)  # unsaid: Nomad's defaults (agent.cli.commands.exec_modes)
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


# -- what it prints, from Nomad's structs (pure)


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


def test_relative_times_and_nomads_time_units() -> None:
    assert fmt.ago(NOW - 12, NOW) == "12s ago"
    assert fmt.ago(NOW - 192, NOW) == "3m12s ago"
    assert fmt.ago(NOW - 0.4, NOW) == "just now"
    assert fmt.ago(NOW + 5, NOW) == "in 5s"
    assert fmt.ago(None, NOW) == "-" and fmt.ago(0, NOW) == "-"
    # Nomad's times: Unix nanoseconds, and time.Time as RFC 3339 (the zero time: unset)
    assert fmt.seconds(ns(NOW - 3)) == NOW - 3 and fmt.seconds(0) is None
    assert fmt.go_time_seconds(go_time(NOW - 2.5)) == NOW - 2.5
    assert fmt.go_time_seconds(go_time(None)) is None and fmt.go_time_seconds("") is None


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


ALLOC_ID = "8c1a2b3c-0000-4000-8000-000000000001"
VIEW: dict[str, Any] = {
    "id": ALLOC_ID,
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
JOB = {
    "ID": "web",
    "Version": 3,
    "Type": "service",
    "TaskGroups": [
        {
            "Name": "cache",
            "Tasks": [{"Name": "redis", "Driver": "docker"}, {"Name": "side", "Driver": "exec"}],
        }
    ],
}
EVENTS = [
    Event(i, NOW - 290 + i, ALLOC_ID, "redis", "Started", f"start {i}", {"cause": "start"}) for i in range(12)
] + [
    Event(20, NOW - 100, ALLOC_ID, "", "Network Lost", "pause container died", {}),
    Event(21, NOW - 5, ALLOC_ID, "side", "Terminated", "Exit Code: 1", {"exit_code": 1}),
]


def nomad_alloc(
    view: Mapping[str, Any], events: list[Event], job: dict[str, Any] | None = None, *, stub: bool = False
) -> dict[str, Any]:
    """The alloc as the agent's Nomad routes answer it (agent.nomadapi.structs)."""
    common: dict[str, Any] = {
        "job": job,
        "events_by_task": events_by_task(events, list(view["tasks"])),
        "node_id": NODE_ID,
        "node_name": "client1",
        "namespace": "default",
        "create_index": 10,
        "modify_index": 12,
        "alloc_modify_index": 12,
        "modify_time": NOW - 5,
    }
    return structs.alloc_stub(view, **common) if stub else structs.alloc_json(view, **common)


def test_alloc_status_shows_each_tasks_newest_events_and_with_verbose_every_one() -> None:
    """Laid out as `nomad alloc status` (tests/test_cli_nomad_user.py has the layout): each task's
    own events, newest first, RECENT_EVENTS of them (an alloc-wide event is in each task's list, as
    Nomad's); -verbose: every event, full ids and a docker task's container."""
    text = allocstatus.alloc_status(nomad_alloc(VIEW, EVENTS, JOB), NOW)
    redis = text.split('Task "redis" is "running"')[1].split('Task "side"')[0]
    events = redis.split("Recent Events:\n")[1].strip().splitlines()
    assert events[0].split() == ["Time", "Type", "Description"]
    assert [e.split(None, 1)[1] for e in events[1:3]] == [
        "Network Lost  pause container died",
        "Started       start 11",
    ]
    assert len(events) == 1 + fmt.RECENT_EVENTS + 1 and "3 older events not shown" in events[-1]
    side = text.split('Task "side" is "dead"')[1]
    assert "Terminated    Exit Code: 1" in side and "Network Lost  pause container died" in side
    verbose = allocstatus.alloc_status(nomad_alloc(VIEW, EVENTS, JOB), NOW, verbose=True)
    assert "older events" not in verbose and "start 0" in verbose
    assert f"Handle = container redis-{ALLOC_ID}" in verbose and "Handle" not in text
    assert f"Node ID             = {NODE_ID}\n" in verbose


def test_an_adopted_alloc_shows_its_cgroup_and_where_the_state_went() -> None:
    view = {
        **VIEW,
        "status": "adopted",
        "replaces": "",
        "network": {"mode": "unknown", "address": "", "ports": [], "pause_container": None},
        "tasks": {"worker": {"state": "running", "restarts": 0, "failed": False, "container": None}},
    }
    adopted = Event(
        1,
        NOW - 60,
        ALLOC_ID,
        "",
        "Adopted",
        "Restore failed: ... adopted",
        {
            "state_db": "/var/lib/state.db.corrupt-1",
            "tasks": [
                {"task": "worker", "kind": "cgroup", "target": "x.worker", "role": "process", "running": True}
            ],
        },
    )
    alloc = nomad_alloc(view, [adopted])
    assert alloc["ClientStatus"] == "running" and alloc["Job"] is None  # Nomad's words for it
    text = allocstatus.alloc_status(alloc, NOW)
    assert "Client Status       = adopted" in text
    assert "Adopted             = 1m ago, state database moved to /var/lib/state.db.corrupt-1" in text
    assert 'Task "worker" is "running"\nTask Resources:\n' in text
    assert "\nHandle = cgroup x.worker\n" in text
    assert text.endswith("  Adopted  Restore failed: ... adopted")
    assert allocformat.alloc_list([nomad_alloc(view, [adopted], stub=True)], NOW).splitlines()[1].split() == [
        "8c1a2b3c",
        "web",
        "cache",
        "0",
        "run",
        "adopted",
        "5m",
        "ago",
        "5s",
        "ago",
    ]


def test_job_list_and_job_status_read_nomads_job_summary_and_stubs() -> None:
    web = structs.job_summary("web", "default", {"cache": {"running": 1, "failed": 1}}, 1, 2)
    batch = structs.job_summary("batch", "default", {"g": {}}, 1, 2)
    stubs = [
        {
            "ID": "web",
            "Type": "service",
            "Priority": 50,
            "Status": "running",
            "JobSummary": web,
            "SubmitTime": ns(NOW - 60),
        },
        {
            "ID": "batch",
            "Type": "batch",
            "Priority": 70,
            "Status": "dead",
            "JobSummary": batch,
            "SubmitTime": ns(NOW - 7500),
        },
    ]
    assert fmt.job_list(stubs, NOW) == (
        "ID     Type     Priority  Status   Running/Allocs  Submitted\n"
        "batch  batch    70        dead     0/0             2h5m ago\n"
        "web    service  50        running  1/2             1m ago"
    )
    assert fmt.job_list([], NOW) == "No running jobs"
    job = {
        "ID": "web",
        "Name": "web",
        "Type": "service",
        "Priority": 50,
        "Datacenters": ["dc1", "dc2"],
        "Status": "running",
        "Version": 2,
        "SubmitTime": ns(NOW - 60),
    }
    older = nomad_alloc({**VIEW, "id": "b" * 8 + ALLOC_ID[8:], "created": NOW - 600}, [], stub=True)
    assert fmt.job_status("web", job, web, [older, nomad_alloc(VIEW, EVENTS, stub=True)], NOW) == "\n".join(
        [
            "ID          = web",
            "Name        = web",
            "Submit Date = 1m ago",
            "Type        = service",
            "Priority    = 50",
            "Datacenters = dc1,dc2",
            "Status      = running",
            "Version     = 2",
            "",
            "Summary",
            "Task Group  Queued  Starting  Running  Failed  Complete  Lost  Unknown",
            "cache       0       0         1        1       0         0     0",
            "",
            "Allocations",
            "ID        Task Group  Version  Desired  Status   Created  Modified",
            "8c1a2b3c  cache       0        run      running  5m ago   5s ago",
            "bbbbbbbb  cache       0        run      running  10m ago  5s ago",
        ]
    )
    # a job known only by its adopted allocs (its jobspec went with a lost state database)
    adopted = [{**nomad_alloc(VIEW, [], stub=True), "TaskStates": {"w": {"Events": [{"Type": "Adopted"}]}}}]
    text = fmt.job_status("web", None, fmt.summary_of("web", adopted), adopted, NOW)
    assert text.startswith("ID     = web\nType   = <unknown: adopted allocs only>\nStatus = running\n")
    assert "cache       0       0         1        0       0" in text and "adopted" in text


def test_job_stop_says_which_allocs_stopped() -> None:
    running = nomad_alloc(VIEW, [], stub=True)
    other = {**running, "ID": "c" * 8 + ALLOC_ID[8:]}
    done = {**running, "ClientStatus": "complete"}
    assert fmt.job_stopped("web", {"EvalID": "e" * 36}, [running, other], [done, other], purge=False) == (
        '==> Job "web" stopped\n'
        '    Evaluation "eeeeeeee" finished with status "complete"\n'
        '    Allocation "8c1a2b3c" stopped\n'
        '    Allocation "cccccccc" still stopping'
    )
    assert fmt.job_stopped("web", {"EvalID": "e" * 36}, [running], [], purge=True).endswith(
        '    Allocation "8c1a2b3c" stopped\n==> Job "web" purged'
    )
    assert fmt.job_stopped("web", {}, [done], [done], purge=False).startswith(
        '==> Job "web" stopped (no allocation was running)'
    )


def test_node_status_reads_agent_self_health_and_the_node() -> None:
    stats = health_stats(
        {
            "status": "ok",
            "uptime_seconds": 7500.0,
            "vault": {"configured": True, "authenticated": False, "error": "sealed"},
            "vault_status": {"state": "sealed", "error": "Vault is sealed", "last_request": None},
            "template_worker": {"user": "nobody", "fail_closed": True, "state": "ok", "error": ""},
            "restore_seconds": 0.25,
            "sweeps": 4,
        }
    )
    agent_self = structs.agent_self(
        node_name="client1",
        datacenter="dc1",
        region="global",
        version="0.1.0",
        config={},
        node_id=NODE_ID,
        extra_stats={"fieldlab": stats},
    )
    node = structs.node_json(
        node_id=NODE_ID,
        name="client1",
        datacenter="dc1",
        address="10.0.0.1:4646",
        drivers={
            "docker": {
                "healthy": False,
                "detected": True,
                "description": "docker engine: connection refused",
            },
            "exec": {"healthy": True, "detected": True, "description": "runs processes on the node"},
        },
        attributes={},
        meta={},
        create_index=1,
        modify_index=2,
    )
    allocs = [nomad_alloc(VIEW, [])] * 3 + [nomad_alloc({**VIEW, "status": "failed"}, [])]
    text = fmt.node_status(agent_self, structs.health(True, "ok"), node, allocs, jobs=2)
    assert text.startswith(
        "Name          = client1\nID            = 5f8e2d1c\nStatus        = ready\nVersion       = 0.1.0\n"
        "Uptime        = 2h5m\nVault         = sealed (Vault is sealed)\nTemplates     = ok\n"
        "Datacenter    = dc1\nJobs          = 2\nRestore Time  = 0.250s\nOrphan Sweeps = 4\n"
    ), text
    assert "docker  true      false    docker engine: connection refused" in text
    assert text.endswith("Pending  Running  Failed  Complete  Adopted\n0        3        1       0         0")
    degraded = fmt.node_status(
        {**agent_self, "stats": {"fieldlab": {**stats, "status": "degraded"}}},
        structs.health(False, "templates are not rendered"),
        node,
        [],
        jobs=0,
    )
    assert "Status        = degraded (templates are not rendered)" in degraded
    # a Nomad agent has no stats["fieldlab"]: Nomad's part alone
    nomad_only = fmt.node_status(
        structs.agent_self(
            node_name="n", datacenter="dc1", region="global", version="1.9.3", config={}, node_id=NODE_ID
        ),
        structs.health(True, "ok"),
        node,
        [],
        jobs=0,
    )
    assert "Vault" not in nomad_only and "\nVersion    = 1.9.3\n" in nomad_only


def test_last_lines() -> None:
    assert fmt.last_lines(b"a\nb\nc\n", 2) == b"b\nc\n"
    assert fmt.last_lines(b"a\nb\nno newline", 1) == b"no newline"
    assert fmt.last_lines(b"a\n", 5) == b"a\n" and fmt.last_lines(b"a\n", 0) == b""


class Answers:
    """An ApiClient that answers each GET path from a table."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    def request(self, method: str, path: str, body: Any = None) -> Any:
        return self.answers[path]


def test_an_alloc_prefix_is_found_as_nomads_cli_finds_it() -> None:
    a, b = "ab000000-0000-4000-8000-000000000001", "ab111111-0000-4000-8000-000000000002"
    nomad = Nomad(
        Answers(
            {
                "/v1/allocations?prefix=ab": [{"ID": a}, {"ID": b}],
                "/v1/allocations?prefix=ab1": [{"ID": b}],
                f"/v1/allocations?prefix={a}": [{"ID": a}],
                "/v1/allocations?prefix=cd": [],
            }
        )
    )
    assert nomad.find_alloc("ab1")["ID"] == b and nomad.find_alloc(a)["ID"] == a
    with pytest.raises(
        AgentError, match=r'prefix "ab" matches 2 allocations \(ab000000, ab111111\): give more'
    ):
        nomad.find_alloc("ab")
    with pytest.raises(AgentError, match='no allocation with prefix or id "cd"'):
        nomad.find_alloc("cd")
    with pytest.raises(AgentError, match="a prefix of at least 2 characters"):
        nomad.find_alloc("a")


def test_stream_frames_are_read_however_the_pieces_cut_them() -> None:
    frames = [fsjson.stream_frame(0, b"one\n", "f"), {}, fsjson.stream_frame(4, b"two\n", "f")]
    text = b"".join(json.dumps(f).encode() for f in frames)
    for cut in range(len(text)):
        assert list(cli_logs.frames([text[:cut], text[cut:]])) == frames
    assert [cli_logs.frame_data(f) for f in frames] == [(0, b"one\n"), (0, b""), (4, b"two\n")]
    with pytest.raises(AgentError, match="inside a frame"):
        list(cli_logs.frames([text[:-3]]))


def _ws_pair() -> tuple[wsproto.WSConnection, wsclient.Messages]:
    """A wsproto server (the agent's side, as agent.nomadapi.wsexec runs it) and the CLI's Messages
    over a completed handshake."""
    client = wsproto.WSConnection(wsproto.ConnectionType.CLIENT)
    server = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
    server.receive_data(client.send(wsevents.Request(host="agent", target="/v1/client/allocation/a/exec")))
    (request,) = server.events()
    assert isinstance(request, wsevents.Request)
    client.receive_data(server.send(wsevents.AcceptConnection()))
    assert [type(e) for e in client.events()] == [wsevents.AcceptConnection]
    return server, wsclient.Messages(client)


def test_the_exec_client_joins_fragments_answers_pings_and_takes_the_close() -> None:
    server, messages = _ws_pair()
    wire = (
        server.send(wsevents.TextMessage('{"stdout":', message_finished=False))
        + server.send(wsevents.Ping(b"hi"))  # a ping between a message's fragments
        + server.send(wsevents.TextMessage('{"data":"b2s="}}', message_finished=True))
    )
    got: list[dict[str, object]] = []
    reply = b""
    for i in range(len(wire)):  # however the reads cut the bytes
        more, closed, answer = messages.feed(wire[i : i + 1])
        got += more
        reply += answer
        assert closed is None
    assert got == [{"stdout": {"data": "b2s="}}]
    server.receive_data(reply)
    assert [type(e) for e in server.events()] == [wsevents.Pong]  # the ping answered
    more, closed, answer = messages.feed(server.send(wsevents.CloseConnection(code=1011, reason="boom")))
    assert (more, closed) == ([], wsclient.Closed(1011, "boom"))
    server.receive_data(answer)
    assert [type(e) for e in server.events()] == [wsevents.CloseConnection]  # the close answered


def test_the_exec_client_refuses_a_masked_frame_and_a_message_over_its_limit() -> None:
    _, messages = _ws_pair()
    with pytest.raises(wsclient.WsError, match="broke the websocket protocol"):
        messages.feed(bytes([0x81, 0x82, 1, 2, 3, 4, ord("{") ^ 1, ord("}") ^ 2]))  # a server frame masked
    server, messages = _ws_pair()
    piece = "x" * (1024 * 1024)
    with pytest.raises(wsclient.WsError, match="over 4194304 bytes"):
        for _ in range(5):
            messages.feed(server.send(wsevents.TextMessage(piece, message_finished=False)))


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


# -- every verb end to end: the CLI, real mTLS, the agent's Nomad routes on a fake node

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
SESSION_WAIT = 10.0  # seconds a scripted exec session waits for what the CLI sends


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _job_running(agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    spec = tmp_path / "web.hcl"
    spec.write_text(ONE_TASK)
    code, out, _ = _run(capsys, "job", "run", *agent.flags, str(spec))
    assert code == 0 and out.startswith('==> Job "web" registered (version 0)\n    Evaluation "'), out
    assert '    Allocation "' in out
    alloc: str = agent.core.call(lambda: next(iter(agent.core.runners)))
    return alloc


def test_every_verb_against_an_agent(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = agent.flags
    alloc = _job_running(agent, tmp_path, capsys)

    code, out, _ = _run(capsys, "job", "status", *f)
    assert code == 0 and out.splitlines()[0].split() == [
        "ID",
        "Type",
        "Priority",
        "Status",
        "Running/Allocs",
        "Submitted",
    ]
    assert out.splitlines()[1].split()[:5] == ["web", "service", "50", "running", "1/1"]
    code, out, _ = _run(capsys, "job", "status", *f, "web")
    assert code == 0 and "Status      = running" in out and "Version     = 0" in out
    assert "g           0       0         1        0       0         0     0" in out, out
    assert re.search(rf"\n{alloc[:8]}  g +0 +run +running ", out), out
    code, out, _ = _run(capsys, "job", "status", "-json", *f, "web")
    assert json.loads(out)["Allocations"][0]["ID"] == alloc

    # job inspect prints Nomad's {"Job": ...}: job run takes it back (the same job: no new version)
    code, out, _ = _run(capsys, "job", "inspect", *f, "web")
    assert code == 0 and json.loads(out)["Job"]["ID"] == "web"
    assert json.loads(out)["Job"]["TaskGroups"][0]["Tasks"][0]["Driver"] == "exec"
    (tmp_path / "web.json").write_text(out)
    code, out, _ = _run(capsys, "job", "run", *f, str(tmp_path / "web.json"))
    assert code == 0 and out.startswith('==> Job "web" registered (version 0)'), out
    assert _run(capsys, "job", "inspect", "-hcl", *f, "web")[:2] == (0, ONE_TASK)

    code, out, _ = _run(capsys, "alloc", "status", *f, alloc[:8])
    assert code == 0 and f"ID                  = {alloc}" in out and "Name                = web.g[0]" in out
    assert '\nTask "srv" is "running"\n' in out, out
    assert re.search(r"\n\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S* +Started +Task started by client", out), out
    code, out, _ = _run(capsys, "alloc", "status", "-json", *f, alloc[:8])
    assert json.loads(out)["ID"] == alloc and json.loads(out)["TaskStates"]["srv"]["State"] == "running"
    code, out, _ = _run(capsys, "alloc", "list", *f)
    assert code == 0 and out.splitlines()[1].split()[:6] == [alloc[:8], "web", "g", "0", "run", "running"]

    logs = agent.node.root / "data" / "alloc" / alloc / "alloc" / "logs"
    logs.mkdir(parents=True)
    (logs / "srv.stdout.0").write_bytes(b"line 1\nline 2\n")
    (logs / "srv.stderr.0").write_bytes(b"warning\n")
    assert _run(capsys, "alloc", "logs", *f, alloc[:8])[:2] == (0, "line 1\nline 2\n")
    assert _run(capsys, "alloc", "logs", "-stderr", *f, alloc[:8], "srv")[:2] == (0, "warning\n")
    assert _run(capsys, "alloc", "logs", "-task", "srv", *f, alloc[:8])[:2] == (0, "line 1\nline 2\n")
    assert _run(capsys, "alloc", "logs", "-tail", "-n", "1", *f, alloc[:8])[:2] == (0, "line 2\n")
    assert _run(capsys, "alloc", "logs", "-tail", "-c", "3", *f, alloc[:8])[:2] == (0, " 2\n")

    code, out, _ = _run(capsys, "alloc", "signal", "-s", "hup", *f, alloc[:8])
    assert code == 0 and out == f"Sent SIGHUP to task srv of alloc {alloc[:8]}\n"
    assert agent.node.exec.signals[-1][1] == "SIGHUP"
    code, out, _ = _run(capsys, "alloc", "restart", *f, alloc[:8], "srv")
    assert code == 0 and out == f"Restarting task srv of alloc {alloc[:8]}\n"
    events = agent.core.store.events(alloc)
    assert {"Signaling", "Restart Signaled"} <= {e.type for e in events if e.task == "srv"}, events

    code, out, _ = _run(capsys, "node", "status", *f)
    assert code == 0 and out.startswith("Name          = client1\nID            = 5f8e2d1c\n"), out
    assert "Status        = ready" in out and "Restore Time  = 0.125s" in out and "Jobs          = 1" in out
    assert "exec    true      true     runs processes on the node" in out
    assert "Pending  Running  Failed  Complete  Adopted\n0        1        0       0         0" in out
    agent.health["status"] = "degraded"  # the render worker failing closed: health answers 500
    code, out, _ = _run(capsys, "node", "status", *f)
    assert code == 0 and "Status        = degraded (templates are not rendered)" in out, out
    code, out, _ = _run(capsys, "node", "status", "-json", *f)
    assert json.loads(out)["Self"]["stats"]["fieldlab"]["status"] == "degraded"
    assert json.loads(out)["Health"] == {"client": {"ok": False, "message": "templates are not rendered"}}

    # alloc stop: a managed alloc is replaced, as Nomad's scheduler does
    code, out, _ = _run(capsys, "alloc", "stop", *f, alloc[:8])
    assert code == 0 and out.startswith(f'==> Allocation "{alloc[:8]}" '), out
    assert '    Evaluation "' in out and re.search(r'\n    Allocation "[0-9a-f]{8}" replaces it\n$', out), out
    new = agent.core.call(lambda: next(a for a in agent.core.runners if a != alloc))

    code, out, _ = _run(capsys, "job", "stop", *f, "web")
    assert code == 0 and out.startswith('==> Job "web" stopped\n    Evaluation "'), out
    assert f'    Allocation "{new[:8]}" stopped\n' in out and "still stopping" not in out
    code, out, _ = _run(capsys, "job", "stop", "-purge", *f, "web")
    assert code == 0 and out.endswith('==> Job "web" purged\n'), out
    assert _run(capsys, "job", "status", *f)[1] == "No running jobs\n"


class ScriptedSession:
    """An exec session (agent.drivers.session.ExecSession) the test scripts: its output, then its
    exit code; `echo`: first waits for stdin to end and answers it upper-cased; `hang`: runs until
    killed; `fail`: its output breaks (the command could not run)."""

    def __init__(
        self,
        out: list[tuple[bytes, bytes]],
        code: int,
        *,
        tty: bool,
        echo: bool = False,
        hang: bool = False,
        fail: str = "",
    ) -> None:
        self.tty, self.out, self.code, self.echo, self.hang, self.fail = tty, out, code, echo, hang, fail
        self.stdin = b""
        self.stdin_closed = threading.Event()
        self.sizes: list[tuple[int, int]] = []
        self.killed = threading.Event()

    def read(self) -> tuple[bytes, bytes]:
        if self.echo:
            self.echo = False
            self.stdin_closed.wait(SESSION_WAIT)
            return ef.STDOUT, self.stdin.upper()
        if self.out:
            return self.out.pop(0)
        if self.fail:
            raise RuntimeError(self.fail)
        if self.hang:
            self.killed.wait(SESSION_WAIT * 3)
        return ef.STDOUT, b""

    def write(self, data: bytes) -> None:
        self.stdin += data

    def close_stdin(self) -> None:
        self.stdin_closed.set()

    def resize(self, rows: int, cols: int) -> None:
        self.sizes.append((rows, cols))

    def wait(self, timeout: float) -> int | None:
        return 137 if self.killed.is_set() else self.code

    def kill(self) -> None:
        self.killed.set()


def _script(agent: Agent, make: Any) -> list[tuple[list[str], bool, ScriptedSession]]:
    """Each exec session the agent opens in the fake exec driver: (command, tty, session)."""
    opened: list[tuple[list[str], bool, ScriptedSession]] = []

    def exec_session(handle: TaskHandle, argv: list[str], *, tty: bool, **kw: Any) -> ScriptedSession:
        session: ScriptedSession = make(tty)
        opened.append((argv, tty, session))
        return session

    agent.node.exec.exec_session = exec_session  # type: ignore[method-assign,assignment]
    return opened


def test_exec_speaks_nomads_websocket_with_the_exit_code_and_both_streams(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = agent.flags
    alloc = _job_running(agent, tmp_path, capsys)
    opened = _script(
        agent, lambda tty: ScriptedSession([(ef.STDOUT, b"out\n"), (ef.STDERR, b"err\n")], 7, tty=tty)
    )
    code, out, err = _run(capsys, "alloc", "exec", *f, alloc[:8], "--", "ls", "-la")
    assert (code, out, err) == (7, "out\n", "err\n")
    ((argv, tty, session),) = opened
    assert (argv, tty) == (["ls", "-la"], False)
    assert session.stdin_closed.is_set() and session.stdin == b""  # stdin (the test's) is empty: closed
    # Nomad's form: the task from -task, the command after ALLOC; an exit code past 255 is cut
    opened[:] = []
    _script(agent, lambda tty: ScriptedSession([], 300, tty=tty))
    assert _run(capsys, "alloc", "exec", "-task", "srv", *f, alloc[:8], "true")[0] == 255

    # the command could not run: said, and 126
    _script(agent, lambda tty: ScriptedSession([], 0, tty=tty, fail="exec: no such file: /nope"))
    code, _, err = _run(capsys, "alloc", "exec", *f, alloc[:8], "--", "/nope")
    assert code == 126 and "fieldlab-agent: exec: exec: no such file: /nope" in err

    # past -timeout the CLI goes away, which kills the command
    hung = _script(agent, lambda tty: ScriptedSession([(ef.STDOUT, b"working\n")], 0, tty=tty, hang=True))
    code, out, err = _run(capsys, "alloc", "exec", "-timeout", "0.5", *f, alloc[:8], "--", "sleep", "60")
    assert (code, out) == (126, "working\n") and "ran past -timeout 0.5s" in err
    assert hung[0][2].killed.wait(SESSION_WAIT), "the command outlived its caller"


def test_an_interactive_exec_sends_stdin_and_the_terminal_size_as_it_changes(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    alloc = _job_running(agent, tmp_path, capsys)
    opened = _script(agent, lambda tty: ScriptedSession([], 3, tty=tty, echo=True))
    size = [(33, 101)]
    monkeypatch.setattr(cli_session, "terminal_size", lambda: size[0])
    read_end, write_end = os.pipe()
    monkeypatch.setattr(sys, "stdin", os.fdopen(read_end, "rb", buffering=0))

    def typist() -> None:  # the user types, resizes the window, then ends stdin
        wait_until(
            lambda: (True if opened and opened[0][2].sizes else None, "no session"),
            timeout=SESSION_WAIT,
            what="the session's first size",
            interval=0.05,
        )
        os.write(write_end, b"hello\n")
        size[0] = (40, 120)
        os.kill(os.getpid(), signal.SIGWINCH)
        wait_until(
            lambda: (True if len(opened[0][2].sizes) > 1 else None, str(opened[0][2].sizes)),
            timeout=SESSION_WAIT,
            what="the new size",
            interval=0.05,
        )
        os.close(write_end)

    t = threading.Thread(target=typist, daemon=True)
    t.start()
    code, out, _ = _run(capsys, "alloc", "exec", "-i", "-t", *agent.flags, alloc[:8], "--", "sh")
    t.join(SESSION_WAIT)
    ((argv, tty, session),) = opened
    assert (code, out, argv, tty) == (3, "HELLO\n", ["sh"], True)
    assert session.sizes == [(33, 101), (40, 120)] and session.stdin == b"hello\n"


def test_a_terminal_without_a_size_is_taken_as_24_by_80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_session.os, "get_terminal_size", lambda fd: os.terminal_size((0, 0)))
    assert cli_session.terminal_size() == (24, 80)
    monkeypatch.setattr(cli_session.os, "get_terminal_size", lambda fd: os.terminal_size((132, 50)))
    assert cli_session.terminal_size() == (50, 132)


def _until(stream: Any, text: bytes, seen: bytearray) -> bytes:
    """Read `stream` (a subprocess's pipe) until `text` has come."""
    deadline = time.monotonic() + SESSION_WAIT
    while text not in seen:
        left = deadline - time.monotonic()
        assert left > 0 and select.select([stream], [], [], left)[0], f"no {text!r}: {bytes(seen)!r}"
        more = os.read(stream.fileno(), 65536)
        assert more, f"ended before {text!r}: {bytes(seen)!r}"
        seen += more
    return bytes(seen)


def test_logs_follow_from_the_tail_until_ctrl_c_and_on_into_the_next_file(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    alloc = _job_running(agent, tmp_path, capsys)
    logs = agent.node.root / "data" / "alloc" / alloc / "alloc" / "logs"
    logs.mkdir(parents=True)
    stdout = logs / "srv.stdout.0"
    stdout.write_bytes(b"line 1\nline 2\n")
    follow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "alloc",
            "logs",
            "-f",
            "-tail",
            "-n",
            "1",
            *agent.flags,
            alloc[:8],
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        out = bytearray()
        _until(follow.stdout, b"line 2\n", out)
        with stdout.open("ab") as log:
            log.write(b"line 3\n")
        assert _until(follow.stdout, b"line 3\n", out) == b"line 2\nline 3\n"
        (logs / "srv.stdout.1").write_bytes(b"new\n")  # logmon rotated: the next file
        assert _until(follow.stdout, b"new\n", out) == b"line 2\nline 3\nnew\n"
        follow.send_signal(signal.SIGINT)
        assert follow.wait(SESSION_WAIT) == 0
        assert follow.stderr is not None and b"started again" not in follow.stderr.read()
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()


def test_a_followed_log_starting_again_in_one_file_is_said(capsys: pytest.CaptureFixture[str]) -> None:
    from agent.cli.logs import followed

    def frame(data: bytes, end: int, file: str = "alloc/logs/web.stdout.0") -> dict[str, object]:
        return {"Data": base64.b64encode(data).decode(), "Offset": end, "File": file}

    frames = [
        frame(b"abc", 3),
        {},
        frame(b"de", 5),
        frame(b"x", 1, "alloc/logs/web.stdout.1"),  # a rotation: not a restart
        frame(b"new", 3, "alloc/logs/web.stdout.1"),  # before where the file was: a new container
    ]
    assert list(followed(frames, "stdout")) == [b"abc", b"", b"de", b"x", b"new"]
    assert capsys.readouterr().err.count("the stdout log started again") == 1


def test_errors_are_one_line_naming_what_failed_with_the_agents_reason(
    agent: Agent, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = agent.flags
    code, _, err = _run(capsys, "alloc", "status", *f, "ffffffff")
    assert code == 2 and err == 'fieldlab-agent: error: no allocation with prefix or id "ffffffff"\n'
    code, _, err = _run(capsys, "alloc", "logs", *f, "f", "srv")
    assert code == 2 and "prefix of at least 2 characters" in err
    code, _, err = _run(capsys, "alloc", "signal", "-s", "NOPE", *f, "ffffffff")
    assert code == 2 and "signal 'NOPE': not a signal name" in err
    code, _, err = _run(capsys, "alloc", "exec", *f, "-timeout", "0", "ffffffff", "--", "ls")
    assert code == 2 and "-timeout 0: more than 0" in err
    code, _, err = _run(capsys, "job", "inspect", *f, "nope")
    assert code == 2 and err == "fieldlab-agent: error: job nope: HTTP 404: job not found\n"

    alloc = _job_running(agent, tmp_path, capsys)
    code, _, err = _run(capsys, "alloc", "exec", "-task", "nope", *f, alloc[:8], "ls")
    assert code == 2 and err == (
        f"fieldlab-agent: error: exec in task nope of alloc {alloc[:8]}: HTTP 404: "
        f"task 'nope' not found in alloc {alloc}\n"
    )
    code, _, err = _run(capsys, "alloc", "signal", "-task", "nope", *f, alloc[:8])
    assert code == 2 and f"signal SIGKILL to alloc {alloc[:8]}: HTTP 404: Failed to signal task" in err
    assert "\n" not in err.rstrip("\n") and "Traceback" not in err
    code, _, err = _run(capsys, "node", "status", "-address", "https://127.0.0.1:1", *f[1:])
    assert code == 2 and err.startswith(
        "fieldlab-agent: error: cannot reach the agent at https://127.0.0.1:1"
    )


def test_the_jwks_of_the_agents_workload_identity_key_is_served_as_nomads(agent: Agent) -> None:
    """GET /.well-known/jwks.json (Nomad's JWKSPath): the RSA key the agent signs tasks' identities
    with, by its id; a token the agent signed verifies against it (tests/test_identity.verify)."""
    from tests.test_identity import verify

    flags = dict(zip(agent.flags[1::2], agent.flags[2::2], strict=True))
    address = agent.flags[0].split("=", 1)[1]
    resp = requests.get(
        f"{address}/.well-known/jwks.json",
        verify=flags["-ca-cert"],
        cert=(flags["-client-cert"], flags["-client-key"]),
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    jwks = resp.json()
    keyring = agent.core.deps.keyring
    assert keyring is not None
    (key,) = jwks["keys"]
    assert (key["kty"], key["alg"], key["use"], key["kid"]) == ("RSA", "RS256", "sig", keyring.key_id)
    assert verify(keyring.sign({"sub": "x"}), jwks) == {"sub": "x"}


def test_a_driver_health_change_is_a_node_stream_event(agent: Agent) -> None:
    """GET /v1/event/stream?topic=Node: a driver's health changing is a NodeStreamEvent (Nomad's
    TypeNodeEvent) and a NodeRegistration (the node's update), the api.Node as payload."""
    api = agent.api
    assert api is not None
    flags = dict(zip(agent.flags[1::2], agent.flags[2::2], strict=True))
    address = agent.flags[0].split("=", 1)[1]
    up = {"docker": {"healthy": True, "detail": "docker engine 27.3"}}
    agent.core.call(lambda: api.drivers_checked(up))
    start = agent.core.changes.current()
    params = [("topic", "Node"), ("index", str(start))]
    with requests.get(
        f"{address}/v1/event/stream",
        params=params,
        verify=flags["-ca-cert"],
        cert=(flags["-client-cert"], flags["-client-key"]),
        stream=True,
        timeout=30,
    ) as stream:
        down = {"docker": {"healthy": False, "detail": "the docker engine did not answer within 3s"}}
        agent.core.call(lambda: api.drivers_checked(down))
        deadline = time.monotonic() + 20
        for line in stream.iter_lines():
            assert time.monotonic() < deadline, "no Node event in the stream"
            if line and line != b"{}":
                break
    events = json.loads(line)["Events"]
    assert [e["Type"] for e in events] == ["NodeRegistration", "NodeStreamEvent"], events
    node = events[1]["Payload"]["Node"]
    assert node["Events"][-1]["Message"] == "the docker engine did not answer within 3s", node["Events"]
