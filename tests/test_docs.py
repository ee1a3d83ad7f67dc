"""The documents that are generated from code stay current, and the README points only at files
that exist."""

from __future__ import annotations

import re
from pathlib import Path

from e2e.drivers.repro import markdown_table

ROOT = Path(__file__).resolve().parents[1]


def test_the_field_bug_catalogue_in_docs_is_the_one_repro_runs() -> None:
    text = (ROOT / "docs" / "field-bugs.md").read_text()
    shown = text.split("<!-- catalogue:start -->\n", 1)[1].split("<!-- catalogue:end -->", 1)[0]
    assert shown == markdown_table(), "docs/field-bugs.md is stale: make repro BUG=list MARKDOWN=1"


def test_every_local_link_in_the_readme_and_docs_exists() -> None:
    missing = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                missing.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert not missing, missing


def test_the_readme_promises_nothing_as_not_yet_built() -> None:
    text = (ROOT / "README.md").read_text().lower()
    assert "not yet" not in text
