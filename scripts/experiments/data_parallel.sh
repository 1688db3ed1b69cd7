#!/usr/bin/env bash
# The data-parallel experiment of docs/EXPERIMENTS.md (data parallelism): reverse task, LayerNorm and BatchNorm
# (local and sync statistics) on 1, 2 and 4 ranks, 3 seeds. Prints one CSV line per run.
#   OUT  output directory (default: runs/experiment-dp)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
OUT=${OUT:-runs/experiment-dp}
mkdir -p "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
common=(--set model.d_model=32 --set model.heads=2 --set model.ffn=64 --set train.steps=300
        --set train.eval_every=0 --set train.checkpoint_every=0 --set train.diagnostics_every=0 --threads 1)
echo "norm,stats,ranks,seed,final_train_loss,valid_loss,valid_accuracy"
for seed in 0 1 2; do
  for variant in layernorm:local batchnorm:local batchnorm:sync; do
    norm=${variant%%:*} stats=${variant##*:}
    for ranks in 1 2 4; do
      [[ $stats == sync && $ranks == 1 ]] && continue  # one process: sync = local
      dir="$OUT/$norm-$stats-n$ranks-s$seed"
      rm -rf "$dir"
      args=(train --config configs/reverse.json --out "$dir" --set "model.norm=$norm"
            --set "model.batchnorm_stats=$stats" --set "train.seed=$seed" "${common[@]}")
      if ((ranks == 1)); then build/normlab "${args[@]}" >/dev/null 2>&1
      else mpirun --oversubscribe --bind-to none -np "$ranks" build/normlab "${args[@]}" >/dev/null 2>&1; fi
      python3 - "$dir/summary.json" "$norm" "$stats" "$ranks" "$seed" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(",".join(sys.argv[2:6] + [repr(s["final_train"]["loss"]), repr(s["final_valid"]["loss"]), repr(s["final_valid"]["accuracy"])]))
PY
    done
  done
done
