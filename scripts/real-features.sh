#!/usr/bin/env bash
# Every run-time feature once more on the real local cluster under the
# default workload (the guide: "a feature tested only under the old
# default is untested"): plb at 25:75 under cascade, T=1000, with the
# default settings and then one feature changed per run. Each run goes to
# OUT/NAME; a NAME whose summary.json exists is kept, so the script
# resumes. The 1-minute load average is sampled every 30 s into
# OUT/loadavg.csv. At the end one line per run: checks passed, Premium's
# retention in down1, goodput and p95 per class in down2.
# Measure on a quiet machine: no build, no other benchmark.
#   FEATURES  the names to run (default: all below, docker last)
#   TIME_SCALE  default 0.5 (150 s runs)
# Usage: scripts/real-features.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:?usage: scripts/real-features.sh OUT}")
bin=$(realpath target/release/plbbench)
[[ -x $bin ]] || { bash scripts/setup.sh; bin=$(realpath target/release/plbbench); }
declare -A args=(
    [default]=""
    [admission-modes]="--admission modes"
    [detection-oracle]="--detection oracle"
    [detection-suspicion]="--detection suspicion --recovery probation"
    [recovery-slow-start]="--recovery slow-start"
    [via-proxy]="--via-proxy"
    [generators-2]="--generators 2"
    [generators-2-docker]="--generators 2 --generators-on docker"
)
order="default admission-modes detection-oracle detection-suspicion recovery-slow-start via-proxy generators-2 generators-2-docker"
mkdir -p "$out"
# shellcheck source=lib/loadavg.sh
source scripts/lib/loadavg.sh
loadavg_sampler "$out/loadavg.csv"
for name in ${FEATURES:-$order}; do
    [[ -v "args[$name]" ]] || { echo "real-features: unknown feature $name (known: $order)" >&2; exit 2; }
    [[ -f $out/$name/summary.json ]] && { echo "real-features: $name kept"; continue; }
    rm -rf "$out/$name"
    echo "real-features: $name ($(date -u +%H:%M:%S) UTC, load $(cut -d' ' -f1 /proc/loadavg))"
    # shellcheck disable=SC2086
    "$bin" run --cluster local --strategy plb --mix 25:75 --T 1000 --faults cascade \
        --time-scale "${TIME_SCALE:-0.5}" --checks warn --progress lines --out "$out/$name" ${args[$name]} \
        > "$out/$name.log" 2>&1 || echo "real-features: $name exited $?"
    tail -n 3 "$out/$name.log"
done
python3 - "$out" $order <<'EOF'
import json, os, sys
out = sys.argv[1]
def cell(s, phase, cls, key):
    for p in s["phases"]:
        if p["phase"] == phase and p["class"] == cls:
            return p[key]
print("feature | checks | P retention down1 | P q/s down2 | P p95 down2 | F q/s down2 | F p95 down2 | failed")
for name in sys.argv[2:]:
    f = os.path.join(out, name, "summary.json")
    if not os.path.exists(f):
        continue
    s = json.load(open(f))
    v = s["verdicts"]
    failed = ", ".join(x["name"] for x in v if not x["ok"]) or "-"
    print(f'{name} | {sum(x["ok"] for x in v)}/{len(v)} | {cell(s, "down1", "P", "retention")} | '
          f'{cell(s, "down2", "P", "goodput_qps")} | {cell(s, "down2", "P", "p95_ms")} | '
          f'{cell(s, "down2", "F", "goodput_qps")} | {cell(s, "down2", "F", "p95_ms")} | {failed}')
EOF
