/* benchutil.h — timing helpers for the benchmarks: wall clock, min/median of repeats. */
#ifndef BENCHUTIL_H
#define BENCHUTIL_H

#include <stdlib.h>
#include <time.h>

static inline double bench_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v in place; returns the median (v[0] is then the minimum). */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, bench_cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Value at quantile q of sorted v. */
static inline double bench_quantile(const double *v, int n, double q)
{
    int i = (int)(q * (n - 1) + 0.5);
    return v[i];
}

#endif /* BENCHUTIL_H */
