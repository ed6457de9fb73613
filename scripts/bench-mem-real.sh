#!/usr/bin/env bash
# Memory of real runs with every session held open (docs/performance.md):
# `plbbench run --cluster local --workload workloads/held-sessions.toml`
# (each client holds one connection for the whole 120 s run, 4 s thinks,
# about 38% of the cluster's CPU; the run sizes max_connections for T) at
# T=250 and T=1000, --checks warn (a session longer than the run fails
# `phase length` by design). Reports plbbench's own peak RSS (VmHWM, which
# every real run writes to summary.json `generator.rss_peak_mib`) and its
# most open sessions, and the PostgreSQL servers' memory sampled every 2 s
# during the run (the largest total over all `postgres` processes of RSS,
# which counts shared buffers once per process, and of PSS, which shares
# them out), per open session and as the marginal cost between the two
# runs; plus the generator's verdict. Target: <= 64 KiB of plbbench RSS per
# open session. Starts real servers: needs a quiet machine and no other
# PostgreSQL running (waits while /tmp/plbbench-quiet.lock exists).
# With FIGURES=FILE, appends the KiB of plbbench RSS per open session at T
# (whole process) to FILE as a CSV row (ci/perf.sh's format; its repeat
# number is FIGURES_REPEAT, default 1).
# Usage: scripts/bench-mem-real.sh [T_SMALL (250)] [T (1000)]
set -euo pipefail
cd "$(dirname "$0")/.."
small=${1:-250}
big=${2:-1000}
cargo build --release --locked -q
bin=$PWD/target/release/plbbench
out=$(mktemp -d)
chmod 755 "$out"  # the servers run as an unprivileged user that must reach the state directory
trap 'rm -rf "$out"' EXIT
for _ in $(seq 40); do [[ -e /tmp/plbbench-quiet.lock ]] || break; echo "bench-mem-real: waiting for a quiet machine" >&2; sleep 30; done

# A private state directory: never a cluster left by `plbbench cluster up`,
# nor the shared default run directory of other runs on this machine.
export PLBBENCH_STATE_DIR=$out/state
field() { grep -o "\"$1\": *[0-9.]*" "$2" | head -n 1 | sed 's/.*: *//'; }
# pg_mem: "RSS_KiB PSS_KiB PROCESSES" summed over every postgres process now.
pg_mem() {
    local rss=0 pss=0 n=0 pid r p
    for pid in $(pgrep -x postgres); do
        read -r r p < <(awk '/^Rss:/ {r=$2} /^Pss:/ {p=$2} END {print r+0, p+0}' "/proc/$pid/smaps_rollup" 2>/dev/null) || continue
        rss=$((rss + r)); pss=$((pss + p)); n=$((n + 1))
    done
    echo "$rss $pss $n"
}
pgrep -x postgres >/dev/null && { echo "bench-mem-real: another PostgreSQL is running; stop it first" >&2; exit 1; }
declare -A rss sessions pgrss pgpss procs verdict
for t in "$small" "$big"; do
    "$bin" run --cluster local --workload workloads/held-sessions.toml --T "$t" --quiet --checks warn --out "$out/out-t$t" >/dev/null 2>"$out/stderr" &
    run=$!
    best="0 0 0"
    while kill -0 "$run" 2>/dev/null; do
        now=$(pg_mem)
        (( ${now%% *} > ${best%% *} )) && best=$now
        sleep 2
    done
    wait "$run" || { cat "$out/stderr" >&2; exit 1; }
    read -r pgrss[$t] pgpss[$t] procs[$t] <<<"$best"
    rss[$t]=$(field rss_peak_mib "$out/out-t$t/summary.json")
    sessions[$t]=$(field sessions_peak "$out/out-t$t/summary.json")
    verdict[$t]=$(python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("; ".join(("ok " if v["ok"] else "FAILED ")+v["name"] for v in s["verdicts"]))' "$out/out-t$t/summary.json")
done
echo "load average before the second run: $(cut -d ' ' -f 1-3 /proc/loadavg)"
echo
echo "| T | peak open sessions | plbbench peak RSS MiB | plbbench KiB per open session | PostgreSQL processes | PostgreSQL RSS MiB | PostgreSQL PSS MiB | PostgreSQL PSS KiB per session |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
for t in "$small" "$big"; do
    printf '| %s | %s | %.1f | %.0f | %s | %.0f | %.0f | %.0f |\n' "$t" "${sessions[$t]}" "${rss[$t]}" \
        "$(echo "${rss[$t]} * 1024 / ${sessions[$t]}" | bc -l)" "${procs[$t]}" \
        "$(echo "${pgrss[$t]} / 1024" | bc -l)" "$(echo "${pgpss[$t]} / 1024" | bc -l)" \
        "$(echo "${pgpss[$t]} / ${sessions[$t]}" | bc -l)"
done
ds=$(( ${sessions[$big]} - ${sessions[$small]} ))
if (( ds > 0 )); then
    printf 'marginal per extra open session (T=%s -> %s): plbbench %.1f KiB (target <= 64), PostgreSQL PSS %.0f KiB, RSS %.0f KiB\n' \
        "$small" "$big" "$(echo "(${rss[$big]} - ${rss[$small]}) * 1024 / $ds" | bc -l)" \
        "$(echo "(${pgpss[$big]} - ${pgpss[$small]}) / $ds" | bc -l)" "$(echo "(${pgrss[$big]} - ${pgrss[$small]}) / $ds" | bc -l)"
fi
for t in "$small" "$big"; do echo "checks at T=$t: ${verdict[$t]}"; done
if [[ -n ${FIGURES:-} ]]; then
    printf 'memory.kib_per_session.t%s,KiB,lower,%s,%.2f,"bash scripts/bench-mem-real.sh %s %s"\n' "$big" "${FIGURES_REPEAT:-1}" \
        "$(echo "${rss[$big]} * 1024 / ${sessions[$big]}" | bc -l)" "$small" "$big" >>"$FIGURES"
fi
