#include "json_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "outfile.h"

dp_status json_slurp(const char *path, char **text, dp_err *err)
{
    *text = NULL;
    int use_stdin = strcmp(path, "-") == 0;
    FILE *fp = use_stdin ? stdin : fopen(path, "rb");
    if (!fp) return dp_fail(err, DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    dp_status st = DP_OK;
    for (;;) {
        if (dp_grow((void **)&buf, &cap, n + 65537, 1) != DP_OK) {
            st = dp_fail(err, DP_ERR_NOMEM, "%s: out of memory", path);
            break;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, fp);
        n += got;
        if (n > JSON_MAX_BYTES) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: larger than %u MB, not a JSON spec", path,
                         JSON_MAX_BYTES >> 20);
            break;
        }
        if (got == 0) break;
    }
    if (st == DP_OK && ferror(fp)) st = dp_fail(err, DP_ERR_IO, "%s: read error", path);
    if (!use_stdin) fclose(fp);
    if (st != DP_OK) {
        free(buf);
        return st;
    }
    buf[n] = '\0';
    if (strlen(buf) != n) {
        free(buf);
        return dp_fail(err, DP_ERR_PARSE, "%s: contains a NUL byte, not JSON text", path);
    }
    *text = buf;
    return DP_OK;
}

dp_status json_parse_object(const char *text, const char *name, cJSON **out, dp_err *err)
{
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 1);
    if (!root) {
        long line = 1;
        const char *stop = end ? end : text;
        for (const char *c = text; c < stop && *c; c++) line += *c == '\n';
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: malformed JSON%s", name, line,
                       *text ? "" : " (file is empty)");
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dp_fail(err, DP_ERR_PARSE, "%s:1: expected a JSON object", name);
    }
    dp_status st = json_strict(root, text, name, 0, err);
    if (st != DP_OK) {
        cJSON_Delete(root);
        return st;
    }
    *out = root;
    return DP_OK;
}

/* A key that appears twice in one object, anywhere below v; NULL if none. */
static const cJSON *repeated_key(const cJSON *v)
{
    for (const cJSON *c = v ? v->child : NULL; c; c = c->next) {
        if (cJSON_IsObject(v) && c->string)
            for (const cJSON *d = c->next; d; d = d->next)
                if (d->string && strcmp(c->string, d->string) == 0) return d;
        const cJSON *deep = repeated_key(c);
        if (deep) return deep;
    }
    return NULL;
}

/* The line of the first \u0000 escape inside a string of text, or 0. */
static long nul_escape_line(const char *text)
{
    long line = 1;
    int in_string = 0;
    for (const char *c = text; *c; c++) {
        if (*c == '\n') line++;
        if (!in_string) {
            in_string = *c == '"';
            continue;
        }
        if (*c == '"') in_string = 0;
        else if (*c == '\\' && c[1]) {
            if (c[1] == 'u' && strncmp(c + 2, "0000", 4) == 0) return line;
            c++; /* the escaped character */
        }
    }
    return 0;
}

dp_status json_strict(const cJSON *v, const char *text, const char *name, long line, dp_err *err)
{
    long bad = dp_utf8_invalid_at(text);
    if (bad >= 0) { /* RFC 8259: JSON text is UTF-8; a name read from it reaches CSVs and pages */
        long at = 1, col = 1;
        for (long i = 0; i < bad; i++) at += text[i] == '\n', col = text[i] == '\n' ? 1 : col + 1;
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: not UTF-8 text (byte 0x%02X at column %ld)", name,
                       line ? line : at, (unsigned char)text[bad], col);
    }
    const cJSON *dup = repeated_key(v);
    if (dup)
        return dp_fail(err, DP_ERR_PARSE, "%s%s%.0ld: key \"%s\" appears twice in one object",
                       name, line ? ":" : "", line, dup->string);
    long nul = nul_escape_line(text);
    if (nul)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: a string holds \\u0000 (a NUL character)",
                       name, line ? line : nul);
    return DP_OK;
}

dp_status json_int(const cJSON *obj, const char *key, const char *name, int lo, int hi, int def,
                   int *out, dp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (def == JSON_REQUIRED)
            return dp_fail(err, DP_ERR_PARSE, "%s: missing field \"%s\"", name, key);
        *out = def;
        return DP_OK;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(d) || d != floor(d) || d < lo || d > hi)
        return dp_fail(err, DP_ERR_PARSE, "%s: field \"%s\" must be a whole number in [%d, %d]",
                       name, key, lo, hi);
    *out = (int)d;
    return DP_OK;
}

dp_status json_double(const cJSON *obj, const char *key, const char *name, double lo, double hi,
                      int required, double def, double *out, dp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) return dp_fail(err, DP_ERR_PARSE, "%s: missing field \"%s\"", name, key);
        *out = def;
        return DP_OK;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : NAN;
    if (!isfinite(d) || d < lo || d > hi)
        return dp_fail(err, DP_ERR_PARSE, "%s: field \"%s\" must be a number in [%g, %g]", name,
                       key, lo, hi);
    *out = d;
    return DP_OK;
}

dp_status json_bool(const cJSON *obj, const char *key, const char *name, int def, int *out,
                    dp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v) {
        *out = def;
        return DP_OK;
    }
    if (cJSON_IsBool(v)) {
        *out = cJSON_IsTrue(v);
        return DP_OK;
    }
    if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1)) {
        *out = (int)v->valuedouble;
        return DP_OK;
    }
    return dp_fail(err, DP_ERR_PARSE, "%s: field \"%s\" must be true or false", name, key);
}

dp_status json_choice(const cJSON *obj, const char *key, const char *name, const char *first,
                      const char *second, int *out, dp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    *out = 0;
    if (!v || (cJSON_IsString(v) && strcmp(v->valuestring, first) == 0)) return DP_OK;
    if (cJSON_IsString(v) && strcmp(v->valuestring, second) == 0) {
        *out = 1;
        return DP_OK;
    }
    return dp_fail(err, DP_ERR_PARSE, "%s: field \"%s\" must be \"%s\" or \"%s\"", name, key,
                   first, second);
}

dp_status json_write_file(const cJSON *obj, const char *path, dp_err *err)
{
    char *text = cJSON_Print(obj);
    if (!text) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    out_file o;
    dp_status st = out_open(&o, path, err);
    if (st == DP_OK) {
        fputs(text, o.fp);
        fputc('\n', o.fp);
        st = out_commit(&o, err);
    }
    free(text);
    return st;
}
