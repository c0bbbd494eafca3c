/*
 * check_gpu.c — `dprun check-gpu`: the first thing a GPU machine runs (make check-gpu).
 *
 * Numerics, for each kind of layer of the given model (GPT, and the same width with the other MLP,
 * GELU or SwiGLU; T5's encoder and decoder), forward
 * and both backward passes from the same parameters and inputs on three backends: the CPU layer
 * (runtime/layer.c, fp64), the GPU layer in fp64 and the GPU layer in bf16 (runtime/cuda/). Each
 * quantity (the output, the input gradient, all parameter gradients, a decoder's encoder-output
 * gradient) is compared as a relative error in norm, ||a - b|| / ||b||:
 *   GPU fp64 against the CPU:  under RT_CHECK_FP64_TOL (only summation orders differ);
 *   GPU bf16 against GPU fp64: under RT_CHECK_BF16_OUT_TOL (the output) and
 *                              RT_CHECK_BF16_GRAD_TOL (gradients), check_gpu.h's reasons;
 * and the parameter tensor whose gradient is furthest from the reference's relative to its own
 * norm (RT_CHECK_FP64_TOL; RT_CHECK_BF16_TENSOR_TOL in bf16), which a wrong bias or norm
 * gradient cannot hide in.
 * Speed: a GPT-6.7B-width layer in bf16 for a few shapes, its TFLOP/s (the FLOPs of
 * models/cost.h's analytic_flops, the simulator's own count, backward twice the forward) and
 * MFU against the GPU's bf16 peak (models/hw.h's presets, the GPU found by its name or --hw),
 * beside cuBLASLt's rate on the layer's four GEMM shapes and the A100 profile's times.
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

/* v[i] rounded to the nearest bf16 value, in place. */
static void to_bf16_values(double *v, size_t n)
{
    for (size_t i = 0; i < n; i++) v[i] = rt_bf16_to_double(rt_bf16_from_double(v[i]));
}

/* What one layer check feeds every backend, and what each gives back (host doubles). */
typedef struct layer_io {
    const rt_layer_shape *s;
    int B, S, Se;
    const rt_seqs *seqs, *enc_seqs; /* NULL: whole rows */
    size_t nh, ne, np;
    double *params, *x, *dy, *enc; /* inputs */
} layer_io;

typedef struct layer_out {
    double *y, *dx, *grads, *denc;
} layer_out;

static void out_free(layer_out *o) { free(o->y), free(o->dx), free(o->grads), free(o->denc); }

static int out_alloc(layer_out *o, const layer_io *io)
{
    o->y = calloc(io->nh, sizeof(double)), o->dx = calloc(io->nh, sizeof(double));
    o->grads = calloc(io->np, sizeof(double)), o->denc = calloc(io->ne + 1, sizeof(double));
    return o->y && o->dx && o->grads && o->denc ? 0 : -1;
}

/* The CPU layer: forward, input and weight gradients. */
static int run_cpu(const layer_io *io, layer_out *o)
{
    rt_layer_params p, g;
    rt_layer_acts a;
    int rc = -1;
    memset(&a, 0, sizeof a);
    if (out_alloc(o, io) != 0 || rt_layer_acts_alloc(&a, io->s, io->B, io->S, io->Se) != 0)
        goto out;
    rt_layer_params_bind(&p, io->s, io->params);
    rt_layer_params_bind(&g, io->s, o->grads);
    a.enc = io->enc, a.denc = o->denc, a.seqs = io->seqs, a.enc_seqs = io->enc_seqs;
    rt_layer_fwd(&p, io->s, io->B, io->S, io->x, o->y, &a);
    rt_layer_bwd_input(&p, &g, io->s, io->B, io->S, io->dy, o->dx, &a);
    rt_layer_bwd_weight(&g, io->s, io->B, io->S, &a);
    rc = 0;
out:
    rt_layer_acts_free(&a);
    return rc;
}

/* The GPU layer at type dt, the same passes, the backward under recompute mode rc (its rerun
 * first, as the executor's); 0, or -1 with the reason on stderr. */
static int run_gpu(rt_cuda *g, const layer_io *io, rt_dtype dt, recompute_mode rc, layer_out *o)
{
    char why[256];
    int st = -1;
    size_t gb = rt_grad_block_bytes(io->np, dt);
    rt_cuda_layer lp = {*io->s, dt, rt_cuda_params_new(io->params, io->np, dt), io->np, NULL, NULL};
    rt_cuda_layer lg = {*io->s, dt, rt_cuda_alloc(gb), io->np, NULL, NULL};
    void *x = rt_cuda_acts_new(io->x, io->nh, dt), *dy = rt_cuda_acts_new(io->dy, io->nh, dt);
    void *enc = rt_cuda_acts_new(io->enc, io->ne, dt);
    void *y = rt_cuda_alloc(io->nh * rt_dtype_act_bytes(dt)), *dx = rt_cuda_alloc(io->nh * rt_dtype_act_bytes(dt));
    void *denc = rt_cuda_alloc(io->ne * rt_dtype_act_bytes(dt));
    void *acts = rt_cuda_alloc(rt_layer_acts_bytes(io->s, io->B, io->S, io->Se, dt));
    void *ry = rt_cuda_alloc(io->nh * rt_dtype_act_bytes(dt)); /* a full rerun's output */
    if (out_alloc(o, io) != 0 || !lp.block || !lg.block || !x || !dy || !enc || !y || !dx ||
        !denc || !acts || !ry) {
        fprintf(stderr, "dprun check-gpu: out of host or device memory\n");
        goto out;
    }
    rt_cuda_zero(g, lg.block, gb);
    rt_cuda_zero(g, denc, io->ne * rt_dtype_act_bytes(dt));
    rt_batch mb = {io->B, io->S, io->Se, io->seqs, io->enc_seqs, NULL};
    rt_cuda_layer_fwd(g, &lp, &mb, x, y, acts, enc);
    rt_cuda_layer_rerun(g, &lp, &mb, rc, x, ry, acts, enc);
    rt_cuda_layer_bwd_input(g, &lp, &lg, &mb, dy, dx, acts, denc);
    rt_cuda_layer_bwd_weight(g, &lg, &mb, acts, enc);
    if (rt_cuda_sync(g, why, sizeof why) != 0) {
        fprintf(stderr, "dprun check-gpu: %s layer: %s\n", rt_dtype_name(dt), why);
        goto out;
    }
    st = rt_cuda_acts_get(o->y, y, io->nh, dt) | rt_cuda_acts_get(o->dx, dx, io->nh, dt) |
         rt_cuda_grads_get(o->grads, lg.block, io->np, dt) |
         rt_cuda_acts_get(o->denc, denc, io->ne, dt);
out:
    rt_cuda_free(lp.block), rt_cuda_free(lg.block), rt_cuda_free(x), rt_cuda_free(dy);
    rt_cuda_free(enc), rt_cuda_free(y), rt_cuda_free(dx), rt_cuda_free(denc), rt_cuda_free(acts);
    rt_cuda_free(ry);
    return st;
}

/* The parameter tensor whose gradient is furthest from want's, relative to the tensor's own norm
 * (a small tensor, a bias or a norm's gain, can be wrong and hardly move the norm of them all):
 * its error, and its name in *name. */
static double worst_tensor(const layer_io *io, const layer_out *got, const layer_out *want,
                           const char **name)
{
    size_t off[RT_P_COUNT], len[RT_P_COUNT], count;
    int n = rt_layer_params_layout(io->s, off, len, &count);
    double worst = 0;
    *name = "-";
    for (int i = 0; i < n; i++) {
        double e = len[i] ? rel_err(got->grads + off[i], want->grads + off[i], len[i]) : 0;
        if (e > worst || isnan(e)) worst = e, *name = rt_param_name(i);
        if (isnan(e)) break;
    }
    return worst;
}

/* Prints the rows comparing `got` with `want` under tolerance tol_out (the output), tol_grad
 * (gradients) and tol_tensor (the parameter tensor with the largest error of its own); returns how
 * many failed. */
static int compare(const char *title, const layer_io *io, const layer_out *got,
                   const layer_out *want, double tol_out, double tol_grad, double tol_tensor)
{
    struct {
        const char *what;
        double err, tol;
    } rows[4] = {{"layer output", rel_err(got->y, want->y, io->nh), tol_out},
                 {"input gradient", rel_err(got->dx, want->dx, io->nh), tol_grad},
                 {"parameter gradients", rel_err(got->grads, want->grads, io->np), tol_grad},
                 {"encoder-output grad.", rel_err(got->denc, want->denc, io->ne), tol_grad}};
    int failed = 0;
    printf("%s, relative error in norm\n", title);
    for (int i = 0; i < (io->s->cross ? 4 : 3); i++) {
        int ok = rows[i].err < rows[i].tol; /* NaN fails */
        failed += !ok;
        printf("  %-22s %10.3e  (tolerance %.0e)  %s\n", rows[i].what, rows[i].err, rows[i].tol,
               ok ? "PASS" : "FAIL");
    }
    const char *name;
    double worst = worst_tensor(io, got, want, &name);
    char what[40];
    snprintf(what, sizeof what, "worst tensor (%s)", name);
    int ok = worst < tol_tensor;
    failed += !ok;
    printf("  %-22s %10.3e  (tolerance %.0e)  %s\n", what, worst, tol_tensor, ok ? "PASS" : "FAIL");
    return failed;
}

/* One kind of layer on (B, S) (an encoder output of length Se for a cross layer; seqs and
 * enc_seqs: varlen sequences, NULL for whole rows) on the three backends; adds its rows to
 * *n_rows and returns how many failed. */
static int check_layer(rt_cuda *g, const char *name, const rt_layer_shape *s, int B, int S,
                       int Se, const rt_seqs *seqs, const rt_seqs *enc_seqs, int *n_rows)
{
    layer_io io = {s, B, S, s->cross ? Se : 0, seqs, enc_seqs, 0, 0, 0, NULL, NULL, NULL, NULL};
    io.nh = (size_t)B * S * s->hidden, io.ne = (size_t)B * io.Se * s->hidden;
    rt_layer_params p;
    layer_out cpu = {0}, f64 = {0}, b16 = {0}, gemm = {0};
    int rows = (s->cross ? 4 : 3) + 1, failed = 7 * rows; /* + the worst tensor's */
    *n_rows += 7 * rows; /* 3 comparisons, and 2 recompute modes in 2 types */
    io.x = malloc(io.nh * sizeof(double)), io.dy = malloc(io.nh * sizeof(double));
    io.enc = calloc(io.ne + 1, sizeof(double));
    if (rt_layer_params_alloc(&p, s) != 0 || !io.x || !io.dy || !io.enc) goto out;
    rt_layer_params_init(&p, s, 5);
    io.params = p.block, io.np = p.count;
    for (size_t i = 0; i < io.nh; i++) io.x[i] = sin(0.37 * (double)i), io.dy[i] = cos(0.11 * (double)i);
    for (size_t i = 0; i < io.ne; i++) io.enc[i] = sin(0.23 * (double)i + 1);
    /* every backend starts from values bf16 holds exactly, so that the bf16 comparison measures
     * the bf16 path's own roundings, not those of its inputs */
    to_bf16_values(p.block, p.count), to_bf16_values(io.x, io.nh);
    to_bf16_values(io.dy, io.nh), to_bf16_values(io.enc, io.ne);
    printf("# %s layer, B %d, S %d", name, B, S);
    if (s->cross) printf(", encoder output of length %d", Se);
    if (seqs) {
        printf(", varlen: %d samples of", seqs->n);
        for (int j = 0; j < seqs->n; j++) printf(" %d", seqs->len[j]);
        if (enc_seqs) {
            printf(" (encoder:");
            for (int j = 0; j < enc_seqs->n; j++) printf(" %d", enc_seqs->len[j]);
            printf(")");
        }
    }
    printf("\n");
    if (run_cpu(&io, &cpu) != 0 || run_gpu(g, &io, RT_FP64, RECOMPUTE_NONE, &f64) != 0) goto out;
    failed = compare("GPU fp64 against the CPU layer (fp64)", &io, &f64, &cpu, RT_CHECK_FP64_TOL,
                     RT_CHECK_FP64_TOL, RT_CHECK_FP64_TOL);
    /* bf16 twice: as a run goes (cuDNN's fused attention where it builds), then with attention
     * on the GEMM path, so that one run on a GPU checks both */
    int b16_failed = rows, gemm_failed = rows;
    if (run_gpu(g, &io, RT_BF16, RECOMPUTE_NONE, &b16) == 0) {
        char title[400];
        snprintf(title, sizeof title, "GPU bf16 against GPU fp64 (attention: %s)", rt_cuda_attention_path(g));
        b16_failed = compare(title, &io, &b16, &f64, RT_CHECK_BF16_OUT_TOL, RT_CHECK_BF16_GRAD_TOL,
                             RT_CHECK_BF16_TENSOR_TOL);
    }
    rt_cuda_set_attention(g, RT_ATTN_GEMM);
    if (run_gpu(g, &io, RT_BF16, RECOMPUTE_NONE, &gemm) == 0) {
        char title[400];
        snprintf(title, sizeof title, "GPU bf16 against GPU fp64 (attention: %s)", rt_cuda_attention_path(g));
        gemm_failed = compare(title, &io, &gemm, &f64, RT_CHECK_BF16_OUT_TOL, RT_CHECK_BF16_GRAD_TOL,
                             RT_CHECK_BF16_TENSOR_TOL);
    }
    rt_cuda_set_attention(g, RT_ATTN_AUTO);
    failed += b16_failed + gemm_failed;
    /* the backward's reruns give back what the forward had, in each type (a run that fails
     * leaves its rows failed) */
    for (int t = 0; t < 2; t++)
        for (int rc = RECOMPUTE_SELECTIVE; rc <= RECOMPUTE_FULL; rc++) {
            rt_dtype dt = t ? RT_BF16 : RT_FP64;
            const layer_out *ref = t ? &b16 : &f64;
            layer_out o = {0};
            int rerun_failed = rows;
            if (ref->y && run_gpu(g, &io, dt, (recompute_mode)rc, &o) == 0) {
                char title[120];
                snprintf(title, sizeof title, "GPU %s under %s recompute against the same without",
                         rt_dtype_name(dt), recompute_name((recompute_mode)rc));
                rerun_failed = compare(title, &io, &o, ref, RT_CHECK_RERUN_TOL, RT_CHECK_RERUN_TOL,
                                       RT_CHECK_RERUN_TOL);
            }
            failed += rerun_failed;
            out_free(&o);
        }
out:
    rt_layer_params_free(&p);
    free(io.x), free(io.dy), free(io.enc);
    out_free(&cpu), out_free(&f64), out_free(&b16), out_free(&gemm);
    return failed;
}

/* The A100 profile's time per GPT-6.7B layer (bf16, TP1) for the shape, or NaN when the shipped
 * profile cannot be read (check-gpu runs from the source folder). */
static void a100_reference(const model_spec *m, const cost_shape *shape, double *fwd, double *bwd)
{
    *fwd = *bwd = NAN;
    cluster_spec hw;
    cost_model *cm = NULL;
    cost_layer c;
    if (cluster_resolve("a100-40gb", &hw, NULL) != DP_OK ||
        cost_profile_load("models/profiles/a100_gpt_6.7b_profile.csv", m, &hw, 1, RECOMPUTE_NONE,
                          &cm, NULL) != DP_OK)
        return;
    if (cost_query(cm, COMP_ENCODER, shape, &c, NULL) == DP_OK) *fwd = c.fwd_ms, *bwd = c.bwd_ms;
    cost_model_free(cm);
}

/* cuBLASLt's bf16 rate on the four GEMMs of a layer on n tokens, TFLOP/s (NaN on failure). */
static double gemm_rate(rt_cuda *g, const rt_layer_shape *s, int n)
{
    int h = s->hidden, hk = rt_layer_q_width(s), f = s->ffn;
    const int mnk[4][3] = {{n, rt_layer_qkv_width(s), h}, {n, h, hk}, {n, rt_layer_ffn_in(s), h},
                           {n, h, f}};
    double flops = 0, ms = 0;
    for (int i = 0; i < 4; i++) {
        double t;
        if (rt_cuda_time_gemm(g, mnk[i][0], mnk[i][1], mnk[i][2], RT_BF16, 10, &t) != 0) return NAN;
        flops += 2.0 * mnk[i][0] * mnk[i][1] * mnk[i][2], ms += t;
    }
    return ms > 0 ? flops / ms / 1e9 : NAN;
}

/* Times one GPT-6.7B-width layer in bf16 for a few shapes: TFLOP/s and MFU beside cuBLASLt's
 * GEMM rate and the A100 profile. */
static void print_speed(rt_cuda *g, const gpu_spec *gpu, const char *gpu_found)
{
    const model_spec *big = model_preset("gpt-6.7b-16l");
    rt_layer_shape bs = rt_layer_shape_of(big, RT_LAYER_GPT);
    rt_layer_params bp;
    if (rt_layer_params_alloc(&bp, &bs) != 0) return;
    rt_layer_params_init(&bp, &bs, 9);
    rt_cuda_layer bl = {bs, RT_BF16, rt_cuda_params_new(bp.block, bp.count, RT_BF16), bp.count, NULL, NULL};
    if (bl.block) {
        /* mbs, seq, and for a varlen micro-batch (THD) the samples it packs, of equal lengths:
         * each beside the rows of the same samples, so that the table shows what packing costs */
        static const int shapes[][3] = {{1, 2048, 0}, {4, 2048, 0}, {8, 1024, 0}, {1, 8192, 0},
                                        {1, 8192, 4}, {1, 8192, 8}};
        printf("\n# speed: one GPT-6.7B-width layer in bf16 on %s, forward and backward;\n"
               "# TFLOP/s from the simulator's FLOP count (models/cost.h analytic_flops, backward "
               "2x forward);\n# gemm_tflops: cuBLASLt alone on the layer's four GEMM shapes;\n"
               "# 'varlen N': the row packs N samples, each attending to itself (THD)\n",
               gpu_found);
        if (gpu)
            printf("# MFU against %s's %.0f TFLOP/s bf16 dense peak (models/hw.c)\n", gpu->name,
                   gpu->peak_tflops);
        else
            printf("# MFU: unknown GPU (dprun check-gpu --hw NAME names its preset)\n");
        printf("%-20s %10s %10s %9s %8s %12s %12s %12s\n", "mbs x seq", "fwd_ms", "bwd_ms",
               "tflops", "mfu", "gemm_tflops", "a100_fwd_ms", "a100_bwd_ms");
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
            int B = shapes[i][0], S = shapes[i][1], k = shapes[i][2], off[8], len[8];
            double f, b, af, ab, dense, attn;
            char label[32];
            cost_shape cs = cost_shape_rows(B, S, 0);
            rt_seqs seqs = {.n = k, .off = off, .len = len};
            rt_batch mb = {B, S, 0, k ? &seqs : NULL, NULL, NULL};
            for (int j = 0; j < k; j++) off[j] = j * (S / k), len[j] = S / k;
            if (k) cs.varlen = 1, cs.enc_sq = (double)k * (S / k) * (S / k);
            snprintf(label, sizeof label, k ? "%d x %d varlen %d" : "%d x %d", B, S, k);
            analytic_flops(big, COMP_ENCODER, &cs, 1, &dense, &attn);
            a100_reference(big, &cs, &af, &ab);
            if (rt_cuda_time_layer(g, &bl, &mb, RECOMPUTE_NONE, 5, &f, &b) != 0) {
                char why[240] = "";
                rt_cuda_sync(g, why, sizeof why);
                printf("%-20s the GPU failed: %s\n", label, why[0] ? why : "out of memory?");
                continue;
            }
            double tflops = 3 * (dense + attn) / (f + b) / 1e9;
            printf("%-20s %10.3f %10.3f %9.1f %7.1f%% %12.1f %12.3f %12.3f\n", label, f, b, tflops,
                   gpu ? 100 * tflops / gpu->peak_tflops : NAN, gemm_rate(g, &bs, B * S), af, ab);
            printf("#   attention: %s\n", rt_cuda_attention_path(g));
        }
    }
    rt_cuda_free(bl.block);
    rt_layer_params_free(&bp);
}

int rt_check_gpu(const model_spec *m, const char *hw, int speed)
{
    char why[256], name[128];
    rt_cuda *g = rt_cuda_open(0, why, sizeof why);
    if (!g) {
        fprintf(stderr, "dprun check-gpu: %s\n", why);
        return 1;
    }
    rt_cuda_device_name(g, name, sizeof name);
    const gpu_spec *gpu = hw ? gpu_preset(hw) : gpu_preset_for_device(name);
    if (hw && !gpu) {
        fprintf(stderr, "dprun check-gpu: unknown GPU \"%s\" (see dpsim models)\n", hw);
        rt_cuda_close(g);
        return 1;
    }
    rt_layer_shape gpt = rt_layer_shape_of(m, RT_LAYER_GPT);
    rt_layer_shape enc = rt_layer_shape_of(m, RT_LAYER_ENCODER);
    rt_layer_shape dec = rt_layer_shape_of(m, RT_LAYER_DECODER);
    int n_rows = 0, n_failed = 0;
    printf("# check-gpu numerics: %s on %s\n", m->name, name);
    /* varlen (THD): three samples packed back to back into two rows, padding at the end */
    static const int off[3] = {0, 40, 70}, len[3] = {40, 30, 50};
    static const int doff[3] = {0, 20, 36}, dlen[3] = {20, 16, 24};
    static const int eoff[3] = {0, 30, 70}, elen[3] = {30, 40, 20};
    rt_seqs gpt_seqs = {.n = 3, .off = off, .len = len}, dec_seqs = {.n = 3, .off = doff, .len = dlen}, enc_seqs = {.n = 3, .off = eoff, .len = elen};
    if (m->arch == ARCH_T5) {
        n_failed += check_layer(g, "T5 encoder (bidirectional)", &enc, 2, 48, 0, NULL, NULL, &n_rows);
        n_failed += check_layer(g, "T5 decoder (causal + cross-attention)", &dec, 2, 32, 48, NULL,
                                NULL, &n_rows);
        n_failed += check_layer(g, "T5 decoder (causal + cross-attention)", &dec, 2, 32, 48,
                                &dec_seqs, &enc_seqs, &n_rows);
    } else {
        n_failed += check_layer(g, gpt.glu ? "GPT (causal, SwiGLU)" : "GPT (causal)", &gpt, 2, 64, 0,
                                NULL, NULL, &n_rows);
        rt_layer_shape other = gpt; /* the other MLP at the same width, so both kernels run */
        other.glu = !gpt.glu;
        n_failed += check_layer(g, other.glu ? "GPT (causal) with a SwiGLU MLP" : "GPT (causal) with a GELU MLP",
                                &other, 2, 64, 0, NULL, NULL, &n_rows);
        n_failed += check_layer(g, "GPT (causal)", &gpt, 2, 64, 0, &gpt_seqs, NULL, &n_rows);
        /* grouped-query attention (the model's, or half as many key/value heads as query heads),
         * rows and varlen: cuDNN's broadcast K/V and its per-group dK/dV reduction, and the GEMM
         * path's head groups */
        rt_layer_shape gqa = gpt;
        if (rt_layer_kv_heads(&gqa) == gqa.heads && gqa.heads % 2 == 0) gqa.kv_heads = gqa.heads / 2;
        if (rt_layer_kv_heads(&gqa) != gqa.heads) {
            char title[120];
            snprintf(title, sizeof title, "GPT (causal), %d query heads on %d key/value heads",
                     gqa.heads, rt_layer_kv_heads(&gqa));
            n_failed += check_layer(g, title, &gqa, 2, 64, 0, NULL, NULL, &n_rows);
            n_failed += check_layer(g, title, &gqa, 2, 64, 0, &gpt_seqs, NULL, &n_rows);
        }
        /* and LLaMA's layer at this width: RMSNorm, no biases, rotary positions (each varlen
         * sample's from 0), SwiGLU, the same grouping where there is one */
        rt_layer_shape llama = gqa;
        llama.glu = llama.rmsnorm = llama.no_bias = 1;
        llama.rope_base = 500000; /* Llama-3's */
        n_failed += check_layer(g, "LLaMA (RMSNorm, rotary, no biases, SwiGLU)", &llama, 2, 64, 0,
                                NULL, NULL, &n_rows);
        n_failed += check_layer(g, "LLaMA (RMSNorm, rotary, no biases, SwiGLU)", &llama, 2, 64, 0,
                                &gpt_seqs, NULL, &n_rows);
    }
    if (speed) print_speed(g, gpu, name);
    rt_cuda_close(g);
    printf("%d passed, %d failed\n", n_rows - n_failed, n_failed);
    return n_failed != 0;
}

#else

int rt_check_gpu(const model_spec *m, const char *hw, int speed)
{
    (void)m, (void)hw, (void)speed;
    fprintf(stderr, "dprun check-gpu: this dprun was built without CUDA (no nvcc, cuBLAS, "
                    "cuBLASLt or cuDNN was found at build time)\n");
    return 1;
}

#endif
