#!/bin/bash
# make check-gpu: what a machine with a GPU runs, in one short script (a few minutes at most).
#   1. dprun check-gpu: the CUDA layer against the CPU layer (fp64, < 1e-9): GPT's, then T5's
#      encoder and decoder (cross-attention); GPU layer times at GPT-6.7B width beside the A100
#      profile;
#   2. dprun profile --backend cuda: the gpt-tiny grid measured on the GPU;
#   3. three gpt-tiny plans on that profile (1F1B on 2 stages, ZB-H1 on 4, interleaved 2 x 2
#      chunks) run by the single-GPU mode (dprun --backend cuda), each validated against its
#      plan: the simulation error on the GPU. All stages share one GPU here, so overlapping
#      stages compete for it and the error is an upper bound for one stage per GPU. Each plan
#      also runs on cpu ranks: the gradient norms must agree (the whole plan's numerics);
#   4. a T5 plan (4 stages: encoder, then decoder) on one GPU, against CPU ranks the same way;
#   5. with as many GPUs as stages, the multi-GPU mode (mpirun, one rank per GPU, NCCL) on the
#      2-stage plans, validated and compared the same way; skipped, and said so, with one GPU.
# Writes into ${OUT:-gpu-out}/. Exit status: non-zero when any step fails.
set -u
BUILD=${BUILD:-build}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
fail=0
step() { echo "== $*"; "$@" || { echo "FAILED: $*"; fail=1; }; }

step "$BUILD/dprun" check-gpu gpt-tiny
step "$BUILD/dprun" check-gpu t5-tiny
step "$BUILD/dprun" profile --backend cuda --model gpt-tiny --mbs 1,2,3,4,6,8 \
    --seqlen 32,64,96,128,192,256 -o "$OUT/gpu_profile.csv"
common=(--model gpt-tiny --hw h200 --profile "$OUT/gpu_profile.csv" --batching token --mb-tokens 512 --max-seqlen 256
        --global-tokens 4096 --iterations 6)
step "$BUILD/dpsim" plan "${common[@]}" --pp 2 --schedule 1f1b -o "$OUT/plan_1f1b.json"
step "$BUILD/dpsim" plan "${common[@]}" --pp 4 --schedule zb1 -o "$OUT/plan_zb1.json"
step "$BUILD/dpsim" plan "${common[@]}" --pp 2 --chunks 2 --schedule interleaved -o "$OUT/plan_interleaved.json"
MPIRUN="mpirun --allow-run-as-root --oversubscribe"
# logged LOG CMD...: runs CMD, its output into LOG and onto the screen.
logged() { local log=$1; shift; "$@" >"$log" 2>&1; local rc=$?; cat "$log"; return $rc; }
norm() { grep -Eo 'gradient norm [0-9.e+-]+' "$1" | awk '{print $3}'; }
# same_norm A_LOG B_LOG: the two runs' gradient norms agree to 1e-9 (relative).
same_norm() {
    local a b
    a=$(norm "$1") b=$(norm "$2")
    echo "gradient norms: $a ($1) vs $b ($2)"
    [ -n "$a" ] && [ -n "$b" ] && awk -v a="$a" -v b="$b" 'BEGIN { d = (a > b ? a - b : b - a) / a; exit !(d < 1e-9) }'
}
pp_of() { grep -Eo '"pp":[0-9]+' "$1" | head -1 | cut -d: -f2; }
for s in 1f1b zb1 interleaved; do
    step logged "$OUT/run_$s.log" "$BUILD/dprun" --plan "$OUT/plan_$s.json" --backend cuda --out "$OUT/measured_$s.csv"
    step "$BUILD/dpsim" validate --plan "$OUT/plan_$s.json" --measured "$OUT/measured_$s.csv" \
        --plot "$OUT/validate_$s.png"
    $MPIRUN -np "$(pp_of "$OUT/plan_$s.json")" "$BUILD/dprun" --plan "$OUT/plan_$s.json" --backend cpu \
        --out "$OUT/cpu_$s.csv" >"$OUT/cpu_$s.log" 2>&1
    step same_norm "$OUT/run_$s.log" "$OUT/cpu_$s.log"
done
step "$BUILD/dprun" profile --backend cuda --model t5-tiny --mbs 1,2,4 --seqlen 32,64,128 \
    --dec-seqlen 16,32,64 -o "$OUT/gpu_t5_profile.csv"
step "$BUILD/dpsim" plan --model t5-tiny --hw h200 --profile "$OUT/gpu_t5_profile.csv" --pp 4 \
    --max-seqlen 128 --max-dec-seqlen 64 --global-tokens 2048 --iterations 4 -o "$OUT/plan_t5.json"
step logged "$OUT/run_t5.log" "$BUILD/dprun" --plan "$OUT/plan_t5.json" --backend cuda --out "$OUT/measured_t5.csv"
step "$BUILD/dpsim" validate --plan "$OUT/plan_t5.json" --measured "$OUT/measured_t5.csv"
$MPIRUN -np 4 "$BUILD/dprun" --plan "$OUT/plan_t5.json" --backend cpu --out "$OUT/cpu_t5.csv" >"$OUT/cpu_t5.log" 2>&1
step same_norm "$OUT/run_t5.log" "$OUT/cpu_t5.log"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$gpus" -ge 2 ]; then
    for s in 1f1b interleaved; do
        step logged "$OUT/nccl_$s.log" $MPIRUN -np 2 "$BUILD/dprun" --plan "$OUT/plan_$s.json" \
            --backend cuda --out "$OUT/measured_nccl_$s.csv"
        step "$BUILD/dpsim" validate --plan "$OUT/plan_$s.json" --measured "$OUT/measured_nccl_$s.csv" \
            --plot "$OUT/validate_nccl_$s.png"
        step same_norm "$OUT/nccl_$s.log" "$OUT/cpu_$s.log"
    done
else
    echo "== multi-GPU mode skipped: this machine has $gpus GPU(s), the 2-stage plans need 2 (NCCL refuses two ranks on one GPU)"
fi
[ $fail = 0 ] && echo "check-gpu: all steps passed" || echo "check-gpu: some steps FAILED"
exit $fail
