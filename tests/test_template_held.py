"""agent.templates.held: which secrets a pass renders from and which it fetches again (pure)."""

from __future__ import annotations

from agent.templates.held import after_pass, hold, next_due, reusable


def test_a_secret_is_due_between_60_and_80_percent_of_its_ttl() -> None:
    assert hold({}, 100.0, 50.0, 0.0).due == 110.0
    assert hold({}, 100.0, 50.0, 1.0).due == 130.0
    assert hold({}, 100.0, 50.0, 0.5).due == 120.0


def test_a_pass_reuses_what_is_not_due_with_the_time_it_has_left() -> None:
    held = {"a": hold({"v": 1}, 100.0, 0.0, 0.0), "b": hold({"v": 2}, 100.0, 0.0, 1.0)}  # due 60, 80
    assert reusable(held, 59.0) == {"a": ({"v": 1}, 41.0), "b": ({"v": 2}, 41.0)}
    assert reusable(held, 60.0) == {"b": ({"v": 2}, 40.0)}, "a is due at 60: fetched again"
    assert reusable(held, 80.0) == {}


def test_after_a_pass_reused_secrets_keep_their_schedule_and_fetched_ones_get_their_own() -> None:
    old = {"a": hold({"v": 1}, 100.0, 0.0, 0.0), "b": hold({"v": 2}, 100.0, 0.0, 1.0)}
    cache = {"a": ({"v": 3}, 100.0), "b": ({"v": 2}, 20.0), "kv": ({"x": 1}, 0.0), "gone": ({}, 9.0)}
    out = after_pass(old, {"a", "b", "kv"}, cache, {"b"}, 60.0, lambda: 0.5)
    assert out["b"] == old["b"], "reused: its schedule stands"
    assert out["a"].data == {"v": 3} and out["a"].fetched_at == 60.0 and out["a"].due == 130.0
    assert "kv" not in out, "a secret without a TTL is read again by every pass, never held"
    assert "gone" not in out, "a secret no template read any more is let go"
    assert next_due(out) == 80.0
    assert next_due({}) is None
