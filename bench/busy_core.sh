#!/usr/bin/env bash
# The training step of configs/bench-step.json at 1 and 2 threads, on an idle machine and with one
# core kept busy by another process (a shell loop, as a user's other job would), for normlab and,
# with TORCH=1, for PyTorch's step (bench/bench_step_torch.py --norm-first, the same model) beside
# it. Every sample is one process; 1- and 2-thread processes alternate (1 first in odd rounds, 2
# first in even ones), and so do the binaries given (a build before and after a change), so a phase
# of the machine falls on all of them. Prints one line per process, then the median of each (side,
# load, threads) group. A normlab process's line also says what ran its timed steps, where the
# binary prints it (bench step --json's "pool" and "cpu"): the pool's rests and regions run alone,
# the parts the workers ran, this process's CPU time over the wall time (near 2 at 2 threads when
# the worker ran throughout: it spins between regions), and the CPU time the hypervisor (steal) and
# other processes took meanwhile, in ms. Timings need the shared lock:
#   flock /tmp/normlab-bench.lock bench/busy_core.sh [path/to/normlab ...]
#   ROUNDS=N (default 5)  REPEATS=R timed steps per process (30)  LOADS="idle busy"  TORCH=1
# PyTorch runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (this machine sets them for old
# OpenBLAS builds; they slow a current one).
set -euo pipefail
cd "$(dirname "$0")/.."
bins=("$@")
((${#bins[@]})) || bins=(build/normlab)
rounds=${ROUNDS:-5}
repeats=${REPEATS:-30}
loads=${LOADS:-idle busy}
torch=${TORCH:-0}

spinner=""
start_load() {
  sh -c 'while :; do :; done' &
  spinner=$!
}
stop_load() {
  if [[ -n $spinner ]]; then
    kill "$spinner" 2>/dev/null || true
    wait "$spinner" 2>/dev/null || true
    spinner=""
  fi
}
trap stop_load EXIT

normlab_ms() {  # binary threads: "step_ms" and, where printed, "rests=R alone=A workers=W cpu/wall=C steal=S others=O"
  "$1" bench step --config configs/bench-step.json --threads "$2" --repeats "$repeats" --json |
    /usr/bin/python3 -c '
import json, sys
r = json.load(sys.stdin)
line = "%.2f" % r["step_ms"]
if "pool" in r:
    p, c = r["pool"], r["cpu"]
    line += "   rests=%d alone=%d workers=%d cpu/wall=%.2f steal=%.0f others=%.0f" % (
        p["rests"], p["alone_regions"], p["by_workers"], c["process_ms"] / c["wall_ms"], c["steal_ms"], c["others_ms"])
print(line)'
}
torch_ms() {
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 bench/bench_step_torch.py --norm-first \
    --threads "$1" --steps "$repeats" --json |
    /usr/bin/python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)["torch"][0]["step_ms"])'
}

raw=$(mktemp)
trap 'stop_load; rm -f "$raw"' EXIT
echo "side load threads step_ms (one process each; $("${bins[0]}" --version | tr '\n' ' '))"
for load in $loads; do
  [[ $load == busy ]] && start_load
  for round in $(seq "$rounds"); do
    order="1 2"
    ((round % 2 == 0)) && order="2 1"
    for threads in $order; do
      for bin in "${bins[@]}"; do
        echo "$bin $load $threads $(normlab_ms "$bin" "$threads")" | tee -a "$raw"
      done
      [[ $torch == 1 ]] && echo "torch $load $threads $(torch_ms "$threads")" | tee -a "$raw"
    done
  done
  stop_load
done
echo "medians of the processes (ms):"
awk '{ print $1, $2, $3, $4 }' "$raw" | sort -k1,1 -k2,2 -k3,3n -k4,4g | awk '
  { key = $1 " " $2 " " $3 " thread(s)"; vals[key] = vals[key] " " $4; cnt[key]++; all[key, cnt[key]] = $4
    if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
  END {
    for (i = 1; i <= k; i++) {
      key = order[i]; c = cnt[key]
      m = c % 2 ? all[key, (c + 1) / 2] : (all[key, c / 2] + all[key, c / 2 + 1]) / 2
      printf "  %-28s median %8.2f   (%s )\n", key, m, vals[key]
    }
  }'
