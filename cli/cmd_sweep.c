/*
 * dpsim sweep — a grid over plan parameters, one CSV row per point, points in parallel.
 *
 * Points run in forked worker processes (--jobs, default the machine's cores); each writes its
 * CSV row to a pipe and the parent appends it to the output file as it finishes. A progress bar
 * with an ETA goes to stderr when it is a terminal. An existing output file is resumed: points
 * whose grid values already have a row are skipped.
 *
 * Under `mpirun -np N dpsim sweep ...` (detected by MPI's launcher environment) the points are
 * split across the N ranks (point i on rank i mod N); every rank sends its rows to rank 0, which
 * writes the file. MPI is the distributed engine; the local worker pool runs inside each rank.
 */
#include <errno.h>
#include <sys/stat.h>
#include <sys/file.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>

#include "../common/csv_table.h"
#include "../common/json_util.h"
#include "../common/pool.h"
#include "../planner/study.h"
#include "cli.h"

static const char SWEEP_USAGE[] = "dpsim sweep --grid 'KEY=V1,V2 KEY=V1,...' -o sweep.csv [PLAN OPTIONS]";

#define MAX_KEYS 8
#define MAX_VALUES 32
#define ROW_MAX 4096

typedef struct grid {
    char *keys[MAX_KEYS];
    char *values[MAX_KEYS][MAX_VALUES]; /* as given (the CSV's key columns) */
    const char *canon[MAX_KEYS][MAX_VALUES]; /* as the option table prints them (grid_canonical) */
    char store[8192];                   /* canon's text */
    size_t used;
    int nvalues[MAX_KEYS];
    int nkeys;
    long points;
} grid;

#define GRID_MAX_POINTS 1000000

/* A grid's boolean value: true or false (1 and 0 are accepted as the same). */
static int grid_bool(const char *v, int *out)
{
    if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0) return *out = 1, 0;
    if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0) return *out = 0, 0;
    return -1;
}

static const char *const METRIC_COLUMNS =
    "throughput_tokens_per_s,padding_efficiency,encoder_padding_efficiency,"
    "decoder_padding_efficiency,bubble_fraction,peak_mem_mb,oom,feasible,iterations,time_s,"
    "mean_iteration_ms,mean_closed_form_ms,plan_ms_per_iteration,plan_ms_p90,events,tflops_per_gpu,"
    "mfu,error";

/* Parses "k1=a,b k2=c" into grid (strings point into buf). Returns 0 or -1 with msg. */
static int parse_grid(char *buf, grid *g, char *msg, size_t cap)
{
    memset(g, 0, sizeof *g);
    g->points = 1;
    for (char *tok = strtok(buf, " \t\n"); tok; tok = strtok(NULL, " \t\n")) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1]) {
            snprintf(msg, cap, "grid entry \"%s\" is not KEY=V1,V2,...", tok);
            return -1;
        }
        if (g->nkeys == MAX_KEYS) {
            snprintf(msg, cap, "at most %d grid keys", MAX_KEYS);
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
            if (g->nvalues[k] == MAX_VALUES) {
                snprintf(msg, cap, "at most %d values per grid key", MAX_VALUES);
                return -1;
            }
            g->values[k][g->nvalues[k]++] = v;
            if (!comma) break;
            v = comma + 1;
        }
        if (g->points > GRID_MAX_POINTS / g->nvalues[k]) {
            snprintf(msg, cap, "the grid has more than %d points (a sweep of that size is a "
                     "mistake, or several sweeps)", GRID_MAX_POINTS);
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

/* The canonical text of grid value v of key k into buf (the analytic flag's own: true or false). */
static int canonical_of(const plan_cli *p, const char *key, const char *v, char *buf, size_t cap)
{
    int b;
    if (strcmp(key, "analytic") == 0) {
        if (grid_bool(v, &b) != 0) return -1;
        snprintf(buf, cap, "%s", b ? "true" : "false");
        return 0;
    }
    return cli_plan_canonical(p, key, v, buf, cap);
}

/* Fills g->canon, and refuses a key that lists one value twice ("2,2", "true,1"): each point
 * would run twice and double its rows. 0, or -1 with msg. */
static int grid_canonical(const plan_cli *p, grid *g, char *msg, size_t cap)
{
    for (int k = 0; k < g->nkeys; k++)
        for (int v = 0; v < g->nvalues[k]; v++) {
            char *at = g->store + g->used;
            size_t room = sizeof g->store - g->used;
            if (canonical_of(p, g->keys[k], g->values[k][v], at, room) != 0 ||
                strlen(at) + 1 >= room) {
                snprintf(msg, cap, "grid key \"%s\": value \"%s\" cannot be read back",
                         g->keys[k], g->values[k][v]);
                return -1;
            }
            g->canon[k][v] = at;
            g->used += strlen(at) + 1;
            for (int w = 0; w < v; w++)
                if (strcmp(g->canon[k][w], at) == 0) {
                    snprintf(msg, cap, "grid key \"%s\" lists one value twice (\"%s\" and "
                             "\"%s\"): every point would run twice", g->keys[k],
                             g->values[k][w], g->values[k][v]);
                    return -1;
                }
        }
    return 0;
}

/* Index of the point whose key (values joined by commas) starts row, or -1. A value written
 * another way ("1" for "true", as an earlier run of the same grid wrote it) is the same value. */
static long point_of_row(const plan_cli *p, const grid *g, const char *row)
{
    long idx = 0;
    for (int k = 0; k < g->nkeys; k++) {
        size_t len = strcspn(row, ",\n");
        int found = -1;
        for (int v = 0; v < g->nvalues[k] && found < 0; v++)
            if (strlen(g->values[k][v]) == len && strncmp(g->values[k][v], row, len) == 0) found = v;
        if (found < 0 && len < 1024) {
            char raw[1024], canon[1024];
            memcpy(raw, row, len), raw[len] = '\0';
            if (canonical_of(p, g->keys[k], raw, canon, sizeof canon) == 0)
                for (int v = 0; v < g->nvalues[k] && found < 0; v++)
                    if (strcmp(g->canon[k][v], canon) == 0) found = v;
        }
        if (found < 0) return -1;
        idx = idx * g->nvalues[k] + found;
        row += len + (row[len] == ',');
    }
    return idx;
}

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
static dp_status order_rows(const char *out, const plan_cli *p, const grid *g, dp_err *err)
{
    FILE *in = fopen(out, "rb");
    if (!in) return dp_fail(err, DP_ERR_IO, "%s: cannot reopen: %s", out, strerror(errno));
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
            long point = point_of_row(p, g, copy);
            rows[n] = (ordered_row){point < 0 ? LONG_MAX : point, n, copy}, n++;
        }
    }
    fclose(in);
    free(line);
    if (st == DP_OK && header) {
        qsort(rows, n, sizeof *rows, cmp_rows);
        out_file o;
        st = out_open(&o, out, err);
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

/* Value index of key k at point i (the last key varies fastest). */
static int value_at(const grid *g, long i, int k)
{
    long stride = 1;
    for (int j = g->nkeys - 1; j > k; j--) stride *= g->nvalues[j];
    return (int)(i / stride % g->nvalues[k]);
}

/* The point's key: its grid values joined by commas (also its first CSV columns). */
static void point_key(const grid *g, long i, char *out, size_t cap)
{
    size_t n = 0;
    out[0] = '\0';
    for (int k = 0; k < g->nkeys && n < cap; k++)
        n += (size_t)snprintf(out + n, cap - n, "%s%s", k ? "," : "", g->values[k][value_at(g, i, k)]);
}

/* GPUs of point i's layout: tp x pp x dp after its grid values. */
static long long point_gpus(const plan_cli *base, const grid *g, long i)
{
    plan_cli p = *base;
    for (int k = 0; k < g->nkeys; k++)
        if (strcmp(g->keys[k], "analytic") != 0)
            cli_plan_set(&p, g->keys[k], g->values[k][value_at(g, i, k)], "sweep", SWEEP_USAGE);
    return cli_plan_gpus(&p);
}

/* Runs point i and formats its CSV row (without a newline) into row. */
static void run_point(const plan_cli *base, const grid *g, long i, char *row, size_t cap)
{
    plan_cli p = *base;
    char key[1024], error[DP_ERR_MSG_MAX] = "";
    point_key(g, i, key, sizeof key);
    for (int k = 0; k < g->nkeys; k++) {
        const char *v = g->values[k][value_at(g, i, k)];
        if (strcmp(g->keys[k], "analytic") == 0) grid_bool(v, &p.cost.analytic); /* checked */
        else cli_plan_set(&p, g->keys[k], v, "sweep", SWEEP_USAGE); /* checked before forking */
    }
    plan_env env;
    dp_err err = {0};
    study_result r;
    memset(&r, 0, sizeof r);
    dp_status st = cli_plan_setup(&p, &env, &err);
    if (st == DP_OK) {
        study_opts o;
        cli_study_opts(&p, &env, p.batching, p.schedule, &o);
        st = study_run(&o, &env.trace, &r, &err);
    }
    plan_env_release(&env);
    if (st != DP_OK) snprintf(error, sizeof error, "%s", err.msg);
    else if (r.why[0]) snprintf(error, sizeof error, "%s", r.why);
    for (char *c = error; *c; c++)
        if (*c == '"' || *c == '\n' || *c == ',') *c = *c == '"' ? '\'' : ' ';
    double bubble = 0, peak = 0, mit = 0, mcf = 0;
    for (int s = 0; s < r.pp; s++) bubble += r.bubble_fraction[s] / r.pp, peak = fmax(peak, r.peak_mem_mb[s]);
    if (r.feasible && r.iterations)
        mit = r.sum_ms / r.iterations, mcf = r.sum_closed_form_ms / r.iterations;
    char cf[32] = ""; /* empty where the schedule has no closed form (adaptive) */
    if (!isnan(mcf)) snprintf(cf, sizeof cf, "%.4f", mcf);
    snprintf(row, cap, "%s,%.2f,%.6f,%.6f,%.6f,%.6f,%.1f,%d,%d,%d,%.6f,%.4f,%s,%.4f,%.4f,%llu,%.3f,%.5f,\"%s\"", key,
             st == DP_OK ? r.throughput_tokens_per_s : 0, r.padding_efficiency,
             r.enc_padding_efficiency, r.dec_padding_efficiency, bubble, peak, r.oom,
             st == DP_OK && r.feasible, r.iterations, r.time_s, mit, cf, r.plan_ms_median,
             r.plan_ms_p90, (unsigned long long)r.events, r.tflops_per_gpu, r.mfu, error);
    study_result_release(&r);
}

/* Collects the keys of rows already in the output file. */
typedef struct done_set {
    char **keys;
    size_t n, cap;
    int nkeys;
    char header[ROW_MAX];
    unsigned char *point_done; /* per grid point: 1 when a row of it is there (done_mark) */
} done_set;

static dp_status done_header(void *ctx, const csv_row *h, dp_err *err)
{
    done_set *d = ctx;
    size_t n = 0;
    for (size_t i = 0; i < h->nfields; i++)
        n += (size_t)snprintf(d->header + n, sizeof d->header - n, "%s%s", i ? "," : "", h->fields[i]);
    (void)err;
    return DP_OK;
}

static dp_status done_row(void *ctx, const csv_row *r, dp_err *err)
{
    done_set *d = ctx;
    char key[1024];
    size_t n = 0;
    for (int k = 0; k < d->nkeys && k < (int)r->nfields; k++)
        n += (size_t)snprintf(key + n, sizeof key - n, "%s%s", k ? "," : "", r->fields[k]);
    if (dp_grow((void **)&d->keys, &d->cap, d->n + 1, sizeof *d->keys) != DP_OK ||
        !(d->keys[d->n] = dp_strdup(key)))
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    d->n++;
    return DP_OK;
}

/* Marks the points whose rows are there, each row's values read as the grid's (canonical: a
 * "1" an earlier run wrote is this run's "true"). 0, or -1 out of memory. */
static int done_mark(const plan_cli *p, const grid *g, done_set *d)
{
    d->point_done = calloc((size_t)g->points, 1);
    if (!d->point_done) return -1;
    for (size_t i = 0; i < d->n; i++) {
        long point = point_of_row(p, g, d->keys[i]);
        if (point >= 0) d->point_done[point] = 1;
    }
    return 0;
}

static int is_done(const done_set *d, long point)
{
    return d->point_done && d->point_done[point];
}

static void draw_progress(long done, long total, double t0)
{
    double el = (double)time(NULL) - t0;
    double eta = done > 0 ? el / done * (total - done) : 0;
    int width = 30, fill = total ? (int)(width * done / total) : width;
    fprintf(stderr, "\r[");
    for (int i = 0; i < width; i++) fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %ld/%ld points, ETA %dm%02ds ", done, total, (int)eta / 60, (int)eta % 60);
    if (done == total) fputc('\n', stderr);
}

/* The sweep's points in a pool of forked workers (common/pool.h): each runs one point and sends
 * its row; the parent hands it to emit (the file, or rank 0 over MPI). */
typedef void (*emit_fn)(void *ctx, const char *row);

typedef struct sweep_pool {
    const plan_cli *base;
    const grid *g;
    const long *todo;
    emit_fn emit;
    void *emit_ctx;
    double t0;
} sweep_pool;

static void pool_point(void *ctx, long i, char *out, size_t cap)
{
    sweep_pool *sp = ctx;
    run_point(sp->base, sp->g, sp->todo[i], out, cap);
}

static void pool_row(void *ctx, long i, const char *row)
{
    sweep_pool *sp = ctx;
    (void)i;
    if (!row) /* its point is not written; a rerun retries it */
        fprintf(stderr, "\ndpsim sweep: a worker died; its point will be retried on resume\n");
    sp->emit(sp->emit_ctx, row);
}

static void pool_progress_bar(void *ctx, long finished, long n)
{
    draw_progress(finished, n, ((sweep_pool *)ctx)->t0);
}

static int run_pool(const plan_cli *base, const grid *g, const long *todo, long n, int jobs,
                    emit_fn emit, void *ctx, int progress)
{
    sweep_pool sp = {base, g, todo, emit, ctx, (double)time(NULL)};
    /* the base options' cost model, built once here so that what cli_build_cost says once per
     * process (the analytic constants' provenance) is said once, not by every worker */
    model_spec m;
    cluster_spec hw;
    cost_model *cm = NULL;
    char source[4200];
    dp_err err = {0};
    if (cli_build_cost(&base->cost, &m, &hw, &cm, source, sizeof source, &err) == DP_OK)
        cost_model_free(cm);
    if (progress) draw_progress(0, n, sp.t0);
    return pool_run(n, jobs, pool_point, pool_row, progress ? pool_progress_bar : NULL, &sp);
}

typedef struct file_sink {
    int fd;           /* the output, opened for appending and locked */
    const char *path;
    int failed;       /* a write failed: errno_ says why */
    int errno_;
} file_sink;

/* Appends one whole row with one write (O_APPEND: never interleaved, never half a row unless
 * the disk fills mid-write, which is then reported). */
static void emit_file(void *ctx, const char *row)
{
    file_sink *f = ctx;
    if (!row || !*row || f->failed) return; /* a point whose worker died; or already failing */
    size_t len = strlen(row);
    char line[ROW_MAX + 1];
    memcpy(line, row, len);
    line[len++] = '\n';
    off_t end = lseek(f->fd, 0, SEEK_END);
    ssize_t w = write(f->fd, line, len);
    if (w != (ssize_t)len) {
        f->failed = 1, f->errno_ = w < 0 ? errno : ENOSPC;
        if (w > 0 && end >= 0 && ftruncate(f->fd, end) != 0) f->errno_ = errno; /* no half row */
    }
}

/* MPI ranks other than 0 send their rows to rank 0. */
static void emit_mpi(void *ctx, const char *row)
{
    (void)ctx;
    if (!row) row = ""; /* still counts, so rank 0 never waits for it */
    MPI_Send(row, (int)strlen(row) + 1, MPI_CHAR, 0, 1, MPI_COMM_WORLD);
}

/* Copies stdin into a new temporary trace file, whose path goes to path. */
static dp_status spool_stdin(char *path, size_t cap, dp_err *err)
{
    snprintf(path, cap, "/tmp/dpsim-stdin-XXXXXX"); /* read as CSV, as stdin is */
    int fd = mkstemp(path);
    if (fd < 0) {
        path[0] = '\0';
        return dp_fail(err, DP_ERR_IO, "cannot create a temporary file for --trace -: %s",
                       strerror(errno));
    }
    char buf[1 << 16];
    ssize_t got;
    dp_status st = DP_OK;
    while (st == DP_OK && (got = read(STDIN_FILENO, buf, sizeof buf)) != 0) {
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) st = dp_fail(err, DP_ERR_IO, "--trace -: reading stdin: %s", strerror(errno));
        for (ssize_t at = 0; st == DP_OK && at < got;) {
            ssize_t w = write(fd, buf + at, (size_t)(got - at));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) st = dp_fail(err, DP_ERR_IO, "%s: %s", path, strerror(errno));
            else at += w;
        }
    }
    if (close(fd) != 0 && st == DP_OK) st = dp_fail(err, DP_ERR_IO, "%s: %s", path, strerror(errno));
    if (st != DP_OK) unlink(path), path[0] = '\0';
    return st;
}

int cmd_sweep(int argc, char **argv)
{
    const char *cmd = "sweep", *out = NULL, *grid_arg = "";
    plan_cli p;
    plan_cli_default(&p);
    int64_t jobs = cli_jobs_default(), gpus = 0;
    cli_opts t;
    cli_opts_init(&t, cmd, SWEEP_USAGE,
                  "Runs every point of a grid over plan options (the same names as the\n"
                  "options, without --) and writes one CSV row per point with every metric. Points\n"
                  "run in parallel; an existing output file is resumed; under mpirun the points are\n"
                  "split across the ranks.");
    cli_opt_string(&t, "grid", 'g', &grid_arg, "SPEC", NULL,
                   "e.g. 'max-seqlen=512,1024,2048 batching=packing,dynamic'");
    cli_opt_string(&t, "output", 'o', &out, "FILE", "required", "CSV to write or resume");
    cli_opt_int64(&t, "jobs", 'J', &jobs, "N", 1, 1024, "the machine's cores",
                  "parallel workers per process");
    cli_opt_int64(&t, "gpus", 'G', &gpus, "N", 1, 1 << 24, "all",
                  "keep only the points whose layout uses exactly N GPUs\n"
                  "(tp x pp x dp), e.g. with grids over tp, pp and dp");
    cli_plan_options(&t, &p);
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    cli_plan_parsed(&t, &p);
    cli_opts_release(&t);
    if (r != 0) return r == 1 ? 0 : r;
    char gridbuf[4096];
    if (strlen(grid_arg) >= sizeof gridbuf)
        return cli_usage_error(cmd, SWEEP_USAGE, "--grid is longer than %zu characters",
                               sizeof gridbuf - 1);
    strcpy(gridbuf, grid_arg);
    if (!out) return cli_usage_error(cmd, SWEEP_USAGE, "--output is required");
    {
        dp_err oerr = {0};
        out_role outs[] = {{"-o", out}};
        if (cli_check_outputs(&p, NULL, 0, outs, 1, &oerr) != DP_OK)
            return cli_usage_error(cmd, SWEEP_USAGE, "%s", oerr.msg);
    }
    grid g;
    char msg[256];
    if (parse_grid(gridbuf, &g, msg, sizeof msg) != 0) return cli_usage_error(cmd, SWEEP_USAGE, "%s", msg);
    /* every grid value must be a valid option value, checked once here, not in the workers */
    for (int k = 0; k < g.nkeys; k++)
        for (int v = 0; v < g.nvalues[k]; v++) {
            plan_cli probe = p;
            int b;
            if (strcmp(g.keys[k], "analytic") == 0 && grid_bool(g.values[k][v], &b) != 0)
                return cli_usage_error(cmd, SWEEP_USAGE, "grid key analytic: \"%s\" is not true "
                                       "or false", g.values[k][v]);
            if (strcmp(g.keys[k], "analytic") == 0) continue;
            int rc = cli_plan_set(&probe, g.keys[k], g.values[k][v], cmd, SWEEP_USAGE);
            if (rc == 0)
                return cli_usage_error(cmd, SWEEP_USAGE, "grid key \"%s\" is not a plan option", g.keys[k]);
            if (rc < 0) return EXIT_USAGE;
        }
    if (grid_canonical(&p, &g, msg, sizeof msg) != 0)
        return cli_usage_error(cmd, SWEEP_USAGE, "%s", msg);
    /* MPI, when launched by mpirun */
    int mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE");
    int rank = 0, size = 1;
    if (mpi) {
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
    /* --trace -: stdin is read once, here, into a file every worker reads (a worker reading stdin
     * would take what the one before left) */
    char spool[64] = "";
    if (p.trace && strcmp(p.trace, "-") == 0) {
        dp_err serr = {0};
        if (mpi) {
            MPI_Finalize();
            return cli_usage_error(cmd, SWEEP_USAGE, "--trace - under mpirun: only rank 0 reads "
                                   "stdin\nhint: give the trace as a file");
        }
        if (spool_stdin(spool, sizeof spool, &serr) != DP_OK) return cli_fail(cmd, &serr);
        p.trace = spool;
    }
    char header[ROW_MAX];
    size_t hn = 0;
    for (int k = 0; k < g.nkeys; k++) hn += (size_t)snprintf(header + hn, sizeof header - hn, "%s,", g.keys[k]);
    snprintf(header + hn, sizeof header - hn, "%s", METRIC_COLUMNS);
    done_set d = {0};
    d.nkeys = g.nkeys;
    dp_err err = {0};
    /* the sweep's configuration beside its CSV (OUT.config): every option that is not a grid
     * key, the input files' content hashes and dpsim's version; a resume must find the same, or it
     * would mix rows of two studies. A trace from stdin is described as "-" and hashed from its
     * spool (whose name changes from run to run) */
    char config[8192], config_path[4200];
    plan_cli described = p;
    if (spool[0]) described.trace = "-";
    cli_plan_config(&described, (const char *const *)g.keys, g.nkeys, config, sizeof config);
    uint64_t spool_hash;
    if (spool[0] && dp_hash_file(spool, &spool_hash) == 0)
        snprintf(config + strlen(config), sizeof config - strlen(config), "stdin_trace_hash=%016llx\n",
                 (unsigned long long)spool_hash);
    if (gpus) /* the sweep's own filter is part of what its rows mean */
        snprintf(config + strlen(config), sizeof config - strlen(config), "gpus=%lld\n", (long long)gpus);
    snprintf(config_path, sizeof config_path, "%s.config", out);
    int rc = 0;
    long *todo = malloc((size_t)g.points * sizeof *todo), n = 0, skipped = 0;
    file_sink fs = {-1, out, 0, 0};
    if (!todo) {
        rc = EXIT_RUNTIME;
        goto out;
    }
    struct stat osb;
    if (stat(out, &osb) == 0 && osb.st_size > 0) { /* resume (an empty file is a fresh one) */
        if (csv_read_file(out, 0, done_header, done_row, &d, &err) != DP_OK) {
            rc = cli_fail(cmd, &err);
            goto out;
        }
        if (strcmp(d.header, header) != 0) {
            err.msg[0] = '\0';
            dp_fail(&err, DP_ERR_INVALID,
                    "%s exists with other columns; it holds another sweep\nhint: choose a new --output",
                    out);
            rc = cli_fail(cmd, &err);
            goto out;
        }
        char *there = NULL, what[700];
        dp_err cerr = {0};
        if (json_slurp(config_path, &there, &cerr) != DP_OK) {
            dp_fail(&err, DP_ERR_INVALID, "%s holds rows but %s, its configuration, cannot be read: "
                    "a resume could mix two studies\nhint: choose a new --output", out, config_path);
            rc = cli_fail(cmd, &err);
            goto out;
        }
        int differs = cli_config_differs(there, config, what, sizeof what);
        free(there);
        if (differs) {
            dp_fail(&err, DP_ERR_INVALID, "%s was swept with another configuration (%s): resuming "
                    "would mix two studies\nhint: the same options, or a new --output", out, what);
            rc = cli_fail(cmd, &err);
            goto out;
        }
    }
    if (done_mark(&p, &g, &d) != 0) {
        dp_fail(&err, DP_ERR_NOMEM, "out of memory");
        rc = cli_fail(cmd, &err);
        goto out;
    }
    long kept = 0;
    for (long i = 0; i < g.points; i++) {
        if (gpus && point_gpus(&p, &g, i) != gpus) continue; /* another GPU count */
        kept++;
        if (is_done(&d, i)) skipped++;
        else if (i % size == rank) todo[n++] = i;
    }
    /* every rank has read the resume state before rank 0 creates the file (a rank reading it
     * just after its creation saw an empty file) */
    if (mpi) MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        fs.fd = open(out, O_WRONLY | O_APPEND | O_CREAT, 0666);
        if (fs.fd < 0) {
            dp_fail(&err, DP_ERR_IO, "%s: cannot open for appending: %s", out, strerror(errno));
            rc = cli_fail(cmd, &err);
            if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
            goto out;
        }
        if (flock(fs.fd, LOCK_EX | LOCK_NB) != 0) { /* one sweep per file */
            dp_fail(&err, DP_ERR_IO, "%s: another sweep is writing this file (it is locked)\n"
                    "hint: wait for it, or choose another --output", out);
            rc = cli_fail(cmd, &err);
            if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
            goto out;
        }
        struct stat sb;
        if (fstat(fs.fd, &sb) == 0 && sb.st_size == 0) { /* fresh: the header, the configuration */
            emit_file(&fs, header);
            out_file cf;
            if (out_open(&cf, config_path, &err) != DP_OK ||
                (fputs(config, cf.fp), out_commit(&cf, &err)) != DP_OK) {
                rc = cli_fail(cmd, &err);
                if (mpi) MPI_Abort(MPI_COMM_WORLD, 1);
                goto out;
            }
        }
        if (gpus)
            fprintf(stderr, "dpsim sweep: %ld points of %lld GPUs (of %ld in the grid), %ld already in %s\n",
                    kept, (long long)gpus, g.points, skipped, out);
        else
            fprintf(stderr, "dpsim sweep: %ld points, %ld already in %s\n", g.points, skipped, out);
        if (mpi) fprintf(stderr, "dpsim sweep: %d MPI ranks\n", size);
    }
    int prog = cli_stderr_is_tty() && rank == 0;
    if (run_pool(&p, &g, todo, n, (int)jobs, rank == 0 ? emit_file : emit_mpi, &fs, prog) != 0) rc = EXIT_RUNTIME;
    if (mpi) {
        if (rank == 0) { /* rows from the other ranks */
            long expect = 0;
            for (long i = 0; i < g.points; i++) {
                if (!is_done(&d, i) && i % size != 0 && (!gpus || point_gpus(&p, &g, i) == gpus))
                    expect++;
            }
            char row[ROW_MAX];
            for (long k = 0; k < expect; k++) {
                MPI_Status ms;
                MPI_Recv(row, ROW_MAX, MPI_CHAR, MPI_ANY_SOURCE, 1, MPI_COMM_WORLD, &ms);
                emit_file(&fs, row);
            }
        }
        MPI_Finalize();
    }
    if (fs.failed) {
        dp_fail(&err, DP_ERR_IO, "%s: write failed: %s (rows after the failure were lost; the "
                "file holds only whole rows before it, and a resume continues from them)", out,
                strerror(fs.errno_));
        rc = cli_fail(cmd, &err);
    } else if (rank == 0 && order_rows(out, &p, &g, &err) != DP_OK) { /* grid order, reproducible */
        rc = cli_fail(cmd, &err);
    }
out:
    if (fs.fd >= 0 && close(fs.fd) != 0 && rc == 0) {
        dp_fail(&err, DP_ERR_IO, "%s: close failed: %s", out, strerror(errno));
        rc = cli_fail(cmd, &err);
    }
    for (size_t i = 0; i < d.n; i++) free(d.keys[i]);
    free(d.keys);
    free(d.point_done);
    free(todo);
    if (spool[0]) unlink(spool);
    return rc;
}
