#!/usr/bin/env bash
# tier: full (MPI runs of up to 8 ranks: about a minute; make check runs it, make test not)
# Tensor parallelism in the validation runtime (runtime/exec.c, layer.c): a plan made for tp 2
# runs on tp x pp x dp ranks, each with its share of every layer (Megatron's split), and ends with
# the gradient norm of the same samples run whole (tp 1), to 1e-9 relative, with sequence
# parallelism on and off, over GPT and LLaMA-3-kind layers (GQA, RoPE, SwiGLU, RMSNorm), varlen
# rows, split backwards (ZB-H1's W), full recompute and replicas. The plans are packed by a
# batching that does not depend on the costs (the tp 1 and tp 2 plans hold the same micro-batches,
# which the script checks). Then dprun profile --tp, dpsim validate at that layout, and every
# refusal: wrong rank counts, a tp that does not divide the model; the cuda backend on the fake GPU
# (test_dprun_cp.sh runs context parallelism).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_dprun.sh"

plan() { # NAME ARGS...: a one-iteration plan, cost-independent batching unless ARGS say
  local name=$1; shift
  "$DPSIM" plan --hw cpu --analytic --global-tokens 512 --iterations 1 "$@" -o "$TMP/$name.json" >/dev/null 2>&1
}

# --- the same numbers at every layout --------------------------------------------------------------
plan gpt1 --model gpt-tiny --pp 2 --batching packing --max-seqlen 128
plan gpt2 --model gpt-tiny --pp 2 --batching packing --max-seqlen 128 --tp 2
check "a tp 2 plan says sequence parallelism is on (Megatron's default with tp)" grep -Eq '"sp": ?true' "$TMP/gpt2.json"
run_norm gpt1 2 >/dev/null
same gpt2 gpt1 4
plan gpt2nosp --model gpt-tiny --pp 2 --batching packing --max-seqlen 128 --tp 2 --no-sp
check "--no-sp is in the plan" grep -Eq '"sp": ?false' "$TMP/gpt2nosp.json"
if [ -z "$SANITIZED" ]; then # the sanitizer build runs one plan per layout
  same gpt2nosp gpt1 4
  plan llama1 --model tests/cli/golden/llama_tiny.json --pp 2 --batching packing-ffd-varlen --max-seqlen 256
  run_norm llama1 2 >/dev/null
  check "the LLaMA plan packs several samples into a varlen row" grep -Eq '"seq_lens": ?\[[0-9]+, ?[0-9]' "$TMP/llama1.json"
  plan llama2 --model tests/cli/golden/llama_tiny.json --pp 2 --batching packing-ffd-varlen --max-seqlen 256 --tp 2
  same llama2 llama1 4
  plan llama2nosp --model tests/cli/golden/llama_tiny.json --pp 2 --batching packing-ffd-varlen --max-seqlen 256 --tp 2 --no-sp
  same llama2nosp llama1 4
  plan llama2zb --model tests/cli/golden/llama_tiny.json --pp 2 --batching packing-ffd-varlen --max-seqlen 256 --tp 2 --schedule zb1
  same llama2zb llama1 4
  plan llama2full --model tests/cli/golden/llama_tiny.json --pp 2 --batching packing-ffd-varlen --max-seqlen 256 --tp 2 --recompute full
  same llama2full llama1 4
  plan dp1 --model gpt-tiny --pp 2 --dp 2 --batching packing --max-seqlen 128
  run_norm dp1 4 >/dev/null
  plan dp2 --model gpt-tiny --pp 2 --dp 2 --batching packing --max-seqlen 128 --tp 2
  same dp2 dp1 8
fi
check "the tp 2 run recorded one row per op (the tp group's first rank), with its layout" \
  bash -c "head -1 '$TMP/gpt2.csv' | grep -q ',tp,cp$' && [ \$(grep -c ',F,' '$TMP/gpt2.csv') -eq \$(grep -c ',F,' '$TMP/gpt1.csv') ] && grep -q ',2,1$' '$TMP/gpt2.csv'"
expect "dpsim validate reads the tp 2 timeline" 0 "mean absolute error" -- \
  "$DPSIM" validate --plan "$TMP/gpt2.json" --measured "$TMP/gpt2.csv"
cut -d, -f1-11 "$TMP/gpt2.csv" >"$TMP/notp.csv"
expect "validate refuses a timeline that does not say it ran tp 2" 1 "the plan is for tp 2, and the timeline does not say" -- \
  "$DPSIM" validate --plan "$TMP/gpt2.json" --measured "$TMP/notp.csv"
sed 's/,2,1$/,1,1/' "$TMP/gpt2.csv" >"$TMP/tp1rows.csv"
expect "... or says it ran another tp" 1 "the timeline ran tp 1, the plan is for tp 2" -- \
  "$DPSIM" validate --plan "$TMP/gpt2.json" --measured "$TMP/tp1rows.csv"

# --- the cuda backend runs them too (runtime/exec_gpu.c: the layers' collectives on the tp group's
# NCCL communicator, the head split by vocabulary), here on the fake GPU (tests/unit/fake_cuda.c:
# the CPU layer, NCCL as MPI): in fp64 the norm of the same samples run whole on the cpu ranks
same_gpu gpt2 gpt1 4
if [ -z "$SANITIZED" ]; then
  same_gpu gpt2nosp gpt1 4
  same_gpu llama2full llama1 4
  plan dp2z3 --model gpt-tiny --pp 2 --dp 2 --zero 3 --batching packing --max-seqlen 128 --tp 2
  same_gpu dp2z3 dp1 8
fi
expect "one GPU refuses a tp 2 plan, naming the ranks it needs" 1 "one GPU runs tp 1, cp 1 plans .*mpirun -np 4" -- \
  timeout 60 "$FAKE" --plan "$TMP/gpt2.json" --backend cuda --out "$TMP/x.csv"
expect "dprun profile --tp on the cuda backend is refused" 1 "the cuda backend times whole layers" -- \
  timeout 60 "$FAKE" profile --backend cuda --tp 2 -o "$TMP/x.csv"

# --- a profile at the layout, and the round trip on it -----------------------------------------------
if [ -z "$SANITIZED" ]; then # (the sanitizer build runs the layer code above; this adds timing)
  expect "dprun profile --tp 2 on 2 ranks" 0 "wrote" -- \
    timeout 300 $MPIRUN -np 2 "$DPRUN" profile --tp 2 --mbs 1,2,4 --seqlen 32,64 --repeats 3 -o "$TMP/prof2.csv"
  check "its rows say tp 2" bash -c "tail -n +2 '$TMP/prof2.csv' | cut -d, -f1 | sort -u | grep -qx 2"
  expect "dpsim plans tp 2 on the tp 2 profile" 0 "wrote 2 iterations" -- \
    "$DPSIM" plan --model gpt-tiny --hw cpu --profile "$TMP/prof2.csv" --tp 2 --pp 1 --max-seqlen 64 --global-tokens 512 --iterations 2 -o "$TMP/rt.json"
  expect "mpirun -np 2 runs it (tp 2 x pp 1)" 0 "2 ranks ran 2 iterations" -- \
    timeout 300 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/rt.json" --out "$TMP/rt.csv"
  expect "dpsim validate on it" 0 "mean absolute error" -- "$DPSIM" validate --plan "$TMP/rt.json" --measured "$TMP/rt.csv"
  # the profile says it was measured with sequence parallelism, so --no-sp is refused on it; one
  # measured without it (its sp column 0, as --no-sp writes) plans without it by default, saying
  # so, and with --no-sp
  check "its rows say sp 1 (measured with sequence parallelism)" bash -c \
    "head -1 '$TMP/prof2.csv' | grep -q ',sp\$' && tail -n +2 '$TMP/prof2.csv' | awk -F, '\$NF != 1 { exit 1 }'"
  expect "an SP-on profile is refused for an SP-off plan, saying so" 2 "measured with sequence parallelism" -- \
    "$DPSIM" plan --model gpt-tiny --hw cpu --profile "$TMP/prof2.csv" --tp 2 --no-sp --pp 1 --max-seqlen 64 --global-tokens 512 --iterations 1 -o "$TMP/x.json"
  awk -F, -v OFS=, 'NR > 1 { $NF = 0 } { print }' "$TMP/prof2.csv" >"$TMP/prof2nosp.csv"
  expect "an SP-off profile plans without SP by default, saying so" 0 "the profile was measured without it" -- \
    "$DPSIM" plan --model gpt-tiny --hw cpu --profile "$TMP/prof2nosp.csv" --tp 2 --pp 1 --max-seqlen 64 --global-tokens 512 --iterations 1 -o "$TMP/x.json"
  check "... its plan says sp false" grep -q '"sp":false' "$TMP/x.json"
  expect "... and with --no-sp" 0 "wrote 1 iterations" -- \
    "$DPSIM" plan --model gpt-tiny --hw cpu --profile "$TMP/prof2nosp.csv" --tp 2 --no-sp --pp 1 --max-seqlen 64 --global-tokens 512 --iterations 1 -o "$TMP/x.json"
fi
# tp 3 under sequence parallelism (the default): the planner pads every micro-batch to a multiple
# of 3 tokens (models/mesh.h mesh_token_multiple), so padding's micro-batches split and dprun runs
# the plan on tp 3 x pp 2 ranks; a model of 6 heads, 6 key/value heads, ffn 1536, 3072 tokens
"$DPSIM" models --show gpt-tiny 2>/dev/null | sed -e 's/"num_attn_heads":[^,]*/"num_attn_heads": 6/' \
  -e 's/"num_query_groups":[^,]*/"num_query_groups": 6/' -e 's/"hidden_size":[^,]*/"hidden_size": 384/' \
  -e 's/"ffn_hidden_size":[^,]*/"ffn_hidden_size": 1536/' -e 's/"vocab_size":[^,]*/"vocab_size": 3072/' \
  -e 's/"num_layers":[^,]*/"num_layers": 2/' -e 's/"name":[^,]*/"name": "six-heads"/' >"$TMP/six.json"
"$DPSIM" plan --model "$TMP/six.json" --hw cpu --analytic --tp 3 --pp 2 --max-seqlen 256 --global-tokens 2048 \
  --iterations 1 --batching padding -o "$TMP/tp3sp.json" >/dev/null 2>&1
check "tp 3 with SP: every micro-batch's tokens a multiple of 3" bash -c \
  "grep -q '\"sp\": *true' '$TMP/tp3sp.json' && ! grep -o '\"mbs\": *[0-9]*, *\"enc_len\": *[0-9]*' '$TMP/tp3sp.json' | \
   tr -dc '0-9,\n' | awk -F, '{ n++ } (\$1 * \$2) % 3 { bad = 1 } END { exit !(bad || n == 0) }'"
expect "... and dprun runs it on tp 3 x pp 2 ranks" 0 "6 ranks ran 1 iterations" -- \
  timeout 300 $MPIRUN -np 6 "$DPRUN" --plan "$TMP/tp3sp.json" --out "$TMP/tp3sp.csv"
expect "profile --tp 2 without mpirun is refused" 1 "needs a multiple of 2 ranks" -- timeout 60 "$DPRUN" profile --tp 2 -o "$TMP/x.csv"
expect "profile --tp 3 on 4 heads is refused" 1 "tp 3 does not divide the 4 attention heads" -- timeout 60 "$DPRUN" profile --tp 3 -o "$TMP/x.csv"

# --- refusals: every rank exits, the counts named ----------------------------------------------------
expect "a tp 2 x pp 2 plan on 2 ranks" 1 "needs tp x pp x dp = 2 x 2 x 1 = 4 ranks, but mpirun started 2" -- \
  timeout 120 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/gpt2.json" --out "$TMP/x.csv"
expect "... on 6 ranks" 1 "= 4 ranks, but mpirun started 6" -- \
  timeout 120 $MPIRUN -np 6 "$DPRUN" --plan "$TMP/gpt2.json" --out "$TMP/x.csv"
sed 's/"tp": *2/"tp": 3/' "$TMP/gpt2.json" >"$TMP/tp3.json"
expect "a tp that does not divide the heads" 1 "tp 3 does not divide the 4 attention heads of gpt-tiny" -- \
  timeout 120 $MPIRUN -np 6 "$DPRUN" --plan "$TMP/tp3.json" --out "$TMP/x.csv"
"$DPSIM" plan --model t5-tiny --hw cpu --analytic --tp 2 --pp 2 --max-seqlen 64 --max-dec-seqlen 32 \
  --global-tokens 256 --iterations 1 -o "$TMP/t5tp.json" >/dev/null 2>&1
expect "a T5 tp plan is refused (cross-attention is not split)" 1 "splits GPT-kind layers only" -- \
  timeout 120 $MPIRUN -np 4 "$DPRUN" --plan "$TMP/t5tp.json" --out "$TMP/x.csv"
finish
