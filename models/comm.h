/*
 * comm.h — communication time: point-to-point between stages and ring all-reduce across replicas.
 *
 *   p2p_ms        = latency + bytes / bandwidth            (Hockney's alpha-beta model)
 *   allreduce_ms  = 2(n-1) * latency + 2(n-1)/n * bytes / bandwidth   (ring; Patarasuk & Yuan 2009)
 *   allgather_ms = reduce_scatter_ms = (n-1) * latency + (n-1)/n * bytes / bandwidth  (half a ring
 *                  all-reduce: bytes is the whole gathered or reduced buffer; NCCL's ring)
 *
 * The link is intra-node when both ranks sit in one node (rank / gpus_per_node equal), else
 * inter-node; a ring that spans nodes runs at the inter-node link.
 *
 * Activation bytes between stages: a GPT stage sends (mbs, seq, hidden) fp16; a T5 encoder stage
 * sends its hidden state (mbs, enc, hidden); a T5 decoder stage sends the decoder hidden state
 * (mbs, dec, hidden) and passes the encoder output (mbs, enc, hidden) along too. Gradients going
 * back have the same sizes.
 */
#ifndef COMM_H
#define COMM_H

#include "hw.h"
#include "model.h"

#define COMM_ACT_ELEM_BYTES 2 /* fp16/bf16 activations and gradients */

/* Bytes of one activation (or its gradient) sent from `stage` to the next, for a micro-batch. */
double comm_act_bytes(const model_spec *m, int stage, int stages, int mbs, int enc_len,
                      int dec_len);
/* The same as a transfer's byte count in a plan (rounded): what a schedule writes and what the
 * validator requires (plan_check_model). */
int64_t comm_transfer_bytes(const model_spec *m, int stage, int stages, int mbs, int enc_len,
                            int dec_len);

/* Time of one point-to-point transfer between global ranks a and b. */
double comm_p2p_ms(const cluster_spec *c, int rank_a, int rank_b, double bytes);

/* Ring all-reduce of bytes across n ranks; spans_nodes selects the inter-node link. */
double comm_allreduce_ms(const cluster_spec *c, int n, int spans_nodes, double bytes);
/* Ring all-gather (or reduce-scatter) of a bytes buffer across n ranks. */
double comm_allgather_ms(const cluster_spec *c, int n, int spans_nodes, double bytes);

/* What ZeRO stage `zero` moves for a device holding `bytes` of fp16 parameters (and as many
 * gradient bytes) over its dp replicas (the ZeRO paper, §7; DeepSpeed), with spans_nodes as
 * comm_dp_spans_nodes says:
 *   fwd_ms   before every micro-batch's forward: ZeRO-3's parameter all-gather
 *   bwd_ms   with every micro-batch's backward: ZeRO-2 and 3's gradient reduce-scatter, and
 *            ZeRO-3's parameter all-gather again
 *   iter_ms  at the end of the iteration: ZeRO 0 and 1 the gradients' all-reduce (ZeRO-1 as a
 *            reduce-scatter and an all-gather of the updated parameters: the same ring volume),
 *            ZeRO-2 the updated parameters' all-gather, ZeRO-3 nothing
 * All 0 with one replica. The per-micro-batch terms run on the compute stream, not overlapped. */
typedef struct zero_comm {
    double fwd_ms, bwd_ms, iter_ms;
} zero_comm;
zero_comm comm_zero(const cluster_spec *c, int zero, int dp, int spans_nodes, double bytes);

/* Whether the data-parallel group of pipeline stage `stage` spans nodes. Placement: rank
 * r = replica * pp + stage holds GPUs r * tp .. r * tp + tp - 1 (tensor parallelism innermost,
 * then the pipeline, then the replicas: Megatron's order), gpus_per_node to a node. */
int comm_dp_spans_nodes(const cluster_spec *c, int pp, int dp, int tp, int stage);
/* Whether a tensor-parallel group spans nodes (tp > gpus_per_node). */
int comm_tp_spans_nodes(const cluster_spec *c, int tp);

#endif /* COMM_H */
