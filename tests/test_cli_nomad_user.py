"""`fieldlab-agent` as a user of Nomad's CLI meets it: `alloc logs -f -tail` prints the last lines
at once while the task keeps logging, a reader that goes away (`| head -1`) ends the CLI quietly,
`alloc exec` passes stdin by default (Nomad's -i defaults to true), NOMAD_ADDR and the TLS variables
are read as Nomad's CLI reads them, `alloc status` is laid out as `nomad alloc status`."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from agent.cli import logs as cli_logs
from tests.agent_api import Agent

SESSION_WAIT = 10.0  # seconds a subprocess of the CLI gets to answer
TICKS = 60  # lines a busy task writes, TICK apart, before it stops
TICK = 0.1  # seconds between them: never the 1 s of quiet the old window waited for


# -- 1. alloc logs -f -tail -n N: the last N lines at once, then the rest as it comes --------------


def test_a_followed_tail_prints_its_last_lines_while_the_task_keeps_logging() -> None:
    """The task logs every TICK seconds and never falls quiet for 1 s: its last 3 lines come out
    while it is still logging (the old window waited for 1 s of quiet, i.e. here for the task's
    last line), and every later line follows in order, none lost or doubled."""
    written: list[bytes] = []
    seen_first = threading.Event()

    def busy_task() -> Iterator[bytes]:
        backlog = b"".join(b"old %d\n" % i for i in range(1, 21))
        written.append(backlog)
        yield backlog
        for k in range(TICKS):
            if seen_first.wait(TICK):
                break
            line = b"tick %d\n" % k
            written.append(line)
            yield line

    out = cli_logs.tail_lines(busy_task(), 3)
    first = next(out)
    seen_first.set()
    ticks_before = sum(1 for w in written if w.startswith(b"tick"))
    assert ticks_before < TICKS, "the last lines came out only once the task had stopped logging"
    rest = b"".join(out)
    assert len(first.splitlines()) == 3, first
    assert b"".join(written).endswith(first + rest), (first, rest)


# -- 3. a reader that goes away: a quiet end, as a Unix CLI's ----------------------------------------


def _cli(*argv: str, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "agent.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **kw,  # type: ignore[call-overload]
    )


def _running(agent: Agent, tmp_path: Path) -> str:
    from agent import cli

    spec = tmp_path / "web.hcl"
    spec.write_text(
        'job "web" {\n  group "g" {\n    task "srv" {\n      driver = "exec"\n'
        '      config { command = "/bin/sleep" }\n    }\n  }\n}\n'
    )
    assert cli.main(["job", "run", "-detach", *agent.flags, str(spec)]) == 0
    alloc: str = agent.core.call(lambda: next(iter(agent.core.runners)))
    return alloc


def test_a_log_piped_into_head_ends_quietly(agent: Agent, tmp_path: Path) -> None:
    """`fieldlab-agent alloc logs ID | head -1`: head reads one line and goes away; the CLI ends as
    Nomad's does (killed by SIGPIPE: exit 141 in a shell), with nothing on stderr."""
    alloc = _running(agent, tmp_path)
    logs = agent.node.root / "data" / "alloc" / alloc / "alloc" / "logs"
    logs.mkdir(parents=True)
    (logs / "srv.stdout.0").write_bytes(b"".join(b"line %d\n" % i for i in range(200_000)))
    for follow in ([], ["-f"]):
        cli = _cli("alloc", "logs", *follow, *agent.flags, alloc[:8])
        assert cli.stdout is not None and cli.stderr is not None
        assert cli.stdout.readline() == b"line 0\n"
        cli.stdout.close()  # what head does after its line
        code = cli.wait(SESSION_WAIT)
        err = cli.stderr.read().decode()
        assert "Traceback" not in err and "BrokenPipe" not in err, err
        assert (code, err) == (141, ""), follow
