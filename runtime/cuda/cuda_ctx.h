// cuda_ctx.h — private to runtime/cuda/: the context behind rt_cuda (layer_cuda.h) and the
// helpers its two layer implementations share (layer_cuda.cu: fp64; layer_bf16.cu: bf16).
#ifndef RT_CUDA_CTX_H
#define RT_CUDA_CTX_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cudnn.h>

#include "layer_cuda.h"
#include "../dev_cache.h"

#define THREADS 256
#define LT_WORKSPACE_BYTES (32u << 20) // cuBLASLt's workspace (what its heuristics may use)
#define LT_CACHE 2048                  // GEMM configurations kept (descriptors, chosen algorithm):
                                       // about 12 a layer kind per token count, so a varlen
                                       // iteration's micro-batches fit
#define SDPA_CACHE 256                 // cuDNN attention graphs kept (per shape and direction)
#define DNN_WHY_BYTES 160              // why cuDNN was not used: rt_cuda.dnn_why, per cached graph
#define SMALL_ENTRIES 4096             // small host arrays kept on the device (rt_cuda.small)
#define SMALL_BYTES (64u << 20)        // and their device bytes at most
#define POOL_KEEP_BYTES (2ull << 30)   // what cudaMallocAsync's pool keeps between synchronisations

struct lt_plan;   // layer_bf16.cu: one cached cuBLASLt GEMM configuration
struct sdpa_plan; // sdpa_cudnn.cu: one cached cuDNN attention graph

struct rt_cuda {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;   // fp64 GEMMs
    cublasLtHandle_t lt;   // bf16 GEMMs
    void *lt_ws;           // LT_WORKSPACE_BYTES of device memory
    cudnnHandle_t dnn;     // NULL when cuDNN could not start (the attention falls back)
    char dnn_why[DNN_WHY_BYTES];     // why cuDNN is not used, once known
    struct lt_plan *lt_cache;
    int n_lt;
    long lt_built;         // GEMM configurations built so far (rt_cuda_firsts_of)
    struct sdpa_plan *sdpa_cache;
    int n_sdpa;
    long sdpa_built;       // attention graphs built so far
    void *sdpa_ws;         // cuDNN's workspace, grown on demand
    size_t sdpa_ws_bytes;
    char attn_path[300];   // rt_cuda_attention_path
    int attn_mode;         // RT_ATTN_AUTO or RT_ATTN_GEMM (layer_cuda.h rt_cuda_set_attention)
    int last_fwd_cudnn;    // the last bf16 attention forward ran on cuDNN
    char fail[200];        // a failure found while enqueueing (no cuBLASLt algorithm): reported
                           // by the next rt_cuda_sync or rt_cuda_query
    rt_dev_cache small;    // the calls' small host arrays on the device, one upload per content
                           // (runtime/dev_cache.h: ragged offsets, RoPE positions, row lengths)
};

// What one bf16 attention call reads and writes: sequence j of the queries qs attends to
// sequence j of the keys ks (runtime/layer.h rt_seqs; rows: they are B whole rows of sq and sk
// tokens, which cuDNN's fused attention takes as a batch; otherwise cuDNN takes the sequences
// in its ragged form, runtime/ragged.h), a query heads and g key/value heads (g divides a) of
// width d; q (rows of ldq elements), o (rows of a*d), query head h at column h*d; k and v (rows
// of ldkv), key/value head rt_kv_head(h, a, g) at column rt_kv_head(h, a, g)*d; lse, fp32, the
// log-sum-exp of each query's scaled, masked scores (natural log), sequence j's (a, lq) block at
// a * qs->off[j] (for rows: (B, a, sq)). Backward: dout in o's layout; dq, dk, dv in q's, k's and
// v's, zeroed by the caller (a path may add to them or overwrite them).
struct attn_io {
    const rt_seqs *qs, *ks;
    int rows, B, sq, sk;
    int a, g, d, causal, ldq, ldkv;
    const __nv_bfloat16 *q, *k, *v;
    __nv_bfloat16 *o;
    float *lse;
    const __nv_bfloat16 *dout;
    __nv_bfloat16 *dq, *dk, *dv;
};

// cuDNN's fused attention (sdpa_cudnn.cu): 0 when it ran the call, -1 when cuDNN has no engine
// for it (g->dnn_why says why; the caller runs the GEMM path instead). Graphs are cached per
// shape; a shape cuDNN refused is not tried again.
int rt_sdpa_fwd(rt_cuda *g, const attn_io *x);
int rt_sdpa_bwd(rt_cuda *g, const attn_io *x);
void rt_sdpa_free(rt_cuda *g);

// Opens and closes the bf16 side of a context (cuBLASLt, its workspace, cuDNN); layer_bf16.cu.
// A failure to start cuDNN is not an error (the attention falls back and says so).
int rt_bf16_open(rt_cuda *g, char *why, size_t why_cap);
void rt_bf16_close(rt_cuda *g);

// The bf16 layer (layer_bf16.cu), behind layer_cuda.h's dispatch on rt_cuda_layer.dtype.
void rt_bf16_layer_fwd(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb, const void *x,
                       void *y, void *acts, const void *enc);
void rt_bf16_layer_recompute_attention(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb,
                                       void *acts);
void rt_bf16_layer_bwd_input(rt_cuda *g, const rt_cuda_layer *l, rt_cuda_layer *grad,
                             const rt_batch *mb, const void *dy, void *dx, void *acts, void *denc);
void rt_bf16_layer_bwd_weight(rt_cuda *g, rt_cuda_layer *grad, const rt_batch *mb,
                              const void *acts, const void *enc);
void rt_bf16_lm_head_fwd(rt_cuda *g, const rt_cuda_tp *tp, const rt_cp *cp, const void *out,
                         const void *emb, void *logits, void *dlogits, int n, int H, int V,
                         int target_offset);
void rt_bf16_lm_head_bwd(rt_cuda *g, const rt_cuda_tp *tp, const void *dlogits, const void *emb,
                         const void *out, void *dout, void *demb, int n, int H, int V);
void rt_bf16_fill(rt_cuda *g, void *v, size_t n, size_t first, unsigned seed, double scale);
int rt_bf16_time_gemm(rt_cuda *g, int M, int N, int K, int repeats, double *ms);

static inline int grid_for(long long n)
{
    long long b = (n + THREADS - 1) / THREADS;
    return (int)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

// Block-wide sum and maximum over THREADS threads, in T (double or float).
template <class T> __device__ inline T block_sum(T v)
{
    __shared__ T buf[THREADS];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] += buf[threadIdx.x + s];
        __syncthreads();
    }
    T r = buf[0];
    __syncthreads();
    return r;
}

template <class T> __device__ inline T block_max(T v)
{
    __shared__ T buf[THREADS];
    buf[threadIdx.x] = v;
    __syncthreads();
    for (int s = THREADS / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) buf[threadIdx.x] = buf[threadIdx.x] > buf[threadIdx.x + s] ? buf[threadIdx.x] : buf[threadIdx.x + s];
        __syncthreads();
    }
    T r = buf[0];
    __syncthreads();
    return r;
}

#define GRID_STRIDE(i, n)                                                                          \
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (n);                  \
         i += (long long)gridDim.x * blockDim.x)

// An element type of the layers and the type its arithmetic runs in: fp64 in double, bf16 in
// float (loaded widened, stored rounded to nearest).
template <class T> struct elem;
template <> struct elem<double> {
    typedef double math;
    static __device__ inline double load(double v) { return v; }
    static __device__ inline double store(double v) { return v; }
};
template <> struct elem<float> { /* fp32: the bf16 layer's gradients and statistics */
    typedef float math;
    static __device__ inline float load(float v) { return v; }
    static __device__ inline float store(float v) { return v; }
};
template <> struct elem<__nv_bfloat16> {
    typedef float math;
    static __device__ inline float load(__nv_bfloat16 v) { return __bfloat162float(v); }
    static __device__ inline __nv_bfloat16 store(float v) { return __float2bfloat16(v); }
};

// The element-wise ops both layers run, once for both types (the CPU layer, layer.c, has the
// same formulas; check-gpu compares them). y += x.
template <class T> __global__ void k_add(T *y, const T *x, long long n)
{
    GRID_STRIDE(i, n) y[i] = elem<T>::store(elem<T>::load(y[i]) + elem<T>::load(x[i]));
}

// GELU, tanh approximation, and its backward du = dg * GELU'(u).
template <class T> __global__ void k_gelu_fwd(const T *u, T *gv, long long n)
{
    typedef typename elem<T>::math M;
    const M c = (M)0.7978845608028654, k = (M)0.044715;
    GRID_STRIDE(i, n)
    {
        M x = elem<T>::load(u[i]);
        gv[i] = elem<T>::store((M)0.5 * x * (1 + tanh(c * (x + k * x * x * x))));
    }
}

template <class T> __global__ void k_gelu_bwd(const T *dg, const T *u, T *du, long long n)
{
    typedef typename elem<T>::math M;
    const M c = (M)0.7978845608028654, k = (M)0.044715;
    GRID_STRIDE(i, n)
    {
        M x = elem<T>::load(u[i]), t = tanh(c * (x + k * x * x * x));
        M d = (M)0.5 * (1 + t) + (M)0.5 * x * (1 - t * t) * c * (1 + 3 * k * x * x);
        du[i] = elem<T>::store(elem<T>::load(dg[i]) * d);
    }
}

// SwiGLU on rows of u (n, 2f) = [gate | up]: g (n, f) = silu(gate) o up; and its backward.
template <class T> __global__ void k_swiglu_fwd(const T *u, T *gv, int f, long long nf)
{
    typedef typename elem<T>::math M;
    GRID_STRIDE(i, nf)
    {
        long long r = i / f, j = i % f;
        M a = elem<T>::load(u[r * 2 * f + j]), b = elem<T>::load(u[r * 2 * f + f + j]);
        gv[i] = elem<T>::store(a / (1 + exp(-a)) * b);
    }
}

template <class T> __global__ void k_swiglu_bwd(const T *dg, const T *u, T *du, int f, long long nf)
{
    typedef typename elem<T>::math M;
    GRID_STRIDE(i, nf)
    {
        long long r = i / f, j = i % f;
        M a = elem<T>::load(u[r * 2 * f + j]), b = elem<T>::load(u[r * 2 * f + f + j]);
        M sg = 1 / (1 + exp(-a)), d = elem<T>::load(dg[i]);
        du[r * 2 * f + j] = elem<T>::store(d * b * sg * (1 + a * (1 - sg)));
        du[r * 2 * f + f + j] = elem<T>::store(d * a * sg);
    }
}

// The column reductions below (bias and norm weight gradients) give a block THREADS columns and
// COL_ROWS rows: each thread sums its column over the rows and adds the partial sum atomically.
// A thread per column over all n rows would leave most of the GPU idle (4,096 columns are 16
// blocks) and serialise each thread's n loads; an atomic add per element (n x columns of them on
// `columns` addresses) would queue at those addresses.
#define COL_ROWS 64

static inline dim3 col_grid(int n, int cols)
{
    long long y = ((long long)n + COL_ROWS - 1) / COL_ROWS;
    int x = (cols + THREADS - 1) / THREADS;
    return dim3(x > 0 ? x : 1, (unsigned)(y < 1 ? 1 : y < 65535 ? y : 65535));
}

// db (out) += column sums of dy (n x out), in the type gradients accumulate in.
template <class T> __global__ void k_colsum(typename elem<T>::math *db, const T *dy, int n, int out)
{
    typedef typename elem<T>::math M;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= out) return;
    for (long long r0 = (long long)blockIdx.y * COL_ROWS; r0 < n; r0 += (long long)gridDim.y * COL_ROWS) {
        long long r1 = r0 + COL_ROWS < n ? r0 + COL_ROWS : n;
        M s = 0;
        for (long long i = r0; i < r1; i++) s += elem<T>::load(dy[i * out + j]);
        atomicAdd(&db[j], s);
    }
}

template <class T>
static void colsum(rt_cuda *g, typename elem<T>::math *db, const T *dy, int n, int out)
{
    k_colsum<T><<<col_grid(n, out), THREADS, 0, g->stream>>>(db, dy, n, out);
}

// The norm of a row (one block per row of h): layer norm y = (x - mean) rstd g + b, or RMSNorm
// (rms) y = x rstd g with rstd = 1 / sqrt(mean(x^2) + eps) and no bias or mean (bt, mean NULL);
// the statistics in the math type (layer.c's rt_layernorm_fwd and rt_rmsnorm_fwd).
template <class T>
__global__ void k_norm_fwd(const T *x, const T *gm, const T *bt, T *y, typename elem<T>::math *mean,
                           typename elem<T>::math *rstd, int h, int rms, double eps)
{
    typedef typename elem<T>::math M;
    const T *xi = x + (long long)blockIdx.x * h;
    M s = 0;
    for (int j = threadIdx.x; j < h && !rms; j += THREADS) s += elem<T>::load(xi[j]);
    M m = rms ? 0 : block_sum(s) / h, v = 0;
    for (int j = threadIdx.x; j < h; j += THREADS) {
        M d = elem<T>::load(xi[j]) - m;
        v += d * d;
    }
    M r = 1 / sqrt(block_sum(v) / h + (M)eps);
    for (int j = threadIdx.x; j < h; j += THREADS)
        y[(long long)blockIdx.x * h + j] = elem<T>::store(
            (elem<T>::load(xi[j]) - m) * r * elem<T>::load(gm[j]) + (rms ? 0 : elem<T>::load(bt[j])));
    if (threadIdx.x == 0) {
        if (!rms) mean[blockIdx.x] = m;
        rstd[blockIdx.x] = r;
    }
}

// Its backward: dx = rstd (dy g - [mean(dy g)] - xhat mean(dy g xhat)), the bracket for layer norm
// only, xhat = (x - [mean]) rstd; one block per row.
template <class T>
__global__ void k_norm_bwd(const T *dy, const T *x, const T *gm, const typename elem<T>::math *mean,
                           const typename elem<T>::math *rstd, T *dx, int h, int rms)
{
    typedef typename elem<T>::math M;
    long long row = blockIdx.x;
    const T *xi = x + row * h, *dyi = dy + row * h;
    M m = rms ? 0 : mean[row], r = rstd[row], a = 0, c = 0;
    for (int j = threadIdx.x; j < h; j += THREADS) {
        M xhat = (elem<T>::load(xi[j]) - m) * r, dxhat = elem<T>::load(dyi[j]) * elem<T>::load(gm[j]);
        a += dxhat;
        c += dxhat * xhat;
    }
    a = rms ? 0 : block_sum(a) / h;
    c = block_sum(c) / h;
    for (int j = threadIdx.x; j < h; j += THREADS) {
        M xhat = (elem<T>::load(xi[j]) - m) * r;
        dx[row * h + j] = elem<T>::store(r * (elem<T>::load(dyi[j]) * elem<T>::load(gm[j]) - a - xhat * c));
    }
}

// The norm's weight gradients, column by column (col_grid): dg += sum over rows of dy xhat, and
// for layer norm db += sum of dy (db NULL for RMSNorm).
template <class T>
__global__ void k_norm_wgrad(const T *dy, const T *x, const typename elem<T>::math *mean,
                             const typename elem<T>::math *rstd, typename elem<T>::math *dg,
                             typename elem<T>::math *db, int n, int h, int rms)
{
    typedef typename elem<T>::math M;
    int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= h) return;
    for (long long r0 = (long long)blockIdx.y * COL_ROWS; r0 < n; r0 += (long long)gridDim.y * COL_ROWS) {
        long long r1 = r0 + COL_ROWS < n ? r0 + COL_ROWS : n;
        M sg = 0, sb = 0;
        for (long long i = r0; i < r1; i++) {
            M d = elem<T>::load(dy[i * h + j]);
            sg += d * (elem<T>::load(x[i * h + j]) - (rms ? 0 : mean[i])) * rstd[i];
            sb += d;
        }
        atomicAdd(&dg[j], sg);
        if (!rms) atomicAdd(&db[j], sb);
    }
}

// The norm of a layer of shape s on n rows, and its backward (one truth with layer.c's rt_norm_*).
template <class T>
static void norm_fwd(rt_cuda *g, const rt_layer_shape *s, const T *x, const T *gm, const T *bt, T *y,
                     typename elem<T>::math *mean, typename elem<T>::math *rstd, int n)
{
    if (n <= 0) return;
    k_norm_fwd<T><<<n, THREADS, 0, g->stream>>>(x, gm, bt, y, mean, rstd, s->hidden, s->rmsnorm,
                                                 rt_layer_norm_eps(s));
}

template <class T>
static void norm_bwd(rt_cuda *g, const rt_layer_shape *s, const T *dy, const T *x, const T *gm,
                     const typename elem<T>::math *mean, const typename elem<T>::math *rstd, T *dx,
                     typename elem<T>::math *dg, typename elem<T>::math *db, int n)
{
    if (n <= 0) return;
    k_norm_bwd<T><<<n, THREADS, 0, g->stream>>>(dy, x, gm, mean, rstd, dx, s->hidden, s->rmsnorm);
    k_norm_wgrad<T><<<col_grid(n, s->hidden), THREADS, 0, g->stream>>>(dy, x, mean, rstd, dg, db, n,
                                                                         s->hidden, s->rmsnorm);
}

// Rotary position embeddings (layer.h rt_rope): the pairs of the first `heads` heads of width d of
// n rows of x (ld elements), token t at position pos[t] (-1: left as it is), or t % S when pos is
// NULL (whole rows of S tokens); inverse turns back. The angle in double, its sine and cosine too.
template <class T>
__global__ void k_rope(T *x, int ld, int heads, int d, double base, const int *pos, int S, long long n,
                       int inverse)
{
    typedef typename elem<T>::math M;
    int half = d / 2;
    GRID_STRIDE(i, n * heads * half)
    {
        long long t = i / ((long long)heads * half);
        int r = (int)(i % ((long long)heads * half)), hd = r / half, j = r % half;
        int p = pos ? pos[t] : (int)(t % S);
        if (p < 0) continue;
        double th = rt_rope_angle(p, j, d, base);
        M c = (M)cos(th), sn = (M)(inverse ? -sin(th) : sin(th));
        T *v = x + t * ld + (long long)hd * d;
        M a = elem<T>::load(v[j]), b = elem<T>::load(v[j + half]);
        v[j] = elem<T>::store(a * c - b * sn);
        v[j + half] = elem<T>::store(b * c + a * sn);
    }
}

// The query sequences of a layer's self-attention on the micro-batch mb (bs: its pass's
// sequences): under context parallelism this rank's pieces (rt_cp.q, with their positions), else
// the batch's own; NULL for whole rows.
static inline const rt_seqs *self_queries(const rt_batch *mb, const rt_batch_seqs *bs)
{
    if (mb->cp && mb->cp->size > 1) return &mb->cp->q;
    return bs->rows ? NULL : &bs->self;
}

// RoPE on the q and k heads of a layer's fused projection qkv (or its gradient, inverse) on the
// n tokens of a pass whose queries are the sequences qs (self_queries): with qs NULL whole rows of
// S, by position in the row; otherwise by position in the sample (rt_seqs_positions, on the device
// through g->small: one upload per micro-batch). Out of memory for the positions is noted in
// g->fail (the next rt_cuda_sync reports it).
template <class T>
static void rope_pass(rt_cuda *g, const rt_layer_shape *s, const rt_seqs *qs, int S, T *qkv, int n,
                      int inverse)
{
    if (n <= 0) return;
    const int *pos = NULL;
    if (qs) {
        int *host = (int *)malloc((size_t)n * sizeof *host);
        if (host) {
            rt_seqs_positions(qs, n, host);
            pos = (const int *)rt_dev_cache_get(&g->small, host, (size_t)n * sizeof *host);
        }
        free(host);
        if (!pos) {
            if (!g->fail[0]) snprintf(g->fail, sizeof g->fail, "out of memory for RoPE positions");
            return;
        }
    }
    int heads = s->heads + rt_layer_kv_heads(s);
    k_rope<T><<<grid_for((long long)n * heads * (s->kv / 2)), THREADS, 0, g->stream>>>(
        qkv, rt_layer_qkv_width(s), heads, s->kv, s->rope_base, pos, S, n, inverse);
}

// The MLP's activation (GELU, or SwiGLU for a gated layer) on n rows, and its backward.
template <class T>
static void mlp_act_fwd(rt_cuda *g, const rt_layer_shape *s, const T *u, T *gv, int n)
{
    long long nf = (long long)n * s->ffn;
    if (s->glu)
        k_swiglu_fwd<T><<<grid_for(nf), THREADS, 0, g->stream>>>(u, gv, s->ffn, nf);
    else
        k_gelu_fwd<T><<<grid_for(nf), THREADS, 0, g->stream>>>(u, gv, nf);
}

template <class T>
static void mlp_act_bwd(rt_cuda *g, const rt_layer_shape *s, const T *dg, const T *u, T *du, int n)
{
    long long nf = (long long)n * s->ffn;
    if (s->glu)
        k_swiglu_bwd<T><<<grid_for(nf), THREADS, 0, g->stream>>>(dg, u, du, s->ffn, nf);
    else
        k_gelu_bwd<T><<<grid_for(nf), THREADS, 0, g->stream>>>(dg, u, du, nf);
}

// ---- tensor parallelism (layer_cuda.h rt_cuda_tp): layer.c's rt_tp_gather, rt_tp_reduce,
// bias_once and vocabulary-parallel head, on the device, for both layers --------------------------
static inline int tp_on(const rt_cuda_tp *tp) { return tp && tp->size > 1; }
static inline int tp_sp(const rt_cuda_tp *tp) { return tp_on(tp) && tp->sp; }
template <class T> static inline rt_elem elem_kind();
template <> inline rt_elem elem_kind<double>() { return RT_ELEM_F64; }
template <> inline rt_elem elem_kind<float>() { return RT_ELEM_F32; }
template <> inline rt_elem elem_kind<__nv_bfloat16>() { return RT_ELEM_BF16; }

// Entering a parallel region: the whole sequence full (n_local * size elements with SP) from this
// rank's n_local (SP: all-gather; otherwise local is already whole: copied unless full is local).
template <class T>
static void tp_gather(rt_cuda *g, const rt_cuda_tp *tp, const T *local, T *full, size_t n_local)
{
    if (tp_sp(tp)) tp->allgather(tp->ctx, g, local, full, n_local, elem_kind<T>());
    else if (full != local)
        cudaMemcpyAsync(full, local, n_local * sizeof(T), cudaMemcpyDeviceToDevice, g->stream);
}

// Leaving one: the ranks' partial sums (n_full elements) added up into local (SP: this rank's
// n_full / size of the sum; otherwise all of it, all-reduced in place in partial and copied
// unless local is partial).
template <class T>
static void tp_reduce(rt_cuda *g, const rt_cuda_tp *tp, T *partial, T *local, size_t n_full)
{
    if (tp_sp(tp)) {
        tp->reduce_scatter(tp->ctx, g, partial, local, n_full / (size_t)tp->size, elem_kind<T>());
        return;
    }
    if (tp_on(tp)) tp->allreduce(tp->ctx, g, partial, n_full, elem_kind<T>(), RT_TP_SUM);
    if (local != partial)
        cudaMemcpyAsync(local, partial, n_full * sizeof(T), cudaMemcpyDeviceToDevice, g->stream);
}

// A row-parallel projection's bias is added once, on rank 0, after the partial sums meet.
template <class T> static const T *bias_once(const rt_cuda_tp *tp, const T *b)
{
    return tp_on(tp) && tp->rank ? NULL : b;
}

// The head's softmax cross-entropy, both layers' (layer.c rt_lm_head_fwd, and under TP
// rt_lm_head_fwd_tp): this rank's logits (n, V / size, of type L: double, or the bf16 head's
// fp32) give dlogits (of type D) = (softmax over the whole vocabulary - onehot(target)) /
// mean_over, under TP the rows' maximum and sum of exponents all-reduced over the group, the
// target (row * 7919 + offset) % V counted on the rank that holds its row of the embedding. One
// block per row.
template <class L> __global__ void k_row_max(const L *l, L *mx, int Vl)
{
    const L *r = l + (long long)blockIdx.x * Vl;
    L m = -INFINITY;
    for (int j = threadIdx.x; j < Vl; j += THREADS) m = r[j] > m ? r[j] : m;
    m = block_max(m);
    if (threadIdx.x == 0) mx[blockIdx.x] = m;
}

template <class L> __global__ void k_row_sumexp(const L *l, const L *mx, L *sum, int Vl)
{
    const L *r = l + (long long)blockIdx.x * Vl;
    L s = 0;
    for (int j = threadIdx.x; j < Vl; j += THREADS) s += exp(r[j] - mx[blockIdx.x]);
    s = block_sum(s);
    if (threadIdx.x == 0) sum[blockIdx.x] = s;
}

template <class L, class D>
__global__ void k_head_grad(const L *l, const L *mx, const L *sum, D *dl, const int *rows,
                            double mean_over, int Vl, int V, int first, int offset)
{
    long long row = blockIdx.x;
    const L *r = l + row * Vl;
    D *d = dl + row * Vl;
    int target = (int)(((rows ? rows[row] : row) * 7919LL + offset) % V) - first;
    for (int j = threadIdx.x; j < Vl; j += THREADS)
        d[j] = elem<D>::store((exp(r[j] - mx[row]) / sum[row] - (j == target ? 1 : 0)) / (L)mean_over);
}

// tp NULL: the whole vocabulary here. rows (device, NULL: row r is token r) and mean_over: under
// CP the rows' whole-micro-batch indices and the whole micro-batch's token count (cp_rows_dev,
// cp_mean_over); otherwise NULL and n.
template <class L, class D>
static void head_softmax(rt_cuda *g, const rt_cuda_tp *tp, const L *logits, D *dlogits,
                         const int *rows, double mean_over, int n, int V, int offset)
{
    int on = tp_on(tp), Vl = on ? V / tp->size : V;
    L *mx = NULL; // the rows' maximum, then their sum of exponents
    cudaMallocAsync((void **)&mx, 2 * (size_t)(n > 0 ? n : 1) * sizeof(L), g->stream);
    if (!mx || n <= 0) { // a failed allocation is left for rt_cuda_sync to report
        if (mx) cudaFreeAsync(mx, g->stream);
        return;
    }
    k_row_max<L><<<n, THREADS, 0, g->stream>>>(logits, mx, Vl);
    if (on) tp->allreduce(tp->ctx, g, mx, (size_t)n, elem_kind<L>(), RT_TP_MAX);
    k_row_sumexp<L><<<n, THREADS, 0, g->stream>>>(logits, mx, mx + n, Vl);
    if (on) tp->allreduce(tp->ctx, g, mx + n, (size_t)n, elem_kind<L>(), RT_TP_SUM);
    k_head_grad<L, D><<<n, THREADS, 0, g->stream>>>(logits, mx, mx + n, dlogits, rows, mean_over,
                                                    Vl, V, on ? tp->rank * Vl : 0, offset);
    cudaFreeAsync(mx, g->stream);
}

// ---- context parallelism (layer.h rt_cp; layer.c's cp_gather_kv and cp_scatter_dkv) ------------
static inline int cp_on(const rt_cp *cp) { return cp && cp->size > 1; }

// The map's whole[] on the device (g->small: one upload per micro-batch), NULL (noted in g->fail)
// out of memory.
static inline const int *cp_whole_dev(rt_cuda *g, const rt_cp *cp)
{
    size_t n = (size_t)cp->n_local * (size_t)cp->size;
    const int *d = (const int *)rt_dev_cache_get(&g->small, cp->whole, n * sizeof(int));
    if (!d && !g->fail[0]) snprintf(g->fail, sizeof g->fail, "out of memory for a context-parallel map");
    return d;
}

// dst (rows of w) = columns col .. col + w - 1 of src (rows of ld); and back, added.
template <class T> __global__ void k_cols_get(const T *src, int ld, int col, T *dst, int w, long long rows)
{
    GRID_STRIDE(i, rows * w) dst[i] = src[i / w * ld + col + i % w];
}
template <class T> __global__ void k_cols_add(T *dst, int ld, int col, const T *src, int w, long long rows)
{
    GRID_STRIDE(i, rows * w)
    {
        T *d = dst + i / w * ld + col + i % w;
        *d = elem<T>::store(elem<T>::load(*d) + elem<T>::load(src[i]));
    }
}
// Rows of w moved by a map: dst row map[r] = src row r (scatter), or dst row r = src row map[r].
template <class T> __global__ void k_rows_scatter(const T *src, const int *map, T *dst, int w, long long rows)
{
    GRID_STRIDE(i, rows * w) dst[(long long)map[i / w] * w + i % w] = src[i];
}
template <class T> __global__ void k_rows_gather(const T *src, const int *map, T *dst, int w, long long rows)
{
    GRID_STRIDE(i, rows * w) dst[i] = src[(long long)map[i / w] * w + i % w];
}

// The group's rotated key/value projections (the columns after the queries of each of this
// rank's n_local rows of qkv, width qkv_w) gathered into kvg, the whole micro-batch's rows of
// 2 hkv, in its order.
template <class T>
static void cp_gather_kv(rt_cuda *g, const rt_cp *cp, const rt_cuda_tp *grp, const T *qkv, int hk,
                         int hkv, int qkv_w, T *kvg)
{
    int w = 2 * hkv;
    long long nl = cp->n_local, all = nl * cp->size;
    const int *whole = cp_whole_dev(g, cp);
    T *mine = NULL, *got = NULL;
    cudaMallocAsync((void **)&mine, (size_t)(nl * w + 1) * sizeof(T), g->stream);
    cudaMallocAsync((void **)&got, (size_t)(all * w + 1) * sizeof(T), g->stream);
    if (whole && mine && got) {
        k_cols_get<T><<<grid_for(nl * w), THREADS, 0, g->stream>>>(qkv, qkv_w, hk, mine, w, nl);
        grp->allgather(grp->ctx, g, mine, got, (size_t)(nl * w), elem_kind<T>());
        k_rows_scatter<T><<<grid_for(all * w), THREADS, 0, g->stream>>>(got, whole, kvg, w, all);
    }
    if (mine) cudaFreeAsync(mine, g->stream);
    if (got) cudaFreeAsync(got, g->stream);
}

// The key/value gradients dkvg (the whole micro-batch's rows of 2 hkv, this rank's queries'
// contributions) summed over the group, this rank's tokens' rows added to the key/value columns
// of d_qkv (n_local rows of qkv_w).
template <class T>
static void cp_scatter_dkv(rt_cuda *g, const rt_cp *cp, const rt_cuda_tp *grp, const T *dkvg, int hk,
                           int hkv, int qkv_w, T *d_qkv)
{
    int w = 2 * hkv;
    long long nl = cp->n_local, all = nl * cp->size;
    const int *whole = cp_whole_dev(g, cp);
    T *by_rank = NULL, *mine = NULL;
    cudaMallocAsync((void **)&by_rank, (size_t)(all * w + 1) * sizeof(T), g->stream);
    cudaMallocAsync((void **)&mine, (size_t)(nl * w + 1) * sizeof(T), g->stream);
    if (whole && by_rank && mine) {
        k_rows_gather<T><<<grid_for(all * w), THREADS, 0, g->stream>>>(dkvg, whole, by_rank, w, all);
        grp->reduce_scatter(grp->ctx, g, by_rank, mine, (size_t)(nl * w), elem_kind<T>());
        k_cols_add<T><<<grid_for(nl * w), THREADS, 0, g->stream>>>(d_qkv, qkv_w, hk, mine, w, nl);
    }
    if (by_rank) cudaFreeAsync(by_rank, g->stream);
    if (mine) cudaFreeAsync(mine, g->stream);
}

// The LM head's target rows under CP: each of this rank's tokens' index in the whole micro-batch
// (the device map from its rank's entries on), NULL without CP; and what the loss averages over.
static inline const int *cp_rows_dev(rt_cuda *g, const rt_cp *cp)
{
    if (!cp_on(cp)) return NULL;
    const int *whole = cp_whole_dev(g, cp);
    return whole ? whole + (size_t)cp->rank * cp->n_local : NULL;
}
static inline double cp_mean_over(const rt_cp *cp, int n) { return (double)n * (cp_on(cp) ? cp->size : 1); }

// Mean time of fwd() and of bwd() over `repeats` runs after one warm-up, by CUDA events.
template <class Fwd, class Bwd>
static int time_fwd_bwd(rt_cuda *g, int repeats, Fwd fwd, Bwd bwd, double *fwd_ms, double *bwd_ms)
{
    cudaEvent_t e[3] = {NULL, NULL, NULL};
    for (int k = 0; k < 3; k++) cudaEventCreate(&e[k]);
    float tf = 0, tb = 0;
    for (int r = -1; r < repeats; r++) {
        cudaEventRecord(e[0], g->stream);
        fwd();
        cudaEventRecord(e[1], g->stream);
        bwd();
        cudaEventRecord(e[2], g->stream);
        cudaEventSynchronize(e[2]);
        float a = 0, b = 0;
        cudaEventElapsedTime(&a, e[0], e[1]);
        cudaEventElapsedTime(&b, e[1], e[2]);
        if (r >= 0) tf += a, tb += b;
    }
    *fwd_ms = tf / repeats;
    *bwd_ms = tb / repeats;
    for (int k = 0; k < 3; k++) cudaEventDestroy(e[k]);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}

#endif // RT_CUDA_CTX_H
