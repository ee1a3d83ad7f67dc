"""Template rendering into a task's directory: Jinja2 in a sandbox with strict undefined, written
atomically (temp file, fsync, rename) with the template's perms.

This is the first stage: static data and `env(name)`. Vault/Consul functions and change_mode
handling across restarts are the templates issue's work; until then a template that calls them
fails to render with a clear event rather than rendering something empty.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path

from jinja2 import StrictUndefined, TemplateError
from jinja2.sandbox import SandboxedEnvironment

from agent.errors import AgentError
from agent.model import Template


class TemplateRenderError(AgentError):
    def __init__(self, destination: str, reason: str) -> None:
        self.destination, self.reason = destination, reason
        super().__init__(f"template {destination}: {reason}")


def render(tpl: Template, task_dir: Path, env: Mapping[str, str]) -> tuple[Path, str, bool]:
    """Render one template; return (path, content sha256, changed)."""
    if tpl.source:
        try:
            text = Path(tpl.source).read_text()
        except OSError as exc:
            raise TemplateRenderError(tpl.destination, f"source {tpl.source}: {exc.strerror}") from None
    else:
        text = tpl.data
    jenv = SandboxedEnvironment(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)

    def env_fn(name: str) -> str:
        if name not in env:
            raise TemplateRenderError(tpl.destination, f"env({name!r}): not set for this task")
        return env[name]

    jenv.globals["env"] = env_fn
    try:
        content = jenv.from_string(text).render()
    except TemplateError as exc:
        raise TemplateRenderError(tpl.destination, f"{type(exc).__name__}: {exc}") from None
    dest = (task_dir / tpl.destination).resolve()
    if task_dir.resolve() not in dest.parents:
        raise TemplateRenderError(tpl.destination, "destination escapes the task directory")
    digest = hashlib.sha256(content.encode()).hexdigest()
    if dest.exists() and hashlib.sha256(dest.read_bytes()).hexdigest() == digest:
        return dest, digest, False
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, int(tpl.perms, 8))
    try:
        os.write(fd, content.encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, int(tpl.perms, 8))
    os.replace(tmp, dest)
    dfd = os.open(dest.parent, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    return dest, digest, True
