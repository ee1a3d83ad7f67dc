"""A run's report as a browser draws it: headless Chromium renders the page, a screenshot is kept in
the run dir (report.png), and the timeline must be there in the rendered DOM and in the pixels.

The run is written through the harness's own `History` (as a `make e2e` run writes it): a hard
reboot, agent kills (one restore over its target), pause kills with a failed check, and a partition
still in effect when the run was killed. With a real run under e2e/reports (`latest`), that run is
rendered too. Chromium comes from the controller playbook (`make bootstrap`); without it the tests skip.
"""

from __future__ import annotations

import html
import operator
import re
import shutil
import struct
import subprocess
import zlib
from itertools import accumulate
from pathlib import Path

import pytest

from e2e.harness import history, report
from e2e.harness.history import History
from e2e.harness.report import svg, timeline

T0 = 1_717_000_000.0
RUN_ID = "20240529-163000-default"
# Node ids as a run wrote them before the suites moved to e2e/suites/: a stored report still opens
# (tests/test_e2e_report.py writes runs with the new ones).
SMOKE = "e2e/test_smoke.py::test_agents_answer"
REBOOT = "e2e/test_restore.py::test_reboot_restores_the_alloc_with_its_network[hard-reboot]"
SIGKILL = "e2e/test_restore.py::test_agent_restart_restores[SIGKILL]"
PAUSE = "e2e/test_pause_kill.py::test_pause_and_task_kills_leave_one_working_set_and_no_orphans"
CHAOS = "e2e/test_chaos.py::test_seeded_chaos"
WINDOW = "1400,2000"


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


needs_chromium = pytest.mark.skipif(
    chromium() is None,
    reason="chromium is not installed: `make bootstrap` installs it (lab/playbooks/controller.yml)",
)


def write_run(run_dir: Path) -> Path:
    """A run as the suites write it, through `History` (commands too, as `Remote.run` records them)."""
    h = History(run_dir, RUN_ID, 4242, "default")
    log = []

    def at(t: float) -> float:
        return T0 + t

    def command(t: float, node: str, cmd: str, rc: int = 0) -> None:
        log.append(f"--- 16:30:{int(t) % 60:02d} {node} rc={rc} 0.10s [{h._test}]\n$ {cmd}\n")
        h.record(history.COMMAND, cmd, node=node, ok=rc == 0, duration=0.1, rc=rc, out="", at=at(t))

    def test(t: float, nodeid: str, took: float, outcome: str, message: str = "") -> None:
        h.record(
            history.TEST,
            nodeid,
            ok=outcome != "failed",
            duration=took,
            outcome=outcome,
            message=message,
            at=at(t),
        )

    h.record(history.RUN, RUN_ID, seed=4242, lab="default", at=at(0))
    h.set_test(SMOKE)
    for i, node in enumerate(("server1", "client1", "client2")):
        command(1 + i, node, "systemctl is-active fieldlab-agent openbao")
    h.check("invariants", [], node="client1", counts={"allocs checked": 0}, at=at(4))
    h.check("invariants", [], node="client2", counts={"allocs checked": 0}, at=at(4.2))
    test(5, SMOKE, 4.5, "passed")

    h.set_test(REBOOT)
    h.record(history.NOTE, "job submitted from jobs/seed-restore.hcl", node="client1", at=at(7))
    h.record(history.FAULT, "hard-reboot client1", node="client1", ok=True, duration=9.0, at=at(20))
    h.record(
        history.MEASURE, "hard-reboot: power off to ssh answering", node="client1", duration=8.7, at=at(20)
    )
    h.record(
        history.EVENT, "Restored", node="client1", detail="task restored", at=at(27), task="web", alloc="a1"
    )
    h.record(history.HEAL, "hard-reboot client1", node="client1", ok=True, duration=6.0, at=at(27))
    h.record(
        history.EVENT,
        "Network Recovered",
        node="client1",
        detail="veth rebuilt",
        at=at(29),
        task="web",
        alloc="a1",
    )
    h.check("invariants", [], node="client1", counts={"allocs checked": 2}, at=at(31))
    h.record(
        history.MEASURE,
        "hard reboot to alloc reachable",
        node="client1",
        duration=19.5,
        target=30.0,
        at=at(31),
    )
    test(32, REBOOT, 26.0, "passed")

    h.set_test(SIGKILL)
    for node, t, took in (("client1", 36, 3.9), ("client2", 44, 6.2)):
        h.record(history.FAULT, f"agent-sigkill {node}", node=node, ok=True, duration=0.8, at=at(t))
        h.record(
            history.HEAL, f"agent-sigkill {node}", node=node, ok=True, duration=took - 0.8, at=at(t + took)
        )
        h.record(
            history.MEASURE,
            "agent-sigkill: kill to restore done",
            node=node,
            duration=took,
            target=5.0,
            at=at(t + took),
        )
        h.check("invariants", [], node=node, counts={"allocs checked": 2}, at=at(t + took + 1))
    test(52, SIGKILL, 18.0, "passed")

    h.set_test(PAUSE)
    h.record(history.FAULT, "kill-pause client1", node="client1", ok=True, duration=1.0, at=at(56))
    h.record(history.HEAL, "kill-pause client1", node="client1", ok=True, duration=0.2, at=at(56.5))
    h.record(
        history.EVENT,
        "Restart Signaled",
        node="client1",
        detail="pause gone",
        at=at(58),
        task="web",
        alloc="a2",
    )
    h.record(history.MEASURE, "kill pause to network recovered", node="client1", duration=7.5, at=at(63))
    h.record(history.FAULT, "kill-pause client1", node="client1", ok=True, duration=1.0, at=at(66))
    h.record(history.HEAL, "kill-pause client1", node="client1", ok=True, duration=0.2, at=at(66.5))
    h.record(history.FAULT, "agent-sigkill client1", node="client1", ok=True, duration=0.8, at=at(67.5))
    h.record(history.HEAL, "agent-sigkill client1", node="client1", ok=True, duration=3.0, at=at(71))
    h.record(
        history.MEASURE,
        "kill pause + agent SIGKILL to network recovered",
        node="client1",
        duration=11.0,
        at=at(77),
    )
    h.check(
        "invariants",
        ["client1: orphan pause container 3f2a9c <b>(alloc a2)</b>"],
        node="client1",
        counts={"allocs checked": 3, "orphans found": 1},
        at=at(78),
    )
    test(79, PAUSE, 24.0, "failed", "AssertionError: client1: orphan pause container 3f2a9c")

    h.set_test(CHAOS)
    h.record(history.NOTE, "chaos step 1: partition client2 for 20s", node="client2", at=at(82))
    h.record(history.FAULT, "partition client2", node="client2", ok=True, duration=1.5, at=at(84))
    h.check("deliveries", ["client2: probe did not load the new cert"], at=at(100))
    # The run was killed here: the partition was never healed (its safety timer heals it on the node).
    command(104, "client2", "iptables -S FIELDLAB-PARTITION", rc=1)
    (run_dir / "commands.log").write_text("".join(log))
    (run_dir / "junit.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?>\n<testsuites><testsuite name="pytest" tests="4">'
        '<testcase classname="e2e.test_smoke" name="test_agents_answer" time="4.5"/>'
        '<testcase classname="e2e.test_pause_kill" '
        'name="test_pause_and_task_kills_leave_one_working_set_and_no_orphans" time="24.0">'
        '<failure message="AssertionError: client1: orphan pause container 3f2a9c">'
        "E   AssertionError</failure></testcase></testsuite></testsuites>\n"
    )
    return run_dir


# -- reading what Chromium drew ------------------------------------------------------------------------
def png_pixels(path: Path) -> tuple[int, int, list[bytes]]:
    """(width, height, rows of RGB bytes) of an 8-bit non-interlaced RGB or RGBA PNG (Chromium's)."""
    raw = path.read_bytes()
    assert raw[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", b""
    while pos < len(raw):
        length, kind = struct.unpack(">I4s", raw[pos : pos + 8])
        if kind == b"IHDR":
            header = raw[pos + 8 : pos + 8 + length]
        elif kind == b"IDAT":
            idat += raw[pos + 8 : pos + 8 + length]
        pos += 12 + length
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and colour in (2, 6) and interlace == 0, (depth, colour, interlace)
    bpp = 3 if colour == 2 else 4
    data, stride = zlib.decompress(idat), width * bpp
    prev, rows = bytes(stride), []
    for y in range(height):
        start = y * (stride + 1)
        kind, line = data[start], data[start + 1 : start + 1 + stride]
        if kind == 1:  # Sub: a running sum per channel
            out = bytearray(stride)
            for c in range(bpp):
                out[c::bpp] = bytes(map((255).__and__, accumulate(line[c::bpp])))
            line = bytes(out)
        elif kind == 2:  # Up
            line = bytes(map((255).__and__, map(operator.add, line, prev)))
        elif kind in (3, 4):  # Average, Paeth
            out = bytearray(line)
            for i in range(stride):
                a, b = (out[i - bpp] if i >= bpp else 0), prev[i]
                if kind == 3:
                    out[i] = (out[i] + ((a + b) >> 1)) & 255
                    continue
                c = prev[i - bpp] if i >= bpp else 0
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                out[i] = (out[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            line = bytes(out)
        rows.append(line)
        prev = line
    if bpp == 4:
        rows = [bytes(b for i, b in enumerate(row) if i % 4 != 3) for row in rows]
    return width, height, rows


def rgb(colour: str) -> bytes:
    return bytes.fromhex(colour.removeprefix("#"))


def near(pixel: bytes, colour: str, tolerance: int = 40) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, rgb(colour), strict=True))


def browse(page: Path, profile: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    exe = chromium()
    assert exe is not None
    argv = [
        exe,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--window-size={WINDOW}",
        *flags,
        page.resolve().as_uri(),
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def shoot(run_dir: Path, profile: Path) -> tuple[str, Path]:
    """The DOM Chromium built from the run's report, and its screenshot (kept as report.png)."""
    page = run_dir / report.REPORT_NAME
    dom = browse(page, profile, "--dump-dom").stdout
    shot = run_dir / "report.png"
    shot.unlink(missing_ok=True)
    browse(page, profile, f"--screenshot={shot}")
    assert shot.is_file() and shot.stat().st_size > 10_000, "no screenshot, or a blank one"
    return dom, shot


def assert_timeline_in_dom(dom: str, run: report.Run) -> None:
    """The rendered DOM has the timeline's SVG with a lane per node, a band per fault and a mark per
    check, red ones for failed checks, as the run's history says."""
    section = re.search(r'<section id="timeline">(.*?)</section>', dom, re.S)
    assert section, "no timeline section in the DOM"
    drawn = section.group(1)
    assert re.search(r'<svg class="timeline"', drawn), "no timeline SVG in the DOM"
    lanes = re.findall(r'<g class="lane" data-lane="([^"]*)"', drawn)
    want = [name or timeline.CLUSTER_LABEL for name in timeline.lanes(run.records)]
    assert [html.unescape(name) for name in lanes] == want
    bands = timeline.fault_bands(run.records, run.end)
    assert len(re.findall(r'<g class="band[ "]', drawn)) == len(bands)
    assert len(re.findall(r'<g class="band unhealed"', drawn)) == sum(not b.healed for b in bands)
    checks = run.of_kind(history.CHECK)
    assert len(re.findall(r'class="mark check (?:passed|failed|unknown)"', drawn)) == len(checks)
    failed = sum(1 for rec in checks if rec.get("ok") is False)
    assert len(re.findall(r'class="mark check failed"', drawn)) == failed
    tests = run.of_kind(history.TEST)
    assert len(re.findall(r'<rect class="test ', drawn)) == len(tests)
    assert drawn.count("<title>") >= len(bands) + len(checks) + len(tests)


@needs_chromium
def test_chromium_draws_the_timeline_with_red_failed_checks_and_fault_bands(tmp_path: Path) -> None:
    run_dir = write_run(tmp_path / RUN_ID)
    report.render(run_dir)
    run = report.load_run(run_dir)
    dom, shot = shoot(run_dir, tmp_path / "chromium-profile")
    assert_timeline_in_dom(dom, run)
    assert "&lt;b&gt;(alloc a2)&lt;/b&gt;" in dom and "<b>(alloc a2)</b>" not in dom  # escaped, not markup

    width, height, rows = png_pixels(shot)
    assert (width, height) == (1400, 2000)
    # Where the lanes are: the second lane (client1) has the only #f1f3f6 background on the page, and
    # every lane's background starts at the SVG's left edge.
    odd_lane = rgb(svg.LANE_FILLS[1])
    lane_rows = [y for y, row in enumerate(rows) if row.count(odd_lane) > 100]
    assert lane_rows, "no lane drawn"
    client1_top = lane_rows[0]
    left = rows[client1_top].index(odd_lane) // 3
    lane_top = {
        "(no node)": client1_top - timeline.LANE_H,
        "client1": client1_top,
        "client2": client1_top + timeline.LANE_H,
    }
    x = svg.Scale(run.start, run.end, timeline.GUTTER, timeline.WIDTH - timeline.RIGHT)

    def pixel(t: float, lane: str, dy: float) -> bytes:
        px, py = int(left + x(t)), int(lane_top[lane] + dy)
        return rows[py][px * 3 : px * 3 + 3]

    def column(t: float, lane: str) -> list[bytes]:
        return [pixel(t, lane, dy) for dy in range(2, int(timeline.LANE_H) - 2)]

    # The failed "deliveries" check (no node) at +100s: a red rule through its lane.
    red = rgb(svg.FAILED_RED)
    assert column(T0 + 100, "(no node)").count(red) >= timeline.LANE_H - 6
    # client1's failed invariants check at +78s is red too; its passed ones (+31s) are green, not red.
    assert column(T0 + 78, "client1").count(red) >= timeline.LANE_H - 6
    assert rgb(svg.PASSED_GREEN) in column(T0 + 31, "client1") and red not in column(T0 + 31, "client1")
    # The hard reboot's band on client1: fault colour between its inject (+20s) and heal (+21s) ...
    assert pixel(T0 + 20.5, "client1", 30) == rgb(svg.BAND_FILL)
    # ... and the darker inject itself before that; nothing on client2 at that time.
    assert pixel(T0 + 15, "client1", 30) == rgb(svg.BAND_EDGE)
    assert pixel(T0 + 15, "client2", 30) == rgb(svg.LANE_FILLS[0])
    # The partition on client2 never healed: hatched (fill and stroke) from +82.5s to the run's end.
    hatched = {p for t in range(86, 103) for p in column(T0 + t, "client2")}
    assert rgb(svg.BAND_FILL) in hatched
    assert any(near(p, svg.BAND_STROKE) for p in hatched), "no hatching"  # its lines are antialiased
    assert pixel(T0 + 66, "client2", 30) == rgb(svg.LANE_FILLS[0])  # no band where there was no fault
    # The restore over its target: a red dot in its measure plot, below the timeline.
    assert any(row.count(red) for row in rows[lane_rows[-1] + 50 :])


REAL_LATEST = report.REPORTS / "latest"


@needs_chromium
@pytest.mark.skipif(
    not (REAL_LATEST / "history.jsonl").is_file(),
    reason=f"no real run under {report.REPORTS} yet (`make e2e` writes one and points latest at it)",
)
def test_chromium_draws_the_latest_real_run(tmp_path: Path) -> None:
    run_dir = REAL_LATEST.resolve()
    report.render(run_dir)
    dom, shot = shoot(run_dir, tmp_path / "chromium-profile")
    run = report.load_run(run_dir)
    assert_timeline_in_dom(dom, run)
    _, _, rows = png_pixels(shot)
    if timeline.lanes(run.records):
        lane_bg = rgb(svg.LANE_FILLS[0])
        assert any(row.count(lane_bg) > 100 for row in rows), "the timeline's lanes are not in the screenshot"
