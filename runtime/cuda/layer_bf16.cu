// The bf16 layers of layer_cuda.h: the same pre-LN blocks as runtime/layer.c at training
// precision. GEMMs on cuBLASLt (bf16 operands, fp32 accumulation, the bias in the epilogue,
// residual adds as its C operand, weight gradients accumulated into fp32); layer norm, GELU and
// the loss in small kernels (bf16 in and out, fp32 arithmetic and statistics); attention on
// cuDNN's fused scaled-dot-product attention graph where cuDNN builds it, else on cuBLASLt
// batched GEMMs and a softmax kernel; either way only the log-sum-exp of the softmax is saved and
// the backward recomputes the probabilities. Buffers are laid out as runtime/layout.h says for
// RT_BF16.
#include "cuda_ctx.h"

#include <cuda_bf16.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef __nv_bfloat16 bf16;


// ---- cuBLASLt ---------------------------------------------------------------------------------

// One GEMM configuration: its descriptors and the algorithm the heuristics chose.
struct lt_plan {
    int ta, tb, M, N, K, lda, ldb, ldc, batch, bias, align;
    long long sa, sb, sc;
    cudaDataType_t ct;
    cublasLtMatmulDesc_t op;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
    int ok;
};

static void lt_plan_free(lt_plan *p)
{
    if (p->op) cublasLtMatmulDescDestroy(p->op);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    memset(p, 0, sizeof *p);
}

// The largest power of two up to 256 that divides every pointer: what cuBLASLt may assume.
static int alignment_of(const void *a, const void *b, const void *c, const void *d, const void *e)
{
    uintptr_t x = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e | 256;
    return (int)(x & (~x + 1));
}

static cublasLtMatrixLayout_t lt_layout(cudaDataType_t t, int rows, int cols, int ld, int batch,
                                        long long stride)
{
    cublasLtMatrixLayout_t l = NULL;
    if (cublasLtMatrixLayoutCreate(&l, t, (uint64_t)rows, (uint64_t)cols, ld) != CUBLAS_STATUS_SUCCESS)
        return NULL;
    if (batch > 1) {
        int32_t n = batch;
        int64_t s = stride;
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &n, sizeof n);
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &s, sizeof s);
    }
    return l;
}

// Builds plan p (its key fields set): row-major C (M x N) = op(A) (M x K) op(B) (K x N) is
// column-major C^T = op(B)^T op(A)^T, so cuBLASLt's first operand is B and its second A.
static int lt_plan_build(rt_cuda *g, lt_plan *p)
{
    cublasOperation_t opa = p->tb ? CUBLAS_OP_T : CUBLAS_OP_N, opb = p->ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F) != CUBLAS_STATUS_SUCCESS)
        return -1;
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa);
    cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb);
    if (p->bias) {
        cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
        int32_t bt = CUDA_R_16BF;
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
        cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt);
    }
    p->la = lt_layout(CUDA_R_16BF, p->tb ? p->K : p->N, p->tb ? p->N : p->K, p->ldb, p->batch, p->sb);
    p->lb = lt_layout(CUDA_R_16BF, p->ta ? p->M : p->K, p->ta ? p->K : p->M, p->lda, p->batch, p->sa);
    p->lc = lt_layout(p->ct, p->N, p->M, p->ldc, p->batch, p->sc);
    if (!p->la || !p->lb || !p->lc) return -1;
    cublasLtMatmulPreference_t pref = NULL;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS) return -1;
    uint64_t ws = LT_WORKSPACE_BYTES;
    uint32_t al = (uint32_t)p->align;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(g->lt, p->op, p->la, p->lb, p->lc, p->lc,
                                                       pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (st != CUBLAS_STATUS_SUCCESS || found == 0) return -1;
    p->algo = res.algo;
    p->ok = 1;
    return 0;
}

// The cached plan of a configuration (built on first use); NULL when cuBLASLt has none.
static lt_plan *lt_plan_get(rt_cuda *g, const lt_plan *key)
{
    for (int i = 0; i < g->n_lt; i++) {
        lt_plan *p = &g->lt_cache[i];
        if (p->M == key->M && p->ta == key->ta && p->tb == key->tb && p->N == key->N &&
            p->K == key->K && p->lda == key->lda && p->ldb == key->ldb && p->ldc == key->ldc &&
            p->batch == key->batch && p->bias == key->bias && p->align == key->align &&
            p->sa == key->sa && p->sb == key->sb && p->sc == key->sc && p->ct == key->ct)
            return p->ok ? p : NULL;
    }
    int slot = g->n_lt < LT_CACHE ? g->n_lt++ : (int)((unsigned)key->M * 7919u % LT_CACHE);
    lt_plan *p = &g->lt_cache[slot];
    lt_plan_free(p);
    g->lt_built++;
    *p = *key;
    p->op = NULL, p->la = p->lb = p->lc = NULL, p->ok = 0;
    return lt_plan_build(g, p) == 0 ? p : NULL;
}

// Row-major C (M x N, ldc) = alpha op(A) op(B) + beta Cin (+ bias (N) when not NULL), A and B
// bf16, C and Cin of type ct (CUDA_R_16BF or CUDA_R_32F), `batch` of them at the given element
// strides. Cin may be C; beta 0 ignores it. A GEMM cuBLASLt has no algorithm for is left undone
// and noted in g->fail, which the next rt_cuda_sync (or rt_cuda_query) reports.
static void lt_gemm(rt_cuda *g, int ta, int tb, int M, int N, int K, float alpha, const bf16 *A,
                    int lda, long long sa, const bf16 *B, int ldb, long long sb, float beta,
                    const void *Cin, void *C, int ldc, long long sc, cudaDataType_t ct,
                    const bf16 *bias, int batch)
{
    if (M <= 0 || N <= 0 || batch <= 0) return;
    if (!Cin) Cin = C;
    lt_plan key;
    memset(&key, 0, sizeof key);
    key.ta = ta, key.tb = tb, key.M = M, key.N = N, key.K = K, key.lda = lda, key.ldb = ldb;
    key.ldc = ldc, key.batch = batch, key.bias = bias != NULL, key.sa = sa, key.sb = sb;
    key.sc = sc, key.ct = ct, key.align = alignment_of(A, B, Cin, C, bias);
    lt_plan *p = lt_plan_get(g, &key);
    if (!p) { // the next rt_cuda_sync reports it
        if (!g->fail[0])
            snprintf(g->fail, sizeof g->fail, "cuBLASLt has no bf16 algorithm for a %d x %d x %d "
                     "GEMM (batch %d)", M, N, K, batch);
        return;
    }
    if (bias) cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias);
    cublasLtMatmul(g->lt, p->op, &alpha, B, p->la, A, p->lb, &beta, Cin, p->lc, C, p->lc, &p->algo,
                   g->lt_ws, LT_WORKSPACE_BYTES, g->stream);
}

// The common single GEMM: C = op(A) op(B) (+ beta C) with bf16 C.
static void gemm(rt_cuda *g, int ta, int tb, int M, int N, int K, const bf16 *A, int lda,
                 const bf16 *B, int ldb, float beta, bf16 *C, int ldc)
{
    lt_gemm(g, ta, tb, M, N, K, 1.0f, A, lda, 0, B, ldb, 0, beta, C, C, ldc, 0, CUDA_R_16BF, NULL, 1);
}

// ---- kernels ----------------------------------------------------------------------------------

__global__ void k_fill_bf16(bf16 *v, long long n, long long first, unsigned seed, double scale)
{
    GRID_STRIDE(i, n) v[i] = __float2bfloat16((float)RT_FILL_VALUE(first + i, seed, scale));
}

// ---- attention on GEMMs and a softmax kernel (the path where cuDNN is not used) -------------

// Query i of sq in a causal attention sees keys 0 .. i + sk - sq (bottom-right aligned: a
// context-parallel piece's queries start at position sk - sq of their sample, layer.h rt_cp;
// without CP sk = sq, as layer.c).
__device__ inline int last_key(int i, int sq, int sk, int causal)
{
    return causal ? (i + sk - sq < sk ? i + sk - sq : sk - 1) : sk - 1;
}

// Rows of sk scores s (fp32, unscaled): p (bf16) = softmax(scale * s, masked), lse (fp32) the
// log-sum-exp of each row's scaled scores. One block per row; row r is query r % sq.
__global__ void k_attn_softmax(const float *s, bf16 *p, float *lse, int sq, int sk, int causal,
                               float scale)
{
    long long row = blockIdx.x;
    int i = (int)(row % sq), last = last_key(i, sq, sk, causal);
    const float *sr = s + row * sk;
    bf16 *pr = p + row * sk;
    float mx = -INFINITY, sum = 0;
    for (int j = threadIdx.x; j <= last; j += THREADS) mx = fmaxf(mx, sr[j] * scale);
    mx = block_max(mx);
    for (int j = threadIdx.x; j <= last; j += THREADS) sum += expf(sr[j] * scale - mx);
    sum = block_sum(sum);
    for (int j = threadIdx.x; j < sk; j += THREADS)
        pr[j] = __float2bfloat16(j <= last ? expf(sr[j] * scale - mx) / sum : 0.0f);
    if (threadIdx.x == 0) lse[row] = mx + logf(sum);
}

// The probabilities again from the scores and the saved log-sum-exp.
__global__ void k_attn_recompute(const float *s, const float *lse, bf16 *p, int sq, int sk,
                                 int causal, float scale)
{
    long long row = blockIdx.x;
    int i = (int)(row % sq), last = last_key(i, sq, sk, causal);
    float l = lse[row];
    for (int j = threadIdx.x; j < sk; j += THREADS)
        p[row * sk + j] = __float2bfloat16(j <= last ? expf(s[row * sk + j] * scale - l) : 0.0f);
}

// D[h * sq + i] = sum over the head's d columns of dO o O for query i (rows of ld elements, head
// h at column h * d): the softmax backward's row sums, as rowsum(dP o P) = rowsum(dO o O).
__global__ void k_attn_rowdot(const bf16 *dout, const bf16 *out, int ld, int d, int sq, float *D)
{
    long long r = blockIdx.x; // h * sq + i
    int h = (int)(r / sq), i = (int)(r % sq);
    const bf16 *a = dout + (long long)i * ld + (long long)h * d, *b = out + (long long)i * ld + (long long)h * d;
    float s = 0;
    for (int c = threadIdx.x; c < d; c += THREADS) s += __bfloat162float(a[c]) * __bfloat162float(b[c]);
    s = block_sum(s);
    if (threadIdx.x == 0) D[r] = s;
}

// dS (bf16) = P o (dP - D) * scale, row by row.
__global__ void k_attn_dsoftmax(const float *dp, const bf16 *p, const float *D, bf16 *ds, int sk,
                                float scale)
{
    long long row = blockIdx.x;
    float dr = D[row];
    for (int j = threadIdx.x; j < sk; j += THREADS) {
        long long k = row * sk + j;
        ds[k] = __float2bfloat16(__bfloat162float(p[k]) * (dp[k] - dr) * scale);
    }
}

// An attention GEMM over a query heads on gk key/value heads (layout.h rt_head_step_of), C read
// and written in place (type ct): sa, sb, sc are the elements from one head to the next, kv_side
// (RT_HEADS_KV_*) says which operands are on the key/value heads.
static void lt_gemm_heads(rt_cuda *g, int ta, int tb, int M, int N, int K, float alpha,
                          const bf16 *A, int lda, long long sa, const bf16 *B, int ldb,
                          long long sb, float beta, void *C, int ldc, long long sc,
                          cudaDataType_t ct, int a, int gk, int kv_side)
{
    int r = a / gk;
    size_t cb = ct == CUDA_R_32F ? sizeof(float) : sizeof(bf16);
    for (int i = 0; i < r; i++) {
        rt_head_step ha = rt_head_step_of(i, r, sa, kv_side & RT_HEADS_KV_A);
        rt_head_step hb = rt_head_step_of(i, r, sb, kv_side & RT_HEADS_KV_B);
        rt_head_step hc = rt_head_step_of(i, r, sc, kv_side & RT_HEADS_KV_C);
        char *c = (char *)C + hc.off * cb;
        lt_gemm(g, ta, tb, M, N, K, alpha, A + ha.off, lda, ha.stride, B + hb.off, ldb, hb.stride,
                beta, c, c, ldc, hc.stride, ct, NULL, gk);
    }
}

// The largest lq * lk of the call's paired sequences (the scratch of one sequence's scores).
static long long max_pair(const attn_io *x)
{
    long long m = 0;
    for (int j = 0; j < x->qs->n; j++)
        if ((long long)x->qs->len[j] * x->ks->len[j] > m) m = (long long)x->qs->len[j] * x->ks->len[j];
    return m;
}

static void gemm_attn_fwd(rt_cuda *g, const attn_io *x)
{
    float scale = 1.0f / sqrtf((float)x->d);
    long long most = max_pair(x);
    int ldo = x->a * x->d;
    float *s = NULL;
    bf16 *p = NULL;
    cudaMallocAsync((void **)&s, (size_t)(x->a * most + 1) * sizeof *s, g->stream);
    cudaMallocAsync((void **)&p, (size_t)(x->a * most + 1) * sizeof *p, g->stream);
    if (!s || !p) goto out;
    for (int j = 0; j < x->qs->n; j++) {
        int sq = x->qs->len[j], sk = x->ks->len[j];
        long long pp = (long long)sq * sk, qo = x->qs->off[j], ko = x->ks->off[j];
        if (pp == 0) continue;
        bf16 *o = x->o + qo * ldo;
        lt_gemm_heads(g, 0, 1, sq, sk, x->d, 1.0f, x->q + qo * x->ldq, x->ldq, x->d,
                      x->k + ko * x->ldkv, x->ldkv, x->d, 0.0f, s, sk, pp, CUDA_R_32F, x->a, x->g,
                      RT_HEADS_KV_B);
        k_attn_softmax<<<x->a * sq, THREADS, 0, g->stream>>>(s, p, x->lse + qo * x->a, sq, sk,
                                                              x->causal, scale);
        lt_gemm_heads(g, 0, 0, sq, x->d, sk, 1.0f, p, sk, pp, x->v + ko * x->ldkv, x->ldkv, x->d,
                      0.0f, o, ldo, x->d, CUDA_R_16BF, x->a, x->g, RT_HEADS_KV_B);
    }
out:
    if (s) cudaFreeAsync(s, g->stream);
    if (p) cudaFreeAsync(p, g->stream);
}

// The backward adds into dq, dk, dv (which the caller zeroed).
static void gemm_attn_bwd(rt_cuda *g, const attn_io *x)
{
    float scale = 1.0f / sqrtf((float)x->d);
    long long most = max_pair(x);
    int ldo = x->a * x->d, most_q = 0;
    for (int j = 0; j < x->qs->n; j++) most_q = x->qs->len[j] > most_q ? x->qs->len[j] : most_q;
    float *s = NULL, *dp = NULL, *D = NULL;
    bf16 *p = NULL, *ds = NULL;
    size_t n = (size_t)(x->a * most + 1);
    cudaMallocAsync((void **)&s, n * sizeof *s, g->stream);
    cudaMallocAsync((void **)&dp, n * sizeof *dp, g->stream);
    cudaMallocAsync((void **)&p, n * sizeof *p, g->stream);
    cudaMallocAsync((void **)&ds, n * sizeof *ds, g->stream);
    cudaMallocAsync((void **)&D, (size_t)(x->a * most_q + 1) * sizeof *D, g->stream);
    if (!s || !dp || !p || !ds || !D) goto out;
    for (int j = 0; j < x->qs->n; j++) {
        int sq = x->qs->len[j], sk = x->ks->len[j];
        long long pp = (long long)sq * sk, q0 = x->qs->off[j], k0 = x->ks->off[j];
        if (pp == 0) continue;
        long long qo = q0 * x->ldq, ko = k0 * x->ldkv, oo = q0 * ldo;
        const bf16 *dob = x->dout + oo;
        k_attn_rowdot<<<x->a * sq, THREADS, 0, g->stream>>>(dob, x->o + oo, ldo, x->d, sq, D);
        lt_gemm_heads(g, 0, 1, sq, sk, x->d, 1.0f, x->q + qo, x->ldq, x->d, x->k + ko, x->ldkv,
                      x->d, 0.0f, s, sk, pp, CUDA_R_32F, x->a, x->g, RT_HEADS_KV_B); // S again
        k_attn_recompute<<<x->a * sq, THREADS, 0, g->stream>>>(s, x->lse + q0 * x->a, p, sq, sk,
                                                                x->causal, scale);
        // dV += P^T dO; dP = dO V^T; dS; dQ += dS K; dK += dS^T Q
        lt_gemm_heads(g, 1, 0, sk, x->d, sq, 1.0f, p, sk, pp, dob, ldo, x->d, 1.0f, x->dv + ko,
                      x->ldkv, x->d, CUDA_R_16BF, x->a, x->g, RT_HEADS_KV_C);
        lt_gemm_heads(g, 0, 1, sq, sk, x->d, 1.0f, dob, ldo, x->d, x->v + ko, x->ldkv, x->d, 0.0f,
                      dp, sk, pp, CUDA_R_32F, x->a, x->g, RT_HEADS_KV_B);
        k_attn_dsoftmax<<<x->a * sq, THREADS, 0, g->stream>>>(dp, p, D, ds, sk, scale);
        lt_gemm_heads(g, 0, 0, sq, x->d, sk, 1.0f, ds, sk, pp, x->k + ko, x->ldkv, x->d, 1.0f,
                      x->dq + qo, x->ldq, x->d, CUDA_R_16BF, x->a, x->g, RT_HEADS_KV_B);
        lt_gemm_heads(g, 1, 0, sk, x->d, sq, 1.0f, ds, sk, pp, x->q + qo, x->ldq, x->d, 1.0f,
                      x->dk + ko, x->ldkv, x->d, CUDA_R_16BF, x->a, x->g, RT_HEADS_KV_C);
    }
out:
    if (s) cudaFreeAsync(s, g->stream);
    if (dp) cudaFreeAsync(dp, g->stream);
    if (p) cudaFreeAsync(p, g->stream);
    if (ds) cudaFreeAsync(ds, g->stream);
    if (D) cudaFreeAsync(D, g->stream);
}

// ---- attention on cuDNN's fused SDPA (the backend graph API) ---------------------------------

// The path of the last attention; why cuDNN was not used only when it was not (an earlier
// call's refusal does not describe a later call that cuDNN ran).
static void note_path(rt_cuda *g, int fwd_cudnn, int bwd_cudnn)
{
    char buf[sizeof g->attn_path];
    const char *why = g->attn_mode == RT_ATTN_GEMM ? "the GEMM path was asked for" : g->dnn_why;
    int say = (!fwd_cudnn || !bwd_cudnn) && why[0];
    snprintf(buf, sizeof buf, "forward %s, backward %s%s%s%s", fwd_cudnn ? "cudnn-sdpa" : "gemm-softmax",
             bwd_cudnn ? "cudnn-sdpa" : "gemm-softmax", say ? " (cuDNN: " : "", say ? why : "",
             say ? ")" : "");
    memcpy(g->attn_path, buf, sizeof buf);
}

// Context-parallel pieces (queries with positions, rt_seqs.pos) run on the GEMM path: cuDNN's
// causal mask is top-left aligned, the pieces' is bottom-right.
static int gemm_only(const rt_cuda *g, const attn_io *x)
{
    return g->attn_mode == RT_ATTN_GEMM || x->qs->pos;
}

static void attn_fwd(rt_cuda *g, const attn_io *x)
{
    if (!gemm_only(g, x) && rt_sdpa_fwd(g, x) == 0) {
        g->last_fwd_cudnn = 1;
        return;
    }
    g->last_fwd_cudnn = 0;
    gemm_attn_fwd(g, x);
}

static void attn_bwd(rt_cuda *g, const attn_io *x)
{
    int bwd_cudnn = !gemm_only(g, x) && rt_sdpa_bwd(g, x) == 0;
    if (!bwd_cudnn) gemm_attn_bwd(g, x);
    note_path(g, g->last_fwd_cudnn, bwd_cudnn);
}

// ---- the layer ----------------------------------------------------------------------------------

// Device pointers of a bf16 layer: the parameters' bf16 copies, their fp32 gradients and the
// saved activations, at layout.h's offsets.
struct bview {
    const bf16 *w[RT_P_COUNT];
    float *gw[RT_P_COUNT];
    rt_acts_layout L;
    char *acts;
};

// The parameters' pointers of a layer of shape s: into a parameter block's bf16 copy (params)
// and into a gradient block (grads); either may be NULL (its pointers are then NULL).
static void view_params(const rt_layer_shape *s, const void *params, void *grads, bview *v)
{
    size_t off[RT_P_COUNT], len[RT_P_COUNT], count;
    rt_layer_params_layout(s, off, len, &count);
    const bf16 *copy = params ? (const bf16 *)((const char *)params + rt_param_copy_offset(count, RT_BF16)) : NULL;
    for (int i = 0; i < RT_P_COUNT; i++) { // an absent tensor (length 0: a bias the shape has not) is NULL
        v->w[i] = copy && len[i] ? copy + off[i] : NULL;
        v->gw[i] = grads && len[i] ? (float *)grads + off[i] : NULL;
    }
}

static void view_acts(const rt_layer_shape *s, int B, int S, int Se, const void *acts, bview *v)
{
    rt_layer_acts_layout(s, B, S, Se, RT_BF16, &v->L);
    v->acts = (char *)acts;
}

// A saved tensor (bf16, or fp32 statistics), NULL when the shape has none (RMSNorm's mean).
static bf16 *A(const bview *v, int id) { return v->L.bytes[id] ? (bf16 *)(v->acts + v->L.off[id]) : NULL; }
static float *AF(const bview *v, int id) { return v->L.bytes[id] ? (float *)(v->acts + v->L.off[id]) : NULL; }

// y (n, out) = x (n, in) W (in, out) + b (NULL: none), plus res (n, out) when not NULL.
static void linear(rt_cuda *g, const bf16 *x, const bf16 *w, const bf16 *b, const bf16 *res,
                   bf16 *y, int n, int in, int out)
{
    lt_gemm(g, 0, 0, n, out, in, 1.0f, x, in, 0, w, out, 0, res ? 1.0f : 0.0f, res ? res : y, y,
            out, 0, CUDA_R_16BF, b, 1);
}

// dW (in, out, fp32) += x^T dy; db += column sums of dy (db NULL: no bias).
static void linear_bwd_weight(rt_cuda *g, const bf16 *x, const bf16 *dy, float *dw, float *db,
                              int n, int in, int out)
{
    lt_gemm(g, 1, 0, in, out, n, 1.0f, x, in, 0, dy, out, 0, 1.0f, dw, dw, out, 0, CUDA_R_32F, NULL, 1);
    if (db) colsum(g, db, dy, n, out);
}

// The attention of one pass: queries qs against keys ks (the batch's sequences), B rows of sq
// and sk tokens when they are whole rows.
static attn_io attn_of(const rt_cuda_layer *l, const rt_batch_seqs *bs, const rt_seqs *ks, int B,
                       int sq, int sk, int causal, int ldq, int ldkv)
{
    attn_io x;
    memset(&x, 0, sizeof x);
    x.qs = &bs->self, x.ks = ks, x.rows = bs->rows, x.B = B, x.sq = sq, x.sk = sk;
    x.a = l->shape.heads, x.g = rt_layer_kv_heads(&l->shape), x.d = l->shape.kv;
    x.causal = causal, x.ldq = ldq, x.ldkv = ldkv;
    return x;
}

// The self-attention and (cross layers) the attention to the encoder output of a layer, on its
// saved projections, output and log-sum-exp: for the forward, selective recompute's rerun and
// (with the gradients set) the backward.
static attn_io self_io(const rt_cuda_layer *l, const rt_batch *mb, const rt_batch_seqs *bs,
                       const bview *v, int B, int S)
{
    int hk = rt_layer_q_width(&l->shape), hkv = rt_layer_kv_width(&l->shape);
    int qkv_w = rt_layer_qkv_width(&l->shape);
    bf16 *qkv = A(v, RT_A_QKV);
    attn_io x = attn_of(l, bs, &bs->self, B, S, S, l->shape.causal, qkv_w, qkv_w);
    x.q = qkv, x.k = qkv + hk, x.v = qkv + hk + hkv, x.o = A(v, RT_A_CTX), x.lse = AF(v, RT_A_P);
    if (cp_on(mb->cp)) { // this rank's pieces against the gathered keys and values (layer.h rt_cp)
        bf16 *kvg = A(v, RT_A_KVG);
        x.qs = &mb->cp->q, x.ks = &mb->cp->k, x.rows = 0, x.ldkv = 2 * hkv;
        x.k = kvg, x.v = kvg + hkv;
    }
    return x;
}

static attn_io cross_io(const rt_cuda_layer *l, const rt_batch_seqs *bs, const bview *v, int B,
                        int S, int Se)
{
    int hk = rt_layer_q_width(&l->shape), hkv = rt_layer_kv_width(&l->shape);
    bf16 *kvc = A(v, RT_A_KVC);
    attn_io x = attn_of(l, bs, &bs->enc, B, S, Se, 0, hk, 2 * hkv);
    x.q = A(v, RT_A_QC), x.k = kvc, x.v = kvc + hkv, x.o = A(v, RT_A_CTXC), x.lse = AF(v, RT_A_PC);
    return x;
}

// The forward of an attention whose output starts at zero (padding tokens attend to nothing).
static void attn_fwd_zeroed(rt_cuda *g, const attn_io *x, int n, int hk)
{
    cudaMemsetAsync(x->o, 0, (size_t)n * hk * sizeof(bf16), g->stream);
    attn_fwd(g, x);
}

void rt_bf16_layer_recompute_attention(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb,
                                       void *acts)
{
    bview v;
    view_params(&l->shape, NULL, NULL, &v);
    view_acts(&l->shape, mb->B, mb->S, mb->Se, acts, &v);
    rt_batch_seqs bs;
    rt_batch_seqs_init(&bs, mb);
    int n = rt_cp_tokens(mb->cp, mb->B * mb->S), hk = rt_layer_q_width(&l->shape);
    attn_io self = self_io(l, mb, &bs, &v, mb->B, mb->S);
    attn_fwd_zeroed(g, &self, n, hk);
    if (l->shape.cross) {
        attn_io cross = cross_io(l, &bs, &v, mb->B, mb->S, mb->Se);
        attn_fwd_zeroed(g, &cross, n, hk);
    }
    rt_batch_seqs_free(&bs);
}

void rt_bf16_layer_fwd(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb, const void *x,
                       void *y, void *acts, const void *enc)
{
    int B = mb->B, S = mb->S, Se = mb->Se;
    bview v;
    view_params(&l->shape, l->block, NULL, &v);
    view_acts(&l->shape, B, S, Se, acts, &v);
    rt_batch_seqs bs;
    rt_batch_seqs_init(&bs, mb);
    // under CP this rank's tokens (layer.h rt_cp)
    int n = rt_cp_tokens(mb->cp, B * S), h = l->shape.hidden, hk = rt_layer_q_width(&l->shape);
    int hkv = rt_layer_kv_width(&l->shape), qkv_w = rt_layer_qkv_width(&l->shape), f = l->shape.ffn;
    // Under TP (layer_cuda.h rt_cuda_tp) the row-parallel projections' partial sums meet before
    // the residual add, which the epilogue then cannot take; with SP the norms and residual adds
    // run on this rank's nl tokens, and full is a whole-sequence scratch (layer.c rt_layer_fwd)
    const rt_cuda_tp *tp = l->tp;
    int on = tp_on(tp), nl = rt_cuda_tp_tokens(tp, n);
    long long nh = (long long)n * h, nlh = (long long)nl * h;
    bf16 *full = NULL, *x_ = A(&v, RT_A_X), *x2 = A(&v, RT_A_X2);
    if (tp_sp(tp)) cudaMallocAsync((void **)&full, (size_t)nh * sizeof(bf16), g->stream);
    cudaMemcpyAsync(x_, x, nlh * sizeof(bf16), cudaMemcpyDeviceToDevice, g->stream);
    norm_fwd(g, &l->shape, x_, v.w[RT_P_LN1_G], v.w[RT_P_LN1_B], full ? full : A(&v, RT_A_H1),
             AF(&v, RT_A_MEAN1), AF(&v, RT_A_RSTD1), nl);
    if (full) tp_gather(g, tp, full, A(&v, RT_A_H1), (size_t)nlh);
    linear(g, A(&v, RT_A_H1), v.w[RT_P_WQKV], v.w[RT_P_BQKV], NULL, A(&v, RT_A_QKV), n, h, qkv_w);
    bf16 *qkv = A(&v, RT_A_QKV);
    if (l->shape.rope_base > 0) rope_pass(g, &l->shape, self_queries(mb, &bs), S, qkv, n, 0); // the saved q, k rotated
    if (cp_on(mb->cp)) cp_gather_kv(g, mb->cp, l->cp_group, (const bf16 *)qkv, hk, hkv, qkv_w, A(&v, RT_A_KVG));
    attn_io self = self_io(l, mb, &bs, &v, B, S);
    attn_fwd_zeroed(g, &self, n, hk);
    linear(g, A(&v, RT_A_CTX), v.w[RT_P_WO], bias_once(tp, v.w[RT_P_BO]), on ? NULL : x_,
           full ? full : x2, n, hk, h);
    if (on) {
        tp_reduce(g, tp, full ? full : x2, x2, (size_t)nh);
        k_add<bf16><<<grid_for(nlh), THREADS, 0, g->stream>>>(x2, x_, nlh);
    }
    if (l->shape.cross) { // xc = the self-attention block's output; x2 = xc + cross-attention
        cudaMemcpyAsync(A(&v, RT_A_XC), A(&v, RT_A_X2), nh * sizeof(bf16), cudaMemcpyDeviceToDevice,
                        g->stream);
        norm_fwd(g, &l->shape, A(&v, RT_A_XC), v.w[RT_P_LNC_G], v.w[RT_P_LNC_B], A(&v, RT_A_HC),
                 AF(&v, RT_A_MEANC), AF(&v, RT_A_RSTDC), n);
        linear(g, A(&v, RT_A_HC), v.w[RT_P_WQC], v.w[RT_P_BQC], NULL, A(&v, RT_A_QC), n, h, hk);
        linear(g, (const bf16 *)enc, v.w[RT_P_WKVC], v.w[RT_P_BKVC], NULL, A(&v, RT_A_KVC), B * Se,
               h, 2 * hkv);
        attn_io cross = cross_io(l, &bs, &v, B, S, Se);
        attn_fwd_zeroed(g, &cross, n, hk);
        linear(g, A(&v, RT_A_CTXC), v.w[RT_P_WOC], v.w[RT_P_BOC], A(&v, RT_A_XC), A(&v, RT_A_X2), n,
               hk, h);
    }
    norm_fwd(g, &l->shape, x2, v.w[RT_P_LN2_G], v.w[RT_P_LN2_B], full ? full : A(&v, RT_A_H2),
             AF(&v, RT_A_MEAN2), AF(&v, RT_A_RSTD2), nl);
    if (full) tp_gather(g, tp, full, A(&v, RT_A_H2), (size_t)nlh);
    linear(g, A(&v, RT_A_H2), v.w[RT_P_W1], v.w[RT_P_B1], NULL, A(&v, RT_A_U), n, h,
           rt_layer_ffn_in(&l->shape));
    mlp_act_fwd(g, &l->shape, A(&v, RT_A_U), A(&v, RT_A_G), n);
    linear(g, A(&v, RT_A_G), v.w[RT_P_W2], bias_once(tp, v.w[RT_P_B2]), on ? NULL : x2,
           full ? full : (bf16 *)y, n, f, h);
    if (on) {
        tp_reduce(g, tp, full ? full : (bf16 *)y, (bf16 *)y, (size_t)nh);
        k_add<bf16><<<grid_for(nlh), THREADS, 0, g->stream>>>((bf16 *)y, x2, nlh);
    }
    if (full) cudaFreeAsync(full, g->stream);
    rt_batch_seqs_free(&bs);
}

void rt_bf16_layer_bwd_input(rt_cuda *g, const rt_cuda_layer *l, rt_cuda_layer *grad,
                             const rt_batch *mb, const void *dy_, void *dx_, void *acts, void *denc_)
{
    int B = mb->B, S = mb->S, Se = mb->Se;
    bview v;
    view_params(&l->shape, l->block, grad->block, &v);
    view_acts(&l->shape, B, S, Se, acts, &v);
    rt_batch_seqs bs;
    rt_batch_seqs_init(&bs, mb);
    const bf16 *dy = (const bf16 *)dy_;
    bf16 *dx = (bf16 *)dx_, *denc = (bf16 *)denc_;
    const rt_cp *cp = cp_on(mb->cp) ? mb->cp : NULL;
    int n = rt_cp_tokens(cp, B * S), h = l->shape.hidden, hk = rt_layer_q_width(&l->shape);
    int hkv = rt_layer_kv_width(&l->shape), qkv_w = rt_layer_qkv_width(&l->shape), ne = B * Se;
    int f = l->shape.ffn;
    int f1 = rt_layer_ffn_in(&l->shape);
    // under TP (layer.c rt_layer_bwd_input): the partial input gradients meet before the norms;
    // with SP dnorm and d_o hold this rank's tokens of a norm's input gradient and of
    // d(attention out), otherwise they are tmp_h and the saved d_o
    const rt_cuda_tp *tp = l->tp;
    int nl = rt_cuda_tp_tokens(tp, n), sp = tp_sp(tp);
    long long nh = (long long)n * h, nlh = (long long)nl * h;
    bf16 *tmp_f = NULL, *tmp_h = NULL, *dctx = NULL, *dnorm = NULL, *d_o = NULL;
    bf16 *dkvg = NULL; // CP: the whole micro-batch's key/value gradients of this rank's queries
    if (cp) cudaMallocAsync((void **)&dkvg, (size_t)B * S * 2 * hkv * sizeof(bf16), g->stream);
    cudaMallocAsync((void **)&tmp_f, (size_t)n * f * sizeof(bf16), g->stream);
    cudaMallocAsync((void **)&tmp_h, (size_t)nh * sizeof(bf16), g->stream);
    cudaMallocAsync((void **)&dctx, (size_t)n * hk * sizeof(bf16), g->stream);
    if (sp) {
        cudaMallocAsync((void **)&dnorm, (size_t)nlh * sizeof(bf16), g->stream);
        cudaMallocAsync((void **)&d_o, (size_t)nlh * sizeof(bf16), g->stream);
    } else {
        dnorm = tmp_h, d_o = A(&v, RT_A_D_O);
    }
    if (!tmp_f || !tmp_h || !dctx || !dnorm || !d_o || (cp && !dkvg)) goto out;
    tp_gather(g, tp, dy, A(&v, RT_A_D_Y), (size_t)nlh); // W2's output gradient, whole
    gemm(g, 0, 1, n, f, h, A(&v, RT_A_D_Y), h, v.w[RT_P_W2], h, 0.0f, tmp_f, f); // dg = dy W2^T
    mlp_act_bwd(g, &l->shape, tmp_f, A(&v, RT_A_U), A(&v, RT_A_D_U), n);
    gemm(g, 0, 1, n, h, f1, A(&v, RT_A_D_U), f1, v.w[RT_P_W1], f1, 0.0f, tmp_h, h); // dh2, partial
    tp_reduce(g, tp, tmp_h, dnorm, (size_t)nh);
    norm_bwd(g, &l->shape, dnorm, A(&v, RT_A_X2), v.w[RT_P_LN2_G], AF(&v, RT_A_MEAN2),
             AF(&v, RT_A_RSTD2), d_o, v.gw[RT_P_LN2_G], v.gw[RT_P_LN2_B], nl);
    k_add<bf16><<<grid_for(nlh), THREADS, 0, g->stream>>>(d_o, dy, nlh); // dx2
    if (l->shape.cross) { // back through the cross-attention: d_o becomes d(self-attention out)
        cudaMemcpyAsync(A(&v, RT_A_D_OC), A(&v, RT_A_D_O), nh * sizeof(bf16), cudaMemcpyDeviceToDevice,
                        g->stream);
        gemm(g, 0, 1, n, hk, h, A(&v, RT_A_D_OC), h, v.w[RT_P_WOC], h, 0.0f, dctx, hk);
        cudaMemsetAsync(A(&v, RT_A_D_QC), 0, (size_t)n * hk * sizeof(bf16), g->stream);
        cudaMemsetAsync(A(&v, RT_A_D_KVC), 0, (size_t)ne * 2 * hkv * sizeof(bf16), g->stream);
        bf16 *dkvc = A(&v, RT_A_D_KVC);
        attn_io cross = cross_io(l, &bs, &v, B, S, Se);
        cross.dout = dctx;
        cross.dq = A(&v, RT_A_D_QC), cross.dk = dkvc, cross.dv = dkvc + hkv;
        attn_bwd(g, &cross);
        gemm(g, 0, 1, n, h, hk, A(&v, RT_A_D_QC), hk, v.w[RT_P_WQC], hk, 0.0f, tmp_h, h); // d(hc)
        if (denc) // d(enc) += d_kvc Wkvc^T
            gemm(g, 0, 1, ne, h, 2 * hkv, dkvc, 2 * hkv, v.w[RT_P_WKVC], 2 * hkv, 1.0f, denc, h);
        norm_bwd(g, &l->shape, tmp_h, A(&v, RT_A_XC), v.w[RT_P_LNC_G], AF(&v, RT_A_MEANC),
                 AF(&v, RT_A_RSTDC), A(&v, RT_A_D_O), v.gw[RT_P_LNC_G], v.gw[RT_P_LNC_B], n);
        k_add<bf16><<<grid_for(nh), THREADS, 0, g->stream>>>(A(&v, RT_A_D_O), A(&v, RT_A_D_OC), nh);
    }
    tp_gather(g, tp, d_o, A(&v, RT_A_D_O), (size_t)nlh); // Wo's output gradient, whole
    gemm(g, 0, 1, n, hk, h, A(&v, RT_A_D_O), h, v.w[RT_P_WO], h, 0.0f, dctx, hk);
    cudaMemsetAsync(A(&v, RT_A_D_QKV), 0, (size_t)n * qkv_w * sizeof(bf16), g->stream);
    {
        bf16 *dqkv = A(&v, RT_A_D_QKV);
        attn_io self = self_io(l, mb, &bs, &v, B, S);
        self.dout = dctx;
        self.dq = dqkv, self.dk = dqkv + hk, self.dv = dqkv + hk + hkv;
        if (cp) { // the whole micro-batch's key/value gradients, then each rank's share
            cudaMemsetAsync(dkvg, 0, (size_t)B * S * 2 * hkv * sizeof(bf16), g->stream);
            self.dk = dkvg, self.dv = dkvg + hkv;
        }
        attn_bwd(g, &self);
        if (cp) cp_scatter_dkv(g, cp, l->cp_group, (const bf16 *)dkvg, hk, hkv, qkv_w, dqkv);
        if (l->shape.rope_base > 0) rope_pass(g, &l->shape, self_queries(mb, &bs), S, dqkv, n, 1); // d(rotated) to d(projected)
    }
    gemm(g, 0, 1, n, h, qkv_w, A(&v, RT_A_D_QKV), qkv_w, v.w[RT_P_WQKV], qkv_w, 0.0f, tmp_h, h); // dh1, partial
    tp_reduce(g, tp, tmp_h, dnorm, (size_t)nh);
    norm_bwd(g, &l->shape, dnorm, A(&v, RT_A_X), v.w[RT_P_LN1_G], AF(&v, RT_A_MEAN1),
             AF(&v, RT_A_RSTD1), dx, v.gw[RT_P_LN1_G], v.gw[RT_P_LN1_B], nl);
    k_add<bf16><<<grid_for(nlh), THREADS, 0, g->stream>>>(dx, d_o, nlh);
out:
    if (dkvg) cudaFreeAsync(dkvg, g->stream);
    if (sp && dnorm) cudaFreeAsync(dnorm, g->stream);
    if (sp && d_o) cudaFreeAsync(d_o, g->stream);
    if (tmp_f) cudaFreeAsync(tmp_f, g->stream);
    if (tmp_h) cudaFreeAsync(tmp_h, g->stream);
    if (dctx) cudaFreeAsync(dctx, g->stream);
    rt_batch_seqs_free(&bs);
}

void rt_bf16_layer_bwd_weight(rt_cuda *g, rt_cuda_layer *grad, const rt_batch *mb,
                              const void *acts, const void *enc)
{
    int B = mb->B, S = mb->S, Se = mb->Se;
    bview v;
    view_params(&grad->shape, NULL, grad->block, &v);
    view_acts(&grad->shape, B, S, Se, acts, &v);
    int n = rt_cp_tokens(mb->cp, B * S), h = grad->shape.hidden, hk = rt_layer_q_width(&grad->shape);
    int hkv = rt_layer_kv_width(&grad->shape), qkv_w = rt_layer_qkv_width(&grad->shape);
    int f = grad->shape.ffn;
    linear_bwd_weight(g, A(&v, RT_A_G), A(&v, RT_A_D_Y), v.gw[RT_P_W2], v.gw[RT_P_B2], n, f, h);
    linear_bwd_weight(g, A(&v, RT_A_H2), A(&v, RT_A_D_U), v.gw[RT_P_W1], v.gw[RT_P_B1], n, h,
                      rt_layer_ffn_in(&grad->shape));
    if (grad->shape.cross) {
        linear_bwd_weight(g, A(&v, RT_A_CTXC), A(&v, RT_A_D_OC), v.gw[RT_P_WOC], v.gw[RT_P_BOC], n, hk, h);
        linear_bwd_weight(g, A(&v, RT_A_HC), A(&v, RT_A_D_QC), v.gw[RT_P_WQC], v.gw[RT_P_BQC], n, h, hk);
        linear_bwd_weight(g, (const bf16 *)enc, A(&v, RT_A_D_KVC), v.gw[RT_P_WKVC], v.gw[RT_P_BKVC],
                          B * Se, h, 2 * hkv);
    }
    linear_bwd_weight(g, A(&v, RT_A_CTX), A(&v, RT_A_D_O), v.gw[RT_P_WO], v.gw[RT_P_BO], n, hk, h);
    linear_bwd_weight(g, A(&v, RT_A_H1), A(&v, RT_A_D_QKV), v.gw[RT_P_WQKV], v.gw[RT_P_BQKV], n, h, qkv_w);
}

// ---- the LM head, fills, GEMM timing ------------------------------------------------------------

// The bf16 copy of a parameter block of `count` elements.
static const bf16 *copy_of(const void *block, size_t count)
{
    return (const bf16 *)((const char *)block + rt_param_copy_offset(count, RT_BF16));
}

// Under TP (layer_cuda.h rt_cuda_tp) emb holds this rank's V / size rows of the vocabulary and
// logits and dlogits its columns (layer.c rt_lm_head_fwd_tp).
void rt_bf16_lm_head_fwd(rt_cuda *g, const rt_cuda_tp *tp, const rt_cp *cp, const void *out,
                         const void *emb, void *logits, void *dlogits, int n, int H, int V,
                         int target_offset)
{
    int Vl = tp_on(tp) ? V / tp->size : V;
    const int *rows = cp_rows_dev(g, cp);
    if (n <= 0 || (cp_on(cp) && !rows)) return; // (out of memory: noted in g->fail)
    lt_gemm(g, 0, 1, n, Vl, H, 1.0f, (const bf16 *)out, H, 0, copy_of(emb, (size_t)Vl * H), H, 0,
            0.0f, logits, logits, Vl, 0, CUDA_R_32F, NULL, 1);
    head_softmax<float, bf16>(g, tp, (const float *)logits, (bf16 *)dlogits, rows,
                              cp_mean_over(cp, n), n, V, target_offset);
}

void rt_bf16_lm_head_bwd(rt_cuda *g, const rt_cuda_tp *tp, const void *dlogits, const void *emb,
                         const void *out, void *dout, void *demb, int n, int H, int V)
{
    int Vl = tp_on(tp) ? V / tp->size : V;
    bf16 *partial = (bf16 *)dout; // this rank's vocabulary's share of d(out), whole tokens
    if (tp_sp(tp)) cudaMallocAsync((void **)&partial, (size_t)n * H * sizeof(bf16), g->stream);
    if (!partial) return; // left for rt_cuda_sync to report
    gemm(g, 0, 0, n, H, Vl, (const bf16 *)dlogits, Vl, copy_of(emb, (size_t)Vl * H), H, 0.0f,
         partial, H);
    tp_reduce(g, tp, partial, (bf16 *)dout, (size_t)n * H);
    if (partial != dout) cudaFreeAsync(partial, g->stream);
    lt_gemm(g, 1, 0, Vl, H, n, 1.0f, (const bf16 *)dlogits, Vl, 0, (const bf16 *)out, H, 0, 1.0f,
            demb, demb, H, 0, CUDA_R_32F, NULL, 1);
}

void rt_bf16_fill(rt_cuda *g, void *v, size_t n, size_t first, unsigned seed, double scale)
{
    k_fill_bf16<<<grid_for((long long)n), THREADS, 0, g->stream>>>((bf16 *)v, (long long)n,
                                                                    (long long)first, seed, scale);
}

int rt_bf16_time_gemm(rt_cuda *g, int M, int N, int K, int repeats, double *ms)
{
    bf16 *a = NULL, *b = NULL, *c = NULL;
    cudaMalloc((void **)&a, (size_t)M * K * sizeof(bf16));
    cudaMalloc((void **)&b, (size_t)K * N * sizeof(bf16));
    cudaMalloc((void **)&c, (size_t)M * N * sizeof(bf16));
    int rc = -1;
    if (a && b && c) {
        // the layer's kind of values: a GEMM on zeros draws less power and may run faster
        rt_bf16_fill(g, a, (size_t)M * K, 0, 11, 1.0);
        rt_bf16_fill(g, b, (size_t)K * N, 0, 12, 1.0);
        double unused;
        rc = time_fwd_bwd(
            g, repeats, [&] { gemm(g, 0, 0, M, N, K, a, K, b, N, 0.0f, c, N); }, [] {}, ms, &unused);
    }
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    if (c) cudaFree(c);
    return rc;
}

// ---- the context's bf16 side ----------------------------------------------------------------------

int rt_bf16_open(rt_cuda *g, char *why, size_t why_cap)
{
    if (cublasLtCreate(&g->lt) != CUBLAS_STATUS_SUCCESS ||
        cudaMalloc(&g->lt_ws, LT_WORKSPACE_BYTES) != cudaSuccess ||
        !(g->lt_cache = (lt_plan *)calloc(LT_CACHE, sizeof *g->lt_cache))) {
        snprintf(why, why_cap, "cuBLASLt could not be initialised on device %d", g->device);
        return -1;
    }
    const char *mode = getenv("DPRUN_ATTENTION");
    g->attn_mode = mode && strcmp(mode, "gemm") == 0 ? RT_ATTN_GEMM : RT_ATTN_AUTO;
    cudnnStatus_t st = cudnnCreate(&g->dnn);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetStream(g->dnn, g->stream);
    if (st != CUDNN_STATUS_SUCCESS) {
        snprintf(g->dnn_why, sizeof g->dnn_why, "could not start: %s", cudnnGetErrorString(st));
        if (g->dnn) cudnnDestroy(g->dnn);
        g->dnn = NULL;
    }
    return 0;
}

void rt_bf16_close(rt_cuda *g)
{
    for (int i = 0; g->lt_cache && i < g->n_lt; i++) lt_plan_free(&g->lt_cache[i]);
    free(g->lt_cache);
    rt_sdpa_free(g);
    if (g->lt_ws) cudaFree(g->lt_ws);
    if (g->sdpa_ws) cudaFree(g->sdpa_ws);
    if (g->lt) cublasLtDestroy(g->lt);
    if (g->dnn) cudnnDestroy(g->dnn);
}

extern "C" void rt_cuda_set_attention(rt_cuda *g, int mode)
{
    g->attn_mode = mode;
    g->attn_path[0] = '\0';
}
