/*
 * trace.h — sequence-length traces: the type, its readers and writers.
 *
 * A trace is an ordered list of training samples. Each sample has a task and two token counts:
 * input_len (encoder input for T5, the prompt for GPT; at least 1) and target_len (decoder target;
 * 0 for decoder-only data). Order matters: global batches take consecutive samples.
 *
 * File formats (docs/formats.md):
 *   - Trace CSV, the project's own contract: header `task,input_len,target_len`, one row per
 *     sample; extra columns are allowed and kept (written back unchanged by trace_write_csv).
 *   - Any CSV with other column names, through trace_fields (e.g. FLAN's raw CoT lengths).
 *   - JSONL, one object per line, with `input_seq_len`, `target_seq_len` and `task_name` by
 *     default (the FLAN download format); the names are configurable through trace_fields.
 *   - DynaPipe's `.npy` length files: int64 arrays of shape (N, 3) holding [start, end, len] rows,
 *     one file for inputs and optionally one for targets (same N).
 *
 * Every reader validates each row and fails with "FILE:LINE: reason"; no row is ever skipped
 * silently. Lengths must be whole numbers in [1, 2^31-1] for inputs and [0, 2^31-1] for targets.
 */
#ifndef TRACE_H
#define TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/dp.h"

#define TRACE_MAX_LEN INT32_MAX

typedef struct trace_sample {
    int32_t input_len;  /* tokens, >= 1 */
    int32_t target_len; /* tokens, >= 0 (0: decoder-only data) */
    uint32_t task;      /* index into trace.tasks */
} trace_sample;

typedef struct trace {
    trace_sample *samples; /* n samples, in trace order */
    size_t n, cap;
    char **tasks;          /* n_tasks interned task names, indexed by trace_sample.task */
    size_t n_tasks, tasks_cap;
    uint32_t *task_index;  /* open-addressing hash table over tasks (task id + 1, 0 = empty) */
    size_t task_index_cap; /* power of two */
    char **extra_names;    /* n_extra names of kept extra CSV columns (NULL if none) */
    size_t n_extra;
    char **extra;          /* n * n_extra values, row-major; NULL when n_extra == 0 */
    size_t extra_cap;      /* rows allocated in extra */
} trace;

/* Column or field names used by the CSV and JSONL readers. NULL task means "no task column": every
 * sample then gets the task named by default_task. NULL target means target_len = 0. */
typedef struct trace_fields {
    const char *task;
    const char *input;
    const char *target;
    const char *default_task;
} trace_fields;

/* The trace CSV contract: task,input_len,target_len. */
extern const trace_fields TRACE_FIELDS_CSV;
/* The FLAN JSONL download format: task_name,input_seq_len,target_seq_len. */
extern const trace_fields TRACE_FIELDS_JSONL;

void trace_init(trace *t);
void trace_release(trace *t);

/* Returns the id of task name, adding it if new. */
dp_status trace_intern_task(trace *t, const char *name, uint32_t *id);

/* Appends one sample. Lengths must already be validated. */
dp_status trace_push(trace *t, const char *task, int32_t input_len, int32_t target_len);

/* Checks one length field's text and converts it. what is the column name used in messages,
 * min_len is 1 for inputs and 0 for targets. On failure the message is
 * "PATH:LINE: input_len \"-3\" is negative" and friends. */
dp_status trace_parse_len(const char *path, long line, const char *what, const char *text,
                          int32_t min_len, int32_t *out, dp_err *err);

/* Reads a trace CSV. With fields == NULL, the trace CSV contract's column names are used. Columns
 * not named by fields are kept as extra columns. The trace must be empty (trace_init). */
dp_status trace_read_csv(const char *path, const trace_fields *fields, trace *t, dp_err *err);

/* Same from an open stream (used by fuzzers and tests); name is used in messages. */
dp_status trace_read_csv_stream(FILE *fp, const char *name, const trace_fields *fields, trace *t,
                                dp_err *err);

/* Writes t as a trace CSV (with any kept extra columns). path "-" is stdout. */
dp_status trace_write_csv(const trace *t, const char *path, dp_err *err);

/* Imports JSONL. fields == NULL means TRACE_FIELDS_JSONL. */
dp_status trace_read_jsonl(const char *path, const trace_fields *fields, trace *t, dp_err *err);
dp_status trace_read_jsonl_stream(FILE *fp, const char *name, const trace_fields *fields,
                                  trace *t, dp_err *err);

/* Imports DynaPipe .npy length files. targets_path may be NULL (decoder-only data). Every sample
 * gets the task "npy". */
dp_status trace_read_npy(const char *inputs_path, const char *targets_path, trace *t, dp_err *err);

/* Parses one .npy image held in memory: an int64 (N, 3) array. On success *rows is a malloc'd
 * array of N*3 values in row-major order. name is used in messages. */
dp_status trace_npy_parse(const unsigned char *buf, size_t len, const char *name, int64_t **rows,
                          size_t *n, dp_err *err);

/* Writes a (N, 3) int64 .npy file of [start, end, len] rows for the given lengths (one column of
 * a trace: input when targets is 0, target otherwise). Used by tests and for exporting. */
dp_status trace_write_npy(const trace *t, int targets, const char *path, dp_err *err);

/* File formats a trace can be loaded from. */
typedef enum trace_format {
    TRACE_FORMAT_AUTO,  /* by extension: .jsonl/.json → jsonl, .npy → npy, otherwise csv */
    TRACE_FORMAT_CSV,   /* the trace CSV contract, or any CSV with trace_fields */
    TRACE_FORMAT_JSONL, /* FLAN download format */
    TRACE_FORMAT_NPY,   /* DynaPipe [start, end, len] int64 files */
    TRACE_FORMAT_COT,   /* FLAN's raw CoT lengths (traces/data/cot_raw_sample_lengths.csv) */
} trace_format;

/* Column sets of the CoT lengths file, in T5 and in GPT-2 tokens. */
extern const trace_fields TRACE_FIELDS_COT_T5;
extern const trace_fields TRACE_FIELDS_COT_GPT2;

/* Parses "auto", "csv", "jsonl", "npy", "cot"; 0 on success, -1 for an unknown name. */
int trace_format_parse(const char *name, trace_format *f);

/* The format TRACE_FORMAT_AUTO resolves to for path: .jsonl/.json → jsonl, .npy → npy, else csv. */
trace_format trace_format_for_path(const char *path);

/* Loads a trace in any format. fields overrides the format's default column names (NULL: the
 * format's own; for cot, the T5 columns). targets_npy is the target file for npy (may be NULL). */
dp_status trace_load(const char *path, trace_format fmt, const trace_fields *fields,
                     const char *targets_npy, trace *t, dp_err *err);

/* A trace CSV read one sample at a time, for traces of any length in bounded memory (only the
 * task names are kept). Samples get ids 0, 1, 2, ... in file order. */
typedef struct trace_stream {
    struct csv_reader *r;
    int idx[3];         /* task, input, target columns */
    trace tasks;        /* task names only (samples stay empty) */
    int32_t next_id;
} trace_stream;

dp_status trace_stream_open(trace_stream *ts, const char *path, dp_err *err);
/* The next sample; *eof = 1 at the end. Bad rows fail with FILE:LINE as trace_read_csv does. */
dp_status trace_stream_next(trace_stream *ts, trace_sample *s, int *eof, dp_err *err);
void trace_stream_close(trace_stream *ts);

/* FNV-1a hash of the trace's samples and task names, printed so that runs can be compared. */
uint64_t trace_hash(const trace *t);

#endif /* TRACE_H */
