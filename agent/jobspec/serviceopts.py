"""A service's and a check's options beyond where they point, read and checked as Nomad does
(nomad/structs/services.go: Service.Validate, ServiceCheck.validateCommon, validateConsul and
validateNomad, with their texts; api/services.go Canonicalize for the defaults):

- a service's `address` and `address_mode` (Nomad's GetAddress: agent.client.checktarget.service_address),
  `canary_tags` and `canary_meta`, `on_update` (its checks' default); Consul's own `meta`, `kind`,
  `enable_tag_override`, `weights` and `tagged_addresses` (sent to Consul: agent.consul.catalog);
- a check's http options (`protocol`, `header`, `body`, `tls_skip_verify`; the agent's checker sends
  them for a Nomad service: agent.runner.checks), `on_update` (a readiness check with "ignore"),
  and Consul's own (`initial_status`, `tls_server_name`, the thresholds, the grpc options);
- `expose`: Connect's, and Connect is refused (agent.jobspec.fieldclass), so an exposed check is
  refused as Nomad's admission refuses one without a sidecar proxy.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import replace
from typing import Any

from agent.jobspec.reader import BodyReader, choices, short
from agent.jobspec.tree import Body, join
from agent.structs.model import Check

SERVICE_ADDRESS_MODES = ("auto", "host", "alloc")  # the ones this node resolves (no driver network)
ON_UPDATE = ("require_healthy", "ignore_warnings", "ignore")
INITIAL_STATUSES = ("passing", "warning", "critical")
# Consul's service kinds Nomad takes ("" is Consul's typical service)
CONSUL_KINDS = ("api-gateway", "ingress-gateway", "mesh-gateway", "terminating-gateway")
CONSUL_SERVICE_KEYS = ("meta", "canary_meta", "enable_tag_override", "tagged_addresses", "weights", "kind")
# a check's options and the check types that use them (Nomad ignores them on others)
CHECK_KEY_TYPES = {
    "protocol": ("http",),
    "header": ("http",),
    "body": ("http",),
    "tls_skip_verify": ("http", "grpc"),
    "tls_server_name": ("http", "grpc"),
    "grpc_service": ("grpc",),
    "grpc_use_tls": ("grpc",),
}
THRESHOLDS = ("success_before_passing", "failures_before_critical", "failures_before_warning")
_NOTES_MAX = 255
_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[0-9.]+):([0-9]{1,5})$")


def _unset(value: object) -> bool:
    return value in (None, False, 0, "", [], {})


class ServiceOptions(BodyReader):
    def _service_fields(self, sb: Body, spath: str, name: str, provider: str) -> dict[str, Any]:
        """The Service fields beyond name, port, tags, checks and provider."""
        address = self._str(sb, "address", spath)
        mode = self._str(sb, "address_mode", spath, "auto") or "auto"
        mpath = join(spath, "address_mode")
        if mode == "driver":
            self.report.error(
                mpath,
                'cannot use address_mode="driver": no driver network exists (fieldlab-agent\'s tasks '
                "have none: their addresses are the node's or the alloc's)",
            )
        elif mode == "alloc_ipv6":
            self.report.error(mpath, "not supported by fieldlab-agent: its alloc networks are IPv4 only")
        elif mode not in SERVICE_ADDRESS_MODES:
            self.report.error(
                mpath, f'Service address_mode must be "auto", "host", or "driver"; not "{short(mode)}"'
            )
        elif address and mode != "auto":
            self.report.error(mpath, 'Service address_mode must be "auto" if address is set')
        on_update = self._str(sb, "on_update", spath, "require_healthy") or "require_healthy"
        if on_update not in ON_UPDATE:
            self.report.error(
                join(spath, "on_update"),
                'Service on_update must be "require_healthy", "ignore_warnings", or "ignore"; '
                f'not "{short(on_update)}"',
            )
        kind = self._str(sb, "kind", spath)
        if kind and kind not in CONSUL_KINDS:
            self.report.error(
                join(spath, "kind"),
                f"Service {short(name)} kind must be one of consul service kind or empty "
                f"({choices(CONSUL_KINDS)})",
            )
        if provider == "nomad":
            for key in CONSUL_SERVICE_KEYS:
                if not _unset(sb.get(key)):
                    self.report.warn(
                        join(spath, key),
                        "only Consul's: a Nomad service registration has no such field (Nomad ignores it "
                        "too)",
                    )
        return {
            "address": address,
            "address_mode": mode,
            "canary_tags": self._str_list(sb, "canary_tags", spath),
            "meta": self._str_map(sb, "meta", spath),
            "canary_meta": self._str_map(sb, "canary_meta", spath),
            "enable_tag_override": self._bool(sb, "enable_tag_override", spath, False),
            "tagged_addresses": self._tagged_addresses(sb, spath),
            "weights": self._weights(sb, spath),
            "kind": kind,
            "on_update": on_update,
        }

    def _tagged_addresses(self, sb: Body, spath: str) -> dict[str, str]:
        """Consul's tagged addresses: an IP, or IP:port (Nomad's parseAddress, at registration there)."""
        found = self._str_map(sb, "tagged_addresses", spath)
        for key, raw in found.items():
            if "${" in raw:
                continue  # interpolated when registered, as Nomad's client does
            m = _HOST_PORT.match(raw)
            host = m.group(1).strip("[]") if m else raw
            try:
                ipaddress.ip_address(host)
            except ValueError:
                self.report.error(
                    join(join(spath, "tagged_addresses"), short(key)),
                    f'error parsing address "{short(raw)}": not an IP address',
                )
                continue
            if m and not 0 < int(m.group(2)) <= 65535:
                self.report.error(
                    join(join(spath, "tagged_addresses"), short(key)), f"{m.group(2)} is not a port number"
                )
        return found

    def _weights(self, sb: Body, spath: str) -> tuple[int, int] | None:
        """Consul's weights (passing, warning), each 1 when unset or not positive (Nomad's Canonicalize)."""
        block = self._mapping(sb, "weights", spath)
        if block is None:
            return None
        wpath = join(spath, "weights")
        for key in block:
            if key.lower() not in ("passing", "warning"):
                self.report.error(join(wpath, short(key)), "not a field of weights: passing, warning")
        named = {k.lower(): v for k, v in block.items()}
        passing = self._int(named, "passing", wpath, 1)
        warning = self._int(named, "warning", wpath, 1)
        return (passing if passing > 0 else 1, warning if warning > 0 else 1)

    def _check_options(self, cb: Body, cpath: str, check: Check, on_update: str, provider: str) -> Check:
        """The check's options beyond where it points, with Nomad's rules for them."""
        ctype = check.type
        header = self._header(cb, cpath)
        protocol = self._str(cb, "protocol", cpath)
        if protocol not in ("", "http", "https"):
            self.report.error(
                join(cpath, "protocol"), f'unsupported protocol scheme "{short(protocol)}" (http or https)'
            )
        for key, kinds in CHECK_KEY_TYPES.items():
            if ctype not in kinds and not _unset(cb.get(key)):
                self.report.warn(
                    join(cpath, key), f"only applies to {' and '.join(kinds)} checks; ignored for {ctype}"
                )
        own = self._str(cb, "on_update", cpath)
        if own and own not in ON_UPDATE:
            self.report.error(
                join(cpath, "on_update"),
                f'on_update must be "require_healthy", "ignore_warnings", or "ignore"; got "{short(own)}"',
            )
        chosen = own or on_update
        self._on_update_rules(cpath, check, chosen, provider)
        status = self._str(cb, "initial_status", cpath)
        if status and status not in INITIAL_STATUSES:
            self.report.error(
                join(cpath, "initial_status"),
                f'invalid initial check state ({short(status)}), must be one of "passing", "warning", '
                '"critical" or empty',
            )
        elif status and provider == "nomad":
            self.report.warn(
                join(cpath, "initial_status"),
                "ignored for a Nomad service's check: Nomad's checks start pending (Nomad ignores it too)",
            )
        passing, critical, warning = (self._threshold(cb, key, cpath, ctype, provider) for key in THRESHOLDS)
        notes = self._str(cb, "notes", cpath)
        if provider != "nomad" and len(notes) > _NOTES_MAX:
            self.report.error(join(cpath, "notes"), "notes must not be longer than 255 characters")
        return replace(
            check,
            protocol=protocol,
            header=header,
            body=self._str(cb, "body", cpath),
            tls_skip_verify=self._bool(cb, "tls_skip_verify", cpath, False),
            tls_server_name=self._str(cb, "tls_server_name", cpath),
            grpc_service=self._str(cb, "grpc_service", cpath),
            grpc_use_tls=self._bool(cb, "grpc_use_tls", cpath, False),
            initial_status=status if status in INITIAL_STATUSES else "",
            on_update=chosen if chosen in ON_UPDATE else "require_healthy",
            success_before_passing=passing,
            failures_before_critical=critical,
            failures_before_warning=warning,
        )

    def _on_update_rules(self, cpath: str, check: Check, on_update: str, provider: str) -> None:
        """validateCommon's and validateNomad's rules over on_update and check_restart."""
        where = join(cpath, "on_update")
        if on_update == "ignore_warnings" and provider == "nomad":
            self.report.error(where, "on_update may only be set to ignore_warnings for Consul service checks")
        elif check.restart is not None and on_update == "ignore":
            self.report.error(where, 'on_update value "ignore" is not compatible with check_restart')
        elif (
            check.restart is not None and on_update == "ignore_warnings" and not check.restart.ignore_warnings
        ):
            self.report.error(
                where,
                'on_update value "ignore_warnings" not supported with check_restart ignore_warnings '
                'value "false"',
            )

    def _threshold(self, cb: Body, key: str, cpath: str, ctype: str, provider: str) -> int:
        """A Consul check threshold: negative is 0 (Nomad's Canonicalize); tcp, http and grpc only.
        A Nomad service's check refuses any (agent.jobspec.services CONSUL_ONLY_CHECK_KEYS)."""
        value = max(self._int(cb, key, cpath, 0), 0)
        if value and provider != "nomad" and ctype not in ("tcp", "http", "grpc"):
            self.report.error(join(cpath, key), f'{key} not supported for check of type "{ctype}"')
        return value

    def _header(self, cb: Body, cpath: str) -> dict[str, tuple[str, ...]]:
        """An http check's headers: name -> list of values (Nomad's map[string][]string)."""
        block = self._mapping(cb, "header", cpath)
        hpath = join(cpath, "header")
        out: dict[str, tuple[str, ...]] = {}
        for name in block or {}:
            if not name or any(c in name for c in ":\r\n\0 ") or not name.isprintable():
                self.report.error(join(hpath, short(name)), "not a valid HTTP header name")
                continue
            values = self._str_list(block or {}, name, hpath)
            if any(re.search(r"[\r\n\0]", v) for v in values):
                self.report.error(join(hpath, short(name)), "a header value holds no line break or NUL")
                continue
            out[name] = values
        return out

    def _expose(self, cb: Body, cpath: str, check: Check, group_path: str, service: str) -> None:
        """`expose`: Envoy exposes the check's path through the Connect sidecar. Connect is refused
        here, so a check asking for it is refused as Nomad's admission refuses one without a
        sidecar proxy (a Nomad service's by the Consul-only rule)."""
        value = cb.get("expose")
        if _unset(value) or value == "false":
            return
        if check.type not in ("http", "grpc"):
            self.report.error(join(cpath, "expose"), "expose may only be set on HTTP or gRPC checks")
            return
        group = group_path.rsplit(".", 1)[-1]
        self.report.error(
            join(cpath, "expose"),
            f"exposed service check {group}->{short(service)}->{short(check.name)} requires use of "
            "sidecar_proxy (Consul Connect, which fieldlab-agent does not run)",
        )
