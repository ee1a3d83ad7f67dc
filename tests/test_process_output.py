"""The process drivers' host-side plumbing, without root: a command's output is kept as it streams,
only its tail (a change script that prints 200 MB once took the agent to 587 MB RSS); the task's
environment is carried under names no loader or shell reads, and only the last step makes it the
environment (a command run that way sees exactly the task's variables, odd ones included)."""

from __future__ import annotations

import subprocess
import time

from agent.drivers.hostproc import (
    CARRIER_EXEC,
    EXEC_OUTPUT_MAX,
    HOST_ENV,
    carried_env,
    carry_env,
    enter_task_env,
    run_command,
)


def test_a_commands_output_is_cut_to_its_tail_as_it_streams() -> None:
    script = "head -c 20000000 /dev/zero | tr '\\0' x; echo END"
    code, out = run_command(["/bin/sh", "-c", script], None, 60.0)
    assert code == 0 and len(out) == EXEC_OUTPUT_MAX and out.endswith("xEND\n")


def test_a_command_past_its_timeout_is_killed_with_what_it_started() -> None:
    # The background sleep holds the output pipe open: the read ends at the deadline all the same.
    started = time.monotonic()
    code, out = run_command(["/bin/sh", "-c", "sleep 30 & sleep 30"], None, 0.5)
    assert code == -1 and out.startswith("timed out"), out
    assert time.monotonic() - started < 10.0, "the read waited for the background child"


def test_the_carried_environment_holds_no_task_variable_by_its_own_name() -> None:
    task = {"LD_PRELOAD": "/alloc/x.so", "BASH_ENV": "/alloc/x.sh", "PATH": "/opt/bin"}
    env = carry_env(task)
    assert "LD_PRELOAD" not in env and "BASH_ENV" not in env and env["PATH"] == HOST_ENV["PATH"]
    assert carried_env(env) == task
    assert carried_env(HOST_ENV) is None


def test_the_last_step_makes_exactly_the_task_environment() -> None:
    task = {"A": "1", "SPACES": "a b  c", "QUOTES": 'it\'s "x" $HOME `id`', "-dash": "d", "dot.ted": "e"}
    out = subprocess.run(
        [*enter_task_env("/bin/sh", "/usr/bin/env"), "/usr/bin/env", "-0"],
        env=carry_env(task),
        capture_output=True,
        check=True,
    ).stdout.decode()
    seen = dict(kv.split("=", 1) for kv in out.split("\0") if kv)
    assert seen == task, seen
    assert CARRIER_EXEC not in seen
