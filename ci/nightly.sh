#!/usr/bin/env bash
# The nightly regression job (docs/manual.md, "Nightly regression job"). Builds plbbench (scripts/setup.sh),
# then:
#   1. runs the simulator's full paper grid (4 strategies x 3 mixes x
#      2 presets x 5 repeats, T=1000, the default workload, the paper's
#      regime as the findings map picked it on 2026-12-06; deterministic,
#      about 15 seconds) and
#      compares it with the committed baseline ci/baseline/sim under tight
#      thresholds: any change in the simulator's results is a change in the
#      code, so it must be explained and the baseline refreshed;
#   2. runs a short real-cluster experiment of the paper's closed regime
#      (`paper-closed`, the default until 2026-12-06, whose baseline is
#      recorded; plb and 5RR, cascade, 25:75, one repeat, time
#      scale 0.7: two 3.5-minute runs on five local PostgreSQL servers)
#      and compares it with ci/baseline/real under loose thresholds that
#      catch a broken router or driver, not machine noise;
#   3. rebuilds reports/index.html so the night's reports are archived.
# Every report is kept under $NIGHTLY_OUT (default reports/nightly/<utc>),
# with the comparisons as text, markdown (for a pull-request comment) and
# HTML. Exit status 1 when a threshold is violated (both comparisons always
# run), 0 otherwise. NIGHTLY_REAL=0 skips the real part (no PostgreSQL).
#
# Refreshing a baseline after an intended change: run this script, check
# the comparison pages, then `bash ci/refresh-baseline.sh <night folder>`
# and commit ci/baseline with a message that says why the numbers moved.
set -euo pipefail
cd "$(dirname "$0")/.."

out=${NIGHTLY_OUT:-reports/nightly/$(date -u +%Y%m%dT%H%M%SZ)}
real=${NIGHTLY_REAL:-1}
bash scripts/setup.sh
bin=target/release/plbbench
mkdir -p "$out"
status=0

# compare NAME THRESHOLD... : new folder $out/NAME against ci/baseline/NAME.
compare() {
    local name=$1; shift
    local args=(--baseline "ci/baseline/$name" "$out/$name")
    for t in "$@"; do args+=(--threshold "$t"); done
    local rc=0
    "$bin" compare "${args[@]}" --html "$out/$name-compare.html" --format markdown > "$out/$name-compare.md" || rc=$?
    "$bin" compare "${args[@]}" --format text | tee "$out/$name-compare.txt" || true
    case $rc in
        0) echo "nightly: $name: every threshold holds" ;;
        1) echo "nightly: $name: REGRESSION (see $out/$name-compare.md)"; status=1 ;;
        *) echo "nightly: $name: compare failed with exit status $rc" >&2; exit "$rc" ;;
    esac
}

# `--checks warn`: the gate here is the thresholds below. Runs that fail
# their validity checks (a p95 trend in some simulated baselines; phases
# shorter than a session in the time-scaled real runs) are printed as
# warnings and bannered in their report.html.
echo "nightly: simulator paper grid -> $out/sim"
"$bin" experiment --cluster sim -q --checks warn --out "$out/sim"
compare sim \
    'premium.*.p95_ms<=+5%' \
    'premium.*.goodput_qps>=-2%' \
    'freemium.*.p95_ms<=+5%' \
    'freemium.*.goodput_qps>=-2%'

if [[ $real == 1 ]]; then
    # The real baseline was recorded on the closed population that was the
    # default until 2026-12-06 (`paper-closed`); the night runs the same
    # workload by name until a baseline of the map's pick is recorded on a
    # quiet machine (docs/paper.md, "Where the findings hold").
    echo "nightly: real local cluster, paper-closed, plb and rr, cascade 25:75, time scale 0.7 -> $out/real"
    "$bin" experiment --cluster local --workload paper-closed --strategies plb,rr --mixes 25:75 --faults cascade \
        --repeat 1 --time-scale 0.7 -q --checks warn --out "$out/real"
    # Gates (2026-12-05, the paper's regime): the baseline is repeat 1 of
    # plb and 5RR under cascade in reports/examples/real-paper-default-25-75-ts07
    # (kept, not re-run: `experiment` keeps complete runs of the same
    # settings). Across that grid's 3 repeats on a quiet machine, plb's
    # Premium goodput in the baseline moved by 7% and its p95 by 7%, its
    # down1 p95 by 10%, and Freemium's baseline goodput by 6-7% under
    # either strategy; the limits are about twice that. The fault phases'
    # goodput is not gated: plb's Premium goodput in down2 ranged from 91
    # to 166 q/s between repeats (phases of 21-42 s under sessions pinned
    # for 30-100 s). A broken router shows first in the baseline: plb
    # gives Premium twice 5RR's goodput there (520-559 against 246-259 q/s).
    compare real \
        'plb/*/*/premium.baseline.goodput_qps>-15%' \
        'plb/*/*/premium.baseline.p95_ms<+25%' \
        'plb/*/*/premium.down1.p95_ms<+50%' \
        '*/*/*/freemium.baseline.goodput_qps>-15%'
else
    echo "nightly: NIGHTLY_REAL=0: real-cluster part skipped"
fi

"$bin" archive --root reports
echo "nightly: reports kept in $out (status $status)"
exit "$status"
