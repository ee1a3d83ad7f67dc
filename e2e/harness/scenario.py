"""A field bug's scenario as data: `e2e/scenarios/<bug>.yml` (pure: read, validate, judge).

A scenario file names the bug (its public Nomad issue, the symptom in the report's words, the Nomad
versions), the agent's fault flag that puts the bug back, and either

- `python`: the e2e tests that replay it, for a scenario the vocabulary below cannot say yet
  (`python_why` says what is missing); or
- `jobspec` (a file beside the scenario, as the report gives it: HCL2, or JSON as `nomad job inspect`
  prints it, e2e.harness.scenario_jobspec), `images` (the
  report's images mapped to the lab's local ones: there is no registry here), `steps` and `checks`
  from a fixed vocabulary, run by `e2e/suites/test_scenarios.py` (the step runner:
  `e2e/harness/scenario_steps.py`).

Steps (each a one-key mapping, or a bare name where it takes nothing):
  run                                   submit the jobspec (pinned to the scenario's node)
  run: {refused: RE}                    the submission must be refused with a message matching RE
                                        (the only step; checks: [])
                                        A parameterized or periodic job must place nothing at `run`:
                                        a later dispatch or launch gives the scenario its alloc
  dispatch: {payload: TEXT, meta: {K: V}}   `nomad job dispatch` of the (parameterized) job: the
                                        child's first alloc becomes the scenario's alloc
  periodic_force                        `nomad job periodic force`: the same with the launched child
  node_eligibility: eligible | ineligible   `nomad node eligibility` of the scenario's node
  node_drain: force | SECONDS           `nomad node drain -enable -force` / `-deadline SECONDS`
  wait: {alloc: STATUS}                 the alloc reaches STATUS (running, complete, failed)
  wait: {replaced: true}                the alloc is replaced (a failed one: after its reschedule
                                        policy's delay, Nomad's 30s for a service job, 5s for batch)
  wait: {task: NAME, state: STATE}      a task reaches STATE (pending, running, dead)
  wait: {task: NAME, event: TYPE, count: N}   N events of TYPE for the task
  wait: {file: PATH, contains: RE}      a file of the alloc dir exists (and has a line matching RE)
  wait: {children: N}                   the job has N child jobs or more (periodic launches,
                                        dispatches); the first one's alloc becomes the scenario's
  wait: {launch_due: true}              the periodic job's next cron time after its newest child's
                                        launch has passed (read from the jobspec and the child's ID)
  wait: invariants                      every invariant of the node holds (orphans, health, starts);
                                        {invariants: true, timeout: N} to give it a timeout
  agent_restart: SIGTERM | SIGKILL      the agent stopped by that signal, started, restore done
  agent_stop / agent_start              the agent down between the two (change things under it)
  reboot: clean | hard                  the node rebooted through the provider
  docker_restart                        dockerd restarted
  kill: pause | task | both             SIGKILL the alloc's pause and/or task containers
  kill_process: TASK                    SIGKILL an exec task's process group
  kill_logmon: TASK                     SIGKILL a process task's logmon (this agent's: its pidfile)
  remove_containers: task | pause | all docker rm -f the alloc's containers (with the agent down)
  remove_alloc_dir                      the alloc's directory deleted (with the agent down)
  vault_outage: SECONDS                 OpenBao unreachable for that long
  registry: down | slow | up            the lab's image registry stopped, or its port dropping every
                                        packet (pulls hang), until `registry: up` (or the cleanup)
  partition: SECONDS                    the node cut off the lab network for that long
  stop_job                              the job stopped (DELETE /v1/job/:id)
  restart_alloc                         the alloc restarted as `nomad alloc restart ID` does (no task named)
  update: FILE                          a new version of the job registered (a jobspec beside the
                                        scenario, the same job id; its images mapped the same way)
Every wait has a `timeout` (seconds; default WAIT_TIMEOUT).

A report of one's own (a file outside e2e/scenarios/) needs only bug (any id, or the report's URL:
e2e.harness.scenario_ids), title, symptom and what; without `flag` it runs once, PRESENT or ABSENT
(does the symptom show?). A catalogue entry also names its public link, versions, family and flag.

`node: CLIENT` runs it on that client (the lab's first by default); `nightly: WHY` keeps it out of
`make smoke` (its steps wait out real clocks), for `make nightly` and `make repro`.

Checks (each a one-key mapping; `hold: SECONDS` on the list keeps checking them for that long, so
a bug that shows a little later is caught):
  alloc: STATUS                         the scenario's alloc (the first placed) has that status
  replaced: true | false                it was (or was not) replaced by a new alloc
  task: {name: NAME, state: S, restarts: N, failed: B}   a task's state (the keys given)
  starts: {task: NAME, count: N}        the task started exactly N times (its Started events)
  events: {task: NAME, has: [TYPE], lacks: [TYPE], after: TYPE}   event types (after: only those
                                        after the last event of that type)
  invariants                            the node's invariants at the end (orphans, start accounting)
  swept: none                           the agent's orphan sweeper removed nothing of the alloc: its
                                        own teardown left nothing behind (a leak the sweeper hides)
  logs: {task: T, stream: stdout|stderr, contains: RE, lacks: RE}   the task's log from its start,
                                        as `nomad alloc logs` reads it (the fs logs API, plain)
  file: {path: P, exists: B, contains: RE, lacks: RE}   a file of the alloc dir as Nomad's fs API
                                        reads it (P relative to the alloc dir: alloc/x, TASK/local/x)
  children: {count: N, running: N}      the job's child jobs: how many, how many with a live alloc
  allocs: {count: N}                    the allocs of the job the scenario's alloc belongs to
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from e2e.harness import scenario_ids, scenario_jobspec
from e2e.harness.chaos import ScheduleError, parse_schedule

SCENARIOS = Path(__file__).resolve().parents[1] / "scenarios"
WAIT_TIMEOUT = 120.0
BUG_ID = scenario_ids.CATALOGUE_ID  # a catalogue entry's; a file of one's own: any report id
FAMILIES = (
    "templates",
    "networking",
    "restore",
    "lifecycle",
    "images",
    "restarts",
    "logs",
    "jobspec",
    "jobtypes",
    "scheduling",
)
ALLOC_STATUSES = ("pending", "running", "complete", "failed", "lost")
TASK_STATES = ("pending", "running", "dead")
SIGNALS = ("SIGTERM", "SIGKILL")

# step name -> how its argument is checked: None (takes none), a tuple (one of), a type, "wait"
STEPS: dict[str, object] = {
    "run": "run",
    "wait": "wait",
    "agent_restart": SIGNALS,
    "agent_stop": None,
    "agent_start": None,
    "reboot": ("clean", "hard"),
    "docker_restart": None,
    "docker_down": float,
    "kill": ("pause", "task", "both"),
    "kill_process": str,
    "kill_logmon": str,
    "remove_containers": ("task", "pause", "all"),
    "remove_alloc_dir": None,
    "vault_outage": float,
    "registry": ("down", "slow", "up"),
    "partition": float,
    "stop_job": None,
    "restart_alloc": None,
    "update": "file",
    "dispatch": "dispatch",
    "periodic_force": None,
    "node_eligibility": ("eligible", "ineligible"),
    "node_drain": "drain",
}
CHECKS = (
    "alloc",
    "replaced",
    "task",
    "starts",
    "events",
    "invariants",
    "file",
    "logs",
    "swept",
    "children",
    "allocs",
)
REQUIRED = ("bug", "title", "symptom", "what")  # of every scenario
CATALOGUE_REQUIRED = ("link", "versions", "family", "flag")  # ... and of a catalogue entry's


class ScenarioError(ValueError):
    """A scenario file that cannot run: the message names the file and the field."""


@dataclass(frozen=True)
class Step:
    name: str
    arg: Any = None
    timeout: float = WAIT_TIMEOUT

    def describe(self) -> str:
        if self.arg is None:
            return self.name
        if isinstance(self.arg, dict):
            return f"{self.name} " + ", ".join(f"{k}={v}" for k, v in self.arg.items())
        return f"{self.name} {self.arg}"


@dataclass(frozen=True)
class Scenario:
    path: Path
    bug: str
    title: str
    link: str
    versions: str
    family: str  # "" outside the catalogue when not given
    flag: str  # the fault flag(s) that put the bug back ("": none, the scenario runs once)
    symptom: str  # a regex the failure must match to count as the field symptom
    what: str  # the field symptom in a line
    python: tuple[str, ...] = ()  # pytest node ids under e2e/suites/ (a scenario in Python)
    python_why: str = ""
    jobspec: Path | None = None
    images: dict[str, Any] = field(default_factory=dict)
    steps: tuple[Step, ...] = ()
    checks: tuple[Step, ...] = ()
    hold: float = 0.0  # seconds the checks must keep holding
    chaos: tuple[str, ...] = ()  # a Python scenario of the chaos suite: its explicit schedule
    seed: int | None = None  # ... and the seed of everything else
    node: str = ""  # the client it runs on ("": the lab's first)
    nightly: str = ""  # why it runs in `make nightly` only (its steps wait out real clocks), "" when not

    @property
    def as_data(self) -> bool:
        return not self.python

    @property
    def tests(self) -> tuple[str, ...]:
        """The pytest node ids (under e2e/suites/) that run this scenario."""
        if self.python:
            return self.python
        if self.path.parent == SCENARIOS:
            return (f"test_scenarios.py::test_scenario[{self.bug}]",)
        return ("test_scenarios.py::test_scenario_file",)


def _where(path: Path, key: str) -> str:
    return f"{path}: {key}"


def _text(path: Path, raw: dict[str, Any], key: str) -> str:
    value = raw.get(key)
    if not isinstance(value, str | int | float) or not str(value).strip():
        raise ScenarioError(f"{_where(path, key)}: required, a non-empty string")
    return str(value).strip()


def _step(path: Path, where: str, item: object, vocab: dict[str, object]) -> Step:
    if isinstance(item, str):
        name, arg = item, None
        extra: dict[str, Any] = {}
    elif isinstance(item, dict) and len(item) == 1:
        ((name, arg),) = item.items()
        extra = {}
        if isinstance(arg, dict) and "timeout" in arg:
            arg = dict(arg)
            extra["timeout"] = arg.pop("timeout")
    else:
        raise ScenarioError(
            f"{_where(path, where)}: a step is a name or a mapping of one name to its argument"
        )
    if name not in vocab:
        close = ", ".join(sorted(vocab))
        raise ScenarioError(f"{_where(path, where)}: unknown {name!r}; known: {close}")
    kind = vocab[name]
    timeout = extra.get("timeout", WAIT_TIMEOUT)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise ScenarioError(f"{_where(path, where)}.timeout: a number of seconds > 0, not {timeout!r}")
    if kind is None:
        if arg is not None:
            raise ScenarioError(f"{_where(path, where)}: {name} takes no argument, got {arg!r}")
    elif isinstance(kind, tuple):
        if arg not in kind:
            raise ScenarioError(f"{_where(path, where)}: {name} takes one of {', '.join(kind)}, not {arg!r}")
    elif kind is float:
        if not isinstance(arg, int | float) or isinstance(arg, bool) or arg <= 0:
            raise ScenarioError(f"{_where(path, where)}: {name} takes seconds > 0, not {arg!r}")
        arg = float(arg)
    elif kind is str:
        if not isinstance(arg, str) or not arg:
            raise ScenarioError(f"{_where(path, where)}: {name} takes a name, not {arg!r}")
    elif kind == "file":
        if not isinstance(arg, str) or not (path.parent / arg).is_file():
            raise ScenarioError(
                f"{_where(path, where)}: {name} takes a jobspec beside the scenario, not {arg!r}"
            )
        arg = str((path.parent / arg).resolve())
    elif kind == "wait":
        arg = _wait_arg(path, where, arg)
    elif kind == "dispatch":
        arg = _dispatch_arg(path, where, arg)
    elif kind == "drain":
        if arg != "force" and (not isinstance(arg, int | float) or isinstance(arg, bool) or arg <= 0):
            raise ScenarioError(f"{_where(path, where)}: node_drain takes force or a deadline in seconds > 0")
    elif kind == "run":
        if arg is not None:
            if not isinstance(arg, dict) or set(arg) != {"refused"} or not isinstance(arg["refused"], str):
                raise ScenarioError(f"{_where(path, where)}: run takes nothing, or {{refused: RE}}")
            try:
                re.compile(arg["refused"])
            except re.error as exc:
                raise ScenarioError(
                    f"{_where(path, where)}.refused: not a regular expression: {exc}"
                ) from None
    else:  # a check
        arg = _check_arg(path, where, name, arg)
    return Step(str(name), arg, float(timeout))


def _keys(path: Path, where: str, arg: dict[str, Any], allowed: set[str], required: set[str]) -> None:
    unknown = sorted(set(arg) - allowed)
    if unknown:
        raise ScenarioError(f"{_where(path, where)}: unknown key(s) {unknown}; known: {sorted(allowed)}")
    missing = sorted(required - set(arg))
    if missing:
        raise ScenarioError(f"{_where(path, where)}: missing {missing}")


def _wait_arg(path: Path, where: str, arg: object) -> object:
    if arg == "invariants" or arg == {"invariants": True}:  # the second form takes a timeout
        return "invariants"
    if not isinstance(arg, dict):
        raise ScenarioError(f"{_where(path, where)}: wait takes invariants or {{alloc: ...}} / {{task: ...}}")
    if "file" in arg:
        _keys(path, where, arg, {"file", "contains"}, {"file"})
        _file_arg(
            path, where, {"path": arg["file"], **({"contains": arg["contains"]} if "contains" in arg else {})}
        )
        return arg
    if "replaced" in arg:
        _keys(path, where, arg, {"replaced"}, {"replaced"})
        if not isinstance(arg["replaced"], bool):
            raise ScenarioError(f"{_where(path, where)}.replaced: true or false")
        return arg
    if "children" in arg or "launch_due" in arg:
        key = "children" if "children" in arg else "launch_due"
        _keys(path, where, arg, {key}, {key})
        if key == "launch_due" and arg[key] is not True:
            raise ScenarioError(f"{_where(path, where)}.launch_due: true")
        if key == "children":
            _count(path, f"{where}.children", arg[key])
        return arg
    if "alloc" in arg:
        _keys(path, where, arg, {"alloc"}, {"alloc"})
        if arg["alloc"] not in ALLOC_STATUSES:
            raise ScenarioError(f"{_where(path, where)}.alloc: one of {', '.join(ALLOC_STATUSES)}")
        return arg
    _keys(path, where, arg, {"task", "state", "event", "count"}, {"task"})
    if ("state" in arg) == ("event" in arg):
        raise ScenarioError(f"{_where(path, where)}: a task wait has either state or event")
    if "state" in arg and arg["state"] not in TASK_STATES:
        raise ScenarioError(f"{_where(path, where)}.state: one of {', '.join(TASK_STATES)}")
    count = arg.get("count", 1)
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ScenarioError(f"{_where(path, where)}.count: a whole number >= 1")
    return arg


def _check_arg(path: Path, where: str, name: str, arg: object) -> object:
    if name == "alloc":
        if arg not in ALLOC_STATUSES:
            raise ScenarioError(f"{_where(path, where)}: alloc: one of {', '.join(ALLOC_STATUSES)}")
    elif name == "replaced":
        if not isinstance(arg, bool):
            raise ScenarioError(f"{_where(path, where)}: replaced: true or false")
    elif name == "invariants":
        if arg not in (None, True):
            raise ScenarioError(f"{_where(path, where)}: invariants takes no argument")
    elif name == "swept":
        if arg != "none":
            raise ScenarioError(
                f"{_where(path, where)}: swept: none (nothing of the alloc left to the sweeper)"
            )
    elif not isinstance(arg, dict):
        raise ScenarioError(f"{_where(path, where)}: {name} takes a mapping")
    elif name == "task":
        _keys(path, where, arg, {"name", "state", "restarts", "failed"}, {"name"})
    elif name == "starts":
        _keys(path, where, arg, {"task", "count"}, {"task", "count"})
    elif name in ("children", "allocs"):
        keys = {"count", "running"} if name == "children" else {"count"}
        _keys(path, where, arg, keys, set() if name == "children" else {"count"})
        if not arg:
            raise ScenarioError(f"{_where(path, where)}: children: count and/or running")
        for key, n in arg.items():
            _count(path, f"{where}.{key}", n, least=0)
    elif name == "file":
        _file_arg(path, where, arg)
    elif name == "logs":
        _keys(path, where, arg, {"task", "stream", "contains", "lacks"}, {"task"})
        if arg.get("stream", "stdout") not in ("stdout", "stderr"):
            raise ScenarioError(f"{_where(path, where)}.stream: stdout or stderr")
        _file_arg(
            path, where, {"path": "alloc/logs", **{k: arg[k] for k in ("contains", "lacks") if k in arg}}
        )
    elif name == "events":
        _keys(path, where, arg, {"task", "has", "lacks", "after"}, set())
        for key in ("has", "lacks"):
            if not isinstance(arg.get(key, []), list):
                raise ScenarioError(f"{_where(path, where)}.{key}: a list of event types")
    return arg


def _count(path: Path, where: str, n: object, least: int = 1) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < least:
        raise ScenarioError(f"{_where(path, where)}: a whole number >= {least}")


def _dispatch_arg(path: Path, where: str, arg: object) -> dict[str, Any]:
    """`dispatch` takes nothing, or {payload: TEXT, meta: {KEY: VALUE}} (strings, as `job dispatch`)."""
    arg = {} if arg is None else arg
    if not isinstance(arg, dict):
        raise ScenarioError(f"{_where(path, where)}: dispatch takes {{payload: TEXT, meta: {{K: V}}}}")
    _keys(path, where, arg, {"payload", "meta"}, set())
    if not isinstance(arg.get("payload", ""), str):
        raise ScenarioError(f"{_where(path, where)}.payload: a string")
    meta = arg.get("meta", {})
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ScenarioError(f"{_where(path, where)}.meta: a mapping of strings")
    return arg


def _file_arg(path: Path, where: str, arg: dict[str, Any]) -> None:
    _keys(path, where, arg, {"path", "exists", "contains", "lacks"}, {"path"})
    target = arg["path"]
    if not isinstance(target, str) or not target or target.startswith("/") or ".." in target.split("/"):
        raise ScenarioError(
            f"{_where(path, where)}.path: a path inside the alloc dir (alloc/x, TASK/local/x)"
        )
    if not isinstance(arg.get("exists", True), bool):
        raise ScenarioError(f"{_where(path, where)}.exists: true or false")
    for key in ("contains", "lacks"):
        if key in arg:
            try:
                re.compile(str(arg[key]))
            except re.error as exc:
                raise ScenarioError(f"{_where(path, where)}.{key}: not a regular expression: {exc}") from None


CHECK_VOCAB: dict[str, object] = dict.fromkeys(CHECKS, "check")


def _head(path: Path, v: dict[str, str]) -> Scenario:
    return Scenario(
        path,
        bug=v["bug"],
        title=v["title"],
        link=v["link"],
        versions=v["versions"],
        family=v["family"],
        flag=v["flag"],
        symptom=v["symptom"],
        what=v["what"],
    )


def load(path: Path, in_catalogue: bool | None = None) -> Scenario:
    """The scenario in `path`; ScenarioError names the file and the field of anything wrong.
    `in_catalogue` (default: whether the file is in e2e/scenarios/) asks for a catalogue entry's
    stricter id, its public link and every field."""
    if in_catalogue is None:
        in_catalogue = path.resolve().parent == SCENARIOS
    try:
        raw = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"{path}: not YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ScenarioError(f"{path}: a scenario is a mapping of fields ({', '.join(REQUIRED)}, ...)")
    known = {*REQUIRED, *CATALOGUE_REQUIRED, "python", "python_why", "jobspec", "images", "steps", "checks"}
    known |= {"hold", "node", "chaos", "seed", "nightly"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ScenarioError(f"{path}: unknown field(s) {unknown}; known: {sorted(known)}")
    values = _names(path, raw, in_catalogue)
    try:
        re.compile(values["symptom"])
    except re.error as exc:
        raise ScenarioError(f"{_where(path, 'symptom')}: not a regular expression: {exc}") from None
    python = raw.get("python")
    if python is not None:
        if not isinstance(python, list) or not python or not all(isinstance(t, str) for t in python):
            raise ScenarioError(f"{_where(path, 'python')}: a list of pytest node ids under e2e/suites/")
        if any(k in raw for k in ("jobspec", "steps", "checks")):
            raise ScenarioError(f"{path}: a scenario has either python or jobspec/steps/checks, not both")
        chaos = raw.get("chaos") or []
        if not isinstance(chaos, list) or not all(isinstance(c, str) for c in chaos):
            raise ScenarioError(
                f"{_where(path, 'chaos')}: a list of chaos steps ('kill-pause client#1 hold 5s job#0')"
            )
        try:
            parse_schedule("; ".join(chaos)) if chaos else None
        except ScheduleError as exc:
            raise ScenarioError(f"{_where(path, 'chaos')}: {exc}") from None
        seed = raw.get("seed")
        if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool)):
            raise ScenarioError(f"{_where(path, 'seed')}: a whole number")
        return replace(
            _head(path, values),
            python=tuple(python),
            python_why=str(raw.get("python_why") or ""),
            chaos=tuple(chaos),
            seed=seed,
        )
    for key in ("jobspec", "steps", "checks"):
        if key not in raw:
            raise ScenarioError(f"{_where(path, key)}: required (or python: for a scenario in Python)")
    jobspec = path.parent / _text(path, raw, "jobspec")
    if not jobspec.is_file():
        raise ScenarioError(f"{_where(path, 'jobspec')}: no file {jobspec}")
    try:
        form = scenario_jobspec.check(jobspec.read_text())
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"{_where(path, 'jobspec')}: cannot read {jobspec}: {exc}") from None
    if form:
        raise ScenarioError(f"{_where(path, 'jobspec')}: {jobspec.name}: {form}")
    images = _images(path, raw.get("images"))
    steps_raw, checks_raw = raw["steps"], raw["checks"]
    if not isinstance(steps_raw, list) or not steps_raw:
        raise ScenarioError(f"{_where(path, 'steps')}: a non-empty list")
    steps = tuple(_step(path, f"steps[{i}]", s, STEPS) for i, s in enumerate(steps_raw))
    if steps[0].name != "run":
        raise ScenarioError(f"{_where(path, 'steps[0]')}: the first step is run (the jobspec submitted)")
    if steps[0].arg is not None:  # run: {refused: RE}: the submission is all there is to judge
        if len(steps) > 1 or checks_raw:
            raise ScenarioError(f"{_where(path, 'steps')}: after a refused run nothing more (checks: [])")
    elif not isinstance(checks_raw, list) or not checks_raw:
        raise ScenarioError(f"{_where(path, 'checks')}: a non-empty list")
    checks = tuple(_step(path, f"checks[{i}]", c, CHECK_VOCAB) for i, c in enumerate(checks_raw))
    hold = raw.get("hold", 0)
    if not isinstance(hold, int | float) or isinstance(hold, bool) or hold < 0:
        raise ScenarioError(f"{_where(path, 'hold')}: seconds >= 0")
    nightly = raw.get("nightly", "")
    if not isinstance(nightly, str) or ("nightly" in raw and not nightly.strip()):
        raise ScenarioError(f"{_where(path, 'nightly')}: why it runs in make nightly only (text)")
    return replace(
        _head(path, values),
        jobspec=jobspec,
        images=images,
        steps=steps,
        checks=checks,
        hold=float(hold),
        node=str(raw.get("node") or ""),
        nightly=nightly.strip(),
    )


def _names(path: Path, raw: dict[str, Any], in_catalogue: bool) -> dict[str, str]:
    """The scenario's head fields, checked: every scenario's, and a catalogue entry's stricter ones."""
    from agent.fieldbugs.catalogue import IMPLEMENTED_FAULTS

    values = {key: _text(path, raw, key) for key in REQUIRED}
    try:
        values["bug"], url = scenario_ids.report_id(values["bug"])
    except scenario_ids.IdError as exc:
        raise ScenarioError(f"{_where(path, 'bug')}: {exc}") from None
    if in_catalogue and not scenario_ids.CATALOGUE_ID.match(values["bug"]):
        raise ScenarioError(f"{path}: {scenario_ids.catalogue_problem(values['bug'], '')}")
    for key in CATALOGUE_REQUIRED:
        # outside the catalogue each may be left out; a report's URL as its bug is its link
        given = raw.get(key) is not None or (in_catalogue and not (key == "link" and url))
        values[key] = _text(path, raw, key) if given else ""
    values["link"] = values["link"] or url
    if in_catalogue:
        problem = scenario_ids.catalogue_problem(values["bug"], values["link"])
        if problem:
            raise ScenarioError(f"{path}: {problem}")
    if values["family"] and values["family"] not in FAMILIES:
        raise ScenarioError(f"{_where(path, 'family')}: one of {', '.join(FAMILIES)}")
    problem = scenario_ids.flag_problem(values["flag"], IMPLEMENTED_FAULTS)
    if problem:
        raise ScenarioError(f"{_where(path, 'flag')}: {problem}")
    if in_catalogue and not scenario_ids.flags_of(values["flag"]):
        raise ScenarioError(
            f"{_where(path, 'flag')}: a catalogue entry names the agent's fault flag that puts the bug back"
        )
    values["flag"] = ",".join(scenario_ids.flags_of(values["flag"]))
    return values


def _order(s: Scenario) -> tuple[int, str, int]:
    """By family, then by the bug's number."""
    digits = re.search(r"-([0-9]+)", s.bug)
    return (FAMILIES.index(s.family), s.bug.split("-")[0], int(digits.group(1)) if digits else 0)


def catalogue(root: Path = SCENARIOS) -> tuple[Scenario, ...]:
    """Every scenario under `root`, in file-name order; the first bad file raises ScenarioError."""
    found = tuple(sorted((load(p, in_catalogue=True) for p in root.glob("*.yml")), key=_order))
    seen: dict[str, Path] = {}
    for s in found:
        if s.bug in seen:
            raise ScenarioError(f"{s.path}: bug {s.bug} already in {seen[s.bug]}")
        seen[s.bug] = s.path
    return found


# -- the job as the lab runs it ----------------------------------------------------------------------
def substitute_images(job: dict[str, Any], images: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The api.Job with the report's images replaced by the lab's; `images` maps a report's image to
    a lab image, or to {image, command, args} when the lab's image needs telling what to run (a
    busybox httpd for the report's nginx). Returns the job and the substitutions made, as
    `task: old -> new` lines for the run's history. An image the map does not name stays."""
    done: list[str] = []
    groups = []
    for group in job.get("TaskGroups") or []:
        tasks = []
        for task in group.get("Tasks") or []:
            config = dict(task.get("Config") or {})
            image = config.get("image")
            if isinstance(image, str) and image in images:
                to = images[image]
                new = {"image": to} if isinstance(to, str) else dict(to)
                config.update(new)
                extra = " ".join(f"{k}={v}" for k, v in new.items() if k != "image")
                done.append(
                    f"{task.get('Name')}: {image} -> {new['image']}" + (f" ({extra})" if extra else "")
                )
            tasks.append({**task, "Config": config})
        groups.append({**group, "Tasks": tasks})
    return {**job, "TaskGroups": groups}, done


def _images(path: Path, raw: object) -> dict[str, Any]:
    """The scenario's image map, checked: a report's image -> a lab image or {image, command, args}."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ScenarioError(f"{_where(path, 'images')}: a mapping of the report's image to a lab image")
    out: dict[str, Any] = {}
    for old, to in raw.items():
        where = f"images.{old}"
        if isinstance(to, str) and to:
            out[str(old)] = to
            continue
        if not isinstance(to, dict) or not isinstance(to.get("image"), str):
            raise ScenarioError(
                f"{_where(path, where)}: a lab image, or a mapping with image (and command, args)"
            )
        _keys(path, where, to, {"image", "command", "args"}, {"image"})
        if "command" in to and not isinstance(to["command"], str):
            raise ScenarioError(f"{_where(path, where)}.command: a string")
        if "args" in to and not (
            isinstance(to["args"], list) and all(isinstance(a, str) for a in to["args"])
        ):
            raise ScenarioError(f"{_where(path, where)}.args: a list of strings")
        out[str(old)] = dict(to)
    return out


# -- the checks: (alloc view, its events, whether it was replaced) -> problems ---------------------------
