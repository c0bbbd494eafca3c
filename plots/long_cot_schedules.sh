#!/usr/bin/env bash
# The schedules on the long chain-of-thought mix (trace gen --mix long-cot: instructions, chains
# of thought to 32k, a long-context tail to 128k): Llama-3.1-8B on 16 H100, tp 2 x pp 4 x dp 2,
# 1M tokens an iteration, cut at 32k and at 128k, DynaPipe's dynamic-varlen and WLB-LLM's
# packing-wlb, each under 1F1B, adaptive, ZB-H1, ZB-V, DualPipeV, auto-loop (the one-chunk
# schedule per iteration), auto-v (the V one per iteration) and auto (either family, the placement
# chosen by the first iteration), with --recompute fastest (each iteration's fastest mode that fits) and mixed
# (a mode per micro-batch, relaxed from the iteration's). Per row: tokens/s, the pipeline bubble,
# the peak memory (MB), and with fastest the modes the iterations took (none/selective/full).
# (A few seconds here.)
# usage: plots/long_cot_schedules.sh [build]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$B/dpsim" trace gen --mix long-cot -n 20000 --seed 1 -o "$tmp/cot.csv" 2>/dev/null
printf '%-8s %-15s %-10s %-8s %10s %7s %8s  %s\n' maxlen batching schedule recompute tokens/s bubble peak_MB modes
for L in 32768 131072; do for R in fastest mixed; do
  "$B/dpsim" compare --model llama3.1-8b --hw dgx-h100 --tp 2 --pp 4 --dp 2 --trace "$tmp/cot.csv" \
    --max-seqlen "$L" --global-tokens 1048576 --iterations 4 --recompute "$R" \
    --schedules 1f1b,adaptive,zb1,zbv,dualpipev,auto-loop,auto-v,auto --batchings dynamic-varlen,packing-wlb \
    --no-figures 2>/dev/null |
    awk -v L="$L" -v R="$R" '
      /^# .*recompute per iteration/ { sub(/:$/, "", $2); m = $7 "/" $9 "/" $11; gsub(/,/, "", m); modes[$2] = m; next }
      /^[a-z]/ && ($3 ~ /^[0-9]+$/ || $3 == "OOM") { row[++n] = $1 " " $2; tps[n] = $3; bub[n] = $8; peak[n] = $10 }
      END { for (i = 1; i <= n; i++) { split(row[i], k, " ")
              printf "%-8s %-15s %-10s %-8s %10s %7s %8s  %s\n", L, k[1], k[2], R, tps[i], tps[i] == "OOM" ? "-" : bub[i] "%", peak[i], modes[k[1] "/" k[2]] } }'
done; done
