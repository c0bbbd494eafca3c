/*
 * bench_cost — cost-model queries per second on one core: the measured-profile model (the DP's
 * inner query) and the analytic model, as a ratio measured in the same run. Validates before
 * timing, and prints a checksum of the answers so a speed run also proves they did not change.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../models/cost.h"
#include "benchutil.h"

#define N_SHAPES 4096
#define REPEATS 5

static double run(const cost_model *cm, const cost_shape *shapes, long iters, double *checksum)
{
    double sum = 0, t0 = bench_now_s();
    for (long i = 0; i < iters; i++) {
        cost_layer l;
        if (cost_query(cm, COMP_ENCODER, &shapes[i & (N_SHAPES - 1)], &l, NULL) == DP_OK)
            sum += l.fwd_ms + l.bwd_ms;
    }
    *checksum = sum;
    return bench_now_s() - t0;
}

int main(void)
{
    cluster_spec hw;
    cluster_preset("p4d", &hw);
    const model_spec *m = model_preset("gpt-6.7b-16l");
    cost_model *prof = NULL, *ana = NULL;
    dp_err err = {0};
    if (cost_profile_load("models/profiles/a100_gpt_6.7b_profile.csv", m, &hw, 1, RECOMPUTE_NONE,
                          &prof, &err) != DP_OK) {
        fprintf(stderr, "bench_cost: %s\n", err.msg);
        return 1;
    }
    analytic_params p;
    analytic_params_default(&p);
    cost_analytic_new(m, &hw, 1, RECOMPUTE_NONE, &p, &ana, &err);
    /* Shapes the planner asks for: mbs 1..32, lengths 16..2048 in steps of 8 (mostly feasible). */
    cost_shape shapes[N_SHAPES];
    srand(1);
    for (int i = 0; i < N_SHAPES; i++)
        shapes[i] = cost_shape_rows(1 + rand() % 32, 16 + 8 * (rand() % 255), 0);
    /* validate: a grid point answers its measurement */
    cost_layer l;
    cost_shape g = cost_shape_rows(1, 2048, 0);
    if (cost_query(prof, COMP_ENCODER, &g, &l, NULL) != DP_OK || fabs(l.fwd_ms - 5.78) > 1e-12) {
        fprintf(stderr, "bench_cost: validation failed\n");
        return 1;
    }
    long iters = 4000000;
    double tp[REPEATS], ta[REPEATS], cp = 0, ca = 0;
    for (int r = 0; r < REPEATS; r++) {
        tp[r] = run(prof, shapes, iters, &cp);
        ta[r] = run(ana, shapes, iters, &ca);
    }
    double mp = bench_median(tp, REPEATS), ma = bench_median(ta, REPEATS);
    printf("# bench_cost: %ld queries per repeat, %d repeats, one core\n", iters, REPEATS);
    printf("%-10s %14s %14s %12s  %s\n", "model", "Mquery/s(med)", "Mquery/s(best)", "ns/query",
           "checksum");
    printf("%-10s %14.2f %14.2f %12.1f  %.6e\n", "profile", iters / mp / 1e6, iters / tp[0] / 1e6,
           mp / iters * 1e9, cp);
    printf("%-10s %14.2f %14.2f %12.1f  %.6e\n", "analytic", iters / ma / 1e6,
           iters / ta[0] / 1e6, ma / iters * 1e9, ca);
    printf("profile/analytic speed ratio (same run): %.2f\n", ma / mp);
    cost_model_free(prof);
    cost_model_free(ana);
    return 0;
}
