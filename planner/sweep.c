/* sweep.c — a grid over plan options into a resumable CSV (sweep.h). */
#include "sweep.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../common/csv_table.h"
#include "../common/json_util.h"
#include "../common/outfile.h"
#include "../common/pool.h"
#include "setup.h"
#include "study.h"

#define RETURN_ON_ERROR(expr)                                                                      \
    do {                                                                                           \
        dp_status st_ = (expr);                                                                    \
        if (st_ != DP_OK) return st_;                                                              \
    } while (0)

const char *const SWEEP_METRIC_COLUMNS =
    "throughput_tokens_per_s,padding_efficiency,encoder_padding_efficiency,"
    "decoder_padding_efficiency,bubble_fraction,peak_mem_mb,oom,feasible,iterations,time_s,"
    "mean_iteration_ms,mean_closed_form_ms,plan_ms_per_iteration,plan_ms_p90,events,tflops_per_gpu,"
    "mfu,error";

/* ---- the grid ------------------------------------------------------------------------------- */

/* A grid's boolean value (the analytic key): true or false, 1 and 0 the same. */
static int grid_bool(const char *v, int *out)
{
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0) return *out = 1, 0;
    if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0) return *out = 0, 0;
    return -1;
}

/* Cuts g->text ("k1=a,b k2=c") into keys and values. 0, or -1 with msg. */
static int split_grid(sweep_grid *g, char *msg, size_t cap)
{
    g->points = 1;
    char *save = NULL;
    for (char *tok = strtok_r(g->text, " \t\n", &save); tok; tok = strtok_r(NULL, " \t\n", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1]) {
            snprintf(msg, cap, "grid entry \"%s\" is not KEY=V1,V2,...", tok);
            return -1;
        }
        if (g->nkeys == SWEEP_MAX_KEYS) {
            snprintf(msg, cap, "at most %d grid keys", SWEEP_MAX_KEYS);
            return -1;
        }
        *eq = '\0';
        int k = g->nkeys++;
        g->keys[k] = tok;
        for (int j = 0; j < k; j++)
            if (strcmp(g->keys[j], tok) == 0) {
                snprintf(msg, cap, "grid key \"%s\" appears twice", tok);
                return -1;
            }
        for (char *v = eq + 1;;) { /* every value between commas, none empty */
            char *comma = strchr(v, ',');
            if (comma) *comma = '\0';
            if (!*v) {
                snprintf(msg, cap, "grid key \"%s\": value %d is empty", tok, g->nvalues[k] + 1);
                return -1;
            }
            if (g->nvalues[k] == SWEEP_MAX_VALUES) {
                snprintf(msg, cap, "at most %d values per grid key", SWEEP_MAX_VALUES);
                return -1;
            }
            g->values[k][g->nvalues[k]++] = v;
            if (!comma) break;
            v = comma + 1;
        }
        if (g->points > SWEEP_MAX_POINTS / g->nvalues[k]) {
            snprintf(msg, cap, "the grid has more than %d points (a sweep of that size is a "
                     "mistake, or several sweeps)", SWEEP_MAX_POINTS);
            return -1;
        }
        g->points *= g->nvalues[k];
    }
    if (g->nkeys == 0) {
        snprintf(msg, cap, "--grid is empty");
        return -1;
    }
    return 0;
}

/* The canonical text of value v of key into buf (analytic: true or false). 0, or -1. */
static int canonical_of(const plan_request *p, const char *key, const char *v, char *buf,
                        size_t cap)
{
    int b;
    if (strcmp(key, "analytic") == 0) {
        if (grid_bool(v, &b) != 0) return -1;
        snprintf(buf, cap, "%s", b ? "true" : "false");
        return 0;
    }
    return plan_request_canonical(p, key, v, buf, cap);
}

int sweep_grid_parse(const plan_request *base, const char *spec, sweep_grid *g, const char *cmd,
                     const char *usage)
{
    memset(g, 0, sizeof *g);
    if (strlen(spec) >= sizeof g->text)
        return cli_usage_error(cmd, usage, "--grid is longer than %zu characters",
                               sizeof g->text - 1);
    strcpy(g->text, spec);
    char msg[320];
    if (split_grid(g, msg, sizeof msg) != 0) return cli_usage_error(cmd, usage, "%s", msg);
    /* every value a valid option value, checked once here, not in the workers */
    for (int k = 0; k < g->nkeys; k++)
        for (int v = 0; v < g->nvalues[k]; v++) {
            int b;
            if (strcmp(g->keys[k], "analytic") == 0) {
                if (grid_bool(g->values[k][v], &b) != 0)
                    return cli_usage_error(cmd, usage, "grid key analytic: \"%s\" is not true or "
                                           "false", g->values[k][v]);
                continue;
            }
            plan_request probe = *base;
            int rc = plan_request_set(&probe, g->keys[k], g->values[k][v], cmd, usage);
            if (rc == 0)
                return cli_usage_error(cmd, usage, "grid key \"%s\" is not a plan option",
                                       g->keys[k]);
            if (rc < 0) return EXIT_USAGE;
            /* a model or a cluster that names nothing is the request's error, not a point's
             * result: refused before any point runs */
            dp_err bad = {0};
            model_spec m;
            cluster_spec c;
            if ((strcmp(g->keys[k], "model") == 0 &&
                 model_resolve(g->values[k][v], &m, &bad) != DP_OK) ||
                (strcmp(g->keys[k], "hw") == 0 && cluster_resolve(g->values[k][v], &c, &bad) != DP_OK))
                return cli_usage_error(cmd, usage, "grid key %s: %s", g->keys[k], bad.msg);
        }
    /* the canonical texts; a value listed twice would run its points twice */
    for (int k = 0; k < g->nkeys; k++)
        for (int v = 0; v < g->nvalues[k]; v++) {
            char *at = g->store + g->used;
            size_t room = sizeof g->store - g->used;
            if (canonical_of(base, g->keys[k], g->values[k][v], at, room) != 0 ||
                strlen(at) + 1 >= room)
                return cli_usage_error(cmd, usage, "grid key \"%s\": value \"%s\" cannot be read "
                                       "back", g->keys[k], g->values[k][v]);
            g->canon[k][v] = at;
            g->used += strlen(at) + 1;
            for (int w = 0; w < v; w++)
                if (strcmp(g->canon[k][w], at) == 0)
                    return cli_usage_error(cmd, usage, "grid key \"%s\" lists one value twice "
                                           "(\"%s\" and \"%s\"): every point would run twice",
                                           g->keys[k], g->values[k][w], g->values[k][v]);
        }
    return 0;
}

/* Value index of key k at point i (the last key varies fastest). */
static int value_at(const sweep_grid *g, long i, int k)
{
    long stride = 1;
    for (int j = g->nkeys - 1; j > k; j--) stride *= g->nvalues[j];
    return (int)(i / stride % g->nvalues[k]);
}

void sweep_point_request(const plan_request *base, const sweep_grid *g, long i, plan_request *p)
{
    *p = *base;
    for (int k = 0; k < g->nkeys; k++) {
        const char *v = g->values[k][value_at(g, i, k)];
        if (strcmp(g->keys[k], "analytic") == 0) grid_bool(v, &p->cost.analytic);
        else plan_request_set(p, g->keys[k], v, "sweep", ""); /* checked by sweep_grid_parse */
    }
}

size_t sweep_point_key(const sweep_grid *g, long i, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (int k = 0; k < g->nkeys && n + 1 < cap; k++) {
        n += csv_format_field(out + n, cap - n, g->values[k][value_at(g, i, k)]);
        if (n + 1 < cap) out[n++] = ',', out[n] = '\0';
    }
    return n;
}

void sweep_run_point(const plan_request *base, const sweep_grid *g, long i, char *row, size_t cap)
{
    plan_request p;
    sweep_point_request(base, g, i, &p);
    char error[DP_ERR_MSG_MAX] = "";
    plan_env env;
    dp_err err = {0};
    study_result r;
    memset(&r, 0, sizeof r);
    dp_status st = planner_setup(&p, &env, &err);
    if (st == DP_OK) {
        study_opts o;
        planner_study_opts(&p, &env, p.batching, p.schedule, &o);
        st = study_run(&o, &env.trace, &r, &err);
    }
    plan_env_release(&env);
    if (st == DP_ERR_IO || st == DP_ERR_PARSE || st == DP_ERR_NOMEM) { /* not the configuration's:
                                                                         * no row (sweep.h) */
        char key[SWEEP_ROW_MAX];
        size_t k = sweep_point_key(g, i, key, sizeof key);
        if (k > 0 && key[k - 1] == ',') key[k - 1] = '\0'; /* the cells, without the row's comma */
        snprintf(row, cap, "%cthe point %.300s: %.900s", SWEEP_NO_ROW, key, err.msg);
        for (char *c = row; *c; c++)
            if (*c == '\n' || *c == '\r') *c = ' ';
        study_result_release(&r);
        return;
    }
    if (st != DP_OK) snprintf(error, sizeof error, "%s", err.msg);
    else if (r.why[0]) snprintf(error, sizeof error, "%s", r.why);
    for (char *c = error; *c; c++) /* one row on one line */
        if (*c == '\n' || *c == '\r') *c = ' ';
    int fits = st == DP_OK && study_result_fits(&r); /* no throughput where it does not fit */
    double mit = 0, mcf = 0;
    if (fits)
        mit = r.sum_ms / r.iterations, mcf = r.sum_closed_form_ms / r.iterations;
    char cf[32] = ""; /* empty where the schedule has no closed form (adaptive) */
    if (!isnan(mcf)) snprintf(cf, sizeof cf, "%.4f", mcf);
    size_t n = sweep_point_key(g, i, row, cap);
    n += (size_t)snprintf(row + n, cap - n,
                          "%.2f,%.6f,%.6f,%.6f,%.6f,%.1f,%d,%d,%d,%.6f,%.4f,%s,%.4f,%.4f,%llu,%.3f,%.5f,",
                          fits ? r.throughput_tokens_per_s : 0, r.padding_efficiency,
                          r.enc_padding_efficiency, r.dec_padding_efficiency,
                          study_mean_bubble(&r), study_max_peak_mb(&r), r.oom,
                          fits, r.iterations, r.time_s, mit, cf,
                          r.plan_ms_median, r.plan_ms_p90, (unsigned long long)r.events,
                          fits ? r.tflops_per_gpu : 0, fits ? r.mfu : 0);
    if (n < cap) csv_format_field(row + n, cap - n, error);
    study_result_release(&r);
}

/* The point of a row's first cells (unquoted), or -1. */
static long point_of_cells(const plan_request *base, const sweep_grid *g,
                           const char *const *cells, int n)
{
    if (n < g->nkeys) return -1;
    long idx = 0;
    for (int k = 0; k < g->nkeys; k++) {
        int found = -1;
        for (int v = 0; v < g->nvalues[k] && found < 0; v++)
            if (strcmp(g->values[k][v], cells[k]) == 0) found = v;
        if (found < 0) { /* written another way ("1" for "true") */
            char canon[SWEEP_SPEC_MAX];
            if (canonical_of(base, g->keys[k], cells[k], canon, sizeof canon) == 0)
                for (int v = 0; v < g->nvalues[k] && found < 0; v++)
                    if (strcmp(g->canon[k][v], canon) == 0) found = v;
        }
        if (found < 0) return -1;
        idx = idx * g->nvalues[k] + found;
    }
    return idx;
}

long sweep_point_of_row(const plan_request *base, const sweep_grid *g, const char *row)
{
    char buf[SWEEP_ROW_MAX];
    const char *cells[SWEEP_MAX_KEYS];
    size_t n = 0;
    int k = 0;
    for (const char *c = row; k < g->nkeys; k++) {
        cells[k] = buf + n;
        if (*c == '"') { /* quoted: up to the lone closing quote, "" one quote */
            for (c++; *c && !(c[0] == '"' && c[1] != '"'); c++) {
                if (c[0] == '"') c++;
                if (n + 1 < sizeof buf) buf[n++] = *c;
            }
            if (*c != '"') return -1;
            c++;
        } else {
            for (; *c && *c != ',' && *c != '\n' && *c != '\r'; c++)
                if (n + 1 < sizeof buf) buf[n++] = *c;
        }
        if (n + 1 >= sizeof buf) return -1; /* longer than any row sweep writes */
        buf[n++] = '\0';
        if (*c == ',') c++;
        else if (k + 1 < g->nkeys) return -1;
    }
    return point_of_cells(base, g, cells, k);
}

/* ---- the output file ------------------------------------------------------------------------- */

typedef struct resume_read {
    sweep *s;
    char header[SWEEP_ROW_MAX];
} resume_read;

static dp_status resume_header(void *ctx, const csv_row *h, dp_err *err)
{
    resume_read *rr = ctx;
    size_t n = 0;
    for (size_t i = 0; i < h->nfields && n < sizeof rr->header; i++)
        n += (size_t)snprintf(rr->header + n, sizeof rr->header - n, "%s%s", i ? "," : "",
                              h->fields[i]);
    (void)err;
    return DP_OK;
}

static dp_status resume_row(void *ctx, const csv_row *r, dp_err *err)
{
    sweep *s = ((resume_read *)ctx)->s;
    long point = point_of_cells(s->base, s->grid, (const char *const *)r->fields, (int)r->nfields);
    if (point >= 0) s->point_done[point] = 1;
    (void)err;
    return DP_OK;
}

/* The sweep's configuration (sweep.h): every option that is not a grid key, the input files'
 * content hashes, dpsim's version; a trace from stdin described as "-" and hashed from its
 * spool, whose name changes from run to run; the --gpus filter, part of what the rows mean. */
static void describe(sweep *s)
{
    plan_request described = *s->base;
    if (s->stdin_spool) described.trace = "-";
    plan_request_config(&described, (const char *const *)s->grid->keys, s->grid->nkeys, s->config,
                        sizeof s->config);
    size_t at = strlen(s->config);
    uint64_t hash;
    if (s->stdin_spool && dp_hash_file(s->stdin_spool, &hash) == 0)
        at += (size_t)snprintf(s->config + at, sizeof s->config - at, "stdin_trace_hash=%016llx\n",
                               (unsigned long long)hash);
    if (s->gpus && at < sizeof s->config)
        snprintf(s->config + at, sizeof s->config - at, "gpus=%lld\n", s->gpus);
}

/* Reads an existing output: the same columns and configuration, or a refusal; marks its points. */
static dp_status read_resume(sweep *s, dp_err *err)
{
    resume_read rr = {s, ""};
    RETURN_ON_ERROR(csv_read_file(s->out, 0, resume_header, resume_row, &rr, err));
    if (strcmp(rr.header, s->header) != 0)
        return dp_fail(err, DP_ERR_INVALID, "%s exists with other columns; it holds another "
                       "sweep\nhint: choose a new --output", s->out);
    char *there = NULL, what[700];
    dp_err cerr = {0};
    if (json_slurp(s->config_path, &there, &cerr) != DP_OK)
        return dp_fail(err, DP_ERR_INVALID, "%s holds rows but %s, its configuration, cannot be "
                       "read: a resume could mix two studies\nhint: choose a new --output",
                       s->out, s->config_path);
    int differs = planner_config_differs(there, s->config, what, sizeof what);
    free(there);
    if (differs)
        return dp_fail(err, DP_ERR_INVALID, "%s was swept with another configuration (%s): "
                       "resuming would mix two studies\nhint: the same options, or a new --output",
                       s->out, what);
    return DP_OK;
}

static long long point_gpus(const sweep *s, long i)
{
    plan_request p;
    sweep_point_request(s->base, s->grid, i, &p);
    return plan_request_gpus(&p);
}

dp_status sweep_prepare(sweep *s, dp_err *err)
{
    const sweep_grid *g = s->grid;
    s->fd = -1;
    s->failed = 0;
    size_t hn = 0;
    for (int k = 0; k < g->nkeys; k++)
        hn += (size_t)snprintf(s->header + hn, sizeof s->header - hn, "%s,", g->keys[k]);
    snprintf(s->header + hn, sizeof s->header - hn, "%s", SWEEP_METRIC_COLUMNS);
    describe(s);
    planner_config_path(s->out, s->config_path, sizeof s->config_path);
    s->point_done = calloc((size_t)g->points, 1);
    s->todo = malloc((size_t)g->points * sizeof *s->todo);
    if (!s->point_done || !s->todo) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    struct stat sb;
    if (stat(s->out, &sb) == 0 && sb.st_size > 0) RETURN_ON_ERROR(read_resume(s, err)); /* "" is fresh */
    s->kept = s->skipped = s->n_todo = s->remote = 0;
    for (long i = 0; i < g->points; i++) {
        if (s->gpus && point_gpus(s, i) != s->gpus) continue; /* another GPU count */
        s->kept++;
        if (s->point_done[i]) s->skipped++;
        else if (i % s->ranks == s->rank) s->todo[s->n_todo++] = i;
        else s->remote++;
    }
    return DP_OK;
}

dp_status sweep_create(sweep *s, dp_err *err)
{
    s->fd = open(s->out, O_WRONLY | O_APPEND | O_CREAT, 0666);
    if (s->fd < 0)
        return dp_fail(err, DP_ERR_IO, "%s: cannot open for appending: %s", s->out,
                       strerror(errno));
    if (flock(s->fd, LOCK_EX | LOCK_NB) != 0) /* one sweep per file */
        return dp_fail(err, DP_ERR_IO, "%s: another sweep is writing this file (it is locked)\n"
                       "hint: wait for it, or choose another --output", s->out);
    struct stat sb;
    if (fstat(s->fd, &sb) == 0 && sb.st_size == 0) {
        /* fresh: the configuration, then the header (a failed configuration leaves the output
         * empty, so the next run starts afresh instead of finding rows it cannot vouch for) */
        out_file cf;
        RETURN_ON_ERROR(out_open(&cf, s->config_path, err));
        fputs(s->config, cf.fp);
        RETURN_ON_ERROR(out_commit(&cf, err));
        sweep_append(s, s->header);
        if (s->failed)
            return dp_fail(err, DP_ERR_IO, "%s: cannot write: %s", s->out, strerror(s->errno_));
    }
    return DP_OK;
}

void sweep_append(sweep *s, const char *row)
{
    if (row && row[0] == SWEEP_NO_ROW) { /* a point that could not be run */
        if (s->lost++ == 0) snprintf(s->lost_why, sizeof s->lost_why, "%s", row + 1);
        return;
    }
    if (!row || !*row || s->failed || s->fd < 0) return; /* a point without a row; or failing */
    size_t len = strlen(row);
    char line[SWEEP_ROW_MAX + 1];
    if (len >= SWEEP_ROW_MAX) len = SWEEP_ROW_MAX - 1; /* cannot happen: rows are built to fit */
    memcpy(line, row, len);
    line[len++] = '\n';
    /* one write (O_APPEND: never interleaved, never half a row unless the disk fills mid-write,
     * which is undone and reported) */
    off_t end = lseek(s->fd, 0, SEEK_END);
    ssize_t w = write(s->fd, line, len);
    if (w != (ssize_t)len) {
        s->failed = 1, s->errno_ = w < 0 ? errno : ENOSPC;
        if (w > 0 && end >= 0 && ftruncate(s->fd, end) != 0) s->errno_ = errno; /* no half row */
    }
}

void sweep_emit_local(void *ctx, const char *row)
{
    sweep_append(ctx, row);
}

/* ---- running the points ---------------------------------------------------------------------- */

typedef struct sweep_pool {
    sweep *s;
    void (*emit)(void *ctx, const char *row);
    void *ctx;
    void (*progress)(void *ctx, long done, long total);
    void *progress_ctx;
} sweep_pool;

static void pool_point(void *ctx, long i, char *out, size_t cap)
{
    sweep_pool *sp = ctx;
    sweep_run_point(sp->s->base, sp->s->grid, sp->s->todo[i], out, cap);
}

static void pool_row(void *ctx, long i, const char *row)
{
    sweep_pool *sp = ctx;
    (void)i;
    if (!row) /* its point is not written; a rerun retries it */
        dp_note(DP_NOTE_LINE, "dpsim sweep: a worker died; its point will be retried on resume");
    sp->emit(sp->ctx, row);
}

static void point_done(void *ctx, long finished, long n)
{
    sweep_pool *sp = ctx;
    sp->progress(sp->progress_ctx, finished, n);
}

int sweep_run(sweep *s, int jobs, void (*progress)(void *ctx, long done, long total),
              void *progress_ctx, void (*emit)(void *ctx, const char *row), void *ctx)
{
    sweep_pool sp = {s, emit, ctx, progress, progress_ctx};
    /* the base options' cost model, built once here so that what planner_build_cost says once per
     * process (the analytic constants' provenance) is said once, not by every worker */
    model_spec m;
    cluster_spec hw;
    cost_model *cm = NULL;
    char source[4200];
    dp_err err = {0};
    if (planner_build_cost(&s->base->cost, &m, &hw, &cm, source, sizeof source, &err) == DP_OK)
        cost_model_free(cm);
    if (progress) progress(progress_ctx, 0, s->n_todo);
    return pool_run(s->n_todo, jobs, pool_point, pool_row, progress ? point_done : NULL, &sp);
}

/* ---- the end --------------------------------------------------------------------------------- */

typedef struct ordered_row {
    long point;
    size_t seq;
    char *text;
} ordered_row;

static int cmp_rows(const void *a, const void *b)
{
    const ordered_row *x = a, *y = b;
    if (x->point != y->point) return x->point < y->point ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* Rewrites the CSV with its rows in grid order (workers finish in any order); the header first.
 * Through a temporary and a rename: a failure leaves the file as it was. */
static dp_status order_rows(const sweep *s, dp_err *err)
{
    FILE *in = fopen(s->out, "rb");
    if (!in) return dp_fail(err, DP_ERR_IO, "%s: cannot reopen: %s", s->out, strerror(errno));
    ordered_row *rows = NULL;
    size_t n = 0, cap = 0, bcap = 0;
    char *line = NULL, *header = NULL;
    long len;
    dp_status st = DP_OK;
    while ((len = dp_read_line(in, &line, &bcap, DP_LINE_MAX)) > 0) {
        char *copy = dp_strdup(line);
        if (!copy || (header && dp_grow((void **)&rows, &cap, n + 1, sizeof *rows) != DP_OK)) {
            free(copy);
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
            break;
        }
        if (!header) header = copy;
        else {
            long point = sweep_point_of_row(s->base, s->grid, copy);
            rows[n] = (ordered_row){point < 0 ? LONG_MAX : point, n, copy}, n++;
        }
    }
    fclose(in);
    free(line);
    if (st == DP_OK && header) {
        if (n > 0) qsort(rows, n, sizeof *rows, cmp_rows); /* none: every point lost (NULL) */
        out_file o;
        st = out_open(&o, s->out, err);
        if (st == DP_OK) {
            fputs(header, o.fp);
            for (size_t i = 0; i < n; i++) fputs(rows[i].text, o.fp);
            st = out_commit(&o, err);
        }
    }
    for (size_t i = 0; i < n; i++) free(rows[i].text);
    free(rows), free(header);
    return st;
}

dp_status sweep_finish(sweep *s, dp_err *err)
{
    dp_status st = DP_OK;
    if (s->failed)
        st = dp_fail(err, DP_ERR_IO, "%s: write failed: %s (rows after the failure were lost; the "
                     "file holds only whole rows before it, and a resume continues from them)",
                     s->out, strerror(s->errno_));
    else st = order_rows(s, err); /* grid order, reproducible */
    if (st == DP_OK && s->lost)
        st = dp_fail(err, DP_ERR_IO, "%ld point%s could not be run and %s no row (the first: %s)"
                     "\nhint: once the cause is fixed, the same command runs %s (it resumes the "
                     "output)",
                     s->lost, s->lost == 1 ? "" : "s", s->lost == 1 ? "has" : "have", s->lost_why,
                     s->lost == 1 ? "it" : "them");
    if (s->fd >= 0) {
        if (close(s->fd) != 0 && st == DP_OK)
            st = dp_fail(err, DP_ERR_IO, "%s: close failed: %s", s->out, strerror(errno));
        s->fd = -1;
    }
    return st;
}

void sweep_release(sweep *s)
{
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
    free(s->point_done);
    free(s->todo);
    s->point_done = NULL, s->todo = NULL;
}
