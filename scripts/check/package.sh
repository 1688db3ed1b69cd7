#!/usr/bin/env bash
# The installable package end to end (ctest's package_deb): `cpack -G DEB` from the build
# directory, `dpkg -x` into a scratch root, then the packaged binary runs `--version` and a short
# training run. Exits 77 (ctest: skipped) when cpack or dpkg-deb is missing.
#   usage: scripts/check/package.sh BUILD_DIR
set -euo pipefail
build_dir=$(cd "$1" && pwd)
for tool in cpack dpkg-deb; do
  if ! command -v "$tool" >/dev/null; then
    echo "SKIPPED: $tool not found (Debian: apt-get install cmake dpkg)"
    exit 77
  fi
done

scratch=$(mktemp -d "${TMPDIR:-/tmp}/normlab_package.XXXXXX")
trap 'rm -rf "$scratch"' EXIT

# -B keeps the package and cpack's staging out of the build directory.
(cd "$build_dir" && cpack -G DEB -B "$scratch/out" >"$scratch/cpack.log" 2>&1) || {
  cat "$scratch/cpack.log"
  exit 1
}
deb=$(ls "$scratch"/out/normlab_*.deb)
echo "package: $(basename "$deb")"
dpkg-deb --info "$deb" | grep -E "Package|Version|Architecture|Depends"

dpkg -x "$deb" "$scratch/root"
binary="$scratch/root/usr/bin/normlab"
test -x "$binary"
test -f "$scratch/root/usr/share/doc/normlab/README.md"
test -f "$scratch/root/usr/share/doc/normlab/building.md"
test -f "$scratch/root/usr/share/doc/normlab/LICENSE"
# The completion and the man page, printed by the binary at build time (apps/cli_habits.cpp).
cmp "$scratch/root/usr/share/bash-completion/completions/normlab" <("$binary" completion bash)
cmp "$scratch/root/usr/share/man/man1/normlab.1" <("$binary" help man)

version=$("$binary" --version)
echo "$version"
grep -q "^normlab " <<<"$version"
grep -q "^kernels: " <<<"$version"

cat >"$scratch/tiny.json" <<'JSON'
{
  "model": {"d_model": 16, "heads": 2, "layers": 1, "ffn": 32, "max_len": 16},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 16, "bucket_width": 4},
  "train": {"steps": 4, "batch_size": 8, "eval_every": 4, "log_every": 1, "checkpoint_every": 4, "threads": 1}
}
JSON
"$binary" train --config "$scratch/tiny.json" --out "$scratch/run" >"$scratch/train.log" 2>&1 || {
  cat "$scratch/train.log"
  exit 1
}
test "$(grep -c '"loss"' "$scratch/run/metrics.jsonl")" -ge 4
test -f "$scratch/run/checkpoint.safetensors"
echo "packaged binary trained: $(grep -c '"step"' "$scratch/run/metrics.jsonl") metrics lines"
