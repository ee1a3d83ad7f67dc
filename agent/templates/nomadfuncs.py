"""Nomad's template functions (`nomadVar`, `nomadVarExists`, `nomadVarList`, `nomadVarListSafe`,
`nomadService`, `nomadServices`), answered by the agent from this node's own state as a Nomad 1.4+
server answers a task's workload identity with no ACL policy attached.

**What a task may read.** Nomad's implicit workload-identity policy (acl/acl.go,
`matchingVariablesCapabilitySet`; the claim is nomad/auth/auth.go `IdentityToACLClaim`) grants
read and list on exactly four paths of the task's namespace: `nomad/jobs`,
`nomad/jobs/<job>`, `nomad/jobs/<job>/<group>` and `nomad/jobs/<job>/<group>/<task>`. An exact
match: nothing below them, never another job's, and a path spelled otherwise (`nomad/jobs/a/../b`,
`nomad/jobs/a/`) is simply another path. `readable_paths` is that rule; every read goes through
`may_read`, and the agent's state is asked for those paths only (`NomadView`, built on the main
loop by the runner's source). A read of another path fails the render as Nomad does:
`nomad.var.block(<path>@default.global): Unexpected response code: 403 (Permission denied)`;
`nomadVarList` leaves the paths the task may not read out, without an error (consul-template
swallows a list's permission error). The workload (job, group, task) is the agent's record of the
alloc, never the task's environment, which a template's `env = true` output can change.

**Services.** A workload may read every service registration of its namespace (acl/acl.go
`AllowServiceRegistrationReadList`): here, the `provider = "nomad"` services of this node's running
allocs (a Nomad server answers with the cluster's). `nomadService COUNT KEY "name"` chooses COUNT
instances as the server's `?choose=COUNT|KEY` does (rendezvous hashing: sha256 of each
registration's port, alloc ID, ID, namespace, address, name and tags, then KEY; the smallest
hashes win); a `tag.` filter is applied after the choice, as consul-template does.

Pure: the view is data; the functions read nothing else. A missing variable that `nomadVar` reads
fails the render (`Missing: nomad.var.block(...)`; Nomad waits for it to be written): the first
render fails the setup, a later pass is retried with backoff.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agent.structs.model import Template
from agent.templates.errors import TemplateRenderError

NAMESPACE = "default"  # the only namespace of this agent
REGION = "global"  # this node's region (agent.nomadapi.node.REGION)
FORBIDDEN = "Unexpected response code: 403 (Permission denied)"
NO_REGION = "Unexpected response code: 500 (No path to region)"
BAD_CHOOSE = (
    "Unexpected response code: 400 (failed to choose services: "
    "Parameter for choose must be in form '<number>|<key>')"
)

# consul-template's query forms (dependency/dependency.go): [[:word:]] is [0-9A-Za-z_].
_VAR_GET = re.compile(r"/?(?P<path>[^@]+)(@(?P<namespace>[\w\-]+))?(\.(?P<region>[\w\-]+))?", re.ASCII)
_VAR_LIST = re.compile(r"/?(?P<prefix>[^@]*)(@(?P<namespace>[\w\-]+|\*))?(\.(?P<region>[\w\-]+))?", re.ASCII)
_SERVICE = re.compile(r"((?P<tag>[\w=:.\-]+)\.)?(?P<name>[\w\-]+)(@(?P<region>[\w.\-]+))?", re.ASCII)
_SERVICES = re.compile(r"(@(?P<region>[\w.\-]+))?", re.ASCII)


@dataclass(frozen=True)
class Workload:
    """The claim of a task's workload identity: what its reads are checked against."""

    job: str
    group: str
    task: str
    namespace: str = NAMESPACE


def readable_paths(w: Workload) -> frozenset[str]:
    """The variable paths Nomad's implicit workload policy lets the task read (and list): exactly
    these, nothing below them. A name that is empty or holds "/" (which no job, group or task
    name of this agent may) could alias another job's path: then only `nomad/jobs`."""
    if any(not name or "/" in name for name in (w.job, w.group, w.task)):
        return frozenset({"nomad/jobs"})
    return frozenset(
        {
            "nomad/jobs",
            f"nomad/jobs/{w.job}",
            f"nomad/jobs/{w.job}/{w.group}",
            f"nomad/jobs/{w.job}/{w.group}/{w.task}",
        }
    )


def may_read(w: Workload, namespace: str, path: str) -> bool:
    return namespace == w.namespace and path in readable_paths(w)


class ServiceCatalogue(Sequence[Mapping[str, Any]]):
    """This node's Nomad service registrations (api.ServiceRegistration) at one change: built once
    per change by the source and shared by the views of every task, read only. What the
    functions and the watch derive from it (the instances of a name, the `nomadServices` list, the
    digest of what a read sees) is worked out once, on first use, and kept with it: a change
    watched by a hundred tasks costs one catalogue and one digest per distinct read, not a
    hundred. A benign race: two threads that work out the same thing at once keep either copy."""

    def __init__(self, services: Iterable[Mapping[str, Any]] = ()) -> None:
        self._items: tuple[Mapping[str, Any], ...] = tuple(services)
        self._by_name: dict[str, tuple[Mapping[str, Any], ...]] | None = None
        self._stubs: list[dict[str, Any]] | None = None
        self._digests: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, i: Any) -> Any:
        return self._items[i]

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ServiceCatalogue):
            return self._items == other._items
        return isinstance(other, (tuple, list)) and self._items == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ServiceCatalogue({len(self._items)} registrations)"

    def named(self, name: str) -> tuple[Mapping[str, Any], ...]:
        """The registrations of `name`, in the server's order (by ID)."""
        by_name = self._by_name
        if by_name is None:
            groups: dict[str, list[Mapping[str, Any]]] = {}
            for s in self._items:
                groups.setdefault(str(s.get("ServiceName", "")), []).append(s)
            by_name = {n: tuple(sorted(g, key=lambda s: str(s.get("ID")))) for n, g in groups.items()}
            self._by_name = by_name
        return by_name.get(name, ())

    def stubs(self) -> list[dict[str, Any]]:
        """What `nomadServices` lists (service_stubs): a copy for each caller."""
        if self._stubs is None:
            self._stubs = service_stubs(self._items)
        return [{"Name": s["Name"], "Tags": list(s["Tags"])} for s in self._stubs]

    def digest(self, read: str) -> str | None:
        """The digest of what a read ("services", "service:<name>") sees, as the templates see it
        (no raft indexes, which move with every event of their alloc); None for another read."""
        found = self._digests.get(read)
        if found is not None:
            return found
        seen: Any
        if read == "services":
            if self._stubs is None:
                self._stubs = service_stubs(self._items)
            seen = self._stubs
        elif read.startswith("service:"):
            seen = [_service_json(s) for s in self.named(read.partition(":")[2])]
        else:
            return None
        found = _digest(seen)
        self._digests[read] = found
        return found


@dataclass(frozen=True)
class NomadView:
    """What a task's render pass may read, taken on the main loop when the pass begins: the
    variables of `readable_paths` that exist (api.Variable, with Items) and this node's Nomad
    service registrations (api.ServiceRegistration; a ServiceCatalogue, shared between the views
    of one change). Read only."""

    workload: Workload
    variables: Mapping[str, Mapping[str, Any]]
    services: Sequence[Mapping[str, Any]]
    _digests: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.services, ServiceCatalogue):
            object.__setattr__(self, "services", ServiceCatalogue(self.services))

    @property
    def catalogue(self) -> ServiceCatalogue:
        assert isinstance(self.services, ServiceCatalogue)
        return self.services


class NomadSource(Protocol):
    """This node's variables and native services, read on the agent's main loop
    (agent.runner.services.NomadData)."""

    def view(self, alloc_id: str, task: str) -> NomadView | None:
        """The task's view; None when the alloc is not this agent's."""

    def watch(self, key: str, probe: Callable[[], bool | None], fire: Callable[[], None]) -> None:
        """Call `fire` (once) when `probe` says what `key` read has changed (True); a probe that
        answers None is dropped (agent.templates.nomadwatch)."""

    def unwatch(self, key: str) -> None: ...


def uses_nomad(templates: Iterable[Template]) -> bool:
    """Whether a task's templates may call a Nomad function: one with a source file (unknown text),
    or one whose text names one (a Go template cannot call a function it does not name)."""
    return any(tpl.source or "nomad" in tpl.data for tpl in templates)


# -- the queries -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Var:
    path: str
    namespace: str
    region: str

    def name(self, block: bool) -> str:
        kind = "block" if block else "get"
        return f"nomad.var.{kind}({self.path}@{self.namespace}.{self.region or REGION})"


def parse_var(text: str) -> _Var:
    """consul-template's NewNVGetQuery: `path[@namespace[.region]]`, spaces and slashes trimmed."""
    s = text.strip().strip("/")
    m = _VAR_GET.fullmatch(s)
    if m is None:
        if s:
            raise ValueError(f"nomad.var.get: invalid format: {json.dumps(s)}")
        return _Var("", NAMESPACE, "")
    return _Var(m["path"], m["namespace"] or NAMESPACE, m["region"] or "")


def _choose(services: list[Mapping[str, Any]], count: int, key: str) -> list[Mapping[str, Any]]:
    """The server's ?choose=COUNT|KEY (nomad/service_registration_endpoint.go `choose`, structs
    ServiceRegistration.HashWith)."""
    if not key or count < 0:
        raise ValueError(BAD_CHOOSE)

    def hashed(s: Mapping[str, Any]) -> str:
        h = hashlib.sha256(int(s.get("Port") or 0).to_bytes(8, "big", signed=False))
        for part in (
            s.get("AllocID"),
            s.get("ID"),
            s.get("Namespace"),
            s.get("Address"),
            s.get("ServiceName"),
        ):
            h.update(str(part or "").encode())
        for tag in s.get("Tags") or ():
            h.update(str(tag).encode())
        h.update(key.encode())
        return h.hexdigest()

    return sorted(services, key=hashed)[:count]


def _service_json(s: Mapping[str, Any]) -> dict[str, Any]:
    """consul-template's NomadService (tags sorted)."""
    return {
        "ID": s.get("ID", ""),
        "Name": s.get("ServiceName", ""),
        "Node": s.get("NodeID", ""),
        "Address": s.get("Address", ""),
        "Port": s.get("Port", 0),
        "Datacenter": s.get("Datacenter", ""),
        "Tags": sorted(s.get("Tags") or ()),
        "JobID": s.get("JobID", ""),
        "AllocID": s.get("AllocID", ""),
    }


def service_stubs(services: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """consul-template's NomadServicesSnippet list: each name once, with its instances' tags."""
    tags: dict[str, set[str]] = {}
    for s in services:
        tags.setdefault(str(s.get("ServiceName", "")), set()).update(s.get("Tags") or ())
    return [{"Name": name, "Tags": sorted(t)} for name, t in sorted(tags.items())]


def services_named(view: NomadView, name: str) -> list[Mapping[str, Any]]:
    """The registrations of `name`, in the server's order (by ID)."""
    return list(view.catalogue.named(name))


# -- what a render's calls answer (pure: the view is data) -------------------------------------


def read_var(view: NomadView, text: str, *, block: bool) -> Mapping[str, Any] | None:
    """The variable `text` names, or None when it does not exist; raises ValueError (Nomad's
    answer) when the task may not read it, or the query is malformed."""
    q = parse_var(text)
    if q.region not in ("", REGION):
        raise ValueError(f"{q.name(block)}: {NO_REGION}")
    if not q.path:
        raise ValueError(f"{q.name(block)}: Unexpected response code: 400 (missing variable path)")
    if not may_read(view.workload, q.namespace, q.path):
        raise ValueError(f"{q.name(block)}: {FORBIDDEN}")
    return view.variables.get(q.path)


def list_vars(view: NomadView, text: str) -> list[dict[str, Any]]:
    """api.VariableMetadata of the readable variables under the prefix, sorted by path."""
    m = _VAR_LIST.fullmatch(text)
    if m is None:
        raise ValueError(f"nomad.var.list: invalid format: {json.dumps(text)}")
    prefix, namespace, region = m["prefix"], m["namespace"] or NAMESPACE, m["region"] or ""
    if region not in ("", REGION):
        raise ValueError(f"nomad.var.list({prefix}@{namespace}.{region}): {NO_REGION}")
    if not prefix.strip("/"):
        prefix = ""
    ns = view.workload.namespace if namespace == "*" else namespace
    return [
        {k: v for k, v in var.items() if k != "Items"}
        for path, var in sorted(view.variables.items())
        if path.startswith(prefix) and may_read(view.workload, ns, path)
    ]


def find_services(view: NomadView, query: str, count: int | None, key: str | None) -> list[dict[str, Any]]:
    m = _SERVICE.fullmatch(query)
    if m is None:
        raise ValueError(f"nomad.service: invalid format: {json.dumps(query)}")
    if (m["region"] or REGION) != REGION:
        raise ValueError(f"nomad.service({query}): {NO_REGION}")
    found = services_named(view, m["name"])
    if count is not None:
        try:
            found = _choose(found, count, key or "")
        except ValueError as exc:
            raise ValueError(f"nomad.service({query}:{count}|{key or ''}): {exc}") from None
    tag = m["tag"]
    return [_service_json(s) for s in found if not tag or tag in (s.get("Tags") or ())]


def list_services(view: NomadView, query: str) -> list[dict[str, Any]]:
    m = _SERVICES.fullmatch(query)
    if m is None:
        raise ValueError(f"nomad.services: invalid format: {json.dumps(query)}")
    if (m["region"] or REGION) != REGION:
        raise ValueError(f"nomad.services(@{m['region']}): {NO_REGION}")
    return view.catalogue.stubs()


def service_key(query: str) -> str:
    """What a `nomadService` query depends on, for the watch: the service's name."""
    m = _SERVICE.fullmatch(query)
    return f"service:{m['name']}" if m else "services"


def _digest(seen: Any) -> str:
    return hashlib.sha256(json.dumps(seen, sort_keys=True, default=str).encode()).hexdigest()


def fingerprint(view: NomadView, reads: Iterable[str]) -> str:
    """A digest of what these reads ("var", "services", "service:<name>") see in the view, as the
    templates see it (no raft indexes of services, which move with every event of their alloc).
    Each read's own digest is worked out once per view ("var") or per catalogue (the services'),
    so the tasks that watch one change share the work."""
    parts = []
    for read in sorted(set(reads)):
        if read == "var":
            found = view._digests.get(read)
            if found is None:
                found = view._digests[read] = _digest(dict(sorted(view.variables.items())))
        else:
            found = view.catalogue.digest(read)
        if found is not None:
            parts.append(f"{read}={found}")
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def nomad_functions(
    dest: str, view: NomadView | None, read: Callable[[str], None]
) -> dict[str, Callable[..., Any]]:
    """The functions the render worker calls (agent.templates.proxy), answered from `view`; `read`
    records what each read depends on (agent.templates.render.Reads.nomad)."""

    def answer(what: str, depends: str, call: Callable[[NomadView], Any]) -> Any:
        read(depends)
        if view is None:
            raise TemplateRenderError(dest, f"{what}: no Nomad variables or services for this task")
        try:
            return call(view)
        except ValueError as exc:
            raise TemplateRenderError(dest, str(exc)[:1000]) from None

    def var(path: str) -> Mapping[str, Any]:
        def get(v: NomadView) -> Mapping[str, Any]:
            found = read_var(v, str(path), block=True)
            if found is None:
                raise ValueError(f"Missing: {parse_var(str(path)).name(True)}: no such variable yet")
            return found

        return answer(f"nomadVar {str(path)[:200]!r}", "var", get)  # type: ignore[no-any-return]

    def exists(path: str) -> bool:
        return (
            answer(
                f"nomadVarExists {str(path)[:200]!r}",
                "var",
                lambda v: read_var(v, str(path), block=False) is not None,
            )
            is True
        )

    def service(query: str, count: Any = None, key: Any = None) -> list[dict[str, Any]]:
        n = count if type(count) is int else None
        return answer(  # type: ignore[no-any-return]
            f"nomadService {str(query)[:200]!r}",
            service_key(str(query)),
            lambda v: find_services(v, str(query), n, None if key is None else str(key)),
        )

    return {
        "nomad_var": var,
        "nomad_var_exists": exists,
        "nomad_var_list": lambda prefix: answer("nomadVarList", "var", lambda v: list_vars(v, str(prefix))),
        "nomad_service": service,
        "nomad_services": lambda query: answer(
            "nomadServices", "services", lambda v: list_services(v, str(query))
        ),
    }
