/*
 * test_study.c — whole runs (sim/study.c) on the measured A100 profiles and the shipped trace:
 * --recompute dynamic against planning each mode alone, and --keep-going's accounting.
 */
#include "testutil.h"

#include <cjson/cJSON.h>

#include "../../common/json_util.h"
#include "../../models/comm.h"
#include "../../models/memory.h"
#include "../../scheduler/plan.h"
#include "../../scheduler/plan_machine.h"
#include "../../planner/mixed_recompute.h"
#include "../../planner/order_search.h"
#include "../../planner/panels.h"
#include "../../planner/study.h"
#include "../../planner/tune.h"

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

/* The options of a run of dynamic + schedule on 4 stages; mode < 0: --recompute dynamic, else
 * that mode alone. */
static study_opts opts_of(setup *s, int mode, const char *sched, int iterations, int keep_going)
{
    study_opts o = {0};
    o.cm = s->cm[mode < 0 ? 0 : mode];
    if (mode < 0)
        for (int m = 0; m < RECOMPUTE_COUNT; m++) o.recompute_cm[m] = s->cm[m];
    o.rules = &s->rules;
    o.batching = batcher_find("dynamic");
    o.sched = schedule_find(sched);
    o.chooser = schedule_chooser_find(sched);
    o.pp = 4, o.chunks = 1, o.dp = 1, o.zero = 1;
    schedule_layout(sched, 1, &o.chunks, NULL);
    o.mem_limit_mb = s->hw.mem_limit_mb;
    o.mbs = 1, o.mb_tokens = 2048;
    o.max_iterations = iterations;
    o.validate = 1;
    o.keep_going = keep_going;
    return o;
}

static dp_status try_run(setup *s, int mode, const char *sched, int iterations, int keep_going,
                         study_result *r, dp_err *err)
{
    study_opts o = opts_of(s, mode, sched, iterations, keep_going);
    return study_run(&o, &s->t, r, err);
}

static void run(setup *s, int mode, const char *sched, int iterations, int keep_going,
                study_result *r)
{
    dp_err err = {0};
    if (try_run(s, mode, sched, iterations, keep_going, r, &err) != DP_OK) fail_msg("%s", err.msg);
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
    for (int m = 0; m < RECOMPUTE_COUNT; m++) assert_int_equal(dyn.recompute_iterations[m], used[m]);
    /* --recompute fastest: every iteration at the fastest mode that fits alone (the lower on a
     * tie), never slower than DynaPipe's first fit, under 1F1B and the adaptive schedule (whose
     * first fit can starve the pipeline) */
    for (int q = 0; q < 2; q++) {
        const char *sched = q ? "adaptive" : "1f1b";
        study_result fast, one[RECOMPUTE_COUNT];
        for (int m = 0; m < RECOMPUTE_COUNT; m++)
            if (q) run(&s, m, sched, iterations, 1, &one[m]);
            else one[m] = alone[m];
        study_opts o = opts_of(&s, -1, sched, iterations, 0);
        o.recompute_by_time = 1;
        dp_err err = {0};
        if (study_run(&o, &s.t, &fast, &err) != DP_OK) fail_msg("%s", err.msg);
        assert_int_equal(fast.n_iter, iterations);
        for (int i = 0; i < fast.n_iter; i++) {
            int want = -1;
            for (int m = 0; m < RECOMPUTE_COUNT; m++)
                if (!one[m].iter[i].failed && (want < 0 || one[m].iter[i].ms < one[want].iter[i].ms))
                    want = m;
            if (want != fast.iter[i].recompute)
                fail_msg("%s %s iteration %d: fastest chose %d, the fastest mode alone is %d", model,
                         sched, i, fast.iter[i].recompute, want);
            assert_near(fast.iter[i].ms, one[want].iter[i].ms, 1e-9);
            if (!q) assert_true(fast.iter[i].ms <= dyn.iter[i].ms + 1e-9);
        }
        study_result_release(&fast);
        for (int m = 0; q && m < RECOMPUTE_COUNT; m++) study_result_release(&one[m]);
    }
    for (int m = 0; m < RECOMPUTE_COUNT; m++) study_result_release(&alone[m]);
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

/* A schedule that splits the backward plans under full recompute too: a micro-batch whose B
 * reruns its whole forward keeps its slot whole (its B computes the weight gradients: a W after
 * it would need the rebuilt activations held past B, plan_machine.h rule "recompute"), and runs
 * no W. Under --recompute full every slot is whole, so ZB-H1's order is 1F1B's: the same
 * simulated throughput, and no W in its plan; under --recompute dynamic at 8192 tokens on 4
 * A100s it plans the iterations 1F1B's dynamic run plans, full where an iteration needs it. */
static void run_to_plan(setup *s, const char *sched, int iterations, int keep_going, int mixed,
                        study_result *r, plan *pl, stage_model sm[RECOMPUTE_COUNT]);

static void test_split_backward_with_full_recompute(void **state)
{
    (void)state;
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 8192);
    study_result zb, one;
    run(&s, RECOMPUTE_FULL, "zb1", 4, 1, &zb);
    run(&s, RECOMPUTE_FULL, "1f1b", 4, 1, &one);
    assert_true(one.throughput_tokens_per_s > 0);
    assert_near(zb.throughput_tokens_per_s, one.throughput_tokens_per_s,
                1e-9 * one.throughput_tokens_per_s);
    study_result_release(&zb), study_result_release(&one);
    run(&s, -1, "zb1", 24, 1, &zb);
    run(&s, -1, "1f1b", 24, 1, &one);
    assert_int_equal(zb.failed_iterations, one.failed_iterations);
    assert_true(zb.recompute_iterations[RECOMPUTE_NONE] +
                    zb.recompute_iterations[RECOMPUTE_SELECTIVE] > 0);
    study_result_release(&zb), study_result_release(&one);
    /* per micro-batch (mixed): W exactly for the slots not under full recompute */
    plan pl;
    study_result r;
    stage_model sm[RECOMPUTE_COUNT];
    run_to_plan(&s, "zb1", 6, 1, 1, &r, &pl, sm);
    int whole = 0, split = 0;
    for (int i = 0; i < pl.n_it; i++) {
        const plan_iter *it = &pl.it[i];
        for (int q = 0; q < it->pp * it->dp; q++)
            for (int k = 0; k < it->n_mb; k++) {
                if (it->mb[k].replica != it->ranks[q].replica) continue;
                int ws = 0;
                for (int j = 0; j < it->ranks[q].n; j++)
                    ws += it->ranks[q].ins[j].op == OP_W && it->ranks[q].ins[j].mb == k;
                int full = pm_recompute(&pl, it, k) == RECOMPUTE_FULL;
                assert_int_equal(ws, !full);
                whole += full, split += !full;
            }
    }
    assert_true(split > 0);
    (void)whole;
    plan_release(&pl);
    study_result_release(&r);
    setup_release(&s);
}

/* A run of opts_of(s, dynamic, sched, iterations, keep_going), per micro-batch where mixed, with
 * its plan file written and read back (and checked) into *pl, and the stage models of the three
 * modes on its 4 stages into sm. */
static void run_to_plan(setup *s, const char *sched, int iterations, int keep_going, int mixed,
                        study_result *r, plan *pl, stage_model sm[RECOMPUTE_COUNT])
{
    dp_err err = {0};
    const char *path = tmp_file(".json", "");
    plan_header h = {0};
    snprintf(h.model, sizeof h.model, "%s", s->m.name);
    snprintf(h.hw, sizeof h.hw, "%s", s->hw.name);
    snprintf(h.schedule, sizeof h.schedule, "%s", sched);
    snprintf(h.batching, sizeof h.batching, "dynamic");
    h.recompute = mixed ? RECOMPUTE_POLICY_MIXED : RECOMPUTE_POLICY_DYNAMIC;
    h.pp = 4, h.dp = 1, h.tp = 1, h.chunks = 1, h.zero = 1;
    placement_kind place = PLACEMENT_LOOP;
    schedule_layout(sched, 1, &h.chunks, &place);
    h.placement = place;
    h.rules = s->rules;
    plan_writer w;
    if (plan_writer_open(&w, path, &h, &err) != DP_OK) fail_msg("%s", err.msg);
    study_opts o = opts_of(s, -1, sched, iterations, keep_going);
    o.recompute_per_mb = mixed;
    o.plan_out = &w;
    if (study_run(&o, &s->t, r, &err) != DP_OK || plan_writer_close(&w, &err) != DP_OK ||
        plan_read(path, pl, &err) != DP_OK || plan_check(pl, path, &err) != DP_OK)
        fail_msg("%s", err.msg);
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        if (stage_model_init(&sm[m], s->cm[m], 4, 1, 1, 1, s->hw.mem_limit_mb, &err) != DP_OK)
            fail_msg("%s", err.msg);
}

/* --recompute mixed against --recompute dynamic on the same iterations, read back from the plan
 * files they write: the same micro-batches and instructions; every micro-batch at or below its
 * iteration's dynamic mode (never full under zb1), costed as its own mode's stage model prices it
 * (stage_model_cost here, not plan_mb_cost; the file keeps 6 decimals); never slower simulated; fitting where
 * dynamic's plan fits, and maximal there: lowering any one micro-batch by one more mode, where
 * that saves time, breaks the exact memory check. Returns the one-mode steps the mixed plans
 * took. */
static int check_mixed(const char *model, const char *profile, int max_seqlen, const char *sched,
                       int iterations)
{
    setup s;
    setup_init(&s, model, profile, max_seqlen);
    plan pl[2];
    study_result r[2];
    stage_model sm[RECOMPUTE_COUNT];
    dp_err err = {0};
    for (int v = 0; v < 2; v++) {
        run_to_plan(&s, sched, iterations, 0, v, &r[v], &pl[v], sm);
        assert_int_equal(pl[v].n_it, iterations);
    }
    int steps = 0, full = 0;
    for (int i = 0; i < iterations; i++) {
        plan_iter *a = &pl[0].it[i], *b = &pl[1].it[i];
        assert_int_equal(a->n_mb, b->n_mb);
        for (int q = 0; q < a->pp * a->dp; q++) {
            assert_int_equal(a->ranks[q].n, b->ranks[q].n);
            for (int j = 0; j < a->ranks[q].n; j++) {
                assert_int_equal(a->ranks[q].ins[j].op, b->ranks[q].ins[j].op);
                assert_int_equal(a->ranks[q].ins[j].mb, b->ranks[q].ins[j].mb);
            }
        }
        int dyn = (int)pm_recompute(&pl[0], a, 0);
        for (int k = 0; k < b->n_mb; k++) {
            plan_mb *x = &b->mb[k];
            int mode = (int)pm_recompute(&pl[1], b, k);
            assert_int_equal(x->mbs, a->mb[k].mbs);
            assert_int_equal(x->enc_len, a->mb[k].enc_len);
            assert_true(mode <= dyn);
            full += mode == RECOMPUTE_FULL;
            steps += dyn - mode;
            cost_shape sh = cost_shape_rows(x->mbs, x->enc_len, x->dec_len);
            mb_cost c;
            if (stage_model_cost(&sm[mode], &sh, &c, &err) != DP_OK) fail_msg("%s", err.msg);
            for (int d = 0; d < b->pp; d++) {
                assert_near(x->fwd_ms[d], c.fwd_ms[d], 1e-6);
                assert_near(x->bwd_ms[d], c.bwd_ms[d], 1e-6);
                assert_near(x->stored_mb[d], c.stored_mb[d], 1e-6);
                assert_near(x->peak_mb[d], c.peak_mb[d], 1e-6);
            }
        }
        if (r[1].iter[i].ms > r[0].iter[i].ms * (1 + 1e-12))
            fail_msg("%s %s iteration %d: mixed %.6f ms, dynamic %.6f ms", model, sched, i,
                     r[1].iter[i].ms, r[0].iter[i].ms);
        plan_machine pm;
        double worst;
        pm_init(&pm, a, 1);
        int dyn_fits = pm_fits(&pm, sm[dyn].budget_mb, &worst, NULL, 0);
        pm_release(&pm);
        if (!dyn_fits) continue;
        pm_init(&pm, b, 1);
        assert_true(pm_fits(&pm, sm[dyn].budget_mb, &worst, NULL, 0));
        for (int k = 0; k < b->n_mb; k++) {
            plan_mb *x = &b->mb[k];
            if (x->recompute == RECOMPUTE_NONE) continue;
            cost_shape sh = cost_shape_rows(x->mbs, x->enc_len, x->dec_len);
            mb_cost c;
            if (stage_model_cost(&sm[x->recompute - 1], &sh, &c, &err) != DP_OK) continue;
            double saved = 0, keep[4][STAGE_MAX];
            for (int d = 0; d < b->pp; d++) {
                saved += x->fwd_ms[d] + x->bwd_ms[d] - c.fwd_ms[d] - c.bwd_ms[d];
                keep[0][d] = x->fwd_ms[d], keep[1][d] = x->bwd_ms[d];
                keep[2][d] = x->stored_mb[d], keep[3][d] = x->peak_mb[d];
                x->fwd_ms[d] = c.fwd_ms[d], x->bwd_ms[d] = c.bwd_ms[d];
                x->stored_mb[d] = c.stored_mb[d], x->peak_mb[d] = c.peak_mb[d];
            }
            if (saved > 0 && pm_fits(&pm, sm[dyn].budget_mb, &worst, NULL, 0))
                fail_msg("%s %s iteration %d: micro-batch %d fits a mode lower too", model, sched,
                         i, k);
            for (int d = 0; d < b->pp; d++) {
                x->fwd_ms[d] = keep[0][d], x->bwd_ms[d] = keep[1][d];
                x->stored_mb[d] = keep[2][d], x->peak_mb[d] = keep[3][d];
            }
        }
        pm_release(&pm);
    }
    int counted = 0;
    for (int m = 0; m < RECOMPUTE_COUNT; m++) counted += r[1].recompute_microbatches[m];
    assert_int_equal(counted, r[1].microbatches);
    if (strcmp(sched, "zb1") == 0) assert_int_equal(full, 0);
    for (int v = 0; v < 2; v++) plan_release(&pl[v]), study_result_release(&r[v]);
    setup_release(&s);
    return steps;
}

static void test_mixed_recompute(void **state)
{
    (void)state;
    /* at 8192 tokens dynamic needs selective for some iterations on 1F1B and zb1 (adaptive admits
     * by memory and needs none there); T5 at 4096 fits none nowhere: every iteration starts
     * above none */
    assert_true(check_mixed("gpt-6.7b-16l", GPT_PROFILE, 8192, "1f1b", 12) > 0);
    assert_true(check_mixed("gpt-6.7b-16l", GPT_PROFILE, 8192, "zb1", 6) > 0);
    assert_true(check_mixed("t5-11b-12l", T5_PROFILE, 4096, "1f1b", 4) > 0);
    assert_true(check_mixed("t5-11b-12l", T5_PROFILE, 4096, "adaptive", 2) > 0);
}

/* The mixed choice against brute force: on small global batches (16k tokens of up to 8192, on 4
 * stages of 30 GB) every assignment of modes at or below the highest the greedy kept in an
 * iteration (2^n or 3^n, at most 16384) is costed (stage_model_cost), checked (pm_fits) and
 * simulated; the best that fits is an optimum the greedy's plan can never beat, and the greedy's
 * gap to it is reported. */
static void test_mixed_recompute_against_brute_force(void **state)
{
    (void)state;
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 8192);
    s.rules.global_tokens = 16384;
    s.hw.mem_limit_mb = 30000;
    dp_err err = {0};
    plan pl;
    study_result r;
    stage_model sm[RECOMPUTE_COUNT];
    run_to_plan(&s, "1f1b", 40, 1, 1, &r, &pl, sm);
    sim_config cfg;
    study_sim_config(&sm[0], &s.hw, &cfg);
    sim des;
    sim_init(&des);
    int cases = 0, optimal = 0;
    double sum_gap = 0, max_gap = 0, tightest = INFINITY;
    mb_cost scratch;
    for (int i = 0; i < pl.n_it; i++) {
        plan_iter *it = &pl.it[i];
        int n = it->n_mb, top = 0;
        for (int k = 0; k < n; k++) top = it->mb[k].recompute > top ? it->mb[k].recompute : top;
        /* every mode up to the highest the greedy kept, on every micro-batch */
        long space = 1;
        for (int k = 0; k < n && space <= 1 << 14; k++) space *= top + 1;
        if (top == 0 || space > 1 << 14) continue;
        sim_iter_result ir;
        if (sim_iteration(&des, &cfg, it, 0, NULL, &ir, &err) != DP_OK) fail_msg("%s", err.msg);
        double greedy = (double)ir.makespan_ns, best = INFINITY;
        /* the floor a search drops a plan by before relaxing it (mixed_recompute_floor_ms), of
         * the plan with every micro-batch at the top mode: no assignment simulates below it */
        microbatch src[64];
        assert_true(n <= 64);
        mb_list l = {0};
        l.mb = src, l.n_mb = n;
        const stage_model *by_mode[RECOMPUTE_COUNT] = {&sm[0], &sm[1], &sm[2]};
        for (int k = 0; k < n; k++) {
            plan_mb *x = &it->mb[k];
            memset(&src[k], 0, sizeof src[k]);
            src[k].mbs = x->mbs, src[k].enc_len = x->enc_len, src[k].dec_len = x->dec_len;
            x->recompute = top;
            if (plan_mb_cost(x, it->pp, &src[k], &sm[top], &scratch, &err) != DP_OK)
                fail_msg("%s", err.msg);
        }
        const schedule *one_f1b = schedule_find("1f1b");
        double floor_ms = mixed_recompute_floor_ms(it, &l, by_mode, (recompute_mode)top, one_f1b, 1);
        assert_true(floor_ms > 0);
        double least_lb = INFINITY; /* over every assignment, fitting or not */
        for (long code = 0; code < space; code++) {
            long c = code;
            for (int k = 0; k < n; k++, c /= top + 1) {
                plan_mb *x = &it->mb[k];
                x->recompute = (int)(c % (top + 1));
                cost_shape sh = cost_shape_rows(x->mbs, x->enc_len, x->dec_len);
                mb_cost mc;
                if (stage_model_cost(&sm[x->recompute], &sh, &mc, &err) != DP_OK) fail_msg("%s", err.msg);
                for (int d = 0; d < it->pp; d++) {
                    x->fwd_ms[d] = mc.fwd_ms[d], x->bwd_ms[d] = mc.bwd_ms[d];
                    x->stored_mb[d] = mc.stored_mb[d], x->peak_mb[d] = mc.peak_mb[d];
                }
            }
            least_lb = fmin(least_lb, schedule_time_lower_bound(one_f1b, it, it->pp, 1));
            plan_machine pm;
            double worst;
            pm_init(&pm, it, 1);
            int fits = pm_fits(&pm, sm[0].budget_mb, &worst, NULL, 0);
            pm_release(&pm);
            if (!fits) continue;
            if (sim_iteration(&des, &cfg, it, 0, NULL, &ir, &err) != DP_OK) fail_msg("%s", err.msg);
            best = fmin(best, (double)ir.makespan_ns);
            if ((double)ir.makespan_ns / 1e6 < floor_ms)
                fail_msg("iteration %d: an assignment simulates %.6f ms, under the floor %.6f ms",
                         it->id, (double)ir.makespan_ns / 1e6, floor_ms);
            tightest = fmin(tightest, (double)ir.makespan_ns / 1e6 / floor_ms);
        }
        assert_true(isfinite(best));
        /* at or under every assignment's bound (each micro-batch's forward and backward at their
         * own least over the modes, which on a stage may be two modes'), and close */
        assert_true(floor_ms <= least_lb + 1e-4 * n); /* the plan file's rounding */
        assert_true(floor_ms >= 0.99 * least_lb);
        if (greedy < best * (1 - 1e-9))
            fail_msg("iteration %d: the greedy's %.0f ns beats every fitting assignment's %.0f",
                     it->id, greedy, best);
        double gap = greedy / best - 1;
        cases++, optimal += gap < 1e-9;
        sum_gap += gap, max_gap = fmax(max_gap, gap);
    }
    print_message("mixed recompute against brute force: %d iterations, optimal in %d, mean gap "
                  "%.3f%%, max %.3f%%; the fastest assignment %.3fx its floor\n", cases, optimal,
                  cases ? 100 * sum_gap / cases : 0, 100 * max_gap, tightest);
    assert_true(cases >= 5);
    sim_release(&des);
    plan_release(&pl);
    study_result_release(&r);
    setup_release(&s);
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
                    assert_int_equal(mb_list_add(&l, NULL, &one, 1, mbs_of[k], len_of[k], 0), DP_OK);
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

/* DynaPipe's T5 order, written here from its description: complete-linkage agglomerative
 * clustering of the raw (input, target) pairs, merging while the (Euclidean) linkage distance is
 * under 16; the clusters visited along an open path over their centres (L1; DynaPipe solves it
 * with LKH, here nearest neighbour + 2-opt), samples inside a cluster in trace order. */
static void dynapipe_t5_order(const sample_len *in, int n, sample_len *out)
{
    double *d = malloc((size_t)n * n * sizeof *d);
    int *cl = malloc((size_t)n * sizeof *cl), *alive = malloc((size_t)n * sizeof *alive);
    for (int i = 0; i < n; i++) {
        cl[i] = i, alive[i] = 1;
        for (int j = 0; j < n; j++)
            d[i * n + j] = hypot(in[i].enc - in[j].enc, in[i].dec - in[j].dec);
    }
    for (;;) { /* merge the closest pair; complete linkage: d(k, a+b) = max(d(k,a), d(k,b)) */
        int a = -1, b = -1;
        double best = 16;
        for (int i = 0; i < n; i++)
            for (int j = i + 1; alive[i] && j < n; j++)
                if (alive[j] && d[i * n + j] < best) best = d[i * n + j], a = i, b = j;
        if (a < 0) break;
        for (int k = 0; k < n; k++) d[a * n + k] = d[k * n + a] = fmax(d[a * n + k], d[b * n + k]);
        alive[b] = 0;
        for (int k = 0; k < n; k++)
            if (cl[k] == b) cl[k] = a;
    }
    int m = 0, *id = malloc((size_t)n * sizeof *id);
    double (*c)[2] = calloc((size_t)n, sizeof *c);
    int *cnt = calloc((size_t)n, sizeof *cnt);
    for (int i = 0; i < n; i++) id[i] = alive[i] ? m++ : -1;
    for (int i = 0; i < n; i++) {
        int k = id[cl[i]];
        c[k][0] += in[i].enc, c[k][1] += in[i].dec, cnt[k]++;
    }
    for (int k = 0; k < m; k++) c[k][0] /= cnt[k], c[k][1] /= cnt[k];
    int *path = malloc((size_t)m * sizeof *path);
    char *used = calloc((size_t)m, 1);
    int start = 0;
    for (int k = 1; k < m; k++)
        if (c[k][0] + c[k][1] < c[start][0] + c[start][1]) start = k;
    path[0] = start, used[start] = 1;
#define L1(p, q) (fabs(c[p][0] - c[q][0]) + fabs(c[p][1] - c[q][1]))
    for (int k = 1; k < m; k++) {
        int best = -1;
        for (int q = 0; q < m; q++)
            if (!used[q] && (best < 0 || L1(path[k - 1], q) < L1(path[k - 1], best))) best = q;
        path[k] = best, used[best] = 1;
    }
    for (int improved = 1, pass = 0; improved && pass < 50; pass++) {
        improved = 0;
        for (int i = -1; i < m - 2; i++)
            for (int j = i + 2; j < m; j++) {
                double before = (i >= 0 ? L1(path[i], path[i + 1]) : 0) + (j + 1 < m ? L1(path[j], path[j + 1]) : 0);
                double after = (i >= 0 ? L1(path[i], path[j]) : 0) + (j + 1 < m ? L1(path[i + 1], path[j + 1]) : 0);
                if (after < before - 1e-9) {
                    for (int x = i + 1, y = j; x < y; x++, y--) {
                        int t = path[x];
                        path[x] = path[y], path[y] = t;
                    }
                    improved = 1;
                }
            }
    }
#undef L1
    int at = 0;
    for (int q = 0; q < m; q++)
        for (int i = 0; i < n; i++)
            if (id[cl[i]] == path[q]) out[at++] = in[i];
    free(d), free(cl), free(alive), free(id), free(c), free(cnt), free(path), free(used);
}

/* The T5 order against DynaPipe's on the same global batches of the shipped trace (T5-11B,
 * 4 stages, the exact DP): padding efficiency at least as good. */
static void test_t5_order_against_dynapipe(void **state)
{
    (void)state;
    setup s;
    setup_init(&s, "t5-11b-12l", T5_PROFILE, 2048);
    stage_model sm;
    dp_err err = {0};
    if (stage_model_init(&sm, s.cm[RECOMPUTE_FULL], 4, 1, 1, 1, s.hw.mem_limit_mb, &err) != DP_OK)
        fail_msg("%s", err.msg);
    batch_ctx ctx = {&s.rules, &sm, 1, 2048, 0, NULL, DP_SPLIT_AUTO, NULL, 0};
    batch_iter it;
    batch_iter_init(&it, &s.t, &s.rules);
    int64_t real = 0, pad_ours = 0, pad_theirs = 0;
    for (int b = 0; b < 12; b++) {
        const sample_len *x;
        int n;
        assert_int_equal(batch_next(&it, &x, &n, &err), DP_OK);
        sample_len *ours = malloc((size_t)n * sizeof *ours), *theirs = malloc((size_t)n * sizeof *theirs);
        memcpy(ours, x, (size_t)n * sizeof *ours);
        assert_int_equal(mb_order(&s.rules, ours, n), DP_OK);
        dynapipe_t5_order(x, n, theirs);
        for (int k = 0; k < 2; k++) {
            mb_list l;
            mb_list_init(&l);
            if (dp_batch_ordered(&ctx, k ? theirs : ours, n, &l, &err) != DP_OK) fail_msg("%s", err.msg);
            for (int q = 0; q < l.n_mb; q++) {
                int64_t padded = (int64_t)l.mb[q].mbs * (l.mb[q].enc_len + l.mb[q].dec_len);
                *(k ? &pad_theirs : &pad_ours) += padded;
                if (!k) real += l.mb[q].enc_tokens + l.mb[q].dec_tokens;
            }
            mb_list_release(&l);
        }
        free(ours), free(theirs);
    }
    batch_iter_release(&it);
    double e_ours = (double)real / pad_ours, e_theirs = (double)real / pad_theirs;
    print_message("T5-11B padding efficiency over 12 batches: %.4f (dpsim's path) vs %.4f "
                  "(DynaPipe's clusters + path)\n", e_ours, e_theirs);
    assert_true(e_ours >= e_theirs - 0.002);
    setup_release(&s);
}

/* The tune space against an enumeration written here: every layout of exactly the GPUs, tp within
 * a node, pp within the layers (even for T5), ZeRO 1 only with data parallelism, the method's own
 * knob and modes; no point twice. And the ranking: feasible first, by throughput. */
/* 3 iterations of padding (4 rows of 2048) + 1F1B on one stage over 4 replicas at ZeRO `zero`,
 * memory unbounded: the same micro-batches whatever the communication. */
static void replicated_run(setup *s, const cost_model *cm, int zero, study_result *r)
{
    study_opts o = {0};
    o.cm = cm;
    o.rules = &s->rules;
    o.batching = batcher_find("padding");
    o.sched = schedule_find("1f1b");
    o.pp = 1, o.chunks = 1, o.dp = 4, o.zero = zero;
    o.mem_limit_mb = 1e9;
    o.mbs = 4, o.mb_tokens = 2048;
    o.max_iterations = 3;
    dp_err err = {0};
    if (study_run(&o, &s->t, r, &err) != DP_OK) fail_msg("%s", err.msg);
}

/* dpsim validate's re-pricing of ZeRO's per-micro-batch collectives (stage_zero_rescaled) against
 * the rule it inverts: a time stage_with_zero gave for (compute c, collectives z), re-priced k
 * times as long, is the time it gives for (c, k z), serial and prefetched, whichever stream is the
 * longer; k = 1 changes nothing. */
static void test_zero_reprice_inverts_the_rule(void **state)
{
    (void)state;
    unsigned seed = 3;
    for (int rep = 0; rep < 2000; rep++) {
        double c = (rand_r(&seed) % 1000) / 10.0, z = (rand_r(&seed) % 1000) / 25.0 + 0.01;
        double k = 1 + (rand_r(&seed) % 70) / 10.0;
        int L = 1 + rand_r(&seed) % 40, p = rep & 1;
        double with = stage_with_zero(c, z, L, p), want = stage_with_zero(c, k * z, L, p);
        assert_near(stage_zero_rescaled(with, z, L, p, k), want, 1e-9 * (1 + want));
        assert_near(stage_zero_rescaled(with, z, L, p, 1), with, 0);
    }
    assert_near(stage_zero_rescaled(7, 0, 4, 1, 4), 7, 0); /* no collectives, nothing to move */
}

/* ZeRO's communication (stage_cost.h, sim.h): on slow links ZeRO-2 (a gradient reduce-scatter
 * per micro-batch) and ZeRO-3 (parameter gathers per forward and backward besides) are slower
 * than ZeRO-1, whose end-of-iteration collectives move what ZeRO-0's all-reduce moves; ZeRO-1
 * steps a 1/D shard of the optimizer state. Padding, memory unbounded: the same micro-batches
 * but for ZeRO-2/3's evening of the replicas' counts. */
static void test_zero_communication(void **state)
{
    (void)state;
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 2048);
    cluster_override_links(&s.hw, 25, 5);
    analytic_params p;
    analytic_params_default(&p);
    cost_model *cm = NULL;
    assert_int_equal(cost_analytic_new(&s.m, &s.hw, 1, RECOMPUTE_NONE, &p, &cm, NULL), DP_OK);
    cm->overlap = 0; /* the collectives' volumes, serially (test_comm_overlap overlaps them) */
    double t[4];
    int mbs[4];
    for (int z = 0; z < 4; z++) {
        study_result r;
        replicated_run(&s, cm, z, &r);
        t[z] = r.time_s, mbs[z] = r.microbatches;
        study_result_release(&r);
    }
    /* the same micro-batches under ZeRO 0 and 1, and under 2 and 3; ZeRO-2/3 step the replicas
     * together (microbatch.h), splitting at most D - 1 per iteration to deal them evenly */
    assert_int_equal(mbs[1], mbs[0]);
    assert_int_equal(mbs[3], mbs[2]);
    assert_true(mbs[2] >= mbs[0] && mbs[2] <= mbs[0] + 3 * 3);
    assert_true(t[1] < t[0]); /* the same collective volume; a quarter of the optimizer step */
    assert_true(t[2] > t[1] * 1.05);
    assert_true(t[3] > t[2] * 1.05);
    /* the step follows the optimizer state memory.h keeps: ZeRO-1 over 4 steps a quarter */
    double w, g, o0, o1;
    memory_model_state_parts(1000, NULL, 0, 4, &w, &g, &o0);
    memory_model_state_parts(1000, NULL, 1, 4, &w, &g, &o1);
    assert_rel(study_optimizer_ms(&s.hw, o0, 2), 4 * study_optimizer_ms(&s.hw, o1, 2), 1e-12);
    /* 1 GB of fp16 parameters: 5e8 parameters x 28 bytes at 80% of 1555 GB/s (fp16 gradients:
     * 2 + 4 + 4 + 4 read, 4 + 4 + 4 + 2 written); fp32 gradients read 2 bytes more */
    assert_rel(study_optimizer_ms(&s.hw, o0, 2), 5e8 * 28 / (0.8 * 1555e9) * 1e3, 1e-12);
    assert_rel(study_optimizer_ms(&s.hw, o0, 4), 5e8 * 30 / (0.8 * 1555e9) * 1e3, 1e-12);
    /* ZeRO's transfers (comm.h) against their closed forms: a ring all-gather (or reduce-scatter)
     * of B bytes over n ranks is (n-1) latencies + (n-1)/n B / busBW, busBW NCCL's share of the
     * link; ZeRO-2 pays one per backward and one at the end, ZeRO-3 one per forward and two per
     * backward, ZeRO-1 a reduce-scatter and an all-gather at the end, ZeRO 0 an all-reduce */
    double B = 1e9, n = 4, lat = s.hw.intra_latency_us / 1e3;
    double busbw = s.hw.intra_gbit / 8 * 1e9 * s.hw.coll_eff[SCOPE_INTRA][COLL_ALL_GATHER];
    double rs_bw = s.hw.intra_gbit / 8 * 1e9 * s.hw.coll_eff[SCOPE_INTRA][COLL_REDUCE_SCATTER];
    double ar_bw = s.hw.intra_gbit / 8 * 1e9 * s.hw.coll_eff[SCOPE_INTRA][COLL_ALL_REDUCE];
    double ag = (n - 1) * lat + (n - 1) / n * B / busbw * 1e3;
    double rs = (n - 1) * lat + (n - 1) / n * B / rs_bw * 1e3;
    double ar = 2 * (n - 1) * lat + 2 * (n - 1) / n * B / ar_bw * 1e3;
    comm_group g4 = comm_group_flat(4, 0), g1 = comm_group_flat(1, 0);
    zero_comm z0 = comm_zero(&s.hw, 0, &g4, NULL, B, B), z1 = comm_zero(&s.hw, 1, &g4, NULL, B, B),
              z2 = comm_zero(&s.hw, 2, &g4, NULL, B, B), z3 = comm_zero(&s.hw, 3, &g4, NULL, B, B),
              one = comm_zero(&s.hw, 3, &g1, NULL, B, B);
    assert_rel(z0.iter_ms, ar, 1e-12);
    assert_rel(z0.grad_ms, ar, 1e-12);
    assert_rel(z1.iter_ms, rs + ag, 1e-12);
    assert_rel(z1.grad_ms, rs, 1e-12);
    assert_true(z1.fwd_ms == 0 && z1.bwd_ms == 0);
    assert_rel(z2.bwd_ms, rs, 1e-12);
    assert_rel(z2.iter_ms, ag, 1e-12);
    assert_true(z2.grad_ms == 0);
    assert_rel(z3.fwd_ms, ag, 1e-12);
    assert_rel(z3.bwd_ms, ag + rs, 1e-12);
    assert_true(z3.iter_ms == 0 && one.fwd_ms == 0 && one.bwd_ms == 0 && one.iter_ms == 0);
    /* FSDP with a pipeline: each stage's micro-batches pay its own gathers and reduce-scatters,
     * over the stage's own parameters; the state holds two gathered layers over the shards (not a
     * micro-batch's peak: interleaved chunks would share it) */
    stage_model sm, sm0;
    dp_err err = {0};
    assert_int_equal(stage_model_init(&sm, cm, 2, 1, 4, 3, 1e9, &err), DP_OK);
    assert_int_equal(stage_model_init(&sm0, cm, 2, 1, 4, 1, 1e9, &err), DP_OK);
    for (int d = 0; d < 2; d++) {
        comm_group gd = comm_dp_group(&s.hw, &(mesh){1, 1, 2, 4}, d);
        zero_comm z = comm_zero(&s.hw, 3, &gd, NULL, 1e6 * sm.param_mb[d], 1e6 * sm.param_mb[d]);
        assert_rel(sm.zero_fwd_ms[d], z.fwd_ms, 1e-12);
        assert_rel(sm.zero_bwd_ms[d], z.bwd_ms, 1e-12);
        assert_true(sm.state_mb[d] < sm0.state_mb[d]);
    }
    double layer = 2.0 * (double)model_layer_params(&cm->model, 0) / 1e6; /* fp16, tp 1 */
    mb_cost c3, c1;
    cost_shape sh = cost_shape_rows(1, 2048, 0);
    assert_int_equal(stage_model_cost(&sm, &sh, &c3, NULL), DP_OK);
    assert_int_equal(stage_model_cost(&sm0, &sh, &c1, NULL), DP_OK);
    /* the two largest units a stage gathers whole: its layers and its embedding (stage 0) or
     * LM head (stage 1, the tied embedding's copy), each V x h */
    double emb = 2.0 * (double)model_embedding_params(&cm->model) / 1e6;
    double held = (emb > layer ? emb : layer) + layer;
    assert_true(emb > layer); /* GPT-6.7B's 50,257 x 4,096 against a layer's 12 x 4,096^2 */
    for (int d = 0; d < 2; d++) {
        assert_rel(sm.zero3_gathered_mb[d], held, 1e-9);
        assert_rel(sm.state_mb[d],
                   memory_model_state_mb(sm.param_mb[d], NULL, 3, 4) + held, 1e-12);
        assert_rel(c3.peak_mb[d], c1.peak_mb[d], 1e-12);
        assert_true(c3.fwd_ms[d] > c1.fwd_ms[d]);
    }
    cost_model_free(cm);
    setup_release(&s);
}

/* Overlap (cost.h COST_OVERLAP_*): the bucketed gradient reduction's end against its closed form
 * and its bounds over a grid (never after the serial end, never before the compute's), then whole
 * runs: with dp and zero overlap an iteration is never slower than serial and never faster than
 * with free communication, and ZeRO-3's prefetch leaves a micro-batch's forward at
 * max(compute, gathers) + one layer's gather. */
static void test_comm_overlap(void **state)
{
    (void)state;
    for (int64_t d = 0; d <= 9000; d += 3000)
        for (int64_t g = 0; g <= 20000; g += 2500)
            for (int k = 1; k <= 64; k *= 4) {
                int64_t first, end = sim_grad_overlap_end(1000, 1000 + d, g, k, &first);
                int64_t a = 1000 + d + g / k, b = 1000 + d / k + g;
                assert_int_equal(end, a > b ? a : b);
                assert_true(end >= 1000 + d && end <= 1000 + d + g);
                assert_int_equal(first, 1000 + d / k);
                if (k == 1) assert_int_equal(end, 1000 + d + g); /* one bucket: serial */
            }
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 2048);
    cluster_override_links(&s.hw, 25, 5); /* slow links: the collectives matter */
    analytic_params p;
    analytic_params_default(&p);
    double t[3][2]; /* [overlap none, default, free links][zero 0, 3] */
    for (int z = 0; z < 2; z++)
        for (int v = 0; v < 3; v++) {
            cluster_spec hw = s.hw;
            if (v == 2) cluster_override_links(&hw, 1e9, 0);
            cost_model *cm = NULL;
            assert_int_equal(cost_analytic_new(&s.m, &hw, 1, RECOMPUTE_NONE, &p, &cm, NULL), DP_OK);
            cm->overlap = v == 0 ? 0 : COST_OVERLAP_DEFAULT;
            study_result r;
            dp_err err = {0};
            replicated_run(&s, cm, z ? 3 : 0, &r);
            t[v][z] = r.time_s;
            study_result_release(&r);
            if (z && v == 1) { /* prefetch: one micro-batch's forward against its closed form */
                stage_model sm;
                assert_int_equal(stage_model_init(&sm, cm, 1, 1, 4, 3, 1e9, &err), DP_OK);
                cost_shape sh = cost_shape_rows(4, 2048, 0);
                mb_cost c;
                cost_layer enc, head;
                assert_int_equal(stage_model_cost(&sm, &sh, &c, &err), DP_OK);
                assert_int_equal(cost_query(cm, COMP_ENCODER, &sh, &enc, &err), DP_OK);
                assert_int_equal(cost_query(cm, COMP_POSTPROCESS, &sh, &head, &err), DP_OK);
                double compute = s.m.enc_layers * enc.fwd_ms, zf = sm.zero_fwd_ms[0];
                assert_true(zf > 0);
                assert_rel(c.fwd_ms[0], fmax(compute, zf) + zf / s.m.enc_layers + head.fwd_ms,
                           1e-12);
            }
            cost_model_free(cm);
        }
    for (int z = 0; z < 2; z++) {
        print_message("zero %d: serial %.4f s, overlapped %.4f s, free links %.4f s\n", z ? 3 : 0,
                      t[0][z], t[1][z], t[2][z]);
        assert_true(t[1][z] < t[0][z]);  /* something overlapped */
        assert_true(t[1][z] >= t[2][z]); /* never better than communication for free */
    }
    setup_release(&s);
}

static void test_batching_auto(void **state)
{
    (void)state;
    /* --batching auto against each candidate run alone (every non-pack-dataset batching plans
     * the same global batches): per iteration its time is the fastest candidate's that fits,
     * and it names that candidate; a run never slower than the best single batching. Under
     * --recompute mixed each candidate is scored as it runs: after its modes are lowered per
     * micro-batch (a candidate no relaxation of which can beat the best so far is dropped before
     * relaxing), and under --recompute fastest at its fastest mode (a candidate no mode of
     * which can beat the best so far is dropped before simulating: dropped rightly, or this
     * fails) */
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 4096);
    for (int q = 0; q < 4; q++) {
        const char *sched = q == 1 ? "adaptive" : "1f1b";
        int mode = q >= 2 ? -1 : RECOMPUTE_NONE, mixed = q == 2, by_time = q == 3;
        study_result ra;
        study_opts o = opts_of(&s, mode, sched, 6, 1);
        o.recompute_per_mb = mixed, o.recompute_by_time = by_time;
        if (q >= 2) o.mem_limit_mb *= 0.55; /* tight: modes go up (and down per micro-batch) */
        o.batching = batcher_find("auto");
        dp_err err = {0};
        if (study_run(&o, &s.t, &ra, &err) != DP_OK) fail_msg("%s", err.msg);
        int nb;
        const batcher *bs = batcher_list(&nb);
        double best_ms[6] = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
        double best_run = 0;
        for (int b = 0; b < nb; b++) {
            if (bs[b].chooses || bs[b].pack_dataset) continue;
            study_result rb;
            study_opts ob = opts_of(&s, mode, sched, 6, 1);
            ob.recompute_per_mb = mixed, ob.recompute_by_time = by_time;
            ob.mem_limit_mb = o.mem_limit_mb;
            ob.batching = &bs[b];
            if (study_run(&ob, &s.t, &rb, &err) != DP_OK) fail_msg("%s", err.msg);
            assert_int_equal(rb.n_iter, ra.n_iter);
            for (int i = 0; i < rb.n_iter; i++) {
                /* an iteration over memory (the simulator's check) does not compete */
                if (rb.iter[i].failed) continue;
                best_ms[i] = fmin(best_ms[i], rb.iter[i].ms);
                if (strcmp(ra.iter[i].batching, bs[b].name) == 0)
                    assert_near(ra.iter[i].ms, rb.iter[i].ms, 1e-9);
            }
            if (!rb.oom && rb.feasible) best_run = fmax(best_run, rb.throughput_tokens_per_s);
            study_result_release(&rb);
        }
        int fitted = 0;
        for (int i = 0; i < ra.n_iter; i++) {
            if (ra.iter[i].failed) { /* only where no candidate fits */
                assert_true(isinf(best_ms[i]));
                continue;
            }
            fitted++;
            assert_near(ra.iter[i].ms, best_ms[i], 1e-9);
            assert_non_null(batcher_find(ra.iter[i].batching));
        }
        assert_true(fitted >= 4);
        if (!ra.failed_iterations) assert_true(ra.throughput_tokens_per_s >= best_run * (1 - 1e-12));
        study_result_release(&ra);
    }
    setup_release(&s);
}

/* A chooser of one family (--schedule auto-loop, auto-v) against each of its schedules run alone: per iteration its
 * time is the fastest fitting schedule's (ZB-H1 only in the modes it takes: under --recompute
 * dynamic it plans without full recompute), it names that schedule, and the run is never slower
 * than the best single one; its plan's header names the chooser and passes plan_check; a
 * per-iteration name in a plan that names one schedule, or a chooser plan's iteration that names
 * none or one the chooser does not take (another placement or chunk count), is refused, as is a
 * header whose placement is not the chooser's. */
static void check_chooser(const char *chooser, const char *const *names, int n_names,
                          const char *foreign)
{
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 4096);
    for (int q = 0; q < 2; q++) {
        int mode = q ? -1 : RECOMPUTE_NONE;
        study_opts o = opts_of(&s, mode, chooser, 6, 1);
        study_result ra;
        dp_err err = {0};
        if (study_run(&o, &s.t, &ra, &err) != DP_OK) fail_msg("%s", err.msg);
        double best_ms[6] = {INFINITY, INFINITY, INFINITY, INFINITY, INFINITY, INFINITY};
        double best_run = 0;
        for (int k = 0; k < n_names; k++) {
            study_result rb;
            study_opts ob = opts_of(&s, mode, names[k], 6, 1);
            if (study_run(&ob, &s.t, &rb, &err) != DP_OK) fail_msg("%s", err.msg);
            assert_int_equal(rb.n_iter, ra.n_iter);
            for (int i = 0; i < rb.n_iter; i++)
                if (!rb.iter[i].failed) best_ms[i] = fmin(best_ms[i], rb.iter[i].ms);
            print_message("%s %s: %.0f tokens/s, %d left out\n", mode < 0 ? "dynamic" : "none",
                          names[k], rb.throughput_tokens_per_s, rb.failed_iterations);
            if (!rb.oom && rb.feasible && !rb.failed_iterations) /* the same tokens as auto's */
                best_run = fmax(best_run, rb.throughput_tokens_per_s);
            study_result_release(&rb);
        }
        print_message("%s %s: %.0f tokens/s, %d left out\n", mode < 0 ? "dynamic" : "none",
                      chooser, ra.throughput_tokens_per_s, ra.failed_iterations);
        int won = 0;
        for (int i = 0; i < ra.n_iter; i++) {
            if (ra.iter[i].failed) {
                assert_true(isinf(best_ms[i]));
                continue;
            }
            assert_near(ra.iter[i].ms, best_ms[i], 1e-9);
        }
        for (int k = 0; k < ra.n_sched_wins; k++) {
            int named = 0;
            for (int j = 0; j < n_names; j++) named |= strcmp(ra.sched_win_name[k], names[j]) == 0;
            assert_true(named);
            won += ra.sched_wins[k];
        }
        assert_int_equal(won, ra.iterations);
        if (!ra.failed_iterations) assert_true(ra.throughput_tokens_per_s >= best_run * (1 - 1e-12));
        study_result_release(&ra);
    }
    /* the plan: the chooser in the header, one of its schedules in every iteration */
    plan pl;
    study_result r;
    stage_model sm[RECOMPUTE_COUNT];
    run_to_plan(&s, chooser, 3, 0, 0, &r, &pl, sm);
    assert_string_equal(pl.h.schedule, chooser);
    dp_err err = {0};
    assert_int_equal(plan_check(&pl, "auto.json", &err), DP_OK);
    char keep[32];
    snprintf(keep, sizeof keep, "%s", pl.it[1].schedule);
    assert_non_null(schedule_find(keep));
    pl.it[1].schedule[0] = '\0';
    assert_int_equal(plan_check(&pl, "auto.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "iteration 1");
    const char *others[] = {"interleaved", foreign};
    for (int k = 0; k < 2; k++) {
        snprintf(pl.it[1].schedule, sizeof pl.it[1].schedule, "%s", others[k]);
        assert_int_equal(plan_check(&pl, "auto.json", &err), DP_ERR_INVALID);
        assert_msg_has(err.msg, "iteration 1");
    }
    snprintf(pl.it[1].schedule, sizeof pl.it[1].schedule, "%s", keep);
    int place = pl.h.placement;
    pl.h.placement = place == PLACEMENT_V ? PLACEMENT_LOOP : PLACEMENT_V;
    assert_int_equal(plan_check(&pl, "auto.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "\"placement\"");
    pl.h.placement = place;
    snprintf(pl.h.schedule, sizeof pl.h.schedule, "%s", keep);
    assert_int_equal(plan_check(&pl, "named.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "of its own in a plan whose header names");
    plan_release(&pl);
    study_result_release(&r);
    setup_release(&s);
}

static void test_schedule_auto_loop(void **state)
{
    (void)state;
    static const char *const loop[] = {"gpipe", "1f1b", "adaptive", "zb1"};
    check_chooser("auto-loop", loop, 4, "zbv");
}

/* auto: the run of the family (auto-loop, auto-v) whose plans of the first iteration and of the
 * one with the longest sample are faster together, the same timeline as that family's own run,
 * ties to the loop; at pp 1 the loop without a V tried; its plan's header says the placement
 * chosen and passes plan_check, and one of the other family's schedules in an iteration is
 * refused. Written out again here: the two families' own runs of those iterations decide (the
 * iteration found by cutting the trace here). */
static void test_schedule_auto(void **state)
{
    (void)state;
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 4096);
    int longest_at = 0, longest = 0; /* the iteration with the longest sample */
    batch_iter bi;
    batch_iter_init(&bi, &s.t, &s.rules);
    for (int it = 0; it < 6; it++) {
        const sample_len *b;
        int n;
        dp_err e = {0};
        assert_int_equal(batch_next(&bi, &b, &n, &e), DP_OK);
        for (int i = 0; i < n; i++)
            if (b[i].enc + b[i].dec > longest) longest = b[i].enc + b[i].dec, longest_at = it;
    }
    batch_iter_release(&bi);
    assert_true(longest_at > 0); /* this trace's first iteration does not hold it */
    for (int q = 0; q < 2; q++) {
        int mode = q ? -1 : RECOMPUTE_NONE;
        study_result ra, fam[2];
        run(&s, mode, "auto", 6, 0, &ra);
        run(&s, mode, "auto-loop", 6, 0, &fam[0]);
        run(&s, mode, "auto-v", 6, 0, &fam[1]);
        double score[2];
        for (int f = 0; f < 2; f++) score[f] = fam[f].iter[0].ms + fam[f].iter[longest_at].ms;
        int v = score[1] < score[0];
        print_message("%s: iterations 0 and %d %.3f ms on a loop, %.3f on a V: auto %s, %.0f "
                      "tokens/s\n", q ? "dynamic" : "none", longest_at, score[0], score[1],
                      ra.placement == PLACEMENT_V ? "v" : "loop", ra.throughput_tokens_per_s);
        assert_true(ra.placement_chosen);
        assert_int_equal(ra.placement, v ? PLACEMENT_V : PLACEMENT_LOOP);
        for (int f = 0; f < 2; f++) {
            assert_near(ra.placement_first_ms[f], fam[f].iter[0].ms, 1e-9);
            assert_near(ra.placement_longest_ms[f], fam[f].iter[longest_at].ms, 1e-9);
        }
        assert_true(ra.timeline_hash == fam[v].timeline_hash);
        assert_near(ra.throughput_tokens_per_s, fam[v].throughput_tokens_per_s, 1e-9);
        study_result_release(&ra), study_result_release(&fam[0]), study_result_release(&fam[1]);
    }
    /* one stage (a device large enough to hold it): no V */
    study_opts o = opts_of(&s, RECOMPUTE_NONE, "auto", 2, 0);
    o.pp = 1, o.mem_limit_mb = 1e6;
    study_result r1;
    dp_err err = {0};
    if (study_run(&o, &s.t, &r1, &err) != DP_OK) fail_msg("%s", err.msg);
    assert_int_equal(r1.placement, PLACEMENT_LOOP);
    assert_true(isinf(r1.placement_first_ms[1]));
    study_result_release(&r1);
    /* the plan: the placement chosen in its header */
    plan pl;
    study_result r;
    stage_model sm[RECOMPUTE_COUNT];
    run_to_plan(&s, "auto", 3, 0, 0, &r, &pl, sm);
    assert_string_equal(pl.h.schedule, "auto");
    assert_int_equal(pl.h.placement, r.placement);
    assert_int_equal(pl.h.chunks, r.placement == PLACEMENT_V ? 2 : 1);
    assert_int_equal(plan_check(&pl, "auto.json", &err), DP_OK);
    char keep[32];
    snprintf(keep, sizeof keep, "%s", pl.it[1].schedule);
    snprintf(pl.it[1].schedule, sizeof pl.it[1].schedule, "%s",
             r.placement == PLACEMENT_V ? "zb1" : "zbv");
    assert_int_equal(plan_check(&pl, "auto.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "iteration 1");
    snprintf(pl.it[1].schedule, sizeof pl.it[1].schedule, "%s", keep);
    pl.h.placement = r.placement == PLACEMENT_V ? PLACEMENT_LOOP : PLACEMENT_V; /* chunks kept */
    assert_int_equal(plan_check(&pl, "auto.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "\"placement\"");
    pl.h.placement = r.placement;
    /* the writer: the layout set before the first iteration (a header of none written on close),
     * refused after it, naming the file */
    for (int add = 0; add <= 1; add++) {
        const char *path = tmp_file(".json", "");
        plan_writer w;
        plan_header h = pl.h;
        h.model_json = h.hw_json = NULL, h.placement = PLACEMENT_LOOP, h.chunks = 1;
        assert_int_equal(plan_writer_open(&w, path, &h, &err), DP_OK);
        if (add) {
            assert_int_equal(plan_writer_add(&w, &pl.it[0], &err), DP_OK);
            assert_int_equal(plan_writer_set_layout(&w, 2, PLACEMENT_V, &err), DP_ERR_INVALID);
            assert_msg_has(err.msg, path);
            plan_writer_abort(&w);
            continue;
        }
        assert_int_equal(plan_writer_set_layout(&w, 2, PLACEMENT_V, &err), DP_OK);
        assert_int_equal(plan_writer_close(&w, &err), DP_OK);
        char *text = NULL;
        assert_int_equal(json_slurp(path, &text, &err), DP_OK);
        cJSON *j = cJSON_Parse(text);
        assert_non_null(j);
        assert_int_equal(cJSON_GetObjectItem(j, "chunks")->valueint, 2);
        assert_string_equal(cJSON_GetObjectItem(j, "placement")->valuestring, "v");
        assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "iterations")), 0);
        cJSON_Delete(j);
        free(text);
    }
    plan_release(&pl);
    study_result_release(&r);
    setup_release(&s);
}

/* auto-v: the same among the V schedules (a plan's placement is one: the V's). On this dense
 * profile ZB-V wins every iteration; with a MoE's exchange in pairs each wins some
 * (tests/cli/test_models_cli.sh). */
static void test_schedule_auto_v(void **state)
{
    (void)state;
    static const char *const v[] = {"zbv", "dualpipev"};
    check_chooser("auto-v", v, 2, "zb1");
}

static void test_panels_stable_ids(void **state)
{
    (void)state;
    /* The same micro-batches (packing-ffd-varlen does not cut by the schedule's memory) under
     * 1f1b and under adaptive, which reorders and renumbers them: each panel numbers them by
     * their smallest sample, so an id names the same micro-batch (rows, row length, samples: its
     * varlen rows differ) in both; every F and B of every stage is there */
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 2048);
    panel p[2];
    const char *scheds[2] = {"1f1b", "adaptive"};
    int shape[2][256][3], m = 0, distinct = 0;
    for (int k = 0; k < 2; k++) {
        study_opts o = opts_of(&s, RECOMPUTE_NONE, scheds[k], 0, 0);
        o.batching = batcher_find("packing-ffd-varlen");
        dp_err err = {0};
        if (panel_collect(&o, &s.t, 1, 0, &p[k], &err) != DP_OK) fail_msg("%s", err.msg);
        m = p[k].microbatches;
        assert_true(m > 4 && m <= 256);
        if (k == 1) assert_int_equal(p[1].microbatches, p[0].microbatches); /* the same batches */
        assert_int_equal(p[k].n_ops, (size_t)(2 * 4 * m));
        memset(shape[k], -1, sizeof shape[k]);
        double busy = 0, end = 0;
        for (size_t i = 0; i < p[k].n_ops; i++) {
            const panel_op *x = &p[k].ops[i];
            assert_true(x->id >= 0 && x->id < m);
            busy += x->t1_ms - x->t0_ms, end = fmax(end, x->t1_ms);
            if (x->op != OP_F || x->stage != 0) continue;
            assert_int_equal(shape[k][x->id][0], -1); /* one forward per id on stage 0 */
            shape[k][x->id][0] = x->mbs, shape[k][x->id][1] = x->enc_len;
            shape[k][x->id][2] = x->n_samples;
        }
        /* the panel's bubble is its ops' idle share of the pipeline (no transfers on the end here
         * to within the last backward on stage 0) */
        assert_true(p[k].pipeline_bubble > 0 && p[k].pipeline_bubble < 1);
        assert_true(p[k].pipeline_bubble <= 1 - busy / (4 * end) + 1e-9);
        for (size_t i = 0; i < p[k].n_mem; i++) assert_true(p[k].mem[i].t_ms >= 0);
    }
    for (int id = 0; id < m; id++) {
        for (int q = 0; q < 3; q++) assert_int_equal(shape[0][id][q], shape[1][id][q]);
        distinct += id > 0 && (shape[0][id][1] != shape[0][id - 1][1] ||
                               shape[0][id][2] != shape[0][id - 1][2]);
    }
    assert_true(distinct > m / 4); /* the shapes differ, so a wrong numbering would show */
    panel_release(&p[0]), panel_release(&p[1]);
    setup_release(&s);
}

static void test_cp_memory_adds_up(void **state)
{
    (void)state;
    /* with context parallelism and ZeRO over dp x cp, each stage's peak is the sum of the parts the
     * run reports (weights, gradients, optimizer, stored, transient): the planner's budget, the
     * simulator's memory and the breakdown shard the same way */
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 2048);
    model_spec m = *model_preset("llama3.1-8b");
    cluster_spec hw;
    assert_int_equal(cluster_preset("h200-node", &hw), 0);
    analytic_params ap;
    analytic_params_for_gpu(&hw.gpu, &ap);
    for (int zero = 0; zero <= 3; zero++) {
        cost_model *cm = NULL;
        assert_int_equal(cost_analytic_new(&m, &hw, 2, RECOMPUTE_NONE, &ap, &cm, NULL), DP_OK);
        assert_int_equal(cost_model_set_cp(cm, 2, 0, NULL), DP_OK);
        batch_rules rules;
        batch_rules_default(&rules, ARCH_GPT);
        rules.global_tokens = 65536, rules.max_seqlen = 8192;
        study_opts o = {0};
        o.cm = cm, o.rules = &rules, o.batching = batcher_find("packing-ffd-varlen");
        o.sched = schedule_find("1f1b");
        o.pp = 2, o.chunks = 1, o.dp = 2, o.zero = zero, o.mem_limit_mb = hw.mem_limit_mb;
        o.mbs = 1, o.mb_tokens = 2048, o.max_iterations = 2, o.validate = 1;
        study_result r;
        dp_err err = {0};
        if (study_run(&o, &s.t, &r, &err) != DP_OK) fail_msg("%s", err.msg);
        for (int d = 0; d < 2; d++) {
            double sum = r.weights_mb[d] + r.grads_mb[d] + r.optimizer_mb[d] +
                         r.stored_at_peak_mb[d] + r.transient_at_peak_mb[d];
            assert_near(r.peak_mem_mb[d], sum, 1e-6 * sum);
            /* each part against the stage's parameters counted here: 16 layers at tp 2 and its
             * share of the embeddings, sharded over the 4 GPUs of dp x cp from ZeRO-1 (the
             * optimizer), 2 (gradients) and 3 (weights, which then hold the running and the
             * prefetched unit gathered: the stage's embedding or head, 2.4 of Llama's layers,
             * beside one layer) */
            double layers = 2.0 * 16 * (double)model_layer_params(&m, 0) / 2 / 1e6;
            double P = layers + memory_embedding_share_mb(cm, placement_device_roles(PLACEMENT_LOOP, d, 2, 1));
            double emb = 2.0 * (double)model_embedding_params(&m) / 2 / 1e6;
            assert_true(emb > layers / 16);
            double w = P / (zero >= 3 ? 4 : 1) + (zero >= 3 ? emb + layers / 16 : 0);
            assert_near(r.weights_mb[d], w, 1e-6 * w);
            assert_near(r.grads_mb[d], BYTES_GRAD / BYTES_WEIGHT * P / (zero >= 2 ? 4 : 1), 1e-6 * P);
            assert_near(r.optimizer_mb[d], BYTES_OPTIMIZER / BYTES_WEIGHT * P / (zero >= 1 ? 4 : 1),
                        1e-6 * P);
        }
        study_result_release(&r);
        cost_model_free(cm);
    }
    setup_release(&s);
}

/* tune's scoring trace (planner/tune.h): the first k-1 global batches of the shipped trace, then the
 * batch holding its longest sample; re-batched, the scored trace gives exactly those batches. */
static void test_tune_scoring_trace(void **state)
{
    (void)state;
    setup s;
    setup_init(&s, "gpt-6.7b-16l", GPT_PROFILE, 8192);
    for (int k = 1; k <= 8; k += 7) {
        trace sub;
        int longest;
        dp_err err = {0};
        if (tune_scoring_trace(&s.t, &s.rules, k, &sub, &longest, &err) != DP_OK)
            fail_msg("%s", err.msg);
        /* the batches of the whole trace, written out here */
        int32_t best = -1, where = -1, nb = 0;
        size_t starts[4096];
        batch_iter it;
        batch_iter_init(&it, &s.t, &s.rules);
        for (;;) {
            const sample_len *b;
            int n;
            size_t first = it.next;
            assert_int_equal(batch_next(&it, &b, &n, &err), DP_OK);
            if (n == 0) break;
            starts[nb] = first;
            for (int i = 0; i < n; i++)
                if (b[i].enc + b[i].dec > best) best = b[i].enc + b[i].dec, where = nb;
            nb++;
        }
        starts[nb] = s.t.n;
        batch_iter_release(&it);
        assert_int_equal(longest, where);
        int want[8], nw = 0;
        for (int q = 0; q < k - 1; q++) want[nw++] = q;
        want[nw++] = where > k - 1 ? where : k - 1;
        size_t at = 0;
        for (int q = 0; q < nw; q++)
            for (size_t i = starts[want[q]]; i < starts[want[q] + 1]; i++, at++) {
                assert_true(at < sub.n);
                assert_int_equal(sub.samples[at].input_len, s.t.samples[i].input_len);
                assert_int_equal(sub.samples[at].target_len, s.t.samples[i].target_len);
            }
        assert_int_equal(at, sub.n);
        /* and it re-batches into nw batches, one of them holding the longest sample */
        batch_iter_init(&it, &sub, &s.rules);
        int count = 0, has = 0;
        for (;;) {
            const sample_len *b;
            int n;
            assert_int_equal(batch_next(&it, &b, &n, &err), DP_OK);
            if (n == 0) break;
            count++;
            for (int i = 0; i < n; i++) has |= b[i].enc + b[i].dec == best;
        }
        batch_iter_release(&it);
        assert_int_equal(count, nw);
        assert_true(has);
        trace_release(&sub);
    }
    setup_release(&s);
}

/* Whether tune tries HSDP for a ZeRO-3 layout on nodes of 8 (the rule written out): a node holds k
 * = 8 / (tp cp pp) of its replicas, 1 < k < dp, k dividing dp, or k = 1 with cp > 1. */
static int hsdp_tried(int tp, int cp, int pp, int dp)
{
    int width = tp * cp * pp;
    if (8 % width) return 0;
    int k = 8 / width;
    return k < dp && dp % k == 0 && cp * k >= 2;
}

static void test_tune_space(void **state)
{
    (void)state;
    for (int t5 = 0; t5 < 2; t5++) {
        tune_space sp;
        tune_space_default(&sp, 16, 8, t5 ? 24 : 16, t5);
        static const char *const bs[] = {"padding", "packing", "token", "dynamic"};
        for (int i = 0; i < 4; i++) sp.batchings[sp.n_batchings++] = bs[i];
        sp.schedules[sp.n_schedules++] = "1f1b";
        sp.schedules[sp.n_schedules++] = "adaptive";
        tune_point *pts = NULL;
        long n = tune_points(&sp, &pts), want = 0, want_zp = 0;
        for (int tp = 1; tp <= 8; tp *= 2)
            for (int pp = 1; pp <= 16; pp++)
                for (int dp = 1; dp <= 16; dp++) {
                    if (tp * pp * dp != 16 || (t5 && pp > 1 && pp % 2)) continue;
                    int zeros = dp == 1 ? 1 : pp == 1 ? 4 : 2; /* ZeRO 2, 3 without a pipeline */
                    int hsdp = hsdp_tried(tp, 1, pp, dp); /* ZeRO-3 again, over a node's */
                    /* padding, packing: 3 modes x 4 mbs; token: 3 x 5; dynamic: 4 x 1 */
                    want += 2 * (zeros + (zeros == 4 && hsdp)) * (3 * 4 + 3 * 4 + 3 * 5 + 4);
                    want_zp += 2 * (dp == 1 ? 1 : 4 + hsdp) * (3 * 4 + 3 * 4 + 3 * 5 + 4);
                }
        assert_int_equal(n, want);
        for (long i = 0; i < n; i++) {
            const tune_point *p = &pts[i];
            assert_int_equal(p->tp * p->pp * p->dp, 16);
            assert_true(p->tp <= 8 && p->pp <= (t5 ? 24 : 16));
            assert_true(p->zero == 0 || p->dp * p->cp > 1);
            assert_true(p->zero <= 1 || p->pp == 1);
            assert_true(p->shard_group == 0 ||
                        (p->zero == 3 && hsdp_tried(p->tp, p->cp, p->pp, p->dp) &&
                         p->shard_group == p->cp * 8 / (p->tp * p->cp * p->pp)));
            assert_true(p->recompute != RECOMPUTE_POLICY_DYNAMIC || strcmp(p->batching, "dynamic") == 0);
            for (long j = i + 1; j < n && j < i + 64; j++)
                assert_false(memcmp(p, &pts[j], sizeof *p) == 0);
        }
        free(pts);
        /* --zero-pipeline: ZeRO 2 and 3 with a pipeline too */
        sp.zero_pipeline = 1;
        assert_int_equal(tune_points(&sp, &pts), want_zp);
        free(pts);
        sp.zero_pipeline = 0;
        /* with context parallelism every layout still uses the GPUs asked for: tp x cp x pp x dp */
        long single[5] = {0};
        single[1] = n;
        for (int cp = 2; cp <= 4; cp *= 2) {
            sp.cps[0] = cp, sp.n_cps = 1;
            n = tune_points(&sp, &pts);
            long want_cp = 0;
            for (int tp = 1; tp <= 8; tp *= 2)
                for (int pp = 1; pp <= 16; pp++)
                    for (int dp = 1; dp <= 16; dp++) {
                        if (tp * cp * pp * dp != 16 || (t5 && pp > 1 && pp % 2)) continue;
                        int zeros = dp * cp == 1 ? 1 : pp == 1 ? 4 : 2; /* ZeRO over dp x cp */
                        int hsdp = zeros == 4 && hsdp_tried(tp, cp, pp, dp);
                        want_cp += 2 * (zeros + hsdp) * (3 * 4 + 3 * 4 + 3 * 5 + 4);
                    }
            assert_int_equal(n, want_cp);
            single[cp] = n;
            for (long i = 0; i < n; i++) {
                assert_int_equal(pts[i].cp, cp);
                assert_int_equal(pts[i].tp * pts[i].cp * pts[i].pp * pts[i].dp, 16);
            }
            free(pts);
        }
        /* a list of degrees (tune --cp 1,2,4): every degree's points, cp varying after tp */
        sp.cps[0] = 1, sp.cps[1] = 2, sp.cps[2] = 4, sp.n_cps = 3;
        n = tune_points(&sp, &pts);
        assert_int_equal(n, single[1] + single[2] + single[4]);
        long per_cp[5] = {0};
        for (long i = 0; i < n; i++) {
            per_cp[pts[i].cp]++;
            assert_int_equal(pts[i].tp * pts[i].cp * pts[i].pp * pts[i].dp, 16);
            if (i > 0 && pts[i].batching == pts[i - 1].batching &&
                pts[i].schedule == pts[i - 1].schedule && pts[i].tp == pts[i - 1].tp)
                assert_true(pts[i].cp >= pts[i - 1].cp);
        }
        for (int cp = 1; cp <= 4; cp *= 2) assert_int_equal(per_cp[cp], single[cp]);
        free(pts);
        sp.cps[0] = 3, sp.n_cps = 1; /* not dividing 16: no layout */
        assert_int_equal(tune_points(&sp, &pts), 0);
        assert_null(pts);
        sp.cps[0] = 1, sp.n_cps = 1;
    }
    tune_result r[4] = {{.index = 0, .ok = 0, .throughput = 9}, {.index = 1, .ok = 1, .throughput = 5},
                        {.index = 2, .ok = 1, .throughput = 7}, {.index = 3, .ok = 1, .throughput = 7}};
    r[1].pt.batching = "packing", r[2].pt.batching = "dynamic", r[3].pt.batching = "packing";
    r[0].pt.batching = "packing";
    tune_rank(r, 4);
    assert_int_equal(r[0].index, 2);
    assert_int_equal(r[1].index, 3);
    assert_int_equal(r[2].index, 1);
    assert_int_equal(r[3].index, 0); /* not feasible: last, whatever its throughput */
    assert_int_equal(tune_best(r, 4, "packing")->index, 3);
    assert_null(tune_best(r, 4, "token"));
}

/* tune --cp's list: degrees in [1, 1024], distinct, at most TUNE_MAX_CP, no empty item. */
static void test_tune_cp_list(void **state)
{
    (void)state;
    int cps[TUNE_MAX_CP], n;
    char why[300];
    assert_int_equal(tune_parse_cp_list("1,2,4", cps, &n, why, sizeof why), 0);
    assert_int_equal(n, 3);
    assert_true(cps[0] == 1 && cps[1] == 2 && cps[2] == 4);
    assert_int_equal(tune_parse_cp_list("8", cps, &n, why, sizeof why), 0);
    assert_true(n == 1 && cps[0] == 8);
    assert_int_equal(tune_parse_cp_list("1,auto,4", cps, &n, why, sizeof why), 0);
    assert_true(n == 3 && cps[0] == 1 && cps[1] == TUNE_CP_AUTO && cps[2] == 4);
    const char *bad[] = {"", ",", "1,", ",2", "1,,2", "0", "2,2", "1,x", "1025", "1,2,3,4,5,6,7,8,9",
                         "auto,2,auto", "1,Auto"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = '\0';
        assert_int_equal(tune_parse_cp_list(bad[i], cps, &n, why, sizeof why), -1);
        assert_true(strstr(why, "--cp") != NULL);
    }
}

/* A space of 16 GPUs, 8 a node, 16 layers: packing under 1F1B. */
static tune_space packing_1f1b_space(void)
{
    tune_space sp;
    tune_space_default(&sp, 16, 8, 16, 0);
    sp.batchings[sp.n_batchings++] = "packing";
    sp.schedules[sp.n_schedules++] = "1f1b";
    return sp;
}

/* tune --precision's list: known names, distinct, at most TUNE_MAX_PRECISION; each point of a
 * space of two precisions is there once per precision, the rest of it the same. */
static void test_tune_precision_list(void **state)
{
    (void)state;
    int precs[TUNE_MAX_PRECISION], n;
    char why[300];
    assert_int_equal(tune_parse_precision_list("bf16,fp8", precs, &n, why, sizeof why), 0);
    assert_true(n == 2 && precs[0] == PRECISION_BF16 && precs[1] == PRECISION_FP8);
    const char *bad[] = {"", "bf16,", "bf16,bf16", "fp4", "bf16,,fp8", "bf16,fp16,fp8,bf16"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = '\0';
        assert_int_equal(tune_parse_precision_list(bad[i], precs, &n, why, sizeof why), -1);
        assert_true(strstr(why, "--precision") != NULL);
    }
    tune_space sp = packing_1f1b_space();
    tune_point *one, *two;
    long n1 = tune_points(&sp, &one);
    sp.precisions[sp.n_precisions++] = PRECISION_FP8;
    long n2 = tune_points(&sp, &two);
    assert_true(n1 > 0 && n2 == 2 * n1);
    for (long i = 0; i < n1; i++) { /* bf16's points, then fp8's, each in the order of one */
        tune_point a = one[i], b = two[i], c = two[n1 + i];
        assert_int_equal(b.precision, PRECISION_BF16);
        assert_int_equal(c.precision, PRECISION_FP8);
        const tune_point *q[2] = {&b, &c};
        for (int k = 0; k < 2; k++)
            assert_true(q[k]->batching == a.batching && q[k]->schedule == a.schedule &&
                        q[k]->chunks == a.chunks && q[k]->tp == a.tp && q[k]->cp == a.cp &&
                        q[k]->pp == a.pp && q[k]->dp == a.dp && q[k]->zero == a.zero &&
                        q[k]->mbs == a.mbs && q[k]->mb_tokens == a.mb_tokens &&
                        q[k]->recompute == a.recompute);
    }
    free(one), free(two);
}

/* tune --ep's list: degrees in [1, 1024], distinct, at most TUNE_MAX_EP; a space of eps 1 and 4 holds
 * every point of ep 1 and, of those, exactly the ones whose tp x cp x dp ep 4 divides (brute force
 * over the ep 1 points), nothing else. */
static void test_tune_ep_list(void **state)
{
    (void)state;
    int eps[TUNE_MAX_EP], n;
    char why[300];
    assert_int_equal(tune_parse_ep_list("1,4,8", eps, &n, why, sizeof why), 0);
    assert_true(n == 3 && eps[0] == 1 && eps[1] == 4 && eps[2] == 8);
    assert_int_equal(tune_parse_ep_list("16", eps, &n, why, sizeof why), 0);
    assert_true(n == 1 && eps[0] == 16);
    const char *bad[] = {"", "1,", "0", "4,4", "1025", "auto", "1,2,4,8,16,32,64,128,256"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        why[0] = '\0';
        assert_int_equal(tune_parse_ep_list(bad[i], eps, &n, why, sizeof why), -1);
        assert_true(strstr(why, "--ep") != NULL);
    }
    tune_space sp = packing_1f1b_space();
    tune_point *one, *two;
    long n1 = tune_points(&sp, &one);
    sp.eps[sp.n_eps++] = 4;
    long n2 = tune_points(&sp, &two);
    long want = n1, seen_ep1 = 0;
    for (long i = 0; i < n1; i++) want += (one[i].tp * one[i].cp * one[i].dp) % 4 == 0;
    assert_int_equal(n2, want);
    assert_true(n2 > n1 && n2 < 2 * n1);
    for (long i = 0; i < n2; i++) {
        assert_true(two[i].ep == 1 || two[i].ep == 4);
        assert_int_equal((two[i].tp * two[i].cp * two[i].dp) % two[i].ep, 0);
        seen_ep1 += two[i].ep == 1;
    }
    assert_int_equal(seen_ep1, n1);
    char d[300];
    tune_point four = one[0];
    four.ep = 4;
    tune_point_describe(&four, d, sizeof d);
    assert_non_null(strstr(d, " ep=4 "));
    tune_point_describe(&one[0], d, sizeof d);
    assert_null(strstr(d, "ep="));
    free(one), free(two);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tune_cp_list),
        cmocka_unit_test(test_tune_ep_list),
        cmocka_unit_test(test_tune_precision_list),
        cmocka_unit_test(test_dynamic_recompute_gpt_8192),
        cmocka_unit_test(test_dynamic_recompute_t5_4096),
        cmocka_unit_test(test_keep_going),
        cmocka_unit_test(test_mixed_recompute),
        cmocka_unit_test(test_mixed_recompute_against_brute_force),
        cmocka_unit_test(test_split_backward_with_full_recompute),
        cmocka_unit_test(test_order_search_best_of_candidates),
        cmocka_unit_test(test_t5_order_against_dynapipe),
        cmocka_unit_test(test_zero_communication),
        cmocka_unit_test(test_comm_overlap),
        cmocka_unit_test(test_batching_auto),
        cmocka_unit_test(test_schedule_auto),
        cmocka_unit_test(test_schedule_auto_v),
        cmocka_unit_test(test_schedule_auto_loop),
        cmocka_unit_test(test_panels_stable_ids),
        cmocka_unit_test(test_cp_memory_adds_up),
        cmocka_unit_test(test_tune_scoring_trace),
        cmocka_unit_test(test_tune_space),
        cmocka_unit_test(test_zero_reprice_inverts_the_rule),
    };
    return cmocka_run_group_tests_name("study", tests, NULL, NULL);
}
