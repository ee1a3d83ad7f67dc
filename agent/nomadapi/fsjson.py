"""Nomad's api structs of the alloc dir's files (api/fs.go): a file's info and a stream's frame.
Pure, as agent.nomadapi.structs."""

from __future__ import annotations

import base64
from typing import Any

from agent.nomadapi.gojson import go_file_mode, go_time


def file_info(
    name: str, is_dir: bool, size: int, mode: int, mod_time: float, content_type: str = ""
) -> dict[str, Any]:
    """api.AllocFileInfo (api/fs.go). ContentType is `omitempty` in the client's struct
    (client/structs: AllocFileInfo): a listing leaves it out, a stat gives it."""
    out: dict[str, Any] = {
        "Name": name,
        "IsDir": is_dir,
        "Size": size,
        "FileMode": go_file_mode(mode, is_dir),
        "ModTime": go_time(mod_time),
    }
    if content_type:
        out["ContentType"] = content_type
    return out


def stream_frame(offset: int, data: bytes, file: str, file_event: str = "") -> dict[str, Any]:
    """api.StreamFrame (api/fs.go; client/lib/streamframer): every field `omitempty`; Data base64
    (Go's []byte). All empty is the heartbeat frame, {}."""
    out: dict[str, Any] = {}
    if offset:
        out["Offset"] = offset
    if data:
        out["Data"] = base64.b64encode(data).decode("ascii")
    if file:
        out["File"] = file
    if file_event:
        out["FileEvent"] = file_event
    return out
