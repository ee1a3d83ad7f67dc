"""Running a scenario file (e2e.harness.scenario) on the lab: each step through the harness's faults
and waits, then the checks. The vocabulary and what each word means: e2e/harness/scenario.py."""

from __future__ import annotations

import base64
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from agent.errors import AgentError
from e2e.harness import history, invariants, nomadview, scenario_jobspec, vaultpolicy
from e2e.harness.cluster import Agent, Cluster
from e2e.harness.faults import (
    AgentDown,
    AgentRestart,
    ContainerKill,
    DockerDown,
    DockerRestart,
    Fault,
    Partition,
    ProcessKill,
    Reboot,
    RegistryFault,
    VaultOutage,
    alloc_containers,
)
from e2e.harness.jobs import restart_delay
from e2e.harness.remote import Remote
from e2e.harness.scenario import (
    Scenario,
    Step,
    substitute_images,
)
from e2e.harness.scenario_judge import SWEPT_KEY, check_problems, family_problems, file_paths, wait_state
from e2e.harness.waits import WaitTimeout, wait_until

CHECK_POLL = 1.0  # seconds between two looks while the checks must hold
NEXT_SWEEP = 150.0  # the agent sweeps every 60 s by default (the lab: 15 s)
CHECK_SLACK = 60.0  # past `hold`: the looks themselves take time (each reads the alloc over the API)
INVARIANTS_NOW = 20.0  # seconds the `invariants` check gives the node to settle (the sweeper's grace is 60)
STOP_STEP_WATCH = 60.0  # the client's max_kill_timeout (30 s in the lab) and a margin
LAUNCH_SLACK = 5.0  # seconds past a cron time before it counts as passed (the node's clock may lag)


@dataclass
class ScenarioRun:
    """One scenario on one client: the job it submitted, the agent it left down (if any)."""

    cluster: Cluster
    scenario: Scenario
    node: Remote
    job: str = ""
    alloc_id: str = ""
    down: AgentDown | None = None
    substitutions: list[str] = field(default_factory=list)
    policies: vaultpolicy.RunPolicies | None = None
    refusal: str | None = None  # what the agent said refusing the job (run: {refused: RE})
    children: list[str] = field(default_factory=list)  # child jobs the steps made (dispatch, force)
    periodic: dict[str, Any] | None = None  # the job's Periodic (api.PeriodicConfig), when it is one
    ineligible: bool = False  # node_eligibility left the node ineligible: cleanup makes it eligible
    registry: RegistryFault | None = None  # the registry fault in effect: `registry: up` or cleanup heals
    earlier: set[str] = field(default_factory=set)  # the job's allocs listed before `run` (an earlier
    # run's, kept until the GC as Nomad keeps them): not this run's, so no `allocs` check counts them
    earlier_children: set[str] = field(default_factory=set)  # the job's child jobs listed before
    # `run` (an earlier run's launches, stopped but kept as Nomad keeps them): not this run's children

    @property
    def agent(self) -> Agent:
        return self.cluster.agent(self.node)

    # -- the steps -----------------------------------------------------------------------------------
    def run_steps(self) -> None:
        for i, step in enumerate(self.scenario.steps, 1):
            history.record(
                history.NOTE,
                f"scenario step {i}/{len(self.scenario.steps)}: {step.describe()}",
                node=self.node.name,
            )
            getattr(self, f"_step_{step.name}")(step)
        if self.down is not None:  # a scenario that ends with the agent down: started for the checks
            self._step_agent_start(Step("agent_start"))

    def _step_run(self, step: Step) -> None:
        source = self.scenario.jobspec
        assert source is not None
        text = source.read_text()
        if step.arg is not None:
            self._refused(text, source.name, str(step.arg["refused"]))
            return
        job_id = scenario_jobspec.job_id(text)
        self.earlier = set(self._listed_allocs(job_id))
        self.earlier_children = {str(j["ID"]) for j in self.agent.jobs() if j.get("ParentID") == job_id}
        job, ids = self._register(text, source.name)
        self.job = str(job.get("ID") or job_id)
        periodic = job.get("Periodic") if (job.get("Periodic") or {}).get("Enabled") else None
        if job.get("ParameterizedJob") or periodic:  # Nomad places nothing until a dispatch or launch
            self.periodic = periodic
            if ids:
                raise AssertionError(f"{source.name}: a parameterized or periodic job placed {ids} at run")
            history.record(history.NOTE, f"job registered from {source.name}", node=self.node.name)
            return
        if not ids:
            raise AssertionError(f"{source.name}: the job placed no alloc on {self.node.name}")
        self.alloc_id = ids[0]
        history.record(history.NOTE, f"job submitted from {source.name}", node=self.node.name, allocs=ids)

    def _refused(self, text: str, name: str, want: str) -> None:
        """The submission must be refused, with a message matching `want` (what Nomad says)."""
        try:
            job, ids = self._register(text, name)
        except AgentError as exc:
            if not re.search(want, str(exc)):
                raise AssertionError(f"{name}: refused, but not with /{want}/: {exc}") from None
            self.refusal = str(exc)
            history.record(history.NOTE, f"job refused as it must be: {exc}", node=self.node.name)
            return
        self.job, self.alloc_id = str(job.get("ID") or scenario_jobspec.job_id(text)), (ids or [""])[0]
        raise AssertionError(
            f"{name}: the job was accepted ({len(ids)} alloc(s) placed); it must be refused: /{want}/"
        )

    def _step_update(self, step: Step) -> None:
        """A new version of the job (the same id): the scenario's alloc stays the first placed."""
        source = Path(str(step.arg))
        _, ids = self._register(source.read_text(), source.name)
        history.record(history.NOTE, f"job updated from {source.name}", node=self.node.name, allocs=ids)

    def _register(self, text: str, source: str) -> tuple[dict[str, Any], list[str]]:
        """Parse, map the images, pin, register: the job and the allocs its evaluation placed. HCL2
        is parsed by the agent (`nomad job run`); an API job in JSON is registered as it is
        (`nomad job run -json`: e2e.harness.scenario_jobspec)."""
        given = scenario_jobspec.api_job(text)
        if given is None:
            job = self.agent.request("POST", "/v1/jobs/parse", {"JobHCL": text, "Canonicalize": True})
        else:
            job = given
            history.record(
                history.NOTE, f"{source}: a JSON API job, registered as given", node=self.node.name
            )
        job, self.substitutions = substitute_images(job, self.scenario.images)
        job = self._own_policies(job)
        for line in self.substitutions:
            history.record(history.NOTE, f"image substituted: {line}", node=self.node.name)
        submission = scenario_jobspec.submission(text)
        body = {"Job": nomadview.pinned(job, self.node.name), "Submission": submission}
        out = self.agent.request("PUT", "/v1/jobs", body)
        placed = self.agent.request("GET", f"/v1/evaluation/{out['EvalID']}/allocations")
        return job, nomadview.alloc_ids(placed)

    def _own_policies(self, job: dict[str, Any]) -> dict[str, Any]:
        """The report's own Vault policies replaced by one created for the run (vaultpolicy)."""
        if not vaultpolicy.report_policies(job):
            return job
        # The lab's OpenBao (its init file is the lab's) serves this agent under either target's names
        # (a `--layout nomad` lab too); a Nomad cluster's own Vault is not the harness's to write.
        init = self.cluster.paths.secrets_dir / "openbao-init.json"
        if not init.exists():
            history.record(
                history.NOTE, "vault policies kept as the report names them (no lab OpenBao for the run's)"
            )
            return job
        self.policies = vaultpolicy.RunPolicies(self.cluster.vault_addr, init)
        names = vaultpolicy.service_names(job)
        name = self.policies.create(str(job["ID"]), names)
        job, done = vaultpolicy.substitute_policies(job, name)
        for line in done:
            self.substitutions.append(line)
            history.record(
                history.NOTE,
                f"policy substituted: {line} (created for the run: {', '.join(names)})",
                node=self.node.name,
            )
        return job

    # -- job types and node verbs (a dispatch, a periodic launch, the node's eligibility) ---------
    def _step_dispatch(self, step: Step) -> None:
        """`nomad job dispatch [-meta K=V] JOB [payload]`: the child's alloc is the scenario's."""
        payload = base64.b64encode(str(step.arg.get("payload", "")).encode()).decode()
        body = {"JobID": self.job, "Meta": step.arg.get("meta") or {}, "Payload": payload}
        out = self.agent.request("POST", f"/v1/job/{quote(self.job, safe='')}/dispatch", body)
        self._adopt(str(out["DispatchedJobID"]), str(out["EvalID"]))

    def _step_periodic_force(self, step: Step) -> None:
        """`nomad job periodic force JOB`: the launched child's alloc is the scenario's."""
        out = self.agent.request("POST", f"/v1/job/{quote(self.job, safe='')}/periodic/force", {})
        placed = self.agent.request("GET", f"/v1/evaluation/{out['EvalID']}/allocations")
        child = str(placed[0]["JobID"]) if placed else ""
        self._adopt(child, str(out["EvalID"]))

    def _adopt(self, child: str, eval_id: str) -> None:
        ids = nomadview.alloc_ids(self.agent.request("GET", f"/v1/evaluation/{eval_id}/allocations"))
        if not child or not ids:
            raise AssertionError(f"job {self.job}: the child {child or '(none)'} placed no alloc")
        self.children.append(child)
        self.alloc_id = self.alloc_id or ids[0]
        history.record(history.NOTE, f"child job {child} placed", node=self.node.name, allocs=ids)

    def _step_node_eligibility(self, step: Step) -> None:
        """`nomad node eligibility -enable|-disable` of the scenario's node."""
        info = self.agent.node_info()
        if info is None:
            raise AssertionError(f"node_eligibility: {self.node.name} is not among the agent's nodes")
        body = {"NodeID": info["ID"], "Eligibility": step.arg}
        self.agent.request("PUT", f"/v1/node/{quote(str(info['ID']), safe='')}/eligibility", body)
        self.ineligible = step.arg == "ineligible"

    def _step_node_drain(self, step: Step) -> None:
        """`nomad node drain -enable -force` (a negative deadline) or `-deadline SECONDS`: the node is
        ineligible from then on, until a node_eligibility step or the cleanup."""
        self._drain(
            {"Deadline": -1 if step.arg == "force" else int(float(step.arg) * 1e9), "IgnoreSystemJobs": False}
        )
        self.ineligible = True

    def _drain(self, spec: dict[str, Any] | None) -> None:
        """PUT /v1/node/:id/drain (None: `nomad node drain -disable`, and the node eligible again)."""
        info = self.agent.node_info()
        if info is None:
            raise AssertionError(f"node_drain: {self.node.name} is not among the agent's nodes")
        body = {"NodeID": info["ID"], "DrainSpec": spec, "MarkEligible": spec is None}
        self.agent.request("PUT", f"/v1/node/{quote(str(info['ID']), safe='')}/drain", body)

    def job_children(self) -> list[dict[str, Any]]:
        """This run's child jobs, oldest first: {"id", "live"} (live: an alloc pending or running).
        An earlier run's children of the same job (a repro's other half) are not this run's."""
        kids = sorted(
            str(j["ID"])
            for j in self.agent.jobs()
            if j.get("ParentID") == self.job and str(j["ID"]) not in self.earlier_children
        )
        out = []
        for kid in kids:
            allocs = self.agent.request("GET", f"/v1/job/{quote(kid, safe='')}/allocations")
            out.append(
                {"id": kid, "live": any(a.get("ClientStatus") in ("pending", "running") for a in allocs)}
            )
        return out

    def _wait_children(self, step: Step) -> None:
        def enough() -> tuple[bool | None, str]:
            kids = self.job_children()
            return (True if len(kids) >= step.arg["children"] else None), f"{len(kids)} child jobs"

        wait_until(enough, timeout=step.timeout, what=f"{self.node.name}: {step.describe()}")
        for kid in self.job_children():
            if kid["id"] not in self.children:
                self.children.append(kid["id"])
        if not self.alloc_id:
            allocs = self.agent.request("GET", f"/v1/job/{quote(self.children[0], safe='')}/allocations")
            if not allocs:
                raise AssertionError(f"child job {self.children[0]} has no alloc")
            self.alloc_id = str(allocs[0]["ID"])

    def _wait_launch_due(self, step: Step) -> None:
        """The next cron time after the newest child's launch (its ID's `periodic-<unix>`) passed, by
        the agent's own rule (agent.nomadapi.jobperiodic.next_launch) over the job's Periodic."""
        from agent.nomadapi.jobperiodic import launch_time, next_launch
        from agent.structs.model import Periodic

        if self.periodic is None:
            raise AssertionError("wait launch_due: the scenario's job is not periodic")
        times = [t for c in self.job_children() if (t := launch_time(self.job, c["id"])) is not None]
        if not times:
            raise AssertionError(f"wait launch_due: job {self.job} has launched no child yet")
        p = self.periodic
        spec = Periodic(
            str(p.get("Spec") or ""), tuple(p.get("Specs") or ()), str(p.get("TimeZone") or "UTC")
        )
        due = next_launch(spec, float(max(times))) + LAUNCH_SLACK

        def passed() -> tuple[bool | None, str]:
            left = due - time.time()
            return (True if left <= 0 else None), f"{max(0.0, left):.0f}s to the next launch time"

        wait_until(passed, timeout=step.timeout, what=f"{self.node.name}: {step.describe()}")

    def _step_wait(self, step: Step) -> None:
        if isinstance(step.arg, dict) and "children" in step.arg:
            self._wait_children(step)
            return
        if isinstance(step.arg, dict) and "launch_due" in step.arg:
            self._wait_launch_due(step)
            return
        if step.arg == "invariants":
            invariants.wait_invariants(self.cluster, "scenario step", [self.node], timeout=step.timeout)
            return

        if isinstance(step.arg, dict) and "file" in step.arg:
            where, pattern = str(step.arg["file"]), step.arg.get("contains")

            def exists() -> tuple[bool | None, str]:
                text = self.agent.cat(self.alloc_id, where)
                if text is None:
                    return None, f"{where} missing"
                if pattern and not re.search(str(pattern), text, re.MULTILINE):
                    return None, f"{where}: no line matches {pattern!r} (last: {text.strip()[-80:]!r})"
                return True, f"{where} exists"

            wait_until(exists, timeout=step.timeout, what=f"{self.node.name}: {step.describe()}")
            return

        def reached() -> tuple[bool | None, str]:
            alloc = self.agent.alloc(self.alloc_id)
            events = self.agent.events(self.alloc_id)
            ok, seen = wait_state(step, alloc, events)
            return (True if ok else None), seen

        wait_until(reached, timeout=step.timeout, what=f"{self.node.name}: {step.describe()}")

    def _step_agent_restart(self, step: Step) -> None:
        self._fault(AgentRestart(self.cluster, self.node, signal=str(step.arg)))

    def _step_agent_stop(self, step: Step) -> None:
        if self.down is not None:
            raise AssertionError("agent_stop: the agent is down already (agent_start first)")
        self.down = AgentDown(self.cluster, self.node)
        self.down.inject()

    def _step_agent_start(self, step: Step) -> None:
        if self.down is None:
            raise AssertionError("agent_start: the agent is not down (agent_stop first)")
        down, self.down = self.down, None
        down.heal()

    def _step_reboot(self, step: Step) -> None:
        self._fault(Reboot(self.cluster, self.node, hard=step.arg == "hard"))

    def _step_docker_restart(self, step: Step) -> None:
        self._fault(DockerRestart(self.cluster, self.node))

    def _step_docker_down(self, step: Step) -> None:
        self._fault(DockerDown(self.cluster, self.node), hold=float(step.arg))

    def _step_kill(self, step: Step) -> None:
        self._fault(ContainerKill(self.cluster, self.node, alloc_id=self.alloc_id, which=str(step.arg)))

    def _step_kill_process(self, step: Step) -> None:
        self._fault(ProcessKill(self.cluster, self.node, alloc_id=self.alloc_id, task=str(step.arg)))

    def _step_kill_logmon(self, step: Step) -> None:
        pidfile = f"{self.cluster.target.data_dir}/alloc/{self.alloc_id}/.logmon/{step.arg}.pid"
        got = self.node.run(f"kill -9 $(cat {pidfile})", check=False)
        if got.rc != 0:
            raise AssertionError(f"kill_logmon: no logmon of task {step.arg} ({pidfile}): {got.stderr}")

    def _step_remove_containers(self, step: Step) -> None:
        role = None if step.arg == "all" else str(step.arg)
        ids = alloc_containers(self.node, self.alloc_id, role, target=self.cluster.target)
        if not ids:
            raise AssertionError(f"remove_containers: alloc {self.alloc_id[:8]} has no {step.arg} container")
        self.node.run("docker rm -f " + " ".join(ids))

    def _step_remove_alloc_dir(self, step: Step) -> None:
        d = f"{self.cluster.target.data_dir}/alloc/{self.alloc_id}"
        # Its secrets/ tmpfs mounts go first, as a lost or replaced disk would take them.
        self.node.run(f"findmnt -rn -o TARGET | grep '^{d}/' | sort -r | xargs -r umount -l; rm -rf {d}")

    def _step_vault_outage(self, step: Step) -> None:
        self._fault(VaultOutage(self.cluster, self.cluster.servers[0]), hold=float(step.arg))

    def _step_registry(self, step: Step) -> None:
        """The lab's image registry (on the first server) down or slow until `registry: up`."""
        if self.registry is not None:
            self.registry.heal()
            self.registry = None
        if step.arg != "up":
            fault = RegistryFault(self.cluster, self.cluster.servers[0], mode=str(step.arg))
            fault.inject()
            self.registry = fault

    def _step_partition(self, step: Step) -> None:
        self._fault(Partition(self.cluster, self.node), hold=float(step.arg))

    def _step_stop_job(self, step: Step) -> None:
        """`nomad job stop`: watched for at most STOP_STEP_WATCH, the client's max_kill_timeout and a
        margin; a stop still going then is for the next steps to judge, not an error of this one."""
        self.agent.stop_job(self.job, STOP_STEP_WATCH, must_end=False)

    def _step_restart_alloc(self, step: Step) -> None:
        """`nomad alloc restart ID`: PUT /v1/client/allocation/:id/restart with no task named."""
        try:
            self.agent.request("PUT", f"/v1/client/allocation/{self.alloc_id}/restart", {})
        except AgentError as exc:
            raise AssertionError(f"nomad alloc restart {self.alloc_id[:8]} failed: {exc}") from None

    def _fault(self, fault: Fault, hold: float = 0.0) -> None:
        fault.inject()
        try:
            if hold:
                fault.hold(hold)
        finally:
            fault.heal()

    # -- the checks ----------------------------------------------------------------------------------
    def problems(self) -> list[str]:
        # a periodic job that must launch nothing has no alloc: its checks are of its children
        alloc = self.agent.alloc(self.alloc_id) if self.alloc_id else {}
        events = self.agent.events(self.alloc_id) if self.alloc_id else []
        files = {p: self._read(p) for p in file_paths(self.scenario.checks)}
        out: list[str] = []
        for check in self.scenario.checks:
            if check.name in ("children", "allocs"):
                out += self._family_problems(check, alloc)
            else:
                out += check_problems(check, alloc, events, files)
        return out

    def _family_problems(self, check: Step, alloc: dict[str, Any]) -> list[str]:
        if check.name == "children":
            return family_problems(check, self.job, self.job_children(), [])
        job = str(self.agent.raw_alloc(self.alloc_id)["JobID"]) if alloc else self.job
        ids = [i for i in self._listed_allocs(job) if i not in self.earlier]
        return family_problems(check, job, [], ids)

    def _listed_allocs(self, job: str) -> list[str]:
        """The job's allocs as the agent lists them (none when it has no such job)."""
        try:
            allocs = self.agent.request("GET", f"/v1/job/{quote(job, safe='')}/allocations")
        except AgentError as exc:
            if "404" in str(exc):
                return []
            raise
        return nomadview.alloc_ids(allocs)

    def _read(self, what: str) -> str | None:
        if what == SWEPT_KEY:
            return self._swept_after_next_sweep()
        if what.startswith("logs:"):
            _, task, stream = what.split(":", 2)
            return self.agent.logs(self.alloc_id, task, stream)
        return self.agent.cat(self.alloc_id, what)

    def _swept_after_next_sweep(self) -> str:
        """What the sweeper removed, once it swept again after now: a leak the teardown left is
        then either still there (the invariants see it) or in this list. "" from an agent that
        does not count its sweeps (Nomad's)."""
        before = (self.agent.agent_stats() or {}).get("sweeps")
        if not before:
            return ""

        def swept_again() -> tuple[bool | None, str]:
            now = (self.agent.agent_stats() or {}).get("sweeps") or before
            return (True if int(now) > int(before) else None), f"{before} sweeps so far"

        wait_until(swept_again, timeout=NEXT_SWEEP, what="the agent's next orphan sweep")
        return "\n".join(" ".join(r) for r in self.agent.swept())

    def run_checks(self) -> None:
        """The checks now and, with `hold`, every second for that long; then the invariants (if
        asked) past the job's restart delay. AssertionError with what was wrong."""
        if self.refusal is not None:  # run: {refused: RE}, and it was
            history.check(f"scenario {self.scenario.bug}", [], node=self.node.name)
            return
        hold = self.scenario.hold
        end = time.monotonic() + hold

        def holding() -> tuple[bool | None, str]:
            found = self.problems()  # polls are not checks: the verdict is recorded once, below
            if found:
                history.check(f"scenario {self.scenario.bug}", found, node=self.node.name)
                raise AssertionError(f"{self.scenario.bug}: " + "; ".join(found))
            left = end - time.monotonic()
            return (True if left <= 0 else None), f"checks holding, {max(0.0, left):.0f}s to go"

        wait_until(
            holding, timeout=hold + CHECK_SLACK, what=f"the checks held for {hold:.0f}s", interval=CHECK_POLL
        )
        history.check(f"scenario {self.scenario.bug}", [], node=self.node.name)
        if any(c.name == "invariants" for c in self.scenario.checks):
            # now (a leak the sweeper would clear a minute later is a leak), then past the restarts
            invariants.wait_invariants(
                self.cluster, f"scenario {self.scenario.bug}", [self.node], timeout=INVARIANTS_NOW
            )
            source = self.scenario.jobspec
            delay = restart_delay(source.read_text()) if source else 0.0
            invariants.final_check(self.cluster, f"scenario {self.scenario.bug}", [self.node], delay=delay)

    def cleanup(self) -> None:
        if self.registry is not None:
            try:
                self._step_registry(Step("registry", "up"))
            except Exception as exc:
                print(f"[e2e] could not heal the registry fault: {exc}")
        if self.down is not None:
            self._step_agent_start(Step("agent_start"))
        if self.ineligible:  # a drain still running is cancelled as well
            try:
                self._drain(None)
            except Exception as exc:
                print(f"[e2e] could not make {self.node.name} eligible again: {exc}")
        # the parent first, so that no launch comes between listing its children and stopping it
        if self.job:
            try:
                self.agent.stop_job(self.job)
            except Exception as exc:  # the agent may be what broke: say so, let the test's error stand
                print(f"[e2e] could not stop job {self.job} on {self.node.name}: {exc}")
            # a child job is a job of its own: `job stop` of the parent leaves it running
            try:
                self.children += [c["id"] for c in self.job_children() if c["id"] not in self.children]
            except Exception as exc:
                print(f"[e2e] could not list the child jobs of {self.job} on {self.node.name}: {exc}")
        for child in self.children:
            try:
                self.agent.stop_job(child)
            except Exception as exc:
                print(f"[e2e] could not stop job {child} on {self.node.name}: {exc}")
        if self.policies is not None:
            try:
                self.policies.undo()
            except Exception as exc:
                print(f"[e2e] could not remove the run's vault policies {self.policies.created}: {exc}")


def run_scenario(cluster: Cluster, scenario: Scenario) -> dict[str, Any]:
    """The scenario's steps then its checks on its client; always stops its job afterwards.
    Returns what the report notes: the alloc and the image substitutions."""
    node = cluster.node(scenario.node) if scenario.node else cluster.clients[0]
    run = ScenarioRun(cluster, scenario, node)
    try:
        run.run_steps()
        run.run_checks()
    except WaitTimeout as exc:
        raise AssertionError(f"{scenario.bug}: {exc}") from None
    finally:
        run.cleanup()
    return {"alloc": run.alloc_id, "substitutions": run.substitutions}
