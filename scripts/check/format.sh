#!/usr/bin/env bash
# Formats the C++ sources with the repository's .clang-format, or checks that they are formatted.
#
#   bash scripts/check/format.sh                # rewrites every tracked .cpp/.hpp/.c/.h in place
#   bash scripts/check/format.sh --check        # lists the files it would change, with their count of
#                                               # changed lines; exit 1 if any, 0 if none
#   bash scripts/check/format.sh [--check] PATH...   # only these files or folders
#
# clang-format-14 (Debian 12's clang-format-14 package) and no other: another version lays some
# lines out differently, and the tree would flip between them. Files under tests/data/ are inputs,
# never formatted.
set -euo pipefail
cd "$(dirname "$0")/../.."
check=0
if [[ ${1:-} == --check ]]; then check=1; shift; fi
formatter=${CLANG_FORMAT:-clang-format-14}
command -v "$formatter" >/dev/null ||
  { echo "format.sh: $formatter not found: apt-get install clang-format-14" >&2; exit 2; }

mapfile -t files < <(git ls-files -- "${@:-.}" | grep -E '\.(cpp|hpp|c|h)$' | grep -v '^tests/data/' || true)
[[ ${#files[@]} -gt 0 ]] || { echo "format.sh: no C++ files under ${*:-.}" >&2; exit 2; }

if ((check == 0)); then
  "$formatter" -i --style=file "${files[@]}"
  echo "format.sh: formatted ${#files[@]} files"
  exit 0
fi
changed=0 lines=0
for file in "${files[@]}"; do
  n=$("$formatter" --style=file --assume-filename="$file" <"$file" | diff "$file" - | grep -c '^<' || true)
  if ((n > 0)); then
    echo "$file: $n lines"
    changed=$((changed + 1)) lines=$((lines + n))
  fi
done
if ((changed > 0)); then
  echo "format.sh: $changed of ${#files[@]} files ($lines lines) differ from .clang-format; bash scripts/check/format.sh fixes them" >&2
  exit 1
fi
echo "format.sh: ${#files[@]} files formatted as .clang-format says"
