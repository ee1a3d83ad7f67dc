"""Commands and files on lab nodes over SSH (paramiko).

Commands share one kept connection per node (lab.ssh.Connections: a connection is about a second of
a TCG VM's CPU); one the node forgot (a reboot) is replaced before the command is sent, so a call
after a reboot reconnects (`retry_for` keeps trying while a node is still coming back); a failing
command raises with the node, the command and its output; every command and its result go to the
run's history (commands.log).

Everything runs as root on the node: logged in as root, or as a user with passwordless sudo (a
bring-your-own host's `ansible_user`), through `sudo -n` (`lab.providers.base.as_root`, the one place
a command is wrapped); file writes and reads go through the same root commands, never sftp as the
login user. A sudo that wants a password raises `SudoRefused`, naming the node and the user."""

from __future__ import annotations

import atexit
import base64
import shlex
import time
from dataclasses import dataclass
from typing import Any

from e2e.harness import history
from lab import ssh
from lab.errors import ProviderError
from lab.providers.base import as_root, check_sudo
from lab.ssh import Result, SshTarget
from lab.waits import WaitTimeout, wait_until

CONNECTIONS = ssh.Connections()  # the harness's kept connections, one per node
atexit.register(CONNECTIONS.close)


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
        self,
        command: str,
        *,
        check: bool = True,
        timeout: float = 120.0,
        retry_for: float = 0.0,
        record: bool = True,
    ) -> Result:
        """Run `command` as root; an ssh failure (node down) is retried for `retry_for` seconds, then
        raised; a sudo that refuses (SudoRefused) is not retried: that does not change. `record`
        False: a read the harness repeats often (the task handles) stays out of the history."""
        t0 = time.monotonic()

        def answered() -> tuple[Result | None, str]:
            try:
                return CONNECTIONS.run(
                    self.target, as_root(command, self.target.user), timeout=timeout
                ), "ran"
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
        if h is not None and record:
            h.command(self.name, command, res.rc, time.monotonic() - t0, res.stdout, res.stderr)
        check_sudo(self.target, res)
        if check and res.rc != 0:
            raise RemoteCommandError(self.name, command, res)
        return res

    def put(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a file on the node as root (created 0600 before any content lands in it, then given
        `mode`; replaced atomically)."""
        raw = data.encode() if isinstance(data, str) else data
        tmp = q(path + ".fieldlab-tmp")
        self._root_io(f"umask 077 && cat > {tmp} && chmod {mode:o} {tmp} && mv -f {tmp} {q(path)}", stdin=raw)
        history.record(
            history.COMMAND, f"put {path} ({len(raw)} bytes, mode {mode:o})", node=self.name, ok=True
        )

    def get(self, path: str) -> bytes:
        """A file's content, read as root (base64 on the wire: the transport is text)."""
        return base64.b64decode(self._root_io(f"base64 -w0 {q(path)}"))

    def _root_io(self, command: str, *, stdin: bytes = b"", timeout: float = 120.0) -> bytes:
        """Run `command` as root with `stdin` fed to it; its stdout, or RemoteCommandError."""
        res = CONNECTIONS.run(self.target, as_root(command, self.target.user), stdin=stdin, timeout=timeout)
        check_sudo(self.target, res)
        if res.rc != 0:
            raise RemoteCommandError(self.name, command, res)
        return res.stdout.encode()

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
            sudo=t.user != "root",  # host state as root sees it, as every other check here
        )

    def __str__(self) -> str:
        return f"{self.name} ({self.address})"


def q(s: str) -> str:
    return shlex.quote(s)
