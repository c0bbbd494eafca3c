/*
 * explain.h — the assumptions behind an answer (`dpsim explain`): the run a request describes,
 * then the same run again with each constant it used that was not measured on the user's system
 * (models/assumptions.h: fitted elsewhere, read off another GPU's benchmark, inferred, assumed)
 * scaled down and up by a share (10% by default), everything else as it was, the schedule fixed at
 * the one the base run used. Each row says how far the throughput moved.
 *
 * Cost: 1 + 2 x (the constants that apply) studies of the request; a long request (the whole
 * trace, thousands of GPUs) takes that many times as long as `dpsim sim` (--iterations bounds it).
 *
 * Ownership: the result is a plain struct, nothing to free. Errors: the base run's set-up and
 * planning errors as `sim`'s (DP_ERR_INVALID for the options); a perturbed run that fails or does
 * not fit is a row marked so, not an error.
 */
#ifndef PLANNER_EXPLAIN_H
#define PLANNER_EXPLAIN_H

#include "../models/assumptions.h"
#include "request.h"

typedef struct explain_row {
    assumption_id id;
    char value[640];         /* the value the base run used and its source */
    double tps[2];           /* tokens/s with the constant at (1 - share) and (1 + share) */
    double change[2];        /* tps over the base's, less 1; NAN where that run failed */
    int fits[2];             /* 0: that run did not fit (or failed: why says) */
    char why[2][160];
} explain_row;

typedef struct explain_result {
    double share;            /* the relative change tried */
    double base_tps, base_mfu;
    int base_fits;
    char cost_source[4200];  /* what priced the base run */
    char schedule[32];       /* the schedule every run used */
    long long gpus;
    explain_row row[ASSUME_COUNT]; /* those that apply, the largest move first */
    int n;
    double worst_sum;        /* the sum over rows of the worse of their two moves (fitted,
                              * inferred, derived and assumed constants; benchmark figures
                              * left out): an upper bound if every such constant were off the
                              * wrong way at once */
} explain_result;

/* Runs p (its --schedule auto resolved first) and its perturbations; share in (0, 1). progress,
 * optional, is told after each run (done of total). */
dp_status explain_run(const plan_request *p, double share, explain_result *out,
                      void (*progress)(void *ctx, size_t done, size_t total), void *ctx,
                      dp_err *err);

#endif /* PLANNER_EXPLAIN_H */
