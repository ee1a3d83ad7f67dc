#!/usr/bin/python
"""Ansible module (fieldlab_agent role): a node's directories and small files in one task.

An agent's per-lab files (its AppRole credentials, the lab's CA, its config, its systemd unit) were
a `copy` or `template` task each: Ansible's cost per task and host (a module run over SSH, about
0.4 CPU-seconds on a 2-core controller that also runs the nodes) made them minutes for a fleet of a
hundred clients. Here they are one module run per host with the same rules: a file is written only
when its content, mode or owner differ, atomically (a temp file beside it, fsync'd, renamed), after
its `validate` command accepted the temp file; `changed` says whether anything was written, and
`changed_files` which. File contents are no_log: they may hold secrets, and never appear in output."""

from __future__ import annotations

import grp
import os
import pwd

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fieldlab.lab.plugins.module_utils.nodefs import differs, parse_mode, write_atomically

DOCUMENTATION = r"""
module: node_files
short_description: Write a node's directories and small files in one task, each only when it differs
options:
  owner: {type: str, description: Owner of every directory and file (default the user the module runs as).}
  group: {type: str, description: Group of every directory and file (default that user's group).}
  directories:
    type: list
    elements: dict
    default: []
    description: Each a dict of path and mode (an octal string); created or given that mode.
  files:
    type: list
    elements: dict
    default: []
    description: >-
      Each a dict of dest, content (no_log), mode (an octal string) and optional validate (a command
      with %s for the temp file, as the copy module's).
"""

_FILE_SPEC = {
    "dest": {"type": "path", "required": True},
    "content": {"type": "str", "required": True, "no_log": True},
    "mode": {"type": "str", "required": True},
    "validate": {"type": "str"},
}
_DIR_SPEC = {"path": {"type": "path", "required": True}, "mode": {"type": "str", "required": True}}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "owner": {"type": "str"},
            "group": {"type": "str"},
            "directories": {"type": "list", "elements": "dict", "default": [], "options": _DIR_SPEC},
            "files": {"type": "list", "elements": "dict", "default": [], "options": _FILE_SPEC},
        },
        supports_check_mode=True,
    )
    p = module.params
    changed_dirs: list[str] = []
    changed_files: list[str] = []
    try:
        uid = pwd.getpwnam(p["owner"]).pw_uid if p["owner"] else os.getuid()
        gid = grp.getgrnam(p["group"]).gr_gid if p["group"] else os.getgid()
        for d in p["directories"]:
            mode = parse_mode(d["path"], d["mode"])
            if differs(d["path"], None, mode, uid, gid):
                changed_dirs.append(d["path"])
                if not module.check_mode:
                    os.makedirs(d["path"], exist_ok=True)
                    os.chmod(d["path"], mode)
                    os.chown(d["path"], uid, gid)
        for f in p["files"]:
            mode = parse_mode(f["dest"], f["mode"])
            content = f["content"].encode()
            if differs(f["dest"], content, mode, uid, gid):
                changed_files.append(f["dest"])
                if not module.check_mode:
                    write_atomically(f["dest"], content, mode, uid, gid, f.get("validate"))
    except (KeyError, OSError, ValueError) as exc:
        module.fail_json(msg=str(exc), changed_files=changed_files, changed_directories=changed_dirs)
    module.exit_json(
        changed=bool(changed_dirs or changed_files),
        changed_files=changed_files,
        changed_directories=changed_dirs,
    )


if __name__ == "__main__":
    main()
