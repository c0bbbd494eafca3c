#!/usr/bin/env bash
# End-to-end tests of the validation runtime: dprun profile -> dpsim plan -> mpirun dprun ->
# dpsim validate on CPU ranks, and the runtime's faults (every rank must end, with a message).
. "$(dirname "$0")/lib.sh"
DPRUN=$(dirname "$DPSIM")/dprun
G=tests/cli/golden
# Under the sanitizer build, leak checking is off for MPI jobs: OpenMPI's components are unloaded
# before exit, so what they keep cannot even be named (ASan's memory checks stay on).
MPIRUN="mpirun --allow-run-as-root --oversubscribe -x ASAN_OPTIONS=detect_leaks=0"
export OMPI_MCA_btl_vader_single_copy_mechanism=none # quiet in containers without CMA

expect "dprun --help" 0 "profile" -- "$DPRUN" --help
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
expect "4 ranks: crossing send orders are refused" 1 "orders cross.*refused before anything ran" -- \
  timeout 120 $MPIRUN -np 4 "$DPRUN" --plan $G/crossed_4ranks.json --out "$TMP/x.csv"
expect "a plan for the wrong rank count" 1 "needs pp x dp = 4 x 1 = 4 ranks, but mpirun started 2" -- \
  timeout 120 $MPIRUN -np 2 "$DPRUN" --plan $G/plan_4ranks.json --out "$TMP/x.csv"
expect "a plan file that differs between ranks" 1 "differs between ranks" -- \
  timeout 120 $MPIRUN -np 2 "$DPRUN" --plan $G/plan_4ranks.json --out "$TMP/x.csv" : -np 2 "$DPRUN" --plan $G/plan_4ranks_short.json --out "$TMP/x.csv"
expect "the cuda backend refuses several ranks" 1 "multi-GPU NCCL mode is not written yet" -- timeout 60 $MPIRUN -np 4 "$DPRUN" --plan $G/plan_4ranks.json --backend cuda --out "$TMP/x.csv"
if ! nvidia-smi -L >/dev/null 2>&1; then # no GPU here: the cuda backend says why, and exits 1
    expect "the cuda backend without a GPU" 1 "CUDA" -- timeout 60 "$DPRUN" --plan $G/plan_4ranks.json --backend cuda --out "$TMP/x.csv"
fi
expect "an unknown backend" 1 "unknown backend" -- timeout 60 "$DPRUN" --plan $G/plan_4ranks.json --backend tpu --out "$TMP/x.csv"

# --- faults while running: every rank ends with a message -------------------------------------------
expect "4 ranks run the plan" 0 "4 ranks ran 1 iterations" -- timeout 120 $MPIRUN -np 4 "$DPRUN" --plan $G/plan_4ranks.json --out "$TMP/ok.csv"
expect "a stalled rank: the others time out and the job ends" 3 "timed out after 2.0 s" -- \
  timeout 120 $MPIRUN -np 4 "$DPRUN" --plan $G/plan_4ranks.json --out "$TMP/x.csv" --timeout 2 --stall-rank 2 --stall-s 20
expect "a receive buffer smaller than the message" 3 "failed: MPI_ERR_TRUNCATE" -- \
  timeout 120 $MPIRUN -np 1 "$DPRUN" --plan $G/plan_4ranks.json --out "$TMP/x.csv" --no-plan-check --timeout 20 : \
  -np 3 "$DPRUN" --plan $G/plan_4ranks_short.json --out "$TMP/x.csv" --no-plan-check --timeout 20
# a killed rank: start a longer run, kill one rank, the job must end (not hang) with failure
"$DPSIM" plan --model gpt-tiny --hw cpu --analytic --pp 4 --max-seqlen 64 --global-tokens 2048 --iterations 50 -o "$TMP/long.json" >/dev/null 2>&1
( timeout 120 $MPIRUN -np 4 "$DPRUN" --plan "$TMP/long.json" --out "$TMP/x.csv" --timeout 10 >"$TMP/kill.out" 2>&1; echo $? >"$TMP/kill.rc" ) &
for i in $(seq 1 50); do pid=$(pgrep -f "dprun --plan $TMP/long.json" | sed -n 3p); [ -n "$pid" ] && break; sleep 0.2; done
sleep 1; [ -n "${pid:-}" ] && kill -9 "$pid"
wait
rc=$(cat "$TMP/kill.rc")
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && grep -Eiq "killed|signal|abort|exited" "$TMP/kill.out"; then ok "a killed rank ends every rank (exit $rc)"; else not_ok "a killed rank ends every rank" "exit $rc" "$(head -c 600 "$TMP/kill.out")"; fi

finish
