/* dpsim plan — micro-batch a trace and write execution plans; dpsim sim — simulate them. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../scheduler/plan.h"
#include "../scheduler/schedule.h"
#include "../plots/html.h"
#include "../plots/plot.h"
#include "../sim/ascii.h"
#include "../planner/panels.h"
#include "../planner/study.h"
#include "../sim/timeline.h"
#include "cli.h"

/* Progress on stderr when it is a terminal: samples consumed of the trace. */
/* Counts per recompute mode, where more than one mode was used. */
/* "label   dynamic 3, packing 2": auto's winners and their iterations. */
static void print_wins(FILE *fp, const char *label, const char (*names)[32], const int *wins,
                       int n)
{
    fprintf(fp, "%-34s", label);
    for (int k = 0; k < n; k++) fprintf(fp, "%s %s %d", k ? "," : "", names[k], wins[k]);
    fprintf(fp, "\n");
}

static void print_modes(FILE *fp, const char *what, const int *count)
{
    int used = 0;
    for (int m = 0; m < RECOMPUTE_COUNT; m++) used += count[m] > 0;
    if (used > 1)
        fprintf(fp, "%-34s none %d, selective %d, full %d\n", what, count[RECOMPUTE_NONE],
                count[RECOMPUTE_SELECTIVE], count[RECOMPUTE_FULL]);
}

/* A duration of h hours as text: hours, or minutes under one. */
static const char *hours_text(double h, char *buf, size_t cap)
{
    if (h >= 1) snprintf(buf, cap, "%.2f h", h);
    else snprintf(buf, cap, "%.1f min", 60 * h);
    return buf;
}

/* The counts of a run and what a budget needs: iterations, micro-batches, throughput, time and
 * GPU-hours per billion tokens and per pass over the trace (trace_tokens > 0). */
static void summary_counts(const study_result *r, double trace_tokens, FILE *fp)
{
    fprintf(fp, "%-34s %14d\n", "iterations", r->iterations);
    if (r->failed_iterations) {
        fprintf(fp, "%-34s %14d  (--keep-going; their tokens are not counted):", "iterations left out",
                r->failed_iterations);
        for (int i = 0; i < r->n_first_failed; i++) fprintf(fp, " %d", r->first_failed[i]);
        fprintf(fp, "%s\n", r->failed_iterations > 8 ? " ..." : "");
    }
    if (r->n_wins > 0) /* --batching auto: each winner, in order of its first win */
        print_wins(fp, "iterations per batching (auto)", r->win_name, r->wins, r->n_wins);
    if (r->placement_chosen) { /* --schedule auto: the run's placement, by two iterations */
        char ms[4][32];
        const double *of[2] = {r->placement_first_ms, r->placement_longest_ms};
        for (int k = 0; k < 4; k++)
            snprintf(ms[k], sizeof ms[k], isfinite(of[k / 2][k % 2]) ? "%.1f ms" : "no plan",
                     of[k / 2][k % 2]);
        fprintf(fp, "%-34s %14s  (the first iteration: %s on a loop, %s on a V", "placement (auto)",
                r->placement == PLACEMENT_V ? "v" : "loop", ms[0], ms[1]);
        if (!isnan(r->placement_longest_ms[0]))
            fprintf(fp, "; the one with the longest sample: %s, %s", ms[2], ms[3]);
        fprintf(fp, ")\n");
        for (int k = 0; k < 2; k++)
            if (r->placement_why[k][0])
                fprintf(fp, "  no plan on a %-20s %s\n", k ? "V:" : "loop:", r->placement_why[k]);
    }
    if (r->n_sched_wins > 0) /* --schedule auto: the same */
        print_wins(fp, "iterations per schedule (auto)", r->sched_win_name, r->sched_wins,
                   r->n_sched_wins);
    print_modes(fp, "iterations per recompute mode", r->recompute_iterations);
    print_modes(fp, "micro-batches per recompute mode", r->recompute_microbatches);
    fprintf(fp, "%-34s %14.2f\n", "micro-batches per iteration",
            r->iterations ? (double)r->microbatches / r->iterations : 0);
    fprintf(fp, "%-34s %14.0f tokens/s%s\n", "throughput (real tokens)", r->throughput_tokens_per_s,
            !r->oom                 ? ""
            : study_out_of_step(r) ? "  (replicas out of step: the timeline's, not an answer)"
                                   : "  (out of memory: the timeline's, not an answer)");
    if (study_result_fits(r)) { /* what a budget needs */
        char t[32];
        fprintf(fp, "%-34s %16s  (%.1f GPU-hours on %lld GPUs)\n", "time per billion tokens",
                hours_text(study_hours_for(r, 1e9), t, sizeof t), study_gpu_hours_for(r, 1e9),
                r->gpus);
        if (trace_tokens > 0)
            fprintf(fp, "%-34s %16s  (%.1f GPU-hours; %.0f real tokens)\n",
                    "a pass over the trace", hours_text(study_hours_for(r, trace_tokens), t,
                                                        sizeof t),
                    study_gpu_hours_for(r, trace_tokens), trace_tokens);
    }
}

/* Times and utilisation: the simulated and closed-form iteration, MFU, HFU, stragglers, padding. */
static void summary_times(const study_result *r, FILE *fp)
{
    double mean_it = r->iterations ? r->sum_ms / r->iterations : 0;
    double mean_cf = r->iterations ? r->sum_closed_form_ms / r->iterations : 0;
    const char *formula = r->closed_form_text ? r->closed_form_text : "unknown schedule";
    fprintf(fp, "%-34s %14.3f s\n", "simulated time", r->time_s);
    fprintf(fp, "%-34s %14.2f ms\n", "mean iteration (simulated)", mean_it);
    if (isnan(mean_cf))
        fprintf(fp, "%-34s %14s     (%s)\n", "mean closed form", "-", formula);
    else
        fprintf(fp, "%-34s %14.2f ms  (%+.2f%% vs simulated; %s)\n", "mean closed form", mean_cf,
                mean_it > 0 ? 100 * (mean_cf - mean_it) / mean_it : 0, formula);
    if (r->mfu > 0) {
        fprintf(fp, "%-34s %14.1f  (MFU %.1f%%: model FLOPs of the real tokens, causal attention "
                "at half the square, / time / GPUs / bf16 peak", "model TFLOP/s per GPU",
                r->tflops_per_gpu, 100 * r->mfu);
        if (r->mfu_noncausal > 0)
            fprintf(fp, "; %.1f%% with attention counted whole, as PaLM and Megatron-LM count",
                    100 * r->mfu_noncausal);
        fprintf(fp, ")\n");
    }
    if (r->hfu > 0)
        fprintf(fp, "%-34s %14.1f  (HFU %.1f%%: the recomputed forwards counted too, as "
                "Megatron's TFLOP/s)\n", "hardware TFLOP/s per GPU", r->hw_tflops_per_gpu,
                100 * r->hfu);
    if (r->moe_routed > 0)
        fprintf(fp, "%-34s %13.2f%%  (of the routed copies, at the experts' capacity factor: "
                "their tokens skip the layer's experts)\n", "routed copies dropped",
                100 * r->moe_dropped / r->moe_routed);
    if (r->straggler_share > 0)
        fprintf(fp, "%-34s %13.2f%%  (of each stage's compute: the slowest of the job's GPUs, "
                "--gpu-jitter)\n", "straggler wait", 100 * r->straggler_share);
    if (r->dec_padded) /* encoder-decoder: each side's own */
        fprintf(fp, "%-34s %13.1f%%  (encoder %.1f%%, decoder %.1f%%)\n", "padding efficiency",
                100 * r->padding_efficiency, 100 * r->enc_padding_efficiency,
                100 * r->dec_padding_efficiency);
    else
        fprintf(fp, "%-34s %13.1f%%\n", "padding efficiency", 100 * r->padding_efficiency);
}

/* Per stage: idle shares, memory, time per op type. */
static void summary_stages(const study_result *r, FILE *fp)
{
    if (r->pp > 1) {
        fprintf(fp, "%-34s %13.2f%%", "pipeline bubble (mean of stages)",
                100 * r->pipeline_bubble_mean);
        if (!isnan(r->closed_form_bubble))
            fprintf(fp, "  (closed form %.2f%%)", 100 * r->closed_form_bubble);
    } else { /* no pipeline: the idle share is the replicas waiting for the busiest one */
        fprintf(fp, "%-34s %13.2f%%  (idle while the busiest data-parallel replica computes)",
                "replica imbalance", 100 * r->pipeline_bubble_mean);
    }
    fprintf(fp, "\n%-34s", "  per stage");
    for (int s = 0; s < r->pp; s++) fprintf(fp, " %5.1f%%", 100 * r->pipeline_bubble[s]);
    fprintf(fp, "\n%-34s %13.2f%%  (gradient sync and optimizer step after the pipeline)\n",
            "after the pipeline", 100 * r->after_pipeline_share);
    fprintf(fp, "%-34s", "idle per stage, whole iteration");
    for (int s = 0; s < r->pp; s++) fprintf(fp, " %5.1f%%", 100 * r->bubble_fraction[s]);
    fprintf(fp, "\n%-34s", "peak memory per stage (MB)");
    for (int s = 0; s < r->pp; s++) fprintf(fp, " %6.0f", r->peak_mem_mb[s]);
    fprintf(fp, "\n%-34s", "  weights / grads / optimizer");
    for (int s = 0; s < r->pp; s++)
        fprintf(fp, " %.0f/%.0f/%.0f", r->weights_mb[s], r->grads_mb[s], r->optimizer_mb[s]);
    fprintf(fp, "\n%-34s", "  stored / transient at the peak");
    for (int s = 0; s < r->pp; s++)
        fprintf(fp, " %.0f/%.0f", r->stored_at_peak_mb[s], r->transient_at_peak_mb[s]);
    fprintf(fp, "\n%-34s %6.0f  (the device's memory less the planner's limit)", "  reserved per device",
            r->reserved_mb);
    double ranks = r->ranks > 0 ? r->ranks : 1;
    fprintf(fp, "\n%-34s F %.0f, B %.0f, W %.0f, transfers %.0f (ms per rank)", "time per op type",
            r->op_ms[0] / ranks, r->op_ms[1] / ranks, r->op_ms[2] / ranks, r->op_ms[3] / ranks);
}

/* Memory verdict, planning time, the simulator's events and the timeline hash. */
static void summary_end(const study_result *r, FILE *fp)
{
    if (r->oom && !study_out_of_step(r)) {
        fprintf(fp, "\n%-34s %14s  (%d of %d iterations over the device memory in the simulation",
                "out of memory", "YES", r->sim_oom, r->iterations);
        if (r->plan_ms_median > 0) /* planned here, not read from a plan file */
            fprintf(fp, "; the planner found %d", r->planned_oom);
        fprintf(fp, ")\n");
    } else
        fprintf(fp, "\n%-34s %14s\n", "out of memory", "no");
    if (r->planned_apart) /* fits, but its replicas cannot keep in step (r->why says where) */
        fprintf(fp, "%-34s %14s  (%d of %d iterations: the replicas' passes differ)\n",
                "replicas out of step", "YES", r->planned_apart, r->iterations);
    if (r->why[0]) fprintf(fp, "%-34s %s\n", "", r->why);
    fprintf(fp, "%-34s %11.3f ms  (p90 %.3f ms)\n", "planning time per iteration",
            r->plan_ms_median, r->plan_ms_p90);
    if (r->in_flight_fallback)
        fprintf(fp, "%-34s %14d\n", "iterations planned 1-in-flight", r->in_flight_fallback);
    if (r->events)
        fprintf(fp, "%-34s %14llu (%.1f M events/s)\n", "simulated events",
                (unsigned long long)r->events, r->sim_wall_s > 0 ? r->events / r->sim_wall_s / 1e6 : 0);
    else /* one stage: nothing travels, the computes follow one another */
        fprintf(fp, "%-34s %14s (no transfers between stages to simulate)\n", "simulated events", "0");
    fprintf(fp, "%-34s %016llx\n", "timeline hash", (unsigned long long)r->timeline_hash);
}

/* trace_tokens: the real tokens of a pass over the trace (0: unknown, a plan file's run) */
static void print_summary(const char *what, const study_result *r, double trace_tokens, FILE *fp)
{
    fprintf(fp, "# %s\n", what);
    if (!r->feasible) {
        fprintf(fp, "infeasible: %s\n", r->why);
        return;
    }
    summary_counts(r, trace_tokens, fp);
    summary_times(r, fp);
    summary_stages(r, fp);
    summary_end(r, fp);
}

static const char PLAN_USAGE[] = "dpsim plan [OPTIONS] [-o plan.json]";

int cmd_plan(int argc, char **argv)
{
    const char *cmd = "plan", *out = NULL;
    plan_request p;
    plan_request_default(&p);
    cli_opts t;
    cli_opts_init(&t, cmd, PLAN_USAGE,
                  "Cuts each global batch of the trace into micro-batches, orders them\n"
                  "under the pipeline schedule, validates the plan, and writes it as the\n"
                  "execution-plan JSON (the simulator and dprun run it). Prints a summary:\n"
                  "padding efficiency (encoder and decoder), objective, planning time.");
    cli_opt_string(&t, "output", 'o', &out, "FILE", NULL, "plan JSON to write, - for stdout");
    plan_request_options(&t, &p);
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    plan_request_parsed(&t, &p);
    cli_opts_release(&t);
    if (r != 0) return r == 1 ? 0 : r;
    dp_err err = {0};
    plan_env env;
    dp_status st = planner_setup(&p, &env, &err);
    if (st != DP_OK) {
        plan_env_release(&env);
        return st == DP_ERR_INVALID ? cli_usage_error(cmd, PLAN_USAGE, "%s", err.msg)
                                    : cli_fail(cmd, &err);
    }
    out_role outs[] = {{"-o", out}};
    if ((st = planner_check_outputs(&p, NULL, 0, outs, 1, &err)) != DP_OK) {
        plan_env_release(&env);
        return cli_usage_error(cmd, PLAN_USAGE, "%s", err.msg);
    }
    plan_writer w;
    plan_header h;
    planner_plan_header(&p, &env, &h);
    if (out && (st = plan_writer_open(&w, out, &h, &err)) != DP_OK) {
        free(h.model_json), free(h.hw_json);
        plan_env_release(&env);
        return cli_fail(cmd, &err);
    }
    study_opts o;
    planner_study_opts(&p, &env, p.batching, p.schedule, &o);
    o.validate = 1;
    o.plan_out = out ? &w : NULL;
    o.progress = cli_stderr_is_tty() ? cli_progress : NULL;
    o.progress_ctx = (void *)"planning";
    study_result res;
    st = study_run(&o, &env.trace, &res, &err);
    if (st == DP_OK) st = study_answer(&res, &err); /* not a plan of no iteration */
    if (st == DP_OK) cli_warn_short_trace(&res, env.rules.global_tokens);
    if (out && st != DP_OK) plan_writer_abort(&w); /* an earlier plan file stays as it was */
    else if (out) st = plan_writer_close(&w, &err);
    if (st == DP_OK) {
        char what[1024];
        planner_run_title("plan", &p, &env, what, sizeof what);
        print_summary(what, &res, (double)batch_trace_tokens(&env.rules, &env.trace),
                      out && strcmp(out, "-") == 0 ? stderr : stdout);
        if (out && strcmp(out, "-") != 0) fprintf(stderr, "dpsim: wrote %d iterations to %s\n", res.iterations, out);
    }
    study_result_release(&res);
    free(h.model_json), free(h.hw_json);
    plan_env_release(&env);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}

/* ---- sim ----------------------------------------------------------------------------------- */

static const char SIM_USAGE[] = "dpsim sim [--plan plan.json | PLAN OPTIONS] [--json] [--timeline F.csv] "
                                "[--chrome F.json] [--ascii]";

typedef struct sim_cli {
    const char *plan_path, *timeline, *chrome;
    int json, ascii, ascii_width, ascii_iteration;
    const char *html, *figure, *memory_figure; /* one iteration's panel (planner/panels.h) */
    int figure_iteration, figure_replica;
    char schedule[32]; /* as run (a plan file's own) */
    int pp, chunks;
    double mem_limit_mb;
} sim_cli;

/* Simulates a plan file. */
static dp_status sim_plan_file(sim_cli *sc, const plan_request *p, const sim_sink *sink,
                               study_result *res, dp_err *err)
{
    plan pl;
    cluster_spec hw;
    sim_config cfg = {0};
    dp_status st = plan_read(sc->plan_path, &pl, err);
    if (st != DP_OK) return st;
    TRY(plan_check(&pl, sc->plan_path, err));
    snprintf(sc->schedule, sizeof sc->schedule, "%s", pl.h.schedule);
    sc->pp = pl.h.pp, sc->chunks = pl.h.chunks;
    st = planner_replay(&pl, sc->plan_path, p, sink, &hw, &cfg, res, err);
    sc->mem_limit_mb = cfg.mem_limit_mb;
out:
    plan_release(&pl);
    return st;
}

/* One sink feeding the timeline files, the ASCII drawing and the figures' panel. */
typedef struct tee {
    timeline_out *tl;
    ascii_tl *asc;
    panel_collector *pc;
} tee;

static void tee_op(void *ctx, const sim_op *op)
{
    tee *t = ctx;
    timeline_on_op(t->tl, op);
    if (t->asc) ascii_collect(t->asc, op);
    if (t->pc) panel_on_op(t->pc, op);
}

static void tee_mem(void *ctx, const sim_mem *m)
{
    tee *t = ctx;
    timeline_on_mem(t->tl, m);
    if (t->pc) panel_on_mem(t->pc, m);
}

/* The figures and page of --figure, --memory-figure and --html from the collected panel. */
static dp_status sim_figures(const sim_cli *sc, panel_collector *pc, const study_result *res,
                             const char *what, dp_err *err)
{
    dp_status st = panel_finish(pc, res, sc->schedule, sc->pp, sc->chunks, sc->mem_limit_mb, err);
    const panel *pn = pc->p;
    char title[600];
    snprintf(title, sizeof title, "%.300s, iteration %d", what + (what[0] == '#' ? 2 : 0),
             sc->figure_iteration);
    char *cut = strstr(title, "; cost"); /* the cost model's provenance is too long for a title */
    if (cut) snprintf(cut, sizeof title - (size_t)(cut - title), ", iteration %d", sc->figure_iteration);
    if (st == DP_OK && sc->figure) st = plot_panels(pn, 1, title, sc->figure, err);
    if (st == DP_OK && sc->memory_figure) st = plot_panel_memory(pn, 1, title, sc->memory_figure, err);
    if (st == DP_OK && sc->html) st = html_write_panels(pn, 1, title, sc->html, err);
    if (st == DP_OK)
        fprintf(stderr, "dpsim: wrote%s%s%s%s%s%s\n", sc->figure ? " " : "", sc->figure ? sc->figure : "",
                sc->memory_figure ? " " : "", sc->memory_figure ? sc->memory_figure : "",
                sc->html ? " " : "", sc->html ? sc->html : "");
    return st;
}

/* Parses sim's command line: 0, 1 after --help, or a usage error's exit status. */
static int sim_parse(int argc, char **argv, sim_cli *sc, plan_request *p)
{
    plan_request_default(p);
    memset(sc, 0, sizeof *sc);
    sc->ascii_width = 96;
    cli_opts ot;
    cli_opts_init(&ot, "sim", SIM_USAGE,
                  "Simulates execution plans with the discrete-event engine: per stage\n"
                  "one compute, one send and one receive stream; prints iteration time,\n"
                  "throughput, bubbles, padding efficiency, peak memory, the closed-form\n"
                  "estimate beside the simulated makespan, and a timeline hash.");
    cli_opt_string(&ot, "plan", 'P', &sc->plan_path, "FILE", NULL,
                   "simulate this plan JSON (else plan from the options)");
    cli_opt_flag(&ot, "json", 'j', &sc->json, "print the metrics JSON contract");
    cli_opt_string(&ot, "timeline", 'T', &sc->timeline, "FILE", NULL, "write the timeline CSV");
    cli_opt_string(&ot, "chrome", 'C', &sc->chrome, "FILE", NULL,
                   "write a Chrome trace JSON (open in Perfetto)");
    cli_opt_flag(&ot, "ascii", 'a', &sc->ascii, "draw one iteration in the terminal");
    cli_opt_int(&ot, "ascii-width", 'W', &sc->ascii_width, "N", 16, 1000, "96",
                "columns of the drawing");
    cli_opt_int(&ot, "ascii-iteration", 'I', &sc->ascii_iteration, "K", 0, 1 << 30, "0",
                "iteration to draw");
    cli_opt_flag(&ot, "ascii-order", 'O', &sc->ascii,
                 "the drawing as each stage's op order (many micro-batches)")->flag_value = 2;
    cli_opt_string(&ot, "figure", 0, &sc->figure, "OUT", NULL,
                   "draw one iteration's timeline (.png or .svg; gnuplot)");
    cli_opt_string(&ot, "memory-figure", 0, &sc->memory_figure, "OUT", NULL,
                   "draw one iteration's memory per stage over time (.png or .svg)");
    cli_opt_string(&ot, "html", 0, &sc->html, "PAGE", NULL,
                   "write one iteration as an interactive page (self-contained HTML:\n"
                   "hover, step, play; dpsim plot schedules puts several side by side)");
    cli_opt_int(&ot, "figure-iteration", 0, &sc->figure_iteration, "K", 0, 1 << 30, "0",
                "the iteration --figure, --memory-figure and --html show");
    cli_opt_int(&ot, "figure-replica", 0, &sc->figure_replica, "R", 0, 4095, "0",
                "the data-parallel replica they show");
    plan_request_options(&ot, p);
    int r = cli_opts_parse(&ot, argc, argv, NULL, 0, NULL);
    plan_request_parsed(&ot, p);
    cli_opts_release(&ot);
    if (r == 0 && sc->plan_path && p->fixed_by_plan)
        r = cli_usage_error("sim", SIM_USAGE, "--%s cannot apply with --plan: the plan file fixes "
                            "it (only --mem-limit, --link-gbps, --link-latency-us and the cost "
                            "model's --profile, --fit, --analytic do)", p->fixed_by_plan);
    return r;
}

/* Plans from the options and simulates into sink: what the summary's title says and the trace's
 * real tokens (0 for a stream) into what and *trace_tokens. *usage is 1 when the request itself
 * is refused (a usage error). */
static dp_status sim_from_options(sim_cli *sc, plan_request *p, const sim_sink *sink,
                                  study_result *res, char *what, size_t what_cap,
                                  double *trace_tokens, int *usage, dp_err *err)
{
    plan_env env;
    dp_status st = planner_setup(p, &env, err);
    *usage = st == DP_ERR_INVALID;
    /* the schedule as run (auto: each iteration its own), for the figures */
    snprintf(sc->schedule, sizeof sc->schedule, "%s", p->schedule);
    sc->pp = p->pp, sc->chunks = 1;
    schedule_layout(p->schedule, p->chunks, &sc->chunks, NULL);
    sc->mem_limit_mb = env.mem_limit_mb;
    if (st == DP_OK) {
        study_opts o;
        planner_study_opts(p, &env, p->batching, p->schedule, &o);
        o.validate = 1;
        o.sink = sink;
        o.progress = cli_stderr_is_tty() ? cli_progress : NULL;
        o.progress_ctx = (void *)"simulating";
        st = study_run(&o, &env.trace, res, err);
        if (st == DP_OK) sc->chunks = res->chunks; /* auto: those of the placement it chose */
        if (st == DP_OK) st = study_answer(res, err); /* not figures of no iteration */
        if (st == DP_OK) cli_warn_short_trace(res, env.rules.global_tokens);
        planner_run_title("sim", p, &env, what, what_cap);
        *trace_tokens = env.stream_path ? 0 : (double)batch_trace_tokens(&env.rules, &env.trace);
    }
    plan_env_release(&env);
    return st;
}

/* The summary (or --json), beside an output on stdout on stderr, and the ASCII drawing. */
static dp_status sim_report(const sim_cli *sc, const study_result *res, const ascii_tl *asc,
                            int stdout_taken, const char *what, double trace_tokens, int pp,
                            dp_err *err)
{
    if (sc->json) {
        char *text = study_metrics_json(res);
        if (text) puts(text);
        free(text);
    } else {
        print_summary(what, res, trace_tokens, stdout_taken ? stderr : stdout);
    }
    if (sc->ascii && asc->n == 0) /* nothing drawn is an error, not an empty chart */
        return dp_fail(err, DP_ERR_INVALID, "--ascii-iteration %d: the run has no such iteration "
                       "(it simulated %d, ids from %d)", sc->ascii_iteration, res->iterations,
                       res->n_iter > 0 ? res->iter[0].id : 0);
    if (sc->ascii == 1) ascii_draw(asc, pp, sc->ascii_width, stdout);
    else if (sc->ascii == 2) ascii_draw_order(asc, pp, sc->ascii_width, stdout);
    return DP_OK;
}

int cmd_sim(int argc, char **argv)
{
    const char *cmd = "sim";
    plan_request p;
    sim_cli sc;
    int r = sim_parse(argc, argv, &sc, &p);
    if (r != 0) return r == 1 ? 0 : r;
    dp_err err = {0};
    out_role plan_in[] = {{"--plan", sc.plan_path}};
    /* the summary (or --json) is stdout's document unless an output takes stdout */
    out_role outs[] = {{"--timeline", sc.timeline}, {"--chrome", sc.chrome}, {"--figure", sc.figure},
                       {"--memory-figure", sc.memory_figure}, {"--html", sc.html},
                       {"--json", sc.json ? "-" : NULL}};
    if (planner_check_outputs(&p, plan_in, 1, outs, 6, &err) != DP_OK)
        return cli_usage_error(cmd, SIM_USAGE, "%s", err.msg);
    int taken = 0;
    for (int k = 0; k < 5; k++) taken |= outs[k].path && strcmp(outs[k].path, "-") == 0;
    timeline_out tl;
    ascii_tl asc;
    ascii_init(&asc, sc.ascii_iteration);
    dp_status st = timeline_open(&tl, sc.timeline, sc.chrome, &err);
    if (st != DP_OK) return cli_fail(cmd, &err);
    panel pn;
    panel_collector pc;
    panel_collector_init(&pc, &pn, sc.figure_iteration, sc.figure_replica);
    int figures = sc.figure || sc.memory_figure || sc.html;
    tee t = {&tl, sc.ascii ? &asc : NULL, figures ? &pc : NULL};
    sim_sink sink = {tee_op, tee_mem, &t};
    study_result res;
    memset(&res, 0, sizeof res);
    char what[1024] = "sim";
    double trace_tokens = 0; /* a pass over the trace; unknown for a plan file */
    if (sc.plan_path) {
        st = sim_plan_file(&sc, &p, &sink, &res, &err);
        snprintf(what, sizeof what, "sim: plan %s", sc.plan_path);
    } else {
        int usage = 0;
        st = sim_from_options(&sc, &p, &sink, &res, what, sizeof what, &trace_tokens, &usage, &err);
        if (usage) {
            panel_collector_release(&pc);
            ascii_release(&asc);
            study_result_release(&res);
            timeline_abort(&tl);
            return cli_usage_error(cmd, SIM_USAGE, "%s", err.msg);
        }
    }
    dp_err e2 = {0};
    if (st != DP_OK) timeline_abort(&tl);
    else if (timeline_close(&tl, &e2) != DP_OK) st = DP_ERR_IO, err = e2;
    if (st == DP_OK)
        st = sim_report(&sc, &res, &asc, taken, what, trace_tokens, sc.plan_path ? res.pp : p.pp, &err);
    if (figures && st == DP_OK) st = sim_figures(&sc, &pc, &res, what, &err);
    panel_collector_release(&pc);
    ascii_release(&asc);
    int feasible = res.feasible;
    study_result_release(&res);
    if (st != DP_OK) return cli_fail(cmd, &err);
    return feasible ? 0 : EXIT_RUNTIME;
}
