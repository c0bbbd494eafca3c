/*
 * microbatch.h — cutting one global batch into micro-batches.
 *
 * Strategies (a const table chosen by name with --batching; batcher_list prints them):
 *   padding      fixed --mbs samples per micro-batch, in trace order, every sample padded to the
 *                longest of the global batch. The plain baseline.
 *   packing      the paper's MLM+DS baseline as Megatron runs it (--pack-dataset): the trace is
 *                packed next-fit in trace order into rows of --max-seqlen (T5: the input and
 *                target limits both apply, batch_row_fits), and each global batch is a fixed
 *                number of whole rows (batch_pack_rows: global tokens / max length, a multiple of
 *                mbs x dp); rows are padded to the maximum length; --mbs rows per micro-batch.
 *   packing-batch  the same next-fit, but over each token-budget global batch on its own (its
 *                last row partly empty): what dpsim's packing was before it followed Megatron.
 *   packing-ffd  first-fit-decreasing packing of each global batch into the same rows.
 *   token        DynaPipe's token-based partitioner: walk the ordered samples, cut when the
 *                micro-batch's padded tokens would exceed --mb-tokens.
 *   dynamic      DynaPipe's dynamic program (scheduler/dp.c): the contiguous partition of the
 *                ordered samples minimising its objective (mb_objective_ms: (S-1)*max_k t_k / C +
 *                sum_k t_k / D; with one stage max(sum_k t_k / D, max_k t_k)), subject to memory.
 *
 * Order ("the ordered samples" of token and dynamic): GPT by length. T5 as DynaPipe intends
 * (neighbours close in both lengths): the distinct padded (input, target) pairs are visited along an
 * open travelling-salesman path under the L1 distance (nearest neighbour from the smallest pair,
 * then 2-opt), the samples of one pair together. Deterministic; O(m^2) per 2-opt pass for m
 * distinct pairs (a few hundred per batch). DynaPipe clusters the raw pairs (complete linkage,
 * distance 16) and solves the TSP over the cluster centres with LKH; tests/unit/test_study.c
 * compares the two on the same batches.
 *
 * Every strategy's micro-batches are then costed on the same stage model (mb_list_finish): stage
 * time t_k, memory fit, the DP objective (so strategies can be compared on it), and for D > 1 the
 * assignment to data-parallel replicas by Karmarkar–Karp largest differencing (unless the batcher
 * dealt samples to replicas itself: dynamic with DP_SPLIT_REPLICA).
 *
 * Replicas in lockstep: under ZeRO-2/3, and where a MoE's experts exchange tokens across
 * replicas, every replica of a stage runs as many micro-batches (each forward's gathers and each
 * backward's reduce-scatters, or each MoE layer's all-to-all, meet across the replicas, as FSDP's
 * ranks step together; mb_replicas_lockstep is the rule, the runtime's check and the planner's
 * use it).
 * mb_list_finish makes it so whatever the batcher cut: it splits the costliest micro-batches
 * (their samples in two, the padded shape kept) until D divides their count — or, where the
 * samples are too few for that, merges the cheapest neighbours (into the longer shape, which may
 * not fit: then the iteration does not) — and deals them D at a time, heaviest to the lightest
 * replica; a batcher's own dealing is kept where splits within the replicas that run fewer even
 * it. With fewer samples than replicas the dealing stays uneven, and the built plan's check
 * (plan.h plan_iter_check_lockstep) makes the iteration infeasible. Where the replicas wait for
 * each other at their passes (mb_replicas_meet: ZeRO-3, the experts' exchange) the micro-batches
 * are then ordered costliest first, so that each replica's k-th meets the others' k-th.
 */
#ifndef MICROBATCH_H
#define MICROBATCH_H

#include <stdint.h>

#include "batch.h"
#include "stage_cost.h"

typedef struct microbatch {
    int first;          /* index of its first sample id in mb_list.ids */
    int n_samples;      /* sample ids ids[first .. first + n_samples) */
    int mbs;            /* rows: samples, or packed rows */
    int enc_len;        /* padded encoder (GPT: sequence) length, tokens */
    int dec_len;        /* padded decoder length, tokens (0 for GPT) */
    int64_t enc_tokens; /* real tokens in the encoder (GPT: sequence) tensor */
    int64_t dec_tokens; /* real tokens in the decoder tensor */
    int replica;        /* data-parallel replica, 0 .. D-1 */
    double t_ms;        /* stage time t_k (max over devices of fwd + bwd); NAN if unknown */
    int fits;           /* fits in memory with the in-flight count used */
    int varlen;         /* attention per sample (cost.h cost_shape.varlen), with the samples' */
    double enc_sq, dec_sq, enc_dec; /* sums of padded e_i^2, d_i^2, e_i * d_i */
    int enc_max;        /* varlen: the longest padded e_i */
    int cp;             /* --cp auto: the degree it runs at (stage_model_pick_cp, chosen by
                         * mb_list_finish); 0: the cost model's */
} microbatch;

/* The shape a micro-batch is costed at (its rows, and with varlen its samples' sums). */
cost_shape mb_shape(const microbatch *m);

/* The micro-batches of one iteration. */
typedef struct mb_list {
    int32_t *ids; /* trace sample ids, micro-batch by micro-batch */
    int32_t *lens; /* beside ids: each sample's own tokens, encoder then decoder (2 per id) */
    int n_ids, ids_cap, lens_cap;
    microbatch *mb;
    int n_mb, mb_cap;
    /* filled by mb_list_finish */
    double obj_value_ms, obj_tmax_ms, obj_sum_ms; /* mb_objective_ms; its max and sum */
    int feasible;          /* every micro-batch answerable and fitting */
    int out_of_step;       /* not feasible though it fits: the replicas cannot keep in step
                            * (plan.h plan_iter_check_lockstep; set by the planner) */
    char why[512];         /* when not feasible: which micro-batch and why */
    int in_flight;         /* 1: the memory check assumed one micro-batch held (DynaPipe's
                            * fallback); otherwise the context's mem_rule */
    int dp_passes;         /* dynamic: DP passes run */
    int64_t dp_segments;   /* dynamic: segments tabulated, over its solves (what the row cut,
                            * dp.c seg_build, leaves) */
    int replicas_set;      /* the batcher assigned replicas itself (mb_list_finish keeps them) */
} mb_list;

/* The DP's objective over micro-batches of times t_k (sum and tmax their sum and largest), on S
 * stages of C chunks with D data-parallel replicas, ms: DynaPipe's (S-1)*tmax/C + sum/D, the
 * pipeline's fill and drain plus a replica's share of the work. With one stage there is no fill,
 * and a replica takes at least one micro-batch: max(sum/D, tmax), or one micro-batch of the whole
 * batch would leave D - 1 replicas idle. dp.c minimises it times C x D in integer ns
 * (score_scaled), the same rule. */
static inline double mb_objective_ms(int S, int C, int D, double sum, double tmax)
{
    if (S == 1) return sum / D > tmax ? sum / D : tmax;
    return (S - 1) * tmax / C + sum / D;
}

void mb_list_init(mb_list *l);
void mb_list_release(mb_list *l);
void mb_list_clear(mb_list *l);

typedef struct batch_ctx batch_ctx;

/* Appends a micro-batch holding samples s[0..n) in mbs rows of the given padded shape; its real
 * tokens are the samples' own; with ctx->varlen its attention is per sample (the samples' padded
 * lengths under ctx->rules). ctx NULL: attention over whole rows. */
dp_status mb_list_add(mb_list *l, const batch_ctx *ctx, const sample_len *s, int n, int mbs,
                      int enc_len, int dec_len);

/* The dynamic batcher's memory of costs (scheduler/dp.c): a table of stage times per micro-batch
 * shape, kept across the batches of a run under one memory rule, and each recent batch's segment
 * costs, kept whatever the rule (the last four batches, up to about 32 MB each). The caller owns
 * it (one per stage model, for speed); it clears itself when the stage model, its cost model
 * (cost_model.serial) or the length rules change. NULL in batch_ctx: nothing kept between calls. */
typedef struct shape_cache shape_cache;
shape_cache *shape_cache_new(void); /* NULL when out of memory */
void shape_cache_free(shape_cache *c);

/* Everything a strategy needs. */
struct batch_ctx {
    const batch_rules *rules;
    const stage_model *sm;
    int mbs;           /* padding and packing: samples or rows per micro-batch   [1] */
    int64_t mb_tokens; /* token: padded-token budget of a micro-batch           [2048] */
    double thin_ms;    /* dynamic: DynaPipe's candidate thinning; 0 = exact       [0] */
    const mem_rule *mem; /* the schedule's memory rule (stage_cost.h); NULL: S held, scale 1 */
    int dp_split;      /* dynamic with D > 1 replicas: DP_SPLIT_AUTO, _GLOBAL or _REPLICA (below) */
    shape_cache *cache; /* dynamic: kept across batches; NULL: one per call */
    int varlen;        /* attention per sample (varlen kernels, THD) for every micro-batch made:
                        * the planner sets it from batcher.varlen (sim/study.c) */
};

/* How the dynamic batcher treats D > 1 data-parallel replicas:
 *   GLOBAL   one DP over the whole global batch with the objective's sum divided by D, then the
 *            micro-batches dealt to replicas by Karmarkar-Karp (DynaPipe's way). Its breakpoint
 *            descent runs more passes as D grows (the max term weighs D times the sum's).
 *   REPLICA  the ordered samples dealt to the replicas first, in a snake (0, 1, .., D-1, D-1, ..,
 *            0, ...), so that every replica gets the same spread of lengths and about the same
 *            predicted cost; then one DP per replica (D = 1 in its objective) on about n/D samples:
 *            planning grows about linearly with the global batch.
 *   AUTO     GLOBAL up to DP_SPLIT_AUTO_MAX replicas, REPLICA beyond. */
enum { DP_SPLIT_AUTO = 0, DP_SPLIT_GLOBAL = 1, DP_SPLIT_REPLICA = 2 };
#define DP_SPLIT_AUTO_MAX 1024

/* The replica of the k-th of items dealt to D replicas in a snake (0, 1, .., D-1, D-1, .., 0,
 * 0, ..): the dynamic batcher's per-replica split and the varlen balancers deal this way. */
static inline int mb_snake(int k, int D)
{
    return (k / D) % 2 ? D - 1 - k % D : k % D;
}

/* The memory rule a micro-batch list is checked under: ctx's (or S held when NULL), or with
 * one_held one micro-batch on every device at ctx's scale. */
void mb_mem_rule(const batch_ctx *ctx, int one_held, mem_rule *out);

typedef struct batcher {
    const char *name;
    const char *summary;
    dp_status (*split)(const batch_ctx *ctx, const sample_len *s, int n, mb_list *out,
                       dp_err *err);
    int memory_aware; /* cuts by ctx->mem, so a lower scale gives micro-batches that fit better */
    int pack_dataset; /* global batches are batch_pack_rows whole rows (batch_iter_pack_rows) */
    int varlen;       /* attention per sample (cost_shape.varlen): the planner sets ctx->varlen */
    int knob;         /* the option that sizes its micro-batches: BATCH_KNOB_* */
    int chooses;      /* plans no micro-batches itself: the planner plans every batching that
                       * shares its global batches (not pack_dataset) per iteration and keeps
                       * the fastest that fits (planner/study.h, --batching auto); split is NULL */
    int packs_rows;   /* its micro-batches are whole packed rows (the packers); else samples
                       * cut one by one (padding, token, DynaPipe's DP over samples) */
} batcher;

enum { BATCH_KNOB_NONE, BATCH_KNOB_MBS /* --mbs */, BATCH_KNOB_MB_TOKENS /* --mb-tokens */ };

#define BATCH_CANDIDATES_MAX 16 /* batchings --batching auto tries at most */

const batcher *batcher_find(const char *name);
const batcher *batcher_list(int *count);

/* Sorts samples into the order token and dynamic use (see above), in place. DP_ERR_NOMEM (s
 * unchanged) when the T5 sort keys cannot be allocated. */
dp_status mb_order(const batch_rules *r, sample_len *s, int n);

/* Costs l's micro-batches on ctx's stage model, fills the objective and feasibility, and assigns
 * replicas (D > 1), in lockstep where mb_replicas_lockstep says (above: it may split micro-batches,
 * so l->n_mb can grow). Memory is checked under mb_mem_rule(ctx, l->in_flight == 1). */
dp_status mb_list_finish(const batch_ctx *ctx, mb_list *l, dp_err *err);

/* The passes at which data-parallel replicas wait for each other (bits 1 << OP_F, OP_B, OP_W; 0
 * with dp 1): those that cannot compute before a collective over the replicas has delivered —
 * ZeRO-3's parameter gathers (F, and B's input gradients; a W needs no weights) and a MoE's token
 * exchange where its expert group spans replicas (F, B: experts_span, mesh.h
 * mesh_experts_span_replicas). The simulator starts such a pass on every replica of the stage at
 * once (sim.h). ZeRO-2/3's gradient reduce-scatters run behind the compute and wait for nothing. */
unsigned mb_replicas_meet(int zero_stage, int dp, int experts_span);
/* Whether data-parallel replicas must run the same sequence of passes, their collectives matched
 * in order: ZeRO-2/3's, or where they meet (above). The planner and dprun make them so. */
int mb_replicas_lockstep(int zero_stage, int dp, int experts_span);

/* Karmarkar–Karp largest differencing: assigns items of weights w[0..n) to k bins, balancing
 * sums; bin[i] receives the bin of item i. */
dp_status kk_partition(const double *w, int n, int k, int *bin);

/* dynamic, exposed for tests: the exact DP (thin_ms = 0) or the thinned one. */
dp_status dp_batch(const batch_ctx *ctx, const sample_len *s, int n, mb_list *out, dp_err *err);
/* The DP's search (scheduler/dp.c) over any n items in a fixed order, cut into contiguous
 * segments minimising (S-1) * max t / C + sum t / D: cost(cost_ctx, i, l) is the time of items
 * [i, i+l) as one micro-batch in integer ns, or -1 when it does not fit (then no longer segment
 * from i may fit either). ends (n entries) receives each segment's end, *n_seg their count.
 * DP_ERR_INFEASIBLE when an item does not fit alone (named by its index), DP_ERR_NOMEM. */
typedef int64_t (*dp_seg_cost)(void *cost_ctx, int i, int l);
dp_status dp_cut(int n, dp_seg_cost cost, void *cost_ctx, int S, int C, int D, int *ends,
                 int *n_seg, dp_err *err);
/* The same DP over samples already in the order wanted (dp_batch is mb_order + this): for
 * comparing orders on the same batches. */
dp_status dp_batch_ordered(const batch_ctx *ctx, const sample_len *s, int n, mb_list *out,
                           dp_err *err);

#endif /* MICROBATCH_H */
