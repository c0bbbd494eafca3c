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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../scheduler/batch.h"
#include "../../scheduler/microbatch.h"
#include "../../sim/study.h"
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
    if (cost_profile_load(su->profile, m, hw, su->tp, RECOMPUTE_NONE, cm, &err) != DP_OK) {
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
    for (; n_b < N_BATCHES; n_b++) {
        const sample_len *b;
        int n;
        if (batch_next(&it, &b, &n, &err) != DP_OK || n == 0) break;
        double obj[2];
        for (int v = 0; v < 2; v++) {
            batch_ctx ctx = {&r, &sm, 1, 2048, v ? 5.0 : 0};
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
    cost_model_free(cm);
    return 0;
}

static int bench_sim(const trace *t)
{
    model_spec m;
    cluster_spec hw;
    cost_model *cm;
    setup su = {"", "gpt-6.7b-16l", "models/profiles/a100_gpt_6.7b_profile.csv", 1, 4, 2048};
    if (load(&su, NULL, &cm, &m, &hw) != 0) return -1;
    batch_rules r;
    batch_rules_default(&r, m.arch);
    printf("\n# simulating the whole default trace (%zu samples), dynamic micro-batching, pp 4\n", t->n);
    printf("%-12s %10s %12s %12s %14s %12s  %s\n", "schedule", "iterations", "events", "sim_s",
           "Mevents/s", "total_wall_s", "timeline hash");
    const char *names[] = {"gpipe", "1f1b", "interleaved", "adaptive", "zb1"};
    for (int i = 0; i < 5; i++) {
        study_opts o = {cm, &r, batcher_find("dynamic"), schedule_find(names[i]), 4,
                        strcmp(names[i], "interleaved") == 0 ? 2 : 1, 1, 1, 1e9, 1, 2048, 0,
                        0, 0, NULL, NULL, NULL, NULL, NULL};
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
    int rc = bench_sim(&t) != 0;
    trace_release(&t);
    return rc;
}
