#include "layer.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/model.h"

/* rt_layer_set_yield's function, called after every GEMM-sized step (a linear op, one sample's
 * attention). */
static void (*yield_fn)(void);

void rt_layer_set_yield(void (*fn)(void)) { yield_fn = fn; }

static void yield(void)
{
    if (yield_fn) yield_fn();
}

void rt_linear_fwd(const double *x, const double *w, const double *b, double *y, int n, int in,
                   int out)
{
    for (int i = 0; b && i < n; i++) memcpy(y + (size_t)i * out, b, (size_t)out * sizeof *y);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, out, in, 1.0, x, in, w, out,
                b ? 1.0 : 0.0, y, out);
    yield();
}

void rt_linear_bwd_input(const double *dy, const double *w, double *dx, int n, int in, int out)
{
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, in, out, 1.0, dy, out, w, out, 0.0, dx,
                in);
    yield();
}

void rt_linear_bwd_weight(const double *x, const double *dy, double *dw, double *db, int n, int in,
                          int out)
{
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, n, 1.0, x, in, dy, out, 1.0, dw,
                out);
    for (int i = 0; db && i < n; i++)
        for (int j = 0; j < out; j++) db[j] += dy[(size_t)i * out + j];
    yield();
}

void rt_layernorm_fwd(const double *x, const double *g, const double *b, double *y, double *mean,
                      double *rstd, int n, int h, double eps)
{
    for (int i = 0; i < n; i++) {
        const double *xi = x + (size_t)i * h;
        double m = 0, v = 0;
        for (int j = 0; j < h; j++) m += xi[j];
        m /= h;
        for (int j = 0; j < h; j++) v += (xi[j] - m) * (xi[j] - m);
        v /= h;
        double r = 1 / sqrt(v + eps);
        mean[i] = m;
        rstd[i] = r;
        for (int j = 0; j < h; j++) y[(size_t)i * h + j] = (xi[j] - m) * r * g[j] + b[j];
    }
}

void rt_layernorm_bwd(const double *dy, const double *x, const double *g, const double *mean,
                      const double *rstd, double *dx, double *dg, double *db, int n, int h)
{
    for (int i = 0; i < n; i++) {
        const double *xi = x + (size_t)i * h, *dyi = dy + (size_t)i * h;
        double a = 0, c = 0;
        for (int j = 0; j < h; j++) {
            double xhat = (xi[j] - mean[i]) * rstd[i], dxhat = dyi[j] * g[j];
            a += dxhat;
            c += dxhat * xhat;
            dg[j] += dyi[j] * xhat;
            db[j] += dyi[j];
        }
        a /= h;
        c /= h;
        for (int j = 0; j < h; j++) {
            double xhat = (xi[j] - mean[i]) * rstd[i];
            dx[(size_t)i * h + j] = rstd[i] * (dyi[j] * g[j] - a - xhat * c);
        }
    }
}

void rt_rmsnorm_fwd(const double *x, const double *g, double *y, double *rstd, int n, int h,
                    double eps)
{
    for (int i = 0; i < n; i++) {
        const double *xi = x + (size_t)i * h;
        double v = 0;
        for (int j = 0; j < h; j++) v += xi[j] * xi[j];
        double r = 1 / sqrt(v / h + eps);
        rstd[i] = r;
        for (int j = 0; j < h; j++) y[(size_t)i * h + j] = xi[j] * r * g[j];
    }
}

void rt_rmsnorm_bwd(const double *dy, const double *x, const double *g, const double *rstd,
                    double *dx, double *dg, int n, int h)
{
    for (int i = 0; i < n; i++) {
        const double *xi = x + (size_t)i * h, *dyi = dy + (size_t)i * h;
        double c = 0, r = rstd[i];
        for (int j = 0; j < h; j++) {
            double xhat = xi[j] * r;
            c += dyi[j] * g[j] * xhat;
            dg[j] += dyi[j] * xhat;
        }
        c /= h;
        for (int j = 0; j < h; j++) dx[(size_t)i * h + j] = r * (dyi[j] * g[j] - xi[j] * r * c);
    }
}

void rt_norm_fwd(const rt_layer_shape *s, const double *x, const double *g, const double *b,
                 double *y, double *mean, double *rstd, int n, int h)
{
    if (s->rmsnorm)
        rt_rmsnorm_fwd(x, g, y, rstd, n, h, rt_layer_norm_eps(s));
    else
        rt_layernorm_fwd(x, g, b, y, mean, rstd, n, h, rt_layer_norm_eps(s));
}

void rt_norm_bwd(const rt_layer_shape *s, const double *dy, const double *x, const double *g,
                 const double *mean, const double *rstd, double *dx, double *dg, double *db, int n,
                 int h)
{
    if (s->rmsnorm)
        rt_rmsnorm_bwd(dy, x, g, rstd, dx, dg, n, h);
    else
        rt_layernorm_bwd(dy, x, g, mean, rstd, dx, dg, db, n, h);
}

#define GELU_C 0.7978845608028654 /* sqrt(2 / pi) */

void rt_gelu_fwd(const double *u, double *g, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double x = u[i];
        g[i] = 0.5 * x * (1 + tanh(GELU_C * (x + 0.044715 * x * x * x)));
    }
}

void rt_gelu_bwd(const double *dg, const double *u, double *du, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double x = u[i], t = tanh(GELU_C * (x + 0.044715 * x * x * x));
        double d = 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * GELU_C * (1 + 3 * 0.044715 * x * x);
        du[i] = dg[i] * d;
    }
}

static double sigmoid(double x) { return 1 / (1 + exp(-x)); }

void rt_swiglu_fwd(const double *u, double *g, int n, int f)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < f; j++) {
            double a = u[(size_t)i * 2 * f + j], b = u[(size_t)i * 2 * f + f + j];
            g[(size_t)i * f + j] = a * sigmoid(a) * b;
        }
}

void rt_swiglu_bwd(const double *dg, const double *u, double *du, int n, int f)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < f; j++) {
            double a = u[(size_t)i * 2 * f + j], b = u[(size_t)i * 2 * f + f + j];
            double sg = sigmoid(a), d = dg[(size_t)i * f + j];
            du[(size_t)i * 2 * f + j] = d * b * sg * (1 + a * (1 - sg));
            du[(size_t)i * 2 * f + f + j] = d * a * sg;
        }
}

void rt_mlp_act_fwd(const rt_layer_shape *s, const double *u, double *g, int n)
{
    if (s->glu)
        rt_swiglu_fwd(u, g, n, s->ffn);
    else
        rt_gelu_fwd(u, g, (size_t)n * s->ffn);
}

void rt_mlp_act_bwd(const rt_layer_shape *s, const double *dg, const double *u, double *du, int n)
{
    if (s->glu)
        rt_swiglu_bwd(dg, u, du, n, s->ffn);
    else
        rt_gelu_bwd(dg, u, du, (size_t)n * s->ffn);
}

void rt_seqs_rows(rt_seqs *s, int B, int S, int *off, int *len)
{
    for (int b = 0; b < B; b++) off[b] = b * S, len[b] = S;
    s->n = B, s->off = off, s->len = len, s->pos = NULL;
}

void rt_seqs_positions(const rt_seqs *s, int n, int *pos)
{
    for (int t = 0; t < n; t++) pos[t] = -1;
    for (int j = 0; j < s->n; j++)
        for (int i = 0; i < s->len[j]; i++) pos[s->off[j] + i] = (s->pos ? s->pos[j] : 0) + i;
}

void rt_rope(double *x, int ld, int heads, int d, double base, const int *pos, int n, int inverse)
{
    int half = d / 2;
    for (int t = 0; t < n; t++) {
        if (pos[t] < 0) continue;
        for (int j = 0; j < half; j++) {
            double th = rt_rope_angle(pos[t], j, d, base), c = cos(th), sn = inverse ? -sin(th) : sin(th);
            for (int h = 0; h < heads; h++) {
                double *v = x + (size_t)t * ld + (size_t)h * d, a = v[j], b = v[j + half];
                v[j] = a * c - b * sn;
                v[j + half] = b * c + a * sn;
            }
        }
    }
}

size_t rt_seqs_pairs(const rt_seqs *qs, const rt_seqs *ks)
{
    size_t t = 0;
    for (int j = 0; j < qs->n; j++) t += (size_t)qs->len[j] * (size_t)ks->len[j];
    return t;
}

/* A query's last visible key: all of them, or (causal) the keys up to its own position. */
static int last_key(int i, int lk, int causal) { return causal ? (i < lk ? i : lk - 1) : lk - 1; }

void rt_attention_fwd(const double *q, const double *k, const double *v, int ld_q, int ld_kv,
                      double *p, double *ctx, const rt_seqs *qs, const rt_seqs *ks, int a, int g,
                      int d, int causal)
{
    double scale = 1 / sqrt((double)d);
    int ld_ctx = a * d;
    size_t at = 0; /* sequence j's probabilities start after those of the sequences before it */
    for (int j = 0; j < qs->n; j++) {
        int sq = qs->len[j], sk = ks->len[j], p0 = qs->pos ? qs->pos[j] : 0;
        size_t qo = (size_t)qs->off[j], ko = (size_t)ks->off[j];
        for (int h = 0; h < a && sq > 0 && sk > 0; h++) {
            size_t kh = (size_t)rt_kv_head(h, a, g) * d;
            const double *qb = q + qo * ld_q + (size_t)h * d, *kb = k + ko * ld_kv + kh;
            const double *vb = v + ko * ld_kv + kh;
            double *pb = p + at + (size_t)h * sq * sk;
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sq, sk, d, scale, qb, ld_q, kb,
                        ld_kv, 0.0, pb, sk);
            for (int i = 0; i < sq; i++) {
                double *row = pb + (size_t)i * sk, mx = -INFINITY, sum = 0;
                int last = last_key(p0 + i, sk, causal);
                for (int c = 0; c <= last; c++) mx = row[c] > mx ? row[c] : mx;
                for (int c = 0; c < sk; c++) {
                    row[c] = c <= last ? exp(row[c] - mx) : 0;
                    sum += row[c];
                }
                for (int c = 0; c <= last; c++) row[c] /= sum;
            }
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sq, d, sk, 1.0, pb, sk, vb,
                        ld_kv, 0.0, ctx + qo * ld_ctx + (size_t)h * d, ld_ctx);
            yield();
        }
        at += (size_t)a * sq * sk;
    }
}

void rt_attention_bwd(const double *dctx, const double *q, const double *k, const double *v,
                      int ld_q, int ld_kv, const double *p, double *dq, double *dk, double *dv,
                      const rt_seqs *qs, const rt_seqs *ks, int a, int g, int d)
{
    /* masked probabilities are 0, so their gradients vanish on their own */
    double scale = 1 / sqrt((double)d);
    int ld_ctx = a * d, max_pair = 0;
    for (int j = 0; j < qs->n; j++)
        if (qs->len[j] * ks->len[j] > max_pair) max_pair = qs->len[j] * ks->len[j];
    double *dp = malloc((size_t)(max_pair ? max_pair : 1) * sizeof *dp);
    if (!dp) abort();
    size_t at = 0;
    for (int j = 0; j < qs->n; j++) {
        int sq = qs->len[j], sk = ks->len[j];
        size_t qo0 = (size_t)qs->off[j], ko0 = (size_t)ks->off[j];
        for (int h = 0; h < a && sq > 0 && sk > 0; h++) {
            size_t qo = qo0 * ld_q + (size_t)h * d;
            size_t ko = ko0 * ld_kv + (size_t)rt_kv_head(h, a, g) * d;
            const double *dcb = dctx + qo0 * ld_ctx + (size_t)h * d;
            const double *pb = p + at + (size_t)h * sq * sk;
            /* dP = dctx V^T; dV += P^T dctx */
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, sq, sk, d, 1.0, dcb, ld_ctx,
                        v + ko, ld_kv, 0.0, dp, sk);
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, sk, d, sq, 1.0, pb, sk, dcb,
                        ld_ctx, 1.0, dv + ko, ld_kv);
            /* dS = P o (dP - rowsum(dP o P)), scaled */
            for (int i = 0; i < sq; i++) {
                double *dr = dp + (size_t)i * sk;
                const double *pr = pb + (size_t)i * sk;
                double dot = 0;
                for (int c = 0; c < sk; c++) dot += dr[c] * pr[c];
                for (int c = 0; c < sk; c++) dr[c] = pr[c] * (dr[c] - dot) * scale;
            }
            /* dQ += dS K; dK += dS^T Q */
            cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, sq, d, sk, 1.0, dp, sk, k + ko,
                        ld_kv, 1.0, dq + qo, ld_q);
            cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, sk, d, sq, 1.0, dp, sk, q + qo,
                        ld_q, 1.0, dk + ko, ld_kv);
            yield();
        }
        at += (size_t)a * sq * sk;
    }
    free(dp);
}

double rt_softmax_xent(const double *logits, const int *targets, double *dlogits, int n, int V)
{
    double loss = 0;
    for (int i = 0; i < n; i++) {
        const double *l = logits + (size_t)i * V;
        double *dl = dlogits + (size_t)i * V, mx = l[0], sum = 0;
        for (int j = 1; j < V; j++) mx = l[j] > mx ? l[j] : mx;
        for (int j = 0; j < V; j++) sum += exp(l[j] - mx);
        loss += log(sum) + mx - l[targets[i]];
        for (int j = 0; j < V; j++) dl[j] = exp(l[j] - mx) / sum / n;
        dl[targets[i]] -= 1.0 / n;
    }
    return loss / n;
}

/* Token i's synthetic target: by its index in the whole micro-batch (rt_cp_token). */
static int head_target(const rt_cp *cp, int i, int target_offset, int V)
{
    return (int)(((long long)rt_cp_token(cp, i) * 7919 + target_offset) % V);
}

/* The head on one rank's whole vocabulary; under cp the mean is over the group's n * size tokens */
static int lm_head_whole(const rt_cp *cp, const double *out, const double *emb, double *logits,
                         double *dlogits, int n, int H, int V, int target_offset)
{
    int *targets = malloc((size_t)(n > 0 ? n : 1) * sizeof *targets);
    if (!targets) return -1;
    for (int i = 0; i < n; i++) targets[i] = head_target(cp, i, target_offset, V);
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, V, H, 1.0, out, H, emb, H, 0.0, logits, V);
    rt_softmax_xent(logits, targets, dlogits, n, V);
    if (cp && cp->size > 1)
        for (size_t i = 0; i < (size_t)n * V; i++) dlogits[i] /= cp->size;
    free(targets);
    return 0;
}

int rt_lm_head_fwd(const double *out, const double *emb, double *logits, double *dlogits, int n,
                   int H, int V, int target_offset)
{
    return lm_head_whole(NULL, out, emb, logits, dlogits, n, H, V, target_offset);
}

void rt_fill(double *v, size_t n, unsigned seed, double scale) { rt_fill_at(v, n, 0, seed, scale); }

void rt_fill_at(double *v, size_t n, size_t first, unsigned seed, double scale)
{
    for (size_t i = 0; i < n; i++) v[i] = RT_FILL_VALUE(first + i, seed, scale);
}

double rt_grad_sq_share(const rt_layer_shape *s, const double *block, int tp, int tp_rank)
{
    size_t off[RT_P_COUNT], len[RT_P_COUNT], count;
    int n = rt_layer_params_layout(s, off, len, &count);
    if (tp <= 1) return rt_sum_sq(block, count);
    double sq = 0;
    for (int id = 0; id < n; id++) {
        int how = rt_param_split(s, id);
        /* a whole parameter once (rank 0), each expert once (its first group's rank) */
        if (how == RT_TP_WHOLE ? tp_rank == 0
                               : how != RT_TP_EXPERTS || rt_layer_expert_group(s, tp_rank) == 0)
            sq += rt_sum_sq(block + off[id], len[id]);
    }
    return sq;
}

double rt_sum_sq(const double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) s += v[i] * v[i];
    return s;
}

void rt_lm_head_bwd(const double *dlogits, const double *emb, const double *out, double *dout,
                    double *demb, int n, int H, int V)
{
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, H, V, 1.0, dlogits, V, emb, H, 0.0,
                dout, H);
    cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, H, n, 1.0, dlogits, V, out, H, 1.0, demb,
                H);
}

/* ---- tensor parallelism ---------------------------------------------------------------------- */

static int tp_on(const rt_tp *tp) { return tp && tp->size > 1; }
static int tp_sp(const rt_tp *tp) { return tp_on(tp) && tp->sp; }

int rt_tp_tokens(const rt_tp *tp, int n) { return tp_sp(tp) ? n / tp->size : n; }

void rt_tp_gather(const rt_tp *tp, const double *local, double *full, size_t n_local)
{
    if (tp_sp(tp)) tp->allgather(tp->ctx, local, full, n_local);
    else if (full != local) memcpy(full, local, n_local * sizeof *full);
}

void rt_tp_reduce(const rt_tp *tp, double *partial, double *local, size_t n_full)
{
    if (tp_sp(tp)) {
        tp->reduce_scatter(tp->ctx, partial, local, n_full / (size_t)tp->size);
        return;
    }
    if (tp_on(tp)) tp->allreduce(tp->ctx, partial, n_full, RT_TP_SUM);
    if (local != partial) memcpy(local, partial, n_full * sizeof *local);
}

/* ---- context parallelism --------------------------------------------------------------------- */

int rt_cp_tokens(const rt_cp *cp, int n) { return cp && cp->size > 1 ? n / cp->size : n; }

int rt_cp_split_batch(const rt_seqs *seqs, int B, int S, int size, int rank, int causal, rt_cp *out,
                      int *bad, int *bad_len)
{
    if (seqs) return rt_cp_split(seqs, B * S, size, rank, causal, out, bad, bad_len);
    int *ol = malloc(2 * (size_t)(B > 0 ? B : 1) * sizeof *ol);
    if (!ol) {
        memset(out, 0, sizeof *out);
        return -1;
    }
    rt_seqs rows;
    rt_seqs_rows(&rows, B, S, ol, ol + B);
    int rc = rt_cp_split(&rows, B * S, size, rank, causal, out, bad, bad_len);
    free(ol);
    return rc;
}

void rt_cp_free(rt_cp *cp)
{
    free(cp->store);
    memset(cp, 0, sizeof *cp);
}

/* Calls fn(piece start, length, is_sequence) for the pieces of n tokens: each sequence of seqs and
 * each stretch of padding before, between and after them (seqs in order, not overlapping; a
 * sequence of length 0 is no piece). Returns the first nonzero fn returns, else 0. */
static int each_piece(const rt_seqs *seqs, int n, int (*fn)(void *, int, int, int), void *arg)
{
    int at = 0, rc;
    for (int j = 0; j <= seqs->n; j++) {
        int start = j < seqs->n ? seqs->off[j] : n, len = j < seqs->n ? seqs->len[j] : 0;
        if (start > at && (rc = fn(arg, at, start - at, 0)) != 0) return rc;
        if (len > 0 && (rc = fn(arg, start, len, 1)) != 0) return rc;
        at = start + len > at ? start + len : at;
    }
    return 0;
}

typedef struct cp_build {
    int size, rank, causal, n_local;
    int *cursor;   /* per rank: its tokens placed so far */
    int *whole;    /* size * n_local */
    int nq;        /* this rank's query pieces so far */
    int *qoff, *qlen, *qpos, *koff, *klen; /* NULL while counting */
    int bad, bad_len;
} cp_build;

static int cp_check_piece(void *arg, int start, int len, int is_seq)
{
    cp_build *b = arg;
    (void)is_seq;
    if (len % (2 * b->size) == 0) return 0;
    b->bad = start, b->bad_len = len;
    return 1;
}

static int cp_place_piece(void *arg, int start, int len, int is_seq)
{
    cp_build *b = arg;
    int c2 = 2 * b->size, ch = len / c2;
    for (int r = 0; r < b->size; r++) {
        int chunk[2] = {r, c2 - 1 - r};
        for (int k = 0; k < 2; k++) {
            int first = chunk[k] * ch, *at = &b->cursor[r];
            if (r == b->rank && is_seq) {
                int q = b->nq++;
                b->qoff[q] = *at, b->qlen[q] = ch, b->qpos[q] = first;
                b->koff[q] = start, b->klen[q] = b->causal ? first + ch : len;
            }
            for (int i = 0; i < ch; i++) b->whole[r * b->n_local + (*at)++] = start + first + i;
        }
    }
    return 0;
}

int rt_cp_split(const rt_seqs *seqs, int n, int size, int rank, int causal, rt_cp *out, int *bad,
                int *bad_len)
{
    memset(out, 0, sizeof *out);
    cp_build b = {.size = size, .rank = rank, .causal = causal, .n_local = n / size};
    if (each_piece(seqs, n, cp_check_piece, &b)) {
        *bad = b.bad, *bad_len = b.bad_len;
        return 1;
    }
    size_t nseg = 2 * (size_t)seqs->n;
    int *store = malloc(((size_t)n + (size_t)size + 5 * nseg + 1) * sizeof *store);
    if (!store) return -1;
    b.whole = store, b.cursor = store + n;
    b.qoff = b.cursor + size, b.qlen = b.qoff + nseg, b.qpos = b.qlen + nseg;
    b.koff = b.qpos + nseg, b.klen = b.koff + nseg;
    memset(b.cursor, 0, (size_t)size * sizeof *b.cursor);
    each_piece(seqs, n, cp_place_piece, &b);
    *out = (rt_cp){.size = size, .rank = rank, .n_local = b.n_local, .whole = b.whole,
                   .store = store};
    out->q = (rt_seqs){b.nq, b.qoff, b.qlen, b.qpos};
    out->k = (rt_seqs){b.nq, b.koff, b.klen, NULL};
    return 0;
}

static int cp_on(const rt_cp *cp) { return cp && cp->size > 1; }

/* The group's key/value projections (the columns after the queries of each of this rank's
 * n_local rows of `qkv` width) gathered into kvg, the whole micro-batch's rows of 2 hkv. */
static void cp_gather_kv(const rt_cp *cp, const double *qkv_rows, int hk, int hkv, int qkv,
                         double *kvg)
{
    size_t w = 2 * (size_t)hkv, nl = (size_t)cp->n_local, all = nl * (size_t)cp->size;
    double *mine = malloc(nl * w * sizeof *mine), *got = malloc(all * w * sizeof *got);
    if (!mine || !got) abort();
    for (size_t t = 0; t < nl; t++) memcpy(mine + t * w, qkv_rows + t * qkv + hk, w * sizeof *mine);
    cp->group->allgather(cp->group->ctx, mine, got, nl * w);
    for (size_t i = 0; i < all; i++) memcpy(kvg + (size_t)cp->whole[i] * w, got + i * w, w * sizeof *got);
    free(mine), free(got);
}

/* The key/value gradients dkvg (the whole micro-batch's rows of 2 hkv, this rank's queries'
 * contributions) summed over the group, each rank adding its tokens' rows to the key/value
 * columns of d_qkv (n_local rows of qkv). */
static void cp_scatter_dkv(const rt_cp *cp, const double *dkvg, int hk, int hkv, int qkv,
                           double *d_qkv)
{
    size_t w = 2 * (size_t)hkv, nl = (size_t)cp->n_local, all = nl * (size_t)cp->size;
    double *by_rank = malloc(all * w * sizeof *by_rank), *mine = malloc(nl * w * sizeof *mine);
    if (!by_rank || !mine) abort();
    for (size_t i = 0; i < all; i++) memcpy(by_rank + i * w, dkvg + (size_t)cp->whole[i] * w, w * sizeof *mine);
    cp->group->reduce_scatter(cp->group->ctx, by_rank, mine, nl * w);
    for (size_t t = 0; t < nl; t++)
        for (size_t c = 0; c < w; c++) d_qkv[t * qkv + hk + c] += mine[t * w + c];
    free(by_rank), free(mine);
}

/* A row-parallel projection's bias: added by rank 0 only, so that the partial sums carry it once. */
static const double *bias_once(const rt_tp *tp, const double *b) { return tp_on(tp) && tp->rank ? NULL : b; }

int rt_lm_head_fwd_tp(const rt_tp *tp, const rt_cp *cp, const double *out, const double *emb,
                      double *logits, double *dlogits, int n, int H, int V, int target_offset)
{
    if (!tp_on(tp)) return lm_head_whole(cp, out, emb, logits, dlogits, n, H, V, target_offset);
    int Vl = V / tp->size, first = tp->rank * Vl;
    double mean_over = (double)n * (cp ? cp->size : 1);
    double *mx = malloc(2 * (size_t)(n > 0 ? n : 1) * sizeof *mx), *sum = mx + n;
    if (!mx) return -1;
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, Vl, H, 1.0, out, H, emb, H, 0.0, logits, Vl);
    for (int i = 0; i < n; i++) {
        const double *l = logits + (size_t)i * Vl;
        mx[i] = -INFINITY;
        for (int j = 0; j < Vl; j++) mx[i] = l[j] > mx[i] ? l[j] : mx[i];
    }
    tp->allreduce(tp->ctx, mx, (size_t)n, RT_TP_MAX);
    for (int i = 0; i < n; i++) {
        const double *l = logits + (size_t)i * Vl;
        sum[i] = 0;
        for (int j = 0; j < Vl; j++) sum[i] += exp(l[j] - mx[i]);
    }
    tp->allreduce(tp->ctx, sum, (size_t)n, RT_TP_SUM);
    for (int i = 0; i < n; i++) { /* the same synthetic targets as rt_lm_head_fwd */
        const double *l = logits + (size_t)i * Vl;
        double *dl = dlogits + (size_t)i * Vl;
        int target = head_target(cp, i, target_offset, V) - first;
        for (int j = 0; j < Vl; j++) dl[j] = exp(l[j] - mx[i]) / sum[i] / mean_over;
        if (target >= 0 && target < Vl) dl[target] -= 1.0 / mean_over;
    }
    free(mx);
    return 0;
}

void rt_lm_head_bwd_tp(const rt_tp *tp, const double *dlogits, const double *emb, const double *out,
                       double *dout, double *demb, int n, int H, int V)
{
    if (!tp_on(tp)) {
        rt_lm_head_bwd(dlogits, emb, out, dout, demb, n, H, V);
        return;
    }
    size_t nh = (size_t)n * H;
    double *partial = malloc(nh * sizeof *partial); /* this rank's vocabulary's share */
    if (!partial) abort();
    rt_lm_head_bwd(dlogits, emb, out, partial, demb, n, H, V / tp->size);
    rt_tp_reduce(tp, partial, dout, nh);
    free(partial);
}

/* ---- experts (layer.h "Experts") -------------------------------------------------------------- */

/* What one rank's MoE block runs on a micro-batch of n tokens: the experts el of its expert-parallel
 * rank er (global indices er el .. er el + el - 1), over its group's tokens t0 .. t1 - 1. */
typedef struct moe_pass {
    int experts, k, el, er, t0, t1;
    int *tok, *slot, *start; /* its copies, expert by expert: token, which of its k, where each
                              * expert's copies start (el + 1 entries) */
} moe_pass;

/* Token t's j-th expert and gate in a->route (RT_A_ROUTE: k indices, then k gates). */
static int route_expert(const double *route, int k, int t, int j)
{
    return (int)route[(size_t)t * 2 * k + j];
}
static double route_gate(const double *route, int k, int t, int j)
{
    return route[(size_t)t * 2 * k + k + j];
}

/* The copies this rank's experts run, from the saved routing (NULL: only the bounds, nothing
 * held); moe_pass_free releases them. */
static void moe_pass_init(moe_pass *m, const rt_layer_shape *s, const rt_tp *tp, int n,
                          const double *route)
{
    m->experts = s->experts, m->k = s->topk, m->el = rt_layer_local_experts(s);
    m->er = 0, m->t0 = 0, m->t1 = n;
    if (tp_on(tp)) {
        int groups = tp->size / (s->ep > 1 ? s->ep : 1), g = rt_layer_expert_group(s, tp->rank);
        m->er = rt_layer_expert_rank(s, tp->rank);
        m->t0 = (int)((long long)n * g / groups), m->t1 = (int)((long long)n * (g + 1) / groups);
    }
    m->tok = m->slot = m->start = NULL;
    if (!route) return; /* the bounds alone (the routing is yet to be made) */
    size_t most = (size_t)(m->t1 - m->t0) * (size_t)m->k + 1;
    m->tok = malloc(most * sizeof *m->tok), m->slot = malloc(most * sizeof *m->slot);
    m->start = malloc(((size_t)m->el + 1) * sizeof *m->start);
    if (!m->tok || !m->slot || !m->start) abort();
    int c = 0;
    for (int e = 0; e < m->el; e++) {
        m->start[e] = c;
        for (int t = m->t0; t < m->t1; t++)
            for (int j = 0; j < m->k; j++)
                if (route_expert(route, m->k, t, j) == m->er * m->el + e)
                    m->tok[c] = t, m->slot[c++] = j;
    }
    m->start[m->el] = c;
}

static void moe_pass_free(moe_pass *m) { free(m->tok), free(m->slot), free(m->start); }

/* The rows of x (h wide) of copies c0 .. c1 - 1 of the pass, gathered into xe. */
static void gather_copies(const moe_pass *m, const double *x, int h, int c0, int c1, double *xe)
{
    for (int c = c0; c < c1; c++)
        memcpy(xe + (size_t)(c - c0) * h, x + (size_t)m->tok[c] * h, (size_t)h * sizeof *xe);
}

/* The router on the group's tokens: each token's k largest logits (ties to the lower expert),
 * their softmax its gates, into a->route. */
static void moe_route(const rt_layer_params *p, const moe_pass *m, int h, rt_layer_acts *a)
{
    int rows = m->t1 - m->t0, E = m->experts, k = m->k;
    double *logits = malloc(((size_t)rows * E + 1) * sizeof *logits);
    if (!logits) abort();
    rt_linear_fwd(a->h2 + (size_t)m->t0 * h, p->wr, NULL, logits, rows, h, E);
    for (int r = 0; r < rows; r++) {
        const double *l = logits + (size_t)r * E;
        double *route = a->route + (size_t)(m->t0 + r) * 2 * k, top = -INFINITY, sum = 0;
        for (int j = 0; j < k; j++) { /* the j-th largest: the largest not yet taken */
            int best = -1;
            for (int e = 0; e < E; e++) {
                int taken = 0;
                for (int i = 0; i < j && !taken; i++) taken = (int)route[i] == e;
                if (!taken && (best < 0 || l[e] > l[best])) best = e;
            }
            route[j] = best;
            top = j == 0 ? l[best] : top;
        }
        for (int j = 0; j < k; j++) sum += route[k + j] = exp(l[(int)route[j]] - top);
        for (int j = 0; j < k; j++) route[k + j] /= sum;
    }
    free(logits);
}

/* Forward: the routing, then each of the rank's experts on its copies (SwiGLU, W1 then W2), their
 * gated outputs added into partial (n x h, this rank's share of the block's output). */
static void moe_fwd(const rt_layer_params *p, const rt_layer_shape *s, const rt_tp *tp, int n,
                    rt_layer_acts *a, double *partial)
{
    int h = s->hidden, f = s->ffn, f1 = 2 * f;
    moe_pass m;
    moe_pass_init(&m, s, tp, n, NULL);
    moe_route(p, &m, h, a);
    moe_pass_free(&m);
    moe_pass_init(&m, s, tp, n, a->route);
    memset(partial, 0, (size_t)n * h * sizeof *partial);
    double *xe = malloc(((size_t)(m.t1 - m.t0) * h + 1) * sizeof *xe);
    if (!xe) abort();
    for (int e = 0; e < m.el; e++) {
        int c0 = m.start[e], ne = m.start[e + 1] - c0;
        if (!ne) continue;
        gather_copies(&m, a->h2, h, c0, c0 + ne, xe);
        rt_linear_fwd(xe, p->w1 + (size_t)e * h * f1, NULL, a->u + (size_t)c0 * f1, ne, h, f1);
        rt_swiglu_fwd(a->u + (size_t)c0 * f1, a->g + (size_t)c0 * f, ne, f);
        rt_linear_fwd(a->g + (size_t)c0 * f, p->w2 + (size_t)e * f * h, NULL, a->oe + (size_t)c0 * h,
                      ne, f, h);
        yield();
    }
    for (int c = 0; c < m.start[m.el]; c++) {
        double gate = route_gate(a->route, m.k, m.tok[c], m.slot[c]);
        double *out = partial + (size_t)m.tok[c] * h;
        const double *o = a->oe + (size_t)c * h;
        for (int i = 0; i < h; i++) out[i] += gate * o[i];
    }
    free(xe);
    moe_pass_free(&m);
}

/* Input gradients from the block's output gradient a->d_y (n x h, whole): the rank's share of
 * d(h2) into dh2 (n x h), keeping each copy's d(gated output) and d(u), and the router's logit
 * gradients (its copies' gates' share: the softmax's backward is linear in them), for the W. */
static void moe_bwd_input(const rt_layer_params *p, const rt_layer_shape *s, const rt_tp *tp, int n,
                          rt_layer_acts *a, double *dh2)
{
    int h = s->hidden, f = s->ffn, f1 = 2 * f, E = s->experts;
    moe_pass m;
    moe_pass_init(&m, s, tp, n, a->route);
    int rows = m.t1 - m.t0, k = m.k;
    memset(dh2, 0, (size_t)n * h * sizeof *dh2);
    memset(a->d_logits, 0, (size_t)n * E * sizeof *a->d_logits);
    double *dgate = calloc((size_t)rows * k + 1, sizeof *dgate);
    /* scratch for one expert's copies: at most the group's tokens (a token's k are distinct) */
    double *tf = malloc(((size_t)rows * f + 1) * sizeof *tf);
    double *th = malloc(((size_t)rows * h + 1) * sizeof *th);
    if (!dgate || !tf || !th) abort();
    for (int c = 0; c < m.start[m.el]; c++) { /* d(gated output) = gate dy; d(gate) = dy . output */
        const double *dy = a->d_y + (size_t)m.tok[c] * h, *o = a->oe + (size_t)c * h;
        double gate = route_gate(a->route, k, m.tok[c], m.slot[c]), dot = 0;
        double *d = a->d_oe + (size_t)c * h;
        for (int i = 0; i < h; i++) d[i] = gate * dy[i], dot += dy[i] * o[i];
        dgate[(size_t)(m.tok[c] - m.t0) * k + m.slot[c]] = dot;
    }
    for (int e = 0; e < m.el; e++) {
        int c0 = m.start[e], ne = m.start[e + 1] - c0;
        if (!ne) continue;
        rt_linear_bwd_input(a->d_oe + (size_t)c0 * h, p->w2 + (size_t)e * f * h, tf, ne, f, h);
        rt_swiglu_bwd(tf, a->u + (size_t)c0 * f1, a->d_u + (size_t)c0 * f1, ne, f);
        rt_linear_bwd_input(a->d_u + (size_t)c0 * f1, p->w1 + (size_t)e * h * f1, th, ne, h, f1);
        for (int c = c0; c < c0 + ne; c++) {
            double *d = dh2 + (size_t)m.tok[c] * h;
            const double *x = th + (size_t)(c - c0) * h;
            for (int i = 0; i < h; i++) d[i] += x[i];
        }
        yield();
    }
    for (int r = 0; r < rows; r++) { /* softmax over the k: dl_j = g_j (dg_j - sum_i g_i dg_i) */
        int t = m.t0 + r;
        double sum = 0, *dl = a->d_logits + (size_t)t * E;
        for (int j = 0; j < k; j++) sum += route_gate(a->route, k, t, j) * dgate[(size_t)r * k + j];
        for (int j = 0; j < k; j++)
            dl[route_expert(a->route, k, t, j)] =
                route_gate(a->route, k, t, j) * (dgate[(size_t)r * k + j] - sum);
    }
    rt_linear_bwd_input(a->d_logits + (size_t)m.t0 * E, p->wr, th, rows, h, E);
    for (size_t i = 0; i < (size_t)rows * h; i++) dh2[(size_t)m.t0 * h + i] += th[i];
    free(dgate), free(tf), free(th);
    moe_pass_free(&m);
}

/* Weight gradients: each expert's W1 and W2 over its copies, the router's over the group's tokens. */
static void moe_bwd_weight(rt_layer_params *grad, const rt_layer_shape *s, int n,
                           const rt_layer_acts *a)
{
    int h = s->hidden, f = s->ffn, f1 = 2 * f;
    moe_pass m;
    moe_pass_init(&m, s, a->tp, n, a->route);
    double *xe = malloc(((size_t)(m.t1 - m.t0) * h + 1) * sizeof *xe);
    if (!xe) abort();
    for (int e = 0; e < m.el; e++) {
        int c0 = m.start[e], ne = m.start[e + 1] - c0;
        if (!ne) continue;
        gather_copies(&m, a->h2, h, c0, c0 + ne, xe);
        rt_linear_bwd_weight(xe, a->d_u + (size_t)c0 * f1, grad->w1 + (size_t)e * h * f1, NULL, ne,
                             h, f1);
        rt_linear_bwd_weight(a->g + (size_t)c0 * f, a->d_oe + (size_t)c0 * h,
                             grad->w2 + (size_t)e * f * h, NULL, ne, f, h);
    }
    rt_linear_bwd_weight(a->h2 + (size_t)m.t0 * h, a->d_logits + (size_t)m.t0 * s->experts, grad->wr,
                         NULL, m.t1 - m.t0, h, s->experts);
    free(xe);
    moe_pass_free(&m);
}

/* ---- the whole layer ------------------------------------------------------------------------- */

rt_layer_shape rt_layer_shape_of(const model_spec *m, int kind)
{
    rt_layer_shape s = {.hidden = m->hidden, .heads = m->heads, .kv = m->kv_channels,
                        .ffn = m->ffn, .causal = kind != RT_LAYER_ENCODER,
                        .cross = kind == RT_LAYER_DECODER, .glu = m->glu,
                        .kv_heads = model_kv_heads(m), .rmsnorm = m->rmsnorm,
                        .no_bias = m->no_bias,
                        .rope_base = kind == RT_LAYER_GPT ? model_rope_base(m) : 0,
                        .norm_eps = model_norm_eps(m)};
    if (kind == RT_LAYER_GPT && model_is_moe(m)) /* every layer a MoE one (rt_check_moe) */
        s.experts = m->experts, s.topk = m->experts_per_token, s.ffn = m->expert_ffn, s.glu = 1;
    return s;
}

size_t rt_layer_params_bind(rt_layer_params *p, const rt_layer_shape *s, double *block)
{
    memset(p, 0, sizeof *p);
    double **slots[RT_P_COUNT] = {
        &p->ln1_g, &p->ln1_b, &p->wqkv, &p->bqkv, &p->wo,   &p->bo,   &p->ln2_g,
        &p->ln2_b, &p->w1,    &p->b1,   &p->w2,   &p->b2,   &p->wr,    &p->lnc_g, &p->lnc_b,
        &p->wqc,   &p->bqc,   &p->wkvc, &p->bkvc, &p->woc,  &p->boc};
    size_t off[RT_P_COUNT], len[RT_P_COUNT];
    int n = rt_layer_params_layout(s, off, len, &p->count);
    for (int i = 0; block && i < n; i++) *slots[i] = len[i] ? block + off[i] : NULL;
    return p->count;
}

int rt_layer_params_alloc(rt_layer_params *p, const rt_layer_shape *s)
{
    double *block = calloc(rt_layer_params_bind(p, s, NULL), sizeof *block);
    if (!block) return -1;
    rt_layer_params_bind(p, s, block);
    p->block = block;
    return 0;
}

void rt_layer_params_free(rt_layer_params *p)
{
    free(p->block);
    memset(p, 0, sizeof *p);
}

unsigned rt_layer_seed(const stage_placement *place, int l)
{
    return (place->decoder ? 1u << 21 : 0u) + (unsigned)(place->first_layer + l);
}

void rt_layer_params_init(rt_layer_params *p, const rt_layer_shape *s, unsigned seed)
{
    unsigned st = seed * 2654435761u + 1;
    for (size_t i = 0; i < p->count; i++) {
        st = st * 1664525u + 1013904223u;
        p->block[i] = ((double)(st >> 8) / (double)(1u << 24) - 0.5) * 0.04;
    }
    for (int j = 0; j < s->hidden; j++) {
        p->ln1_g[j] = p->ln2_g[j] = 1.0;
        if (s->cross) p->lnc_g[j] = 1.0;
    }
}

size_t rt_layer_acts_doubles(const rt_layer_shape *s, int B, int S, int Se)
{
    return rt_layer_acts_bytes(s, B, S, Se, RT_FP64) / sizeof(double);
}

int rt_layer_acts_alloc(rt_layer_acts *a, const rt_layer_shape *s, int B, int S, int Se)
{
    double *block = malloc(rt_layer_acts_doubles(s, B, S, Se) * sizeof *block);
    if (!block) return -1;
    rt_layer_acts_bind(a, s, B, S, Se, block);
    a->block = block;
    return 0;
}

void rt_layer_acts_bind(rt_layer_acts *a, const rt_layer_shape *s, int B, int S, int Se,
                        double *block)
{
    memset(a, 0, sizeof *a);
    double **slots[RT_A_COUNT] = {
        &a->x,   &a->h1,    &a->mean1, &a->rstd1, &a->qkv,   &a->p,    &a->ctx,
        &a->x2,  &a->h2,    &a->mean2, &a->rstd2, &a->u,     &a->g,    &a->d_qkv,
        &a->d_o, &a->d_u,   &a->d_y,   &a->kvg,   &a->route, &a->oe,    &a->d_oe,  &a->d_logits,
        &a->xc,  &a->hc,    &a->meanc, &a->rstdc,
        &a->qc,  &a->kvc,   &a->pc,    &a->ctxc,  &a->d_qc,  &a->d_kvc, &a->d_oc};
    rt_acts_layout l;
    rt_layer_acts_layout(s, B, S, Se, RT_FP64, &l);
    for (int i = 0; i < l.count; i++) *slots[i] = l.bytes[i] ? block + l.off[i] / sizeof *block : NULL;
    a->count = l.total / sizeof *block;
    a->Se = Se;
}

void rt_layer_acts_free(rt_layer_acts *a)
{
    free(a->block);
    memset(a, 0, sizeof *a);
}

void rt_batch_seqs_init(rt_batch_seqs *bs, const rt_batch *mb)
{
    size_t need = (mb->seqs ? 0 : 2 * (size_t)mb->B) + (mb->enc_seqs ? 0 : 2 * (size_t)mb->B);
    bs->store = need ? malloc(need * sizeof *bs->store) : NULL;
    if (need && !bs->store) abort();
    int *at = bs->store;
    bs->rows = !mb->seqs && !mb->enc_seqs;
    if (mb->seqs)
        bs->self = *mb->seqs;
    else
        rt_seqs_rows(&bs->self, mb->B, mb->S, at, at + mb->B), at += 2 * mb->B;
    if (mb->enc_seqs)
        bs->enc = *mb->enc_seqs;
    else
        rt_seqs_rows(&bs->enc, mb->B, mb->Se, at, at + mb->B);
}

void rt_batch_seqs_free(rt_batch_seqs *bs)
{
    free(bs->store);
    bs->store = NULL;
}

/* The sequences of a CPU pass: the activations' (a->seqs, a->enc_seqs) or whole rows. */
static void pass_seqs_init(rt_batch_seqs *ps, const rt_layer_acts *a, int B, int S)
{
    rt_batch mb = {B, S, a->Se, a->seqs, a->enc_seqs, a->cp};
    rt_batch_seqs_init(ps, &mb);
}

/* RoPE on the q and k heads of a layer's fused projection (or its gradient) on n tokens of the
 * sequences seqs. */
static void rope_pass(const rt_layer_shape *s, const rt_seqs *seqs, double *qkv, int n, int inverse)
{
    int *pos = malloc((size_t)(n > 0 ? n : 1) * sizeof *pos);
    if (!pos) abort();
    rt_seqs_positions(seqs, n, pos);
    rt_rope(qkv, rt_layer_qkv_width(s), s->heads + rt_layer_kv_heads(s), s->kv, s->rope_base, pos, n,
            inverse);
    free(pos);
}

/* The attention cores of a layer (its self-attention, and a cross layer's attention to the
 * encoder output): probabilities and context from the saved projections. */
/* The queries of a pass's self-attention: the micro-batch's sequences, or (cp) this rank's pieces
 * of them. */
static const rt_seqs *self_queries(const rt_batch_seqs *ps, const rt_layer_acts *a)
{
    return cp_on(a->cp) ? &a->cp->q : &ps->self;
}

static void self_core(const rt_layer_shape *s, const rt_batch_seqs *ps, int n, rt_layer_acts *a)
{
    int hk = rt_layer_q_width(s), hkv = rt_layer_kv_width(s), qkv = rt_layer_qkv_width(s);
    memset(a->ctx, 0, (size_t)n * hk * sizeof *a->ctx); /* padding tokens attend to nothing */
    if (cp_on(a->cp)) /* against the gathered keys and values of the whole micro-batch */
        rt_attention_fwd(a->qkv, a->kvg, a->kvg + hkv, qkv, 2 * hkv, a->p, a->ctx, &a->cp->q,
                         &a->cp->k, s->heads, rt_layer_kv_heads(s), s->kv, s->causal);
    else
        rt_attention_fwd(a->qkv, a->qkv + hk, a->qkv + hk + hkv, qkv, qkv, a->p, a->ctx, &ps->self,
                         &ps->self, s->heads, rt_layer_kv_heads(s), s->kv, s->causal);
}

static void cross_core(const rt_layer_shape *s, const rt_batch_seqs *ps, int n, rt_layer_acts *a)
{
    int hk = rt_layer_q_width(s), hkv = rt_layer_kv_width(s);
    memset(a->ctxc, 0, (size_t)n * hk * sizeof *a->ctxc);
    rt_attention_fwd(a->qc, a->kvc, a->kvc + hkv, hk, 2 * hkv, a->pc, a->ctxc, &ps->self, &ps->enc,
                     s->heads, rt_layer_kv_heads(s), s->kv, 0);
}

void rt_layer_recompute_attention(const rt_layer_shape *s, int B, int S, rt_layer_acts *a)
{
    rt_batch_seqs ps;
    pass_seqs_init(&ps, a, B, S);
    self_core(s, &ps, rt_cp_tokens(a->cp, B * S), a);
    if (s->cross) cross_core(s, &ps, B * S, a);
    rt_batch_seqs_free(&ps);
}

void rt_layer_fwd(const rt_layer_params *p, const rt_layer_shape *s, int B, int S,
                  const double *x, double *y, rt_layer_acts *a)
{
    int n = rt_cp_tokens(a->cp, B * S), h = s->hidden, hk = rt_layer_q_width(s), f = s->ffn;
    int hkv = rt_layer_kv_width(s), qkv = rt_layer_qkv_width(s);
    const rt_tp *tp = a->tp;
    size_t nh = (size_t)n * h, nlh = (size_t)rt_tp_tokens(tp, n) * h; /* whole; this rank's */
    int nl = rt_tp_tokens(tp, n);
    /* with SP, a whole-sequence scratch: a norm's output before the gather, a projection's
     * partial sums before the reduce-scatter */
    double *full = tp_sp(tp) ? malloc(nh * sizeof *full) : NULL;
    if (tp_sp(tp) && !full) abort();
    rt_batch_seqs ps;
    pass_seqs_init(&ps, a, B, S);
    memcpy(a->x, x, nlh * sizeof *x);
    rt_norm_fwd(s, a->x, p->ln1_g, p->ln1_b, full ? full : a->h1, a->mean1, a->rstd1, nl, h);
    if (full) rt_tp_gather(tp, full, a->h1, nlh);
    rt_linear_fwd(a->h1, p->wqkv, p->bqkv, a->qkv, n, h, qkv);
    if (s->rope_base > 0) rope_pass(s, self_queries(&ps, a), a->qkv, n, 0); /* saved rotated */
    if (cp_on(a->cp)) cp_gather_kv(a->cp, a->qkv, hk, hkv, qkv, a->kvg);
    self_core(s, &ps, n, a);
    rt_linear_fwd(a->ctx, p->wo, bias_once(tp, p->bo), full ? full : a->x2, n, hk, h);
    rt_tp_reduce(tp, full ? full : a->x2, a->x2, nh);
    for (size_t i = 0; i < nlh; i++) a->x2[i] += a->x[i];
    if (s->cross) { /* xc = the self-attention block's output; x2 = xc + cross-attention (no TP) */
        int ne = B * a->Se;
        memcpy(a->xc, a->x2, nh * sizeof *a->xc);
        rt_norm_fwd(s, a->xc, p->lnc_g, p->lnc_b, a->hc, a->meanc, a->rstdc, n, h);
        rt_linear_fwd(a->hc, p->wqc, p->bqc, a->qc, n, h, hk);
        rt_linear_fwd(a->enc, p->wkvc, p->bkvc, a->kvc, ne, h, 2 * hkv);
        cross_core(s, &ps, n, a);
        rt_linear_fwd(a->ctxc, p->woc, p->boc, a->x2, n, hk, h);
        for (size_t i = 0; i < nh; i++) a->x2[i] += a->xc[i];
    }
    rt_norm_fwd(s, a->x2, p->ln2_g, p->ln2_b, full ? full : a->h2, a->mean2, a->rstd2, nl, h);
    if (full) rt_tp_gather(tp, full, a->h2, nlh);
    if (s->experts > 0) {
        moe_fwd(p, s, tp, n, a, full ? full : y);
    } else {
        rt_linear_fwd(a->h2, p->w1, p->b1, a->u, n, h, rt_layer_ffn_in(s));
        rt_mlp_act_fwd(s, a->u, a->g, n);
        rt_linear_fwd(a->g, p->w2, bias_once(tp, p->b2), full ? full : y, n, f, h);
    }
    rt_tp_reduce(tp, full ? full : y, y, nh);
    for (size_t i = 0; i < nlh; i++) y[i] += a->x2[i];
    rt_batch_seqs_free(&ps);
    free(full);
}

int rt_layer_rerun(const rt_layer_params *p, const rt_layer_shape *s, int B, int S,
                   recompute_mode rc, const double *x, double *y, rt_layer_acts *a)
{
    if (rc == RECOMPUTE_FULL) rt_layer_fwd(p, s, B, S, x, y, a);
    else if (rc == RECOMPUTE_SELECTIVE) rt_layer_recompute_attention(s, B, S, a);
    return rc == RECOMPUTE_FULL || rc == RECOMPUTE_SELECTIVE;
}

void rt_layer_bwd_input(const rt_layer_params *p, rt_layer_params *grad, const rt_layer_shape *s,
                        int B, int S, const double *dy, double *dx, rt_layer_acts *a)
{
    int n = rt_cp_tokens(a->cp, B * S), h = s->hidden, hk = rt_layer_q_width(s), f = s->ffn;
    int hkv = rt_layer_kv_width(s), qkv = rt_layer_qkv_width(s), g = rt_layer_kv_heads(s);
    const rt_tp *tp = a->tp;
    int nl = rt_tp_tokens(tp, n), sp = tp_sp(tp);
    size_t nh = (size_t)n * h, nlh = (size_t)nl * h;
    double *tmp_f = malloc((size_t)n * f * sizeof *tmp_f), *tmp_h = malloc(nh * sizeof *tmp_h);
    double *dctx = malloc((size_t)n * hk * sizeof *dctx);
    /* with SP, this rank's tokens of a norm's input gradient and of d(attention out) */
    double *dnorm = sp ? malloc(nlh * sizeof *dnorm) : tmp_h;
    double *d_o = sp ? malloc(nlh * sizeof *d_o) : a->d_o;
    if (!tmp_f || !tmp_h || !dctx || !dnorm || !d_o) abort();
    rt_batch_seqs ps;
    pass_seqs_init(&ps, a, B, S);
    rt_tp_gather(tp, dy, a->d_y, nlh);                          /* W2's output gradient, whole */
    if (s->experts > 0) {
        moe_bwd_input(p, s, tp, n, a, tmp_h);                   /* dh2, partial */
    } else {
        rt_linear_bwd_input(a->d_y, p->w2, tmp_f, n, f, h);     /* dg */
        rt_mlp_act_bwd(s, tmp_f, a->u, a->d_u, n);              /* du */
        rt_linear_bwd_input(a->d_u, p->w1, tmp_h, n, h, rt_layer_ffn_in(s)); /* dh2, partial */
    }
    rt_tp_reduce(tp, tmp_h, dnorm, nh);
    rt_norm_bwd(s, dnorm, a->x2, p->ln2_g, a->mean2, a->rstd2, d_o, grad->ln2_g, grad->ln2_b, nl, h);
    for (size_t i = 0; i < nlh; i++) d_o[i] += dy[i];           /* dx2 = d(attention out) */
    if (s->cross) { /* back through the cross-attention: d_o becomes d(self-attention out) */
        int ne = B * a->Se;
        memcpy(a->d_oc, a->d_o, nh * sizeof *a->d_oc);
        rt_linear_bwd_input(a->d_oc, p->woc, dctx, n, hk, h);
        memset(a->d_qc, 0, (size_t)n * hk * sizeof *a->d_qc);
        memset(a->d_kvc, 0, (size_t)ne * 2 * hkv * sizeof *a->d_kvc);
        rt_attention_bwd(dctx, a->qc, a->kvc, a->kvc + hkv, hk, 2 * hkv, a->pc, a->d_qc, a->d_kvc,
                         a->d_kvc + hkv, &ps.self, &ps.enc, s->heads, g, s->kv);
        rt_linear_bwd_input(a->d_qc, p->wqc, tmp_h, n, h, hk); /* d(hc) */
        if (a->denc) {
            double *de = malloc((size_t)ne * h * sizeof *de);
            if (!de) abort();
            rt_linear_bwd_input(a->d_kvc, p->wkvc, de, ne, h, 2 * hkv);
            for (size_t i = 0; i < (size_t)ne * h; i++) a->denc[i] += de[i];
            free(de);
        }
        rt_norm_bwd(s, tmp_h, a->xc, p->lnc_g, a->meanc, a->rstdc, a->d_o, grad->lnc_g,
                    grad->lnc_b, n, h);
        for (size_t i = 0; i < nh; i++) a->d_o[i] += a->d_oc[i];
    }
    rt_tp_gather(tp, d_o, a->d_o, nlh);                         /* Wo's output gradient, whole */
    rt_linear_bwd_input(a->d_o, p->wo, dctx, n, hk, h);
    memset(a->d_qkv, 0, (size_t)n * qkv * sizeof *a->d_qkv);
    if (cp_on(a->cp)) { /* the whole micro-batch's key/value gradients, then each rank's share */
        size_t nkv = (size_t)B * S * 2 * hkv;
        double *dkvg = calloc(nkv, sizeof *dkvg);
        if (!dkvg) abort();
        rt_attention_bwd(dctx, a->qkv, a->kvg, a->kvg + hkv, qkv, 2 * hkv, a->p, a->d_qkv, dkvg,
                         dkvg + hkv, &a->cp->q, &a->cp->k, s->heads, g, s->kv);
        cp_scatter_dkv(a->cp, dkvg, hk, hkv, qkv, a->d_qkv);
        free(dkvg);
    } else {
        rt_attention_bwd(dctx, a->qkv, a->qkv + hk, a->qkv + hk + hkv, qkv, qkv, a->p, a->d_qkv,
                         a->d_qkv + hk, a->d_qkv + hk + hkv, &ps.self, &ps.self, s->heads, g, s->kv);
    }
    if (s->rope_base > 0) rope_pass(s, self_queries(&ps, a), a->d_qkv, n, 1); /* to d(projected) */
    rt_linear_bwd_input(a->d_qkv, p->wqkv, tmp_h, n, h, qkv); /* dh1, partial */
    rt_tp_reduce(tp, tmp_h, dnorm, nh);
    rt_norm_bwd(s, dnorm, a->x, p->ln1_g, a->mean1, a->rstd1, dx, grad->ln1_g, grad->ln1_b, nl, h);
    for (size_t i = 0; i < nlh; i++) dx[i] += d_o[i];
    if (sp) free(dnorm), free(d_o);
    free(tmp_f), free(tmp_h), free(dctx);
    rt_batch_seqs_free(&ps);
}

void rt_layer_bwd_weight(rt_layer_params *grad, const rt_layer_shape *s, int B, int S,
                         const rt_layer_acts *a)
{
    int n = rt_cp_tokens(a->cp, B * S), h = s->hidden, hk = rt_layer_q_width(s), f = s->ffn;
    int hkv = rt_layer_kv_width(s), qkv = rt_layer_qkv_width(s);
    if (s->experts > 0) {
        moe_bwd_weight(grad, s, n, a);
    } else {
        rt_linear_bwd_weight(a->g, a->d_y, grad->w2, grad->b2, n, f, h);
        rt_linear_bwd_weight(a->h2, a->d_u, grad->w1, grad->b1, n, h, rt_layer_ffn_in(s));
    }
    if (s->cross) {
        rt_linear_bwd_weight(a->ctxc, a->d_oc, grad->woc, grad->boc, n, hk, h);
        rt_linear_bwd_weight(a->hc, a->d_qc, grad->wqc, grad->bqc, n, h, hk);
        rt_linear_bwd_weight(a->enc, a->d_kvc, grad->wkvc, grad->bkvc, B * a->Se, h, 2 * hkv);
    }
    rt_linear_bwd_weight(a->ctx, a->d_o, grad->wo, grad->bo, n, hk, h);
    rt_linear_bwd_weight(a->h1, a->d_qkv, grad->wqkv, grad->bqkv, n, h, qkv);
}
