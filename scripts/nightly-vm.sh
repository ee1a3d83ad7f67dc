#!/usr/bin/env bash
# `make nightly-vm`: the qemu provider's night (docs/vm.md). A lab of VMs of its own (1 server and 2
# clients booting Debian's cloud kernel, started from the baked VM images: lab/vm_bake.py), the
# restore and pause-kill suites on it, the three seed bugs reproduced (flag on) and fixed (flag off),
# and the lab torn down. Each phase is timed.
# KEEP_LAB=1 keeps the lab after a failure (never in CI).
set -uo pipefail
cd "$(dirname "$0")/.."

LAB=${NIGHTLY_VM_LAB:-nightly-vm}
SUBNET=${NIGHTLY_VM_SUBNET:-10.213.201.0/24}
LOOPS=${LOOPS:-5}
RUN_DIR=${E2E_REPORT_DIR:-e2e/reports/$(date -u +%Y%m%d-%H%M%S)-nightly-vm}
SEED_BUGS=(nomad-24140 nomad-12216 nomad-24292)  # ../shared/seeds: the reports the project began from
PHASE_TAG="fieldlab nightly-vm"
# shellcheck source=scripts/phases.sh
source scripts/phases.sh

mkdir -p "$RUN_DIR"
phase lab-up .venv/bin/fieldlab lab up --lab "$LAB" --provider qemu --clients 2 --subnet "$SUBNET"
# The restore and pause-kill suites run whole, each test once: a repro's half without its flag IS a
# run of its scenario, judged pass or fail like any (FIXED or NOT FIXED), so the suites phase runs
# only what no repro runs. nomad-12216 runs test_pause_kill.py, nomad-24292 test_restore.py's clean
# reboot: under TCG each was ~470 s and ~300 s run twice for nothing.
if last_phase_ok; then
    phase suites .venv/bin/pytest e2e/suites/test_restore.py --lab "$LAB" --loops "$LOOPS" -k "not clean-reboot" \
        --report-dir "$RUN_DIR/suites" ${SEED:+--seed "$SEED"}
    for bug in "${SEED_BUGS[@]}"; do
        phase "$bug" bash -o pipefail -c ".venv/bin/python -m e2e.drivers.repro --lab '$LAB' --report-dir '$RUN_DIR/repro' '$bug' 2>&1 | tee -a '$RUN_DIR/repro.txt'"
    done
fi
if [ "${KEEP_LAB:-0}" = 1 ] && [ $phase_failed = 1 ] && [ "${CI:-}" != true ]; then
    echo "[fieldlab nightly-vm] KEEP_LAB=1: lab $LAB kept for debugging (make lab-down LAB=$LAB)"
else
    phase lab-down .venv/bin/fieldlab lab down --lab "$LAB"
fi

phase_summary "report: $RUN_DIR/suites/report.html; consoles collected with a failed test's files"
