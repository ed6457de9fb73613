#!/usr/bin/env bash
# The valid envelope of each built-in workload (docs/manual.md, "The valid
# envelope"): on the simulator, for each workload and population T (or,
# with AXIS=cpus, each CPU budget C at T=1000), one run under the
# workload's own fault schedule and one under `cascade` (held-sessions'
# 120 s run is too short for it), 25:75, PLB; prints a Markdown table whose
# cells are `pass` or the checks that failed, and the command that
# reproduces a cell. The simulator is deterministic: the table is the same
# on every machine. Usage: [AXIS=T|cpus] scripts/envelope.sh [BIN] [VALUE...]
#   BIN defaults to target/release/plbbench; the values to
#   100 250 500 1000 1500 2000 3000 5000 (T) or 0.05 0.1 0.2 0.3 0.5 1 (cpus).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-target/release/plbbench}")
shift || true
AXIS=${AXIS:-T}
VALUES=("$@")
if [[ ${#VALUES[@]} -eq 0 ]]; then
    case "$AXIS" in
        T) VALUES=(100 250 500 1000 1500 2000 3000 5000) ;;
        cpus) VALUES=(0.05 0.1 0.2 0.3 0.5 1) ;;
        *) echo "envelope: AXIS must be T or cpus, not $AXIS" >&2; exit 2 ;;
    esac
fi
WORK=$(mktemp -d /tmp/plbbench-envelope.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
WORKLOADS=(paper paper-closed analytics closed-population held-sessions)

# One cell: `pass`, the failed checks, or why the run could not start.
cell() {
    local out="$WORK/run" err
    rm -rf "$out"
    if ! err=$("$BIN" run --cluster sim --strategy plb --mix 25:75 --progress none --checks warn \
        --out "$out" "$@" 2>&1 >/dev/null); then
        echo "(not run: ${err##*: })"
        return
    fi
    python3 - "$out/summary.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
failed = [v["name"] for v in s["verdicts"] if not v["ok"]]
print(", ".join(failed) if failed else "pass")
PY
}

header="| $AXIS |"
rule="| --- |"
for w in "${WORKLOADS[@]}"; do
    header+=" $w |"
    rule+=" --- |"
    [[ $w == held-sessions ]] || { header+=" $w, cascade |"; rule+=" --- |"; }
done
echo "$header"
echo "$rule"
for v in "${VALUES[@]}"; do
    row="| $v |"
    for w in "${WORKLOADS[@]}"; do
        row+=" $(cell --workload "$w" "--$AXIS" "$v") |"
        [[ $w == held-sessions ]] || row+=" $(cell --workload "$w" "--$AXIS" "$v" --faults cascade) |"
    done
    echo "$row"
done
echo
echo "cell: plbbench run --cluster sim --strategy plb --mix 25:75 --workload W --$AXIS VALUE [--faults cascade]"
