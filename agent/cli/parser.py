"""The `fieldlab-agent` command tree (argparse). Nomad's spellings are taken as Nomad takes them:
single-dash long flags (`-address`, `-json`, `-stderr`, `-var`), a flag's value after `=` or a
space; every long flag is also accepted with two dashes. A command after `--` (`alloc exec`) is cut
off before parsing (`split_command`), so flags after the alloc id stay flags."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent import __version__
from agent.command.config import DEFAULT_CONFIG

PROG = "fieldlab-agent"
DEFAULT_ADDRESS = "https://127.0.0.1:4646"
EXEC_INTERACTIVE = (
    "As Nomad's: -i (default true; -i=false: no stdin, closed at once) passes stdin to the command, "
    "its end closing the command's stdin; -t (default: true when stdin and stdout are terminals; "
    "-t=false: none) gives it a pseudo-terminal (raw mode on yours, the window size following it) "
    "and needs -i. -timeout S (not Nomad's) kills the command past S seconds. Either way it goes "
    "over Nomad's exec websocket, as `nomad alloc exec`."
)
GO_BOOL = {"1": True, "t": True, "T": True, "TRUE": True, "true": True, "True": True}
GO_BOOL |= {"0": False, "f": False, "F": False, "FALSE": False, "false": False, "False": False}

Command = Callable[[argparse.Namespace], int]


class _Parser(argparse.ArgumentParser):
    """No prefix matching of flags (`-js` is not `-json`, `--add` not `--address`); a one-letter
    flag still takes its value attached (`-sHUP`)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _get_option_tuples(self, option_string: str) -> Any:
        # Python 3.11 matches a prefix of a single-dash long flag even without allow_abbrev.
        found = super()._get_option_tuples(option_string)
        if option_string[1:2] not in self.prefix_chars:
            return [t for t in found if t[1] == option_string[:2]]
        return found


def _flag(parser: argparse._ActionsContainer, name: str, **kwargs: Any) -> argparse.Action:
    """A Nomad-style flag: `-name` and `--name`."""
    return parser.add_argument(f"-{name}", f"--{name}", **kwargs)


def _client_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "agent API options (Nomad's names; each wins over its variables, FIELDLAB_AGENT_* over NOMAD_*)"
    )
    _flag(
        group,
        "address",
        metavar="URL",
        help=f"the agent's API (env FIELDLAB_AGENT_ADDR or NOMAD_ADDR, default {DEFAULT_ADDRESS})",
    )
    _flag(
        group,
        "ca-cert",
        dest="ca_cert",
        metavar="FILE",
        help="CA of the agent's cert (env FIELDLAB_AGENT_CACERT or NOMAD_CACERT)",
    )
    _flag(
        group,
        "client-cert",
        dest="client_cert",
        metavar="FILE",
        help="the operator's cert (env FIELDLAB_AGENT_CLIENT_CERT or NOMAD_CLIENT_CERT)",
    )
    _flag(
        group,
        "client-key",
        dest="client_key",
        metavar="FILE",
        help="the operator's key (env FIELDLAB_AGENT_CLIENT_KEY or NOMAD_CLIENT_KEY)",
    )
    _flag(
        group,
        "tls-server-name",
        dest="tls_server_name",
        metavar="NAME",
        help="the name to check the agent's cert against, and SNI (env NOMAD_TLS_SERVER_NAME)",
    )
    _flag(
        group,
        "tls-skip-verify",
        dest="tls_skip_verify",
        action="store_true",
        help="do not check the agent's cert (env NOMAD_SKIP_VERIFY); strongly discouraged",
    )


def _json(parser: argparse.ArgumentParser, what: str = "the API's answer as JSON") -> None:
    _flag(parser, "json", action="store_true", help=f"print {what} instead of a table")


def _verbose(parser: argparse.ArgumentParser) -> None:
    _flag(parser, "verbose", action="store_true", help="full ids and every event")


def var_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-var",
        "--var",
        dest="var",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an HCL2 input variable (repeatable; wins over -var-file)",
    )
    parser.add_argument(
        "-var-file",
        "--var-file",
        dest="var_file",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="a file of HCL2 input variables, HCL (k = v) or JSON (repeatable, later files win)",
    )


Subparsers = argparse._SubParsersAction  # the `add_parser` of a command level


class _Tree:
    """Adds leaves (commands) whose `func` is `commands[<their path>]` ("job status", "version")."""

    def __init__(self, commands: dict[str, Command]) -> None:
        self.commands = commands

    def leaf(
        self, parent: Subparsers[_Parser], path: str, help_: str, *, client: bool = True, **kw: Any
    ) -> _Parser:
        sp = parent.add_parser(
            path.rsplit(maxsplit=1)[-1], help=help_, description=kw.pop("description", help_), **kw
        )
        sp.set_defaults(func=self.commands[path])
        if client:
            _client_options(sp)
        return sp


def build_parser(commands: dict[str, Command]) -> argparse.ArgumentParser:
    """The command tree; each leaf's `func` is `commands[<its path>]`."""
    tree = _Tree(commands)
    p = _Parser(prog=PROG, description="fieldlab's reference client agent, and a CLI for its API")
    p.add_argument(
        "--config", type=Path, default=DEFAULT_CONFIG, help=f"config file (default {DEFAULT_CONFIG})"
    )
    p.add_argument("--version", action="version", version=f"{PROG} v{__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND", parser_class=_Parser)
    tree.leaf(sub, "run", "run the agent until SIGTERM/SIGINT", client=False)
    tree.leaf(sub, "check-config", "validate the config file and exit", client=False)
    tree.leaf(sub, "version", f"print {PROG}'s version", client=False)
    comp = tree.leaf(
        sub,
        "completion",
        "print a shell completion script",
        client=False,
        description="Print a completion script for the shell. bash: "
        f"`source <({PROG} completion bash)`, or save it in /etc/bash_completion.d/{PROG}; "
        f"zsh: `source <({PROG} completion zsh)`.",
    )
    comp.add_argument("shell", choices=["bash", "zsh"])
    _job_commands(tree, sub)
    _alloc_commands(tree, sub)
    node = sub.add_parser("node", help="the agent's node", description="The agent's node.")
    node_sub = node.add_subparsers(dest="node_cmd", required=True, metavar="VERB", parser_class=_Parser)
    ns = tree.leaf(
        node_sub,
        "node status",
        "the node: name, version, drivers and their health, Vault, alloc counts",
    )
    _json(ns, "the agent's answers (agent self, health, node, its allocations) as JSON")
    _flag(ns, "verbose", action="store_true", help="the full node id")
    return p


def _job_run_options(jr: _Parser) -> None:
    """`job run`'s: the file, its variables and Nomad's register options."""
    jr.add_argument("file", type=Path, metavar="FILE")
    var_options(jr)
    _json(jr)
    _flag(jr, "detach", action="store_true", help="print the evaluation's id and return (as Nomad)")
    _flag(
        jr,
        "check-index",
        type=int,
        metavar="N",
        help="register only if the job's modify index is N (0: only if there is no such job), "
        "as `job plan` printed it",
    )
    _flag(jr, "preserve-counts", action="store_true", help="the job's groups keep their running counts")
    _flag(jr, "preserve-resources", action="store_true", help="the job's tasks keep their resources")
    _flag(jr, "eval-priority", type=int, metavar="N", help="the evaluation's priority (1 to 100)")


def _job_commands(tree: _Tree, sub: Subparsers[_Parser]) -> None:
    leaf = tree.leaf
    job = sub.add_parser("job", help="submit, inspect and stop jobs", description="Jobs on the agent.")
    job_sub = job.add_subparsers(dest="job_cmd", required=True, metavar="VERB", parser_class=_Parser)
    st = leaf(
        job_sub,
        "job status",
        "the jobs as a table, or one job with its allocations",
        description="Without ID: every job with its type, status and running allocations. With an ID: "
        "the job, a summary per task group and its allocations (newest first).",
    )
    st.add_argument("job_id", nargs="?", metavar="ID")
    _json(st)
    _verbose(st)
    ls = leaf(job_sub, "job list", "the jobs as a table (job status without ID)")
    _json(ls)
    ins = leaf(
        job_sub,
        "job inspect",
        'the job as Nomad\'s API JSON ({"Job": ...}, which job run takes back), or its jobspec (-hcl)',
    )
    ins.add_argument("job_id", metavar="ID")
    _flag(ins, "hcl", action="store_true", help="the jobspec as it was submitted (its current version)")
    jr = leaf(
        job_sub,
        "job run",
        "register a jobspec file (HCL or JSON): a job that runs gets a new version",
    )
    _job_run_options(jr)
    jp = leaf(
        job_sub,
        "job plan",
        "what `job run FILE` would do, changing nothing: exit 0 no changes, 1 allocs created or "
        "destroyed, 255 an error",
    )
    jp.add_argument("file", type=Path, metavar="FILE")
    var_options(jp)
    _flag(
        jp, "diff", nargs="?", const="true", default="true", choices=["true", "false"], help="show the diff"
    )
    _flag(jp, "verbose", action="store_true", help="every field of the diff, the unchanged too")
    _flag(jp, "json-output", action="store_true", help="Nomad's api.JobPlanResponse as JSON")
    sc = leaf(
        job_sub, "job scale", "a group's count: the job's next version (GROUP may be left out for one group)"
    )
    sc.add_argument("job_id", metavar="JOB")
    sc.add_argument("group", metavar="GROUP|COUNT")
    sc.add_argument("count", nargs="?", metavar="COUNT")
    _flag(sc, "detach", action="store_true", help="print the evaluation's id only (as Nomad)")
    _json(sc)
    rv = leaf(job_sub, "job revert", "register an earlier version of the job again, as its next version")
    rv.add_argument("job_id", metavar="JOB")
    rv.add_argument("version", type=int, metavar="VERSION")
    _flag(rv, "detach", action="store_true", help="print the evaluation's id only (as Nomad)")
    _json(rv)
    _job_type_commands(tree, job_sub)
    jh = leaf(job_sub, "job history", "the job's versions, newest first (-p: what each changed)")
    jh.add_argument("job_id", metavar="ID")
    _flag(jh, "p", action="store_true", help="each version's diff to the one before it")
    _flag(jh, "version", type=int, metavar="N", help="only version N")
    _json(jh, "the versions as Nomad's api.Job JSON")
    jv = leaf(
        job_sub,
        "job validate",
        "check jobspec files offline, as a submission would (no agent, no config)",
        client=False,
        description="Parse each jobspec (a directory: every *.hcl, *.nomad, *.json in it, recursively) "
        "and check its templates. Exit 0 when every file is accepted, 1 when any is refused, 2 for a "
        "usage error.",
    )
    jv.add_argument("paths", nargs="+", type=Path, metavar="FILE|DIR")
    var_options(jv)
    js = leaf(job_sub, "job stop", "stop a job's allocations (answers once they are stopped)")
    js.add_argument("job_id", metavar="ID")
    _flag(js, "detach", action="store_true", help="print the evaluation's id only (as Nomad)")
    js.add_argument(
        "-purge",
        "--purge",
        action="store_true",
        help="then remove the job and its allocations (records, events, alloc dirs), as Nomad's -purge",
    )
    _json(js)


def _job_type_commands(tree: _Tree, job_sub: Subparsers[_Parser]) -> None:
    """`job dispatch` and `job periodic force`: the verbs of parameterized and periodic jobs."""
    jd = tree.leaf(
        job_sub,
        "job dispatch",
        "run a parameterized job: a child job with the payload (INPUT, `-` for stdin) and the meta",
    )
    jd.add_argument("job_id", metavar="JOB")
    jd.add_argument(
        "input", nargs="?", metavar="INPUT", help="a file whose content is the payload; - for stdin"
    )
    _flag(jd, "meta", action="append", default=[], metavar="KEY=VALUE", help="a meta key (repeatable)")
    _flag(jd, "id-prefix-template", default="", metavar="PREFIX", help="in the child's ID, after dispatch-")
    _flag(jd, "idempotency-token", default="", metavar="TOKEN", help="a token used before answers its child")
    _flag(jd, "detach", action="store_true", help="print the child's and the evaluation's id only (as Nomad)")
    _json(jd)
    periodic = job_sub.add_parser("periodic", help="periodic jobs", description="Periodic jobs.")
    periodic_sub = periodic.add_subparsers(
        dest="periodic_cmd", required=True, metavar="VERB", parser_class=_Parser
    )
    pf = tree.leaf(
        periodic_sub, "job periodic force", "launch a periodic job's child now, whatever its schedule"
    )
    pf.add_argument("job_id", metavar="JOB")
    _flag(pf, "detach", action="store_true", help="print the evaluation's id only (as Nomad)")
    _json(pf)


def _alloc_commands(tree: _Tree, sub: Subparsers[_Parser]) -> None:
    leaf = tree.leaf
    alloc = sub.add_parser("alloc", help="inspect and act on allocations", description="Allocations.")
    alloc_sub = alloc.add_subparsers(dest="alloc_cmd", required=True, metavar="VERB", parser_class=_Parser)
    al = leaf(alloc_sub, "alloc list", "every allocation as a table")
    _json(al)
    _verbose(al)
    ast = leaf(
        alloc_sub,
        "alloc status",
        "an allocation: its tasks, their state and restarts, and its recent events",
    )
    ast.add_argument("alloc_id", metavar="ALLOC", help="an alloc id or a prefix of 2+ characters")
    _json(ast, "the alloc (Nomad's api.Allocation) as JSON")
    _verbose(ast)
    lg = leaf(
        alloc_sub,
        "alloc logs",
        "a task's stdout (or stderr)",
        description="Print a task's stdout, or its stderr with -stderr; -tail starts near the end; "
        "-f follows it until Ctrl-C. TASK may be left out when the group has one task. An exec or "
        "raw_exec task's logs span its restarts; a docker task's are its current container's.",
    )
    lg.add_argument("alloc_id", metavar="ALLOC")
    lg.add_argument("task", nargs="?", metavar="TASK")
    _flag(lg, "task", dest="task_flag", metavar="TASK", help="the task (instead of TASK)")
    lg.add_argument("-f", "-follow", "--follow", dest="follow", action="store_true", help="follow the log")
    _flag(lg, "stderr", action="store_true", help="stderr rather than stdout")
    _flag(lg, "tail", action="store_true", help="start near the end: the last -n lines (10), or -c bytes")
    lg.add_argument("-n", dest="lines", type=int, default=10, metavar="LINES", help="with -tail: lines")
    lg.add_argument("-c", dest="bytes", type=int, metavar="BYTES", help="with -tail: bytes from the end")
    ex = leaf(
        alloc_sub,
        "alloc exec",
        "run a command in a task and print its output",
        usage=f"{PROG} alloc exec [options] ALLOC [TASK] -- CMD [ARG...], or as Nomad: ALLOC CMD [ARG...]",
        description="Run CMD in the task through its driver's exec (docker exec; nsenter into the "
        "task's namespaces, root, cgroup and user for exec; the task's user and dir for raw_exec), "
        "print what it writes (its stdout on stdout, its stderr on stderr) and exit with its exit code "
        "(126 when it could not run or ran past -timeout). TASK may be left out when the group has "
        f"one task. {EXEC_INTERACTIVE}",
    )
    ex.add_argument("alloc_id", metavar="ALLOC")
    ex.add_argument("task", nargs="?", metavar="TASK")
    _flag(ex, "task", dest="task_flag", metavar="TASK", help="the task (instead of TASK)")
    _flag(
        ex,
        "timeout",
        type=float,
        metavar="SECONDS",
        help="kill it after this long (at most 300; default: none, as Nomad)",
    )
    ex.add_argument(
        "-i", dest="stdin", action="store_const", const=True, help="pass stdin to the command (default)"
    )
    ex.add_argument("--i=false", dest="stdin", action="store_const", const=False, help=argparse.SUPPRESS)
    ex.add_argument(
        "-t",
        dest="tty",
        action="store_const",
        const=True,
        help="give the command a pseudo-terminal (default when stdin and stdout are terminals)",
    )
    ex.add_argument("--t=false", dest="tty", action="store_const", const=False, help=argparse.SUPPRESS)
    ex.set_defaults(command=[])
    sg = leaf(
        alloc_sub,
        "alloc signal",
        "send a signal to a task, or to every running task of the alloc",
        description="Send -s SIG (default SIGKILL, as Nomad) to TASK, or to every running task of the "
        "alloc when TASK is left out. SIG: a name (SIGHUP, HUP) or a number.",
    )
    sg.add_argument(
        "-s", "-signal", "--signal", dest="signal", metavar="SIG", help="the signal (default SIGKILL)"
    )
    _flag(sg, "task", dest="task_flag", metavar="TASK", help="the task (instead of TASK)")
    sg.add_argument("alloc_id", metavar="ALLOC")
    sg.add_argument("task", nargs="?", metavar="TASK")
    sg.add_argument("legacy_signal", nargs="?", help=argparse.SUPPRESS)  # the older `ALLOC TASK SIG`
    rs = leaf(
        alloc_sub,
        "alloc restart",
        "restart a task, or every running task of the alloc",
    )
    _flag(rs, "task", dest="task_flag", metavar="TASK", help="the task (instead of TASK)")
    _flag(rs, "all-tasks", dest="all_tasks", action="store_true", help="every task of the alloc (as Nomad)")
    rs.add_argument("alloc_id", metavar="ALLOC")
    rs.add_argument("task", nargs="?", metavar="TASK")
    so = leaf(
        alloc_sub,
        "alloc stop",
        "stop an allocation: a managed one is replaced (as Nomad's scheduler does), an adopted one ends",
    )
    so.add_argument("alloc_id", metavar="ALLOC")
    _flag(so, "detach", action="store_true", help="print the evaluation's id only (as Nomad)")
    _json(so)


_EXEC_VALUED = frozenset(
    {
        "-task",
        "--task",
        "-timeout",
        "--timeout",
        "-address",
        "--address",
        "-ca-cert",
        "--ca-cert",
        "-client-cert",
        "--client-cert",
        "-client-key",
        "--client-key",
        "-tls-server-name",
        "--tls-server-name",
    }
)


def _nomad_exec_form(args: list[str]) -> tuple[list[str], list[str] | None]:
    """Nomad's `alloc exec [options] ALLOC CMD [ARG...]` (no `--`): the first word after the options
    is ALLOC, the rest the command (the task from -task, or the group's only task)."""
    at = next((i for i in range(len(args) - 1) if args[i : i + 2] == ["alloc", "exec"]), None)
    if at is None:
        return args, None
    i = at + 2
    while i < len(args) and args[i].startswith("-") and args[i] != "-":
        i += 2 if args[i] in _EXEC_VALUED else 1
    if len(args) - i < 2:  # ALLOC alone (or nothing): argparse says what is missing
        return args, None
    return args[: i + 1], args[i + 1 :]


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str] | None]:
    """(what to parse, the command) for `alloc exec ... -- CMD...` and for Nomad's form without `--`
    (`alloc exec [options] ALLOC CMD...`); (argv, None) for anything else, whose `--` argparse
    handles as usual. Before the command, exec's Go bool flags `-i=false`, `-t=0` ... are spelled
    for argparse."""
    args = list(argv)
    if "--" not in args:
        head, command = _nomad_exec_form(args)
        return (_go_bools(head) if command is not None else head), command
    cut = args.index("--")
    words = [a for a in args[:cut] if not a.startswith("-")]
    if words[:2] == ["alloc", "exec"] or (len(words) > 2 and words[1:3] == ["alloc", "exec"]):
        return _go_bools(args[:cut]), args[cut + 1 :]
    return args, None


def _go_bools(args: list[str]) -> list[str]:
    """`-i=V`/`-t=V` (Go's flag package: V one of strconv.ParseBool's words) as `-i`/`--i=false`;
    any other V is left for argparse to refuse."""
    out = []
    for a in args:
        name, eq, value = a.lstrip("-").partition("=")
        go_bool = eq and name in ("i", "t") and a.startswith("-") and value in GO_BOOL
        out.append((f"-{name}" if GO_BOOL[value] else f"--{name}=false") if go_bool else a)
    return out
