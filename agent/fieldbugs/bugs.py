"""The field bugs the agent can put back on demand (`agent.fieldbugs.faults`), as one frozen value.

The pure decisions take it as a parameter; nothing else branches on it. Kept apart from
agent.decide.decisions so the list of bugs can grow without that module growing past one purpose.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Bugs:
    """The field bugs put back by fault flags (FIELD-BUGS.md), read once at start.

    One field per flag of `agent.fieldbugs.faults`, named like the flag with `_` for `-`. Every field False
    is the fixed agent. Imperative code never asks whether a bug is on: it hands this object to
    the `plan_*` decisions, which are the only place a bug changes what the agent does.
    """

    no_network_check_on_restore: bool = False
    reuse_dead_pause: bool = False
    no_orphan_sweep: bool = False
    sweep_untracked_pause: bool = False
    ipam_stale_after_reboot: bool = False
    leak_portmap_chains: bool = False
    restore_missing_alloc_dir: bool = False
    half_alive_restore: bool = False
    stale_network_status_on_restore: bool = False
    last_event_wins: bool = False
    no_change_on_restore: bool = False
    signal_while_restarting: bool = False
    noop_runner_dies: bool = False
    script_change_before_handle: bool = False
    stale_restart_timer: bool = False
    rerun_completed_on_restore: bool = False
    rerun_old_allocs_on_restore: bool = False
    sidecar_outlives_main: bool = False
    shutdown_delay_needs_service: bool = False
    no_max_kill_timeout: bool = False
    alloc_addr_port_zero: bool = False
    network_status_lost_on_restore: bool = False
    no_tmpfs_remount_on_restore: bool = False
    ignore_image_stopsignal: bool = False
    migrate_destroys_previous_alloc: bool = False
    group_delay_for_dead_tasks: bool = False
    restart_without_delay: bool = False
    sidecars_killed_with_main: bool = False
    meta_not_interpolated: bool = False
    volume_change_in_place: bool = False
    no_loopback_in_netns: bool = False
    cni_args_change_in_place: bool = False
    cni_unloaded_at_teardown: bool = False
    log_skips_rotated_tail: bool = False
    failed_restore_leaks_tasks: bool = False
    no_logmon_recovery: bool = False
    no_vault_token_after_stop: bool = False
    templates_merged_by_content: bool = False
    no_teardown_after_restore: bool = False
    no_local_mount: bool = False
    recreate_netns_on_restore: bool = False
    ports_keyed_by_container_port: bool = False
    netns_left_after_batch: bool = False
    group_without_main_task_accepted: bool = False
    lifecycle_without_hook_accepted: bool = False
    restart_dead_prestart: bool = False
    host_namespaces_allowed: bool = False
    logs_dir_writable: bool = False
    restart_batch_on_success: bool = False
    env_from_changed_templates_only: bool = False
    negative_cores_accepted: bool = False
    leader_killed_with_others: bool = False
    check_id_without_group: bool = False
    start_errors_unrecoverable: bool = False
    volumes_relative_to_alloc_dir: bool = False
    swap_below_hard_limit: bool = False
    net_raw_by_default: bool = False
    exec_caps_bounding_only: bool = False
    exec_shared_pid_namespace: bool = False
    exec_user_full_caps: bool = False
    exec_inherits_oom_score_adj: bool = False
    pull_auth_not_encoded: bool = False
    image_pull_timeout_ignored: bool = False
    downloading_event_after_pull: bool = False
    dispatch_optional_meta_unset: bool = False
    periodic_restore_ignores_overlap: bool = False
    periodic_restores_stopped_job: bool = False
    blocked_reschedule_drops_tracker: bool = False
    identity_claims_child_job_id: bool = False
    drained_batch_replaced: bool = False

    @staticmethod
    def field_name(flag: str) -> str:
        return flag.replace("-", "_")

    @classmethod
    def from_flags(cls, flags: Iterable[str]) -> Bugs:
        """Flags are checked by `agent.fieldbugs.faults.Faults`; a flag with no field here is a bug of the
        agent (a test enumerates the catalogue), so it raises rather than being ignored."""
        known = {f.name for f in fields(cls)}
        on = {cls.field_name(f) for f in flags}
        missing = sorted(on - known)
        if missing:
            raise ValueError(f"fault flag(s) with no Bugs field: {', '.join(missing)}")
        return cls(**dict.fromkeys(on, True))


NO_BUGS = Bugs()
