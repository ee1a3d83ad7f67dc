"""A task's `identity` blocks -> agent.structs.model.WorkloadIdentity, checked as Nomad's jobspec parser
and WorkloadIdentity.Validate/Warnings: the block without a name (or named "default") is the task's
default identity, for Nomad itself (its audience is always "nomadproject.io", it takes no ttl);
a name matches ^[a-zA-Z0-9-_]{1,128}$ and is used once; `change_signal` goes with `change_mode =
"signal"` and only with it; `filepath` needs `file = true` and stays inside the task's sandbox.
`extra_claims` names claims Nomad adds when the namespace offers them (its OptionalExtraClaims):
the "default" namespace, this agent's only one, offers none, so the JWT carries none, as Nomad's."""

from __future__ import annotations

import re
import signal
from typing import TYPE_CHECKING

from agent.jobspec.durations import format_duration
from agent.jobspec.templateblocks import task_relative
from agent.jobspec.tree import Body, join
from agent.structs.model import WorkloadIdentity

if TYPE_CHECKING:
    from agent.jobspec.reader import BodyReader

DEFAULT_NAME = "default"
DEFAULT_AUDIENCE = "nomadproject.io"  # Nomad's IdentityDefaultAud
CHANGE_MODES = ("noop", "restart", "signal")
_NAME = re.compile(r"^[a-zA-Z0-9-_]{1,128}$")


def read_identities(builder: BodyReader, body: Body, path: str) -> tuple[WorkloadIdentity, ...]:
    out: list[WorkloadIdentity] = []
    seen: dict[str, str] = {}
    for _, ib, ipath in builder._blocks(body, "identity", path):
        builder._keys(ib, "identity", ipath)
        wid = _identity(builder, ib, ipath)
        if wid is None:
            continue
        if wid.name in seen:
            twice = f'identity "{wid.name}" is given twice (also at {seen[wid.name]})'
            builder.report.error(join(ipath, "name"), twice)
            continue
        seen[wid.name] = ipath
        out.append(wid)
    out.sort(key=lambda w: w.name != DEFAULT_NAME)  # the default one first, as Nomad's Task.Identity
    return tuple(out)


def _identity(builder: BodyReader, body: Body, path: str) -> WorkloadIdentity | None:
    name = builder._str(body, "name", path) or DEFAULT_NAME
    ok = True
    if not _NAME.match(name):
        builder.report.error(join(path, "name"), f'invalid name "{name}": it must match {_NAME.pattern}')
        ok = False
    audience = builder._str_list(body, "aud", path)
    for i, aud in enumerate(audience):
        if not aud:
            builder.report.error(f"{join(path, 'aud')}[{i}]", "an empty string is an invalid audience")
            ok = False
    change = _change(builder, body, path)
    ttl = builder._duration(body, "ttl", path, 0.0)
    default = name == DEFAULT_NAME
    if ttl and default:
        builder.report.error(join(path, "ttl"), "a ttl for the default identity is not supported (as Nomad)")
        ok = False
    env = builder._bool(body, "env", path, False)
    file = builder._bool(body, "file", path, False)
    filepath = _filepath(builder, body, path, file)
    # Nomad adds a named extra claim only when the job's namespace lists it among its optional extra
    # claims; this agent's only namespace, "default", lists none (as a Nomad default namespace)
    builder._str_list(body, "extra_claims", path)
    if not ok or change is None or filepath is None:
        return None
    if default:
        audience = (DEFAULT_AUDIENCE,)  # Nomad's Canonicalize: the default identity is Nomad's own
    else:
        _warnings(builder, path, audience, ttl)
        if env and change[0] != "restart":
            builder.report.warn(
                join(path, "env"),
                'env = true without change_mode = "restart": the task keeps the token it started with',
            )
    return WorkloadIdentity(name, audience, env, file, filepath, ttl, *change)


def _change(builder: BodyReader, body: Body, path: str) -> tuple[str, str] | None:
    """(change_mode, change_signal), or None when they do not go together."""
    mode = builder._choice(body, "change_mode", path, CHANGE_MODES, "noop")
    sig = builder._str(body, "change_signal", path).upper()  # Nomad's Canonicalize
    where = join(path, "change_signal")
    if sig and sig not in signal.Signals.__members__:
        builder.report.error(where, f'"{sig}" is not a signal name')
        return None
    if mode == "signal" and not sig:
        builder.report.error(where, 'required with change_mode = "signal"')
        return None
    if sig and mode != "signal":
        builder.report.error(where, 'only with change_mode = "signal"')
        return None
    return mode, sig


def _filepath(builder: BodyReader, body: Body, path: str, file: bool) -> str | None:
    """`filepath` ("": the default file), or None when it is refused."""
    filepath = builder._str(body, "filepath", path)
    if filepath and not file:
        builder.report.error(join(path, "filepath"), "needs file = true")
        return None
    if filepath:
        _, problem = task_relative(filepath)
        if problem:
            builder.report.error(join(path, "filepath"), f'"{filepath}" {problem}')
            return None
    return filepath


def _warnings(builder: BodyReader, path: str, audience: tuple[str, ...], ttl: float) -> None:
    """Nomad's WorkloadIdentity.Warnings, for a named identity."""
    if not audience:
        builder.report.warn(join(path, "aud"), "an identity without an audience is insecure")
    elif len(audience) > 1:
        builder.report.warn(join(path, "aud"), "one audience per identity is more secure than several")
    if not ttl:  # Nomad warns and signs it without exp; the agent gives it the client's default
        default = format_duration(builder.limits.identity_ttl)
        builder.report.warn(
            join(path, "ttl"),
            "an identity without an expiration (ttl) is insecure: its tokens expire after the client's "
            f"identity_default_ttl ({default}) and are signed again before",
        )
