"""A task's `template` blocks, read as Nomad reads them: a destination inside the task dir (local/,
secrets/, alloc/), delimiters, change_mode and its signal or script, perms and owner (uid, gid), env
templates, wait, splay and once."""

from __future__ import annotations

import posixpath
import re

from agent.jobspec.reader import BodyReader
from agent.jobspec.tree import Body, join
from agent.structs.model import ChangeScript, Template

CHANGE_MODES = ("noop", "signal", "restart", "script")
TEMPLATE_DIRS = ("local", "secrets", "alloc")  # alloc/: the alloc's shared dir, as Nomad's sandbox
_MAX_OWNER_ID = 2**32 - 2  # (uid_t)-1 means "unchanged" to chown(2)
_TASK_DIR_VARS = {
    "${NOMAD_TASK_DIR}": "local",
    "${NOMAD_SECRETS_DIR}": "secrets",
    "${NOMAD_ALLOC_DIR}": "alloc",
}


def task_relative(raw: str) -> tuple[str, str]:
    """`raw`, a path relative to the task dir (`${NOMAD_TASK_DIR}`, `${NOMAD_SECRETS_DIR}` and
    `${NOMAD_ALLOC_DIR}` read as local/, secrets/ and alloc/), as a normal path below the task dir or
    the shared alloc/ dir, and what is wrong with it ("" when nothing). Refused as Nomad's sandbox
    refuses what leaves the alloc dir: an absolute path, a `..` out of the task dir other than into
    the shared alloc/ dir (this sandbox does not reach the other tasks' dirs). Lexical: the writers
    (agent.allocdir.sandbox) follow no link."""
    text = raw
    for var, directory in _TASK_DIR_VARS.items():
        if text.startswith(var):
            text = directory + text[len(var) :]
    normal = posixpath.normpath(text) if text else "."
    parts = normal.split("/")
    if parts[:2] == ["..", "alloc"]:
        normal, parts = "/".join(parts[1:]), parts[1:]
    if text.startswith("/"):
        return normal, "is an absolute path: give one relative to the task dir"
    if parts[0] == "..":
        return normal, 'leaves the task dir: ".." leads only into the shared alloc/ dir (../alloc/...)'
    return normal, ""


class TemplateBlocks(BodyReader):
    def _templates(self, body: Body, path: str) -> tuple[Template, ...]:
        templates = []
        destinations: dict[str, str] = {}
        for _, tb, tpath in self._blocks(body, "template", path):
            template = self._template(tb, tpath)
            if template.destination in destinations:
                self.report.error(
                    join(tpath, "destination"),
                    f'"{template.destination}" is also written by {destinations[template.destination]}',
                )
            elif template.destination:
                destinations[template.destination] = tpath
            templates.append(template)
        if len(templates) > self.limits.max_templates:  # each one rendered, held, stored per task
            self.report.error(
                path,
                f"{len(templates)} templates in one task, more than the {self.limits.max_templates} "
                "a task may have (client config template_max_per_task)",
            )
        return tuple(templates)

    def _template(self, body: Body, path: str) -> Template:
        self._keys(body, "template", path)
        data = self._str(body, "data", path)
        source = self._str(body, "source", path)
        if "data" in body and "source" in body and body["data"] is not None and body["source"] is not None:
            self.report.error(path, 'set either "data" or "source", not both')
        elif body.get("data") is None and body.get("source") is None:
            self.report.error(path, 'needs "data" or "source"')
        destination = self._destination(body, path)
        mode = self._choice(body, "change_mode", path, CHANGE_MODES, "restart")
        change_signal = self._signal(body, "change_signal", path, "")
        if mode == "signal" and not change_signal and body.get("change_signal") is None:
            self.report.error(join(path, "change_signal"), 'required with change_mode "signal"')
        elif change_signal and mode != "signal":
            self.report.warn(
                join(path, "change_signal"), f'only used with change_mode "signal", not "{mode}"'
            )
        change_script = self._change_script(body, path)
        if mode == "script" and change_script is None and body.get("change_script") is None:
            self.report.error(join(path, "change_script"), 'required with change_mode "script"')
        elif change_script is not None and mode != "script":
            self.report.warn(
                join(path, "change_script"), f'only used with change_mode "script", not "{mode}"'
            )
        wait_min, wait_max = 0.0, 0.0
        for _, wb, wpath in self._blocks(body, "wait", path, single=True):
            self._keys(wb, "wait", wpath)
            wait_min = self._duration(wb, "min", wpath, 0.0)
            wait_max = self._duration(wb, "max", wpath, 0.0)
            if "max" in wb and wait_max < wait_min:
                self.report.error(join(wpath, "max"), f"must not be less than min ({wait_min:g}s)")
        return Template(
            destination=destination,
            data=data,
            source=source,
            change_mode=mode,
            change_signal=change_signal,
            change_script=change_script,
            perms=self._perms(body, path),
            splay=self._duration(body, "splay", path, 5.0),
            wait_min=wait_min,
            wait_max=wait_max,
            error_on_missing_key=self._bool(body, "error_on_missing_key", path, False),
            env=self._bool(body, "env", path, False),
            left_delimiter=self._delimiter(body, "left_delimiter", path, "{{"),
            right_delimiter=self._delimiter(body, "right_delimiter", path, "}}"),
            once=self._bool(body, "once", path, False),
            uid=self._owner_id(body, "uid", path),
            gid=self._owner_id(body, "gid", path),
        )

    def _owner_id(self, body: Body, key: str, path: str) -> int | None:
        """A template's `uid` or `gid` (Nomad's Uid, Gid): the rendered file's owner, set on the file
        the agent wrote inside the task dir (by its descriptor, agent.allocdir.sandbox.write_file); None when
        absent or negative, as Nomad's template manager leaves the owner alone then (the agent's)."""
        number = self._int(body, key, path, -1)
        if number > _MAX_OWNER_ID:
            self.report.error(
                join(path, key), f"{number} is not a {key} a file can have (at most {_MAX_OWNER_ID})"
            )
            return None
        return number if number >= 0 else None

    def _delimiter(self, body: Body, key: str, path: str, default: str) -> str:
        text = self._str(body, key, path, default)
        if not text or len(text) > 16 or any(c.isspace() for c in text):
            self.report.error(join(path, key), "must be 1 to 16 characters, without spaces")
            return default
        return text

    def _destination(self, body: Body, path: str) -> str:
        """Where a template is written: as Nomad, any file inside the task dir (`template.out`,
        `usr/local/bin/app.sh`, `local/...`, `secrets/...`) or inside the alloc's shared dir
        (`alloc/...` or `../alloc/...`), once `${NOMAD_*_DIR}` is read. Refused as Nomad refuses what
        leaves the alloc dir: an absolute path, a `..` out of the task dir other than into the shared
        alloc/ dir (this sandbox does not reach the other tasks' dirs), a path naming a dir itself."""
        raw = self._str(body, "destination", path, required=True)
        if not raw:
            return ""
        normal, problem = task_relative(raw)
        if not problem and (normal in (".", *TEMPLATE_DIRS) or raw.endswith("/")):
            problem = "names a directory: give a file in it"
        if problem:
            self.report.error(
                join(path, "destination"),
                f'"{raw}" {problem} (a file inside the task dir, e.g. local/..., secrets/..., or in the '
                "alloc's shared alloc/ dir)",
            )
            return ""
        return normal

    def _change_script(self, body: Body, path: str) -> ChangeScript | None:
        found = self._single(body, "change_script", path)
        if found is None:
            return None
        sb, spath = found
        command = self._str(sb, "command", spath, required=True)
        if not command.strip() and "command" in sb:
            self.report.error(join(spath, "command"), "must not be empty")
        return ChangeScript(
            command=command,
            args=self._str_list(sb, "args", spath),
            timeout=self._duration(sb, "timeout", spath, 5.0),
            fail_on_error=self._bool(sb, "fail_on_error", spath, False),
            run_on_first_render=self._bool(sb, "run_on_first_render", spath, False),
        )

    def _perms(self, body: Body, path: str) -> str:
        text = self._str(body, "perms", path, "0644")
        if not re.fullmatch(r"[0-7]{1,4}", text):
            self.report.error(join(path, "perms"), f'"{text}" is not octal file permissions like "0644"')
            return "0644"
        return f"{int(text, 8):04o}"
