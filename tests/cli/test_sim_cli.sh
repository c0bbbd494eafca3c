#!/usr/bin/env bash
# End-to-end tests of `dpsim plan`, `dpsim sim` and `dpsim compare`.
. "$(dirname "$0")/lib.sh"
G=tests/cli/golden

# --- plan ------------------------------------------------------------------------------------
expect "plan --help lists the plan options" 0 "--batching B" -- "$DPSIM" plan --help
expect "plan writes a plan" 0 "wrote 5 iterations" -- "$DPSIM" plan --iterations 5 -o "$TMP/plan.json"
check "the plan has the contract's keys" grep -q '"instructions"' "$TMP/plan.json"
check "the plan carries the DP objective" grep -q '"objective":{"value"' "$TMP/plan.json"
expect "plan summary shows padding efficiency" 0 "padding efficiency" -- "$DPSIM" plan --iterations 3
expect "plan with T5 on 8 stages" 0 "decoder" -- "$DPSIM" plan --model t5-11b-24l --tp 8 --pp 8 --iterations 2
expect "unknown batching" 2 "unknown --batching" -- "$DPSIM" plan --batching magic
expect "pp larger than the layers" 2 "more pipeline stages than" -- "$DPSIM" plan --pp 32
expect "mbs 0 is refused" 2 "--mbs \"0\"" -- "$DPSIM" plan --mbs 0
expect "global tokens smaller than one sample" 1 "larger than --global-tokens 100" -- "$DPSIM" plan --global-tokens 100
expect "chunks without interleaved" 2 "--chunks applies" -- "$DPSIM" plan --chunks 2
expect "a model that does not fit" 1 "exceeds the .* MB of device memory" -- "$DPSIM" plan --model gpt-175b-16l --hw a100-40gb --pp 2 --analytic

# --- sim ---------------------------------------------------------------------------------------
expect "sim of the written plan" 0 "iterations +5" -- "$DPSIM" sim --plan "$TMP/plan.json"
expect "sim --json" 0 '"bubble_fraction"' -- "$DPSIM" sim --plan "$TMP/plan.json" --json
"$DPSIM" sim --plan "$TMP/plan.json" --json >"$TMP/m1.json" 2>/dev/null
"$DPSIM" sim --iterations 5 --json >"$TMP/m2.json" 2>/dev/null
check "plan file and direct run give the same timeline" bash -c "grep timeline_hash '$TMP/m1.json' | cmp -s - <(grep timeline_hash '$TMP/m2.json')"
"$DPSIM" sim --iterations 5 --json >"$TMP/m3.json" 2>/dev/null
check "same inputs, byte-identical metrics (but the planner's wall time)" bash -c "diff <(grep -v plan_ms '$TMP/m2.json') <(grep -v plan_ms '$TMP/m3.json')"
expect "sim writes a timeline and a Chrome trace" 0 "" -- "$DPSIM" sim --iterations 2 --timeline "$TMP/t.csv" --chrome "$TMP/t.json"
check "timeline CSV header" bash -c "head -1 '$TMP/t.csv' | grep -q '^iteration,stage,op,mb,start_us,end_us'"
check "Chrome trace has ops and memory counters" bash -c "grep -q '\"ph\": \"X\"' '$TMP/t.json' && grep -q '\"ph\": \"C\"' '$TMP/t.json'"
for s in gpipe 1f1b adaptive zb1; do
  expect "sim --schedule $s" 0 "timeline hash" -- "$DPSIM" sim --schedule "$s" --iterations 3
done
expect "sim --schedule interleaved" 0 "timeline hash" -- "$DPSIM" sim --schedule interleaved --chunks 2 --iterations 3
expect "link what-if changes the result" 0 "timeline hash" -- "$DPSIM" sim --iterations 3 --link-latency-us 5000 --link-gbps 10
expect "ascii golden: 2 stages, 2 micro-batches, 1F1B" 0 "" -- "$DPSIM" sim --model gpt-tiny --hw cpu --analytic --pp 2 --trace $G/two_samples.csv --global-tokens 128 --batching padding --mbs 1 --ascii --ascii-width 48
check "ascii matches the golden file" bash -c "tail -3 '$TMP/out' | diff - $G/ascii_1f1b_2x2.txt"
printf '{"version": 1, "pp": 2, "iterations": [{"microbatches": [], "stages": [{"stage": 0, "instructions": []}]}]}' >"$TMP/bad.json"
expect "plan for the wrong rank count" 1 "has 1 stage lists, pp x dp = 2" -- "$DPSIM" sim --plan "$TMP/bad.json"
expect "malformed plan file" 1 "nope.json: cannot open" -- "$DPSIM" sim --plan "$TMP/nope.json"

# --- compare -------------------------------------------------------------------------------------
expect "compare has every row" 0 "dynamic +adaptive" -- "$DPSIM" compare --iterations 20 --out "$TMP/figs"
for b in padding packing token dynamic; do
  for s in 1f1b adaptive; do grep -Eq "^$b +$s " "$TMP/out" || not_ok "compare row $b/$s"; done
done
check "throughput.png" is_png "$TMP/figs/throughput.png" 10000
check "timeline.png" is_png "$TMP/figs/timeline.png" 10000
check "memory.png" is_png "$TMP/figs/memory.png" 10000
expect "compare --json" 0 '"speedup_vs_packing"' -- "$DPSIM" compare --iterations 5 --no-figures --json
expect "compare, more schedules" 0 "zb1" -- "$DPSIM" compare --iterations 5 --no-figures --schedules 1f1b,zb1,gpipe --batchings packing,dynamic
expect "compare, unknown schedule" 2 "unknown schedule" -- "$DPSIM" compare --schedules 1f1b,fast

finish
