#include "tune.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../scheduler/microbatch.h"

void tune_space_default(tune_space *sp, int gpus, int gpus_per_node, int layers, int t5)
{
    memset(sp, 0, sizeof *sp);
    sp->gpus = gpus;
    sp->gpus_per_node = gpus_per_node;
    sp->layers = layers;
    sp->t5 = t5;
    static const int tps[] = {1, 2, 4, 8}, mbs[] = {1, 2, 4, 8};
    static const int64_t tok[] = {1024, 2048, 4096, 8192, 16384};
    for (int i = 0; i < 4; i++) sp->tps[sp->n_tps++] = tps[i];
    for (int i = 0; i < 4; i++) sp->mbs[sp->n_mbs++] = mbs[i];
    for (int i = 0; i < 5; i++) sp->mb_tokens[sp->n_mb_tokens++] = tok[i];
}

/* Fills out[] (when given) with every point in order; returns the count. */
static long each_point(const tune_space *sp, tune_point *out)
{
    static const char *const modes[] = {"none", "selective", "full", "dynamic"};
    long n = 0;
    for (int b = 0; b < sp->n_batchings; b++) {
        const char *bt = sp->batchings[b];
        const batcher *by = batcher_find(bt);
        if (!by) continue; /* the caller checks the names */
        int dynamic = by->memory_aware, packer = by->knob == BATCH_KNOB_MBS;
        int token = by->knob == BATCH_KNOB_MB_TOKENS;
        int knobs = packer ? sp->n_mbs : token ? sp->n_mb_tokens : 1;
        for (int s = 0; s < sp->n_schedules; s++)
            for (int t = 0; t < sp->n_tps; t++) {
                int tp = sp->tps[t];
                if (tp > sp->gpus_per_node || sp->gpus % tp) continue;
                for (int pp = 1; pp <= sp->gpus / tp && pp <= sp->layers; pp++) {
                    if ((sp->gpus / tp) % pp || (sp->t5 && pp > 1 && pp % 2)) continue;
                    int dp = sp->gpus / tp / pp;
                    /* ZeRO 2 and 3 only without a pipeline (stage_cost.h) */
                    int zero_max = dp == 1 ? 0 : pp == 1 ? 3 : 1;
                    for (int zero = 0; zero <= zero_max; zero++)
                        for (int m = 0; m < 3 + dynamic; m++)
                            for (int k = 0; k < knobs; k++) {
                                if (out)
                                    out[n] = (tune_point){bt, sp->schedules[s], tp, pp, dp, zero,
                                                          packer ? sp->mbs[k] : 1,
                                                          token ? sp->mb_tokens[k] : 2048, modes[m]};
                                n++;
                            }
                }
            }
    }
    return n;
}

long tune_points(const tune_space *sp, tune_point **out)
{
    long n = each_point(sp, NULL);
    *out = n ? malloc((size_t)n * sizeof **out) : NULL;
    if (!*out) return 0;
    each_point(sp, *out);
    return n;
}

void tune_point_describe(const tune_point *p, char *buf, size_t cap)
{
    int at = snprintf(buf, cap, "batching=%s schedule=%s tp=%d pp=%d dp=%d zero=%d recompute=%s",
                      p->batching, p->schedule, p->tp, p->pp, p->dp, p->zero, p->recompute);
    const batcher *by = batcher_find(p->batching);
    int knob = by ? by->knob : BATCH_KNOB_NONE;
    if (at > 0 && (size_t)at < cap) {
        if (knob == BATCH_KNOB_MBS) snprintf(buf + at, cap - (size_t)at, " mbs=%d", p->mbs);
        else if (knob == BATCH_KNOB_MB_TOKENS)
            snprintf(buf + at, cap - (size_t)at, " mb-tokens=%lld", (long long)p->mb_tokens);
    }
}

static int cmp_result(const void *a, const void *b)
{
    const tune_result *x = a, *y = b;
    if (x->ok != y->ok) return y->ok - x->ok;
    if (x->ok && x->throughput != y->throughput) return x->throughput < y->throughput ? 1 : -1;
    return (x->index > y->index) - (x->index < y->index);
}

void tune_rank(tune_result *r, long n)
{
    qsort(r, (size_t)n, sizeof *r, cmp_result);
}

const tune_result *tune_best(const tune_result *r, long n, const char *batching)
{
    for (long i = 0; i < n; i++)
        if (r[i].ok && strcmp(r[i].pt.batching, batching) == 0) return &r[i];
    return NULL;
}

const char TUNE_CSV_HEADER[] =
    "rank,batching,schedule,tp,pp,dp,zero,recompute,mbs,mb_tokens,feasible,"
    "throughput_tokens_per_s,mfu,peak_mem_mb,why";

void tune_csv_row(const tune_result *r, long rank, char *buf, size_t cap)
{
    char why[sizeof r->why];
    snprintf(why, sizeof why, "%s", r->why);
    for (char *c = why; *c; c++)
        if (*c == '"' || *c == '\n' || *c == ',') *c = *c == '"' ? '\'' : ' ';
    const tune_point *p = &r->pt;
    snprintf(buf, cap, "%ld,%s,%s,%d,%d,%d,%d,%s,%d,%lld,%d,%.2f,%.5f,%.1f,\"%s\"", rank,
             p->batching, p->schedule, p->tp, p->pp, p->dp, p->zero, p->recompute, p->mbs,
             (long long)p->mb_tokens, r->ok, r->ok ? r->throughput : 0, r->ok ? r->mfu : 0,
             r->peak_mb, why);
}

dp_status tune_scoring_trace(const trace *t, const batch_rules *r, int k, trace *out,
                             int *longest_batch, dp_err *err)
{
    trace_init(out);
    *longest_batch = -1;
    /* the batches' first samples, and where the longest sample is */
    size_t cap = 0, *start = NULL;
    int n_batches = 0, where = -1;
    int32_t longest = -1;
    batch_iter it;
    batch_iter_init(&it, t, r);
    dp_status st = DP_OK;
    for (;;) {
        const sample_len *b;
        int n;
        size_t first = it.next;
        if ((st = batch_next(&it, &b, &n, err)) != DP_OK || n == 0) break;
        if (dp_grow((void **)&start, &cap, (size_t)n_batches + 2, sizeof *start) != DP_OK) {
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
            break;
        }
        start[n_batches] = first;
        for (int i = 0; i < n; i++)
            if (b[i].enc + b[i].dec > longest) longest = b[i].enc + b[i].dec, where = n_batches;
        n_batches++;
    }
    batch_iter_release(&it);
    if (st == DP_OK && n_batches > 0) {
        start[n_batches] = t->n;
        int keep = k < n_batches ? k : n_batches;
        int last = where >= keep - 1 ? where : keep - 1; /* the k-th batch: the longest's */
        *longest_batch = where;
        for (int q = 0; q < keep && st == DP_OK; q++) {
            int bi = q < keep - 1 ? q : last;
            for (size_t i = start[bi]; i < start[bi + 1] && st == DP_OK; i++)
                st = trace_push(out, t->tasks[t->samples[i].task], t->samples[i].input_len,
                                t->samples[i].target_len);
        }
        if (st != DP_OK) dp_fail(err, st, "out of memory");
    }
    free(start);
    if (st != DP_OK) trace_release(out);
    return st;
}
