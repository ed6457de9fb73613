# Sourced by the real-cluster measurement scripts (real-paper-grid.sh,
# real-features.sh): every real-cluster figure is recorded with the load
# average beside it. `loadavg_sampler FILE` appends the 1-, 5- and
# 15-minute load averages to FILE (a CSV, its header written once) every
# 30 s in the background until the calling script exits.
loadavg_sampler() {
    local file=$1
    [[ -f $file ]] || echo "utc,load1,load5,load15" >"$file"
    (
        # The sleep is waited on, so the kill below ends it with the loop.
        trap 'kill $nap 2>/dev/null; exit 0' TERM
        while true; do
            read -r l1 l5 l15 _ </proc/loadavg
            echo "$(date -u +%Y-%m-%dT%H:%M:%SZ),$l1,$l5,$l15" >>"$file"
            sleep 30 &
            nap=$!
            wait $nap
        done
    ) &
    LOADAVG_SAMPLER=$!
    trap 'kill $LOADAVG_SAMPLER 2>/dev/null || true' EXIT
}
