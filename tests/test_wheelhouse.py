"""The wheelhouse's archive (lab/wheelhouse.py): what the fieldlab_agent role unpacks on a node in one
transfer. The wheelhouse itself (pip wheel) is built for real by every lab-up and molecule run."""

from __future__ import annotations

import tarfile
from pathlib import Path

from lab import wheelhouse


def test_the_archive_holds_the_wheels_only_root_owned_and_0644_in_a_stable_order(tmp_path: Path) -> None:
    for name in ("pyyaml-6.0-cp311.whl", "fieldlab-0.1.0-py3-none-any.whl", "docker-7.2.0-py3-none-any.whl"):
        (tmp_path / name).write_bytes(name.encode() * 100)
        (tmp_path / name).chmod(0o600)
    (tmp_path / ".complete").write_text("abc\n")
    wheelhouse._archive(tmp_path)
    assert not (tmp_path / (wheelhouse.ARCHIVE + ".part")).exists()
    with tarfile.open(tmp_path / wheelhouse.ARCHIVE) as tar:
        members = tar.getmembers()
        assert [m.name for m in members] == [
            "docker-7.2.0-py3-none-any.whl",
            "fieldlab-0.1.0-py3-none-any.whl",
            "pyyaml-6.0-cp311.whl",
        ]
        assert {(m.uid, m.gid, m.uname, m.gname, m.mode) for m in members} == {(0, 0, "root", "root", 0o644)}
        for m in members:
            fh = tar.extractfile(m)
            assert fh is not None and fh.read() == (tmp_path / m.name).read_bytes()
