#include "straggler.h"

#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <gsl/gsl_math.h>
#include <gsl/gsl_sf_erf.h>
#include <math.h>

/* x n phi(x) Phi(x)^(n-1), the density of the maximum of n standard normals times x */
static double max_integrand(double x, void *params)
{
    double n = *(const double *)params;
    double log_cdf = gsl_sf_log_erfc(-x / M_SQRT2) - M_LN2; /* log Phi(x), exact in both tails */
    return x * n * exp(-0.5 * x * x + (n - 1) * log_cdf) / sqrt(2 * M_PI);
}

double straggler_expected_max(long long n)
{
    if (n <= 1) return 0;
    double nd = (double)n, result = 0, abserr = 0;
    gsl_function f = {max_integrand, &nd};
    gsl_integration_workspace *w = gsl_integration_workspace_alloc(256);
    if (!w) return NAN;
    /* the density lies within [-10, 10] for any n up to 1e12 (its mode near sqrt(2 ln n)) */
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    int st = gsl_integration_qag(&f, -10, 10, 0, 1e-10, 256, GSL_INTEG_GAUSS41, w, &result, &abserr);
    gsl_set_error_handler(old);
    gsl_integration_workspace_free(w);
    return st == 0 ? result : NAN;
}

double straggler_share(double cv, long long gpus)
{
    if (!(cv > 0) || gpus <= 1) return 0;
    return cv * straggler_expected_max(gpus);
}
