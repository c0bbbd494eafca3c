/*
 * calibrate.h — fitting the analytic cost model to a measured profile.
 *
 * The six analytic_params are fitted by nonlinear least squares (GSL gsl_multifit_nlinear,
 * Levenberg–Marquardt with a trust region and finite-difference Jacobian) on the relative error
 * of forward and backward time at every measured encoder/decoder grid point:
 *     residual = (predicted - measured) / measured
 * Parameters are fitted in log space so they stay positive. A seeded random fraction of the
 * points (GSL gsl_ran_shuffle) is held out and the fit is judged on them: median and p90 of the
 * absolute percentage error over held-out forward and backward times.
 */
#ifndef CALIBRATE_H
#define CALIBRATE_H

#include <stddef.h>
#include <stdint.h>

#include "cost.h"

typedef struct calib_result {
    analytic_params params;
    size_t n_fit, n_holdout;       /* grid points used for fitting and held out */
    double fit_median_ape;         /* % on the fitted points */
    double holdout_median_ape;     /* % on held-out points (fwd and bwd pooled) */
    double holdout_p90_ape;
    int iterations;
} calib_result;

/* Fits the analytic model of profile's model, hardware, tp and recompute to its grid.
 * DP_ERR_INFEASIBLE (res filled, for the report) where the fit errs by a median of more than
 * CALIB_MAX_FIT_APE % on the very points it was fitted to (the shipped A100 profiles fit within a
 * few %), or puts the backward below the forward's work (bwd_ratio < 1, which a fit file may not
 * hold): no fit to write or use. */
#define CALIB_MAX_FIT_APE 50.0
dp_status calibrate_fit(const cost_model *profile, double holdout_frac, uint64_t seed,
                        calib_result *res, dp_err *err);

/* Writes a fit as JSON readable by cost_fit_load. hw_name is the hardware preset or file. */
dp_status calibrate_write(const calib_result *res, const cost_model *profile,
                          const char *hw_name, const char *path, dp_err *err);

#endif /* CALIBRATE_H */
