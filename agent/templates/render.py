"""Template rendering into a task's directory, in a sandbox.

Functions a template may call: `env(name)`, `secret(path, **params)` (a Vault read, or a write for
paths that issue, like `pki_int/issue/<role>`), `key(path)` and `service(name)` for Consul, and
`file(path)` (a file of the task's sandbox, as consul-template's `file`). Within one render pass of a
task every distinct secret is fetched once, so a cert and its key rendered into two files match, and
a re-issue cycle costs one Vault request per dynamic secret.

The sandbox does not depend on the template language (Jinja2 today); it is file access, budgets and
errors:

- **Files.** `destination`, `source` and `file(path)` are paths relative to the task dir (Nomad:
  relative to the task's working dir); `${NOMAD_TASK_DIR}`, `${NOMAD_SECRETS_DIR}` and
  `${NOMAD_ALLOC_DIR}` lead to `local/`, `secrets/` and the alloc's shared dir, and `alloc/...` (or
  `../alloc/...`) is the alloc's shared dir `<alloc_dir>/alloc`, the sibling of the task dirs. That
  is the whole sandbox, as Nomad's default: absolute paths and paths that leave it are refused.
  Paths are resolved with `os.open(..., dir_fd=)` one component at a time from an fd of the sandbox
  root, with O_NOFOLLOW: no `..` escape, and no symbolic link is followed anywhere, intermediate
  directories included. Reads refuse anything but a regular file (opened O_NOFOLLOW|O_NONBLOCK,
  checked with fstat, so a FIFO or a device never blocks the agent). Writes create a fresh temp file
  with O_CREAT|O_EXCL|O_NOFOLLOW in the destination's directory (by fd), write it in full, fchmod the
  open fd to the template's perms, fsync, and rename it over the destination by dir fd; a destination
  that exists and is not a regular file (link, FIFO, device, directory) is refused, and a failed write
  removes the temp file.
- **Budgets.** The template is rendered in a worker process (`_Worker`), not in the agent: the worker
  runs the template, and every function the template calls is a request back to the agent, which
  does the file access and the Vault/Consul requests itself. The agent waits for the result at most
  `timeout` seconds (TemplateDeps.render_timeout) and then SIGKILLs the worker and starts a fresh
  one: a template that loops, or one Python operation that never returns (`10 ** (10 ** 10)`),
  costs the agent's main loop about the budget and nothing after it. The time the agent itself
  spends serving a call (a Vault request that issues a certificate, bounded by the Vault client's
  own timeout) is not charged to the template, but one render may make at most `MAX_FETCHES`
  Vault, Consul or file reads, so a loop of fetches is refused rather than waited for. A thread
  could not give that bound (a long C-level operation holds the GIL, and a runaway thread cannot be
  stopped). The worker drops to `nobody` when the agent is root, has hard limits on address space
  (`WORKER_MEMORY`), file size (0) and processes (0), and an alarm that kills it if it outlives the
  agent in a render. Output larger than `max_bytes` (TemplateDeps.max_bytes) is refused and not
  written; the worker stops rendering as soon as it is over. Template text larger than `max_bytes`
  is refused before rendering. The submission check (`check_template`) only parses, with constant
  folding disabled, so a submitted template never computes anything in the agent.
- **Errors.** Every exception of a render becomes a TemplateRenderError naming the destination (the
  runner makes it a `Template Failed` task event and retries). Vault paths under `auth/`, `sys/` and
  `cubbyhole/` are refused at submission (when the path is a constant) and at render time.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import json
import logging
import math
import os
import posixpath
import pwd
import re
import secrets as _secrets
import select
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

from jinja2 import StrictUndefined, TemplateError, meta, nodes, pass_context
from jinja2.sandbox import SandboxedEnvironment

from agent.errors import AgentError
from agent.model import Template

log = logging.getLogger(__name__)

DEFAULT_RENDER_TIMEOUT = 2.0  # seconds (client config template_render_timeout)
DEFAULT_MAX_BYTES = 4 * 1024 * 1024  # (client config template_max_bytes)
WORKER_MEMORY = 1 << 30  # the render worker's address space limit
MAX_FETCHES = 64  # Vault, Consul and file reads of one render (cached secrets are not counted)
FUNCTIONS = ("env", "secret", "key", "service", "file")
REFUSED_VAULT_MOUNTS = ("auth", "sys", "cubbyhole")


class TemplateRenderError(AgentError):
    def __init__(self, destination: str, reason: str) -> None:
        self.destination, self.reason = destination, reason
        super().__init__(f"template {destination}: {reason}")


class SecretSource(Protocol):
    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """(data, ttl seconds; 0 when the secret does not expire)."""


class ConsulSource(Protocol):
    def key(self, path: str) -> str: ...

    def service(self, name: str) -> list[dict[str, Any]]: ...


@dataclass
class RenderContext:
    """What templates may read during one render pass of a task, and what that pass learned."""

    env: Mapping[str, str]
    vault: SecretSource | None = None
    consul: ConsulSource | None = None
    cache: dict[str, tuple[dict[str, Any], float]] = field(default_factory=dict)
    min_ttl: float = 0.0  # shortest TTL of a dynamic secret used (0: none)
    fetches: int = 0


# ---------------------------------------------------------------------------------------------
# The file sandbox: the task dir and the alloc's shared alloc/ dir
# ---------------------------------------------------------------------------------------------


class SandboxError(Exception):
    """A path the sandbox refuses, or a file it will not read or replace."""


_DIR_VARS = (
    ("${NOMAD_TASK_DIR}", "local"),
    ("${NOMAD_SECRETS_DIR}", "secrets"),
    ("${NOMAD_ALLOC_DIR}", "alloc"),
)
SHARED_DIR = "alloc"  # <alloc_dir>/alloc, the sibling of the task dirs
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_ATTEMPTS = 16
_LINK_REFUSED = "is a symbolic link: refused (the template sandbox follows no links)"


@dataclass(frozen=True)
class SandboxPath:
    """A path inside the sandbox: its components below the task dir, or below the shared dir."""

    shared: bool
    parts: tuple[str, ...]

    def __str__(self) -> str:
        return "/".join((SHARED_DIR, *self.parts) if self.shared else self.parts)

    def host_path(self, task_dir: Path) -> Path:
        root = task_dir.parent / SHARED_DIR if self.shared else task_dir
        return root.joinpath(*self.parts)


def sandbox_path(raw: str) -> SandboxPath:
    """Where `raw` (relative to the task dir) is in the sandbox, lexically; raises SandboxError.
    Lexical `..` is sound here because no link is ever followed on the way down."""
    if not isinstance(raw, str):
        raise SandboxError(f"{raw!r}: not a path")
    if not raw:
        raise SandboxError("an empty path")
    if "\0" in raw:
        raise SandboxError(f"{raw!r}: a NUL byte in the path")
    text = raw
    for var, directory in _DIR_VARS:
        if text == var or text.startswith(var + "/"):
            text = directory + text[len(var) :]
    if text.startswith("/"):
        raise SandboxError(
            f"{raw}: an absolute path: give a path relative to the task dir "
            "(local/..., secrets/..., or alloc/... for the alloc's shared dir)"
        )
    parts = posixpath.normpath(text).split("/")
    shared = False
    if parts[:2] == ["..", SHARED_DIR]:
        shared, parts = True, parts[2:]
    elif parts[0] == "..":
        raise SandboxError(
            f"{raw}: escapes the task directory "
            "(the sandbox is the task dir and the alloc's shared alloc/ dir)"
        )
    elif parts[0] == SHARED_DIR:
        shared, parts = True, parts[1:]
    if parts in ([], ["."]):
        raise SandboxError(f"{raw}: names a sandbox directory, not a file in it")
    return SandboxPath(shared, tuple(parts))


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISREG, "regular file"),
    ):
        if test(mode):
            return name
    return "special file"


def _lstat(name: str, dir_fd: int) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _why_not(name: str, dir_fd: int, shown: str, exc: OSError, want: str) -> SandboxError:
    """Why opening `name` failed, said plainly (a link is refused, not merely 'too many levels')."""
    try:
        st = _lstat(name, dir_fd)
    except OSError:
        st = None
    if st is None:
        return SandboxError(f"{shown}: {exc.strerror or exc}")
    if stat.S_ISLNK(st.st_mode):
        return SandboxError(f"{shown} {_LINK_REFUSED}")
    return SandboxError(f"{shown} is a {_kind(st.st_mode)}, not {want}")


def _open_dir(name: str, dir_fd: int, shown: str, *, create: bool) -> int:
    """Open the directory `name` below `dir_fd` without following a link; create it if asked."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError as exc:
        if not create:
            raise SandboxError(f"{shown}: no such directory") from exc
    except OSError as exc:
        raise _why_not(name, dir_fd, shown, exc, "a directory") from None
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, 0o755, dir_fd=dir_fd)
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _why_not(name, dir_fd, shown, exc, "a directory") from None


def _open_root(task_dir: Path, shared: bool, *, create: bool) -> int:
    """An fd of the sandbox root. The path up to the task dir is the agent's own (data_dir/alloc/<id>);
    the task dir and the shared dir themselves are opened without following a link."""
    base = task_dir.parent if shared else task_dir
    if create:
        base.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(base, _DIR_FLAGS)
    except OSError as exc:
        if base.is_symlink():
            raise SandboxError(f"{base} {_LINK_REFUSED}") from None
        raise SandboxError(f"{base}: {exc.strerror or exc}") from None
    if not shared:
        return fd
    try:
        return _open_dir(SHARED_DIR, fd, f"{SHARED_DIR}/", create=create)
    finally:
        os.close(fd)


def _open_parent(task_dir: Path, where: SandboxPath, *, create: bool) -> int:
    """An fd of the directory that holds `where`'s last component, walked from the sandbox root one
    component at a time (O_NOFOLLOW each)."""
    fd = _open_root(task_dir, where.shared, create=create)
    shown = [SHARED_DIR] if where.shared else []
    try:
        for name in where.parts[:-1]:
            shown.append(name)
            nfd = _open_dir(name, fd, "/".join(shown), create=create)
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read_at(dir_fd: int, name: str, shown: str, limit: int) -> bytes:
    """The content of the regular file `name` below `dir_fd`, at most `limit` bytes; refuses links,
    FIFOs, devices and directories without opening them for anything that could block."""
    st = _lstat(name, dir_fd)
    if st is None:
        raise SandboxError(f"{shown}: no such file")
    if not stat.S_ISREG(st.st_mode):
        raise SandboxError(
            f"{shown} {_LINK_REFUSED}"
            if stat.S_ISLNK(st.st_mode)
            else f"{shown} is a {_kind(st.st_mode)}: only regular files are read"
        )
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _why_not(name, dir_fd, shown, exc, "a regular file") from None
    try:
        fst = os.fstat(fd)
        if not stat.S_ISREG(fst.st_mode):  # swapped since the lstat
            raise SandboxError(f"{shown} is a {_kind(fst.st_mode)}: only regular files are read")
        if fst.st_size > limit:
            raise SandboxError(f"{shown} is {fst.st_size} bytes, more than the {limit}-byte template budget")
        chunks, total = [], 0
        while chunk := os.read(fd, min(1 << 20, limit + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > limit:
                raise SandboxError(f"{shown} is more than the {limit}-byte template budget")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_file(task_dir: Path, raw: str, limit: int = DEFAULT_MAX_BYTES) -> str:
    """A file of the sandbox as text (`source`, `file(path)`); raises SandboxError or OSError."""
    where = sandbox_path(raw)
    fd = _open_parent(task_dir, where, create=False)
    try:
        data = _read_at(fd, where.parts[-1], str(where), limit)
    finally:
        os.close(fd)
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise SandboxError(f"{where}: not UTF-8 text") from None


def _temp_token() -> str:
    return _secrets.token_hex(8)


def _temp_prefix(name: str) -> str:
    return f".{name[:200]}."


def _remove_stale_temps(dir_fd: int, name: str) -> None:
    """Temp files an earlier agent left when it died mid-write (never a directory; unlink does not
    follow a link)."""
    prefix = _temp_prefix(name)
    for entry in os.listdir(dir_fd):
        if entry.startswith(prefix) and re.fullmatch(r"[0-9a-f]{16}\.tmp", entry[len(prefix) :]):
            st = _lstat(entry, dir_fd)
            if st is not None and not stat.S_ISDIR(st.st_mode):
                with contextlib.suppress(OSError):
                    os.unlink(entry, dir_fd=dir_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(28, "No space left on device (short write)")
        view = view[n:]


def write_file(task_dir: Path, where: SandboxPath, data: bytes, perms: int) -> bool:
    """Replace the file at `where` with `data` (mode `perms`) atomically; False when it already holds
    exactly `data`. Raises SandboxError (refused) or OSError (the write failed; nothing left behind)."""
    dir_fd = _open_parent(task_dir, where, create=True)
    try:
        name, shown = where.parts[-1], str(where)
        st = _lstat(name, dir_fd)
        if st is not None and not stat.S_ISREG(st.st_mode):
            what = _LINK_REFUSED if stat.S_ISLNK(st.st_mode) else f"is a {_kind(st.st_mode)}: refused"
            raise SandboxError(f"{shown} exists and {what}; only a regular file is replaced")
        if st is not None and st.st_size == len(data) and _read_at(dir_fd, name, shown, len(data)) == data:
            return False
        _remove_stale_temps(dir_fd, name)
        for _ in range(_TEMP_ATTEMPTS):
            tmp = f"{_temp_prefix(name)}{_temp_token()}.tmp"
            try:
                fd = os.open(tmp, _TEMP_FLAGS, 0o600, dir_fd=dir_fd)
                break
            except FileExistsError:
                continue
        else:
            raise SandboxError(f"no free temporary name next to {shown} (planted files or links?)")
        try:
            try:
                _write_all(fd, data)
                os.fchmod(fd, perms)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
        os.fsync(dir_fd)
        return True
    finally:
        os.close(dir_fd)


def _perms(text: str) -> int:
    try:
        perms = int(text, 8)
    except ValueError:
        raise SandboxError(f"perms {text!r}: not octal file permissions like 0644") from None
    if perms & ~0o777:
        raise SandboxError(f"perms {text}: setuid, setgid and sticky bits are not allowed")
    return perms


# ---------------------------------------------------------------------------------------------
# Vault paths
# ---------------------------------------------------------------------------------------------


def vault_path_problem(path: object) -> str | None:
    """Why a template may not use this Vault path, or None. The agent's token must not reach Vault's
    own APIs (auth/, sys/) or its cubbyhole; the path must be plain so that the check sees what
    Vault sees (no %-escapes, no `..`, no query)."""
    if not isinstance(path, str) or not path.strip("/"):
        return "not a Vault path"
    if any(c in path for c in "%?#\\") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        return "a Vault path may not contain %, ?, #, \\ or control characters"
    segments = [s for s in path.split("/") if s]
    if any(s in (".", "..") for s in segments):
        return "a Vault path may not contain . or .. segments"
    mount = segments[0].strip().lower()
    if mount in REFUSED_VAULT_MOUNTS:
        return f"Vault paths under {mount}/ are refused for templates (auth/, sys/ and cubbyhole/ are)"
    return None


# ---------------------------------------------------------------------------------------------
# At submission: parse only
# ---------------------------------------------------------------------------------------------


@pass_context
def _never_folded(*_args: Any, **_kwargs: Any) -> NoReturn:  # pragma: no cover - never called
    raise AssertionError("a parse-only environment renders nothing")


class _ParseOnly(SandboxedEnvironment):
    """Jinja's code generator folds constant expressions (`{{ "x" * 10**9 }}`, `{{ "x"|center(10**9)
    }}`) when it is asked for the undeclared names: here nothing can be folded (every operator is
    intercepted, every filter and test takes the context), so checking a template computes nothing."""

    intercepted_binops = frozenset(("+", "-", "*", "/", "//", "%", "**"))
    intercepted_unops = frozenset(("+", "-"))

    def __init__(self) -> None:
        super().__init__(undefined=StrictUndefined, autoescape=False)
        self.filters = {name: _never_folded for name in self.filters}
        self.tests = {name: _never_folded for name in self.tests}


def _const_path_problems(ast: nodes.Template) -> list[str]:
    problems = []
    for call in ast.find_all(nodes.Call):
        if not (isinstance(call.node, nodes.Name) and call.node.name in ("secret", "secrets", "file")):
            continue
        fn = call.node.name
        arg = call.args[0] if call.args else next((k.value for k in call.kwargs if k.key == "path"), None)
        if not (isinstance(arg, nodes.Const) and isinstance(arg.value, str)):
            continue  # checked at render time
        if fn == "file":
            try:
                sandbox_path(arg.value)
            except SandboxError as exc:
                problems.append(f"file({arg.value!r}): {exc}")
        elif why := vault_path_problem(arg.value):
            problems.append(f"{fn}({arg.value!r}): {why}")
    return problems


def check_template(tpl: Template, max_bytes: int = DEFAULT_MAX_BYTES) -> str | None:
    """What can be known at job submission: the destination and source paths, the perms, the size,
    syntax errors, names that are not template functions, and constant Vault and file paths that
    the sandbox refuses. Returns the problem, or None. Parses only: nothing is evaluated."""
    problems: list[str] = []
    try:
        sandbox_path(tpl.destination)
        if tpl.source:
            sandbox_path(tpl.source)  # read at render time
        _perms(tpl.perms)
    except SandboxError as exc:
        problems.append(str(exc))
    if tpl.source or problems:
        pass
    elif len(tpl.data.encode(errors="replace")) > max_bytes:
        problems.append(f"template text is more than {max_bytes} bytes")
    else:
        try:
            ast = _ParseOnly().parse(tpl.data)
            unknown = sorted(meta.find_undeclared_variables(ast) - set(FUNCTIONS))
            if unknown:
                problems.append(
                    f"unknown name(s) {', '.join(unknown)}: templates may call {', '.join(FUNCTIONS)}"
                )
            problems += _const_path_problems(ast)
        except TemplateError as exc:
            problems.append(f"template syntax error: {exc}")
        except Exception as exc:  # RecursionError on absurd nesting, and the like
            problems.append(f"template cannot be parsed: {type(exc).__name__}: {exc}")
    return "; ".join(problems) or None


# ---------------------------------------------------------------------------------------------
# The render worker
# ---------------------------------------------------------------------------------------------

_LEN = 4  # frame: 4-byte big-endian length, then JSON


def _frame(msg: dict[str, Any]) -> bytes:
    body = json.dumps(msg, ensure_ascii=True, separators=(",", ":")).encode()
    return len(body).to_bytes(_LEN, "big") + body


class _Timeout(Exception):
    pass


class _WorkerGone(Exception):
    pass


class _Worker:
    """One render worker process and its pipes (the agent's side, non-blocking, polled)."""

    def __init__(self, unprivileged: bool) -> None:
        root = str(Path(__file__).resolve().parents[2])
        code = (
            f"import sys; sys.path.insert(0, {root!r}); "
            "from agent.templates.render import _worker_main; _worker_main()"
        )
        extra: dict[str, Any] = {}
        if unprivileged:
            uid, gid = _nobody()
            extra = {"user": uid, "group": gid, "extra_groups": []}
        self.unprivileged = unprivileged
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={"PATH": os.defpath, "LC_ALL": "C.UTF-8"},
            cwd="/",
            close_fds=True,
            start_new_session=True,
            **extra,
        )
        assert self.proc.stdin and self.proc.stdout and self.proc.stderr
        self.wfd, self.rfd, self.efd = (
            self.proc.stdin.fileno(),
            self.proc.stdout.fileno(),
            self.proc.stderr.fileno(),
        )
        for fd in (self.wfd, self.rfd, self.efd):
            os.set_blocking(fd, False)
        self.buf = bytearray()
        self.err = bytearray()  # the tail of its stderr
        self.err_open = True
        self.ready = False

    def _wait(self, fd: int, events: int, deadline: float) -> None:
        poller = select.poll()
        poller.register(fd, events)
        if self.err_open:
            poller.register(self.efd, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Timeout
            for got, _ in poller.poll(max(1, math.ceil(left * 1000))):
                if got == self.efd:
                    self._drain_stderr(poller)
                elif got == fd:
                    return

    def _drain_stderr(self, poller: select.poll) -> None:
        try:
            chunk = os.read(self.efd, 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            poller.unregister(self.efd)
            self.err_open = False
            return
        self.err += chunk
        del self.err[:-4096]

    def send(self, msg: dict[str, Any], deadline: float) -> None:
        view = memoryview(_frame(msg))
        while view:
            try:
                n = os.write(self.wfd, view)
            except BlockingIOError:
                self._wait(self.wfd, select.POLLOUT, deadline)
                continue
            except BrokenPipeError:
                raise _WorkerGone(self.gone()) from None
            view = view[n:]

    def recv(self, deadline: float, limit: int) -> dict[str, Any]:
        while True:
            if len(self.buf) >= _LEN:
                n = int.from_bytes(self.buf[:_LEN], "big")
                if n > limit:
                    raise _WorkerGone(f"the render worker sent a {n}-byte message (at most {limit})")
                if len(self.buf) >= _LEN + n:
                    msg = json.loads(bytes(self.buf[_LEN : _LEN + n]))
                    del self.buf[: _LEN + n]
                    if not isinstance(msg, dict):
                        raise _WorkerGone("the render worker sent a malformed message")
                    return msg
            try:
                chunk = os.read(self.rfd, 1 << 16)
            except BlockingIOError:
                self._wait(self.rfd, select.POLLIN, deadline)
                continue
            if not chunk:
                raise _WorkerGone(self.gone())
            self.buf += chunk

    def gone(self) -> str:
        try:
            rc = self.proc.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            return "the render worker stopped talking"
        with contextlib.suppress(OSError):
            while chunk := os.read(self.efd, 1 << 16):
                self.err += chunk
        tail = self.err.decode(errors="replace").strip().splitlines()[-1:] or [""]
        return f"the render worker exited with status {rc}" + (f": {tail[0]}" if tail[0] else "")

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5.0)
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                with contextlib.suppress(OSError):
                    f.close()


def _nobody() -> tuple[int, int]:
    try:
        pw = pwd.getpwnam("nobody")
        return pw.pw_uid, pw.pw_gid
    except KeyError:
        return 65534, 65534


class _WorkerPool:
    """The one render worker of the agent (renders run one at a time on the main loop; the lock is
    for anything else that renders). A worker that overran its budget is killed and a fresh one is
    started at once, so its start-up overlaps the agent's other work."""

    START_TIMEOUT = 30.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.worker: _Worker | None = None
        self.unprivileged = os.geteuid() == 0

    def get(self) -> _Worker:
        for _ in range(2):
            if self.worker is None:
                try:
                    self.worker = _Worker(self.unprivileged)
                except OSError as exc:
                    if not self.unprivileged:
                        raise
                    self._privileged_fallback(str(exc))
                    continue
            w = self.worker
            if w.ready:
                return w
            try:
                msg = w.recv(time.monotonic() + self.START_TIMEOUT, 1 << 16)
                if msg.get("op") != "ready":
                    raise _WorkerGone(f"the render worker said {msg.get('op')!r} instead of ready")
            except (_WorkerGone, _Timeout) as exc:
                self.discard()
                if w.unprivileged:
                    self._privileged_fallback(str(exc) or "no answer")
                    continue
                raise _WorkerGone(f"the render worker did not start: {exc}") from None
            w.ready = True
            return w
        raise _WorkerGone("the render worker did not start")

    def _privileged_fallback(self, why: str) -> None:
        log.warning(
            "template render worker cannot run as nobody (%s); it runs as the agent's user from now on", why
        )
        self.unprivileged = False

    def discard(self, *, respawn: bool = False) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None
        if respawn:
            with contextlib.suppress(OSError):
                self.worker = _Worker(self.unprivileged)

    def close(self) -> None:
        """At exit (the worker would also end on its own when its stdin closes)."""
        if self.lock.acquire(timeout=1.0):
            try:
                self.discard()
            finally:
                self.lock.release()


_POOL = _WorkerPool()
atexit.register(_POOL.close)


class _CallFailed(Exception):
    """A function the template called failed in the agent (the agent holds the reason)."""


def _serve(
    tpl: Template, msg: dict[str, Any], functions: Mapping[str, Callable[..., Any]], deadline: float
) -> tuple[dict[str, Any], Exception | None]:
    """Run one function the template called (in the agent); the reply, and the failure if any."""
    fn = functions.get(str(msg.get("fn")))
    try:
        if fn is None:
            raise TemplateRenderError(tpl.destination, f"no function {msg.get('fn')!r}")
        if time.monotonic() >= deadline:
            raise _Timeout
        reply = {"value": fn(*msg.get("args", []), **msg.get("kwargs", {}))}
        _frame(reply)  # serialisable, or an error here
    except _Timeout:
        raise
    except Exception as exc:
        return {"error": str(exc)}, exc
    return reply, None


def _run(
    tpl: Template,
    text: str,
    functions: Mapping[str, Callable[..., Any]],
    timeout: float,
    max_bytes: int,
) -> str:
    """Render `text` in the worker; serve its function calls; give up after `timeout` seconds."""
    frame_limit = 16 * max_bytes + (1 << 20)
    with _POOL.lock:
        try:
            worker = _POOL.get()
        except (_WorkerGone, OSError) as exc:
            raise TemplateRenderError(tpl.destination, f"cannot render: {exc}") from None
        deadline = time.monotonic() + timeout
        failed: Exception | None = None
        try:
            worker.send({"op": "render", "text": text, "max_bytes": max_bytes, "timeout": timeout}, deadline)
            while True:
                msg = worker.recv(deadline, frame_limit)
                op = msg.get("op")
                if op == "call":
                    started = time.monotonic()
                    reply, call_failed = _serve(tpl, msg, functions, deadline)
                    deadline += time.monotonic() - started  # the agent's time, not the template's
                    failed = failed or call_failed
                    worker.send(reply, deadline)
                elif op == "done":
                    if failed is not None:  # a failed call must fail the render, even if it went on
                        raise failed
                    return str(msg.get("output", ""))
                elif op == "error":
                    if msg.get("fatal"):
                        _POOL.discard(respawn=True)
                    if msg.get("kind") == "call" and failed is not None:
                        raise failed
                    raise TemplateRenderError(tpl.destination, str(msg.get("message", "render failed")))
                else:
                    raise _WorkerGone(f"the render worker sent {op!r}")
        except _Timeout:
            _POOL.discard(respawn=True)
            raise TemplateRenderError(
                tpl.destination,
                f"rendering took longer than the {timeout:g}s budget (template_render_timeout): stopped",
            ) from None
        except _WorkerGone as exc:
            _POOL.discard(respawn=True)
            raise TemplateRenderError(tpl.destination, f"render failed: {exc}") from None


# -- the worker's side ------------------------------------------------------------------------


def _read_exact(fd: int, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = os.read(fd, n - len(out))
        if not chunk:
            raise EOFError
        out += chunk
    return bytes(out)


def _worker_recv(fd: int) -> dict[str, Any]:
    n = int.from_bytes(_read_exact(fd, _LEN), "big")
    msg = json.loads(_read_exact(fd, n))
    assert isinstance(msg, dict)
    return msg


def _worker_send(fd: int, msg: dict[str, Any]) -> None:
    data = memoryview(_frame(msg))
    while data:
        data = data[os.write(fd, data) :]


class _TooBig(Exception):
    pass


def _worker_render(req: dict[str, Any], call: Callable[[str, list[Any], dict[str, Any]], Any]) -> str:
    jenv = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)

    def proxy(name: str) -> Callable[..., Any]:
        def fn(*args: Any, **kwargs: Any) -> Any:
            return call(name, list(args), kwargs)

        fn.__name__ = name
        return fn

    jenv.globals.update({name: proxy(name) for name in FUNCTIONS})
    limit = int(req["max_bytes"])
    parts: list[str] = []
    size = 0
    for chunk in jenv.from_string(str(req["text"])).generate():
        size += len(chunk)  # characters: never more than its UTF-8 bytes
        if size > limit:
            raise _TooBig
        parts.append(chunk)
    out = "".join(parts)
    if len(out.encode(errors="surrogatepass")) > limit:
        raise _TooBig
    return out


def _worker_main() -> None:  # pragma: no cover - runs in the worker process
    """The worker: hard limits, then one render per request. Its stdin/stdout are the protocol; fds
    0 and 1 are pointed at /dev/null so nothing else can write into the protocol."""
    import resource
    import signal

    inp, out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    for limit, value in (
        (resource.RLIMIT_AS, WORKER_MEMORY),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_FSIZE, 0),
        (resource.RLIMIT_NPROC, 0),
    ):
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(limit, (value, value))

    alarm = 0

    def call(name: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        signal.alarm(0)  # the agent's time serving the call is not the template's
        _worker_send(out, {"op": "call", "fn": name, "args": args, "kwargs": kwargs})
        reply = _worker_recv(inp)
        signal.alarm(alarm)
        if "error" in reply:
            raise _CallFailed(reply["error"])
        return reply.get("value")

    _worker_send(out, {"op": "ready", "uid": os.getuid()})
    while True:
        try:
            req = _worker_recv(inp)
        except EOFError:
            return
        alarm = max(1, math.ceil(float(req.get("timeout", DEFAULT_RENDER_TIMEOUT)))) + 5
        signal.alarm(alarm)  # ends a runaway render whose agent died (the agent kills it otherwise)
        fatal = False
        try:
            reply: dict[str, Any] = {"op": "done", "output": _worker_render(req, call)}
        except _CallFailed as exc:
            reply = {"op": "error", "kind": "call", "message": str(exc)}
        except _TooBig:
            reply = {
                "op": "error",
                "kind": "size",
                "message": f"the rendered output is more than the {req['max_bytes']}-byte budget "
                "(template_max_bytes): not written",
            }
        except Exception as exc:
            fatal = isinstance(exc, MemoryError | RecursionError)
            why = str(exc) or (
                f"more memory than the render worker may use ({WORKER_MEMORY >> 20} MiB)"
                if isinstance(exc, MemoryError)
                else "no message"
            )
            reply = {"op": "error", "kind": "exception", "message": f"{type(exc).__name__}: {why}"}
        signal.alarm(0)
        reply["fatal"] = fatal
        _worker_send(out, reply)
        if fatal:
            return


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _functions(
    tpl: Template, task_dir: Path, ctx: RenderContext, max_bytes: int
) -> dict[str, Callable[..., Any]]:
    """The template functions, run in the agent on the worker's behalf."""
    dest = tpl.destination
    fetches = 0

    def fetch(what: str) -> None:
        nonlocal fetches
        fetches += 1
        if fetches > MAX_FETCHES:
            raise TemplateRenderError(
                dest, f"{what}: more than {MAX_FETCHES} Vault, Consul or file reads in one render"
            )

    def env_fn(name: str) -> str:
        if name not in ctx.env:
            raise TemplateRenderError(dest, f"env({name!r}): not set for this task")
        return ctx.env[name]

    def secret_fn(path: str, **params: Any) -> dict[str, Any]:
        if why := vault_path_problem(path):
            raise TemplateRenderError(dest, f"secret({path!r}): {why}")
        if ctx.vault is None:
            raise TemplateRenderError(dest, f"secret({path!r}): no Vault is configured for this agent")
        key = json.dumps([path, params], sort_keys=True)
        if key not in ctx.cache:
            fetch(f"secret({path!r})")
            ctx.cache[key] = ctx.vault.fetch(path, dict(params))
            ctx.fetches += 1
        data, ttl = ctx.cache[key]
        if ttl > 0:
            ctx.min_ttl = ttl if ctx.min_ttl == 0 else min(ctx.min_ttl, ttl)
        return data

    def no_consul(what: str) -> TemplateRenderError:
        return TemplateRenderError(dest, f"{what}: no Consul in this lab (no address configured)")

    def key_fn(path: str) -> str:
        if ctx.consul is None:
            raise no_consul(f"key({path!r})")
        fetch(f"key({path!r})")
        return ctx.consul.key(path)

    def service_fn(name: str) -> list[dict[str, Any]]:
        if ctx.consul is None:
            raise no_consul(f"service({name!r})")
        fetch(f"service({name!r})")
        return ctx.consul.service(name)

    def file_fn(path: str) -> str:
        fetch(f"file({path!r})")
        try:
            return read_file(task_dir, path, max_bytes)
        except (SandboxError, OSError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise TemplateRenderError(dest, f"file({path!r}): {why}") from None

    return {"env": env_fn, "secret": secret_fn, "key": key_fn, "service": service_fn, "file": file_fn}


def render(
    tpl: Template,
    task_dir: Path,
    env: Mapping[str, str] | RenderContext,
    *,
    timeout: float = DEFAULT_RENDER_TIMEOUT,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[Path, str, bool]:
    """Render one template into the sandbox of `task_dir`; return (path, content sha256, changed).
    Every failure is a TemplateRenderError naming the template's destination."""
    ctx = env if isinstance(env, RenderContext) else RenderContext(env)
    try:
        return _render(tpl, task_dir, ctx, timeout, max_bytes)
    except TemplateRenderError:
        raise
    except (SandboxError, AgentError) as exc:
        raise TemplateRenderError(tpl.destination, str(exc)) from None
    except Exception as exc:
        raise TemplateRenderError(tpl.destination, f"{type(exc).__name__}: {exc}") from exc


def _render(
    tpl: Template, task_dir: Path, ctx: RenderContext, timeout: float, max_bytes: int
) -> tuple[Path, str, bool]:
    try:
        where = sandbox_path(tpl.destination)
    except SandboxError as exc:
        raise TemplateRenderError(tpl.destination, f"destination {exc}") from None
    perms = _perms(tpl.perms)
    if tpl.source:
        try:
            text = read_file(task_dir, tpl.source, max_bytes)
        except (SandboxError, OSError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise TemplateRenderError(tpl.destination, f"source {tpl.source}: {why}") from None
    else:
        text = tpl.data
    if len(text) > max_bytes or len(text.encode(errors="surrogatepass")) > max_bytes:
        raise TemplateRenderError(
            tpl.destination,
            f"the template text is more than the {max_bytes}-byte budget (template_max_bytes)",
        )
    content = _run(tpl, text, _functions(tpl, task_dir, ctx, max_bytes), timeout, max_bytes)
    data = content.encode()
    if len(data) > max_bytes:
        raise TemplateRenderError(
            tpl.destination, f"the rendered output is more than the {max_bytes}-byte budget: not written"
        )
    digest = hashlib.sha256(data).hexdigest()
    try:
        changed = write_file(task_dir, where, data, perms)
    except OSError as exc:
        raise TemplateRenderError(tpl.destination, f"writing {where}: {exc.strerror or exc}") from None
    return where.host_path(task_dir), digest, changed
