/*
 * timeline.h — writing simulated (or measured) timelines, and the rule a timeline's row times keep
 * when one is read (timeline_row_times).
 *
 * CSV: header `iteration,stage,op,mb,start_us,end_us,replica,chunk` (the contract's columns
 * first, then replica and chunk; docs/formats.md); one row per op, times in microseconds from the start of the run.
 * Chrome trace JSON (opens in Perfetto and chrome://tracing): ops as complete events ("ph":"X",
 * pid = replica, four threads per stage: compute, send, receive, all-reduce + optimizer; args with the
 * micro-batch's shape, tokens, samples and simulated time), process and thread names ("ph":"M",
 * "replica r", "stage s compute", ...) and activation memory per stage as counters ("ph":"C",
 * MB). The CSV writes the all-reduce as op ALLREDUCE and the optimizer step as OPTIMIZER.
 * Both are sim_sink callbacks, so a run streams into them.
 */
#ifndef TIMELINE_H
#define TIMELINE_H

#include <stdio.h>

#include "../common/outfile.h"
#include "sim.h"

typedef struct timeline_out {
    out_file csv_o, chrome_o; /* written to temporaries, renamed into place by timeline_close */
    FILE *csv, *chrome;       /* their streams; NULL when not asked for */
    int chrome_first;         /* no event written yet */
    unsigned char *named;     /* Chrome processes and threads named so far */
    size_t named_cap;
    const char *csv_path, *chrome_path;
} timeline_out;

/* Either path may be NULL. On failure nothing is left open or created. */
dp_status timeline_open(timeline_out *t, const char *csv_path, const char *chrome_path, dp_err *err);
void timeline_on_op(void *ctx, const sim_op *op);
void timeline_on_mem(void *ctx, const sim_mem *m);
/* Completes both files and puts them in place; on a write failure neither replaces a file. */
dp_status timeline_close(timeline_out *t, dp_err *err);
/* Drops both (a failed run): no file is created or replaced. */
void timeline_abort(timeline_out *t);

/* Reading a timeline CSV (validate's measured runs, plot timeline): one row's start_us and end_us
 * cells into *start and *end, microseconds. A row's times are 0 <= start <= end, the op no longer
 * than a plan's op may be (COST_VALUE_MAX ms) and ending within TIMELINE_MAX_US of the run's start;
 * else DP_ERR_PARSE naming path:line and the cells (a figure off by orders of magnitude is no
 * measurement). */
#define TIMELINE_MAX_US 1e13 /* 116 days */
dp_status timeline_row_times(const char *path, long line, const char *start_cell,
                             const char *end_cell, double *start, double *end, dp_err *err);

#endif /* TIMELINE_H */
