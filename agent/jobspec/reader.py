"""The typed readers of a jobspec body (HCL blocks or JSON objects, as agent.jobspec.tree gives them):
blocks and their paths, keys checked against Nomad's fields, strings, choices, whole numbers, bools,
durations, lists and maps, signal names. Each reader records a problem with its path and gives a
default, so that one pass reports every problem; the builder (agent.jobspec.build) and its block
readers stand on these."""

from __future__ import annotations

import difflib
import math
import re
import signal
from collections.abc import Iterator, Mapping
from fractions import Fraction
from typing import TypeVar

from agent.jobspec.durations import MAX_NS, duration_seconds, format_duration
from agent.jobspec.fieldclass import UNCLASSIFIED, field_refusal, server_side_warning, value_refusal
from agent.jobspec.fields import IMPLEMENTED, UNIMPLEMENTED, known
from agent.jobspec.limits import DEFAULT_LIMITS, Limits
from agent.jobspec.tree import Block, Body, Invalid, Report, join

_T = TypeVar("_T")
# Names end up in container names, label values and paths.
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# The part after the parent's ID in a child job's: structs.DispatchLaunchSuffix, PeriodicLaunchSuffix
CHILD_ID = re.compile(r"^(dispatch|periodic)-[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_INT = re.compile(r"^[+-]?\d{1,19}$")
_MAX_INT = (1 << 63) - 1  # Go's int64: larger numbers are out of range


def choices(options: tuple[str, ...]) -> str:
    return ", ".join(f'"{o}"' for o in options)


class BodyReader:
    """Reads one jobspec; problems and warnings go to `report`."""

    def __init__(self, report: Report, limits: Limits = DEFAULT_LIMITS) -> None:
        self.limits = limits
        self.report = report

    # --- shapes: blocks, keys, names -----------------------------------------------------------------------

    def _blocks(
        self, body: Body, key: str, path: str, *, labelled: bool = False, single: bool = False
    ) -> Iterator[tuple[str, Body, str]]:
        """(label or "", body, path) of each `key` block, from HCL blocks or JSON objects."""
        bpath = join(path, key)
        value = body.get(key)
        if value is None:
            return
        if isinstance(value, Invalid):
            self.report.error(bpath, value.reason)
            return
        found: list[tuple[str, Body, str]] = []
        items = value if isinstance(value, list) else [value]
        for i, item in enumerate(items):
            found.extend(self._block_item(item, i, key, bpath, labelled=labelled, single=single))
        if single and len(found) > 1:
            self.report.error(bpath, f"at most one {key} block")
            found = found[:1]
        yield from found

    def _single(self, body: Body, key: str, path: str) -> tuple[Body, str] | None:
        """The one `key` block of `body` (its body and path, its keys checked against Nomad's
        fields for `key`), or None when there is none; a second one is reported by `_blocks`."""
        blocks = list(self._blocks(body, key, path, single=True))
        if not blocks:
            return None
        _, block, bpath = blocks[0]
        self._keys(block, key, bpath)
        return block, bpath

    def _block_item(
        self, item: object, i: int, key: str, bpath: str, *, labelled: bool, single: bool
    ) -> list[tuple[str, Body, str]]:
        found: list[tuple[str, Body, str]] = []
        if isinstance(item, Block):
            if len(item.labels) != (1 if labelled else 0):
                want = "exactly one label" if labelled else "no labels"
                self.report.error(bpath, f"a {key} block takes {want}, not {len(item.labels)}")
                return found
            label = item.labels[0] if labelled else ""
            found.append((label, item.body, self._block_path(bpath, label, i, labelled, single)))
        elif isinstance(item, Mapping) and labelled:  # HCL JSON: {"<label>": {...} or [{...}, ...]}
            for label, inner in item.items():
                for one in inner if isinstance(inner, list) else [inner]:
                    if isinstance(one, Mapping):
                        found.append((str(label), one, f"{bpath}.{label}"))
                    else:
                        self.report.error(f"{bpath}.{label}", f"expected a {key} block (an object)")
        elif isinstance(item, Mapping):
            found.append(("", item, self._block_path(bpath, "", i, labelled, single)))
        elif isinstance(item, Invalid):
            self.report.error(bpath, item.reason)
        else:
            self.report.error(bpath, f"expected a {key} block, not {kind(item)}")
        return found

    @staticmethod
    def _block_path(bpath: str, label: str, index: int, labelled: bool, single: bool) -> str:
        if labelled:
            return f"{bpath}.{label}"
        return bpath if single else f"{bpath}[{index}]"

    def _keys(self, body: Body, context: str, path: str) -> None:
        """Warn about Nomad fields the agent does not implement; reject fields that are not Nomad's."""
        for key, value in body.items():
            if key in IMPLEMENTED[context]:
                continue
            if key in UNIMPLEMENTED[context]:
                if value is not None:
                    self._unimplemented(context, key, value, join(path, key))
                continue
            near = difflib.get_close_matches(key, sorted(known(context)), n=1) if len(key) < 64 else []
            hint = f' (did you mean "{near[0]}"?)' if near else ""
            if context.startswith("config."):
                reason = f"not a config field of Nomad's {context.removeprefix('config.')} driver{hint}"
            else:
                reason = f"not a Nomad jobspec field here{hint}"
            self.report.error(join(path, short(key)), reason)

    def _unimplemented(self, context: str, key: str, value: object, where: str) -> None:
        """A Nomad field the agent does not implement: a server-side one is warned about, saying so; one
        honoured by being this node's value is taken or refused; a client-side one is warned about as
        not implemented (agent.jobspec.fieldclass)."""
        if (why := field_refusal(context, key)) is not None:
            self.report.error(where, why)
            return
        refusal = value_refusal(context, key, value)
        if refusal is not None:
            if refusal:
                self.report.error(where, refusal)
            return
        warning = server_side_warning(context, key)
        if warning is None:
            self.report.error(where, UNCLASSIFIED)
        else:
            self.report.warn(where, warning)

    def _job_id(self, job_id: str, path: str) -> None:
        """A job's ID: a name, or a dispatched or periodic child's `<parent>/dispatch-...` (Nomad's
        DispatchedID, deriveJob), as a restore parses a child's stored source again."""
        parent, sep, child = job_id.partition("/")
        if sep and NAME.match(parent) and CHILD_ID.match(child):
            return
        self._name(job_id, path, "job ID")

    def _name(self, name: str, path: str, what: str) -> None:
        if not NAME.match(name):
            rule = 'at most 128 letters, digits, "_", "." or "-", starting with a letter or digit'
            self.report.error(path, f'{what} "{short(name)}" must be {rule}')

    # --- values ------------------------------------------------------------------------------------------

    def _get(self, body: Body, key: str, path: str, *, required: bool = False) -> object:
        """The value, or None when unset (after reporting it if required) or already reported invalid."""
        value = body.get(key)
        if isinstance(value, Invalid):
            self.report.error(join(path, key), value.reason)
            return None
        if value is None and required:
            self.report.error(join(path, key), "required")
        return value

    def _str(self, body: Body, key: str, path: str, default: str = "", *, required: bool = False) -> str:
        value = self._get(body, key, path, required=required)
        if value is None:
            return default
        text = scalar_text(value)
        if text is None:
            self.report.error(join(path, key), f"expected a string, not {kind(value)}")
            return default
        return text

    def _choice(
        self,
        body: Body,
        key: str,
        path: str,
        options: tuple[str, ...],
        default: str,
        *,
        required: bool = False,
        what: str = "",
    ) -> str:
        value = self._str(body, key, path, default, required=required)
        if value == default or value in options:
            return value
        self.report.error(join(path, key), f'"{short(value)}" is not one of {choices(options)}')
        return default

    def _int(
        self,
        body: Body,
        key: str,
        path: str,
        default: int,
        *,
        minimum: int | None = None,
        maximum: int | None = None,
        limit_name: str = "",
    ) -> int:
        """A whole number; `maximum` is the client's `limit_name` (the error names it)."""
        value = self._get(body, key, path)
        if value is None:
            return default
        number = whole(value)
        reason = ""
        if number is None:
            reason = f"expected a whole number, not {kind(value)}"
        elif abs(number) > _MAX_INT:
            reason = "the number is out of range"
        elif minimum is not None and number < minimum:
            reason = "must not be negative" if minimum == 0 else f"must be at least {minimum}"
        elif maximum is not None and number > maximum:
            reason = f"{key} {number} is more than the client's {limit_name} ({maximum})"
        if reason or number is None:
            self.report.error(join(path, key), reason)
            return default
        return number

    def _bool(self, body: Body, key: str, path: str, default: bool) -> bool:
        value = self._get(body, key, path)
        if value is None:
            return default
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):
            return value == "true"
        self.report.error(join(path, key), f"expected true or false, not {kind(value)}")
        return default

    def _duration(
        self,
        body: Body,
        key: str,
        path: str,
        default: float,
        *,
        required: bool = False,
        maximum: float | None = None,
        limit_name: str = "",
    ) -> float:
        """Seconds; `maximum` is the client's `limit_name` (the error names it)."""
        value = self._get(body, key, path, required=required)
        if value is None:
            return default
        if not isinstance(value, str):
            self.report.error(
                join(path, key), f'expected a duration like "20s" or "1h30m", not {kind(value)}'
            )
            return default
        try:
            seconds = duration_seconds(value)
        except ValueError as e:
            self.report.error(join(path, key), str(e))
            return default
        reason = ""
        if seconds < 0:
            reason = "must not be negative"
        elif maximum is not None and seconds > Fraction(maximum):
            reason = (
                f"{key} {short(value.strip())} is more than the client's {limit_name} "
                f"({format_duration(maximum)})"
            )
        elif seconds * 1_000_000_000 > MAX_NS:
            reason = f'duration "{short(value)}" is out of range (at most about 292 years)'
        if reason:
            self.report.error(join(path, key), reason)
            return default
        return float(seconds)

    def _str_list(self, body: Body, key: str, path: str) -> tuple[str, ...]:
        value = self._get(body, key, path)
        if value is None:
            return ()
        if not isinstance(value, list):
            self.report.error(join(path, key), f"expected a list of strings, not {kind(value)}")
            return ()
        out = []
        for i, item in enumerate(value):
            text = scalar_text(item)
            if isinstance(item, Invalid):
                self.report.error(f"{join(path, key)}[{i}]", item.reason)
            elif text is None:
                self.report.error(f"{join(path, key)}[{i}]", f"expected a string, not {kind(item)}")
            else:
                out.append(text)
        return tuple(out)

    def _mapping(self, body: Body, key: str, path: str) -> Mapping[str, object] | None:
        """A map given as an attribute (`env = {...}`, JSON) or as one block (`env {...}`)."""
        value = self._get(body, key, path)
        if value is None:
            return None
        if isinstance(value, list) and value and all(isinstance(v, Block) for v in value):
            if len(value) != 1:
                self.report.error(join(path, key), f"at most one {key} block")
            block = value[0]
            assert isinstance(block, Block)
            if block.labels:
                self.report.error(join(path, key), f"a {key} block takes no labels")
            return block.body
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], Mapping):
            return str_keys(value[0])  # Nomad's API JSON writes some blocks as a list of one object
        if isinstance(value, Mapping):
            return str_keys(value)
        what = "an empty list" if value == [] else kind(value)
        self.report.error(join(path, key), f"expected a {key} block or a map, not {what}")
        return None

    def _str_map(self, body: Body, key: str, path: str, *, env: bool = False) -> dict[str, str]:
        mapping = self._mapping(body, key, path)
        out: dict[str, str] = {}
        for name, value in (mapping or {}).items():
            vpath = join(join(path, key), short(name))
            if env and (not name or "=" in name or "\0" in name):
                self.report.error(vpath, "not a valid environment variable name")
            if isinstance(value, Invalid):
                self.report.error(vpath, value.reason)
                continue
            text = scalar_text(value)
            if text is None:
                self.report.error(vpath, f"expected a string, not {kind(value)}")
            else:
                out[name] = text
        return out

    def _plain(self, value: object, path: str) -> object:
        """A config value as plain data: blocks become lists of maps (as Nomad's API JSON writes them)."""
        if isinstance(value, Invalid):
            self.report.error(path, value.reason)
            return None
        if isinstance(value, Block):
            plain = {k: self._plain(v, join(path, k)) for k, v in value.body.items()}
            for label in reversed(value.labels):
                plain = {label: plain}
            return plain
        if isinstance(value, list):
            return [
                self._plain(v, path if isinstance(v, Block) else f"{path}[{i}]") for i, v in enumerate(value)
            ]
        if isinstance(value, Mapping):
            return {str(k): self._plain(v, join(path, str(k))) for k, v in value.items()}
        if isinstance(value, int | float) and not isinstance(value, bool) and scalar_text(value) is None:
            self.report.error(path, "the number is out of range")
            return None
        return value

    def _signal(self, body: Body, key: str, path: str, default: str) -> str:
        name = self._str(body, key, path, default)
        if name == default or name in signal.Signals.__members__:
            return name
        guess = name.upper() if name.upper().startswith("SIG") else f"SIG{name.upper()}"
        hint = f' (did you mean "{guess}"?)' if guess in signal.Signals.__members__ else ""
        self.report.error(join(path, key), f'"{name}" is not a signal name{hint}')
        return default


def scalar_text(value: object) -> str | None:
    """A string, or a number or bool written as one (HCL converts them so); None for anything else
    (a number out of range too)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) <= _MAX_INT else None
    if isinstance(value, float):
        return str(value) if math.isfinite(value) else None
    return None


def whole(value: object) -> int | None:
    """A whole number written as a number or a string, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    if isinstance(value, str) and _INT.match(value.strip()):
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return _MAX_INT + 1  # more digits than any int64: out of range, not parsed
    return None


def kind(value: object) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, int | float):
        return f"the number {value}" if scalar_text(value) is not None else "a number out of range"
    if isinstance(value, str):
        return f'"{value}"' if len(value) < 40 else "a string"
    kinds: tuple[tuple[type | tuple[type, ...], str], ...] = (
        (list, "a list"),
        ((Mapping, Block), "a block or map"),
        (Invalid, "an invalid value"),
    )
    return next((name for cls, name in kinds if isinstance(value, cls)), type(value).__name__)


def short(text: str) -> str:
    """A name or value as an error message quotes it: at most 64 characters."""
    return text if len(text) <= 64 else f"{text[:50]}... ({len(text)} characters)"


def str_keys(value: Mapping[_T, object]) -> dict[str, object]:
    return {str(k): v for k, v in value.items()}
