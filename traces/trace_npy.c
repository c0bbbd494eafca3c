/*
 * DynaPipe .npy length files: NumPy format 1.0/2.0/3.0, an int64 (N, 3) array of [start, end, len].
 *
 * The header is a Python dict literal such as
 *     {'descr': '<i8', 'fortran_order': False, 'shape': (1000, 3), }
 * It is parsed as a dict (keys in any order, either quote style, spaces anywhere), not matched as a
 * fixed string. Only little-endian 8-byte signed integers are accepted.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../common/outfile.h"
#include "trace.h"

typedef struct npy_header {
    char descr[16];
    int fortran_order; /* -1 until seen */
    int ndim;          /* -1 until seen */
    int64_t shape[4];
} npy_header;

typedef struct cursor {
    const char *p, *end;
} cursor;

static void skip_ws(cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static int accept(cursor *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* A quoted Python string without escapes, copied into out (truncated to cap-1). */
static int parse_str(cursor *c, char *out, size_t cap)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return -1;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\') return -1;
        if (n + 1 < cap) out[n++] = *c->p;
        c->p++;
    }
    if (c->p >= c->end) return -1;
    c->p++;
    out[n] = '\0';
    return 0;
}

static int parse_int(cursor *c, int64_t *v)
{
    skip_ws(c);
    int64_t x = 0;
    const char *start = c->p;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        if (x > (INT64_MAX - 9) / 10) return -1;
        x = x * 10 + (*c->p++ - '0');
    }
    if (c->p == start) return -1;
    if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 long suffix */
    *v = x;
    return 0;
}

static int parse_header(const char *text, size_t len, npy_header *h)
{
    cursor c = {text, text + len};
    h->descr[0] = '\0';
    h->fortran_order = -1;
    h->ndim = -1;
    if (!accept(&c, '{')) return -1;
    while (!accept(&c, '}')) {
        char key[32];
        if (parse_str(&c, key, sizeof key) != 0 || !accept(&c, ':')) return -1;
        skip_ws(&c);
        if (strcmp(key, "descr") == 0) {
            if (parse_str(&c, h->descr, sizeof h->descr) != 0) return -1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if ((size_t)(c.end - c.p) >= 4 && memcmp(c.p, "True", 4) == 0) {
                h->fortran_order = 1;
                c.p += 4;
            } else if ((size_t)(c.end - c.p) >= 5 && memcmp(c.p, "False", 5) == 0) {
                h->fortran_order = 0;
                c.p += 5;
            } else {
                return -1;
            }
        } else if (strcmp(key, "shape") == 0) {
            if (!accept(&c, '(')) return -1;
            h->ndim = 0;
            while (!accept(&c, ')')) {
                int64_t v;
                if (h->ndim >= 4 || parse_int(&c, &v) != 0) return -1;
                h->shape[h->ndim++] = v;
                if (!accept(&c, ',')) {
                    if (!accept(&c, ')')) return -1;
                    break;
                }
            }
        } else {
            return -1;
        }
        if (!accept(&c, ',')) {
            if (!accept(&c, '}')) return -1;
            break;
        }
    }
    return 0;
}

static int64_t read_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return (int64_t)v;
}

dp_status trace_npy_parse(const unsigned char *buf, size_t len, const char *name, int64_t **rows,
                          size_t *n, dp_err *err)
{
    *rows = NULL;
    *n = 0;
    if (len < 10 || memcmp(buf, "\x93NUMPY", 6) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s: not a .npy file (bad magic)", name);
    unsigned major = buf[6];
    size_t hlen, off;
    if (major == 1) {
        hlen = buf[8] | (size_t)buf[9] << 8;
        off = 10;
    } else if (major == 2 || major == 3) {
        if (len < 12) return dp_fail(err, DP_ERR_PARSE, "%s: truncated .npy header", name);
        hlen = buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
        off = 12;
    } else {
        return dp_fail(err, DP_ERR_PARSE, "%s: unsupported .npy version %u", name, major);
    }
    if (hlen > len - off)
        return dp_fail(err, DP_ERR_PARSE, "%s: truncated .npy header (%zu bytes announced)", name,
                       hlen);
    npy_header h;
    if (parse_header((const char *)buf + off, hlen, &h) != 0)
        return dp_fail(err, DP_ERR_PARSE, "%s: malformed .npy header dict", name);
    if (!h.descr[0] || h.fortran_order < 0 || h.ndim < 0)
        return dp_fail(err, DP_ERR_PARSE,
                       "%s: .npy header lacks one of 'descr', 'fortran_order', 'shape'", name);
    if (strcmp(h.descr, "<i8") != 0)
        return dp_fail(err, DP_ERR_PARSE,
                       "%s: .npy dtype '%s' is not supported\nhint: DynaPipe length files are "
                       "int64 ('<i8'); convert with numpy's astype('<i8')",
                       name, h.descr);
    if (h.ndim != 2 || h.shape[1] != 3)
        return dp_fail(err, DP_ERR_PARSE,
                       "%s: .npy shape must be (N, 3) rows of [start, end, len]", name);
    size_t count = (size_t)h.shape[0];
    size_t data = len - off - hlen;
    if (h.shape[0] < 0 || count > data / 24 || data != count * 24)
        return dp_fail(err, DP_ERR_PARSE,
                       "%s: .npy data is %zu bytes, the shape (%lld, 3) needs %.0f (truncated?)",
                       name, data, (long long)h.shape[0], (double)h.shape[0] * 24);
    int64_t *out = malloc(count ? count * 3 * sizeof *out : 1);
    if (!out) return dp_fail(err, DP_ERR_NOMEM, "%s: out of memory", name);
    const unsigned char *d = buf + off + hlen;
    for (size_t i = 0; i < count; i++)
        for (size_t j = 0; j < 3; j++) {
            /* C order: element (i, j) at i*3+j; Fortran order: at j*N+i. */
            size_t k = h.fortran_order ? j * count + i : i * 3 + j;
            out[i * 3 + j] = read_le64(d + 8 * k);
        }
    *rows = out;
    *n = count;
    return DP_OK;
}

static dp_status slurp(const char *path, unsigned char **buf, size_t *len, dp_err *err)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return dp_fail(err, DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    unsigned char *b = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (dp_grow((void **)&b, &cap, n + 65536, 1) != DP_OK) {
            fclose(fp);
            free(b);
            return dp_fail(err, DP_ERR_NOMEM, "%s: out of memory", path);
        }
        size_t got = fread(b + n, 1, cap - n, fp);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(b);
        return dp_fail(err, DP_ERR_IO, "%s: read error", path);
    }
    *buf = b;
    *len = n;
    return DP_OK;
}

static dp_status load_lengths(const char *path, int64_t **rows, size_t *n, dp_err *err)
{
    unsigned char *buf = NULL;
    size_t len = 0;
    dp_status st = slurp(path, &buf, &len, err);
    if (st == DP_OK) st = trace_npy_parse(buf, len, path, rows, n, err);
    free(buf);
    return st;
}

static dp_status check_len(const char *path, size_t row, const char *what, int64_t v,
                           int32_t min_len, dp_err *err)
{
    if (v < 0)
        return dp_fail(err, DP_ERR_PARSE, "%s: row %zu: %s %lld is negative", path, row, what,
                       (long long)v);
    if (v < min_len)
        return dp_fail(err, DP_ERR_PARSE, "%s: row %zu: %s %lld must be at least %d", path, row,
                       what, (long long)v, (int)min_len);
    if (v > TRACE_MAX_LEN)
        return dp_fail(err, DP_ERR_PARSE, "%s: row %zu: %s %lld is too large (max %d)", path,
                       row, what, (long long)v, TRACE_MAX_LEN);
    return DP_OK;
}

dp_status trace_read_npy(const char *inputs_path, const char *targets_path, trace *t, dp_err *err)
{
    dp_status st = DP_OK;
    int64_t *in = NULL, *tg = NULL;
    size_t n_in = 0, n_tg = 0;
    TRY(load_lengths(inputs_path, &in, &n_in, err));
    if (targets_path) TRY(load_lengths(targets_path, &tg, &n_tg, err));
    if (n_in == 0) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: no samples (shape (0, 3))", inputs_path);
        goto out;
    }
    if (targets_path && n_tg != n_in) {
        st = dp_fail(err, DP_ERR_PARSE, "%s has %zu rows but %s has %zu", inputs_path, n_in,
                     targets_path, n_tg);
        goto out;
    }
    for (size_t i = 0; i < n_in; i++) {
        TRY(check_len(inputs_path, i, "len", in[i * 3 + 2], 1, err));
        if (tg) TRY(check_len(targets_path, i, "len", tg[i * 3 + 2], 0, err));
        if (trace_push(t, "npy", (int32_t)in[i * 3 + 2], tg ? (int32_t)tg[i * 3 + 2] : 0) !=
            DP_OK) {
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
            goto out;
        }
    }
out:
    free(in);
    free(tg);
    return st;
}

dp_status trace_write_npy(const trace *t, int targets, const char *path, dp_err *err)
{
    out_file o;
    dp_status st = out_open(&o, path, err);
    if (st != DP_OK) return st;
    FILE *fp = o.fp;
    char dict[128];
    int dlen = snprintf(dict, sizeof dict, "{'descr': '<i8', 'fortran_order': False, 'shape': (%zu, 3), }",
                        t->n);
    /* Pad with spaces so that magic + header is a multiple of 64, ending in a newline. */
    size_t total = 10 + (size_t)dlen + 1;
    size_t pad = (64 - total % 64) % 64;
    size_t hlen = (size_t)dlen + pad + 1;
    unsigned char pre[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
    int bad = fwrite(pre, 1, 10, fp) != 10;
    bad |= fwrite(dict, 1, (size_t)dlen, fp) != (size_t)dlen;
    for (size_t i = 0; i < pad; i++) bad |= fputc(' ', fp) == EOF;
    bad |= fputc('\n', fp) == EOF;
    int64_t start = 0;
    for (size_t i = 0; i < t->n && !bad; i++) {
        int64_t len = targets ? t->samples[i].target_len : t->samples[i].input_len;
        int64_t row[3] = {start, start + len, len};
        unsigned char le[24];
        for (int j = 0; j < 3; j++)
            for (int b = 0; b < 8; b++) le[j * 8 + b] = (unsigned char)((uint64_t)row[j] >> (8 * b));
        bad |= fwrite(le, 1, 24, fp) != 24;
        start += len;
    }
    (void)bad; /* the stream's error flag carries it to out_commit */
    return out_commit(&o, err);
}
