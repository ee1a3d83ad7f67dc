"""Nomad Variables for this node: `GET /v1/vars` (`?prefix=`), `GET|PUT|DELETE /v1/var/:path`
(`?cas=N`), as api/variables.go shapes them (Variable, VariableMetadata).

Stored in the agent's state database (kind "var": root's, mode 0600, in the data dir), not
encrypted with a keyring as a Nomad server does; listed and read only over the mTLS API (the
operator's certificate is the gate: no ACL). Paths follow Nomad's rule (`[a-zA-Z0-9-_~/]{1,128}`,
`nomad` itself reserved, `nomad/jobs/...` allowed); items are strings, at most 64 KiB together.
A write with `cas=N` lands only if the variable's ModifyIndex is N (0: it must not exist yet), else
409 with the variable as it is.

A task's templates read them with `nomadVar`, `nomadVarExists`, `nomadVarList` and
`nomadVarListSafe` (agent.templates.nomadfuncs), as Nomad's implicit workload-identity policy lets
a task read them: only `nomad/jobs`, `nomad/jobs/<job>`, `nomad/jobs/<job>/<group>` and
`nomad/jobs/<job>/<group>/<task>` of its own job; a write or delete re-renders the templates that
read them (agent.templates.nomadwatch).
"""

from __future__ import annotations

import json
import re
import time
from typing import Any, Protocol
from urllib.parse import unquote

from agent.api.handler import Handler, Response, query_params
from agent.nomadapi.context import Changes, Kept, OnLoop
from agent.nomadapi.http import HttpError, answer, blocking, body_json, meta_headers
from agent.runner.services import VAR_KIND, variable_json


class VariablePort(OnLoop, Changes, Kept, Protocol):
    """The store (variables are records of it), the loop and the change index."""


MAX_SIZE = 65536  # Nomad's maxVariableSize: the items' keys and values together
_PATH = re.compile(r"[a-zA-Z0-9\-_~/]{1,128}")
_KIND = VAR_KIND


def check_path(path: str) -> str:
    if not _PATH.fullmatch(path):
        raise HttpError(400, f"invalid path {path[:140]!r}: 1-128 of a-z A-Z 0-9 - _ ~ /")
    parts = path.split("/")
    if parts[0] == "nomad" and (len(parts) == 1 or parts[1] not in ("jobs", "job-templates", "sentinel")):
        raise HttpError(400, f'"{path}": "nomad" is reserved; write variables to "nomad/jobs" or below')
    return path


def _items(data: dict[str, Any]) -> dict[str, str]:
    items = data.get("Items")
    if not isinstance(items, dict) or not items:
        raise HttpError(400, 'a variable needs "Items": an object of at least one key: string value')
    if not all(isinstance(k, str) and k and isinstance(v, str) for k, v in items.items()):
        raise HttpError(400, '"Items" values must be strings, keys non-empty strings')
    size = sum(len(k.encode()) + len(v.encode()) for k, v in items.items())
    if size > MAX_SIZE:
        raise HttpError(400, f"variable is {size} bytes, larger than the {MAX_SIZE} a variable may hold")
    return dict(items)


def _cas(params: dict[str, str]) -> int | None:
    raw = params.get("cas")
    if raw is None:
        return None
    if not raw.isdigit() or len(raw) > 20:
        raise HttpError(400, f"cas={raw[:32]!r}: the ModifyIndex the variable must have (0: none yet)")
    return int(raw)


def variable_routes(api: VariablePort) -> list[tuple[str, str, Handler]]:
    def listing(groups: tuple[str, ...], body: bytes) -> Response:
        prefix = query_params().get("prefix", "")

        def read() -> list[dict[str, Any]]:
            recs = api.store.list(_KIND).records
            return [
                variable_json(p, dict(r), metadata=True)
                for p, r in sorted(recs.items())
                if p.startswith(prefix)
            ]

        return answer(blocking(api.changes, (_KIND,), lambda: api.call(read)))

    def get(groups: tuple[str, ...], body: bytes) -> Response:
        path = check_path(unquote(groups[0]))

        def read() -> dict[str, Any]:
            rec = api.store.get(_KIND, path)
            if rec is None:
                raise HttpError(404, "variable not found")
            return variable_json(path, dict(rec))

        return answer(blocking(api.changes, (_KIND,), lambda: api.call(read)))

    def put(groups: tuple[str, ...], body: bytes) -> Response:
        path = check_path(unquote(groups[0]))
        params = query_params()
        cas = _cas(params)
        data = body_json(body)
        if data.get("Path") not in (None, "", path):
            raise HttpError(400, f"the body's \"Path\" {str(data['Path'])[:140]!r} is not the URL's {path!r}")
        if data.get("Namespace") not in (None, "", "default"):
            raise HttpError(400, f'namespace "{str(data["Namespace"])[:64]}" not found: only "default"')
        items = _items(data)

        def write() -> tuple[int, dict[str, Any]]:
            rec = api.store.get(_KIND, path)
            current = dict(rec) if rec is not None else None
            if cas is not None and (current or {}).get("modify_index", 0) != cas:
                return 409, variable_json(path, current) if current else {}
            now = time.time_ns()
            index = api.changes.current() + 1
            new = {
                "items": items,
                "create_index": (current or {}).get("create_index", index),
                "create_time": (current or {}).get("create_time", now),
                "modify_index": index,
                "modify_time": now,
            }
            api.store.put(_KIND, path, new)
            return 200, variable_json(path, new)

        status, out = api.call(write)
        meta_headers(api.changes.current())
        return answer(out, status)

    def delete(groups: tuple[str, ...], body: bytes) -> Response:
        path = check_path(unquote(groups[0]))
        cas = _cas(query_params())

        def remove() -> tuple[int, dict[str, Any] | None]:
            rec = api.store.get(_KIND, path)
            if cas is not None and rec is not None and dict(rec).get("modify_index") != cas:
                return 409, variable_json(path, dict(rec))
            api.store.delete(_KIND, path)
            return 200, None

        status, out = api.call(remove)
        meta_headers(api.changes.current())
        return (status, "application/json", json.dumps(out).encode()) if out else (200, "text/plain", b"")

    rx = r"/v1/var/(.+)"
    return [
        ("GET", r"/v1/vars", listing),
        ("GET", rx, get),
        ("PUT", rx, put),
        ("POST", rx, put),
        ("DELETE", rx, delete),
    ]
