"""Commands and files on lab nodes over SSH (paramiko).

Every call opens its own connection, so a call after a reboot simply reconnects (`retry_for` keeps
trying while a node is still coming back); a failing command raises with the node, the command and
its output; every command and its result go to the run's history (commands.log)."""

from __future__ import annotations

import io
import shlex
import time
from dataclasses import dataclass
from typing import Any

from e2e.harness import history
from lab import ssh
from lab.errors import ProviderError
from lab.ssh import Result, SshTarget
from lab.waits import WaitTimeout, wait_until


class RemoteCommandError(AssertionError):
    def __init__(self, node: str, command: str, res: Result) -> None:
        self.node, self.command, self.result = node, command, res
        super().__init__(
            f"{node}: `{command}` exited {res.rc}\nstdout: {res.stdout.strip()[-2000:]}\n"
            f"stderr: {res.stderr.strip()[-2000:]}"
        )


@dataclass(frozen=True)
class Remote:
    target: SshTarget

    @property
    def name(self) -> str:
        return self.target.name

    @property
    def address(self) -> str:
        return self.target.host

    def run(
        self, command: str, *, check: bool = True, timeout: float = 120.0, retry_for: float = 0.0
    ) -> Result:
        """Run `command`; an ssh failure (node down) is retried for `retry_for` seconds, then raised."""
        t0 = time.monotonic()

        def answered() -> tuple[Result | None, str]:
            try:
                return ssh.run(self.target, command, timeout=timeout), "ran"
            except ProviderError as exc:
                return None, str(exc)

        try:
            res = wait_until(
                answered, timeout=retry_for, what=f"{self.name} to run `{command[:80]}`", interval=1.0
            )
        except WaitTimeout as exc:
            h = history.current()
            if h is not None:
                h.command(self.name, command, -1, time.monotonic() - t0, "", exc.last)
            raise ProviderError(exc.last) from None
        h = history.current()
        if h is not None:
            h.command(self.name, command, res.rc, time.monotonic() - t0, res.stdout, res.stderr)
        if check and res.rc != 0:
            raise RemoteCommandError(self.name, command, res)
        return res

    def put(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a file on the node (created with `mode` before any content lands in it)."""
        raw = data.encode() if isinstance(data, str) else data
        client = self._connect()
        try:
            sftp = client.open_sftp()
            with sftp.open(path + ".fieldlab-tmp", "wb") as fh:
                fh.chmod(mode)
                fh.write(raw)
            sftp.posix_rename(path + ".fieldlab-tmp", path)
        finally:
            client.close()
        history.record(
            history.COMMAND, f"put {path} ({len(raw)} bytes, mode {mode:o})", node=self.name, ok=True
        )

    def get(self, path: str) -> bytes:
        client = self._connect()
        try:
            buf = io.BytesIO()
            client.open_sftp().getfo(path, buf)
            return buf.getvalue()
        finally:
            client.close()

    def _connect(self) -> Any:
        import paramiko

        try:
            return ssh.connect(self.target)
        except (OSError, paramiko.SSHException) as exc:
            raise ProviderError(f"{self.name} ({self.address}): ssh failed: {exc}") from None

    def out(self, command: str, timeout: float = 120.0) -> str:
        return self.run(command, timeout=timeout).stdout.strip()

    def boot_id(self) -> str | None:
        return ssh.boot_id(self.target)

    def testinfra(self) -> Any:
        """A testinfra host over paramiko, for host-state checks (services, files, sockets)."""
        import testinfra

        t = self.target
        return testinfra.get_host(
            f"paramiko://{t.user}@{t.host}:{t.port}",
            ssh_identity_file=str(t.key_file) if t.key_file else None,
        )

    def __str__(self) -> str:
        return f"{self.name} ({self.address})"


def q(s: str) -> str:
    return shlex.quote(s)
