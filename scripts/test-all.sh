#!/usr/bin/env bash
# `make test`: every check, in order, with a timing per phase and a summary at the end.
# A lab of its own (LAB=test on its own subnet) is built and always torn down, so a user's lab is
# never touched (KEEP_LAB=1 keeps it after a failure, except in CI). Phases after a failure still run (more to read in one CI log); the exit code is
# non-zero when any phase failed.
set -uo pipefail
cd "$(dirname "$0")/.."

TEST_LAB=${TEST_LAB:-test}
TEST_SUBNET=${TEST_SUBNET:-10.213.100.0/24}
declare -a names=() secs=() results=()
failed=0
t_all=$(date +%s)

phase() {
    local name=$1; shift
    echo "[fieldlab test] ===== phase $name: $* ====="
    local t0; t0=$(date +%s)
    if "$@"; then results+=("ok"); else results+=("FAILED"); failed=1; fi
    names+=("$name"); secs+=($(( $(date +%s) - t0 )))
    echo "[fieldlab test] ===== phase $name: ${results[-1]} in ${secs[-1]}s ====="
}

phase bootstrap make --no-print-directory bootstrap
phase lint make --no-print-directory lint
phase unit make --no-print-directory unit
phase integration make --no-print-directory integration
phase molecule make --no-print-directory molecule
phase lab-up .venv/bin/fieldlab lab up --lab "$TEST_LAB" --clients 2 --subnet "$TEST_SUBNET"
if [ "${results[-1]}" = ok ]; then
    phase smoke make --no-print-directory smoke LAB="$TEST_LAB"
fi
if [ "${KEEP_LAB:-0}" = 1 ] && [ $failed = 1 ] && [ "${CI:-}" != true ]; then
    echo "[fieldlab test] KEEP_LAB=1: lab $TEST_LAB kept for debugging (make lab-down LAB=$TEST_LAB)"
else
    phase lab-down .venv/bin/fieldlab lab down --lab "$TEST_LAB"
fi

echo
echo "[fieldlab test] summary"
for i in "${!names[@]}"; do
    printf '  %-12s %-7s %5ss\n' "${names[$i]}" "${results[$i]}" "${secs[$i]}"
done
printf '  %-12s %-7s %5ss\n' total "$([ $failed = 0 ] && echo ok || echo FAILED)" "$(( $(date +%s) - t_all ))"
exit $failed
