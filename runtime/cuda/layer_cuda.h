/*
 * layer_cuda.h — the layers of runtime/layer.h on an NVIDIA GPU, at either element type of
 * runtime/layout.h:
 *   fp64  cuBLAS DGEMMs and plain CUDA kernels, step by step as layer.c, so that the two backends
 *         agree to rounding (the exact check of the executor and of the GPU's arithmetic);
 *   bf16  training precision (cuda/layer_bf16.cu): GEMMs on cuBLASLt (bf16 operands, fp32
 *         accumulation, the bias in the epilogue, weight gradients accumulated in fp32),
 *         attention on cuDNN's fused scaled-dot-product attention (forward and backward; causal
 *         for GPT and T5's decoder, bidirectional for T5's encoder and its cross-attention; only
 *         the softmax's log-sum-exp is saved), layer norm and GELU kernels in bf16 with fp32
 *         statistics, fp32 master weights with a bf16 working copy. Where cuDNN cannot build the
 *         attention graph on this GPU, attention runs on cuBLASLt batched GEMMs and a softmax
 *         kernel instead, with the same saved state (the probabilities recomputed from the
 *         log-sum-exp in the backward): rt_cuda_attention_path says which ran.
 * Tensor sizes, layouts and byte counts at each type are layout.h's; a layer's type is its
 * rt_cuda_layer.dtype, and every buffer handed to it holds elements of that type.
 *
 * Built only where nvcc, cuBLAS(Lt) and cuDNN are found (the Makefile defines DPRUN_CUDA). All
 * pointers are device pointers; every call is asynchronous on the stream of the context.
 * Status: compiled on the development machines (no GPU there); the executor's use of it is
 * tested on a host fake (tests/unit/fake_cuda.c); `dprun check-gpu` checks it on a GPU
 * (make check-gpu).
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
/* The device's name as its driver reports it ("NVIDIA H200"), into buf. */
void rt_cuda_device_name(rt_cuda *g, char *buf, size_t cap);
/* How many CUDA devices this process sees (0 when none, or no driver). */
int rt_cuda_device_count(void);

/* Device memory, in bytes, and synchronous copies (for set-up and checks). NULL / -1 on failure. */
void *rt_cuda_alloc(size_t bytes);
void rt_cuda_free(void *p);
int rt_cuda_put(void *dst, const void *src, size_t bytes);
int rt_cuda_get(void *dst, const void *src, size_t bytes);

/* Host staging (runtime/cuda_host.c; synchronous, for set-up and checks): a device parameter block
 * (rt_param_block_bytes) packed from `count` host doubles, and n activation elements of type dt
 * from host doubles (NULL on failure, rt_cuda_free releases them); n activation elements, or a
 * gradient block of `count` elements, read back as host doubles (0, or -1). */
void *rt_cuda_params_new(const double *host, size_t count, rt_dtype dt);
/* The same block followed by `room` zeroed bytes (ZeRO's gathers land whole shards there). */
void *rt_cuda_params_new_room(const double *host, size_t count, rt_dtype dt, size_t room);
void *rt_cuda_acts_new(const double *host, size_t n, rt_dtype dt);
int rt_cuda_acts_get(double *host, const void *dev, size_t n, rt_dtype dt);
int rt_cuda_grads_get(double *host, const void *dev, size_t count, rt_dtype dt);

/* ---- tensor and context parallelism on the device --------------------------------------------- */

/* What a collective's elements are: doubles, floats, or bf16. A layer's activations at dt are
 * rt_elem_act's (fp64: doubles; bf16: bf16), its statistics and gradients rt_elem_stat's
 * (doubles; floats). */
typedef enum { RT_ELEM_F64, RT_ELEM_F32, RT_ELEM_BF16 } rt_elem;
static inline rt_elem rt_elem_act(rt_dtype dt) { return dt == RT_BF16 ? RT_ELEM_BF16 : RT_ELEM_F64; }
static inline rt_elem rt_elem_stat(rt_dtype dt) { return dt == RT_BF16 ? RT_ELEM_F32 : RT_ELEM_F64; }
static inline size_t rt_elem_bytes(rt_elem e) { return e == RT_ELEM_F64 ? 8 : e == RT_ELEM_F32 ? 4 : 2; }

/* The tensor-parallel group a device layer runs in: runtime/layer.h rt_tp's split (the layer's
 * shape is the rank's, rt_layer_shape_tp), its collective points and its sequence-parallel rule
 * (with sp the layer's input and output are this rank's B*S / size consecutive tokens, the
 * norms' parameter gradients sums over them, which the caller all-reduces), on the device. The
 * caller supplies the collectives, enqueued on g's stream (dprun: NCCL on the group's
 * communicator; the host fake: MPI): the sum (op RT_TP_SUM) or maximum (RT_TP_MAX) of n
 * elements over the group, in place; every rank's n elements, concatenated by rank; the sum of
 * n * size elements, of which this rank keeps its n. A hook that fails ends the job (the other
 * ranks would wait in theirs). NULL, or size 1: no TP. A context-parallel group has the same
 * hooks (its sp is not read), as layer.h's rt_cp takes an rt_tp. */
typedef struct rt_cuda_tp {
    int size, rank, sp;
    void (*allreduce)(void *ctx, rt_cuda *g, void *buf, size_t n, rt_elem e, int op);
    void (*allgather)(void *ctx, rt_cuda *g, const void *mine, void *all, size_t n, rt_elem e);
    void (*reduce_scatter)(void *ctx, rt_cuda *g, const void *all, void *mine, size_t n, rt_elem e);
    void *ctx;
} rt_cuda_tp;

/* One layer on the device: a parameter block of `count` parameters laid out as layout.h says for
 * dtype (rt_param_block_bytes; fill it with rt_param_block_pack and rt_cuda_put), or, for a
 * layer's gradients, a gradient block (rt_grad_block_bytes). The shape says which layer: GPT
 * (causal), T5 encoder (bidirectional) or T5 decoder (causal, with cross-attention to the
 * encoder output). */
typedef struct rt_cuda_layer {
    rt_layer_shape shape;
    rt_dtype dtype;
    void *block; /* device */
    size_t count;
    const rt_cuda_tp *tp; /* the tensor-parallel group it runs in (NULL: none); x, y, dx and dy
                           * then hold rt_cuda_tp_tokens(tp, B*S) tokens. GPT-kind layers only. */
    const rt_cuda_tp *cp_group; /* the context-parallel group's all-gather and reduce-scatter, for
                                 * a micro-batch with a map (rt_batch.cp, layer.h rt_cp; the shape's
                                 * cp its size): the layer then holds the map's n_local tokens (of
                                 * which TP with SP its share), gathers the group's keys and values
                                 * for attention and returns their gradients to their ranks; bf16
                                 * attention then runs on the GEMM path (cuDNN's masks are not the
                                 * pieces'). GPT-kind layers only. */
} rt_cuda_layer;

/* The tokens a rank's layer input and output hold of n: n / size with SP, else n. */
static inline int rt_cuda_tp_tokens(const rt_cuda_tp *tp, int n)
{
    return tp && tp->size > 1 && tp->sp ? n / tp->size : n;
}

/* Forward of one layer on the micro-batch mb (runtime/layer.h rt_batch: B rows of S tokens, and
 * the sequences attention runs within): x, y (B*S, H; under CP and TP with SP this rank's tokens)
 * of the layer's type; acts is a device block of rt_layer_acts_bytes(shape, B, S, Se, dtype)
 * laid out as rt_layer_acts_layout says. A cross
 * layer reads the encoder output enc (B*Se, H), which must stay untouched until its backward;
 * other layers ignore enc (NULL). mb and its sequences are host memory, read during the call. */
void rt_cuda_layer_fwd(rt_cuda *g, const rt_cuda_layer *p, const rt_batch *mb, const void *x,
                       void *y, void *acts, const void *enc);
/* Input gradient (and layer-norm parameter gradients) into dx and grad (a gradient block of the
 * same type); a cross layer adds the gradient of the encoder output into denc (B*Se, H) when
 * denc is not NULL. */
void rt_cuda_layer_bwd_input(rt_cuda *g, const rt_cuda_layer *p, rt_cuda_layer *grad,
                             const rt_batch *mb, const void *dy, void *dx, void *acts, void *denc);
/* Selective recompute (scheduler/plan_machine.h pm_recompute): the layer's attention cores
 * again (self, and a cross layer's) from the projections its saved activations hold, rewriting
 * their output and softmax state (fp64: the probabilities; bf16: the log-sum-exp, through the
 * same attention path as the forward) with the values the forward saved. */
void rt_cuda_layer_recompute_attention(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb,
                                       void *acts);
/* runtime/layer.h rt_layer_rerun on the device (runtime/cuda_host.c): what a backward under
 * recompute mode rc reruns before the layer's gradients (full: the forward from the kept input x
 * into acts, its output to the scratch y; selective: rt_cuda_layer_recompute_attention). 1 when
 * it reran something. */
int rt_cuda_layer_rerun(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb, recompute_mode rc,
                        const void *x, void *y, void *acts, const void *enc);
/* Weight gradients of the linear ops into grad (a cross layer's read enc again). */
void rt_cuda_layer_bwd_weight(rt_cuda *g, rt_cuda_layer *grad, const rt_batch *mb,
                              const void *acts, const void *enc);

/* Mean forward and backward time of one layer on the micro-batch mb (B rows of S tokens; a cross
 * layer against an encoder output of Se per row; varlen when mb has sequences) over `repeats`
 * runs after a warm-up, by CUDA events, on synthetic inputs; the backward under recompute mode rc
 * (rt_cuda_layer_rerun first, as the executor's). 0, or -1. */
int rt_cuda_time_layer(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb, recompute_mode rc,
                       int repeats, double *fwd_ms, double *bwd_ms);
/* Mean time of one GEMM C (M x N) = A (M x K) B (K x N) at dtype (bf16: cuBLASLt, fp32
 * accumulation; fp64: cuBLAS), over `repeats` runs: the library's own rate on a layer's shapes,
 * for check-gpu's comparison. 0, or -1. */
int rt_cuda_time_gemm(rt_cuda *g, int M, int N, int K, rt_dtype dt, int repeats, double *ms);
/* Which bf16 attention runs: RT_ATTN_AUTO (cuDNN's fused attention where cuDNN builds it, else
 * the GEMM path; the default, or DPRUN_ATTENTION=gemm in the environment for RT_ATTN_GEMM) or
 * RT_ATTN_GEMM (always the GEMM path). check-gpu checks both. */
enum { RT_ATTN_AUTO, RT_ATTN_GEMM };
void rt_cuda_set_attention(rt_cuda *g, int mode);
/* What the last bf16 attention backward and the forward before it ran on: "forward cudnn-sdpa,
 * backward cudnn-sdpa", or gemm-softmax for either with why cuDNN was not used; "none" before any
 * bf16 attention backward ran. */
const char *rt_cuda_attention_path(rt_cuda *g);
/* Builds every descriptor of the cuDNN attention graphs a bf16 attention on mb runs, forward and
 * backward — self-attention (cross 0: causal or not) or a decoder's cross-attention to the
 * encoder's tokens (cross 1), a query heads on g key/value heads (g = a: no grouping) of width d
 * (the layer's matrices: layout.h), as whole rows (the backward also under the padding mask
 * older cuDNN versions get on rows) or in the ragged form of mb's sequences — and has cuDNN
 * finalise each one, which checks their types, shapes and attributes
 * on the host. It stops before the operation graph, whose finalisation needs a device: no GPU is
 * used, so the unit tests run it where there is none. 0 when cuDNN accepted them all; -1 with
 * why (the descriptor, cuDNN's status and message). */
int rt_cuda_sdpa_check_descriptors(const rt_batch *mb, int a, int g, int d, int causal, int cross,
                                   char *why, size_t why_cap);

/* ---- for the plan executor (runtime/exec_gpu.c) ------------------------------------------- */

/* The slow first calls g has made so far: cuBLASLt GEMM configurations and cuDNN attention
 * graphs built (one per shape not seen before; a refused one counts too), and small host arrays
 * uploaded (runtime/dev_cache.h). The executor compares them around its measured runs. */
typedef struct rt_cuda_firsts {
    long gemm_plans, attn_graphs, uploads;
} rt_cuda_firsts;
void rt_cuda_firsts_of(rt_cuda *g, rt_cuda_firsts *f);

/* Timing events (opaque); elapsed milliseconds between two completed events. */
void *rt_cuda_event_new(void);
void rt_cuda_event_free(void *e);
void rt_cuda_event_record(rt_cuda *g, void *e);
/* Later work on g's stream waits for e (recorded on any stream of the device). */
void rt_cuda_wait_event(rt_cuda *g, void *e);
double rt_cuda_event_ms(void *from, void *to);

/* Asynchronous device-to-device copy and zeroing of `bytes` bytes, and a deterministic
 * pseudo-random fill of n elements of type dt, in [-scale/2, scale/2) (RT_FILL_VALUE: the
 * embedding lookup of a micro-batch's tokens), on g's stream. */
void rt_cuda_copy(rt_cuda *g, void *dst, const void *src, size_t bytes);
void rt_cuda_zero(rt_cuda *g, void *v, size_t bytes);
/* dst += src over n gradient elements of a layer of type dt (doubles for fp64, floats for bf16:
 * rt_grad_block_bytes), on g's stream: a ZeRO shard adding a micro-batch's reduced gradients. */
void rt_cuda_add_grads(rt_cuda *g, void *dst, const void *src, size_t n, rt_dtype dt);
void rt_cuda_fill(rt_cuda *g, void *v, size_t n, rt_dtype dt, unsigned seed, double scale);
/* The same from value `first` of the fill on (v[i] = RT_FILL_VALUE(first + i, ...)): a rank's
 * share of a fill, as layer.h rt_fill_at. */
void rt_cuda_fill_at(rt_cuda *g, void *v, size_t n, size_t first, rt_dtype dt, unsigned seed,
                     double scale);

/* The tied LM head and softmax cross-entropy of runtime/exec.c at type dt: logits = out emb^T
 * (n x V, a device scratch of rt_dtype_stat_bytes elements: fp32 for bf16), dlogits = d(mean
 * loss)/d(logits) (of type dt) for targets (i * 7919 + target_offset) % V. emb is a parameter
 * block of V*H elements (rt_param_block_bytes). Under context parallelism (cp, the micro-batch's
 * map, else NULL) the n tokens are the rank's: token i's target is its whole micro-batch index's
 * and the loss the mean over all n * cp tokens (layer.h rt_lm_head_fwd_tp). Under tensor
 * parallelism (tp, else NULL) the head is split by vocabulary as rt_lm_head_fwd_tp splits it:
 * emb holds this rank's V / size rows, logits and dlogits (n, V / size) its columns, the
 * softmax's maximum and sum all-reduced over the group; out is whole (n tokens). */
void rt_cuda_lm_head_fwd(rt_cuda *g, const rt_cuda_tp *tp, const rt_cp *cp, const void *out,
                         const void *emb, void *logits, void *dlogits, int n, int H, int V,
                         int target_offset, rt_dtype dt);
/* dout = dlogits emb (under TP the group's sum, rt_tp_reduce's: with SP this rank's n / size
 * tokens of it); demb (a gradient block of V*H, under TP this rank's rows) += dlogits^T out. */
void rt_cuda_lm_head_bwd(rt_cuda *g, const rt_cuda_tp *tp, const void *dlogits, const void *emb,
                         const void *out, void *dout, void *demb, int n, int H, int V,
                         rt_dtype dt);
/* Mean forward and backward time of the LM head and loss on n tokens over `repeats` runs. */
int rt_cuda_time_head(rt_cuda *g, int n, int H, int V, rt_dtype dt, int repeats, double *fwd_ms,
                      double *bwd_ms);

#ifdef __cplusplus
}
#endif

#endif /* RT_LAYER_CUDA_H */
