// Attention on cuDNN's fused flash attention, through the backend graph API (C; no frontend):
// the operation graphs that cuDNN's runtime fusion engines recognise as scaled-dot-product
// attention, built as cudnn-frontend lowers its SDPA nodes (scaled_dot_product_flash_attention.h
// and its score modifiers, read for the pattern — operation order, types, which tensors are real —
// not copied):
//   forward   S = Q K^T; S *= scale; [padding mask]; [causal mask]; softmax as max = rowmax(S),
//             E = exp(S - max), Z = rowsum(E), stats = max + log(Z), P = E / Z (P in bf16);
//             O = P V. stats is the log-sum-exp layout.h saves.
//   backward  D = rowsum(dO o O) * 1 (a real fp32 tensor); S again from Q K^T, scaled,
//             [padding mask]; S - stats; [padding mask again, cuDNN 9.0 to 9.9]; [causal mask];
//             P = exp(.); dV = P^T dO; dS = (dO V^T - D) o P * scale (fp32); dK = dS^T Q;
//             dQ = dS K into a real fp32 accumulator (zeroed; for the ragged form in dQ's layout,
//             at dQ's offsets), copied to dQ by an identity (K as a reshape of K^T, the
//             transposes as reshapes). Grouped-query attention: K and V have the key/value
//             heads (the GEMMs broadcast them over each group's query heads), and dV and dK are
//             computed per query head into virtual tensors that a sum over each group reduces.
// The masks: causal keeps row >= column; padding keeps row < seq_q[b] and column < seq_k[b].
//
// Two forms of the batch:
//   rows    B whole rows of sq and sk tokens: Q, K and V are [B, head, token, width] views of
//           the layer's buffers (column slices of the fused projections, strides of the rows);
//   ragged  varlen micro-batches (THD): each sequence of the micro-batch is a batch entry whose
//           tokens lie at its ragged offset (runtime/ragged.h: offsets, the sequence lengths of
//           the padding mask, the GEMMs' M/N/K overrides); the softmax statistics are a dense
//           [n, head, max_q] scratch, moved to and from layout.h's per-sequence blocks here.
// Nothing is copied except those statistics.
//
// Status: compiled on the development machines; never run (no GPU there). If cuDNN finds no
// engine for a graph (the status and cuDNN's own message go to g->dnn_why), the caller runs the
// GEMM path, and rt_cuda_attention_path says so: check-gpu prints it.
#include "cuda_ctx.h"
#include "../ragged.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef cudnnBackendDescriptor_t bd;

enum { DIR_FWD, DIR_BWD };

// Unique ids of the graphs' real tensors (the variant pack's keys).
enum { U_Q = 1, U_K, U_V, U_O, U_STATS, U_SCALE, U_DO, U_DQ, U_DK, U_DV, U_SUM, U_DQ_ACC, U_LOWEST,
       U_ONE, U_SEQ_Q, U_SEQ_K, U_OFF_Q, U_OFF_K, U_OFF_O, U_VIRTUAL = 100 };

// What a graph is built for (the plan cache's key): B batch entries (rows, or the ragged form's
// sequences) of at most sq queries and sk keys, a query heads on g key/value heads (g divides a:
// query head h reads key/value head h / (a / g), as layout.h's rt_kv_head) of width d, the row
// lengths of the query, key/value and output matrices; ragged: 0, or the ragged offsets' width in
// bytes (4 or 8); pad_rows: whole rows under a padding mask of their full lengths
// (needs_pad_rows).
struct sdpa_shape {
    int B, a, g, sq, sk, d, causal, ldq, ldkv, ldo, ragged, pad_rows;
};

// The backward on whole rows whose key count is not a multiple of 128 runs under a padding mask
// of the rows' own lengths on cuDNN up to 9.15 (the frontend's workaround for those versions).
static int needs_pad_rows(const sdpa_shape *s)
{
    return !s->ragged && s->sk % 128 != 0 && cudnnGetVersion() <= 91500;
}

struct sdpa_plan {
    int dir;
    sdpa_shape shape;
    bd plan;      // NULL: cuDNN refused this graph (not retried)
    int64_t ws;   // workspace bytes
    char why[DNN_WHY_BYTES]; // why it refused
};

// A graph under construction: every descriptor made (destroyed at the end), the operations, and
// the first failure.
struct gbuild {
    bd all[192];
    int n_all;
    bd ops[48];
    int n_ops;
    int64_t next_virtual;
    cudnnStatus_t st;
    char what[96];
};

static void gbuild_init(gbuild *b)
{
    memset(b, 0, sizeof *b);
    b->st = CUDNN_STATUS_SUCCESS;
    b->next_virtual = U_VIRTUAL;
}

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

// A 4-d tensor with strides; uid 0 makes a virtual one; ragged: its ragged-offset tensor or NULL.
static bd tensor_r(gbuild *b, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
                   const int64_t str[4], int by_value, bd ragged)
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
    if (ragged)
        set(b, t, CUDNN_ATTR_TENSOR_RAGGED_OFFSET_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &ragged,
            "tensor ragged offset");
    fin(b, t, "a tensor");
    return t;
}

static bd tensor(gbuild *b, int64_t uid, cudnnDataType_t dt, const int64_t dim[4],
                 const int64_t str[4], int by_value)
{
    return tensor_r(b, uid, dt, dim, str, by_value, NULL);
}

// A real per-entry integer tensor [n, 1, 1, 1] (sequence lengths; ragged offsets, n = B + 1).
static bd index_tensor(gbuild *b, int64_t uid, int64_t n, cudnnDataType_t dt)
{
    int64_t dim[4] = {n, 1, 1, 1}, str[4] = {1, 1, 1, 1};
    return tensor(b, uid, dt, dim, str, 0);
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

// y = mode(x, bb, t) computed in prec (bb, t NULL where the mode takes fewer inputs); axis for
// GEN_INDEX.
static void pointwise_p(gbuild *b, cudnnPointwiseMode_t mode, cudnnDataType_t prec, bd x, bd bb,
                        bd t, bd y, int64_t axis)
{
    bd pw = make(b, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
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

static void pointwise(gbuild *b, cudnnPointwiseMode_t mode, bd x, bd bb, bd t, bd y)
{
    pointwise_p(b, mode, CUDNN_DATA_FLOAT, x, bb, t, y, 0);
}

// c = a b, the GEMM's M, N and K cut per batch entry by the tensors m, n, k where given (the
// ragged form's sequence lengths; NULL: the full dimensions).
static void matmul(gbuild *b, bd x, bd w, bd y, bd m, bd n, bd k)
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
    if (m) set(b, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m, "matmul m");
    if (n) set(b, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, "matmul n");
    if (k) set(b, op, CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k, "matmul k");
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
static void reshape(gbuild *b, bd x, bd y)
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

// The tensors both graphs share: the by-value scalars, the ragged form's lengths and offsets,
// and the dimensions of the scores and of the per-query statistics.
struct common_t {
    bd scale, lowest;             // lowest: NULL when no mask needs it
    bd seq_q, seq_k;              // NULL for rows
    bd off_q, off_k, off_o;       // NULL for rows
    int64_t sd[4], ss[4];         // scores [B, a, sq, sk]
    int64_t rd[4], rs[4];         // statistics [B, a, sq, 1]
};

static void common_of(gbuild *b, const sdpa_shape *x, common_t *c)
{
    memset(c, 0, sizeof *c);
    int64_t one[4] = {1, 1, 1, 1};
    int64_t sd[4] = {x->B, x->a, x->sq, x->sk};
    int64_t ss[4] = {(int64_t)x->a * x->sq * x->sk, (int64_t)x->sq * x->sk, x->sk, 1};
    int64_t rd[4] = {x->B, x->a, x->sq, 1}, rs[4] = {(int64_t)x->a * x->sq, x->sq, 1, 1};
    memcpy(c->sd, sd, sizeof sd), memcpy(c->ss, ss, sizeof ss);
    memcpy(c->rd, rd, sizeof rd), memcpy(c->rs, rs, sizeof rs);
    c->scale = tensor(b, U_SCALE, CUDNN_DATA_FLOAT, one, one, 1);
    int padded = x->ragged || x->pad_rows;
    if (x->causal || padded) c->lowest = tensor(b, U_LOWEST, CUDNN_DATA_FLOAT, one, one, 1);
    if (padded) {
        c->seq_q = index_tensor(b, U_SEQ_Q, x->B, CUDNN_DATA_INT32);
        c->seq_k = index_tensor(b, U_SEQ_K, x->B, CUDNN_DATA_INT32);
    }
    if (x->ragged) {
        cudnnDataType_t ot = x->ragged == 8 ? CUDNN_DATA_INT64 : CUDNN_DATA_INT32;
        c->off_q = index_tensor(b, U_OFF_Q, x->B + 1, ot);
        c->off_k = index_tensor(b, U_OFF_K, x->B + 1, ot);
        c->off_o = index_tensor(b, U_OFF_O, x->B + 1, ot);
    }
}

// The [b, h, s, w] view of rows of `ld` elements holding `heads` heads side by side (the query
// heads for Q, O and their gradients, the key/value heads for K, V and theirs), and the same with
// its last two dimensions swapped (K^T, V^T).
static void rows_view(const sdpa_shape *x, int heads, int s, int ld, int64_t dim[4], int64_t str[4])
{
    dim[0] = x->B, dim[1] = heads, dim[2] = s, dim[3] = x->d;
    str[0] = (int64_t)s * ld, str[1] = x->d, str[2] = ld, str[3] = 1;
}

static void swap_last(int64_t dim[4], int64_t str[4])
{
    int64_t t = dim[2];
    dim[2] = dim[3], dim[3] = t;
    t = str[2], str[2] = str[3], str[3] = t;
}

// The masks on scores s (returns the masked scores): padding (ragged form), as the frontend's
// padding_mask; causal, as its top-left causal mask.
static bd padding_mask(gbuild *b, const common_t *c, bd s)
{
    if (!c->seq_q) return s;
    bd row = tensor(b, 0, CUDNN_DATA_INT32, c->sd, c->ss, 0), col = tensor(b, 0, CUDNN_DATA_INT32, c->sd, c->ss, 0);
    bd rm = tensor(b, 0, CUDNN_DATA_BOOLEAN, c->sd, c->ss, 0), cm = tensor(b, 0, CUDNN_DATA_BOOLEAN, c->sd, c->ss, 0);
    bd keep = tensor(b, 0, CUDNN_DATA_BOOLEAN, c->sd, c->ss, 0), out = tensor(b, 0, CUDNN_DATA_FLOAT, c->sd, c->ss, 0);
    pointwise_p(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, row, 2);
    pointwise_p(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, NULL, NULL, col, 3);
    pointwise_p(b, CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, row, c->seq_q, NULL, rm, 0);
    pointwise_p(b, CUDNN_POINTWISE_CMP_LT, CUDNN_DATA_BOOLEAN, col, c->seq_k, NULL, cm, 0);
    pointwise_p(b, CUDNN_POINTWISE_LOGICAL_AND, CUDNN_DATA_BOOLEAN, rm, cm, NULL, keep, 0);
    pointwise(b, CUDNN_POINTWISE_BINARY_SELECT, s, c->lowest, keep, out);
    return out;
}

static bd causal_mask(gbuild *b, const sdpa_shape *x, const common_t *c, bd s)
{
    if (!x->causal) return s;
    bd row = tensor(b, 0, CUDNN_DATA_INT32, c->sd, c->ss, 0), col = tensor(b, 0, CUDNN_DATA_INT32, c->sd, c->ss, 0);
    bd keep = tensor(b, 0, CUDNN_DATA_BOOLEAN, c->sd, c->ss, 0), out = tensor(b, 0, CUDNN_DATA_FLOAT, c->sd, c->ss, 0);
    pointwise_p(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s, NULL, NULL, row, 2);
    pointwise_p(b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, s, NULL, NULL, col, 3);
    pointwise_p(b, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, 0);
    pointwise(b, CUDNN_POINTWISE_BINARY_SELECT, s, c->lowest, keep, out);
    return out;
}

// Scaled scores Q K^T * scale (the head of both graphs).
static bd scaled_scores(gbuild *b, const common_t *c, bd q, bd kt)
{
    bd s0 = tensor(b, 0, CUDNN_DATA_FLOAT, c->sd, c->ss, 0), s1 = tensor(b, 0, CUDNN_DATA_FLOAT, c->sd, c->ss, 0);
    matmul(b, q, kt, s0, c->seq_q, c->seq_k, NULL);
    pointwise(b, CUDNN_POINTWISE_MUL, s0, c->scale, NULL, s1);
    return s1;
}

static void build_fwd(gbuild *b, const sdpa_shape *x)
{
    common_t c;
    common_of(b, x, &c);
    int64_t dim[4], str[4];
    rows_view(x, x->a, x->sq, x->ldq, dim, str);
    bd q = tensor_r(b, U_Q, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_q);
    rows_view(x, x->g, x->sk, x->ldkv, dim, str); // broadcast over each group's query heads
    bd v = tensor_r(b, U_V, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_k);
    swap_last(dim, str);
    bd kt = tensor_r(b, U_K, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_k);
    rows_view(x, x->a, x->sq, x->ldo, dim, str);
    bd o = tensor_r(b, U_O, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_o);
    bd stats = tensor(b, U_STATS, CUDNN_DATA_FLOAT, c.rd, c.rs, 0);
    bd s = causal_mask(b, x, &c, padding_mask(b, &c, scaled_scores(b, &c, q, kt)));
    bd mx = tensor(b, 0, CUDNN_DATA_FLOAT, c.rd, c.rs, 0), sub = tensor(b, 0, CUDNN_DATA_FLOAT, c.sd, c.ss, 0);
    bd e = tensor(b, 0, CUDNN_DATA_FLOAT, c.sd, c.ss, 0), z = tensor(b, 0, CUDNN_DATA_FLOAT, c.rd, c.rs, 0);
    bd lz = tensor(b, 0, CUDNN_DATA_FLOAT, c.rd, c.rs, 0), p = tensor(b, 0, CUDNN_DATA_BFLOAT16, c.sd, c.ss, 0);
    reduction(b, CUDNN_REDUCE_TENSOR_MAX, s, mx);
    pointwise(b, CUDNN_POINTWISE_SUB, s, mx, NULL, sub);
    pointwise(b, CUDNN_POINTWISE_EXP, sub, NULL, NULL, e);
    reduction(b, CUDNN_REDUCE_TENSOR_ADD, e, z);
    pointwise(b, CUDNN_POINTWISE_LOG, z, NULL, NULL, lz);
    pointwise(b, CUDNN_POINTWISE_ADD, mx, lz, NULL, stats);
    pointwise(b, CUDNN_POINTWISE_DIV, e, z, NULL, p);
    matmul(b, p, v, o, c.seq_q, NULL, c.seq_k);
}

// Where a backward GEMM on the query heads writes a key/value gradient g_kv: g_kv itself without
// grouping; under grouped-query attention a virtual [B, a, sk, d] tensor, one head per query
// head, that a reduction adds up over each group into g_kv (the frontend's dK/dV "full head"
// tensors; dense strides, as it lays them out without max_total_seq_len).
static bd per_query_head(gbuild *b, const sdpa_shape *x, bd g_kv)
{
    if (x->g == x->a) return g_kv;
    int64_t fd[4] = {x->B, x->a, x->sk, x->d};
    int64_t fs[4] = {(int64_t)x->a * x->sk * x->d, (int64_t)x->sk * x->d, x->d, 1};
    bd full = tensor(b, 0, CUDNN_DATA_BFLOAT16, fd, fs, 0);
    reduction(b, CUDNN_REDUCE_TENSOR_ADD, full, g_kv);
    return full;
}

static void build_bwd(gbuild *b, const sdpa_shape *x)
{
    common_t c;
    common_of(b, x, &c);
    int64_t dim[4], str[4], one[4] = {1, 1, 1, 1};
    int64_t td[4] = {x->B, x->a, x->sk, x->sq};
    int64_t ts[4] = {(int64_t)x->a * x->sq * x->sk, (int64_t)x->sq * x->sk, 1, x->sk};
    rows_view(x, x->a, x->sq, x->ldq, dim, str);
    bd q = tensor_r(b, U_Q, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_q);
    bd dq = tensor_r(b, U_DQ, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_q);
    rows_view(x, x->g, x->sk, x->ldkv, dim, str);
    bd dk = tensor_r(b, U_DK, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_k);
    bd dv = tensor_r(b, U_DV, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_k);
    bd kn = tensor_r(b, 0, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_k); // K, reshaped from K^T
    swap_last(dim, str);
    bd kt = tensor_r(b, U_K, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_k);
    bd vt = tensor_r(b, U_V, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_k);
    rows_view(x, x->a, x->sq, x->ldo, dim, str);
    bd o = tensor_r(b, U_O, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_o);
    bd dout = tensor_r(b, U_DO, CUDNN_DATA_BFLOAT16, dim, str, 0, c.off_o);
    // dQ's fp32 accumulator: dense [B, a, sq, d] for rows; for the ragged form dQ's own strides
    // and offsets (the frontend's THD accumulator), so that it is sized by the tokens
    int64_t acc_d[4] = {x->B, x->a, x->sq, x->d}, acc_s[4];
    rows_view(x, x->a, x->sq, x->ldq, dim, str);
    if (x->ragged)
        memcpy(acc_s, str, sizeof acc_s);
    else
        acc_s[0] = (int64_t)x->a * x->sq * x->d, acc_s[1] = (int64_t)x->sq * x->d, acc_s[2] = x->d, acc_s[3] = 1;
    bd acc = tensor_r(b, U_DQ_ACC, CUDNN_DATA_FLOAT, acc_d, acc_s, 0, c.off_q);
    bd stats = tensor(b, U_STATS, CUDNN_DATA_FLOAT, c.rd, c.rs, 0);
    bd sum = tensor(b, U_SUM, CUDNN_DATA_FLOAT, c.rd, c.rs, 0);
    bd one_v = tensor(b, U_ONE, CUDNN_DATA_FLOAT, one, one, 1);
    // D = rowsum(dO o O) * 1
    int64_t pd[4] = {x->B, x->a, x->sq, x->d};
    int64_t ps[4] = {(int64_t)x->a * x->sq * x->d, (int64_t)x->sq * x->d, (int64_t)x->a * x->d, 1};
    bd prod = tensor(b, 0, CUDNN_DATA_FLOAT, pd, ps, 0), red = tensor(b, 0, CUDNN_DATA_FLOAT, c.rd, c.rs, 0);
    pointwise(b, CUDNN_POINTWISE_MUL, dout, o, NULL, prod);
    reduction(b, CUDNN_REDUCE_TENSOR_ADD, prod, red);
    pointwise(b, CUDNN_POINTWISE_MUL, red, one_v, NULL, sum);
    // P = exp(masked S - stats)
    bd s = padding_mask(b, &c, scaled_scores(b, &c, q, kt));
    bd sub = tensor(b, 0, CUDNN_DATA_FLOAT, c.sd, c.ss, 0), p = tensor(b, 0, CUDNN_DATA_FLOAT, c.sd, c.ss, 0);
    pointwise(b, CUDNN_POINTWISE_SUB, s, stats, NULL, sub);
    // cuDNN 9.0 to 9.9 want the padding applied again after the statistics are subtracted (the
    // frontend does so for those versions only)
    size_t version = cudnnGetVersion();
    if (version >= 90000 && version < 91000) sub = padding_mask(b, &c, sub);
    pointwise(b, CUDNN_POINTWISE_EXP, causal_mask(b, x, &c, sub), NULL, NULL, p);
    // dV = P^T dO
    bd pt = tensor(b, 0, CUDNN_DATA_BFLOAT16, td, ts, 0);
    reshape(b, p, pt);
    matmul(b, pt, dout, per_query_head(b, x, dv), c.seq_k, NULL, c.seq_q);
    // dS = (dO V^T - D) o P * scale
    bd dp = tensor(b, 0, CUDNN_DATA_FLOAT, c.sd, c.ss, 0), dd = tensor(b, 0, CUDNN_DATA_FLOAT, c.sd, c.ss, 0);
    bd ds0 = tensor(b, 0, CUDNN_DATA_FLOAT, c.sd, c.ss, 0), ds = tensor(b, 0, CUDNN_DATA_FLOAT, c.sd, c.ss, 0);
    matmul(b, dout, vt, dp, c.seq_q, c.seq_k, NULL);
    pointwise(b, CUDNN_POINTWISE_SUB, dp, sum, NULL, dd);
    pointwise(b, CUDNN_POINTWISE_MUL, dd, p, NULL, ds0);
    pointwise(b, CUDNN_POINTWISE_MUL, ds0, c.scale, NULL, ds);
    // dK = dS^T Q
    bd dst = tensor(b, 0, CUDNN_DATA_BFLOAT16, td, ts, 0);
    reshape(b, ds, dst);
    matmul(b, dst, q, per_query_head(b, x, dk), c.seq_k, NULL, c.seq_q);
    // dQ = dS K, accumulated in fp32
    reshape(b, kt, kn);
    matmul(b, ds, kn, acc, c.seq_q, NULL, c.seq_k);
    pointwise(b, CUDNN_POINTWISE_IDENTITY, acc, NULL, NULL, dq);
}

static int same_shape(const sdpa_shape *a, const sdpa_shape *b)
{
    return a->B == b->B && a->a == b->a && a->g == b->g && a->sq == b->sq && a->sk == b->sk && a->d == b->d &&
           a->causal == b->causal && a->ldq == b->ldq && a->ldkv == b->ldkv && a->ldo == b->ldo &&
           a->ragged == b->ragged && a->pad_rows == b->pad_rows;
}

// Why cuDNN refused graph b of (direction, shape): the form, the step, its status and message.
static void say_refusal(char *why, size_t cap, const sdpa_shape *x, int dir, const gbuild *b)
{
    char msg[256] = "";
    cudnnGetLastErrorString(msg, sizeof msg);
    snprintf(why, cap, "%s%s graph: %s: %s%s%s", x->ragged ? "ragged " : x->pad_rows ? "padded " : "",
             dir == DIR_FWD ? "forward" : "backward", b->what, cudnnGetErrorString(b->st),
             msg[0] ? ": " : "", msg);
}

// The cached plan of (direction, shape), built on first use; NULL when cuDNN refused it.
static sdpa_plan *plan_for(rt_cuda *g, int dir, const sdpa_shape *x)
{
    for (int i = 0; i < g->n_sdpa; i++) {
        sdpa_plan *p = &g->sdpa_cache[i];
        if (p->dir == dir && same_shape(&p->shape, x)) {
            if (!p->plan) memcpy(g->dnn_why, p->why, sizeof p->why);
            return p->plan ? p : NULL;
        }
    }
    if (!g->sdpa_cache && !(g->sdpa_cache = (sdpa_plan *)calloc(SDPA_CACHE, sizeof *g->sdpa_cache)))
        return NULL;
    int slot = g->n_sdpa < SDPA_CACHE ? g->n_sdpa++ : (x->B * 31 + x->sq + dir) % SDPA_CACHE;
    sdpa_plan *p = &g->sdpa_cache[slot];
    g->sdpa_built++;
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    p->dir = dir, p->shape = *x, p->plan = NULL, p->ws = 0, p->why[0] = '\0';
    gbuild b;
    gbuild_init(&b);
    if (dir == DIR_FWD)
        build_fwd(&b, x);
    else
        build_bwd(&b, x);
    build_plan(&b, g->dnn, &p->plan, &p->ws);
    build_free(&b);
    if (!p->plan) {
        say_refusal(g->dnn_why, sizeof g->dnn_why, x, dir, &b);
        memcpy(p->why, g->dnn_why, sizeof p->why);
        return NULL;
    }
    return p;
}

// The variant pack under construction: tensor ids and their addresses.
struct pack_t {
    int64_t uid[24];
    void *ptr[24];
    int n;
};

static void bind(pack_t *k, int64_t uid, const void *ptr)
{
    k->uid[k->n] = uid, k->ptr[k->n] = (void *)ptr, k->n++;
}

// Runs plan p with pack k, growing the shared workspace when needed.
static int execute(rt_cuda *g, const sdpa_plan *p, const pack_t *k)
{
    if ((size_t)p->ws > g->sdpa_ws_bytes) {
        if (g->sdpa_ws) cudaFree(g->sdpa_ws);
        g->sdpa_ws = NULL, g->sdpa_ws_bytes = 0;
        if (cudaMalloc(&g->sdpa_ws, (size_t)p->ws) != cudaSuccess) {
            snprintf(g->dnn_why, sizeof g->dnn_why, "no device memory for its %.0f MB of workspace",
                     (double)p->ws / 1e6);
            return -1;
        }
        g->sdpa_ws_bytes = (size_t)p->ws;
    }
    gbuild b;
    gbuild_init(&b);
    bd pack = make(&b, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    set(&b, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, k->n, k->uid, "variant ids");
    set(&b, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, k->n, k->ptr, "variant pointers");
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

// The ragged form's statistics: the dense [n, a, max_q] scratch against layout.h's blocks
// (sequence c's (a, lq) block at a * tok_q[c]); one block per (sequence, head).
__global__ void k_stats_move(float *dense, float *lse, const int *seq_q, const int *tok_q, int a,
                             int max_q, int to_lse)
{
    int c = blockIdx.x, h = blockIdx.y, lq = seq_q[c];
    for (int i = threadIdx.x; i < lq; i += blockDim.x) {
        float *dn = dense + rt_ragged_stat_at(a, max_q, c, h, i);
        float *ls = lse + rt_ragged_lse_at(a, tok_q[c], lq, h, i);
        if (to_lse)
            *ls = *dn;
        else
            *dn = *ls;
    }
}

// One call's device state: the shape, for the ragged form its arrays uploaded, and scratch.
struct call_t {
    sdpa_shape shape;
    rt_ragged r;
    const void *blob;    // the ragged arrays on the device (rt_ragged_pack's layout; g->small's)
    size_t at[RT_RG_COUNT];
    float *stats;        // the ragged form's dense statistics; rows: x->lse itself
};

// The graph's shape for an attention call (x: its sequences, heads and matrices), and for the
// ragged form the sequences r (released by the caller). 0, or -1 with why.
static int shape_for(const attn_io *x, sdpa_shape *s, rt_ragged *r, char *why, size_t why_cap)
{
    sdpa_shape rows = {x->B, x->a, x->g, x->sq, x->sk, x->d, x->causal, x->ldq, x->ldkv,
                       x->a * x->d, 0, 0};
    *s = rows;
    memset(r, 0, sizeof *r);
    if (x->rows) return 0;
    if (rt_ragged_build(r, x->qs, x->ks, x->ldq, x->ldkv, x->a * x->d, why, why_cap) != 0) return -1;
    s->B = r->n, s->sq = r->max_q, s->sk = r->max_k, s->ragged = r->wide ? 8 : 4;
    return 0;
}

static int call_open(rt_cuda *g, const attn_io *x, call_t *c)
{
    memset(c, 0, sizeof *c);
    char why[120];
    if (shape_for(x, &c->shape, &c->r, why, sizeof why) != 0) {
        snprintf(g->dnn_why, sizeof g->dnn_why, "ragged: %s", why);
        return -1;
    }
    if (!c->shape.ragged) {
        c->stats = x->lse;
        return 0;
    }
    size_t bytes = rt_ragged_pack(&c->r, NULL, c->at);
    void *host = malloc(bytes);
    if (!host) return -1;
    rt_ragged_pack(&c->r, host, c->at);
    size_t stat_bytes = (size_t)c->r.n * x->a * c->r.max_q * sizeof(float);
    c->blob = rt_dev_cache_get(&g->small, host, bytes); // one upload per micro-batch and form
    free(host);
    cudaMallocAsync((void **)&c->stats, stat_bytes, g->stream);
    // rows past a sequence's length are masked; zeros keep whatever reads them finite
    if (c->stats) cudaMemsetAsync(c->stats, 0, stat_bytes, g->stream);
    return c->blob && c->stats ? 0 : -1;
}

static const void *call_array(const call_t *c, int which)
{
    return (const char *)c->blob + c->at[which];
}

static void call_bind_ragged(const call_t *c, pack_t *k)
{
    if (!c->shape.ragged) return;
    bind(k, U_SEQ_Q, call_array(c, RT_RG_SEQ_Q));
    bind(k, U_SEQ_K, call_array(c, RT_RG_SEQ_K));
    bind(k, U_OFF_Q, call_array(c, RT_RG_OFF_Q));
    bind(k, U_OFF_K, call_array(c, RT_RG_OFF_K));
    bind(k, U_OFF_O, call_array(c, RT_RG_OFF_O));
}

static void call_move_stats(rt_cuda *g, const call_t *c, const attn_io *x, int to_lse)
{
    if (!c->shape.ragged) return;
    dim3 grid((unsigned)c->r.used, (unsigned)x->a);
    k_stats_move<<<grid, THREADS, 0, g->stream>>>(c->stats, x->lse, (const int *)call_array(c, RT_RG_SEQ_Q),
                                                  (const int *)call_array(c, RT_RG_TOK_Q), x->a,
                                                  c->r.max_q, to_lse);
}

static void call_close(rt_cuda *g, call_t *c)
{
    if (c->shape.ragged && c->stats) cudaFreeAsync(c->stats, g->stream);
    rt_ragged_release(&c->r);
}

int rt_sdpa_fwd(rt_cuda *g, const attn_io *x)
{
    if (!g->dnn) return -1;
    call_t c;
    int rc = -1;
    sdpa_plan *p = NULL;
    if (call_open(g, x, &c) == 0 && (p = plan_for(g, DIR_FWD, &c.shape))) {
        float scale = 1.0f / sqrtf((float)x->d), lowest = -FLT_MAX;
        pack_t k = {{0}, {0}, 0};
        bind(&k, U_Q, x->q), bind(&k, U_K, x->k), bind(&k, U_V, x->v), bind(&k, U_O, x->o);
        bind(&k, U_STATS, c.stats), bind(&k, U_SCALE, &scale);
        if (x->causal || c.shape.ragged) bind(&k, U_LOWEST, &lowest);
        call_bind_ragged(&c, &k);
        rc = execute(g, p, &k);
        if (rc == 0) call_move_stats(g, &c, x, 1);
    }
    call_close(g, &c);
    return rc;
}

// pad_rows's lengths on the device (g->small's): B of sq, then from entry at_k (16-byte
// aligned) B of sk; NULL when out of memory.
static const int *row_lengths(rt_cuda *g, const sdpa_shape *s, int at_k)
{
    int *host = (int *)calloc(2 * (size_t)at_k, sizeof *host);
    const int *lens = NULL;
    for (int i = 0; host && i < s->B; i++) host[i] = s->sq, host[at_k + i] = s->sk;
    if (host) lens = (const int *)rt_dev_cache_get(&g->small, host, 2 * (size_t)at_k * sizeof *host);
    free(host);
    return lens;
}

int rt_sdpa_bwd(rt_cuda *g, const attn_io *x)
{
    if (!g->dnn) return -1;
    call_t c;
    int rc = -1;
    sdpa_plan *p = NULL;
    float *sum = NULL, *acc = NULL;
    const int *lens = NULL; // pad_rows: the rows' lengths, B of sq then (16-byte aligned) B of sk
    if (call_open(g, x, &c) == 0) {
        c.shape.pad_rows = needs_pad_rows(&c.shape);
        p = plan_for(g, DIR_BWD, &c.shape);
    }
    if (p) {
        const sdpa_shape *s = &c.shape;
        int at_k = (s->B + 3) / 4 * 4;
        if (s->pad_rows) lens = row_lengths(g, s, at_k);
        size_t sum_n = (size_t)s->B * s->a * s->sq;
        // the accumulator: dense for rows; for the ragged form the queries' extent (the last
        // offset: what cuDNN reads as the total)
        size_t acc_n = s->ragged ? (size_t)c.r.off_q[c.r.n] : sum_n * s->d;
        cudaMallocAsync((void **)&sum, sum_n * sizeof *sum, g->stream);
        cudaMallocAsync((void **)&acc, (acc_n ? acc_n : 1) * sizeof *acc, g->stream);
        // the GEMM adds into it: cuDNN 9.6 and later zero it themselves, earlier ones do not (the
        // frontend zeroes it for those); zeroed here for every version, a memset beside the backward
        if (acc) cudaMemsetAsync(acc, 0, (acc_n ? acc_n : 1) * sizeof *acc, g->stream);
        if (sum && acc && (lens || !s->pad_rows)) {
            call_move_stats(g, &c, x, 0);
            float scale = 1.0f / sqrtf((float)x->d), lowest = -FLT_MAX, one = 1.0f;
            pack_t k = {{0}, {0}, 0};
            bind(&k, U_Q, x->q), bind(&k, U_K, x->k), bind(&k, U_V, x->v), bind(&k, U_O, x->o);
            bind(&k, U_DO, x->dout), bind(&k, U_DQ, x->dq), bind(&k, U_DK, x->dk), bind(&k, U_DV, x->dv);
            bind(&k, U_STATS, c.stats), bind(&k, U_SUM, sum), bind(&k, U_DQ_ACC, acc);
            bind(&k, U_SCALE, &scale), bind(&k, U_ONE, &one);
            if (x->causal || s->ragged || s->pad_rows) bind(&k, U_LOWEST, &lowest);
            if (s->pad_rows) bind(&k, U_SEQ_Q, lens), bind(&k, U_SEQ_K, lens + at_k);
            call_bind_ragged(&c, &k);
            rc = execute(g, p, &k);
        }
    }
    if (sum) cudaFreeAsync(sum, g->stream);
    if (acc) cudaFreeAsync(acc, g->stream);
    call_close(g, &c);
    return rc;
}

void rt_sdpa_free(rt_cuda *g)
{
    for (int i = 0; g->sdpa_cache && i < g->n_sdpa; i++)
        if (g->sdpa_cache[i].plan) cudnnBackendDestroyDescriptor(g->sdpa_cache[i].plan);
    free(g->sdpa_cache);
    g->sdpa_cache = NULL, g->n_sdpa = 0;
}

int rt_cuda_sdpa_check_descriptors(const rt_batch *mb, int a, int g, int d, int causal, int cross,
                                   char *why, size_t why_cap)
{
    rt_batch_seqs bs;
    rt_batch_seqs_init(&bs, mb);
    int hk = a * d, hkv = g * d;
    attn_io x;
    memset(&x, 0, sizeof x);
    x.qs = &bs.self, x.ks = cross ? &bs.enc : &bs.self, x.rows = bs.rows;
    x.B = mb->B, x.sq = mb->S, x.sk = cross ? mb->Se : mb->S, x.a = a, x.g = g, x.d = d;
    x.causal = causal, x.ldq = cross ? hk : hk + 2 * hkv, x.ldkv = cross ? 2 * hkv : hk + 2 * hkv;
    sdpa_shape s;
    rt_ragged r;
    int rc = shape_for(&x, &s, &r, why, why_cap);
    // forward, backward, and for rows the backward under needs_pad_rows's mask too (whatever
    // this machine's cuDNN version)
    for (int step = 0; rc == 0 && step < (s.ragged ? 2 : 3); step++) {
        int dir = step == 0 ? DIR_FWD : DIR_BWD;
        s.pad_rows = step == 2;
        gbuild b;
        gbuild_init(&b);
        if (dir == DIR_FWD)
            build_fwd(&b, &s);
        else
            build_bwd(&b, &s);
        if (b.st != CUDNN_STATUS_SUCCESS) {
            say_refusal(why, why_cap, &s, dir, &b);
            rc = -1;
        }
        build_free(&b);
    }
    rt_ragged_release(&r);
    rt_batch_seqs_free(&bs);
    return rc;
}
