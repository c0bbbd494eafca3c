/*
 * study.h — one whole run: trace → global batches → micro-batches → schedule → simulation, one
 * iteration at a time (a trace of any length streams through with bounded memory), and the
 * metrics of the metrics JSON contract.
 *
 *   throughput_tokens_per_s = real tokens / simulated time
 *   padding_efficiency      = real tokens / tokens in padded tensors (encoder and decoder also
 *                             separately, as the paper's Fig. 15)
 *   bubble_fraction[s]      = 1 - compute busy time of stage s / simulated time (the optimizer
 *                             step and the exposed gradient collective counted as idle)
 *   pipeline_bubble[s]      = 1 - compute busy time of stage s / the pipeline's own time (each
 *                             iteration's last compute or transfer): the textbook's bubble; its
 *                             mean over stages in pipeline_bubble_mean
 *   after_pipeline_share    = 1 - the pipeline's time / simulated time: the share of the gradient
 *                             collective and optimizer step not hidden behind the pipeline
 *   closed_form_ms          = the schedule's textbook estimate per replica (schedule.h
 *                             closed_form; NAN where the schedule has none), max over replicas,
 *                             reported beside the simulated makespan; closed_form_bubble = its
 *                             bubble terms over its sum (NAN: none)
 *   peak_mem_mb[s]          = model state + peak activations; oom when above the device memory
 *   timeline_hash           = FNV-1a of every simulated operation: equal inputs, equal hash
 *   per_iteration           = every iteration: id, simulated and closed-form ms, micro-batches,
 *                             tokens, recompute mode, the batching and schedule where --batching
 *                             or --schedule auto chose them, planning ms, and "failed" with why for one
 *                             left out (--keep-going); tokens of those are not in the throughput
 *   tflops_per_gpu          = model FLOPs (model_train_flops of the real tokens, causal
 *                             self-attention at half the square: FLOPS_CAUSAL) / simulated
 *                             time / (tp x cp x pp x dp) / 1e12;  mfu = that / the GPU's bf16
 *                             peak (0 when a plan file's iterations do not carry model_flops)
 *   mfu_noncausal           = the same with attention counted whole (FLOPS_NONCAUSAL: PaLM's
 *                             and Megatron-LM's count, what most published MFUs use; 0 when a
 *                             sample's length is unknown)
 *   hw_tflops_per_gpu       = the same with the recomputed forwards counted too (hardware FLOPs:
 *                             model_recompute_flops of each sample at its micro-batch's mode),
 *                             what Megatron's papers and logs call TFLOP/s per GPU; hfu = that /
 *                             the peak (0 when a micro-batch's mode or samples are unknown)
 */
#ifndef STUDY_H
#define STUDY_H

#include <stdint.h>

#include "../scheduler/microbatch.h"
#include "../scheduler/plan.h"
#include "../scheduler/schedule.h"
#include "../sim/sim.h"

typedef struct study_opts {
    const cost_model *cm;
    const batch_rules *rules;
    const batcher *batching;
    const schedule *sched; /* NULL: chooser's choice per iteration */
    const schedule_chooser *chooser; /* with sched NULL (--schedule auto, auto-loop, auto-v): per iteration
                            * the candidate whose plan fits and simulates fastest (with --batching
                            * auto: the fastest pair), each named in its plan_iter.schedule */
    int pp, chunks, dp, zero;
    int shard_group; /* HSDP: ZeRO's state over this many GPUs of the data-parallel group
                      * (stage_model_init_sharded); 0: all */
    int warmup; /* stage_model.warmup: a cap on each device's warm-up forwards; 0: none */
    double mem_limit_mb;
    int mbs;             /* padding/packing rows per micro-batch */
    int64_t mb_tokens;   /* token batcher budget */
    double thin_ms;      /* dynamic: 0 exact */
    int dp_split;        /* dynamic with replicas: DP_SPLIT_AUTO, _GLOBAL, _REPLICA (microbatch.h) */
    int max_iterations;  /* 0: the whole trace */
    int validate;        /* run plan_validate on every iteration */
    plan_writer *plan_out;   /* optional: every iteration is written here */
    const sim_sink *sink;    /* optional: timeline records */
    void (*progress)(void *ctx, size_t done, size_t total); /* optional, samples consumed */
    void *progress_ctx;
    const char *stream_path; /* a trace CSV read as a stream instead of the in-memory trace */
    /* --recompute dynamic (DynaPipe's rule): the cost model of each mode, tried per iteration in
     * the order none, selective, full; the first whose plan fits is kept (NULL entries are
     * skipped). All NULL: cm's own mode for every iteration. */
    const cost_model *recompute_cm[RECOMPUTE_COUNT];
    /* --recompute mixed: with recompute_cm, the fitting plan's micro-batches then go down a mode
     * where the memory allows (scheduler/mixed_recompute.h): a mode per micro-batch */
    int recompute_per_mb;
    /* --recompute fastest: with recompute_cm, every mode's plan is built and simulated, and the
     * fastest of those that fit is kept (DynaPipe's first fit can starve a pipeline the adaptive
     * schedule fills by memory); ties go to the lower mode */
    int recompute_by_time;
    int keep_going; /* an iteration that cannot be planned to fit (a sample that fits nowhere, a
                     * plan over memory, a shape beyond the cost model) is counted, named in
                     * study_result.iter and left out, instead of ending (or spoiling) the run */
    /* > 0: a search's cut-off, ms of simulated time over the whole run. The run stops (pruned)
     * once the time simulated so far plus a lower bound on the next iteration's
     * (schedule_time_lower_bound) passes it: the run can only take longer. The bound is taken
     * where the plan cannot change any more: before the adaptive order search where one plan
     * is all there is (a batching that does not cut by memory, one recompute mode), else once
     * the plan fits; never under per-micro-batch or fastest recompute, or a batching chosen per
     * iteration. Before planning each iteration, in every case but --keep-going and a streamed
     * trace, the bound is that iteration's and every later one's tokens at their best rate
     * (stage_cost.h stage_model_token_floor), which costs no planning. 0: off. */
    double prune_ms;
} study_opts;

/* One planned iteration, as the per-iteration metrics report it. */
typedef struct study_iter {
    int id;
    int failed;         /* 1: left out (keep_going); why says what failed */
    int recompute;      /* the recompute_mode it was planned with; -1: unknown (plan files) or
                         * one per micro-batch (mixed) */
    int microbatches;
    int64_t tokens;     /* real tokens */
    double ms;          /* simulated iteration time (0 when failed) */
    double closed_form_ms; /* NAN: the schedule has none */
    double closed_form_bubble_ms;
    double pipeline_ms; /* the pipeline's own time (sim_iter_result.pipeline_ns) */
    double plan_ms;     /* planner wall time (0 for plan files) */
    char batching[32];  /* the batching that planned it where chosen per iteration (auto) */
    char schedule[32];  /* the schedule that ordered it where chosen per iteration (auto) */
    char why[160];
} study_iter;

/* The schedules a chooser tries at most (one family's of schedule_list). */
#define STUDY_SCHEDULES_MAX 8

/* A streamed run keeps the records of its first STUDY_ITER_KEEP iterations only (its totals count
 * them all), so that its memory does not grow with the trace. */
#define STUDY_ITER_KEEP 4096

typedef struct study_result {
    int iterations;         /* iterations simulated */
    study_iter *iter;       /* every iteration planned (or read), simulated or left out; a
                             * streamed run's first STUDY_ITER_KEEP (iter_omitted the rest) */
    int n_iter;
    int iter_omitted;       /* records not kept (streamed runs) */
    double sum_ms, sum_closed_form_ms; /* over the simulated iterations (NAN: no closed form) */
    int first_failed[8], n_first_failed; /* the ids of the first iterations left out */
    char win_name[BATCH_CANDIDATES_MAX][32]; /* --batching auto: the batchings that won */
    int wins[BATCH_CANDIDATES_MAX], n_wins;
    int placement_chosen;   /* 1: --schedule auto chose the run's placement (a placement_kind),
                             * by placement_first_ms: the first iteration's simulated ms under
                             * each family, loop and V (INFINITY: no plan of it fits), and
                             * placement_longest_ms: the same of the iteration with the longest
                             * sample (NAN: the first, or none taken: study_run) */
    int placement;
    double placement_first_ms[2], placement_longest_ms[2];
    char placement_why[2][200]; /* why a family has no plan of one of them ("": it has) */
    int chunks;             /* the model chunks a device ran (study_run: o's; auto: those of the
                             * placement it chose; 0 for iterations read from a plan file) */
    char sched_win_name[STUDY_SCHEDULES_MAX][32]; /* --schedule auto: the schedules that won */
    int sched_wins[STUDY_SCHEDULES_MAX], n_sched_wins;
    int failed_iterations;  /* left out under keep_going */
    int recompute_iterations[RECOMPUTE_COUNT]; /* simulated iterations per recompute mode */
    int recompute_microbatches[RECOMPUTE_COUNT]; /* and micro-batches, where their mode is known */
    double time_s;
    int64_t tokens, padded_tokens, enc_tokens, enc_padded, dec_tokens, dec_padded;
    double throughput_tokens_per_s, padding_efficiency, enc_padding_efficiency,
        dec_padding_efficiency;
    double bubble_fraction[STAGE_MAX];
    double pipeline_bubble[STAGE_MAX], pipeline_bubble_mean, after_pipeline_share;
    double closed_form_bubble; /* NAN: the schedule has no closed form */
    const char *closed_form_text; /* the schedule's formula (schedule.h); NULL: unknown */
    double peak_mem_mb[STAGE_MAX];
    /* what the peak holds, per stage (of the iteration with the highest peak): model state parts,
     * the stored activations and the running op's transient at that moment (plan_machine.h),
     * and what the device keeps back (its memory less the planner's limit) */
    double weights_mb[STAGE_MAX], grads_mb[STAGE_MAX], optimizer_mb[STAGE_MAX];
    double stored_at_peak_mb[STAGE_MAX], transient_at_peak_mb[STAGE_MAX], reserved_mb;
    double op_ms[4]; /* time per op type summed over every rank: F, B, W, transfers (sender) */
    int pp;
    int oom;
    int feasible;      /* 0: some micro-batch could not be costed (outside the profile) */
    char why[600];     /* first infeasibility or OOM reason */
    uint64_t timeline_hash;
    double plan_ms_median, plan_ms_p90; /* planner wall time per iteration (micro-batching) */
    double sim_wall_s;
    uint64_t events;
    int microbatches;
    int in_flight_fallback; /* iterations planned with one micro-batch in flight */
    double model_flops;     /* training FLOPs of the real tokens simulated; 0: unknown */
    double tflops_per_gpu, mfu;
    double model_flops_noncausal; /* the same counted non-causally (FLOPS_NONCAUSAL); 0: unknown */
    double mfu_noncausal;   /* MFU by that count: PaLM's and Megatron-LM's convention */
    double moe_routed, moe_dropped; /* a MoE with a capacity factor: the routed copies (padded
                             * tokens x top-k) and the expected dropped ones
                             * (cost_moe_dropped_share per micro-batch); 0 when dropless */
    double straggler_share; /* the wait for the job's slowest GPU over a stage's compute
                             * (sim_config.straggler_share) */
    double hw_flops;        /* model_flops + the recomputed forwards' FLOPs; 0: unknown */
    double hw_tflops_per_gpu, hfu;
    int ranks;              /* pp x dp ranks (each of tp GPUs): the op times' divisor */
    long long gpus;         /* tp x cp x pp x dp: every GPU the run uses */
    int planned_oom;        /* iterations the planner found not to fit in memory */
    int planned_apart;      /* iterations it found to fit whose replicas cannot keep in step
                             * (mb_list.out_of_step); they too make oom, the run no answer */
    int sim_oom;            /* iterations the simulation found over the device memory */
    int64_t short_batch_tokens; /* > 0: the whole trace is one global batch smaller than asked
                                 * (batch_rules.global_tokens): its tokens */
    int oom_unplanned;      /* of those, iterations the planner had called fitting (always 0:
                             * the planner's check is the simulator's memory, plan_machine.h) */
    double pruned_ms;       /* > 0: the run stopped at study_opts.prune_ms: the simulated time
                             * before the iteration that passed it plus a lower bound (that
                             * iteration's plan's, or its and the later iterations' tokens'
                             * floor); the totals hold the iterations before it */
    int pruned_unplanned;   /* 1: by the tokens' floor, before the iteration was planned */
} study_result;

void study_result_release(study_result *r);

/* A lower bound on the simulated time study_run(o, t) would take, ms, from the tokens of the
 * iterations it would plan alone (each at the cost model's best per-token rate on the busiest
 * device: stage_model_token_floor), without planning any; 0 where there is none (toy costs, a
 * measured profile, a streamed trace, --keep-going). The errors of stage_model_init (model state
 * beyond the device's memory: DP_ERR_INFEASIBLE), *ms then 0. */
dp_status study_floor_ms(const study_opts *o, const trace *t, double *ms, dp_err *err);

/* The accumulation behind study_run, usable on iterations read from a plan file too. */
typedef struct study_acc {
    study_result *r;
    const model_spec *model; /* for the hardware FLOPs (NULL: unknown) */
    const cost_model *cm;    /* for a MoE's dropped copies (cost_moe_dropped_share; NULL: none) */
    const schedule *sched;   /* for the closed form (NULL: unknown, none printed; an iteration
                              * that names its schedule, plan_iter.schedule, takes its own) */
    const char *no_closed_form; /* non-NULL: why the schedule's closed form does not hold here
                                 * (--warmup caps the warm-up it assumes): none printed */
    int per_iteration;       /* set by study_add: an iteration named its own schedule */
    sim_config cfg;
    sim s;
    uint64_t hash;
    const sim_sink *next;
    sim_sink sink;
    int keep_max;            /* records kept at most (0: all; STUDY_ITER_KEEP when streamed) */
    study_iter spare;        /* where the records beyond keep_max go */
    study_iter *last;        /* the record of the iteration added last */
    int64_t t_ns, pipe_ns, busy[STAGE_MAX];
    double cf_bubble_ms;     /* the closed forms' bubble terms summed (their sums: the result's) */
    size_t cap;
} study_acc;

void study_begin(study_acc *a, study_result *r, const sim_config *cfg, const sim_sink *sink);
/* Simulates one planned iteration and adds it to the totals. */
dp_status study_add(study_acc *a, const plan_iter *it, dp_err *err);
/* Records an iteration left out (keep_going): its id, tokens and why; it is not simulated. */
dp_status study_skip(study_acc *a, int id, int64_t tokens, const char *why);
/* Finishes the totals (throughput, efficiencies, MFU) and releases the simulator. A figure that
 * cannot be true is DP_ERR_INVALID, naming it and the likely cause: model or hardware FLOP/s
 * above the GPU's peak (the cost model's times are faster than the hardware allows: a profile
 * of another model or GPU, or a plan file's times edited). The totals are filled either way. */
dp_status study_end(study_acc *a, dp_err *err);

/* --schedule auto's choice of the placement a run keeps (study_placement). */
typedef struct study_placement_choice {
    placement_kind placement;         /* the family chosen: PLACEMENT_LOOP or PLACEMENT_V (run it
                                       * as study_on_family(o, placement)) */
    double first_ms[2], longest_ms[2]; /* [loop, V]: the first iteration's simulated ms and the
                                       * one's with the longest sample (INFINITY: no plan of it
                                       * fits; NAN: no such iteration was taken) */
    char why[2][200];                 /* why a family has no plan ("": it has both) */
    double plan_ms;                   /* the wall time the choice took */
} study_placement_choice;

/* For o with a chooser that picks the placement (--schedule auto): plans and simulates, under
 * each family (a loop; a V where pp > 1), the first iteration of the run (o, t) and the one
 * holding its longest sample (an in-memory trace, not packed as a dataset), and chooses the
 * family whose plans of both fit and are faster together (ties: the loop; where neither fits
 * both, the first iteration's faster). The run's own o->max_iterations bounds where the longest
 * sample is looked for. DP_ERR_INVALID for a trace streamed from standard input (it cannot be
 * read twice); *c is filled either way. */
dp_status study_placement(const study_opts *o, const trace *t, study_placement_choice *c,
                          dp_err *err);
/* o run as the family of its chooser on `placement` (auto-loop's or auto-v's chooser for auto,
 * with that family's chunks): what study_run runs once the placement is chosen. */
study_opts study_on_family(const study_opts *o, placement_kind placement);

/* Runs the in-memory trace t, or the trace CSV o->stream_path streamed (t is then ignored).
 * --schedule auto (o->chooser picks_placement) first chooses the placement (study_placement),
 * sets it in o->plan_out's header and runs that family; the choice's planning time counts in the
 * first iteration's. */
dp_status study_run(const study_opts *o, const trace *t, study_result *r, dp_err *err);

/* Builds the simulator configuration (model state, end-of-iteration collectives, optimizer
 * step) for a stage model. With COST_OVERLAP_DP in the stage's cost model the gradients'
 * reduction overlaps each stage's last backward in buckets of STUDY_GRAD_BUCKET_MB of fp16
 * gradients (PyTorch DDP's bucket_cap_mb default, 25). */
#define STUDY_GRAD_BUCKET_MB 25.0
void study_sim_config(const stage_model *sm, const cluster_spec *hw, sim_config *cfg);

/* The optimizer step of a device whose optimizer state is optimizer_mb (the fp32 state of the
 * parameters it steps: all of them, or its 1/dp shard under ZeRO >= 1, as models/memory.h
 * partitions it): mixed-precision Adam reads the gradient (grad_bytes a parameter: 2, or 4 where
 * gradients are reduced in fp32, cost_model.grad_bytes) and the fp32 master weight, momentum and
 * variance and writes the last three and the 16-bit weight, OPTIMIZER_STEP_BYTES + grad_bytes
 * per parameter, streamed through HBM at OPTIMIZER_HBM_EFF of its bandwidth (a fused
 * multi-tensor step is bandwidth-bound). ms. */
#define OPTIMIZER_STEP_BYTES 26.0
#define OPTIMIZER_HBM_EFF 0.8
double study_optimizer_ms(const cluster_spec *hw, double optimizer_mb, double grad_bytes);

/* Writes r as the metrics JSON contract (docs/formats.md "Metrics JSON"). */
char *study_metrics_json(const study_result *r);

/* Figures of a result that the tables print: the bubble's mean over stages, micro-batches per
 * iteration, the largest peak memory over stages (0 where nothing ran). */
/* Whether a run answers: every micro-batch was costed (feasible), it fits the device's memory
 * (no oom) and at least one iteration ran. A run that does not has no throughput: every report
 * (compare's table, JSON and chart, sweep's and tune's CSVs, explain) prints none for it and
 * ranks it last; study_why_not says why in a word. */
int study_result_fits(const study_result *r);
/* Whether a run has an answer to report: DP_ERR_INFEASIBLE when --keep-going left every
 * iteration out (none fits: a plan of none, or figures of none, would read as a result), with the
 * first one's reason; else DP_OK. plan and sim refuse such a run; a search ranks it as not fitting
 * (study_result_fits). */
dp_status study_answer(const study_result *r, dp_err *err);
/* "infeasible", "out of memory", "replicas out of step", "no iteration fits" (or "" when it
 * fits). */
const char *study_why_not(const study_result *r);
/* Whether a run that is no answer (oom) is so only because some iteration's replicas cannot keep
 * in step (planned_apart), nothing over the memory. */
int study_out_of_step(const study_result *r);

/* What a budget needs, from a run that fits (0 for one that does not): wall-clock hours and
 * GPU-hours (hours x every GPU the run uses) to train on `tokens` real tokens at its throughput
 * (1e9: per billion tokens; a trace's batch_trace_tokens: a pass over it). */
double study_hours_for(const study_result *r, double tokens);
double study_gpu_hours_for(const study_result *r, double tokens);

double study_mean_bubble(const study_result *r);
double study_mb_per_iteration(const study_result *r);
double study_max_peak_mb(const study_result *r);

#endif /* STUDY_H */
