#!/usr/bin/env bash
# Regenerates the README's "Which policy" tables: every trace in
# ../shared/traces replayed in prefix mode at 1%, 5% and 10% of its distinct
# blocks, with each policy's hit ratio, token hit ratio and share of the
# LRU -> Belady gap it closes ((policy - LRU) / (Belady - LRU)).
#
#   scripts/which-policy.sh                 # markdown tables on stdout
#   POLICIES=lru,tail_aware_lru,belady scripts/which-policy.sh
#
# CSV_DIR=dir keeps the simulator's CSVs there; FORMAT_ONLY=1 CSV_DIR=dir
# prints the tables from CSVs already there (rows of several runs of one
# trace may be concatenated into its CSV, header lines included).
#
# POLICIES defaults to every registered policy except the two layer-chunk
# ones (retention_value, checkerboard: they score every candidate per victim
# and do not finish the agentic trace in minutes). lru and belady are always
# run. Needs the release build of kvpolicy-sim (built here if missing) and
# python3. About 10 minutes on 2 cores, most of it the agentic trace.
set -euo pipefail
cd "$(dirname "$0")/.."
traces=${TRACES:-../shared/traces}
sim=build/release/tools/kvpolicy-sim
if [ "${FORMAT_ONLY:-0}" != 1 ] && [ ! -x "$sim" ]; then
    cmake --preset release >/dev/null
    cmake --build --preset release --target kvpolicy-sim -j"$(nproc)" >/dev/null
fi
policies=${POLICIES:-fifo,lru,round_robin,lfu,clock,sieve,slru,two_q,qos_aware,predictive,arc,s3fifo,lirs,w_tinylfu,gdsf,tail_aware_lru,session_aware_lru,belady}
case ",$policies," in *,lru,*) ;; *) policies="lru,$policies" ;; esac
case ",$policies," in *,belady,*) ;; *) policies="$policies,belady" ;; esac

# name | file | block size | distinct blocks (the traces' READMEs)
runs=(
    "mooncake conversation|$traces/mooncake/conversation_trace.jsonl|512|182790"
    "mooncake synthetic|$traces/mooncake/synthetic_trace.jsonl|512|43924"
    "agentic mix|$traces/agentic/agentic_mix.jsonl.gz|64|904665"
)
if [ -n "${CSV_DIR:-}" ]; then
    tmp=$CSV_DIR
    mkdir -p "$tmp"
else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi
: >"$tmp/index"
for r in "${runs[@]}"; do
    IFS='|' read -r name file bs distinct <<<"$r"
    csv="$tmp/$(echo "$name" | tr ' ' _).csv"
    if [ "${FORMAT_ONLY:-0}" != 1 ]; then
        caps="$((distinct / 100)),$((distinct / 20)),$((distinct / 10))"
        "$sim" --trace "$file" --mode prefix --block-size "$bs" --policy "$policies" --capacity "$caps" \
            --output csv >"$csv"
    fi
    echo "$name|$csv|$distinct" >>"$tmp/index"
done

python3 - "$tmp/index" <<'PY'
import csv, sys
for line in open(sys.argv[1]):
    name, path, distinct = line.rstrip("\n").split("|")
    rows = [r for r in csv.DictReader(open(path)) if r["policy"] != "policy"]  # repeated headers
    caps = sorted({int(r["capacity"]) for r in rows})
    print(f"\n**{name}** ({int(distinct):,} distinct blocks; hit ratio / token hit ratio / share of the LRU -> Belady gap closed)\n")
    print("| policy | " + " | ".join(f"{c:,} ({100 * c / int(distinct):.0f}%)" for c in caps) + " |")
    print("|---|" + "---:|" * len(caps))
    by = {(r["policy"], int(r["capacity"])): r for r in rows}
    lru = {c: float(by[("lru", c)]["hit_ratio"]) for c in caps}
    bel = {c: float(by[("belady", c)]["hit_ratio"]) for c in caps}
    names = []
    for r in rows:
        if r["policy"] not in names: names.append(r["policy"])
    def key(p):  # lru first, belady last, the rest by mean hit ratio
        return (p != "lru", p == "belady", -sum(float(by[(p, c)]["hit_ratio"]) for c in caps))
    for p in sorted(names, key=key):
        cells = []
        for c in caps:
            h = float(by[(p, c)]["hit_ratio"]); t = float(by[(p, c)]["token_hit_ratio"])
            gap = bel[c] - lru[c]
            share = f"{100 * (h - lru[c]) / gap:+.0f}%" if gap > 1e-12 and p not in ("lru", "belady") else "-"
            cells.append(f"{h:.4f} / {t:.4f} / {share}")
        label = f"**{p}**" if p in ("lru", "belady", "tail_aware_lru", "session_aware_lru") else p
        print(f"| {label} | " + " | ".join(cells) + " |")
PY
