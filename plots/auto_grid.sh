#!/usr/bin/env bash
# --batching auto against the best single method on a grid (the planner issue's check): two
# models on two clusters, max lengths 1k-8k, 40 iterations, schedules 1f1b, adaptive and zb1,
# --recompute dynamic. One row per point: the best auto row over the best other row (each
# batching at its best schedule), against compare's every row (the new candidates among them:
# packing-half, -quarter, -taper, -dp) and against the ten methods before them; then the geometric
# means and the worst points.
# usage: plots/auto_grid.sh [build]   (about a minute here)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
TEN=padding,packing,packing-varlen,packing-ffd-varlen,dp-balanced,packing-kk,packing-wlb,token,dynamic,dynamic-varlen
configs=("gpt-6.7b-16l p4d --pp 4" "llama3-8b dgx-h100 --pp 4 --dp 2")
rows=$(for cfg in "${configs[@]}"; do
  read -r model hw layout <<<"$cfg"
  for L in 1024 2048 4096 8192; do
    # shellcheck disable=SC2086
    run() { # shellcheck disable=SC2086
      "$B/dpsim" compare --model "$model" --hw "$hw" $layout --max-seqlen "$L" --iterations 40 \
        --recompute dynamic --schedules 1f1b,adaptive,zb1 --no-figures "$@" 2>/dev/null | grep '^# best auto'; }
    line=$(run) || { echo "auto_grid: no result for $model $hw $L" >&2; exit 1; }
    old=$(run --batchings "$TEN,auto") || { echo "auto_grid: no result for $model $hw $L (ten methods)" >&2; exit 1; }
    # "# best auto (auto/zb1) over the best other row (dynamic-varlen/zb1): 1.046x"
    a=$(sed 's/.*best auto (\([^)]*\)).*/\1/' <<<"$line")
    o=$(sed 's/.*best other row (\([^)]*\)).*/\1/' <<<"$line")
    r=$(sed 's/.*: \([0-9.]*\)x$/\1/' <<<"$line")
    o10=$(sed 's/.*best other row (\([^)]*\)).*/\1/' <<<"$old")
    r10=$(sed 's/.*: \([0-9.]*\)x$/\1/' <<<"$old")
    printf '%-14s %-10s %6d  %-10s %-24s %6s  %-24s %6s\n' "$model" "$hw" "$L" "$a" "$o" "$r" "$o10" "$r10"
  done
done)
printf '%-14s %-10s %6s  %-10s %-24s %6s  %-24s %6s\n' model cluster maxlen "best auto" \
  "best other (every row)" ratio "best of the ten methods" ratio
echo "$rows"
awk '{ n++; a += log($(NF - 2)); b += log($NF)
       if (ma == "" || $(NF - 2) < ma) ma = $(NF - 2); if (mb == "" || $NF < mb) mb = $NF }
  END { printf "geometric mean over %d points: %.3fx over every other row (worst %.3fx), %.3fx over the ten methods (worst %.3fx)\n", n, exp(a / n), ma, exp(b / n), mb }' <<<"$rows"
