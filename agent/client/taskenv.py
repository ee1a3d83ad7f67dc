"""Runtime interpolation of a task's `${...}` references, as Nomad's client does it (its taskenv
and helper/args): a jobspec keeps `${NOMAD_ALLOC_ID}`, `${NOMAD_PORT_http}`, `${attr.kernel.name}`,
`${node.unique.name}`, `${meta.rack}` verbatim (agent.jobspec.hcl), and each start of the task
replaces them from the task's environment and the node's attributes. Pure functions.

- A reference is `${` name `}`, the name made of letters, digits, `_`, `-` and `.`; it is replaced
  by the first table that has the name, and left as it is when none has it (Nomad's ReplaceEnv).
- The environment is built in Nomad's order: the client's own variables (NOMAD_*), then the meta
  (NOMAD_META_*, interpolated with the node and those), then the task's `env` (interpolated with
  the node and everything before).
- A driver's config is interpolated with the whole environment and the node (strings inside lists
  and maps too; map keys stay as written).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from agent.decide.placement import NodeFacts

_REF = re.compile(r"\$\{[a-zA-Z0-9_\-.]+\}")


def replace_env(text: str, *tables: Mapping[str, str]) -> str:
    """`text` with each `${name}` a table has replaced by its value (the first table that has it)."""

    def one(m: re.Match[str]) -> str:
        name = m.group(0)[2:-1]
        for table in tables:
            if name in table:
                return table[name]
        return m.group(0)

    return _REF.sub(one, text)


def node_table(node: NodeFacts) -> dict[str, str]:
    """The node's values a reference can name: node.*, attr.* and meta.*."""
    out = {
        "node.unique.id": node.id,
        "node.unique.name": node.name,
        "node.datacenter": node.datacenter,
        "node.class": node.node_class,
        "node.pool": node.pool,
        "node.region": node.region,
    }
    out.update({f"attr.{k}": v for k, v in node.attributes.items()})
    out.update({f"meta.{k}": v for k, v in node.meta.items()})
    return out


def build_env(
    client: Mapping[str, str],
    meta: Mapping[str, str],
    task_env: Mapping[str, str],
    node: Mapping[str, str],
    *,
    interpolate_meta: bool = True,
) -> dict[str, str]:
    """The task's environment in Nomad's order (see the module's doc). `interpolate_meta` False is
    the nomad-10876 fault: NOMAD_META_* values keep their references."""
    env = dict(client)
    for key, value in meta.items():
        env[key] = replace_env(value, node, env) if interpolate_meta else value
    for key, value in task_env.items():
        env[key] = replace_env(value, node, env)
    return env


def interpolate_config(value: Any, env: Mapping[str, str], node: Mapping[str, str]) -> Any:
    """A driver config (or any part of it) with its strings interpolated."""
    if isinstance(value, str):
        return replace_env(value, env, node)
    if isinstance(value, list | tuple):
        return [interpolate_config(v, env, node) for v in value]
    if isinstance(value, Mapping):
        return {k: interpolate_config(v, env, node) for k, v in value.items()}
    return value
