#!/usr/bin/env bash
# What the per-layer diagnostics cost a run (train.diagnostics_every; docs/run-directory.md): the
# training run of configs/bench-step.json (4 layers, d_model 64, 32 sequences of lengths 1-64) with
# diagnostics every 25 steps against none, processes alternating in rounds. Per process: the run's
# wall time (summary.json), its steps' time (the sum over step records of tokens / tokens_per_s,
# which is where the diagnostics are computed) and its CPU time (user + system, /usr/bin/time: on a
# machine other processes share, the steadier of the three). Prints each process, then the medians
# and the cost in percent. Timings need the shared lock:
#   flock /work/bench.lock bench/diagnostics_cost.sh [path/to/normlab]
#   ROUNDS=N (default 3)  STEPS=N (default 250)  EVERY=N (default 25)  THREADS=N (default 1)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-build/normlab}
rounds=${ROUNDS:-3}
steps=${STEPS:-250}
every=${EVERY:-25}
threads=${THREADS:-1}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for round in $(seq "$rounds"); do
  for diagnostics in 0 "$every"; do
    out="$tmp/r$round-d$diagnostics"
    /usr/bin/time -f "%U %S" -o "$tmp/cpu-r$round-d$diagnostics" "$bin" train --config configs/bench-step.json --out "$out" --threads "$threads" --set train.steps="$steps" \
      --set train.diagnostics_every="$diagnostics" --set train.eval_every=0 --set train.checkpoint_every=0 \
      --set train.log_every="$steps" >/dev/null 2>&1
  done
done
/usr/bin/python3 - "$tmp" "$every" <<'PY'
import json, os, statistics, sys
tmp, every = sys.argv[1], sys.argv[2]
groups = {"0": ([], [], []), every: ([], [], [])}
for run in sorted(os.listdir(tmp)):
    if run.startswith("cpu-"):
        continue
    diagnostics = run.split("-d")[1]
    cpu = sum(map(float, open(os.path.join(tmp, "cpu-" + run)).read().split()))
    wall = json.load(open(os.path.join(tmp, run, "summary.json")))["wall_time_s"]
    step_s = 0.0
    for line in open(os.path.join(tmp, run, "metrics.jsonl")):
        record = json.loads(line)
        if "split" not in record and record.get("tokens_per_s"):
            step_s += record["tokens"] / record["tokens_per_s"]
    groups[diagnostics][0].append(wall)
    groups[diagnostics][1].append(step_s)
    groups[diagnostics][2].append(cpu)
    print(f"{run}: wall {wall:.3f} s, steps {step_s:.3f} s, cpu {cpu:.2f} s")
for i, what in enumerate(("wall", "steps", "cpu")):
    a, b = statistics.median(groups["0"][i]), statistics.median(groups[every][i])
    print(f"median {what}: none {a:.3f} s, every {every} {b:.3f} s: cost {100 * (b / a - 1):+.2f}%")
PY
