#!/usr/bin/env bash
# The live page of a 200,000-step run (beside a 3,000-step one) in headless Chromium: the time from
# navigation to both runs' curves drawn, the bytes the page fetched (Chart.js included) and serve's
# peak RSS, ROUNDS times (default 5), each a run of the browser test that builds the run and prints
# the figures (tests/test_serve_live.cpp); prints every sample, then the median drawing time.
# Timings need the shared lock:
#   flock /tmp/normlab-bench.lock bench/serve_live.sh [build/normlab_tests]
set -euo pipefail
cd "$(dirname "$0")/.."
tests=${1:-build/normlab_tests}
rounds=${ROUNDS:-5}
samples=()
for ((i = 1; i <= rounds; i++)); do
  out=$("$tests" -tc="serve in headless Chromium: a 200?000*" 2>&1)
  ms=$(grep -o "curves drawn [0-9]* ms" <<<"$out" | grep -o "[0-9]*")
  echo "round $i: drawn ${ms} ms; $(grep -o "page weight: [0-9]* kB" <<<"$out"); $(grep -o "peak RSS: [0-9.]* MB" <<<"$out")"
  samples+=("$ms")
done
printf '%s\n' "${samples[@]}" | sort -n | awk '{v[NR] = $1} END {printf "median: %d ms over %d rounds\n", v[int((NR + 1) / 2)], NR}'
