"""Client-side jobspec fields of issue 52 item 6 read as Nomad CE does (agent.jobspec.clientfields,
agent.jobspec.update's canaries, agent.runner.maxrun): honoured, or refused with Nomad's text or the
reason, never accepted and ignored."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import pytest

from agent.jobspec import JobspecError, ParsedJob, parse_jobspec
from agent.jobspec.update import canary_refusals
from agent.runner.alloc import AllocRunner
from agent.runner.maxrun import EXCEEDED, arm_max_run_duration, enforce_max_run_duration
from agent.structs.model import Group, Job, Task
from agent.structs.records import AllocRecord, AllocStatus, DesiredStatus, TaskState
from lab.waits import wait_until
from tests.fakes import FakeNode


def _parse(text: str) -> ParsedJob:
    return parse_jobspec(text, source="<t>")


def _problems(text: str) -> list[tuple[str, str]]:
    with pytest.raises(JobspecError) as info:
        _parse(text)
    return list(info.value.problems)


def _job(group: str = "", task: str = "", job: str = "", job_type: str = "service") -> str:
    return f"""
job "j" {{
  type = "{job_type}"
  {job}
  group "g" {{
    {group}
    task "t" {{
      driver = "docker"
      config {{
        image = "fieldlab/busybox:latest"
      }}
      {task}
    }}
  }}
}}
"""


# --- vault: Nomad CE refuses Vault namespaces; a group's vault is its tasks' default ----------------


def test_a_vault_namespace_is_refused_with_nomad_ces_text() -> None:
    problems = _problems(_job(task='vault {\npolicies = ["p"]\nnamespace = "engineering"\n}'))
    assert problems == [
        (
            "job.j.group.g.task.t.vault.namespace",
            "multiple Vault namespaces requires Nomad Enterprise, Namespaces: engineering",
        )
    ]


def test_a_jobs_vault_namespace_in_the_api_json_is_refused_likewise() -> None:
    text = json.dumps(
        {
            "Job": {
                "ID": "j",
                "VaultNamespace": "eng",
                "TaskGroups": [
                    {"Name": "g", "Tasks": [{"Name": "t", "Driver": "docker", "Config": {"image": "x"}}]}
                ],
            }
        }
    )
    problems = _problems(text)
    assert problems == [
        ("job.j.vault_namespace", "multiple Vault namespaces requires Nomad Enterprise, Namespaces: eng")
    ]


def test_a_groups_vault_block_is_the_default_of_its_tasks_without_one() -> None:
    text = """
job "j" {
  vault {
    policies = ["job"]
  }
  group "g" {
    vault {
      policies = ["group"]
      change_mode = "noop"
    }
    task "a" {
      driver = "docker"
      config {
        image = "x"
      }
    }
    task "b" {
      driver = "docker"
      config {
        image = "x"
      }
      vault {
        policies = ["own"]
      }
    }
  }
  group "h" {
    task "c" {
      driver = "docker"
      config {
        image = "x"
      }
    }
  }
}
"""
    parsed = _parse(text)
    g, h = parsed.job.groups
    a, b = g.tasks
    assert a.vault is not None and (a.vault.policies, a.vault.change_mode) == (("group",), "noop")
    assert b.vault is not None and b.vault.policies == ("own",)
    assert h.tasks[0].vault is not None and h.tasks[0].vault.policies == ("job",)
    assert not [w for w in parsed.warnings if "not implemented" in w]


# --- consul: what Nomad CE with Consul CE takes ------------------------------------------------------------


def test_a_groups_consul_block_of_defaults_is_taken_without_a_warning() -> None:
    parsed = _parse(_job(group='consul {\ncluster = "default"\nnamespace = "default"\npartition = ""\n}'))
    assert parsed.warnings == ()


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("cluster", "east", "non-default Consul cluster requires Nomad Enterprise"),
        ("namespace", "payments", 'a Consul namespace ("payments") needs Consul Enterprise'),
        ("partition", "pay", 'a Consul admin partition ("pay") needs Consul Enterprise'),
    ],
)
def test_a_groups_consul_block_naming_enterprise_places_is_refused(
    field: str, value: str, reason: str
) -> None:
    (problem,) = _problems(_job(group=f'consul {{\n{field} = "{value}"\n}}'))
    assert problem[0] == f"job.j.group.g.consul.{field}" and problem[1].startswith(reason)


def test_a_groups_consul_block_in_the_api_json_is_read() -> None:
    group = {
        "Name": "g",
        "Consul": {"Namespace": "payments"},
        "Tasks": [{"Name": "t", "Driver": "docker", "Config": {"image": "x"}}],
    }
    (problem,) = _problems(json.dumps({"Job": {"ID": "j", "TaskGroups": [group]}}))
    assert problem[0] == "job.j.group.g.consul.namespace"


# --- max_run_duration: Nomad's TaskGroup.Validate, the client's stop --------------------------------------


def test_max_run_duration_is_read_for_batch_jobs_in_both_front_ends() -> None:
    parsed = _parse(_job(group='max_run_duration = "90s"', job_type="batch"))
    assert parsed.job.groups[0].max_run_duration == 90.0 and parsed.warnings == ()
    group = {
        "Name": "g",
        "MaxRunDuration": 2_000_000_000,
        "Tasks": [{"Name": "t", "Driver": "docker", "Config": {"image": "x"}}],
    }
    api = _parse(json.dumps({"Job": {"ID": "j", "Type": "sysbatch", "TaskGroups": [group]}}))
    assert api.job.groups[0].max_run_duration == 2.0


def test_max_run_duration_is_refused_where_nomad_refuses_it() -> None:
    assert _problems(_job(group='max_run_duration = "1h"')) == [
        ("job.j.group.g.max_run_duration", 'Job type "service" does not allow max_run_duration')
    ]
    assert _problems(_job(group='max_run_duration = "0s"', job_type="batch")) == [
        ("job.j.group.g.max_run_duration", "MaxRunDuration must be greater than zero")
    ]


def _runner(node: FakeNode, seconds: float | None, created: float) -> AllocRunner:
    group = Group(
        name="g",
        tasks=(Task(name="t", driver="docker", config={"image": "x"}),),
        max_run_duration=seconds,
    )
    job = Job(id="b", groups=(group,), type="batch")
    rec = AllocRecord(id="a1b2c3d4-0000-4000-8000-00000000000a", job="b", group="g", created=created)
    runner = AllocRunner(node.deps(), rec, job, group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    return runner


def test_an_alloc_past_its_max_run_duration_is_stopped_as_nomads_client_does(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    runner = _runner(node, 30.0, created=time.time() - 10)
    (delay, _) = node.timers[-1]
    assert 19.0 < delay <= 20.0  # anchored to the alloc's creation, not to now
    runner.start()
    node.run_timers()
    assert runner.rec.status is AllocStatus.COMPLETE and runner.rec.desired is DesiredStatus.STOP
    stored = AllocRecord.from_record(node.store.get("alloc", runner.id) or {})
    assert stored.status is AllocStatus.COMPLETE
    assert any(EXCEEDED in e.message for e in node.store.events(runner.id))


def test_max_run_duration_leaves_a_stopped_alloc_and_a_group_without_one_alone(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    plain = _runner(node, None, created=time.time())
    assert arm_max_run_duration(plain) is None
    done = _runner(node, 5.0, created=time.time() - 100)
    assert arm_max_run_duration(done) == 0.0  # already past: at once
    done.state.save(desired=DesiredStatus.STOP)
    assert not enforce_max_run_duration(done)


# --- volumes: Nomad's VolumeRequest.Validate for host volumes -----------------------------------------------


def _volume(fields: str) -> str:
    return _job(group=f'volume "v" {{\ntype = "host"\nsource = "data"\n{fields}\n}}')


def test_a_host_volumes_modes_are_taken_as_nomad_takes_them() -> None:
    parsed = _parse(_volume('access_mode = "single-node-writer"\nattachment_mode = "file-system"'))
    assert parsed.warnings == () and parsed.job.groups[0].volumes[0].source == "data"
    ro = _parse(_volume('read_only = true\naccess_mode = "single-node-reader-only"'))
    assert ro.job.groups[0].volumes[0].read_only


@pytest.mark.parametrize(
    ("fields", "where", "reason"),
    [
        ('mount_options {\nfs_type = "ext4"\n}', "mount_options", "host volumes cannot have mount options"),
        (
            'access_mode = "single-node-reader-only"',
            "access_mode",
            "single-node-reader-only volumes must be read-only",
        ),
        (
            'access_mode = "multi-node-multi-writer"',
            "access_mode",
            "host volumes cannot be mounted with multi-node-multi-writer access mode",
        ),
        ('attachment_mode = "tape"', "attachment_mode", '"tape" is not one of "file-system", "block-device"'),
    ],
)
def test_a_host_volume_is_refused_where_nomad_refuses_it(fields: str, where: str, reason: str) -> None:
    assert _problems(_volume(fields)) == [(f"job.j.group.g.volume.v.{where}", reason)]


# --- update: canaries --------------------------------------------------------------------------------


def test_canary_is_read_and_checked_as_nomads_update_strategy() -> None:
    parsed = _parse(_job(group="update {\ncanary = 2\nauto_promote = true\n}"))
    update = parsed.job.groups[0].update
    assert update is not None and (update.canary, update.auto_promote) == (2, True)
    assert parsed.warnings == ()
    assert _problems(_job(group="update {\nauto_promote = true\n}")) == [
        ("job.j.group.g.update.auto_promote", "Auto Promote requires a Canary count greater than zero")
    ]
    assert _problems(_job(group="update {\ncanary = -1\n}")) == [
        ("job.j.group.g.update.canary", "Canary count can not be less than zero: -1 < 0")
    ]


def test_a_new_version_replacing_a_canary_groups_allocs_is_refused(tmp_path: Path) -> None:
    """The first version runs as written (Nomad places canaries only beside an older version); a new
    one that would replace the group's allocs is refused before anything is stopped."""
    from agent.client.core import Core
    from agent.fieldbugs.faults import Faults

    node = FakeNode(tmp_path)
    core = Core(
        node.store,
        node.registry,
        node.network,
        data_dir=tmp_path / "data",
        faults=Faults(),
        task_dirs=node.dirs,
    )
    spec = _job(group="update {\ncanary = 1\n}", task='env {\nV = "1"\n}')
    (alloc,) = core.job_registry.submit(spec, "hcl")["allocs"]
    with pytest.raises(JobspecError) as info:
        core.job_registry.plan_update(_parse(spec.replace('V = "1"', 'V = "2"')), "<t>")  # as a register's
    ((where, why),) = info.value.problems
    assert where == "job.j.group.g.update.canary" and "does not place canaries" in why
    assert core.allocs.runner(alloc).rec.desired is DesiredStatus.RUN, "the running alloc was not stopped"
    job = _parse(spec).job
    assert canary_refusals(job, ()) == [] and canary_refusals(job, ("g",))
    no_canary = dataclasses.replace(
        job, groups=tuple(dataclasses.replace(g, update=None) for g in job.groups)
    )
    assert canary_refusals(no_canary, ("g",)) == []


# --- what Nomad ignores too, what is refused ------------------------------------------------------------


def test_fields_nomad_ignores_too_say_so() -> None:
    parsed = _parse(_job(task="logs {\nenabled = true\n}"))
    assert parsed.warnings == (
        "job.j.group.g.task.t.logs.enabled: ignored: Nomad's pre-1.5.4 spelling: Nomad's API drops it "
        "too; use disabled",
    )
    docker = _parse(_job().replace('image = "fieldlab/busybox:latest"', 'image = "x"\ncpuset_cpus = "0"'))
    ((warning),) = docker.warnings
    assert warning.startswith("job.j.group.g.task.t.config.cpuset_cpus: ignored: no longer supported")
    request = json.loads(
        json.dumps(
            {
                "Job": {
                    "ID": "j",
                    "TaskGroups": [
                        {"Name": "g", "Tasks": [{"Name": "t", "Driver": "docker", "Config": {"image": "x"}}]}
                    ],
                }
            }
        )
    )
    request["PreserveCounts"] = True
    (warning,) = _parse(json.dumps(request)).warnings
    assert warning.startswith("PreserveCounts: ignored: a register option in a job file")


def test_periodic_spec_type_takes_cron_only() -> None:
    periodic = 'periodic {\ncron = "*/5 * * * *"\nspec_type = "%s"\n}'
    assert _parse(_job(job=periodic % "cron", job_type="batch")).warnings == ()
    ((where, why),) = _problems(_job(job=periodic % "test", job_type="batch"))
    assert where == "job.j.periodic.spec_type" and "'test'" in why


def test_a_device_request_is_refused_with_the_reason() -> None:
    ((where, why),) = _problems(_job(task='resources {\ndevice "nvidia/gpu" {\ncount = 1\n}\n}'))
    assert where == "job.j.group.g.task.t.resources.device"
    assert why.startswith("refused: fieldlab-agent does not place device requests")


# --- restart render_templates ---------------------------------------------------------------------------


def _templated(node: FakeNode, render: bool) -> AllocRunner:
    from agent.structs.model import RestartPolicy, Template

    tpl = Template("local/app.conf", data='a={{ env "NOMAD_TASK_NAME" }}\n', change_mode="noop", splay=0)
    task = Task(name="t", driver="docker", config={"image": "x"}, templates=(tpl,))
    policy = RestartPolicy(attempts=3, interval=600, delay=1, mode="fail", render_templates=render)
    group = Group(name="g", tasks=(task,), restart=policy)
    rec = AllocRecord(id="a1b2c3d4-0000-4000-8000-00000000000c", job="j", group="g")
    runner = AllocRunner(node.deps(), rec, Job(id="j", groups=(group,)), group)
    node.store.put("alloc", runner.id, runner.rec.to_record())
    runner.start()
    return runner


@pytest.mark.parametrize("render", [True, False])
def test_render_templates_renders_every_template_anew_before_a_restart(tmp_path: Path, render: bool) -> None:
    """Nomad's template hook: with restart { render_templates = true } a restarted task's templates
    are rendered again before it starts (a new pass); without it the files stay as they were."""
    node = FakeNode(tmp_path)
    runner = _templated(node, render)
    passes = runner.tasks["t"].templates().passes
    assert passes == 1 and runner.state.task("t").state is TaskState.RUNNING
    conf = runner.tasks[runner.group.tasks[0].name].task_dir / "local" / "app.conf"
    conf.write_text("changed by hand\n")
    (hid,) = [h for h in node.docker.running() if h.startswith("docker-t")]
    node.docker.exit(hid, 3)
    runner.on_task_exit(hid)

    def running() -> tuple[bool | None, str]:  # the render runs off the loop; then the start
        node.run_timers()
        state = runner.state.task("t").state
        return (True if state is TaskState.RUNNING else None), state.value

    wait_until(running, timeout=10, what="the restarted task running", interval=0.01)
    assert runner.state.task("t").state is TaskState.RUNNING and runner.state.task("t").restarts == 1
    assert runner.tasks["t"].templates().passes == (2 if render else 1)
    assert conf.read_text() == ("a=t\n" if render else "changed by hand\n")
    parsed = _parse(_job(group="restart {\nrender_templates = true\n}"))
    assert parsed.job.groups[0].restart.render_templates and parsed.warnings == ()


def test_a_tasks_consul_block_is_read_as_the_groups() -> None:
    assert _parse(_job(task='consul {\ncluster = "default"\npartition = "default"\n}')).warnings == ()
    (problem,) = _problems(_job(task='consul {\nnamespace = "payments"\n}'))
    assert problem[0] == "job.j.group.g.task.t.consul.namespace"
    task = {"Name": "t", "Driver": "docker", "Config": {"image": "x"}, "Consul": {"Cluster": "east"}}
    (problem,) = _problems(json.dumps({"Job": {"ID": "j", "TaskGroups": [{"Name": "g", "Tasks": [task]}]}}))
    assert problem == (
        "job.j.group.g.task.t.consul.cluster",
        "non-default Consul cluster requires Nomad Enterprise",
    )
