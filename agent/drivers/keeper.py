"""A process task's keeper: its parent, which outlives agent restarts and records how it ended (the
part of Nomad's executor that keeps a task's exit status for a client that restarted).

    python -I -S agent/drivers/keeper.py EXITS_DIR PREFIX REPORT_FD ARGV...

Run by agent.drivers.keeperclient with the task's own environment, its output fds as 1 and 2, and a pipe
as REPORT_FD. It starts ARGV (the task's P) in a session of its own with every signal at its default,
writes "<P's pid> <P's start time>" to REPORT_FD and closes it, then waits for P. When P ends, it
writes P's status as Popen's returncode (the exit code, or -N for signal N) to
EXITS_DIR/<PREFIX><pid>-<start time> (field 22 of /proc/<pid>/stat, read before P is reaped) through a
temporary name and a rename, and exits 0.

The keeper ignores the signals a task's stop sends (they go to P's process group, not its own). It
holds nothing of the task's but P: its own 1 and 2 go to /dev/null once P runs. EXITS_DIR is root's
(0700): a task cannot forge or remove a record. Standard library only, and not an `agent` import
(-S: no site), so that it starts fast. Exit 2: bad arguments or P could not be started (one line on
REPORT_FD: "error <why>").
"""

import os
import signal
import sys

USAGE = "usage: keeper.py EXITS_DIR PREFIX REPORT_FD ARGV..."


def start_time(pid: int) -> str:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    return stat[stat.rindex(b")") + 2 :].split()[19].decode()


def returncode(status: int) -> int:
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


def record(exits_dir: str, name: str, code: int) -> None:
    tmp = os.path.join(exits_dir, f".{name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, f"{code}\n".encode())
    finally:
        os.close(fd)
    os.rename(tmp, os.path.join(exits_dir, name))


def main(argv: list[str]) -> int:
    if len(argv) < 4 or not argv[2].isdigit() or "/" in argv[1]:
        os.write(2, f"{USAGE}\n".encode())
        return 2
    exits_dir, prefix, report, args = argv[0], argv[1], int(argv[2]), argv[3:]
    os.set_inheritable(report, False)  # P gets 0, 1 and 2 only
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)
    defaults = [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]
    try:
        pid = os.posix_spawnp(args[0], args, os.environ, setsid=True, setsigdef=defaults, setsigmask=[])
    except OSError as exc:
        os.write(report, f"error cannot start {args[0]!r}: {exc.strerror or exc}\n".encode())
        return 2
    started = start_time(pid)
    name = f"{prefix}{pid}-{started}"
    os.write(report, f"{pid} {started}\n".encode())
    os.close(report)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    record(exits_dir, name, returncode(status))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
