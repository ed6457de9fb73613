"""The work a simulated run did, from its summary.json: queries sent
(completed or failed) plus sessions started. The simulator benchmarks
(scripts/bench-sim.sh, scripts/bench-fleet.sh, ci/perf.sh) divide CPU time
by it. Usage: python3 scripts/lib/sim-work.py RUN/summary.json"""
import json
import sys

d = json.load(open(sys.argv[1]))
print(sum(p["completed"] + p["errors"] for p in d["phases"]) + sum(a["sessions_started"] for a in d["accounting"]))
