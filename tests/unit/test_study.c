/*
 * test_study.c — whole runs (sim/study.c) on the measured A100 profiles and the shipped trace:
 * --recompute dynamic against planning each mode alone, and --keep-going's accounting.
 */
#include "testutil.h"

#include "../../scheduler/plan.h"
#include "../../sim/order_search.h"
#include "../../sim/study.h"

#define GPT_PROFILE "models/profiles/a100_gpt_6.7b_profile.csv"
#define T5_PROFILE "models/profiles/a100_t5_11b_profile.csv"
#define TRACE "traces/flanv2-100k.csv"

typedef struct setup {
    model_spec m;
    cluster_spec hw;
    cost_model *cm[RECOMPUTE_COUNT];
    batch_rules rules;
    trace t;
} setup;

static void setup_init(setup *s, const char *model, const char *profile, int max_seqlen)
{
    memset(s, 0, sizeof *s);
    s->m = *model_preset(model);
    cluster_preset("p4d", &s->hw);
    dp_err err = {0};
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        if (cost_profile_load(profile, &s->m, &s->hw, 1, (recompute_mode)m, &s->cm[m], &err) != DP_OK)
            fail_msg("%s", err.msg);
    batch_rules_default(&s->rules, s->m.arch);
    s->rules.max_seqlen = max_seqlen;
    s->rules.min_padded = 16;
    trace_init(&s->t);
    if (trace_load(TRACE, TRACE_FORMAT_AUTO, NULL, NULL, &s->t, &err) != DP_OK) fail_msg("%s", err.msg);
}

static void setup_release(setup *s)
{
    for (int m = 0; m < RECOMPUTE_COUNT; m++) cost_model_free(s->cm[m]);
    trace_release(&s->t);
}

/* Runs dynamic + schedule on 4 stages; mode < 0: --recompute dynamic, else that mode alone. */
static void run(setup *s, int mode, const char *sched, int iterations, int keep_going,
                study_result *r)
{
    study_opts o = {0};
    o.cm = s->cm[mode < 0 ? 0 : mode];
    if (mode < 0)
        for (int m = 0; m < RECOMPUTE_COUNT; m++) o.recompute_cm[m] = s->cm[m];
    o.rules = &s->rules;
    o.batching = batcher_find("dynamic");
    o.sched = schedule_find(sched);
    o.pp = 4, o.chunks = 1, o.dp = 1, o.zero = 1;
    o.mem_limit_mb = s->hw.mem_limit_mb;
    o.mbs = 1, o.mb_tokens = 2048;
    o.max_iterations = iterations;
    o.validate = 1;
    o.keep_going = keep_going;
    dp_err err = {0};
    if (study_run(&o, &s->t, r, &err) != DP_OK) fail_msg("%s", err.msg);
}

/* DynaPipe's rule, checked against each mode planned alone: every iteration of the dynamic run
 * uses the first of none, selective, full with which that iteration fits, and none is left out. */
static void check_dynamic(const char *model, const char *profile, int max_seqlen, int iterations,
                          int want_mixed)
{
    setup s;
    setup_init(&s, model, profile, max_seqlen);
    study_result alone[RECOMPUTE_COUNT], dyn;
    for (int m = 0; m < RECOMPUTE_COUNT; m++) run(&s, m, "1f1b", iterations, 1, &alone[m]);
    run(&s, -1, "1f1b", iterations, 0, &dyn);
    assert_int_equal(dyn.failed_iterations, 0);
    assert_int_equal(dyn.planned_oom, 0);
    assert_int_equal(dyn.n_iter, iterations);
    int used[RECOMPUTE_COUNT] = {0};
    for (int i = 0; i < dyn.n_iter; i++) {
        int want = -1;
        for (int m = 0; m < RECOMPUTE_COUNT && want < 0; m++) {
            assert_int_equal(alone[m].iter[i].id, dyn.iter[i].id);
            if (!alone[m].iter[i].failed) want = m;
        }
        if (want != dyn.iter[i].recompute)
            fail_msg("%s iteration %d: dynamic chose %d, the first mode that fits alone is %d", model,
                     i, dyn.iter[i].recompute, want);
        used[want]++;
        /* the same mode, the same plan: the same simulated time */
        assert_near(dyn.iter[i].ms, alone[want].iter[i].ms, 1e-9);
    }
    if (want_mixed) assert_true(used[RECOMPUTE_NONE] > 0 && used[RECOMPUTE_SELECTIVE] > 0);
    for (int m = 0; m < RECOMPUTE_COUNT; m++) {
        assert_int_equal(dyn.recompute_iterations[m], used[m]);
        study_result_release(&alone[m]);
    }
    study_result_release(&dyn);
    setup_release(&s);
}

static void test_dynamic_recompute_gpt_8192(void **state)
{
    (void)state;
    check_dynamic("gpt-6.7b-16l", GPT_PROFILE, 8192, 24, 1);
}

static void test_dynamic_recompute_t5_4096(void **state)
{
    (void)state;
    /* none fits nowhere at 4096 on 4 A100s (a sample alone is over memory): the rule falls back */
    check_dynamic("t5-11b-12l", T5_PROFILE, 4096, 4, 0);
}

/* --keep-going: the iterations that do not fit are left out and named; the rest is what a run
 * without them would simulate. */
static void test_keep_going(void **state)
{
    (void)state;
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 8192);
    study_result all, kept;
    run(&s, RECOMPUTE_NONE, "1f1b", 24, 0, &all);
    run(&s, RECOMPUTE_NONE, "1f1b", 24, 1, &kept);
    assert_true(all.planned_oom > 0 && all.planned_oom < all.iterations);
    assert_int_equal(kept.failed_iterations, all.planned_oom);
    assert_int_equal(kept.iterations + kept.failed_iterations, all.iterations);
    assert_false(kept.oom);
    int64_t tokens = 0, left_out = 0;
    double time_ms = 0;
    for (int i = 0; i < all.n_iter; i++) {
        assert_int_equal(kept.iter[i].id, all.iter[i].id);
        if (kept.iter[i].failed) {
            assert_true(strstr(kept.iter[i].why, "MB") != NULL); /* says what did not fit */
            left_out += all.iter[i].tokens;
            continue;
        }
        tokens += all.iter[i].tokens;
        time_ms += all.iter[i].ms;
        assert_near(kept.iter[i].ms, all.iter[i].ms, 1e-9);
    }
    assert_int_equal(kept.tokens, tokens);
    assert_int_equal(all.tokens, tokens + left_out);
    assert_near(kept.time_s, time_ms / 1e3, 1e-9);
    char *json = study_metrics_json(&kept);
    assert_non_null(strstr(json, "\"status\":\t\"failed\""));
    free(json);
    study_result_release(&all);
    study_result_release(&kept);
    setup_release(&s);
}

/* The adaptive schedule's order search on random micro-batches (2, 4, 8 stages; 8, 16, 32
 * micro-batches): every candidate simulated here on its own; the search keeps the best that fits,
 * and it is never worse than the earlier four-order search (whose orders it contains). */
static void test_order_search_best_of_candidates(void **state)
{
    (void)state;
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 2048);
    unsigned seed = 7;
    double sum_all = 0, sum_fixed = 0;
    int cases = 0, better = 0;
    static const int stages[] = {2, 4, 8}, counts[] = {8, 16, 32};
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int rep = 0; rep < 4; rep++) {
                int S = stages[a], n = counts[b];
                stage_model sm;
                dp_err err = {0};
                double mem = rep % 2 ? 1e9 : s.hw.mem_limit_mb; /* unlimited, and the A100's */
                if (stage_model_init(&sm, s.cm[0], S, 1, 1, 1, mem, &err) != DP_OK) fail_msg("%s", err.msg);
                sim_config cfg;
                study_sim_config(&sm, &s.hw, &cfg);
                mb_list l;
                mb_list_init(&l);
                /* heterogeneous: 1-8 rows of 64..2048 tokens, in ascending length (as the
                 * batchers cut them, which the four fixed orders assume) */
                int mbs_of[32], len_of[32];
                for (int k = 0; k < n; k++) {
                    int mbs = 1 << (rand_r(&seed) % 4), len = 64 + 8 * (int)(rand_r(&seed) % 249);
                    if (mbs * len > 8192) mbs = 8192 / len > 0 ? 8192 / len : 1;
                    int at = k;
                    while (at > 0 && len_of[at - 1] > len)
                        len_of[at] = len_of[at - 1], mbs_of[at] = mbs_of[at - 1], at--;
                    len_of[at] = len, mbs_of[at] = mbs;
                }
                for (int k = 0; k < n; k++) {
                    sample_len one = {k, len_of[k], 0};
                    assert_int_equal(mb_list_add(&l, &one, 1, mbs_of[k], len_of[k], 0), DP_OK);
                }
                int *perm = NULL, count = order_candidates(&l, &sm, ORDER_SEARCH_ALL, &perm);
                assert_true(count > 4 && count <= ORDER_MAX_CANDIDATES);
                /* every candidate, simulated here */
                sim sim_;
                sim_init(&sim_);
                mb_list c;
                mb_list_init(&c);
                double best = INFINITY;
                microbatch *orig = malloc((size_t)n * sizeof *orig);
                memcpy(orig, l.mb, (size_t)n * sizeof *orig);
                for (int q = 0; q < count; q++) {
                    for (int k = 0; k < n; k++) l.mb[k] = orig[perm[q * n + k]];
                    plan_iter pi;
                    plan_iter_init(&pi);
                    schedule_ctx sctx = {&sm};
                    sim_iter_result ir;
                    assert_int_equal(plan_iter_from_mbs(&pi, 0, &l, &sm, &err), DP_OK);
                    assert_int_equal(schedule_find("adaptive")->build(&sctx, &pi, &err), DP_OK);
                    assert_int_equal(sim_iteration(&sim_, &cfg, &pi, 0, NULL, &ir, &err), DP_OK);
                    if (!ir.oom) best = fmin(best, (double)ir.makespan_ns / 1e6);
                    plan_iter_release(&pi);
                }
                memcpy(l.mb, orig, (size_t)n * sizeof *orig);
                order_result all, fixed;
                assert_int_equal(order_search(&sm, schedule_find("adaptive"), &cfg, &sim_,
                                              ORDER_SEARCH_FIXED, &l, &fixed, &err), DP_OK);
                memcpy(l.mb, orig, (size_t)n * sizeof *orig);
                assert_int_equal(order_search(&sm, schedule_find("adaptive"), &cfg, &sim_,
                                              ORDER_SEARCH_ALL, &l, &all, &err), DP_OK);
                if (isfinite(best)) {
                    assert_true(all.fits);
                    assert_near(all.best_ms, best, 1e-9);
                    assert_true(!fixed.fits || all.best_ms <= fixed.best_ms + 1e-9);
                    if (fixed.fits) {
                        sum_all += all.best_ms, sum_fixed += fixed.best_ms, cases++;
                        better += all.best_ms < fixed.best_ms - 1e-9;
                    }
                }
                free(orig), free(perm);
                mb_list_release(&l), mb_list_release(&c);
                sim_release(&sim_);
            }
    assert_true(cases >= 18);
    print_message("order search: %d cases, mean makespan %.2f ms (clusters + fixed) vs %.2f ms "
                  "(the four fixed orders), %.2f%% shorter; better in %d\n",
                  cases, sum_all / cases, sum_fixed / cases, 100 * (1 - sum_all / sum_fixed), better);
    setup_release(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dynamic_recompute_gpt_8192),
        cmocka_unit_test(test_dynamic_recompute_t5_4096),
        cmocka_unit_test(test_keep_going),
        cmocka_unit_test(test_order_search_best_of_candidates),
    };
    return cmocka_run_group_tests_name("study", tests, NULL, NULL);
}
