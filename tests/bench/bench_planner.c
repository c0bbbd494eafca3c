/*
 * bench_planner — planning time per global batch of the dynamic micro-batcher, exact (breakpoint
 * descent) against DynaPipe's thinned enumeration (5 ms), measured in the same run on the same
 * 200 batches of the default trace; then the simulator's events per second and the wall time to
 * simulate the whole default trace under each schedule.
 *
 * Validates before timing: the exact objective is never worse than the thinned one on any batch.
 * Prints a checksum of the objectives so a speed run also proves the answers did not change.
 */
#include <math.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../scheduler/batch.h"
#include "../../scheduler/microbatch.h"
#include "../../planner/order_search.h"
#include "../../planner/study.h"
#include "benchutil.h"

#define N_BATCHES 200

typedef struct setup {
    const char *label, *model, *profile;
    int tp, pp, max_seqlen;
} setup;

static int load(const setup *su, trace *t, cost_model **cm, model_spec *m, cluster_spec *hw)
{
    dp_err err = {0};
    *m = *model_preset(su->model);
    cluster_preset("p4d", hw);
    /* the shipped profiles' tp rows as measured (without sequence parallelism) */
    if (cost_profile_load_at(su->profile, m, hw, su->tp, 1, -1, RECOMPUTE_NONE, cm, &err) != DP_OK) {
        fprintf(stderr, "bench_planner: %s\n", err.msg);
        return -1;
    }
    return 0;
    (void)t;
}

static int bench_setup(const setup *su, const trace *t)
{
    model_spec m;
    cluster_spec hw;
    cost_model *cm;
    if (load(su, NULL, &cm, &m, &hw) != 0) return -1;
    dp_err err = {0};
    stage_model sm;
    if (stage_model_init(&sm, cm, su->pp, 1, 1, 1, hw.mem_limit_mb, &err) != DP_OK) {
        fprintf(stderr, "bench_planner: %s\n", err.msg);
        return -1;
    }
    batch_rules r;
    batch_rules_default(&r, m.arch);
    r.max_seqlen = su->max_seqlen;
    if (m.arch == ARCH_T5) r.max_dec_seqlen = su->max_seqlen;
    batch_iter it;
    batch_iter_init(&it, t, &r);
    double exact[N_BATCHES], thin[N_BATCHES], checksum = 0;
    int passes = 0, n_b = 0, fallback = 0;
    mb_list l;
    mb_list_init(&l);
    shape_cache *cache[2] = {shape_cache_new(), shape_cache_new()}; /* kept across batches, as a run's */
    for (; n_b < N_BATCHES; n_b++) {
        const sample_len *b;
        int n;
        if (batch_next(&it, &b, &n, &err) != DP_OK || n == 0) break;
        double obj[2];
        for (int v = 0; v < 2; v++) {
            batch_ctx ctx = {&r, &sm, 1, 2048, v ? 5.0 : 0, NULL, DP_SPLIT_AUTO, cache[v], 0};
            mb_list_clear(&l);
            double t0 = bench_now_s();
            dp_status st = dp_batch(&ctx, b, n, &l, &err);
            double dt = (bench_now_s() - t0) * 1e3;
            if (st != DP_OK) {
                fprintf(stderr, "bench_planner: %s\n", err.msg);
                return -1;
            }
            mb_list_finish(&ctx, &l, &err);
            obj[v] = l.obj_value_ms;
            (v ? thin : exact)[n_b] = dt;
            if (!v) passes += l.dp_passes, fallback += l.in_flight == 1;
        }
        if (obj[0] > obj[1] + 1e-6) {
            fprintf(stderr, "bench_planner: validation failed: exact %.6f > thinned %.6f\n", obj[0], obj[1]);
            return -1;
        }
        checksum += obj[0];
    }
    double em = bench_median(exact, n_b), tm = bench_median(thin, n_b);
    printf("%-28s %6d %9.3f %9.3f %9.3f %9.3f %8.2f %8.1f  %.6e\n", su->label, n_b, em,
           bench_quantile(exact, n_b, 0.9), tm, bench_quantile(thin, n_b, 0.9), tm / em,
           (double)passes / n_b, checksum);
    mb_list_release(&l);
    batch_iter_release(&it);
    shape_cache_free(cache[0]), shape_cache_free(cache[1]);
    cost_model_free(cm);
    return 0;
}

/* The GPT default point (GPT-6.7B 16L, the A100 profile, pp 4, 2048) and its length rules. */
static int gpt_default(cost_model **cm, cluster_spec *hw, batch_rules *r)
{
    model_spec m;
    setup su = {"", "gpt-6.7b-16l", "models/profiles/a100_gpt_6.7b_profile.csv", 1, 4, 2048};
    if (load(&su, NULL, cm, &m, hw) != 0) return -1;
    batch_rules_default(r, m.arch);
    return 0;
}

static int bench_sim(const trace *t)
{
    cluster_spec hw;
    cost_model *cm;
    batch_rules r;
    if (gpt_default(&cm, &hw, &r) != 0) return -1;
    printf("\n# simulating the whole default trace (%zu samples), dynamic micro-batching, pp 4\n", t->n);
    printf("%-12s %10s %12s %12s %14s %12s  %s\n", "schedule", "iterations", "events", "sim_s",
           "Mevents/s", "total_wall_s", "timeline hash");
    const char *names[] = {"gpipe", "1f1b", "interleaved", "adaptive", "zb1"};
    for (int i = 0; i < 5; i++) {
        study_opts o = {0};
        o.cm = cm, o.rules = &r, o.batching = batcher_find("dynamic");
        o.sched = schedule_find(names[i]);
        o.pp = 4, o.chunks = strcmp(names[i], "interleaved") == 0 ? 2 : 1, o.dp = 1, o.zero = 1;
        o.mem_limit_mb = 1e9, o.mbs = 1, o.mb_tokens = 2048;
        study_result res;
        dp_err err = {0};
        double t0 = bench_now_s();
        if (study_run(&o, t, &res, &err) != DP_OK) {
            fprintf(stderr, "bench_planner: %s\n", err.msg);
            return -1;
        }
        double wall = bench_now_s() - t0;
        printf("%-12s %10d %12llu %12.3f %14.2f %12.2f  %016llx\n", names[i], res.iterations,
               (unsigned long long)res.events, res.sim_wall_s, res.events / res.sim_wall_s / 1e6,
               wall, (unsigned long long)res.timeline_hash);
        study_result_release(&res);
    }
    cost_model_free(cm);
    return 0;
}

/* --batching auto beside the DP alone: planning time per iteration (median over 40 global
 * batches, the study's own measure: micro-batching, order, schedule, memory check; auto plans and
 * simulates every candidate), at the GPT default point under 1F1B and the adaptive schedule. */
static int bench_auto(const trace *t)
{
    cluster_spec hw;
    cost_model *cm;
    batch_rules r;
    if (gpt_default(&cm, &hw, &r) != 0) return -1;
    printf("\n# --batching auto against the DP: planning ms per iteration (median, p90), 40 global "
           "batches, GPT-6.7B 16L, pp 4, 2048\n");
    printf("%-10s %12s %10s %10s %10s %10s %12s\n", "schedule", "batching", "plan_ms", "plan_p90",
           "tokens/s", "auto/dp", "ms ratio");
    static const char *const scheds[2] = {"1f1b", "adaptive"};
    for (int q = 0; q < 2; q++) {
        double ms[2], p90[2], thr[2];
        static const char *const bs[2] = {"dynamic", "auto"};
        for (int b = 0; b < 2; b++) {
            study_opts o = {0};
            o.cm = cm, o.rules = &r, o.batching = batcher_find(bs[b]), o.sched = schedule_find(scheds[q]);
            o.pp = 4, o.chunks = 1, o.dp = 1, o.zero = 1, o.mem_limit_mb = hw.mem_limit_mb;
            o.mbs = 1, o.mb_tokens = 2048, o.max_iterations = 40;
            study_result res;
            dp_err err = {0};
            if (study_run(&o, t, &res, &err) != DP_OK) {
                fprintf(stderr, "bench_planner: %s\n", err.msg);
                return -1;
            }
            ms[b] = res.plan_ms_median, p90[b] = res.plan_ms_p90, thr[b] = res.throughput_tokens_per_s;
            study_result_release(&res);
        }
        for (int b = 0; b < 2; b++)
            printf("%-10s %12s %10.3f %10.3f %10.0f %10s %12s\n", scheds[q], bs[b], ms[b], p90[b],
                   thr[b], b ? "" : "-", b ? "" : "-");
        printf("%-10s %12s %10s %10s %10s %10.3f %12.1f\n", scheds[q], "(same run)", "", "", "",
               thr[1] / thr[0], ms[1] / ms[0]);
        if (thr[1] < thr[0] * (1 - 1e-9)) {
            fprintf(stderr, "bench_planner: validation failed: auto slower than the DP it chooses from\n");
            return -1;
        }
    }
    cost_model_free(cm);
    return 0;
}

/* What the order choices cost: the T5 order (mb_order, a TSP path) beside the DP it feeds, and the
 * adaptive schedule's order search with DynaPipe's cluster permutations against the four fixed
 * orders alone, on the same dynamic micro-batches of the default trace. */
static int bench_orders(const trace *t)
{
    static const setup sus[2] = {
        {"GPT-6.7B, 4 stages, 2048", "gpt-6.7b-16l", "models/profiles/a100_gpt_6.7b_profile.csv", 1, 4, 2048},
        {"T5-11B, 4 stages, 2048", "t5-11b-12l", "models/profiles/a100_t5_11b_profile.csv", 4, 4, 2048},
    };
    printf("\n# order costs per global batch (65,536 tokens), the same batches for both columns\n");
    printf("%-26s %7s %10s %10s %12s %12s %10s %10s %7s\n", "setup", "batches", "order_ms", "dp_ms",
           "search4_ms", "search_ms", "mean4_ms", "mean_ms", "cands");
    for (int k = 0; k < 2; k++) {
        model_spec m;
        cluster_spec hw;
        cost_model *cm;
        if (load(&sus[k], NULL, &cm, &m, &hw) != 0) return -1;
        dp_err err = {0};
        stage_model sm;
        if (stage_model_init(&sm, cm, sus[k].pp, 1, 1, 1, hw.mem_limit_mb, &err) != DP_OK) {
            fprintf(stderr, "bench_planner: %s\n", err.msg);
            return -1;
        }
        sim_config cfg;
        study_sim_config(&sm, &hw, &cfg);
        sim s;
        sim_init(&s);
        batch_rules r;
        batch_rules_default(&r, m.arch);
        batch_iter it;
        batch_iter_init(&it, t, &r);
        double ord[60], dpt[60], s4[60], sa[60], m4 = 0, ma = 0;
        int nb = 0;
        long cands = 0;
        mb_list l;
        mb_list_init(&l);
        for (; nb < 60; nb++) {
            const sample_len *b;
            int n;
            if (batch_next(&it, &b, &n, &err) != DP_OK || n == 0) break;
            sample_len *x = malloc((size_t)n * sizeof *x);
            memcpy(x, b, (size_t)n * sizeof *x);
            double t0 = bench_now_s();
            mb_order(&r, x, n);
            ord[nb] = (bench_now_s() - t0) * 1e3;
            batch_ctx ctx = {&r, &sm, 1, 2048, 0, NULL, DP_SPLIT_AUTO, NULL, 0};
            mb_list_clear(&l);
            t0 = bench_now_s();
            if (dp_batch_ordered(&ctx, x, n, &l, &err) != DP_OK) {
                fprintf(stderr, "bench_planner: %s\n", err.msg);
                return -1;
            }
            dpt[nb] = (bench_now_s() - t0) * 1e3;
            free(x);
            microbatch *orig = malloc((size_t)l.n_mb * sizeof *orig);
            memcpy(orig, l.mb, (size_t)l.n_mb * sizeof *orig);
            order_result o4, oa;
            t0 = bench_now_s();
            order_search(&sm, schedule_find("adaptive"), &cfg, &s, ORDER_SEARCH_FIXED, &l, &o4, &err);
            s4[nb] = (bench_now_s() - t0) * 1e3;
            memcpy(l.mb, orig, (size_t)l.n_mb * sizeof *orig);
            t0 = bench_now_s();
            order_search(&sm, schedule_find("adaptive"), &cfg, &s, ORDER_SEARCH_ALL, &l, &oa, &err);
            sa[nb] = (bench_now_s() - t0) * 1e3;
            free(orig);
            if (oa.best_ms > o4.best_ms + 1e-9 && o4.fits) {
                fprintf(stderr, "bench_planner: validation failed: the full search lost to the four orders\n");
                return -1;
            }
            m4 += o4.best_ms, ma += oa.best_ms, cands += oa.candidates;
        }
        printf("%-26s %7d %10.3f %10.3f %12.3f %12.3f %10.2f %10.2f %7.1f\n", sus[k].label, nb,
               bench_median(ord, nb), bench_median(dpt, nb), bench_median(s4, nb), bench_median(sa, nb),
               m4 / nb, ma / nb, (double)cands / nb);
        mb_list_release(&l);
        batch_iter_release(&it);
        sim_release(&s);
        cost_model_free(cm);
    }
    return 0;
}

/* One iteration of a large job on the analytic model of a DGX-H100 cluster: planning and
 * simulation time; rc < 0 when it fails. */
static int bench_one(const char *label, const char *model, int pp, int tp, int dp, int64_t tokens,
                     recompute_mode rc, int split, const trace *t)
{
    model_spec m = *model_preset(model);
    cluster_spec hw;
    cluster_preset("dgx-h100", &hw);
    analytic_params ap;
    analytic_params_default(&ap);
    cost_model *cm = NULL;
    dp_err err = {0};
    if (cost_analytic_new(&m, &hw, tp, rc, &ap, &cm, &err) != DP_OK) {
        fprintf(stderr, "bench_planner: %s\n", err.msg);
        return -1;
    }
    batch_rules r;
    batch_rules_default(&r, m.arch);
    r.global_tokens = tokens;
    study_opts o = {0};
    o.cm = cm, o.rules = &r, o.batching = batcher_find("dynamic"), o.sched = schedule_find("1f1b");
    o.pp = pp, o.chunks = 1, o.dp = dp, o.zero = 1, o.mem_limit_mb = hw.mem_limit_mb;
    o.mbs = 1, o.mb_tokens = 2048, o.max_iterations = 1, o.dp_split = split;
    study_result res;
    double t0 = bench_now_s();
    dp_status st = study_run(&o, t, &res, &err);
    double wall = bench_now_s() - t0;
    if (st != DP_OK) {
        fprintf(stderr, "bench_planner: %s: %s\n", label, err.msg);
        cost_model_free(cm);
        return -1;
    }
    printf("%-34s %7d %9.1f %9.3f %9llu %9.2f %9.3f %12.0f\n", label, tp * pp * dp,
           res.plan_ms_median, res.sim_wall_s, (unsigned long long)res.events,
           res.sim_wall_s > 0 ? res.events / res.sim_wall_s / 1e6 : 0, wall,
           res.throughput_tokens_per_s);
    study_result_release(&res);
    cost_model_free(cm);
    return 0;
}

/* Scale: the data-parallel sweep (8, 64, 512 replicas of GPT-6.7B-32L on 8 stages, 8,192 tokens
 * per replica), the global DP against the per-replica split, and the 16,384-GPU job (GPT-175B width, 16 stages x TP 8 x 128 replicas). */
static int bench_scale(const trace *t)
{
    printf("\n# scale: one iteration, dynamic + 1f1b, analytic DGX-H100 (plan ms; sim s; M events/s)\n");
    printf("%-34s %7s %9s %9s %9s %9s %9s %12s\n", "setup", "GPUs", "plan_ms", "sim_s", "events",
           "Mev/s", "wall_s", "tokens/s");
    static const int dps[] = {8, 64, 512};
    for (int i = 0; i < 3; i++)
        for (int split = DP_SPLIT_GLOBAL; split <= DP_SPLIT_REPLICA; split++) {

            char label[80];
            snprintf(label, sizeof label, "gpt-6.7b-32l pp 8 dp %d, %s", dps[i],
                     split == DP_SPLIT_GLOBAL ? "global DP" : "per replica");
            if (bench_one(label, "gpt-6.7b-32l", 8, 1, dps[i], (int64_t)8192 * dps[i], RECOMPUTE_NONE,
                          split, t) != 0)
                return -1;
        }
    for (int split = DP_SPLIT_GLOBAL; split <= DP_SPLIT_REPLICA; split++)
        if (bench_one(split == DP_SPLIT_GLOBAL ? "gpt-175b-16l pp16 tp8 dp128, global"
                                               : "gpt-175b-16l pp16 tp8 dp128, replica",
                      "gpt-175b-16l", 16, 8, 128, 4194304, RECOMPUTE_FULL, split, t) != 0)
            return -1;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("peak RSS of this benchmark: %.0f MB\n", (double)ru.ru_maxrss / 1024);
    return 0;
}

/* Recompute per iteration (dynamic) against per micro-batch (mixed), the same 48 global batches of
 * the default trace at 8192 tokens on 4 stages (1F1B, 36,000 MB): planning time per iteration
 * (median and p90, the planner's own clock) and simulated throughput, in the same run. */
static int bench_recompute(const trace *t)
{
    model_spec m = *model_preset("gpt-6.7b-16l");
    cluster_spec hw;
    cluster_preset("p4d", &hw);
    cost_model *cms[RECOMPUTE_COUNT] = {NULL};
    dp_err err = {0};
    for (int k = 0; k < RECOMPUTE_COUNT; k++)
        if (cost_profile_load("models/profiles/a100_gpt_6.7b_profile.csv", &m, &hw, 1,
                              (recompute_mode)k, &cms[k], &err) != DP_OK) {
            fprintf(stderr, "bench_planner: %s\n", err.msg);
            return -1;
        }
    batch_rules r;
    batch_rules_default(&r, m.arch);
    r.max_seqlen = 8192;
    printf("\n# recompute per iteration (dynamic) and per micro-batch (mixed): GPT-6.7B, 8192, pp 4, "
           "1f1b, 48 batches\n");
    printf("%-10s %10s %10s %14s  %s\n", "recompute", "plan_ms", "plan_p90", "tokens/s",
           "micro-batches none/selective/full");
    double thr[2] = {0};
    for (int mixed = 0; mixed < 2; mixed++) {
        study_opts o = {0};
        o.cm = cms[0], o.rules = &r, o.batching = batcher_find("dynamic");
        o.sched = schedule_find("1f1b");
        o.pp = 4, o.chunks = 1, o.dp = 1, o.zero = 1;
        o.mem_limit_mb = hw.mem_limit_mb, o.mbs = 1, o.mb_tokens = 2048, o.max_iterations = 48;
        for (int k = 0; k < RECOMPUTE_COUNT; k++) o.recompute_cm[k] = cms[k];
        o.recompute_per_mb = mixed;
        study_result res;
        if (study_run(&o, t, &res, &err) != DP_OK) {
            fprintf(stderr, "bench_planner: %s\n", err.msg);
            return -1;
        }
        thr[mixed] = res.throughput_tokens_per_s;
        printf("%-10s %10.3f %10.3f %14.0f  %d/%d/%d\n", mixed ? "mixed" : "dynamic",
               res.plan_ms_median, res.plan_ms_p90, res.throughput_tokens_per_s,
               res.recompute_microbatches[0], res.recompute_microbatches[1],
               res.recompute_microbatches[2]);
        study_result_release(&res);
    }
    printf("mixed over dynamic: %.3fx throughput\n", thr[0] > 0 ? thr[1] / thr[0] : 0);
    for (int k = 0; k < RECOMPUTE_COUNT; k++) cost_model_free(cms[k]);
    return 0;
}

int main(void)
{
    trace t;
    trace_init(&t);
    dp_err err = {0};
    if (trace_read_csv("traces/flanv2-100k.csv", NULL, &t, &err) != DP_OK) {
        fprintf(stderr, "bench_planner: %s\n", err.msg);
        return 1;
    }
    static const setup setups[] = {
        {"GPT-6.7B, 4 stages, 2048", "gpt-6.7b-16l", "models/profiles/a100_gpt_6.7b_profile.csv", 1, 4, 2048},
        {"GPT-6.7B, 4 stages, 8192", "gpt-6.7b-16l", "models/profiles/a100_gpt_6.7b_profile.csv", 1, 4, 8192},
        {"T5-11B, 8 stages, 2048", "t5-11b-24l", "models/profiles/a100_t5_11b_profile.csv", 8, 8, 2048},
    };
    printf("# bench_planner: dynamic micro-batching time per global batch (65,536 tokens), one core\n");
    printf("%-28s %6s %9s %9s %9s %9s %8s %8s  %s\n", "setup", "batches", "exact_ms", "exact_p90",
           "thin_ms", "thin_p90", "thin/ex", "passes", "objective checksum");
    for (size_t i = 0; i < sizeof setups / sizeof *setups; i++)
        if (bench_setup(&setups[i], &t) != 0) return 1;
    int rc = bench_orders(&t) != 0 || bench_recompute(&t) != 0 || bench_auto(&t) != 0 ||
             bench_sim(&t) != 0 || bench_scale(&t) != 0;
    trace_release(&t);
    return rc;
}
