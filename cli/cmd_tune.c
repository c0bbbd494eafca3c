/* dpsim tune — the best configuration of each batching method on a number of GPUs (planner/tune.h),
 * searched in forked workers (common/pool.h); compare --tuned uses the same search (planner_tune). */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "../common/json_util.h"
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

/* The default methods: Megatron's packing (the baseline), the two strongest varlen packers a 2026
 * trainer runs, and DynaPipe's DP on both kernels. */
#define TUNE_BATCHINGS "packing,packing-ffd-varlen,packing-wlb,dynamic,dynamic-varlen"

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

static int tune_main(int argc, char **argv, int rank, int ranks)
{
    const char *cmd = "tune", *out = NULL;
    const char *blist_arg = TUNE_BATCHINGS, *slist_arg = "1f1b,adaptive";
    int quiet = 0, resume = 0, exhaustive = 0;
    plan_request p;
    plan_request_default(&p);
    p.iterations = 8;
    int64_t gpus = 0, jobs = planner_jobs_default();
    cli_opts t;
    cli_opts_init(&t, cmd, TUNE_USAGE,
                  "Searches, for each batching method, every configuration of --gpus GPUs:\n"
                  "tp x cp x pp x dp layouts (cp each degree of --cp, 1,2,4 for a list; tp\n"
                  "within a node), ZeRO 0/1 (with dp > 1; 2 and 3 too without a pipeline),\n"
                  "recompute none/selective/full (and dynamic for the dynamic batchers),\n"
                  "each schedule (interleaved at 2 and 4 chunks), and the method's knob\n"
                  "(--mbs 1/2/4/8 for padding and the packers that take it, --mb-tokens\n"
                  "1k-16k for token), simulating --iterations global batches of the trace [8]\n"
                  "for each, in parallel. Prints the best feasible configuration per method;\n"
                  "-o writes the whole ranking as CSV. The plan options that tune searches\n"
                  "(--tp --pp --dp --zero --recompute --chunks --mbs --mb-tokens --batching\n"
                  "--schedule) are refused here; --iterations is per configuration.\n"
                  "A first pass runs each method's configurations of the first schedule without\n"
                  "recompute; then a configuration is dropped (\"pruned\") once a lower bound on\n"
                  "its time shows it below its method's best of that pass. Under mpirun the\n"
                  "configurations spread over the ranks (rank 0 prints and writes -o).");
    cli_opt_int64(&t, "gpus", 'g', &gpus, "N", 1, 1 << 20, "the cluster's; one node if no count",
                  "GPUs to use");
    cli_opt_string(&t, "batchings", 'b', &blist_arg, "LIST", TUNE_BATCHINGS, "methods to tune");
    cli_opt_string(&t, "schedules", 's', &slist_arg, "LIST", "1f1b,adaptive", "schedules to try");
    cli_opt_int64(&t, "jobs", 'J', &jobs, "N", 1, 1024, "the machine's cores", "parallel workers");
    cli_opt_string(&t, "output", 'o', &out, "FILE", NULL,
                   "the ranking CSV, rewritten as configurations finish (a\n"
                   "temporary and a rename: an interrupted search leaves a valid one)");
    cli_opt_flag(&t, "resume", 0, &resume,
                 "go on from -o's rows (a search stopped by Ctrl-C or a crash),\n"
                 "refused when the options or input files' contents changed");
    cli_opt_flag(&t, "quiet", 'q', &quiet, "no progress lines on stderr");
    cli_opt_flag(&t, "exhaustive", 0, &exhaustive,
                 "simulate every configuration to the end (by default one that a\n"
                 "lower bound on its time shows cannot reach its batching's best of\n"
                 "a first pass is dropped, \"pruned\" in the ranking: never a best)");
    plan_request_options(&t, &p);
    tune_cp_arg cps;
    tune_cp_option(&t, &cps, &p.cost);
    cli_opts_find(&t, "iterations")->deflt = "8";
    t.help_hides = OPT_TUNED; /* what tune searches is no option of it */
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    plan_request_parsed(&t, &p);
    char searched[80];
    if (r == 0 && t.first[OPT_TUNED])
        r = cli_usage_error(cmd, TUNE_USAGE, "%s is what tune searches; it cannot be fixed",
                            cli_opt_label(t.first[OPT_TUNED], searched, sizeof searched));
    cli_opts_release(&t);
    if (r != 0) return r == 1 ? 0 : r;
    method_lists ml;
    if (planner_method_lists(cmd, TUNE_USAGE, blist_arg, slist_arg, 1, &ml) != 0) return EXIT_USAGE;
    const char *const *bs = ml.batchings, *const *ss = ml.schedules;
    int nb = ml.nb, ns = ml.ns;
    tune_space sp;
    dp_err err = {0};
    if (resume && !out) return cli_usage_error(cmd, TUNE_USAGE, "--resume needs -o, the ranking to go on from");
    struct stat ob;
    if (out && (strcmp(out, "-") == 0 || (stat(out, &ob) == 0 && !S_ISREG(ob.st_mode))))
        return cli_usage_error(cmd, TUNE_USAGE, "-o %s: tune writes its ranking to a file as it goes, "
                               "with its configuration beside it (a resume reads both); without -o "
                               "it prints the ranking", out);
    char config_path[4200];
    snprintf(config_path, sizeof config_path, "%s.config", out ? out : "");
    out_role outs[] = {{"-o", out}, {"-o's configuration", out ? config_path : NULL}};
    if (planner_check_outputs(&p, NULL, 0, outs, 2, &err) != DP_OK)
        return cli_usage_error(cmd, TUNE_USAGE, "%s", err.msg);
    p.pp = 1, p.dp = 1; /* the setup's own layout check passes; each point sets its own */
    plan_env env;
    dp_status st = planner_setup(&p, &env, &err);
    if (st != DP_OK) {
        plan_env_release(&env);
        return st == DP_ERR_INVALID ? cli_usage_error(cmd, TUNE_USAGE, "%s", err.msg) : cli_fail(cmd, &err);
    }
    int ngpus = (int)gpus;
    if ((st = planner_tune_space(&p, &env, &ngpus, bs, nb, ss, ns, cps.cps, cps.n, &sp, &err)) != DP_OK) {
        plan_env_release(&env);
        return cli_usage_error(cmd, TUNE_USAGE, "%s", err.msg);
    }
    gpus = ngpus;
    /* what the ranking means: the options, the input files' contents, the search's lists; a
     * resume must find the same beside its CSV */
    char config[12000];
    plan_request_config(&p, NULL, 0, config, sizeof config - 600);
    char cp_list[80];
    tune_cp_describe(&cps, cp_list, sizeof cp_list);
    snprintf(config + strlen(config), sizeof config - strlen(config),
             "gpus=%lld\nbatchings=%s\nschedules=%s\ncp-list=%s\nexhaustive=%d\n", (long long)gpus,
             blist_arg, slist_arg, cp_list, exhaustive);
    if (out && resume) {
        char *there = NULL, what[700];
        if (json_slurp(config_path, &there, &err) != DP_OK) {
            plan_env_release(&env);
            return cli_usage_error(cmd, TUNE_USAGE, "--resume: %s, the configuration of %s, cannot be "
                                   "read: the search to go on from is unknown", config_path, out);
        }
        int differs = planner_config_differs(there, config, what, sizeof what);
        free(there);
        if (differs) {
            plan_env_release(&env);
            return cli_usage_error(cmd, TUNE_USAGE, "--resume: %s was searched with other inputs "
                                   "(%s)\nhint: the same options and files, or a new -o", out, what);
        }
    } else if (out && rank == 0) { /* a fresh search: no earlier ranking beside the new
                                    * configuration */
        if (unlink(out) != 0 && errno != ENOENT) {
            plan_env_release(&env);
            dp_fail(&err, DP_ERR_IO, "%s: cannot remove the earlier ranking: %s", out,
                    strerror(errno));
            return cli_fail(cmd, &err);
        }
        out_file cf;
        if ((st = out_open(&cf, config_path, &err)) == DP_OK) {
            fputs(config, cf.fp);
            st = out_commit(&cf, &err);
        }
        if (st != DP_OK) {
            plan_env_release(&env);
            return cli_fail(cmd, &err);
        }
    }
    tune_result *res = NULL;
    long n = 0;
    int exit_code = 0;
    tune_run_opts run = {.out = out, .resume = resume, .quiet = quiet || rank > 0,
                         .progress_lines = 1, .terminal = cli_stderr_is_tty(), .stop = &tune_stop, .exhaustive = exhaustive,
                         .rank = rank, .ranks = ranks, .allgather = mpi_allgather_text};
    if (ranks > 1 && rank == 0 && !quiet)
        fprintf(stderr, "dpsim tune: %d MPI ranks, each running one configuration in %d\n", ranks,
                ranks);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND; /* a second Ctrl-C ends it at once */
    sigemptyset(&sa.sa_mask);
    struct sigaction old_int, old_term;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    st = planner_tune(&p, &env, &sp, (int)jobs, &run, &res, &n, &err);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (st == DP_OK && rank > 0) { /* rank 0 says it all */
        free(res);
        plan_env_release(&env);
        return 0;
    }
    if (st == DP_OK) {
        printf("# dpsim tune: %s on %lld x %s (%s), %lld tokens per iteration, max length %d, "
               "%d iterations per configuration; %ld configurations\n",
               env.model.name, (long long)gpus, env.hw.gpu.name, env.hw.name,
               (long long)env.rules.global_tokens, env.rules.max_seqlen, p.iterations, n);
        /* the speed-up over the best varlen packer (what a 2026 trainer runs), else packing */
        const tune_result *base = NULL;
        const char *base_name = "packing";
        for (int i = 0; i < nb; i++) {
            const batcher *b = batcher_find(bs[i]);
            const tune_result *best_b = tune_best(res, n, bs[i]);
            if (b && b->varlen && !b->memory_aware && best_b &&
                (!base || best_b->throughput > base->throughput))
                base = best_b, base_name = bs[i];
        }
        if (!base) base = tune_best(res, n, "packing");
        printf("%-18s %12s %8s %6s  %s\n", "batching", "tokens/s", "x best", "mfu%", "best configuration");
        printf("%-18s %12s %8s %6s  (x best: over %s, the best %s)\n", "#", "", "", "", base_name,
               base && strcmp(base_name, "packing") ? "varlen packer" : "baseline");
        for (int i = 0; i < nb; i++) {
            const tune_result *b = tune_best(res, n, bs[i]);
            char desc[256];
            if (!b) {
                long died = 0, done = 0;
                for (long q = 0; q < n; q++)
                    if (strcmp(res[q].pt.batching, bs[i]) == 0) died += res[q].died, done += res[q].done;
                printf("%-18s %12s %8s %6s  %s\n", bs[i], "-", "-", "-",
                       died ? "no result: its workers died" : done ? "no configuration fits"
                                                               : "not run (interrupted)");
                continue;
            }
            tune_point_describe(&b->pt, desc, sizeof desc);
            char x[16] = "-";
            if (base) snprintf(x, sizeof x, "%.2f", b->throughput / base->throughput);
            printf("%-18s %12.0f %8s %6.1f  %s\n", bs[i], b->throughput, x, 100 * b->mfu, desc);
        }
        long pruned = 0;
        for (long q = 0; q < n; q++) pruned += res[q].done && tune_result_pruned(&res[q]);
        if (pruned)
            printf("# %ld of the %ld configurations pruned: a lower bound on their time showed them "
                   "below their batching's best of a first pass (--exhaustive simulates them all)\n",
                   pruned, n);
        long done = run.resumed + run.ran;
        if (out)
            fprintf(stderr, "dpsim: wrote the ranking of %ld configurations to %s\n", done, out);
        if (run.stopped) {
            fprintf(stderr, "dpsim tune: interrupted after %ld of %ld configurations%s\n", done, n,
                    out ? "; --resume with the same options goes on" : "");
            exit_code = 130; /* as a shell reports a Ctrl-C */
        }
        if (run.died) {
            fprintf(stderr, "dpsim tune: error: %ld configuration%s had no result: the worker died "
                    "(a crash or a signal); they are ranked as failed\n", run.died,
                    run.died == 1 ? "" : "s");
            if (!exit_code) exit_code = EXIT_RUNTIME;
        }
    }
    free(res);
    plan_env_release(&env);
    return st == DP_OK ? exit_code : cli_fail(cmd, &err);
}
