/*
 * test_precision.c — the number formats (cost.h --precision, --grad-reduce-dtype) and honest
 * utilisation: FP8 GEMMs faster than bf16 by the GPU's measured ratio and no more; fp32 gradient
 * reduction moving twice the bytes and holding twice the gradient memory; HFU never above the
 * best GEMM share of the peak over a grid of models, lengths, layouts, precisions and recompute;
 * the straggler term (the expected slowest of N GPUs) against a brute-force sample, zero for one
 * GPU and growing with N; the elementwise bytes, the attention kernel and what a selective
 * recompute reruns under each software stack.
 */
#include "analytic_util.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "../../models/comm.h"
#include "../../models/memory.h"
#include "../../models/mesh.h"
#include "../../models/straggler.h"
#include "../../planner/study.h"
#include "../../scheduler/stage_cost.h"

/* The shape cost of Llama-3.1-8B's layer over len tokens at tp t, forward and backward, relative
 * to the fitted GPT-6.7B layer at 4,096 tokens in bf16: written out here from the GEMMs' shapes
 * (QKV, output, gate+up, down), independently of cost_analytic.c's list. */
static double k_share(double k, double k0)
{
    return k / (k + k0);
}

static void llama8b_shape_cost(double len, double t, double k0, double *fwd, double *bwd)
{
    const double h = 4096, qkv = (4096 + 2 * 1024) / t, o = 4096 / t, up = 2 * 14336 / t,
                 down = 14336 / t;
    const double fl[4] = {h * qkv, o * h, h * up, down * h}, k[4] = {h, o, h, down},
                 n[4] = {qkv, h, up, h};
    const double rk[4] = {4096, 4096, 4096, 16384}, rn[4] = {12288, 4096, 16384, 4096},
                 rfl[4] = {4096.0 * 12288, 4096.0 * 4096, 4096.0 * 16384, 16384.0 * 4096};
    double f = 0, b = 0, tot = 0, rf = 0, rb = 0, rtot = 0;
    for (int i = 0; i < 4; i++) {
        tot += fl[i], rtot += rfl[i];
        f += fl[i] / k_share(k[i], k0);
        b += fl[i] * (1 / k_share(n[i], k0) + 1 / k_share(len, k0)) / 2;
        rf += rfl[i] / k_share(rk[i], 244); /* the fit: bf16 */
        rb += rfl[i] * (1 / k_share(rn[i], 244) + 1 / k_share(4096, 244)) / 2;
    }
    *fwd = (f / tot) / (rf / rtot);
    *bwd = (b / tot) / (rb / rtot);
}

/* GEMM efficiency by shape on Hopper (hw.c): k / (k + k0) tracks TileLang's H800 K sweep (M = N =
 * 8192) within 3.1% in bf16 and 7% in FP8, relative to its K = 16384 point; the A100 has none. */
static void test_gemm_efficiency_by_shape(void **state)
{
    (void)state;
    const double K[7] = {256, 512, 1024, 2048, 4096, 8192, 16384};
    const double bf[7] = {386, 520, 628, 705, 736, 758, 766},
                 f8[7] = {569, 858, 1129, 1343, 1467, 1507, 1541};
    const gpu_spec *h100 = gpu_preset("h100"), *a100 = gpu_preset("a100-80gb");
    for (int i = 0; i < 7; i++) {
        double mb = cost_gemm_shape_eff(h100, 0, K[i]) / cost_gemm_shape_eff(h100, 0, 16384);
        double m8 = cost_gemm_shape_eff(h100, 1, K[i]) / cost_gemm_shape_eff(h100, 1, 16384);
        assert_true(fabs(mb / (bf[i] / bf[6]) - 1) < 0.032);
        assert_true(fabs(m8 / (f8[i] / f8[6]) - 1) < 0.07);
        assert_true(m8 <= mb + 1e-12); /* FP8's fixed work weighs more */
        assert_rel(cost_gemm_shape_eff(a100, 0, K[i]), 1, 0);
    }
    /* the layer: with the K curve, Llama-3.1-8B's forward and backward at tp 1 and 8 move by its
     * GEMM time times the shape cost less 1, nothing else (floors and TP overlap off) */
    for (int tp = 1; tp <= 8; tp *= 8)
        for (int len = 1024; len <= 16384; len *= 4) {
            cluster_spec c;
            assert_int_equal(cluster_resolve("dgx-h100", &c, NULL), DP_OK);
            analytic_params p;
            analytic_params_for_gpu(&c.gpu, &p);
            p.fwd_floor_ms = p.bwd_floor_ms = 0;
            cluster_spec flat = c;
            flat.gpu.gemm_k0 = flat.gpu.fp8_gemm_k0 = 0;
            cost_model *a = NULL, *b = NULL;
            assert_int_equal(cost_analytic_new(model_preset("llama3.1-8b"), &c, tp,
                                               RECOMPUTE_NONE, &p, &a, NULL), DP_OK);
            assert_int_equal(cost_analytic_new(model_preset("llama3.1-8b"), &flat, tp,
                                               RECOMPUTE_NONE, &p, &b, NULL), DP_OK);
            a->overlap = b->overlap = 0;
            cost_shape s = cost_shape_rows(1, len, 0);
            cost_layer la, lb;
            assert_int_equal(cost_query(a, COMP_ENCODER, &s, &la, NULL), DP_OK);
            assert_int_equal(cost_query(b, COMP_ENCODER, &s, &lb, NULL), DP_OK);
            double dense, attn;
            analytic_flops(&a->model, COMP_ENCODER, &s, tp, &dense, &attn);
            double gemm_ms = dense / (c.gpu.peak_tflops * 1e12 * p.gemm_eff) * 1e3, f, bw;
            llama8b_shape_cost(len, tp, 244, &f, &bw);
            assert_rel(la.fwd_ms - lb.fwd_ms, gemm_ms * (f - 1), 1e-9);
            assert_rel(la.bwd_ms - lb.bwd_ms, p.bwd_ratio * gemm_ms * (bw - 1), 1e-9);
            if (tp == 8) assert_true(f > 1.05); /* the output projection's K is 512 */
            cost_model_free(a), cost_model_free(b);
        }
}

/* The layer's forward under fp8 is its bf16 forward less (1 - 1/r) of its GEMM time, r the GPU's
 * best FP8 over best bf16 GEMM (1402.6 / 794.5 TFLOP/s on an H100), plus the casts' bytes at the
 * byte rate: written out here from the formula's parts, floors off so that nothing else moves. */
static void test_fp8_gemms_by_the_presets_ratio(void **state)
{
    (void)state;
    analytic_params p;
    cluster_spec c;
    assert_int_equal(cluster_resolve("h100", &c, NULL), DP_OK);
    analytic_params_for_gpu(&c.gpu, &p);
    p.fwd_floor_ms = p.bwd_floor_ms = 0;
    cost_model *bf = analytic("llama3.1-8b", "h100", 1, RECOMPUTE_NONE, &p);
    cost_model *f8 = analytic("llama3.1-8b", "h100", 1, RECOMPUTE_NONE, &p);
    assert_int_equal(cost_model_set_precision(bf, PRECISION_BF16, GRAD_REDUCE_AUTO, NULL), DP_OK);
    assert_int_equal(cost_model_set_precision(f8, PRECISION_FP8, GRAD_REDUCE_AUTO, NULL), DP_OK);
    double r = cost_gemm_speedup(f8);
    assert_rel(r, 1402.6 / 794.5, 1e-12);
    assert_rel(cost_gemm_speedup(bf), 1, 0);
    const model_spec *m = &bf->model;
    for (int len = 1024; len <= 32768; len *= 4) {
        cost_shape s = cost_shape_rows(1, len, 0);
        cost_layer a, b;
        assert_int_equal(cost_query(bf, COMP_ENCODER, &s, &a, NULL), DP_OK);
        assert_int_equal(cost_query(f8, COMP_ENCODER, &s, &b, NULL), DP_OK);
        double dense, attn;
        analytic_flops(m, COMP_ENCODER, &s, 1, &dense, &attn);
        double gemm_ms = dense / (c.gpu.peak_tflops * 1e12 * p.gemm_eff) * 1e3;
        double h = m->hidden, hk = (double)m->heads * m->kv_channels;
        double cast_ms = 7.0 * len * (2 * h + hk + m->ffn) / (c.gpu.hbm_gbps * 1e9 * p.mem_eff) * 1e3;
        double fb, f8s, bwd; /* each GEMM at its shape: bf16's k0, FP8's */
        llama8b_shape_cost(len, 1, 244, &fb, &bwd);
        llama8b_shape_cost(len, 1, 409, &f8s, &bwd);
        assert_rel(a.fwd_ms - b.fwd_ms, gemm_ms * (fb - f8s / r) - cast_ms, 1e-9);
        /* never faster than the ratio, and the memory the same (activations stay bf16) */
        assert_true(b.fwd_ms * r >= a.fwd_ms && b.bwd_ms * r >= a.bwd_ms);
        assert_rel(a.stored_act_mb, b.stored_act_mb, 0);
        /* the LM head stays bf16 */
        assert_int_equal(cost_query(bf, COMP_POSTPROCESS, &s, &a, NULL), DP_OK);
        assert_int_equal(cost_query(f8, COMP_POSTPROCESS, &s, &b, NULL), DP_OK);
        assert_rel(a.fwd_ms, b.fwd_ms, 0);
    }
    cost_model_free(bf), cost_model_free(f8);
}

static void test_fp8_refused_where_it_cannot_run(void **state)
{
    (void)state;
    cost_model *cm = analytic("llama3.1-8b", "a100-80gb", 1, RECOMPUTE_NONE, NULL);
    dp_err err = {0};
    assert_int_equal(cost_model_set_precision(cm, PRECISION_FP8, GRAD_REDUCE_AUTO, &err),
                     DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--precision fp8"));
    assert_non_null(strstr(err.msg, "no FP8"));
    assert_int_equal(cm->precision, PRECISION_BF16); /* unchanged */
    cost_model_free(cm);
    cluster_spec c;
    assert_int_equal(cluster_resolve("p4d", &c, NULL), DP_OK);
    c.gpu.fp8_tflops = 1000, c.gpu.fp8_matmul_eff = 0.7; /* a profile times what it measured */
    assert_int_equal(cost_profile_load(DPSIM_SRCDIR "/models/profiles/a100_gpt_6.7b_profile.csv",
                                       model_preset("gpt-6.7b-16l"), &c, 1, RECOMPUTE_NONE, &cm,
                                       NULL), DP_OK);
    assert_int_equal(cost_model_set_precision(cm, PRECISION_FP8, GRAD_REDUCE_AUTO, &err),
                     DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "analytic"));
    cost_model_free(cm);
    /* the defaults: fp32 gradients under bf16 and fp8, 16-bit under fp16 */
    assert_int_equal(grad_reduce_bytes(PRECISION_BF16, GRAD_REDUCE_AUTO), 4);
    assert_int_equal(grad_reduce_bytes(PRECISION_FP8, GRAD_REDUCE_AUTO), 4);
    assert_int_equal(grad_reduce_bytes(PRECISION_FP16, GRAD_REDUCE_AUTO), 2);
    assert_int_equal(grad_reduce_bytes(PRECISION_BF16, GRAD_REDUCE_16), 2);
}

/* fp32 gradients: every gradient collective is the same collective over twice the bytes, the
 * parameter gathers unchanged, and the gradient memory doubled; per ZeRO stage, over 8 replicas
 * across nodes. */
static void test_fp32_grad_reduce_moves_twice_the_bytes(void **state)
{
    (void)state;
    for (int zero = 0; zero <= 3; zero++) {
        cost_model *a = analytic("llama3.1-8b", "dgx-h100", 1, RECOMPUTE_NONE, NULL);
        cost_model *b = analytic("llama3.1-8b", "dgx-h100", 1, RECOMPUTE_NONE, NULL);
        assert_int_equal(cost_model_set_precision(a, PRECISION_BF16, GRAD_REDUCE_16, NULL), DP_OK);
        assert_int_equal(cost_model_set_precision(b, PRECISION_BF16, GRAD_REDUCE_FP32, NULL), DP_OK);
        stage_model s16, s32;
        assert_int_equal(stage_model_init(&s16, a, 2, 1, 16, zero, 1e9, NULL), DP_OK);
        assert_int_equal(stage_model_init(&s32, b, 2, 1, 16, zero, 1e9, NULL), DP_OK);
        for (int d = 0; d < 2; d++) {
            comm_group g = comm_dp_group(&a->hw, &(mesh){1, 1, 2, 16}, d);
            double P = 1e6 * s16.param_mb[d];
            double ar = comm_coll_ms(&a->hw, COLL_ALL_REDUCE, &g, 2 * P);
            double rs = comm_coll_ms(&a->hw, COLL_REDUCE_SCATTER, &g, 2 * P);
            double ag = comm_coll_ms(&a->hw, COLL_ALL_GATHER, &g, P);
            if (zero == 0) assert_rel(s32.zero_iter_ms[d], ar, 1e-12);
            if (zero == 1) assert_rel(s32.zero_iter_ms[d], rs + ag, 1e-12);
            if (zero == 2) assert_rel(s32.zero_bwd_ms[d], rs, 1e-12);
            if (zero == 3) assert_rel(s32.zero_bwd_ms[d], rs + ag, 1e-12);
            assert_rel(s32.zero_fwd_ms[d], s16.zero_fwd_ms[d], 0); /* gathers: 16-bit weights */
            assert_true(s32.zero_iter_ms[d] + s32.zero_bwd_ms[d] >
                        s16.zero_iter_ms[d] + s16.zero_bwd_ms[d]);
            /* the gradient memory doubles, nothing else moves */
            double w, g16, g32, o;
            state_bytes b16 = memory_state_bytes(a->precision, a->grad_bytes),
                        b32 = memory_state_bytes(b->precision, b->grad_bytes);
            memory_model_state_parts(s16.param_mb[d], &b16, zero, 16, &w, &g16, &o);
            memory_model_state_parts(s32.param_mb[d], &b32, zero, 16, &w, &g32, &o);
            assert_rel(g32, 2 * g16, 1e-12);
            assert_rel(s32.state_mb[d] - s16.state_mb[d], g32 - g16, 1e-9);
        }
        cost_model_free(a), cost_model_free(b);
    }
}

/* HFU (the recomputed forwards counted, causal attention at half the square) never exceeds the
 * best GEMM's share of the bf16 peak that the run's precision allows (matmul_eff; under fp8 the
 * best FP8 GEMM over the bf16 peak), whatever the model, length, layout, precision and recompute:
 * every op is timed at or below the best measured rate of the unit that runs it. The MFU is at
 * most the HFU. */
static void test_hfu_never_exceeds_the_best_gemm(void **state)
{
    (void)state;
    static const char *const models[] = {"llama3.1-8b", "llama3.1-70b", "gpt-6.7b-16l"};
    static const int lens[] = {2048, 16384, 131072};
    static const struct { int tp, cp, pp, dp, zero; } layouts[] = {
        {1, 1, 1, 1, 0}, {8, 1, 1, 1, 1}, {1, 8, 1, 1, 1}, {8, 1, 4, 2, 1}, {1, 1, 1, 8, 3}};
    int runs = 0;
    for (size_t mi = 0; mi < sizeof models / sizeof *models; mi++)
        for (size_t li = 0; li < sizeof lens / sizeof *lens; li++)
            for (size_t y = 0; y < sizeof layouts / sizeof *layouts; y++)
                for (int prec = PRECISION_BF16; prec <= PRECISION_FP8; prec += 2)
                    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_FULL; rc++) {
                        /* selective: Megatron's and, for every second model, torchtitan's */
                        software_stack stack = rc == RECOMPUTE_SELECTIVE && mi % 2
                                                   ? STACK_TORCH_COMPILE
                                                   : STACK_MEGATRON_TE;
                        const model_spec *m = model_preset(models[mi]);
                        int len = lens[li];
                        if (m->positions && len > m->positions) continue;
                        cost_model *cm = analytic(models[mi], "dgx-h100", layouts[y].tp,
                                                  (recompute_mode)rc, NULL);
                        if (cost_model_set_stack(cm, stack, cm->flash_attn, NULL, NULL) != DP_OK ||
                            cost_model_set_cp(cm, layouts[y].cp, 0, NULL) != DP_OK ||
                            cost_model_set_precision(cm, (train_precision)prec, GRAD_REDUCE_AUTO,
                                                     NULL) != DP_OK) {
                            cost_model_free(cm);
                            continue;
                        }
                        trace t;
                        trace_init(&t);
                        for (int i = 0; i < 16; i++) assert_int_equal(trace_push(&t, "a", len, 0), DP_OK);
                        batch_rules rules;
                        batch_rules_default(&rules, ARCH_GPT);
                        rules.global_tokens = 4 * (int64_t)len, rules.max_seqlen = len;
                        study_opts o = {0};
                        o.cm = cm, o.rules = &rules, o.batching = batcher_find("packing");
                        o.sched = schedule_find("1f1b");
                        o.pp = layouts[y].pp, o.chunks = 1, o.dp = layouts[y].dp;
                        o.zero = layouts[y].zero, o.mem_limit_mb = 1e9; /* time, not memory */
                        o.mbs = 1, o.mb_tokens = len, o.max_iterations = 1;
                        study_result r;
                        dp_err err = {0};
                        dp_status st = study_run(&o, &t, &r, &err);
                        if (st == DP_OK && r.feasible) {
                            double bound = cm->hw.gpu.matmul_eff * cost_gemm_speedup(cm);
                            if (!(r.hfu > 0 && r.hfu <= bound && r.mfu <= r.hfu + 1e-12))
                                fail_msg("%s at %d tokens, tp %d cp %d pp %d dp %d, %s, recompute "
                                         "%s, %s: HFU %.4f, MFU %.4f, bound %.4f", models[mi], len,
                                         layouts[y].tp, layouts[y].cp, layouts[y].pp,
                                         layouts[y].dp, precision_name((train_precision)prec),
                                         recompute_name((recompute_mode)rc), stack_name(stack),
                                         r.hfu, r.mfu, bound);
                            runs++;
                        }
                        if (st == DP_OK) study_result_release(&r);
                        trace_release(&t);
                        cost_model_free(cm);
                    }
    assert_true(runs >= 90); /* the grid was run, not skipped */
}

/* E[max of n standard normals]: closed forms at n = 1, 2, 3 (0, 1/sqrt(pi), 3/(2 sqrt(pi))), a
 * brute-force sample elsewhere, and the share growing with n and zero without jitter. */
static void test_straggler_expected_max(void **state)
{
    (void)state;
    assert_rel(straggler_expected_max(1), 0, 0);
    assert_rel(straggler_expected_max(2), 1 / sqrt(M_PI), 1e-8);
    assert_rel(straggler_expected_max(3), 1.5 / sqrt(M_PI), 1e-8);
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 7);
    static const int ns[] = {8, 64, 1024};
    for (size_t k = 0; k < sizeof ns / sizeof *ns; k++) {
        int trials = 20000;
        double sum = 0, sum2 = 0;
        for (int t = 0; t < trials; t++) {
            double mx = -INFINITY;
            for (int i = 0; i < ns[k]; i++) mx = fmax(mx, gsl_ran_ugaussian(rng));
            sum += mx, sum2 += mx * mx;
        }
        double mean = sum / trials, sd = sqrt(sum2 / trials - mean * mean);
        /* within 4 standard errors of the sample mean */
        assert_true(fabs(straggler_expected_max(ns[k]) - mean) < 4 * sd / sqrt(trials));
    }
    gsl_rng_free(rng);
    double prev = 0;
    for (long long n = 2; n <= 1 << 20; n *= 4) {
        double e = straggler_expected_max(n);
        assert_true(e > prev);
        prev = e;
    }
    assert_rel(straggler_share(0.014, 1), 0, 0);
    assert_rel(straggler_share(0, 4096), 0, 0);
    assert_rel(straggler_share(0.014, 8), 0.014 * straggler_expected_max(8), 1e-12);
}

/* The simulated wait: a stage's STRAGGLER op lasts the share of its compute time, the iteration
 * grows by it on a single stage, and p4d (DynaPipe's cost model) has none. */
typedef struct wait_sink {
    double straggler_ns, compute_ns, step_ns; /* step: the optimizer's */
} wait_sink;

static void on_wait_op(void *ctx, const sim_op *o)
{
    wait_sink *w = ctx;
    if ((int)o->op == SIM_OP_STRAGGLER) w->straggler_ns += (double)(o->end_ns - o->start_ns);
    if ((int)o->op == SIM_OP_OPTIMIZER) w->step_ns += (double)(o->end_ns - o->start_ns);
    if (o->op == OP_F || o->op == OP_B || o->op == OP_W) w->compute_ns += (double)(o->end_ns - o->start_ns);
}

static void test_straggler_on_the_timeline(void **state)
{
    (void)state;
    for (int jitter = 0; jitter <= 1; jitter++) {
        cost_model *cm = analytic("llama3.1-8b", "dgx-h100", 8, RECOMPUTE_NONE, NULL);
        if (!jitter) cm->hw.gpu_jitter = 0;
        trace t;
        trace_init(&t);
        for (int i = 0; i < 8; i++) assert_int_equal(trace_push(&t, "a", 4096, 0), DP_OK);
        batch_rules rules;
        batch_rules_default(&rules, ARCH_GPT);
        rules.global_tokens = 8 * 4096, rules.max_seqlen = 4096;
        study_opts o = {0};
        o.cm = cm, o.rules = &rules, o.batching = batcher_find("packing");
        o.sched = schedule_find("1f1b");
        o.pp = 1, o.chunks = 1, o.dp = 1, o.zero = 0, o.mem_limit_mb = 1e9;
        o.mbs = 1, o.mb_tokens = 4096, o.max_iterations = 1;
        wait_sink w = {0, 0, 0};
        sim_sink sink = {on_wait_op, NULL, &w};
        o.sink = &sink;
        study_result r;
        assert_int_equal(study_run(&o, &t, &r, NULL), DP_OK);
        double share = jitter ? 0.014 * straggler_expected_max(8) : 0;
        assert_rel(r.straggler_share, share, 1e-12);
        assert_near(w.straggler_ns, share * w.compute_ns, 2);
        /* one stage: compute, the wait and the optimizer step back to back */
        assert_near(r.time_s * 1e9, w.compute_ns + w.straggler_ns + w.step_ns, 2);
        study_result_release(&r);
        trace_release(&t);
        cost_model_free(cm);
    }
}

/* The elementwise bytes a layer moves under each software stack (models/stack.h), written out here
 * per op. Fused (megatron-te, torch-compile): 8 passes over the hidden state (the norms, the
 * residual adds), the MLP's activation over its width (GeLU 2 passes, a gated MLP's SwiGLU 3), a
 * rotary model's queries and keys rotated (2 passes over them); the head's fp32 logits 3 passes of
 * 4 bytes. Eager (torch-eager, torchtitan's ops one kernel each): a norm .float() 2 + 4, pow 4 + 4,
 * mean 4, x * rsqrt 4 + 4, type_as 4 + 2, * weight 2 + 2 bytes an element; a residual add
 * 2 + 2 + 2; rotary .float() 2 + 4, the complex product 4 + 4, type_as 4 + 2; SwiGLU silu 2 + 2
 * and the product 2 + 2 + 2; GeLU 2 + 2; K and V copied to the query heads (read 2 at their
 * width, written 2 at the queries'); the attention's output copied back (2 + 2); the loss
 * .float() 2 + 4, log_softmax 4 + 4, and backward 4, 4 + 4 + 4, 4 + 2. A LayerNorm is one
 * kernel (2 + 2) under all. The weights are read once under all. Measured as the forward's
 * change with mem_eff (the byte term is the only one that has it) and the backward's, bwd_ratio
 * times it, the head's too. Llama-3.1-8B (gated, rotary, RMSNorm, grouped-query) and GPT-6.7B
 * (none of them), tp 1 and 4 (sequence parallel: the hidden-state passes split). */
static void test_elementwise_bytes_by_stack(void **state)
{
    (void)state;
    static const char *const models[] = {"llama3.1-8b", "gpt-6.7b-16l"};
    static const software_stack stacks[] = {STACK_MEGATRON_TE, STACK_TORCH_EAGER,
                                            STACK_TORCH_COMPILE};
    for (int i = 0; i < 2; i++)
        for (int tp = 1; tp <= 4; tp *= 4)
            for (int k = 0; k < 3; k++) {
                int eager = stacks[k] == STACK_TORCH_EAGER;
                analytic_params p;
                cluster_spec c;
                assert_int_equal(cluster_resolve("dgx-h100", &c, NULL), DP_OK);
                analytic_params_for_gpu(&c.gpu, &p);
                p.fwd_floor_ms = p.bwd_floor_ms = 0;
                cost_model *a = analytic(models[i], "dgx-h100", tp, RECOMPUTE_NONE, &p);
                p.mem_eff /= 2;
                cost_model *b = analytic(models[i], "dgx-h100", tp, RECOMPUTE_NONE, &p);
                a->stack = b->stack = stacks[k];
                const model_spec *m = &a->model;
                double h = m->hidden, f = m->ffn, t = tp;
                double hk = (double)m->heads * m->kv_channels;
                double hkv = (double)(m->kv_heads > 0 ? m->kv_heads : m->heads) * m->kv_channels;
                double len = 4096, sp = a->seq_parallel && tp > 1 ? t : 1;
                double norm = !m->rmsnorm ? 2 * 2 /* nn.LayerNorm: one kernel under all */
                              : eager ? 2 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 2 + 2 + 2
                                      : 2 * 2;
                double resid = eager ? 3 * 2 : 2 * 2;
                double act = m->glu ? (eager ? 5 * 2 : 3 * 2) : 2 * 2;
                double rope = m->rope ? (eager ? 2 + 4 + 4 + 4 + 4 + 2 : 2 * 2) * (hk + hkv) / t : 0;
                double repeat = eager && hkv < hk ? 2 * 2 * (hkv + hk) / t : 0;
                double out_copy = eager ? 2 * 2 * hk / t : 0; /* transpose(1, 2).contiguous() */
                double per_token =
                    2 * (norm + resid) * h / sp + act * f / t + rope + repeat + out_copy;
                double bytes = len * per_token + 1e6 * a->param_mb[COMP_ENCODER];
                double loss = eager ? 2 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 4 + 2 : 3 * 4;
                double head_bytes = len * loss * m->vocab / t + 2.0 * m->vocab * h / t;
                cost_shape s = cost_shape_rows(1, (int)len, 0);
                cost_layer la, lb, ha, hb;
                assert_int_equal(cost_query(a, COMP_ENCODER, &s, &la, NULL), DP_OK);
                assert_int_equal(cost_query(b, COMP_ENCODER, &s, &lb, NULL), DP_OK);
                assert_int_equal(cost_query(a, COMP_POSTPROCESS, &s, &ha, NULL), DP_OK);
                assert_int_equal(cost_query(b, COMP_POSTPROCESS, &s, &hb, NULL), DP_OK);
                /* at half the rate the bytes take twice as long: the difference is their time at
                 * a's, and the backward moves bwd_ratio times the forward's */
                double bw = c.gpu.hbm_gbps * 1e9 * 2 * p.mem_eff;
                assert_rel(lb.fwd_ms - la.fwd_ms, bytes / bw * 1e3, 1e-9);
                assert_rel(lb.bwd_ms - la.bwd_ms, p.bwd_ratio * bytes / bw * 1e3, 1e-9);
                assert_rel(hb.fwd_ms - ha.fwd_ms, head_bytes / bw * 1e3, 1e-9);
                assert_rel(hb.bwd_ms - ha.bwd_ms, p.bwd_ratio * head_bytes / bw * 1e3, 1e-9);
                /* both kinds covered: gated, rotary, RMSNorm; and none of them */
                assert_true(m->glu == !i && m->rope == !i && m->rmsnorm == !i);
                cost_model_free(a), cost_model_free(b);
            }
}

/* What `--recompute selective` reruns under each stack (stack.h, stack_selective_policy), measured
 * as the backward's change from no recompute, each term of the forward isolated by halving its
 * efficiency (the GEMMs' gemm_eff, the bytes' mem_eff; the weights' bytes taken out; attention
 * what is left; tensor-parallel collectives not overlapped): Megatron's (megatron-te) the
 * attention's forward; torchtitan's per-op policy (torch-eager, torch-compile) every second GEMM
 * of the layer in its model code's call order — q, k, v, the output projection, (gate,) up, down:
 * k, output and up for Llama-3.1-8B, k, output and down for GPT-6.7B, written out here — at their
 * shapes' time (K / (K + k0), hw.h) and reading their weights again, every elementwise op, and
 * under tp with sequence parallelism the layer's two all-gathers; not attention. The forward and
 * the head are unchanged under all; cost_rerun_shares gives the FLOP shares HFU and ZB's W use. */
static double alt_share(const double *fl, const double *k, int n, double k0)
{
    double all = 0, rerun = 0;
    for (int i = 0; i < n; i++) {
        double w = fl[i] / (k0 > 0 ? k_share(k[i], k0) : 1);
        all += w;
        if (i % 2) rerun += w;
    }
    return rerun / all;
}

static void test_selective_recompute_by_stack(void **state)
{
    (void)state;
    static const char *const models[] = {"llama3.1-8b", "gpt-6.7b-16l"};
    for (int i = 0; i < 2; i++)
        for (int tp = 1; tp <= 4; tp *= 4)
            for (int k = 0; k < STACK_COUNT; k++) {
                analytic_params p;
                cluster_spec c;
                assert_int_equal(cluster_resolve("dgx-h100", &c, NULL), DP_OK);
                analytic_params_for_gpu(&c.gpu, &p);
                p.fwd_floor_ms = p.bwd_floor_ms = 0;
                analytic_params pg = p, pm = p;
                pg.gemm_eff /= 2, pm.mem_eff /= 2;
                cost_model *none = analytic(models[i], "dgx-h100", tp, RECOMPUTE_NONE, &p);
                cost_model *sel = analytic(models[i], "dgx-h100", tp, RECOMPUTE_SELECTIVE, &p);
                cost_model *g2 = analytic(models[i], "dgx-h100", tp, RECOMPUTE_NONE, &pg);
                cost_model *m2 = analytic(models[i], "dgx-h100", tp, RECOMPUTE_NONE, &pm);
                cost_model *all[4] = {none, sel, g2, m2};
                for (int j = 0; j < 4; j++) all[j]->stack = (software_stack)k, all[j]->overlap = 0;
                const double len = 4096;
                cost_shape s = cost_shape_rows(1, (int)len, 0);
                cost_layer ln, ls, lg, lm, hn, hs;
                assert_int_equal(cost_query(none, COMP_ENCODER, &s, &ln, NULL), DP_OK);
                assert_int_equal(cost_query(sel, COMP_ENCODER, &s, &ls, NULL), DP_OK);
                assert_int_equal(cost_query(g2, COMP_ENCODER, &s, &lg, NULL), DP_OK);
                assert_int_equal(cost_query(m2, COMP_ENCODER, &s, &lm, NULL), DP_OK);
                assert_int_equal(cost_query(none, COMP_POSTPROCESS, &s, &hn, NULL), DP_OK);
                assert_int_equal(cost_query(sel, COMP_POSTPROCESS, &s, &hs, NULL), DP_OK);
                double gemms = lg.fwd_ms - ln.fwd_ms, bytes = lm.fwd_ms - ln.fwd_ms;
                double weights = none->param_mb[COMP_ENCODER] * 1e6 /
                                 (c.gpu.hbm_gbps * 1e9 * p.mem_eff) * 1e3;
                const model_spec *m = &none->model;
                double h = m->hidden, f = m->ffn, q = (double)m->heads * m->kv_channels, t = tp;
                double kv = (double)(m->kv_heads > 0 ? m->kv_heads : m->heads) * m->kv_channels;
                /* the projections as the model code calls them: FLOPs per token and inner K */
                double fl[7] = {h * q / t, h * kv / t, h * kv / t, q / t * h, h * f / t, h * f / t,
                                f / t * h};
                double kk[7] = {h, h, h, q / t, h, h, f / t};
                int n = 7;
                if (!m->glu) fl[5] = fl[6], kk[5] = kk[6], n = 6; /* up, down */
                double flop_share = alt_share(fl, kk, n, 0);
                double time_share = alt_share(fl, kk, n, c.gpu.gemm_k0);
                /* the tensor-parallel collectives: each a (b, s, h) fp16 activation, two a layer */
                int sp = none->seq_parallel && tp > 1;
                mesh layout = mesh_of(tp, 1, 1, 1);
                comm_group grp = comm_mesh_group(&c, &layout, MESH_TP);
                double act = 2.0 * len * h;
                double gather = tp > 1 ? comm_coll_ms(&c, COLL_ALL_GATHER, &grp, act) : 0;
                double reduce = tp > 1 ? comm_coll_ms(&c, COLL_ALL_REDUCE, &grp, act) : 0;
                double collectives = tp > 1 ? (sp ? 2 * (gather +
                                                        comm_coll_ms(&c, COLL_REDUCE_SCATTER, &grp, act))
                                                  : 2 * reduce)
                                            : 0;
                double attention = ln.fwd_ms - gemms - bytes - collectives;
                double want = k == STACK_MEGATRON_TE
                                  ? attention
                                  : time_share * gemms + bytes - weights + flop_share * weights +
                                        (tp > 1 ? (sp ? 2 * gather : reduce) : 0);
                assert_true(attention > 0 && weights > 0 && bytes > weights);
                assert_rel(ls.bwd_ms - ln.bwd_ms, want, 1e-9);
                assert_rel(ls.fwd_ms, ln.fwd_ms, 1e-12);
                assert_rel(hs.bwd_ms, hn.bwd_ms, 1e-12);
                /* the FLOP shares: Llama-3.1-8B's 36.5%, GPT-6.7B's half */
                if (i == 0) assert_rel(flop_share, 0.365, 0.002);
                else assert_rel(flop_share, 0.5, 1e-12);
                double dense, attn;
                cost_rerun_shares(m, (software_stack)k, RECOMPUTE_SELECTIVE, tp, &dense, &attn);
                assert_rel(dense, k == STACK_MEGATRON_TE ? 0 : flop_share, 1e-12);
                assert_rel(attn, k == STACK_MEGATRON_TE ? 1 : 0, 1e-12);
                for (int j = 0; j < 4; j++) cost_model_free(all[j]);
            }
}

/* The attention kernel a stack runs (stack.h): Transformer Engine's is the GPU's default (cuDNN on
 * Hopper); PyTorch's SDPA runs FlashAttention-2 where it is measured (A100, H100, H200) and falls
 * back, saying so, on a B200; a user's GPU takes the kernel of its default kernel's architecture.
 * The names parse back. */
static void test_stack_attention_kernel(void **state)
{
    (void)state;
    static const struct {
        const char *gpu;
        software_stack s;
        const char *kernel;
        int fallback;
    } cases[] = {{"h100", STACK_MEGATRON_TE, "cudnn-h100", 0},
                 {"h100", STACK_TORCH_EAGER, "fa2-h100", 0},
                 {"h200", STACK_TORCH_COMPILE, "fa2-h100", 0},
                 {"a100-80gb", STACK_TORCH_EAGER, "fa2-a100", 0},
                 {"a100-40gb", STACK_MEGATRON_TE, "fa2-a100", 0},
                 {"b200", STACK_TORCH_EAGER, "fa4-b200", 1},
                 {"b200", STACK_MEGATRON_TE, "fa4-b200", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int fallback = -1;
        const attn_kernel *k = stack_attention_kernel(cases[i].s, gpu_preset(cases[i].gpu), &fallback);
        assert_non_null(k);
        assert_string_equal(k->name, cases[i].kernel);
        assert_int_equal(fallback, cases[i].fallback);
    }
    gpu_spec mine = *gpu_preset("h100"); /* a user's Hopper: its default kernel's architecture */
    snprintf(mine.name, sizeof mine.name, "my-gpu");
    assert_string_equal(stack_attention_kernel(STACK_TORCH_EAGER, &mine, NULL)->name, "fa2-h100");
    mine.attn = NULL; /* none measured: unfused, under any stack */
    assert_null(stack_attention_kernel(STACK_TORCH_EAGER, &mine, NULL));
    for (int s = 0; s < STACK_COUNT; s++) {
        software_stack back = STACK_COUNT;
        assert_int_equal(stack_parse(stack_name((software_stack)s), &back), 0);
        assert_int_equal(back, s);
        assert_non_null(strstr(stack_names(), stack_name((software_stack)s)));
    }
    software_stack untouched = STACK_TORCH_COMPILE;
    assert_int_equal(stack_parse("torch", &untouched), -1);
    assert_int_equal(untouched, STACK_TORCH_COMPILE);
}

/* A fused kernel's measured rates scale with the GPU's peak over the one it was measured on
 * (hw.h attn_kernel_peak_share): Llama-3-8B's layer on an H100 at 912 TFLOP/s (torchtitan's
 * h100-hbm2e) with the GEMM efficiency raised to keep its GEMMs' time, against the 989 one; the
 * attention's time, measured on the latter as what halving the kernel's speed adds, grows by
 * 989 / 912, forward and backward, and nothing else moves. */
static void test_attention_kernel_scales_with_the_peak(void **state)
{
    (void)state;
    cluster_spec c;
    assert_int_equal(cluster_resolve("dgx-h100", &c, NULL), DP_OK);
    analytic_params p;
    analytic_params_for_gpu(&c.gpu, &p);
    p.fwd_floor_ms = p.bwd_floor_ms = 0;
    cost_model *a = analytic("llama3-8b", "dgx-h100", 1, RECOMPUTE_NONE, &p);
    cost_model *half = analytic("llama3-8b", "dgx-h100", 1, RECOMPUTE_NONE, &p);
    half->attn_speed = 0.5;
    analytic_params q = p;
    q.gemm_eff = p.gemm_eff * 989 / 912;
    cost_model *b = analytic("llama3-8b", "dgx-h100", 1, RECOMPUTE_NONE, &q);
    b->hw.gpu.peak_tflops = 912;
    cost_shape s = cost_shape_rows(1, 8192, 0);
    cost_layer la, lh, lb;
    assert_int_equal(cost_query(a, COMP_ENCODER, &s, &la, NULL), DP_OK);
    assert_int_equal(cost_query(half, COMP_ENCODER, &s, &lh, NULL), DP_OK);
    assert_int_equal(cost_query(b, COMP_ENCODER, &s, &lb, NULL), DP_OK);
    double attn_fwd = lh.fwd_ms - la.fwd_ms, attn_bwd = lh.bwd_ms - la.bwd_ms;
    assert_true(attn_fwd > 0.05 * la.fwd_ms); /* attention is a fair part of the layer at 8k */
    assert_rel(lb.fwd_ms - la.fwd_ms, attn_fwd * (989.0 / 912 - 1), 1e-9);
    assert_rel(lb.bwd_ms - la.bwd_ms, attn_bwd * (989.0 / 912 - 1), 1e-9);
    cost_model_free(a), cost_model_free(half), cost_model_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gemm_efficiency_by_shape),
        cmocka_unit_test(test_fp8_gemms_by_the_presets_ratio),
        cmocka_unit_test(test_elementwise_bytes_by_stack),
        cmocka_unit_test(test_stack_attention_kernel),
        cmocka_unit_test(test_selective_recompute_by_stack),
        cmocka_unit_test(test_attention_kernel_scales_with_the_peak),
        cmocka_unit_test(test_fp8_refused_where_it_cannot_run),
        cmocka_unit_test(test_fp32_grad_reduce_moves_twice_the_bytes),
        cmocka_unit_test(test_hfu_never_exceeds_the_best_gemm),
        cmocka_unit_test(test_straggler_expected_max),
        cmocka_unit_test(test_straggler_on_the_timeline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
