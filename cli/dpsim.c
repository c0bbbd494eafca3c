/* dpsim — the command-line driver. Thin: parse arguments, call the library, print. */
#include <errno.h>
#include <stdio.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif
#include <string.h>

#include <gsl/gsl_errno.h>

#include "cli.h"

typedef struct subcommand {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand SUBCOMMANDS[] = {
    {"trace", cmd_trace, "generate, import and describe sequence-length traces"},
    {"models", cmd_models, "list model, GPU and cluster presets"},
    {"cost", cmd_cost, "one cost-model query: time and memory of a micro-batch shape"},
    {"calibrate", cmd_calibrate, "fit the analytic cost model to a measured profile"},
    {"plan", cmd_plan, "micro-batch a trace and build execution plans"},
    {"sim", cmd_sim, "simulate execution plans: iteration time, bubbles, memory"},
    {"compare", cmd_compare, "the main job: batching x schedule comparison table and figures"},
    {"sweep", cmd_sweep, "grid of plan parameters, one CSV row per point"},
    {"tune", cmd_tune, "the best configuration of each batching method on N GPUs"},
    {"plot", cmd_plot, "draw figures with gnuplot"},
    {"validate", cmd_validate, "compare a simulated plan with a measured timeline"},
    {"explain", cmd_explain, "the assumptions behind a run's answer and how far each moves it"},
};
#define N_SUBCOMMANDS (sizeof SUBCOMMANDS / sizeof SUBCOMMANDS[0])

static const char USAGE[] = "dpsim [--help] [--version] SUBCOMMAND [OPTIONS]";

static void help(void)
{
    printf("usage: %s\n\n"
           "dpsim simulates pipeline-parallel training of multi-task LLMs whose samples have very\n"
           "different lengths, after DynaPipe (Jiang et al., EuroSys'24).\n\n"
           "Subcommands:\n",
           USAGE);
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        printf("  %-10s %s\n", SUBCOMMANDS[i].name, SUBCOMMANDS[i].summary);
    printf("\nOptions:\n"
           "  -h, --help     this help\n"
           "  -V, --version  print the version\n\n"
           "'dpsim SUBCOMMAND --help' lists a subcommand's options and their defaults.\n"
           "Exit status: 0 success, 1 runtime failure, 2 usage error.\n");
}

/* A result printed to a standard output that could not take it (a full disk, a closed pipe) is a
 * lost result: a subcommand that succeeded fails with the reason (one that failed has said why,
 * and its own outputs, out_file's, say so of standard output too). */
static int stdout_checked(const char *sub, int rc)
{
    errno = 0;
    if (rc != 0 || (fflush(stdout) == 0 && !ferror(stdout))) return rc;
    fprintf(stderr, "dpsim %s: error: standard output: write failed%s%s\n", sub, errno ? ": " : "",
            errno ? strerror(errno) : "");
    return 1;
}

int main(int argc, char **argv)
{
    gsl_set_error_handler_off(); /* library code checks GSL's return codes instead */
    dp_set_note_sink(cli_note_sink, NULL); /* the library's notes on stderr */
#ifdef __GLIBC__
    /* Plans and simulations allocate and free large arrays per iteration and per candidate: keep
     * them in the heap instead of a fresh mmap (and its page faults) each time. */
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
#endif
    if (argc < 2) {
        fprintf(stderr, "dpsim: missing subcommand\nusage: %s\n", USAGE);
        return EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        help();
        return 0;
    }
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) {
        printf("dpsim %s\n", DPSIM_VERSION);
        return 0;
    }
    for (size_t i = 0; i < N_SUBCOMMANDS; i++) {
        if (strcmp(name, SUBCOMMANDS[i].name) == 0)
            return stdout_checked(name, SUBCOMMANDS[i].run(argc - 1, argv + 1));
    }
    fprintf(stderr, "dpsim: unknown subcommand \"%s\"\nusage: %s\n", name, USAGE);
    return EXIT_USAGE;
}
