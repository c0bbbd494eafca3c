/*
 * tune.h — the search space behind dpsim tune and compare --tuned: every configuration of each
 * batching method on a fixed number of GPUs, and its ranking by simulated throughput.
 *
 * A configuration (tune_point) is a number format from the space's list (tune --precision
 * bf16,fp8; the request's alone by default), a layout tp x cp x pp x dp = gpus, cp from the space's
 * list (tune --cp 1,2,4,auto; the request's --cp alone by default; auto: a group of --cp-max GPUs in
 * which each micro-batch runs at its own degree, the cp_auto of models/cost.h), tp at most a
 * node's GPUs that the layout rule takes (mesh_check_model: the space leaves the others out, with
 * a note), pp at most the model's layers, even for T5 unless 1, dp at most REPLICA_MAX (what
 * --dp takes), a chunked (interleaved) schedule at each of the space's chunk counts with pp > 1
 * and pp x chunks at most the layers, a ZeRO stage (over the dp x cp GPUs that hold the same
 * weights: 0 or 1 where there are two or more, 2 and 3 as well without a pipeline, 0 where there
 * is one; ZeRO-3 also hybrid, HSDP, sharded over a node's GPUs of the data-parallel group where
 * that is fewer than all: tune_hsdp_group), a recompute mode (none, selective, full; dynamic as
 * well for the memory-aware batchers, DynaPipe's per-iteration rule), a schedule from the list,
 * and the method's own knob (batcher.knob): --mbs for padding and the packers that take it,
 * --mb-tokens for token, none for the others.
 *
 * Each point is scored on a few global batches (tune_scoring_trace): the first ones and the
 * batch that holds the trace's longest sample, so that a configuration that only fits short
 * batches does not win on them.
 *
 * Points come in a fixed order (batching, schedule, chunks, precision, tp, cp, pp, zero, recompute,
 * knob), so a search
 * is reproducible; tune_rank orders results by throughput, feasible ones first, ties by that
 * order.
 */
#ifndef TUNE_H
#define TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "../common/dp.h"
#include "../scheduler/batch.h"
#include "../traces/trace.h"

/* What tune searches unless told: Megatron's packing (the baseline), the two strongest varlen
 * packers a 2026 trainer runs, and DynaPipe's DP on both kernels; 1F1B and DynaPipe's adaptive
 * schedule (compare --tuned's too). */
#define TUNE_DEFAULT_BATCHINGS "packing,packing-ffd-varlen,packing-wlb,dynamic,dynamic-varlen"
#define TUNE_DEFAULT_SCHEDULES "1f1b,adaptive"

#define TUNE_MAX_LIST 16
#define TUNE_MAX_CP 8
#define TUNE_MAX_PRECISION 3 /* bf16, fp16, fp8 */
#define TUNE_MAX_EP 8         /* expert-parallel degrees searched */
/* A mixture of experts' default ep list: these degrees that divide its experts and fit a node
 * (Megatron's and DeepSeek's expert groups stay on NVLink first: the all-to-all's bandwidth). */
#define TUNE_DEFAULT_EPS {1, 2, 4, 8}
#define TUNE_CP_AUTO 0        /* the item "auto" of a parsed --cp list (tune_parse_cp_list) */

typedef struct tune_point {
    const char *batching, *schedule; /* point into the space's lists */
    int chunks;            /* the schedule's virtual stages per device (1 but for a chunked one) */
    int tp, cp, pp, dp, zero, mbs;
    int cp_auto;           /* 1: cp is a group, each micro-batch at its own degree dividing it
                            * (plan's --cp auto --cp-max cp) */
    int shard_group;       /* HSDP: ZeRO-3's state over this many GPUs, replicated across
                            * (tune_hsdp_group); 0: over the whole data-parallel group */
    int precision;         /* a train_precision (models/cost.h) */
    int ep;                /* a mixture of experts' expert parallelism (1: none, or dense), folded
                            * over tp x cp x dp of a stage (plan's --ep) */
    int64_t mb_tokens;
    int recompute;         /* a recompute_policy (cost.h): none, selective, full or dynamic */
} tune_point;

typedef struct tune_space {
    int gpus;          /* layouts of exactly this many GPUs: tp x cp x pp x dp */
    int cps[TUNE_MAX_CP], n_cps; /* the context-parallel degrees searched, each dividing gpus
                                  * ([1]; for auto its group) */
    int cp_autos[TUNE_MAX_CP];   /* 1: cps[i] is auto's group (tune_point.cp_auto) */
    int precisions[TUNE_MAX_PRECISION], n_precisions; /* the number formats searched, each a
                                  * train_precision ([bf16]; the request's --precision, or each of
                                  * its list) */
    int eps[TUNE_MAX_EP], n_eps; /* the expert-parallel degrees searched, each dividing the
                                  * experts ([1]; a layout takes those ep x etp divides of its
                                  * tp x cp x dp) */
    int etp;                     /* the request's expert tensor parallelism, fixed ([1]) */
    int gpus_per_node; /* tensor parallelism stays inside a node */
    int layers;        /* the model's pipeline-able layers (GPT: layers; T5: encoder + decoder) */
    int t5;            /* 1: pp must be 1 or even */
    const char *batchings[TUNE_MAX_LIST];
    int n_batchings;
    const char *schedules[TUNE_MAX_LIST];
    int n_schedules;
    int tps[TUNE_MAX_LIST], n_tps;          /* [1 2 4 8] */
    int chunks[TUNE_MAX_LIST], n_chunks;    /* a chunked schedule's: [2 4] */
    int mbs[TUNE_MAX_LIST], n_mbs;          /* padding, packing: [1 2 4 8] */
    int64_t mb_tokens[TUNE_MAX_LIST];       /* token: [1024 2048 4096 8192 16384] */
    int n_mb_tokens;
    int zero_pipeline; /* ZeRO 2 and 3 with a pipeline too (FSDP with PP), not only without: about
                        * 1.6 x the configurations and 2.5 x the search time        [0] */
} tune_space;

/* The default lists above for gpus on nodes of gpus_per_node, a model of `layers` layers, cp [1],
 * precision [bf16]; the caller adds the batchings and schedules (and cp degrees dividing gpus, the
 * precisions). */
void tune_space_default(tune_space *sp, int gpus, int gpus_per_node, int layers, int t5);

/* Parses tune's --cp list ("1,2,4,auto": distinct degrees in [1, 1024] and auto, read as
 * TUNE_CP_AUTO; at most TUNE_MAX_CP) into cps[] and *n: 0, or -1 with why (a usage error's
 * text). */
int tune_parse_cp_list(const char *arg, int *cps, int *n, char *why, size_t cap);

/* Parses tune's --precision list ("bf16,fp8": distinct names of models/cost.h's precision_parse)
 * into precs[] (train_precision values) and *n: 0, or -1 with why (a usage error's text). */
int tune_parse_precision_list(const char *arg, int *precs, int *n, char *why, size_t cap);

/* Parses tune's --ep list ("1,4,8": distinct degrees in [1, MOE_EP_MAX]; at most TUNE_MAX_EP)
 * into eps[] and *n: 0, or -1 with why (a usage error's text). */
int tune_parse_ep_list(const char *arg, int *eps, int *n, char *why, size_t cap);

/* The HSDP shard group tune tries for layout p on nodes of gpus_per_node GPUs: the data-parallel
 * GPUs one node holds (cp x k, k = gpus_per_node / (tp x cp x pp) replicas), where that is a
 * valid group (stage_shard_check) of 2 GPUs or more and fewer than dp x cp; else 0 (none). */
int tune_hsdp_group(const tune_point *p, int gpus_per_node);

/* Every point of the space, in the fixed order; returns how many (0: none, or out of memory, with
 * *out NULL). The caller frees *out. */
long tune_points(const tune_space *sp, tune_point **out);

/* The trace a search scores on: the first k - 1 global batches of t under r (the token budget)
 * and the batch that holds t's longest sample after the length rules (input + target), k
 * batches in all (the first k when that batch is among them, all of t when it has fewer). out is
 * initialised here; the caller releases it. *longest_batch receives that batch's index in t. */
dp_status tune_scoring_trace(const trace *t, const batch_rules *r, int k, trace *out,
                             int *longest_batch, dp_err *err);

/* Writes "batching=packing schedule=1f1b tp=1 ..." (the plan options that select the point). */
void tune_point_describe(const tune_point *p, char *buf, size_t cap);

typedef struct tune_result {
    tune_point pt;
    long index;            /* the point's place in the space */
    int ok;                /* ran, fitted in memory, every iteration answerable */
    double throughput;     /* real tokens/s over the iterations tried */
    double mfu;
    double peak_mb;        /* the largest stage's peak */
    char why[240];         /* when not ok */
    int done;              /* 1: ran (or read back from a resumed ranking); 0: not run */
    int died;              /* 1: its worker died (a crash): no result */
    double seconds;        /* its worker's wall time */
} tune_result;

/* Feasible first, by throughput (descending, to the 0.01 tokens/s the ranking CSV writes), ties
 * by index; in place. */
void tune_rank(tune_result *r, long n);

/* When every point of a finished search ran and none fits (no worker died, none was stopped):
 * the one that came nearest — the least peak memory among those simulated, else the least model
 * state per GPU by its shards — whose why says what stands in the way; NULL otherwise. */
const tune_result *tune_nothing_fits(const tune_result *r, long n);

/* The best ok result of batching in a ranked array, or NULL. */
const tune_result *tune_best(const tune_result *r, long n, const char *batching);

/* The reference a search's bests are compared with: the best result of the best varlen packer
 * among batchings (what a 2026 trainer runs; not a memory-aware batcher), else packing's; NULL
 * when neither has one. *name: its batching ("packing" when NULL). */
const tune_result *tune_reference(const tune_result *r, long n, const char *const *batchings,
                                  int nb, const char **name);

/* The ranking CSV: header, and one row per result (no newline). */
extern const char TUNE_CSV_HEADER[];
void tune_csv_row(const tune_result *r, long rank, char *buf, size_t cap);

/* A result's why when its worker died: the point has no result, and a resumed search runs it
 * again. */
#define TUNE_WHY_DIED "the worker died (a crash or a signal): no result"

/* The start of a result's why when the search dropped it by a lower bound on its time
 * (planner/tune_run.h): it could not have been its batching's best. */
#define TUNE_WHY_PRUNED "pruned: "
int tune_result_pruned(const tune_result *r);

/* Whether point p is in the search's first pass (planner/tune_run.h): the first schedule of the
 * space, no recompute. */
int tune_first_pass(const tune_space *sp, const tune_point *p);

/* Reads a ranking CSV's rows back into the results of the points they name (matched on batching,
 * schedule, chunks, precision and cp_auto (any, in a ranking from before they were columns), tp,
 * cp, pp, dp,
 * zero, recompute, mbs, mb_tokens; res[i].pt is the space's point i), each
 * marked done, but for a row whose worker died (TUNE_WHY_DIED), left to run again; rows of
 * points not in the space are counted in *foreign, a point's second row overwrites its first.
 * DP_ERR_IO for a file that cannot be read, DP_ERR_PARSE naming the file and line for a row that
 * is not the contract's; res[] then holds the rows before it, marked done. */
dp_status tune_read_ranking(const char *path, tune_result *res, long n, long *read, long *foreign,
                            dp_err *err);

#endif /* TUNE_H */
