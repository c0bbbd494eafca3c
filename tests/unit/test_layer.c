/* Gradient checks of every op of the CPU transformer layer against central finite differences. */
#include "testutil.h"

#include <math.h>

#include "../../models/model.h"
#include "../../runtime/layer.h"

static unsigned rng = 12345;
static double urand(void)
{
    rng = rng * 1664525u + 1013904223u;
    return (double)(rng >> 8) / (double)(1u << 24) * 2 - 1;
}

static double *rnd(size_t n)
{
    double *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = urand();
    return v;
}

/* Loss L = sum(out o R) for a fixed random R: dL/dout = R. */
typedef void (*fwd_fn)(void *ctx, double *out);

static double loss_of(fwd_fn f, void *ctx, double *out, const double *R, size_t n_out)
{
    f(ctx, out);
    double l = 0;
    for (size_t i = 0; i < n_out; i++) l += out[i] * R[i];
    return l;
}

/* Compares an analytic gradient g of input x (n values) with central differences. */
static void check_grad(const char *what, fwd_fn f, void *ctx, double *x, size_t n, const double *g,
                       const double *R, size_t n_out)
{
    double *out = malloc(n_out * sizeof *out), num2 = 0, den2 = 0, eps = 1e-6;
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + eps;
        double lp = loss_of(f, ctx, out, R, n_out);
        x[i] = keep - eps;
        double lm = loss_of(f, ctx, out, R, n_out);
        x[i] = keep;
        double fd = (lp - lm) / (2 * eps);
        num2 += (fd - g[i]) * (fd - g[i]);
        den2 += fd * fd;
    }
    free(out);
    double rel = sqrt(num2 / (den2 > 0 ? den2 : 1));
    if (!(rel < 1e-6)) fail_msg("%s: relative gradient error %.3g", what, rel);
}

/* ---- linear ---- */
typedef struct lin_ctx { double *x, *w, *b; int n, in, out; } lin_ctx;
static void lin_fwd(void *c, double *y)
{
    lin_ctx *l = c;
    rt_linear_fwd(l->x, l->w, l->b, y, l->n, l->in, l->out);
}

static void test_linear_grad(void **state)
{
    (void)state;
    lin_ctx l = {rnd(3 * 5), rnd(5 * 4), rnd(4), 3, 5, 4};
    double *R = rnd(12), *dx = calloc(15, sizeof *dx), *dw = calloc(20, sizeof *dw), *db = calloc(4, sizeof *db);
    rt_linear_bwd_input(R, l.w, dx, 3, 5, 4);
    rt_linear_bwd_weight(l.x, R, dw, db, 3, 5, 4);
    check_grad("linear dx", lin_fwd, &l, l.x, 15, dx, R, 12);
    check_grad("linear dW", lin_fwd, &l, l.w, 20, dw, R, 12);
    check_grad("linear db", lin_fwd, &l, l.b, 4, db, R, 12);
    free(l.x), free(l.w), free(l.b), free(R), free(dx), free(dw), free(db);
}

/* ---- layer norm ---- */
typedef struct ln_ctx { double *x, *g, *b, *mean, *rstd; int n, h; double eps; } ln_ctx;
static void ln_fwd(void *c, double *y)
{
    ln_ctx *l = c;
    rt_layernorm_fwd(l->x, l->g, l->b, y, l->mean, l->rstd, l->n, l->h, l->eps);
}

static void test_layernorm_grad(void **state)
{
    (void)state;
    ln_ctx l = {rnd(4 * 6), rnd(6), rnd(6), calloc(4, sizeof(double)), calloc(4, sizeof(double)), 4, 6,
                RT_NORM_EPS};
    double *R = rnd(24), *y = malloc(24 * sizeof *y), *dx = calloc(24, sizeof *dx);
    double *dg = calloc(6, sizeof *dg), *db = calloc(6, sizeof *db);
    ln_fwd(&l, y);
    rt_layernorm_bwd(R, l.x, l.g, l.mean, l.rstd, dx, dg, db, 4, 6);
    check_grad("layernorm dx", ln_fwd, &l, l.x, 24, dx, R, 24);
    check_grad("layernorm dg", ln_fwd, &l, l.g, 6, dg, R, 24);
    check_grad("layernorm db", ln_fwd, &l, l.b, 6, db, R, 24);
    free(l.x), free(l.g), free(l.b), free(l.mean), free(l.rstd), free(R), free(y), free(dx), free(dg), free(db);
}

/* ---- RMSNorm ---- */
static void rms_fwd(void *c, double *y)
{
    ln_ctx *l = c;
    rt_rmsnorm_fwd(l->x, l->g, y, l->rstd, l->n, l->h, l->eps);
}

static void test_rmsnorm_grad(void **state)
{
    (void)state;
    /* a large epsilon (0.25), so that the by-hand check below sees it */
    ln_ctx l = {rnd(4 * 6), rnd(6), NULL, NULL, calloc(4, sizeof(double)), 4, 6, 0.25};
    double *R = rnd(24), *y = malloc(24 * sizeof *y), *dx = calloc(24, sizeof *dx);
    double *dg = calloc(6, sizeof *dg);
    rms_fwd(&l, y);
    rt_rmsnorm_bwd(R, l.x, l.g, l.rstd, dx, dg, 4, 6);
    check_grad("rmsnorm dx", rms_fwd, &l, l.x, 24, dx, R, 24);
    check_grad("rmsnorm dg", rms_fwd, &l, l.g, 6, dg, R, 24);
    /* y = x / sqrt(mean(x^2) + eps) * g, by hand for one row */
    double ss = 0;
    for (int j = 0; j < 6; j++) ss += l.x[6 + j] * l.x[6 + j];
    assert_true(fabs(y[6 + 2] - l.x[6 + 2] / sqrt(ss / 6 + 0.25) * l.g[2]) < 1e-14);
    /* a layer's norm takes its model's epsilon (Qwen2's 1e-6 here, 0.25 to be seen), by hand */
    model_spec m = *model_preset("llama2-7b");
    m.norm_eps = 0.25;
    rt_layer_shape s = rt_layer_shape_of(&m, RT_LAYER_GPT);
    s.hidden = 6;
    rt_norm_fwd(&s, l.x, l.g, NULL, y, NULL, l.rstd, 4, 6);
    assert_true(fabs(l.rstd[1] - 1 / sqrt(ss / 6 + 0.25)) < 1e-14);
    m.norm_eps = 0; /* the default */
    s = rt_layer_shape_of(&m, RT_LAYER_GPT);
    s.hidden = 6;
    rt_norm_fwd(&s, l.x, l.g, NULL, y, NULL, l.rstd, 4, 6);
    assert_true(fabs(l.rstd[1] - 1 / sqrt(ss / 6 + 1e-5)) < 1e-14);
    free(l.x), free(l.g), free(l.rstd), free(R), free(y), free(dx), free(dg);
}

/* ---- rotary position embeddings ---- */
typedef struct rope_ctx { double *x; const int *pos; int n, ld, heads, d; double base; } rope_ctx;
static void rope_fwd(void *c, double *y)
{
    rope_ctx *r = c;
    memcpy(y, r->x, (size_t)r->n * r->ld * sizeof *y);
    rt_rope(y, r->ld, r->heads, r->d, r->base, r->pos, r->n, 0);
}

static void test_rope(void **state)
{
    (void)state;
    /* 5 tokens (positions 0, 1, 2 of one sample, 0 of the next, one padding token) in rows of 3
     * heads of width 4 and 2 more columns (a v head of width 2): the first 2 heads turn */
    static const int pos[5] = {0, 1, 2, 0, -1};
    rope_ctx r = {rnd(5 * 14), pos, 5, 14, 2, 4, 10000};
    size_t n = 5 * 14;
    double *R = rnd(n), *y = malloc(n * sizeof *y), *dx = malloc(n * sizeof *dx);
    rope_fwd(&r, y);
    for (int c = 0; c < 14; c++) { /* position 0 and padding: unchanged; the third head too */
        assert_true(y[c] == r.x[c] && y[3 * 14 + c] == r.x[3 * 14 + c] && y[4 * 14 + c] == r.x[4 * 14 + c]);
        assert_true(c < 8 || y[14 + c] == r.x[14 + c]);
    }
    /* position 2, pair (1, 3) of head 1: angle 2 * 10000^(-2/4) */
    double th = 2 * pow(10000, -0.5), a = r.x[2 * 14 + 4 + 1], b = r.x[2 * 14 + 4 + 3];
    assert_true(fabs(y[2 * 14 + 4 + 1] - (a * cos(th) - b * sin(th))) < 1e-15);
    assert_true(fabs(y[2 * 14 + 4 + 3] - (b * cos(th) + a * sin(th))) < 1e-15);
    /* Llama-3's base: angle 2 * 500000^(-2/4); pair (0, 2) turns by the position alone */
    double *y3 = malloc(n * sizeof *y3);
    r.base = 500000;
    rope_fwd(&r, y3);
    th = 2 * pow(500000, -0.5);
    assert_true(fabs(y3[2 * 14 + 4 + 1] - (a * cos(th) - b * sin(th))) < 1e-15);
    a = r.x[2 * 14], b = r.x[2 * 14 + 2];
    assert_true(fabs(y3[2 * 14] - (a * cos(2.0) - b * sin(2.0))) < 1e-15);
    free(y3);
    r.base = 10000;
    /* the backward (the inverse rotation) is the gradient, and undoes the forward */
    memcpy(dx, R, n * sizeof *dx);
    rt_rope(dx, 14, 2, 4, r.base, pos, 5, 1);
    check_grad("rope dx", rope_fwd, &r, r.x, n, dx, R, n);
    rt_rope(y, 14, 2, 4, r.base, pos, 5, 1);
    for (size_t i = 0; i < n; i++) assert_true(fabs(y[i] - r.x[i]) < 1e-15);
    /* positions restart in each sequence; padding is -1 */
    int off[2] = {0, 3}, len[2] = {3, 1}, got[5];
    rt_seqs s = {.n = 2, .off = off, .len = len};
    rt_seqs_positions(&s, 5, got);
    for (int t = 0; t < 5; t++) assert_int_equal(got[t], pos[t]);
    free(r.x), free(R), free(y), free(dx);
}

/* ---- GELU ---- */
typedef struct gelu_ctx { double *u; size_t n; } gelu_ctx;
static void gelu_fwd(void *c, double *g)
{
    gelu_ctx *x = c;
    rt_gelu_fwd(x->u, g, x->n);
}

static void test_gelu_grad(void **state)
{
    (void)state;
    gelu_ctx x = {rnd(20), 20};
    for (int i = 0; i < 20; i++) x.u[i] *= 3;
    double *R = rnd(20), *du = malloc(20 * sizeof *du);
    rt_gelu_bwd(R, x.u, du, 20);
    check_grad("gelu", gelu_fwd, &x, x.u, 20, du, R, 20);
    free(x.u), free(R), free(du);
}

/* ---- SwiGLU ---- */
typedef struct swiglu_ctx { double *u; int n, f; } swiglu_ctx;
static void swiglu_fwd(void *c, double *g)
{
    swiglu_ctx *x = c;
    rt_swiglu_fwd(x->u, g, x->n, x->f);
}

static void test_swiglu_grad(void **state)
{
    (void)state;
    swiglu_ctx x = {rnd(3 * 2 * 7), 3, 7};
    for (int i = 0; i < 42; i++) x.u[i] *= 3;
    double *R = rnd(21), *du = malloc(42 * sizeof *du), g[21];
    rt_swiglu_bwd(R, x.u, du, 3, 7);
    check_grad("swiglu", swiglu_fwd, &x, x.u, 42, du, R, 21);
    /* g = silu(gate) * up, by hand for one element */
    swiglu_fwd(&x, g);
    double a = x.u[2 * 7 + 1], b = x.u[2 * 7 + 7 + 1];
    assert_true(fabs(g[7 + 1] - a / (1 + exp(-a)) * b) < 1e-15);
    free(x.u), free(R), free(du);
}

/* ---- attention ---- */
typedef struct att_ctx { double *q, *k, *v, *p; int B, a, g, sq, sk, d, causal; rt_seqs qs, ks; } att_ctx;
static void att_fwd(void *c, double *ctx)
{
    att_ctx *t = c;
    memset(ctx, 0, (size_t)t->B * t->sq * t->a * t->d * sizeof *ctx);
    rt_attention_fwd(t->q, t->k, t->v, t->a * t->d, t->g * t->d, t->p, ctx, &t->qs, &t->ks, t->a,
                     t->g, t->d, t->causal);
}

/* a query heads and g key/value heads; rows (qs, ks NULL: B rows of sq and of sk tokens) or the
 * given sequences. */
static void attention_case(int causal, int sq, int sk, const rt_seqs *qs, const rt_seqs *ks, int a,
                           int g)
{
    int B = 2, d = 3, w = a * d, wk = g * d, qo[2], ql[2], ko[2], kl[2];
    att_ctx t = {rnd((size_t)B * sq * w), rnd((size_t)B * sk * wk), rnd((size_t)B * sk * wk),
                 malloc((size_t)B * a * sq * sk * sizeof(double)), B, a, g, sq, sk, d, causal,
                 {0, NULL, NULL, NULL}, {0, NULL, NULL, NULL}};
    if (qs) t.qs = *qs, t.ks = *ks;
    else rt_seqs_rows(&t.qs, B, sq, qo, ql), rt_seqs_rows(&t.ks, B, sk, ko, kl);
    size_t no = (size_t)B * sq * w, nk = (size_t)B * sk * wk;
    double *R = rnd(no), *ctx = malloc(no * sizeof *ctx);
    double *dq = calloc(no, sizeof *dq), *dk = calloc(nk, sizeof *dk), *dv = calloc(nk, sizeof *dv);
    att_fwd(&t, ctx);
    rt_attention_bwd(R, t.q, t.k, t.v, w, wk, t.p, dq, dk, dv, &t.qs, &t.ks, a, g, d);
    check_grad("attention dq", att_fwd, &t, t.q, no, dq, R, no);
    check_grad("attention dk", att_fwd, &t, t.k, nk, dk, R, no);
    check_grad("attention dv", att_fwd, &t, t.v, nk, dv, R, no);
    free(t.q), free(t.k), free(t.v), free(t.p), free(R), free(ctx), free(dq), free(dk), free(dv);
}

static void test_attention_grad(void **state)
{
    (void)state;
    attention_case(1, 5, 5, NULL, NULL, 2, 2); /* causal self-attention (GPT, T5 decoder) */
    attention_case(0, 5, 5, NULL, NULL, 2, 2); /* bidirectional (T5 encoder) */
    attention_case(0, 3, 6, NULL, NULL, 2, 2); /* cross-attention: decoder queries, encoder keys */
    /* varlen: three samples packed into 2 rows of 6 tokens with 2 tokens of padding, causal
     * and not; and cross-attention pairing the samples' decoder and encoder tokens */
    static const int off[3] = {0, 4, 7}, len[3] = {4, 3, 3};
    static const int eoff[3] = {0, 5, 6}, elen[3] = {5, 1, 4};
    rt_seqs s3 = {.n = 3, .off = off, .len = len}, e3 = {.n = 3, .off = eoff, .len = elen};
    attention_case(1, 6, 6, &s3, &s3, 2, 2);
    attention_case(0, 6, 6, &s3, &s3, 2, 2);
    attention_case(0, 6, 6, &s3, &e3, 2, 2);
    /* grouped-query: 4 query heads on 2 key/value heads, and on 1 (multi-query) */
    attention_case(1, 5, 5, NULL, NULL, 4, 2);
    attention_case(1, 6, 6, &s3, &s3, 4, 1);
    attention_case(0, 6, 6, &s3, &e3, 4, 2);
}

/* ---- softmax cross-entropy ---- */
typedef struct xent_ctx { double *logits, *dl; int *t; int n, V; } xent_ctx;
static void xent_fwd(void *c, double *out)
{
    xent_ctx *x = c;
    out[0] = rt_softmax_xent(x->logits, x->t, x->dl, x->n, x->V);
}

static void test_xent_grad(void **state)
{
    (void)state;
    int t[3] = {0, 4, 2};
    xent_ctx x = {rnd(15), malloc(15 * sizeof(double)), t, 3, 5};
    double R = 1, out, *g = malloc(15 * sizeof *g);
    xent_fwd(&x, &out);
    memcpy(g, x.dl, 15 * sizeof *g);
    assert_true(out > 0);
    check_grad("softmax cross-entropy", xent_fwd, &x, x.logits, 15, g, &R, 1);
    free(x.logits), free(x.dl), free(g);
}

/* ---- the whole layer ---- */
typedef struct layer_ctx { rt_layer_params p; rt_layer_shape s; rt_layer_acts a; double *x, *enc; int B, S, Se; } layer_ctx;
static void layer_fwd(void *c, double *y)
{
    layer_ctx *l = c;
    l->a.enc = l->enc;
    rt_layer_fwd(&l->p, &l->s, l->B, l->S, l->x, y, &l->a);
}

static void test_layer_grad(void **state)
{
    (void)state;
    /* a GPT layer, a T5 encoder layer, a T5 decoder layer with cross-attention, a SwiGLU layer;
     * with grouped-query attention (4 query heads on 2 key/value heads) a SwiGLU layer and a
     * decoder layer; LLaMA's layer (RMSNorm, no biases, rotary positions, SwiGLU, grouped-query);
     * a decoder layer with RMSNorm and no biases; a mixture of experts' LLaMA layer (4 experts, 2
     * a token: the router's gradient through the softmax of the chosen logits) */
    for (int kind = 0; kind < 9; kind++) {
        int causal = kind != 1, cross = kind == 2 || kind == 5 || kind == 7, moe = kind == 8;
        int glu = kind == 3 || kind == 4 || kind == 6, gqa = kind >= 4 && kind <= 6, llama = kind >= 6;
        layer_ctx l = {.s = {.hidden = 8, .heads = gqa ? 4 : 2, .kv = gqa ? 2 : 3, .ffn = moe ? 6 : 12,
                             .causal = causal, .cross = cross, .glu = glu || moe,
                             .kv_heads = gqa ? 2 : 0, .rmsnorm = llama, .no_bias = llama,
                             .rope_base = kind >= 6 && !cross ? 500000 : 0,
                             .experts = moe ? 4 : 0, .topk = moe ? 2 : 0},
                       .B = 2, .S = 4, .Se = cross ? 5 : 0};
        assert_int_equal(rt_layer_params_alloc(&l.p, &l.s), 0);
        rt_layer_params_init(&l.p, &l.s, 7);
        for (size_t i = 0; i < l.p.count; i++) l.p.block[i] *= 10; /* away from linear regime */
        assert_int_equal(rt_layer_acts_alloc(&l.a, &l.s, l.B, l.S, l.Se), 0);
        size_t n = (size_t)l.B * l.S * l.s.hidden, ne = (size_t)l.B * l.Se * l.s.hidden;
        l.x = rnd(n);
        l.enc = cross ? rnd(ne) : NULL;
        double *denc = cross ? calloc(ne, sizeof *denc) : NULL;
        double *R = rnd(n), *y = malloc(n * sizeof *y), *dx = malloc(n * sizeof *dx);
        rt_layer_params grad;
        assert_int_equal(rt_layer_params_alloc(&grad, &l.s), 0);
        layer_fwd(&l, y);
        l.a.denc = denc;
        rt_layer_bwd_input(&l.p, &grad, &l.s, l.B, l.S, R, dx, &l.a);
        rt_layer_bwd_weight(&grad, &l.s, l.B, l.S, &l.a);
        check_grad("layer dx", layer_fwd, &l, l.x, n, dx, R, n);
        check_grad("layer d(all parameters)", layer_fwd, &l, l.p.block, l.p.count, grad.block, R, n);
        if (cross) check_grad("decoder layer d(encoder output)", layer_fwd, &l, l.enc, ne, denc, R, n);
        rt_layer_params_free(&l.p), rt_layer_params_free(&grad), rt_layer_acts_free(&l.a);
        free(l.x), free(l.enc), free(denc), free(R), free(y), free(dx);
    }
}

/* A varlen (THD) micro-batch is its samples run one by one: samples packed back to back into
 * rows, attending each to itself, give every sample's tokens the outputs and input gradients
 * that the sample alone (a row of its own length) gets, and the parameter gradients add up
 * (padding tokens carry no gradient). For a GPT layer and a T5 decoder layer, whose queries
 * attend to their own sample's encoder tokens. */
static void varlen_case(int cross, int llama)
{
    rt_layer_shape s = {.hidden = 8, .heads = llama ? 4 : 2, .kv = llama ? 2 : 3, .ffn = 12,
                        .causal = 1, .cross = cross, .glu = llama, .kv_heads = llama ? 2 : 0,
                        .rmsnorm = llama, .no_bias = llama, .rope_base = llama ? 10000 : 0};
    enum { N = 3 };
    const int len[N] = {5, 3, 4}, elen[N] = {4, 5, 2};
    int off[N], eoff[N], B = 2, S = 7, Se = cross ? 6 : 0, h = s.hidden;
    for (int j = 0, t = 0, e = 0; j < N; t += len[j], e += elen[j], j++) off[j] = t, eoff[j] = e;
    rt_seqs seqs = {.n = N, .off = off, .len = len}, enc_seqs = {.n = N, .off = eoff, .len = elen};
    size_t n = (size_t)B * S * h, ne = (size_t)B * Se * h;
    rt_layer_params p, g, g1;
    rt_layer_acts a;
    assert_int_equal(rt_layer_params_alloc(&p, &s), 0);
    assert_int_equal(rt_layer_params_alloc(&g, &s), 0);
    assert_int_equal(rt_layer_params_alloc(&g1, &s), 0);
    rt_layer_params_init(&p, &s, 11);
    for (size_t i = 0; i < p.count; i++) p.block[i] *= 10;
    double *x = rnd(n), *dy = rnd(n), *enc = cross ? rnd(ne) : NULL;
    double *denc = cross ? calloc(ne, sizeof *denc) : NULL;
    for (size_t i = (size_t)(off[N - 1] + len[N - 1]) * h; i < n; i++) dy[i] = 0; /* padding */
    double *y = malloc(n * sizeof *y), *dx = malloc(n * sizeof *dx);
    assert_int_equal(rt_layer_acts_alloc(&a, &s, B, S, Se), 0);
    a.enc = enc, a.denc = denc, a.seqs = &seqs, a.enc_seqs = cross ? &enc_seqs : NULL;
    rt_layer_fwd(&p, &s, B, S, x, y, &a);
    rt_layer_bwd_input(&p, &g, &s, B, S, dy, dx, &a);
    rt_layer_bwd_weight(&g, &s, B, S, &a);
    rt_layer_acts_free(&a);
    for (int j = 0; j < N; j++) { /* sample j alone */
        size_t nj = (size_t)len[j] * h, nej = cross ? (size_t)elen[j] * h : 0;
        double *yj = malloc(nj * sizeof *yj), *dxj = malloc(nj * sizeof *dxj);
        double *dencj = cross ? calloc(nej, sizeof *dencj) : NULL;
        rt_layer_acts aj;
        assert_int_equal(rt_layer_acts_alloc(&aj, &s, 1, len[j], cross ? elen[j] : 0), 0);
        aj.enc = cross ? enc + (size_t)eoff[j] * h : NULL, aj.denc = dencj;
        rt_layer_fwd(&p, &s, 1, len[j], x + (size_t)off[j] * h, yj, &aj);
        rt_layer_bwd_input(&p, &g1, &s, 1, len[j], dy + (size_t)off[j] * h, dxj, &aj);
        rt_layer_bwd_weight(&g1, &s, 1, len[j], &aj);
        for (size_t i = 0; i < nj; i++) {
            assert_true(fabs(yj[i] - y[(size_t)off[j] * h + i]) < 1e-12);
            assert_true(fabs(dxj[i] - dx[(size_t)off[j] * h + i]) < 1e-12);
        }
        for (size_t i = 0; i < nej; i++) assert_true(fabs(dencj[i] - denc[(size_t)eoff[j] * h + i]) < 1e-12);
        rt_layer_acts_free(&aj);
        free(yj), free(dxj), free(dencj);
    }
    for (size_t i = 0; i < p.count; i++) /* g1 accumulated the samples one after another */
        assert_true(fabs(g1.block[i] - g.block[i]) < 1e-10 * (1 + fabs(g.block[i])));
    rt_layer_params_free(&p), rt_layer_params_free(&g), rt_layer_params_free(&g1);
    free(x), free(dy), free(enc), free(denc), free(y), free(dx);
}

static void test_varlen_is_the_samples_alone(void **state)
{
    (void)state;
    varlen_case(0, 0);
    varlen_case(1, 0);
    varlen_case(0, 1); /* LLaMA's layer: each sample's positions start at 0 */
}

/* Selective recompute reruns a layer's attention cores from its saved projections: after the
 * forward's probabilities and contexts are overwritten, rt_layer_recompute_attention gives them
 * back bit for bit (whole rows, varlen sequences, a T5 decoder layer's cross-attention and a
 * LLaMA layer's rotated queries and keys), and the backward from them gives the gradients of
 * the backward from the forward's own. */
static void recompute_case(int cross, int varlen, int llama)
{
    rt_layer_shape s = {.hidden = 8, .heads = llama ? 4 : 2, .kv = llama ? 2 : 3, .ffn = 12,
                        .causal = 1, .cross = cross, .glu = llama, .kv_heads = llama ? 2 : 0,
                        .rmsnorm = llama, .no_bias = llama, .rope_base = llama ? 10000 : 0};
    enum { N = 3 };
    int off[N] = {0, 5, 8}, len[N] = {5, 3, 4}, eoff[N] = {0, 4, 9}, elen[N] = {4, 5, 2};
    rt_seqs seqs = {.n = N, .off = off, .len = len}, enc_seqs = {.n = N, .off = eoff, .len = elen};
    int B = 2, S = 7, Se = cross ? 6 : 0, h = s.hidden;
    size_t n = (size_t)B * S * h, ne = (size_t)B * Se * h;
    rt_layer_params p, g0, g1;
    assert_int_equal(rt_layer_params_alloc(&p, &s), 0);
    assert_int_equal(rt_layer_params_alloc(&g0, &s), 0);
    assert_int_equal(rt_layer_params_alloc(&g1, &s), 0);
    rt_layer_params_init(&p, &s, 5);
    double *x = rnd(n), *dy = rnd(n), *enc = cross ? rnd(ne) : NULL;
    double *y = malloc(n * sizeof *y), *dx0 = malloc(n * sizeof *dx0), *dx1 = malloc(n * sizeof *dx1);
    rt_layer_acts a;
    assert_int_equal(rt_layer_acts_alloc(&a, &s, B, S, Se), 0);
    a.enc = enc, a.seqs = varlen ? &seqs : NULL, a.enc_seqs = varlen && cross ? &enc_seqs : NULL;
    rt_layer_fwd(&p, &s, B, S, x, y, &a);
    size_t bytes = a.count * sizeof(double);
    double *saved = malloc(bytes);
    memcpy(saved, a.block, bytes);
    rt_layer_bwd_input(&p, &g0, &s, B, S, dy, dx0, &a);
    rt_layer_bwd_weight(&g0, &s, B, S, &a);
    memcpy(a.block, saved, bytes); /* the forward's state again, then its cores spoilt */
    size_t np = varlen ? (size_t)s.heads * rt_seqs_pairs(&seqs, &seqs) : (size_t)B * s.heads * S * S;
    size_t npc = varlen ? (size_t)s.heads * rt_seqs_pairs(&seqs, &enc_seqs) : (size_t)B * s.heads * S * Se;
    size_t nq = (size_t)B * S * rt_layer_q_width(&s);
    for (size_t i = 0; i < np; i++) a.p[i] = NAN;
    for (size_t i = 0; i < nq; i++) a.ctx[i] = NAN;
    for (size_t i = 0; cross && i < npc; i++) a.pc[i] = NAN;
    for (size_t i = 0; cross && i < nq; i++) a.ctxc[i] = NAN;
    rt_layer_recompute_attention(&s, B, S, &a);
    assert_memory_equal(a.block, saved, bytes);
    rt_layer_bwd_input(&p, &g1, &s, B, S, dy, dx1, &a);
    rt_layer_bwd_weight(&g1, &s, B, S, &a);
    assert_memory_equal(dx0, dx1, n * sizeof *dx0);
    assert_memory_equal(g0.block, g1.block, p.count * sizeof(double));
    rt_layer_acts_free(&a);
    rt_layer_params_free(&p), rt_layer_params_free(&g0), rt_layer_params_free(&g1);
    free(x), free(dy), free(enc), free(y), free(dx0), free(dx1), free(saved);
}

static void test_recompute_attention(void **state)
{
    (void)state;
    recompute_case(0, 0, 0);
    recompute_case(0, 1, 0);
    recompute_case(1, 0, 0);
    recompute_case(1, 1, 0);
    recompute_case(0, 1, 1);
}

/* A grouped-query layer is the multi-head layer whose key and value heads are copies: query head h
 * of the multi-head layer reads copy h of key/value head h / (heads / kv_heads). Its outputs and
 * input gradients are the same, and a shared key/value head's weight gradient is the sum of its
 * copies'. For a T5 decoder layer (the fused QKV and the cross-attention's KV projection). */

/* The grouped-query column that multi-head column c of a [q (q_cols) | k | v] projection copies. */
static int gqa_col(int c, int q_cols, int a, int g, int d)
{
    if (c < q_cols) return c;
    c -= q_cols;
    int part = c / (a * d), h = c % (a * d) / d, j = c % d;
    return q_cols + part * g * d + h / (a / g) * d + j;
}

/* The grouped-query projection's gradient (wg (h, cols_g), bg) is the multi-head one's (wm (h,
 * cols_m), bm) summed over each column's copies. */
static void shared_heads_sum(const double *wg, const double *bg, const double *wm, const double *bm,
                             int h, int cols_g, int cols_m, int q_cols, int a, int g, int d)
{
    double *sum_w = calloc((size_t)h * cols_g, sizeof *sum_w), *sum_b = calloc(cols_g, sizeof *sum_b);
    for (int c = 0; c < cols_m; c++) {
        int cg = gqa_col(c, q_cols, a, g, d);
        sum_b[cg] += bm[c];
        for (int i = 0; i < h; i++) sum_w[i * cols_g + cg] += wm[i * cols_m + c];
    }
    for (int c = 0; c < cols_g; c++) {
        assert_true(fabs(sum_b[c] - bg[c]) < 1e-10 * (1 + fabs(bg[c])));
        for (int i = 0; i < h; i++)
            assert_true(fabs(sum_w[i * cols_g + c] - wg[i * cols_g + c]) < 1e-10 * (1 + fabs(wg[i * cols_g + c])));
    }
    free(sum_w), free(sum_b);
}

static void test_gqa_is_mha_with_copied_heads(void **state)
{
    (void)state;
    rt_layer_shape sg = {.hidden = 8, .heads = 4, .kv = 2, .ffn = 12, .causal = 1, .cross = 1,
                         .kv_heads = 2}, sm = sg;
    sm.kv_heads = 0;
    int B = 2, S = 4, Se = 3, hk = 8, a = 4, g = 2, d = 2, h = sg.hidden;
    rt_layer_params pg, pm, gg, gm;
    rt_layer_acts ag, am;
    assert_int_equal(rt_layer_params_alloc(&pg, &sg), 0);
    assert_int_equal(rt_layer_params_alloc(&pm, &sm), 0);
    assert_int_equal(rt_layer_params_alloc(&gg, &sg), 0);
    assert_int_equal(rt_layer_params_alloc(&gm, &sm), 0);
    assert_true(pm.count > pg.count);
    rt_layer_params_init(&pg, &sg, 5);
    for (size_t i = 0; i < pg.count; i++) pg.block[i] *= 10;
    /* the same parameters; the multi-head layer's K and V columns copied from their groups' */
    const double *from[] = {pg.ln1_g, pg.ln1_b, pg.wo, pg.bo, pg.ln2_g, pg.ln2_b, pg.w1, pg.b1,
                            pg.w2, pg.b2, pg.lnc_g, pg.lnc_b, pg.wqc, pg.bqc, pg.woc, pg.boc};
    double *to[] = {pm.ln1_g, pm.ln1_b, pm.wo, pm.bo, pm.ln2_g, pm.ln2_b, pm.w1, pm.b1,
                    pm.w2, pm.b2, pm.lnc_g, pm.lnc_b, pm.wqc, pm.bqc, pm.woc, pm.boc};
    const size_t len[] = {h, h, hk * h, h, h, h, h * 12, 12, 12 * h, h, h, h, h * hk, hk, hk * h, h};
    for (int i = 0; i < 16; i++) memcpy(to[i], from[i], len[i] * sizeof(double));
    int qkv_m = 3 * hk, qkv_g = hk + 2 * g * d, kvc_m = 2 * hk, kvc_g = 2 * g * d;
    for (int c = 0; c < qkv_m; c++) {
        int cg = gqa_col(c, hk, a, g, d);
        pm.bqkv[c] = pg.bqkv[cg];
        for (int i = 0; i < h; i++) pm.wqkv[i * qkv_m + c] = pg.wqkv[i * qkv_g + cg];
    }
    for (int c = 0; c < kvc_m; c++) {
        int cg = gqa_col(c, 0, a, g, d);
        pm.bkvc[c] = pg.bkvc[cg];
        for (int i = 0; i < h; i++) pm.wkvc[i * kvc_m + c] = pg.wkvc[i * kvc_g + cg];
    }
    size_t n = (size_t)B * S * h, ne = (size_t)B * Se * h;
    double *x = rnd(n), *enc = rnd(ne), *dy = rnd(n);
    double *yg = malloc(n * sizeof *yg), *ym = malloc(n * sizeof *ym);
    double *dxg = malloc(n * sizeof *dxg), *dxm = malloc(n * sizeof *dxm);
    double *deg = calloc(ne, sizeof *deg), *dem = calloc(ne, sizeof *dem);
    assert_int_equal(rt_layer_acts_alloc(&ag, &sg, B, S, Se), 0);
    assert_int_equal(rt_layer_acts_alloc(&am, &sm, B, S, Se), 0);
    ag.enc = am.enc = enc, ag.denc = deg, am.denc = dem;
    rt_layer_fwd(&pg, &sg, B, S, x, yg, &ag);
    rt_layer_fwd(&pm, &sm, B, S, x, ym, &am);
    rt_layer_bwd_input(&pg, &gg, &sg, B, S, dy, dxg, &ag);
    rt_layer_bwd_input(&pm, &gm, &sm, B, S, dy, dxm, &am);
    rt_layer_bwd_weight(&gg, &sg, B, S, &ag);
    rt_layer_bwd_weight(&gm, &sm, B, S, &am);
    for (size_t i = 0; i < n; i++) {
        assert_true(fabs(yg[i] - ym[i]) < 1e-12 * (1 + fabs(ym[i])));
        assert_true(fabs(dxg[i] - dxm[i]) < 1e-12 * (1 + fabs(dxm[i])));
    }
    for (size_t i = 0; i < ne; i++) assert_true(fabs(deg[i] - dem[i]) < 1e-12 * (1 + fabs(dem[i])));
    for (int i = 0; i < 16; i++) { /* the shared parameters' gradients, at the same offsets */
        size_t at = (size_t)(from[i] - pg.block);
        for (size_t e = 0; e < len[i]; e++)
            assert_true(fabs(gg.block[at + e] - gm.block[(size_t)(to[i] - pm.block) + e]) <
                        1e-10 * (1 + fabs(gg.block[at + e])));
    }
    /* a shared head's gradient: its copies' sum, in the fused QKV and the cross KV projection */
    shared_heads_sum(gg.wqkv, gg.bqkv, gm.wqkv, gm.bqkv, h, qkv_g, qkv_m, hk, a, g, d);
    shared_heads_sum(gg.wkvc, gg.bkvc, gm.wkvc, gm.bkvc, h, kvc_g, kvc_m, 0, a, g, d);
    rt_layer_params_free(&pg), rt_layer_params_free(&pm), rt_layer_params_free(&gg);
    rt_layer_params_free(&gm), rt_layer_acts_free(&ag), rt_layer_acts_free(&am);
    free(x), free(enc), free(dy), free(yg), free(ym), free(dxg), free(dxm), free(deg), free(dem);
}

/* The GPU layers' attention GEMMs under grouped-query attention (layout.h rt_head_step_of, as
 * runtime/cuda/layer_cuda.cu's gemm_heads runs them on cuBLAS's strided batches), emulated with a
 * plain GEMM written here: the forward and backward GEMM sequence of the GPU's fp64 attention
 * gives rt_attention_fwd's outputs and rt_attention_bwd's gradients, for 4 query heads on 2 and
 * on 1 and for 6 on 3, rows and varlen. */
static void gemm_ref(int ta, int tb, int M, int N, int K, double alpha, const double *A, int lda,
                     const double *B, int ldb, double beta, double *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double t = 0;
            for (int k = 0; k < K; k++)
                t += (ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]) *
                     (tb ? B[(size_t)j * ldb + k] : B[(size_t)k * ldb + j]);
            C[(size_t)i * ldc + j] = alpha * t + (beta != 0 ? beta * C[(size_t)i * ldc + j] : 0);
        }
}

static void gemm_heads_ref(int ta, int tb, int M, int N, int K, double alpha, const double *A,
                           int lda, long long sa, const double *B, int ldb, long long sb,
                           double beta, double *C, int ldc, long long sc, int a, int g, int kv_side)
{
    int r = a / g;
    for (int i = 0; i < r; i++) {
        rt_head_step ha = rt_head_step_of(i, r, sa, kv_side & RT_HEADS_KV_A);
        rt_head_step hb = rt_head_step_of(i, r, sb, kv_side & RT_HEADS_KV_B);
        rt_head_step hc = rt_head_step_of(i, r, sc, kv_side & RT_HEADS_KV_C);
        for (int e = 0; e < g; e++) /* a strided batch of g entries */
            gemm_ref(ta, tb, M, N, K, alpha, A + ha.off + e * ha.stride, lda,
                     B + hb.off + e * hb.stride, ldb, beta, C + hc.off + e * hc.stride, ldc);
    }
}

static void head_groups_case(int a, int g, const rt_seqs *given)
{
    int B = 2, S = 6, d = 3, wq = a * d, wk = g * d, o2[2], l2[2];
    rt_seqs rows, qs;
    rt_seqs_rows(&rows, B, S, o2, l2);
    qs = given ? *given : rows;
    size_t nq = (size_t)B * S * wq, nk = (size_t)B * S * wk, np = (size_t)a * rt_seqs_pairs(&qs, &qs);
    double *q = rnd(nq), *k = rnd(nk), *v = rnd(nk), *dctx = rnd(nq);
    double *p = malloc(np * sizeof *p), *p2 = malloc(np * sizeof *p2), *dp = malloc(np * sizeof *dp);
    double *ctx = calloc(nq, sizeof *ctx), *ctx2 = calloc(nq, sizeof *ctx2);
    double *dq = calloc(nq, sizeof *dq), *dk = calloc(nk, sizeof *dk), *dv = calloc(nk, sizeof *dv);
    double *dq2 = calloc(nq, sizeof *dq2), *dk2 = calloc(nk, sizeof *dk2), *dv2 = calloc(nk, sizeof *dv2);
    rt_attention_fwd(q, k, v, wq, wk, p, ctx, &qs, &qs, a, g, d, 1);
    rt_attention_bwd(dctx, q, k, v, wq, wk, p, dq, dk, dv, &qs, &qs, a, g, d);
    double scale = 1 / sqrt((double)d);
    long long at = 0;
    for (int j = 0; j < qs.n; j++) { /* layer_cuda.cu's attention_fwd and attention_bwd */
        int L = qs.len[j];
        long long pp = (long long)L * L, o = qs.off[j];
        if (pp == 0) continue;
        double *pb = p2 + at, *db = dp + at;
        gemm_heads_ref(0, 1, L, L, d, scale, q + o * wq, wq, d, k + o * wk, wk, d, 0.0, pb, L, pp,
                       a, g, RT_HEADS_KV_B);
        for (int r = 0; r < a * L; r++) { /* causal softmax of each row */
            double *row = pb + (size_t)r * L, mx = -INFINITY, sum = 0;
            int last = r % L;
            for (int c = 0; c <= last; c++) mx = row[c] > mx ? row[c] : mx;
            for (int c = 0; c < L; c++) sum += row[c] = c <= last ? exp(row[c] - mx) : 0;
            for (int c = 0; c < L; c++) row[c] /= sum;
        }
        gemm_heads_ref(0, 0, L, d, L, 1.0, pb, L, pp, v + o * wk, wk, d, 0.0, ctx2 + o * wq, wq, d,
                       a, g, RT_HEADS_KV_B);
        gemm_heads_ref(0, 1, L, L, d, 1.0, dctx + o * wq, wq, d, v + o * wk, wk, d, 0.0, db, L, pp,
                       a, g, RT_HEADS_KV_B);
        gemm_heads_ref(1, 0, L, d, L, 1.0, pb, L, pp, dctx + o * wq, wq, d, 1.0, dv2 + o * wk, wk, d,
                       a, g, RT_HEADS_KV_C);
        for (int r = 0; r < a * L; r++) {
            double *dr = db + (size_t)r * L, dot = 0;
            const double *pr = pb + (size_t)r * L;
            for (int c = 0; c < L; c++) dot += dr[c] * pr[c];
            for (int c = 0; c < L; c++) dr[c] = pr[c] * (dr[c] - dot) * scale;
        }
        gemm_heads_ref(0, 0, L, d, L, 1.0, db, L, pp, k + o * wk, wk, d, 1.0, dq2 + o * wq, wq, d,
                       a, g, RT_HEADS_KV_B);
        gemm_heads_ref(1, 0, L, d, L, 1.0, db, L, pp, q + o * wq, wq, d, 1.0, dk2 + o * wk, wk, d,
                       a, g, RT_HEADS_KV_C);
        at += a * pp;
    }
    for (size_t i = 0; i < np; i++) assert_true(fabs(p[i] - p2[i]) < 1e-12);
    for (size_t i = 0; i < nq; i++) {
        assert_true(fabs(ctx[i] - ctx2[i]) < 1e-12);
        assert_true(fabs(dq[i] - dq2[i]) < 1e-12);
    }
    for (size_t i = 0; i < nk; i++) assert_true(fabs(dk[i] - dk2[i]) < 1e-12 && fabs(dv[i] - dv2[i]) < 1e-12);
    free(q), free(k), free(v), free(dctx), free(p), free(p2), free(dp), free(ctx), free(ctx2);
    free(dq), free(dk), free(dv), free(dq2), free(dk2), free(dv2);
}

static void test_head_groups_batched_gemms(void **state)
{
    (void)state;
    static const int off[3] = {0, 4, 7}, len[3] = {4, 3, 3};
    rt_seqs s3 = {.n = 3, .off = off, .len = len};
    head_groups_case(4, 2, NULL);
    head_groups_case(4, 1, NULL);
    head_groups_case(6, 3, &s3);
    head_groups_case(4, 4, &s3);
}

/* rt_layer_set_yield: the executor's progress hook runs between the GEMMs of every pass. */
static int yields;
static void count_yield(void) { yields++; }

static void test_yield_between_gemms(void **state)
{
    (void)state;
    rt_layer_shape s = {.hidden = 8, .heads = 2, .kv = 3, .ffn = 12, .causal = 1};
    int B = 2, S = 4;
    size_t n = (size_t)B * S * s.hidden;
    rt_layer_params p, grad;
    rt_layer_acts a;
    assert_int_equal(rt_layer_params_alloc(&p, &s), 0);
    assert_int_equal(rt_layer_params_alloc(&grad, &s), 0);
    assert_int_equal(rt_layer_acts_alloc(&a, &s, B, S, 0), 0);
    rt_layer_params_init(&p, &s, 3);
    double *x = rnd(n), *y = malloc(n * sizeof *y), *dx = malloc(n * sizeof *dx);
    rt_layer_set_yield(count_yield);
    rt_layer_fwd(&p, &s, B, S, x, y, &a);
    assert_int_equal(yields, 4 + B * s.heads); /* four linear ops, attention per (sample, head) */
    yields = 0;
    rt_layer_bwd_input(&p, &grad, &s, B, S, y, dx, &a);
    assert_int_equal(yields, 4 + B * s.heads);
    yields = 0;
    rt_layer_bwd_weight(&grad, &s, B, S, &a);
    assert_int_equal(yields, 4);
    rt_layer_set_yield(NULL);
    yields = 0;
    rt_layer_fwd(&p, &s, B, S, x, y, &a);
    assert_int_equal(yields, 0);
    rt_layer_params_free(&p), rt_layer_params_free(&grad), rt_layer_acts_free(&a);
    free(x), free(y), free(dx);
}

/* ---- context parallelism (rt_cp_split, and attention on a rank's pieces) ---- */

/* Micro-batches of n tokens: whole rows; samples with padding before, between and after them;
 * one sample and padding; padding alone. Every piece is a multiple of 24 tokens, so that every
 * cp up to 4 (2 cp chunks a piece) splits them. */
typedef struct cp_case {
    int n, nseq, off[3], len[3];
} cp_case;
static const cp_case CP_CASES[] = {{96, 2, {0, 48}, {48, 48}},
                                   {144, 3, {24, 72, 96}, {48, 24, 24}},
                                   {96, 1, {0}, {72}},
                                   {48, 0, {0}, {0}}};

static rt_seqs cp_case_seqs(const cp_case *c)
{
    return (rt_seqs){.n = c->nseq, .off = c->off, .len = c->len};
}

/* The split against its definition, rank by rank: the ranks' tokens are every token once; each
 * query piece is a run of its sample at its position, against the sample's keys up to its last
 * query; under a causal mask every rank has the same attention work (the point of the 2 cp
 * chunks); the positions RoPE reads are the tokens' places in their samples. */
static void test_cp_split_properties(void **state)
{
    (void)state;
    for (size_t k = 0; k < sizeof CP_CASES / sizeof *CP_CASES; k++)
        for (int size = 1; size <= 4; size++) {
            const cp_case *c = &CP_CASES[k];
            rt_seqs seqs = cp_case_seqs(c);
            int *seen = calloc((size_t)c->n, sizeof *seen), *wpos = malloc((size_t)c->n * sizeof *wpos);
            rt_seqs_positions(&seqs, c->n, wpos);
            long work0 = -1;
            for (int r = 0; r < size; r++) {
                rt_cp cp;
                int bad = -1, bad_len = -1;
                assert_int_equal(rt_cp_split(&seqs, c->n, size, r, 1, &cp, &bad, &bad_len), 0);
                assert_int_equal(cp.n_local, c->n / size);
                assert_int_equal(rt_cp_tokens(&cp, c->n), c->n / size);
                for (int t = 0; t < cp.n_local; t++) seen[cp.whole[r * cp.n_local + t]]++;
                long work = 0;
                for (int j = 0; j < cp.q.n; j++) {
                    assert_int_equal(cp.k.len[j], cp.q.pos[j] + cp.q.len[j]); /* causal */
                    for (int i = 0; i < cp.q.len[j]; i++)
                        assert_int_equal(rt_cp_token(&cp, cp.q.off[j] + i),
                                         cp.k.off[j] + cp.q.pos[j] + i);
                    work += (long)cp.q.len[j] * cp.k.len[j];
                }
                if (work0 < 0) work0 = work;
                assert_int_equal(work, work0);
                int *pos = malloc((size_t)cp.n_local * sizeof *pos);
                rt_seqs_positions(&cp.q, cp.n_local, pos);
                for (int t = 0; t < cp.n_local; t++) assert_int_equal(pos[t], wpos[rt_cp_token(&cp, t)]);
                free(pos);
                /* every rank's map of every rank agrees (the same micro-batch on every stage) */
                rt_cp other;
                assert_int_equal(rt_cp_split(&seqs, c->n, size, (r + 1) % size, 1, &other, &bad, &bad_len), 0);
                assert_memory_equal(other.whole, cp.whole, (size_t)c->n * sizeof *cp.whole);
                rt_cp_free(&other);
                rt_cp_free(&cp);
            }
            for (int i = 0; i < c->n; i++) assert_int_equal(seen[i], 1);
            free(seen), free(wpos);
        }
    /* a piece that 2 cp does not divide: named, nothing held */
    int off[1] = {10}, len[1] = {30}, bad = -1, bad_len = -1;
    rt_seqs s = {.n = 1, .off = off, .len = len};
    rt_cp cp;
    assert_int_equal(rt_cp_split(&s, 48, 2, 0, 1, &cp, &bad, &bad_len), 1);
    assert_int_equal(bad, 0), assert_int_equal(bad_len, 10); /* the padding before it, first */
    off[0] = 8;
    assert_int_equal(rt_cp_split(&s, 48, 2, 1, 1, &cp, &bad, &bad_len), 1);
    assert_int_equal(bad, 8), assert_int_equal(bad_len, 30);
    assert_null(cp.store);
}

/* Attention on a rank's pieces against the whole micro-batch's keys and values (what a ring
 * passes round) gives that rank's rows of the whole attention, forward and backward; the key/value
 * gradients of the ranks add up to the whole one (what the layer's reduce-scatter sums). Grouped
 * queries (4 heads on 2), causal. */
static void test_cp_attention_is_the_whole(void **state)
{
    (void)state;
    const int a = 4, g = 2, d = 8, wq = a * d, wk = g * d;
    for (size_t k = 0; k < sizeof CP_CASES / sizeof *CP_CASES; k++)
        for (int size = 2; size <= 4; size++) {
            const cp_case *c = &CP_CASES[k];
            size_t n = (size_t)c->n;
            rt_seqs seqs = cp_case_seqs(c);
            double *q = rnd(n * wq), *kk = rnd(n * wk), *v = rnd(n * wk), *dctx = rnd(n * wq);
            double *p = malloc((rt_seqs_pairs(&seqs, &seqs) * a + 1) * sizeof *p);
            double *ctx = calloc(n * wq, sizeof *ctx), *dq = calloc(n * wq, sizeof *dq);
            double *dk = calloc(n * wk, sizeof *dk), *dv = calloc(n * wk, sizeof *dv);
            double *dk_sum = calloc(n * wk, sizeof *dk_sum), *dv_sum = calloc(n * wk, sizeof *dv_sum);
            rt_attention_fwd(q, kk, v, wq, wk, p, ctx, &seqs, &seqs, a, g, d, 1);
            rt_attention_bwd(dctx, q, kk, v, wq, wk, p, dq, dk, dv, &seqs, &seqs, a, g, d);
            for (int r = 0; r < size; r++) {
                rt_cp cp;
                int bad, bad_len;
                assert_int_equal(rt_cp_split(&seqs, c->n, size, r, 1, &cp, &bad, &bad_len), 0);
                size_t nl = (size_t)cp.n_local;
                double *ql = malloc(nl * wq * sizeof *ql), *dcl = malloc(nl * wq * sizeof *dcl);
                double *cl = calloc(nl * wq, sizeof *cl), *dql = calloc(nl * wq, sizeof *dql);
                double *pl = malloc((rt_seqs_pairs(&cp.q, &cp.k) * a + 1) * sizeof *pl);
                for (size_t t = 0; t < nl; t++) {
                    size_t w = (size_t)rt_cp_token(&cp, (int)t);
                    memcpy(ql + t * wq, q + w * wq, wq * sizeof *ql);
                    memcpy(dcl + t * wq, dctx + w * wq, wq * sizeof *dcl);
                }
                rt_attention_fwd(ql, kk, v, wq, wk, pl, cl, &cp.q, &cp.k, a, g, d, 1);
                rt_attention_bwd(dcl, ql, kk, v, wq, wk, pl, dql, dk_sum, dv_sum, &cp.q, &cp.k, a, g, d);
                for (size_t t = 0; t < nl; t++) {
                    size_t w = (size_t)rt_cp_token(&cp, (int)t);
                    for (int i = 0; i < wq; i++) {
                        assert_true(fabs(cl[t * wq + i] - ctx[w * wq + i]) < 1e-12);
                        assert_true(fabs(dql[t * wq + i] - dq[w * wq + i]) < 1e-12);
                    }
                }
                free(ql), free(dcl), free(cl), free(dql), free(pl);
                rt_cp_free(&cp);
            }
            for (size_t i = 0; i < n * wk; i++) {
                assert_true(fabs(dk_sum[i] - dk[i]) < 1e-12);
                assert_true(fabs(dv_sum[i] - dv[i]) < 1e-12);
            }
            free(q), free(kk), free(v), free(dctx), free(p), free(ctx), free(dq), free(dk), free(dv);
            free(dk_sum), free(dv_sum);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_grad),    cmocka_unit_test(test_layernorm_grad),
        cmocka_unit_test(test_rmsnorm_grad),   cmocka_unit_test(test_rope),
        cmocka_unit_test(test_gelu_grad),      cmocka_unit_test(test_swiglu_grad),
        cmocka_unit_test(test_attention_grad),
        cmocka_unit_test(test_xent_grad),      cmocka_unit_test(test_layer_grad),
        cmocka_unit_test(test_varlen_is_the_samples_alone),
        cmocka_unit_test(test_recompute_attention),
        cmocka_unit_test(test_gqa_is_mha_with_copied_heads),
        cmocka_unit_test(test_head_groups_batched_gemms),
        cmocka_unit_test(test_yield_between_gemms),
        cmocka_unit_test(test_cp_split_properties),
        cmocka_unit_test(test_cp_attention_is_the_whole),
    };
    return cmocka_run_group_tests_name("layer", tests, NULL, NULL);
}
