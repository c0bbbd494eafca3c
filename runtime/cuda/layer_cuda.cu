// The GPU context, memory, events, and the fp64 layers of runtime/layer.c (GPT, T5 encoder and
// decoder): cuBLAS for the GEMMs, small kernels for the rest, step by step as layer.c with the
// same activation layout, so that `dprun check-gpu` compares the two backends value by value.
// The bf16 layers are layer_bf16.cu's; the public functions here dispatch on the layer's dtype.
#include "cuda_ctx.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The device side of g->small (runtime/dev_cache.h), stream-ordered on g's stream, which every
// user of the cache enqueues on: an entry is freed after the work that reads it. The copy reads
// the cache's own host copy, pageable memory, which it has left when cudaMemcpyAsync returns.
static void *small_alloc(void *ctx, size_t bytes)
{
    void *p = NULL;
    return cudaMallocAsync(&p, bytes, ((rt_cuda *)ctx)->stream) == cudaSuccess ? p : NULL;
}

static int small_upload(void *ctx, void *dev, const void *host, size_t bytes)
{
    cudaStream_t s = ((rt_cuda *)ctx)->stream;
    return cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, s) == cudaSuccess ? 0 : -1;
}

static void small_release(void *ctx, void *dev) { cudaFreeAsync(dev, ((rt_cuda *)ctx)->stream); }

extern "C" rt_cuda *rt_cuda_open(int device, char *why, size_t why_cap)
{
    rt_cuda *g = (rt_cuda *)calloc(1, sizeof *g);
    if (!g) return NULL;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess) e = cudaStreamCreate(&g->stream);
    if (e != cudaSuccess) {
        snprintf(why, why_cap, "CUDA device %d: %s", device, cudaGetErrorString(e));
        free(g);
        return NULL;
    }
    if (cublasCreate(&g->blas) != CUBLAS_STATUS_SUCCESS ||
        cublasSetStream(g->blas, g->stream) != CUBLAS_STATUS_SUCCESS) {
        snprintf(why, why_cap, "cuBLAS could not be initialised on device %d", device);
        cudaStreamDestroy(g->stream);
        free(g);
        return NULL;
    }
    g->device = device;
    // The layers' scratch comes from the device's cudaMallocAsync pool, which by default hands
    // all its free memory back at every stream or event synchronisation: the next timed call
    // (an iteration of the executor, a repeat of a profile's timing) would map it again. It keeps
    // up to POOL_KEEP_BYTES instead (a GPT-6.7B-width layer's scratch at 16k tokens: ~0.8 GB).
    cudaMemPool_t pool;
    uint64_t keep = POOL_KEEP_BYTES;
    if (cudaDeviceGetDefaultMemPool(&pool, device) == cudaSuccess)
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep);
    rt_dev_ops small = {small_alloc, small_upload, small_release, g};
    rt_dev_cache_init(&g->small, &small, SMALL_ENTRIES, SMALL_BYTES);
    if (rt_bf16_open(g, why, why_cap) != 0) {
        rt_cuda_close(g);
        return NULL;
    }
    return g;
}

extern "C" void rt_cuda_firsts_of(rt_cuda *g, rt_cuda_firsts *f)
{
    f->gemm_plans = g->lt_built, f->attn_graphs = g->sdpa_built, f->uploads = (long)g->small.uploads;
}

extern "C" void rt_cuda_close(rt_cuda *g)
{
    if (!g) return;
    rt_bf16_close(g);
    rt_dev_cache_release(&g->small);
    cublasDestroy(g->blas);
    cudaStreamDestroy(g->stream);
    free(g);
}

// A failure the bf16 layer found while enqueueing (layer_bf16.cu), reported once.
static int enqueue_failed(rt_cuda *g, char *why, size_t why_cap)
{
    if (!g->fail[0]) return 0;
    snprintf(why, why_cap, "%s", g->fail);
    g->fail[0] = '\0';
    return 1;
}

extern "C" int rt_cuda_sync(rt_cuda *g, char *why, size_t why_cap)
{
    if (enqueue_failed(g, why, why_cap)) return -1;
    cudaError_t e = cudaStreamSynchronize(g->stream);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess) return 0;
    snprintf(why, why_cap, "CUDA: %s", cudaGetErrorString(e));
    return -1;
}

extern "C" int rt_cuda_query(rt_cuda *g, char *why, size_t why_cap)
{
    if (enqueue_failed(g, why, why_cap)) return -1;
    cudaError_t e = cudaStreamQuery(g->stream);
    if (e == cudaErrorNotReady) return 0;
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess) return 1;
    snprintf(why, why_cap, "CUDA: %s", cudaGetErrorString(e));
    return -1;
}

extern "C" void *rt_cuda_stream(rt_cuda *g) { return (void *)g->stream; }

extern "C" void rt_cuda_device_name(rt_cuda *g, char *buf, size_t cap)
{
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, g->device) == cudaSuccess)
        snprintf(buf, cap, "%s", prop.name);
    else
        snprintf(buf, cap, "CUDA device %d", g->device);
}

extern "C" int rt_cuda_device_count(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

extern "C" void *rt_cuda_alloc(size_t bytes)
{
    void *p = NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}

extern "C" void rt_cuda_free(void *p)
{
    if (p) cudaFree(p);
}

extern "C" int rt_cuda_put(void *dst, const void *src, size_t bytes)
{
    return cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice) == cudaSuccess ? 0 : -1;
}

extern "C" int rt_cuda_get(void *dst, const void *src, size_t bytes)
{
    return cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost) == cudaSuccess ? 0 : -1;
}

// Device doubles (the fp64 layer's scratch).
static double *alloc_doubles(size_t n) { return (double *)rt_cuda_alloc(n * sizeof(double)); }

// ---- GEMM in row-major terms -------------------------------------------------------------------
// C (M x N) = alpha op(A) (M x K) op(B) (K x N) + beta C, row-major: cuBLAS (column-major) computes
// C^T = op(B)^T op(A)^T, so the operands swap.
static void gemm(rt_cuda *g, int ta, int tb, int M, int N, int K, double alpha, const double *A,
                 int lda, const double *B, int ldb, double beta, double *C, int ldc)
{
    cublasDgemm(g->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K,
                &alpha, B, ldb, A, lda, &beta, C, ldc);
}

static void gemm_batched(rt_cuda *g, int ta, int tb, int M, int N, int K, double alpha,
                         const double *A, int lda, long long sa, const double *B, int ldb,
                         long long sb, double beta, double *C, int ldc, long long sc, int count)
{
    cublasDgemmStridedBatched(g->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                              N, M, K, &alpha, B, ldb, sb, A, lda, sa, &beta, C, ldc, sc, count);
}

// The batched GEMM of an attention over a query heads on g key/value heads (layout.h
// rt_head_step_of): sa, sb, sc are the elements from one head to the next in A, B and C, and
// kv_side (RT_HEADS_KV_*) says which of them are on the key/value heads.
static void gemm_heads(rt_cuda *g, int ta, int tb, int M, int N, int K, double alpha,
                       const double *A, int lda, long long sa, const double *B, int ldb,
                       long long sb, double beta, double *C, int ldc, long long sc, int a, int gk,
                       int kv_side)
{
    int r = a / gk;
    for (int i = 0; i < r; i++) {
        rt_head_step ha = rt_head_step_of(i, r, sa, kv_side & RT_HEADS_KV_A);
        rt_head_step hb = rt_head_step_of(i, r, sb, kv_side & RT_HEADS_KV_B);
        rt_head_step hc = rt_head_step_of(i, r, sc, kv_side & RT_HEADS_KV_C);
        gemm_batched(g, ta, tb, M, N, K, alpha, A + ha.off, lda, ha.stride, B + hb.off, ldb,
                     hb.stride, beta, C + hc.off, ldc, hc.stride, gk);
    }
}

// ---- kernels --------------------------------------------------------------------------------
__global__ void k_bias_rows(double *y, const double *b, int n, int out)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < (long long)n * out;
         i += (long long)gridDim.x * blockDim.x)
        y[i] = b[i % out];
}

// Causal: query i of sq sees keys 0 .. i + sk - sq (bottom-right aligned: a context-parallel
// piece's queries start at position sk - sq of the sample, layer.h rt_cp; without CP sk = sq).
__global__ void k_softmax(double *p, int sq, int sk, int causal)
{
    long long row = blockIdx.x;
    int i = (int)(row % sq), last = causal ? (i + sk - sq < sk ? i + sk - sq : sk - 1) : sk - 1;
    double *r = p + row * sk, mx = -INFINITY;
    for (int j = threadIdx.x; j <= last; j += THREADS) mx = fmax(mx, r[j]);
    mx = block_max(mx);
    double s = 0;
    for (int j = threadIdx.x; j < sk; j += THREADS) {
        r[j] = j <= last ? exp(r[j] - mx) : 0;
        s += r[j];
    }
    s = block_sum(s);
    for (int j = threadIdx.x; j <= last; j += THREADS) r[j] /= s;
}

// dS = P o (dP - rowsum(dP o P)) * scale, in place in dp.
__global__ void k_softmax_bwd(double *dp, const double *p, int sk, double scale)
{
    long long row = blockIdx.x;
    double *dr = dp + row * sk;
    const double *pr = p + row * sk;
    double dot = 0;
    for (int j = threadIdx.x; j < sk; j += THREADS) dot += dr[j] * pr[j];
    dot = block_sum(dot);
    for (int j = threadIdx.x; j < sk; j += THREADS) dr[j] = pr[j] * (dr[j] - dot) * scale;
}

// ---- the layer ------------------------------------------------------------------------------
// Parameters and saved activations are laid out by runtime/layer.c's binders: pointer arithmetic
// on the device block, nothing is dereferenced on the host.
static rt_layer_params params_of(const rt_cuda_layer *l)
{
    rt_layer_params p;
    rt_layer_params_bind(&p, &l->shape, (double *)l->block);
    return p;
}

static rt_layer_acts acts_of(const rt_cuda_layer *l, int B, int S, int Se, const void *block)
{
    rt_layer_acts a;
    rt_layer_acts_bind(&a, &l->shape, B, S, Se, (double *)block);
    return a;
}

// y = x W + b (b NULL: no bias).
static void linear(rt_cuda *g, const double *x, const double *w, const double *b, double *y, int n,
                   int in, int out)
{
    if (b) k_bias_rows<<<grid_for((long long)n * out), THREADS, 0, g->stream>>>(y, b, n, out);
    gemm(g, 0, 0, n, out, in, 1.0, x, in, w, out, b ? 1.0 : 0.0, y, out);
}

// Attention within sequences (runtime/layer.h rt_seqs): sequence j of the queries qs (rows of
// ldq) attends to sequence j of the keys ks (rows of ldkv), a query heads on gk key/value heads
// of width d, as rt_attention_fwd (runtime/layer.c): p holds sequence j's (a, lq, lk)
// probabilities after those of the sequences before it; ctx (rows of a*d) is written for the
// queries' tokens only.
static void attention_fwd(rt_cuda *g, const double *q, int ldq, const double *k, const double *v,
                          int ldkv, double *p, double *ctx, const rt_seqs *qs, const rt_seqs *ks,
                          int a, int gk, int d, int causal)
{
    double scale = 1 / sqrt((double)d);
    long long at = 0;
    for (int j = 0; j < qs->n; j++) {
        int sq = qs->len[j], sk = ks->len[j];
        long long pp = (long long)sq * sk, qo = qs->off[j], ko = ks->off[j];
        if (pp > 0) {
            double *pb = p + at;
            gemm_heads(g, 0, 1, sq, sk, d, scale, q + qo * ldq, ldq, d, k + ko * ldkv, ldkv, d,
                       0.0, pb, sk, pp, a, gk, RT_HEADS_KV_B);
            k_softmax<<<a * sq, THREADS, 0, g->stream>>>(pb, sq, sk, causal);
            gemm_heads(g, 0, 0, sq, d, sk, 1.0, pb, sk, pp, v + ko * ldkv, ldkv, d, 0.0,
                       ctx + qo * a * d, a * d, d, a, gk, RT_HEADS_KV_B);
        }
        at += a * pp;
    }
}

// Its backward: dq, dk, dv (same layouts) are added to; dp is scratch of a * lq * lk for the
// largest pair of sequences.
static void attention_bwd(rt_cuda *g, const double *dctx, const double *q, int ldq,
                          const double *k, const double *v, int ldkv, const double *p, double *dq,
                          double *dk, double *dv, const rt_seqs *qs, const rt_seqs *ks, int a,
                          int gk, int d, double *dp)
{
    double scale = 1 / sqrt((double)d);
    int ldc = a * d;
    long long at = 0;
    for (int j = 0; j < qs->n; j++) {
        int sq = qs->len[j], sk = ks->len[j];
        long long pp = (long long)sq * sk, qo = qs->off[j] * (long long)ldq,
                  ko = ks->off[j] * (long long)ldkv;
        if (pp > 0) {
            const double *dcb = dctx + (long long)qs->off[j] * ldc, *pb = p + at;
            gemm_heads(g, 0, 1, sq, sk, d, 1.0, dcb, ldc, d, v + ko, ldkv, d, 0.0, dp, sk, pp, a,
                       gk, RT_HEADS_KV_B);
            gemm_heads(g, 1, 0, sk, d, sq, 1.0, pb, sk, pp, dcb, ldc, d, 1.0, dv + ko, ldkv, d, a,
                       gk, RT_HEADS_KV_C);
            k_softmax_bwd<<<a * sq, THREADS, 0, g->stream>>>(dp, pb, sk, scale);
            gemm_heads(g, 0, 0, sq, d, sk, 1.0, dp, sk, pp, k + ko, ldkv, d, 1.0, dq + qo, ldq, d,
                       a, gk, RT_HEADS_KV_B);
            gemm_heads(g, 1, 0, sk, d, sq, 1.0, dp, sk, pp, q + qo, ldq, d, 1.0, dk + ko, ldkv, d,
                       a, gk, RT_HEADS_KV_C);
        }
        at += a * pp;
    }
}

// The largest lq * lk of paired sequences.
static long long max_pair(const rt_seqs *qs, const rt_seqs *ks)
{
    long long m = 0;
    for (int j = 0; j < qs->n; j++)
        if ((long long)qs->len[j] * ks->len[j] > m) m = (long long)qs->len[j] * ks->len[j];
    return m;
}

// The attention cores (self, and a cross layer's), probabilities and context from the saved
// projections: the forward's, and selective recompute's rerun (layer.c self_core, cross_core).
static void f64_self_core(rt_cuda *g, const rt_layer_shape *s, const rt_batch *mb,
                          const rt_batch_seqs *bs, int n, rt_layer_acts *a)
{
    int hk = rt_layer_q_width(s), hkv = rt_layer_kv_width(s), qkv = rt_layer_qkv_width(s);
    cudaMemsetAsync(a->ctx, 0, (size_t)n * hk * sizeof(double), g->stream); // padding tokens
    if (cp_on(mb->cp)) // against the gathered keys and values of the whole micro-batch
        attention_fwd(g, a->qkv, qkv, a->kvg, a->kvg + hkv, 2 * hkv, a->p, a->ctx, &mb->cp->q,
                      &mb->cp->k, s->heads, rt_layer_kv_heads(s), s->kv, s->causal);
    else
        attention_fwd(g, a->qkv, qkv, a->qkv + hk, a->qkv + hk + hkv, qkv, a->p, a->ctx, &bs->self,
                      &bs->self, s->heads, rt_layer_kv_heads(s), s->kv, s->causal);
}

static void f64_cross_core(rt_cuda *g, const rt_layer_shape *s, const rt_batch_seqs *bs, int n,
                           rt_layer_acts *a)
{
    int hk = rt_layer_q_width(s), hkv = rt_layer_kv_width(s);
    cudaMemsetAsync(a->ctxc, 0, (size_t)n * hk * sizeof(double), g->stream);
    attention_fwd(g, a->qc, hk, a->kvc, a->kvc + hkv, 2 * hkv, a->pc, a->ctxc, &bs->self, &bs->enc,
                  s->heads, rt_layer_kv_heads(s), s->kv, 0);
}

static void f64_layer_fwd(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb, const double *x,
                          double *y, void *acts, const double *enc)
{
    int B = mb->B, S = mb->S, Se = mb->Se;
    rt_layer_params p = params_of(l);
    rt_layer_acts a = acts_of(l, B, S, Se, acts);
    rt_batch_seqs bs;
    rt_batch_seqs_init(&bs, mb);
    // under CP this rank's tokens (layer.h rt_cp), under TP with SP its share of them
    int n = rt_cp_tokens(mb->cp, B * S), h = l->shape.hidden, hk = rt_layer_q_width(&l->shape);
    int hkv = rt_layer_kv_width(&l->shape), qkv = rt_layer_qkv_width(&l->shape), f = l->shape.ffn;
    const rt_cuda_tp *tp = l->tp;
    int nl = rt_cuda_tp_tokens(tp, n); // this rank's tokens (layer.c rt_layer_fwd under TP)
    long long nh = (long long)n * h, nlh = (long long)nl * h;
    // with SP, a whole-sequence scratch: a norm's output before the gather, a projection's
    // partial sums before the reduce-scatter
    double *full = NULL;
    if (tp_sp(tp)) cudaMallocAsync((void **)&full, (size_t)nh * sizeof(double), g->stream);
    cudaMemcpyAsync(a.x, x, nlh * sizeof(double), cudaMemcpyDeviceToDevice, g->stream);
    norm_fwd(g, &l->shape, a.x, p.ln1_g, p.ln1_b, full ? full : a.h1, a.mean1, a.rstd1, nl);
    if (full) tp_gather(g, tp, full, a.h1, (size_t)nlh);
    linear(g, a.h1, p.wqkv, p.bqkv, a.qkv, n, h, qkv);
    if (l->shape.rope_base > 0) rope_pass(g, &l->shape, self_queries(mb, &bs), S, a.qkv, n, 0); // the saved q, k rotated
    if (cp_on(mb->cp)) cp_gather_kv(g, mb->cp, l->cp_group, a.qkv, hk, hkv, qkv, a.kvg);
    f64_self_core(g, &l->shape, mb, &bs, n, &a);
    linear(g, a.ctx, p.wo, bias_once(tp, p.bo), full ? full : a.x2, n, hk, h);
    tp_reduce(g, tp, full ? full : a.x2, a.x2, (size_t)nh);
    k_add<double><<<grid_for(nlh), THREADS, 0, g->stream>>>(a.x2, a.x, nlh);
    if (l->shape.cross) { /* xc = the self-attention block's output; x2 = xc + cross-attention */
        cudaMemcpyAsync(a.xc, a.x2, nh * sizeof(double), cudaMemcpyDeviceToDevice, g->stream);
        norm_fwd(g, &l->shape, a.xc, p.lnc_g, p.lnc_b, a.hc, a.meanc, a.rstdc, n);
        linear(g, a.hc, p.wqc, p.bqc, a.qc, n, h, hk);
        linear(g, enc, p.wkvc, p.bkvc, a.kvc, B * Se, h, 2 * hkv);
        f64_cross_core(g, &l->shape, &bs, n, &a);
        linear(g, a.ctxc, p.woc, p.boc, a.x2, n, hk, h);
        k_add<double><<<grid_for(nh), THREADS, 0, g->stream>>>(a.x2, a.xc, nh);
    }
    norm_fwd(g, &l->shape, a.x2, p.ln2_g, p.ln2_b, full ? full : a.h2, a.mean2, a.rstd2, nl);
    if (full) tp_gather(g, tp, full, a.h2, (size_t)nlh);
    linear(g, a.h2, p.w1, p.b1, a.u, n, h, rt_layer_ffn_in(&l->shape));
    mlp_act_fwd(g, &l->shape, a.u, a.g, n);
    linear(g, a.g, p.w2, bias_once(tp, p.b2), full ? full : y, n, f, h);
    tp_reduce(g, tp, full ? full : y, y, (size_t)nh);
    k_add<double><<<grid_for(nlh), THREADS, 0, g->stream>>>(y, a.x2, nlh);
    if (full) cudaFreeAsync(full, g->stream);
    rt_batch_seqs_free(&bs);
}

static void f64_layer_bwd_input(rt_cuda *g, const rt_cuda_layer *l, rt_cuda_layer *grad,
                                const rt_batch *mb, const double *dy, double *dx, void *acts,
                                double *denc)
{
    int B = mb->B, S = mb->S, Se = mb->Se;
    rt_layer_params p = params_of(l), gr = params_of(grad);
    rt_layer_acts a = acts_of(l, B, S, Se, acts);
    rt_batch_seqs bs;
    rt_batch_seqs_init(&bs, mb);
    const rt_cp *cp = cp_on(mb->cp) ? mb->cp : NULL;
    int n = rt_cp_tokens(cp, B * S), h = l->shape.hidden, hk = rt_layer_q_width(&l->shape);
    int hkv = rt_layer_kv_width(&l->shape), qkv = rt_layer_qkv_width(&l->shape), f = l->shape.ffn;
    int heads = l->shape.heads, gk = rt_layer_kv_heads(&l->shape), kv = l->shape.kv, ne = B * Se;
    int f1 = rt_layer_ffn_in(&l->shape);
    long long pairs = cp ? max_pair(&cp->q, &cp->k) : max_pair(&bs.self, &bs.self);
    if (l->shape.cross && max_pair(&bs.self, &bs.enc) > pairs) pairs = max_pair(&bs.self, &bs.enc);
    const rt_cuda_tp *tp = l->tp;
    int nl = rt_cuda_tp_tokens(tp, n), sp = tp_sp(tp); // this rank's tokens (layer.c under TP)
    long long nh = (long long)n * h, nlh = (long long)nl * h;
    /* temporaries from the stream-ordered allocator: no device-wide synchronisation inside a
     * timed backward; a failed allocation is left for rt_cuda_sync (cudaGetLastError) to report.
     * With SP, dnorm and d_o hold this rank's tokens of a norm's input gradient and of
     * d(attention out); otherwise they are tmp_h and a.d_o */
    double *tmp_f = NULL, *tmp_h = NULL, *dctx = NULL, *dp = NULL, *dnorm = NULL, *d_o = NULL;
    double *dkvg = NULL; // CP: the whole micro-batch's key/value gradients of this rank's queries
    if (cp) cudaMallocAsync((void **)&dkvg, (size_t)B * S * 2 * hkv * sizeof(double), g->stream);
    cudaMallocAsync((void **)&tmp_f, (size_t)n * f * sizeof(double), g->stream);
    cudaMallocAsync((void **)&tmp_h, (size_t)nh * sizeof(double), g->stream);
    cudaMallocAsync((void **)&dctx, (size_t)n * hk * sizeof(double), g->stream);
    cudaMallocAsync((void **)&dp, (size_t)(heads * pairs + 1) * sizeof(double), g->stream);
    if (sp) {
        cudaMallocAsync((void **)&dnorm, (size_t)nlh * sizeof(double), g->stream);
        cudaMallocAsync((void **)&d_o, (size_t)nlh * sizeof(double), g->stream);
    } else {
        dnorm = tmp_h, d_o = a.d_o;
    }
    if (!tmp_f || !tmp_h || !dctx || !dp || !dnorm || !d_o || (cp && !dkvg)) goto out;
    tp_gather(g, tp, dy, a.d_y, (size_t)nlh); /* W2's output gradient, whole */
    gemm(g, 0, 1, n, f, h, 1.0, a.d_y, h, p.w2, h, 0.0, tmp_f, f); /* dg = dy W2^T */
    mlp_act_bwd(g, &l->shape, tmp_f, a.u, a.d_u, n);
    gemm(g, 0, 1, n, h, f1, 1.0, a.d_u, f1, p.w1, f1, 0.0, tmp_h, h); /* dh2, partial */
    tp_reduce(g, tp, tmp_h, dnorm, (size_t)nh);
    norm_bwd(g, &l->shape, dnorm, a.x2, p.ln2_g, a.mean2, a.rstd2, d_o, gr.ln2_g, gr.ln2_b, nl);
    k_add<double><<<grid_for(nlh), THREADS, 0, g->stream>>>(d_o, dy, nlh); /* dx2 */
    if (l->shape.cross) { /* back through the cross-attention: d_o becomes d(self-attention out) */
        cudaMemcpyAsync(a.d_oc, a.d_o, nh * sizeof(double), cudaMemcpyDeviceToDevice, g->stream);
        gemm(g, 0, 1, n, hk, h, 1.0, a.d_oc, h, p.woc, h, 0.0, dctx, hk);
        cudaMemsetAsync(a.d_qc, 0, (size_t)n * hk * sizeof(double), g->stream);
        cudaMemsetAsync(a.d_kvc, 0, (size_t)ne * 2 * hkv * sizeof(double), g->stream);
        attention_bwd(g, dctx, a.qc, hk, a.kvc, a.kvc + hkv, 2 * hkv, a.pc, a.d_qc, a.d_kvc,
                      a.d_kvc + hkv, &bs.self, &bs.enc, heads, gk, kv, dp);
        gemm(g, 0, 1, n, h, hk, 1.0, a.d_qc, hk, p.wqc, hk, 0.0, tmp_h, h); /* d(hc) */
        if (denc) /* d(enc) += d_kvc Wkvc^T */
            gemm(g, 0, 1, ne, h, 2 * hkv, 1.0, a.d_kvc, 2 * hkv, p.wkvc, 2 * hkv, 1.0, denc, h);
        norm_bwd(g, &l->shape, tmp_h, a.xc, p.lnc_g, a.meanc, a.rstdc, a.d_o, gr.lnc_g, gr.lnc_b, n);
        k_add<double><<<grid_for(nh), THREADS, 0, g->stream>>>(a.d_o, a.d_oc, nh);
    }
    tp_gather(g, tp, d_o, a.d_o, (size_t)nlh); /* Wo's output gradient, whole */
    gemm(g, 0, 1, n, hk, h, 1.0, a.d_o, h, p.wo, h, 0.0, dctx, hk);
    cudaMemsetAsync(a.d_qkv, 0, (size_t)n * qkv * sizeof(double), g->stream);
    if (cp) { /* the whole micro-batch's key/value gradients, then each rank's share */
        cudaMemsetAsync(dkvg, 0, (size_t)B * S * 2 * hkv * sizeof(double), g->stream);
        attention_bwd(g, dctx, a.qkv, qkv, a.kvg, a.kvg + hkv, 2 * hkv, a.p, a.d_qkv, dkvg,
                      dkvg + hkv, &cp->q, &cp->k, heads, gk, kv, dp);
        cp_scatter_dkv(g, cp, l->cp_group, dkvg, hk, hkv, qkv, a.d_qkv);
    } else {
        attention_bwd(g, dctx, a.qkv, qkv, a.qkv + hk, a.qkv + hk + hkv, qkv, a.p, a.d_qkv,
                      a.d_qkv + hk, a.d_qkv + hk + hkv, &bs.self, &bs.self, heads, gk, kv, dp);
    }
    if (l->shape.rope_base > 0) rope_pass(g, &l->shape, self_queries(mb, &bs), S, a.d_qkv, n, 1); /* d(rotated) to d(projected) */
    gemm(g, 0, 1, n, h, qkv, 1.0, a.d_qkv, qkv, p.wqkv, qkv, 0.0, tmp_h, h); /* dh1, partial */
    tp_reduce(g, tp, tmp_h, dnorm, (size_t)nh);
    norm_bwd(g, &l->shape, dnorm, a.x, p.ln1_g, a.mean1, a.rstd1, dx, gr.ln1_g, gr.ln1_b, nl);
    k_add<double><<<grid_for(nlh), THREADS, 0, g->stream>>>(dx, d_o, nlh);
out:
    if (dkvg) cudaFreeAsync(dkvg, g->stream);
    if (sp && dnorm) cudaFreeAsync(dnorm, g->stream);
    if (sp && d_o) cudaFreeAsync(d_o, g->stream);
    if (tmp_f) cudaFreeAsync(tmp_f, g->stream);
    if (tmp_h) cudaFreeAsync(tmp_h, g->stream);
    if (dctx) cudaFreeAsync(dctx, g->stream);
    if (dp) cudaFreeAsync(dp, g->stream);
    rt_batch_seqs_free(&bs);
}

static void linear_bwd_weight(rt_cuda *g, const double *x, const double *dy, double *dw, double *db,
                              int n, int in, int out)
{
    gemm(g, 1, 0, in, out, n, 1.0, x, in, dy, out, 1.0, dw, out);
    if (db) colsum(g, db, dy, n, out);
}

static void f64_layer_bwd_weight(rt_cuda *g, rt_cuda_layer *grad, const rt_batch *mb,
                                 const void *acts, const double *enc)
{
    int B = mb->B, S = mb->S, Se = mb->Se;
    rt_layer_params gr = params_of(grad);
    rt_layer_acts a = acts_of(grad, B, S, Se, acts);
    int n = rt_cp_tokens(mb->cp, B * S), h = grad->shape.hidden, hk = rt_layer_q_width(&grad->shape);
    int hkv = rt_layer_kv_width(&grad->shape), qkv = rt_layer_qkv_width(&grad->shape);
    int f = grad->shape.ffn;
    linear_bwd_weight(g, a.g, a.d_y, gr.w2, gr.b2, n, f, h);
    linear_bwd_weight(g, a.h2, a.d_u, gr.w1, gr.b1, n, h, rt_layer_ffn_in(&grad->shape));
    if (grad->shape.cross) {
        linear_bwd_weight(g, a.ctxc, a.d_oc, gr.woc, gr.boc, n, hk, h);
        linear_bwd_weight(g, a.hc, a.d_qc, gr.wqc, gr.bqc, n, h, hk);
        linear_bwd_weight(g, enc, a.d_kvc, gr.wkvc, gr.bkvc, B * Se, h, 2 * hkv);
    }
    linear_bwd_weight(g, a.ctx, a.d_o, gr.wo, gr.bo, n, hk, h);
    linear_bwd_weight(g, a.h1, a.d_qkv, gr.wqkv, gr.bqkv, n, h, qkv);
}

// ---- the public layer: fp64 here, bf16 in layer_bf16.cu ----------------------------------------
extern "C" void rt_cuda_layer_fwd(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb,
                                  const void *x, void *y, void *acts, const void *enc)
{
    if (l->dtype == RT_BF16) return rt_bf16_layer_fwd(g, l, mb, x, y, acts, enc);
    f64_layer_fwd(g, l, mb, (const double *)x, (double *)y, acts, (const double *)enc);
}

extern "C" void rt_cuda_layer_recompute_attention(rt_cuda *g, const rt_cuda_layer *l,
                                                  const rt_batch *mb, void *acts)
{
    if (l->dtype == RT_BF16) return rt_bf16_layer_recompute_attention(g, l, mb, acts);
    rt_layer_acts a = acts_of(l, mb->B, mb->S, mb->Se, acts);
    rt_batch_seqs bs;
    rt_batch_seqs_init(&bs, mb);
    f64_self_core(g, &l->shape, mb, &bs, rt_cp_tokens(mb->cp, mb->B * mb->S), &a);
    if (l->shape.cross) f64_cross_core(g, &l->shape, &bs, mb->B * mb->S, &a);
    rt_batch_seqs_free(&bs);
}

extern "C" void rt_cuda_layer_bwd_input(rt_cuda *g, const rt_cuda_layer *l, rt_cuda_layer *grad,
                                        const rt_batch *mb, const void *dy, void *dx, void *acts,
                                        void *denc)
{
    if (l->dtype == RT_BF16) return rt_bf16_layer_bwd_input(g, l, grad, mb, dy, dx, acts, denc);
    f64_layer_bwd_input(g, l, grad, mb, (const double *)dy, (double *)dx, acts, (double *)denc);
}

extern "C" void rt_cuda_layer_bwd_weight(rt_cuda *g, rt_cuda_layer *grad, const rt_batch *mb,
                                         const void *acts, const void *enc)
{
    if (grad->dtype == RT_BF16) return rt_bf16_layer_bwd_weight(g, grad, mb, acts, enc);
    f64_layer_bwd_weight(g, grad, mb, acts, (const double *)enc);
}

extern "C" int rt_cuda_time_layer(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *batch,
                                  recompute_mode rcm, int repeats, double *fwd_ms, double *bwd_ms)
{
    rt_dtype dt = l->dtype;
    int B = batch->B, S = batch->S, Se = l->shape.cross ? batch->Se : 0;
    size_t nh = (size_t)B * S * l->shape.hidden * rt_dtype_act_bytes(dt);
    size_t ne = (size_t)B * Se * l->shape.hidden * rt_dtype_act_bytes(dt);
    void *x = rt_cuda_alloc(nh), *y = rt_cuda_alloc(nh), *dx = rt_cuda_alloc(nh), *ry = rt_cuda_alloc(nh);
    void *enc = rt_cuda_alloc(ne), *denc = rt_cuda_alloc(ne);
    void *acts = rt_cuda_alloc(rt_layer_acts_bytes(&l->shape, B, S, Se, dt));
    rt_cuda_layer grad = *l;
    grad.block = rt_cuda_alloc(rt_grad_block_bytes(l->count, dt));
    int rc = -1;
    if (x && y && dx && ry && enc && denc && acts && grad.block) {
        rt_cuda_fill(g, x, nh / rt_dtype_act_bytes(dt), dt, 3, 1.0);
        rt_cuda_fill(g, enc, ne / rt_dtype_act_bytes(dt), dt, 4, 1.0);
        cudaMemsetAsync(grad.block, 0, rt_grad_block_bytes(l->count, dt), g->stream);
        rt_batch mb = {B, S, Se, batch->seqs, l->shape.cross ? batch->enc_seqs : NULL, NULL};
        uint64_t uploads = g->small.uploads;
        rc = time_fwd_bwd(
            g, repeats, [&] { rt_cuda_layer_fwd(g, l, &mb, x, y, acts, enc); },
            [&] {
                rt_cuda_layer_rerun(g, l, &mb, rcm, x, ry, acts, enc); // the executor's backward
                rt_cuda_layer_bwd_input(g, l, &grad, &mb, y, dx, acts, l->shape.cross ? denc : NULL);
                rt_cuda_layer_bwd_weight(g, &grad, &mb, acts, enc);
            },
            fwd_ms, bwd_ms);
        // the runs share their small arrays (ragged offsets, positions: at most 3 contents, in
        // the warm-up); more uploads would put host waits into the timed runs
        uploads = g->small.uploads - uploads;
        if (rc == 0 && uploads > 3) {
            snprintf(g->fail, sizeof g->fail, "the layer's small arrays were uploaded %llu times in "
                     "%d runs: the device cache (dev_cache.h) missed", (unsigned long long)uploads,
                     repeats + 1);
            rc = -1;
        }
    }
    rt_cuda_free(x), rt_cuda_free(y), rt_cuda_free(dx), rt_cuda_free(ry), rt_cuda_free(enc);
    rt_cuda_free(denc);
    rt_cuda_free(acts), rt_cuda_free(grad.block);
    return rc;
}

extern "C" int rt_cuda_time_gemm(rt_cuda *g, int M, int N, int K, rt_dtype dt, int repeats,
                                 double *ms)
{
    if (dt == RT_BF16) return rt_bf16_time_gemm(g, M, N, K, repeats, ms);
    double *a = alloc_doubles((size_t)M * K), *b = alloc_doubles((size_t)K * N);
    double *c = alloc_doubles((size_t)M * N);
    int rc = -1;
    if (a && b && c) {
        rt_cuda_fill(g, a, (size_t)M * K, RT_FP64, 11, 1.0); // as rt_bf16_time_gemm
        rt_cuda_fill(g, b, (size_t)K * N, RT_FP64, 12, 1.0);
        double unused;
        rc = time_fwd_bwd(
            g, repeats, [&] { gemm(g, 0, 0, M, N, K, 1.0, a, K, b, N, 0.0, c, N); }, [] {}, ms,
            &unused);
    }
    rt_cuda_free(a), rt_cuda_free(b), rt_cuda_free(c);
    return rc;
}

extern "C" const char *rt_cuda_attention_path(rt_cuda *g)
{
    return g->attn_path[0] ? g->attn_path : "none";
}

// ---- for the plan executor (runtime/exec_gpu.c) ---------------------------------------------------------
extern "C" void *rt_cuda_event_new(void)
{
    cudaEvent_t e = NULL;
    return cudaEventCreate(&e) == cudaSuccess ? (void *)e : NULL;
}

extern "C" void rt_cuda_event_free(void *e)
{
    if (e) cudaEventDestroy((cudaEvent_t)e);
}

extern "C" void rt_cuda_event_record(rt_cuda *g, void *e)
{
    cudaEventRecord((cudaEvent_t)e, g->stream);
}

extern "C" void rt_cuda_wait_event(rt_cuda *g, void *e)
{
    cudaStreamWaitEvent(g->stream, (cudaEvent_t)e, 0);
}

extern "C" double rt_cuda_event_ms(void *from, void *to)
{
    float ms = 0;
    cudaEventElapsedTime(&ms, (cudaEvent_t)from, (cudaEvent_t)to);
    return ms;
}

extern "C" void rt_cuda_copy(rt_cuda *g, void *dst, const void *src, size_t bytes)
{
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, g->stream);
}

extern "C" void rt_cuda_zero(rt_cuda *g, void *v, size_t bytes)
{
    cudaMemsetAsync(v, 0, bytes, g->stream);
}

extern "C" void rt_cuda_add_grads(rt_cuda *g, void *dst, const void *src, size_t n, rt_dtype dt)
{
    if (dt == RT_BF16)
        k_add<float><<<grid_for((long long)n), THREADS, 0, g->stream>>>((float *)dst, (const float *)src, (long long)n);
    else
        k_add<double><<<grid_for((long long)n), THREADS, 0, g->stream>>>((double *)dst, (const double *)src, (long long)n);
}

__global__ void k_fill(double *v, long long n, long long first, unsigned seed, double scale)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        v[i] = RT_FILL_VALUE(first + i, seed, scale); /* runtime/layer.h: the CPU backend's values */
    }
}

extern "C" void rt_cuda_fill_at(rt_cuda *g, void *v, size_t n, size_t first, rt_dtype dt,
                                unsigned seed, double scale)
{
    if (dt == RT_BF16) return rt_bf16_fill(g, v, n, first, seed, scale);
    k_fill<<<grid_for((long long)n), THREADS, 0, g->stream>>>((double *)v, (long long)n,
                                                             (long long)first, seed, scale);
}

extern "C" void rt_cuda_fill(rt_cuda *g, void *v, size_t n, rt_dtype dt, unsigned seed, double scale)
{
    rt_cuda_fill_at(g, v, n, 0, dt, seed, scale);
}

extern "C" void rt_cuda_lm_head_fwd(rt_cuda *g, const rt_cuda_tp *tp, const rt_cp *cp,
                                    const void *out, const void *emb, void *logits, void *dlogits,
                                    int n, int H, int V, int target_offset, rt_dtype dt)
{
    if (dt == RT_BF16)
        return rt_bf16_lm_head_fwd(g, tp, cp, out, emb, logits, dlogits, n, H, V, target_offset);
    int Vl = tp_on(tp) ? V / tp->size : V;
    const int *rows = cp_rows_dev(g, cp);
    if (n <= 0 || (cp_on(cp) && !rows)) return; // (out of memory: noted in g->fail)
    gemm(g, 0, 1, n, Vl, H, 1.0, (const double *)out, H, (const double *)emb, H, 0.0,
         (double *)logits, Vl);
    head_softmax<double, double>(g, tp, (const double *)logits, (double *)dlogits, rows,
                                 cp_mean_over(cp, n), n, V, target_offset);
}

extern "C" void rt_cuda_lm_head_bwd(rt_cuda *g, const rt_cuda_tp *tp, const void *dlogits,
                                    const void *emb, const void *out, void *dout, void *demb,
                                    int n, int H, int V, rt_dtype dt)
{
    if (dt == RT_BF16) return rt_bf16_lm_head_bwd(g, tp, dlogits, emb, out, dout, demb, n, H, V);
    int Vl = tp_on(tp) ? V / tp->size : V;
    double *partial = (double *)dout; // this rank's vocabulary's share of d(out), whole tokens
    if (tp_sp(tp)) cudaMallocAsync((void **)&partial, (size_t)n * H * sizeof(double), g->stream);
    if (!partial) return; // left for rt_cuda_sync to report
    gemm(g, 0, 0, n, H, Vl, 1.0, (const double *)dlogits, Vl, (const double *)emb, H, 0.0,
         partial, H);
    tp_reduce(g, tp, partial, (double *)dout, (size_t)n * H);
    if (partial != dout) cudaFreeAsync(partial, g->stream);
    gemm(g, 1, 0, Vl, H, n, 1.0, (const double *)dlogits, Vl, (const double *)out, H, 1.0,
         (double *)demb, H);
}

extern "C" int rt_cuda_time_head(rt_cuda *g, int n, int H, int V, rt_dtype dt, int repeats,
                                 double *fwd_ms, double *bwd_ms)
{
    size_t ab = rt_dtype_act_bytes(dt), vh = (size_t)V * H;
    void *out = rt_cuda_alloc((size_t)n * H * ab), *dout = rt_cuda_alloc((size_t)n * H * ab);
    void *emb = rt_cuda_alloc(rt_param_block_bytes(vh, dt));
    void *demb = rt_cuda_alloc(rt_grad_block_bytes(vh, dt));
    void *logits = rt_cuda_alloc((size_t)n * V * rt_dtype_stat_bytes(dt));
    void *dl = rt_cuda_alloc((size_t)n * V * ab);
    int rc = -1;
    if (out && dout && emb && demb && logits && dl) {
        rt_cuda_fill(g, out, (size_t)n * H, dt, 1, 1.0);
        rt_cuda_zero(g, emb, rt_param_block_bytes(vh, dt)); /* values do not change the time */
        rt_cuda_zero(g, demb, rt_grad_block_bytes(vh, dt));
        rc = time_fwd_bwd(
            g, repeats, [&] { rt_cuda_lm_head_fwd(g, NULL, NULL, out, emb, logits, dl, n, H, V, 0, dt); },
            [&] { rt_cuda_lm_head_bwd(g, NULL, dl, emb, out, dout, demb, n, H, V, dt); }, fwd_ms,
            bwd_ms);
    }
    rt_cuda_free(out), rt_cuda_free(dout), rt_cuda_free(emb), rt_cuda_free(demb);
    rt_cuda_free(logits), rt_cuda_free(dl);
    return rc;
}
