#!/usr/bin/env bash
# Trains a short run of configs/bench-step.json on every kernel path this CPU has (generic, avx2,
# avx512; NORMLAB_ISA) at 1 and 2 threads, and checks that each run's metrics.jsonl, with the
# timing field tokens_per_s removed, has the same bytes as the generic path's at 1 thread: every
# loss, accuracy and gradient norm to the last bit, and the diagnostics of step 1 (the JSON numbers
# round-trip). CI runs it (.ci/run); it is also the check to run before and after a kernel change.
# It prints two hashes: of the training fields alone (the diagnostics keys removed too: this one
# moves only when training itself changes) and of the whole file.
#   usage: scripts/check/isa_bits.sh [path/to/normlab]     STEPS=N (default 20)
set -euo pipefail
# The binary as given, resolved before leaving the caller's directory.
bin=$(realpath -e "${1:-$(dirname "$0")/../../build/normlab}") || { echo "isa_bits: no binary ${1:-build/normlab}" >&2; exit 2; }
cd "$(dirname "$0")/../.."
steps=${STEPS:-20}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

isas=()
for isa in generic avx2 avx512; do
  if NORMLAB_ISA=$isa "$bin" --version >/dev/null 2>&1; then isas+=("$isa"); fi
done
((${#isas[@]})) || { echo "isa_bits: $bin runs on no kernel path (normlab --version failed)" >&2; exit 1; }

strip_timing() { sed -E 's/,?"tokens_per_s":[^,}]*//' "$1"; }
# The diagnostics keys (docs/run-directory.md), lists or numbers: what remains is what trained.
strip_diagnostics() {
  sed -E 's/,"(residual_rms|layer_grad_norms|attention_max_logit|attention_entropy_mean|attention_entropy_min|update_ratio|log_z_mean|log_z_max_abs)":(\[[^]]*\]|[^,}]*)//g' "$1"
}

reference=""
status=0
for threads in 1 2; do
  for isa in "${isas[@]}"; do
    out="$tmp/$isa-$threads"
    NORMLAB_ISA=$isa "$bin" train --config configs/bench-step.json --set train.steps="$steps" \
      --set train.log_every=1 --threads "$threads" --out "$out" >"$tmp/log" 2>&1 ||
      { echo "isa_bits: training on $isa at $threads threads failed:" >&2; cat "$tmp/log" >&2; exit 1; }
    strip_timing "$out/metrics.jsonl" >"$out/metrics.bits"
    if [[ -z $reference ]]; then
      reference="$out/metrics.bits"
      [[ $(wc -l <"$reference") -ge $steps ]] || { echo "isa_bits: $reference has too few lines" >&2; exit 1; }
    elif ! cmp -s "$reference" "$out/metrics.bits"; then
      echo "isa_bits: $isa at $threads threads differs from generic at 1 thread:" >&2
      diff "$reference" "$out/metrics.bits" | head -5 >&2
      status=1
    fi
  done
done
[[ $status -eq 0 ]] && echo "isa_bits: metrics.jsonl identical on ${isas[*]} at 1 and 2 threads ($steps steps, $(strip_diagnostics "$reference" | md5sum | cut -c1-12); with diagnostics $(md5sum <"$reference" | cut -c1-12))"
exit $status
