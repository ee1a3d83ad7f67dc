"""Commands on lab nodes over SSH (paramiko). Every call opens its own connection, so a call after
a reboot simply reconnects; a failing command raises with the node, the command and its output."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from lab import ssh
from lab.ssh import Result, SshTarget


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

    def run(self, command: str, *, check: bool = True, timeout: float = 120.0) -> Result:
        res = ssh.run(self.target, command, timeout=timeout)
        if check and res.rc != 0:
            raise RemoteCommandError(self.name, command, res)
        return res

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
