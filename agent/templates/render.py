"""Template rendering into a task's directory: Jinja2 in a sandbox with strict undefined, written
atomically (temp file, fsync, rename) with the template's perms.

Functions: `env(name)`, `secret(path, **params)` (a Vault read, or a write for paths that issue,
like `pki_int/issue/<role>`), `key(path)` and `service(name)` for Consul. Within one render pass of
a task every distinct secret is fetched once, so a cert and its key rendered into two files match,
and a re-issue cycle costs one Vault request per dynamic secret.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from jinja2 import StrictUndefined, TemplateError, meta
from jinja2.sandbox import SandboxedEnvironment

from agent.errors import AgentError
from agent.model import Template


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


FUNCTIONS = ("env", "secret", "key", "service")


def check_template(tpl: Template) -> str | None:
    """What can be known at job submission: syntax errors and names that are not template
    functions. Returns the problem, or None."""
    if tpl.source:
        return None  # read at render time
    jenv = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False)
    try:
        ast = jenv.parse(tpl.data)
    except TemplateError as exc:
        return f"template syntax error: {exc}"
    unknown = sorted(meta.find_undeclared_variables(ast) - set(FUNCTIONS))
    if unknown:
        return f"unknown name(s) {', '.join(unknown)}: templates may call {', '.join(FUNCTIONS)}"
    return None


def _environment(tpl: Template, ctx: RenderContext) -> SandboxedEnvironment:
    jenv = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)

    def env_fn(name: str) -> str:
        if name not in ctx.env:
            raise TemplateRenderError(tpl.destination, f"env({name!r}): not set for this task")
        return ctx.env[name]

    def secret_fn(path: str, **params: Any) -> dict[str, Any]:
        if ctx.vault is None:
            raise TemplateRenderError(
                tpl.destination, f"secret({path!r}): no Vault is configured for this agent"
            )
        key = json.dumps([path, params], sort_keys=True)
        if key not in ctx.cache:
            ctx.cache[key] = ctx.vault.fetch(path, dict(params))
            ctx.fetches += 1
        data, ttl = ctx.cache[key]
        if ttl > 0:
            ctx.min_ttl = ttl if ctx.min_ttl == 0 else min(ctx.min_ttl, ttl)
        return data

    def no_consul(what: str) -> TemplateRenderError:
        return TemplateRenderError(tpl.destination, f"{what}: no Consul in this lab (no address configured)")

    def key_fn(path: str) -> str:
        if ctx.consul is None:
            raise no_consul(f"key({path!r})")
        return ctx.consul.key(path)

    def service_fn(name: str) -> list[dict[str, Any]]:
        if ctx.consul is None:
            raise no_consul(f"service({name!r})")
        return ctx.consul.service(name)

    jenv.globals.update(env=env_fn, secret=secret_fn, key=key_fn, service=service_fn)
    return jenv


def _write_atomic(dest: Path, content: bytes, perms: int) -> None:
    """temp file, fsync, rename, fsync the directory: a reader sees the old file or the new one."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, perms)
    try:
        os.write(fd, content)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, perms)
    os.replace(tmp, dest)
    dfd = os.open(dest.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def render(tpl: Template, task_dir: Path, env: Mapping[str, str] | RenderContext) -> tuple[Path, str, bool]:
    """Render one template; return (path, content sha256, changed)."""
    ctx = env if isinstance(env, RenderContext) else RenderContext(env)
    if tpl.source:
        try:
            text = Path(tpl.source).read_text()
        except OSError as exc:
            raise TemplateRenderError(tpl.destination, f"source {tpl.source}: {exc.strerror}") from None
    else:
        text = tpl.data
    try:
        content = _environment(tpl, ctx).from_string(text).render()
    except TemplateError as exc:
        raise TemplateRenderError(tpl.destination, f"{type(exc).__name__}: {exc}") from None
    except AgentError as exc:
        if isinstance(exc, TemplateRenderError):
            raise
        raise TemplateRenderError(tpl.destination, str(exc)) from None
    dest = (task_dir / tpl.destination).resolve()
    if task_dir.resolve() not in dest.parents:
        raise TemplateRenderError(tpl.destination, "destination escapes the task directory")
    data = content.encode()
    digest = hashlib.sha256(data).hexdigest()
    if dest.exists() and hashlib.sha256(dest.read_bytes()).hexdigest() == digest:
        return dest, digest, False
    _write_atomic(dest, data, int(tpl.perms, 8))
    return dest, digest, True
