#!/usr/bin/env bash
# Fails when the source tree names a tracker issue: a reader of the repository cannot open the
# tracker, so "issue 26", "issues 12 and 26", "(#35)" or "PR #7" in code, comments or docs point
# nowhere. History belongs in git; docs say what is true now.
#
#   bash scripts/check/tracker_refs.sh [ROOT]     # ROOT defaults to this script's repository
#
# Prints each offending line as path:line:text and exits 1; exits 0 when there is none.
# Scanned: src/ include/ apps/ docs/ README.md scripts/ CMakeLists.txt tests/ bench/ fuzz/ configs/,
# text files only, but not docs/experiments/ (generated), tests/data/ or fuzz/corpus/ (inputs).
#
# What counts as a reference (extended regular expressions):
#   - the word issue(s), PR, pull request or ticket followed by a number: "issue 26", "Issue 25:",
#     "issue-15 branch", "issues #3";
#   - a '#' and one or two digits standing alone: "(#35)", "see #7". Longer runs are left alone,
#     because "#000" and "#0072B2" are colours, "#include" and "#pragma" are not numbers, and
#     "&#39;" is an HTML entity.
set -u

root="${1:-$(cd "$(dirname "$0")/../.." && pwd)}"
word_ref='(^|[^A-Za-z])([Ii]ssues?|ISSUES?|PR|[Pp]ull [Rr]equests?|[Tt]ickets?)[ -]#?[0-9]+'
hash_ref='(^|[^&A-Za-z0-9_#/])#[0-9]{1,2}([^0-9A-Za-z_]|$)'

cd "$root" || { echo "tracker_refs: cannot enter $root" >&2; exit 2; }
paths=()
for p in src include apps docs README.md scripts CMakeLists.txt tests bench fuzz configs; do
  [ -e "$p" ] && paths+=("$p")
done
[ ${#paths[@]} -gt 0 ] || { echo "tracker_refs: nothing to scan under $root" >&2; exit 2; }

# Generated reports and test or fuzz inputs are data, not prose: left out.
hits=$(find "${paths[@]}" \( -path docs/experiments -o -path tests/data -o -path fuzz/corpus -o -name .git \) -prune \
         -o -type f ! -name tracker_refs.sh -print0 |
       xargs -0 -r grep -HnIE -e "$word_ref" -e "$hash_ref" -- 2>/dev/null)
if [ -n "$hits" ]; then
  printf '%s\n' "$hits"
  echo "tracker_refs: $(printf '%s\n' "$hits" | wc -l) line(s) name a tracker issue; say what is true instead" >&2
  exit 1
fi
exit 0
