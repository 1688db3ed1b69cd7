#!/usr/bin/env bash
# The README's test command: install missing packages, build, run the whole suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build} NORMLAB_EXTRA_PACKAGES="chromium ${NORMLAB_EXTRA_PACKAGES:-}" bash scripts/setup.sh
cd "${BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)" --timeout 600
