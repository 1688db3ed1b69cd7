#!/usr/bin/env bash
# Builds the libFuzzer targets in fuzz/ and runs each one for a bounded time (docs/RELIABILITY.md).
#
#   bash scripts/check/fuzz.sh --ci                 # the five parser targets for 30 s each: what CI runs
#   bash scripts/check/fuzz.sh 600                  # every target (checkpoint too) for 10 minutes
#   bash scripts/check/fuzz.sh 300 jsonl config     # only these targets
#   bash scripts/check/fuzz.sh --build-only
#
# Targets: npy safetensors jsonl config config_set checkpoint (fuzz/fuzz_<target>.cpp; the input
# layouts are described in fuzz/fuzz_inputs.hpp and fuzz/fuzz_checkpoint.hpp). Each run starts from a copy of fuzz/corpus/<target>/ in a
# temporary directory, so the repository is never modified. A crash, sanitizer report, leak,
# timeout (> 2 s for one input) or out-of-memory (> 2 GB) fails the script; the offending input is
# copied to build-fuzz/crashes/<target>/ and its path printed. To keep it as a regression test, copy
# it to tests/data/fuzz-regressions/<target>/ (tests/test_fuzz_regressions.cpp replays every file
# there in the normal suite).
#
# Environment: BUILD_DIR (default build-fuzz), CXX (default clang++-14), JOBS (default nproc).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
BUILD_DIR=${BUILD_DIR:-build-fuzz}
CXX=${CXX:-clang++-14}
JOBS=${JOBS:-$(nproc)}
ALL_TARGETS=(npy safetensors jsonl config config_set checkpoint)
# --ci leaves out checkpoint: it needs the whole library built with clang and sanitizers (several
# more minutes of CI); its regression inputs are replayed by the normal suite all the same.
CI_TARGETS=(npy safetensors jsonl config config_set)

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }

seconds=60
ci=0
build_only=0
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ci) ci=1; seconds=30 ;;
    --build-only) build_only=1 ;;
    -h|--help) usage; exit 0 ;;
    [0-9]*) seconds=$1 ;;
    *)
      if [[ " ${ALL_TARGETS[*]} " != *" $1 "* ]]; then
        echo "fuzz.sh: unknown target '$1' (targets: ${ALL_TARGETS[*]})" >&2
        exit 2
      fi
      targets+=("$1") ;;
  esac
  shift
done
if [[ ${#targets[@]} -eq 0 ]]; then
  if [[ $ci -eq 1 ]]; then targets=("${CI_TARGETS[@]}"); else targets=("${ALL_TARGETS[@]}"); fi
fi

# ------------------------------------------------------------------------------- toolchain check
if ! command -v "$CXX" >/dev/null; then
  if [[ $(id -u) -eq 0 && $CXX == clang++-14 ]]; then
    echo "fuzz.sh: installing clang-14 and libclang-rt-14-dev (Debian packages)" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang-14 libclang-rt-14-dev >&2 ||
      { apt-get update -q >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -q clang-14 libclang-rt-14-dev >&2; }
  else
    echo "fuzz.sh: $CXX not found. Install it with: apt-get install -y clang-14 libclang-rt-14-dev" >&2
    exit 2
  fi
fi
mkdir -p "$BUILD_DIR/obj" "$BUILD_DIR/crashes"
probe="$BUILD_DIR/probe"
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' |
     "$CXX" -x c++ - -fsanitize=fuzzer,address,undefined -o "$probe" 2>/dev/null; then
  # libFuzzer and the sanitizer runtimes live in compiler-rt, a separate Debian package.
  if [[ $(id -u) -eq 0 ]]; then
    echo "fuzz.sh: libFuzzer runtime missing; installing libclang-rt-14-dev" >&2
    apt-get install -y libclang-rt-14-dev >&2
  else
    echo "fuzz.sh: libFuzzer runtime missing. Install it with: sudo apt-get install -y libclang-rt-14-dev" >&2
    exit 2
  fi
fi

# ------------------------------------------------------------------------------------------ build
# The parsers and what they call (the I/O and data layers, the config loader and the own-data
# defaults it fills from the data files through the task set-up) go into one
# archive; the whole library (model, optimizer, samplers, the norm registry the config checks) goes
# into a second one, linked after it. An archive lets each target
# link only the objects it uses.
PARSER_SOURCES=(src/io/*.cpp src/data/*.cpp src/train/config*.cpp src/train/data_defaults.cpp src/train/setup.cpp)
mapfile -t ALL_SOURCES < <(find src -name '*.cpp' | sort)
# Library code gets coverage instrumentation (fuzzer-no-link); only the targets link libFuzzer's
# main. -fno-sanitize-recover: a UBSan report must be a crash, or the fuzzer would not save the input.
SAN_FLAGS=(-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer)
CXXFLAGS=(-std=c++20 -fsized-deallocation -g -O1 -fopenmp -Iinclude -DNORMLAB_VERSION=\"fuzz\" -Wall -Wextra "${SAN_FLAGS[@]}")

# Recompiles an object when it is missing or older than any file in its depfile.
needs_build() {
  local object=$1 depfile=$2
  [[ -f $object && -f $depfile ]] || return 0
  local dep
  for dep in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$depfile"); do
    [[ $dep -nt $object ]] && return 0
  done
  return 1
}

object_for() { echo "$BUILD_DIR/obj/$(echo "${1%.cpp}" | tr '/' '_').o"; }

# Compiles the given sources (JOBS at a time) and archives their objects into $1.
build_archive() {
  local archive=$1
  shift
  local objects=() pids=() source object
  for source in "$@"; do
    object=$(object_for "$source")
    objects+=("$object")
    if needs_build "$object" "${object%.o}.d"; then
      "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer-no-link -MMD -MF "${object%.o}.d" -c "$source" -o "$object" &
      pids+=($!)
      if [[ ${#pids[@]} -ge $JOBS ]]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
    fi
  done
  for pid in "${pids[@]}"; do wait "$pid"; done
  rm -f "$archive"
  ar rcs "$archive" "${objects[@]}"
}

echo "fuzz.sh: building in $BUILD_DIR with $CXX"
# Objects built with other flags are stale even if no source changed.
if [[ "$(cat "$BUILD_DIR/flags" 2>/dev/null)" != "$CXX ${CXXFLAGS[*]}" ]]; then
  rm -f "$BUILD_DIR"/obj/*.o
  echo "$CXX ${CXXFLAGS[*]}" >"$BUILD_DIR/flags"
fi
build_archive "$BUILD_DIR/libnormlab_parsers.a" "${PARSER_SOURCES[@]}"
if [[ " ${targets[*]} " == *" checkpoint "* ]]; then
  build_archive "$BUILD_DIR/libnormlab_full.a" "${ALL_SOURCES[@]}"
fi
# The config parser checks model.norm against the norm registry (src/nn/norm_registry.cpp), whose
# entries build the layers: the parsers link the core floor of the Release build (scripts/setup.sh;
# not instrumented, it is not what is fuzzed) after their own archive.
CORE_ARCHIVE=${NORMLAB_CORE_ARCHIVE:-build/libnormlab_core.a}
[[ -f $CORE_ARCHIVE ]] || { echo "fuzz.sh: $CORE_ARCHIVE missing: build first (bash scripts/setup.sh)" >&2; exit 2; }

for target in "${targets[@]}"; do
  archives=("$BUILD_DIR/libnormlab_parsers.a" "$CORE_ARCHIVE")
  [[ $target == checkpoint ]] && archives=("$BUILD_DIR/libnormlab_full.a")
  "$CXX" "${CXXFLAGS[@]}" -fsanitize=fuzzer "fuzz/fuzz_$target.cpp" "${archives[@]}" -lfmt -o "$BUILD_DIR/fuzz_$target"
done
echo "fuzz.sh: built ${targets[*]}"
[[ $build_only -eq 1 ]] && exit 0

# -------------------------------------------------------------------------------------------- run
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$ROOT/scripts/check/lsan.supp:print_suppressions=0}
# One thread: the checkpoint target's kernels would otherwise start an OpenMP team per input.
export OMP_NUM_THREADS=1

failed=()
for target in "${targets[@]}"; do
  work=$(mktemp -d "${TMPDIR:-/tmp}/normlab-fuzz-$target-XXXXXX")
  mkdir -p "$work/corpus" "$work/artifacts"
  if [[ -d fuzz/corpus/$target ]]; then cp -r "fuzz/corpus/$target/." "$work/corpus/"; fi
  seeds=$(find "$work/corpus" -type f | wc -l)
  echo "fuzz.sh: $target for ${seconds}s from $seeds seeds (log: $work/log)"
  set +e
  # TMPDIR: the targets' scratch files go inside the work directory, removed with it.
  TMPDIR="$work" "$BUILD_DIR/fuzz_$target" "$work/corpus" \
    -max_total_time="$seconds" -timeout=2 -rss_limit_mb=2048 \
    -artifact_prefix="$work/artifacts/" -print_final_stats=1 >"$work/log" 2>&1
  status=$?
  set -e
  grep -E '^stat::number_of_executed_units|^#[0-9]+.*DONE' "$work/log" | tail -2 | sed "s/^/  $target: /"
  artifacts=$(find "$work/artifacts" -type f)
  if [[ $status -ne 0 || -n $artifacts ]]; then
    failed+=("$target")
    mkdir -p "$BUILD_DIR/crashes/$target"
    echo "fuzz.sh: $target FAILED (exit $status). Report:" >&2
    grep -E 'ERROR|SUMMARY|fuzz: unexpected|runtime error|==[0-9]+==' "$work/log" | head -20 | sed 's/^/  /' >&2
    for artifact in $artifacts; do
      cp "$artifact" "$BUILD_DIR/crashes/$target/"
      echo "  crash input: $ROOT/$BUILD_DIR/crashes/$target/$(basename "$artifact")" >&2
    done
    echo "  full log: $work/log" >&2
  else
    rm -rf "$work"
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzz.sh: failures in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz.sh: no crashes in ${targets[*]} (${seconds}s each)"
