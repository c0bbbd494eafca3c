#include "panels.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void panel_collector_init(panel_collector *c, panel *out, int iteration, int replica)
{
    memset(c, 0, sizeof *c);
    memset(out, 0, sizeof *out);
    c->p = out, c->iteration = iteration, c->replica = replica;
}

void panel_on_op(void *ctx, const sim_op *o)
{
    panel_collector *c = ctx;
    if (o->iteration > c->iteration) c->past = 1;
    if (c->st != DP_OK || o->iteration != c->iteration || o->replica != c->replica ||
        (o->op != OP_F && o->op != OP_B && o->op != OP_W) || !o->mb_info)
        return;
    panel *p = c->p;
    if (dp_grow((void **)&p->ops, &p->cap_ops, p->n_ops + 1, sizeof *p->ops) != DP_OK ||
        dp_grow((void **)&c->keys, &c->cap_keys, p->n_ops + 1, sizeof *c->keys) != DP_OK) {
        c->st = DP_ERR_NOMEM;
        return;
    }
    const plan_mb *m = o->mb_info;
    int32_t key = INT32_MAX;
    for (int i = 0; i < m->n_samples; i++) {
        int32_t id = o->iter->ids[m->first + i];
        if (id < key) key = id;
    }
    if (!c->have_t0 || o->start_ns < c->t0_ns) c->t0_ns = o->start_ns, c->have_t0 = 1;
    c->keys[p->n_ops] = key;
    p->ops[p->n_ops++] = (panel_op){o->stage, (int)o->op, o->chunk, 0,
                                    (double)o->start_ns / 1e6, (double)o->end_ns / 1e6,
                                    m->mbs, m->enc_len, m->dec_len, m->n_samples};
}

void panel_on_mem(void *ctx, const sim_mem *m)
{
    panel_collector *c = ctx;
    /* the iteration's window is cut at the end; what follows it is not kept at all */
    if (c->st != DP_OK || c->past || m->replica != c->replica) return;
    panel *p = c->p;
    if (dp_grow((void **)&p->mem, &p->cap_mem, p->n_mem + 1, sizeof *p->mem) != DP_OK) {
        c->st = DP_ERR_NOMEM;
        return;
    }
    p->mem[p->n_mem++] = (panel_mem){m->stage, (double)m->t_ns / 1e6, m->mb};
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Numbers each op's micro-batch by the rank of its key among the distinct keys. */
static dp_status stable_ids(panel *p, const int32_t *keys, dp_err *err)
{
    int32_t *sorted = malloc((p->n_ops ? p->n_ops : 1) * sizeof *sorted);
    if (!sorted) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    memcpy(sorted, keys, p->n_ops * sizeof *sorted);
    qsort(sorted, p->n_ops, sizeof *sorted, cmp_i32);
    size_t u = 0;
    for (size_t i = 0; i < p->n_ops; i++)
        if (i == 0 || sorted[i] != sorted[u - 1]) sorted[u++] = sorted[i];
    for (size_t i = 0; i < p->n_ops; i++) {
        const int32_t *at = bsearch(&keys[i], sorted, u, sizeof *sorted, cmp_i32);
        p->ops[i].id = (int)(at - sorted);
    }
    free(sorted);
    return DP_OK;
}

dp_status panel_finish(panel_collector *c, const study_result *r, const char *sched_name, int pp,
                       int chunks, double mem_limit_mb, dp_err *err)
{
    panel *out = c->p;
    dp_status st = DP_OK;
    const study_iter *x = NULL;
    for (int i = 0; i < r->n_iter; i++)
        if (r->iter[i].id == c->iteration) x = &r->iter[i];
    int replicas = r->pp > 0 ? r->ranks / r->pp : 0;
    if (c->st != DP_OK) st = dp_fail(err, c->st, "out of memory");
    else if (c->replica >= replicas)
        st = dp_fail(err, DP_ERR_INVALID, "replica %d, but the run has %d replica%s", c->replica,
                     replicas, replicas == 1 ? "" : "s");
    else if (x && x->failed)
        st = dp_fail(err, DP_ERR_INVALID, "iteration %d was left out of the run (--keep-going): "
                     "%s", c->iteration, x->why);
    else if (!x || !c->have_t0)
        st = dp_fail(err, DP_ERR_INVALID, "iteration %d (replica %d) is not in the run, which has "
                     "%d iteration%s", c->iteration, c->replica, r->iterations,
                     r->iterations == 1 ? "" : "s");
    if (st == DP_OK) {
        snprintf(out->schedule, sizeof out->schedule, "%s", sched_name);
        out->pp = pp, out->chunks = chunks;
        out->mem_limit_mb = mem_limit_mb;
        /* this iteration's: the pipeline's idle share of its ops, the closed form's */
        double busy = 0;
        for (size_t i = 0; i < out->n_ops; i++) busy += out->ops[i].t1_ms - out->ops[i].t0_ms;
        out->pipeline_bubble = x->pipeline_ms > 0 ? 1 - busy / (pp * x->pipeline_ms) : 0;
        out->closed_form_bubble = x->closed_form_ms > 0 ? x->closed_form_bubble_ms / x->closed_form_ms
                                                        : NAN;
        out->oom = r->oom;
        out->makespan_ms = x->ms, out->microbatches = x->microbatches;
        /* times from the iteration's start; memory of that window, from each stage's model state */
        double t0 = (double)c->t0_ns / 1e6;
        size_t keep = 0, *last = calloc((size_t)pp, sizeof *last); /* 1 + a stage's last kept */
        if (!last) st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        for (size_t i = 0; last && i < out->n_mem; i++) {
            panel_mem m = out->mem[i];
            if (m.t_ms < t0 || m.t_ms > t0 + x->ms || m.stage >= pp) continue;
            m.t_ms -= t0;
            m.mb += r->weights_mb[m.stage] + r->grads_mb[m.stage] + r->optimizer_mb[m.stage];
            size_t *l = &last[m.stage];
            if (*l && out->mem[*l - 1].t_ms == m.t_ms) { /* changes at one instant: the last */
                out->mem[*l - 1].mb = m.mb;
                continue;
            }
            out->mem[keep++] = m;
            *l = keep;
        }
        free(last);
        /* each stage starts the iteration at its model state */
        if (st == DP_OK && dp_grow((void **)&out->mem, &out->cap_mem, keep + (size_t)pp,
                                   sizeof *out->mem) != DP_OK)
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        if (st == DP_OK) {
            memmove(out->mem + pp, out->mem, keep * sizeof *out->mem);
            for (int s = 0; s < pp; s++)
                out->mem[s] = (panel_mem){s, 0, r->weights_mb[s] + r->grads_mb[s] + r->optimizer_mb[s]};
            keep += (size_t)pp;
        }
        out->n_mem = keep;
        for (size_t i = 0; i < out->n_ops; i++) out->ops[i].t0_ms -= t0, out->ops[i].t1_ms -= t0;
        if (st == DP_OK) st = stable_ids(out, c->keys, err);
    }
    free(c->keys);
    c->keys = NULL;
    if (st != DP_OK) panel_release(out);
    return st;
}

dp_status panel_collect(const study_opts *o, const trace *t, int iteration, int replica, panel *out,
                        dp_err *err)
{
    panel_collector c;
    panel_collector_init(&c, out, iteration, replica);
    if (replica >= o->dp)
        return dp_fail(err, DP_ERR_INVALID, "replica %d of a run of %d replicas", replica, o->dp);
    sim_sink sink = {panel_on_op, panel_on_mem, &c};
    study_opts q = *o;
    if (!o->sched && o->chooser->picks_placement) { /* auto: the run's placement, not a prefix's */
        study_placement_choice pc;
        dp_status st = study_placement(o, t, &pc, err);
        if (st != DP_OK) {
            panel_collector_release(&c);
            return st;
        }
        q = study_on_family(o, pc.placement);
    }
    q.sink = &sink;
    q.max_iterations = iteration + 1;
    study_result r;
    memset(&r, 0, sizeof r);
    dp_status st = study_run(&q, t, &r, err);
    if (st == DP_OK && !r.feasible)
        st = dp_fail(err, DP_ERR_INFEASIBLE, "%s", r.why[0] ? r.why : "the run is infeasible");
    if (st == DP_OK)
        st = panel_finish(&c, &r, o->sched ? o->sched->name : o->chooser->name, o->pp, r.chunks,
                          o->mem_limit_mb, err);
    else panel_collector_release(&c);
    study_result_release(&r);
    return st;
}

void panel_collector_release(panel_collector *c)
{
    free(c->keys);
    c->keys = NULL;
    if (c->p) panel_release(c->p);
}

void panel_heading(const panel *p, char *buf, size_t cap)
{
    char cf[48] = "";
    if (!isnan(p->closed_form_bubble))
        snprintf(cf, sizeof cf, " (closed form %.2f%%)", 100 * p->closed_form_bubble);
    snprintf(buf, cap, "%s: %.2f ms, %d micro-batches, pipeline bubble %.2f%%%s%s", p->schedule,
             p->makespan_ms, p->microbatches, 100 * p->pipeline_bubble, cf,
             p->oom ? ", out of memory" : "");
}

void panel_release(panel *p)
{
    free(p->ops);
    free(p->mem);
    memset(p, 0, sizeof *p);
}
