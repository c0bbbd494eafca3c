/*
 * comm.h — communication time: point-to-point between stages, and the collectives of tensor and
 * data parallelism as NCCL runs them.
 *
 * A collective of `bytes` (the whole buffer: what is all-reduced, the gathered result of an
 * all-gather, the input of a reduce-scatter) over a group of n GPUs takes, by nccl-tests' own
 * definitions (doc/PERFORMANCE.md: busBW = algBW x factor, algBW = bytes / time):
 *
 *   time = steps x latency + bytes x factor / busBW
 *
 *   collective      factor        steps        (ring algorithms; Patarasuk & Yuan 2009)
 *   all-reduce      2(n-1)/n      2(n-1)
 *   all-gather      (n-1)/n       n-1
 *   reduce-scatter  (n-1)/n       n-1
 *   all-to-all      (n-1)/n       n-1
 *   send/recv       1             1
 *
 * busBW is the link's rate times NCCL's achieved share of it (cluster_spec.coll_eff, measured by
 * nccl-tests; models/hw.c cites each figure):
 *   inside a node    intra_gbit x coll_eff[intra]
 *   across nodes     min(inside, inter_gbit x coll_eff[inter] x nics)
 * where nics is the NIC bandwidth the group gets at its busiest node (comm_group): a node's NICs
 * (rails) are shared by the GPUs there whose groups cross nodes at the same time, each GPU using
 * at most one, so a group with m members in a node gets m x min(1, nics_per_node / crossing GPUs)
 * NICs there. With tp 8 each of a node's 8 GPUs runs its own data-parallel ring on its own NIC;
 * two rings sharing one NIC take twice as long as one.
 * An all-reduce inside a node with NVLink SHARP (gpu_spec.nvls_eff > 0: H100 and later) moves the
 * buffer once each way through the switch: bytes / (intra_gbit x nvls_eff) + COMM_NVLS_LATENCY_US,
 * when that is faster than the ring (NCCL picks the faster algorithm).
 * An all-reduce across nodes (cluster_spec.nccl_tree) takes NCCL's tree where that is faster: a
 * chain of the group's p members inside each node and a double binary tree over its N nodes, as
 * NCCL's own cost model prices it (src/graph/tuning.cc: ncclTopoTuneModel's tree latency
 * 2((p - 1) x intra + floor(log2 N) x inter) and bandwidth, 0.92 of the link's, carrying the
 * buffer twice (its ratio .5); ncclTopoGetAlgoTime's treeCorrectionFactor by size):
 *   tree = 2((p - 1) x intra_latency + floor(log2 N) x inter_latency)
 *          + 2 bytes / (busBW x comm_tree_bw_share(bytes))
 * so the ring's 2(n-1) steps of latency stop growing with the GPUs where the buffer is small next
 * to them (a bucket over thousands of GPUs), and the ring keeps large buffers.
 *
 * Activation bytes between stages: what crosses (placement.h placement_act_elems) in fp16/bf16.
 * A transfer is a send/recv between the two stages' GPUs, each pair carrying its share
 * (placement_wire_share) side by side.
 */
#ifndef COMM_H
#define COMM_H

#include "hw.h"
#include "mesh.h"
#include "model.h"

#define COMM_ACT_ELEM_BYTES 2 /* fp16/bf16 activations and gradients */
#define COMM_NVLS_LATENCY_US 23.0 /* NCCL's NVLS base latency (src/graph/tuning.cc) */
#define COMM_TREE_BW_SHARE 0.92   /* NCCL's tree all-reduce bandwidth over the link's (tuning.cc) */

/* Bytes of one activation (or its gradient) sent from `stage` to the next, for a micro-batch. */
double comm_act_bytes(const model_spec *m, int stage, int stages, int mbs, int enc_len,
                      int dec_len);
/* The same as a transfer's byte count in a plan (rounded): what a schedule writes and what the
 * validator requires (plan_check_model). */
int64_t comm_transfer_bytes(const model_spec *m, int stage, int stages, int mbs, int enc_len,
                            int dec_len);

/* Time of one point-to-point transfer between GPUs a and b (send/recv: NVLink inside a node, one
 * NIC between nodes). */
double comm_p2p_ms(const cluster_spec *c, int gpu_a, int gpu_b, double bytes);

/* The GPUs of one collective and what they share. */
typedef struct comm_group {
    int n;           /* GPUs in the group */
    int spans_nodes; /* 1: over the NICs */
    double nics;     /* across nodes: NICs' worth of bandwidth at the busiest node (above) */
    int per_node;    /* members on one node (n inside a node) */
} comm_group;

/* A group inside one node, or spread one GPU per node over n nodes with a NIC each (per_node
 * 1). */
comm_group comm_group_flat(int n, int spans_nodes);
/* A group of n GPUs whose members are `stride` apart in the placement (GPUs g, g + stride, ...:
 * a context-parallel ring of the same tensor-parallel rank has stride tp), where every GPU of a
 * node is in one such group and all run their collective at once: what each group gets. Inside
 * a node when n x stride GPUs fit in one; else over the NICs, which the groups crossing a node
 * share: each has m = max(1, gpus_per_node / stride) members on a node, gpus_per_node / m
 * groups cross it together, so each gets nics_per_node x m / gpus_per_node NICs' worth (at most
 * its m members' own: a rail per GPU). */
comm_group comm_strided_group(const cluster_spec *c, int n, int stride);
/* The groups of kind k of layout m (from mesh_of) as comm_strided_group counts them: their size
 * and the distance between consecutive members in the mesh's placement (a tensor-parallel group:
 * tp GPUs 1 apart, inside a node unless tp exceeds it; a context-parallel ring: cp GPUs tp apart).
 * For the kinds of one dimension (MESH_TP, MESH_CP, MESH_PP, MESH_DP), whose members are evenly
 * spaced. */
comm_group comm_mesh_group(const cluster_spec *c, const mesh *m, mesh_kind k);
/* The data-parallel group of pipeline stage `stage` of layout m (from mesh_of): its dp replicas,
 * one ring per tensor- and context-parallel rank, on the GPUs the mesh places them (models/mesh.h:
 * Megatron's order, gpus_per_node consecutive GPUs to a node). Every stage's rings are counted as
 * crossing at once (the end-of-iteration reductions of the stages overlap), the slowest of the
 * stage's rings is returned (n = dp; a caller reducing over dp x cp sets n). */
comm_group comm_dp_group(const cluster_spec *c, const mesh *m, int stage);

/* The groups of `size` GPUs `stride` apart among the GPUs of pipeline stage `stage` of layout m,
 * flattened in the mesh's order within a stage (tp fastest, then cp, then the replicas; size x
 * stride = tp x cp x dp): the data-parallel rings (size dp, stride tp x cp: comm_dp_group) and a
 * MoE's expert-data-parallel groups (size tp x cp x dp / (ep x etp), stride ep x etp: an expert
 * rank is ep x etp consecutive GPUs). What the slowest of the stage's groups gets at its busiest
 * node, every stage's groups crossing at once (as comm_dp_group counts them). */
comm_group comm_stage_group(const cluster_spec *c, const mesh *m, int size, int stride, int stage);

/* NCCL's tree bandwidth over the link's for an all-reduce of `bytes` (Simple protocol):
 * COMM_TREE_BW_SHARE times tuning.cc's correction for the size (0.5 to 0.9 from 64 B to 256 MB,
 * 1 beyond). */
double comm_tree_bw_share(double bytes);
/* g with n members instead: a group of the same GPUs grown or cut (a data-parallel ring widened
 * to dp x cp, or cut to a shard group), its members a node scaled with it (at least 1, at most
 * n; n inside a node). What a caller resizing a group uses, so the tree counts its nodes. */
comm_group comm_group_resized(comm_group g, int n);

/* Time of collective k of bytes over group g, ms (0 for a group of one). */
double comm_coll_ms(const cluster_spec *c, hw_coll k, const comm_group *g, double bytes);

/* nccl-tests' bus-bandwidth factor of collective k over n ranks: the share of the message's bytes
 * each rank's link carries (all-reduce 2(n-1)/n; all-gather, reduce-scatter and all-to-all
 * (n-1)/n of the whole; send/receive 1), so that busBW = factor x bytes / time is comparable
 * across collectives and group sizes. */
double comm_busbw_factor(hw_coll k, int n);
/* NCCL's bus bandwidth of collective k over group g, GB/s (what nccl-tests would print). */
double comm_busbw_gbps(const cluster_spec *c, hw_coll k, const comm_group *g);

/* What ZeRO stage `zero` moves for a device holding `bytes` of 16-bit parameters and
 * `grad_bytes` of gradients as they are reduced (twice `bytes` in fp32: cost.h grad_reduce) over
 * its shard group g (the ZeRO paper, §7; DeepSpeed), and, under hybrid sharding (HSDP: FSDP's
 * HYBRID_SHARD, Megatron's distributed-optimizer instances), the all-reduce of its gradient
 * shard (grad_bytes / g->n) with the same shard of the other shard groups, over `replicas` (NULL
 * or n <= 1: none, every GPU of the data-parallel group in g):
 *   fwd_ms   before every micro-batch's forward: ZeRO-3's parameter all-gather
 *   bwd_ms   with every micro-batch's backward: ZeRO-2 and 3's gradient reduce-scatter, and
 *            ZeRO-3's parameter all-gather again
 *   iter_ms  at the end of the iteration: ZeRO 0 the gradients' all-reduce, ZeRO-1 their
 *            reduce-scatter and the updated parameters' all-gather, ZeRO-2 that all-gather,
 *            ZeRO-3 nothing; and with replicas, the shards' all-reduce across them
 *   grad_ms  the part of iter_ms that reduces gradients (ZeRO 0's all-reduce, ZeRO-1's
 *            reduce-scatter, the replicas' all-reduce): what may overlap the last backward
 *            (sim.h)
 * All 0 with one GPU in the data-parallel group. */
typedef struct zero_comm {
    double fwd_ms, bwd_ms, iter_ms, grad_ms;
} zero_comm;
zero_comm comm_zero(const cluster_spec *c, int zero, const comm_group *g,
                    const comm_group *replicas, double bytes, double grad_bytes);

#endif /* COMM_H */
