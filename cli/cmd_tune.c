/* dpsim tune — the best configuration of each batching method on a number of GPUs (sim/tune.h),
 * searched in forked workers (common/pool.h); compare --tuned uses the same search (cli_tune). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/outfile.h"
#include "../common/pool.h"
#include "../sim/study.h"
#include "../sim/tune.h"
#include "cli.h"

static const char TUNE_USAGE[] =
    "dpsim tune [--gpus N] [--batchings LIST] [--schedules LIST] [-o ranking.csv] [PLAN OPTIONS]";

/* What the workers share: the base options and environment, and a cost model per (tp, mode),
 * built once before the fork. */
typedef struct tune_job {
    const plan_cli *base;
    const plan_env *env;
    const tune_space *sp;
    const tune_point *pts;
    tune_result *res;
    cost_model *cm[TUNE_MAX_LIST][RECOMPUTE_COUNT];
    char cm_err[TUNE_MAX_LIST][RECOMPUTE_COUNT][240];
    time_t t0;
    int progress;
} tune_job;

static int tp_slot(const tune_space *sp, int tp)
{
    for (int t = 0; t < sp->n_tps; t++)
        if (sp->tps[t] == tp) return t;
    return 0;
}

dp_status cli_tune_run(const plan_cli *base, const plan_env *env, const tune_point *pt,
                       cost_model *const *cms, study_result *r, dp_err *err)
{
    int dynamic = strcmp(pt->recompute, "dynamic") == 0;
    recompute_mode rc = RECOMPUTE_NONE;
    if (!dynamic) recompute_parse(pt->recompute, &rc);
    cost_model *own[RECOMPUTE_COUNT] = {NULL}, *use[RECOMPUTE_COUNT] = {NULL};
    dp_status st = DP_OK;
    memset(r, 0, sizeof *r);
    for (int m = 0; m < RECOMPUTE_COUNT && st == DP_OK; m++) {
        if (!dynamic && m != (int)rc) continue;
        if (cms) {
            use[m] = cms[m];
            if (!use[m]) st = dp_fail(err, DP_ERR_INVALID, "no cost model for tp %d", pt->tp);
            continue;
        }
        model_spec ms;
        cluster_spec hw;
        char source[4200];
        st = cli_build_cost_at(&base->cost, pt->tp, (recompute_mode)m, &ms, &hw, &own[m], source,
                               sizeof source, err);
        if (st == DP_OK) own[m]->hw = env->hw, use[m] = own[m]; /* with the what-if links */
    }
    if (st == DP_OK) {
        plan_cli p = *base;
        p.batching = pt->batching, p.schedule = pt->schedule;
        p.cost.tp = pt->tp, p.pp = pt->pp, p.dp = pt->dp, p.zero = pt->zero;
        p.mbs = pt->mbs, p.mb_tokens = pt->mb_tokens;
        p.cost.recompute_dynamic = dynamic, p.cost.recompute = rc;
        study_opts o;
        cli_study_opts(&p, env, pt->batching, pt->schedule, &o);
        o.cm = use[dynamic ? 0 : rc];
        for (int m = 0; m < RECOMPUTE_COUNT; m++) o.recompute_cm[m] = dynamic ? use[m] : NULL;
        st = study_run(&o, &env->trace, r, err);
    }
    for (int m = 0; m < RECOMPUTE_COUNT; m++) cost_model_free(own[m]);
    return st;
}

/* One point, in a worker: "OK THROUGHPUT MFU PEAK WHY". */
static void tune_eval(void *ctx, long i, char *out, size_t cap)
{
    tune_job *j = ctx;
    const tune_point *pt = &j->pts[i];
    int t = tp_slot(j->sp, pt->tp), dynamic = strcmp(pt->recompute, "dynamic") == 0;
    recompute_mode rc = RECOMPUTE_NONE;
    if (!dynamic) recompute_parse(pt->recompute, &rc);
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        if ((dynamic || m == (int)rc) && !j->cm[t][m]) { /* why its cost model could not be made */
            snprintf(out, cap, "0 0 0 0 %s", j->cm_err[t][m]);
            return;
        }
    study_result r;
    dp_err err = {0};
    dp_status st = cli_tune_run(j->base, j->env, pt, j->cm[t], &r, &err);
    double peak = 0;
    for (int s = 0; s < r.pp; s++) peak = fmax(peak, r.peak_mem_mb[s]);
    /* a configuration that leaves an iteration out (--keep-going) does not run the trace */
    int ok = st == DP_OK && r.feasible && !r.oom && r.iterations > 0 && !r.failed_iterations;
    const char *why = st != DP_OK ? err.msg : ok ? "" : r.why[0] ? r.why : "no iteration";
    snprintf(out, cap, "%d %.17g %.17g %.17g %.230s", ok, ok ? r.throughput_tokens_per_s : 0,
             r.mfu, peak, why);
    study_result_release(&r);
}

static void tune_done(void *ctx, long i, const char *text)
{
    tune_job *j = ctx;
    tune_result *r = &j->res[i];
    r->pt = j->pts[i];
    r->index = i;
    int used = 0;
    if (!text || sscanf(text, "%d %lf %lf %lf %n", &r->ok, &r->throughput, &r->mfu, &r->peak_mb,
                        &used) < 4) {
        r->ok = 0;
        snprintf(r->why, sizeof r->why, "the worker died");
        return;
    }
    snprintf(r->why, sizeof r->why, "%s", text + used);
    for (char *c = r->why; *c; c++)
        if (*c == '\n') *c = ' ';
}

static void tune_progress(void *ctx, long finished, long n)
{
    tune_job *j = ctx;
    if (!j->progress) return;
    double el = difftime(time(NULL), j->t0);
    fprintf(stderr, "\rdpsim tune: %ld/%ld configurations", finished, n);
    if (finished > 0 && finished < n) fprintf(stderr, ", ETA %.0f s   ", el / finished * (n - finished));
    if (finished == n) fprintf(stderr, ", %.0f s          \n", el);
}

dp_status cli_tune(const plan_cli *base, const plan_env *env, const tune_space *sp, int jobs,
                   tune_result **out, long *n_out, dp_err *err)
{
    *out = NULL, *n_out = 0;
    tune_point *pts = NULL;
    long n = tune_points(sp, &pts);
    if (n == 0)
        return dp_fail(err, DP_ERR_INVALID, "no configuration of %d GPUs to try (tp at most %d per "
                       "node, pp at most %d layers%s)", sp->gpus, sp->gpus_per_node, sp->layers,
                       sp->t5 ? ", even for T5" : "");
    tune_job *j = dp_xcalloc(1, sizeof *j);
    j->base = base, j->env = env, j->sp = sp, j->pts = pts;
    /* scored on the first batches and the one with the longest sample (sim/tune.h), where the
     * trace is in memory */
    plan_env *scored = NULL;
    if (!env->stream_path && base->iterations > 0) {
        scored = dp_xcalloc(1, sizeof *scored);
        *scored = *env;
        int longest;
        dp_status st = tune_scoring_trace(&env->trace, &env->rules, base->iterations,
                                          &scored->trace, &longest, err);
        if (st != DP_OK) {
            free(scored), free(j), free(pts);
            return st;
        }
        j->env = scored;
    }
    j->res = dp_xcalloc((size_t)n, sizeof *j->res);
    j->t0 = time(NULL);
    j->progress = cli_stderr_is_tty();
    for (int t = 0; t < sp->n_tps; t++) { /* the cost models the points use, once */
        int used = 0;
        for (long i = 0; i < n; i++) used |= pts[i].tp == sp->tps[t];
        for (int m = 0; used && m < RECOMPUTE_COUNT; m++) {
            model_spec ms;
            cluster_spec hw;
            char source[4200];
            dp_err e = {0};
            if (cli_build_cost_at(&base->cost, sp->tps[t], (recompute_mode)m, &ms, &hw, &j->cm[t][m],
                                  source, sizeof source, &e) != DP_OK)
                snprintf(j->cm_err[t][m], sizeof j->cm_err[t][m], "%.230s", e.msg);
            else
                j->cm[t][m]->hw = env->hw; /* with the what-if link overrides */
        }
    }
    if (j->progress) fprintf(stderr, "dpsim tune: %ld configurations on %d GPUs, %d workers\n", n,
                             sp->gpus, jobs);
    int rc = pool_run(n, jobs, tune_eval, tune_done, tune_progress, j);
    for (int t = 0; t < sp->n_tps; t++)
        for (int m = 0; m < RECOMPUTE_COUNT; m++) cost_model_free(j->cm[t][m]);
    (void)rc; /* a dead worker's point is reported as not ok, with why */
    tune_rank(j->res, n);
    *out = j->res;
    *n_out = n;
    if (scored) trace_release(&scored->trace);
    free(scored);
    free(j);
    free(pts);
    return DP_OK;
}

dp_status cli_tune_space(const plan_cli *p, const plan_env *env, int *gpus, const char *const *bs,
                         int nb, const char *const *ss, int ns, tune_space *sp, dp_err *err)
{
    int have = env->hw.nodes * env->hw.gpus_per_node;
    if (*gpus == 0) *gpus = have > 0 ? have : env->hw.gpus_per_node > 0 ? env->hw.gpus_per_node : 8;
    if (have > 0 && *gpus > have && !p->allow_oversubscribe)
        return dp_fail(err, DP_ERR_INVALID, "--gpus %d, but %s has %d\nhint: a cluster with more "
                       "nodes, or --allow-oversubscribe", *gpus, env->hw.name, have);
    int layers = env->model.arch == ARCH_GPT ? env->model.enc_layers : model_layers(&env->model);
    tune_space_default(sp, *gpus, env->hw.gpus_per_node > 0 ? env->hw.gpus_per_node : 8, layers,
                       env->model.arch == ARCH_T5);
    for (int i = 0; i < nb && sp->n_batchings < TUNE_MAX_LIST; i++) sp->batchings[sp->n_batchings++] = bs[i];
    for (int j = 0; j < ns && sp->n_schedules < TUNE_MAX_LIST; j++)
        if (strcmp(ss[j], "interleaved") != 0) sp->schedules[sp->n_schedules++] = ss[j];
    return DP_OK;
}

int cmd_tune(int argc, char **argv)
{
    const char *cmd = "tune", *out = NULL;
    const char *blist_arg = "padding,packing,token,dynamic", *slist_arg = "1f1b,adaptive";
    plan_cli p;
    plan_cli_default(&p);
    p.iterations = 8;
    int64_t gpus = 0, jobs = cli_jobs_default();
    cli_opts t;
    cli_opts_init(&t, cmd, TUNE_USAGE,
                  "Searches, for each batching method, every configuration of --gpus GPUs:\n"
                  "tp x pp x dp layouts (tp within a node), ZeRO 0/1 (with dp > 1; 2 and 3 too\n"
                  "without a pipeline), recompute none/selective/full (and dynamic for the dynamic\n"
                  "batchers), each schedule, and the method's knob (--mbs 1/2/4/8 for padding and\n"
                  "the packers that take it, --mb-tokens 1k-16k for token), simulating --iterations\n"
                  "global batches of the trace [8] for each, in parallel. Prints the best feasible\n"
                  "configuration per method; -o writes the whole ranking as CSV. The plan options\n"
                  "that tune searches (--tp --pp --dp --zero --recompute --mbs --mb-tokens\n"
                  "--batching --schedule) are refused here; --iterations is per configuration.");
    cli_opt_int64(&t, "gpus", 'g', &gpus, "N", 1, 1 << 20, "the cluster's; one node if no count",
                  "GPUs to use");
    cli_opt_string(&t, "batchings", 'b', &blist_arg, "LIST", "padding,packing,token,dynamic",
                   "methods to tune");
    cli_opt_string(&t, "schedules", 's', &slist_arg, "LIST", "1f1b,adaptive", "schedules to try");
    cli_opt_int64(&t, "jobs", 'J', &jobs, "N", 1, 1024, "the machine's cores", "parallel workers");
    cli_opt_string(&t, "output", 'o', &out, "FILE", NULL, "the ranking CSV");
    cli_plan_options(&t, &p);
    cli_opts_find(&t, "iterations")->deflt = "8";
    t.help_hides = OPT_TUNED; /* what tune searches is no option of it */
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    cli_plan_parsed(&t, &p);
    char searched[80];
    if (r == 0 && t.first[OPT_TUNED])
        r = cli_usage_error(cmd, TUNE_USAGE, "%s is what tune searches; it cannot be fixed",
                            cli_opt_label(t.first[OPT_TUNED], searched, sizeof searched));
    cli_opts_release(&t);
    if (r != 0) return r == 1 ? 0 : r;
    method_lists ml;
    if (cli_method_lists(cmd, TUNE_USAGE, blist_arg, slist_arg, 0, &ml) != 0) return EXIT_USAGE;
    const char *const *bs = ml.batchings, *const *ss = ml.schedules;
    int nb = ml.nb, ns = ml.ns;
    tune_space sp;
    dp_err err = {0};
    out_role outs[] = {{"-o", out}};
    if (cli_check_outputs(&p, NULL, 0, outs, 1, &err) != DP_OK)
        return cli_usage_error(cmd, TUNE_USAGE, "%s", err.msg);
    p.pp = 1, p.dp = 1; /* the setup's own layout check passes; each point sets its own */
    plan_env env;
    dp_status st = cli_plan_setup(&p, &env, &err);
    if (st != DP_OK) {
        plan_env_release(&env);
        return st == DP_ERR_INVALID ? cli_usage_error(cmd, TUNE_USAGE, "%s", err.msg) : cli_fail(cmd, &err);
    }
    int ngpus = (int)gpus;
    if ((st = cli_tune_space(&p, &env, &ngpus, bs, nb, ss, ns, &sp, &err)) != DP_OK) {
        plan_env_release(&env);
        return cli_usage_error(cmd, TUNE_USAGE, "%s", err.msg);
    }
    gpus = ngpus;
    tune_result *res = NULL;
    long n = 0;
    st = cli_tune(&p, &env, &sp, (int)jobs, &res, &n, &err);
    if (st == DP_OK) {
        printf("# dpsim tune: %s on %lld x %s (%s), %lld tokens per iteration, max length %d, "
               "%d iterations per configuration; %ld configurations\n",
               env.model.name, (long long)gpus, env.hw.gpu.name, env.hw.name,
               (long long)env.rules.global_tokens, env.rules.max_seqlen, p.iterations, n);
        const tune_result *base = tune_best(res, n, "packing");
        printf("%-18s %12s %8s %6s  %s\n", "batching", "tokens/s", "x pack", "mfu%", "best configuration");
        for (int i = 0; i < nb; i++) {
            const tune_result *b = tune_best(res, n, bs[i]);
            char desc[256];
            if (!b) {
                printf("%-18s %12s %8s %6s  no configuration fits\n", bs[i], "-", "-", "-");
                continue;
            }
            tune_point_describe(&b->pt, desc, sizeof desc);
            char x[16] = "-";
            if (base) snprintf(x, sizeof x, "%.2f", b->throughput / base->throughput);
            printf("%-18s %12.0f %8s %6.1f  %s\n", bs[i], b->throughput, x, 100 * b->mfu, desc);
        }
        if (out) {
            out_file of;
            if ((st = out_open(&of, out, &err)) == DP_OK) {
                fprintf(of.fp, "%s\n", TUNE_CSV_HEADER);
                char row[600];
                for (long i = 0; i < n; i++) {
                    tune_csv_row(&res[i], i + 1, row, sizeof row);
                    fprintf(of.fp, "%s\n", row);
                }
                st = out_commit(&of, &err);
                if (st == DP_OK) fprintf(stderr, "dpsim: wrote the ranking of %ld configurations to %s\n", n, out);
            }
        }
    }
    free(res);
    plan_env_release(&env);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}
