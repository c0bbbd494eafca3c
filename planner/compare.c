/* compare.c — dpsim compare's rows (compare.h). */
#include "compare.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../scheduler/microbatch.h"
#include "../scheduler/schedule.h"
#include "tune_run.h"

#define TUNED_FALLBACKS 8 /* configurations of a method tried on the whole run at most */

int compare_row_fits(const compare_row *w)
{
    return w->st == DP_OK && study_result_fits(&w->r);
}

int compare_best_row(const compare_row *rows, int n, int dynamic)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        const batcher *b = batcher_find(rows[i].batching);
        if (!b || b->chooses || !compare_row_fits(&rows[i])) continue;
        int is_dp = b->memory_aware && !b->packs_rows; /* DynaPipe's DP over samples */
        if (dynamic ? !is_dp : (is_dp || !b->varlen)) continue;
        if (best < 0 || rows[i].r.throughput_tokens_per_s > rows[best].r.throughput_tokens_per_s)
            best = i;
    }
    return best;
}

int compare_best_single(const compare_row *rows, int n, const char *sched)
{
    int best = -1;
    for (int i = 0; i < n; i++) {
        const batcher *b = batcher_find(rows[i].batching);
        if (!b || b->chooses || !compare_row_fits(&rows[i]) ||
            (sched && strcmp(rows[i].schedule, sched) != 0))
            continue;
        if (best < 0 || rows[i].r.throughput_tokens_per_s > rows[best].r.throughput_tokens_per_s)
            best = i;
    }
    return best;
}

int compare_figure_row(const compare_row *rows, int n)
{
    int pick = 0;
    for (int i = 0; i < n; i++)
        if (strcmp(rows[i].batching, "dynamic") == 0) {
            pick = i;
            const schedule *s = schedule_find(rows[i].schedule);
            if (s && s->admits_by_memory) break;
        }
    return pick;
}

/* The tuned rows: tunes every batching (planner_tune over the schedules, tune_iterations each),
 * then runs each at its best configuration with the user's options: the best whose whole run
 * fits, among the first TUNED_FALLBACKS of its ranking (else the last tried). */
static dp_status compare_tuned(const plan_request *p, const plan_env *env, compare_opts *o,
                               compare_row *rows, int *n, dp_err *err)
{
    tune_space sp;
    dp_status st = planner_tune_space(p, env, &o->gpus, o->batchings, o->nb, o->schedules, o->ns,
                                      NULL, 0, NULL, 0, NULL, 0, &sp, err);
    if (st != DP_OK) return st;
    plan_request tp = *p;
    tp.iterations = o->tune_iterations;
    tune_result *res = NULL;
    long count = 0;
    st = planner_tune(&tp, env, &sp, o->jobs, NULL, &res, &count, err);
    if (st != DP_OK) return st;
    for (int i = 0; i < o->nb; i++) {
        compare_row *w = &rows[(*n)++];
        w->batching = o->batchings[i];
        w->schedule = "-";
        w->st = DP_ERR_INFEASIBLE;
        snprintf(w->error, sizeof w->error, "no configuration of %d GPUs fits (dpsim tune "
                 "--batchings %s -o F.csv says why for each)", o->gpus, o->batchings[i]);
        /* the best configuration that runs the whole run: tune tried a few iterations, so one
         * that fits them may leave out others; then the next in the ranking */
        int tried = 0;
        for (long k = 0; k < count && tried < TUNED_FALLBACKS; k++) {
            const tune_result *best = &res[k];
            if (!best->ok || strcmp(best->pt.batching, o->batchings[i]) != 0) continue;
            tried++;
            study_result_release(&w->r);
            for (int j = 0; j < o->ns; j++)
                if (strcmp(o->schedules[j], best->pt.schedule) == 0) w->schedule = o->schedules[j];
            tune_point_describe(&best->pt, w->tuned, sizeof w->tuned);
            if (tried > 1) {
                size_t at = strlen(w->tuned);
                snprintf(w->tuned + at, sizeof w->tuned - at, " (rank %d of its method: the "
                         "better ones leave iterations out)", tried);
            }
            dp_err e = {0}; /* the whole run, on the trace already loaded */
            w->st = planner_tune_point(p, env, &best->pt, NULL, 0, &w->r, &e);
            if (w->st != DP_OK) snprintf(w->error, sizeof w->error, "%s", e.msg);
            if (compare_row_fits(w) && !w->r.failed_iterations) break;
        }
    }
    free(res);
    return DP_OK;
}

dp_status planner_compare(const plan_request *p, const plan_env *env, compare_opts *o,
                          compare_row **rows_out, int *n_out, dp_err *err)
{
    *rows_out = NULL, *n_out = 0;
    compare_row *rows = calloc((size_t)(o->nb * o->ns), sizeof *rows); /* tuned: nb rows */
    if (!rows) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    int n = 0;
    if (o->tuned) {
        dp_status st = compare_tuned(p, env, o, rows, &n, err);
        if (st != DP_OK) {
            compare_rows_release(rows, n);
            return st;
        }
    }
    for (int i = 0; i < o->nb && !o->tuned; i++)
        for (int j = 0; j < o->ns; j++) {
            compare_row *w = &rows[n++];
            w->batching = o->batchings[i];
            w->schedule = o->schedules[j];
            char label[200];
            snprintf(label, sizeof label, "dpsim compare: %d/%d %s + %s", n, o->nb * o->ns,
                     w->batching, w->schedule);
            study_opts so;
            planner_study_opts(p, env, w->batching, w->schedule, &so);
            so.progress = o->progress; /* within a row, with an ETA */
            so.progress_ctx = label;
            dp_err e = {0};
            w->st = study_run(&so, &env->trace, &w->r, &e);
            if (w->st == DP_OK && o->ran) o->ran(&w->r, env->rules.global_tokens);
            if (w->st != DP_OK) snprintf(w->error, sizeof w->error, "%s", e.msg);
        }
    double base = 0; /* packing under the baseline schedule (tuned: its own) */
    for (int i = 0; i < n; i++)
        if (compare_row_fits(&rows[i]) && strcmp(rows[i].batching, "packing") == 0 &&
            (o->tuned || schedule_find(rows[i].schedule) == schedule_baseline()))
            base = rows[i].r.throughput_tokens_per_s;
    for (int i = 0; i < n; i++) /* none for a row that does not fit (study_result_fits) */
        rows[i].speedup = base > 0 && compare_row_fits(&rows[i])
                              ? rows[i].r.throughput_tokens_per_s / base
                              : NAN;
    *rows_out = rows, *n_out = n;
    return DP_OK;
}

void compare_rows_release(compare_row *rows, int n)
{
    for (int i = 0; i < n; i++) study_result_release(&rows[i].r);
    free(rows);
}
