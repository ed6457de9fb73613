#!/usr/bin/env bash
# Memory benchmark of real runs (issue 7): plbbench's own peak RSS (VmHWM,
# which every real run writes to summary.json `generator.rss_peak_mib`) and
# its most open sessions, in `plbbench run --cluster local --faults none
# --time-scale 0.2` (60 s) at T=250 and T=1000. Prints RSS per open session
# (whole process / peak sessions) and the marginal cost (the slope between
# the two runs); target: <= 64 KiB per open session. Starts real servers:
# needs a quiet machine (waits while /tmp/plbbench-quiet.lock exists).
# Usage: scripts/bench-mem-real.sh [T_SMALL (250)] [T (1000)]
set -euo pipefail
cd "$(dirname "$0")/.."
small=${1:-250}
big=${2:-1000}
cargo build --release --locked -q
bin=$PWD/target/release/plbbench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for _ in $(seq 40); do [[ -e /tmp/plbbench-quiet.lock ]] || break; echo "bench-mem-real: waiting for a quiet machine" >&2; sleep 30; done

# A private state directory: never a cluster left by `plbbench cluster up`,
# nor the shared default run directory of other runs on this machine.
export PLBBENCH_STATE_DIR=$out/state
field() { grep -o "\"$1\": *[0-9.]*" "$2" | head -n 1 | sed 's/.*: *//'; }
declare -A rss sessions
for t in "$small" "$big"; do
    "$bin" run --cluster local --faults none --time-scale 0.2 --T "$t" --quiet --checks warn --out "$out/out-t$t" >/dev/null 2>"$out/stderr" \
        || { cat "$out/stderr" >&2; exit 1; }
    rss[$t]=$(field rss_peak_mib "$out/out-t$t/summary.json")
    sessions[$t]=$(field sessions_peak "$out/out-t$t/summary.json")
done
echo "| T | peak open sessions | plbbench peak RSS MiB | KiB per open session (whole process) |"
echo "| --- | --- | --- | --- |"
for t in "$small" "$big"; do
    printf '| %s | %s | %.1f | %.0f |\n' "$t" "${sessions[$t]}" "${rss[$t]}" "$(echo "${rss[$t]} * 1024 / ${sessions[$t]}" | bc -l)"
done
ds=$(( ${sessions[$big]} - ${sessions[$small]} ))
if (( ds > 0 )); then
    printf 'marginal: %.1f KiB per extra open session (T=%s -> %s; target <= 64)\n' \
        "$(echo "(${rss[$big]} - ${rss[$small]}) * 1024 / $ds" | bc -l)" "$small" "$big"
fi
