"""The dispatch payload hook (agent.runner.dispatchhook), handed its payload, file and task dir:
the payload at local/<file> through the sandbox's writer; a bad payload or a path out of local/ is
the setup's error, naming dispatch_payload."""

from __future__ import annotations

import base64
import os
from pathlib import Path

import pytest

from agent.runner.dispatchhook import PAYLOAD_PERMS, DispatchPayloadError, DispatchPayloadHook


def task_dir(tmp_path: Path) -> Path:
    d = tmp_path / "t0"
    (d / "local").mkdir(parents=True)
    return d


def test_the_payload_is_written_under_local(tmp_path: Path) -> None:
    d = task_dir(tmp_path)
    results: list[Exception | None] = []
    DispatchPayloadHook(base64.b64encode(b"hi").decode(), "in/put.txt", d, None).setup(results.append)
    assert results == [None]
    written = d / "local" / "in" / "put.txt"
    assert written.read_bytes() == b"hi" and (os.stat(written).st_mode & 0o777) == PAYLOAD_PERMS


def test_an_empty_payload_is_an_empty_file_as_nomad_writes_it(tmp_path: Path) -> None:
    d = task_dir(tmp_path)
    DispatchPayloadHook("", "input.txt", d, None).setup(lambda exc: None)
    assert (d / "local" / "input.txt").read_bytes() == b""


@pytest.mark.parametrize(
    ("payload", "file", "why"),
    [
        ("not base64!", "input.txt", "dispatch_payload: "),
        ("aGk=", "../secrets/x", "dispatch_payload: "),
    ],
)
def test_a_bad_payload_or_a_path_out_of_local_is_the_setups_error(
    tmp_path: Path, payload: str, file: str, why: str
) -> None:
    d = task_dir(tmp_path)
    with pytest.raises(DispatchPayloadError, match=why):
        DispatchPayloadHook(payload, file, d, None).setup(lambda exc: None)
    assert not (d / "secrets").exists()
