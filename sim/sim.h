/*
 * sim.h — executes an execution plan on simulated devices, event by event.
 *
 * Each rank (stage s of replica r) has one compute stream and, per kind (activation, gradient)
 * and direction (towards higher stages, or lower or itself), one send and one receive stream:
 * the directed links that dprun's NCCL mode opens (in a loop a stage sends activations to one
 * neighbour and gradients to the other; in a V both kinds go both ways, chunk 0 down and chunk 1
 * up), so a send never waits behind one to another peer or of the other kind. What each
 * instruction means comes from the plan machine (scheduler/plan_machine.h); the simulator only
 * times it:
 *   RECV_*    posts the receive at the current time;
 *   F, B, W   wait until the data they consume has arrived, then queue on the compute stream:
 *             start = max(now, stream free); duration from pm_resolve (B's share when the rank
 *             is split);
 *   SEND_*    queue, in issue order, on the rank's send stream of that kind; a transfer starts
 *             at max(issued, the end of the compute issued before it on the rank (stream order:
 *             the producer's end, or later where the plan put more compute between them, as a
 *             DualPipe F&B pair does), receiver posted, both link streams free) and takes
 *             latency + bytes * wire_scale / bandwidth of the link between the two ranks' GPUs
 *             (models/comm.h; each rank's first GPU, as models/mesh.h places it);
 *   FREE      stream-ordered: the stored activations go when the compute before it ends.
 * Issuing blocks only on a compute whose inputs are missing; transfers overlap compute. The only
 * events are transfer completions, each handled (it wakes the receiver).
 *
 * Memory per stage over time: model state + stored activations (from a forward's start until
 * its FREE) + the running op's transient. The peak equals pm_rank_peak's (the planner's check)
 * by construction; OOM when it exceeds the device's memory.
 *
 * Replicas that meet (microbatch.h mb_replicas_meet of zero_stage, dp and experts_span: ZeRO-3's
 * parameter gathers, an exchange of experts across replicas): the k-th pass of each such kind on a
 * rank is a collective with the k-th of the same stage's other replicas. It starts on all of them
 * together, when the last is ready (its data arrived, its compute stream free), and ends on all
 * of them when the longest of theirs would: the replicas step together, each meeting waiting for
 * the slowest micro-batch. A rank computes for its own pass's time (busy_ns, op_ns, the op a sink
 * sees) and idles the rest of the meeting (the study's replica imbalance); what depends on the
 * pass waits for the end. Replicas whose passes differ (plan.h plan_iter_check_lockstep: the
 * planner calls such an iteration infeasible, dprun refuses it) cannot meet: the simulator times
 * them apart.
 *
 * Pairs (pair_exchange: --overlap ep): a MoE layer's token exchange (pm_step.xchg_ms, its
 * all-to-alls, serial in the cost model) overlaps the compute of another micro-batch where a rank's
 * plan puts a forward and another micro-batch's backward next to each other (either first; a W
 * between them, or the same micro-batch, pairs nothing; an op that ended a pair starts none), as
 * DualPipe's F&B pairs and Megatron's merged 1F1B steps run them: together they take
 * max(c1 + c2, a1 + a2) (c: compute, a: exchange) where the second's data was there when the first
 * began, and that share of the saving min(c1 + c2, a1 + a2) that the first still had to run when
 * its data came. The second's time absorbs it (at most all of it); nothing waits to pair, so a
 * plan that runs serially runs paired (no deadlock), never slower. Memory is the serial rule's
 * (each op's own transient): not modelled, the two transients at once.
 *
 * Stragglers (straggler_share > 0): once a stage's ranks have finished their last op, the stage
 * waits straggler_share x its compute time (per replica) for the job's slowest GPU, an op of its
 * own on the all-reduce stream (SIM_OP_STRAGGLER), before its gradient collective.
 *
 * With D > 1 replicas each stage all-reduces its gradients (allreduce_ms[s], a ring over the
 * stage's replicas): one collective per stage, starting when the slowest replica of the stage has
 * finished its last op; then every rank of the stage runs its optimizer step (optimizer_ms[s]);
 * the iteration ends when every stage has finished that. With grad_ms[s] > 0 that much of the
 * collective (the gradients' reduction, COST_OVERLAP_DP) overlaps instead the stage's last compute
 * op, the last micro-batch's backward (or W), which fills grad_buckets[s] equal buckets one after
 * another (DDP's buckets, in reverse layer order): bucket j of k is ready at start + j * d / k
 * (start and d = end - start over the slowest replicas), and the buckets are reduced in order on
 * a stream of their own (sim_grad_overlap_end). The rest of the collective follows the stage's
 * last op as before. The overlapped end is never before the compute's end and never after the
 * serial one.
 *
 * A plan that cannot finish (the queue empties with instructions left) is DP_ERR_DEADLOCK with
 * the waiting instructions named; the simulator never hangs. The simulator expects a plan that
 * passed plan_validate; a negative duration (a W larger than its backward) is still refused,
 * naming the instruction, rather than run.
 */
#ifndef SIM_H
#define SIM_H

#include <stdint.h>

#include "../models/hw.h"
#include "../scheduler/plan.h"
#include "engine.h"

typedef struct sim_config {
    const cluster_spec *hw;
    int pp, chunks, dp;
    int tp;                          /* GPUs per rank (tp x cp), for placement (models/mesh.h:
                                      * a rank's GPUs are one block, the ranks in plan order) */
    double wire_scale;               /* bytes a link moves per plan byte (0 or 1: as planned;
                                      * 1/cp: each context-parallel GPU sends its share) */
    double state_mb[STAGE_MAX];      /* model state per stage, MB */
    double weights_mb[STAGE_MAX], grads_mb[STAGE_MAX], optimizer_mb[STAGE_MAX]; /* its parts */
    double mem_limit_mb;             /* device memory for the OOM check, MB */
    double allreduce_ms[STAGE_MAX];  /* end-of-iteration collective per stage (0 when dp == 1):
                                      * ZeRO 0/1 the gradients' all-reduce (ZeRO-1: reduce-
                                      * scatter + all-gather, the same ring volume), ZeRO-2 the
                                      * updated parameters' all-gather, ZeRO-3 none */
    double optimizer_ms[STAGE_MAX];  /* the optimizer step per stage, after that collective */
    double grad_ms[STAGE_MAX];       /* of allreduce_ms, the gradients' reduction that overlaps the
                                      * stage's last backward (0: all of it runs after) */
    int grad_buckets[STAGE_MAX];     /* buckets it is reduced in (>= 1 where grad_ms > 0) */
    /* ZeRO-2/3's per-micro-batch collectives inside the plan's forward and backward times
     * (stage_model.zero_fwd_ms, zero_bwd_ms), the layers they spread over and whether they are
     * prefetched: not simulated (the times hold them), for dpsim validate to re-price them at
     * the bytes a runtime moved (scheduler/stage_cost.h stage_zero_rescaled) */
    double zero_fwd_ms[STAGE_MAX], zero_bwd_ms[STAGE_MAX];
    int zero_layers[STAGE_MAX], zero_prefetch;
    int zero_stage;   /* 0..3, and whether a MoE's experts exchange tokens across replicas
                       * (stage_cost.h stage_experts_span): where the replicas meet (microbatch.h
                       * mb_replicas_meet, above) */
    int experts_span;
    int pair_exchange; /* COST_OVERLAP_EP: a MoE's token exchange overlaps a paired micro-batch's
                        * compute (pairs, above); 0: serial, the upper bound */
    double straggler_share; /* the wait for the job's slowest GPU, as a share of each stage's
                             * compute time (models/straggler.h straggler_share of the cluster's
                             * gpu_jitter over every GPU of the job); 0: none */
    double peak_share_max; /* the most FLOP/s a GPU of the run can do over hw's bf16 peak: 1, or
                            * under fp8 its FP8 peak over the bf16 one (0 reads as 1): the bound
                            * planner/study.h checks MFU and HFU against */
} sim_config;

/* The bucketed reduction of grad_ns over k buckets filled evenly during a compute op from start
 * to end (ns): when the last bucket is reduced, max(end + grad/k, start + (end - start)/k + grad)
 * (the buckets run back to back once the first is ready, or each waits for its gradients), and in
 * *first_ns when the first bucket starts. */
int64_t sim_grad_overlap_end(int64_t start, int64_t end, int64_t grad_ns, int buckets,
                             int64_t *first_ns);

/* One executed operation, for timelines: compute ops, and transfers (recorded on the sender as
 * SEND_* and on the receiver as RECV_*, both with the transfer's start and end). */
#define SIM_OP_ALLREDUCE OP_COUNT      /* sim_op.op of a stage's gradient all-reduce (dp > 1) */
#define SIM_OP_OPTIMIZER (OP_COUNT + 1) /* sim_op.op of a stage's optimizer step */
#define SIM_OP_STRAGGLER (OP_COUNT + 2) /* sim_op.op of a stage's wait for the slowest GPU */

typedef struct sim_op {
    int iteration;
    int stage, replica;
    plan_op op;               /* or SIM_OP_ALLREDUCE */
    int mb, chunk;
    int64_t start_ns, end_ns; /* absolute simulated time */
    const plan_mb *mb_info;   /* the micro-batch (its shape, tokens, predictions); NULL for the
                               * all-reduce. Valid during the callback. */
    const plan_iter *iter;    /* the iteration (its sample ids); valid during the callback */
} sim_op;

/* A memory change on a stage (for memory-over-time figures and Chrome counters). */
typedef struct sim_mem {
    int stage, replica;
    int64_t t_ns;
    double mb; /* activation MB held after the change (model state excluded) */
} sim_mem;

typedef struct sim_sink {
    void (*on_op)(void *ctx, const sim_op *op);   /* may be NULL */
    void (*on_mem)(void *ctx, const sim_mem *m);  /* may be NULL */
    void *ctx;
} sim_sink;

typedef struct sim_iter_result {
    int64_t makespan_ns;          /* from t0 to the end of the last all-reduce */
    int64_t pipeline_ns;          /* from t0 to the end of the last compute or transfer: the
                                   * pipeline's own makespan, before the gradient collective and
                                   * the optimizer step that follow it */
    int64_t busy_ns[STAGE_MAX];   /* compute busy time per stage (mean over replicas) */
    double peak_mb[STAGE_MAX];    /* model state + peak activations, max over replicas */
    double stored_at_peak_mb[STAGE_MAX], transient_at_peak_mb[STAGE_MAX]; /* the peak's activations:
                                   * stored, and the running op's transient, at that moment */
    int oom;                      /* some stage's peak exceeds mem_limit_mb */
    uint64_t events;              /* events processed (every one handled) */
    int64_t op_ns[4];             /* time per op type over every rank: F, B, W, transfers */
} sim_iter_result;

typedef struct sim {
    engine eng;
    void *scratch; /* per-run buffers, reused between iterations */
    size_t scratch_cap;
} sim;

void sim_init(sim *s);
void sim_release(sim *s);

/* Simulates one iteration starting at t0_ns. */
dp_status sim_iteration(sim *s, const sim_config *cfg, const plan_iter *it, int64_t t0_ns,
                        const sim_sink *sink, sim_iter_result *res, dp_err *err);

#endif /* SIM_H */
