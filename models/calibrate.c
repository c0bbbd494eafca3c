#include "calibrate.h"

#include <gsl/gsl_errno.h>
#include <gsl/gsl_multifit_nlinear.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <gsl/gsl_statistics_double.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_util.h"

typedef struct fit_data {
    const cost_model *profile;
    const cost_point *pts;
    size_t n;
} fit_data;

/* The fit works on unconstrained x: efficiencies (the first three) are logistic(x) in (0, 1),
 * floors and the backward ratio exp(x) > 0. */
#define N_EFFICIENCIES 3

static void from_free(const double *x, double *a)
{
    for (int i = 0; i < ANALYTIC_N_PARAMS; i++)
        a[i] = i < N_EFFICIENCIES ? 1 / (1 + exp(-x[i])) : exp(x[i]);
}

static void to_free(const double *a, double *x)
{
    for (int i = 0; i < ANALYTIC_N_PARAMS; i++)
        x[i] = i < N_EFFICIENCIES ? log(a[i] / (1 - a[i])) : log(a[i]);
}

/* Builds the analytic model for free parameters x. */
static dp_status model_at(const fit_data *d, const double *x, cost_model **cm)
{
    double a[ANALYTIC_N_PARAMS];
    from_free(x, a);
    analytic_params p;
    analytic_params_from_array(a, &p);
    const cost_model *pr = d->profile;
    return cost_analytic_new(&pr->model, &pr->hw, pr->tp, pr->recompute, &p, cm, NULL);
}

static int residuals(const gsl_vector *x, void *params, gsl_vector *f)
{
    const fit_data *d = params;
    cost_model *cm;
    if (model_at(d, x->data, &cm) != DP_OK) return GSL_EDOM;
    for (size_t i = 0; i < d->n; i++) {
        cost_layer c;
        const cost_point *pt = &d->pts[i];
        if (cost_query(cm, pt->comp, &pt->shape, &c, NULL) != DP_OK) {
            cost_model_free(cm);
            return GSL_EDOM;
        }
        gsl_vector_set(f, 2 * i, (c.fwd_ms - pt->cost.fwd_ms) / pt->cost.fwd_ms);
        gsl_vector_set(f, 2 * i + 1, (c.bwd_ms - pt->cost.bwd_ms) / pt->cost.bwd_ms);
    }
    cost_model_free(cm);
    return GSL_SUCCESS;
}

/* Absolute percentage errors of the model on pts, fwd and bwd pooled, into ape[2n]. */
static void errors(const cost_model *cm, const cost_point *pts, size_t n, double *ape)
{
    for (size_t i = 0; i < n; i++) {
        cost_layer c;
        cost_query(cm, pts[i].comp, &pts[i].shape, &c, NULL);
        ape[2 * i] = 100 * fabs(c.fwd_ms - pts[i].cost.fwd_ms) / pts[i].cost.fwd_ms;
        ape[2 * i + 1] = 100 * fabs(c.bwd_ms - pts[i].cost.bwd_ms) / pts[i].cost.bwd_ms;
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double quantile(double *v, size_t n, double q)
{
    qsort(v, n, sizeof *v, cmp_double);
    return gsl_stats_quantile_from_sorted_data(v, 1, n, q);
}

/* The trust-region least-squares fit of d's points from parameters start into got: GSL's
 * status (GSL_SUCCESS or GSL_EMAXITER: a result), and its iteration count. */
static int fit_from(const fit_data *d, const double *start, double *got, int *iters)
{
    gsl_vector *x = gsl_vector_alloc(ANALYTIC_N_PARAMS);
    to_free(start, x->data);
    gsl_multifit_nlinear_fdf fdf = {0};
    fdf.f = residuals;
    fdf.n = 2 * d->n;
    fdf.p = ANALYTIC_N_PARAMS;
    fdf.params = (void *)d;
    gsl_multifit_nlinear_parameters fp = gsl_multifit_nlinear_default_parameters();
    gsl_multifit_nlinear_workspace *w =
        gsl_multifit_nlinear_alloc(gsl_multifit_nlinear_trust, &fp, fdf.n, fdf.p);
    int info = 0;
    int gs = gsl_multifit_nlinear_init(x, &fdf, w);
    if (gs == GSL_SUCCESS) gs = gsl_multifit_nlinear_driver(500, 1e-10, 1e-10, 1e-10, NULL, NULL, &info, w);
    if (gs == GSL_SUCCESS || gs == GSL_EMAXITER) {
        from_free(w->x->data, got);
        *iters = (int)gsl_multifit_nlinear_niter(w);
    }
    gsl_multifit_nlinear_free(w);
    gsl_vector_free(x);
    return gs;
}

dp_status calibrate_fit(const cost_model *profile, double holdout_frac, uint64_t seed,
                        calib_result *res, dp_err *err)
{
    memset(res, 0, sizeof *res);
    if (holdout_frac < 0 || holdout_frac >= 1)
        return dp_fail(err, DP_ERR_INVALID, "--holdout must be in [0, 1)");
    cost_point *pts = NULL;
    size_t n = 0;
    dp_status st = cost_profile_points(profile, &pts, &n, err);
    if (st != DP_OK) return st;
    size_t n_hold = (size_t)floor(holdout_frac * (double)n + 0.5);
    size_t n_fit = n - n_hold;
    if (n_fit < ANALYTIC_N_PARAMS) {
        free(pts);
        return dp_fail(err, DP_ERR_INVALID,
                       "only %zu grid points to fit %d parameters: use a larger grid or a smaller "
                       "--holdout",
                       n_fit, ANALYTIC_N_PARAMS);
    }
    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(r, (unsigned long)seed);
    gsl_ran_shuffle(r, pts, n, sizeof *pts);
    gsl_rng_free(r);
    /* pts[0, n_hold) held out, pts[n_hold, n) fitted */
    fit_data d = {profile, pts + n_hold, n_fit};

    /* the trust-region solver from the defaults, and, since a GPU far from the A100 the defaults
     * were fitted to can put the optimum out of its reach (an H200's 989 TFLOP/s peak), from
     * efficiencies a third and a tenth of them: the start whose fit errs least is kept */
    analytic_params p0;
    analytic_params_default(&p0);
    double a0[ANALYTIC_N_PARAMS], a[ANALYTIC_N_PARAMS], best_ape = INFINITY;
    analytic_params_to_array(&p0, a0);
    static const double starts[] = {1.0, 1.0 / 3, 0.1};
    double *trial = malloc(2 * n * sizeof *trial);
    if (!trial) {
        free(pts);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    int fitted = 0, last_gs = GSL_SUCCESS;
    for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++) {
        double start[ANALYTIC_N_PARAMS], got[ANALYTIC_N_PARAMS];
        memcpy(start, a0, sizeof start);
        for (int i = 0; i < N_EFFICIENCIES; i++) start[i] *= starts[k];
        int iters = 0, gs = fit_from(&d, start, got, &iters);
        if (gs != GSL_SUCCESS && gs != GSL_EMAXITER) {
            last_gs = gs;
            continue;
        }
        analytic_params p;
        cost_model *cm = NULL;
        analytic_params_from_array(got, &p);
        if (cost_analytic_new(&profile->model, &profile->hw, profile->tp, profile->recompute, &p,
                              &cm, NULL) != DP_OK)
            continue;
        errors(cm, pts + n_hold, n_fit, trial);
        cost_model_free(cm);
        double m = quantile(trial, 2 * n_fit, 0.5);
        if (isfinite(m) && m < best_ape) {
            best_ape = m, fitted = 1;
            memcpy(a, got, sizeof a);
            res->iterations = iters;
        }
    }
    free(trial);
    if (!fitted) {
        st = dp_fail(err, last_gs != GSL_SUCCESS ? DP_ERR_EXTERNAL : DP_ERR_INVALID,
                     "the least-squares fit did not converge from any start%s%s: the analytic "
                     "model cannot describe this profile", last_gs != GSL_SUCCESS ? ": " : "",
                     last_gs != GSL_SUCCESS ? gsl_strerror(last_gs) : "");
        free(pts);
        return st;
    }
    analytic_params_from_array(a, &res->params);
    cost_model *cm = NULL;
    TRY(cost_analytic_new(&profile->model, &profile->hw, profile->tp, profile->recompute,
                          &res->params, &cm, err));
    double *ape = malloc(2 * n * sizeof *ape);
    if (!ape) {
        cost_model_free(cm);
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        goto out;
    }
    errors(cm, pts + n_hold, n_fit, ape);
    res->fit_median_ape = quantile(ape, 2 * n_fit, 0.5);
    if (n_hold > 0) {
        errors(cm, pts, n_hold, ape);
        res->holdout_median_ape = quantile(ape, 2 * n_hold, 0.5);
        res->holdout_p90_ape = quantile(ape, 2 * n_hold, 0.9);
    }
    res->n_fit = n_fit;
    res->n_holdout = n_hold;
    free(ape);
    cost_model_free(cm);
    if (!(res->fit_median_ape <= CALIB_MAX_FIT_APE))
        st = dp_fail(err, DP_ERR_INFEASIBLE,
                     "the analytic model cannot describe this profile: fitted to its own points it "
                     "errs by a median of %.3g%% (at most %.0f%% is a fit)\nhint: check the "
                     "profile's times (a row off by orders of magnitude), or use the profile "
                     "itself (--profile) rather than a fit of it",
                     res->fit_median_ape, CALIB_MAX_FIT_APE);
    else if (!(res->params.bwd_ratio >= 1))
        st = dp_fail(err, DP_ERR_INFEASIBLE,
                     "the fit puts the backward at %.3g of the forward's work, below the 1 every "
                     "backward is (it runs two GEMMs for each of the forward's)\nhint: check the "
                     "profile's bwd_ms rows", res->params.bwd_ratio);
out:
    free(pts);
    return st;
}

dp_status calibrate_write(const calib_result *res, const cost_model *profile,
                          const char *hw_name, const char *path, dp_err *err)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "kind", "analytic");
    cJSON_AddStringToObject(o, "model", profile->model.name);
    cJSON_AddStringToObject(o, "hw", hw_name);
    cJSON_AddNumberToObject(o, "tp", profile->tp);
    cJSON_AddStringToObject(o, "recompute", recompute_name(profile->recompute));
    cJSON *p = cJSON_AddObjectToObject(o, "params");
    double a[ANALYTIC_N_PARAMS];
    analytic_params_to_array(&res->params, a);
    for (int i = 0; i < ANALYTIC_N_PARAMS; i++) cJSON_AddNumberToObject(p, ANALYTIC_PARAM_NAMES[i], a[i]);
    cJSON *q = cJSON_AddObjectToObject(o, "fit");
    cJSON_AddNumberToObject(q, "points_fitted", (double)res->n_fit);
    cJSON_AddNumberToObject(q, "points_held_out", (double)res->n_holdout);
    cJSON_AddNumberToObject(q, "fit_median_ape_pct", res->fit_median_ape);
    if (res->n_holdout > 0) {
        cJSON_AddNumberToObject(q, "holdout_median_ape_pct", res->holdout_median_ape);
        cJSON_AddNumberToObject(q, "holdout_p90_ape_pct", res->holdout_p90_ape);
    } else { /* no point held out: no error measured, not an error of 0 */
        cJSON_AddNullToObject(q, "holdout_median_ape_pct");
        cJSON_AddNullToObject(q, "holdout_p90_ape_pct");
    }
    dp_status st = json_write_file(o, path, err);
    cJSON_Delete(o);
    return st;
}
