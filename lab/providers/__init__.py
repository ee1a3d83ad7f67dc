"""Providers create lab hosts and say how to reach them; everything after that is Ansible over SSH."""

from __future__ import annotations

from lab.config import LabSpec
from lab.errors import ConfigError
from lab.providers.base import Node, NodeState, Provider


def provider_for(name: str) -> Provider:
    if name == "docker":
        from lab.providers.docker import DockerProvider

        return DockerProvider()
    if name == "static":
        from lab.providers.static import StaticProvider

        return StaticProvider()
    if name == "qemu":
        from lab.providers.qemu import QemuProvider

        return QemuProvider()
    raise ConfigError(f"unknown provider {name!r}: choose docker, static or qemu")


__all__ = ["LabSpec", "Node", "NodeState", "Provider", "provider_for"]
