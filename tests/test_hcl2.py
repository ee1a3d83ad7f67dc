"""HCL2 in jobspecs, evaluated as Nomad's jobspec2 does: variables, locals, expressions, templates,
functions and dynamic blocks; runtime interpolation kept verbatim; every failure one recorded problem."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.jobspec import JobspecError, ParsedJob, load_jobspec, parse_jobspec
from agent.jobspec.hcl import parse_hcl
from agent.jobspec.hclast import ParseError
from agent.jobspec.hcleval import Scope, evaluate
from agent.jobspec.hclexpr import parse_expression, parse_template
from agent.jobspec.hclfuncs import FUNCTIONS
from agent.jobspec.hclvalues import Context, EvalError
from agent.jobspec.hclvars import parse_var_args, parse_var_file
from agent.jobspec.tree import Block, Invalid, Report

_T = "job.example.group.web.task.t"


def _job(task: str = "", group: str = "", top: str = "") -> str:
    return f"""{top}
job "example" {{
  group "web" {{
    {group}
    task "t" {{
      driver = "docker"
      {task or 'config { image = "fieldlab/busybox:latest" }'}
    }}
  }}
}}
"""


def _parse(text: str, **variables: object) -> ParsedJob:
    return parse_jobspec(text, source="t.hcl", variables=variables)


def _problems(text: str, **variables: object) -> list[tuple[str, str]]:
    with pytest.raises(JobspecError) as info:
        _parse(text, **variables)
    return info.value.problems


_VARS: dict[str, object] = {
    "l": ["a", "b"],
    "m": {"k": "v", "x": 1},
    "o": [{"name": "n1"}, {"name": "n2"}],
    "n": None,
    "s": "str",
    "image": "img",
}


def _ev(text: str) -> object:
    return evaluate(parse_expression(text), Scope(Context(), variables=_VARS))


# --- expressions ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("1 + 2 * 3", 7),
        ("(1 + 2) * 3", 9),
        ("-1 - -2", 1),
        ("10 / 4", 2.5),
        ("10 / 5", 2),
        ("10 % 3", 1),
        ("2 * 3 > 5 && !false || false", True),
        ("1 == 1.0", True),
        ('1 == "1"', False),
        ("true != false", True),
        ('"5" + 1', 6),
        ('true ? "a" : "b"', "a"),
        ("var.n == null ? 0 : 1", 0),
        ("var.l[0]", "a"),
        ("var.l.1", "b"),
        ('var.m["k"]', "v"),
        ("var.m.x", 1),
        ("var.o[*].name", ["n1", "n2"]),
        ("var.o.*.name", ["n1", "n2"]),
        ("var.n[*]", []),
        ("var.s[*]", ["str"]),
        ('[for i, x in var.l : "${i}=${x}"]', ["0=a", "1=b"]),
        ('[for x in var.l : upper(x) if x != "a"]', ["B"]),
        ('{for k, v in var.m : k => v if k != "x"}', {"k": "v"}),
        ('{for x in ["a", "b", "a"] : x => x...}', {"a": ["a", "a"], "b": ["b"]}),
        ('{a = 1, "b" = 2, (var.s) = 3, c: 4}', {"a": 1, "b": 2, "str": 3, "c": 4}),
        ("[1, [2, 3], {a = null}]", [1, [2, 3], {"a": None}]),
        ('"${var.l}"', ["a", "b"]),  # a template of one interpolation is its value
        ('"a ${var.s} %{ if var.m.x > 0 }yes%{ else }no%{ endif }"', "a str yes"),
        ('"%{ for x in var.l ~} ${x} %{~ endfor }"', "ab"),
        ('"%{ for i, x in var.l }${i}${x},%{ endfor }"', "0a,1b,"),
        ('"$${x} %%{y}"', "${x} %{y}"),
        ('"tab\\t\\"q\\" \\u00e9"', 'tab\t"q" é'),
        ("1.5e3", 1500),
    ],
)
def test_expressions(expr: str, expected: object) -> None:
    assert _ev(expr) == expected


def test_heredocs_interpolate_and_strip() -> None:
    text = _job(
        task="""config { image = "x" }
      template {
        destination = "local/x"
        data = <<-EOT
          hello ${var.name}
          %{ for p in ["a", "b"] ~}
          - ${p}
          %{ endfor ~}
          at ${NOMAD_ALLOC_ID} $${kept}
        EOT
      }""",
        top='variable "name" { default = "you" }',
    )
    (template,) = _parse(text).job.groups[0].tasks[0].templates
    assert template.data == "hello you\n- a\n- b\nat ${NOMAD_ALLOC_ID} ${kept}\n"


def test_heredoc_closing_marker_may_have_trailing_spaces() -> None:
    text = _job(
        task='config { image = "x" }\ntemplate {\ndestination = "local/x"\ndata = <<EOT\nhi\nEOT  \t\n}'
    )
    (template,) = _parse(text).job.groups[0].tasks[0].templates
    assert template.data == "hi\n"


# --- functions --------------------------------------------------------------------------------------------

_FUNCTION_CASES = [
    ('chomp("hello\\n\\n")', "hello"),
    ('format("Hello, %s!", "Ander")', "Hello, Ander!"),
    ('format("There are %d lights", 4)', "There are 4 lights"),
    (
        'format("%-5s|%5.2f|%03d|%q|%v|%t|%x|%%", "ab", 3.14159, 7, "q", [1, 2], true, 255)',
        'ab   | 3.14|007|"q"|[1,2]|true|ff|%',
    ),
    ('formatlist("Hello, %s!", ["Valentina", "Ander"])', ["Hello, Valentina!", "Hello, Ander!"]),
    (
        'formatlist("%s, %s!", "Salutations", ["Valentina", "Ander"])',
        ["Salutations, Valentina!", "Salutations, Ander!"],
    ),
    ('indent(2, "[\\n  foo,\\n]")', "[\n    foo,\n  ]"),
    ('join(", ", ["foo", "bar", "baz"])', "foo, bar, baz"),
    ('lower("HELLO")', "hello"),
    ('upper("hello")', "HELLO"),
    ('replace("1 + 2 + 3", "+", "-")', "1 - 2 - 3"),
    ('replace("hello world", "/w.*d/", "everybody")', "hello everybody"),
    ('replace("hello world", "/(h)(e)/", "$2$1")', "ehllo world"),
    ('regex("[a-z]+", "53453453.345345aaabbbccc23454")', "aaabbbccc"),
    ('regex("(\\\\d\\\\d\\\\d\\\\d)-(\\\\d\\\\d)-(\\\\d\\\\d)", "2019-02-01")', ["2019", "02", "01"]),
    (
        'regex("^(?:(?P<scheme>[^:/?#]+):)?(?://(?P<authority>[^/?#]*))?", "https://terraform.io/docs/")',
        {"scheme": "https", "authority": "terraform.io"},
    ),
    ('regexall("[a-z]+", "1234abcd5678efgh9")', ["abcd", "efgh"]),
    ('split(",", "foo,bar,baz")', ["foo", "bar", "baz"]),
    ('strrev("hello")', "olleh"),
    ('substr("hello world", 1, 4)', "ello"),
    ('substr("hello world", -5, -1)', "world"),
    ('title("hello world")', "Hello World"),
    ('trim("?!hello?!", "!?")', "hello"),
    ('trimprefix("helloworld", "hello")', "world"),
    ('trimsuffix("helloworld", "world")', "hello"),
    ('trimspace("  hello\\n\\n")', "hello"),
    ('alltrue([true, "true"])', True),
    ("anytrue([true, false])", True),
    ('chunklist(["a", "b", "c", "d", "e"], 2)', [["a", "b"], ["c", "d"], ["e"]]),
    ('coalesce("", "b")', "b"),
    ('coalescelist([], ["c", "d"])', ["c", "d"]),
    ('compact(["a", "", "b", null, "c"])', ["a", "b", "c"]),
    ('concat(["a", ""], ["b", "c"])', ["a", "", "b", "c"]),
    ('contains(["a", "b", "c"], "a")', True),
    ('distinct(["a", "b", "a", "c", "d", "b"])', ["a", "b", "c", "d"]),
    ('element(["a", "b", "c"], 3)', "a"),
    ('flatten([["a", "b"], [], ["c"]])', ["a", "b", "c"]),
    ('index(["a", "b", "c"], "b")', 1),
    ("keys({a = 1, c = 2, d = 3})", ["a", "c", "d"]),
    ('length("hello")', 5),
    ('lookup({a = "ay", b = "bee"}, "c", "what?")', "what?"),
    ('merge({a = "b", c = "d"}, {e = "f", c = "z"})', {"a": "b", "c": "z", "e": "f"}),
    ("range(3)", [0, 1, 2]),
    ("range(1, 8, 2)", [1, 3, 5, 7]),
    ("range(4, 1)", [4, 3, 2]),
    ("reverse([1, 2, 3])", [3, 2, 1]),
    ('setintersection(["a", "b"], ["b", "c"], ["b", "d"])', ["b"]),
    (
        'setproduct(["development", "staging"], ["app1", "app2"])',
        [["development", "app1"], ["development", "app2"], ["staging", "app1"], ["staging", "app2"]],
    ),
    ('setsubtract(["a", "b", "c"], ["a", "c"])', ["b"]),
    ('setunion(["a", "b"], ["b", "c"], ["d"])', ["a", "b", "c", "d"]),
    ('slice(["a", "b", "c", "d"], 1, 3)', ["b", "c"]),
    ('sort(["e", "d", "a", "x"])', ["a", "d", "e", "x"]),
    ("sum([1, 2, 3.5])", 6.5),
    ('transpose({"a" = ["1", "2"], "b" = ["2", "3"]})', {"1": ["a"], "2": ["a", "b"], "3": ["b"]}),
    ("values({a = 3, c = 2, d = 1})", [3, 2, 1]),
    ('zipmap(["a", "b"], [1, 2])', {"a": 1, "b": 2}),
    ('base64decode("SGVsbG8gV29ybGQ=")', "Hello World"),
    ('base64encode("Hello World")', "SGVsbG8gV29ybGQ="),
    ('csvdecode("a,b,c\\n1,2,3\\n4,5,6")', [{"a": "1", "b": "2", "c": "3"}, {"a": "4", "b": "5", "c": "6"}]),
    ('jsondecode("{\\"hello\\": \\"world\\"}")', {"hello": "world"}),
    ('jsonencode({"hello" = "world"})', '{"hello":"world"}'),
    ('jsonencode({b = [1, 2.5, "<x>"], a = null})', '{"a":null,"b":[1,2.5,"\\u003cx\\u003e"]}'),
    ('urlencode("Hello World!")', "Hello+World%21"),
    ('yamldecode("hello: world")', {"hello": "world"}),
    ('yamlencode({"a" = "b", "c" = "d"})', "a: b\nc: d\n"),
    ("abs(-12.4)", 12.4),
    ("ceil(5.1)", 6),
    ("floor(4.9)", 4),
    ("log(16, 2)", 4),
    ("max(12, 54, 3)", 54),
    ("max([12, 54, 3]...)", 54),
    ("min(12, 54, 3)", 3),
    ('parseint("100", 10)', 100),
    ('parseint("FF", 16)', 255),
    ('parseint("-10", 16)', -16),
    ("pow(3, 2)", 9),
    ("signum(-13)", -1),
    ("can(var.m.nope)", False),
    ('try(var.m.nope, "fallback")', "fallback"),
    ('convert("5", number)', 5),
    ('convert([1, "a"], list(string))', ["1", "a"]),
    ('tobool("true")', True),
    ('tolist(["a", "b"])', ["a", "b"]),
    ("tomap({a = 1})", {"a": 1}),
    ('tonumber("1")', 1),
    ('toset(["a", "b", "a"])', ["a", "b"]),
    ("tostring(2.5)", "2.5"),
    ('uuidv5("dns", "www.terraform.io")', "a5008fae-b28c-5ba5-96cd-82b4c53552d6"),
    ('uuidv5("url", "https://www.terraform.io/")', "9db6f67c-dd95-5ea0-aa5b-e70e5c5f7cf5"),
    ('formatdate("DD MMM YYYY hh:mm ZZZ", "2018-01-02T23:12:01Z")', "02 Jan 2018 23:12 UTC"),
    ('formatdate("EEEE, DD-MMM-YY hh:mm:ss ZZZ", "2018-01-02T23:12:01Z")', "Tuesday, 02-Jan-18 23:12:01 UTC"),
    ('formatdate("MMM D, YYYY", "2018-01-02T23:12:01Z")', "Jan 2, 2018"),
    ('timeadd("2017-11-22T00:00:00Z", "10m")', "2017-11-22T00:10:00Z"),
    ('timeadd("2017-11-22T00:00:00Z", "-1h30m")', "2017-11-21T22:30:00Z"),
    ('md5("hello world")', "5eb63bbbe01eeed093cb22bb8f5acdc3"),
    ('sha1("hello world")', "2aae6c35c94fcfb415dbe95f408b9ce91ee846ed"),
    ('sha256("hello world")', "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9"),
    (
        'sha512("")',
        "cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
    ),
    ('cidrhost("10.12.112.0/20", 16)', "10.12.112.16"),
    ('cidrnetmask("172.16.0.0/12")', "255.240.0.0"),
    ('cidrsubnet("172.16.0.0/12", 4, 2)', "172.18.0.0/16"),
    # Terraform's cidrsubnets example: newbits 4, 4, 8, 4 of 10.1.0.0/16
    (
        'cidrsubnets("10.1.0.0/16", 4, 4, 8, 4)',
        ["10.1.0.0/20", "10.1.16.0/20", "10.1.32.0/24", "10.1.48.0/20"],
    ),
    ('regex_replace("hello world", "o", "0")', "hell0 w0rld"),
    ('regex_replace("a1b22", "([a-z])([0-9]+)", "$2$1")', "1a22b"),
    ('strlen("héllo")', 5),
    # Go's filepath.Base and filepath.Dir, as Nomad's jobspec2 has them
    ('basename("/etc/nomad.d/client.hcl")', "client.hcl"),
    ('basename("a/b/")', "b"),
    ('basename("")', "."),
    ('basename("/")', "/"),
    ('dirname("/etc/nomad.d/client.hcl")', "/etc/nomad.d"),
    ('dirname("a")', "."),
    ('dirname("//a//b//")', "/a/b"),
    ('dirname("./a/../b/c")', "b"),
]


@pytest.mark.parametrize(("expr", "expected"), _FUNCTION_CASES)
def test_functions_give_the_documented_results(expr: str, expected: object) -> None:
    assert _ev(expr) == expected


def test_every_function_is_tested_and_documented() -> None:
    tested = {expr.split("(", 1)[0] for expr, _ in _FUNCTION_CASES}
    untested = set(FUNCTIONS) - tested - {"uuidv4", "timestamp", "bcrypt", "file", "fileexists", "pathexpand"}
    assert untested == set()
    docs = (Path(__file__).parents[1] / "docs" / "hcl2.md").read_text()
    assert [name for name in FUNCTIONS if f"`{name}`" not in docs] == []


def test_functions_with_changing_results() -> None:
    uuid = _ev("uuidv4()")
    assert isinstance(uuid, str) and len(uuid) == 36
    assert isinstance(_ev("timestamp()"), str)
    hashed = _ev('bcrypt("x", 4)') if _bcrypt_installed() else "$2a$"
    assert isinstance(hashed, str) and hashed.startswith("$2a$")


def _bcrypt_installed() -> bool:
    try:
        import bcrypt  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("range(1e9)", "more than 1024 values"),
        ("pow(2, 100000)", "too large"),
        ("1 / 0", "division by zero"),
        # Go's regexp (RE2): a lookaround or a backreference is a syntax error, not a slow match
        ('regex("a(?=b)", "ab")', "error parsing regexp: invalid or unsupported Perl syntax: `(?=`"),
        ('regex("(a)\\\\1", "aa")', "invalid escape sequence: `\\1`"),
        ('regex("(?P<n>a)(b)", "ab")', "cannot mix named and unnamed capture groups"),
        ('regex("b", "aaa")', "did not match any part of the given string"),
        ('format("%999999999d", 1)', "too large"),
        ('lookup({}, "k")', 'no key "k"'),
        ('list("a")', "removed from HCL"),
        ('file("x")', "not available"),
        ("var.imgae", 'unknown variable "var.imgae"; did you mean "var.image"?'),
        ('uper("x")', 'unknown function "uper"; did you mean "upper"?'),
        ('try(var.nope, "x")', 'unknown variable "var.nope"'),
        ("var.l.name", 'a list has no attribute "name"'),
        ("var.l[5]", "out of range"),
        ('"${var.l} x"', "cannot be part of a string"),
        ("upper(attr.kernel.name)", "runtime values"),
        ("[for x in 1 : x]", "needs a list, set or map"),
        ("99999999999999999999999999999999999999 * 10 * " * 12 + "10", "too large"),
    ],
)
def test_evaluation_errors(expr: str, message: str) -> None:
    with pytest.raises(EvalError) as info:
        _ev(expr)
    assert message in str(info.value)


def test_file_reads_relative_to_the_base_dir(tmp_path: Path) -> None:
    (tmp_path / "index.html").write_text("<p>hi</p>\n")
    text = _job(
        task='config { image = "x" }\ntemplate {\ndestination = "local/x"\ndata = file("index.html")\n}'
    )
    report = Report()
    body = parse_hcl(text, report, {}, base_dir=tmp_path)
    assert report.problems == [] and body is not None
    assert _template_data(body) == "<p>hi</p>\n"
    report = Report()
    body = parse_hcl(text.replace("index.html", "missing"), report, {}, base_dir=tmp_path)
    assert "cannot read" in str(body)
    (tmp_path / "big").write_bytes(b"x" * ((1 << 20) + 1))
    body = parse_hcl(text.replace("index.html", "big"), Report(), {}, base_dir=tmp_path)
    assert "larger than 1 MiB" in str(body)


def _template_data(body: object) -> object:
    for key in ("job", "group", "task", "template"):
        assert isinstance(body, Mapping)
        (block,) = body[key]
        assert isinstance(block, Block)
        body = block.body
    assert isinstance(body, Mapping)
    return body["data"]


def test_files_read_on_the_cli_side_are_sent_and_used_by_the_agent(tmp_path: Path) -> None:
    """Nomad's CLI evaluates file() next to the jobspec; here the CLI sends what it read, and the
    agent evaluates file() from that bundle only, never from its own disk."""
    (tmp_path / "index.html").write_text("<p>hi</p>\n")
    text = _job(
        task='config { image = "x" }\ntemplate {\ndestination = "local/x"\n'
        'data = fileexists("nope") ? "?" : file("index.html")\n}'
    )
    spec = tmp_path / "job.hcl"
    spec.write_text(text)
    cli_side = load_jobspec(spec)
    assert cli_side.files == {"index.html": "<p>hi</p>\n"}
    agent_side = parse_jobspec(text, source="<request>", files=cli_side.files)
    assert agent_side.job.groups[0].tasks[0].templates[0].data == "<p>hi</p>\n"
    assert agent_side.files == cli_side.files  # stored with the job, for the same answer at restore
    with pytest.raises(JobspecError, match="was not sent with the jobspec"):
        parse_jobspec(text.replace("index.html", "/etc/passwd"), source="<request>", files=cli_side.files)


def test_file_is_refused_without_a_base_dir() -> None:
    text = _job(task='config { image = file("x") }')
    ((path, reason), *_) = _problems(text)
    assert path == f"{_T}.config.image" and "not read from a file" in reason


# --- variables --------------------------------------------------------------------------------------------

_VARIABLES = """
variable "image" {
  type    = string
  default = "fieldlab/busybox:latest"
}
variable "n" {
  type = number
  default = 1
  validation {
    condition     = var.n >= 0 && var.n < 10
    error_message = "n must be between 0 and 9, not ${var.n}"
  }
}
variable "tags" {
  type    = list(string)
  default = []
}
variable "env" {
  type    = map(string)
  default = {}
}
variable "svc" {
  type    = object({ port = number, name = optional(string) })
  default = { port = 80 }
}
variable "flag" {
  type    = bool
  default = false
}
variable "anything" {
  description = "no type: any"
  default     = "x"
}
"""


def _var_job() -> str:
    return _job(
        group="count = var.n",
        task="""config {
        image = var.image
        args  = concat(var.tags, [tostring(var.svc.port), "${var.flag}", var.anything])
      }
      env = var.env""",
        top=_VARIABLES,
    )


def test_variable_defaults() -> None:
    group = _parse(_var_job()).job.groups[0]
    task = group.tasks[0]
    assert group.count == 1
    assert (task.config["image"], task.config["args"]) == ("fieldlab/busybox:latest", ["80", "false", "x"])


def test_variable_strings_are_parsed_by_type() -> None:
    group = _parse(
        _var_job(),
        image="other:1",
        n="3",
        tags='["a", "b"]',
        env='{ A = "1", B = 2 }',
        svc="{ port = 8080 }",
        flag="true",
        anything="[1]",  # untyped: the string stays a string
    ).job.groups[0]
    task = group.tasks[0]
    assert group.count == 3
    assert task.config["image"] == "other:1"
    assert task.config["args"] == ["a", "b", "8080", "true", "[1]"]
    assert dict(task.env) == {"A": "1", "B": "2"}


def test_variable_values_are_converted_to_the_type() -> None:
    group = _parse(_var_job(), n=2.0, tags=["x", 5], svc={"port": "81", "extra": 1}, flag=True).job.groups[0]
    assert group.count == 2
    assert group.tasks[0].config["args"] == ["x", "5", "81", "true", "x"]


def test_variable_validation_fails_at_the_variables_path() -> None:
    assert _problems(_var_job(), n="12") == [("variable.n", "n must be between 0 and 9, not 12")]


def test_variable_values_that_do_not_convert_are_rejected() -> None:
    ((path, reason),) = _problems(_var_job(), n="many")
    assert path == "" and reason.startswith('variable "n": invalid value:')
    ((path, reason),) = _problems(_var_job(), svc={"name": "x"})
    assert 'lacks the attribute "port"' in reason


def test_missing_and_undeclared_variables_are_named() -> None:
    text = _job(top='variable "x" {}\nvariable "y" { type = string }')
    assert _problems(text, imagee="x", y="ok") == [
        ("", 'variable "imagee": a value was given but the jobspec declares no variable "imagee"'),
        ("", 'variable "x": no value given; set it with -var x=... or a default'),
    ]


def test_variable_declarations_are_checked() -> None:
    text = _job(top='variable "x" {\n  type = strin\n  colour = "red"\n}\nvariable "y" { default = var.x }')
    problems = _problems(text)
    assert [p for p, _ in problems] == ["variable.x.colour", "variable.x.type", "variable.y.default"]
    assert "variables cannot be used here" in problems[2][1]


def test_variables_block_shorthand() -> None:
    text = _job(task="config { image = var.image }", top='variables {\n  image = "short:1"\n}')
    assert _parse(text).job.groups[0].tasks[0].config["image"] == "short:1"


# --- locals -----------------------------------------------------------------------------------------------


def test_locals_in_any_order_and_several_blocks() -> None:
    top = """
locals {
  image = "${local.repo}/${var.name}:${local.tag}"
}
variable "name" { default = "busybox" }
locals {
  repo = "fieldlab"
  tag  = lower("LATEST")
}"""
    text = _job(task="config { image = local.image }", top=top)
    assert _parse(text).job.groups[0].tasks[0].config["image"] == "fieldlab/busybox:latest"


def test_local_cycles_are_one_problem_naming_them() -> None:
    text = _job(top='locals {\n  a = local.b\n  b = local.c\n  c = "${local.a}"\n  d = 1\n}')
    assert _problems(text) == [
        ("locals.c", "locals refer to each other in a cycle: local.a -> local.b -> local.c -> local.a")
    ]


def test_local_errors_stop_at_the_local() -> None:
    text = _job(task="config { image = local.a }", top="locals {\n  a = local.b\n  b = upper(var.nope)\n}")
    assert _problems(text) == [("locals.b", 'unknown variable "var.nope"')]


# --- dynamic blocks ---------------------------------------------------------------------------------------


def test_dynamic_blocks_nested_with_iterator_and_labels() -> None:
    top = """
variable "tasks" {
  default = {
    api = { templates = { "a.conf" = "A", "b.conf" = "B" } }
    web = { templates = {} }
  }
}
variable "ports" { default = [{ label = "http", to = 80 }, { label = "admin", to = 9000 }] }"""
    group = """network {
      mode = "bridge"
      dynamic "port" {
        for_each = var.ports
        iterator = p
        labels   = [p.value.label]
        content { to = p.value.to }
      }
    }
    dynamic "task" {
      for_each = var.tasks
      labels   = [task.key]
      content {
        driver = "docker"
        config { image = "img-${task.key}" }
        dynamic "template" {
          for_each = task.value.templates
          iterator = tpl
          content {
            data        = "${task.key}:${tpl.value}"
            destination = "local/${tpl.key}"
          }
        }
      }
    }"""
    text = f"""{top}
job "example" {{
  group "web" {{
    {group}
  }}
}}"""
    g = _parse(text).job.groups[0]
    assert [(p.label, p.to) for p in g.network.ports] == [("http", 80), ("admin", 9000)]  # type: ignore[union-attr]
    assert [(t.name, t.config["image"]) for t in g.tasks] == [("api", "img-api"), ("web", "img-web")]
    assert [(t.data, t.destination) for t in g.tasks[0].templates] == [
        ("api:A", "local/a.conf"),
        ("api:B", "local/b.conf"),
    ]
    assert g.tasks[1].templates == ()


def test_dynamic_block_errors() -> None:
    text = _job(task='config { image = "x" }\ndynamic "template" {\nfor_each = 5\ncontent {}\n}')
    ((path, reason),) = _problems(text)
    assert path == f"{_T}.template" and "for_each must be a list, set or map" in reason


# --- runtime interpolation --------------------------------------------------------------------------------


def test_runtime_interpolation_is_kept_verbatim() -> None:
    task = """config {
        image = var.image
        args  = ["${NOMAD_ALLOC_ID}-${var.image}", "${attr.unique.hostname}", "$${var.image}",
                 "${meta.x} ${node.unique.name} ${env["HOME"]} ${node.datacenter}", attr.kernel.name]
      }"""
    text = _job(task=task, top='variable "image" { default = "img" }')
    args = _parse(text).job.groups[0].tasks[0].config["args"]
    assert args == [
        "${NOMAD_ALLOC_ID}-img",
        "${attr.unique.hostname}",
        "${var.image}",
        '${meta.x} ${node.unique.name} ${env["HOME"]} ${node.datacenter}',
        "${attr.kernel.name}",
    ]


def test_runtime_references_cannot_be_evaluated() -> None:
    ((path, reason),) = _problems(_job(task='config { image = "x" }\nenv = { A = "${upper(attr.x)}" }'))
    assert path == f"{_T}.env.A" or path == f"{_T}.env"
    assert "attr.x" in reason and "runtime value" in reason


# --- one problem per failure --------------------------------------------------------------------------------


def test_unknown_variable_and_function_are_one_problem_each() -> None:
    text = _job(
        group="count = var.cuont",
        task='config { image = "x" }\nenv = { A = uper("x") }',
        top='variable "count" { default = 1 }',
    )
    assert _problems(text) == [
        ("job.example.group.web.count", 'unknown variable "var.cuont"; did you mean "var.count"?'),
        (f"{_T}.env.A", 'unknown function "uper"; did you mean "upper"?'),
    ]


def test_unknown_variable_in_config_is_one_problem() -> None:
    text = _job(task="config { image = var.imgae }", top='variable "image" { default = "x" }')
    assert _problems(text) == [
        (f"{_T}.config.image", 'unknown variable "var.imgae"; did you mean "var.image"?')
    ]


# --- the CLI's -var and -var-file -------------------------------------------------------------------------


def test_var_args() -> None:
    assert parse_var_args(["a=1", "b=x=y", "a=2", "c="]) == {"a": "2", "b": "x=y", "c": ""}
    with pytest.raises(JobspecError) as info:
        parse_var_args(["novalue", "=x"])
    assert len(info.value.problems) == 2


def test_var_files() -> None:
    hcl = 'image = "x"\nn = 3\ntags = ["a", upper("b")]\nm = { a = 1 }\n'
    assert parse_var_file(hcl, "v.hcl") == {"image": "x", "n": 3, "tags": ["a", "B"], "m": {"a": 1}}
    assert parse_var_file('{"n": 3.0, "l": [1]}', "v.json") == {"n": 3, "l": [1]}
    with pytest.raises(JobspecError) as info:
        parse_var_file("a = var.b\nblock {}\n", "v.hcl")
    assert [p for p, _ in info.value.problems] == ["block", "a"]
    with pytest.raises(JobspecError):
        parse_var_file("{", "v.json")


# --- parser details ---------------------------------------------------------------------------------------


def test_templates_parse_directives_and_strip_markers() -> None:
    template = parse_template('"a %{~ if x ~} b %{~ endif ~} c"')
    assert len(template.parts) == 3
    with pytest.raises(ParseError):
        parse_template('"%{ if x }no end"')
    with pytest.raises(ParseError):
        parse_expression("(" * 200 + "1" + ")" * 200)


def test_deeply_nested_values_are_problems_not_crashes() -> None:
    deep = "[" * 2000 + "]" * 2000
    text = _job(task=f'config {{ image = "x"\nargs = jsondecode("{deep}") }}')
    assert _problems(text)


# --- never raise ------------------------------------------------------------------------------------------

_TOKENS = [
    "var.l",
    "var.m",
    "var.s",
    "local.x",
    "attr.x",
    "x",
    "1",
    "0",
    "-",
    "+",
    "*",
    "/",
    "%",
    "==",
    "!",
    "&&",
    "||",
    "?",
    ":",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ".",
    "[*]",
    ".*",
    "...",
    '"',
    "${",
    "%{",
    "~",
    "for",
    "in",
    "if",
    "=>",
    "=",
    "upper(",
    "range(",
    "format(",
    "jsondecode(",
    "regex(",
    "try(",
    "can(",
    "null",
    "true",
    "1e400",
    "99999999999999999999",
    '"a"',
    '"%d"',
    "\\",
    "\n",
    "<<EOT\n",
    "EOT",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=25) | st.text(max_size=40))
def test_random_expressions_never_raise(parts: list[str] | str) -> None:
    text = parts if isinstance(parts, str) else " ".join(parts)
    try:
        node = parse_expression(text)
    except ParseError:
        return
    with contextlib.suppress(EvalError):
        evaluate(node, Scope(Context(), variables=_VARS))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(_TOKENS), max_size=15))
def test_random_jobspec_values_never_raise(parts: list[str]) -> None:
    report = Report()
    text = _job(task=f"config {{ image = {' '.join(parts)} }}")
    body = parse_hcl(text, report, {})
    assert body is not None or report.problems
    assert not isinstance(body, Invalid)
