#!/usr/bin/env python3
"""Packs reports/examples/ so the repository stays small (docs/manual.md,
"What reports/examples/ keeps") without losing a measured number:

- a run's replicas.csv and timeseries.csv, which no reader of plbbench
  opens (compare, archive, agreement and experiment resume read
  summary.json, phases.csv and experiment.json), become .csv.gz;
- a report.html that no markdown file links becomes report.html.gz
  (`gunzip -k` it to view), except a run's page inside an experiment
  (runs/NAME/report.html), which is dropped: the experiment's own
  report.html draws every run, and the run's numbers all stay in its
  summary.json, phases.csv, events.csv and the two .csv.gz series;
- a figure (figures/*.svg) that no page links becomes .svg.gz: an
  experiment's report.html holds its figures inline, so the files beside
  it are copies for papers (a map's map.html links its figures: those stay);
- a JSON file over 32 KB written pretty-printed is rewritten compact
  (the same values; every reader parses it the same).

Every change but the dropped run pages is lossless: `gunzip` gives back
the byte-identical file and the JSON parses to the same value. Folders given as arguments are packed
(default: every folder under reports/examples/). An experiment that is
still running must be left out; one interrupted between runs may be
packed, since resuming it reads only its runs' summary.json.
Usage: python3 scripts/pack-examples.py [--dry-run] [FOLDER ...]"""
import gzip, json, os, re, subprocess, sys

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
LINK = re.compile(r"\]\(([^)\s#]+)")
GZIP = {"replicas.csv", "timeseries.csv"}


def linked():
    """Absolute paths that some tracked markdown file links to."""
    files = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    out = set()
    for f in files:
        base = os.path.dirname(os.path.join(ROOT, f))
        for target in LINK.findall(open(os.path.join(ROOT, f), encoding="utf-8").read()):
            if not re.match(r"[a-z][a-z0-9+.-]*:", target):
                out.add(os.path.normpath(os.path.join(base, target)))
    return out


def shown(svg):
    """Whether a page beside the figures folder links this figure."""
    folder = os.path.dirname(os.path.dirname(svg))
    ref = "figures/" + os.path.basename(svg)
    pages = [os.path.join(folder, n) for n in os.listdir(folder) if n.endswith(".html")]
    return any(ref in open(p, encoding="utf-8").read() for p in pages)


def gz(path, dry):
    data = open(path, "rb").read()
    packed = gzip.compress(data, compresslevel=9, mtime=0)
    if not dry:
        with open(path + ".gz", "wb") as f:
            f.write(packed)
        os.remove(path)
    return len(data) - len(packed)


def run_page(path):
    """Whether path is a run's page inside an experiment (runs/NAME/report.html[.gz])."""
    parts = path.split(os.sep)
    return parts[-1] in ("report.html", "report.html.gz") and len(parts) >= 3 and parts[-3] == "runs"


def drop(path, dry):
    size = os.path.getsize(path)
    if not dry:
        os.remove(path)
    return size


def compact(path, dry):
    text = open(path, encoding="utf-8").read()
    if "\n  " not in text:
        return 0
    value = json.loads(text)
    out = json.dumps(value, separators=(",", ":"), ensure_ascii=False) + "\n"
    assert json.loads(out) == value
    if not dry:
        with open(path, "w", encoding="utf-8") as f:
            f.write(out)
    return len(text.encode()) - len(out.encode())


def main(args):
    dry = "--dry-run" in args
    folders = [a for a in args if a != "--dry-run"] or [
        os.path.join(ROOT, "reports/examples", d) for d in sorted(os.listdir(os.path.join(ROOT, "reports/examples")))
    ]
    keep = linked()
    saved = 0
    for folder in folders:
        for dirpath, _, names in os.walk(folder):
            for n in names:
                p = os.path.abspath(os.path.join(dirpath, n))
                if run_page(p) and p not in keep:
                    saved += drop(p, dry)
                elif n in GZIP or (n == "report.html" and p not in keep) or (n.endswith(".svg") and not shown(p)):
                    saved += gz(p, dry)
                elif n.endswith(".json") and os.path.getsize(p) > 4 * 1024:
                    saved += compact(p, dry)
    print(f"{'would save' if dry else 'saved'} {saved / 1e6:.1f} MB", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
