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


# What portmap and bridge 1.1.1 write, as iptables-save prints it: rules with and without a quoted
# comment (the only arguments the save quotes).
OWNER = '--comment "name: \\"nomad\\" id: \\"abc\\""'
DNAT_OWNER = '--comment "dnat name: \\"nomad\\" id: \\"abc\\""'
MASQ, DNAT = "CNI-0123456789abcdef01234567", "CNI-DN-0123456789abcdef01234"
RULES = f"""*nat
:PREROUTING ACCEPT [0:0]
:CNI-HOSTPORT-DNAT - [0:0]
:{DNAT} - [0:0]
:{MASQ} - [0:0]
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -s 172.26.64.5/32 -m comment {OWNER} -j {MASQ}
-A {MASQ} -d 172.26.64.0/20 -m comment {OWNER} -j ACCEPT
-A CNI-HOSTPORT-DNAT -p tcp -m comment {DNAT_OWNER} -m multiport --dports 8080 -j {DNAT}
-A {DNAT} -p tcp -m tcp --dport 8080 -j DNAT --to-destination 172.26.64.5:80
COMMIT
"""


def test_a_rule_without_quotes_splits_as_the_shell_would() -> None:
    """The parse splits a rule with no quoted argument on whitespace (shlex for every line cost a
    restore of fifty allocs about 0.4 s of CPU): each rule's args are what shlex makes of its line."""
    import shlex

    table = iptables.parse_save(RULES, "nat")
    lines = [line for line in RULES.splitlines() if line.startswith("-A ")]
    assert [(r.chain, r.args) for r in table.rules] == [
        (shlex.split(line)[1], tuple(shlex.split(line)[2:])) for line in lines
    ]
    assert table.rules[1].owner == ("nomad", "abc")


def test_the_tables_index_answers_as_a_scan_and_follows_new_rules() -> None:
    table = iptables.parse_save(RULES, "nat")
    for chain in ("PREROUTING", "CNI-HOSTPORT-DNAT", DNAT, "nowhere"):
        assert table.rules_in(chain) == [r for r in table.rules if r.chain == chain]
        assert table.jumps_to(chain) == [r for r in table.rules if r.option("-j", "-g") == chain]
    assert [r.chain for r in table.jumps_to("DNAT")] == [DNAT]
    table.rules.append(iptables.Rule("nat", "OUTPUT", ("-j", "CNI-HOSTPORT-DNAT")))
    assert [r.chain for r in table.jumps_to("CNI-HOSTPORT-DNAT")] == ["PREROUTING", "OUTPUT"]
    assert table.rules_in("OUTPUT") == [table.rules[-1]]
