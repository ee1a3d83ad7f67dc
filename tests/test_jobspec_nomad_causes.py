"""The causes of valid Nomad jobspecs being refused, found with public jobspecs, each fixed; and bad input
(wrong shapes, deep nesting, huge numbers, absurd values) always a JobspecError with a path, never a crash."""

from __future__ import annotations

import json

import pytest

from agent.errors import AgentError
from agent.jobspec import JobspecError, Limits, ParsedJob, parse_jobspec
from agent.jobspec.fieldclass import server_side_warning
from agent.structs.model import Network, Port

NOT_IMPLEMENTED = "accepted but not implemented by fieldlab-agent"


def _parse(text: str, fmt: str | None = None, limits: Limits | None = None) -> ParsedJob:
    return parse_jobspec(text, source="<t>", fmt=fmt, limits=limits or Limits())


def _problems(text: str, fmt: str | None = None, limits: Limits | None = None) -> list[tuple[str, str]]:
    with pytest.raises(JobspecError) as info:
        _parse(text, fmt, limits)
    return info.value.problems


def _job(group: str = "", task: str = "", network: str = 'mode = "bridge"\nport "http" { to = 8080 }') -> str:
    return f"""
job "j" {{
  group "g" {{
    network {{
      {network}
    }}
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


# --- ports ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("port", ['"9001"', "9001"])
def test_a_service_port_may_be_a_number_as_nomad_job_init_connect_writes_it(port: str) -> None:
    job = _parse(_job(group=f'service {{\nname = "api"\nport = {port}\n}}')).job
    assert job.groups[0].services[0].port == "9001"


def test_a_service_port_number_out_of_range_is_refused() -> None:
    assert ("job.j.group.g.service[0].port", "70000 is not a port number (1-65535)") in _problems(
        _job(group="service {\nport = 70000\n}")
    )


def test_ports_of_a_tasks_resources_network_join_the_group_network_with_a_warning() -> None:
    text = """
job "j" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "fieldlab/busybox:latest"
        ports = ["http"]
      }
      service {
        port = "http"
      }
      resources {
        cpu = 100
        network {
          mbits = 10
          port "http" {}
          port "admin" { static = 9000 }
        }
      }
    }
  }
}
"""
    parsed = _parse(text)
    (group,) = parsed.job.groups
    assert group.network == Network(mode="host", ports=(Port("http"), Port("admin", static=9000)))
    assert group.tasks[0].services[0].port == "http"
    path = "job.j.group.g.task.t.resources.network[0]"
    assert any(w.startswith(f"{path}: a task's network is deprecated") for w in parsed.warnings)
    assert f"{path}.mbits: {server_side_warning('network', 'mbits')}" in parsed.warnings  # the scheduler's


def test_a_tasks_port_cannot_reuse_a_group_port_label() -> None:
    task = 'resources {\nnetwork {\nport "http" {}\n}\n}'
    assert (
        "job.j.group.g.task.t.resources.network[0].port.http",
        'duplicate port label "http"',
    ) in _problems(_job(task=task))


@pytest.mark.parametrize(("to", "kept"), [("0", 0), ("-1", 0), ("8080", 8080)])
def test_to_zero_or_minus_one_means_the_same_as_the_host_port(to: str, kept: int) -> None:
    job = _parse(_job(network=f'mode = "bridge"\nport "http" {{ to = {to} }}')).job
    assert job.groups[0].network == Network(mode="bridge", ports=(Port("http", to=kept),))


def test_to_below_minus_one_is_refused() -> None:
    problems = _problems(_job(network='mode = "bridge"\nport "http" { to = -2 }'))
    assert problems == [
        (
            "job.j.group.g.network.port.http.to",
            "-2 is not a port number (1-65535; 0 or -1: the same as the host port)",
        )
    ]


def test_to_is_kept_in_host_mode_for_the_docker_driver_to_map() -> None:
    parsed = _parse(_job(network='mode = "host"\nport "http" { to = 8080 }'))
    assert parsed.job.groups[0].network == Network(mode="host", ports=(Port("http", to=8080),))
    assert parsed.warnings == ()


def test_port_labels_may_have_dashes_as_in_nomad() -> None:
    job = _parse(
        _job(network='mode = "bridge"\nport "my-http" { to = 80 }', group='service {\nport = "my-http"\n}')
    ).job
    assert job.groups[0].network is not None and job.groups[0].network.ports[0].label == "my-http"


def test_reserved_ports_and_port_fields_of_newer_nomad_are_accepted() -> None:
    network = """mode = "host"
    cni { args = { a = "b" } }
    port "http" {
      static = 8080
      host_network = "default"
      ignore_collision = false
    }
    reserved_ports "admin" { static = 9090 }"""
    parsed = _parse(_job(network=network))
    assert parsed.job.groups[0].network == Network(
        mode="host", ports=(Port("http", static=8080), Port("admin", static=9090)), cni_args=(("a", "b"),)
    )
    assert parsed.warnings == ()


def test_a_cni_network_is_taken_with_its_args() -> None:
    parsed = _parse(_job(network='mode = "cni/lab-macvlan"\ncni { args = { K8S_POD_NAME = "x", A = "1" } }'))
    net = parsed.job.groups[0].network
    assert net is not None and net.mode == "cni/lab-macvlan" and net.group_netns
    assert net.cni_args == (("A", "1"), ("K8S_POD_NAME", "x")) and net.driver_mode == "bridge"
    assert parsed.warnings == ()


def test_a_colliding_static_port_is_refused() -> None:
    with pytest.raises(JobspecError) as err:
        _parse(_job(network='mode = "host"\nport "http" {\nstatic = 8080\nignore_collision = true\n}'))
    assert any(
        p == "job.j.group.g.network.port.http.ignore_collision"
        and "does not let a static port collide" in why
        for p, why in err.value.problems
    )


@pytest.mark.parametrize("args", ['{ "a;b" = "c" }', '{ a = "b;c" }', '{ "a=b" = "c" }'])
def test_cni_args_that_cni_args_cannot_carry_are_refused(args: str) -> None:
    with pytest.raises(JobspecError) as err:
        _parse(_job(network=f'mode = "bridge"\ncni {{ args = {args} }}'))
    assert any("CNI_ARGS is a ';'-separated list" in why for _, why in err.value.problems)


@pytest.mark.parametrize("field", ['cidr = "10.0.0.0/8"', 'device = "eth0"', 'ip = "10.0.0.1"'])
def test_network_fields_the_scheduler_sets_are_refused(field: str) -> None:
    with pytest.raises(JobspecError) as err:
        _parse(_job(network=f'mode = "bridge"\n{field}'))
    assert any("refused: fieldlab-agent does not" in why for _, why in err.value.problems)


# --- fields that exist in Nomad --------------------------------------------------------------------------


def test_fields_nomad_has_are_accepted() -> None:
    text = """
job "label" {
  id = "real-id"
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image = "fieldlab/busybox:latest"
      }
      template {
        data = "[[ .x ]]"
        destination = "local/x"
        left_delimiter = "[["
        right_delimiter = "]]"
        uid = 1000
        gid = 1000
        once = true
        env = false
        change_mode = "script"
        change_script {
          command = "/bin/true"
          run_on_first_render = true
        }
      }
    }
  }
}
"""
    parsed = _parse(text)
    assert parsed.job.id == "real-id"
    tpl = parsed.job.groups[0].tasks[0].templates[0]
    assert (tpl.left_delimiter, tpl.right_delimiter) == ("[[", "]]")
    assert parsed.warnings == ()  # max_run_duration: tests/test_jobspec_clientfields.py
    assert (tpl.uid, tpl.gid, tpl.once) == (1000, 1000, True)  # read (issue 52), no longer warned about
    assert tpl.change_script is not None and tpl.change_script.run_on_first_render


def test_template_delimiters_default_to_go_templates() -> None:
    tpl = _parse(_job(task='template {\ndata = "x"\ndestination = "local/x"\n}')).job.groups[0].tasks[0]
    assert (tpl.templates[0].left_delimiter, tpl.templates[0].right_delimiter) == ("{{", "}}")


def test_a_task_directly_in_a_job_is_a_group_named_after_it() -> None:
    text = """
job "j" {
  task "solo" {
    driver = "exec"
    config {
      command = "/bin/true"
    }
  }
  group "g" {
    task "t" {
      driver = "exec"
      config {
        command = "/bin/true"
      }
    }
  }
}
"""
    job = _parse(text).job
    assert [(g.name, [t.name for t in g.tasks]) for g in job.groups] == [("solo", ["solo"]), ("g", ["t"])]


def test_a_job_level_vault_block_is_every_tasks_default() -> None:
    text = _job().replace('group "g" {', 'vault {\npolicies = ["p"]\n}\ngroup "g" {', 1)
    assert _parse(text).job.groups[0].tasks[0].vault is not None


def test_a_group_script_check_runs_in_the_task_it_names() -> None:
    group = """service {
      port = "http"
      check {
        type = "script"
        task = "t"
        command = "/bin/true"
        interval = "10s"
        timeout = "2s"
      }
    }"""
    (check,) = _parse(_job(group=group)).job.groups[0].services[0].checks
    assert (check.type, check.task, check.command) == ("script", "t", "/bin/true")
    assert ("job.j.group.g.service[0].check[0].task", 'the group has no task "nope"') in _problems(
        _job(group=group.replace('task = "t"', 'task = "nope"'))
    )


def test_grpc_checks_of_a_consul_service_are_registered_and_refused_for_a_nomad_one() -> None:
    """Consul runs a grpc check (the agent sends `GRPC`: agent.consul.catalog); Nomad's own checks are tcp
    and http only (ServiceCheck.validateNomad)."""
    group = 'service {\nport = "http"\ncheck {\ntype = "grpc"\ninterval = "10s"\ntimeout = "2s"\n}\n}'
    parsed = _parse(_job(group=group))
    assert [c.type for c in parsed.job.groups[0].services[0].checks] == ["grpc"]
    assert parsed.warnings == ()
    nomad = group.replace('port = "http"', 'port = "http"\nprovider = "nomad"')
    with pytest.raises(JobspecError, match=r'invalid check type \("grpc"\), must be one of tcp, http'):
        _parse(_job(group=nomad))


def test_connect_is_refused_with_the_reason() -> None:
    text = """
job "j" {
  group "api" {
    network {
      mode = "bridge"
    }
    service {
      name = "count-api"
      port = "9001"
      connect {
        sidecar_service {}
      }
    }
    task "web" {
      driver = "docker"
      config {
        image = "fieldlab/busybox:latest"
      }
    }
  }
}
"""
    with pytest.raises(JobspecError) as info:
        _parse(text)
    assert info.value.problems == [
        (
            "job.j.group.api.service[0].connect",
            "refused: fieldlab-agent does not run Consul Connect: the lab has no Envoy sidecars, gateways "
            "or Connect CA",
        )
    ]


def test_api_json_ids_of_services_and_checks_are_ignored_with_a_warning() -> None:
    job = {
        "ID": "j",
        "TaskGroups": [
            {
                "Name": "g",
                "Tasks": [
                    {
                        "Name": "t",
                        "Driver": "raw_exec",
                        "Config": {"command": "/bin/true"},
                        "Services": [
                            {
                                "Id": "x",
                                "Name": "s",
                                "Checks": [
                                    {
                                        "Id": "y",
                                        "Type": "script",
                                        "Command": "/bin/true",
                                        "Interval": 10**10,
                                        "Timeout": 10**9,
                                    }
                                ],
                            }
                        ],
                    }
                ],
            }
        ],
    }
    parsed = _parse(json.dumps({"Job": job}))
    assert sorted(parsed.warnings) == sorted(
        [
            "job.j.group.g.task.t.service[0]: set by the Nomad server, ignored by fieldlab-agent: Id",
            "job.j.group.g.task.t.service[0].check[0]: "
            "set by the Nomad server, ignored by fieldlab-agent: Id",
        ]
    )


# --- drivers ----------------------------------------------------------------------------------------------


def test_raw_exec_runs_like_exec() -> None:
    text = (
        _job()
        .replace('driver = "docker"', 'driver = "raw_exec"')
        .replace(
            'image = "fieldlab/busybox:latest"',
            'command = "/bin/sh"\nargs = ["-c", "true"]\nwork_dir = "/tmp"',
        )
    )
    parsed = _parse(text)
    task = parsed.job.groups[0].tasks[0]
    assert (task.driver, task.kill_signal, task.config["command"], task.config["args"]) == (
        "raw_exec",
        "",  # unset: raw_exec's SIGINT at the stop (taskdecisions.plan_kill_signal)
        "/bin/sh",
        ["-c", "true"],
    )
    assert parsed.warnings == ()  # work_dir: raw_exec's, honoured (issue 52)
    assert parsed.job.groups[0].tasks[0].config["work_dir"] == "/tmp"


def test_other_drivers_are_refused_naming_the_ones_the_agent_runs() -> None:
    problems = _problems(_job().replace('driver = "docker"', 'driver = "java"'))
    assert problems == [
        (
            "job.j.group.g.task.t.driver",
            'driver "java" is not run by fieldlab-agent: it runs docker, exec, raw_exec',
        )
    ]


# --- bad input: problems with paths, never an exception ----------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "path"),
    [
        ("      {task}", "env = []", "job.j.group.g.task.t.env"),
        ("      {task}", "env = [1, 2]", "job.j.group.g.task.t.env"),
        ("      {task}", 'env = "x"', "job.j.group.g.task.t.env"),
        ("      {task}", 'resources = ["x"]', "job.j.group.g.task.t.resources"),
        ("      {task}", "template = 5", "job.j.group.g.task.t.template"),
        ("      {task}", "kill_timeout = []", "job.j.group.g.task.t.kill_timeout"),
    ],
)
def test_wrong_shapes_in_hcl_are_problems(old: str, new: str, path: str) -> None:
    text = _job(task=new)
    assert any(p == path for p, _ in _problems(text)), _problems(text)


def _api(task: dict[str, object], group: dict[str, object] | None = None) -> str:
    t = {"Name": "t", "Driver": "exec", "Config": {"command": "/bin/true"}, **task}
    return json.dumps({"Job": {"ID": "j", "TaskGroups": [{"Name": "g", "Tasks": [t], **(group or {})}]}})


@pytest.mark.parametrize(
    ("task", "path"),
    [
        ({"Config": []}, "job.j.group.g.task.t.config"),
        ({"Env": []}, "job.j.group.g.task.t.env"),
        ({"Env": {"A": {"b": 1}}}, "job.j.group.g.task.t.env.A"),
        ({"Templates": {}}, "job.j.group.g.task.t.template"),
        ({"Templates": [[]]}, "job.j.group.g.task.t.template"),
        ({"Resources": []}, "job.j.group.g.task.t.resources"),
        ({"Services": [{"Checks": "x"}]}, "job.j.group.g.task.t.service[0].check"),
        ({"KillTimeout": 1.5}, "job.j.group.g.task.t.kill_timeout"),
        ({"KillTimeout": "5s"}, "job.j.group.g.task.t.kill_timeout"),
    ],
)
def test_wrong_shapes_in_api_json_are_problems(task: dict[str, object], path: str) -> None:
    problems = _problems(_api(task))
    assert any(p == path for p, _ in problems), problems


def test_json_nested_hundreds_of_levels_is_refused() -> None:
    deep = "[" * 300 + "]" * 300
    text = _api({}).replace('"command": "/bin/true"', f'"command": "/bin/true", "x": {deep}')
    assert _problems(text) == [("", "the jobspec is nested more than 64 levels")]
    assert _problems("[" * 100_000 + "]" * 100_000, fmt="json")[0][0] == ""


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("9" * 5000, "out of range"),
        ("1e400", "out of range"),
        ("NaN", "not a number JSON allows"),
        ("-Infinity", "not a number JSON allows"),
    ],
)
def test_numbers_json_cannot_hold_are_problems_naming_the_path(value: str, reason: str) -> None:
    text = _api({}, {"Count": "COUNT"}).replace('"COUNT"', value)
    problems = _problems(text)
    assert any(p == "job.j.group.g.count" and reason in r for p, r in problems), problems


def test_count_over_the_clients_max_count_is_refused() -> None:
    problems = _problems(_api({}, {"Count": 5000}), limits=Limits(max_count=100))
    ((path, reason),) = problems
    assert (path, reason.split(":")[0]) == (
        "job.j.group.g.count",
        "count 5000 is more than the client's max_count (100)",
    )


def test_kill_timeout_over_go_durations_is_refused() -> None:
    problems = _problems(_job(task='kill_timeout = "9999999999999999h"'))
    assert [p for p, _ in problems] == ["job.j.group.g.task.t.kill_timeout"]
    assert "out of range" in problems[0][1]


def test_kill_timeout_over_the_clients_max_is_capped_with_a_warning_as_nomad() -> None:
    parsed = parse_jobspec(_job(task='kill_timeout = "45s"'), source="t.hcl")
    # kept as asked (the job shows it, as Nomad's); the stop caps it (taskdecisions.plan_kill_timeout)
    assert parsed.job.groups[0].tasks[0].kill_timeout == 45.0
    assert (
        "job.j.group.g.task.t.kill_timeout: 45s is more than the client's max_kill_timeout (30s): "
        "a stop waits that long at most" in parsed.warnings
    )


@pytest.mark.parametrize("text", ["9999999999999999h", "1" + "0" * 60 + "s", "3000000h"])
def test_durations_that_overflow_go_are_refused(text: str) -> None:
    problems = _problems(_job(task=f'template {{\ndata = "x"\ndestination = "local/x"\nsplay = "{text}"\n}}'))
    assert [p for p, _ in problems] == ["job.j.group.g.task.t.template[0].splay"]
    assert "out of range" in problems[0][1]


def test_a_jobspec_over_max_bytes_is_refused_before_parsing() -> None:
    from agent.client.jobs import parse_submission  # the core imports the template engine

    with pytest.raises(JobspecError) as info:
        parse_submission("x" * 2000, None, "<t>", {}, Limits(max_bytes=1000))
    assert info.value.problems == [("", "the jobspec is 2000 bytes, more than 1000")]


def test_parse_submission_passes_variables_and_checks_templates() -> None:
    from agent.client.jobs import parse_submission  # the core imports the template engine

    parsed = parse_submission(_job(), "hcl", "<t>", {}, Limits())
    assert parsed.job.id == "j"
    assert isinstance(parsed.warnings, tuple)
    assert issubclass(JobspecError, AgentError)
