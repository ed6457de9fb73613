#!/usr/bin/env python3
"""Checks the relative links of the repository's markdown files: every link
target exists and every #anchor names a heading of the target (GitHub's slug
rules). Usage: python3 scripts/check-doc-links.py [FILE.md ...]; by default
the tracked *.md files. Prints one line per broken link; exit 1 if any."""
import os, re, subprocess, sys

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")

def strip_code(text):
    """The text with fenced blocks and inline code blanked (line numbers kept)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return out

def slugs(path):
    """GitHub anchors of a markdown file's headings, duplicates suffixed -1, -2."""
    seen, result, fenced = {}, set(), False
    for line in open(path, encoding="utf-8").read().split("\n"):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1))  # link text only
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        result.add(slug if n == 0 else f"{slug}-{n}")
    return result

def main(files):
    if not files:
        files = subprocess.run(["git", "ls-files", "*.md"], capture_output=True, text=True, check=True).stdout.split()
    bad = 0
    for f in files:
        for lineno, line in enumerate(strip_code(open(f, encoding="utf-8").read()), 1):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                path, _, anchor = target.partition("#")
                dest = os.path.normpath(os.path.join(os.path.dirname(f), path)) if path else f
                if not os.path.exists(dest):
                    print(f"{f}:{lineno}: {target}: no such file {dest}")
                    bad += 1
                elif anchor and (not dest.endswith(".md") or anchor not in slugs(dest)):
                    print(f"{f}:{lineno}: {target}: no heading #{anchor} in {dest}")
                    bad += 1
    print(f"{len(files)} files, {bad} broken links", file=sys.stderr)
    return 1 if bad else 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
