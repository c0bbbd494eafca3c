/* dpsim compare — the main job: every (batching, schedule) on one setup, one table, figures. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../plots/plot.h"
#include "../planner/panels.h"
#include "../planner/study.h"
#include "../planner/compare.h"
#include "cli.h"

static const char COMPARE_USAGE[] =
    "dpsim compare [--batchings LIST] [--schedules LIST] [--tuned [--gpus N]] [PLAN OPTIONS] "
    "[--out DIR] [--json]";

#define MAX_ITEMS METHOD_LIST_MAX

/* Appends a figure's name to the list of those written. */
static void wrote_one(char *wrote, size_t cap, const char *dir, const char *name)
{
    size_t at = strlen(wrote);
    snprintf(wrote + at, cap - at, "%s%s/%s", at ? ", " : "", dir, name);
}

/* The throughput chart (a row per batching and schedule; one out of memory or infeasible says
 * so in place of its bar), and the timeline and memory of one iteration of the figure row;
 * *wrote lists what was written. */
static dp_status draw_figures(const plan_request *p, const plan_env *env, const compare_row *rows, int n,
                              const char *dir, const char *fig_batching, const char *fig_schedule,
                              char *wrote, size_t wrote_cap, dp_err *err)
{
    wrote[0] = '\0';
    if (mkdir(dir, 0777) != 0 && errno != EEXIST)
        return dp_fail(err, DP_ERR_IO, "%s: cannot create the output folder: %s", dir, strerror(errno));
    char path[4200], title[512];
    plot_bar bars[MAX_ITEMS * MAX_ITEMS];
    for (int i = 0; i < n; i++) {
        const study_result *r = &rows[i].r;
        int ok = compare_row_fits(&rows[i]);
        bars[i] = (plot_bar){rows[i].batching, rows[i].schedule,
                             ok ? r->throughput_tokens_per_s : 0,
                             rows[i].st != DP_OK ? "error" : study_why_not(r)};
    }
    snprintf(title, sizeof title, "%s, tp %d x pp %d x dp %d on %lld x %s: %lld tokens/iteration, "
             "max length %d", env->model.name, p->cost.tp, p->pp, p->dp,
             plan_request_gpus(p), env->hw.gpu.name, (long long)env->rules.global_tokens,
             env->rules.max_seqlen);
    snprintf(path, sizeof path, "%s/throughput.png", dir);
    dp_status st = plot_throughput(bars, n, title, "throughput (real tokens/s)", path, err);
    if (st != DP_OK) return st;
    wrote_one(wrote, wrote_cap, dir, "throughput.png");

    /* timeline and memory of one iteration of the figure row */
    study_opts o;
    planner_study_opts(p, env, fig_batching, fig_schedule, &o);
    panel pn;
    st = panel_collect(&o, &env->trace, 0, 0, &pn, err);
    if (st == DP_ERR_INFEASIBLE) { /* the table says why */
        fprintf(stderr, "dpsim compare: no timeline or memory figure: %s/%s cannot run\n",
                fig_batching, fig_schedule);
        return DP_OK;
    }
    if (st != DP_OK) return st;
    snprintf(title, sizeof title, "%s, %s micro-batching, %s schedule, iteration 0", env->model.name,
             fig_batching, fig_schedule);
    snprintf(path, sizeof path, "%s/timeline.png", dir);
    st = plot_panels(&pn, 1, title, path, err);
    if (st == DP_OK) wrote_one(wrote, wrote_cap, dir, "timeline.png");
    snprintf(path, sizeof path, "%s/memory.png", dir);
    if (st == DP_OK) st = plot_panel_memory(&pn, 1, title, path, err);
    if (st == DP_OK) wrote_one(wrote, wrote_cap, dir, "memory.png");
    panel_release(&pn);
    return st;
}

static char *compare_json(const plan_request *p, const plan_env *env, const compare_row *rows, int n)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *arr = cJSON_AddArrayToObject(o, "rows");
    for (int i = 0; i < n; i++) {
        const compare_row *w = &rows[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "batching", w->batching);
        cJSON_AddStringToObject(x, "schedule", w->schedule);
        if (w->tuned[0]) cJSON_AddStringToObject(x, "tuned", w->tuned);
        if (w->st != DP_OK) {
            cJSON_AddStringToObject(x, "error", w->error);
        } else {
            int fits = compare_row_fits(w); /* no throughput for a row that does not fit */
            cJSON_AddNumberToObject(x, "throughput_tokens_per_s",
                                    fits ? w->r.throughput_tokens_per_s : 0);
            if (isnan(w->speedup)) cJSON_AddNullToObject(x, "speedup_vs_packing");
            else cJSON_AddNumberToObject(x, "speedup_vs_packing", w->speedup);
            cJSON_AddNumberToObject(x, "tflops_per_gpu", fits ? w->r.tflops_per_gpu : 0);
            cJSON_AddNumberToObject(x, "mfu", fits ? w->r.mfu : 0);
            cJSON_AddNumberToObject(x, "hw_tflops_per_gpu", fits ? w->r.hw_tflops_per_gpu : 0);
            cJSON_AddNumberToObject(x, "hfu", fits ? w->r.hfu : 0);
            cJSON_AddNumberToObject(x, "padding_efficiency", w->r.padding_efficiency);
            cJSON_AddNumberToObject(x, "encoder_padding_efficiency", w->r.enc_padding_efficiency);
            cJSON_AddNumberToObject(x, "decoder_padding_efficiency", w->r.dec_padding_efficiency);
            cJSON_AddNumberToObject(x, "bubble_fraction", study_mean_bubble(&w->r));
            cJSON_AddNumberToObject(x, "pipeline_bubble", w->r.pipeline_bubble_mean);
            cJSON_AddNumberToObject(x, "after_pipeline_share", w->r.after_pipeline_share);
            cJSON_AddNumberToObject(x, "microbatches_per_iteration", study_mb_per_iteration(&w->r));
            cJSON *pm = cJSON_AddArrayToObject(x, "peak_mem_mb");
            for (int s = 0; s < w->r.pp; s++) cJSON_AddItemToArray(pm, cJSON_CreateNumber(w->r.peak_mem_mb[s]));
            cJSON_AddBoolToObject(x, "oom", w->r.oom);
            cJSON_AddBoolToObject(x, "feasible", fits);
            if (w->r.why[0]) cJSON_AddStringToObject(x, "why", w->r.why);
            cJSON_AddNumberToObject(x, "plan_ms_per_iteration", w->r.plan_ms_median);
            cJSON_AddNumberToObject(x, "iterations", w->r.iterations);
            cJSON_AddNumberToObject(x, "failed_iterations", w->r.failed_iterations);
            cJSON *rc = cJSON_AddObjectToObject(x, "recompute_iterations");
            cJSON *rcm = cJSON_AddObjectToObject(x, "recompute_microbatches");
            for (int m = 0; m < RECOMPUTE_COUNT; m++) {
                cJSON_AddNumberToObject(rc, recompute_name((recompute_mode)m),
                                        w->r.recompute_iterations[m]);
                cJSON_AddNumberToObject(rcm, recompute_name((recompute_mode)m),
                                        w->r.recompute_microbatches[m]);
            }
        }
        cJSON_AddItemToArray(arr, x);
    }
    int bv = compare_best_row(rows, n, 0), bd = compare_best_row(rows, n, 1); /* the table's last line */
    if (bv >= 0 && bd >= 0)
        cJSON_AddNumberToObject(o, "dynapipe_over_best_varlen",
                                rows[bd].r.throughput_tokens_per_s / rows[bv].r.throughput_tokens_per_s);
    cJSON *c = cJSON_AddObjectToObject(o, "config");
    cJSON_AddStringToObject(c, "model", env->model.name);
    cJSON_AddStringToObject(c, "hw", env->hw.name);
    cJSON_AddStringToObject(c, "trace", env->trace_path);
    cJSON_AddStringToObject(c, "cost_model", env->cost_source);
    cJSON_AddNumberToObject(c, "pp", p->pp);
    cJSON_AddNumberToObject(c, "dp", p->dp);
    cJSON_AddNumberToObject(c, "tp", p->cost.tp);
    cJSON_AddNumberToObject(c, "cp", p->cost.cp);
    if (p->cost.cp_auto) cJSON_AddTrueToObject(c, "cp_auto"); /* cp: the group (plan's "cp_auto") */
    if (p->cost.ep > 1) cJSON_AddNumberToObject(c, "ep", p->cost.ep); /* as the plan's "ep" */
    if (model_is_moe(&env->model)) {
        char rn[48];
        cJSON_AddStringToObject(c, "routing", moe_routing_name((moe_route_kind)p->cost.routing,
                                                               p->cost.routing_alpha, rn, sizeof rn));
    }
    cJSON_AddNumberToObject(c, "gpus", (double)plan_request_gpus(p));
    cJSON_AddNumberToObject(c, "global_tokens", (double)env->rules.global_tokens);
    cJSON_AddNumberToObject(c, "max_seqlen", env->rules.max_seqlen);
    cJSON_AddNumberToObject(c, "mbs", p->mbs);
    cJSON_AddNumberToObject(c, "mem_limit_mb", env->mem_limit_mb);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

/* Every batching by default: the paper's four, the varlen packers and balancers, DynaPipe on
 * varlen kernels, the packers at smaller row caps and tapered, and auto over them. */
#define COMPARE_BATCHINGS                                                                          \
    "padding,packing,packing-varlen,packing-ffd-varlen,dp-balanced,packing-kk,packing-wlb,token,"  \
    "dynamic,dynamic-varlen,packing-half,packing-quarter,packing-taper,packing-dp,auto"

static void print_table_header(const plan_request *p, const plan_env *env, int tuned, FILE *fp)
{
    if (tuned)
        fprintf(fp, "# dpsim compare --tuned: %s, each batching at its best configuration of %d GPUs "
                "(below the table) on %s (%s, %.0f MB usable)\n", env->model.name, tuned,
                env->hw.name, env->hw.gpu.name, env->mem_limit_mb);
    else
        fprintf(fp, "# dpsim compare: %s, tp %d x cp %d x pp %d x dp %d = %lld GPUs on %s (%s, %.0f "
                "MB usable)\n", env->model.name, p->cost.tp, p->cost.cp, p->pp, p->dp,
                plan_request_gpus(p), env->hw.name, env->hw.gpu.name, env->mem_limit_mb);
    fprintf(fp, "# trace %s (%zu samples); %lld tokens per iteration; max length %d; cost %s\n",
            env->trace_path, env->trace.n, (long long)env->rules.global_tokens, env->rules.max_seqlen,
            env->cost_source);
    fprintf(fp, "# speed-up is over packing with %s (the MLM+DS baseline); bubble is the pipeline's "
            "idle share (mean over stages), after the gradient sync and optimizer step's share of "
            "the iteration\n", tuned ? "its tuned configuration" : "1f1b");
    fprintf(fp, "%-18s %-11s %12s %8s %6s %8s %7s %7s %6s %10s %4s %9s\n", "batching", "schedule",
            "throughput", "speedup", "mfu", "padding", "mb", "bubble", "after", "peak_mem", "oom",
            "plan");
    fprintf(fp, "%-18s %-11s %12s %8s %6s %8s %7s %7s %6s %10s %4s %9s\n", "#", "", "tokens/s", "x",
            "%", "eff_%", "/iter", "%", "%", "MB(max)", "", "ms/iter");
}

static void print_row(const compare_row *w, FILE *fp)
{
    if (w->st != DP_OK) {
        fprintf(fp, "%-18s %-11s error: %s\n", w->batching, w->schedule, w->error);
        return;
    }
    if (!compare_row_fits(w)) { /* no throughput: why not, and the memory it would need */
        char peak[24] = "-";
        if (w->r.feasible && w->r.iterations > 0)
            snprintf(peak, sizeof peak, "%.0f", study_max_peak_mb(&w->r));
        fprintf(fp, "%-18s %-11s %12s %8s %6s %8s %7s %7s %6s %10s %4s %9.3f\n", w->batching,
                w->schedule, w->r.oom ? "OOM" : w->r.feasible ? "none fits" : "infeasible", "-",
                "-", "-", "-", "-", "-", peak, w->r.oom ? "YES" : "-", w->r.plan_ms_median);
        return;
    }
    char speed[16] = "-";
    if (!isnan(w->speedup)) snprintf(speed, sizeof speed, "%.2f", w->speedup);
    fprintf(fp, "%-18s %-11s %12.0f %8s %6.1f %8.1f %7.1f %7.1f %6.1f %10.0f %4s %9.3f\n",
            w->batching, w->schedule, w->r.throughput_tokens_per_s, speed, 100 * w->r.mfu,
            100 * w->r.padding_efficiency, study_mb_per_iteration(&w->r),
            100 * w->r.pipeline_bubble_mean, 100 * w->r.after_pipeline_share,
            study_max_peak_mb(&w->r), w->r.oom ? "YES" : "no", w->r.plan_ms_median);
}

/* The ratios below the table: DynaPipe over the varlen packers, auto over the single methods. */
static void print_ratios(const compare_row *rows, int n, FILE *fp)
{
    int bv = compare_best_row(rows, n, 0), bd = compare_best_row(rows, n, 1);
    if (bv >= 0 && bd >= 0)
        fprintf(fp, "# best DynaPipe (%s/%s) over the best varlen packer (%s/%s): %.2fx\n",
                rows[bd].batching, rows[bd].schedule, rows[bv].batching, rows[bv].schedule,
                rows[bd].r.throughput_tokens_per_s / rows[bv].r.throughput_tokens_per_s);
    int best_auto = -1, best_other = compare_best_single(rows, n, NULL);
    for (int i = 0; i < n; i++) { /* auto under its own schedule */
        const batcher *b = batcher_find(rows[i].batching);
        if (!b || !b->chooses || !compare_row_fits(&rows[i])) continue;
        if (best_auto < 0 || rows[i].r.throughput_tokens_per_s > rows[best_auto].r.throughput_tokens_per_s)
            best_auto = i;
        int same = compare_best_single(rows, n, rows[i].schedule);
        if (same >= 0)
            fprintf(fp, "# auto/%s over the best other %s row (%s): %.3fx\n", rows[i].schedule,
                    rows[i].schedule, rows[same].batching,
                    rows[i].r.throughput_tokens_per_s / rows[same].r.throughput_tokens_per_s);
    }
    if (best_auto >= 0 && best_other >= 0)
        fprintf(fp, "# best auto (auto/%s) over the best other row (%s/%s): %.3fx\n",
                rows[best_auto].schedule, rows[best_other].batching, rows[best_other].schedule,
                rows[best_auto].r.throughput_tokens_per_s / rows[best_other].r.throughput_tokens_per_s);
}

/* Per row: its tuned configuration, why iterations were left out, recompute per iteration. */
static void print_row_notes(const plan_request *p, const compare_row *w, FILE *fp)
{
    const study_result *r = &w->r;
    if (w->tuned[0]) fprintf(fp, "# %s tuned: %s\n", w->batching, w->tuned);
    if (w->st != DP_OK) return;
    if (r->failed_iterations)
        fprintf(fp, "# %s/%s: %d of %d iterations left out (--keep-going); the first: ",
                w->batching, w->schedule, r->failed_iterations, r->n_iter);
    else if (r->why[0])
        fprintf(fp, "# %s/%s: ", w->batching, w->schedule);
    if (r->why[0]) fprintf(fp, "%s\n", r->why);
    if (p->cost.recompute >= RECOMPUTE_COUNT) {
        int per_mb = p->cost.recompute == RECOMPUTE_POLICY_MIXED;
        const int *c = per_mb ? r->recompute_microbatches : r->recompute_iterations;
        fprintf(fp, "# %s/%s: recompute per %s: none %d, selective %d, full %d\n", w->batching,
                w->schedule, per_mb ? "micro-batch" : "iteration", c[RECOMPUTE_NONE],
                c[RECOMPUTE_SELECTIVE], c[RECOMPUTE_FULL]);
    }
}

static void print_table(const plan_request *p, const plan_env *env, const compare_row *rows, int n,
                        int tuned, FILE *fp)
{
    print_table_header(p, env, tuned, fp);
    for (int i = 0; i < n; i++) print_row(&rows[i], fp);
    print_ratios(rows, n, fp);
    for (int i = 0; i < n; i++) print_row_notes(p, &rows[i], fp);
}

/* The three figures' paths under out, checked against the inputs before any work. */
static dp_status check_figure_paths(const plan_request *p, const char *out, dp_err *err)
{
    struct stat sb; /* a folder, or nothing yet: said before the comparison runs, not after */
    if (stat(out, &sb) == 0 && !S_ISDIR(sb.st_mode))
        return dp_fail(err, DP_ERR_INVALID, "--out %s is a file, not a folder for the figures\n"
                       "hint: another --out, or --no-figures", out);
    char f[3][4200];
    static const char *const names[3] = {"throughput.png", "timeline.png", "memory.png"};
    out_role outs[3];
    for (int k = 0; k < 3; k++) {
        snprintf(f[k], sizeof f[k], "%s/%s", out, names[k]);
        outs[k] = (out_role){"--out", f[k]};
    }
    return planner_check_outputs(p, NULL, 0, outs, 3, err);
}

typedef struct compare_args {
    const char *out, *batchings, *schedules;
    int json, no_figures, tuned, tuned_gpus, tune_iterations, jobs;
    plan_request p;
} compare_args;

/* Parses compare's command line into a: 0, 1 after --help, or a usage error's exit status. */
static int compare_parse(int argc, char **argv, compare_args *a)
{
    const char *cmd = "compare";
    *a = (compare_args){.out = "dpsim-out", .batchings = COMPARE_BATCHINGS,
                        .schedules = TUNE_DEFAULT_SCHEDULES, .tune_iterations = 8,
                        .jobs = planner_jobs_default()};
    plan_request_default(&a->p);
    cli_opts t;
    cli_opts_init(&t, cmd, COMPARE_USAGE,
                  "The main job: simulates the whole trace under every (batching,\n"
                  "schedule) pair and prints one table: throughput (real tokens/s), speed-up over\n"
                  "packing + 1f1b, padding efficiency, bubble fraction, peak memory, OOM and\n"
                  "planning time. Writes throughput.png, timeline.png and memory.png into --out.");
    cli_opt_string(&t, "batchings", 'b', &a->batchings, "LIST", COMPARE_BATCHINGS,
                   "comma list of strategies (dpsim plan --help lists them)");
    cli_opt_string(&t, "schedules", 's', &a->schedules, "LIST", TUNE_DEFAULT_SCHEDULES,
                   "comma list of schedules (auto: per iteration, as --schedule auto)");
    cli_opt_string(&t, "out", 'o', &a->out, "DIR", "dpsim-out", "folder for the figures");
    cli_opt_flag(&t, "no-figures", 'n', &a->no_figures, "skip the figures");
    cli_opt_flag(&t, "json", 'j', &a->json, "print the comparison JSON contract instead of the table");
    cli_opt_flag(&t, "tuned", 't', &a->tuned,
                 "each batching at its own best configuration (dpsim tune:\n"
                 "tp x cp x pp x dp, ZeRO, recompute, schedule, mbs/mb-tokens)");
    cli_opt_int(&t, "gpus", 'g', &a->tuned_gpus, "N", 1, 1 << 20,
                "the cluster's; one node if unbounded", "--tuned: GPUs to use");
    cli_opt_int(&t, "tune-iterations", 'T', &a->tune_iterations, "K", 1, 1 << 20, "8",
                "--tuned: iterations per configuration tried");
    cli_opt_int(&t, "jobs", 'J', &a->jobs, "N", 1, 1024, "the machine's cores",
                "--tuned: parallel workers");
    plan_request_options(&t, &a->p);
    /* compare's rows come from --batchings and --schedules: --batching and --schedule are not
     * what --tuned would refuse */
    cli_opts_find(&t, "batching")->marks &= ~OPT_TUNED;
    cli_opts_find(&t, "schedule")->marks &= ~OPT_TUNED;
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    plan_request_parsed(&t, &a->p);
    char searched[80];
    if (r == 0 && a->tuned && t.first[OPT_TUNED]) /* an option --tuned chooses itself */
        r = cli_usage_error(cmd, COMPARE_USAGE, "--tuned chooses %s itself; drop it, or drop --tuned",
                            cli_opt_label(t.first[OPT_TUNED], searched, sizeof searched));
    cli_opts_release(&t);
    return r;
}

int cmd_compare(int argc, char **argv)
{
    const char *cmd = "compare";
    compare_args a;
    int r = compare_parse(argc, argv, &a);
    if (r != 0) return r == 1 ? 0 : r;
    plan_request *p = &a.p;
    method_lists ml;
    if (planner_method_lists(cmd, COMPARE_USAGE, a.batchings, a.schedules, 1, &ml) != 0)
        return EXIT_USAGE;
    p->schedule = schedule_for_options(ml.schedules, ml.ns);
    dp_err err = {0};
    if (!a.no_figures && check_figure_paths(p, a.out, &err) != DP_OK) /* not on an input */
        return cli_usage_error(cmd, COMPARE_USAGE, "%s", err.msg);
    plan_env env;
    compare_opts co = {.batchings = ml.batchings, .schedules = ml.schedules, .nb = ml.nb,
                       .ns = ml.ns, .tuned = a.tuned, .gpus = a.tuned_gpus,
                       .tune_iterations = a.tune_iterations, .jobs = a.jobs,
                       .progress = cli_stderr_is_tty() ? cli_progress : NULL,
                       .ran = cli_warn_short_trace};
    compare_row *rows = NULL;
    int n = 0;
    dp_status st = planner_setup(p, &env, &err);
    if (st == DP_OK) st = planner_compare(p, &env, &co, &rows, &n, &err);
    if (st != DP_OK) {
        plan_env_release(&env);
        return st == DP_ERR_INVALID ? cli_usage_error(cmd, COMPARE_USAGE, "%s", err.msg)
                                    : cli_fail(cmd, &err);
    }
    if (cli_stderr_is_tty()) fprintf(stderr, "\r%60s\r", "");
    if (a.json) {
        char *text = compare_json(p, &env, rows, n);
        if (text) puts(text);
        free(text);
    } else {
        print_table(p, &env, rows, n, a.tuned ? co.gpus : 0, stdout);
    }
    if (!a.no_figures) {
        int f = compare_figure_row(rows, n); /* dynamic + adaptive when compared */
        char wrote[3 * 4200];
        st = draw_figures(p, &env, rows, n, a.out, rows[f].batching, rows[f].schedule, wrote,
                          sizeof wrote, &err);
        if (st == DP_OK && wrote[0]) fprintf(stderr, "dpsim: wrote %s\n", wrote);
    }
    compare_rows_release(rows, n);
    plan_env_release(&env);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}
