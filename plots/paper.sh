#!/usr/bin/env bash
# The DynaPipe paper's experiments, reproduced in simulation (Jiang et al., EuroSys'24, Figs. 13-17),
# on all four of its clusters, with three columns per point.
#
#   plots/paper.sh [OUT_DIR]     (default paper-out)
#     ITER=N      iterations per point (default 0: the whole trace)
#     CLUSTERS="small mid large xlarge"   which clusters (default all four)
#     JOBS=N      points run at once (default: the machine's cores)
#
# Clusters and models, as the authors' artifact (plots/paper/*.jsonl, copied from its
# experiment_configs): small = 4 A100-40GB (GPT-6.7B 16 layers, T5-11B 12+12), mid = 8 (GPT-6.7B 32
# layers, T5-11B 24+24), large = 16 on 2 p4d nodes (GPT-13B 40 layers, T5-11B 48+48), xlarge = 32 on 4
# nodes (GPT-175B width with 16 layers, T5-11B 96+96). Costs: the measured A100 profiles for the
# GPT-6.7B and T5-11B widths; the 13B and 175B widths have no measured profile, so the analytic model
# fitted to the GPT-6.7B profile (dpsim calibrate, its held-out error in OUT/fit.txt) carries them.
# Traces: the Flan2021 zero-shot preset, GPT-2 lengths for GPT and T5 lengths for T5, 100,000
# samples, generated untruncated so that --max-seqlen cuts them.
#
# Four columns per point (max length at 65,536 tokens per batch; global batch at length 2048):
#   artifact   packing (Megatron's --pack-dataset) + 1F1B with the configuration the artifact's grid
#              search chose for the baseline (TP, PP, micro-batch size, recompute, ZeRO), on the whole
#              40,960 MB of the card as the artifact ran it
#   tuned      packing + 1F1B at the best configuration dpsim tune finds for it on the same GPUs
#              (TP x PP x DP, ZeRO 0-3, 2 and 3 without a pipeline, recompute, micro-batch size),
#              under DynaPipe's 36,000 MB
#   dynapipe   dynamic micro-batching + the adaptive schedule with DynaPipe's configuration (TP, PP,
#              ZeRO 1), recompute chosen per iteration (--recompute dynamic), 36,000 MB
#   dynapipe-tuned  the same at the best configuration dpsim tune finds for it (recompute dynamic
#              among the choices): with the tuned baseline, both sides tuned under the same model
#              and memory, as the artifact tuned both on hardware
# T5 runs twice: with the decoder cap at the max length (the artifact's decoder_seq_length) and at
# 512 (variant dec512), since packing pads every row's decoder to the cap.
# The small cluster also runs Fig. 15-16's ablations (token + adaptive, dynamic + 1F1B) and the
# padding comparison.
#
# Writes OUT/paper.csv (every point), OUT/speedups.txt (the three columns and the speed-ups), the
# figures (PNG) of the small cluster, and OUT/fit.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
DPSIM=${DPSIM:-build/dpsim}
DPSIM=$(cd "$(dirname "$DPSIM")" && pwd)/$(basename "$DPSIM")
OUT=${1:-paper-out}
ITER=${ITER:-0}
CLUSTERS=${CLUSTERS:-small mid large xlarge}
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
# An interrupt stops every point still running (xargs and its workers too), not only this script.
trap 'trap - INT TERM; kill 0' INT TERM
mkdir -p "$OUT/points"
OUT=$(cd "$OUT" && pwd)
rm -f "$OUT"/points/*
CSV="$OUT/paper.csv"
start=$(date +%s)

echo "paper: generating the Flan2021 zero-shot traces" >&2
"$DPSIM" trace gen --mix flan2021-zs --tokenizer gpt2 --samples 100000 --seed 1 --max-input 0 \
  --max-target 0 -o "$OUT/flan2021-zs-gpt2.csv" 2>/dev/null
"$DPSIM" trace gen --mix flan2021-zs --tokenizer t5 --samples 100000 --seed 1 --max-input 0 \
  --max-target 0 -o "$OUT/flan2021-zs-t5.csv" 2>/dev/null
echo "paper: fitting the analytic model to the GPT-6.7B profile (for the 13B and 175B widths)" >&2
"$DPSIM" calibrate --model gpt-6.7b-16l -o "$OUT/fit_gpt.json" >"$OUT/fit.txt" 2>&1

# field KEY LINE: a number or string of a flat JSON object
field() { printf '%s' "$2" | sed -n "s/.*\"$1\":[[:space:]]*\"\{0,1\}\([^,\"}]*\).*/\1/p"; }
metric() { sed -n "s/.*\"$1\":[[:space:]]*\([0-9.eE+-]*\).*/\1/p" "$2" | head -n 1; }

gpus_of() { case $1 in small) echo 4 ;; mid) echo 8 ;; large) echo 16 ;; xlarge) echo 32 ;; esac; }
models_of() {
  case $1 in
    small) echo "gpt-6.7b-16l t5-11b-12l" ;; mid) echo "gpt-6.7b-32l t5-11b-24l" ;;
    large) echo "gpt-13b-40l t5-11b-48l" ;; xlarge) echo "gpt-175b-16l t5-11b-96l" ;;
  esac
}

# point ID: runs line ID of the job list (tab-separated: ID CLUSTER MODEL EXPERIMENT VARIANT METHOD
# BATCHING SCHEDULE CONFIG_JSON) into points/ID.csv (xargs runs several at once)
point() {
  local id cluster model exp variant method batching schedule cfg
  IFS=$'\t' read -r id cluster model exp variant method batching schedule cfg < <(grep "^$1"$'\t' "$OUT/points/jobs.tsv")
  local gpus len tokens tp pp mbs rc zero dp dec trace cost mem json line
  gpus=$(gpus_of "$cluster")
  len=$(field encoder_seq_length "$cfg"); tokens=$(field tokens_per_global_batch "$cfg")
  tp=$(field tensor_parallel_size "$cfg"); pp=$(field pipeline_parallel_size "$cfg")
  mbs=$(field micro_batch_size "$cfg"); rc=$(field recompute_level "$cfg")
  zero=$(field deepspeed_zero_stage "$cfg"); dp=$((gpus / (tp * pp)))
  case $model in
    gpt-6.7b*) trace=$OUT/flan2021-zs-gpt2.csv; dec=512; cost=() ;;
    gpt-*) trace=$OUT/flan2021-zs-gpt2.csv; dec=512; cost=(--fit "$OUT/fit_gpt.json") ;;
    *) trace=$OUT/flan2021-zs-t5.csv; dec=$len; cost=() ;;
  esac
  [ "$variant" = dec512 ] && dec=512
  mem=36000
  json=$OUT/points/$id.json
  # --no-sp: the artifact ran Megatron-DeepSpeed, without Megatron's sequence parallelism (the
  # measured TP profiles are without it too)
  local common=(--model "$model" "${cost[@]}" --trace "$trace" --max-seqlen "$len" --max-dec-seqlen "$dec"
                --global-tokens "$tokens" --iterations "$ITER" --keep-going --no-sp)
  local thr=0 eff=0 ee=0 de=0 pms=0 oom=1 mfu=0 its=0 failed=0
  case $method in
    tuned|dynapipe-tuned)
      if "$DPSIM" compare --tuned --gpus "$gpus" --batchings "$batching" --schedules "$schedule" \
           --tune-iterations 8 --jobs 1 --no-figures --json "${common[@]}" --mem-limit "$mem" \
           >"$json" 2>/dev/null; then
        local t
        t=$(sed -n 's/.*"tuned":[[:space:]]*"\([^"]*\)".*/\1/p' "$json" | head -n 1)
        tp=$(printf '%s' "$t" | sed -n 's/.* tp=\([0-9]*\).*/\1/p'); pp=$(printf '%s' "$t" | sed -n 's/.* pp=\([0-9]*\).*/\1/p')
        dp=$(printf '%s' "$t" | sed -n 's/.* dp=\([0-9]*\).*/\1/p'); zero=$(printf '%s' "$t" | sed -n 's/.* zero=\([0-9]*\).*/\1/p')
        rc=$(printf '%s' "$t" | sed -n 's/.* recompute=\([a-z]*\).*/\1/p'); mbs=$(printf '%s' "$t" | sed -n 's/.* mbs=\([0-9]*\).*/\1/p')
        [ -n "$tp" ] || { tp=0; pp=0; dp=0; zero=0; rc=-; mbs=0; }
      fi ;;
    *)
      if [ "$method" = artifact ]; then mem=40960; else rc=dynamic; zero=1; fi
      "$DPSIM" sim --json "${common[@]}" --tp "$tp" --pp "$pp" --dp "$dp" --zero "$zero" --mbs "$mbs" \
        --recompute "$rc" --mem-limit "$mem" --batching "$batching" --schedule "$schedule" \
        >"$json" 2>/dev/null || true ;;
  esac
  if [ -s "$json" ] && grep -q '"throughput_tokens_per_s"' "$json"; then
    thr=$(metric throughput_tokens_per_s "$json"); eff=$(metric padding_efficiency "$json")
    ee=$(metric encoder_padding_efficiency "$json"); de=$(metric decoder_padding_efficiency "$json")
    pms=$(metric plan_ms_per_iteration "$json"); mfu=$(metric mfu "$json")
    its=$(metric iterations "$json"); failed=$(metric failed_iterations "$json")
    oom=$(grep -c '"oom":[[:space:]]*true' "$json" || true)
    grep -q '"feasible":[[:space:]]*false' "$json" && thr=0
  fi
  local modes
  modes=$(tr -d ' \t\n' <"$json" 2>/dev/null | sed -n 's/.*"recompute_iterations":{"none":\([0-9]*\),"selective":\([0-9]*\),"full":\([0-9]*\)}.*/\1\/\2\/\3/p' | head -n 1)
  echo "$model,$cluster,$gpus,$exp,$variant,$len,$tokens,$method,$batching,$schedule,$tp,$pp,$dp,$zero,$mbs,$rc,${thr:-0},${eff:-0},${ee:-0},${de:-0},${pms:-0},${oom:-1},${mfu:-0},${its:-0},${failed:-0},${modes:-}" \
    >"$OUT/points/$id.csv"
  rm -f "$json"
}
export -f point field metric gpus_of
export DPSIM OUT ITER

# The job list: one tab-separated line per point (ID CLUSTER MODEL EXPERIMENT VARIANT METHOD
# BATCHING SCHEDULE CONFIG_JSON).
JOBLIST=$OUT/points/jobs.tsv
: >"$JOBLIST"
n=0
add() { n=$((n + 1)); (IFS=$'\t'; printf '%05d\t%s\n' "$n" "$*") >>"$JOBLIST"; }
for cluster in $CLUSTERS; do
  for model in $(models_of "$cluster"); do
    stem=plots/paper/$(printf '%s' "$model" | sed 's/-/_/g')
    variants=base
    case $model in t5-*) variants="base dec512" ;; esac
    for variant in $variants; do
      while IFS= read -r cfg; do
        len=$(field encoder_seq_length "$cfg"); tokens=$(field tokens_per_global_batch "$cfg")
        for exp in maxlen batch; do
          { [ "$exp" = maxlen ] && [ "$tokens" = 65536 ]; } || { [ "$exp" = batch ] && [ "$len" = 2048 ]; } || continue
          # the artifact's DynaPipe configuration for the same point
          dcfg=$(grep "\"encoder_seq_length\":$len,.*\"tokens_per_global_batch\":$tokens," "${stem}_dynapipe_${cluster}.jsonl" | head -n 1 || true)
          [ -n "$dcfg" ] || continue
          add "$cluster" "$model" "$exp" "$variant" artifact packing 1f1b "$cfg"
          add "$cluster" "$model" "$exp" "$variant" tuned packing 1f1b "$cfg"
          add "$cluster" "$model" "$exp" "$variant" dynapipe dynamic adaptive "$dcfg"
          add "$cluster" "$model" "$exp" "$variant" dynapipe-tuned dynamic adaptive "$dcfg"
          if [ "$cluster" = small ] && [ "$variant" = base ] && [ "$exp" = maxlen ]; then
            add "$cluster" "$model" ablation "$variant" token+adaptive token adaptive "$dcfg"
            add "$cluster" "$model" ablation "$variant" dynamic+1f1b dynamic 1f1b "$dcfg"
            add "$cluster" "$model" ablation "$variant" dynamic+adaptive dynamic adaptive "$dcfg"
            if [ "$len" = 2048 ]; then
              for b in padding packing token dynamic; do
                add "$cluster" "$model" padding "$variant" "$b" "$b" adaptive "$dcfg"
              done
            fi
          fi
        done
      done <"${stem}_baseline_${cluster}.jsonl"
    done
  done
done
echo "paper: $n points on clusters: $CLUSTERS ($JOBS at a time; ITER=$ITER, 0 = the whole trace)" >&2
cut -f1 "$JOBLIST" | xargs -P "$JOBS" -I{} bash -c 'point {}; printf . >&2'
echo >&2

echo "model,cluster,gpus,experiment,variant,max_seqlen,global_tokens,method,batching,schedule,tp,pp,dp,zero,mbs,recompute,throughput_tokens_per_s,padding_efficiency,encoder_padding_efficiency,decoder_padding_efficiency,plan_ms_per_iteration,oom,mfu,iterations,failed_iterations,recompute_none_sel_full" >"$CSV"
cat "$OUT"/points/[0-9]*.csv >>"$CSV"

if printf '%s' "$CLUSTERS" | grep -qw small; then
  echo "paper: figures (small cluster)" >&2
  for model in gpt-6.7b-16l t5-11b-12l; do
    short=${model%%-*}
    # fig N EXPERIMENT X Y XLABEL YLABEL TITLE [more plot options]: one figure of the small cluster
    fig() {
      "$DPSIM" plot sweep "$CSV" --where "model=$model" --where variant=base --where "experiment=$2" \
        --x "$3" --y "$4" --series method --logx --xlabel "$5" --ylabel "$6" --title "Fig. $1: $7" \
        "${@:8}" -o "$OUT/fig$1_$short.png" 2>/dev/null
    }
    fig 13 maxlen max_seqlen throughput_tokens_per_s 'max sequence length (tokens)' \
      'throughput (real tokens/s)' "$model on 4 GPUs, throughput vs max length"
    fig 14 batch global_tokens throughput_tokens_per_s 'global batch (tokens)' \
      'throughput (real tokens/s)' "$model on 4 GPUs, throughput vs global batch"
    fig 15 maxlen max_seqlen padding_efficiency 'max sequence length (tokens)' \
      'padding efficiency (real / padded tokens)' "$model, padding efficiency"
    fig 16 ablation max_seqlen throughput_tokens_per_s 'max sequence length (tokens)' \
      'throughput (real tokens/s)' "$model, ablation of micro-batching and schedule"
    fig 17 batch global_tokens plan_ms_per_iteration 'global batch (tokens)' \
      'planning time per iteration (ms)' "$model, planning time per iteration" --where method=dynapipe
  done
fi

# The four columns per point, and the two speed-ups: the artifact's comparison (both at the
# artifact's configurations) and the tuned one (both at their best under the same model and memory)
{
  echo "# tokens/s per point. x_artifact = dynapipe / artifact (the artifact's configurations, as the paper compared);"
  echo "# x_tuned = dynapipe-tuned / tuned (both tuned by dpsim tune, 36,000 MB). 0: no configuration fits."
  echo "# Paper headline: up to 4.39x T5, 3.25x GPT. left_out: iterations left out per column (--keep-going),"
  echo "# iterations no plan of that configuration fits (not in its tokens/s)."
  printf '%-13s %-7s %-7s %-7s %7s %9s %9s %9s %9s %8s %8s  %s\n' model cluster exp variant point \
    artifact tuned dynapipe dyn-tuned x_artif x_tuned left_out
  awk -F, 'NR > 1 && ($4 == "maxlen" || $4 == "batch") {
             key = $1 "," $2 "," $4 "," $5 "," ($4 == "maxlen" ? $6 : $7); v[key "," $8] = $17
             f[key "," $8] = $25; k[key] = 1 }
           END { for (x in k) { split(x, a, ","); b = v[x ",artifact"]; t = v[x ",tuned"]; d = v[x ",dynapipe"];
                   dt = v[x ",dynapipe-tuned"]
                   printf "%-13s %-7s %-7s %-7s %7s %9.0f %9.0f %9.0f %9.0f %8s %8s  %d/%d/%d/%d\n", a[1], a[2], a[3], a[4], a[5],
                          b, t, d, dt, (b > 0 ? sprintf("%.2fx", d / b) : "-"), (t > 0 ? sprintf("%.2fx", dt / t) : "-"),
                          f[x ",artifact"], f[x ",tuned"], f[x ",dynapipe"], f[x ",dynapipe-tuned"] } }' \
    "$CSV" | sort -k2,2 -k1,1 -k3,3 -k4,4 -k5,5n
} >"$OUT/speedups.txt"
cat "$OUT/speedups.txt"
echo "paper: done in $(( $(date +%s) - start )) s; paper.csv, speedups.txt and the figures in $OUT" >&2
