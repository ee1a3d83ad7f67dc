"""What the route modules of Nomad's API share, low in the package (as the one server context under
Nomad's command/agent/*_endpoint.go): the narrow ports a route module takes instead of the routes'
whole shared context, and the request readings every resource makes the same way.

A route module names the ports it reads (a Protocol composed of the ones here, or its own, as
agent.nomadapi.agentroutes does); agent.nomadapi.routes.NomadApi satisfies every one, and only
agent.nomadapi.routes builds the table from the route modules. No route module imports another's
routes or agent.nomadapi.routes, so the package holds no import circle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol
from urllib.parse import unquote

from agent.client.core import Core
from agent.errors import AgentError, NotFound
from agent.nomadapi.http import HttpError
from agent.nomadapi.node import Eval, Evals, NodeIdentity
from agent.state.store import Event
from agent.structs.model import Job

NS = "default"  # the one namespace this agent answers for
JOB_KINDS = ("job", "alloc", "eval")  # the changes a job's read waits on (its allocs and evals too)
ALLOC_KINDS = ("alloc",)


# -- the ports ------------------------------------------------------------------------------------
class CorePort(Protocol):
    """The core (its loop, registries and store) and this node."""

    core: Core
    node: NodeIdentity


class JobViews(Protocol):
    """A job as Nomad's api.Job, its versions and its summary (on the loop)."""

    def job_dict(self, job: Job, allocs: list[dict[str, Any]] | None = None) -> dict[str, Any]: ...

    def job_or_404(self, job_id: str) -> Job: ...

    def job_versions(self, job_id: str) -> list[dict[str, Any]]: ...

    def summary(
        self, job_id: str, groups: Sequence[str], allocs: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]: ...


class AllocViews(Protocol):
    """The allocs (managed and adopted) as the core sees them (on the loop), and as Nomad's
    api.Allocation and api.AllocationListStub (off it)."""

    def all_alloc_views(self, job_id: str = "") -> list[dict[str, Any]]: ...

    def alloc_briefs(self) -> list[dict[str, Any]]: ...

    def alloc_dict(
        self,
        view: Mapping[str, Any],
        *,
        stub: bool,
        job: dict[str, Any] | None = None,
        resources: bool = False,
        events: Sequence[Event] | None = None,
    ) -> dict[str, Any]: ...

    def alloc_dicts(
        self, views: list[dict[str, Any]], *, stub: bool, resources: bool = False
    ) -> Iterator[Any]: ...


class EvalWrites(Protocol):
    """The evaluations, and the one a write makes (its EvalID kept in the allocs it placed)."""

    evals: Evals

    def evaluate(
        self, job_id: str, trigger: str, job_type: str, placed: tuple[str, ...] = (), *, priority: int = 50
    ) -> Eval: ...


class NodeViews(Protocol):
    """This node as Nomad's api.Node or api.NodeListStub."""

    def node_dict(self, *, stub: bool, resources: bool = False, os: bool = False) -> dict[str, Any]: ...


# -- what every resource reads the same way -------------------------------------------------------
def job_id_of(raw: str) -> str:
    """The job ID of a path (unquoted), 400 when missing or too long."""
    job_id = unquote(raw)
    if not job_id or len(job_id) > 128:
        raise HttpError(400, "missing job ID" if not job_id else f"job ID {job_id[:64]!r}...: too long")
    return job_id


def prefix_of(params: Mapping[str, str]) -> str:
    """A list's `?prefix=`."""
    return params.get("prefix", "")


def reverse_of(params: Mapping[str, str]) -> bool:
    """Nomad's `?reverse=true` (command/agent/http.go parseReverse: exactly "true")."""
    return params.get("reverse") == "true"


def listing_order(
    items: Sequence[Any],
    *,
    by_id: bool,
    reverse: bool,
    id_of: Callable[[Any], str],
    create_of: Callable[[Any], int],
) -> list[Any]:
    """The order of Nomad's alloc and eval lists (nomad/state: a prefix query walks the ID index,
    otherwise the namespace's create index, CreateIndex then ID), `reverse` walking it backwards."""
    key: Callable[[Any], Any] = id_of if by_id else (lambda x: (create_of(x), id_of(x)))
    return sorted(items, key=key, reverse=reverse)


def go_int(params: Mapping[str, str], name: str) -> int | None:
    """An integer query parameter as Nomad's parseInt reads it (absent: None; not a number: its
    error, a 500 as Nomad's agent answers an uncoded error)."""
    raw = params.get(name, "")
    if not raw:
        return None
    try:
        return int(raw)
    except ValueError:
        raise HttpError(500, f'Failed to parse value of "{name}" ({raw[:32]}) as a int') from None


_GO_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_GO_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


def go_bool(params: Mapping[str, str], name: str) -> bool:
    """A boolean query parameter as Nomad's strconv.ParseBool reads it (absent: false); anything
    else is refused before the request acts (`?purge=maybe` neither purges nor stops)."""
    raw = params.get(name, "")
    if raw and raw not in _GO_TRUE | _GO_FALSE:
        raise HttpError(400, f'Failed to parse value of "{name}" ({raw[:32]}) as a bool: true or false')
    return raw in _GO_TRUE


def find_alloc(core: Core, ref: str) -> Any:
    """On the loop: the managed alloc (its runner) an ID or a prefix of at least 2 characters names;
    404 when none, 400 when the prefix is shared."""
    if len(ref) < 2:
        raise HttpError(400, f"alloc ID {ref!r}: give the ID, or a prefix of at least 2 characters")
    try:
        return core.allocs.alloc(ref)
    except NotFound:
        raise NotFound("alloc not found") from None
    except AgentError as exc:  # a prefix more than one alloc has
        raise HttpError(400, str(exc)) from None
