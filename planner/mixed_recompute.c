/* mixed_recompute.c — recompute per micro-batch, where it pays (mixed_recompute.h). */
#include "mixed_recompute.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../scheduler/plan_machine.h"

/* Per micro-batch: the next step down, costed once. */
typedef struct step {
    int to;       /* mode it would go to; -1: no step left (or none worth taking) */
    double ratio; /* compute ms saved per share of the budget it takes */
    double *v;    /* its per-stage arrays, PLAN_MB_ARRAYS x pp (plan.h plan_mb_bind) */
} step;

/* A micro-batch's per-stage arrays (plan_mb_bind's, from fwd_ms on): copied to v, from v. */
static void save(const plan_mb *m, int pp, double *v)
{
    memcpy(v, m->fwd_ms, (size_t)PLAN_MB_ARRAYS * (size_t)pp * sizeof *v);
}

static void load(plan_mb *m, int pp, const double *v)
{
    memcpy(m->fwd_ms, v, (size_t)PLAN_MB_ARRAYS * (size_t)pp * sizeof *v);
}

/* Micro-batch k of it (built from l->mb[k]) costed in mode `to` (sm[to]) into *trial, whose
 * arrays are bound to v: 0, or -1 where that mode's cost model cannot price it. */
static int cost_in_mode(const plan_iter *it, const mb_list *l, const stage_model *const sm[],
                        int k, int to, double *v, mb_cost *scratch, plan_mb *trial)
{
    *trial = it->mb[k];
    plan_mb_bind(trial, v, it->pp);
    dp_err ignored;
    return plan_mb_cost(trial, it->pp, &l->mb[k], sm[to], scratch, &ignored) == DP_OK ? 0 : -1;
}

/* Costs micro-batch k's next mode below its current one into s (s->to = -1 where there is none,
 * the model cannot price it, or it saves no time). */
static void next_step(const plan_iter *it, const mb_list *l, const stage_model *const sm[],
                      const double *budget, int k, step *s, mb_cost *scratch)
{
    const plan_mb *cur = &it->mb[k];
    int pp = it->pp;
    s->to = -1;
    int to = cur->recompute - 1;
    while (to >= 0 && !sm[to]) to--;
    plan_mb trial;
    if (to < 0 || cost_in_mode(it, l, sm, k, to, s->v, scratch, &trial) != 0) return;
    double saved = 0, takes = 0;
    for (int d = 0; d < pp; d++) {
        double was = cur->fwd_ms[d] + cur->bwd_ms[d], now = trial.fwd_ms[d] + trial.bwd_ms[d];
        if (!isfinite(now) || !isfinite(trial.peak_mb[d]) || !isfinite(trial.stored_mb[d])) return;
        saved += was - now;
        double more = fmax(trial.stored_mb[d] - cur->stored_mb[d], trial.peak_mb[d] - cur->peak_mb[d]);
        if (budget[d] > 0) takes = fmax(takes, more / budget[d]);
    }
    if (!(saved > 0)) return;
    s->to = to;
    s->ratio = saved / fmax(takes, 1e-12);
}

dp_status mixed_recompute_relax(plan_iter *it, const mb_list *l,
                                const stage_model *const sm[RECOMPUTE_COUNT], recompute_mode from,
                                dp_err *err)
{
    int n = it->n_mb, pp = it->pp;
    const double *budget = sm[from]->budget_mb;
    size_t w = PLAN_MB_ARRAYS * (size_t)pp;
    for (int k = 0; k < n; k++) it->mb[k].recompute = (int)from;
    step *st = calloc((size_t)(n ? n : 1), sizeof *st);
    double *store = calloc((size_t)(n ? n : 1) * w + w, sizeof *store);
    mb_cost *scratch = malloc(sizeof *scratch);
    if (!st || !store || !scratch) {
        free(st), free(store), free(scratch);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    double *backup = store + (size_t)n * w;
    plan_machine pm; /* the instructions stay; pm_replica_fits reads the figures as they change */
    pm_init(&pm, it, sm[from]->chunks);
    for (int k = 0; k < n; k++) {
        st[k].v = store + (size_t)k * w;
        next_step(it, l, sm, budget, k, &st[k], scratch);
    }
    for (;;) {
        int best = -1;
        for (int k = 0; k < n; k++)
            if (st[k].to >= 0 && (best < 0 || st[k].ratio > st[best].ratio)) best = k;
        if (best < 0) break;
        plan_mb *m = &it->mb[best];
        int was = m->recompute;
        save(m, pp, backup);
        load(m, pp, st[best].v);
        m->recompute = st[best].to;
        if (pm_replica_fits(&pm, m->replica, budget)) {
            next_step(it, l, sm, budget, best, &st[best], scratch);
        } else { /* every other step adds memory too: this one cannot fit later */
            load(m, pp, backup);
            m->recompute = was;
            st[best].to = -1;
        }
    }
    pm_release(&pm);
    free(st), free(store), free(scratch);
    return DP_OK;
}

double mixed_recompute_floor_ms(plan_iter *it, const mb_list *l,
                                const stage_model *const sm[RECOMPUTE_COUNT], recompute_mode from,
                                const schedule *sc, int chunks)
{
    int n = it->n_mb, pp = it->pp;
    size_t w = PLAN_MB_ARRAYS * (size_t)pp;
    double *store = malloc(((size_t)(n ? n : 1) + 1) * w * sizeof *store);
    mb_cost *scratch = malloc(sizeof *scratch);
    if (!store || !scratch) {
        free(store), free(scratch);
        return 0;
    }
    double *trial_v = store + (size_t)n * w;
    for (int k = 0; k < n; k++) {
        plan_mb *m = &it->mb[k];
        save(m, pp, store + (size_t)k * w);
        for (int d = 0; d < pp; d++) /* compute only, as the bound counts it */
            m->fwd_ms[d] -= m->xfwd_ms[d], m->bwd_ms[d] -= m->xbwd_ms[d];
        for (int to = (int)from - 1; to >= 0; to--) {
            plan_mb trial;
            if (!sm[to] || cost_in_mode(it, l, sm, k, to, trial_v, scratch, &trial) != 0) continue;
            for (int d = 0; d < pp; d++) {
                double f = trial.fwd_ms[d] - trial.xfwd_ms[d], b = trial.bwd_ms[d] - trial.xbwd_ms[d];
                if (f < m->fwd_ms[d]) m->fwd_ms[d] = f;
                if (b < m->bwd_ms[d]) m->bwd_ms[d] = b;
            }
        }
        for (int d = 0; d < pp; d++) m->xfwd_ms[d] = m->xbwd_ms[d] = 0;
    }
    double floor_ms = schedule_time_lower_bound(sc, it, pp, chunks);
    for (int k = 0; k < n; k++) load(&it->mb[k], pp, store + (size_t)k * w);
    free(store), free(scratch);
    return floor_ms;
}
