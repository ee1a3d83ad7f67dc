"""The data functions as the render worker sees them (agent.gotemplate.DataSource): each is a call
to the agent (agent.templates.worker), which does the I/O and answers with plain JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Proxy:
    """The data functions, in the worker: each is a request to the agent, which does the I/O
    (agent.gotemplate.DataSource)."""

    def __init__(self, call: Callable[[str, list[Any], dict[str, Any]], Any]) -> None:
        self._call = call

    def secret(self, path: str, params: dict[str, str]) -> Any:
        return self._call("secret", [path, params], {})

    def secrets(self, path: str) -> Any:
        return self._call("secrets", [path], {})

    def key(self, path: str) -> Any:
        return self._call("key", [path], {})

    def ls(self, prefix: str) -> Any:
        return self._call("ls", [prefix], {})

    def tree(self, prefix: str) -> Any:
        return self._call("tree", [prefix], {})

    def service(self, name: str, *filters: str) -> Any:
        return self._call("service", [name, *filters], {})

    def services(self, *args: str) -> Any:
        return self._call("services", list(args), {})

    def env(self, name: str) -> Any:
        return self._call("env", [name], {})

    def datacenters(self, ignore_inaccessible: bool = False) -> Any:
        return self._call("datacenters", [bool(ignore_inaccessible)], {})

    def node(self, name: str = "") -> Any:
        return self._call("node", [name], {})

    def nodes(self) -> Any:
        return self._call("nodes", [], {})

    def sockaddr(self, expr: str) -> Any:
        return self._call("sockaddr", [expr], {})

    def file(self, path: str) -> Any:
        return self._call("file", [path], {})

    def nomad_var(self, path: str) -> Any:
        return self._call("nomad_var", [path], {})

    def nomad_var_exists(self, path: str) -> Any:
        return self._call("nomad_var_exists", [path], {})

    def nomad_var_list(self, prefix: str) -> Any:
        return self._call("nomad_var_list", [prefix], {})

    def nomad_service(self, query: str, count: int | None, key: str | None) -> Any:
        return self._call("nomad_service", [query, count, key], {})

    def nomad_services(self, query: str) -> Any:
        return self._call("nomad_services", [query], {})
