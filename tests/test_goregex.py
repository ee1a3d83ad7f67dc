"""agent.gocompat.goregex: Go's regexp on RE2 for the HCL functions and the templates.

Expected values come from Go's regexp documentation (the examples of pkg.go.dev/regexp), from its test
tables (src/regexp/find_test.go, all_test.go) and, for the HCL functions, from cty's regexp tests
(zclconf/go-cty cty/function/stdlib). The timing tests prove the engine linear: Python's re, which
ran these functions before, took 44 s on `(a|a)*b` against 28 a's and a c (regexall, measured once on
a 2-core machine) and 14 s on `(x+x+)+y` against 28 x's (regexMatch), doubling with each character."""

from __future__ import annotations

import time
from typing import Any

import pytest

from agent.gocompat import goregex
from agent.gotemplate import TemplateExecError, consul_functions, parse
from agent.jobspec.hcleval import Scope, evaluate
from agent.jobspec.hclexpr import parse_expression
from agent.jobspec.hclvalues import MAX_VALUE_SIZE, Context, EvalError
from tests.gotemplate_cases import FIXED_NOW, FakeSource

FUNCS = consul_functions(FakeSource(), now=lambda: FIXED_NOW)


def hcl(fn: str, *args: str) -> object:
    """An HCL function call, with its string arguments passed as variables (no HCL escaping)."""
    names = [f"a{i}" for i in range(len(args))]
    expr = f"{fn}({', '.join('var.' + n for n in names)})"
    return evaluate(parse_expression(expr), Scope(Context(), variables=dict(zip(names, args, strict=True))))


def template(text: str, data: Any = None) -> str:
    return parse(text, name="t").execute(data or {}, funcs=FUNCS)


# -- linear time ------------------------------------------------------------------------------------

PATHOLOGICAL = [("(a|a)*b", "a"), ("(a*)*b", "a"), ("(x+x+)+y", "x"), ("^(a+)+$", "a"), ("(a|aa)+$", "a")]


@pytest.mark.parametrize(("pattern", "ch"), PATHOLOGICAL)
@pytest.mark.parametrize("n", [30, 100, 100_000])
def test_patterns_that_backtrack_elsewhere_run_in_linear_time(pattern: str, ch: str, n: int) -> None:
    text = ch * n + "c"  # no match: a backtracking engine tries every way to split the run
    t0 = time.monotonic()
    rx = goregex.compile(pattern)
    assert not rx.match(text)
    assert rx.find_all(text) == []
    assert rx.replace_all(text, "$1") == text
    assert hcl("regexall", pattern, text) == []
    assert hcl("regex_replace", text, pattern, "x") == text
    assert hcl("replace", text, f"/{pattern}/", "x") == text
    tpl = '{{ regexMatch .p .s }} {{ regexReplaceAll .p "$1" .s | len }}'
    assert template(tpl, {"p": pattern, "s": text}) == f"false {len(text)}"
    assert time.monotonic() - t0 < 1.0


def test_a_megabyte_of_input_with_a_match_per_character_is_linear_too() -> None:
    text = "ab" * (MAX_VALUE_SIZE // 4)
    t0 = time.monotonic()
    assert len(goregex.compile("(a)").find_all(text)) == MAX_VALUE_SIZE // 4
    assert goregex.compile("x*").replace_all(text[:1000], "-") == "-" + "-".join(text[:1000]) + "-"
    assert time.monotonic() - t0 < 5.0


# -- Go's documented behaviour (pkg.go.dev/regexp examples) -----------------------------------------


@pytest.mark.parametrize(
    ("template_", "want"),
    [("T", "-T-T-"), ("$1", "--xx-"), ("$1W", "---"), ("${1}W", "-W-xxW-")],
)
def test_replace_all_string_example(template_: str, want: str) -> None:
    # $1W names a group "1W", which does not exist: empty
    assert goregex.compile("a(x*)b").replace_all("-ab-axxb-", template_) == want


def test_a_group_may_be_named_1w_and_then_1w_is_its_name() -> None:
    assert goregex.compile("a(?P<1W>x*)b").replace_all("-ab-axxb-", "$1W") == "--xx-"
    assert goregex.compile("a(?P<1W>x*)b").replace_all("-ab-axxb-", "${1}W") == "-W-xxW-"


def test_subexp_names_example() -> None:
    rx = goregex.compile("(?P<first>[a-zA-Z]+) (?P<last>[a-zA-Z]+)")
    assert rx.match("Alan Turing")
    assert rx.names == ("", "first", "last")
    assert rx.replace_all("Alan Turing", "${last} ${first}") == "Turing Alan"


def test_expand_example_with_multiline_mode() -> None:
    content = (
        "\n\t# comment line\n\toption1: value1\n\toption2: value2\n\n\t# another comment line\n"
        "\toption3: value3\n"
    )
    rx = goregex.compile(r"(?m)(?P<key>\w+):\s+(?P<value>\w+)$")
    assert [m[1:] for m in rx.find_all_submatch(content)] == [
        ["option1", "value1"],
        ["option2", "value2"],
        ["option3", "value3"],
    ]
    assert rx.replace_all(content, "$key=$value").splitlines()[2:4] == [
        "\toption1=value1",
        "\toption2=value2",
    ]


def test_leftmost_first_not_leftmost_longest() -> None:
    # Longest example: `a(|b)` finds "a" (Perl's leftmost-first; "ab" only after Longest())
    assert goregex.compile("a(|b)").find("ab") == "a"
    assert goregex.compile("a|ab").find("ab") == "a"
    assert goregex.compile("ab|a").find("ab") == "ab"


def test_find_all_string_example() -> None:
    rx = goregex.compile("a.")
    assert rx.find_all("paranormal") == ["ar", "an", "al"]
    assert rx.find_all("paranormal", 2) == ["ar", "an"]
    assert rx.find_all("graal") == ["aa"]
    assert rx.find_all("none") == []


def test_submatch_examples() -> None:
    rx = goregex.compile("a(x*)b(y|z)c")
    assert rx.find_submatch("-axxxbyc-") == ["axxxbyc", "xxx", "y"]
    assert rx.find_submatch("-abzc-") == ["abzc", "", "z"]
    assert rx.find_submatch("-abc-") is None
    assert goregex.compile("a(x*)b").find_all_submatch("-axxb-ab-") == [["axxb", "xx"], ["ab", ""]]
    assert goregex.compile("foo(.?)").find_all_submatch("seafood fool") == [["food", "d"], ["fool", "l"]]


def test_match_string_example_and_its_error() -> None:
    assert goregex.compile("foo.*").match("seafood")
    assert not goregex.compile("bar.*").match("seafood")
    with pytest.raises(goregex.GoRegexError) as info:
        goregex.compile("a(b")
    assert str(info.value) == "error parsing regexp: missing closing ): `a(b`"


# -- successive matches: empty ones (find_test.go, all_test.go) -------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "want"),
    [
        ("a*", "baaab", ["", "aaa", ""]),  # not the empty match right after "aaa"
        ("", "abc", ["", "", "", ""]),
        (r"\b", "xx yy", ["", "", "", ""]),
        (r"\B", "xx yy", ["", ""]),
        ("(|a)*", "aa", ["", "", ""]),
        ("[a-c]*", "\u65e5", ["", ""]),  # never inside a character's UTF-8 bytes
        ("[^\u65e5]", "abc\u65e5def", ["a", "b", "c", "d", "e", "f"]),
        (r"\B", "a\u00e9", [""]),  # only at the end: RE2 alone also finds one between é's two bytes
    ],
)
def test_find_all_skips_an_empty_match_right_after_a_match(pattern: str, text: str, want: list[str]) -> None:
    assert goregex.compile(pattern).find_all(text) == want


@pytest.mark.parametrize(
    ("pattern", "repl", "text", "want"),
    [
        ("", "x", "abc", "xaxbxcx"),
        ("", "x", "", "x"),
        ("b", "x", "abc", "axc"),
        ("[a-c]*", "x", "\u65e5", "x\u65e5x"),
        ("^[a-c]*", "x", "abcdabc", "xdabc"),
        ("[a-c]*$", "x", "abcdabc", "abcdx"),
        ("[a-c]*", "x", "def", "xdxexfx"),
        ("[a-c]*", "x", "abcbcdcdedef", "xdxdxexdxexfx"),
        ("x", "xXx", "xxxXxxx", "xXxxXxxXxXxXxxXxxXx"),
        # the template: $0, ${0}, $1x (a group named "1x"), names, $$ and what is not a reference
        ("a+", "(${0})$0", "banana", "b(a)an(a)an(a)a"),
        ("hello, (.+)", "goodbye, $1x", "hello, world", "goodbye, "),
        ("hello, (.+)", "goodbye, ${1}x", "hello, world", "goodbye, worldx"),
        ("hello, (.+)", "<$0><$1><$2><$3>", "hello, world", "<hello, world><world><><>"),
        ("hello, (?P<noun>.+)", "goodbye, $noun!", "hello, world", "goodbye, world!"),
        ("(?P<x>hi)|(?P<x>bye)", "$x$x$x", "bye", "byebyebye"),  # the first group of the name that took part
        ("(?P<x>hi)|(?P<x>bye)", "$xyz", "hi", ""),
        ("(?P<x>hi)|(?P<x>bye)", "${x}yz", "hi", "hiyz"),
        ("(?P<x>hi)|(?P<x>bye)", "hello $$x", "hi", "hello $x"),
        ("a+", "${oops", "aaa", "${oops"),
        ("a+", "$$", "aaa", "$"),
        ("a+", "$", "aaa", "$"),
        ("(x)?", "$1", "123", "123"),
        ("(a)(b){0}(c)", ".$1|$3.", "xacxacx", "x.a|c.x.a|c.x"),
        ("a(x*)b", r"\1", "-axb-", r"-\1-"),  # a backslash is text, as in Go
        ("(a)", "$01", "a", ""),  # a leading zero: the name "01"
    ],
)
def test_replace_all_as_go(pattern: str, repl: str, text: str, want: str) -> None:
    assert goregex.compile(pattern).replace_all(text, repl) == want


def test_replace_all_bounds_its_result() -> None:
    with pytest.raises(goregex.ResultTooLarge):
        goregex.compile("").replace_all("a" * 1000, "xyz", max_size=3000)
    assert len(goregex.compile("").replace_all("a" * 1000, "xy", max_size=3002)) == 3002


# -- syntax: Go's, not Python's ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "text", "want"),
    [
        (r"a\z", "ba", "a"),
        (r"a\z", "a\n", None),
        ("a$", "a\n", None),  # $ is the end of the text (Python's also matches before a final \n)
        (r"(?m)a$", "a\nb", "a"),
        (r"\Qa.b*\E+", "a.b*b*", "a.b*"),
        (r"\Qa.b*\E+", "a.bbb", None),
        (r"\Q(\E(x)", "(x", "(x"),
        ("(?i)hello", "HeLLo", "HeLLo"),
        ("(?s)a.b", "a\nb", "a\nb"),
        ("a.b", "a\nb", None),
        ("(?U)a+", "aaa", "a"),
        ("(?U)a+?", "aaa", "aaa"),
        (r"\pL+", "héllo1", "héllo"),
        (r"\p{Greek}+", "abc αβγ", "αβγ"),
        (r"\PL+", "ab12", "12"),
        ("[[:alpha:]]+", "12ab", "ab"),
        (r"(?<year>\d{4})", "in 2024", "2024"),
        (r"[^a]", "\n", "\n"),  # a negated class matches a newline
        (r"\x{263a}", "☺", "☺"),
    ],
)
def test_go_syntax(pattern: str, text: str, want: str | None) -> None:
    assert goregex.compile(pattern).find(text) == want


def test_named_groups_in_both_spellings() -> None:
    rx = goregex.compile(r"(?P<a>x)(?<b>y)(z)")
    assert rx.names == ("", "a", "b", "")
    assert rx.num_subexp == 3
    assert rx.replace_all("xyz", "$b$a$3") == "yxz"


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("(abc", "missing closing ): `(abc`"),
        ("abc)", "unexpected ): `abc)`"),
        ("x[a-z", "missing closing ]: `[a-z` in `x[a-z`"),
        ("[z-a]", "invalid character class range: `z-a`"),
        ("*", "missing argument to repetition operator: `*`"),
        ("a**", "invalid nested repetition operator: `**`"),
        ("a{1001}", "invalid repeat count: `{1001}`"),
        ("abc\\", "trailing backslash at end of expression: ``"),
        (r"\8", r"invalid escape sequence: `\8`"),
        # what Python's re accepted and Go refuses
        (r"(a)\1", r"invalid escape sequence: `\1`"),
        ("a(?=b)", "invalid or unsupported Perl syntax: `(?=`"),
        ("a(?!b)", "invalid or unsupported Perl syntax: `(?!`"),
        ("(?<=a)b", "invalid or unsupported Perl syntax: `(?<=`"),
        ("(?P=n)", "invalid or unsupported Perl syntax"),
        ("(?x) a", "invalid or unsupported Perl syntax: `(?x`"),
        (r"a\Z", r"invalid escape sequence: `\Z` in `a\Z`"),
        # what RE2's C++ library accepts and Go refuses
        (r"a\Cb", r"invalid escape sequence: `\C` in `a\Cb`"),
        (r"[\C]", r"invalid escape sequence: `\C`"),
        ("(?P<é>x)", "invalid named capture: `(?P<é>` in `(?P<é>x)`"),
        ("(?P<a-b>x)", "invalid named capture: `(?P<a-b>`"),
        ("\ud800", r"invalid UTF-8: `\ud800`"),
    ],
)
def test_invalid_patterns_get_gos_error(pattern: str, message: str) -> None:
    with pytest.raises(goregex.GoRegexError) as info:
        goregex.compile(pattern)
    assert str(info.value).startswith("error parsing regexp: ")
    assert message in str(info.value)


def test_an_escaped_backslash_or_quoted_c_is_no_any_byte() -> None:
    assert goregex.compile(r"\\C").find(r"a\Cb") == r"\C"
    assert goregex.compile(r"\Q\C\E").find(r"a\Cb") == r"\C"
    assert goregex.compile(r"[\\C]+").find(r"a\Cb") == r"\C"


def test_a_long_pattern_in_an_error_is_shortened() -> None:
    with pytest.raises(goregex.GoRegexError) as info:
        goregex.compile("(" + "a" * 10_000)
    assert len(str(info.value)) < 500


def test_compiled_patterns_are_cached_but_not_long_ones() -> None:
    assert goregex.compile("a+b") is goregex.compile("a+b")
    long = "a" * (goregex.CACHE_PATTERN_CHARS + 1)
    assert goregex.compile(long) is not goregex.compile(long)


def test_lone_surrogates_in_the_text_pass_through() -> None:
    rx = goregex.compile("b+")
    assert rx.replace_all("a\ud800bb", "[$0]") == "a\ud800[bb]"
    assert rx.find_all("\ud800b\udfffb") == ["b", "b"]


# -- the HCL functions (cty's behaviour, zclconf/go-cty stdlib/regexp_test.go) ----------------------

URI = r"^(?:(?P<scheme>[^:/?#]+):)?(?://(?P<authority>[^/?#]*))?(?P<path>[^?#]*)(?:\?(?P<query>[^#]*))?(?:#(?P<fragment>.*))?"


def test_hcl_regex_results() -> None:
    assert hcl("regex", "[a-z]+", "135abc456def789") == "abc"
    assert hcl("regex", "([0-9]*)([a-z]*)", "135abc456def") == ["135", "abc"]
    assert hcl("regex", URI, "http://www.ics.uci.edu/pub/ietf/uri/#Related") == {
        "scheme": "http",
        "authority": "www.ics.uci.edu",
        "path": "/pub/ietf/uri/",
        "query": None,  # a group that took no part is null
        "fragment": "Related",
    }
    assert hcl("regex", "(a)|(b)", "b") == [None, "b"]


def test_hcl_regexall_results() -> None:
    assert hcl("regexall", "[a-z]+", "135abc456def789") == ["abc", "def"]
    # no third, empty match at the end: it would follow the previous match
    assert hcl("regexall", "([0-9]*)([a-z]*)", "135abc456def") == [["135", "abc"], ["456", "def"]]
    assert hcl("regexall", "x", "abc") == []


@pytest.mark.parametrize(
    ("call", "args", "message"),
    [
        ("regex", ("(?P<n>a)(b)", "ab"), "cannot mix named and unnamed capture groups"),
        ("regexall", ("(?P<n>a)(b)", "ab"), "cannot mix named and unnamed capture groups"),
        ("regex", ("b", "aaa"), "regex: the pattern did not match any part of the given string"),
        ("regex", ("(", "a"), "regex(): error parsing regexp: missing closing ): `(`"),
        ("regexall", (r"(a)\1", "aa"), r"regexall(): error parsing regexp: invalid escape sequence: `\1`"),
        (
            "regex_replace",
            ("aa", "a(?=a)", "b"),
            "regex_replace(): error parsing regexp: invalid or unsupported",
        ),
        ("replace", ("aa", "/a(?<!a)/", "b"), "replace(): error parsing regexp: invalid or unsupported"),
    ],
)
def test_hcl_regex_errors(call: str, args: tuple[str, ...], message: str) -> None:
    with pytest.raises(EvalError) as info:
        hcl(call, *args)
    assert message in str(info.value)


def test_hcl_replacements_are_gos() -> None:
    assert hcl("regex_replace", "-ab-axxb-", "a(x*)b", "${1}W") == "-W-xxW-"
    assert hcl("regex_replace", "-ab-axxb-", "a(x*)b", "$1W") == "---"
    assert hcl("regex_replace", "hello world", "(?P<first>\\w+) (?P<second>\\w+)", "$second $first") == (
        "world hello"
    )
    assert hcl("replace", "abc", "/x*/", "-") == "-a-b-c-"
    assert hcl("replace", "1 + 2", "/\\+/", "$$") == "1 $ 2"
    assert hcl("replace", "a.b", "/./", "x") == "xxx"
    assert hcl("replace", "a.b", ".", "x") == "axb"  # not a /regex/: the text


def test_hcl_replacement_results_are_bounded() -> None:
    with pytest.raises(EvalError, match="regex_replace: the result would be too large"):
        hcl("regex_replace", "a" * 100_000, "", "x" * 20)
    with pytest.raises(EvalError, match="replace: the result would be too large"):
        hcl("replace", "a" * 100_000, "//", "x" * 20)


# -- the template functions (consul-template: Go's regexp.Compile, MatchString, ReplaceAllString) ---


def test_template_regex_functions() -> None:
    assert template('{{ "-ab-axxb-" | regexReplaceAll "a(x*)b" "${1}W" }}') == "-W-xxW-"
    assert template('{{ "ab" | regexReplaceAll "a|ab" "x" }}') == "xb"
    assert template('{{ "a\\nb" | regexMatch "a$" }} {{ "a\\nb" | regexMatch "(?m)a$" }}') == "false true"


@pytest.mark.parametrize(
    ("tpl", "message"),
    [
        (
            '{{ "x" | regexMatch "a(b" }}',
            "error calling regexMatch: error parsing regexp: missing closing ): `a(b`",
        ),
        (
            '{{ "x" | regexReplaceAll "(?=x)" "y" }}',
            "error calling regexReplaceAll: error parsing regexp: invalid or unsupported Perl syntax: `(?=`",
        ),
    ],
)
def test_template_regex_errors_are_gos(tpl: str, message: str) -> None:
    with pytest.raises(TemplateExecError) as info:
        template(tpl)
    assert message in str(info.value)


def test_the_agents_base_dependencies_carry_re2() -> None:
    """Nodes install the agent from a wheelhouse of its base dependencies (lab/wheelhouse.py): RE2 must
    be one of them, as a binary wheel (google-re2 publishes manylinux ones for CPython 3.11)."""
    import tomllib
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    deps = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    assert any(dep.startswith("google-re2") for dep in deps)
    assert "\ngoogle-re2==" in (root / "requirements.lock").read_text()
