#!/bin/bash
# make check-gpu: what a machine with a GPU runs, in one script (meant to take a few minutes on an
# H200; not yet timed on one). Every
# step prints a line "PASS name (seconds): figure" or "FAIL name (exit N, seconds): why" into
# $GPU_OUT/summary.txt as well as the screen, and the script goes on after a failure, so that one
# run tells everything. The folder (logs, profiles, plans, timelines, plots) is also packed into
# $GPU_OUT.tgz.
#   1. dprun check-gpu: the CUDA layer in fp64 against the CPU layer (1e-9), in bf16 against fp64
#      (check_gpu.h's tolerances) with cuDNN's fused attention and with the GEMM path; the bf16
#      speed of a GPT-6.7B-width layer (TFLOP/s, MFU, cuBLASLt's rate on its GEMMs);
#   2. small plans on gpt-tiny's and t5-tiny's bf16 profiles (1F1B on 2 stages, a varlen 1F1B
#      plan — packing-ffd-varlen: samples packed into rows, each attending to itself, on cuDNN's
#      ragged attention —, T5 on 4 stages, ZB-H1 on 4, interleaved 2 x 2 chunks, ZB-V and
#      DualPipeV on 2) run by the single-GPU mode in bf16, each validated against its plan (the simulation error on the
#      GPU; all stages share the GPU here, so overlapping stages compete for it and the error is
#      an upper bound for one stage per GPU); the same plan in fp64 must end with the cpu ranks'
#      gradient norm (1e-9), and bf16's norm must stay within 5% of fp64's; 1F1B under selective
#      and full recompute too (the profile measures all three modes), the backward's reruns run
#      on the GPU and the norms compared the same way; and the 1F1B plan with a mode per
#      micro-batch (tests/mixed_plan.sh), run and compared the same way, and in fp64 against the
#      1F1B plan's own norm (1e-9);
#   3. dprun profile --dtype bf16 at the widths the simulator models, GPT-6.7B, Llama-2-7B
#      (SwiGLU) and T5-11B, one layer at a time, TP 1; dpsim calibrate fits the analytic model's
#      constants for this GPU from the GPT-6.7B profile;
#   4. a GPT-6.7B plan (2 stages of 8 layers, 1F1B) on the GPT-6.7B bf16 profile, validated: the
#      simulation error at the width the paper's experiments use;
#   5. with two GPUs or more, the multi-GPU mode (mpirun, one rank per GPU, NCCL) on the 2-stage
#      plans, on a ZeRO-3 plan over two replicas, on tp 2 plans (LLaMA-kind layers, sequence
#      parallelism on and off) and a cp 2 plan, validated and compared the same way; skipped, and said so, with
#      one GPU (NCCL refuses two ranks on one GPU). The rehearsal runs it on the fake's ranks.
# The order puts the cheapest figures first, so that a time budget that ends the run early
# (below) costs the most expensive ones.
# Exit status: non-zero when any step failed. REHEARSAL=1 (make check-gpu-rehearsal, on a fake GPU)
# leaves out what only a GPU does in time.
# Time limits, for a machine lent by the minute: a step that runs past STEP_TIMEOUT seconds [300]
# is stopped and fails; once CHECK_GPU_BUDGET seconds [0: no budget] have passed since the start,
# the remaining steps are skipped, each said so, and the folder is still packed. On the device
# tool, GPU_OUT=$OUT/gpu-out brings back whatever was written even if the command is cut off.
set -u
BUILD=${BUILD:-build}
GPU_OUT=${GPU_OUT:-gpu-out}
STEP_TIMEOUT=${STEP_TIMEOUT:-300}
CHECK_GPU_BUDGET=${CHECK_GPU_BUDGET:-0}
T_START=$(date +%s)
mkdir -p "$GPU_OUT"
SUMMARY=$GPU_OUT/summary.txt
: >"$SUMMARY"
n_pass=0 n_fail=0 n_skip=0
MPIRUN="mpirun --allow-run-as-root --oversubscribe"

{ date; nvidia-smi -L 2>&1; nvcc --version 2>&1 | tail -n 2; uname -a; } >"$GPU_OUT/env.txt"
cat "$GPU_OUT/env.txt"

# step NAME FIGURE CMD...: runs CMD with its output in $GPU_OUT/NAME.log (and on the screen);
# FIGURE is a function that prints the step's figure from that log.
# A program runs under `timeout` (STEP_TIMEOUT); a shell function of this script as it is.
step() {
    local name=$1 figure=$2
    shift 2
    local log="$GPU_OUT/$name.log" t0 rc secs fig line
    if [ "$CHECK_GPU_BUDGET" -gt 0 ] && [ $(($(date +%s) - T_START)) -ge "$CHECK_GPU_BUDGET" ]; then
        echo "SKIP $name: the time budget of $CHECK_GPU_BUDGET s is spent" | tee -a "$SUMMARY"
        n_skip=$((n_skip + 1))
        return 0
    fi
    echo "== $name: $*"
    t0=$(date +%s.%N)
    if [ "$(type -t "$1")" = function ]; then
        "$@" >"$log" 2>&1
    else
        timeout --kill-after=10 "$STEP_TIMEOUT" "$@" >"$log" 2>&1
    fi
    rc=$?
    cat "$log"
    secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    fig=$("$figure" "$log" 2>/dev/null | tr '\n' ' ')
    [ "$rc" = 124 ] && fig="stopped after $STEP_TIMEOUT s (STEP_TIMEOUT) $fig"
    [ "$rc" = 137 ] && fig="killed (past STEP_TIMEOUT and its grace, or out of memory) $fig"
    if [ "$rc" = 0 ]; then
        line="PASS $name ($secs s): $fig"
        n_pass=$((n_pass + 1))
    else
        line="FAIL $name (exit $rc, $secs s): ${fig:-$(tail -n 1 "$log")}"
        n_fail=$((n_fail + 1))
    fi
    echo "$line" | tee -a "$SUMMARY"
}

# figures, each read from a step's log
fig_none() { :; }
fig_checks() { # check-gpu: its count, bf16's largest errors, the attention paths, the speed rows
    grep -E '^[0-9]+ passed' "$1"
    awk '/^GPU bf16 against GPU fp64/ { on = 1; next } /^(GPU|#)/ { on = 0 }
         on && $1 == "layer" { if ($3 + 0 > o) o = $3 + 0 }
         on && ($1 == "input" || $1 == "parameter" || $1 == "encoder-output") { if ($3 + 0 > g) g = $3 + 0 }
         on && $1 == "worst" { if ($4 + 0 >= t) { t = $4 + 0; name = $3 } }
         END { if (o != "") printf "bf16 vs fp64, largest: output %.2e, gradients %.2e, a tensor %.2e %s;\n", o, g, t, name }' "$1"
    grep -Eo 'attention: [^)]*' "$1" | sort -u | head -n 2
    awk '/^mbs x seq/ { on = 1; next }
         on && /^ *[0-9]+ x/ { v = ($4 == "varlen") ? 2 : 0; label = $1 " x " $3 (v ? " varlen " $5 : "")
                               printf "%s: %s TFLOP/s, MFU %s, GEMMs %s TFLOP/s; ", label, $(6 + v), $(7 + v), $(8 + v) }' "$1"
}
fig_profile() { grep -cE 'dprun profile: mbs [0-9]+ seqlen [0-9]+:' "$1" | sed 's/$/ grid points/'; }
fig_fit() { grep -E 'APE' "$1" | tr -s ' ' | tr '\n' ';'; }
fig_validate() { grep -Ei 'mean absolute error|makespan' "$1" | head -n 2; }
fig_norms() { grep -E 'gradient norms' "$1"; }
fig_wrote() { # the run's gradient norm, and slow first calls its measured runs timed (dprun warns)
    grep -Eo 'gradient norm [0-9.e+-]+' "$1"
    grep -Eo 'reran [0-9]+ layer forwards and [0-9]+ attention cores' "$1"
    grep -Eo 'built [0-9]+ GEMM configurations and [0-9]+ attention graphs and uploaded [0-9]+ small arrays' "$1" |
        sed 's/^/(timed first calls: /; s/$/)/'
}

norm() { grep -Eo 'gradient norm [0-9.e+-]+' "$1" | awk '{print $3}'; }
# close A_LOG B_LOG TOL: the two runs' gradient norms agree within TOL (relative).
close() {
    local a b
    a=$(norm "$1") b=$(norm "$2")
    echo "gradient norms: $a ($(basename "$1")) vs $b ($(basename "$2")), tolerance $3"
    [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" -v t="$3" 'BEGIN { d = (a > b ? a - b : b - a) / a; printf "relative difference %.3e\n", d; exit !(d < t) }'
}
# --plot FILE where gnuplot is there to draw it (a GPU machine may lack it)
plot() { command -v gnuplot >/dev/null 2>&1 && echo "--plot $1"; }
pp_of() { grep -Eo '"pp": ?[0-9]+' "$1" | head -n 1 | grep -Eo '[0-9]+$'; }
DPRUN=$BUILD/dprun DPSIM=$BUILD/dpsim

# 1. the layer
step check_gpu_gpt fig_checks "$DPRUN" check-gpu gpt-tiny
step check_gpu_t5 fig_checks "$DPRUN" check-gpu t5-tiny --no-speed

# 2. small plans on small profiles, the cheapest figures first (a budget may end the run early):
# bf16 validated, fp64 against the cpu ranks, bf16 against fp64
step profile_gpt_tiny fig_profile "$DPRUN" profile --backend cuda --dtype bf16 --model gpt-tiny \
    --mbs 1,2,3,4,6,8 --seqlen 32,64,96,128,192,256 --recompute none,selective,full \
    -o "$GPU_OUT/gpu_profile.csv"
common=(--model gpt-tiny --hw h200 --profile "$GPU_OUT/gpu_profile.csv" --batching token --mb-tokens 512
        --max-seqlen 256 --global-tokens 4096 --iterations 6)
step plan_1f1b fig_none "$DPSIM" plan "${common[@]}" --pp 2 --schedule 1f1b -o "$GPU_OUT/plan_1f1b.json"
step plan_varlen fig_none "$DPSIM" plan --model gpt-tiny --hw h200 --profile "$GPU_OUT/gpu_profile.csv" \
    --batching packing-ffd-varlen --max-seqlen 256 --global-tokens 4096 --iterations 6 --pp 2 \
    --schedule 1f1b -o "$GPU_OUT/plan_varlen.json"
step plan_zb1 fig_none "$DPSIM" plan "${common[@]}" --pp 4 --schedule zb1 -o "$GPU_OUT/plan_zb1.json"
step plan_interleaved fig_none "$DPSIM" plan "${common[@]}" --pp 2 --chunks 2 --schedule interleaved \
    -o "$GPU_OUT/plan_interleaved.json"
for v in zbv dualpipev; do # the V schedules: a link each way to each neighbour
    step "plan_$v" fig_none "$DPSIM" plan "${common[@]}" --pp 2 --schedule "$v" -o "$GPU_OUT/plan_$v.json"
done
step profile_t5_tiny fig_profile "$DPRUN" profile --backend cuda --dtype bf16 --model t5-tiny \
    --mbs 1,2,4 --seqlen 32,64,128 --dec-seqlen 16,32,64 -o "$GPU_OUT/gpu_t5_profile.csv"
step plan_t5 fig_none "$DPSIM" plan --model t5-tiny --hw h200 --profile "$GPU_OUT/gpu_t5_profile.csv" --pp 4 \
    --max-seqlen 128 --max-dec-seqlen 64 --global-tokens 2048 --iterations 4 -o "$GPU_OUT/plan_t5.json"
for rc in selective full; do # the plan's recompute, run as planned (dprun says what it reran)
    step "plan_$rc" fig_none "$DPSIM" plan "${common[@]}" --pp 2 --schedule 1f1b --recompute "$rc" \
        -o "$GPU_OUT/plan_$rc.json"
done
# a mode per micro-batch: plan_1f1b with micro-batch k under none, selective, full for k mod 3
# (its times stay none's, so it is run and its norms compared, not validated)
step plan_mixed fig_none tests/mixed_plan.sh "$GPU_OUT/plan_1f1b.json" "$GPU_OUT/plan_mixed.json"
for s in 1f1b varlen t5 zb1 interleaved zbv dualpipev selective full mixed; do
    plan=$GPU_OUT/plan_$s.json
    step "run_${s}_bf16" fig_wrote "$DPRUN" --plan "$plan" --backend cuda --out "$GPU_OUT/measured_$s.csv"
    [ "$s" = mixed ] ||
        step "validate_$s" fig_validate "$DPSIM" validate --plan "$plan" --measured "$GPU_OUT/measured_$s.csv" \
            $(plot "$GPU_OUT/validate_$s.png")
    step "run_${s}_fp64" fig_wrote "$DPRUN" --plan "$plan" --backend cuda --dtype fp64 --out "$GPU_OUT/fp64_$s.csv"
    step "run_${s}_cpu" fig_wrote $MPIRUN -np "$(pp_of "$plan")" "$DPRUN" --plan "$plan" --backend cpu \
        --out "$GPU_OUT/cpu_$s.csv"
    step "norm_${s}_fp64_vs_cpu" fig_norms close "$GPU_OUT/run_${s}_fp64.log" "$GPU_OUT/run_${s}_cpu.log" 1e-9
    step "norm_${s}_bf16_vs_fp64" fig_norms close "$GPU_OUT/run_${s}_bf16.log" "$GPU_OUT/run_${s}_fp64.log" 5e-2
done
step norm_mixed_vs_none fig_norms close "$GPU_OUT/run_mixed_fp64.log" "$GPU_OUT/run_1f1b_fp64.log" 1e-9

# 3. profiles at the widths the simulator models, and the analytic model fitted to this GPU
step profile_gpt_6.7b fig_profile "$DPRUN" profile --backend cuda --dtype bf16 --model gpt-6.7b-16l \
    --mbs 1,2,4,8 --seqlen 256,512,1024,2048,4096 -o "$GPU_OUT/h200_gpt_6.7b_profile.csv"
step calibrate_gpt_6.7b fig_fit "$DPSIM" calibrate --profile "$GPU_OUT/h200_gpt_6.7b_profile.csv" \
    --model gpt-6.7b-16l --hw h200 -o "$GPU_OUT/h200_gpt_6.7b_fit.json"
step profile_llama2_7b fig_profile "$DPRUN" profile --backend cuda --dtype bf16 --model llama2-7b \
    --mbs 1,2,4 --seqlen 512,1024,2048,4096 -o "$GPU_OUT/h200_llama2_7b_profile.csv"
step profile_t5_11b fig_profile "$DPRUN" profile --backend cuda --dtype bf16 --model t5-11b-8l \
    --mbs 1,2,4 --seqlen 256,512,1024,2048 --dec-seqlen 64,128,256,512 -o "$GPU_OUT/h200_t5_11b_profile.csv"

# 4. the paper's width: GPT-6.7B on its own bf16 profile (not in the rehearsal: its fake GPU runs
# the CPU layer, for which sixteen GPT-6.7B layers are hours of work)
if [ -n "${REHEARSAL:-}" ]; then
    echo "SKIP the GPT-6.7B plan: a rehearsal (the fake GPU computes on the CPU)" | tee -a "$SUMMARY"
else
step plan_gpt_6.7b fig_none "$DPSIM" plan --model gpt-6.7b-16l --hw h200 --profile "$GPU_OUT/h200_gpt_6.7b_profile.csv" \
    --pp 2 --schedule 1f1b --max-seqlen 2048 --global-tokens 16384 --iterations 3 -o "$GPU_OUT/plan_gpt_6.7b.json"
step run_gpt_6.7b_bf16 fig_wrote "$DPRUN" --plan "$GPU_OUT/plan_gpt_6.7b.json" --backend cuda \
    --out "$GPU_OUT/measured_gpt_6.7b.csv"
step validate_gpt_6.7b fig_validate "$DPSIM" validate --plan "$GPU_OUT/plan_gpt_6.7b.json" \
    --measured "$GPU_OUT/measured_gpt_6.7b.csv" $(plot "$GPU_OUT/validate_gpt_6.7b.png")
fi

# 5. NCCL, one rank per GPU
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
[ -n "${REHEARSAL:-}" ] && gpus=2 # the fake GPU: NCCL as MPI between the ranks
if [ "${gpus:-0}" -ge 2 ]; then
    # plan NAME ($GPU_OUT/plan_NAME.json, its cpu ranks' run in run_NAME_cpu.log) on two GPUs, one
    # rank each: in bf16, validated; in fp64 against the cpu ranks' norm (1e-9); bf16 within 5% of
    # fp64
    nccl_run() {
        local name=$1
        step "nccl_$name" fig_wrote $MPIRUN -np 2 "$DPRUN" --plan "$GPU_OUT/plan_$name.json" --backend cuda \
            --out "$GPU_OUT/measured_nccl_$name.csv"
        step "validate_nccl_$name" fig_validate "$DPSIM" validate --plan "$GPU_OUT/plan_$name.json" \
            --measured "$GPU_OUT/measured_nccl_$name.csv"
        step "nccl_${name}_fp64" fig_wrote $MPIRUN -np 2 "$DPRUN" --plan "$GPU_OUT/plan_$name.json" --backend cuda \
            --dtype fp64 --out "$GPU_OUT/nccl_fp64_$name.csv"
        step "norm_nccl_${name}_fp64_vs_cpu" fig_norms close "$GPU_OUT/nccl_${name}_fp64.log" \
            "$GPU_OUT/run_${name}_cpu.log" 1e-9
        step "norm_nccl_${name}_bf16_vs_fp64" fig_norms close "$GPU_OUT/nccl_$name.log" \
            "$GPU_OUT/nccl_${name}_fp64.log" 0.05
    }
    # a layout of its own: plan NAME with the ARGS, run on the cpu ranks, then nccl_run
    nccl_layout() {
        local name=$1
        shift
        step "plan_$name" fig_none "$DPSIM" plan --batching packing --max-seqlen 256 --global-tokens 4096 \
            --iterations 2 --pp 1 "$@" -o "$GPU_OUT/plan_$name.json"
        step "run_${name}_cpu" fig_wrote $MPIRUN -np 2 "$DPRUN" --plan "$GPU_OUT/plan_$name.json" --backend cpu \
            --out "$GPU_OUT/cpu_$name.csv"
        nccl_run "$name"
    }
    for s in 1f1b interleaved; do nccl_run "$s"; done
    # ZeRO-3 over two replicas (parameters gathered layer by layer, gradients reduce-scattered)
    nccl_layout zero3 --model gpt-tiny --hw h200 --profile "$GPU_OUT/gpu_profile.csv" --dp 2 --zero 3
    # tensor parallelism (the layers' all-reduces, or with sequence parallelism their all-gathers
    # and reduce-scatters, and the head split by vocabulary, on NCCL), with SP and without
    llama=(--model tests/cli/golden/llama_tiny.json --hw h200 --analytic)
    nccl_layout tp2_sp "${llama[@]}" --tp 2
    nccl_layout tp2_nosp "${llama[@]}" --tp 2 --no-sp
    # context parallelism (ring attention's keys and values gathered, their gradients
    # reduce-scattered, on NCCL; bf16 attention on the GEMM path)
    nccl_layout cp2 "${llama[@]}" --cp 2
else
    echo "SKIP multi-GPU mode: this machine has ${gpus:-0} GPU(s), the 2-stage plans need 2 (NCCL refuses two ranks on one GPU)" |
        tee -a "$SUMMARY"
fi

echo "check-gpu: $n_pass steps passed, $n_fail failed, $n_skip skipped for time" | tee -a "$SUMMARY"
tar -czf "$GPU_OUT.tgz" -C "$(dirname "$GPU_OUT")" "$(basename "$GPU_OUT")"
[ "$n_fail" = 0 ]
