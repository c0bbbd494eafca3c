/*
 * plan.h — the execution plan: what each rank runs, in order, for each iteration.
 *
 * The simulator (sim/) and the runtime (runtime/, dprun) consume exactly this. JSON form (version
 * 1, docs/formats.md "Execution plan JSON"):
 *
 *   {"version": 1, "model": "gpt-6.7b-16l", "hw": "p4d", "model_spec": {…}, "cluster_spec": {…},
 *    "pp": S, "dp": D, "tp": T, "sp": true (with T > 1: sequence parallelism or not),
 *    "chunks": C, "placement": "v" (only a V-shaped schedule's), "zero": Z, "shard_group": G (HSDP only), "recompute": "none" (or "dynamic":
 *    each iteration names its own; "mixed": each micro-batch names its own), "overlap": "dp,zero" (--overlap),
 *    "schedule": "1f1b", "batching": "dynamic",
 *    "rules": {"global_tokens": …, "max_seqlen": …, "max_dec_seqlen": …, "dec_extra": 2,
 *              "pad_multiple": 8, "min_padded": 16},
 *    "iterations": [{"id": i, "recompute": "selective" (dynamic plans), "batching": "dynamic"
 *       ("auto" plans: the iteration's winner), "schedule": "zb1" (the same for schedules),
 *       "microbatches": [{"id": k, "samples": [trace ids], "mbs": m, "enc_len": A, "dec_len": B,
 *                         "tokens": real, "padded_tokens": …, "replica": r,
 *                         "recompute": "full" (mixed plans: this micro-batch's mode),
 *                         "attention": "varlen" (only where each sample attends to itself),
 *                         "seq_lens": [each sample's own tokens], "dec_lens": [T5: decoder's]
 *                         (varlen micro-batches: the runtime attends over exactly these,
 *                         laid back to back in the flattened mbs x enc_len tensor),
 *                         "pred_ms": {"fwd": [per stage], "bwd": [per stage], "w": [per stage]},
 *                         "mem_mb": {"stored": [per stage], "peak": [per stage]}}],
 *       "stages": [{"stage": s, "replica": r, "instructions": [
 *                     {"op": "RECV_ACT", "mb": k, "peer": s-1, "bytes": n},
 *                     {"op": "F", "mb": k, "chunk": c}, {"op": "SEND_ACT", "mb": k, "peer": s+1,
 *                      "bytes": n}, …]}],
 *       "objective": {"value": …, "tmax": …, "sum": …}}]}
 *
 * Times are per device (all of its chunks), in ms; with C chunks each chunk takes 1/C of them.
 * "w" is the weight-gradient share of "bwd" (used when a schedule splits the backward into B and
 * W); "peer" is a stage index within the same replica; bytes are the activation (or gradient)
 * bytes of the transfer.
 *
 * "act_dtype" names the element type of the activations and gradients that "bytes" count (fp16 or
 * bf16: 2 bytes; a plan without it is fp16). A runtime that moves another type says so in its
 * measured timeline, and dpsim validate re-simulates with the runtime's bytes.
 *
 * What each instruction means (what it waits for, creates, releases, how long it takes and what
 * memory it holds) is defined once, in plan_machine.h, which the validator, the simulator and
 * both executors step through; its header lists every rule plan_validate checks.
 */
#ifndef PLAN_H
#define PLAN_H

#include <stdint.h>
#include <stdio.h>

#include "../common/outfile.h"
#include "../models/comm.h"
#include "batch.h"
#include "microbatch.h"

typedef enum plan_op {
    OP_F,
    OP_B,
    OP_W,
    OP_SEND_ACT,
    OP_RECV_ACT,
    OP_SEND_GRAD,
    OP_RECV_GRAD,
    OP_FREE,
    OP_COUNT,
} plan_op;

const char *plan_op_name(plan_op op);
int plan_op_parse(const char *name, plan_op *op);
int plan_op_is_send(plan_op op); /* SEND_ACT, SEND_GRAD */
int plan_op_is_recv(plan_op op); /* RECV_ACT, RECV_GRAD */

typedef struct plan_instr {
    plan_op op;
    int mb;        /* micro-batch id within the iteration */
    int chunk;     /* model chunk on this device (interleaved), else 0 */
    int peer;      /* SEND/RECV: peer stage in the same replica; -1 otherwise */
    int64_t bytes; /* SEND/RECV: payload, bytes; 0 otherwise */
} plan_instr;

typedef struct plan_rank {
    int stage, replica;
    plan_instr *ins;
    int n, cap;
} plan_rank;

/* Per-stage predictions of one micro-batch (arrays of pp values). */
typedef struct plan_mb {
    int id;
    int first, n_samples;  /* trace ids in plan_iter.ids */
    int mbs, enc_len, dec_len;
    int64_t enc_tokens, dec_tokens;
    int replica;
    int varlen; /* "attention": "varlen": each sample attends to itself (cost_shape.varlen) */
    int recompute; /* the micro-batch's own recompute_mode ("recompute", a plan that says
                    * "mixed": a mode per micro-batch); -1: the iteration's (plan_machine.h
                    * pm_recompute) */
    int cp;        /* its context-parallel degree under "cp_auto" ("cp", a divisor of the
                    * header's cp, the group it runs in: cost.h cost_model.cp_auto); 0 otherwise */
    double *fwd_ms, *bwd_ms, *w_ms; /* per device, ms */
    double *xfwd_ms, *xbwd_ms;      /* of fwd_ms and of bwd_ms (its B: a W has none), a MoE's
                                     * token exchange, its all-to-alls ("xchg_fwd", "xchg_bwd"):
                                     * what the simulator may overlap with the compute of another
                                     * micro-batch paired with it (sim.h); per device, ms; 0 for a
                                     * dense model */
    double *stored_mb, *peak_mb;    /* per device, MB */
} plan_mb;

/* A micro-batch's per-device arrays, PLAN_MB_ARRAYS x pp doubles from fwd_ms on, in the order
 * fwd, bwd, w, xfwd, xbwd, stored, peak: plan_mb_bind points m's arrays into v so, and every
 * plan_mb is bound so (plan_iter_alloc), so that one memcpy from fwd_ms copies them all. */
#define PLAN_MB_ARRAYS 7
void plan_mb_bind(plan_mb *m, double *v, int pp);

typedef struct plan_iter {
    int id;
    int pp, dp;
    int32_t *ids;
    int32_t *lens; /* beside ids: each sample's own encoder (GPT: sequence) and decoder tokens, 2
                    * per id; 0 where the file does not say (it says for varlen micro-batches:
                    * "seq_lens", "dec_lens") */
    int n_ids;
    plan_mb *mb;
    int n_mb;
    double *per_stage; /* backing store for the plan_mb arrays: n_mb * PLAN_MB_ARRAYS * pp */
    plan_rank *ranks;  /* pp * dp ranks, index replica * pp + stage */
    int has_objective;
    double obj_value_ms, obj_tmax_ms, obj_sum_ms;
    double model_flops; /* training FLOPs of the iteration's real tokens (model_train_flops), 0:
                         * unknown ("model_flops" in the file) */
    int recompute;      /* the iteration's recompute_mode ("recompute" in the file: none,
                         * selective or full); -1 = the header's. A plan made with --recompute
                         * dynamic says "dynamic" in its header and a mode in every iteration */
    char batching[32];  /* the batching that planned it ("batching"; --batching auto says
                         * "auto" in its header and the winner in every iteration); "" = the
                         * header's */
    char schedule[32];  /* the schedule that ordered it ("schedule"; --schedule auto, auto-loop
                         * or auto-v says so in its header and a schedule of its chooser's family
                         * on the header's placement in every iteration: plan_check);
                         * "" = the header's */
    int placement;      /* how its chunks sit on the devices (a placement_kind, placement.h):
                         * the header's "placement" */
} plan_iter;

typedef struct plan_header {
    char model[64], hw[64], schedule[32], batching[32];
    int pp, dp, tp, chunks, zero;
    int placement;        /* "placement": "v" (ZB-V: placement.h's V), absent: a loop */
    pipeline_split split; /* "layers_per_stage": the layers of each virtual stage, pp x chunks of
                           * them; or "first_stage_less_layers" and "last_stage_less_layers", the
                           * split by rule (n 0; placement.h); neither: split evenly. Its fit to
                           * the model: placement_split_check, where the model is known */
    int shard_group;     /* "shard_group": ZeRO's state split over this many GPUs of the
                          * data-parallel group, the groups' shards all-reduced across (HSDP;
                          * stage_shard_check); absent, 0: over all of them */
    int cp, cp_alltoall; /* context parallelism ("cp", "cp_kind": "ring" or "all-to-all"); 1, 0 */
    int ep;              /* "ep": a mixture of experts' expert parallelism (absent: 1) */
    int etp;             /* "etp": its experts' tensor parallelism (absent: 1) */
    double capacity;     /* "capacity_factor": its experts' capacity factor (absent: 0, dropless) */
    int dispatch;        /* "dispatcher": its token exchange's moe_dispatch ("alltoall", absent,
                          * or "deepep") */
    int routing;         /* "routing": its moe_route_kind, with routing_alpha ("uniform", "even",
                          * "skewed:ALPHA" as --routing reads, or "histogram"; absent: uniform) */
    double routing_alpha;
    double routing_shares[MOE_EP_MAX]; /* "routing_shares": a histogram's ep ranks' shares (only
                                        * "histogram"; routing_n_shares = ep of them) */
    int routing_n_shares;
    int cp_auto;         /* "cp_auto": true: cp is a group of GPUs, each micro-batch names its
                          * own degree (plan_mb.cp; --cp auto) */
    int sp;              /* Megatron's sequence parallelism with tp > 1 ("sp": true or false; a
                          * plan without it: on, dpsim's default); 0 with tp 1 */
    int recompute;      /* a recompute_policy (cost.h) but fastest: a mode, dynamic or mixed
                         * ("recompute"); -1: the file did not say (refused by plan_check) */
    char act_dtype[8];  /* "fp16" or "bf16" */
    int act_elem_bytes; /* bytes per element of act_dtype: 2 */
    int textbook;       /* "textbook": true: planned with textbook costs (cost.h cost_toy): its
                         * replay runs no gradient collective and no optimizer step */
    unsigned overlap;   /* the COST_OVERLAP_* bits it was priced and simulated with ("overlap":
                         * "dp,zero", as --overlap reads; a plan without it: the default): its
                         * replay overlaps what the plan's own simulation overlapped */
    int precision;      /* the train_precision it was priced in ("precision": "bf16", "fp16",
                         * "fp8"); -1: the file does not say (older plans: the model's default) */
    int grad_bytes;     /* bytes per gradient element as reduced ("grad_reduce": "fp32" 4, "16-bit"
                         * 2; older plans: 2), what its gradient collectives were priced at */
    int stack;          /* the software_stack that priced it ("stack": "torch-eager", …; absent:
                         * megatron-te, models/stack.h) */
    batch_rules rules;
    /* The model and cluster specs the plan was made with, as JSON text ("model_spec",
     * "cluster_spec" in the file), so that a plan runs anywhere: readers use them instead of
     * resolving "model"/"hw" (names or paths relative to where the plan was made). NULL when
     * the file has none (older plans). A read plan owns them (plan_release frees them); the
     * writer only reads them. */
    char *model_json, *hw_json;
} plan_header;

/* The activation dtype the simulated models use, and its element size. */
#define PLAN_ACT_DTYPE "fp16"
#define PLAN_ACT_ELEM_BYTES COMM_ACT_ELEM_BYTES

/* Element size of a dtype name ("fp16", "bf16": 2; "fp32": 4; "fp64": 8), or 0 if unknown. */
int plan_dtype_bytes(const char *name);

void plan_iter_init(plan_iter *it);
void plan_iter_release(plan_iter *it);

/* Allocates an iteration of n_mb micro-batches (their per-stage arrays zeroed, ids 0..n_mb-1,
 * replica 0) holding n_ids sample ids, and pp*dp empty ranks. */
dp_status plan_iter_alloc(plan_iter *it, int id, int pp, int dp, int n_mb, int n_ids);

/* Builds an iteration's micro-batches from an mb_list, costing each on sm (per-stage fwd/bwd/w,
 * stored/peak memory). The ranks are allocated empty; a schedule fills them. */
dp_status plan_iter_from_mbs(plan_iter *it, int id, const mb_list *l, const stage_model *sm,
                             dp_err *err);

/* A prediction as a plan holds it: rounded to 1e-6 (a nanosecond of ms, a byte of MB), what the
 * file writes, so that a plan built here and the same plan read back run alike. */
double plan_round(double v);

/* Costs one micro-batch on sm into m's per-stage arrays (pp values each): what
 * plan_iter_from_mbs does for each, and what a per-micro-batch recompute choice
 * (planner/mixed_recompute.h) calls to re-cost one in another mode. scratch is the caller's.
 * On error m's arrays are unspecified. */
dp_status plan_mb_cost(plan_mb *m, int pp, const microbatch *src, const stage_model *sm,
                       mb_cost *scratch, dp_err *err);

/* Replicas in lockstep (mb_replicas_lockstep(zero, it->dp, experts_span)): every replica of a
 * stage runs the same sequence of F, B and W, chunk by chunk, as ZeRO-2/3's collectives and an
 * exchange of experts across replicas need: DP_OK where nothing keeps in step, else DP_ERR_UNSUPPORTED
 * naming where, the iteration, the stage and the replica when one differs. The planner marks such
 * an iteration infeasible; dprun refuses the plan; the simulator times its replicas apart. */
dp_status plan_iter_check_lockstep(const plan_iter *it, int zero, int experts_span,
                                   const char *where, dp_err *err);

/* Appends one instruction to a rank. */
dp_status plan_rank_push(plan_rank *r, plan_op op, int mb, int chunk, int peer, int64_t bytes);

/* Checks an iteration against every rule of plan_machine.h. where names the plan in messages.
 * Defined in plan_machine.c. */
dp_status plan_validate(const plan_iter *it, int chunks, const char *where, dp_err *err);

/* Streaming JSON writer: header, then iterations one at a time, into a temporary that
 * plan_writer_close renames into place (common/outfile.h); plan_writer_abort drops it, leaving
 * any earlier file at path as it was. The header is written with the first iteration (or the
 * close): until then plan_writer_set_layout may change its chunks and placement, which
 * --schedule auto chooses by the first iteration (study.h). */
typedef struct plan_writer {
    out_file o;
    FILE *fp;
    struct cJSON *head; /* the header not yet written; NULL once it is */
    int count;
    const char *path;
    size_t bytes; /* written so far: a plan is refused past JSON_MAX_BYTES, what a reader takes */
} plan_writer;

dp_status plan_writer_open(plan_writer *w, const char *path, const plan_header *h, dp_err *err);
/* placement: a placement_kind. DP_ERR_INVALID (naming the file) once an iteration is written. */
dp_status plan_writer_set_layout(plan_writer *w, int chunks, int placement, dp_err *err);
dp_status plan_writer_add(plan_writer *w, const plan_iter *it, dp_err *err);
dp_status plan_writer_close(plan_writer *w, dp_err *err);
void plan_writer_abort(plan_writer *w);

/* A whole plan read back from JSON. */
typedef struct plan {
    plan_header h;
    plan_iter *it;
    int n_it;
} plan;

/* Reads and parses a plan (syntax, types and ranges: DP_ERR_PARSE). */
dp_status plan_read(const char *path, plan *p, dp_err *err);
dp_status plan_parse(const char *text, const char *name, plan *p, dp_err *err);
void plan_release(plan *p);

/* The plan's model and cluster: its embedded specs where it has them, else "model"/"hw"
 * resolved as presets or files (older plans). */
dp_status plan_model(const plan *p, model_spec *m, dp_err *err);
dp_status plan_cluster(const plan *p, cluster_spec *c, dp_err *err);

/* The rules that need the model: T5 micro-batches have a decoder length, GPT ones none; every
 * transfer's bytes are the model's activation bytes for its micro-batch (models/comm.h), which
 * the executors allocate and move. */
dp_status plan_check_model(const plan *p, const model_spec *m, const char *where, dp_err *err);

#endif /* PLAN_H */
