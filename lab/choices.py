"""What a `lab up` asked for beyond its nodes, and keeps for later commands: the LabSpec of its
arguments, the record's raw_exec, layout and target, and (for a Nomad cluster's own clients) the
cluster's certificates it needs in the secrets dir before it does anything."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from lab.config import LabPaths, LabSpec
from lab.errors import ConfigError
from lab.providers.base import LabRecord


def spec_of(args: argparse.Namespace) -> LabSpec:
    return LabSpec(
        name=args.lab,
        provider=args.provider,
        clients=args.clients,
        full_clients=args.full_clients,
        subnet=args.subnet,
        static_inventory=Path(args.inventory) if args.inventory else None,
        raw_exec=args.raw_exec,
        layout=args.layout,
        target=args.target,
    )


def keep_choices(record: LabRecord, spec: LabSpec, paths: LabPaths) -> LabRecord:
    """What this `up` asked for (raw_exec, layout, target), kept in the record for later commands."""
    asked = (spec.raw_exec, spec.layout, spec.target)
    if (record.raw_exec, record.layout, record.target) == asked:
        return record
    record = replace(record, raw_exec=spec.raw_exec, layout=spec.layout, target=spec.target)
    record.save(paths)
    return record


CLUSTER_CERTS = ("ca.pem", "operator.crt", "operator.key")


def require_cluster_certs(paths: LabPaths, target: str) -> None:
    """A Nomad cluster's clients are reached with the cluster's CA and a client certificate it
    accepts, copied into the lab's secrets dir by hand (the lab's own PKI issued none of them).
    Nothing to check for this agent's lab (its PKI issues them)."""
    if target == "fieldlab":
        return
    missing = [n for n in CLUSTER_CERTS if not (paths.secrets_dir / n).is_file()]
    if missing:
        raise ConfigError(
            f"--target {target}: copy the cluster's CA and a client certificate it accepts to"
            f" {paths.secrets_dir}/{{{','.join(CLUSTER_CERTS)}}} (mode 0600); missing: {', '.join(missing)}"
        )
