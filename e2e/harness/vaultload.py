"""What OpenBao served during a storm, read from its file audit device (the openbao role's
openbao_audit_file): every request and its response, paired by request id, as (time, latency, path,
ok). The log is read on the server from a byte offset taken before the storm, and reduced there to
one compact line per request, so that a storm's megabytes of audit JSON never cross SSH. Secrets in
the log are HMAC'd by OpenBao; this module reads only times, paths and error flags.

The figures (`load_figures`) are pure: requests per second over time, latency p50/p99/max, the
requests per path kind (login, issue, token create, ...), and the responses that carried an error.
"""

from __future__ import annotations

import json
import shlex
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from e2e.harness.remote import Remote

AUDIT_FILE = "/var/log/openbao/audit.log"  # the openbao role's default openbao_audit_file

# Runs on the server with its python3 (stdlib only): audit lines from OFFSET on, paired by request id.
# RFC 3339 times with nanoseconds are parsed by hand (datetime takes at most microseconds).
_READ = r"""
import json, sys, calendar, time
def ts(s):
    date, _, frac = s.rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(date, "%Y-%m-%dT%H:%M:%S")) + (float("0." + frac) if frac else 0.0)
path, offset = sys.argv[1], int(sys.argv[2])
seen = {}
with open(path, "rb") as f:
    f.seek(offset)
    for raw in f:
        try:
            e = json.loads(raw)
        except ValueError:
            continue
        req = e.get("request") or {}
        rid = req.get("id")
        if not rid:
            continue
        if e.get("type") == "request":
            seen[rid] = (ts(e["time"]), req.get("path", ""))
        elif e.get("type") == "response" and rid in seen:
            t0, p = seen.pop(rid)
            err = e.get("error") or ""
            print(json.dumps([round(t0, 4), round(ts(e["time"]) - t0, 5), p, err[:80]]))
"""


@dataclass(frozen=True)
class Request:
    at: float  # Unix time the server took the request
    latency: float  # seconds to its response
    path: str
    error: str = ""


def audit_size(server: Remote, path: str = AUDIT_FILE) -> int:
    """The audit log's size now: the offset a storm's requests start after (0 when there is none)."""
    out = server.run(f"stat -c %s {shlex.quote(path)} 2>/dev/null || echo 0", check=False).stdout.strip()
    return int(out) if out.isdigit() else 0


def requests_since(server: Remote, offset: int, path: str = AUDIT_FILE) -> list[Request]:
    """Every request answered since `offset` of the audit log, in log order."""
    cmd = f"python3 -c {shlex.quote(_READ)} {shlex.quote(path)} {int(offset)}"
    out = server.run(cmd, timeout=300).stdout
    reqs = []
    for line in out.splitlines():
        at, latency, p, err = json.loads(line)
        reqs.append(Request(float(at), float(latency), str(p), str(err)))
    return reqs


def kind_of(path: str) -> str:
    """A request's kind by its path (pure): what a storm is made of."""
    if path.startswith("auth/approle/login"):
        return "login"
    if path.startswith("auth/token/create"):
        return "token create"
    if path.startswith("auth/token/renew") or path.startswith("auth/token/lookup"):
        return "token renew/lookup"
    if "/issue/" in path:
        return "pki issue"
    if path.startswith("sys/"):
        return "sys"
    return "other"


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by nearest rank (pure); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q * len(ordered) + 0.5)))
    return ordered[rank - 1]


@dataclass(frozen=True)
class LoadFigures:
    requests: int
    seconds: float  # from the first request to the last
    peak_rps: int  # the busiest one-second bucket
    mean_rps: float
    p50: float
    p99: float
    max: float
    errors: int  # responses with an error (a rate-limit refusal is answered before the audit log)
    kinds: dict[str, int] = field(default_factory=dict)
    series: list[tuple[float, int]] = field(default_factory=list)  # (seconds from `start`, requests)

    def line(self) -> str:
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.kinds.items(), key=lambda kv: -kv[1]))
        return (
            f"{self.requests} requests in {self.seconds:.1f}s: peak {self.peak_rps}/s, mean "
            f"{self.mean_rps:.1f}/s; latency p50 {self.p50 * 1000:.0f} ms, p99 {self.p99 * 1000:.0f} ms, "
            f"max {self.max * 1000:.0f} ms; errors {self.errors}; {kinds}"
        )


def load_figures(reqs: Sequence[Request], start: float, end: float) -> LoadFigures:
    """The storm's load on OpenBao from `start` to `end` (Unix times): one-second buckets (pure)."""
    inside = [r for r in reqs if start <= r.at <= end]
    buckets: Counter[int] = Counter(int(r.at - start) for r in inside)
    width = int(end - start) + 1
    series = [(float(s), buckets.get(s, 0)) for s in range(width)]
    lat = [r.latency for r in inside]
    span = (max(r.at for r in inside) - min(r.at for r in inside)) if inside else 0.0
    return LoadFigures(
        requests=len(inside),
        seconds=span,
        peak_rps=max(buckets.values(), default=0),
        mean_rps=len(inside) / span if span > 0 else float(len(inside)),
        p50=quantile(lat, 0.50),
        p99=quantile(lat, 0.99),
        max=max(lat, default=0.0),
        errors=sum(1 for r in inside if r.error),
        kinds=dict(Counter(kind_of(r.path) for r in inside)),
        series=series,
    )
