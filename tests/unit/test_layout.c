/*
 * test_layout.c — runtime/layout.h, the one rule of what a runtime layer stores where and in what
 * type: bf16 rounding against hand-computed values and a bound over many, the fp64 activation
 * block against the formula written out here (the CPU layer's layout before layout.h existed),
 * the bf16 block's alignment and sizes, the parameter blocks, and the bf16 layer's stored bytes
 * against the analytic cost model's FlashAttention memory (models/cost_analytic.c: Korthikanti's
 * formula without the score terms), which is what the planner checks memory with; and each
 * tensor-parallel rank's share of a layer against head and column arithmetic written out here.
 */
#include "testutil.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../../models/cost.h"
#include "../../models/hw.h"
#include "../../runtime/layer.h"
#include "../../runtime/layout.h"

static void test_bf16_rounding(void **state)
{
    (void)state;
    assert_int_equal(rt_bf16_from_double(1.0), 0x3f80);
    assert_int_equal(rt_bf16_from_double(-2.0), 0xc000);
    /* 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1) */
    assert_int_equal(rt_bf16_from_double(1.0 + 1.0 / 256), 0x3f80);
    /* 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even) */
    assert_int_equal(rt_bf16_from_double(1.0 + 3.0 / 256), 0x3f82);
    assert_true(isnan(rt_bf16_to_double(rt_bf16_from_double(NAN))));
    assert_true(isinf(rt_bf16_to_double(rt_bf16_from_double(INFINITY))));
    /* round to nearest (through float, as the GPU's conversions: 2^-24 more at most): relative
     * error at most 2^-8, bf16's unit roundoff (8 significant bits), over a spread of magnitudes
     * (truncation would reach 2^-7), and exact on values bf16 holds */
    unsigned s = 7;
    for (int i = 0; i < 100000; i++) {
        s = s * 1664525u + 1013904223u;
        double v = ((double)(s >> 8) / (1u << 24) - 0.5) * pow(10, (int)(s % 13) - 6);
        double r = rt_bf16_to_double(rt_bf16_from_double(v));
        assert_true(fabs(r - v) <= fabs(v) * (1.0 / 256 + 1.0 / (1 << 24)));
        assert_true(rt_bf16_to_double(rt_bf16_from_double(r)) == r);
    }
    double src[3] = {0.1, -3.5, 1e-3}, back[3];
    uint16_t raw[3];
    rt_to_dtype(raw, src, 3, RT_BF16);
    rt_from_dtype(back, raw, 3, RT_BF16);
    for (int i = 0; i < 3; i++) assert_true(fabs(back[i] - src[i]) <= fabs(src[i]) / 256);
}

/* The doubles of the fp64 activation block, written out: every tensor of layer.c's layer. */
static size_t fp64_acts_by_hand(const rt_layer_shape *s, size_t B, size_t S, size_t Se)
{
    size_t n = B * S, h = s->hidden, hk = (size_t)s->heads * s->kv, f = s->ffn, a = s->heads;
    size_t hkv = (size_t)(s->kv_heads ? s->kv_heads : s->heads) * s->kv, st = s->rmsnorm ? 1 : 2;
    size_t t = n * h * 6                   /* x, h1, x2, h2, d_o, d_y */
               + n * 2 * st                /* mean1 (not with RMSNorm), rstd1, mean2, rstd2 */
               + n * (hk + 2 * hkv) * 2    /* qkv, d_qkv */
               + B * a * S * S             /* probabilities */
               + n * hk                    /* ctx */
               + n * f * (s->glu ? 5 : 3); /* u, d_u (twice as wide with SwiGLU), g */
    if (s->cross)
        t += n * h * 3 + n * st + n * hk * 3 + B * Se * 2 * hkv * 2 + B * a * S * Se;
    return t;
}

static void test_fp64_layout_is_the_cpu_layers(void **state)
{
    (void)state;
    /* GPT, T5 encoder, T5 decoder, LLaMA-style; grouped-query (4 query heads on 2 key/value
     * heads, 8 on 1) with SwiGLU and with cross-attention */
    const rt_layer_shape shapes[] = {
        {64, 4, 16, 256, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {48, 3, 8, 100, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {64, 4, 16, 256, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, {64, 4, 16, 256, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0},
        {64, 4, 16, 256, 1, 0, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0}, {64, 8, 8, 256, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0},
        /* LLaMA's (RMSNorm, no biases, rotary), and a decoder with RMSNorm */
        {64, 4, 16, 256, 1, 0, 1, 2, 1, 1, 1, 0, 0, 0, 0, 0}, {64, 4, 16, 256, 1, 1, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0}};
    for (int k = 0; k < 8; k++)
        for (int B = 1; B <= 3; B++)
            for (int S = 8; S <= 40; S += 16) {
                int Se = S + 8;
                rt_acts_layout l;
                rt_layer_acts_layout(&shapes[k], B, S, Se, RT_FP64, &l);
                assert_int_equal(l.total, 8 * fp64_acts_by_hand(&shapes[k], B, S, Se));
                for (int i = 0; i + 1 < l.count; i++) /* packed, in order */
                    assert_int_equal(l.off[i] + l.bytes[i], l.off[i + 1]);
            }
}

static void test_bf16_layout(void **state)
{
    (void)state;
    rt_layer_shape s = {96, 6, 16, 384, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    int B = 3, S = 40, Se = 56;
    rt_acts_layout l, d;
    rt_layer_acts_layout(&s, B, S, Se, RT_BF16, &l);
    rt_layer_acts_layout(&s, B, S, Se, RT_FP64, &d);
    assert_int_equal(l.count, RT_A_COUNT);
    for (int i = 0; i < l.count; i++) {
        assert_int_equal(l.off[i] % RT_ALIGN, 0);
        if (i + 1 < l.count) assert_true(l.off[i] + l.bytes[i] <= l.off[i + 1]);
        size_t n = (size_t)B * S;
        if (i == RT_A_P || i == RT_A_PC) { /* a log-sum-exp per query and head: no S^2 */
            assert_int_equal(l.elems[i], (size_t)B * s.heads * S);
            assert_int_equal(l.bytes[i], l.elems[i] * 4);
        } else if (i == RT_A_MEAN1 || i == RT_A_RSTD1 || i == RT_A_MEAN2 || i == RT_A_RSTD2 ||
                   i == RT_A_MEANC || i == RT_A_RSTDC) {
            assert_int_equal(l.elems[i], n);
            assert_int_equal(l.bytes[i], n * 4);
        } else { /* the same tensor as fp64's, a quarter of the bytes */
            assert_int_equal(l.elems[i], d.elems[i]);
            assert_int_equal(l.bytes[i] * 4, d.bytes[i]);
        }
    }
    assert_true(l.total >= l.off[l.count - 1] + l.bytes[l.count - 1] && l.total % RT_ALIGN == 0);
    assert_int_equal(rt_layer_acts_bytes(&s, B, S, Se, RT_BF16), l.total);
    /* without cross-attention the decoder's tensors are absent */
    s.cross = 0;
    rt_layer_acts_layout(&s, B, S, Se, RT_BF16, &l);
    assert_int_equal(l.count, RT_A_XC);
    assert_int_equal(l.bytes[RT_A_KVC], 0);
}

static void test_param_blocks(void **state)
{
    (void)state;
    size_t count = 1001; /* not a multiple of anything */
    assert_int_equal(rt_param_block_bytes(count, RT_FP64), count * 8);
    assert_int_equal(rt_grad_block_bytes(count, RT_FP64), count * 8);
    assert_int_equal(rt_grad_block_bytes(count, RT_BF16), count * 4);
    size_t copy = rt_param_copy_offset(count, RT_BF16);
    assert_true(copy >= count * 4 && copy % RT_ALIGN == 0 && copy < count * 4 + RT_ALIGN);
    assert_int_equal(rt_param_block_bytes(count, RT_BF16), copy + count * 2);
    double *src = malloc(count * sizeof *src);
    char *blk = malloc(rt_param_block_bytes(count, RT_BF16));
    for (size_t i = 0; i < count; i++) src[i] = sin((double)i) * 0.02;
    rt_param_block_pack(blk, src, count, RT_BF16);
    const float *master = (const float *)blk;
    const uint16_t *b16 = (const uint16_t *)(blk + copy);
    for (size_t i = 0; i < count; i++) {
        assert_true(master[i] == (float)src[i]);
        assert_int_equal(b16[i], rt_bf16_from_double(master[i]));
    }
    free(src), free(blk);
    /* parameter offsets: the layer's tensors, packed */
    rt_layer_shape sh = {64, 4, 16, 256, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    size_t off[RT_P_COUNT], len[RT_P_COUNT], total;
    assert_int_equal(rt_layer_params_layout(&sh, off, len, &total), RT_P_COUNT);
    size_t h = 64, hk = 64, f = 256;
    assert_int_equal(total, 4 * h + 3 * hk * h + 3 * hk + hk * h + h + 2 * h * f + f + h + /* self, MLP */
                                2 * h + h * hk + hk + h * 2 * hk + 2 * hk + hk * h + h); /* cross */
    for (int i = 0; i + 1 < RT_P_COUNT; i++) assert_int_equal(off[i] + len[i], off[i + 1]);
    sh.glu = 1, sh.cross = 0; /* SwiGLU: W1 and b1 twice as wide */
    assert_int_equal(rt_layer_params_layout(&sh, off, len, &total), RT_P_LNC_G);
    assert_int_equal(len[RT_P_W1], 2 * h * f);
    assert_int_equal(len[RT_P_B1], 2 * f);
    assert_int_equal(len[RT_P_W2], f * h);
    sh.glu = 0, sh.cross = 1, sh.kv_heads = 2; /* grouped-query: K and V over 2 heads of 16 */
    assert_int_equal(rt_layer_params_layout(&sh, off, len, &total), RT_P_COUNT);
    assert_int_equal(len[RT_P_WQKV], h * (hk + 2 * 32));
    assert_int_equal(len[RT_P_BQKV], hk + 2 * 32);
    assert_int_equal(len[RT_P_WKVC], h * 2 * 32);
    assert_int_equal(len[RT_P_WQC], h * hk);
    sh.rmsnorm = 1, sh.no_bias = 1; /* LLaMA's: the norms' and projections' biases are absent */
    rt_layer_params_layout(&sh, off, len, &total);
    for (int i = 0; i < RT_P_COUNT; i++) /* (a dense layer has no router) */
        assert_int_equal(len[i] == 0, rt_param_is_bias(i) || rt_param_is_norm_bias(i) || i == RT_P_WR);
    assert_int_equal(len[RT_P_LN1_G], h);
    /* a MoE layer of 8 experts over ep 4: the router whole, 2 experts' W1 and W2 stacked, no MLP
     * biases; a tp rank's share keeps the experts' width (each runs whole on its rank) */
    sh.cross = 0, sh.no_bias = 0, sh.experts = 8, sh.topk = 2;
    rt_layer_shape mine = rt_layer_shape_tp(&sh, 4, 4);
    assert_int_equal(rt_layer_params_layout(&mine, off, len, &total), RT_P_LNC_G);
    assert_int_equal(len[RT_P_WR], h * 8);
    assert_int_equal(len[RT_P_W1], 2 * h * 2 * f);
    assert_int_equal(len[RT_P_W2], 2 * f * h);
    assert_int_equal(len[RT_P_B1] + len[RT_P_B2], 0);
    assert_int_equal(rt_param_split(&mine, RT_P_W1), RT_TP_EXPERTS);
    assert_int_equal(rt_param_split(&mine, RT_P_WR), RT_TP_WHOLE);
    assert_int_equal(rt_param_grad_group(&mine, RT_P_WR, 4, 0), RT_GRAD_SUM_TP);
    assert_int_equal(rt_param_grad_group(&mine, RT_P_W2, 4, 0), RT_GRAD_OWN); /* ep = tp */
    assert_int_equal(rt_param_grad_group(&mine, RT_P_W2, 8, 0), RT_GRAD_SUM_EXPERTS);
    assert_int_equal(rt_param_grad_group(&mine, RT_P_LN2_G, 4, 0), RT_GRAD_OWN);
    assert_int_equal(rt_param_grad_group(&mine, RT_P_LN2_G, 4, 1), RT_GRAD_SUM_TP);
    rt_dtype dt;
    assert_int_equal(rt_dtype_parse("bf16", &dt), 0);
    assert_int_equal(dt, RT_BF16);
    assert_int_equal(rt_dtype_parse("fp16", &dt), -1);
    assert_string_equal(rt_dtype_name(RT_FP64), "fp64");
}

/* The bf16 layer saves about what the planner's memory model charges a layer with FlashAttention
 * (Korthikanti's 34 s b h bytes at ffn 4h, without the score terms): within 10% for GPT-6.7B and
 * for LLaMA-2-7B (SwiGLU: three MLP matrices), and nothing like the 5 a s^2 b bytes of stored
 * scores. */
/* Llama-3-8B's shape (grouped-query: 8 key/value heads of 32), from llama2-7b's preset. */
static model_spec llama3_8b(void)
{
    model_spec m = *model_preset("llama2-7b");
    snprintf(m.name, sizeof m.name, "llama3-8b");
    m.ffn = 14336, m.vocab = 128256, m.kv_heads = 8;
    return m;
}

static void stored_bytes_case(const model_spec *m)
{
    cluster_spec hw;
    dp_err err = {0};
    analytic_params ap;
    analytic_params_default(&ap);
    cost_model *cm = NULL;
    assert_int_equal(cluster_resolve("a100-40gb", &hw, &err), DP_OK);
    assert_int_equal(cost_analytic_new(m, &hw, 1, RECOMPUTE_NONE, &ap, &cm, &err), DP_OK);
    cm->flash_attn = 1;
    rt_layer_shape s = rt_layer_shape_of(m, RT_LAYER_GPT);
    static const int shapes[][2] = {{1, 2048}, {4, 1024}, {2, 4096}};
    for (int i = 0; i < 3; i++) {
        int B = shapes[i][0], S = shapes[i][1];
        cost_shape cs = cost_shape_rows(B, S, 0);
        cost_layer c;
        assert_int_equal(cost_query(cm, COMP_ENCODER, &cs, &c, &err), DP_OK);
        rt_acts_layout l;
        rt_layer_acts_layout(&s, B, S, 0, RT_BF16, &l);
        double mine = (double)rt_acts_forward_bytes(&l) / 1e6, model = c.stored_act_mb;
        if (!(fabs(mine - model) < 0.10 * model))
            fail_msg("%s at %d x %d: the bf16 layer stores %.1f MB, the memory model %.1f MB",
                     m->name, B, S, mine, model);
    }
    cost_model_free(cm);
}

static void test_bf16_stored_bytes_match_the_memory_model(void **state)
{
    (void)state;
    stored_bytes_case(model_preset("gpt-6.7b-16l"));
    stored_bytes_case(model_preset("llama2-7b"));
    model_spec l3 = llama3_8b();
    stored_bytes_case(&l3);
}

/* The runtime's layer has the parameters the planner counts (models/model.c's
 * model_layer_params, which its memory model and its weights' all-reduce charge): every preset's
 * encoder (GPT) and decoder layers, and a grouped-query model. */
static void test_params_are_the_models(void **state)
{
    (void)state;
    model_spec l3 = llama3_8b();
    int presets = 0;
    const model_spec *table = model_presets(&presets), *ms[64];
    assert_true(presets >= 10 && presets < 64);
    int n = 0;
    for (; n < presets; n++) ms[n] = &table[n];
    ms[n++] = &l3;
    for (int i = 0; i < n; i++) {
        size_t off[RT_P_COUNT], len[RT_P_COUNT], count;
        rt_layer_shape s = rt_layer_shape_of(ms[i], RT_LAYER_GPT);
        rt_layer_params_layout(&s, off, len, &count);
        if ((int64_t)count != model_layer_params(ms[i], 0))
            fail_msg("%s: the runtime's layer has %zu parameters, the planner counts %lld",
                     ms[i]->name, count, (long long)model_layer_params(ms[i], 0));
        if (ms[i]->arch != ARCH_T5) continue;
        s = rt_layer_shape_of(ms[i], RT_LAYER_DECODER);
        rt_layer_params_layout(&s, off, len, &count);
        assert_int_equal(count, model_layer_params(ms[i], 1));
    }
}

/* Tensor parallelism (layout.h rt_layer_params_shard): with every element of a whole layer set to
 * its own index, each rank's share says where each of its values came from. Checked against the
 * head and column arithmetic written out here: the fused projection's columns are rank r's query
 * heads, then its key heads, then its value heads; SwiGLU's gate and up columns; Wo's and W2's
 * rows; the norms whole. The ranks' shares of a split parameter cover it exactly once, and a
 * query head reads, on its rank, the key/value head it reads in the whole layer. */
/* Under context parallelism (shape.cp = c) a rank's tensors are its B*S/c tokens', its saved
 * probabilities its queries' against the whole sequence, and RT_A_KVG the gathered keys and
 * values of all B*S tokens; without it RT_A_KVG is empty: the cp 1 layout is the one before. */
static void test_cp_layout(void **state)
{
    (void)state;
    rt_layer_shape s = {.hidden = 32, .heads = 4, .kv = 8, .ffn = 64, .causal = 1, .kv_heads = 2};
    int B = 2, S = 48;
    for (int c = 1; c <= 4; c++) {
        rt_layer_shape sc = s;
        sc.cp = c;
        rt_acts_layout l, whole;
        rt_layer_acts_layout(&sc, B, S, 0, RT_FP64, &l);
        rt_layer_acts_layout(&s, B, S, 0, RT_FP64, &whole);
        size_t n = (size_t)B * S / c, hkv = 2 * 8;
        assert_int_equal(l.elems[RT_A_X], n * 32);
        assert_int_equal(l.elems[RT_A_QKV], n * (32 + 2 * hkv));
        assert_int_equal(l.elems[RT_A_P], n * 4 * S);
        assert_int_equal(l.elems[RT_A_KVG], c > 1 ? (size_t)B * S * 2 * hkv : 0);
        if (c == 1) assert_memory_equal(&l, &whole, sizeof l);
    }
}

static void test_tp_shards(void **state)
{
    (void)state;
    rt_layer_shape shapes[] = {
        {.hidden = 16, .heads = 4, .kv = 4, .ffn = 24, .causal = 1}, /* GPT: biases, layer norm */
        {.hidden = 16, .heads = 8, .kv = 2, .ffn = 12, .causal = 1, .glu = 1, .kv_heads = 4,
         .rmsnorm = 1, .no_bias = 1, .rope_base = 10000}, /* LLaMA-3's kind: GQA, SwiGLU */
    };
    for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
        for (int t = 1; t <= 4; t *= 2) {
            const rt_layer_shape *s = &shapes[k];
            rt_layer_shape l = rt_layer_shape_tp(s, t, 1);
            size_t off[RT_P_COUNT], len[RT_P_COUNT], loff[RT_P_COUNT], llen[RT_P_COUNT], n, nl;
            int np = rt_layer_params_layout(s, off, len, &n);
            rt_layer_params_layout(&l, loff, llen, &nl);
            double *whole = malloc(n * sizeof *whole), *mine = malloc(nl * sizeof *mine);
            int *seen = calloc(n, sizeof *seen);
            assert_non_null(whole), assert_non_null(mine), assert_non_null(seen);
            for (size_t i = 0; i < n; i++) whole[i] = (double)i;
            int a = s->heads, g = rt_layer_kv_heads(s), d = s->kv, al = a / t, gl = g / t;
            int hk = a * d, hkv = g * d, qkv = hk + 2 * hkv, f = s->ffn, fl = f / t;
            for (int r = 0; r < t; r++) {
                rt_layer_params_shard(s, whole, t, 1, r, mine);
                for (int id = 0; id < np; id++)
                    for (size_t e = 0; e < llen[id]; e++) {
                        size_t v = (size_t)mine[loff[id] + e], want;
                        int split = rt_param_tp_split(id);
                        if (split == RT_TP_WHOLE) {
                            want = off[id] + e;
                        } else if (id == RT_P_WQKV || id == RT_P_BQKV) {
                            int lw = rt_layer_qkv_width(&l), row = (int)(e / lw), j = (int)(e % lw);
                            int col = j < al * d ? (r * al + j / d) * d + j % d
                                    : j < al * d + gl * d ? hk + (r * gl + (j - al * d) / d) * d + j % d
                                    : hk + hkv + (r * gl + (j - al * d - gl * d) / d) * d + j % d;
                            want = off[id] + (size_t)row * qkv + col;
                        } else if (id == RT_P_W1 || id == RT_P_B1) {
                            int lw = rt_layer_ffn_in(&l), row = (int)(e / lw), j = (int)(e % lw);
                            int col = j < fl ? r * fl + j : f + r * fl + (j - fl);
                            want = off[id] + (size_t)row * rt_layer_ffn_in(s) + col;
                        } else { /* Wo, W2: rank r's input rows */
                            want = off[id] + (size_t)r * llen[id] + e;
                        }
                        assert_true(v == want);
                        if (split != RT_TP_WHOLE) seen[v]++;
                    }
                for (int h = 0; h < al; h++) /* GQA: the same key/value head, here and whole */
                    assert_int_equal(r * gl + rt_kv_head(h, al, gl), rt_kv_head(r * al + h, a, g));
            }
            for (int id = 0; id < np; id++)
                for (size_t e = 0; rt_param_tp_split(id) != RT_TP_WHOLE && e < len[id]; e++)
                    assert_int_equal(seen[off[id] + e], 1);
            free(whole), free(mine), free(seen);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_fp64_layout_is_the_cpu_layers),
        cmocka_unit_test(test_bf16_layout),
        cmocka_unit_test(test_param_blocks),
        cmocka_unit_test(test_bf16_stored_bytes_match_the_memory_model),
        cmocka_unit_test(test_params_are_the_models),
        cmocka_unit_test(test_tp_shards),
        cmocka_unit_test(test_cp_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
