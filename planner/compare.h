/*
 * compare.h — dpsim compare's study: every (batching, schedule) pair on one set-up, or each
 * batching at its own tuned configuration (tune_run.h), with the speed-ups and the rows the
 * summary lines compare. The caller prints them (a table, JSON) and draws the figures.
 *
 * Ownership: compare_rows_release frees the rows' study results and the array.
 */
#ifndef PLANNER_COMPARE_H
#define PLANNER_COMPARE_H

#include "setup.h"
#include "study.h"

typedef struct compare_row {
    const char *batching, *schedule; /* the caller's names (their lists outlive the rows) */
    char tuned[200];  /* tuned: the configuration the row ran with */
    study_result r;
    double speedup;   /* over packing with the baseline schedule (tuned: its own); NAN: none */
    dp_status st;     /* DP_OK: r holds the run; else error says why */
    char error[DP_ERR_MSG_MAX];
} compare_row;

/* How the rows are run (all zero: every pair, quietly). */
typedef struct compare_opts {
    const char *const *batchings, *const *schedules;
    int nb, ns;
    int tuned;            /* 1: a row per batching at its best configuration of *gpus GPUs */
    int gpus;             /* tuned: GPUs to search (0: the cluster's, else a node's); set to
                           * those searched */
    int tune_iterations;  /* tuned: iterations per configuration tried */
    int jobs;             /* tuned: workers */
    /* each pair's progress within its run: called with ctx = "i/n batching + schedule" */
    void (*progress)(void *ctx, size_t done, size_t total);
    /* after each run that ran (e.g. the short-trace warning) */
    void (*ran)(const study_result *r, int64_t global_tokens);
} compare_opts;

/* Runs the rows on env's trace. *rows (n of them) are the caller's to release, also when a row
 * failed (its st and error say why). Fails only where nothing could run (a tune search that
 * cannot be set up: DP_ERR_INVALID for a layout the cluster cannot hold). */
dp_status planner_compare(const plan_request *p, const plan_env *env, compare_opts *o,
                          compare_row **rows, int *n, dp_err *err);
void compare_rows_release(compare_row *rows, int n);

/* A row that ran, fits and has a throughput. */
int compare_row_fits(const compare_row *w);

/* The fastest row that fits among DynaPipe's DP batchings (dynamic 1) or among the varlen packers
 * and balancers (dynamic 0); -1 when none. */
int compare_best_row(const compare_row *rows, int n, int dynamic);

/* The fastest row that fits among the single methods (batchings that do not choose per
 * iteration: not auto), under schedule sched when it is not NULL; -1 when none. */
int compare_best_single(const compare_row *rows, int n, const char *sched);

/* The row whose iteration the timeline figure shows: dynamic under the schedule that admits by
 * memory when compared, else dynamic, else the first. */
int compare_figure_row(const compare_row *rows, int n);

#endif /* PLANNER_COMPARE_H */
