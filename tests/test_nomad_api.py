"""Nomad's own Python client (python-nomad) drives a real agent daemon over mTLS: parse HCL ->
validate -> register -> the allocation running -> its TaskStates and events -> the alloc dir (ls,
stat, cat) -> logs (plain, framed, followed) -> signal -> restart -> stop (a replacement is
placed) -> deregister with purge; and a blocking query that wakes on a change.

Real dockerd, the lab's busybox image, the agent as a subprocess. Shapes are checked against
Nomad's structs in tests/test_nomad_structs.py; here the point is that Nomad's tools work.
"""

from __future__ import annotations

import base64
import json
import ssl
import statistics
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from lab.waits import wait_until
from tests.agent_lab import AgentLab, Daemon, build_workload_images, why_not_ready
from tests.pki import TestCA
from tests.wsclient import WsClient

nomad = pytest.importorskip("nomad", reason="python-nomad is a lab extra (pip install -e .[lab])")

pytestmark = [pytest.mark.root]
REASON = why_not_ready()
if REASON:
    pytestmark.append(pytest.mark.skip(reason=REASON))

RUNNING = 90.0  # seconds from register to the alloc running (image present: a few seconds)
WAKE = 5.0  # seconds a blocking query may take to wake after a change (the target is 0.1 s)

HCL = """
variable "greeting" {
  type    = string
  default = "hello"
}

locals {
  loop = "while true; do sleep 0.2; done"
}

job "nomadapi" {
  datacenters = ["*"]
  group "g" {
    task "web" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "sh"
        args    = ["-c", "echo ${var.greeting}-from-task; trap 'echo got-hup' HUP; ${local.loop}"]
      }
      template {
        data        = "rendered {{ env \\"NOMAD_TASK_NAME\\" }}\\n"
        destination = "local/hello.txt"
      }
      kill_timeout = "2s"
    }
  }
}
"""


BLK_HCL = """
job "blk" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "sleep"
        args    = ["600"]
      }
    }
  }
}
"""


@pytest.fixture(scope="module")
def images(tmp_path_factory: pytest.TempPathFactory) -> None:
    build_workload_images(tmp_path_factory.mktemp("images"))


@pytest.fixture
def agent(tmp_path: Path, images: None) -> Iterator[Daemon]:
    lab = AgentLab(tmp_path / "agentlab")
    d = Daemon(lab, TestCA(tmp_path), lab.root)
    d.start()
    yield d
    d.stop()
    if d.log.exists():  # kept beside the test's files: the lab's root goes with its cleanup
        (tmp_path / "agent.log").write_bytes(d.log.read_bytes())
    lab.cleanup()


def _client(d: Daemon) -> Any:
    return nomad.Nomad(
        host="127.0.0.1",
        port=d.port,
        secure=True,
        verify=d.api.ca_file,
        cert=(d.api.cert_file, d.api.key_file),
        timeout=60,
    )


def _session(d: Daemon) -> requests.Session:
    s = requests.Session()
    s.trust_env = False  # REQUESTS_CA_BUNDLE in the environment would win over the lab CA
    s.verify = d.api.ca_file
    s.cert = (d.api.cert_file, d.api.key_file)
    return s


def _running(n: Any, job_id: str) -> dict[str, Any]:
    def check() -> tuple[dict[str, Any] | None, str]:
        allocs = n.job.get_allocations(job_id)
        live = [a for a in allocs if a["ClientStatus"] == "running" and a["DesiredStatus"] == "run"]
        return (live[0] if live else None), json.dumps([(a["ID"][:8], a["ClientStatus"]) for a in allocs])

    return wait_until(check, timeout=RUNNING, what=f"an alloc of {job_id} running", interval=0.2)


def _parked(d: Daemon, count: int) -> None:
    """Until `count` blocking queries wait in the agent (its gauge), so a wake is measured from a change
    made after the query was parked."""
    wait_until(
        lambda: (d.metric("fieldlab_agent_blocking_queries") >= count, "not parked yet"),
        timeout=10,
        what="the blocking query parked in the agent",
        interval=0.01,
    )


def test_nomads_python_client_drives_the_agent_end_to_end(agent: Daemon) -> None:
    n = _client(agent)
    base = f"https://127.0.0.1:{agent.port}"
    http = _session(agent)

    # agent, status, nodes
    self_ = n.agent.get_agent()
    assert self_["member"]["Name"] == "bench" and self_["config"]["Datacenter"] == "dc1"
    assert n.status.leader.get_leader()
    nodes = n.nodes.get_nodes()
    assert [x["Name"] for x in nodes] == ["bench"] and nodes[0]["Status"] == "ready"
    assert n.node.get_node(nodes[0]["ID"])["Drivers"]["docker"]["Healthy"] is True

    # parse with a variables file, validate, register
    job = n.jobs.parse(HCL)
    assert job["ID"] == "nomadapi" and job["TaskGroups"][0]["Tasks"][0]["Driver"] == "docker"
    parsed = http.post(
        f"{base}/v1/jobs/parse", json={"JobHCL": HCL, "Variables": 'greeting = "hej"'}, timeout=30
    )
    assert "hej-from-task" in json.dumps(parsed.json()), "the Variables file reached the jobspec"
    job = parsed.json()
    # python-nomad's validate_job answers the requests.Response itself (its own quirk), hence .json()
    assert n.validate.validate_job({"Job": job}).json()["ValidationErrors"] in (None, [])
    bad = n.validate.validate_job(
        {"Job": {**job, "TaskGroups": [{"Name": "g", "Tasks": [{"Name": "x", "Driver": "nope"}]}]}}
    )
    assert bad.json()["ValidationErrors"], bad.text
    planned = n.job.plan_job("nomadapi", {"Job": job}, diff=True)  # `nomad job plan`
    assert planned["JobModifyIndex"] == 0 and planned["Diff"]["Type"] == "Added", planned["Diff"]
    assert planned["Annotations"]["DesiredTGUpdates"]["g"]["Place"] == 1
    registered = n.job.register_job("nomadapi", {"Job": job, "EnforceIndex": True, "JobModifyIndex": 0})
    assert n.evaluation.get_evaluation(registered["EvalID"])["Status"] == "complete"
    assert n.job.get_job("nomadapi")["Version"] == 0
    with pytest.raises(nomad.api.exceptions.BaseNomadException) as stale:  # `job run -check-index 0` again
        n.job.register_job("nomadapi", {"Job": job, "EnforceIndex": True, "JobModifyIndex": 0})
    assert "Enforcing job modify index 0: job already exists" in stale.value.nomad_resp.text
    again = n.job.plan_job("nomadapi", {"Job": job}, diff=True)
    assert (
        again["JobModifyIndex"] == n.job.get_job("nomadapi")["JobModifyIndex"]
        and again["Diff"]["Type"] == "None"
    )

    alloc = _running(n, "nomadapi")
    alloc_id = alloc["ID"]
    full = n.allocation.get_allocation(alloc_id)
    web = full["TaskStates"]["web"]
    assert web["State"] == "running" and not web["Failed"], web
    assert "Started" in [e["Type"] for e in web["Events"]]
    assert all(isinstance(e["Time"], int) and e["Time"] > 10**18 for e in web["Events"]), "times are ns"
    assert full["Job"]["ID"] == "nomadapi" and full["NodeName"] == "bench"
    for flag, want in (("false", None), ("true", full["AllocatedResources"]["Shared"])):  # ?resources=
        stub = next(
            a for a in http.get(f"{base}/v1/allocations?resources={flag}").json() if a["ID"] == alloc_id
        )
        assert (stub.get("AllocatedResources") or {}).get("Shared") == want, flag

    # the alloc dir: ls, stat, cat
    names = {f["Name"] for f in n.client.ls.list_files(alloc_id, "/web/local")}
    assert "hello.txt" in names, names
    st = n.client.stat.stat_file(alloc_id, "/web/local/hello.txt")
    assert st["IsDir"] is False and st["Size"] == len("rendered web\n")
    assert n.client.cat.read_file(alloc_id, "/web/local/hello.txt") == "rendered web\n"
    with pytest.raises(nomad.api.exceptions.BadRequestNomadException):
        n.client.cat.read_file(alloc_id, "/web/../../../etc/shadow")
    streamed = http.get(
        f"{base}/v1/client/fs/stream/{alloc_id}",
        params={"path": "/web/local/hello.txt", "follow": "false"},
        timeout=30,
    )
    frames = [json.loads(x) for x in streamed.text.replace("}{", "}\n{").splitlines() if x.strip()]
    assert b"".join(base64.b64decode(f["Data"]) for f in frames) == b"rendered web\n", streamed.text
    host = n.client.stats.read_stats()
    assert host["Memory"]["Total"] > 0 and host["CPU"] and host["AllocDirStats"]["Size"] > 0, host

    # logs: plain, framed
    wait_until(
        lambda: (
            "hej-from-task" in n.client.stream_logs.stream(alloc_id, "web", "stdout", plain=True),
            "no line yet",
        ),
        timeout=30,
        what="the task's first line in its logs",
    )
    framed = http.get(
        f"{base}/v1/client/fs/logs/{alloc_id}", params={"task": "web", "type": "stdout"}, timeout=30
    )
    frames = [json.loads(x) for x in framed.text.replace("}{", "}\n{").splitlines() if x.strip()]
    assert frames and all(set(f) >= {"Data", "File"} for f in frames), framed.text[:200]
    assert b"hej-from-task" in b"".join(base64.b64decode(f["Data"]) for f in frames)

    # follow + signal: the HUP line arrives on the open stream
    got: list[bytes] = []
    with http.get(
        f"{base}/v1/client/fs/logs/{alloc_id}",
        params={
            "task": "web",
            "type": "stdout",
            "follow": "true",
            "plain": "true",
            "origin": "end",
            "offset": "0",
        },
        stream=True,
        timeout=30,
    ) as stream:
        n.client.allocation.signal_allocation(alloc_id, "SIGHUP", task="web")
        for piece in stream.iter_content(chunk_size=None):
            got.append(piece)
            if b"got-hup" in b"".join(got):
                break
    assert b"got-hup" in b"".join(got)

    # stats: the task's own memory, twice (the second read has a CPU interval to measure)
    first = n.client.allocation.read_allocation_stats(alloc_id)
    mem = first["Tasks"]["web"]["ResourceUsage"]["MemoryStats"]
    assert mem["Usage"] > 0 and "Usage" in mem["Measured"], mem
    again = n.client.allocation.read_allocation_stats(alloc_id)
    assert again["Timestamp"] > first["Timestamp"] and again["ResourceUsage"]["CpuStats"]["Percent"] >= 0

    # restart
    n.client.allocation.restart_allocation(alloc_id)

    def restarted() -> tuple[bool | None, str]:
        web = n.allocation.get_allocation(alloc_id)["TaskStates"]["web"]
        return (
            web["Restarts"] >= 1 and web["State"] == "running"
        ) or None, f"{web['State']}, {web['Restarts']}"

    wait_until(restarted, timeout=60, what="the restart counted in TaskStates and the task running again")

    # a blocking query wakes on a change
    index = int(http.get(f"{base}/v1/allocations", timeout=10).headers["X-Nomad-Index"])
    woke: list[float] = []

    def block() -> None:
        r = http.get(f"{base}/v1/allocations", params={"index": index, "wait": "60s"}, timeout=90)
        assert int(r.headers["X-Nomad-Index"]) > index
        woke.append(time.monotonic())

    t = threading.Thread(target=block)
    t.start()
    _parked(agent, 1)
    changed = time.monotonic()
    n.client.allocation.signal_allocation(alloc_id, "SIGHUP", task="web")
    t.join(90)
    assert woke and woke[0] - changed < WAKE, (
        f"woke {woke[0] - changed if woke else 'never'} s after the change"
    )

    # stop the alloc: Nomad places a replacement
    n.allocation.stop_allocation(alloc_id)
    wait_until(
        lambda: (bool(n.allocation.get_allocation(alloc_id)["NextAllocation"]), "no replacement yet"),
        timeout=60,
        what="a replacement for the stopped alloc",
    )
    current = _running(n, "nomadapi")["ID"]

    # a new version while it runs: an env change replaces the alloc, a count change adds one
    updated = n.job.get_job("nomadapi")
    updated["TaskGroups"][0]["Tasks"][0]["Env"] = {"VERSION": "2"}
    n.job.register_job("nomadapi", {"Job": updated})
    assert n.job.get_job("nomadapi")["Version"] == 1
    replaced = n.allocation.get_allocation(current)
    assert replaced["DesiredStatus"] == "stop" and replaced["NextAllocation"], replaced["DesiredStatus"]
    new_alloc = _running(n, "nomadapi")["ID"]
    assert n.allocation.get_allocation(new_alloc)["PreviousAllocation"] == current
    scaled = n.job.get_job("nomadapi")
    scaled["TaskGroups"][0]["Count"] = 2
    n.job.register_job("nomadapi", {"Job": scaled})
    wait_until(
        lambda: (
            len([a for a in n.job.get_allocations("nomadapi") if a["ClientStatus"] == "running"]) == 2
            or None,
            "not two running yet",
        ),
        timeout=RUNNING,
        what="the second alloc of count = 2",
    )
    assert n.allocation.get_allocation(new_alloc)["ClientStatus"] == "running", "a count change is in place"
    assert n.job.get_job("nomadapi")["Version"] == 2
    history = n.job.get_versions("nomadapi")["Versions"]
    assert [v["Version"] for v in history] == [2, 1, 0], [v["Version"] for v in history]
    assert (
        history[1]["TaskGroups"][0]["Tasks"][0]["Env"] == {"VERSION": "2"}
        and not history[2]["TaskGroups"][0]["Tasks"][0]["Env"]
    ), "each version is the job as it was registered"

    # deregister with purge
    n.job.deregister_job("nomadapi", purge=True)
    with pytest.raises(nomad.api.exceptions.URLNotFoundNomadException):
        n.job.get_job("nomadapi")


def test_blocking_queries_wake_fast(agent: Daemon) -> None:
    """p50/p99 of the wake of a blocking query after a write (printed: a figure, not a timing gate)."""
    http = _session(agent)
    base = f"https://127.0.0.1:{agent.port}"
    hcl = BLK_HCL
    job = http.post(f"{base}/v1/jobs/parse", json={"JobHCL": hcl}, timeout=30).json()
    http.post(f"{base}/v1/jobs", json={"Job": job}, timeout=30).raise_for_status()
    waits: list[float] = []
    for _ in range(20):
        index = int(http.get(f"{base}/v1/jobs", timeout=10).headers["X-Nomad-Index"])
        stamp: list[float] = []

        def block(i: int = index, out: list[float] = stamp) -> None:
            r = http.get(f"{base}/v1/evaluations", params={"index": i, "wait": "30s"}, timeout=60)
            out.append(time.monotonic())
            assert int(r.headers["X-Nomad-Index"]) > i

        t = threading.Thread(target=block)
        t.start()
        _parked(agent, 1)
        t0 = time.monotonic()
        http.post(f"{base}/v1/jobs", json={"Job": job}, timeout=30).raise_for_status()  # same job: a new eval
        t.join(60)
        assert stamp, "the blocking query never answered"
        waits.append(stamp[0] - t0)
    waits.sort()
    p50, p99 = statistics.median(waits), waits[-1]
    n = len(waits)
    print(f"\nblocking-query wake after a write: p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms (n={n})")
    assert p99 < WAKE


def test_the_event_stream_tells_a_job_and_its_alloc_as_they_change(agent: Daemon) -> None:
    http = _session(agent)
    base = f"https://127.0.0.1:{agent.port}"
    seen: list[dict[str, Any]] = []
    with http.get(
        f"{base}/v1/event/stream",
        params=[("topic", "Job:blk"), ("topic", "Allocation:blk")],
        stream=True,
        timeout=60,
    ) as stream:
        job = http.post(f"{base}/v1/jobs/parse", json={"JobHCL": BLK_HCL}, timeout=30).json()
        http.post(f"{base}/v1/jobs", json={"Job": job}, timeout=30).raise_for_status()
        deadline = time.monotonic() + RUNNING  # heartbeats keep the read alive: the test keeps its own
        for line in stream.iter_lines():
            assert time.monotonic() < deadline, f"no running alloc in the stream within {RUNNING:g}s: {seen}"
            batch = json.loads(line)
            seen.extend(batch.get("Events", []))
            running = [
                e
                for e in seen
                if e["Topic"] == "Allocation" and e["Payload"]["Allocation"]["ClientStatus"] == "running"
            ]
            if running:
                break
    topics = {(e["Topic"], e["Type"]) for e in seen}
    assert ("Job", "JobRegistered") in topics, topics
    assert all(e["Key"] == "blk" or "blk" in e["FilterKeys"] for e in seen), "the topic filter held"
    assert (
        all(isinstance(e["Index"], int) for e in seen)
        and running[0]["Payload"]["Allocation"]["JobID"] == "blk"
    )


def test_the_node_topic_tells_the_clients_registration(agent: Daemon) -> None:
    """A stream from the node's CreateIndex on topic Node: the agent's start registered the node
    (NodeRegistration, keyed by the node ID, the api.Node as payload), at the node's ModifyIndex."""
    http = _session(agent)
    base = f"https://127.0.0.1:{agent.port}"
    (stub,) = http.get(f"{base}/v1/nodes", timeout=30).json()
    node = http.get(f"{base}/v1/node/{stub['ID']}", timeout=30).json()
    params = [("topic", "Node"), ("index", str(node["CreateIndex"]))]
    deadline = time.monotonic() + 25  # past two heartbeats: the registration is in the log already
    with http.get(f"{base}/v1/event/stream", params=params, stream=True, timeout=60) as stream:
        for line in stream.iter_lines():
            assert time.monotonic() < deadline, "no Node event in the stream"
            if line != b"{}":
                break
    (event,) = json.loads(line)["Events"]
    assert (event["Topic"], event["Type"], event["Key"]) == ("Node", "NodeRegistration", node["ID"]), event
    assert event["Index"] == node["ModifyIndex"] > node["CreateIndex"], (event["Index"], node)
    assert event["Payload"]["Node"]["ID"] == node["ID"] and event["Payload"]["Node"]["Status"] == "ready"


SVC_HCL = """
job "svc" {
  group "g" {
    network {
      mode = "bridge"
      port "http" { to = 8080 }
    }
    service {
      name     = "svc-web"
      provider = "nomad"
      port     = "http"
      tags     = ["v1"]
    }
    service {
      name = "svc-consul"
      port = "http"
    }
    task "t" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "sleep"
        args    = ["600"]
      }
    }
  }
}
"""


def test_nomad_provider_services_are_listed_while_their_alloc_runs(agent: Daemon) -> None:
    n = _client(agent)
    http = _session(agent)
    base = f"https://127.0.0.1:{agent.port}"
    job = n.jobs.parse(SVC_HCL)
    n.job.register_job("svc", {"Job": job})
    alloc = _running(n, "svc")
    listed = http.get(f"{base}/v1/services", timeout=10).json()
    assert listed == [{"Namespace": "default", "Services": [{"ServiceName": "svc-web", "Tags": ["v1"]}]}], (
        listed
    )
    (reg,) = http.get(f"{base}/v1/service/svc-web", timeout=10).json()
    full = n.allocation.get_allocation(alloc["ID"])
    host_port = full["AllocatedResources"]["Shared"]["Ports"][0]["Value"]
    assert (reg["AllocID"], reg["JobID"], reg["Port"]) == (alloc["ID"], "svc", host_port), reg
    assert http.get(f"{base}/v1/service/svc-consul", timeout=10).json() == [], (
        "a consul service is not Nomad's"
    )
    n.job.deregister_job("svc", purge=True)
    assert http.get(f"{base}/v1/services", timeout=10).json() == [], "gone with its alloc"


def _ctx(d: Daemon) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=d.api.ca_file)
    ctx.load_cert_chain(d.api.cert_file, d.api.key_file)
    return ctx


def test_nomad_alloc_exec_over_a_websocket(agent: Daemon) -> None:
    """What `nomad alloc exec -i=true -t=false ALLOC sh -c ...` sends and reads, message for message."""
    n = _client(agent)
    job = n.jobs.parse(BLK_HCL)
    n.job.register_job("blk", {"Job": job})
    alloc_id = _running(n, "blk")["ID"]
    command = urllib.parse.quote(json.dumps(["sh", "-c", "read line; echo got:$line; echo err >&2; exit 7"]))
    path = f"/v1/client/allocation/{alloc_id}/exec?task=t&tty=false&command={command}"
    ws = WsClient("127.0.0.1", agent.port, path, _ctx(agent))
    try:
        assert ws.accepted, ws.head
        ws.send({})  # a heartbeat, as Nomad's client sends every 10 s
        ws.send({"stdin": {"data": base64.b64encode(b"hello\n").decode()}})
        ws.send({"stdin": {"close": True}})
        got = ws.messages()
    finally:
        ws.close()
    out = b"".join(base64.b64decode(m["stdout"]["data"]) for m in got if "stdout" in m)
    err = b"".join(base64.b64decode(m["stderr"]["data"]) for m in got if "stderr" in m)
    assert out == b"got:hello\n" and err == b"err\n", got
    assert got[-1] == {"exited": True, "result": {"exit_code": 7}}

    # a tty session takes tty_size; an unmasked client frame breaks the format and ends the command
    tty = WsClient(
        "127.0.0.1",
        agent.port,
        f"/v1/client/allocation/{alloc_id}/exec?task=t&tty=true&command={urllib.parse.quote(json.dumps(['sh']))}",
        _ctx(agent),
    )
    try:
        tty.send({"tty_size": {"height": 40, "width": 100}})
        tty.send({"stdin": {"data": base64.b64encode(b"stty size; exit 3\n").decode()}})
        got = tty.messages()
    finally:
        tty.close()
    shown = b"".join(base64.b64decode(m["stdout"]["data"]) for m in got if "stdout" in m)
    assert b"40 100" in shown and got[-1]["result"]["exit_code"] == 3, got

    # a client that breaks the framing (an unmasked frame) ends the session as Nomad's agent does (a
    # close frame, 1002 as gorilla's protocol error; no exit message) and the command is killed
    sleeper = urllib.parse.quote(json.dumps(["sleep", "601"]))
    rude = WsClient(
        "127.0.0.1",
        agent.port,
        f"/v1/client/allocation/{alloc_id}/exec?task=t&command={sleeper}",
        _ctx(agent),
    )
    try:
        rude.send_frame(0x1, b"{}", masked=False)
        ended = rude.messages()  # within the socket's 30 s, not the command's 601 s
    finally:
        rude.close()
    assert ended == [] and rude.close_code == 1002, (ended, rude.close_code)

    def sleeper_gone() -> tuple[bool | None, str]:
        ps = WsClient(
            "127.0.0.1",
            agent.port,
            f"/v1/client/allocation/{alloc_id}/exec?task=t&command={urllib.parse.quote(json.dumps(['ps']))}",
            _ctx(agent),
        )
        try:
            listed = b"".join(base64.b64decode(m["stdout"]["data"]) for m in ps.messages() if "stdout" in m)
        finally:
            ps.close()
        return (b"sleep 601" not in listed or None), listed.decode(errors="replace")

    wait_until(sleeper_gone, timeout=30, what="the broken session's command killed")

    # refusals: not a task of the alloc, a command that is not a JSON list
    bad = WsClient(
        "127.0.0.1",
        agent.port,
        f"/v1/client/allocation/{alloc_id}/exec?task=nope&command=%5B%22sh%22%5D",
        _ctx(agent),
    )
    assert bad.status == 404 and b"nope" in bad.body, (bad.head, bad.body)
    bad = WsClient(
        "127.0.0.1", agent.port, f"/v1/client/allocation/{alloc_id}/exec?task=t&command=sh", _ctx(agent)
    )
    assert bad.status == 400 and b"JSON list" in bad.body, (bad.head, bad.body)


def test_variables_are_kept_with_check_and_set(agent: Daemon) -> None:
    n = _client(agent)
    path = "nomad/jobs/blk/creds"
    made = n.variable.create_variable(path, {"Items": {"user": "u", "pass": "p"}})
    assert made["Path"] == path and made["Items"] == {"user": "u", "pass": "p"} and made["ModifyIndex"] > 0
    assert n.variable.get_variable(path)["Items"]["pass"] == "p"
    listed = n.variables.get_variables(prefix="nomad/jobs/blk")
    assert [v["Path"] for v in listed] == [path] and "Items" not in listed[0], "metadata only in lists"
    # check-and-set: a stale index is a conflict that shows the variable as it is, and changes nothing
    with pytest.raises(nomad.api.exceptions.VariableConflict):
        n.variable.create_variable(path, {"Items": {"user": "x"}}, cas=made["ModifyIndex"] - 1)
    changed = n.variable.create_variable(path, {"Items": {"user": "v"}}, cas=made["ModifyIndex"])
    assert changed["Items"] == {"user": "v"} and changed["CreateIndex"] == made["CreateIndex"]
    with pytest.raises(nomad.api.exceptions.VariableConflict):
        n.variable.create_variable(path, {"Items": {"user": "y"}}, cas=0)  # 0: only if it does not exist
    # bad input: named, nothing stored
    for bad_path, body in (
        ("nomad", {"Items": {"a": "b"}}),
        ("a b", {"Items": {"a": "b"}}),
        ("ok", {"Items": {"a": 1}}),
    ):
        with pytest.raises(nomad.api.exceptions.BadRequestNomadException):
            n.variable.create_variable(bad_path, body)
    assert [v["Path"] for v in n.variables.get_variables()] == [path]
    n.variable.delete_variable(path)
    with pytest.raises(nomad.api.exceptions.URLNotFoundNomadException):
        n.variable.get_variable(path)


HOSTILE_HCL = """
locals {
  plant = join("; ", [
    "ln -s /etc/shadow /local/shadow",
    "ln -s / /local/root",
    "mkfifo /local/fifo",
    "ln -s ../../ /alloc/data/up",
  ])
}

job "trap" {
  group "g" {
    task "t" {
      driver = "docker"
      config {
        image   = "fieldlab/busybox:lab"
        init    = true  # busybox as PID 1 ignores SIGTERM: a stop would wait out kill_timeout
        command = "sh"
        args    = ["-c", "${local.plant}; touch /local/planted; sleep 600"]
      }
    }
  }
}
"""


def test_a_workload_cannot_steer_the_fs_api_out_of_its_alloc_dir(agent: Daemon) -> None:
    """A task plants links to host files, to the root and out of the alloc dir, and a FIFO; the
    operator reading them through Nomad's fs API gets refusals, never a host file, never a hang."""
    n = _client(agent)
    n.job.register_job("trap", {"Job": n.jobs.parse(HOSTILE_HCL)})
    alloc_id = _running(n, "trap")["ID"]
    wait_until(
        lambda: (
            "planted" in {f["Name"] for f in n.client.ls.list_files(alloc_id, "/t/local")} or None,
            "not yet",
        ),
        timeout=30,
        what="the task planted its traps",
    )
    host_shadow = Path("/etc/shadow").read_text()
    for path in (
        "/t/local/shadow",
        "/t/local/root/etc/shadow",
        "/alloc/data/up/t/local/shadow",
        "/t/local/fifo",
    ):
        with pytest.raises(nomad.api.exceptions.BaseNomadException) as refused:
            n.client.cat.read_file(alloc_id, path)
        text = refused.value.nomad_resp.text
        assert host_shadow[:20] not in text and refused.value.nomad_resp.status_code in (400, 404), (
            path,
            text,
        )
    link = n.client.stat.stat_file(alloc_id, "/t/local/shadow")
    assert link["FileMode"].startswith("L") and link["Size"] == len("/etc/shadow"), link
    with pytest.raises(nomad.api.exceptions.BaseNomadException):
        n.client.ls.list_files(alloc_id, "/t/local/root")
    with pytest.raises(nomad.api.exceptions.BaseNomadException):
        n.client.cat.read_file(alloc_id, "/t/secrets/vault_token")  # a task's secrets are never served
