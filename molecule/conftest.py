"""Fixtures of the scenarios' testinfra verifiers (molecule/<role>/tests/test_*.py).

Molecule runs pytest with `--connection=ansible --ansible-inventory=<the scenario's inventory>`; these
fixtures hand a test the scenario's nodes by group (`server`, `client`). Helpers: verifylib.py.
"""

from __future__ import annotations

from typing import Any

import pytest
import testinfra
from testinfra.utils.ansible_runner import AnsibleRunner


@pytest.fixture(scope="session")
def inventory(pytestconfig: pytest.Config) -> str:
    path = pytestconfig.getoption("ansible_inventory")
    if not path:
        pytest.fail("run these tests through molecule: it passes --ansible-inventory")
    return str(path)


def _first(inventory: str, group: str) -> Any:
    names = AnsibleRunner.get_runner(inventory).get_hosts(group)
    if not names:
        pytest.fail(f"the scenario's inventory has no host in group {group}")
    return testinfra.get_host(f"ansible://{names[0]}", ansible_inventory=inventory)


@pytest.fixture(scope="session")
def server(inventory: str) -> Any:
    """The scenario's server node (group `servers`)."""
    return _first(inventory, "servers")


@pytest.fixture(scope="session")
def client(inventory: str) -> Any:
    """The scenario's client node (group `clients`)."""
    return _first(inventory, "clients")
