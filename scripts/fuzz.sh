#!/usr/bin/env bash
# Builds the libFuzzer harnesses (fuzz/; the `fuzz` preset: clang-14, ASan +
# UBSan) and runs each for a bounded time, as many at once as there are cores:
#
#   scripts/fuzz.sh [SECONDS]     # or FUZZ_SECONDS=SECONDS; default 60 each
#
# Each harness starts from its committed seed corpus and regressions
# (fuzz/corpus/<harness>/, fuzz/regressions/<harness>/: read only) plus a
# working corpus in build/fuzz/corpus/<harness>/, where new inputs go and
# which later runs start from. Crash, leak and timeout reproducers go to
# build/fuzz/artifacts/<harness>/, logs to build/fuzz/logs/. Prints one line
# per harness (executions, exec/s, corpus, coverage) and exits non-zero if
# any harness failed, naming the reproducer: copy it to
# fuzz/regressions/<harness>/ once the bug is fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install-deps.sh

seconds=${1:-${FUZZ_SECONDS:-60}}
harnesses=(trace_parsers cache_ops select_victims redis_replies)
jobs=$(nproc 2>/dev/null || echo 2)
start=$(date +%s)

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -j "$jobs"
built=$(date +%s)

out=build/fuzz
mkdir -p "$out/logs"

# One harness for $seconds from its corpora; exits with the harness's status.
run_harness() {
    local h=$1
    mkdir -p "$out/corpus/$h" "$out/artifacts/$h"
    # -timeout: one input may take this long (the slowest take well under a
    # second); -rss_limit_mb: far above the ~500 MB they use.
    "$out/fuzz/fuzz_$h" \
        -max_total_time="$seconds" -print_final_stats=1 -timeout=30 -rss_limit_mb=4096 \
        -artifact_prefix="$out/artifacts/$h/" \
        "$out/corpus/$h" "fuzz/corpus/$h" "fuzz/regressions/$h" >"$out/logs/$h.log" 2>&1
}

# The harnesses run side by side, at most $jobs at once: each is one
# single-threaded process, so each still gets a core for its whole time
# (three harnesses on 2 cores: two minutes of wall time, not three).
declare -A pid_of rc_of
running=0
for h in "${harnesses[@]}"; do
    if [ "$running" -ge "$jobs" ]; then
        wait -n || true
        running=$((running - 1))
    fi
    run_harness "$h" &
    pid_of[$h]=$!
    running=$((running + 1))
done
for h in "${harnesses[@]}"; do
    rc=0
    wait "${pid_of[$h]}" || rc=$?
    rc_of[$h]=$rc
done

failed=0
summary=()
for h in "${harnesses[@]}"; do
    log="$out/logs/$h.log"
    rc=${rc_of[$h]}
    final_stat() { sed -n "s/^stat::$1: *//p" "$log" | tail -1; }
    final=$(grep -E '^#[0-9]+[[:space:]]+(DONE|NEW|REDUCE|pulse|INITED)' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$final")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$final")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9a-zA-Z]*\).*/\1/p' <<<"$final")
    line=$(printf 'fuzz: %-15s %10s executions  %7s exec/s  corpus %s  coverage %s edges, %s features' \
        "$h" "$(final_stat number_of_executed_units)" "$(final_stat average_exec_per_sec)" "${corp:-?}" "${cov:-?}" "${ft:-?}")
    if [ "$rc" -ne 0 ]; then
        failed=1
        reproducer=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
        line="$line  FAILED (exit $rc): reproducer ${reproducer:-none written}; log $log"
        echo "---- $h: the end of $log" >&2
        tail -n 40 "$log" >&2
    fi
    echo "$line"
    summary+=("$line")
done

echo "fuzz.sh: ${seconds} s per harness; build $(( built - start )) s, total $(( $(date +%s) - start )) s"
printf '%s\n' "${summary[@]}"
exit "$failed"
