"""A task's `artifact` blocks -> agent.structs.model.Artifact, checked as far as can be without the task's
variables: a source (http or https; a go-getter forced getter such as "git::" is refused), a mode,
a destination inside the task's sandbox (its dir or the alloc's shared alloc/ dir; an absolute one
joined onto the task dir, as Nomad's client takes it), a checksum of a
known type, an archive option the getter knows. Defaults as Nomad's api.TaskArtifact.Canonicalize:
mode "any"; the destination "local/", or "local/<file name>" in mode "file"."""

from __future__ import annotations

import posixpath
import urllib.parse
from typing import TYPE_CHECKING

from agent.getter.plan import MODES, ArtifactError, archive_kind, parse_checksum
from agent.jobspec.templateblocks import task_relative
from agent.jobspec.tree import Body, join
from agent.structs.model import Artifact

if TYPE_CHECKING:
    from agent.jobspec.reader import BodyReader

MAX_ARTIFACTS = 32  # of one task: each a download before its first start


def read_artifacts(builder: BodyReader, body: Body, path: str) -> tuple[Artifact, ...]:
    out: list[Artifact] = []
    for _, ab, apath in builder._blocks(body, "artifact", path):
        builder._keys(ab, "artifact", apath)
        artifact = _artifact(builder, ab, apath)
        if artifact is not None:
            out.append(artifact)
    if len(out) > MAX_ARTIFACTS:
        builder.report.error(path, f"{len(out)} artifacts in one task, more than {MAX_ARTIFACTS}")
    return tuple(out)


def _artifact(builder: BodyReader, body: Body, path: str) -> Artifact | None:
    source = builder._str(body, "source", path, required=True)
    mode = builder._choice(body, "mode", path, MODES, "any")
    options = builder._str_map(body, "options", path)
    headers = builder._str_map(body, "headers", path)
    chown = builder._bool(body, "chown", path, False)
    insecure = builder._bool(body, "insecure", path, False)  # go-getter's: https without TLS checks
    if not source:
        return None
    ok = _source_ok(builder, source, join(path, "source"))
    where = join(path, "options")
    if "checksum" in options and "${" not in options["checksum"]:
        try:
            parse_checksum(options["checksum"])
        except ArtifactError as exc:
            builder.report.error(join(where, "checksum"), str(exc))
            ok = False
    if "archive" in options:
        try:
            archive_kind("", options["archive"])
        except ArtifactError as exc:
            builder.report.error(join(where, "archive"), str(exc))
            ok = False
    default = "local/"
    if mode == "file":
        name = posixpath.basename(urllib.parse.urlsplit(source).path) or "artifact"
        default = posixpath.join("local", name)
    dest = builder._str(body, "destination", path, default)
    # Nomad's client joins an absolute destination ("/local/x", "/tmp/x") onto the task dir
    # (TaskEnv.ClientPath); the getter does the same once the task's variables are known
    normal, problem = task_relative("." + dest if dest.startswith("/") else dest)
    if problem and dest.startswith("/"):
        problem = "escapes the alloc directory, joined onto the task dir as Nomad's client joins it"
    if problem and "${" not in normal:  # another variable: checked by the getter when it writes
        builder.report.error(join(path, "destination"), f'"{dest}" {problem}')
        ok = False
    if not ok:
        return None
    return Artifact(source, dest, mode, options, headers, chown, insecure)


def _source_ok(builder: BodyReader, source: str, where: str) -> bool:
    if "::" in source.split("://", 1)[0]:
        forced = source.split("::", 1)[0]
        builder.report.error(
            where, f'the "{forced}::" getter is not supported by fieldlab-agent (http and https are)'
        )
        return False
    if "${" in source.split("://", 1)[0]:
        return True  # the scheme comes from the task's variables: checked when it is fetched
    scheme = urllib.parse.urlsplit(source).scheme
    if scheme not in ("http", "https"):
        shown = f'"{scheme}"' if scheme else "a source without a scheme"
        builder.report.error(where, f"{shown} is not supported by fieldlab-agent: give an http or https URL")
        return False
    return True
