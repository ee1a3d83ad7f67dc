# ruff: noqa: E501 - a table of templates: one case, one line
"""The Sprig functions consul-template offers as `sprig_<name>`. Each group cites the Sprig
documentation it checks (masterminds.github.io/sprig: strings, string_slice, defaults,
flow_control, lists, integer_slice, dicts, math, conversion, encoding, crypto, date, uuid);
expected outputs are worked out from those statements. Sprig's argument order puts the piped value
last (`default` takes the default first)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.gotemplate import TemplateError, TemplateExecError, consul_functions, parse
from agent.gotemplate.sprig import MAX_LIST, MAX_STRING
from tests.gotemplate_cases import FIXED_NOW, FakeSource

FUNCS = consul_functions(FakeSource(), now=lambda: FIXED_NOW)
SPRIG = sorted(n for n in FUNCS if n.startswith("sprig_"))
DATA = {
    "myList": [1, 2, 3, 4, 5],
    "fish": ["x"],
    "none": [],
    "myDict": {"name1": "value1", "name2": "value2", "name3": "value 3"},
    "other": {"name1": "otherValue1"},
    "text": "a\nb",
}


def run(text: str, data: Any = None, **kw: Any) -> str:
    return parse(text, name="t").execute(DATA if data is None else data, funcs=FUNCS, **kw)


CASES: list[tuple[str, str, str]] = [
    # strings.md: trim "removes space from either side"; trimAll "$" "$5.00" -> 5.00; trimSuffix "-"
    # "hello-" -> hello; trimPrefix "-" "-hello" -> hello; upper/lower; title "hello world" -> Hello
    # World; untitle "Hello World" -> hello world; repeat 3 "hello" -> hellohellohello.
    (
        "trim",
        '[{{ sprig_trim "   hello    " }}] {{ sprig_trimAll "$" "$5.00" }} {{ sprig_trimSuffix "-" "hello-" }} {{ sprig_trimPrefix "-" "-hello" }}',
        "[hello] 5.00 hello hello",
    ),
    (
        "case",
        '{{ sprig_upper "hello" }} {{ sprig_lower "HELLO" }} {{ sprig_title "hello world" }} {{ sprig_untitle "Hello World" }}',
        "HELLO hello Hello World hello world",
    ),
    ("repeat", '{{ sprig_repeat 3 "hello" }}|{{ "ab" | sprig_repeat 2 }}', "hellohellohello|abab"),
    # substr 0 5 "hello world" -> hello; nospace "hello w o r l d" -> helloworld; trunc 5 -> hello,
    # trunc -5 -> world; abbrev 5 "hello world" -> he... ("counts the width of the ellipses against
    # the maximum length"); initials "First Try" -> FT.
    (
        "substr",
        '{{ sprig_substr 0 5 "hello world" }}|{{ sprig_substr 6 100 "hello world" }}|{{ sprig_substr -1 5 "hello world" }}',
        "hello|world|hello",
    ),
    ("nospace", '{{ sprig_nospace "hello w o r l d" }}', "helloworld"),
    (
        "trunc",
        '{{ sprig_trunc 5 "hello world" }} {{ sprig_trunc -5 "hello world" }} {{ sprig_trunc 50 "hi" }}',
        "hello world hi",
    ),
    ("abbrev", '{{ sprig_abbrev 5 "hello world" }} {{ sprig_abbrev 20 "hello world" }}', "he... hello world"),
    ("initials", '{{ sprig_initials "First Try" }}', "FT"),
    # wrap "at a given column count" with "\n" (wrapWith 5 "\t" "Hello World" -> Hello<tab>World).
    ("wrap", '{{ sprig_wrap 5 "Hello World" }}|{{ sprig_wrap 80 "short text" }}', "Hello\nWorld|short text"),
    # contains "cat" "catch" is true "because catch contains cat"; hasPrefix "cat" "catch" is true.
    (
        "contains",
        '{{ sprig_contains "cat" "catch" }} {{ sprig_contains "dog" "catch" }} {{ sprig_hasPrefix "cat" "catch" }} {{ sprig_hasSuffix "ch" "catch" }} {{ "catch" | sprig_hasSuffix "x" }}',
        "true false true true false",
    ),
    # quote / squote "wrap a string in double quotes (quote) or single quotes (squote)"; cat
    # "concatenates multiple strings together into one, separating them with spaces".
    (
        "quote",
        '{{ sprig_quote "a" }} {{ sprig_squote "b" }} {{ sprig_quote "x" 1 }} {{ sprig_quote "say \\"hi\\"" }}',
        '"a" \'b\' "x" "1" "say \\"hi\\""',
    ),
    (
        "cat",
        '{{ sprig_cat "hello" "beautiful" "world" }}|{{ sprig_cat "a" 1 nil 2.5 }}',
        "hello beautiful world|a 1 2.5",
    ),
    # indent "indents every line in a given string to the specified indent width"; nindent "prepends
    # a new line to the beginning of the string".
    ("indent", "[{{ sprig_indent 2 .text }}][{{ .text | sprig_nindent 4 }}]", "[  a\n  b][\n    a\n    b]"),
    # replace: "I Am Henry VIII" | replace " " "-" -> I-Am-Henry-VIII.
    ("replace", '{{ "I Am Henry VIII" | sprig_replace " " "-" }}', "I-Am-Henry-VIII"),
    # plural: "if the length of the string is 1, the first argument will be printed ... Otherwise,
    # the second"; "0 is considered a plural".
    (
        "plural",
        '{{ len .fish | sprig_plural "one anchovy" "many anchovies" }}, {{ len .none | sprig_plural "one anchovy" "many anchovies" }}',
        "one anchovy, many anchovies",
    ),
    # snakecase "FirstName" -> first_name; camelcase "http_server" -> HttpServer; kebabcase
    # "FirstName" -> first-name.
    (
        "cases",
        '{{ sprig_snakecase "FirstName" }} {{ sprig_camelcase "http_server" }} {{ sprig_kebabcase "FirstName" }}',
        "first_name HttpServer first-name",
    ),
    # string_slice.md: list "hello" "world" | join "_" -> hello_world; list 1 2 3 | join "+" ->
    # 1+2+3; splitList "$" "foo$bar$baz" -> [foo bar baz].
    (
        "join-split",
        '{{ sprig_list "hello" "world" | sprig_join "_" }} {{ sprig_list 1 2 3 | sprig_join "+" }} {{ sprig_splitList "$" "foo$bar$baz" }}',
        "hello_world 1+2+3 [foo bar baz]",
    ),
    # defaults.md: default "foo" .Bar -> .Bar when non-empty, else foo; empty is "Numeric: 0, String:
    # "", Lists: [], Dicts: {}, Boolean: false, And always nil"; coalesce 0 1 2 -> 1; all 0 1 2 ->
    # false; any 0 1 2 -> true.
    (
        "default",
        '{{ sprig_default "foo" .nope }} {{ .nope | sprig_default "foo" }} {{ "bar" | sprig_default "foo" }} {{ sprig_default "foo" 0 }} {{ sprig_default "foo" .myList }}',
        "foo foo bar foo [1 2 3 4 5]",
    ),
    (
        "empty",
        '{{ sprig_empty 0 }} {{ sprig_empty "" }} {{ sprig_empty .none }} {{ sprig_empty (sprig_dict) }} {{ sprig_empty false }} {{ sprig_empty nil }} {{ sprig_empty 1 }} {{ sprig_empty " " }}',
        "true true true true true true false false",
    ),
    (
        "coalesce",
        '{{ sprig_coalesce 0 1 2 }} {{ sprig_coalesce .nope .myDict.name1 "Matt" }} {{ sprig_coalesce "" .nope "Matt" }}',
        "1 value1 Matt",
    ),
    (
        "all-any",
        "{{ sprig_all 0 1 2 }} {{ sprig_any 0 1 2 }} {{ sprig_all 1 true }} {{ sprig_any 0 false }}",
        "false true true false",
    ),
    # ternary "foo" "bar" true -> foo; true | ternary "foo" "bar" -> foo; false -> bar.
    (
        "ternary",
        '{{ sprig_ternary "foo" "bar" true }} {{ true | sprig_ternary "foo" "bar" }} {{ false | sprig_ternary "foo" "bar" }}',
        "foo foo bar",
    ),
    # toJson "encodes an item into a JSON string"; toPrettyJson "into a pretty (indented) JSON
    # string"; toRawJson "with HTML characters unescaped"; fromJson "decodes a JSON document",
    # "If the input cannot be decoded as JSON the function will return an empty string".
    (
        "tojson",
        '{{ sprig_toJson .myList }} {{ sprig_toJson .other }} {{ sprig_toRawJson (sprig_list "<a>") }} {{ sprig_toJson (sprig_list "<a>") }}',
        '[1,2,3,4,5] {"name1":"otherValue1"} ["<a>"] ["\\u003ca\\u003e"]',
    ),
    ("toprettyjson", "{{ sprig_toPrettyJson .other }}", '{\n  "name1": "otherValue1"\n}'),
    ("fromjson", '{{ (sprig_fromJson "{\\"foo\\": 55}").foo }} [{{ sprig_fromJson "{nope" }}]', "55 []"),
    # lists.md with $myList = list 1 2 3 4 5: first 1; rest [2 3 4 5]; last 5; initial [1 2 3 4];
    # append $myList 6 -> [1 2 3 4 5 6], "$myList would remain unaltered"; prepend $myList 0;
    # concat $myList (list 6 7) (list 8) -> [1 2 3 4 5 6 7 8]; reverse -> [5 4 3 2 1].
    ("list", "{{ sprig_list 1 2 3 4 5 }} {{ sprig_list }}", "[1 2 3 4 5] []"),
    (
        "first-rest",
        "{{ sprig_first .myList }} {{ sprig_rest .myList }} {{ sprig_last .myList }} {{ sprig_initial .myList }}",
        "1 [2 3 4 5] 5 [1 2 3 4]",
    ),
    (
        "append",
        "{{ sprig_append .myList 6 }} {{ sprig_prepend .myList 0 }} {{ .myList }}",
        "[1 2 3 4 5 6] [0 1 2 3 4 5] [1 2 3 4 5]",
    ),
    (
        "concat",
        "{{ sprig_concat .myList (sprig_list 6 7) (sprig_list 8) }} {{ sprig_reverse .myList }}",
        "[1 2 3 4 5 6 7 8] [5 4 3 2 1]",
    ),
    # list 1 1 1 2 | uniq -> [1 2]; without $myList 3 -> [1 2 4 5]; without $myList 1 3 5 -> [2 4];
    # has 4 $myList is true, has "hello" $myList false; compact (list 1 "a" "foo" "") removes "".
    (
        "uniq-without",
        "{{ sprig_list 1 1 1 2 | sprig_uniq }} {{ sprig_without .myList 3 }} {{ sprig_without .myList 1 3 5 }}",
        "[1 2] [1 2 4 5] [2 4]",
    ),
    (
        "has",
        '{{ sprig_has 4 .myList }} {{ sprig_has "hello" .myList }} {{ .myList | sprig_has 5 }}',
        "true false true",
    ),
    ("compact", '{{ sprig_compact (sprig_list 1 "a" "foo" "") }}', "[1 a foo]"),
    # integer_slice.md: until 5 -> [0 1 2 3 4]; untilStep 3 6 2 -> [3 5]; seq "like the bash seq
    # command": 1 parameter counts from 1 to end, seq -3 => 1 0 -1 -2 -3, seq 0 2 => 0 1 2, seq 2 -2
    # => 2 1 0 -1 -2, seq 0 2 10 => 0 2 4 6 8 10, seq 0 -2 -5 => 0 -2 -4.
    (
        "until",
        "{{ sprig_until 5 }} {{ sprig_untilStep 3 6 2 }} {{ range $i, $e := sprig_until 2 }}{{ $i }}{{ end }}",
        "[0 1 2 3 4] [3 5] 01",
    ),
    (
        "seq",
        "{{ sprig_seq 5 }}|{{ sprig_seq -3 }}|{{ sprig_seq 0 2 }}|{{ sprig_seq 2 -2 }}|{{ sprig_seq 0 2 10 }}|{{ sprig_seq 0 -2 -5 }}",
        "1 2 3 4 5|1 0 -1 -2 -3|0 1 2|2 1 0 -1 -2|0 2 4 6 8 10|0 -2 -4",
    ),
    # dicts.md: dict "name1" "value1" ...; set "returns the dictionary"; unset "if the key is not
    # found, this operation will simply return"; hasKey; get returns "" for a missing key; pluck
    # "name1" $myDict $myOtherDict -> [value1 otherValue1]; merge "giving precedence to the dest
    # dictionary", "a deep merge"; keys ... | sortAlpha; pick -> {name1, name2}; omit -> {name2};
    # values.
    (
        "dict",
        '{{ sprig_dict "name1" "value1" "name2" "value2" }} {{ sprig_dict "odd" }}',
        "map[name1:value1 name2:value2] map[odd:]",
    ),
    (
        "set-unset",
        '{{ $d := sprig_dict "a" 1 }}{{ $_ := sprig_set $d "b" 2 }}{{ $d }} {{ sprig_unset $d "a" }} {{ sprig_unset $d "zz" }}',
        "map[a:1 b:2] map[b:2] map[b:2]",
    ),
    (
        "get-haskey",
        '{{ sprig_get .myDict "name1" }} [{{ sprig_get .myDict "nope" }}] {{ sprig_hasKey .myDict "name1" }} {{ sprig_hasKey .myDict "nope" }}',
        "value1 [] true false",
    ),
    (
        "pluck",
        '{{ sprig_pluck "name1" .myDict .other }} {{ sprig_pluck "name2" .myDict .other }} {{ sprig_pluck "name1" .myDict .other | sprig_first }}',
        "[value1 otherValue1] [value2] value1",
    ),
    (
        "merge",
        '{{ $dst := sprig_dict "a" 1 "n" (sprig_dict "x" 1) }}{{ $src := sprig_dict "a" 2 "b" 3 "n" (sprig_dict "x" 9 "y" 2) }}{{ sprig_merge $dst $src }}',
        "map[a:1 b:3 n:map[x:1 y:2]]",
    ),
    (
        "keys-values",
        "{{ sprig_keys .myDict .other | sprig_uniq | sprig_sortAlpha }} {{ sprig_values .other }}",
        "[name1 name2 name3] [otherValue1]",
    ),
    (
        "pick-omit",
        '{{ sprig_pick .myDict "name1" "name2" }} {{ sprig_omit .myDict "name1" "name3" }}',
        "map[name1:value1 name2:value2] map[name2:value2]",
    ),
    ("sortalpha", '{{ sprig_list "b" "C" "a" 10 9 | sprig_sortAlpha }}', "[10 9 C a b]"),
    # math.md: "operate on int64 values": add 1 2 3 (6), add1, sub, div "integer division", mod, mul
    # 1 2 3 (6), max 1 2 3 (3), min 1 2 3 (1); floor 123.9999 -> 123.0, ceil 123.001 -> 124.0,
    # round 123.555555 3 -> 123.556 (floats print as Go's %v: 123, 124).
    (
        "int-math",
        "{{ sprig_add 1 2 3 }} {{ sprig_add1 4 }} {{ sprig_sub 5 7 }} {{ sprig_div 7 2 }} {{ sprig_mod 7 3 }} {{ sprig_mul 1 2 3 }} {{ sprig_max 1 2 3 }} {{ sprig_min 1 2 3 }}",
        "6 5 -2 3 1 6 3 1",
    ),
    (
        "int-math-conversions",
        '{{ sprig_add "3" 1.9 true }} {{ sprig_div -7 2 }} {{ 10 | sprig_sub 3 }}',
        "5 -3 -7",
    ),
    (
        "float-math",
        "{{ sprig_floor 123.9999 }} {{ sprig_ceil 123.001 }} {{ sprig_round 123.555555 3 }} {{ sprig_round 2.5 0 }}",
        "123 124 123.556 3",
    ),
    # conversion.md: atoi "Convert a string to an integer"; float64; int and int64 "can convert
    # floats to ints, and it can also convert strings to ints"; toString; toStrings `list 1 2 3 |
    # toStrings` converts 1 to "1" ...
    (
        "conversions",
        '{{ sprig_atoi "42" }} {{ sprig_atoi "x" }} {{ sprig_int 3.9 }} {{ sprig_int64 "12" }} {{ sprig_float64 "1.5" }} {{ sprig_toString 7 }} {{ sprig_list 1 2 3 | sprig_toStrings | sprig_toJson }}',
        '42 0 3 12 1.5 7 ["1","2","3"]',
    ),
    # encoding.md: b64enc / b64dec "Encode or decode with Base64".
    ("base64", '{{ sprig_b64enc "hello" }} {{ sprig_b64dec "aGVsbG8=" }}', "aGVsbG8= hello"),
    # crypto.md: sha1sum, sha256sum "computes it's SHA256 digest", adler32sum "its Adler-32 checksum"
    # (of "Hello world!": the standard digests, the Adler-32 sum in decimal).
    (
        "digests",
        '{{ sprig_sha256sum "Hello world!" }} {{ sprig_sha1sum "Hello world!" }} {{ sprig_adler32sum "Hello world!" }}',
        "c0535e4be2b79ffd93291305436bf889314e4a3faec05ecffcbb7df31ad9e51a d3486ae9136e7856bc42212385ea797094475802 487130206",
    ),
    # date.md: now "The current date/time"; `now | date "2006-01-02"`; dateInZone `date "2006-01-02"
    # (now) "UTC"`; unixEpoch "seconds since the unix epoch" (clock: 2009-11-10 23:04:05.123 UTC).
    (
        "dates",
        '{{ sprig_now | sprig_date "2006-01-02" }} {{ sprig_dateInZone "2006-01-02 15:04 MST" sprig_now "Asia/Tokyo" }} {{ sprig_now | sprig_unixEpoch }} {{ sprig_date "2006" 0 }}',
        "2009-11-10 2009-11-11 08:04 JST 1257894245 1970",
    ),
    ("now-prints-as-go-time", "{{ sprig_now }}", "2009-11-10 23:04:05.123 +0000 UTC"),
]

ERRORS: list[tuple[str, str, str]] = [
    # flow_control.md: fail "Unconditionally returns an empty string and an error with the
    # specified text".
    (
        "fail",
        '{{ sprig_fail "Please accept the end user license agreement" }}',
        "error calling sprig_fail: Please accept the end user license agreement",
    ),
    # lists.md: first etc. "panics if there is a problem" (a template error).
    ("first-of-string", '{{ sprig_first "abc" }}', "Cannot find first on type string"),
    ("concat-non-list", '{{ sprig_concat .myList "x" }}', "Cannot concat type string as list"),
    ("div-by-zero", "{{ sprig_div 1 0 }}", "integer divide by zero"),
    ("ternary-non-bool", '{{ sprig_ternary 1 2 "x" }}', "expected bool; got string"),
    ("upper-non-string", "{{ sprig_upper 1 }}", "wrong type for value; expected string; got int"),
    ("get-non-map", '{{ sprig_get .myList "a" }}', "expected map[string]interface {}; got []interface {}"),
    ("substr-inverted", '{{ sprig_substr 4 2 "hello" }}', "slice bounds out of range"),
    ("repeat-negative", '{{ sprig_repeat -1 "x" }}', "negative Repeat count"),
]


@pytest.mark.parametrize(("id_", "tpl", "want"), CASES, ids=[c[0] for c in CASES])
def test_sprig(id_: str, tpl: str, want: str) -> None:
    assert run(tpl) == want


@pytest.mark.parametrize(("id_", "tpl", "err"), ERRORS, ids=[c[0] for c in ERRORS])
def test_sprig_errors(id_: str, tpl: str, err: str) -> None:
    with pytest.raises(TemplateExecError) as info:
        run(tpl)
    assert err in str(info.value)


def test_the_subset_is_large_enough() -> None:
    assert len(SPRIG) >= 40
    assert {"sprig_default", "sprig_toJson", "sprig_dict", "sprig_list", "sprig_b64enc"} <= set(FUNCS)


def test_b64dec_returns_the_error_text() -> None:
    """Sprig's b64dec returns the decoding error's text instead of failing."""
    assert run('{{ sprig_b64dec "a!bc" }}') == "illegal base64 data at input byte 1"


def test_random_strings_and_uuid() -> None:
    """strings.md: randAlphaNum "uses 0-9a-zA-Z", randAlpha "a-zA-Z", randNumeric "0-9", each
    taking "the integer length of the string"; uuid.md: uuidv4 "generates a new v4 UUID"."""
    out = run(
        "{{ sprig_randAlphaNum 20 }} {{ sprig_randAlpha 5 }} {{ sprig_randNumeric 3 }} {{ sprig_uuidv4 }}"
    )
    alnum, alpha, num, uid = out.split(" ")
    assert re.fullmatch(r"[0-9a-zA-Z]{20}", alnum)
    assert re.fullmatch(r"[a-zA-Z]{5}", alpha)
    assert re.fullmatch(r"[0-9]{3}", num)
    assert re.fullmatch(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}", uid)
    assert run("{{ sprig_uuidv4 }}") != run("{{ sprig_uuidv4 }}")


@pytest.mark.parametrize(
    "tpl",
    [
        f'{{{{ sprig_repeat {MAX_STRING + 1} "x" }}}}',
        f"{{{{ sprig_randAlphaNum {MAX_STRING + 1} }}}}",
        f"{{{{ sprig_until {MAX_LIST + 1} }}}}",
        f"{{{{ sprig_seq {MAX_LIST + 1} }}}}",
        f"{{{{ sprig_untilStep 0 {MAX_LIST * 3} 2 }}}}",
        f'{{{{ sprig_indent {MAX_STRING} "a\\nb" }}}}',
        f'{{{{ sprig_nindent {MAX_STRING} "x" }}}}',
        '{{ $s := sprig_repeat 1000 "ab" }}{{ sprig_replace "a" (sprig_repeat 1000 "z") $s }}',
        "{{ sprig_randAlphaNum -1 }}",
    ],
)
def test_sizes_are_bounded(tpl: str) -> None:
    with pytest.raises(TemplateExecError, match=r"limit|out of range"):
        run(tpl)


def test_generated_values_cost_steps() -> None:
    with pytest.raises(TemplateExecError, match="budget"):
        run("{{ range 1000 }}{{ $x := sprig_until 100000 }}{{ end }}", max_steps=50_000)
    with pytest.raises(TemplateExecError, match="budget"):
        run('{{ range 1000 }}{{ $x := sprig_repeat 100000 "x" }}{{ end }}', max_steps=50_000)
    assert run("{{ range 10 }}{{ $x := sprig_until 1000 }}{{ end }}", max_steps=50_000) == ""


def test_list_results_are_new_lists() -> None:
    """lists.md: append / prepend / concat create "a new list" and "$myList would remain
    unaltered"; dicts.md: set and unset "modify the contents of a dictionary"."""
    data = {"l": [1], "d": {}}
    assert (
        run("{{ $a := sprig_append .l 2 }}{{ $b := sprig_concat .l $a }}{{ .l }} {{ $b }}", data)
        == "[1] [1 1 2]"
    )
    assert run('{{ $_ := sprig_set .d "k" "v" }}{{ .d.k }}', data) == "v"
    assert data == {"l": [1], "d": {"k": "v"}}


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=6),
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(SPRIG), st.lists(VALUES, max_size=3))
def test_any_arguments_give_a_value_or_a_template_error(name: str, args: list[Any]) -> None:
    call = " ".join([name, *(f"(index .a {i})" for i in range(len(args)))])
    try:
        out = parse("{{ " + call + " }}", name="t").execute({"a": args}, funcs=FUNCS, max_steps=100_000)
    except TemplateError as exc:
        assert str(exc).startswith("t:1:")
        return
    assert isinstance(out, str)


@pytest.mark.parametrize(
    "tpl",
    [
        "{{ $x := sprig_list 1 }}{{ range 40 }}{{ $x = sprig_list $x $x }}{{ end }}{{ $x }}",
        '{{ $x := sprig_dict }}{{ range 40 }}{{ $x = sprig_dict "a" $x "b" $x }}{{ end }}{{ $x }}',
        '{{ range $i := loop 1 40 }}{{ $p := scratch.Get (print (subtract 1 $i)) }}{{ scratch.MapSet (print $i) "a" $p }}{{ scratch.MapSet (print $i) "b" $p }}{{ end }}{{ scratch.Get "39" }}',
    ],
)
def test_shared_parts_cannot_blow_up_a_value(tpl: str) -> None:
    """A value built from itself doubles each time: refused before printing it would take forever."""
    with pytest.raises(TemplateExecError, match="more than 1000000 elements"):
        run(tpl)


def test_a_value_cannot_contain_itself() -> None:
    with pytest.raises(TemplateExecError, match="contain itself"):
        run(
            '{{ $d := sprig_dict }}{{ $_ := sprig_set $d "self" (sprig_list $d) }}{{ $_ := sprig_set $d "x" (sprig_list $d) }}'
        )
    with pytest.raises(TemplateExecError, match="contain itself"):
        run('{{ $d := sprig_dict }}{{ $_ := sprig_set $d "self" $d }}')
    with pytest.raises(TemplateExecError, match="contain itself"):
        run('{{ $d := sprig_dict "a" 1 }}{{ $_ := sprig_merge $d (sprig_dict "b" $d) }}')
    with pytest.raises(TemplateExecError, match="error calling MapSet: the value would contain itself"):
        run('{{ scratch.MapSet "m" "a" 1 }}{{ scratch.MapSet "m" "self" (scratch.Get "m") }}')
    text = '{{ scratch.MapSet "m" "a" 1 }}{{ $_ := sprig_set (scratch.Get "m") "b" 2 }}{{ scratch.MapValues "m" }}'
    assert run(text) == "[1 2]"
