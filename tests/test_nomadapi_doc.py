"""docs/nomad-api.md's endpoint tables are true: every endpoint of Nomad's HTTP API is listed
(implemented, partial or not, with why), every route the agent serves is listed as implemented or
partial with its methods, and every endpoint listed so is served.

NOMAD_ENDPOINTS is Nomad's own route table: `command/agent/http.go` registerHandlers and
`http_ce.go` (the Enterprise-only paths), with the sub-paths each handler dispatches on
(JobSpecificRequest, NodeSpecificRequest, ClientAllocRequest, DeploymentSpecificRequest, ...), as
the pages under developer.hashicorp.com/nomad/api-docs document them. Parameters are `:name`."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

from tests.agent_lab import NomadRoutes
from tests.fakes import FakeNode

DOC = Path(__file__).resolve().parent.parent / "docs" / "nomad-api.md"

NOMAD_ENDPOINTS = (  # noqa: SIM905 (170 paths, as a table)
    """
/v1/jobs /v1/jobs/parse /v1/jobs/statuses /v1/validate/job
/v1/job/:job_id /v1/job/:job_id/evaluate /v1/job/:job_id/allocations /v1/job/:job_id/evaluations
/v1/job/:job_id/periodic/force /v1/job/:job_id/plan /v1/job/:job_id/summary /v1/job/:job_id/dispatch
/v1/job/:job_id/dispatch/payload /v1/job/:job_id/versions /v1/job/:job_id/revert
/v1/job/:job_id/deployments /v1/job/:job_id/deployment /v1/job/:job_id/stable /v1/job/:job_id/scale
/v1/job/:job_id/services /v1/job/:job_id/submission /v1/job/:job_id/actions /v1/job/:job_id/action
/v1/job/:job_id/versions/:name/tag
/v1/nodes /v1/node/:node_id /v1/node/:node_id/evaluate /v1/node/:node_id/allocations
/v1/node/:node_id/drain /v1/node/:node_id/eligibility /v1/node/:node_id/purge
/v1/node/pools /v1/node/pool/:name /v1/node/pool/:name/nodes /v1/node/pool/:name/jobs
/v1/allocations /v1/allocation/:alloc_id /v1/allocation/:alloc_id/stop
/v1/allocation/:alloc_id/services /v1/allocation/:alloc_id/checks
/v1/evaluations /v1/evaluations/count /v1/evaluation/:eval_id /v1/evaluation/:eval_id/allocations
/v1/deployments /v1/deployment/:deployment_id /v1/deployment/allocations/:deployment_id
/v1/deployment/fail/:deployment_id /v1/deployment/pause/:deployment_id
/v1/deployment/promote/:deployment_id /v1/deployment/allocation-health/:deployment_id
/v1/deployment/unblock/:deployment_id
/v1/volumes /v1/volumes/external /v1/volumes/snapshot /v1/volume/csi/:volume_id
/v1/volume/csi/:volume_id/create /v1/volume/csi/:volume_id/detach /v1/volume/csi/:volume_id/delete
/v1/volume/host/create /v1/volume/host/register /v1/volume/host/:volume_id
/v1/volumes/claims /v1/volumes/claim/:claim_id /v1/plugins /v1/plugin/csi/:plugin_id
/v1/acl/policies /v1/acl/policy/:name /v1/acl/bootstrap /v1/acl/tokens /v1/acl/token
/v1/acl/token/self /v1/acl/token/:accessor_id /v1/acl/token/onetime /v1/acl/token/onetime/exchange
/v1/acl/roles /v1/acl/role /v1/acl/role/:role_id /v1/acl/role/name/:name
/v1/acl/auth-methods /v1/acl/auth-method /v1/acl/auth-method/:name
/v1/acl/binding-rules /v1/acl/binding-rule /v1/acl/binding-rule/:binding_rule_id
/v1/acl/oidc/auth-url /v1/acl/oidc/complete-auth /v1/acl/login
/v1/acl/identity/client-introduction-token
/v1/client/fs/ls/:alloc_id /v1/client/fs/stat/:alloc_id /v1/client/fs/readat/:alloc_id
/v1/client/fs/cat/:alloc_id /v1/client/fs/stream/:alloc_id /v1/client/fs/logs/:alloc_id
/v1/client/gc /v1/client/stats /v1/client/metadata /v1/client/identity /v1/client/identity/renew
/v1/client/allocation/:alloc_id/checks /v1/client/allocation/:alloc_id/stats
/v1/client/allocation/:alloc_id/exec /v1/client/allocation/:alloc_id/snapshot
/v1/client/allocation/:alloc_id/restart /v1/client/allocation/:alloc_id/gc
/v1/client/allocation/:alloc_id/signal /v1/client/allocation/:alloc_id/pause
/v1/agent/self /v1/agent/join /v1/agent/members /v1/agent/force-leave /v1/agent/servers
/v1/agent/schedulers /v1/agent/schedulers/config /v1/agent/keyring/list /v1/agent/keyring/install
/v1/agent/keyring/use /v1/agent/keyring/remove /v1/agent/health /v1/agent/host /v1/agent/reload
/v1/agent/monitor /v1/agent/monitor/export /v1/agent/pprof/:profile
/v1/services /v1/service/:service_name /v1/service/:service_name/:service_id
/v1/metrics /v1/regions /v1/scaling/policies /v1/scaling/policy/:policy_id
/v1/status/leader /v1/status/peers /v1/search /v1/search/fuzzy
/v1/operator/license /v1/operator/raft/configuration /v1/operator/raft/peer
/v1/operator/raft/transfer-leadership /v1/operator/keyring/keys /v1/operator/keyring/key/:key_id
/v1/operator/keyring/rotate /v1/operator/autopilot/configuration /v1/operator/autopilot/health
/v1/operator/snapshot /v1/operator/upgrade-check/vault-workload-identity /v1/operator/utilization
/v1/operator/scheduler/configuration /v1/system/gc /v1/system/reconcile/summaries
/v1/event/stream /v1/namespaces /v1/namespace /v1/namespace/:name /v1/vars /v1/var/:path
/.well-known/jwks.json /.well-known/openid-configuration
/v1/sentinel/policies /v1/sentinel/policy/:name /v1/quotas /v1/quota /v1/quota/:name
/v1/quota-usages /v1/quota/usage/:name
/v1/recommendations /v1/recommendation /v1/recommendation/:recommendation_id
/v1/recommendations/apply
"""
).split()

STATES = ("implemented", "partial", "not")
_ITEM = re.compile(r"`((?:[A-Z]+/)*[A-Z]+ )?(/[^`\s]*)`")


def doc_rows(text: str) -> list[tuple[list[tuple[set[str], str]], str]]:
    """Each endpoint row of the doc's tables: ([(methods, path)], state)."""
    rows = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[1] not in STATES:
            continue
        items = [
            (set((m or "").split()[0].split("/")) if m else set(), p) for m, p in _ITEM.findall(cells[0])
        ]
        rows.append((items, cells[1]))  # no items: a row naming no endpoint (a test says so)
    return rows


def _sample(path: str) -> str:
    """A concrete path for a documented one: each `:param` as a value."""
    return re.sub(r":[a-z_]+", "x0abc", path)


def _shape(path: str) -> str:
    return re.sub(r":[a-z_]+", ":", path)


@pytest.fixture(scope="module")
def served() -> list[tuple[str, re.Pattern[str]]]:
    """The agent's route table as its daemon builds it (agent.nomadapi.routes.build_nomad_routes),
    with the two routes the daemon adds itself (/v1/metrics; the exec websocket)."""
    node = FakeNode(Path(tempfile.mkdtemp()))
    core = node.core()
    try:
        table = [(m, re.compile(rx)) for m, rx, _ in NomadRoutes(core).table]
    finally:
        core.stop()
    extra = [
        ("GET", re.compile(r"/v1/metrics")),
        ("GET", re.compile(r"/v1/client/allocation/([^/]+)/exec")),
    ]
    return table + extra


def test_every_endpoint_of_nomads_api_is_in_the_doc() -> None:
    rows = doc_rows(DOC.read_text())
    listed = {_shape(p) for items, _ in rows for _, p in items}
    missing = [p for p in NOMAD_ENDPOINTS if _shape(p) not in listed]
    assert not missing, f"docs/nomad-api.md does not list: {missing}"
    assert all(items for items, _ in rows), "a row of the tables names no endpoint by its path"


def test_every_route_the_agent_serves_is_documented_as_served(
    served: list[tuple[str, re.Pattern[str]]],
) -> None:
    documented = [
        (methods, _sample(p))
        for items, state in doc_rows(DOC.read_text())
        if state != "not"
        for methods, p in items
    ]
    undocumented = [
        f"{m} {rx.pattern}"
        for m, rx in served
        if not any(m in methods and rx.fullmatch(sample) for methods, sample in documented)
    ]
    assert not undocumented, f"served but not documented as implemented/partial: {undocumented}"


def test_every_endpoint_documented_as_served_is_served(served: list[tuple[str, re.Pattern[str]]]) -> None:
    rows = doc_rows(DOC.read_text())
    unserved = [
        f"{m} {p}"
        for items, state in rows
        if state != "not"
        for methods, p in items
        for m in sorted(methods) or ["GET"]
        if not any(m == sm and rx.fullmatch(_sample(p)) for sm, rx in served)
    ]
    assert not unserved, f"documented as served but no route: {unserved}"
    literal = [(m, rx) for m, rx in served if not rx.groups]  # a `/v1/node/:id` route takes any name
    not_served = [
        p
        for items, state in rows
        if state == "not"
        for methods, p in items
        if any(rx.fullmatch(_sample(p)) and (not methods or m in methods) for m, rx in literal)
    ]
    assert not not_served, f"documented as not served but a route answers: {not_served}"
