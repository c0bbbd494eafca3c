/* dpsim tune — the best configuration of each batching method on a number of GPUs (planner/tune.h),
 * searched in forked workers (common/pool.h); compare --tuned uses the same search (planner_tune). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "../common/outfile.h"
#include "../common/pool.h"
#include "../scheduler/microbatch.h"
#include "../planner/study.h"
#include "../planner/tune.h"
#include "cli.h"

static const char TUNE_USAGE[] =
    "dpsim tune [--gpus N] [--batchings LIST] [--schedules LIST] [-o ranking.csv] [PLAN OPTIONS]";


static volatile sig_atomic_t tune_stop;

static void on_stop_signal(int sig)
{
    (void)sig;
    tune_stop = 1;
}

/* tune_run_opts.allgather over MPI_COMM_WORLD: every rank's text, in rank order. */
static int mpi_allgather_text(void *ctx, const char *mine, char **all)
{
    (void)ctx;
    int size, len = (int)strlen(mine);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *lens = calloc((size_t)size, sizeof *lens), *at = calloc((size_t)size, sizeof *at);
    if (!lens || !at || MPI_Allgather(&len, 1, MPI_INT, lens, 1, MPI_INT, MPI_COMM_WORLD) != MPI_SUCCESS) {
        free(lens), free(at);
        return -1;
    }
    size_t total = 0;
    for (int r = 0; r < size; r++) at[r] = (int)total, total += (size_t)lens[r];
    *all = malloc(total + 1);
    int rc = *all && MPI_Allgatherv(mine, len, MPI_CHAR, *all, lens, at, MPI_CHAR,
                                    MPI_COMM_WORLD) == MPI_SUCCESS ? 0 : -1;
    if (*all) (*all)[total] = '\0';
    free(lens), free(at);
    return rc;
}

static int tune_main(int argc, char **argv, int rank, int ranks);

/* Under mpirun (MPI's launcher environment) the search's points are spread over the ranks
 * (planner/tune_run.h): rank 0 prints and writes, every rank reads a resumed ranking. */
int cmd_tune(int argc, char **argv)
{
    int rank, ranks, mpi = cli_mpi_begin(&argc, &argv, &rank, &ranks);
    int rc = tune_main(argc, argv, rank, ranks);
    if (mpi) MPI_Finalize();
    return rc;
}

/* What tune was asked: the request, the search's lists and its output. */
typedef struct tune_args {
    plan_request p;
    const char *out, *batchings, *schedules;
    int quiet, resume, exhaustive, zero_pipeline;
    int64_t gpus, jobs;
    tune_list_arg cps, precisions, eps;
} tune_args;

static const char TUNE_DESCRIPTION[] =
    "Searches, for each batching method, every configuration of --gpus GPUs:\n"
    "each number format of --precision (bf16,fp8 for a list), tp x cp x pp x dp\n"
    "layouts (cp each item of --cp, 1,2,4,auto for a list; tp within a node;\n"
    "a mixture of experts' ep each of --ep dividing tp x cp x dp, 1,2,4,8),\n"
    "ZeRO 0/1 (with dp x cp > 1; 2 and 3 too without a pipeline, and with one\n"
    "under --zero-pipeline; 3 also as HSDP, --shard-group at a node's GPUs),\n"
    "recompute none/selective/full (and dynamic for the dynamic batchers),\n"
    "each schedule (interleaved at 2 and 4 chunks), and the method's knob\n"
    "(--mbs 1/2/4/8 for padding and the packers that take it, --mb-tokens\n"
    "1k-16k for token), simulating --iterations global batches of the trace [8]\n"
    "for each, in parallel. Prints the best feasible configuration per method;\n"
    "-o writes the whole ranking as CSV. The plan options that tune searches\n"
    "(--tp --pp --dp --zero --recompute --chunks --mbs --mb-tokens --batching\n"
    "--schedule) are refused here; --iterations is per configuration.\n"
    "A first pass runs each method's configurations of the first schedule without\n"
    "recompute (its four whose tokens bound their time the least first); then a\n"
    "configuration is dropped (\"pruned\") once a lower bound on its time shows\n"
    "it below its method's best of that pass, before planning where its tokens\n"
    "alone show it. Under mpirun the configurations spread over the ranks (rank 0\n"
    "prints and writes -o). At the end a note says which (batching, schedule)\n"
    "pairs took the search's time.";

/* The options into a: 0 to go on, 1 after --help, else a usage error's exit code. */
static int tune_parse(int argc, char **argv, tune_args *a)
{
    const char *cmd = "tune";
    memset(a, 0, sizeof *a);
    a->batchings = TUNE_DEFAULT_BATCHINGS, a->schedules = TUNE_DEFAULT_SCHEDULES;
    a->jobs = planner_jobs_default();
    plan_request_default(&a->p);
    a->p.iterations = 8;
    cli_opts t;
    cli_opts_init(&t, cmd, TUNE_USAGE, TUNE_DESCRIPTION);
    cli_opt_int64(&t, "gpus", 'g', &a->gpus, "N", 1, 1 << 20, "the cluster's; one node if no count",
                  "GPUs to use");
    cli_opt_string(&t, "batchings", 'b', &a->batchings, "LIST", TUNE_DEFAULT_BATCHINGS,
                   "methods to tune");
    cli_opt_string(&t, "schedules", 's', &a->schedules, "LIST", TUNE_DEFAULT_SCHEDULES,
                   "schedules to try (auto: per iteration, as --schedule auto)");
    cli_opt_int64(&t, "jobs", 'J', &a->jobs, "N", 1, 1024, "the machine's cores", "parallel workers");
    cli_opt_string(&t, "output", 'o', &a->out, "FILE", NULL,
                   "the ranking CSV, rewritten as configurations finish (a\n"
                   "temporary and a rename: an interrupted search leaves a valid one)");
    cli_opt_flag(&t, "resume", 0, &a->resume,
                 "go on from -o's rows (a search stopped by Ctrl-C or a crash),\n"
                 "refused when the options or input files' contents changed");
    cli_opt_flag(&t, "quiet", 'q', &a->quiet, "no progress lines on stderr");
    cli_opt_flag(&t, "zero-pipeline", 0, &a->zero_pipeline,
                 "search ZeRO 2 and 3 with a pipeline too (FSDP with PP: gathers and\n"
                 "reduce-scatters per micro-batch; about 1.6x the configurations)");
    cli_opt_flag(&t, "exhaustive", 0, &a->exhaustive,
                 "simulate every configuration to the end (by default one that a\n"
                 "lower bound on its time shows cannot reach its batching's best of\n"
                 "a first pass is dropped, \"pruned\" in the ranking: never a best)");
    plan_request_options(&t, &a->p);
    tune_list_option(&t, TUNE_LIST_CP, &a->cps, &a->p.cost);
    tune_list_option(&t, TUNE_LIST_PRECISION, &a->precisions, &a->p.cost);
    tune_list_option(&t, TUNE_LIST_EP, &a->eps, &a->p.cost);
    cli_opts_find(&t, "iterations")->deflt = "8";
    t.help_hides = OPT_TUNED; /* what tune searches is no option of it */
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    plan_request_parsed(&t, &a->p);
    char searched[80];
    if (r == 0 && t.first[OPT_TUNED])
        r = cli_usage_error(cmd, TUNE_USAGE, "%s is what tune searches; it cannot be fixed",
                            cli_opt_label(t.first[OPT_TUNED], searched, sizeof searched));
    cli_opts_release(&t);
    if (r != 0) return r;
    if (a->resume && !a->out)
        return cli_usage_error(cmd, TUNE_USAGE, "--resume needs -o, the ranking to go on from");
    struct stat ob;
    if (a->out && (strcmp(a->out, "-") == 0 || (stat(a->out, &ob) == 0 && !S_ISREG(ob.st_mode))))
        return cli_usage_error(cmd, TUNE_USAGE, "-o %s: tune writes its ranking to a file as it "
                               "goes, with its configuration beside it (a resume reads both); "
                               "without -o it prints the ranking", a->out);
    char config_path[4200];
    planner_config_path(a->out, config_path, sizeof config_path);
    out_role outs[] = {{"-o", a->out}, {"-o's configuration", a->out ? config_path : NULL}};
    dp_err err = {0};
    if (planner_check_outputs(&a->p, NULL, 0, outs, 2, &err) != DP_OK)
        return cli_usage_error(cmd, TUNE_USAGE, "%s", err.msg);
    return 0;
}

/* The search under Ctrl-C and SIGTERM: the first stops it (no configuration starts after it),
 * a second ends the process. */
static dp_status run_search(const tune_args *a, const plan_env *env, const tune_space *sp,
                            tune_run_opts *run, tune_result **res, long *n, dp_err *err)
{
    struct sigaction sa, old_int, old_term;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C ends it at once */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    dp_status st = planner_tune(&a->p, env, sp, (int)a->jobs, run, res, n, err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    return st;
}

/* The best configuration of each batching, against the reference (tune_reference). */
static void print_ranking(const tune_args *a, const plan_env *env, const method_lists *ml,
                          const tune_result *res, long n)
{
    printf("# dpsim tune: %s on %lld x %s (%s), %lld tokens per iteration, max length %d, "
           "%d iterations per configuration; %ld configurations\n",
           env->model.name, (long long)a->gpus, env->hw.gpu.name, env->hw.name,
           (long long)env->rules.global_tokens, env->rules.max_seqlen, a->p.iterations, n);
    const char *base_name;
    const tune_result *base = tune_reference(res, n, ml->batchings, ml->nb, &base_name);
    printf("%-18s %12s %8s %6s  %s\n", "batching", "tokens/s", "x best", "mfu%", "best configuration");
    printf("%-18s %12s %8s %6s  (x best: over %s, the best %s)\n", "#", "", "", "", base_name,
           base && strcmp(base_name, "packing") ? "varlen packer" : "baseline");
    for (int i = 0; i < ml->nb; i++) {
        const char *name = ml->batchings[i];
        const tune_result *b = tune_best(res, n, name);
        if (!b) {
            long died = 0, done = 0;
            for (long q = 0; q < n; q++)
                if (strcmp(res[q].pt.batching, name) == 0) died += res[q].died, done += res[q].done;
            printf("%-18s %12s %8s %6s  %s\n", name, "-", "-", "-",
                   died ? "no result: its workers died" : done ? "no configuration fits"
                                                           : "not run (interrupted)");
            continue;
        }
        char desc[256], x[16] = "-";
        tune_point_describe(&b->pt, desc, sizeof desc);
        if (base) snprintf(x, sizeof x, "%.2f", b->throughput / base->throughput);
        printf("%-18s %12.0f %8s %6.1f  %s\n", name, b->throughput, x, 100 * b->mfu, desc);
    }
    long pruned = 0;
    for (long q = 0; q < n; q++) pruned += res[q].done && tune_result_pruned(&res[q]);
    if (pruned)
        printf("# %ld of the %ld configurations pruned: a lower bound on their time showed them "
               "below their batching's best of a first pass (--exhaustive simulates them all)\n",
               pruned, n);
}

/* What the search's end tells the shell: 130 when interrupted (as a shell reports a Ctrl-C), a
 * runtime error when a worker died or no configuration fits, else 0; said on stderr. */
static int search_end(const tune_args *a, const tune_run_opts *run, const tune_result *res, long n)
{
    long done = run->resumed + run->ran;
    int exit_code = 0;
    if (a->out) fprintf(stderr, "dpsim: wrote the ranking of %ld configurations to %s\n", done, a->out);
    const tune_result *near = run->stopped ? NULL : tune_nothing_fits(res, n);
    if (near) { /* no answer is an error, with what stands in the way of the nearest */
        char desc[256];
        tune_point_describe(&near->pt, desc, sizeof desc);
        const char *hint = strstr(near->why, " hint: "); /* its own hint names options tune sets */
        fprintf(stderr, "dpsim tune: error: none of the %ld configurations of %lld GPUs fits; the "
                "nearest (%s): %.*s\nhint: more --gpus, a larger --mem-limit, a shorter "
                "--max-seqlen or a smaller model\n", n, (long long)a->gpus, desc,
                (int)(hint ? hint - near->why : (long)strlen(near->why)), near->why);
        exit_code = EXIT_RUNTIME;
    }
    if (run->stopped) {
        fprintf(stderr, "dpsim tune: interrupted after %ld of %ld configurations%s\n", done, n,
                a->out ? "; --resume with the same options goes on" : "");
        exit_code = 130;
    }
    if (run->died) {
        fprintf(stderr, "dpsim tune: error: %ld configuration%s had no result: the worker died "
                "(a crash or a signal); they are ranked as failed\n", run->died,
                run->died == 1 ? "" : "s");
        if (!exit_code) exit_code = EXIT_RUNTIME;
    }
    return exit_code;
}

static int tune_main(int argc, char **argv, int rank, int ranks)
{
    const char *cmd = "tune";
    tune_args a;
    int r = tune_parse(argc, argv, &a);
    if (r != 0) return r == 1 ? 0 : r;
    method_lists ml;
    if (planner_method_lists(cmd, TUNE_USAGE, a.batchings, a.schedules, 1, &ml) != 0) return EXIT_USAGE;
    a.p.pp = 1, a.p.dp = 1; /* the setup's own layout check passes; each point sets its own */
    plan_env env;
    tune_space sp;
    dp_err err = {0};
    dp_status st = planner_setup(&a.p, &env, &err);
    int ngpus = (int)a.gpus;
    if (st == DP_OK)
        st = planner_tune_space(&a.p, &env, &ngpus, ml.batchings, ml.nb, ml.schedules, ml.ns,
                                a.cps.vals, a.cps.n, a.precisions.vals, a.precisions.n, a.eps.vals,
                                a.eps.n, &sp, &err);
    a.gpus = ngpus;
    sp.zero_pipeline = a.zero_pipeline;
    /* what the ranking means: the options, the input files' contents, the search's lists; a
     * resume must find the same beside its CSV */
    char config[12000];
    if (st == DP_OK) {
        tune_config_of(&a.p, &env, &sp, a.batchings, a.schedules, &a.cps, &a.precisions,
                       a.exhaustive, config, sizeof config);
        st = tune_output_begin(a.out, config, a.resume, rank, &err);
    }
    if (st != DP_OK) {
        plan_env_release(&env);
        return st == DP_ERR_INVALID ? cli_usage_error(cmd, TUNE_USAGE, "%s", err.msg) : cli_fail(cmd, &err);
    }
    tune_run_opts run = {.out = a.out, .resume = a.resume, .quiet = a.quiet || rank > 0,
                         .progress_lines = 1, .terminal = cli_stderr_is_tty(), .stop = &tune_stop,
                         .exhaustive = a.exhaustive, .rank = rank, .ranks = ranks,
                         .allgather = mpi_allgather_text};
    if (ranks > 1 && rank == 0 && !a.quiet)
        fprintf(stderr, "dpsim tune: %d MPI ranks, each running one configuration in %d\n", ranks,
                ranks);
    tune_result *res = NULL;
    long n = 0;
    int exit_code = 0;
    st = run_search(&a, &env, &sp, &run, &res, &n, &err);
    if (st == DP_OK && rank == 0) { /* rank 0 says it all */
        print_ranking(&a, &env, &ml, res, n);
        exit_code = search_end(&a, &run, res, n);
    }
    free(res);
    plan_env_release(&env);
    return st == DP_OK ? exit_code : cli_fail(cmd, &err);
}
