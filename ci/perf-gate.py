#!/usr/bin/env python3
"""The nightly performance gate's judge (ci/perf.sh; docs/performance.md,
"The nightly performance gate"). Reads two figure files in ci/perf.sh's CSV
format (figure,unit,better,repeat,value,command: one row per repeat), the
baseline (ci/baseline/perf/perf.csv) and tonight's, and compares each
figure's median with the baseline's.

The noise band of a figure is measured from the baseline's own repeats: the
spread (max - min) / median of its values, never below FLOOR (5%). A figure
whose better direction is `lower` (a cost) regresses when tonight's median
is above baseline x (1 + band); a `higher` one (a throughput ratio) when it
is below baseline x (1 - band). Each regression is printed on one line with
both medians, the band and the command that measures the figure. A figure of
the baseline that tonight did not measure is a failure too (a benchmark that
broke must not pass as "no regression").

--markdown FILE writes the table (figure, baseline, tonight, band, verdict,
target); --docs FILE replaces the text between the markers
`<!-- perf-gate:begin -->` and `<!-- perf-gate:end -->` in FILE with it, so
docs/performance.md's headline table comes from the same run.
Exit 0 when every figure holds, 1 on a regression or a missing figure, 2 on
bad input (one line naming the file and the field).
Usage: python3 ci/perf-gate.py BASELINE.csv TONIGHT.csv [--markdown FILE] [--docs FILE]"""
import csv, statistics, sys

FLOOR = 0.05
FIELDS = ["figure", "unit", "better", "repeat", "value", "command"]
# Issue 50's targets, reported beside the gate (the gate itself is the baseline).
TARGETS = {
    "generator.cpu_ratio": ("<=", 0.8),
    "generator.qps_ratio": (">=", 1.0),
    "proxy.cpu_ratio": ("<=", 1.0),
    "proxy.tps_ratio": (">=", 1.0),
}
BEGIN, END = "<!-- perf-gate:begin -->", "<!-- perf-gate:end -->"


class BadInput(Exception):
    pass


def load(path):
    """{figure: {"unit", "better", "command", "values": [...]}} from a figure file."""
    try:
        rows = list(csv.DictReader(open(path, newline="", encoding="utf-8")))
    except OSError as e:
        raise BadInput(f"{path}: cannot read ({e.strerror})")
    out = {}
    for i, r in enumerate(rows, 2):
        for f in FIELDS:
            if r.get(f) in (None, ""):
                raise BadInput(f"{path}:{i}: field `{f}` is missing")
        if r["better"] not in ("lower", "higher"):
            raise BadInput(f"{path}:{i}: field `better` must be lower or higher, not {r['better']!r}")
        try:
            v = float(r["value"])
        except ValueError:
            raise BadInput(f"{path}:{i}: field `value` is not a number: {r['value']!r}")
        fig = out.setdefault(r["figure"], {"unit": r["unit"], "better": r["better"], "command": r["command"], "values": []})
        fig["values"].append(v)
    if not out:
        raise BadInput(f"{path}: no figures")
    return out


def band(values):
    m = statistics.median(values)
    spread = (max(values) - min(values)) / abs(m) if m else 0.0
    return max(FLOOR, spread)


def target(name, median):
    for prefix, (op, t) in TARGETS.items():
        if name.startswith(prefix + "."):
            met = median <= t if op == "<=" else median >= t
            return f"{op} {t:g}: {'met' if met else 'NOT met'}"
    return ""


def judge(base, new):
    """Rows (figure, baseline text, tonight text, band, verdict, target, failed, command)."""
    rows = []
    for name in sorted(set(base) | set(new)):
        b, n = base.get(name), new.get(name)
        if n is None:
            rows.append((name, summary(b), "not measured", "", "MISSING", "", True, b["command"]))
            continue
        if b is None:
            mn = statistics.median(n["values"])
            rows.append((name, "no baseline", summary(n), "", "new", target(name, mn), False, n["command"]))
            continue
        mb, mn, w = statistics.median(b["values"]), statistics.median(n["values"]), band(b["values"])
        worse = mn > mb * (1 + w) if b["better"] == "lower" else mn < mb * (1 - w)
        verdict = "REGRESSION" if worse else "holds"
        rows.append((name, summary(b), summary(n), f"±{100 * w:.0f}%", verdict, target(name, mn), worse, n["command"]))
    return rows


def summary(fig):
    v = fig["values"]
    return f"{statistics.median(v):.4g} [{min(v):.4g}-{max(v):.4g}] n={len(v)} {fig['unit']}"


def markdown(rows):
    out = ["| figure | baseline median [range] | tonight median [range] | noise band | verdict | target |",
           "| --- | --- | --- | --- | --- | --- |"]
    out += [f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]} |" for r in rows]
    return "\n".join(out) + "\n"


def write_docs(path, table):
    text = open(path, encoding="utf-8").read()
    if BEGIN not in text or END not in text:
        raise BadInput(f"{path}: the markers {BEGIN} and {END} are missing")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    with open(path, "w", encoding="utf-8") as f:
        f.write(head + BEGIN + "\n" + table + END + tail)


def main(argv):
    args, opts = [], {}
    it = iter(argv)
    for a in it:
        if a in ("--markdown", "--docs"):
            opts[a] = next(it, None)
            if opts[a] is None:
                raise BadInput(f"{a}: needs a file")
        else:
            args.append(a)
    if len(args) != 2:
        raise BadInput("usage: perf-gate.py BASELINE.csv TONIGHT.csv [--markdown FILE] [--docs FILE]")
    rows = judge(load(args[0]), load(args[1]))
    table = markdown(rows)
    print(table, end="")
    if "--markdown" in opts:
        open(opts["--markdown"], "w", encoding="utf-8").write(table)
    if "--docs" in opts:
        write_docs(opts["--docs"], table)
    failed = [r for r in rows if r[6]]
    for r in failed:
        what = "was not measured" if r[4] == "MISSING" else f"regressed: {r[2]} against baseline {r[1]} (noise band {r[3]})"
        print(f"perf-gate: {r[4]}: {r[0]} {what}; measure it with: {r[7]}", file=sys.stderr)
    print(f"perf-gate: {len(rows) - len(failed)} of {len(rows)} figures hold", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except BadInput as e:
        print(f"perf-gate: error: {e}", file=sys.stderr)
        sys.exit(2)
