"""What `lab up` runs on the nodes: the plan (every role, or only the per-lab work on baked nodes)
and the two ways of running it, each play timed into the lab-up's phases."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

from lab.config import LabPaths, image_role
from lab.progress import Timings
from lab.providers.base import LabRecord


def provision_plan(*, on_bake: bool, full: bool) -> str:
    """What `lab up` runs on the nodes: "per-lab" (OpenBao, PKI, AppRoles, agent config and
    package) when every node runs the current bake, fresh or a running lab whose baked inputs are
    unchanged (the bake already ran the other roles from those inputs); "every role" (site.yml) on
    bare nodes, on nodes of an older bake (a baked role changed: converge applies it), or when asked
    (--full: repairs drift on a running lab)."""
    return "per-lab" if on_bake and not full else "every role"


def runs_baked(provider: Any, record: LabRecord, tags: dict[str, str]) -> bool:
    """Whether every node runs the baked image of its role (then only the per-lab work is left)."""
    if not hasattr(provider, "images_in_use"):
        return False
    in_use = provider.images_in_use(record)
    return all(tags.get(image_role(n.role)) in in_use.get(n.name, []) for n in record.nodes)


def provision(paths: LabPaths, digest: str, timings: Timings) -> Any:
    """Every role in order (site.yml): bare nodes, or a running lab being converged."""
    from lab.playbook import PlayTimer, run_playbook

    timer = PlayTimer(timings)
    try:
        return run_playbook("site.yml", paths, extra={"fieldlab_agent_wheel_hash": digest}, on_line=timer)
    except BaseException:
        timer.fail()
        raise


def provision_baked(
    paths: LabPaths, digest: str, timings: Timings, *, running: bool = False, installed_wheel: str = ""
) -> Any:
    """The per-lab work on baked nodes: OpenBao and its PKI on the server while the rest (Consul
    detection, workload images loaded, agent package) runs beside it; then the image registry (its
    certificate, the images pushed) and the agents' credentials and service, which need both. On a
    running lab (`running`: a converge) a new agent package restarts the agent at once, as site.yml
    would."""
    from lab.playbook import PlayTimer, Recap, run_playbook

    # Every node runs the current bake, whose server image holds the controller's OpenBao binary
    # (the bake is keyed by its hash): no need to checksum 180 MB on both ends again.
    extra = {"fieldlab_agent_wheel_hash": digest, "openbao_baked": "true"}
    if running:
        extra["fieldlab_agent_service_manage"] = "true"
    if installed_wheel and not running:
        # Fresh nodes of a bake that installed this wheelhouse: the package step reads no stamp.
        extra["fieldlab_agent_installed_wheel"] = installed_wheel
    parent = "provision: per-lab work (in parallel)"
    branches = [("vault.yml", "[server]"), ("prepare.yml", "[nodes]")]
    recaps: list[Recap] = []
    with timings.phase(parent) as top, ThreadPoolExecutor(len(branches)) as pool:
        timers = {name: PlayTimer(timings, parent=parent) for name, _ in branches}
        futures = {
            name: pool.submit(run_playbook, name, paths, extra=extra, on_line=timers[name], label=label)
            for name, label in branches
        }
        errors: list[BaseException] = []
        for name, fut in futures.items():
            try:
                recaps.append(fut.result())
            except BaseException as exc:  # the first failure is raised once both ended
                timers[name].fail()
                errors.append(exc)
        if errors:
            raise errors[0]
        top.detail = f"changed={sum(r.changed for r in recaps)}"
    # The registry needs both branches: the PKI (its certificate) and the clients' images (pushed).
    for name, tags in (("registry.yml", None), ("agent.yml", "credentials,service")):
        timer = PlayTimer(timings)
        try:
            recaps.append(run_playbook(name, paths, extra=extra, tags=tags, on_line=timer))
        except BaseException:
            timer.fail()
            raise
    return Recap(
        ok=sum(r.ok for r in recaps),
        changed=sum(r.changed for r in recaps),
        failed=sum(r.failed for r in recaps),
        unreachable=sum(r.unreachable for r in recaps),
    )
