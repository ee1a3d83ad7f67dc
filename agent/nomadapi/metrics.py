"""`GET /v1/metrics`: the agent's metrics in Nomad's two forms, from one list of plain data.

Nomad's agent answers its in-memory sink as JSON (api.MetricsSummary: Timestamp, Gauges, Points,
Counters, Samples) unless `?format=prometheus`, then Prometheus text. Names are dotted as go-metrics
keeps them (`nomad.client.allocations.running`); the Prometheus form joins them with `_`, as
Nomad's Prometheus sink does. Besides Nomad's own client gauges, this agent's (`fieldlab.agent.*`)
say what Nomad has no name for (restore time, orphan sweeps, blocking queries waiting).

The agent's counters are totals since it started. Nomad's JSON counters are samples of the last
interval (Count, Rate, Sum ...), which a total is not: in the JSON they are Gauges holding the
total; the Prometheus text declares them counters.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

PROMETHEUS_TYPE = "text/plain; version=0.0.4"
FORMATS = ("", "json", "prometheus")


@dataclass(frozen=True)
class Metric:
    name: str  # dotted, as go-metrics keys it
    kind: Literal["gauge", "counter"]
    help: str
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def prometheus_name(self) -> str:
        return self.name.replace(".", "_").replace("-", "_")


def prometheus_text(metrics: Sequence[Metric]) -> bytes:
    """Prometheus' text format: HELP and TYPE once per name, then each labelled value."""
    lines: list[str] = []
    seen: set[str] = set()
    for m in metrics:
        name = m.prometheus_name
        if name not in seen:
            seen.add(name)
            lines += [f"# HELP {name} {m.help}", f"# TYPE {name} {m.kind}"]
        labels = ",".join(f'{k}="{v}"' for k, v in sorted(m.labels.items()))
        value = f"{m.value:.3f}".rstrip("0").rstrip(".") if m.value != int(m.value) else str(int(m.value))
        lines.append(f"{name}{{{labels}}} {value}" if labels else f"{name} {value}")
    return ("\n".join(lines) + "\n").encode()


def summary_json(metrics: Sequence[Metric], now: float | None = None) -> bytes:
    """Nomad's api.MetricsSummary: every metric a gauge (see the module's note on counters)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S +0000 UTC", time.gmtime(time.time() if now is None else now))
    gauges: list[dict[str, Any]] = [
        {"Name": m.name, "Value": m.value, "Labels": dict(m.labels)} for m in metrics
    ]
    body = {"Timestamp": stamp, "Gauges": gauges, "Points": [], "Counters": [], "Samples": []}
    return json.dumps(body).encode()


def render(metrics: Sequence[Metric], fmt: str) -> tuple[int, str, bytes]:
    """The answer for `?format=` (absent or json: JSON; prometheus: text), as Nomad's agent."""
    if fmt not in FORMATS:  # Nomad's agent answers JSON to any other: said here, not guessed
        return (
            400,
            "text/plain; charset=utf-8",
            f"format={fmt[:32]!r}: json (the default) or prometheus".encode(),
        )
    if fmt == "prometheus":
        return 200, PROMETHEUS_TYPE, prometheus_text(metrics)
    return 200, "application/json", summary_json(metrics)
