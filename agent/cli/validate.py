"""`fieldlab-agent job validate`: take jobspec files as the agent would at submission, offline.

    files = collect_files([Path("tests/jobspecs/nomad")])   # raises UsageError for a path it cannot read
    results = [validate_file(f, variables) for f in files]
    summary = summarize(results)
    print("\\n".join(format_result(r) for r in results)); print(format_summary(summary))

Each file is parsed with `agent.jobspec.parse_jobspec` (the format from the suffix: .json is API JSON,
.hcl and .nomad are HCL; any other suffix is guessed from the text) and every template of every task goes
through `agent.templates.render.check_template`, as a submission does. A file is `accepted`, `accepted`
with warnings, or `refused` with every (path, reason). Nothing here raises for a file's content: an
unreadable, binary or absurd file is a refusal, never a traceback. Everything is pure except reading
the files; printing is the CLI's.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import AgentError

ACCEPTED = "accepted"
WARNINGS = "accepted with warnings"
REFUSED = "refused"

SUFFIXES = (".hcl", ".nomad", ".json")
_FORMATS = {".json": "json", ".hcl": "hcl", ".nomad": "hcl"}
TOP = 10

# Blocks whose label is the next component of a field path: `job.<id>.group.<name>.task.<name>...`.
_LABELLED = frozenset(
    {
        "job",
        "group",
        "task",
        "port",
        "volume",
        "device",
        "action",
        "region",
        "secret",
        "variable",
        "meta",
        "env",
    }
)
_INDEX = re.compile(r"\[\d+\]")
_POSITION = re.compile(r"\bline \d+, column \d+")
_TEMPLATE_POSITION = re.compile(r"(?<=\S):\d+:\d+:")  # "local/x.conf:2:10: ..."
_PATHLIKE = re.compile(r"^[\w.\-\[\]*/\"']+$")


class UsageError(AgentError):
    """A path given to the validator cannot be read at all (missing, not a file or a directory)."""


@dataclass(frozen=True)
class FileResult:
    path: str
    status: str  # ACCEPTED, WARNINGS, REFUSED
    warnings: tuple[str, ...] = ()
    problems: tuple[tuple[str, str], ...] = ()  # (field path or "", reason)

    @property
    def accepted(self) -> bool:
        return self.status != REFUSED


@dataclass(frozen=True)
class Summary:
    total: int
    accepted: int  # without warnings
    with_warnings: int
    refused: int
    top_warnings: tuple[tuple[str, int], ...] = ()
    top_refusals: tuple[tuple[str, int], ...] = ()
    refused_files: tuple[str, ...] = field(default_factory=tuple)

    def percent(self, n: int) -> float:
        return 100.0 * n / self.total if self.total else 0.0


# ---------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------


def collect_files(paths: Iterable[Path]) -> list[Path]:
    """The files to validate, in order: a file as given; a directory's *.hcl, *.nomad and *.json,
    recursively, sorted. A path that does not exist or cannot be listed is a UsageError."""
    out: list[Path] = []
    for path in paths:
        try:
            if path.is_dir():
                out.extend(_walk(path))
            elif path.exists():
                out.append(path)
            elif path.is_symlink():
                raise UsageError(f"{path}: a symbolic link that leads nowhere (or loops)")
            else:
                raise UsageError(f"{path}: no such file or directory")
        except OSError as exc:
            raise UsageError(f"{path}: {exc.strerror or exc}") from None
    return out


def _walk(root: Path) -> list[Path]:
    found: list[Path] = []

    def fail(exc: OSError) -> None:
        raise UsageError(f"{exc.filename or root}: {exc.strerror or exc}")

    for dirpath, dirnames, filenames in os.walk(root, onerror=fail):
        dirnames.sort()
        found.extend(Path(dirpath, name) for name in filenames if name.endswith(SUFFIXES))
    return sorted(found, key=lambda p: p.parts)


def read_jobspec(path: Path) -> str:
    """The file's text; a UsageError when it cannot be opened, a ValueError when it is not text."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: {exc.strerror or exc}") from None
    if b"\0" in raw:
        raise ValueError("a binary file, not a jobspec (it contains NUL bytes)")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


def validate_file(path: Path, variables: Mapping[str, object] | None = None) -> FileResult:
    """Read and validate one file (raises UsageError only when it cannot be opened)."""
    try:
        text = read_jobspec(path)
    except ValueError as exc:
        return FileResult(str(path), REFUSED, problems=(("", str(exc)),))
    return validate_text(text, source=str(path), fmt=_FORMATS.get(path.suffix.lower()), variables=variables)


def validate_text(
    text: str, *, source: str, fmt: str | None = None, variables: Mapping[str, object] | None = None
) -> FileResult:
    """Parse one jobspec and check its templates as a submission would."""
    from agent.jobspec import JobspecError, parse_jobspec

    try:
        parsed = parse_jobspec(text, source=source, fmt=fmt, variables=variables or {})
    except JobspecError as exc:
        return FileResult(source, REFUSED, problems=tuple(exc.problems))
    except RecursionError:
        return FileResult(source, REFUSED, problems=(("", "nested too deeply to parse"),))
    except Exception as exc:  # a parser bug must not become a traceback: report it as the refusal
        return FileResult(source, REFUSED, problems=(("", f"internal error: {type(exc).__name__}: {exc}"),))
    problems = _template_problems(parsed.job)
    warnings = tuple(parsed.warnings)
    if problems:
        return FileResult(source, REFUSED, warnings=warnings, problems=tuple(problems))
    return FileResult(source, WARNINGS if warnings else ACCEPTED, warnings=warnings)


def _template_problems(job: object) -> list[tuple[str, str]]:
    checker: Callable[[Any], str | None]
    try:
        from agent.templates.render import check_template

        checker = check_template
    except Exception as exc:  # a broken checker refuses the templates rather than raising
        reason = f"internal error: the template checker cannot be loaded: {type(exc).__name__}: {exc}"

        def checker(_tpl: Any) -> str | None:
            return reason

    problems: list[tuple[str, str]] = []
    job_id = getattr(job, "id", "")
    for group in getattr(job, "groups", ()):
        for task in group.tasks:
            for i, tpl in enumerate(task.templates):
                where = f"job.{job_id}.group.{group.name}.task.{task.name}.template[{i}]"
                try:
                    problem = checker(tpl)
                except Exception as exc:  # the checker must not raise; if it does, that is the refusal
                    problem = f"internal error: {type(exc).__name__}: {exc}"
                if problem:
                    problems.append((where, problem))
    return problems


def validate_paths(paths: Sequence[Path], variables: Mapping[str, object] | None = None) -> list[FileResult]:
    """Every file under `paths` (see collect_files), validated; raises UsageError for unreadable paths."""
    return [validate_file(p, variables) for p in collect_files(paths)]


# ---------------------------------------------------------------------------------------------
# Summary
# ---------------------------------------------------------------------------------------------


def abstract_path(path: str) -> str:
    """A field path without its specific names: `job.web.group.api.task.srv.template[1]` ->
    `group.*.task.*.template`. The job's own id goes; labels and list indices become `*` / nothing."""
    parts = _INDEX.sub("", path).split(".")
    out: list[str] = []
    skip_label = False
    for part in parts:
        if skip_label:
            out.append("*")
            skip_label = False
            continue
        out.append(part)
        skip_label = part in _LABELLED
    if out[:2] == ["job", "*"]:
        out = out[2:]
    return ".".join(out) or "job"


def split_warning(warning: str) -> tuple[str, str]:
    """A warning string "path: reason" -> (path, reason); ("", warning) when it names no path."""
    head, sep, tail = warning.partition(": ")
    if sep and _PATHLIKE.match(head) and (head.startswith("job") or "." in head):
        return head, tail
    return "", warning


def reason_key(path: str, reason: str) -> str:
    reason = _TEMPLATE_POSITION.sub(":N:N:", _POSITION.sub("line N, column N", reason))
    return f"{abstract_path(path)}: {reason}" if path else reason


def summarize(results: Sequence[FileResult], top: int = TOP) -> Summary:
    warn_counts: Counter[str] = Counter()
    refuse_counts: Counter[str] = Counter()
    for r in results:
        for w in r.warnings:
            warn_counts[reason_key(*split_warning(w))] += 1
        for path, reason in r.problems:
            refuse_counts[reason_key(path, reason)] += 1
    return Summary(
        total=len(results),
        accepted=sum(r.status == ACCEPTED for r in results),
        with_warnings=sum(r.status == WARNINGS for r in results),
        refused=sum(r.status == REFUSED for r in results),
        top_warnings=tuple(_top(warn_counts, top)),
        top_refusals=tuple(_top(refuse_counts, top)),
        refused_files=tuple(r.path for r in results if r.status == REFUSED),
    )


def _top(counts: Counter[str], n: int) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


# ---------------------------------------------------------------------------------------------
# Text (the CLI prints these)
# ---------------------------------------------------------------------------------------------


def format_result(result: FileResult) -> str:
    if result.status == ACCEPTED:
        return f"{result.path}: accepted"
    if result.status == WARNINGS:
        n = len(result.warnings)
        lines = [f"{result.path}: accepted with {n} warning{'s' if n != 1 else ''}"]
        lines += [f"    {w}" for w in result.warnings]
        return "\n".join(lines)
    lines = [f"{result.path}: refused"]
    lines += [f"    {path}: {reason}" if path else f"    {reason}" for path, reason in result.problems]
    return "\n".join(lines)


def format_summary(summary: Summary) -> str:
    rows = [
        ("accepted", summary.accepted),
        ("accepted with warnings", summary.with_warnings),
        ("refused", summary.refused),
    ]
    width = max(len(name) for name, _ in rows)
    lines = [f"summary: {summary.total} file{'s' if summary.total != 1 else ''}"]
    lines += [f"  {name:<{width}}  {n:>5}  {summary.percent(n):5.1f} %" for name, n in rows]
    for title, top in (("warnings", summary.top_warnings), ("refusals", summary.top_refusals)):
        if top:
            lines.append(f"most frequent {title}:")
            lines += [f"  {n:>5}  {key}" for key, n in top]
    return "\n".join(lines)


def exit_code(results: Sequence[FileResult]) -> int:
    """0 when nothing was refused, 1 otherwise (2, usage errors, is the CLI's)."""
    return 1 if any(r.status == REFUSED for r in results) else 0
