// Attention on cuDNN's fused flash attention, through the backend graph API (C; no frontend):
// the operation graphs that cuDNN's runtime fusion engine recognises as scaled-dot-product
// attention, as the cuDNN frontend lowers its SDPA node (cudnn-frontend's
// scaled_dot_product_flash_attention.h, read for the pattern, not copied):
//   forward   S = Q K^T; S *= scale; causal: S = (row >= col) ? S : lowest; softmax as
//             max = rowmax(S), E = exp(S - max), Z = rowsum(E), stats = max + log(Z), P = E / Z
//             (P in bf16); O = P V. stats is the log-sum-exp layout.h saves.
//   backward  D = rowsum(dO o O); S again from Q K^T (scaled, masked); P = exp(S - stats);
//             dV = P^T dO; dP = dO V^T; dS = P o (dP - D) * scale; dQ = dS K; dK = dS^T Q
//             (the transposes as reshape operations).
// Tensors are [batch, head, sequence, width] views of the layer's buffers: Q, K and V are column
// slices of the fused projections (strides of the rows), so nothing is copied.
//
// Status: compiled on the development machines; never run (no GPU there). If cuDNN finds no
// engine for a graph (the status and cuDNN's own message go to g->dnn_why), the caller runs the
// GEMM path, and rt_cuda_attention_path says so: check-gpu prints it.
#include "cuda_ctx.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cudnnBackendDescriptor_t bd;

enum { DIR_FWD, DIR_BWD };

// Unique ids of the graphs' real tensors (the variant pack's keys).
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_DO, U_DQ, U_DK, U_DV, U_KN, U_VT, U_SUM, U_LOWEST,
       U_VIRTUAL = 100 };

struct sdpa_plan {
    int dir, B, a, sq, sk, d, causal, ldq, ldkv;
    bd plan;      // NULL: cuDNN refused this graph (not retried)
    int64_t ws;   // workspace bytes
};

// A graph under construction: every descriptor made (destroyed at the end), the operations, and
// the first failure.
struct gbuild {
    bd all[128];
    int n_all;
    bd ops[40];
    int n_ops;
    int64_t next_virtual;
    cudnnStatus_t st;
    char what[96];
};

static void failed(gbuild *b, cudnnStatus_t st, const char *what)
{
    if (b->st != CUDNN_STATUS_SUCCESS || st == CUDNN_STATUS_SUCCESS) return;
    b->st = st;
    snprintf(b->what, sizeof b->what, "%s", what);
}

static bd make(gbuild *b, cudnnBackendDescriptorType_t t)
{
    bd d = NULL;
    if (b->st != CUDNN_STATUS_SUCCESS || b->n_all >= (int)(sizeof b->all / sizeof b->all[0])) {
        failed(b, CUDNN_STATUS_ALLOC_FAILED, "too many descriptors");
        return NULL;
    }
    failed(b, cudnnBackendCreateDescriptor(t, &d), "create a descriptor");
    if (d) b->all[b->n_all++] = d;
    return d;
}

static void set(gbuild *b, bd d, cudnnBackendAttributeName_t a, cudnnBackendAttributeType_t t,
                int64_t n, const void *v, const char *what)
{
    if (b->st == CUDNN_STATUS_SUCCESS && d) failed(b, cudnnBackendSetAttribute(d, a, t, n, v), what);
}

static void fin(gbuild *b, bd d, const char *what)
{
    if (b->st == CUDNN_STATUS_SUCCESS && d) failed(b, cudnnBackendFinalize(d), what);
}

// A 4-d tensor [b, h, s, w] with strides; uid 0 makes a virtual one.
static bd tensor(gbuild *b, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
                 const int64_t str[4], int by_value)
{
    bd t = make(b, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    bool virt = uid == 0, val = by_value != 0;
    int64_t id = virt ? b->next_virtual++ : uid, align = 16;
    set(b, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, "tensor type");
    set(b, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim, "tensor dims");
    set(b, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, str, "tensor strides");
    set(b, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &id, "tensor id");
    set(b, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    set(b, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt, "tensor virtual");
    if (val) set(b, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &val, "tensor by value");
    fin(b, t, "a tensor");
    return t;
}

static void add_op(gbuild *b, bd op)
{
    if (b->st != CUDNN_STATUS_SUCCESS || !op) return;
    if (b->n_ops >= (int)(sizeof b->ops / sizeof b->ops[0])) {
        failed(b, CUDNN_STATUS_ALLOC_FAILED, "too many operations");
        return;
    }
    b->ops[b->n_ops++] = op;
}

// y = mode(x, bb, t) (bb, t NULL where the mode takes fewer inputs); axis for GEN_INDEX.
static void pointwise(gbuild *b, cudnnPointwiseMode_t mode, bd x, bd bb, bd t, bd y, int64_t axis)
{
    bd pw = make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(b, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
    set(b, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec, "pointwise precision");
    if (mode == CUDNN_POINTWISE_GEN_INDEX)
        set(b, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis, "index axis");
    fin(b, pw, "a pointwise descriptor");
    bd op = make(b, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw, "pointwise op");
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "pointwise x");
    if (bb) set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &bb, "pointwise b");
    if (t) set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t, "pointwise t");
    set(b, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "pointwise y");
    fin(b, op, "a pointwise operation");
    add_op(b, op);
}

static void matmul(gbuild *b, bd x, bd w, bd y)
{
    bd mm = make(b, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(b, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec, "matmul precision");
    fin(b, mm, "a matmul descriptor");
    bd op = make(b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "matmul a");
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w, "matmul b");
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "matmul c");
    set(b, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm, "matmul desc");
    fin(b, op, "a matmul operation");
    add_op(b, op);
}

static void reduction(gbuild *b, cudnnReduceTensorOp_t mode, bd x, bd y)
{
    bd rd = make(b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    set(b, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction mode");
    set(b, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &prec, "reduction precision");
    fin(b, rd, "a reduction descriptor");
    bd op = make(b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reduction x");
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reduction y");
    set(b, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd, "reduction desc");
    fin(b, op, "a reduction operation");
    add_op(b, op);
}

// y is x with its last two dimensions swapped (a transpose, as a reshape operation).
static void transpose(gbuild *b, bd x, bd y)
{
    bd op = make(b, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, "reshape x");
    set(b, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, "reshape y");
    fin(b, op, "a reshape operation");
    add_op(b, op);
}

// The operation graph of b's operations, and the first engine configuration of heuristics mode A
// that finalises into an execution plan: *plan (kept) and its workspace bytes.
static void build_plan(gbuild *b, cudnnHandle_t h, bd *plan, int64_t *ws)
{
    bd graph = make(b, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, b->n_ops, b->ops, "graph ops");
    set(b, graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
    fin(b, graph, "the operation graph");
    bd heur = make(b, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
    cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
    set(b, heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, "heuristics graph");
    set(b, heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heuristics mode");
    fin(b, heur, "the engine heuristics");
    enum { N_CFG = 8 };
    bd cfg[N_CFG];
    for (int i = 0; i < N_CFG; i++) cfg[i] = make(b, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    int64_t n_cfg = 0;
    if (b->st == CUDNN_STATUS_SUCCESS)
        failed(b, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                           CUDNN_TYPE_BACKEND_DESCRIPTOR, N_CFG, &n_cfg, cfg),
               "the engine configurations");
    if (b->st == CUDNN_STATUS_SUCCESS && n_cfg == 0)
        failed(b, CUDNN_STATUS_NOT_SUPPORTED, "an engine for the graph (heuristics found none)");
    cudnnStatus_t last = CUDNN_STATUS_NOT_SUPPORTED;
    for (int64_t i = 0; b->st == CUDNN_STATUS_SUCCESS && i < n_cfg && !*plan; i++) {
        bd p = NULL;
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p) != CUDNN_STATUS_SUCCESS)
            break;
        last = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
        if (last == CUDNN_STATUS_SUCCESS)
            last = cudnnBackendSetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                            CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
        if (last == CUDNN_STATUS_SUCCESS) last = cudnnBackendFinalize(p);
        int64_t got = 0;
        if (last == CUDNN_STATUS_SUCCESS)
            last = cudnnBackendGetAttribute(p, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                            CUDNN_TYPE_INT64, 1, &got, ws);
        if (last == CUDNN_STATUS_SUCCESS)
            *plan = p;
        else
            cudnnBackendDestroyDescriptor(p);
    }
    if (b->st == CUDNN_STATUS_SUCCESS && !*plan) failed(b, last, "an execution plan for the graph");
}

static void build_free(gbuild *b)
{
    for (int i = b->n_all - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(b->all[i]);
    b->n_all = 0;
}

// The [b, h, s, w] view of rows of `ld` elements holding `heads` heads of width w side by side.
static void rows_view(const attn_io *x, int s, int w, int ld, int64_t dim[4], int64_t str[4])
{
    dim[0] = x->B, dim[1] = x->a, dim[2] = s, dim[3] = w;
    str[0] = (int64_t)s * ld, str[1] = x->d, str[2] = ld, str[3] = 1;
}

static void swap_last(const int64_t dim[4], const int64_t str[4], int64_t d2[4], int64_t s2[4])
{
    memcpy(d2, dim, 4 * sizeof *d2), memcpy(s2, str, 4 * sizeof *s2);
    d2[2] = dim[3], d2[3] = dim[2], s2[2] = str[3], s2[3] = str[2];
}

// Scores S = Q K^T * scale, causally masked when asked: the head of both graphs. Returns S.
static bd scores(gbuild *b, const attn_io *x, bd q, bd kt, bd scale, bd lowest)
{
    int64_t sd[4] = {x->B, x->a, x->sq, x->sk};
    int64_t ss[4] = {(int64_t)x->a * x->sq * x->sk, (int64_t)x->sq * x->sk, x->sk, 1};
    bd s0 = tensor(b, 0, CUDNN_DATA_FLOAT, sd, ss, 0), s1 = tensor(b, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    matmul(b, q, kt, s0);
    pointwise(b, CUDNN_POINTWISE_MUL, s0, scale, NULL, s1, 0);
    if (!x->causal) return s1;
    bd row = tensor(b, 0, CUDNN_DATA_INT32, sd, ss, 0), col = tensor(b, 0, CUDNN_DATA_INT32, sd, ss, 0);
    bd keep = tensor(b, 0, CUDNN_DATA_BOOLEAN, sd, ss, 0), s2 = tensor(b, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    pointwise(b, CUDNN_POINTWISE_GEN_INDEX, s1, NULL, NULL, row, 2);
    pointwise(b, CUDNN_POINTWISE_GEN_INDEX, s1, NULL, NULL, col, 3);
    pointwise(b, CUDNN_POINTWISE_CMP_GE, row, col, NULL, keep, 0);
    pointwise(b, CUDNN_POINTWISE_BINARY_SELECT, s1, lowest, keep, s2, 0);
    return s2;
}

static void build_fwd(gbuild *b, const attn_io *x)
{
    int64_t one[4] = {1, 1, 1, 1}, dim[4], str[4], d2[4], s2[4];
    int64_t sd[4] = {x->B, x->a, x->sq, x->sk};
    int64_t ss[4] = {(int64_t)x->a * x->sq * x->sk, (int64_t)x->sq * x->sk, x->sk, 1};
    int64_t rd[4] = {x->B, x->a, x->sq, 1}, rs[4] = {(int64_t)x->a * x->sq, x->sq, 1, 1};
    rows_view(x, x->sq, x->d, x->ldq, dim, str);
    bd q = tensor(b, U_Q, CUDNN_DATA_BFLOAT16, dim, str, 0);
    rows_view(x, x->sk, x->d, x->ldkv, dim, str);
    swap_last(dim, str, d2, s2);
    bd kt = tensor(b, U_K, CUDNN_DATA_BFLOAT16, d2, s2, 0);
    bd v = tensor(b, U_V, CUDNN_DATA_BFLOAT16, dim, str, 0);
    rows_view(x, x->sq, x->d, x->a * x->d, dim, str);
    bd o = tensor(b, U_O, CUDNN_DATA_BFLOAT16, dim, str, 0);
    bd stats = tensor(b, U_STATS, CUDNN_DATA_FLOAT, rd, rs, 0);
    bd scale = tensor(b, U_SCALE, CUDNN_DATA_FLOAT, one, one, 1);
    bd lowest = tensor(b, U_LOWEST, CUDNN_DATA_FLOAT, one, one, 1);
    bd s = scores(b, x, q, kt, scale, lowest);
    bd mx = tensor(b, 0, CUDNN_DATA_FLOAT, rd, rs, 0), sub = tensor(b, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    bd e = tensor(b, 0, CUDNN_DATA_FLOAT, sd, ss, 0), z = tensor(b, 0, CUDNN_DATA_FLOAT, rd, rs, 0);
    bd lz = tensor(b, 0, CUDNN_DATA_FLOAT, rd, rs, 0), p = tensor(b, 0, CUDNN_DATA_BFLOAT16, sd, ss, 0);
    reduction(b, CUDNN_REDUCE_TENSOR_MAX, s, mx);
    pointwise(b, CUDNN_POINTWISE_SUB, s, mx, NULL, sub, 0);
    pointwise(b, CUDNN_POINTWISE_EXP, sub, NULL, NULL, e, 0);
    reduction(b, CUDNN_REDUCE_TENSOR_ADD, e, z);
    pointwise(b, CUDNN_POINTWISE_LOG, z, NULL, NULL, lz, 0);
    pointwise(b, CUDNN_POINTWISE_ADD, mx, lz, NULL, stats, 0);
    pointwise(b, CUDNN_POINTWISE_DIV, e, z, NULL, p, 0);
    matmul(b, p, v, o);
}

static void build_bwd(gbuild *b, const attn_io *x)
{
    int64_t one[4] = {1, 1, 1, 1}, dim[4], str[4], d2[4], s2[4];
    int64_t sd[4] = {x->B, x->a, x->sq, x->sk};
    int64_t ss[4] = {(int64_t)x->a * x->sq * x->sk, (int64_t)x->sq * x->sk, x->sk, 1};
    int64_t td[4] = {x->B, x->a, x->sk, x->sq};
    int64_t ts[4] = {(int64_t)x->a * x->sq * x->sk, (int64_t)x->sq * x->sk, 1, x->sk};
    int64_t rd[4] = {x->B, x->a, x->sq, 1}, rs[4] = {(int64_t)x->a * x->sq, x->sq, 1, 1};
    rows_view(x, x->sq, x->d, x->ldq, dim, str);
    bd q = tensor(b, U_Q, CUDNN_DATA_BFLOAT16, dim, str, 0);
    bd dq = tensor(b, U_DQ, CUDNN_DATA_BFLOAT16, dim, str, 0);
    rows_view(x, x->sk, x->d, x->ldkv, dim, str);
    swap_last(dim, str, d2, s2);
    bd kt = tensor(b, U_K, CUDNN_DATA_BFLOAT16, d2, s2, 0);
    bd vt = tensor(b, U_VT, CUDNN_DATA_BFLOAT16, d2, s2, 0);
    bd kn = tensor(b, U_KN, CUDNN_DATA_BFLOAT16, dim, str, 0);
    bd dk = tensor(b, U_DK, CUDNN_DATA_BFLOAT16, dim, str, 0);
    bd dv = tensor(b, U_DV, CUDNN_DATA_BFLOAT16, dim, str, 0);
    rows_view(x, x->sq, x->d, x->a * x->d, dim, str);
    bd o = tensor(b, U_O, CUDNN_DATA_BFLOAT16, dim, str, 0);
    bd dout = tensor(b, U_DO, CUDNN_DATA_BFLOAT16, dim, str, 0);
    bd stats = tensor(b, U_STATS, CUDNN_DATA_FLOAT, rd, rs, 0);
    bd rowsum = tensor(b, U_SUM, CUDNN_DATA_FLOAT, rd, rs, 0);
    bd scale = tensor(b, U_SCALE, CUDNN_DATA_FLOAT, one, one, 1);
    bd lowest = tensor(b, U_LOWEST, CUDNN_DATA_FLOAT, one, one, 1);
    // D = rowsum(dO o O)
    bd prod = tensor(b, 0, CUDNN_DATA_FLOAT, dim, str, 0);
    pointwise(b, CUDNN_POINTWISE_MUL, dout, o, NULL, prod, 0);
    reduction(b, CUDNN_REDUCE_TENSOR_ADD, prod, rowsum);
    // P = exp(S - stats)
    bd s = scores(b, x, q, kt, scale, lowest);
    bd sub = tensor(b, 0, CUDNN_DATA_FLOAT, sd, ss, 0), p = tensor(b, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    pointwise(b, CUDNN_POINTWISE_SUB, s, stats, NULL, sub, 0);
    pointwise(b, CUDNN_POINTWISE_EXP, sub, NULL, NULL, p, 0);
    // dV = P^T dO
    bd pt = tensor(b, 0, CUDNN_DATA_BFLOAT16, td, ts, 0);
    transpose(b, p, pt);
    matmul(b, pt, dout, dv);
    // dS = P o (dO V^T - D) * scale
    bd dp = tensor(b, 0, CUDNN_DATA_FLOAT, sd, ss, 0), dd = tensor(b, 0, CUDNN_DATA_FLOAT, sd, ss, 0);
    bd ds0 = tensor(b, 0, CUDNN_DATA_FLOAT, sd, ss, 0), ds = tensor(b, 0, CUDNN_DATA_BFLOAT16, sd, ss, 0);
    matmul(b, dout, vt, dp);
    pointwise(b, CUDNN_POINTWISE_SUB, dp, rowsum, NULL, dd, 0);
    pointwise(b, CUDNN_POINTWISE_MUL, p, dd, NULL, ds0, 0);
    pointwise(b, CUDNN_POINTWISE_MUL, ds0, scale, NULL, ds, 0);
    // dQ = dS K; dK = dS^T Q
    matmul(b, ds, kn, dq);
    bd dst = tensor(b, 0, CUDNN_DATA_BFLOAT16, td, ts, 0);
    transpose(b, ds, dst);
    matmul(b, dst, q, dk);
}

// The cached plan of (direction, shape), built on first use; NULL when cuDNN refused it.
static sdpa_plan *plan_for(rt_cuda *g, int dir, const attn_io *x)
{
    for (int i = 0; i < g->n_sdpa; i++) {
        sdpa_plan *p = &g->sdpa_cache[i];
        if (p->dir == dir && p->B == x->B && p->a == x->a && p->sq == x->sq && p->sk == x->sk &&
            p->d == x->d && p->causal == x->causal && p->ldq == x->ldq && p->ldkv == x->ldkv)
            return p->plan ? p : NULL;
    }
    if (!g->sdpa_cache && !(g->sdpa_cache = (sdpa_plan *)calloc(SDPA_CACHE, sizeof *g->sdpa_cache)))
        return NULL;
    int slot = g->n_sdpa < SDPA_CACHE ? g->n_sdpa++ : (x->B * 31 + x->sq) % SDPA_CACHE;
    sdpa_plan *p = &g->sdpa_cache[slot];
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    *p = (sdpa_plan){dir, x->B, x->a, x->sq, x->sk, x->d, x->causal, x->ldq, x->ldkv, NULL, 0};
    gbuild b;
    memset(&b, 0, sizeof b);
    b.st = CUDNN_STATUS_SUCCESS;
    b.next_virtual = U_VIRTUAL;
    if (dir == DIR_FWD)
        build_fwd(&b, x);
    else
        build_bwd(&b, x);
    build_plan(&b, g->dnn, &p->plan, &p->ws);
    build_free(&b);
    if (!p->plan) {
        char msg[256] = "";
        cudnnGetLastErrorString(msg, sizeof msg);
        snprintf(g->dnn_why, sizeof g->dnn_why, "%s graph: %s: %s%s%s", dir == DIR_FWD ? "forward" : "backward",
                 b.what, cudnnGetErrorString(b.st), msg[0] ? ": " : "", msg);
        return NULL;
    }
    return p;
}

// Runs plan p with the tensors (uids, pointers), growing the shared workspace when needed.
static int execute(rt_cuda *g, const sdpa_plan *p, const int64_t *uids, void *const *ptrs, int n)
{
    if ((size_t)p->ws > g->sdpa_ws_bytes) {
        if (g->sdpa_ws) cudaFree(g->sdpa_ws);
        g->sdpa_ws = NULL, g->sdpa_ws_bytes = 0;
        if (cudaMalloc(&g->sdpa_ws, (size_t)p->ws) != cudaSuccess) return -1;
        g->sdpa_ws_bytes = (size_t)p->ws;
    }
    gbuild b;
    memset(&b, 0, sizeof b);
    b.st = CUDNN_STATUS_SUCCESS;
    bd pack = make(&b, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    set(&b, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids, "variant ids");
    set(&b, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs, "variant pointers");
    set(&b, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &g->sdpa_ws, "workspace");
    fin(&b, pack, "the variant pack");
    if (b.st == CUDNN_STATUS_SUCCESS) failed(&b, cudnnBackendExecute(g->dnn, p->plan, pack), "execute");
    build_free(&b);
    if (b.st != CUDNN_STATUS_SUCCESS) {
        snprintf(g->dnn_why, sizeof g->dnn_why, "%s: %s", b.what, cudnnGetErrorString(b.st));
        return -1;
    }
    return 0;
}

int rt_sdpa_fwd(rt_cuda *g, const attn_io *x)
{
    if (!g->dnn || !x->rows) return -1;
    sdpa_plan *p = plan_for(g, DIR_FWD, x);
    if (!p) return -1;
    float scale = 1.0f / sqrtf((float)x->d), lowest = -FLT_MAX;
    int64_t uids[] = {U_Q, U_K, U_V, U_O, U_STATS, U_SCALE, U_LOWEST};
    void *ptrs[] = {(void *)x->q, (void *)x->k, (void *)x->v, x->o, x->lse, &scale, &lowest};
    return execute(g, p, uids, ptrs, x->causal ? 7 : 6);
}

int rt_sdpa_bwd(rt_cuda *g, const attn_io *x)
{
    if (!g->dnn || !x->rows) return -1;
    sdpa_plan *p = plan_for(g, DIR_BWD, x);
    if (!p) return -1;
    float scale = 1.0f / sqrtf((float)x->d), lowest = -FLT_MAX, *rowsum = NULL;
    cudaMallocAsync((void **)&rowsum, (size_t)x->B * x->a * x->sq * sizeof *rowsum, g->stream);
    if (!rowsum) return -1;
    int64_t uids[] = {U_Q, U_K, U_KN, U_VT, U_O, U_STATS, U_DO, U_DQ, U_DK, U_DV, U_SUM, U_SCALE,
                      U_LOWEST};
    void *ptrs[] = {(void *)x->q, (void *)x->k, (void *)x->k, (void *)x->v, x->o, x->lse,
                    (void *)x->dout, x->dq, x->dk, x->dv, rowsum, &scale, &lowest};
    int rc = execute(g, p, uids, ptrs, x->causal ? 13 : 12);
    cudaFreeAsync(rowsum, g->stream);
    return rc;
}

void rt_sdpa_free(rt_cuda *g)
{
    for (int i = 0; g->sdpa_cache && i < g->n_sdpa; i++)
        if (g->sdpa_cache[i].plan) cudnnBackendDestroyDescriptor(g->sdpa_cache[i].plan);
    free(g->sdpa_cache);
    g->sdpa_cache = NULL, g->n_sdpa = 0;
}
