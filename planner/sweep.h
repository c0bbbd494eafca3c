/*
 * sweep.h — a grid over plan options, one CSV row per point: the grid, the points' rows, and an
 * output file that a sweep resumes and never mixes with another study's.
 *
 * A grid is "KEY=V1,V2 KEY=V1,..." with the plan options' long names as keys (request.h; the
 * `analytic` flag too): every value is checked as the option checks it, once, when the grid is
 * parsed; a key that lists one value twice ("2,02", "true,1") is refused, since every point would
 * run twice. Points are numbered with the last key varying fastest; a row's first columns are its
 * point's values as given (a value with a double quote is quoted as RFC 4180 says), then
 * SWEEP_METRIC_COLUMNS.
 *
 * The output file: a fresh one gets the header and, beside it, OUT.config (every option that is not
 * a grid key, the input files' content hashes, dpsim's version); an existing one is resumed only
 * when both match, and its points with a row are not run again (a value written another way, "1"
 * for "true", is the same value). Rows are appended whole, one write each, while the file is
 * locked (one sweep per file), and rewritten in grid order at the end, through a temporary and a
 * rename. State after a failure: the file holds only whole rows, and a resume runs the rest; a
 * point whose worker died has no row and is retried.
 *
 * Distributed runs (dpsim sweep under mpirun) split the points by rank (point i on rank
 * i mod ranks); the caller moves rows from the other ranks to rank 0's sweep_append.
 */
#ifndef PLANNER_SWEEP_H
#define PLANNER_SWEEP_H

#include <stddef.h>

#include "../common/dp.h"
#include "request.h"

#define SWEEP_MAX_KEYS 8
#define SWEEP_MAX_VALUES 32
#define SWEEP_MAX_POINTS 1000000
#define SWEEP_SPEC_MAX 4096 /* the grid's text, at most */
#define SWEEP_ROW_MAX 16384 /* a row, at most (a key of a whole grid, quoted, and its metrics) */

extern const char *const SWEEP_METRIC_COLUMNS;

typedef struct sweep_grid {
    char text[SWEEP_SPEC_MAX];                       /* the spec, cut in place */
    char *keys[SWEEP_MAX_KEYS];
    char *values[SWEEP_MAX_KEYS][SWEEP_MAX_VALUES];  /* as given (the CSV's key columns) */
    const char *canon[SWEEP_MAX_KEYS][SWEEP_MAX_VALUES]; /* as the option table prints them */
    char store[SWEEP_SPEC_MAX * 2];                  /* canon's text */
    size_t used;
    int nvalues[SWEEP_MAX_KEYS];
    int nkeys;
    long points;
} sweep_grid;

/* Parses spec into g and checks every value against base's option table, and that each model and
 * hw value names a preset or a readable file of one. 0, or EXIT_USAGE after a usage error naming
 * the key and value (printed as cmd's, with usage). */
int sweep_grid_parse(const plan_request *base, const char *spec, sweep_grid *g, const char *cmd,
                     const char *usage);

/* Point i's key: its values as CSV cells, each followed by a comma (a row's first columns). Returns
 * its length. */
size_t sweep_point_key(const sweep_grid *g, long i, char *out, size_t cap);

/* base with point i's values set. */
void sweep_point_request(const plan_request *base, const sweep_grid *g, long i, plan_request *p);

/* Runs point i (set-up, study) and formats its CSV row, without a newline, into row (cap at least
 * SWEEP_ROW_MAX). A point that fails has a row saying why in its error column — but one that
 * could not be run at all (an I/O error: a file that cannot be read; one that is malformed, as a
 * grid's trace that is no trace; out of memory), which says nothing of the configuration, gets no
 * row: row is SWEEP_NO_ROW and the message instead, which sweep_append counts (the sweep then
 * fails naming it), and a resume runs the point again. */
#define SWEEP_NO_ROW '\x01'
void sweep_run_point(const plan_request *base, const sweep_grid *g, long i, char *row, size_t cap);
void sweep_run_point(const plan_request *base, const sweep_grid *g, long i, char *row, size_t cap);

/* The point of a row (its first columns, quoted or not), or -1 when it is none of g's. */
long sweep_point_of_row(const plan_request *base, const sweep_grid *g, const char *row);

/* A sweep into one output file. The caller fills the first fields, sweep_prepare the rest. */
typedef struct sweep {
    const plan_request *base; /* trace "-" already copied to a file (stdin_spool) */
    const sweep_grid *grid;
    const char *out;
    long long gpus;           /* > 0: only the points whose layout uses that many GPUs */
    const char *stdin_spool;  /* the file --trace - was copied to (its content is hashed into the
                               * configuration, its name is not), or NULL */
    int rank, ranks;          /* this process's share of the points: i mod ranks == rank */
    /* filled in by sweep_prepare: */
    char header[SWEEP_ROW_MAX];
    char config[8192];
    char config_path[4200];
    unsigned char *point_done; /* per point: 1 when the output has its row */
    long kept;                /* points of the grid that the --gpus filter keeps */
    long skipped;             /* of those, the ones already in the output */
    long *todo, n_todo;       /* this rank's points to run */
    long remote;              /* rank 0: rows to come from the other ranks */
    /* the output, rank 0 (sweep_create): */
    int fd;
    int failed, errno_;       /* an append failed (the rows after it were dropped) */
    long lost;                /* points that could not be run (SWEEP_NO_ROW): no row */
    char lost_why[DP_ERR_MSG_MAX]; /* the first of them */
} sweep;

/* Every rank: reads the output's rows (a resume), refuses an output of other columns or of another
 * configuration (DP_ERR_INVALID, with a hint), and lists this rank's points. */
dp_status sweep_prepare(sweep *s, dp_err *err);

/* Rank 0, after every rank has prepared: opens and locks the output (DP_ERR_IO when another sweep
 * holds it), and writes the header and OUT.config when it is fresh. */
dp_status sweep_create(sweep *s, dp_err *err);

/* Runs this rank's points in `jobs` forked workers; each row goes to emit (rank 0: sweep_append
 * through sweep_emit_local), NULL for a point whose worker died. progress (optional) is told
 * (done, total) once before the first point and after each. 0, or -1 when the pool could not
 * run. */
int sweep_run(sweep *s, int jobs, void (*progress)(void *ctx, long done, long total),
              void *progress_ctx, void (*emit)(void *ctx, const char *row), void *ctx);

/* Rank 0: appends one row (NULL or "" are skipped: a point without a row; SWEEP_NO_ROW is counted
 * in lost). A failing write sets failed; the file then keeps the whole rows before it. */
void sweep_append(sweep *s, const char *row);
/* An emit callback for sweep_run that appends (ctx is the sweep). */
void sweep_emit_local(void *ctx, const char *row);

/* Rank 0: reports a failed append (DP_ERR_IO), or rewrites the rows in grid order; closes. */
dp_status sweep_finish(sweep *s, dp_err *err);

/* Frees what sweep_prepare allocated and closes the output; safe after any failure. */
void sweep_release(sweep *s);

#endif /* PLANNER_SWEEP_H */
