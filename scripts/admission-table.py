#!/usr/bin/env python3
"""Admission modes against none, per cell and phase, from `plbbench
experiment ... --admissions none,modes` folders (issue 64's bars).

For each experiment folder given, every (fault, mix, strategy, phase) cell
is paired with its `+modes` twin; the bars are judged on the ratio of
the medians across the repeats. Beside it, the median and interquartile
range of the per-repeat ratios (repeat k of both twins runs the same
seed, so the same client schedule, at neighbouring times: pairing
cancels the drift of a noisy machine between repeats). Prints a markdown
table and a last line that counts the cells that miss a bar:
- Premium goodput with modes >= 0.97x without in every phase (>= 1.0x in
  down2); baseline p95 <= 1.5x;
- every run with modes passed the checks its twin without modes passed
  (the progress check among them: Freemium served in every phase);
- no run ended in Survival (events.csv) while it had a fault to answer to
  no longer (the last mode's entry before the last rejoin is fine).

Usage: scripts/admission-table.py DIR [DIR ...]
"""
import csv
import json
import pathlib
import sys

BARS = {"goodput": 0.97, "goodput_down2": 1.0, "baseline_p95": 1.5}


def quantile(xs, q):
    """Type 7 (linear between order statistics), as plbbench's own."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    h = (len(xs) - 1) * q
    lo = int(h)
    return xs[lo] + (h - lo) * (xs[min(lo + 1, len(xs) - 1)] - xs[lo])


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[(n - 1) // 2] + xs[n // 2]) / 2 if n else float("nan")


def cells(folder):
    """Medians across repeats per (fault, mix, strategy, phase, class) and
    admission, from each run's phases.csv (experiment.csv leaves out the
    runs that failed a check, which at T=3000 is every run without
    modes: their failed checks are printed beside the table instead)."""
    values = {}
    for run in sorted((folder / "runs").iterdir()):
        cell = run.name.rsplit("-r", 1)[0]
        fault, rest = ("premium-fault", cell[len("premium-fault-"):]) if cell.startswith("premium-fault-") else cell.split("-", 1)
        p, f, strategy = rest.split("-", 2)
        strategy, _, adm = strategy.partition("+")
        with open(run / "phases.csv") as fh:
            for r in csv.DictReader(fh):
                key = (fault, f"{p}:{f}", strategy, r["phase"], r["class"])
                d = values.setdefault(key, {}).setdefault(adm or "none", {"goodput_qps": {}, "p95_ms": {}})
                d["goodput_qps"][run.name.rsplit("-r", 1)[1]] = float(r["goodput_qps"])
                d["p95_ms"][run.name.rsplit("-r", 1)[1]] = float(r["p95_ms"] or "nan")
    out = {}
    for k, adm in values.items():
        out[k] = {a: {f"{m}_median": median(list(v.values())) for m, v in d.items()} for a, d in adm.items()}
        if "none" in adm and "modes" in adm:
            n, m = adm["none"]["goodput_qps"], adm["modes"]["goodput_qps"]
            out[k]["paired"] = [m[r] / n[r] for r in sorted(n) if r in m and n[r] > 0]
    return out


def failed(run):
    s = json.loads((run / "summary.json").read_text())
    return {v["name"] for v in s["verdicts"] if not v.get("ok", True)}


def runs_ok(folder):
    """The checks a `+modes` run fails that its twin without modes passes
    (a regime that fails a check without modes, as T=3000 fails `login
    wait`, is no fault of the modes), and the twins' own failures."""
    bad, regime = [], set()
    for run in sorted((folder / "runs").glob("*+modes*")):
        twin = run.with_name(run.name.replace("+modes", ""))
        before = failed(twin) if twin.exists() else set()
        regime |= before
        extra = failed(run) - before
        if extra:
            bad.append(f"{run.name}: {','.join(sorted(extra))}")
    return bad, regime


def main(dirs):
    misses = 0
    print(
        "| T | fault | mix | strategy | phase | P goodput none | modes | x | paired x (IQR) "
        "| P p95 none ms | modes ms | F goodput x |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for d in map(pathlib.Path, dirs):
        t = json.loads((d / "experiment.json").read_text()).get("settings", {}).get("clients", "?")
        rows = cells(d)
        for (fault, mix, strategy, phase, cls), pair in sorted(rows.items()):
            if cls != "P" or "paired" not in pair or phase == "warmup":
                continue
            n, m = pair["none"], pair["modes"]
            gx = float(m["goodput_qps_median"]) / float(n["goodput_qps_median"])
            f = rows[(fault, mix, strategy, phase, "F")]
            fx = float(f["modes"]["goodput_qps_median"]) / float(f["none"]["goodput_qps_median"])
            bar = BARS["goodput_down2"] if phase == "down2" else BARS["goodput"]
            miss = gx < bar
            if phase == "baseline" and float(m["p95_ms_median"]) > BARS["baseline_p95"] * float(n["p95_ms_median"]):
                miss = True
            misses += miss
            mark = " **miss**" if miss else ""
            pr = pair.get("paired", [])
            paired = f"{median(pr):.2f} ({quantile(pr, 0.25):.2f}-{quantile(pr, 0.75):.2f})" if pr else ""
            print(
                f"| {t} | {fault} | {mix} | {strategy} | {phase} | {float(n['goodput_qps_median']):.1f} | "
                f"{float(m['goodput_qps_median']):.1f} | {gx:.2f}{mark} | {paired} | {float(n['p95_ms_median']):.1f} | "
                f"{float(m['p95_ms_median']):.1f} | {fx:.2f} |"
            )
        bad, regime = runs_ok(d)
        misses += len(bad)
        for b in bad:
            print(f"failed checks: {b}")
        if regime:
            print(f"runs without modes failed, in {d.name}: {', '.join(sorted(regime))} (the regime's, not the modes')")
    print(f"cells missing a bar: {misses}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
