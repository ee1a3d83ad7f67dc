"""Stale connection-tracking entries of an alloc whose network went away or moved.

portmap DNATs a host port to the alloc's address, and the kernel keeps that translation in the
conntrack entry of each flow, not in the rule: after a CNI DEL (and an ADD that gives the alloc a new
address) the entries of existing flows still point at the old address. A client that reconnects from
the same source port matches the old entry (a SYN on an ESTABLISHED or FIN_WAIT entry is let through
with the old translation) and is blackholed until the entry times out; so is a later alloc on the same
host port. portmap 1.1.1 clears UDP entries of its ports at ADD, never TCP.

`flush_stale_flows` deletes, in the netns the agent runs in (the node's, where portmap's DNAT is):
- every flow from, to or translated to one of the alloc's old addresses, and
- every TCP/UDP flow whose original destination port is one of the alloc's host ports and that was
  DNATed somewhere other than the `keep` addresses (after an ADD: the alloc's new address).
A flow to a host port that was not DNATed is left alone (it is the node's own, or a remote port that
happens to have the same number).

The choice is the pure `stale_flow` over plain `FlowEntry` tuples. The entries are read and deleted
over ctnetlink (pyroute2's `Conntrack`); only when netlink itself is unavailable (pyroute2 missing, or
the kernel refuses the socket) does it fall back to the `conntrack` CLI, and says so. It never raises:
teardown and recovery go on, and the outcome is logged and returned.
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import re
import shutil
import socket
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, NamedTuple

log = logging.getLogger(__name__)

TCP = socket.IPPROTO_TCP
UDP = socket.IPPROTO_UDP
PORT_PROTOCOLS = (TCP, UDP)
CLI_TIMEOUT = 10.0
_PROTO_NAMES = {TCP: "tcp", UDP: "udp"}


class FlowEntry(NamedTuple):
    """One conntrack entry as plain data: the original tuple (as the first packet had it) and the
    reply tuple (as the answer comes back: after DNAT its source is where the flow was sent)."""

    proto: int
    orig_src: str
    orig_dst: str
    orig_sport: int | None
    orig_dport: int | None
    reply_src: str
    reply_dst: str = ""
    reply_sport: int | None = None
    reply_dport: int | None = None

    @property
    def dnatted(self) -> bool:
        """Whether the flow was sent somewhere other than where its first packet was addressed."""
        return self.reply_src != self.orig_dst or (
            self.reply_sport is not None and self.reply_sport != self.orig_dport
        )


def _canonical(address: str) -> str | None:
    """'10.213.246.2/24' or '10.213.246.2' -> '10.213.246.2'; None for '' and what is not an address."""
    try:
        return str(ipaddress.ip_interface(address.strip()).ip) if address.strip() else None
    except ValueError:
        return None


@dataclass(frozen=True)
class FlowTarget:
    """What to clear: flows of the old `addresses`, and flows DNATed from `host_ports` to anything
    but `keep`. Build it with `FlowTarget.of` (which normalises addresses and drops blanks)."""

    addresses: frozenset[str] = frozenset()
    host_ports: frozenset[int] = frozenset()
    keep: frozenset[str] = frozenset()

    @classmethod
    def of(
        cls, addresses: Iterable[str] = (), host_ports: Iterable[int] = (), keep: Iterable[str] = ()
    ) -> FlowTarget:
        def addrs(xs: Iterable[str]) -> frozenset[str]:
            return frozenset(a for a in map(_canonical, xs) if a)

        kept = addrs(keep)
        return cls(
            addresses=addrs(addresses) - kept,
            host_ports=frozenset(p for p in host_ports if 0 < p < 65536),
            keep=kept,
        )

    def __bool__(self) -> bool:
        return bool(self.addresses or self.host_ports)

    def describe(self) -> str:
        parts = []
        if self.addresses:
            parts.append("addresses " + ",".join(sorted(self.addresses)))
        if self.host_ports:
            parts.append("host ports " + ",".join(map(str, sorted(self.host_ports))))
        if self.keep:
            parts.append("keeping " + ",".join(sorted(self.keep)))
        return "; ".join(parts) or "nothing"


def stale_flow(entry: FlowEntry, target: FlowTarget) -> bool:
    """Whether the entry belongs to the alloc's old network (pure)."""
    if target.addresses & {entry.orig_src, entry.orig_dst, entry.reply_src}:
        return True
    return (
        entry.proto in PORT_PROTOCOLS
        and entry.orig_dport in target.host_ports
        and entry.dnatted
        and entry.reply_src not in target.keep
    )


def select_stale(entries: Iterable[FlowEntry], target: FlowTarget) -> list[FlowEntry]:
    return [e for e in entries if stale_flow(e, target)]


@dataclass
class FlushReport:
    """What one flush did: how many entries matched and were deleted, how, and what went wrong."""

    target: FlowTarget
    via: str = ""  # "netlink", "conntrack CLI", or "" when neither could run
    matched: int = 0
    deleted: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.errors


class ConntrackUnavailable(Exception):
    """This way of reaching the conntrack table cannot be used here at all (the reason says why)."""


# -- netlink -------------------------------------------------------------------------------------


def _plain(entry: Any) -> FlowEntry:
    o, r = entry.tuple_orig, entry.tuple_reply
    return FlowEntry(o.proto, o.saddr, o.daddr, o.sport, o.dport, r.saddr, r.daddr, r.sport, r.dport)


def _families(target: FlowTarget) -> list[int]:
    # a host port may be mapped for IPv6 as well
    v6 = bool(target.host_ports) or any(":" in a for a in target.addresses)
    return [socket.AF_INET, socket.AF_INET6] if v6 else [socket.AF_INET]


def _pyroute2() -> tuple[Any, Any, type[Exception]]:
    """pyroute2's Conntrack, NFCTAttrTuple and NetlinkError (imported lazily, like verify.py does)."""
    try:
        from pyroute2 import Conntrack
        from pyroute2.netlink.exceptions import NetlinkError
        from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple
    except ImportError as exc:
        raise ConntrackUnavailable(f"pyroute2 has no conntrack support: {exc}") from exc
    return Conntrack, NFCTAttrTuple, NetlinkError


def _netlink_open(family: int) -> Any:
    conntrack_class, _, _ = _pyroute2()
    try:
        return conntrack_class(nfgen_family=family)
    except OSError as exc:  # EPROTONOSUPPORT: no NETLINK_NETFILTER in this kernel
        raise ConntrackUnavailable(f"cannot open a ctnetlink socket: {exc}") from exc


def _netlink_query_tuples(family: int, target: FlowTarget) -> Iterator[Any]:
    """Kernel-side dump filters (kernel >= 5.8; pyroute2 filters again, so older kernels are right,
    only slower): per host port and protocol, and per old address as original source/destination.
    A flow translated to an old address from a host port is found by its port."""
    _, attr_tuple, _ = _pyroute2()
    v6 = family == socket.AF_INET6
    for port in sorted(target.host_ports):
        for proto in PORT_PROTOCOLS:
            yield attr_tuple(family=family, proto=proto, dport=port)
    for addr in sorted(a for a in target.addresses if (":" in a) == v6):
        yield attr_tuple(family=family, daddr=addr)
        yield attr_tuple(family=family, saddr=addr)


# what a kernel without ctnetlink (or a netns without the right) answers
_UNAVAILABLE = {errno.EPROTONOSUPPORT, errno.ENOENT, errno.EOPNOTSUPP, errno.EPERM, errno.EACCES}


def _netlink_flush(target: FlowTarget, report: FlushReport) -> None:
    _, _, netlink_error = _pyroute2()
    for family in _families(target):
        ct = _netlink_open(family)
        try:
            found: dict[FlowEntry, Any] = {}
            try:
                for query in _netlink_query_tuples(family, target):
                    for entry in ct.dump_entries(tuple_orig=query):
                        found.setdefault(_plain(entry), entry)
            except (netlink_error, OSError) as exc:
                code = exc.errno if isinstance(exc, OSError) else getattr(exc, "code", None)
                if code in _UNAVAILABLE and not found:
                    raise ConntrackUnavailable(f"ctnetlink dump refused: {exc}") from exc
                report.errors.append(f"conntrack dump: {exc}")
                continue
            for plain, entry in found.items():
                if not stale_flow(plain, target):
                    continue
                report.matched += 1
                extra = {"zone": entry.zone} if entry.zone is not None else {}
                try:
                    ct.entry("del", tuple_orig=entry.tuple_orig, **extra)
                    report.deleted += 1
                except netlink_error as exc:
                    if getattr(exc, "code", None) != errno.ENOENT:  # ENOENT: it ended by itself meanwhile
                        report.errors.append(f"conntrack delete {_show(plain)}: {exc}")
        finally:
            ct.close()


# -- the conntrack CLI (fallback) ----------------------------------------------------------------

_KV = re.compile(r"\b(src|dst|sport|dport)=(\S+)")


def parse_cli_line(line: str) -> FlowEntry | None:
    """One line of `conntrack -L` (pure): 'tcp 6 431999 ESTABLISHED src=.. dst=.. sport=.. dport=..
    src=.. dst=.. sport=.. dport=.. [ASSURED] ...'; None for what is not a TCP/UDP entry."""
    words = line.split()
    if len(words) < 2 or not words[1].isdigit():
        return None
    proto = int(words[1])
    if proto not in PORT_PROTOCOLS:
        return None
    values: dict[str, list[str]] = {}
    for key, value in _KV.findall(line):
        values.setdefault(key, []).append(value)
    if any(len(values.get(k, ())) < 2 for k in ("src", "dst", "sport", "dport")):
        return None
    try:
        sports, dports = [int(v) for v in values["sport"][:2]], [int(v) for v in values["dport"][:2]]
    except ValueError:
        return None
    src, dst = values["src"], values["dst"]
    return FlowEntry(proto, src[0], dst[0], sports[0], dports[0], src[1], dst[1], sports[1], dports[1])


def _cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["conntrack", *args], capture_output=True, text=True, timeout=CLI_TIMEOUT, check=False
    )


def _cli_flush(target: FlowTarget, report: FlushReport) -> None:
    if shutil.which("conntrack") is None:
        raise ConntrackUnavailable("the conntrack CLI is not installed")
    found: set[FlowEntry] = set()
    for family in ("ipv4", "ipv6"):
        for proto in PORT_PROTOCOLS:
            try:
                proc = _cli(["-L", "-f", family, "-p", _PROTO_NAMES[proto]])
            except (OSError, subprocess.TimeoutExpired) as exc:
                report.errors.append(f"conntrack -L: {exc}")
                continue
            if proc.returncode != 0:
                report.errors.append(f"conntrack -L: {proc.stderr.strip() or proc.returncode}")
                continue
            found.update(e for e in map(parse_cli_line, proc.stdout.splitlines()) if e is not None)
    for e in sorted(found):
        if not stale_flow(e, target):
            continue
        report.matched += 1
        args = ["-D", "-p", _PROTO_NAMES[e.proto], "-s", e.orig_src, "-d", e.orig_dst]
        args += ["--sport", str(e.orig_sport), "--dport", str(e.orig_dport)]
        try:
            proc = _cli(args)
        except (OSError, subprocess.TimeoutExpired) as exc:
            report.errors.append(f"conntrack -D {_show(e)}: {exc}")
            continue
        if proc.returncode == 0:
            report.deleted += 1
        elif "0 flow entries" not in proc.stderr:
            report.errors.append(f"conntrack -D {_show(e)}: {proc.stderr.strip() or proc.returncode}")


# -- the entry point -----------------------------------------------------------------------------


def _show(e: FlowEntry) -> str:
    name = _PROTO_NAMES.get(e.proto, str(e.proto))
    orig = f"{e.orig_src}:{e.orig_sport}->{e.orig_dst}:{e.orig_dport}"
    return f"{name} {orig} (to {e.reply_src}:{e.reply_sport})"


def flush_stale_flows(target: FlowTarget, *, owner: str = "", why: str = "") -> FlushReport:
    """Delete the conntrack entries `target` selects; never raises. Logs the count at INFO."""
    report = FlushReport(target)
    if not target:
        return report
    try:
        try:
            _netlink_flush(target, report)
            report.via = "netlink"
        except ConntrackUnavailable as netlink_exc:
            log.warning("conntrack: netlink unavailable (%s); falling back to the conntrack CLI", netlink_exc)
            try:
                _cli_flush(target, report)
                report.via = "conntrack CLI"
            except ConntrackUnavailable as cli_exc:
                report.errors.append(f"conntrack unavailable: netlink: {netlink_exc}; CLI: {cli_exc}")
    except Exception as exc:  # a cleanup must never break teardown or recovery
        log.exception("conntrack cleanup failed unexpectedly")
        report.errors.append(f"conntrack cleanup: {type(exc).__name__}: {exc}")
    log.info(
        "conntrack %s%s: deleted %d of %d stale entries (%s) via %s%s",
        owner or "flows",
        f" ({why})" if why else "",
        report.deleted,
        report.matched,
        target.describe(),
        report.via or "nothing",
        "; errors: " + "; ".join(report.errors) if report.errors else "",
    )
    return report


def why_unavailable() -> str | None:
    """None when the conntrack table of this netns can be listed over netlink (or the CLI); otherwise
    the exact reason. Reads only: a dump filtered on a port nothing uses."""
    try:
        _, attr_tuple, _ = _pyroute2()
        ct = _netlink_open(socket.AF_INET)
        try:
            list(ct.dump_entries(tuple_orig=attr_tuple(proto=TCP, dport=1)))
            return None
        finally:
            ct.close()
    except ConntrackUnavailable as exc:
        netlink_reason = str(exc)
    except Exception as exc:  # NetlinkError, OSError
        netlink_reason = f"{type(exc).__name__}: {exc}"
    if shutil.which("conntrack") is None:
        return f"conntrack table not reachable: netlink: {netlink_reason}; the conntrack CLI is not installed"
    try:
        proc = _cli(["-L", "-p", "tcp", "--orig-port-dst", "1"])
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"conntrack table not reachable: netlink: {netlink_reason}; CLI: {exc}"
    if proc.returncode != 0:
        return f"conntrack table not reachable: netlink: {netlink_reason}; CLI: {proc.stderr.strip()}"
    return None
