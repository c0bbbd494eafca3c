#include "validate.h"

#include <cjson/cJSON.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/csv_table.h"
#include "../scheduler/stage_cost.h"
#include "timeline.h"

/* A compute op's duration, keyed by where it ran (and, measured, which run of its iteration). */
typedef struct op_time {
    int iteration, stage, replica, op, mb, chunk;
    double dur_ms;
    int repeat;
} op_time;

typedef struct op_list {
    op_time *v;
    size_t n, cap;
    dp_status st;
} op_list;

static void push_op(op_list *l, op_time t)
{
    if (l->st != DP_OK) return;
    if (dp_grow((void **)&l->v, &l->cap, l->n + 1, sizeof *l->v) != DP_OK) {
        l->st = DP_ERR_NOMEM;
        return;
    }
    l->v[l->n++] = t;
}

static int cmp_op(const void *a, const void *b)
{
    const op_time *x = a, *y = b;
    int kx[6] = {x->iteration, x->replica, x->stage, x->op, x->mb, x->chunk};
    int ky[6] = {y->iteration, y->replica, y->stage, y->op, y->mb, y->chunk};
    for (int i = 0; i < 6; i++)
        if (kx[i] != ky[i]) return kx[i] < ky[i] ? -1 : 1;
    return 0;
}

/* cmp_op, then the run: a measured op's runs adjacent and in order. */
static int cmp_op_run(const void *a, const void *b)
{
    int c = cmp_op(a, b);
    if (c) return c;
    const op_time *x = a, *y = b;
    return (x->repeat > y->repeat) - (x->repeat < y->repeat);
}

const char *val_op_name(int k)
{
    static const char *const names[VAL_OPS] = {"F", "B", "W", "ALLREDUCE"};
    return k >= 0 && k < VAL_OPS ? names[k] : "?";
}

static void describe_op(const op_time *o, char *buf, size_t cap)
{
    snprintf(buf, cap, "iteration %d, stage %d, replica %d, %s of micro-batch %d, chunk %d",
             o->iteration, o->stage, o->replica, val_op_name(o->op), o->mb, o->chunk);
}

/* A measured timeline that can be compared with the plan: no compute op twice in one run, every
 * compute op of each measured iteration there (in every run of it), and some time measured.
 * pred: the simulated ops of the measured iterations, sorted by cmp_op; meas: by cmp_op_run. */
static dp_status check_complete(const op_list *pred, const op_list *meas, const char *path,
                                dp_err *err)
{
    char what[160];
    double total = 0;
    for (size_t i = 0; i < meas->n; i++) {
        total += meas->v[i].dur_ms;
        if (i && cmp_op_run(&meas->v[i - 1], &meas->v[i]) == 0) {
            describe_op(&meas->v[i], what, sizeof what);
            return dp_fail(err, DP_ERR_INVALID, "%s: %s appears twice in run %d: the timeline is "
                           "not one run of the plan", path, what, meas->v[i].repeat);
        }
    }
    if (meas->n && !(total > 0))
        return dp_fail(err, DP_ERR_INVALID, "%s: every compute op takes 0 us: nothing was measured",
                       path);
    /* each run of an iteration holds the iteration's every op (both lists by iteration first) */
    size_t m0 = 0;
    for (size_t a = 0; a < pred->n;) {
        int it = pred->v[a].iteration;
        size_t b = a;
        while (b < pred->n && pred->v[b].iteration == it) b++;
        while (m0 < meas->n && meas->v[m0].iteration < it) m0++;
        size_t m1 = m0;
        while (m1 < meas->n && meas->v[m1].iteration == it) m1++;
        int runs[64], n_runs = 0; /* the runs measured of this iteration */
        for (size_t q = m0; q < m1; q++) {
            int seen = 0;
            for (int k = 0; k < n_runs; k++) seen |= runs[k] == meas->v[q].repeat;
            if (!seen && n_runs < 64) runs[n_runs++] = meas->v[q].repeat;
        }
        for (int k = 0; k < n_runs; k++) {
            size_t found = 0;
            for (size_t q = m0; q < m1; q++) found += meas->v[q].repeat == runs[k];
            if (found == b - a) continue;
            /* name the first op of the plan that this run lacks */
            for (size_t p = a; p < b; p++) {
                int there = 0;
                for (size_t q = m0; q < m1 && !there; q++)
                    there = meas->v[q].repeat == runs[k] && cmp_op(&pred->v[p], &meas->v[q]) == 0;
                if (there) continue;
                describe_op(&pred->v[p], what, sizeof what);
                return dp_fail(err, DP_ERR_INVALID, "%s: run %d of iteration %d has %zu of its %zu "
                               "compute ops; it lacks %s", path, runs[k], it, found, b - a, what);
            }
            return dp_fail(err, DP_ERR_INVALID, "%s: run %d of iteration %d has %zu compute ops, "
                           "the plan %zu", path, runs[k], it, found, b - a);
        }
        a = b;
    }
    return DP_OK;
}

/* The median of v[0..n) (n >= 1), which it sorts (GSL). */
static double median_of(double *v, int n)
{
    gsl_sort(v, 1, (size_t)n);
    return gsl_stats_median_from_sorted_data(v, 1, (size_t)n);
}

/* Collapses the runs of one op (equal keys, adjacent once sorted) to one entry with their median
 * duration; returns the new count. */
static size_t collapse_runs(op_time *v, size_t n)
{
    size_t out = 0;
    for (size_t a = 0; a < n;) {
        size_t b = a + 1;
        while (b < n && cmp_op(&v[a], &v[b]) == 0) b++;
        double d[VAL_REPEATS_MAX];
        int m = 0;
        for (size_t i = a; i < b && m < VAL_REPEATS_MAX; i++) d[m++] = v[i].dur_ms;
        v[out] = v[a];
        v[out++].dur_ms = median_of(d, m);
        a = b;
    }
    return out;
}

/* A stage's gradient collective, one entry per (iteration, stage, run): keyed as op VAL_ALLREDUCE
 * of replica 0, mb -1, chunk 0, with the shortest of its replicas' durations (the one that came
 * last waited least for the others: its time is the collective's own). */
static void push_collective(op_list *l, int iteration, int stage, double dur_ms, int run)
{
    push_op(l, (op_time){iteration, stage, 0, VAL_ALLREDUCE, -1, 0, dur_ms, run});
}

/* Sorted by cmp_op_run: one entry per key and run, the shortest. */
static size_t shortest_per_run(op_time *v, size_t n)
{
    size_t out = 0;
    for (size_t a = 0; a < n; a++)
        if (out && cmp_op_run(&v[out - 1], &v[a]) == 0) {
            if (v[a].dur_ms < v[out - 1].dur_ms) v[out - 1].dur_ms = v[a].dur_ms;
        } else {
            v[out++] = v[a];
        }
    return out;
}

/* ---- the simulated side ---- */
typedef struct pred_ctx {
    op_list ops, coll; /* compute ops; gradient collectives */
    int64_t iter_t0;
} pred_ctx;

static void on_pred(void *ctx, const sim_op *o)
{
    pred_ctx *p = ctx;
    if ((int)o->op == SIM_OP_ALLREDUCE)
        push_collective(&p->coll, o->iteration, o->stage, (double)(o->end_ns - o->start_ns) / 1e6, 0);
    if (o->op != OP_F && o->op != OP_B && o->op != OP_W) return;
    push_op(&p->ops, (op_time){o->iteration, o->stage, o->replica, (int)o->op, o->mb, o->chunk,
                               (double)(o->end_ns - o->start_ns) / 1e6, 0});
}

/* ---- the measured side ---- */
typedef struct meas_ctx {
    int idx[13];
    uint64_t plan_hash;  /* the plan file's (dp_hash_text), 0 when unknown */
    int wire_elem_bytes; /* 0 until a row gives it */
    int optimizer_rows;  /* the runtime recorded an optimizer step */
    op_list ops, coll;   /* compute ops; gradient collectives */
    const plan *pl;
    double *end_ms; /* per plan iteration (by index) and run: [k * VAL_REPEATS_MAX + repeat], the
                     * latest end, -1 when not measured */
    int last;       /* index of the iteration found last (rows come grouped by iteration) */
} meas_ctx;

/* The layout columns a timeline says it ran (tp, then cp: columns LAYOUT_COL on), and the plan's. */
enum { LAYOUT_COL = 11 };
static const char *const layout_name[2] = {"tp", "cp"};
static int layout_degree(const plan *pl, int k)
{
    int d = k ? pl->h.cp : pl->h.tp;
    return d > 1 ? d : 1;
}

static dp_status meas_header(void *vctx, const csv_row *h, dp_err *err)
{
    meas_ctx *c = vctx;
    static const csv_column cols[13] = {{"iteration", 1}, {"stage", 1},   {"op", 1},
                                        {"mb", 1},        {"start_us", 1}, {"end_us", 1},
                                        {"replica", 0},   {"chunk", 0},    {"wire_elem_bytes", 0},
                                        {"plan_hash", 0}, {"repeat", 0},   {"tp", 0},
                                        {"cp", 0}};
    dp_status st = csv_header_map(h, cols, 13, c->idx, err);
    /* a timeline without the column ran every layer whole and every sequence on one rank (dprun
     * before tensor or context parallelism) */
    for (int k = 0; st == DP_OK && k < 2; k++) {
        int want = layout_degree(c->pl, k);
        if (c->idx[LAYOUT_COL + k] < 0 && want > 1)
            return dp_fail(err, DP_ERR_INVALID, "%s: the plan is for %s %d, and the timeline does "
                           "not say it ran %s parallelism (no %s column): it measured another "
                           "layout", h->path, layout_name[k], want,
                           k ? "context" : "tensor", layout_name[k]);
    }
    return st;
}

static dp_status meas_row(void *vctx, const csv_row *r, dp_err *err)
{
    meas_ctx *c = vctx;
    int64_t it, stage, mb, rep = 0, chunk = 0;
    double t0, t1;
    const char *const *f = (const char *const *)r->fields;
    if (dp_parse_i64(f[c->idx[0]], 0, 1 << 30, &it) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: iteration \"%s\" is not a whole number >= 0", r->path, r->line, f[c->idx[0]]);
    if (dp_parse_i64(f[c->idx[1]], 0, 1 << 20, &stage) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: stage \"%s\" is not a whole number >= 0", r->path, r->line, f[c->idx[1]]);
    int stage_wide = strcmp(f[c->idx[2]], "ALLREDUCE") == 0 || strcmp(f[c->idx[2]], "OPTIMIZER") == 0;
    if (dp_parse_i64(f[c->idx[3]], stage_wide ? -1 : 0, 1 << 30, &mb) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: mb \"%s\" is not a whole number >= 0%s", r->path,
                       r->line, f[c->idx[3]], stage_wide ? " (or -1 for a stage-wide op)" : "");
    dp_status tst = timeline_row_times(r->path, r->line, f[c->idx[4]], f[c->idx[5]], &t0, &t1, err);
    if (tst != DP_OK) return tst;
    if (c->idx[6] >= 0 && dp_parse_i64(f[c->idx[6]], 0, 1 << 20, &rep) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: replica \"%s\" is not a whole number >= 0", r->path, r->line, f[c->idx[6]]);
    if (c->idx[7] >= 0 && dp_parse_i64(f[c->idx[7]], 0, 64, &chunk) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: chunk \"%s\" is not a whole number in [0, 64]", r->path, r->line, f[c->idx[7]]);
    if (c->idx[8] >= 0) {
        int64_t eb;
        if (dp_parse_i64(f[c->idx[8]], 2, 8, &eb) != 0 || (eb != 2 && eb != 4 && eb != 8))
            return dp_fail(err, DP_ERR_PARSE, "%s:%ld: wire_elem_bytes \"%s\" must be 2, 4 or 8",
                           r->path, r->line, f[c->idx[8]]);
        if (c->wire_elem_bytes && c->wire_elem_bytes != eb)
            return dp_fail(err, DP_ERR_PARSE, "%s:%ld: wire_elem_bytes %lld differs from the earlier "
                           "rows' %d", r->path, r->line, (long long)eb, c->wire_elem_bytes);
        c->wire_elem_bytes = (int)eb;
    }
    if (c->idx[9] >= 0 && c->plan_hash) {
        char want[17];
        snprintf(want, sizeof want, "%016llx", (unsigned long long)c->plan_hash);
        if (strcmp(f[c->idx[9]], want) != 0)
            return dp_fail(err, DP_ERR_INVALID, "%s:%ld: plan_hash %s is not this plan's (%s): the "
                           "timeline was measured on another plan file", r->path, r->line,
                           f[c->idx[9]], want);
    }
    for (int k = 0; k < 2; k++) {
        int col = c->idx[LAYOUT_COL + k], want = layout_degree(c->pl, k);
        int64_t ran;
        if (col < 0) continue;
        if (dp_parse_i64(f[col], 1, 1 << 20, &ran) != 0)
            return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s \"%s\" is not a whole number >= 1",
                           r->path, r->line, layout_name[k], f[col]);
        if (ran != want)
            return dp_fail(err, DP_ERR_INVALID, "%s:%ld: the timeline ran %s %lld, the plan is for "
                           "%s %d: it measured another layout", r->path, r->line, layout_name[k],
                           (long long)ran, layout_name[k], want);
    }
    int k = c->last;
    if (k >= c->pl->n_it || c->pl->it[k].id != it)
        for (k = 0; k < c->pl->n_it && c->pl->it[k].id != it; k++) continue;
    if (k == c->pl->n_it)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: iteration %lld is not in the plan", r->path,
                       r->line, (long long)it);
    c->last = k;
    /* the row must name an op of the plan: a known op on an existing rank, micro-batch, chunk */
    const plan_iter *pi = &c->pl->it[k];
    plan_op op0;
    int known = plan_op_parse(f[c->idx[2]], &op0) == 0 || strcmp(f[c->idx[2]], "ALLREDUCE") == 0 ||
                strcmp(f[c->idx[2]], "OPTIMIZER") == 0;
    if (!known || stage >= pi->pp || rep >= pi->dp || mb >= (pi->n_mb ? pi->n_mb : 1) ||
        chunk >= c->pl->h.chunks)
        return dp_fail(err, DP_ERR_INVALID, "%s:%ld: no such op in the plan (iteration %lld, "
                       "stage %lld, replica %lld, %s, mb %lld, chunk %lld)", r->path, r->line,
                       (long long)it, (long long)stage, (long long)rep, f[c->idx[2]],
                       (long long)mb, (long long)chunk);
    if (strcmp(f[c->idx[2]], "OPTIMIZER") == 0) c->optimizer_rows = 1;
    int64_t run = 0; /* which measured run of the iteration (dprun --repeats, the noise repeat) */
    if (c->idx[10] >= 0 && dp_parse_i64(f[c->idx[10]], 0, VAL_REPEATS_MAX - 1, &run) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: repeat \"%s\" must be a whole number in [0, %d]",
                       r->path, r->line, f[c->idx[10]], VAL_REPEATS_MAX - 1);
    double *end = &c->end_ms[(size_t)k * VAL_REPEATS_MAX + run];
    if (t1 / 1e3 > *end) *end = t1 / 1e3;
    plan_op op;
    if (plan_op_parse(f[c->idx[2]], &op) == 0 && (op == OP_F || op == OP_B || op == OP_W))
        push_op(&c->ops, (op_time){(int)it, (int)stage, (int)rep, (int)op, (int)mb, (int)chunk,
                                   (t1 - t0) / 1e3, (int)run});
    if (strcmp(f[c->idx[2]], "ALLREDUCE") == 0) push_collective(&c->coll, (int)it, (int)stage, (t1 - t0) / 1e3, (int)run);
    return c->ops.st == DP_OK && c->coll.st == DP_OK ? DP_OK : dp_fail(err, DP_ERR_NOMEM, "out of memory");
}

void val_result_release(val_result *v)
{
    free(v->id);
    free(v->predicted_ms);
    free(v->measured_ms);
    memset(v, 0, sizeof *v);
}

/* Whether cfg's plan has ZeRO collectives inside its forward and backward times. */
static int has_zero_parts(const sim_config *cfg)
{
    for (int s = 0; s < cfg->pp && s < STAGE_MAX; s++)
        if (cfg->zero_fwd_ms[s] > 0 || cfg->zero_bwd_ms[s] > 0) return 1;
    return 0;
}

/* it as a runtime that moved k times the plan's bytes ran it: every micro-batch's forward and
 * backward with ZeRO's collectives re-priced (scheduler/stage_cost.h stage_zero_rescaled), in
 * *out, a shallow copy whose mb and per_stage arrays are its own (freed by the caller). */
static dp_status zero_repriced(const plan_iter *it, const sim_config *cfg, double k, plan_iter *out,
                               dp_err *err)
{
    size_t n = (size_t)it->n_mb * PLAN_MB_ARRAYS * (size_t)it->pp;
    *out = *it;
    out->mb = malloc((it->n_mb ? (size_t)it->n_mb : 1) * sizeof *out->mb);
    out->per_stage = malloc((n ? n : 1) * sizeof *out->per_stage);
    if (!out->mb || !out->per_stage) {
        free(out->mb), free(out->per_stage);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    memcpy(out->per_stage, it->per_stage, n * sizeof *out->per_stage);
    for (int m = 0; m < it->n_mb; m++) {
        const plan_mb *a = &it->mb[m];
        plan_mb *b = &out->mb[m];
        *b = *a;
        plan_mb_bind(b, out->per_stage + (a->fwd_ms - it->per_stage), it->pp);
        for (int s = 0; s < it->pp && s < STAGE_MAX; s++) {
            b->fwd_ms[s] = stage_zero_rescaled(a->fwd_ms[s], cfg->zero_fwd_ms[s], cfg->zero_layers[s],
                                               cfg->zero_prefetch, k);
            b->bwd_ms[s] = stage_zero_rescaled(a->bwd_ms[s], cfg->zero_bwd_ms[s], cfg->zero_layers[s],
                                               cfg->zero_prefetch, k);
        }
    }
    return DP_OK;
}

/* Adds the ops of pred that meas has too (both sorted by cmp_op, one entry per key) to v's
 * per-op statistics (sums; validate_run divides). */
static void match_ops(const op_list *pred, const op_list *meas, val_result *v)
{
    for (size_t a = 0, b = 0; a < pred->n && b < meas->n;) {
        int c = cmp_op(&pred->v[a], &meas->v[b]);
        if (c < 0) a++;
        else if (c > 0) b++;
        else {
            val_op_stats *o = &v->per_op[pred->v[a].op];
            double p = pred->v[a].dur_ms, m = meas->v[b].dur_ms;
            o->count++;
            o->pred_ms += p;
            o->meas_ms += m;
            if (m > 0) o->mape_pct += fabs(100 * (p - m) / m);
            a++, b++;
        }
    }
}

dp_status validate_run(const plan *pl, uint64_t plan_hash, const sim_config *cfg,
                       const char *measured_path, val_result *v, dp_err *err)
{
    memset(v, 0, sizeof *v);
    meas_ctx mc = {.pl = pl, .plan_hash = plan_hash};
    pred_ctx pc = {0};
    dp_status st = DP_OK;
    size_t n_end = (size_t)(pl->n_it + 1) * VAL_REPEATS_MAX;
    double *spread = NULL;
    mc.end_ms = malloc(n_end * sizeof *mc.end_ms);
    spread = malloc((size_t)(pl->n_it + 1) * sizeof *spread);
    if (!mc.end_ms || !spread) {
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n_end; i++) mc.end_ms[i] = -1;
    TRY(csv_read_file(measured_path, 1, meas_header, meas_row, &mc, err));
    v->id = calloc((size_t)(pl->n_it ? pl->n_it : 1), sizeof *v->id);
    v->predicted_ms = calloc((size_t)(pl->n_it ? pl->n_it : 1), sizeof *v->predicted_ms);
    v->measured_ms = calloc((size_t)(pl->n_it ? pl->n_it : 1), sizeof *v->measured_ms);
    if (!v->id || !v->predicted_ms || !v->measured_ms) {
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        goto out;
    }
    sim_config like = *cfg; /* simulate what the runtime ran */
    v->wire_elem_bytes = mc.wire_elem_bytes;
    v->wire_scale = mc.wire_elem_bytes ? (double)mc.wire_elem_bytes / pl->h.act_elem_bytes : 1;
    like.wire_scale = (cfg->wire_scale > 0 ? cfg->wire_scale : 1) * v->wire_scale; /* its share,
                                                                                    * as moved */
    for (int s = 0; s < like.pp && s < STAGE_MAX; s++) {
        /* its gradients are of the moved type too (the plan priced them at its grad_bytes) */
        like.allreduce_ms[s] *= mc.wire_elem_bytes && pl->h.grad_bytes > 0
                                    ? (double)mc.wire_elem_bytes / pl->h.grad_bytes
                                    : 1;
        like.grad_ms[s] = 0; /* the executors reduce them after their last op, not during it */
        like.straggler_share = 0; /* a measured run's GPUs were as fast as they were */
        if (!mc.optimizer_rows) like.optimizer_ms[s] = 0; /* a runtime that steps no optimizer */
    }
    cfg = &like;
    v->zero_repriced = v->wire_scale != 1 && has_zero_parts(cfg);
    sim s;
    sim_init(&s);
    sim_sink sink = {on_pred, NULL, &pc};
    int n_spread = 0;
    for (int i = 0; i < pl->n_it && st == DP_OK; i++) {
        const plan_iter *it = &pl->it[i];
        double runs[VAL_REPEATS_MAX];
        int n_runs = 0;
        for (int r = 0; r < VAL_REPEATS_MAX; r++)
            if (mc.end_ms[(size_t)i * VAL_REPEATS_MAX + r] >= 0)
                runs[n_runs++] = mc.end_ms[(size_t)i * VAL_REPEATS_MAX + r];
        if (n_runs == 0) continue; /* not measured */
        sim_iter_result r;
        plan_iter moved;
        int reprice = v->zero_repriced;
        if (reprice && (st = zero_repriced(it, cfg, v->wire_scale, &moved, err)) != DP_OK) break;
        st = sim_iteration(&s, cfg, reprice ? &moved : it, 0, &sink, &r, err);
        if (reprice) free(moved.mb), free(moved.per_stage);
        if (st != DP_OK) break;
        int k = v->iterations++;
        v->id[k] = it->id;
        v->predicted_ms[k] = (double)r.makespan_ns / 1e6;
        v->measured_ms[k] = median_of(runs, n_runs);
        if (n_runs > v->runs_max) v->runs_max = n_runs;
        if (n_runs > 1 && v->measured_ms[k] > 0) /* runs[] is sorted by median_of */
            spread[n_spread++] = 100 * (runs[n_runs - 1] - runs[0]) / v->measured_ms[k];
    }
    sim_release(&s);
    if (st != DP_OK) goto out;
    if (v->iterations == 0) {
        st = dp_fail(err, DP_ERR_INVALID, "%s: no iteration of the plan was measured", measured_path);
        goto out;
    }
    v->noise_pct = n_spread ? median_of(spread, n_spread) : -1;
    v->noise_iterations = n_spread;
    for (int k = 0; k < v->iterations; k++) {
        double e = fabs(100 * (v->predicted_ms[k] - v->measured_ms[k]) / v->measured_ms[k]);
        v->mape_pct += e / v->iterations;
        if (e > v->max_abs_pct) v->max_abs_pct = e;
    }
    /* per op: match (iteration, replica, stage, op, mb, chunk) in both sorted lists, an op run
     * several times by its median */
    if (pc.ops.n) qsort(pc.ops.v, pc.ops.n, sizeof *pc.ops.v, cmp_op);
    if (mc.ops.n) qsort(mc.ops.v, mc.ops.n, sizeof *mc.ops.v, cmp_op_run);
    TRY(check_complete(&pc.ops, &mc.ops, measured_path, err));
    mc.ops.n = collapse_runs(mc.ops.v, mc.ops.n);
    match_ops(&pc.ops, &mc.ops, v);
    /* the gradient collectives where both have them (a stage's shortest replica, by run) */
    if (pc.coll.n) qsort(pc.coll.v, pc.coll.n, sizeof *pc.coll.v, cmp_op_run);
    if (mc.coll.n) qsort(mc.coll.v, mc.coll.n, sizeof *mc.coll.v, cmp_op_run);
    pc.coll.n = shortest_per_run(pc.coll.v, pc.coll.n);
    mc.coll.n = collapse_runs(mc.coll.v, shortest_per_run(mc.coll.v, mc.coll.n));
    match_ops(&pc.coll, &mc.coll, v);
    for (int k = 0; k < VAL_OPS; k++)
        if (v->per_op[k].count) {
            v->per_op[k].pred_ms /= v->per_op[k].count;
            v->per_op[k].meas_ms /= v->per_op[k].count;
            v->per_op[k].mape_pct /= v->per_op[k].count;
        }
out:
    free(pc.ops.v), free(pc.coll.v);
    free(mc.ops.v), free(mc.coll.v);
    free(mc.end_ms);
    free(spread);
    if (st != DP_OK) val_result_release(v);
    return st;
}

char *validate_json(const val_result *v)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "iterations", v->iterations);
    cJSON *p = cJSON_AddArrayToObject(o, "predicted_ms"), *m = cJSON_AddArrayToObject(o, "measured_ms");
    for (int k = 0; k < v->iterations; k++) {
        cJSON_AddItemToArray(p, cJSON_CreateNumber(v->predicted_ms[k]));
        cJSON_AddItemToArray(m, cJSON_CreateNumber(v->measured_ms[k]));
    }
    cJSON_AddNumberToObject(o, "mape_pct", v->mape_pct);
    cJSON_AddNumberToObject(o, "max_abs_pct", v->max_abs_pct);
    if (v->wire_elem_bytes) cJSON_AddNumberToObject(o, "wire_elem_bytes", v->wire_elem_bytes);
    cJSON_AddNumberToObject(o, "wire_scale", v->wire_scale);
    if (v->noise_pct >= 0) {
        cJSON_AddNumberToObject(o, "noise_pct", v->noise_pct);
        cJSON_AddNumberToObject(o, "noise_iterations", v->noise_iterations);
    }
    cJSON_AddNumberToObject(o, "runs_per_iteration", v->runs_max);
    cJSON *ops = cJSON_AddObjectToObject(o, "per_op");
    for (int k = 0; k < VAL_OPS; k++) {
        if (!v->per_op[k].count) continue;
        cJSON *x = cJSON_AddObjectToObject(ops, val_op_name(k));
        cJSON_AddNumberToObject(x, "count", v->per_op[k].count);
        cJSON_AddNumberToObject(x, "predicted_ms_mean", v->per_op[k].pred_ms);
        cJSON_AddNumberToObject(x, "measured_ms_mean", v->per_op[k].meas_ms);
        cJSON_AddNumberToObject(x, "mape_pct", v->per_op[k].mape_pct);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}
