# The convergence gate (docs/compare.md) applied to a runs.csv without run directories:
#   awk -F, -f gate.awk runs.csv
# (a) bracketed: per variant and setting, the rate with the lowest mean over seeds of
#     min(held-out trained-length loss, ln 10) (a diverged run, or no finite loss: ln 10) is
#     neither the lowest nor the highest rate run.
# (b) at that rate a seed counts as converged when it solved, as still improving when it is slow
#     (loss fell at each of the last 3 evaluations and by >= 5%), and as undetermined otherwise
#     (runs.csv has no evaluation history to apply the 1% plateau rule to).
# Prints one line per cell and the counts per length regime. Columns are found by name.
NR == 1 { for (i = 1; i <= NF; ++i) col[$i] = i; next }
$col["finished"] != 1 { next }
{
  cap = log(10)
  loss = $col["trained_valid_loss"]
  if ($col["diverged"] == 1 || loss == "" || loss == "nan" || loss == "inf" || loss + 0 > cap) loss = cap
  cell = $col["variant"] "|" $col["layers"] "|" $col["warmup"] "|" $col["task.length_regime"]
  lr = $col["lr"] + 0
  key = cell SUBSEP lr
  sum[key] += loss; n[key]++
  if (!(key in seen)) { seen[key] = 1; rates[cell] = rates[cell] " " lr }
  if ($col["outcome"] == "solved") solved[key]++
  if ($col["outcome"] == "slow") slow[key]++
  cells[cell] = 1
}
END {
  for (cell in cells) {
    k = split(substr(rates[cell], 2), r, " ")
    best = ""; lo = ""; hi = ""
    for (i = 1; i <= k; ++i) {
      x = r[i] + 0; m = sum[cell, x] / n[cell, x]
      if (lo == "" || x < lo) lo = x
      if (hi == "" || x > hi) hi = x
      if (best == "" || m < bm || (m == bm && x < best)) { best = x; bm = m }
    }
    edge = best == lo ? "low" : best == hi ? "high" : "interior"
    runs = n[cell, best]; s = solved[cell, best] + 0; sl = slow[cell, best] + 0
    verdict = 2 * s > runs ? "converged" : 2 * (runs - sl) <= runs ? "not converged" : "undetermined"
    split(cell, c, "|")
    printf "%s %s layers warmup=%s %s: best %g (%s), mean loss %.3f; solved %d/%d, slow %d: %s\n",
           c[1], c[2], c[3], c[4], best, edge, bm, s, runs, sl, verdict
    reg = c[4]; total[reg]++
    if (edge == "interior") interior[reg]++
    count[reg, verdict]++
    if (edge == "interior" && verdict == "converged") both[reg]++
  }
  for (reg in total)
    printf "regime %s: %d cells, %d interior, %d converged, %d not converged, %d undetermined, %d both\n", reg,
           total[reg], interior[reg], count[reg, "converged"], count[reg, "not converged"], count[reg, "undetermined"],
           both[reg]
}
