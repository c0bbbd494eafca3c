#include "dp.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *dp_strerror(dp_status st)
{
    switch (st) {
    case DP_OK: return "success";
    case DP_ERR_IO: return "I/O error";
    case DP_ERR_PARSE: return "parse error";
    case DP_ERR_INVALID: return "invalid value";
    case DP_ERR_NOMEM: return "out of memory";
    case DP_ERR_INFEASIBLE: return "infeasible";
    case DP_ERR_DEADLOCK: return "deadlock";
    case DP_ERR_UNSUPPORTED: return "not supported";
    case DP_ERR_EXTERNAL: return "external tool failed";
    }
    return "unknown error";
}

/* Stores text (len bytes) into msg; a text too long keeps its start and its end, where the
 * reason usually is, with " ... " between them. */
static void fit_msg(char *msg, size_t cap, const char *text, size_t len)
{
    if (len < cap) {
        memcpy(msg, text, len + 1);
        return;
    }
    size_t head = cap / 3, tail = cap - head - 6;
    memcpy(msg, text, head);
    memcpy(msg + head, " ... ", 5);
    memcpy(msg + head + 5, text + len - tail, tail);
    msg[cap - 1] = '\0';
}

dp_status dp_fail(dp_err *err, dp_status st, const char *fmt, ...)
{
    if (err) {
        char big[4 * DP_ERR_MSG_MAX];
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(big, sizeof big, fmt, ap);
        va_end(ap);
        if (n < 0) n = 0;
        if ((size_t)n >= sizeof big) n = (int)sizeof big - 1; /* the tail is then beyond 4 KB */
        fit_msg(err->msg, sizeof err->msg, big, (size_t)n);
        err->status = st;
    }
    return st;
}

void dp_err_prefix(dp_err *err, const char *fmt, ...)
{
    if (!err) return;
    char head[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    char big[sizeof head + DP_ERR_MSG_MAX + 2];
    int n = snprintf(big, sizeof big, "%s: %s", head, err->msg);
    fit_msg(err->msg, sizeof err->msg, big, n < 0 ? 0 : (size_t)n < sizeof big ? (size_t)n : sizeof big - 1);
}

int dp_exit_code(dp_status st)
{
    return st == DP_OK ? 0 : 1;
}

static const char *skip_space(const char *s)
{
    while (*s && isspace((unsigned char)*s)) s++;
    return s;
}

int dp_parse_i64(const char *text, int64_t lo, int64_t hi, int64_t *out)
{
    if (!text) return -1;
    const char *s = skip_space(text);
    if (!*s) return -1;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (end == s || errno == ERANGE) return -1;
    if (*skip_space(end)) return -1;
    if (v < lo || v > hi) return -1;
    *out = (int64_t)v;
    return 0;
}

int dp_parse_f64(const char *text, double *out)
{
    if (!text) return -1;
    const char *s = skip_space(text);
    if (!*s) return -1;
    errno = 0;
    char *end = NULL;
    double v = strtod(s, &end);
    if (end == s || errno == ERANGE) return -1;
    if (*skip_space(end)) return -1;
    if (!isfinite(v)) return -1;
    *out = v;
    return 0;
}

char *dp_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

long dp_utf8_invalid_at(const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    for (long i = 0; u[i];) {
        unsigned c = u[i];
        int more;
        unsigned lo = 0x80, hi = 0xBF; /* the second byte's range (RFC 3629's table) */
        if (c < 0x80) more = 0;
        else if (c >= 0xC2 && c <= 0xDF) more = 1;
        else if (c >= 0xE0 && c <= 0xEF) /* no overlong form, no surrogate */
            more = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) /* no overlong form, nothing past U+10FFFF */
            more = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        else return i;
        for (int k = 1; k <= more; k++) {
            unsigned b = u[i + k];
            if (k == 1 ? b < lo || b > hi : b < 0x80 || b > 0xBF) return i;
        }
        i += 1 + more;
    }
    return -1;
}

dp_status dp_grow(void **buf, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return DP_OK;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2 / elem) return DP_ERR_NOMEM;
        ncap *= 2;
    }
    void *p = realloc(*buf, ncap * elem);
    if (!p) return DP_ERR_NOMEM;
    *buf = p;
    *cap = ncap;
    return DP_OK;
}

uint64_t dp_fnv1a(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * DP_FNV_PRIME;
    return h;
}

uint64_t dp_hash_text(const char *s)
{
    return dp_fnv1a(DP_FNV_OFFSET, s, strlen(s));
}

long dp_read_line(FILE *fp, char **buf, size_t *cap, size_t max)
{
    size_t n = 0;
    for (;;) {
        if (n + 2 > *cap) {
            size_t want = *cap ? *cap * 2 : 4096;
            if (want > max + 2) want = max + 2;
            if (want <= n + 1) return -2;
            char *b = realloc(*buf, want);
            if (!b) return -1;
            *buf = b, *cap = want;
        }
        int c = getc_unlocked(fp); /* one reader per stream: no locking per character */
        if (c == EOF) break;
        (*buf)[n++] = (char)c;
        if (c == '\n') break;
        if (n > max) return -2;
    }
    if (*buf) (*buf)[n] = '\0';
    if (n == 0 && ferror(fp)) return -1;
    return (long)n;
}

void *dp_xcalloc_at(size_t n, size_t size, const char *file, int line)
{
    if (size && n > SIZE_MAX / size) {
        fprintf(stderr, "dpsim: %zu x %zu bytes overflow at %s:%d\n", n, size, file, line);
        exit(1);
    }
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) {
        fprintf(stderr, "dpsim: out of memory allocating %zu x %zu bytes at %s:%d\n", n, size, file, line);
        exit(1);
    }
    return p;
}

int dp_hash_file(const char *path, uint64_t *out)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return -1;
    uint64_t h = DP_FNV_OFFSET;
    unsigned char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, fp)) > 0) h = dp_fnv1a(h, buf, n);
    int bad = ferror(fp);
    fclose(fp);
    if (bad) return -1;
    *out = h;
    return 0;
}

double dp_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static dp_note_fn note_fn;
static void *note_ctx;

void dp_set_note_sink(dp_note_fn fn, void *ctx)
{
    note_fn = fn, note_ctx = ctx;
}

void dp_note(dp_note_kind kind, const char *fmt, ...)
{
    if (!note_fn) return;
    char text[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    note_fn(note_ctx, kind, text);
}
