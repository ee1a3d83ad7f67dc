"""The ADD results of one CNI network, as libcni caches them: one JSON file per container and
interface (`<network>:<container id>:<ifname>.json`, 0600, written to a temp file, fsync'd, renamed,
the dir fsync'd), read back whole or refused naming the file. What CHECK and DEL are given, and what
the sweeper compares with the allocs it knows."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from agent.network.result import CachedAttachment, CacheKey, CniError, CniResult, PortMapping

CACHE_FORMAT = 1


class ResultCache:
    def __init__(self, cache_dir: Path, network: str, cni_version: str) -> None:
        self.dir = cache_dir
        self.network = network
        self.cni_version = cni_version

    def path(self, container_id: str, ifname: str = "eth0") -> Path:
        # ':' cannot occur in a network name, a container id or an interface name: the name parses back.
        return self.dir / f"{self.network}:{container_id}:{ifname}.json"

    def store(self, att: CachedAttachment) -> None:
        path = self.path(att.container_id, att.ifname)
        doc = {
            "format": CACHE_FORMAT,
            "network": att.network,
            "cniVersion": self.cni_version,
            "containerId": att.container_id,
            "ifName": att.ifname,
            "netns": att.netns,
            "portMappings": [m.to_cni() for m in att.port_mappings],
            "created": att.created,
            "result": att.result.to_dict(),
        }
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f, indent=2)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            tmp.replace(path)
            dfd = os.open(self.dir, os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise CniError(f"cannot persist CNI result to {path}: {exc.strerror or exc}") from exc

    def load(self, container_id: str, ifname: str = "eth0") -> CachedAttachment | None:
        """The persisted ADD of this container/interface; None when there is none.

        Raises CniError naming the file when it exists but cannot be read or parsed.
        """
        path = self.path(container_id, ifname)
        try:
            doc = json.loads(path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise CniError(
                f"{path}: unreadable cached CNI result ({exc})", container_id=container_id
            ) from exc
        try:
            return CachedAttachment(
                network=str(doc["network"]),
                container_id=str(doc["containerId"]),
                ifname=str(doc["ifName"]),
                netns=str(doc.get("netns", "")),
                port_mappings=tuple(PortMapping.from_cni(m) for m in doc.get("portMappings") or []),
                created=float(doc.get("created", 0.0)),
                result=CniResult.from_dict(doc["result"], str(path)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise CniError(f"{path}: malformed cached CNI result ({exc})", container_id=container_id) from exc

    def ids(self) -> list[CacheKey]:
        """(container_id, ifname) of every cached result of this network: what the sweeper compares."""
        keys = []
        for p in self.dir.glob(f"{self.network}:*.json"):
            parts = p.name[: -len(".json")].split(":")
            if len(parts) == 3 and parts[0] == self.network:
                keys.append(CacheKey(parts[1], parts[2]))
        return sorted(keys)

    def drop(self, container_id: str, ifname: str) -> bool:
        try:
            self.path(container_id, ifname).unlink()
            return True
        except FileNotFoundError:
            return False
