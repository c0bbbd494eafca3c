/* Trace CSV reading and writing (libcsv through common/csv_table). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/csv_table.h"
#include "../common/outfile.h"
#include "trace.h"

enum { COL_TASK, COL_INPUT, COL_TARGET, NCOLS };

typedef struct csv_ctx {
    trace *t;
    const trace_fields *f;
    int idx[NCOLS];
    int *extra_idx; /* header positions of kept extra columns */
} csv_ctx;

static dp_status on_header(void *vctx, const csv_row *h, dp_err *err)
{
    csv_ctx *c = vctx;
    csv_column cols[NCOLS] = {
        {c->f->task ? c->f->task : "", c->f->task != NULL},
        {c->f->input, 1},
        {c->f->target ? c->f->target : "", c->f->target != NULL},
    };
    dp_status st = csv_header_map(h, cols, NCOLS, c->idx, err);
    if (st != DP_OK) return st;
    if (!c->f->task) c->idx[COL_TASK] = -1;
    if (!c->f->target) c->idx[COL_TARGET] = -1;
    trace *t = c->t;
    c->extra_idx = malloc(h->nfields * sizeof *c->extra_idx);
    t->extra_names = malloc(h->nfields * sizeof *t->extra_names);
    if (!c->extra_idx || !t->extra_names) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < h->nfields; i++) {
        if ((int)i == c->idx[COL_TASK] || (int)i == c->idx[COL_INPUT] ||
            (int)i == c->idx[COL_TARGET])
            continue;
        /* an extra column named like one the writer emits (target_len under --no-target, say)
         * is kept as source_NAME, so that the written trace has each column once */
        const char *f = h->fields[i];
        int clash = strcmp(f, "task") == 0 || strcmp(f, "input_len") == 0 ||
                    strcmp(f, "target_len") == 0;
        size_t len = strlen(f) + 8;
        char *name = malloc(len);
        if (!name) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
        snprintf(name, len, "%s%s", clash ? "source_" : "", f);
        c->extra_idx[t->n_extra] = (int)i;
        t->extra_names[t->n_extra++] = name;
    }
    return DP_OK;
}

static dp_status on_row(void *vctx, const csv_row *r, dp_err *err)
{
    csv_ctx *c = vctx;
    trace *t = c->t;
    int32_t in, tgt = 0;
    dp_status st = trace_parse_len(r->path, r->line, c->f->input, r->fields[c->idx[COL_INPUT]], 1,
                                   &in, err);
    if (st == DP_OK && c->idx[COL_TARGET] >= 0)
        st = trace_parse_len(r->path, r->line, c->f->target, r->fields[c->idx[COL_TARGET]], 0,
                             &tgt, err);
    if (st != DP_OK) return st;
    const char *task = c->idx[COL_TASK] >= 0 ? r->fields[c->idx[COL_TASK]] : c->f->default_task;
    if (!task || !*task)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s is empty", r->path, r->line,
                       c->f->task ? c->f->task : "task");
    if (trace_push(t, task, in, tgt) != DP_OK)
        return dp_fail(err, DP_ERR_NOMEM, "%s:%ld: out of memory", r->path, r->line);
    if (t->n_extra) {
        if (dp_grow((void **)&t->extra, &t->extra_cap, t->n * t->n_extra, sizeof *t->extra) !=
            DP_OK)
            return dp_fail(err, DP_ERR_NOMEM, "%s:%ld: out of memory", r->path, r->line);
        char **row = t->extra + (t->n - 1) * t->n_extra;
        for (size_t e = 0; e < t->n_extra; e++) {
            row[e] = dp_strdup(r->fields[c->extra_idx[e]]);
            if (!row[e]) {
                for (size_t k = 0; k < e; k++) free(row[k]);
                t->n--; /* keep the trace consistent: a row has all its extras or none */
                return dp_fail(err, DP_ERR_NOMEM, "%s:%ld: out of memory", r->path, r->line);
            }
        }
    }
    return DP_OK;
}

dp_status trace_read_csv_stream(FILE *fp, const char *name, const trace_fields *fields, trace *t,
                                dp_err *err)
{
    csv_ctx c = {.t = t, .f = fields ? fields : &TRACE_FIELDS_CSV};
    dp_status st = csv_read_stream(fp, name, 1, on_header, on_row, &c, err);
    free(c.extra_idx);
    return st;
}

dp_status trace_read_csv(const char *path, const trace_fields *fields, trace *t, dp_err *err)
{
    int use_stdin = strcmp(path, "-") == 0;
    FILE *fp = use_stdin ? stdin : fopen(path, "rb");
    if (!fp) return dp_fail(err, DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    dp_status st = trace_read_csv_stream(fp, use_stdin ? "<stdin>" : path, fields, t, err);
    if (!use_stdin) fclose(fp);
    return st;
}

dp_status trace_write_csv(const trace *t, const char *path, dp_err *err)
{
    out_file o;
    dp_status st = out_open(&o, path, err);
    if (st != DP_OK) return st;
    FILE *fp = o.fp;
    int bad = fputs("task,input_len,target_len", fp) < 0;
    for (size_t e = 0; e < t->n_extra; e++) {
        bad |= fputc(',', fp) == EOF;
        bad |= csv_write_field(fp, t->extra_names[e]) != 0;
    }
    bad |= fputc('\n', fp) == EOF;
    for (size_t i = 0; i < t->n && !bad; i++) {
        const trace_sample *s = &t->samples[i];
        bad |= csv_write_field(fp, t->tasks[s->task]) != 0;
        bad |= fprintf(fp, ",%d,%d", (int)s->input_len, (int)s->target_len) < 0;
        for (size_t e = 0; e < t->n_extra; e++) {
            bad |= fputc(',', fp) == EOF;
            bad |= csv_write_field(fp, t->extra[i * t->n_extra + e]) != 0;
        }
        bad |= fputc('\n', fp) == EOF;
    }
    (void)bad; /* the stream's error flag carries it to out_commit */
    return out_commit(&o, err);
}

dp_status trace_stream_open(trace_stream *ts, const char *path, dp_err *err)
{
    memset(ts, 0, sizeof *ts);
    trace_init(&ts->tasks);
    dp_status st = csv_reader_open(&ts->r, path, err);
    if (st != DP_OK) return st;
    csv_column cols[NCOLS] = {{"task", 1}, {"input_len", 1}, {"target_len", 1}};
    st = csv_header_map(csv_reader_header(ts->r), cols, NCOLS, ts->idx, err);
    if (st != DP_OK) trace_stream_close(ts);
    return st;
}

dp_status trace_stream_next(trace_stream *ts, trace_sample *s, int *eof, dp_err *err)
{
    const csv_row *r;
    *eof = 0;
    dp_status st = csv_reader_next(ts->r, &r, err);
    if (st != DP_OK) return st;
    if (!r) {
        if (ts->next_id == 0)
            return dp_fail(err, DP_ERR_PARSE, "%s:%ld: the header has no data rows after it",
                           csv_reader_header(ts->r)->path, csv_reader_line(ts->r));
        *eof = 1;
        return DP_OK;
    }
    int32_t in, tg;
    st = trace_parse_len(r->path, r->line, "input_len", r->fields[ts->idx[COL_INPUT]], 1, &in, err);
    if (st == DP_OK)
        st = trace_parse_len(r->path, r->line, "target_len", r->fields[ts->idx[COL_TARGET]], 0, &tg, err);
    if (st != DP_OK) return st;
    const char *task = r->fields[ts->idx[COL_TASK]];
    if (!*task) return dp_fail(err, DP_ERR_PARSE, "%s:%ld: task is empty", r->path, r->line);
    uint32_t id;
    if (trace_intern_task(&ts->tasks, task, &id) != DP_OK)
        return dp_fail(err, DP_ERR_NOMEM, "%s:%ld: out of memory", r->path, r->line);
    *s = (trace_sample){in, tg, id};
    ts->next_id++;
    return DP_OK;
}

void trace_stream_close(trace_stream *ts)
{
    csv_reader_close(ts->r);
    trace_release(&ts->tasks);
    memset(ts, 0, sizeof *ts);
}
