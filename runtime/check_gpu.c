/*
 * check_gpu.c — `dprun check-gpu`: the first thing a GPU machine runs (make check-gpu).
 *
 * Numerics: one layer of the given model, forward and both backward passes, on the CPU
 * (runtime/layer.c) and on the GPU (runtime/cuda/layer_cuda.cu) from the same parameters and
 * inputs; the relative difference of the output, the input gradient and every parameter gradient
 * must stay under 1e-9 (both are fp64; only summation orders differ). Speed: the GPU's time per
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
    cost_shape shape = {mbs, seq, 0};
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
    rt_cuda_layer bl = {bs.hidden, bs.heads, bs.kv, bs.ffn, 1, rt_cuda_alloc(bp.count), bp.count};
    if (bl.block && rt_cuda_put(bl.block, bp.block, bp.count) == 0) {
        static const int shapes[][2] = {{1, 512}, {1, 2048}, {4, 1024}};
        printf("\n# time per GPT-6.7B-width layer: this GPU (fp64) beside the A100 profile (bf16)\n");
        printf("%-10s %12s %12s %12s %12s\n", "mbs x seq", "gpu_fwd_ms", "gpu_bwd_ms",
               "a100_fwd_ms", "a100_bwd_ms");
        for (int i = 0; i < 3; i++) {
            double f, b, af, ab;
            a100_reference(big, shapes[i][0], shapes[i][1], &af, &ab);
            if (rt_cuda_time_layer(g, &bl, shapes[i][0], shapes[i][1], 5, &f, &b) == 0)
                printf("%4d x %-4d %12.3f %12.3f %12.3f %12.3f\n", shapes[i][0], shapes[i][1], f, b,
                       af, ab);
        }
    }
    rt_cuda_free(bl.block);
    rt_layer_params_free(&bp);
}

int rt_check_gpu(const model_spec *m)
{
    char why[256];
    rt_cuda *g = rt_cuda_open(0, why, sizeof why);
    if (!g) {
        fprintf(stderr, "dprun check-gpu: %s\n", why);
        return 1;
    }
    rt_layer_shape s = {m->hidden, m->heads, m->kv_channels, m->ffn, 1, 0};
    int B = 2, S = 64, n_failed = 0;
    size_t nh = (size_t)B * S * s.hidden, na = rt_layer_acts_doubles(&s, B, S, 0);
    rt_layer_params p, gc;
    rt_layer_acts a;
    if (rt_layer_params_alloc(&p, &s) || rt_layer_params_alloc(&gc, &s) || rt_layer_acts_alloc(&a, &s, B, S, 0))
        return 1;
    rt_layer_params_init(&p, &s, 5);
    double *x = malloc(nh * sizeof *x), *dy = malloc(nh * sizeof *dy), *y = malloc(nh * sizeof *y);
    double *dx = malloc(nh * sizeof *dx), *yg = malloc(nh * sizeof *yg), *dxg = malloc(nh * sizeof *dxg);
    double *gg = malloc(p.count * sizeof *gg);
    for (size_t i = 0; i < nh; i++) x[i] = sin(0.37 * (double)i), dy[i] = cos(0.11 * (double)i);
    rt_layer_fwd(&p, &s, B, S, x, y, &a);
    rt_layer_bwd_input(&p, &gc, &s, B, S, dy, dx, &a);
    rt_layer_bwd_weight(&gc, &s, B, S, &a);

    rt_cuda_layer dp = {s.hidden, s.heads, s.kv, s.ffn, 1, rt_cuda_alloc(p.count), p.count};
    rt_cuda_layer dg = dp;
    dg.block = rt_cuda_alloc(p.count);
    double *dx_d = rt_cuda_alloc(nh), *x_d = rt_cuda_alloc(nh), *y_d = rt_cuda_alloc(nh);
    double *dy_d = rt_cuda_alloc(nh), *acts_d = rt_cuda_alloc(na);
    double *zeros = calloc(p.count, sizeof *zeros);
    if (!dp.block || !dg.block || !dx_d || !x_d || !y_d || !dy_d || !acts_d || !zeros ||
        rt_cuda_put(dp.block, p.block, p.count) || rt_cuda_put(dg.block, zeros, p.count) ||
        rt_cuda_put(x_d, x, nh) || rt_cuda_put(dy_d, dy, nh)) {
        fprintf(stderr, "dprun check-gpu: device allocation or copy failed\n");
        return 1;
    }
    rt_cuda_layer_fwd(g, &dp, B, S, x_d, y_d, acts_d);
    rt_cuda_layer_bwd_input(g, &dp, &dg, B, S, dy_d, dx_d, acts_d);
    rt_cuda_layer_bwd_weight(g, &dg, B, S, acts_d);
    if (rt_cuda_sync(g, why, sizeof why) != 0) {
        fprintf(stderr, "dprun check-gpu: %s\n", why);
        return 1;
    }
    rt_cuda_get(yg, y_d, nh), rt_cuda_get(dxg, dx_d, nh), rt_cuda_get(gg, dg.block, p.count);
    struct {
        const char *what;
        double err;
    } rows[3] = {{"layer output", rel_err(yg, y, nh)},
                 {"input gradient", rel_err(dxg, dx, nh)},
                 {"parameter gradients", rel_err(gg, gc.block, p.count)}};
    printf("# check-gpu numerics: %s layer, B %d, S %d, GPU vs CPU (fp64), relative error\n", m->name, B, S);
    for (int i = 0; i < 3; i++) {
        int ok = rows[i].err < 1e-9;
        n_failed += !ok;
        printf("%-22s %10.3e  %s\n", rows[i].what, rows[i].err, ok ? "ok" : "FAILED");
    }
    print_gpu_timings(g);
    rt_cuda_free(dp.block), rt_cuda_free(dg.block), rt_cuda_free(dx_d), rt_cuda_free(x_d);
    rt_cuda_free(y_d), rt_cuda_free(dy_d), rt_cuda_free(acts_d);
    free(x), free(dy), free(y), free(dx), free(yg), free(dxg), free(gg), free(zeros);
    rt_layer_params_free(&p), rt_layer_params_free(&gc), rt_layer_acts_free(&a);
    rt_cuda_close(g);
    printf("%d passed, %d failed\n", 3 - n_failed, n_failed);
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
