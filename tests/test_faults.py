"""Fault flags: off by default, exact names, loud when on, never silently ignored."""

from __future__ import annotations

import logging

import pytest

from agent.decide.decisions import NO_BUGS
from agent.fieldbugs.catalogue import KNOWN_FAULTS
from agent.fieldbugs.faults import ENV_VAR, FaultError, Faults

AGENT_FLAGS = {
    "no-network-check-on-restore": "nomad-24292",
    "reuse-dead-pause": "nomad-12216",
    "no-orphan-sweep": "nomad-12216",
    "sweep-untracked-pause": "nomad-16338",
    "ipam-stale-after-reboot": "nomad-11272",
    "leak-portmap-chains": "nomad-6385",
    "restore-missing-alloc-dir": "nomad-27933",
    "half-alive-restore": "nomad-23684/17079",
    "stale-network-status-on-restore": "nomad-24236/16893",
    "stale-restart-timer": "fieldlab-12-restart-tracker",
    "rerun-completed-on-restore": "nomad-5883",
    "rerun-old-allocs-on-restore": "nomad-1795",
    "sidecar-outlives-main": "nomad-8165",
    "shutdown-delay-needs-service": "nomad-7271",
    "no-max-kill-timeout": "nomad-10005",
    "alloc-addr-port-zero": "nomad-27305",
    "network-status-lost-on-restore": "nomad-26699",
    "no-tmpfs-remount-on-restore": "nomad-28345",
    "ignore-image-stopsignal": "nomad-9989",
    "migrate-destroys-previous-alloc": "nomad-18034",
    "group-delay-for-dead-tasks": "nomad-25157",
    "restart-without-delay": "nomad-15215",
    "sidecars-killed-with-main": "nomad-13055",
    "meta-not-interpolated": "nomad-10876",
    "volume-change-in-place": "nomad-13008",
    "no-loopback-in-netns": "nomad-13428",
    "cni-args-change-in-place": "nomad-23764",
    "cni-unloaded-at-teardown": "nomad-7537",
    "log-skips-rotated-tail": "nomad-11721",
    "failed-restore-leaks-tasks": "nomad-17104",
    "no-logmon-recovery": "nomad-5577",
    "no-vault-token-after-stop": "nomad-19268",
    "templates-merged-by-content": "nomad-26880",
    "no-teardown-after-restore": "nomad-17455",
    "no-local-mount": "nomad-1830",
    "recreate-netns-on-restore": "nomad-9757",
    "ports-keyed-by-container-port": "nomad-9951",
    "netns-left-after-batch": "nomad-25714",
    "group-without-main-task-accepted": "nomad-17570",
    "lifecycle-without-hook-accepted": "nomad-26285",
    "restart-dead-prestart": "nomad-9841",
    "host-namespaces-allowed": "nomad-28190",
    "logs-dir-writable": "nomad-27918",
    "restart-batch-on-success": "nomad-491",
    "env-from-changed-templates-only": "nomad-3529",
    "negative-cores-accepted": "nomad-10511",
    "leader-killed-with-others": "nomad-2753",
    "check-id-without-group": "nomad-16240",
    "start-errors-unrecoverable": "nomad-1858",
    "volumes-relative-to-alloc-dir": "nomad-1977",
    "swap-below-hard-limit": "nomad-8153",
    "net-raw-by-default": "nomad-10572",
    "exec-caps-bounding-only": "nomad-16642",
    "exec-shared-pid-namespace": "nomad-9911",
    "exec-user-full-caps": "nomad-5783",
    "exec-inherits-oom-score-adj": "nomad-10663",
    "pull-auth-not-encoded": "nomad-24181",
    "image-pull-timeout-ignored": "nomad-24991",
    "downloading-event-after-pull": "nomad-2165",
    "dispatch-optional-meta-unset": "nomad-3720",
    "periodic-restore-ignores-overlap": "nomad-11052",
    "periodic-restores-stopped-job": "nomad-3201",
    "blocked-reschedule-drops-tracker": "nomad-12147",
    "identity-claims-child-job-id": "nomad-13748",
    "drained-batch-replaced": "nomad-28008",
}
TEMPLATE_FLAGS = {
    "last-event-wins": "nomad-24140",
    "no-change-on-restore": "nomad-9636",
    "signal-while-restarting": "nomad-25861",
    "noop-runner-dies": "nomad-28016",
    "script-change-before-handle": "nomad-15851/24051",
}


def test_catalogue_names_each_bug() -> None:
    expected = AGENT_FLAGS | TEMPLATE_FLAGS
    assert set(KNOWN_FAULTS) == set(expected)
    for flag, bug in expected.items():
        assert KNOWN_FAULTS[flag].startswith(bug), flag
        assert len(KNOWN_FAULTS[flag]) > len(bug) + 20, flag  # a real description


def test_off_by_default() -> None:
    for env in ({}, {ENV_VAR: ""}, {ENV_VAR: " , "}):
        f = Faults.from_env(env)
        assert f.active == frozenset()
        assert f.bugs() == NO_BUGS
    assert Faults() == Faults.from_env({})


def test_flags_from_env() -> None:
    f = Faults.from_env({ENV_VAR: "reuse-dead-pause, last-event-wins,,reuse-dead-pause", "OTHER": "x"})
    assert f.active == frozenset({"reuse-dead-pause", "last-event-wins"})
    bugs = f.bugs()
    assert bugs.reuse_dead_pause and bugs.last_event_wins
    assert not bugs.no_orphan_sweep


def test_unknown_flag_is_a_startup_error() -> None:
    with pytest.raises(FaultError) as e:
        Faults.from_env({ENV_VAR: "no-orphan-sweep,no-orphan-swep,bogus"})
    msg = str(e.value)
    assert e.value.flags == ("bogus", "no-orphan-swep")
    assert msg.startswith(f"{ENV_VAR}: unknown fault flags 'bogus', 'no-orphan-swep'")
    assert "did you mean 'no-orphan-sweep'?" in msg
    assert all(flag in msg for flag in KNOWN_FAULTS)  # lists the known ones
    with pytest.raises(FaultError, match="unknown fault flag 'Reuse-Dead-Pause'"):
        Faults.from_env({ENV_VAR: "Reuse-Dead-Pause"})  # names are exact


def test_an_unknown_flag_in_code_is_an_error() -> None:
    with pytest.raises(FaultError, match="Faults: unknown"):
        Faults(frozenset({"nope"}))


def test_announce_one_loud_line_per_flag(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("agent.test")
    with caplog.at_level(logging.DEBUG, logger="agent.test"):
        Faults().announce(log)
    assert caplog.records == []
    with caplog.at_level(logging.DEBUG, logger="agent.test"):
        Faults.from_env({ENV_VAR: "no-network-check-on-restore,noop-runner-dies"}).announce(log)
    assert [r.levelno for r in caplog.records] == [logging.WARNING, logging.WARNING]
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("FAULT INJECTION ACTIVE: no-network-check-on-restore puts back nomad-24292: ")
    assert lines[1].startswith("FAULT INJECTION ACTIVE: noop-runner-dies puts back nomad-28016: ")


def test_every_known_flag_is_implemented() -> None:
    from agent.fieldbugs.catalogue import IMPLEMENTED_FAULTS, KNOWN_FAULTS
    from agent.fieldbugs.faults import Faults

    assert set(KNOWN_FAULTS) == IMPLEMENTED_FAULTS
    Faults(IMPLEMENTED_FAULTS).require_implemented()
