"""Nomad's deployments as one node's client shows them (command/agent/deployment_endpoint.go; issue
51/52): `/v1/deployments`, `/v1/deployment/...`, `/v1/job/:id/deployment(s)`, `/stable`: the
records agent.nomadapi.deploywatch keeps for each version of a service job, as Nomad's
structs.Deployment, with the verbs `nomad deployment fail|pause|resume|promote` and the allocs'
health as Nomad's endpoints answer them (their refusals are Nomad's uncoded errors: 500 and its text).
Handed the narrow port it reads, not the routes' whole context. The groups' scaling policies are
agent.nomadapi.scaling.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol
from urllib.parse import unquote

from agent.api.handler import Handler, Response, query_params
from agent.errors import NotFound
from agent.nomadapi.context import CorePort, NodeParts, job_id_of
from agent.nomadapi.deploywatch import DeploymentError, Deployments, group_counts, look
from agent.nomadapi.gojson import go_time, ns
from agent.nomadapi.http import HttpError, answer, blocking, body_json, check_scope, meta_headers
from agent.nomadapi.jobjson import DEFAULT_PRIORITY
from agent.nomadapi.node import Evals, NodeIdentity

NS = "default"
EVAL_TRIGGER = "deployment-watcher"  # Nomad's EvalTriggerDeploymentWatcher
_KINDS = ("deployment", "job")


class DeploymentPort(CorePort, NodeParts, Protocol):
    node: NodeIdentity
    evals: Evals
    deployments: Deployments

    def alloc_dict(self, view: Mapping[str, Any], *, stub: bool) -> dict[str, Any]: ...


def deployment_json(d: Mapping[str, Any]) -> dict[str, Any]:
    """structs.Deployment (nomad/structs/deployment.go), as Nomad's endpoints write it."""
    counts = group_counts(d)
    groups = {
        name: {
            "AutoRevert": bool(tg.get("auto_revert")),
            "AutoPromote": False,
            "ProgressDeadline": ns(float(tg["progress_deadline"])),
            "RequireProgressBy": go_time(float(tg["require_progress_by"])),
            "Promoted": bool(tg["promoted"]),
            "PlacedCanaries": None,
            "DesiredCanaries": 0,
            "DesiredTotal": int(tg["desired_total"]),
            "PlacedAllocs": counts[name]["placed"],
            "HealthyAllocs": counts[name]["healthy"],
            "UnhealthyAllocs": counts[name]["unhealthy"],
        }
        for name, tg in d["groups"].items()
    }
    return {
        "ID": d["id"],
        "Namespace": NS,
        "JobID": d["job_id"],
        "JobVersion": int(d["job_version"]),
        "JobModifyIndex": int(d["job_index"]),
        "JobSpecModifyIndex": int(d["job_index"]),
        "JobCreateIndex": int(d["job_index"]),
        "IsMultiregion": False,
        "TaskGroups": groups,
        "Status": d["status"],
        "StatusDescription": d["description"],
        "EvalPriority": DEFAULT_PRIORITY,
        "CreateIndex": int(d["create_index"]),
        "ModifyIndex": int(d["modify_index"]),
        "CreateTime": ns(float(d["created"])),
        "ModifyTime": ns(float(d["modified"])),
    }


def deployment_routes(api: DeploymentPort) -> list[tuple[str, str, Handler]]:
    return [*_deployment_reads(api), *_deployment_verbs(api)]


def _fresh(api: DeploymentPort, read: Callable[[], Any]) -> Callable[[], Any]:
    """`read` on the loop after the deployments are brought up to date (an agent restarted while
    one ran looks again at the first read)."""

    def fresh() -> Any:
        def on_loop() -> Any:
            look(api, api.deployments)
            return read()

        return api.call(on_loop)

    return fresh


def _deployment_reads(api: DeploymentPort) -> list[tuple[str, str, Handler]]:
    deployments = api.deployments

    def found(ref: str) -> dict[str, Any]:
        d = deployments.find(ref)
        if d is None:
            raise NotFound("deployment not found")
        return d

    def listing(groups: tuple[str, ...], body: bytes) -> Response:
        params = query_params()
        check_scope(params, api.node.region, listing=True)
        prefix = params.get("prefix", "")

        def read() -> list[dict[str, Any]]:
            return [deployment_json(d) for d in deployments.all() if str(d["id"]).startswith(prefix)]

        return answer(blocking(api.changes, _KINDS, _fresh(api, read)))

    def one(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        ref = unquote(groups[0])
        return answer(blocking(api.changes, _KINDS, _fresh(api, lambda: deployment_json(found(ref)))))

    def allocations(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        ref = unquote(groups[0])

        def read() -> list[dict[str, Any]]:
            d = deployments.find(ref)  # none: no allocs, as Nomad's AllocsByDeployment
            if d is None:
                return []
            views = [v for v in api.allocs.views(d["job_id"]) if str(v["id"]) in d["allocs"]]
            return [api.alloc_dict(v, stub=True) for v in views]

        return answer(blocking(api.changes, ("deployment", "alloc"), _fresh(api, read)))

    def of_job(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        job_id = job_id_of(groups[0])

        def read() -> list[dict[str, Any]]:  # an unknown job has none: [], as Nomad's
            return [deployment_json(d) for d in deployments.of_job(job_id)]

        return answer(blocking(api.changes, _KINDS, _fresh(api, read)))

    def latest(groups: tuple[str, ...], body: bytes) -> Response:
        """The job's newest deployment, null when it has none or there is no such job (Nomad's
        Job.LatestDeployment)."""
        check_scope(query_params(), api.node.region)
        job_id = job_id_of(groups[0])

        def read() -> dict[str, Any] | None:
            mine = deployments.of_job(job_id)
            return deployment_json(mine[0]) if mine else None

        return answer(blocking(api.changes, _KINDS, _fresh(api, read)))

    return [
        ("GET", r"/v1/deployments", listing),
        ("GET", r"/v1/deployment/allocations/([^/]+)", allocations),
        ("GET", r"/v1/deployment/([^/]+)", one),
        ("GET", r"/v1/job/([^/]+)/deployments", of_job),
        ("GET", r"/v1/job/([^/]+)/deployment", latest),
    ]


def refused(exc: DeploymentError) -> Response:
    """Nomad's answer to an error its server returns uncoded: 500, the text as it is (no newline:
    python-nomad's suite compares it whole)."""
    return 500, "text/plain; charset=utf-8", str(exc).encode()


_VERB_FIELDS = ("DeploymentID", "Pause", "All", "Groups", "HealthyAllocationIDs", "UnhealthyAllocationIDs")


def go_fields(data: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, Any]:
    """A request body's fields as Go's encoding/json decodes them into a struct: a key matches its
    field exactly, else without regard to case (python-nomad sends "UnHealthyAllocationIDs", which
    Nomad reads as UnhealthyAllocationIDs); keys of no field are dropped, as Go drops them."""
    out: dict[str, Any] = {}
    for name in names:
        if name in data:
            out[name] = data[name]
            continue
        folded = [k for k in data if k.casefold() == name.casefold()]
        if folded:
            out[name] = data[folded[0]]
    return out


def _named(data: Mapping[str, Any], deployment_id: str) -> None:
    """The body's DeploymentID, checked as Nomad's HTTP agent checks it (400s)."""
    given = data.get("DeploymentID")
    if not given:
        raise HttpError(400, "DeploymentID must be specified")
    if given != deployment_id:
        raise HttpError(400, "Deployment ID does not match")


def _ids(data: Mapping[str, Any], name: str) -> list[str]:
    value = data.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise HttpError(400, f'"{name}" must be a list of allocation IDs, not {json.dumps(value)[:40]}')
    return list(value)


def _deployment_verbs(api: DeploymentPort) -> list[tuple[str, str, Handler]]:
    deployments = api.deployments

    def verb(act: Callable[[str, dict[str, Any]], dict[str, Any]]) -> Handler:
        """A verb on the loop: Nomad's DeploymentUpdateResponse, with the evaluation the watcher
        creates for it (none for a pause); a refusal is Nomad's uncoded error, a 500 and its text."""

        def handler(groups: tuple[str, ...], body: bytes) -> Response:
            check_scope(query_params(), api.node.region)
            deployment_id = unquote(groups[0])
            data = go_fields(body_json(body), _VERB_FIELDS)

            def do() -> dict[str, Any]:
                look(api, deployments)
                d = act(deployment_id, data)
                out: dict[str, Any] = {"EvalID": "", "EvalCreateIndex": 0}
                if not (act is pause and data.get("Pause") is True):
                    ev = api.evals.create(d["job_id"], EVAL_TRIGGER, "service")
                    out = {"EvalID": ev.id, "EvalCreateIndex": ev.create_index}
                look(api, deployments)
                reverted = d.get("reverted_to") if act is fail else None
                return {
                    **out,
                    "DeploymentModifyIndex": int(d["modify_index"]),
                    "RevertedJobVersion": reverted,
                }

            try:
                out = api.call(do)
            except DeploymentError as exc:
                return refused(exc)
            index = api.changes.current()
            meta_headers(index)
            return answer({**out, "Index": index, "LastContact": 0, "KnownLeader": True})

        return handler

    def fail(deployment_id: str, data: dict[str, Any]) -> dict[str, Any]:
        return deployments.fail(deployment_id)

    def pause(deployment_id: str, data: dict[str, Any]) -> dict[str, Any]:
        _named(data, deployment_id)
        return deployments.pause(deployment_id, data.get("Pause") is True)

    def promote(deployment_id: str, data: dict[str, Any]) -> dict[str, Any]:
        _named(data, deployment_id)
        groups = None if data.get("All") is True else _ids(data, "Groups")
        return deployments.promote(deployment_id, groups)

    def health(deployment_id: str, data: dict[str, Any]) -> dict[str, Any]:
        _named(data, deployment_id)
        healthy, unhealthy = _ids(data, "HealthyAllocationIDs"), _ids(data, "UnhealthyAllocationIDs")
        return deployments.set_health(deployment_id, healthy, unhealthy)

    return [
        (method, rf"/v1/deployment/{name}/([^/]+)", verb(act))
        for name, act in (
            ("fail", fail),
            ("pause", pause),
            ("promote", promote),
            ("allocation-health", health),
        )
        for method in ("PUT", "POST")
    ] + _stable_routes(api)


def _stable_routes(api: DeploymentPort) -> list[tuple[str, str, Handler]]:
    """`PUT /v1/job/:id/stable` (Nomad's Job.Stable): a version of the job marked stable or not."""
    deployments = api.deployments

    def stable(groups: tuple[str, ...], body: bytes) -> Response:
        check_scope(query_params(), api.node.region)
        job_id = job_id_of(groups[0])
        data = go_fields(body_json(body), ("JobID", "JobVersion", "Stable"))
        if not data.get("JobID"):
            raise HttpError(400, "JobID must be specified")
        if data.get("JobID") != job_id:
            raise HttpError(400, "Job ID does not match")
        version = data.get("JobVersion", 0)
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise HttpError(
                400, f'"JobVersion" must be a version number >= 0, not {json.dumps(version)[:32]}'
            )
        mark = data.get("Stable", False)
        if not isinstance(mark, bool):
            raise HttpError(400, f'"Stable" must be true or false, not {json.dumps(mark)[:32]}')

        def do() -> int:
            record = api.store.get("job", job_id) if job_id in api.jobs else None
            kept = [record, *(record.get("history") or [])] if record else []
            submit = next((h.get("submit_time") for h in kept if int(h.get("version", -1)) == version), None)
            if submit is None:
                raise DeploymentError(f'job "{job_id}" in namespace "{NS}" at version {version} not found')
            return deployments.mark_stable(job_id, version, float(submit or 0.0), mark)

        try:
            index = api.call(do)
        except DeploymentError as exc:
            return refused(exc)
        meta_headers(index)
        return answer({"Index": index})

    return [(m, r"/v1/job/([^/]+)/stable", stable) for m in ("PUT", "POST")]
