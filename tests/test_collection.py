"""The Ansible collection fieldlab.lab (lab/): every role is referenced by its FQCN and resolves in the
checkout (both ansible.cfg files) through collections/ansible_collections/fieldlab/lab -> lab; each
role's README is the one scripts/role_docs.py makes from its argument_specs; the tarball holds the
collection only, installs offline into a fresh directory and its playbooks resolve from there alone;
and (root, dockerd) the installed collection's node_base runs on a throw-away node, idempotently."""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from lab.config import PROJECT_DIR

ROLES = sorted(p.name for p in (PROJECT_DIR / "lab" / "roles").iterdir() if p.is_dir())


def _script(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, PROJECT_DIR / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and typing look their module up by name
    spec.loader.exec_module(module)
    return module


role_docs = _script("role_docs")
collection = _script("collection")


# --- in the checkout ---------------------------------------------------------------------------


def _role_refs(node: Any) -> Iterator[str]:
    """Every role name a playbook or task file names: plays' roles and import_role/include_role."""
    if isinstance(node, list):
        for item in node:
            yield from _role_refs(item)
    elif isinstance(node, dict):
        for entry in node.get("roles") or []:
            yield entry if isinstance(entry, str) else str(entry.get("role") or entry.get("name"))
        for action in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
            if isinstance(node.get(action), dict):
                yield str(node[action]["name"])
        for key, value in node.items():
            if key != "roles":
                yield from _role_refs(value)


def test_every_role_is_referenced_by_its_fqcn() -> None:
    files = [
        *sorted((PROJECT_DIR / "lab" / "playbooks").glob("*.yml")),
        *sorted((PROJECT_DIR / "lab" / "roles").glob("*/tasks/*.yml")),
        *sorted((PROJECT_DIR / "lab" / "roles").glob("*/handlers/*.yml")),
        *sorted((PROJECT_DIR / "molecule").glob("*/*.yml")),
    ]
    refs = {(f.relative_to(PROJECT_DIR), r) for f in files for r in _role_refs(yaml.safe_load(f.read_text()))}
    assert refs, "no role reference found at all"
    short = sorted(f"{f}: {r}" for f, r in refs if not r.startswith("fieldlab.lab."))
    assert not short, f"roles named without their FQCN: {short}"
    unknown = sorted(f"{f}: {r}" for f, r in refs if r.removeprefix("fieldlab.lab.") not in ROLES)
    assert not unknown, f"no such role in lab/roles: {unknown}"


def _cfg(path: Path) -> configparser.ConfigParser:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(path)
    return cfg


def test_both_ansible_cfgs_hold_the_same_settings_and_find_the_collection_in_lab() -> None:
    lab, root = _cfg(PROJECT_DIR / "lab" / "ansible.cfg"), _cfg(PROJECT_DIR / "ansible.cfg")
    settings = {s: dict(lab[s]) for s in lab.sections()}
    at_root = {s: dict(root[s]) for s in root.sections()}
    for cfg_dir, each in ((PROJECT_DIR / "lab", settings), (PROJECT_DIR, at_root)):
        found = (cfg_dir / each["defaults"].pop("collections_path")).resolve()
        assert (found / "ansible_collections" / "fieldlab" / "lab").resolve() == (
            PROJECT_DIR / "lab"
        ).resolve()
        assert "roles_path" not in each["defaults"], "roles are found by FQCN through the collection"
    assert at_root == settings, "ansible.cfg and lab/ansible.cfg differ"


def test_each_role_readme_is_the_one_generated_from_its_argument_specs() -> None:
    assert [p.name for p in role_docs.role_dirs()] == ROLES
    stale = [str(p.relative_to(PROJECT_DIR)) for p in role_docs.stale()]
    assert not stale, f"stale role READMEs, run `python scripts/role_docs.py`: {stale}"


def test_a_role_readme_shows_every_entry_point_option_and_suboption(tmp_path: Path) -> None:
    role = tmp_path / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(
        yaml.safe_dump(
            {
                "argument_specs": {
                    "main": {
                        "short_description": "A demo",
                        "description": ["First paragraph with <name> and a | pipe."],
                        "options": {
                            "demo_mode": {
                                "type": "str",
                                "default": "a",
                                "choices": ["a", "b"],
                                "description": "Mode.",
                            },
                            "demo_jobs": {
                                "type": "list",
                                "elements": "dict",
                                "description": "Jobs.",
                                "options": {
                                    "name": {"type": "str", "required": True, "description": "Its name."}
                                },
                            },
                        },
                    },
                    "facts": {"short_description": "Only the facts", "options": {}},
                }
            },
            sort_keys=False,
        )
    )
    playbooks = tmp_path / "playbooks"
    playbooks.mkdir()
    (playbooks / "demo.yml").write_text(
        yaml.safe_dump([{"name": "Demo", "hosts": "clients", "roles": [{"role": "fieldlab.lab.demo"}]}])
    )
    text = role_docs.render(role, playbooks)
    assert text.startswith(role_docs.GENERATED)
    assert "# fieldlab.lab.demo" in text and "## Entry point `facts`" in text
    assert "First paragraph with &lt;name&gt; and a \\| pipe." in text
    assert "| `demo_mode` | str |  | `a` | `a`, `b` | Mode. |" in text
    assert "| `demo_jobs[].name` | str | yes |  |  | Its name. |" in text
    assert "  hosts: clients\n" in text and "tasks_from: facts" in text
    assert "`fieldlab.lab.demo` (hosts `clients`)" in text


# --- built, installed, used from elsewhere -----------------------------------------------------


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The collection built from the checkout and installed, offline, into a fresh directory."""
    tmp = tmp_path_factory.mktemp("collection")
    tarball = collection.build(tmp / "build")
    return Path(collection.install(tarball, tmp / "collections"))


def test_the_tarball_holds_the_collection_and_nothing_of_the_python_package(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    tarball = collection.build(tmp_path_factory.mktemp("tarball"))
    assert collection.unexpected_members(tarball) == []
    with tarfile.open(tarball) as tf:
        names = set(tf.getnames())
    assert {"README.md", "meta/runtime.yml", "playbooks/site.yml", "roles/node_base/README.md"} <= names
    assert {f"roles/{r}/meta/argument_specs.yml" for r in ROLES} <= names
    assert not [n for n in names if re.search(r"(^|/)(state|inventory|__pycache__)(/|$)|\.pyc$", n)]


def test_the_installed_collection_alone_resolves_every_playbook_from_outside_the_checkout(
    installed: Path, tmp_path: Path
) -> None:
    assert not str(tmp_path.resolve()).startswith(str(PROJECT_DIR.resolve()))
    checked = collection.syntax_check(installed, tmp_path)
    assert "fieldlab.lab.site" in checked and "fieldlab.lab.node_base" in checked
    assert len(checked) == len(list((PROJECT_DIR / "lab" / "playbooks").glob("*.yml")))


# The three inputs of the roles that are files of the controller's (fieldlab's lab passes them): run
# from the installed collection without one, the role names the variable before it touches the node.
# The node (a closed port on loopback) is never reached when the check fires; with the input given,
# the check passes and the next task's connection is refused instead.
_NOWHERE = "all:\n  hosts:\n    nowhere:\n      ansible_host: 127.0.0.1\n      ansible_port: 9\n"
_ONE_ROLE = """- name: One role's entry point alone
  hosts: all
  gather_facts: false
  tasks:
    - name: Run it
      ansible.builtin.include_role:
        name: "fieldlab.lab.{{ role }}"
        tasks_from: "{{ entry }}"
"""
CONTROLLER_INPUTS = [
    # (role, entry point, the variable its message names, extra vars that give the input)
    ("openbao", "main", "openbao_controller_binary", {"openbao_controller_binary": "{bao}"}),
    ("workload_images", "main", "workload_images_probe_src", {"fieldlab_project_dir": "{project}"}),
    ("workload_images", "exec_probe", "workload_images_probe_src", {"fieldlab_project_dir": "{project}"}),
    ("fieldlab_agent", "install", "fieldlab_wheelhouse", {"fieldlab_agent_wheelhouse_src": "{wheels}"}),
]


@pytest.mark.parametrize(("role", "entry", "named", "given"), CONTROLLER_INPUTS)
def test_a_role_run_from_the_installed_collection_names_a_missing_controller_input(
    installed: Path, tmp_path: Path, role: str, entry: str, named: str, given: dict[str, str]
) -> None:
    from lab.playbook import bao_binary

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / ".complete").write_text("0123456789abcdef\n")
    values = {"bao": str(bao_binary()), "project": str(PROJECT_DIR), "wheels": str(wheels)}
    (tmp_path / "hosts.yml").write_text(_NOWHERE)
    (tmp_path / "one.yml").write_text(_ONE_ROLE)
    base = [
        str(collection.VENV_BIN / "ansible-playbook"),
        "-i",
        "hosts.yml",
        "one.yml",
        "-e",
        f"role={role} entry={entry} fieldlab_secrets_dir={tmp_path / 'secrets'}",
    ]
    env = collection.clean_env(installed.parents[2], tmp_path)

    def run(extra: dict[str, str]) -> str:
        argv = base + [a for k, v in extra.items() for a in ("-e", f"{k}={v.format(**values)}")]
        proc = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
        assert proc.returncode != 0, "a node on a closed port cannot have been provisioned"
        return proc.stdout + proc.stderr

    missing = run({})
    assert f"{named} (" in missing and "is not" in missing, missing[-2000:]
    assert "UNREACHABLE" not in missing, "the node was contacted before the input was checked"
    present = run(given)
    assert "UNREACHABLE" in present and f"{named} (" not in present, present[-2000:]


# A throw-away one-server one-client lab of the docker provider, outside every other test's subnet.
COLLTEST_LAB = "colltest"
COLLTEST_SUBNET = "10.213.203.0/24"


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (docker)")
def test_the_installed_collection_runs_node_base_on_a_lab_node(installed: Path, tmp_path: Path) -> None:
    from lab.config import LabPaths, LabSpec
    from lab.inventory import write_inventory
    from lab.providers.base import LabRecord
    from lab.providers.docker import DockerProvider
    from lab.ssh import run

    provider = DockerProvider()
    paths = LabPaths(COLLTEST_LAB, home=tmp_path / "home")
    provider.down(LabRecord(COLLTEST_LAB, "docker", []), paths)  # leftovers of an interrupted run
    record = provider.up(LabSpec(name=COLLTEST_LAB, clients=1, subnet=COLLTEST_SUBNET), paths)
    try:
        inventory = write_inventory(record, paths)
        work = tmp_path / "work"
        work.mkdir()
        argv = [
            str(collection.VENV_BIN / "ansible-playbook"),
            "-i",
            str(inventory),
            "fieldlab.lab.node_base",
            "-e",
            "node_base_install_packages=false",  # the node image has them; the lab network has no mirror
        ]
        env = collection.clean_env(installed.parents[2], work)
        recaps = []
        # ssh's control sockets in a short dir: under the test's tmp_path (~/.ansible/cp of HOME=work)
        # the socket path passes the 108 bytes a unix socket may have once pytest's run counter grows
        with tempfile.TemporaryDirectory(prefix="flcp-", dir="/tmp") as cp_dir:
            env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = cp_dir
            for _ in range(2):  # converge, then the same again: nothing may change
                proc = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, check=False)
                assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
                recaps.append(re.findall(r"^(\S+)\s+: ok=\d+\s+changed=(\d+)", proc.stdout, re.M))
        assert {h for h, _ in recaps[0]} == {"server1", "client1"}
        assert [c for _, c in recaps[1]] == ["0", "0"], f"second run changed something: {recaps[1]}"
        for node in record.nodes:
            res = run(node.target(paths), "sysctl -n fs.inotify.max_user_instances; date +%Z")
            assert res.rc == 0 and res.stdout.split() == ["1024", "UTC"], (node.name, res.stdout, res.stderr)
    finally:
        provider.down(record, paths)
