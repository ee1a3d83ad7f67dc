"""The fault flags' catalogue: each flag, the field bug (FIELD-BUGS.md) it puts back and what the agent
does wrong while it is on, and which of them the agent can put back today. agent.fieldbugs.faults
reads the flags from the environment against it; docs and the repro catalogue list it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FaultSpec:
    flag: str
    bug: str  # the field bug id(s) in FIELD-BUGS.md
    description: str  # what the agent does wrong while the flag is on


_CATALOGUE: tuple[FaultSpec, ...] = (
    # Agent core: pause container, CNI, restore, orphans.
    FaultSpec(
        "no-network-check-on-restore",
        "nomad-24292",
        "restore trusts a running pause container and skips verifying the alloc's network (no CNI CHECK, "
        "no own checks), so after a reboot the alloc runs with no routes",
    ),
    FaultSpec(
        "reuse-dead-pause",
        "nomad-12216",
        "a dead pause container is not detected: tasks are restarted into it as it is ('cannot join network "
        "of a non running container') instead of recovering the group's network",
    ),
    FaultSpec(
        "no-orphan-sweep",
        "nomad-12216 orphans",
        "the orphan sweeper never runs, so containers, netns, IP reservations and CNI chains of dead allocs "
        "stay behind",
    ),
    FaultSpec(
        "sweep-untracked-pause",
        "nomad-16338",
        "the sweeper does not consult restored allocs and reaps their pause containers as untracked "
        "dangling containers",
    ),
    FaultSpec(
        "ipam-stale-after-reboot",
        "nomad-11272/15763",
        "host-local IPAM reservations are kept across reboots and restarts without reconciling, so a new "
        "ADD fails with 'duplicate allocation is not allowed'",
    ),
    FaultSpec(
        "leak-portmap-chains",
        "nomad-6385 family",
        "teardown leaves the portmap/CNI iptables chains and jumps behind when CNI DEL fails or the pause "
        "container is gone, blackholing a reused host port",
    ),
    FaultSpec(
        "restore-missing-alloc-dir",
        "nomad-27933",
        "restore goes ahead for an alloc whose directory is missing (reattached or restarted as if it "
        "were there) instead of replacing it, so the alloc runs without its alloc dir",
    ),
    FaultSpec(
        "half-alive-restore",
        "nomad-23684/17079",
        "restore takes a task recorded as running at its word without asking the driver, so an alloc "
        "whose container or process vanished while the agent was down stays 'running' with no task",
    ),
    FaultSpec(
        "stale-network-status-on-restore",
        "nomad-24236/16893",
        "when restore or recovery recreates an alloc's network, the alloc keeps its old address (API, "
        "NOMAD_ALLOC_IP of restarted tasks) instead of the one the new CNI ADD gave it",
    ),
    FaultSpec(
        "stale-restart-timer",
        "fieldlab-12-restart-tracker",
        "a restart-policy timer still fires after a later decision restarted the task (a network recovery, "
        "an operator's restart): the healthy task is stopped and started a second time for one exit",
    ),
    FaultSpec(
        "rerun-completed-on-restore",
        "nomad-5883",
        "a complete alloc the GC has not collected yet is restored as if it still ran: its tasks that "
        "finished successfully run again after an agent restart",
    ),
    FaultSpec(
        "rerun-old-allocs-on-restore",
        "nomad-1795",
        "the restore picks up every alloc left in the client's state, failed ones already replaced "
        "included, and runs them again beside their replacements",
    ),
    # Lifecycle and kills.
    FaultSpec(
        "sidecar-outlives-main",
        "nomad-8165",
        "sidecars left alone are not killed when the main tasks end, so a batch alloc with a sidecar "
        "never completes",
    ),
    FaultSpec(
        "shutdown-delay-needs-service",
        "nomad-7271",
        "a task's shutdown_delay is applied only when the task registers a service of its own: a task "
        "with no service is killed at once at its stop",
    ),
    FaultSpec(
        "no-max-kill-timeout",
        "nomad-10005",
        "the client's max_kill_timeout is not used: a task's own kill_timeout (10m, say) holds its "
        "stop that long before SIGKILL",
    ),
    FaultSpec(
        "ignore-image-stopsignal",
        "nomad-9989",
        "a docker task with no kill_signal is stopped with SIGTERM, whatever STOPSIGNAL its image "
        "sets (the image's graceful shutdown signal is never sent)",
    ),
    FaultSpec(
        "migrate-destroys-previous-alloc",
        "nomad-18034",
        "after a sticky ephemeral disk is taken over on the same node, the previous alloc's whole dir "
        "is destroyed: the logs of the alloc that failed are gone at once",
    ),
    FaultSpec(
        "group-delay-for-dead-tasks",
        "nomad-25157",
        "an alloc's stop waits its group's shutdown_delay even when no task is alive (all dead, or "
        "waiting out a restart delay): the stop hangs for nothing",
    ),
    FaultSpec(
        "sidecars-killed-with-main",
        "nomad-13055",
        "an alloc's stop kills its sidecars together with its main tasks, not after them: a proxy "
        "dies while the service behind it still drains",
    ),
    # Restarts.
    FaultSpec(
        "start-errors-unrecoverable",
        "nomad-1858",
        "every error starting a task is unrecoverable: a docker engine that does not answer for a moment "
        "(a restart, an upgrade) fails the task at its next start instead of going through the restart "
        "policy",
    ),
    FaultSpec(
        "restart-without-delay",
        "nomad-15215",
        "the restart policy's timer fires at once: a failing task is restarted without waiting its "
        "restart delay, and burns its attempts in seconds",
    ),
    # The task's environment.
    FaultSpec(
        "alloc-addr-port-zero",
        "nomad-27305",
        "NOMAD_ALLOC_ADDR_<label> takes the port's `to` as it is: a static port (or a dynamic one "
        "with no `to`) gives the alloc's address with port 0",
    ),
    FaultSpec(
        "network-status-lost-on-restore",
        "nomad-26699",
        "the network hook does not read the alloc's network status back at a restore: a task "
        "restarted after an agent restart gets no NOMAD_ALLOC_IP / NOMAD_ALLOC_ADDR_<label>",
    ),
    FaultSpec(
        "no-tmpfs-remount-on-restore",
        "nomad-28345",
        "a restore after a reboot does not mount the tasks' secrets/ tmpfs again: the recovered "
        "tasks' secrets (tokens, rendered templates) land on the node's disk",
    ),
    FaultSpec(
        "meta-not-interpolated",
        "nomad-10876",
        "a task's NOMAD_META_* variables keep their ${...} references (${NOMAD_ALLOC_ID}, "
        "${node.unique.name}) instead of the values",
    ),
    FaultSpec(
        "volume-change-in-place",
        "nomad-13008",
        "a job update that adds, changes or removes a host volume or a volume_mount is applied in "
        "place: the running allocs are not replaced and never get the new mount",
    ),
    FaultSpec(
        "no-loopback-in-netns",
        "nomad-13428",
        "the conflist's loopback plugin is not run: an alloc's network namespace made for exec or "
        "raw_exec tasks has `lo` down, so they cannot reach 127.0.0.1",
    ),
    FaultSpec(
        "cni-args-change-in-place",
        "nomad-23764",
        "a job update that changes only the group network's `cni { args }` is an in-place update: the "
        "running alloc keeps the network its old CNI_ARGS made instead of being replaced",
    ),
    FaultSpec(
        "cni-unloaded-at-teardown",
        "nomad-7537",
        "a CNI network's config is loaded by an alloc's setup only: an alloc restored at an agent start "
        "and stopped before any ADD on its network in this run gets no CNI DEL ('cni plugin not "
        "initialized'), so its IP reservation, iptables chains and kept result stay behind",
    ),
    FaultSpec(
        "log-skips-rotated-tail",
        "nomad-11721",
        "a log read moves on to the next rotated file as soon as one exists, so the lines left in the "
        "file it was reading (across the rotation) are never streamed",
    ),
    FaultSpec(
        "failed-restore-leaks-tasks",
        "nomad-17104",
        "an alloc whose restore fails is marked failed and replaced without its tasks being killed: "
        "its containers and network are left behind, still running",
    ),
    FaultSpec(
        "no-logmon-recovery",
        "nomad-5577",
        "a restore does not start a reattached task's logmon again when it is gone: the task's next "
        "write to its log pipe finds no reader and SIGPIPE kills it",
    ),
    FaultSpec(
        "no-vault-token-after-stop",
        "nomad-19268",
        "a Vault token is refused for a task of an alloc told to stop (still running on the client): the "
        "poststop task that needs one fails with 'Can't request Vault token for terminal allocation'",
    ),
    FaultSpec(
        "templates-merged-by-content",
        "nomad-26880",
        "templates are told apart by their contents alone (consul-template's hash before PR 2096): of two "
        "templates with the same text, only the first is rendered, the other's destination never written",
    ),
    FaultSpec(
        "no-teardown-after-restore",
        "nomad-17455",
        "an alloc's network taken over at an agent restart is not torn down when the alloc stops (the "
        "teardown knows only a network it created in this run): its pause container, netns and iptables "
        "rules stay behind",
    ),
    FaultSpec(
        "no-local-mount",
        "nomad-1830",
        "a docker task's local/ dir is not mounted into its container: what the agent put there "
        "(templates, artifacts) is not at /local, and a task that reads its config from there fails",
    ),
    FaultSpec(
        "recreate-netns-on-restore",
        "nomad-9757",
        "a restore does not take over the network namespace the agent made for exec or raw_exec tasks (no "
        "pause container): it recreates the group's network, so every such task is restarted by a plain "
        "agent restart",
    ),
    FaultSpec(
        "ports-keyed-by-container-port",
        "nomad-9951",
        "an alloc's port mappings are keyed by the port inside the container: of two host ports forwarded "
        "to the same container port only the last is mapped, the other does not answer",
    ),
    FaultSpec(
        "netns-left-after-batch",
        "nomad-25714",
        "the network namespace the agent made for a batch alloc's exec or raw_exec tasks is not removed "
        "when the alloc is done (its file is still held open, so the unmount fails): one netns leaks per "
        "batch run",
    ),
    FaultSpec(
        "group-without-main-task-accepted",
        "nomad-17570",
        "a task group whose tasks all have a lifecycle block (no main task) is accepted at submission "
        "instead of refused, and its alloc has nothing to run for",
    ),
    FaultSpec(
        "lifecycle-without-hook-accepted",
        "nomad-26285",
        "a lifecycle block without its required hook is accepted at submission (the task silently becomes "
        "a main task) instead of refused",
    ),
    FaultSpec(
        "restart-dead-prestart",
        "nomad-9841",
        "an alloc restart (no task named) also asks the prestart tasks that already finished to restart, "
        "and fails with 'Task not running': the main task is not restarted",
    ),
    FaultSpec(
        "host-namespaces-allowed",
        "nomad-28190",
        'a docker task\'s pid_mode, ipc_mode or uts_mode "host" is honoured although the node does not '
        "allow privileged modes: the workload sees and can signal the node's processes (CVE-2026-14891)",
    ),
    FaultSpec(
        "logs-dir-writable",
        "nomad-27918",
        "a docker task's /alloc/logs is writable: a workload can forge or truncate the logs of its "
        "alloc's other tasks (and swap their log pipes; CVE-2026-6959)",
    ),
    FaultSpec(
        "restart-batch-on-success",
        "nomad-491",
        "a batch job's task that exits 0 goes through the restart policy like a failure: it is run again "
        "(and again) instead of completing its alloc",
    ),
    FaultSpec(
        "env-from-changed-templates-only",
        "nomad-3529",
        "at a restart after a re-render, the task's environment is read only from the env templates whose "
        "content changed: the variables of its other env templates are gone",
    ),
    FaultSpec(
        "negative-cores-accepted",
        "nomad-10511",
        "a task's resources block with a negative cores value is accepted at submission instead of refused",
    ),
    FaultSpec(
        "leader-killed-with-others",
        "nomad-2753",
        "at an alloc's stop the group's leader task is killed together with the other tasks instead of "
        "first, so they lose it while it still drains",
    ),
    FaultSpec(
        "check-id-without-group",
        "nomad-16240",
        "the check watcher (check_restart) hashes a nomad service check's ID without the alloc's group, "
        "while the checker stores its results under the ID with it: the watcher never finds the check's "
        "status, and a task whose check fails is never restarted",
    ),
    # Templates and change_mode.
    FaultSpec(
        "last-event-wins",
        "nomad-24140",
        "one render-event slot per template: a later no-op render overwrites the one that changed the file "
        "before it is handled, so change_mode never fires",
    ),
    FaultSpec(
        "no-change-on-restore",
        "nomad-9636",
        "on restore, a re-rendered template whose content differs from what the task has loaded does not "
        "fire change_mode",
    ),
    FaultSpec(
        "signal-while-restarting",
        "nomad-25861",
        "a change action is fired into a task that is restarting instead of being queued until it runs, "
        "and is lost",
    ),
    FaultSpec(
        "noop-runner-dies",
        "nomad-28016",
        "with only noop templates the template watcher gives up after its retries and never comes back, "
        "so secrets go stale silently",
    ),
    FaultSpec(
        "script-change-before-handle",
        "nomad-15851/24051",
        "the change_mode script owed to a restored task is delivered before its driver handle is "
        "reattached: the script never runs ('no driver handle') and the action is recorded as delivered",
    ),
    # Job types: dispatch and periodic.
    FaultSpec(
        "dispatch-optional-meta-unset",
        "nomad-3720",
        "a dispatched job's meta_optional keys the dispatch did not give are left out of the task's "
        "environment, so ${NOMAD_META_<key>} reaches the task as written instead of empty",
    ),
    FaultSpec(
        "identity-claims-child-job-id",
        "nomad-13748",
        "a dispatched or periodic child's workload identity names the child's own job ID (nomad_job_id, "
        "sub) instead of its parent's, so no policy or role written for the job matches its tokens",
    ),
    FaultSpec(
        "periodic-restore-ignores-overlap",
        "nomad-11052",
        "the launch a periodic job missed while the agent was down is made at its start without the "
        "prohibit_overlap check: a second child runs beside the one still running",
    ),
    FaultSpec(
        "blocked-reschedule-drops-tracker",
        "nomad-12147",
        "the alloc placed for a failed alloc whose reschedule the node held (ineligible) is a new alloc "
        "without its RescheduleTracker: the policy's attempts start again and a failing job is "
        "rescheduled past them",
    ),
    FaultSpec(
        "drained-batch-replaced",
        "nomad-28008",
        "a batch alloc a node drain stopped is placed again once the node is eligible, also while the "
        "drained one is still stopping: two allocs of the batch job where Nomad keeps one",
    ),
    FaultSpec(
        "periodic-restores-stopped-job",
        "nomad-3201",
        "at its start the agent tracks a stopped periodic job again, so it keeps launching children",
    ),
    # Driver options: docker, exec (the option code of agent.drivers.dockeropts, dockermounts, execopts).
    FaultSpec(
        "volumes-relative-to-alloc-dir",
        "nomad-1977",
        "a docker task's relative `volumes` host path is joined to the alloc's dir, not the task's: "
        "'local/conf:/etc/app' binds an empty dir the engine creates, not what the task's template rendered",
    ),
    FaultSpec(
        "swap-below-hard-limit",
        "nomad-8153",
        "with memory_hard_limit the container's memory+swap limit is the task's memory (the soft "
        "reservation), below the hard limit: the engine refuses the container and the task never starts",
    ),
    FaultSpec(
        "net-raw-by-default",
        "nomad-10572",
        "docker tasks keep Docker's default NET_RAW although the plugin's allow_caps leaves it out "
        "(raw sockets: ARP spoofing between tasks of the bridge)",
    ),
    FaultSpec(
        "exec-caps-bounding-only",
        "nomad-16642",
        "an exec task of a user other than root gets its cap_add in the bounding set only: not inheritable "
        "or ambient, so its process has none of them (CapEff 0)",
    ),
    FaultSpec(
        "exec-shared-pid-namespace",
        "nomad-9911",
        "exec tasks are not isolated into their own PID and IPC namespaces: a task sees (and reads the "
        "command lines of) the node's processes, the agent's among them",
    ),
    FaultSpec(
        "exec-user-full-caps",
        "nomad-5783",
        "an exec task of a user other than root runs with every capability (CVE-2019-12618): nobody "
        "can setuid to root, escape the chroot, kill the node's processes",
    ),
    FaultSpec(
        "exec-inherits-oom-score-adj",
        "nomad-10663",
        "an exec task inherits the agent's oom_score_adj (-1000 under Nomad's packaged unit) instead of 0: "
        "the OOM killer cannot kill it, so its memory limit is not enforced",
    ),
    # Image pulls (the pull decisions of agent.drivers.pullconfig).
    FaultSpec(
        "pull-auth-not-encoded",
        "nomad-24181",
        "a pull's credentials (the task's auth, the plugin's auth.config or helper) are not handed to the "
        "engine in the encoding its API takes: it pulls with none, and a registry that needs them refuses",
    ),
    FaultSpec(
        "image-pull-timeout-ignored",
        "nomad-24991",
        "image_pull_timeout (the task's or the plugin's) does not bound the pull: a pull from a registry "
        "that never answers goes on, the task pending, until the engine gives up or pull_activity_timeout",
    ),
    FaultSpec(
        "downloading-event-after-pull",
        "nomad-2165",
        "the task's 'Downloading image' Driver event is shown only once the pull is over: a task pending on "
        "a slow pull says nothing of why until the pull ends",
    ),
)

FAULTS: dict[str, FaultSpec] = {f.flag: f for f in _CATALOGUE}
KNOWN_FAULTS: dict[str, str] = {f.flag: f"{f.bug}: {f.description}" for f in _CATALOGUE}
"""flag -> "<bug id>: <what the agent does wrong>"."""


# Flags whose bug the agent can put back today; the template flags arrive with the templates issue.
IMPLEMENTED_FAULTS = frozenset(
    {
        "no-network-check-on-restore",
        "reuse-dead-pause",
        "no-orphan-sweep",
        "sweep-untracked-pause",
        "ipam-stale-after-reboot",
        "leak-portmap-chains",
        "last-event-wins",
        "no-change-on-restore",
        "signal-while-restarting",
        "noop-runner-dies",
        "restore-missing-alloc-dir",
        "half-alive-restore",
        "stale-network-status-on-restore",
        "script-change-before-handle",
        "stale-restart-timer",
        "rerun-completed-on-restore",
        "rerun-old-allocs-on-restore",
        "sidecar-outlives-main",
        "shutdown-delay-needs-service",
        "no-max-kill-timeout",
        "alloc-addr-port-zero",
        "network-status-lost-on-restore",
        "no-tmpfs-remount-on-restore",
        "ignore-image-stopsignal",
        "migrate-destroys-previous-alloc",
        "group-delay-for-dead-tasks",
        "restart-without-delay",
        "sidecars-killed-with-main",
        "meta-not-interpolated",
        "volume-change-in-place",
        "no-loopback-in-netns",
        "cni-args-change-in-place",
        "cni-unloaded-at-teardown",
        "log-skips-rotated-tail",
        "failed-restore-leaks-tasks",
        "no-logmon-recovery",
        "no-vault-token-after-stop",
        "templates-merged-by-content",
        "no-teardown-after-restore",
        "no-local-mount",
        "recreate-netns-on-restore",
        "ports-keyed-by-container-port",
        "netns-left-after-batch",
        "group-without-main-task-accepted",
        "lifecycle-without-hook-accepted",
        "restart-dead-prestart",
        "host-namespaces-allowed",
        "logs-dir-writable",
        "restart-batch-on-success",
        "env-from-changed-templates-only",
        "negative-cores-accepted",
        "leader-killed-with-others",
        "check-id-without-group",
        "start-errors-unrecoverable",
        "volumes-relative-to-alloc-dir",
        "swap-below-hard-limit",
        "net-raw-by-default",
        "exec-caps-bounding-only",
        "exec-shared-pid-namespace",
        "exec-user-full-caps",
        "exec-inherits-oom-score-adj",
        "pull-auth-not-encoded",
        "image-pull-timeout-ignored",
        "downloading-event-after-pull",
        "dispatch-optional-meta-unset",
        "periodic-restore-ignores-overlap",
        "periodic-restores-stopped-job",
        "blocked-reschedule-drops-tracker",
        "identity-claims-child-job-id",
        "drained-batch-replaced",
    }
)
