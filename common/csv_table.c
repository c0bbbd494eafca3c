#include "csv_table.h"

#include <csv.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* State shared with libcsv's callbacks for one file. */
typedef struct reader {
    const char *path;
    long line;            /* physical line being fed */
    char **fields;        /* fields of the row being assembled */
    size_t nfields, cap;
    size_t header_fields; /* 0 until the header has been seen */
    long rows;            /* data rows delivered */
    csv_row_fn on_header, on_row;
    void *ctx;
    dp_err *err;
    dp_status st;         /* first failure; once set, further rows are ignored */
} reader;

static void clear_fields(reader *r)
{
    for (size_t i = 0; i < r->nfields; i++) free(r->fields[i]);
    r->nfields = 0;
}

static void on_field(void *data, size_t len, void *rd)
{
    reader *r = rd;
    if (r->st != DP_OK) return;
    const char *text = data ? data : "";
    if (data && strlen(text) != len) {
        r->st = dp_fail(r->err, DP_ERR_PARSE, "%s:%ld: field %zu contains a NUL byte", r->path,
                        r->line, r->nfields + 1);
        return;
    }
    if (dp_grow((void **)&r->fields, &r->cap, r->nfields + 1, sizeof *r->fields) != DP_OK) {
        r->st = dp_fail(r->err, DP_ERR_NOMEM, "%s:%ld: out of memory", r->path, r->line);
        return;
    }
    char *copy = malloc(len + 1);
    if (!copy) {
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
    reader *r = rd;
    if (r->st != DP_OK) {
        clear_fields(r);
        return;
    }
    csv_row row = {r->path, r->line, r->nfields, r->fields};
    if (r->header_fields == 0) {
        r->header_fields = r->nfields;
        if (r->on_header) r->st = r->on_header(r->ctx, &row, r->err);
    } else if (r->nfields != r->header_fields) {
        r->st = dp_fail(r->err, DP_ERR_PARSE, "%s:%ld: row has %zu field%s, the header has %zu",
                        r->path, r->line, r->nfields, r->nfields == 1 ? "" : "s",
                        r->header_fields);
    } else {
        r->rows++;
        if (r->on_row) r->st = r->on_row(r->ctx, &row, r->err);
    }
    clear_fields(r);
}

dp_status csv_read_stream(FILE *fp, const char *name, int require_rows, csv_row_fn on_header,
                          csv_row_fn on_row, void *ctx, dp_err *err)
{
    struct csv_parser p;
    if (csv_init(&p, CSV_APPEND_NULL | CSV_STRICT | CSV_STRICT_FINI) != 0)
        return dp_fail(err, DP_ERR_NOMEM, "%s: cannot initialise the CSV parser", name);
    reader r = {.path = name, .on_header = on_header, .on_row = on_row, .ctx = ctx, .err = err};
    char *buf = NULL;
    size_t bufcap = 0;
    ssize_t n;
    while (r.st == DP_OK && (n = getline(&buf, &bufcap, fp)) >= 0) {
        r.line++;
        const char *s = buf;
        if (r.line == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) {
            s += 3; /* UTF-8 byte-order mark */
            n -= 3;
        }
        if (csv_parse(&p, s, (size_t)n, on_field, on_row_end, &r) != (size_t)n && r.st == DP_OK)
            r.st = dp_fail(err, DP_ERR_PARSE,
                           csv_error(&p) == CSV_EPARSE
                               ? "%s:%ld: malformed quoting (a quote inside an unquoted field, or "
                                 "text after a closing quote)"
                               : "%s:%ld: %s",
                           name, r.line, csv_strerror(csv_error(&p)));
    }
    if (r.st == DP_OK && ferror(fp))
        r.st = dp_fail(err, DP_ERR_IO, "%s: read error: %s", name, strerror(errno));
    if (r.st == DP_OK && csv_fini(&p, on_field, on_row_end, &r) != 0 && r.st == DP_OK)
        r.st = dp_fail(err, DP_ERR_PARSE,
                       "%s:%ld: quoted field is not closed (truncated file?)", name, r.line);
    if (r.st == DP_OK && r.header_fields == 0)
        r.st = dp_fail(err, DP_ERR_PARSE, "%s: file is empty (expected a header line)", name);
    if (r.st == DP_OK && require_rows && r.rows == 0)
        r.st = dp_fail(err, DP_ERR_PARSE, "%s:%ld: the header has no data rows after it", name,
                       r.line);
    clear_fields(&r);
    free(r.fields);
    free(buf);
    csv_free(&p);
    return r.st;
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

int csv_write_field(FILE *fp, const char *text)
{
    size_t len = strlen(text);
    int quote = len > 0 && (text[0] == ' ' || text[len - 1] == ' ');
    if (!quote) quote = strpbrk(text, ",\"\r\n") != NULL;
    if (!quote) return fputs(text, fp) < 0 ? -1 : 0;
    return csv_fwrite(fp, text, len);
}
