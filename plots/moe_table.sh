#!/usr/bin/env bash
# Mixtures of experts on H100 (#51's table): Qwen3-30B-A3B (128 experts, 8 a token) and
# Mixtral-8x7B (8 experts, 2 a token) on 64 and 256 GPUs of dgx-h100, DeepSeek-V3 (256 experts, 8 a
# token, latent attention; full recompute, the only mode its activations fit in) on 256, the FLAN
# trace cut at 4k,
# tokens/s of Megatron's packing, DynaPipe's dynamic batching and auto, with expert parallelism ep,
# the token exchange serial under 1F1B or overlapped (--overlap dp,zero,ep: inside the pairs of a
# forward and another micro-batch's backward, sim.h) under 1F1B and DualPipeV, NCCL's all-to-all
# (and for DeepSeek-V3 DeepEP's dispatch, --dispatcher deepep, under its group limit), a uniform router
# and a skewed one (--routing skewed:0.5), and the share of the iteration that routing imbalance
# costs under packing, serial (1 - its throughput over the same run with --routing even, the
# what-if of a perfectly even router; packing's micro-batches do not depend on the costs, so the
# two runs plan the same ones; with the exchange overlapped a faster compute also hides less).
# usage: plots/moe_table.sh [build]   (about 25 minutes here: auto plans each candidate)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
# model, GPUs, tp, pp, dp, ep, tokens per iteration, recompute (-: compare's default)
configs=("qwen3-30b-a3b 64 1 2 32 8 2097152 -" "qwen3-30b-a3b 64 1 2 32 32 2097152 -"
         "qwen3-30b-a3b 256 1 4 64 8 8388608 -" "qwen3-30b-a3b 256 1 4 64 64 8388608 -"
         "mixtral-8x7b 64 2 4 8 8 2097152 -" "mixtral-8x7b 256 2 4 32 8 8388608 -"
         "deepseek-v3 256 1 16 16 16 8388608 full" "deepseek-v3 256 1 8 32 32 8388608 full")
row() { # the tokens/s of batching $1 under schedule $2 in a compare table
  awk -v b="$1" -v s="$2" '$1 == b && $2 == s { print ($3 ~ /^[0-9]+$/ ? $3 : "-") }'
}
printf '%-14s %5s %-11s %4s %-11s %-7s %-9s %-8s %9s %9s %9s %10s\n' model gpus "tp x pp x dp" ep \
  routing overlap schedule dispatch packing dynamic auto imbalance
for cfg in "${configs[@]}"; do
  read -r model gpus tp pp dp ep tokens rc <<<"$cfg"
  recompute=()
  [ "$rc" = - ] || recompute=(--recompute "$rc")
  variants=("uniform serial 1f1b alltoall" "uniform overlap 1f1b alltoall"
            "uniform overlap dualpipev alltoall" "skewed:0.5 serial 1f1b alltoall")
  [ "$model" = deepseek-v3 ] && # its group-limited router, under DeepEP's dispatch
    variants+=("uniform serial 1f1b deepep" "uniform overlap dualpipev deepep")
  for variant in "${variants[@]}"; do
    read -r routing ov sched dispatcher <<<"$variant"
    overlap=dp,zero
    [ "$ov" = overlap ] && overlap=dp,zero,ep
    run() {
      "$B/dpsim" compare --model "tests/data/hf/$model.json" --hw dgx-h100 --tp "$tp" --pp "$pp" \
        --dp "$dp" --ep "$ep" --overlap "$overlap" --dispatcher "$dispatcher" --max-seqlen 4096 \
        --global-tokens "$tokens" \
        --iterations 4 --schedules "$sched" --no-figures "${recompute[@]}" "$@" 2>/dev/null
    }
    out=$(run --batchings packing,dynamic,auto --routing "$routing")
    pack=$(echo "$out" | row packing "$sched") share=-
    if [ "$ov" = serial ]; then
      even=$(run --batchings packing --routing even | row packing "$sched")
      share=$(awk -v a="$pack" -v b="$even" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2f%%", 100 * (1 - a / b); else printf "-" }')
    fi
    printf '%-14s %5d %-11s %4d %-11s %-7s %-9s %-8s %9s %9s %9s %10s\n' "$model" "$gpus" \
      "$tp x $pp x $dp" "$ep" "$routing" "$ov" "$sched" "$dispatcher" "$pack" \
      "$(echo "$out" | row dynamic "$sched")" \
      "$(echo "$out" | row auto "$sched")" "$share"
  done
done
