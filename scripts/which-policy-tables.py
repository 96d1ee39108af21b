# Formats scripts/which-policy.sh's CSVs as the README's "Which policy" tables: one
# markdown table per trace, a row per policy (lru first, then the online policies by
# mean hit ratio, then the two bounds that read the future: reuse_oracle_lru, belady), a column per capacity. Columns the simulator did not write
# (capacity saved without --match-lru) are left out. An index line may name a
# second CSV after the distinct blocks: capacity saved for some policies, from
# a --match-lru run of those alone ("-" for the rest).
import csv, sys
def num(r, k):
    v = r.get(k, "")
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
for line in open(sys.argv[1]):
    name, path, distinct, *saved_path = line.rstrip("\n").split("|")
    rows = [r for r in csv.DictReader(open(path)) if r["policy"] != "policy"]  # repeated headers
    if saved_path:
        saved = {(r["policy"], r["capacity"]): r.get("capacity_saved", "")
                 for r in csv.DictReader(open(saved_path[0])) if r["policy"] != "policy"}
        for r in rows:
            r["capacity_saved"] = saved.get((r["policy"], r["capacity"]), "")
    caps = sorted({int(r["capacity"]) for r in rows})
    has_saved = any(num(r, "capacity_saved") is not None for r in rows)
    has_fair = any(num(r, "fairness") is not None for r in rows)
    parts = ["hit ratio", "token hit ratio", "share of the LRU -> Belady gap closed"]
    if has_saved: parts.append("capacity saved (1 - capacity reaching LRU's hit ratio / capacity)")
    if has_fair: parts += ["Jain's fairness over sessions", "re-prefill share"]
    print(f"\n**{name}** ({int(distinct):,} distinct blocks; " + " / ".join(parts) + ")\n")
    print("| policy | " + " | ".join(f"{c:,} ({100 * c / int(distinct):.0f}%)" for c in caps) + " |")
    print("|---|" + "---:|" * len(caps))
    by = {(r["policy"], int(r["capacity"])): r for r in rows}
    lru = {c: float(by[("lru", c)]["hit_ratio"]) for c in caps}
    bel = {c: float(by[("belady", c)]["hit_ratio"]) for c in caps}
    names = []
    for r in rows:
        if r["policy"] not in names: names.append(r["policy"])
    bounds = ("reuse_oracle_lru", "belady")
    def key(p):  # lru first, the bounds last, the rest by mean hit ratio
        return (p != "lru", bounds.index(p) if p in bounds else -1, -sum(float(by[(p, c)]["hit_ratio"]) for c in caps))
    for p in sorted(names, key=key):
        cells = []
        for c in caps:
            r = by[(p, c)]
            h = float(r["hit_ratio"]); t = float(r["token_hit_ratio"])
            gap = bel[c] - lru[c]
            f = [f"{h:.4f}", f"{t:.4f}",
                 f"{100 * (h - lru[c]) / gap:+.0f}%" if gap > 1e-12 and p not in ("lru", "belady") else "-"]
            if has_saved:
                s = num(r, "capacity_saved")
                f.append(f"{100 * s:+.0f}%" if s is not None and p != "lru" else "-")
            if has_fair:
                j = num(r, "fairness"); rp = num(r, "re_prefill_share")
                f.append(f"{j:.2f}" if j is not None else "-")
                f.append(f"{100 * rp:.0f}%" if rp is not None else "-")
            cells.append(" / ".join(f))
        label = f"**{p}**" if p in ("lru", "adaptive_kv", "session_aware_lru") + bounds else p
        print(f"| {label} | " + " | ".join(cells) + " |")
