#!/usr/bin/env bash
# The long-context question (the long-context issue's table): Llama-3.1-8B on 16 and 64 H100 and
# Llama-3.1-70B on 64, the long chain-of-thought mix (trace gen --mix long-cot) cut at 16k to 128k,
# each layout's dp x cp GPUs split as context parallelism 1, 2, 4 (ring). Each cell is the best
# of packing-ffd-varlen, packing-wlb, dynamic-varlen and auto under 1F1B with --recompute
# fastest, in tokens/s, and the batching that won (on a tie the first listed: auto then chose
# it); "-" where none fits or plans. Then the same batchings with --cp auto (a group of up to 4 of
# those GPUs, the rest data parallelism, runs each micro-batch at its own degree), and DynaPipe's
# whole-row dynamic batching at the best fixed cp of the three and with --cp auto.
# usage: plots/long_context.sh [build]   (about half a minute here)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
"$B/dpsim" trace gen --mix long-cot -n 20000 --seed 1 -o "$tmp/cot.csv" 2>/dev/null
# the fastest row that fits of a compare table: "tokens/s (batching)", or "-"
best_row() {
  awk '/^[a-z]/ && $3 ~ /^[0-9]+$/ && $(NF-1) == "no" { if ($3 > t) { t = $3; b = $1 } }
       END { if (t) printf "%d (%s)", t, b; else printf "-" }'
}
# model, GPUs, tp, pp, the GPUs left for dp x cp, tokens per iteration
configs=("llama3.1-8b 16 2 2 4 1048576" "llama3.1-8b 64 2 2 16 4194304" "llama3.1-70b 64 8 4 2 4194304")
printf '%-13s %5s %-9s %7s' model gpus "tp x pp" maxlen
for cp in 1 2 4; do printf '  %-30s' "cp $cp"; done
printf '  %-30s  %-22s  %s\n' "cp auto" "dynamic, best fixed cp" "dynamic, cp auto"
for cfg in "${configs[@]}"; do
  read -r model gpus tp pp rest tokens <<<"$cfg"
  group=$((rest < 4 ? rest : 4))
  for L in 16384 32768 65536 131072; do
    printf '%-13s %5d %-9s %7d' "$model" "$gpus" "$tp x $pp" "$L"
    fixed=0 fixed_cp=0
    for cp in 1 2 4; do
      if [ $((rest % cp)) -ne 0 ] || [ "$cp" -gt "$rest" ]; then printf '  %-30s' "(dp x cp = $rest)"; continue; fi
      dyn=$("$B/dpsim" compare --model "$model" --hw dgx-h100 --tp "$tp" --pp "$pp" --dp $((rest / cp)) \
              --cp "$cp" --trace "$tmp/cot.csv" --max-seqlen "$L" --global-tokens "$tokens" \
              --iterations 4 --recompute fastest --schedules 1f1b --no-figures \
              --batchings dynamic 2>/dev/null | best_row | awk '{ print $1 + 0 }')
      if [ "$dyn" -gt "$fixed" ]; then fixed=$dyn fixed_cp=$cp; fi
      best=$("$B/dpsim" compare --model "$model" --hw dgx-h100 --tp "$tp" --pp "$pp" --dp $((rest / cp)) \
               --cp "$cp" --trace "$tmp/cot.csv" --max-seqlen "$L" --global-tokens "$tokens" \
               --iterations 4 --recompute fastest --schedules 1f1b --no-figures \
               --batchings packing-ffd-varlen,packing-wlb,dynamic-varlen,auto 2>/dev/null | best_row)
      printf '  %-30s' "$best"
    done
    auto=$("$B/dpsim" compare --model "$model" --hw dgx-h100 --tp "$tp" --pp "$pp" --dp $((rest / group)) \
             --cp auto --cp-max "$group" --trace "$tmp/cot.csv" --max-seqlen "$L" --global-tokens "$tokens" \
             --iterations 4 --recompute fastest --schedules 1f1b --no-figures \
             --batchings packing-ffd-varlen,packing-wlb,dynamic-varlen,auto 2>/dev/null | best_row)
    best=$("$B/dpsim" compare --model "$model" --hw dgx-h100 --tp "$tp" --pp "$pp" --dp $((rest / group)) \
             --cp auto --cp-max "$group" --trace "$tmp/cot.csv" --max-seqlen "$L" --global-tokens "$tokens" \
             --iterations 4 --recompute fastest --schedules 1f1b --no-figures \
             --batchings dynamic 2>/dev/null | best_row | awk '{ print $1 }')
    printf '  %-30s  %-22s  %s\n' "$auto (group $group)" "$fixed (cp $fixed_cp)" "$best (group $group)"
  done
done
