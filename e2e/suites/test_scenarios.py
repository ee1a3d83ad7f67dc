"""Field-bug scenarios as data (e2e/scenarios/<bug>.yml): each file's steps then its checks.

Narrative: a scenario replays a Nomad bug report on the lab: its jobspec as the report gives it (the
report's images mapped to the lab's), the report's steps as harness faults (agent restarts, reboots,
container kills, an agent down while things change under it), then the checks that show the field
symptom when the agent's fault flag puts the bug back. Run without the flag, each guards the fix.
`--scenario FILE` runs one file from anywhere (`fieldlab repro FILE`). The vocabulary:
e2e/harness/scenario.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.harness import history
from e2e.harness.cluster import Cluster
from e2e.harness.scenario import Scenario, ScenarioError, catalogue, load
from e2e.harness.scenario_steps import run_scenario

DATA = [s for s in catalogue() if s.as_data]
# A scenario whose steps wait out real clocks (a 30 s kill timeout, a reboot, the engine down) says
# so in its `nightly:` field: it runs in `make nightly` (and `make repro`), not in `make smoke`.
PARAMS = [pytest.param(s, id=s.bug, marks=[pytest.mark.nightly] if s.nightly else []) for s in DATA]


def _run(cluster: Cluster, scenario: Scenario) -> None:
    history.record(
        history.NOTE,
        f"scenario {scenario.bug}: {scenario.what}",
        file=str(scenario.path),
        flag=scenario.flag,
        link=scenario.link,
    )
    run_scenario(cluster, scenario)


@pytest.mark.destructive
@pytest.mark.parametrize("scenario", PARAMS)
def test_scenario(cluster: Cluster, scenario: Scenario) -> None:
    _run(cluster, scenario)


@pytest.mark.destructive
def test_scenario_file(cluster: Cluster, request: pytest.FixtureRequest) -> None:
    path = request.config.getoption("--scenario")
    if not path:
        pytest.skip("no --scenario FILE given (the catalogue's own files run in test_scenario)")
    try:
        scenario = load(Path(path))
    except ScenarioError as exc:
        pytest.fail(str(exc), pytrace=False)
    if scenario.python:
        pytest.fail(
            f"{path}: a scenario in Python runs its tests ({', '.join(scenario.python)})", pytrace=False
        )
    _run(cluster, scenario)
