/* dpsim validate — the simulated plan against dprun's measured timeline. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../plots/plot.h"
#include "../scheduler/schedule.h"
#include "../sim/validate.h"
#include "../common/json_util.h"
#include "cli.h"

static const char VALIDATE_USAGE[] = "dpsim validate --plan plan.json --measured measured.csv [--json] [--plot F.png]";

static void print_validation(const val_result *v, const plan *pl, const char *plan_path,
                             const char *measured)
{
    printf("# validate: plan %s against %s\n", plan_path, measured);
    if (v->wire_elem_bytes && v->wire_scale != 1)
        printf("# transfers simulated with the bytes the runtime moved: %d per element, the plan's "
               "%s has %d (x%.3g)\n", v->wire_elem_bytes, pl->h.act_dtype, pl->h.act_elem_bytes,
               v->wire_scale);
    if (v->zero_repriced)
        printf("# ZeRO-%d's collectives inside the plan's forwards and backwards re-priced at those "
               "bytes too\n", pl->h.zero);
    printf("%9s %14s %14s %9s\n", "iteration", "predicted", "measured", "error");
    printf("%9s %14s %14s %9s\n", "#", "ms", "ms", "%");
    for (int k = 0; k < v->iterations; k++)
        printf("%9d %14.3f %14.3f %+8.2f%%\n", v->id[k], v->predicted_ms[k], v->measured_ms[k],
               100 * (v->predicted_ms[k] - v->measured_ms[k]) / v->measured_ms[k]);
    printf("mean absolute error %.2f%%, max %.2f%% over %d iterations\n", v->mape_pct,
           v->max_abs_pct, v->iterations);
    if (v->noise_pct >= 0)
        printf("machine noise band: runs of the same iteration lie %.2f%% apart (median over %d "
               "iteration%s run up to %d times; dprun --repeats): errors below that are the "
               "machine's, not the model's\n", v->noise_pct, v->noise_iterations,
               v->noise_iterations == 1 ? "" : "s", v->runs_max);
    else
        printf("machine noise: not measured (a timeline without dprun's repeats)\n");
    printf("\n%-9s %7s %14s %14s %12s\n", "op", "count", "predicted_ms", "measured_ms", "mean |err|");
    for (int k = 0; k < VAL_OPS; k++)
        if (v->per_op[k].count)
            printf("%-9s %7d %14.3f %14.3f %11.2f%%\n", val_op_name(k), v->per_op[k].count,
                   v->per_op[k].pred_ms, v->per_op[k].meas_ms, v->per_op[k].mape_pct);
}

/* --plot: simulated against measured iteration time. */
static dp_status plot_validation(const val_result *v, const char *fig, dp_err *err)
{
    plot_point *pts = malloc((size_t)(v->iterations ? v->iterations : 1) * 2 * sizeof *pts);
    if (!pts) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    for (int k = 0; k < v->iterations; k++) {
        pts[2 * k] = (plot_point){0, v->id[k], v->predicted_ms[k]};
        pts[2 * k + 1] = (plot_point){1, v->id[k], v->measured_ms[k]};
    }
    static const char *const series[2] = {"simulated", "measured"};
    char title[300];
    snprintf(title, sizeof title, "Iteration time, simulated vs measured (mean abs. error %.2f%%)",
             v->mape_pct);
    dp_status st = plot_lines(pts, 2 * v->iterations, series, 2, title, "iteration",
                              "iteration time (ms)", 0, fig, err);
    free(pts);
    if (st == DP_OK) fprintf(stderr, "dpsim: wrote %s\n", fig);
    return st;
}

int cmd_validate(int argc, char **argv)
{
    const char *cmd = "validate", *plan_path = NULL, *measured = NULL, *fig = NULL;
    plan_request p;
    plan_request_default(&p);
    int json = 0;
    cli_opts t;
    cli_opts_init(&t, cmd, VALIDATE_USAGE,
                  "Simulates the plan and compares it with the timeline dprun measured:\n"
                  "per iteration the predicted and measured makespans and their error, the mean\n"
                  "absolute percentage error and the maximum, and per op type (F, B, W, and the\n"
                  "stages' gradient collective, ALLREDUCE) the mean predicted and measured\n"
                  "durations. The plan options that a plan does not fix (--link-gbps, --mem-limit,\n"
                  "the cost model's) adjust the simulation.");
    cli_opt_string(&t, "plan", 'P', &plan_path, "FILE", "required", "the plan dprun ran");
    cli_opt_string(&t, "measured", 'M', &measured, "FILE", "required", "dprun's timeline CSV");
    cli_opt_flag(&t, "json", 'j', &json, "print the validation JSON contract");
    cli_opt_string(&t, "plot", 'g', &fig, "FILE", NULL,
                   "draw simulated against measured iteration time");
    plan_request_options(&t, &p);
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    plan_request_parsed(&t, &p);
    cli_opts_release(&t);
    if (r != 0) return r == 1 ? 0 : r;
    if (!plan_path || !measured) return cli_usage_error(cmd, VALIDATE_USAGE, "--plan and --measured are required");
    if (p.fixed_by_plan)
        return cli_usage_error(cmd, VALIDATE_USAGE, "--%s cannot apply: the plan file fixes it (only "
                               "--mem-limit, --link-gbps, --link-latency-us and the cost model's "
                               "--profile, --fit, --analytic do)", p.fixed_by_plan);
    dp_err err = {0};
    out_role in[] = {{"--plan", plan_path}, {"--measured", measured}}, outs[] = {{"--plot", fig}};
    if (planner_check_outputs(NULL, in, 2, outs, 1, &err) != DP_OK)
        return cli_usage_error(cmd, VALIDATE_USAGE, "%s", err.msg);
    plan pl;
    cluster_spec hw;
    sim_config cfg;
    val_result v = {0};
    /* the plan read once (--plan - is stdin), and its hash of that text, as dprun wrote it into
     * the timeline */
    char *ptext = NULL;
    dp_status st = json_slurp(plan_path, &ptext, &err);
    uint64_t hash = st == DP_OK ? dp_hash_text(ptext) : 0;
    if (st == DP_OK) st = plan_parse(ptext, plan_path, &pl, &err);
    free(ptext);
    if (st != DP_OK) return cli_fail(cmd, &err);
    st = planner_sim_config(&pl, plan_path, &p, &hw, NULL, &cfg, &err);
    cfg.hw = &hw;
    if (st == DP_OK) st = plan_check(&pl, plan_path, &err);
    if (st == DP_OK) st = validate_run(&pl, hash, &cfg, measured, &v, &err);
    if (st == DP_OK && json) {
        char *text = validate_json(&v);
        if (text) puts(text);
        free(text);
    } else if (st == DP_OK) {
        print_validation(&v, &pl, plan_path, measured);
    }
    if (st == DP_OK && fig) st = plot_validation(&v, fig, &err);
    val_result_release(&v);
    plan_release(&pl);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}
