"""The HTTP side shared by the collection's OpenBao modules: one request with the lab's token."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


def request(
    url: str, token: str, method: str, body: object = None, *, missing_ok: bool = False
) -> tuple[int, dict[str, Any]]:
    """(status, JSON body) of one API request. 404 is (404, {}) when `missing_ok`; any other error
    status raises RuntimeError naming the path and OpenBao's errors (never the request's body, which
    may hold a secret ID). An empty `token` sends none (a login)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"X-Vault-Token": token} if token else {}
    req = urllib.request.Request(url, data=data, method=method, headers=headers)  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:  # noqa: S310 - the lab's own OpenBao
            raw = resp.read()
            return resp.status, (json.loads(raw) if raw else {})
    except urllib.error.HTTPError as exc:
        if exc.code == 404 and missing_ok:
            return 404, {}
        try:
            errors = json.loads(exc.read() or b"{}").get("errors") or []
        except ValueError:
            errors = []
        path = url.rsplit("/v1/", maxsplit=1)[-1]
        raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {'; '.join(map(str, errors))}") from None
