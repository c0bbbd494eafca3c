#!/usr/bin/env bash
# --batching auto --schedule auto (per iteration, the fastest fitting pair) against the best single
# (batching, schedule) pair on auto_grid.sh's grid: two models on two clusters, max lengths 1k-8k,
# 40 iterations, --recompute dynamic, the pairs every batching but auto and the pack-dataset ones
# under 1F1B, adaptive, ZB-H1, ZB-V and DualPipeV (compare's rows). One row per point: auto's throughput, the best
# pair's, their ratio, auto's planning ms per iteration, and the headroom: the most any choice per
# iteration could gain over the best pair on its placement, 1 / (1 - the least pipeline idle of
# its devices, as a share of the pipeline's time) / its padding efficiency (no iteration ends
# before its busiest device's work and the gradient sync and optimizer step after the pipeline,
# the same whatever is chosen, given the same work per real token; "-" where the best pair
# recomputes, which another choice might not); then the geometric means and the worst.
# usage: plots/auto_pair_grid.sh [build]   (about two minutes here)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
configs=("gpt-6.7b-16l p4d --pp 4" "llama3-8b dgx-h100 --pp 4 --dp 2")
rows=$(for cfg in "${configs[@]}"; do
  read -r model hw layout <<<"$cfg"
  for L in 1024 2048 4096 8192; do
    common=(--model "$model" --hw "$hw" $layout --max-seqlen "$L" --iterations 40 --recompute dynamic)
    best=$("$B/dpsim" compare "${common[@]}" --schedules 1f1b,adaptive,zb1,zbv,dualpipev --no-figures --json 2>/dev/null |
      python3 -c '
import json, sys
rows = [r for r in json.load(sys.stdin)["rows"] if r["batching"] != "auto" and r.get("feasible") and not r.get("oom")]
b = max(rows, key=lambda r: r["throughput_tokens_per_s"])
print("%.1f %s/%s" % (b["throughput_tokens_per_s"], b["batching"], b["schedule"]))') ||
      { echo "auto_pair_grid: no compare result for $model $hw $L" >&2; exit 1; }
    auto=$("$B/dpsim" sim "${common[@]}" --batching auto --schedule auto --json 2>/dev/null |
      python3 -c '
import json, sys
d = json.load(sys.stdin)
print("%.1f %.2f" % (d["throughput_tokens_per_s"] if d["feasible"] and not d["oom"] else 0, d["plan_ms_per_iteration"]))') ||
      { echo "auto_pair_grid: no sim result for $model $hw $L" >&2; exit 1; }
    read -r bt bname <<<"$best"
    read -r at ams <<<"$auto"
    head=$("$B/dpsim" sim "${common[@]}" --batching "${bname%/*}" --schedule "${bname#*/}" --json 2>/dev/null |
      python3 -c '
import json, sys
d = json.load(sys.stdin)
rc = d["recompute_microbatches"]
print("%.3f" % (1 / (1 - min(d["pipeline_bubble"])) / d["padding_efficiency"])
      if rc["selective"] + rc["full"] == 0 and d["padding_efficiency"] > 0 else "-")') ||
      { echo "auto_pair_grid: no sim result for $bname at $model $hw $L" >&2; exit 1; }
    printf '%-14s %-10s %6d %10.0f %-26s %10.0f %6.3f %8s %8s\n' "$model" "$hw" "$L" "$at" "$bname" "$bt" \
      "$(python3 -c "print($at / $bt)")" "$ams" "$head"
  done
done)
printf '%-14s %-10s %6s %10s %-26s %10s %6s %8s %8s\n' model cluster maxlen "auto/auto" "best single pair" \
  tokens/s ratio "plan ms" headroom
echo "$rows"
awk '{ n++; a += log($(NF - 2)); if ($NF != "-") { nh++; h += log($NF) } if (m == "" || $(NF - 2) < m) m = $(NF - 2); if ($(NF - 1) > p) p = $(NF - 1) }
  END { printf "geometric mean over %d points: %.3fx the best single pair (worst %.3fx); planning at most %.1f ms an iteration; headroom %.3fx (geometric mean over the %d points where the best pair recomputes nothing)\n", n, exp(a / n), m, p, nh ? exp(h / nh) : 0, nh }' <<<"$rows"
