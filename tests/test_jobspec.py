"""Jobspecs: the seeds' jobs parse to the expected model, HCL and JSON agree, Nomad fields the agent does not
implement warn with their path, and every invalid input is rejected with its path and reason, all at once."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.errors import AgentError
from agent.identity.vaultlogin import token_role_policies
from agent.jobspec import JobspecError, Limits, ParsedJob, load_jobspec, parse_duration, parse_jobspec
from agent.jobspec.fieldclass import (
    ONLY_VALUES,
    field_refusal,
    server_side_warning,
    value_refusal,
)
from agent.jobspec.fields import UNIMPLEMENTED
from agent.structs.model import (
    ChangeScript,
    Check,
    EphemeralDisk,
    LogConfig,
    Network,
    Port,
    RestartPolicy,
    Vault,
)

SPECS = Path(__file__).parent / "jobspecs"


def _parse(text: str, fmt: str | None = None) -> ParsedJob:
    return parse_jobspec(text, source="<request>", fmt=fmt)


def _problems(text: str, fmt: str | None = None) -> list[tuple[str, str]]:
    with pytest.raises(JobspecError) as info:
        _parse(text, fmt)
    assert info.value.source == "<request>"
    return info.value.problems


# --- the seeds' jobspecs ------------------------------------------------------------------------------


def test_cni_check_seed_is_a_bridge_job_with_a_mapped_port() -> None:
    parsed = load_jobspec(SPECS / "cni-check-on-restore.hcl")
    job = parsed.job
    assert parsed.warnings == ()
    assert (job.id, job.type, [g.name for g in job.groups]) == ("example", "service", ["nginx"])
    (group,) = job.groups
    assert group.network == Network(mode="bridge", ports=(Port(label="http", to=80),))
    assert group.count == 1
    assert group.restart == RestartPolicy(attempts=2, interval=1800.0, delay=15.0, mode="fail")  # Nomad's
    (task,) = group.tasks
    assert (task.name, task.driver) == ("nginx", "docker")
    assert dict(task.config) == {
        "image": "fieldlab/busybox:lab",
        "init": True,
        "command": "httpd",
        "args": ["-f", "-p", "80"],
        "ports": ["http"],
    }
    assert (task.resources.cpu, task.resources.memory) == (500, 256)
    assert (task.kill_timeout, task.kill_signal) == (5.0, "")  # unset: the driver's default at the stop


def test_pause_container_seed_job_keeps_its_template_and_datacenters() -> None:
    parsed = load_jobspec(SPECS / "pause-container-example.hcl")
    assert parsed.warnings == ()
    assert parsed.job.datacenters == ("dc1",)
    (group,) = parsed.job.groups
    assert group.network == Network(mode="bridge", ports=(Port(label="www", to=8001),))
    (task,) = group.tasks
    assert task.config["args"] == ["-v", "-f", "-p", "8001", "-h", "/local"]
    (template,) = task.templates
    assert (template.data, template.destination) == ("<html>hello, world</html>", "local/index.html")
    assert (template.change_mode, template.splay, template.perms) == ("restart", 5.0, "0644")


def test_pause_container_reporters_job_completed_keeps_its_structure() -> None:
    parsed = load_jobspec(SPECS / "pause-container-orphans.hcl")
    assert parsed.warnings == ()  # its registry auth: read by a pull only, which a local image skips
    (group,) = parsed.job.groups
    assert group.network == Network(mode="bridge", ports=())
    assert [s.name for s in group.services] == ["orphans-app"] and group.services[0].port == ""
    (task,) = group.tasks
    assert task.kill_timeout == 20.0
    assert dict(task.env) == {"APP_MODE": "orphans"}
    assert (task.resources.cpu, task.resources.memory) == (200, 300)
    assert task.config["auth"] == [{"username": "fieldlab", "password": "placeholder-not-a-secret"}]


def test_template_change_mode_job_reads_modes_signals_and_durations() -> None:
    parsed = load_jobspec(SPECS / "template-change-mode.hcl")
    assert parsed.warnings == (
        "job.pki-probe.group.probe.task.probe.kill_timeout: 1m30s is more than the client's max_kill_timeout "
        "(30s): a stop waits that long at most",
    )
    job = parsed.job
    assert dict(job.meta) == {"seed": "nomad-24140"}
    (group,) = job.groups
    assert group.restart == RestartPolicy(attempts=3, interval=300.0, delay=10.0, mode="fail")
    (task,) = group.tasks
    # kept as asked (Nomad's job shows it): the client caps it at the kill (taskdecisions.plan_kill_timeout)
    assert (task.kill_timeout, task.kill_signal) == (90.0, "SIGINT")
    roomy = parse_jobspec(
        (SPECS / "template-change-mode.hcl").read_text(), source="t", limits=Limits(max_kill_timeout=120.0)
    )
    assert roomy.job.groups[0].tasks[0].kill_timeout == 90.0 and not roomy.warnings[:-1]
    assert task.vault == Vault(policies=("fieldlab-job-probe",), role="fieldlab-workload")
    assert task.env["PROBE_ALLOC"] == "${NOMAD_ALLOC_ID}"  # kept for runtime interpolation
    cert, key, serial, noop = task.templates
    assert (cert.destination, cert.change_mode, cert.change_signal) == (
        "secrets/cert.pem",
        "signal",
        "SIGHUP",
    )
    assert (cert.perms, cert.splay, cert.wait_min, cert.wait_max) == ("0600", 0.25, 2.0, 10.0)
    assert cert.data.startswith('{{ with secret "pki_int/issue/workload"') and cert.data.endswith(
        "{{ end }}\n"
    )
    assert (key.destination, key.change_mode, key.error_on_missing_key) == (
        "secrets/key.pem",
        "restart",
        True,
    )
    assert serial.change_mode == "script"
    assert serial.change_script == ChangeScript(
        command="/bin/sh", args=("-c", "kill -USR1 1"), timeout=20.0, fail_on_error=True
    )
    assert serial.data == '${not_interpolated} serial={{ key "fieldlab/serial" }}\n'
    assert noop.change_mode == "noop"
    (service,) = task.services
    assert (service.name, service.port, service.tags, service.provider) == (
        "pki-probe",
        "https",
        ("probe", "tls"),
        "nomad",
    )
    assert service.checks == (
        Check(name='service: "pki-probe" check', type="tcp", interval=10.0, timeout=2.0),
    )


# --- HCL and JSON ----------------------------------------------------------------------------------------


def test_hcl_and_api_json_forms_give_the_same_job() -> None:
    hcl = load_jobspec(SPECS / "pause-container-example.hcl")
    api = load_jobspec(SPECS / "pause-container-example.json")
    assert api.job == hcl.job
    assert api.warnings == hcl.warnings


def test_hcl_json_syntax_gives_the_same_job() -> None:
    doc = {
        "job": {
            "example": {
                "group": {
                    "nginx": {
                        "network": {"mode": "bridge", "port": {"http": {"to": 80}}},
                        "task": {
                            "nginx": {
                                "driver": "docker",
                                "config": {
                                    "image": "fieldlab/busybox:lab",
                                    "init": True,
                                    "command": "httpd",
                                    "args": ["-f", "-p", "80"],
                                    "ports": ["http"],
                                },
                                "resources": {"cpu": 500, "memory": 256},
                            }
                        },
                    }
                }
            }
        }
    }
    assert _parse(json.dumps(doc)).job == load_jobspec(SPECS / "cni-check-on-restore.hcl").job


def test_api_json_durations_are_nanoseconds_and_strings_are_rejected() -> None:
    job = {
        "ID": "j",
        "TaskGroups": [
            {
                "Name": "g",
                "RestartPolicy": {
                    "Attempts": 1,
                    "Interval": 60_000_000_000,
                    "Delay": 250_000_000,
                    "Mode": "delay",
                },
                "Tasks": [
                    {
                        "Name": "t",
                        "Driver": "exec",
                        "Config": {"command": "/bin/sleep", "args": ["60"]},
                        "KillTimeout": 20_000_000_000,
                        "KillSignal": "SIGHUP",
                        "Services": [
                            {
                                "Name": "t-svc",
                                "PortLabel": "p",
                                "Tags": ["a"],
                                "AddressMode": "auto",
                                "Checks": [
                                    {"Type": "tcp", "Interval": 10_000_000_000, "Timeout": 2_000_000_000}
                                ],
                            }
                        ],
                    }
                ],
                "Networks": [{"Mode": "host", "ReservedPorts": [{"Label": "p", "Value": 8080}]}],
            }
        ],
    }
    parsed = _parse(json.dumps(job))  # the envelope {"Job": ...} may be left out
    (group,) = parsed.job.groups
    assert group.restart == RestartPolicy(attempts=1, interval=60.0, delay=0.25, mode="delay")
    assert (group.tasks[0].kill_timeout, group.tasks[0].kill_signal) == (20.0, "SIGHUP")
    assert group.network == Network(mode="host", ports=(Port(label="p", static=8080),))
    (service,) = group.tasks[0].services
    assert (service.name, service.port, service.tags, service.provider) == ("t-svc", "p", ("a",), "consul")
    assert service.checks == (Check(name='service: "t-svc" check', type="tcp", interval=10.0, timeout=2.0),)
    assert parsed.warnings == ()
    job["TaskGroups"][0]["Tasks"][0]["KillTimeout"] = "20s"  # type: ignore[index]
    ((path, reason),) = _problems(json.dumps({"Job": job}))
    assert path == "job.j.group.g.task.t.kill_timeout" and "nanoseconds" in reason


def test_format_is_guessed_and_can_be_forced() -> None:
    text = (SPECS / "pause-container-example.json").read_text()
    assert _parse(text).job.id == "example"
    ((path, reason),) = _problems(text, fmt="hcl")
    assert path == "" and reason.startswith("HCL syntax error at line 1")
    ((_, reason),) = _problems(text, fmt="yaml")
    assert 'unknown jobspec format "yaml"' in reason


# --- warnings: Nomad fields the agent does not implement --------------------------------------------------

_SKELETON = """
job "w" {
  %(job)s
  group "g" {
    %(group)s
    network {
      mode = "bridge"
      %(network)s
      port "www" {
        to = 80
        %(port)s
      }
    }
    restart {
      %(restart)s
    }
    service {
      port = "www"
      %(service)s
      check {
        type = "tcp"
        interval = "10s"
        timeout = "2s"
        %(check)s
      }
    }
    task "d" {
      driver = "docker"
      %(task)s
      config {
        image = "fieldlab/busybox:latest"
        %(config.docker)s
      }
      resources {
        %(resources)s
      }
      template {
        data = "x"
        destination = "local/x"
        %(template)s
      }
    }
    task "e" {
      driver = "exec"
      config {
        command = "/bin/true"
        %(config.exec)s
      }
    }
  }
}
"""
_PATHS = {
    "job": "job.w",
    "group": "job.w.group.g",
    "network": "job.w.group.g.network",
    "port": "job.w.group.g.network.port.www",
    "restart": "job.w.group.g.restart",
    "service": "job.w.group.g.service[0]",
    "check": "job.w.group.g.service[0].check[0]",
    "task": "job.w.group.g.task.d",
    "config.docker": "job.w.group.g.task.d.config",
    "resources": "job.w.group.g.task.d.resources",
    "template": "job.w.group.g.task.d.template[0]",
    "config.exec": "job.w.group.g.task.e.config",
}


@pytest.mark.parametrize("context", sorted(_PATHS))
def test_every_unimplemented_nomad_field_warns_once_as_the_servers_or_as_not_implemented(
    context: str,
) -> None:
    """Issue 52: a server-side field's warning says it is the servers' decision (and what the lab does
    instead); a client-side one's says it is not implemented; one taken only as this node's value is
    refused for any other, naming it."""
    fields = sorted(UNIMPLEMENTED[context])
    slots = dict.fromkeys(_PATHS, "")
    slots[context] = "\n".join(f'{name} = "anything"' for name in fields)
    refused = {
        f"{_PATHS[context]}.{n}": r
        for n in fields
        if (r := field_refusal(context, n) or value_refusal(context, n, "anything"))
    }
    warned = [
        n
        for n in fields
        if value_refusal(context, n, "anything") is None and field_refusal(context, n) is None
    ]
    expected = sorted(f"{_PATHS[context]}.{n}: {server_side_warning(context, n)}" for n in warned)
    if refused:
        with pytest.raises(JobspecError) as info:
            _parse(_SKELETON % slots)
        assert dict(info.value.problems) == refused
        names = [p.rsplit(".", 1)[1] for p in refused if field_refusal(context, p.rsplit(".", 1)[1]) is None]
        fixed = "\n".join(f'{n} = "{ONLY_VALUES[context][n][0]}"' for n in names)
        slots[context] = "\n".join([*(f'{n} = "anything"' for n in warned), fixed])
    assert sorted(_parse(_SKELETON % slots).warnings) == expected


def test_unimplemented_blocks_warn_once_each_with_their_path() -> None:
    text = """
job "example" {
  datacenters = ["dc1"]
  region = "global"
  priority = 50
  constraint {
    attribute = "${attr.kernel.name}"
    value     = "linux"
  }
  affinity {
    attribute = "${attr.kernel.name}"
    value     = "linux"
    weight    = 50
  }
  update {
    max_parallel = 1
  }
  group "g" {
    ephemeral_disk {
      size = 300
    }
    task "t" {
      driver = "docker"
      config {
        image = "fieldlab/busybox:latest"
      }
      artifact {
        source = "https://example.invalid/x.tgz"
      }
      logs {
        max_files = 3
      }
      meta {
        a = "b"
      }
    }
  }
}
"""
    # the region is this node's (taken); the rest are the servers' decisions, each warned about once
    assert sorted(_parse(text).warnings) == sorted(
        f"job.example.{name}: {server_side_warning('job', name)}"
        for name in ("priority", "affinity")  # `update`: read (agent.jobspec.update)
    )
    assert _parse(text).job.groups[0].tasks[0].logs == LogConfig(max_files=3)  # logs: implemented
    assert _parse(text).job.groups[0].ephemeral_disk == EphemeralDisk(size=300)  # and ephemeral_disk
    assert _parse(text).job.groups[0].tasks[0].artifacts[0].source == "https://example.invalid/x.tgz"


def _one_exec_task(task: str = "", group: str = "") -> str:
    """A job "j" with group "g" and one exec task "t"; `task` and `group` are more of their bodies."""
    return f"""
job "j" {{
  group "g" {{
    {group}
    task "t" {{
      driver = "exec"
      config {{ command = "/bin/true" }}
      {task}
    }}
  }}
}}
"""


def test_ephemeral_disk_is_read_and_checked_with_the_tasks_logs_as_nomad() -> None:
    def group(body: str, logs: str = "") -> EphemeralDisk | list[str]:
        try:
            return _parse(_one_exec_task(logs, body)).job.groups[0].ephemeral_disk
        except JobspecError as exc:
            return exc.lines()

    assert group("") == EphemeralDisk(300, False, False)  # Nomad's defaults
    assert group("ephemeral_disk {\n size = 500\n sticky = true\n migrate = true\n }") == EphemeralDisk(
        500, True, True
    )
    (too_small,) = group("ephemeral_disk {\n size = 5\n }")  # type: ignore[misc]
    assert "ephemeral_disk.size: must be at least 10" in too_small
    (logs,) = group("ephemeral_disk {\n size = 100\n }")  # type: ignore[misc]  # 10 x 10 MB of logs
    assert "task.t.logs: log storage (100 MB) must be less than requested disk capacity (100 MB" in logs
    assert group("ephemeral_disk {\n size = 100\n }", "logs {\n max_files = 2\n }") == EphemeralDisk(100)


def test_the_logs_block_is_read_and_checked_as_nomads_log_config() -> None:
    def logs(body: str) -> tuple[LogConfig | None, list[str]]:
        try:
            return _parse(_one_exec_task(f"logs {{ {body} }}")).job.groups[0].tasks[0].logs, []
        except JobspecError as exc:
            return None, exc.lines()

    assert logs("max_files = 2\n max_file_size = 5") == (LogConfig(2, 5), [])
    assert logs("disabled = true") == (LogConfig(disabled=True), [])
    assert logs("")[0] == LogConfig(10, 10, False)  # Nomad's defaults
    _, problems = logs("max_files = 0")
    assert any("logs.max_files" in p and "at least 1" in p for p in problems), problems
    _, problems = logs("max_file_size = 0")
    assert any("logs.max_file_size" in p for p in problems), problems
    _, problems = logs('max_size = "1"')
    assert any("logs.max_size" in p for p in problems), problems


def test_api_json_zero_values_of_unimplemented_fields_do_not_warn() -> None:
    # Go writes every unset field as its zero value; the seed's JSON carries many of them.
    parsed = load_jobspec(SPECS / "pause-container-example.json")
    assert parsed.warnings == ()


# --- rejections -------------------------------------------------------------------------------------------

_BASE = """
job "t" {
  group "g" {
    count = 1
    network {
      mode = "bridge"
      port "www" {
        to = 8080
      }
    }
    task "web" {
      driver = "docker"
      kill_signal = "SIGTERM"
      kill_timeout = "5s"
      config {
        image = "fieldlab/busybox:latest"
        ports = ["www"]
      }
      template {
        data = "x"
        destination = "local/x"
        change_mode = "restart"
      }
    }
  }
}
"""
_T = "job.t.group.g.task.web"


def _mutated(old: str, new: str) -> str:
    assert old in _BASE, old
    return _BASE.replace(old, new, 1)


def test_the_base_of_the_rejection_cases_is_valid() -> None:
    assert _parse(_BASE).warnings == ()


@pytest.mark.parametrize(
    ("old", "new", "path", "reason"),
    [
        (
            'driver = "docker"',
            'driver = "java"',
            f"{_T}.driver",
            'driver "java" is not run by fieldlab-agent: it runs docker, exec, raw_exec',
        ),
        (
            'change_mode = "restart"',
            'change_mode = "reload"',
            f"{_T}.template[0].change_mode",
            '"reload" is not one of "noop", "signal", "restart", "script"',
        ),
        (
            'change_mode = "restart"',
            'change_mode = "signal"',
            f"{_T}.template[0].change_signal",
            'required with change_mode "signal"',
        ),
        (
            'change_mode = "restart"',
            'change_mode = "script"',
            f"{_T}.template[0].change_script",
            'required with change_mode "script"',
        ),
        ("count = 1", "count = -1", "job.t.group.g.count", "must not be negative"),
        ("to = 8080", "to = -2", "job.t.group.g.network.port.www.to", "-2 is not a port number"),
        ("to = 8080", "to = 65536", "job.t.group.g.network.port.www.to", "65536 is not a port number"),
        (
            "to = 8080",
            "static = 70000",
            "job.t.group.g.network.port.www.static",
            "70000 is not a port number",
        ),
        ('ports = ["www"]', 'ports = ["www", "http"]', f"{_T}.config.ports[1]", 'port "http" is not defined'),
        ('mode = "bridge"', 'mode = "overlay"', "job.t.group.g.network.mode", '"overlay" is not one of'),
        ('mode = "bridge"', 'mode = "cni/"', "job.t.group.g.network.mode", "cni/<name> names a CNI network"),
        (
            'mode = "bridge"',
            'mode = "cni/a b"',
            "job.t.group.g.network.mode",
            "cni/<name> names a CNI network",
        ),
        (
            'image = "fieldlab/busybox:latest"',
            'command = "httpd"',
            f"{_T}.config.image",
            "required",
        ),
        ('image = "fieldlab/busybox:latest"', 'image = ""', f"{_T}.config.image", "must not be empty"),
        (
            'destination = "local/x"',
            'destination = "/etc/passwd"',
            f"{_T}.template[0].destination",
            "is an absolute path",
        ),
        (
            'destination = "local/x"',
            'destination = "local/../../x"',
            f"{_T}.template[0].destination",
            "leaves the task dir",
        ),
        (
            'destination = "local/x"',
            'destination = "../web/local/x"',  # another task's dir: not this sandbox's
            f"{_T}.template[0].destination",
            "leaves the task dir",
        ),
        (
            'destination = "local/x"',
            'destination = "local/"',
            f"{_T}.template[0].destination",
            "names a directory",
        ),
        (
            'destination = "local/x"',
            'destination = "../alloc"',
            f"{_T}.template[0].destination",
            "names a directory",
        ),
        ('destination = "local/x"', 'source = "x"', f"{_T}.template[0].destination", "required"),
        ('data = "x"', 'perms = "0644"', f"{_T}.template[0]", 'needs "data" or "source"'),
        ('data = "x"', 'data = "x"\nsource = "y"', f"{_T}.template[0]", 'either "data" or "source"'),
        ('data = "x"', 'data = "x"\nperms = "rw"', f"{_T}.template[0].perms", "not octal file permissions"),
        (
            'kill_signal = "SIGTERM"',
            'kill_signal = "SIGBOGUS"',
            f"{_T}.kill_signal",
            '"SIGBOGUS" is not a signal',
        ),
        ('kill_signal = "SIGTERM"', 'kill_signal = "HUP"', f"{_T}.kill_signal", 'did you mean "SIGHUP"?'),
        (
            'change_mode = "restart"',
            'change_mode = "signal"\nchange_signal = "sighup"',
            f"{_T}.template[0].change_signal",
            '"sighup" is not a signal name (did you mean "SIGHUP"?)',
        ),
        ('kill_timeout = "5s"', 'kill_timeout = "5 sec"', f"{_T}.kill_timeout", 'invalid duration "5 sec"'),
        ('kill_timeout = "5s"', "kill_timeout = 5", f"{_T}.kill_timeout", 'expected a duration like "20s"'),
        ('kill_timeout = "5s"', 'kill_timeout = "-5s"', f"{_T}.kill_timeout", "must not be negative"),
        ('kill_timeout = "5s"', 'kill_timout = "5s"', f"{_T}.kill_timout", 'did you mean "kill_timeout"?'),
        ("count = 1", 'colour = "blue"', "job.t.group.g.colour", "not a Nomad jobspec field"),
        (
            'image = "fieldlab/busybox:latest"',
            "image = var.image",
            f"{_T}.config.image",
            'unknown variable "var.image"',
        ),
        ('data = "x"', 'data = "${var.x}"', f"{_T}.template[0].data", 'unknown variable "var.x"'),
        ('data = "x"', 'data = "${file("x")}"', f"{_T}.template[0].data", "not read from a file"),
        ("count = 1", 'count = "many"', "job.t.group.g.count", 'expected a whole number, not "many"'),
        ("count = 1", "count = 1\ncount = 2", "job.t.group.g.count", "set more than once"),
        ('ports = ["www"]', 'ports = "www"', f"{_T}.config.ports", "expected a list of strings"),
        (
            'port "www" {',
            'port " " {',
            "job.t.group.g.network.port. ",
            "a port label must be 1 to 128 characters",
        ),
        ('task "web" {', 'task "a/b" {', "job.t.group.g.task.a/b", 'task name "a/b" must be'),
        (
            'mode = "bridge"',
            'mode = "none"',
            "job.t.group.g.network.port",
            'ports need network mode "bridge"',
        ),
        (
            'kill_signal = "SIGTERM"',
            'kill_signal = "SIGTERM"\nvault {\npolicies = ["job", "root"]\n}',
            f"{_T}.vault.policies[1]",
            "'root' cannot be a task's policy",
        ),
        (
            'kill_signal = "SIGTERM"',
            'kill_signal = "SIGTERM"\nvault {\npolicies = ["job"]\nchange_mode = "signal"\n}',
            f"{_T}.vault.change_signal",
            'required with change_mode = "signal"',
        ),
    ],
)
def test_invalid_values_are_rejected_with_path_and_reason(old: str, new: str, path: str, reason: str) -> None:
    problems = _problems(_mutated(old, new))
    assert any(p == path and reason in r for p, r in problems), problems


def test_a_vault_block_gives_the_task_its_policies_without_a_warning() -> None:
    parsed = _parse(
        _mutated(
            'kill_signal = "SIGTERM"',
            'kill_signal = "SIGTERM"\nvault {\npolicies = ["fieldlab-job-probe"]\n'
            'change_mode = "signal"\nchange_signal = "SIGHUP"\nenv = false\ndisable_file = true\n}',
        )
    )
    assert parsed.warnings == ()
    (task,) = parsed.job.groups[0].tasks
    assert task.vault == Vault(
        policies=("fieldlab-job-probe",), change_mode="signal", change_signal="SIGHUP", env=False, file=False
    )
    plain = _parse(
        _mutated('kill_signal = "SIGTERM"', 'kill_signal = "SIGTERM"\nvault {\npolicies = ["a"]\n}')
    )
    assert plain.job.groups[0].tasks[0].vault == Vault(policies=("a",))  # restart, env and file by default


def test_duplicate_task_names_are_rejected() -> None:
    text = _mutated(
        '    task "web" {',
        '    task "web" {\n      driver = "exec"\n      config {\n'
        '        command = "/bin/true"\n      }\n    }\n    task "web" {',
    )
    assert (f"{_T}", 'duplicate task name "web"') in _problems(text)


def test_exec_without_a_command_is_rejected() -> None:
    text = _mutated('driver = "docker"', 'driver = "exec"').replace('ports = ["www"]', "")
    assert _problems(text) == [
        (f"{_T}.config.image", "not a config field of Nomad's exec driver"),
        (f"{_T}.config.command", "required"),
    ]


def test_all_problems_are_reported_at_once() -> None:
    with pytest.raises(JobspecError) as info:
        load_jobspec(SPECS / "bad-values.hcl")
    paths = [p for p, _ in info.value.problems]
    assert paths == [
        "job.bad.colour",
        "job.bad.type",
        "job.bad.group.web.count",
        "job.bad.group.web.network.mode",
        "job.bad.group.web.network.port.www.to",
        "job.bad.group.web.task.http.config.image",
        "job.bad.group.web.task.http.config.ports[0]",
        "job.bad.group.web.task.http.kill_timeout",
        "job.bad.group.web.task.http.kill_signal",
        "job.bad.group.web.task.http.template[0].destination",
        "job.bad.group.web.task.http.template[0].change_mode",
        "job.bad.group.web.task.http",
        "job.bad.group.web.task.http.driver",
    ]


def test_api_json_problems_use_the_same_paths() -> None:
    with pytest.raises(JobspecError) as info:
        load_jobspec(SPECS / "bad-api.json")
    assert [p for p, _ in info.value.problems] == [
        "job.bad-api.Colour",
        "job.bad-api.group.web.network.port.www.static",
        "job.bad-api.group.web.task.http.config.command",
        "job.bad-api.group.web.task.http.kill_timeout",
        "job.bad-api.group.web.task.http.template[0].change_signal",
    ]


def test_services_and_checks_are_validated_against_the_groups_ports() -> None:
    text = _mutated(
        '    task "web" {',
        """    service {
      name = "web_app"
      port = "nope"
      check {
        type = "http"
        interval = "500ms"
      }
      check {
        type = "script"
        command = "/bin/check"
        interval = "10s"
        timeout = "2s"
      }
    }
    task "web" {""",
    )
    s = "job.t.group.g.service[0]"
    assert _problems(text) == [
        (f"{s}.name", '"web_app" is not a valid service name (letters, digits and dashes, at most 63)'),
        (f"{s}.port", 'port "nope" is not defined in the group\'s network'),
        (f"{s}.check[0].path", "required for http checks"),
        (f"{s}.check[0].timeout", "required"),
        (f"{s}.check[0].interval", "must be at least 1s"),
        (
            f"{s}.check[1]",
            'Service [g]->web_app or Check service: "web_app" check must specify task parameter',
        ),
    ]


def test_restart_policy_is_checked_like_nomad_and_defaults_follow_the_job_type() -> None:
    text = _mutated(
        "    count = 1", '    count = 1\n    restart {\n      attempts = 40\n      delay = "1m"\n    }'
    )
    assert _problems(text) == [
        ("job.t.group.g.restart", "40 attempts with a delay of 60s do not fit in an interval of 1800s")
    ]
    batch = _parse(_BASE.replace('job "t" {', 'job "t" {\n  type = "batch"'))
    assert batch.job.groups[0].restart == RestartPolicy(attempts=3, interval=86400.0, delay=15.0, mode="fail")
    exec_task = _parse(_BASE.replace('kill_signal = "SIGTERM"', "")).job.groups[0].tasks[0]
    assert (
        exec_task.kill_signal == ""
    )  # unset: the driver's default at the stop (taskdecisions.plan_kill_signal)


@pytest.mark.parametrize(
    ("job_type", "attempts", "interval"),
    [("service", 2, 1800.0), ("system", 2, 1800.0), ("batch", 3, 86400.0), ("sysbatch", 3, 86400.0)],
)
def test_restart_defaults_per_job_type_are_nomads_and_fill_what_a_block_leaves_out(
    job_type: str, attempts: int, interval: float
) -> None:
    """Nomad's restart block docs: batch 3 attempts in 24h, service and system 2 in 30m, both a 15s
    delay and mode "fail"; its API's Canonicalize gives sysbatch the batch defaults."""
    typed = _BASE.replace('job "t" {', f'job "t" {{\n  type = "{job_type}"')
    default = RestartPolicy(attempts=attempts, interval=interval, delay=15.0, mode="fail")
    assert _parse(typed).job.groups[0].restart == default
    partial = typed.replace("    count = 1", "    count = 1\n    restart {\n      attempts = 0\n    }")
    assert _parse(partial).job.groups[0].restart == dataclasses.replace(default, attempts=0)


def test_implemented_config_fields_are_stored_normalised_and_the_rest_as_written() -> None:
    text = _mutated('ports = ["www"]', 'ports = ["www"]\nargs = ["-p", 8080]\nauth {\n  username = "u"\n}')
    parsed = _parse(text)
    config = parsed.job.groups[0].tasks[0].config
    assert config["args"] == ["-p", "8080"]
    assert config["auth"] == [{"username": "u"}]  # a block, as Nomad's API JSON writes it
    assert parsed.warnings == ()


def test_hcl_strings_are_normalised() -> None:
    text = (
        _mutated(
            'data = "x"',
            'data = <<EOT\n  "quoted" \\n $${escaped} ${NOMAD_TASK_DIR}\nEOT\nperms = "600"',
        )
        .replace(
            "kill_timeout",
            'env = { "A.B" = "c", N = 3, T = true }\n      kill_timeout',
        )
        .replace('destination = "local/x"', 'destination = "${NOMAD_SECRETS_DIR}/x.pem"')
    )
    task = _parse(text).job.groups[0].tasks[0]
    (template,) = task.templates
    assert (
        template.data == '  "quoted" \\n ${escaped} ${NOMAD_TASK_DIR}\n'
    )  # heredoc: no escapes, final newline
    assert (template.destination, template.perms) == ("secrets/x.pem", "0600")
    assert dict(task.env) == {"A.B": "c", "N": "3", "T": "true"}


def test_json_syntax_errors_and_duplicate_keys_are_rejected() -> None:
    ((path, reason),) = _problems('{"Job": {"ID": "x",}}')
    assert path == "" and reason.startswith("JSON syntax error at line 1, column 20")
    ((_, reason),) = _problems('{"Job": {"ID": "x", "ID": "y"}}')
    assert "the key 'ID' appears twice" in reason
    ((_, reason),) = _problems("[1]", fmt="json")
    assert "a JSON jobspec is an object" in reason


def test_a_vault_block_without_policies_is_kept_empty_and_warned_unless_the_task_has_an_identity() -> None:
    block = 'kill_signal = "SIGTERM"\nvault {\nchange_mode = "noop"\n}'
    parsed = _parse(_mutated('kill_signal = "SIGTERM"', block))
    task = parsed.job.groups[0].tasks[0]
    # As Nomad's job keeps it: the token role asks for Vault's default at derivation (vaultlogin).
    assert task.vault is not None and task.vault.policies == ()
    assert token_role_policies(task.vault) == ("default",)
    assert any("JWT role" in w and w.startswith(f"{_T}.vault:") for w in parsed.warnings)
    with_identity = block + '\nidentity {\nname = "vault_default"\naud = ["vault.io"]\n}'
    parsed = _parse(_mutated('kill_signal = "SIGTERM"', with_identity))
    assert not any(w.startswith(f"{_T}.vault") for w in parsed.warnings), parsed.warnings


def test_hcl_arithmetic_is_evaluated_as_nomad_does() -> None:
    assert _parse(_mutated("count = 1", "count = 1 + 1")).job.groups[0].count == 2


def test_a_jobspec_needs_one_job_with_a_group_and_a_task() -> None:
    assert _problems('variable "x" {}') == [
        ("", 'variable "x": no value given; set it with -var x=... or a default')
    ]
    assert _problems('variable "x" { default = 1 }') == [("job", "required: one job block")]
    assert _problems('job "a" {}') == [("job.a.group", "required: at least one group")]
    assert _problems('job "a" {\n  group "g" {}\n}') == [
        ("job.a.group.g.task", "required: at least one task")
    ]


# --- errors are messages, not tracebacks --------------------------------------------------------------------


def test_error_message_names_the_source_one_line_per_problem_and_no_traceback() -> None:
    path = SPECS / "bad-syntax.hcl"
    with pytest.raises(JobspecError) as info:
        load_jobspec(path)
    err = info.value
    assert isinstance(err, AgentError)
    assert err.source == str(path)
    assert (
        str(err) == f'{path}: HCL syntax error at line 11, column 1: unexpected end of input; expected "}}"'
    )
    with pytest.raises(JobspecError) as info:
        load_jobspec(SPECS / "bad-values.hcl")
    lines = str(info.value).splitlines()
    assert len(lines) == len(info.value.problems) == 13
    assert all(line.startswith(f"{SPECS / 'bad-values.hcl'}: job.bad") for line in lines)
    assert "Traceback" not in str(info.value) and "lark" not in str(info.value)
    assert f"{SPECS / 'bad-values.hcl'}: job.bad.group.web.task.http.config.image: required" in lines


@settings(max_examples=60, deadline=None)
@given(
    start=st.integers(min_value=0, max_value=len(_BASE)), cut=st.integers(0, 12), insert=st.text(max_size=3)
)
def test_damaged_jobspecs_raise_only_jobspec_errors(start: int, cut: int, insert: str) -> None:
    text = _BASE[:start] + insert + _BASE[start + cut :]
    try:
        _parse(text)
    except JobspecError as e:
        assert e.problems and all("\n" not in line for line in e.lines())


def test_unreadable_file_is_a_jobspec_error_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "nope.hcl"
    with pytest.raises(JobspecError) as info:
        load_jobspec(missing)
    assert str(info.value) == f"{missing}: cannot read the jobspec: No such file or directory"


# --- durations ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("20s", 20.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        ("1.5h", 5400.0),
        ("0", 0.0),
        ("-5s", -5.0),
        ("1m0.5s", 60.5),
        ("10us", 0.00001),
        ("3ns", 3e-9),
    ],
)
def test_parse_duration_reads_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5", "5x", "s", "1h 30m", "h1", "1.2.3s", "--1s"])
def test_parse_duration_rejects_what_go_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


@given(
    h=st.integers(min_value=0, max_value=10_000),
    m=st.integers(min_value=0, max_value=10_000),
    s=st.integers(min_value=0, max_value=10_000),
    ms=st.integers(min_value=0, max_value=999),
)
def test_parse_duration_is_the_arithmetic_of_its_parts(h: int, m: int, s: int, ms: int) -> None:
    assert parse_duration(f"{h}h{m}m{s}s") == h * 3600 + m * 60 + s
    assert parse_duration(f"{h}h{m}m{s}s{ms}ms") == ((h * 3600 + m * 60 + s) * 1000 + ms) / 1000


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("alloc/shared.conf", "alloc/shared.conf"),
        ("${NOMAD_ALLOC_DIR}/shared.conf", "alloc/shared.conf"),
        ("${NOMAD_TASK_DIR}/x", "local/x"),
        ("${NOMAD_SECRETS_DIR}/x", "secrets/x"),
    ],
)
def test_template_destinations_in_nomads_sandbox_are_accepted(given: str, stored: str) -> None:
    """Nomad's default template sandbox is the task dir plus the alloc's shared alloc/ dir."""
    job = _parse(_BASE.replace('destination = "local/x"', f'destination = "{given}"')).job
    assert job.groups[0].tasks[0].templates[0].destination == stored


@pytest.mark.parametrize(
    ("destination", "kept"),
    [
        ("template.out", "template.out"),  # the task dir's root, as Nomad takes it
        ("usr/local/bin/app.sh", "usr/local/bin/app.sh"),
        ("../alloc/template.out", "alloc/template.out"),
        ("${NOMAD_ALLOC_DIR}/config.env", "alloc/config.env"),
        ("${NOMAD_TASK_DIR}/x.env", "local/x.env"),
        ("${NOMAD_LOCAL_DIR}/x.env", "${NOMAD_LOCAL_DIR}/x.env"),  # not a Nomad variable: a dir name
        ("local/./a//b.conf", "local/a/b.conf"),
    ],
)
def test_template_destinations_nomad_takes_are_taken(destination: str, kept: str) -> None:
    text = _one_exec_task(f'template {{\n data = "x"\n destination = "{destination}"\n }}')
    assert _parse(text).job.groups[0].tasks[0].templates[0].destination == kept


def test_shutdown_delay_is_read_on_the_group_and_the_task() -> None:
    text = """
job "j" {
  group "g" {
    shutdown_delay = "10s"
    task "t" {
      driver         = "exec"
      shutdown_delay = "2.5s"
      config { command = "/bin/true" }
    }
  }
}
"""
    group = _parse(text).job.groups[0]
    assert (group.shutdown_delay, group.tasks[0].shutdown_delay) == (10.0, 2.5)
    assert not _parse(text).warnings  # implemented: no "accepted but not implemented"
    with pytest.raises(JobspecError, match="shutdown_delay"):
        _parse(text.replace('"10s"', '"soon"'))


def test_an_api_job_whose_group_has_an_empty_tasks_list_is_refused() -> None:
    """Nomad's TaskGroup.Validate: "Missing tasks for task group"; the API form `"Tasks": []` was taken
    (validate answered no errors, register placed an alloc of no task) while HCL's was refused."""
    job = {
        "Job": {
            "ID": "empty",
            "Name": "empty",
            "TaskGroups": [{"Name": "g", "Count": 1, "Tasks": []}],
        }
    }
    with pytest.raises(JobspecError) as info:
        parse_jobspec(json.dumps(job), source="empty.json", fmt="json")
    assert ("job.empty.group.g.task", "required: at least one task") in info.value.problems
