"""Jobspecs: Nomad's HCL2 (a documented subset) or JSON -> the agent's `Job`.

    parsed = parse_jobspec(text, source="<request>")   # raises JobspecError listing every problem
    parsed.job, parsed.warnings

Nomad fields the agent does not implement are accepted with one warning each, naming the field's path
(see `agent.jobspec.fields`); fields that are not Nomad's and invalid values are rejected, all of them at
once, each with its path and reason. Durations become seconds, signals stay names ("SIGHUP"), template
destinations become "local/..." or "secrets/..." paths, and `${...}` inside strings is kept verbatim for
runtime interpolation.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agent.jobspec.durations import parse_duration
from agent.jobspec.errors import JobspecError
from agent.jobspec.limits import DEFAULT_LIMITS, Limits
from agent.jobspec.tree import Report
from agent.structs.model import Job

__all__ = [
    "DEFAULT_LIMITS",
    "JobspecError",
    "Limits",
    "ParsedJob",
    "load_jobspec",
    "parse_duration",
    "parse_jobspec",
]

log = logging.getLogger(__name__)

FORMATS = ("hcl", "json")
_SUFFIX_FORMATS = {".json": "json", ".hcl": "hcl", ".nomad": "hcl"}


@dataclass(frozen=True)
class ParsedJob:
    job: Job
    warnings: tuple[str, ...]
    files: Mapping[str, str] = field(default_factory=dict)  # what HCL's file() read: sent with the job


def parse_jobspec(
    text: str,
    *,
    source: str,
    fmt: str | None = None,
    variables: Mapping[str, object] | None = None,
    limits: Limits = DEFAULT_LIMITS,
    base_dir: Path | None = None,
    files: Mapping[str, str] | None = None,
) -> ParsedJob:
    """Parse a jobspec; `fmt` is "hcl", "json" or None (JSON when the text starts with "{").

    `variables` are the HCL2 input variables given from outside (`-var k=v`, `-var-file`, the API
    request's `Variables`): strings are parsed by the variable's type as Nomad does, other values are
    taken as they are. `limits` bound counts, kill timeouts, size and nesting. `base_dir` is the
    jobspec file's directory, where HCL's `file()` reads; `files` are the files the CLI read that way
    and sent with the jobspec (over the API `file()` reads only those, never the agent's disk)."""
    # The parsers load with the first jobspec, not with the package: a daemon restores its jobs from
    # their canonical JSON and may never parse one (about 1 MB of its RSS and 60 ms of its start).
    from agent.jobspec.api_json import parse_json
    from agent.jobspec.build import Builder
    from agent.jobspec.hcl import parse_hcl
    from agent.jobspec.hcljson import is_hcl_json, parse_hcl_json

    if fmt is None:
        fmt = "json" if text.lstrip().startswith("{") else "hcl"
    if fmt not in FORMATS:
        raise JobspecError(source, [("", f'unknown jobspec format "{fmt}": use "hcl" or "json"')])
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > limits.max_bytes:
        raise JobspecError(source, [("", f"the jobspec is {size} bytes, more than {limits.max_bytes}")])
    report = Report()
    read: dict[str, str] = {}
    if fmt == "json" and is_hcl_json(text):  # HCL's JSON syntax: {"job": {"<id>": {...}}}, variables, ...
        top = parse_hcl_json(
            text, report, variables or {}, base_dir=base_dir, limits=limits, files=files, read=read
        )
    elif fmt == "json":
        top = parse_json(text, report, limits)
    else:
        top = parse_hcl(text, report, variables or {}, base_dir=base_dir, files=files, read=read)
    job = Builder(report, limits).job(top) if top is not None else None
    if report.problems or job is None:
        log.debug("jobspec %s rejected with %d problems", source, len(report.problems))
        raise JobspecError(source, report.problems or [("", "no job found")])
    for warning in report.warnings:
        log.info("jobspec %s: %s", source, warning)
    used = read if base_dir is not None else dict(files or {})
    return ParsedJob(job=job, warnings=tuple(report.warnings), files=used)


def load_jobspec(
    path: Path, variables: Mapping[str, object] | None = None, limits: Limits = DEFAULT_LIMITS
) -> ParsedJob:
    """Read and parse a jobspec file; the format comes from the suffix (.json, .hcl, .nomad) or the text."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise JobspecError(str(path), [("", f"cannot read the jobspec: {reason}")]) from e
    return parse_jobspec(
        text,
        source=str(path),
        fmt=_SUFFIX_FORMATS.get(path.suffix),
        variables=variables,
        limits=limits,
        base_dir=path.parent,
    )
