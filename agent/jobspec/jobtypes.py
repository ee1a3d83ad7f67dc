"""A job's namespace and its kind of job beyond `type`: `parameterized` (Nomad's ParameterizedJobConfig,
read and checked as its Validate does), a task's `dispatch_payload` (DispatchPayloadConfig) and
`periodic` (PeriodicConfig, checked as its Validate does; launched by agent.nomadapi.jobperiodic).

Nomad parses cron specs with gorhill/cronexpr; the agent with croniter. The two agree on the usual
five fields (minute hour day-of-month month day-of-week) and the `@hourly`-style macros; cronexpr's
6- and 7-field forms (a year, and seconds first) read differently in croniter, so they are refused,
naming the spec, rather than launched at other times than Nomad would.

The agent serves one namespace, "default" (agent.nomadapi.http): a job naming another is refused
here, as the API refuses it, rather than run in "default" under a name it did not ask for.
"""

from __future__ import annotations

import datetime
import posixpath
import zoneinfo
from typing import TYPE_CHECKING

from croniter import croniter

from agent.jobspec.reader import short
from agent.jobspec.tree import Body, join
from agent.structs.model import Parameterized, Periodic

if TYPE_CHECKING:
    from agent.jobspec.reader import BodyReader

NAMESPACE = "default"
PAYLOAD_MODES = ("optional", "required", "forbidden")  # Nomad's DispatchPayload{Optional,Required,Forbidden}
PARAMETERIZED_TYPES = ("batch", "sysbatch")  # and periodic ones (Nomad's Job.Validate)
CRON_MACROS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
CRON_FIELDS = 5


def read_namespace(builder: BodyReader, body: Body, path: str) -> None:
    """The job's `namespace`: only "default" (or none) is served."""
    ns = builder._str(body, "namespace", path)
    if ns and ns != NAMESPACE:
        builder.report.error(
            join(path, "namespace"),
            f'namespace "{short(ns)}" not found: this agent serves only the "{NAMESPACE}" namespace',
        )


def read_parameterized(builder: BodyReader, body: Body, path: str, job_type: str) -> Parameterized | None:
    """The `parameterized` block, as Nomad's Job.Validate and ParameterizedJobConfig.Validate check it:
    batch or sysbatch only, a known payload mode ("optional" by default), disjoint meta key sets."""
    found = builder._single(body, "parameterized", path)
    if found is None:
        return None
    pb, ppath = found
    builder._keys(pb, "parameterized", ppath)
    if job_type not in PARAMETERIZED_TYPES:
        builder.report.error(ppath, 'Parameterized job can only be used with "batch" or "sysbatch" scheduler')
    payload = builder._choice(pb, "payload", ppath, PAYLOAD_MODES, "optional", what="payload requirement")
    required = builder._str_list(pb, "meta_required", ppath)
    optional = builder._str_list(pb, "meta_optional", ppath)
    both = sorted(set(required) & set(optional))
    if both:
        builder.report.error(
            ppath,
            "Required and optional meta keys should be disjoint. Following keys exist in both: "
            f"{', '.join(short(k) for k in both)}",
        )
    return Parameterized(payload=payload or "optional", meta_required=required, meta_optional=optional)


def read_dispatch_payload(builder: BodyReader, body: Body, path: str) -> str:
    """A task's `dispatch_payload { file }`: where under its local/ dir a dispatch's payload is
    written; a path that leaves local/ (`..`, absolute) is refused, as Nomad's
    DispatchPayloadConfig.Validate refuses one escaping the alloc dir (the agent keeps it in the task's
    own local/)."""
    found = builder._single(body, "dispatch_payload", path)
    if found is None:
        return ""
    db, dpath = found
    builder._keys(db, "dispatch_payload", dpath)
    file = builder._str(db, "file", dpath, required=True)
    if file and (why := payload_path_problem(file)):
        builder.report.error(join(dpath, "file"), why)
        return ""
    return file


def payload_path_problem(file: str) -> str | None:
    """Why `file` cannot be where a payload is written (relative to the task's local/), or None."""
    if "\0" in file:
        return "invalid destination path: a NUL byte"
    if file.startswith("/"):
        return f'"{short(file)}" is absolute: give a path relative to the task\'s local/ dir'
    parts = posixpath.normpath(posixpath.join("local", file)).split("/")
    if parts[0] != "local" or len(parts) < 2:  # local/ and at least a name
        return f'"{short(file)}": destination escapes the task\'s local/ dir'
    return None


def read_periodic(
    builder: BodyReader, body: Body, path: str, job_type: str, parameterized: bool
) -> Periodic | None:
    """The `periodic` block, as Nomad's Job.Validate and PeriodicConfig.Validate check it (an enabled
    one: batch or sysbatch, `cron` or `crons` and not both, a known time zone, valid specs)."""
    found = builder._single(body, "periodic", path)
    if found is None:
        return None
    pb, ppath = found
    builder._keys(pb, "periodic", ppath)
    spec = builder._str(pb, "cron", ppath)
    specs = builder._str_list(pb, "crons", ppath)
    zone = builder._str(pb, "time_zone", ppath) or "UTC"
    enabled = builder._bool(pb, "enabled", ppath, True)
    periodic = Periodic(spec, specs, zone, builder._bool(pb, "prohibit_overlap", ppath, False), enabled)
    if parameterized:  # Nomad launches a parameterized periodic job's dispatches on the schedule
        builder.report.error(
            ppath, "a job both periodic and parameterized is not run by fieldlab-agent: register one of them"
        )
    if not enabled:
        return periodic
    if job_type not in PARAMETERIZED_TYPES:
        builder.report.error(ppath, 'Periodic can only be used with "batch" or "sysbatch" scheduler')
    if spec and specs:
        builder.report.error(ppath, "Only cron or crons may be used")
    elif not spec and not specs:
        builder.report.error(ppath, "Must specify a spec")
    try:
        time_zone(zone)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        builder.report.error(
            join(ppath, "time_zone"), f'Invalid time zone "{short(zone)}": unknown time zone'
        )
    for i, text in enumerate((spec,) if spec else specs):
        if why := cron_problem(text):
            where = join(ppath, "cron") if spec else f"{join(ppath, 'crons')}[{i}]"
            builder.report.error(where, f'Invalid cron spec "{short(text)}": {why}')
    return periodic


def cron_problem(spec: str) -> str | None:
    """Why `spec` is not a cron spec the agent launches as Nomad would, or None."""
    text = spec.strip()
    if text.startswith("@"):
        return None if text in CRON_MACROS else f"not one of {', '.join(CRON_MACROS)}"
    if len(text.split()) in (CRON_FIELDS + 1, CRON_FIELDS + 2):
        return (
            "fieldlab-agent takes the five fields minute hour day-of-month month day-of-week (Nomad's "
            "6- and 7-field forms with a year or seconds are not taken)"
        )
    valid = len(text.split()) == CRON_FIELDS and croniter.is_valid(text)
    return None if valid else "not a valid cron expression (minute hour day-of-month month day-of-week)"


def time_zone(name: str) -> datetime.tzinfo:
    """A periodic job's time zone: UTC without the system's zoneinfo (a node without tzdata), any
    other from it. Raises ZoneInfoNotFoundError or ValueError for one it does not know."""
    return datetime.UTC if name in ("", "UTC") else zoneinfo.ZoneInfo(name)
