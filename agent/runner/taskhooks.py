"""A task's hooks, made for each task runner from its task (Nomad's task runner's initHooks), in
Nomad's order, each only when the task needs it and each handed the narrow parts of its task it
uses (agent.runner.interfaces), never the task runner:

- task_dir: always;
- identity: an identity the task exposes (`file` or `env`);
- logmon: a driver that writes the task's output to files, `logs` enabled;
- docker_logger: a driver with a container log (docker), `logs` enabled;
- dispatch_payload: a dispatched job's task with `dispatch_payload`;
- artifacts: artifacts;
- vault: a vault block, on an agent with Vault;
- template: templates;
- volumes: volume_mounts;
- checks: a service (the task's or its group's) with checks.
"""

from __future__ import annotations

from agent.drivers.base import DriverError, TaskDriver, TaskHandle
from agent.identity.vaultlogin import plan_vault_login
from agent.runner.checks import CheckPorts, ChecksHook
from agent.runner.dispatchhook import DispatchPayloadHook
from agent.runner.hooks import ArtifactHook, DockerLoggerHook, LogmonHook, TaskDirHook, VolumeHook
from agent.runner.identityhook import IdentityHook, IdentityPorts, identity_signer
from agent.runner.interfaces import TaskHook, TaskHost
from agent.runner.logmonhook import LogLimits
from agent.runner.owner import task_file_owner
from agent.runner.templatehook import TemplateHook, TemplatePorts
from agent.runner.vaulthook import NewToken, VaultHook, VaultPorts
from agent.runner.vaulttoken import TaskVaultToken
from agent.structs.records import DesiredStatus
from agent.templates.runner import TaskTemplates


def task_hooks(tr: TaskHost) -> tuple[TaskHook, ...]:
    """The hooks of the task of `tr` in Nomad's order (validate has no hook here: the jobspec
    reader checks), then the check watcher's. The task's template runner is given `tr`."""
    t, d, ar = tr.t, tr.d, tr.ar
    hooks: list[TaskHook] = [
        TaskDirHook(tr, d.task_dirs, ar.alloc_dir, tr.task_dir, t.resources.secrets, d.bugs)
    ]
    sign = identity_signer(d, ar, t.name)
    if any(w.file or w.env for w in t.identities):
        identity = IdentityPorts(
            tr, sign, tr.task_dir, ar.serial.run, d.schedule, d.clock, d.identity_ttl, ar.id
        )
        hooks.append(IdentityHook(t, identity))
    try:
        driver: TaskDriver | None = tr.driver
    except DriverError:  # a driver this agent does not run: the task's start says so
        driver = None
    logs = driver is not None and not t.logs.disabled
    if logs and driver is not None and driver.log_files:
        limits = LogLimits(t.logs.max_files, t.logs.max_file_size)
        always = driver.container_log  # a container's logger writes to the pipes at every start
        hooks.append(LogmonHook(tr, d.task_logs, ar.alloc_dir, t.name, limits, always=always, bugs=d.bugs))
    if logs and driver is not None and driver.container_log:
        hooks.append(DockerLoggerHook(tr, d.task_logs, ar.alloc_dir, t.name, d.bugs))
    if ar.job.dispatched and t.dispatch_payload:
        hooks.append(DispatchPayloadHook(ar.job.payload, t.dispatch_payload, tr.task_dir, task_file_owner(t)))
    if t.artifacts:
        hooks.append(ArtifactHook(t, tr, d.getter, tr.task_dir, tr.env, ar.serial, ar.setup_cancel, ar.id))
    issuer = d.vault
    if t.vault is not None and issuer is not None:

        def make_token(on_new_token: NewToken) -> TaskVaultToken:
            return TaskVaultToken(
                alloc_id=ar.id,
                job=ar.job.id,
                task=t,
                issuer=issuer,
                role=d.vault_token_role,
                store=d.store,
                secrets_dir=tr.task_dir / "secrets",
                schedule=d.schedule,
                event=tr.event,
                on_new_token=on_new_token,
                clock=d.clock,
                jwt=plan_vault_login(t, d.vault_jwt),
                sign=sign,
            )

        vault = VaultPorts(
            lifecycle=tr,
            make_token=make_token,
            address=issuer.address,
            alloc_running=ar.alloc_running,
            alloc_stopping=lambda: ar.rec.desired is DesiredStatus.STOP,
            in_turn=ar.serial.run,
            bugs=d.bugs,
        )
        hooks.append(VaultHook(t.vault, vault))
    if t.templates:
        templates = d.templates
        rendering = TemplatePorts(lambda: TaskTemplates(tr, t, templates), tr, ar.serial, tr.task_dir, d.bugs)
        hooks.append(TemplateHook(t.name, t.templates, rendering))
    if t.volume_mounts:
        requests = {v.alias: v for v in ar.group.volumes}

        def host_volume(name: str) -> tuple[str, bool] | None:
            return d.host_volumes.get(name)  # the node's volumes as they are at each start

        own = (d.data_dir, *d.own_paths)
        hooks.append(VolumeHook(t.name, t.volume_mounts, requests, host_volume, own))
    if any(s.checks for s in (*t.services, *ar.group.services)):

        def mark_failed() -> None:
            tr.killed_as_failure = True

        def stop_task(h: TaskHandle, timeout: float, sig: str) -> None:
            tr.driver.stop(h, timeout, sig)  # the driver as it is then (never cached at the hook's making)

        checks = CheckPorts(
            task=t,
            alloc=ar,
            lifecycle=tr,
            stop_task=stop_task,
            mark_failed=mark_failed,
            results=d.check_results,
            services=d.services,
            address=lambda: d.advertise_address or d.node_address,
            max_kill_timeout=d.max_kill_timeout,
            bugs=d.bugs,
            clock=d.clock,
            schedule=d.schedule,
            offload=d.offload,
        )
        hooks.append(ChecksHook(checks))
    return tuple(hooks)
