"""agent.nomadapi.structs: every view has the shape of its Nomad `api` struct (tests/nomad_structs.py),
the values Nomad's would have (units, names, zero values), and the keys of the example responses in
Nomad's API docs; and a job written by `job_json` reads back as the same job, for every jobspec of
tests/jobspecs, without a warning about a field the user never wrote.
"""

from __future__ import annotations

import dataclasses
import json
import re
import stat
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from agent.cli import validate
from agent.decide.jobupdate import DESIRED_UPDATES
from agent.jobspec import JobspecError, ParsedJob, parse_jobspec
from agent.nomadapi import fsjson, jobplan, structs
from agent.nomadapi.jobdiff import annotate, job_diff
from agent.nomadapi.jobscale import ScalingEvents, scale_status
from agent.state.store import Event
from agent.structs.model import Job
from tests.nomad_structs import (
    OMITEMPTY_ELSEWHERE,
    SERVER_FIELDS,
    SOURCE_FILE,
    STRUCTS,
    TIME,
    ListOf,
    MapOf,
    Omit,
    Struct,
    check_shape,
    check_value,
    go_kind,
    kind,
)

JOBSPECS = Path(__file__).parent / "jobspecs"
NOMAD = Path("/work/.mirror/hashicorp+nomad/repo")  # a snapshot of Nomad's repository, when present
T0 = 1_764_840_553.25  # 2025-12-04T09:29:13.25Z

HCL = """
job "web" {
  datacenters = ["dc1"]
  meta { team = "edge" }
  group "frontend" {
    count = 2
    network {
      mode = "bridge"
      port "http" { to = 8080 }
      port "admin" {
        static = 9000
        to     = 9000
      }
    }
    restart {
      attempts = 3
      interval = "10m"
      delay    = "25s"
      mode     = "delay"
    }
    service {
      name = "web-http"
      port = "http"
      tags = ["edge", "v1"]
      check {
        type     = "http"
        path     = "/health"
        interval = "15s"
        timeout  = "3s"
      }
    }
    task "server" {
      driver = "docker"
      user   = "nobody"
      config {
        image = "nginx:1.27"
        ports = ["http", "admin"]
      }
      env { MODE = "prod" }
      resources {
        cpu    = 250
        memory = 128
      }
      kill_timeout = "12s"
      kill_signal  = "SIGQUIT"
      template {
        data          = "{{ key \\"conf\\" }}"
        destination   = "local/app.conf"
        change_mode   = "script"
        change_script {
          command = "/bin/reload"
          args    = ["-q"]
          timeout = "7s"
        }
        wait {
          min = "2s"
          max = "9s"
        }
      }
      template {
        data        = "X=1"
        destination = "secrets/app.env"
        env         = true
        perms       = "600"
      }
      vault {
        policies      = ["web"]
        change_mode   = "signal"
        change_signal = "SIGHUP"
        disable_file  = true
      }
    }
  }
}
"""


def _job() -> Job:
    return parse_jobspec(HCL, source="test", fmt="hcl").job


def _job_dict(job: Job | None = None, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "region": "global",
        "namespace": "default",
        "status": "running",
        "version": 3,
        "stable": True,
        "submit_time": T0,
        "create_index": 11,
        "modify_index": 42,
        "job_modify_index": 40,
    }
    return structs.job_json(job or _job(), **(args | kw))


def _ev(t: float, type_: str, message: str = "", task: str = "server", **details: Any) -> Event:
    return Event(seq=0, time=t, alloc_id="a1", task=task, type=type_, message=message, details=details)


EVENTS = [
    _ev(T0, "Received", "Task received by client"),
    _ev(T0 + 1, "Started", "Task started by client", cause="first start"),
    _ev(T0 + 5, "Terminated", "Exit Code: 137", exit_code=137),
    _ev(T0 + 5, "Restarting", "Task restarting in 25.0s (restart policy)"),
    _ev(T0 + 30.123456, "Started", "Task started by client", cause="restart policy"),
]

# agent.runner.view.alloc_view
VIEW: dict[str, Any] = {
    "id": "5457f16d-0f87-8e6b-5e91-0c7da3a41eb7",
    "job": "web",
    "group": "frontend",
    "status": "running",
    "desired": "run",
    "reason": "",
    "replaced_by": "",
    "replaces": "0f98f7ea-59ae-4d90-d9bd-b8ce80b9e100",
    "created": T0,
    "network": {
        "mode": "bridge",
        "address": "172.26.64.7",
        "ports": [{"label": "http", "host": 23116, "to": 8080}, {"label": "admin", "host": 9000, "to": 9000}],
        "pause_container": "c0ffee",
    },
    "tasks": {
        "server": {"driver": "docker", "state": "running", "restarts": 1, "failed": False, "container": "c1"}
    },
}

# agent.runner.adopt.AdoptedAlloc.view(): tasks found running after the state database was lost
ADOPTED: dict[str, Any] = {
    "id": "7a6b1c2d-0000-4000-8000-000000000001",
    "job": "web",
    "group": "frontend",
    "status": "adopted",
    "desired": "run",
    "reason": "adopted after the state database was lost",
    "replaced_by": "",
    "replaces": "",
    "created": T0,
    "network": {"mode": "unknown", "address": "", "ports": [], "pause_container": None},
    "tasks": {
        "server": {"state": "running", "restarts": 0, "failed": False, "container": "c1", "cgroup": None}
    },
    "adopted": {"state_db": "/var/lib/fieldlab/state.db.corrupt", "at": T0},
}

ALLOC_ARGS: dict[str, Any] = {
    "events_by_task": {"server": EVENTS},
    "node_id": "f476d2b4-02dc-c216-d031-273396727347",
    "node_name": "client-1",
    "namespace": "default",
    "create_index": 12,
    "modify_index": 57,
    "alloc_modify_index": 54,
    "modify_time": T0 + 31,
}

NODE_ARGS: dict[str, Any] = {
    "node_id": "f476d2b4-02dc-c216-d031-273396727347",
    "name": "client-1",
    "datacenter": "dc1",
    "address": "10.213.0.11:4646",
    "drivers": {
        "docker": {"healthy": True, "detected": True, "description": "Healthy"},
        "exec": {"healthy": False, "detected": False, "description": "Driver must run as root"},
    },
    "attributes": {
        "nomad.version": "0.1.0",
        "os.name": "linux",
        "cpu.totalcompute": "8000",
        "cpu.numcores": "4",
        "memory.totalbytes": str(16 * 1024**3),
        "unique.storage.bytestotal": str(100 * 1024**3),
    },
    "meta": {"rack": "r1"},
    "create_index": 1,
    "modify_index": 9,
}


def _alloc(view: Mapping[str, Any] = VIEW, **kw: Any) -> dict[str, Any]:
    return structs.alloc_json(view, **({"job": _job_dict()} | ALLOC_ARGS | kw))


def _self() -> dict[str, Any]:
    config = {
        "Datacenter": "dc1",
        "NodeName": "client-1",
        "Region": "global",
        "Version": {"Version": "0.1.0"},
    }
    return structs.agent_self(
        node_name="client-1",
        datacenter="dc1",
        region="global",
        version="0.1.0",
        config=config,
        node_id="f476d2b4-02dc-c216-d031-273396727347",
    )


def _summary() -> dict[str, Any]:
    counts = {"frontend": {"pending": 1, "running": 2, "failed": 3, "complete": 4, "adopted": 5}}
    return structs.job_summary("web", "default", counts, 11, 57)


def _eval() -> dict[str, Any]:
    return structs.evaluation(
        "2deb5f06-a100-f01a-3316-5e501a4965e7",
        job_id="web",
        namespace="default",
        triggered_by="job-register",
        create_index=13,
        modify_index=13,
        create_time=T0,
        type_="service",
    )


def _member() -> dict[str, Any]:
    return structs.agent_member(
        node_name="client-1", datacenter="dc1", region="global", version="0.1.0", addr="10.213.0.11:4646"
    )


def _plan() -> dict[str, Any]:
    """A plan of the test job with its first group's count up and its first task's env changed."""
    old = _job_dict()
    new = json.loads(json.dumps(old))
    group = new["TaskGroups"][0]
    group["Count"] = int(group["Count"] or 1) + 1
    group["Tasks"][0]["Env"] = {**(group["Tasks"][0].get("Env") or {}), "PLANNED": "yes"}
    group["Tasks"][0]["Config"] = {**(group["Tasks"][0].get("Config") or {}), "planned": "yes"}
    name = str(group["Name"])
    desired = {name: dict.fromkeys(DESIRED_UPDATES, 0) | {"Place": 1, "DestructiveUpdate": 1}}
    failed = jobplan.failed_groups(_job(), [(f"job.{_job().id}.group.{name}", "${node.class} = gpu")])
    return jobplan.plan_response(40, annotate(job_diff(old, new), desired), desired, failed, ["a warning"])


def _scale_status() -> dict[str, Any]:
    """The test job's scale status: one live alloc of its group, one stopped, one scaling event."""
    job = _job_dict()
    name = str(job["TaskGroups"][0]["Name"])
    allocs = [
        {"group": name, "status": "running", "desired": "run"},
        {"group": name, "status": "complete", "desired": "stop"},
    ]
    events = ScalingEvents()
    events.add(
        str(job["ID"]),
        name,
        {
            "Count": 2,
            "PreviousCount": 1,
            "Error": False,
            "Message": "scaled by the test",
            "Meta": None,
            "EvalID": "9b1f0c2e-0000-4000-8000-000000000001",
            "Time": 1_700_000_000_000_000_000,
            "CreateIndex": 41,
        },
    )
    out = scale_status(job, allocs, events.of(str(job["ID"])))
    assert out["TaskGroups"][name] | {"Events": None} == {
        "Desired": job["TaskGroups"][0]["Count"],
        "Placed": 1,
        "Running": 1,
        "Healthy": 0,
        "Unhealthy": 0,
        "Events": None,
    }
    return {**out, "TaskGroups": {"web": out["TaskGroups"][name]}}


# Every view, with the struct it is (the inputs are the realistic ones above).
VIEWS: dict[str, Callable[[], dict[str, Any]]] = {
    "Job": _job_dict,
    "JobListStub": lambda: structs.job_stub(_job_dict(), status="running", summary=_summary()),
    "JobSummary": _summary,
    "TaskEvent": lambda: structs.task_event(EVENTS[2]),
    "TaskState": lambda: structs.task_state("running", False, 1, EVENTS),
    "Allocation": _alloc,
    "AllocationListStub": lambda: structs.alloc_stub(
        VIEW, job=_job_dict(), **ALLOC_ARGS, with_resources=True
    ),
    "Evaluation": _eval,
    "Node": lambda: structs.node_json(**NODE_ARGS),
    "NodeListStub": lambda: structs.node_stub(**NODE_ARGS, with_resources=True, with_os=True),
    "AgentSelf": _self,
    "AgentMember": _member,
    "AgentHealthResponse": lambda: structs.health(True, "ok", server_asked=True),
    "AllocFileInfo": lambda: fsjson.file_info(
        "app.conf", False, 96, 0o100644, T0, "text/plain; charset=utf-8"
    ),
    "JobPlanResponse": _plan,
    "JobDiff": lambda: _plan()["Diff"],
    "TaskGroupDiff": lambda: _plan()["Diff"]["TaskGroups"][0],
    "TaskDiff": lambda: _plan()["Diff"]["TaskGroups"][0]["Tasks"][0],
    "FieldDiff": lambda: _plan()["Diff"]["TaskGroups"][0]["Fields"][0],
    "ObjectDiff": lambda: _plan()["Diff"]["TaskGroups"][0]["Tasks"][0]["Objects"][0],
    "PlanAnnotations": lambda: _plan()["Annotations"],
    "DesiredUpdates": lambda: next(iter(_plan()["Annotations"]["DesiredTGUpdates"].values())),
    "JobScaleStatusResponse": _scale_status,
    "TaskGroupScaleStatus": lambda: _scale_status()["TaskGroups"]["web"],
    "ScalingEvent": lambda: _scale_status()["TaskGroups"]["web"]["Events"][0],
    "StreamFrame": lambda: fsjson.stream_frame(
        3604480, b"hello\n", "alloc/logs/server.stdout.0", "file truncated"
    ),
}


# --- the table and its checker ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_every_view_has_the_shape_of_its_nomad_struct(name: str) -> None:
    value = VIEWS[name]()
    check_shape(name, value)
    json.dumps(value)  # what the API writes: JSON-ready as it is


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_the_checker_fails_when_a_view_drops_or_misnames_a_field(name: str) -> None:
    value = VIEWS[name]()
    for field in value:
        dropped = {k: v for k, v in value.items() if k != field}
        if not isinstance(STRUCTS[name][field], Omit):
            with pytest.raises(AssertionError, match=re.escape(f".{field}: missing")):
                check_shape(name, dropped)
        misnamed = dropped | {field.lower() if field != field.lower() else field.upper(): value[field]}
        with pytest.raises(AssertionError, match="unknown field"):
            check_shape(name, misnamed)


def test_the_checker_names_the_path_of_a_wrong_type_and_refuses_null_for_a_go_value() -> None:
    alloc = _alloc()
    alloc["TaskStates"]["server"]["Events"][0]["Time"] = 1.5
    with pytest.raises(
        AssertionError, match=r"Allocation\.TaskStates\[server\]\.Events\[0\]\.Time: expected int"
    ):
        check_shape("Allocation", alloc)
    alloc = _alloc()
    alloc["DesiredTransition"] = None  # a struct value in Go, never null
    with pytest.raises(AssertionError, match="DesiredTransition: null"):
        check_shape("Allocation", alloc)
    alloc = _alloc()
    alloc["ClientStatus"] = None  # a string, not a *string
    with pytest.raises(AssertionError, match="ClientStatus: expected str"):
        check_shape("Allocation", alloc)
    alloc = _alloc()
    alloc["TaskStates"]["server"]["StartedAt"] = T0  # a time.Time is an RFC 3339 string
    with pytest.raises(AssertionError, match="StartedAt: expected an RFC 3339"):
        check_shape("Allocation", alloc)
    alloc = _alloc()
    alloc["Job"]["TaskGroups"][0]["Tasks"][0]["Resources"]["CPUs"] = 1  # deep inside: still found
    with pytest.raises(AssertionError, match=r"Job\.TaskGroups\[0\]\.Tasks\[0\]\.Resources: unknown field"):
        check_shape("Allocation", alloc)
    with pytest.raises(AssertionError, match="expected int"):
        check_value(int, True, "x")  # a bool is no Go int


def _go_struct_fields(file: str, name: str) -> dict[str, tuple[str, bool, bool]]:
    """{JSON name: go_kind} of `type <name> struct` in api/<file> of the Nomad snapshot."""
    text = subprocess.run(
        ["git", "-C", str(NOMAD), "show", f"HEAD:api/{file}"], capture_output=True, text=True, check=True
    ).stdout
    body = re.search(rf"^type {name} struct {{\n(.*?)^}}", text, re.S | re.M)
    assert body, f"no type {name} struct in api/{file}"
    out: dict[str, tuple[str, bool, bool]] = {}
    for line in body.group(1).splitlines():
        # One field, or several of one type ("Old, New string").
        m = re.match(r"^\s+([A-Z]\w*(?:,\s*[A-Z]\w*)*)\s+([^`/\s]+)\s*(?:`([^`]*)`)?", line)
        if not m:
            continue
        names, go_type, tags = m.groups()
        json_tag = re.search(r'json:"([^"]*)"', tags or "")
        parts = json_tag.group(1).split(",") if json_tag else [""]
        if parts[0] == "-":
            continue
        for field in re.split(r",\s*", names):
            out[parts[0] or field] = go_kind(go_type, "omitempty" in parts[1:])
    return out


@pytest.mark.skipif(not (NOMAD / "HEAD").exists(), reason="no snapshot of Nomad's repository here")
@pytest.mark.parametrize("name", sorted(STRUCTS))
def test_the_table_is_nomads_api_struct(name: str) -> None:
    """Field names, JSON kinds, nullability and omitempty of the table are the Go struct's."""
    go = _go_struct_fields(SOURCE_FILE[name], name)
    ours = {f: kind(spec) for f, spec in STRUCTS[name].items()}
    for field, (base, null, _) in list(ours.items()):
        if (name, field) in OMITEMPTY_ELSEWHERE:  # omitempty in the struct the client encodes
            ours[field] = (base, null, False)
    assert ours == go


def test_the_table_covers_the_structs_it_names() -> None:
    """Every struct a spec refers to is in the table (no dangling Struct names)."""

    def refs(spec: Any) -> set[str]:
        if isinstance(spec, Omit):
            return refs(spec.spec)
        if isinstance(spec, Struct):
            return {spec.name}
        if isinstance(spec, ListOf):
            return refs(spec.item)
        if isinstance(spec, MapOf):
            return refs(spec.value)
        return set()

    named: set[str] = set().union(*(refs(s) for fields in STRUCTS.values() for s in fields.values()))
    assert named <= set(STRUCTS)
    assert set(STRUCTS) == set(SOURCE_FILE)
    assert kind(TIME) == ("time", False, False)


# --- jobs ------------------------------------------------------------------------------------------------


def test_job_json_is_nomads_job_with_the_agents_values() -> None:
    job = _job_dict()
    assert (job["ID"], job["Name"], job["Type"], job["Priority"], job["NodePool"]) == (
        "web",
        "web",
        "service",
        50,
        "default",
    )
    assert (job["Region"], job["Namespace"], job["Status"], job["Version"], job["Stable"]) == (
        "global",
        "default",
        "running",
        3,
        True,
    )
    assert job["SubmitTime"] == 1_764_840_553_250_000_000
    assert (job["CreateIndex"], job["ModifyIndex"], job["JobModifyIndex"]) == (11, 42, 40)
    assert job["Meta"] == {"team": "edge"} and job["Datacenters"] == ["dc1"]
    assert (job["Stop"], job["AllAtOnce"], job["Periodic"], job["ParameterizedJob"]) == (
        False,
        False,
        None,
        None,
    )
    tg = job["TaskGroups"][0]
    assert (tg["Name"], tg["Count"]) == ("frontend", 2)
    assert tg["RestartPolicy"] == {
        "Interval": 600_000_000_000,
        "Attempts": 3,
        "Delay": 25_000_000_000,
        "Mode": "delay",
        "RenderTemplates": False,
    }
    (net,) = tg["Networks"]
    assert net["Mode"] == "bridge"
    assert net["DynamicPorts"] == [
        {"Label": "http", "Value": 0, "To": 8080, "HostNetwork": "default", "IgnoreCollision": False}
    ]
    assert net["ReservedPorts"] == [
        {"Label": "admin", "Value": 9000, "To": 9000, "HostNetwork": "default", "IgnoreCollision": False}
    ]
    (svc,) = tg["Services"]
    assert (svc["Name"], svc["PortLabel"], svc["Tags"], svc["Provider"]) == (
        "web-http",
        "http",
        ["edge", "v1"],
        "consul",
    )
    (check,) = svc["Checks"]
    assert (check["Type"], check["Path"], check["Interval"], check["Timeout"]) == (
        "http",
        "/health",
        15_000_000_000,
        3_000_000_000,
    )
    assert check["Name"] == 'service: "web-http" check'
    (task,) = tg["Tasks"]
    assert (task["Name"], task["Driver"], task["User"], task["KillSignal"]) == (
        "server",
        "docker",
        "nobody",
        "SIGQUIT",
    )
    assert task["KillTimeout"] == 12_000_000_000
    assert task["Config"] == {"image": "nginx:1.27", "ports": ["http", "admin"]}
    assert task["Env"] == {"MODE": "prod"}
    assert (task["Resources"]["CPU"], task["Resources"]["MemoryMB"]) == (250, 128)
    assert (task["Leader"], task["Lifecycle"]) == (False, None)
    assert task["Vault"] == {
        "Policies": ["web"],
        "Role": "",
        "Namespace": "",
        "Cluster": "",
        "Env": True,
        "DisableFile": True,
        "ChangeMode": "signal",
        "ChangeSignal": "SIGHUP",
        "AllowTokenExpiration": False,
    }
    script, env = task["Templates"]
    assert (script["DestPath"], script["EmbeddedTmpl"], script["SourcePath"]) == (
        "local/app.conf",
        '{{ key "conf" }}',
        "",
    )
    assert script["ChangeMode"] == "script"
    assert script["ChangeScript"] == {
        "Command": "/bin/reload",
        "Args": ["-q"],
        "Timeout": 7_000_000_000,
        "FailOnError": False,
        "RunOnFirstRender": False,
    }
    assert script["Wait"] == {"Min": 2_000_000_000, "Max": 9_000_000_000}
    assert (script["Splay"], script["Perms"], script["LeftDelim"], script["RightDelim"]) == (
        5_000_000_000,
        "0644",
        "{{",
        "}}",
    )
    assert (env["Envvars"], env["Perms"], env["Wait"], env["ChangeScript"]) == (True, "0600", None, None)


def test_a_job_without_optional_parts_writes_go_nils() -> None:
    hcl = 'job "j" {\n group "g" {\n task "t" {\n driver = "exec"\n'
    hcl += ' config { command = "/bin/true" }\n }\n }\n}'
    out = _job_dict(parse_jobspec(hcl, source="t", fmt="hcl").job)
    check_shape("Job", out)
    assert out["Meta"] is None and out["Datacenters"] == ["*"]
    tg = out["TaskGroups"][0]
    assert (tg["Networks"], tg["Services"], tg["Meta"]) == (None, None, None)
    task = tg["Tasks"][0]
    assert (task["Env"], task["Services"], task["Templates"], task["Vault"], task["Meta"]) == (None,) * 5
    assert task["KillSignal"] == ""  # unset, as Nomad's job keeps it: the driver's default at the stop


def _nomad_port_order(job: Job) -> Job:
    """Nomad keeps a network's static and dynamic ports in two lists (ReservedPorts, DynamicPorts): the
    order between a static and a dynamic port is not kept. The job with its ports in that order."""
    groups = []
    for g in job.groups:
        if g.network is None:
            groups.append(g)
            continue
        ports = [p for p in g.network.ports if p.static] + [p for p in g.network.ports if not p.static]
        groups.append(dataclasses.replace(g, network=dataclasses.replace(g.network, ports=tuple(ports))))
    return dataclasses.replace(job, groups=tuple(groups))


def _parse_file(path: Path) -> ParsedJob:
    fmt = "json" if path.suffix == ".json" else "hcl"
    return parse_jobspec(validate.read_jobspec(path), source=str(path), fmt=fmt, base_dir=path.parent)


def _server_set_warning(job_id: str) -> str:
    ignored = "CreateIndex, JobModifyIndex, ModifyIndex, Stable, Status, SubmitTime, Version"
    return f"job.{job_id}: set by the Nomad server, ignored by fieldlab-agent: {ignored}"


def test_every_jobspec_reads_back_from_job_json_as_the_same_job() -> None:
    """GET /v1/job/<id>, then POST /v1/jobs with it ({"Job": ...}): the same job. The only warnings the
    encoding adds is one line naming the server-set fields; none about a group or a task (Nomad's
    defaulted blocks are written null), none about Region, Namespace, Priority, NodePool at their
    one-region defaults."""
    done, failures = 0, []
    for path in validate.collect_files([JOBSPECS]):
        try:
            parsed = _parse_file(path)
        except JobspecError:
            continue  # refused: nothing to encode
        job = parsed.job
        text = json.dumps({"Job": _job_dict(job)})
        try:
            again = parse_jobspec(text, source=f"{path} (job_json)", fmt="json")
        except JobspecError as exc:
            failures.append(f"{path}: refused: {exc.problems[:3]}")
            continue
        if again.job != _nomad_port_order(job):
            failures.append(f"{path}: read back as another job")
        added = set(again.warnings) - set(parsed.warnings)
        expected = {_server_set_warning(job.id)}
        if not added <= expected:
            failures.append(f"{path}: warnings added by the encoding: {sorted(added - expected)}")
        done += 1
    assert not failures, "\n".join(failures)
    assert done >= 180  # the corpus was read (183 on 2026-12-07: refused files moved to refused/)


def test_the_round_trip_warns_about_nothing_else_even_for_a_job_that_sets_everything() -> None:
    again = parse_jobspec(json.dumps({"Job": _job_dict()}), source="rt", fmt="json")
    assert again.job == _nomad_port_order(_job())
    # Region "global", Namespace "default", Priority 50, NodePool "default": what every Nomad job
    # sends on a one-region, one-namespace cluster, and no warning; only the server-set fields' line.
    assert again.warnings == (_server_set_warning("web"),)


def test_a_default_service_name_the_reader_would_refuse_reads_back_as_the_default() -> None:
    hcl = 'job "my_job" {\n group "web_1" {\n network {\n port "http" {}\n }\n service { port = "http" }\n'
    hcl += ' task "t" {\n driver = "exec"\n config { command = "/bin/true" }\n'
    hcl += ' service { port = "http" }\n }\n }\n}'
    job = parse_jobspec(hcl, source="t", fmt="hcl").job
    out = _job_dict(job)
    assert out["TaskGroups"][0]["Services"][0]["Name"] == ""  # "my_job-web_1" is no RFC 1123 name
    assert parse_jobspec(json.dumps({"Job": out}), source="rt", fmt="json").job == job
    assert _job_dict()["TaskGroups"][0]["Services"][0]["Name"] == "web-http"  # a name given is written


def test_job_stub_and_summary() -> None:
    summary = _summary()
    assert summary["Summary"] == {
        "frontend": {
            "Queued": 0,
            "Complete": 4,
            "Failed": 3,
            "Running": 7,
            "Starting": 1,
            "Lost": 0,
            "Unknown": 0,
        }
    }
    assert summary["Children"] == {"Pending": 0, "Running": 0, "Dead": 0}
    assert (summary["JobID"], summary["Namespace"], summary["CreateIndex"], summary["ModifyIndex"]) == (
        "web",
        "default",
        11,
        57,
    )
    stub = structs.job_stub(_job_dict(), status="pending", summary=summary)
    assert (stub["ID"], stub["Name"], stub["Type"], stub["Priority"], stub["Status"]) == (
        "web",
        "web",
        "service",
        50,
        "pending",
    )
    assert (stub["Periodic"], stub["ParameterizedJob"], stub["Stop"]) == (False, False, False)
    assert (stub["Namespace"], stub["Meta"], stub["Datacenters"]) == ("default", {"team": "edge"}, ["dc1"])
    assert (stub["SubmitTime"], stub["JobModifyIndex"]) == (1_764_840_553_250_000_000, 40)
    assert stub["JobSummary"] == summary
    bare = structs.job_stub(_job_dict(namespace="") | {"Meta": None}, status="dead", summary=summary)
    assert "Namespace" not in bare and "Meta" not in bare  # omitempty
    check_shape("JobListStub", bare)


def test_evaluation() -> None:
    ev = _eval()
    assert (ev["Status"], ev["TriggeredBy"], ev["Type"], ev["Priority"], ev["JobID"]) == (
        "complete",
        "job-register",
        "service",
        50,
        "web",
    )
    assert ev["CreateTime"] == ev["ModifyTime"] == 1_764_840_553_250_000_000
    assert (ev["WaitUntil"], ev["Wait"], ev["FailedTGAllocs"], ev["BlockedEval"]) == (
        structs.ZERO_TIME,
        0,
        None,
        "",
    )


# --- task events and states ------------------------------------------------------------------------------


def test_go_times_and_durations() -> None:
    assert structs.ns(1.5) == 1_500_000_000 and structs.ns(0.1) == 100_000_000
    assert structs.go_time(T0) == "2025-12-04T09:29:13.25Z"  # Go trims the fraction's trailing zeros
    assert structs.go_time(1_764_840_553.0) == "2025-12-04T09:29:13Z"
    assert structs.go_time(None) == structs.ZERO_TIME == "0001-01-01T00:00:00Z"
    assert structs.go_time(T0 + 0.000_001) == "2025-12-04T09:29:13.250001Z"


def test_task_event_carries_the_details_and_nomads_deprecated_fields() -> None:
    ev = structs.task_event(
        _ev(
            T0,
            "Killing",
            "Sent SIGTERM (job stopped)",
            exit_code=143,
            signal="SIGTERM",
            kill_timeout=5.0,
            kill_reason="job stopped",
            fails_task=True,
            while_agent_down=False,
            tasks=[{"task": "server"}],
            unknown=None,
        )
    )
    assert (ev["Type"], ev["Time"], ev["DisplayMessage"], ev["Message"]) == (
        "Killing",
        1_764_840_553_250_000_000,
        "Sent SIGTERM (job stopped)",
        "Sent SIGTERM (job stopped)",
    )
    assert ev["Details"] == {
        "exit_code": "143",
        "signal": "SIGTERM",
        "kill_timeout": "5.0",
        "kill_reason": "job stopped",
        "fails_task": "true",
        "while_agent_down": "false",
        "tasks": '[{"task":"server"}]',
        "unknown": "",
    }
    assert (ev["ExitCode"], ev["Signal"], ev["KillTimeout"], ev["KillReason"], ev["FailsTask"]) == (
        143,
        15,
        5_000_000_000,
        "job stopped",
        True,
    )
    plain = structs.task_event(_ev(T0, "Restarting", "Task restarting in 25.0s", restart_reason="policy"))
    assert (plain["RestartReason"], plain["ExitCode"], plain["Signal"], plain["FailsTask"]) == (
        "policy",
        0,
        0,
        False,
    )
    assert structs.task_event(_ev(T0, "Terminated", "Exit Code: unknown", exit_code=None))["ExitCode"] == 0
    assert structs.task_event(_ev(T0, "Killing", "", kill_timeout="1m30s"))["KillTimeout"] == 90_000_000_000


def test_task_state_times_come_from_the_events() -> None:
    running = structs.task_state("running", False, 1, EVENTS)
    assert running["State"] == "running" and running["Restarts"] == 1 and not running["Failed"]
    assert running["StartedAt"] == "2025-12-04T09:29:43.373456Z"  # the last Started
    assert running["LastRestart"] == "2025-12-04T09:29:18.25Z"
    assert running["FinishedAt"] == structs.ZERO_TIME  # not dead
    assert [e["Type"] for e in running["Events"]] == [
        "Received",
        "Started",
        "Terminated",
        "Restarting",
        "Started",
    ]
    dead = structs.task_state("dead", True, 1, [*EVENTS[:3], _ev(T0 + 6, "Not Restarting", "exceeded")])
    assert (dead["State"], dead["Failed"], dead["FinishedAt"]) == ("dead", True, "2025-12-04T09:29:19.25Z")
    assert structs.task_state("starting", False, 0, [])["State"] == "pending"
    fresh = structs.task_state("pending", False, 0, [])
    assert fresh["StartedAt"] == fresh["FinishedAt"] == fresh["LastRestart"] == structs.ZERO_TIME


# --- allocations -----------------------------------------------------------------------------------------


def test_alloc_json_from_the_agents_alloc_view() -> None:
    a = _alloc(eval_id="cb20d15d-861f-8d8d-8253-e93932beea2e", desc="alloc is being restarted")
    assert (a["ID"], a["Name"], a["JobID"], a["TaskGroup"], a["EvalID"]) == (
        VIEW["id"],
        "web.frontend[0]",
        "web",
        "frontend",
        "cb20d15d-861f-8d8d-8253-e93932beea2e",
    )
    assert (a["NodeID"], a["NodeName"], a["Namespace"]) == (ALLOC_ARGS["node_id"], "client-1", "default")
    assert (a["ClientStatus"], a["DesiredStatus"], a["DesiredDescription"]) == (
        "running",
        "run",
        "alloc is being restarted",
    )
    assert (a["PreviousAllocation"], a["NextAllocation"], a["DeploymentID"]) == (VIEW["replaces"], "", "")
    assert (a["CreateIndex"], a["ModifyIndex"], a["AllocModifyIndex"]) == (12, 57, 54)
    assert (a["CreateTime"], a["ModifyTime"]) == (1_764_840_553_250_000_000, 1_764_840_584_250_000_000)
    assert a["Job"] == _job_dict()
    assert a["TaskStates"]["server"] == structs.task_state("running", False, 1, EVENTS)
    assert (a["Resources"]["CPU"], a["Resources"]["MemoryMB"], a["Resources"]["DiskMB"]) == (250, 128, 0)
    assert (a["TaskResources"]["server"]["CPU"], a["TaskResources"]["server"]["MemoryMB"]) == (250, 128)
    shared = a["AllocatedResources"]["Shared"]
    assert shared["Ports"] == [
        {"Label": "http", "Value": 23116, "To": 8080, "HostIP": "172.26.64.7"},
        {"Label": "admin", "Value": 9000, "To": 9000, "HostIP": "172.26.64.7"},
    ]
    (net,) = shared["Networks"]
    assert (net["Mode"], net["IP"]) == ("bridge", "172.26.64.7")
    assert [(p["Label"], p["Value"], p["To"]) for p in net["DynamicPorts"]] == [("http", 23116, 8080)]
    assert [(p["Label"], p["Value"], p["To"]) for p in net["ReservedPorts"]] == [("admin", 9000, 9000)]
    assert a["AllocatedResources"]["Tasks"]["server"]["Cpu"] == {"CpuShares": 250}
    assert a["AllocatedResources"]["Tasks"]["server"]["Memory"] == {"MemoryMB": 128, "MemoryMaxMB": 0}
    assert a["NetworkStatus"] == {
        "InterfaceName": "eth0",
        "Address": "172.26.64.7",
        "AddressIPv6": "",
        "DNS": None,
    }
    assert a["Metrics"] is not None  # the Nomad CLI's `alloc status -verbose` reads it
    assert set(a["DesiredTransition"]) == set(STRUCTS["DesiredTransition"])


@pytest.mark.parametrize(
    ("status", "desired", "client", "desired_out"),
    [
        ("pending", "run", "pending", "run"),
        ("running", "run", "running", "run"),
        ("failed", "run", "failed", "stop"),  # replaced (n1): stopped as Nomad reschedules it
        ("complete", "stop", "complete", "stop"),
        ("adopted", "run", "running", "run"),
    ],
)
def test_alloc_statuses_are_nomads(status: str, desired: str, client: str, desired_out: str) -> None:
    view = VIEW | {"status": status, "desired": desired, "replaced_by": "n1", "reason": "why"}
    for out in (_alloc(view), structs.alloc_stub(view, **ALLOC_ARGS)):
        assert (out["ClientStatus"], out["DesiredStatus"]) == (client, desired_out)
        assert (out["NextAllocation"], out["ClientDescription"]) == ("n1", "why")


def test_an_adopted_alloc_has_no_job_and_no_network() -> None:
    a = _alloc(ADOPTED, job=None, events_by_task={})
    check_shape("Allocation", a)
    assert (a["Job"], a["ClientStatus"], a["NetworkStatus"]) == (None, "running", None)
    assert a["AllocatedResources"]["Shared"] == {"DiskMB": 0, "Networks": None, "Ports": None}
    assert a["TaskResources"]["server"]["CPU"] == 0
    assert a["TaskStates"]["server"]["State"] == "running"


def test_alloc_stub() -> None:
    stub = structs.alloc_stub(VIEW, job=_job_dict(), **ALLOC_ARGS)
    assert "AllocatedResources" not in stub  # omitempty: only with ?resources=true
    assert (stub["JobType"], stub["JobVersion"], stub["Name"]) == ("service", 3, "web.frontend[0]")
    assert stub["TaskStates"] == _alloc()["TaskStates"]
    assert (stub["CreateTime"], stub["ModifyTime"], stub["ModifyIndex"]) == (
        1_764_840_553_250_000_000,
        1_764_840_584_250_000_000,
        57,
    )
    check_shape("AllocationListStub", stub)
    bare = structs.alloc_stub(VIEW, **ALLOC_ARGS)  # no job at hand
    assert (bare["JobType"], bare["JobVersion"]) == ("", 0)
    with_res = structs.alloc_stub(VIEW, **ALLOC_ARGS, with_resources=True)
    assert with_res["AllocatedResources"]["Shared"]["Ports"][0]["Value"] == 23116


# --- the node and the agent -------------------------------------------------------------------------------


def test_node_json_and_stub() -> None:
    node = structs.node_json(**NODE_ARGS)
    assert (node["ID"], node["Name"], node["Datacenter"], node["HTTPAddr"]) == (
        NODE_ARGS["node_id"],
        "client-1",
        "dc1",
        "10.213.0.11:4646",
    )
    assert (
        node["Status"],
        node["SchedulingEligibility"],
        node["Drain"],
        node["NodePool"],
        node["NodeClass"],
    ) == (
        "ready",
        "eligible",
        False,
        "default",
        "",
    )
    assert node["Drivers"]["docker"] == {
        "Attributes": {"driver.docker": "true"},
        "Detected": True,
        "Healthy": True,
        "HealthDescription": "Healthy",
        "UpdateTime": structs.ZERO_TIME,
    }
    assert (node["Drivers"]["exec"]["Healthy"], node["Drivers"]["exec"]["Attributes"]) == (False, None)
    assert (
        node["NodeResources"]["Cpu"]["CpuShares"] == 8000
        and node["NodeResources"]["Cpu"]["TotalCpuCores"] == 4
    )
    assert node["NodeResources"]["Memory"] == {"MemoryMB": 16384}
    assert node["NodeResources"]["Disk"] == {"DiskMB": 102400}
    assert node["ReservedResources"]["Networks"] == {"ReservedHostPorts": ""}
    assert node["Meta"] == {"rack": "r1"} and node["Attributes"]["os.name"] == "linux"
    stub = structs.node_stub(**NODE_ARGS)
    assert (stub["Address"], stub["Version"], stub["ID"]) == ("10.213.0.11", "0.1.0", NODE_ARGS["node_id"])
    assert not {"Attributes", "NodeResources", "ReservedResources"} & set(stub)  # omitempty, unless asked
    assert stub["Drivers"] == node["Drivers"]
    check_shape("NodeListStub", stub)
    assert structs.node_stub(**NODE_ARGS, with_os=True)["Attributes"] == {"os.name": "linux"}


def test_agent_self_member_and_health() -> None:
    me = _self()
    assert me["config"]["Region"] == "global" and me["config"]["Datacenter"] == "dc1"
    assert me["config"]["NodeName"] == "client-1"
    assert me["config"]["Version"]["Version"] == "0.1.0"  # Nomad's VersionInfo, merged
    assert me["config"]["Version"]["VersionPrerelease"] == ""
    assert me["member"]["Name"] == "client-1"  # api.Agent.NodeName() reads it
    assert me["member"]["Status"] == "alive"
    assert me["stats"]["client"]["node_id"] == "f476d2b4-02dc-c216-d031-273396727347"  # `node status -self`
    member = _member()
    assert (member["Name"], member["Addr"], member["Port"]) == ("client-1.global", "10.213.0.11", 4648)
    assert member["Tags"] == {"region": "global", "dc": "dc1", "build": "0.1.0"}
    assert structs.health(True, "ok") == {"client": {"ok": True, "message": "ok"}}  # no server: left out
    down = structs.health(False, "vault sealed", server_asked=True)
    assert down == {
        "client": {"ok": False, "message": "vault sealed"},
        "server": {"ok": False, "message": "server not enabled"},
    }
    check_shape("AgentHealthResponse", structs.health(True, "ok"))


# --- the alloc dir ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "is_dir", "shown"),
    [
        (stat.S_IFREG | 0o644, False, "-rw-r--r--"),
        (stat.S_IFDIR | 0o755, True, "drwxr-xr-x"),
        (stat.S_IFLNK | 0o777, False, "Lrwxrwxrwx"),
        (stat.S_IFCHR | 0o666, False, "Dcrw-rw-rw-"),
        (stat.S_IFIFO | 0o600, False, "prw-------"),
        (stat.S_IFSOCK | 0o755, False, "Srwxr-xr-x"),
        (stat.S_IFREG | stat.S_ISUID | 0o755, False, "urwxr-xr-x"),
        (stat.S_IFDIR | stat.S_ISVTX | 0o777, True, "dtrwxrwxrwx"),
        (0o640, True, "drw-r-----"),  # permissions alone, said to be a directory
    ],
)
def test_file_modes_as_go_writes_them(mode: int, is_dir: bool, shown: str) -> None:
    assert fsjson.file_info("f", is_dir, 1, mode, T0)["FileMode"] == shown


def test_file_info_and_stream_frames() -> None:
    listed = fsjson.file_info("alloc", True, 4096, stat.S_IFDIR | 0o775, T0)
    assert listed == {
        "Name": "alloc",
        "IsDir": True,
        "Size": 4096,
        "FileMode": "drwxrwxr-x",
        "ModTime": "2025-12-04T09:29:13.25Z",
    }
    check_shape("AllocFileInfo", listed)
    stat_json = fsjson.file_info("a.json", False, 2, 0o100644, T0, "application/json")
    assert stat_json["ContentType"] == "application/json"
    frame = fsjson.stream_frame(3604480, b"531932\n", "alloc/logs/redis.stdout.0")
    assert frame == {"Offset": 3604480, "Data": "NTMxOTMyCg==", "File": "alloc/logs/redis.stdout.0"}
    assert fsjson.stream_frame(0, b"", "", "file deleted") == {"FileEvent": "file deleted"}
    assert fsjson.stream_frame(0, b"", "") == {}  # the heartbeat frame
    check_shape("StreamFrame", fsjson.stream_frame(0, b"", ""))


# --- the examples of Nomad's API docs --------------------------------------------------------------------
# The keys of the sample responses in website/content/api-docs/*.mdx of Nomad's repository (commit
# a443448d00ca, Nomad 1.11.2: the last before the docs moved to hashicorp/web-unified-docs). Some samples
# are older than the structs: a key the api struct no longer has is listed as gone, and the check makes
# sure the table does not have it either (so that the list cannot hide a view's misnamed field).


def _keys(text: str) -> set[str]:
    return set(text.split())


def _doc_keys_are_ours(
    struct: str, ours: Mapping[str, Any], doc: set[str], gone: frozenset[str] = frozenset()
) -> None:
    assert gone <= doc and not gone & set(STRUCTS[struct]), gone
    assert doc - gone <= set(ours), f"{struct}: the doc's {sorted(doc - gone - set(ours))} are missing"
    required = {f for f, spec in STRUCTS[struct].items() if not isinstance(spec, Omit)}
    assert required <= set(ours) <= set(STRUCTS[struct]) | set(SERVER_FIELDS.get(struct, {}))


def test_allocation_read_has_the_keys_of_the_docs_example() -> None:
    """website/content/api-docs/allocations.mdx: Read Allocation, Sample Response."""
    a = _alloc()
    doc = _keys(
        "AllocModifyIndex ClientDescription ClientStatus CreateIndex CreateTime DesiredDescription "
        "DesiredStatus EvalID ID Job JobID Metrics ModifyIndex ModifyTime Name NextAllocation NodeID "
        "PreviousAllocation RescheduleTracker Resources SharedResources TaskGroup TaskResources TaskStates"
    )
    _doc_keys_are_ours("Allocation", a, doc, frozenset({"SharedResources"}))
    job_doc = _keys(
        "Affinities AllAtOnce Constraints CreateIndex Datacenters ID JobModifyIndex Meta ModifyIndex Name "
        "ParameterizedJob ParentID Payload Periodic Priority Region Spreads Status StatusDescription "
        "TaskGroups Type Update VaultToken"
    )
    _doc_keys_are_ours("Job", a["Job"], job_doc, frozenset({"VaultToken"}))
    tg_doc = _keys("Affinities Constraints Count EphemeralDisk Meta Name RestartPolicy Spreads Tasks")
    _doc_keys_are_ours("TaskGroup", a["Job"]["TaskGroups"][0], tg_doc)
    task_doc = _keys(
        "Affinities Artifacts Config Constraints DispatchPayload Driver Env KillTimeout Leader LogConfig "
        "Meta Name Resources Services Spreads Templates User Vault"
    )
    # a task's Spreads: gone from api.Task (spreads are the job's and the group's)
    _doc_keys_are_ours("Task", a["Job"]["TaskGroups"][0]["Tasks"][0], task_doc, frozenset({"Spreads"}))
    state_doc = _keys("Events Failed FinishedAt LastRestart Restarts StartedAt State")
    _doc_keys_are_ours("TaskState", a["TaskStates"]["server"], state_doc)
    event_doc = _keys(
        "DiskLimit DownloadError DriverError DriverMessage ExitCode FailedSibling FailsTask KillError "
        "KillReason KillTimeout Message RestartReason SetupError Signal StartDelay TaskSignal "
        "TaskSignalReason Time Type ValidationError VaultError"
    )
    _doc_keys_are_ours("TaskEvent", a["TaskStates"]["server"]["Events"][0], event_doc)
    _doc_keys_are_ours("Resources", a["Resources"], _keys("CPU DiskMB MemoryMB Networks"))
    metrics_doc = _keys(
        "AllocationTime ClassExhausted ClassFiltered CoalescedFailures ConstraintFiltered DimensionExhausted "
        "NodesAvailable NodesEvaluated NodesExhausted NodesFiltered NodesInPool Scores"
    )
    _doc_keys_are_ours("AllocationMetric", a["Metrics"], metrics_doc)


def test_allocation_list_has_the_keys_of_the_docs_example() -> None:
    """website/content/api-docs/allocations.mdx: List Allocations, Sample Response."""
    stub = structs.alloc_stub(VIEW, job=_job_dict(), **ALLOC_ARGS)
    doc = _keys(
        "ClientDescription ClientStatus CreateIndex CreateTime DeploymentStatus DesiredDescription "
        "DesiredStatus DesiredTransition EvalID FollowupEvalID ID JobID JobType JobVersion ModifyIndex "
        "ModifyTime Name Namespace NodeID NodeName PreemptedAllocations PreemptedByAllocation "
        "RescheduleTracker TaskGroup TaskStates"
    )
    # DesiredTransition: a field of the server's AllocListStub (nomad/structs), not of api.AllocationListStub
    _doc_keys_are_ours("AllocationListStub", stub, doc, frozenset({"DesiredTransition"}))
    state_doc = _keys("Events Failed FinishedAt LastRestart Restarts StartedAt State TaskHandle")
    # TaskHandle: commented out of nomad/structs' TaskState, not in api.TaskState
    _doc_keys_are_ours("TaskState", stub["TaskStates"]["server"], state_doc, frozenset({"TaskHandle"}))
    event_doc = _keys(
        "Details DiskLimit DisplayMessage DownloadError DriverError DriverMessage ExitCode FailedSibling "
        "FailsTask GenericSource KillError KillReason KillTimeout Message RestartReason SetupError Signal "
        "StartDelay TaskSignal TaskSignalReason Time Type ValidationError VaultError"
    )
    _doc_keys_are_ours("TaskEvent", stub["TaskStates"]["server"]["Events"][0], event_doc)


def test_job_read_and_list_have_the_keys_of_the_docs_examples() -> None:
    """website/content/api-docs/jobs.mdx: Read Job and List Jobs, Sample Responses."""
    job = _job_dict()
    doc = _keys(
        "AllAtOnce Constraints CreateIndex Datacenters ID JobModifyIndex Meta ModifyIndex Name Namespace "
        "NodePool ParameterizedJob ParentID Payload Periodic Priority Region Status StatusDescription "
        "TaskGroups Type Update"
    )
    _doc_keys_are_ours("Job", job, doc)
    tg = job["TaskGroups"][0]
    tg_doc = _keys("Affinities Constraints Count EphemeralDisk Meta Name RestartPolicy Tasks")
    _doc_keys_are_ours("TaskGroup", tg, tg_doc)
    _doc_keys_are_ours("RestartPolicy", tg["RestartPolicy"], _keys("Attempts Delay Interval Mode"))
    task = tg["Tasks"][0]
    task_doc = _keys(
        "Affinities Artifacts Config Constraints DispatchPayload Driver Env KillTimeout Leader Lifecycle "
        "LogConfig Meta Name Resources Services Templates User Vault"
    )
    _doc_keys_are_ours("Task", task, task_doc)
    _doc_keys_are_ours("Service", tg["Services"][0], _keys("Checks Name PortLabel Tags"))
    check_doc = _keys("Args Command InitialStatus Interval Name Path PortLabel Protocol Timeout Type")
    _doc_keys_are_ours("ServiceCheck", tg["Services"][0]["Checks"][0], check_doc)
    template_doc = _keys("ChangeMode ChangeSignal DestPath EmbeddedTmpl Perms SourcePath Splay")
    _doc_keys_are_ours("Template", task["Templates"][0], template_doc)
    _doc_keys_are_ours("Resources", task["Resources"], _keys("CPU DiskMB MemoryMB Networks"))
    net_doc = _keys("CIDR Device DynamicPorts IP MBits ReservedPorts")
    _doc_keys_are_ours("NetworkResource", tg["Networks"][0], net_doc)
    _doc_keys_are_ours("Port", tg["Networks"][0]["DynamicPorts"][0], _keys("Label Value"))
    stub = structs.job_stub(job, status="running", summary=_summary())
    stub_doc = _keys(
        "CreateIndex ID JobModifyIndex JobSummary ModifyIndex Name ParentID Priority Status "
        "StatusDescription Type"
    )
    _doc_keys_are_ours("JobListStub", stub, stub_doc)
    summary_doc = _keys("Children CreateIndex JobID ModifyIndex Namespace Summary")
    _doc_keys_are_ours("JobSummary", stub["JobSummary"], summary_doc)
    tg_summary_doc = _keys("Complete Failed Lost Queued Running Starting")
    _doc_keys_are_ours("TaskGroupSummary", stub["JobSummary"]["Summary"]["frontend"], tg_summary_doc)
    _doc_keys_are_ours("JobChildrenSummary", stub["JobSummary"]["Children"], _keys("Dead Pending Running"))


def test_node_read_and_list_have_the_keys_of_the_docs_examples() -> None:
    """website/content/api-docs/nodes.mdx: Read Node and List Nodes, Sample Responses."""
    node = structs.node_json(**NODE_ARGS)
    doc = _keys(
        "Attributes ComputedClass CreateIndex Datacenter Drain DrainStrategy Drivers Events HTTPAddr "
        "HostNetworks HostVolumes ID LastDrain Links Meta ModifyIndex Name NodeClass NodePool NodeResources "
        "ReservedResources SchedulingEligibility SecretID Status StatusDescription StatusUpdatedAt TLSEnabled"
    )
    # ComputedClass and SecretID: the server's (nomad/structs Node), not api.Node's
    _doc_keys_are_ours("Node", node, doc, frozenset({"ComputedClass", "SecretID"}))
    driver_doc = _keys("Attributes Detected HealthDescription Healthy UpdateTime")
    _doc_keys_are_ours("DriverInfo", node["Drivers"]["docker"], driver_doc)
    resources_doc = _keys("Cpu Devices Disk Memory Networks NodeNetworks")
    _doc_keys_are_ours("NodeResources", node["NodeResources"], resources_doc)  # NodeNetworks: the server's
    _doc_keys_are_ours("NodeReservedResources", node["ReservedResources"], _keys("Cpu Disk Memory Networks"))
    stub = structs.node_stub(**NODE_ARGS, with_os=True)
    stub_doc = _keys(
        "Address Attributes CreateIndex Datacenter Drain Drivers ID LastDrain ModifyIndex Name NodeClass "
        "NodePool SchedulingEligibility Status StatusDescription Version"
    )
    _doc_keys_are_ours("NodeListStub", stub, stub_doc)


def test_agent_self_and_health_have_the_keys_of_the_docs_examples() -> None:
    """website/content/api-docs/agent.mdx: Query Self and Health, Sample Responses."""
    me = _self()
    _doc_keys_are_ours("AgentSelf", me, _keys("config member stats"))
    member_doc = _keys(
        "Addr DelegateCur DelegateMax DelegateMin Name Port ProtocolCur ProtocolMax ProtocolMin Status Tags"
    )
    _doc_keys_are_ours("AgentMember", me["member"], member_doc)
    client_doc = _keys("heartbeat_ttl known_servers last_heartbeat node_id num_allocations")
    assert client_doc == set(me["stats"]["client"])
    assert {"Region", "Datacenter", "NodeName", "Version"} <= set(me["config"])  # what api.Agent reads
    health = structs.health(True, "ok", server_asked=True)
    _doc_keys_are_ours("AgentHealthResponse", health, _keys("client server"))
    _doc_keys_are_ours("AgentHealth", health["client"], _keys("message ok"))


def test_evaluation_and_alloc_dir_views_have_the_keys_of_the_docs_examples() -> None:
    """website/content/api-docs/evaluations.mdx (Read Evaluation) and client.mdx (List Files, Stat File,
    Stream File)."""
    eval_doc = _keys(
        "CreateIndex CreateTime FailedTGAllocs ID JobID ModifyIndex ModifyTime Namespace PreviousEval "
        "Priority RelatedEvals SnapshotIndex Status StatusDescription TriggeredBy Type"
    )
    _doc_keys_are_ours("Evaluation", _eval(), eval_doc)
    listed = fsjson.file_info("alloc", True, 4096, stat.S_IFDIR | 0o775, T0)
    assert set(listed) == _keys("FileMode IsDir ModTime Name Size")  # a listing: no ContentType
    _doc_keys_are_ours("AllocFileInfo", listed, _keys("FileMode IsDir ModTime Name Size"))
    frame = fsjson.stream_frame(3604480, b"x", "alloc/logs/redis.log")
    assert set(frame) == _keys("Data File Offset")
    assert set(fsjson.stream_frame(0, b"", "alloc/logs/redis.log", "file deleted")) == _keys("File FileEvent")
