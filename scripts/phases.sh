# Sourced by test-all.sh and nightly.sh: run named phases, time each, print a summary table.
# Usage: PHASE_TAG="fieldlab test"; phase <name> <command...>; ...; phase_summary  (returns non-zero if any failed)
# Each phase's output is also kept in $PHASE_LOGS/<name>.log; the summary repeats the FAILED/ERROR
# lines of a failed phase, so the tail of a long CI log says which test broke.
declare -a _phase_names=() _phase_secs=() _phase_results=()
phase_failed=0
_phase_t0=$(date +%s)
PHASE_LOGS=${PHASE_LOGS:-reports/phases}
mkdir -p "$PHASE_LOGS"

phase() {
    local name=$1; shift
    echo "[$PHASE_TAG] ===== phase $name: $* ====="
    local t0; t0=$(date +%s)
    "$@" 2>&1 | tee "$PHASE_LOGS/$name.log"
    if [ "${PIPESTATUS[0]}" = 0 ]; then _phase_results+=("ok"); else _phase_results+=("FAILED"); phase_failed=1; fi
    _phase_names+=("$name"); _phase_secs+=($(( $(date +%s) - t0 )))
    echo "[$PHASE_TAG] ===== phase $name: ${_phase_results[-1]} in ${_phase_secs[-1]}s ====="
}

last_phase_ok() { [ "${_phase_results[-1]}" = ok ]; }

phase_summary() {
    echo
    echo "[$PHASE_TAG] summary${1:+ ($1)}"
    local i
    for i in "${!_phase_names[@]}"; do
        printf '  %-12s %-7s %5ss\n' "${_phase_names[$i]}" "${_phase_results[$i]}" "${_phase_secs[$i]}"
    done
    printf '  %-12s %-7s %5ss\n' total "$([ $phase_failed = 0 ] && echo ok || echo FAILED)" "$(( $(date +%s) - _phase_t0 ))"
    for i in "${!_phase_names[@]}"; do
        [ "${_phase_results[$i]}" = ok ] && continue
        echo "[$PHASE_TAG] ${_phase_names[$i]} failed; its failures ($PHASE_LOGS/${_phase_names[$i]}.log):"
        grep -E '^(FAILED|ERROR) ' "$PHASE_LOGS/${_phase_names[$i]}.log" | head -n 20 | sed 's/^/    /'
        grep -E '^E   ' "$PHASE_LOGS/${_phase_names[$i]}.log" | head -n 15 | sed 's/^/    /'
    done
    return $phase_failed
}
