/*
 * test_floor.c — the tokens' floor that lets a search drop a configuration before planning it
 * (cost.h cost_token_floor_ms, stage_cost.h stage_model_token_floor, study.h prune_ms): never
 * above the time it bounds, on a grid of models, layouts, precisions, recompute modes and random
 * (padded and varlen) shapes, for a layer and for a device under --cp auto; not vacuous (most of
 * a large micro-batch's time); and a tune point cut at exactly its own simulated time is never
 * pruned, while one cut at half of it is, before planning where its tokens alone show it.
 */
#include "analytic_util.h"

#include "../../models/cost.h"
#include "../../models/hw.h"
#include "../../models/model.h"
#include "../../planner/setup.h"
#include "../../planner/tune_run.h"
#include "../../scheduler/stage_cost.h"

/* A random shape of the model's: mbs rows of up to max_len tokens, padded or varlen (samples of
 * their own lengths, the longest the row's), a T5 target too. */
static cost_shape random_shape(int t5, int max_len)
{
    int mbs = 1 + rand() % 16, len = 16 * (1 + rand() % (max_len / 16));
    cost_shape s = cost_shape_rows(mbs, len, t5 ? 16 * (1 + rand() % 64) : 0);
    if (rand() % 2) {
        s.varlen = 1, s.enc_max = len;
        for (int i = 0; i < mbs; i++) {
            double e = i == 0 ? len : 16 * (1 + rand() % (len / 16)), d = s.dec_len;
            s.enc_sq += e * e, s.dec_sq += d * d, s.enc_dec += e * d;
        }
    }
    return s;
}

static double tokens_of(const cost_model *cm, cost_component c, const cost_shape *s)
{
    int t5 = cm->model.arch == ARCH_T5;
    return (double)s->mbs * (c == COMP_DECODER || (c == COMP_POSTPROCESS && t5) ? s->dec_len
                                                                                 : s->enc_len);
}

static void test_layer_floor_never_above_the_query(void **state)
{
    (void)state;
    static const struct {
        const char *model, *hw;
        int fp8;
    } runs[] = {{"llama3.1-8b", "dgx-h100", 1}, {"gpt-6.7b-16l", "p4d", 0},
                {"t5-11b-12l", "p4d", 0}, {"llama3.1-70b", "dgx-h100", 1}};
    static const int tps[] = {1, 2, 8}, cps[] = {1, 2, 4};
    srand(11);
    long checked = 0;
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++)
        for (int ti = 0; ti < 3; ti++)
            for (int ci = 0; ci < 3; ci++)
                for (int rc = 0; rc < RECOMPUTE_COUNT; rc++)
                    for (int variant = 0; variant < 4; variant++) {
                        cost_model *cm = analytic(runs[r].model, runs[r].hw, tps[ti], (recompute_mode)rc, NULL);
                        int t5 = cm->model.arch == ARCH_T5;
                        if (cps[ci] > 1 && cost_model_set_cp(cm, cps[ci], variant == 3, NULL) != DP_OK) {
                            cost_model_free(cm);
                            continue;
                        }
                        if (variant == 1) cm->seq_parallel = 0;
                        if (variant == 2) cost_model_set_attention(cm, !cm->flash_attn, NULL);
                        if (variant == 3 && runs[r].fp8)
                            assert_int_equal(cost_model_set_precision(cm, PRECISION_FP8,
                                                                      GRAD_REDUCE_AUTO, NULL), DP_OK);
                        for (int k = 0; k < 12; k++) {
                            cost_shape s = random_shape(t5, t5 ? 2048 : 16384);
                            for (int c = 0; c < COMP_COUNT; c++) {
                                if (c == COMP_DECODER && !t5) continue;
                                cost_layer l;
                                if (cost_query(cm, (cost_component)c, &s, &l, NULL) != DP_OK) continue;
                                double floor = cost_token_floor_ms(cm, (cost_component)c);
                                assert_true(floor > 0);
                                double bound = floor * tokens_of(cm, (cost_component)c, &s);
                                if (!(l.fwd_ms + l.bwd_ms >= bound * (1 - 1e-12)))
                                    fail_msg("%s tp %d cp %d rc %d variant %d comp %d: %d x %d "
                                             "(varlen %d) takes %.6g ms, floor %.6g", runs[r].model,
                                             tps[ti], cps[ci], rc, variant, c, s.mbs, s.enc_len,
                                             s.varlen, l.fwd_ms + l.bwd_ms, bound);
                                checked++;
                            }
                        }
                        cost_model_free(cm);
                    }
    assert_true(checked > 2000);
}

/* Not vacuous: at a large micro-batch (8 x 4,096 tokens of Llama-3.1-8B on an H100, no recompute)
 * the floor is most of a layer's and of the head's time; a measured profile has none. */
static void test_floor_is_most_of_a_large_micro_batch(void **state)
{
    (void)state;
    cost_model *cm = analytic("llama3.1-8b", "dgx-h100", 1, RECOMPUTE_NONE, NULL);
    cost_shape s = cost_shape_rows(8, 4096, 0);
    for (int c = COMP_ENCODER; c < COMP_COUNT; c++) {
        if (c == COMP_DECODER || c == COMP_MOE) continue; /* a dense GPT's */
        cost_layer l;
        assert_int_equal(cost_query(cm, (cost_component)c, &s, &l, NULL), DP_OK);
        double share = cost_token_floor_ms(cm, (cost_component)c) * 8 * 4096 / (l.fwd_ms + l.bwd_ms);
        assert_true(share > 0.6 && share <= 1);
    }
    cost_model_free(cm);
}

/* A device's floor under --cp auto (each micro-batch at its own degree, the group's GPUs running
 * parts side by side) and with ZeRO-3's collectives: never above any device's fwd + bwd. */
static void test_device_floor_never_above_the_stage_model(void **state)
{
    (void)state;
    srand(5);
    static const char *const models[] = {"llama3.1-8b", "t5-11b-12l"};
    for (int mi = 0; mi < 2; mi++)
        for (int zero = 1; zero <= 3; zero += 2) {
            cost_model *cm = analytic(models[mi], mi ? "p4d" : "dgx-h100", 2, RECOMPUTE_SELECTIVE, NULL);
            int t5 = mi == 1;
            if (!t5) assert_int_equal(cost_model_set_cp_auto(cm, 4, 0, NULL), DP_OK);
            stage_model sm;
            dp_err err = {0};
            if (stage_model_init(&sm, cm, t5 ? 2 : 4, 1, 2, zero, 1e9, &err) != DP_OK)
                fail_msg("%s", err.msg);
            for (int k = 0; k < 200; k++) {
                cost_shape s = random_shape(t5, t5 ? 2048 : 16384);
                s.cp = t5 ? 0 : (int[]){0, 1, 2, 4}[rand() % 4];
                mb_cost c;
                if (stage_model_cost(&sm, &s, &c, NULL) != DP_OK) continue;
                for (int d = 0; d < sm.pp; d++) {
                    double e, x;
                    stage_model_token_floor(&sm, d, &e, &x);
                    assert_true(e > 0 || x > 0);
                    double bound = e * s.mbs * s.enc_len + x * s.mbs * s.dec_len;
                    if (!(c.fwd_ms[d] + c.bwd_ms[d] >= bound * (1 - 1e-12)))
                        fail_msg("%s zero %d device %d: %d x %d at cp %d takes %.6g ms, floor %.6g",
                                 models[mi], zero, d, s.mbs, s.enc_len, s.cp,
                                 c.fwd_ms[d] + c.bwd_ms[d], bound);
                }
            }
            cost_model_free(cm);
        }
}

/* tune's own path (planner_tune_point): a point cut at its own simulated time (a hair above) is
 * never pruned and simulates as without a cut; cut at half of it, it is pruned — before planning
 * by its tokens in some points. Batchings, schedules, pp, dp and recompute policies. */
static void test_cut_at_its_own_time_never_prunes(void **state)
{
    (void)state;
    plan_request p;
    plan_request_default(&p);
    p.cost.model = "llama3.1-8b", p.cost.hw = "dgx-h100", p.cost.quiet = 1;
    p.global_tokens = 131072, p.max_seqlen = 8192, p.iterations = 2;
    plan_env env;
    dp_err err = {0};
    if (planner_setup(&p, &env, &err) != DP_OK) fail_msg("%s", err.msg);
    static const struct {
        const char *batching, *schedule;
        int tp, pp, dp, zero, recompute;
    } pts[] = {{"dynamic", "1f1b", 1, 4, 2, 1, RECOMPUTE_NONE},
               {"dynamic-varlen", "adaptive", 2, 4, 1, 0, RECOMPUTE_SELECTIVE},
               {"dynamic-varlen", "1f1b", 1, 1, 8, 3, RECOMPUTE_NONE},
               {"packing", "1f1b", 2, 2, 2, 1, RECOMPUTE_FULL},
               {"packing-ffd-varlen", "adaptive", 1, 8, 1, 0, RECOMPUTE_POLICY_DYNAMIC},
               {"token", "zb1", 1, 4, 2, 1, RECOMPUTE_NONE}};
    int unplanned = 0;
    for (size_t i = 0; i < sizeof pts / sizeof *pts; i++) {
        tune_point pt = {.batching = pts[i].batching, .schedule = pts[i].schedule, .chunks = 1,
                         .tp = pts[i].tp, .cp = 1, .pp = pts[i].pp, .dp = pts[i].dp,
                         .zero = pts[i].zero, .mbs = 1, .precision = PRECISION_BF16,
                         .mb_tokens = 4096, .recompute = pts[i].recompute};
        study_result whole, cut, half;
        if (planner_tune_point(&p, &env, &pt, NULL, 0, &whole, &err) != DP_OK) fail_msg("%s", err.msg);
        assert_true(whole.iterations == 2 && whole.time_s > 0);
        double ms = whole.time_s * 1e3;
        assert_int_equal(planner_tune_point(&p, &env, &pt, NULL, ms * (1 + 1e-9), &cut, &err), DP_OK);
        assert_true(cut.pruned_ms == 0);
        assert_true(cut.throughput_tokens_per_s == whole.throughput_tokens_per_s);
        assert_int_equal(planner_tune_point(&p, &env, &pt, NULL, ms / 2, &half, &err), DP_OK);
        assert_true(half.pruned_ms > ms / 2 && half.pruned_ms <= ms * (1 + 1e-9));
        unplanned += half.pruned_unplanned;
        study_result_release(&whole), study_result_release(&cut), study_result_release(&half);
    }
    assert_true(unplanned > 0);
    plan_env_release(&env);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_floor_never_above_the_query),
        cmocka_unit_test(test_floor_is_most_of_a_large_micro_batch),
        cmocka_unit_test(test_device_floor_never_above_the_stage_model),
        cmocka_unit_test(test_cut_at_its_own_time_never_prunes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
