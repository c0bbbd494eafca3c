#include "v_orders.h"

#include <math.h>
#include <stdlib.h>

#include "../models/placement.h"

int v_orders_alloc(v_orders *o, int S, int m)
{
    o->S = S, o->m = m, o->cap = 6 * (m > 0 ? m : 1);
    o->ops = malloc((size_t)S * (size_t)o->cap * sizeof *o->ops);
    o->n = calloc((size_t)(S > 0 ? S : 1), sizeof *o->n);
    if (o->ops && o->n) return 0;
    v_orders_free(o);
    return -1;
}

void v_orders_free(v_orders *o)
{
    free(o->ops), free(o->n);
    o->ops = NULL, o->n = NULL;
}

/* Appends to device d's order; an op of a micro-batch beyond m (a published order laid out for
 * more) is left out, and a pair missing one half becomes the other half alone. */
static void put(v_orders *o, int d, v_kind k, int mb, int chunk, int mb2, int chunk2)
{
    if (k == V_PAIR && mb >= o->m) k = V_FULL, mb = mb2, chunk = chunk2;
    else if (k == V_PAIR && mb2 >= o->m) k = V_F;
    if (mb >= o->m || o->n[d] >= o->cap) return;
    o->ops[(size_t)d * (size_t)o->cap + (size_t)o->n[d]++] = (v_op){k, mb, chunk, mb2, chunk2};
}

void v_zbv_published(v_orders *o)
{
    int S = o->S, n = o->m > 2 * S - 1 ? o->m : 2 * S - 1;
    for (int d = 0; d < S; d++) {
        int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
        o->n[d] = 0;
        for (int i = 0; i < 2 * (S - d) - 1; i++) put(o, d, V_F, f0++, 0, 0, 0);
        for (int i = 0; i < d; i++) put(o, d, V_F, f1++, 1, 0, 0), put(o, d, V_F, f0++, 0, 0, 0);
        for (int i = 0; i < S - d; i++) {
            put(o, d, V_F, f1++, 1, 0, 0);
            put(o, d, V_B, b1, 1, 0, 0), put(o, d, V_W, b1++, 1, 0, 0);
        }
        while (f1 < f0 || f0 < n) { /* the steady rounds */
            if (f0 < n) put(o, d, V_F, f0++, 0, 0, 0);
            put(o, d, V_B, b0, 0, 0, 0), put(o, d, V_W, b0++, 0, 0, 0);
            put(o, d, V_F, f1++, 1, 0, 0);
            put(o, d, V_B, b1, 1, 0, 0), put(o, d, V_W, b1++, 1, 0, 0);
        }
        int w0 = b0, w1 = b1;
        for (int i = 0; i < d; i++) put(o, d, V_B, b0++, 0, 0, 0), put(o, d, V_B, b1++, 1, 0, 0);
        for (int i = 0; i < S - d; i++) put(o, d, V_B, b0++, 0, 0, 0), put(o, d, V_W, w0++, 0, 0, 0);
        while (w1 < b1) put(o, d, V_W, w1++, 1, 0, 0);
        while (w0 < b0) put(o, d, V_W, w0++, 0, 0, 0);
    }
}

/* DualPipeV's counters on one device: the next micro-batch of each (chunk, F or backward), and
 * the W's its split B's left, oldest first. */
typedef struct dpv_dev {
    v_orders *o;
    int d, next_f[2], next_b[2];
    int *qmb, *qchunk, qhead, qtail; /* the pending W's, qhead.. qtail - 1 */
} dpv_dev;

static void dpv_f(dpv_dev *v, int c) { put(v->o, v->d, V_F, v->next_f[c]++, c, 0, 0); }
static void dpv_full(dpv_dev *v, int c) { put(v->o, v->d, V_FULL, v->next_b[c]++, c, 0, 0); }
static void dpv_pair(dpv_dev *v, int cf, int cb)
{
    put(v->o, v->d, V_PAIR, v->next_f[cf]++, cf, v->next_b[cb]++, cb);
}
static void dpv_split(dpv_dev *v, int c)
{
    int i = v->next_b[c]++;
    put(v->o, v->d, V_B, i, c, 0, 0);
    v->qmb[v->qtail] = i, v->qchunk[v->qtail++] = c;
}
static void dpv_w(dpv_dev *v)
{
    if (v->qhead == v->qtail) return;
    put(v->o, v->d, V_W, v->qmb[v->qhead], v->qchunk[v->qhead], 0, 0);
    v->qhead++;
}

int v_dualpipev(v_orders *o)
{
    int S = o->S, m = o->m > 2 * S ? o->m : 2 * S;
    /* the W queue: at most every split B of the device waits (steps 3, 6, 7), fewer than 2m */
    size_t cap = (size_t)(2 * m + 2);
    int *qmb = malloc(cap * sizeof *qmb), *qch = malloc(cap * sizeof *qch);
    if (!qmb || !qch) {
        free(qmb), free(qch);
        return -1;
    }
    for (int d = 0; d < S; d++) {
        o->n[d] = 0;
        dpv_dev v = {.o = o, .d = d, .qmb = qmb, .qchunk = qch};
        for (int i = 0; i < 2 * (S - d - 1); i++) dpv_f(&v, 0);            /* 1: F0 */
        for (int i = 0; i < d + 1; i++) dpv_f(&v, 0), dpv_f(&v, 1);        /* 2: F0 F1 */
        for (int i = 0; i < S - d - 1; i++) dpv_split(&v, 1), dpv_w(&v), dpv_f(&v, 1); /* 3 */
        for (int i = 0; i < m - 2 * S + d + 1; i++) {                       /* 4: F0&B1, F1&B0 */
            if (i == 0 && d == S - 1) dpv_f(&v, 0), dpv_full(&v, 1);
            else dpv_pair(&v, 0, 1);
            dpv_pair(&v, 1, 0);
        }
        for (int i = 0; i < S - d - 1; i++) dpv_full(&v, 1), dpv_pair(&v, 1, 0); /* 5: B1, F1&B0 */
        int split = 0;                                                     /* 6: B1 B0 */
        for (int i = 0; i < d + 1; i++) {
            if (i == (d + 1) / 2 && d % 2 == 1) split = 1;
            split ? dpv_split(&v, 1) : dpv_full(&v, 1);
            if (i == (d + 1) / 2 && d % 2 == 0) split = 1;
            split ? dpv_split(&v, 0) : dpv_full(&v, 0);
        }
        for (int i = 0; i < S - d - 1; i++) dpv_w(&v), dpv_split(&v, 0);  /* 7: W B0 */
        while (v.qhead < v.qtail) dpv_w(&v);                                /* 8: W */
    }
    free(qmb), free(qch);
    return 0;
}

/* ---- timing ---------------------------------------------------------------------------------- */

#define AT(i, d) ((size_t)(i) * (size_t)S + (size_t)(d))

double v_orders_ms(const v_orders *o, const v_costs *c)
{
    int S = o->S, m = o->m, nv = 2 * S;
    size_t cells = (size_t)(m > 0 ? m : 1) * (size_t)nv;
    double *fdone = malloc(cells * sizeof *fdone), *bdone = malloc(cells * sizeof *bdone);
    double *free_at = calloc((size_t)S, sizeof *free_at), end = 0;
    int *pos = calloc((size_t)S, sizeof *pos);
    if (!fdone || !bdone || !free_at || !pos) {
        end = INFINITY;
        goto out;
    }
    for (size_t i = 0; i < cells; i++) fdone[i] = bdone[i] = -1;
#define FD(i, v) fdone[(size_t)(i) * (size_t)nv + (size_t)(v)]
#define BD(i, v) bdone[(size_t)(i) * (size_t)nv + (size_t)(v)]
    for (int moved = 1; moved;) {
        moved = 0;
        for (int d = 0; d < S; d++)
            for (; pos[d] < o->n[d]; pos[d]++, moved = 1) {
                const v_op *x = &o->ops[(size_t)d * (size_t)o->cap + (size_t)pos[d]];
                int v = placement_vstage(PLACEMENT_V, d, x->chunk, S), i = x->mb;
                double t = free_at[d];
                if (x->kind == V_F || x->kind == V_PAIR) { /* the forward's input */
                    if (v > 0 && FD(i, v - 1) < 0) break;
                    if (v > 0) t = fmax(t, FD(i, v - 1));
                }
                int bi = x->kind == V_PAIR ? x->mb2 : i;
                int bv = x->kind == V_PAIR ? placement_vstage(PLACEMENT_V, d, x->chunk2, S) : v;
                int backward = x->kind == V_B || x->kind == V_FULL || x->kind == V_PAIR;
                if (backward && FD(bi, bv) < 0) break; /* its own forward: earlier here */
                if (backward && bv < nv - 1 && BD(bi, bv + 1) < 0) break;
                if (x->kind == V_W && BD(i, v) < 0) break; /* its B: earlier here */
                double tf = x->kind == V_F || x->kind == V_PAIR ? c->f[AT(i, d)] : 0;
                double tb = x->kind == V_W ? 0 : backward ? c->b[AT(bi, d)] : 0;
                double tw = x->kind == V_W ? c->w[AT(i, d)]
                            : x->kind == V_FULL || x->kind == V_PAIR ? c->w[AT(bi, d)] : 0;
                double start_b = t + tf;
                if (backward && bv < nv - 1) start_b = fmax(start_b, BD(bi, bv + 1));
                double done = (backward ? start_b : t + tf) + tb + tw;
                free_at[d] = done;
                if (x->kind == V_F || x->kind == V_PAIR) FD(i, v) = done;
                if (backward) BD(bi, bv) = done;
            }
    }
    for (int d = 0; d < S; d++) {
        if (pos[d] < o->n[d]) {
            end = INFINITY;
            break;
        }
        end = fmax(end, free_at[d]);
    }
out:
    free(fdone), free(bdone), free(free_at), free(pos);
    return end;
}

int v_zbv_greedy(v_orders *o, const v_costs *c)
{
    int S = o->S, m = o->m, nv = 2 * S;
    size_t cells = (size_t)(m > 0 ? m : 1) * (size_t)nv;
    double *fdone = malloc(cells * sizeof *fdone), *bdone = malloc(cells * sizeof *bdone);
    char *wdone = calloc(cells, 1);
    double *free_at = calloc((size_t)S, sizeof *free_at);
    int *held = calloc((size_t)S, sizeof *held), *next_new = calloc((size_t)S, sizeof *next_new);
    /* lo[d]: device d's first micro-batch whose two W's are not both done. Every op a device can
     * run next is of a micro-batch in [lo[d], next_new[d]): one before lo is done there, one from
     * next_new on has not begun its chunk-0 forward, which every other op of it on d follows. */
    int *lo = calloc((size_t)S, sizeof *lo);
    int *wcount = calloc(cells, sizeof *wcount), rc = 0;
    if (!fdone || !bdone || !wdone || !free_at || !held || !next_new || !lo || !wcount) {
        rc = -1;
        goto out;
    }
    for (size_t i = 0; i < cells; i++) fdone[i] = bdone[i] = -1;
    for (int d = 0; d < S; d++) o->n[d] = 0;
    for (int remaining = 3 * nv * m; remaining > 0; remaining--) {
        /* the device that can start something soonest, and what */
        int best_d = -1, best_i = 0, best_c = 0;
        v_kind best_k = V_F;
        double best_t = INFINITY;
        for (int d = 0; d < S; d++) {
            int vs[2] = {placement_vstage(PLACEMENT_V, d, 0, S),
                         placement_vstage(PLACEMENT_V, d, 1, S)};
            double t_b = INFINITY, t_f1 = INFINITY, t_f0 = INFINITY;
            int b_i = -1, b_c = 0, f1_i = -1, f0_i = -1, w_i = -1, w_c = 0;
            for (int i = lo[d]; i < next_new[d]; i++)
                for (int ch = 0; ch < 2; ch++) {
                    int v = vs[ch];
                    if (FD(i, v) >= 0 && BD(i, v) < 0) { /* its backward: after the next stage's */
                        double r = v == nv - 1 ? FD(i, v) : BD(i, v + 1);
                        if (r >= 0 && r < t_b) t_b = r, b_i = i, b_c = ch;
                    }
                    if (BD(i, v) >= 0 && !wdone[(size_t)i * (size_t)nv + (size_t)v] && w_i < 0)
                        w_i = i, w_c = ch;
                }
            for (int i = lo[d]; i < next_new[d]; i++) { /* chunk 1's forwards, in order */
                int v = vs[1];
                if (FD(i, v) < 0 && FD(i, v - 1) >= 0) {
                    t_f1 = FD(i, v - 1), f1_i = i;
                    break;
                }
            }
            int i0 = next_new[d];
            if (i0 < m && held[d] < S) { /* a new micro-batch's chunk-0 forward */
                double r = vs[0] == 0 ? 0 : FD(i0, vs[0] - 1);
                if (r >= 0) t_f0 = r, f0_i = i0;
            }
            double now = free_at[d], start = INFINITY;
            v_kind k = V_F;
            int i = 0, ch = 0;
            if (b_i >= 0 && t_b <= now) k = V_B, i = b_i, ch = b_c, start = now;
            else if (f1_i >= 0 && t_f1 <= now) i = f1_i, ch = 1, start = now;
            else if (f0_i >= 0 && t_f0 <= now) i = f0_i, start = now;
            else if (w_i >= 0) k = V_W, i = w_i, ch = w_c, start = now;
            else { /* nothing ready: the earliest of what becomes ready */
                start = fmin(t_b, fmin(t_f1, t_f0));
                if (!isfinite(start)) continue;
                if (start == t_b) k = V_B, i = b_i, ch = b_c;
                else if (start == t_f1) i = f1_i, ch = 1;
                else i = f0_i;
            }
            if (start < best_t) best_t = start, best_d = d, best_k = k, best_i = i, best_c = ch;
        }
        if (best_d < 0) {
            rc = -2;
            break;
        }
        int d = best_d, i = best_i, v = placement_vstage(PLACEMENT_V, d, best_c, S);
        double dur = best_k == V_F ? c->f[AT(i, d)] : best_k == V_B ? c->b[AT(i, d)] : c->w[AT(i, d)];
        double end = best_t + fmax(dur, 0);
        free_at[d] = end;
        if (best_k == V_F) {
            FD(i, v) = end;
            if (best_c == 0) held[d]++, next_new[d]++;
        } else if (best_k == V_B) {
            BD(i, v) = end;
        } else {
            wdone[(size_t)i * (size_t)nv + (size_t)v] = 1;
            if (++wcount[AT(i, d)] == 2) held[d]--; /* both chunks' W */
            while (lo[d] < m && wcount[AT(lo[d], d)] == 2) lo[d]++;
        }
        put(o, d, best_k, i, best_c, 0, 0);
    }
out:
    free(fdone), free(bdone), free(wdone), free(free_at), free(held), free(next_new), free(lo);
    free(wcount);
    return rc;
}
#undef FD
#undef BD
#undef AT
