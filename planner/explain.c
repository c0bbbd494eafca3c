/* explain.c — a run and its runs with each assumed constant scaled (explain.h). */
#include "explain.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "setup.h"
#include "study.h"

/* One study of p: its throughput and MFU, whether it fits and why not; env_out (optional) keeps
 * the resolved set-up for the caller to release. */
static dp_status run_one(const plan_request *p, study_result *r, plan_env *env_out, dp_err *err)
{
    plan_env env;
    memset(r, 0, sizeof *r);
    dp_status st = planner_setup(p, &env, err);
    if (st == DP_OK) {
        study_opts o;
        planner_study_opts(p, &env, p->batching, p->schedule, &o);
        st = study_run(&o, &env.trace, r, err);
    }
    if (env_out && st == DP_OK) *env_out = env;
    else plan_env_release(&env);
    return st;
}

/* explain compares whole runs: one that left an iteration out does not answer the same question */
static int fits(const study_result *r)
{
    return study_result_fits(r) && r->failed_iterations == 0;
}

static double worse(const explain_row *w)
{
    double m = 0;
    for (int k = 0; k < 2; k++)
        if (!isnan(w->change[k])) m = fmin(m, w->change[k]);
    return m;
}

static int by_move(const void *a, const void *b)
{
    const explain_row *x = a, *y = b;
    double mx = fmax(fabs(x->change[0]), fabs(x->change[1]));
    double my = fmax(fabs(y->change[0]), fabs(y->change[1]));
    if (isnan(mx)) mx = INFINITY;
    if (isnan(my)) my = INFINITY;
    return mx < my ? 1 : mx > my ? -1 : (int)x->id - (int)y->id;
}

dp_status explain_run(const plan_request *p, double share, explain_result *out,
                      void (*progress)(void *ctx, size_t done, size_t total), void *ctx,
                      dp_err *err)
{
    if (!(share > 0 && share < 1))
        return dp_fail(err, DP_ERR_INVALID, "--share %g: a relative change in (0, 1), as 0.1 for "
                       "10%%", share);
    memset(out, 0, sizeof *out);
    out->share = share;
    plan_request base = *p;
    dp_status st = DP_OK; /* (--schedule auto: each run chooses per iteration) */
    snprintf(out->schedule, sizeof out->schedule, "%s", base.schedule);
    out->gpus = plan_request_gpus(&base);
    study_result r;
    plan_env env;
    if ((st = run_one(&base, &r, &env, err)) != DP_OK) {
        study_result_release(&r);
        return st;
    }
    out->base_tps = r.throughput_tokens_per_s, out->base_mfu = r.mfu, out->base_fits = fits(&r);
    study_result_release(&r);
    snprintf(out->cost_source, sizeof out->cost_source, "%s", env.cost_source);
    const analytic_params *params = cost_analytic_params(env.cm);
    for (int id = 0; id < ASSUME_COUNT; id++) {
        if (!assumption_applies((assumption_id)id, env.cm, out->gpus)) continue;
        /* parameters fitted to the user's own profile (--fit) are measurements of that system */
        if (base.cost.fit && params && (id == ASSUME_GEMM_EFF || id == ASSUME_ATTN_EFF ||
                                        id == ASSUME_MEM_EFF || id == ASSUME_FLOOR ||
                                        id == ASSUME_BWD_RATIO))
            continue;
        explain_row *w = &out->row[out->n++];
        w->id = (assumption_id)id;
        assumption_describe(w->id, env.cm, params, w->value, sizeof w->value);
    }
    plan_env_release(&env);
    size_t total = 1 + 2 * (size_t)out->n, done = 1;
    if (progress) progress(ctx, done, total);
    for (int i = 0; i < out->n; i++) {
        explain_row *w = &out->row[i];
        for (int k = 0; k < 2; k++) {
            cost_what_if what;
            cost_what_if_none(&what);
            what.scale[w->id] = k ? 1 + share : 1 - share;
            plan_request q = base;
            q.cost.what_if = &what;
            q.cost.quiet = 1;
            dp_err e = {0};
            dp_status s = run_one(&q, &r, NULL, &e);
            w->fits[k] = s == DP_OK && fits(&r);
            w->tps[k] = s == DP_OK ? r.throughput_tokens_per_s : 0;
            w->change[k] = w->fits[k] && out->base_tps > 0 ? w->tps[k] / out->base_tps - 1 : NAN;
            if (!w->fits[k])
                snprintf(w->why[k], sizeof w->why[k], "%.150s",
                         s != DP_OK ? e.msg : r.why[0] ? r.why : "does not fit");
            study_result_release(&r);
            if (progress) progress(ctx, ++done, total);
        }
        const char *how = assumption_about(w->id)->how;
        if (strcmp(how, "benchmark") != 0) out->worst_sum += worse(w);
    }
    qsort(out->row, (size_t)out->n, sizeof out->row[0], by_move);
    return DP_OK;
}
