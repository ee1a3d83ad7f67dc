"""The CNI plugins, called directly per the CNI spec, with every ADD result kept on disk.

One `CniNetwork` is one network configuration list (a `.conflist`). `add` runs the plugins in order
(CNI_COMMAND=ADD, the plugin's config on stdin with the list's `name` and `cniVersion`, the previous
plugin's result as `prevResult`, `runtimeConfig.portMappings` for plugins whose `capabilities` ask for
it) and persists the final result, so that `check` and `delete` can pass it as `prevResult` later,
also after an agent restart. `delete` runs the plugins in reverse order, goes on past a failing plugin,
removes what the plugins left in iptables and always drops the cached result.

Behaviour of Debian's containernetworking-plugins 1.1.1 that shapes this module (see LAB-SUBSTRATE.md
and tests/test_cni.py, which asserts each of these on the controller):

- no version fingerprint from the plugins themselves (`--version` says "version unknown", VERSION
  only lists spec versions): agent.network.plugins asks dpkg, and gates CHECK on >= 1.3.0;
- portmap CHECK fails on IPv4-only hosts ("could not check ipv6 dnat: chain CNI-DN-... not found in
  iptables table nat"); bridge CHECK fails when udev rewrites the veth MAC;
- bridge DEL with a netns that no longer exists succeeds without removing its ipMasq chain, so
  `delete` removes the container's chains itself;
- a second ADD for the same container id into a new netns fails in host-local with "... has been
  allocated to <id>, duplicate allocation is not allowed" (nomad-11272): `add` refuses a container
  that still has a cached result, and the caller must `delete` first.

The errors and values (CniError, PortMapping, CniResult, ...) are in agent.network.result, the plugin
version probe in agent.network.plugins.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.fieldbugs.bugs import NO_BUGS, Bugs
from agent.network import hostlocal, iptables
from agent.network.cnicache import ResultCache
from agent.network.netns import another_process_in_own_netns, is_netns
from agent.network.plugins import plan_cni_chain
from agent.network.result import (
    CachedAttachment,
    CacheKey,
    CniAlreadyAdded,
    CniCheckFailed,
    CniError,
    CniPluginError,
    CniResult,
    CniTimeout,
    DelReport,
    PortMapping,
    Reservation,
)

log = logging.getLogger(__name__)

SUPPORTED_SPEC_VERSIONS = ("0.3.0", "0.3.1", "0.4.0", "1.0.0")
DEFAULT_PLUGIN_TIMEOUT = 30.0
KILL_GRACE_SECONDS = 5.0
HOST_LOCAL_DEFAULT_DIR = "/var/lib/cni/networks"
_LOCK_STRIPES = 64
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_PLUGIN_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_IFNAME_BAD = re.compile(r"[/:\s]")
_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# --- the network --------------------------------------------------------------------------------


@dataclass(frozen=True)
class PluginConf:
    index: int
    type: str
    conf: Mapping[str, Any]

    def wants(self, capability: str) -> bool:
        caps = self.conf.get("capabilities")
        return isinstance(caps, dict) and caps.get(capability) is True


def _validate_ids(container_id: str, ifname: str) -> None:
    if not container_id or not _NAME_RE.match(container_id):
        raise CniError(f"invalid container id {container_id!r} (letters, digits, '_', '.', '-')")
    if not ifname or len(ifname) > 15 or ifname in (".", "..") or _IFNAME_BAD.search(ifname):
        raise CniError(f"invalid interface name {ifname!r}")


class CniNetwork:
    """One CNI network configuration list, its plugins and the cache of ADD results."""

    def __init__(
        self,
        conflist_path: str | os.PathLike[str],
        plugin_dir: str | os.PathLike[str],
        cache_dir: str | os.PathLike[str],
        *,
        timeout: float = DEFAULT_PLUGIN_TIMEOUT,
        clean_iptables: bool = True,
        bugs: Bugs = NO_BUGS,
    ) -> None:
        self.conflist_path = Path(conflist_path)
        self.plugin_dir = Path(plugin_dir)
        self.cache_dir = Path(cache_dir)
        self.timeout = timeout
        self.clean_iptables = clean_iptables
        self._locks = tuple(threading.Lock() for _ in range(_LOCK_STRIPES))
        conf = self._load()
        self.name: str = conf["name"]
        self.cni_version: str = conf["cniVersion"]
        self.disable_check: bool = conf.get("disableCheck") in (True, "true")
        chain = plan_cni_chain([p["type"] for p in conf["plugins"]], bugs)
        self.plugins: tuple[PluginConf, ...] = tuple(
            PluginConf(i, p["type"], p) for i, p in enumerate(conf["plugins"]) if i in chain
        )
        try:
            self.cache_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise CniError(f"cannot create CNI result cache dir {self.cache_dir}: {exc.strerror}") from exc
        self.cache = ResultCache(self.cache_dir, self.name, self.cni_version)

    # -- config

    def _load(self) -> dict[str, Any]:
        path = self.conflist_path
        try:
            text = path.read_text()
        except OSError as exc:
            raise CniError(f"{path}: cannot read CNI network config: {exc.strerror or exc}") from exc
        try:
            conf = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CniError(
                f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
            ) from exc
        if not isinstance(conf, dict) or not isinstance(conf.get("plugins"), list) or not conf["plugins"]:
            raise CniError(
                f"{path}: not a CNI network configuration list ('plugins' must be a non-empty list)"
            )
        name = conf.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise CniError(
                f"{path}: 'name' must be a network name (letters, digits, '_', '.', '-'), got {name!r}"
            )
        version = conf.get("cniVersion")
        if version not in SUPPORTED_SPEC_VERSIONS:
            raise CniError(
                f"{path}: cniVersion {version!r} is not supported"
                f" (one of {', '.join(SUPPORTED_SPEC_VERSIONS)})"
            )
        if not self.plugin_dir.is_dir():
            raise CniError(f"CNI plugin dir {self.plugin_dir} does not exist (needed by {path})")
        for i, plugin in enumerate(conf["plugins"]):
            if not isinstance(plugin, dict) or not isinstance(plugin.get("type"), str):
                raise CniError(f"{path}: plugins[{i}] must be an object with a 'type'")
            self._require_binary(path, f"plugins[{i}] ({plugin['type']})", plugin["type"])
            ipam = plugin.get("ipam")
            if isinstance(ipam, dict) and ipam.get("type"):
                self._require_binary(path, f"plugins[{i}].ipam", str(ipam["type"]))
        return conf

    def _require_binary(self, path: Path, where: str, ptype: str) -> None:
        if not _PLUGIN_TYPE_RE.match(ptype):
            raise CniError(f"{path}: {where}: invalid plugin type {ptype!r}")
        binary = self.plugin_dir / ptype
        if not (binary.is_file() and os.access(binary, os.X_OK)):
            raise CniError(f"{path}: {where}: plugin binary {binary} is missing or not executable")

    def host_local_dirs(self) -> list[Path]:
        """Where host-local keeps this network's reservations (<dataDir>/<network name>)."""
        dirs = []
        for p in self.plugins:
            ipam = p.conf.get("ipam")
            if isinstance(ipam, dict) and ipam.get("type") == "host-local":
                dirs.append(Path(str(ipam.get("dataDir") or HOST_LOCAL_DEFAULT_DIR)) / self.name)
        return dirs

    # -- running plugins

    def _env(self, command: str, container_id: str, netns: str, ifname: str, cni_args: str) -> dict[str, str]:
        path = os.environ.get("PATH") or _DEFAULT_PATH
        if "/usr/sbin" not in path.split(":"):  # portmap and firewall run iptables from PATH
            path += ":/usr/sbin:/sbin"
        return {
            "PATH": path,
            "CNI_COMMAND": command,
            "CNI_CONTAINERID": container_id,
            "CNI_NETNS": netns,
            "CNI_IFNAME": ifname,
            "CNI_ARGS": cni_args,
            "CNI_PATH": str(self.plugin_dir),
        }

    def _plugin_conf(
        self, plugin: PluginConf, prev: Mapping[str, Any] | None, port_mappings: Sequence[PortMapping]
    ) -> dict[str, Any]:
        conf = copy.deepcopy(dict(plugin.conf))
        conf["name"] = self.name
        conf["cniVersion"] = self.cni_version
        if prev is not None:
            conf["prevResult"] = copy.deepcopy(dict(prev))
        if port_mappings and plugin.wants("portMappings"):
            conf["runtimeConfig"] = {"portMappings": [m.to_cni() for m in port_mappings]}
        return conf

    def _exec(
        self,
        plugin: PluginConf,
        command: str,
        container_id: str,
        netns: str,
        ifname: str,
        conf: Mapping[str, Any],
        cni_args: str = "",
    ) -> dict[str, Any] | None:
        binary = self.plugin_dir / plugin.type
        if netns and another_process_in_own_netns(netns):
            raise CniError(
                f"refusing CNI {command} in {netns}: that process is in the agent's own network namespace "
                "(the container it named is gone and its pid belongs to another process now)",
                plugin=plugin.type,
                command=command,
                container_id=container_id,
            )
        env = self._env(command, container_id, netns, ifname, cni_args)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                [str(binary)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd="/",
                start_new_session=True,  # its own process group: a timeout kills the IPAM child too
            )
        except OSError as exc:
            raise CniError(
                f"cannot run CNI plugin {binary}: {exc.strerror or exc}",
                plugin=plugin.type,
                command=command,
                container_id=container_id,
            ) from exc
        try:
            out, err = proc.communicate(json.dumps(conf).encode(), timeout=self.timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            try:
                proc.communicate(timeout=KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise CniTimeout(
                f"CNI {plugin.type} {command} for container {container_id} did not finish within "
                f"{self.timeout:g}s and was killed",
                plugin=plugin.type,
                command=command,
                container_id=container_id,
            ) from None
        elapsed_ms = (time.monotonic() - started) * 1000
        log.debug(
            "cni %s %s container=%s ifname=%s rc=%s %.0fms",
            plugin.type,
            command,
            container_id,
            ifname,
            proc.returncode,
            elapsed_ms,
        )
        if err.strip():
            log.debug(
                "cni %s %s stderr: %s", plugin.type, command, err.decode(errors="replace").strip()[-2000:]
            )
        if proc.returncode != 0:
            raise self._plugin_error(plugin.type, command, container_id, proc.returncode, out, err)
        if not out.strip():
            return None
        try:
            data = json.loads(out)
        except json.JSONDecodeError as exc:
            raise CniError(
                f"CNI {plugin.type} {command} for container {container_id} printed invalid JSON: {exc.msg}",
                plugin=plugin.type,
                command=command,
                container_id=container_id,
            ) from exc
        if not isinstance(data, dict):
            raise CniError(
                f"CNI {plugin.type} {command} for container {container_id} printed a non-object result",
                plugin=plugin.type,
                command=command,
                container_id=container_id,
            )
        return data

    @staticmethod
    def _plugin_error(
        ptype: str, command: str, container_id: str, rc: int, out: bytes, err: bytes
    ) -> CniPluginError:
        try:
            obj = json.loads(out)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and "msg" in obj:
            code = obj.get("code")
            return CniPluginError(
                ptype,
                command,
                container_id,
                str(obj["msg"]),
                code=code if isinstance(code, int) else None,
                details=str(obj.get("details") or ""),
            )
        said = (out.decode(errors="replace").strip() or err.decode(errors="replace").strip())[-500:]
        return CniPluginError(
            ptype, command, container_id, f"exit status {rc}" + (f": {said}" if said else "")
        )

    @contextlib.contextmanager
    def _locked(self, key: CacheKey) -> Iterator[None]:
        # The spec forbids parallel operations on one container; different containers may run in
        # parallel. A fixed set of locks keeps memory bounded over a long-lived agent.
        with self._locks[hash(key) % _LOCK_STRIPES]:
            yield

    # -- the cache

    def cache_path(self, container_id: str, ifname: str = "eth0") -> Path:
        """Where the ADD result of this container/interface is kept (mode 0600)."""
        return self.cache.path(container_id, ifname)

    def _store(self, att: CachedAttachment) -> None:
        self.cache.store(att)

    def cached_attachment(self, container_id: str, ifname: str = "eth0") -> CachedAttachment | None:
        """The persisted ADD of this container/interface; None when there is none.

        Raises CniError naming the file when it exists but cannot be read or parsed.
        """
        _validate_ids(container_id, ifname)
        return self.cache.load(container_id, ifname)

    def cached_result(self, container_id: str, ifname: str = "eth0") -> CniResult | None:
        """The persisted ADD result of this container/interface, or None."""
        att = self.cached_attachment(container_id, ifname)
        return att.result if att else None

    def cached_ids(self) -> list[CacheKey]:
        """(container_id, ifname) of every cached result of this network: what the sweeper compares."""
        return self.cache.ids()

    def _drop_cache(self, container_id: str, ifname: str) -> bool:
        return self.cache.drop(container_id, ifname)

    # -- host-local reservations (agent.network.hostlocal)

    def ipam_reservations(self) -> list[Reservation]:
        """Every host-local reservation of this network (for the sweeper and the nomad-11272 checks)."""
        return hostlocal.reservations(self.host_local_dirs())

    def release_reservations(self, container_id: str, ifname: str | None = None) -> list[str]:
        """Remove host-local reservation files of this container (under host-local's own lock)."""
        return hostlocal.release(self.host_local_dirs(), container_id, ifname)

    # -- ADD, CHECK, DEL

    def add(
        self,
        container_id: str,
        netns_path: str | os.PathLike[str],
        ifname: str = "eth0",
        port_mappings: Sequence[PortMapping] = (),
        *,
        cni_args: str = "",
        cleanup_on_failure: bool = True,
    ) -> CniResult:
        """Attach the netns to the network; persist and return the final result.

        Refuses (CniAlreadyAdded) when a result for this container/interface is cached: DEL first. When
        a plugin fails, DEL runs for every plugin in reverse order (per the spec) unless
        `cleanup_on_failure` is off, and the plugin's error is raised with `cleanup_errors` set.
        """
        _validate_ids(container_id, ifname)
        netns = os.fspath(netns_path)
        key = CacheKey(container_id, ifname)
        with self._locked(key):
            if self.cache_path(container_id, ifname).exists():
                raise CniAlreadyAdded(
                    f"container {container_id} ({ifname}) is already attached to {self.name} (cached result "
                    f"{self.cache_path(container_id, ifname)}); DEL it before adding it again",
                    command="ADD",
                    container_id=container_id,
                )
            if port_mappings and not any(p.wants("portMappings") for p in self.plugins):
                raise CniError(
                    f"{self.conflist_path}: port mappings requested but no plugin has the"
                    " portMappings capability",
                    command="ADD",
                    container_id=container_id,
                )
            if not is_netns(netns):
                raise CniError(
                    f"CNI ADD for container {container_id}: {netns} is not a network namespace",
                    command="ADD",
                    container_id=container_id,
                )
            prev: dict[str, Any] | None = None
            try:
                for plugin in self.plugins:
                    conf = self._plugin_conf(plugin, prev, port_mappings)
                    out = self._exec(plugin, "ADD", container_id, netns, ifname, conf, cni_args)
                    if out is None:
                        raise CniError(
                            f"CNI {plugin.type} ADD for container {container_id} printed no result",
                            plugin=plugin.type,
                            command="ADD",
                            container_id=container_id,
                        )
                    prev = out
                assert prev is not None
                result = CniResult.from_dict(prev, f"CNI ADD result for container {container_id}")
                att = CachedAttachment(
                    self.name, container_id, ifname, netns, tuple(port_mappings), time.time(), result
                )
                self._store(att)
            except CniError as exc:
                if cleanup_on_failure:
                    report = self._delete_locked(
                        container_id, netns, ifname, prev, tuple(port_mappings), cni_args
                    )
                    exc.cleanup_errors = report.plugin_errors
                    log.warning(
                        "cni ADD failed for container=%s, cleaned up (errors: %s): %s",
                        container_id,
                        report.plugin_errors or "none",
                        exc,
                    )
                raise
            log.info("cni ADD container=%s ifname=%s ip=%s", container_id, ifname, result.primary_ip)
            return result

    def check(
        self,
        container_id: str,
        netns_path: str | os.PathLike[str] | None = None,
        ifname: str = "eth0",
        *,
        cni_args: str = "",
    ) -> None:
        """CNI CHECK with the cached result as prevResult; raises CniCheckFailed naming each failing
        plugin and its message. Does nothing when the conflist sets disableCheck."""
        _validate_ids(container_id, ifname)
        if self.cni_version in ("0.3.0", "0.3.1"):
            raise CniError(f"{self.conflist_path}: CHECK needs cniVersion >= 0.4.0, not {self.cni_version}")
        with self._locked(CacheKey(container_id, ifname)):
            att = self.cached_attachment(container_id, ifname)
            if att is None:
                raise CniError(
                    f"CNI CHECK for container {container_id} ({ifname}):"
                    " no cached ADD result to check against",
                    command="CHECK",
                    container_id=container_id,
                )
            if self.disable_check:
                log.debug(
                    "cni CHECK skipped for %s: disableCheck is set in %s", container_id, self.conflist_path
                )
                return
            netns = os.fspath(netns_path) if netns_path is not None else att.netns
            failures: list[CniError] = []
            for plugin in self.plugins:
                conf = self._plugin_conf(plugin, att.result.raw, att.port_mappings)
                try:
                    self._exec(plugin, "CHECK", container_id, netns, ifname, conf, cni_args)
                except CniError as exc:
                    failures.append(exc)
            if failures:
                raise CniCheckFailed(container_id, failures)

    def delete(
        self,
        container_id: str,
        netns_path: str | os.PathLike[str] | None = None,
        ifname: str = "eth0",
        *,
        cni_args: str = "",
    ) -> DelReport:
        """CNI DEL in reverse order with the cached result as prevResult; never raises for plugin failures.

        Goes on past a failing plugin, removes the container's iptables chains the plugins left (bridge
        1.1.1 leaves its ipMasq chain when the netns is gone), releases leftover host-local reservations
        when the IPAM plugin's DEL failed, and always drops the cached result. Safe to repeat, and fine
        when the netns, the interfaces or the cache are already gone. The report lists what failed.
        """
        _validate_ids(container_id, ifname)
        with self._locked(CacheKey(container_id, ifname)):
            prev: Mapping[str, Any] | None = None
            mappings: tuple[PortMapping, ...] = ()
            netns = os.fspath(netns_path) if netns_path is not None else ""
            cache_problem = ""
            try:
                att = self.cached_attachment(container_id, ifname)
            except CniError as exc:
                att, cache_problem = None, str(exc)
            if att is not None:
                prev, mappings = att.result.raw, att.port_mappings
                # The ADD's path only when it names the netns itself (/run/netns/<name>, docker's
                # sandbox) and still is one: a /proc/<pid>/ns/net one may be another process's by
                # now, and a gone one is no netns (the plugins then release the address only).
                if not netns and not att.netns.startswith("/proc/") and is_netns(att.netns):
                    netns = att.netns
            report = self._delete_locked(container_id, netns, ifname, prev, mappings, cni_args)
            if cache_problem:
                report.plugin_errors.insert(0, cache_problem)
            report.had_cached_result = att is not None
            if self._drop_cache(container_id, ifname):
                report.cleaned_up.append(f"cached result {self.cache_path(container_id, ifname)}")
            log.info(
                "cni DEL container=%s ifname=%s errors=%d cleaned=%d",
                container_id,
                ifname,
                len(report.plugin_errors),
                len(report.cleaned_up),
            )
            return report

    def _delete_locked(
        self,
        container_id: str,
        netns: str,
        ifname: str,
        prev: Mapping[str, Any] | None,
        mappings: Sequence[PortMapping],
        cni_args: str,
    ) -> DelReport:
        report = DelReport(container_id, ifname, had_cached_result=prev is not None)
        failed_types: set[str] = set()
        for plugin in reversed(self.plugins):
            conf = self._plugin_conf(plugin, prev, mappings)
            try:
                self._exec(plugin, "DEL", container_id, netns, ifname, conf, cni_args)
            except CniError as exc:
                failed_types.add(plugin.type)
                report.plugin_errors.append(str(exc))
                log.warning("cni DEL: %s", exc)
        if self.clean_iptables:
            # The firewall plugin's CNI-FORWARD rules carry no comment: remove them by address, but only
            # when its DEL failed, and never for an address another container has reserved since.
            ips: list[str] = []
            if prev is not None and "firewall" in failed_types:
                with contextlib.suppress(CniError):
                    ips = [p.address for p in CniResult.from_dict(prev).ips]
                taken = {r.ip for r in self.ipam_reservations() if r.container_id != container_id}
                ips = [a for a in ips if a.split("/")[0] not in taken]
            try:
                report.cleaned_up += iptables.cleanup_container(self.name, container_id, ips)
            except iptables.IptablesError as exc:
                report.plugin_errors.append(f"iptables cleanup: {exc}")
        if failed_types or prev is None:
            # IPAM did not run or could not have found everything: release what host-local still holds.
            try:
                report.cleaned_up += self.release_reservations(container_id, ifname)
            except (CniError, OSError) as exc:
                report.plugin_errors.append(f"host-local reservations: {exc}")
        return report
