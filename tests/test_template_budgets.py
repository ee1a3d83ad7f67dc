"""Issue 32: what a task's templates may cost the agent itself, and what their errors may show.

- Budgets per task (agent.templates.budget): templates per task (refused at submission and
  validation, checked again before a render), one pass's time for all of a task's renders, every
  call back into the agent counted (`env` too) and its frame bounded, the agent's own time serving a
  call charged unless it waited on Vault, Consul or a file.
- Setup and restore renders run off the main loop (the loop answers while a slow Vault issues).
- Secrets fetched in a pass (and the task's token) never appear in a render error.
- A render that failed because Vault could not answer is retried as soon as Vault answers again
  (agent.templates.wake), not when its backoff runs out: with fakes, and with a real OpenBao that is
  sealed and unsealed.

Timings are asserted only as generous correctness bounds.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent.cli.validate import validate_text
from agent.client.core import Core
from agent.client.jobs import parse_submission
from agent.client.offload import run_inline
from agent.command.config import load_config
from agent.command.wiring import CoreSettings, start_core
from agent.decide.decisions import plan_render_retry
from agent.fieldbugs.faults import Faults
from agent.jobspec import JobspecError, Limits
from agent.runner.alloc import AllocRunner
from agent.state import SqliteStore
from agent.structs.model import Group, Job, Task, Template, Vault
from agent.structs.records import AllocRecord, AllocStatus
from agent.templates import budget
from agent.templates.errors import REDACTED, redact, secret_strings
from agent.templates.render import RenderContext, TemplateRenderError, render
from agent.templates.runner import TaskHost, TaskTemplates, TemplateDeps
from agent.templates.wake import WAKE_SPREAD, VaultWake
from agent.vault import VaultUnavailable
from lab.waits import wait_until
from tests.fakes import FakeNode, FakeVault

ALLOC = "a1b2c3d4-0000-4000-8000-0000000000b1"
PROMPT = 10.0  # seconds: whatever should be quick, with room for a loaded 2-core machine


def _job(n: int, job: str = "many") -> str:
    blocks = "\n".join(
        f'    template {{\n      data = "{i}"\n      destination = "local/t{i}"\n    }}' for i in range(n)
    )
    return f"""job "{job}" {{
  group "g" {{
    task "t" {{
      driver = "docker"
      config {{ image = "x" }}
{blocks}
    }}
  }}
}}
"""


class Host:
    """A TaskHost for one task's templates: records events and timers; the task runs."""

    def __init__(self, root: Path, env: Mapping[str, str] | None = None, vault: Any = None) -> None:
        self.root = root
        self.variables: Mapping[str, str] = env if env is not None else {}
        self.task_name = ""  # the task of its last `templates`
        self.vault = vault
        self.timers: list[tuple[float, Callable[[], None]]] = []
        self.events: list[tuple[str, str]] = []
        self.store = SqliteStore(root / "state.db")

    def templates(self, task: Task, **deps: Any) -> TaskTemplates:
        checked: TaskHost = self
        self.task_name = task.name
        return TaskTemplates(checked, task, TemplateDeps(self.store, self.schedule, **deps))

    @property
    def alloc_id(self) -> str:
        return ALLOC

    def alloc_running(self) -> bool:
        return True

    def env(self) -> Mapping[str, str]:
        return self.variables

    @property
    def task_dir(self) -> Path:
        return self.root / self.task_name

    def task_vault(self) -> Any:
        return self.vault

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

    def fire(self, horizon: float = 3600.0) -> list[float]:
        """Run the timers scheduled so far that are due within `horizon` seconds; their delays."""
        due = [t for t in self.timers if t[0] <= horizon]
        self.timers[:] = [t for t in self.timers if t[0] > horizon]
        for _, fn in due:
            fn()
        return [d for d, _ in due]


class SlowEnv(Mapping[str, str]):
    """A task environment each lookup of which takes `delay` seconds of the agent's time."""

    def __init__(self, delay: float, values: Mapping[str, str]) -> None:
        self.delay, self.values = delay, dict(values)

    def __getitem__(self, key: str) -> str:
        time.sleep(self.delay)
        return self.values[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)


class Secrets:
    """A Vault: `kv/...` reads give `data`; `down` makes every request unavailable."""

    def __init__(self, data: dict[str, Any], ttl: float = 0.0, token: str = "") -> None:
        self.data, self.ttl, self.token = data, ttl, token
        self.down = False
        self.fetches = 0

    def list_keys(self, path: str) -> list[str]:
        return []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        if self.down:
            raise VaultUnavailable("read", path, "sealed or unavailable (Vault is sealed)")
        self.fetches += 1
        return {"data": dict(self.data), "n": self.fetches}, self.ttl


def _refused(tpl: Template, task_dir: Path, ctx: RenderContext | Mapping[str, str], **kw: Any) -> str:
    with pytest.raises(TemplateRenderError) as exc:
        render(tpl, task_dir, ctx, **kw)
    return str(exc.value)


# -- templates per task -------------------------------------------------------------------------------


def test_more_templates_than_a_task_may_have_are_refused_at_submission_and_validation() -> None:
    n = budget.DEFAULT_MAX_TEMPLATES + 1
    with pytest.raises(JobspecError) as err:
        parse_submission(_job(n), "hcl", "many.hcl", {})
    problems = dict(err.value.problems)
    why = problems["job.many.group.g.task.t"]
    assert f"{n} templates in one task, more than the {n - 1}" in why and "template_max_per_task" in why
    result = validate_text(_job(n), source="many.hcl", fmt="hcl")
    assert not result.accepted and dict(result.problems)["job.many.group.g.task.t"] == why
    parse_submission(_job(n - 1), "hcl", "many.hcl", {})  # at the limit: accepted
    # The client's limit (config template_max_per_task) is what a submission is held to.
    with pytest.raises(JobspecError, match="3 templates in one task, more than the 2"):
        parse_submission(_job(3), "hcl", "few.hcl", {}, Limits(max_templates=2))


def test_the_template_options_come_from_the_client_config(tmp_path: Path) -> None:
    cfg_file = tmp_path / "agent.json"
    cfg_file.write_text('{"node_name": "n1", "template_max_per_task": 12, "template_pass_budget": 3.5}')
    cfg = load_config(cfg_file)
    settings = CoreSettings.from_config(cfg)
    assert settings.limits.max_templates == 12 and settings.template_pass_budget == 3.5
    core = Core(
        SqliteStore(tmp_path / "state.db"),
        FakeNode(tmp_path / "node").registry,
        None,
        data_dir=tmp_path / "data",
        faults=Faults(),
        template_pass_budget=settings.template_pass_budget,
        limits=settings.limits,
    )
    assert (core.deps.templates.max_templates, core.deps.templates.pass_budget) == (12, 3.5)
    for bad in ('"template_max_per_task": 0', '"template_pass_budget": -1'):
        cfg_file.write_text(f'{{"node_name": "n1", {bad}}}')
        with pytest.raises(Exception, match="template_"):
            load_config(cfg_file)


def test_a_task_over_the_limit_is_not_rendered_even_if_stored_before_it(tmp_path: Path) -> None:
    host = Host(tmp_path)
    task = Task("web", "exec", templates=tuple(Template(f"local/t{i}", data="x") for i in range(3)))
    with pytest.raises(TemplateRenderError, match="task web has 3 templates, more than the 2"):
        host.templates(task, max_templates=2).render_all()
    assert not (tmp_path / "web" / "local").exists()


# -- one pass's time, and the agent's own time serving calls ------------------------------------------


def test_all_of_a_tasks_renders_of_one_pass_share_one_time_budget(tmp_path: Path) -> None:
    """Four templates of 0.3 s each (their `env` calls: the agent's time, charged) under a 2 s budget
    each, rendered twice a pass: 2.4 s in all, refused at the pass budget of 0.6 s."""
    host = Host(tmp_path, env=SlowEnv(0.05, {"V": "1"}))
    data = '{{ range loop 6 }}{{ env "V" }}{{ end }}'
    task = Task("web", "exec", templates=tuple(Template(f"local/t{i}", data=data) for i in range(4)))
    tt = host.templates(task, render_timeout=2.0, pass_budget=0.6)
    t0 = time.monotonic()
    with pytest.raises(TemplateRenderError, match=r"more than the 0\.6s one render pass may take") as err:
        tt.render_all()
    took = time.monotonic() - t0
    assert "template_pass_budget" in str(err.value) and "task web" in str(err.value)
    assert took < 2.0, took  # stopped at the budget, not after every render
    # Within the budget the same task renders.
    Host(tmp_path / "b", env=SlowEnv(0.05, {"V": "1"})).templates(task, pass_budget=30.0).render_all()


def test_the_agents_time_serving_env_is_charged_to_the_template(tmp_path: Path) -> None:
    tpl = Template("local/env", data='{{ range loop 20 }}{{ env "V" }}{{ end }}')
    msg = _refused(tpl, tmp_path, SlowEnv(0.05, {"V": "1"}), timeout=0.5)  # 1 s of the agent's time
    assert "longer than the 0.5s budget" in msg


def test_every_call_into_the_agent_counts_env_too(tmp_path: Path) -> None:
    tpl = Template(
        "local/env", data=f'{{{{ range loop {budget.MAX_CALLS + 1} }}}}{{{{ env "V" }}}}{{{{ end }}}}'
    )
    msg = _refused(tpl, tmp_path, {"V": "1"}, timeout=60.0)
    assert f"error calling env: more than {budget.MAX_CALLS} calls to the agent in one render" in msg


@pytest.mark.parametrize(
    "data",
    [
        '{{ env (sprig_repeat 100000 "x") }}',
        # the bomb of the issue: a string doubled to 16 MiB in the worker, then asked of `env`
        '{{ $s := "x" }}{{ range loop 24 }}{{ $s = print $s $s }}{{ end }}'
        "{{ range $i := loop 9 }}{{ env (print $s $i) }}{{ end }}",
    ],
)
def test_a_call_larger_than_a_frame_may_carry_is_refused_before_the_agent_reads_it(
    tmp_path: Path, data: str
) -> None:
    ctx = RenderContext({})
    msg = _refused(Template("local/bomb", data=data), tmp_path, ctx, timeout=10.0)
    assert f"more than the {budget.MAX_CALL_FRAME} a call may carry" in msg
    assert ctx.reads["local/bomb"].env == {}  # nothing of it reached the agent


def test_the_agent_refuses_an_oversized_call_without_serving_it() -> None:
    """The agent's side, whatever the worker sends: a call over the frame budget or past the call
    budget is answered with an error, its function never called, and the render fails."""
    from agent.templates.worker import _Render

    served: list[str] = []
    sent: list[dict[str, Any]] = []

    class Worker:
        last_size = budget.MAX_CALL_FRAME + 1

        def send(self, msg: dict[str, Any], deadline: float) -> None:
            sent.append(msg)

    this = _Render(Template("local/x"), {"env": served.append}, budget.RenderMeter(), 1024)
    this.call(Worker(), {"op": "call", "fn": "env", "args": ["x"]}, time.monotonic() + 5)
    assert served == [] and "a call may carry" in sent[-1]["error"] and this.failed is not None
    Worker.last_size = 10
    this.calls = budget.MAX_CALLS
    this.call(Worker(), {"op": "call", "fn": "env", "args": ["x"]}, time.monotonic() + 5)
    assert served == [] and "more than" in sent[-1]["error"]


def test_a_long_env_name_is_not_kept_and_output_larger_than_a_frame_arrives_whole(tmp_path: Path) -> None:
    ctx = RenderContext({})
    render(Template("local/n", data='{{ env (sprig_repeat 1000 "x") }}'), tmp_path, ctx)
    assert ctx.reads["local/n"].env == {} and ctx.reads["local/n"].volatile
    render(
        Template("local/big", data='{{ range loop 3 }}{{ sprig_repeat 450000 "ab" }}{{ end }}é'), tmp_path, {}
    )
    assert (tmp_path / "local" / "big").read_text() == "ab" * 1_350_000 + "é"


# -- secrets in errors --------------------------------------------------------------------------------

PASSWORD = "hunter2-correct-horse"
TOKEN = "s.TaskTokenValue123"


@pytest.mark.parametrize(
    ("data", "hidden"),
    [
        ('{{ with secret "kv/data/db" }}{{ parseInt .Data.data.password }}{{ end }}', PASSWORD),
        ('{{ with secret "kv/data/db" }}{{ sprig_fail .Data.data.password }}{{ end }}', PASSWORD),
        ('{{ with secret "kv/data/db" }}{{ .Data.data.nested.pem | sprig_fail }}{{ end }}', "PEMBODYLINE"),
        ('{{ parseInt (env "VAULT_TOKEN") }}', TOKEN),
        ('{{ with secret "kv/data/db" }}{{ sprig_fail (printf "%q" .Data.data.quoted) }}{{ end }}', 'a\\"b'),
    ],
)
def test_secret_values_are_redacted_from_render_errors(tmp_path: Path, data: str, hidden: str) -> None:
    source = Secrets(
        {
            "password": PASSWORD,
            "quoted": 'a"b\\c-long',
            "nested": {"pem": "-----BEGIN KEY-----\nPEMBODYLINE0123\n-----END KEY-----"},
        },
        token=TOKEN,
    )
    ctx = RenderContext({"VAULT_TOKEN": TOKEN}, vault=source)
    msg = _refused(Template("local/db", data=data), tmp_path, ctx)
    assert hidden not in msg and REDACTED in msg, msg
    assert msg.startswith("template local/db:1:")


def test_a_secret_cut_off_in_a_long_error_is_redacted_to_its_first_characters(tmp_path: Path) -> None:
    secret = "".join(chr(ord("A") + i % 26) for i in range(300))
    ctx = RenderContext({}, vault=Secrets({"password": secret}))
    data = (
        '{{ with secret "kv/data/db" }}'
        '{{ parseInt (print (sprig_repeat 3900 "x") .Data.data.password) }}{{ end }}'
    )
    msg = _refused(Template("local/db", data=data), tmp_path, ctx)
    assert "more characters]" in msg, "the worker cut the message"
    assert all(secret[i : i + 8] not in msg for i in range(len(secret) - 8)), msg[-300:]


def test_the_failed_event_of_a_periodic_pass_shows_no_secret(tmp_path: Path) -> None:
    source = Secrets({"password": PASSWORD})
    host = Host(tmp_path, vault=source)
    task = Task(
        "web",
        "exec",
        templates=(
            Template(
                "local/db",
                data='{{ with secret "kv/data/db" }}{{ parseInt .Data.data.password }}{{ end }}',
                change_mode="noop",
            ),
        ),
    )
    tt = host.templates(task)
    tt.schedule_rerender(0.0)
    host.fire()
    ((kind, msg),) = host.events
    assert kind == "Template Failed" and PASSWORD not in msg and REDACTED in msg


def test_redaction_finds_secrets_however_they_are_quoted() -> None:
    secrets = secret_strings([{"a": ["line-one\nline-two", 12345, True, "abc"]}, 'q"uote'])
    text = 'x line-two y "line-one\\nline-two" 12345 abc q\\"uote True'
    out = redact(text, secrets)
    assert "line-two" not in out and "12345" not in out and 'q\\"uote' not in out
    assert "abc" in out and "True" in out  # shorter than MIN_SECRET; a bool is no secret


# -- Vault answers again: failed renders wake ---------------------------------------------------------


class Probe:
    def __init__(self) -> None:
        self.healthy = False
        self.calls = 0

    def __call__(self) -> bool:
        self.calls += 1
        return self.healthy


def _wake(host_schedule: Callable[[float, Callable[[], None]], None]) -> tuple[VaultWake, Probe]:
    probe = Probe()
    return VaultWake(probe, host_schedule, run_inline), probe


def test_the_wake_probes_only_while_someone_waits_and_calls_each_once(tmp_path: Path) -> None:
    host = Host(tmp_path)
    wake, probe = _wake(host.schedule)
    assert host.fire() == [] and probe.calls == 0
    woken: list[str] = []
    wake.subscribe("a", lambda: woken.append("a"))
    wake.subscribe("b", lambda: woken.append("b"))
    wake.subscribe("a", lambda: woken.append("a2"))  # replaces the first
    assert host.fire() == [wake.interval] and probe.calls == 1 and woken == []
    probe.healthy = True
    host.fire()
    assert sorted(woken) == ["a2", "b"] and wake.waiting == 0
    assert host.fire() == [] and probe.calls == 2, "no probing once nobody waits"
    wake.subscribe("gone", lambda: woken.append("gone"), lambda: False)  # e.g. its alloc stopped
    assert host.fire() == [wake.interval] and probe.calls == 2 and wake.waiting == 0
    assert host.fire() == [] and "gone" not in woken, "a waiter no longer wanted keeps nothing probing"


def test_plan_render_retry_wakes_only_renders_vault_could_not_answer() -> None:
    assert plan_render_retry(3, False, vault_down=True).wake_on_vault
    assert not plan_render_retry(3, False).wake_on_vault


def test_a_periodic_pass_that_found_vault_sealed_resumes_when_vault_answers(tmp_path: Path) -> None:
    """Four passes found Vault sealed: the next retry is 16 s (+-20 %) away. When the wake's probe
    finds Vault healthy, the retry is due within WAKE_SPREAD instead, and renders."""
    source = Secrets({"password": PASSWORD})  # a KV read: every pass reads it again
    host = Host(tmp_path, vault=source)
    wake, probe = _wake(host.schedule)
    task = Task(
        "web",
        "exec",
        templates=(Template("local/db", data='{{ with secret "kv/data/db" }}{{ .Data.n }}{{ end }}'),),
    )
    tt = host.templates(task, vault_wake=wake)
    tt.render_all()
    source.down = True
    for _ in range(4):
        tt.schedule_rerender(0.0)
        host.fire(horizon=0.0)
    failed = [m for t, m in host.events if t == "Template Failed"]
    assert len(failed) == 4 and "sealed" in failed[-1] and wake.waiting == 1, host.events
    assert float(failed[-1].rsplit("retrying in ", 1)[1].rstrip("s")) >= 12.0
    source.down = False
    probe.healthy = True
    assert host.fire(horizon=wake.interval) == [wake.interval]  # the probe finds Vault healthy ...
    due = [d for d, _ in host.timers if d <= WAKE_SPREAD]
    assert len(due) == 1, host.timers  # ... and the retry is due within the spread, not the backoff
    host.fire(horizon=WAKE_SPREAD)
    assert (tmp_path / "web" / "local" / "db").read_text() == "2"
    assert host.events[-1] == ("Template Rendered", "rendered local/db")
    # No probing once it renders (another timer may be due: the template's random splay before its
    # change_mode acts, 0-5 s, is below the probe interval one time in ten).
    calls = probe.calls
    host.fire(horizon=wake.interval * 4)
    assert wake.waiting == 0 and probe.calls == calls, "no probing once it renders"


def test_a_setup_vault_could_not_answer_is_retried_when_vault_answers(tmp_path: Path) -> None:
    """Nomad's vault_retry backoff (0.25 s doubling): after five tries the next is 4 s away. When
    the wake finds Vault healthy the setup runs at once, and its backoff timer later does nothing."""
    node = FakeNode(tmp_path)
    vault = FakeVault(Secrets({"password": PASSWORD}))
    vault.down = True
    timers: list[tuple[float, Callable[[], None]]] = []
    wake_timers: list[tuple[float, Callable[[], None]]] = []
    wake, probe = _wake(lambda d, fn: wake_timers.append((d, fn)))

    def schedule(delay: float, fn: Callable[[], None]) -> None:
        timers.append((delay, fn))

    deps = node.deps(network=None)
    deps = dataclasses.replace(
        deps,
        vault=vault,
        schedule=schedule,
        templates=dataclasses.replace(deps.templates, vault_wake=wake, schedule=schedule),
    )
    tpl = Template("secrets/db", data='{{ with secret "kv/data/db" }}{{ .Data.n }}{{ end }}', splay=0)
    task = Task("web", "docker", config={"image": "x"}, templates=(tpl,), vault=Vault(policies=("p",)))
    group = Group("g", (task,))
    rec = AllocRecord(id=ALLOC, job="j", group="g")
    node.store.put("alloc", ALLOC, rec.to_record())
    r = AllocRunner(deps, rec, Job("j", (group,)), group)
    r.start()
    for _ in range(4):
        (_, retry), *rest = timers
        timers[:] = rest
        retry()
    retrying = [e.message for e in node.store.events(ALLOC) if e.type == "Setup Retrying"]
    assert r.rec.status is AllocStatus.PENDING and len(retrying) == 5 and wake.waiting == 1, retrying
    assert "again in 4s" in retrying[-1] and [d for d, _ in timers] == [4.0]
    vault.down = False
    probe.healthy = True
    (_, tick), *_ = wake_timers
    tick()  # the probe finds Vault healthy: the setup runs now
    assert r.rec.status is AllocStatus.RUNNING, [(e.type, e.message) for e in node.store.events(ALLOC)]
    (_, backoff), *_ = timers
    backoff()  # the backoff's own timer, when it comes, does not set the alloc up a second time
    assert len(node.docker.starts) == 1 and wake.waiting == 0


# -- setup and restore off the main loop --------------------------------------------------------------


class SlowIssue:
    """A Vault that takes `delay` seconds to answer (an RSA key generated on a busy server)."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.n = 0

    def list_keys(self, path: str) -> list[str]:
        return []

    def fetch(self, path: str, params: dict[str, Any]) -> tuple[dict[str, Any], float]:
        time.sleep(self.delay)
        self.n += 1
        return {"serial_number": f"serial-{self.n}"}, 3600.0


SLOW_JOB = """
job "slow" {
  group "g" {
    task "t" {
      driver = "docker"
      config { image = "x" }
      vault { policies = ["p"] }
      template {
        data        = "{{ with secret \\"pki_int/issue/r\\" \\"common_name=a\\" }}{{ .Data.serial_number }}"
        destination = "secrets/serial"
        change_mode = "noop"
      }
    }
  }
}
""".replace("serial_number }}", "serial_number }}{{ end }}")


@pytest.fixture
def slow_agent(tmp_path: Path) -> Iterator[tuple[FakeNode, SlowIssue, Callable[..., Core]]]:
    """A node whose Vault takes 1.5 s to issue; `start()` an agent on it (its loop running, or with
    `wired=True` as the daemon starts it: agent.command.wiring.start_core, which restores)."""
    node = FakeNode(tmp_path)
    source = SlowIssue(1.5)
    vault = FakeVault(source)
    cores: list[tuple[Core, threading.Thread]] = []

    def start(*, wired: bool = False) -> Core:
        core = node.core(vault=vault)
        if wired:
            (loop, *_) = start_core(core, restore_timeout=PROMPT)
        else:
            loop = threading.Thread(target=core.loop.run, daemon=True)
            loop.start()
        cores.append((core, loop))
        return core

    yield node, source, start
    for core, loop in cores:
        core.stop()
        loop.join(5)


def _ping(core: Core) -> float:
    t0 = time.monotonic()
    core.call(lambda: None, timeout=PROMPT)
    return time.monotonic() - t0


def _settle(core: Core, alloc: str) -> AllocRunner:
    def done() -> tuple[AllocRunner | None, str]:
        r = core.call(lambda: core.runners[alloc])
        idle = core.call(lambda: not (r.serial.busy or r.serial.waiting))
        return (r if idle and r.rec.status is not AllocStatus.PENDING else None), r.rec.status.value

    return wait_until(done, timeout=PROMPT, what="the alloc set up", interval=0.02)


def test_a_setup_and_a_restore_render_off_the_main_loop(
    slow_agent: tuple[FakeNode, SlowIssue, Callable[..., Core]],
) -> None:
    """Vault takes 1.5 s to issue: the submit returns and the loop answers meanwhile (it used to
    wait for the render); the alloc then runs. After an agent restart, the restore's re-render waits
    on Vault off the loop too."""
    _, source, start = slow_agent
    core = start()
    t0 = time.monotonic()
    alloc = core.call(lambda: core.job_registry.submit(SLOW_JOB, "hcl"), timeout=PROMPT)["allocs"][0]
    submitted = time.monotonic() - t0
    stall = _ping(core)
    assert submitted < 1.0 and stall < 1.0, (submitted, stall)
    r = _settle(core, alloc)
    assert r.rec.status is AllocStatus.RUNNING and source.n == 1
    serial = r.tasks[r.group.tasks[0].name].task_dir / "secrets" / "serial"
    assert serial.read_text() == "serial-1"

    core.stop()
    again = start()
    t0 = time.monotonic()
    again.call(again.restorer.restore, timeout=PROMPT)
    restored = time.monotonic() - t0
    stall = _ping(again)
    assert restored < 1.0 and stall < 1.0, (restored, stall)
    r = _settle(again, alloc)
    assert r.rec.status is AllocStatus.RUNNING and serial.read_text() == "serial-2"
    print(f"submit {submitted * 1000:.0f} ms, restore {restored * 1000:.0f} ms while Vault takes 1.5 s")


def test_the_agent_answers_once_the_restores_renders_are_done(
    slow_agent: tuple[FakeNode, SlowIssue, Callable[..., Core]],
) -> None:
    """The restore's re-render runs off the loop, but the agent (its API) comes up after it, as
    when it ran inside the restore: an agent that answers has its tasks' files rendered anew."""
    _, _, start = slow_agent
    core = start()
    alloc = core.call(lambda: core.job_registry.submit(SLOW_JOB, "hcl"), timeout=PROMPT)["allocs"][0]
    r = _settle(core, alloc)
    serial = r.tasks[r.group.tasks[0].name].task_dir / "secrets" / "serial"
    core.stop()
    t0 = time.monotonic()
    again = start(wired=True)
    assert time.monotonic() - t0 >= 1.0 and again.restore_seconds >= 1.0
    assert serial.read_text() == "serial-2" and again.call(again.allocs.busy) == []


def test_a_stop_while_the_setup_renders_waits_for_it_and_starts_nothing(
    slow_agent: tuple[FakeNode, SlowIssue, Callable[..., Core]],
) -> None:
    node, _, start = slow_agent
    core = start()
    alloc = core.call(lambda: core.job_registry.submit(SLOW_JOB, "hcl"), timeout=PROMPT)["allocs"][0]
    core.call(
        lambda: core.job_registry.stop_job("slow"), timeout=PROMPT
    )  # the render is still waiting on Vault
    r = _settle(core, alloc)
    assert r.rec.status is AllocStatus.COMPLETE and node.docker.starts == []
    assert "Started" not in [e.type for e in core.store.events(alloc)]


# -- a real OpenBao, sealed and unsealed --------------------------------------------------------------

WAKE_JOB = """
job "wake" {
  group "g" {
    task "t" {
      driver = "docker"
      config { image = "x" }
      vault { policies = ["%s"] }
      template {
        data        = <<EOT
{{ with secret "pki_int/issue/fieldlab-workload" "common_name=t1.service.fieldlab" "ttl=4s" -}}
{{ .Data.serial_number }}{{ end }}
EOT
        destination = "secrets/serial"
        change_mode = "noop"
      }
    }
  }
}
"""


@pytest.fixture
def unsealed_after(openbao: Any) -> Iterator[Any]:
    yield openbao
    if openbao.is_sealed():
        openbao.unseal()


def test_renders_resume_within_seconds_of_an_unseal_not_after_their_backoff(
    unsealed_after: Any, tmp_path: Path
) -> None:
    """A 4 s certificate renewed while OpenBao is sealed: four passes fail, the next retry is 16 s
    (+-20 %) away. Unsealed, the agent's probe finds Vault healthy and the render resumes within
    about a second of Vault answering (the bound asserted is generous: 5 s)."""
    from agent.vault import VaultClient
    from tests.openbao_server import JOB_PROBE

    openbao = unsealed_after
    client = VaultClient(openbao.address, openbao.approle_file)
    client.login()
    node = FakeNode(tmp_path)
    core = node.core(vault=client)
    loop = threading.Thread(target=core.loop.run, daemon=True)
    loop.start()
    try:
        alloc = core.call(lambda: core.job_registry.submit(WAKE_JOB % JOB_PROBE, "hcl"), timeout=30)[
            "allocs"
        ][0]
        assert _settle(core, alloc).rec.status is AllocStatus.RUNNING

        def events(kind: str) -> list[str]:
            return [e.message for e in core.store.events(alloc) if e.type == kind]

        openbao.seal()
        failed = wait_until(
            lambda: (f if len(f := events("Template Failed")) >= 4 else None, str(f[-1:])),
            timeout=90,
            what="four renders failed while sealed",
            interval=0.05,
        )
        backoff = float(failed[-1].rsplit("retrying in ", 1)[1].rstrip("s"))
        assert "sealed" in failed[-1] and backoff >= 12.0, failed[-1]
        rendered = len(events("Template Rendered"))
        t0 = time.monotonic()
        openbao.unseal()  # returns once the node is active (sys/health 200)
        active = time.monotonic()
        wait_until(
            lambda: (
                True if len(events("Template Rendered")) > rendered else None,
                str(events("Template Failed")[-1:]),
            ),
            timeout=60,
            what="a render after the unseal",
            interval=0.02,
        )
        done = time.monotonic()
        print(
            f"unseal {active - t0:.2f}s to active; render resumed {done - active:.2f}s after Vault answered "
            f"({done - t0:.2f}s after the unseal began); the backoff would have been {backoff:.1f}s"
        )
        assert done - active < 5.0, (done - active, backoff)
    finally:
        core.stop()
        loop.join(5)
