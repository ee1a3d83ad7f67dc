"""HCL's native syntax (agent.jobspec.hclsyntax: tokens, bodies, errors, duplicates, heredocs, comments,
depth) and HCL's JSON syntax (agent.jobspec.hcljson)."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.jobspec import JobspecError, ParsedJob, parse_jobspec
from agent.jobspec.hcl import parse_hcl
from agent.jobspec.hclast import Interpolation, Literal, Template, TupleCons
from agent.jobspec.hcljson import is_hcl_json
from agent.jobspec.hclsyntax import MAX_DEPTH, Attribute, SyntaxBlock, SyntaxBody, line_of, parse_body, tokens
from agent.jobspec.tree import Block, Report


def _body(text: str) -> SyntaxBody:
    report = Report()
    body = parse_body(text, report)
    assert report.problems == [] and body is not None
    return body


def _error(text: str) -> str:
    report = Report()
    assert parse_body(text, report) is None
    ((path, reason),) = report.problems
    assert path == ""
    return reason


def _attr(body: SyntaxBody, name: str) -> Attribute:
    return body.attributes()[name]


def _one_block(value: object) -> Block:
    assert isinstance(value, list) and len(value) == 1 and isinstance(value[0], Block)
    return value[0]


def _only_block(body: SyntaxBody) -> SyntaxBlock:
    (block,) = body.blocks()
    return block


# --- the tokenizer -----------------------------------------------------------------------------------------


def test_tokens_of_a_body() -> None:
    text = 'job "x" { # c\n  a = 1 + 2\n  port http { static = 80 }\n}\n'
    assert [(t.kind, t.text) for t in tokens(text)] == [
        ("name", "job"),
        ("label", '"x"'),
        ("{", "{"),
        ("newline", " # c\n  "),
        ("name", "a"),
        ("=", "="),
        ("expression", "1 + 2"),
        ("newline", "\n  "),
        ("name", "port"),
        ("label", "http"),
        ("{", "{"),
        ("name", "static"),
        ("=", "="),
        ("expression", "80"),
        ("}", "}"),
        ("newline", "\n"),
        ("}", "}"),
        ("newline", "\n"),
    ]
    assert [t.pos for t in tokens("a = 1\n")] == [0, 2, 4, 5]


def test_an_expression_ends_at_the_new_line_outside_brackets() -> None:
    text = 'a = [1,\n  2] # x\nb = f(\n  "y"\n)\nc = { k = 1\n  j = 2 }\nd = x ? 1 : 2 // c\n'
    expressions = [t.text for t in tokens(text) if t.kind == "expression"]
    assert expressions == ["[1,\n  2]", 'f(\n  "y"\n)', "{ k = 1\n  j = 2 }", "x ? 1 : 2"]


# --- bodies ------------------------------------------------------------------------------------------------


def test_attributes_blocks_and_labels() -> None:
    body = _body(
        'job "web" {\n  count = 3\n  group g "two" {\n'
        '    enabled = true\n    none = null\n    s = "x"\n  }\n}\n'
    )
    job = _only_block(body)
    assert (job.type, job.labels) == ("job", ("web",))
    assert _attr(job.body, "count").expr == Literal(3)
    group = _only_block(job.body)
    assert (group.type, group.labels) == ("group", ("g", "two"))
    attrs = group.body.attributes()
    assert [attrs[k].expr for k in ("enabled", "none", "s")] == [Literal(True), Literal(None), Literal("x")]
    assert line_of('job "web" {\n  count = 3\n  group g "two" {\n', group.pos) == 3


def test_expressions_are_parsed_from_their_source() -> None:
    body = _body('a = var.x\nb = "${var.y}-z"\nc = [1, attr.k]\nd = 1e3\ne = -5\nf = "esc\\tape"\n')
    a = _attr(body, "a").expr
    assert isinstance(a, Interpolation) and a.source == "var.x"
    assert isinstance(_attr(body, "b").expr, Template)
    c = _attr(body, "c").expr
    assert isinstance(c, Interpolation) and isinstance(c.expr, TupleCons) and c.source == "[1, attr.k]"
    assert _attr(body, "d").expr == Literal(1000)  # not re-spelled as 1000.0 on the way
    assert _attr(body, "e").expr == Literal(-5)
    assert _attr(body, "f").expr == Literal("esc\tape")


def test_one_line_blocks() -> None:
    body = _body('port "http" { static = 80 }\nempty {}\nport "x" { to = [1,\n2] }\n')
    assert [(b.type, b.labels, len(b.body.items)) for b in body.blocks()] == [
        ("port", ("http",), 1),
        ("empty", (), 0),
        ("port", ("x",), 1),
    ]


def test_escaped_labels_and_labels_without_templates() -> None:
    assert _only_block(_body('b "a\\"q" "$${x}" {}\n')).labels == ('a"q', "${x}")
    assert "cannot hold ${...}" in _error('b "${var.x}" {}\n')


def test_comments_in_odd_places() -> None:
    text = """/* a header
spanning lines */ job /* before the label */ "x" /* after */ { // after the brace
  # a line comment
  a = /* before the value */ 1 # after the value
  b = [ # inside a list
    1, // one
    /* two */ 2,
  ]
  c = "#not a comment" // but this is
  d = "// neither"
  /* between */ e = 5
}
# at the end, without a new line"""
    job = _only_block(_body(text))
    attrs = job.body.attributes()
    assert attrs["a"].expr == Literal(1)
    b = attrs["b"].expr
    assert isinstance(b, Interpolation) and b.expr == TupleCons((Literal(1), Literal(2)))
    assert attrs["c"].expr == Literal("#not a comment")
    assert attrs["d"].expr == Literal("// neither")
    assert attrs["e"].expr == Literal(5)


def test_crlf_line_ends() -> None:
    assert _attr(_only_block(_body('b {\r\n  a = "x"\r\n}\r\n')).body, "a").expr == Literal("x")


# --- heredocs ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("heredoc", "expected"),
    [
        ("<<EOT\nline 1\n  line 2\nEOT", "line 1\n  line 2\n"),
        ("<<-EOT\n    a\n      b\n    EOT", "a\n  b\n"),
        ("<<EOT\nclosing marker with spaces and tabs\nEOT  \t", "closing marker with spaces and tabs\n"),
        ("<<EOT\nindented closing marker\n    EOT", "indented closing marker\n"),
        ('<<EOT\n"quotes" } { \\n stay\nEOT', '"quotes" } { \\n stay\n'),
        ("<<EOF\nEOT is not the end\nEOF", "EOT is not the end\n"),
        ("<<EOT\n\nEOT", "\n"),
    ],
)
def test_heredoc_forms(heredoc: str, expected: str) -> None:
    text = f"job {{\n  a = {heredoc}\n  b = 1\n}}\n"
    body = parse_hcl(text, Report(), {})
    assert body is not None
    assert dict(_one_block(body["job"]).body) == {"a": expected, "b": 1}


def test_heredoc_with_an_interpolation_and_an_unterminated_one() -> None:
    body = parse_hcl('locals {\n  x = "v"\n}\na = <<EOT\n${local.x}!\nEOT\n', Report(), {})
    assert body == {"a": "v!\n"}
    reason = _error("a = <<EOT\nno end\n")
    assert reason.startswith("HCL syntax error at line 1, column 5: unterminated heredoc")


# --- errors ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('job "x" {\n  a = 1\n', 'line 3, column 1: unexpected end of input; expected "}"'),
        ("a = 1 2\n", 'line 1, column 7: unexpected "2"; expected a new line'),
        ("a =\nb = 1\n", "line 1, column 4: unexpected new line; expected an expression"),
        ("job {\n  a = [1,\n}\n", 'line 3, column 1: unexpected "}"; expected an expression'),
        ("a = f(1\n", 'line 2, column 1: unexpected end of input; expected ","'),
        ("}\n", 'line 1, column 1: unexpected "}"; expected an attribute or a block'),
        ("a = 1\n-2\n", 'line 2, column 1: unexpected "-"; expected an attribute or a block'),
        ('job "x" = 1\n', 'line 1, column 9: unexpected "="; expected "{" or a block label'),
        ("job [\n", 'line 1, column 5: unexpected "["; expected "=" or a block'),
        ('a = "open\n', "line 1, column 10: a quoted string cannot span lines"),
        ("a = 1 /* open\n", "line 1, column 7: unterminated comment"),
        ('a = "\\q"\n', "line 1, column 6: invalid escape sequence \\q"),
        ("a = (1 +\n", "line 2, column 1: unexpected end of input; expected an expression"),
        ('{"job": {}}', 'line 1, column 1: unexpected "{"; expected an attribute or a block'),
    ],
)
def test_syntax_errors_say_where_and_what_was_expected(text: str, reason: str) -> None:
    assert _error(text).startswith(f"HCL syntax error at {reason}")


def test_blocks_nested_too_deeply_are_a_syntax_error() -> None:
    deep = "b {\n" * (MAX_DEPTH + 1) + "}\n" * (MAX_DEPTH + 1)
    reason = _error(deep)
    assert f"blocks nested more than {MAX_DEPTH} levels deep" in reason
    assert reason.startswith(f"HCL syntax error at line {MAX_DEPTH + 1}, column 3")
    _body("b {\n" * MAX_DEPTH + "}\n" * MAX_DEPTH)
    report = Report()
    assert parse_body("a = " + "[" * 5000 + "]" * 5000 + "\n", report) is None
    assert "nested too deeply" in report.problems[0][1]


# --- duplicates --------------------------------------------------------------------------------------------


def test_duplicates_are_reported_and_the_last_value_wins() -> None:
    text = (
        'job "j" {\n  group "g" {\n    count = 1\n    count = 2\n'
        "    meta = {}\n    meta {}\n  }\n  x {}\n  x = 1\n}\n"
    )
    report = Report()
    body = parse_body(text, report)
    assert body is not None
    assert report.problems == [
        ("job.j.group.g.count", "set more than once"),
        ("job.j.group.g.meta", "set more than once (as an attribute and a block)"),
        ("job.j.x", "set more than once"),
    ]
    evaluated = parse_hcl(text, Report(), {})
    assert evaluated is not None
    assert _one_block(_one_block(evaluated["job"]).body["group"]).body["count"] == 2


def test_duplicate_object_keys() -> None:
    report = Report()
    parse_body('env = { A = 1, "A" = 2, n = { x = 1\n x = 2 } }\nl = [{ k = 1, k = 2 }]\n', report)
    assert report.problems == [
        ("env.A", "set more than once"),
        ("env.n.x", "set more than once"),
        ("l.k", "set more than once"),
    ]


# --- evaluation through parse_hcl ---------------------------------------------------------------------------


def test_runtime_references_are_kept_verbatim_with_their_source() -> None:
    body = parse_hcl('a = [attr.kernel.name, "${NOMAD_ALLOC_ID}", env["HOME"]]\nb = meta.x\n', Report(), {})
    assert body == {"a": ["${attr.kernel.name}", "${NOMAD_ALLOC_ID}", '${env["HOME"]}'], "b": "${meta.x}"}


# --- HCL's JSON syntax -------------------------------------------------------------------------------------

_HCL_JSON = {
    "variable": {"image": {"default": "redis"}},
    "job": {
        "name": {"group": {"g": {"task": {"t": {"driver": "docker", "config": {"image": "${var.image}"}}}}}}
    },
}


def _json_job(data: object, **variables: object) -> ParsedJob:
    return parse_jobspec(json.dumps(data), source="j.json", fmt="json", variables=variables)


def _json_problems(data: object) -> list[tuple[str, str]]:
    with pytest.raises(JobspecError) as info:
        _json_job(data)
    return info.value.problems


def test_hcl_json_evaluates_variables() -> None:
    parsed = _json_job(_HCL_JSON)
    assert (parsed.job.id, parsed.job.groups[0].name) == ("name", "g")
    assert parsed.job.groups[0].tasks[0].config["image"] == "redis"
    assert _json_job(_HCL_JSON, image="nginx").job.groups[0].tasks[0].config["image"] == "nginx"


def test_hcl_json_is_detected_by_its_top_level_keys() -> None:
    assert is_hcl_json(json.dumps(_HCL_JSON))
    assert (
        is_hcl_json(' \n{ "job": {}}') and is_hcl_json('{"locals": {}}') and is_hcl_json('{"variables": 1}')
    )
    assert not is_hcl_json('{"Job": {"ID": "x"}}') and not is_hcl_json('{"ID": "x"}')
    assert not is_hcl_json("{}") and not is_hcl_json("[]") and not is_hcl_json('{"jobs": {}}')


def test_hcl_json_labels_repeated_blocks_and_typed_variables() -> None:
    data = {
        "//": "a comment",
        "variable": {"ports": {"type": "list(number)", "default": [8080, 8081]}},
        "locals": {"name": '${upper("svc")}'},
        "job": {
            "j": {
                "group": [
                    {
                        "a": {
                            "network": {
                                "mode": "bridge",
                                "port": {"http": {"to": "${var.ports[0]}"}, "admin": [{"to": 9000}]},
                            },
                            "service": [{"name": "${local.name}-1", "port": "http"}, {"port": "admin"}],
                            "task": {
                                "t": {"driver": "docker", "config": {"image": "x", "args": ["$${NOT}"]}}
                            },
                        }
                    },
                    {"b": {"task": {"t": {"driver": "exec", "config": {"command": "/bin/true"}}}}},
                ]
            }
        },
    }
    job = _json_job(data).job
    assert [g.name for g in job.groups] == ["a", "b"]
    network = job.groups[0].network
    assert network is not None and [(p.label, p.to) for p in network.ports] == [
        ("http", 8080),
        ("admin", 9000),
    ]
    assert len(job.groups[0].services) == 2 and job.groups[0].services[0].name == "SVC-1"
    assert job.groups[0].tasks[0].config["args"] == ["${NOT}"]


def test_hcl_json_dynamic_blocks() -> None:
    data = {
        "job": {
            "j": {
                "group": {
                    "g": {
                        "task": {
                            "t": {
                                "driver": "docker",
                                "config": {"image": "x"},
                                "dynamic": {
                                    "template": {
                                        "for_each": ["a", "b"],
                                        "iterator": "f",
                                        "content": {"data": "${f.value}", "destination": "local/${f.value}"},
                                    }
                                },
                            }
                        }
                    }
                }
            }
        }
    }
    templates = _json_job(data).job.groups[0].tasks[0].templates
    assert [(t.data, t.destination) for t in templates] == [("a", "local/a"), ("b", "local/b")]


def test_hcl_json_problems_have_paths() -> None:
    assert _json_problems({"job": {"j": {}}, "Job": {}}) == [
        ("Job", "not part of an HCL jobspec (its top-level keys are job, variable, variables, locals)")
    ]
    ((path, reason),) = _json_problems({"job": {"j": {"group": {"g": "nope"}}}})
    assert path == "job.j.group.g" and "expected group blocks" in reason
    ((path, reason),) = _json_problems({"job": {"j": {"meta": {"k": "${"}}}})
    assert path == "job.j.meta.k" and "cannot read the template" in reason
    ((path, reason),) = _json_problems({"variable": {"x": {"type": "strin g"}}, "job": {}})
    assert path == "variable.x.type" and "cannot read the expression" in reason
    problems = _json_problems({"job": {"j": {"group": {"g": {"count": "${var.nope}"}}}}})
    assert ("job.j.group.g.count", 'unknown variable "var.nope"') in problems
    ((path, reason),) = _json_problems({"job": 1})
    assert path == "job" and "expected job blocks" in reason


def test_hcl_json_syntax_errors_are_json_errors() -> None:
    with pytest.raises(JobspecError) as info:
        parse_jobspec('{"job": {"j": {,}}}', source="j.json")
    ((path, reason),) = info.value.problems
    assert path == "" and reason.startswith("JSON syntax error at line 1, column 16")


def test_the_corpus_hcl_json_example_matches_its_native_twin() -> None:
    data = {
        "variable": {"image": {"type": "string", "default": "redis:7"}},
        "job": {
            "x": {
                "group": {
                    "cache": {
                        "task": {
                            "redis": {
                                "driver": "docker",
                                "config": {"image": "${var.image}"},
                                "resources": {"cpu": 100, "memory": 64},
                            }
                        }
                    }
                }
            }
        },
    }
    native = """variable "image" {
  type    = string
  default = "redis:7"
}
job "x" {
  group "cache" {
    task "redis" {
      driver = "docker"
      config { image = var.image }
      resources {
        cpu    = 100
        memory = 64
      }
    }
  }
}
"""
    assert _json_job(data).job == parse_jobspec(native, source="n.hcl").job


# --- never raise -------------------------------------------------------------------------------------------

_PIECES = [
    "job",
    '"x"',
    "group",
    "a",
    "b-c",
    "=",
    "==",
    "{",
    "}",
    "[",
    "]",
    "(",
    ")",
    ",",
    "\n",
    " ",
    "1",
    "-1",
    "1.5e3",
    "true",
    "null",
    '"s"',
    '"${',
    "var.x",
    "attr.y",
    "# c\n",
    "// c",
    "/*",
    "*/",
    "<<EOT\n",
    "<<-EOT\n",
    "EOT",
    "  EOT \n",
    '"',
    "\\",
    "${",
    "%{",
    "dynamic",
    "content",
    "for_each",
    "variable",
    "locals",
    "?",
    ":",
    "\r\n",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=40) | st.text(max_size=60))
def test_random_hcl_only_records_problems(parts: list[str] | str) -> None:
    text = parts if isinstance(parts, str) else "".join(parts)
    report = Report()
    body = parse_hcl(text, report, {})
    assert body is not None or report.problems
    assert all(isinstance(path, str) and isinstance(reason, str) for path, reason in report.problems)
    with contextlib.suppress(JobspecError):
        parse_jobspec(text, source="r.hcl", fmt="hcl")
