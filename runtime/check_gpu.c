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

#include "layer.h"

#ifdef DPRUN_CUDA
#include "cuda/layer_cuda.h"

static double rel_err(const double *a, const double *b, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) num += (a[i] - b[i]) * (a[i] - b[i]), den += b[i] * b[i];
    return sqrt(num / (den > 0 ? den : 1));
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
    int B = 2, S = 64, failed = 0;
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
        failed |= !ok;
        printf("%-22s %10.3e  %s\n", rows[i].what, rows[i].err, ok ? "ok" : "FAILED");
    }
    /* time per layer at the A100 profile's GPT-6.7B width */
    const model_spec *big = model_preset("gpt-6.7b-16l");
    rt_cuda_layer bl = {big->hidden, big->heads, big->kv_channels, big->ffn, 1, NULL, 0};
    rt_layer_params bp;
    rt_layer_shape bs = {big->hidden, big->heads, big->kv_channels, big->ffn, 1, 0};
    if (rt_layer_params_alloc(&bp, &bs) == 0) {
        bl.count = bp.count;
        bl.block = rt_cuda_alloc(bp.count);
        rt_layer_params_init(&bp, &bs, 9);
        if (bl.block && rt_cuda_put(bl.block, bp.block, bp.count) == 0) {
            static const int shapes[][2] = {{1, 512}, {1, 2048}, {4, 1024}};
            printf("\n# GPU time per GPT-6.7B-width layer (fp64) beside the A100 profile (bf16)\n");
            printf("%-10s %12s %12s\n", "mbs x seq", "fwd_ms", "bwd_ms");
            for (int i = 0; i < 3; i++) {
                double f, b;
                if (rt_cuda_time_layer(g, &bl, shapes[i][0], shapes[i][1], 5, &f, &b) == 0)
                    printf("%4d x %-4d %12.3f %12.3f\n", shapes[i][0], shapes[i][1], f, b);
            }
            printf("(A100 profile, bf16, TP1: 1 x 2048 fwd 5.78 ms, bwd 9.65 ms)\n");
        }
        rt_cuda_free(bl.block);
        rt_layer_params_free(&bp);
    }
    rt_cuda_free(dp.block), rt_cuda_free(dg.block), rt_cuda_free(dx_d), rt_cuda_free(x_d);
    rt_cuda_free(y_d), rt_cuda_free(dy_d), rt_cuda_free(acts_d);
    free(x), free(dy), free(y), free(dx), free(yg), free(dxg), free(gg), free(zeros);
    rt_layer_params_free(&p), rt_layer_params_free(&gc), rt_layer_acts_free(&a);
    rt_cuda_close(g);
    printf("%d passed, %d failed\n", failed ? 0 : 1, failed ? 1 : 0);
    return failed;
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
