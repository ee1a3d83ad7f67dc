"""`make bench-api`: the agent's API under many watchers. Runs the real daemon (`fieldlab-agent run`,
the docker driver off: no allocs are needed) and, over mTLS from client processes (asyncio, with
h11 making and reading every request: no hand-written HTTP; the waiters in BENCH_CLIENTS=4 processes
of their own, so that reading 1,000 answers is not one process's work):

- BENCH_WAITERS=1000 blocking queries (`GET /v1/vars?index=<current>&wait=60s`) held at once: how
  many were answered before anything changed (must be 0), the agent's RSS and its idle CPU over
  10 s with all of them waiting (from /proc/<pid>/stat), `/v1/agent/health` latency meanwhile;
- one variable write (`PUT /v1/var/...`) waking them: wake latency p50/p99 (from the write sent to
  each waiter's answer read);
- BENCH_STREAMS=200 followed log streams of a raw_exec task opened at once, and BENCH_EXECS=16
  exec sessions in it (`/bin/cat`, through the agent's own wsproto client, agent.cli.wsclient, a
  thread each here): how many the agent serves, a session's stdin -> stdout round trip and
  `/v1/agent/health` latency with all of them open.

Targets: 0 answered early, wake p99 <= 100 ms, idle CPU <= 5 % of a core, every stream and session
served. Prints the figures and records them (scripts/benchlib.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
import multiprocessing
import os
import ssl
import statistics
import sys
import tempfile
import time
import urllib.parse
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path

import h11

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agent.cli.wsclient import WebSocket
from lab.waits import wait_until
from scripts.benchlib import Figure, record
from tests.agent_lab import AgentLab, Daemon
from tests.pki import TestCA

WAITERS = int(os.environ.get("BENCH_WAITERS", "1000"))
STREAMS = int(os.environ.get("BENCH_STREAMS", "200"))
EXECS = int(os.environ.get("BENCH_EXECS", "16"))
HOLD_WAIT = float(os.environ.get("BENCH_HOLD_WAIT", "120"))  # s for every waiter to be held (else: what was)
IDLE = 10.0  # seconds of idle CPU measured with every waiter held
HOLD = 60.0  # seconds a blocking query asks to wait: far past the measurements
CONNECTING = 64  # connections the bench opens at once (its waiting clients together)
CLIENTS = int(os.environ.get("BENCH_CLIENTS", "4"))  # processes holding the waiters
CLK_TCK = os.sysconf("SC_CLK_TCK")
LOGGER = """job "logger" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        args    = ["-c", "while true; do echo tick; sleep 1; done"]
      }
    }
  }
}
"""


@dataclass
class Got:
    status: int
    headers: dict[bytes, bytes]
    body: bytes
    at: float  # time.monotonic() when the answer was read whole


class Client:
    def __init__(
        self, port: int, ctx: ssl.SSLContext, connecting: int = 0, files: tuple[str, ...] = ()
    ) -> None:
        self.port, self.ctx, self.ctx_files = port, ctx, files
        # Connections handshaking at once: the agent drops the oldest of more than 256 (a flood);
        # watchers arrive over a moment, not in the same millisecond.
        self.opening = asyncio.Semaphore(connecting or CONNECTING)

    async def request(
        self, method: str, target: str, body: bytes = b"", sent: asyncio.Event | None = None
    ) -> Got:
        """One request on a connection of its own (the agent answers one per connection)."""
        conn = h11.Connection(h11.CLIENT)
        headers = [("Host", "bench"), ("Content-Length", str(len(body)))]
        out = conn.send(h11.Request(method=method, target=target, headers=headers)) or b""
        out += (conn.send(h11.Data(data=body)) or b"") if body else b""
        async with self.opening:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=self.ctx)
            writer.write(out + (conn.send(h11.EndOfMessage()) or b""))
            await writer.drain()
        if sent is not None:
            sent.set()
        got = Got(0, {}, b"", 0.0)
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await reader.read(65536))
                elif isinstance(event, h11.Response):
                    got.status, got.headers = event.status_code, dict(event.headers)
                elif isinstance(event, h11.Data):
                    got.body += bytes(event.data)
                elif isinstance(event, h11.EndOfMessage | h11.ConnectionClosed):
                    got.at = time.monotonic()
                    return got
        finally:
            writer.close()

    async def first_bytes(self, target: str) -> int:
        """A followed stream: its status once its head is read; the connection stays open."""
        async with self.opening:
            reader, writer = await asyncio.open_connection("127.0.0.1", self.port, ssl=self.ctx)
        conn = h11.Connection(h11.CLIENT)
        writer.write(
            (conn.send(h11.Request(method="GET", target=target, headers=[("Host", "bench")])) or b"")
            + (conn.send(h11.EndOfMessage()) or b"")
        )
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                self._open.append(writer)
                return event.status_code
            elif isinstance(event, h11.ConnectionClosed):
                return 0

    _open: list[asyncio.StreamWriter] = []  # noqa: RUF012 - the streams held open, closed at the end


def _index(got: Got) -> int:
    return int(got.headers.get(b"x-nomad-index", b"0"))


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK  # utime, stime


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def _health_ms(client: Client, n: int = 20) -> float:
    took = []
    for _ in range(n):
        t0 = time.monotonic()
        got = await client.request("GET", "/v1/agent/health")
        assert got.status == 200, got
        took.append((got.at - t0) * 1000)
    return statistics.median(took)


async def _waiters(client: Client, pid: int) -> list[Figure]:
    first = await client.request("GET", "/v1/vars")
    index = int(first.headers[b"x-nomad-index"])
    quiet_health = await _health_ms(client)
    target = f"/v1/vars?index={index}&wait={HOLD:g}s"
    spawn = multiprocessing.get_context("spawn")
    pipes = []
    for i in range(CLIENTS):
        got, send = spawn.Pipe(duplex=False)
        n = WAITERS // CLIENTS + (1 if i < WAITERS % CLIENTS else 0)
        files = (client.ctx_files[0], client.ctx_files[1], client.ctx_files[2])
        spawn.Process(target=_waiting_client, args=(client.port, files, target, n, send), daemon=True).start()
        pipes.append(got)
    t0 = time.monotonic()
    while (held := await _blocking(client)) < WAITERS and time.monotonic() - t0 < HOLD_WAIT:
        await asyncio.sleep(0.2)  # polled against the named deadline: the agent's own gauge
    held_s = time.monotonic() - t0
    cpu0, w0 = _cpu_seconds(pid), time.monotonic()
    await asyncio.sleep(IDLE)
    idle_pct = 100 * (_cpu_seconds(pid) - cpu0) / (time.monotonic() - w0)
    rss = _rss_mb(pid)
    busy_health = await _health_ms(client)
    sent = asyncio.Event()
    write = asyncio.create_task(client.request("PUT", "/v1/var/bench/wake", b'{"Items":{"k":"v"}}', sent))
    await sent.wait()
    w, cpu_w = time.monotonic(), _cpu_seconds(pid)  # CLOCK_MONOTONIC: the same in every process
    answers = [a for pipe in pipes for a in await asyncio.to_thread(pipe.recv)]
    wake_cpu = _cpu_seconds(pid) - cpu_w
    assert (await write).status == 200
    early = sum(at < w for _, _, at in answers)  # each answered at most once: none asks again
    woken = [(at - w) * 1000 for status, got, at in answers if status == 200 and got > index and at >= w]
    print(f"{held} of {WAITERS} waiters held after {held_s:.1f} s; answered before the write: {early}")
    print(f"idle CPU with {WAITERS} waiting: {idle_pct:.2f} % of a core over {IDLE:g} s; RSS {rss:.1f} MB")
    print(f"/v1/agent/health p50: {quiet_health:.1f} ms alone, {busy_health:.1f} ms with {WAITERS} waiting")
    p50, p99 = _pct(woken, 0.5), _pct(woken, 0.99)
    print(f"woken by the write: {len(woken)} of {WAITERS}; p50 {p50:.0f} ms, p99 {p99:.0f} ms")
    each = 1e6 * wake_cpu / max(1, len(woken))
    print(f"agent CPU answering them: {wake_cpu:.2f} s ({each:.0f} us per waiter)")
    return [
        Figure(f"api: blocking queries answered early ({WAITERS} held)", early, "count", "0"),
        Figure(f"api: wake latency p50 ({WAITERS} waiters, one write)", _pct(woken, 0.5), "ms"),
        Figure(f"api: wake latency p99 ({WAITERS} waiters, one write)", _pct(woken, 0.99), "ms", "<= 100 ms"),
        Figure(f"api: agent CPU answering {WAITERS} woken waiters", wake_cpu, "s"),
        Figure(f"api: agent idle CPU ({WAITERS} waiting, % of a core)", idle_pct, "%", "<= 5 %"),
        Figure(f"api: agent RSS ({WAITERS} waiting)", rss, "MB"),
        Figure(f"api: /v1/agent/health p50 ({WAITERS} waiting)", busy_health, "ms"),
    ]


def _waiting_client(port: int, files: tuple[str, str, str], target: str, n: int, out: Connection) -> None:
    """A client process of its own (so that reading the answers is not one process's work): `n`
    blocking queries, and each answer's (status, X-Nomad-Index, when it was read) sent to `out`."""

    async def run() -> list[tuple[int, int, float]]:
        ctx = ssl.create_default_context(cafile=files[0])
        ctx.load_cert_chain(files[1], files[2])
        client = Client(port, ctx, CONNECTING // CLIENTS)
        got = await asyncio.gather(*(client.request("GET", target) for _ in range(n)), return_exceptions=True)
        return [(a.status, _index(a), a.at) if isinstance(a, Got) else (0, 0, time.monotonic()) for a in got]

    out.send(asyncio.run(run()))


async def _blocking(client: Client) -> int:
    got = await client.request("GET", "/v1/metrics?format=prometheus")
    for line in got.body.decode().splitlines():
        if line.startswith("fieldlab_agent_blocking_queries "):
            return int(float(line.split()[1]))
    return -1


def _exec(d: Daemon, alloc: str) -> WebSocket | None:
    query = urllib.parse.urlencode({"task": "t", "command": json.dumps(["/bin/cat"]), "tty": "false"})
    try:
        return WebSocket.connect(d.api, f"/v1/client/allocation/{alloc}/exec?{query}", "bench exec")
    except Exception as exc:  # refused (too many sessions): counted, and said
        print(f"an exec session was refused: {exc}")
        return None


def _echo_ms(ws: WebSocket) -> float:
    """A line to `cat`'s stdin until it comes back on stdout."""
    t0 = time.monotonic()
    ws.send({"stdin": {"data": base64.b64encode(b"ping\n").decode()}})
    got = b""
    while b"ping" not in got:
        messages, closed = ws.receive()
        if closed is not None:
            raise RuntimeError(f"the exec session closed: {closed}")
        got += b"".join(base64.b64decode(m["stdout"]["data"]) for m in messages if "stdout" in m)
    return (time.monotonic() - t0) * 1000


async def _streams(client: Client, d: Daemon, alloc: str) -> list[Figure]:
    target = f"/v1/client/fs/logs/{alloc}?task=t&type=stdout&follow=true&origin=end"
    statuses = await asyncio.gather(*(client.first_bytes(target) for _ in range(STREAMS)))
    served = statuses.count(200)
    refused = {s: statuses.count(s) for s in set(statuses) if s != 200}
    sessions = await asyncio.gather(*(asyncio.to_thread(_exec, d, alloc) for _ in range(EXECS)))
    opened = [ws for ws in sessions if ws is not None]
    echoes = await asyncio.gather(*(asyncio.to_thread(_echo_ms, ws) for ws in opened))
    echo = statistics.median(echoes) if echoes else float("nan")
    health = await _health_ms(client)
    print(f"{STREAMS} followed log streams asked for: {served} served, refused {refused}")
    print(f"{EXECS} exec sessions asked for: {len(opened)} opened; stdin -> stdout p50 {echo:.1f} ms")
    print(f"/v1/agent/health p50 with them open: {health:.1f} ms")
    for w in Client._open:
        w.transport.abort()
    for ws in opened:
        ws.close()
    both = f"{served} log streams, {len(opened)} exec sessions open"
    return [
        Figure(f"api: followed log streams served (of {STREAMS} asked)", served, "count", f"{STREAMS}"),
        Figure(f"api: exec sessions opened (of {EXECS} asked)", len(opened), "count", f"{EXECS}"),
        Figure(f"api: exec stdin -> stdout p50 ({both})", echo, "ms"),
        Figure(f"api: /v1/agent/health p50 ({both})", health, "ms"),
    ]


async def _bench(d: Daemon, pid: int, alloc: str) -> list[Figure]:
    ctx = ssl.create_default_context(cafile=d.api.ca_file)
    ctx.load_cert_chain(d.api.cert_file, d.api.key_file)
    client = Client(d.port, ctx, files=(d.api.ca_file, d.api.cert_file, d.api.key_file))
    figures = await _waiters(client, pid)
    return figures + (await _streams(client, d, alloc) if alloc else [])


def _logger_alloc(d: Daemon) -> str:
    job = d.api.request("POST", "/v1/jobs/parse", {"JobHCL": LOGGER, "Canonicalize": True})
    out = d.api.request("PUT", "/v1/jobs", {"Job": job})
    allocs = d.api.request("GET", f"/v1/evaluation/{out['EvalID']}/allocations")
    alloc = str(allocs[0]["ID"])

    def running() -> tuple[bool | None, str]:
        status = d.api.request("GET", f"/v1/allocation/{alloc}")["ClientStatus"]
        return (True if status == "running" else None), status

    wait_until(running, timeout=60, what="the raw_exec logger running", interval=0.2)
    return alloc


def _stop_logger(d: Daemon, alloc: str) -> None:
    d.api.request("DELETE", "/v1/job/logger?purge=true")  # answers once its alloc has stopped

    def gone() -> tuple[bool | None, str]:
        try:
            status = d.api.request("GET", f"/v1/allocation/{alloc}")["ClientStatus"]
        except Exception as exc:  # collected: gone
            return True, str(exc)
        return (True if status in ("complete", "failed") else None), status

    wait_until(gone, timeout=60, what="the logger's alloc stopped", interval=0.2)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        root = Path(tmp)
        lab = AgentLab(root / "lab")
        ca = TestCA(root)
        d = Daemon(lab, ca, lab.root)
        cfg = json.loads(d.config.read_text())
        # One client address holds every waiter here: Nomad's http_max_conns_per_client (100) is
        # per address, so the bench raises it rather than spread over 10 addresses.
        cfg.update(
            docker_enabled=False, raw_exec_enabled=True, api_max_conns_per_client=WAITERS + STREAMS + 50
        )
        d.config.write_text(json.dumps(cfg))
        d.start()
        alloc = ""
        try:
            assert d.proc is not None
            alloc = _logger_alloc(d) if STREAMS else ""
            figures = asyncio.run(_bench(d, d.proc.pid, alloc))
            for n, fig in enumerate(figures):
                record(Figure(fig.name, fig.value, fig.unit, fig.target, fig.floor, order=600 + n))
        finally:
            if alloc:  # its task stopped (and its secrets tmpfs unmounted) before the agent goes
                _stop_logger(d, alloc)
            d.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
