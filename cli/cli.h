/*
 * cli.h — the dpsim driver: the subcommands' entry points and what they share in printing
 * (failures, progress lines, warnings). A subcommand declares its option table
 * (common/options.h) with the request's rows (planner/request.h), fills a request, calls the
 * planner, and prints the result. Exit codes (common/options.h): 0 success, 1 runtime failure
 * (bad input file, infeasible plan, I/O), 2 usage error.
 */
#ifndef CLI_H
#define CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/dp.h"
#include "../common/options.h"
#include "../planner/request.h"
#include "../planner/setup.h"
#include "../planner/tune_run.h"


/* Prints "dpsim CMD: error: message" (multi-line messages keep their hint lines); returns 1. */
int cli_fail(const char *cmd, const dp_err *err);

/* 1 when stderr is a terminal (progress bars are drawn only then). */
int cli_stderr_is_tty(void);

/* The library's notes (common/dp.h dp_note) on stderr, set by main: a line each; a progress note
 * rewritten in place on a terminal (a line each elsewhere), a line after it starting on its own. */
void cli_note_sink(void *ctx, dp_note_kind kind, const char *text);

/* Under mpirun (detected by MPI's launcher environment: OpenMPI's or a PMI's), initialises MPI and
 * fills *rank and *size, returning 1; else *rank 0, *size 1, returning 0. The caller ends MPI
 * (MPI_Finalize) where it returned 1. sweep and tune spread their points this way. */
int cli_mpi_begin(int *argc, char ***argv, int *rank, int *size);

/* Warns on stderr, once per process, when a run's whole trace was one global batch smaller than
 * asked (study_result.short_batch_tokens): its figures are not those of the batch asked for. */
struct study_result;
void cli_warn_short_trace(const struct study_result *r, int64_t global_tokens);

/* A study_opts.progress callback: "\rWHAT: 42.0% of the trace, ETA 12 s" on stderr (ctx is the
 * WHAT string; the ETA from the elapsed time since the first call for that ctx). */
void cli_progress(void *ctx, size_t done, size_t total);

/* Subcommand entry points: argc/argv start at the subcommand name. */
int cmd_trace(int argc, char **argv);
int cmd_plot(int argc, char **argv);

int cmd_plan(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_validate(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_sweep(int argc, char **argv);

int cmd_models(int argc, char **argv);
int cmd_cost(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_explain(int argc, char **argv);

#endif /* CLI_H */
