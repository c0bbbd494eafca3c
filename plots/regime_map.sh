#!/usr/bin/env bash
# The regime map (the planner issue's figure): which micro-batching wins at which maximum length.
# For each model and cluster, dpsim compare at max lengths 1k to the model's context (8k for
# GPT-6.7B, 16k for Llama-3.1-8B; 20 iterations, --recompute
# dynamic, schedules 1F1B, adaptive and ZB-H1); each method's best row that fits (over the
# schedules), as a speed-up over packing's best; one line per method, auto among them, drawn by
# dpsim plot sweep. Writes OUT.csv (model,max_seqlen,method,speedup) and OUT-<model>.png.
# usage: plots/regime_map.sh [build] [OUT]   (about a minute and a half here)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
OUT=${2:-regime-map}
# the methods drawn: DynaPipe's DP (whole rows and varlen), the packers, the new candidates, auto
METHODS="dynamic dynamic-varlen packing-ffd-varlen packing-wlb token packing-quarter packing-dp auto"
configs=("gpt-6.7b-16l p4d 8192 --pp 4" "llama3.1-8b dgx-h100 16384 --pp 4 --dp 2")
echo "model,max_seqlen,method,speedup" >"$OUT.csv"
for cfg in "${configs[@]}"; do
  read -r model hw longest layout <<<"$cfg"
  for ((L = 1024; L <= longest; L *= 2)); do
    # shellcheck disable=SC2086
    "$B/dpsim" compare --model "$model" --hw "$hw" $layout --max-seqlen "$L" --iterations 20 \
      --recompute dynamic --schedules 1f1b,adaptive,zb1 --no-figures 2>/dev/null |
      awk -v model="$model" -v L="$L" -v methods="$METHODS" '
        /^[a-z]/ && $3 ~ /^[0-9]+$/ && $(NF-1) == "no" { if ($3 > best[$1]) best[$1] = $3 }
        END {
          if (!best["packing"]) { print "regime_map: packing did not fit at " L > "/dev/stderr"; exit 1 }
          n = split(methods, m, " ")
          for (i = 1; i <= n; i++)
            if (best[m[i]]) printf "%s,%d,%s,%.4f\n", model, L, m[i], best[m[i]] / best["packing"]
        }' >>"$OUT.csv"
  done
  "$B/dpsim" plot sweep "$OUT.csv" --x max_seqlen --y speedup --series method --where "model=$model" \
    --logx --title "$model on $hw ($layout): each method's best schedule over packing's" \
    --xlabel "maximum sequence length (tokens)" --ylabel "speed-up over packing" -o "$OUT-$model.png"
done
column -s, -t "$OUT.csv"
