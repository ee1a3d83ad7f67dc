"""Builds the Ansible collection fieldlab.lab (lab/) and proves the tarball stands on its own.

    python scripts/collection.py [--output build/collection]

1. `ansible-galaxy collection build lab` into the output directory;
2. the tarball holds galaxy's metadata, README.md, CHANGELOG.md, meta/, roles/, playbooks/ and
   plugins/ only (lab/ is also the Python package `lab`, with lab state and secrets beside it:
   build_ignore must keep every one of them out, and this is where a forgotten one is caught);
3. `ansible-galaxy collection install --offline` into a fresh directory: no Galaxy (not reachable
   here); its dependency community.general must be met by what is installed (PyPI's ansible package);
4. from a directory outside the checkout, with no ansible.cfg and only that directory as the
   collections path, `ansible-playbook --syntax-check fieldlab.lab.<playbook>` for every playbook:
   the FQCNs resolve from the installed collection alone.

`make lint` runs it. tests/test_collection.py runs the same steps, and (root, dockerd) a real
fieldlab.lab.node_base against a throw-away node.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
COLLECTION_DIR = ROOT / "lab"
ALLOWED_TOP = {
    "MANIFEST.json",
    "FILES.json",
    "README.md",
    "CHANGELOG.md",
    "meta",
    "roles",
    "playbooks",
    "plugins",
}
VENV_BIN = Path(sys.executable).parent


class CollectionError(Exception):
    """The collection did not build, holds what it must not, or does not work once installed."""


def galaxy() -> dict[str, object]:
    return dict(yaml.safe_load((COLLECTION_DIR / "galaxy.yml").read_text()))


def clean_env(collections_path: Path, home: Path) -> dict[str, str]:
    """No ansible.cfg of the checkout, and only `collections_path` (and the ansible package's own
    collections) to find collections in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        {
            "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": str(home),
            "ANSIBLE_COLLECTIONS_PATH": str(collections_path),
            "ANSIBLE_FORCE_COLOR": "0",
            "ANSIBLE_NOCOLOR": "1",
        }
    )
    return env


def _run(argv: list[str], *, cwd: Path, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise CollectionError(
            f"{' '.join(argv)} (in {cwd}): rc {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
        )
    return proc.stdout


def build(output: Path) -> Path:
    """Build the tarball into `output` (replacing an earlier build of the same version); its absolute path."""
    output = output.resolve()
    output.mkdir(parents=True, exist_ok=True)
    meta = galaxy()
    tarball = output / f"{meta['namespace']}-{meta['name']}-{meta['version']}.tar.gz"
    _run(
        [
            str(VENV_BIN / "ansible-galaxy"),
            "collection",
            "build",
            str(COLLECTION_DIR),
            "--output-path",
            str(output),
            "--force",
        ],
        cwd=ROOT,
    )
    if not tarball.exists():
        raise CollectionError(f"ansible-galaxy made no {tarball}")
    return tarball


def unexpected_members(tarball: Path) -> list[str]:
    """Members outside galaxy metadata, README.md, CHANGELOG.md, meta/, roles/ and playbooks/."""
    with tarfile.open(tarball) as tf:
        return sorted(m.name for m in tf.getmembers() if m.name.split("/", 1)[0] not in ALLOWED_TOP)


def install(tarball: Path, into: Path) -> Path:
    """`ansible-galaxy collection install --offline` into `into`; the installed collection's directory."""
    into.mkdir(parents=True, exist_ok=True)
    _run(
        [
            str(VENV_BIN / "ansible-galaxy"),
            "collection",
            "install",
            "--offline",
            "-p",
            str(into),
            str(tarball),
        ],
        cwd=into,
        env=clean_env(into, into),
    )
    meta = galaxy()
    installed = into / "ansible_collections" / str(meta["namespace"]) / str(meta["name"])
    if not (installed / "MANIFEST.json").exists():
        raise CollectionError(f"no collection installed at {installed}")
    return installed


def playbooks(installed: Path) -> list[str]:
    meta = galaxy()
    return [
        f"{meta['namespace']}.{meta['name']}.{p.stem}"
        for p in sorted((installed / "playbooks").glob("*.yml"))
    ]


def syntax_check(installed: Path, workdir: Path) -> list[str]:
    """--syntax-check every playbook by its FQCN from `workdir`, with only the installed collection."""
    collections_path = installed.parents[2]
    inventory = workdir / "hosts.yml"
    inventory.write_text(
        yaml.safe_dump({"all": {"children": {"servers": {"hosts": {}}, "clients": {"hosts": {}}}}})
    )
    env = clean_env(collections_path, workdir)
    checked = []
    for fqcn in playbooks(installed):
        _run(
            [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), "--syntax-check", fqcn],
            cwd=workdir,
            env=env,
        )
        checked.append(fqcn)
    return checked


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--output", type=Path, default=ROOT / "build" / "collection", help="where the tarball goes"
    )
    args = parser.parse_args(argv)
    try:
        tarball = build(args.output)
        extra = unexpected_members(tarball)
        if extra:
            raise CollectionError(
                f"{tarball.name} holds files that are not the collection's (add them to lab/galaxy.yml's "
                f"build_ignore): {', '.join(extra)}"
            )
        with tempfile.TemporaryDirectory(prefix="fieldlab-collection-") as tmp:
            installed = install(tarball, Path(tmp) / "collections")
            work = Path(tmp) / "work"
            work.mkdir()
            checked = syntax_check(installed, work)
    except CollectionError as exc:
        print(f"[fieldlab] collection: {exc}", file=sys.stderr)
        return 1
    print(f"[fieldlab] collection: built {tarball}, nothing in it but the collection")
    print(f"[fieldlab] collection: installed alone, playbooks syntax-checked: {', '.join(checked)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
