/*
 * check_gpu.c — `dprun check-gpu`: the first thing a GPU machine runs (make check-gpu).
 *
 * Numerics: each kind of layer of the given model (GPT; T5's encoder and decoder), forward and
 * both backward passes, on the CPU (runtime/layer.c) and on the GPU (runtime/cuda/layer_cuda.cu)
 * from the same parameters and inputs; the relative difference of the output, the input gradient,
 * every parameter gradient (and a decoder's encoder-output gradient) must stay under 1e-9 (both are fp64; only summation orders differ). Speed: the GPU's time per
 * layer for a few shapes, printed beside the A100 profile's (which is bf16: a different precision,
 * so the ratio is information, not a check).
 */
#include "check_gpu.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/cost.h"
#include "../models/hw.h"
#include "layer.h"

#ifdef DPRUN_CUDA
#include "cuda/layer_cuda.h"

static double rel_err(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1));
}

/* The A100 profile's time per GPT-6.7B layer (bf16, TP1) for the shape, or NaN when the shipped
 * profile cannot be read (check-gpu runs from the source folder). */
static void a100_reference(const model_spec *m, int mbs, int seq, double *fwd, double *bwd)
{
    *fwd = *bwd = NAN;
    cluster_spec hw;
    cost_model *cm = NULL;
    cost_layer c;
    cost_shape shape = cost_shape_rows(mbs, seq, 0);
    if (cluster_resolve("a100-40gb", &hw, NULL) != DP_OK ||
        cost_profile_load("models/profiles/a100_gpt_6.7b_profile.csv", m, &hw, 1, RECOMPUTE_NONE,
                          &cm, NULL) != DP_OK)
        return;
    if (cost_query(cm, COMP_ENCODER, &shape, &c, NULL) == DP_OK) *fwd = c.fwd_ms, *bwd = c.bwd_ms;
    cost_model_free(cm);
}

/* Times one GPT-6.7B-width layer on the GPU for a few shapes, beside the A100 profile. */
static void print_gpu_timings(rt_cuda *g)
{
    const model_spec *big = model_preset("gpt-6.7b-16l");
    rt_layer_shape bs = {big->hidden, big->heads, big->kv_channels, big->ffn, 1, 0};
    rt_layer_params bp;
    if (rt_layer_params_alloc(&bp, &bs) != 0) return;
    rt_layer_params_init(&bp, &bs, 9);
    rt_cuda_layer bl = {bs, rt_cuda_alloc(bp.count), bp.count};
    if (bl.block && rt_cuda_put(bl.block, bp.block, bp.count) == 0) {
        static const int shapes[][2] = {{1, 512}, {1, 2048}, {4, 1024}};
        printf("\n# time per GPT-6.7B-width layer: this GPU (fp64) beside the A100 profile (bf16)\n");
        printf("%-10s %12s %12s %12s %12s\n", "mbs x seq", "gpu_fwd_ms", "gpu_bwd_ms",
               "a100_fwd_ms", "a100_bwd_ms");
        for (int i = 0; i < 3; i++) {
            double f, b, af, ab;
            a100_reference(big, shapes[i][0], shapes[i][1], &af, &ab);
            if (rt_cuda_time_layer(g, &bl, shapes[i][0], shapes[i][1], 0, 5, &f, &b) == 0)
                printf("%4d x %-4d %12.3f %12.3f %12.3f %12.3f\n", shapes[i][0], shapes[i][1], f, b,
                       af, ab);
        }
    }
    rt_cuda_free(bl.block);
    rt_layer_params_free(&bp);
}

/* Host and device copies of what one layer check reads and writes. */
typedef struct layer_case {
    rt_layer_params p, gc;   /* CPU parameters and gradients */
    rt_layer_acts a;
    double *x, *dy, *enc, *y, *dx, *denc; /* CPU inputs and results */
    double *yg, *dxg, *dencg, *gg;       /* the GPU's results, copied back */
    rt_cuda_layer dp, dg;
    double *x_d, *y_d, *dx_d, *dy_d, *enc_d, *denc_d, *acts_d;
} layer_case;

static void case_free(layer_case *c)
{
    rt_layer_params_free(&c->p), rt_layer_params_free(&c->gc), rt_layer_acts_free(&c->a);
    free(c->x), free(c->dy), free(c->enc), free(c->y), free(c->dx), free(c->denc);
    free(c->yg), free(c->dxg), free(c->dencg), free(c->gg);
    rt_cuda_free(c->dp.block), rt_cuda_free(c->dg.block), rt_cuda_free(c->x_d);
    rt_cuda_free(c->y_d), rt_cuda_free(c->dx_d), rt_cuda_free(c->dy_d), rt_cuda_free(c->enc_d);
    rt_cuda_free(c->denc_d), rt_cuda_free(c->acts_d);
}

/* One layer of shape s (on (B, S), an encoder output of length Se for a cross layer) on both
 * backends; prints a row per compared quantity and returns how many failed (-1: no memory). */
static int check_layer(rt_cuda *g, const char *name, const rt_layer_shape *s, int B, int S,
                       int Se)
{
    layer_case c;
    memset(&c, 0, sizeof c);
    size_t nh = (size_t)B * S * s->hidden, ne = (size_t)B * Se * s->hidden;
    size_t na = rt_layer_acts_doubles(s, B, S, Se);
    int failed = -1;
    char why[256];
    if (rt_layer_params_alloc(&c.p, s) || rt_layer_params_alloc(&c.gc, s) ||
        rt_layer_acts_alloc(&c.a, s, B, S, Se))
        goto out;
    rt_layer_params_init(&c.p, s, 5);
    size_t np = c.p.count;
    c.x = malloc(nh * sizeof(double)), c.dy = malloc(nh * sizeof(double));
    c.y = malloc(nh * sizeof(double)), c.dx = malloc(nh * sizeof(double));
    c.yg = malloc(nh * sizeof(double)), c.dxg = malloc(nh * sizeof(double));
    c.enc = calloc(ne + 1, sizeof(double)), c.denc = calloc(ne + 1, sizeof(double));
    c.dencg = calloc(ne + 1, sizeof(double)), c.gg = malloc(np * sizeof(double));
    c.dp = (rt_cuda_layer){*s, rt_cuda_alloc(np), np};
    c.dg = (rt_cuda_layer){*s, rt_cuda_alloc(np), np};
    c.x_d = rt_cuda_alloc(nh), c.y_d = rt_cuda_alloc(nh), c.dx_d = rt_cuda_alloc(nh);
    c.dy_d = rt_cuda_alloc(nh), c.enc_d = rt_cuda_alloc(ne), c.denc_d = rt_cuda_alloc(ne);
    c.acts_d = rt_cuda_alloc(na);
    if (!c.x || !c.dy || !c.y || !c.dx || !c.yg || !c.dxg || !c.enc || !c.denc || !c.dencg ||
        !c.gg || !c.dp.block || !c.dg.block || !c.x_d || !c.y_d || !c.dx_d || !c.dy_d ||
        !c.enc_d || !c.denc_d || !c.acts_d)
        goto out;
    for (size_t i = 0; i < nh; i++) c.x[i] = sin(0.37 * (double)i), c.dy[i] = cos(0.11 * (double)i);
    for (size_t i = 0; i < ne; i++) c.enc[i] = sin(0.23 * (double)i + 1);
    c.a.enc = c.enc, c.a.denc = c.denc;
    rt_layer_fwd(&c.p, s, B, S, c.x, c.y, &c.a);
    rt_layer_bwd_input(&c.p, &c.gc, s, B, S, c.dy, c.dx, &c.a);
    rt_layer_bwd_weight(&c.gc, s, B, S, &c.a);
    memset(c.gg, 0, np * sizeof(double));
    if (rt_cuda_put(c.dp.block, c.p.block, np) || rt_cuda_put(c.dg.block, c.gg, np) ||
        rt_cuda_put(c.x_d, c.x, nh) || rt_cuda_put(c.dy_d, c.dy, nh) ||
        rt_cuda_put(c.enc_d, c.enc, ne) || rt_cuda_put(c.denc_d, c.dencg, ne))
        goto out;
    rt_cuda_layer_fwd(g, &c.dp, B, S, c.x_d, c.y_d, c.acts_d, c.enc_d, Se);
    rt_cuda_layer_bwd_input(g, &c.dp, &c.dg, B, S, c.dy_d, c.dx_d, c.acts_d, Se, c.denc_d);
    rt_cuda_layer_bwd_weight(g, &c.dg, B, S, c.acts_d, c.enc_d, Se);
    if (rt_cuda_sync(g, why, sizeof why) != 0) {
        fprintf(stderr, "dprun check-gpu: %s\n", why);
        goto out;
    }
    rt_cuda_get(c.yg, c.y_d, nh), rt_cuda_get(c.dxg, c.dx_d, nh), rt_cuda_get(c.gg, c.dg.block, np);
    rt_cuda_get(c.dencg, c.denc_d, ne);
    struct {
        const char *what;
        double err;
    } rows[4] = {{"layer output", rel_err(c.yg, c.y, nh)},
                 {"input gradient", rel_err(c.dxg, c.dx, nh)},
                 {"parameter gradients", rel_err(c.gg, c.gc.block, np)},
                 {"encoder-output grad.", rel_err(c.dencg, c.denc, ne)}};
    printf("# %s layer, B %d, S %d", name, B, S);
    if (s->cross) printf(", encoder output of length %d", Se);
    printf(": GPU vs CPU (fp64), relative error\n");
    failed = 0;
    for (int i = 0; i < (s->cross ? 4 : 3); i++) {
        int ok = rows[i].err < 1e-9;
        failed += !ok;
        printf("%-22s %10.3e  %s\n", rows[i].what, rows[i].err, ok ? "ok" : "FAILED");
    }
out:
    case_free(&c);
    if (failed < 0) fprintf(stderr, "dprun check-gpu: out of host or device memory\n");
    return failed;
}

int rt_check_gpu(const model_spec *m)
{
    char why[256];
    rt_cuda *g = rt_cuda_open(0, why, sizeof why);
    if (!g) {
        fprintf(stderr, "dprun check-gpu: %s\n", why);
        return 1;
    }
    rt_layer_shape gpt = {m->hidden, m->heads, m->kv_channels, m->ffn, 1, 0};
    rt_layer_shape enc = {m->hidden, m->heads, m->kv_channels, m->ffn, 0, 0};
    rt_layer_shape dec = {m->hidden, m->heads, m->kv_channels, m->ffn, 1, 1};
    int n_rows = 0, n_failed = 0, f;
    printf("# check-gpu numerics: %s\n", m->name);
    if (m->arch == ARCH_T5) {
        f = check_layer(g, "T5 encoder (bidirectional)", &enc, 2, 48, 0);
        n_rows += 3, n_failed += f < 0 ? 3 : f;
        f = check_layer(g, "T5 decoder (causal + cross-attention)", &dec, 2, 32, 48);
        n_rows += 4, n_failed += f < 0 ? 4 : f;
    } else {
        f = check_layer(g, "GPT (causal)", &gpt, 2, 64, 0);
        n_rows += 3, n_failed += f < 0 ? 3 : f;
    }
    print_gpu_timings(g);
    rt_cuda_close(g);
    printf("%d passed, %d failed\n", n_rows - n_failed, n_failed);
    return n_failed != 0;
}

#else

int rt_check_gpu(const model_spec *m)
{
    (void)m;
    fprintf(stderr, "dprun check-gpu: this dprun was built without CUDA (no nvcc or cuBLAS was "
                    "found at build time)\n");
    return 1;
}

#endif
