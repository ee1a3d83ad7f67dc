"""`fieldlab-agent job validate`: offline, per-file verdicts, a summary table, exit codes 0/1/2;
and -var / -var-file, on validate and on `job run`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent import cli
from agent.cli import validate

GOOD = """\
job "good" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "nginx:1.27"
      }
    }
  }
}
"""

WARNS = """\
job "warns" {
  priority = 70
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "nginx:1.27"
      }
    }
  }
}
"""

BAD = """\
job "bad" {
  group "g" {
    count = -1
    task "t" {
      driver = "docker"
      config {
        image = "nginx:1.27"
      }
    }
  }
}
"""

BAD_TEMPLATE = """\
job "badtpl" {
  group "web" {
    task "srv" {
      driver = "docker"
      config {
        image = "nginx:1.27"
      }
      template {
        data        = "{{ if }}"
        destination = "local/x"
      }
    }
  }
}
"""

VARIABLE = """\
variable "image" {
  type = string
}

job "withvar" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = var.image
      }
    }
  }
}
"""


FOUR_VARS = """\
variable "image" {
  type    = string
  default = "nginx:1.27"
}
variable "region" {
  type    = string
  default = "us"
}
variable "count" {
  type    = string
  default = "1"
}
variable "zone" {
  type    = string
  default = "a"
}

job "fourvars" {
  meta {
    where = "${var.region}-${var.zone}-${var.count}"
  }
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = var.image
      }
    }
  }
}
"""


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["job", "validate", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_an_accepted_file_exits_0_and_the_summary_counts_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _write(tmp_path, "good.hcl", GOOD)
    code, out, err = _run(capsys, str(f))
    assert code == 0, out + err
    assert f"{f}: accepted\n" in out
    assert "summary: 1 file\n" in out
    assert "  accepted                    1  100.0 %" in out
    assert "  refused                     0    0.0 %" in out
    assert not err


def test_warnings_are_counted_listed_indented_and_exit_0(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _write(tmp_path, "warns.nomad", WARNS)
    code, out, _ = _run(capsys, str(f))
    assert code == 0
    result = validate.validate_file(f)
    n = len(result.warnings)
    assert n >= 1
    assert f"{f}: accepted with {n} warning{'s' if n != 1 else ''}\n" in out
    for warning in result.warnings:
        assert f"\n    {warning}\n" in out
    assert "most frequent warnings:" in out
    assert "priority" in out.split("most frequent warnings:")[1]


def test_a_refused_file_exits_1_with_each_reason_and_its_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _write(tmp_path, "bad.hcl", BAD)
    code, out, _ = _run(capsys, str(f))
    assert code == 1
    assert f"{f}: refused\n" in out
    assert "    job.bad.group.g.count: " in out
    tail = out.split("most frequent refusals:")[1]
    assert "group.*.count: " in tail  # names abstracted
    assert "job.bad" not in tail


def test_a_template_problem_refuses_the_file_at_the_templates_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _write(tmp_path, "tpl.hcl", BAD_TEMPLATE)
    code, out, _ = _run(capsys, str(f))
    assert code == 1
    assert "    job.badtpl.group.web.task.srv.template[0]: " in out
    assert "group.*.task.*.template: " in out.split("most frequent refusals:")[1]


def test_a_directory_is_walked_recursively_sorted_by_suffix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, "b.hcl", GOOD)
    _write(tmp_path, "a/z.nomad", GOOD)
    _write(tmp_path, "a/y.json", json.dumps({"Job": {"ID": "j", "TaskGroups": [
        {"Name": "g", "Tasks": [{"Name": "t", "Driver": "docker", "Config": {"image": "x:1"}}]}
    ]}}))  # fmt: skip
    _write(tmp_path, "notes.txt", "not a jobspec")
    _write(tmp_path, "c/README.md", "# docs")
    code, out, _ = _run(capsys, str(tmp_path))
    listed = [line.split(": ")[0] for line in out.splitlines() if line.startswith(str(tmp_path))]
    assert listed == [str(tmp_path / "a/y.json"), str(tmp_path / "a/z.nomad"), str(tmp_path / "b.hcl")]
    assert "summary: 3 files" in out
    assert code == 0, out


def test_mixed_results_exit_1_and_percentages_add_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write(tmp_path, "1.hcl", GOOD)
    _write(tmp_path, "2.hcl", WARNS)
    _write(tmp_path, "3.hcl", BAD)
    _write(tmp_path, "4.hcl", GOOD)
    code, out, _ = _run(capsys, str(tmp_path))
    assert code == 1
    assert "  accepted                    2   50.0 %" in out
    assert "  accepted with warnings      1   25.0 %" in out
    assert "  refused                     1   25.0 %" in out


def test_a_missing_path_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _run(capsys, str(tmp_path / "nope.hcl"))
    assert code == 2
    assert "nope.hcl" in err
    assert "no such file or directory" in err
    assert "Traceback" not in out + err


def test_an_unreadable_file_is_a_usage_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "loop.hcl"
    f.symlink_to(f)  # unreadable even for root: ELOOP
    code, out, err = _run(capsys, str(f))
    assert code == 2
    assert "loop.hcl" in err and "Traceback" not in out + err


def test_no_arguments_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["job", "validate"])
    assert exc.value.code == 2


@pytest.mark.parametrize(
    "data",
    [
        bytes(range(256)) * 4,
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR",
        b'job "x" {\x00}',
        'job "\u00e9" {}'.encode("latin-1"),
    ],
)
def test_a_binary_file_is_refused_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes
) -> None:
    f = tmp_path / "blob.hcl"
    f.write_bytes(data)
    code, out, err = _run(capsys, str(f))
    assert code == 1
    assert f"{f}: refused\n" in out
    assert "Traceback" not in out + err


@pytest.mark.parametrize(
    "text",
    ["", "{", "job", 'job "x" {', '{"Job": []}', "[1, 2]", 'job "a" {}\njob "b" {}', "}" * 5000, "{" * 5000],
)
def test_garbage_is_refused_never_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    f = _write(tmp_path, "g.hcl", text)
    code, out, err = _run(capsys, str(f))
    assert code == 1
    assert "Traceback" not in out + err


def test_variables_reach_the_parser(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[dict[str, object]] = []
    import agent.jobspec

    real = agent.jobspec.parse_jobspec

    def spy(text: str, **kwargs: Any) -> Any:
        seen.append(dict(kwargs["variables"] or {}))
        return real(text, **kwargs)

    monkeypatch.setattr(agent.jobspec, "parse_jobspec", spy)
    f = _write(tmp_path, "four.hcl", FOUR_VARS)
    hcl_vars = _write(tmp_path, "vars.hcl", 'region = "eu"\ncount = "1"\n')
    json_vars = _write(tmp_path, "vars.json", json.dumps({"count": "2", "zone": "b"}))
    code, out, err = _run(
        capsys, str(f), "-var", "image=redis:7", "-var-file", str(hcl_vars), "-var-file", str(json_vars),
        "-var", "count=3",
    )  # fmt: skip
    assert code == 0, out + err
    assert seen == [{"image": "redis:7", "region": "eu", "count": "3", "zone": "b"}]


def test_a_variable_without_a_default_takes_its_value_from_var(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _write(tmp_path, "v.hcl", VARIABLE)
    code, out, _ = _run(capsys, str(f))
    assert code == 1, out
    code, out, _ = _run(capsys, str(f), "-var", "image=redis:7")
    assert code == 0, out
    vf = _write(tmp_path, "v.vars.hcl", 'image = "redis:7"\n')
    code, out, _ = _run(capsys, "-var-file", str(vf), str(f))
    assert code == 0, out


@pytest.mark.parametrize(
    "args", [["-var", "novalue"], ["-var", "=x"], ["-var-file", "/nonexistent/vars.hcl"]]
)
def test_bad_variables_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    f = _write(tmp_path, "good.hcl", GOOD)
    code, out, err = _run(capsys, str(f), *args)
    assert code == 2
    assert err.startswith("fieldlab-agent: error: ")
    assert "Traceback" not in out + err


def test_a_var_file_with_bad_syntax_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    f = _write(tmp_path, "good.hcl", GOOD)
    vf = _write(tmp_path, "bad.hcl", "image = = \n")
    code, _, err = _run(capsys, str(f), "-var-file", str(vf))
    assert code == 2
    assert "bad.hcl" in err


class _FakeApi:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, body))
        return [] if path.endswith("/allocations") else {"EvalID": "e1", "Version": 0}


def test_job_run_parses_here_with_the_variables_and_registers_nomads_job_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.cli import commands

    api = _FakeApi()
    monkeypatch.setattr(commands, "client", lambda args: api)
    f = _write(tmp_path, "v.hcl", VARIABLE)
    vf = _write(tmp_path, "vars.json", json.dumps({"image": "nginx:1"}))
    assert cli.main(["job", "run", str(f), "-var", "image=redis:7", "-var-file", str(vf)]) == 0
    out = capsys.readouterr().out
    assert out.startswith('==> Job "withvar" registered (version 0)'), out
    (method, path, body), *_ = api.calls
    assert (method, path) == ("PUT", "/v1/jobs")
    task = body["Job"]["TaskGroups"][0]["Tasks"][0]
    assert body["Job"]["ID"] == "withvar" and task["Config"]["image"] == "redis:7", (
        "the variable was applied here"
    )
    assert body["Submission"]["Source"] == VARIABLE
    assert body["Submission"]["VariableFlags"] == {"image": "redis:7"}, "-var wins over -var-file, as Nomad"


def test_job_run_names_a_variable_without_a_value_and_registers_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.cli import commands

    api = _FakeApi()
    monkeypatch.setattr(commands, "client", lambda args: api)
    f = _write(tmp_path, "v.hcl", VARIABLE)
    assert cli.main(["job", "run", str(f)]) != 0
    assert "image" in capsys.readouterr().err and api.calls == []


@pytest.mark.parametrize(
    ("path", "abstract"),
    [
        ("job.web.group.api.task.srv.template[1]", "group.*.task.*.template"),
        ("job.web.group.api.task.srv.artifact", "group.*.task.*.artifact"),
        ("job.web.group.api.network.port.http.static", "group.*.network.port.*.static"),
        ("job.web.datacenters", "datacenters"),
        ("job.web.group.g.service[0].check[2].header", "group.*.service.check.header"),
        ("job.web", "job"),
        ("variable.image", "variable.*"),
    ],
)
def test_paths_are_abstracted_for_the_summary(path: str, abstract: str) -> None:
    assert validate.abstract_path(path) == abstract


def test_summary_groups_reasons_and_keeps_the_top_ten() -> None:
    results = [
        validate.FileResult(
            f"f{i}",
            validate.REFUSED,
            problems=tuple((f"job.j{i}.group.g{k}.task.t.x{k}", "bad") for k in range(9)),
        )
        for i in range(3)
    ] + [
        validate.FileResult(
            "w", validate.WARNINGS, warnings=("job.w.group.g.task.t.artifact: not implemented",)
        ),
        validate.FileResult("a", validate.ACCEPTED),
        validate.FileResult(
            "s", validate.REFUSED, problems=(("", "HCL syntax error at line 3, column 7: x"), ("", "rare"))
        ),
        validate.FileResult(
            "t", validate.REFUSED, problems=(("", "HCL syntax error at line 9, column 1: x"),)
        ),
    ]
    s = validate.summarize(results)
    assert (s.total, s.accepted, s.with_warnings, s.refused) == (7, 1, 1, 5)
    assert len(s.top_refusals) == 10
    assert s.top_refusals[0] == ("group.*.task.*.x0: bad", 3)
    assert ("rare", 1) not in s.top_refusals
    assert ("HCL syntax error at line N, column N: x", 2) in s.top_refusals
    assert s.top_warnings == (("group.*.task.*.artifact: not implemented", 1),)
    text = validate.format_summary(s)
    assert text.startswith("summary: 7 files\n")
    assert "most frequent refusals:" in text
