"""Templates with `env = true`: the rendered file is read back as KEY=VALUE lines into the task's
environment when the task starts, as Nomad does (its format is godotenv's: `#` comments, blank lines,
an optional `export `, values in single or double quotes; in double quotes \\n, \\t, \\" and \\\\ are
escapes). Lines that are not KEY=VALUE are skipped and named, never guessed at."""

from __future__ import annotations

import re

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\"}


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1]
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), "\\" + m.group(1)), value[1:-1])
    return value.split(" #", 1)[0].rstrip()  # an unquoted value ends at an inline comment


def parse_env_file(text: str) -> tuple[dict[str, str], list[int]]:
    """The variables of an env file, and the numbers of the lines that were not KEY=VALUE."""
    out: dict[str, str] = {}
    bad: list[int] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].lstrip()
        key, sep, value = line.partition("=")
        key = key.strip()
        if not sep or not _KEY.match(key):
            bad.append(number)
            continue
        out[key] = _unquote(value.strip())
    return out, bad
