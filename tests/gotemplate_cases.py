# ruff: noqa: E501 - a table of templates: one case, one line
"""Golden cases for agent.gotemplate. Each group cites the documentation statement it checks: Go's
text/template package doc (pkg.go.dev/text/template, "TT" below), Go's fmt package doc ("FMT") and
consul-template's docs/templating-language.md ("CT"). Expected outputs are worked out from those
statements, not from running the implementation."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

DATA: dict[str, Any] = {
    "l": [1, 2, 3],
    "m": {"b": 2, "a": 1},
    "s": "str",
    "n": None,
    "e": "",
    "el": [],
    "name": "web",
    "nested": [[1, 2], [3, 4]],
    "users": [{"name": "ann", "admin": True}, {"name": "bob", "admin": False}],
    "f": lambda a, b: a + b,
}
_DEFAULT: Any = object()


@dataclass(frozen=True)
class Case:
    id: str
    tpl: str
    want: str | None = None  # the whole output
    err: str | None = None  # a substring of str(error)
    syntax: bool = False  # the error is a TemplateSyntaxError (else a TemplateExecError)
    data: Any = field(default=_DEFAULT)
    missing_key_error: bool = False
    delims: tuple[str, str] = ("{{", "}}")

    def the_data(self) -> Any:
        return DATA if self.data is _DEFAULT else self.data


def ok(id_: str, tpl: str, want: str, **kw: Any) -> Case:
    return Case(id_, tpl, want=want, **kw)


def bad(id_: str, tpl: str, err: str, **kw: Any) -> Case:
    return Case(id_, tpl, err=err, **kw)


def syntax(id_: str, tpl: str, err: str, **kw: Any) -> Case:
    return Case(id_, tpl, err=err, syntax=True, **kw)


FIXED_NOW = dt.datetime(2009, 11, 10, 23, 4, 5, 123000, tzinfo=dt.UTC)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class FakeSource:
    """A DataSource with fixed data (shaped as consul-template's Secret, KeyPair, HealthService)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, dict[str, str]]] = []
        self.sockaddr_exprs: list[str] = []
        self.kv = {
            "service/redis/maxconns": "15",
            "service/redis/minconns": "5",
            "config/admin/port": "1234",
            "config/maxconns": "5",
            "config/minconns": "2",
            "groups/elasticsearch/es1": "1",
            "groups/elasticsearch/es2": "1",
            "groups/elasticsearch/es3": "1",
            "app/a": "1",
            "app/b/c": "2",
            "app/beta_active": "true",
        }

    def secret(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        if params:
            self.writes.append((path, params))
            data: dict[str, Any] = {"certificate": f"CERT for {params.get('common_name')}"}
        elif path == "secret/data/passwords":
            data = {"data": {"wifi": "FORWARDSoneword"}, "metadata": {"version": 1}}
        elif path == "secret/passwords":
            data = {"wifi": "FORWARDSoneword"}
        else:
            raise PermissionError(f"permission denied on {path}")
        return {"LeaseID": "", "LeaseDuration": 2764800, "Renewable": False, "Data": data, "Warnings": None}

    def secrets(self, path: str) -> list[str]:
        return ["bar", "foo", "zip"]

    def key(self, path: str) -> str | None:
        return self.kv.get(path)

    def _pairs(self, prefix: str, deep: bool) -> list[dict[str, Any]]:
        prefix = prefix.rstrip("/") + "/"
        out = []
        for k in sorted(self.kv):
            rel = k.removeprefix(prefix)
            if k.startswith(prefix) and (deep or "/" not in rel):
                out.append(
                    {
                        "Path": k,
                        "Key": rel,
                        "Value": self.kv[k],
                        "Exists": True,
                        "CreateIndex": 1,
                        "ModifyIndex": 1,
                        "LockIndex": 0,
                        "Flags": 0,
                        "Session": "",
                    }
                )
        return out

    def ls(self, prefix: str) -> list[dict[str, Any]]:
        return self._pairs(prefix, deep=False)

    def tree(self, prefix: str) -> list[dict[str, Any]]:
        return self._pairs(prefix, deep=True)

    def service(self, name: str, *filters: str) -> list[dict[str, Any]]:
        web = [
            {
                "Node": "node1",
                "Address": "10.5.2.45",
                "ID": "web01",
                "Name": "web01",
                "Tags": ["prod", "v1"],
                "Port": 2492,
                "ServiceMeta": {"env": "prod"},
            },
            {
                "Node": "node2",
                "Address": "10.2.6.61",
                "ID": "web02",
                "Name": "web02",
                "Tags": ["v1"],
                "Port": 2904,
                "ServiceMeta": {"env": "dev"},
            },
        ]
        if name == "web":
            return web
        if name == "prod.web":
            return web[:1]
        if name == "redis|any":
            return [
                {
                    "ID": "redis-dev-1",
                    "Name": "redis",
                    "ServiceMeta": {"environment": "dev", "shard_number": "1"},
                },
                {
                    "ID": "redis-prod-1",
                    "Name": "redis",
                    "ServiceMeta": {"environment": "prod", "shard_number": "1"},
                },
                {
                    "ID": "redis-prod-2",
                    "Name": "redis",
                    "ServiceMeta": {"environment": "prod", "shard_number": "2"},
                },
            ]
        return []

    def services(self) -> list[dict[str, Any]]:
        return [{"Name": "consul", "Tags": []}, {"Name": "web", "Tags": ["prod", "v1"]}]

    def env(self, name: str) -> str | None:
        return {"CLUSTER_ID": "Abc-1", "EMPTY": ""}.get(name)

    def datacenters(self, ignore_inaccessible: bool) -> list[str]:
        return ["dc1"] if ignore_inaccessible else ["dc1", "dc2"]

    def node(self, name: str) -> dict[str, Any] | None:
        nodes = {n["Node"]: n for n in self.nodes()}
        found = nodes.get(name or "node1")
        if found is None:
            return None
        services = [
            {"ID": "web01", "Service": "web", "Tags": ["prod"], "Meta": {}, "Port": 2492, "Address": ""}
        ]
        return {"Node": found, "Services": services if found["Node"] == "node1" else []}

    def nodes(self) -> list[dict[str, Any]]:
        return [
            {
                "ID": "1b2c",
                "Node": "node1",
                "Address": "10.5.2.6",
                "Datacenter": "dc1",
                "TaggedAddresses": {"lan": "10.5.2.6", "wan": "192.0.2.6"},
                "Meta": {"rack": "r1"},
            },
            {
                "ID": "3d4e",
                "Node": "node2",
                "Address": "10.4.2.6",
                "Datacenter": "dc1",
                "TaggedAddresses": {"lan": "10.4.2.6"},
                "Meta": {},
            },
        ]

    def sockaddr(self, expr: str) -> str:
        self.sockaddr_exprs.append(expr)
        return {"GetPrivateIP": "10.0.0.5", 'GetInterfaceIP "eth0"': "10.0.0.6"}.get(expr, "")

    def file(self, path: str) -> str:
        if path == "/etc/ec2_version":
            return "  v1.2\n"
        raise FileNotFoundError(f"open {path}: no such file or directory")


CASES: list[Case] = [
    # TT "Text ... is copied from the template to the output verbatim"; trim markers: "all trailing
    # white space is trimmed from the immediately preceding text", the doc's example
    # "{{23 -}} < {{- 45}}" is "23<45"; "{{-3}}" parses as an action containing the number -3;
    # "white space" is space, tab, carriage return and newline.
    ok("text", "hello, world\n", "hello, world\n"),
    ok("trim-doc", "{{23 -}} < {{- 45}}", "23<45"),
    ok("trim-newlines", "a  \n\t{{- 1 }}\n\n  b", "a1\n\n  b"),
    ok("trim-right", "{{ 1 -}}\n\n  x", "1x"),
    ok("no-trim-without-space", "{{-3}}", "-3"),
    ok("empty-template", "", ""),
    # TT "A comment; discarded. May contain newlines. Comments do not nest and must start and end at
    # the delimiters", also with trim markers {{- /* ... */ -}}.
    ok("comment", "a{{/* a comment */}}b", "ab"),
    ok("comment-multiline", "x{{/* line1\nline2 */}}y", "xy"),
    ok("comment-trim", "a \n{{- /* c */ -}}\n b", "ab"),
    syntax("comment-not-at-delim", "{{/* c */ x}}", "comment ends before closing delimiter"),
    syntax("comment-unclosed", "{{/* c ", "unclosed comment"),
    syntax("action-unclosed", "text {{ .a ", "unclosed action"),
    # TT "Arguments: A boolean, string, character, integer, floating-point ... constant in Go syntax"
    # (Go spec: escapes \t \x41 \u00e9 \U0001F600; raw strings keep backslashes; 'a' is a rune = 97;
    # 0x 0o 0b prefixes, legacy 0-octal, underscores).
    ok("string-escapes", r'{{ "a\tb\x41\u00e9\U0001F600\\\"" }}', 'a\tbAé\U0001f600\\"'),
    ok("raw-string", "{{ `a\\nb` }}", "a\\nb"),
    ok("char-constants", r"{{ 'a' }} {{ '\n' }} {{ '\x41' }} {{ 'é' }}", "97 10 65 233"),
    ok(
        "int-literals",
        "{{ 0x1F }} {{ 0o17 }} {{ 017 }} {{ 0b101 }} {{ 1_000 }} {{ -0x10 }} {{ +7 }}",
        "31 15 15 5 1000 -16 7",
    ),
    # FMT "%v for floating point is %g" with the smallest number of digits, and %g uses %e "for large
    # exponents" (strconv: exponent < -4 || >= precision, precision 6 when shortest... 1e21 -> 1e+21).
    ok(
        "float-literals",
        "{{ 1.5 }} {{ 1e21 }} {{ 2.0 }} {{ 1e6 }} {{ 100000.0 }} {{ 0.000012 }} {{ -0.5 }}",
        "1.5 1e+21 2 1e+06 100000 1.2e-05 -0.5",
    ),
    ok("bools", "{{ true }} {{ false }}", "true false"),
    bad("nil-command", "{{ nil }}", "nil is not a command"),
    syntax("int-overflow", "{{ 99999999999999999999 }}", "int64"),
    syntax("bad-number", "{{ 3x }}", "bad number syntax"),
    syntax("bad-escape", r'{{ "\q" }}', "escape"),
    syntax("unterminated-string", '{{ "abc }}', "unterminated quoted string"),
    # TT ".Field: The result is the value of the field ... The name of a key of the data, which must
    # be a map, preceded by a period ... Keys ... may be chained"; printing follows fmt's %v: maps
    # as map[k:v] in sorted key order, slices as [a b], nil inside a value as <nil>.
    ok("field-chain", "{{ .m.a }}-{{ .users }}", "1-[map[admin:true name:ann] map[admin:false name:bob]]"),
    ok("print-map-sorted", "{{ .m }}", "map[a:1 b:2]"),
    ok("print-list", "{{ .l }} {{ .nested }}", "[1 2 3] [[1 2] [3 4]]"),
    ok("print-nil-in-list", "{{ . }}", "[1 <nil> a]", data=[1, None, "a"]),
    # TT "missingkey=default" / "missingkey=invalid": "The default behavior: Do nothing and continue
    # execution. If printed, the result of the index operation is the string "<no value>""; CT
    # error_on_missing_key is missingkey=error: "Execution stops immediately with an error".
    ok("missing-key", "[{{ .nope }}]", "[<no value>]"),
    ok("missing-chain", "[{{ .nope.deeper.still }}]", "[<no value>]"),
    ok("missing-key-falsy", "{{ if .nope }}T{{ else }}F{{ end }}", "F"),
    bad("missing-key-error", "{{ .nope }}", 'map has no entry for key "nope"', missing_key_error=True),
    bad("missing-key-error-nested", "{{ .m.zz }}", 'map has no entry for key "zz"', missing_key_error=True),
    ok("nil-data", "[{{ . }}|{{ .x }}]", "[<no value>|<no value>]", data=None),
    bad("field-of-list", "{{ .l.x }}", "can't evaluate field x in type []interface {}"),
    bad("field-of-string", "{{ .s.x }}", "can't evaluate field x in type string"),
    bad("field-of-nil", "{{ .n.x }}", "nil pointer evaluating interface {}.x"),
    bad("field-with-args", "{{ .m 1 }}", "m is not a method but has arguments"),
    # TT "A pipeline may be "chained" by separating a sequence of commands with pipeline characters
    # '|'. In a chained pipeline, the result of each command is passed as the last argument of the
    # following command"; "(pipeline)" may be an argument; "Once constructed ... field chains".
    ok("pipe-last-arg", '{{ "x" | printf "%s-%s" "a" }}', "a-x"),
    ok("pipe-chain", '{{ "abc" | len | printf "%d!" }}', "3!"),
    ok("paren-arg", '{{ printf "%d" (len "abc") }}', "3"),
    ok("paren-field-chain", "{{ (index .users 1).name }}", "bob"),
    syntax("pipe-non-executable", "{{ 1 | 2 }}", "non executable command in pipeline stage 2"),
    bad("args-to-non-function", '{{ "x" 1 }}', "can't give argument to non-function"),
    syntax("empty-action", "{{ }}", "missing value for command"),
    syntax("unexpected-paren", "{{ ) }}", "unexpected right paren"),
    syntax("unclosed-paren", "{{ (1 }}", "unclosed left paren"),
    # TT Variables: "$variable := pipeline" declares and produces no output; "$variable = pipeline"
    # assigns; "A variable's scope extends to the "end" action of the control structure ... in which
    # it is declared"; "When execution begins, $ is set to the data argument"; "A template invocation
    # does not inherit variables from the point of its invocation".
    ok("declare-silent", "{{ $x := 1 }}{{ $x }}", "1"),
    ok("assign", "{{ $x := 1 }}{{ if true }}{{ $x = 2 }}{{ end }}{{ $x }}", "2"),
    syntax("scope-ends-at-end", "{{ if true }}{{ $y := 1 }}{{ end }}{{ $y }}", 'undefined variable "$y"'),
    syntax("assign-undeclared", "{{ $z = 1 }}", "undefined variable"),
    ok("with-declare", "{{ with $x := .m.a }}{{ $x }}{{ . }}{{ end }}", "11"),
    ok("dollar-root", "{{ range .l }}{{ $.s }}{{ . }}{{ end }}", "str1str2str3"),
    ok("variable-fields", "{{ $u := index .users 0 }}{{ $u.name }}", "ann"),
    syntax(
        "template-no-inherit",
        '{{ define "t" }}{{ $x }}{{ end }}{{ $x := 1 }}{{ template "t" }}',
        'undefined variable "$x"',
    ),
    ok("shadowing", "{{ $x := 1 }}{{ with 2 }}{{ $x := . }}{{ $x }}{{ end }}{{ $x }}", "21"),
    # TT "{{if pipeline}} T1 {{end}}: If the value of the pipeline is empty, no output is generated
    # ... The empty values are false, 0, any nil pointer or interface value, and any array, slice,
    # map, or string of length zero"; else if; with sets dot; Go 1.23 "{{with}} ... {{else with}}".
    ok(
        "if-empty-values",
        "{{ range . }}{{ if . }}T{{ else }}F{{ end }}{{ end }}",
        "FFFFFFFTTTT",
        data=[False, 0, 0.0, "", [], {}, None, True, 1, "x", [0]],
    ),
    ok("else-if", '{{ if eq .s "a" }}A{{ else if eq .s "str" }}S{{ else }}E{{ end }}', "S"),
    ok("with-dot", "{{ with .m }}{{ .a }}{{ end }}|{{ with .e }}X{{ else }}none{{ end }}", "1|none"),
    ok("else-with", "{{ with .e }}A{{ else with .s }}{{ . }}{{ else }}C{{ end }}", "str"),
    syntax("if-missing-pipeline", "{{ if }}x{{ end }}", "missing value for if"),
    syntax("end-alone", "x{{ end }}", "unexpected {{end}}"),
    syntax("if-unclosed", "{{ if 1 }}x", "unexpected EOF"),
    syntax("else-twice", "{{ if 1 }}a{{ else }}b{{ else }}c{{ end }}", "expected end; found {{else}}"),
    # TT "{{range pipeline}}: The value of the pipeline must be an array, slice, map, iter.Seq,
    # iter.Seq2, integer or channel ... If the value is a map and the keys are of basic type with a
    # defined order, the elements will be visited in sorted key order"; "{{range $index, $element :=
    # pipeline}}"; "{{break}}", "{{continue}}"; range over an integer (Go 1.22).
    ok("range-list", "{{ range .l }}<{{ . }}>{{ end }}", "<1><2><3>"),
    ok(
        "range-else",
        "{{ range .el }}x{{ else }}empty{{ end }}{{ range .n }}x{{ else }}nil{{ end }}",
        "emptynil",
    ),
    ok(
        "range-map-sorted",
        "{{ range $k, $v := . }}{{ $k }}={{ $v }};{{ end }}",
        "a=1;b=2;c=3;",
        data={"c": 3, "a": 1, "b": 2},
    ),
    ok("range-map-values", "{{ range . }}{{ . }}{{ end }}", "123", data={"c": 3, "a": 1, "b": 2}),
    ok("range-index", "{{ range $i, $v := .l }}{{ $i }}:{{ $v }} {{ end }}", "0:1 1:2 2:3 "),
    ok("range-one-var", "{{ range $v := .l }}{{ $v }}{{ end }}", "123"),
    ok(
        "range-int",
        "{{ range 3 }}{{ . }}{{ end }}|{{ range $i := 2 }}{{ $i }}{{ end }}|{{ range 0 }}x{{ end }}",
        "012|01|",
    ),
    ok(
        "range-break-continue",
        "{{ range .l }}{{ if eq . 2 }}{{ continue }}{{ end }}{{ if eq . 3 }}{{ break }}{{ end }}{{ . }}{{ end }}",
        "1",
    ),
    ok(
        "range-nested-break",
        "{{ range .nested }}[{{ range . }}{{ if eq . 2 4 }}{{ break }}{{ end }}{{ . }}{{ end }}]{{ end }}",
        "[1][3]",
    ),
    syntax("break-outside-range", "{{ if 1 }}{{ break }}{{ end }}", "{{break}} outside {{range}}"),
    syntax("continue-in-range-else", "{{ range .l }}{{ else }}{{ continue }}{{ end }}", "outside {{range}}"),
    bad("range-string", "{{ range .s }}{{ end }}", "range can't iterate over str"),
    bad(
        "range-int-two-vars",
        "{{ range $i, $v := 3 }}{{ end }}",
        "can't use 3 to iterate over more than one variable",
    ),
    syntax("range-three-vars", "{{ range $a, $b, $c := .l }}{{ end }}", "too many declarations"),
    # TT "{{define "name"}}", "{{template "name"}}: The template with the specified name is executed
    # with nil data", "{{template "name" pipeline}} ... with dot set to the value of the pipeline";
    # "{{block "name" pipeline}} T1 {{end}}: A block is shorthand for defining a template and then
    # executing it in place"; redefinition within one parse is an error.
    ok(
        "define-template",
        '{{ define "t" }}[{{ . }}]{{ end }}{{ template "t" 5 }}{{ template "t" .s }}',
        "[5][str]",
    ),
    ok("template-nil-data", '{{ define "t" }}[{{ . }}]{{ end }}{{ template "t" }}', "[<no value>]"),
    ok("block", '{{ block "b" .s }}<{{ . }}>{{ end }}', "<str>"),
    ok("define-trim", '{{- define "t" -}}\n  x\n{{- end -}}\n{{ template "t" }}', "x"),
    syntax(
        "define-twice",
        '{{ define "b" }}x{{ end }}{{ define "b" }}y{{ end }}',
        "multiple definition of template",
    ),
    bad("no-such-template", '{{ template "nope" }}', 'no such template "nope"'),
    ok(
        "template-recursion",
        '{{ define "r" }}{{ if gt . 0 }}{{ . }}{{ template "r" (subtract 1 .) }}{{ end }}{{ end }}{{ template "r" 3 }}',
        "321",
    ),
    bad(
        "template-infinite-recursion",
        '{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" 3 }}',
        "too deep",
    ),
    syntax("template-name-not-string", "{{ template .x }}", "in template clause"),
    # TT "and: Returns the boolean AND of its arguments by returning the first empty argument or the
    # last argument ... and evaluates the arguments in order ... stopping when the result is
    # determined"; "or" likewise with the first non-empty argument; "not"; "len"; "index ... index x
    # 1 2 3 is x[1][2][3]"; "slice"; out-of-range is an error.
    ok(
        "and-or",
        '{{ and 1 0 2 }} {{ and 1 2 }} {{ or 0 "" "x" }} [{{ or 0 "" }}] {{ not 0 }} {{ not .l }}',
        "0 2 x [] true false",
    ),
    ok("or-short-circuit", "{{ or 1 (index .l 10) }} {{ and 0 (index .l 10) }}", "1 0"),
    ok("or-pipe", '{{ .e | or "default" }}', "default"),
    ok("len", '{{ len .l }} {{ len .m }} {{ len "héllo" }} {{ len "" }}', "3 2 6 0"),
    bad("len-of-int", "{{ len 3 }}", "len of type int"),
    ok(
        "index",
        '{{ index .m "a" }} {{ index .l 1 }} {{ index .nested 1 0 }} {{ index "abc" 1 }} {{ index .l }}',
        "1 2 3 98 [1 2 3]",
    ),
    ok("index-missing-map-key", '[{{ index .m "zz" }}]', "[<no value>]"),
    bad("index-out-of-range", "{{ index .l 5 }}", "error calling index: index out of range: 5"),
    bad("index-bad-type", '{{ index .l "x" }}', "cannot index slice/array with type string"),
    ok(
        "slice",
        '{{ slice "abcdef" 1 3 }} {{ slice .l 1 }} {{ slice .l 0 2 }} {{ slice .l }}',
        "bc [2 3] [1 2] [1 2 3]",
    ),
    bad("slice-inverted", "{{ slice .l 2 1 }}", "invalid slice index: 2 > 1"),
    # TT comparison functions: "eq Returns the boolean truth of arg1 == arg2 ... eq (only) accepts two
    # or more arguments and compares the second and subsequent to the first"; "The comparison
    # functions work on any values whose type Go defines as comparable. For basic types such as
    # integers, the rules are relaxed: size and exact type are ignored ... However, as usual, one may
    # not compare an int to a float32 and so on"; lt etc. on "basic types".
    ok("eq-multi", "{{ eq 3 1 2 3 }} {{ eq 3 1 2 }}", "true false"),
    ok(
        "comparisons",
        '{{ eq "a" "b" }} {{ ne 1 2 }} {{ lt "a" "b" }} {{ le 2 2 }} {{ gt 2.5 1.5 }} {{ ge 1 2 }} {{ eq .n nil }}',
        "false true true true true false true",
    ),
    bad("eq-int-float", "{{ eq 1 1.0 }}", "incompatible types for comparison"),
    bad("lt-bool", "{{ lt true false }}", "invalid type for comparison"),
    bad("lt-string-int", '{{ lt "a" 1 }}', "incompatible types for comparison"),
    bad("eq-missing-arg", "{{ eq 1 }}", "missing argument for comparison"),
    # TT "print: An alias for fmt.Sprint", FMT "Sprint ... Spaces are added between operands when
    # neither is a string"; "println: An alias for fmt.Sprintln" (always spaces, and a newline).
    ok("print", '{{ print 1 2 "a" 3 "b" "c" }}|{{ print }}|{{ print nil 1 }}', "1 2a3bc||<nil> 1"),
    ok("println", '{{ println 1 "a" }}', "1 a\n"),
    # TT "html: Returns the escaped HTML equivalent of the textual representation of its arguments";
    # "js: ... escaped JavaScript equivalent"; "urlquery: ... suitable for embedding in a URL query".
    ok("html", """{{ html "<a href=\\"x\\">&'" }}""", "&lt;a href=&#34;x&#34;&gt;&amp;&#39;"),
    ok("js", """{{ js "it's <b>\\"=" }}""", "it\\'s \\u003Cb\\u003E\\\"\\u003D"),
    ok("urlquery", '{{ urlquery "a b&c=d/é" }}', "a+b%26c%3Dd%2F%C3%A9"),
    # TT "call: Returns the result of calling the first argument, which must be a function, with the
    # remaining arguments as parameters".
    ok("call", "{{ call .f 2 3 }}", "5"),
    bad("call-non-function", "{{ call .s 1 }}", "non-function"),
    # TT: function names are checked ("function %q not defined"); a function's error stops
    # execution; wrong arity is an error.
    bad("undefined-function", "{{ nope 1 }}", 'function "nope" not defined'),
    bad("wrong-arity", "{{ len }}", "wrong number of args for len: want 1 got 0"),
    # FMT verbs: %v default format, %+v, %d base 10, %x %X base 16, %o base 8, %b base 2, %c the
    # character, %q a single-quoted character literal, %U Unicode format; width and flags: '-' pads
    # on the right, '0' leading zeros after the sign, '+' always a sign, ' ' a space for elided
    # sign, '#' alternate format (0x, leading 0).
    ok(
        "printf-ints",
        '{{ printf "%v|%+v|%d|%5d|%-5d|%05d|%x|%X|%o|%b|%c|%q|%U" 42 42 -42 42 42 -42 255 255 8 5 65 65 65 }}',
        "42|42|-42|   42|42   |-0042|ff|FF|10|101|A|'A'|U+0041",
    ),
    ok(
        "printf-int-flags",
        '{{ printf "%+d|% d|%#x|%#o|%.3d|%x" 5 5 255 8 7 -255 }}',
        "+5| 5|0xff|010|007|-ff",
    ),
    # FMT strings: %s uninterpreted, %q double-quoted Go syntax (%#q backquoted), %x hex of the
    # bytes (% x spaced); precision "for strings ... the maximum number of runes".
    ok(
        "printf-strings",
        r'{{ printf "%s|%6s|%-6s|%.2s|%q|%x|% x|%#q" "héllo" "ab" "ab" "héllo" "a\"b\n" "hi" "hi" "ab" }}',
        'héllo|    ab|ab    |hé|"a\\"b\\n"|6869|68 69|`ab`',
    ),
    # FMT floats: %e scientific, %f decimal point, %g "%e for large exponents, %f otherwise.
    # Precision is discussed below"; "The default precision for %e, %f and %#g is 6; for %g it is the
    # smallest number of digits necessary to represent the value uniquely".
    ok(
        "printf-floats",
        '{{ printf "%f|%.2f|%8.3f|%e|%g|%G|%v|%08.3f|%+.1e|%.3g" 3.14159 3.14159 3.14159 314159.0 0.00001234 1e21 2.5 -3.14159 12345.678 1234.5678 }}',
        "3.141590|3.14|   3.142|3.141590e+05|1.234e-05|1E+21|2.5|-003.142|+1.2e+04|1.23e+03",
    ),
    ok("printf-bool-percent", '{{ printf "%t|%%|%5t" true false }}', "true|%|false"),
    # FMT "Format errors: Wrong type or unknown verb: %!verb(type=value) ... Too few arguments:
    # %!verb(MISSING) ... Too many arguments: %!(EXTRA type=value) ... Invalid or invalid use of
    # argument index: %!(BADINDEX)"; "%!d(<nil>)" for nil.
    ok("printf-bad-verb", '{{ printf "%d|%z|%s" "x" 1 1.5 }}', "%!d(string=x)|%!z(int=1)|%!s(float64=1.5)"),
    ok("printf-missing", '{{ printf "%d %d" 1 }}', "1 %!d(MISSING)"),
    ok("printf-extra", '{{ printf "%d" 1 2 "x" }}', "1%!(EXTRA int=2, string=x)"),
    ok("printf-nil", '{{ printf "%v|%d" nil nil }}', "<nil>|%!d(<nil>)"),
    ok("printf-index", '{{ printf "%[2]d %[1]d" 1 2 }}', "2 1"),
    # FMT "For compound objects, the elements are printed using these rules, recursively": slices
    # [elem0 elem1 ...], maps map[key1:value1 ...] in sorted key order; %T the type.
    ok(
        "printf-compound",
        '{{ printf "%v %d %s" .m .l .nested }}',
        "map[a:1 b:2] [1 2 3] [[%!s(int=1) %!s(int=2)] [%!s(int=3) %!s(int=4)]]",
    ),
    ok(
        "printf-types",
        '{{ printf "%T %T %T %T %T" 1 "a" 1.5 .l .m }}',
        "int string float64 []interface {} map[string]interface {}",
    ),
    ok("printf-width-star", '{{ printf "%*d|%-*d|" 4 7 3 1 }}', "   7|1  |"),
    # TT "the default delimiters ... may be changed" (Delims); the trim markers still apply.
    ok("delims", "[[ .s ]] {{ .s }}", "str {{ .s }}", delims=("[[", "]]")),
    ok("delims-trim", "a  [[- .s -]]  b [[/* c */]]", "astrb ", delims=("[[", "]]")),
    ok("delims-range", "[[ range .l ]][[ . ]],[[ end ]]", "1,2,3,", delims=("[[", "]]")),
    # CT secret: "The <DATA> attribute is optional; if omitted, the request will be a vault read ...
    # If provided, the request will be a vault write"; the PKI and the KV v2 (.Data.data) examples;
    # "The parameters must be key=value pairs".
    ok(
        "ct-secret-pki",
        '{{ with secret "pki/issue/my-domain-dot-com" "common_name=foo.example.com" }}{{ .Data.certificate }}{{ end }}',
        "CERT for foo.example.com",
    ),
    ok(
        "ct-secret-kv2",
        '{{ with secret "secret/data/passwords" }}{{ .Data.data.wifi }}{{ end }}',
        "FORWARDSoneword",
    ),
    ok("ct-secret-kv1", '{{ with secret "secret/passwords" }}{{ .Data.wifi }}{{ end }}', "FORWARDSoneword"),
    ok(
        "ct-secret-fields",
        '{{ with secret "secret/passwords" }}{{ .LeaseDuration }} {{ .Renewable }}{{ end }}',
        "2764800 false",
    ),
    bad("ct-secret-bad-param", '{{ secret "pki/issue/r" "common_name" }}', '"common_name" is not key=value'),
    bad(
        "ct-secret-source-error",
        '{{ secret "denied/x" }}',
        "error calling secret: permission denied on denied/x",
    ),
    bad(
        "ct-secret-missing-field",
        '{{ with secret "secret/passwords" }}{{ .Data.nope }}{{ end }}',
        'map has no entry for key "nope"',
        missing_key_error=True,
    ),
    # CT secrets: 'range secrets "secret/"' renders bar foo zip.
    ok("ct-secrets", '{{ range secrets "secret/" }}{{ . }} {{ end }}', "bar foo zip "),
    # CT key / keyOrDefault / keyExists: "{{ key "service/redis/maxconns" }}" renders 15;
    # keyOrDefault "If the key does not exist, the default value will be used instead"; keyExists
    # returns true or false. Here a missing `key` is an error instead of blocking.
    ok("ct-key", '{{ key "service/redis/maxconns" }}', "15"),
    bad("ct-key-missing", '{{ key "nope" }}', 'key "nope" not found'),
    ok(
        "ct-key-or-default",
        '{{ keyOrDefault "service/redis/nope" "5" }} {{ keyOrDefault "service/redis/minconns" "9" }}',
        "5 5",
    ),
    ok(
        "ct-key-exists",
        '{{ if keyExists "app/beta_active" }}on{{ else }}off{{ end }}{{ keyExists "nope" }}',
        "onfalse",
    ),
    # CT ls: 'range ls "service/redis"' with '{{ .Key }}:{{ .Value }}' renders maxconns:15 minconns:5;
    # tree returns all keys under the prefix.
    ok("ct-ls", '{{ range ls "service/redis" }}{{ .Key }}:{{ .Value }} {{ end }}', "maxconns:15 minconns:5 "),
    ok("ct-tree", '{{ range tree "app" }}{{ .Key }}={{ .Value }};{{ end }}', "a=1;b/c=2;beta_active=true;"),
    ok("ct-ls-top-level-only", '{{ range ls "app" }}{{ .Key }};{{ end }}', "a;beta_active;"),
    # CT explode + toJSON: '{{ tree "config" | explode | toJSON }}' renders
    # {"admin":{"port":"1234"},"maxconns":"5","minconns":"2"}; toJSONPretty "indented by two spaces";
    # toYAML renders admin:\n  port: "1234"\nmaxconns: "5"\nminconns: "2".
    ok(
        "ct-explode-tojson",
        '{{ tree "config" | explode | toJSON }}',
        '{"admin":{"port":"1234"},"maxconns":"5","minconns":"2"}',
    ),
    ok(
        "ct-tojsonpretty",
        '{{ tree "config" | explode | toJSONPretty }}',
        '{\n  "admin": {\n    "port": "1234"\n  },\n  "maxconns": "5",\n  "minconns": "2"\n}',
    ),
    ok(
        "ct-toyaml",
        '{{ tree "config" | explode | toYAML }}',
        'admin:\n  port: "1234"\nmaxconns: "5"\nminconns: "2"',
    ),
    ok("ct-explode-nested", '{{ with tree "config" | explode }}{{ .admin.port }}{{ end }}', "1234"),
    ok(
        "ct-explodemap",
        "{{ explodeMap . | toJSON }}",
        '{"foo":{"bar":"a","baz":"b"}}',
        data={"foo/bar": "a", "foo/baz": "b"},
    ),
    # Go encoding/json: "String values encode as JSON strings ... <, >, & ... escaped to \u003c,
    # \u003e, \u0026", float64 1.0 encodes as 1, nil as null.
    ok(
        "tojson-escapes",
        "{{ toJSON . }}",
        '{"a":"\\u003cb\\u003e\\u0026","f":1.5,"i":1,"n":null,"t":true}',
        data={"a": "<b>&", "i": 1, "f": 1.5, "n": None, "t": True},
    ),
    # CT byKey example: tree "groups" | byKey renders "elasticsearch:" then "  es1=1" ... ; "the
    # top-most key is stripped from the Key value".
    ok(
        "ct-bykey",
        '{{ range $key, $pairs := tree "groups" | byKey }}{{ $key }}:\n{{ range $pair := $pairs }}  {{ .Key }}={{ .Value }}\n{{ end }}{{ end }}',
        "elasticsearch:\n  es1=1\n  es2=1\n  es3=1\n",
    ),
    # CT byTag: "creates a map that groups services by tag".
    ok(
        "ct-bytag",
        '{{ range $tag, $services := service "web" | byTag }}{{ $tag }}:{{ range $services }} {{ .Name }}{{ end }};{{ end }}',
        "prod: web01;v1: web01 web02;",
    ),
    # CT service: '{{ range service "web" }}\nserver {{ .Name }} {{ .Address }}:{{ .Port }}{{ end }}'
    # renders server web01 10.5.2.45:2492 ...; "<TAG>.<NAME>".
    ok(
        "ct-service",
        '{{ range service "web" }}\nserver {{ .Name }} {{ .Address }}:{{ .Port }}{{ end }}',
        "\nserver web01 10.5.2.45:2492\nserver web02 10.2.6.61:2904",
    ),
    ok(
        "ct-service-tag",
        '{{ range service "prod.web" }}{{ .Address }}:{{ .Port }}{{ end }}',
        "10.5.2.45:2492",
    ),
    ok("ct-service-meta", '{{ range service "web" }}{{ index .ServiceMeta "env" }} {{ end }}', "prod dev "),
    # CT services: '{{ range services }}{{ .Name }}: {{ .Tags | join "," }}'.
    ok(
        "ct-services",
        '{{ range services }}{{ .Name }}: {{ .Tags | join "," }};{{ end }}',
        "consul: ;web: prod,v1;",
    ),
    # CT env: "Reads the given environment variable"; "{{ or (env "CLUSTER_ID") "12345" }}"; file:
    # "If the file cannot be read, an error will occur"; '{{ file "/etc/ec2_version" | trimSpace }}'.
    ok("ct-env", '{{ env "CLUSTER_ID" | toLower }} {{ or (env "NOPE") "12345" }}', "abc-1 12345"),
    ok("ct-file-trimspace", '{{ file "/etc/ec2_version" | trimSpace }}', "v1.2"),
    bad("ct-file-missing", '{{ file "/nope" }}', "error calling file: open /nope: no such file or directory"),
    # CT base64: '{{ base64Decode "aGVsbG8=" }}' renders hello; '{{ base64Encode "hello" }}' renders
    # aGVsbG8=; an invalid string is an error; URL variants use the URL-safe alphabet.
    ok(
        "ct-base64",
        '{{ base64Encode "hello" }} {{ base64Decode "aGVsbG8=" }} {{ base64URLDecode "aGVsbG8=" }}',
        "aGVsbG8= hello hello",
    ),
    ok("ct-base64url", '{{ base64URLEncode "??>>" }} {{ base64Encode "??>>" }}', "Pz8-Pg== Pz8+Pg=="),
    bad("ct-base64-invalid", '{{ base64Decode "not base64!" }}', "error calling base64Decode"),
    # CT contains: "Determines if a needle is within an iterable element" ('.Tags | contains
    # "production"'); in: 'in .Tags "production"'; containsAll/Any/None/NotAll and their results on
    # an empty needle list (true, false, true, false).
    ok(
        "ct-contains",
        '{{ .l | contains 2 }} {{ contains 9 .l }} {{ in .l 3 }} {{ in "foobar" "oba" }}',
        "true false true true",
    ),
    ok(
        "ct-contains-sets",
        "{{ containsAll .a .h }} {{ containsAny .a .h }} {{ containsNone .a .h }} {{ containsNotAll .a .h }}",
        "false true false true",
        data={"a": ["x", "q"], "h": ["x", "y"]},
    ),
    ok(
        "ct-contains-empty",
        "{{ containsAll .a .h }} {{ containsAny .a .h }} {{ containsNone .a .h }} {{ containsNotAll .a .h }}",
        "true false true false",
        data={"a": [], "h": ["x"]},
    ),
    # CT loop: "range $i := loop 5 8" renders stanza-5 stanza-6 stanza-7; one integer loops from 0.
    ok(
        "ct-loop",
        "{{ range $i := loop 5 8 }}\nstanza-{{ $i }}{{ end }}|{{ range loop 3 }}{{ . }}{{ end }}",
        "\nstanza-5\nstanza-6\nstanza-7|012",
    ),
    # CT join '{{ $items | join "," }}'; split '{{ "foo\nbar\n" | split "\n" }}' (consul-template
    # trims surrounding space before splitting); trimSpace; trim/trimPrefix/trimSuffix.
    ok(
        "ct-split-join",
        '{{ "foo\\nbar\\n" | split "\\n" }} {{ "a,b,c" | split "," | join "-" }}',
        "[foo bar] a-b-c",
    ),
    ok(
        "ct-trims",
        '[{{ trimSpace "  x \\n" }}] {{ "xxhixx" | trim "x" }} {{ "prefix-a" | trimPrefix "prefix-" }} {{ "a.txt" | trimSuffix ".txt" }}',
        "[x] hi a a",
    ),
    # CT parseBool/parseFloat/parseInt/parseUint/parseJSON ('with $d := key ... | parseJSON' then
    # $d.name); JSON numbers decode as Go float64 and print as %v does.
    ok(
        "ct-parse",
        '{{ "true" | parseBool }} {{ "1.2" | parseFloat }} {{ "1" | parseInt }} {{ "42" | parseUint }}',
        "true 1.2 1 42",
    ),
    ok(
        "ct-parsejson",
        """{{ with $d := `{"name":"x","n":[1,2.5],"o":{"k":null}}` | parseJSON }}{{ $d.name }} {{ $d.n }} {{ $d.o }}{{ end }}""",
        "x [1 2.5] map[k:<nil>]",
    ),
    bad("ct-parseint-bad", '{{ "12a" | parseInt }}', "invalid syntax"),
    bad("ct-parsebool-bad", '{{ "yes" | parseBool }}', "invalid syntax"),
    # CT regexMatch: '"foo.bar" | regexMatch "foo([.a-z]+)"' is true; regexReplaceAll '"foo.bar" |
    # regexReplaceAll "foo([.a-z]+)" "$1"' ("you can use variables like $1"); replaceAll '"foo.bar"
    # | replaceAll "." "_"'.
    ok(
        "ct-regex",
        '{{ "foo.bar" | regexMatch "foo([.a-z]+)" }} {{ "foo.bar" | regexReplaceAll "foo([.a-z]+)" "$1" }} {{ "x" | regexMatch "^y" }}',
        "true .bar false",
    ),
    ok(
        "ct-regex-named",
        '{{ "k=v" | regexReplaceAll "(?P<k>\\\\w+)=(?P<v>\\\\w+)" "${v}=${k} $$" }}',
        "v=k $",
    ),
    ok("ct-replaceall", '{{ "foo.bar" | replaceAll "." "_" }}', "foo_bar"),
    # Go's regexp.Compile error, as consul-template returns it
    bad(
        "ct-regex-invalid",
        '{{ "x" | regexMatch "(" }}',
        "error calling regexMatch: error parsing regexp: missing closing ): `(`",
    ),
    # CT toLower/toUpper; toTitle "converts it to titlecase" (Go strings.Title).
    ok(
        "ct-case",
        '{{ "HeLLo" | toLower }} {{ "hello" | toUpper }} {{ "hello wide-world" | toTitle }}',
        "hello HELLO Hello Wide-World",
    ),
    # CT indent: "Indents a block of text by prefixing N number of spaces per line".
    ok("ct-indent", '{{ "a\\nb" | indent 2 }}|{{ "a\\n\\nb" | indent 1 }}', "  a\n  b| a\n\n b"),
    # CT math examples: add 1 2 // 3; 1 | add 2 // 3; subtract 2 5 // 3; 5 | subtract 2 // 3;
    # multiply 2 2 // 4; divide 2 10 // 5; 10 | divide 2 // 5; modulo 2 5 // 1; 5 | modulo 2 // 1;
    # minimum 2 5 // 2; maximum of 2 and 5 is 5. "available on floats and integer values".
    ok(
        "ct-math",
        "{{ add 1 2 }} {{ 1 | add 2 }} {{ subtract 2 5 }} {{ 5 | subtract 2 }} {{ multiply 2 2 }} {{ 2 | multiply 2 }}",
        "3 3 3 3 4 4",
    ),
    ok(
        "ct-math-div",
        "{{ divide 2 10 }} {{ 10 | divide 2 }} {{ modulo 2 5 }} {{ 5 | modulo 2 }} {{ minimum 2 5 }} {{ maximum 2 5 }}",
        "5 5 1 1 2 5",
    ),
    ok(
        "ct-math-float",
        "{{ add 1 1.5 }} {{ 7 | divide 2 }} {{ -7 | divide 2 }} {{ 7.0 | divide 2 }}",
        "2.5 3 -3 3.5",
    ),
    bad("ct-divide-by-zero", "{{ 10 | divide 0 }}", "error calling divide: divide: division by zero"),
    bad("ct-modulo-by-zero", "{{ 10 | modulo 0 }}", "error calling modulo"),
    bad("ct-add-string", '{{ add "a" 1 }}', "add: unknown type"),
    # CT sha256Hex: "compute the sha256_hex value" (of "bladibla", SHA-256 digest in hex).
    ok(
        "ct-sha256",
        '{{ "bladibla" | sha256Hex }}',
        "54cf4c66bcabb5c20e25331c01dd600b73369e97a947861bd8d3a0e0b8b3d70b",
    ),
    ok("ct-md5", '{{ "hello" | md5sum }}', "5d41402abc4b2a76b9719d911017c592"),
    # CT executeTemplate: "Executes and returns a defined template", with an optional new context,
    # and can be saved to a variable.
    ok(
        "ct-executetemplate",
        '{{ define "custom" }}my custom template {{ . }}{{ end }}{{ executeTemplate "custom" }}|{{ executeTemplate "custom" 42 }}|{{ $v := executeTemplate "custom" 1 }}{{ $v | toUpper }}',
        "my custom template <no value>|my custom template 42|MY CUSTOM TEMPLATE 1",
    ),
    # Go encoding/json: a number that does not fit a float64 is an error ("cannot unmarshal number");
    # Go's parser: a float constant out of range is "illegal number syntax".
    bad("ct-parsejson-overflow", "{{ parseJSON `[1e400]` }}", "cannot unmarshal number 1e400"),
    syntax("float-literal-overflow", "{{ 1e400 }}", "illegal number syntax"),
    # CT (newer releases) toUnescapedJSON: toJSON without the HTML escaping; parseYAML "parses the
    # result as YAML"; safeLs/safeTree "refuse to render template, if the KV prefix query return
    # blank/empty data"; envOrDefault falls back when the variable is unset or blank (here: blank).
    ok("ct-tounescapedjson", "{{ toUnescapedJSON . }}", '{"a":"<b>&"}', data={"a": "<b>&"}),
    ok("ct-parseyaml", "{{ with parseYAML `a: [1, x]` }}{{ index .a 1 }}{{ end }}", "x"),
    ok("ct-safels", '{{ range safeLs "service/redis" }}{{ .Key }};{{ end }}', "maxconns;minconns;"),
    bad("ct-safetree-empty", '{{ safeTree "nothing/here" }}', "refusing to render"),
    ok("ct-envordefault", '{{ envOrDefault "NOPE" "d" }} {{ envOrDefault "CLUSTER_ID" "d" }}', "d Abc-1"),
    # CT timestamp: no argument is the RFC3339 UTC timestamp ("1970-01-01T00:00:00Z"); a Go layout
    # ("2006-01-02" -> 1970-01-01); "unix" -> seconds ("0"). These run with the clock at the epoch.
    # TT Arguments: "The name of a niladic method of the data, preceded by a period, such as .Method
    # ... The result is the value of invoking the method with dot as the receiver"; Commands: "A
    # method call with arguments ... .Method [Argument...] ... the result is dot.Method(Argument1,
    # etc.)"; "$x.Method1.Field" on a variable and "(pipeline).Method" on a parenthesized value;
    # "If the command is a method ... the final value of the pipeline becomes the last argument";
    # a function call is written as a chain on its result ("fn.Method args"), as consul-template's
    # scratch is. Maps keep their key access; a name that is neither method nor key is an error.
    # CT Scratch: "The scratchpad ... is available within the context of a template to store
    # temporary data ... not shared between templates and is not cached between invocations";
    # scratch.Key "Returns a boolean if data exists ... Even if the data at that key is nil, this
    # still returns true"; scratch.Get "If the data does not exist, this will return nil";
    # scratch.Set "If data already exists at that key, it is overwritten"; SetX "does not overwrite
    # if the value already exists"; MapSet "Saves a value in a named key in the map"; MapSetX does
    # not overwrite; MapValues "Returns a sorted list (by key) of all values in the named map".
    ok(
        "ct-scratch-set-get",
        '{{ scratch.Set "foo" "bar" }}{{ scratch.Get "foo" }} {{ scratch.Set "foo" "baz" }}{{ scratch.Get "foo" }}',
        "bar baz",
    ),
    ok(
        "ct-scratch-key",
        '{{ scratch.Key "foo" }} {{ scratch.Set "n" nil }}{{ scratch.Key "n" }} [{{ scratch.Get "nope" }}]',
        "false true [<no value>]",
    ),
    ok("ct-scratch-setx", '{{ scratch.SetX "a" 1 }}{{ scratch.SetX "a" 2 }}{{ scratch.Get "a" }}', "1"),
    ok(
        "ct-scratch-mapset",
        '{{ scratch.MapSet "vars" "foo" "bar" }}{{ scratch.MapSet "vars" "abc" "x" }}{{ scratch.MapSetX "vars" "foo" "no" }}{{ scratch.MapValues "vars" }} {{ (scratch.Get "vars").foo }}',
        "[x bar] bar",
    ),
    ok(
        "ct-scratch-explodemap-doc",
        '{{ scratch.MapSet "example" "foo/bar" "a" }}{{ scratch.MapSet "example" "foo/baz" "b" }}{{ scratch.Get "example" | explodeMap | toYAML }}',
        "foo:\n  bar: a\n  baz: b",
    ),
    ok(
        "method-on-variable-and-paren",
        '{{ $s := scratch }}{{ $s.Set "k" "v" }}{{ $s.Get "k" }} {{ (scratch).Get "k" }} {{ "k" | scratch.Get }}',
        "v v v",
    ),
    ok(
        "scratch-shared-with-templates",
        '{{ define "t" }}{{ scratch.Set "from" "inner" }}{{ end }}{{ template "t" }}{{ scratch.Get "from" }}',
        "inner",
    ),
    ok(
        "ct-scratch-in-range",
        '{{ range service "web" }}{{ scratch.MapSet "by" .Node .Port }}{{ end }}{{ range scratch.MapValues "by" }}{{ . }};{{ end }}',
        "2492;2904;",
    ),
    bad("method-unknown", '{{ scratch.Nope "x" }}', "can't evaluate field Nope in type *template.Scratch"),
    bad("method-wrong-args", "{{ scratch.Get }}", "wrong number of args for Get: want 1 got 0"),
    bad(
        "method-error",
        '{{ scratch.Set "a" 1 }}{{ scratch.MapSet "a" "k" "v" }}',
        'error calling MapSet: "a" is not a map',
    ),
    bad(
        "method-key-type",
        "{{ scratch.Get 1 }}",
        "error calling Get: wrong type for value; expected string; got int",
    ),
    bad(
        "field-on-method-result",
        '{{ scratch.Set "a" "s" }}{{ (scratch.Get "a").x }}',
        "can't evaluate field x in type string",
    ),
    # CT mustEnv: "If the variable is not defined or is empty the substitution will fail with error";
    # envOrDefault: "If the environment variable is found, the value of that variable will be used.
    # This includes empty values. Otherwise, the default will be used"; env of an unset variable is "".
    ok("ct-mustenv", '{{ mustEnv "CLUSTER_ID" }}', "Abc-1"),
    bad("ct-mustenv-unset", '{{ mustEnv "NOPE" }}', 'mustEnv: environment variable "NOPE" is not set'),
    bad("ct-mustenv-empty", '{{ mustEnv "EMPTY" }}', 'mustEnv: environment variable "EMPTY" is empty'),
    ok(
        "ct-envordefault-empty-is-set",
        '[{{ envOrDefault "EMPTY" "d" }}] [{{ env "NOPE" }}] [{{ env "EMPTY" }}]',
        "[] [] []",
    ),
    ok("ct-env-or-idiom", '{{ or (env "EMPTY") "5s" }}', "5s"),
    # CT toTOML: '{{ tree "config" | explode | toTOML }}' renders maxconns = "5", minconns = "2", a
    # blank line, then "[admin]" with '  port = "..."' (its example's value differs from its tree).
    ok(
        "ct-totoml",
        '{{ tree "config" | explode | toTOML }}',
        'maxconns = "5"\nminconns = "2"\n\n[admin]\n  port = "1234"',
    ),
    # TOML v1.0: "Arrays are square brackets with values inside"; "Tables ... are defined by headers,
    # with square brackets on a line by themselves"; "[a.b]" dotted headers for nested tables;
    # "Arrays of tables ... [[name]]"; "Floats ... A fractional part is a decimal point followed by
    # one or more digits"; strings in double quotes with \" and \n escapes. Layout as in the CT
    # example: plain keys first, each table body indented two spaces per level below the top.
    ok(
        "ct-totoml-nested",
        "{{ toTOML . }}",
        'b = true\nf = 2.0\nl = [1, 2]\ns = "q\\"\\n"\n\n[a]\n  k = 1\n  [a.b]\n    z = "deep"\n\n[[srv]]\n  n = 1\n\n[[srv]]\n  n = 2',
        data={
            "s": 'q"\n',
            "l": [1, 2],
            "f": 2.0,
            "b": True,
            "a": {"k": 1, "b": {"z": "deep"}},
            "srv": [{"n": 1}, {"n": 2}],
        },
    ),
    ok("ct-totoml-quoted-key", "{{ toTOML . }}", '"a b" = 1\n"c.d" = 2', data={"a b": 1, "c.d": 2}),
    bad("ct-totoml-not-a-map", "{{ toTOML .l }}", "toTOML: wrong type for value; expected map"),
    # CT byMeta: "groups services by ServiceMeta values. Multiple service meta keys can be passed as a
    # comma separated string. |int can be added to a meta key to convert numbers from service meta
    # values to padded numbers in printf "%05d" % value format"; its redis example's groups are
    # dev_00001, prod_00001 and prod_00002.
    ok(
        "ct-bymeta-doc",
        '{{ range $k, $v := service "redis|any" | byMeta "environment,shard_number|int" }}{{ $k }}:{{ range $v }} {{ .ID }}{{ end }};{{ end }}',
        "dev_00001: redis-dev-1;prod_00001: redis-prod-1;prod_00002: redis-prod-2;",
    ),
    ok(
        "ct-bymeta-one-key",
        '{{ range $k, $v := service "web" | byMeta "env" }}{{ $k }}={{ len $v }};{{ end }}',
        "dev=1;prod=1;",
    ),
    ok(
        "ct-bymeta-missing-key",
        '{{ range $k, $v := service "web" | byMeta "zone" }}{{ $k }}={{ len $v }};{{ end }}',
        "zone_UNKNOWN=2;",
    ),
    bad("ct-bymeta-int-bad", '{{ service "web" | byMeta "env|int" }}', "byMeta: cannot parse prod as number"),
    # CT datacenters: '{{ range datacenters }}\n{{ . }}{{ end }}' renders dc1 and dc2 on lines; "An
    # optional boolean ... ignore datacenters which are inaccessible or do not have a current leader".
    ok("ct-datacenters", "{{ range datacenters }}\n{{ . }}{{ end }}", "\ndc1\ndc2"),
    ok("ct-datacenters-true", "{{ datacenters true }}", "[dc1]"),
    bad(
        "ct-datacenters-bad-arg",
        '{{ datacenters "dc1" }}',
        "datacenters: expected no argument or one boolean",
    ),
    # CT node: "The <NAME> attribute is optional; if omitted, the local agent node is used";
    # '{{ with node }}\n{{ .Node.Address }}{{ end }}' renders 10.5.2.6; another node by name; "To
    # access map data such as TaggedAddresses or Meta, use Go's text/template map indexing".
    ok("ct-node-local", "{{ with node }}\n{{ .Node.Address }}{{ end }}", "\n10.5.2.6"),
    ok("ct-node-named", '{{ with node "node2" }}{{ .Node.Address }}{{ end }}', "10.4.2.6"),
    ok("ct-node-missing", '{{ with node "nope" }}x{{ else }}none{{ end }}', "none"),
    ok(
        "ct-node-services",
        '{{ with node }}{{ range .Services }}{{ .Service }}:{{ .Port }}{{ end }} {{ index .Node.Meta "rack" }}{{ end }}',
        "web:2492 r1",
    ),
    # CT nodes: '{{ range nodes }}\n{{ .Address }}{{ end }}' renders each node's address on a line.
    ok("ct-nodes", "{{ range nodes }}\n{{ .Address }}{{ end }}", "\n10.5.2.6\n10.4.2.6"),
    ok(
        "ct-nodes-tagged",
        '{{ range nodes }}{{ index .TaggedAddresses "lan" }};{{ end }}',
        "10.5.2.6;10.4.2.6;",
    ),
    bad("ct-nodes-query", '{{ nodes "@dc2" }}', "nodes: a datacenter or near query is not supported"),
    # CT sockaddr: "Takes a quote-escaped template string as an argument and passes it on to
    # hashicorp/go-sockaddr templating engine"; '{{ sockaddr "GetPrivateIP" }}'.
    ok(
        "ct-sockaddr",
        '{{ sockaddr "GetPrivateIP" }} {{ sockaddr "GetInterfaceIP \\"eth0\\"" }}',
        "10.0.0.5 10.0.0.6",
    ),
    ok(
        "ct-timestamp",
        '{{ timestamp }} {{ timestamp "2006-01-02" }} {{ timestamp "unix" }}',
        "1970-01-01T00:00:00Z 1970-01-01 0",
    ),
]

# Go time.Format layouts (pkg.go.dev/time, "Layout": Jan 2 15:04:05 2006 MST, "_2" space-padded day,
# "002" day of year, ".000" fractional seconds with trailing zeros, ".999" without, "PM", "Z07:00"
# "Z" for UTC) at FIXED_NOW = 2009-11-10 23:04:05.123 UTC (Go's playground time, a Tuesday).
TIME_CASES: list[tuple[str, str]] = [
    ("Mon Jan _2 15:04:05 MST 2006", "Tue Nov 10 23:04:05 UTC 2009"),
    ("Monday, January 2, 2006 3:04PM", "Tuesday, November 10, 2009 11:04PM"),
    ("2006-01-02T15:04:05.000Z07:00", "2009-11-10T23:04:05.123Z"),
    ("15:04:05.999999 -0700 pm", "23:04:05.123 +0000 pm"),
    ("06/01/02 002 .9", "09/11/10 314 .1"),
    ("unix", "1257894245"),
]
