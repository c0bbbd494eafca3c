/*
 * csv_table.h — header-aware CSV reading on top of libcsv, with file:line in every message.
 *
 * Every CSV that dpsim reads (traces, profiles, timelines) goes through here, so the rules are the
 * same everywhere:
 *   - the first non-empty row is the header; a UTF-8 byte-order mark before it is skipped;
 *   - CRLF and LF line ends are both accepted; empty lines are skipped;
 *   - every data row must have as many fields as the header ("PATH:LINE: row has 2 fields, the
 *     header has 3");
 *   - quoting is strict (RFC 4180): a quote inside an unquoted field, text after a closing quote,
 *     a field with a NUL byte, and a quoted field that never closes (a truncated file) are errors;
 *   - an empty file and a file with a header but no rows are reported by csv_read_file itself;
 *   - a line, and a record (a quoted field may span lines), longer than DP_LINE_MAX (64 MiB) is
 *     an error naming the line ("PATH:LINE: line longer than 64 MiB"), so an endless input is
 *     refused in bounded memory; a field is at most as long as its record.
 *
 * Line numbers are physical lines, 1-based, of the line on which a row ends (a quoted field may
 * span lines). Rows are delivered one at a time, so a caller can stream a file of any size.
 */
#ifndef CSV_TABLE_H
#define CSV_TABLE_H

#include <stdio.h>

#include "dp.h"

typedef struct csv_row {
    const char *path; /* file name used in messages */
    long line;        /* 1-based physical line where this row ends */
    size_t nfields;   /* number of fields */
    char **fields;    /* NUL-terminated field texts, valid only during the callback */
} csv_row;

/* Called for the header, then for each data row. Any status other than DP_OK stops the read and is
 * returned by csv_read_*; the callback should have filled err. */
typedef dp_status (*csv_row_fn)(void *ctx, const csv_row *row, dp_err *err);

/* Reads path (or stdin when path is "-"). on_header gets the header row; on_row each data row.
 * Fails with DP_ERR_PARSE on an empty file or a header with no rows when require_rows is set. */
dp_status csv_read_file(const char *path, int require_rows, csv_row_fn on_header, csv_row_fn on_row,
                        void *ctx, dp_err *err);

/* Same, from an open stream; name is used in messages. Used by csv_read_file and by fuzzers. */
dp_status csv_read_stream(FILE *fp, const char *name, int require_rows, csv_row_fn on_header,
                          csv_row_fn on_row, void *ctx, dp_err *err);

/* Pull-style reading, one row at a time (for streaming traces of any length). */
typedef struct csv_reader csv_reader;

/* Opens path ("-" = stdin) and reads its header; fails on an empty file. */
dp_status csv_reader_open(csv_reader **r, const char *path, dp_err *err);
dp_status csv_reader_open_stream(csv_reader **r, FILE *fp, const char *name, dp_err *err);
const csv_row *csv_reader_header(const csv_reader *r);
/* The next data row (valid until the next call), or *row = NULL at the end. */
dp_status csv_reader_next(csv_reader *r, const csv_row **row, dp_err *err);
/* The physical line read last. */
long csv_reader_line(const csv_reader *r);
void csv_reader_close(csv_reader *r);

/* One wanted column of a header. */
typedef struct csv_column {
    const char *name; /* exact column name */
    int required;     /* 1: missing is an error */
} csv_column;

/* Maps wanted columns to their positions in header: idx[i] = field index of cols[i].name, or -1
 * when absent and optional. Fails on a missing required column and on any column name that
 * appears twice in the header ("PATH:1: column \"mbs\" appears twice"). */
dp_status csv_header_map(const csv_row *header, const csv_column *cols, size_t ncols, int *idx,
                         dp_err *err);

/* Writes one field to fp, quoting it only when it needs quoting (comma, quote, CR/LF, space at an
 * end). Returns 0 on success. */
int csv_write_field(FILE *fp, const char *text);

/* The same field, by the same rule, as text in out (NUL-terminated). Returns its length, or 0
 * with out "" when it does not fit in cap. */
size_t csv_format_field(char *out, size_t cap, const char *text);

#endif /* CSV_TABLE_H */
