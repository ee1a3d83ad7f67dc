"""A task's environment, as Nomad's taskenv builds it for a start: the client's variables (the
alloc, the task, its dirs, each port's), the job's, group's and task's meta, the task's own `env`
(each interpolated with the node and what comes before it: agent.client.taskenv), then its hooks'
variables (VAULT_ADDR, VAULT_TOKEN, NOMAD_TOKEN[_<name>]: agent.runner.interfaces.EnvHook)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from agent.client.taskenv import build_env
from agent.decide.taskdecisions import (
    plan_alloc_addr_port,
    plan_interpolate_meta,
    plan_optional_meta_defaults,
    plan_task_network_address,
)
from agent.drivers.base import TASK_PATH_VARS, inside_env
from agent.runner.deps import RunnerDeps
from agent.runner.interfaces import AllocHost, EnvHook
from agent.structs.model import Task

_ENV_UNSAFE = re.compile(r"[^A-Za-z0-9_.]")


def task_env(
    ar: AllocHost, d: RunnerDeps, t: Task, task_dir: Path, hooks: Sequence[EnvHook]
) -> dict[str, str]:
    """The environment of task `t` of the alloc `ar` for its next start (or a command run in it)."""
    address = alloc_address(ar, d)
    client = {
        "NOMAD_ALLOC_ID": ar.id,
        "NOMAD_TASK_NAME": t.name,
        "NOMAD_JOB_ID": ar.job.id,
        "NOMAD_JOB_NAME": ar.job.name or ar.job.id,
        "NOMAD_GROUP_NAME": ar.group.name,
        "NOMAD_ALLOC_IP": address,
        "NOMAD_ALLOC_DIR": str(ar.alloc_dir / "alloc"),  # the shared dir (HostTaskDirs.prepare)
        # host paths, as raw_exec sees them; exec and docker see /local and /secrets (inside_env)
        "NOMAD_TASK_DIR": str(task_dir / "local"),
        "NOMAD_SECRETS_DIR": str(task_dir / "secrets"),
        **port_env(ar, d, address),
    }
    meta = {}
    optional = ar.job.parameterized.meta_optional if ar.job.parameterized is not None else ()
    if ar.job.dispatched and plan_optional_meta_defaults(d.bugs):  # each starts empty
        for key in optional:
            clean = _ENV_UNSAFE.sub("_", key)
            meta[f"NOMAD_META_{clean}"] = meta[f"NOMAD_META_{clean.upper()}"] = ""
    for key, value in {**ar.job.meta, **ar.group.meta, **t.meta}.items():  # the task's wins
        clean = _ENV_UNSAFE.sub("_", key)
        meta[f"NOMAD_META_{clean}"] = meta[f"NOMAD_META_{clean.upper()}"] = value
    # Nomad's order: the client's variables, the meta, the task's env (each interpolated with
    # the node and what comes before it: agent.client.taskenv). References resolve as the task sees its
    # dirs (/local in a container or a chroot); the dirs' own variables stay host paths here:
    # each driver maps them to its view (inside_env).
    interpolate = plan_interpolate_meta(d.bugs)
    env = build_env(task_view(t, client), meta, t.env, d.node_table, interpolate_meta=interpolate)
    env.update({k: client[k] for k in TASK_PATH_VARS if k in client})
    for hook in hooks:  # VAULT_ADDR, VAULT_TOKEN, NOMAD_TOKEN[_<name>]
        env.update(hook.env())
    return env


def task_view(t: Task, env: Mapping[str, str]) -> dict[str, str]:
    """`env` as the task sees it: docker and exec tasks see their dirs at /alloc, /local and
    /secrets (their own root); a raw_exec task sees the host's paths."""
    return dict(env) if t.driver == "raw_exec" else inside_env(env)


def port_env(ar: AllocHost, d: RunnerDeps, address: str) -> dict[str, str]:
    """Each port's variables, as Nomad's taskenv builds them: the host's side (NOMAD_IP_,
    NOMAD_HOST_PORT_, NOMAD_ADDR_, NOMAD_HOST_IP_, NOMAD_HOST_ADDR_), the task's (NOMAD_PORT_) and,
    in a group network namespace (`address`: the alloc's), the alloc's (NOMAD_ALLOC_INTERFACE_,
    _IP_, _ADDR_)."""
    env: dict[str, str] = {}
    asked = {p.label: p for p in (ar.group.network.ports if ar.group.network else ())}
    host_ip = d.advertise_address
    for p in ar.rec.ports:
        label = _ENV_UNSAFE.sub("_", p.label)  # Nomad's CleanEnvVar: a dashed label is allowed
        env[f"NOMAD_PORT_{label}"] = str(p.to)
        env[f"NOMAD_HOST_PORT_{label}"] = str(p.host)
        if ip := p.host_ip or host_ip:  # a port's own host network address wins (its HostIP)
            for prefix in ("NOMAD_IP_", "NOMAD_HOST_IP_"):
                env[prefix + label] = ip
            for prefix in ("NOMAD_ADDR_", "NOMAD_HOST_ADDR_"):
                env[prefix + label] = f"[{ip}]:{p.host}" if ":" in ip else f"{ip}:{p.host}"
        if address:
            to = asked[p.label].to if p.label in asked else p.to
            env[f"NOMAD_ALLOC_INTERFACE_{label}"] = "eth0"
            env[f"NOMAD_ALLOC_IP_{label}"] = address
            port = plan_alloc_addr_port(to, p.host, d.bugs)
            env[f"NOMAD_ALLOC_ADDR_{label}"] = f"{address}:{port}"
    return env


def alloc_address(ar: AllocHost, d: RunnerDeps) -> str:
    """The alloc's address as the task's start is given it (Nomad's network status)."""
    return plan_task_network_address(ar.rec.address, ar.network_from_state, d.bugs)
