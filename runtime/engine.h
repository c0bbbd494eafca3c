/*
 * engine.h — what both of dprun's executors do alike, written once: the chunks a rank runs and
 * their layers' parameters as every layout trains them, and the order of a chunk's layer passes
 * (a forward, a backward with its recompute, the weight gradients) around the device's own
 * operations. runtime/exec.c runs them on CPU ranks (MPI, host doubles), runtime/exec_gpu.c on
 * GPUs (CUDA streams, NCCL); each supplies the operations (rt_pass_ops) and the buffers, and this
 * module decides which layer runs when and into which buffer.
 *
 * The chunk of virtual stage v (rt_chunk_plan_of): its layers as placement.h places them (and its
 * embedding, head, T5 decoder role), the whole layer's shape (rt_layer_shape_of: GPT causal, T5
 * encoder bidirectional, T5 decoder with cross-attention) and this rank's share of it (tp, a
 * mixture of experts' ep over the tp group, cp: runtime/layout.h rt_layer_shape_tp). A layer's
 * parameters are the whole layer's as tp 1 initialises them (rt_layer_seed: by its index in its
 * component), of which the rank takes its share: every layout trains the same numbers, so the
 * fp64 gradient norms of the same samples agree across layouts and backends.
 *
 * The passes, over a chunk of L layers (rt_pass_forward, rt_pass_backward, rt_pass_weights):
 *   forward   layer l reads the previous layer's output (layer 0: x) and writes y when it is the
 *             last, else scratch a (l even) or b (l odd); before it, the device waits for layer
 *             l's parameters and starts gathering layer l + 1's (ZeRO-3's prefetch, one layer
 *             ahead: gather(0), then gather_wait(l), gather(l + 1)), and keeps its input where
 *             full recompute reruns it from (keep_input); L = 0: y is a copy of x;
 *   backward  last layer first: gather_wait(l), gather(l - 1), whatever the plan machine's
 *             recompute rule reruns before the layer's gradients (rerun), the input gradients from
 *             the next layer's (layer L - 1: dy) into dx when l is even, else the scratch, and
 *             with `weights` the layer's weight gradients right after (as autograd orders them; a
 *             full-recompute B always has them); L = 0: dx is a copy of dy;
 *   weights   ZB-H1's W: each layer's weight gradients, last first.
 * x, y, a and b (and dy, dx and the scratch) are distinct buffers of one activation each; the
 * device's operations take them as its own pointers (host doubles or device memory). A device
 * without ZeRO-3 makes gather and gather_wait do nothing.
 *
 * The gradients (rt_grads_*): which collective runs on which block, and when, around the device's
 * collectives (rt_grad_ops, on a chunk k's layer l):
 *   partial sums   the parameters whose gradient each tp rank holds a part of (layout.h
 *                  rt_param_grad_group: the norms' under SP, a MoE layer's router and experts),
 *                  summed over their group: before each ZeRO reduce-scatter, else at the end;
 *   ZeRO-2/3       after each B or W that completes a chunk's gradients, each layer's block
 *                  reduce-scattered over the shard ranks and added to this rank's shard;
 *   the end        over the replicas (and cp ranks), by the ZeRO stage (rt_zero_layer_end): the
 *                  whole gradients all-reduced (0), the parameters gathered from the shards (2),
 *                  nothing (3); under HSDP each shard with the other shard groups'.
 * Nothing here fails: the operations report their faults as their executor does.
 */
#ifndef RT_ENGINE_H
#define RT_ENGINE_H

#include <stddef.h>

#include "../models/model.h"
#include "../models/placement.h"
#include "../scheduler/plan.h"
#include "layout.h"

/* The chunk of a virtual stage on this rank. */
typedef struct rt_chunk_plan {
    int v;                 /* its virtual stage */
    stage_placement place; /* what it runs (placement.h) */
    rt_layer_shape whole;  /* one of its layers whole (tp 1) */
    rt_layer_shape shape;  /* this rank's share of it: tp, ep (over the tp group), cp */
    int layers;            /* its layers (a T5 decoder chunk's decoder layers) */
    size_t count;          /* parameters of one layer here (doubles) */
} rt_chunk_plan;

/* The chunk of virtual stage v (of pp x chunks) of plan header h on model m. */
rt_chunk_plan rt_chunk_plan_of(const plan_header *h, const model_spec *m, int v);

/* Layer l's parameters on tp rank tp_rank of h's layout, as every layout trains them (the whole
 * layer initialised by its seed, this rank's share of it), into mine (c->count doubles). 0, or -1
 * when out of host memory (mine untouched). */
int rt_chunk_layer_params(const rt_chunk_plan *c, const plan_header *h, int tp_rank, int l,
                          double *mine);

/* The tied embedding's rows of tp rank tp_rank (rows x hidden = n doubles: its vocab / tp rows, as
 * every layout fills them). */
void rt_embedding_rows(double *rows, size_t n, int tp_rank);

/* A device's operations on one (micro-batch, chunk): ctx is the executor's. */
typedef struct rt_pass_ops {
    void (*gather)(void *ctx, int l);      /* ZeRO-3: start gathering layer l's parameters */
    void (*gather_wait)(void *ctx, int l); /* ... and have them before layer l computes */
    void (*keep_input)(void *ctx, int l, const void *x); /* full recompute: layer l's input */
    void (*forward)(void *ctx, int l, const void *x, void *y);
    void (*rerun)(void *ctx, int l);                   /* what the B reruns first */
    void (*backward_input)(void *ctx, int l, const void *dy, void *dx);
    void (*backward_weight)(void *ctx, int l);
    void (*copy)(void *ctx, void *dst, const void *src); /* one activation */
} rt_pass_ops;

void rt_pass_forward(const rt_pass_ops *o, void *ctx, int layers, const void *x, void *y, void *a,
                     void *b);
void rt_pass_backward(const rt_pass_ops *o, void *ctx, int layers, int weights, const void *dy,
                      void *dx, void *scratch);
void rt_pass_weights(const rt_pass_ops *o, void *ctx, int layers);

/* What a stage does with each layer after an iteration, by its ZeRO stage (exec.h rt_zero_stage;
 * the tied embedding's gradient is all-reduced whatever it is): 0 all-reduces the whole gradients
 * (ZeRO-0, and 1 without an optimizer step); 2 all-gathers the parameters, where the shards'
 * optimizer would have stepped them; 3 nothing (its gathers come with the next forward). */
typedef enum { RT_END_ALLREDUCE_GRADS, RT_END_GATHER_PARAMS, RT_END_NOTHING } rt_layer_end;
rt_layer_end rt_zero_layer_end(int zero_stage);

/* A device's collectives on chunk k's layer l (its gradient block, its shards); ctx is the
 * executor's. */
typedef struct rt_grad_ops {
    /* elements [off, off + len) of the gradient block summed over group (RT_GRAD_SUM_TP or
     * RT_GRAD_SUM_EXPERTS), in place */
    void (*sum_group)(void *ctx, int k, int l, size_t off, size_t len, int group);
    /* ZeRO-2/3: the block reduce-scattered over the shard ranks, this rank's part added to its
     * gradient shard, the block zeroed */
    void (*reduce_scatter)(void *ctx, int k, int l);
    void (*allreduce)(void *ctx, int k, int l);     /* the block over the replicas and cp ranks */
    void (*gather_params)(void *ctx, int k, int l); /* ZeRO-2: the parameters from the shards */
    void (*across)(void *ctx, int k, int l);        /* HSDP: the gradient shard with the other
                                                     * shard groups'; NULL: the device has none */
} rt_grad_ops;

/* Chunk k's partial sums (shape: its layers' share here, over a tp group of t, sp: sequence
 * parallel). */
void rt_grads_partial(const rt_grad_ops *o, void *ctx, int k, const rt_layer_shape *shape,
                      int layers, int t, int sp);
/* ZeRO-2/3 after a B or W of chunk k: its partial sums, then each layer's reduce-scatter. */
void rt_grads_zero_reduce(const rt_grad_ops *o, void *ctx, int k, const rt_layer_shape *shape,
                          int layers, int t, int sp);
/* The end of the iteration for chunk k over the replicas, by ZeRO stage zero (rt_zero_stage's:
 * 0 where it does not shard); with hsdp, each shard with the other shard groups' too. The partial
 * sums without ZeRO are the caller's first (rt_grads_partial), on every chunk, replicas or not. */
void rt_grads_replicas(const rt_grad_ops *o, void *ctx, int k, int layers, int zero, int hsdp);

#endif /* RT_ENGINE_H */
