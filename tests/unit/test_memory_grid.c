/*
 * test_memory_grid.c — memory that the planner promises, the simulator confirms.
 *
 * A grid of configurations (GPT-6.7B and T5-11B widths on the analytic cost model; pp 1, 2, 4, 8;
 * dp 1, 2, 4; tp 1, 2, 4, 8; recompute none, selective, full, and mixed (a mode per micro-batch,
 * planner/mixed_recompute.h); tight and loose device memory; every
 * batching at each of these, and the schedules cycled over the points so that each meets each
 * batching; zbv in its V) is planned and simulated, two global batches of 32k tokens of a FLAN-like trace each. The property: every iteration that the
 * planner calls fitting simulates without going over the device memory (study_result
 * oom_unplanned == 0; the simulator's figure is its own timed accounting, sim/sim.c). The grid
 * must also contain points the planner refuses, so that the property is not vacuous. The same over
 * mixtures of experts with expert parallelism (test_moe_planned_fit_simulates_without_oom).
 */
#include "testutil.h"

#include "../../planner/study.h"
#include "../../traces/trace_gen.h"

typedef struct grid_stats {
    int points, run, refused_alone, iterations_fit, iterations_refused, unplanned;
} grid_stats;

/* Memory for a configuration: the model state of the fullest stage plus `share` single samples
 * of the longest length (stored activations) and one transient. */
static double memory_for(const cost_model *cm, int pp, int dp, int zero, const batch_rules *r,
                         double share)
{
    stage_model sm;
    dp_err err = {0};
    if (stage_model_init(&sm, cm, pp, 1, dp, zero, 1e12, &err) != DP_OK) return -1;
    cost_shape one = cost_shape_rows(1, r->max_seqlen, cm->model.arch == ARCH_T5 ? r->max_dec_seqlen : 0);
    mb_cost c;
    if (stage_model_cost(&sm, &one, &c, &err) != DP_OK) return -1;
    double state = 0, stored = 0, peak = 0;
    for (int s = 0; s < pp; s++) {
        state = fmax(state, sm.state_mb[s]);
        stored = fmax(stored, c.stored_mb[s]);
        peak = fmax(peak, c.peak_mb[s]);
    }
    return state + share * stored + (peak - stored);
}

/* rc: a recompute_mode, or RECOMPUTE_COUNT for mixed (every mode's cost model). ep: a mixture of
 * experts' expert parallelism (1 for a dense model). */
static void run_point_of(grid_stats *g, const trace *t, const model_spec *model, int ep, int pp,
                         int dp, int tp, int rc, double share, int which)
{
    model_spec m = *model;
    const char *name = m.name;
    cluster_spec hw;
    cluster_preset("p4d", &hw);
    analytic_params ap;
    analytic_params_default(&ap);
    cost_model *cms[RECOMPUTE_COUNT] = {NULL}, *cm;
    int mixed = rc == RECOMPUTE_COUNT;
    dp_err err = {0};
    for (int k = 0; k < RECOMPUTE_COUNT; k++)
        if ((mixed || k == rc) &&
            (cost_analytic_new(&m, &hw, tp, (recompute_mode)k, &ap, &cms[k], &err) != DP_OK ||
             cost_model_set_moe(cms[k], ep, NULL, &err) != DP_OK))
            fail_msg("%s", err.msg);
    cm = cms[mixed ? 0 : rc];
    batch_rules rules;
    batch_rules_default(&rules, m.arch);
    rules.global_tokens = 32768;
    int nb, ns;
    const batcher *bs = batcher_list(&nb);
    const schedule *ss = schedule_list(&ns);
    const schedule *sched = &ss[(which / nb + which % nb) % ns];
    int chunks = schedule_chunks(sched, 2); /* interleaved at 2; zbv's V at its 2 */
    if (chunks > 1 && (pp < 2 || m.arch == ARCH_T5)) sched = schedule_find("1f1b"), chunks = 1;
    int zero = dp > 1 ? 1 : 0;
    double mem = memory_for(cm, pp, dp, zero, &rules, share);
    g->points++;
    if (mem > 0) {
        study_opts o = {0};
        o.cm = cm, o.rules = &rules, o.batching = &bs[which % nb], o.sched = sched;
        o.pp = pp, o.chunks = chunks, o.dp = dp, o.zero = zero, o.mem_limit_mb = mem;
        o.mbs = 2, o.mb_tokens = 4096, o.max_iterations = 2, o.validate = 1;
        for (int k = 0; k < RECOMPUTE_COUNT && mixed; k++) o.recompute_cm[k] = cms[k];
        o.recompute_per_mb = mixed;
        study_result r;
        dp_status st = study_run(&o, t, &r, &err);
        if (st == DP_OK) {
            g->run++;
            g->iterations_fit += r.iterations - r.planned_oom;
            g->iterations_refused += r.planned_oom;
            g->unplanned += r.oom_unplanned;
            if (r.oom_unplanned)
                fail_msg("%s pp %d dp %d tp %d %s %s/%s mem %.0f MB: %d iterations the planner "
                         "called fitting simulate out of memory (%s)", name, pp, dp, tp,
                         mixed ? "mixed" : recompute_name((recompute_mode)rc), o.batching->name, sched->name, mem, r.oom_unplanned,
                         r.why);
        } else if (st == DP_ERR_INFEASIBLE) {
            g->refused_alone++; /* a sample that fits nowhere, or a model state that does not */
        } else {
            fail_msg("%s pp %d dp %d tp %d: %s", name, pp, dp, tp, err.msg);
        }
        study_result_release(&r);
    }
    for (int k = 0; k < RECOMPUTE_COUNT; k++) cost_model_free(cms[k]);
}

static void run_point(grid_stats *g, const trace *t, const char *model, int pp, int dp, int tp,
                      int rc, double share, int which)
{
    run_point_of(g, t, model_preset(model), 1, pp, dp, tp, rc, share, which);
}

/* The grids' trace: 1,500 FLAN-like samples drawn with `seed`. */
static void grid_trace(trace *t, unsigned seed)
{
    trace_init(t);
    trace_gen_opts go;
    trace_gen_defaults(&go);
    go.samples = 1500;
    go.seed = seed;
    dp_err err = {0};
    if (trace_generate(&go, t, &err) != DP_OK) fail_msg("%s", err.msg);
}

static void test_planned_fit_simulates_without_oom(void **state)
{
    (void)state;
    trace t;
    grid_trace(&t, 7);
    grid_stats g = {0};
    static const char *const models[2] = {"gpt-6.7b-16l", "t5-11b-12l"};
    static const int pps[4] = {1, 2, 4, 8}, dps[3] = {1, 2, 4}, tps[4] = {1, 2, 4, 8};
    static const double shares[2] = {2.5, 40}; /* tight, loose */
    /* make test (DPSIM_TEST_TIER=fast) runs every other point of the grid, make check all */
    const char *tier = getenv("DPSIM_TEST_TIER");
    int stride = tier && strcmp(tier, "fast") == 0 ? 2 : 1, which = 0;
    for (int a = 0; a < 2; a++)
        for (int p = 0; p < 4; p++)
            for (int d = 0; d < 3; d++)
                for (int q = 0; q < 4; q++)
                    for (int rc = 0; rc <= RECOMPUTE_COUNT; rc++)
                        for (int mem = 0; mem < 2; mem++)
                            for (int b = 0; b < 5; b++, which++) /* every batching, every point */
                                if (which % stride == 0)
                                    run_point(&g, &t, models[a], pps[p], dps[d], tps[q], rc,
                                              shares[mem], which);
    printf("# memory grid: %d points, %d planned and simulated, %d refused (a sample fits nowhere); "
           "iterations: %d fit, %d refused by the planner, %d over memory though called fitting\n",
           g.points, g.run, g.refused_alone, g.iterations_fit, g.iterations_refused, g.unplanned);
    assert_int_equal(g.unplanned, 0);
    assert_true(g.run > g.points / 2);
    assert_true(g.iterations_refused > 20 / stride); /* the tight points do bite */
    assert_true(g.iterations_fit > 200 / stride);
    trace_release(&t);
}

/* The same property for mixtures of experts (Qwen3-30B-A3B and Mixtral-8x7B configs, expert
 * parallelism over each stage's GPUs, a micro-batch's memory at its busiest expert rank): pp 1, 2,
 * 4; dp 2, 4, 8; ep 2 to dp; every recompute mode and mixed; tight and loose memory; the
 * batchings and schedules cycled as above. */
static void test_moe_planned_fit_simulates_without_oom(void **state)
{
    (void)state;
    trace t;
    grid_trace(&t, 9);
    dp_err err = {0};
    grid_stats g = {0};
    static const char *const files[2] = {"tests/data/hf/qwen3-30b-a3b.json",
                                         "tests/data/hf/mixtral-8x7b.json"};
    static const int pps[3] = {1, 2, 4}, dps[3] = {2, 4, 8};
    static const double shares[2] = {2.5, 40};
    const char *tier = getenv("DPSIM_TEST_TIER");
    int stride = tier && strcmp(tier, "fast") == 0 ? 3 : 1, which = 0;
    for (int a = 0; a < 2; a++) {
        model_spec m;
        if (model_resolve(files[a], &m, &err) != DP_OK) fail_msg("%s", err.msg);
        for (int p = 0; p < 3; p++)
            for (int d = 0; d < 3; d++)
                for (int ep = 2; ep <= dps[d]; ep *= 2)
                    for (int rc = 0; rc <= RECOMPUTE_COUNT; rc++)
                        for (int mem = 0; mem < 2; mem++, which++)
                            if (which % stride == 0 && m.experts % ep == 0)
                                run_point_of(&g, &t, &m, ep, pps[p], dps[d], 1, rc, shares[mem],
                                             which * 3);
    }
    printf("# MoE memory grid: %d points, %d planned and simulated, %d refused; iterations: %d "
           "fit, %d refused by the planner, %d over memory though called fitting\n", g.points,
           g.run, g.refused_alone, g.iterations_fit, g.iterations_refused, g.unplanned);
    assert_int_equal(g.unplanned, 0);
    assert_true(g.run > g.points / 2);
    assert_true(g.iterations_fit > 50 / stride);
    trace_release(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_planned_fit_simulates_without_oom),
        cmocka_unit_test(test_moe_planned_fit_simulates_without_oom),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
