/* cmd_explain.c — `dpsim explain`: the assumptions behind a run's answer and how far it moves
 * when each is off (planner/explain.h). */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../planner/explain.h"
#include "cli.h"

static const char EXPLAIN_USAGE[] = "dpsim explain [PLAN OPTIONS] [--share S] [--json]";

static void print_move(double change, int fit)
{
    if (!fit) printf("%8s", "no fit");
    else printf("%+7.1f%%", 100 * change);
}

static void print_text(const explain_result *x)
{
    printf("answer: %.0f tokens/s, MFU %.1f%% on %lld GPUs (schedule %s)%s\n", x->base_tps,
           100 * x->base_mfu, x->gpus, x->schedule, x->base_fits ? "" : " (does not fit)");
    printf("cost: %s\n\n", x->cost_source);
    printf("How far the throughput moves with each constant %.0f%% lower / higher (the others as "
           "they are;\n\"how\": fitted, benchmark (published, on that GPU), derived, assumed):\n\n",
           100 * x->share);
    printf("%8s %8s  %-17s %-9s  %s\n", "lower", "higher", "constant", "how", "value and source");
    for (int i = 0; i < x->n; i++) {
        const explain_row *w = &x->row[i];
        const assumption_info *a = assumption_about(w->id);
        print_move(w->change[0], w->fits[0]);
        printf(" ");
        print_move(w->change[1], w->fits[1]);
        printf("  %-17s %-9s  %s\n", a->name, a->how, w->value);
        for (int k = 0; k < 2; k++)
            if (!w->fits[k])
                printf("%19s%s: %s\n", "", k ? "higher" : "lower", w->why[k]);
    }
    printf("\nIf every fitted, derived and assumed constant above were %.0f%% off the wrong way at "
           "once, the\nthroughput would move by about %+.1f%% (their worse moves added).\n"
           "Taken as given: the datasheets' peaks, memory and link rates, and the model's shape.\n",
           100 * x->share, 100 * x->worst_sum);
}

static int print_json(const explain_result *x)
{
    cJSON *o = cJSON_CreateObject(), *rows = NULL;
    cJSON_AddNumberToObject(o, "share", x->share);
    cJSON_AddNumberToObject(o, "throughput_tokens_per_s", x->base_tps);
    cJSON_AddNumberToObject(o, "mfu", x->base_mfu);
    cJSON_AddBoolToObject(o, "feasible", x->base_fits);
    cJSON_AddNumberToObject(o, "gpus", (double)x->gpus);
    cJSON_AddStringToObject(o, "schedule", x->schedule);
    cJSON_AddStringToObject(o, "cost_model", x->cost_source);
    cJSON_AddNumberToObject(o, "worst_sum", x->worst_sum);
    rows = cJSON_AddArrayToObject(o, "assumptions");
    for (int i = 0; i < x->n; i++) {
        const explain_row *w = &x->row[i];
        const assumption_info *a = assumption_about(w->id);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "name", a->name);
        cJSON_AddStringToObject(r, "what", a->what);
        cJSON_AddStringToObject(r, "how", a->how);
        cJSON_AddStringToObject(r, "value", w->value);
        for (int k = 0; k < 2; k++) {
            const char *key = k ? "higher" : "lower";
            if (w->fits[k]) cJSON_AddNumberToObject(r, key, w->change[k]);
            else cJSON_AddNullToObject(r, key);
        }
        cJSON_AddItemToArray(rows, r);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    if (!text) return 1;
    printf("%s\n", text);
    free(text);
    return 0;
}

int cmd_explain(int argc, char **argv)
{
    const char *cmd = "explain";
    plan_request p;
    plan_request_default(&p);
    double share = 0.1;
    int json = 0;
    cli_opts t;
    cli_opts_init(&t, cmd, EXPLAIN_USAGE,
                  "Runs the plan options as sim does, then again with each constant the\n"
                  "answer rests on that was not measured on your system (the analytic\n"
                  "model's fitted efficiencies and floors, kernel and NCCL benchmark shares\n"
                  "read on other machines, latencies, the straggler spread, the usable\n"
                  "memory) scaled down and up by --share, and prints how far the throughput\n"
                  "moves with each, the largest first: the figures to check before budgeting\n"
                  "GPUs on the answer. Takes 1 + 2 x (the constants) runs: bound long ones\n"
                  "with --iterations.");
    cli_opt_double(&t, "share", 0, &share, "S", 0.001, 0.9, "0.1",
                   "relative change tried on each constant (0.1: 10% lower and higher)");
    cli_opt_flag(&t, "json", 'j', &json, "print the result as JSON on stdout");
    plan_request_options(&t, &p);
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    plan_request_parsed(&t, &p);
    cli_opts_release(&t);
    if (r != 0) return r == 1 ? 0 : r;
    dp_err err = {0};
    explain_result *x = calloc(1, sizeof *x);
    if (!x) return cli_fail(cmd, &(dp_err){DP_ERR_NOMEM, "out of memory"});
    dp_status st = explain_run(&p, share, x, cli_stderr_is_tty() ? cli_progress : NULL,
                               (void *)"explaining (runs)", &err);
    if (cli_stderr_is_tty()) fprintf(stderr, "\n");
    int rc;
    if (st == DP_ERR_INVALID) rc = cli_usage_error(cmd, EXPLAIN_USAGE, "%s", err.msg);
    else if (st != DP_OK) rc = cli_fail(cmd, &err);
    else rc = json ? print_json(x) : (print_text(x), 0);
    free(x);
    return rc;
}
