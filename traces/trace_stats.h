/*
 * trace_stats.h — describing a trace: length summaries, per-task summaries, log2 histograms.
 *
 * Percentiles come from GSL (gsl_stats_quantile_from_sorted_data: linear interpolation between
 * order statistics, the same definition as numpy's default). "total" is input_len + target_len.
 */
#ifndef TRACE_STATS_H
#define TRACE_STATS_H

#include <stdio.h>

#include "trace.h"

/* Histogram bins: bin 0 holds length 0, bin b >= 1 holds [2^(b-1), 2^b). */
#define TRACE_HIST_BINS 33

typedef struct len_summary {
    double mean;                  /* tokens */
    double p10, p50, p90, p99;    /* tokens, interpolated percentiles */
    int64_t min, max;             /* tokens (total = input + target can pass 2^31) */
} len_summary;

typedef struct trace_task_stats {
    uint32_t task;    /* index into trace.tasks */
    const char *name; /* trace.tasks[task], borrowed */
    size_t count;
    len_summary input, target, total;
} trace_task_stats;

typedef struct trace_stats {
    size_t count;
    len_summary input, target, total;
    trace_task_stats *tasks; /* n_tasks entries, most samples first (ties by name) */
    size_t n_tasks;
    size_t hist_input[TRACE_HIST_BINS], hist_target[TRACE_HIST_BINS]; /* sample counts */
} trace_stats;

dp_status trace_stats_compute(const trace *t, trace_stats *s, dp_err *err);
void trace_stats_release(trace_stats *s);

/* Lower bound of histogram bin b, in tokens (0, 1, 2, 4, ...). */
int64_t trace_hist_lo(int b);

/* Human-readable report with #-prefixed metadata, a units row, the per-task table (top max_tasks
 * by count; 0 = all) and the histogram drawn with bars. */
void trace_stats_print(const trace *t, const trace_stats *s, const char *name, size_t max_tasks,
                       FILE *fp);

/* The same numbers as one JSON object (every task). Returns a malloc'd string or NULL. */
char *trace_stats_json(const trace *t, const trace_stats *s, const char *name);

#endif /* TRACE_STATS_H */
