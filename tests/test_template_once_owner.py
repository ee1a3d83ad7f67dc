"""Nomad's template `once`, `uid`/`gid` and change_script `run_on_first_render`, read at parse and
honoured by the template runner (against the stand-in task host of test_template_runner) and the
render's sandboxed writer (the owner set by descriptor, never through a path a task controls)."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from agent.jobspec import JobspecError, parse_jobspec
from agent.state import SqliteStore
from agent.structs.model import ChangeScript, Task, Template
from agent.templates.render import render
from agent.templates.runner import TaskTemplates, TemplateDeps
from tests.test_template_runner import SERIAL_OF, CountingSource, StandInHost, _next_pass

SPEC = """
job "j" {
  group "g" {
    task "t" {
      driver = "docker"
      config { image = "x" }
      template {
        data        = "x"
        destination = "local/a"
        once        = true
        uid         = %(uid)s
        gid         = 2000
        change_mode = "script"
        change_script {
          command             = "/bin/true"
          run_on_first_render = true
        }
      }
    }
  }
}
"""


def test_once_uid_gid_and_run_on_first_render_are_read_without_a_warning() -> None:
    parsed = parse_jobspec(SPEC % {"uid": "1000"}, source="<request>")
    (tpl,) = parsed.job.groups[0].tasks[0].templates
    assert parsed.warnings == ()
    assert (tpl.once, tpl.uid, tpl.gid) == (True, 1000, 2000)
    assert tpl.change_script is not None and tpl.change_script.run_on_first_render
    unset = parse_jobspec(SPEC % {"uid": "-1"}, source="<request>").job.groups[0].tasks[0].templates[0]
    assert unset.uid is None  # Nomad's -1: the owner is left as the agent's


def test_an_owner_no_file_can_have_is_refused_naming_its_path() -> None:
    with pytest.raises(JobspecError) as info:
        parse_jobspec(SPEC % {"uid": str(2**32)}, source="<request>")
    (path, why) = info.value.problems[0]
    assert path.endswith("template[0].uid") or path.endswith("template.uid"), path
    assert "4294967294" in why


def _task(*templates: Template) -> Task:
    return Task(name="web", driver="docker", templates=templates)


def _runner(
    tmp_path: Path, task: Task, now: list[float]
) -> tuple[StandInHost, CountingSource, TaskTemplates]:
    source = CountingSource()
    host = StandInHost(tmp_path / "alloc")
    host.vault = source  # type: ignore[assignment]
    deps = TemplateDeps(
        SqliteStore(tmp_path / "state" / "state.db"),
        host.schedule,
        monotonic=lambda: now[0],
        jitter=random.Random(3).random,
    )
    return host, source, TaskTemplates(host, task, deps)


def _cert(name: str, *, once: bool = False) -> Template:
    return Template(f"secrets/{name}", data=SERIAL_OF.replace("NAME", name), change_mode="noop", once=once)


def test_a_once_template_is_not_rendered_again_when_its_secret_would_be_renewed(tmp_path: Path) -> None:
    """consul-template's once mode: the `once` template keeps its first render; the watched one
    beside it is re-rendered from a renewed certificate, and the once one's certificate is not
    issued again (nothing holds it for renewal)."""
    now = [1000.0]
    host, source, tt = _runner(tmp_path, _task(_cert("first", once=True), _cert("watched")), now)
    tt.render_all()
    assert sorted(source.fetched) == ["first", "watched"]
    source.fetched.clear()
    files = tmp_path / "alloc" / "web" / "secrets"
    before = {n: (files / n).read_text() for n in ("first", "watched")}
    _, rerender = _next_pass(host)
    now[0] += 0.8 * 3600 + 1
    rerender()
    assert source.fetched == ["watched"]
    assert (files / "first").read_text() == before["first"]
    assert (files / "watched").read_text() != before["watched"]


def test_a_task_of_once_templates_only_has_no_re_render_scheduled(tmp_path: Path) -> None:
    host, _, tt = _runner(tmp_path, _task(_cert("first", once=True)), [1000.0])
    tt.render_all()
    assert [d for d, fn in host.timers if getattr(fn, "__func__", None) is not TaskTemplates.act] == []


class PacedSource(CountingSource):
    """The task's Vault token after an agent restart with a restart window: the re-issue waits."""

    def restart_delay(self) -> float | None:
        return 5.0


def test_a_restore_render_put_on_a_timer_renders_the_once_template_too(tmp_path: Path) -> None:
    """After an agent restart the re-render of a running task may wait for its point of the restart
    window; that pass renders the `once` template as the restore would have (Nomad's new template
    hook renders it anew after a client restart), and later passes leave it alone again."""
    task = _task(_cert("first", once=True))
    host, _, tt = _runner(tmp_path, task, [1000.0])
    tt.render_all()
    tt.task_started()
    before = (tmp_path / "alloc" / "web" / "secrets" / "first").read_text()
    host.timers.clear()  # the first agent's timers die with it
    source = PacedSource()
    source.issued = 100  # the same Vault: serials go on
    host.vault = source  # type: ignore[assignment]
    restored = TaskTemplates(host, task, tt.d)
    assert restored.render_all() is False  # put on the restart window's timer
    (delay, rerender) = host.timers.pop()
    assert delay == 5.0
    rerender()
    assert source.fetched == ["first"]
    assert (tmp_path / "alloc" / "web" / "secrets" / "first").read_text() != before
    restored.schedule_rerender(0.0)  # any later pass: nothing renders it again
    host.timers.pop()[1]()
    assert source.fetched == ["first"]


def _script_task(*, first: bool = True, once: bool = False) -> Task:
    script = ChangeScript("/bin/sh", ("-c", "echo first"), run_on_first_render=first)
    return _task(Template("local/conf", data="v1", change_mode="script", change_script=script, once=once))


def test_run_on_first_render_runs_the_script_once_the_task_first_runs_only(tmp_path: Path) -> None:
    host, _, tt = _runner(tmp_path, _script_task(), [1000.0])
    tt.render_all()
    assert host.scripts_run == []  # not before the task runs
    tt.task_started()
    host.run_due_timers()
    assert host.scripts_run == [["/bin/sh", "-c", "echo first"]]
    assert ("Template Script", "/bin/sh exited 0: ") in host.events
    tt.task_started()  # a restart of the task: not a first render
    host.run_due_timers()
    assert len(host.scripts_run) == 1
    restored = TaskTemplates(host, tt.t, tt.d)  # an agent restart: the states say it was given
    restored.render_all()
    restored.task_started()
    host.run_due_timers()
    assert len(host.scripts_run) == 1


@pytest.mark.parametrize("first, once", [(False, False), (True, True)])
def test_no_first_render_script_without_the_flag_or_for_a_once_template(
    tmp_path: Path, first: bool, once: bool
) -> None:
    """Without the flag (Nomad's default), or on a `once` template (Nomad collects the scripts from
    the watching template manager only), the first start runs no script."""
    host, _, tt = _runner(tmp_path, _script_task(first=first, once=once), [1000.0])
    tt.render_all()
    tt.task_started()
    host.run_due_timers()
    assert host.scripts_run == []


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another owner needs root")


@needs_root
def test_the_rendered_file_gets_the_templates_uid_and_gid(tmp_path: Path) -> None:
    task_dir = tmp_path / "web"
    render(Template("local/owned", data="x", uid=4321, gid=8765), task_dir, {})
    st = (task_dir / "local" / "owned").stat()
    assert (st.st_uid, st.st_gid) == (4321, 8765)
    render(Template("local/group-only", data="x", gid=8765), task_dir, {})
    st = (task_dir / "local" / "group-only").stat()
    assert (st.st_uid, st.st_gid) == (os.geteuid(), 8765)  # no uid: the agent's own


@needs_root
def test_the_owner_never_reaches_a_file_outside_the_task_dir_linked_into_it(tmp_path: Path) -> None:
    """A task hard-links a file of the node at the destination: the render replaces the link with a
    file of its own (created, chowned by its descriptor and renamed over): the node's file keeps
    its owner and content."""
    outside = tmp_path / "node-file"
    outside.write_text("the node's")
    task_dir = tmp_path / "web"
    (task_dir / "local").mkdir(parents=True)
    os.link(outside, task_dir / "local" / "owned")
    render(Template("local/owned", data="x", uid=4321, gid=8765), task_dir, {})
    st = outside.stat()
    assert (st.st_uid, st.st_gid, outside.read_text()) == (0, 0, "the node's")
    assert (task_dir / "local" / "owned").stat().st_uid == 4321


def test_the_job_json_shows_them_and_reads_back_as_the_same_templates() -> None:
    """GET /v1/job's api.Template (Once, Uid, Gid, ChangeScript.RunOnFirstRender) and a task's
    RestartPolicy, registered again as JSON: the same job, no warning."""
    import json

    from agent.nomadapi.jobjson import parsed_job_json

    spec = SPEC.replace('config { image = "x" }', 'config { image = "x" }\n restart { attempts = 1 }')
    parsed = parse_jobspec(spec % {"uid": "1000"}, source="<request>")
    shown = parsed_job_json(parsed.job)
    (task,) = shown["TaskGroups"][0]["Tasks"]
    (tpl,) = task["Templates"]
    assert (tpl["Once"], tpl["Uid"], tpl["Gid"], tpl["ChangeScript"]["RunOnFirstRender"]) == (
        True,
        1000,
        2000,
        True,
    )
    assert task["RestartPolicy"]["Attempts"] == 1
    again = parse_jobspec(json.dumps({"Job": shown}), source="j.json")
    assert again.warnings == ()
    assert again.job.groups[0].tasks[0].templates == parsed.job.groups[0].tasks[0].templates
    assert again.job.groups[0].tasks[0].restart == parsed.job.groups[0].tasks[0].restart
