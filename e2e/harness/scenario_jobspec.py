"""A scenario's jobspec as the report gives it (pure): HCL2, or JSON.

JSON comes in the forms Nomad's `job run -json` takes (command/helpers.go, JobGetter.Get): the API
job in an envelope, `{"Job": {...}}` (`nomad job inspect`, `nomad job run -output`), or bare
(`nomad job inspect -json`, GET /v1/job/:id). Such a job is registered as it is (PUT /v1/jobs, its
submission's format "json"), as `nomad job run -json` registers it; the server's own fields in an
inspect output (Status, indexes, SubmitTime, ...) are ignored by the register as Nomad ignores them.
HCL's JSON syntax (`{"job": {"name": {...}}}`) is HCL2 and goes through `/v1/jobs/parse` as HCL
text does (Nomad's HCL2 parser reads both).
"""

from __future__ import annotations

import json
import re
from typing import Any

HCL_IMAGE = re.compile(r'^\s*image\s*=\s*"([^"$]+)"', re.MULTILINE)
HCL_JOB = re.compile(r'job\s+"([^"]+)"')


class JobspecFormError(ValueError):
    """A jobspec that is neither HCL2 nor one of the JSON forms: the message says which forms are."""


def is_json(text: str) -> bool:
    return text.lstrip().startswith("{")


def api_job(text: str) -> dict[str, Any] | None:
    """The API job of a JSON jobspec in Nomad's API form (enveloped or bare); None for HCL2 (its
    native or its JSON syntax), which the agent parses. JobspecFormError for JSON of neither form."""
    if not is_json(text):
        return None
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise JobspecFormError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise JobspecFormError("a JSON jobspec is an object")
    if "Job" in doc:
        job = doc["Job"]
        if not isinstance(job, dict):
            raise JobspecFormError('"Job" is the job, an object (as `nomad job inspect` prints it)')
        return _named(job, '"Job"')
    if "job" in doc and isinstance(doc["job"], dict):
        return None  # HCL's JSON syntax: parsed as HCL2
    if "TaskGroups" in doc or "ID" in doc:
        return _named(doc, "the job")
    raise JobspecFormError(
        'JSON of no jobspec form: {"Job": {...}} (nomad job inspect), a bare API job (ID, TaskGroups: '
        'nomad job inspect -json) or HCL\'s JSON syntax ({"job": {...}})'
    )


def _named(job: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(job.get("ID"), str) or not job["ID"]:
        raise JobspecFormError(f'{where} has no "ID" (the job\'s id: a register needs it)')
    if not isinstance(job.get("TaskGroups"), list) or not job["TaskGroups"]:
        raise JobspecFormError(f'{where} has no "TaskGroups" (a list of the job\'s groups)')
    return job


def check(text: str) -> str | None:
    """Why a jobspec's text cannot be a scenario's jobspec, or None (HCL2 is the agent's to judge)."""
    try:
        api_job(text)
    except JobspecFormError as exc:
        return str(exc)
    return None


def submission(text: str) -> dict[str, Any]:
    """The register's Submission: the source as given and its format, as the CLI sends them."""
    fmt = "json" if api_job(text) is not None else "hcl2"
    return {"Source": text, "Format": fmt, "VariableFlags": {}, "Variables": ""}


def images_in(text: str) -> list[str]:
    """The literal images a jobspec names (for a new scenario's image map), in any form."""
    job = api_job(text) if is_json(text) else None
    if job is not None:
        return sorted(
            {
                str(t["Config"]["image"])
                for g in job.get("TaskGroups") or []
                if isinstance(g, dict)
                for t in g.get("Tasks") or []
                if isinstance(t, dict)
                and isinstance(t.get("Config"), dict)
                and isinstance(t["Config"].get("image"), str)
                and "$" not in t["Config"]["image"]
            }
        )
    if is_json(text):  # HCL's JSON syntax: every "image" string under a config
        return sorted({m for m in re.findall(r'"image"\s*:\s*"([^"$]+)"', text)})
    return sorted(set(HCL_IMAGE.findall(text)))


def job_id(text: str) -> str:
    """The job's id as the jobspec names it (the job block's label, or the API job's ID); "" if none."""
    job = api_job(text) if is_json(text) else None
    if job is not None:
        return str(job["ID"])
    m = HCL_JOB.search(text)
    return m.group(1) if m else ""
