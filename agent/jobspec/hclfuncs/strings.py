"""String functions, Go's regular expressions (agent.gocompat.goregex) and Go's format verbs (format,
formatlist)."""

from __future__ import annotations

import json
import re

from agent.gocompat import goregex
from agent.jobspec.hclfuncs.encoding import json_encode
from agent.jobspec.hclfuncs.registry import arg_int, arg_list, arg_str, function
from agent.jobspec.hclvalues import (
    MAX_VALUE_SIZE,
    MAX_WIDTH,
    Context,
    EvalError,
    format_number,
    to_bool,
    to_num,
    to_str,
)

# strings


@function("chomp", 1, 1, "removes newline characters at the end of a string")
def _chomp(ctx: Context, a: list[object]) -> object:
    return re.sub(r"(?:\r\n|\r|\n)+\Z", "", arg_str(a, 0))


@function("format", 1, None, "formats values by a printf-style spec (%s %d %f %q %v %t %x %e %g %%)")
def _format(ctx: Context, a: list[object]) -> object:
    return go_format(arg_str(a, 0), a[1:])


@function("formatlist", 1, None, "format() over lists in parallel, giving a list")
def _formatlist(ctx: Context, a: list[object]) -> object:
    spec = arg_str(a, 0)
    lengths = {len(x) for x in a[1:] if isinstance(x, list)}
    if len(lengths) > 1:
        raise EvalError("formatlist's list arguments must all have the same length")
    if not lengths:
        return [go_format(spec, a[1:])]
    (n,) = lengths
    ctx.budget.tick(n)
    return [go_format(spec, [x[i] if isinstance(x, list) else x for x in a[1:]]) for i in range(n)]


@function("indent", 2, 2, "adds spaces at the start of every line but the first")
def _indent(ctx: Context, a: list[object]) -> object:
    n, text = arg_int(a, 0), arg_str(a, 1)
    if n < 0 or n * (text.count("\n") + 1) > MAX_VALUE_SIZE:
        raise EvalError("indent: the result would be too large")
    return text.replace("\n", "\n" + " " * n)


@function("join", 2, None, "joins the strings of lists with a separator")
def _join(ctx: Context, a: list[object]) -> object:
    sep = arg_str(a, 0)
    items = [item for i in range(1, len(a)) for item in arg_list(a, i)]
    if len(sep) * len(items) > MAX_VALUE_SIZE:
        raise EvalError("join: the result would be too large")
    return sep.join(to_str(x, "list item") for x in items)


@function("lower", 1, 1, "converts letters to lower case")
def _lower(ctx: Context, a: list[object]) -> object:
    return arg_str(a, 0).lower()


@function("upper", 1, 1, "converts letters to upper case")
def _upper(ctx: Context, a: list[object]) -> object:
    return arg_str(a, 0).upper()


@function("replace", 3, 3, "replaces a substring (or a /regex/, with $1 references) by another")
def _replace(ctx: Context, a: list[object]) -> object:
    text, sub, repl = arg_str(a, 0), arg_str(a, 1), arg_str(a, 2)
    if len(sub) > 1 and sub.startswith("/") and sub.endswith("/"):
        return _replace_all("replace", _regex(sub[1:-1]), text, repl)
    count = len(text) + 1 if sub == "" else text.count(sub)
    if len(text) + count * (len(repl) - len(sub)) > MAX_VALUE_SIZE:
        raise EvalError("replace: the result would be too large")
    return text.replace(sub, repl)


# Regular expressions are Go's (RE2: linear in the input, no backreferences or lookarounds), as cty's
# regex, regexall, regex_replace and replace(s, "/re/", r) run them in Nomad: agent.gocompat.goregex.


def _regex(pattern: str) -> goregex.Regexp:
    try:
        return goregex.compile(pattern)
    except goregex.GoRegexError as e:
        raise EvalError(str(e)) from None


def _replace_all(fn: str, pattern: goregex.Regexp, text: str, repl: str) -> str:
    """Go's ReplaceAllString: $1, ${1}, $name, ${name} and $$ in repl."""
    try:
        return pattern.replace_all(text, repl, max_size=MAX_VALUE_SIZE)
    except goregex.ResultTooLarge:
        raise EvalError(f"{fn}: the result would be too large") from None


def _result_kind(pattern: goregex.Regexp) -> str:
    """What regex() gives for a pattern (cty): the match ("string"), its groups in order ("tuple") or
    its named groups ("object"); named and unnamed groups cannot be mixed."""
    names = pattern.names[1:]
    if not names:
        return "string"
    named = sum(1 for name in names if name)
    if named and named != len(names):
        raise EvalError(
            f"invalid regexp pattern {pattern.pattern!r}: cannot mix named and unnamed capture groups"
        )
    return "object" if named else "tuple"


def _match_value(pattern: goregex.Regexp, kind: str, groups: list[str | None]) -> object:
    """A group that took no part in the match is null, as in cty."""
    if kind == "string":
        return groups[0]
    if kind == "tuple":
        return groups[1:]
    return {name: value for name, value in zip(pattern.names[1:], groups[1:], strict=True)}


@function("regex", 2, 2, "the first match of a regular expression: the match, its groups or named groups")
def _regex_fn(ctx: Context, a: list[object]) -> object:
    pattern = _regex(arg_str(a, 0))
    kind = _result_kind(pattern)
    groups = pattern.find_submatch(arg_str(a, 1))
    if groups is None:
        raise EvalError("regex: the pattern did not match any part of the given string")
    return _match_value(pattern, kind, groups)


@function("regexall", 2, 2, "every match of a regular expression, as regex() gives them")
def _regexall(ctx: Context, a: list[object]) -> object:
    pattern = _regex(arg_str(a, 0))
    kind = _result_kind(pattern)
    return [_match_value(pattern, kind, groups) for groups in pattern.find_all_submatch(arg_str(a, 1))]


@function("regex_replace", 3, 3, "replaces every match of a regular expression (with $1 references)")
def _regex_replace(ctx: Context, a: list[object]) -> object:
    pattern, text, repl = _regex(arg_str(a, 1)), arg_str(a, 0), arg_str(a, 2)
    return _replace_all("regex_replace", pattern, text, repl)


@function("strlen", 1, 1, "the number of characters of a string")
def _strlen(ctx: Context, a: list[object]) -> object:
    return len(arg_str(a, 0))


@function("split", 2, 2, "splits a string at each separator")
def _split(ctx: Context, a: list[object]) -> object:
    sep, text = arg_str(a, 0), arg_str(a, 1)
    return list(text) if sep == "" else text.split(sep)


@function("strrev", 1, 1, "reverses a string")
def _strrev(ctx: Context, a: list[object]) -> object:
    return arg_str(a, 0)[::-1]


@function("substr", 3, 3, "a substring by offset (negative: from the end) and length (-1: to the end)")
def _substr(ctx: Context, a: list[object]) -> object:
    text, offset, length = arg_str(a, 0), arg_int(a, 1), arg_int(a, 2)
    if offset < 0:
        offset = max(len(text) + offset, 0)
    if offset > len(text):
        raise EvalError("substr: the offset is beyond the end of the string")
    if length < 0:
        return text[offset:]
    return text[offset : offset + length]


@function("title", 1, 1, "capitalises the first letter of each word")
def _title(ctx: Context, a: list[object]) -> object:
    return re.sub(r"(?:^|(?<=[^\w']))(\w)", lambda m: m.group(1).upper(), arg_str(a, 0))


@function("trim", 2, 2, "removes the given characters from both ends")
def _trim(ctx: Context, a: list[object]) -> object:
    return arg_str(a, 0).strip(arg_str(a, 1))


@function("trimprefix", 2, 2, "removes a prefix")
def _trimprefix(ctx: Context, a: list[object]) -> object:
    return arg_str(a, 0).removeprefix(arg_str(a, 1))


@function("trimsuffix", 2, 2, "removes a suffix")
def _trimsuffix(ctx: Context, a: list[object]) -> object:
    return arg_str(a, 0).removesuffix(arg_str(a, 1))


@function("trimspace", 1, 1, "removes white space at both ends")
def _trimspace(ctx: Context, a: list[object]) -> object:
    return arg_str(a, 0).strip()


# --- Go's format verbs ---------------------------------------------------------------------------------

_VERB = re.compile(r"%([-+# 0]*)(?:\[(\d+)\])?(\d+)?(?:\.(\d*))?(?:\[(\d+)\])?([a-zA-Z%])|%")


def go_format(spec: str, args: list[object]) -> str:
    out: list[str] = []
    pos = 0
    argi = 0
    for m in _VERB.finditer(spec):
        out.append(spec[pos : m.start()])
        pos = m.end()
        flags, index1, width, precision, index2, verb = m.groups()
        if verb is None:
            raise EvalError(
                f"format: a lone % at offset {m.start()} in {spec!r} (write %% for a percent sign)"
            )
        if verb == "%":
            out.append("%")
            continue
        index = index1 or index2
        if index is not None:
            argi = int(index) - 1
        if not 0 <= argi < len(args):
            raise EvalError(f"format: not enough arguments for {m.group()!r}")
        value = args[argi]
        argi += 1
        if (width and int(width) > MAX_WIDTH) or (precision and int(precision) > MAX_WIDTH):
            raise EvalError("format: width or precision too large")
        out.append(_format_one(value, flags, width, precision, verb))
    out.append(spec[pos:])
    if argi < len(args) and not any(m.group(2) or m.group(5) for m in _VERB.finditer(spec)):
        raise EvalError(f"format: too many arguments ({len(args)}) for the spec")
    return "".join(out)


def _format_one(value: object, flags: str, width: str | None, precision: str | None, verb: str) -> str:
    align = "<" if "-" in flags else ">"
    zero = "0" in flags and "-" not in flags
    prec = f".{precision or 0}" if precision is not None else ""
    if verb in "vsq":
        if verb == "v" and ("#" in flags or isinstance(value, list | dict)):
            text = json_encode(value)
        elif verb == "v" and value is None:
            text = "null"
        else:
            text = to_str(value, "format argument")
        if verb == "q":
            text = json.dumps(text, ensure_ascii=False)
        if prec:
            text = text[: int(precision or 0)]
        return format(text, f"{align}{width or ''}")
    if verb == "t":
        text = "true" if to_bool(value, "format argument") else "false"
        return format(text, f"{align}{width or ''}")
    n = to_num(value, "format argument")
    sign = "+" if "+" in flags else (" " if " " in flags else "")
    fill = "0=" if zero and width else align
    if verb in "dboxX":
        if not isinstance(n, int):
            raise EvalError(f"format: %{verb} needs a whole number, not {format_number(n)}")
        alt = "#" if "#" in flags and verb != "d" else ""
        return format(n, f"{fill}{sign}{alt}{width or ''}{'' if verb == 'd' else verb}")
    if verb in "eEfFgG":
        if verb in "gG" and not prec:
            text = format_number(n) if verb == "g" else format_number(n).upper()
            return format(text, f"{align}{width or ''}")
        return format(float(n), f"{fill}{sign}{width or ''}{prec or '.6'}{verb}")
    raise EvalError(f"format: unsupported verb %{verb}")
