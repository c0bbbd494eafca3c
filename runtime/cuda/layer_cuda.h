/*
 * layer_cuda.h — the CPU layer of runtime/layer.h on an NVIDIA GPU: cuBLAS GEMMs and CUDA kernels,
 * the same pre-LN blocks (GPT, T5 encoder and decoder), fp64 as on the CPU so that the two
 * backends agree to rounding.
 *
 * Built only where nvcc and cuBLAS are found (the Makefile defines DPRUN_CUDA). All pointers are
 * device pointers; every call is asynchronous on the stream of the context. Status: compiled on
 * the development machines (no GPU there); `dprun check-gpu` compares it with the CPU layer and
 * is what a GPU machine runs first (make check-gpu).
 */
#ifndef RT_LAYER_CUDA_H
#define RT_LAYER_CUDA_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "../layer.h"

typedef struct rt_cuda rt_cuda; /* a cuBLAS handle bound to a stream */

/* Opens device `device` with a new stream; NULL (and a message in why) when it cannot. */
rt_cuda *rt_cuda_open(int device, char *why, size_t why_cap);
void rt_cuda_close(rt_cuda *g);
/* Waits for the stream; returns 0, or -1 with the CUDA error in why. */
int rt_cuda_sync(rt_cuda *g, char *why, size_t why_cap);

/* 1 when everything enqueued on the stream has finished, 0 while it runs, -1 (message in why)
 * on a CUDA error: for waiting with a timeout. */
int rt_cuda_query(rt_cuda *g, char *why, size_t why_cap);
/* The cudaStream_t of g (for NCCL, runtime/cuda/nccl_link.c). */
void *rt_cuda_stream(rt_cuda *g);
/* How many CUDA devices this process sees (0 when none, or no driver). */
int rt_cuda_device_count(void);

/* Device memory (doubles) and copies (synchronous, for set-up and checks). */
double *rt_cuda_alloc(size_t n);
void rt_cuda_free(double *p);
int rt_cuda_put(double *dst, const double *src, size_t n);
int rt_cuda_get(double *dst, const double *src, size_t n);

/* One layer's device parameters: a block of `count` doubles laid out as rt_layer_params. The
 * shape says which layer: GPT (causal), T5 encoder (bidirectional) or T5 decoder (causal, with
 * cross-attention to the encoder output). */
typedef struct rt_cuda_layer {
    rt_layer_shape shape;
    double *block; /* device */
    size_t count;
} rt_cuda_layer;

/* Forward of one layer on (B, S): x, y (B*S, H); acts is a device block of
 * rt_layer_acts_doubles(shape, B, S, Se) laid out as rt_layer_acts (runtime/layer.c). A cross
 * layer reads the encoder output enc (B*Se, H), which must stay untouched until its backward;
 * other layers ignore enc and Se (NULL, 0). */
void rt_cuda_layer_fwd(rt_cuda *g, const rt_cuda_layer *p, int B, int S, const double *x,
                       double *y, double *acts, const double *enc, int Se);
/* Input gradient (and layer-norm parameter gradients) into dx and grad; a cross layer adds the
 * gradient of the encoder output into denc (B*Se, H) when denc is not NULL. */
void rt_cuda_layer_bwd_input(rt_cuda *g, const rt_cuda_layer *p, rt_cuda_layer *grad, int B,
                             int S, const double *dy, double *dx, double *acts, int Se,
                             double *denc);
/* Weight gradients of the linear ops into grad (a cross layer's read enc again). */
void rt_cuda_layer_bwd_weight(rt_cuda *g, rt_cuda_layer *grad, int B, int S, const double *acts,
                              const double *enc, int Se);

/* Mean forward and backward time of one layer on (B, S) (a cross layer: against an encoder
 * output of length Se) over `repeats` runs, by CUDA events. */
int rt_cuda_time_layer(rt_cuda *g, const rt_cuda_layer *l, int B, int S, int Se, int repeats,
                       double *fwd_ms, double *bwd_ms);

/* ---- for the plan executor (runtime/exec_gpu.c) ------------------------------------------- */

/* Timing events (opaque); elapsed milliseconds between two completed events. */
void *rt_cuda_event_new(void);
void rt_cuda_event_free(void *e);
void rt_cuda_event_record(rt_cuda *g, void *e);
/* Later work on g's stream waits for e (recorded on any stream of the device). */
void rt_cuda_wait_event(rt_cuda *g, void *e);
double rt_cuda_event_ms(void *from, void *to);

/* Asynchronous device-to-device copy, and a deterministic pseudo-random fill in [-scale/2,
 * scale/2) (the embedding lookup of a micro-batch's tokens), on g's stream. */
void rt_cuda_copy(rt_cuda *g, double *dst, const double *src, size_t n);
void rt_cuda_fill(rt_cuda *g, double *v, size_t n, unsigned seed, double scale);
void rt_cuda_zero(rt_cuda *g, double *v, size_t n);

/* The tied LM head and softmax cross-entropy of runtime/exec.c: logits = out emb^T (n x V, a
 * device scratch), dlogits = d(mean loss)/d(logits) for targets (i * 7919 + target_offset) % V. */
void rt_cuda_lm_head_fwd(rt_cuda *g, const double *out, const double *emb, double *logits,
                         double *dlogits, int n, int H, int V, int target_offset);
/* dout = dlogits emb; demb += dlogits^T out. */
void rt_cuda_lm_head_bwd(rt_cuda *g, const double *dlogits, const double *emb, const double *out,
                         double *dout, double *demb, int n, int H, int V);
/* Mean forward and backward time of the LM head and loss on n tokens over `repeats` runs. */
int rt_cuda_time_head(rt_cuda *g, int n, int H, int V, int repeats, double *fwd_ms,
                      double *bwd_ms);

#ifdef __cplusplus
}
#endif

#endif /* RT_LAYER_CUDA_H */
