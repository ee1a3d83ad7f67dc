"""Pure pieces of the lab: inventory rendering, image hash, timings, secrets files, waits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from lab import image
from lab.config import LabPaths
from lab.inventory import write_inventory
from lab.keys import ensure_ssh_key, write_secret
from lab.progress import Timings
from lab.providers.base import LabRecord, Node
from lab.waits import WaitTimeout, wait_until


def test_inventory_has_groups_addresses_and_lab_vars(tmp_path: Path) -> None:
    paths = LabPaths("t", home=tmp_path)
    paths.ensure()
    rec = LabRecord(
        "t", "docker", [Node("server1", "server", "10.1.0.10"), Node("client1", "client", "10.1.0.11")]
    )
    inv = yaml.safe_load(write_inventory(rec, paths).read_text())
    assert inv["all"]["children"]["servers"]["hosts"] == {"server1": {"ansible_host": "10.1.0.10"}}
    assert inv["all"]["children"]["clients"]["hosts"] == {"client1": {"ansible_host": "10.1.0.11"}}
    v = inv["all"]["vars"]
    assert v["ansible_ssh_private_key_file"] == str(paths.ssh_key)
    assert v["fieldlab_secrets_dir"] == str(paths.secrets_dir)
    assert "StrictHostKeyChecking=accept-new" in v["ansible_ssh_common_args"]


def test_lab_record_round_trips_and_reports_corruption(tmp_path: Path) -> None:
    paths = LabPaths("t", home=tmp_path)
    paths.ensure()
    rec = LabRecord("t", "docker", [Node("server1", "server", "10.1.0.10")], subnet="10.1.0.0/24")
    rec.save(paths)
    assert LabRecord.load(paths) == rec
    paths.lab_file.write_text("{not json")
    with pytest.raises(Exception, match="unreadable lab record"):
        LabRecord.load(paths)


def test_image_hash_changes_with_its_inputs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for f in image.IMAGE_DIR.iterdir():
        (tmp_path / f.name).write_bytes(f.read_bytes())
    monkeypatch.setattr(image, "IMAGE_DIR", tmp_path)
    before = image.input_hash()
    assert image.input_hash() == before  # stable: a second lab-up finds the cached image
    (tmp_path / "packages.txt").write_text((tmp_path / "packages.txt").read_text() + "strace\n")
    assert image.input_hash() != before
    assert "strace" in image.packages()


def test_secrets_are_written_0600(tmp_path: Path) -> None:
    p = tmp_path / "s" / "token"
    write_secret(p, b"x")
    assert p.stat().st_mode & 0o777 == 0o600
    pub = ensure_ssh_key(tmp_path / "s" / "id_ed25519", "c")
    assert pub.startswith("ssh-ed25519 ") and pub.endswith(" c")
    assert (tmp_path / "s" / "id_ed25519").stat().st_mode & 0o777 == 0o600
    assert ensure_ssh_key(tmp_path / "s" / "id_ed25519", "c") == pub  # kept, not regenerated


def test_timings_are_appended_as_json(tmp_path: Path) -> None:
    t = Timings("lab up")
    with t.phase("nodes") as ph:
        ph.detail = "3 nodes"
    with pytest.raises(RuntimeError), t.phase("provision"):
        raise RuntimeError("boom")
    out = tmp_path / "timings.json"
    t.write(out)
    t.write(out)
    runs = json.loads(out.read_text())
    assert len(runs) == 2
    assert [(p["name"], p["ok"]) for p in runs[0]["phases"]] == [("nodes", True), ("provision", False)]
    assert "FAILED" in t.table()


def test_wait_until_returns_the_value_or_says_what_it_last_saw() -> None:
    seen = iter([(None, "starting"), (None, "booting"), (42, "up")])
    assert wait_until(lambda: next(seen), timeout=5, what="answer", interval=0.01) == 42
    with pytest.raises(WaitTimeout) as exc:
        wait_until(lambda: (None, "still sealed"), timeout=0.05, what="vault unsealed", interval=0.01)
    assert "vault unsealed" in str(exc.value) and "still sealed" in str(exc.value)


def test_a_busy_handshake_is_tried_again_with_more_time_and_a_refusal_is_not(monkeypatch: Any) -> None:
    import paramiko

    from lab import ssh

    seen: list[float] = []

    def slow_twice(target: ssh.SshTarget, timeout: float = 5.0) -> Any:
        seen.append(timeout)
        if len(seen) < 3:
            raise paramiko.SSHException("No existing session")
        return "client"

    monkeypatch.setattr(ssh, "connect", slow_twice)
    target = ssh.SshTarget("light001", "127.0.0.1")
    assert ssh.connect_busy(target) == "client"
    assert seen == list(ssh.HANDSHAKE_TIMEOUTS)  # 5 s, then 15 s, then 30 s

    seen.clear()
    monkeypatch.setattr(
        ssh, "connect", lambda t, timeout=5.0: seen.append(timeout) or _raise(paramiko.SSHException("x"))
    )
    with pytest.raises(paramiko.SSHException):
        ssh.connect_busy(target)
    assert len(seen) == len(ssh.HANDSHAKE_TIMEOUTS)  # bounded: then it fails

    for final in (paramiko.AuthenticationException("bad key"), ConnectionRefusedError("refused")):
        seen.clear()
        monkeypatch.setattr(ssh, "connect", lambda t, timeout=5.0, e=final: seen.append(timeout) or _raise(e))
        with pytest.raises(type(final)):
            ssh.connect_busy(target)
        assert seen == [ssh.SSH_CONNECT_TIMEOUT]  # a refused key or port: no second try


def _raise(exc: BaseException) -> Any:
    raise exc
