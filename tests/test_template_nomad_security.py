"""A task's templates read only the Nomad variables Nomad's implicit workload-identity policy grants
it with no ACL policy (acl/acl.go matchingVariablesCapabilitySet): exactly `nomad/jobs`,
`nomad/jobs/<job>`, `nomad/jobs/<job>/<group>` and `nomad/jobs/<job>/<group>/<task>`. A hostile
template that reaches for another job's variable, a path below its own or a path spelled to look
like its own fails the render with Nomad's permission error, and learns nothing of the value; the
agent's state is asked for the four paths only (agent.runner.services.NomadData)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent.runner.services import NomadData
from agent.state import SqliteStore
from agent.state.changes import ChangeIndex
from agent.structs.model import Template
from agent.structs.records import DesiredStatus
from agent.templates.errors import TemplateRenderError
from agent.templates.nomadfuncs import NomadView, Workload, may_read, readable_paths
from agent.templates.render import RenderContext, render

APP = Workload("app", "g", "t")
VICTIM_SECRET = "victim-db-password-0123456789"
OWN_SECRET = "own-db-password-9876543210"


def _put(store: SqliteStore, path: str, items: dict[str, str]) -> None:
    store.put(
        "var",
        path,
        {"items": items, "create_index": 1, "modify_index": 2, "create_time": 3, "modify_time": 4},
    )


class RecordingStore:
    """The state store, recording which variables were asked for."""

    def __init__(self, inner: SqliteStore) -> None:
        self.inner = inner
        self.got: list[tuple[str, str]] = []
        self.listed: list[str] = []

    def get(self, kind: str, key: str) -> Any:
        self.got.append((kind, key))
        return self.inner.get(kind, key)

    def list(self, kind: str, *args: Any, **kw: Any) -> Any:
        self.listed.append(kind)
        return self.inner.list(kind, *args, **kw)


def _runner(alloc_id: str, job: str, group: str) -> Any:
    """What NomadData reads of an alloc runner: its job and group (the agent's record of the alloc)."""
    return SimpleNamespace(
        id=alloc_id,
        job=SimpleNamespace(id=job),
        group=SimpleNamespace(name=group, services=(), tasks=()),
        rec=SimpleNamespace(address="10.0.0.9", ports=(), desired=DesiredStatus.RUN),
        alloc_running=lambda: True,
    )


@pytest.fixture
def state(tmp_path: Path) -> tuple[RecordingStore, NomadData]:
    sqlite = SqliteStore(tmp_path / "state.db")
    for path in ("nomad/jobs/victim", "nomad/jobs/victim/g", "nomad/jobs/victim/g/t", "victim"):
        _put(sqlite, path, {"password": VICTIM_SECRET})
    _put(sqlite, "nomad/jobs/app", {"password": OWN_SECRET})
    _put(sqlite, "nomad/jobs/app/g/t", {"flag": "on"})
    _put(sqlite, "nomad/jobs/app/below", {"password": VICTIM_SECRET})  # below its own: not granted
    _put(sqlite, "nomad/jobs", {"shared": "every-job-reads-this"})
    store = RecordingStore(sqlite)
    runners = {
        "alloc-app": _runner("alloc-app", "app", "g"),
        "alloc-victim": _runner("alloc-victim", "victim", "g"),
    }
    data = NomadData(store, lambda: runners, ChangeIndex(), lambda d, fn: None, "dc1", "", tmp_path)  # type: ignore[arg-type]
    return store, data


def _view(state: tuple[RecordingStore, NomadData]) -> NomadView:
    view = state[1].view("alloc-app", "t")
    assert view is not None
    return view


def test_the_rule_is_nomads_exact_four_paths() -> None:
    assert readable_paths(APP) == {"nomad/jobs", "nomad/jobs/app", "nomad/jobs/app/g", "nomad/jobs/app/g/t"}
    for path in readable_paths(APP):
        assert may_read(APP, "default", path)
    for path in (
        "nomad/jobs/victim",
        "nomad/jobs/app/below",  # below its own paths: no implicit grant
        "nomad/jobs/app/g/t/x",
        "nomad/jobs/app/../victim",
        "nomad/jobs/app/g/../../victim",
        "nomad/jobs/app/g/../../app",  # the same path, spelled otherwise: not the same string
        "nomad/jobs/app/",
        "nomad/jobs/appx",
        "nomad/job",
        "nomad",
        "",
        "victim",
    ):
        assert not may_read(APP, "default", path), path
    assert not may_read(APP, "ops", "nomad/jobs/app")  # another namespace
    # a name that could alias another job's path grants nothing but nomad/jobs
    assert readable_paths(Workload("a/g", "x", "t")) == {"nomad/jobs"}
    assert readable_paths(Workload("app", "", "t")) == {"nomad/jobs"}


def test_the_view_holds_only_what_the_task_may_read_and_only_those_are_asked_for(state: Any) -> None:
    store, _ = state
    view = _view(state)
    assert view.workload == APP  # from the alloc's record, never the task's environment
    assert set(view.variables) == {"nomad/jobs", "nomad/jobs/app", "nomad/jobs/app/g/t"}
    assert VICTIM_SECRET not in repr(view)
    assert {key for kind, key in store.got if kind == "var"} <= readable_paths(APP)
    assert "var" not in store.listed


@pytest.mark.parametrize(
    ("text", "query"),
    [
        (
            '{{ with nomadVar "nomad/jobs/victim" }}{{ .password }}{{ end }}',
            "nomad/jobs/victim@default.global",
        ),
        (
            '{{ with nomadVar "nomad/jobs/victim/g/t" }}{{ .password }}{{ end }}',
            "nomad/jobs/victim/g/t@default.global",
        ),
        (
            '{{ with nomadVar "nomad/jobs/app/../victim" }}{{ .password }}{{ end }}',
            "nomad/jobs/app/../victim@default.global",
        ),
        (
            '{{ with nomadVar "nomad/jobs/app/g/../../app" }}{{ .password }}{{ end }}',
            "nomad/jobs/app/g/../../app@default.global",
        ),
        (
            '{{ with nomadVar "/nomad/jobs/app/below/" }}{{ .password }}{{ end }}',
            "nomad/jobs/app/below@default.global",
        ),
        ('{{ with nomadVar "victim" }}{{ .password }}{{ end }}', "victim@default.global"),
        ('{{ with nomadVar "nomad/jobs/app@ops" }}{{ .password }}{{ end }}', "nomad/jobs/app@ops.global"),
        (
            '{{ with nomadVar "nomad/jobs/victim@default.global" }}{{ .password }}{{ end }}',
            "nomad/jobs/victim@default.global",
        ),
        ('{{ $p := "nomad/jobs/" }}{{ nomadVar (print $p "victim") }}', "nomad/jobs/victim@default.global"),
    ],
)
def test_a_hostile_template_reading_what_it_may_not_fails_as_nomad_does(
    tmp_path: Path, state: Any, text: str, query: str
) -> None:
    with pytest.raises(TemplateRenderError) as err:
        render(Template("local/stolen", data=text), tmp_path, RenderContext({}, nomad=_view(state)))
    msg = str(err.value)
    assert f"nomad.var.block({query}): Unexpected response code: 403 (Permission denied)" in msg, msg
    assert VICTIM_SECRET not in msg and OWN_SECRET not in msg
    assert not (tmp_path / "local" / "stolen").exists()


def test_nomad_var_exists_is_denied_too(tmp_path: Path, state: Any) -> None:
    with pytest.raises(
        TemplateRenderError, match=r"nomad\.var\.get\(nomad/jobs/victim@default\.global\): .*403"
    ):
        render(
            Template("local/x", data='{{ nomadVarExists "nomad/jobs/victim" }}'),
            tmp_path,
            RenderContext({}, nomad=_view(state)),
        )


def test_nomad_var_list_lists_only_what_the_task_may_read(tmp_path: Path, state: Any) -> None:
    ctx = RenderContext({}, nomad=_view(state))
    text = (
        "{{ range nomadVarList }}{{ .Path }} {{ end }}|"
        '{{ range nomadVarList "nomad/jobs/victim" }}{{ .Path }} {{ end }}|'
        '{{ range nomadVarList "@*" }}{{ .Path }} {{ end }}|'
        '{{ range nomadVarList "nomad/jobs@ops" }}{{ .Path }} {{ end }}|'
        '{{ range nomadVarListSafe "nomad/jobs/app" }}{{ .Path }} {{ end }}'
    )
    render(Template("local/list", data=text), tmp_path, ctx)
    out = (tmp_path / "local" / "list").read_text()
    own = "nomad/jobs nomad/jobs/app nomad/jobs/app/g/t "
    assert out == f"{own}||{own}||nomad/jobs/app nomad/jobs/app/g/t "  # "@*": every namespace, filtered
    assert "victim" not in out and "below" not in out


def test_a_render_error_does_not_show_a_variables_value(tmp_path: Path, state: Any) -> None:
    text = '{{ parseInt (nomadVar "nomad/jobs/app").password.Value }}'
    with pytest.raises(TemplateRenderError) as err:
        render(Template("local/x", data=text), tmp_path, RenderContext({}, nomad=_view(state)))
    assert "parseInt" in str(err.value)
    assert OWN_SECRET not in str(err.value) and "<redacted>" in str(err.value)
