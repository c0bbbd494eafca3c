/*
 * bench_tune — dpsim tune at cluster scale: Llama-3.1-8B on 64 H100 (dgx-h100), 4,194,304 tokens
 * per iteration, max length 16,384, 2 iterations per configuration, on the machine's cores: the
 * batchings packing, token and dynamic (the search of issue #37), and tune's default batchings and
 * schedules (issue #50's). Each timed twice in the same run: as tune runs it (pruning by a lower
 * bound on time) and --exhaustive (every configuration simulated to the end). The two must name
 * the same best configuration, at the same throughput, for every batching, and agree on every
 * configuration the pruned search simulated; the bench fails if not.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../planner/setup.h"
#include "../../planner/tune_run.h"
#include "benchutil.h"

/* The two searches: the three batchings of issue #37, and tune's defaults (TUNE_DEFAULT_*). */
static const char *const THREE[] = {"packing", "token", "dynamic"};
static const char *const SCHEDULES[] = {"1f1b", "adaptive"};

static int search(const plan_request *p, const plan_env *env, const char *const *bs, int nb,
                  int exhaustive, double *seconds, tune_result **res, long *n)
{
    int gpus = 64;
    tune_space sp;
    dp_err err = {0};
    if (planner_tune_space(p, env, &gpus, bs, nb, SCHEDULES, 2, NULL, 0, NULL, 0, NULL, 0, &sp, &err) != DP_OK) {
        fprintf(stderr, "bench_tune: %s\n", err.msg);
        return -1;
    }
    tune_run_opts run = {0};
    run.quiet = 1, run.exhaustive = exhaustive;
    double t0 = bench_now_s();
    if (planner_tune(p, env, &sp, planner_jobs_default(), &run, res, n, &err) != DP_OK) {
        fprintf(stderr, "bench_tune: %s\n", err.msg);
        return -1;
    }
    *seconds = bench_now_s() - t0;
    return 0;
}

/* One search pruned and --exhaustive, compared; 0 when they agree. */
static int compare(const plan_request *p, const plan_env *env, const char *name,
                   const char *const *bs, int nb)
{
    tune_result *pr = NULL, *ex = NULL;
    long npr = 0, nex = 0;
    double spr = 0, sex = 0;
    int bad = search(p, env, bs, nb, 0, &spr, &pr, &npr) != 0 ||
              search(p, env, bs, nb, 1, &sex, &ex, &nex) != 0;
    long pruned = 0, mismatched = 0;
    for (long i = 0; !bad && i < npr; i++) {
        if (tune_result_pruned(&pr[i])) {
            pruned++;
            continue;
        }
        for (long q = 0; q < nex; q++) /* the same point, simulated the same */
            if (ex[q].index == pr[i].index)
                mismatched += ex[q].ok != pr[i].ok || fabs(ex[q].throughput - pr[i].throughput) > 1e-6;
    }
    printf("## %s\n", name);
    printf("%-12s %10s %14s  %s\n", "search", "seconds", "pruned", "configurations");
    printf("%-12s %10.1f %14ld  %ld\n", "pruned", spr, pruned, npr);
    printf("%-12s %10.1f %14d  %ld\n", "exhaustive", sex, 0, nex);
    printf("pruned search %.2fx faster, %ld simulated configurations disagreeing\n",
           spr > 0 ? sex / spr : 0, mismatched);
    printf("%-18s %14s %14s  %s\n", "batching", "pruned tok/s", "exhaust tok/s", "best configuration");
    for (int b = 0; b < nb && !bad; b++) {
        const tune_result *x = tune_best(pr, npr, bs[b]), *y = tune_best(ex, nex, bs[b]);
        char desc[256] = "-";
        if (x) tune_point_describe(&x->pt, desc, sizeof desc);
        printf("%-18s %14.0f %14.0f  %s\n", bs[b], x ? x->throughput : 0, y ? y->throughput : 0,
               desc);
        if (!x || !y || x->index != y->index || x->throughput != y->throughput) bad = 1;
    }
    if (mismatched) bad = 1;
    if (bad) fprintf(stderr, "bench_tune: %s: the pruned search disagrees with the exhaustive one\n",
                     name);
    free(pr), free(ex);
    return bad;
}

int main(void)
{
    plan_request p;
    plan_request_default(&p);
    p.cost.model = "llama3.1-8b", p.cost.hw = "dgx-h100", p.cost.quiet = 1;
    p.global_tokens = 4194304, p.max_seqlen = 16384, p.iterations = 2;
    p.pp = 1, p.dp = 1;
    plan_env env;
    dp_err err = {0};
    if (planner_setup(&p, &env, &err) != DP_OK) {
        fprintf(stderr, "bench_tune: %s\n", err.msg);
        return 1;
    }
    printf("# bench_tune: tune --model llama3.1-8b --hw dgx-h100 --gpus 64 --global-tokens 4194304 "
           "--max-seqlen 16384 --iterations 2, %d workers\n", planner_jobs_default());
    char list[] = TUNE_DEFAULT_BATCHINGS;
    const char *defaults[TUNE_MAX_LIST];
    int nd = planner_split_list(list, defaults, TUNE_MAX_LIST);
    int bad = compare(&p, &env, "tune's default batchings (" TUNE_DEFAULT_BATCHINGS ")", defaults, nd);
    bad |= compare(&p, &env, "--batchings packing,token,dynamic", THREE, 3);
    plan_env_release(&env);
    return bad;
}
