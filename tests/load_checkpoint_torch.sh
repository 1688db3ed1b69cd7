#!/bin/sh
# ctest entry (CMakeLists.txt): trains two tiny runs and checks each loads into PyTorch with
# scripts/load_checkpoint_torch.py, which compares PyTorch's predictions with `normlab predict`.
# Without torch in /usr/bin/python3 it prints why and exits 77, which ctest reports as "Skipped".
#   tests/load_checkpoint_torch.sh NORMLAB_BINARY SOURCE_DIR
set -eu
normlab="$1"
source_dir="$2"
python=${NORMLAB_TORCH_PYTHON:-/usr/bin/python3}  # overridable to test the skip
if [ ! -x "$python" ] || ! "$python" -c "import torch, numpy" 2>/dev/null; then
  echo "SKIPPED: $python cannot import torch and numpy, so scripts/load_checkpoint_torch.py was not run"
  exit 77
fi
tmp=$(mktemp -d "${TMPDIR:-/tmp}/normlab_torch_load.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
for variant in "pre sinusoidal gelu" "post learned relu"; do
  set -- $variant
  cat > "$tmp/$1.json" <<JSON
{
  "model": {"d_model": 16, "heads": 2, "layers": 2, "ffn": 32, "max_len": 16, "placement": "$1",
            "positional": "$2", "activation": "$3", "norm_eps": 1e-5},
  "task": {"name": "reverse", "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 16},
  "optim": {"lr": 0.01, "warmup_steps": 2},
  "train": {"steps": 6, "batch_size": 8, "eval_every": 0, "log_every": 6, "checkpoint_every": 0, "threads": 1}
}
JSON
  "$normlab" train --config "$tmp/$1.json" --out "$tmp/run-$1" > "$tmp/train-$1.log" 2>&1 || {
    cat "$tmp/train-$1.log"
    exit 1
  }
  echo "== $1-norm, $2 positions, $3"
  "$python" "$source_dir/scripts/load_checkpoint_torch.py" "$tmp/run-$1" --normlab "$normlab"
done
