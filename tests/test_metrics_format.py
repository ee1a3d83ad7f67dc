"""agent.nomadapi.metrics: one list of metrics in Nomad's two forms."""

from __future__ import annotations

import json

from agent.nomadapi.metrics import Metric, prometheus_text, render, summary_json

METRICS = [
    Metric("nomad.client.uptime", "gauge", "Seconds since start.", 12.5),
    Metric("fieldlab.agent.orphans_removed_total", "counter", "Removed, by kind.", 3, {"kind": "netns"}),
    Metric("fieldlab.agent.orphans_removed_total", "counter", "Removed, by kind.", 1, {"kind": "veth"}),
]


def test_prometheus_text_declares_each_name_once_and_labels_each_value() -> None:
    assert prometheus_text(METRICS).decode().splitlines() == [
        "# HELP nomad_client_uptime Seconds since start.",
        "# TYPE nomad_client_uptime gauge",
        "nomad_client_uptime 12.5",
        "# HELP fieldlab_agent_orphans_removed_total Removed, by kind.",
        "# TYPE fieldlab_agent_orphans_removed_total counter",
        'fieldlab_agent_orphans_removed_total{kind="netns"} 3',
        'fieldlab_agent_orphans_removed_total{kind="veth"} 1',
    ]


def test_the_json_is_nomads_metrics_summary() -> None:
    body = json.loads(summary_json(METRICS, now=0.0))
    assert body["Timestamp"] == "1970-01-01 00:00:00 +0000 UTC"
    assert body["Gauges"][1] == {
        "Name": "fieldlab.agent.orphans_removed_total",
        "Value": 3,
        "Labels": {"kind": "netns"},
    }
    assert (body["Points"], body["Counters"], body["Samples"]) == ([], [], [])


def test_render_picks_the_form_by_format_and_names_a_bad_one() -> None:
    assert render(METRICS, "")[1] == render(METRICS, "json")[1] == "application/json"
    assert render(METRICS, "prometheus")[1].startswith("text/plain; version=0.0.4")
    status, _, body = render(METRICS, "yaml")
    assert status == 400 and b"format='yaml'" in body
