#!/usr/bin/env bash
# The catalogue of bad input: every case exits 1 or 2 (never a signal) with a message naming the
# file, line or field. Accepted oddities (CRLF, a BOM, a 1 MB line) are here too, exiting 0.
. "$(dirname "$0")/lib.sh"
H='task,input_len,target_len'
mk() { printf "$2" >"$TMP/$1"; echo "$TMP/$1"; }   # mk NAME PRINTF-FORMAT → path

# --- traces ------------------------------------------------------------------------------------
expect "trace: empty file" 1 "empty.csv: file is empty" -- "$DPSIM" trace stats "$(mk empty.csv '')"
expect "trace: header only" 1 "hdr.csv:1: the header has no data rows" -- "$DPSIM" trace stats "$(mk hdr.csv "$H\n")"
expect "trace: missing column" 1 "miss.csv:1: missing column \"target_len\"" -- "$DPSIM" trace stats "$(mk miss.csv 'task,input_len\na,3\n')"
expect "trace: duplicated column" 1 "dup.csv:1: column \"task\" appears twice" -- "$DPSIM" trace stats "$(mk dup.csv 'task,task,input_len,target_len\na,a,3,1\n')"
expect "trace: wrong type" 1 "type.csv:2: input_len \"abc\" is not a whole number" -- "$DPSIM" trace stats "$(mk type.csv "$H\na,abc,1\n")"
expect "trace: negative length" 1 "neg.csv:3: target_len \"-3\" is negative" -- "$DPSIM" trace stats "$(mk neg.csv "$H\na,3,1\nb,4,-3\n")"
expect "trace: zero input length" 1 "zero.csv:2: input_len \"0\" must be at least 1" -- "$DPSIM" trace stats "$(mk zero.csv "$H\na,0,1\n")"
expect "trace: length above 2^31" 1 "big.csv:2: input_len \"2147483648\" is too large" -- "$DPSIM" trace stats "$(mk big.csv "$H\na,2147483648,1\n")"
expect "trace: NaN" 1 "nan.csv:2: input_len \"nan\" is not a whole number" -- "$DPSIM" trace stats "$(mk nan.csv "$H\na,nan,1\n")"
expect "trace: infinity" 1 "inf.csv:2: target_len \"inf\"" -- "$DPSIM" trace stats "$(mk inf.csv "$H\na,5,inf\n")"
expect "trace: CRLF line ends are accepted" 0 "samples 2" -- "$DPSIM" trace stats "$(mk crlf.csv "$H\r\na,5,1\r\nb,6,2\r\n")"
expect "trace: a UTF-8 BOM is accepted" 0 "samples 1" -- "$DPSIM" trace stats "$(mk bom.csv "\xef\xbb\xbf$H\na,5,1\n")"
{ echo "$H"; printf 'x%.0s' $(seq 1 1048576); echo ",7,1"; } >"$TMP/long.csv"
expect "trace: a 1 MB line is read" 0 "samples 1" -- "$DPSIM" trace stats "$TMP/long.csv"
expect "trace: truncated inside a quote" 1 "trunc.csv:2: quoted field is not closed" -- "$DPSIM" trace stats "$(mk trunc.csv "$H\n\"a,5")"
expect "trace: short row" 1 "short.csv:2: row has 2 fields, the header has 3" -- "$DPSIM" trace stats "$(mk short.csv "$H\na,5\n")"
expect "trace: malformed JSON line" 1 "bad.jsonl:2: malformed JSON" -- "$DPSIM" trace stats "$(mk bad.jsonl '{"input_seq_len": 3, "target_seq_len": 1}\n{"input_seq_len"\n')"
head -c 100000 /dev/zero | tr '\0' '[' >"$TMP/bomb.jsonl"
expect "trace: JSON nesting bomb" 1 "bomb.jsonl:1: malformed JSON" -- "$DPSIM" trace stats "$TMP/bomb.jsonl"
npy() { # npy FILE DICT [PAYLOAD]: a version-1 .npy header with the exact length, then PAYLOAD
  local n=$(( ${#2} + 1 )); { printf '\x93NUMPY\x01\x00'; printf "\\x$(printf %02x $n)\\x00"; printf '%s\n' "$2"; printf '%s' "${3:-}"; } >"$1"; }
npy "$TMP/f8.npy" '{"descr": "<f8", "fortran_order": False, "shape": (1, 3)}' '123456781234567812345678'
expect "trace: .npy of the wrong dtype" 1 "f8.npy: .npy dtype '<f8' is not supported" -- "$DPSIM" trace stats "$TMP/f8.npy"
npy "$TMP/cut.npy" '{"descr": "<i8", "fortran_order": False, "shape": (9, 3)}' 12345678
expect "trace: truncated .npy" 1 "cut.npy: .npy data is 8 bytes, the shape" -- "$DPSIM" trace stats "$TMP/cut.npy"

# --- profiles and specs -------------------------------------------------------------------------
P='tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value'
expect "profile: empty file" 1 "pempty.csv: file is empty" -- "$DPSIM" cost --profile "$(mk pempty.csv '')" --mbs 1 --seqlen 16
expect "profile: missing column" 1 "pmiss.csv:1: missing column \"value\"" -- "$DPSIM" cost --profile "$(mk pmiss.csv 'tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen\n')" --mbs 1 --seqlen 16
expect "profile: bad number" 1 "pnum.csv:2: value \"1.2.3\"" -- "$DPSIM" cost --profile "$(mk pnum.csv "$P\n1,none,encoder,fwd_ms,1,16,0,1.2.3\n")" --mbs 1 --seqlen 16
expect "profile: negative value" 1 "pneg.csv:2: value \"-1\" is negative" -- "$DPSIM" cost --profile "$(mk pneg.csv "$P\n1,none,encoder,fwd_ms,1,16,0,-1\n")" --mbs 1 --seqlen 16
expect "profile: duplicated header" 1 "pdup.csv:1: column \"mbs\" appears twice" -- "$DPSIM" cost --profile "$(mk pdup.csv "$P,mbs\n")" --mbs 1 --seqlen 16
expect "spec: empty model file" 1 "mempty.json:1: malformed JSON" -- "$DPSIM" cost --model "$(mk mempty.json '')" --hw h100 --mbs 1 --seqlen 16
expect "spec: wrong type of a field" 1 "mtype.json: field \"hidden_size\"" -- "$DPSIM" cost --model "$(mk mtype.json '{"num_layers": 4, "hidden_size": "wide", "num_attn_heads": 4}')" --hw h100 --mbs 1 --seqlen 16
expect "spec: JSON nesting bomb" 1 "bomb.json:1: malformed JSON" -- "$DPSIM" cost --model "$(head -c 100000 /dev/zero | tr '\0' '[' >"$TMP/bomb.json"; echo "$TMP/bomb.json")" --hw h100 --mbs 1 --seqlen 16
expect "unknown model preset" 2 "unknown model \"gpt-99t\"" -- "$DPSIM" cost --model gpt-99t --mbs 1 --seqlen 16
expect "unknown hardware preset" 2 "unknown hardware \"tpu\"" -- "$DPSIM" plan --hw tpu
expect "hardware JSON missing a field" 1 "hw.json: missing field \"intra_gbit\"" -- "$DPSIM" cost --hw "$(mk hw.json '{"gpu": "h100"}')" --mbs 1 --seqlen 16
hwj() { mk "$1" "{\"gpu\": \"h100\", \"intra_gbit\": 3600, $2}"; }
expect "hardware JSON: a zero rate" 1 "hw0.json: field \"inter_gbit\" must be a number in" -- "$DPSIM" cost --hw "$(hwj hw0.json '"inter_gbit": 0')" --mbs 1 --seqlen 16
expect "hardware JSON: a negative latency" 1 "hwneg.json: field \"intra_latency_us\" must be a number in" -- "$DPSIM" cost --hw "$(hwj hwneg.json '"intra_latency_us": -2')" --mbs 1 --seqlen 16
expect "hardware JSON: a non-finite rate" 1 "hwinf.json: field \"inter_gbit\"" -- "$DPSIM" cost --hw "$(hwj hwinf.json '"inter_gbit": 1e999')" --mbs 1 --seqlen 16
expect "hardware JSON: a rate as a string" 1 "hwstr.json: field \"inter_gbit\"" -- "$DPSIM" cost --hw "$(hwj hwstr.json '"inter_gbit": "fast"')" --mbs 1 --seqlen 16
expect "hardware JSON: a share above 1" 1 "hweff.json: field \"intra_eff\": field \"all_reduce\" must be a number in \\[1e-06, 1\\]" -- "$DPSIM" cost --hw "$(hwj hweff.json '"intra_eff": {"all_reduce": 1.2, "all_gather": 0.8, "reduce_scatter": 0.8, "all_to_all": 0.8, "send_recv": 0.8}')" --mbs 1 --seqlen 16
expect "hardware JSON: a share missing" 1 "hwmiss.json: field \"inter_eff\": missing field \"send_recv\"" -- "$DPSIM" cost --hw "$(hwj hwmiss.json '"inter_eff": {"all_reduce": 0.9, "all_gather": 0.9, "reduce_scatter": 0.9, "all_to_all": 0.9}')" --mbs 1 --seqlen 16
expect "hardware JSON: a zero share" 1 "hwz.json: field \"inter_eff\": field \"all_to_all\"" -- "$DPSIM" cost --hw "$(hwj hwz.json '"inter_eff": {"all_reduce": 0.9, "all_gather": 0.9, "reduce_scatter": 0.9, "all_to_all": 0, "send_recv": 0.9}')" --mbs 1 --seqlen 16
expect "hardware JSON: a GPU's peak of zero" 1 "hwg.json: field \"gpu\": field \"peak_tflops\"" -- "$DPSIM" cost --hw "$(mk hwg.json '{"gpu": {"peak_tflops": 0, "hbm_gbps": 3000, "mem_mb": 80000}, "intra_gbit": 3600}')" --mbs 1 --seqlen 16
expect "hardware JSON: a GPU's matmul share above 1" 1 "hwm.json: field \"gpu\": field \"matmul_eff\"" -- "$DPSIM" cost --hw "$(mk hwm.json '{"gpu": {"peak_tflops": 900, "hbm_gbps": 3000, "mem_mb": 80000, "matmul_eff": 1.5}, "intra_gbit": 3600}')" --mbs 1 --seqlen 16
expect "hardware JSON: an unknown attention kernel" 1 "hwk.json: field \"gpu\".attention_kernel: unknown kernel \"fa9\"" -- "$DPSIM" cost --hw "$(mk hwk.json '{"gpu": {"peak_tflops": 900, "hbm_gbps": 3000, "mem_mb": 80000, "attention_kernel": "fa9"}, "intra_gbit": 3600}')" --mbs 1 --seqlen 16
expect "hardware JSON: a cluster's shares and kernel round-trip" 0 "layer" -- "$DPSIM" cost --hw "$(mk hwok.json '{"gpu": {"peak_tflops": 900, "hbm_gbps": 3000, "mem_mb": 80000, "attention_kernel": "fa3-h100", "nvls_eff": 0.6}, "intra_gbit": 3600, "nics_per_node": 4, "inter_eff": {"all_reduce": 0.9, "all_gather": 0.9, "reduce_scatter": 0.9, "all_to_all": 0.9, "send_recv": 0.9}}')" --model llama3-8b --tp 2 --mbs 1 --seqlen 4096
FITP='"attn_eff": 0.14, "mem_eff": 0.9, "fwd_floor_ms": 1.6, "bwd_floor_ms": 1.5'
expect "a fit's efficiency above 1" 1 "fit.json: field \"params.gemm_eff\" must be a share in .0, 1., not 1.25" -- "$DPSIM" cost --fit "$(mk fit.json "{\"kind\": \"analytic\", \"hw\": \"a100-40gb\", \"params\": {\"gemm_eff\": 1.25, $FITP, \"bwd_ratio\": 1.77}}")" --hw a100-40gb --mbs 1 --seqlen 16
expect "a fit without one of its six parameters" 1 "fit3.json: missing field \"bwd_ratio\"" -- "$DPSIM" cost --fit "$(mk fit3.json "{\"kind\": \"analytic\", \"hw\": \"a100-40gb\", \"params\": {\"gemm_eff\": 0.6, $FITP}}")" --hw a100-40gb --mbs 1 --seqlen 16
expect "a fit whose backward is less work than its forward" 1 "fit4.json: field \"params.bwd_ratio\" must be at least 1" -- "$DPSIM" cost --fit "$(mk fit4.json "{\"kind\": \"analytic\", \"hw\": \"a100-40gb\", \"params\": {\"gemm_eff\": 0.6, $FITP, \"bwd_ratio\": 0.5}}")" --hw a100-40gb --mbs 1 --seqlen 16
expect "a fit of another GPU than --hw's" 2 "was fitted on a100-40gb .\"hw\": \"a100-40gb\"., but --hw h100 has h100" -- "$DPSIM" cost --fit "$(mk fit2.json '{"kind": "analytic", "hw": "a100-40gb", "params": {"gemm_eff": 0.6}}')" --hw h100 --mbs 1 --seqlen 16
expect "an unknown --attention-kernel" 2 "unknown --attention-kernel \"fa9\" .one of fa2-a100, fa2-h100, fa3-h100, cudnn-h100, fa4-b200" -- "$DPSIM" cost --attention-kernel fa9 --mbs 1 --seqlen 16
expect "an unknown --stack" 2 "unknown --stack \"jax\" .megatron-te, torch-eager, torch-compile." -- "$DPSIM" cost --stack jax --mbs 1 --seqlen 16
expect "--stack on a measured profile" 2 "--stack torch-eager prices the analytic model's kernels and elementwise ops: a profile cost model has its own measured times" -- "$DPSIM" cost --stack torch-eager --mbs 1 --seqlen 16
expect "calibrate --stack" 2 "calibrate fits the analytic model as the default stack .megatron-te. prices it: drop --stack" -- "$DPSIM" calibrate --stack torch-eager -o "$TMP/never.json"
expect "an unknown --overlap" 2 "unknown --overlap \"dp,pp\"" -- "$DPSIM" sim --overlap dp,pp
expect "--flash-attention with --no-flash-attention" 2 "contradict each other" -- "$DPSIM" cost --flash-attention --no-flash-attention --mbs 1 --seqlen 16
# A figure that cannot be true is refused, not printed (MFU over 100%): the A100 profile's times on
# a CPU rank's peak, and a plan file whose model_flops were edited.
expect "a profile of a faster GPU: MFU over 100% refused" 1 "the simulated run does [0-9]+% of the GPU's peak" -- \
  "$DPSIM" sim --hw cpu --mem-limit 1000000 --allow-oversubscribe --profile models/profiles/a100_gpt_6.7b_profile.csv --iterations 2
"$DPSIM" plan --iterations 2 -o "$TMP/pl.json" >/dev/null 2>&1
sed -E 's/"model_flops":[[:space:]]*[0-9.eE+]+/"model_flops": 1e19/' "$TMP/pl.json" >"$TMP/pl_edit.json"
expect "a plan file's edited model_flops: refused" 1 "faster than the hardware allows" -- "$DPSIM" sim --plan "$TMP/pl_edit.json"

# --- contradictory flags --------------------------------------------------------------------------
expect "pp larger than the layers" 2 "more pipeline stages than gpt-6.7b-16l has layers" -- "$DPSIM" plan --pp 17
expect "--warmup on a schedule without a warm-up" 2 "--warmup caps the warm-up of 1f1b and interleaved; adaptive has none" -- \
  "$DPSIM" plan --schedule adaptive --warmup 2 --iterations 1
expect "--warmup below what interleaved needs, naming the least" 1 "--warmup 1 is below what the interleaved schedule needs here, 4 forwards" -- \
  "$DPSIM" plan --schedule interleaved --chunks 2 --warmup 1 --iterations 1
check "--warmup 1 under 1F1B lowers stage 0's peak (2 micro-batches held, not 4)" bash -c \
  "a=\$('$DPSIM' sim --iterations 1 | awk '/^peak memory per stage/ { print \$6 }'); \
   b=\$('$DPSIM' sim --iterations 1 --warmup 1 | awk '/^peak memory per stage/ { print \$6 }'); \
   [ -n \"\$a\" ] && [ -n \"\$b\" ] && [ \"\$b\" -lt \"\$a\" ]"
expect "... and prints no closed form that assumes the full warm-up" 0 "mean closed form +- +\\(none: --warmup caps" -- \
  "$DPSIM" sim --iterations 1 --warmup 1
expect "mbs 0" 2 "--mbs \"0\" must be a whole number" -- "$DPSIM" plan --mbs 0
expect "global tokens smaller than one sample" 1 "larger than --global-tokens 10" -- "$DPSIM" plan --global-tokens 10
expect "negative pipeline size" 2 "--pp \"-2\"" -- "$DPSIM" sim --pp -2
expect "T5 with an odd pipeline" 1 "needs an even number" -- "$DPSIM" plan --model t5-11b-24l --tp 8 --pp 3 --iterations 1

# --- plans and timelines -----------------------------------------------------------------------------
expect "plan: empty file" 1 "pl.json:1: malformed JSON \\(file is empty\\)" -- "$DPSIM" sim --plan "$(mk pl.json '')"
expect "plan: for the wrong rank count" 1 "has 1 stage lists, pp x dp = 2" -- "$DPSIM" sim --plan "$(mk ranks.json '{"version": 1, "pp": 2, "iterations": [{"microbatches": [], "stages": [{"stage": 0, "instructions": []}]}]}')"
expect "plan: unknown op" 1 "instruction 0: \"op\" must be one of" -- "$DPSIM" sim --plan "$(mk op.json '{"version": 1, "pp": 1, "iterations": [{"microbatches": [{"id": 0, "samples": [0], "mbs": 1, "enc_len": 16, "pred_ms": {"fwd": [1], "bwd": [1]}}], "stages": [{"stage": 0, "instructions": [{"op": "JUMP", "mb": 0}]}]}]}')"
expect "plan: crossed orders" 1 "orders cross" -- "$DPSIM" sim --plan tests/cli/golden/crossed_4ranks.json
expect "plan: a micro-batch's unknown recompute mode" 1 "mode.json: iterations\\[0\\].microbatches\\[0\\].recompute must be \"none\", \"selective\" or \"full\"" -- "$DPSIM" sim --plan "$(mk mode.json '{"version": 1, "pp": 1, "recompute": "mixed", "iterations": [{"microbatches": [{"id": 0, "samples": [0], "mbs": 1, "enc_len": 16, "recompute": "half", "pred_ms": {"fwd": [1], "bwd": [1]}}], "stages": [{"stage": 0, "instructions": []}]}]}')"
expect "plan: an unknown stack in the header" 1 "sk.json: \"stack\" must be one of megatron-te, torch-eager, torch-compile" -- "$DPSIM" sim --plan "$(mk sk.json '{"version": 1, "pp": 1, "grad_reduce": "fp32", "stack": "jax", "iterations": []}')"
expect "plan: an unknown overlap in the header" 1 "ov.json: \"overlap\" must be \"none\", \"all\" or a list of dp, zero, tp" -- "$DPSIM" sim --plan "$(mk ov.json '{"version": 1, "pp": 1, "overlap": "sideways", "iterations": []}')"
expect "plan: an unknown recompute in the header" 1 "hdr.json: \"recompute\" must be \"none\", \"selective\", \"full\", \"dynamic\" or \"mixed\"" -- "$DPSIM" sim --plan "$(mk hdr.json '{"version": 1, "pp": 1, "recompute": "most", "iterations": []}')"
expect "plan: fastest, a run's rule, is not a plan's" 1 "fast.json: \"recompute\" must be" -- "$DPSIM" sim --plan "$(mk fast.json '{"version": 1, "pp": 1, "recompute": "fastest", "iterations": []}')"
expect "plan: an iteration's unknown recompute mode" 1 "itr.json: iterations\\[0\\]: \"recompute\" must be \"none\", \"selective\" or \"full\"" -- "$DPSIM" sim --plan "$(mk itr.json '{"version": 1, "pp": 1, "recompute": "dynamic", "iterations": [{"recompute": "some", "microbatches": [{"id": 0, "samples": [0], "mbs": 1, "enc_len": 16, "pred_ms": {"fwd": [1], "bwd": [1]}}], "stages": [{"stage": 0, "instructions": []}]}]}')"
expect "plan: a micro-batch's cp that does not divide the group" 1 "cpd.json: iterations\\[0\\].microbatches\\[0\\].cp must be a divisor of the plan's cp 4 .*, and is 3" -- "$DPSIM" sim --plan "$(mk cpd.json '{"version": 1, "pp": 1, "cp": 4, "cp_auto": true, "iterations": [{"microbatches": [{"id": 0, "samples": [0], "mbs": 1, "enc_len": 16, "cp": 3, "pred_ms": {"fwd": [1], "bwd": [1]}}], "stages": [{"stage": 0, "instructions": []}]}]}')"
expect "plan: a cp_auto micro-batch without its degree" 1 "cpm.json: iterations\\[0\\].microbatches\\[0\\].cp must be a divisor of the plan's cp 4 .*, and is missing" -- "$DPSIM" sim --plan "$(mk cpm.json '{"version": 1, "pp": 1, "cp": 4, "cp_auto": true, "iterations": [{"microbatches": [{"id": 0, "samples": [0], "mbs": 1, "enc_len": 16, "pred_ms": {"fwd": [1], "bwd": [1]}}], "stages": [{"stage": 0, "instructions": []}]}]}')"
expect "plan: a micro-batch's degree in a plan of one degree" 1 "cpn.json: iterations\\[0\\].microbatches\\[0\\].cp: a micro-batch names its own degree only in a \"cp_auto\" plan" -- "$DPSIM" sim --plan "$(mk cpn.json '{"version": 1, "pp": 1, "cp": 2, "iterations": [{"microbatches": [{"id": 0, "samples": [0], "mbs": 1, "enc_len": 16, "cp": 2, "pred_ms": {"fwd": [1], "bwd": [1]}}], "stages": [{"stage": 0, "instructions": []}]}]}')"
expect "plan: cp_auto without a group" 1 "cpg.json: \"cp_auto\" needs a group" -- "$DPSIM" sim --plan "$(mk cpg.json '{"version": 1, "pp": 1, "cp_auto": true, "iterations": []}')"
expect "timeline: iteration not in the plan" 1 "meas.csv:2: iteration 7 is not in the plan" -- "$DPSIM" validate --plan tests/cli/golden/plan_4ranks.json --measured "$(mk meas.csv 'iteration,stage,op,mb,start_us,end_us\n7,0,F,0,0,10\n')"
expect "timeline: end before start" 1 "meas2.csv:2: start_us/end_us" -- "$DPSIM" validate --plan tests/cli/golden/plan_4ranks.json --measured "$(mk meas2.csv 'iteration,stage,op,mb,start_us,end_us\n0,0,F,0,10,5\n')"


# options accepted and ignored are refused (options.h cli_opt_only_with; hardening round 4, class F)
expect "--cp-max without --cp auto" 2 "--cp-max applies only with --cp auto" -- "$DPSIM" sim --cp-max 8 --iterations 1
expect "--cp-kind at cp 1" 2 "--cp-kind applies only with --cp above 1 or auto" -- "$DPSIM" sim --cp-kind all-to-all --iterations 1
expect "--microbatches without --toy-costs" 2 "--microbatches applies only with --toy-costs and no --trace" -- "$DPSIM" sim --microbatches 4 --iterations 1
expect "--no-sp beside --plan (the plan fixes it)" 2 "--no-sp cannot apply with --plan" -- "$DPSIM" sim --plan tests/cli/golden/plan_4ranks.json --no-sp
expect "toy costs below the simulator's clock" 2 "at least 1e-06 ms" -- "$DPSIM" sim --toy-costs 1e-9,1e-9 --pp 2
expect "--ascii-iteration beyond the run" 1 "--ascii-iteration 5: the run has no such iteration" -- "$DPSIM" sim --iterations 2 --ascii --ascii-iteration 5
expect "cost --samples beyond the micro-batch's rows" 2 "--samples item 2 .400 tokens. does not fit the micro-batch" -- "$DPSIM" cost --mbs 1 --seqlen 512 --samples 400,400

finish
