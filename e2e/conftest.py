"""Fixtures shared by the suites: the lab to test (`--lab` or LAB) read from its inventory."""

from __future__ import annotations

import os

import pytest

from e2e.harness.cluster import Cluster, load_cluster


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lab", default=os.environ.get("LAB", "default"), help="lab to run against")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.e2e)


@pytest.fixture(scope="session")
def cluster(request: pytest.FixtureRequest) -> Cluster:
    lab = request.config.getoption("--lab")
    try:
        return load_cluster(lab)
    except FileNotFoundError as exc:
        pytest.fail(str(exc), pytrace=False)
