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
expect "... on its measured profile without sequence parallelism, as it was measured, and says so" 0 \
  "no sequence parallelism: the profile was measured without it" -- \
  "$DPSIM" plan --model t5-11b-24l --tp 8 --pp 8 --iterations 1 -o "$TMP/t5tp8.json"
check "... and the plan's header says sp false" grep -q '"sp":false' "$TMP/t5tp8.json"
expect "... the same with --no-sp (the paper's runs)" 0 "wrote 1 iteration" -- \
  "$DPSIM" plan --model t5-11b-24l --tp 8 --pp 8 --no-sp --iterations 1 -o "$TMP/t5tp8b.json"
expect "unknown batching" 2 "unknown --batching" -- "$DPSIM" plan --batching magic
expect "pp larger than the layers" 2 "more pipeline stages than" -- "$DPSIM" plan --pp 32
expect "mbs 0 is refused" 2 "--mbs \"0\"" -- "$DPSIM" plan --mbs 0
expect "global tokens smaller than one sample" 1 "larger than --global-tokens 100" -- "$DPSIM" plan --global-tokens 100
expect "chunks without interleaved" 2 "--chunks applies" -- "$DPSIM" plan --chunks 2
expect "64 GPUs on one 8-GPU node are refused" 2 "= 64 GPUs, but h100 has 1 node of 8 GPUs" -- "$DPSIM" plan --hw h100 --analytic --tp 8 --pp 4 --dp 2 --iterations 1
expect "... unless asked for as a what-if" 0 "iterations +1" -- "$DPSIM" plan --hw h100 --analytic --tp 8 --pp 4 --dp 2 --iterations 1 --allow-oversubscribe
expect "a model that does not fit" 1 "exceeds the .* MB of device memory" -- "$DPSIM" plan --model gpt-175b-16l --hw a100-40gb --pp 2 --analytic

# --- sim ---------------------------------------------------------------------------------------
expect "sim of the written plan" 0 "iterations +5" -- "$DPSIM" sim --plan "$TMP/plan.json"
expect "sim --json" 0 '"bubble_fraction"' -- "$DPSIM" sim --plan "$TMP/plan.json" --json
"$DPSIM" sim --plan "$TMP/plan.json" --json >"$TMP/m1.json" 2>/dev/null
"$DPSIM" sim --iterations 5 --json >"$TMP/m2.json" 2>/dev/null
check "plan file and direct run give the same timeline" bash -c "grep timeline_hash '$TMP/m1.json' | cmp -s - <(grep timeline_hash '$TMP/m2.json')"
# a plan made with a model file given by a relative path runs from another folder (it embeds the
# model and cluster specs)
mkdir -p "$TMP/made" "$TMP/elsewhere"
"$DPSIM" models --show gpt-tiny >"$TMP/made/mine.json"
ABS_DPSIM=$(cd "$(dirname "$DPSIM")" && pwd)/$(basename "$DPSIM")
(cd "$TMP/made" && "$ABS_DPSIM" plan --model mine.json --hw cpu --trace "$OLDPWD/tests/cli/golden/two_samples.csv" \
   --global-tokens 128 --pp 2 -o plan.json >/dev/null 2>&1 && "$ABS_DPSIM" sim --plan plan.json --json >m.json 2>/dev/null)
cp "$TMP/made/plan.json" "$TMP/elsewhere/"
(cd "$TMP/elsewhere" && "$ABS_DPSIM" sim --plan plan.json --json >m.json 2>&1)
check "a plan copied to another folder simulates to the same timeline hash" \
  bash -c "grep -q timeline_hash '$TMP/made/m.json' && grep timeline_hash '$TMP/made/m.json' | cmp -s - <(grep timeline_hash '$TMP/elsewhere/m.json')"
"$DPSIM" sim --iterations 5 --json >"$TMP/m3.json" 2>/dev/null
check "same inputs, byte-identical metrics (but the planner's wall time)" bash -c "diff <(grep -v plan_ms '$TMP/m2.json') <(grep -v plan_ms '$TMP/m3.json')"
expect "sim writes a timeline and a Chrome trace" 0 "" -- "$DPSIM" sim --iterations 2 --timeline "$TMP/t.csv" --chrome "$TMP/t.json"
check "timeline CSV header" bash -c "head -1 '$TMP/t.csv' | grep -q '^iteration,stage,op,mb,start_us,end_us'"
check "Chrome trace has ops and memory counters" bash -c "grep -q '\"ph\": \"X\"' '$TMP/t.json' && grep -q '\"ph\": \"C\"' '$TMP/t.json'"
"$DPSIM" sim --iterations 1 --dp 2 --chrome "$TMP/t2.json" >/dev/null 2>&1
# every (pid, tid) of an op has a thread_name, and ops carry the micro-batch's shape
pairs() { grep -F "$1" "$TMP/t2.json" | sed -n 's/.*"pid": \([0-9]*\), "tid": \([0-9]*\).*/\1 \2/p' | sort -u; }
check "the Chrome trace names every thread it uses (stage, replica, stream)" \
  bash -c "$(declare -f pairs); TMP='$TMP'; [ -n \"\$(pairs '\"ph\": \"X\"')\" ] && [ -z \"\$(comm -23 <(pairs '\"ph\": \"X\"') <(pairs 'thread_name'))\" ]"
check "... with process names, micro-batch args and the all-reduce" \
  bash -c "grep -q '\"args\": {\"name\": \"replica 1\"}' '$TMP/t2.json' && grep -q '\"mbs\": [0-9]*, \"enc_len\"' '$TMP/t2.json' && grep -q '\"name\": \"ALLREDUCE0\", \"cat\": \"allreduce\"' '$TMP/t2.json'"
for s in gpipe 1f1b adaptive zb1; do
  expect "sim --schedule $s" 0 "timeline hash" -- "$DPSIM" sim --schedule "$s" --iterations 3
done
expect "sim --schedule interleaved" 0 "timeline hash" -- "$DPSIM" sim --schedule interleaved --chunks 2 --iterations 3
expect "link what-if changes the result" 0 "timeline hash" -- "$DPSIM" sim --iterations 3 --link-latency-us 5000 --link-gbps 10
expect "ascii golden: 2 stages, 2 micro-batches, 1F1B" 0 "" -- "$DPSIM" sim --model gpt-tiny --hw cpu --analytic --pp 2 --trace $G/two_samples.csv --global-tokens 128 --batching padding --mbs 1 --ascii --ascii-width 48
check "ascii matches the golden file" bash -c "tail -3 '$TMP/out' | diff - $G/ascii_1f1b_2x2.txt"
expect "ascii: every replica is drawn and labelled" 0 "replica 1 stage  1 \\|" -- "$DPSIM" sim --model gpt-tiny --hw cpu --analytic --pp 2 --dp 2 --trace $G/two_samples.csv --global-tokens 256 --batching padding --mbs 1 --ascii --ascii-width 48
expect "ascii: the order view for many micro-batches" 0 "^r0 s3 +\\|[FBfb]+\\|" -- "$DPSIM" sim --iterations 1 --ascii-order --ascii-width 60
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

# --- sweep -------------------------------------------------------------------------------------
expect "a 2 x 2 sweep" 0 "4 points, 0 already" -- "$DPSIM" sweep --grid 'max-seqlen=512,1024 batching=packing,dynamic' --iterations 3 -o "$TMP/sw.csv"
check "one CSV row per point plus the header" bash -c "[ \$(wc -l <'$TMP/sw.csv') = 5 ]"
check "the sweep CSV has every metric" bash -c "head -1 '$TMP/sw.csv' | grep -q '^max-seqlen,batching,throughput_tokens_per_s,padding_efficiency'"
expect "the sweep resumes: finished points are skipped" 0 "6 points, 4 already" -- "$DPSIM" sweep --grid 'max-seqlen=512,1024,2048 batching=packing,dynamic' --iterations 3 -o "$TMP/sw.csv"
check "after resuming, 6 rows" bash -c "[ \$(wc -l <'$TMP/sw.csv') = 7 ]"
expect "... saying its progress on a stderr that is no terminal, to the last point" 0 "dpsim sweep: 2/2 points done" -- "$DPSIM" sweep --grid 'max-seqlen=512 batching=packing,dynamic' --iterations 1 -o "$TMP/sw_prog.csv"
expect "a sweep into a file of another sweep is refused" 1 "exists with other columns" -- "$DPSIM" sweep --grid 'pp=2,4' --iterations 2 -o "$TMP/sw.csv"
check "the sweep records its configuration beside the CSV" bash -c "grep -qx 'iterations=3' '$TMP/sw.csv.config' && grep -q '^trace_hash=' '$TMP/sw.csv.config'"
expect "a resumed sweep with a different --model is refused, naming it" 1 "another configuration \\(model=gpt-6.7b-16l there, model=gpt-6.7b-32l here\\)" -- \
  "$DPSIM" sweep --model gpt-6.7b-32l --grid 'max-seqlen=512,1024,2048 batching=packing,dynamic' --iterations 3 -o "$TMP/sw.csv"
expect "... and so is one with --flash-attention (every plan option is in the configuration)" 1 "flash-attention=false there, flash-attention=true here" -- \
  "$DPSIM" sweep --flash-attention --grid 'max-seqlen=512,1024,2048 batching=packing,dynamic' --iterations 3 -o "$TMP/sw.csv"
check "rows are in grid order (the last key fastest), whatever order the workers finished in" \
  bash -c "[ \"\$(tail -n +2 '$TMP/sw.csv' | cut -d, -f1,2 | tr '\\n' ' ')\" = '512,packing 512,dynamic 1024,packing 1024,dynamic 2048,packing 2048,dynamic ' ]"
expect "sweep --gpus 8 keeps the layouts of 8 GPUs" 0 "7 points of 8 GPUs \\(of 32 in the grid\\)" -- \
  "$DPSIM" sweep --analytic --trace $G/two_samples.csv --global-tokens 128 --grid 'pp=1,2,4,8 dp=1,2,4,8 tp=1,2' --gpus 8 -o "$TMP/g8.csv"
check "... exactly those: every row's tp x pp x dp is 8, and all 7 are there" \
  bash -c "[ \$(tail -n +2 '$TMP/g8.csv' | awk -F, '\$1 * \$2 * \$3 == 8' | wc -l) = 7 ] && [ \$(tail -n +2 '$TMP/g8.csv' | wc -l) = 7 ]"
expect "a bad grid key" 2 "grid key \"speed\" is not a plan option" -- "$DPSIM" sweep --grid 'speed=1,2' -o "$TMP/sw2.csv"
expect "a bad grid value" 2 "unknown --batching" -- "$DPSIM" sweep --grid 'batching=magic' -o "$TMP/sw2.csv"
expect "plot the sweep" 0 "wrote" -- "$DPSIM" plot sweep "$TMP/sw.csv" --x max-seqlen --y throughput_tokens_per_s --series batching --logx -o "$TMP/sw.png"
check "sweep.png" is_png "$TMP/sw.png" 10000
# failed points are marked, not drawn at zero; legends name their key; a free dimension is warned of
M=throughput_tokens_per_s,padding_efficiency,encoder_padding_efficiency,decoder_padding_efficiency,bubble_fraction,peak_mem_mb,oom,feasible,iterations,time_s,mean_iteration_ms,mean_closed_form_ms,plan_ms_per_iteration,plan_ms_p90,events,error
printf 'pp,dp,batching,%s\n2,1,packing,100,1,1,0,0.1,1,0,1,1,1,1,1,1,1,1,""\n4,1,packing,0,1,1,0,0.1,1,0,0,1,1,1,1,1,1,1,"does not fit"\n8,1,packing,300,1,1,0,0.1,1,1,1,1,1,1,1,1,1,1,"oom"\n2,2,packing,150,1,1,0,0.1,1,0,1,1,1,1,1,1,1,1,""\n' "$M" >"$TMP/fail.csv"
expect "plot sweep: infeasible and OOM points are said to be left out" 0 "2 infeasible or out-of-memory points are not drawn" -- \
  env DPSIM_GNUPLOT_SCRIPT="$TMP/fail.gp" "$DPSIM" plot sweep "$TMP/fail.csv" --x pp --y throughput_tokens_per_s --series batching --where dp=1 -o "$TMP/fail.png"
check "... and the gnuplot data holds only the feasible point (x 2), not the failed x 4 and x 8" \
  bash -c "awk '/^\\\$s0 << EOD/ { on = 1; next } /^EOD/ { on = 0 } on' '$TMP/fail.gp' | tr '\\n' ' ' | grep -qx '2 100 '"
check "... the legend names the key" grep -q "title 'batching=packing'" "$TMP/fail.gp"
expect "a grid column left free is warned of" 0 "grid column dp varies but is neither" -- \
  "$DPSIM" plot sweep "$TMP/fail.csv" --x pp --y throughput_tokens_per_s --series batching -o "$TMP/fail2.png"
expect "a sweep split across 2 MPI ranks" 0 "2 MPI ranks" -- timeout 120 mpirun --allow-run-as-root --oversubscribe -x ASAN_OPTIONS=detect_leaks=0 -np 2 "$DPSIM" sweep --grid 'max-seqlen=512,1024 batching=packing,dynamic' --iterations 2 -J 1 -o "$TMP/swm.csv"
check "the MPI sweep wrote every point" bash -c "[ \$(wc -l <'$TMP/swm.csv') = 5 ]"
expect "timeline figure from a timeline CSV" 0 "wrote" -- "$DPSIM" plot timeline "$TMP/t.csv" --iteration 1 -o "$TMP/gantt.png"
check "gantt.png" is_png "$TMP/gantt.png" 10000

# --recompute dynamic: a mode per iteration, in the plan file, and the plan replays to the same timeline
expect "plan --recompute dynamic mixes modes at 8192" 0 "iterations per recompute mode +none [0-9]+, selective [1-9]" -- \
  "$DPSIM" plan --recompute dynamic --max-seqlen 8192 --iterations 12 -o "$TMP/dyn.json"
check "... each iteration of the plan names its mode" grep -q '"recompute":"selective"' "$TMP/dyn.json"
"$DPSIM" sim --recompute dynamic --max-seqlen 8192 --iterations 12 --json >"$TMP/dyn1.json" 2>/dev/null
"$DPSIM" sim --plan "$TMP/dyn.json" --json >"$TMP/dyn2.json" 2>/dev/null
check "... and simulates to the same timeline as the direct run" \
  bash -c "grep timeline_hash '$TMP/dyn1.json' | cmp -s - <(grep timeline_hash '$TMP/dyn2.json')"
expect "--recompute dynamic is for planning commands only" 2 "applies to plan, sim, compare and sweep" -- \
  "$DPSIM" cost --recompute dynamic --mbs 1 --seqlen 512
# --recompute mixed: dynamic's plans, then a mode per micro-batch (planner/mixed_recompute.h)
expect "plan --recompute mixed lowers micro-batches at 8192" 0 "micro-batches per recompute mode +none [1-9][0-9]*, selective [1-9]" -- \
  "$DPSIM" plan --recompute mixed --max-seqlen 8192 --iterations 12 -o "$TMP/mix.json"
check "... each micro-batch of the plan names its mode, no iteration" \
  bash -c "grep -q '\"recompute\":\"mixed\"' '$TMP/mix.json' && grep -q '\"recompute\":\"none\",\"pred_ms\"' '$TMP/mix.json' && ! grep -q 'model_flops\":[0-9.e+]*,\"recompute' '$TMP/mix.json'"
"$DPSIM" sim --recompute mixed --max-seqlen 8192 --iterations 12 --json >"$TMP/mix1.json" 2>/dev/null
"$DPSIM" sim --plan "$TMP/mix.json" --json >"$TMP/mix2.json" 2>/dev/null
check "... and simulates to the same timeline as the direct run" \
  bash -c "grep timeline_hash '$TMP/mix1.json' | cmp -s - <(grep timeline_hash '$TMP/mix2.json')"
check "... faster than dynamic's (the same micro-batches, fewer reruns)" \
  awk '/"time_s"/ { gsub(/[^0-9.e+-]/, "", $2); t[FILENAME] = $2 } END { exit !(t[ARGV[1]] < t[ARGV[2]]) }' "$TMP/mix1.json" "$TMP/dyn1.json"
expect "--recompute mixed is for planning commands only" 2 "mixed chooses a mode per micro-batch" -- \
  "$DPSIM" cost --recompute mixed --mbs 1 --seqlen 512
expect "--keep-going leaves out and names what does not fit" 0 "iterations left out +[1-9][0-9]* .*--keep-going" -- \
  "$DPSIM" sim --max-seqlen 8192 --iterations 12 --keep-going

# dpsim tune: the best configuration per method; the ranking is ordered, and a configuration of the
# space simulated directly (tp 1, pp 2, dp 2, mbs 1, selective recompute: it fits) is no better
expect "tune prints the best configuration of each method" 0 "^packing .*batching=packing schedule=" -- \
  "$DPSIM" tune --gpus 4 --iterations 2 --batchings packing,dynamic --jobs 2 -o "$TMP/rank.csv"
check "... and writes the ranking, best first" \
  awk -F, 'NR == 1 { ok = $1 == "rank"; for (i = 1; i <= NF; i++) c[$i] = i }
           NR > 1 && $c["feasible"] == 1 { fits++; t = $c["throughput_tokens_per_s"]; if (prev != "" && t > prev + 1e-6) ok = 0; prev = t }
           END { exit !(ok && NR > 100 && fits > 0) }' "$TMP/rank.csv"
BEST_PACK=$(awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
  NR > 1 && $2 == "packing" && $c["feasible"] == 1 { print $c["throughput_tokens_per_s"]; exit }' "$TMP/rank.csv")
"$DPSIM" sim --batching packing --tp 1 --pp 2 --dp 2 --zero 1 --mbs 1 --recompute selective \
  --iterations 2 --json >"$TMP/art.json" 2>/dev/null
check "... no slower than one of its configurations simulated alone" \
  awk -v best="$BEST_PACK" '/"throughput_tokens_per_s"/ { gsub(/[^0-9.]/, "", $2); v = $2 }
    /"oom":/ { oom = /true/ } END { exit !(v > 0 && !oom && best + 1e-6 >= v) }' "$TMP/art.json"
expect "tune refuses an option it searches" 2 "--pp is what tune searches" -- "$DPSIM" tune --pp 2
expect "compare --tuned: every method at its own best" 0 "# dynamic tuned: batching=dynamic" -- \
  "$DPSIM" compare --tuned --gpus 4 --tune-iterations 2 --iterations 4 --batchings packing,dynamic --no-figures --jobs 2

# Megatron's --pack-dataset: packing's padding efficiency against a next-fit written here (awk) over
# the shipped trace (GPT-6.7B 16L, which takes 8192 tokens: a sample is input + target, cut at 8192; every row is
# padded to 8192)
SRC=$(cd "$(dirname "$0")/../.." && pwd)
NEXTFIT=$(awk -F, 'NR > 1 { l = $2 + $3; if (l > 8192) l = 8192; tok += l;
                            if (rows == 0 || used + l > 8192) { rows++; used = 0 } used += l }
                   END { printf "%.6f", tok / (rows * 8192) }' "$SRC/traces/flanv2-100k.csv")
"$DPSIM" sim --batching packing --max-seqlen 8192 --model gpt-6.7b-16l --pp 4 --global-tokens 65536 \
  --json >"$TMP/pack.json" 2>/dev/null
check "packing's padding efficiency at 8192 is the pack-then-batch next-fit's ($NEXTFIT), within 1%" \
  awk -v want="$NEXTFIT" '/"padding_efficiency"/ { gsub(/[^0-9.]/, "", $2); d = $2 - want;
    ok = (d < 0 ? -d : d) <= 0.01 * want } END { exit !ok }' "$TMP/pack.json"


# --- varlen attention, the 2026 packers, ZeRO, FlashAttention (issue: modern baselines) ------
VARLEN="packing-varlen packing-ffd-varlen dp-balanced packing-kk packing-wlb dynamic-varlen"
"$DPSIM" compare --iterations 2 --no-figures --schedules 1f1b > "$TMP/cmp_varlen.txt" 2>&1
check "compare lists every varlen packer and balancer by default" \
  bash -c "for b in $VARLEN; do grep -q \"^\$b \" '$TMP/cmp_varlen.txt' || exit 1; done"
check "... and DynaPipe's speed-up over the best of them" grep -q "^# best DynaPipe (dynamic.*) over the best varlen packer" "$TMP/cmp_varlen.txt"
check "... in the JSON too, the same figure" bash -c "x=\$(sed -n 's/.*best varlen packer.*: \\([0-9.]*\\)x\$/\\1/p' '$TMP/cmp_varlen.txt'); '$DPSIM' compare --iterations 2 --no-figures --schedules 1f1b --json 2>/dev/null | awk -v x=\$x '/dynapipe_over_best_varlen/ { gsub(/[^0-9.]/, \"\", \$2); d = \$2 - x; ok = (d < 0 ? -d : d) < 0.006 } END { exit !ok }'"
expect "more batchings than compare holds are refused, not cut" 2 "more than 16 items in --batchings" -- \
  "$DPSIM" compare --batchings padding,padding,padding,padding,padding,padding,padding,padding,padding,padding,padding,padding,padding,padding,padding,padding,padding
ALONE=$("$DPSIM" cost --mbs 1 --seqlen 1000 | awk '$1 == "layer" {print $2, $3, $4, $5}')
ROW=$("$DPSIM" cost --mbs 1 --seqlen 1000 --samples 1000 | awk '$1 == "layer" {print $2, $3, $4, $5}')
check "cost --samples: a row of one sample costs the sample alone ($ALONE)" test -n "$ALONE" -a "$ALONE" = "$ROW"
check "cost --samples: four samples in the row cost less than the row" \
  bash -c "a=\$('$DPSIM' cost --mbs 1 --seqlen 2048 | awk '\$1 == \"layer\" {print \$2}'); b=\$('$DPSIM' cost --mbs 1 --seqlen 2048 --samples 512,512,512,512 | awk '\$1 == \"layer\" {print \$2}'); awk -v a=\$a -v b=\$b 'BEGIN {exit !(b < a)}'"
expect "cost prints the attention fit's held-out error" 0 "held-out error median [0-9.]*%, max" -- "$DPSIM" cost --mbs 1 --seqlen 1024
expect "cost --samples refuses a bad length" 2 "--samples item 2 \"x\" is not a length" -- "$DPSIM" cost --mbs 1 --seqlen 1024 --samples 12,x
expect "--flash-attention drops the scores from memory" 0 "FlashAttention memory" -- "$DPSIM" cost --mbs 1 --seqlen 2048 --flash-attention
expect "ZeRO-3 (FSDP) with a pipeline plans" 0 "iterations +1" -- "$DPSIM" plan --zero 3 --pp 4 --dp 2 --iterations 1
expect "the analytic constants' provenance is said on another GPU" 0 "on h100 its GEMM efficiency is scaled by the GPU.s best measured matmul" -- "$DPSIM" cost --hw h100 --mbs 1 --seqlen 1024
"$DPSIM" plan --batching packing-varlen --iterations 2 -o "$TMP/varlen.json" > /dev/null 2>&1
check "a varlen plan marks its micro-batches" grep -q '"attention":"varlen"' "$TMP/varlen.json"
expect "... and simulates from the file" 0 "throughput" -- "$DPSIM" sim --plan "$TMP/varlen.json"
"$DPSIM" sim --dp 2 --iterations 1 --chrome "$TMP/opt.json" > /dev/null 2>&1
check "the Chrome trace has the optimizer step" grep -q '"cat": "optimizer"' "$TMP/opt.json"
expect "a max length beyond the model's context is refused" 2 "--max-seqlen 4096 is longer than the 2048 tokens gpt-6.7b takes" -- \
  "$DPSIM" plan --model gpt-6.7b --max-seqlen 4096 --iterations 1
expect "... the paper's shapes take 8192 (the paper runs them there)" 0 "iterations  *1" -- \
  "$DPSIM" plan --max-seqlen 8192 --iterations 1
expect "dpsim models shows each model's context" 0 "llama2-7b .* 4096r" -- "$DPSIM" models
cat > "$TMP/mistral.json" <<'EOF'
{"model_type": "mistral", "num_hidden_layers": 4, "hidden_size": 256, "num_attention_heads": 4,
 "num_key_value_heads": 2, "intermediate_size": 1024, "vocab_size": 1024,
 "max_position_embeddings": 32768, "sliding_window": 2048}
EOF
expect "a sequence past the model's sliding window is refused" 2 \
  "--max-seqlen 4096 is longer than mistral's sliding attention window of 2048 tokens" -- \
  "$DPSIM" plan --model "$TMP/mistral.json" --max-seqlen 4096 --iterations 1
expect "... with the longest it takes" 2 "^hint: --max-seqlen 2048 or less$" -- \
  "$DPSIM" plan --model "$TMP/mistral.json" --max-seqlen 4096 --iterations 1
expect "... and up to the window it plans" 0 "iterations  *1" -- \
  "$DPSIM" plan --model "$TMP/mistral.json" --max-seqlen 2048 --iterations 1
sed 's/"sliding_window": 2048/"sliding_window": 2047/' "$TMP/mistral.json" > "$TMP/window2047.json"
"$DPSIM" plan --model "$TMP/window2047.json" --max-seqlen 2047 --batching padding --iterations 1 -o "$TMP/w2047.json" > /dev/null 2>&1
expect "... and a plan at a window of 2047, its rows padded to 2048, simulates from the file" 0 "throughput" -- \
  "$DPSIM" sim --plan "$TMP/w2047.json"
expect "... as is a cost query's row past it" 2 "--seqlen 4096 is longer than mistral's sliding attention window" -- \
  "$DPSIM" cost --model "$TMP/mistral.json" --hw h100 --mbs 1 --seqlen 4096
expect "... or a varlen sample past it" 2 "--samples item 2 \\(3000 tokens\\) is longer than mistral's sliding" -- \
  "$DPSIM" cost --model "$TMP/mistral.json" --hw h100 --mbs 1 --seqlen 4096 --samples 1000,3000
expect "... while samples within it may share a longer row" 0 "attention per sample" -- \
  "$DPSIM" cost --model "$TMP/mistral.json" --hw h100 --mbs 1 --seqlen 4096 --samples 2048,2048
expect "... and the spec keeps the window" 0 '"sliding_window":[[:space:]]*2048' -- "$DPSIM" models --show "$TMP/mistral.json"

# A trace shorter than one global batch: said, with what was asked and what there was.
"$DPSIM" trace gen --mix fixed --len 2048 --samples 20 -o "$TMP/short.csv" 2>/dev/null
expect "a trace shorter than one global batch is said" 0 "one global batch of 40960 tokens, less than the 65536 asked" -- \
  "$DPSIM" sim --trace "$TMP/short.csv" --max-seqlen 2048
# Hardware FLOPs: full recompute counts the rerun forward (HFU over MFU near 4/3).
expect "sim prints Megatron's hardware TFLOP/s beside the model's" 0 "hardware TFLOP/s per GPU +[0-9.]+ +.HFU" -- \
  "$DPSIM" sim --model llama3-8b --hw dgx-h100 --pp 4 --dp 2 --recompute full --iterations 2
# FlashAttention is the LLaMA models' default, and a what-if either way.
expect "llama3-8b trains with FlashAttention by default" 0 "FlashAttention .the model's default; the GPU's default kernel, cudnn-h100." -- \
  "$DPSIM" cost --model llama3-8b --hw h100 --mbs 1 --seqlen 8192
expect "... --no-flash-attention turns it off (the scores stored again)" 0 "layer +[0-9.]+ +[0-9.]+ +11945\\.4 " -- \
  "$DPSIM" cost --model llama3-8b --hw h100 --mbs 1 --seqlen 8192 --no-flash-attention
expect "... another kernel: FlashAttention-2 is slower than cuDNN" 0 "FlashAttention .the model's default; --attention-kernel fa2-h100." -- \
  "$DPSIM" cost --model llama3-8b --hw h100 --mbs 1 --seqlen 8192 --attention-kernel fa2-h100
# The software stack (--stack): torchtitan without compile runs SDPA's FlashAttention-2 and its
# elementwise ops one kernel each; a stack's kernel not measured on a GPU falls back, said; a plan
# carries the stack and the kernel, and its replay is the run.
expect "--stack torch-eager: SDPA's kernel and unfused elementwise ops, said" 0 "the torch-eager stack .its elementwise ops as separate kernels; selective recompute per op: every second GEMM and the elementwise ops., FlashAttention .the model's default; the torch-eager stack's kernel, fa2-h100." -- \
  "$DPSIM" cost --model llama3-8b --hw h100 --mbs 1 --seqlen 8192 --stack torch-eager
expect "... torch-compile: the same kernel, elementwise fused" 0 "the torch-compile stack .its elementwise ops fused; selective recompute per op: every second GEMM and the elementwise ops., FlashAttention .the model's default; the torch-compile stack's kernel, fa2-h100." -- \
  "$DPSIM" cost --model llama3-8b --hw h100 --mbs 1 --seqlen 8192 --stack torch-compile
expect "... a stack's kernel not measured on the GPU: the GPU's default, said" 0 "the torch-eager stack's kernel is not measured on b200: the GPU's default, fa4-b200" -- \
  "$DPSIM" cost --model llama3-8b --hw b200 --mbs 1 --seqlen 8192 --stack torch-eager
expect "... and on torchtitan's own H100 (grand-teton), SDPA's kernel at that GPU's peak" 0 "torch-eager stack's kernel, fa2-h100" -- \
  "$DPSIM" cost --model llama3-8b --hw grand-teton --mbs 1 --seqlen 8192 --stack torch-eager
te_ms=$("$DPSIM" cost --model llama3-8b --hw h100 --mbs 1 --seqlen 8192 2>/dev/null | awk '$1 == "layer" { print $2 + $3 }')
eager_ms=$("$DPSIM" cost --model llama3-8b --hw h100 --mbs 1 --seqlen 8192 --stack torch-eager 2>/dev/null | awk '$1 == "layer" { print $2 + $3 }')
check "... an eager layer is slower than Transformer Engine's ($eager_ms against $te_ms ms)" \
  awk -v e="$eager_ms" -v t="$te_ms" 'BEGIN { exit !(e > t * 1.05) }'
STK=(--model llama3.1-8b --hw dgx-h100 --stack torch-eager --pp 2 --dp 2 --max-seqlen 4096 --iterations 2)
"$DPSIM" plan "${STK[@]}" -o "$TMP/stack_plan.json" >/dev/null 2>&1
expect "a plan says its stack and the kernel that timed it" 0 '"stack":[[:space:]]*"torch-eager"' -- cat "$TMP/stack_plan.json"
expect "... the kernel in its cluster_spec" 0 '"attention_kernel":[[:space:]]*"fa2-h100"' -- cat "$TMP/stack_plan.json"
direct=$("$DPSIM" sim "${STK[@]}" 2>/dev/null | awk '/^throughput \(real/ { print $4 }')
replay=$("$DPSIM" sim --plan "$TMP/stack_plan.json" 2>/dev/null | awk '/^throughput \(real/ { print $4 }')
check "... and its replay runs as the direct run ($replay against $direct tokens/s)" test -n "$direct" -a "$direct" = "$replay"
# ... also where the GPU has a measured profile (the default GPT on p4d): the replay prices its
# model state analytically, as the plan was, not refusing the stack on the profile
"$DPSIM" plan --stack torch-eager --analytic --pp 4 --iterations 2 -o "$TMP/stack_p4d.json" >/dev/null 2>&1
direct=$("$DPSIM" sim --stack torch-eager --analytic --pp 4 --iterations 2 2>/dev/null | awk '/^throughput \(real/ { print $4 }')
replay=$("$DPSIM" sim --plan "$TMP/stack_p4d.json" 2>/dev/null | awk '/^throughput \(real/ { print $4 }')
check "... and on a GPU with a profile ($replay against $direct tokens/s)" test -n "$direct" -a "$direct" = "$replay"

# validate with repeats: a simulated timeline as the measurement, run three times at 1.0, 1.1 and
# 1.2 times its times: the median run (1.1x) is compared, the runs' spread (0.2 / 1.1) is the
# band; per op the median too. A timeline without OPTIMIZER rows is compared without the step.
"$DPSIM" sim --plan tests/cli/golden/plan_4ranks.json --timeline "$TMP/t4.csv" >/dev/null 2>&1
awk -F, 'NR == 1 { print $0 ",repeat"; next } { if ($4 < 0) $4 = 0
  for (r = 0; r < 3; r++) printf "%s,%s,%s,%s,%.3f,%.3f,%s,%s,%d\n", $1, $2, $3, $4, $5 * (1 + r / 10), $6 * (1 + r / 10), $7, $8, r }' \
  "$TMP/t4.csv" >"$TMP/r4.csv"
expect "validate compares the median of an iteration's runs" 0 "mean absolute error 9.09%" -- \
  "$DPSIM" validate --plan tests/cli/golden/plan_4ranks.json --measured "$TMP/r4.csv"
expect "... and reports their spread as the noise band" 0 "lie 18.18% apart .median over 1 iteration run up to 3 times" -- \
  "$DPSIM" validate --plan tests/cli/golden/plan_4ranks.json --measured "$TMP/r4.csv"
expect "... and each op's median" 0 "^F +8 +4.291 +4.720 +9.09%" -- \
  "$DPSIM" validate --plan tests/cli/golden/plan_4ranks.json --measured "$TMP/r4.csv"
# the stages' gradient collective, op by op: each stage's shortest replica (the one that came last
# waited least for the others), here replica 1's at 1.2 times the simulated time, replica 0's at 1.5
"$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 2 --dp 2 --overlap none --max-seqlen 128 \
  --global-tokens 1024 --iterations 2 -o "$TMP/ar.json" >/dev/null 2>&1
"$DPSIM" sim --plan "$TMP/ar.json" --timeline "$TMP/ar.csv" >/dev/null 2>&1
awk 'BEGIN { FS = OFS = "," } NR > 1 && $3 == "ALLREDUCE" { $6 = $5 + ($6 - $5) * ($7 == 0 ? 1.5 : 1.2) } { print }' \
  "$TMP/ar.csv" >"$TMP/ar2.csv"
expect "validate compares the gradient collective per stage" 0 "^ALLREDUCE +4 +0.475 +0.570 +16.6[0-9]%" -- \
  "$DPSIM" validate --plan "$TMP/ar.json" --measured "$TMP/ar2.csv"
expect "... in the JSON too" 0 '"ALLREDUCE":[[:space:]]*\{' -- "$DPSIM" validate --plan "$TMP/ar.json" --measured "$TMP/ar2.csv" --json
awk -F, 'NR == 1 || $3 != "OPTIMIZER" { if (NR > 1 && $4 < 0) $4 = 0; print }' OFS=, "$TMP/t4.csv" >"$TMP/n4.csv"
expect "a runtime that steps no optimizer is simulated without the step" 0 "mean absolute error 0.00%" -- \
  "$DPSIM" validate --plan tests/cli/golden/plan_4ranks.json --measured "$TMP/n4.csv"

# Sequence parallelism: on by default with tp > 1; --no-sp stores the norms' and dropouts'
# activations whole (Korthikanti et al.: about 3x at tp 8 with FlashAttention).
expect "sequence parallelism is the default with --tp 8" 0 "layer +[0-9.]+ +[0-9.]+ +297\\.8 " -- \
  "$DPSIM" cost --model llama3.1-70b --hw h200 --tp 8 --mbs 1 --seqlen 8192
expect "... and --no-sp stores 3x as much" 0 "layer +[0-9.]+ +[0-9.]+ +885\\.0 " -- \
  "$DPSIM" cost --model llama3.1-70b --hw h200 --tp 8 --mbs 1 --seqlen 8192 --no-sp

# Wording: what does not apply is not printed as 0 (a decoder-only model, one stage), tune's help
# lists no option it refuses, and --tp names the heads that bind.
expect "a GPT run prints no decoder padding" 0 "^padding efficiency +[0-9.]+%\$" -- "$DPSIM" sim --model gpt-tiny --pp 1 --iterations 2
expect "... and says why one stage has no events" 0 "no transfers between stages to simulate" -- "$DPSIM" sim --model gpt-tiny --pp 1 --iterations 2
"$DPSIM" tune --help >"$TMP/tune_help.txt"
check "tune --help lists none of the options it refuses" \
  bash -c "! grep -Eq -- '^ +(-[a-z], )?--(tp|recompute|batching|schedule|pp|dp|zero|mbs) ' '$TMP/tune_help.txt'"
expect "--tp that a model's key/value heads refuse names them" 2 "--tp 16 does not divide the 8 key/value heads of llama3.1-70b" -- \
  "$DPSIM" cost --model llama3.1-70b --hw h200 --tp 16 --mbs 1 --seqlen 1024
expect "... with a --tp that fits, and the node it exceeds" 2 "hint: --tp 8; and a tensor-parallel group wider than a node" -- \
  "$DPSIM" cost --model llama3.1-70b --hw h200 --tp 16 --mbs 1 --seqlen 1024

# --recompute fastest: per iteration the mode that simulates fastest of those that fit. Where
# DynaPipe's first fit starves the adaptive schedule (full packer rows at 8192), it is faster; its
# plan says "dynamic" (a mode per iteration) and replays to the same timeline.
"$DPSIM" plan --max-seqlen 8192 --recompute fastest --schedule adaptive --batching packing-ffd-varlen \
  --iterations 3 -o "$TMP/pf.json" >"$TMP/pf.out" 2>/dev/null
"$DPSIM" sim --max-seqlen 8192 --recompute dynamic --schedule adaptive --batching packing-ffd-varlen \
  --iterations 3 >"$TMP/pd.out" 2>/dev/null
check "--recompute fastest beats the first fit where it starves the pipeline" \
  awk '/^throughput/ { t[FILENAME] = $(NF-1) } END { exit !(t[ARGV[1]] > 1.3 * t[ARGV[2]]) }' "$TMP/pf.out" "$TMP/pd.out"
check "... its plan is a mode per iteration" grep -q '"recompute":[[:space:]]*"dynamic"' "$TMP/pf.json"
hash=$(sed -n 's/^timeline hash *//p' "$TMP/pf.out")
expect "... and replays to the same timeline" 0 "timeline hash +$hash" -- "$DPSIM" sim --plan "$TMP/pf.json"

# A plan keeps the overlap it was priced and simulated with: made with --overlap none (the DP
# gradient reduction after the last backward, not in buckets during it), it replays serial too,
# and --overlap on a replay is refused (the plan fixes it).
"$DPSIM" plan --model gpt-6.7b-16l --hw p4d --pp 2 --dp 4 --global-tokens 65536 --iterations 2 \
  --overlap none -o "$TMP/ovn.json" >"$TMP/ovn.out" 2>/dev/null
"$DPSIM" plan --model gpt-6.7b-16l --hw p4d --pp 2 --dp 4 --global-tokens 65536 --iterations 2 \
  -o "$TMP/ovd.json" >"$TMP/ovd.out" 2>/dev/null
hash=$(sed -n 's/^timeline hash *//p' "$TMP/ovn.out")
check "(--overlap none and the default give different timelines here)" \
  bash -c "[ '$hash' != \"\$(sed -n 's/^timeline hash *//p' '$TMP/ovd.out')\" ]"
expect "a plan made with --overlap none replays to its own timeline" 0 "timeline hash +$hash" -- \
  "$DPSIM" sim --plan "$TMP/ovn.json"
expect "... and --overlap on its replay is refused" 2 "--overlap cannot apply with --plan" -- \
  "$DPSIM" sim --plan "$TMP/ovn.json" --overlap dp

# A comparison whose every row is out of memory (GPipe at 8192) draws every figure (gnuplot had
# crashed on a chart without bars, and no figure was written): each row of the throughput chart
# says "out of memory" in place of its bar.
expect "compare with every row out of memory draws the chart" 0 "wrote .*/oomc/throughput.png" -- \
  "$DPSIM" compare --schedules gpipe --batchings padding,packing --max-seqlen 8192 --iterations 1 --out "$TMP/oomc"
check "... a chart of its rows" is_png "$TMP/oomc/throughput.png" 5000
check "... and draws the timeline and the memory" is_png "$TMP/oomc/memory.png" 10000
check "... (the timeline too)" is_png "$TMP/oomc/timeline.png" 10000

# A plan keeps the memory it was planned for (--mem-limit too): its replay is over memory where
# the plan was, and says the simulation's count only; --mem-limit on the replay is a what-if.
"$DPSIM" plan --mem-limit 24000 --batching packing --max-seqlen 2048 --iterations 2 -o "$TMP/pm.json" >"$TMP/pm.out" 2>&1
check "a plan over its --mem-limit says so, with the planner's count" grep -Eq "out of memory +YES +.2 of 2 iterations over the device memory in the simulation; the planner found 2" "$TMP/pm.out"
expect "... and so does its replay, without a planner's count" 0 "out of memory +YES +.2 of 2 iterations over the device memory in the simulation.\$" -- \
  "$DPSIM" sim --plan "$TMP/pm.json"
expect "... unless --mem-limit says otherwise" 0 "out of memory +no" -- "$DPSIM" sim --plan "$TMP/pm.json" --mem-limit 36000
# A plan that fits but whose replicas cannot keep in step (ZeRO-3 over 8 replicas, 4 samples an
# iteration) says so, not "out of memory", and names where
"$DPSIM" trace gen --mix fixed --len 1024 --samples 64 -o "$TMP/fx1k.csv" >/dev/null 2>&1
expect "replicas that cannot keep in step are reported as such, not as out of memory" 0 \
  "replicas out of step +YES +.2 of 2 iterations: the replicas' passes differ" -- \
  "$DPSIM" sim --trace "$TMP/fx1k.csv" --pp 1 --dp 8 --zero 3 --max-seqlen 1024 --global-tokens 4096 --iterations 2
check "... its memory verdict no, its throughput no answer, the reason named" bash -c \
  "grep -Eq 'out of memory +no' '$TMP/out' && grep -q '(replicas out of step: the timeline' '$TMP/out' && grep -q 'replica 4 0, a different count' '$TMP/out'"


# --- textbook mode (--toy-costs): the pipeline's bubble and each schedule's own closed form ------
for c in "gpipe:27.27" "1f1b:27.27" "zb1:11.11"; do
  expect "textbook f 1, b 2, w 1 on 4 stages, 8 micro-batches: ${c%%:*} bubble ${c#*:}%" 0 \
    "pipeline bubble \(mean of stages\) +${c#*:}%  \(closed form ${c#*:}%\)" -- \
    "$DPSIM" sim --toy-costs 1,2,1 --schedule "${c%%:*}"
done
expect "textbook f 1, b 2, w 1 on 4 stages, 8 micro-batches: zbv (a V, 2 chunks) idles 5.88%, below ZB-H1's 11.11%" 0 \
  "pipeline bubble \(mean of stages\) +5.88%" -- "$DPSIM" sim --toy-costs 1,2,1 --schedule zbv
check "... on balanced memory: every stage the same peak" bash -c \
  "grep -E '^peak memory per stage' '$TMP/out' | awk '{ for (i = 7; i <= NF; i++) if (\$i != \$6) exit 1 }'"
expect "... DualPipeV (the same V, F&B pairs) 11.11%: DeepSeek's (S-1)(F&B + B - 3W), its closed form" 0 \
  "pipeline bubble \(mean of stages\) +11.11%  \(closed form 11.11%\)" -- "$DPSIM" sim --toy-costs 1,2,1 --schedule dualpipev
expect "... on 8 stages and 64 micro-batches at f 1, b 1.5, w 0.5 (f = b - w: the form's exact case)" 0 \
  "pipeline bubble \(mean of stages\) +[0-9.]+%  \(closed form [0-9.]+%\)" -- "$DPSIM" sim --toy-costs 1,1.5,0.5 --schedule dualpipev --pp 8 --microbatches 64
check "... where the simulated bubble is the closed form's" bash -c \
  "grep -E '^pipeline bubble' '$TMP/out' | sed -E 's/.*stages\) +([0-9.]+)%  \(closed form ([0-9.]+)%.*/\1 \2/' | awk '{ exit !(\$1 == \$2) }'"
expect "dualpipev refuses a chunk count other than its V's 2" 2 "--schedule dualpipev runs 2 chunks a device \\(a V\\), not --chunks 4" -- \
  "$DPSIM" sim --schedule dualpipev --chunks 4 --iterations 1
for s in zb1 zbv dualpipev; do
  expect "$s plans under full recompute (each slot whole: its B computes the weight gradients)" 0 "out of memory +no" -- \
    "$DPSIM" sim --schedule $s --recompute full --iterations 1
done
expect "... and textbook zb1 under full recompute runs 1F1B's order: 44 ms, its closed form's" 0 \
  "mean closed form +44.00 ms  \(\+0.00% vs simulated" -- "$DPSIM" sim --toy-costs 1,2,1 --recompute full --schedule zb1
expect "zbv refuses a chunk count other than its V's 2" 2 "--schedule zbv runs 2 chunks a device \\(a V\\), not --chunks 3" -- \
  "$DPSIM" sim --schedule zbv --chunks 3 --iterations 1
expect "zbv plans Llama-3-8B on 4 x 2 H100 at 8k within memory" 0 "out of memory +no" -- \
  "$DPSIM" sim --schedule zbv --model llama3-8b --hw dgx-h100 --pp 4 --dp 2 --max-seqlen 8192 --global-tokens 262144 \
  --recompute dynamic --iterations 4
expect "... interleaved with 2 chunks: 15.79%" 0 "pipeline bubble \(mean of stages\) +15.79%  \(closed form 15.79%\)" -- \
  "$DPSIM" sim --toy-costs 1,2,1 --schedule interleaved --chunks 2
check "... no optimizer step after the pipeline, 8 micro-batches" grep -Eq "after the pipeline +0.00%" "$TMP/out"
expect "... zb1 prints its own formula" 0 "sum t \+ \(S-1\) max \(f \+ b - 2w\)" -- "$DPSIM" sim --toy-costs 1,2,1 --schedule zb1
expect "... adaptive has no closed form" 0 "mean closed form +- +\\(none \\(the order follows memory\\)\\)" -- "$DPSIM" sim --toy-costs 1,2,1 --schedule adaptive
expect "a real run shows the optimizer step apart from the bubble" 0 "after the pipeline +([1-9]|0\\.[1-9]|0\\.0[1-9])" -- "$DPSIM" sim --iterations 2
expect "textbook plan" 0 "wrote 1 iterations" -- "$DPSIM" plan --toy-costs 1,2,1 --schedule zb1 -o "$TMP/toy.json"
check "... says it is textbook" grep -q '"textbook":true' "$TMP/toy.json"
"$DPSIM" sim --toy-costs 1,2,1 --schedule zb1 --json >"$TMP/toy1.json" 2>/dev/null
"$DPSIM" sim --plan "$TMP/toy.json" --json >"$TMP/toy2.json" 2>/dev/null
check "... and replays to the same timeline, bubble and no optimizer step" bash -c \
  "grep -q '\"pipeline_bubble_mean\":\s*0.1111' '$TMP/toy2.json' && diff <(grep -E 'timeline_hash|pipeline_bubble_mean|after_pipeline' '$TMP/toy1.json') <(grep -E 'timeline_hash|pipeline_bubble_mean|after_pipeline' '$TMP/toy2.json')"
expect "textbook costs scale with a trace's micro-batches" 0 "micro-batches per iteration" -- \
  "$DPSIM" sim --toy-costs 1,2 --iterations 2
# full recompute reruns each forward before its backward: t = f + (b + f), and the textbook's
# sum t + (S-1) max t on 8 equal micro-batches over 4 stages is 8 x 4 + 3 x 4 = 44 ms (33 without)
for g in "1f1b:44.00" "gpipe:44.00"; do
  expect "textbook f 1, b 2 with full recompute: ${g%%:*} runs ${g#*:} ms, the closed form's" 0 \
    "mean iteration \(simulated\) +${g#*:} ms" -- "$DPSIM" sim --toy-costs 1,2 --recompute full --schedule "${g%%:*}"
  check "... the closed form the same" grep -Eq "mean closed form +${g#*:} ms +\(\+0\.00% vs simulated" "$TMP/out"
done
expect "textbook costs refuse selective recompute (the attention is not separate)" 2 "selective reruns the attention" -- \
  "$DPSIM" sim --toy-costs 1,2 --recompute selective
expect "--toy-costs without B" 2 "B \(backward\) is missing" -- "$DPSIM" sim --toy-costs 1
expect "--toy-costs with W over B" 2 "W \(3 ms\) is the weight-gradient share of the backward B" -- "$DPSIM" sim --toy-costs 1,2,3
expect "--toy-costs not a number" 2 "--toy-costs \"1,x\": B \(backward\) must be a number" -- "$DPSIM" sim --toy-costs 1,x
expect "compare's table counts micro-batches and the time after the pipeline" 0 "mb +bubble +after" -- \
  "$DPSIM" compare --toy-costs 1,2,1 --schedules gpipe,1f1b,zb1 --batchings padding --out "$TMP/toyc"
check "... a GPipe row out of memory drawn all the same" is_png "$TMP/toyc/throughput.png" 5000

# --- context parallelism (--cp) -------------------------------------------------------------------
CP="--model llama3.1-8b --hw h200-node --tp 2 --pp 2 --max-seqlen 32768 --global-tokens 131072 --iterations 1 --batching packing-ffd-varlen"
"$DPSIM" sim $CP --json >"$TMP/cp1.json" 2>/dev/null
"$DPSIM" sim $CP --cp 2 --json >"$TMP/cp2.json" 2>/dev/null
stored() { grep -o '"stored_activations":[[:space:]]*[0-9.e+-]*' "$1" | awk -F: '{ if ($2 + 0 > m) m = $2 + 0 } END { printf "%.6f", m }'; }
check "sim --cp 2 at 32k halves a stage's stored activations" \
  awk -v a="$(stored "$TMP/cp1.json")" -v b="$(stored "$TMP/cp2.json")" 'BEGIN { d = b - a / 2; exit !(a > 0 && d * d < (1e-6 * a) ^ 2) }'
expect "... and names it in the cost model" 0 "context parallelism \\(ring\\)" -- "$DPSIM" sim $CP --cp 2
"$DPSIM" sim $CP --timeline "$TMP/cp1t.csv" >/dev/null 2>&1
"$DPSIM" sim $CP --cp 2 --timeline "$TMP/cp2t.csv" >/dev/null 2>&1
check "the cp ranks all-reduce their gradients (one replica; cp 1 has nothing to reduce)" \
  bash -c "grep -q ALLREDUCE '$TMP/cp2t.csv' && ! grep -q ALLREDUCE '$TMP/cp1t.csv'"
expect "--cp beyond the cluster's GPUs names the product" 2 "--tp 2 x --cp 4 x --pp 2 x --dp 1 = 16 GPUs, but h200 has 1 node of 8" -- "$DPSIM" sim $CP --cp 4 --hw h200
expect "all-to-all where tp x cp does not divide the key/value heads" 2 "8 key/value heads" -- \
  "$DPSIM" sim $CP --cp 8 --pp 1 --cp-kind all-to-all
expect "--cp with a measured profile" 2 "needs the analytic cost model" -- "$DPSIM" sim --cp 2 --iterations 1
expect "--cp with T5" 2 "encoder-decoder" -- "$DPSIM" sim --model t5-11b-24l --analytic --cp 2 --iterations 1
expect "a cp plan" 0 "wrote 1 iterations" -- "$DPSIM" plan $CP --cp 2 -o "$TMP/cp.json"
check "... records its degree and kind" grep -q '"cp":2,"cp_kind":"ring"' "$TMP/cp.json"
# --cp auto: a degree per micro-batch in a group of GPUs (stage_cost.h stage_model_pick_cp)
"$DPSIM" trace gen --mix long-cot -n 3000 --seed 1 -o "$TMP/cot.csv" >/dev/null 2>&1
AUTO="--model llama3.1-8b --hw dgx-h100 --tp 4 --pp 2 --cp auto --cp-max 2 --trace $TMP/cot.csv --max-seqlen 65536 --global-tokens 1048576 --iterations 2 --batching dynamic"
expect "--cp auto plans a 64k long-CoT trace on 16 H100 (tp 4, pp 2, a group of 2)" 0 "wrote 2 iterations" -- \
  "$DPSIM" plan $AUTO -o "$TMP/auto.json"
check "... its header says cp_auto, each micro-batch its degree (1 or 2), both used" \
  bash -c "grep -q '\"cp\":2,\"cp_kind\":\"ring\",\"cp_auto\":true' '$TMP/auto.json' && [ \$(grep -o '\"replica\":0,\"cp\":[12]' '$TMP/auto.json' | sort -u | wc -l) -eq 2 ] && [ \$(grep -o '\"replica\":0,\"cp\":[0-9]*' '$TMP/auto.json' | wc -l) -eq \$(grep -o '\"padded_tokens\"' '$TMP/auto.json' | wc -l) ]"
expect "... and nothing goes over memory" 0 "out of memory +no" -- "$DPSIM" sim --plan "$TMP/auto.json"
"$DPSIM" plan --analytic --cp 2 --iterations 1 --allow-oversubscribe -o "$TMP/cp_default.json" >/dev/null 2>&1
expect "a cp plan of the default model (whose own profile has no cp) replays" 0 "timeline hash" -- \
  "$DPSIM" sim --plan "$TMP/cp_default.json"
expect "--cp auto with a varlen batching (its rows split whole over the group)" 0 "out of memory +no" -- \
  "$DPSIM" sim $AUTO --batching packing-ffd-varlen
expect "--cp auto on a measured profile is refused" 2 "--cp auto prices each micro-batch at its own degree, which needs the analytic cost model" -- \
  "$DPSIM" sim --cp auto --iterations 1
expect "--cp auto in the all-to-all form is refused" 2 "--cp auto runs the ring form" -- "$DPSIM" sim $AUTO --cp-kind all-to-all
expect "--cp-max 1 is refused" 2 "--cp-max \"1\" is not a group of 2 to 1024 GPUs" -- "$DPSIM" sim $AUTO --cp-max 1
expect "--cp half is refused" 2 "--cp \"half\" is not a degree in \\[1, 1024\\] or auto" -- "$DPSIM" sim $AUTO --cp half
"$DPSIM" sim --plan "$TMP/cp.json" --json >"$TMP/cp3.json" 2>/dev/null
check "... and replays to the same timeline and memory" bash -c "diff <(grep -E 'timeline_hash|peak_mem' '$TMP/cp2.json') <(grep -E 'timeline_hash|peak_mem' '$TMP/cp3.json')"

# --- --batching auto ------------------------------------------------------------------------------
expect "auto plans, naming each iteration's batching" 0 "wrote 4 iterations" -- "$DPSIM" plan --batching auto --iterations 4 -o "$TMP/auto.json"
check "... the header says auto, each iteration its winner" bash -c "grep -q '\"batching\":\"auto\"' '$TMP/auto.json' && [ \$(grep -o '\"batching\":\"[a-z-]*\"' '$TMP/auto.json' | grep -vc auto) -eq 4 ]"
"$DPSIM" sim --batching auto --iterations 4 --json >"$TMP/auto1.json" 2>/dev/null
"$DPSIM" sim --plan "$TMP/auto.json" --json >"$TMP/auto2.json" 2>/dev/null
check "... and replays to the same timeline" bash -c "grep -q timeline_hash '$TMP/auto1.json' && grep timeline_hash '$TMP/auto1.json' | cmp -s - <(grep timeline_hash '$TMP/auto2.json')"
expect "compare puts auto beside the best other row of its schedule" 0 "# auto/1f1b over the best other 1f1b row \\(.*\\): 1\\.[0-9]{3}x" -- \
  "$DPSIM" compare --iterations 4 --schedules 1f1b --no-figures

# --- --schedule auto (per iteration) ---------------------------------------------------------------
expect "sim --schedule auto-loop says how many iterations each schedule won" 0 "iterations per schedule \\(auto\\) +[a-z0-9]+ [0-9]+" -- \
  "$DPSIM" sim --schedule auto-loop --iterations 3 --model llama3-8b --hw dgx-h100 --max-seqlen 8192 --global-tokens 262144 \
  --pp 4 --dp 2 --recompute dynamic
loop=$(awk '/^throughput/ { print $4 }' "$TMP/out")
best=$(for s in gpipe 1f1b adaptive zb1; do "$DPSIM" sim --schedule $s --iterations 3 --model llama3-8b --hw dgx-h100 \
  --max-seqlen 8192 --global-tokens 262144 --pp 4 --dp 2 --recompute dynamic 2>/dev/null |
  awk '/out of memory +YES/ { oom = 1 } /^throughput/ { t = $4 } END { if (!oom) print t }'; done | sort -n | tail -1)
check "... at least the best of its schedules run alone ($loop >= $best)" test "$loop" -ge "$best"
"$DPSIM" sim --schedule auto-v --iterations 3 --model llama3-8b --hw dgx-h100 --max-seqlen 8192 --global-tokens 262144 \
  --pp 4 --dp 2 --recompute dynamic >"$TMP/sav.txt" 2>/dev/null
"$DPSIM" sim --schedule auto --iterations 3 --model llama3-8b --hw dgx-h100 --max-seqlen 8192 --global-tokens 262144 \
  --pp 4 --dp 2 --recompute dynamic >"$TMP/sa.txt" 2>/dev/null
check "sim --schedule auto runs as the family it chose (the same timeline)" bash -c "
  fam=\$(awk '/^placement \\(auto\\)/ { print \$3 }' '$TMP/sa.txt')
  other=\$([ \"\$fam\" = v ] && echo '$TMP/sav.txt' || echo '$TMP/out')
  [ -n \"\$fam\" ] && [ \"\$(grep -E '^timeline hash' '$TMP/sa.txt')\" = \"\$(grep -E '^timeline hash' \"\$other\")\" ]"
expect "... and says the placement it chose and why" 0 "^placement \\(auto\\) +(loop|v) +\\(the first iteration: [0-9.]+ ms on a loop, [0-9.]+ ms on a V[;)]" -- \
  "$DPSIM" sim --schedule auto --iterations 3 --model llama3-8b --hw dgx-h100 --max-seqlen 8192 --global-tokens 262144 \
  --pp 4 --dp 2 --recompute dynamic
expect "... and a plan of it names auto, and each iteration its schedule" 0 "wrote 3 iterations" -- "$DPSIM" plan --schedule auto --iterations 3 -o "$TMP/sa.json"
check "... in its header and every iteration, of the placement it chose" python3 -c "
import json, sys; p = json.load(open(sys.argv[1]))
fam = ('zbv', 'dualpipev') if p.get('placement') == 'v' else ('gpipe', '1f1b', 'adaptive', 'zb1')
assert p['schedule'] == 'auto' and p['chunks'] == (2 if p.get('placement') == 'v' else 1)
assert all(it['schedule'] in fam for it in p['iterations'])" "$TMP/sa.json"
# the first iteration fits on a V, the one with a 32k sample does not (without recompute): auto
# keeps the loop, whose adaptive schedule fits it
{ echo task,input_len,target_len
  for _ in $(seq 1024); do echo s,1000,24; done
  for _ in $(seq 32); do echo l,32000,768; done; } >"$TMP/mix2.csv"
expect "--schedule auto keeps the loop where the V's plan of the longest sample's iteration does not fit" 0 \
  "^placement \\(auto\\) +loop +\\(the first iteration: [0-9.]+ ms on a loop, [0-9.]+ ms on a V; the one with the longest sample: [0-9.]+ ms, no plan\\)" -- \
  "$DPSIM" sim --model llama3.1-8b --hw dgx-h100 --tp 2 --pp 4 --dp 2 --trace "$TMP/mix2.csv" \
  --global-tokens 1048576 --max-seqlen 32768 --schedule auto
check "... and its run fits" grep -Eq "^out of memory +no" "$TMP/out"
expect "--schedule auto-loop plans on a loop" 0 "wrote 2 iterations" -- "$DPSIM" plan --schedule auto-loop --iterations 2 -o "$TMP/sal.json"
check "... its header and iterations the loop's" python3 -c "
import json, sys; p = json.load(open(sys.argv[1]))
assert p['schedule'] == 'auto-loop' and p['chunks'] == 1 and 'placement' not in p
assert all(it['schedule'] in ('gpipe', '1f1b', 'adaptive', 'zb1') for it in p['iterations'])" "$TMP/sal.json"
"$DPSIM" sim --schedule auto --iterations 3 --json >"$TMP/sa1.json" 2>/dev/null
"$DPSIM" sim --plan "$TMP/sa.json" --json >"$TMP/sa2.json" 2>/dev/null
check "... which replays to the same timeline" bash -c "grep -q timeline_hash '$TMP/sa1.json' && grep timeline_hash '$TMP/sa1.json' | cmp -s - <(grep timeline_hash '$TMP/sa2.json')"
python3 -c "
import json, sys; p = json.load(open(sys.argv[1])); p['schedule'] = p['iterations'][0]['schedule']
json.dump(p, open(sys.argv[2], 'w'))" "$TMP/sa.json" "$TMP/sa_named.json"
expect "a plan naming its schedule in the header and one per iteration is refused" 1 "of its own in a plan whose header names" -- \
  "$DPSIM" sim --plan "$TMP/sa_named.json"
python3 -c "
import json, sys; p = json.load(open(sys.argv[1])); p['iterations'][1]['schedule'] = 'interleaved'
json.dump(p, open(sys.argv[2], 'w'))" "$TMP/sa.json" "$TMP/sa_chunked.json"
expect "an auto plan whose iteration names a chunked schedule is refused, naming it" 1 "iteration 1: \"schedule\" \"interleaved\"" -- \
  "$DPSIM" sim --plan "$TMP/sa_chunked.json"
expect "--schedule auto --chunks 2 is refused (auto sets the chunks)" 2 "auto, auto-loop and auto-v set the chunks" -- \
  "$DPSIM" sim --schedule auto --chunks 2 --pp 4 --iterations 2
"$DPSIM" compare --schedules 1f1b,zb1,auto-loop --batchings packing,dynamic --iterations 6 --no-figures --json >"$TMP/sa_cmp.json" 2>/dev/null
check "compare --schedules ...,auto-loop: each batching's auto-loop row at least its other schedules'" python3 -c "
import json, sys; rows = json.load(open(sys.argv[1]))['rows']
t = {(r['batching'], r['schedule']): r['throughput_tokens_per_s'] for r in rows}
assert len(t) == 6 and all(t[(b, 'auto-loop')] >= max(t[(b, '1f1b')], t[(b, 'zb1')]) * (1 - 1e-9) for b in ('packing', 'dynamic'))" "$TMP/sa_cmp.json"
"$DPSIM" sweep --grid 'schedule=1f1b,auto-loop,auto' --iterations 2 -o "$TMP/sa_sweep.csv" >/dev/null 2>&1
check "--schedule auto-loop and auto as sweep points run, auto-loop at least 1F1B's throughput" awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) c[$i] = i }
  NR > 1 { t[$c["schedule"]] = $c["throughput_tokens_per_s"] }
  END { exit !(t["auto-loop"] + 0 >= t["1f1b"] + 0 && t["1f1b"] > 0 && t["auto"] > 0) }' "$TMP/sa_sweep.csv"


# --- HSDP: ZeRO sharded inside a group, replicated across ------------------------------------------
H="--model llama3-8b --hw dgx-h100 --global-tokens 262144 --max-seqlen 8192 --iterations 2 --batching packing --pp 1 --dp 16 --zero 3"
# shellcheck disable=SC2086
expect "sim --shard-group 8: the title names ZeRO's group" 0 "^# sim: .* dp 16 = 16 GPUs, ZeRO-3 over 8 GPUs \\(HSDP: replicated across\\)" -- "$DPSIM" sim $H --shard-group 8
# shellcheck disable=SC2086
"$DPSIM" sim $H --shard-group 8 --json >"$TMP/hsdp.json" 2>/dev/null
# shellcheck disable=SC2086
"$DPSIM" sim $H --json >"$TMP/fsdp.json" 2>/dev/null
check "... twice the gradients' and optimizer's shares of ZeRO-3 over all 16" python3 -c "
import json
h, f = (json.load(open(p))['memory_breakdown_mb'][0] for p in ('$TMP/hsdp.json', '$TMP/fsdp.json'))
for k in ('gradients', 'optimizer'):
    assert abs(h[k] / f[k] - 2) < 1e-9, (k, h[k], f[k])
"
# shellcheck disable=SC2086
"$DPSIM" plan $H --shard-group 8 -o "$TMP/hsdp_plan.json" >/dev/null 2>&1
check "... its plan says shard_group 8" grep -q '"zero":3,"shard_group":8' "$TMP/hsdp_plan.json"
check "... and replays to the same throughput" bash -c "[ \"\$('$DPSIM' sim --plan '$TMP/hsdp_plan.json' 2>/dev/null | grep '^throughput')\" = \"\$('$DPSIM' sim $H --shard-group 8 2>/dev/null | grep '^throughput')\" ]"
sed 's/"shard_group":8/"shard_group":6/' "$TMP/hsdp_plan.json" >"$TMP/hsdp6.json"
expect "a plan whose shard_group no divisor of dp gives is refused, naming the file and field" 1 "hsdp6.json: \"shard_group\" 6 \\(rule: HSDP's groups" -- "$DPSIM" sim --plan "$TMP/hsdp6.json"
expect "... with the nearest valid sizes" 1 "^hint: --shard-group 4 or 8$" -- "$DPSIM" sim --plan "$TMP/hsdp6.json"
# shellcheck disable=SC2086
expect "--shard-group 12 is refused" 2 "--shard-group 12: a shard group is the cp x k GPUs of k data-parallel replicas" -- "$DPSIM" sim $H --shard-group 12
# shellcheck disable=SC2086
expect "... with the nearest valid sizes" 2 "^hint: --shard-group 8 or 16$" -- "$DPSIM" sim $H --shard-group 12
# shellcheck disable=SC2086
expect "--shard-group under ZeRO 0 is refused" 2 "ZeRO 0 shards nothing" -- "$DPSIM" sim ${H/--zero 3/--zero 0} --shard-group 8

# --- the lines a budget needs ---------------------------------------------------------------------
expect "sim's header names every degree and the GPU count" 0 "^# sim: .* tp 1 x cp 1 x pp 2 x dp 2 = 4 GPUs" -- "$DPSIM" sim --pp 2 --dp 2 --recompute full --iterations 2
expect "... and the time and GPU-hours per billion tokens" 0 "^time per billion tokens +[0-9.]+ h +\([0-9.]+ GPU-hours on 4 GPUs\)" -- "$DPSIM" sim --pp 2 --dp 2 --recompute full --iterations 2
expect "at pp 1 the idle share is the replicas' imbalance, not a pipeline bubble" 0 "^replica imbalance " -- "$DPSIM" sim --pp 1 --dp 4 --recompute full --iterations 2
# without a pipeline DynaPipe's objective has no max term: the DP cut a batch of 16 full rows into
# one micro-batch, and three of four replicas idled (75%); its one-stage objective gives each work
"$DPSIM" trace gen --mix fixed --len 8192 --samples 64 -o "$TMP/f8k.csv" >/dev/null 2>&1
check "at pp 1 the dynamic batcher gives every replica work" bash -c "'$DPSIM' sim --model llama3.1-8b \
  --hw dgx-h100 --tp 8 --pp 1 --dp 4 --trace '$TMP/f8k.csv' --max-seqlen 8192 --global-tokens 131072 \
  --iterations 2 --recompute full --batching dynamic 2>/dev/null |
  awk '/^micro-batches per iteration/ { m = \$4 } /^replica imbalance/ { i = \$3 + 0 }
       END { exit !(m >= 4 && i < 25) }'"
"$DPSIM" sim --pp 2 --dp 2 --recompute full --iterations 2 --json >"$TMP/budget.json" 2>/dev/null
check "... GPU-hours are hours x GPUs, hours 1e9 / throughput / 3600 (JSON)" python3 -c "
import json, sys
j = json.load(open('$TMP/budget.json'))
h = 1e9 / j['throughput_tokens_per_s'] / 3600
sys.exit(0 if j['gpus'] == 4 and abs(j['hours_per_billion_tokens'] / h - 1) < 1e-9 and abs(j['gpu_hours_per_billion_tokens'] / (4 * h) - 1) < 1e-9 else 1)"

finish
