#!/usr/bin/env bash
# tier: full (MPI runs of up to 8 ranks: about half a minute; make check runs it, make test not)
# Context parallelism in the validation runtime (runtime/layer.h rt_cp, exec.c): a plan made for
# cp 2 runs on tp x cp x pp x dp ranks, each with its pieces of every sample (2 cp chunks a
# sample, causally balanced), the keys and values gathered for attention and their gradients
# reduce-scattered back, and ends with the gradient norm of the same samples run whole (cp 1), to
# 1e-9 relative: GPT and LLaMA-3-kind layers (GQA, RoPE, SwiGLU, RMSNorm), split backwards (ZB-H1's
# W), full and selective recompute, with tensor parallelism (SP on and off), with replicas; the
# cuda backend on the fake GPU the same. Then dprun profile --cp, dpsim plan on that profile,
# dpsim validate at that layout, and every refusal.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_dprun.sh"
LLAMA=tests/cli/golden/llama_tiny.json

plan() { # NAME ARGS...: a one-iteration plan, rows packed to 256 tokens (a multiple of 2 cp)
  local name=$1; shift
  "$DPSIM" plan --hw cpu --analytic --global-tokens 512 --iterations 1 --batching packing \
    --max-seqlen 256 "$@" -o "$TMP/$name.json" >"$TMP/$name.plan" 2>&1
}

# --- the same numbers at every layout --------------------------------------------------------------
plan gpt1 --model gpt-tiny --pp 2
plan gpt2 --model gpt-tiny --pp 2 --cp 2
run_norm gpt1 2 >/dev/null
same gpt2 gpt1 4
if [ -z "$SANITIZED" ]; then # the sanitizer build runs one plan per layout
  plan llama1 --model $LLAMA --pp 2
  run_norm llama1 2 >/dev/null
  plan llama2 --model $LLAMA --pp 2 --cp 2 --schedule zb1
  same llama2 llama1 4
  plan llama2full --model $LLAMA --pp 2 --cp 2 --recompute full
  same llama2full llama1 4
  plan llama2sel --model $LLAMA --pp 2 --cp 2 --recompute selective
  same llama2sel llama1 4
  plan llama4 --model $LLAMA --pp 1 --cp 4
  plan llama1pp1 --model $LLAMA --pp 1
  run_norm llama1pp1 1 >/dev/null
  same llama4 llama1pp1 4
  plan tpcp --model $LLAMA --pp 2 --cp 2 --tp 2
  same tpcp llama1 8
  plan tpcpnosp --model $LLAMA --pp 2 --cp 2 --tp 2 --no-sp
  same tpcpnosp llama1 8
  plan dpcp --model $LLAMA --pp 2 --cp 2 --dp 2
  same dpcp llama1 8
fi
# the cuda backend runs them too (runtime/exec_gpu.c: the keys and values gathered and their
# gradients reduce-scattered on the cp group's NCCL communicator), here on the fake GPU
same_gpu gpt2 gpt1 4
if [ -z "$SANITIZED" ]; then
  same_gpu llama2 llama1 4
  same_gpu tpcp llama1 8
  plan dpcpz3 --model $LLAMA --pp 2 --cp 2 --dp 2 --zero 3
  same_gpu dpcpz3 llama1 8
fi
check "the cp 2 run recorded one row per op (the group's first rank), with its layout" \
  bash -c "head -1 '$TMP/gpt2.csv' | grep -q ',tp,cp$' && [ \$(grep -c ',F,' '$TMP/gpt2.csv') -eq \$(grep -c ',F,' '$TMP/gpt1.csv') ] && grep -q ',1,2$' '$TMP/gpt2.csv'"
check "... and the gradient all-reduce over the cp ranks (one replica)" grep -q ',ALLREDUCE,' "$TMP/gpt2.csv"
expect "dpsim validate reads the cp 2 timeline" 0 "mean absolute error" -- \
  "$DPSIM" validate --plan "$TMP/gpt2.json" --measured "$TMP/gpt2.csv"
cut -d, -f1-12 "$TMP/gpt2.csv" >"$TMP/nocp.csv"
expect "validate refuses a timeline that does not say it ran cp 2" 1 "the plan is for cp 2, and the timeline does not say it ran context parallelism" -- \
  "$DPSIM" validate --plan "$TMP/gpt2.json" --measured "$TMP/nocp.csv"
sed 's/,2$/,1/' "$TMP/gpt2.csv" >"$TMP/cp1rows.csv"
expect "... or says it ran another cp" 1 "the timeline ran cp 1, the plan is for cp 2" -- \
  "$DPSIM" validate --plan "$TMP/gpt2.json" --measured "$TMP/cp1rows.csv"

# --- a profile at the layout, and the round trip on it -----------------------------------------------
if [ -z "$SANITIZED" ]; then # (the sanitizer build runs the layer code above; this adds timing)
  expect "dprun profile --cp 2 on 2 ranks, measuring the links between them" 0 "wrote .*cpu2.json \\(the links between 2 ranks: all-reduce [0-9.]+ GB/s" -- \
    timeout 300 $MPIRUN -np 2 "$DPRUN" profile --cp 2 --mbs 1,2 --seqlen 32,64,128 --repeats 3 -o "$TMP/prof2.csv" \
    --cluster-out "$TMP/cpu2.json"
  check "its rows carry cp 2" bash -c "head -1 '$TMP/prof2.csv' | grep -q ',cp$' && tail -n +2 '$TMP/prof2.csv' | awk -F, '\$9 != 2 { exit 1 }'"
  expect "dpsim plans cp 2 on the cp 2 profile and the measured links" 0 "wrote 2 iterations" -- \
    "$DPSIM" plan --model gpt-tiny --hw "$TMP/cpu2.json" --profile "$TMP/prof2.csv" --cp 2 --pp 1 --max-seqlen 128 --global-tokens 512 --iterations 2 -o "$TMP/rt.json"
  expect "... and refuses cp 4 on it" 2 "no rows for tp 1, cp 4 and recompute none" -- \
    "$DPSIM" plan --model gpt-tiny --hw cpu --profile "$TMP/prof2.csv" --cp 4 --pp 1 --max-seqlen 128 --global-tokens 512 -o "$TMP/x.json"
  expect "mpirun -np 2 runs it (cp 2 x pp 1)" 0 "2 ranks ran 2 iterations" -- \
    timeout 300 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/rt.json" --out "$TMP/rt.csv"
  expect "dpsim validate on it" 0 "mean absolute error" -- "$DPSIM" validate --plan "$TMP/rt.json" --measured "$TMP/rt.csv"
fi
expect "profile --cp 2 with a seqlen 4 does not divide is refused" 1 "seqlen 30: context parallelism cuts each sequence into 2 x cp = 4 chunks" -- \
  timeout 60 "$DPRUN" profile --cp 2 --seqlen 32,30 -o "$TMP/x.csv"
expect "profile --cp 2 without mpirun is refused" 1 "needs a multiple of 2 ranks" -- timeout 60 "$DPRUN" profile --cp 2 -o "$TMP/x.csv"
expect "--cluster-out without mpirun is refused" 1 "--cluster-out measures the links between ranks: run it under mpirun -np 2 or more" -- \
  timeout 60 "$DPRUN" profile --cluster-out "$TMP/x.json" -o "$TMP/x.csv"

# --- refusals: every rank exits, the counts named ----------------------------------------------------
expect "a cp 2 x pp 2 plan on 2 ranks" 1 "needs tp x cp x pp x dp = 1 x 2 x 2 x 1 = 4 ranks, but mpirun started 2" -- \
  timeout 120 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/gpt2.json" --out "$TMP/x.csv"
"$DPSIM" plan --hw cpu --analytic --global-tokens 512 --iterations 1 --model $LLAMA --pp 2 --cp 2 \
  --batching packing-ffd-varlen --max-seqlen 256 -o "$TMP/varlen.json" >/dev/null 2>&1
expect "a varlen plan whose samples 2 cp does not divide" 1 "context parallelism cuts each sample .* into 2 x cp = 4 chunks, and the sample or padding at token [0-9]+ is [0-9]+ tokens long" -- \
  timeout 120 $MPIRUN -np 4 "$DPRUN" --plan "$TMP/varlen.json" --out "$TMP/x.csv"
plan a2a --model gpt-tiny --pp 2 --cp 2 --cp-kind all-to-all
expect "the all-to-all form is refused, never run as the ring" 1 "in the all-to-all form, and dprun runs the ring form" -- \
  timeout 120 $MPIRUN -np 4 "$DPRUN" --plan "$TMP/a2a.json" --out "$TMP/x.csv"
"$DPSIM" plan --hw cpu --analytic --global-tokens 512 --iterations 1 --model gpt-tiny --pp 2 --cp auto \
  --cp-max 2 --batching dynamic --max-seqlen 256 -o "$TMP/auto.json" >/dev/null 2>&1
expect "a plan with a degree per micro-batch (--cp auto) is refused" 1 "a context-parallel degree per micro-batch .* dprun runs one degree" -- \
  timeout 120 $MPIRUN -np 4 "$DPRUN" --plan "$TMP/auto.json" --out "$TMP/x.csv"
expect "one GPU refuses a cp 2 plan, naming the ranks it needs" 1 "one GPU runs tp 1, cp 1 plans .*mpirun -np 4" -- \
  timeout 60 "$FAKE" --plan "$TMP/gpt2.json" --backend cuda --out "$TMP/x.csv"
expect "dprun profile --cp on the cuda backend is refused" 1 "context parallelism runs on the cpu backend" -- \
  timeout 60 "$FAKE" profile --backend cuda --cp 2 -o "$TMP/x.csv"
finish
