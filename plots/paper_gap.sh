#!/usr/bin/env bash
# The gap to the paper's headline, measured: docs/paper.md's table of controlled changes at the
# small cluster's headline points (GPT-6.7B 16L at max length 8192, T5-11B 12+12 at 4096), each
# one change against `make paper`'s artifact and dynapipe columns.
#
#   plots/paper_gap.sh [PAPER_OUT]    (default paper-out: a finished `make paper`; needs its
#                                      paper.csv and traces)
#
# Rows (tokens/s of the baseline → DynaPipe, and the speed-up):
#   paper       as in make paper (paper.csv)
#   batch       the baseline packing each batch on its own (packing-batch) instead of Megatron's
#   recompute   DynaPipe with the best single recompute mode for the whole trace (one that leaves
#               no iteration out) instead of one per iteration
#   memory      DynaPipe on 40,960 MB like the baseline instead of 36,000 (GPT)
#   dec512      the T5 decoder cap at 512 for both (paper.csv's dec512 variant)
#   trace       the shipped FLANv2-like trace instead of the Flan2021 zero-shot preset
# Every run is `dpsim sim --keep-going` over the whole trace at the point's configurations; a
# run that leaves an iteration out counts as 0 (its throughput would be of fewer tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
DPSIM=${DPSIM:-build/dpsim}
OUT=${1:-paper-out}
CSV=$OUT/paper.csv
[ -s "$CSV" ] || { echo "paper_gap: $CSV is missing: run make paper first" >&2; exit 1; }

# field NAME ROW: a paper.csv column by its header name
header=$(head -n 1 "$CSV")
field() {
  local i
  i=$(printf '%s\n' "$header" | tr ',' '\n' | grep -nx "$1" | cut -d: -f1)
  printf '%s\n' "$2" | cut -d, -f"$i"
}
row() { # model variant len method
  awk -F, -v m="$1" -v v="$2" -v l="$3" -v t="$4" \
    '$1 == m && $2 == "small" && $4 == "maxlen" && $5 == v && $6 == l && $8 == t' "$CSV"
}
thr() { # sim options...: the throughput of the whole trace; 0 when an iteration was left out
  local json
  json=$("$DPSIM" sim --json --iterations 0 --keep-going "$@" 2>/dev/null)
  if printf '%s' "$json" | grep -q '"failed_iterations":[[:space:]]*0[,}]'; then
    printf '%s' "$json" | sed -n 's/.*"throughput_tokens_per_s":[[:space:]]*\([0-9.e+]*\).*/\1/p' |
      head -n 1
  else
    echo 0
  fi
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0) printf "%.2fx", b / a; else print "-" }'; }

for model in gpt-6.7b-16l t5-11b-12l; do
  case $model in
    gpt*) len=8192; dec=512; trace=$OUT/flan2021-zs-gpt2.csv ;;
    *) len=4096; dec=4096; trace=$OUT/flan2021-zs-t5.csv ;;
  esac
  art=$(row "$model" base "$len" artifact)
  dyn=$(row "$model" base "$len" dynapipe)
  [ -n "$art" ] && [ -n "$dyn" ] || { echo "paper_gap: no $model point at $len in $CSV" >&2; exit 1; }
  cfg() { # the configuration options of a paper.csv row
    echo --tp "$(field tp "$1")" --pp "$(field pp "$1")" --dp "$(field dp "$1")" \
      --zero "$(field zero "$1")" --mbs "$(field mbs "$1")" --batching "$(field batching "$1")" \
      --schedule "$(field schedule "$1")"
  }
  common=(--model "$model" --max-seqlen "$len" --max-dec-seqlen "$dec" --global-tokens 65536 --no-sp)
  a0=$(field throughput_tokens_per_s "$art"); d0=$(field throughput_tokens_per_s "$dyn")
  # shellcheck disable=SC2046
  arun() { thr "${common[@]}" $(cfg "$art") --recompute "$(field recompute "$art")" --mem-limit 40960 "$@"; }
  # shellcheck disable=SC2046
  drun() { thr "${common[@]}" $(cfg "$dyn") --mem-limit 36000 "$@"; }
  echo "# $model at max length $len (small cluster, 4 A100-40GB): baseline -> DynaPipe tokens/s"
  printf '%-10s %10s %10s %8s\n' change baseline dynapipe speedup
  printf '%-10s %10.0f %10.0f %8s\n' paper "$a0" "$d0" "$(ratio "$a0" "$d0")"
  b=$(arun --trace "$trace" --batching packing-batch)
  printf '%-10s %10.0f %10.0f %8s\n' batch "$b" "$d0" "$(ratio "$b" "$d0")"
  best=0 bestmode=-
  for rc in none selective full; do
    t=$(drun --trace "$trace" --recompute "$rc")
    t=${t:-0}
    if awk -v t="$t" -v b="$best" 'BEGIN { exit !(t > b) }'; then best=$t bestmode=$rc; fi
  done
  printf '%-10s %10.0f %10.0f %8s  (%s)\n' recompute "$a0" "$best" "$(ratio "$a0" "$best")" "$bestmode"
  if [ "${model#gpt}" != "$model" ]; then
    m=$(drun --trace "$trace" --recompute dynamic --mem-limit 40960)
    printf '%-10s %10.0f %10.0f %8s\n' memory "$a0" "$m" "$(ratio "$a0" "$m")"
  else
    a5=$(field throughput_tokens_per_s "$(row "$model" dec512 "$len" artifact)")
    d5=$(field throughput_tokens_per_s "$(row "$model" dec512 "$len" dynapipe)")
    printf '%-10s %10.0f %10.0f %8s\n' dec512 "$a5" "$d5" "$(ratio "$a5" "$d5")"
  fi
  at=$(arun --trace traces/flanv2-100k.csv)
  dt=$(drun --trace traces/flanv2-100k.csv --recompute dynamic)
  printf '%-10s %10.0f %10.0f %8s\n' trace "$at" "$dt" "$(ratio "$at" "$dt")"
done
