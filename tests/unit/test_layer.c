/* Gradient checks of every op of the CPU transformer layer against central finite differences. */
#include "testutil.h"

#include <math.h>

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
typedef struct ln_ctx { double *x, *g, *b, *mean, *rstd; int n, h; } ln_ctx;
static void ln_fwd(void *c, double *y)
{
    ln_ctx *l = c;
    rt_layernorm_fwd(l->x, l->g, l->b, y, l->mean, l->rstd, l->n, l->h);
}

static void test_layernorm_grad(void **state)
{
    (void)state;
    ln_ctx l = {rnd(4 * 6), rnd(6), rnd(6), calloc(4, sizeof(double)), calloc(4, sizeof(double)), 4, 6};
    double *R = rnd(24), *y = malloc(24 * sizeof *y), *dx = calloc(24, sizeof *dx);
    double *dg = calloc(6, sizeof *dg), *db = calloc(6, sizeof *db);
    ln_fwd(&l, y);
    rt_layernorm_bwd(R, l.x, l.g, l.mean, l.rstd, dx, dg, db, 4, 6);
    check_grad("layernorm dx", ln_fwd, &l, l.x, 24, dx, R, 24);
    check_grad("layernorm dg", ln_fwd, &l, l.g, 6, dg, R, 24);
    check_grad("layernorm db", ln_fwd, &l, l.b, 6, db, R, 24);
    free(l.x), free(l.g), free(l.b), free(l.mean), free(l.rstd), free(R), free(y), free(dx), free(dg), free(db);
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
typedef struct att_ctx { double *q, *k, *v, *p; int B, a, sq, sk, d, causal; rt_seqs qs, ks; } att_ctx;
static void att_fwd(void *c, double *ctx)
{
    att_ctx *t = c;
    memset(ctx, 0, (size_t)t->B * t->sq * t->a * t->d * sizeof *ctx);
    rt_attention_fwd(t->q, t->k, t->v, t->a * t->d, t->a * t->d, t->p, ctx, &t->qs, &t->ks, t->a,
                     t->d, t->causal);
}

/* Rows (qs, ks NULL: B rows of sq and of sk tokens) or the given sequences. */
static void attention_case(int causal, int sq, int sk, const rt_seqs *qs, const rt_seqs *ks)
{
    int B = 2, a = 2, d = 3, w = a * d, qo[2], ql[2], ko[2], kl[2];
    att_ctx t = {rnd((size_t)B * sq * w), rnd((size_t)B * sk * w), rnd((size_t)B * sk * w),
                 malloc((size_t)B * a * sq * sk * sizeof(double)), B, a, sq, sk, d, causal,
                 {0, NULL, NULL}, {0, NULL, NULL}};
    if (qs) t.qs = *qs, t.ks = *ks;
    else rt_seqs_rows(&t.qs, B, sq, qo, ql), rt_seqs_rows(&t.ks, B, sk, ko, kl);
    size_t no = (size_t)B * sq * w;
    double *R = rnd(no), *ctx = malloc(no * sizeof *ctx);
    double *dq = calloc((size_t)B * sq * w, sizeof *dq), *dk = calloc((size_t)B * sk * w, sizeof *dk),
           *dv = calloc((size_t)B * sk * w, sizeof *dv);
    att_fwd(&t, ctx);
    rt_attention_bwd(R, t.q, t.k, t.v, w, w, t.p, dq, dk, dv, &t.qs, &t.ks, a, d);
    check_grad("attention dq", att_fwd, &t, t.q, (size_t)B * sq * w, dq, R, no);
    check_grad("attention dk", att_fwd, &t, t.k, (size_t)B * sk * w, dk, R, no);
    check_grad("attention dv", att_fwd, &t, t.v, (size_t)B * sk * w, dv, R, no);
    free(t.q), free(t.k), free(t.v), free(t.p), free(R), free(ctx), free(dq), free(dk), free(dv);
}

static void test_attention_grad(void **state)
{
    (void)state;
    attention_case(1, 5, 5, NULL, NULL); /* causal self-attention (GPT, T5 decoder) */
    attention_case(0, 5, 5, NULL, NULL); /* bidirectional (T5 encoder) */
    attention_case(0, 3, 6, NULL, NULL); /* cross-attention: decoder queries, encoder keys */
    /* varlen: three samples packed into 2 rows of 6 tokens with 2 tokens of padding, causal
     * and not; and cross-attention pairing the samples' decoder and encoder tokens */
    static const int off[3] = {0, 4, 7}, len[3] = {4, 3, 3};
    static const int eoff[3] = {0, 5, 6}, elen[3] = {5, 1, 4};
    rt_seqs s3 = {3, off, len}, e3 = {3, eoff, elen};
    attention_case(1, 6, 6, &s3, &s3);
    attention_case(0, 6, 6, &s3, &s3);
    attention_case(0, 6, 6, &s3, &e3);
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
    /* a GPT layer, a T5 encoder layer, a T5 decoder layer with cross-attention, and a LLaMA-style
     * layer (SwiGLU) */
    for (int kind = 0; kind < 4; kind++) {
        int causal = kind != 1, cross = kind == 2, glu = kind == 3;
        layer_ctx l = {.s = {8, 2, 3, 12, causal, cross, glu}, .B = 2, .S = 4, .Se = cross ? 5 : 0};
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
static void varlen_case(int cross)
{
    rt_layer_shape s = {8, 2, 3, 12, 1, cross, 0};
    enum { N = 3 };
    const int len[N] = {5, 3, 4}, elen[N] = {4, 5, 2};
    int off[N], eoff[N], B = 2, S = 7, Se = cross ? 6 : 0, h = s.hidden;
    for (int j = 0, t = 0, e = 0; j < N; t += len[j], e += elen[j], j++) off[j] = t, eoff[j] = e;
    rt_seqs seqs = {N, off, len}, enc_seqs = {N, eoff, elen};
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
    varlen_case(0);
    varlen_case(1);
}

/* rt_layer_set_yield: the executor's progress hook runs between the GEMMs of every pass. */
static int yields;
static void count_yield(void) { yields++; }

static void test_yield_between_gemms(void **state)
{
    (void)state;
    rt_layer_shape s = {8, 2, 3, 12, 1, 0, 0};
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_linear_grad),    cmocka_unit_test(test_layernorm_grad),
        cmocka_unit_test(test_gelu_grad),      cmocka_unit_test(test_swiglu_grad),
        cmocka_unit_test(test_attention_grad),
        cmocka_unit_test(test_xent_grad),      cmocka_unit_test(test_layer_grad),
        cmocka_unit_test(test_varlen_is_the_samples_alone),
        cmocka_unit_test(test_yield_between_gemms),
    };
    return cmocka_run_group_tests_name("layer", tests, NULL, NULL);
}
