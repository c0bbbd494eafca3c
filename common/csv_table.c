#include "csv_table.h"

#include <csv.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* A completed row, owned by the queue until handed out. */
typedef struct qrow {
    char **fields;
    size_t nfields;
    long line;
} qrow;

struct csv_reader {
    FILE *fp;
    int own_fp;
    char *path;           /* file name used in messages */
    struct csv_parser p;
    long line;            /* physical line being fed */
    char **fields;        /* fields of the row being assembled */
    size_t nfields, cap;
    qrow *q;              /* rows completed by the lines fed so far */
    size_t q_head, q_len, q_cap;
    qrow out;             /* the row last handed out (freed on the next call) */
    csv_row header, row;
    qrow header_row;
    long rows;            /* data rows handed out */
    char *buf;
    size_t bufcap;
    int eof;              /* no more lines */
    size_t record_bytes;  /* bytes fed since the last completed row */
    dp_err *err;
    dp_status st;         /* first failure */
};

static void free_fields(char **f, size_t n)
{
    for (size_t i = 0; i < n; i++) free(f[i]);
    free(f);
}

static void on_field(void *data, size_t len, void *rd)
{
    csv_reader *r = rd;
    if (r->st != DP_OK) return;
    const char *text = data ? data : "";
    if (data && strlen(text) != len) {
        r->st = dp_fail(r->err, DP_ERR_PARSE, "%s:%ld: field %zu contains a NUL byte", r->path,
                        r->line, r->nfields + 1);
        return;
    }
    char *copy = malloc(len + 1);
    if (!copy || dp_grow((void **)&r->fields, &r->cap, r->nfields + 1, sizeof *r->fields) != DP_OK) {
        free(copy);
        r->st = dp_fail(r->err, DP_ERR_NOMEM, "%s:%ld: out of memory", r->path, r->line);
        return;
    }
    memcpy(copy, text, len);
    copy[len] = '\0';
    r->fields[r->nfields++] = copy;
}

static void on_row_end(int term, void *rd)
{
    (void)term;
    csv_reader *r = rd;
    if (r->st == DP_OK &&
        dp_grow((void **)&r->q, &r->q_cap, r->q_head + r->q_len + 1, sizeof *r->q) != DP_OK)
        r->st = dp_fail(r->err, DP_ERR_NOMEM, "%s:%ld: out of memory", r->path, r->line);
    if (r->st != DP_OK) {
        free_fields(r->fields, r->nfields);
    } else {
        r->q[r->q_head + r->q_len++] = (qrow){r->fields, r->nfields, r->line};
    }
    r->record_bytes = 0;
    r->fields = NULL;
    r->nfields = r->cap = 0;
}

/* Feeds lines until a row is queued or the input ends. */
static void fill_queue(csv_reader *r)
{
    while (r->st == DP_OK && r->q_len == 0 && !r->eof) {
        if (r->q_head > 0 && r->q_len == 0) r->q_head = 0;
        long n = dp_read_line(r->fp, &r->buf, &r->bufcap, DP_LINE_MAX);
        if (n == -2) {
            r->st = dp_fail(r->err, DP_ERR_PARSE, "%s:%ld: line longer than %zu MiB (the limit of "
                            "a CSV line)", r->path, r->line + 1, DP_LINE_MAX >> 20);
            return;
        }
        if (n <= 0) {
            r->eof = 1;
            if (n < 0 || ferror(r->fp)) {
                r->st = dp_fail(r->err, DP_ERR_IO, "%s: read error: %s", r->path, strerror(errno));
                return;
            }
            if (csv_fini(&r->p, on_field, on_row_end, r) != 0 && r->st == DP_OK)
                r->st = dp_fail(r->err, DP_ERR_PARSE,
                                "%s:%ld: quoted field is not closed (truncated file?)", r->path, r->line);
            return;
        }
        r->line++;
        const char *s = r->buf;
        if (r->line == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
            s += 3; /* UTF-8 byte-order mark */
            n -= 3;
        }
        r->record_bytes += (size_t)n;
        if (r->record_bytes > DP_LINE_MAX) { /* a quoted field spanning endless lines */
            r->st = dp_fail(r->err, DP_ERR_PARSE, "%s:%ld: record longer than %zu MiB (a quoted "
                            "field is not closed?)", r->path, r->line, DP_LINE_MAX >> 20);
            return;
        }
        if (csv_parse(&r->p, s, (size_t)n, on_field, on_row_end, r) != (size_t)n && r->st == DP_OK)
            r->st = dp_fail(r->err, DP_ERR_PARSE,
                            csv_error(&r->p) == CSV_EPARSE
                                ? "%s:%ld: malformed quoting (a quote inside an unquoted field, or "
                                  "text after a closing quote)"
                                : "%s:%ld: %s",
                            r->path, r->line, csv_strerror(csv_error(&r->p)));
    }
}

/* The next queued row, or NULL at the end (or on failure: r->st). */
static qrow *pop_row(csv_reader *r)
{
    fill_queue(r);
    if (r->st != DP_OK || r->q_len == 0) return NULL;
    r->q_len--;
    return &r->q[r->q_head++];
}

dp_status csv_reader_open_stream(csv_reader **out, FILE *fp, const char *name, dp_err *err)
{
    *out = NULL;
    csv_reader *r = calloc(1, sizeof *r);
    if (!r || !(r->path = dp_strdup(name))) {
        free(r);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    if (csv_init(&r->p, CSV_APPEND_NULL | CSV_STRICT | CSV_STRICT_FINI) != 0) {
        free(r->path);
        free(r);
        return dp_fail(err, DP_ERR_NOMEM, "%s: cannot initialise the CSV parser", name);
    }
    r->fp = fp;
    r->err = err;
    qrow *h = pop_row(r);
    if (!h && r->st == DP_OK)
        r->st = dp_fail(err, DP_ERR_PARSE, "%s: file is empty (expected a header line)", name);
    if (r->st != DP_OK) {
        dp_status st = r->st;
        csv_reader_close(r);
        return st;
    }
    r->header_row = *h;
    r->header = (csv_row){r->path, h->line, h->nfields, h->fields};
    *out = r;
    return DP_OK;
}

dp_status csv_reader_open(csv_reader **out, const char *path, dp_err *err)
{
    int use_stdin = strcmp(path, "-") == 0;
    FILE *fp = use_stdin ? stdin : fopen(path, "rb");
    if (!fp) return dp_fail(err, DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    dp_status st = csv_reader_open_stream(out, fp, use_stdin ? "<stdin>" : path, err);
    if (st != DP_OK) {
        if (!use_stdin) fclose(fp);
        return st;
    }
    (*out)->own_fp = !use_stdin;
    return DP_OK;
}

const csv_row *csv_reader_header(const csv_reader *r)
{
    return &r->header;
}

dp_status csv_reader_next(csv_reader *r, const csv_row **row, dp_err *err)
{
    *row = NULL;
    r->err = err;
    free_fields(r->out.fields, r->out.nfields);
    r->out = (qrow){0};
    qrow *q = pop_row(r);
    if (!q) return r->st;
    r->out = *q;
    if (q->nfields != r->header.nfields)
        return r->st = dp_fail(err, DP_ERR_PARSE, "%s:%ld: row has %zu field%s, the header has %zu",
                               r->path, q->line, q->nfields, q->nfields == 1 ? "" : "s",
                               r->header.nfields);
    r->rows++;
    r->row = (csv_row){r->path, q->line, q->nfields, q->fields};
    *row = &r->row;
    return DP_OK;
}

long csv_reader_line(const csv_reader *r)
{
    return r->line;
}

void csv_reader_close(csv_reader *r)
{
    if (!r) return;
    free_fields(r->out.fields, r->out.nfields);
    free_fields(r->header_row.fields, r->header_row.nfields);
    for (size_t i = 0; i < r->q_len; i++) free_fields(r->q[r->q_head + i].fields, r->q[r->q_head + i].nfields);
    free_fields(r->fields, r->nfields);
    free(r->q);
    free(r->buf);
    csv_free(&r->p);
    if (r->own_fp) fclose(r->fp);
    free(r->path);
    free(r);
}

dp_status csv_read_stream(FILE *fp, const char *name, int require_rows, csv_row_fn on_header,
                          csv_row_fn on_row, void *ctx, dp_err *err)
{
    csv_reader *r;
    dp_status st = csv_reader_open_stream(&r, fp, name, err);
    if (st != DP_OK) return st;
    if (on_header) st = on_header(ctx, &r->header, err);
    const csv_row *row;
    while (st == DP_OK && (st = csv_reader_next(r, &row, err)) == DP_OK && row)
        if (on_row) st = on_row(ctx, row, err);
    if (st == DP_OK && require_rows && r->rows == 0)
        st = dp_fail(err, DP_ERR_PARSE, "%s:%ld: the header has no data rows after it", name, r->line);
    csv_reader_close(r);
    return st;
}

dp_status csv_read_file(const char *path, int require_rows, csv_row_fn on_header,
                        csv_row_fn on_row, void *ctx, dp_err *err)
{
    int use_stdin = strcmp(path, "-") == 0;
    FILE *fp = use_stdin ? stdin : fopen(path, "rb");
    if (!fp) return dp_fail(err, DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    dp_status st = csv_read_stream(fp, use_stdin ? "<stdin>" : path, require_rows, on_header,
                                   on_row, ctx, err);
    if (!use_stdin) fclose(fp);
    return st;
}

dp_status csv_header_map(const csv_row *header, const csv_column *cols, size_t ncols, int *idx,
                         dp_err *err)
{
    for (size_t i = 0; i < header->nfields; i++)
        for (size_t j = i + 1; j < header->nfields; j++)
            if (strcmp(header->fields[i], header->fields[j]) == 0)
                return dp_fail(err, DP_ERR_PARSE, "%s:%ld: column \"%s\" appears twice",
                               header->path, header->line, header->fields[i]);
    for (size_t c = 0; c < ncols; c++) {
        idx[c] = -1;
        for (size_t i = 0; i < header->nfields; i++)
            if (strcmp(header->fields[i], cols[c].name) == 0) idx[c] = (int)i;
        if (idx[c] < 0 && cols[c].required)
            return dp_fail(err, DP_ERR_PARSE, "%s:%ld: missing column \"%s\"", header->path,
                           header->line, cols[c].name);
    }
    return DP_OK;
}

/* Whether a field must be quoted to read back as itself (libcsv trims unquoted spaces). */
static int needs_quotes(const char *text, size_t len)
{
    return (len > 0 && (text[0] == ' ' || text[len - 1] == ' ')) ||
           strpbrk(text, ",\"\r\n") != NULL;
}

int csv_write_field(FILE *fp, const char *text)
{
    size_t len = strlen(text);
    if (!needs_quotes(text, len)) return fputs(text, fp) < 0 ? -1 : 0;
    return csv_fwrite(fp, text, len);
}

size_t csv_format_field(char *out, size_t cap, const char *text)
{
    size_t len = strlen(text);
    size_t n = needs_quotes(text, len) ? csv_write(out, cap, text, len) : len;
    if (cap == 0) return 0;
    if (n >= cap) return out[0] = '\0', 0;
    if (!needs_quotes(text, len)) memcpy(out, text, len);
    out[n] = '\0';
    return n;
}
