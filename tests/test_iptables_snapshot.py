"""Inside `iptables.one_snapshot` every reader (of any thread) shares one iptables-save per table:
what lets fifty allocs be verified at restore against one read; outside it each read is live."""

from __future__ import annotations

import subprocess
import threading
from typing import Any

import pytest

from agent.network import iptables

SAVE = "*nat\n:PREROUTING ACCEPT [0:0]\n:CNI-HOSTPORT-DNAT - [0:0]\nCOMMIT\n"


def test_reads_share_one_save_inside_a_snapshot_and_none_outside(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(argv: list[str], *, check: bool = True) -> Any:
        calls.append(argv)
        return subprocess.CompletedProcess(argv, 0, SAVE, "")

    monkeypatch.setattr(iptables, "_run", fake_run)
    iptables.read_table("nat")
    iptables.read_table("nat")
    assert len(calls) == 2, "outside a snapshot every read is live"
    calls.clear()
    with iptables.one_snapshot():
        seen = []
        threads = [threading.Thread(target=lambda: seen.append(iptables.read_table("nat"))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(seen) == 8 and all("CNI-HOSTPORT-DNAT" in str(tbl.chains) for tbl in seen)
    assert len(calls) == 1, calls  # concurrent first readers wait for the one read
    calls.clear()
    iptables.read_table("nat")
    assert len(calls) == 1, "the snapshot ends with its block"
