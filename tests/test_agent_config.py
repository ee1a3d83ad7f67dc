"""The agent's config file: every invalid value is named with its file and key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.cli import main
from agent.command.config import load_config
from agent.errors import ConfigError


def _cfg(tmp_path: Path, data: Any) -> Path:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return p


def test_full_config_loads_typed(tmp_path: Path) -> None:
    p = _cfg(
        tmp_path,
        {
            "node_name": "client1",
            "port": 4646,
            "data_dir": "/var/lib/x",
            "log_level": "DEBUG",
            "tls": {"cert_file": "/a.crt", "key_file": "/a.key", "ca_file": "/ca.pem"},
            "vault": {"address": "http://10.0.0.1:8200", "approle_file": "/etc/x/approle.json"},
            "consul_address": "",
            "cni_plugin_dir": "/usr/lib/cni",
        },
    )
    c = load_config(p)
    assert c.node_name == "client1" and c.port == 4646 and c.log_level == "DEBUG"
    assert c.tls is not None and str(c.tls.ca_file) == "/ca.pem"
    assert c.vault.address == "http://10.0.0.1:8200" and str(c.vault.approle_file) == "/etc/x/approle.json"


@pytest.mark.parametrize(
    ("data", "where"),
    [
        ({}, "node_name: required"),
        ({"node_name": "c", "port": 70000}, "port: 70000 is not a TCP port"),
        ({"node_name": "c", "port": "4646"}, "port: '4646' is not a TCP port"),
        ({"node_name": "c", "bogus": 1}, "bogus: unknown key"),
        ({"node_name": "c", "tls": {"cert_file": "/a"}}, "tls.key_file: required"),
        (
            {"node_name": "c", "tls": {"cert_file": "/a", "key_file": "/b", "ca_file": "/c", "x": 1}},
            "tls.x: unknown key",
        ),
        (
            {"node_name": "c", "vault": {"address": "10.0.0.1:8200"}},
            "vault.address: '10.0.0.1:8200' is not an http(s) URL",
        ),
        ({"node_name": "c", "data_dir": "relative"}, "data_dir: must be an absolute path"),
        ({"node_name": "c", "log_level": "LOUD"}, "log_level: 'LOUD': choose one of"),
        ("[1, 2]", "must be a JSON object"),
        ("{nope", "unreadable"),
    ],
)
def test_invalid_config_names_file_and_key(tmp_path: Path, data: Any, where: str) -> None:
    p = _cfg(tmp_path, data)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert str(exc.value).startswith(str(p))
    assert where in str(exc.value)


def test_check_config_command_reports_errors_without_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = _cfg(tmp_path, {"node_name": "c", "port": 0})
    assert main(["--config", str(p), "check-config"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("fieldlab-agent: error: ") and "port: 0 is not a TCP port" in err
    assert "Traceback" not in err
    assert main(["--config", str(tmp_path / "missing.json"), "check-config"]) == 2
    assert "no such config file" in capsys.readouterr().err
