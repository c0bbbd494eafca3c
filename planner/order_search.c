#include "order_search.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../scheduler/plan.h"

#define FEATURES 4

/* k-means (Lloyd) on n points of FEATURES values, seeded with the points at the quantiles of their
 * sum. Clusters are numbered by ascending centroid sum and empty ones dropped; returns how many
 * there are. */
static int kmeans(const double (*x)[FEATURES], int n, int k, int *label)
{
    int *by_sum = malloc((size_t)n * sizeof *by_sum);
    double (*c)[FEATURES] = malloc((size_t)k * sizeof *c);
    double *key = malloc((size_t)n * sizeof *key);
    int *count = calloc((size_t)k, sizeof *count), *rank = malloc((size_t)k * sizeof *rank);
    if (!by_sum || !c || !key || !count || !rank) {
        free(by_sum), free(c), free(key), free(count), free(rank);
        return 0;
    }
    for (int i = 0; i < n; i++) {
        by_sum[i] = i;
        key[i] = 0;
        for (int f = 0; f < FEATURES; f++) key[i] += x[i][f];
    }
    for (int a = 1; a < n; a++) /* insertion sort: n is a few dozen */
        for (int b = a; b > 0 && key[by_sum[b]] < key[by_sum[b - 1]]; b--) {
            int t = by_sum[b];
            by_sum[b] = by_sum[b - 1], by_sum[b - 1] = t;
        }
    for (int j = 0; j < k; j++) memcpy(c[j], x[by_sum[(2 * j + 1) * n / (2 * k)]], sizeof c[j]);
    for (int i = 0; i < n; i++) label[i] = -1;
    for (int round = 0; round < 100; round++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            int best = 0;
            double bd = INFINITY;
            for (int j = 0; j < k; j++) {
                double d = 0;
                for (int f = 0; f < FEATURES; f++) d += (x[i][f] - c[j][f]) * (x[i][f] - c[j][f]);
                if (d < bd) bd = d, best = j;
            }
            changed |= label[i] != best;
            label[i] = best;
        }
        if (!changed) break;
        memset(c, 0, (size_t)k * sizeof *c);
        memset(count, 0, (size_t)k * sizeof *count);
        for (int i = 0; i < n; i++) {
            count[label[i]]++;
            for (int f = 0; f < FEATURES; f++) c[label[i]][f] += x[i][f];
        }
        for (int j = 0; j < k; j++)
            for (int f = 0; f < FEATURES && count[j]; f++) c[j][f] /= count[j];
    }
    /* number the non-empty clusters by ascending centroid sum */
    memset(count, 0, (size_t)k * sizeof *count);
    for (int i = 0; i < n; i++) count[label[i]]++;
    int used = 0;
    for (int j = 0; j < k; j++) {
        rank[j] = -1;
        if (!count[j]) continue;
        double sj = 0;
        for (int f = 0; f < FEATURES; f++) sj += c[j][f];
        int r = 0;
        for (int q = 0; q < k; q++) {
            if (!count[q] || q == j) continue;
            double sq = 0;
            for (int f = 0; f < FEATURES; f++) sq += c[q][f];
            r += sq < sj || (sq == sj && q < j);
        }
        rank[j] = r;
        used++;
    }
    for (int i = 0; i < n; i++) label[i] = rank[label[i]];
    free(by_sum), free(c), free(key), free(count), free(rank);
    return used;
}

/* The next permutation of p[0..n) in lexicographic order; 0 after the last. */
static int next_permutation(int *p, int n)
{
    int i = n - 2;
    while (i >= 0 && p[i] >= p[i + 1]) i--;
    if (i < 0) return 0;
    int j = n - 1;
    while (p[j] <= p[i]) j--;
    int t = p[i];
    p[i] = p[j], p[j] = t;
    for (int a = i + 1, b = n - 1; a < b; a++, b--) t = p[a], p[a] = p[b], p[b] = t;
    return 1;
}

/* Appends order o (n indices) to perm unless it is there already. */
static void add_unique(int *perm, int *count, const int *o, int n)
{
    for (int c = 0; c < *count; c++)
        if (memcmp(perm + (size_t)c * n, o, (size_t)n * sizeof *o) == 0) return;
    if (*count < ORDER_MAX_CANDIDATES) memcpy(perm + (size_t)(*count)++ * n, o, (size_t)n * sizeof *o);
}

int order_candidates(const mb_list *l, const stage_model *sm, int which, int **perm_out)
{
    int n = l->n_mb, count = 0;
    *perm_out = NULL;
    int *perm = malloc((size_t)ORDER_MAX_CANDIDATES * (size_t)(n ? n : 1) * sizeof *perm);
    int *o = malloc((size_t)(n ? n : 1) * sizeof *o);
    if (!perm || !o) {
        free(perm), free(o);
        return 0;
    }
    for (int k = 0; k < n; k++) o[k] = k;
    add_unique(perm, &count, o, n); /* the planned order, always first */
    if (which & ORDER_SEARCH_FIXED)
        for (int kind = 1; kind < 4; kind++) {
            for (int k = 0; k < n; k++)
                o[k] = kind == 1   ? n - 1 - k                          /* descending */
                       : kind == 2 ? (k % 2 ? k / 2 : n - 1 - k / 2)    /* large, small, ... */
                                   : (k % 2 ? n - 1 - k / 2 : k / 2);   /* small, large, ... */
            add_unique(perm, &count, o, n);
        }
    int k_clusters = n > 20 ? 3 : 4;
    if ((which & ORDER_SEARCH_CLUSTERS) && n > 1 && n <= k_clusters) { /* every permutation */
        for (int k = 0; k < n; k++) o[k] = k;
        do add_unique(perm, &count, o, n);
        while (next_permutation(o, n));
    } else if (which & ORDER_SEARCH_CLUSTERS && n > 1) {
        double (*x)[FEATURES] = malloc((size_t)n * sizeof *x);
        int *label = malloc((size_t)n * sizeof *label);
        mb_cost *c = malloc(sizeof *c);
        int ok = x && label && c;
        for (int k = 0; ok && k < n; k++) {
            const microbatch *m = &l->mb[k];
            cost_shape s = mb_shape(m);
            dp_err err = {0};
            if (stage_model_cost(sm, &s, c, &err) != DP_OK) ok = 0;
            else {
                int last = sm->pp - 1;
                x[k][0] = c->fwd_ms[0], x[k][1] = c->fwd_ms[last];
                x[k][2] = c->bwd_ms[0], x[k][3] = c->bwd_ms[last];
            }
        }
        int used = ok ? kmeans((const double(*)[FEATURES])x, n, k_clusters, label) : 0;
        int p[4] = {0, 1, 2, 3};
        if (used > 1)
            do {
                int at = 0;
                for (int q = 0; q < used; q++)
                    for (int k = 0; k < n; k++)
                        if (label[k] == p[q]) o[at++] = k;
                add_unique(perm, &count, o, n);
            } while (next_permutation(p, used));
        free(x), free(label), free(c);
    }
    free(o);
    *perm_out = perm;
    return count;
}

dp_status order_search(const stage_model *sm, const schedule *sched, const sim_config *cfg, sim *s,
                       int which, mb_list *l, order_result *res, dp_err *err)
{
    int n = l->n_mb;
    order_result none;
    if (!res) res = &none;
    memset(res, 0, sizeof *res);
    res->candidates = 1;
    if (n < 2) return DP_OK;
    int *perm = NULL;
    int count = order_candidates(l, sm, which, &perm);
    microbatch *orig = malloc((size_t)n * sizeof *orig);
    if (!count || !orig) {
        free(perm), free(orig);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    memcpy(orig, l->mb, (size_t)n * sizeof *orig);
    schedule_ctx sctx = {sm};
    int best = 0, best_fits = 0;
    double best_ms = 0, best_peak = 0;
    dp_status st = DP_OK;
    for (int c = 0; c < count && st == DP_OK; c++) {
        for (int k = 0; k < n; k++) l->mb[k] = orig[perm[(size_t)c * n + k]];
        plan_iter pi;
        plan_iter_init(&pi);
        sim_iter_result ir;
        st = plan_iter_from_mbs(&pi, 0, l, sm, err);
        if (st == DP_OK) st = sched->build(&sctx, &pi, err);
        if (st == DP_OK) st = sim_iteration(s, cfg, &pi, 0, NULL, &ir, err);
        plan_iter_release(&pi);
        if (st != DP_OK) break;
        double ms = (double)ir.makespan_ns / 1e6, peak = 0;
        for (int d = 0; d < cfg->pp; d++) peak = fmax(peak, ir.peak_mb[d]);
        int fits = !ir.oom;
        if (c == 0 || (fits && (!best_fits || ms < best_ms)) || (!fits && !best_fits && peak < best_peak))
            best = c, best_ms = ms, best_fits = fits, best_peak = peak;
    }
    if (st != DP_OK) best = 0;
    for (int k = 0; k < n; k++) l->mb[k] = orig[perm[(size_t)best * n + k]];
    res->candidates = count;
    res->best = best;
    res->best_ms = best_ms;
    res->fits = best_fits;
    free(perm), free(orig);
    return st;
}
