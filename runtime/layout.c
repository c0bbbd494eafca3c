#include "layout.h"

#include <math.h>
#include <string.h>

const char *rt_dtype_name(rt_dtype dt) { return dt == RT_BF16 ? "bf16" : "fp64"; }

int rt_dtype_parse(const char *name, rt_dtype *dt)
{
    if (strcmp(name, "fp64") == 0) return *dt = RT_FP64, 0;
    if (strcmp(name, "bf16") == 0) return *dt = RT_BF16, 0;
    return -1;
}

size_t rt_dtype_act_bytes(rt_dtype dt) { return dt == RT_BF16 ? 2 : 8; }
size_t rt_dtype_stat_bytes(rt_dtype dt) { return dt == RT_BF16 ? 4 : 8; }

uint16_t rt_bf16_from_double(double v)
{
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (isnan(f)) return (uint16_t)((u >> 16) | 0x40); /* a quiet NaN */
    u += 0x7fff + ((u >> 16) & 1);                      /* round to nearest, ties to even */
    return (uint16_t)(u >> 16);
}

double rt_bf16_to_double(uint16_t b)
{
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

void rt_to_dtype(void *dst, const double *src, size_t n, rt_dtype dt)
{
    if (dt == RT_FP64) {
        memmove(dst, src, n * sizeof *src);
        return;
    }
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = rt_bf16_from_double(src[i]);
}

void rt_from_dtype(double *dst, const void *src, size_t n, rt_dtype dt)
{
    if (dt == RT_FP64) {
        memmove(dst, src, n * sizeof *dst);
        return;
    }
    const uint16_t *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = rt_bf16_to_double(s[i]);
}

void rt_to_stat(void *dst, const double *src, size_t n, rt_dtype dt)
{
    if (dt == RT_FP64) {
        memmove(dst, src, n * sizeof *src);
        return;
    }
    float *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = (float)src[i];
}

void rt_from_stat(double *dst, const void *src, size_t n, rt_dtype dt)
{
    if (dt == RT_FP64) {
        memmove(dst, src, n * sizeof *dst);
        return;
    }
    const float *s = src;
    for (size_t i = 0; i < n; i++) dst[i] = s[i];
}

static size_t align_up(size_t bytes) { return (bytes + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN; }

/* ---- parameters ------------------------------------------------------------------------------ */

int rt_layer_params_layout(const rt_layer_shape *s, size_t off[RT_P_COUNT], size_t len[RT_P_COUNT],
                           size_t *count)
{
    size_t h = (size_t)s->hidden, hk = (size_t)rt_layer_q_width(s), f = (size_t)s->ffn;
    size_t hkv = (size_t)rt_layer_kv_width(s), qkv = (size_t)rt_layer_qkv_width(s);
    size_t f1 = (size_t)rt_layer_ffn_in(s), el = (size_t)rt_layer_local_experts(s);
    size_t experts = el ? el : 1; /* a MoE layer's W1 and W2 stack its experts' */
    const size_t sizes[RT_P_COUNT] = {
        [RT_P_LN1_G] = h,          [RT_P_LN1_B] = h,      [RT_P_WQKV] = h * qkv,
        [RT_P_BQKV] = qkv,         [RT_P_WO] = hk * h,    [RT_P_BO] = h,
        [RT_P_LN2_G] = h,          [RT_P_LN2_B] = h,      [RT_P_W1] = experts * h * f1,
        [RT_P_B1] = f1,            [RT_P_W2] = experts * f * h, [RT_P_B2] = h,
        [RT_P_WR] = s->experts > 0 ? h * (size_t)s->experts : 0,
        [RT_P_LNC_G] = h,          [RT_P_LNC_B] = h,      [RT_P_WQC] = h * hk,
        [RT_P_BQC] = hk,           [RT_P_WKVC] = h * 2 * hkv, [RT_P_BKVC] = 2 * hkv,
        [RT_P_WOC] = hk * h,       [RT_P_BOC] = h};
    int n = s->cross ? RT_P_COUNT : RT_P_LNC_G;
    size_t at = 0;
    for (int i = 0; i < RT_P_COUNT; i++) {
        int absent = (s->rmsnorm && rt_param_is_norm_bias(i)) || (s->no_bias && rt_param_is_bias(i)) ||
                     (el && (i == RT_P_B1 || i == RT_P_B2)); /* experts without biases */
        off[i] = at;
        len[i] = i < n && !absent ? sizes[i] : 0;
        at += len[i];
    }
    *count = at;
    return n;
}

int rt_param_is_bias(int id)
{
    switch (id) {
    case RT_P_BQKV: case RT_P_BO: case RT_P_B1: case RT_P_B2: case RT_P_BQC: case RT_P_BKVC:
    case RT_P_BOC: return 1;
    default: return 0;
    }
}

int rt_param_is_norm_bias(int id) { return id == RT_P_LN1_B || id == RT_P_LN2_B || id == RT_P_LNC_B; }

const char *rt_param_name(int id)
{
    static const char *const names[RT_P_COUNT] = {
        "ln1_g", "ln1_b", "wqkv", "bqkv", "wo", "bo", "ln2_g", "ln2_b", "w1", "b1", "w2", "b2", "wr",
        "lnc_g", "lnc_b", "wqc", "bqc", "wkvc", "bkvc", "woc", "boc"};
    return id >= 0 && id < RT_P_COUNT ? names[id] : "?";
}

size_t rt_param_copy_offset(size_t count, rt_dtype dt)
{
    return dt == RT_BF16 ? align_up(count * 4) : 0;
}

size_t rt_param_block_bytes(size_t count, rt_dtype dt)
{
    return dt == RT_BF16 ? rt_param_copy_offset(count, dt) + count * 2 : count * 8;
}

size_t rt_grad_block_bytes(size_t count, rt_dtype dt) { return count * rt_dtype_stat_bytes(dt); }

void rt_param_block_pack(void *dst, const double *src, size_t count, rt_dtype dt)
{
    if (dt == RT_FP64) {
        memmove(dst, src, count * sizeof *src);
        return;
    }
    float *master = dst;
    uint16_t *copy = (uint16_t *)((char *)dst + rt_param_copy_offset(count, dt));
    for (size_t i = 0; i < count; i++) {
        master[i] = (float)src[i];
        copy[i] = rt_bf16_from_double(master[i]);
    }
}

/* ---- tensor parallelism ---------------------------------------------------------------------- */

rt_layer_shape rt_layer_shape_tp(const rt_layer_shape *s, int t, int ep)
{
    rt_layer_shape l = *s;
    l.ep = s->experts > 0 && ep > 1 ? ep : 0;
    l.kv_heads = rt_layer_kv_heads(s) / t;
    l.heads = s->heads / t;
    l.ffn = s->experts > 0 ? s->ffn : s->ffn / t; /* an expert runs whole on its rank */
    return l;
}

int rt_param_tp_split(int id)
{
    switch (id) {
    case RT_P_WQKV: case RT_P_BQKV: case RT_P_W1: case RT_P_B1: case RT_P_WQC: case RT_P_BQC:
    case RT_P_WKVC: case RT_P_BKVC:
        return RT_TP_COLUMNS;
    case RT_P_WO: case RT_P_W2: case RT_P_WOC:
        return RT_TP_ROWS;
    default:
        return RT_TP_WHOLE;
    }
}

int rt_param_split(const rt_layer_shape *s, int id)
{
    if (s->experts > 0 && (id == RT_P_W1 || id == RT_P_W2)) return RT_TP_EXPERTS;
    return rt_param_tp_split(id);
}

int rt_param_grad_group(const rt_layer_shape *s, int id, int t, int sp)
{
    if (t <= 1) return RT_GRAD_OWN;
    switch (id) {
    case RT_P_LN1_G: case RT_P_LN1_B: case RT_P_LN2_G: case RT_P_LN2_B: case RT_P_LNC_G:
    case RT_P_LNC_B:
        return sp ? RT_GRAD_SUM_TP : RT_GRAD_OWN;
    case RT_P_WR:
        return RT_GRAD_SUM_TP;
    case RT_P_W1: case RT_P_W2:
        return s->experts > 0 && t > (s->ep > 1 ? s->ep : 1) ? RT_GRAD_SUM_EXPERTS : RT_GRAD_OWN;
    default:
        return RT_GRAD_OWN;
    }
}

/* The column segments of a column-parallel parameter on shape s (widths, at most 3). */
static int tp_segments(const rt_layer_shape *s, int id, size_t seg[3])
{
    size_t hk = (size_t)rt_layer_q_width(s), hkv = (size_t)rt_layer_kv_width(s), f = (size_t)s->ffn;
    switch (id) {
    case RT_P_WQKV: case RT_P_BQKV: seg[0] = hk, seg[1] = seg[2] = hkv; return 3;
    case RT_P_W1: case RT_P_B1: seg[0] = seg[1] = f; return s->glu ? 2 : 1;
    case RT_P_WKVC: case RT_P_BKVC: seg[0] = seg[1] = hkv; return 2;
    default: seg[0] = hk; return 1; /* Wqc, bqc */
    }
}

void rt_layer_params_shard(const rt_layer_shape *s, const double *src, int t, int ep, int r,
                           double *dst)
{
    rt_layer_shape l = rt_layer_shape_tp(s, t, ep);
    size_t off[RT_P_COUNT], len[RT_P_COUNT], loff[RT_P_COUNT], llen[RT_P_COUNT], count;
    int n = rt_layer_params_layout(s, off, len, &count);
    rt_layer_params_layout(&l, loff, llen, &count);
    for (int id = 0; id < n; id++) {
        if (!len[id]) continue;
        const double *from = src + off[id];
        double *to = dst + loff[id];
        int how = rt_param_split(s, id);
        if (how == RT_TP_WHOLE) {
            memcpy(to, from, len[id] * sizeof *to);
        } else if (how == RT_TP_EXPERTS) { /* the experts of its expert-parallel rank, contiguous */
            memcpy(to, from + (size_t)rt_layer_expert_rank(&l, r) * llen[id], llen[id] * sizeof *to);
        } else if (how == RT_TP_ROWS) { /* rank r's rows, contiguous */
            memcpy(to, from + (size_t)r * llen[id], llen[id] * sizeof *to);
        } else {
            size_t seg[3], cols = 0;
            int ns = tp_segments(s, id, seg);
            for (int k = 0; k < ns; k++) cols += seg[k];
            for (size_t row = 0; row < len[id] / cols; row++) {
                const double *fr = from + row * cols;
                double *tr = to + row * (cols / t);
                for (int k = 0, at = 0; k < ns; at += (int)seg[k], k++) {
                    size_t part = seg[k] / t;
                    memcpy(tr, fr + at + (size_t)r * part, part * sizeof *tr);
                    tr += part;
                }
            }
        }
    }
}

/* ---- saved activations ----------------------------------------------------------------------- */

enum { CLASS_ACT, CLASS_STAT, CLASS_SOFTMAX };

void rt_layer_acts_layout(const rt_layer_shape *s, int B, int S, int Se, rt_dtype dt,
                          rt_acts_layout *out)
{
    size_t cp = s->cp > 1 ? (size_t)s->cp : 1, whole = (size_t)B * S;
    size_t n = whole / cp, h = (size_t)s->hidden, hk = (size_t)rt_layer_q_width(s);
    size_t hkv = (size_t)rt_layer_kv_width(s), qkv = (size_t)rt_layer_qkv_width(s);
    size_t f = (size_t)s->ffn, f1 = (size_t)rt_layer_ffn_in(s), a = (size_t)s->heads;
    size_t se = s->cross ? (size_t)Se : 0;
    size_t ne = (size_t)B * se;
    /* a MoE layer: a row per routed copy of a token that this rank's experts run, at most the
     * tokens times the experts a token runs here (topk, or all the rank holds) */
    size_t el = (size_t)rt_layer_local_experts(s), k = el ? (size_t)s->topk : 0;
    size_t rows = el ? n * (k < el ? k : el) : n;
    /* the attention's saved state: probabilities (fp64) or a log-sum-exp per query (bf16) */
    size_t self_attn = dt == RT_BF16 ? n * a : n * a * S;
    size_t cross_attn = dt == RT_BF16 ? (s->cross ? (size_t)B * a * S : 0) : (size_t)B * a * S * se;
    const struct {
        size_t elems;
        int cls;
    } t[RT_A_COUNT] = {
        [RT_A_X] = {n * h, CLASS_ACT},        [RT_A_H1] = {n * h, CLASS_ACT},
        [RT_A_MEAN1] = {n, CLASS_STAT},       [RT_A_RSTD1] = {n, CLASS_STAT},
        [RT_A_QKV] = {n * qkv, CLASS_ACT},    [RT_A_P] = {self_attn, CLASS_SOFTMAX},
        [RT_A_CTX] = {n * hk, CLASS_ACT},     [RT_A_X2] = {n * h, CLASS_ACT},
        [RT_A_H2] = {n * h, CLASS_ACT},       [RT_A_MEAN2] = {n, CLASS_STAT},
        [RT_A_RSTD2] = {n, CLASS_STAT},       [RT_A_U] = {rows * f1, CLASS_ACT},
        [RT_A_G] = {rows * f, CLASS_ACT},     [RT_A_D_QKV] = {n * qkv, CLASS_ACT},
        [RT_A_D_O] = {n * h, CLASS_ACT},      [RT_A_D_U] = {rows * f1, CLASS_ACT},
        [RT_A_D_Y] = {n * h, CLASS_ACT},      [RT_A_KVG] = {cp > 1 ? whole * 2 * hkv : 0, CLASS_ACT},
        [RT_A_ROUTE] = {n * 2 * k, CLASS_STAT},
        [RT_A_OE] = {el ? rows * h : 0, CLASS_ACT}, [RT_A_D_OE] = {el ? rows * h : 0, CLASS_ACT},
        [RT_A_D_LOGITS] = {el ? n * (size_t)s->experts : 0, CLASS_STAT},
        [RT_A_XC] = {n * h, CLASS_ACT},
        [RT_A_HC] = {n * h, CLASS_ACT},       [RT_A_MEANC] = {n, CLASS_STAT},
        [RT_A_RSTDC] = {n, CLASS_STAT},       [RT_A_QC] = {n * hk, CLASS_ACT},
        [RT_A_KVC] = {ne * 2 * hkv, CLASS_ACT}, [RT_A_PC] = {cross_attn, CLASS_SOFTMAX},
        [RT_A_CTXC] = {n * hk, CLASS_ACT},    [RT_A_D_QC] = {n * hk, CLASS_ACT},
        [RT_A_D_KVC] = {ne * 2 * hkv, CLASS_ACT}, [RT_A_D_OC] = {n * h, CLASS_ACT}};
    memset(out, 0, sizeof *out);
    out->count = s->cross ? RT_A_COUNT : RT_A_XC;
    size_t at = 0;
    for (int i = 0; i < out->count; i++) {
        size_t eb = t[i].cls == CLASS_ACT ? rt_dtype_act_bytes(dt) : rt_dtype_stat_bytes(dt);
        int is_mean = i == RT_A_MEAN1 || i == RT_A_MEAN2 || i == RT_A_MEANC; /* RMSNorm has none */
        if (dt == RT_BF16) at = align_up(at);
        out->off[i] = at;
        out->elems[i] = is_mean && s->rmsnorm ? 0 : t[i].elems;
        out->bytes[i] = out->elems[i] * eb;
        at += out->bytes[i];
    }
    out->total = dt == RT_BF16 ? align_up(at) : at;
}

size_t rt_layer_acts_bytes(const rt_layer_shape *s, int B, int S, int Se, rt_dtype dt)
{
    rt_acts_layout l;
    rt_layer_acts_layout(s, B, S, Se, dt, &l);
    return l.total;
}

int rt_act_is_forward(int id)
{
    switch (id) {
    case RT_A_D_QKV: case RT_A_D_O: case RT_A_D_U: case RT_A_D_Y: case RT_A_D_OE: case RT_A_D_LOGITS:
    case RT_A_D_QC: case RT_A_D_KVC: case RT_A_D_OC: return 0;
    default: return 1;
    }
}

size_t rt_acts_forward_bytes(const rt_acts_layout *l)
{
    size_t b = 0;
    for (int i = 0; i < l->count; i++)
        if (rt_act_is_forward(i)) b += l->bytes[i];
    return b;
}
