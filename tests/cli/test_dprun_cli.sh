#!/usr/bin/env bash
# tier: full (MPI runs of several ranks: about two minutes; make check runs it, make test not)
# End-to-end tests of the validation runtime: dprun profile -> dpsim plan -> mpirun dprun ->
# dpsim validate on CPU ranks, and the runtime's faults (every rank must end, with a message).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_dprun.sh"
G=tests/cli/golden

expect "dprun --help" 0 "profile" -- "$DPRUN" --help
expect "dprun --help names the prepare pass and how to skip it" 0 "no-prepare.*cuda: skip the unrecorded run of every iteration" -- "$DPRUN" --help
expect "dprun without a plan is a usage error" 2 "needs --plan and --out" -- "$DPRUN" --out x.csv

# --- the round trip --------------------------------------------------------------------------------
expect "profile a tiny GPT grid on 2 concurrent ranks" 0 "wrote" -- \
  timeout 300 $MPIRUN -np 2 "$DPRUN" profile --backend cpu --model gpt-tiny --mbs 1,2,4 --seqlen 32,64 --repeats 3 -o "$TMP/tiny_profile.csv"
check "the profile has the contract's header" bash -c "head -1 '$TMP/tiny_profile.csv' | grep -qx 'tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value'"
expect "dpsim uses the measured profile" 0 "layer" -- "$DPSIM" cost --model gpt-tiny --hw cpu --profile "$TMP/tiny_profile.csv" --mbs 2 --seqlen 48
expect "plan on it: 2 stages, dynamic, 1F1B" 0 "wrote 3 iterations" -- \
  "$DPSIM" plan --model gpt-tiny --hw cpu --profile "$TMP/tiny_profile.csv" --pp 2 --max-seqlen 64 --global-tokens 768 --iterations 3 -o "$TMP/plan.json"
expect "mpirun -np 2 dprun executes it" 0 "2 ranks ran 3 iterations" -- \
  timeout 300 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/plan.json" --backend cpu --out "$TMP/measured.csv" --timeout 60
check "measured timeline header" bash -c "head -1 '$TMP/measured.csv' | grep -q '^iteration,stage,op,mb,start_us,end_us'"
expect "dpsim validate reports the error" 0 "mean absolute error" -- "$DPSIM" validate --plan "$TMP/plan.json" --measured "$TMP/measured.csv" --plot "$TMP/val.png"
expect "dpsim validate --json" 0 '"mape_pct"' -- "$DPSIM" validate --plan "$TMP/plan.json" --measured "$TMP/measured.csv" --json
check "validation figure" is_png "$TMP/val.png" 10000
expect "dpsim validate --plan - reads the plan from stdin (its hash is of that text)" 0 "mean absolute error" -- \
  bash -c "'$DPSIM' validate --plan - --measured '$TMP/measured.csv' <'$TMP/plan.json'"

# dprun profile --recompute: rows for every mode asked for, the backward measured as dprun runs it
# under the mode; full recompute keeps the layer's input alone (closed form: mbs x seqlen x 256
# hidden x 8 bytes in fp64), selective what none keeps; the planner then plans that mode on it
expect "profile under none, selective and full recompute" 0 "wrote" -- \
  timeout 300 "$DPRUN" profile --backend cpu --model gpt-tiny --mbs 1,2 --seqlen 32,64 --repeats 2 \
  --recompute none,selective,full -o "$TMP/rc_profile.csv"
check "... rows of each mode (16 layer and 8 head rows per mode)" bash -c "for m in none selective full; do \
  test \$(grep -c \"^1,\$m,\" '$TMP/rc_profile.csv') -eq 24 || exit 1; done"
check "... full keeps the input: stored_act_mb = mbs x seqlen x 256 x 8 bytes" bash -c \
  "grep '^1,full,encoder,stored_act_mb,' '$TMP/rc_profile.csv' | awk -F, '{ if (\$8 != \$5 * \$6 * 256 * 8 / 1e6) bad = 1; n++ } END { exit bad || n != 4 }'"
check "... selective keeps what none keeps" bash -c "diff <(grep '^1,none,encoder,stored_act_mb' '$TMP/rc_profile.csv' | cut -d, -f3-) \
  <(grep '^1,selective,encoder,stored_act_mb' '$TMP/rc_profile.csv' | cut -d, -f3-)"
expect "a plan under full recompute on the measured profile" 0 "wrote 1 iterations" -- \
  "$DPSIM" plan --model gpt-tiny --hw cpu --profile "$TMP/rc_profile.csv" --recompute full --pp 2 \
  --max-seqlen 64 --global-tokens 256 --iterations 1 -o "$TMP/rc_prof_plan.json"
expect "a profile without the mode is refused, naming it" 2 "hint: dprun profile --recompute full measures them" -- \
  "$DPSIM" plan --model gpt-tiny --hw cpu --profile "$TMP/tiny_profile.csv" --recompute full --pp 2 \
  --max-seqlen 64 --global-tokens 256 --iterations 1 -o "$TMP/x.json"
expect "an unknown --recompute mode in the profile list" 2 "bad --recompute list" -- \
  "$DPRUN" profile --recompute none,half -o "$TMP/x.csv"

# --- T5: encoder stages, then decoder stages with cross-attention ------------------------------------
expect "profile a tiny T5 grid (encoder, decoder over (enc, dec), LM head)" 0 "wrote" -- \
  timeout 300 "$DPRUN" profile --model t5-tiny --mbs 1,2 --seqlen 32,64 --dec-seqlen 16,32 --repeats 2 -o "$TMP/t5_profile.csv"
check "the T5 profile has decoder rows over (enc, dec)" grep -q '^1,none,decoder,fwd_ms,2,64,32,' "$TMP/t5_profile.csv"
expect "plan T5 on 4 stages" 0 "wrote 2 iterations" -- \
  "$DPSIM" plan --model t5-tiny --hw cpu --profile "$TMP/t5_profile.csv" --pp 4 --max-seqlen 64 --max-dec-seqlen 32 --global-tokens 512 --iterations 2 -o "$TMP/t5.json"
expect "mpirun -np 4 dprun runs the T5 plan" 0 "4 ranks ran 2 iterations" -- \
  timeout 300 $MPIRUN -np 4 "$DPRUN" --plan "$TMP/t5.json" --out "$TMP/t5m.csv" --timeout 60
expect "dpsim validate on the T5 run" 0 "mean absolute error" -- "$DPSIM" validate --plan "$TMP/t5.json" --measured "$TMP/t5m.csv"

# --- refused before anything runs ------------------------------------------------------------------
# outputs: a folder that is not there is refused before the run, not after it; profile's outputs
# never overwrite its inputs or each other (common/outfile.h, as dpsim's)
expect "--out in a folder that is not there: refused before the run" 1 "cannot create.*refused before anything ran" -- \
  timeout 120 $MPIRUN -np 4 "$DPRUN" --plan $G/plan_4ranks_short.json --out "$TMP/nodir/m.csv"
cp $G/llama_tiny.json "$TMP/lt.json"
expect "profile -o over its --model file is refused" 2 "is the same file as the input --model" -- \
  "$DPRUN" profile --model "$TMP/lt.json" --mbs 1 --seqlen 32 --repeats 1 -o "$TMP/lt.json"
check "... which stays as it was" cmp -s "$TMP/lt.json" $G/llama_tiny.json
expect "profile -o and --cluster-out the same file" 2 "are the same file" -- \
  "$DPRUN" profile --mbs 1 --seqlen 32 --repeats 1 -o "$TMP/pc.csv" --cluster-out "$TMP/pc.csv"
expect "profile -o in a folder that is not there: refused before measuring" 1 "cannot create.*refused before anything ran" -- \
  "$DPRUN" profile --mbs 1 --seqlen 32 --repeats 1 -o "$TMP/nodir/p.csv"
expect "4 ranks: crossing send orders are refused" 1 "orders cross.*refused before anything ran" -- \
  timeout 120 $MPIRUN -np 4 "$DPRUN" --plan $G/crossed_4ranks.json --out "$TMP/x.csv"
expect "a plan for the wrong rank count" 1 "needs pp x dp = 4 x 1 = 4 ranks, but mpirun started 2" -- \
  timeout 120 $MPIRUN -np 2 "$DPRUN" --plan $G/plan_4ranks.json --out "$TMP/x.csv"
expect "a plan file that differs between ranks" 1 "differs between ranks" -- \
  timeout 120 $MPIRUN -np 2 "$DPRUN" --plan $G/plan_4ranks.json --out "$TMP/x.csv" : -np 2 "$DPRUN" --plan $G/plan_4ranks_short.json --out "$TMP/x.csv"
if ! nvidia-smi -L >/dev/null 2>&1; then # no GPU here: the cuda backend says why, and exits 1
    expect "the cuda backend without a GPU" 1 "CUDA" -- timeout 60 "$DPRUN" --plan $G/plan_4ranks.json --backend cuda --out "$TMP/x.csv"
    expect "the multi-GPU mode without a GPU" 1 "which has 0 GPUs|without CUDA" -- \
      timeout 60 $MPIRUN -np 4 "$DPRUN" --plan $G/plan_4ranks.json --backend cuda --out "$TMP/x.csv"
fi
# progress: on a terminal (script gives it one) rank 0 reports every iteration
"$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 1 --max-seqlen 64 --global-tokens 256 \
  --iterations 3 -o "$TMP/p1.json" >/dev/null 2>&1
check "dprun shows its progress on a terminal" \
  bash -c "script -qec 'timeout 60 \"$DPRUN\" --plan \"$TMP/p1.json\" --out \"$TMP/p1.csv\"' /dev/null | tr '\\r' '\\n' | grep -q '^dprun: iteration 3 of 3, [0-9.]* s'"
# a varlen plan written without the samples' lengths (as dpsim wrote them before the runtime ran
# varlen attention) is refused up front
"$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 1 --max-seqlen 64 --global-tokens 256 \
  --batching packing-varlen --iterations 1 -o "$TMP/varlen_plan.json" >/dev/null 2>&1
sed 's/"seq_lens":\[[^]]*\],//g' "$TMP/varlen_plan.json" >"$TMP/varlen_nolens.json"
expect "a varlen plan without the samples' lengths is refused by dprun" 1 'no "seq_lens".*refused before anything ran' -- \
  timeout 60 "$DPRUN" --plan "$TMP/varlen_nolens.json" --out "$TMP/x.csv"
expect "an unknown backend" 1 "unknown backend" -- timeout 60 "$DPRUN" --plan $G/plan_4ranks.json --backend tpu --out "$TMP/x.csv"
expect "bf16 on the cpu backend is refused" 2 "needs --backend cuda: the cpu backend's layers compute in fp64" -- \
  timeout 60 "$DPRUN" --plan $G/plan_4ranks.json --backend cpu --dtype bf16 --out "$TMP/x.csv"
expect "an unknown --dtype" 2 'unknown --dtype "fp16" .bf16 or fp64.' -- \
  timeout 60 "$DPRUN" --plan $G/plan_4ranks.json --backend cuda --dtype fp16 --out "$TMP/x.csv"
expect "dprun profile refuses bf16 on the cpu" 2 "needs --backend cuda" -- \
  timeout 60 "$DPRUN" profile --dtype bf16 -o "$TMP/x.csv"

# --- the cuda backend's host logic on a fake GPU (tests/unit/fake_cuda.c: the CPU layer, NCCL as
# MPI): in fp64 the same plan must end with the same gradient norm as on the cpu backend, in both
# modes; in bf16 (the default) close to it but not equal (the fake rounds where the GPU's bf16
# layer stores), with 2-byte wire elements and exactly the plan's bytes handed to NCCL.
FAKE=$(dirname "$DPSIM")/tests/dprun-fake-gpu
norm_of() { norm "$1"; }
export -f norm norm_of
# same_norm NAME NP PLAN: cpu on NP ranks, the multi-GPU mode on NP ranks (with the prepare pass,
# so its NCCL traffic is exercised too), the single-GPU mode (without it: test_exec_gpu checks
# that it changes nothing, and it doubles the fake's CPU time).
same_norm() {
  local name=$1 np=$2 plan=$3
  timeout 300 $MPIRUN -np "$np" "$DPRUN" --plan "$plan" --backend cpu --out "$TMP/c.csv" >"$TMP/cpu.out" 2>&1
  timeout 300 $MPIRUN -np "$np" "$FAKE" --plan "$plan" --backend cuda --dtype fp64 --out "$TMP/g.csv" >"$TMP/multi.out" 2>&1
  local a b c where="cpu ranks and NCCL ranks"
  a=$(norm "$TMP/cpu.out") b=$(norm "$TMP/multi.out") c=$b
  if grep -q '"dp":1,' "$plan"; then # one GPU runs plans without replicas
    timeout 300 "$FAKE" --plan "$plan" --backend cuda --dtype fp64 --no-prepare --out "$TMP/g1.csv" >"$TMP/single.out" 2>&1
    c=$(norm "$TMP/single.out") where="cpu ranks, NCCL ranks and one GPU"
  fi
  if [ -n "$a" ] && awk -v a="$a" -v b="$b" -v c="$c" 'function d(x, y) { return (x > y ? x - y : y - x) / x }
       BEGIN { exit !(b != "" && c != "" && d(a, b) < 1e-9 && d(a, c) < 1e-9) }'; then
    ok "$name: gradient norm $a on $where"
  else
    not_ok "$name: the same gradient norm on every backend" "cpu $a, multi-GPU ${b:-none}, one GPU ${c:-none}" \
      "$(tail -c 300 "$TMP/cpu.out")" "$(tail -c 300 "$TMP/multi.out")"
  fi
}
# bf16_run NAME NP PLAN [all] (after same_norm on PLAN, whose cpu run it compares with): the
# multi-GPU mode in bf16, no warm-up, prepare pass or noise repeat, so that NCCL carries each of
# the plan's sends once. Under the sanitizer build (several times slower) only the runs marked "all" run;
# the normal build runs every one.
plan_send_bytes() { grep -Eo '"op": ?"SEND_[A-Z]+"[^}]*' "$1" | grep -Eo '"bytes": ?[0-9]+' | tr -dc '0-9\n' | awk '{s += $1} END {print s + 0}'; }
bf16_run() {
  local name=$1 np=$2 plan=$3
  [ -n "$SANITIZED" ] && [ "${4:-}" != all ] && return 0
  timeout 300 $MPIRUN -np "$np" -x FAKE_CUDA_REPORT=1 "$FAKE" --plan "$plan" --backend cuda --warmup 0 \
    --no-prepare --no-noise --out "$TMP/b.csv" >"$TMP/bf16.out" 2>&1
  local a b sent want wire
  a=$(norm "$TMP/cpu.out") b=$(norm "$TMP/bf16.out")
  sent=$(grep -Eo 'sent [0-9]+ bytes over NCCL' "$TMP/bf16.out" | awk '{s += $2} END {print s + 0}')
  want=$(plan_send_bytes "$plan")
  wire=$(tail -n +2 "$TMP/b.csv" 2>/dev/null | cut -d, -f9 | sort -u | tr '\n' ' ')
  if [ -n "$a" ] && [ -n "$b" ] && [ "$sent" = "$want" ] && [ "$wire" = "2 " ] &&
     awk -v a="$a" -v b="$b" 'BEGIN { d = (a > b ? a - b : b - a) / a; exit !(d > 1e-7 && d < 2e-2) }'; then
    ok "$name in bf16: gradient norm $b (fp64 $a), $sent bytes sent as the plan says, 2-byte wire elements"
  else
    not_ok "$name in bf16: near the fp64 norm, the plan's bytes, 2-byte elements" \
      "fp64 $a, bf16 ${b:-none}; sent ${sent:-none} bytes, the plan ${want}; wire_elem_bytes ${wire:-none}" \
      "$(tail -c 400 "$TMP/bf16.out")"
  fi
}
same_norm "1F1B on 4 stages" 4 $G/plan_4ranks.json
bf16_run "1F1B on 4 stages" 4 $G/plan_4ranks.json all
same_norm "ZB-H1 on 4 stages (B and W split, FREE after W)" 4 $G/plan_zb1_4stages.json
# every schedule: the same plan file, the same gradient norm (the plain build; the sanitizer build
# runs the executors' paths on 1F1B, ZB-H1 and interleaved, above and below)
[ -n "$SANITIZED" ] || for sched in gpipe adaptive; do
  "$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 4 --schedule $sched --batching dynamic --max-seqlen 64 --global-tokens 512 --iterations 1 -o "$TMP/$sched.json" >/dev/null 2>&1
  same_norm "$sched on 4 stages" 4 "$TMP/$sched.json"
done
same_norm "interleaved, 2 chunks on 2 stages (a link from the last stage to the first)" 2 $G/plan_interleaved_2x2.json
bf16_run "interleaved, 2 chunks on 2 stages" 2 $G/plan_interleaved_2x2.json
"$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 2 --dp 2 --max-seqlen 64 --global-tokens 1024 --iterations 2 -o "$TMP/dp2.json" >/dev/null 2>&1
same_norm "2 stages x 2 replicas (gradients all-reduced)" 4 "$TMP/dp2.json"
cp "$TMP/g.csv" "$TMP/g_dp2.csv" # the fp64 multi-GPU timeline, for the checks below
bf16_run "2 stages x 2 replicas (fp32 gradients all-reduced)" 4 "$TMP/dp2.json"
check "the multi-GPU timeline has a record per instruction, and ALLREDUCE (2 iterations + the noise repeat of the first, 4 ranks)" \
  bash -c "[ \$(grep -c ',ALLREDUCE,' '$TMP/g_dp2.csv') -eq 12 ] && [ \$(grep -c ',ALLREDUCE,.*,1,1,1\$' '$TMP/g_dp2.csv') -eq 4 ] && [ \$(tail -n +2 '$TMP/g_dp2.csv' | wc -l) -eq \$(tail -n +2 '$TMP/c.csv' | wc -l) ]"
expect "dpsim validate reports the machine's noise beside the error" 0 "machine noise band: runs of the same iteration lie [0-9.]+% apart .median over 1 iteration run up to 2 times" -- "$DPSIM" validate --plan "$TMP/dp2.json" --measured "$TMP/c.csv"
expect "dpsim validate reads the multi-GPU timeline" 0 "mean absolute error" -- "$DPSIM" validate --plan "$TMP/dp2.json" --measured "$TMP/g_dp2.csv"
same_norm "T5 on 4 stages (the encoder output travels with the decoder's hidden state)" 4 "$TMP/t5.json"
bf16_run "T5 on 4 stages" 4 "$TMP/t5.json"
# varlen (THD) micro-batches: each sample attends to itself within its row, on every backend
"$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 2 --max-seqlen 128 --global-tokens 512 \
  --batching packing-ffd-varlen --iterations 1 -o "$TMP/varlen2.json" >/dev/null 2>&1
check "the varlen plan packs several samples into a row" grep -Eq '"seq_lens": ?\[[0-9]+, ?[0-9]' "$TMP/varlen2.json"
same_norm "varlen (THD) rows on 2 stages" 2 "$TMP/varlen2.json"
expect "dpsim validate reads a varlen plan's timeline" 0 "mean absolute error" -- "$DPSIM" validate --plan "$TMP/varlen2.json" --measured "$TMP/c.csv"
cp "$TMP/cpu.out" "$TMP/varlen_cpu.out"
sed 's/"attention": *"varlen",//g' "$TMP/varlen2.json" >"$TMP/rows2.json"
timeout 300 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/rows2.json" --out "$TMP/r.csv" >"$TMP/rows.out" 2>&1
check "the same micro-batches attending over whole rows end elsewhere (the executor applies the samples' sequences)" \
  bash -c "[ -n \"\$(norm_of '$TMP/rows.out')\" ] && [ \"\$(norm_of '$TMP/rows.out')\" != \"\$(norm_of '$TMP/varlen_cpu.out')\" ]"
bf16_run "varlen (THD) rows on 2 stages" 2 "$TMP/varlen2.json"
"$DPSIM" plan --model t5-tiny --hw cpu --analytic --pp 2 --max-seqlen 256 --max-dec-seqlen 64 --global-tokens 512 \
  --batching packing-ffd-varlen --iterations 1 -o "$TMP/t5varlen.json" >/dev/null 2>&1
check "the T5 varlen plan packs several samples into a row" grep -Eq '"dec_lens": ?\[[0-9]+, ?[0-9]' "$TMP/t5varlen.json"
same_norm "T5 varlen: each sample's decoder tokens attend to its own encoder tokens" 2 "$TMP/t5varlen.json"
bf16_run "T5 varlen on 2 stages" 2 "$TMP/t5varlen.json" all
# a LLaMA-style model (SwiGLU MLP: three matrices) runs its own layers on every backend
cat >"$TMP/glu.json" <<'EOF'
{"name": "glu-tiny", "num_layers": 4, "hidden_size": 256, "num_attn_heads": 4, "ffn_hidden_size": 688,
 "vocab_size": 1024, "max_position_embeddings": 1024, "glu": true, "position_embedding_type": "rope"}
EOF
"$DPSIM" plan --model "$TMP/glu.json" --hw cpu --analytic --pp 2 --max-seqlen 64 --global-tokens 256 \
  --iterations 1 -o "$TMP/glu_plan.json" >/dev/null 2>&1
[ -n "$SANITIZED" ] || same_norm "SwiGLU layers on 2 stages" 2 "$TMP/glu_plan.json" # (LLaMA's below has SwiGLU)
bf16_run "SwiGLU layers on 2 stages" 2 "$TMP/glu_plan.json"
# LLaMA-3's layers: grouped-query attention (4 query heads on 2 key/value heads), SwiGLU, RMSNorm,
# no biases, rotary positions at LLaMA-3's base; whole rows and varlen (each sample's positions
# from 0)
"$DPSIM" plan --model $G/llama_tiny.json --hw cpu --analytic --pp 2 --max-seqlen 64 --global-tokens 256 \
  --iterations 1 -o "$TMP/gqa_plan.json" >/dev/null 2>&1
same_norm "LLaMA-3's layers on 2 stages" 2 "$TMP/gqa_plan.json"
llama_norm=$(norm "$TMP/cpu.out") # at the default epsilon, for the norm_epsilon check below
expect "dpsim validate on the LLaMA-3 run" 0 "mean absolute error" -- "$DPSIM" validate --plan "$TMP/gqa_plan.json" --measured "$TMP/c.csv"
bf16_run "LLaMA-3's layers on 2 stages" 2 "$TMP/gqa_plan.json"
# the model's norm epsilon reaches every backend through the plan (0.5, so that it shows)
sed 's/"rotary_base": 500000}/"rotary_base": 500000, "norm_epsilon": 0.5}/' $G/llama_tiny.json >"$TMP/eps.json"
"$DPSIM" plan --model "$TMP/eps.json" --hw cpu --analytic --pp 2 --max-seqlen 64 --global-tokens 256 \
  --iterations 1 -o "$TMP/eps_plan.json" >/dev/null 2>&1
check "a plan carries its model's norm_epsilon" grep -Eq '"norm_epsilon": ?0.5' "$TMP/eps_plan.json"
same_norm "a norm epsilon of 0.5 on 2 stages" 2 "$TMP/eps_plan.json"
check "... which changes the gradient norm" test -n "$llama_norm" -a "$(norm "$TMP/cpu.out")" != "$llama_norm"
if [ -z "$SANITIZED" ]; then # (the sanitizer build checks varlen RoPE's memory in test_layer)
  "$DPSIM" plan --model $G/llama_tiny.json --hw cpu --analytic --pp 2 --max-seqlen 128 --global-tokens 512 \
    --batching packing-ffd-varlen --iterations 1 -o "$TMP/gqa_varlen.json" >/dev/null 2>&1
  same_norm "LLaMA-3's layers on varlen rows" 2 "$TMP/gqa_varlen.json"
fi
"$DPSIM" plan --model t5-tiny --hw cpu --analytic --pp 2 --dp 2 --max-seqlen 64 --max-dec-seqlen 32 --global-tokens 512 --iterations 2 -o "$TMP/t5dp2.json" >/dev/null 2>&1
same_norm "T5 on 2 stages x 2 replicas" 4 "$TMP/t5dp2.json"
# --- recompute: dprun runs the plan's (scheduler/plan_machine.h pm_recompute). One plan under
# none, selective and full recompute (the header changed, so the micro-batches stay): the reruns
# give back what the forward had, so every mode ends with the same gradient norm, on cpu ranks
# and on the fake GPU; each B reruns one attention core (selective) or layer forward (full) per
# layer, 2 on each of gpt-tiny's 2 stages. On the fake GPU with FAKE_CUDA_POISON_ATTENTION (every
# forward leaves NaN in its saved attention cores, as selective recompute drops them) only a
# backward that reruns them ends finite.
"$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 2 --max-seqlen 64 --global-tokens 512 \
  --iterations 2 -o "$TMP/rc_none.json" >/dev/null 2>&1
for m in selective full; do
  sed "s/\"recompute\": *\"none\"/\"recompute\": \"$m\"/" "$TMP/rc_none.json" >"$TMP/rc_$m.json"
done
FAKE1="env ASAN_OPTIONS=detect_leaks=0 timeout 120 $FAKE --backend cuda"
timeout 300 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/rc_none.json" --out "$TMP/rc.csv" >"$TMP/rc_none.out" 2>&1
rc_norm=$(norm "$TMP/rc_none.out")
ere() { printf '%s' "$1" | sed 's/[.+]/\\&/g'; } # a figure as a grep -E pattern
# A mixed plan (planner/mixed_recompute.h) too: the same plan with micro-batch k under none,
# selective, full for k mod 3 (tests/mixed_plan.sh), whose every B reruns what its own
# micro-batch's mode says. reruns MODE CSV: the layer forwards and attention cores its B's rerun.
tests/mixed_plan.sh "$TMP/rc_none.json" "$TMP/rc_mixed.json"
reruns() {
  awk -F, -v m="$1" '$3 == "B" { k = m == "mixed" ? $4 % 3 : m == "selective" ? 1 : 2; n[k]++ }
                     END { printf "reran %d layer forwards and %d attention cores", 2 * n[2], 2 * n[1] }' "$2"
}
rc_modes="selective full mixed"
[ -n "$SANITIZED" ] && rc_modes="full mixed" # (selective's rerun: check-gpu's rows on the fake, below)
for mode in $rc_modes; do
  timeout 300 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/rc_$mode.json" --out "$TMP/rc.csv" >"$TMP/rc_cpu.out" 2>&1
  $FAKE1 --plan "$TMP/rc_$mode.json" --dtype fp64 --out "$TMP/rcg.csv" >"$TMP/rc_gpu.out" 2>&1
  want=$(reruns "$mode" "$TMP/rc.csv")
  a=$(norm "$TMP/rc_cpu.out") b=$(norm "$TMP/rc_gpu.out")
  if [ -n "$rc_norm" ] && [ "$a" = "$rc_norm" ] && [ "$b" = "$rc_norm" ] &&
     grep -q "recompute (the plan's $mode): the backwards $want" "$TMP/rc_cpu.out" &&
     grep -q "the backwards $want" "$TMP/rc_gpu.out"; then
    ok "$mode recompute: gradient norm $a as without it, on cpu ranks and one GPU; $want"
  else
    not_ok "$mode recompute: the norm without it ($rc_norm), and $want" "cpu ${a:-none}, GPU ${b:-none}" \
      "$(tail -c 300 "$TMP/rc_cpu.out")" "$(tail -c 300 "$TMP/rc_gpu.out")"
  fi
done
expect "... and dpsim validate takes its timeline" 0 "mean absolute error" -- \
  "$DPSIM" validate --plan "$TMP/rc_mixed.json" --measured "$TMP/rc.csv"
sed 's/"id":0,"recompute":"none",/"id":0,/' "$TMP/rc_mixed.json" >"$TMP/x.json"
expect "a mixed plan's micro-batch without a mode is refused, naming it" 1 \
  "iteration 0, micro-batch 0: no \"recompute\" in a mixed plan" -- \
  timeout 120 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/x.json" --out "$TMP/x.csv"
if [ -z "$SANITIZED" ]; then # (the sanitizer build runs the reruns above; these add no memory paths)
expect "poisoned attention cores, not rerun (recompute none): NaN, an error" 1 "error: the gradient norm is not finite: the layers. arithmetic went wrong" -- \
  env FAKE_CUDA_POISON_ATTENTION=1 $FAKE1 --plan "$TMP/rc_none.json" --dtype fp64 --out "$TMP/x.csv"
expect "... rerun by selective recompute: the norm without poison" 0 "gradient norm $(ere "$rc_norm")" -- \
  env FAKE_CUDA_POISON_ATTENTION=1 $FAKE1 --plan "$TMP/rc_selective.json" --dtype fp64 --out "$TMP/x.csv"
expect "... and in bf16" 0 "in bf16; gradient norm [0-9]" -- \
  env FAKE_CUDA_POISON_ATTENTION=1 $FAKE1 --plan "$TMP/rc_selective.json" --out "$TMP/x.csv"
sed 's/"recompute": *"none"/"recompute": "selective"/' "$TMP/t5.json" >"$TMP/t5_sel.json"
$FAKE1 --plan "$TMP/t5.json" --dtype fp64 --out "$TMP/x.csv" >"$TMP/t5_clean.out" 2>&1
expect "T5's cross-attention cores rerun too (4 stages on one GPU)" 0 \
  "gradient norm $(ere "$(norm "$TMP/t5_clean.out")")" -- \
  env FAKE_CUDA_POISON_ATTENTION=1 $FAKE1 --plan "$TMP/t5_sel.json" --dtype fp64 --out "$TMP/x.csv"
sed 's/"recompute": *"none"/"recompute": "full"/' "$TMP/t5.json" >"$TMP/t5_full.json"
expect "... and T5's decoder layers rerun whole (full recompute, cpu ranks)" 0 \
  "gradient norm $(ere "$(norm "$TMP/t5_clean.out")")" -- \
  timeout 300 $MPIRUN -np 4 "$DPRUN" --plan "$TMP/t5_full.json" --out "$TMP/x.csv"
tests/mixed_plan.sh "$TMP/t5.json" "$TMP/t5_mixed.json"
expect "... and a mode per micro-batch on T5's encoder and decoder (one GPU)" 0 \
  "gradient norm $(ere "$(norm "$TMP/t5_clean.out")")" -- \
  $FAKE1 --plan "$TMP/t5_mixed.json" --dtype fp64 --out "$TMP/x.csv"
fi
sed 's/"recompute": *"none"/"recompute": "full"/' $G/plan_zb1_4stages.json >"$TMP/zb_full.json"
expect "a W under full recompute is refused before anything runs" 1 \
  "a W under full recompute \(rule: recompute.*refused before anything ran" -- \
  timeout 120 $MPIRUN -np 4 "$DPRUN" --plan "$TMP/zb_full.json" --out "$TMP/x.csv"
"$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 2 --schedule zb1 --recompute full --iterations 1 \
  --global-tokens 1024 --max-seqlen 256 --batching packing -o "$TMP/zbf.json" >/dev/null 2>&1
check "... and the planner makes none: zb1 under full recompute leaves every slot whole" bash -c \
  "[ -s '$TMP/zbf.json' ] && ! grep -Eq '\"op\": *\"W\"' '$TMP/zbf.json'"
expect "... which dprun runs" 0 "gradient norm" -- timeout 120 $MPIRUN -np 2 "$DPRUN" --plan "$TMP/zbf.json" --out "$TMP/x.csv"
# plan building inside the measured runs (the fake GPU "builds" on a layer shape's first call):
# said when --no-prepare leaves a shape first met in a measured iteration (iteration 1 of this
# plan has a micro-batch of a new length), never with the prepare pass. (A single process
# initialises MPI too: leak checking off, as for mpirun's jobs.)
expect "timed first calls are reported (--no-prepare)" 0 \
  "warning: the measured runs built 4 GEMM configurations .*--no-prepare left them in" -- \
  env ASAN_OPTIONS=detect_leaks=0 timeout 60 "$FAKE" --plan $G/plan_zb1_4stages.json --backend cuda \
  --dtype fp64 --no-prepare --out "$TMP/x.csv"
expect "the prepare pass keeps first calls out of the measured runs" 0 "" -- \
  env ASAN_OPTIONS=detect_leaks=0 timeout 60 "$FAKE" --plan $G/plan_zb1_4stages.json --backend cuda \
  --dtype fp64 --out "$TMP/x.csv"
check "... and nothing is reported" bash -c "! grep -q 'slow first calls' '$TMP/out'"
# check-gpu on the fake: its layer checks pass; a bf16 parameter gradient left undone (the fake's
# FAKE_CUDA_FAULT) fails its tensor's row, though the norm of all the gradients stays within 5%
expect "check-gpu's layer checks pass on the fake" 0 "^[0-9]+ passed, 0 failed$" -- \
  env ASAN_OPTIONS=detect_leaks=0 timeout 60 "$FAKE" check-gpu gpt-tiny --no-speed
expect "a missing bias gradient in bf16 fails its tensor's row" 1 \
  "worst tensor \(b1\) +1\.000e\+00 +\(tolerance 2e-01\) +FAIL" -- \
  env ASAN_OPTIONS=detect_leaks=0 FAKE_CUDA_FAULT=b1 timeout 60 "$FAKE" check-gpu gpt-tiny --no-speed
check "... which the gradients' norm alone would pass" bash -c \
  "grep -A3 '^GPU bf16' '$TMP/out' | grep -q 'parameter gradients .*PASS'"
expect "one GPU refuses data parallelism" 1 "one GPU runs plans without data parallelism" -- timeout 60 "$FAKE" --plan "$TMP/dp2.json" --backend cuda --out "$TMP/x.csv"
expect "two ranks on a host with one GPU are refused, on every rank" 1 "rank 0 on .*2 ranks run on host .*which has 1 GPU" -- \
  timeout 60 $MPIRUN -np 2 -x FAKE_CUDA_DEVICES=1 "$FAKE" --plan $G/plan_interleaved_2x2.json --backend cuda --out "$TMP/x.csv"
expect "a stalled GPU rank: the others time out and the job ends" 3 "timed out after 2.0 s" -- \
  timeout 120 $MPIRUN -np 4 "$FAKE" --plan $G/plan_4ranks.json --backend cuda --out "$TMP/x.csv" --timeout 2 --stall-rank 1 --stall-s 20

# --- faults while running: every rank ends with a message -------------------------------------------
expect "4 ranks run the plan" 0 "4 ranks ran 1 iterations" -- timeout 120 $MPIRUN -np 4 "$DPRUN" --plan $G/plan_4ranks.json --out "$TMP/ok.csv"
expect "a stalled rank: the others time out and the job ends" 3 "timed out after 2.0 s" -- \
  timeout 120 $MPIRUN -np 4 "$DPRUN" --plan $G/plan_4ranks.json --out "$TMP/x.csv" --timeout 2 --stall-rank 2 --stall-s 20
expect "a receive buffer smaller than the message" 3 "failed: MPI_ERR_TRUNCATE" -- \
  timeout 120 $MPIRUN -np 1 "$DPRUN" --plan $G/plan_4ranks.json --out "$TMP/x.csv" --no-plan-check --timeout 20 : \
  -np 3 "$DPRUN" --plan $G/plan_4ranks_short.json --out "$TMP/x.csv" --no-plan-check --timeout 20
# a killed rank: start a longer run, kill one rank, the job must end (not hang) with failure
"$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 4 --max-seqlen 64 --global-tokens 2048 --iterations 50 -o "$TMP/long.json" >/dev/null 2>&1
( timeout 120 $MPIRUN -np 4 "$DPRUN" --plan "$TMP/long.json" --out "$TMP/killed.csv" --timeout 10 >"$TMP/kill.out" 2>&1; echo $? >"$TMP/kill.rc" ) &
for i in $(seq 1 50); do pid=$(pgrep -f "dprun --plan $TMP/long.json" | sed -n 3p); [ -n "$pid" ] && break; sleep 0.2; done
sleep 1; [ -n "${pid:-}" ] && kill -9 "$pid"
wait
rc=$(cat "$TMP/kill.rc")
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -Eiq "killed|signal|abort|exited" "$TMP/kill.out"; then ok "a killed rank ends every rank (exit $rc)"; else not_ok "a killed rank ends every rank" "exit $rc" "$(head -c 600 "$TMP/kill.out")"; fi
check "... leaving no half timeline, nor a temporary beside it" bash -c "! ls '$TMP'/killed.csv* >/dev/null 2>&1"

finish
