/*
 * DynaPipe's dynamic-programming micro-batcher, exact and fast.
 *
 * Problem: samples in a fixed order s_0 .. s_{n-1}; cut them into contiguous micro-batches
 * [i, j) minimising
 *     score = (S - 1) * max_k t_k / C + sum_k t_k / D
 * (with one stage max(sum_k t_k / D, max_k t_k): microbatch.h mb_objective_ms), where t_k =
 * t(i, j) is the stage time of the micro-batch (stage_cost.h), over micro-batches that fit in
 * memory.
 *
 * 1. Segment costs are tabulated once per solve, in C: t(i, j) for every feasible segment, as
 *    integer nanoseconds so that sums and ties are exact; a cost comes from the run's shape_cache
 *    (its shape table, or the batch's segment memo when another memory rule planned the same
 *    batch before: below), so most segments cost a lookup. Every sample alone is checked first.
 *    Extending a segment never shrinks its shape (more rows, lengths are maxima), so once a
 *    segment stops fitting in memory or leaves the profile's measured region, longer ones
 *    starting at i are not tried (activation memory and the measured region grow with micro-batch
 *    size and length); nor once its tokens alone, at the devices' floors, cost more than any
 *    segment of an optimal partition can (t_cap, seg_build).
 * 2. For a cap tau, one DP pass finds the partition of least sum with every t_k <= tau, breaking
 *    ties in the sum towards the smaller realised max m (lexicographic (sum, max): exact, since for
 *    equal prefix sums a smaller prefix max is never worse).
 * 3. Search over caps (descend): the score is the least, over the batch's distinct segment costs
 *    m, of (S-1)*m*D + g(m)*C (one stage: max(g(m), m*D)*C; any score that grows with both
 *    bounds the same way), with g(m) the least sum under cap m, a step function that only
 *    grows as m falls. Solve with no cap; every cap from the realised max m_1 up gives that same
 *    partition. The caps not tried form ranges; trying the middle cap of a range splits it (the
 *    caps from its realised max up to it are settled at once), and a range is dropped when its
 *    lowest cap with the least sum above it, score(g(above), lo), cannot beat the best:
 *    exact, with no cap enumerated one by one. (The earlier descent, one pass per realised max
 *    from the top, gave the same partitions with 10-30x the passes on large batches. A tighter
 *    bound, the sum plus the costliest sample alone as the max, needs times monotone in the
 *    micro-batch size, which a measured profile need not be: tried, it changed T5's objective.)
 *    A pass under cap tau stops at each start i once every longer segment costs more than tau
 *    (suffix minima of the row).
 *
 * Scores are compared exactly as integers: score * C * D, in ns (score_scaled).
 *
 * The thinned variant (thin_ms > 0) is DynaPipe's: it runs one DP pass for each candidate tau of
 * the sorted distinct segment costs, skipping candidates within thin_ms of the last one kept.
 *
 * Memory: a micro-batch must fit under the schedule's memory rule (stage_cost.h mem_rule: 1F1B
 * holds up to S - s on stage s); if some sample cannot, the plan is retried with one micro-batch
 * held, as DynaPipe does. If a sample does not fit even alone, the error names it.
 */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "microbatch.h"

typedef struct seg_table {
    int n;
    int *len;     /* len[i]: feasible segments [i, i+1) .. [i, i+len[i]] */
    int64_t **t;  /* t[i][l-1]: cost of [i, i+l), ns (rows into t_arena, set once it is built) */
    int64_t **lo; /* lo[i][l-1]: the least of t[i][l-1 ..]: a pass under cap tau stops at i once
                   * lo exceeds tau (filled by seg_suffix_min before the second pass; rows into
                   * lo_arena) */
    int64_t *t_arena, *lo_arena; /* every row of t, of lo, one after another: one allocation
                                  * each (rows of their own cost a realloc chain each, half the
                                  * planning of a 14,000-sample batch in page faults and copies) */
    size_t t_used, t_cap; /* t_arena's cells filled, allocated */
    int64_t *all; /* the batch's distinct shapes' costs (sorted and unique once `sorted`) */
    int n_all, sorted;
} seg_table;

static void seg_release(seg_table *T)
{
    free(T->t_arena), free(T->lo_arena);
    free(T->t);
    free(T->lo);
    free(T->len);
    free(T->all);
}

/* Rows of n starts: DP_ERR_NOMEM or DP_OK (then rows are built in order, row 0 first, each by
 * pushes, and seg_rows_done points T->t at them). */
static dp_status seg_rows_alloc(seg_table *T, int n)
{
    T->n = n;
    T->len = calloc((size_t)(n ? n : 1), sizeof *T->len);
    T->t = calloc((size_t)(n ? n : 1), sizeof *T->t);
    return T->len && T->t ? DP_OK : DP_ERR_NOMEM;
}

/* Row i's next segment (one sample longer than its last) costs ns. */
static dp_status seg_row_push(seg_table *T, int i, int64_t ns)
{
    if (dp_grow((void **)&T->t_arena, &T->t_cap, T->t_used + 1, sizeof *T->t_arena) != DP_OK)
        return DP_ERR_NOMEM;
    T->t_arena[T->t_used++] = ns;
    T->len[i]++;
    return DP_OK;
}

/* Each row where it lies in the arena, which moves no more: after the rows before it. */
static void seg_rows_done(seg_table *T)
{
    size_t at = 0;
    for (int i = 0; i < T->n; at += (size_t)T->len[i], i++) T->t[i] = T->t_arena + at;
}

/* Sorts v[0..n) of non-negative values ascending: least significant digit first, 11 bits a pass,
 * as many passes as the largest value's bits need (a varlen batch has a cost per segment, about a
 * million: a comparison sort was a fifth of its planning). Returns -1 when out of memory. */
static int sort_costs(int64_t *v, int n)
{
    enum { BITS = 11, RADIX = 1 << BITS };
    int64_t top = 0;
    for (int k = 0; k < n; k++) top |= v[k];
    if (n < 2 || top == 0) return 0;
    int64_t *tmp = malloc((size_t)n * sizeof *tmp);
    if (!tmp) return -1;
    int64_t *src = v, *dst = tmp;
    for (int shift = 0; shift < 63 && (top >> shift) != 0; shift += BITS) {
        int count[RADIX + 1] = {0};
        for (int k = 0; k < n; k++) count[((src[k] >> shift) & (RADIX - 1)) + 1]++;
        for (int d = 0; d < RADIX; d++) count[d + 1] += count[d];
        for (int k = 0; k < n; k++) dst[count[(src[k] >> shift) & (RADIX - 1)]++] = src[k];
        int64_t *swap = src;
        src = dst, dst = swap;
    }
    if (src != v) memcpy(v, src, (size_t)n * sizeof *v);
    free(tmp);
    return 0;
}

/* Sorts the batch's costs and drops repeats (once). Returns -1 when out of memory. */
static int seg_sort_costs(seg_table *T)
{
    if (T->sorted) return 0;
    if (sort_costs(T->all, T->n_all) != 0) return -1;
    int u = 0;
    for (int k = 0; k < T->n_all; k++)
        if (u == 0 || T->all[u - 1] != T->all[k]) T->all[u++] = T->all[k];
    T->n_all = u;
    T->sorted = 1;
    return 0;
}

/* The index of the first of the batch's costs >= c (T sorted). */
static int seg_cost_index(const seg_table *T, int64_t c)
{
    int lo = 0, hi = T->n_all;
    while (lo < hi) {
        int mid = lo + (hi - lo) / 2;
        if (T->all[mid] < c) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

/* Fills T->lo (suffix minima of each row); DP_ERR_NOMEM when out of memory. */
static dp_status seg_suffix_min(seg_table *T)
{
    if (T->lo) return DP_OK;
    T->lo = calloc((size_t)T->n, sizeof *T->lo);
    T->lo_arena = malloc((T->t_used + 1) * sizeof *T->lo_arena); /* as t's rows, one after another */
    if (!T->lo || !T->lo_arena) return DP_ERR_NOMEM;
    size_t at = 0;
    for (int i = 0; i < T->n; at += (size_t)T->len[i], i++) {
        int L = T->len[i];
        T->lo[i] = T->lo_arena + at;
        for (int l = L - 1; l >= 0; l--)
            T->lo[i][l] = l == L - 1 || T->t[i][l] < T->lo[i][l + 1] ? T->t[i][l] : T->lo[i][l + 1];
    }
    return DP_OK;
}

/* Adds sample x's own attention sums to a varlen shape (microbatch.h mb_list_add's rule). */
static void seg_attn_add(const batch_rules *r, cost_shape *sh, const sample_len *x)
{
    double e = batch_pad(r, x->enc), d = batch_pad(r, x->dec);
    sh->enc_sq += e * e, sh->dec_sq += d * d, sh->enc_dec += e * d;
    if (e > sh->enc_max) sh->enc_max = (int)e;
}

/* Shape of the segment [i, j) of ordered samples. */
static cost_shape seg_shape(const batch_ctx *ctx, const sample_len *s, int i, int j)
{
    int enc = 0, dec = 0;
    for (int k = i; k < j; k++) {
        if (s[k].enc > enc) enc = s[k].enc;
        if (s[k].dec > dec) dec = s[k].dec;
    }
    cost_shape sh = cost_shape_rows(j - i, batch_pad(ctx->rules, enc), batch_pad(ctx->rules, dec));
    sh.varlen = ctx->varlen;
    for (int k = i; ctx->varlen && k < j; k++) seg_attn_add(ctx->rules, &sh, &s[k]);
    return sh;
}

/* What the dynamic batcher keeps between calls (shape_cache, microbatch.h), valid while the stage
 * model (compared whole, its cost model by serial number) and the length rules stay the same: it
 * is cleared when they change (cache_sync).
 *
 * The shape table. A segment's cost depends on its shape only. When the samples are sorted by
 * length with no decoder (GPT, mb_order), the shape of [i, j) is (j - i, pad(s[j-1].enc)), and a
 * dense table over (rows, padded length / pad_multiple) answers it: the stage time in ns, or
 * "does not fit", under one memory rule (the first it was asked under since it was cleared),
 * kept across batches. Its rows grow as segments need them, up to CACHE_MAX_CELLS cells; longer
 * segments are priced directly. Only the distinct shapes of a batch go into its cost list.
 *
 * The segment memos. One planning of a batch tabulates its segments many times over: under each
 * schedule's rule, the one-held fallback's and each tightened attempt's (planner/study.c
 * plan_iteration; --batching and --schedule auto plan every pair), and only whether a segment
 * fits changes with the rule. So each segment of the last SEG_MEMO_BATCHES batches (as ordered;
 * dynamic and dynamic-varlen order and price the same samples apart) keeps t_ms and its stored
 * and peak MB per device, and the rule is asked of them (stage_model_fits_mb); a memo stops
 * keeping once it holds SEG_MEMO_MAX_DOUBLES (32 MB, the last row's growth past it; 128 MB for the
 * four), and further segments are priced directly. Not under --cp auto,
 * whose degree per segment is chosen under the rule. A call under a rule other than the table's
 * goes by the memo alone: refilling the table for each rule cost more than it saved (auto on the
 * long-cot mix at 32k spent a tenth of its planning in the page faults of new tables). */
#define CACHE_UNKNOWN INT64_MIN
#define CACHE_NO_FIT (-1)
#define CACHE_MAX_CELLS (1 << 24)
#define SEG_MEMO_BATCHES 4
#define SEG_MEMO_MAX_DOUBLES (1 << 22) /* 32 MB a memo */

typedef struct seg_memo {
    int n, varlen;  /* the batch: n samples, ordered as in lens */
    int *lens;      /* enc, dec of each sample in order */
    int *len, *cap; /* len[i]: segments [i, i+1) .. [i, i+len[i]] kept */
    double **v; /* v[i][(l-1) * stride ..]: t_ms (NAN: the cost model cannot answer), stored_mb[pp],
                 * peak_mb[pp] */
    size_t doubles;
    uint64_t last_use;
} seg_memo;

struct shape_cache {
    /* what everything kept is valid for */
    stage_model sm; /* a copy */
    uint64_t cm_serial;
    int pad_multiple, min_padded;
    /* the shape table */
    int has_rule, cols;
    mem_rule rule;
    int64_t **row;  /* row[rows - 1][col]: ns, CACHE_NO_FIT, or CACHE_UNKNOWN */
    uint32_t **seen; /* the batch that last used a cell (for the batch's distinct costs) */
    int n_rows;
    uint32_t batch;
    /* the segment memos */
    uint64_t uses;
    seg_memo memo[SEG_MEMO_BATCHES];
    mb_cost *cost; /* the memos' scratch (about 12 KB: allocated once) */
};

shape_cache *shape_cache_new(void)
{
    return calloc(1, sizeof(shape_cache));
}

static void table_clear(shape_cache *c)
{
    for (int r = 0; r < c->n_rows; r++) free(c->row[r]), free(c->seen[r]);
    free(c->row), free(c->seen);
    c->row = NULL, c->seen = NULL, c->n_rows = 0, c->has_rule = 0;
}

static void memo_clear(seg_memo *m)
{
    for (int i = 0; m->v && i < m->n; i++) free(m->v[i]);
    free(m->lens), free(m->len), free(m->cap), free(m->v);
    memset(m, 0, sizeof *m);
}

void shape_cache_free(shape_cache *c)
{
    if (!c) return;
    table_clear(c);
    for (int k = 0; k < SEG_MEMO_BATCHES; k++) memo_clear(&c->memo[k]);
    free(c->cost);
    free(c);
}

/* Clears what c keeps where ctx's stage model, cost model or length rules are not those it was
 * kept for. */
static void cache_sync(shape_cache *c, const batch_ctx *ctx)
{
    const batch_rules *r = ctx->rules;
    if (memcmp(&c->sm, ctx->sm, sizeof c->sm) == 0 && c->cm_serial == ctx->sm->cm->serial &&
        c->pad_multiple == r->pad_multiple && c->min_padded == r->min_padded)
        return;
    table_clear(c);
    for (int k = 0; k < SEG_MEMO_BATCHES; k++) memo_clear(&c->memo[k]);
    c->sm = *ctx->sm, c->cm_serial = ctx->sm->cm->serial;
    c->pad_multiple = r->pad_multiple, c->min_padded = r->min_padded;
}

/* Readies c's shape table for a batch under rule; 0 when the batch cannot use it (a decoder, an
 * order not by length, varlen attention: a segment's cost depends on its samples; or the table
 * holds another rule). */
static int table_begin(shape_cache *c, const batch_ctx *ctx, const mem_rule *rule,
                       const sample_len *s, int n)
{
    if (ctx->varlen) return 0;
    for (int k = 0; k < n; k++)
        if (s[k].dec != 0 || (k > 0 && s[k].enc < s[k - 1].enc)) return 0;
    const batch_rules *r = ctx->rules;
    int cols = batch_pad(r, r->max_seqlen) / r->pad_multiple + 1;
    if ((size_t)cols > CACHE_MAX_CELLS) return 0;
    if (c->cols != cols) table_clear(c), c->cols = cols;
    if (!c->has_rule) c->rule = *rule, c->has_rule = 1;
    else if (memcmp(&c->rule, rule, sizeof *rule) != 0) return 0;
    c->batch++;
    return 1;
}

/* Points *cell (and *seen) at the cell of `rows` rows at padded length plen, growing the table;
 * both NULL when the table would pass CACHE_MAX_CELLS (the caller prices such shapes itself).
 * Returns -1 when out of memory, else 0. */
static int table_cell(shape_cache *c, int rows, int plen, int64_t **cell, uint32_t **seen)
{
    *cell = NULL, *seen = NULL;
    if (rows > c->n_rows && (size_t)rows * (size_t)c->cols > CACHE_MAX_CELLS) return 0;
    if (rows > c->n_rows) {
        int64_t **nr = realloc(c->row, (size_t)rows * sizeof *nr);
        if (!nr) return -1;
        c->row = nr;
        uint32_t **ns = realloc(c->seen, (size_t)rows * sizeof *ns);
        if (!ns) return -1;
        c->seen = ns;
        for (int q = c->n_rows; q < rows; q++) {
            c->row[q] = malloc((size_t)c->cols * sizeof **c->row);
            c->seen[q] = calloc((size_t)c->cols, sizeof **c->seen);
            if (!c->row[q] || !c->seen[q]) {
                free(c->row[q]), free(c->seen[q]);
                c->n_rows = q;
                return -1;
            }
            for (int k = 0; k < c->cols; k++) c->row[q][k] = CACHE_UNKNOWN;
        }
        c->n_rows = rows;
    }
    int col = plen / c->pad_multiple;
    *seen = &c->seen[rows - 1][col];
    *cell = &c->row[rows - 1][col];
    return 0;
}

/* The memo of the ordered samples s[0..n) under ctx: the one kept for them, or the least recently
 * used emptied and given to them; NULL where none applies (--cp auto, out of memory). */
static seg_memo *memo_begin(shape_cache *c, const batch_ctx *ctx, const sample_len *s, int n)
{
    if (n < 1 || ctx->sm->cm->cp_auto) return NULL;
    if (!c->cost && !(c->cost = malloc(sizeof *c->cost))) return NULL;
    seg_memo *lru = &c->memo[0];
    for (int k = 0; k < SEG_MEMO_BATCHES; k++) {
        seg_memo *m = &c->memo[k];
        int same = m->n == n && m->varlen == ctx->varlen;
        for (int i = 0; i < n && same; i++)
            same = m->lens[2 * i] == s[i].enc && m->lens[2 * i + 1] == s[i].dec;
        if (same) {
            m->last_use = ++c->uses;
            return m;
        }
        if (m->last_use < lru->last_use) lru = m;
    }
    memo_clear(lru);
    lru->lens = malloc((size_t)n * 2 * sizeof *lru->lens);
    lru->len = calloc((size_t)n, sizeof *lru->len);
    lru->cap = calloc((size_t)n, sizeof *lru->cap);
    lru->v = calloc((size_t)n, sizeof *lru->v);
    if (!lru->lens || !lru->len || !lru->cap || !lru->v) {
        memo_clear(lru);
        return NULL;
    }
    for (int i = 0; i < n; i++) lru->lens[2 * i] = s[i].enc, lru->lens[2 * i + 1] = s[i].dec;
    lru->n = n, lru->varlen = ctx->varlen;
    lru->last_use = ++c->uses;
    return lru;
}

/* Segment [i, i+l) of m's batch, of shape sh: its kept figures, or priced now (into m where
 * l follows the last kept and the memo has room, else into scratch: 1 + 2 STAGE_MAX doubles). */
static const double *memo_at(shape_cache *cache, seg_memo *m, const stage_model *sm, int i,
                             int l, const cost_shape *sh, double *scratch)
{
    int pp = sm->pp, stride = 1 + 2 * pp;
    if (l <= m->len[i]) return m->v[i] + (size_t)(l - 1) * stride;
    double *out = scratch;
    if (l == m->len[i] + 1 && m->doubles < SEG_MEMO_MAX_DOUBLES) {
        size_t c = (size_t)m->cap[i];
        if (dp_grow((void **)&m->v[i], &c, (size_t)l * stride, sizeof **m->v) == DP_OK) {
            m->doubles += c - (size_t)m->cap[i]; /* what it holds, growth included */
            m->cap[i] = (int)c;
            out = m->v[i] + (size_t)(l - 1) * stride;
            m->len[i] = l;
        }
    }
    mb_cost *c = cache->cost;
    if (stage_model_cost(sm, sh, c, NULL) == DP_OK) {
        out[0] = c->t_ms;
        memcpy(out + 1, c->stored_mb, (size_t)pp * sizeof *out);
        memcpy(out + 1 + pp, c->peak_mb, (size_t)pp * sizeof *out);
    } else {
        out[0] = NAN;
    }
    return out;
}

/* How seg_build prices a segment: the cache (NULL: none), whether its shape table serves this
 * batch, the batch's memo (NULL: none), the rule and a scratch row for memo_at. */
typedef struct seg_pricer {
    const batch_ctx *ctx;
    shape_cache *cache;
    int table;
    seg_memo *memo;
    const mem_rule *rule;
    double scratch[1 + 2 * STAGE_MAX];
} seg_pricer;

/* Segment [i, i + l)'s stage time in ns under the rule, or CACHE_NO_FIT (it does not fit, or the
 * cost model cannot price it): stage_model_time's answer, by the shape table, else the memo,
 * else priced (and kept in the table's cell). *seen: the cell's batch mark, NULL where the table
 * does not serve (the caller marks it). DP_ERR_NOMEM in *st when the table cannot grow. */
static int64_t seg_ns(seg_pricer *p, int i, int l, const cost_shape *sh, uint32_t **seen,
                      dp_status *st)
{
    int64_t *cell = NULL;
    uint32_t *mark = NULL;
    *st = DP_OK;
    if (p->table && table_cell(p->cache, l, sh->enc_len, &cell, &mark) != 0) {
        *st = DP_ERR_NOMEM;
        return CACHE_NO_FIT;
    }
    if (seen) *seen = mark;
    if (cell && *cell != CACHE_UNKNOWN) return *cell;
    const stage_model *sm = p->ctx->sm;
    int64_t ns;
    const double *v = p->memo ? memo_at(p->cache, p->memo, sm, i, l, sh, p->scratch) : NULL;
    if (v) {
        ns = isnan(v[0]) || !stage_model_fits_mb(sm, v + 1, v + 1 + sm->pp, p->rule, NULL, 0)
                 ? CACHE_NO_FIT
                 : llround(v[0] * 1e6);
    } else {
        double t_ms;
        int fits;
        ns = stage_model_time(sm, sh, p->rule, &t_ms, &fits) != DP_OK || !fits
                 ? CACHE_NO_FIT
                 : llround(t_ms * 1e6);
    }
    if (cell) *cell = ns;
    return ns;
}

/* DP_OK when every sample fits in a micro-batch alone under the rule, with the sum and the most
 * of their costs (ns) in *sum and *max; else DP_ERR_INFEASIBLE naming the first that does not.
 * Asked before the segment table: a batch that cannot be cut under this rule (a mode or an
 * in-flight count too large for its longest sample, which plan_modes and dp_solve then pass by)
 * fails at n queries, not after tabulating every segment before that sample. */
static dp_status seg_singles_fit(seg_pricer *p, const sample_len *s, int n, int64_t *sum,
                                 int64_t *max, dp_err *err)
{
    const batch_ctx *ctx = p->ctx;
    *sum = *max = 0;
    for (int i = 0; i < n; i++) {
        cost_shape one = seg_shape(ctx, s, i, i + 1);
        dp_status st;
        int64_t ns = seg_ns(p, i, 1, &one, NULL, &st);
        if (st != DP_OK) return dp_fail(err, st, "out of memory");
        if (ns != CACHE_NO_FIT) {
            *sum += ns, *max = ns > *max ? ns : *max;
            continue;
        }
        /* Say why the single sample does not fit. */
        mb_cost *c = malloc(sizeof *c);
        char why[400] = "out of memory";
        dp_err qerr = {0};
        if (c && stage_model_cost(ctx->sm, &one, c, &qerr) != DP_OK)
            snprintf(why, sizeof why, "%.380s", qerr.msg);
        else if (c)
            stage_model_fits(ctx->sm, c, p->rule, why, sizeof why);
        free(c);
        return dp_fail(err, DP_ERR_INFEASIBLE,
                       "trace sample %d (%d input, %d target tokens after truncation) does "
                       "not fit in a micro-batch even alone: %s\nhint: try --recompute dynamic "
                       "(or full), more --tp or --pp, a smaller --max-seqlen, or --keep-going "
                       "to leave such iterations out",
                       s[i].id, s[i].enc, s[i].dec, why);
    }
    return DP_OK;
}

static int64_t score_scaled(int64_t sum, int64_t max, int S, int C, int D);

/* Tabulates t(i, j) for the objective on S stages of C chunks with D replicas. Fails (with the
 * sample named) when a single sample does not fit.
 *
 * A segment no optimal partition can hold is left out: every sample alone scores U, so a
 * partition holding a segment of cost t scores at least score_scaled(t, t) (its sum and max are
 * at least t), which passes U once t > t_cap. A row stops where even the least its longer
 * segments can cost, their real tokens at each device's floor (stage_model_token_floor: a lower
 * bound on any micro-batch's time, 0 where the cost model has none), passes t_cap: the time of a
 * segment need not grow with it (a measured profile's), its tokens do. Not for DynaPipe's thinned
 * search, whose candidate caps are the segments' costs. */
static dp_status seg_build(const batch_ctx *ctx, const sample_len *s, int n, const mem_rule *rule,
                           int D, seg_table *T, dp_err *err)
{
    memset(T, 0, sizeof *T);
    seg_pricer *p = calloc(1, sizeof *p);
    shape_cache *own = ctx->cache ? NULL : shape_cache_new();
    if (!p || (!ctx->cache && !own)) {
        free(p), shape_cache_free(own);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    p->ctx = ctx, p->rule = rule, p->cache = ctx->cache ? ctx->cache : own;
    cache_sync(p->cache, ctx);
    p->table = table_begin(p->cache, ctx, rule, s, n);
    p->memo = own ? NULL : memo_begin(p->cache, ctx, s, n); /* a cache of one call keeps none */
    int64_t one_sum, one_max;
    dp_status st = seg_singles_fit(p, s, n, &one_sum, &one_max, err);
    int S = ctx->sm->pp, C = ctx->sm->chunks;
    double t_cap_ms = INFINITY, floor_enc[STAGE_MAX], floor_dec[STAGE_MAX];
    if (st == DP_OK && ctx->thin_ms <= 0) {
        /* score_scaled(t, t) / t */
        int64_t weight = S > 1 ? (int64_t)(S - 1) * D + C : (int64_t)D * C;
        t_cap_ms = (double)score_scaled(one_sum, one_max, S, C, D) / (double)weight / 1e6;
        for (int d = 0; d < S; d++)
            stage_model_token_floor(ctx->sm, d, &floor_enc[d], &floor_dec[d]);
    }
    if (st == DP_OK && seg_rows_alloc(T, n) != DP_OK)
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
    size_t all_cap = 0;
    for (int i = 0; i < n && st == DP_OK; i++) {
        int enc = 0, dec = 0;
        double real_enc = 0, real_dec = 0;
        cost_shape sh = cost_shape_rows(0, 0, 0);
        sh.varlen = ctx->varlen;
        for (int j = i + 1; j <= n; j++) {
            real_enc += s[j - 1].enc, real_dec += s[j - 1].dec;
            if (j > i + 1 && isfinite(t_cap_ms)) { /* the least [i, j) and longer can cost */
                double least = 0;
                for (int d = 0; d < S; d++) {
                    double f = floor_enc[d] * real_enc + floor_dec[d] * real_dec;
                    least = f > least ? f : least;
                }
                if (least > t_cap_ms + 1e-6) break; /* a ns over: its rounded cost passes too */
            }
            if (s[j - 1].enc > enc) enc = s[j - 1].enc;
            if (s[j - 1].dec > dec) dec = s[j - 1].dec;
            sh.mbs = j - i, sh.enc_len = batch_pad(ctx->rules, enc);
            sh.dec_len = batch_pad(ctx->rules, dec);
            if (ctx->varlen) seg_attn_add(ctx->rules, &sh, &s[j - 1]);
            uint32_t *seen = NULL;
            int64_t ns = seg_ns(p, i, j - i, &sh, &seen, &st);
            if (st != DP_OK) {
                st = dp_fail(err, st, "out of memory");
                break;
            }
            if (ns == CACHE_NO_FIT) break;
            int fresh = !seen || *seen != p->cache->batch; /* the batch's first of the shape */
            if (seen) *seen = p->cache->batch;
            if (seg_row_push(T, i, ns) != DP_OK || /* row i's segment of j - i samples */
                (fresh && dp_grow((void **)&T->all, &all_cap, (size_t)T->n_all + 1,
                                  sizeof *T->all) != DP_OK)) {
                st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
                break;
            }
            if (fresh) T->all[T->n_all++] = ns;
        }
    }
    if (st == DP_OK) seg_rows_done(T);
    free(p);
    shape_cache_free(own);
    if (st == DP_OK && ctx->thin_ms > 0 && seg_sort_costs(T) != 0) /* the exact descent sorts on need */
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
    return st;
}

typedef struct dp_cell {
    int64_t sum, max; /* ns */
    int from;         /* start of the last segment; -1 unreachable */
} dp_cell;

/* One pass: least (sum, max) partition with every segment <= tau. Returns 0 if none exists. */
static int dp_pass(const seg_table *T, int64_t tau, dp_cell *f)
{
    int n = T->n;
    f[0] = (dp_cell){0, 0, 0};
    for (int j = 1; j <= n; j++) f[j] = (dp_cell){INT64_MAX, INT64_MAX, -1};
    for (int i = 0; i < n; i++) {
        if (f[i].from < 0) continue;
        const int64_t *lo = T->lo ? T->lo[i] : NULL;
        for (int l = 1; l <= T->len[i]; l++) {
            int64_t t = T->t[i][l - 1];
            if (t > tau) {
                if (lo && lo[l - 1] > tau) break; /* no longer segment from i is under the cap */
                continue;
            }
            int64_t sum = f[i].sum + t, mx = f[i].max > t ? f[i].max : t;
            dp_cell *g = &f[i + l];
            if (sum < g->sum || (sum == g->sum && mx < g->max)) *g = (dp_cell){sum, mx, i};
        }
    }
    return f[n].from >= 0;
}

/* mb_objective_ms times C x D, in integer ns */
static int64_t score_scaled(int64_t sum, int64_t max, int S, int C, int D)
{
    if (S == 1) return (sum > max * D ? sum : max * D) * C;
    return (int64_t)(S - 1) * max * D + sum * C;
}

/* Writes the partition recorded in f into out. */
static dp_status emit(const batch_ctx *ctx, const sample_len *s, const dp_cell *f, int n,
                      mb_list *out)
{
    int *cuts = malloc((size_t)(n + 1) * sizeof *cuts), k = 0;
    if (!cuts) return DP_ERR_NOMEM;
    for (int j = n; j > 0; j = f[j].from) cuts[k++] = j;
    cuts[k++] = 0;
    dp_status st = DP_OK;
    for (int q = k - 1; q > 0 && st == DP_OK; q--) {
        int i = cuts[q], j = cuts[q - 1];
        cost_shape sh = seg_shape(ctx, s, i, j);
        st = mb_list_add(out, ctx, s + i, j - i, j - i, sh.enc_len, sh.dec_len);
    }
    free(cuts);
    return st;
}

/* Caps all[lo..hi) not yet tried, under each of which the least sum is at least sum_hi (the least
 * sum under a cap above them). */
typedef struct cap_range {
    int lo, hi;
    int64_t sum_hi;
} cap_range;

/* The exact search over caps (step 3 above): the least score_scaled over the batch's distinct
 * costs m, each with the least sum of partitions whose segments all cost <= m. Tried caps split
 * the untried ones into ranges; a range is dropped when even its lowest cap with the sum bound
 * above it cannot win. Ties go to the larger max, and the partition written into best is the pass
 * under the winning max itself (with one stage and one replica, under no cap). *best_score is
 * INT64_MAX when nothing fits; DP_ERR_NOMEM when out of memory. */
static dp_status descend(seg_table *T, int S, int C, int D, dp_cell *f, dp_cell *best,
                         int64_t *best_score, int *passes)
{
    int n = T->n;
    *best_score = INT64_MAX;
    if (!dp_pass(T, INT64_MAX, f)) return DP_OK;
    (*passes)++;
    memcpy(best, f, (size_t)(n + 1) * sizeof *f);
    *best_score = score_scaled(f[n].sum, f[n].max, S, C, D);
    if (S == 1 && D == 1) return DP_OK; /* the sum alone decides */
    cap_range *stack = malloc((size_t)(T->n_all + 1) * sizeof *stack);
    if (!stack || seg_sort_costs(T) != 0 || seg_suffix_min(T) != DP_OK) {
        free(stack);
        return DP_ERR_NOMEM;
    }
    int64_t best_m = f[n].max, best_cap = INT64_MAX;
    int top = 0; /* the stack holds disjoint non-empty ranges: at most n_all */
#define PUSH_RANGE(a, b, sum)                                      \
    do {                                                           \
        if ((a) < (b)) stack[top++] = (cap_range){(a), (b), (sum)}; \
    } while (0)
    PUSH_RANGE(0, seg_cost_index(T, f[n].max), f[n].sum);
    while (top > 0) {
        cap_range r = stack[--top];
        int64_t bound = score_scaled(r.sum_hi, T->all[r.lo], S, C, D);
        if (bound > *best_score || (bound == *best_score && T->all[r.hi - 1] < best_m)) continue;
        int k = r.lo + (r.hi - r.lo) / 2;
        int64_t cap = T->all[k];
        if (!dp_pass(T, cap, f)) { /* nothing fits under this cap or any below it */
            PUSH_RANGE(k + 1, r.hi, r.sum_hi);
            continue;
        }
        (*passes)++;
        int64_t sc = score_scaled(f[n].sum, f[n].max, S, C, D);
        if (sc < *best_score || (sc == *best_score && f[n].max > best_m)) {
            *best_score = sc, best_m = f[n].max, best_cap = cap;
            memcpy(best, f, (size_t)(n + 1) * sizeof *f);
        }
        /* every cap from the realised max up to this one gives this same partition */
        PUSH_RANGE(k + 1, r.hi, r.sum_hi);
        PUSH_RANGE(r.lo, seg_cost_index(T, f[n].max), f[n].sum);
    }
#undef PUSH_RANGE
    free(stack);
    if (best_cap != best_m) { /* the winning partition as the pass under its own max finds it */
        dp_pass(T, best_m, best);
        (*passes)++;
    }
    return DP_OK;
}

/* Solves for one in-flight count, with D replicas in the objective; *passes counts DP passes. */
static dp_status solve(const batch_ctx *ctx, const sample_len *s, int n, int D, int one_held,
                       mb_list *out, int *passes, dp_err *err)
{
    const stage_model *sm = ctx->sm;
    int S = sm->pp, C = sm->chunks;
    seg_table T;
    mem_rule rule;
    mb_mem_rule(ctx, one_held, &rule);
    dp_status st = seg_build(ctx, s, n, &rule, D, &T, err);
    out->dp_segments += (int64_t)T.t_used;
    dp_cell *f = malloc((size_t)(n + 1) * sizeof *f), *best = malloc((size_t)(n + 1) * sizeof *best);
    if (st == DP_OK && (!f || !best)) st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
    if (st != DP_OK) goto out;
    int64_t best_score = INT64_MAX;
    *passes = 0;
    if (ctx->thin_ms <= 0) {
        st = descend(&T, S, C, D, f, best, &best_score, passes);
        if (st != DP_OK) {
            st = dp_fail(err, st, "out of memory");
            goto out;
        }
    } else {
        int64_t thin = llround(ctx->thin_ms * 1e6), last = INT64_MIN;
        for (int k = 0; k < T.n_all; k++) {
            if (last != INT64_MIN && T.all[k] < last + thin && k != T.n_all - 1) continue;
            last = T.all[k];
            if (!dp_pass(&T, T.all[k], f)) continue;
            (*passes)++;
            int64_t sc = score_scaled(f[n].sum, f[n].max, S, C, D);
            if (sc < best_score) {
                best_score = sc;
                memcpy(best, f, (size_t)(n + 1) * sizeof *f);
            }
        }
    }
    if (best_score == INT64_MAX) {
        st = dp_fail(err, DP_ERR_INFEASIBLE, "no partition of the batch fits");
        goto out;
    }
    if (emit(ctx, s, best, n, out) != DP_OK) st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
out:
    free(f);
    free(best);
    seg_release(&T);
    return st;
}

dp_status dp_batch(const batch_ctx *ctx, const sample_len *in, int n, mb_list *out, dp_err *err)
{
    sample_len *s = malloc((size_t)(n ? n : 1) * sizeof *s);
    if (!s) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    memcpy(s, in, (size_t)n * sizeof *s);
    dp_status st = mb_order(ctx->rules, s, n) == DP_OK ? dp_batch_ordered(ctx, s, n, out, err)
                                                        : dp_fail(err, DP_ERR_NOMEM, "out of memory");
    free(s);
    return st;
}

/* The DP over s[0..n) with D replicas in the objective, and DynaPipe's one-held fallback. */
static dp_status dp_solve(const batch_ctx *ctx, const sample_len *s, int n, int D, mb_list *out,
                          int *passes, dp_err *err)
{
    int first_ids = out->n_ids, first_mb = out->n_mb, p = 0;
    dp_status st = solve(ctx, s, n, D, out->in_flight == 1, out, &p, err);
    *passes += p;
    if (st == DP_ERR_INFEASIBLE && ctx->sm->pp > 1 && out->in_flight != 1) {
        /* DynaPipe's fallback: budget for one micro-batch held; the schedule must then admit
         * micro-batches by memory (the adaptive schedule does), or the batch have so few
         * micro-batches that the schedule holds fewer: the planner's exact check decides. */
        out->n_ids = first_ids;
        out->n_mb = first_mb;
        out->in_flight = 1;
        p = 0;
        st = solve(ctx, s, n, D, 1, out, &p, err);
        *passes += p;
    }
    return st;
}

dp_status dp_batch_ordered(const batch_ctx *ctx, const sample_len *s, int n, mb_list *out,
                           dp_err *err)
{
    int passes = 0, D = ctx->sm->dp;
    out->in_flight = 0;
    int split = ctx->dp_split == DP_SPLIT_REPLICA ||
                (ctx->dp_split == DP_SPLIT_AUTO && D > DP_SPLIT_AUTO_MAX);
    if (D <= 1 || !split || n < 2 * D) {
        dp_status st = dp_solve(ctx, s, n, D, out, &passes, err);
        out->dp_passes = passes;
        return st;
    }
    /* Deal the ordered samples to the replicas in a snake (0, 1, .., D-1, D-1, .., 0, 0, ..), in
     * one pass into contiguous groups, then one DP per replica. */
    sample_len *g = malloc((size_t)n * sizeof *g);
    int *at = calloc((size_t)D + 1, sizeof *at);
    if (!g || !at) {
        free(g), free(at);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) at[mb_snake(i, D) + 1]++;
    for (int rep = 0; rep < D; rep++) at[rep + 1] += at[rep]; /* at[rep]: group rep's start */
    for (int i = 0; i < n; i++) g[at[mb_snake(i, D)]++] = s[i]; /* at[rep]: group rep's end */
    dp_status st = DP_OK;
    for (int rep = 0, first = 0; rep < D && st == DP_OK; rep++) {
        int mb0 = out->n_mb;
        st = dp_solve(ctx, g + first, at[rep] - first, 1, out, &passes, err);
        for (int q = mb0; q < out->n_mb; q++) out->mb[q].replica = rep;
        first = at[rep];
    }
    free(at);
    out->replicas_set = 1;
    out->dp_passes = passes;
    free(g);
    return st;
}

dp_status dp_cut(int n, dp_seg_cost cost, void *cost_ctx, int S, int C, int D, int *ends,
                 int *n_seg, dp_err *err)
{
    seg_table T;
    memset(&T, 0, sizeof T);
    dp_cell *f = malloc((size_t)(n + 1) * sizeof *f), *best = malloc((size_t)(n + 1) * sizeof *best);
    size_t all_cap = 0;
    dp_status st = seg_rows_alloc(&T, n) != DP_OK || !f || !best
                       ? dp_fail(err, DP_ERR_NOMEM, "out of memory")
                       : DP_OK;
    for (int i = 0; i < n && st == DP_OK; i++) {
        for (int l = 1; i + l <= n; l++) {
            int64_t ns = cost(cost_ctx, i, l);
            if (ns < 0) break; /* no longer segment from i fits either */
            if (seg_row_push(&T, i, ns) != DP_OK ||
                dp_grow((void **)&T.all, &all_cap, (size_t)T.n_all + 1, sizeof *T.all) != DP_OK) {
                st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
                break;
            }
            T.all[T.n_all++] = ns;
        }
        if (st == DP_OK && T.len[i] == 0)
            st = dp_fail(err, DP_ERR_INFEASIBLE, "item %d does not fit in a micro-batch even alone", i);
    }
    if (st == DP_OK) seg_rows_done(&T);
    int64_t score = INT64_MAX;
    int passes = 0;
    if (st == DP_OK && n > 0 && descend(&T, S, C, D, f, best, &score, &passes) != DP_OK)
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
    if (st == DP_OK && n > 0 && score == INT64_MAX)
        st = dp_fail(err, DP_ERR_INFEASIBLE, "no partition fits");
    *n_seg = 0;
    if (st == DP_OK) {
        for (int j = n; j > 0; j = best[j].from) (*n_seg)++;
        int k = *n_seg;
        for (int j = n; j > 0; j = best[j].from) ends[--k] = j;
    }
    free(f), free(best);
    seg_release(&T);
    return st;
}
