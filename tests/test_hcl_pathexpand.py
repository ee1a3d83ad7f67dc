"""HCL2's pathexpand(), as Nomad's jobspec2: `~` expanded with the home directory of the user running
the parse (the CLI's user), refused over the API as Nomad's HTTP parse refuses filesystem functions."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from agent.jobspec import JobspecError, load_jobspec, parse_jobspec


def _spec(expr: str) -> str:
    return (
        'job "j" {\n  group "g" {\n    task "t" {\n      driver = "exec"\n'
        f'      config {{ command = "/bin/true" }}\n      env {{ P = {expr} }}\n    }}\n  }}\n}}\n'
    )


def _env(tmp_path: Path, expr: str) -> Mapping[str, str]:
    spec = tmp_path / "job.hcl"
    spec.write_text(_spec(expr))
    return load_jobspec(spec).job.groups[0].tasks[0].env


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('pathexpand("~/.ssh/id_rsa")', "/home/op/.ssh/id_rsa"),
        ('pathexpand("~")', "/home/op"),
        ('pathexpand("~/a/../b//c/")', "/home/op/b/c"),  # joined and cleaned, as Go's filepath.Join
        ('pathexpand("/etc/hosts")', "/etc/hosts"),
        ('pathexpand("rel/~/x")', "rel/~/x"),  # only a leading ~
        ('pathexpand("")', ""),
    ],
)
def test_a_leading_tilde_is_the_home_of_the_user_running_the_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, expr: str, expected: str
) -> None:
    monkeypatch.setenv("HOME", "/home/op")
    assert _env(tmp_path, expr)["P"] == expected


def test_without_home_the_passwd_entry_of_the_user_is_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os
    import pwd

    monkeypatch.delenv("HOME", raising=False)
    assert _env(tmp_path, 'pathexpand("~/x")')["P"] == pwd.getpwuid(os.getuid()).pw_dir.rstrip("/") + "/x"


def test_another_users_home_is_an_error(tmp_path: Path) -> None:
    spec = tmp_path / "job.hcl"
    spec.write_text(_spec('pathexpand("~root/x")'))
    with pytest.raises(JobspecError, match="cannot expand user-specific home dir"):
        load_jobspec(spec)


def test_over_the_api_it_is_refused_as_a_filesystem_function(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nomad's HTTP parse runs with filesystem functions disabled: the agent's home never leaks in."""
    monkeypatch.setenv("HOME", "/home/agent")
    bundles: tuple[dict[str, str] | None, ...] = (None, {})
    for files in bundles:
        with pytest.raises(JobspecError, match="file functions are not available here") as info:
            parse_jobspec(_spec('pathexpand("~/x")'), source="<request>", files=files)
        assert "/home/agent" not in str(info.value)
