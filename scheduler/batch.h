/*
 * batch.h — from a trace to the samples of each iteration (global batches), with the length rules
 * that turn raw token counts into the shapes a model runs.
 *
 * Length rules (batch_rules, all reported in the plan):
 *   GPT   trains on input + target as one sequence: enc = min(input + target, max_seqlen), dec = 0.
 *   T5    enc = min(input, max_seqlen); dec = min(target, max_dec_seqlen - dec_extra) + dec_extra,
 *         the decoder getting BOS/EOS (dec_extra = 2).
 *   A micro-batch's padded length is its longest sample's, rounded up to a multiple of
 *   pad_multiple (8) and to at least min_padded (the cost profile's shortest measured length).
 *
 * A sample's tokens are enc + dec (real, unpadded). Iteration i takes consecutive trace samples
 * until their tokens would exceed global_tokens (DynaPipe's rule); a single sample larger than the
 * budget is an error, not a silent drop.
 *
 * Packed rows (batch_row_fits, the one packing rule): a row holds samples while their enc sum is at
 * most max_seqlen and, for T5, their dec sum at most max_dec_seqlen. Megatron's --pack-dataset
 * packs the whole trace first (next-fit, in trace order) and cuts the packed rows into global
 * batches of a fixed number of rows: batch_iter_pack_rows makes the iterator cut that way, so that
 * a batch is exactly the samples of its rows and next-fit over it rebuilds them.
 */
#ifndef BATCH_H
#define BATCH_H

#include <stdint.h>

#include "../common/dp.h"
#include "../models/model.h"
#include "../traces/trace.h"

typedef struct batch_rules {
    model_arch arch;
    int64_t global_tokens; /* token budget of one iteration                  [65536] */
    int max_seqlen;        /* input (GPT: whole sequence) truncation, tokens  [2048] */
    int max_dec_seqlen;    /* T5 decoder length cap including BOS/EOS, tokens [512] */
    int dec_extra;         /* T5 decoder extra tokens (BOS/EOS)               [2] */
    int pad_multiple;      /* padded lengths are multiples of this            [8] */
    int min_padded;        /* padded lengths are at least this                [16] */
} batch_rules;

/* One sample after truncation. */
typedef struct sample_len {
    int32_t id;  /* index in the trace */
    int32_t enc; /* tokens (GPT: input + target) */
    int32_t dec; /* tokens including dec_extra; 0 for GPT */
} sample_len;

void batch_rules_default(batch_rules *r, model_arch arch);

/* Checks the rules ("--max-seqlen must be at least 1") . */
dp_status batch_rules_validate(const batch_rules *r, dp_err *err);

/* Padded length of a sequence of len real tokens (0 stays 0). */
int batch_pad(const batch_rules *r, int len);

/* The truncated lengths of a sample with id i. */
sample_len batch_sample_of(const batch_rules *r, const trace_sample *s, size_t i);
/* The truncated lengths of trace sample i. */
sample_len batch_sample(const batch_rules *r, const trace *t, size_t i);
/* The real tokens of the whole trace after the length rules (input + target): a pass over it. */
int64_t batch_trace_tokens(const batch_rules *r, const trace *t);

/* A packed row's use: real tokens in its encoder (GPT: sequence) and decoder. */
typedef struct batch_row {
    int enc, dec;
} batch_row;

/* Whether sample x still fits in row w (above). */
int batch_row_fits(const batch_rules *r, const batch_row *w, const sample_len *x);

/* Rows per global batch of pack-dataset packing: global_tokens / max_seqlen rounded down to a
 * multiple of mbs x dp (Megatron's global batch of whole rows, divisible into micro-batches on
 * every replica), and at least mbs x dp. */
int batch_pack_rows(const batch_rules *r, int mbs, int dp);

/* Walks a trace one global batch at a time: an in-memory trace, or a stream of any length. */
typedef struct batch_iter {
    const trace *t;    /* in-memory source, or NULL */
    trace_stream *ts;  /* streaming source, or NULL */
    const batch_rules *r;
    size_t next;       /* samples consumed (the next sample's id) */
    int has_pending;   /* streaming: a sample read but left for the next batch */
    trace_sample pending;
    int iteration;     /* index of the batch batch_next returns next */
    int pack_rows;     /* > 0: batches of this many next-fit rows instead of the token budget */
    sample_len *buf;   /* the current batch */
    int cap;
} batch_iter;

void batch_iter_init(batch_iter *it, const trace *t, const batch_rules *r);
void batch_iter_init_stream(batch_iter *it, trace_stream *ts, const batch_rules *r);
void batch_iter_release(batch_iter *it);
/* From now on, batches are `rows` packed rows each (rows >= 1), as Megatron's --pack-dataset. */
void batch_iter_pack_rows(batch_iter *it, int rows);

/* Fills *out with the next global batch (valid until the next call); *n = 0 at the end. Fails when
 * one sample alone exceeds the global token budget (token batches only: a row always holds one). */
dp_status batch_next(batch_iter *it, const sample_len **out, int *n, dp_err *err);

#endif /* BATCH_H */
