#!/usr/bin/env python3
"""Tabulates what routing on stale counts did in a `plbbench map` over the
simulated tier (docs/scale.md, "Routing on stale counts, measured"): for
every cell (routers, refresh_ms) and mix, over PLB's runs of each fault,
the medians of the runs' `tier` books (summary.json) as shares of the
followers' placements, and PLB's findings beside them from map.csv.
Usage: python3 scripts/tier-books.py MAPDIR [--markdown]"""
import csv, glob, json, os, statistics, sys


def books(cell_dir):
    """(fault, mix) -> list of tier books of PLB's runs in a cell."""
    out = {}
    for path in glob.glob(os.path.join(cell_dir, "runs", "*", "summary.json")):
        s = json.load(open(path))
        st = s["settings"]
        if not st["strategy"].startswith("plb"):
            continue
        t = s.get("tier") or {"routers": 1, "follower_admissions": 0}
        out.setdefault((st["faults"], st["mix"]), []).append(t)
    return out


def share(t, key):
    n = t.get("follower_admissions", 0)
    return 100.0 * t.get(key, 0) / n if n else 0.0


def main(args):
    root = args[0]
    markdown = "--markdown" in args
    m = {}
    with open(os.path.join(root, "map.csv")) as f:
        for row in csv.DictReader(f):
            m[(row.get("routers", "1"), row.get("refresh_ms", "1000"), row["mix"])] = row
    cols = ["routers", "refresh_ms", "fault", "mix", "followers %", "forwarded %", "differed %", "past theta %",
            "overshoot max", "to failed", "stale role", "RQ1 pp", "RQ2 ratio", "runs failing"]
    rows = []
    for cell in sorted(glob.glob(os.path.join(root, "cells", "*"))):
        # a cell's folder is named KEY-VALUE joined by "_" (refresh_ms holds one itself)
        name = os.path.basename(cell)
        routers = name.split("routers-")[1].split("_")[0] if "routers-" in name else "1"
        refresh = name.split("refresh_ms-")[1].split("_")[0] if "refresh_ms-" in name else "1000"
        for (fault, mix), ts in sorted(books(cell).items()):
            med = lambda f: statistics.median(f(t) for t in ts)
            total = lambda t: t.get("follower_admissions", 0) + t.get("leader_admissions", 0)
            followers = med(lambda t: 100.0 * t.get("follower_admissions", 0) / max(1, total(t)))
            forwarded = med(lambda t: 100.0 * t.get("forwarded", 0) / max(1, total(t)))
            mc = m.get((routers, refresh, mix), {})
            rows.append([routers, refresh, fault, mix, f"{followers:.1f}", f"{forwarded:.1f}",
                         f"{med(lambda t: share(t, 'differed')):.1f}", f"{med(lambda t: share(t, 'over_theta')):.1f}",
                         f"{med(lambda t: t.get('overshoot_max', 0)):.0f}", f"{med(lambda t: t.get('to_failed', 0)):.0f}",
                         f"{med(lambda t: t.get('stale_role', 0)):.0f}", mc.get("rq1_gain_pp", ""),
                         mc.get("rq2_goodput_ratio", ""), mc.get("runs_failing", "")])
    rows.sort(key=lambda r: (r[2], r[3], int(r[0]), int(r[1])))
    if markdown:
        print("| " + " | ".join(cols) + " |")
        print("|" + " --- |" * len(cols))
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        w = csv.writer(sys.stdout)
        w.writerow(cols)
        w.writerows(rows)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
