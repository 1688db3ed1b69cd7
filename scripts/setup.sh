#!/usr/bin/env bash
# Installs what normlab needs from Debian 12's packages (only what is missing) and builds it.
# Sourced by scripts/test.sh and scripts/demo.sh; safe to run again.
#   BUILD_DIR   build directory (default: build)
#   NORMLAB_BUILD_TARGETS  what to build (default: everything, the tests included); the main
#               command (scripts/demo.sh) asks for `normlab` only
#   NORMLAB_EXTRA_PACKAGES  more packages to require (the test script adds chromium)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

packages=(g++ cmake make pkg-config libfmt-dev libcli11-dev nlohmann-json3-dev doctest-dev libcpp-httplib-dev libjs-chart.js libopenmpi-dev openmpi-bin ${NORMLAB_EXTRA_PACKAGES:-})
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then
    echo "normlab: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "normlab: missing packages. Run:  sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
fi

BUILD_DIR=${BUILD_DIR:-build}
# ccache, when the machine has it, makes a rebuild of unchanged sources (a fresh clone, CI) cheap;
# paths are taken relative to the checkout so that any clone shares the cache. Not required.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$(pwd)}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release "${launcher[@]}" ${NORMLAB_CMAKE_ARGS:-} >/dev/null
targets=()
for t in ${NORMLAB_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j"$(nproc)" "${targets[@]}"
