#!/usr/bin/env bash
# The README's main command: install missing packages, build, then run the LayerNorm comparison
# (configs/demo.json: a learning-rate search of about 240 runs, about 2 min on 2 cores; compare
# prints each run's progress with an ETA for the round under way) and write runs/demo/report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
# Only the binary it runs: the tests and benchmarks are scripts/test.sh's to build.
BUILD_DIR=${BUILD_DIR:-build} NORMLAB_BUILD_TARGETS=normlab bash scripts/setup.sh
"./${BUILD_DIR:-build}/normlab" compare --config configs/demo.json --out runs/demo "$@"
echo "normlab: open runs/demo/report.html (tables: runs/demo/report.md, one row per run: runs/demo/runs.csv)"
