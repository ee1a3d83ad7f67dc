"""Go values with methods, as templates call them: `{{ scratch.Set "k" "v" }}`, `{{ $s.Get "k" }}`.
A `GoObject` names its Go methods in `GO_METHODS` (Go name -> Python attribute); the evaluator calls
a method when a field chain names one, with the command's arguments (and the piped value) as Go does.
Maps keep their field (key) access; a `GoStruct` has fields (`.Path`), read after its methods."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from agent.gotemplate.builtins import GoError
from agent.gotemplate.gofmt import fmt_v, go_quote, sorted_items, type_name

T = TypeVar("T")
MAX_NODES = 1_000_000  # elements a value built by a template may hold, shared parts counted each time


_CONTAINERS = (list, tuple, dict)


def _container_kids(v: list[Any] | tuple[Any, ...] | dict[Any, Any]) -> list[Any]:
    kids = v.values() if isinstance(v, dict) else v
    if not any(issubclass(t, _CONTAINERS) for t in set(map(type, kids))):  # the common case, fast
        return []
    return [c for c in kids if isinstance(c, _CONTAINERS)]


def check_size(value: T, limit: int = MAX_NODES) -> T:
    """Refuse a value that would print as more than `limit` elements (lists and maps that appear
    in it several times count each time, as printing and encoding walk them) or that contains
    itself; return the value. Linear in the distinct lists and maps it holds."""
    memo: dict[int, int] = {}
    active: set[int] = set()
    stack: list[tuple[Any, list[Any] | None]] = [(value, None)]
    while stack:
        v, kids = stack.pop()
        if not isinstance(v, _CONTAINERS):
            continue
        i = id(v)
        if kids is not None:  # its lists and maps are measured
            active.discard(i)
            total = len(v) + sum(memo[id(c)] for c in kids)
            if total > limit:
                raise GoError(f"the value would hold more than {limit} elements")
            memo[i] = total
            continue
        if i in memo:
            continue
        if i in active:
            raise GoError("the value would contain itself")
        active.add(i)
        kids = _container_kids(v)
        stack.append((v, kids))
        stack.extend((c, None) for c in kids if id(c) not in memo)
    return value


def store(m: dict[Any, Any], k: Any, v: Any) -> None:
    """m[k] = v, unless v (with m holding it) would be too large or contain itself."""
    missing = k not in m
    old = m.get(k)
    m[k] = v
    try:
        check_size(v)
    except GoError:
        if missing:
            del m[k]
        else:
            m[k] = old
        raise


class _NoField:
    __slots__ = ()


NO_FIELD: Any = _NoField()  # what GoObject.go_field answers for a name that is not a field


class GoObject:
    """A value whose Go methods a template may call."""

    GO_TYPE: ClassVar[str] = "object"
    GO_METHODS: ClassVar[dict[str, str]] = {}

    @property
    def go_type(self) -> str:
        return self.GO_TYPE

    def go_method(self, name: str) -> Callable[..., Any] | None:
        attr = self.GO_METHODS.get(name)
        if attr is None:
            return None
        method: Callable[..., Any] = getattr(self, attr)
        return method

    def go_field(self, name: str) -> Any:
        """The field `name` of a struct; NO_FIELD when there is none."""
        return NO_FIELD


class GoStruct(GoObject):
    """A Go struct (or a pointer to one: GO_TYPE starting with "*") with the fields GO_FIELDS, in
    their declared order: printed as Go's %v (`{a b}`, `&{a b}`) unless it has a String method, and
    marshalled by toJSON with its fields in that order (`go_json`)."""

    GO_FIELDS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **fields: Any) -> None:
        self.fields: dict[str, Any] = {name: fields.get(name) for name in self.GO_FIELDS}

    def go_field(self, name: str) -> Any:
        return self.fields.get(name, NO_FIELD)

    def go_json(self) -> list[tuple[str, Any]]:
        return [(name, self.fields[name]) for name in self.GO_FIELDS]

    def __str__(self) -> str:
        body = "{" + " ".join(fmt_v(self.fields[name]) for name in self.GO_FIELDS) + "}"
        return "&" + body if self.GO_TYPE.startswith("*") else body


def _key(k: Any) -> str:
    if not isinstance(k, str):
        raise GoError(f"wrong type for value; expected string; got {type_name(k)}")
    return k


class Scratch(GoObject):
    """consul-template's scratchpad: one per rendering of a template, not shared, not cached."""

    GO_TYPE = "*template.Scratch"
    GO_METHODS: ClassVar[dict[str, str]] = {
        "Key": "key",
        "Get": "get",
        "Set": "set",
        "SetX": "set_x",
        "MapSet": "map_set",
        "MapSetX": "map_set_x",
        "MapValues": "map_values",
    }

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def __str__(self) -> str:
        return "&{" + fmt_v(self.values) + "}"

    def key(self, k: Any) -> bool:
        """Whether there is data at k (even nil)."""
        return _key(k) in self.values

    def get(self, k: Any) -> Any:
        """The data at k; nil when there is none."""
        return self.values.get(_key(k))

    def set(self, k: Any, v: Any) -> str:
        store(self.values, _key(k), v)
        return ""

    def set_x(self, k: Any, v: Any) -> str:
        if _key(k) not in self.values:
            store(self.values, k, v)
        return ""

    def _map(self, k: str) -> dict[str, Any]:
        m = self.values.setdefault(k, {})
        if not isinstance(m, dict):
            raise GoError(f"{go_quote(k)} is not a map")
        return m

    def map_set(self, k: Any, mk: Any, v: Any) -> str:
        store(self._map(_key(k)), _key(mk), v)
        return ""

    def map_set_x(self, k: Any, mk: Any, v: Any) -> str:
        m = self._map(_key(k))
        if _key(mk) not in m:
            store(m, mk, v)
        return ""

    def map_values(self, k: Any) -> list[Any] | None:
        """The values of the map at k, sorted by their keys; nil when k holds no map."""
        m = self.values.get(_key(k))
        if not isinstance(m, dict):
            return None
        return [v for _, v in sorted_items(m)]


class _ScratchFunction:
    """The `scratch` function: the evaluator answers it with the scratchpad of the current run."""

    __name__ = "scratch"

    def __call__(self) -> Any:
        raise GoError("scratch runs only inside a template")


SCRATCH = _ScratchFunction()
