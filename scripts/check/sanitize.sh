#!/usr/bin/env bash
# The whole test suite under AddressSanitizer + UndefinedBehaviorSanitizer (docs/RELIABILITY.md).
#
#   bash scripts/check/sanitize.sh            # build-asan/, all tests
#   BUILD_DIR=build-asan-x bash scripts/check/sanitize.sh -R 'layernorm'   # extra args go to ctest
#
# The build is RelWithDebInfo (optimized, so the suite finishes in minutes, with line numbers in
# reports); NORMLAB_SANITIZE adds -fsanitize=address,undefined -fno-sanitize-recover=undefined, so
# the first UB report fails its test instead of scrolling past. Leak checking is on.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-asan}
JOBS=${JOBS:-$(nproc)}

launcher=()  # ccache when present (scripts/setup.sh says why)
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DNORMLAB_SANITIZE=ON -DNORMLAB_NATIVE=ON "${launcher[@]}" >/dev/null
cmake --build "$BUILD_DIR" -j"$JOBS"

# abort_on_error: a report kills the process with SIGABRT, so ctest sees a failure even if the test
# framework would otherwise carry on. detect_leaks: LeakSanitizer runs at exit of every test process.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Leak reports we have judged to be not ours; every entry is explained in the file.
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$ROOT/scripts/check/lsan.supp:print_suppressions=0}

cd "$BUILD_DIR"
# Sanitized code runs ~2-5x slower than Release; the per-test timeout is generous accordingly.
ctest --output-on-failure -j"$JOBS" --timeout 1800 "$@"
