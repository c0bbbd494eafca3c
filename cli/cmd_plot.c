/* dpsim plot KIND — figures drawn with gnuplot. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/csv_table.h"
#include "../plots/html.h"
#include "../plots/plot.h"
#include "../scheduler/schedule.h"
#include "../planner/panels.h"
#include "../planner/study.h"
#include "../sim/timeline.h"
#include "../traces/trace.h"
#include "../traces/trace_stats.h"
#include "cli.h"

static const char PLOT_USAGE[] = "dpsim plot KIND [OPTIONS] FILE -o OUT.png|OUT.svg";
static const char LENGTHS_USAGE[] = "dpsim plot lengths [--format F] FILE [-o OUT.png|OUT.svg]";
static const char SWEEP_USAGE[] = "dpsim plot sweep --x COL --y COL [--series COL] [--where COL=V] "
                                  "FILE [-o OUT.png|OUT.svg]";
static const char TIMELINE_USAGE[] =
    "dpsim plot timeline [--iteration K] [--repeat R] [--replica D] FILE [-o OUT.png|OUT.svg]";
static const char SCHEDULES_USAGE[] = "dpsim plot schedules [--schedules LIST] [PLAN OPTIONS] "
                                      "[-o OUT.png] [--memory OUT.png] [--html PAGE.html]";

static void plot_help(void)
{
    printf("usage: %s\n\n"
           "Draws a figure with gnuplot (PNG, or SVG when OUT ends in .svg).\n\n"
           "Kinds:\n"
           "  lengths FILE    log2 histogram of a trace's input and target lengths\n"
           "  sweep FILE      lines of one CSV column against another, one line per series\n"
           "                  (a dpsim sweep output, or any CSV with a header): --x, --y,\n"
           "                  --series, --where COL=VALUE (repeatable), --logx, --title, --ylabel\n"
           "  timeline FILE   Gantt chart of one iteration of a timeline CSV (dpsim sim\n"
           "                  --timeline, or dprun's measured one): --iteration K\n"
           "  schedules       several schedules of the same micro-batches as panels on one\n"
           "                  time axis (and their memory, and an interactive page):\n"
           "                  --schedules, the plan options; dpsim plot schedules --help\n\n"
           "Options:\n"
           "  -o, --output OUT  figure to write (.png or .svg)             [lengths.png]\n"
           "  -f, --format F    trace format: auto | csv | jsonl | npy | cot  [auto]\n"
           "  -h, --help        this help\n",
           PLOT_USAGE);
}

static int set_trace_format(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    if (trace_format_parse(arg, ctx) == 0) return 0;
    cli_usage_error(cmd, usage, "unknown --format \"%s\"", arg);
    return -1;
}

static int plot_lengths_main(int argc, char **argv)
{
    const char *cmd = "plot lengths", *out = "lengths.png", *file[1];
    trace_format fmt = TRACE_FORMAT_AUTO;
    int n_file = 0;
    cli_opts ot;
    cli_opts_init(&ot, cmd, LENGTHS_USAGE,
                  "Log2 histogram of a trace's input and target lengths (gnuplot; SVG when OUT\n"
                  "ends in .svg).");
    cli_opt_string(&ot, "output", 'o', &out, "OUT", "lengths.png", "figure to write (.png or .svg)");
    cli_opt_call(&ot, "format", 'f', set_trace_format, &fmt, "F", "auto",
                 "trace format: auto | csv | jsonl | npy | cot");
    int r = cli_opts_parse(&ot, argc, argv, file, 1, &n_file);
    cli_opts_release(&ot);
    if (r != 0) return r == 1 ? 0 : r;
    if (n_file != 1) return cli_usage_error(cmd, LENGTHS_USAGE, "expected exactly one trace FILE");
    const char *path = file[0];
    dp_err err = {0};
    out_role in[] = {{"FILE", path}}, outs[] = {{"-o", out}};
    if (planner_check_outputs(NULL, in, 1, outs, 1, &err) != DP_OK)
        return cli_usage_error(cmd, LENGTHS_USAGE, "%s", err.msg);
    trace t;
    trace_stats s = {0};
    trace_init(&t);
    dp_status st = trace_load(path, fmt, NULL, NULL, &t, &err);
    if (st == DP_OK) st = trace_stats_compute(&t, &s, &err);
    if (st == DP_OK) {
        char title[512];
        snprintf(title, sizeof title, "Sequence lengths of %s (%zu samples)", path, t.n);
        st = plot_lengths(&s, title, out, &err);
    }
    if (st == DP_OK) fprintf(stderr, "dpsim: wrote %s\n", out);
    trace_stats_release(&s);
    trace_release(&t);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}

/* ---- sweep: lines from a CSV ------------------------------------------------------------- */

#define MAX_WHERE 8
#define MAX_SERIES 16

typedef struct sweep_ctx {
    const char *x, *y, *series;
    const char *where_col[MAX_WHERE], *where_val[MAX_WHERE];
    int n_where;
    int ix, iy, is, iw[MAX_WHERE];
    int ifeasible, ioom;  /* the sweep CSV's feasible and oom columns, -1 if absent */
    int n_keys;           /* grid columns: those before the metrics (sweep CSVs), else 0 */
    char *key_name[16];   /* their names */
    char *key_first[16];  /* each one's first value, and whether it varies */
    int key_varies[16];
    char *names[MAX_SERIES];
    int n_names;
    plot_point *pts;
    size_t n, cap;
    long not_drawn;       /* infeasible or out-of-memory points: marked, not drawn as values */
} sweep_ctx;

static dp_status sweep_header(void *vctx, const csv_row *h, dp_err *err)
{
    sweep_ctx *c = vctx;
    csv_column cols[3 + MAX_WHERE] = {{c->x, 1}, {c->y, 1}, {c->series ? c->series : "", c->series != NULL}};
    for (int i = 0; i < c->n_where; i++) cols[3 + i] = (csv_column){c->where_col[i], 1};
    int idx[3 + MAX_WHERE];
    dp_status st = csv_header_map(h, cols, 3 + (size_t)c->n_where, idx, err);
    if (st != DP_OK) return st;
    c->ix = idx[0], c->iy = idx[1], c->is = c->series ? idx[2] : -1;
    for (int i = 0; i < c->n_where; i++) c->iw[i] = idx[3 + i];
    c->ifeasible = c->ioom = -1;
    for (size_t i = 0; i < h->nfields; i++) {
        if (strcmp(h->fields[i], "feasible") == 0) c->ifeasible = (int)i;
        if (strcmp(h->fields[i], "oom") == 0) c->ioom = (int)i;
    }
    /* a sweep CSV: the grid columns come before throughput_tokens_per_s */
    for (size_t i = 0; i < h->nfields && strcmp(h->fields[i], "throughput_tokens_per_s") != 0; i++)
        if (i + 1 < h->nfields && c->n_keys < 16) c->key_name[c->n_keys++] = dp_strdup(h->fields[i]);
    int is_sweep = 0;
    for (size_t i = 0; i < h->nfields; i++) is_sweep |= strcmp(h->fields[i], "throughput_tokens_per_s") == 0;
    if (!is_sweep) c->n_keys = 0;
    return DP_OK;
}

static dp_status sweep_row(void *vctx, const csv_row *r, dp_err *err)
{
    sweep_ctx *c = vctx;
    for (int i = 0; i < c->n_where; i++)
        if (strcmp(r->fields[c->iw[i]], c->where_val[i]) != 0) return DP_OK;
    for (int k = 0; k < c->n_keys; k++) { /* which grid columns vary among the rows kept */
        const char *v = r->fields[k];
        if (!c->key_first[k]) c->key_first[k] = dp_strdup(v);
        else if (strcmp(c->key_first[k], v) != 0) c->key_varies[k] = 1;
    }
    if ((c->ifeasible >= 0 && strcmp(r->fields[c->ifeasible], "1") != 0) ||
        (c->ioom >= 0 && strcmp(r->fields[c->ioom], "0") != 0)) {
        c->not_drawn++; /* a failed point has no value: drawing it at 0 would be a lie */
        return DP_OK;
    }
    double x, y;
    if (dp_parse_f64(r->fields[c->ix], &x) != 0 || dp_parse_f64(r->fields[c->iy], &y) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s or %s is not a number", r->path, r->line, c->x, c->y);
    char label[600];
    if (c->is >= 0) snprintf(label, sizeof label, "%s=%s", c->series, r->fields[c->is]);
    const char *name = c->is >= 0 ? label : c->y; /* the legend names its key */
    int k = 0;
    while (k < c->n_names && strcmp(c->names[k], name) != 0) k++;
    if (k == c->n_names) {
        if (c->n_names == MAX_SERIES)
            return dp_fail(err, DP_ERR_INVALID, "%s:%ld: more than %d series", r->path, r->line, MAX_SERIES);
        c->names[c->n_names++] = dp_strdup(name);
    }
    if (dp_grow((void **)&c->pts, &c->cap, c->n + 1, sizeof *c->pts) != DP_OK)
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    c->pts[c->n++] = (plot_point){k, x, y};
    return DP_OK;
}

static int cmp_point(const void *a, const void *b)
{
    const plot_point *p = a, *q = b;
    if (p->series != q->series) return p->series - q->series;
    return (p->x > q->x) - (p->x < q->x);
}

static int add_where(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    sweep_ctx *c = ctx;
    char *eq = strchr(arg, '=');
    if (!eq || c->n_where == MAX_WHERE) {
        cli_usage_error(cmd, usage, "--where takes COL=VALUE (at most %d)", MAX_WHERE);
        return -1;
    }
    *eq = '\0'; /* argv's own string, cut in place */
    c->where_col[c->n_where] = arg;
    c->where_val[c->n_where++] = eq + 1;
    return 0;
}

static int plot_sweep_main(int argc, char **argv)
{
    const char *cmd = "plot sweep", *out = "sweep.png", *title = NULL, *ylabel = NULL, *xlabel = NULL;
    const char *file[1];
    sweep_ctx c = {0};
    int logx = 0, n_file = 0;
    cli_opts ot;
    cli_opts_init(&ot, cmd, SWEEP_USAGE,
                  "Lines of one CSV column against another, one line per series (a dpsim sweep\n"
                  "output, or any CSV with a header). Infeasible and OOM points are marked, not\n"
                  "drawn as values; a column that varies but is neither the x axis, the series nor\n"
                  "filtered, so that one series has several points at one x, is warned about.");
    cli_opt_string(&ot, "output", 'o', &out, "OUT", "sweep.png", "figure to write (.png or .svg)");
    cli_opt_string(&ot, "x", 'x', &c.x, "COL", "required", "the x column");
    cli_opt_string(&ot, "y", 'y', &c.y, "COL", "required", "the y column");
    cli_opt_string(&ot, "series", 's', &c.series, "COL", NULL, "one line per value of this column");
    cli_opt_call(&ot, "where", 'w', add_where, &c, "COL=VALUE", NULL,
                 "keep the rows where COL is VALUE (repeatable)");
    cli_opt_flag(&ot, "logx", 'l', &logx, "logarithmic x axis");
    cli_opt_string(&ot, "title", 't', &title, "TEXT", NULL, "the figure's title");
    cli_opt_string(&ot, "ylabel", 'Y', &ylabel, "TEXT", "the y column", "the y axis label");
    cli_opt_string(&ot, "xlabel", 'X', &xlabel, "TEXT", "the x column", "the x axis label");
    int r = cli_opts_parse(&ot, argc, argv, file, 1, &n_file);
    cli_opts_release(&ot);
    if (r != 0) return r == 1 ? 0 : r;
    if (n_file != 1) return cli_usage_error(cmd, SWEEP_USAGE, "expected exactly one CSV FILE");
    if (!c.x || !c.y) return cli_usage_error(cmd, SWEEP_USAGE, "--x and --y are required");
    dp_err err = {0};
    out_role in[] = {{"FILE", file[0]}}, outs[] = {{"-o", out}};
    if (planner_check_outputs(NULL, in, 1, outs, 1, &err) != DP_OK)
        return cli_usage_error(cmd, SWEEP_USAGE, "%s", err.msg);
    dp_status st = csv_read_file(file[0], 1, sweep_header, sweep_row, &c, &err);
    if (st == DP_OK && c.n == 0)
        st = dp_fail(&err, DP_ERR_INVALID, "%s: no feasible row matches the --where filters%s",
                     file[0], c.not_drawn ? " (every matching point is infeasible or OOM)" : "");
    /* a dimension left free draws saw-teeth: several points of one series at one x */
    qsort(c.pts, c.n, sizeof *c.pts, cmp_point);
    int stacked = 0;
    for (size_t i = 1; i < c.n; i++)
        stacked |= c.pts[i].series == c.pts[i - 1].series && c.pts[i].x == c.pts[i - 1].x;
    for (int k = 0; st == DP_OK && stacked && k < c.n_keys; k++) {
        const char *kn = c.key_name[k];
        int used = strcmp(kn, c.x) == 0 || (c.series && strcmp(kn, c.series) == 0);
        for (int i = 0; i < c.n_where; i++) used |= strcmp(kn, c.where_col[i]) == 0;
        if (c.key_varies[k] && !used)
            fprintf(stderr, "dpsim plot sweep: warning: grid column %s varies but is neither --x, "
                    "--series nor a --where filter: its points share one line at the same x\n",
                    kn);
    }
    if (st == DP_OK) {
        char t[512], full[700];
        snprintf(t, sizeof t, "%s against %s", c.y, c.x);
        const char *head = title ? title : t;
        if (c.not_drawn) {
            snprintf(full, sizeof full, "%s\n(%ld infeasible or out-of-memory points not drawn)",
                     head, c.not_drawn);
            fprintf(stderr, "dpsim plot sweep: %ld infeasible or out-of-memory points are not drawn\n",
                    c.not_drawn);
        } else {
            snprintf(full, sizeof full, "%s", head);
        }
        st = plot_lines(c.pts, (int)c.n, (const char *const *)c.names, c.n_names, full,
                        xlabel ? xlabel : c.x, ylabel ? ylabel : c.y, logx, out, &err);
    }
    if (st == DP_OK) fprintf(stderr, "dpsim: wrote %s\n", out);
    for (int k = 0; k < c.n_keys; k++) free(c.key_name[k]), free(c.key_first[k]);
    for (int i = 0; i < c.n_names; i++) free(c.names[i]);
    free(c.pts);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}

/* ---- timeline: Gantt chart of a timeline CSV -------------------------------------------------- */

typedef struct tl_ctx {
    int iteration, repeat, replica; /* the run drawn: one iteration, one repeat, one replica */
    int idx[8];
    plot_box *boxes;
    size_t n, cap;
    int rows;
    double t0;
} tl_ctx;

static dp_status tl_header(void *vctx, const csv_row *h, dp_err *err)
{
    tl_ctx *c = vctx;
    /* repeat: dprun's measured runs of an iteration; replica: the data-parallel replicas (both
     * optional: a simulated timeline has one run, and older ones no replica column) */
    static const csv_column cols[8] = {{"iteration", 1}, {"stage", 1},    {"op", 1},
                                       {"mb", 1},        {"start_us", 1}, {"end_us", 1},
                                       {"repeat", 0},    {"replica", 0}};
    return csv_header_map(h, cols, 8, c->idx, err);
}

static dp_status tl_row(void *vctx, const csv_row *r, dp_err *err)
{
    tl_ctx *c = vctx;
    int64_t it, stage, mb;
    double t0, t1;
    if (dp_parse_i64(r->fields[c->idx[0]], 0, INT32_MAX, &it) != 0 ||
        dp_parse_i64(r->fields[c->idx[1]], 0, 4096, &stage) != 0 ||
        dp_parse_i64(r->fields[c->idx[3]], -1, INT32_MAX, &mb) != 0) /* -1: a stage-wide op */
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: bad iteration, stage or mb", r->path, r->line);
    dp_status st = timeline_row_times(r->path, r->line, r->fields[c->idx[4]], r->fields[c->idx[5]],
                                      &t0, &t1, err);
    if (st != DP_OK) return st;
    if (it != c->iteration) return DP_OK;
    int64_t rep = 0, replica = 0;
    if ((c->idx[6] >= 0 && dp_parse_i64(r->fields[c->idx[6]], 0, INT32_MAX, &rep) != 0) ||
        (c->idx[7] >= 0 && dp_parse_i64(r->fields[c->idx[7]], 0, INT32_MAX, &replica) != 0))
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: bad repeat or replica", r->path, r->line);
    if (rep != c->repeat || replica != c->replica) return DP_OK; /* another run: not overlaid */
    const char *op = r->fields[c->idx[2]];
    int kind = strcmp(op, "F") == 0 ? 0 : strcmp(op, "B") == 0 ? 1 : strcmp(op, "W") == 0 ? 2 : -1;
    if (kind < 0) return DP_OK;
    if (dp_grow((void **)&c->boxes, &c->cap, c->n + 1, sizeof *c->boxes) != DP_OK)
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    if (c->n == 0 || t0 / 1e3 < c->t0) c->t0 = t0 / 1e3;
    c->boxes[c->n++] = (plot_box){(int)stage, t0 / 1e3, t1 / 1e3, kind, (int)mb};
    if (stage + 1 > c->rows) c->rows = (int)stage + 1;
    return DP_OK;
}

static int plot_timeline_main(int argc, char **argv)
{
    const char *cmd = "plot timeline", *out = "timeline.png", *file[1];
    tl_ctx c = {0};
    int n_file = 0;
    cli_opts ot;
    cli_opts_init(&ot, cmd, TIMELINE_USAGE,
                  "Gantt chart of one iteration of a timeline CSV (dpsim sim --timeline, or\n"
                  "dprun's measured one).");
    cli_opt_string(&ot, "output", 'o', &out, "OUT", "timeline.png", "figure to write (.png or .svg)");
    cli_opt_int(&ot, "iteration", 'i', &c.iteration, "K", 0, INT32_MAX, "0", "the iteration drawn");
    cli_opt_int(&ot, "repeat", 0, &c.repeat, "R", 0, INT32_MAX, "0",
                "a measured timeline's run of it (dprun --repeats)");
    cli_opt_int(&ot, "replica", 0, &c.replica, "D", 0, INT32_MAX, "0", "the data-parallel replica drawn");
    int r = cli_opts_parse(&ot, argc, argv, file, 1, &n_file);
    cli_opts_release(&ot);
    if (r != 0) return r == 1 ? 0 : r;
    if (n_file != 1) return cli_usage_error(cmd, TIMELINE_USAGE, "expected exactly one timeline CSV");
    dp_err err = {0};
    dp_status st = csv_read_file(file[0], 1, tl_header, tl_row, &c, &err);
    if (st == DP_OK && c.n == 0)
        st = dp_fail(&err, DP_ERR_INVALID, "%s: no compute ops in iteration %d, repeat %d, replica %d",
                     file[0], c.iteration, c.repeat, c.replica);
    if (st == DP_OK) {
        for (size_t i = 0; i < c.n; i++) c.boxes[i].t0_ms -= c.t0, c.boxes[i].t1_ms -= c.t0;
        char title[512];
        int at = snprintf(title, sizeof title, "Pipeline timeline of %s, iteration %d", file[0],
                          c.iteration);
        if (c.idx[6] >= 0 && at > 0 && (size_t)at < sizeof title)
            at += snprintf(title + at, sizeof title - (size_t)at, ", repeat %d", c.repeat);
        if (c.idx[7] >= 0 && at > 0 && (size_t)at < sizeof title)
            snprintf(title + at, sizeof title - (size_t)at, ", replica %d", c.replica);
        st = plot_gantt(c.boxes, (int)c.n, c.rows, title, out, &err);
    }
    if (st == DP_OK) fprintf(stderr, "dpsim: wrote %s\n", out);
    free(c.boxes);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}

/* ---- schedules: panels of one iteration under several schedules ------------------------------ */

static int plot_schedules_main(int argc, char **argv)
{
    const char *cmd = "plot schedules", *out = "schedules.png", *mem_out = NULL, *html = NULL;
    const char *schedules = "gpipe,1f1b,zb1", *title = NULL;
    int iteration = 0, replica = 0;
    plan_request p;
    plan_request_default(&p);
    cli_opts ot;
    cli_opts_init(&ot, cmd, SCHEDULES_USAGE,
                  "Runs one iteration of the plan options under each schedule and draws them as\n"
                  "panels on one shared time axis: each panel's title gives its iteration time,\n"
                  "micro-batches and pipeline bubble with the schedule's closed form; boxes carry\n"
                  "a micro-batch id that is the same in every panel, and its size where it fits;\n"
                  "interleaved chunks in shades, weight gradients in green. With --toy-costs the\n"
                  "textbook's figure: dpsim plot schedules --toy-costs 1,2,1.");
    cli_opt_string(&ot, "output", 'o', &out, "OUT", "schedules.png", "figure to write (.png or .svg)");
    cli_opt_string(&ot, "schedules", 0, &schedules, "LIST", "gpipe,1f1b,zb1",
                   "the schedules, one panel each (gpipe, 1f1b, interleaved, adaptive, zb1,\n"
                   "zbv, dualpipev)");
    cli_opt_string(&ot, "memory", 0, &mem_out, "OUT", NULL,
                   "also each panel's memory per stage over the iteration (.png or .svg)");
    cli_opt_string(&ot, "html", 0, &html, "PAGE", NULL,
                   "also an interactive page: hover, step, play (self-contained HTML)");
    cli_opt_string(&ot, "title", 0, &title, "T", "the model, layout and batching",
                   "the figure's title");
    cli_opt_int(&ot, "iteration", 'i', &iteration, "K", 0, INT32_MAX, "0", "the iteration drawn");
    cli_opt_int(&ot, "replica", 0, &replica, "R", 0, 4095, "0", "the data-parallel replica drawn");
    plan_request_options(&ot, &p);
    int r = cli_opts_parse(&ot, argc, argv, NULL, 0, NULL);
    plan_request_parsed(&ot, &p);
    cli_opts_release(&ot);
    if (r != 0) return r == 1 ? 0 : r;
    method_lists ml;
    if (planner_method_lists(cmd, SCHEDULES_USAGE, p.batching, schedules, 1, &ml) != 0) return EXIT_USAGE;
    if (ml.nb != 1)
        return cli_usage_error(cmd, SCHEDULES_USAGE, "--batching takes one batching here");
    p.schedule = schedule_for_options(ml.schedules, ml.ns);
    dp_err err = {0};
    out_role outs[] = {{"-o", out}, {"--memory", mem_out}, {"--html", html}};
    if (planner_check_outputs(&p, NULL, 0, outs, 3, &err) != DP_OK)
        return cli_usage_error(cmd, SCHEDULES_USAGE, "%s", err.msg);
    plan_env env;
    dp_status st = planner_setup(&p, &env, &err);
    if (st != DP_OK) {
        plan_env_release(&env);
        return st == DP_ERR_INVALID ? cli_usage_error(cmd, SCHEDULES_USAGE, "%s", err.msg)
                                    : cli_fail(cmd, &err);
    }
    panel ps[METHOD_LIST_MAX];
    int n = 0;
    for (int i = 0; st == DP_OK && i < ml.ns; i++) {
        study_opts o;
        planner_study_opts(&p, &env, p.batching, ml.schedules[i], &o);
        st = panel_collect(&o, &env.trace, iteration, replica, &ps[n], &err);
        if (st == DP_OK) n++;
        else dp_err_prefix(&err, "--schedules %s", ml.schedules[i]);
    }
    char auto_title[512];
    snprintf(auto_title, sizeof auto_title, "%s, pp %d x dp %d x tp %d on %s, %s batching, iteration %d",
             env.model.name, p.pp, p.dp, p.cost.tp, env.hw.gpu.name, p.batching, iteration);
    if (env.cm->toy.on)
        snprintf(auto_title, sizeof auto_title, "Textbook costs f %g, b %g, w %g ms; %d stages, %.300s",
                 env.cm->toy.f_ms, env.cm->toy.b_ms, env.cm->toy.w_ms, p.pp, env.trace_path);
    if (!title) title = auto_title;
    char wrote[4200] = "";
    if (st == DP_OK && (st = plot_panels(ps, n, title, out, &err)) == DP_OK)
        snprintf(wrote, sizeof wrote, "%s", out);
    if (st == DP_OK && mem_out && (st = plot_panel_memory(ps, n, title, mem_out, &err)) == DP_OK)
        snprintf(wrote + strlen(wrote), sizeof wrote - strlen(wrote), ", %s", mem_out);
    if (st == DP_OK && html && (st = html_write_panels(ps, n, title, html, &err)) == DP_OK)
        snprintf(wrote + strlen(wrote), sizeof wrote - strlen(wrote), ", %s", html);
    if (st == DP_OK) fprintf(stderr, "dpsim: wrote %s\n", wrote);
    for (int i = 0; i < n; i++) panel_release(&ps[i]);
    plan_env_release(&env);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}

int cmd_plot(int argc, char **argv)
{
    if (argc < 2) return cli_usage_error("plot", PLOT_USAGE, "missing figure KIND");
    const char *kind = argv[1];
    if (strcmp(kind, "--help") == 0 || strcmp(kind, "-h") == 0) {
        plot_help();
        return 0;
    }
    if (strcmp(kind, "lengths") == 0) return plot_lengths_main(argc - 1, argv + 1);
    if (strcmp(kind, "sweep") == 0) return plot_sweep_main(argc - 1, argv + 1);
    if (strcmp(kind, "timeline") == 0) return plot_timeline_main(argc - 1, argv + 1);
    if (strcmp(kind, "schedules") == 0) return plot_schedules_main(argc - 1, argv + 1);
    return cli_usage_error("plot", PLOT_USAGE,
                           "unknown figure kind \"%s\" (lengths, sweep, timeline, schedules)", kind);
}
