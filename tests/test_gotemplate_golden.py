"""Golden tests of agent.gotemplate (Go text/template + consul-template functions). The cases and
the documentation each group checks are in tests/gotemplate_cases.py."""

from __future__ import annotations

from typing import Any

import pytest

from agent.gotemplate import (
    REFUSED_FUNCTIONS,
    Call,
    TemplateError,
    TemplateExecError,
    TemplateSyntaxError,
    consul_functions,
    function_calls,
    parse,
)
from tests.gotemplate_cases import CASES, EPOCH, FIXED_NOW, TIME_CASES, Case, FakeSource


def funcs(now: Any = EPOCH) -> dict[str, Any]:
    return consul_functions(FakeSource(), now=lambda: now)


def run(text: str, data: Any = None, **kw: Any) -> str:
    return parse(text, name="t").execute(data, funcs=funcs(), **kw)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_golden(case: Case) -> None:
    left, right = case.delims

    def go() -> str:
        tpl = parse(case.tpl, name="t", left_delim=left, right_delim=right)
        return tpl.execute(case.the_data(), funcs=funcs(), missing_key_error=case.missing_key_error)

    if case.err is None:
        assert go() == case.want
        return
    kind = TemplateSyntaxError if case.syntax else TemplateExecError
    with pytest.raises(kind) as info:
        go()
    assert case.err in str(info.value)
    assert str(info.value).startswith("t:")


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) >= 90


@pytest.mark.parametrize(("layout", "want"), TIME_CASES)
def test_timestamp_layouts(layout: str, want: str) -> None:
    tpl = parse("{{ timestamp .layout }}", name="t")
    assert tpl.execute({"layout": layout}, funcs=funcs(FIXED_NOW)) == want


def test_secret_write_params_reach_the_source() -> None:
    src = FakeSource()
    args = '"common_name=a" "ttl=1h" "alt_names=b=c"'
    tpl = parse('{{ with secret "pki/issue/r" ' + args + " }}{{ .Data.certificate }}{{ end }}")
    assert tpl.execute(None, funcs=consul_functions(src)) == "CERT for a"
    assert src.writes == [("pki/issue/r", {"common_name": "a", "ttl": "1h", "alt_names": "b=c"})]


# -- error positions: "<name>:<line>:<col>: <reason>", 1-based, at the failing operand


def test_exec_error_position_in_a_multiline_template() -> None:
    text = "line one\n  {{ .a }}\nthird {{ .a.b }} x\n"
    with pytest.raises(TemplateExecError) as info:
        parse(text, name="secrets/cert.pem").execute({"a": "str"})
    err = info.value
    assert (err.name, err.line, err.col) == ("secrets/cert.pem", 3, 10)
    assert str(err) == "secrets/cert.pem:3:10: can't evaluate field b in type string"
    assert err.reason == "can't evaluate field b in type string"


def test_function_error_position_names_the_function() -> None:
    text = 'a\nb {{ "x" | printf "%s" }}\n   {{ key "nope" }}'
    with pytest.raises(TemplateExecError) as info:
        run(text)
    assert (info.value.line, info.value.col) == (3, 7)
    assert 'error calling key: key "nope" not found' in str(info.value)


def test_syntax_error_position() -> None:
    with pytest.raises(TemplateSyntaxError) as info:
        parse("a\nb\n  {{ if }}", name="local/x")
    assert info.value.line == 3
    assert str(info.value).startswith("local/x:3:")
    with pytest.raises(TemplateSyntaxError) as info:
        parse("ok\n{{ 1 }} {{ .a | 2 }}", name="n")
    assert (info.value.line, info.value.col) == (2, 17)


def test_parse_checks_function_names_when_given() -> None:
    names = funcs().keys()
    parse('{{ secret "x" | toJSON }}{{ len "a" }}', funcs=names)
    with pytest.raises(TemplateSyntaxError, match='function "plugin" not defined'):
        parse('x\n{{ with plugin "a" }}{{ end }}', funcs=names)
    parse('{{ plugin "a" }}')  # without funcs any identifier parses...
    with pytest.raises(TemplateExecError, match='function "plugin" not defined'):
        parse('{{ plugin "a" }}').execute(None, funcs=funcs())  # ...and execution refuses it


def test_python_errors_inside_functions_are_wrapped() -> None:
    def boom(x: Any) -> Any:
        raise KeyError("deep")

    with pytest.raises(TemplateExecError, match=r"t:1:4: error calling boom: 'deep'"):
        parse("{{ boom 1 }}", name="t").execute(None, funcs={"boom": boom})


# -- function_calls


def test_function_calls_lists_names_constant_args_and_positions() -> None:
    text = (
        '{{ with secret "pki/issue/r" "common_name=a" }}{{ .Data.certificate }}{{ end }}\n'
        '{{ define "t" }}{{ nomadVar "nomad/jobs/x" }}{{ end }}'
        '{{ "kv/data/y" | secret }}{{ secret (printf "kv/%s" .p) }}{{ printf "%s" timestamp }}\n'
        "{{ .x | plugin }}"
    )
    calls = function_calls(parse(text, name="t"))
    assert Call("secret", ("pki/issue/r", "common_name=a"), 1, 9) in calls
    assert Call("nomadVar", ("nomad/jobs/x",), 2, 20) in calls
    assert Call("secret", ("kv/data/y",), 2, 72) in calls
    assert Call("secret", (None,), 2, 84) in calls
    assert Call("printf", ("kv/%s", None), 2, 92) in calls
    assert Call("printf", ("%s", None), 2, 116) in calls
    assert Call("timestamp", (), 2, 128) in calls
    assert len(calls) == 8
    assert Call("plugin", (None,), 3, 9) in calls
    refused = {c.name for c in calls} & REFUSED_FUNCTIONS
    assert refused == {"plugin"}


def test_refused_functions() -> None:
    assert {"plugin", "writeToFile"} == REFUSED_FUNCTIONS
    assert not REFUSED_FUNCTIONS & funcs().keys()
    nomad = {
        "nomadVar",
        "nomadVarList",
        "nomadVarListSafe",
        "nomadVarExists",
        "nomadService",
        "nomadServices",
    }
    assert nomad <= funcs().keys()  # served from the agent's state (tests/test_template_nomad_*.py)


# -- write, budgets, bounds


def test_write_receives_chunks_in_order() -> None:
    chunks: list[str] = []
    out = run("a{{ range .l }}{{ . }}{{ end }}b", {"l": [1, 2]}, write=chunks.append)
    assert out == "a12b"
    assert "".join(chunks) == "a12b"


def test_exceptions_from_write_propagate_unchanged() -> None:
    class TooBig(Exception):
        pass

    seen: list[str] = []
    budget = 5
    size = 0

    def write(chunk: str) -> None:
        nonlocal size
        size += len(chunk)
        if size > budget:
            raise TooBig(size)
        seen.append(chunk)

    with pytest.raises(TooBig) as info:
        run("{{ range 1000 }}xx{{ end }}", write=write)
    assert info.value.args == (6,)
    assert "".join(seen) == "xxxx"


def test_executetemplate_output_does_not_reach_write() -> None:
    chunks: list[str] = []
    text = '{{ define "c" }}inner{{ end }}{{ $v := executeTemplate "c" }}[{{ $v }}]'
    assert run(text, write=chunks.append) == "[inner]"
    assert "".join(chunks) == "[inner]"


def test_step_budget() -> None:
    with pytest.raises(TemplateExecError, match="budget of 1000 steps"):
        run("{{ range 100000000000 }}{{ end }}", max_steps=1000)
    with pytest.raises(TemplateExecError, match="budget"):
        run("{{ range loop 0 100000000000 }}{{ end }}", max_steps=1000)
    with pytest.raises(TemplateExecError, match="budget"):
        run('{{ $x := "aaaaaaaa" }}{{ range 100 }}{{ $x = print $x $x }}{{ end }}')
    assert run("{{ range 10 }}{{ end }}", max_steps=1000) == ""


def test_parse_nesting_bound() -> None:
    parse("{{ " + "(" * 90 + "1" + ")" * 90 + " }}")
    with pytest.raises(TemplateSyntaxError, match="nesting too deep"):
        parse("{{ " + "(" * 101 + "1" + ")" * 101 + " }}")
    with pytest.raises(TemplateSyntaxError, match="nesting too deep"):
        parse("{{ if 1 }}" * 101 + "{{ end }}" * 101)
    assert parse("{{ if 1 }}" * 99 + "x" + "{{ end }}" * 99).execute() == "x"


def test_deep_data_and_deep_recursion_are_template_errors() -> None:
    deep: Any = []
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(TemplateError):
        run("{{ . }}", deep)
    with pytest.raises(TemplateError):
        run("{{ toJSON . }}", deep)
    text = '{{ define "r" }}{{ if . }}{{ template "r" (slice . 1) }}{{ end }}{{ end }}{{ template "r" . }}'
    with pytest.raises(TemplateExecError, match="too deep"):
        run(text, list(range(3000)))


def test_template_is_reusable_and_independent_between_runs() -> None:
    tpl = parse("{{ $x := .a }}{{ $x }}{{ range .l }}{{ . }}{{ end }}", name="t")
    assert tpl.execute({"a": 1, "l": [1]}) == "11"
    assert tpl.execute({"a": 2, "l": []}) == "2"


def test_range_over_tuple_and_loop_value() -> None:
    assert run("{{ range . }}{{ . }}{{ end }}", (1, 2)) == "12"
    assert run("{{ loop 3 }} {{ len (loop 2 5) }}") == "[0 1 2] 3"


# -- scratch, sprig names, new data functions


def test_scratch_is_fresh_for_each_execute() -> None:
    """CT Scratch: "Scratch data is not shared between templates and is not cached between
    invocations"."""
    tpl = parse('[{{ scratch.Get "n" }}]{{ scratch.Set "n" 1 }}{{ scratch.Get "n" }}', name="t")
    assert tpl.execute(None, funcs=funcs()) == "[<no value>]1"
    assert tpl.execute(None, funcs=funcs()) == "[<no value>]1"
    other = parse('[{{ scratch.Get "n" }}]', name="u")
    assert other.execute(None, funcs=funcs()) == "[<no value>]"


def test_scratch_method_calls_are_not_function_calls() -> None:
    calls = function_calls(parse('{{ scratch.Set "a" (env "X") }}{{ $s := scratch }}{{ $s.Get "a" }}'))
    assert [(c.name, c.args) for c in calls] == [("scratch", ()), ("env", ("X",)), ("scratch", ())]


def test_unsupported_sprig_function_is_a_syntax_error_naming_it() -> None:
    names = funcs().keys()
    parse('{{ "a" | sprig_upper }}', funcs=names)
    with pytest.raises(TemplateSyntaxError) as info:
        parse('ok\n{{ "a" | sprig_genPrivateKey }}', name="t", funcs=names)
    assert (info.value.line, info.value.col) == (2, 10)
    assert 'the sprig function "genPrivateKey" is not supported' in str(info.value)
    with pytest.raises(TemplateExecError, match='function "sprig_genPrivateKey" not defined'):
        parse("{{ sprig_genPrivateKey }}").execute(None, funcs=funcs())


def test_sockaddr_forwards_the_expression_text() -> None:
    src = FakeSource()
    out = parse('{{ sockaddr "GetInterfaceIP \\"eth0\\"" }}').execute(None, funcs=consul_functions(src))
    assert out == "10.0.0.6"
    assert src.sockaddr_exprs == ['GetInterfaceIP "eth0"']


def test_consul_functions_names_every_new_function() -> None:
    names = funcs().keys()
    new = {"mustEnv", "toTOML", "scratch", "byMeta", "datacenters", "node", "nodes", "sockaddr"}
    assert new <= names
    assert len([n for n in names if n.startswith("sprig_")]) >= 40
