"""A new report replays as the catalogue's do (issue 55): any report id (or the report's URL), no
link needed, a scenario without a fault flag runs once (PRESENT or ABSENT) and says so in its table
and report, JSON jobspecs (`nomad job inspect`), and an unknown flag named with the closest known
ones. The catalogue (e2e/scenarios/) keeps its stricter form. No lab: pure functions, files in a
temporary directory and a fake agent."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent.fieldbugs.catalogue import IMPLEMENTED_FAULTS
from e2e.drivers import repro
from e2e.harness import history
from e2e.harness.history import History
from e2e.harness.report.model import load_run
from e2e.harness.report.summary import summary_of
from e2e.harness.scenario import ScenarioError, load
from e2e.harness.scenario_ids import IdError, report_id, unknown_flags_message
from e2e.harness.scenario_jobspec import JobspecFormError, api_job, images_in, submission
from e2e.harness.scenario_steps import ScenarioRun

KS_HCL = """\
job "killsig" {
  group "app" {
    task "main" {
      driver      = "docker"
      kill_signal = "SIGINT"
      config {
        image   = "busybox:1.36"
        command = "sh"
        args    = ["-c", "trap 'echo got SIGINT; exit 0' INT; while true; do sleep 1; done"]
      }
    }
  }
}
"""
KS_JOB: dict[str, Any] = {
    "ID": "killsig",
    "Name": "killsig",
    "Type": "service",
    "Datacenters": ["dc1"],
    "Constraints": None,
    "TaskGroups": [
        {
            "Name": "app",
            "Count": 1,
            "Tasks": [
                {
                    "Name": "main",
                    "Driver": "docker",
                    "KillSignal": "SIGINT",
                    "Config": {"image": "busybox:1.36", "command": "sh", "args": ["-c", "sleep 1000"]},
                }
            ],
        }
    ],
    # what `nomad job inspect` adds: the server's own fields
    "Status": "running",
    "Version": 2,
    "CreateIndex": 11,
    "JobModifyIndex": 40,
    "SubmitTime": 1733540000000000000,
}
INSPECT = json.dumps({"Job": KS_JOB}, indent=4)  # `nomad job inspect killsig`
BARE = json.dumps(KS_JOB)  # `nomad job inspect -json killsig`, GET /v1/job/killsig

OWN = """\
bug: user-killsig
title: a docker task with kill_signal SIGINT
symptom: "does not match 'got SIGINT'"
what: the task is stopped with another signal than its kill_signal
jobspec: JOBSPEC
images: {"busybox:1.36": fieldlab/busybox:latest}
steps: [run, {wait: {alloc: running, timeout: 90}}, stop_job]
checks: [{logs: {task: main, contains: 'got SIGINT'}}]
"""


def _own(tmp_path: Path, text: str = OWN, jobspec: str = KS_HCL, name: str = "ks.nomad.hcl") -> Path:
    (tmp_path / name).write_text(jobspec)
    p = tmp_path / "report.yml"
    p.write_text(text.replace("JOBSPEC", name))
    return p


# --- 2. any report id, or the report's URL; link optional; the catalogue stays strict --------------
@pytest.mark.parametrize(
    ("given", "want"),
    [
        ("user-killsig", ("user-killsig", "")),
        ("acme.ops_4471", ("acme.ops_4471", "")),
        ("https://github.com/hashicorp/nomad/issues/5883", ("nomad-5883", "")),
        ("https://github.com/hashicorp/nomad/pull/26880/files", ("nomad-26880", "")),
        ("https://github.com/acme/infra/issues/12", ("infra-12", "")),
        ("https://discuss.hashicorp.com/t/kill-signal-ignored/61234", ("61234", "")),
        ("https://tickets.example.com/browse/OPS-4471?focus=1", ("ops-4471", "")),
    ],
)
def test_a_report_is_named_by_any_id_or_its_url(given: str, want: tuple[str, str]) -> None:
    got = report_id(given)
    assert got[0] == want[0]
    assert got[1] == (given if "://" in given else "")  # a URL is the report's link


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("User Killsig", "is not a report id"),
        ("-x", "is not a report id"),
        ("a" * 81, "at most 80"),
        ("ftp://host/x", "http(s)://host/path"),
        ("https://example.com/", "no id can be taken"),
    ],
)
def test_a_bad_report_id_says_what_would_do(given: str, says: str) -> None:
    with pytest.raises(IdError, match=says.replace("(", r"\(").replace(")", r"\)")):
        report_id(given)


def test_a_report_of_ones_own_needs_neither_flag_nor_link(tmp_path: Path) -> None:
    s = load(_own(tmp_path))
    assert (s.bug, s.flag, s.link, s.family, s.versions) == ("user-killsig", "", "", "", "")
    url = "https://github.com/hashicorp/nomad/issues/77"
    s = load(_own(tmp_path, OWN.replace("bug: user-killsig", f"bug: {url}")))
    assert (s.bug, s.link) == ("nomad-77", url)
    s = load(_own(tmp_path, OWN + "flag: none\n"))  # what a user writes for no flag
    assert s.flag == ""
    s = load(_own(tmp_path, OWN + "flag: rerun-completed-on-restore\n"))
    assert s.flag == "rerun-completed-on-restore"


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            ("bug: user-killsig", "bug: user-killsig"),
            "a catalogue entry (e2e/scenarios/) is nomad-<issue number>",
        ),
        (
            ("bug: user-killsig", "bug: nomad-77\nlink: see our slack"),
            "link: a catalogue entry links its public",
        ),
        (("bug: user-killsig", "bug: nomad-77"), "link: required"),
    ],
)
def test_a_catalogue_entry_keeps_the_strict_form(tmp_path: Path, change: tuple[str, str], says: str) -> None:
    full = "versions: '1.0'\nfamily: lifecycle\nflag: ignore-image-stopsignal\n"
    p = _own(tmp_path, OWN.replace(*change) + full)
    with pytest.raises(ScenarioError) as e:
        load(p, in_catalogue=True)
    assert says in str(e.value) and str(p) in str(e.value)
    flagless = _own(
        tmp_path,
        OWN.replace("bug: user-killsig", "bug: nomad-77\nlink: https://github.com/hashicorp/nomad/issues/77"),
    )
    with pytest.raises(ScenarioError, match="versions: required"):
        load(flagless, in_catalogue=True)


# --- 4. an unknown flag: the closest known ones, not the whole list ----------------------------------
def test_an_unknown_flag_names_the_closest_known_ones(tmp_path: Path) -> None:
    full = "link: https://github.com/hashicorp/nomad/issues/5883\nversions: '0.9'\nfamily: restore\n"
    with pytest.raises(ScenarioError) as e:  # (before: taken, and refused at the run with every name)
        load(
            _own(
                tmp_path,
                OWN.replace("user-killsig", "nomad-5883") + full + "flag: rerun-complete-on-restore\n",
            )
        )
    said = str(e.value)
    assert "flag: unknown agent fault flag 'rerun-complete-on-restore'" in said
    assert "did you mean rerun-completed-on-restore" in said
    assert "leak-portmap-chains" not in said and len(said) < 500, said  # not the wall of every flag
    assert "leave `flag` out to run the scenario once" in said
    none_close = unknown_flags_message(["zzz"], IMPLEMENTED_FAULTS)
    assert "no known flag is close" in none_close and "make repro BUG=list" in none_close


def test_the_harness_refuses_an_unknown_flag_with_the_closest_ones() -> None:
    from e2e.harness.faults import FaultError, set_agent_faults

    cluster: Any = SimpleNamespace(target=SimpleNamespace(unit="u", fault_flags=True, name="fieldlab"))
    cluster.target.data_dir = "/d"
    with pytest.raises(FaultError) as e:
        set_agent_faults(cluster, ["reuse-dead-paus"], [])
    assert "did you mean reuse-dead-pause" in str(e.value) and "leak-portmap-chains" not in str(e.value)


# --- 3. JSON jobspecs -------------------------------------------------------------------------------
def test_json_jobspecs_in_the_forms_nomad_job_run_json_takes() -> None:
    assert api_job(INSPECT) == KS_JOB  # {"Job": {...}}: nomad job inspect
    assert api_job(BARE) == KS_JOB  # the bare API job
    assert api_job(KS_HCL) is None  # HCL2: the agent parses it
    assert api_job('{"job": {"killsig": {"group": {"app": {}}}}}') is None  # HCL's JSON syntax
    assert images_in(INSPECT) == images_in(KS_HCL) == ["busybox:1.36"]
    assert submission(INSPECT)["Format"] == "json" and submission(KS_HCL)["Format"] == "hcl2"
    for bad, says in [
        ('{"Job": ', "not JSON"),
        ('{"Job": []}', '"Job" is the job, an object'),
        ('{"Job": {"TaskGroups": [{}]}}', 'has no "ID"'),
        ('{"Jobs": {}}', "JSON of no jobspec form"),
    ]:
        with pytest.raises(JobspecFormError, match=says):
            api_job(bad)


def test_a_scenario_takes_a_json_jobspec_and_refuses_a_broken_one(tmp_path: Path) -> None:
    s = load(_own(tmp_path, jobspec=INSPECT, name="ks.json"))
    assert s.jobspec == tmp_path / "ks.json"
    with pytest.raises(ScenarioError, match=r"jobspec: ks.json: not JSON"):
        load(_own(tmp_path, jobspec='{"Job": {', name="ks.json"))


class FakeAgent:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, body: Any = None) -> Any:
        self.calls.append((method, path, body))
        if path == "/v1/jobs/parse":
            return dict(KS_JOB, Status=None)
        if path == "/v1/jobs":
            return {"EvalID": "e1"}
        return [{"ID": "a1"}]


@pytest.mark.parametrize(("text", "fmt", "parsed"), [(INSPECT, "json", False), (KS_HCL, "hcl2", True)])
def test_a_json_api_job_is_registered_as_nomad_job_run_json_does(text: str, fmt: str, parsed: bool) -> None:
    agent = FakeAgent()
    cluster: Any = SimpleNamespace(agent=lambda node: agent)
    scenario: Any = SimpleNamespace(images={"busybox:1.36": "fieldlab/busybox:latest"})
    run = ScenarioRun(cluster, scenario, SimpleNamespace(name="client1"))  # type: ignore[arg-type]
    _, ids = run._register(text, "ks")
    assert ids == ["a1"]
    assert any(p == "/v1/jobs/parse" for _, p, _ in agent.calls) == parsed
    (put,) = [b for m, p, b in agent.calls if (m, p) == ("PUT", "/v1/jobs")]
    assert put["Submission"] == {"Source": text, "Format": fmt, "VariableFlags": {}, "Variables": ""}
    assert put["Job"]["ID"] == "killsig"
    assert put["Job"]["TaskGroups"][0]["Tasks"][0]["Config"]["image"] == "fieldlab/busybox:latest"
    assert put["Job"]["Constraints"][-1]["RTarget"] == "client1"  # pinned to the scenario's client


def test_repro_new_takes_a_json_jobspec_and_any_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "ks.json"
    report.write_text(INSPECT)
    mine = tmp_path / "mine"
    assert repro.new_scenario("user-killsig", report, mine) == 0
    s = load(mine / "user-killsig.yml")
    assert s.images == {"busybox:1.36": "fieldlab/busybox:latest"} and s.flag == "" and s.link == ""
    assert s.jobspec == mine / "jobs" / "user-killsig-ks.json"
    assert "fieldlab repro " + str(mine / "user-killsig.yml") in capsys.readouterr().out
    url = "https://github.com/hashicorp/nomad/issues/5883"
    assert repro.new_scenario(url, report, mine) == 0
    assert load(mine / "nomad-5883.yml").link == url
    broken = tmp_path / "broken.json"
    broken.write_text('{"Job": [')
    assert repro.new_scenario("other", broken, mine) == 2
    assert "--jobspec" in capsys.readouterr().err and not (mine / "other.yml").exists()


def test_repro_new_into_the_catalogue_takes_only_nomad_ids(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    report = tmp_path / "ks.nomad.hcl"
    report.write_text(KS_HCL)
    monkeypatch.setattr(repro, "SCENARIOS", tmp_path)  # the catalogue, here
    assert repro.new_scenario("user-killsig", report, tmp_path) == 2
    err = capsys.readouterr().err
    assert "a catalogue entry (e2e/scenarios/) is nomad-<issue number>" in err and "--dir DIR" in err
    assert not list(tmp_path.glob("*.yml"))
    assert repro.new_scenario("nomad-4242", report, tmp_path) == 0
    text = (tmp_path / "nomad-4242.yml").read_text()
    assert "link: https://github.com/hashicorp/nomad/issues/4242" in text and "\nflag: " in text


# --- 1. a scenario without a flag runs once; the table and the report say which kind it was ----------
def test_a_scenario_without_a_flag_runs_once_and_the_table_says_so(tmp_path: Path) -> None:
    own = load(_own(tmp_path))
    flagged = load(
        _own(
            tmp_path,
            OWN.replace("bug: user-killsig", "bug: nomad-5883") + "flag: rerun-completed-on-restore\n",
        )
    )
    assert repro.run_kind(own, True) == repro.ONCE
    assert repro.run_kind(flagged, True) == repro.HALVES
    assert repro.run_kind(flagged, False) == repro.ONCE  # TARGET=nomad: clients take no flags
    assert "the scenario names no fault flag" in repro.kind_text(own, repro.ONCE, "fieldlab")
    assert "take no fault flags" in repro.kind_text(flagged, repro.ONCE, "nomad")
    rows = [
        repro.Row(
            flagged,
            repro.HALVES,
            [repro.Half("REPRODUCED", 9, "x", tmp_path), repro.Half("FIXED", 16, "", tmp_path)],
        ),
        repro.Row(own, repro.ONCE, [repro.Half("ABSENT", 6, "", tmp_path)]),
    ]
    assert all(r.ok for r in rows)
    table = repro.verdict_table(rows, "fieldlab", 31.0, tmp_path)
    lines = table.splitlines()
    assert lines[1].split()[:5] == ["nomad-5883", "with", "flag,", "without", "rerun-completed-on-restore"]
    assert "REPRODUCED, FIXED" in lines[1] and lines[1].endswith("25s")
    assert lines[2].split() == ["user-killsig", "once", "on", "fieldlab", "(none)", "ABSENT", "6s"]
    assert (
        "1/1 bugs reproduced and fixed" in table
        and "0/1 field symptoms PRESENT, 1 ABSENT on fieldlab" in table
    )
    odd = repro.Row(own, repro.ONCE, [repro.Half("FAILED, NOT WITH THE FIELD SYMPTOM", 6, "", tmp_path)])
    assert not odd.ok


def test_the_report_of_a_once_run_says_its_kind_and_its_own_replay(tmp_path: Path) -> None:
    own = load(_own(tmp_path))
    run_dir = tmp_path / "reports" / "user-killsig-fieldlab"
    h = History(run_dir, "r", 7, "default")
    h.record(history.RUN, "r", seed=7, lab="default", at=1.0)
    h.record(
        history.NOTE,
        f"{history.REPRO_NOTE}user-killsig",
        bug="user-killsig",
        half="once",
        flag="",
        replay="make repro BUG=user-killsig LAB=default",  # conftest's: no such catalogue entry
        at=1.1,
    )
    repro._kept(own, "once", repro.Half("ABSENT", 6.0, "", run_dir), "fieldlab", "default")
    kept = json.loads((run_dir / "repro.json").read_text())
    assert kept["kind"].startswith("once on the fieldlab target (the scenario names no fault flag)")
    text = summary_of(load_run(run_dir))
    assert "repro of user-killsig (once, no fault flag): ABSENT" in text
    assert "kind of run: once on the fieldlab target" in text
    assert f"replay: fieldlab repro {own.path} --lab default" in text
    page = (run_dir / "report.html").read_text()
    assert "kind of run" in page and "once on the fieldlab target" in page


def test_fieldlab_repro_passes_the_target_on() -> None:
    from lab import cli, suites

    parser = cli.build_parser()
    args = parser.parse_args(["repro", "mine/x.yml", "--lab", "y", "--target", "nomad"])
    argv = suites.repro_argv(args)
    assert argv[3:7] == ["--lab", "y", "--target", "nomad"] and argv[-1] == str(Path("mine/x.yml").resolve())


def test_an_unknown_bug_names_the_closest_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert repro.main(["nomad-588"]) == 2
    err = capsys.readouterr().err
    assert "did you mean nomad-5883" in err and "nomad-24292" not in err


# --- 5. the page's worked examples, offline: their files, skeletons and fill-ins make scenarios ------
def test_the_worked_examples_of_the_page_make_the_scenarios_they_say(tmp_path: Path) -> None:
    """What e2e/suites/test_repro_worked_examples.py runs on the lab, checked without one: each example's
    jobspec block, `repro new` on it, the page's fill-in over the skeleton -> a scenario that loads,
    flagless or with the flag the page names."""
    import re

    import yaml

    doc = (Path(__file__).resolve().parents[1] / "docs" / "field-bugs.md").read_text()
    blocks = {
        m.group(1): m.group(2)
        for m in re.finditer(r"<!-- example: ([^>]+?) -->\n```[a-z]*\n(.*?)```", doc, re.S)
    }
    for name in ("ks.nomad.hcl", "ks.json", "example-restored.hcl"):
        (tmp_path / name).write_text(blocks[name])
    made = {}
    for new, fill in (("user-killsig new", "user-killsig fill-in"), ("nomad-5883 new", "nomad-5883 fill-in")):
        for line in blocks[new].splitlines():
            words = line.split()
            assert words[:3] == ["fieldlab", "repro", "new"], line
            jobspec = Path(words[words.index("--jobspec") + 1].replace("/tmp/report", str(tmp_path)))
            assert repro.new_scenario(words[3], jobspec, tmp_path) == 0, line
            bug = report_id(words[3])[0]
            path = tmp_path / f"{bug}.yml"
            filled = yaml.safe_load(path.read_text())
            filled.update(yaml.safe_load(blocks[fill]))
            path.write_text(yaml.safe_dump(filled))
            made[bug] = load(path)
    assert sorted(made) == ["nomad-5883", "user-killsig", "user-killsig-json"]
    assert made["user-killsig"].flag == made["user-killsig-json"].flag == ""
    assert made["nomad-5883"].flag == "rerun-completed-on-restore"
    assert made["nomad-5883"].link == "https://github.com/hashicorp/nomad/issues/5883"
    assert api_job(blocks["ks.json"]) is not None  # the JSON example is an API job (nomad job inspect)
    runs = [line for name in ("user-killsig run", "nomad-5883 run") for line in blocks[name].splitlines()]
    assert all(
        re.fullmatch(r"(TARGET=nomad )?fieldlab repro /tmp/report/[a-z0-9-]+\.yml", r) for r in runs
    ), runs


def test_repro_new_without_dir_writes_a_report_of_ones_own_beside_its_jobspec(tmp_path: Path) -> None:
    """The issue's own command, `fieldlab repro new user-killsig --jobspec ks.nomad.hcl`, is taken:
    the skeleton goes beside the jobspec; a nomad-<n> one into the catalogue, as before."""
    report = tmp_path / "ks.nomad.hcl"
    report.write_text(KS_HCL)
    assert repro.main(["new", "user-killsig", "--jobspec", str(report)]) == 0
    assert load(tmp_path / "user-killsig.yml").jobspec == tmp_path / "jobs" / "user-killsig-ks.nomad.hcl"
    assert repro.default_dir("nomad-5883", report) == repro.SCENARIOS
    assert repro.default_dir("https://github.com/hashicorp/nomad/issues/5883", report) == repro.SCENARIOS
    assert repro.default_dir("https://example.com/t/61234", report) == tmp_path
