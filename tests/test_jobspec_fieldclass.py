"""The kinds of the fields fieldlab-agent does not implement (agent.jobspec.fieldclass), and their page."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from agent.jobspec.fieldclass import (
    NOMAD_IGNORES,
    ONLY_VALUES,
    SERVER_SIDE,
    server_side_warning,
    value_refusal,
)
from agent.jobspec.fields import UNIMPLEMENTED

ROOT = Path(__file__).resolve().parents[1]


def test_every_classified_field_is_one_the_agent_does_not_implement() -> None:
    """A field that gets implemented leaves the classification with it (a stale entry is a defect)."""
    for table in (SERVER_SIDE, NOMAD_IGNORES, ONLY_VALUES):
        for context, fields in table.items():
            assert set(fields) <= UNIMPLEMENTED[context], (context, set(fields) - UNIMPLEMENTED[context])


def test_a_field_has_one_kind() -> None:
    for context in UNIMPLEMENTED:
        kinds = [set(t.get(context, {})) for t in (SERVER_SIDE, NOMAD_IGNORES, ONLY_VALUES)]
        for i, a in enumerate(kinds):
            for b in kinds[i + 1 :]:
                assert not a & b, (context, a & b)


def test_the_warning_names_the_kind_and_what_the_lab_does() -> None:
    assert (server_side_warning("group", "spread") or "").startswith("a server-side decision")
    assert "placement among nodes" in (server_side_warning("group", "spread") or "")
    assert (server_side_warning("resources", "iops") or "").startswith("ignored: ")
    assert server_side_warning("template", "uid") is None  # client-side: not implemented
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
