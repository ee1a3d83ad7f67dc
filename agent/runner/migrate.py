"""ephemeral_disk sticky/migrate on one node (Nomad's allocwatcher, local case): the data of the alloc
a new one replaces is taken over before any task or template of the new one runs."""

from __future__ import annotations

from agent.decide.taskdecisions import plan_keep_previous_alloc_dir
from agent.runner.interfaces import AllocHost


def migrate_previous(ar: AllocHost) -> None:
    """`alloc/data` and each task's `local/` of the alloc `ar` replaces, moved into `ar`'s dir; the
    previous alloc's dir stays (its logs), for the GC (taskdecisions.plan_keep_previous_alloc_dir)."""
    disk, previous = ar.group.ephemeral_disk, ar.rec.replaces
    if not previous or not (disk.sticky or disk.migrate):
        return
    old_dir = ar.d.data_dir / "alloc" / previous
    moved = ar.d.task_dirs.migrate(old_dir, ar.alloc_dir, [t.name for t in ar.group.tasks])
    if moved:
        ar.event("", "Migrated", f"took over {', '.join(moved)} of alloc {previous} (ephemeral_disk)")
    if not plan_keep_previous_alloc_dir(ar.d.bugs):
        ar.d.task_dirs.remove(old_dir)
