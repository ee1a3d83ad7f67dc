"""Who owns a file the agent writes for a task in its secrets/ or local/ (a token), as Nomad's
users.WriteFileFor: the task's user as its driver runs it. The exec driver chowns the task's dirs
only at the start, after the first-start hooks wrote their files, so the files are chowned here.
A user the node does not know leaves the file the agent's (the driver refuses such a task anyway)."""

from __future__ import annotations

import os
import pwd

from agent.drivers.exec import DEFAULT_USER
from agent.structs.model import Task


def task_file_owner(task: Task) -> tuple[int, int] | None:
    """(uid, gid) to chown to, or None to keep the agent's: a docker task's user is the image's,
    not the node's; a raw_exec task without a user runs as the agent."""
    if os.geteuid() != 0:  # only root gives files away (and only root runs exec tasks)
        return None
    if task.driver == "exec":
        name = task.user or DEFAULT_USER
    elif task.driver == "raw_exec" and task.user:
        name = task.user
    else:
        return None
    return _lookup(name)


def task_user_owner(task: Task) -> tuple[int, int] | None:
    """The task's `user` as set in the jobspec (None when unset, unknown, or the agent is not
    root): whom an artifact with `chown = true` goes to, as Nomad's chownDestination."""
    if os.geteuid() != 0 or not task.user:
        return None
    return _lookup(task.user)


def _lookup(name: str) -> tuple[int, int] | None:
    try:
        pw = pwd.getpwuid(int(name)) if name.isdigit() else pwd.getpwnam(name)
    except (KeyError, ValueError, OverflowError):
        return None
    return pw.pw_uid, pw.pw_gid
