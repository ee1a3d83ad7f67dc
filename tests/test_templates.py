"""Template rendering without I/O beyond the task dir. The secret source here is a recording
stand-in for the dedupe and TTL bookkeeping only; rendering against a real OpenBao is in
tests/test_template_vault.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.model import Template
from agent.templates.render import RenderContext, TemplateRenderError, render


class Recording:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        self.calls.append(path)
        return {"certificate": f"CERT-{len(self.calls)}", "private_key": f"KEY-{len(self.calls)}"}, 30.0


def test_one_fetch_per_secret_per_pass_so_cert_and_key_match(tmp_path: Path) -> None:
    src = Recording()
    ctx = RenderContext({}, vault=src)
    cert = Template("secrets/cert.pem", data="{{ secret('pki_int/issue/web', common_name='a').certificate }}")
    key = Template(
        "secrets/key.pem", data="{{ secret('pki_int/issue/web', common_name='a').private_key }}", perms="0600"
    )
    render(cert, tmp_path, ctx)
    render(key, tmp_path, ctx)
    assert src.calls == ["pki_int/issue/web"]
    assert (tmp_path / "secrets/cert.pem").read_text() == "CERT-1"
    assert (tmp_path / "secrets/key.pem").read_text() == "KEY-1"
    assert (tmp_path / "secrets/key.pem").stat().st_mode & 0o777 == 0o600
    assert ctx.min_ttl == 30.0
    _, _, changed = render(cert, tmp_path, ctx)
    assert not changed


@pytest.mark.parametrize(
    ("tpl", "needle"),
    [
        (Template("local/a", data="{{ missing }}"), "'missing' is undefined"),
        (Template("local/a", data="{% if %}"), "TemplateSyntaxError"),
        (Template("local/a", data="{{ env('NOPE') }}"), "env('NOPE'): not set"),
        (Template("local/a", data="{{ key('a/b') }}"), "no Consul in this lab"),
        (Template("local/a", data="{{ secret('x') }}"), "no Vault is configured"),
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
        ("{% if %}", "template syntax error"),
        ("{{ vault_read('x') }}", "unknown name(s) vault_read"),
        ("{{ secret('pki_int/issue/web').certificate }}", None),
    ],
)
def test_templates_are_checked_at_submission(data: str, needle: str | None) -> None:
    from agent.templates.render import check_template

    problem = check_template(Template("local/x", data=data))
    assert (problem is None) if needle is None else (needle in str(problem))
