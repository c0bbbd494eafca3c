#include "trace.h"

#include <stdlib.h>
#include <string.h>

const trace_fields TRACE_FIELDS_CSV = {"task", "input_len", "target_len", NULL};
const trace_fields TRACE_FIELDS_JSONL = {"task_name", "input_seq_len", "target_seq_len", "all"};
const trace_fields TRACE_FIELDS_COT_T5 = {"dataset", "question_t5", "target_t5", NULL};
const trace_fields TRACE_FIELDS_COT_GPT2 = {"dataset", "question_gpt2", "target_gpt2", NULL};

int trace_format_parse(const char *name, trace_format *f)
{
    static const char *const names[] = {"auto", "csv", "jsonl", "npy", "cot"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(name, names[i]) == 0) {
            *f = (trace_format)i;
            return 0;
        }
    return -1;
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcmp(s + n - m, suffix) == 0;
}

trace_format trace_format_for_path(const char *path)
{
    if (ends_with(path, ".jsonl") || ends_with(path, ".json")) return TRACE_FORMAT_JSONL;
    if (ends_with(path, ".npy")) return TRACE_FORMAT_NPY;
    return TRACE_FORMAT_CSV;
}

dp_status trace_load(const char *path, trace_format fmt, const trace_fields *fields,
                     const char *targets_npy, trace *t, dp_err *err)
{
    if (fmt == TRACE_FORMAT_AUTO) fmt = trace_format_for_path(path);
    switch (fmt) {
    case TRACE_FORMAT_JSONL: return trace_read_jsonl(path, fields, t, err);
    case TRACE_FORMAT_NPY: return trace_read_npy(path, targets_npy, t, err);
    case TRACE_FORMAT_COT: return trace_read_csv(path, fields ? fields : &TRACE_FIELDS_COT_T5, t, err);
    case TRACE_FORMAT_AUTO:
    case TRACE_FORMAT_CSV: break;
    }
    return trace_read_csv(path, fields, t, err);
}

void trace_init(trace *t)
{
    memset(t, 0, sizeof *t);
}

void trace_release(trace *t)
{
    if (!t) return;
    for (size_t i = 0; i < t->n_tasks; i++) free(t->tasks[i]);
    for (size_t i = 0; i < t->n_extra; i++) free(t->extra_names[i]);
    if (t->extra)
        for (size_t i = 0; i < t->n * t->n_extra; i++) free(t->extra[i]);
    free(t->tasks);
    free(t->task_index);
    free(t->extra_names);
    free(t->extra);
    free(t->samples);
    trace_init(t);
}

static dp_status rehash_tasks(trace *t, size_t cap)
{
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return DP_ERR_NOMEM;
    for (size_t i = 0; i < t->n_tasks; i++) {
        size_t h = dp_fnv1a(DP_FNV_OFFSET, t->tasks[i], strlen(t->tasks[i])) & (cap - 1);
        while (idx[h]) h = (h + 1) & (cap - 1);
        idx[h] = (uint32_t)i + 1;
    }
    free(t->task_index);
    t->task_index = idx;
    t->task_index_cap = cap;
    return DP_OK;
}

dp_status trace_intern_task(trace *t, const char *name, uint32_t *id)
{
    size_t len = strlen(name);
    if (t->task_index_cap) {
        size_t h = dp_fnv1a(DP_FNV_OFFSET, name, len) & (t->task_index_cap - 1);
        while (t->task_index[h]) {
            uint32_t cand = t->task_index[h] - 1;
            if (strcmp(t->tasks[cand], name) == 0) {
                *id = cand;
                return DP_OK;
            }
            h = (h + 1) & (t->task_index_cap - 1);
        }
    }
    if (t->n_tasks >= UINT32_MAX - 1) return DP_ERR_INVALID;
    if (dp_grow((void **)&t->tasks, &t->tasks_cap, t->n_tasks + 1, sizeof *t->tasks) != DP_OK)
        return DP_ERR_NOMEM;
    char *copy = dp_strdup(name);
    if (!copy) return DP_ERR_NOMEM;
    t->tasks[t->n_tasks++] = copy;
    if (t->n_tasks * 2 > t->task_index_cap) {
        if (rehash_tasks(t, t->task_index_cap ? t->task_index_cap * 2 : 64) != DP_OK) {
            t->n_tasks--;
            free(copy);
            return DP_ERR_NOMEM;
        }
    } else {
        size_t h = dp_fnv1a(DP_FNV_OFFSET, name, len) & (t->task_index_cap - 1);
        while (t->task_index[h]) h = (h + 1) & (t->task_index_cap - 1);
        t->task_index[h] = (uint32_t)t->n_tasks;
    }
    *id = (uint32_t)t->n_tasks - 1;
    return DP_OK;
}

dp_status trace_push(trace *t, const char *task, int32_t input_len, int32_t target_len)
{
    uint32_t id;
    dp_status st = trace_intern_task(t, task, &id);
    if (st != DP_OK) return st;
    if (dp_grow((void **)&t->samples, &t->cap, t->n + 1, sizeof *t->samples) != DP_OK)
        return DP_ERR_NOMEM;
    t->samples[t->n++] = (trace_sample){input_len, target_len, id};
    return DP_OK;
}

dp_status trace_parse_len(const char *path, long line, const char *what, const char *text,
                          int32_t min_len, int32_t *out, dp_err *err)
{
    int64_t v;
    if (dp_parse_i64(text, INT64_MIN, INT64_MAX, &v) != 0) {
        double d;
        if (dp_parse_f64(text, &d) == 0 && d > (double)TRACE_MAX_LEN)
            return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s \"%s\" is too large (max %d)", path,
                           line, what, text, TRACE_MAX_LEN);
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s \"%s\" is not a whole number", path, line,
                       what, text);
    }
    if (v < 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s \"%s\" is negative", path, line, what,
                       text);
    if (v < min_len)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s \"%s\" must be at least %d", path, line,
                       what, text, (int)min_len);
    if (v > TRACE_MAX_LEN)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: %s \"%s\" is too large (max %d)", path, line,
                       what, text, TRACE_MAX_LEN);
    *out = (int32_t)v;
    return DP_OK;
}

uint64_t trace_hash(const trace *t)
{
    uint64_t h = DP_FNV_OFFSET;
    for (size_t i = 0; i < t->n; i++) {
        const trace_sample *s = &t->samples[i];
        const char *name = t->tasks[s->task];
        h = dp_fnv1a(h, name, strlen(name) + 1);
        int32_t lens[2] = {s->input_len, s->target_len};
        h = dp_fnv1a(h, lens, sizeof lens);
    }
    return h;
}
