#!/usr/bin/env bash
# The README's "Which policy" tables and plots in one command: kvpolicy-sim in
# prefix mode on the three traces in ../shared/traces, at 1%, 5% and 10% of
# each trace's distinct blocks, with every registered policy. Per trace it
# writes, under build/which-policy/: TRACE.txt (the ranked table: hit ratio,
# share of the LRU -> Belady gap closed, token hit ratio, Jain's fairness,
# re-prefill share), TRACE.csv, TRACE.json and TRACE.png (LRU and Belady
# drawn thick), and which-policy.md: the markdown tables of the README section
# (scripts/which-policy-tables.py; hit ratio, token hit ratio, share of the gap
# closed, capacity saved where measured, fairness, re-prefill share).
#
# "Capacity needed to reach LRU's hit ratio" (--match-lru) bisects over
# replays: a few minutes on the Mooncake traces, about two hours for every
# policy on the 19.7M-access agentic trace on 2 cores, so there only for
# lru and the two policies "What to pick" names for it (adaptive_kv,
# session_aware_lru; about 15 minutes), or for all with --full.
#
#   scripts/which-policy.sh [--full] [--policy LIST] [--traces DIR]
set -euo pipefail
cd "$(dirname "$0")/.."

full=0
policies=all
traces=../shared/traces
while [ $# -gt 0 ]; do
    case "$1" in
        --full) full=1 ;;
        --policy) policies="$2"; shift ;;
        --traces) traces="$2"; shift ;;
        *) echo "which-policy.sh: unknown argument '$1'; accepted: --full, --policy LIST, --traces DIR" >&2; exit 2 ;;
    esac
    shift
done
for f in mooncake/conversation_trace.jsonl mooncake/synthetic_trace.jsonl agentic/agentic_mix.jsonl.gz; do
    [ -f "$traces/$f" ] || { echo "which-policy.sh: missing $traces/$f; give --traces DIR (the folder of ../shared/traces)" >&2; exit 2; }
done

jobs=$(nproc 2>/dev/null || echo 2)
cmake --preset release >/dev/null
cmake --build --preset release --target kvpolicy-sim -j "$jobs" >/dev/null
sim=build/release/tools/kvpolicy-sim
out=build/which-policy
mkdir -p "$out"

run() {  # NAME FILE BLOCK_SIZE MATCH
    local name=$1 file=$2 block=$3 match=$4
    # --bounds: the tables' gap column needs lru and belady even when --policy leaves them out.
    local args=(--trace "$file" --mode prefix --block-size "$block" --policy "$policies" --capacity 1%,5%,10% --bounds)
    [ "$match" = 1 ] && args+=(--match-lru)
    echo "== $name" >&2
    "$sim" "${args[@]}" --plot "$out/$name.png" --csv-file "$out/$name.csv" --json-file "$out/$name.json" \
        | tee "$out/$name.txt"
}

run conversation "$traces/mooncake/conversation_trace.jsonl" 512 1
run synthetic "$traces/mooncake/synthetic_trace.jsonl" 512 1
run agentic "$traces/agentic/agentic_mix.jsonl.gz" 64 "$full"
saved=""
if [ "$full" = 0 ]; then
    echo "== agentic: capacity saved for lru, adaptive_kv, session_aware_lru" >&2
    "$sim" --trace "$traces/agentic/agentic_mix.jsonl.gz" --mode prefix --block-size 64 \
        --policy lru,adaptive_kv,session_aware_lru --capacity 1%,5%,10% --match-lru \
        --csv-file "$out/agentic-saved.csv" >"$out/agentic-saved.txt"
    saved="|$out/agentic-saved.csv"
fi
# The README's markdown tables from the CSVs; distinct blocks as the traces' READMEs give them.
printf '%s\n' "mooncake conversation|$out/conversation.csv|182790" "mooncake synthetic|$out/synthetic.csv|43924" \
    "agentic mix|$out/agentic.csv|904665$saved" >"$out/index"
python3 scripts/which-policy-tables.py "$out/index" | tee "$out/which-policy.md"
echo "tables, CSV, JSON, plots and which-policy.md in $out/" >&2
