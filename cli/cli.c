/* The dpsim subcommands' shared pieces: failures, progress, warnings, mpirun's start (cli.h). */
#include "cli.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "../planner/study.h"

int cli_fail(const char *cmd, const dp_err *err)
{
    fprintf(stderr, "dpsim %s: error: %s\n", cmd, err->msg);
    return EXIT_RUNTIME;
}

void cli_warn_short_trace(const study_result *r, int64_t global_tokens)
{
    static int told;
    if (told || r->short_batch_tokens <= 0) return;
    told = 1;
    fprintf(stderr, "dpsim: warning: the whole trace is one global batch of %lld tokens, less "
            "than the %lld asked (--global-tokens): every figure is of that smaller batch\n"
            "hint: a longer trace (dpsim trace gen -n), or --global-tokens %lld\n",
            (long long)r->short_batch_tokens, (long long)global_tokens,
            (long long)r->short_batch_tokens);
}

int cli_stderr_is_tty(void)
{
    return isatty(STDERR_FILENO);
}

void cli_note_sink(void *ctx, dp_note_kind kind, const char *text)
{
    static int open_line; /* a progress line is drawn and not ended */
    (void)ctx;
    if (kind != DP_NOTE_LINE && cli_stderr_is_tty()) {
        fprintf(stderr, "\r%-150.150s%s", text, kind == DP_NOTE_PROGRESS_END ? "\n" : "");
        open_line = kind == DP_NOTE_PROGRESS;
        return;
    }
    fprintf(stderr, "%s%s\n", open_line ? "\n" : "", text);
    open_line = 0;
}

void cli_progress(void *ctx, size_t done, size_t total)
{
    static const void *who;
    static size_t last;
    static double t0;
    double now = dp_now_s();
    if (who != ctx || done < last) who = ctx, last = 0, t0 = now; /* a new run */
    if (total == 0 || (done != total && done - last < total / 200)) return;
    last = done;
    double el = now - t0;
    double frac = (double)done / (double)total;
    fprintf(stderr, "\r%s: %5.1f%% of the trace", (const char *)ctx, 100 * frac);
    if (frac > 0.01 && done != total) fprintf(stderr, ", ETA %.0f s   ", el * (1 - frac) / frac);
    if (done == total) fprintf(stderr, ", %.1f s          \n", el);
}

int cli_mpi_begin(int *argc, char ***argv, int *rank, int *size)
{
    *rank = 0, *size = 1;
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMI_SIZE")) return 0;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, rank);
    MPI_Comm_size(MPI_COMM_WORLD, size);
    return 1;
}
