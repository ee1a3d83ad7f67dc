"""SSH to lab nodes with paramiko: run a command, wait until a node answers, read its boot id.

Used by the providers (readiness after create and reboot) and by the e2e harness, so that both see
a node the same way Ansible does: as root over SSH with the lab's key.
"""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko

from lab.errors import ProviderError
from lab.waits import WaitTimeout, wait_until

SSH_CONNECT_TIMEOUT = 5.0
# A handshake that did not finish in time although the node's port answered (a busy node, or a
# controller making a hundred connections at once in a restart storm) is tried again with longer
# timeouts; a node whose port does not answer, a refused key or a changed host key fails at once.
HANDSHAKE_TIMEOUTS = (SSH_CONNECT_TIMEOUT, 15.0, 30.0)
# paramiko logs every refused connection with a traceback; polling a booting node makes many.
logging.getLogger("paramiko").setLevel(logging.CRITICAL)


@dataclass(frozen=True)
class SshTarget:
    name: str
    host: str
    port: int = 22
    user: str = "root"
    key_file: Path | None = None
    known_hosts: Path | None = None


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str


class _RememberNewHost(paramiko.MissingHostKeyPolicy):
    """Accept a host key not yet known and record it (ssh's StrictHostKeyChecking=accept-new).

    A key that differs from a recorded one is still refused by paramiko itself.
    """

    def __init__(self, known_hosts: Path | None) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        if self.known_hosts is not None:
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
            with self.known_hosts.open("a") as fh:
                fh.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def connect(target: SshTarget, timeout: float = SSH_CONNECT_TIMEOUT) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    if target.known_hosts is not None and target.known_hosts.exists():
        client.load_host_keys(str(target.known_hosts))
    client.set_missing_host_key_policy(_RememberNewHost(target.known_hosts))
    client.connect(
        target.host,
        port=target.port,
        username=target.user,
        key_filename=str(target.key_file) if target.key_file else None,
        timeout=timeout,
        banner_timeout=timeout,
        auth_timeout=timeout,
        allow_agent=False,
        look_for_keys=target.key_file is None,
    )
    return client


def connect_busy(target: SshTarget) -> paramiko.SSHClient:
    """`connect`, again with the longer HANDSHAKE_TIMEOUTS while the handshake (not the TCP connect)
    times out: the command has not been sent, so trying again is safe."""
    for i, timeout in enumerate(HANDSHAKE_TIMEOUTS):
        try:
            return connect(target, timeout=timeout)
        except (paramiko.AuthenticationException, paramiko.BadHostKeyException):
            raise
        except paramiko.SSHException as exc:
            if i == len(HANDSHAKE_TIMEOUTS) - 1:
                raise
            logging.getLogger(__name__).info(
                "%s: ssh handshake unfinished in %.0fs (%s); again with more time", target.name, timeout, exc
            )
    raise AssertionError("unreachable")


def _dial(target: SshTarget, *, probe: bool = False) -> paramiko.SSHClient:
    """A new connection (`probe`: one handshake attempt), or ProviderError naming the node."""
    try:
        return connect(target) if probe else connect_busy(target)
    except (OSError, EOFError, paramiko.SSHException) as exc:
        # EOFError: the node closed the connection mid-handshake (sshd stopping or starting at a reboot)
        raise ProviderError(f"{target.name} ({target.host}): ssh failed: {exc!r}") from None


def run(
    target: SshTarget, command: str, timeout: float = 60.0, *, probe: bool = False, stdin: bytes = b""
) -> Result:
    """Run one command on a node over a connection of its own (`stdin` fed to it); a transport
    failure, or a command still running after `timeout` seconds (a wedged dockerd, a hung mount),
    raises ProviderError naming the node and the command. `probe`: one handshake attempt only (a
    poll of a node that may be booting answers fast)."""
    client = _dial(target, probe=probe)
    try:
        transport = client.get_transport()
        if transport is None:
            raise ProviderError(f"{target.name}: ssh transport closed before `{command}`")
        chan = transport.open_session(timeout=timeout)
        chan.exec_command(command)
        return _finish(target, chan, command, stdin, timeout)
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise ProviderError(f"{target.name}: `{command}` broke off: {exc}") from None
    finally:
        client.close()


class Connections:
    """One SSH connection per node kept open and shared by the commands run on it, each in a
    session of its own (as OpenSSH's ControlMaster shares one).

    A connection costs the node a key exchange, a signature and an authentication: a few ms on a
    container node, about a second of a TCG VM's CPU, which the e2e harness's polls paid per
    command. A kept connection that no longer answers (the node rebooted, sshd restarted) fails to
    open a session within SESSION_OPEN_TIMEOUT; the command was not sent then, so it is sent again
    once on a new connection. A failure after the command was sent is raised, never retried (the
    command may have run). Beyond SESSIONS_PER_CONNECTION commands at once on a node, or when the node
    refuses one more session, a command gets a connection of its own. Thread-safe.
    """

    SESSION_OPEN_TIMEOUT = SSH_CONNECT_TIMEOUT
    # Sessions at once on a kept connection. OpenSSH's MaxSessions is 10, and sshd 9.2 answers a
    # burst past it by closing the whole connection, with every command on it ("no more sessions"):
    # never ask for that; a command beyond these gets a connection of its own.
    SESSIONS_PER_CONNECTION = 8

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[SshTarget, paramiko.SSHClient] = {}
        self._slots: dict[SshTarget, threading.BoundedSemaphore] = {}
        self.opened = 0  # connections made and kept (the tests read it)

    def run(self, target: SshTarget, command: str, *, stdin: bytes = b"", timeout: float = 60.0) -> Result:
        """`command` on the node (`stdin` fed to it); its result, or ProviderError naming the node."""
        with self._lock:
            slots = self._slots.setdefault(target, threading.BoundedSemaphore(self.SESSIONS_PER_CONNECTION))
        if not slots.acquire(blocking=False):
            return self._alone(target, command, stdin, timeout)
        try:
            return self._kept(target, command, stdin, timeout)
        finally:
            slots.release()

    def _kept(self, target: SshTarget, command: str, stdin: bytes, timeout: float) -> Result:
        for last in (False, True):
            client = self._client(target)
            try:
                chan = self._session(client, timeout)
            except paramiko.ChannelException:
                return self._alone(target, command, stdin, timeout)  # the node's limit, not a dead link
            except (OSError, EOFError, paramiko.SSHException) as exc:
                self._forget(target, client)
                if last:
                    raise ProviderError(f"{target.name} ({target.host}): ssh session failed: {exc}") from None
                continue  # a connection the node has forgotten: nothing was sent on it
            try:
                try:
                    chan.exec_command(command)
                except (OSError, EOFError, paramiko.SSHException) as exc:
                    if _alive(client):  # sshd refused this session (MaxSessions): the command never ran
                        return self._alone(target, command, stdin, timeout)
                    raise ProviderError(f"{target.name}: `{command}` broke off: {exc}") from None
                return _finish(target, chan, command, stdin, timeout)
            except ProviderError:
                if not _alive(client):  # the connection broke: the next command makes a new one
                    self._forget(target, client)
                raise
            finally:
                chan.close()
        raise AssertionError("unreachable")

    def close(self) -> None:
        with self._lock:
            clients, self._open = list(self._open.values()), {}
        for client in clients:
            client.close()

    def _client(self, target: SshTarget) -> paramiko.SSHClient:
        """The node's kept connection (one another thread has just made, too), or a new one."""
        with self._lock:
            client = self._open.get(target)
            if client is not None and _alive(client):
                return client
            if client is not None:
                client.close()
                del self._open[target]
        client = _dial(target)
        with self._lock:
            self.opened += 1
            kept = self._open.setdefault(target, client)
        if kept is not client:  # another thread connected meanwhile: share its connection
            client.close()
        return kept

    def _session(self, client: paramiko.SSHClient, timeout: float) -> paramiko.Channel:
        transport = client.get_transport()
        if transport is None or not transport.is_active():
            raise paramiko.SSHException("transport closed")
        return transport.open_session(timeout=min(timeout, self.SESSION_OPEN_TIMEOUT))

    def _forget(self, target: SshTarget, client: paramiko.SSHClient) -> None:
        with self._lock:
            if self._open.get(target) is client:
                del self._open[target]
        client.close()

    def _alone(self, target: SshTarget, command: str, stdin: bytes, timeout: float) -> Result:
        return run(target, command, timeout, stdin=stdin)


def _alive(client: paramiko.SSHClient) -> bool:
    transport = client.get_transport()
    return transport is not None and transport.is_active()


def _finish(target: SshTarget, chan: paramiko.Channel, command: str, stdin: bytes, timeout: float) -> Result:
    """Feed `stdin` to the command started in `chan` and collect its result; ProviderError when it
    breaks off or overruns."""
    try:
        if stdin:
            chan.sendall(stdin)
        chan.shutdown_write()
        out, err = _drain(chan, time.monotonic() + timeout)
        if out is None:
            raise ProviderError(f"{target.name}: `{command}` still running after {timeout:.0f}s; abandoned")
        status = chan.recv_exit_status()
        if status == -1 and _lost(chan):
            raise ProviderError(f"{target.name}: `{command}` broke off: the connection closed under it")
        return Result(status, out.decode(errors="replace"), err.decode(errors="replace"))
    except (OSError, EOFError, paramiko.SSHException) as exc:
        raise ProviderError(f"{target.name}: `{command}` broke off: {exc}") from None


# A channel closed without an exit status: the command was killed by a signal (the connection lives
# on) or the connection died, which paramiko marks a moment after it closes the channels.
CONNECTION_LOST_WITHIN = 1.0


def _lost(chan: paramiko.Channel) -> bool:
    transport = chan.get_transport()
    deadline = time.monotonic() + CONNECTION_LOST_WITHIN
    while transport.is_active():
        if time.monotonic() >= deadline:
            return False
        select.select([], [], [], 0.01)  # a poll of the transport's state, bounded by the deadline
    return True


def _drain(chan: paramiko.Channel, deadline: float) -> tuple[bytes | None, bytes]:
    """Read stdout and stderr as they come (a full window would block the command) until it exits;
    (None, stderr) when the deadline passes first."""
    out, err = bytearray(), bytearray()
    while True:
        while chan.recv_ready():
            out += chan.recv(65536)
        while chan.recv_stderr_ready():
            err += chan.recv_stderr(65536)
        if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
            # The exit status can arrive before the last data: read until EOF.
            while chunk := chan.recv(65536):
                out += chunk
            return bytes(out), bytes(err)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, bytes(err)
        select.select([chan], [], [], min(remaining, 0.2))


def answers(target: SshTarget) -> bool:
    try:
        return run(target, "true", timeout=SSH_CONNECT_TIMEOUT, probe=True).rc == 0
    except ProviderError:
        return False


def boot_id(target: SshTarget) -> str | None:
    """The node's current boot id, or None while it does not answer."""
    try:
        res = run(target, "cat /proc/sys/kernel/random/boot_id", timeout=SSH_CONNECT_TIMEOUT, probe=True)
    except ProviderError:
        return None
    return res.stdout.strip() if res.rc == 0 else None


def wait_ssh(
    target: SshTarget, timeout: float, *, not_boot_id: str | None = None, what: str = "ssh answers"
) -> str:
    """Poll until the node answers over ssh (with a boot id other than `not_boot_id`); return the id."""

    def ready() -> tuple[str | None, str]:
        try:
            with socket.create_connection((target.host, target.port), timeout=1.0):
                pass
        except OSError as exc:
            return None, f"port {target.port}: {exc}"
        bid = boot_id(target)
        if bid and bid != not_boot_id:
            return bid, "up"
        return None, ("same boot id as before the reboot" if bid else "ssh does not accept the lab key yet")

    try:
        return wait_until(ready, timeout=timeout, what=f"{target.name} ({target.host}): {what}")
    except WaitTimeout as exc:
        raise ProviderError(str(exc)) from None
