/*
 * request.h — what a study asks for, before anything is resolved: the cost model's choices
 * (cost_request: model, hardware, cost source, tensor/context parallelism, recompute, attention,
 * overlap) and the plan's (plan_request: trace, batching, schedule, layout, memory, links). The
 * drivers fill one from the command line through the option rows below (common/options.h); a
 * sweep sets its fields by name; planner/setup.h resolves it into a run.
 *
 * Ownership: a request holds pointers to strings it does not own (argv, a grid's values, string
 * literals), which must outlive it; copying a request by value is how a point of a sweep or a
 * search varies one. Messages about a bad value are usage errors (common/options.h: printed,
 * EXIT_USAGE); the functions that return dp_status leave their outputs unchanged on failure.
 */
#ifndef PLANNER_REQUEST_H
#define PLANNER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "../common/dp.h"
#include "../common/options.h"
#include "../common/outfile.h"
#include "../models/cost.h"

/* The trace a request without --trace reads, relative to the data folder (planner_data_path). */
#define PLANNER_DEFAULT_TRACE "traces/flanv2-100k.csv"

typedef struct cost_request {
    const char *model;   /* preset or file                               [gpt-6.7b-16l] */
    const char *hw;      /* cluster/GPU preset or file                   [p4d] */
    const char *profile; /* measured profile CSV; NULL = the model's own when the GPU matches */
    const char *fit;     /* fitted analytic model (dpsim calibrate -o) */
    int analytic;        /* 1: use the analytic model even if a profile exists */
    int tp;              /* tensor parallelism                           [1] */
    int cp;              /* context parallelism (cost_model_set_cp); under --cp auto the
                          * group's GPUs, cp_max                          [1] */
    int cp_alltoall;     /* --cp-kind all-to-all (else ring)                 */
    int cp_auto;         /* --cp auto: a degree per micro-batch (cost_model_set_cp_auto) */
    int cp_max;          /* --cp-max: the group under --cp auto             [4] */
    pipeline_split split; /* --layers-per-stage: the layers of each virtual stage, listed or
                           * by rule (less:F,L; n 0 and 0, 0: even; cost_model.split) [even] */
    int recompute;       /* a recompute_policy (cost.h): one mode for all, or dynamic, mixed,
                          * fastest (a cost model per mode: plan_env.recompute_cm), which
                          * planner_build_cost refuses                    [none] */
    const char *model_json, *hw_json; /* specs given as JSON text (a plan's): used instead of
                                       * resolving model / hw */
    int flash_attn;      /* --flash-attention: FlashAttention whatever the model says
                          * (cost_model.flash_attn) */
    int no_flash_attn;   /* --no-flash-attention: unfused attention whatever the model says;
                          * neither: the model's own (model_spec.flash_attn) */
    const char *attn_kernel; /* --attention-kernel: the fused kernel's tables (hw.h); NULL: the
                              * GPU's own */
    int stack;           /* --stack: a software_stack (models/stack.h): the attention kernel
                          * where --attention-kernel does not say, and the elementwise bytes
                          *                                              [megatron-te] */
    unsigned overlap;    /* --overlap: COST_OVERLAP_* bits          [dp,zero] */
    int precision;       /* --precision: a train_precision (cost.h); -1: the model's own
                          * (model_spec.fp16: fp16, else bf16)          [the model's] */
    int grad_reduce;     /* --grad-reduce-dtype: a grad_reduce (cost.h)  [auto: fp32 but under
                          * fp16] */
    int no_sp;           /* --no-sp: tensor parallelism without Megatron's sequence parallelism
                          * (cost_model.seq_parallel, on by default) */
    int ep;              /* --ep: expert parallelism of a mixture of experts
                          * (cost_model_set_moe)                          [1] */
    int etp;             /* --etp: expert tensor parallelism, each expert over etp GPUs of an ep
                          * rank (cost_model_set_etp)                     [1] */
    double capacity;     /* --capacity-factor: a MoE's experts each take at most this many times
                          * their even share, dropping the rest (cost_model_set_capacity)
                          * [0: dropless] */
    int routing;         /* --routing: a moe_route_kind, with routing_alpha [uniform] */
    int dispatch;        /* --dispatcher: a moe_dispatch                         [alltoall] */
    double routing_alpha;
    const char *routing_file;      /* --routing FILE: a measured histogram (moe_histogram_read) */
    const double *routing_shares;  /* a plan's histogram: each ep rank's share (routing_n_shares
                                    * of them, the plan's ep), read when routing_file is NULL */
    int routing_n_shares;
    int quiet;           /* 1: no note on stderr about the analytic defaults (a cost model built
                          * for what is not timed: a plan's model state) */
    const struct cost_what_if *what_if; /* constants scaled as a what-if (models/assumptions.h:
                                         * `dpsim explain`); NULL: as resolved */
} cost_request;

void cost_request_default(cost_request *o);

/* What a plan made with o says in its header (plan.h): fastest is dynamic there, a mode per
 * iteration like DynaPipe's rule; the others as said. */
int recompute_plan_policy(const cost_request *o);

/* Appends the cost-model options (--model, --hw, --profile, --fit, --analytic, --tp, --no-sp,
 * --recompute, --flash-attention, --no-flash-attention, --attention-kernel, --stack, --overlap)
 * into o to a command's table (options.h). */
void cost_request_options(cli_opts *t, cost_request *o);

typedef struct plan_request {
    cost_request cost;
    const char *trace;     /* trace file                       [traces/flanv2-100k.csv] */
    const char *batching;  /*                                   [dynamic] */
    const char *schedule;  /*                                   [1f1b] */
    int pp, dp, chunks, zero, mbs;
    int shard_group;       /* --shard-group: HSDP, ZeRO's state split over this many GPUs of the
                            * data-parallel group (stage_model_init_sharded); 0: all  [0] */
    int warmup;            /* --warmup: at most this many forwards before a device's first backward
                            * (stage_model.warmup); 0: the schedule's own rule  [0] */
    int64_t mb_tokens, global_tokens;
    int max_seqlen, max_dec_seqlen; /* 0: defaults (2048; T5 decoder: 512) */
    double thin_ms;
    int dp_split;          /* DP_SPLIT_AUTO | _GLOBAL | _REPLICA                 [auto] */
    int iterations;        /* 0: the whole trace */
    double mem_limit_mb;   /* 0: the hardware's */
    double link_gbit, link_latency_us; /* what-if overrides; < 0 keeps the cluster's */
    double gpu_jitter;     /* --gpu-jitter: cluster_spec.gpu_jitter; < 0 keeps the cluster's */
    int stream;            /* read the trace CSV as a stream (bounded memory) */
    int allow_oversubscribe;   /* a layout of more GPUs than the cluster has, or a memory limit
                                * above the GPU's, as a what-if */
    int keep_going;            /* iterations that cannot be planned to fit are left out */
    const char *toy_costs;     /* --toy-costs F,B[,W]: textbook costs (cost.h cost_toy) */
    int microbatches;          /* with toy_costs and no trace: that many equal samples of
                                * --max-seqlen tokens, one iteration                  [8] */
    const char *fixed_by_plan; /* the first option given that a plan file fixes ("pp", "model",
                                * ...: its long name), NULL if none: refused beside --plan */
} plan_request;

void plan_request_default(plan_request *p);

/* Appends the plan options (the cost model's, then --trace, --batching, --schedule, --pp, ...)
 * into p to a command's table (options.h). Those a plan file fixes carry OPT_FIXED_BY_PLAN, those
 * tune searches OPT_TUNED; after parsing, plan_request_parsed copies the first fixed one given into
 * p->fixed_by_plan. */
void plan_request_options(cli_opts *t, plan_request *p);
void plan_request_parsed(const cli_opts *t, plan_request *p);

/* The GPUs of a layout: tp x cp x pp x dp (the set-up's check, compare's title, sweep --gpus). */
static inline long long plan_request_gpus(const plan_request *p)
{
    return (long long)p->cost.tp * p->cost.cp * p->pp * p->dp;
}

/* Sets one plan option by its long name ("max-seqlen", "batching", ...), as a sweep grid does:
 * 1 set, 0 no such option, -1 bad value (message printed). */
int plan_request_set(plan_request *p, const char *name, const char *value, const char *cmd,
                 const char *usage);

/* A study's configuration as text, to tell whether a resumed output was made with the same
 * inputs: plan_request_describe's lines (less skip), then "NAME_hash=..." of the contents of every
 * input file (trace, model, hw, profile, fit; a preset's name has none), then the dpsim
 * version. Two configurations are compared line by line with planner_config_differs. */
void plan_request_config(const plan_request *p, const char *const *skip, int n_skip, char *buf, size_t cap);
/* The first line where two configurations differ, as "NAME=A there, NAME=B here" in what; 0 if
 * none. */
int planner_config_differs(const char *there, const char *here, char *what, size_t cap);

/* The canonical text of a plan option's value ("1" and "true" of a flag are both "true"; 4 and
 * 04 are "4"), as the option table prints it: what tells two grid values apart. 0, or -1 when
 * the name is not a plan option or the value is refused (the option's usage error is printed,
 * as on the command line). */
int plan_request_canonical(const plan_request *base, const char *name, const char *value, char *buf,
                       size_t cap);

/* Every plan and cost option's value as "name=value" lines, in the order of their table rows
 * (plan_request_options: an option added there is described too), leaving out those that change
 * no result (OPT_NO_RESULT) and those named in skip (a sweep's grid keys): a study's
 * configuration, comparable as text. */
void plan_request_describe(const plan_request *p, const char *const *skip, int n_skip, char *buf,
                       size_t cap);

/* The path of the configuration a search (sweep, tune) keeps beside its output `out`, which a
 * resume compares: "OUT.config". An output too: it must not be an input (planner_check_outputs). */
void planner_config_path(const char *out, char *buf, size_t cap);

/* Refuses (DP_ERR_INVALID, common/outfile.h) outputs that are the same file as an input of the
 * plan options (the trace, or the default trace; profile, fit, model and hardware files),
 * extra inputs (e.g. --plan), or each other. p may be NULL (no plan options). */
dp_status planner_check_outputs(const plan_request *p, const out_role *extra_in, int n_extra,
                            const out_role *outs, int n_out, dp_err *err);

/* Splits a comma list into at most max names (pointers into buf, which strtok cuts); -1 when
 * it has more. */
int planner_split_list(char *buf, const char **items, int max);

/* --batchings and --schedules of compare and tune, split and checked: every name a known
 * batcher or schedule (interleaved only where interleaved_ok), neither list empty, at most
 * METHOD_LIST_MAX each. 0, or -1 after a usage error. */
#define METHOD_LIST_MAX 16
typedef struct method_lists {
    char buf_b[256], buf_s[256]; /* the lists, cut by planner_split_list */
    const char *batchings[METHOD_LIST_MAX], *schedules[METHOD_LIST_MAX];
    int nb, ns;
} method_lists;
int planner_method_lists(const char *cmd, const char *usage, const char *batchings,
                     const char *schedules, int interleaved_ok, method_lists *out);

/* The machine's cores: the default worker count of sweep and tune. */
int planner_jobs_default(void);


/* Resolves a file shipped with dpsim (e.g. "traces/flanv2-100k.csv"). Looks in $DPSIM_DATA,
 * then beside the executable's parent folder (build/..), then in the source tree dpsim was
 * built from. Returns buf, or NULL when not found (buf then holds the last candidate). */
const char *planner_data_path(const char *rel, char *buf, size_t cap);

#endif /* PLANNER_REQUEST_H */
