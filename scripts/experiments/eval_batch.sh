#!/usr/bin/env bash
# One trained model, evaluated three ways (docs/EXPERIMENTS.md, "BatchNorm and its batch"):
# one sequence per batch with batch statistics, the whole validation set as one batch with batch
# statistics, and the usual evaluation (BatchNorm on its running averages). LayerNorm and BatchNorm
# (pre placement), configs/reverse.json with 300 steps, seeds 0-2. Prints a CSV.
#   bash scripts/experiments/eval_batch.sh [OUT_DIR]   (default runs/eval-batch; needs build/normlab)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-runs/eval-batch}
bin=build/normlab
echo "norm,seed,eval,loss,accuracy"
for norm in layernorm batchnorm; do
  for seed in 0 1 2; do
    run=$out/$norm-s$seed
    [ -f "$run/summary.json" ] || "$bin" train --config configs/reverse.json --out "$run" \
      --set model.norm=$norm --set train.seed=$seed --set train.steps=300 >/dev/null 2>&1
    for mode in "batch1-stats:--batch-size 1 --batch-stats" "full-stats:--batch-size 256 --batch-stats" "running:"; do
      name=${mode%%:*}
      # shellcheck disable=SC2086
      "$bin" eval --run "$run" --json ${mode#*:} |
        /usr/bin/env python3 -c "import json,sys; j=json.load(sys.stdin); print('$norm,$seed,$name,%.6f,%.4f' % (j['loss'], j['accuracy']))"
    done
  done
done
