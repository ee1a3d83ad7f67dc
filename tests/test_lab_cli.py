"""`fieldlab`'s own verbs: --version, `lab env` (exports for fieldlab-agent), `lab ssh NODE [--lab X]
-- CMD` (options after the node stay options), `lab status` for a lab that is not up, and the
argv of the e2e, repro and report wrappers. No lab: a lab record in a temporary FIELDLAB_HOME and a
stand-in provider."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from lab import __version__, cli, suites
from lab.config import LabPaths
from lab.errors import LabError
from lab.providers.base import LabRecord, Node, NodeState


class FakeProvider:
    name = "docker"

    def __init__(self, states: dict[str, str]) -> None:
        self.states = states

    def status(self, record: LabRecord, paths: LabPaths) -> list[NodeState]:
        return [NodeState(n.name, n.address, self.states.get(n.name, "running")) for n in record.nodes]

    def ssh_argv(self, record: LabRecord, paths: LabPaths, node: str) -> list[str]:
        return ["ssh", f"root@{record.node(node).address}", f"#lab={record.name}"]


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FIELDLAB_HOME", str(tmp_path))
    monkeypatch.delenv("LAB", raising=False)
    return tmp_path


def _lab(name: str, *, secrets: bool = True) -> LabPaths:
    paths = LabPaths(name)
    paths.ensure()
    nodes = [Node("server1", "server", "10.213.7.10"), Node("client1", "client", "10.213.7.11")]
    LabRecord(name, "docker", nodes, subnet="10.213.7.0/24").save(paths)
    if secrets:
        paths.secrets_dir.mkdir(mode=0o700, exist_ok=True)
        for f in ("ca.pem", "operator.crt", "operator.key"):
            (paths.secrets_dir / f).write_text("x")
    return paths


def test_e2e_shrink_runs_the_shrinker_on_the_run_dir(tmp_path: Path) -> None:
    args = _parse("e2e", "shrink", str(tmp_path / "run"), "--lab", "x")
    assert suites.shrink_argv(args)[1:] == ["-m", "e2e.drivers.shrink", str(tmp_path / "run"), "--lab", "x"]
    with pytest.raises(LabError, match="say which failed chaos run"):
        suites.shrink_argv(_parse("e2e", "shrink"))


def test_repro_new_and_a_scenario_file(tmp_path: Path) -> None:
    args = _parse("repro", "new", "nomad-1", "--jobspec", "report.hcl")
    assert suites.repro_argv(args)[1:5] == ["-m", "e2e.drivers.repro", "new", "nomad-1"]
    assert suites.repro_argv(args)[-1] == str(Path("report.hcl").resolve())
    with pytest.raises(LabError, match="say the bug id"):
        suites.repro_argv(_parse("repro", "new"))
    own = suites.repro_argv(_parse("repro", "mine/x.yml", "--lab", "y"))
    assert own[-1] == str(Path("mine/x.yml").resolve()) and own[3:5] == ["--lab", "y"]


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0 and capsys.readouterr().out == f"fieldlab v{__version__}\n"


def test_env_prints_the_exports_for_a_clients_agent(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = _lab("x")
    assert cli.main(["lab", "env", "client1", "--lab", "x"]) == 0
    out, err = capsys.readouterr()
    s = paths.secrets_dir
    assert out == (
        "export FIELDLAB_AGENT_ADDR=https://10.213.7.11:4646\n"
        f"export FIELDLAB_AGENT_CACERT={s / 'ca.pem'}\n"
        f"export FIELDLAB_AGENT_CLIENT_CERT={s / 'operator.crt'}\n"
        f"export FIELDLAB_AGENT_CLIENT_KEY={s / 'operator.key'}\n"
        "export NOMAD_ADDR=https://10.213.7.11:4646\n"
        f"export NOMAD_CACERT={s / 'ca.pem'}\n"
        f"export NOMAD_CLIENT_CERT={s / 'operator.crt'}\n"
        f"export NOMAD_CLIENT_KEY={s / 'operator.key'}\n"
    )
    assert err == ""


def test_env_quotes_paths_and_warns_when_the_secrets_are_not_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = tmp_path / "my labs"
    monkeypatch.setenv("FIELDLAB_HOME", str(odd))
    _lab("y", secrets=False)
    assert cli.main(["lab", "env", "--lab", "y", "client1"]) == 0
    out, err = capsys.readouterr()
    assert f"export FIELDLAB_AGENT_CACERT='{odd}/state/y/secrets/ca.pem'\n" in out
    assert "WARNING: lab y: not there yet (is the lab provisioned?)" in err


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["lab", "env", "server1", "--lab", "x"],
            "server1 is a server: it runs no fieldlab-agent (clients: client1)",
        ),
        (["lab", "env", "client9", "--lab", "x"], "lab x has no node 'client9' (nodes: server1, client1)"),
        (["lab", "env", "client1", "--lab", "nope"], "lab nope is not up"),
    ],
)
def test_env_errors_are_one_line(
    home: Path, capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    _lab("x")
    assert cli.main(argv) == 2
    assert needle in capsys.readouterr().err


def test_status_of_a_lab_that_is_not_up_is_an_error_naming_it(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in (["lab", "status", "--lab", "gone"], ["lab", "status", "--lab", "gone", "--json"]):
        assert cli.main(argv) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.startswith("fieldlab: error: lab gone is not up: run `make lab-up`")


def test_status_json_and_its_exit_code(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _lab("x")
    provider = FakeProvider({})
    monkeypatch.setattr(cli, "provider_for", lambda name: provider)
    assert cli.main(["lab", "status", "--lab", "x", "--json"]) == 0
    nodes = json.loads(capsys.readouterr().out)
    assert [(n["name"], n["state"]) for n in nodes] == [("server1", "running"), ("client1", "running")]
    provider.states["client1"] = "exited"
    assert cli.main(["lab", "status", "--json", "--lab", "x"]) == 1


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["lab", "ssh", "client1", "--lab", "x"], ["ssh", "root@10.213.7.11", "#lab=x"]),
        (
            ["lab", "ssh", "client1", "--lab", "x", "--", "journalctl", "-u", "fieldlab-agent", "--lab"],
            ["ssh", "root@10.213.7.11", "#lab=x", "journalctl", "-u", "fieldlab-agent", "--lab"],
        ),
        (["lab", "ssh", "--lab", "x", "client1", "uptime"], ["ssh", "root@10.213.7.11", "#lab=x", "uptime"]),
    ],
)
def test_ssh_options_after_the_node_are_options_and_the_command_follows_the_double_dash(
    home: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: list[str]
) -> None:
    _lab("x")
    _lab("default")
    monkeypatch.setattr(cli, "provider_for", lambda name: FakeProvider({}))
    ran: list[list[str]] = []

    def execvp(file: str, args: list[str]) -> None:
        ran.append(list(args))

    monkeypatch.setattr(cli.os, "execvp", execvp)
    cli.main(argv)
    assert ran == [expected]
    if argv[-1] == "uptime":  # from a terminal, a command gets a tty too (an `alloc exec -i -t` in it)
        monkeypatch.setattr(cli.sys.stdin, "isatty", lambda: True, raising=False)
        cli.main(argv)
        assert ran[-1] == ["ssh", "-t", *expected[1:]]


def _parse(*argv: str) -> Any:
    head, command = cli.split_command(list(argv))
    args = cli.build_parser().parse_args(head)
    if command:
        args.pytest_args = [*args.pytest_args, *command]
    return args


def test_the_suite_wrappers_run_what_the_make_targets_run() -> None:
    py = sys.executable
    assert suites.e2e_argv(_parse("e2e", "--lab", "x", "--smoke", "--loops", "5")) == [
        py, "-m", "pytest", "e2e", "-m", "e2e and not nightly", "--lab", "x", "--loops", "5",
    ]  # fmt: skip
    args = _parse("e2e", "--seed", "42", "--chaos-minutes", "1.5", "-k", "restore", "--", "-x", "--lf")
    assert suites.e2e_argv(args)[4:] == [
        "--lab",
        "default",
        "--chaos-minutes",
        "1.5",
        "--seed",
        "42",
        "-k",
        "restore",
        "-x",
        "--lf",
    ]
    assert suites.repro_argv(_parse("repro", "nomad-24292", "--lab", "x")) == [
        py, "-m", "e2e.drivers.repro", "--lab", "x", "nomad-24292",
    ]  # fmt: skip
    argv = suites.report_argv(_parse("report", "e2e/reports/run1"))
    assert argv[:3] == [py, "-m", "e2e.harness.report"] and argv[3].endswith("e2e/reports/run1")
    assert Path(argv[3]).is_absolute()


def test_lab_up_runs_every_role_unless_every_node_is_on_the_current_bake_and_no_full_run_is_asked() -> None:
    from lab.provision import provision_plan

    assert provision_plan(on_bake=True, full=False) == "per-lab"
    assert provision_plan(on_bake=False, full=False) == "every role"  # bare nodes, or an older bake
    assert provision_plan(on_bake=True, full=True) == "every role"  # --full: drift repaired
    args = cli.build_parser().parse_args(["lab", "up", "--full"])
    assert args.full is True


def test_lab_down_says_what_it_removed_in_one_short_line_for_a_fleet() -> None:
    from lab.cli import removed_summary

    removed = (
        [f"container fieldlab-fleet-light{i:03d}" for i in range(1, 99)]
        + [f"volume fieldlab-fleet-light{i:03d}-cni" for i in range(1, 99)]
        + ["network fieldlab-fleet"]
    )
    line = removed_summary(removed)
    assert line.startswith(
        "197 objects (98 containers, 98 volumes, 1 network): container fieldlab-fleet-light001"
    )
    assert line.endswith("... (189 more)") and len(line) < 400
    assert removed_summary(["network x"]) == "1 object (1 network): network x"
    assert removed_summary([]) == "0 objects"
