#!/usr/bin/env bash
# Fleet-scale simulator benchmark (docs/performance.md, "Fleets"): the
# steady workload (`--workload analytics`, its load per replica unchanged)
# at K replicas and T = 200 x K clients, one whole release-build process per
# row (report writing included), with the wall time, the user CPU time, the
# peak RSS, the work simulated (queries sent plus sessions started, from
# summary.json) and the CPU time per unit of it. Goal: K=5000, T=1,000,000
# in at most 120 s and 4 GiB; from K=50 to K=5000 the time per query or
# session within 1.5x. The 1-minute load average is printed before each row
# (another process on the machine inflates the wall time, less so the CPU time).
# Prints a markdown table. Usage: scripts/bench-fleet.sh [K ...] (50 500 5000)
set -euo pipefail
cd "$(dirname "$0")/.."
ks=("$@")
[ ${#ks[@]} -gt 0 ] || ks=(50 500 5000)
cargo build --release --locked -q
bin=$PWD/target/release/plbbench
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# work FILE: queries sent (completed or failed) plus sessions started, from a summary.json.
work() { python3 scripts/lib/sim-work.py "$1"; }

echo "| K | T | load avg before | wall s | user CPU s | peak RSS MiB | queries + sessions | CPU us per query or session |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for k in "${ks[@]}"; do
    t=$((200 * k))
    load=$(cut -d' ' -f1 /proc/loadavg)
    rm -rf "$out/run"
    /usr/bin/time -f '%e %U %M' -o "$out/time" "$bin" run --cluster sim --workload analytics --quiet --checks warn \
        --replicas "$k" --T "$t" --out "$out/run" >/dev/null 2>"$out/stderr" || { cat "$out/stderr" >&2; exit 1; }
    read -r wall user rss <"$out/time"
    n=$(work "$out/run/summary.json")
    echo "| $k | $t | $load | $wall | $user | $((rss / 1024)) | $n | $(echo "scale=3; $user * 1000000 / $n" | bc -l) |"
done
