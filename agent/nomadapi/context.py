"""What the route modules of Nomad's API share, low in the package (as the one server context under
Nomad's command/agent/*_endpoint.go): the narrow ports a route module takes instead of the routes'
whole shared context, and the request readings every resource makes the same way.

A route module names the ports it reads (a Protocol composed of the ones here, or its own, as
agent.nomadapi.agentroutes does); agent.nomadapi.routes.NomadApi satisfies every one, and only
agent.nomadapi.routes builds the table from the route modules. No route module imports another's
routes or agent.nomadapi.routes, so the package holds no import circle.

No route module is handed the core whole: each names the parts of it it reads (the loop, the
change index, the store, the job registry, the allocs, the node's parts), which NomadApi lends
from the core it was made with.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Protocol, TypeVar
from urllib.parse import unquote

from agent.client.allocs import AllocRegistry, ServerHooks
from agent.client.jobs import JobRegistry
from agent.drivers.registry import DriverRegistry
from agent.errors import AgentError, NotFound
from agent.fieldbugs.bugs import Bugs
from agent.jobspec import Limits
from agent.node.gc import GarbageCollector
from agent.nomadapi.http import HttpError
from agent.nomadapi.node import Eval, Evals, NodeIdentity
from agent.runner.adopt import Adoption
from agent.runner.alloc import AllocRunner
from agent.runner.deps import RunnerDeps
from agent.state import StateStore
from agent.state.changes import ChangeIndex
from agent.state.store import Event
from agent.structs.model import Job

T = TypeVar("T")

NS = "default"  # the one namespace this agent answers for
JOB_KINDS = ("job", "alloc", "eval")  # the changes a job's read waits on (its allocs and evals too)
ALLOC_KINDS = ("alloc",)


# -- the core's parts -----------------------------------------------------------------------------
class OnLoop(Protocol):
    """The agent's main loop (agent.client.loop): run a function on it and wait for its result
    (from an API thread), or run one on it later (from the loop)."""

    def call(self, fn: Callable[[], T], timeout: float = ...) -> T: ...

    def schedule(self, delay: float, fn: Callable[[], None]) -> None: ...


class Changes(Protocol):
    """The change index blocking queries and event streams wait on."""

    @property
    def changes(self) -> ChangeIndex: ...


class Kept(Protocol):
    """The agent's state store (None in a stand-in core: nothing is kept)."""

    @property
    def store(self) -> StateStore: ...


class Jobs(Protocol):
    """The jobs this node runs, and the registry that registers, updates and stops them (on the loop)."""

    @property
    def jobs(self) -> dict[str, Job]: ...

    @property
    def job_registry(self) -> JobRegistry: ...


class Allocs(Protocol):
    """The allocs: the registry (placement, replacement, a managed alloc by id or prefix), its
    runners by id, and the adopted allocs of an earlier agent's lost state (on the loop)."""

    @property
    def allocs(self) -> AllocRegistry: ...

    @property
    def runners(self) -> dict[str, AllocRunner]: ...

    @property
    def adoption(self) -> Adoption: ...


class NodeParts(Protocol):
    """This node's own parts the routes read: the runners' dependencies (Vault's JWT, the keyring,
    the data dir), its drivers, its GC, a jobspec's limits, the field-bug flags, and what Nomad's
    server would decide (the placement hold, the evaluation)."""

    node: NodeIdentity

    @property
    def deps(self) -> RunnerDeps: ...

    @property
    def drivers(self) -> DriverRegistry: ...

    @property
    def collector(self) -> GarbageCollector: ...

    @property
    def limits(self) -> Limits: ...

    @property
    def bugs(self) -> Bugs: ...

    @property
    def server(self) -> ServerHooks: ...


# -- the ports ------------------------------------------------------------------------------------
class CorePort(OnLoop, Changes, Kept, Jobs, Allocs, Protocol):
    """The core's parts most resources read (its loop, change index, store, jobs and allocs) and
    this node."""

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


def find_alloc(core: Allocs, ref: str) -> Any:
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
