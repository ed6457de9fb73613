#!/usr/bin/env bash
# Replaces ci/baseline/{sim,real} with the experiment summaries of a night's
# folder (reports/nightly/<utc>), keeping only what `compare` reads
# (experiment.json, experiment.csv, figures.json): the per-run folders are
# reports, not baselines. Review the diff and commit it with the reason.
set -euo pipefail
cd "$(dirname "$0")/.."
night=${1:?usage: ci/refresh-baseline.sh reports/nightly/<utc>}
for part in sim real; do
    [[ -f $night/$part/experiment.json ]] || { echo "refresh-baseline: $night/$part has no experiment.json; skipped" >&2; continue; }
    rm -rf "ci/baseline/$part"
    mkdir -p "ci/baseline/$part"
    cp "$night/$part"/{experiment.json,experiment.csv,figures.json} "ci/baseline/$part/"
    echo "refresh-baseline: ci/baseline/$part <- $night/$part"
done
