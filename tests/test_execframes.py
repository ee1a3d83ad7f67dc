"""The interactive exec session's framing (agent.drivers.execframes): pure, no I/O."""

from __future__ import annotations

import pytest

from agent.drivers import execframes as ef


def test_frames_round_trip_through_a_decoder_fed_in_any_pieces() -> None:
    stream = b"".join(
        [
            ef.encode(ef.STDOUT, b"hello"),
            ef.encode(ef.STDERR, b""),
            ef.exit_frame(3),
            *ef.chunks(ef.STDOUT, b"x" * 70_000),
        ]
    )
    for piece in (1, 7, 4096, len(stream)):
        decoder = ef.Decoder(ef.FROM_AGENT)
        got = [f for i in range(0, len(stream), piece) for f in decoder.feed(stream[i : i + piece])]
        assert got[:3] == [(ef.STDOUT, b"hello"), (ef.STDERR, b""), (ef.EXIT, b'{"exit_code": 3}')]
        assert [len(p) for _, p in got[3:]] == [ef.MAX_PAYLOAD, 70_000 - ef.MAX_PAYLOAD]
        assert decoder.pending == 0
    cut = ef.Decoder(ef.FROM_AGENT)
    assert cut.feed(ef.encode(ef.STDOUT, b"abc")[:-1]) == [] and cut.pending == 7


def test_each_side_takes_only_its_own_kinds_and_sizes() -> None:
    with pytest.raises(ef.FrameError, match="unknown frame type b'i'"):
        ef.Decoder(ef.FROM_AGENT).feed(ef.encode(ef.STDIN, b"a"))
    with pytest.raises(ef.FrameError, match="unknown frame type b'x'"):
        ef.header(ef.exit_frame(0)[: ef.HEADER.size], ef.FROM_CLIENT)
    with pytest.raises(ef.FrameError, match="over 65536"):
        ef.header(ef.HEADER.pack(ef.STDIN, ef.MAX_PAYLOAD + 1), ef.FROM_CLIENT)
    with pytest.raises(ef.FrameError, match="over 65536"):
        ef.encode(ef.STDOUT, b"x" * (ef.MAX_PAYLOAD + 1))


def test_resize_and_exit_payloads_are_checked() -> None:
    kind, _ = ef.header(ef.resize(40, 120)[: ef.HEADER.size], ef.FROM_CLIENT)
    assert kind == ef.RESIZE and ef.parse_resize(ef.resize(40, 120)[ef.HEADER.size :]) == (40, 120)
    for bad, says in (
        (b"[]", "must be"),
        (b"nope", "not JSON"),
        (b'{"rows": 0, "cols": 80}', "rows must be a whole number"),
        (b'{"rows": 24, "cols": true}', "cols must be a whole number"),
        (b'{"rows": 24, "cols": 10001}', "cols must be a whole number"),
    ):
        with pytest.raises(ef.FrameError, match=says):
            ef.parse_resize(bad)
    assert ef.parse_exit(ef.exit_frame(-1, "gone")[ef.HEADER.size :]) == (-1, "gone")
    assert ef.parse_exit(b'{"exit_code": 0}') == (0, None)
    with pytest.raises(ef.FrameError, match="without an exit code"):
        ef.parse_exit(b"{}")
