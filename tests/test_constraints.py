"""`constraint` blocks end to end without a lab: read from HCL (every form jobspec2 takes), HCL's JSON
syntax and Nomad's API JSON into the model; refused with the field's path where Nomad's server refuses
them; answered by GET /v1/job/:id so that a job read back and registered again is the same job; and a
job whose constraints this node fails refused at register, naming them (agent.client.core._refuse)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agent.api.client import ApiError
from agent.client.core import Core
from agent.decide.jobupdate import plan_job_update
from agent.decide.placement import NodeFacts
from agent.jobspec import JobspecError, parse_jobspec
from agent.nomadapi.jobjson import parsed_job_json
from agent.structs.jobcodec import decode_job, encode_job
from agent.structs.model import Constraint, Job
from tests.agent_lab import NODE, NomadRoutes, run_job
from tests.fakes import FakeNode

SPECS = Path(__file__).parent / "jobspecs" / "nomad"


def _parse(text: str, fmt: str = "hcl") -> Job:
    return parse_jobspec(text, source="<t>", fmt=fmt).job


def _problems(text: str, fmt: str = "hcl") -> list[tuple[str, str]]:
    with pytest.raises(JobspecError) as info:
        parse_jobspec(text, source="<t>", fmt=fmt)
    return info.value.problems


def _job(job_level: str = "", group_level: str = "", task_level: str = "") -> str:
    return f"""
job "web" {{
  {job_level}
  group "g" {{
    {group_level}
    task "t" {{
      driver = "docker"
      config {{ image = "x" }}
      {task_level}
    }}
  }}
}}
"""


def C(left: str, op: str, right: str = "") -> Constraint:
    return Constraint(ltarget=left, rtarget=right, operand=op)


# --- HCL -------------------------------------------------------------------------------------------


def test_constraints_are_read_at_job_group_and_task_level() -> None:
    job = _parse(
        _job(
            'constraint {\n attribute = "${attr.kernel.name}"\n value = "linux"\n }',
            'constraint {\n attribute = "${meta.rack}"\n operator = "!="\n value = "r9"\n }\n'
            'constraint {\n attribute = "${attr.cpu.numcores}"\n operator = ">="\n value = 4\n }',
            'constraint {\n attribute = "${attr.driver.docker}"\n operator = "is_set"\n }',
        )
    )
    assert job.constraints == (C("${attr.kernel.name}", "=", "linux"),)
    (g,) = job.groups
    assert g.constraints == (C("${meta.rack}", "!=", "r9"), C("${attr.cpu.numcores}", ">=", "4"))
    assert g.tasks[0].constraints == (C("${attr.driver.docker}", "is_set"),)


@pytest.mark.parametrize(
    ("body", "constraint"),
    [
        (
            'attribute = "${attr.os.name}"\nvalue = "ubuntu"',
            C("${attr.os.name}", "=", "ubuntu"),
        ),  # "=" default
        (
            'attribute = "${attr.os.name}"\noperator = ""\nvalue = "ubuntu"',
            C("${attr.os.name}", "=", "ubuntu"),
        ),
        ('attribute = "${attr.k}"\nversion = ">= 5.10"', C("${attr.k}", "version", ">= 5.10")),
        ('attribute = "${attr.k}"\nsemver = ">= 1.6.0-beta.1"', C("${attr.k}", "semver", ">= 1.6.0-beta.1")),
        (
            'attribute = "${node.unique.name}"\nregexp = "^c[0-9]$"',
            C("${node.unique.name}", "regexp", "^c[0-9]$"),
        ),
        ('attribute = "${meta.bins}"\nset_contains = "a,b"', C("${meta.bins}", "set_contains", "a,b")),
        # the shorthand wins over operator and value, as in jobspec2
        ('attribute = "${attr.k}"\noperator = "="\nvalue = "x"\nregexp = "y"', C("${attr.k}", "regexp", "y")),
        # a later shorthand wins: regexp is applied after version
        ('attribute = "${attr.k}"\nversion = "1.0"\nregexp = "y"', C("${attr.k}", "regexp", "y")),
        ("distinct_hosts = true", C("", "distinct_hosts", "true")),
        ("distinct_hosts = false", C("", "distinct_hosts", "false")),
        ('operator = "distinct_hosts"', C("", "distinct_hosts")),
        ('distinct_property = "${meta.rack}"', C("${meta.rack}", "distinct_property")),
        ('distinct_property = "${meta.rack}"\nvalue = "2"', C("${meta.rack}", "distinct_property", "2")),
    ],
)
def test_every_hcl_form_of_jobspec2_reads_as_it_does(body: str, constraint: Constraint) -> None:
    job = _parse(_job(group_level=f"constraint {{\n{body}\n}}"))
    assert job.groups[0].constraints == (constraint,)


@pytest.mark.parametrize("key", ["set_contains_any", "set_contains_all"])
def test_shorthands_jobspec2_ignores_in_a_constraint_are_ignored_with_a_warning(key: str) -> None:
    parsed = parse_jobspec(
        _job(group_level=f'constraint {{\nattribute = "${{meta.z}}"\nvalue = "a"\n{key} = "b,c"\n}}'),
        source="<t>",
    )
    assert parsed.job.groups[0].constraints == (C("${meta.z}", "=", "a"),)  # as Nomad reads it
    (warning,) = parsed.warnings
    assert warning.startswith(f"job.web.group.g.constraint[0].{key}: ignored")
    assert f'operator = "{key}"' in warning
    # alone, Nomad's "=" has no value: refused, as Nomad's server refuses it
    problems = _problems(_job(group_level=f'constraint {{\nattribute = "${{meta.z}}"\n{key} = "b"\n}}'))
    assert problems == [("job.web.group.g.constraint[0].value", 'required with operator "="')]


def test_dynamic_constraint_blocks_and_the_corpus_files_read_every_constraint() -> None:
    job = parse_jobspec((SPECS / "stanzas" / "constraint-operators.hcl").read_text(), source="<t>").job
    assert [c.operand for c in job.constraints] == [
        "=",
        "!=",
        "version",
        "semver",
        "set_contains",
        "set_contains_any",
        "regexp",
        "is_not_set",
        "is_set",
        ">=",
    ]
    distinct = parse_jobspec((SPECS / "stanzas" / "constraint-distinct.hcl").read_text(), source="<t>").job
    assert distinct.constraints == (C("", "distinct_hosts", "true"),)
    assert distinct.groups[0].constraints == (C("${meta.rack}", "distinct_property", "1"),)
    dynamic = parse_jobspec((SPECS / "hcl2" / "dynamic-constraint-and-env.hcl").read_text(), source="<t>")
    assert dynamic.job.constraints == (
        C("${attr.driver.docker}", "is_set"),
        C("${attr.cpu.numcores}", "is_set"),
    )
    assert not [w for w in dynamic.warnings if "constraint" in w]


def test_hcl_json_syntax_reads_constraints() -> None:
    text = json.dumps(
        {
            "job": {
                "web": {
                    "constraint": [
                        {"attribute": "${attr.kernel.name}", "value": "linux"},
                        {"distinct_hosts": True},
                    ],
                    "group": {
                        "g": {
                            "task": {
                                "t": {
                                    "driver": "docker",
                                    "config": {"image": "x"},
                                    "constraint": {"attribute": "${meta.a}", "regexp": "^x"},
                                }
                            }
                        }
                    },
                }
            }
        }
    )
    job = _parse(text, "json")
    assert job.constraints == (C("${attr.kernel.name}", "=", "linux"), C("", "distinct_hosts", "true"))
    assert job.groups[0].tasks[0].constraints == (C("${meta.a}", "regexp", "^x"),)


# --- what Nomad refuses, with the path --------------------------------------------------------------


def test_bad_constraints_are_refused_with_the_path_of_the_key_written() -> None:
    blocks = [
        'operator = "near"\nattribute = "${attr.a}"\nvalue = "b"',
        'attribute = "${attr.x}"\nregexp = "(a"',
        'attribute = "${attr.x}"\noperator = "regexp"\nvalue = "[z-a]"',
        'attribute = "${attr.k}"\nversion = ">= 1.x"',
        'attribute = "${attr.k}"\nsemver = "~> 1.2"',
        'value = "linux"',
        'attribute = "${node.region}"\nvalue = "global"',
        'attribute = "${attr.k}"\noperator = "is_not_set"\nvalue = "x"',
        'attribute = "${attr.k}"\noperator = "set_contains_all"',
        'distinct_hosts = "maybe"',
    ]
    job_level = "\n".join(f"constraint {{\n{b}\n}}" for b in blocks)
    task_level = 'constraint {\ndistinct_property = "${meta.rack}"\n}'
    problems = _problems(
        _job(job_level, 'constraint {\ndistinct_property = "${meta.rack}"\nvalue = "0"\n}', task_level)
    )
    paths = [p for p, _ in problems]
    assert sorted(paths) == sorted(
        [
            "job.web.constraint[0].operator",
            "job.web.constraint[1].regexp",
            "job.web.constraint[2].value",
            "job.web.constraint[3].version",
            "job.web.constraint[4].semver",
            "job.web.constraint[5].attribute",
            "job.web.constraint[6].attribute",
            "job.web.constraint[7].value",
            "job.web.constraint[8].value",
            "job.web.constraint[9].distinct_hosts",
            "job.web.group.g.constraint[0].value",
            "job.web.group.g.task.t.constraint[0].distinct_property",
        ]
    )
    said = dict(problems)
    assert said["job.web.constraint[0].operator"].startswith('"near" is not a constraint operator')
    assert "missing closing )" in said["job.web.constraint[1].regexp"]
    assert "invalid character class range" in said["job.web.constraint[2].value"]
    assert (
        said["job.web.constraint[3].version"]
        == "the version constraint is invalid: malformed constraint: >= 1.x"
    )
    assert said["job.web.constraint[5].attribute"] == 'required with operator "="'
    assert said["job.web.constraint[6].attribute"].startswith('unsupported attribute "${node.region}"')
    assert (
        "not allowed in a task's constraint" in said["job.web.group.g.task.t.constraint[0].distinct_property"]
    )


def test_an_unknown_key_in_a_constraint_is_refused_with_a_hint() -> None:
    problems = _problems(_job(group_level='constraint {\nattribute = "${attr.a}"\nvalu = "b"\n}'))
    assert (
        "job.web.group.g.constraint[0].valu",
        'not a Nomad jobspec field here (did you mean "value"?)',
    ) in problems


# --- Nomad's API JSON -------------------------------------------------------------------------------


def _api(**levels: object) -> str:
    task = {"Name": "t", "Driver": "docker", "Config": {"image": "x"}, "Constraints": levels.get("task")}
    group = {"Name": "g", "Tasks": [task], "Constraints": levels.get("group")}
    return json.dumps({"Job": {"ID": "web", "TaskGroups": [group], "Constraints": levels.get("job")}})


def test_the_api_json_form_reads_ltarget_rtarget_operand() -> None:
    one = {"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="}
    hosts = {"LTarget": "", "RTarget": "true", "Operand": "distinct_hosts"}
    regexp = {"LTarget": "${meta.a}", "RTarget": "^x", "Operand": "regexp"}
    parsed = parse_jobspec(_api(job=[one], group=[hosts], task=[regexp]), source="<t>", fmt="json")
    assert parsed.warnings == ()
    job = parsed.job
    assert job.constraints == (C("${attr.kernel.name}", "=", "linux"),)
    assert job.groups[0].constraints == (C("", "distinct_hosts", "true"),)
    assert job.groups[0].tasks[0].constraints == (C("${meta.a}", "regexp", "^x"),)
    assert _parse(_api(job=None, group=[], task=None), "json").constraints == ()


def test_the_api_json_form_refuses_what_nomads_api_does() -> None:
    no_operand = {"LTarget": "${attr.a}", "RTarget": "b", "Operand": ""}
    shorthand = {"LTarget": "${attr.a}", "Operand": "=", "RTarget": "b", "regexp": "c"}
    bad_regexp = {"LTarget": "${attr.a}", "RTarget": "(", "Operand": "regexp"}
    problems = _problems(_api(job=[no_operand], group=[shorthand], task=[bad_regexp]), "json")
    assert [p for p, _ in problems] == [
        "job.web.group.g.task.t.constraint[0].value",
        "job.web.group.g.constraint[0].regexp",
        "job.web.constraint[0].operator",
    ]
    assert "not a field of Nomad's api.Constraint" in problems[1][1]
    assert '"Operand"' in problems[2][1]


# --- the JSON views and the canonical record ------------------------------------------------------------

ALL_LEVELS = _job(
    'constraint {\nattribute = "${attr.kernel.name}"\nvalue = "linux"\n}\n'
    "constraint {\ndistinct_hosts = true\n}",
    'constraint {\nattribute = "${meta.rack}"\nregexp = "^r"\n}',
    'constraint {\nattribute = "${attr.driver.docker}"\noperator = "is_set"\n}',
)


def test_job_json_answers_constraints_at_every_level_and_reads_back_the_same_job() -> None:
    job = _parse(ALL_LEVELS)
    view = parsed_job_json(job)
    assert view["Constraints"] == [
        {"LTarget": "${attr.kernel.name}", "RTarget": "linux", "Operand": "="},
        {"LTarget": "", "RTarget": "true", "Operand": "distinct_hosts"},
    ]
    group = view["TaskGroups"][0]
    assert group["Constraints"] == [{"LTarget": "${meta.rack}", "RTarget": "^r", "Operand": "regexp"}]
    assert group["Tasks"][0]["Constraints"] == [
        {"LTarget": "${attr.driver.docker}", "RTarget": "", "Operand": "is_set"}
    ]
    again = parse_jobspec(json.dumps({"Job": view}), source="<t>", fmt="json")
    assert again.job == job and again.warnings == ()
    empty = parsed_job_json(_parse(_job()))
    assert empty["Constraints"] is None and empty["TaskGroups"][0]["Constraints"] is None
    assert empty["TaskGroups"][0]["Tasks"][0]["Constraints"] is None


def test_the_canonical_record_keeps_constraints_and_reads_a_record_without_them() -> None:
    job = _parse(ALL_LEVELS)
    assert decode_job(json.loads(json.dumps(encode_job(job)))) == job
    old = encode_job(_parse(_job()))
    for holder in (old["job"], old["job"]["groups"][0], old["job"]["groups"][0]["tasks"][0]):
        del holder["constraints"]  # a record written before constraints were read
    assert decode_job(old) == _parse(_job())


def test_a_constraint_change_alone_updates_in_place() -> None:
    """Nomad's tasksUpdated compares no constraint: the running allocs stay, the node still meets them."""
    old = _parse(_job())
    group = replace(old.groups[0], constraints=(C("${meta.rack}", "is_set"),))
    task = replace(group.tasks[0], constraints=(C("${attr.a}", "is_set"),))
    new = replace(old, groups=(replace(group, tasks=(task,)),), constraints=(C("${attr.b}", "is_set"),))
    plan = plan_job_update(old, new, {"g": ["a1"]})
    assert plan.noop and plan.destructive == ()
    changed = replace(new, groups=(replace(new.groups[0], tasks=(replace(task, env={"A": "1"}),)),))
    assert plan_job_update(old, changed, {"g": ["a1"]}).destructive == ("g",)


# --- the core: refused at register, naming the failing constraints --------------------------------------

FACTS = NodeFacts(
    id=NODE.id,
    name="client1",
    datacenter="dc1",
    attributes={"kernel.name": "linux", "cpu.arch": "amd64", "driver.docker": "1", "driver.exec": "1"},
    meta={"rack": "r1"},
)


@pytest.fixture
def api(tmp_path: Path) -> Iterator[NomadRoutes]:
    core = FakeNode(tmp_path).core(node=FACTS)
    threading.Thread(target=core.loop.run, daemon=True).start()
    yield NomadRoutes(core)
    core.stop()


def test_a_job_whose_constraints_this_node_fails_is_refused_at_register_naming_them(api: NomadRoutes) -> None:
    spec = _job(
        'constraint {\nattribute = "${attr.kernel.name}"\nvalue = "windows"\n}',
        'constraint {\nattribute = "${node.unique.name}"\nvalue = "client2"\n}',
        'constraint {\nattribute = "${meta.gpu}"\noperator = "is_set"\n}',
    )
    with pytest.raises(ApiError) as info:
        run_job(api.request, spec)
    assert info.value.status == 400
    said = str(info.value)
    for line in (
        'job.web.group.g: constraint "${attr.kernel.name} = windows" of the job is not met by this node '
        '(${attr.kernel.name} is "linux"): Nomad would not place the group here',
        'job.web.group.g: constraint "${node.unique.name} = client2" of the group is not met by this node '
        '(${node.unique.name} is "client1"): Nomad would not place the group here',
        'job.web.group.g: constraint "${meta.gpu} is_set " of the task t is not met by this node '
        "(${meta.gpu} is not set on this node): Nomad would not place the group here",
    ):
        assert line in said
    assert api.call("GET", "/v1/job/web")[0] == 404, "nothing registered"


def test_a_job_this_node_meets_runs_and_registering_it_as_read_back_changes_nothing(api: NomadRoutes) -> None:
    spec = _job(
        'constraint {\nattribute = "${attr.kernel.name}"\nvalue = "linux"\n}',
        'constraint {\nattribute = "${node.unique.name}"\nregexp = "^client[0-9]+$"\n}',
        'constraint {\nattribute = "${meta.gpu}"\noperator = "is_not_set"\n}',
    )
    assert len(run_job(api.request, spec)) == 1
    job = api.request("GET", "/v1/job/web")
    assert job["Version"] == 0
    assert job["TaskGroups"][0]["Constraints"] == [
        {"LTarget": "${node.unique.name}", "RTarget": "^client[0-9]+$", "Operand": "regexp"}
    ]
    api.request("PUT", "/v1/jobs", {"Job": job})
    assert api.request("GET", "/v1/job/web")["Version"] == 0, "the same job: no new version"


def test_a_second_alloc_under_distinct_hosts_is_refused(api: NomadRoutes) -> None:
    spec = _job(group_level="count = 2\nconstraint {\ndistinct_hosts = true\n}")
    with pytest.raises(ApiError) as info:
        run_job(api.request, spec)
    assert 'constraint " distinct_hosts true" of the group' in str(info.value)
    assert "Nomad would place 1 and leave 1 pending" in str(info.value)
    assert len(run_job(api.request, spec.replace("count = 2", "count = 1"))) == 1


def test_the_node_shows_the_attributes_and_meta_constraints_are_checked_against(api: NomadRoutes) -> None:
    node = api.request("GET", f"/v1/node/{NODE.id}")
    assert node["Attributes"] == dict(FACTS.attributes)
    assert node["Meta"] == {"rack": "r1"}
    assert (node["NodeClass"], node["NodePool"]) == ("", "default")


def test_a_core_without_facts_fingerprints_this_host_with_its_drivers(tmp_path: Path) -> None:
    node = FakeNode(tmp_path)
    core = node.core(datacenter="eu-1")
    assert core.node.datacenter == "eu-1"
    attributes = core.node.attributes
    assert attributes["kernel.name"] == "linux"
    assert {k for k in attributes if k.startswith("driver.")} == {f"driver.{n}" for n in node.registry.names}


def test_build_core_gives_the_node_its_settings_name_and_the_data_dirs_id(tmp_path: Path) -> None:
    from agent.command.wiring import CoreSettings, build_core
    from agent.fieldbugs.faults import Faults
    from agent.node.nodeinfo import load_node_id
    from agent.state.sqlite import SqliteStore

    settings = CoreSettings(
        data_dir=tmp_path, bridge="b0", node_name="client7", datacenter="dc9", docker_enabled=False
    )
    core: Core = build_core(settings, SqliteStore(tmp_path / "state.db"), None, Faults())
    assert (core.node.name, core.node.datacenter) == ("client7", "dc9")
    assert core.node.id == load_node_id(tmp_path)  # the ID /v1/node answers, kept in the data dir
    assert "driver.exec" in core.node.attributes and "driver.docker" not in core.node.attributes
