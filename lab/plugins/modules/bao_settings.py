#!/usr/bin/python
"""Ansible module (pki role): read each OpenBao setting and write the ones that differ, in one task.

A lab of a hundred clients has two settings per client (its policy, its AppRole role): done as one
`uri` task per setting, Ansible's per-item cost (a module run over SSH) made them minutes; here they
are one module run of plain HTTP requests on the server. Same rule as before: a setting is written
only when it is missing or the keys the role sets differ (durations in `ttl_keys` compared in
seconds, as the API reads them back)."""

from __future__ import annotations

import re

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.fieldlab.lab.plugins.module_utils.bao import request

DOCUMENTATION = r"""
module: bao_settings
short_description: Read OpenBao settings and write those that differ
options:
  url: {type: str, required: true, description: The OpenBao API address.}
  token: {type: str, required: true, no_log: true, description: A token that may read and write them.}
  settings:
    type: list
    elements: dict
    required: true
    description: Each a dict of path, body and optional ttl_keys (durations compared in seconds).
"""

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h|d)")


def to_seconds(value: object) -> int:
    """A duration as whole seconds: an int, digits, or Go's form ("72h", "1h30m", "90s")."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        return int(value)
    text = str(value).strip()
    if text.isdigit():
        return int(text)
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a duration: {value!r}")
    return int(sum(float(n) * _UNITS[u] for n, u in parts))


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "token": {"type": "str", "required": True, "no_log": True},
            "settings": {"type": "list", "elements": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    base = module.params["url"].rstrip("/") + "/v1/"
    token = module.params["token"]
    written: list[str] = []
    try:
        for item in module.params["settings"]:
            path, body = item["path"], item["body"]
            want = dict(body)
            for key in item.get("ttl_keys") or []:
                want[key] = to_seconds(body[key])
            status, got = request(base + path, token, "GET", missing_ok=True)
            data = got.get("data") or {}
            have = {k: data.get(k) for k in body}
            if status == 404 or have != want:
                if not module.check_mode:
                    request(base + path, token, "POST", body)
                written.append(path)
    except (RuntimeError, ValueError, OSError, KeyError) as exc:
        module.fail_json(msg=str(exc), written=written)
    module.exit_json(changed=bool(written), written=written)


if __name__ == "__main__":
    main()
