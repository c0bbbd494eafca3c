/*
 * nccl_link.h — NCCL communicators for dprun's multi-GPU mode (runtime/exec_gpu.c): one rank
 * per GPU, activations and gradients over ncclSend/ncclRecv, replicas' gradients over
 * ncclAllReduce, ZeRO's and tensor parallelism's collectives.
 *
 * Built where nccl.h is found (the Makefile defines DPRUN_NCCL); MPI is initialised. Every call
 * that creates a communicator is collective over MPI_COMM_WORLD, in the same order on every
 * rank. Transfers and reductions are asynchronous on the stream of `g` (runtime/cuda/layer_cuda.h)
 * and keep NCCL's rule: the operations of one communicator run in the order they are enqueued,
 * and the two ranks of a send and its receive enqueue them in the same order.
 *
 * Status: compiled on the development machines (no GPU there). The executor's use of it is
 * tested over MPI by a host fake (tests/unit/fake_cuda.c); `make check-gpu` runs it for real on a
 * machine with two GPUs or more.
 */
#ifndef RT_NCCL_LINK_H
#define RT_NCCL_LINK_H

#include <stddef.h>

#include "layer_cuda.h"

typedef struct rt_nccl rt_nccl; /* a communicator and this rank's place in it */

/* The communicator of every rank of MPI_COMM_WORLD, on the device `g` opened: rank 0 creates
 * the ncclUniqueId and MPI_Bcast hands it out. 0, or -1 with NCCL's message in why. */
int rt_nccl_world(rt_cuda *g, rt_nccl **world, char *why, size_t why_cap);
/* A sub-communicator of `world` (ncclCommSplit) of the ranks that pass the same color >= 0,
 * ranked by key; *sub is NULL on a rank that passes color < 0. Collective over world. 0, or -1
 * with NCCL's message in why. */
int rt_nccl_split(rt_nccl *world, int color, int key, rt_nccl **sub, char *why, size_t why_cap);
void rt_nccl_free(rt_nccl *c);

/* `bytes` bytes to / from rank `peer` of c, on g's stream (activations and gradients of any
 * element type travel as bytes); 0, or -1 with NCCL's message in why. */
int rt_nccl_send(rt_nccl *c, const void *buf, size_t bytes, int peer, rt_cuda *g, char *why,
                 size_t why_cap);
int rt_nccl_recv(rt_nccl *c, void *buf, size_t bytes, int peer, rt_cuda *g, char *why,
                 size_t why_cap);
/* In-place sum (op RT_TP_SUM, layer.h) or maximum (RT_TP_MAX) over every rank of c, on g's
 * stream, of n elements of kind e (layer_cuda.h rt_elem: a layer's gradients are
 * rt_elem_stat(dt)'s, its activations rt_elem_act(dt)'s). */
int rt_nccl_allreduce(rt_nccl *c, void *buf, size_t n, rt_elem e, int op, rt_cuda *g, char *why,
                      size_t why_cap);
/* ZeRO's and tensor parallelism's other collectives over every rank of c, on g's stream: the
 * all-gather of `bytes` bytes from each rank into recv (bytes x ranks, in rank order; parameters
 * and activations travel as bytes), and the reduce-scatter that sums n x ranks elements of kind
 * e at send over the ranks and leaves rank r's n of the sum, elements [r n, (r + 1) n), in recv. */
int rt_nccl_allgather(rt_nccl *c, const void *send, void *recv, size_t bytes, rt_cuda *g,
                      char *why, size_t why_cap);
int rt_nccl_reduce_scatter(rt_nccl *c, const void *send, void *recv, size_t n, rt_elem e,
                           rt_cuda *g, char *why, size_t why_cap);

#endif /* RT_NCCL_LINK_H */
