"""`fieldlab`: the lab's command line (lab up, down, status, env, ssh, reboot, provision, image), and
the e2e suites, a field bug's reproduction and a run's report as the make targets run them (e2e,
repro, report)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lab import __version__
from lab.bake import BAKED_REPO, Bake, baked_wheel, ensure_baked, find_baked
from lab.choices import keep_choices, require_cluster_certs, spec_of
from lab.config import LAYOUTS, PROVIDERS, LabPaths, LabSpec
from lab.errors import LabError, NotRootError
from lab.progress import Timings, say, warn
from lab.providers import provider_for
from lab.providers.base import LabRecord, Node
from lab.provision import provision, provision_baked, provision_plan, runs_baked
from lab.suites import add_suite_commands
from lab.summary import node_memory, print_summary

AGENT_PORT = 4646  # the fieldlab_agent role's fieldlab_agent_port


# Providers whose labs need no root on the controller: the static one only talks ssh and Ansible.
ROOTLESS_PROVIDERS = frozenset({"static"})


def _require_root(provider: str = "docker") -> None:
    if provider in ROOTLESS_PROVIDERS or provider not in PROVIDERS:  # an unknown one: LabSpec says so
        return
    if os.geteuid() != 0:
        raise NotRootError(
            f"the {provider} provider needs root on the controller (docker, debootstrap): run as root or"
            " with sudo (the static provider needs none)"
        )


def _record(paths: LabPaths) -> LabRecord | None:
    return LabRecord.load(paths)


def cmd_up(args: argparse.Namespace) -> int:
    _require_root(args.provider)
    from lab.inventory import write_inventory

    spec = spec_of(args)
    # A Nomad cluster's own clients: nothing to provision, the cluster's certificates by hand.
    no_provision = args.no_provision or spec.target != "fieldlab"
    paths = LabPaths(spec.name)
    require_cluster_certs(paths, spec.target)
    existed = paths.lab_file.exists()
    provider = provider_for(spec.provider)
    timings = Timings(command="lab up")
    say(
        f"lab {spec.name}: provider {spec.provider}, {spec.clients} client(s)"
        + (f" ({spec.full} full, {spec.light} light)" if spec.light else "")
        + f", subnet {spec.subnet}"
        + (", raw_exec on" if spec.raw_exec else "")
        + (f", {spec.layout} layout" if spec.layout != "fieldlab" else "")
        + (f", target {spec.target} (nothing deployed)" if spec.target != "fieldlab" else "")
        + (" (converging the running lab)" if existed else "")
    )
    try:
        base = ""
        if hasattr(provider, "image"):
            with timings.phase("node image") as ph:
                base, built = provider.image()
                ph.detail = f"{'built' if built else 'cached'} {base}"
        bake: Bake | None = None
        digest = ""
        if base and getattr(provider, "bakes", False) and not no_provision and not args.no_bake:
            bake, digest = _bake_phases(provider, base, paths, timings)
        images = bake.tags if bake is not None else None
        if no_provision or digest:
            with timings.phase("nodes") as ph:
                record = provider.up(spec, paths, images=images)
                ph.detail = f"{len(record.nodes)} nodes"
        else:
            # Independent: the nodes boot while the agent's wheelhouse builds.
            record, digest = _nodes_and_wheelhouse(provider, spec, paths, images, timings)
        record = keep_choices(record, spec, paths)
        with timings.phase("inventory"):
            inv = write_inventory(record, paths)
        if not no_provision:
            on_bake = bake is not None and runs_baked(provider, record, bake.tags)
            if provision_plan(on_bake=on_bake, full=args.full) == "per-lab":
                wheel = _baked_wheel(provider, bake) if bake is not None and not existed else ""
                recap = provision_baked(paths, digest, timings, running=existed, installed_wheel=wheel)
            else:
                recap = provision(paths, digest, timings)
            say(f"provisioned: ok={recap.ok} changed={recap.changed}")
    except BaseException:
        timings.write(paths.timings) if paths.state_dir.exists() else None
        if not existed and not args.keep and paths.lab_file.exists():
            warn(
                "lab-up failed: removing what it created (set KEEP_LAB=1 or --keep to keep it for debugging)"
            )
            rec = _record(paths)
            if rec is not None:
                provider.down(rec, paths)
            _forget(paths)
        raise
    memory = {} if no_provision else node_memory(provider, record, paths, timings)
    timings.write(paths.timings)
    print_summary(record, paths, inv, timings, provisioned=not no_provision, memory=memory)
    return 0


def _bake_phases(provider: Any, base: str, paths: LabPaths, timings: Timings) -> tuple[Bake, str]:
    """The node bake, timed; a VM provider bakes from the container twin of its image and carries
    the bake onto its own (lab/vm_bake.py) in a phase of its own."""
    with timings.phase("node bake") as ph:
        bake_base = provider.bake_base() if hasattr(provider, "bake_base") else base
        bake, digest = _ensure_bake(provider, bake_base, paths)
        shown = f"{BAKED_REPO}:{{{','.join(bake.tags)}}}-{bake.hash}"
        ph.detail = f"cached {shown}" if not bake.built else f"built {shown}: {bake.reason}"
    if hasattr(provider, "carry_bake"):
        with timings.phase("vm bake") as ph:
            ph.detail = provider.carry_bake(bake)
    return bake, digest


def _baked_wheel(provider: Any, bake: Bake) -> str:
    """The agent wheelhouse the bake's client image holds (fresh nodes of it need no package step)."""
    return baked_wheel(provider.docker, bake.tags)


def _ensure_bake(provider: Any, base: str, paths: LabPaths) -> tuple[Bake, str]:
    """The baked images (lab/bake.py), baked now when missing or stale; and the wheelhouse hash when
    the bake had to build the wheelhouse first (else "": it is built while the nodes start)."""
    from lab.playbook import bao_binary
    from lab.wheelhouse import build_wheelhouse

    binary = bao_binary()
    found = find_baked(provider.docker, base, binary)
    if found is not None:
        return found, ""
    digest, _ = build_wheelhouse(paths.wheelhouse)  # the bake installs the agent package from it
    bake = ensure_baked(
        provider.docker, base, openbao_binary=binary, wheelhouse=paths.wheelhouse, wheel_hash=digest
    )
    return bake, digest


def _nodes_and_wheelhouse(
    provider: Any, spec: LabSpec, paths: LabPaths, images: dict[str, str] | None, timings: Timings
) -> tuple[LabRecord, str]:
    from lab.wheelhouse import build_wheelhouse

    parent = "nodes + agent wheelhouse (in parallel)"
    with timings.phase(parent) as top, ThreadPoolExecutor(1) as pool:

        def wheelhouse() -> str:
            with timings.phase("agent wheelhouse", parent=parent) as ph:
                digest, built = build_wheelhouse(paths.wheelhouse)
                ph.detail = f"{'built' if built else 'cached'} {digest}"
            return digest

        fut = pool.submit(wheelhouse)
        with timings.phase("nodes", parent=parent) as ph:
            record = provider.up(spec, paths, images=images)
            ph.detail = f"{len(record.nodes)} nodes"
        digest = fut.result()
        top.detail = f"{len(record.nodes)} nodes, wheelhouse {digest}"
    return record, digest


def removed_summary(removed: list[str], *, names: int = 8) -> str:
    """What `lab down` removed, counted by kind ("container x", "volume y", ...), naming the first
    few: a fleet of a hundred is one line, not two hundred names (pure)."""
    kinds: dict[str, int] = {}
    for item in removed:
        kind = item.split(" ", 1)[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    counts = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}" for kind, n in kinds.items())
    shown = ", ".join(removed[:names]) + (
        f", ... ({len(removed) - names} more)" if len(removed) > names else ""
    )
    total = f"{len(removed)} object{'s' if len(removed) != 1 else ''}"
    return f"{total} ({counts}): {shown}" if removed else "0 objects"


def _forget(paths: LabPaths) -> None:
    for f in [paths.lab_file, paths.inventory, paths.state_dir / "known_hosts"]:
        f.unlink(missing_ok=True)


def cmd_down(args: argparse.Namespace) -> int:
    paths = LabPaths(args.lab)
    record = _record(paths)
    # No record: the docker objects a crashed run may have left are looked for, which needs root.
    _require_root("docker" if record is None or args.image else record.provider)
    removed: list[str] = []
    if record is not None:
        removed = provider_for(record.provider).down(record, paths)
    elif args.lab:
        # No record, but a crashed run may have left labelled docker objects: remove those too.
        from lab.providers.docker import DockerProvider

        try:
            removed = DockerProvider().down(LabRecord(args.lab, "docker", []), paths)
        except LabError:
            removed = []
    _forget(paths)
    if not removed and record is None:
        say(f"lab {args.lab}: nothing to remove (no lab is up)")
    else:
        say(f"lab {args.lab}: removed {removed_summary(removed)}")
    if args.image:
        from lab.image import IMAGE_REPO
        from lab.providers.docker import DockerProvider

        client = DockerProvider().docker
        for repo in (BAKED_REPO, IMAGE_REPO):  # the baked images first: they are built on the bare one
            for img in client.images.list(name=repo):
                for tag in img.tags:
                    client.images.remove(tag, force=True)
                    say(f"removed image {tag}")
        from lab.vm_image import remove_vm_images

        for gone in remove_vm_images():
            say(f"removed VM image {gone}")
    return 0


def _need_record(paths: LabPaths) -> LabRecord:
    record = _record(paths)
    if record is None:
        raise LabError(
            f"lab {paths.name} is not up: run `make lab-up` (or `fieldlab lab up --lab {paths.name}`)"
        )
    return record


def cmd_status(args: argparse.Namespace) -> int:
    """0 when every node runs (or answers), 1 when one does not, 2 (an error) when the lab is not up."""
    paths = LabPaths(args.lab)
    record = _need_record(paths)
    states = provider_for(record.provider).status(record, paths)
    if args.json:
        print(json.dumps([s.__dict__ for s in states], indent=2))
    else:
        print(f"lab {record.name} ({record.provider}), inventory {paths.inventory}")
        for s in states:
            print(f"  {s.name:<9} {s.address:<15} {s.state:<12} {s.detail}")
    return 0 if all(s.state in ("running", "reachable") for s in states) else 1


def agent_env(node: Node, paths: LabPaths) -> list[tuple[str, str]]:
    """The variables `fieldlab-agent` reads to talk to `node`'s agent, and the same for Nomad's own
    tools (the `nomad` CLI, python-nomad, Nomad's Go api package read NOMAD_ADDR, NOMAD_CACERT,
    NOMAD_CLIENT_CERT, NOMAD_CLIENT_KEY), from the lab's secrets (pure)."""
    secrets = paths.secrets_dir
    addr, ca = f"https://{node.address}:{AGENT_PORT}", str(secrets / "ca.pem")
    cert, key = str(secrets / "operator.crt"), str(secrets / "operator.key")
    return [
        ("FIELDLAB_AGENT_ADDR", addr),
        ("FIELDLAB_AGENT_CACERT", ca),
        ("FIELDLAB_AGENT_CLIENT_CERT", cert),
        ("FIELDLAB_AGENT_CLIENT_KEY", key),
        ("NOMAD_ADDR", addr),
        ("NOMAD_CACERT", ca),
        ("NOMAD_CLIENT_CERT", cert),
        ("NOMAD_CLIENT_KEY", key),
    ]


def exports(pairs: Sequence[tuple[str, str]]) -> str:
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in pairs)


def cmd_env(args: argparse.Namespace) -> int:
    paths = LabPaths(args.lab)
    record = _need_record(paths)
    node = record.node(args.node)
    if node.role not in ("client", "light"):
        clients = ", ".join(n.name for n in record.nodes if n.role in ("client", "light"))
        raise LabError(f"{node.name} is a {node.role}: it runs no fieldlab-agent (clients: {clients})")
    pairs = agent_env(node, paths)
    missing = list(dict.fromkeys(v for k, v in pairs[1:4] if not Path(v).exists()))
    if missing:
        warn(f"lab {record.name}: not there yet (is the lab provisioned?): {', '.join(missing)}")
    print(exports(pairs), end="")
    return 0


def cmd_ssh(args: argparse.Namespace) -> int:
    paths = LabPaths(args.lab)
    record = _need_record(paths)
    argv = provider_for(record.provider).ssh_argv(record, paths, args.node)
    if args.command and sys.stdin.isatty():
        argv.insert(1, "-t")  # a command from a terminal gets one too (`-- fieldlab-agent alloc exec -i -t`)
    argv += list(args.command)
    os.execvp(argv[0], argv)  # noqa: S606 - hands the terminal to ssh
    return 127  # pragma: no cover - exec does not return


def cmd_reboot(args: argparse.Namespace) -> int:
    paths = LabPaths(args.lab)
    record = _need_record(paths)
    kind = "hard" if args.hard else "clean"
    say(f"{args.node}: {kind} reboot ...")
    secs = provider_for(record.provider).reboot(record, paths, args.node, hard=args.hard)
    say(f"{args.node}: back with a new boot id after {secs:.1f}s")
    if record.node(args.node).role == "server" and not args.no_unseal:
        from lab.playbook import run_playbook

        run_playbook("vault.yml", paths, tags="unseal", quiet=True)
    return 0


def cmd_provision(args: argparse.Namespace) -> int:
    from lab.playbook import run_playbook
    from lab.wheelhouse import build_wheelhouse

    paths = LabPaths(args.lab)
    _need_record(paths)
    digest, _ = build_wheelhouse(paths.wheelhouse)
    t0 = time.monotonic()
    recap = run_playbook(args.playbook, paths, extra={"fieldlab_agent_wheel_hash": digest})
    say(f"{args.playbook}: changed={recap.changed} in {time.monotonic() - t0:.1f}s")
    return 0


def cmd_image(args: argparse.Namespace) -> int:
    _require_root()
    from lab.providers.docker import DockerProvider

    t0 = time.monotonic()
    tag, built = DockerProvider().image()
    say(f"node image {tag}: {'built' if built else 'cached'} ({time.monotonic() - t0:.1f}s)")
    return 0


def cmd_bake(args: argparse.Namespace) -> int:
    _require_root()
    from lab.providers.docker import DockerProvider

    provider = DockerProvider()
    t0 = time.monotonic()
    base, _ = provider.image()
    bake, _ = _ensure_bake(provider, base, LabPaths(args.lab))
    how = f"built ({bake.reason})" if bake.built else "cached"
    say(f"baked node images {', '.join(bake.tags.values())}: {how} ({time.monotonic() - t0:.1f}s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fieldlab", description="fieldlab: build, provision and disrupt a test lab"
    )
    p.add_argument("--version", action="version", version=f"fieldlab v{__version__}")
    top = p.add_subparsers(dest="area", required=True)
    labp = top.add_parser("lab", help="lab lifecycle")
    sub = labp.add_subparsers(dest="cmd", required=True)

    def with_lab(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument("--lab", default=os.environ.get("LAB", "default"), help="lab name (env LAB)")
        return sp

    up = with_lab(sub.add_parser("up", help="create and provision a lab (converges if it is up)"))
    up.add_argument(
        "--provider",
        default=os.environ.get("PROVIDER", "docker"),
        help="docker (default), static (your hosts) or qemu (VMs: docs/vm.md)",
    )
    up.add_argument(
        "--clients",
        type=int,
        default=int(os.environ.get("CLIENTS", "2")),
        help="client nodes (1-200): the first --full-clients run docker, the rest are light (docs/fleet.md)",
    )
    up.add_argument(
        "--full-clients",
        type=int,
        default=int(os.environ.get("FULL_CLIENTS", "2")),
        help="how many of the clients are full ones, with a docker engine (1-8, default 2)",
    )
    up.add_argument(
        "--subnet", default=os.environ.get("SUBNET", "10.213.0.0/24"), help="lab network (private)"
    )
    up.add_argument(
        "--inventory", default=os.environ.get("INVENTORY"), help="static provider: your inventory"
    )
    up.add_argument(
        "--raw-exec",
        action="store_true",
        default=os.environ.get("RAW_EXEC") == "1",
        help="enable the agents' raw_exec driver (no isolation: trusted jobspecs only; off by default;"
        " make test and make nightly set it) (env RAW_EXEC=1)",
    )
    up.add_argument(
        "--layout",
        choices=LAYOUTS,
        default=os.environ.get("LAYOUT") or "fieldlab",
        help="the agents' node layout: fieldlab (default), or nomad: a Nomad client's names (unit nomad,"
        " /opt/nomad/data, netns by alloc id, nomad.slice, CNI network nomad), so that the suites run"
        " with TARGET=nomad against this agent (env LAYOUT)",
    )
    up.add_argument(
        "--target",
        choices=LAYOUTS,
        default=os.environ.get("LAB_TARGET") or "fieldlab",
        help="what the clients run: fieldlab (this agent, deployed; default), or nomad: the clients of"
        " your own Nomad cluster (--provider static): nothing is deployed, the cluster's ca.pem,"
        " operator.crt and operator.key go into the lab's secrets dir, the suites read the nodes as"
        " Nomad's (env LAB_TARGET)",
    )
    up.add_argument("--no-provision", action="store_true", help="only create nodes and the inventory")
    up.add_argument(
        "--full",
        action="store_true",
        default=os.environ.get("FULL") == "1",
        help="run every role (site.yml) even on nodes of the current bake: repairs drift on a running"
        " lab (env FULL=1)",
    )
    up.add_argument(
        "--no-bake",
        action="store_true",
        default=os.environ.get("NO_BAKE") == "1",
        help="bare node image and every role from scratch (site.yml), no baked image (env NO_BAKE=1)",
    )
    up.add_argument(
        "--keep",
        action="store_true",
        default=os.environ.get("KEEP_LAB") == "1",
        help="keep a half-created lab after a failure (env KEEP_LAB=1)",
    )
    up.set_defaults(func=cmd_up)

    down = with_lab(sub.add_parser("down", help="remove the lab (keeps the cached node image)"))
    down.add_argument("--image", action="store_true", help="remove the node image too (make lab-clean)")
    down.set_defaults(func=cmd_down)

    st = with_lab(
        sub.add_parser(
            "status",
            help="show the nodes and their state",
            description="Exit 0 when every node runs, 1 when one does not, 2 when the lab is not up.",
        )
    )
    st.add_argument("--json", action="store_true", help="the nodes' states as JSON")
    st.set_defaults(func=cmd_status)

    env = with_lab(
        sub.add_parser(
            "env",
            help="print the exports that point fieldlab-agent at a node's agent",
            description="Print FIELDLAB_AGENT_ADDR, _CACERT, _CLIENT_CERT and _CLIENT_KEY for NODE, and "
            "NOMAD_ADDR, NOMAD_CACERT, NOMAD_CLIENT_CERT and NOMAD_CLIENT_KEY for Nomad's own tools: "
            'eval "$(fieldlab lab env client1)" and then fieldlab-agent node status (or nomad job status).',
        )
    )
    env.add_argument("node", metavar="NODE")
    env.set_defaults(func=cmd_env)

    ssh = with_lab(
        sub.add_parser(
            "ssh",
            help="ssh to a node (optionally run a command)",
            usage="fieldlab lab ssh [-h] [--lab LAB] NODE [-- CMD [ARG...]]",
            description="A shell on NODE, or CMD run there. Options go before --; everything after "
            "it is the command.",
        )
    )
    ssh.add_argument("node", metavar="NODE")
    ssh.add_argument("command", nargs="*", help=argparse.SUPPRESS)
    ssh.set_defaults(func=cmd_ssh)

    rb = with_lab(sub.add_parser("reboot", help="reboot a node: clean (systemctl reboot) or --hard"))
    rb.add_argument("node")
    rb.add_argument("--hard", action="store_true", help="kill the node and power it on again")
    rb.add_argument("--no-unseal", action="store_true", help="leave OpenBao sealed after a server reboot")
    rb.set_defaults(func=cmd_reboot)

    pv = with_lab(sub.add_parser("provision", help="re-run one playbook on the running lab"))
    pv.add_argument("--playbook", default="site.yml", help="e.g. agent.yml (make deploy-agent)")
    pv.set_defaults(func=cmd_provision)

    im = sub.add_parser("image", help="build (or find cached) the bare node image")
    im.set_defaults(func=cmd_image)
    bk = with_lab(
        sub.add_parser(
            "bake",
            help="build (or find cached) the baked node images that lab up starts nodes from",
            description="Run the lab-independent roles once on a throw-away lab and commit its nodes as "
            "fieldlab-node-baked:<role>-<hash of the inputs>; rebuilt when an input changed. "
            "--lab: whose agent wheelhouse the bake installs from.",
        )
    )
    bk.set_defaults(func=cmd_bake)
    add_suite_commands(top)
    return p


def split_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(what to parse, what follows `--`) for `lab ssh NODE ... -- CMD` and `e2e ... -- PYTEST-ARGS`:
    options after NODE stay options (`--lab x`), the command is only what follows `--`."""
    args = list(argv)
    if "--" in args:
        cut = args.index("--")
        words = [a for a in args[:cut] if not a.startswith("-")]
        if words[:2] == ["lab", "ssh"] or words[:1] == ["e2e"]:
            return args[:cut], args[cut + 1 :]
    return args, []


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    head, command = split_command(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(head)
    if command and args.func is cmd_ssh:
        args.command = [*args.command, *command]
    elif command:
        args.pytest_args = [*args.pytest_args, *command]
    try:
        rc: int = args.func(args)
        return rc
    except LabError as exc:
        print(f"fieldlab: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"fieldlab: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        if type(exc).__module__.startswith("docker"):
            print(f"fieldlab: error: dockerd refused: {exc}", file=sys.stderr)
            return 2
        raise
    except KeyboardInterrupt:
        print("fieldlab: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
