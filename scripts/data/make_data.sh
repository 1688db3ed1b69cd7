#!/bin/sh
# Regenerates data/<task>/*.jsonl and data/kjv/*.jsonl byte for byte (data/README.md).
# The King James text comes from Debian's bible-kjv-text package (`apt-get install bible-kjv`),
# read through its `bible` program; without it the text splits are left as they are.
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-$ROOT/build-data}
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" -j2 --target normlab_run
g++ -std=c++20 -O2 -Wall -Wextra -I"$ROOT/include" "$ROOT/scripts/data/make_data.cpp" "$BUILD/libnormlab_run.a" "$BUILD/libnormlab_core.a" \
  -lfmt -fopenmp $(pkg-config --libs ompi-cxx 2>/dev/null) -o "$BUILD/make_data"
"$BUILD/make_data" tasks "$ROOT/data"
if command -v bible >/dev/null 2>&1; then
  VERSES=$(mktemp)
  trap 'rm -f "$VERSES"' EXIT
  # Genesis 1:1 to Deuteronomy 34:12, one verse per line with its reference ("Ge1:1 In the ...").
  bible -f Ge1:1-De34:12 >"$VERSES"
  "$BUILD/make_data" text "$VERSES" "$ROOT/data/kjv"
else
  echo "bible not found (apt-get install bible-kjv): data/kjv left unchanged" >&2
fi
