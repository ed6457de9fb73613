#!/usr/bin/env bash
# Freemium borrowing rules compared on the simulator (design.md §2, revised
# 2026-12-03): for each workload (the steady open one and the saturated
# closed population), PLB under every `--freemium-borrow` rule and 5RR, the
# cascade preset, mixes 25:75 and 50:50, N repeats (seeds 1..N). Prints one
# markdown table of the two-down phase (three survivors): per class the
# median goodput (queries/s) and p95 (ms), with each rule's ratio to 5RR
# (steady) or to `surplus` (closed population), and how many runs failed a
# validity check. Usage: scripts/ablation-borrow.sh [N (5)] [OUT (a temp dir)]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
out=${2:-$(mktemp -d)}
bin=$PWD/target/release/plbbench
[[ -x $bin ]] || cargo build --release --locked -q
rules=(pressure pressure-fallback surplus idle mirror never)
for w in analytics closed-population; do
    for rule in "${rules[@]}"; do
        "$bin" experiment --cluster sim --workload "workloads/$w.toml" --strategies plb --mixes 25:75,50:50 \
            --faults cascade --repeat "$n" --freemium-borrow "$rule" --checks warn -q --out "$out/$w-$rule" >/dev/null
    done
    "$bin" experiment --cluster sim --workload "workloads/$w.toml" --strategies rr --mixes 25:75,50:50 \
        --faults cascade --repeat "$n" --checks warn -q --out "$out/$w-5rr" >/dev/null
done
python3 - "$out" "${rules[@]}" <<'EOF'
import csv, json, sys
out, rules = sys.argv[1], sys.argv[2:]

def cell(folder, mix, cls):
    for row in csv.DictReader(open(f"{out}/{folder}/experiment.csv")):
        if row["mix"] == mix and row["phase"] == "down2" and row["class"] == cls:
            return float(row["goodput_qps_median"]), float(row["p95_ms_median"])
    return float("nan"), float("nan")

def failed(folder):
    runs = json.load(open(f"{out}/{folder}/experiment.json"))["runs"]
    verdicts = (json.load(open(f"{out}/{folder}/{r['dir']}/summary.json"))["verdicts"] for r in runs)
    return sum(1 for v in verdicts if not all(c["ok"] for c in v))

print("| workload | mix | rule | P goodput | P p95 | F goodput | F p95 | P goodput / ref | P p95 / ref | F goodput / ref | F p95 / ref | runs failing a check |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for w, ref in (("analytics", "5rr"), ("closed-population", "surplus")):
    for mix in ("25:75", "50:50"):
        base = {c: cell(f"{w}-{ref}", mix, c) for c in "PF"}
        for rule in rules + ["5rr"]:
            got = {c: cell(f"{w}-{rule}", mix, c) for c in "PF"}
            ratios = [got[c][i] / base[c][i] for c in "PF" for i in (0, 1)]
            print(f"| {w} | {mix} | {rule} | {got['P'][0]:.1f} | {got['P'][1]:.1f} | {got['F'][0]:.1f} | {got['F'][1]:.1f} | "
                  + " | ".join(f"{x:.2f}" for x in ratios) + f" | {failed(f'{w}-{rule}')} |")
    print(f"| {w} | | (ref: {ref}) | | | | | | | | | |")
EOF
