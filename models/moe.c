#include "moe.h"

#include "../common/csv_table.h"

#include <gsl/gsl_cdf.h>
#include <gsl/gsl_errno.h>
#include <gsl/gsl_integration.h>
#include <gsl/gsl_math.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_sf_erf.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dp_status moe_routing_init(moe_routing *r, moe_route_kind kind, int experts, int ep, double alpha,
                           const double *hist, dp_err *err)
{
    memset(r, 0, sizeof *r);
    r->experts = r->ep = 1, r->q[0] = 1;
    if (experts < 1 || experts > MOE_EXPERTS_MAX)
        return dp_fail(err, DP_ERR_INVALID, "experts %d: 1 to %d", experts, MOE_EXPERTS_MAX);
    if (ep < 1 || ep > MOE_EP_MAX || experts % ep)
        return dp_fail(err, DP_ERR_INVALID, "--ep %d does not divide the %d experts (each rank holds "
                       "a whole block of them)", ep, experts);
    if (kind == MOE_ROUTE_SKEWED && !(alpha >= 0 && alpha <= 100))
        return dp_fail(err, DP_ERR_INVALID, "the routing skew %g is not a Zipf exponent in [0, 100]",
                       alpha);
    double p[MOE_EXPERTS_MAX], sum = 0;
    for (int e = 0; e < experts; e++) {
        double v = kind == MOE_ROUTE_SKEWED ? pow(e + 1.0, -alpha)
                   : kind == MOE_ROUTE_HISTOGRAM ? hist[e]
                                                  : 1;
        if (!(v >= 0) || !isfinite(v))
            return dp_fail(err, DP_ERR_INVALID, "the routing histogram's count of expert %d is %g "
                           "(a count is finite and not negative)", e, v);
        p[e] = v, sum += v;
    }
    if (!(sum > 0))
        return dp_fail(err, DP_ERR_INVALID, "the routing histogram sums to 0 over its %d experts",
                       experts);
    r->kind = kind, r->experts = experts, r->ep = ep;
    r->alpha = kind == MOE_ROUTE_SKEWED ? alpha : 0;
    r->zipf_sum = kind == MOE_ROUTE_SKEWED ? sum : 0;
    int per = experts / ep;
    for (int k = 0; k < ep; k++) {
        r->q[k] = 0;
        for (int e = k * per; e < (k + 1) * per; e++) r->q[k] += p[e] / sum;
    }
    return DP_OK;
}

typedef struct busiest_ctx {
    const moe_routing *r;
    double n;
} busiest_ctx;

/* 1 - prod_r Phi((y - mu_r) / sigma_r): the chance that some rank's load passes y */
static double some_rank_above(double y, void *params)
{
    const busiest_ctx *b = params;
    double log_all = 0;
    for (int k = 0; k < b->r->ep; k++) {
        double mu = b->n * b->r->q[k], var = b->n * b->r->q[k] * (1 - b->r->q[k]);
        if (var <= 0) {
            if (y < mu) return 1; /* a rank that always gets mu copies */
            continue;
        }
        double z = (y - mu) / sqrt(var);
        log_all += gsl_sf_log_erfc(-z / M_SQRT2) - M_LN2; /* log Phi(z), exact in both tails */
    }
    return -expm1(log_all);
}

double moe_busiest_load(const moe_routing *r, double n)
{
    if (!(n > 0)) return 0;
    if (r->ep <= 1) return n;
    if (r->kind == MOE_ROUTE_EVEN) return n / r->ep;
    /* below lo every rank is over it almost surely (the integrand is 1); above hi none is */
    double lo = INFINITY, hi = 0;
    for (int k = 0; k < r->ep; k++) {
        double mu = n * r->q[k], sd = sqrt(n * r->q[k] * (1 - r->q[k]));
        lo = fmin(lo, mu - 12 * sd), hi = fmax(hi, mu + 12 * sd);
    }
    lo = fmax(lo, 0);
    if (!(hi > lo)) return hi;
    busiest_ctx ctx = {r, n};
    gsl_function f = {some_rank_above, &ctx};
    gsl_integration_workspace *w = gsl_integration_workspace_alloc(256);
    if (!w) return NAN;
    double result = 0, abserr = 0;
    gsl_error_handler_t *old = gsl_set_error_handler_off();
    int st = gsl_integration_qag(&f, lo, hi, 1e-9 * n, 1e-9, 256, GSL_INTEG_GAUSS41, w, &result,
                                 &abserr);
    gsl_set_error_handler(old);
    gsl_integration_workspace_free(w);
    return st == 0 ? lo + result : NAN;
}

double moe_imbalance(const moe_routing *r, double n)
{
    if (!(n > 0) || r->ep <= 1) return 1;
    return fmax(1, moe_busiest_load(r, n) / (n / r->ep));
}

double moe_dropped_share(const moe_routing *r, double n, double capacity)
{
    if (!(capacity > 0) || !(n > 0) || r->experts <= 0) return 0;
    if (r->kind == MOE_ROUTE_EVEN) return fmax(0, 1 - capacity);
    int per = r->experts / (r->ep > 0 ? r->ep : 1);
    double c = capacity * n / r->experts, dropped = 0;
    for (int e = 0; e < r->experts; e++) {
        double p = r->kind == MOE_ROUTE_SKEWED ? pow(e + 1.0, -r->alpha) / r->zipf_sum
                                               : r->q[e / per] / per;
        double mu = n * p, sigma = sqrt(n * p * (1 - p));
        double excess = sigma > 0 ? sigma * gsl_ran_ugaussian_pdf((c - mu) / sigma) +
                                        (mu - c) * gsl_cdf_ugaussian_Q((c - mu) / sigma)
                                  : fmax(0, mu - c);
        dropped += fmax(0, excess);
    }
    return fmin(1, dropped / n);
}

int moe_dispatch_parse(const char *text, moe_dispatch *d)
{
    if (strcmp(text, "alltoall") == 0) return *d = MOE_DISPATCH_ALLTOALL, 0;
    if (strcmp(text, "deepep") == 0) return *d = MOE_DISPATCH_DEDUP, 0;
    return -1;
}

const char *moe_dispatch_name(moe_dispatch d)
{
    return d == MOE_DISPATCH_DEDUP ? "deepep" : "alltoall";
}

/* C(a - b, k) / C(a, k): the chance that k of a items drawn without replacement miss b given
 * ones. */
static double miss_all(double a, double b, int k)
{
    double p = 1;
    for (int i = 0; i < k && p > 0; i++) p *= a - b - i > 0 ? (a - b - i) / (a - i) : 0;
    return p;
}

double moe_remote_nodes(const model_spec *m, int nodes)
{
    if (nodes <= 1 || m->experts < 1) return 0;
    int groups = m->moe_groups, whole = groups > 0 && groups % nodes == 0;
    double miss = whole ? miss_all(groups, (double)groups / nodes, m->moe_group_topk)
                        : miss_all(m->experts, (double)m->experts / nodes, m->experts_per_token);
    return (nodes - 1) * (1 - miss);
}

double moe_exchange_ms(const cluster_spec *c, const comm_group *g, int nodes, const model_spec *m,
                       moe_dispatch d, double tokens, double elem_bytes)
{
    int n = g->n, k = m->experts_per_token;
    double copy = tokens * (double)m->hidden * elem_bytes; /* a copy of every token */
    if (n <= 1) return 0;
    if (!g->spans_nodes || nodes <= 1) return comm_coll_ms(c, COLL_ALL_TO_ALL, g, copy * k);
    double q = (double)n / nodes;
    double remote = k * (n - q) / n, nvlink = k * (q - 1) / n;
    if (d == MOE_DISPATCH_DEDUP) /* once a node, then forwarded inside it */
        remote = moe_remote_nodes(m, nodes), nvlink += k * (n - q) / n * (q - 1) / q;
    double nic_bw = comm_busbw_gbps(c, COLL_ALL_TO_ALL, g) * 1e9;
    double node_bw = c->intra_gbit / 8 * c->coll_eff[SCOPE_INTRA][COLL_ALL_TO_ALL] * 1e9;
    return (n - 1) * c->inter_latency_us / 1e3 +
           fmax(copy * remote / nic_bw, copy * nvlink / node_bw) * 1e3;
}

int moe_routing_parse(const char *text, moe_route_kind *kind, double *alpha)
{
    if (strcmp(text, "uniform") == 0) return *kind = MOE_ROUTE_UNIFORM, *alpha = 0, 0;
    if (strcmp(text, "even") == 0) return *kind = MOE_ROUTE_EVEN, *alpha = 0, 0;
    if (strncmp(text, "skewed:", 7) != 0) return -1;
    char *end;
    double a = strtod(text + 7, &end);
    if (end == text + 7 || *end || !(a >= 0 && a <= 100)) return -1;
    *kind = MOE_ROUTE_SKEWED, *alpha = a;
    return 0;
}

const char *moe_routing_name(moe_route_kind kind, double alpha, char *buf, size_t cap)
{
    if (kind == MOE_ROUTE_SKEWED) snprintf(buf, cap, "skewed:%g", alpha);
    else snprintf(buf, cap, "%s", kind == MOE_ROUTE_HISTOGRAM ? "histogram"
                                  : kind == MOE_ROUTE_EVEN    ? "even"
                                                              : "uniform");
    return buf;
}

typedef struct hist_read {
    double *counts;
    int max, n, col;
} hist_read;

static dp_status hist_header(void *ctx, const csv_row *row, dp_err *err)
{
    hist_read *h = ctx;
    static const csv_column cols[1] = {{"tokens", 1}};
    return csv_header_map(row, cols, 1, &h->col, err);
}

static dp_status hist_row(void *ctx, const csv_row *row, dp_err *err)
{
    hist_read *h = ctx;
    const char *text = row->fields[h->col];
    char *end;
    double v = strtod(text, &end);
    if (end == text || *end)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: field \"tokens\" is \"%.40s\", not a number",
                       row->path, row->line, text);
    if (!(v >= 0) || !(v <= MOE_COUNT_MAX))
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: field \"tokens\" is %s: a count from 0 to %g",
                       row->path, row->line, text, MOE_COUNT_MAX);
    if (h->n >= h->max)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: more than %d experts' counts", row->path,
                       row->line, h->max);
    h->counts[h->n++] = v;
    return DP_OK;
}

dp_status moe_histogram_read(const char *path, double *counts, int max, int *n, dp_err *err)
{
    hist_read h = {counts, max, 0, 0};
    dp_status st = csv_read_file(path, 1, hist_header, hist_row, &h, err);
    *n = st == DP_OK ? h.n : 0;
    return st;
}
