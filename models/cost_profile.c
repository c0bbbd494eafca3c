/*
 * The profile cost model: measured grids, interpolated linearly between grid points.
 *
 * Each component's grid has three axes (mbs, enc_seqlen, dec_seqlen); an axis the component does
 * not use holds the single value 0. Values are kept per cell with NaN for "not measured". A query
 * brackets each coordinate between neighbouring axis values (GSL's gsl_interp_bsearch), and
 * interpolates multilinearly over the 2^k corners of the cell, as DynaPipe's cost model does. A
 * coordinate equal to an axis value uses that value alone, so a grid point returns exactly its
 * measurement even next to an unmeasured cell. gsl_interp2d is not used because it cannot express
 * holes (cells that ran out of memory): a NaN corner would poison neighbouring exact points.
 */
#include <gsl/gsl_interp.h>
#include <gsl/gsl_multifit.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/csv_table.h"
#include "cost.h"

enum { M_FWD, M_BWD, M_STORED, M_PEAK, N_METRICS };
static const char *const METRIC_NAMES[N_METRICS] = {"fwd_ms", "bwd_ms", "stored_act_mb",
                                                    "peak_act_mb"};
static const char *const COMPONENT_NAMES[COMP_COUNT] = {"encoder", "decoder", "postprocess", "moe"};

/* The attention terms of a component, fitted over its grid (attn_fit below): per metric, the
 * coefficients of the sums enc_sq, dec_sq and enc_dec (cost.h). */
enum { A_EE, A_DD, A_ED, N_ATTN };

typedef struct grid {
    int present;               /* the file has rows for this component */
    double attn[N_METRICS][N_ATTN];
    cost_attn_fit fit;         /* how well the fit holds (cost_profile_attn_fit) */
    int has_metric[N_METRICS]; /* the component has any value of this metric */
    size_t n[3];               /* axis lengths: mbs, enc, dec */
    double *axis[3];           /* sorted unique values */
    double *val[N_METRICS];    /* n0*n1*n2 values (median of repeats), NaN = not measured */
} grid;

typedef struct profile {
    grid g[COMP_COUNT];
} profile;

/* One raw row of the selected (tp, recompute). */
typedef struct raw_row {
    int comp, metric, sp;
    double key[3];
    double value;
} raw_row;

typedef struct load_ctx {
    int tp, cp, sp; /* sp: the request's sequence parallelism (where tp > 1); COST_SP_AS_MEASURED:
                     * the file's (rows of both kept, with their sp, until the load picks) */
    const char *rc;
    int idx[10];
    raw_row *rows;
    size_t n, cap;
    long other_rows; /* rows of other (tp, cp, recompute, sp) */
    long other_sp;   /* of them, rows of the request's (tp, cp, recompute) at the other sp */
} load_ctx;

const char *component_name(cost_component c)
{
    return COMPONENT_NAMES[c];
}

static dp_status on_header(void *vctx, const csv_row *h, dp_err *err)
{
    load_ctx *c = vctx;
    /* sp: whether a tp > 1 row was measured with sequence parallelism (dprun profile writes it;
     * a file without the column, as dprun's default, with it) */
    static const csv_column cols[10] = {{"tp", 1},    {"recompute", 1},  {"component", 1},
                                        {"metric", 1}, {"mbs", 1},        {"enc_seqlen", 1},
                                        {"dec_seqlen", 1}, {"value", 1},  {"cp", 0}, {"sp", 0}};
    return csv_header_map(h, cols, 10, c->idx, err);
}

static int find_name(const char *const *names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

static dp_status on_row(void *vctx, const csv_row *r, dp_err *err)
{
    load_ctx *c = vctx;
    const char *f[8];
    for (int i = 0; i < 8; i++) f[i] = r->fields[c->idx[i]];
    int64_t tp, mbs, enc, dec, cp = 1, sp = 1;
    if (dp_parse_i64(f[0], 1, 1 << 20, &tp) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: tp \"%s\" is not a positive whole number",
                       r->path, r->line, f[0]);
    if (c->idx[8] >= 0 && dp_parse_i64(r->fields[c->idx[8]], 1, 1 << 20, &cp) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: cp \"%s\" is not a positive whole number",
                       r->path, r->line, r->fields[c->idx[8]]);
    if (c->idx[9] >= 0 && r->fields[c->idx[9]][0] && dp_parse_i64(r->fields[c->idx[9]], 0, 1, &sp) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: sp \"%s\" is not 0 or 1", r->path, r->line,
                       r->fields[c->idx[9]]);
    recompute_mode rm;
    if (recompute_parse(f[1], &rm) != 0)
        return dp_fail(err, DP_ERR_PARSE,
                       "%s:%ld: recompute \"%s\" is not none, selective or full", r->path, r->line,
                       f[1]);
    if (strcmp(f[2], "embedding") == 0) return DP_OK; /* carried in *_params.csv, not timed */
    int comp = find_name(COMPONENT_NAMES, COMP_COUNT, f[2]);
    if (comp < 0)
        return dp_fail(err, DP_ERR_PARSE,
                       "%s:%ld: component \"%s\" is not encoder, decoder, postprocess or embedding",
                       r->path, r->line, f[2]);
    int metric = find_name(METRIC_NAMES, N_METRICS, f[3]);
    if (metric < 0)
        return dp_fail(err, DP_ERR_PARSE,
                       "%s:%ld: metric \"%s\" is not fwd_ms, bwd_ms, stored_act_mb or peak_act_mb",
                       r->path, r->line, f[3]);
    if (dp_parse_i64(f[4], 1, 1 << 24, &mbs) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: mbs \"%s\" is not a positive whole number",
                       r->path, r->line, f[4]);
    if (dp_parse_i64(f[5], 0, 1 << 24, &enc) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: enc_seqlen \"%s\" is not a whole number >= 0",
                       r->path, r->line, f[5]);
    if (dp_parse_i64(f[6], 0, 1 << 24, &dec) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: dec_seqlen \"%s\" is not a whole number >= 0",
                       r->path, r->line, f[6]);
    double v;
    if (dp_parse_f64(f[7], &v) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: value \"%s\" is not a finite number", r->path,
                       r->line, f[7]);
    if (v < 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: value \"%s\" is negative", r->path, r->line,
                       f[7]);
    if ((metric == M_FWD || metric == M_BWD) && !(v > 0)) /* a layer that runs takes time */
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s \"%s\" is not a time: a layer's pass takes "
                       "more than 0 ms", r->path, r->line, f[3], f[7]);
    if (v > COST_VALUE_MAX)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s \"%s\" is beyond %.0e, what one micro-batch "
                       "may cost in a plan", r->path, r->line, f[3], f[7], COST_VALUE_MAX);
    if (tp != c->tp || cp != c->cp || strcmp(f[1], c->rc) != 0 ||
        (tp > 1 && c->sp >= 0 && sp != c->sp)) {
        c->other_rows++;
        c->other_sp += tp == c->tp && cp == c->cp && strcmp(f[1], c->rc) == 0;
        return DP_OK;
    }
    if (dp_grow((void **)&c->rows, &c->cap, c->n + 1, sizeof *c->rows) != DP_OK)
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    /* Axes a component does not use are 0: GPT rows carry dec 0; T5 postprocess uses dec only. */
    raw_row *row = &c->rows[c->n++];
    row->sp = tp > 1 ? (int)sp : 1;
    row->comp = comp;
    row->metric = metric;
    row->key[0] = (double)mbs;
    row->key[1] = comp == COMP_POSTPROCESS && dec > 0 ? 0 : (double)enc;
    row->key[2] = comp == COMP_ENCODER ? 0 : (double)dec;
    row->value = v;
    return DP_OK;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int cmp_rows(const void *a, const void *b)
{
    const raw_row *x = a, *y = b;
    if (x->comp != y->comp) return x->comp - y->comp;
    if (x->metric != y->metric) return x->metric - y->metric;
    for (int k = 0; k < 3; k++)
        if (x->key[k] != y->key[k]) return x->key[k] < y->key[k] ? -1 : 1;
    return cmp_double(&x->value, &y->value);
}

static int same_key(const raw_row *x, const raw_row *y)
{
    return x->comp == y->comp && x->metric == y->metric && x->key[0] == y->key[0] &&
           x->key[1] == y->key[1] && x->key[2] == y->key[2];
}

/* Index i of the axis interval holding v: axis[i] <= v < axis[i+1], or the last index when v is
 * the largest value (gsl_interp_bsearch alone returns n-2 there). */
static size_t axis_lower(const double *axis, size_t n, double v)
{
    if (n == 1) return 0;
    size_t i = gsl_interp_bsearch(axis, v, 0, n - 1);
    return axis[i + 1] == v ? i + 1 : i;
}

static size_t axis_index(const grid *g, int k, double v)
{
    return axis_lower(g->axis[k], g->n[k], v);
}

static size_t cell(const grid *g, size_t i, size_t j, size_t l)
{
    return (i * g->n[1] + j) * g->n[2] + l;
}

/* Builds one component's grid from its sorted rows [lo, hi). */
static dp_status build_grid(grid *g, const raw_row *rows, size_t lo, size_t hi)
{
    g->present = 1;
    for (int k = 0; k < 3; k++) {
        double *ax = malloc((hi - lo) * sizeof *ax);
        if (!ax) return DP_ERR_NOMEM;
        for (size_t r = lo; r < hi; r++) ax[r - lo] = rows[r].key[k];
        qsort(ax, hi - lo, sizeof *ax, cmp_double);
        size_t u = 0;
        for (size_t r = 0; r < hi - lo; r++)
            if (u == 0 || ax[u - 1] != ax[r]) ax[u++] = ax[r];
        g->axis[k] = ax;
        g->n[k] = u;
    }
    size_t cells = g->n[0] * g->n[1] * g->n[2];
    for (int m = 0; m < N_METRICS; m++) {
        g->val[m] = malloc(cells * sizeof *g->val[m]);
        if (!g->val[m]) return DP_ERR_NOMEM;
        for (size_t c = 0; c < cells; c++) g->val[m][c] = NAN;
    }
    double *buf = malloc((hi - lo) * sizeof *buf);
    if (!buf) return DP_ERR_NOMEM;
    for (size_t r = lo; r < hi;) {
        size_t e = r;
        while (e < hi && same_key(&rows[e], &rows[r])) e++;
        /* rows are sorted by value within a key: the median of the repeats */
        for (size_t k = r; k < e; k++) buf[k - r] = rows[k].value;
        double med = gsl_stats_median_from_sorted_data(buf, 1, e - r);
        const raw_row *x = &rows[r];
        g->val[x->metric][cell(g, axis_index(g, 0, x->key[0]), axis_index(g, 1, x->key[1]),
                               axis_index(g, 2, x->key[2]))] = med;
        g->has_metric[x->metric] = 1;
        r = e;
    }
    free(buf);
    return DP_OK;
}

/* ---- the attention term ------------------------------------------------------------------ */

/* A layer's cost over its grid is fitted, by least squares relative to each value (GSL's
 * gsl_multifit_wlinear, weights 1/y^2), as
 *   encoder (GPT layer)  y = c0 + c1 b + c2 b e + c3 b e^2
 *   T5 decoder           y = c0 + c1 b + c2 b d + c3 b e + c4 b d^2 + c5 b d e
 * (b micro-batch size, e and d the lengths). The quadratic coefficients are the attention terms
 * (score work and score memory grow with the square of the length; everything else with the
 * tokens), clamped at 0. A query then keeps the grid's own interpolated value and moves only its
 * attention part: varlen attention replaces the rows' b e^2 (b d^2, b d e) by the samples' sums,
 * FlashAttention memory drops them from stored and peak memory. */
#define FIT_MAX_FEATURES 6
#define FIT_HOLDOUT_EVERY 4 /* every 4th grid point is held out to measure the fit's error */
#define FIT_ABOVE_FLOOR 2.0 /* points within 2x of the grid's smallest value are launch-bound
                             * (a flat floor no polynomial term describes) and left out */

static int fit_features(cost_component c, double b, double e, double d, double *x, int *attn_at)
{
    if (c == COMP_ENCODER) {
        x[0] = 1, x[1] = b, x[2] = b * e, x[3] = b * e * e;
        attn_at[A_EE] = 3, attn_at[A_DD] = attn_at[A_ED] = -1;
        return 4;
    }
    x[0] = 1, x[1] = b, x[2] = b * d, x[3] = b * e, x[4] = b * d * d, x[5] = b * d * e;
    attn_at[A_EE] = -1, attn_at[A_DD] = 4, attn_at[A_ED] = 5;
    return 6;
}

typedef struct fit_point {
    double x[FIT_MAX_FEATURES], y;
} fit_point;

/* Least squares over the points (hold_out: all but every FIT_HOLDOUT_EVERY-th); coef receives
 * p values. 0 when too few points. */
static int fit_solve(const fit_point *pt, size_t n, int p, int hold_out, double *coef)
{
    size_t m = 0;
    for (size_t i = 0; i < n; i++) m += !hold_out || i % FIT_HOLDOUT_EVERY != 0;
    if (m < (size_t)p + 2) return 0;
    gsl_matrix *X = gsl_matrix_alloc(m, (size_t)p), *cov = gsl_matrix_alloc((size_t)p, (size_t)p);
    gsl_vector *y = gsl_vector_alloc(m), *w = gsl_vector_alloc(m), *c = gsl_vector_alloc((size_t)p);
    gsl_multifit_linear_workspace *ws = gsl_multifit_linear_alloc(m, (size_t)p);
    int ok = X && cov && y && w && c && ws;
    if (ok) {
        size_t r = 0;
        for (size_t i = 0; i < n; i++) {
            if (hold_out && i % FIT_HOLDOUT_EVERY == 0) continue;
            for (int k = 0; k < p; k++) gsl_matrix_set(X, r, (size_t)k, pt[i].x[k]);
            gsl_vector_set(y, r, pt[i].y);
            gsl_vector_set(w, r, 1 / (pt[i].y * pt[i].y));
            r++;
        }
        double chisq;
        ok = gsl_multifit_wlinear(X, w, y, c, cov, &chisq, ws) == 0;
        for (int k = 0; ok && k < p; k++) coef[k] = gsl_vector_get(c, (size_t)k);
    }
    gsl_multifit_linear_free(ws);
    gsl_vector_free(c), gsl_vector_free(w), gsl_vector_free(y);
    gsl_matrix_free(cov), gsl_matrix_free(X);
    return ok;
}

/* Fits every metric of a grid (encoder or decoder); fills g->attn and g->fit. NOMEM only. */
static dp_status attn_fit(grid *g, cost_component c)
{
    size_t cells = g->n[0] * g->n[1] * g->n[2];
    fit_point *pt = malloc((cells ? cells : 1) * sizeof *pt);
    double *err = malloc((cells ? cells : 1) * sizeof *err);
    if (!pt || !err) {
        free(pt), free(err);
        return DP_ERR_NOMEM;
    }
    int attn_at[N_ATTN], p = 0;
    g->fit.ok = 1;
    g->fit.median_err_pct = g->fit.max_err_pct = 0;
    for (int m = 0; m < N_METRICS; m++) {
        size_t n = 0;
        double floor = INFINITY; /* the grid's smallest value: the launch-bound floor */
        for (size_t k = 0; g->has_metric[m] && k < cells; k++)
            if (g->val[m][k] > 0) floor = fmin(floor, g->val[m][k]);
        for (size_t i = 0; g->has_metric[m] && i < g->n[0]; i++)
            for (size_t j = 0; j < g->n[1]; j++)
                for (size_t l = 0; l < g->n[2]; l++) {
                    double v = g->val[m][cell(g, i, j, l)];
                    if (isnan(v) || v <= 0 || v < FIT_ABOVE_FLOOR * floor) continue;
                    p = fit_features(c, g->axis[0][i], g->axis[1][j], g->axis[2][l], pt[n].x,
                                     attn_at);
                    pt[n++].y = v;
                }
        if (m == M_FWD) g->fit.n_points = (int)n;
        double coef[FIT_MAX_FEATURES] = {0};
        if (!g->has_metric[m]) continue; /* a profile without memory metrics: nothing to move */
        if (!fit_solve(pt, n, p, 0, coef)) {
            g->fit.ok = 0;
            continue;
        }
        for (int a = 0; a < N_ATTN; a++)
            g->attn[m][a] = attn_at[a] >= 0 ? fmax(0, coef[attn_at[a]]) : 0;
        if (m != M_FWD && m != M_BWD) continue;
        /* the error of the same fit made without every 4th point, on those points */
        double held[FIT_MAX_FEATURES];
        size_t ne = 0;
        if (!fit_solve(pt, n, p, 1, held)) continue;
        for (size_t i = 0; i < n; i += FIT_HOLDOUT_EVERY) {
            double yhat = 0;
            for (int k = 0; k < p; k++) yhat += held[k] * pt[i].x[k];
            err[ne++] = 100 * fabs(yhat - pt[i].y) / pt[i].y;
        }
        qsort(err, ne, sizeof *err, cmp_double);
        if (ne) {
            g->fit.median_err_pct = fmax(g->fit.median_err_pct,
                                         gsl_stats_median_from_sorted_data(err, 1, ne));
            g->fit.max_err_pct = fmax(g->fit.max_err_pct, err[ne - 1]);
            g->fit.n_held_out += (int)ne;
        }
    }
    free(pt), free(err);
    return DP_OK;
}


static void profile_release(cost_model *cm)
{
    profile *p = cm->impl;
    if (!p) return;
    for (int c = 0; c < COMP_COUNT; c++) {
        for (int k = 0; k < 3; k++) free(p->g[c].axis[k]);
        for (int m = 0; m < N_METRICS; m++) free(p->g[c].val[m]);
    }
    free(p);
    cm->impl = NULL;
}

/* Brackets v on axis k: lo/hi indices and the weight of hi. Returns -1 outside the axis. */
static int bracket(const grid *g, int k, double v, size_t *lo, size_t *hi, double *w)
{
    const double *ax = g->axis[k];
    size_t n = g->n[k];
    if (v < ax[0] || v > ax[n - 1]) return -1;
    size_t i = axis_lower(ax, n, v);
    if (ax[i] == v || i + 1 >= n) {
        *lo = *hi = i;
        *w = 0;
    } else {
        *lo = i;
        *hi = i + 1;
        *w = (v - ax[i]) / (ax[i + 1] - ax[i]);
    }
    return 0;
}

static dp_status profile_query(const cost_model *cm, cost_component c, const cost_shape *s,
                               cost_layer *out, dp_err *err)
{
    const profile *p = cm->impl;
    const grid *g = &p->g[c];
    if (!g->present)
        return dp_fail(err, DP_ERR_INFEASIBLE, "the profile has no %s rows", COMPONENT_NAMES[c]);
    /* The same normalisation as on_row: T5's postprocess depends on the decoder length only. */
    double coord[3] = {s->mbs, c == COMP_POSTPROCESS && s->dec_len > 0 ? 0 : s->enc_len,
                       c == COMP_ENCODER ? 0 : s->dec_len};
    static const char *const axis_names[3] = {"mbs", "enc_seqlen", "dec_seqlen"};
    size_t lo[3], hi[3];
    double w[3];
    for (int k = 0; k < 3; k++)
        if (bracket(g, k, coord[k], &lo[k], &hi[k], &w[k]) != 0)
            return dp_fail(err, DP_ERR_INFEASIBLE,
                           "%s %s %.0f is outside the measured region [%.0f, %.0f]",
                           COMPONENT_NAMES[c], axis_names[k], coord[k], g->axis[k][0],
                           g->axis[k][g->n[k] - 1]);
    double acc[N_METRICS] = {0};
    for (int corner = 0; corner < 8; corner++) {
        double weight = 1;
        size_t ix[3];
        for (int k = 0; k < 3; k++) {
            int up = (corner >> k) & 1;
            if (up && hi[k] == lo[k]) goto next_corner; /* degenerate axis: one corner */
            ix[k] = up ? hi[k] : lo[k];
            weight *= up ? w[k] : 1 - w[k];
        }
        for (int m = 0; m < N_METRICS; m++) {
            if (!g->has_metric[m]) continue;
            double v = g->val[m][cell(g, ix[0], ix[1], ix[2])];
            if (isnan(v))
                return dp_fail(err, DP_ERR_INFEASIBLE,
                               "%s shape mbs %d, enc %d, dec %d lies in a cell the profile lacks "
                               "(out of memory when measured, or not measured): %s at mbs %.0f, "
                               "enc %.0f, dec %.0f",
                               COMPONENT_NAMES[c], s->mbs, s->enc_len, s->dec_len,
                               METRIC_NAMES[m], g->axis[0][ix[0]], g->axis[1][ix[1]],
                               g->axis[2][ix[2]]);
            acc[m] += weight * v;
        }
    next_corner:;
    }
    if ((s->varlen || cm->flash_attn) && c != COMP_POSTPROCESS) {
        if (!g->fit.ok)
            return dp_fail(err, DP_ERR_INFEASIBLE, "the profile's %s grid has %d points, too few "
                           "to separate attention from the rest (varlen attention, FlashAttention "
                           "memory)", COMPONENT_NAMES[c], g->fit.n_points);
        /* what the rows' attention would be, and what the samples' own is (cost.h) */
        cost_shape rows = cost_shape_rows(s->mbs, s->enc_len, s->dec_len);
        double whole[N_ATTN], own[N_ATTN];
        cost_shape_attn(&rows, &whole[A_EE], &whole[A_DD], &whole[A_ED]);
        cost_shape_attn(s, &own[A_EE], &own[A_DD], &own[A_ED]);
        for (int m = 0; m < N_METRICS; m++) {
            int memory = m == M_STORED || m == M_PEAK;
            for (int a = 0; a < N_ATTN; a++) {
                double keep = memory && cm->flash_attn ? 0 : own[a];
                acc[m] -= g->attn[m][a] * (whole[a] - keep);
            }
            if (acc[m] < 0) acc[m] = 0;
        }
    }
    out->fwd_ms = acc[M_FWD];
    out->bwd_ms = acc[M_BWD];
    out->stored_act_mb = acc[M_STORED];
    out->peak_act_mb = acc[M_PEAK];
    return DP_OK;
}

static const cost_ops PROFILE_OPS = {"profile", 0, 0, 0, 0, profile_query, NULL, profile_release};

/* ---- *_params.csv ----------------------------------------------------------------------------- */

typedef struct params_ctx {
    int tp;
    const char *rc;
    int idx[4];
    double mb[COMP_COUNT + 1]; /* encoder, decoder, postprocess (unused), embedding */
    int seen[COMP_COUNT + 1];
} params_ctx;

static dp_status params_header(void *vctx, const csv_row *h, dp_err *err)
{
    params_ctx *c = vctx;
    static const csv_column cols[4] = {
        {"tp", 1}, {"recompute", 1}, {"component", 1}, {"param_mb_per_layer", 1}};
    return csv_header_map(h, cols, 4, c->idx, err);
}

static dp_status params_row(void *vctx, const csv_row *r, dp_err *err)
{
    params_ctx *c = vctx;
    int64_t tp;
    double v;
    if (dp_parse_i64(r->fields[c->idx[0]], 1, 1 << 20, &tp) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: tp \"%s\" is not a positive whole number",
                       r->path, r->line, r->fields[c->idx[0]]);
    if (dp_parse_f64(r->fields[c->idx[3]], &v) != 0 || v < 0)
        return dp_fail(err, DP_ERR_PARSE,
                       "%s:%ld: param_mb_per_layer \"%s\" is not a non-negative number", r->path,
                       r->line, r->fields[c->idx[3]]);
    if (tp != c->tp || strcmp(r->fields[c->idx[1]], c->rc) != 0) return DP_OK;
    const char *comp = r->fields[c->idx[2]];
    int k = strcmp(comp, "embedding") == 0 ? COMP_COUNT : find_name(COMPONENT_NAMES, COMP_COUNT, comp);
    if (k < 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: component \"%s\" is unknown", r->path, r->line,
                       comp);
    c->mb[k] = v;
    c->seen[k] = 1;
    return DP_OK;
}

/* Fills cm->param_mb from the model, then from PATH's *_params.csv sibling when it exists,
 * checking that the two agree within 3%. */
static dp_status load_params(const char *profile_path, cost_model *cm, dp_err *err)
{
    const model_spec *m = &cm->model;
    cm->param_mb[COMP_ENCODER] = 2.0 * (double)model_layer_params(m, 0) / cm->tp / 1e6;
    cm->param_mb[COMP_DECODER] = m->dec_layers ? 2.0 * (double)model_layer_params(m, 1) / cm->tp / 1e6 : 0;
    cm->param_mb[COMP_POSTPROCESS] = 0;
    cm->embedding_param_mb = 2.0 * (double)model_embedding_params(m) / cm->tp / 1e6;
    size_t len = strlen(profile_path);
    const char *suffix = "_profile.csv";
    if (len < strlen(suffix) || strcmp(profile_path + len - strlen(suffix), suffix) != 0)
        return DP_OK;
    char path[4096];
    snprintf(path, sizeof path, "%.*s_params.csv", (int)(len - strlen(suffix)), profile_path);
    FILE *probe = fopen(path, "rb");
    if (!probe) return DP_OK;
    fclose(probe);
    /* Parameters do not depend on the recompute mode; the measured files give each mode its own
     * rows, equal but for rounding (402.7706 and 402.7701 MB): the `none` rows serve every mode,
     * so that model state and the optimizer step are the same in each (--recompute dynamic
     * mixes them). A file without them: the mode's own. */
    params_ctx c = {.tp = cm->tp, .rc = recompute_name(RECOMPUTE_NONE)};
    dp_status st = csv_read_file(path, 1, params_header, params_row, &c, err);
    if (st == DP_OK && !c.seen[COMP_ENCODER]) {
        c = (params_ctx){.tp = cm->tp, .rc = recompute_name(cm->recompute)};
        st = csv_read_file(path, 1, params_header, params_row, &c, err);
    }
    if (st != DP_OK) return st;
    for (int k = COMP_ENCODER; k <= COMP_DECODER; k++) {
        if (!c.seen[k] || cm->param_mb[k] == 0) continue;
        double rel = fabs(c.mb[k] - cm->param_mb[k]) / cm->param_mb[k];
        if (rel > 0.03)
            return dp_fail(err, DP_ERR_INVALID,
                           "%s: %s parameters are %.1f MB per layer at tp %d, but model %s has "
                           "%.1f MB: the profile was measured on another model width\nhint: use "
                           "the profile of this model, or --hw with the analytic cost model",
                           path, COMPONENT_NAMES[k], c.mb[k], cm->tp, m->name, cm->param_mb[k]);
        cm->param_mb[k] = c.mb[k];
    }
    return DP_OK;
}

dp_status cost_profile_load(const char *path, const model_spec *m, const cluster_spec *hw, int tp,
                            recompute_mode rc, cost_model **out, dp_err *err)
{
    return cost_profile_load_at(path, m, hw, tp, 1, 1, rc, out, err);
}

dp_status cost_profile_load_at(const char *path, const model_spec *m, const cluster_spec *hw,
                               int tp, int cp, int sp, recompute_mode rc, cost_model **out,
                               dp_err *err)
{
    *out = NULL;
    dp_status st = model_check_dense(m, "a measured profile", err);
    if (st != DP_OK) return st;
    load_ctx c = {.tp = tp, .cp = cp, .sp = sp < 0 ? COST_SP_AS_MEASURED : sp ? 1 : 0,
                  .rc = recompute_name(rc)};
    char at[32] = "";
    if (cp > 1) snprintf(at, sizeof at, ", cp %d", cp);
    cost_model *cm = calloc(1, sizeof *cm);
    if (cm) cm->serial = cost_model_next_serial(), cm->cp = cp, cm->grad_bytes = 2, cm->attn_speed = 1;
    profile *p = calloc(1, sizeof *p);
    if (!cm || !p) {
        free(cm), free(p);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    cm->ops = &PROFILE_OPS;
    cm->model = *m;
    cm->hw = *hw;
    cm->tp = tp;
    cm->recompute = rc;
    cm->attn = hw->gpu.attn;
    cm->overlap = COST_OVERLAP_DEFAULT;
    cm->impl = p;
    TRY(csv_read_file(path, 1, on_header, on_row, &c, err));
    if (c.sp < 0) { /* as measured: with SP where the file has it at this (tp, cp, recompute) */
        int with = 0;
        for (size_t r = 0; r < c.n; r++) with |= c.rows[r].sp;
        size_t kept = 0;
        for (size_t r = 0; r < c.n; r++)
            if (c.rows[r].sp == with) c.rows[kept++] = c.rows[r];
        c.n = kept, c.sp = with;
    }
    cm->seq_parallel = c.sp;
    if (c.n == 0 && cp > 1 && c.idx[8] < 0) {
        st = dp_fail(err, DP_ERR_INVALID, "%s: --cp %d needs the analytic cost model or a profile "
                     "measured at cp %d, and this one timed whole sequences on one GPU (no cp "
                     "column)\nhint: --analytic, or dprun profile --cp %d", path, cp, cp, cp);
        goto out;
    }
    if (c.n == 0 && c.other_sp > 0) {
        st = dp_fail(err, DP_ERR_INVALID, "%s: its tp %d rows were measured %s sequence parallelism, "
                     "and the plan runs %s it\nhint: dprun profile --tp %d%s measures them, or %s",
                     path, tp, sp ? "without" : "with", sp ? "with" : "without", tp,
                     sp ? "" : " --no-sp", sp ? "--no-sp to plan as measured" : "drop --no-sp");
        goto out;
    }
    if (c.n == 0) {
        st = dp_fail(err, DP_ERR_INVALID,
                     "%s: no rows for tp %d%s and recompute %s (the file has %ld other rows)\n"
                     "hint: dprun profile --recompute %s%s measures them; or plan on the analytic "
                     "model (--analytic; dpsim calibrate fits it to a profile: --fit)", path, tp,
                     at, c.rc, c.other_rows, c.rc, cp > 1 ? " --cp N" : "");
        goto out;
    }
    qsort(c.rows, c.n, sizeof *c.rows, cmp_rows);
    for (size_t r = 0; r < c.n;) {
        size_t e = r;
        while (e < c.n && c.rows[e].comp == c.rows[r].comp) e++;
        if (build_grid(&p->g[c.rows[r].comp], c.rows, r, e) != DP_OK) {
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
            goto out;
        }
        r = e;
    }
    for (int k = COMP_ENCODER; k <= COMP_DECODER; k++)
        if (p->g[k].present && attn_fit(&p->g[k], (cost_component)k) != DP_OK) {
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
            goto out;
        }
    if (!p->g[COMP_ENCODER].present ||
        (m->arch == ARCH_T5 && !p->g[COMP_DECODER].present)) {
        st = dp_fail(err, DP_ERR_INVALID, "%s: no %s rows for tp %d%s, recompute %s: not a "
                     "profile for a %s model",
                     path, p->g[COMP_ENCODER].present ? "decoder" : "encoder", tp, at, c.rc,
                     model_arch_name(m->arch));
        goto out;
    }
    if (m->arch == ARCH_GPT && p->g[COMP_DECODER].present) {
        st = dp_fail(err, DP_ERR_INVALID, "%s: has decoder rows: a T5 profile, but model %s is GPT",
                     path, m->name);
        goto out;
    }
    for (int k = COMP_ENCODER; k <= COMP_DECODER; k++) {
        grid *g = &p->g[k];
        if (g->present && (!g->has_metric[M_FWD] || !g->has_metric[M_BWD])) {
            st = dp_fail(err, DP_ERR_INVALID, "%s: %s rows lack fwd_ms or bwd_ms", path,
                         COMPONENT_NAMES[k]);
            goto out;
        }
    }
    TRY(load_params(path, cm, err));
    *out = cm;
    cm = NULL;
out:
    free(c.rows);
    cost_model_free(cm);
    return st;
}

dp_status cost_profile_range_of(const cost_model *cm, cost_component c, cost_profile_range *r)
{
    if (cm->ops != &PROFILE_OPS) return DP_ERR_UNSUPPORTED;
    const grid *g = &((const profile *)cm->impl)->g[c];
    if (!g->present) return DP_ERR_INFEASIBLE;
    r->mbs_min = (int)g->axis[0][0];
    r->mbs_max = (int)g->axis[0][g->n[0] - 1];
    r->enc_min = (int)g->axis[1][0];
    r->enc_max = (int)g->axis[1][g->n[1] - 1];
    r->dec_min = (int)g->axis[2][0];
    r->dec_max = (int)g->axis[2][g->n[2] - 1];
    return DP_OK;
}

dp_status cost_profile_points(const cost_model *cm, cost_point **pts, size_t *n, dp_err *err)
{
    *pts = NULL;
    *n = 0;
    if (cm->ops != &PROFILE_OPS)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "only a profile cost model has grid points");
    const profile *p = cm->impl;
    size_t cap = 0;
    for (int c = COMP_ENCODER; c <= COMP_DECODER; c++) {
        const grid *g = &p->g[c];
        if (!g->present) continue;
        for (size_t i = 0; i < g->n[0]; i++)
            for (size_t j = 0; j < g->n[1]; j++)
                for (size_t l = 0; l < g->n[2]; l++) {
                    size_t k = cell(g, i, j, l);
                    if (isnan(g->val[M_FWD][k]) || isnan(g->val[M_BWD][k])) continue;
                    if (dp_grow((void **)pts, &cap, *n + 1, sizeof **pts) != DP_OK) {
                        free(*pts);
                        *pts = NULL;
                        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
                    }
                    cost_point *pt = &(*pts)[(*n)++];
                    pt->comp = (cost_component)c;
                    pt->shape = cost_shape_rows((int)g->axis[0][i], (int)g->axis[1][j],
                                             (int)g->axis[2][l]);
                    pt->cost = (cost_layer){.fwd_ms = g->val[M_FWD][k],
                                            .bwd_ms = g->val[M_BWD][k],
                                            .stored_act_mb = g->val[M_STORED][k],
                                            .peak_act_mb = g->val[M_PEAK][k]};
                }
    }
    return DP_OK;
}

dp_status cost_profile_attn_fit(const cost_model *cm, cost_component c, cost_attn_fit *out,
                                double *fwd_ms_per_sq)
{
    if (cm->ops != &PROFILE_OPS) return DP_ERR_UNSUPPORTED;
    const grid *g = &((const profile *)cm->impl)->g[c];
    if (!g->present || c == COMP_POSTPROCESS) return DP_ERR_INFEASIBLE;
    *out = g->fit;
    if (fwd_ms_per_sq) *fwd_ms_per_sq = g->attn[M_FWD][c == COMP_ENCODER ? A_EE : A_DD];
    return DP_OK;
}
