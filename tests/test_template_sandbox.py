"""The template sandbox (agent/templates/render.py): what a task can plant in its own directory must
never make the agent (root) write, re-mode or read anything outside the alloc's sandbox; a template
has a time and a size budget; every failure is a TemplateRenderError and the runner goes on.

No root needed: everything happens in tmp dirs. The layout is an alloc dir holding the task dirs
`web/` and `side/` and the shared `alloc/` dir, and an `outside/` dir standing for the host."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import resource
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.allocdir import sandbox
from agent.state import SqliteStore
from agent.structs.model import Task, Template
from agent.templates import render as R
from agent.templates.render import RenderContext, TemplateRenderError, check_template, render
from agent.templates.runner import TaskHost, TaskTemplates, TemplateDeps

PROMPT = 10.0  # a render that should return at once; a hang fails the test instead of hanging it


@dataclass
class Layout:
    alloc: Path
    task: Path
    other: Path
    shared: Path
    outside: Path
    secret: Path  # a host file the agent must never overwrite, re-mode or copy


@pytest.fixture
def lay(tmp_path: Path) -> Layout:
    alloc = tmp_path / "alloc-1"
    task, other, shared = alloc / "web", alloc / "side", alloc / "alloc"
    for d in (task / "local", task / "secrets", other / "local", shared):
        d.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "approle.json"
    secret.write_text('{"secret_id": "s3cr3t"}')
    secret.chmod(0o600)
    return Layout(alloc, task, other, shared, outside, secret)


def fingerprint(p: Path) -> tuple[str, int]:
    st = os.lstat(p)
    return hashlib.sha256(p.read_bytes()).hexdigest(), st.st_mode


def promptly(fn: Callable[[], Any], limit: float = PROMPT) -> Any:
    """Run fn in a thread; fail (not hang) if it does not return within `limit` seconds."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:
            box["error"] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()
    th.join(limit)
    assert not th.is_alive(), f"did not return within {limit}s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


def refused(tpl: Template, task_dir: Path, env: Any = None, **kw: Any) -> str:
    with pytest.raises(TemplateRenderError) as exc:
        promptly(lambda: render(tpl, task_dir, env if env is not None else {}, **kw))
    msg = str(exc.value)
    assert re.match(rf"template {re.escape(tpl.destination)}(:\d+:\d+)?: ", msg), msg
    return msg


@pytest.fixture(autouse=True)
def warm_worker(tmp_path: Path) -> None:
    """Start the render worker outside the timings (its start-up is not the template's budget)."""
    render(Template("local/warm", data="w"), tmp_path / "warm", {})


# -- writes: links, FIFOs, directories at and on the way to the destination -------------------------


def test_a_symlink_planted_at_the_old_temp_name_is_never_followed(lay: Layout) -> None:
    before = fingerprint(lay.secret)
    (lay.task / "local" / ".cfg.tmp").symlink_to(lay.secret)
    render(Template("local/cfg", data="new content", perms="0644"), lay.task, {})
    assert fingerprint(lay.secret) == before
    assert (lay.task / "local" / "cfg").read_text() == "new content"
    assert (lay.task / "local" / ".cfg.tmp").is_symlink(), "the planted link is left alone"


def test_links_planted_at_every_candidate_temp_name_refuse_the_render(
    lay: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox, "_temp_token", lambda: "planted")
    (lay.task / "local" / ".cfg.planted.tmp").symlink_to(lay.secret)
    before = fingerprint(lay.secret)
    msg = refused(Template("local/cfg", data="x", perms="0666"), lay.task)
    assert "temporary name" in msg
    assert fingerprint(lay.secret) == before
    assert not (lay.task / "local" / "cfg").exists()


def test_a_stale_temp_file_or_link_of_a_dead_agent_is_removed_not_followed(lay: Layout) -> None:
    stale = lay.task / "local" / ".cfg.0123456789abcdef.tmp"
    stale.symlink_to(lay.secret)
    before = fingerprint(lay.secret)
    render(Template("local/cfg", data="x"), lay.task, {})
    assert fingerprint(lay.secret) == before
    assert not stale.is_symlink()
    assert sorted(p.name for p in (lay.task / "local").iterdir()) == ["cfg"]


def test_a_symlink_at_the_destination_is_refused_and_the_target_untouched(lay: Layout) -> None:
    before = fingerprint(lay.secret)
    (lay.task / "local" / "cfg").symlink_to(lay.secret)
    msg = refused(Template("local/cfg", data="pwned", perms="0777"), lay.task)
    assert "symbolic link" in msg
    assert fingerprint(lay.secret) == before
    assert os.readlink(lay.task / "local" / "cfg") == str(lay.secret)


def test_a_fifo_at_the_destination_does_not_block_the_render(lay: Layout) -> None:
    os.mkfifo(lay.task / "local" / "cfg")
    t0 = time.monotonic()
    msg = refused(Template("local/cfg", data="x"), lay.task)
    assert "FIFO" in msg and time.monotonic() - t0 < 2.0


def test_a_directory_at_the_destination_is_refused(lay: Layout) -> None:
    (lay.task / "local" / "cfg").mkdir()
    assert "directory" in refused(Template("local/cfg", data="x"), lay.task)


@pytest.mark.parametrize("linked", ["local", "local/sub"])
def test_a_symlinked_directory_on_the_way_to_the_destination_is_refused(lay: Layout, linked: str) -> None:
    target = lay.task / linked
    if target.exists():
        target.rename(lay.task / "local.orig")
    target.symlink_to(lay.outside, target_is_directory=True)
    msg = refused(Template("local/sub/cfg" if linked == "local/sub" else "local/cfg", data="x"), lay.task)
    assert "symbolic link" in msg
    assert sorted(p.name for p in lay.outside.iterdir()) == ["approle.json"]


@pytest.mark.parametrize(
    ("destination", "needle"),
    [
        ("/etc/cfg", "absolute path"),
        ("../../etc/cfg", "escapes the task directory"),
        ("local/../../side/local/x", "escapes the task directory"),
        ("../side/local/x", "escapes the task directory"),
        ("alloc", "names a sandbox directory"),
    ],
)
def test_destinations_outside_the_sandbox_are_refused(lay: Layout, destination: str, needle: str) -> None:
    assert needle in refused(Template(destination, data="x"), lay.task)
    assert sorted(p.name for p in (lay.other / "local").iterdir()) == []


def test_perms_are_set_on_the_open_file_and_special_bits_refused(lay: Layout) -> None:
    old = os.umask(0o077)
    try:
        render(Template("local/a", data="x", perms="0644"), lay.task, {})
    finally:
        os.umask(old)
    assert (lay.task / "local/a").stat().st_mode & 0o7777 == 0o644
    assert "setuid" in refused(Template("local/b", data="x", perms="4755"), lay.task)


# -- reads: source and file() -----------------------------------------------------------------------


def _read_template(how: str, path: str) -> Template:
    if how == "source":
        return Template("local/out", source=path)
    return Template("local/out", data=f"{{{{ file {json.dumps(path)} }}}}")


@pytest.fixture(params=["source", "file"])
def how(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.mark.parametrize(
    ("path", "needle"),
    [
        ("../../../etc/passwd", "escapes the task directory"),
        ("/etc/passwd", "absolute path"),
        ("local/link", "symbolic link"),
        ("local/sub/approle.json", "symbolic link"),
        ("local/fifo", "FIFO"),
        ("local", "directory"),
        ("local/missing", "no such file"),
    ],
)
def test_reads_outside_the_sandbox_or_of_special_files_are_refused(
    lay: Layout, how: str, path: str, needle: str
) -> None:
    (lay.task / "local" / "link").symlink_to(lay.secret)
    (lay.task / "local" / "sub").symlink_to(lay.outside, target_is_directory=True)
    os.mkfifo(lay.task / "local" / "fifo")
    msg = refused(_read_template(how, path), lay.task)
    assert needle in msg and "s3cr3t" not in msg
    assert not (lay.task / "local" / "out").exists()


def test_relative_source_and_file_are_relative_to_the_task_dir(lay: Layout, how: str) -> None:
    (lay.task / "local" / "in.tpl").write_text('port={{ env "PORT" }}')
    render(_read_template(how, "local/in.tpl"), lay.task, {"PORT": "8080"})
    want = 'port={{ env "PORT" }}' if how == "file" else "port=8080"
    assert (lay.task / "local" / "out").read_text() == want


def test_a_source_larger_than_the_budget_is_refused(lay: Layout, how: str) -> None:
    (lay.task / "local" / "big").write_bytes(b"x" * 2048)
    assert "budget" in refused(_read_template(how, "local/big"), lay.task, max_bytes=1024)


# -- the shared alloc/ dir --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "destination", ["alloc/shared.txt", "${NOMAD_ALLOC_DIR}/shared.txt", "../alloc/shared.txt"]
)
def test_the_alloc_shared_dir_is_in_the_sandbox(lay: Layout, destination: str) -> None:
    path, _, _ = render(Template(destination, data='from web {{ env "X" }}'), lay.task, {"X": "1"})
    assert path == lay.shared / "shared.txt"
    assert (lay.shared / "shared.txt").read_text() == "from web 1"
    # another task of the alloc reads it, as source and with file()
    render(Template("local/copy", source="alloc/shared.txt"), lay.other, {})
    assert (lay.other / "local" / "copy").read_text() == "from web 1"
    render(Template("local/raw", data='{{ file "${NOMAD_ALLOC_DIR}/shared.txt" }}'), lay.other, {})
    assert (lay.other / "local" / "raw").read_text() == "from web 1"


def test_task_dir_variables_lead_to_local_and_secrets(lay: Layout) -> None:
    render(Template("${NOMAD_TASK_DIR}/a", data="a"), lay.task, {})
    render(Template("${NOMAD_SECRETS_DIR}/b", data="b", perms="0600"), lay.task, {})
    assert (lay.task / "local" / "a").read_text() == "a"
    assert (lay.task / "secrets" / "b").stat().st_mode & 0o777 == 0o600


def test_a_symlinked_shared_dir_is_refused(tmp_path: Path) -> None:
    task = tmp_path / "a" / "web"
    task.mkdir(parents=True)
    (tmp_path / "a" / "alloc").symlink_to(tmp_path, target_is_directory=True)
    assert "symbolic link" in refused(Template("alloc/x", data="x"), task)
    assert not (tmp_path / "x").exists()


# -- budgets ----------------------------------------------------------------------------------------

LOOP = "{{ range 100000 }}{{ range 100000 }}{{ end }}{{ end }}"
# What Python's re took ages on (it backtracks, one C call holding the GIL): RE2, as Go, runs in
# time linear in the input (agent.gocompat.goregex).
BACKTRACK = (
    '{{ regexMatch "^(a+)+$" "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa!" }}'
)


@pytest.mark.parametrize("data", [LOOP])
def test_a_template_that_runs_away_is_stopped_at_its_time_budget(lay: Layout, data: str) -> None:
    t0 = time.monotonic()
    msg = refused(Template("local/loop", data=data), lay.task, timeout=0.5)
    elapsed = time.monotonic() - t0
    assert "0.5s budget" in msg
    assert 0.45 < elapsed < 1.5, elapsed
    assert not (lay.task / "local" / "loop").exists()
    render(Template("local/after", data="ok"), lay.task, {})  # a fresh worker renders the next one
    assert (lay.task / "local" / "after").read_text() == "ok"


def test_a_pattern_that_backtracked_under_pythons_re_renders_within_its_budget(lay: Layout) -> None:
    render(Template("local/re", data=BACKTRACK), lay.task, {}, timeout=0.5)
    assert (lay.task / "local" / "re").read_text() == "false"


class Slow:
    """A Vault that takes its time to issue (RSA key generation): the agent's time, not the template's."""

    def __init__(self, delay: float) -> None:
        self.delay, self.calls = delay, 0

    def list_keys(self, path: str) -> list[str]:

        return []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        self.calls += 1
        time.sleep(self.delay)
        return {"certificate": "CERT"}, 0.0


def test_the_agents_own_time_serving_a_fetch_is_not_charged_to_the_template(lay: Layout) -> None:
    tpl = Template(
        "local/cert",
        data='{{ with secret "pki_int/issue/web" "common_name=a" }}{{ .Data.certificate }}{{ end }}',
    )
    render(tpl, lay.task, RenderContext({}, vault=Slow(0.6)), timeout=0.3)
    assert (lay.task / "local" / "cert").read_text() == "CERT"


def test_a_loop_of_fetches_is_refused_not_waited_for(lay: Layout) -> None:
    src = Slow(0.0)
    data = (
        '{{ range $i := loop 100000 }}{{ secret "pki_int/issue/web" (printf "common_name=%d" $i) }}{{ end }}'
    )
    msg = refused(Template("local/many", data=data), lay.task, RenderContext({}, vault=src))
    assert f"more than {R.MAX_FETCHES}" in msg and src.calls == R.MAX_FETCHES


def test_a_50mb_template_text_is_refused_before_rendering(lay: Layout) -> None:
    t0 = time.monotonic()
    msg = refused(Template("local/big", data="x" * 50_000_000), lay.task)
    assert "budget" in msg and time.monotonic() - t0 < 2.0
    assert not (lay.task / "local" / "big").exists()


@pytest.mark.parametrize(
    "data",
    [
        '{{ range loop 50000 }}{{ printf "%01000d" 0 }}{{ end }}',  # 50 MB in small chunks
        # Go's fmt refuses widths over 10^6 (%!(BADWIDTH)): a join makes the large strings
        '{{ join (printf "%049d" 0) (split "" (printf "%0999999d" 0)) }}',  # 50 MB at once
        '{{ join (printf "%02000d" 0) (split "" (printf "%0999999d" 0)) }}',  # more than the worker's memory
    ],
)
def test_output_over_the_size_budget_is_refused_and_not_written(lay: Layout, data: str) -> None:
    (lay.task / "local" / "big").write_text("old")
    t0 = time.monotonic()
    msg = refused(Template("local/big", data=data), lay.task, timeout=2.0)
    assert "budget" in msg or "MemoryError" in msg
    assert time.monotonic() - t0 < 2.5
    assert (lay.task / "local" / "big").read_text() == "old"


def test_the_budgets_come_from_the_template_deps(tmp_path: Path) -> None:
    host = Host(tmp_path / "a")
    task = Task("web", "exec", templates=(Template("local/x", data=LOOP),))
    tt = host.templates(task, render_timeout=0.3)
    t0 = time.monotonic()
    with pytest.raises(TemplateRenderError, match=r"0\.3s budget"):
        tt.render_all()
    assert time.monotonic() - t0 < 1.5
    big = Task("big", "exec", templates=(Template("local/x", data='{{ printf "%02000d" 0 }}'),))
    with pytest.raises(TemplateRenderError, match="1000-byte budget"):
        host.templates(big, max_bytes=1000).render_all()


# -- errors -----------------------------------------------------------------------------------------


class Recording:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def list_keys(self, path: str) -> list[str]:

        return []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        self.calls.append(path)
        return {"value": "v"}, 0.0


class Broken:
    def list_keys(self, path: str) -> list[str]:
        return []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        raise RuntimeError("the client blew up")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        # consul-template's divide takes the divisor first: `{{ divide 0 1 }}` is 1 / 0
        ("{{ divide 0 1 }}", "local/e:1:4: error calling divide"),
        ("{{ index .Nope 3 }}", "local/e:1:4: error calling index"),
        (
            '{{ secret "kv/data/x" "p" }}',
            'local/e:1:4: error calling secret: secret: parameter "p" is not key=value',
        ),
        ("{{ env }}", "local/e:1:4: wrong number of args for env"),
        ('{{ "\\ud800" }}', "local/e:1:4: invalid Unicode code point"),
        ('line\n  {{ parseInt "x" }}', "local/e:2:6: error calling parseInt"),
    ],
)
def test_every_exception_becomes_a_template_render_error(lay: Layout, data: str, needle: str) -> None:
    ctx = RenderContext({}, vault=Recording())
    assert needle in refused(Template("local/e", data=data), lay.task, ctx)


def test_an_exception_of_a_data_source_becomes_a_template_render_error(lay: Layout) -> None:
    msg = refused(
        Template("local/e", data='{{ with secret "kv/data/x" }}{{ .Data.value }}{{ end }}'),
        lay.task,
        RenderContext({}, vault=Broken()),
    )
    assert "local/e:1:9: error calling secret: the client blew up" in msg


@pytest.mark.parametrize(
    "path",
    [
        "auth/token/create",
        "sys/wrapping/unwrap",
        "cubbyhole/mine",
        "/auth/approle/login",
        "AUTH/token/lookup-self",
        "kv/../sys/leases",
        "auth%2Ftoken/create",
        "kv/data/x?list=true",
    ],
)
def test_vault_paths_of_vaults_own_apis_are_refused_at_render_and_at_submission(
    lay: Layout, path: str
) -> None:
    src = Recording()
    tpl = Template(
        "local/v", data=f"{{{{ with secret {json.dumps(path)} }}}}{{{{ .Data.value }}}}{{{{ end }}}}"
    )
    msg = refused(tpl, lay.task, RenderContext({}, vault=src))
    assert repr(path) in msg and src.calls == []
    problem = check_template(tpl)
    assert problem is not None and repr(path) in problem


def test_an_allowed_vault_path_is_fetched(lay: Layout) -> None:
    src = Recording()
    render(
        Template("local/v", data='{{ with secret "kv/data/app" }}{{ .Data.value }}{{ end }}'),
        lay.task,
        RenderContext({}, vault=src),
    )
    assert src.calls == ["kv/data/app"]


@pytest.mark.parametrize(
    ("tpl", "needle"),
    [
        (Template("/etc/x", data="x"), "absolute path"),
        (Template("local/x", source="../../../etc/passwd"), "escapes the task directory"),
        (Template("local/x", data='{{ file "/etc/passwd" }}'), "absolute path"),
        (Template("local/x", data="x", perms="6755"), "setuid"),
        (Template("local/x", data='{{ secrets "sys/x" }}'), "sys/"),
    ],
)
def test_sandbox_problems_are_found_at_submission(tpl: Template, needle: str) -> None:
    problem = check_template(tpl)
    assert problem is not None and needle in problem, problem


@pytest.mark.parametrize(
    "data",
    ['{{ printf "%0300000000d" 1 }}', BACKTRACK, LOOP],
)
def test_checking_a_template_at_submission_computes_nothing(data: str) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    assert promptly(lambda: check_template(Template("local/x", data=data))) is None
    assert time.monotonic() - t0 < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 100_000  # KiB


# -- a failed write -----------------------------------------------------------------------------------


def _fail_file_writes(monkeypatch: pytest.MonkeyPatch, how: str = "enospc") -> None:
    """os.write fails (or writes one byte at a time) for regular files only: the worker's pipes work."""
    real = os.write

    def write(fd: int, data: Any) -> int:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return real(fd, data)
        if how == "short":
            return real(fd, bytes(data[:1]))
        real(fd, bytes(data[:3]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", write)


def test_a_failed_write_removes_the_temp_file_and_keeps_the_old_content(
    lay: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    render(Template("local/cfg", data="old"), lay.task, {})
    _fail_file_writes(monkeypatch)
    msg = refused(Template("local/cfg", data="new content"), lay.task)
    assert "No space left on device" in msg
    assert sorted(p.name for p in (lay.task / "local").iterdir()) == ["cfg"]
    assert (lay.task / "local" / "cfg").read_text() == "old"


def test_short_writes_still_write_everything(lay: Layout, monkeypatch: pytest.MonkeyPatch) -> None:
    _fail_file_writes(monkeypatch, "short")
    render(Template("local/cfg", data="all of it\n"), lay.task, {})
    assert (lay.task / "local" / "cfg").read_text() == "all of it\n"


# -- the runner goes on -------------------------------------------------------------------------------


class Host:
    """A TaskHost for the runner: records events and timers; the task runs."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.variables: dict[str, str] = {"V": "1"}
        self.task_name = ""  # the task of its last `templates`
        self.timers: list[tuple[float, Callable[[], None]]] = []
        self.events: list[tuple[str, str]] = []
        self.store = SqliteStore(root.parent / f"{root.name}-state.db")

    def templates(self, task: Task, **deps: Any) -> TaskTemplates:
        checked: TaskHost = self
        self.task_name = task.name
        return TaskTemplates(checked, task, TemplateDeps(self.store, self.schedule, **deps))

    @property
    def alloc_id(self) -> str:
        return "11111111-2222-4333-8444-555555555555"

    def alloc_running(self) -> bool:
        return True

    def env(self) -> dict[str, str]:
        return dict(self.variables)

    @property
    def task_dir(self) -> Path:
        return self.root / self.task_name

    def task_vault(self) -> None:
        return None

    def running(self) -> bool:
        return True

    def event(self, type_: str, message: str) -> None:
        self.events.append((type_, message))

    def signal(self, sig: str) -> None:
        pass

    def exec(self, argv: list[str], timeout: float, then: Callable[[int, str], None]) -> None:
        then(0, "")

    def restart_for_template(self) -> None:
        pass

    def schedule(self, delay: float, fn: Callable[[], None]) -> None:
        self.timers.append((delay, fn))

    def fire(self) -> None:
        """Run the timers scheduled so far (those they schedule wait for the next call)."""
        timers, self.timers[:] = list(self.timers), []
        for _, fn in timers:
            fn()


def test_the_periodic_render_survives_any_exception_and_delivers_when_space_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = Host(tmp_path / "a")
    task = Task("web", "exec", templates=(Template("local/cfg", data='v={{ env "V" }}', change_mode="noop"),))
    tt = host.templates(task)
    tt.render_all()
    dest = host.task_dir / "local" / "cfg"
    assert dest.read_text() == "v=1"

    host.variables["V"] = "2"
    _fail_file_writes(monkeypatch)
    tt.schedule_rerender(0.0)
    host.fire()
    failed = [m for t, m in host.events if t == "Template Failed"]
    assert len(failed) == 1 and "local/cfg" in failed[0] and "No space left" in failed[0], host.events
    assert dest.read_text() == "v=1" and len(host.timers) == 1, "a retry is scheduled"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["cfg"]

    monkeypatch.undo()  # space returns
    seen = len(host.events)
    host.fire()
    assert dest.read_text() == "v=2"
    assert ("Template Rendered", "rendered local/cfg") in host.events[seen:]


def test_a_template_that_divides_by_zero_is_a_failed_event_and_a_retry(tmp_path: Path) -> None:
    host = Host(tmp_path / "a")
    task = Task("web", "exec", templates=(Template("local/z", data="{{ divide 0 1 }}", change_mode="noop"),))
    tt = host.templates(task)
    tt.schedule_rerender(0.0)
    host.fire()
    ((kind, msg),) = host.events
    assert kind == "Template Failed" and "local/z:1:4: error calling divide" in msg
    assert len(host.timers) == 1 and not tt.dead
