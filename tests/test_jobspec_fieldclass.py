"""The kinds of the fields fieldlab-agent does not implement (agent.jobspec.fieldclass), and their page."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from agent.jobspec.fieldclass import (
    NOMAD_IGNORES,
    ONLY_VALUES,
    REFUSED,
    SERVER_SIDE,
    UNCLASSIFIED,
    server_side_warning,
    value_refusal,
)
from agent.jobspec.fields import UNIMPLEMENTED

ROOT = Path(__file__).resolve().parents[1]


def test_every_classified_field_is_one_the_agent_does_not_implement() -> None:
    """A field that gets implemented leaves the classification with it (a stale entry is a defect)."""
    for table in (SERVER_SIDE, NOMAD_IGNORES, ONLY_VALUES, REFUSED):
        for context, fields in table.items():
            assert set(fields) <= UNIMPLEMENTED[context], (context, set(fields) - UNIMPLEMENTED[context])


def test_a_field_has_one_kind() -> None:
    for context in UNIMPLEMENTED:
        kinds = [set(t.get(context, {})) for t in (SERVER_SIDE, NOMAD_IGNORES, ONLY_VALUES, REFUSED)]
        for i, a in enumerate(kinds):
            for b in kinds[i + 1 :]:
                assert not a & b, (context, a & b)


def test_every_unimplemented_field_has_a_kind() -> None:
    """Issue 52 item 6: no client-side field is accepted and ignored; each unimplemented field is
    classed (a new one without a class is refused, UNCLASSIFIED, not warned about)."""
    tables = (SERVER_SIDE, NOMAD_IGNORES, ONLY_VALUES, REFUSED)
    loose = {
        (context, name)
        for context, names in UNIMPLEMENTED.items()
        for name in names
        if not any(name in t.get(context, {}) for t in tables)
    }
    assert not loose


def test_an_unclassified_field_is_refused_not_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    """A field the agent does not implement and nobody classed (here: group spread with its class
    taken away) is refused, never accepted with a warning."""
    from agent.jobspec import fieldclass, parse_jobspec
    from agent.jobspec.errors import JobspecError

    text = """
job "j" {
  group "g" {
    spread {
      attribute = "${node.datacenter}"
    }
    task "t" {
      driver = "docker"
      config {
        image = "x"
      }
    }
  }
}
"""
    assert parse_jobspec(text, source="t.hcl").job.id == "j"  # server-side: taken, with its warning
    rest = {k: v for k, v in SERVER_SIDE["group"].items() if k != "spread"}
    monkeypatch.setattr(fieldclass, "SERVER_SIDE", {**SERVER_SIDE, "group": rest})
    with pytest.raises(JobspecError) as info:
        parse_jobspec(text, source="t.hcl")
    assert dict(info.value.problems) == {"job.j.group.g.spread": UNCLASSIFIED}


def test_the_warning_names_the_kind_and_what_the_lab_does() -> None:
    assert (server_side_warning("group", "spread") or "").startswith("a server-side decision")
    assert "placement among nodes" in (server_side_warning("group", "spread") or "")
    assert (server_side_warning("resources", "iops") or "").startswith("ignored: ")
    assert server_side_warning("template", "uid") is None  # implemented: no warning
    assert value_refusal("job", "region", "global") == ""
    assert "eu" in (value_refusal("job", "region", "eu") or "")
    assert value_refusal("job", "priority", 50) is None


def test_the_page_lists_every_unimplemented_field_with_its_kind() -> None:
    spec = importlib.util.spec_from_file_location(
        "jobspec_fields_doc", ROOT / "scripts" / "jobspec_fields_doc.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert (ROOT / "docs" / "jobspec-fields.md").read_text() == module.render(), (
        "docs/jobspec-fields.md is stale: run python scripts/jobspec_fields_doc.py"
    )
