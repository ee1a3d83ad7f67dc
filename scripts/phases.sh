# Sourced by test-all.sh and nightly.sh: run named phases, time each, print a summary table.
# Usage: PHASE_TAG="fieldlab test"; phase <name> <command...>; ...; phase_summary  (returns non-zero if any failed)
# Each phase's output is also kept in $PHASE_LOGS/<name>.log; the summary repeats the FAILED/ERROR
# lines of a failed phase, so the tail of a long CI log says which test broke.
#
# Lanes: `lane_start <name> <function>` runs a function of phases beside the main script (its output
# goes to $PHASE_LOGS/lane-<name>.out, a progress line every LANE_HEARTBEAT seconds, the whole output
# printed when `lane_wait` sees it end). Results of every phase, in a lane or not, go to one file, so
# the summary lists them all.
phase_failed=0
_phase_t0=$(date +%s)
PHASE_LOGS=${PHASE_LOGS:-reports/phases}
LANE_HEARTBEAT=${LANE_HEARTBEAT:-300}
mkdir -p "$PHASE_LOGS"
_phase_results="$PHASE_LOGS/.results"
: > "$_phase_results"
_last_result=ok
declare -a _lane_pids=() _lane_names=()

phase() {
    local name=$1; shift
    echo "[$PHASE_TAG] ===== phase $name: $* ====="
    local t0 secs; t0=$(date +%s)
    "$@" 2>&1 | tee "$PHASE_LOGS/$name.log"
    if [ "${PIPESTATUS[0]}" = 0 ]; then _last_result=ok; else _last_result=FAILED; phase_failed=1; fi
    secs=$(( $(date +%s) - t0 ))
    printf '%s %s %s %s\n' "$name" "$_last_result" "$secs" "$t0" >> "$_phase_results"
    echo "[$PHASE_TAG] ===== phase $name: $_last_result in ${secs}s ====="
}

last_phase_ok() { [ "$_last_result" = ok ]; }

lane_start() {
    local name=$1 fn=$2 out="$PHASE_LOGS/lane-$1.out"
    echo "[$PHASE_TAG] ===== lane $name starts beside the rest: $fn (output: $out, printed whole when it ends) ====="
    ( "$fn" ) > "$out" 2>&1 &
    local pid=$!
    _lane_pids+=("$pid"); _lane_names+=("$name")
    # progress: the lane's last phase line and pytest's last progress line, every LANE_HEARTBEAT s
    (
        local t0 waited=0; t0=$(date +%s)
        while kill -0 "$pid" 2>/dev/null; do
            if [ "$waited" -ge "$LANE_HEARTBEAT" ]; then
                waited=0
                echo "[$PHASE_TAG] lane $name still running after $(( $(date +%s) - t0 ))s:" \
                    "$(grep -E '===== phase|^tests/.*(PASSED|FAILED)|^tests/\S+ [.sFEx]+' "$out" | tail -n 1 | cut -c1-150)"
            fi
            sleep 5; waited=$(( waited + 5 ))
        done
    ) &
}

lane_wait() {
    local i pid name rc
    for i in "${!_lane_pids[@]}"; do
        pid=${_lane_pids[$i]}; name=${_lane_names[$i]}
        if kill -0 "$pid" 2>/dev/null; then echo "[$PHASE_TAG] waiting for lane $name ..."; fi
        wait "$pid"; rc=$?
        echo "[$PHASE_TAG] ===== lane $name ended (rc $rc); its output follows ====="
        cat "$PHASE_LOGS/lane-$name.out"
        echo "[$PHASE_TAG] ===== end of lane $name ====="
        [ "$rc" = 0 ] || phase_failed=1
    done
    _lane_pids=(); _lane_names=()
}

phase_summary() {
    echo
    echo "[$PHASE_TAG] summary${1:+ ($1)} (phases in the order they started; a lane's beside the others)"
    local name result secs t0 failed=()
    while read -r name result secs t0; do
        printf '  %-12s %-7s %5ss  (from +%ss)\n' "$name" "$result" "$secs" "$(( t0 - _phase_t0 ))"
        [ "$result" = ok ] || failed+=("$name")
        [ "$result" = ok ] || phase_failed=1
    done < <(sort -s -k4,4n "$_phase_results")
    printf '  %-12s %-7s %5ss\n' total "$([ $phase_failed = 0 ] && echo ok || echo FAILED)" "$(( $(date +%s) - _phase_t0 ))"
    for name in "${failed[@]}"; do
        echo "[$PHASE_TAG] $name failed; its failures ($PHASE_LOGS/$name.log):"
        grep -E '^(FAILED|ERROR) ' "$PHASE_LOGS/$name.log" | head -n 20 | sed 's/^/    /'
        grep -E '^E   ' "$PHASE_LOGS/$name.log" | head -n 15 | sed 's/^/    /'
    done
    return $phase_failed
}
