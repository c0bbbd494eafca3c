#include "dp.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

dp_status dp_fail(dp_err *err, dp_status st, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
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
    size_t hl = strlen(head);
    if (hl + 2 >= sizeof err->msg) return;
    /* Shift the old message right, keeping it NUL-terminated within the buffer. */
    memmove(err->msg + hl + 2, err->msg, sizeof err->msg - hl - 2);
    err->msg[sizeof err->msg - 1] = '\0';
    memcpy(err->msg, head, hl);
    err->msg[hl] = ':';
    err->msg[hl + 1] = ' ';
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
