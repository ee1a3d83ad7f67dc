"""openbao on server1: the server is initialized and unsealed and answers on its API from the
controller; the root token (kept on the controller only, 0600) works; the unseal keys on the server
are root's alone; an explicit restart of the server and a reboot of the node both end unsealed with no
one's help (the openbao-unseal unit), with the data still there."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest
import requests
from verifylib import hostvars, reboot, sh

from lab.waits import wait_until

UNSEAL_TIMEOUT = 90  # the unseal unit waits up to 120 s for the API; it answers within seconds here


@pytest.fixture(scope="module")
def api(server: Any) -> str:
    return f"http://{hostvars(server)['ansible_host']}:8200/v1"


@pytest.fixture(scope="module")
def init_file(server: Any) -> Path:
    return Path(hostvars(server)["fieldlab_secrets_dir"]) / "openbao-init.json"


@pytest.fixture(scope="module")
def root_token(init_file: Path) -> str:
    return str(json.loads(init_file.read_text())["root_token"])


def seal_status(api: str) -> dict[str, Any]:
    reply = requests.get(f"{api}/sys/seal-status", timeout=5)
    reply.raise_for_status()
    return dict(reply.json())


def wait_unsealed(api: str, what: str) -> dict[str, Any]:
    def unsealed() -> tuple[dict[str, Any] | None, str]:
        try:
            status = seal_status(api)
        except requests.RequestException as exc:
            return None, f"no answer: {exc}"
        return (status if not status["sealed"] else None), f"sealed, progress {status.get('progress')}"

    status: dict[str, Any] = wait_until(unsealed, timeout=UNSEAL_TIMEOUT, interval=0.5, what=what)
    return status


def unseal_log(server: Any, since: str) -> list[str]:
    """What the openbao-unseal unit said since `since` (a journalctl --since value)."""
    out = sh(server, f"journalctl -u openbao-unseal.service --since '{since}' -o cat --no-pager")
    return out.splitlines()


def test_the_server_is_initialized_unsealed_and_answers_from_the_controller(api: str) -> None:
    status = seal_status(api)
    assert status["initialized"] and not status["sealed"], status
    assert (status["t"], status["n"]) == (2, 3), "threshold 2 of 3 key shares"
    health = requests.get(f"{api}/sys/health", timeout=5)
    assert health.status_code == 200, f"sys/health: {health.status_code} {health.text}"


def test_the_root_token_works_and_is_kept_on_the_controller_only(
    api: str, init_file: Path, root_token: str
) -> None:
    assert stat.S_IMODE(init_file.stat().st_mode) == 0o600
    assert init_file.stat().st_uid == os.getuid()
    me = requests.get(f"{api}/auth/token/lookup-self", headers={"X-Vault-Token": root_token}, timeout=5)
    assert me.status_code == 200 and me.json()["data"]["policies"] == ["root"], me.status_code


def test_the_unseal_keys_on_the_server_are_roots_alone_and_the_units_enabled(server: Any) -> None:
    assert sh(server, "stat -c '%a %U' /etc/openbao/unseal-keys").strip() == "600 root"
    enabled = sh(server, "systemctl is-enabled openbao.service openbao-unseal.service").split()
    assert enabled == ["enabled", "enabled"]


def test_a_restart_of_the_server_ends_unsealed_by_itself(server: Any, api: str, root_token: str) -> None:
    since = sh(server, "date '+%Y-%m-%d %H:%M:%S'").strip()
    pid = sh(server, "systemctl show -P MainPID openbao").strip()
    sh(server, "systemctl restart openbao")
    assert sh(server, "systemctl show -P MainPID openbao").strip() != pid, "openbao did not restart"
    wait_unsealed(api, "OpenBao to unseal itself after `systemctl restart openbao`")
    assert "openbao-unseal: unsealed" in unseal_log(server, since), "the unseal unit did not unseal it"
    me = requests.get(f"{api}/auth/token/lookup-self", headers={"X-Vault-Token": root_token}, timeout=5)
    assert me.status_code == 200


def test_a_reboot_ends_unsealed_by_itself_with_the_data_kept(server: Any, api: str, root_token: str) -> None:
    reboot(server)
    wait_unsealed(api, "OpenBao to unseal itself after the reboot")
    unit = sh(server, "systemctl show -p Result -p ActiveState --value openbao-unseal.service").split()
    assert sorted(unit) == ["active", "success"], f"openbao-unseal.service after the boot: {unit}"
    assert "openbao-unseal: unsealed" in sh(server, "journalctl -b -u openbao-unseal -o cat --no-pager")
    me = requests.get(f"{api}/auth/token/lookup-self", headers={"X-Vault-Token": root_token}, timeout=5)
    assert me.status_code == 200, "the root token is gone: the storage did not survive the reboot"
