"""Jobs stored in canonical form: every jobspec of the corpus survives encode -> JSON -> decode
unchanged; restore rebuilds jobs without the parser; a record from before canonical forms (or of
another model version) is parsed once and rewritten; a canonical form that does not fit is refused
with where it does not fit."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.client import restore as restore_module
from agent.client.core import Core
from agent.client.offload import run_inline
from agent.jobspec import JobspecError, parse_jobspec
from agent.structs.jobcodec import MODEL_VERSION, JobCodecError, decode_job, encode_job
from tests.fakes import FakeNode, FakeSweeper

JOBSPECS = Path(__file__).parent / "jobspecs"
SPEC = """
job "web" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "x"
        args  = ["-f", "-p", "80"]
      }
      template {
        destination = "local/a"
        data        = "{{ env \\"NOMAD_TASK_NAME\\" }}"
        change_mode = "script"
        change_script { command = "/bin/true" }
      }
    }
  }
}
"""


JOB = {"id": "x", "groups": []}


def _corpus() -> list[Path]:
    return sorted(p for p in JOBSPECS.rglob("*") if p.suffix in (".hcl", ".json", ".nomad"))


def test_every_parsable_jobspec_of_the_corpus_round_trips() -> None:
    done = 0
    for path in _corpus():
        try:
            job = parse_jobspec(path.read_text(), source=str(path), base_dir=path.parent).job
        except JobspecError:
            continue  # the corpus holds jobspecs that must be refused too
        stored = json.loads(json.dumps(encode_job(job)))
        assert decode_job(stored) == job, path
        done += 1
    assert done >= 50, f"only {done} jobspecs parsed: the corpus moved?"


@pytest.mark.parametrize(
    ("canonical", "why"),
    [
        (None, "no canonical job"),
        ({"model": MODEL_VERSION + 1, "job": {}}, f"model {MODEL_VERSION + 1}"),
        (
            {"model": MODEL_VERSION, "job": {"id": "x", "groups": [], "colour": "red"}},
            "unknown field 'colour'",
        ),
        (
            {"model": MODEL_VERSION, "job": {"id": "x", "groups": [{"name": 3, "tasks": []}]}},
            "job.groups[0].name",
        ),
    ],
)
def test_a_canonical_form_that_does_not_fit_is_refused_saying_where(canonical: Any, why: str) -> None:
    with pytest.raises(JobCodecError, match=why.replace("[", r"\[").replace("]", r"\]")):
        decode_job(canonical)


def _core(fake: FakeNode, tmp_path: Path) -> Core:
    return fake.core(sweeper=FakeSweeper(fake), offload=run_inline)


def test_restore_rebuilds_jobs_without_parsing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNode(tmp_path)
    first = _core(fake, tmp_path)
    (alloc,) = first.job_registry.submit(SPEC, "hcl")["allocs"]

    def no_parsing(*args: object, **kwargs: object) -> None:
        raise AssertionError("restore parsed a jobspec")

    monkeypatch.setattr(restore_module, "parse_jobspec", no_parsing)
    again = _core(fake, tmp_path)
    again.restorer.restore()
    assert again.jobs["web"] == first.jobs["web"]
    assert again.runners[alloc].rec.live


def test_a_job_stored_before_canonical_forms_is_parsed_once_and_rewritten(tmp_path: Path) -> None:
    fake = FakeNode(tmp_path)
    first = _core(fake, tmp_path)
    first.job_registry.submit(SPEC, "hcl")
    record = fake.store.get("job", "web") or {}
    legacy = {k: v for k, v in record.items() if k != "canonical"}  # as the previous agent wrote it
    fake.store.put("job", "web", legacy)
    again = _core(fake, tmp_path)
    again.restorer.restore()
    assert again.jobs["web"] == first.jobs["web"]
    assert (fake.store.get("job", "web") or {}).get("canonical") == encode_job(first.jobs["web"])
