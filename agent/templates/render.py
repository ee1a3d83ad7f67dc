"""Template rendering into a task's directory: Nomad's template language, in a sandbox.

Templates are Go `text/template` with consul-template's functions, as Nomad renders them
(agent.gotemplate). The functions that read data are served by the agent on the render worker's
behalf (agent.templates.worker): `secret` (a Vault read, or a write with `"k=v"` parameters, e.g.
`pki_int/issue/<role>`), `secrets` (a Vault LIST), `key`/`keyOrDefault`/`keyExists`/`ls`/`tree`
and `service`/`services` (Consul), `nomadVar`/`nomadVarExists`/`nomadVarList`/`nomadVarListSafe`
and `nomadService`/`nomadServices` (this node's Nomad variables, as the task's workload identity may
read them, and native services: agent.templates.nomadfuncs), `env` (the task's environment) and
`file` (a file of the task's sandbox). Within one render pass of a task every distinct secret is
fetched once, so a cert and its key rendered into two files match, and a re-issue cycle costs one
Vault request per dynamic secret. Functions that run programs (`plugin`) or write files are refused
at submission, naming the function, the template and the line.

File access goes through agent.allocdir.sandbox; the time, memory and size budgets are the
worker's. Every exception of a render becomes a TemplateRenderError naming the destination, and a
template error names its line and column too (the runner makes it a `Template Failed` task event
and retries). Vault paths under `auth/`, `sys/` and `cubbyhole/` are refused at submission (when
the path is a constant) and at render time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar, runtime_checkable

from agent import gotemplate
from agent.allocdir.sandbox import (
    DEFAULT_MAX_BYTES,
    SandboxError,
    perms_of,
    read_file,
    sandbox_path,
    vault_path_problem,
    write_file,
)
from agent.errors import AgentError, RateLimited, Unavailable
from agent.structs.model import Template
from agent.templates.budget import MAX_ENV_NAME, RenderMeter
from agent.templates.envfile import parse_env_file
from agent.templates.errors import TemplateRenderError, secret_strings
from agent.templates.nomadfuncs import NomadView, nomad_functions
from agent.templates.sockaddr import sockaddr
from agent.templates.worker import run_in_worker
from agent.templates.workerproc import DEFAULT_RENDER_TIMEOUT

__all__ = [
    "DEFAULT_MAX_BYTES",
    "DEFAULT_RENDER_TIMEOUT",
    "MAX_FETCHES",
    "ConsulSource",
    "RenderContext",
    "RestartPaced",
    "SecretSource",
    "TemplateRenderError",
    "check_template",
    "render",
]

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_FETCHES = 64  # Vault, Consul and file reads of one render (cached secrets are not counted)


class SecretSource(Protocol):
    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        """(data, ttl seconds; 0 when the secret does not expire)."""

    def list_keys(self, path: str) -> list[str]:
        """The keys under a path (a Vault LIST)."""


@runtime_checkable
class RestartPaced(Protocol):
    """A SecretSource that spreads the re-issue after an agent restart (the task's Vault token, through
    the agent's Vault client and its `vault.restart_jitter`)."""

    def restart_delay(self) -> float | None:
        """Seconds to wait before re-issuing the task's secrets after an agent restart (a random point
        of the restart window: agents restarted together do not all ask Vault at once); None when
        there is no window (re-issue at once, in the restore)."""


class ConsulSource(Protocol):
    """Consul's KV store and catalog, in consul-template's shapes (agent.consul.catalog.ConsulData)."""

    def key(self, path: str) -> str | None: ...

    def ls(self, prefix: str) -> list[dict[str, Any]]: ...

    def tree(self, prefix: str) -> list[dict[str, Any]]: ...

    def service(self, name: str, tag: str, passing_only: bool) -> list[dict[str, Any]]: ...

    def services(self) -> list[dict[str, Any]]: ...

    def datacenters(self) -> list[str]: ...

    def node(self, name: str) -> dict[str, Any] | None: ...

    def nodes(self) -> list[dict[str, Any]]: ...


@dataclass
class Reads:
    """What one template's last render read: the secrets (cache keys), and whether it read anything
    else that can change without a fetch (a file, Consul, a Vault list, the host's addresses, its
    own source file). A render whose reads are all secrets held unchanged renders what it rendered."""

    keys: set[str] = field(default_factory=set)
    env: dict[str, str | None] = field(default_factory=dict)  # the variables `env` read, as they were
    volatile: bool = False
    # What its Nomad reads depend on ("var", "services", "service:<name>"): a change re-renders it
    # (agent.templates.nomadwatch).
    nomad: set[str] = field(default_factory=set)

    def same_when(self, reused: Iterable[str], env: Mapping[str, str]) -> bool:
        """Whether rendering again from these held secrets (`reused`: not fetched anew) and this env
        must give what the last render gave, as consul-template re-renders only a template whose
        dependencies changed."""
        return (
            not self.volatile
            and self.keys <= set(reused)
            and all(env.get(name) == value for name, value in self.env.items())
        )


@dataclass
class RenderContext:
    """What templates may read during one render pass of a task, and what that pass learned."""

    env: Mapping[str, str]
    vault: SecretSource | None = None
    consul: ConsulSource | None = None
    nomad: NomadView | None = None  # this node's variables and services the task may read
    cache: dict[str, tuple[dict[str, Any], float]] = field(default_factory=dict)
    fetches: int = 0
    used: set[str] = field(default_factory=set)  # the secrets (cache keys) the pass's templates read
    # Cached secrets an earlier pass fetched and that are not due yet (agent.templates.held): the
    # pass renders from them and does not fetch them again.
    reused: set[str] = field(default_factory=set)
    # The rate-limit refusal (HTTP 429, or the agent's own cap) that failed the current render's
    # fetch, kept for its TemplateRenderError: the render worker's reply carries only the text.
    rate_limited: RateLimited | None = None
    unavailable: Unavailable | None = None  # a server that could not answer during the render
    reads: dict[str, Reads] = field(default_factory=dict)  # per destination, of its render in this pass
    meter: RenderMeter = field(default_factory=RenderMeter)  # the pass's time (agent.templates.budget)
    # Of each `env = true` template rendered in this pass: the variables of what the agent rendered
    # (KEY=VALUE lines, agent.templates.envfile) and the numbers of the lines that were not.
    env_files: dict[str, tuple[dict[str, str], list[int]]] = field(default_factory=dict)

    def secrets(self) -> set[str]:
        """The secret strings this pass holds (the data of every secret it fetched or reused, the
        items of the Nomad variables it may read, and the task's Vault token): what a render error
        must not show (agent.templates.errors), as consul-template redacts them."""
        token = getattr(self.vault, "token", "")
        values: list[Any] = [data for data, _ in self.cache.values()]
        if self.nomad is not None:
            values += [var.get("Items") for var in self.nomad.variables.values()]
        values += [t for t in (token, self.env.get("VAULT_TOKEN", "")) if isinstance(t, str) and t]
        return secret_strings(values)

    def reads_of(self, dest: str) -> Reads:
        """The reads of `dest`'s render in this pass, started empty at its first read."""
        return self.reads.setdefault(dest, Reads())


# ---------------------------------------------------------------------------------------------
# At submission: parse only
# ---------------------------------------------------------------------------------------------

_PATH_FUNCTIONS = frozenset({"secret", "secrets", "file"})


class _NoData:
    """A data source that is never called: only the function names are wanted."""

    def __getattr__(self, name: str) -> Any:  # pragma: no cover - never called
        raise AssertionError(f"{name} called at submission")


KNOWN_FUNCTIONS = frozenset(gotemplate.consul_functions(_NoData()))
# consul-template functions Nomad allows that this agent does not run, and why (named at submission).
NOT_RUN = {
    "plugin": "it runs a program on the client",
    "writeToFile": "it writes files outside the template's destination",
    "caRoots": "it needs Consul Connect's CA, which this lab does not run",
    "caLeaf": "it needs Consul Connect's CA, which this lab does not run",
    "connect": "it needs Consul Connect, which this lab does not run",
}


def _parse(tpl: Template, text: str) -> gotemplate.Template:
    return gotemplate.parse(
        text,
        name=tpl.destination,
        left_delim=tpl.left_delimiter or "{{",
        right_delim=tpl.right_delimiter or "}}",
        funcs=KNOWN_FUNCTIONS | NOT_RUN.keys(),
    )


def _call_problems(tpl: Template, parsed: gotemplate.Template) -> list[str]:
    problems = []
    for call in gotemplate.function_calls(parsed):
        where = f"{tpl.destination}:{call.line}:{call.col}"
        if call.name in NOT_RUN and call.name not in KNOWN_FUNCTIONS:
            problems.append(
                f"{where}: function {call.name} is not run by fieldlab-agent: {NOT_RUN[call.name]}"
            )
            continue
        arg = call.args[0] if call.args else None
        if call.name not in _PATH_FUNCTIONS or not isinstance(arg, str):
            continue  # not a path, or not a constant: checked at render time
        if call.name == "file":
            try:
                sandbox_path(arg)
            except SandboxError as exc:
                problems.append(f"{where}: file {arg!r}: {exc}")
        elif why := vault_path_problem(arg):
            problems.append(f"{where}: {call.name} {arg!r}: {why}")
    return problems


def check_template(tpl: Template, max_bytes: int = DEFAULT_MAX_BYTES) -> str | None:
    """What can be known at job submission: the destination and source paths, the perms, the size,
    syntax errors, functions that do not exist or that the agent does not run, and constant Vault
    and file paths that the sandbox refuses. Returns the problem, or None. Parses only: nothing is
    evaluated."""
    problems: list[str] = []
    try:
        sandbox_path(tpl.destination)
        if tpl.source:
            sandbox_path(tpl.source)  # read at render time
        perms_of(tpl.perms)
    except SandboxError as exc:
        problems.append(str(exc))
    if tpl.source or problems:
        pass
    elif len(tpl.data.encode(errors="replace")) > max_bytes:
        problems.append(f"template text is more than {max_bytes} bytes")
    else:
        try:
            problems += _call_problems(tpl, _parse(tpl, tpl.data))
        except gotemplate.TemplateError as exc:
            problems.append(str(exc))  # destination:line:col: reason
    return "; ".join(problems) or None


# ---------------------------------------------------------------------------------------------
# Rendering
# ---------------------------------------------------------------------------------------------


def _kv_params(path: str, params: Any) -> dict[str, Any]:
    if not isinstance(params, dict):
        raise AgentError(f"secret {path!r}: parameters must be k=v pairs")
    return {str(k): v for k, v in params.items()}


class _Budget:
    """Vault, Consul and file reads of one render: at most MAX_FETCHES."""

    def __init__(self, dest: str) -> None:
        self.dest, self.count = dest, 0

    def take(self, what: str) -> None:
        self.count += 1
        if self.count > MAX_FETCHES:
            raise TemplateRenderError(
                self.dest, f"{what}: more than {MAX_FETCHES} Vault, Consul or file reads in one render"
            )


def _waited(ctx: RenderContext, call: Callable[[], T]) -> T:
    """I/O the agent does for a template (Vault, Consul, a file, the host's addresses): its time is
    the agent's, not charged to the render (RenderMeter.io)."""
    began = time.monotonic()
    try:
        return call()
    finally:
        ctx.meter.io += time.monotonic() - began


def _kept(ctx: RenderContext, call: Callable[[], T]) -> T:
    """A Vault request of a render; a rate-limit refusal is kept on the context for the render's error."""
    try:
        return _waited(ctx, call)
    except RateLimited as exc:
        ctx.rate_limited = exc
        raise
    except Unavailable as exc:
        ctx.unavailable = exc
        raise


def _vault_functions(dest: str, ctx: RenderContext, budget: _Budget) -> dict[str, Callable[..., Any]]:
    def vault(fn: str, path: str) -> SecretSource:
        if why := vault_path_problem(path):
            raise TemplateRenderError(dest, f"{fn} {path!r}: {why}")
        if ctx.vault is None:
            raise TemplateRenderError(dest, f"{fn} {path!r}: no Vault is configured for this agent")
        return ctx.vault

    def secret_fn(path: str, params: Any = None) -> dict[str, Any]:
        source = vault("secret", path)
        kv = _kv_params(path, params or {})
        key = secret_key(path, kv)
        ctx.used.add(key)
        ctx.reads_of(dest).keys.add(key)
        if key not in ctx.cache:
            budget.take(f"secret {path!r}")
            ctx.cache[key] = _kept(ctx, lambda: source.fetch(path, kv))
            ctx.fetches += 1
        data, ttl = ctx.cache[key]
        return {"LeaseID": "", "LeaseDuration": int(ttl), "Renewable": False, "Data": data, "Warnings": []}

    def secrets_fn(path: str) -> list[str]:
        ctx.reads_of(dest).volatile = True  # a listing is never held
        source = vault("secrets", path)
        budget.take(f"secrets {path!r}")
        return sorted(_kept(ctx, lambda: source.list_keys(path)))

    return {"secret": secret_fn, "secrets": secrets_fn}


def _consul_functions(dest: str, ctx: RenderContext, budget: _Budget) -> dict[str, Callable[..., Any]]:
    def consul(what: str, call: Callable[[ConsulSource], T]) -> T:
        ctx.reads_of(dest).volatile = True
        source = ctx.consul
        if source is None:
            raise TemplateRenderError(dest, f"{what}: no Consul in this lab (no address configured)")
        budget.take(what)
        return _waited(ctx, lambda: call(source))

    def service_fn(query: str, *filters: str) -> list[dict[str, Any]]:
        name, _, _dc = str(query).partition("@")
        tag, _, svc = name.rpartition(".")
        passing_only = not any(f == "any" for f in filters)
        return consul(f"service {query!r}", lambda c: c.service(svc, tag, passing_only))

    def node_fn(name: str = "") -> dict[str, Any] | None:
        return consul(f"node {name!r}", lambda c: c.node(str(name).partition("@")[0]))

    return {
        "key": lambda path: consul(f"key {path!r}", lambda c: c.key(path)),
        "ls": lambda prefix: consul(f"ls {prefix!r}", lambda c: c.ls(prefix)),
        "tree": lambda prefix: consul(f"tree {prefix!r}", lambda c: c.tree(prefix)),
        "service": service_fn,
        "services": lambda *_args: consul("services", lambda c: c.services()),
        "datacenters": lambda _ignore_inaccessible=False: consul("datacenters", lambda c: c.datacenters()),
        "node": node_fn,
        "nodes": lambda: consul("nodes", lambda c: c.nodes()),
    }


def _functions(
    tpl: Template, task_dir: Path, ctx: RenderContext, max_bytes: int
) -> dict[str, Callable[..., Any]]:
    """The data functions, run in the agent on the worker's behalf (agent.gotemplate.DataSource)."""
    dest = tpl.destination
    budget = _Budget(dest)

    def env_fn(name: str) -> str | None:
        name = str(name)
        value = ctx.env.get(name)  # None: unset (env renders "", mustEnv fails)
        reads = ctx.reads_of(dest)
        if len(name) > MAX_ENV_NAME:  # no variable's name: not kept (rendered anew by every pass)
            reads.volatile = True
        else:
            reads.env[name] = value
        return value

    def file_fn(path: str) -> str:
        ctx.reads_of(dest).volatile = True
        budget.take(f"file {str(path)[:200]!r}")
        try:
            return _waited(ctx, lambda: read_file(task_dir, path, max_bytes))
        except (SandboxError, OSError) as exc:
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise TemplateRenderError(dest, f"file {str(path)[:200]!r}: {why[:500]}") from None

    def sockaddr_fn(expr: str) -> str:
        ctx.reads_of(dest).volatile = True
        budget.take(f"sockaddr {str(expr)[:200]!r}")
        return _waited(ctx, lambda: sockaddr(expr))

    return {
        "env": env_fn,
        "file": file_fn,
        "sockaddr": sockaddr_fn,
        **_vault_functions(dest, ctx, budget),
        **_consul_functions(dest, ctx, budget),
        **nomad_functions(dest, ctx.nomad, lambda depends: _nomad_read(ctx.reads_of(dest), depends)),
    }


def _nomad_read(reads: Reads, depends: str) -> None:
    reads.volatile = True  # rendered again by every pass, and at once when it changes
    reads.nomad.add(depends)


def secret_key(path: str, params: Mapping[str, Any]) -> str:
    """The cache key of one Vault read or write in a render pass (what `prefetch` fetches again)."""
    return json.dumps([path, dict(params)], sort_keys=True)


def prefetch(ctx: RenderContext, keys: Iterable[str], parallel: int) -> int:
    """Fetch, at most `parallel` at once, the secrets the pass will read (those the previous pass
    read), so that the templates then render from the cache instead of waiting on Vault one after
    the other. A fetch that fails is left out: the template's own fetch then fails with its error.
    Returns how many were fetched."""
    source = ctx.vault
    todo = sorted(k for k in set(keys) if k not in ctx.cache)
    if source is None or not todo:
        return 0

    def one(key: str) -> tuple[dict[str, Any], float]:
        path, params = json.loads(key)
        return source.fetch(path, params)

    done = 0
    with ThreadPoolExecutor(
        max_workers=max(1, min(parallel, len(todo))), thread_name_prefix="prefetch"
    ) as pool:
        for key, fut in [(k, pool.submit(one, k)) for k in todo]:
            try:
                ctx.cache[key] = fut.result()
            except Exception as exc:  # the render's own fetch reports it, with its template
                log.debug("prefetch of %s failed: %s", key, exc)
                continue
            ctx.fetches += 1
            done += 1
    return done


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
    ctx.rate_limited = None
    ctx.unavailable = None
    try:
        return _render(tpl, task_dir, ctx, timeout, max_bytes)
    except TemplateRenderError as exc:
        if exc.rate_limited is None:
            exc.rate_limited = ctx.rate_limited
        exc.unavailable |= ctx.unavailable is not None or exc.rate_limited is not None
        raise exc.redacted(ctx.secrets()) from None
    except (SandboxError, AgentError) as exc:
        limited = exc if isinstance(exc, RateLimited) else ctx.rate_limited
        down = isinstance(exc, Unavailable) or ctx.unavailable is not None
        failed = TemplateRenderError(tpl.destination, str(exc), rate_limited=limited, unavailable=down)
        raise failed.redacted(ctx.secrets()) from None
    except Exception as exc:
        failed = TemplateRenderError(tpl.destination, f"{type(exc).__name__}: {exc}")
        raise failed.redacted(ctx.secrets()) from None


def _owner(tpl: Template) -> tuple[int, int] | None:
    """The owner the rendered file is given (Nomad's template uid and gid; -1 leaves that one as the
    agent's, as chown(2)), None when neither is set. Set by the descriptor of the file the agent
    created inside the task dir, never through a path a task could swap for a link."""
    if tpl.uid is None and tpl.gid is None:
        return None
    return (-1 if tpl.uid is None else tpl.uid, -1 if tpl.gid is None else tpl.gid)


def _render(
    tpl: Template, task_dir: Path, ctx: RenderContext, timeout: float, max_bytes: int
) -> tuple[Path, str, bool]:
    try:
        where = sandbox_path(tpl.destination)
    except SandboxError as exc:
        raise TemplateRenderError(tpl.destination, f"destination {exc}") from None
    perms = perms_of(tpl.perms)
    ctx.reads[tpl.destination] = Reads(volatile=bool(tpl.source))  # filled by the data functions
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
    request = {
        "text": text,
        "name": tpl.destination,
        "left": tpl.left_delimiter or "{{",
        "right": tpl.right_delimiter or "}}",
        "missing_key_error": tpl.error_on_missing_key,
    }
    functions = _functions(tpl, task_dir, ctx, max_bytes)
    content = run_in_worker(tpl, request, functions, timeout, max_bytes, ctx.meter)
    data = content.encode()
    if len(data) > max_bytes:
        raise TemplateRenderError(
            tpl.destination, f"the rendered output is more than the {max_bytes}-byte budget: not written"
        )
    digest = hashlib.sha256(data).hexdigest()
    if tpl.env:  # what the agent rendered, never what the task may have put in the file since
        ctx.env_files[tpl.destination] = parse_env_file(content)
    try:
        changed = write_file(task_dir, where, data, perms, _owner(tpl))
    except OSError as exc:
        raise TemplateRenderError(tpl.destination, f"writing {where}: {exc.strerror or exc}") from None
    return where.host_path(task_dir), digest, changed
