"""A parsed job in canonical form: the model (agent.structs.model) as versioned JSON, so that restore
rebuilds every job without parsing HCL again (the jobspec source is kept for display only).

`encode_job` walks the dataclasses; `decode_job` rebuilds them from their type hints. A record of
another MODEL_VERSION (an agent older or newer than this one) is refused with JobCodecError and the
caller parses the source instead. Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any

from agent.errors import AgentError
from agent.structs.model import Job

MODEL_VERSION = 1  # bump when a model field changes meaning or type


class JobCodecError(AgentError):
    pass


def encode_job(job: Job) -> dict[str, Any]:
    return {"model": MODEL_VERSION, "job": _plain(job)}


def decode_job(data: object) -> Job:
    if not isinstance(data, Mapping):
        raise JobCodecError(f"no canonical job (found a {type(data).__name__})")
    if data.get("model") != MODEL_VERSION:
        raise JobCodecError(
            f"canonical job of model {data.get('model')!r}, this agent reads model {MODEL_VERSION}"
        )
    job = _build(Job, data.get("job"), "job")
    assert isinstance(job, Job)
    return job


def _plain(value: object) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise JobCodecError(f"a {type(value).__name__} has no canonical form")


@functools.cache
def _shape(cls: type) -> tuple[Mapping[str, Any], frozenset[str]]:
    """A model class's field types and names, resolved once per class (the model's classes do not
    change while the agent runs; resolving the hints took most of a restore's decode)."""
    return typing.get_type_hints(cls), frozenset(f.name for f in dataclasses.fields(cls))


def _build(hint: Any, value: object, where: str) -> Any:  # noqa: PLR0911 - one branch per kind of type
    origin = typing.get_origin(hint)
    if hint is Any:
        return value
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if not isinstance(value, Mapping):
            raise JobCodecError(f"{where}: expected an object for {hint.__name__}")
        hints, known = _shape(hint)
        if not known.issuperset(value):
            unknown = sorted(set(value) - known)
            raise JobCodecError(f"{where}: unknown field {unknown[0]!r} of {hint.__name__}")
        return hint(**{k: _build(hints[k], v, f"{where}.{k}") for k, v in value.items()})
    if origin in (types.UnionType, typing.Union):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _build(inner, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise JobCodecError(f"{where}: expected a list")
        (item, _) = typing.get_args(hint)
        return tuple(_build(item, v, f"{where}[{i}]") for i, v in enumerate(value))
    if origin in (Mapping, dict):
        if not isinstance(value, Mapping):
            raise JobCodecError(f"{where}: expected an object")
        _, item = typing.get_args(hint)
        return {str(k): _build(item, v, f"{where}.{k}") for k, v in value.items()}
    if hint is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if hint in (str, int, bool) and type(value) is hint:
        return value
    raise JobCodecError(f"{where}: {value!r} is not a {getattr(hint, '__name__', hint)}")
