"""A task's hooks, made for each task runner (Nomad's task runner's initHooks), in Nomad's order."""

from __future__ import annotations

from agent.runner.checks import ChecksHook
from agent.runner.dispatchhook import DispatchPayloadHook
from agent.runner.hooks import (
    ArtifactHook,
    LogmonHook,
    TaskDirHook,
    TemplateHook,
    VaultHook,
    VolumeHook,
)
from agent.runner.identityhook import IdentityHook
from agent.runner.interfaces import TaskHook


def task_hooks() -> tuple[TaskHook, ...]:
    """A task's hooks in Nomad's order (validate has no hook here: the jobspec reader checks), then
    the check watcher's."""
    return (
        TaskDirHook(),
        IdentityHook(),
        LogmonHook(),
        DispatchPayloadHook(),
        ArtifactHook(),
        VaultHook(),
        TemplateHook(),
        VolumeHook(),
        ChecksHook(),
    )
