#!/usr/bin/env bash
# The library's floors (docs/building.md): each links only to the ones below it.
#   0 core   tensor, autograd, ops, gradcheck, parallel, stats, rng, shortest, error, detail/,
#            kernels/, nn/, optim/
#   1 run    io/ and provenance < data/ < dist/ < train/ < bench/
#   2 study  study/ < serve/
#   3 apps   apps/ (the command line)
# The benchmarks' C++ lives in bench/ (bench/README.md): bench/src/ and bench/include/normlab/bench/
# are the run floor's bench/ folder, bench/cmd/ is part of apps/.
# Within run and study the folders are ordered too (a < b: b may include a, never the reverse), so
# train/ and dist/, say, cannot include each other both ways. Lists every #include in src/,
# include/normlab/ and apps/ that reaches a higher floor, or a later folder of its own floor, and,
# given a build directory, every symbol a layer's archive needs (nm --undefined-only) that only a
# higher layer's archive defines. Exits 1 if it found any, 0 otherwise ("layers: no upward
# includes ..."). A ctest test (`layers`) runs it.
#   usage: scripts/check/layers.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-}

names=(core run study apps)
declare -A labels=([0]=core [10]=run:io [11]=run:data [12]=run:dist [13]=run:train [14]=run:bench
                   [20]=study:study [21]=study:serve [30]=apps)

# rank=floor*10+folder of a path relative to src/ or include/normlab/ (or apps/...).
rank_of() {
  case $1 in
    apps/*) rank=30 ;;
    serve/*) rank=21 ;;
    study/*) rank=20 ;;
    bench/*) rank=14 ;;
    train/*) rank=13 ;;
    dist/*) rank=12 ;;
    data/*) rank=11 ;;
    io/* | provenance.*) rank=10 ;;
    *) rank=0 ;;
  esac
}

# A file's path as its floor sees it: src/x/y.cpp and include/normlab/x/y.hpp -> x/y.*
relative() {
  case $1 in
    bench/src/*) path=bench/${1#bench/src/} ;;
    bench/include/normlab/*) path=${1#bench/include/normlab/} ;;
    bench/cmd/*) path=apps/${1#bench/cmd/} ;;
    src/*) path=${1#src/} ;;
    include/normlab/*) path=${1#include/normlab/} ;;
    *) path=$1 ;;
  esac
}

status=0
includes=0
while IFS= read -r file; do
  relative "$file"
  rank_of "$path"
  own=$rank
  dir=$(dirname "$file")
  while IFS= read -r line; do
    [[ -n $line ]] || continue
    number=${line%%:*}
    target=${line#*:}
    target=${target#*\"}
    target=${target%%\"*}
    if [[ $target == normlab/* ]]; then
      path=${target#normlab/}
    elif [[ $target == ../* ]]; then  # a private header of the folder above: "../isa_kernels.hpp"
      relative "$(dirname "$dir")/${target#../}"
    else  # a private header beside the file: "run_output.hpp"
      relative "$dir/$target"
    fi
    includes=$((includes + 1))
    rank_of "$path"
    if ((rank > own)); then
      echo "$file:$number: ${labels[$own]} includes ${labels[$rank]}: $target"
      status=1
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" || true)
done < <(find src include/normlab apps bench/src bench/include/normlab bench/cmd -name '*.cpp' -o -name '*.hpp' | sort)

symbols_checked=""
if [[ -n $build ]]; then
  archives=("$build/libnormlab_core.a" "$build/libnormlab_run.a" "$build/libnormlab_study.a")
  for archive in "${archives[@]}"; do
    [[ -f $archive ]] || { echo "layers.sh: $archive not built" >&2; exit 1; }
  done
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  for i in 0 1 2; do
    nm --defined-only --extern-only "${archives[i]}" 2>/dev/null | awk 'NF >= 3 {print $3}' | sort -u >"$tmp/defined$i"
    nm --undefined-only "${archives[i]}" 2>/dev/null | awk 'NF >= 2 {print $2}' | sort -u >"$tmp/undefined$i"
  done
  for low in 0 1; do
    # Symbols that this layer or a lower one defines are not upward, even if a higher one does too
    # (inline functions and templates are defined wherever they are used).
    cat "$tmp/defined0" $( ((low >= 1)) && echo "$tmp/defined1") | sort -u >"$tmp/below"
    for high in $(seq $((low + 1)) 2); do
      comm -23 "$tmp/undefined$low" "$tmp/below" | comm -12 - "$tmp/defined$high" >"$tmp/up" || true
      while IFS= read -r symbol; do
        [[ -n $symbol ]] || continue
        echo "lib${names[low]/#/normlab_}.a needs $(echo "$symbol" | c++filt) from libnormlab_${names[high]}.a"
        status=1
      done <"$tmp/up"
    done
  done
  symbols_checked=" and no upward symbols in $build/libnormlab_{core,run,study}.a"
fi

if ((status == 0)); then
  echo "layers: no upward includes ($includes includes in src/, include/normlab/, apps/, bench/)$symbols_checked"
fi
exit $status
