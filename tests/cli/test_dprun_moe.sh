#!/usr/bin/env bash
# tier: full (MPI runs of 1 to 4 ranks: about 15 s; make check runs it, make test not)
# A mixture of experts in the validation runtime (runtime/layer.c "Experts", exec.c): a tiny
# LLaMA-kind MoE (8 experts of width 96, 2 a token, top-k softmax gates) planned with expert
# parallelism ep 2 and ep 4 folded over the tensor-parallel group runs on 2 and 4 cpu ranks and
# ends with the fp64 gradient norm of the same samples run at ep 1 on one rank (1e-9 relative):
# each rank runs its experts on the copies routed to them and the group's sum meets where a dense
# layer's MLP partial sums meet (Megatron's all-gather token dispatcher), under SP and without it,
# with ep below tp (each expert on two ranks, its gradient summed over them), split backwards
# (ZB-H1's W), full recompute, a second pipeline stage, varlen rows, context parallelism, replicas
# and ZeRO-3. Then what the runtime refuses, naming the field: ep over replicas (not inside tp), a
# shared expert, dense first layers, dprun profile of a MoE model, any MoE plan on the cuda backend.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_dprun.sh"
MOE=tests/cli/golden/moe_tiny.json

plan() { # NAME ARGS...: a one-iteration plan of the tiny MoE, rows packed to 128 tokens
  local name=$1; shift
  "$DPSIM" plan --hw cpu --analytic --global-tokens 512 --iterations 1 --batching packing \
    --max-seqlen 128 --model "$MOE" "$@" -o "$TMP/$name.json" >"$TMP/$name.plan" 2>&1
}

plan ep1 --pp 1
run_norm ep1 1 >/dev/null
check "an ep 1 run of the MoE ends with a gradient norm" grep -q 'gradient norm' "$TMP/ep1.out"
plan ep2 --pp 1 --tp 2 --ep 2
check "an ep 2 plan says its expert parallelism" grep -Eq '"ep": ?2' "$TMP/ep2.json"
same ep2 ep1 2
plan ep4 --pp 1 --tp 4 --ep 4
same ep4 ep1 4
plan ep2tp4 --pp 1 --tp 4 --ep 2
same ep2tp4 ep1 4
if [ -z "$SANITIZED" ]; then # the sanitizer build runs the three layouts above
  plan ep2nosp --pp 1 --tp 2 --ep 2 --no-sp
  same ep2nosp ep1 2
  plan ep2pp --pp 2 --tp 2 --ep 2
  same ep2pp ep1 4
  plan ep2zb --pp 2 --tp 2 --ep 2 --schedule zb1
  check "the zb1 plan splits its backwards (W instructions)" grep -q '"W"' "$TMP/ep2zb.json"
  same ep2zb ep1 4
  plan ep2full --pp 2 --tp 2 --ep 2 --recompute full
  same ep2full ep1 4
  plan ep2cp --pp 1 --tp 2 --ep 2 --cp 2
  same ep2cp ep1 4
  plan ep2dp --pp 1 --dp 2 --tp 2 --ep 2 --zero 3
  plan ep1dp --pp 1 --dp 2
  run_norm ep1dp 2 >/dev/null
  same ep2dp ep1dp 4
  "$DPSIM" plan --hw cpu --analytic --global-tokens 1024 --iterations 1 --batching packing-ffd-varlen \
    --max-seqlen 256 --model "$MOE" --pp 1 -o "$TMP/vl1.json" >/dev/null 2>&1
  "$DPSIM" plan --hw cpu --analytic --global-tokens 1024 --iterations 1 --batching packing-ffd-varlen \
    --max-seqlen 256 --model "$MOE" --pp 2 --tp 2 --ep 2 -o "$TMP/vl2.json" >/dev/null 2>&1
  check "the varlen plan packs several samples into a row" grep -Eq '"seq_lens": ?\[[0-9]+, ?[0-9]' "$TMP/vl1.json"
  run_norm vl1 1 >/dev/null
  same vl2 vl1 4
fi

# --- refused, naming the field, before anything runs ----------------------------------------------
plan epdp --pp 1 --dp 2 --ep 2
expect "ep over replicas (tp 1) is refused: dprun folds ep over the tp group" 1 "ep must divide tp" -- \
  timeout 60 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/epdp.json" --out "$TMP/refused.csv"
refused_field() { # DESC FIELD VALUE: the tiny MoE with FIELD set, planned; dprun refuses it by FIELD
  sed "s/\"moe_ffn_hidden_size\": 96}/\"moe_ffn_hidden_size\": 96, \"$2\": $3}/" "$MOE" >"$TMP/$2.json"
  plan "$2_plan" --pp 1 --model "$TMP/$2.json"
  expect "$1" 1 "$2" -- timeout 60 $MPIRUN -np 1 "$DPRUN" --plan "$TMP/$2_plan.json" --out "$TMP/refused.csv"
}
refused_field "a shared expert is refused by its field" moe_shared_expert_intermediate_size 64
refused_field "dense first layers are refused by their field" moe_first_dense_layers 1
plan etp2 --pp 1 --tp 2 --etp 2
expect "a plan with expert tensor parallelism is refused, naming etp" 1 "expert tensor parallelism \\(etp 2\\)" -- \
  timeout 60 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/etp2.json" --out "$TMP/refused.csv"
expect "dprun profile refuses a MoE model (a measured profile holds dense layers)" 1 "dprun profile has no expert layers" -- \
  "$DPRUN" profile --model "$MOE" --out "$TMP/moe_profile.csv"
expect "the cuda backend refuses a MoE plan, naming --backend cpu" 1 "backend cpu" -- \
  timeout 60 $MPIRUN -np 2 "$FAKE" --plan "$TMP/ep2.json" --backend cuda --no-prepare --out "$TMP/refused.csv"

finish
