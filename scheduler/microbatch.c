#include "microbatch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "plan.h"

void mb_list_init(mb_list *l)
{
    memset(l, 0, sizeof *l);
}

void mb_list_release(mb_list *l)
{
    free(l->ids);
    free(l->lens);
    free(l->mb);
    mb_list_init(l);
}

void mb_list_clear(mb_list *l)
{
    l->n_ids = 0;
    l->n_mb = 0;
    l->feasible = 0;
    l->why[0] = '\0';
    l->dp_passes = 0;
    l->dp_segments = 0;
    l->in_flight = 0;
    l->replicas_set = 0;
}

cost_shape mb_shape(const microbatch *m)
{
    cost_shape s = cost_shape_rows(m->mbs, m->enc_len, m->dec_len);
    s.varlen = m->varlen;
    s.enc_sq = m->enc_sq, s.dec_sq = m->dec_sq, s.enc_dec = m->enc_dec;
    s.cp = m->cp;
    s.enc_max = m->enc_max;
    return s;
}

/* One sample's attention sums added to a varlen micro-batch: its padded lengths squared and
 * their product, and the longest (mb_list_add's rule, and packing-dp's as it prices runs). */
static void mb_attn_add(const batch_rules *r, microbatch *m, const sample_len *x)
{
    double e = batch_pad(r, x->enc), d = batch_pad(r, x->dec);
    m->enc_sq += e * e, m->dec_sq += d * d, m->enc_dec += e * d;
    if (e > m->enc_max) m->enc_max = (int)e;
}

dp_status mb_list_add(mb_list *l, const batch_ctx *ctx, const sample_len *s, int n, int mbs,
                      int enc_len, int dec_len)
{
    size_t icap = (size_t)l->ids_cap, lcap = (size_t)l->lens_cap, mcap = (size_t)l->mb_cap;
    if (dp_grow((void **)&l->ids, &icap, (size_t)(l->n_ids + n), sizeof *l->ids) != DP_OK ||
        dp_grow((void **)&l->lens, &lcap, (size_t)(l->n_ids + n) * 2, sizeof *l->lens) != DP_OK ||
        dp_grow((void **)&l->mb, &mcap, (size_t)(l->n_mb + 1), sizeof *l->mb) != DP_OK)
        return DP_ERR_NOMEM;
    l->ids_cap = (int)icap;
    l->lens_cap = (int)lcap;
    l->mb_cap = (int)mcap;
    microbatch *m = &l->mb[l->n_mb++];
    memset(m, 0, sizeof *m);
    m->first = l->n_ids;
    m->n_samples = n;
    m->mbs = mbs;
    m->enc_len = enc_len;
    m->dec_len = dec_len;
    m->t_ms = NAN;
    m->varlen = ctx && ctx->varlen;
    for (int i = 0; i < n; i++) {
        l->lens[2 * l->n_ids] = s[i].enc, l->lens[2 * l->n_ids + 1] = s[i].dec;
        l->ids[l->n_ids++] = s[i].id;
        m->enc_tokens += s[i].enc;
        m->dec_tokens += s[i].dec;
        if (m->varlen) mb_attn_add(ctx->rules, m, &s[i]);
    }
    return DP_OK;
}

/* ---- order ------------------------------------------------------------------------------------ */

static int cmp_gpt(const void *a, const void *b)
{
    const sample_len *x = a, *y = b;
    if (x->enc != y->enc) return x->enc - y->enc;
    return x->id - y->id;
}

/* T5: the samples' padded (input, target) pairs are the points of an open travelling-salesman
 * path under the L1 distance: nearest neighbour from the smallest point, then 2-opt until no move
 * shortens it (at most T5_ORDER_PASSES passes). Samples of one point stay together, by id. */
#define T5_ORDER_PASSES 32

typedef struct t5_key {
    int pe, pd; /* padded input and target lengths */
    sample_len s;
} t5_key;

static int cmp_t5(const void *a, const void *b)
{
    const t5_key *x = a, *y = b;
    if (x->pe != y->pe) return x->pe - y->pe;
    if (x->pd != y->pd) return x->pd - y->pd;
    return x->s.id - y->s.id;
}

static int l1(const t5_key *a, const t5_key *b)
{
    return abs(a->pe - b->pe) + abs(a->pd - b->pd);
}

/* The open path over m points (pt[i] is a point's first key); path receives their order. */
static void t5_path(const t5_key *const *pt, int m, int *path, char *used)
{
    memset(used, 0, (size_t)m);
    path[0] = 0;
    used[0] = 1;
    for (int k = 1; k < m; k++) { /* nearest neighbour; ties to the smaller point */
        int best = -1, bd = 0, at = path[k - 1];
        for (int q = 0; q < m; q++)
            if (!used[q] && (best < 0 || l1(pt[at], pt[q]) < bd)) best = q, bd = l1(pt[at], pt[q]);
        path[k] = best;
        used[best] = 1;
    }
    /* 2-opt on the open path: reversing path[i+1 .. j] replaces the edges (i, i+1) and (j, j+1)
     * by (i, j) and (i+1, j+1); at the ends a missing edge costs nothing */
    for (int pass = 0; pass < T5_ORDER_PASSES; pass++) {
        int improved = 0;
        for (int i = -1; i < m - 2; i++)
            for (int j = i + 2; j < m; j++) {
                const t5_key *a = i >= 0 ? pt[path[i]] : NULL, *b = pt[path[i + 1]];
                const t5_key *c = pt[path[j]], *d = j + 1 < m ? pt[path[j + 1]] : NULL;
                int before = (a ? l1(a, b) : 0) + (d ? l1(c, d) : 0);
                int after = (a ? l1(a, c) : 0) + (d ? l1(b, d) : 0);
                if (after < before) {
                    for (int x = i + 1, y = j; x < y; x++, y--) {
                        int t = path[x];
                        path[x] = path[y], path[y] = t;
                    }
                    improved = 1;
                }
            }
        if (!improved) break;
    }
}

dp_status mb_order(const batch_rules *r, sample_len *s, int n)
{
    if (r->arch == ARCH_GPT) {
        qsort(s, (size_t)n, sizeof *s, cmp_gpt);
        return DP_OK;
    }
    t5_key *k = malloc((size_t)(n ? n : 1) * sizeof *k);
    const t5_key **pt = malloc((size_t)(n ? n : 1) * sizeof *pt);
    int *first = malloc((size_t)(n + 1) * sizeof *first), *path = malloc((size_t)(n ? n : 1) * sizeof *path);
    char *used = malloc((size_t)(n ? n : 1));
    if (!k || !pt || !first || !path || !used) {
        free(k), free(pt), free(first), free(path), free(used);
        return DP_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) k[i] = (t5_key){batch_pad(r, s[i].enc), batch_pad(r, s[i].dec), s[i]};
    qsort(k, (size_t)n, sizeof *k, cmp_t5);
    int m = 0; /* distinct points: k[first[p] .. first[p + 1]) */
    for (int i = 0; i < n; i++)
        if (i == 0 || k[i].pe != k[i - 1].pe || k[i].pd != k[i - 1].pd) pt[m] = &k[i], first[m++] = i;
    first[m] = n;
    if (m > 0) t5_path(pt, m, path, used);
    int at = 0;
    for (int q = 0; q < m; q++)
        for (int i = first[path[q]]; i < first[path[q] + 1]; i++) s[at++] = k[i].s;
    free(k), free(pt), free(first), free(path), free(used);
    return DP_OK;
}

/* ---- padding, token -------------------------------------------------------------------------- */

static dp_status split_padding(const batch_ctx *ctx, const sample_len *s, int n, mb_list *out,
                               dp_err *err)
{
    int enc = 0, dec = 0;
    for (int i = 0; i < n; i++) {
        if (s[i].enc > enc) enc = s[i].enc;
        if (s[i].dec > dec) dec = s[i].dec;
    }
    enc = batch_pad(ctx->rules, enc);
    dec = batch_pad(ctx->rules, dec);
    for (int i = 0; i < n; i += ctx->mbs) {
        int k = n - i < ctx->mbs ? n - i : ctx->mbs;
        if (mb_list_add(out, ctx, s + i, k, k, enc, dec) != DP_OK)
            return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    return DP_OK;
}

static dp_status split_token(const batch_ctx *ctx, const sample_len *in, int n, mb_list *out,
                             dp_err *err)
{
    sample_len *s = malloc((size_t)n * sizeof *s);
    if (!s) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    memcpy(s, in, (size_t)n * sizeof *s);
    dp_status st = mb_order(ctx->rules, s, n);
    if (st != DP_OK) {
        free(s);
        return dp_fail(err, st, "out of memory");
    }
    for (int i = 0; i < n && st == DP_OK;) {
        int enc = batch_pad(ctx->rules, s[i].enc), dec = batch_pad(ctx->rules, s[i].dec), j = i + 1;
        while (j < n) {
            int e2 = enc > batch_pad(ctx->rules, s[j].enc) ? enc : batch_pad(ctx->rules, s[j].enc);
            int d2 = dec > batch_pad(ctx->rules, s[j].dec) ? dec : batch_pad(ctx->rules, s[j].dec);
            if ((int64_t)(j - i + 1) * (e2 + d2) > ctx->mb_tokens) break;
            enc = e2, dec = d2, j++;
        }
        if (mb_list_add(out, ctx, s + i, j - i, j - i, enc, dec) != DP_OK)
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        i = j;
    }
    free(s);
    return st;
}

/* ---- packing ------------------------------------------------------------------------------- */

typedef struct row {
    batch_row use; /* tokens used (batch_row_fits is the capacity rule) */
    int first, n;  /* samples in the packed order */
} row;

static void row_add(row *w, const sample_len *x)
{
    w->use.enc += x->enc;
    w->use.dec += x->dec;
    w->n++;
}

/* Emits micro-batches of per_mb rows each from rows over samples in `packed` order (a row's
 * samples contiguous, rows in order). Rows of whole-row attention are padded to the maximum
 * length (Megatron's fixed [mbs, seq] tensor); varlen rows (THD) to their micro-batch's fullest
 * row. replica >= 0 assigns the micro-batches to that replica. */
/* The padded lengths of a micro-batch of rows[0..k): varlen rows to its fullest row, whole
 * rows to the maximum lengths (emit_rows's rule, and packing-dp's as it prices runs). */
static void rows_lens(const batch_ctx *ctx, const row *rows, int k, int *enc_len, int *dec_len)
{
    const batch_rules *r = ctx->rules;
    int t5 = r->arch == ARCH_T5, enc = 0, dec = 0;
    for (int q = 0; q < k; q++) {
        if (rows[q].use.enc > enc) enc = rows[q].use.enc;
        if (rows[q].use.dec > dec) dec = rows[q].use.dec;
    }
    if (!ctx->varlen) enc = r->max_seqlen, dec = t5 ? r->max_dec_seqlen : 0;
    *enc_len = batch_pad(r, enc), *dec_len = t5 ? batch_pad(r, dec) : 0;
}

static dp_status emit_rows(const batch_ctx *ctx, const row *rows, int n_rows, int per_mb,
                           const sample_len *packed, int replica, mb_list *out, dp_err *err)
{
    for (int i = 0; i < n_rows; i += per_mb) {
        int k = n_rows - i < per_mb ? n_rows - i : per_mb;
        int first = rows[i].first, count = 0, enc, dec;
        for (int q = i; q < i + k; q++) count += rows[q].n;
        rows_lens(ctx, rows + i, k, &enc, &dec);
        if (mb_list_add(out, ctx, packed + first, count, k, enc, dec) != DP_OK)
            return dp_fail(err, DP_ERR_NOMEM, "out of memory");
        if (replica >= 0) out->mb[out->n_mb - 1].replica = replica;
    }
    return DP_OK;
}

/* Lays samples out bin by bin (bin_of[i] of s[i], bins 0..nb-1, in s's order within a bin) into
 * packed, filling rows[b]. */
static void lay_out_bins(const sample_len *s, int n, const int *bin_of, int nb, row *rows,
                         sample_len *packed)
{
    for (int b = 0; b < nb; b++) rows[b] = (row){{0, 0}, 0, 0};
    for (int i = 0; i < n; i++) row_add(&rows[bin_of[i]], &s[i]);
    for (int b = 0, at = 0; b < nb; b++) {
        rows[b].first = at;
        at += rows[b].n;
    }
    for (int i = 0; i < n; i++) packed[rows[bin_of[i]].first++] = s[i]; /* first as a cursor */
    for (int b = 0; b < nb; b++) rows[b].first -= rows[b].n;
}

static dp_status split_packing(const batch_ctx *ctx, const sample_len *s, int n, mb_list *out,
                               dp_err *err)
{
    row *rows = calloc((size_t)n, sizeof *rows);
    if (!rows) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    int nr = 0;
    for (int i = 0; i < n; i++) {
        if (nr == 0 || !batch_row_fits(ctx->rules, &rows[nr - 1].use, &s[i]))
            rows[nr++] = (row){{0, 0}, i, 0};
        row_add(&rows[nr - 1], &s[i]);
    }
    dp_status st = emit_rows(ctx, rows, nr, ctx->mbs, s, -1, out, err);
    free(rows);
    return st;
}

static int cmp_longest_first(const void *a, const void *b)
{
    const sample_len *x = a, *y = b;
    int lx = x->enc + x->dec, ly = y->enc + y->dec;
    if (lx != ly) return ly - lx;
    return x->id - y->id;
}

static dp_status packing_ffd_rows(const batch_ctx *ctx, const batch_rules *fit, const sample_len *in,
                                  int n, mb_list *out, dp_err *err);

static dp_status split_packing_ffd(const batch_ctx *ctx, const sample_len *in, int n,
                                   mb_list *out, dp_err *err)
{
    return packing_ffd_rows(ctx, ctx->rules, in, n, out, err);
}

/* packing-half: the rows of first-fit decreasing at half the maximum length (a sample longer than
 * that in a row of its own): twice the micro-batches of half the size, so a shorter fill and
 * drain and less attention per row, against more fixed costs per micro-batch. */
static dp_status packing_capped(const batch_ctx *ctx, const sample_len *in, int n, mb_list *out,
                                int div, dp_err *err)
{
    batch_rules capped = *ctx->rules;
    capped.max_seqlen = ctx->rules->max_seqlen / div > 0 ? ctx->rules->max_seqlen / div : 1;
    if (capped.arch == ARCH_T5)
        capped.max_dec_seqlen = ctx->rules->max_dec_seqlen / div > capped.dec_extra
                                    ? ctx->rules->max_dec_seqlen / div
                                    : capped.dec_extra + 1;
    return packing_ffd_rows(ctx, &capped, in, n, out, err); /* rows cut at the cap */
}

static dp_status split_packing_half(const batch_ctx *ctx, const sample_len *in, int n,
                                    mb_list *out, dp_err *err)
{
    return packing_capped(ctx, in, n, out, 2, err);
}

/* packing-quarter: the same at a quarter of the maximum length. */
static dp_status split_packing_quarter(const batch_ctx *ctx, const sample_len *in, int n,
                                       mb_list *out, dp_err *err)
{
    return packing_capped(ctx, in, n, out, 4, err);
}

/* packing-taper: first-fit decreasing's micro-batches with the lightest (fewest padded tokens)
 * moved first and the next lightest last: the pipeline fills with a small micro-batch and drains
 * behind one, where first-fit decreasing put its heaviest first. */
static dp_status split_packing_taper(const batch_ctx *ctx, const sample_len *in, int n,
                                     mb_list *out, dp_err *err)
{
    int first_mb = out->n_mb;
    dp_status st = packing_ffd_rows(ctx, ctx->rules, in, n, out, err);
    int m = out->n_mb - first_mb;
    if (st != DP_OK || m < 3) return st;
    microbatch *mb = out->mb + first_mb;
    for (int end = 0; end < 2; end++) { /* the lightest to the front, then the next to the back */
        int lo = end ? 1 : 0, hi = m - 1, best = lo;
        for (int k = lo; k <= hi; k++)
            if ((int64_t)mb[k].mbs * (mb[k].enc_len + mb[k].dec_len) <
                (int64_t)mb[best].mbs * (mb[best].enc_len + mb[best].dec_len))
                best = k;
        microbatch x = mb[best];
        if (end) memmove(mb + best, mb + best + 1, (size_t)(hi - best) * sizeof *mb), mb[hi] = x;
        else memmove(mb + 1, mb, (size_t)best * sizeof *mb), mb[0] = x;
    }
    return DP_OK;
}

/* First-fit decreasing into rows that `fit` allows (ctx->rules' or a smaller cap), emitted under
 * ctx's rules (padded rows at their full length, varlen rows at their own). */
/* First-fit decreasing of in[0..n) into rows under fit's lengths (longest sample first, each
 * into the first row that holds it): rows[0..*nr) over packed, a row's samples contiguous; rows
 * and packed hold n each. */
static dp_status ffd_pack(const batch_rules *fit, const sample_len *in, int n, row *rows,
                          sample_len *packed, int *nr, dp_err *err)
{
    sample_len *s = malloc((size_t)(n ? n : 1) * sizeof *s);
    int *row_of = malloc((size_t)(n ? n : 1) * sizeof *row_of);
    if (!s || !row_of) {
        free(s), free(row_of);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    memcpy(s, in, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_longest_first);
    *nr = 0;
    for (int i = 0; i < n; i++) {
        int r = 0;
        while (r < *nr && !batch_row_fits(fit, &rows[r].use, &s[i])) r++;
        if (r == *nr) rows[(*nr)++] = (row){{0, 0}, 0, 0};
        row_add(&rows[r], &s[i]);
        row_of[i] = r;
    }
    lay_out_bins(s, n, row_of, *nr, rows, packed);
    free(s), free(row_of);
    return DP_OK;
}

static dp_status packing_ffd_rows(const batch_ctx *ctx, const batch_rules *fit, const sample_len *in,
                                  int n, mb_list *out, dp_err *err)
{
    row *rows = calloc((size_t)(n ? n : 1), sizeof *rows);
    sample_len *packed = malloc((size_t)(n ? n : 1) * sizeof *packed);
    int nr = 0;
    dp_status st = !rows || !packed ? dp_fail(err, DP_ERR_NOMEM, "out of memory")
                                    : ffd_pack(fit, in, n, rows, packed, &nr, err);
    if (st == DP_OK) st = emit_rows(ctx, rows, nr, ctx->mbs, packed, -1, out, err);
    free(rows), free(packed);
    return st;
}

/* packing-dp: first-fit decreasing's varlen rows, ordered by their tokens, grouped into
 * micro-batches by the DP's search (dp_cut: DynaPipe's objective over contiguous runs of rows,
 * each run one micro-batch of as many rows, its varlen shape priced on the stage model under the
 * schedule's memory rule). The packers' full rows, as few micro-batches as pays: where the DP
 * over samples pads, and the packers fix their rows per micro-batch. */
typedef struct rows_dp {
    const batch_ctx *ctx;
    const row *rows;          /* by tokens, ascending */
    const sample_len *packed; /* their samples, row after row */
    mem_rule rule;
    int i, l;                 /* the run whose attention sums m holds (the DP extends a run a row
                               * at a time) */
    microbatch m;
} rows_dp;

static int row_tokens(const row *w)
{
    return w->use.enc + w->use.dec;
}

static int cmp_row_tokens(const void *a, const void *b)
{
    const row *x = a, *y = b;
    int tx = row_tokens(x), ty = row_tokens(y);
    if (tx != ty) return tx - ty;
    return x->first - y->first;
}

/* The time of rows [i, i+l) as one micro-batch, ns (-1: it does not fit), at the shape emit_rows
 * gives it (rows_lens, mb_attn_add). */
static int64_t rows_dp_cost(void *c, int i, int l)
{
    rows_dp *x = c;
    if (x->i != i || x->l > l - 1) { /* a new run: from its first row */
        memset(&x->m, 0, sizeof x->m);
        x->m.varlen = x->ctx->varlen;
        x->i = i, x->l = 0;
    }
    for (; x->l < l; x->l++) {
        const row *w = &x->rows[i + x->l];
        for (int q = 0; q < w->n && x->m.varlen; q++)
            mb_attn_add(x->ctx->rules, &x->m, &x->packed[w->first + q]);
    }
    x->m.mbs = l;
    rows_lens(x->ctx, x->rows + i, l, &x->m.enc_len, &x->m.dec_len);
    cost_shape sh = mb_shape(&x->m);
    double t_ms;
    int fits;
    if (stage_model_time(x->ctx->sm, &sh, &x->rule, &t_ms, &fits) != DP_OK || !fits) return -1;
    return llround(t_ms * 1e6);
}

static dp_status split_packing_dp(const batch_ctx *ctx, const sample_len *in, int n, mb_list *out,
                                  dp_err *err)
{
    size_t cap = (size_t)(n ? n : 1);
    row *rows = calloc(cap, sizeof *rows);
    sample_len *packed = malloc(cap * sizeof *packed), *by_tokens = malloc(cap * sizeof *by_tokens);
    int *ends = malloc(cap * sizeof *ends), nr = 0, n_mb = 0;
    dp_status st = !rows || !packed || !by_tokens || !ends
                       ? dp_fail(err, DP_ERR_NOMEM, "out of memory")
                       : ffd_pack(ctx->rules, in, n, rows, packed, &nr, err);
    if (st == DP_OK) qsort(rows, (size_t)nr, sizeof *rows, cmp_row_tokens);
    for (int k = 0, at = 0; k < nr && st == DP_OK; k++) { /* the rows' samples in that order */
        memcpy(by_tokens + at, packed + rows[k].first, (size_t)rows[k].n * sizeof *packed);
        rows[k].first = at, at += rows[k].n;
    }
    rows_dp x = {.ctx = ctx, .rows = rows, .packed = by_tokens, .i = -1};
    mb_mem_rule(ctx, 0, &x.rule);
    for (int k = 0; k < nr && st == DP_OK; k++) /* a row that fits nowhere, named */
        if (rows_dp_cost(&x, k, 1) < 0)
            st = dp_fail(err, DP_ERR_INFEASIBLE, "packing-dp: a row of %d samples and %d tokens "
                         "does not fit in a micro-batch even alone\nhint: try --recompute dynamic "
                         "(or full), more --tp or --pp, or a smaller --max-seqlen",
                         rows[k].n, row_tokens(&rows[k]));
    if (st == DP_OK)
        st = dp_cut(nr, rows_dp_cost, &x, ctx->sm->pp, ctx->sm->chunks, ctx->sm->dp, ends, &n_mb, err);
    for (int k = 0, from = 0; k < n_mb && st == DP_OK; k++) {
        st = emit_rows(ctx, rows + from, ends[k] - from, ends[k] - from, by_tokens, -1, out, err);
        from = ends[k];
    }
    free(rows), free(packed), free(by_tokens), free(ends);
    return st;
}

/* ---- varlen balancers ---------------------------------------------------------------------- */

/* A sample's workload under the stage model, as verl's balancer weighs it: a * s + s^2 (T5:
 * a * (e + d) + e^2 + d^2 + e * d), with a the ratio of the token-linear cost per token to the
 * attention cost per squared token, both read off the stage model's own costs at half the
 * maximum length: a row's time with and without its attention term (a varlen shape whose
 * samples' sums are 0), and two rows against one. A cost model whose attention costs nothing
 * weighs tokens alone. */
typedef struct workload {
    double a;
    int tokens_only;
} workload;

static dp_status workload_of(const batch_ctx *ctx, workload *w, dp_err *err)
{
    const batch_rules *r = ctx->rules;
    int t5 = r->arch == ARCH_T5;
    int e = batch_pad(r, r->max_seqlen / 2 > 0 ? r->max_seqlen / 2 : 1);
    int d = t5 ? batch_pad(r, r->max_dec_seqlen / 2 > 0 ? r->max_dec_seqlen / 2 : 1) : 0;
    mb_cost *c = malloc(sizeof *c);
    if (!c) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    double t_rows = 0, t_one = 0, t_two = 0;
    cost_shape sh = cost_shape_rows(1, e, d);
    dp_status st = stage_model_cost(ctx->sm, &sh, c, err);
    if (st == DP_OK) t_rows = c->t_ms, sh.varlen = 1, st = stage_model_cost(ctx->sm, &sh, c, err);
    if (st == DP_OK) t_one = c->t_ms, sh.mbs = 2, st = stage_model_cost(ctx->sm, &sh, c, err);
    if (st == DP_OK) t_two = c->t_ms;
    free(c);
    if (st != DP_OK) return st;
    double tokens = e + d, squares = (double)e * e + (double)d * d + (double)e * d;
    double per_sq = (t_rows - t_one) / squares, per_token = (t_two - t_one) / tokens;
    w->tokens_only = !(per_sq > 0);
    w->a = w->tokens_only ? 0 : fmax(0, per_token) / per_sq;
    return DP_OK;
}

static double sample_work(const workload *w, const sample_len *x)
{
    double e = x->enc, d = x->dec;
    if (w->tokens_only) return e + d;
    return w->a * (e + d) + e * e + d * d + e * d;
}

/* Deals a balancer's nb micro-batches (out->mb[first ..], one per bin, of workloads load[]) to
 * the D replicas: heaviest first, in a snake (0, 1, .., D-1, D-1, .., 0, ...), so that every
 * replica runs as many micro-batches as the others (Megatron and verl run the same count on
 * every data-parallel rank), within one when nb is not a multiple of D. */
static dp_status deal_snake(mb_list *out, int first, const double *load, int nb, int D)
{
    if (D <= 1) return DP_OK;
    int *order = malloc((size_t)(nb ? nb : 1) * sizeof *order);
    if (!order) return DP_ERR_NOMEM;
    for (int b = 0; b < nb; b++) {
        int at = b;
        while (at > 0 && load[order[at - 1]] < load[b]) order[at] = order[at - 1], at--;
        order[at] = b;
    }
    for (int k = 0; k < nb; k++) out->mb[first + order[k]].replica = mb_snake(k, D);
    out->replicas_set = 1;
    free(order);
    return DP_OK;
}

/* packing-kk's row counts tried one multiple of D apart before the search doubles its step */
#define KK_LINEAR_STEPS 8
/* KK's time grows with samples x rows (a node of k bins absorbs others bin by bin): past this a
 * batch takes minutes, and packing-kk refuses it (packing-wlb balances rows greedily at any size) */
#define KK_MAX_CELLS (1LL << 26)

/* packing-kk's try at k rows: KK's partition of the weights into bin[] and whether every row
 * holds its samples within the length caps (*fits); rows[] the caller's, k of them. */
static dp_status kk_rows_fit(const batch_rules *r, const sample_len *s, const double *w, int n,
                             int k, int *bin, row *rows, int *fits, dp_err *err)
{
    if ((long long)n * k > KK_MAX_CELLS)
        return dp_fail(err, DP_ERR_INFEASIBLE,
                       "packing-kk: Karmarkar-Karp of %d samples into %d rows is past its bound "
                       "(samples x rows over %lld: minutes a batch)\nhint: packing-wlb balances the "
                       "rows greedily at any size, or a smaller --global-tokens",
                       n, k, KK_MAX_CELLS);
    if (n > 0 && kk_partition(w, n, k, bin) != DP_OK)
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    *fits = 1;
    for (int b = 0; b < k; b++) rows[b].use = (batch_row){0, 0};
    for (int i = 0; i < n && *fits; i++) {
        *fits = batch_row_fits(r, &rows[bin[i]].use, &s[i]);
        rows[bin[i]].use.enc += s[i].enc, rows[bin[i]].use.dec += s[i].dec;
    }
    return DP_OK;
}

/* verl's balancer (seqlen-balanced partitions with the a*s + s^2 workload): Karmarkar-Karp over
 * k bins, k the fewest multiple of D whose bins each fit one --max-seqlen row (batch_row_fits),
 * searched from the tokens over the row length (kk_rows_fit's tries); each bin is one varlen
 * micro-batch, dealt to the replicas by deal_snake. */
static dp_status split_packing_kk(const batch_ctx *ctx, const sample_len *s, int n, mb_list *out,
                                  dp_err *err)
{
    workload wl;
    dp_status wst = workload_of(ctx, &wl, err);
    if (wst != DP_OK) return wst;
    const batch_rules *r = ctx->rules;
    int D = ctx->sm->dp;
    double *w = malloc((size_t)(n ? n : 1) * sizeof *w), *load = NULL;
    int *bin = malloc((size_t)(n ? n : 1) * sizeof *bin);
    row *rows = calloc((size_t)(n + D), sizeof *rows);
    sample_len *packed = malloc((size_t)(n ? n : 1) * sizeof *packed);
    dp_status st = DP_OK;
    if (!w || !bin || !rows || !packed) {
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        goto out;
    }
    int64_t enc = 0, dec = 0;
    for (int i = 0; i < n; i++) w[i] = sample_work(&wl, &s[i]), enc += s[i].enc, dec += s[i].dec;
    int64_t k = (enc + r->max_seqlen - 1) / r->max_seqlen;
    if (r->arch == ARCH_T5) {
        int64_t kd = (dec + r->max_dec_seqlen - 1) / r->max_dec_seqlen;
        if (kd > k) k = kd;
    }
    k = (k + D - 1) / D * D;
    if (k < D) k = D;
    /* the fewest rows (a multiple of D) whose partition fits the length caps: D more at a time for
     * KK_LINEAR_STEPS tries, then doubling the step to a count that fits and halving back to the
     * first that does (a batch of thousands of rows would otherwise run KK thousands of times) */
    int64_t most = (n + D - 1) / D * D; /* one sample per bin always fits */
    int64_t fail = 0, fit = 0, step = D, tried = 0; /* tried: the count bin[] now holds */
    int fits;
    for (int tries = 0; !fit; tries++) {
        if (k > most) k = most;
        if ((st = kk_rows_fit(r, s, w, n, (int)k, bin, rows, &fits, err)) != DP_OK) goto out;
        tried = k;
        if (fits || k >= most) fit = k;
        else fail = k;
        if (tries + 1 >= KK_LINEAR_STEPS) step *= 2;
        k += step;
    }
    while (fit - fail > D && fail > 0) { /* bisect (fail, fit] in steps of D */
        int64_t mid = fail + (fit - fail) / 2 / D * D;
        if ((st = kk_rows_fit(r, s, w, n, (int)mid, bin, rows, &fits, err)) != DP_OK) goto out;
        tried = mid;
        *(fits ? &fit : &fail) = mid;
    }
    k = fit;
    if (tried != k && (st = kk_rows_fit(r, s, w, n, (int)k, bin, rows, &fits, err)) != DP_OK)
        goto out;
    /* bins left empty (fewer samples than bins) are dropped: renumber the others in order */
    int nb = 0, *renum = calloc((size_t)(k > 0 ? k : 1), sizeof *renum);
    if (!renum) {
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) renum[bin[i]] = 1;
    for (int b = 0; b < k; b++) renum[b] = renum[b] ? nb++ : -1;
    for (int i = 0; i < n; i++) bin[i] = renum[bin[i]];
    free(renum);
    lay_out_bins(s, n, bin, nb, rows, packed);
    int first = out->n_mb;
    st = emit_rows(ctx, rows, nb, 1, packed, -1, out, err);
    load = calloc((size_t)(nb ? nb : 1), sizeof *load);
    if (st == DP_OK && !load) st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
    for (int i = 0; st == DP_OK && i < n; i++) load[bin[i]] += w[i];
    if (st == DP_OK && deal_snake(out, first, load, nb, D) != DP_OK)
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
out:
    free(w), free(bin), free(rows), free(packed), free(load);
    return st;
}

/* A WLB-LLM-style workload-balanced packer: bins as many as first-fit-decreasing needs, rounded
 * up to a multiple of D; samples by workload, heaviest first, each into the bin of least
 * workload that still holds it (batch_row_fits), a new bin when none does. Each bin is one
 * varlen micro-batch, dealt to the replicas by deal_snake. (WLB-LLM also delays outlier samples
 * to later iterations; that changes the global batches and is not done here.) */
typedef struct weighed {
    double w;
    sample_len s;
} weighed;

static int cmp_weighed(const void *a, const void *b)
{
    const weighed *x = a, *y = b;
    if (x->w != y->w) return x->w < y->w ? 1 : -1;
    return x->s.id - y->s.id;
}

static dp_status split_packing_wlb(const batch_ctx *ctx, const sample_len *in, int n,
                                   mb_list *out, dp_err *err)
{
    workload wl;
    dp_status wst = workload_of(ctx, &wl, err);
    if (wst != DP_OK) return wst;
    const batch_rules *r = ctx->rules;
    int D = ctx->sm->dp;
    weighed *x = malloc((size_t)(n ? n : 1) * sizeof *x);
    sample_len *s = malloc((size_t)(n ? n : 1) * sizeof *s);
    sample_len *packed = malloc((size_t)(n ? n : 1) * sizeof *packed);
    row *rows = calloc((size_t)(n + D), sizeof *rows);
    double *load = calloc((size_t)(n + D), sizeof *load);
    int *bin = malloc((size_t)(n ? n : 1) * sizeof *bin);
    dp_status st = DP_OK;
    if (!x || !s || !packed || !rows || !load || !bin) {
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) x[i] = (weighed){sample_work(&wl, &in[i]), in[i]};
    qsort(x, (size_t)n, sizeof *x, cmp_weighed);
    /* first-fit-decreasing's row count (by workload order, which for one length is by length) */
    int nb = 0;
    for (int i = 0; i < n; i++) {
        int b = 0;
        while (b < nb && !batch_row_fits(r, &rows[b].use, &x[i].s)) b++;
        if (b == nb) rows[nb++].use = (batch_row){0, 0};
        rows[b].use.enc += x[i].s.enc, rows[b].use.dec += x[i].s.dec;
    }
    nb = (nb + D - 1) / D * D;
    if (nb > n) nb = n;
    for (int b = 0; b < nb; b++) rows[b].use = (batch_row){0, 0};
    for (int i = 0; i < n; i++) {
        int best = -1;
        for (int b = 0; b < nb; b++)
            if (batch_row_fits(r, &rows[b].use, &x[i].s) && (best < 0 || load[b] < load[best]))
                best = b;
        if (best < 0) best = nb++, rows[best].use = (batch_row){0, 0};
        rows[best].use.enc += x[i].s.enc, rows[best].use.dec += x[i].s.dec;
        load[best] += x[i].w;
        s[i] = x[i].s;
        bin[i] = best;
    }
    lay_out_bins(s, n, bin, nb, rows, packed);
    int first = out->n_mb;
    st = emit_rows(ctx, rows, nb, 1, packed, -1, out, err);
    if (st == DP_OK && deal_snake(out, first, load, nb, D) != DP_OK)
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
out:
    free(x), free(s), free(packed), free(rows), free(load), free(bin);
    return st;
}

/* Megatron-Core's dp_balanced packing scheduler, as its documentation describes it: sequences
 * in their original order, packed into rows of --max-seqlen, with the data-parallel ranks'
 * loads balanced. Here: each sample in trace order goes to the replica with the fewest tokens
 * so far (the lowest on a tie), and each replica packs its samples next-fit in that order;
 * --mbs rows per micro-batch. With one replica it is next-fit over the batch. */
static dp_status split_dp_balanced(const batch_ctx *ctx, const sample_len *s, int n,
                                   mb_list *out, dp_err *err)
{
    int D = ctx->sm->dp;
    int *rep = malloc((size_t)(n ? n : 1) * sizeof *rep);
    int64_t *tokens = calloc((size_t)D, sizeof *tokens);
    sample_len *mine = malloc((size_t)(n ? n : 1) * sizeof *mine);
    row *rows = calloc((size_t)(n ? n : 1), sizeof *rows);
    dp_status st = DP_OK;
    if (!rep || !tokens || !mine || !rows) {
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < n; i++) {
        int best = 0;
        for (int d = 1; d < D; d++)
            if (tokens[d] < tokens[best]) best = d;
        rep[i] = best;
        tokens[best] += s[i].enc + s[i].dec;
    }
    for (int d = 0; d < D && st == DP_OK; d++) {
        int m = 0, nr = 0;
        for (int i = 0; i < n; i++)
            if (rep[i] == d) mine[m++] = s[i];
        for (int i = 0; i < m; i++) {
            if (nr == 0 || !batch_row_fits(ctx->rules, &rows[nr - 1].use, &mine[i]))
                rows[nr++] = (row){{0, 0}, i, 0};
            row_add(&rows[nr - 1], &mine[i]);
        }
        st = emit_rows(ctx, rows, nr, ctx->mbs, mine, D > 1 ? d : -1, out, err);
    }
    if (D > 1) out->replicas_set = 1;
out:
    free(rep), free(tokens), free(mine), free(rows);
    return st;
}

/* name, summary, split, memory_aware, pack_dataset, varlen, knob, chooses */
static const batcher BATCHERS[] = {
    {"padding", "fixed --mbs samples, all padded to the batch's longest", split_padding, 0, 0, 0,
     BATCH_KNOB_MBS, 0, 0},
    {"packing", "Megatron's --pack-dataset: the trace packed next-fit into --max-seqlen rows, "
     "global batches of whole rows, --mbs rows per micro-batch (MLM+DS baseline)",
     split_packing, 0, 1, 0, BATCH_KNOB_MBS, 0, 1},
    {"packing-batch", "each global batch packed next-fit on its own (a partial last row)",
     split_packing, 0, 0, 0, BATCH_KNOB_MBS, 0, 1},
    {"packing-ffd", "first-fit-decreasing packing of each global batch into the same rows",
     split_packing_ffd, 0, 0, 0, BATCH_KNOB_MBS, 0, 1},
    {"token", "ordered samples cut at --mb-tokens padded tokens (DynaPipe's token-based)",
     split_token, 0, 0, 0, BATCH_KNOB_MB_TOKENS, 0, 0},
    {"dynamic", "DynaPipe's dynamic program over the ordered samples", dp_batch, 1, 0, 0,
     BATCH_KNOB_NONE, 0, 0},
    {"packing-varlen", "Megatron-Core's THD packing: packing's rows, attention per sample "
     "(cu_seqlens), rows as long as their micro-batch's fullest", split_packing, 0, 1, 1,
     BATCH_KNOB_MBS, 0, 1},
    {"packing-ffd-varlen", "Multipack: first-fit-decreasing rows of each global batch, "
     "attention per sample", split_packing_ffd, 0, 0, 1, BATCH_KNOB_MBS, 0, 1},
    {"dp-balanced", "Megatron-Core's dp_balanced: samples in order dealt to the replica with "
     "fewest tokens, next-fit rows per replica, attention per sample", split_dp_balanced, 0, 0, 1,
     BATCH_KNOB_MBS, 0, 1},
    {"packing-kk", "verl: Karmarkar-Karp over the fewest rows that fit, workload a*s + s^2, one "
     "varlen row per micro-batch", split_packing_kk, 0, 0, 1, BATCH_KNOB_NONE, 0, 1},
    {"packing-wlb", "WLB-LLM-style: heaviest sample first into the least-loaded row that holds "
     "it, one varlen row per micro-batch", split_packing_wlb, 0, 0, 1, BATCH_KNOB_NONE, 0, 1},
    {"dynamic-varlen", "DynaPipe's dynamic program on varlen kernels: attention per sample",
     dp_batch, 1, 0, 1, BATCH_KNOB_NONE, 0, 0},
    {"packing-half", "packing-ffd-varlen's rows at half the maximum length: more, smaller "
     "micro-batches", split_packing_half, 0, 0, 1, BATCH_KNOB_MBS, 0, 1},
    {"packing-quarter", "packing-ffd-varlen's rows at a quarter of the maximum length",
     split_packing_quarter, 0, 0, 1, BATCH_KNOB_MBS, 0, 1},
    {"packing-taper", "packing-ffd-varlen with its lightest micro-batches first and last: a "
     "shorter fill and drain", split_packing_taper, 0, 0, 1, BATCH_KNOB_MBS, 0, 1},
    {"packing-dp", "packing-ffd-varlen's rows grouped into micro-batches by DynaPipe's dynamic "
     "program (as many rows each as pays, under memory)", split_packing_dp, 1, 0, 1,
     BATCH_KNOB_NONE, 0, 1},
    {"auto", "per iteration, every batching above but the pack-dataset ones, each simulated: "
     "the fastest that fits", NULL, 1, 0, 0, BATCH_KNOB_MBS, 1, 0},
};

const batcher *batcher_find(const char *name)
{
    for (size_t i = 0; i < sizeof BATCHERS / sizeof *BATCHERS; i++)
        if (strcmp(BATCHERS[i].name, name) == 0) return &BATCHERS[i];
    return NULL;
}

const batcher *batcher_list(int *count)
{
    *count = (int)(sizeof BATCHERS / sizeof *BATCHERS);
    return BATCHERS;
}

/* ---- costing, objective, replicas ----------------------------------------------------------- */

void mb_mem_rule(const batch_ctx *ctx, int one_held, mem_rule *out)
{
    if (ctx->mem) *out = *ctx->mem;
    else mem_rule_uniform(out, ctx->sm->pp, ctx->sm->pp);
    if (one_held)
        for (int s = 0; s < ctx->sm->pp; s++) out->holds[s] = 1;
}

/* Costs micro-batch k on ctx's stage model under rule: its time and fit, and l's feasibility and
 * reason at the first that cannot be priced or does not fit. c is the caller's scratch. */
static void mb_cost_one(const batch_ctx *ctx, const mem_rule *rule, mb_list *l, int k, mb_cost *c)
{
    const stage_model *sm = ctx->sm;
    microbatch *m = &l->mb[k];
    cost_shape s = mb_shape(m);
    if (sm->cm->cp_auto) s.cp = 0, m->cp = s.cp = stage_model_pick_cp(sm, &s, rule);
    dp_err why = {0};
    if (stage_model_cost(sm, &s, c, &why) != DP_OK) {
        m->t_ms = NAN;
        m->fits = 0;
        if (l->feasible)
            snprintf(l->why, sizeof l->why, "micro-batch %d (mbs %d, enc %d, dec %d): %.300s", k,
                     m->mbs, m->enc_len, m->dec_len, why.msg);
        l->feasible = 0;
        return;
    }
    char reason[300];
    m->t_ms = c->t_ms;
    m->fits = stage_model_fits(sm, c, rule, reason, sizeof reason);
    if (!m->fits && l->feasible) {
        snprintf(l->why, sizeof l->why, "micro-batch %d (mbs %d, enc %d, dec %d) runs out of "
                 "memory: %s", k, m->mbs, m->enc_len, m->dec_len, reason);
        l->feasible = 0;
    }
}

/* ---- replicas in lockstep (ZeRO-2/3, experts across replicas) -------------------------------- */

unsigned mb_replicas_meet(int zero_stage, int dp, int experts_span)
{
    return dp > 1 && (zero_stage >= 3 || experts_span) ? 1u << OP_F | 1u << OP_B : 0;
}

int mb_replicas_lockstep(int zero_stage, int dp, int experts_span)
{
    return dp > 1 && (zero_stage >= 2 || mb_replicas_meet(zero_stage, dp, experts_span));
}

/* The sample at position at of l's ids: its id and own lengths. */
static sample_len mb_sample(const mb_list *l, int at)
{
    return (sample_len){l->ids[at], l->lens[2 * at], l->lens[2 * at + 1]};
}

/* Refills m's token counts, attention sums and rows from its samples: one row per sample where
 * each sample was a row (rows_are_samples), else next-fit into rows of m's padded lengths (every
 * sample fits one: it sat in such a row). */
static void mb_refill(const batch_ctx *ctx, const mb_list *l, microbatch *m, int rows_are_samples)
{
    batch_rules rows = *ctx->rules;
    rows.max_seqlen = m->enc_len, rows.max_dec_seqlen = m->dec_len;
    batch_row use = {0, 0};
    m->enc_tokens = m->dec_tokens = 0;
    m->enc_sq = m->dec_sq = m->enc_dec = 0;
    m->enc_max = 0;
    m->mbs = rows_are_samples ? m->n_samples : 0;
    for (int q = 0; q < m->n_samples; q++) {
        sample_len x = mb_sample(l, m->first + q);
        m->enc_tokens += x.enc, m->dec_tokens += x.dec;
        if (m->varlen) mb_attn_add(ctx->rules, m, &x);
        if (rows_are_samples) continue;
        if (m->mbs == 0 || !batch_row_fits(&rows, &use, &x)) m->mbs++, use = (batch_row){0, 0};
        use.enc += x.enc, use.dec += x.dec;
    }
}

/* Splits micro-batch k in two where its samples' tokens are closest to halved; the halves keep
 * its padded shape and replica and follow each other in l. 0 when it holds one sample; -1 out of
 * memory (l unchanged). Neither half is costed. */
static int mb_split(const batch_ctx *ctx, mb_list *l, int k)
{
    microbatch *m = &l->mb[k];
    if (m->n_samples < 2) return 0;
    size_t cap = (size_t)l->mb_cap;
    if (dp_grow((void **)&l->mb, &cap, (size_t)l->n_mb + 1, sizeof *l->mb) != DP_OK) return -1;
    l->mb_cap = (int)cap;
    m = &l->mb[k];
    int64_t total = m->enc_tokens + m->dec_tokens, left = 0;
    int h = 1;
    for (int q = 0; q + 1 < m->n_samples; q++) {
        sample_len x = mb_sample(l, m->first + q);
        int64_t now = left + x.enc + x.dec;
        if (q > 0 && llabs(2 * now - total) >= llabs(2 * left - total)) break;
        left = now, h = q + 1;
    }
    int rows_are_samples = m->mbs == m->n_samples;
    memmove(&l->mb[k + 2], &l->mb[k + 1], (size_t)(l->n_mb - k - 1) * sizeof *l->mb);
    l->n_mb++;
    microbatch *b = &l->mb[k + 1];
    *b = *m;
    b->first = m->first + h, b->n_samples = m->n_samples - h;
    m->n_samples = h;
    mb_refill(ctx, l, m, rows_are_samples);
    mb_refill(ctx, l, b, rows_are_samples);
    return 1;
}

/* Merges micro-batches k and k + 1 (neighbours in l, so their samples are too) into one of the
 * longer padded shape: one row per sample where each was, else their samples next-fit into rows. */
static void mb_merge(const batch_ctx *ctx, mb_list *l, int k)
{
    microbatch *m = &l->mb[k], *b = &l->mb[k + 1];
    int rows_are_samples = m->mbs == m->n_samples && b->mbs == b->n_samples;
    m->n_samples += b->n_samples;
    m->enc_len = b->enc_len > m->enc_len ? b->enc_len : m->enc_len;
    m->dec_len = b->dec_len > m->dec_len ? b->dec_len : m->dec_len;
    memmove(&l->mb[k + 1], &l->mb[k + 2], (size_t)(l->n_mb - k - 2) * sizeof *l->mb);
    l->n_mb--;
    mb_refill(ctx, l, m, rows_are_samples);
}

/* Merges the two neighbouring micro-batches of least time together and costs the result. */
static void merge_cheapest(const batch_ctx *ctx, const mem_rule *rule, mb_list *l, mb_cost *c)
{
    int best = 0;
    for (int k = 1; k + 1 < l->n_mb; k++)
        if (l->mb[k].t_ms + l->mb[k + 1].t_ms < l->mb[best].t_ms + l->mb[best + 1].t_ms) best = k;
    mb_merge(ctx, l, best);
    mb_cost_one(ctx, rule, l, best, c);
}

/* Splits the costliest splittable micro-batch among those of replica (any: -1) and costs its
 * halves: 1 when one was split, 0 when none can be, -1 out of memory. */
static int split_costliest(const batch_ctx *ctx, const mem_rule *rule, mb_list *l, int replica,
                           mb_cost *c)
{
    int best = -1;
    for (int k = 0; k < l->n_mb; k++)
        if ((replica < 0 || l->mb[k].replica == replica) && l->mb[k].n_samples > 1 &&
            (best < 0 || l->mb[k].t_ms > l->mb[best].t_ms))
            best = k;
    if (best < 0) return 0;
    int rc = mb_split(ctx, l, best);
    if (rc <= 0) return rc;
    mb_cost_one(ctx, rule, l, best, c);
    mb_cost_one(ctx, rule, l, best + 1, c);
    return 1;
}

typedef struct load_of {
    double w;
    int i;
} load_of;

static int heaviest_first(const void *a, const void *b)
{
    const load_of *x = a, *y = b;
    if (x->w != y->w) return x->w > y->w ? -1 : 1;
    return x->i - y->i;
}

/* Assigns n items of weights w to D bins of n / D items each (D divides n), balancing the sums:
 * the items heaviest first, D at a time, the heaviest of each D to the lightest bin so far. */
static dp_status partition_equal_counts(const double *w, int n, int D, int *bin)
{
    load_of *item = malloc((size_t)(n ? n : 1) * sizeof *item);
    load_of *load = malloc((size_t)D * sizeof *load);
    if (!item || !load) {
        free(item), free(load);
        return DP_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) item[i] = (load_of){w[i], i};
    for (int d = 0; d < D; d++) load[d] = (load_of){0, d};
    qsort(item, (size_t)n, sizeof *item, heaviest_first);
    for (int i = 0; i < n; i += D) {
        qsort(load, (size_t)D, sizeof *load, heaviest_first); /* the lightest last */
        for (int d = 0; d < D; d++) {
            load_of *to = &load[D - 1 - d];
            bin[item[i + d].i] = to->i;
            to->w += item[i + d].w;
        }
    }
    free(item), free(load);
    return DP_OK;
}

/* Deals l's micro-batches to D replicas by their times (an unpriced one weighs 0): D at a time
 * when equal_counts (D divides l->n_mb), else by Karmarkar-Karp. */
static dp_status deal_replicas(mb_list *l, int D, int equal_counts, dp_err *err)
{
    double *w = malloc((size_t)(l->n_mb ? l->n_mb : 1) * sizeof *w);
    int *bin = malloc((size_t)(l->n_mb ? l->n_mb : 1) * sizeof *bin);
    dp_status st = w && bin ? DP_OK : DP_ERR_NOMEM;
    for (int k = 0; st == DP_OK && k < l->n_mb; k++) w[k] = isnan(l->mb[k].t_ms) ? 0 : l->mb[k].t_ms;
    if (st == DP_OK)
        st = equal_counts ? partition_equal_counts(w, l->n_mb, D, bin) : kk_partition(w, l->n_mb, D, bin);
    for (int k = 0; st == DP_OK && k < l->n_mb; k++) l->mb[k].replica = bin[k];
    free(w), free(bin);
    return st == DP_OK ? DP_OK : dp_fail(err, st, "out of memory");
}

/* Orders l's micro-batches costliest first (stable; an unpriced one last), so that every
 * replica's k-th is its k-th costliest: replicas in lockstep meet at each pass (sim.h), and
 * pairing their micro-batches by rank least lengthens the meetings (with dealing D at a time, the
 * k-th of each replica is the k-th round's). -1 out of memory (l unchanged). */
static int order_costliest_first(mb_list *l)
{
    load_of *at = malloc((size_t)(l->n_mb ? l->n_mb : 1) * sizeof *at);
    microbatch *was = malloc((size_t)(l->n_mb ? l->n_mb : 1) * sizeof *was);
    if (!at || !was) {
        free(at), free(was);
        return -1;
    }
    for (int k = 0; k < l->n_mb; k++)
        at[k] = (load_of){isnan(l->mb[k].t_ms) ? -1 : l->mb[k].t_ms, k}, was[k] = l->mb[k];
    qsort(at, (size_t)l->n_mb, sizeof *at, heaviest_first);
    for (int k = 0; k < l->n_mb; k++) l->mb[k] = was[at[k].i];
    free(at), free(was);
    return 0;
}

/* Replicas in lockstep (mb_replicas_lockstep): every replica runs as many micro-batches.
 * A batcher's own replica assignment is kept where splitting micro-batches of the replicas that
 * run fewer reaches the largest count; otherwise the costliest micro-batches are split until D
 * divides their count (or, when the samples are too few for that, the cheapest neighbours merged)
 * and they are dealt D at a time (partition_equal_counts). With fewer samples than replicas, l is
 * left to Karmarkar-Karp's uneven dealing. Where the replicas meet at their passes
 * (mb_replicas_meet), the micro-batches are then ordered costliest first. */
static dp_status equalise_replica_counts(const batch_ctx *ctx, const mem_rule *rule, mb_list *l,
                                         mb_cost *c, dp_err *err)
{
    int D = ctx->sm->dp, rc = 1;
    unsigned meet = mb_replicas_meet(ctx->sm->zero_stage, D, stage_experts_span(ctx->sm));
    if (l->replicas_set) {
        int *count = calloc((size_t)D, sizeof *count), most = 0;
        if (!count) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
        for (int k = 0; k < l->n_mb; k++) count[l->mb[k].replica]++;
        for (int d = 0; d < D; d++) most = count[d] > most ? count[d] : most;
        for (int d = 0; d < D && rc > 0; d++)
            while (count[d] < most && (rc = split_costliest(ctx, rule, l, d, c)) > 0) count[d]++;
        free(count);
        if (rc < 0) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
        if (rc > 0)
            return meet && order_costliest_first(l) ? dp_fail(err, DP_ERR_NOMEM, "out of memory")
                                                    : DP_OK;
        l->replicas_set = 0; /* some replica has too few samples: deal them all again */
    }
    int samples = 0;
    for (int k = 0; k < l->n_mb; k++) samples += l->mb[k].n_samples;
    if ((l->n_mb + D - 1) / D * D <= samples) /* up to a multiple of D by splits */
        while (l->n_mb % D && (rc = split_costliest(ctx, rule, l, -1, c)) > 0) {
        }
    else if (l->n_mb > D) /* down to a multiple of D by merges */
        while (l->n_mb % D) merge_cheapest(ctx, rule, l, c);
    if (rc < 0) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    if (l->n_mb % D) return DP_OK; /* fewer samples than replicas: dealt unevenly, which the built
                                    * plan's check (plan_iter_check_lockstep) refuses */
    dp_status st = deal_replicas(l, D, 1, err);
    if (st == DP_OK) l->replicas_set = 1;
    if (st == DP_OK && meet && order_costliest_first(l))
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
    return st;
}

dp_status mb_list_finish(const batch_ctx *ctx, mb_list *l, dp_err *err)
{
    const stage_model *sm = ctx->sm;
    mem_rule rule;
    mb_mem_rule(ctx, l->in_flight == 1, &rule);
    l->feasible = 1;
    l->why[0] = '\0';
    mb_cost *c = malloc(sizeof *c);
    if (!c) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    for (int k = 0; k < l->n_mb; k++) mb_cost_one(ctx, &rule, l, k, c);
    int S = sm->pp, C = sm->chunks, D = sm->dp;
    dp_status st = DP_OK;
    if (mb_replicas_lockstep(sm->zero_stage, D, stage_experts_span(sm)) && l->n_mb > 0)
        st = equalise_replica_counts(ctx, &rule, l, c, err);
    free(c);
    if (st != DP_OK) return st;
    double tmax = 0, sum = 0;
    for (int k = 0; k < l->n_mb; k++)
        if (!isnan(l->mb[k].t_ms)) tmax = fmax(tmax, l->mb[k].t_ms), sum += l->mb[k].t_ms;
    l->obj_tmax_ms = tmax;
    l->obj_sum_ms = sum;
    l->obj_value_ms = mb_objective_ms(S, C, D, sum, tmax);
    if (D > 1 && l->n_mb > 0 && !l->replicas_set) return deal_replicas(l, D, 0, err);
    return DP_OK;
}

/* ---- Karmarkar–Karp --------------------------------------------------------------------------- */

/* A partial solution: k bins sorted by their sums, descending, as Karmarkar-Karp keeps them; its
 * non-empty bins are the first n of them (every weight is positive), so only those are stored:
 * memory grows with the items, not with items x k. */
typedef struct kk_bin {
    double sum;
    int *items; /* the items in it */
    int count, cap;
} kk_bin;

typedef struct kk_node {
    kk_bin *bin; /* its non-empty bins, bin[0 .. n) (n <= k); bins n .. k - 1 are empty */
    int n;
} kk_node;

/* The largest bin sum less the smallest: an empty bin's 0 while the node has one. */
static double kk_spread(const kk_node *x, int k)
{
    return x->n < k ? x->bin[0].sum : x->bin[0].sum - x->bin[k - 1].sum;
}

static void kk_node_free(kk_node *x)
{
    for (int j = 0; x->bin && j < x->n; j++) free(x->bin[j].items);
    free(x->bin);
    x->bin = NULL, x->n = 0;
}

/* Stable sort of b[0 .. n) by sum, descending: a merge sort through tmp (n bins), since a merge
 * of two full nodes leaves sums of nearly equal pairs in any order (an insertion sort was
 * quadratic there). */
static void kk_sort(kk_bin *b, kk_bin *tmp, int n)
{
    if (n < 2) return;
    int h = n / 2;
    kk_sort(b, tmp, h);
    kk_sort(b + h, tmp, n - h);
    int i = 0, j = h, o = 0;
    while (i < h || j < n) /* the left's first on a tie: stable */
        tmp[o++] = j >= n || (i < h && !(b[j].sum > b[i].sum)) ? b[i++] : b[j++];
    memcpy(b, tmp, (size_t)n * sizeof *b);
}

/* Karmarkar-Karp's merge of y into x: x's bin j takes y's bin k - 1 - j (the largest with the
 * smallest), and x's bins are sorted again, stably. Where the two nodes' non-empty bins fit in k
 * (x->n + y->n <= k) no bin takes two: y's bins land below x's, in reverse, and the stable sort
 * of that sequence is a merge. Frees y's storage. */
static dp_status kk_merge(kk_node *x, kk_node *y, int k)
{
    int n = x->n + y->n < k ? x->n + y->n : k;
    kk_bin *out = malloc((size_t)n * sizeof *out);
    if (!out) return DP_ERR_NOMEM;
    if (x->n + y->n <= k) {
        /* y reversed, sorted stably (descending): each run of equal sums in y's order reversed */
        kk_bin *r = y->bin;
        for (int i = 0; i < y->n;) {
            int j = i;
            while (j + 1 < y->n && r[j + 1].sum == r[i].sum) j++;
            for (int lo = i, hi = j; lo < hi; lo++, hi--) {
                kk_bin t = r[lo];
                r[lo] = r[hi], r[hi] = t;
            }
            i = j + 1;
        }
        int a = 0, c = 0, o = 0; /* merge, x's first on a tie (they come first in the sequence) */
        while (a < x->n || c < y->n)
            out[o++] = c >= y->n || (a < x->n && !(r[c].sum > x->bin[a].sum)) ? x->bin[a++] : r[c++];
    } else {
        for (int j = 0; j < k; j++) {
            int yj = k - 1 - j;
            kk_bin *from = j < x->n ? &x->bin[j] : NULL, *add = yj < y->n ? &y->bin[yj] : NULL;
            kk_bin t = from ? *from : (kk_bin){0, NULL, 0, 0};
            if (add) {
                size_t cap = (size_t)t.cap;
                if (dp_grow((void **)&t.items, &cap, (size_t)(t.count + add->count), sizeof(int)) !=
                    DP_OK) {
                    for (int i = 0; i < j; i++) free(out[i].items);
                    free(out);
                    return DP_ERR_NOMEM;
                }
                memcpy(t.items + t.count, add->items, (size_t)add->count * sizeof(int));
                t.cap = (int)cap, t.count += add->count, t.sum += add->sum;
                free(add->items), add->items = NULL;
            }
            if (from) from->items = NULL; /* moved into out */
            out[j] = t;
        }
        kk_bin *tmp = malloc((size_t)k * sizeof *tmp);
        if (!tmp) {
            for (int i = 0; i < k; i++) free(out[i].items);
            free(out);
            return DP_ERR_NOMEM;
        }
        kk_sort(out, tmp, k);
        free(tmp); /* every bin of x and of y is now in out */
    }
    free(x->bin), free(y->bin);
    x->bin = out, x->n = n;
    y->bin = NULL, y->n = 0;
    return DP_OK;
}

/* The live nodes by spread, largest first, ties to the lower slot (the order a scan of the slots
 * for the two largest spreads would find): a binary heap of slots with each slot's heap index. */
typedef struct kk_heap {
    int *at;       /* at[h]: the slot in heap position h */
    int *pos;      /* pos[slot]: its heap position */
    double *spread; /* spread[slot] */
    int size;
} kk_heap;

static int kk_before(const kk_heap *q, int s, int t)
{
    return q->spread[s] > q->spread[t] || (q->spread[s] == q->spread[t] && s < t);
}

static void kk_place(kk_heap *q, int h, int slot)
{
    q->at[h] = slot, q->pos[slot] = h;
}

static void kk_up(kk_heap *q, int h)
{
    int slot = q->at[h];
    while (h > 0 && kk_before(q, slot, q->at[(h - 1) / 2])) {
        kk_place(q, h, q->at[(h - 1) / 2]);
        h = (h - 1) / 2;
    }
    kk_place(q, h, slot);
}

static void kk_down(kk_heap *q, int h)
{
    int slot = q->at[h];
    for (;;) {
        int c = 2 * h + 1;
        if (c >= q->size) break;
        if (c + 1 < q->size && kk_before(q, q->at[c + 1], q->at[c])) c++;
        if (!kk_before(q, q->at[c], slot)) break;
        kk_place(q, h, q->at[c]);
        h = c;
    }
    kk_place(q, h, slot);
}

/* Removes the slot from the heap. */
static void kk_remove(kk_heap *q, int slot)
{
    int h = q->pos[slot], last = q->at[--q->size];
    if (last == slot) return;
    kk_place(q, h, last);
    kk_up(q, h);
    kk_down(q, q->pos[last]);
}

dp_status kk_partition(const double *w, int n, int k, int *bin)
{
    kk_node *nodes = calloc((size_t)(n ? n : 1), sizeof *nodes);
    kk_heap q = {malloc((size_t)(n ? n : 1) * sizeof(int)), malloc((size_t)(n ? n : 1) * sizeof(int)),
                 malloc((size_t)(n ? n : 1) * sizeof(double)), 0};
    if (!nodes || !q.at || !q.pos || !q.spread) {
        free(nodes), free(q.at), free(q.pos), free(q.spread);
        return DP_ERR_NOMEM;
    }
    dp_status st = DP_OK;
    for (int i = 0; i < n && st == DP_OK; i++) { /* one item, in the first of k bins */
        kk_node *x = &nodes[i];
        x->bin = malloc(sizeof *x->bin);
        int *items = malloc(sizeof *items);
        if (!x->bin || !items) {
            free(items);
            st = DP_ERR_NOMEM;
            break;
        }
        items[0] = i;
        x->bin[0] = (kk_bin){w[i], items, 1, 1};
        x->n = 1;
    }
    int alive = n;
    for (int i = 0; st == DP_OK && i < n; i++) {
        q.spread[i] = kk_spread(&nodes[i], k);
        kk_place(&q, q.size++, i);
        kk_up(&q, i);
    }
    while (st == DP_OK && alive > 1) {
        /* the two nodes of largest spread: the heap's root and the better of its children */
        int a = q.at[0], b = q.size > 2 && kk_before(&q, q.at[2], q.at[1]) ? q.at[2] : q.at[1];
        if ((st = kk_merge(&nodes[a], &nodes[b], k)) != DP_OK) break;
        q.spread[a] = kk_spread(&nodes[a], k);
        kk_up(&q, q.pos[a]);
        kk_down(&q, q.pos[a]);
        /* drop b (move the last alive node into its place) */
        kk_remove(&q, b);
        if (b != alive - 1) {
            nodes[b] = nodes[alive - 1];
            nodes[alive - 1] = (kk_node){NULL, 0};
            q.spread[b] = q.spread[alive - 1];
            kk_place(&q, q.pos[alive - 1], b); /* its slot drops: it can only rise */
            kk_up(&q, q.pos[b]);
        }
        alive--;
    }
    if (st == DP_OK && n > 0)
        for (int j = 0; j < nodes[0].n; j++)
            for (int c = 0; c < nodes[0].bin[j].count; c++) bin[nodes[0].bin[j].items[c]] = j;
    for (int i = 0; i < n; i++) kk_node_free(&nodes[i]);
    free(nodes), free(q.at), free(q.pos), free(q.spread);
    return st;
}
