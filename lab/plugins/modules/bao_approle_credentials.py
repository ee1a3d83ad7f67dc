#!/usr/bin/python
"""Ansible module (pki role): each client's AppRole credentials, checked and renewed in one task.

For every client: its role's role ID; a stored credential (the controller's approle-<client>.json,
passed in `stored`) is kept when its role ID is the role's and the server still knows its secret ID
(secret-id/lookup with the root token: a secret ID bound to its client's address logs in from that
client only); otherwise a new secret ID is generated. Returns the new credentials only (the task is
no_log), for the role to save on the controller."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fieldlab.lab.plugins.module_utils.bao import request

DOCUMENTATION = r"""
module: bao_approle_credentials
short_description: Check each client's AppRole credentials and generate the missing ones
options:
  url: {type: str, required: true, description: The OpenBao API address.}
  token: {type: str, required: true, no_log: true, description: A token that may manage the AppRoles.}
  clients: {type: list, elements: str, required: true, description: The clients.}
  stored: {type: dict, default: {}, no_log: true, description: client -> the credentials stored for it.}
  role_prefix: {type: str, default: fieldlab-agent-, description: The roles' names before the client's.}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "token": {"type": "str", "required": True, "no_log": True},
            "clients": {"type": "list", "elements": "str", "required": True},
            "stored": {"type": "dict", "default": {}, "no_log": True},
            "role_prefix": {"type": "str", "default": "fieldlab-agent-"},
        },
        supports_check_mode=True,
    )
    base = module.params["url"].rstrip("/") + "/v1/auth/approle/role/"
    token = module.params["token"]
    renewed: dict[str, dict[str, str]] = {}
    try:
        for client in module.params["clients"]:
            role = base + module.params["role_prefix"] + client
            role_id = request(role + "/role-id", token, "GET")[1]["data"]["role_id"]
            stored = module.params["stored"].get(client) or {}
            if stored.get("role_id") == role_id and stored.get("secret_id"):
                status, _ = request(
                    role + "/secret-id/lookup", token, "POST", {"secret_id": stored["secret_id"]}
                )
                if status == 200:
                    continue
            secret_id = (
                ""
                if module.check_mode
                else request(role + "/secret-id", token, "POST")[1]["data"]["secret_id"]
            )
            renewed[client] = {"role_id": role_id, "secret_id": secret_id}
    except (RuntimeError, KeyError, OSError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=bool(renewed), renewed=renewed, clients=sorted(renewed))


if __name__ == "__main__":
    main()
