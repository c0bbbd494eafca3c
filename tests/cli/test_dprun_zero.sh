#!/usr/bin/env bash
# tier: full (MPI runs of 4 to 8 ranks: about 15 s; make check runs it, make test not)
# ZeRO-2 and ZeRO-3 in the validation runtime (both backends): a plan made for --zero 2 or 3 over
# replicas (or cp ranks) runs with each rank holding its shard of every layer: ZeRO-3 gathers each
# layer's parameters for every forward and backward (one layer ahead), both reduce-scatter each
# micro-batch's gradients after its backward, ZeRO-2 gathers the parameters after the iteration.
# The gradients reduced over the shards end with the norm of the same samples run without ZeRO, to
# 1e-9 relative: split backwards (ZB-H1's W), full recompute, with tensor parallelism (SP) and with
# context parallelism; sharded over a group and replicated across (HSDP) to the norm of the whole
# group's sharding. The cuda backend runs them over NCCL (on the fake GPU here) to the same norm.
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
# HSDP (--shard-group): ZeRO sharded over a group of the replicas (or of the cp ranks), each shard
# all-reduced with its peers of the other groups after the iteration: the norm of the same plan
# sharded over all of them, ZeRO-3 and ZeRO-2, over replicas and over cp ranks
hsdp() { # NAME ARGS...: as plan, 1,024 tokens (4 rows: one per replica of 4)
  plan "$@" --global-tokens 1024
}
hsdp f3 --dp 4 --zero 3
run_norm f3 8 >/dev/null
hsdp h3 --dp 4 --zero 3 --shard-group 2
same h3 f3 8
check "... the HSDP plan says its group" grep -q '"shard_group":2' "$TMP/h3.json"
if [ -z "$SANITIZED" ]; then
  hsdp f2 --dp 4 --zero 2
  run_norm f2 8 >/dev/null
  hsdp h2 --dp 4 --zero 2 --shard-group 2
  same h2 f2 8
  hsdp f3c --cp 2 --dp 2 --zero 3
  run_norm f3c 8 >/dev/null
  hsdp h3c --cp 2 --dp 2 --zero 3 --shard-group 2
  same h3c f3c 8
fi
check "a plan for CPU ranks overlaps nothing (their cores move the data: hw.h comm_on_cores)" \
  grep -q '"overlap":[[:space:]]*"none"' "$TMP/z3.json"
expect "dpsim validate re-prices ZeRO-3's collectives at the bytes the runtime moved" 0 "ZeRO-3's collectives inside the plan's forwards and backwards re-priced" -- \
  "$DPSIM" validate --plan "$TMP/z3.json" --measured "$TMP/z3.csv"
expect "dpsim validate reads the ZeRO-3 timeline" 0 "mean absolute error" -- \
  "$DPSIM" validate --plan "$TMP/z3.json" --measured "$TMP/z3.csv"

# The cuda backend runs them too (runtime/exec_gpu.c, NCCL's all-gather and reduce-scatter on a
# stream of their own), here on the fake GPU (tests/unit/fake_cuda.c: the CPU layer, NCCL as MPI):
# in fp64 the norm of the CPU ranks to 1e-9, and each rank's collectives as many as the layout's
# rule gives, counted from its own timeline (L layers a stage): ZeRO-3 gathers L for every F and
# every B, ZeRO-2 L after the run; both reduce-scatter L for every B that completes the weight
# gradients (or every W), and gather L more for the gradient figure.
FAKE=$(dirname "$DPSIM")/tests/dprun-fake-gpu
L=2 # layers a stage: llama_tiny's 4 over the plans' 2 stages
gpu_zero() { # NAME ZERO: plan NAME (2 stages x 2 replicas) on 4 fake GPUs
  local name=$1 zero=$2 a b
  timeout 300 $MPIRUN -np 4 -x FAKE_CUDA_REPORT=1 "$FAKE" --plan "$TMP/$name.json" --backend cuda \
    --dtype fp64 --warmup 0 --no-prepare --no-noise --out "$TMP/g$name.csv" >"$TMP/g$name.out" 2>&1
  a=$(norm "$TMP/ref.out") b=$(norm "$TMP/g$name.out")
  local counts want
  counts=$(grep -Eo 'rank [0-9]+ sent [0-9]+ bytes over NCCL, [0-9]+ all-gathers, [0-9]+ reduce-scatters' "$TMP/g$name.out" |
    awk '{print $2, $8, $10}' | sort -n | tr '\n' ' ')
  want=$(awk -F, -v zero="$zero" -v L=$L 'NR > 1 { r = $7 * 2 + $2; n[r, $3]++ }
    END { for (r = 0; r < 4; r++) {
            w = n[r, "W"] ? n[r, "W"] : n[r, "B"]
            ag = (zero == 3 ? L * (n[r, "F"] + n[r, "B"]) : L) + L
            printf "%d %d %d ", r, ag, L * w } }' "$TMP/g$name.csv")
  if [ -n "$a" ] && [ -n "$b" ] && [ "$counts" = "$want" ] &&
     awk -v a="$a" -v b="$b" 'BEGIN { d = (a > b ? a - b : b - a) / a; exit !(d < 1e-9) }'; then
    ok "$name on the cuda backend (fake GPU, fp64): gradient norm $b as the cpu ranks', collectives per rank (rank, all-gathers, reduce-scatters) $counts"
  else
    not_ok "$name on the cuda backend: norm ${b:-none} (cpu ${a:-none}), collectives '$counts', want '$want'" "$(tail -c 400 "$TMP/g$name.out")"
  fi
}
gpu_zero z3 3
expect "the cuda backend refuses an HSDP plan (it shards over the whole group), naming the cpu backend" 1 "HSDP, \"shard_group\"\\), and the cuda backend shards over the whole data-parallel group" -- \
  timeout 120 $MPIRUN -np 8 "$FAKE" --plan "$TMP/h3.json" --backend cuda --out "$TMP/x.csv"
if [ -z "$SANITIZED" ]; then
  gpu_zero z2 2
  gpu_zero z3zb 3
  gpu_zero z3full 3
fi
# Replicas in lockstep: ZeRO-2/3's collectives meet across the replicas in order, so each replica
# runs as many micro-batches. A batch that the token batcher cuts into three micro-batches of 512
# tokens, which Karmarkar-Karp deals 2 + 1 under ZeRO-1, is planned under ZeRO-3 with its heaviest
# micro-batch split in two (scheduler/microbatch.h) and runs, to the norm of the same micro-batches
# without ZeRO; the ZeRO-1 dealing under a ZeRO-3 header is refused. (The dynamic batcher's
# one-stage objective deals every replica as much: it no longer makes an odd count here.)
count_of() { grep -o "\"replica\":$2,\"pred_ms\"" "$TMP/$1.json" | wc -l; }
lock() { # NAME ZERO
  "$DPSIM" plan --hw cpu --analytic --model gpt-tiny --dp 2 --zero "$2" --pp 1 --max-seqlen 64 \
    --batching token --mb-tokens 512 --global-tokens 1536 --iterations 1 -o "$TMP/$1.json" \
    >"$TMP/$1.plan" 2>&1
}
lock uneven1 1
lock even3 3
check "(a ZeRO-1 plan whose replicas run $(count_of uneven1 0) and $(count_of uneven1 1) micro-batches)" \
  bash -c "[ $(count_of uneven1 0) -ne $(count_of uneven1 1) ]"
check "the same batch under ZeRO-3: each replica runs as many ($(count_of even3 0) and $(count_of even3 1))" \
  bash -c "[ $(count_of even3 0) -eq $(count_of even3 1) ] && [ $(count_of even3 0) -gt 0 ]"
sed -E 's/"zero":[[:space:]]*3/"zero": 0/' "$TMP/even3.json" >"$TMP/even0.json"
run_norm even0 2 >/dev/null
same even3 even0 2
sed -E 's/"zero":[[:space:]]*1/"zero": 3/' "$TMP/uneven1.json" >"$TMP/uneven.json"
expect "a ZeRO-3 plan whose replicas run 1 and 2 micro-batches is refused: their collectives meet in order" 1 "replica 0 runs [0-9]+ forwards and backwards, replica 1 [0-9]+, a different count" -- \
  timeout 120 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/uneven.json" --out "$TMP/x.csv"
finish
