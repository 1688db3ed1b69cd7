#!/bin/sh
# ctest entry (CMakeLists.txt): trains a tiny run of every registered model.norm x placement (and one
# data-defined task) and checks each loads into PyTorch with scripts/load_checkpoint_torch.py,
# which compares PyTorch's predictions with `normlab predict`.
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
runs=""
# norm placement positions activation task [qk_norm [residual]]: every entry of the norm registry and of
# the residual registry (normlab help norms --json) at each placement it has a compare variant for, the
# rest alternating so each is covered
"$normlab" help norms --json > "$tmp/norms.json"
variants=$("$python" - "$tmp/norms.json" <<'PY'
import json, sys
others = [("sinusoidal", "gelu", "reverse"), ("learned", "relu", "reverse"), ("sinusoidal", "relu", "majority"),
          ("learned", "gelu", "brackets")]
i = 0
registries = json.load(open(sys.argv[1]))
for norm in registries["norms"]:
    for variant in norm["variants"]:
        print(norm["name"], variant["placement"], *others[i % len(others)])
        i += 1
for scheme in registries["residuals"]:
    for variant in scheme["variants"]:
        print(variant["norm"], variant["placement"], *others[i % len(others)], "none", scheme["name"])
        i += 1
print("layernorm pre sinusoidal relu shift")
# model.qk_norm (a sixth field, "none" when absent): with LayerNorm blocks, and with no other normalization
print("layernorm post sinusoidal relu reverse layernorm")
print("none pre learned gelu reverse rmsnorm")
PY
)
newline='
'
old_ifs=$IFS
IFS=$newline
for variant in $variants; do
  IFS=$old_ifs
  set -- $variant
  qk_norm=${6:-none}
  residual=${7:-plain}
  name="$1-$2-$5-qk$qk_norm-$residual"
  task="\"name\": \"$5\""
  if [ "$5" = shift ]; then
    task="\"name\": \"token_classification\", \"train_file\": \"$source_dir/data/shift/train.jsonl\", \"valid_file\": \"$source_dir/data/shift/valid.jsonl\""
  fi
  cat > "$tmp/$name.json" <<JSON
{
  "model": {"d_model": 16, "heads": 2, "layers": 2, "ffn": 32, "max_len": 16, "norm": "$1", "placement": "$2",
            "positional": "$3", "activation": "$4", "norm_eps": 1e-5, "qk_norm": "$qk_norm",
            "residual": "$residual"},
  "task": {$task, "min_len": 1, "max_len": 8, "eval_max_len": 12, "eval_examples": 16},
  "optim": {"lr": 0.01, "warmup_steps": 2},
  "train": {"steps": 6, "batch_size": 8, "eval_every": 0, "log_every": 6, "checkpoint_every": 0, "threads": 1}
}
JSON
  "$normlab" train --config "$tmp/$name.json" --out "$tmp/run-$name" > "$tmp/train-$name.log" 2>&1 || {
    cat "$tmp/train-$name.log"
    exit 1
  }
  runs="$runs $tmp/run-$name"
done
"$python" "$source_dir/scripts/load_checkpoint_torch.py" $runs --normlab "$normlab"
