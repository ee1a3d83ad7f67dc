#!/usr/bin/env bash
# `make test`: every check, in order, with a timing per phase and a summary at the end.
# A lab of its own (LAB=test on its own subnet) is built and always torn down, so a user's lab is
# never touched (KEEP_LAB=1 keeps it after a failure, except in CI). Phases after a failure still
# run (more to read in one CI log); the exit code is non-zero when any phase failed.
set -uo pipefail
cd "$(dirname "$0")/.."

TEST_LAB=${TEST_LAB:-test}
TEST_SUBNET=${TEST_SUBNET:-10.213.100.0/24}
PHASE_TAG="fieldlab test"
# shellcheck source=scripts/phases.sh
source scripts/phases.sh

phase bootstrap make --no-print-directory bootstrap
# The phases below run `make` targets that depend on bootstrap: it ran just now, once for them all.
export FIELDLAB_BOOTSTRAPPED=1
phase unit make --no-print-directory unit
# The node image before the two lanes, so that neither builds it while the other waits on its lock.
phase node-image .venv/bin/fieldlab lab image

# Two lanes from here (2 cores), balanced: the controller's lane (the integration tests: real dockerd,
# mostly waiting on containers; then every role's molecule scenario, each a lab of its own on a
# 10.214.x subnet) beside the lab's lane (lab-up, the e2e suites on 10.213.100.0/24). They share
# dockerd but no names, subnets or ports. One after the other they took 826 + 564 s and 196 + 1145 s.
controller_lane() {
    phase integration make --no-print-directory integration
    phase molecule make --no-print-directory molecule
    return $phase_failed
}
lane_start controller controller_lane

# Lint heads the lab's lane, the shorter one (it reads files only: nothing it does depends on timing).
phase lint make --no-print-directory lint
# 2 full clients (every suite) and 8 light ones: the fleet suite storms all 10 (docs/fleet.md).
TEST_CLIENTS=${TEST_CLIENTS:-10}
phase lab-up .venv/bin/fieldlab lab up --lab "$TEST_LAB" --clients "$TEST_CLIENTS" --subnet "$TEST_SUBNET"
if last_phase_ok; then
    # 3 agent restarts per loop suite (make smoke's default is 5, the nightly's 50): 30 s each of
    # the 45 minutes make test keeps to (CI took 2639 s with 5 on 2026-12-06).
    phase smoke make --no-print-directory smoke LAB="$TEST_LAB" LOOPS="${TEST_LOOPS:-3}"
fi
if [ "${KEEP_LAB:-0}" = 1 ] && [ $phase_failed = 1 ] && [ "${CI:-}" != true ]; then
    echo "[fieldlab test] KEEP_LAB=1: lab $TEST_LAB kept for debugging (make lab-down LAB=$TEST_LAB)"
else
    phase lab-down .venv/bin/fieldlab lab down --lab "$TEST_LAB"
fi
lane_wait

phase_summary
