"""Script checks of a task's Consul services, and of its group's Consul services whose check names it
as `task` (Nomad's script check hook): the check's command, its `${...}` read from the task's
environment, is run inside the task through its driver (as a change script is: `TaskRunner.exec`)
every `interval`, the first at once, each with its `timeout`; exit code 0 is "passing", 1
"warning", anything else (or a command that could not run or timed out) "critical", the output or
the error as the check's output. The result goes to Consul as the TTL check the service was
registered with (agent.consul.catalog.registrations: a script check is a TTL check there), `PUT
/v1/agent/check/update/<id>`; a check with `check_restart` restarts the task as the other checks'
watcher does. Nomad runs script checks only for Consul services (a `provider = "nomad"` service
refuses them at submission); without a Consul address no service is registered, and no script is
run."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

import requests

from agent.decide.taskdecisions import CHECK_OUTPUT_LIMIT
from agent.getter.plan import interpolate
from agent.structs.model import Check, Group, Service, Task

if TYPE_CHECKING:
    from agent.consul.catalog import ConsulClient

log = logging.getLogger(__name__)
CONSUL_UPDATE_TIMEOUT = 5.0
PASSING, WARNING, CRITICAL = "passing", "warning", "critical"


@dataclass(frozen=True)
class ScriptCheck:
    check: Check
    service: Service
    group_level: bool
    consul_id: str  # the TTL check's ID in Consul


def consul_check_id(alloc_id: str, task: str, service: Service, index: int) -> str:
    """The ID Consul gives the `index`th check of a service registered without check IDs (Consul's
    AddService: "service:<service ID>", with ":<n>" counted from 1 when the service has more than
    one); the service ID is agent.consul.catalog.registrations'."""
    service_id = f"_fieldlab-{alloc_id}-{task or 'group'}-{service.name}"
    return f"service:{service_id}" + (f":{index + 1}" if len(service.checks) > 1 else "")


def script_checks(alloc_id: str, group: Group, t: Task) -> list[ScriptCheck]:
    """The script checks task `t` runs: its own Consul services', and its group's Consul services'
    that name it."""
    task = t.name
    found = [(s, False) for s in t.services] + [(s, True) for s in group.services]
    out = []
    for service, group_level in found:
        if service.provider != "consul":
            continue
        for i, c in enumerate(service.checks):
            if c.type == "script" and (not group_level or c.task == task):
                cid = consul_check_id(alloc_id, "" if group_level else task, service, i)
                out.append(ScriptCheck(c, service, group_level, cid))
    return out


def script_argv(c: Check, env: dict[str, str]) -> list[str]:
    """The command and its args with the task's `${...}` (Nomad's ReplaceEnv)."""
    return [interpolate(c.command, env), *(interpolate(a, env) for a in c.args)]


def script_status(code: int, output: str) -> tuple[str, str]:
    """Nomad's script check callback: 0 passing, 1 warning, else critical; -1 is this runner's
    "could not run" (the reason as the output)."""
    status = PASSING if code == 0 else WARNING if code == 1 else CRITICAL
    return status, output[-CHECK_OUTPUT_LIMIT:]


def update_ttl(consul: ConsulClient, check_id: str, status: str, output: str) -> str:
    """The check's new status in Consul (PUT /v1/agent/check/update/<id>): "" or why it failed."""
    url = f"{consul.address}/v1/agent/check/update/{check_id}"
    try:
        resp = requests.put(url, json={"Status": status, "Output": output}, timeout=CONSUL_UPDATE_TIMEOUT)
    except requests.RequestException as exc:
        return f"consul {url}: {exc}"
    if resp.status_code != 200:
        return f"consul {url}: HTTP {resp.status_code}: {resp.text.strip()[:200]}"
    return ""
