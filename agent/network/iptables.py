"""The iptables chains and rules the CNI plugins leave behind, found and removed.

What plugins 1.1.1 write (seen on this machine with `iptables-save`):

- bridge with `ipMasq`: nat chain `CNI-<sha512(network+container_id)[:24]>` holding the masquerade
  rules, jumped to from POSTROUTING with `-s <ip>/32`. Every rule, the jump included, carries the
  comment `name: "<network>" id: "<container_id>"`. bridge DEL with a netns that is gone returns
  success *before* tearing this chain down, so it leaks after a reboot (nomad-6385 family).
- portmap: nat chain `CNI-DN-<sha512(network+container_id)[:21]>` with the DNAT rules (no comments),
  jumped to from the shared `CNI-HOSTPORT-DNAT` with the comment `dnat name: "<network>" id: "<id>"`;
  shared chains `CNI-HOSTPORT-DNAT` (jumped to from PREROUTING and OUTPUT), `CNI-HOSTPORT-MASQ`,
  `CNI-HOSTPORT-SETMARK`.
- firewall (iptables backend): filter chain `CNI-FORWARD` (jumped to from FORWARD) with an admin chain
  jump and, per container address, `-d <ip>/32 ... RELATED,ESTABLISHED -j ACCEPT` and
  `-s <ip>/32 -j ACCEPT`, without comments: those are found by address.

Shared chains are never removed here; per-container chains are removed together with every jump to
them. Everything is idempotent: removing what is already gone is not an error.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import shlex
import subprocess
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

from agent.errors import AgentError

log = logging.getLogger(__name__)

IPTABLES_TIMEOUT = 30.0
LOCK_WAIT_SECONDS = "10"
TABLES = ("nat", "filter")
SHARED_CHAINS = frozenset(
    {"CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-MASQ", "CNI-HOSTPORT-SETMARK", "CNI-FORWARD", "CNI-ADMIN"}
)
_MAX_CHAIN = 28  # the plugins cut chain names to 28 characters
_OWNER_RE = re.compile(r'name: "(?P<network>[^"]*)" id: "(?P<container_id>[^"]*)"')
_MASQ_RE = re.compile(r"^CNI-[0-9a-f]{24}$")
_DNAT_RE = re.compile(r"^CNI-DN-[0-9a-f]{21}$")

ChainKind = Literal["masq", "dnat", "shared", "other"]


class IptablesError(AgentError):
    """An iptables command failed for a reason other than 'already gone'."""

    def __init__(self, argv: list[str], reason: str) -> None:
        self.argv = argv
        self.reason = reason
        super().__init__(f"{shlex.join(argv)}: {reason}")


@dataclass(frozen=True)
class Rule:
    """One rule as `iptables-save` prints it: `-A <chain> <args...>`."""

    table: str
    chain: str
    args: tuple[str, ...]

    def option(self, *names: str) -> str | None:
        """The value after the first of `names` in the rule, e.g. option("-s") -> "10.0.0.2/32"."""
        for i, a in enumerate(self.args[:-1]):
            if a in names:
                return self.args[i + 1]
        return None

    @cached_property
    def target(self) -> str | None:
        """The chain or target after -j/-g (read once: a restore asks it of every rule per alloc)."""
        return self.option("-j", "-g", "--jump", "--goto")

    @property
    def comment(self) -> str | None:
        return self.option("--comment")

    @property
    def owner(self) -> tuple[str, str] | None:
        """(network, container_id) from a plugin's comment, when it has one."""
        c = self.comment
        m = _OWNER_RE.search(c) if c else None
        return (m["network"], m["container_id"]) if m else None

    def text(self) -> str:
        return f"-t {self.table} -A {self.chain} {shlex.join(self.args)}"


@dataclass
class Table:
    """A table's chains (declared, built-in or user) and rules, in `iptables-save` order."""

    name: str
    chains: list[str] = field(default_factory=list)
    rules: list[Rule] = field(default_factory=list)
    # rules by chain and by target, made on the first question and again when `rules` grew: a
    # restore asks fifty allocs' questions of one table
    _index: tuple[int, dict[str, list[Rule]], dict[str | None, list[Rule]]] | None = field(
        default=None, repr=False, compare=False
    )

    def _indexed(self) -> tuple[dict[str, list[Rule]], dict[str | None, list[Rule]]]:
        if self._index is None or self._index[0] != len(self.rules):
            by_chain: dict[str, list[Rule]] = {}
            by_target: dict[str | None, list[Rule]] = {}
            for r in self.rules:
                by_chain.setdefault(r.chain, []).append(r)
                by_target.setdefault(r.target, []).append(r)
            self._index = (len(self.rules), by_chain, by_target)
        return self._index[1], self._index[2]

    def rules_in(self, chain: str) -> list[Rule]:
        return list(self._indexed()[0].get(chain, ()))

    def jumps_to(self, chain: str) -> list[Rule]:
        return list(self._indexed()[1].get(chain, ()))


@dataclass(frozen=True)
class CniChain:
    """A CNI chain and, when the plugins' comments tell, which network and container it belongs to."""

    table: str
    name: str
    kind: ChainKind
    network: str | None = None
    container_id: str | None = None


def chain_names(network: str, container_id: str) -> dict[str, str]:
    """The per-container chain names the plugins derive: {"masq": CNI-<hash>, "dnat": CNI-DN-<hash>}."""
    digest = hashlib.sha512((network + container_id).encode()).hexdigest()
    return {"masq": ("CNI-" + digest)[:_MAX_CHAIN], "dnat": ("CNI-DN-" + digest)[:_MAX_CHAIN]}


def parse_save(text: str, table: str) -> Table:
    """Parse the `-t <table>` section of `iptables-save` output."""
    out = Table(table)
    current = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*"):
            current = line[1:]
            continue
        if current != table or not line or line.startswith("#") or line == "COMMIT":
            continue
        if line.startswith(":"):
            out.chains.append(line[1:].split()[0])
        elif line.startswith("-A "):
            # only a rule with a quoted argument (a comment) needs shell-style splitting
            parts = shlex.split(line) if any(c in line for c in "\"'\\") else line.split()
            out.rules.append(Rule(table, parts[1], tuple(parts[2:])))
    return out


def _run(argv: list[str], *, check: bool = True) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=IPTABLES_TIMEOUT, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise IptablesError(argv, str(exc)) from exc
    if check and proc.returncode != 0:
        raise IptablesError(argv, proc.stderr.strip() or f"exit status {proc.returncode}")
    return proc


class _Snapshot:
    """The tables read while `one_snapshot` is open (None when it is not)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tables: dict[str, Table] | None = None


_SNAPSHOT = _Snapshot()


def read_table(table: str) -> Table:
    """The live state of one table, from `iptables-save -t <table>`; inside `one_snapshot`, the
    table as it was read first in that window (a restore verifies fifty allocs against one read;
    concurrent first readers wait for that one read)."""
    with _SNAPSHOT.lock:
        if _SNAPSHOT.tables is not None:
            if table not in _SNAPSHOT.tables:
                _SNAPSHOT.tables[table] = parse_save(_run(["iptables-save", "-t", table]).stdout, table)
            return _SNAPSHOT.tables[table]
    return parse_save(_run(["iptables-save", "-t", table]).stdout, table)


@contextlib.contextmanager
def one_snapshot() -> Iterator[None]:
    """Reads (only reads) of every thread share one `iptables-save` per table until the block ends.
    For a window in which nothing of ours changes the rules: the concurrent checks at restore."""
    with _SNAPSHOT.lock:
        _SNAPSHOT.tables = {}
    try:
        yield
    finally:
        with _SNAPSHOT.lock:
            _SNAPSHOT.tables = None


def _kind(name: str) -> ChainKind:
    if name in SHARED_CHAINS:
        return "shared"
    if _DNAT_RE.match(name):
        return "dnat"
    if _MASQ_RE.match(name):
        return "masq"
    return "other"


def _owner(tbl: Table, chain: str) -> tuple[str, str] | None:
    for rule in (*tbl.rules_in(chain), *tbl.jumps_to(chain)):
        owner = rule.owner
        if owner:
            return owner
    return None


def list_cni_chains(tables: Iterable[str] = TABLES) -> list[CniChain]:
    """Every chain named CNI-* in the given tables, with its owner where the comments tell."""
    found = []
    for t in tables:
        tbl = read_table(t)
        for name in tbl.chains:
            if not name.startswith("CNI-"):
                continue
            kind = _kind(name)
            owner = _owner(tbl, name) if kind in ("masq", "dnat") else None
            found.append(CniChain(t, name, kind, *(owner or (None, None))))
    return found


def chain_owner(table: str, chain: str) -> tuple[str, str] | None:
    """(network, container_id) a chain belongs to, from the plugins' comments; None when unknown."""
    return _owner(read_table(table), chain)


def chains_of_container(network: str, container_id: str) -> list[CniChain]:
    """The per-container chains of this container: by the plugins' comments or by the derived names."""
    names = set(chain_names(network, container_id).values())
    return [
        c
        for c in list_cni_chains()
        if c.kind in ("masq", "dnat")
        and ((c.network, c.container_id) == (network, container_id) or c.name in names)
    ]


def orphan_chains(network: str, live_container_ids: Iterable[str]) -> list[CniChain]:
    """Per-container chains of `network` that belong to no live container.

    A chain counts as this network's when a comment says so; a chain without any comment (e.g. a DN
    chain whose jump is gone) counts as an orphan when its name matches no live container's derived
    names. Chains whose comments name another network are left alone.
    """
    live = set(live_container_ids)
    live_names = {n for cid in live for n in chain_names(network, cid).values()}
    orphans = []
    for c in list_cni_chains():
        if c.kind not in ("masq", "dnat") or c.name in live_names:
            continue
        if c.network is None or (c.network == network and c.container_id not in live):
            orphans.append(c)
    return orphans


def delete_rule(rule: Rule) -> bool:
    """Delete one rule by its spec; False when it was already gone."""
    argv = ["iptables", "-w", LOCK_WAIT_SECONDS, "-t", rule.table, "-D", rule.chain, *rule.args]
    proc = _run(argv, check=False)
    if proc.returncode == 0:
        return True
    # Gone meanwhile (another cleanup, a plugin DEL): fine. Anything else is an error.
    if rule not in read_table(rule.table).rules:
        return False
    raise IptablesError(argv, proc.stderr.strip() or f"exit status {proc.returncode}")


def remove_chain(table: str, chain: str) -> list[str]:
    """Remove every jump to `chain` in `table`, then flush and delete it. Returns what was removed.

    Idempotent: a chain that does not exist (and has no jumps left) returns [].
    """
    if chain in SHARED_CHAINS or not chain.startswith("CNI-"):
        raise IptablesError(
            ["iptables", "-t", table, "-X", chain], "refusing to remove a shared or non-CNI chain"
        )
    tbl = read_table(table)
    removed = [f"jump {r.text()}" for r in tbl.jumps_to(chain) if delete_rule(r)]
    if chain in tbl.chains:
        _run(["iptables", "-w", LOCK_WAIT_SECONDS, "-t", table, "-F", chain], check=False)
        proc = _run(["iptables", "-w", LOCK_WAIT_SECONDS, "-t", table, "-X", chain], check=False)
        if proc.returncode == 0:
            removed.append(f"chain {table}/{chain}")
        elif chain in read_table(table).chains:
            raise IptablesError(["iptables", "-t", table, "-X", chain], proc.stderr.strip())
    if removed:
        log.info("removed CNI chain %s/%s (%d items)", table, chain, len(removed))
    return removed


def forward_rule_ips() -> list[str]:
    """The addresses the firewall plugin's CNI-FORWARD rules are for (they carry no owner comment)."""
    ips = set()
    for r in read_table("filter").rules_in("CNI-FORWARD"):
        addr = r.option("-s", "-d")
        if addr and addr.endswith("/32"):
            ips.add(addr.removesuffix("/32"))
    return sorted(ips)


def remove_forward_rules(ips: Iterable[str]) -> list[str]:
    """Remove the firewall plugin's CNI-FORWARD rules for these addresses (they carry no comment)."""
    targets = {ip.split("/")[0] + "/32" for ip in ips}
    if not targets:
        return []
    tbl = read_table("filter")
    removed = []
    for r in tbl.rules_in("CNI-FORWARD"):
        addr = r.option("-s", "-d")
        if addr in targets and delete_rule(r):
            removed.append(f"rule {r.text()}")
    return removed


def cleanup_container(network: str, container_id: str, ips: Iterable[str] = ()) -> list[str]:
    """Remove everything the plugins left in iptables for one container: its chains with all jumps,
    any other rule whose comment names it, and its CNI-FORWARD rules. Returns what was removed."""
    removed: list[str] = []
    for c in chains_of_container(network, container_id):
        removed += remove_chain(c.table, c.name)
    for t in TABLES:
        for r in read_table(t).rules:
            if r.owner == (network, container_id) and delete_rule(r):
                removed.append(f"rule {r.text()}")
    removed += remove_forward_rules(ips)
    return removed
