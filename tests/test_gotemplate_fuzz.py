"""Property tests of agent.gotemplate: whatever the template text and the data, `parse` and
`execute` either return a string or raise a TemplateError (with a sane position), and finish within
the step budget."""

from __future__ import annotations

import datetime as dt
import os
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.gotemplate import TemplateError, consul_functions, parse
from agent.gotemplate.builtins import BUILTIN_NAMES
from agent.gotemplate.printf import sprintf
from tests.gotemplate_cases import FakeSource

FUNCS = consul_functions(FakeSource())
NAMES = sorted(FUNCS.keys() | BUILTIN_NAMES)
KEYWORDS = ["if", "else", "end", "range", "with", "define", "template", "block", "break", "continue"]
LITERALS = ['"a"', '"x=y"', '"kv/data/x"', "`raw\n`", "'c'", "0", "1", "-3", "2.5", "1e300", "0x1F", "true"]
LITERALS += ["false", "nil", '"%d %s %v %q %x %5.2f %-3s %!"', '"\\n"', '"service/redis"', '"web"', "3"]
FIELDS = [".", ".a", ".b", ".l", ".m.k", ".a.b.c", "$", "$x", "$.l", "$i", "$v"]
METHODS = ["scratch.Set", "scratch.SetX", "scratch.Get", "scratch.Key", "scratch.MapSet", "scratch.MapSetX"]
METHODS += ["scratch.MapValues", "scratch.Nope", "(scratch).Get", "$x.Get", ".Set"]
PUNCT = [
    "{{",
    "}}",
    "{{- ",
    " -}}",
    "{{/*",
    "*/}}",
    "|",
    "(",
    ")",
    ":=",
    "=",
    ",",
    " ",
    "\n",
    "$x :=",
    "$i, $v :=",
]
FRAGMENTS = st.sampled_from(NAMES + KEYWORDS + LITERALS + FIELDS + METHODS + PUNCT)
GARBAGE = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=3)

SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
DATA = st.recursive(
    SCALARS,
    lambda kids: (
        st.lists(kids, max_size=4)
        | st.dictionaries(st.sampled_from(["a", "b", "k", "l", "m"]), kids, max_size=4)
    ),
    max_leaves=12,
)

SETTINGS = settings(
    max_examples=int(os.environ.get("GOTEMPLATE_FUZZ_EXAMPLES", "250")),  # raise it for a longer hunt
    deadline=dt.timedelta(seconds=2),
    suppress_health_check=[HealthCheck.too_slow],
)
POSITION = re.compile(r"^t:(\d+):(\d+): .+", re.DOTALL)


def render(
    text: str, data: Any, missing_key_error: bool = False, delims: tuple[str, str] = ("{{", "}}")
) -> None:
    try:
        tpl = parse(text, name="t", left_delim=delims[0], right_delim=delims[1])
        out = tpl.execute(data, funcs=FUNCS, missing_key_error=missing_key_error, max_steps=20_000)
    except TemplateError as exc:
        match = POSITION.match(str(exc))
        assert match, str(exc)
        line, col = int(match[1]), int(match[2])
        assert 1 <= line <= text.count("\n") + 1
        assert 1 <= col <= len(text.split("\n")[line - 1]) + 1
        assert exc.reason
        return
    assert isinstance(out, str)


@SETTINGS
@given(st.lists(FRAGMENTS | GARBAGE, max_size=30), DATA, st.booleans())
def test_fragment_soup_raises_only_template_errors(parts: list[str], data: Any, strict: bool) -> None:
    render("".join(parts), {"a": data, "l": [1, "x", None], "m": {"k": data}}, strict)


@SETTINGS
@given(st.lists(FRAGMENTS, max_size=20), DATA)
def test_custom_delimiters(parts: list[str], data: Any) -> None:
    text = "".join(parts).replace("{{", "[[").replace("}}", "]]")
    render(text, data, delims=("[[", "]]"))


def _operand(depth: int) -> st.SearchStrategy[str]:
    base = st.sampled_from(LITERALS + FIELDS[:7])
    if depth <= 0:
        return base
    return base | _pipeline(depth - 1).map(lambda p: f"({p})")


def _command(depth: int) -> st.SearchStrategy[str]:
    call = st.tuples(st.sampled_from(NAMES + METHODS), st.lists(_operand(depth), max_size=3)).map(
        lambda t: " ".join([t[0], *t[1]])
    )
    return call | _operand(depth)


def _pipeline(depth: int) -> st.SearchStrategy[str]:
    return st.lists(_command(depth), min_size=1, max_size=3).map(" | ".join)


def _action(depth: int) -> st.SearchStrategy[str]:
    pipe = _pipeline(1)
    simple = pipe.map(lambda p: "{{ " + p + " }}") | st.sampled_from(["x", "\n", " ", "{{ $x := 1 }}"])
    if depth <= 0:
        return simple
    body = st.lists(_action(depth - 1), max_size=3).map("".join)
    control = st.tuples(st.sampled_from(["if", "with", "range", "range $i, $v :="]), pipe, body, body).map(
        lambda t: "{{ %s %s }}%s{{ else }}%s{{ end }}" % t  # noqa: UP031 - a template with many braces
    )
    return simple | control


@SETTINGS
@given(st.lists(_action(3), max_size=6).map("".join), DATA, st.booleans())
def test_grammar_templates_raise_only_template_errors(text: str, data: Any, strict: bool) -> None:
    render(text, {"a": data, "b": [data, 1], "l": [1, 2, 3], "m": {"k": data}}, strict)


@SETTINGS
@given(st.text(max_size=40).filter(lambda s: "{{" not in s))
def test_text_without_actions_is_copied(text: str) -> None:
    assert parse(text).execute() == text


@SETTINGS
@given(
    st.text(alphabet="%-+# 0123456789.*[]vsdqxXobcUeEfFgGtTz%!", max_size=12), st.lists(SCALARS, max_size=4)
)
def test_printf_never_fails(fmt: str, args: list[Any]) -> None:
    out = parse("{{ call .p .f .args }}").execute({"p": _printf_args, "f": fmt, "args": args})
    assert isinstance(out, str)


def _printf_args(fmt: str, args: list[Any]) -> str:
    return sprintf(fmt, args)


@SETTINGS
@given(DATA)
def test_data_prints_and_encodes(data: Any) -> None:
    for text in (
        "{{ . }}",
        '{{ printf "%v %+v %#v %s %d %q %x" . . . . . . . }}',
        "{{ toJSON . }}",
        "{{ toYAML . }}",
    ):
        render(text, data)
