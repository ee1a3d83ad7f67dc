"""A QMP client (the QEMU Machine Protocol, JSON over a unix socket): what the qemu provider needs of
a running VM, a hard reset (`system_reset`), a power cut (`quit`) and its run state.

The protocol: the server greets with {"QMP": {...}}; the client must send `qmp_capabilities` before
any other command; each command is answered by {"return": ...} or {"error": {"class", "desc"}};
asynchronous {"event": ...} messages may come at any time and are skipped here.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

from lab.errors import ProviderError

QMP_TIMEOUT = 10.0  # seconds for one exchange with a VM's monitor


class QmpError(ProviderError):
    """The monitor could not be reached, or answered a command with an error."""


class Qmp:
    def __init__(self, path: Path, timeout: float = QMP_TIMEOUT) -> None:
        self.path = path
        self.timeout = timeout
        self._sock: socket.socket | None = None
        self._buf = b""

    def __enter__(self) -> Qmp:
        self.connect()
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(str(self.path))
        except OSError as exc:
            sock.close()
            raise QmpError(f"QMP {self.path}: cannot connect ({exc.strerror or exc})") from None
        self._sock = sock
        greeting = self._read()
        if "QMP" not in greeting:
            self.close()
            raise QmpError(f"QMP {self.path}: no greeting, got {_short(greeting)}")
        self.command("qmp_capabilities")

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def command(self, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """Send one command and return its "return" value; QmpError on an "error" answer."""
        if self._sock is None:
            raise QmpError(f"QMP {self.path}: not connected")
        msg: dict[str, Any] = {"execute": name}
        if arguments:
            msg["arguments"] = arguments
        try:
            self._sock.sendall(json.dumps(msg).encode() + b"\n")
        except OSError as exc:
            raise QmpError(f"QMP {self.path}: {name}: {exc.strerror or exc}") from None
        while True:
            reply = self._read()
            if "event" in reply:
                continue
            if "error" in reply:
                err = reply["error"] or {}
                raise QmpError(f"QMP {self.path}: {name}: {err.get('class')}: {err.get('desc')}")
            if "return" in reply:
                return reply["return"]
            raise QmpError(f"QMP {self.path}: {name}: unexpected answer {_short(reply)}")

    def _read(self) -> dict[str, Any]:
        assert self._sock is not None
        while b"\n" not in self._buf:
            try:
                chunk = self._sock.recv(65536)
            except OSError as exc:  # a timeout included
                raise QmpError(f"QMP {self.path}: no answer ({exc.strerror or exc})") from None
            if not chunk:
                raise QmpError(f"QMP {self.path}: the VM closed its monitor (it is exiting or gone)")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            got = json.loads(line)
        except json.JSONDecodeError:
            raise QmpError(f"QMP {self.path}: not JSON: {line[:120]!r}") from None
        if not isinstance(got, dict):
            raise QmpError(f"QMP {self.path}: not a JSON object: {line[:120]!r}")
        return got


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 160 else text[:157] + "..."
