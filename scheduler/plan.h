/*
 * plan.h — the execution plan: what each rank runs, in order, for each iteration.
 *
 * The simulator (sim/) and the runtime (runtime/, dprun) consume exactly this. JSON form (version
 * 1, DESIGN.md "Execution plan JSON"):
 *
 *   {"version": 1, "model": "gpt-6.7b-16l", "hw": "p4d", "pp": S, "dp": D, "tp": T,
 *    "chunks": C, "zero": Z, "recompute": "none", "schedule": "1f1b", "batching": "dynamic",
 *    "rules": {"global_tokens": …, "max_seqlen": …, "max_dec_seqlen": …, "dec_extra": 2,
 *              "pad_multiple": 8, "min_padded": 16},
 *    "iterations": [{"id": i,
 *       "microbatches": [{"id": k, "samples": [trace ids], "mbs": m, "enc_len": A, "dec_len": B,
 *                         "tokens": real, "padded_tokens": …, "replica": r,
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
 * Instruction semantics (shared by the simulator and the runtime):
 *   RECV_*    posts a receive; it does not block.
 *   F, B, W   compute; waits only for the inputs it consumes: F(k, c) for RECV_ACT(k, c) when it
 *             is not the first virtual stage; B(k, c) for its own F and for RECV_GRAD(k, c) when it
 *             is not the last virtual stage; W(k, c) for B(k, c).
 *   SEND_*    starts a transfer once the compute producing it has finished; it does not block the
 *             instructions after it. Transfers between a pair of ranks are matched in order, as
 *             NCCL matches them.
 *   FREE      releases micro-batch k's stored activations (after its B).
 *
 * The validator (plan_validate) checks, and names the rank, instruction and reason when not:
 *   - every send has its receive on the peer, in the same order per pair, with the same
 *     micro-batch, chunk, kind and bytes (a shape mismatch is refused);
 *   - dependency order within each rank (F before its SEND_ACT, B after its F, ...);
 *   - no deadlock: an untimed execution of all ranks under the semantics above completes.
 */
#ifndef PLAN_H
#define PLAN_H

#include <stdint.h>
#include <stdio.h>

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
    double *fwd_ms, *bwd_ms, *w_ms; /* per device, ms */
    double *stored_mb, *peak_mb;    /* per device, MB */
} plan_mb;

typedef struct plan_iter {
    int id;
    int pp, dp;
    int32_t *ids;
    int n_ids;
    plan_mb *mb;
    int n_mb;
    double *per_stage; /* backing store for the plan_mb arrays: n_mb * 5 * pp */
    plan_rank *ranks;  /* pp * dp ranks, index replica * pp + stage */
    int has_objective;
    double obj_value_ms, obj_tmax_ms, obj_sum_ms;
} plan_iter;

typedef struct plan_header {
    char model[64], hw[64], schedule[32], batching[32];
    int pp, dp, tp, chunks, zero;
    char recompute[16];
    batch_rules rules;
} plan_header;

void plan_iter_init(plan_iter *it);
void plan_iter_release(plan_iter *it);

/* Allocates an iteration of n_mb micro-batches (their per-stage arrays zeroed, ids 0..n_mb-1,
 * replica 0) holding n_ids sample ids, and pp*dp empty ranks. */
dp_status plan_iter_alloc(plan_iter *it, int id, int pp, int dp, int n_mb, int n_ids);

/* Builds an iteration's micro-batches from an mb_list, costing each on sm (per-stage fwd/bwd/w,
 * stored/peak memory). The ranks are allocated empty; a schedule fills them. */
dp_status plan_iter_from_mbs(plan_iter *it, int id, const mb_list *l, const stage_model *sm,
                             dp_err *err);

/* Appends one instruction to a rank. */
dp_status plan_rank_push(plan_rank *r, plan_op op, int mb, int chunk, int peer, int64_t bytes);

/* Checks an iteration (see above). where names the plan in messages. */
dp_status plan_validate(const plan_iter *it, int chunks, const char *where, dp_err *err);

/* Streaming JSON writer: header, then iterations one at a time. */
typedef struct plan_writer {
    FILE *fp;
    int to_stdout, count;
    const char *path;
} plan_writer;

dp_status plan_writer_open(plan_writer *w, const char *path, const plan_header *h, dp_err *err);
dp_status plan_writer_add(plan_writer *w, const plan_iter *it, dp_err *err);
dp_status plan_writer_close(plan_writer *w, dp_err *err);

/* A whole plan read back from JSON. */
typedef struct plan {
    plan_header h;
    plan_iter *it;
    int n_it;
} plan;

dp_status plan_read(const char *path, plan *p, dp_err *err);
dp_status plan_parse(const char *text, const char *name, plan *p, dp_err *err);
void plan_release(plan *p);

#endif /* PLAN_H */
