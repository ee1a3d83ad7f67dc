"""fieldlab's lab: builds hosts through a provider, writes an inventory, provisions it with Ansible."""

from __future__ import annotations

__all__ = ["__version__"]
__version__ = "0.1.0"
