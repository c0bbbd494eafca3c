#!/bin/bash
# make check-gpu: what a machine with a GPU runs, in one short script (a few minutes at most).
#   1. dprun check-gpu: the CUDA layer against the CPU layer (fp64, < 1e-9), and GPU layer times
#      at GPT-6.7B width beside the A100 profile;
#   2. dprun profile --backend cuda: the gpt-tiny grid measured on the GPU;
#   3. three gpt-tiny plans on that profile (1F1B on 2 stages, ZB-H1 on 4, interleaved 2 x 2
#      chunks) run by the single-GPU executor (dprun --backend cuda), each validated against its
#      plan: the simulation error on the GPU. All stages share one GPU here, so overlapping
#      stages compete for it and the error is an upper bound for one stage per GPU.
# Writes into ${OUT:-gpu-out}/. Exit status: non-zero when any step fails.
set -u
BUILD=${BUILD:-build}
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
fail=0
step() { echo "== $*"; "$@" || { echo "FAILED: $*"; fail=1; }; }

step "$BUILD/dprun" check-gpu gpt-tiny
step "$BUILD/dprun" profile --backend cuda --model gpt-tiny --mbs 1,2,3,4,6,8 \
    --seqlen 32,64,96,128,192,256 -o "$OUT/gpu_profile.csv"
common=(--model gpt-tiny --hw h200 --profile "$OUT/gpu_profile.csv" --batching token --mb-tokens 512 --max-seqlen 256
        --global-tokens 4096 --iterations 6)
step "$BUILD/dpsim" plan "${common[@]}" --pp 2 --schedule 1f1b -o "$OUT/plan_1f1b.json"
step "$BUILD/dpsim" plan "${common[@]}" --pp 4 --schedule zb1 -o "$OUT/plan_zb1.json"
step "$BUILD/dpsim" plan "${common[@]}" --pp 2 --chunks 2 --schedule interleaved -o "$OUT/plan_interleaved.json"
for s in 1f1b zb1 interleaved; do
    step "$BUILD/dprun" --plan "$OUT/plan_$s.json" --backend cuda --out "$OUT/measured_$s.csv"
    step "$BUILD/dpsim" validate --plan "$OUT/plan_$s.json" --measured "$OUT/measured_$s.csv" \
        --plot "$OUT/validate_$s.png"
done
[ $fail = 0 ] && echo "check-gpu: all steps passed" || echo "check-gpu: some steps FAILED"
exit $fail
