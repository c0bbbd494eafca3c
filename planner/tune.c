#include "tune.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/csv_table.h"
#include "../models/memory.h"
#include "../models/moe.h"
#include "../scheduler/microbatch.h"
#include "../scheduler/schedule.h"

void tune_space_default(tune_space *sp, int gpus, int gpus_per_node, int layers, int t5)
{
    memset(sp, 0, sizeof *sp);
    sp->gpus = gpus;
    sp->gpus_per_node = gpus_per_node;
    sp->layers = layers;
    sp->t5 = t5;
    sp->cps[0] = 1, sp->n_cps = 1;
    sp->precisions[0] = PRECISION_BF16, sp->n_precisions = 1;
    sp->eps[0] = 1, sp->n_eps = 1, sp->etp = 1;
    static const int tps[] = {1, 2, 4, 8}, mbs[] = {1, 2, 4, 8}, chunks[] = {2, 4};
    static const int64_t tok[] = {1024, 2048, 4096, 8192, 16384};
    for (int i = 0; i < 4; i++) sp->tps[sp->n_tps++] = tps[i];
    for (int i = 0; i < 4; i++) sp->mbs[sp->n_mbs++] = mbs[i];
    for (int i = 0; i < 2; i++) sp->chunks[sp->n_chunks++] = chunks[i];
    for (int i = 0; i < 5; i++) sp->mb_tokens[sp->n_mb_tokens++] = tok[i];
}

/* The points of one (batching, schedule, chunks, tp, cp), given in p, appended to out[] (when
 * given) from index n: every pipeline depth that divides the rest of the GPUs, then ZeRO stage,
 * recompute mode (dynamic too for a memory-aware batcher) and the batcher's knob. Returns the new
 * count. */
static long layout_points(const tune_space *sp, tune_point p, const batcher *by, tune_point *out,
                          long n)
{
    int packer = by->knob == BATCH_KNOB_MBS, token = by->knob == BATCH_KNOB_MB_TOKENS;
    int knobs = packer ? sp->n_mbs : token ? sp->n_mb_tokens : 1, modes = RECOMPUTE_COUNT + by->memory_aware;
    int per = sp->gpus % p.cp ? 0 : sp->gpus / p.cp; /* tp x pp x dp */
    if (p.tp > sp->gpus_per_node || per == 0 || per % p.tp) return n;
    for (p.pp = 1; p.pp <= per / p.tp && p.pp <= sp->layers && p.pp <= STAGE_MAX; p.pp++) {
        if ((per / p.tp) % p.pp || (sp->t5 && p.pp > 1 && p.pp % 2)) continue;
        if (p.chunks > 1 && (p.pp < 2 || p.pp * p.chunks > sp->layers)) continue;
        p.dp = per / p.tp / p.pp;
        if (p.dp > REPLICA_MAX) continue; /* what --dp and a plan take */
        if ((p.tp * p.cp * p.dp) % (p.ep * (sp->etp > 1 ? sp->etp : 1))) continue; /* ep (x etp) folds
                                                                                     * over a stage's GPUs */
        /* ZeRO 2 and 3 with a pipeline (FSDP with PP: a stage's parameters gathered and its
         * gradients reduce-scattered for every micro-batch, stage_cost.h) only when asked */
        /* ZeRO shards over the dp x cp GPUs that hold the same weights (stage_cost.h) */
        int zero_max = p.dp * p.cp == 1 ? 0 : p.pp == 1 || sp->zero_pipeline ? 3 : 1;
        for (p.zero = 0; p.zero <= zero_max; p.zero++) {
            int hsdp = p.zero == 3 ? tune_hsdp_group(&p, sp->gpus_per_node) : 0;
            for (int h = 0; h < (hsdp ? 2 : 1); h++) {
                p.shard_group = h ? hsdp : 0;
                for (p.recompute = 0; p.recompute < modes; p.recompute++)
                    for (int k = 0; k < knobs; k++, n++) {
                        p.mbs = packer ? sp->mbs[k] : 1;
                        p.mb_tokens = token ? sp->mb_tokens[k] : 2048;
                        if (out) out[n] = p;
                    }
            }
        }
    }
    return n;
}

int tune_hsdp_group(const tune_point *p, int gpus_per_node)
{
    int cp = p->cp > 1 ? p->cp : 1, width = p->tp * cp * p->pp;
    if (width <= 0 || gpus_per_node % width) return 0;
    int k = gpus_per_node / width, g = cp * k;
    if (k >= p->dp || g < 2 || stage_shard_check(g, p->dp, cp, p->zero, NULL, 0) != 0) return 0;
    return g;
}

/* Fills out[] (when given) with every point in order; returns the count. */
static long each_point(const tune_space *sp, tune_point *out)
{
    long n = 0;
    for (int b = 0; b < sp->n_batchings; b++) {
        const batcher *by = batcher_find(sp->batchings[b]);
        if (!by) continue; /* the caller checks the names */
        for (int s = 0; s < sp->n_schedules; s++) {
            const schedule *sc = schedule_find(sp->schedules[s]);
            int chunked = sc && sc->chunked, fixed = sc ? sc->chunks_fixed : 0; /* zbv: 2 */
            for (int h = 0; h < (chunked && !fixed ? sp->n_chunks : 1); h++)
                for (int f = 0; f < sp->n_precisions; f++)
                    for (int t = 0; t < sp->n_tps; t++)
                        for (int c = 0; c < sp->n_cps; c++)
                            for (int e = 0; e < sp->n_eps; e++) {
                                tune_point p = {.batching = sp->batchings[b],
                                                .schedule = sp->schedules[s],
                                                .chunks = fixed ? fixed : chunked ? sp->chunks[h] : 1,
                                                .precision = sp->precisions[f], .tp = sp->tps[t],
                                                .cp = sp->cps[c] > 1 ? sp->cps[c] : 1,
                                                .cp_auto = sp->cp_autos[c],
                                                .ep = sp->eps[e]};
                                n = layout_points(sp, p, by, out, n);
                            }
        }
    }
    return n;
}

/* A comma-separated list of distinct items, each read by item() into an int (0, or -1 when it is
 * not one: the message then says what an item is, `what`); at most max. 0, or -1 with why. */
static int parse_list(const char *opt, const char *arg, int max, int (*item)(const char *, int *),
                      const char *what, int *vals, int *n, char *why, size_t cap)
{
    *n = 0;
    for (const char *at = arg;; at++) { /* an item ends at a comma or the end */
        size_t len = strcspn(at, ",");
        char text[32];
        int v;
        snprintf(text, sizeof text, "%.*s", (int)(len < sizeof text ? len : sizeof text - 1), at);
        if (len == 0 || len >= sizeof text || item(text, &v) != 0) {
            snprintf(why, cap, "%s \"%s\": \"%.20s\" is not %s", opt, arg, text, what);
            return -1;
        }
        for (int k = 0; k < *n; k++)
            if (vals[k] == v) {
                snprintf(why, cap, "%s \"%s\" names \"%s\" twice", opt, arg, text);
                return -1;
            }
        if (*n == max) {
            snprintf(why, cap, "%s \"%s\": at most %d items", opt, arg, max);
            return -1;
        }
        vals[(*n)++] = v;
        at += len;
        if (!*at) return 0;
    }
}

static int cp_item(const char *text, int *v)
{
    if (strcmp(text, "auto") == 0) {
        *v = TUNE_CP_AUTO;
        return 0;
    }
    int64_t x;
    if (dp_parse_i64(text, 1, 1024, &x) != 0) return -1;
    *v = (int)x;
    return 0;
}

static int precision_item(const char *text, int *v)
{
    train_precision p;
    if (precision_parse(text, &p) != 0) return -1;
    *v = (int)p;
    return 0;
}

int tune_parse_cp_list(const char *arg, int *cps, int *n, char *why, size_t cap)
{
    return parse_list("--cp", arg, TUNE_MAX_CP, cp_item,
                      "a degree in [1, 1024] (a list such as 1,2,4, or auto)", cps, n, why, cap);
}

static int ep_item(const char *text, int *v)
{
    _Static_assert(MOE_EP_MAX == 1024, "tune_parse_ep_list's message says the range");
    int64_t x;
    if (dp_parse_i64(text, 1, MOE_EP_MAX, &x) != 0) return -1;
    *v = (int)x;
    return 0;
}

int tune_parse_ep_list(const char *arg, int *eps, int *n, char *why, size_t cap)
{
    return parse_list("--ep", arg, TUNE_MAX_EP, ep_item,
                      "an expert-parallel degree in [1, 1024] (a list such as 1,4,8)",
                      eps, n, why, cap);
}

int tune_parse_precision_list(const char *arg, int *precs, int *n, char *why, size_t cap)
{
    return parse_list("--precision", arg, TUNE_MAX_PRECISION, precision_item,
                      "a precision (bf16, fp16, fp8; a list such as bf16,fp8)", precs, n, why, cap);
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
    char chunks[24] = "";
    if (p->chunks > 1) snprintf(chunks, sizeof chunks, " chunks=%d", p->chunks);
    char shard[24] = "";
    if (p->shard_group > 0) snprintf(shard, sizeof shard, " shard-group=%d", p->shard_group);
    char cp[48];
    if (p->cp_auto) snprintf(cp, sizeof cp, "cp=auto cp-max=%d", p->cp);
    else snprintf(cp, sizeof cp, "cp=%d", p->cp);
    if (p->ep > 1) snprintf(cp + strlen(cp), sizeof cp - strlen(cp), " ep=%d", p->ep);
    int at = snprintf(buf, cap, "batching=%s schedule=%s%s precision=%s tp=%d %s pp=%d dp=%d "
                      "zero=%d%s recompute=%s", p->batching, p->schedule, chunks,
                      precision_name((train_precision)p->precision), p->tp, cp, p->pp, p->dp,
                      p->zero, shard, recompute_policy_name(p->recompute));
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
    /* throughputs as the ranking CSV writes them (0.01 tokens/s), so that a ranking read back
     * (tune --resume) orders its ties as the search did */
    double tx = round(x->throughput * 100), ty = round(y->throughput * 100);
    if (x->ok && tx != ty) return tx < ty ? 1 : -1;
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

/* A point's model state per GPU, relative (memory.h's rule for a unit of parameters split over
 * its tp x pp shards, ZeRO over its dp x cp ones): what orders points that did not fit without a
 * simulated peak. */
static double relative_state(const tune_point *p)
{
    return memory_model_state_mb(1.0 / ((double)p->tp * p->pp), NULL, p->zero,
                                 stage_shard_size(p->shard_group, p->dp, p->cp));
}

const tune_result *tune_nothing_fits(const tune_result *r, long n)
{
    const tune_result *near = NULL;
    for (long i = 0; i < n; i++) {
        if (!r[i].done || r[i].ok || r[i].died) return NULL; /* unfinished, fitting, or unknown */
        int better = !near;
        if (near && (r[i].peak_mb > 0) != (near->peak_mb > 0)) better = r[i].peak_mb > 0;
        else if (near && r[i].peak_mb > 0) better = r[i].peak_mb < near->peak_mb;
        else if (near) better = relative_state(&r[i].pt) < relative_state(&near->pt);
        if (better) near = &r[i];
    }
    return near;
}

const tune_result *tune_reference(const tune_result *r, long n, const char *const *batchings,
                                  int nb, const char **name)
{
    const tune_result *base = NULL;
    *name = "packing";
    for (int i = 0; i < nb; i++) {
        const batcher *b = batcher_find(batchings[i]);
        const tune_result *best = tune_best(r, n, batchings[i]);
        if (b && b->varlen && !b->memory_aware && best && (!base || best->throughput > base->throughput))
            base = best, *name = batchings[i];
    }
    return base ? base : tune_best(r, n, "packing");
}

const char TUNE_CSV_HEADER[] =
    "rank,batching,schedule,chunks,precision,tp,cp,cp_auto,ep,pp,dp,zero,shard_group,recompute,mbs,"
    "mb_tokens,"
    "feasible,"
    "throughput_tokens_per_s,mfu,peak_mem_mb,why";

void tune_csv_row(const tune_result *r, long rank, char *buf, size_t cap)
{
    char why[sizeof r->why], cell[2 * sizeof r->why + 3];
    snprintf(why, sizeof why, "%s", r->why);
    for (char *c = why; *c; c++) /* one row on one line */
        if (*c == '\n' || *c == '\r') *c = ' ';
    csv_format_field(cell, sizeof cell, why);
    const tune_point *p = &r->pt;
    snprintf(buf, cap, "%ld,%s,%s,%d,%s,%d,%d,%d,%d,%d,%d,%d,%d,%s,%d,%lld,%d,%.2f,%.5f,%.1f,%s", rank,
             p->batching, p->schedule, p->chunks > 1 ? p->chunks : 1,
             precision_name((train_precision)p->precision), p->tp, p->cp, p->cp_auto,
             p->ep > 1 ? p->ep : 1, p->pp, p->dp,
             p->zero, stage_shard_size(p->shard_group, p->dp, p->cp),
             recompute_policy_name(p->recompute), p->mbs,
             (long long)p->mb_tokens, r->ok, r->ok ? r->throughput : 0, r->ok ? r->mfu : 0,
             r->peak_mb, cell);
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

/* ---- reading a ranking back (a resumed search) -------------------------------------------------- */

#define RANKING_COLS 21 /* TUNE_CSV_HEADER's columns */
typedef struct ranking_reader {
    tune_result *res;
    long n, read, foreign;
    int idx[RANKING_COLS];
} ranking_reader;

static dp_status ranking_header(void *ctx, const csv_row *h, dp_err *err)
{
    ranking_reader *r = ctx;
    static const csv_column cols[RANKING_COLS] = {
        {"rank", 1},     {"batching", 1},  {"schedule", 1}, {"tp", 1},
        {"pp", 1},       {"dp", 1},        {"zero", 1},     {"recompute", 1},
        {"mbs", 1},      {"mb_tokens", 1}, {"feasible", 1}, {"throughput_tokens_per_s", 1},
        {"mfu", 1},      {"peak_mem_mb", 1}, {"why", 1},   {"cp", 1},
        {"chunks", 0},     /* (rankings before interleaved was searched: 1) */
        {"precision", 0},  /* (rankings before precision was searched: any) */
        {"shard_group", 0},  /* (rankings before HSDP was searched: the whole group) */
        {"cp_auto", 0},      /* (rankings before auto was a list item: any) */
        {"ep", 0}};          /* (rankings before ep was searched: 1) */
    return csv_header_map(h, cols, RANKING_COLS, r->idx, err);
}

static dp_status ranking_row(void *ctx, const csv_row *row, dp_err *err)
{
    ranking_reader *r = ctx;
    const char *f[RANKING_COLS];
    for (int k = 0; k < RANKING_COLS; k++) f[k] = r->idx[k] >= 0 ? row->fields[r->idx[k]] : NULL;
    int64_t tp, cp, pp, dp, zero, mbs, mbt, ok, chunks = 1;
    train_precision prec = PRECISION_BF16;
    int64_t shard = 0, cp_auto = 0, ep = 1;
    double thr, mfu, peak;
    if (dp_parse_i64(f[3], 1, 1 << 20, &tp) || dp_parse_i64(f[15], 1, 1 << 20, &cp) ||
        dp_parse_i64(f[4], 1, 1 << 20, &pp) ||
        dp_parse_i64(f[5], 1, 1 << 20, &dp) || dp_parse_i64(f[6], 0, 3, &zero) ||
        dp_parse_i64(f[8], 0, 1 << 30, &mbs) || dp_parse_i64(f[9], 0, INT64_C(1) << 40, &mbt) ||
        dp_parse_i64(f[10], 0, 1, &ok) || dp_parse_f64(f[11], &thr) || dp_parse_f64(f[12], &mfu) ||
        dp_parse_f64(f[13], &peak) || (f[16] && dp_parse_i64(f[16], 1, 1024, &chunks)) ||
        (f[17] && precision_parse(f[17], &prec) != 0) ||
        (f[18] && dp_parse_i64(f[18], 1, 1 << 20, &shard)) ||
        (f[19] && dp_parse_i64(f[19], 0, 1, &cp_auto)) ||
        (f[20] && dp_parse_i64(f[20], 1, MOE_EP_MAX, &ep)) || !(thr >= 0) || !(mfu >= 0 && mfu <= 1) ||
        !(peak >= 0))
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: not a row of a tune ranking (tp, cp, pp, dp, zero, "
                       "mbs, mb_tokens, feasible, throughput, mfu, peak memory, chunks, precision, "
                       "shard_group, cp_auto or ep)", row->path, row->line);
    for (long i = 0; i < r->n; i++) {
        tune_result *x = &r->res[i];
        const tune_point *p = &x->pt;
        if (p->tp != tp || p->cp != cp || p->pp != pp || p->dp != dp || p->zero != zero ||
            (p->chunks > 1 ? p->chunks : 1) != chunks || (f[17] && p->precision != (int)prec) ||
            (f[19] && p->cp_auto != (int)cp_auto) || (p->ep > 1 ? p->ep : 1) != ep ||
            stage_shard_size(p->shard_group, p->dp, p->cp) !=
                stage_shard_size((int)shard, (int)dp, (int)cp) ||
            p->mbs != mbs ||
            p->mb_tokens != mbt || strcmp(p->batching, f[1]) || strcmp(p->schedule, f[2]) ||
            strcmp(recompute_policy_name(p->recompute), f[7]))
            continue;
        if (strcmp(f[14], TUNE_WHY_DIED) == 0) return DP_OK; /* no result: to run again */
        x->done = 1, x->ok = (int)ok, x->throughput = thr, x->mfu = mfu, x->peak_mb = peak;
        snprintf(x->why, sizeof x->why, "%s", f[14]);
        r->read++;
        return DP_OK;
    }
    r->foreign++;
    return DP_OK;
}

dp_status tune_read_ranking(const char *path, tune_result *res, long n, long *read, long *foreign,
                            dp_err *err)
{
    ranking_reader r = {res, n, 0, 0, {0}};
    dp_status st = csv_read_file(path, 0, ranking_header, ranking_row, &r, err);
    *read = r.read, *foreign = r.foreign;
    return st;
}

int tune_result_pruned(const tune_result *r)
{
    return strncmp(r->why, TUNE_WHY_PRUNED, strlen(TUNE_WHY_PRUNED)) == 0;
}

int tune_first_pass(const tune_space *sp, const tune_point *p)
{
    return sp->n_schedules > 0 && strcmp(p->schedule, sp->schedules[0]) == 0 &&
           p->recompute == (int)RECOMPUTE_NONE;
}
