#!/usr/bin/env bash
# tier: full (MPI runs of 1 to 4 ranks: about 10 s; make check runs it, make test not)
# The V schedules in the runtime: ZB-V (--schedule zbv: two chunks a device in a V, B and W
# split) and DualPipeV (--schedule dualpipev: the same V, forwards paired with whole backwards,
# their sends after both). One iteration of the same micro-batches (rows packed) ends with the
# same fp64 gradient norm on one stage, on 2 ranks (LLaMA-kind, 4 layers: a V over 2 stages) and
# on 4 ranks (8 layers), with the embedding and the LM head alone on device 0's two virtual
# stages (--layers-per-stage 0,2,2,0: both on one GPU in a V), and the simulator replays each
# plan to its own timeline. The cuda backend's executor (on the fake GPU: the CPU layer, NCCL as
# MPI) runs them too, its links both ways along the V, on one GPU and on 2 and 4. An auto-v plan
# (a V schedule per iteration) and an auto plan (its placement chosen by the first iteration)
# run to the same norm. The cuda backend refuses a
# V (its links follow a loop), naming --backend cpu.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_dprun.sh"
LLAMA=tests/cli/golden/llama_tiny.json
sed 's/"num_layers": 4/"num_layers": 8/' $LLAMA >"$TMP/llama8.json"

plan() { # NAME MODEL ARGS...: a one-iteration plan, rows packed to 256 tokens
  local name=$1 model=$2; shift 2
  "$DPSIM" plan --hw cpu --analytic --global-tokens 1024 --iterations 1 --batching packing \
    --max-seqlen 256 --model "$model" "$@" -o "$TMP/$name.json" >"$TMP/$name.plan" 2>&1
}

plan ref $LLAMA --pp 1
run_norm ref 1 >/dev/null
plan v2 $LLAMA --pp 2 --schedule zbv
check "a zbv plan says its V and its 2 chunks" bash -c \
  "grep -Eq '\"placement\":[[:space:]]*\"v\"' '$TMP/v2.json' && grep -Eq '\"chunks\":[[:space:]]*2' '$TMP/v2.json'"
same v2 ref 2
plan v0220 $LLAMA --pp 2 --schedule zbv --layers-per-stage 0,2,2,0
same v0220 ref 2
plan ref8 "$TMP/llama8.json" --pp 1
run_norm ref8 1 >/dev/null
plan v4 "$TMP/llama8.json" --pp 4 --schedule zbv
same v4 ref8 4
check "... and the simulator replays it to the timeline it planned" bash -c \
  "[ \"\$(grep -E '^timeline hash' '$TMP/v4.plan')\" = \"\$('$DPSIM' sim --plan '$TMP/v4.json' | grep -E '^timeline hash')\" ]"
# DualPipeV: 8 micro-batches (its 2S on 4 devices: every step of its order) and 4 (fewer: the
# missing ones' ops left out)
plan d2 $LLAMA --pp 2 --schedule dualpipev
check "a dualpipev plan pairs a forward with a whole backward (a SEND_ACT after a W)" python3 -c "
import json,sys
p=json.load(open('$TMP/d2.json'))
ops=[[i['op'] for i in r['instructions']] for it in p['iterations'] for r in it['stages']]
sys.exit(0 if any(o[j]=='W' and 'SEND_ACT' in o[j+1:j+3] for o in ops for j in range(len(o))) else 1)"
same d2 ref 2
plan d0220 $LLAMA --pp 2 --schedule dualpipev --layers-per-stage 0,2,2,0
same d0220 ref 2
plan d4 "$TMP/llama8.json" --pp 4 --schedule dualpipev
same d4 ref8 4
plan d4w "$TMP/llama8.json" --pp 4 --schedule dualpipev --global-tokens 2048
plan ref8w "$TMP/llama8.json" --pp 1 --global-tokens 2048
run_norm ref8w 1 >/dev/null
same d4w ref8w 4
check "... and the simulator replays it to the timeline it planned" bash -c \
  "[ \"\$(grep -E '^timeline hash' '$TMP/d4w.plan')\" = \"\$('$DPSIM' sim --plan '$TMP/d4w.json' | grep -E '^timeline hash')\" ]"
# auto-v: a V schedule per iteration (the header says auto-v, each iteration zbv or dualpipev)
plan av4 "$TMP/llama8.json" --pp 4 --schedule auto-v --global-tokens 2048
check "an auto-v plan says auto-v, its V, and a V schedule in its iteration" python3 -c "
import json,sys
p=json.load(open('$TMP/av4.json'))
sys.exit(0 if p['schedule'] == 'auto-v' and p['placement'] == 'v' and
         all(it['schedule'] in ('zbv', 'dualpipev') for it in p['iterations']) else 1)"
same av4 ref8w 4
# auto: the placement chosen by the first iteration, then a schedule of its family per iteration
plan a4 "$TMP/llama8.json" --pp 4 --schedule auto --global-tokens 2048
check "an auto plan says auto, the placement it chose, and a schedule of it in its iteration" python3 -c "
import json,sys
p=json.load(open('$TMP/a4.json'))
v = p.get('placement') == 'v'
fam = ('zbv', 'dualpipev') if v else ('gpipe', '1f1b', 'adaptive', 'zb1')
sys.exit(0 if p['schedule'] == 'auto' and p['chunks'] == (2 if v else 1) and
         all(it['schedule'] in fam for it in p['iterations']) else 1)"
same a4 ref8w 4
# the cuda backend: one GPU driving every stage, and a GPU a stage (its NCCL links both ways)
if [ -x "$FAKE" ]; then
  same_gpu v2 ref 1
  same_gpu v4 ref8 4
  same_gpu d0220 ref 2
  same_gpu d4w ref8w 4
fi
finish
