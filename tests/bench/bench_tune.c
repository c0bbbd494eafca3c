/*
 * bench_tune — dpsim tune at cluster scale: Llama-3.1-8B on 64 H100 (dgx-h100), 4,194,304 tokens
 * per iteration, max length 16,384, 2 iterations per configuration, batchings packing, token and
 * dynamic (the search of issue #37), on the machine's cores. Timed twice in the same run: as
 * tune runs it (pruning by a lower bound on time) and --exhaustive (every configuration simulated
 * to the end). The two must name the same best configuration, at the same throughput, for every
 * batching, and agree on every configuration the pruned search simulated; the bench fails if not.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../planner/setup.h"
#include "../../planner/tune_run.h"
#include "benchutil.h"

static const char *const BATCHINGS[] = {"packing", "token", "dynamic"};
static const char *const SCHEDULES[] = {"1f1b", "adaptive"};

static int search(const plan_request *p, const plan_env *env, int exhaustive, double *seconds,
                  tune_result **res, long *n)
{
    int gpus = 64;
    tune_space sp;
    dp_err err = {0};
    if (planner_tune_space(p, env, &gpus, BATCHINGS, 3, SCHEDULES, 2, NULL, 0, NULL, 0, &sp, &err) != DP_OK) {
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
           "--max-seqlen 16384 --iterations 2 --batchings packing,token,dynamic, %d workers\n",
           planner_jobs_default());
    tune_result *pr = NULL, *ex = NULL;
    long npr = 0, nex = 0;
    double spr = 0, sex = 0;
    int bad = search(&p, &env, 0, &spr, &pr, &npr) != 0 || search(&p, &env, 1, &sex, &ex, &nex) != 0;
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
    printf("%-12s %10s %14s  %s\n", "search", "seconds", "pruned", "configurations");
    printf("%-12s %10.1f %14ld  %ld\n", "pruned", spr, pruned, npr);
    printf("%-12s %10.1f %14d  %ld\n", "exhaustive", sex, 0, nex);
    printf("pruned search %.2fx faster, %ld simulated configurations disagreeing\n",
           spr > 0 ? sex / spr : 0, mismatched);
    printf("%-10s %14s %14s  %s\n", "batching", "pruned tok/s", "exhaust tok/s", "best configuration");
    for (int b = 0; b < 3 && !bad; b++) {
        const tune_result *x = tune_best(pr, npr, BATCHINGS[b]), *y = tune_best(ex, nex, BATCHINGS[b]);
        char desc[256] = "-";
        if (x) tune_point_describe(&x->pt, desc, sizeof desc);
        printf("%-10s %14.0f %14.0f  %s\n", BATCHINGS[b], x ? x->throughput : 0, y ? y->throughput : 0,
               desc);
        if (!x || !y || x->index != y->index || x->throughput != y->throughput) bad = 1;
    }
    if (mismatched) bad = 1;
    if (bad) fprintf(stderr, "bench_tune: the pruned search disagrees with the exhaustive one\n");
    free(pr), free(ex);
    plan_env_release(&env);
    return bad;
}
