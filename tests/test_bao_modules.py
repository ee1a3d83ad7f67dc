"""The pki role's collection modules (lab/plugins/modules): their duration rule, the one the role's
comparisons rest on (OpenBao reads durations back in seconds). Their HTTP side runs for real in every
lab-up (vault.yml) and in the pki molecule scenario."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "lab" / "plugins" / "modules" / "bao_settings.py"
# The module imports its module_utils by FQCN, as Ansible runs it: the checkout's collections/ dir
# (ansible_collections/fieldlab/lab -> lab) is where the FQCN resolves.
COLLECTIONS = ROOT / "collections"


def _module() -> Any:
    if str(COLLECTIONS) not in sys.path:
        sys.path.insert(0, str(COLLECTIONS))
    spec = importlib.util.spec_from_file_location("bao_settings", MODULE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize(
    ("value", "seconds"),
    [(3600, 3600), ("3600", 3600), ("72h", 259200), ("1h30m", 5400), ("90s", 90), ("0s", 0), ("10m", 600)],
)
def test_durations_are_compared_in_seconds(value: object, seconds: int) -> None:
    assert _module().to_seconds(value) == seconds


@pytest.mark.parametrize("value", ["", "1x", "h", "1h 30m", True])
def test_a_bad_duration_is_an_error_not_a_silent_zero(value: object) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        _module().to_seconds(value)
