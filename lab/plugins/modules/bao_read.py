#!/usr/bin/python
"""Ansible module (pki role): read several OpenBao API paths in one task.

The pki role decides what to create from what is there: the mounts, the auth methods, the CAs'
issuers, the sample entry, the agents' quota. A `uri` task per read costs Ansible's module run each
(a third of a second in a container node, five seconds in a VM under TCG), and on a lab that is
already set up the reads are all the role does; here they are one module run of plain requests on
the server. A path that is not there answers 404 (status 404, json {}); any other error fails naming the
path. The role reads before it mounts anything, so no read meets a mount still being set up."""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fieldlab.lab.plugins.module_utils.bao import request

DOCUMENTATION = r"""
module: bao_read
short_description: Read several OpenBao API paths in one task
options:
  url: {type: str, required: true, description: The OpenBao API address.}
  token: {type: str, required: true, no_log: true, description: A token that may read them.}
  paths:
    type: dict
    required: true
    description: Name -> path under /v1/ (a query such as ?list=true allowed); each read with GET.
"""

RETURN = r"""
reads:
  description: Name -> {status, json}; json is {} for a path that is not there (404).
  type: dict
  returned: always
"""


def read(base: str, token: str, path: str) -> dict[str, object]:
    try:
        status, body = request(base + path, token, "GET", missing_ok=True)
    except OSError as exc:  # RuntimeError (an error status) already names the path
        raise RuntimeError(f"GET {path}: {exc}") from None
    return {"status": status, "json": body}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "token": {"type": "str", "required": True, "no_log": True},
            "paths": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    base = module.params["url"].rstrip("/") + "/v1/"
    reads: dict[str, dict[str, object]] = {}
    try:
        for name, path in module.params["paths"].items():
            reads[name] = read(base, module.params["token"], str(path))
    except RuntimeError as exc:
        module.fail_json(msg=str(exc), reads=reads)
    module.exit_json(changed=False, reads=reads)


if __name__ == "__main__":
    main()
