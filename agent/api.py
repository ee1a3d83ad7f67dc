"""The agent's HTTP API, served over mTLS: a client must present a cert that chains to the lab's CA."""

from __future__ import annotations

import json
import logging
import re
import ssl
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from agent.config import Config
from agent.errors import AgentError

log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
# A handler gets the path's regex groups and the request body.
Handler = Callable[[tuple[str, ...], bytes], Response]
Route = Callable[[], Response]


def json_response(status: int, body: Any) -> Response:
    return status, "application/json", json.dumps(body, indent=2, default=str).encode()


def server_ssl_context(config: Config) -> ssl.SSLContext:
    if config.tls is None:
        raise AgentError("config has no tls section: the agent API only serves mTLS")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(config.tls.cert_file), str(config.tls.key_file))
        ctx.load_verify_locations(cafile=str(config.tls.ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise AgentError(
            f"cannot load the API's TLS files ({config.tls.cert_file}, {config.tls.key_file}, "
            f"{config.tls.ca_file}): {exc}"
        ) from None
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def _dispatch(self, method: str) -> None:
        path = self.path.split("?", 1)[0]
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            status, ctype, out = self._route(method, path, body)
        except Exception:
            log.exception("handler for %s %s failed", method, path)
            status, ctype, out = json_response(500, {"error": "internal error, see agent log"})
        self._send(status, ctype, out)

    def _route(self, method: str, path: str, body: bytes) -> Response:
        route = self.server.routes.get(path) if method == "GET" else None
        if route is not None:
            return route()
        for m, rx, handler in self.server.handlers:
            match = rx.fullmatch(path)
            if match and m == method:
                return handler(match.groups(), body)
        return json_response(404, {"error": f"no route {method} {path}"})

    def _send(self, status: int, ctype: str, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        peer: Any = self.connection.getpeercert() if isinstance(self.connection, ssl.SSLSocket) else None
        subject = "?"
        for rdn in peer.get("subject", ()) if peer else ():
            for key, value in rdn:
                if key == "commonName":
                    subject = str(value)
        log.debug("api %s %s (client %s)", self.address_string(), format % args, subject)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    routes: dict[str, Route]
    handlers: list[tuple[str, re.Pattern[str], Handler]]


class ApiServer:
    """Serves `routes` (path -> handler) on the configured address until `stop()`."""

    def __init__(
        self, config: Config, routes: dict[str, Route], handlers: list[tuple[str, str, Handler]] | None = None
    ) -> None:
        ctx = server_ssl_context(config)
        try:
            self._httpd = _Server((config.bind_address, config.port), _Handler)
        except OSError as exc:
            raise AgentError(f"cannot listen on {config.bind_address}:{config.port}: {exc}") from None
        self._httpd.routes = routes
        self._httpd.handlers = [(m, re.compile(rx), h) for m, rx, h in handlers or []]
        self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="api", daemon=True)

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout)
