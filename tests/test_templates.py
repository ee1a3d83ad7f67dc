"""Template rendering without I/O beyond the task dir. The secret source here is a recording
stand-in for the dedupe and TTL bookkeeping only; rendering against a real OpenBao is in
tests/test_template_vault.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.structs.model import Template
from agent.templates.render import RenderContext, TemplateRenderError, render


class Recording:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def list_keys(self, path: str) -> list[str]:

        return []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        self.calls.append(path)
        return {"certificate": f"CERT-{len(self.calls)}", "private_key": f"KEY-{len(self.calls)}"}, 30.0


def test_one_fetch_per_secret_per_pass_so_cert_and_key_match(tmp_path: Path) -> None:
    src = Recording()
    ctx = RenderContext({}, vault=src)
    issue = '{{ with secret "pki_int/issue/web" "common_name=a" }}'
    cert = Template("secrets/cert.pem", data=issue + "{{ .Data.certificate }}{{ end }}")
    key = Template("secrets/key.pem", data=issue + "{{ .Data.private_key }}{{ end }}", perms="0600")
    render(cert, tmp_path, ctx)
    render(key, tmp_path, ctx)
    assert src.calls == ["pki_int/issue/web"]
    assert (tmp_path / "secrets/cert.pem").read_text() == "CERT-1"
    assert (tmp_path / "secrets/key.pem").read_text() == "KEY-1"
    assert (tmp_path / "secrets/key.pem").stat().st_mode & 0o777 == 0o600
    assert ctx.cache[next(iter(ctx.used))][1] == 30.0, "the TTL the pass learned (what held keeps)"
    _, _, changed = render(cert, tmp_path, ctx)
    assert not changed


@pytest.mark.parametrize(
    ("tpl", "needle"),
    [
        (Template("local/a", data="{{ missing }}"), 'function "missing" not defined'),
        (Template("local/a", data="line one\n  {{ if }}"), "2:"),
        (Template("local/a", data='{{ with secret "kv/x" }}{{ .Data.nope.deeper }}{{ end }}'), "1:"),
        (Template("local/a", data='{{ key "a/b" }}'), "no Consul in this lab"),
        (Template("local/a", data='{{ secret "x" }}'), "no Vault is configured"),
        (Template("local/../../escape", data="x"), "escapes the task directory"),
    ],
)
def test_render_errors_name_the_template_and_write_nothing(
    tmp_path: Path, tpl: Template, needle: str
) -> None:
    with pytest.raises(TemplateRenderError) as exc:
        render(tpl, tmp_path, {})
    assert tpl.destination in str(exc.value) and needle in str(exc.value)
    assert list(tmp_path.rglob("*")) == []


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ("{{ if }}", "local/x:1:"),
        ('{{ vault_read "x" }}', 'function "vault_read" not defined'),
        ('ok\n{{ with plugin "x" }}{{ .a }}{{ end }}', "local/x:2:"),
        ('{{ writeToFile "/tmp/x" "" "" "0644" "a" }}', "function writeToFile is not run by fieldlab-agent"),
        ('{{ with nomadVar "nomad/jobs/x" }}{{ .a }}{{ end }}', None),  # served: test_template_nomad_*
        ('{{ range nomadService "web" }}{{ .Address }}{{ end }}', None),
        ('{{ range nomadVarList "nomad/jobs" }}{{ .Path }}{{ end }}{{ nomadVarExists "x" }}', None),
        ('{{ nomadVarListSafe }}{{ nomadServices }}{{ nomadService 2 "k" "web" }}', None),
        ('{{ plugin "my-plugin" "arg" }}', "function plugin is not run"),
        ('{{ with secret "pki_int/issue/web" }}{{ .Data.certificate }}{{ end }}', None),
        ('{{ range service "web" }}{{ .Address }}:{{ .Port }}{{ end }}', None),
    ],
)
def test_templates_are_checked_at_submission(data: str, needle: str | None) -> None:
    from agent.templates.render import check_template

    problem = check_template(Template("local/x", data=data))
    assert (problem is None) if needle is None else (needle in str(problem))


def test_env_of_an_unset_variable_reads_as_empty_as_consul_template(tmp_path: Path) -> None:
    render(Template("local/a", data='[{{ env "NOPE" }}][{{ env "SET" }}]'), tmp_path, {"SET": "v"})
    assert (tmp_path / "local/a").read_text() == "[][v]"


def test_custom_delimiters_and_missing_key_errors_are_honoured(tmp_path: Path) -> None:
    src = Recording()
    ctx = RenderContext({"X": "1"}, vault=src)
    tpl = Template(
        "local/d", data='{{ not a template }} [[ env "X" ]]', left_delimiter="[[", right_delimiter="]]"
    )
    render(tpl, tmp_path, ctx)
    assert (tmp_path / "local/d").read_text() == "{{ not a template }} 1"
    lax = Template("local/m", data='{{ with secret "kv/a" }}{{ .Data.nope }}{{ end }}')
    render(lax, tmp_path, ctx)
    assert (tmp_path / "local/m").read_text() == "<no value>"
    strict = Template("local/s", data=lax.data, error_on_missing_key=True)
    with pytest.raises(TemplateRenderError, match='no entry for key "nope"'):
        render(strict, tmp_path, ctx)
    assert not (tmp_path / "local/s").exists()


def test_every_template_function_is_documented() -> None:
    from agent.templates.render import KNOWN_FUNCTIONS, NOT_RUN

    docs = (Path(__file__).resolve().parents[1] / "docs" / "templates.md").read_text()
    missing = [
        name
        for name in sorted(KNOWN_FUNCTIONS | NOT_RUN.keys())
        if not name.startswith("sprig_") and f"`{name}" not in docs
    ]
    assert missing == []


def test_env_files_are_parsed_as_godotenv_does() -> None:
    from agent.templates.envfile import parse_env_file

    text = (
        '# comment\n\nA=1\nexport B = two words \nC="quoted \\"x\\"\\nline"\nD=\'single $x\'\n'
        "E=plain # inline comment\nF=\nnot a pair\n9BAD=x\n"
    )
    values, bad = parse_env_file(text)
    assert values == {
        "A": "1",
        "B": "two words",
        "C": 'quoted "x"\nline',
        "D": "single $x",
        "E": "plain",
        "F": "",
    }
    assert bad == [9, 10]
