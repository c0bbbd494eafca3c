/*
 * exec.h — dprun's plan executors: the tp x cp ranks of each (stage, replica) run its instruction
 * list together (rt_place below).
 *
 * Semantics are the plan machine's (scheduler/plan_machine.h: what each instruction waits for,
 * whether a B leaves its weight gradients to a W, which rank and chunk a transfer meets), stepped
 * by the one executor loop (exec_loop.h) that both backends run, each with its own medium. The
 * cpu backend's, on real processes:
 *   RECV_*   MPI_Irecv into a buffer sized from the plan's micro-batch shape (posted, not waited);
 *   F, B, W  wait only for the receive they consume (polling, so a stall past --timeout is caught),
 *            then run the real layers of the stage's chunk on the CPU backend (runtime/layer.h):
 *            F the forward (plus embedding on the first virtual stage, LM head and loss on the
 *            last), B the input gradients (and the weight gradients unless the rank is split),
 *            W the weight gradients; B first reruns what the iteration's recompute mode says
 *            (plan_machine.h pm_recompute, layer.h rt_layer_rerun): under full, F keeps only
 *            each layer's input and B reruns layer by layer;
 *   SEND_*   MPI_Isend of the produced activation or gradient (overlaps what follows: the
 *            layer calls back between its GEMMs and the executor drives MPI's progress there);
 *   FREE     releases the slot's buffers; those a send still reads go once it completes (never
 *            waits there: a receiver may post later than the plan's untimed order suggests).
 * Transfers: the plan's bytes count act_dtype elements (2 bytes). The CPU layer computes and
 * moves fp64, 8 bytes per element; the cuda backend bf16 (2 bytes: the plan's bytes exactly) or,
 * with --dtype fp64, 8 (rt_opts.dtype, runtime/layout.h). dprun records the size in the measured
 * timeline (column wire_elem_bytes) so that dpsim validate simulates the bytes really moved.
 * Every instruction is timestamped (MPI_Wtime from a barrier at the start of each iteration).
 * With D > 1 replicas (or cp > 1 ranks), each stage all-reduces its gradients across them after
 * an iteration; under ZeRO-2/3 (both backends) each keeps a shard instead: ZeRO-3 all-gathers a
 * layer's parameters before its forward and backward, one layer ahead, ZeRO-2 and 3 reduce-scatter
 * each micro-batch's gradients at the end of the B (or W) that completes them, ZeRO-2 all-gathers
 * the parameters after the iteration (where an optimizer would have stepped its shard); every
 * collective inside the op that waits for it, as the stage model prices them (models/comm.h); the
 * cuda backend prefetches ZeRO-3's gathers on a stream of their own (exec_gpu.c).
 *
 * Failure never hangs a job: a wait that passes the timeout, a message larger than the plan's
 * shape (the ranks disagree on the plan), or a compute error prints a message naming the rank,
 * host, iteration and instruction, then MPI_Abort ends every rank.
 *
 * GPT plans, and T5 plans on at least two stages without interleaving: the first half of the
 * stages run encoder layers (bidirectional), the second half decoder layers (causal self-attention
 * and cross-attention to the encoder output, which travels along with the decoder's hidden
 * state, its gradient coming back the same way).
 *
 * rt_execute_gpu (exec_gpu.c, built with CUDA) is the cuda backend, the same plans, in two modes:
 *   single-GPU  one process runs every stage on one GPU, a CUDA stream per stage, CUDA events for
 *               the transfers (dp 1; NCCL refuses two ranks on one GPU, so one GPU needs this);
 *   multi-GPU   one MPI rank per GPU and (stage, replica, tp rank), placed as rt_place says,
 *               activations and gradients over ncclSend/ncclRecv on a stream per link, replicas'
 *               gradients over ncclAllReduce, a tp group's collectives inside its layers on its
 *               own communicator (built where nccl.h is found).
 * CUDA events time every instruction; the records are the same.
 */
#ifndef RT_EXEC_H
#define RT_EXEC_H

#include <stdint.h>

#include "../models/mesh.h"
#include "../models/model.h"
#include "../scheduler/plan.h"
#include "layer.h"
#include "layout.h"

#define RT_OP_ALLREDUCE (-1) /* a record's op for the replicas' gradient all-reduce ("ALLREDUCE") */
/* An executor's recording of a run: off, or RT_RECORD_ON + r for the r-th measured run of an
 * iteration (its rows' repeat r, rt_opts.repeats). */
enum { RT_RECORD_OFF, RT_RECORD_ON };

/* One measured operation (the timeline CSV row). */
typedef struct rt_record {
    int32_t iteration, stage, replica, op, mb, chunk;
    int32_t repeat; /* which measured run of the iteration: 0, 1, … (rt_runs_of) */
    double start_us, end_us;
} rt_record;

typedef struct rt_opts {
    const plan *pl;
    const model_spec *model;
    double timeout_s;  /* a wait longer than this aborts the job */
    int warmup;        /* unrecorded runs of the first iteration */
    int iterations;    /* 0: all of the plan's */
    int stall_rank;    /* fault injection for tests: this rank sleeps stall_s before iteration 0 */
    double stall_s;
    int repeat_first;  /* run the first iteration once more right after it, recorded with
                        * repeat = 1: the machine's noise, which dpsim validate reports */
    rt_dtype dtype;    /* what the layers compute in and the transfers carry (layout.h): the cpu
                        * backend runs fp64 only; the cuda backend either (bf16 by default) */
    int prepare;       /* cuda backend: run every iteration once, unrecorded, right before its
                        * measured run (the first not again after a warm-up): cuBLASLt and cuDNN
                        * build a plan on the first call of each shape (slow), and the small
                        * arrays of the calls go to the device (runtime/dev_cache.h), so a
                        * micro-batch shape first seen in a later iteration would otherwise time
                        * that work. The cpu backend has no such plans and ignores it. dprun sets
                        * it unless --no-prepare. */
    int repeats;       /* measured runs of every iteration, one after another (rows' repeat 0 ..
                        * repeats - 1): dpsim validate compares each iteration's median and
                        * reports their spread as the machine's noise band; < 1: 1 */
} rt_opts;

/* What a run leaves: the measured operations, and the sum of squares of the parameter gradients
 * this process holds at the end (the layers of its stages, and the tied embedding's on the last
 * stage, of the last iteration run: gradients are zeroed at the start of every iteration, so
 * warm-up runs change nothing): the same plan on the same model gives the same figure on every
 * backend, to rounding, which is how the backends' numerics are compared. */
/* Measured runs of plan iteration i (by index): rt_opts.repeats, and at least 2 for the first
 * when repeat_first asks for the noise repeat (exec_loop.h rt_loop_runs runs them). */
static inline int rt_runs_of(const rt_opts *o, int i)
{
    int runs = o->repeats > 1 ? o->repeats : 1;
    return i == 0 && o->repeat_first && runs < 2 ? 2 : runs;
}

typedef struct rt_result {
    rt_record *rec; /* malloc'd */
    size_t n_rec;
    double grad_sq;
    /* cuda backend: slow first calls made inside the measured runs (so timed) by this process's
     * stages: cuBLASLt GEMM configurations and cuDNN attention graphs built for a shape not seen
     * before, and small host arrays put on the device (runtime/dev_cache.h). 0 when the prepare
     * pass did them all; the cpu backend has none. */
    long timed_gemm_plans, timed_attn_graphs, timed_uploads;
    /* what this process's backwards recomputed in the measured runs (plan_machine.h
     * pm_recompute): layer forwards rerun under full recompute, attention cores under selective */
    long rerun_layers, rerun_attention;
} rt_result;

/* A micro-batch's token sequences on one side (runtime/layer.h rt_seqs), from the plan: with
 * varlen attention each sample's own tokens (plan_iter.lens: the encoder's, GPT's, or with dec
 * the decoder's) back to back from token 0, in *store (2 ints per sample, malloc'd; the caller
 * frees it); without varlen s->n is 0 and the layers attend over whole rows (pass NULL).
 * Returns 0, or -1 when out of host memory. */
int rt_mb_seqs(const plan_iter *it, const plan_mb *m, int dec, rt_seqs *s, int **store);
/* Every varlen micro-batch of the plan gives its samples' lengths (plans written before the
 * runtime ran varlen attention do not): DP_OK, or DP_ERR_INVALID naming the first that does not. */
dp_status rt_plan_check_lens(const plan *pl, const char *path, dp_err *err);

/* Where a process sits in a plan's layout, as the mesh places it (models/mesh.h: tensor-parallel
 * ranks fastest, as Megatron orders them, then context-parallel ranks, then a stage's replicas,
 * then the stages); group = replica * pp + stage is the plan's rank index (plan_iter.ranks). The
 * tp x cp ranks of a group run the group's instructions together, each tp rank with its share of
 * every layer (runtime/layout.h rt_layer_shape_tp), each cp rank with its share of every
 * micro-batch's tokens (runtime/layer.h rt_cp); a transfer goes between the same (cp, tp) rank of
 * two groups. */
typedef struct rt_place {
    int group, stage, replica, tp_rank, cp_rank;
} rt_place;
static inline int rt_plan_tp(const plan_header *h) { return h->tp > 1 ? h->tp : 1; }
static inline int rt_plan_cp(const plan_header *h) { return h->cp > 1 ? h->cp : 1; }
static inline int rt_plan_ep(const plan_header *h) { return h->ep > 1 ? h->ep : 1; }
/* ZeRO as the executors run it: the plan's stage where it shards a stage's `ranks` ranks (2 or 3
 * over two or more; else 0: whole gradients all-reduced after the iteration), and the elements
 * of one rank's shard of a layer of `count` parameters (the last one padded). */
static inline int rt_zero_stage(const plan_header *h, int ranks)
{
    return h->zero >= 2 && ranks > 1 ? h->zero : 0;
}
static inline size_t rt_zero_shard(size_t count, int ranks)
{
    return (count + (size_t)ranks - 1) / (size_t)ranks;
}
/* The plan's layout as a mesh: tp x cp x pp x dp ranks. */
static inline mesh rt_plan_mesh(const plan_header *h)
{
    return mesh_of(rt_plan_tp(h), rt_plan_cp(h), h->pp, h->dp);
}
static inline rt_place rt_place_of(const plan_header *h, int world_rank)
{
    mesh m = rt_plan_mesh(h);
    mesh_coord c = mesh_place(&m, world_rank);
    rt_place p = {mesh_group_index(&m, c), c.stage, c.replica, c.tp_rank, c.cp_rank};
    return p;
}
/* The index in the whole micro-batch of token t of the n a rank's first layer reads (every layout
 * fills the input embedding of a token by that index, so that all train on the same numbers):
 * under SP (shards > 1) its tp rank's n consecutive tokens of its cp rank's, under CP the cp
 * rank's pieces (cp: the micro-batch's map, or NULL). */
static inline int rt_input_token(const rt_cp *cp, int shards, int tp_rank, int n, int t)
{
    return rt_cp_token(cp, (shards > 1 ? tp_rank * n : 0) + t);
}

/* Whether a process records the timeline's rows: the first rank of its tp x cp group (the group's
 * ranks run its instructions together; one row per instruction). */
static inline int rt_rank_records(int tp_rank, int cp_rank) { return tp_rank == 0 && cp_rank == 0; }
/* The world rank of (tp_rank, cp_rank) of the plan's rank index `group`. */
static inline int rt_world_rank(const plan_header *h, int group, int cp_rank, int tp_rank)
{
    mesh m = rt_plan_mesh(h);
    mesh_coord c = {tp_rank, cp_rank, group % h->pp, group / h->pp};
    return (int)mesh_rank(&m, c);
}

/* Whether the runtime runs the plan's layout as planned on `ranks` processes of the cpu backend
 * (on_gpu 0) or the cuda backend (1): pp x dp x tp x cp ranks (the cuda backend also 1 for a tp 1
 * plan: every stage on one GPU); tensor parallelism on both backends, for GPT-kind models, with t
 * dividing the heads, the key/value heads, the MLP width and the vocabulary, and under sequence
 * parallelism every micro-batch's tokens; context parallelism on both in the ring form, for
 * GPT-kind models, with 2 cp dividing every piece of every micro-batch (rt_cp_split) and tp (with
 * SP) its share; ZeRO-2 and 3 across a stage's replicas and cp ranks where every replica of a
 * stage runs the same sequence of F, B and W (their collectives meet in order); a mixture of
 * experts on the cpu backend (rt_check_moe). DP_OK, or DP_ERR_UNSUPPORTED /
 * DP_ERR_INVALID naming what is missing and the rank counts: a plan is refused, never run as
 * another layout. The same answer on every rank. */
dp_status rt_plan_check_layout(const plan *pl, const model_spec *m, int ranks, int on_gpu,
                               const char *path, dp_err *err);
/* The part of it that is the model's: tensor parallelism of degree tp (GPT-kind layers, tp
 * dividing the heads, key/value heads, MLP width and vocabulary); where names the plan or command
 * in the message. dprun profile --tp asks it too. */
dp_status rt_check_tp(const model_spec *m, int tp, const char *where, dp_err *err);
/* A mixture of experts as the cpu backend runs it (layer.h "Experts"): a GPT-kind model whose
 * every layer is a MoE one of routed experts only (no shared expert, no dense first layers, no
 * biases on the router or the experts, no latent attention), with expert parallelism folded over
 * the tensor-parallel group (ep dividing tp; the planner may fold it over replicas too, which the
 * runtime does not run). A dense model passes. DP_ERR_UNSUPPORTED naming the field otherwise, and
 * for any mixture of experts on the cuda backend (on_gpu). */
dp_status rt_check_moe(const model_spec *m, int ep, int tp, int on_gpu, const char *where, dp_err *err);

/* Runs the plan on this rank (MPI is initialised). Fails (without aborting) only on set-up
 * problems that every rank detects alike; run-time faults abort. */
dp_status rt_execute(const rt_opts *o, rt_result *res, dp_err *err);

/* The cuda backend. One process (size of MPI_COMM_WORLD 1): the single-GPU mode, which returns
 * device failures, an out-of-memory iteration and a plan that deadlocks. Several: the multi-GPU
 * mode, where set-up failures are returned on every rank (naming the rank that failed) and
 * run-time faults abort as in rt_execute. After a failure res holds nothing. DP_ERR_UNSUPPORTED in a build without CUDA (or
 * without NCCL, for several ranks). */
dp_status rt_execute_gpu(const rt_opts *o, rt_result *res, dp_err *err);

#endif /* RT_EXEC_H */
