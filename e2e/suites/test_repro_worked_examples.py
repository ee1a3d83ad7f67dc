"""docs/field-bugs.md's worked examples, followed as written by a new user, on the lab.

Narrative: a user with a fresh report reads "Adding a bug from a report, end to end" and does what
it says, command by command: the report's jobspec into a file (HCL2, and the same job as `nomad job
inspect` prints it), `fieldlab repro new ID --jobspec FILE --dir DIR`, the skeleton filled in with
the page's fields, then `fieldlab repro FILE`. Without a flag the scenario runs once and the page
says ABSENT (the reference agent delivers the kill_signal); with a flag (nomad-5883) it runs twice,
REPRODUCED then FIXED. The page's blocks marked `<!-- example: NAME -->` are what is run, so the
page cannot drift from what the commands do; the verdicts printed are checked against the page's.
The time from `repro new` to a verdict is recorded as a figure of the run (not asserted).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.harness import history
from e2e.harness.cluster import Cluster

DOC = Path(__file__).resolve().parents[2] / "docs" / "field-bugs.md"
EXAMPLE = re.compile(r"<!-- example: ([^>]+?) -->\n```[a-z]*\n(.*?)```", re.DOTALL)
VERDICT = re.compile(
    r"^\s+(PRESENT|ABSENT|REPRODUCED|FIXED|NOT [A-Z ]+|FAILED[A-Z ,]*)\b.* in \d+s", re.MULTILINE
)
COMMAND_TIMEOUT = 600.0  # seconds one command of the page may take (a repro with a flag: two runs)
PLACE = "/tmp/report"  # the page's directory of one's own; a temporary one here


def examples() -> dict[str, str]:
    """The page's example blocks by name."""
    found = {m.group(1): m.group(2) for m in EXAMPLE.finditer(DOC.read_text())}
    assert found, f"{DOC}: no <!-- example: NAME --> blocks"
    return found


def block(name: str) -> str:
    shown = examples()
    assert name in shown, f"{DOC}: no example {name!r} (have {sorted(shown)})"
    return shown[name]


def verdicts(text: str) -> list[str]:
    return [m.group(1).strip() for m in VERDICT.finditer(text)]


class User:
    """Runs the page's commands as a user would type them, in a directory of one's own."""

    def __init__(self, cluster: Cluster, request: pytest.FixtureRequest, where: Path) -> None:
        self.where = where
        self.target = str(request.config.getoption("--target") or "")
        self.env = {**os.environ, "LAB": cluster.name}
        self.env.pop("TARGET", None)
        if self.target:
            self.env["TARGET"] = self.target
        self.fieldlab = Path(sys.executable).parent / "fieldlab"  # the venv's console script
        self.transcript: list[str] = []

    def write(self, name: str, text: str) -> Path:
        path = self.where / name
        path.write_text(text)
        return path

    def run(self, name: str) -> list[tuple[str, str]]:
        """Each command line of the page's block `name`: (the line, its output). A line that sets
        TARGET runs only on that target (the page's `TARGET=nomad` line needs a Nomad cluster)."""
        done = []
        for typed in block(name).splitlines():
            line = typed.split("  #", 1)[0].strip()
            if not line:
                continue
            words = shlex.split(line)
            env = dict(self.env)
            while words and re.fullmatch(r"[A-Z_]+=.*", words[0]):
                key, _, value = words.pop(0).partition("=")
                if key == "TARGET" and value != (self.target or "fieldlab"):
                    history.record(history.NOTE, f"not on this lab's target: {line}")
                    break
                env[key] = value
            else:
                assert words[:1] == ["fieldlab"], f"{DOC}: {name}: not a fieldlab command: {line}"
                argv = [str(self.fieldlab), *(w.replace(PLACE, str(self.where)) for w in words[1:])]
                history.record(history.NOTE, f"the page's command: {line}")
                got = subprocess.run(  # the project's own CLI
                    argv, env=env, capture_output=True, text=True, timeout=COMMAND_TIMEOUT, check=False
                )
                out = got.stdout + got.stderr
                self.transcript.append(f"$ {line}\n{out}")
                print(f"$ {line}\n{out}")
                assert got.returncode == 0, f"`{line}` exited {got.returncode}:\n{out[-3000:]}"
                done.append((line, out))
        return done

    def fill_in(self, scenario: Path, name: str) -> dict[str, Any]:
        """The skeleton with the page's fields written over it, as the user fills it in: what the
        skeleton wrote and the page does not say (bug, link, jobspec, images) stays."""
        doc = yaml.safe_load(scenario.read_text())
        filled = yaml.safe_load(block(name))
        assert isinstance(doc, dict) and isinstance(filled, dict)
        doc.update(filled)
        scenario.write_text(yaml.safe_dump(doc, sort_keys=False, width=1000))
        return doc


def _doc_verdicts(name: str) -> list[str]:
    shown = verdicts(block(name))
    assert shown, f"{DOC}: the example {name!r} shows no verdict"
    return shown


@pytest.mark.destructive
def test_a_new_report_without_a_flag_runs_once_as_the_page_says(
    cluster: Cluster, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    user = User(cluster, request, tmp_path)
    user.write("ks.nomad.hcl", block("ks.nomad.hcl"))
    user.write("ks.json", block("ks.json"))
    t0 = time.monotonic()
    user.run("user-killsig new")
    for bug in ("user-killsig", "user-killsig-json"):
        doc = user.fill_in(tmp_path / f"{bug}.yml", "user-killsig fill-in")
        assert "flag" not in doc and doc["images"] == {"busybox:1.36": "fieldlab/busybox:latest"}, doc
    assert (tmp_path / "jobs" / "user-killsig-json-ks.json").is_file()
    runs = user.run("user-killsig run")
    took = time.monotonic() - t0
    said = [v for _, out in runs for v in verdicts(out)]
    assert len(said) == len(runs), user.transcript
    for _, out in runs:
        assert "once on" in out and "the scenario names no fault flag" in out, out
    if cluster.target.name == "fieldlab":
        assert said == _doc_verdicts("user-killsig output")[: len(said)], (said, user.transcript)
    else:  # a Nomad cluster answers for its build: either is an answer
        assert set(said) <= {"PRESENT", "ABSENT"}, user.transcript
    history.measure("repro new to verdicts: user-killsig, HCL and JSON (no flag)", took)


@pytest.mark.destructive
def test_a_catalogue_entry_with_a_flag_runs_both_halves_as_the_page_says(
    cluster: Cluster, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if not cluster.target.fault_flags:
        pytest.skip(
            f"the {cluster.target.name} target's clients take no fault flags: the page's second example"
        )
    user = User(cluster, request, tmp_path)
    user.write("example-restored.hcl", block("example-restored.hcl"))
    t0 = time.monotonic()
    user.run("nomad-5883 new")
    doc = user.fill_in(tmp_path / "nomad-5883.yml", "nomad-5883 fill-in")
    assert doc["link"] == "https://github.com/hashicorp/nomad/issues/5883", doc
    assert doc["images"] == {"alpine:3.9": "fieldlab/busybox:latest"}, doc
    ((_, out),) = user.run("nomad-5883 run")
    history.measure("repro new to verdicts: nomad-5883 (with its flag, then without)", time.monotonic() - t0)
    assert verdicts(out) == _doc_verdicts("nomad-5883 output") == ["REPRODUCED", "FIXED"], out
    assert "with flag, without" in out and "rerun-completed-on-restore" in out, out
