/*
 * dpsim sweep — a grid over plan parameters, one CSV row per point, points in parallel
 * (planner/sweep.h runs them and keeps the file).
 *
 * Under `mpirun -np N dpsim sweep ...` (detected by MPI's launcher environment) the points are
 * split across the N ranks (point i on rank i mod N); every rank sends its rows to rank 0, which
 * writes the file. MPI is the distributed engine; the local worker pool runs inside each rank.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "../planner/sweep.h"
#include "cli.h"

static const char SWEEP_USAGE[] = "dpsim sweep --grid 'KEY=V1,V2 KEY=V1,...' -o sweep.csv [PLAN OPTIONS]";

/* Ranks other than 0 send their rows to rank 0 ("" for a point without a row, so that rank 0
 * never waits for it). */
static void emit_mpi(void *ctx, const char *row)
{
    (void)ctx;
    if (!row) row = "";
    MPI_Send(row, (int)strlen(row) + 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
}

/* Copies stdin into a new temporary trace file, whose path goes to path. */
static dp_status spool_stdin(char *path, size_t cap, dp_err *err)
{
    snprintf(path, cap, "/tmp/dpsim-stdin-XXXXXX"); /* read as CSV, as stdin is */
    int fd = mkstemp(path);
    if (fd < 0) {
        path[0] = '\0';
        return dp_fail(err, DP_ERR_IO, "cannot create a temporary file for --trace -: %s",
                       strerror(errno));
    }
    char buf[1 << 16];
    ssize_t got;
    dp_status st = DP_OK;
    while (st == DP_OK && (got = read(STDIN_FILENO, buf, sizeof buf)) != 0) {
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) st = dp_fail(err, DP_ERR_IO, "--trace -: reading stdin: %s", strerror(errno));
        for (ssize_t at = 0; st == DP_OK && at < got;) {
            ssize_t w = write(fd, buf + at, (size_t)(got - at));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) st = dp_fail(err, DP_ERR_IO, "%s: %s", path, strerror(errno));
            else at += w;
        }
    }
    if (close(fd) != 0 && st == DP_OK) st = dp_fail(err, DP_ERR_IO, "%s: %s", path, strerror(errno));
    if (st != DP_OK) unlink(path), path[0] = '\0';
    return st;
}

/* Progress of a sweep on stderr: a bar redrawn on a terminal; elsewhere (a log, CI) a line every
 * SWEEP_PROGRESS_EVERY_S seconds and at the end, each with the points done and an ETA from the
 * time per point so far. */
#define SWEEP_PROGRESS_EVERY_S 10
typedef struct sweep_progress_state {
    time_t t0, last_line;
    int tty;
} sweep_progress_state;

static void sweep_progress(void *ctx, long done, long total)
{
    sweep_progress_state *ps = ctx;
    time_t now = time(NULL);
    double el = difftime(now, ps->t0), eta = done > 0 ? el / done * (double)(total - done) : 0;
    if (ps->tty) { /* through the notes' sink, so that a note after it starts a line */
        char bar[128];
        int width = 30, fill = total ? (int)(width * done / total) : width, at = 0;
        bar[at++] = '[';
        for (int i = 0; i < width; i++) bar[at++] = i < fill ? '#' : '.';
        snprintf(bar + at, sizeof bar - (size_t)at, "] %ld/%ld points, ETA %dm%02ds", done, total,
                 (int)eta / 60, (int)eta % 60);
        cli_note_sink(NULL, done == total ? DP_NOTE_PROGRESS_END : DP_NOTE_PROGRESS, bar);
        return;
    }
    if (done > 0 && done < total && difftime(now, ps->last_line) < SWEEP_PROGRESS_EVERY_S) return;
    if (done == 0) { ps->last_line = now; return; } /* the start line is the caller's */
    ps->last_line = now;
    fprintf(stderr, "dpsim sweep: %ld/%ld points done, %.0f s so far", done, total, el);
    if (done < total) fprintf(stderr, ", ETA %dm%02ds", (int)eta / 60, (int)eta % 60);
    fputc('\n', stderr);
}

/* Reads the resume state on every rank, then rank 0 creates the output and says what runs: 0, or
 * the exit status of the failure (printed; under mpirun every rank aborted). */
static int sweep_start(sweep *s, int mpi)
{
    dp_err err = {0};
    if (sweep_prepare(s, &err) != DP_OK) {
        int rc = cli_fail("sweep", &err);
        if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
        return rc;
    }
    /* every rank has read the resume state before rank 0 creates the file (a rank reading it
     * just after its creation saw an empty file) */
    if (mpi) MPI_Barrier(MPI_COMM_WORLD);
    if (s->rank != 0) return 0;
    if (sweep_create(s, &err) != DP_OK) {
        int rc = cli_fail("sweep", &err);
        if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
        return rc;
    }
    if (s->gpus)
        fprintf(stderr, "dpsim sweep: %ld points of %lld GPUs (of %ld in the grid), %ld already in %s\n",
                s->kept, (long long)s->gpus, s->grid->points, s->skipped, s->out);
    else
        fprintf(stderr, "dpsim sweep: %ld points, %ld already in %s\n", s->grid->points, s->skipped,
                s->out);
    if (mpi) fprintf(stderr, "dpsim sweep: %d MPI ranks\n", s->ranks);
    return 0;
}

int cmd_sweep(int argc, char **argv)
{
    const char *cmd = "sweep", *out = NULL, *grid_arg = "";
    plan_request p;
    plan_request_default(&p);
    int64_t jobs = planner_jobs_default(), gpus = 0;
    cli_opts t;
    cli_opts_init(&t, cmd, SWEEP_USAGE,
                  "Runs every point of a grid over plan options (the same names as the\n"
                  "options, without --) and writes one CSV row per point with every metric. Points\n"
                  "run in parallel; an existing output file is resumed; under mpirun the points are\n"
                  "split across the ranks.");
    cli_opt_string(&t, "grid", 'g', &grid_arg, "SPEC", NULL,
                   "e.g. 'max-seqlen=512,1024,2048 batching=packing,dynamic'");
    cli_opt_string(&t, "output", 'o', &out, "FILE", "required", "CSV to write or resume");
    cli_opt_int64(&t, "jobs", 'J', &jobs, "N", 1, 1024, "the machine's cores",
                  "parallel workers per process");
    cli_opt_int64(&t, "gpus", 'G', &gpus, "N", 1, 1 << 24, "all",
                  "keep only the points whose layout uses exactly N GPUs\n"
                  "(tp x cp x pp x dp), e.g. with grids over tp, pp and dp");
    plan_request_options(&t, &p);
    t.defer_only_with = 1; /* a grid may set what an option applies with */
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    plan_request_parsed(&t, &p);
    cli_opts_release(&t);
    if (r != 0) return r == 1 ? 0 : r;
    if (!out) return cli_usage_error(cmd, SWEEP_USAGE, "--output is required");
    dp_err err = {0};
    char config_path[4200];
    planner_config_path(out, config_path, sizeof config_path);
    out_role outs[] = {{"-o", out}, {"-o's configuration", config_path}};
    if (planner_check_outputs(&p, NULL, 0, outs, 2, &err) != DP_OK)
        return cli_usage_error(cmd, SWEEP_USAGE, "%s", err.msg);
    static sweep_grid g; /* large: not on the stack */
    if (sweep_grid_parse(&p, grid_arg, &g, cmd, SWEEP_USAGE) != 0) return EXIT_USAGE;
    int rank, size, mpi = cli_mpi_begin(&argc, &argv, &rank, &size);
    /* --trace -: stdin is read once, here, into a file every worker reads (a worker reading stdin
     * would take what the one before left) */
    char spool[64] = "";
    if (p.trace && strcmp(p.trace, "-") == 0) {
        if (mpi) {
            MPI_Finalize();
            return cli_usage_error(cmd, SWEEP_USAGE, "--trace - under mpirun: only rank 0 reads "
                                   "stdin\nhint: give the trace as a file");
        }
        if (spool_stdin(spool, sizeof spool, &err) != DP_OK) return cli_fail(cmd, &err);
        p.trace = spool;
    }
    static sweep s;
    s = (sweep){.base = &p, .grid = &g, .out = out, .gpus = gpus,
                .stdin_spool = spool[0] ? spool : NULL, .rank = rank, .ranks = size, .fd = -1};
    int rc = sweep_start(&s, mpi);
    if (rc != 0) goto out;
    sweep_progress_state ps = {time(NULL), 0, cli_stderr_is_tty()};
    if (sweep_run(&s, (int)jobs, rank == 0 ? sweep_progress : NULL, &ps,
                  rank == 0 ? sweep_emit_local : emit_mpi, &s) != 0)
        rc = EXIT_RUNTIME;
    if (mpi) {
        static char row[SWEEP_ROW_MAX];
        for (long k = 0; rank == 0 && k < s.remote; k++) { /* rows from the other ranks */
            MPI_Recv(row, SWEEP_ROW_MAX, MPI_CHAR, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            sweep_append(&s, row);
        }
        MPI_Finalize();
    }
    if (rank == 0 && sweep_finish(&s, &err) != DP_OK) rc = cli_fail(cmd, &err);
out:
    sweep_release(&s);
    if (spool[0]) unlink(spool);
    return rc;
}
