"""The corpus of Nomad jobspecs (tests/jobspecs/nomad): the agent takes them as Nomad does.

Every file outside `refused/` is valid Nomad and must be accepted (the target while the parser catches
up: at least 98 %, the failures printed); every file in `refused/` must be refused with the reason the
corpus README lists for it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.cli import validate

CORPUS = Path(__file__).parent / "jobspecs" / "nomad"
README = CORPUS / "README.md"
TARGET = 0.98
THEMES = (
    "stanzas",
    "drivers",
    "hcl2",
    "templates",
    "networking",
    "services",
    "vault",
    "json",
    "lifecycle",
    "guides",
    "refused",
)


def _files() -> list[Path]:
    return validate.collect_files([CORPUS])


def _is_refused(path: Path) -> bool:
    return path.relative_to(CORPUS).parts[0] == "refused"


def _readme_reasons() -> dict[str, str]:
    """`| refused/<file> | <reason> |` rows of the README's table: file -> the reason it is refused with."""
    rows: dict[str, str] = {}
    for line in README.read_text().splitlines():
        m = re.match(r"^\|\s*`?(refused/[^|`]+?)`?\s*\|\s*(.+?)\s*\|\s*$", line)
        if m:
            rows[m.group(1)] = m.group(2).strip("`")
    return rows


def _valid_refusals() -> dict[str, str]:
    """The README's `| <file> | <reason> |` rows of valid jobspecs the agent still refuses."""
    text = README.read_text().split("## Valid jobspecs the agent still refuses", 1)[1]
    rows: dict[str, str] = {}
    for line in text.splitlines():
        m = re.match(r"^\|\s*([a-z0-9_-]+/[^|]+?)\s*\|\s*(.+?)\s*\|\s*$", line)
        if m and m.group(1) != "valid file":
            rows[m.group(1)] = m.group(2)
    return rows


def _describe(result: validate.FileResult) -> str:
    return "\n".join([result.path, *(f"    {p}: {r}" if p else f"    {r}" for p, r in result.problems)])


def test_the_corpus_is_large_and_covers_every_theme() -> None:
    files = _files()
    assert len(files) >= 160
    themes = {f.relative_to(CORPUS).parts[0] for f in files}
    assert set(THEMES) <= themes
    assert sum(not _is_refused(f) for f in files) >= 150
    suffixes = {f.suffix for f in files}
    assert {".hcl", ".nomad", ".json"} <= suffixes


def test_every_valid_nomad_jobspec_is_accepted() -> None:
    valid = [f for f in _files() if not _is_refused(f)]
    results = [validate.validate_file(f) for f in valid]
    refused = [r for r in results if not r.accepted]
    if refused:
        print(f"{len(refused)} of {len(results)} valid Nomad jobspecs refused:")
        for r in refused:
            print(_describe(r))
        summary = validate.summarize(refused)
        print(validate.format_summary(summary))
    accepted = len(results) - len(refused)
    assert accepted / len(results) >= TARGET, (
        f"{accepted}/{len(results)} accepted ({100 * accepted / len(results):.1f} %), "
        f"target {100 * TARGET:.0f} %: {[r.path for r in refused]}"
    )


def test_exactly_the_listed_valid_jobspecs_are_refused_with_their_reasons() -> None:
    listed = _valid_refusals()
    refused = {
        str(Path(r.path).relative_to(CORPUS)): [f"{p}: {why}" if p else why for p, why in r.problems]
        for r in (validate.validate_file(f) for f in _files() if not _is_refused(f))
        if not r.accepted
    }
    assert set(refused) == set(listed), refused
    for name, reason in listed.items():
        assert any(reason in line for line in refused[name]), (name, refused[name])


def test_the_readme_lists_every_refused_file() -> None:
    listed = set(_readme_reasons())
    on_disk = {str(f.relative_to(CORPUS)) for f in _files() if _is_refused(f)}
    assert listed == on_disk


@pytest.mark.parametrize(
    "name", sorted(str(f.relative_to(CORPUS)) for f in validate.collect_files([CORPUS]) if _is_refused(f))
)
def test_refused_files_are_refused_with_the_listed_reason(name: str) -> None:
    reason = _readme_reasons().get(name)
    assert reason, f"{name} is not in the README's table of refused files"
    result = validate.validate_file(CORPUS / name)
    assert result.status == validate.REFUSED, f"{name} was {result.status}"
    said = [f"{p}: {r}" if p else r for p, r in result.problems]
    assert any(reason in line for line in said), f"{reason!r} not in {said}"
    assert not any("internal error" in line for line in said), said


def test_validating_the_corpus_never_raises() -> None:
    results = validate.validate_paths([CORPUS])
    assert len(results) == len(_files())
    assert not [r.path for r in results if any("internal error" in reason for _, reason in r.problems)]
