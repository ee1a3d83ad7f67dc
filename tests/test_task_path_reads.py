"""Every file the agent opens or reads, classified (issue 32): a task owns its dirs (local/, secrets/,
tmp/, the alloc's shared dir, and for raw_exec whatever its user can write), so anything the agent
reads there goes through a reader that opens by dir fd, follows no link, never blocks (O_NONBLOCK, a
FIFO is refused), takes regular files only and caps the size: agent.allocdir.sandbox (`read_file`),
agent.command.logs (`FileLog`, `TaskDirLog`), agent.drivers.hostproc (`read_log_tail`), logmon's rotator
and the openers of the logmon hook and the task dirs (agent.logmon, agent.runner.logmonhook,
agent.runner.taskdirs). The rule, grep-able:

    grep -rnE "read_text|read_bytes|open\\(" agent/

lists every read; this test finds each call site (module, function, what is called) by parsing the
agent's source, and fails on one that is not in SITES below, so a new read is classified before it
lands. A site classified TASK must be one of the sandboxed readers.
"""

from __future__ import annotations

import ast
from pathlib import Path

AGENT = Path(__file__).resolve().parent.parent / "agent"
READS = frozenset({"read_text", "read_bytes", "open"})

PROC = "the kernel's view of a process (/proc/<pid>/...): not a file the task can replace"
NODE = "the agent's own files (config, state, CNI cache, its credentials), in root-only dirs"
HOST = "the host's system files (/etc/os-release), root's: no task writes them"
CLI = "the user's own files, read by the CLI on the user's machine"
TASK = "a task-owned path, through a sandboxed reader (dir fd, O_NOFOLLOW, O_NONBLOCK, regular, capped)"
PROBE = "the lab's probe workload, which runs inside a task: not the agent"
ARTIFACT = (
    "an artifact: its URL (an allowed host), or the agent's own anonymous temp copy of it and that"
    " copy's members; what lands in the task dir goes through agent.allocdir.sandbox"
)

PIN = (
    "a host volume's or a docker bind's checked path opened O_PATH (nothing read), each component"
    " O_NOFOLLOW (agent.allocdir.hostvolumes): never through a link, and held until the mount is made"
)

SITES: dict[tuple[str, str, str], str] = {
    ("allocdir/hostvolumes.py", "open_no_links", "os.open"): PIN,
    ("allocdir/hostvolumes.py", "pin_path", "os.open"): PIN,
    ("allocdir/hostvolumes.py", "staged_bind", "os.open"): PIN,  # the agent's own fresh staging target
    ("cli/jobfiles.py", "variables", "path.read_text"): CLI,
    ("cli/__init__.py", "reader_gone", "os.open"): CLI,  # /dev/null over a closed stdout (`| head`)
    ("cli/commands.py", "job_dispatch", "open"): CLI,  # `job dispatch ... INPUT`: the operator's payload file
    ("command/config.py", "_read", "path.read_text"): NODE,
    ("getter/unpack.py", "_unzip", "z.open"): ARTIFACT,
    # `chown = true`: the destination walked by fd, each directory O_NOFOLLOW|O_DIRECTORY, only fchown
    ("getter/getter.py", "chown_tree", "os.open"): TASK,
    ("getter/unpack.py", "unpack", "tarfile.open"): ARTIFACT,
    ("drivers/exec.py", "InitArgs.of", "Path(f'/proc/{pid}/cmdline').read_bytes"): PROC,
    ("drivers/exec.py", "_isolated", "Path(f'/proc/{pid}/cmdline').read_bytes"): PROC,
    ("drivers/exec.py", "agent_bounding_set", "Path('/proc/self/status').read_text"): PROC,  # nomad-5783
    ("drivers/hostproc.py", "proc_start_time", "Path(f'/proc/{pid}/stat').read_text"): PROC,
    ("drivers/hostproc.py", "children", "Path(f'/proc/{pid}/task/{pid}/children').read_text"): PROC,
    ("drivers/hostproc.py", "proc_state", "Path(f'/proc/{pid}/stat').read_text"): PROC,
    ("drivers/cgroups.py", "Cgroups.of_pid", "Path(f'/proc/{pid}/cgroup').read_text"): PROC,
    ("drivers/cgroups.py", "Cgroups.pids", "f.read_text"): PROC,  # cgroup.procs: the kernel's
    # A task's environ is read only to find the carried environment of the agent's own root
    # processes (exec's init) and, for adoption after a lost state, the job a cgroup belongs to.
    ("drivers/hostproc.py", "read_environ", "path.read_bytes"): PROC,
    # a process task's stdout/stderr: its FIFOs in the alloc's .logmon dir (root's, 0700)
    ("drivers/process.py", "ProcessDriver.spawn", "output.open"): NODE,
    ("drivers/dockerpull.py", "_from_docker_config", "path.read_text"): NODE,  # plugin auth.config, 0600
    ("drivers/hostproc.py", "read_log_tail", "os.open"): TASK,
    ("drivers/usage.py", "_read", "(d / name).read_text"): PROC,  # the kernel's cgroup files
    ("drivers/raw_exec.py", "credentials", "Path(f'/proc/{pid}/status').read_text"): PROC,
    ("cli/jobfiles.py", "registration", "args.file.read_text"): CLI,  # `job run FILE`: the operator's
    ("allocdir/fsutil.py", "unmount_below", "open"): PROC,  # /proc/self/mounts
    ("jobspec/__init__.py", "load_jobspec", "path.read_text"): CLI,
    ("jobspec/hclfuncs/net.py", "_read_file", "path.open"): CLI,  # HCL file(): the agent gets a bundle
    ("fieldbugs/killpoints.py", "sigkill_at.hook", "os.open"): NODE,
    # the workload identity key: <data_dir>/server/keystore (0700 dir, 0600 file, root's)
    ("identity/keyring.py", "Keyring._create", "os.open"): NODE,
    ("identity/keyring.py", "Keyring._read", "path.read_bytes"): NODE,
    ("command/logs.py", "FileLog._dir", "os.open"): TASK,  # alloc/ and logs/ by dir fd, O_NOFOLLOW
    ("command/logs.py", "FileLog._read", "os.open"): TASK,  # O_NOFOLLOW|O_NONBLOCK, regular only
    ("command/logs.py", "TaskDirLog.read", "os.open"): TASK,  # a task started before logmon: the same rules
    # logmon writes the tasks' logs dir (0777) by its fd: O_NOFOLLOW|O_NONBLOCK, regular, one link
    ("logmon/__main__.py", "Rotator._open", "os.open"): TASK,
    ("logmon/docker.py", "follow", "os.open"): NODE,  # its since-file in the alloc's .logmon dir
    # a process task's keeper and the driver reading its record: /run/fieldlab/exits (root's, 0700),
    # /proc/<P>/stat of its own child, /dev/null
    ("drivers/keeperclient.py", "ExitRecords.status", "os.open"): NODE,
    ("drivers/keeper.py", "record", "os.open"): NODE,
    ("drivers/keeper.py", "start_time", "open"): NODE,
    ("drivers/keeper.py", "main", "os.open"): NODE,
    ("runner/logmonhook.py", "_open_fifo", "os.open"): NODE,  # .logmon/ (root's, 0700)
    ("runner/logmonhook.py", "_read_pidfile", "path.read_text"): NODE,  # .logmon/<task>.pid
    ("runner/logmonhook.py", "_open_logs_dir", "os.open"): TASK,  # alloc/ and logs/, O_NOFOLLOW
    ("runner/taskdirs.py", "_dir_with_mode", "os.open"): TASK,  # O_NOFOLLOW|O_DIRECTORY, then fchmod
    ("network/cni.py", "CniNetwork._load", "path.read_text"): NODE,
    ("network/networks.py", "find_conflist", "path.read_text"): NODE,  # the client's cni_conf_dir
    ("nomadapi/allocfs.py", "_open_dirs", "os.open"): TASK,  # by dir fd, O_NOFOLLOW at every step
    ("nomadapi/allocfs.py", "_open_regular", "os.open"): TASK,  # O_NOFOLLOW|O_NONBLOCK, regular only
    ("nomadapi/hoststats.py", "host_stats", "Path('/proc/meminfo').read_text"): PROC,
    ("nomadapi/hoststats.py", "host_stats", "Path('/proc/stat').read_text"): PROC,
    ("nomadapi/hoststats.py", "host_stats", "Path('/proc/uptime').read_text"): PROC,
    ("node/nodeinfo.py", "load_node_id", "path.read_text"): NODE,  # <data_dir>/client/client-id
    ("node/nodeinfo.py", "_os_release", "path.read_text"): HOST,  # /etc/os-release: os.name, os.version
    ("network/cnicache.py", "ResultCache.store", "os.open"): NODE,
    ("network/cnicache.py", "ResultCache.load", "path.read_text"): NODE,
    ("network/hostlocal.py", "reservations", "p.read_text"): NODE,
    ("network/hostlocal.py", "_flocked", "os.open"): NODE,
    ("network/hostlocal.py", "carry_over", "os.open"): NODE,
    ("network/netns.py", "create_inside", "os.open"): PROC,  # /proc/thread-self/ns, /run/netns
    ("runner/services.py", "client_id.read", "(data_dir / 'client' / 'client-id').read_text"): NODE,
    ("runner/vaulttoken.py", "TaskVaultToken._write_file", "os.open"): TASK,  # O_EXCL|O_NOFOLLOW
    ("state/sqlite.py", "SqliteStore._move_aside", "os.open"): NODE,
    ("state/sqlite.py", "SqliteStore._prepare_files", "os.open"): NODE,
    ("allocdir/sandbox.py", "_open_dir", "os.open"): TASK,
    ("allocdir/sandbox.py", "_open_root", "os.open"): TASK,
    ("allocdir/sandbox.py", "_read_at", "os.open"): TASK,
    ("allocdir/sandbox.py", "write_file", "os.open"): TASK,
    ("templates/workerproc.py", "worker_main", "os.open"): NODE,  # /dev/null
    ("cli/validate.py", "read_jobspec", "path.read_bytes"): CLI,
    ("vault/client.py", "VaultClient._credentials", "self.approle_file.read_text"): NODE,
    ("workloads/probe/probe.py", "_read", "open"): PROBE,
}
SANDBOXED = {
    ("drivers/hostproc.py", "read_log_tail"),
    ("command/logs.py", "FileLog._dir"),
    ("command/logs.py", "FileLog._read"),
    ("command/logs.py", "TaskDirLog.read"),
    ("logmon/__main__.py", "Rotator._open"),
    ("runner/logmonhook.py", "_open_logs_dir"),
    ("runner/taskdirs.py", "_dir_with_mode"),
    ("nomadapi/allocfs.py", "_open_dirs"),
    ("nomadapi/allocfs.py", "_open_regular"),
    ("runner/vaulttoken.py", "TaskVaultToken._write_file"),
    ("getter/getter.py", "chown_tree"),
    *(("allocdir/sandbox.py", f) for f in ("_open_dir", "_open_root", "_read_at", "write_file")),
}


class _Reads(ast.NodeVisitor):
    """The read call sites of one module: (module, enclosing scope, what is called)."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.scope: list[str] = []
        self.found: set[tuple[str, str, str]] = set()

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
        if name in READS:
            self.found.add((self.module, ".".join(self.scope), ast.unparse(f)))
        self.generic_visit(node)


def _sites() -> set[tuple[str, str, str]]:
    found: set[tuple[str, str, str]] = set()
    for path in sorted(AGENT.rglob("*.py")):
        reads = _Reads(str(path.relative_to(AGENT)))
        reads.visit(ast.parse(path.read_text()))
        found |= reads.found
    return found


def test_every_file_the_agent_opens_is_classified() -> None:
    found = _sites()
    new = sorted(found - SITES.keys())
    assert not new, f"classify these reads in SITES (a task-owned path needs a sandboxed reader): {new}"
    gone = sorted(SITES.keys() - found)
    assert not gone, f"these reads are gone: drop them from SITES: {gone}"


def test_task_owned_paths_are_read_only_by_the_sandboxed_readers() -> None:
    task_sites = {(m, f) for (m, f, _), what in SITES.items() if what == TASK}
    assert task_sites == SANDBOXED


def test_the_vault_token_is_read_back_through_the_sandbox() -> None:
    source = (AGENT / "runner" / "vaulttoken.py").read_text()
    assert "token_file.read_text" not in source and "read_task_file(" in source
