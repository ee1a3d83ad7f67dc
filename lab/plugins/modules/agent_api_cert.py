#!/usr/bin/python
"""Ansible module (fieldlab_agent role): the agent's own API certificate, checked and issued on the
node in one task.

Runs on the client itself: when the certificate is missing, its key is missing, or it expires within
`renew_before` seconds, the node logs in to OpenBao with its own AppRole (read from `approle_file`
on the node: the secret never travels in the task's arguments) and issues a certificate for its own
name from the agent role, whose policy allows nothing else. The private key is written on the node
(mode 0600) and never leaves it: it is not in the module's result. Before, this was five tasks per
host (a check, the login, the issue, two writes), minutes for a fleet of a hundred clients."""

from __future__ import annotations

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fieldlab.lab.plugins.module_utils.bao import request
from ansible_collections.fieldlab.lab.plugins.module_utils.nodefs import write_atomically

DOCUMENTATION = r"""
module: agent_api_cert
short_description: Issue the agent's API certificate on the node when it is missing or expires soon
options:
  vault_addr: {type: str, required: true, description: The OpenBao API address.}
  approle_file: {type: path, required: true, description: The node's AppRole login body (role_id, secret_id).}
  mount: {type: str, default: pki_int, description: The PKI mount.}
  role: {type: str, required: true, description: The PKI role.}
  common_name: {type: str, required: true, description: The certificate's common name.}
  alt_names: {type: str, default: "", description: DNS SANs, comma-joined.}
  ip_sans: {type: str, default: "", description: IP SANs, comma-joined.}
  ttl: {type: str, required: true, description: The certificate's TTL.}
  renew_before: {type: int, default: 86400, description: Issue again when it expires within these seconds.}
  cert: {type: path, required: true, description: Where the certificate and its chain go (mode 0644).}
  key: {type: path, required: true, description: Where the private key goes (mode 0600).}
"""


def valid_for(cert: str, key: str, seconds: int) -> bool:
    """Whether the certificate and its key are there and the certificate outlives `seconds`."""
    if not (os.path.isfile(cert) and os.path.isfile(key)):
        return False
    done = subprocess.run(
        ["openssl", "x509", "-noout", "-checkend", str(seconds), "-in", cert],
        capture_output=True,
        check=False,
    )
    return done.returncode == 0


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "vault_addr": {"type": "str", "required": True},
            "approle_file": {"type": "path", "required": True},
            "mount": {"type": "str", "default": "pki_int"},
            "role": {"type": "str", "required": True},
            "common_name": {"type": "str", "required": True},
            "alt_names": {"type": "str", "default": ""},
            "ip_sans": {"type": "str", "default": ""},
            "ttl": {"type": "str", "required": True},
            "renew_before": {"type": "int", "default": 86400},
            "cert": {"type": "path", "required": True},
            "key": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    if valid_for(p["cert"], p["key"], p["renew_before"]):
        module.exit_json(changed=False, issued=False)
    if module.check_mode:
        module.exit_json(changed=True, issued=False)
    base = p["vault_addr"].rstrip("/") + "/v1/"
    try:
        with open(p["approle_file"], encoding="utf-8") as fh:
            login = json.load(fh)
        token = request(base + "auth/approle/login", "", "POST", login)[1]["auth"]["client_token"]
        body = {k: p[k] for k in ("common_name", "alt_names", "ip_sans", "ttl")}
        data = request(base + f"{p['mount']}/issue/{p['role']}", token, "POST", body)[1]["data"]
        chain = "\n".join([data["certificate"], *(data.get("ca_chain") or [])])
        write_atomically(p["key"], (data["private_key"] + "\n").encode(), 0o600, 0, 0, None)
        write_atomically(p["cert"], (chain + "\n").encode(), 0o644, 0, 0, None)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
        # Errors name the file or the API path (bao.request), never a response or request body.
        what = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        module.fail_json(msg=f"agent API certificate for {p['common_name']}: {type(exc).__name__}: {what}")
    module.exit_json(changed=True, issued=True, common_name=p["common_name"])


if __name__ == "__main__":
    main()
