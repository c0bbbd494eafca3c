#!/usr/bin/env bash
# make figures: re-runs the commands behind the docs' quick figures (about two minutes here) and
# compares each figure with the value the docs quote, within its stated noise; prints one line per
# figure and exits 1 if any moved, naming the page to update. The simulations are deterministic,
# so their noise is the rounding of the printed figure (0.1%); timings are not checked here (they
# are ratios in make bench). Add a figure: a run (its command, once) and a check (where the docs
# quote it, the value they quote, the tolerance in %, the awk that reads it from the run's output).
# usage: tools/figures.sh [build]
set -uo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# the runs, each once: name, then the command
run() {
  local name=$1
  shift
  [ -f "$OUT/$name" ] || "$@" >"$OUT/$name" 2>/dev/null || echo "figures: '$*' failed" >&2
}
run demo "$B/dpsim" compare --no-figures
run tune8 "$B/dpsim" tune --gpus 8 -q
run tuned "$B/dpsim" compare --tuned --gpus 8 --no-figures
run grid bash plots/auto_grid.sh "$B"
run pairgrid bash plots/auto_pair_grid.sh "$B"
run regime bash plots/regime_map.sh "$B" "$OUT/regime-map"
run toy "$B/dpsim" sim --toy-costs 1,2,1 --schedule zb1 --pp 4 --microbatches 8
run toyzbv "$B/dpsim" sim --toy-costs 1,2,1 --schedule zbv
run toydpv "$B/dpsim" sim --toy-costs 1,2,1 --schedule dualpipev
run gptzbv "$B/dpsim" sim --schedule zbv --recompute dynamic --iterations 8
run longctx bash plots/long_context.sh "$B"
run cotsched bash plots/long_cot_schedules.sh "$B"
# load-independent resources: the 16,384-GPU run's peak RSS (docs/scheduling.md), in MB
run scale bash -c "/usr/bin/time -f 'peak_rss_kb %M' '$B/dpsim' sim --model gpt-175b-16l --pp 16 --tp 8 \
  --dp 128 --global-tokens 4194304 --hw dgx-h100 --analytic --recompute full --iterations 1 2>&1 >/dev/null"

moved=0
# check RUN PAGE WHAT EXPECTED TOLERANCE% AWK
check() {
  local name=$1 page=$2 what=$3 want=$4 tol=$5 prog=$6 got
  got=$(awk "$prog" "$OUT/$name" | head -1)
  if [ -z "$got" ]; then
    printf 'MISSING %-11s %-52s %14s %14s  (%s)\n' "$name" "$what" "$want" "-" "$page"
    moved=$((moved + 1))
    return
  fi
  if awk -v a="$got" -v b="$want" -v t="$tol" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d <= t / 100 * (b < 0 ? -b : b)) }'; then
    printf 'same    %-11s %-52s %14s %14s\n' "$name" "$what" "$want" "$got"
  else
    printf 'MOVED   %-11s %-52s %14s %14s  (update %s)\n' "$name" "$what" "$want" "$got" "$page"
    moved=$((moved + 1))
  fi
}
printf '%-7s %-11s %-52s %14s %14s\n' "" run figure docs now
check demo README.md "packing/1f1b tokens/s (the baseline)" 19658 0.1 '$1 == "packing" && $2 == "1f1b" { print $3 }'
check demo README.md "dynamic/adaptive tokens/s" 26356 0.1 '$1 == "dynamic" && $2 == "adaptive" { print $3 }'
check demo README.md "packing-dp/adaptive tokens/s" 27884 0.1 '$1 == "packing-dp" && $2 == "adaptive" { print $3 }'
check demo README.md "auto/adaptive tokens/s" 27888 0.1 '$1 == "auto" && $2 == "adaptive" { print $3 }'
check tune8 docs/results.md "tune --gpus 8: dynamic's best tokens/s" 62795 0.1 '$1 == "dynamic" { print $2 }'
check tune8 docs/results.md "tune --gpus 8: packing-ffd-varlen's best" 66452 0.1 '$1 == "packing-ffd-varlen" { print $2 }'
check tune8 docs/results.md "tune --gpus 8: configurations pruned" 1186 0 '/pruned/ { print $2 }'
check tuned docs/quickstart.md "compare --tuned: packing tokens/s" 48370 0.1 '$1 == "packing" { print $3 }'
check tuned docs/quickstart.md "compare --tuned: dynamic tokens/s" 62238 0.1 '$1 == "dynamic" { print $3 }'
check grid README.md "auto grid: geomean over the ten methods" 1.035 0.1 '/geometric mean/ { sub(/x$/, "", $13); print $13 }'
check grid README.md "auto grid: worst over every other row" 1.000 0.1 '/geometric mean/ { gsub(/[()x,]/, "", $12); print $12 }'
check pairgrid docs/scheduling.md "auto x auto: geomean over the best single pair" 1.001 0.1 '/geometric mean/ { sub(/x$/, "", $6); print $6 }'
check regime README.md "regime map: llama3.1-8b 1024 packing-dp / packing" 1.669 0.1 '$1 == "llama3.1-8b" && $2 == 1024 && $3 == "packing-dp" { print $4 }'
check regime docs/scheduling.md "regime map: gpt 4096 auto / packing" 1.7859 0.1 '$1 == "gpt-6.7b-16l" && $2 == 4096 && $3 == "auto" { print $4 }'
check scale docs/scheduling.md "16,384-GPU sim: peak RSS, MB" 53 10 '$1 == "peak_rss_kb" { print $2 / 1000 }'
check toy README.md "textbook ZB-H1 bubble, %" 11.11 0.1 '/^pipeline bubble/ { sub(/%$/, "", $6); print $6 }'
check toyzbv docs/teaching.md "textbook ZB-V bubble, %" 5.88 0.1 '/^pipeline bubble/ { sub(/%$/, "", $6); print $6 }'
check toydpv docs/teaching.md "textbook DualPipeV bubble, %" 11.11 0.1 '/^pipeline bubble/ { sub(/%$/, "", $6); print $6 }'
check gptzbv docs/scheduling.md "GPT-6.7B, 4 A100 stages: zbv tokens/s" 27856 0.1 '/^throughput \(real/ { print $4 }'
check cotsched docs/scheduling.md "long-CoT 32k: zbv, packing-wlb, mixed" 98558 0.1 '$1 == 32768 && $2 == "packing-wlb" && $3 == "zbv" && $4 == "mixed" { print $5 }'
check cotsched docs/scheduling.md "long-CoT 128k: auto, dynamic-varlen, mixed" 92982 0.1 '$1 == 131072 && $2 == "dynamic-varlen" && $3 == "auto" && $4 == "mixed" { print $5 }'
check longctx README.md "long context: 8B, 64 GPUs, 128k, cp auto" 468126 0.1 '$1 == "llama3.1-8b" && $2 == 64 && $6 == 131072 { print $13 }'
check longctx README.md "long context: 70B, 32k, cp 2" 43977 0.1 '$1 == "llama3.1-70b" && $6 == 32768 { print $9 }'
if [ "$moved" -gt 0 ]; then
  echo "figures: $moved figure(s) moved or missing: re-measure them in the pages named" >&2
  exit 1
fi
echo "figures: every checked figure as the docs quote it"
