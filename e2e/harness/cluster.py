"""The lab as the suites see it: nodes and roles read from the inventory that `fieldlab lab up`
wrote, and each client's agent API over mTLS (with the operator certificate of the lab's PKI)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from agent.api.client import ApiClient, ApiError
from agent.errors import AgentError
from e2e.harness import history, nomadview
from e2e.harness.remote import Remote
from e2e.harness.target import Target, load_target
from lab.config import LabPaths
from lab.errors import ProviderError
from lab.providers.base import expand_path
from lab.ssh import SshTarget
from lab.waits import WaitTimeout, wait_until

AGENT_PORT = 4646
AGENT_DATA_DIR = "/var/lib/fieldlab-agent"  # the fieldlab_agent role's default
STOP_WAIT = 120.0  # seconds for a stopped job's allocs to end (the client's max_kill_timeout and more)


def api_client(node: Remote, secrets: Path, *, client_cert: bool = True, timeout: float = 60.0) -> ApiClient:
    """The agent's own mTLS API client for `node`, with the lab operator's certificate (`client_cert`
    False: with none, only to check that the agent refuses such a client)."""
    return ApiClient(
        f"https://{node.address}:{AGENT_PORT}",
        str(secrets / "ca.pem"),
        str(secrets / "operator.crt") if client_cert else "",
        str(secrets / "operator.key") if client_cert else "",
        timeout=timeout,
    )


class Agent:
    """One client's agent, through Nomad's HTTP API only (so a Nomad client reads the same), plus
    the task handles found on its node (e2e.harness.nomadview). Reads return None while the agent
    does not answer (it may be restarting); `request` raises AgentError naming the node."""

    def __init__(self, node: Remote, secrets: Path, data_dir: str = AGENT_DATA_DIR) -> None:
        self.node = node
        self.api = api_client(node, secrets, timeout=20.0)
        self.data_dir = data_dir  # the client's data dir (the target profile's): alloc dirs below it

    def request(self, method: str, path: str, body: Any = None) -> Any:
        try:
            return self.api.request(method, path, body)
        except AgentError as exc:
            raise AgentError(f"{self.node.name}: agent API {method} {path}: {exc}") from None

    def try_get(self, path: str) -> Any:
        try:
            return self.api.request("GET", path)
        except AgentError:
            return None

    def register(self, jobspec: str, source: str) -> dict[str, Any]:
        """Parse the HCL2 jobspec (POST /v1/jobs/parse, as the server does) and register it (PUT
        /v1/jobs), pinned to this client by a `${node.unique.name}` constraint, with its Submission
        (the jobspec as given): Nomad's JobRegisterResponse."""
        try:
            job = self.request("POST", "/v1/jobs/parse", {"JobHCL": jobspec, "Canonicalize": True})
        except AgentError as exc:
            raise AgentError(f"{source}: {exc}") from None
        submission = {"Source": jobspec, "Format": "hcl2", "VariableFlags": {}, "Variables": ""}
        body = {"Job": nomadview.pinned(job, self.node.name), "Submission": submission}
        return dict(self.request("PUT", "/v1/jobs", body))

    def run_job(self, jobspec: str, source: str) -> list[str]:
        """Register the job; the IDs of the allocations its evaluation placed."""
        out = self.register(jobspec, source)
        placed = self.request("GET", f"/v1/evaluation/{out['EvalID']}/allocations")
        ids = nomadview.alloc_ids(placed)
        history.record(history.NOTE, f"job submitted from {source}", node=self.node.name, allocs=ids)
        return ids

    def stop_job(self, job: str, timeout: float = STOP_WAIT, *, must_end: bool = True) -> None:
        """`nomad job stop JOB`: DELETE answers once the stop is decided, on Nomad and on this agent;
        then, as the CLI watches it, wait (polling, `timeout`) until no alloc of the job still runs.
        `must_end` False: a stop still going at `timeout` is not an error here (a scenario's next
        steps judge it: a task that holds its stop is the symptom of some field bugs)."""
        path = f"/v1/job/{quote(job, safe='')}"
        self.request("DELETE", path)

        def ended() -> tuple[bool | None, str]:
            allocs = self.try_get(f"{path}/allocations")
            if allocs is None:
                return None, "the agent does not answer"
            live = [str(a["ID"])[:8] for a in allocs if a.get("ClientStatus") in ("pending", "running")]
            return (True if not live else None), f"still running: {', '.join(live)}"

        try:
            wait_until(ended, timeout=timeout, what=f"{self.node.name}: the allocs of job {job} to stop")
        except WaitTimeout:
            if must_end:
                raise
        history.record(history.NOTE, f"job {job} stopped", node=self.node.name)

    def jobs(self) -> list[dict[str, Any]]:
        """GET /v1/jobs: Nomad's JobListStubs."""
        return list(self.request("GET", "/v1/jobs"))

    def handles(self) -> dict[str, nomadview.Handles]:
        """Each alloc's task handles on the node ({} when the node does not answer)."""
        script = f"python3 -c {shlex.quote(nomadview.HANDLES_SCRIPT)}"
        try:
            got = self.node.run(script, check=False, timeout=60.0, record=False)
        except ProviderError:
            return {}
        return nomadview.parse_handles(got.stdout) if got.rc == 0 else {}

    def raw_allocs(self) -> list[dict[str, Any]]:
        """GET /v1/allocations?resources=true: Nomad's AllocationListStubs, with their networks."""
        return list(self.request("GET", "/v1/allocations?resources=true"))

    def allocs(self) -> list[dict[str, Any]]:
        stubs = self.raw_allocs()
        handles = self.handles() if stubs else {}
        return [nomadview.alloc_view(a, handles.get(str(a["ID"]))) for a in stubs]

    def try_allocs(self) -> list[dict[str, Any]] | None:
        try:
            return self.allocs()
        except AgentError:
            return None

    def raw_alloc(self, alloc_id: str) -> dict[str, Any]:
        """GET /v1/allocation/<id>: Nomad's api.Allocation."""
        return dict(self.request("GET", f"/v1/allocation/{quote(alloc_id, safe='')}"))

    def alloc(self, alloc_id: str) -> dict[str, Any]:
        a = self.raw_alloc(alloc_id)
        return nomadview.alloc_view(a, self.handles().get(str(a["ID"])))

    def cat(self, alloc_id: str, path: str) -> str | None:
        """GET /v1/client/fs/cat/<alloc>?path=<path>: a file of the alloc dir as text (None: there is
        no such file, Nomad's 404; any other failure raises, naming the node)."""
        return self._text(f"/v1/client/fs/cat/{quote(alloc_id, safe='')}?path={quote(path, safe='/')}")

    def logs(self, alloc_id: str, task: str, stream: str) -> str | None:
        """GET /v1/client/fs/logs/<alloc>?task=&type=&origin=start&plain=true: the task's whole log
        as `nomad alloc logs` prints it (None: no such task or log, Nomad's 404)."""
        query = f"task={quote(task)}&type={stream}&origin=start&offset=0&plain=true"
        return self._text(f"/v1/client/fs/logs/{quote(alloc_id, safe='')}?{query}")

    def _text(self, url: str) -> str | None:
        try:
            return self.api.request_raw("GET", url)[1].decode(errors="replace")
        except ApiError as exc:
            if exc.status in (400, 404):
                return None
            raise AgentError(f"{self.node.name}: agent API GET {url}: {exc}") from None
        except AgentError as exc:
            raise AgentError(f"{self.node.name}: agent API GET {url}: {exc}") from None

    def events(self, alloc_id: str) -> list[dict[str, Any]]:
        return nomadview.alloc_events(self.raw_alloc(alloc_id))

    def node_info(self) -> dict[str, Any] | None:
        """GET /v1/node/<id> of this client (found by its name in /v1/nodes), or None when the agent
        does not answer."""
        nodes = self.try_get("/v1/nodes")
        mine = [n for n in nodes or [] if n.get("Name") == self.node.name]
        if not mine:
            return None
        got = self.try_get(f"/v1/node/{quote(str(mine[0]['ID']), safe='')}")
        return dict(got) if isinstance(got, dict) else None

    def agent_stats(self) -> dict[str, str] | None:
        """Stats["fieldlab"] of /v1/agent/self: this agent's health beyond Nomad's (its Vault login,
        restore_seconds, sweeps; strings, as Nomad's Stats). {} from an agent without it (Nomad's);
        None when the agent does not answer."""
        body = self.try_get("/v1/agent/self")
        if not isinstance(body, dict):
            return None
        return dict((body.get("stats") or {}).get("fieldlab") or {})

    def swept(self) -> list[tuple[str, str, str]]:
        """What the agent's orphan sweeper removed lately, as (kind, owner alloc, target): what an
        alloc's own teardown should have removed. [] from an agent that does not say (Nomad's)."""
        raw = (self.agent_stats() or {}).get("swept") or ""
        out = []
        for item in raw.split(","):
            kind, _, rest = item.partition(":")
            owner, _, target = rest.partition(":")
            if kind and target:
                out.append((kind, owner, target))
        return out

    def metrics(self) -> dict[str, float] | None:
        """The agent's Prometheus metrics as {name{labels}: value}, or None when it does not answer."""
        try:
            _, raw = replace(self.api, timeout=10.0).request_raw("GET", "/v1/metrics?format=prometheus")
        except AgentError:
            return None
        text = raw.decode()
        out = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def healthy(self) -> tuple[dict[str, Any] | None, str]:
        """For wait_until: Nomad's health body once the agent's client answers ok."""
        body = self.try_get("/v1/agent/health")
        if not isinstance(body, dict):
            return None, f"{self.node.name}: agent does not answer (or is unhealthy)"
        client = body.get("client") or {}
        return (body if client.get("ok") else None), f"{self.node.name}: health {client}"


@dataclass(frozen=True)
class Cluster:
    name: str
    paths: LabPaths
    servers: list[Remote]
    clients: list[Remote]  # the full clients (a docker engine each): what every suite but fleet uses
    light: list[Remote] = field(default_factory=list)  # light clients (no docker; docs/fleet.md)
    # Whether the agents offer raw_exec (`lab up --raw-exec`; a lab from before the option had it on).
    raw_exec: bool = True
    # What the clients are, beyond Nomad's API: this project's agent, or Nomad (e2e/targets/)
    target: Target = field(default_factory=load_target)

    @property
    def nodes(self) -> list[Remote]:
        return self.servers + self.clients

    @property
    def fleet(self) -> list[Remote]:
        """Every client, full and light: what the fleet suite storms."""
        return self.clients + self.light

    def node(self, name: str) -> Remote:
        for n in self.nodes + self.light:
            if n.name == name:
                return n
        raise KeyError(f"lab {self.name} has no node {name} (has {[n.name for n in self.nodes]})")

    @property
    def secrets(self) -> Path:
        return self.paths.secrets_dir

    def agent(self, node: Remote | str) -> Agent:
        n = self.node(node) if isinstance(node, str) else node
        if n not in self.fleet:
            raise KeyError(f"{n.name} is not a client of lab {self.name}: it runs no agent")
        return Agent(n, self.secrets, self.target.data_dir)

    def api(self, node: Remote, *, client_cert: bool = True, timeout: float = 60.0) -> ApiClient:
        """The agent's API client for `node` (see `api_client`); `agent(node)` wraps one for the suites."""
        return api_client(node, self.secrets, client_cert=client_cert, timeout=timeout)

    def other_client(self, node: Remote) -> Remote:
        """A client other than `node`, to test reachability across the lab network."""
        others = [c for c in self.clients if c != node]
        if not others:
            raise KeyError(f"lab {self.name} has one client: reachability needs a second (CLIENTS=2)")
        return others[0]

    @property
    def vault_addr(self) -> str:
        return f"http://{self.servers[0].address}:8200"


def node_target(name: str, hv: dict[str, Any], lab_vars: dict[str, Any], paths: LabPaths) -> SshTarget:
    """How the harness reaches one host of the lab's inventory, as Ansible does: the host's own port,
    user and key over the lab-wide ones, the key path with `~` and `$HOME` expanded (pure but for the
    environment)."""

    def var(key: str, default: Any = None) -> Any:
        return hv.get(key, lab_vars.get(key, default))

    key = expand_path(str(var("ansible_ssh_private_key_file") or ""))
    return SshTarget(
        name,
        str(hv["ansible_host"]),
        int(var("ansible_port", 22)),
        str(var("ansible_user", "root")),
        Path(key) if key else None,
        paths.state_dir / "known_hosts",
    )


def load_cluster(lab: str, target: str | None = None) -> Cluster:
    """The lab `lab` as its inventory says; `target` (else the inventory's `fieldlab_target`, else
    "fieldlab") names the target profile of its clients."""
    paths = LabPaths(lab)
    if not paths.inventory.exists():
        raise FileNotFoundError(
            f"no inventory for lab {lab!r} at {paths.inventory}: run `make lab-up LAB={lab}`"
        )
    inv = yaml.safe_load(paths.inventory.read_text())["all"]

    def remotes(group: str) -> list[Remote]:
        hosts = (inv["children"].get(group) or {}).get("hosts") or {}
        return [Remote(node_target(name, hv or {}, inv["vars"], paths)) for name, hv in hosts.items()]

    light = ((inv["children"].get("clients") or {}).get("children") or {}).get("light_clients") or {}
    light_hosts = light.get("hosts") or {}
    return Cluster(
        lab,
        paths,
        remotes("servers"),
        remotes("clients"),
        [Remote(node_target(name, hv or {}, inv["vars"], paths)) for name, hv in light_hosts.items()],
        bool(inv["vars"].get("fieldlab_agent_raw_exec_enabled", True)),
        load_target(target or str(inv["vars"].get("fieldlab_target") or "fieldlab")),
    )
