"""Runtime interpolation of `${...}` in a task's env, meta and driver config (agent.client.taskenv), as
Nomad's helper/args.ReplaceEnv and taskenv do it."""

from __future__ import annotations

from agent.client.taskenv import build_env, interpolate_config, node_table, replace_env
from agent.decide.decisions import Bugs
from agent.decide.placement import NodeFacts
from agent.decide.taskdecisions import plan_interpolate_meta


def test_a_reference_is_replaced_from_the_first_table_that_has_it_and_kept_otherwise() -> None:
    env = {"NOMAD_ALLOC_ID": "a1", "NOMAD_PORT_http": "8080"}
    node = {"node.unique.name": "client1", "attr.kernel.name": "linux"}
    assert replace_env(":${NOMAD_PORT_http}", env, node) == ":8080"
    assert replace_env("${node.unique.name}-${attr.kernel.name}", env, node) == "client1-linux"
    assert replace_env("${NOPE} ${NOMAD_ALLOC_ID}", env) == "${NOPE} a1"
    assert (
        replace_env("$NOMAD_ALLOC_ID ${ NOMAD_ALLOC_ID} ${a b}", env)
        == "$NOMAD_ALLOC_ID ${ NOMAD_ALLOC_ID} ${a b}"
    )
    assert replace_env("${x}", {"x": "1"}, {"x": "2"}) == "1", "the first table wins"


def test_the_env_is_built_in_nomads_order() -> None:
    client = {"NOMAD_ALLOC_ID": "a1", "NOMAD_TASK_NAME": "web"}
    meta = {"NOMAD_META_id": "${NOMAD_ALLOC_ID}@${node.unique.name}"}
    task_env = {"SELF": "${NOMAD_META_id}/${NOMAD_TASK_NAME}", "NOMAD_TASK_NAME": "mine"}
    env = build_env(client, meta, task_env, {"node.unique.name": "client1"})
    assert env["NOMAD_META_id"] == "a1@client1"
    assert env["SELF"] == "a1@client1/web", "a task env value sees the meta and the client's variables"
    assert env["NOMAD_TASK_NAME"] == "mine", "the task's env comes last, as Nomad's"
    raw = build_env(client, meta, {}, {"node.unique.name": "client1"}, interpolate_meta=False)
    assert raw["NOMAD_META_id"] == "${NOMAD_ALLOC_ID}@${node.unique.name}"


def test_a_driver_config_is_interpolated_through_lists_and_maps_but_not_its_keys() -> None:
    config = {"args": ["-listen", ":${NOMAD_PORT_http}"], "labels": {"${k}": "${NOMAD_PORT_http}"}, "n": 3}
    out = interpolate_config(config, {"NOMAD_PORT_http": "8080", "k": "x"}, {})
    assert out == {"args": ["-listen", ":8080"], "labels": {"${k}": "8080"}, "n": 3}


def test_the_node_table_names_node_attr_and_meta() -> None:
    node = NodeFacts("id1", "client1", "dc1", attributes={"kernel.name": "linux"}, meta={"rack": "r1"})
    table = node_table(node)
    assert table["node.unique.id"] == "id1" and table["node.datacenter"] == "dc1"
    assert table["attr.kernel.name"] == "linux" and table["meta.rack"] == "r1"


def test_nomad_10876_meta_is_interpolated_unless_the_flag_is_on() -> None:
    assert plan_interpolate_meta() is True
    assert plan_interpolate_meta(Bugs(meta_not_interpolated=True)) is False
