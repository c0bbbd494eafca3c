/*
 * dp.h — status codes and error reporting shared by every dpsim module.
 *
 * Contract
 * --------
 * Library code (everything below the two mains) never prints and never exits. A function that can
 * fail returns a dp_status and, when it fails, fills the caller's dp_err with a message that names
 * the place: "trace.csv:17: target_len \"-3\" is negative". Optionally a second line starting with
 * "hint: " says how to fix it. Only main() turns a status into an exit code (dp_exit_code).
 *
 * Propagation uses TRY/goto out, as NCCL's NCCLCHECKGOTO does:
 *
 *     dp_status st = DP_OK;
 *     TRY(trace_read_csv(path, &t, err));
 *     ...
 *   out:
 *     cleanup();
 *     return st;
 *
 * A dp_err may be NULL: the message is then dropped but the status is still returned.
 */
#ifndef DP_H
#define DP_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>

typedef enum dp_status {
    DP_OK = 0,
    DP_ERR_IO,          /* a file could not be opened, read or written */
    DP_ERR_PARSE,       /* input is malformed (bad syntax, missing column, bad number) */
    DP_ERR_INVALID,     /* input is well-formed but a value is out of range or contradictory */
    DP_ERR_NOMEM,       /* host allocation failed */
    DP_ERR_INFEASIBLE,  /* the request has no answer: shape outside a profile, plan does not fit */
    DP_ERR_DEADLOCK,    /* an execution plan cannot complete */
    DP_ERR_UNSUPPORTED, /* a feature that this build or this subcommand does not provide */
    DP_ERR_EXTERNAL,    /* an external program or library failed (gnuplot, MPI, GSL) */
} dp_status;

/* The version dpsim and dprun print, and that a study's configuration records. */
#define DPSIM_VERSION "0.1.0"

/* Room for one message with a hint line; a longer message keeps its first third and its end (the
 * reason), with " ... " between, never overflowed. */
#define DP_ERR_MSG_MAX 1024

typedef struct dp_err {
    dp_status status;
    char msg[DP_ERR_MSG_MAX];
} dp_err;

/* A short, constant description of a status ("parse error"). Never NULL. */
const char *dp_strerror(dp_status st);

/* Records st and a printf-style message in err (if err is not NULL) and returns st, so that
 * `return dp_fail(err, DP_ERR_PARSE, "%s:%ld: ...", path, line);` reads naturally. */
dp_status dp_fail(dp_err *err, dp_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message (used to add context such as a file name). */
void dp_err_prefix(dp_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Notes: what library code tells the user beside its result (a choice it made, an assumption
 * behind a figure, a search's progress, a worker lost). The library never prints: each note goes
 * to the sink the driver set (dpsim: cli.h cli_note_sink, on stderr); with none set, notes are
 * dropped. DP_NOTE_PROGRESS is a progress line that a terminal may rewrite in place, and
 * DP_NOTE_PROGRESS_END its last; DP_NOTE_LINE a line of its own. Forked workers inherit the sink. */
typedef enum { DP_NOTE_LINE, DP_NOTE_PROGRESS, DP_NOTE_PROGRESS_END } dp_note_kind;
typedef void (*dp_note_fn)(void *ctx, dp_note_kind kind, const char *text);
void dp_set_note_sink(dp_note_fn fn, void *ctx);
/* A printf-style note (one line, no newline; longer than 4 KB is cut). */
void dp_note(dp_note_kind kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Exit code for main(): 0 for DP_OK, 2 for usage-like errors is decided by the CLI, 1 otherwise. */
int dp_exit_code(dp_status st);

#define TRY(expr)                                                                                  \
    do {                                                                                           \
        st = (expr);                                                                               \
        if (st != DP_OK) goto out;                                                                 \
    } while (0)

/* Parses a whole decimal integer in [lo, hi]. Returns 0 on success, -1 when text is empty, has
 * trailing garbage or is out of range. Leading/trailing spaces are allowed. */
int dp_parse_i64(const char *text, int64_t lo, int64_t hi, int64_t *out);

/* Parses a finite double (rejects NaN and infinity). Same return convention as dp_parse_i64. */
int dp_parse_f64(const char *text, double *out);

/* FNV-1a, 64 bits: h continued over n bytes at p (start from DP_FNV_OFFSET). */
#define DP_FNV_OFFSET 14695981039346656037ULL
#define DP_FNV_PRIME 1099511628211ULL
uint64_t dp_fnv1a(uint64_t h, const void *p, size_t n);
/* The same over 64-bit words, a word a step (8x fewer multiplies; not dp_fnv1a's value): hot
 * paths' hashes, the simulator's timeline hash and the stage model's memo. */
static inline uint64_t dp_fnv1a_words(uint64_t h, const uint64_t *w, size_t n)
{
    for (size_t i = 0; i < n; i++) h = (h ^ w[i]) * DP_FNV_PRIME;
    return h;
}

/* FNV-1a, 64 bits, of a NUL-terminated text: the plan file's identity (dprun checks that every
 * rank read the same plan, and writes it into the measured timeline for dpsim validate). */
uint64_t dp_hash_text(const char *s);

/* The longest line (and CSV record) a reader accepts, bytes: a larger one is an error naming
 * the line, not an unbounded allocation (an endless line, /dev/zero, would otherwise grow the
 * buffer until memory runs out). */
#define DP_LINE_MAX ((size_t)64 << 20)

/* Reads one line (with its '\n', if any) into *buf (grown as needed, NUL-terminated; the line
 * may contain NUL bytes: the length is what counts). Returns the length, 0 at the end of input,
 * -1 on a read error, -2 when the line exceeds max bytes (the rest of it is not read). */
long dp_read_line(FILE *fp, char **buf, size_t *cap, size_t max);

/* The checked allocator for what input cannot cause (fixed-size state, per-plan bookkeeping): on
 * failure it prints the size and the call site and exits (as llm.c's mallocCheck), so no caller
 * carries an out-of-memory path. Sizes are computed with dp_mul_size, which refuses overflow the
 * same way. Input-sized allocations keep returning a status. */
void *dp_xcalloc_at(size_t n, size_t size, const char *file, int line);
#define dp_xcalloc(n, size) dp_xcalloc_at((n), (size), __FILE__, __LINE__)

/* dp_hash_text's FNV-1a over a whole file's bytes; -1 when it cannot be read. */
int dp_hash_file(const char *path, uint64_t *out);

/* strdup that is C11-clean. Returns NULL on allocation failure. */
char *dp_strdup(const char *s);

/* The offset of the first byte of s (up to its NUL) that is not part of well-formed UTF-8 (RFC
 * 3629: no overlong forms, no surrogates, nothing past U+10FFFF), or -1 when all of it is. What a
 * reader of text that must be UTF-8 (JSON, RFC 8259) checks before trusting it. */
long dp_utf8_invalid_at(const char *s);

/* Grows *buf (of *cap elements of size elem) to hold at least need elements. Returns DP_OK or
 * DP_ERR_NOMEM. Growth is geometric so that appending n items is O(n). */
dp_status dp_grow(void **buf, size_t *cap, size_t need, size_t elem);

/* A monotonic clock (CLOCK_MONOTONIC), seconds: what wall times and ETAs are measured with. */
double dp_now_s(void);

#endif /* DP_H */
