#!/usr/bin/env bash
# tier: full (MPI runs of 1 to 4 ranks: about 10 s; make check runs it, make test not)
# Uneven pipeline stages (--layers-per-stage) in the planner and the validation runtime: a layer's
# parameters are its own whatever the stage that holds it (seeded by its index in the model), so
# one iteration of the same micro-batches (rows packed, whatever the split) ends with the same
# fp64 gradient norm on one stage, on two split evenly, on two split 1,3 and 0,4 (the embedding
# alone), interleaved over 4 virtual stages split 0,2,2,0, by the rule less:2,0 (1,3) and on a V by
# less:1,1 (1,2,1,0), and on the fake GPU's executor. A split that does not fit the model is
# refused by the planner and by dprun, naming it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_dprun.sh"
LLAMA=tests/cli/golden/llama_tiny.json

plan() { # NAME ARGS...: a one-iteration LLaMA-kind plan, rows packed to 256 tokens
  local name=$1; shift
  "$DPSIM" plan --hw cpu --analytic --global-tokens 512 --iterations 1 --batching packing \
    --max-seqlen 256 --model $LLAMA "$@" -o "$TMP/$name.json" >"$TMP/$name.plan" 2>&1
}

plan ref --pp 1
run_norm ref 1 >/dev/null
plan even --pp 2
same even ref 2
plan s13 --pp 2 --layers-per-stage 1,3
check "the plan's header lists the split" grep -Eq '"layers_per_stage":[[:space:]]*\[[[:space:]]*1,[[:space:]]*3[[:space:]]*\]' "$TMP/s13.json"
same s13 ref 2
plan s04 --pp 2 --layers-per-stage 0,4
same s04 ref 2
plan v0220 --pp 2 --chunks 2 --schedule interleaved --layers-per-stage 0,2,2,0
same v0220 ref 2
plan less20 --pp 2 --layers-per-stage less:2,0
check "the rule's plan says it in its header" grep -Eq '"first_stage_less_layers":[[:space:]]*2' "$TMP/less20.json"
check "... and places 1,3 (4 layers and 2 standing for the embedding, 3 a stage, the first 2 fewer): s13's timeline" bash -c \
  "[ \"\$('$DPSIM' sim --plan '$TMP/less20.json' | grep '^timeline hash')\" = \"\$('$DPSIM' sim --plan '$TMP/s13.json' | grep '^timeline hash')\" ]"
same less20 ref 2
plan lessv --pp 2 --schedule zbv --layers-per-stage less:1,1
plan l1210 --pp 2 --schedule zbv --layers-per-stage 1,2,1,0
check "on a V, less:1,1 places 1,2,1,0: the same timeline as that list's" bash -c \
  "[ \"\$('$DPSIM' sim --plan '$TMP/lessv.json' | grep '^timeline hash')\" = \"\$('$DPSIM' sim --plan '$TMP/l1210.json' | grep '^timeline hash')\" ] && ! cmp -s '$TMP/lessv.json' '$TMP/l1210.json'"
check "... and not the even split's" bash -c \
  "'$DPSIM' plan --hw cpu --analytic --global-tokens 512 --iterations 1 --batching packing --max-seqlen 256 --model $LLAMA --pp 2 --schedule zbv -o '$TMP/evenv.json' >/dev/null 2>&1 && [ \"\$('$DPSIM' sim --plan '$TMP/lessv.json' | grep '^timeline hash')\" != \"\$('$DPSIM' sim --plan '$TMP/evenv.json' | grep '^timeline hash')\" ]"
same lessv ref 2
[ -z "$SANITIZED" ] && same_gpu s13 ref 2
check "the split moves the planned memory: stage 0 of 1,3 holds less than stage 1" bash -c \
  "'$DPSIM' sim --plan '$TMP/s13.json' | grep -E '^peak memory per stage' | awk '{ exit !(\$6 < \$7) }'"
expect "a split that does not add up to the model's layers is refused" 1 \
  "--layers-per-stage adds up to 5 layers, but .* has 4" -- \
  "$DPSIM" plan --hw cpu --analytic --max-seqlen 256 --model $LLAMA --pp 2 --layers-per-stage 2,3 --iterations 1
expect "... a middle stage without a layer" 1 "stage 1 holds no layer" -- \
  "$DPSIM" plan --hw cpu --analytic --max-seqlen 256 --model $LLAMA --pp 3 --layers-per-stage 2,0,2 --iterations 1
expect "... a count per virtual stage" 1 "lists 2 stages, but the pipeline has 4" -- \
  "$DPSIM" plan --hw cpu --analytic --max-seqlen 256 --model $LLAMA --pp 2 --chunks 2 --schedule interleaved --layers-per-stage 2,2 --iterations 1
expect "... a list that is not numbers" 2 "must list whole numbers of layers" -- \
  "$DPSIM" plan --hw cpu --analytic --max-seqlen 256 --model $LLAMA --pp 2 --layers-per-stage 2,x
expect "... a rule that leaves the first stage fewer than none" 2 "less:3,0 over 4 virtual stages .pp x chunks. leaves stage 0 fewer than none" -- \
  "$DPSIM" plan --hw cpu --analytic --max-seqlen 256 --model $LLAMA --pp 4 --layers-per-stage less:3,0 --iterations 1
expect "... a rule that is not two numbers" 2 "or be less:F,L" -- \
  "$DPSIM" plan --hw cpu --analytic --max-seqlen 256 --model $LLAMA --pp 2 --layers-per-stage less:1
expect "tune searches the pipeline: a split is refused there" 2 "layers-per-stage" -- \
  "$DPSIM" tune --hw cpu --analytic --model $LLAMA --layers-per-stage 2,2
python3 - "$TMP/s13.json" "$TMP/bad.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["layers_per_stage"] = [3, 3]; json.dump(d, open(sys.argv[2], "w"))
PY
expect "dprun refuses a plan whose split does not fit its model" 1 "bad.json: --layers-per-stage adds up to 6" -- \
  $MPIRUN -np 2 "$DPRUN" --plan "$TMP/bad.json" --out "$TMP/bad.csv"
python3 - "$TMP/less20.json" "$TMP/both.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); d["layers_per_stage"] = [1, 3]; json.dump(d, open(sys.argv[2], "w"))
PY
expect "a plan with both a list and the rule is refused, naming both fields" 1 \
  'both.json: "layers_per_stage" lists the layers; "first_stage_less_layers" and "last_stage_less_layers" give them by a rule instead' -- \
  "$DPSIM" sim --plan "$TMP/both.json"
finish
