/* Unit tests for models/: specs, profile interpolation, analytic formulas, memory, comm, fit. */
#include "testutil.h"

#include <cjson/cJSON.h>

#include "../../models/calibrate.h"
#include "../../models/comm.h"
#include "../../models/cost.h"
#include "../../models/hw.h"
#include "../../models/memory.h"
#include "../../models/placement.h"
#include "../../models/model.h"

#define GPT_PROFILE "models/profiles/a100_gpt_6.7b_profile.csv"
#define T5_PROFILE "models/profiles/a100_t5_11b_profile.csv"

static cluster_spec p4d(void)
{
    cluster_spec c;
    assert_int_equal(cluster_preset("p4d", &c), 0);
    return c;
}

static cost_model *load_profile(const char *path, const char *model, int tp, recompute_mode rc)
{
    cluster_spec hw = p4d();
    dp_err err = {0};
    cost_model *cm = NULL;
    const model_spec *m = model_preset(model);
    assert_non_null(m);
    /* the shipped profiles were measured without sequence parallelism (their "sp" column) */
    if (cost_profile_load_at(path, m, &hw, tp, 1, 0, rc, &cm, &err) != DP_OK)
        fail_msg("%s", err.msg);
    return cm;
}

static void test_profile_exact_on_grid_points(void **state)
{
    (void)state;
    cost_model *cm = load_profile(GPT_PROFILE, "gpt-6.7b-16l", 1, RECOMPUTE_NONE);
    cost_layer l;
    cost_shape s = cost_shape_rows(1, 2048, 0);
    assert_int_equal(cost_query(cm, COMP_ENCODER, &s, &l, NULL), DP_OK);
    assert_near(l.fwd_ms, 5.78, 1e-12);
    assert_near(l.bwd_ms, 9.65, 1e-12);
    assert_near(l.stored_act_mb, 966.55, 0.1); /* README: 966.6 MB per layer */
    cost_shape big = cost_shape_rows(1, 8192, 0);              /* next to unmeasured cells, still exact */
    assert_int_equal(cost_query(cm, COMP_ENCODER, &big, &l, NULL), DP_OK);
    assert_near(l.fwd_ms, 44.23, 1e-12);
    cost_model_free(cm);
    /* T5 decoder entries need (mbs, enc, dec); repeated encoder keys combine by median. */
    cm = load_profile(T5_PROFILE, "t5-11b-24l", 8, RECOMPUTE_NONE);
    cost_shape t5 = cost_shape_rows(4, 512, 128);
    dp_err err = {0};
    if (cost_query(cm, COMP_ENCODER, &t5, &l, &err) != DP_OK) fail_msg("%s", err.msg);
    assert_true(l.fwd_ms > 1.7 && l.fwd_ms < 2.2);
    assert_int_equal(cost_query(cm, COMP_DECODER, &t5, &l, NULL), DP_OK);
    assert_true(l.fwd_ms > 0);
    cost_model_free(cm);
}

static void test_profile_infeasible_with_reason(void **state)
{
    (void)state;
    cost_model *cm = load_profile(GPT_PROFILE, "gpt-6.7b-16l", 1, RECOMPUTE_NONE);
    cost_layer l;
    dp_err err = {0};
    cost_shape hole = cost_shape_rows(16, 4096, 0); /* out of memory when measured */
    assert_int_equal(cost_query(cm, COMP_ENCODER, &hole, &l, &err), DP_ERR_INFEASIBLE);
    assert_msg_has(err.msg, "lies in a cell the profile lacks");
    cost_shape outside = cost_shape_rows(1, 9000, 0);
    assert_int_equal(cost_query(cm, COMP_ENCODER, &outside, &l, &err), DP_ERR_INFEASIBLE);
    assert_msg_has(err.msg, "enc_seqlen 9000 is outside the measured region [16, 8192]");
    cost_shape tiny = cost_shape_rows(1, 8, 0);
    assert_int_equal(cost_query(cm, COMP_ENCODER, &tiny, &l, &err), DP_ERR_INFEASIBLE);
    assert_int_equal(cost_query(cm, COMP_DECODER, &tiny, &l, NULL), DP_ERR_INFEASIBLE);
    cost_model_free(cm);
}

/* value = 1 + 2*mbs + 0.5*seq + 0.01*mbs*seq is reproduced exactly by multilinear interpolation. */
static double synth(double mbs, double enc, double dec)
{
    return 1 + 2 * mbs + 0.5 * enc + 0.01 * mbs * enc + 0.25 * dec + 0.001 * enc * dec;
}

static const char *synthetic_profile(void)
{
    static char buf[1 << 16];
    size_t n = (size_t)snprintf(buf, sizeof buf, "tp,recompute,component,metric,mbs,enc_seqlen,"
                                                 "dec_seqlen,value\n");
    static const int mbs[] = {1, 2, 4}, lens[] = {16, 32, 64};
    static const char *const metrics[] = {"fwd_ms", "bwd_ms", "stored_act_mb", "peak_act_mb"};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) {
                double v = synth(mbs[i], lens[j], 0) * (k + 1);
                n += (size_t)snprintf(buf + n, sizeof buf - n, "1,none,encoder,%s,%d,%d,0,%.10g\n",
                                      metrics[k], mbs[i], lens[j], v);
                for (int d = 0; d < 3; d++)
                    n += (size_t)snprintf(buf + n, sizeof buf - n,
                                          "1,none,decoder,%s,%d,%d,%d,%.10g\n", metrics[k], mbs[i],
                                          lens[j], lens[d], synth(mbs[i], lens[j], lens[d]) * (k + 1));
            }
    /* a repeated key: median of 7, 100, 3 is 7 */
    n += (size_t)snprintf(buf + n, sizeof buf - n,
                          "1,none,postprocess,fwd_ms,1,0,16,7\n1,none,postprocess,fwd_ms,1,0,16,100\n"
                          "1,none,postprocess,fwd_ms,1,0,16,3\n1,none,postprocess,bwd_ms,1,0,16,1\n");
    return tmp_file(".csv", buf);
}

/* A profile's rows at a cp (the optional cp column, dprun profile --cp): the loader takes the
 * cp asked for and no other, a file without the column is cp 1, and the model then prices that cp
 * as measured: cost_model_set_cp accepts it, refuses another and the all-to-all form. */
static void test_profile_cp_rows(void **state)
{
    (void)state;
    cluster_spec hw = p4d();
    const model_spec *m = model_preset("gpt-tiny");
    static char buf[1 << 14];
    size_t n = (size_t)snprintf(buf, sizeof buf, "cp,tp,recompute,component,metric,mbs,enc_seqlen,"
                                                 "dec_seqlen,value\n");
    for (int cp = 1; cp <= 2; cp++)
        for (int mbs = 1; mbs <= 2; mbs++)
            for (int s = 32; s <= 64; s *= 2)
                for (int k = 0; k < 2; k++)
                    n += (size_t)snprintf(buf + n, sizeof buf - n, "%d,1,none,%s,%s_ms,%d,%d,0,%d\n",
                                          cp, k ? "postprocess" : "encoder", "fwd", mbs, s,
                                          cp * 100 + mbs * s + k),
                    n += (size_t)snprintf(buf + n, sizeof buf - n, "%d,1,none,%s,bwd_ms,%d,%d,0,1\n",
                                          cp, k ? "postprocess" : "encoder", mbs, s);
    const char *path = tmp_file(".csv", buf);
    cost_model *cm = NULL;
    dp_err err = {0};
    cost_layer l;
    cost_shape sh = cost_shape_rows(2, 64, 0);
    for (int cp = 1; cp <= 2; cp++) {
        assert_int_equal(cost_profile_load_at(path, m, &hw, 1, cp, 1, RECOMPUTE_NONE, &cm, &err), DP_OK);
        assert_int_equal(cost_query(cm, COMP_ENCODER, &sh, &l, &err), DP_OK);
        assert_near(l.fwd_ms, cp * 100 + 128, 1e-9);
        assert_int_equal(cost_model_set_cp(cm, cp, 0, &err), DP_OK);
        assert_int_equal(cost_model_set_cp(cm, 4, 0, &err), DP_ERR_INVALID);
        assert_non_null(strstr(err.msg, "a profile measured at cp 4"));
        if (cp > 1) assert_int_equal(cost_model_set_cp(cm, cp, 1, &err), DP_ERR_INVALID);
        cost_model_free(cm);
    }
    assert_int_equal(cost_profile_load_at(path, m, &hw, 1, 4, 1, RECOMPUTE_NONE, &cm, &err), DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "no rows for tp 1, cp 4"));
    /* without the column every row is cp 1 */
    const char *plain = tmp_file(".csv", "tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value\n"
                                         "1,none,encoder,fwd_ms,1,32,0,5\n1,none,encoder,bwd_ms,1,32,0,5\n"
                                         "1,none,postprocess,fwd_ms,1,32,0,1\n"
                                         "1,none,postprocess,bwd_ms,1,32,0,1\n");
    assert_int_equal(cost_profile_load_at(plain, m, &hw, 1, 2, 1, RECOMPUTE_NONE, &cm, &err), DP_ERR_INVALID);
    assert_int_equal(cost_profile_load_at(plain, m, &hw, 1, 1, 1, RECOMPUTE_NONE, &cm, &err), DP_OK);
    cost_model_free(cm);
    /* sequence parallelism as measured (COST_SP_AS_MEASURED): the tp 2 rows' own, SP where the
     * file has both (its rows then: fwd 7, not the SP-off 9); asked for, only the file's rows of
     * that kind; a file without the column was measured with it */
    const char *sp = tmp_file(".csv", "tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value,sp\n"
                                      "2,none,encoder,fwd_ms,1,32,0,9,0\n2,none,encoder,bwd_ms,1,32,0,9,0\n"
                                      "2,none,postprocess,fwd_ms,1,32,0,1,0\n"
                                      "2,none,postprocess,bwd_ms,1,32,0,1,0\n");
    cost_shape one = cost_shape_rows(1, 32, 0);
    for (int asked = -1; asked <= 1; asked++) {
        dp_status got = cost_profile_load_at(sp, m, &hw, 2, 1, asked, RECOMPUTE_NONE, &cm, &err);
        assert_int_equal(got, asked == 1 ? DP_ERR_INVALID : DP_OK);
        if (got != DP_OK) continue;
        assert_int_equal(cm->seq_parallel, 0);
        cost_model_free(cm);
    }
    const char *both = tmp_file(".csv", "tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value,sp\n"
                                        "2,none,encoder,fwd_ms,1,32,0,9,0\n2,none,encoder,bwd_ms,1,32,0,9,0\n"
                                        "2,none,encoder,fwd_ms,1,32,0,7,1\n2,none,encoder,bwd_ms,1,32,0,7,1\n"
                                        "2,none,postprocess,fwd_ms,1,32,0,1,\n"
                                        "2,none,postprocess,bwd_ms,1,32,0,1,\n");
    assert_int_equal(cost_profile_load_at(both, m, &hw, 2, 1, COST_SP_AS_MEASURED, RECOMPUTE_NONE,
                                          &cm, &err), DP_OK);
    assert_int_equal(cm->seq_parallel, 1);
    assert_int_equal(cost_query(cm, COMP_ENCODER, &one, &l, &err), DP_OK);
    assert_near(l.fwd_ms, 7, 1e-9);
    cost_model_free(cm);
}

static void test_profile_exact_linear_interpolation(void **state)
{
    (void)state;
    cluster_spec hw = p4d();
    model_spec m = *model_preset("t5-tiny");
    cost_model *cm = NULL;
    dp_err err = {0};
    if (cost_profile_load(synthetic_profile(), &m, &hw, 1, RECOMPUTE_NONE, &cm, &err) != DP_OK)
        fail_msg("%s", err.msg);
    cost_layer l;
    static const int qm[] = {1, 2, 3, 4}, ql[] = {16, 20, 33, 48, 64};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) {
            cost_shape s = cost_shape_rows(qm[i], ql[j], ql[4 - j]);
            if (cost_query(cm, COMP_ENCODER, &s, &l, &err) != DP_OK) fail_msg("%s", err.msg);
            assert_near(l.fwd_ms, synth(qm[i], ql[j], 0), 1e-9);
            assert_near(l.peak_act_mb, 4 * synth(qm[i], ql[j], 0), 1e-9);
            assert_int_equal(cost_query(cm, COMP_DECODER, &s, &l, NULL), DP_OK);
            assert_near(l.bwd_ms, 2 * synth(qm[i], ql[j], ql[4 - j]), 1e-9);
        }
    cost_shape p = cost_shape_rows(1, 16, 16);
    assert_int_equal(cost_query(cm, COMP_POSTPROCESS, &p, &l, NULL), DP_OK);
    assert_near(l.fwd_ms, 7, 1e-12);
    cost_model_free(cm);
}

static void test_profile_monotone_where_data_is(void **state)
{
    (void)state;
    cost_model *cm = load_profile(GPT_PROFILE, "gpt-6.7b-16l", 1, RECOMPUTE_NONE);
    cost_layer l;
    /* Along mbs at lengths >= 512 and along length at mbs >= 4, the grid grows: so must the
     * interpolation between grid points. (At tiny shapes the data is flat and noisy.) */
    for (int seq = 512; seq <= 2048; seq += 256) {
        double prev = 0;
        for (int mbs = 1; mbs <= 8; mbs++) {
            cost_shape s = cost_shape_rows(mbs, seq, 0);
            if (cost_query(cm, COMP_ENCODER, &s, &l, NULL) != DP_OK) break;
            assert_true(l.fwd_ms >= prev && l.bwd_ms > 0);
            prev = l.fwd_ms;
        }
    }
    for (int mbs = 4; mbs <= 16; mbs += 4) {
        double prev = 0;
        for (int seq = 256; seq <= 1024; seq += 24) {
            cost_shape s = cost_shape_rows(mbs, seq, 0);
            if (cost_query(cm, COMP_ENCODER, &s, &l, NULL) != DP_OK) break;
            assert_true(l.fwd_ms >= prev);
            assert_true(l.stored_act_mb > 0);
            prev = l.fwd_ms;
        }
    }
    cost_model_free(cm);
}

static void expect_profile_error(const char *text, const char *want)
{
    cluster_spec hw = p4d();
    cost_model *cm = NULL;
    dp_err err = {0};
    const char *path = tmp_file(".csv", text);
    if (cost_profile_load(path, model_preset("gpt-tiny"), &hw, 1, RECOMPUTE_NONE, &cm, &err) ==
        DP_OK)
        fail_msg("accepted a bad profile, wanted \"%s\"", want);
    assert_msg_has(err.msg, want);
    assert_msg_has(err.msg, "/tmp/dpsim-test-");
}

static void test_profile_bad_files(void **state)
{
    (void)state;
    const char *h = "tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value\n";
    char buf[512];
    expect_profile_error("", "file is empty");
    expect_profile_error(h, ":1: the header has no data rows");
    expect_profile_error("tp,recompute,component,metric,mbs,enc_seqlen,value\n1,none,encoder,fwd_ms,1,16,2\n",
                         ":1: missing column \"dec_seqlen\"");
    expect_profile_error("tp,tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value\n",
                         ":1: column \"tp\" appears twice");
    snprintf(buf, sizeof buf, "%s1,none,encoder,fwd_ms,1,16,0,abc\n", h);
    expect_profile_error(buf, ":2: value \"abc\" is not a finite number");
    snprintf(buf, sizeof buf, "%s1,none,encoder,fwd_ms,1,16,0,1\n1,none,encoder,fwd_ms,1,16,0,-2\n", h);
    expect_profile_error(buf, ":3: value \"-2\" is negative");
    snprintf(buf, sizeof buf, "%s1,none,encoder,fwd_ms,0,16,0,1\n", h);
    expect_profile_error(buf, ":2: mbs \"0\"");
    snprintf(buf, sizeof buf, "%s1,none,lmhead,fwd_ms,1,16,0,1\n", h);
    expect_profile_error(buf, ":2: component \"lmhead\"");
    snprintf(buf, sizeof buf, "%s1,some,encoder,fwd_ms,1,16,0,1\n", h);
    expect_profile_error(buf, ":2: recompute \"some\"");
    snprintf(buf, sizeof buf, "%s2,none,encoder,fwd_ms,1,16,0,1\n", h);
    expect_profile_error(buf, "no rows for tp 1 and recompute none");
    snprintf(buf, sizeof buf, "%s1,none,encoder,fwd_ms,1,16,0,nan\n", h);
    expect_profile_error(buf, "is not a finite number");
}

static void test_profile_refuses_other_width(void **state)
{
    (void)state;
    cluster_spec hw = p4d();
    cost_model *cm = NULL;
    dp_err err = {0};
    assert_int_equal(cost_profile_load(GPT_PROFILE, model_preset("gpt-13b-40l"), &hw, 1,
                                       RECOMPUTE_NONE, &cm, &err),
                     DP_ERR_INVALID);
    assert_msg_has(err.msg, "measured on another model width");
    assert_int_equal(cost_profile_load(GPT_PROFILE, model_preset("t5-11b-24l"), &hw, 1,
                                       RECOMPUTE_NONE, &cm, &err),
                     DP_ERR_INVALID);
    assert_msg_has(err.msg, "not a profile for a t5 model");
}

static void test_param_counts(void **state)
{
    (void)state;
    assert_int_equal(model_total_params(model_preset("gpt2-124m")), 124439808);
    /* Llama 3.1 405B by hand: 126 layers of 2 x 16384^2 (Q, O) + 2 x 16384 x 1024 (K, V) +
     * 3 x 16384 x 53248 (MLP) + 2 x 16384 (norms), two 128256 x 16384 tables, the final norm */
    assert_true(model_total_params(model_preset("llama3.1-405b")) ==
                126LL * (2LL * 16384 * 16384 + 2LL * 16384 * 1024 + 3LL * 16384 * 53248 + 2 * 16384) +
                    2LL * 128256 * 16384 + 16384);
    assert_true(model_total_params(model_preset("llama3.1-405b")) == 405853388800LL);
    /* T5-11B layers against the measured fp16 parameter sizes (MB = 1e6 bytes). */
    const model_spec *t5 = model_preset("t5-11b-24l");
    assert_rel(2.0 * (double)model_layer_params(t5, 0) / 1e6, 402.9, 0.001);
    assert_rel(2.0 * (double)model_layer_params(t5, 1) / 1e6, 537.22, 0.001);
    const model_spec *gpt = model_preset("gpt-6.7b-16l");
    assert_rel(2.0 * (double)model_layer_params(gpt, 0) / 1e6, 402.77, 0.001);
    /* tiny GPT by hand: h=256, hk=256, f=1024: 3*65536+768 + 65536+256 + 2*262144+1024+256 + 1024 */
    assert_int_equal(model_layer_params(model_preset("gpt-tiny"), 0), 789760);
}

static void test_flops_by_hand(void **state)
{
    (void)state;
    double dense, attn;
    cost_shape s = cost_shape_rows(2, 8, 0);
    analytic_flops(model_preset("gpt-tiny"), COMP_ENCODER, &s, 1, &dense, &attn);
    assert_near(dense, 2.0 * 2 * 8 * (3 * 256 * 256 + 256 * 256 + 2 * 256 * 1024), 0);
    assert_near(attn, 4.0 * 2 * 8 * 8 * 256, 0);
    analytic_flops(model_preset("gpt-tiny"), COMP_ENCODER, &s, 2, &dense, &attn);
    assert_near(dense, 2.0 * 2 * 8 * 786432 / 2, 0);
    cost_shape t = cost_shape_rows(1, 8, 4);
    analytic_flops(model_preset("t5-tiny"), COMP_DECODER, &t, 1, &dense, &attn);
    /* self 2*4*(3*256*256+256*256) + cross q,o 2*4*(2*256*256) + cross k,v 2*8*(2*256*256)
     * + mlp 2*4*2*256*1024 */
    assert_near(dense, 2.0 * 4 * 262144 + 2.0 * 4 * 131072 + 2.0 * 8 * 131072 + 2.0 * 4 * 524288, 0);
    assert_near(attn, 4.0 * 256 * (16 + 32), 0);
    analytic_flops(model_preset("gpt-tiny"), COMP_POSTPROCESS, &s, 1, &dense, &attn);
    assert_near(dense, 2.0 * 2 * 8 * 256 * 1024, 0);
}

static void test_korthikanti_closed_form(void **state)
{
    (void)state;
    /* hk = h and f = 4h: stored = sbh(10 + 24/t + 5as/(ht)); selective sbh(10 + 24/t); full 2sbh */
    const model_spec *m = model_preset("gpt-6.7b-16l");
    double s = 2048, b = 2, h = 4096, a = 32;
    cost_shape sh = cost_shape_rows(2, 2048, 0);
    for (int t = 1; t <= 8; t *= 2) {
        assert_near(analytic_stored_act_bytes(m, COMP_ENCODER, &sh, t, RECOMPUTE_NONE, 0),
                    s * b * h * (10 + 24.0 / t + 5 * a * s / (h * t)), 1e-3);
        assert_near(analytic_stored_act_bytes(m, COMP_ENCODER, &sh, t, RECOMPUTE_SELECTIVE, 0),
                    s * b * h * (10 + 24.0 / t), 1e-3);
        assert_near(analytic_stored_act_bytes(m, COMP_ENCODER, &sh, t, RECOMPUTE_FULL, 0),
                    2 * s * b * h, 1e-3);
        /* with sequence parallelism (Table 2's last rows): sbh(34/t + 5as/(ht)), selective
         * sbh * 34/t, full 2sbh/t */
        assert_near(analytic_stored_act_bytes(m, COMP_ENCODER, &sh, t, RECOMPUTE_NONE, 1),
                    s * b * h * (34.0 / t + 5 * a * s / (h * t)), 1e-3);
        assert_near(analytic_stored_act_bytes(m, COMP_ENCODER, &sh, t, RECOMPUTE_SELECTIVE, 1),
                    s * b * h * 34.0 / t, 1e-3);
        assert_near(analytic_stored_act_bytes(m, COMP_ENCODER, &sh, t, RECOMPUTE_FULL, 1),
                    2 * s * b * h / t, 1e-3);
        /* the cost model's figure, with FlashAttention off and on (on: no score term) */
        analytic_params p;
        analytic_params_default(&p);
        cluster_spec hw = p4d();
        for (int flash = 0; flash <= 1; flash++) {
            cost_model *cm = NULL;
            assert_int_equal(cost_analytic_new(m, &hw, t, RECOMPUTE_NONE, &p, &cm, NULL), DP_OK);
            assert_int_equal(cm->seq_parallel, 1); /* Megatron's recommendation: the default */
            cost_model_set_attention(cm, flash, NULL);
            cost_layer l;
            assert_int_equal(cost_query(cm, COMP_ENCODER, &sh, &l, NULL), DP_OK);
            double want = s * b * h * (34.0 / t + (flash ? 0 : 5 * a * s / (h * t)));
            assert_near(l.stored_act_mb, want / 1e6, 1e-9); /* t = 1: the same sum, 10 + 24 */
            cost_model_free(cm);
        }
    }
}

static void test_context_parallelism(void **state)
{
    (void)state;
    const model_spec *m = model_preset("llama3.1-8b");
    cluster_spec hw;
    assert_int_equal(cluster_preset("h200-node", &hw), 0);
    analytic_params p;
    analytic_params_for_gpu(&hw.gpu, &p);
    cost_shape sh = cost_shape_rows(1, 32768, 0);
    cost_layer one, base, two;
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int rc = 0; rc < RECOMPUTE_COUNT; rc++) {
            cost_model *cm = NULL;
            assert_int_equal(cost_analytic_new(m, &hw, tp, (recompute_mode)rc, &p, &cm, NULL), DP_OK);
            cost_model_set_attention(cm, 1, NULL);
            assert_int_equal(cost_query(cm, COMP_ENCODER, &sh, &base, NULL), DP_OK);
            /* cp 1 is today's figure exactly */
            assert_int_equal(cost_model_set_cp(cm, 1, 0, NULL), DP_OK);
            assert_int_equal(cost_query(cm, COMP_ENCODER, &sh, &one, NULL), DP_OK);
            assert_memory_equal(&one, &base, sizeof one);
            /* cp 2: a GPU stores half of each sample's activations, peak too; the step is faster
             * but not below half (the ring's exposed part only adds) */
            for (int a2a = 0; a2a <= 1; a2a++) {
                assert_int_equal(cost_model_set_cp(cm, 2, a2a, NULL), DP_OK);
                assert_int_equal(cost_query(cm, COMP_ENCODER, &sh, &two, NULL), DP_OK);
                assert_near(two.stored_act_mb, base.stored_act_mb / 2, 1e-9 * base.stored_act_mb);
                assert_near(two.peak_act_mb, base.peak_act_mb / 2, 1e-9 * base.peak_act_mb);
                assert_true(two.fwd_ms < base.fwd_ms && two.fwd_ms >= base.fwd_ms / 2 - 1e-9);
                assert_true(two.bwd_ms < base.bwd_ms && two.bwd_ms >= base.bwd_ms / 2 - 1e-9);
            }
            cost_model_free(cm);
        }
    /* the ring's bytes per GPU and layer, counted step by step: each of the cp - 1 steps passes
     * one block of 1/cp of the sequence's K and V (fp16, kv heads / tp); the backward passes
     * their gradients too: 2 (cp - 1)/cp of the K/V bytes */
    for (int tp = 1; tp <= 8; tp *= 2)
        for (int cp = 1; cp <= 8; cp++) {
            double kv = 2.0 /* K, V */ * 32768 * 8 /* kv heads */ * 128 * 2 /* bytes */ / tp;
            double fwd = 0;
            for (int step = 1; step < cp; step++) fwd += kv / cp;
            assert_near(analytic_cp_ring_bytes(m, &sh, tp, cp, 0), fwd, 1e-6 * kv);
            assert_near(analytic_cp_ring_bytes(m, &sh, tp, cp, 1), 2.0 * (cp - 1) / cp * kv, 1e-6 * kv);
        }
    /* the ring's merges (Transformer Engine's per-step output corrections and gradient adds),
     * written out: 6 bytes x tokens x 4096 query widths / tp forward, x (4096 + 2 x 1024)
     * backward, none at cp 1; and in the layer's time beside the ring, not hidden: with the floors
     * off, halving the HBM rate moves the ring form's time by the merge bytes more than the
     * all-to-all form's (the same local tokens, no merges) */
    for (int tp = 1; tp <= 2; tp *= 2)
        for (int cp = 1; cp <= 8; cp *= 2) {
            double want = cp > 1 ? 6.0 * 32768 * 4096 / tp : 0;
            assert_near(analytic_cp_merge_bytes(m, &sh, tp, cp, 0), want, 1e-6);
            assert_near(analytic_cp_merge_bytes(m, &sh, tp, cp, 1), want * 6144 / 4096, 1e-6);
            if (cp == 1 || tp * cp > 8) continue; /* all-to-all: 8 kv heads over tp x cp */
            for (int rc = 0; rc < RECOMPUTE_COUNT; rc += 2) { /* none, full */
                double d[2][2]; /* [a2a][fwd, bwd]: the time's change as HBM halves */
                for (int a2a = 0; a2a <= 1; a2a++) {
                    cost_layer l[2];
                    for (int half = 0; half <= 1; half++) {
                        cluster_spec slow = hw;
                        slow.gpu.hbm_gbps = hw.gpu.hbm_gbps / (half ? 2 : 1);
                        analytic_params q = p;
                        q.fwd_floor_ms = q.bwd_floor_ms = 0;
                        cost_model *cm = NULL;
                        assert_int_equal(cost_analytic_new(m, &slow, tp, (recompute_mode)rc, &q, &cm,
                                                           NULL), DP_OK);
                        cost_model_set_attention(cm, 1, NULL);
                        assert_int_equal(cost_model_set_cp(cm, cp, a2a, NULL), DP_OK);
                        assert_int_equal(cost_query(cm, COMP_ENCODER, &sh, &l[half], NULL), DP_OK);
                        cost_model_free(cm);
                    }
                    d[a2a][0] = l[1].fwd_ms - l[0].fwd_ms, d[a2a][1] = l[1].bwd_ms - l[0].bwd_ms;
                }
                double rate = hw.gpu.hbm_gbps * 1e9 * p.mem_eff / 1e3; /* bytes a ms */
                double mf = analytic_cp_merge_bytes(m, &sh, tp, cp, 0) / rate;
                double mb = analytic_cp_merge_bytes(m, &sh, tp, cp, 1) / rate;
                assert_near(d[0][0] - d[1][0], mf, 1e-9 * mf);
                assert_near(d[0][1] - d[1][1], mb + (rc ? mf : 0), 1e-9 * mb);
            }
        }
    /* one figure by hand: tp 1, cp 2, 32,768 tokens, 8 key/value heads of 128: a K/V block is
     * half of 2 x 32768 x 1024 x 2 bytes, 67,108,864 bytes, sent once forward and twice back */
    assert_near(analytic_cp_ring_bytes(m, &sh, 1, 2, 0), 67108864.0, 1e-6);
    assert_near(analytic_cp_ring_bytes(m, &sh, 1, 2, 1), 134217728.0, 1e-6);
    /* on a slow link the ring shows: the forward grows by (cp - 1) x (step - attention step),
     * the step a block over the link; on the node's NVLink it hides behind the attention */
    {
        cluster_spec slow = hw;
        cluster_override_links(&slow, 1, 0); /* 1 Gbit/s, no latency */
        cost_model *fast_cm = NULL, *slow_cm = NULL;
        assert_int_equal(cost_analytic_new(m, &hw, 1, RECOMPUTE_NONE, &p, &fast_cm, NULL), DP_OK);
        assert_int_equal(cost_analytic_new(m, &slow, 1, RECOMPUTE_NONE, &p, &slow_cm, NULL), DP_OK);
        cost_model_set_attention(fast_cm, 1, NULL), cost_model_set_attention(slow_cm, 1, NULL);
        assert_int_equal(cost_model_set_cp(fast_cm, 2, 0, NULL), DP_OK);
        assert_int_equal(cost_model_set_cp(slow_cm, 2, 0, NULL), DP_OK);
        cost_layer f, sl;
        assert_int_equal(cost_query(fast_cm, COMP_ENCODER, &sh, &f, NULL), DP_OK);
        assert_int_equal(cost_query(slow_cm, COMP_ENCODER, &sh, &sl, NULL), DP_OK);
        comm_group g = comm_mesh_group(&slow, &(mesh){2, 1, 1, 1}, MESH_TP);
        double step = comm_coll_ms(&slow, COLL_SEND_RECV, &g, 67108864.0);
        assert_true(step > 100); /* half a second on 1 Gbit/s: far beyond the attention */
        assert_true(sl.fwd_ms - f.fwd_ms > 0.9 * step && sl.fwd_ms - f.fwd_ms < step);
        cost_model_free(fast_cm), cost_model_free(slow_cm);
    }
    /* refused: all-to-all where tp x cp does not divide the 8 key/value heads; a profile; T5 */
    cost_model *cm = NULL;
    dp_err err = {0};
    assert_int_equal(cost_analytic_new(m, &hw, 2, RECOMPUTE_NONE, &p, &cm, NULL), DP_OK);
    assert_int_equal(cost_model_set_cp(cm, 8, 1, &err), DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "8 key/value heads"));
    assert_int_equal(cost_model_set_cp(cm, 8, 0, NULL), DP_OK); /* the ring has no such rule */
    assert_int_equal(cost_model_set_cp(cm, 4, 1, NULL), DP_OK);
    cost_model_free(cm);
    cluster_spec a100 = p4d();
    const model_spec *gpt = model_preset("gpt-6.7b-16l");
    assert_int_equal(cost_profile_load("models/profiles/a100_gpt_6.7b_profile.csv", gpt, &a100, 1,
                                       RECOMPUTE_NONE, &cm, NULL), DP_OK);
    assert_int_equal(cost_model_set_cp(cm, 2, 0, &err), DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "needs the analytic cost model"));
    cost_model_free(cm);
    assert_int_equal(cost_analytic_new(model_preset("t5-11b-24l"), &a100, 1, RECOMPUTE_NONE, &p, &cm,
                                       NULL), DP_OK);
    assert_int_equal(cost_model_set_cp(cm, 2, 0, &err), DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "encoder-decoder"));
    cost_model_free(cm);
}

static void test_json_round_trips(void **state)
{
    (void)state;
    int n;
    const model_spec *ps = model_presets(&n);
    dp_err err = {0};
    for (int i = 0; i < n; i++) {
        model_spec back;
        const char *path = tmp_file(".json", "");
        assert_int_equal(model_write_json(&ps[i], path, &err), DP_OK);
        assert_int_equal(model_read_json(path, &back, &err), DP_OK);
        assert_string_equal(back.name, ps[i].name);
        assert_int_equal(model_total_params(&back), model_total_params(&ps[i]));
        assert_int_equal(back.arch, ps[i].arch);
        assert_int_equal(back.positions, ps[i].positions); /* the context */
        assert_int_equal(back.rope, ps[i].rope);
        assert_true(model_rope_base(&back) == model_rope_base(&ps[i]));
    }
    /* rotary positions have no table: the context does not count as parameters */
    model_spec rope = *model_preset("llama2-7b"), learned = rope;
    learned.rope = 0;
    assert_int_equal(rope.positions, 4096);
    assert_int_equal(model_total_params(&learned) - model_total_params(&rope),
                     (int64_t)4096 * rope.hidden);
    assert_int_equal(model_parse_json("{\"num_layers\": 2, \"hidden_size\": 64, \"num_attn_heads\": 4,"
                                      "\"position_embedding_type\": \"sinusoid\"}", "x.json", &learned,
                                      &err), DP_ERR_PARSE);
    assert_non_null(strstr(err.msg, "position_embedding_type"));
    for (int i = 0; i < cluster_preset_count(); i++) {
        cluster_spec c, back;
        cluster_preset_at(i, &c);
        const char *path = tmp_file(".json", "");
        assert_int_equal(cluster_write_json(&c, path, &err), DP_OK);
        assert_int_equal(cluster_resolve(path, &back, &err), DP_OK);
        assert_near(back.gpu.peak_tflops, c.gpu.peak_tflops, 0);
        assert_near(back.inter_latency_us, c.inter_latency_us, 0);
        assert_near(back.mem_limit_mb, c.mem_limit_mb, 0);
    }
    /* The paper's own model_configs files load as they are. */
    model_spec m;
    assert_int_equal(model_parse_json("{\"encoder_num_layers\": 24, \"decoder_num_layers\": 24,"
                                      "\"hidden_size\": 1024, \"num_attn_heads\": 128,"
                                      "\"kv_channels\": 128, \"ffn_hidden_size\": 65536}",
                                      "t5.json", &m, &err),
                     DP_OK);
    assert_int_equal(m.arch, ARCH_T5);
    assert_int_equal(model_total_params(&m), model_total_params(model_preset("t5-11b-24l")));
}

/* Parses a small Hugging Face config of model type `type` (2 layers, width 256, 4 heads, a context
 * of 32768) with the further fields `more` ("" for none) into *m. */
static dp_status hf_small(const char *type, const char *more, model_spec *m, dp_err *err)
{
    char text[512];
    snprintf(text, sizeof text, "{\"model_type\": \"%s\", \"num_hidden_layers\": 2, "
             "\"hidden_size\": 256, \"num_attention_heads\": 4, \"max_position_embeddings\": "
             "32768%s%s}", type, more[0] ? ", " : "", more);
    return model_parse_hf(text, "config.json", m, err);
}

static void test_hf_import(void **state)
{
    (void)state;
    model_spec m;
    dp_err err = {0};
    assert_int_equal(model_parse_hf("{\"model_type\": \"gpt2\", \"n_layer\": 12, \"n_embd\": 768,"
                                    "\"n_head\": 12, \"n_inner\": null, \"vocab_size\": 50257,"
                                    "\"n_positions\": 1024}",
                                    "config.json", &m, &err),
                     DP_OK);
    assert_int_equal(model_total_params(&m), 124439808);
    /* GPT-J-6B: rotary positions (no table) and an untied LM head, within 0.1% of its
     * 6,053,381,344 (its attention has no biases, its LM head has one; one layer norm a layer) */
    assert_int_equal(model_parse_hf("{\"model_type\": \"gptj\", \"n_layer\": 28, \"n_embd\": 4096,"
                                    "\"n_head\": 16, \"n_inner\": null, \"rotary_dim\": 64,"
                                    "\"vocab_size\": 50400, \"n_positions\": 2048,"
                                    "\"tie_word_embeddings\": false}", "config.json", &m, &err), DP_OK);
    assert_int_equal(m.rope + m.untied_head, 2);
    assert_true(fabs((double)model_total_params(&m) / 6053381344.0 - 1) < 1e-3);
    /* GPT-BigCode's multi-query attention (StarCoderBase-1B): one key/value head, whose K and V
     * projections are 2 x 24 x (2048 x 128 + 128) parameters where multi-head attention's were
     * 2 x 24 x (2048 x 2048 + 2048) */
    static const char bigcode[] = "{\"model_type\": \"gpt_bigcode\", \"n_layer\": 24, \"n_embd\": 2048,"
                                  "\"n_head\": 16, \"n_inner\": 8192, \"vocab_size\": 49152,"
                                  "\"n_positions\": 8192%s}";
    char text[256];
    model_spec mha;
    snprintf(text, sizeof text, bigcode, ", \"multi_query\": true");
    assert_int_equal(model_parse_hf(text, "config.json", &m, &err), DP_OK);
    assert_int_equal(model_kv_heads(&m), 1);
    snprintf(text, sizeof text, bigcode, "");
    assert_int_equal(model_parse_hf(text, "config.json", &mha, &err), DP_OK);
    assert_int_equal(model_kv_heads(&mha), 16);
    assert_int_equal(model_total_params(&mha) - model_total_params(&m),
                     2LL * 24 * ((2048LL * 2048 + 2048) - (2048LL * 128 + 128)));
    assert_int_equal(model_parse_hf("{\"d_model\": 1024, \"num_layers\": 24, \"num_decoder_layers\": 24,"
                                    "\"num_heads\": 128, \"d_kv\": 128, \"d_ff\": 65536,"
                                    "\"vocab_size\": 32128}",
                                    "config.json", &m, &err),
                     DP_OK);
    assert_int_equal(m.arch, ARCH_T5);
    assert_int_equal(model_layer_params(&m, 1), model_layer_params(model_preset("t5-11b-24l"), 1));
    /* T5 v1.1's and Flan-T5's untied LM head counts its own V x h */
    model_spec tied = m;
    assert_int_equal(model_parse_hf("{\"d_model\": 1024, \"num_layers\": 24, \"num_decoder_layers\": 24,"
                                    "\"num_heads\": 128, \"d_kv\": 128, \"d_ff\": 65536,"
                                    "\"vocab_size\": 32128, \"tie_word_embeddings\": false}",
                                    "config.json", &m, &err),
                     DP_OK);
    assert_int_equal(m.untied_head - tied.untied_head, 1);
    assert_int_equal(model_total_params(&m) - model_total_params(&tied), 32128LL * 1024);
    assert_int_equal(model_parse_hf("{\"model_type\": \"llama\", \"num_hidden_layers\": 32,"
                                    "\"hidden_size\": 4096, \"num_attention_heads\": 32,"
                                    "\"intermediate_size\": 11008, \"vocab_size\": 32000,"
                                    "\"max_position_embeddings\": 4096}",
                                    "config.json", &m, &err),
                     DP_OK);
    assert_int_equal(m.glu, 1);
    assert_int_equal(m.ffn, 11008);
    assert_int_equal(m.positions, 4096); /* its context, */
    assert_int_equal(m.rope, 1);         /* with rotary positions: no learned table */
    assert_true(model_rope_base(&m) == 10000); /* rope_theta's default, LLaMA-2's */
    assert_int_equal(m.rmsnorm, 1);      /* RMSNorm, no biases */
    assert_int_equal(m.no_bias, 1);
    assert_int_equal(model_total_params(&m), model_total_params(model_preset("llama2-7b")));
    /* Llama-2-7B's model card: 6,738,415,616 */
    assert_int_equal(model_total_params(&m), 6738415616LL);
    /* Phi-2, StarCoder2 and OPT are of this kind with an ungated MLP (two matrices), layer norms
     * and biases: Phi-2 comes out at its 2,779,683,840 parameters but for its one layer norm a
     * layer (parallel attention and MLP: 32 x 2 x 2560 fewer) and its LM head's bias (51,200
     * more); OPT-125m at its 125,239,296 but for its position table's 2 offset rows (1,536), its
     * MLP's width from ffn_dim and its positions learned */
    assert_int_equal(model_parse_hf("{\"model_type\": \"phi\", \"num_hidden_layers\": 32,"
                                    "\"hidden_size\": 2560, \"num_attention_heads\": 32,"
                                    "\"intermediate_size\": 10240, \"vocab_size\": 51200,"
                                    "\"layer_norm_eps\": 1e-05, \"tie_word_embeddings\": false}",
                                    "config.json", &m, &err), DP_OK);
    assert_int_equal(m.glu + m.rmsnorm + m.no_bias, 0);
    assert_int_equal(model_total_params(&m), 2779683840LL + 32 * 2 * 2560 - 51200);
    assert_int_equal(model_parse_hf("{\"model_type\": \"opt\", \"num_hidden_layers\": 12,"
                                    "\"hidden_size\": 768, \"num_attention_heads\": 12,"
                                    "\"ffn_dim\": 3072, \"vocab_size\": 50272,"
                                    "\"max_position_embeddings\": 2048}", "config.json", &m, &err),
                     DP_OK);
    assert_int_equal(m.glu + m.rope, 0);
    assert_int_equal(m.ffn, 3072);
    assert_int_equal(model_total_params(&m), 125239296LL - 2 * 768);
    /* Falcon-7B: ungated, multi-query, no biases: within 0.005% of its 6,921,720,704 (one layer
     * norm a layer: 32 x 2 x 4544 fewer); Falcon-40B's num_kv_heads */
    assert_int_equal(model_parse_hf("{\"model_type\": \"falcon\", \"num_hidden_layers\": 32,"
                                    "\"hidden_size\": 4544, \"num_attention_heads\": 71,"
                                    "\"multi_query\": true, \"bias\": false, \"vocab_size\": 65024,"
                                    "\"layer_norm_epsilon\": 1e-05}", "config.json", &m, &err), DP_OK);
    assert_int_equal(model_kv_heads(&m), 1);
    assert_int_equal(m.glu + m.rmsnorm, 0);
    assert_int_equal(m.no_bias, 1);
    assert_int_equal(model_total_params(&m), 6921720704LL + 32 * 2 * 4544);
    assert_int_equal(hf_small("falcon", "\"num_kv_heads\": 2, \"new_decoder_architecture\": true",
                              &m, &err), DP_OK);
    assert_int_equal(model_kv_heads(&m), 2);
    assert_int_equal(hf_small("starcoder2", "", &m, &err), DP_OK);
    assert_int_equal(m.glu, 0);
    /* GPT-NeoX keeps layer norm and biases; qwen2's QKV biases keep them counted; a config's
     * attention_bias says so */
    assert_int_equal(hf_small("gpt_neox", "", &m, &err), DP_OK);
    assert_int_equal(m.rmsnorm + m.no_bias, 0);
    assert_int_equal(hf_small("qwen2", "", &m, &err), DP_OK);
    assert_int_equal(m.rmsnorm, 1);
    assert_int_equal(m.no_bias, 0);
    assert_int_equal(hf_small("llama", "\"attention_bias\": true", &m, &err), DP_OK);
    assert_int_equal(m.no_bias, 0);
}

/* The window of hf_small's config (-1: refused, the message in err). */
static int hf_window(const char *type, const char *more, dp_err *err)
{
    model_spec m;
    return hf_small(type, more, &m, err) == DP_OK ? m.window : -1;
}

/* A sliding attention window: read from Hugging Face's sliding_window (null: none; Qwen's configs
 * name one they do not use unless use_sliding_window), kept through a JSON spec, and the limit of
 * the sequences model_check_seqlen accepts, as the context is. */
static void test_sliding_window(void **state)
{
    (void)state;
    dp_err err = {0};
    assert_int_equal(hf_window("mistral", "\"sliding_window\": 4096", &err), 4096);
    assert_int_equal(hf_window("mistral", "\"sliding_window\": null", &err), 0);
    assert_int_equal(hf_window("mistral", "", &err), 0);
    assert_int_equal(hf_window("qwen2", "\"sliding_window\": 4096", &err), 0); /* unused by default */
    assert_int_equal(hf_window("qwen2", "\"sliding_window\": 4096, \"use_sliding_window\": false",
                               &err), 0);
    assert_int_equal(hf_window("qwen2", "\"sliding_window\": 4096, \"use_sliding_window\": true",
                               &err), 4096);
    assert_int_equal(hf_window("mistral", "\"sliding_window\": \"4k\"", &err), -1);
    assert_non_null(strstr(err.msg, "sliding_window"));
    /* the limit */
    model_spec m = *model_preset("gpt-tiny");
    snprintf(m.name, sizeof m.name, "mistral");
    m.positions = 32768, m.window = 4096;
    assert_int_equal(model_check_seqlen(&m, 4096, "--max-seqlen 4096", &err), DP_OK);
    assert_int_equal(model_check_seqlen(&m, 4097, "--max-seqlen 4097", &err), DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--max-seqlen 4097 is longer than mistral's sliding attention "
                                    "window of 4096 tokens"));
    /* the context still comes first where it is the shorter */
    m.positions = 2048;
    assert_int_equal(model_check_seqlen(&m, 3000, "rows of 3000", &err), DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "rows of 3000 is longer than the 2048 tokens mistral takes"));
    /* T5's relative positions and no window: no limit */
    assert_int_equal(model_check_seqlen(model_preset("t5-11b-8l"), 1 << 20, "x", &err), DP_OK);
    /* through a JSON spec and back; null and 0 are none there too, a negative window is refused */
    m.positions = 32768;
    const char *path = tmp_file(".json", "");
    model_spec back;
    assert_int_equal(model_write_json(&m, path, &err), DP_OK);
    assert_int_equal(model_read_json(path, &back, &err), DP_OK);
    assert_int_equal(back.window, 4096);
    static const char *const none[] = {"null", "0"};
    for (int i = 0; i < 2; i++) {
        char text[160];
        snprintf(text, sizeof text, "{\"num_layers\": 2, \"hidden_size\": 64, \"num_attn_heads\": 4, "
                 "\"sliding_window\": %s}", none[i]);
        assert_int_equal(model_parse_json(text, "x.json", &back, &err), DP_OK);
        assert_int_equal(back.window, 0);
    }
    assert_int_equal(model_parse_json("{\"num_layers\": 2, \"hidden_size\": 64, \"num_attn_heads\": 4,"
                                      "\"sliding_window\": -1}", "x.json", &back, &err), DP_ERR_PARSE);
    assert_non_null(strstr(err.msg, "sliding_window"));
}

/* The norms' epsilon: Hugging Face's names for it, Megatron's norm_epsilon in a dpsim spec (written
 * back only where it is not the default), 1e-5 where nothing says. */
static void test_norm_epsilon(void **state)
{
    (void)state;
    dp_err err = {0};
    static const char *const keys[] = {"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
                                       "norm_epsilon"};
    model_spec m, back;
    for (int i = 0; i < 4; i++) {
        char more[64];
        snprintf(more, sizeof more, "\"%s\": 1e-06", keys[i]);
        assert_int_equal(hf_small("qwen2", more, &m, &err), DP_OK);
        assert_true(model_norm_eps(&m) == 1e-6);
    }
    assert_int_equal(model_parse_hf("{\"d_model\": 64, \"num_layers\": 2, \"num_heads\": 4,"
                                    "\"d_ff\": 256, \"layer_norm_epsilon\": 1e-06}", "config.json",
                                    &m, &err), DP_OK); /* T5's */
    assert_true(model_norm_eps(&m) == 1e-6);
    const char *path = tmp_file(".json", "");
    assert_int_equal(model_write_json(&m, path, &err), DP_OK);
    assert_int_equal(model_read_json(path, &back, &err), DP_OK);
    assert_true(model_norm_eps(&back) == 1e-6);
    /* the default: 1e-5, and a spec without the key (a plan's model_spec stays as it was) */
    assert_true(model_norm_eps(model_preset("llama2-7b")) == MODEL_NORM_EPS);
    cJSON *o = model_to_json(model_preset("llama2-7b"));
    assert_false(cJSON_HasObjectItem(o, "norm_epsilon"));
    cJSON_Delete(o);
    assert_int_equal(model_parse_json("{\"num_layers\": 2, \"hidden_size\": 64, \"num_attn_heads\": 4,"
                                      "\"norm_epsilon\": 0}", "x.json", &m, &err), DP_ERR_PARSE);
    assert_non_null(strstr(err.msg, "norm_epsilon"));
}

/* Grouped-query attention and untied LM heads, from Hugging Face configs: Llama-3-8B is
 * 8,030,261,248 parameters and Mistral-7B 7,241,732,096 (their model cards); as many key/value heads as heads is plain
 * multi-head attention in parameters, FLOPs and activation memory; a mixture of experts is
 * refused. */
/* The four MoE configs of tests/data/hf (their Hugging Face config.json files): total and active
 * parameters against their publishers' figures and against the sums written out here by hand
 * (each layer's attention, norms, router, shared and routed experts), the FLOPs a token costs
 * (6 x the active parameters and the LM head, attention apart: latent attention's query-key and
 * value widths), a round trip through dpsim's own spec, and the refusal of every cost model. */
static void test_moe_counts(void **state)
{
    (void)state;
    struct {
        const char *file;
        int64_t total, active, bare; /* bare: active without the embedding table */
        double published_total, published_active; /* billions, as the cards round them (Qwen's
                                                    * 3.3B and DeepSeek's 37B loosely) */
        int published_bare;                        /* the card counts active without the table */
    } want[4] = {{"mixtral-8x7b", 0, 0, 0, 46.7, 12.9, 0},
                 {"qwen3-30b-a3b", 0, 0, 0, 30.5, 3.3, 0},
                 {"deepseek-v3", 0, 0, 0, 671, 37, 0},
                 {"gpt-oss-120b", 0, 0, 0, 116.83, 5.13, 1}};
    /* by hand: per layer attention + 2 norms + router + shared + experts; then embedding, head, norm */
    {   /* Mixtral-8x7B: GQA 32/8 heads of 128, 8 experts of 14336, 2 a token, vocab 32000 */
        int64_t h = 4096, attn = h * 4096 + 2 * h * 1024 + 4096 * h, expert = 3 * h * 14336;
        int64_t base = attn + 2 * h + h * 8, emb = 32000 * h;
        want[0].total = 32 * (base + 8 * expert) + 2 * emb + h;
        want[0].active = 32 * (base + 2 * expert) + 2 * emb + h;
    }
    {   /* Qwen3-30B-A3B: 32/4 heads of 128 with q and k norms, 128 experts of 768, 8 a token */
        int64_t h = 2048, attn = h * 4096 + 2 * h * 512 + 4096 * h + 2 * 128, expert = 3 * h * 768;
        int64_t base = attn + 2 * h + h * 128, emb = 151936 * h;
        want[1].total = 48 * (base + 128 * expert) + 2 * emb + h;
        want[1].active = 48 * (base + 8 * expert) + 2 * emb + h;
    }
    {   /* DeepSeek-V3: latent attention (q rank 1536, kv rank 512, heads 128 of 128 + 64 rotary,
         * values 128), 3 dense layers of 18432, then 58 of 256 experts of 2048 (8 a token), a
         * shared one, the router's score bias */
        int64_t h = 7168, H = 128;
        int64_t attn = h * 1536 + 1536 + 1536 * H * 192 + h * (512 + 64) + 512 + 512 * H * 256 +
                       H * 128 * h;
        int64_t expert = 3 * h * 2048, dense = attn + 2 * h + 3 * h * 18432;
        int64_t moe = attn + 2 * h + h * 256 + 256 + expert, emb = 129280 * h;
        want[2].total = 3 * dense + 58 * (moe + 256 * expert) + 2 * emb + h;
        want[2].active = 3 * dense + 58 * (moe + 8 * expert) + 2 * emb + h;
    }
    {   /* gpt-oss-120b: 64/8 heads of 64 with biases and sinks, 128 experts of 2880 with biases
         * (4 a token), a router with biases */
        int64_t h = 2880, attn = h * 4096 + 4096 + 2 * (h * 512 + 512) + 4096 * h + h + 64;
        int64_t expert = 3 * h * 2880 + 2 * 2880 + h, base = attn + 2 * h + h * 128 + 128;
        int64_t emb = 201088 * h;
        want[3].total = 36 * (base + 128 * expert) + 2 * emb + h;
        want[3].active = 36 * (base + 4 * expert) + 2 * emb + h;
    }
    for (int i = 0; i < 4; i++) {
        char path[128];
        snprintf(path, sizeof path, "tests/data/hf/%s.json", want[i].file);
        model_spec m, back;
        dp_err err = {0};
        if (model_resolve(path, &m, &err) != DP_OK) fail_msg("%s", err.msg);
        assert_true(model_is_moe(&m));
        int64_t bare, active = model_active_params(&m, &bare);
        print_message("%s: %lld total, %lld active (%lld without the embedding table)\n",
                      want[i].file, (long long)model_total_params(&m), (long long)active,
                      (long long)bare);
        assert_true(model_total_params(&m) == want[i].total);
        assert_true(active == want[i].active);
        assert_true(bare == active - (int64_t)m.vocab * m.hidden);
        /* the publishers' figures, as rounded on their cards */
        double digits = want[i].published_total >= 100 ? 0.005 : 0.05;
        assert_true(fabs((double)model_total_params(&m) / 1e9 - want[i].published_total) <
                    (want[i].published_total > 600 ? 0.5 : digits));
        double a = (double)(want[i].published_bare ? bare : active) / 1e9;
        assert_true(fabs(a / want[i].published_active - 1) < 0.02); /* "3.3B", "37B" */
        /* FLOPs: 6 x (active layers + LM head) per token, and attention (non-causal minus causal
         * is the forward's half square, three times: forward and backward) */
        double s = 2048, v = m.v_head_dim > 0 ? m.v_head_dim : m.kv_channels;
        double attn_entry = 2.0 * m.heads * (m.kv_channels + v); /* QK^T and PV per score */
        double layers = (double)model_layers_active_params(&m);
        double causal = model_train_flops(&m, 2048, 0, FLOPS_CAUSAL);
        double whole = model_train_flops(&m, 2048, 0, FLOPS_NONCAUSAL);
        assert_rel(causal, 6 * (layers + (double)m.vocab * m.hidden) * s +
                               3 * attn_entry * m.enc_layers * s * s / 2, 1e-12);
        assert_rel(whole - causal, 3 * attn_entry * m.enc_layers * s * s / 2, 1e-12);
        /* dpsim's own spec round-trips it */
        const char *spec = tmp_file(".json", "");
        assert_int_equal(model_write_json(&m, spec, &err), DP_OK);
        if (model_read_json(spec, &back, &err) != DP_OK) fail_msg("%s", err.msg);
        assert_true(model_total_params(&back) == model_total_params(&m));
        assert_true(model_active_params(&back, NULL) == active);
        assert_int_equal(model_moe_layers(&back), model_moe_layers(&m));
        /* the analytic cost model takes it (its experts over --ep, latent attention too), a
         * measured profile does not */
        cluster_spec hw = p4d();
        analytic_params ap;
        analytic_params_default(&ap);
        cost_model *cm = NULL;
        if (cost_analytic_new(&m, &hw, 1, RECOMPUTE_NONE, &ap, &cm, &err) != DP_OK)
            fail_msg("%s", err.msg);
        if (cost_model_set_moe(cm, m.experts % 8 == 0 ? 8 : 1, NULL, &err) != DP_OK)
            fail_msg("%s", err.msg);
        cost_model_free(cm);
        cm = NULL;
        assert_int_equal(cost_profile_load(GPT_PROFILE, &m, &hw, 1, RECOMPUTE_NONE, &cm, &err),
                         DP_ERR_INVALID);
        assert_msg_has(err.msg, "a measured profile has no expert layers");
        assert_null(cm);
    }
    /* a dense model is its own active count */
    int64_t bare;
    const model_spec *dense = model_preset("llama3-8b");
    assert_true(model_active_params(dense, &bare) == model_total_params(dense));
    assert_true(bare == model_total_params(dense) - 128256LL * 4096);
}

static void test_gqa_and_untied_heads(void **state)
{
    (void)state;
    model_spec m;
    dp_err err = {0};
    static const char llama3[] =
        "{\"model_type\": \"llama\", \"num_hidden_layers\": 32, \"hidden_size\": 4096,"
        "\"num_attention_heads\": 32, \"num_key_value_heads\": 8, \"intermediate_size\": 14336,"
        "\"vocab_size\": 128256, \"tie_word_embeddings\": false, \"rope_theta\": 500000.0}";
    assert_int_equal(model_parse_hf(llama3, "config.json", &m, &err), DP_OK);
    assert_int_equal(model_kv_heads(&m), 8);
    assert_true(model_rope_base(&m) == 500000); /* Llama-3's rope_theta */
    assert_int_equal(m.untied_head, 1);
    assert_int_equal(model_total_params(&m), 8030261248LL);
    assert_int_equal(model_parse_hf("{\"model_type\": \"mistral\", \"num_hidden_layers\": 32,"
                                    "\"hidden_size\": 4096, \"num_attention_heads\": 32,"
                                    "\"num_key_value_heads\": 8, \"intermediate_size\": 14336,"
                                    "\"vocab_size\": 32000}", "config.json", &m, &err), DP_OK);
    assert_int_equal(m.untied_head, 1); /* Mistral's default */
    assert_int_equal(model_total_params(&m), 7241732096LL);
    /* Gemma ties its LM head by default (Gemma-7B's 8.54 billion count the embedding once), with
     * RMSNorm and no biases as the LLaMA family */
    model_spec gm;
    assert_int_equal(model_parse_hf("{\"model_type\": \"gemma\", \"num_hidden_layers\": 28,"
                                    "\"hidden_size\": 3072, \"num_attention_heads\": 16,"
                                    "\"num_key_value_heads\": 16, \"head_dim\": 256,"
                                    "\"intermediate_size\": 24576, \"vocab_size\": 256000}",
                                    "config.json", &gm, &err), DP_OK);
    assert_int_equal(gm.untied_head, 0);
    assert_int_equal(gm.rmsnorm + gm.no_bias, 2);
    assert_int_equal(model_total_params(&gm), 8537680896LL);
    model_spec other;
    /* a model type not named here is LLaMA's kind when its config has an rms_norm_eps: Phi-3-mini
     * and Qwen3-8B come out at their model cards' 3,821,079,552 and 8,190,735,360 (Qwen3's
     * per-head q and k norms included, 36 x 256 parameters) */
    assert_int_equal(model_parse_hf("{\"model_type\": \"phi3\", \"num_hidden_layers\": 32,"
                                    "\"hidden_size\": 3072, \"num_attention_heads\": 32,"
                                    "\"num_key_value_heads\": 32, \"intermediate_size\": 8192,"
                                    "\"vocab_size\": 32064, \"rms_norm_eps\": 1e-05,"
                                    "\"tie_word_embeddings\": false}", "config.json", &other, &err), DP_OK);
    assert_int_equal(other.rmsnorm + other.no_bias, 2);
    assert_int_equal(model_total_params(&other), 3821079552LL);
    assert_int_equal(model_parse_hf("{\"model_type\": \"qwen3\", \"num_hidden_layers\": 36,"
                                    "\"hidden_size\": 4096, \"num_attention_heads\": 32,"
                                    "\"num_key_value_heads\": 8, \"head_dim\": 128,"
                                    "\"intermediate_size\": 12288, \"vocab_size\": 151936,"
                                    "\"rms_norm_eps\": 1e-06, \"attention_bias\": false,"
                                    "\"tie_word_embeddings\": false}", "config.json", &other, &err), DP_OK);
    assert_int_equal(model_total_params(&other), 8190735360LL);
    /* kv heads = heads: the same as multi-head attention everywhere */
    model_spec mha = *model_preset("gpt-6.7b-16l"), gqa = mha;
    gqa.kv_heads = gqa.heads;
    assert_int_equal(model_total_params(&gqa), model_total_params(&mha));
    cost_shape sh = cost_shape_rows(2, 1024, 0);
    double d1, a1, d2, a2;
    analytic_flops(&mha, COMP_ENCODER, &sh, 2, &d1, &a1);
    analytic_flops(&gqa, COMP_ENCODER, &sh, 2, &d2, &a2);
    assert_near(d1, d2, 0);
    assert_near(a1, a2, 0);
    assert_near(analytic_stored_act_bytes(&gqa, COMP_ENCODER, &sh, 2, RECOMPUTE_NONE, 0),
                analytic_stored_act_bytes(&mha, COMP_ENCODER, &sh, 2, RECOMPUTE_NONE, 0), 0);
    /* fewer key/value heads: K and V projections shrink by hand, attention FLOPs do not */
    gqa.kv_heads = 8;
    double h = 4096, hk = 4096, hkv = 8 * 128, b = 2, s = 1024, f = 16384;
    analytic_flops(&gqa, COMP_ENCODER, &sh, 1, &d2, &a2);
    analytic_flops(&mha, COMP_ENCODER, &sh, 1, &d1, &a1);
    assert_near(d2, 2 * b * s * (h * hk + 2 * h * hkv + hk * h + 2 * h * f), 1);
    assert_near(a2, a1, 0);
    assert_near(analytic_stored_act_bytes(&mha, COMP_ENCODER, &sh, 1, RECOMPUTE_SELECTIVE, 0) -
                    analytic_stored_act_bytes(&gqa, COMP_ENCODER, &sh, 1, RECOMPUTE_SELECTIVE, 0),
                4 * s * (hk - hkv) * b, 1e-6);
    assert_int_equal(model_total_params(&mha) - model_total_params(&gqa),
                     16 * (int64_t)(2 * h * (hk - hkv) + 2 * (hk - hkv)));
    /* --tp must divide the key/value heads too */
    cluster_spec hw = p4d();
    analytic_params ap;
    analytic_params_default(&ap);
    cost_model *cm = NULL;
    gqa.kv_heads = 2;
    assert_int_equal(cost_analytic_new(&gqa, &hw, 4, RECOMPUTE_NONE, &ap, &cm, &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "--tp 4 does not divide the 2 key/value heads"); /* they bind, not the 32 */
    /* the untied head adds V x h, on the last stage even with one stage */
    model_spec tied = *model_preset("llama2-7b");
    tied.untied_head = 0;
    assert_int_equal(model_total_params(model_preset("llama2-7b")) - model_total_params(&tied),
                     (int64_t)32000 * 4096);
    /* round trip of the spec keeps them, and the rotary base */
    m.name[0] = 'x';
    m.rope_base = 500000;
    const char *path = tmp_file(".json", "");
    model_spec back;
    assert_int_equal(model_write_json(&m, path, &err), DP_OK);
    assert_int_equal(model_read_json(path, &back, &err), DP_OK);
    assert_int_equal(model_kv_heads(&back), 8);
    assert_int_equal(back.untied_head, 1);
    assert_int_equal(back.rmsnorm, 1);
    assert_int_equal(back.no_bias, 1);
    assert_true(model_rope_base(&back) == 500000);
    assert_int_equal(model_total_params(&back), model_total_params(&m));
    /* experts without the number a token runs are refused, not counted as dense */
    assert_int_equal(model_parse_hf("{\"model_type\": \"mixtral\", \"num_hidden_layers\": 32,"
                                    "\"hidden_size\": 4096, \"num_attention_heads\": 32,"
                                    "\"num_local_experts\": 8, \"intermediate_size\": 14336}",
                                    "config.json", &m, &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "mixture-of-experts");
    assert_msg_has(err.msg, "num_experts_per_tok");
    /* DeepSeek's name for them, and the routed count, whatever the model type */
    static const char *const expert_keys[] = {"n_routed_experts", "num_experts_per_tok"};
    for (int i = 0; i < 2; i++) {
        char more[64];
        snprintf(more, sizeof more, "\"%s\": 8", expert_keys[i]);
        assert_int_equal(hf_small("deepseek_v2", more, &m, &err), DP_ERR_INVALID);
        assert_msg_has(err.msg, "mixture-of-experts model (");
        assert_msg_has(err.msg, expert_keys[i]);
    }
    /* dense first layers beyond the model's are refused by their field; all of them dense is a
     * dense model */
    const char *moe_cfg = "{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 4,"
                          "\"hidden_size\": 64, \"num_attention_heads\": 8,"
                          "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2,"
                          "\"moe_intermediate_size\": 32, \"first_k_dense_replace\": %d}";
    char cfg[512];
    snprintf(cfg, sizeof cfg, moe_cfg, 5);
    assert_int_equal(model_parse_hf(cfg, "config.json", &m, &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "config.json: field \"first_k_dense_replace\"");
    snprintf(cfg, sizeof cfg, moe_cfg, 4);
    assert_int_equal(model_parse_hf(cfg, "config.json", &m, &err), DP_OK);
    /* DeepSeek's group-limited router (n_group, topk_group): read, and refused where its groups
     * cannot hold a token's experts or do not divide them */
    static const struct {
        const char *groups;
        int ok;
        const char *says;
    } grouped[] = {{"\"n_group\": 4, \"topk_group\": 2", 1, ""},
                   {"\"n_group\": 3, \"topk_group\": 1", 0, "\"moe_router_num_groups\" (n_group) is 3"},
                   {"\"n_group\": 4, \"topk_group\": 5", 0, "\"moe_router_group_topk\" (topk_group) is 5"},
                   {"\"n_group\": 8, \"topk_group\": 1", 0, "hold the 2 experts a token runs"}};
    for (size_t i = 0; i < sizeof grouped / sizeof *grouped; i++) {
        char gcfg[600];
        snprintf(gcfg, sizeof gcfg, "{\"model_type\": \"deepseek_v3\", \"num_hidden_layers\": 4,"
                 "\"hidden_size\": 64, \"num_attention_heads\": 8, \"n_routed_experts\": 8,"
                 "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 32, %s}", grouped[i].groups);
        dp_status want = grouped[i].ok ? DP_OK : DP_ERR_INVALID;
        assert_int_equal(model_parse_hf(gcfg, "config.json", &m, &err), want);
        if (!grouped[i].ok) assert_msg_has(err.msg, grouped[i].says);
        if (!grouped[i].ok) continue;
        assert_true(m.moe_groups == 4 && m.moe_group_topk == 2);
        cJSON *spec = model_to_json(&m); /* and a dpsim spec carries them back */
        char *text = cJSON_PrintUnformatted(spec);
        model_spec spec_back;
        assert_int_equal(model_parse_json(text, "spec.json", &spec_back, &err), DP_OK);
        assert_true(spec_back.moe_groups == 4 && spec_back.moe_group_topk == 2);
        free(text);
        cJSON_Delete(spec);
    }
    /* a dense config that names no experts (null) is dense */
    assert_int_equal(hf_small("llama", "\"num_experts\": null", &m, &err), DP_OK);
    assert_int_equal(model_parse_json("{\"num_layers\": 2, \"hidden_size\": 64, \"num_attn_heads\": 8,"
                                      "\"num_query_groups\": 3}", "spec.json", &m, &err),
                     DP_ERR_INVALID);
    assert_msg_has(err.msg, "3 key/value heads must divide the 8");
    /* Megatron's normalization and add_bias_linear keys: RMSNorm has h parameters a norm, no
     * biases drop hk + 2hkv + h + (m-1) f + h a layer */
    model_spec ln, rms;
    assert_int_equal(model_parse_json("{\"num_layers\": 2, \"hidden_size\": 64, \"num_attn_heads\": 8}",
                                      "spec.json", &ln, &err), DP_OK);
    assert_int_equal(model_parse_json("{\"num_layers\": 2, \"hidden_size\": 64, \"num_attn_heads\": 8,"
                                      "\"normalization\": \"RMSNorm\", \"add_bias_linear\": false}",
                                      "spec.json", &rms, &err), DP_OK);
    assert_int_equal(model_layer_params(&ln, 0) - model_layer_params(&rms, 0),
                     2 * 64 + (64 + 2 * 64 + 64) + (256 + 64));
    assert_int_equal(model_parse_json("{\"num_layers\": 2, \"hidden_size\": 64, \"num_attn_heads\": 8,"
                                      "\"normalization\": \"BatchNorm\"}", "spec.json", &m, &err),
                     DP_ERR_PARSE);
    assert_msg_has(err.msg, "\"normalization\" must be \"LayerNorm\" or \"RMSNorm\"");
    /* Megatron's rotary_base; learned positions have none */
    assert_int_equal(model_parse_json("{\"num_layers\": 2, \"hidden_size\": 64, \"num_attn_heads\": 8,"
                                      "\"position_embedding_type\": \"rope\", \"rotary_base\": 1000000}",
                                      "spec.json", &m, &err), DP_OK);
    assert_true(model_rope_base(&m) == 1e6);
    assert_true(model_rope_base(&ln) == 0);
    assert_int_equal(model_parse_json("{\"num_layers\": 2, \"hidden_size\": 64, \"num_attn_heads\": 8,"
                                      "\"position_embedding_type\": \"rope\", \"rotary_base\": 0}",
                                      "spec.json", &m, &err), DP_ERR_PARSE);
    assert_msg_has(err.msg, "spec.json: field \"rotary_base\"");
}

static void expect_spec_error(const char *text, const char *want)
{
    model_spec m;
    dp_err err = {0};
    if (model_parse_json(text, "spec.json", &m, &err) == DP_OK) fail_msg("accepted: %s", text);
    assert_msg_has(err.msg, want);
}

static void test_bad_specs(void **state)
{
    (void)state;
    expect_spec_error("", "spec.json:1: malformed JSON (file is empty)");
    expect_spec_error("{\"num_layers\": 4,\n\"hidden_size\": }", "spec.json:2: malformed JSON");
    expect_spec_error("[1]", "expected a JSON object");
    expect_spec_error("{\"hidden_size\": 64, \"num_attn_heads\": 4}", "missing field \"num_layers\"");
    expect_spec_error("{\"num_layers\": -4, \"hidden_size\": 64, \"num_attn_heads\": 4}",
                      "field \"num_layers\" must be a whole number");
    expect_spec_error("{\"num_layers\": 4, \"hidden_size\": \"big\", \"num_attn_heads\": 4}",
                      "field \"hidden_size\"");
    expect_spec_error("{\"num_layers\": 4, \"hidden_size\": 64, \"num_attn_heads\": 4, \"arch\": \"rnn\"}",
                      "field \"arch\"");
    expect_spec_error("{\"num_layers\": 4.5, \"hidden_size\": 64, \"num_attn_heads\": 4}",
                      "\"num_layers\"");
    model_spec m;
    cluster_spec c;
    dp_err err = {0};
    assert_int_not_equal(model_resolve("gpt-7t", &m, &err), DP_OK);
    assert_msg_has(err.msg, "unknown model \"gpt-7t\"");
    assert_int_not_equal(cluster_resolve("tpu-v9", &c, &err), DP_OK);
    assert_msg_has(err.msg, "unknown hardware \"tpu-v9\"");
    assert_int_not_equal(cluster_parse_json("{\"gpu\": \"a100-40gb\"}", "hw.json", &c, &err), DP_OK);
    assert_msg_has(err.msg, "hw.json: missing field \"intra_gbit\"");
    /* A nesting bomb is malformed JSON, not a crash. */
    char *bomb = malloc(200002);
    memset(bomb, '[', 200000);
    bomb[200000] = '\0';
    expect_spec_error(bomb, "malformed JSON");
    free(bomb);
}

/* FlashAttention's time (cost_analytic.c) against the kernel tables, re-derived here: a causal
 * self-attention forward is 4 s^2 hk / 2 FLOPs at the table's causal throughput, its backward 2.5
 * times that at the backward's; a T5 encoder's is not causal; a varlen row's attention is the sum
 * of its samples' (lengths under 2k, where the table is flat); causal work costs about half the
 * full. The layer's other terms are unchanged (floors off, so the differences are exact). */
static double flash_fwd_minus_unfused(const model_spec *m, const cluster_spec *hw,
                                      const cost_shape *sh, cost_component c, double *bwd_diff)
{
    analytic_params p;
    analytic_params_default(&p);
    p.fwd_floor_ms = p.bwd_floor_ms = 0;
    cost_model *on = NULL, *off = NULL;
    assert_int_equal(cost_analytic_new(m, hw, 1, RECOMPUTE_NONE, &p, &on, NULL), DP_OK);
    assert_int_equal(cost_analytic_new(m, hw, 1, RECOMPUTE_NONE, &p, &off, NULL), DP_OK);
    cost_model_set_attention(on, 1, NULL);
    cost_model_set_attention(off, 0, NULL);
    cost_layer a, b;
    assert_int_equal(cost_query(on, c, sh, &a, NULL), DP_OK);
    assert_int_equal(cost_query(off, c, sh, &b, NULL), DP_OK);
    double dense, attn;
    analytic_flops(m, c, sh, 1, &dense, &attn);
    double unfused = attn / (hw->gpu.peak_tflops * 1e12 * p.attn_eff) * 1e3;
    *bwd_diff = a.bwd_ms - b.bwd_ms + p.bwd_ratio * unfused; /* the flash backward alone */
    double fwd = a.fwd_ms - b.fwd_ms + unfused;              /* the flash forward alone */
    cost_model_free(on);
    cost_model_free(off);
    return fwd;
}

static void test_flash_attention_time(void **state)
{
    (void)state;
    cluster_spec h100;
    assert_int_equal(cluster_resolve("h100", &h100, NULL), DP_OK);
    const attn_kernel *k = h100.gpu.attn;
    assert_non_null(k);
    const model_spec *llama = model_preset("llama3-8b");
    double hk = (double)llama->heads * llama->kv_channels, bwd;
    /* 4096 tokens: the table's second column, causal */
    cost_shape row = cost_shape_rows(1, 4096, 0);
    double flops = 4.0 * 4096 * 4096 * hk / 2;
    double fwd = flash_fwd_minus_unfused(llama, &h100, &row, COMP_ENCODER, &bwd);
    assert_rel(fwd, flops / (k->fwd_causal[1] * 1e12) * 1e3, 1e-9);
    assert_rel(bwd, 2.5 * flops / (k->bwd_causal[1] * 1e12) * 1e3, 1e-9);
    /* about half of the same attention not causal */
    double full = 2 * flops / (k->fwd_full[1] * 1e12) * 1e3;
    print_message("causal / full attention forward at 4k: %.3f\n", fwd / full);
    assert_true(fwd / full > 0.5 && fwd / full < 0.65);
    /* a T5 encoder is not causal: the full table at 8k (third column) */
    model_spec t5 = *model_preset("t5-11b-24l");
    cost_shape enc = cost_shape_rows(1, 8192, 128);
    double hk5 = (double)t5.heads * t5.kv_channels;
    fwd = flash_fwd_minus_unfused(&t5, &h100, &enc, COMP_ENCODER, &bwd);
    assert_rel(fwd, 4.0 * 8192 * 8192 * hk5 / (k->fwd_full[2] * 1e12) * 1e3, 1e-9);
    /* a varlen row of samples 1000 and 1500: the sum of each alone */
    cost_shape v = cost_shape_rows(1, 2500, 0);
    v.varlen = 1, v.enc_sq = 1000.0 * 1000 + 1500.0 * 1500;
    double sum = 0, b1;
    for (int len = 1000; len <= 1500; len += 500) {
        cost_shape one = cost_shape_rows(1, len, 0);
        sum += flash_fwd_minus_unfused(llama, &h100, &one, COMP_ENCODER, &b1);
    }
    assert_rel(flash_fwd_minus_unfused(llama, &h100, &v, COMP_ENCODER, &b1), sum, 1e-9);
    /* between table lengths: log2 interpolation; held beyond; head dim 64 at its share */
    assert_rel(attn_kernel_tflops(k, 0, 1, 2048 * sqrt(2.0), 128),
               (k->fwd_causal[0] + k->fwd_causal[1]) / 2, 1e-12);
    assert_rel(attn_kernel_tflops(k, 1, 0, 1e6, 128), k->bwd_full[3], 1e-12);
    assert_rel(attn_kernel_tflops(k, 1, 0, 100, 64), k->bwd_full[0] * k->hd64_share, 1e-12);
}

/* NCCL's collectives (comm.h) from each preset's bus bandwidth: a tp-8 all-reduce is the ring's
 * 2(n-1)/n B / busBW (A100) or NVLink SHARP's B / algBW when faster (H100); with tp 8 each GPU's
 * data-parallel ring gets one NIC, not the node's eight; two rings sharing one NIC take twice as
 * long as one; a 16-GPU ring over two nodes gets the node's eight NICs, capped by NVLink. */
static void test_nccl_collectives(void **state)
{
    (void)state;
    double B = 256e6;
    cluster_spec a100, h100;
    assert_int_equal(cluster_preset("dgx-a100", &a100), 0);
    assert_int_equal(cluster_preset("dgx-h100", &h100), 0);
    comm_group tp8 = comm_mesh_group(&a100, &(mesh){8, 1, 1, 1}, MESH_TP);
    assert_int_equal(tp8.spans_nodes, 0);
    assert_near(comm_busbw_gbps(&a100, COLL_ALL_REDUCE, &tp8), 235, 1e-9);
    assert_rel(comm_coll_ms(&a100, COLL_ALL_REDUCE, &tp8, B),
               14 * 2e-3 + 1.75 * B / 235e9 * 1e3, 1e-12);
    double ring = 14 * 2e-3 + 1.75 * B / 370e9 * 1e3, nvls = 23e-3 + B / 275e9 * 1e3;
    assert_true(nvls < ring);
    assert_rel(comm_coll_ms(&h100, COLL_ALL_REDUCE, &tp8, B), nvls, 1e-12);
    assert_rel(comm_coll_ms(&h100, COLL_ALL_GATHER, &tp8, B), 7 * 2e-3 + 0.875 * B / 370e9 * 1e3,
               1e-12);
    /* concurrent groups share the NICs: tp 8 x cp 2 puts eight cp rings (one per tp rank, 8
     * GPUs apart) across two nodes at once, one NIC each, as the data-parallel rails below get
     * (comm_dp_group counts its rings another way: the two must agree); tp 2 x cp 8 puts two
     * rings of four members a node on its eight NICs, four each; a tp group over two nodes
     * keeps all eight */
    comm_group cp2 = comm_strided_group(&h100, 2, 8), cp8 = comm_strided_group(&h100, 8, 2);
    assert_int_equal(cp2.spans_nodes, 1);
    assert_near(cp2.nics, comm_dp_group(&h100, &(mesh){8, 1, 1, 2}, 0).nics, 1e-12);
    assert_near(cp2.nics, 1, 1e-12);
    assert_near(cp8.nics, 4, 1e-12);
    assert_near(comm_mesh_group(&h100, &(mesh){16, 1, 1, 1}, MESH_TP).nics, 8, 1e-12);
    assert_int_equal(comm_strided_group(&h100, 4, 2).spans_nodes, 0); /* 8 GPUs: one node */
    /* rails: tp 8, dp 2 over two nodes: every GPU's ring crosses on its own NIC (48 GB/s) */
    comm_group rail = comm_dp_group(&h100, &(mesh){8, 1, 1, 2}, 0);
    assert_int_equal(rail.spans_nodes, 1);
    assert_near(rail.nics, 1, 1e-12);
    assert_near(comm_busbw_gbps(&h100, COLL_ALL_REDUCE, &rail), 48, 1e-9);
    /* dp 16 over two nodes, tp 1: one ring with 8 members a node on 8 NICs, 192 GB/s < 235 */
    comm_group wide = comm_dp_group(&a100, &(mesh){1, 1, 1, 16}, 0);
    assert_near(wide.nics, 8, 1e-12);
    assert_near(comm_busbw_gbps(&a100, COLL_ALL_REDUCE, &wide), 192, 1e-9);
    /* inside one node: no NIC */
    assert_int_equal(comm_dp_group(&a100, &(mesh){1, 1, 2, 4}, 1).spans_nodes, 0);
    /* two GPUs a node, one NIC: their two rings share it, twice as long as with a NIC each */
    cluster_spec c = a100;
    c.gpus_per_node = 2, c.inter_latency_us = c.intra_latency_us = 0;
    c.nics_per_node = 1;
    comm_group shared = comm_dp_group(&c, &(mesh){2, 1, 1, 2}, 0);
    double t_shared = comm_coll_ms(&c, COLL_ALL_REDUCE, &shared, B);
    c.nics_per_node = 2;
    comm_group own = comm_dp_group(&c, &(mesh){2, 1, 1, 2}, 0);
    assert_near(shared.nics, 0.5, 1e-12);
    assert_near(own.nics, 1, 1e-12);
    assert_rel(t_shared, 2 * comm_coll_ms(&c, COLL_ALL_REDUCE, &own, B), 1e-12);
}

/* NCCL's tree for an all-reduce across nodes (comm.h), against its closed form written out here
 * (tuning.cc: the buffer carried twice at 0.92 of the link, times its correction for the size,
 * Simple: 0.7 at 25 MB, 0.6 at 100 kB): a bucket over 2,048 rails (one GPU a node) takes the
 * tree's 2 floor(log2 N) steps instead of the ring's 2(n-1); a large buffer over two nodes keeps
 * the ring; a 16-GPU group of 8 a node chains its 7 members inside each node; time never falls as
 * the group grows; a group resized keeps its members a node in proportion; p4d (DynaPipe's cost
 * model) and the JSON field "nccl_tree": false keep rings only. */
static void test_nccl_tree(void **state)
{
    (void)state;
    cluster_spec h100;
    assert_int_equal(cluster_preset("dgx-h100", &h100), 0);
    assert_true(h100.nccl_tree);
    double lat_in = h100.intra_latency_us / 1e3, lat_x = h100.inter_latency_us / 1e3;
    double B = 25e6;
    comm_group rails = comm_dp_group(&h100, &(mesh){8, 1, 1, 2048}, 0);
    assert_int_equal(rails.n, 2048);
    assert_int_equal(rails.per_node, 1);
    double bw = comm_busbw_gbps(&h100, COLL_ALL_REDUCE, &rails) * 1e9 / 1e3; /* bytes a ms */
    double factor = 2.0 * 2047 / 2048;
    double ring = 2 * 2047 * lat_x + B * factor / bw, tree = 2 * 11 * lat_x + 2 * B / (0.92 * 0.7 * bw);
    assert_near(comm_tree_bw_share(B), 0.92 * 0.7, 1e-12);
    assert_near(comm_tree_bw_share(1e5), 0.92 * 0.6, 1e-12);
    assert_near(comm_tree_bw_share(1e9), 0.92, 1e-12);
    assert_near(comm_tree_bw_share(64), 0.92 * 0.9, 1e-12);
    assert_true(tree < ring);
    assert_rel(comm_coll_ms(&h100, COLL_ALL_REDUCE, &rails, B), tree, 1e-12);
    /* two nodes, 1 GB: the ring's bandwidth wins */
    comm_group two = comm_dp_group(&h100, &(mesh){8, 1, 1, 2}, 0);
    double big = 1e9, bw2 = comm_busbw_gbps(&h100, COLL_ALL_REDUCE, &two) * 1e6;
    assert_rel(comm_coll_ms(&h100, COLL_ALL_REDUCE, &two, big), 2 * lat_x + big / bw2, 1e-12);
    /* 8 members a node over two nodes: a chain of 7 intra-node steps each way, one tree level */
    comm_group wide = comm_dp_group(&h100, &(mesh){1, 1, 1, 16}, 0);
    assert_int_equal(wide.per_node, 8);
    double bww = comm_busbw_gbps(&h100, COLL_ALL_REDUCE, &wide) * 1e6, small = 1e5;
    double f16 = 2.0 * 15 / 16;
    assert_rel(comm_coll_ms(&h100, COLL_ALL_REDUCE, &wide, small),
               fmin(30 * lat_x + small * f16 / bww,
                    2 * (7 * lat_in + 1 * lat_x) + 2 * small / (0.92 * 0.6 * bww)), 1e-12);
    /* resized: the 2,048 rails widened to 4,096 GPUs keep 2 a node; 16 of 8 a node cut to 4, 2 */
    comm_group w2 = comm_group_resized(rails, 4096), c4 = comm_group_resized(wide, 4);
    assert_int_equal(w2.n, 4096);
    assert_int_equal(w2.per_node, 2);
    assert_int_equal(c4.per_node, 2);
    assert_int_equal(comm_group_resized(comm_group_flat(8, 0), 4).per_node, 4);
    /* never faster as the rails grow, and the latency does grow */
    double prev = 0;
    for (int n = 2; n <= 16384; n += n / 3 + 1) {
        comm_group g = comm_dp_group(&h100, &(mesh){8, 1, 1, n}, 0);
        double t = comm_coll_ms(&h100, COLL_ALL_REDUCE, &g, B);
        assert_true(t >= prev * (1 - 1e-12));
        prev = t;
    }
    assert_true(prev > comm_coll_ms(&h100, COLL_ALL_REDUCE, &two, B));
    /* rings only: p4d, and a JSON spec that says so */
    cluster_spec p4 = p4d(), json;
    assert_false(p4.nccl_tree);
    dp_err err = {0};
    assert_int_equal(cluster_parse_json("{\"name\": \"x\", \"gpu\": \"h100\", \"intra_gbit\": 3600, "
                                        "\"intra_latency_us\": 2, \"inter_gbit\": 400, "
                                        "\"inter_latency_us\": 5, \"nccl_tree\": false}",
                                        "x.json", &json, &err),
                     DP_OK);
    assert_false(json.nccl_tree);
    double bwj = comm_busbw_gbps(&json, COLL_ALL_REDUCE, &rails) * 1e6;
    assert_rel(comm_coll_ms(&json, COLL_ALL_REDUCE, &rails, B), 2 * 2047 * lat_x + B * factor / bwj,
               1e-12);
    json.nccl_tree = 1;
    assert_true(comm_coll_ms(&json, COLL_ALL_REDUCE, &rails, B) < 2 * 2047 * lat_x);
}

static void test_memory_and_comm_closed_forms(void **state)
{
    (void)state;
    /* 1000 MB of fp16 params = 500 M params: 16 bytes each without ZeRO. */
    assert_near(memory_model_state_mb(1000, NULL, 0, 4), 8000, 1e-9);
    assert_near(memory_model_state_mb(1000, NULL, 1, 4), 1000 + 1000 + 6000 / 4.0, 1e-9);
    assert_near(memory_model_state_mb(1000, NULL, 2, 4), 1000 + 1000 / 4.0 + 6000 / 4.0, 1e-9);
    assert_near(memory_model_state_mb(1000, NULL, 3, 4), 8000 / 4.0, 1e-9);
    cluster_spec c = p4d();
    /* intra-node: 0 µs + 1e9 bytes at NVLink3's 300 GB/s per direction x NCCL's send/recv share
     * (195 of 300 GB/s); inter-node: DynaPipe's 4 ms + 8e9 bits at 100 Gbit/s */
    assert_near(comm_p2p_ms(&c, 0, 1, 1e9), 1e9 / 195e9 * 1e3, 1e-9);
    assert_near(comm_p2p_ms(&c, 7, 8, 1e9), 4.0 + 8e9 / 100e9 * 1e3, 1e-9);
    comm_group ring4 = comm_group_flat(4, 1), solo = comm_group_flat(1, 1);
    assert_near(comm_coll_ms(&c, COLL_ALL_REDUCE, &ring4, 1e9), 6 * 4.0 + 1.5 * 80.0, 1e-9);
    assert_near(comm_coll_ms(&c, COLL_ALL_REDUCE, &solo, 1e9), 0, 0);
    const model_spec *gpt = model_preset("gpt-6.7b-16l"), *t5 = model_preset("t5-11b-24l");
    assert_near(comm_act_bytes(gpt, 0, 4, 2, 1024, 0), 2.0 * 2 * 1024 * 4096, 0);
    assert_near(comm_act_bytes(t5, 2, 4, 1, 512, 64), 2.0 * 1024 * (512 + 64), 0);
    stage_placement pl = placement_stage(t5, NULL, 1, 4);
    assert_int_equal(pl.enc_layers, 12);
    assert_int_equal(pl.dec_layers, 0);
    pl = placement_stage(t5, NULL, 3, 4);
    assert_int_equal(pl.dec_layers, 12);
    pl = placement_stage(gpt, NULL, 0, 3);
    assert_int_equal(pl.enc_layers, 6); /* 16 layers over 3 stages: 6, 5, 5 */
}

/* Uneven stages (--layers-per-stage): every split of GPT's layers over nv virtual stages that the
 * rule accepts places each stage's listed layers from the right index; one that breaks a rule (a
 * count, the sum, an empty middle stage, an encoder-decoder) is refused; all others accepted. */
static void test_placement_split(void **state)
{
    (void)state;
    model_spec m = *model_preset("gpt-tiny");
    m.enc_layers = 5;
    for (int nv = 1; nv <= 4; nv++) {
        int total = 1;
        for (int v = 0; v < nv; v++) total *= 7; /* every split of 0..6 layers a stage */
        for (int code = 0; code < total; code++) {
            pipeline_split sp = {.n = nv};
            int sum = 0, ok = 1;
            for (int v = 0, c = code; v < nv; v++, c /= 7) {
                sp.layers[v] = c % 7, sum += sp.layers[v];
                if (sp.layers[v] == 0 && v != 0 && v != nv - 1) ok = 0;
            }
            ok &= sum == 5;
            assert_int_equal(placement_split_check(&m, &sp, nv, NULL) == DP_OK, ok);
            for (int v = 0, first = 0; ok && v < nv; v++) {
                stage_placement p = placement_stage(&m, &sp, v, nv);
                assert_int_equal(p.enc_layers, sp.layers[v]);
                assert_int_equal(p.first_layer, first);
                first += sp.layers[v];
            }
            pipeline_split other = sp;
            other.n = nv + 1; /* one count too many */
            if (nv < 4) assert_int_not_equal(placement_split_check(&m, &other, nv, NULL), DP_OK);
        }
    }
    pipeline_split sp;
    assert_int_equal(placement_split_parse("0,2,3,0", &sp), 0);
    char text[64];
    placement_split_format(&sp, text, sizeof text);
    assert_string_equal(text, "0,2,3,0");
    static const char *const bad[] = {"", "1,,2", "1,2,", "-1,2", "1;2", "a", "1, 2", "+1"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        assert_int_equal(placement_split_parse(bad[k], &sp), -1);
    pipeline_split t5split = {.n = 2, .layers = {12, 12}};
    assert_int_not_equal(placement_split_check(model_preset("t5-11b-12l"), &t5split, 2, NULL), DP_OK);
}

/* The split by rule (--layers-per-stage less:F,L) against torchtitan's
 * generate_llm_fqn_per_model_part, re-implemented here as it is written (its module lists, one
 * layer name at a time, stopping at the model's layers), over 1-20 layers, 1-12 virtual stages and
 * F, L in 0..3: where torchtitan accepts the split, dpsim accepts it and places the same layers
 * from the same index; where a middle stage would hold none or an end fewer than none, dpsim
 * refuses it (torchtitan also refuses an end of none, which dpsim allows: the embedding or the
 * head alone, as a list may have it). less:0,0 is the even split. */
static void torchtitan_split(int num_stages, int num_layers, int in_w, int out_w, int *layers,
                             int *ok)
{
    *ok = 1;
    if (num_stages == 1) { /* the single stage gets everything */
        layers[0] = num_layers;
        return;
    }
    int eff = num_layers + in_w + out_w;
    if (num_stages > eff) *ok = 0;
    int per = eff / num_stages, extra = eff % num_stages;
    if (per == 0 || in_w > per || out_w > per) *ok = 0;
    int current = 0;
    for (int i = 0; i < num_stages; i++) {
        int eff_i = per + (i < extra ? 1 : 0), n = 0;
        int rest = i == 0 ? eff_i - in_w : i == num_stages - 1 ? eff_i - out_w : eff_i;
        for (int k = 0; k < rest; k++)
            if (current < num_layers) n++, current++;
        layers[i] = n;
    }
}

static void test_placement_split_rule(void **state)
{
    (void)state;
    model_spec m = *model_preset("gpt-tiny");
    for (int L = 1; L <= 20; L++)
        for (int nv = 1; nv <= 12; nv++)
            for (int a = 0; a <= 3; a++)
                for (int b = 0; b <= 3; b++) {
                    m.enc_layers = L;
                    pipeline_split sp = {.less_first = a, .less_last = b};
                    int want[16], tt_ok;
                    torchtitan_split(nv, L, a, b, want, &tt_ok);
                    /* dpsim's own bounds, from torchtitan's arithmetic before its caps */
                    int eff = L + a + b, dp_ok = 1;
                    for (int v = 0; v < nv; v++) {
                        int n = eff / nv + (v < eff % nv) - (v == 0 ? a : 0) - (v == nv - 1 ? b : 0);
                        if (nv == 1) n = L;
                        if (n < (v == 0 || v == nv - 1 ? 0 : 1)) dp_ok = 0;
                    }
                    if (a == 0 && b == 0 && nv > L) dp_ok = 0; /* the even split's own rule */
                    dp_status st = placement_split_check(&m, &sp, nv, NULL);
                    assert_int_equal(st == DP_OK, dp_ok);
                    if (tt_ok) assert_int_equal(st, DP_OK);
                    if (st != DP_OK) continue;
                    for (int v = 0, first = 0; v < nv; v++) {
                        stage_placement p = placement_stage(&m, &sp, v, nv);
                        if (tt_ok) assert_int_equal(p.enc_layers, want[v]);
                        /* accepted where torchtitan refuses (an end of none): still every
                         * layer once, in order, a layer on each middle stage */
                        assert_true(p.enc_layers >= (v == 0 || v == nv - 1 ? 0 : 1));
                        assert_int_equal(p.first_layer, first);
                        first += p.enc_layers;
                        if (v == nv - 1) assert_int_equal(first, L);
                        if (a == 0 && b == 0) { /* the even split */
                            stage_placement e = placement_stage(&m, NULL, v, nv);
                            assert_int_equal(e.enc_layers, p.enc_layers);
                            assert_int_equal(e.first_layer, p.first_layer);
                        }
                    }
                }
    pipeline_split sp;
    char text[64];
    assert_int_equal(placement_split_parse("less:1,2", &sp), 0);
    assert_int_equal(sp.n, 0);
    assert_int_equal(sp.less_first, 1);
    assert_int_equal(sp.less_last, 2);
    placement_split_format(&sp, text, sizeof text);
    assert_string_equal(text, "less:1,2");
    assert_int_equal(placement_split_parse("less:1048576,0", &sp), 0); /* 2^20, the bound */
    assert_int_equal(sp.less_first, 1 << 20);
    static const char *const bad[] = {"less:", "less:1", "less:1,", "less:,1", "less:-1,1",
                                      "less:1,-1", "less:+1,1", "less: 1,1", "less:1, 1",
                                      "less:1,1,1", "less:1,1x", "less:a,b", "less:99999999,1",
                                      "less:1048577,0", "less:0,1048577"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
        assert_int_equal(placement_split_parse(bad[k], &sp), -1);
    sp.less_first = sp.less_last = 1;
    assert_int_not_equal(placement_split_check(model_preset("t5-11b-12l"), &sp, 2, NULL), DP_OK);
}

/* Placement over a grid of models and stage counts, against its rules counted here: every layer
 * placed once, sides split within one layer, one embedding and one head, T5's decoder the second
 * half (its first stage the first decoder), and each boundary's transfer what that side holds. */
static void test_placement_grid(void **state)
{
    (void)state;
    for (int arch = 0; arch < 2; arch++)
        for (int layers = 1; layers <= 9; layers++)
            for (int nv = 1; nv <= 2 * layers; nv++) {
                model_spec m = *model_preset(arch ? "t5-tiny" : "gpt-tiny");
                m.enc_layers = m.dec_layers = layers;
                if (arch && nv > 1 && (nv % 2 || nv / 2 > layers)) continue; /* refused */
                if (!arch && nv > layers) continue;
                assert_int_equal(placement_split_check(&m, NULL, nv, NULL), DP_OK);
                int enc = 0, dec = 0, emb = 0, head = 0, lo[2] = {1 << 20, 1 << 20}, hi[2] = {0, 0};
                for (int v = 0; v < nv; v++) {
                    stage_placement p = placement_stage(&m, NULL, v, nv);
                    /* a layer's index in its component: the layers of the stages before on its side */
                    assert_int_equal(p.first_layer, p.decoder ? dec : enc);
                    enc += p.enc_layers, dec += p.dec_layers, emb += p.embedding, head += p.head;
                    int side = p.decoder, n = side ? p.dec_layers : p.enc_layers;
                    if (!(arch && nv == 1)) {
                        lo[side] = n < lo[side] ? n : lo[side];
                        hi[side] = n > hi[side] ? n : hi[side];
                    }
                    int want_decoder = arch && nv > 1 && v >= nv / 2;
                    assert_int_equal(p.decoder, want_decoder);
                    assert_int_equal(p.first_decoder, want_decoder && v == nv / 2);
                    assert_int_equal(p.embedding, v == 0);
                    assert_int_equal(p.head, v == nv - 1);
                    double e = placement_act_elems(&m, v, nv, 3, 40, 7);
                    assert_true(e == 3.0 * m.hidden * (want_decoder ? 47 : 40));
                    /* the wire's parts: what v sends is what v + 1 receives, activation forward
                     * and gradient back, and counts placement_act_elems; a stage's hidden state
                     * is its own side's length (decoder 7, encoder 40), the encoder output 40 */
                    if (v + 1 < nv) {
                        stage_placement q = placement_stage(&m, NULL, v + 1, nv);
                        double len_v = p.decoder ? 7 : 40, len_q = q.decoder ? 7 : 40;
                        for (int grad = 0; grad < 2; grad++) {
                            placement_wire out = placement_wire_parts(grad ? &q : &p, grad, 1);
                            placement_wire in = placement_wire_parts(grad ? &p : &q, grad, 0);
                            double sent = (out.hidden ? (grad ? len_q : len_v) : 0) + (out.enc ? 40 : 0);
                            double got = (in.hidden ? (grad ? len_v : len_q) : 0) + (in.enc ? 40 : 0);
                            assert_true(sent == got);
                            assert_true(3.0 * m.hidden * sent == e);
                        }
                    }
                }
                assert_int_equal(enc, layers);
                assert_int_equal(dec, arch ? layers : 0);
                assert_int_equal(emb, 1);
                assert_int_equal(head, 1);
                for (int side = 0; side < 2; side++)
                    if (hi[side] > 0) assert_true(hi[side] - lo[side] <= 1);
            }
    assert_true(placement_wire_share(1, 1, 1) == 1.0);
    assert_true(placement_wire_share(4, 1, 1) == 0.25);  /* SP: each tp GPU its tokens */
    assert_true(placement_wire_share(4, 1, 0) == 1.0);   /* without: each the whole */
    assert_true(placement_wire_share(2, 3, 1) == 1.0 / 6);
    assert_int_equal(placement_token_shards(8, 1), 8);
    assert_int_equal(placement_token_shards(8, 0), 1);
}

static void test_calibration_recovers_known_parameters(void **state)
{
    (void)state;
    /* A profile written from the analytic model with known parameters is fitted back exactly. */
    const model_spec *m = model_preset("gpt-6.7b-16l");
    cluster_spec hw = p4d();
    analytic_params truth = {0.55, 0.2, 0.7, 1.2, 2.0, 2.1};
    cost_model *am = NULL, *pm = NULL;
    dp_err err = {0};
    assert_int_equal(cost_analytic_new(m, &hw, 1, RECOMPUTE_NONE, &truth, &am, &err), DP_OK);
    static char buf[1 << 16];
    size_t n = (size_t)snprintf(buf, sizeof buf,
                                "tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value\n");
    for (int mbs = 1; mbs <= 64; mbs *= 2)
        for (int s = 64; s <= 4096; s *= 2) {
            cost_layer l;
            cost_shape sh = cost_shape_rows(mbs, s, 0);
            assert_int_equal(cost_query(am, COMP_ENCODER, &sh, &l, NULL), DP_OK);
            n += (size_t)snprintf(buf + n, sizeof buf - n,
                                  "1,none,encoder,fwd_ms,%d,%d,0,%.12g\n1,none,encoder,bwd_ms,%d,%d,0,%.12g\n",
                                  mbs, s, l.fwd_ms, mbs, s, l.bwd_ms);
        }
    assert_int_equal(cost_profile_load(tmp_file(".csv", buf), m, &hw, 1, RECOMPUTE_NONE, &pm, &err),
                     DP_OK);
    calib_result res;
    assert_int_equal(calibrate_fit(pm, 0.2, 3, &res, &err), DP_OK);
    if (!(res.holdout_median_ape < 0.5))
        fail_msg("held-out median %.3f%%, gemm %.3f attn %.3f mem %.3f floors %.3f %.3f ratio %.3f",
                 res.holdout_median_ape, res.params.gemm_eff, res.params.attn_eff,
                 res.params.mem_eff, res.params.fwd_floor_ms, res.params.bwd_floor_ms,
                 res.params.bwd_ratio);
    assert_rel(res.params.gemm_eff, truth.gemm_eff, 0.05);
    assert_rel(res.params.bwd_ratio, truth.bwd_ratio, 0.05);
    cost_model_free(am);
    cost_model_free(pm);
}

static void test_calibration_on_a100_grid(void **state)
{
    (void)state;
    /* The closing-note figure: held-out median error of the fit to the real GPT grid. */
    cost_model *cm = load_profile(GPT_PROFILE, "gpt-6.7b-16l", 1, RECOMPUTE_NONE);
    calib_result res;
    dp_err err = {0};
    assert_int_equal(calibrate_fit(cm, 0.2, 1, &res, &err), DP_OK);
    assert_true(res.holdout_median_ape < 10);
    assert_int_equal(res.n_holdout + res.n_fit, 72); /* every measured TP1 cell */
    cost_model_free(cm);
}

/* MFU's numerator against the published GPT-2 count: a token passes through every parameter but
 * the position embeddings (786,432) and the final layer norm (1,536) in a matmul, 6 FLOPs each
 * for training, plus PaLM's attention term 12 L h s per token. */
/* ---- varlen attention and FlashAttention memory (cost.h cost_shape.varlen) ------------------- */

/* A varlen shape of the given samples (GPT lengths, already padded) in one row of length row. */
static cost_shape varlen_row(const int *len, int n, int row)
{
    cost_shape s = cost_shape_rows(1, row, 0);
    s.varlen = 1;
    for (int i = 0; i < n; i++) s.enc_sq += (double)len[i] * len[i];
    return s;
}

/* The analytic model of a preset on p4d at its default parameters. */
static cost_model *default_analytic(const char *model, recompute_mode rc)
{
    cluster_spec hw = p4d();
    analytic_params p;
    analytic_params_default(&p);
    cost_model *cm = NULL;
    dp_err err = {0};
    if (cost_analytic_new(model_preset(model), &hw, 1, rc, &p, &cm, &err) != DP_OK)
        fail_msg("%s", err.msg);
    return cm;
}

static void assert_layer_equal(const cost_layer *a, const cost_layer *b, double tol)
{
    assert_near(a->fwd_ms, b->fwd_ms, tol);
    assert_near(a->bwd_ms, b->bwd_ms, tol);
    assert_near(a->stored_act_mb, b->stored_act_mb, tol);
    assert_near(a->peak_act_mb, b->peak_act_mb, tol);
}

static void test_varlen_row_of_one_sample_costs_the_sample(void **state)
{
    (void)state;
    /* Both cost models, every recompute mode: a row holding one sample is that sample alone. */
    for (int rc = 0; rc < RECOMPUTE_COUNT; rc++) {
        cost_model *cms[2] = {load_profile(GPT_PROFILE, "gpt-6.7b-16l", 1, (recompute_mode)rc),
                              default_analytic("gpt-6.7b-16l", (recompute_mode)rc)};
        dp_err err = {0};
        static const int lens[] = {16, 120, 512, 1000, 2048};
        for (int k = 0; k < 2; k++)
            for (int i = 0; i < 5; i++) {
                cost_shape alone = cost_shape_rows(1, lens[i], 0), row = varlen_row(&lens[i], 1, lens[i]);
                cost_layer a, b;
                if (cost_query(cms[k], COMP_ENCODER, &alone, &a, &err) != DP_OK) fail_msg("%s", err.msg);
                assert_int_equal(cost_query(cms[k], COMP_ENCODER, &row, &b, &err), DP_OK);
                assert_layer_equal(&a, &b, 1e-9);
            }
        /* T5 on its profile: one (input, target) pair */
        cost_model_free(cms[0]), cost_model_free(cms[1]);
    }
    cost_model *t5 = load_profile(T5_PROFILE, "t5-11b-12l", 1, RECOMPUTE_NONE);
    cost_shape alone = cost_shape_rows(1, 512, 128), row = alone;
    row.varlen = 1, row.enc_sq = 512.0 * 512, row.dec_sq = 128.0 * 128, row.enc_dec = 512.0 * 128;
    for (int c = COMP_ENCODER; c <= COMP_DECODER; c++) {
        cost_layer a, b;
        assert_int_equal(cost_query(t5, (cost_component)c, &alone, &a, NULL), DP_OK);
        assert_int_equal(cost_query(t5, (cost_component)c, &row, &b, NULL), DP_OK);
        assert_layer_equal(&a, &b, 1e-9);
    }
    cost_model_free(t5);
}

static void test_varlen_row_never_costs_more_than_padded(void **state)
{
    (void)state;
    /* Random rows of samples summing to at most the row: per-sample attention is never dearer
     * than the whole row's, for either cost model, and strictly cheaper with two samples or more
     * (the analytic model's attention term, the profile's fitted one, are positive). */
    cost_model *cms[3] = {load_profile(GPT_PROFILE, "gpt-6.7b-16l", 1, RECOMPUTE_NONE),
                          default_analytic("gpt-6.7b-16l", RECOMPUTE_NONE),
                          load_profile(GPT_PROFILE, "gpt-6.7b-16l", 1, RECOMPUTE_SELECTIVE)};
    srand(7);
    for (int trial = 0; trial < 300; trial++) {
        int row = 16 * (1 + rand() % 128), lens[64], n = 0, used = 0;
        while (n < 64) {
            int l = 8 * (1 + rand() % (row / 8));
            if (used + l > row) break;
            lens[n++] = l, used += l;
        }
        if (n == 0) continue;
        cost_shape padded = cost_shape_rows(1, row, 0), v = varlen_row(lens, n, row);
        for (int k = 0; k < 3; k++) {
            cost_layer a, b;
            assert_int_equal(cost_query(cms[k], COMP_ENCODER, &padded, &a, NULL), DP_OK);
            assert_int_equal(cost_query(cms[k], COMP_ENCODER, &v, &b, NULL), DP_OK);
            assert_true(b.fwd_ms <= a.fwd_ms + 1e-12 && b.bwd_ms <= a.bwd_ms + 1e-12);
            assert_true(b.stored_act_mb <= a.stored_act_mb + 1e-12);
            assert_true(b.peak_act_mb <= a.peak_act_mb + 1e-12);
            if (n >= 2 && k < 2 && row >= 512) assert_true(b.fwd_ms < a.fwd_ms);
        }
    }
    for (int k = 0; k < 3; k++) cost_model_free(cms[k]);
}

static void test_varlen_analytic_flops_are_the_samples_own(void **state)
{
    (void)state;
    /* The analytic attention FLOPs of a varlen row are the sum of each sample's alone; the dense
     * FLOPs are the row's. Closed form: 4 * s^2 * hk per sample. */
    const model_spec *m = model_preset("gpt-6.7b-16l");
    static const int lens[] = {512, 256, 1024, 64};
    cost_shape v = varlen_row(lens, 4, 2048), whole = cost_shape_rows(1, 2048, 0);
    double dense, attn, dense_row, attn_row, sum = 0;
    analytic_flops(m, COMP_ENCODER, &v, 1, &dense, &attn);
    analytic_flops(m, COMP_ENCODER, &whole, 1, &dense_row, &attn_row);
    for (int i = 0; i < 4; i++) {
        cost_shape one = cost_shape_rows(1, lens[i], 0);
        double d1, a1;
        analytic_flops(m, COMP_ENCODER, &one, 1, &d1, &a1);
        sum += a1;
    }
    double hk = (double)m->heads * m->kv_channels;
    assert_rel(attn, sum, 1e-12);
    assert_rel(attn, 4 * hk * (512.0 * 512 + 256.0 * 256 + 1024.0 * 1024 + 64.0 * 64), 1e-12);
    assert_rel(dense, dense_row, 1e-12);
    assert_rel(attn_row, 4 * hk * 2048.0 * 2048, 1e-12);
}

static void test_profile_attention_fit_recovers_a_known_term(void **state)
{
    (void)state;
    /* A profile written from a known polynomial (a token-linear part and an attention term c * b
     * * s^2, no floor) is fitted back: the varlen correction then matches the polynomial at
     * the samples' own lengths exactly, and the held-out error is ~0. */
    const double c0 = 0.5, c1 = 0.01, c2 = 2e-3, c3 = 3e-7, m3 = 2e-5;
    static char buf[1 << 16];
    size_t n = (size_t)snprintf(buf, sizeof buf,
                                "tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value\n");
    for (int b = 1; b <= 16; b *= 2)
        for (int s = 128; s <= 4096; s *= 2) {
            double t = c0 + c1 * b + c2 * b * s + c3 * b * (double)s * s;
            double mem = 10 + 0.1 * b * s + m3 * b * (double)s * s;
            n += (size_t)snprintf(buf + n, sizeof buf - n,
                                  "1,none,encoder,fwd_ms,%d,%d,0,%.15g\n1,none,encoder,bwd_ms,%d,%d,0,"
                                  "%.15g\n1,none,encoder,stored_act_mb,%d,%d,0,%.15g\n1,none,encoder,"
                                  "peak_act_mb,%d,%d,0,%.15g\n",
                                  b, s, t, b, s, 2 * t, b, s, mem, b, s, mem + 1);
        }
    cluster_spec hw = p4d();
    cost_model *cm = NULL;
    dp_err err = {0};
    if (cost_profile_load(tmp_file(".csv", buf), model_preset("gpt-6.7b-16l"), &hw, 1,
                          RECOMPUTE_NONE, &cm, &err) != DP_OK)
        fail_msg("%s", err.msg);
    cost_attn_fit fit;
    double per_sq;
    assert_int_equal(cost_profile_attn_fit(cm, COMP_ENCODER, &fit, &per_sq), DP_OK);
    assert_true(fit.ok);
    assert_rel(per_sq, c3, 1e-6);
    assert_true(fit.max_err_pct < 1e-6);
    static const int lens[] = {1024, 512, 256};
    cost_shape v = varlen_row(lens, 3, 2048);
    cost_layer l;
    assert_int_equal(cost_query(cm, COMP_ENCODER, &v, &l, NULL), DP_OK);
    double sq = 1024.0 * 1024 + 512.0 * 512 + 256.0 * 256;
    assert_rel(l.fwd_ms, c0 + c1 + c2 * 2048 + c3 * sq, 1e-6);
    assert_rel(l.stored_act_mb, 10 + 0.1 * 2048 + m3 * sq, 1e-6);
    /* FlashAttention memory drops the s^2 memory term whole; times stay */
    cm->flash_attn = 1;
    cost_shape row = cost_shape_rows(2, 2048, 0);
    assert_int_equal(cost_query(cm, COMP_ENCODER, &row, &l, NULL), DP_OK);
    assert_rel(l.stored_act_mb, 10 + 0.1 * 4096, 1e-6);
    assert_rel(l.fwd_ms, c0 + 2 * c1 + c2 * 4096 + c3 * 2 * 2048.0 * 2048, 1e-9);
    cost_model_free(cm);
}

static void test_flash_attention_memory_agrees_across_models(void **state)
{
    (void)state;
    /* FlashAttention memory: the analytic model drops exactly its 5as^2b/t score bytes; the
     * profile drops its fitted s^2 term. On the A100 GPT-6.7B profile the two stored figures
     * land within 5% of each other at 2048 (the profile's score term is fitted, the analytic
     * one is Korthikanti's closed form). */
    const model_spec *m = model_preset("gpt-6.7b-16l");
    cost_model *am = default_analytic("gpt-6.7b-16l", RECOMPUTE_NONE),
               *pm = load_profile(GPT_PROFILE, "gpt-6.7b-16l", 1, RECOMPUTE_NONE);
    am->flash_attn = pm->flash_attn = 1;
    cost_shape s = cost_shape_rows(1, 2048, 0);
    cost_layer a, b;
    assert_int_equal(cost_query(am, COMP_ENCODER, &s, &a, NULL), DP_OK);
    assert_int_equal(cost_query(pm, COMP_ENCODER, &s, &b, NULL), DP_OK);
    double full = analytic_stored_act_bytes(m, COMP_ENCODER, &s, 1, RECOMPUTE_NONE, 0) / 1e6;
    double scores = 5.0 * m->heads * 2048.0 * 2048 / 1e6;
    assert_rel(a.stored_act_mb, full - scores, 1e-12);
    assert_rel(b.stored_act_mb, a.stored_act_mb, 0.05);
    cost_model_free(am), cost_model_free(pm);
}

static void test_model_train_flops_gpt2(void **state)
{
    (void)state;
    const model_spec *m = model_preset("gpt2-124m");
    double s = 1024, matmul = 124439808.0 - 786432 - 1536;
    /* PaLM's count (App. B): 6N per token plus 12 L H Q T, attention whole */
    double want = 6 * matmul * s + 12 * 12 * 768 * s * s;
    assert_rel(model_train_flops(m, 1024, 0, FLOPS_NONCAUSAL), want, 1e-12);
    /* twice the tokens: twice the dense part, four times attention */
    assert_rel(model_train_flops(m, 2048, 0, FLOPS_NONCAUSAL),
               2 * 6 * matmul * s + 4 * 12 * 12 * 768 * s * s, 1e-12);
    /* causal: a decoder-only model's attention is half the square */
    assert_rel(model_train_flops(m, 1024, 0, FLOPS_CAUSAL), 6 * matmul * s + 6 * 12 * 768 * s * s,
               1e-12);
    /* selective recompute reruns the causal forward attention: 4 L H s^2 / 2 */
    assert_rel(model_recompute_flops(m, 1024, 0, 0, 1), 2 * 12 * 768 * s * s, 1e-12);
    /* a share of the GEMMs: that share of 2 x the layers' parameters per token, not the head's */
    assert_rel(model_recompute_flops(m, 1024, 0, 0.25, 0),
               0.25 * 2 * (double)model_layers_active_params(m) * s, 1e-12);
}

/* T5: only the decoder's self-attention is causal; the encoder's and the cross attention whole. */
static void test_model_train_flops_t5_causal_parts(void **state)
{
    (void)state;
    const model_spec *m = model_preset("t5-11b-8l");
    assert_non_null(m);
    double d = 128, hk = (double)m->heads * m->kv_channels;
    double gap = model_train_flops(m, 512, 128, FLOPS_NONCAUSAL) -
                 model_train_flops(m, 512, 128, FLOPS_CAUSAL);
    assert_rel(gap, 12 * hk * m->dec_layers * d * d / 2, 1e-9);
}

/* The kernels' inferred figures follow the rule their sources state, from the published ones:
 * Triton's backward is FlashAttention-2's times Triton's forward over FA2's (to the TFLOP/s the
 * tables round to); each kernel runs on its own architecture's presets and on a user's GPU. */
static void test_attention_kernels_inferred_and_placed(void **state)
{
    (void)state;
    const attn_kernel *tr = attn_kernel_find("triton-h100"), *fa2 = attn_kernel_find("fa2-h100");
    assert_non_null(tr);
    assert_non_null(fa2);
    for (int i = 0; i < ATTN_KERNEL_LENS; i++) {
        assert_true(fabs(tr->bwd_causal[i] - fa2->bwd_causal[i] * tr->fwd_causal[i] /
                                                 fa2->fwd_causal[i]) <= 1.0);
        assert_true(fabs(tr->bwd_full[i] - fa2->bwd_full[i] * tr->fwd_full[i] / fa2->fwd_full[i]) <=
                    1.0);
    }
    int n;
    const attn_kernel *ks = attn_kernels(&n);
    for (int i = 0; i < n; i++) {
        int on_a100 = attn_kernel_runs_on(&ks[i], "a100-80gb"),
            on_h100 = attn_kernel_runs_on(&ks[i], "h100"), on_b200 = attn_kernel_runs_on(&ks[i], "b200");
        assert_int_equal(on_a100 + on_h100 + on_b200, 1); /* one architecture each */
        assert_true(attn_kernel_runs_on(&ks[i], "my-own-gpu"));
        for (int j = 0; j < n; j++) /* one architecture, one list (stack.h finds kernels by it) */
            if (attn_kernel_runs_on(&ks[j], "h100") == on_h100 &&
                attn_kernel_runs_on(&ks[j], "b200") == on_b200)
                assert_string_equal(ks[j].runs_on, ks[i].runs_on);
    }
    /* every preset's default kernel runs on it */
    const gpu_spec *g = gpu_presets(&n);
    for (int i = 0; i < n; i++)
        if (g[i].attn) assert_true(attn_kernel_runs_on(g[i].attn, g[i].name));
    /* a kernel's rates scale with the GPU's peak over the one it was measured on: 1 on the GPUs
     * of its own peak, torchtitan's lower-peak H100 912 / 989, a user's GPU its own */
    const attn_kernel *cudnn = attn_kernel_find("cudnn-h100"), *a100 = attn_kernel_find("fa2-a100");
    assert_near(attn_kernel_peak_share(cudnn, gpu_preset("h100")), 1, 0);
    assert_near(attn_kernel_peak_share(cudnn, gpu_preset("h200")), 1, 0);
    assert_near(attn_kernel_peak_share(a100, gpu_preset("a100-80gb")), 1, 0);
    assert_near(attn_kernel_peak_share(cudnn, gpu_preset("h100-hbm2e")), 912.0 / 989, 1e-12);
    gpu_spec mine = *gpu_preset("h100");
    mine.peak_tflops = 500;
    assert_near(attn_kernel_peak_share(cudnn, &mine), 500.0 / 989, 1e-12);
    /* (the layer's time: test_precision's test_attention_kernel_scales_with_the_peak) */
    cluster_spec gt;
    assert_int_equal(cluster_resolve("grand-teton", &gt, NULL), DP_OK);
    assert_true(attn_kernel_runs_on(gt.gpu.attn, gt.gpu.name));
    assert_string_equal(gt.gpu.attn->name, "cudnn-h100");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_train_flops_gpt2),
        cmocka_unit_test(test_attention_kernels_inferred_and_placed),
        cmocka_unit_test(test_model_train_flops_t5_causal_parts),
        cmocka_unit_test(test_varlen_row_of_one_sample_costs_the_sample),
        cmocka_unit_test(test_varlen_row_never_costs_more_than_padded),
        cmocka_unit_test(test_varlen_analytic_flops_are_the_samples_own),
        cmocka_unit_test(test_profile_attention_fit_recovers_a_known_term),
        cmocka_unit_test(test_flash_attention_memory_agrees_across_models),
        cmocka_unit_test(test_profile_exact_on_grid_points),
        cmocka_unit_test(test_profile_infeasible_with_reason),
        cmocka_unit_test(test_profile_exact_linear_interpolation),
        cmocka_unit_test(test_profile_cp_rows),
        cmocka_unit_test(test_profile_monotone_where_data_is),
        cmocka_unit_test(test_profile_bad_files),
        cmocka_unit_test(test_profile_refuses_other_width),
        cmocka_unit_test(test_param_counts),
        cmocka_unit_test(test_flops_by_hand),
        cmocka_unit_test(test_korthikanti_closed_form),
        cmocka_unit_test(test_context_parallelism),
        cmocka_unit_test(test_json_round_trips),
        cmocka_unit_test(test_hf_import),
        cmocka_unit_test(test_bad_specs),
        cmocka_unit_test(test_memory_and_comm_closed_forms),
        cmocka_unit_test(test_flash_attention_time),
        cmocka_unit_test(test_nccl_collectives),
        cmocka_unit_test(test_nccl_tree),
        cmocka_unit_test(test_gqa_and_untied_heads),
        cmocka_unit_test(test_moe_counts),
        cmocka_unit_test(test_sliding_window),
        cmocka_unit_test(test_norm_epsilon),
        cmocka_unit_test(test_placement_grid),
        cmocka_unit_test(test_placement_split),
        cmocka_unit_test(test_placement_split_rule),
        cmocka_unit_test(test_calibration_recovers_known_parameters),
        cmocka_unit_test(test_calibration_on_a100_grid),
    };
    return cmocka_run_group_tests_name("models", tests, NULL, NULL);
}
