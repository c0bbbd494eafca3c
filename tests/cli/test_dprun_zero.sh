#!/usr/bin/env bash
# tier: full (MPI runs of 4 to 8 ranks: about 15 s; make check runs it, make test not)
# ZeRO-2 and ZeRO-3 in the validation runtime (runtime/exec.c): a plan made for --zero 2 or 3 over
# replicas (or cp ranks) runs with each rank holding its shard of every layer: ZeRO-3 gathers each
# layer's parameters for every forward and backward (one layer ahead), both reduce-scatter each
# micro-batch's gradients after its backward, ZeRO-2 gathers the parameters after the iteration.
# The gradients reduced over the shards end with the norm of the same samples run without ZeRO, to
# 1e-9 relative: split backwards (ZB-H1's W), full recompute, with tensor parallelism (SP) and with
# context parallelism. The cuda backend refuses them by name.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_dprun.sh"
LLAMA=tests/cli/golden/llama_tiny.json

plan() { # NAME ARGS...: a one-iteration LLaMA-kind plan on 2 stages, rows packed to 256 tokens
  local name=$1; shift
  "$DPSIM" plan --hw cpu --analytic --global-tokens 512 --iterations 1 --batching packing \
    --max-seqlen 256 --model $LLAMA --pp 2 "$@" -o "$TMP/$name.json" >"$TMP/$name.plan" 2>&1
}

plan ref --dp 2
run_norm ref 4 >/dev/null
plan z3 --dp 2 --zero 3
same z3 ref 4
if [ -z "$SANITIZED" ]; then # the sanitizer build runs one plan per layout
  plan z2 --dp 2 --zero 2
  same z2 ref 4
  plan z3zb --dp 2 --zero 3 --schedule zb1
  same z3zb ref 4
  plan z3full --dp 2 --zero 3 --recompute full
  same z3full ref 4
  plan z3tp --dp 2 --zero 3 --tp 2
  same z3tp ref 8
  plan z3cp --cp 2 --zero 3
  same z3cp ref 4
fi
expect "dpsim validate reads the ZeRO-3 timeline" 0 "mean absolute error" -- \
  "$DPSIM" validate --plan "$TMP/z3.json" --measured "$TMP/z3.csv"
expect "the cuda backend refuses ZeRO-3 over replicas (the cpu backend runs it)" 1 "planned for ZeRO-3 over 2 ranks .* the cuda backend all-reduces whole gradients" -- \
  timeout 60 "$DPRUN" --plan "$TMP/z3.json" --backend cuda --out "$TMP/x.csv"
"$DPSIM" plan --hw cpu --analytic --model gpt-tiny --dp 2 --zero 3 --pp 1 --max-seqlen 64 \
  --global-tokens 1536 --iterations 1 -o "$TMP/uneven.json" >/dev/null 2>&1
check "(a ZeRO-3 plan whose replicas hold 1 and 2 micro-batches)" \
  bash -c "[ \$(grep -o '\"replica\":0' '$TMP/uneven.json' | wc -l) -ne \$(grep -o '\"replica\":1' '$TMP/uneven.json' | wc -l) ]"
expect "... is refused: the replicas' collectives meet in order" 1 "replica 0 runs [0-9]+ forwards and backwards, replica 1 [0-9]+, a different count" -- \
  timeout 120 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/uneven.json" --out "$TMP/x.csv"
finish
