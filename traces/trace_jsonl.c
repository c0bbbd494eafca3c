/* JSONL trace import (cJSON): one JSON object per line. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_util.h"
#include "trace.h"

/* Reads one integer length field of obj. */
static dp_status json_len(const cJSON *obj, const char *name, const char *path, long line,
                          int32_t min_len, int32_t *out, dp_err *err)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    if (!v) return dp_fail(err, DP_ERR_PARSE, "%s:%ld: missing field \"%s\"", path, line, name);
    if (!cJSON_IsNumber(v))
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: field \"%s\" is not a number", path, line,
                       name);
    double d = v->valuedouble;
    if (!isfinite(d) || d != floor(d))
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s %g is not a whole number", path, line, name,
                       d);
    if (d < 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s %.0f is negative", path, line, name, d);
    if (d < min_len)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s %.0f must be at least %d", path, line, name,
                       d, (int)min_len);
    if (d > TRACE_MAX_LEN)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s %.0f is too large (max %d)", path, line,
                       name, d, TRACE_MAX_LEN);
    *out = (int32_t)d;
    return DP_OK;
}

static int blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n') return 0;
    return 1;
}

dp_status trace_read_jsonl_stream(FILE *fp, const char *name, const trace_fields *fields,
                                  trace *t, dp_err *err)
{
    const trace_fields *f = fields ? fields : &TRACE_FIELDS_JSONL;
    dp_status st = DP_OK;
    char *buf = NULL;
    size_t cap = 0;
    long n;
    long line = 0;
    cJSON *obj = NULL;
    while ((n = dp_read_line(fp, &buf, &cap, DP_LINE_MAX)) > 0) {
        line++;
        if ((size_t)n != strlen(buf)) {
            st = dp_fail(err, DP_ERR_PARSE, "%s:%ld: line contains a NUL byte", name, line);
            goto out;
        }
        const char *s = buf;
        if (line == 1 && n >= 3 && memcmp(s, "\xEF\xBB\xBF", 3) == 0) s += 3;
        if (blank(s)) continue;
        const char *end = NULL;
        obj = cJSON_ParseWithOpts(s, &end, 0);
        if (!obj) {
            st = dp_fail(err, DP_ERR_PARSE, "%s:%ld: malformed JSON", name, line);
            goto out;
        }
        if (!cJSON_IsObject(obj)) {
            st = dp_fail(err, DP_ERR_PARSE, "%s:%ld: expected a JSON object", name, line);
            goto out;
        }
        if (!blank(end)) { /* JSONL: one object per line and nothing else */
            st = dp_fail(err, DP_ERR_PARSE, "%s:%ld: text after the object (JSONL holds one "
                         "object per line)", name, line);
            goto out;
        }
        TRY(json_strict(obj, s, name, line, err));
        int32_t in, tgt = 0;
        TRY(json_len(obj, f->input, name, line, 1, &in, err));
        if (f->target) TRY(json_len(obj, f->target, name, line, 0, &tgt, err));
        const char *task = f->default_task;
        if (f->task) {
            const cJSON *tv = cJSON_GetObjectItemCaseSensitive(obj, f->task);
            if (tv && !cJSON_IsString(tv)) {
                st = dp_fail(err, DP_ERR_PARSE, "%s:%ld: field \"%s\" is not a string", name,
                             line, f->task);
                goto out;
            }
            if (tv) task = tv->valuestring;
        }
        if (!task || !*task) {
            st = dp_fail(err, DP_ERR_PARSE, "%s:%ld: missing field \"%s\"", name, line,
                         f->task ? f->task : "task");
            goto out;
        }
        if (trace_push(t, task, in, tgt) != DP_OK) {
            st = dp_fail(err, DP_ERR_NOMEM, "%s:%ld: out of memory", name, line);
            goto out;
        }
        cJSON_Delete(obj);
        obj = NULL;
    }
    if (n == -2) {
        st = dp_fail(err, DP_ERR_PARSE, "%s:%ld: line longer than %zu MiB (the limit of a JSONL "
                     "line)", name, line + 1, DP_LINE_MAX >> 20);
        goto out;
    }
    if (n < 0 || ferror(fp)) {
        st = dp_fail(err, DP_ERR_IO, "%s: read error: %s", name, strerror(errno));
        goto out;
    }
    if (t->n == 0) st = dp_fail(err, DP_ERR_PARSE, "%s: no samples (file is empty)", name);
out:
    cJSON_Delete(obj);
    free(buf);
    return st;
}

dp_status trace_read_jsonl(const char *path, const trace_fields *fields, trace *t, dp_err *err)
{
    int use_stdin = strcmp(path, "-") == 0;
    FILE *fp = use_stdin ? stdin : fopen(path, "rb");
    if (!fp) return dp_fail(err, DP_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    dp_status st = trace_read_jsonl_stream(fp, use_stdin ? "<stdin>" : path, fields, t, err);
    if (!use_stdin) fclose(fp);
    return st;
}
