#include "schedule.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/comm.h"
#include "plan_machine.h"
#include "v_orders.h"

int64_t schedule_act_bytes(const stage_model *sm, const plan_mb *m, int v)
{
    int nv = sm->pp * sm->chunks;
    return comm_transfer_bytes(&sm->cm->model, v, nv, m->mbs, m->enc_len, m->dec_len);
}

/* Emits the instructions of one rank. */
typedef struct emitter {
    const stage_model *sm;
    plan_iter *it;
    plan_rank *R;
    int nv;
    dp_status st;
    int extra_warmup; /* interleaved: forwards beyond Megatron's warm-up count */
} emitter;

static void push(emitter *e, plan_op op, int k, int c, int peer, int64_t bytes)
{
    if (e->st == DP_OK && plan_rank_push(e->R, op, k, c, peer, bytes) != DP_OK)
        e->st = DP_ERR_NOMEM;
}

/* The device of virtual stage v, and the virtual stage of chunk c on this rank's device, as the
 * stage model places them (placement.h: a loop or a V). */
static int device_of(const emitter *e, int v)
{
    return placement_device(e->sm->placement, v, e->sm->pp);
}

static int vstage_of(const emitter *e, int c)
{
    return placement_vstage(e->sm->placement, e->R->stage, c, e->sm->pp);
}

static void em_fwd(emitter *e, int k, int c)
{
    int v = vstage_of(e, c);
    const plan_mb *m = &e->it->mb[k];
    if (v > 0) push(e, OP_RECV_ACT, k, c, device_of(e, v - 1), schedule_act_bytes(e->sm, m, v - 1));
    push(e, OP_F, k, c, -1, 0);
    if (v < e->nv - 1) push(e, OP_SEND_ACT, k, c, device_of(e, v + 1), schedule_act_bytes(e->sm, m, v));
}

/* The backward's input-gradient part and its send; FREE follows unless a W comes later. */
static void em_b(emitter *e, int k, int c, int then_free)
{
    int v = vstage_of(e, c);
    const plan_mb *m = &e->it->mb[k];
    if (v < e->nv - 1) push(e, OP_RECV_GRAD, k, c, device_of(e, v + 1), schedule_act_bytes(e->sm, m, v));
    push(e, OP_B, k, c, -1, 0);
    if (v > 0) push(e, OP_SEND_GRAD, k, c, device_of(e, v - 1), schedule_act_bytes(e->sm, m, v - 1));
    if (then_free) push(e, OP_FREE, k, c, -1, 0);
}

static void em_bwd(emitter *e, int k, int c)
{
    em_b(e, k, c, 1);
}

/* W reads the layer inputs and output gradients that the slot holds, so the slot is freed after
 * it (plan_machine.h): ZB-H1 holds a micro-batch from its F to its W. */
static void em_w(emitter *e, int k, int c)
{
    push(e, OP_W, k, c, -1, 0);
    push(e, OP_FREE, k, c, -1, 0);
}

/* Whether micro-batch k's backward reruns its whole forward (full recompute: its own mode, the
 * iteration's, else the stage model's, as pm_recompute reads a plan): a schedule that splits the
 * backward leaves its slot whole, the weight gradients in its B (plan_machine.h, rule
 * "recompute"), and runs no W for it. */
static int whole_backward(const stage_model *sm, const plan_iter *it, int k)
{
    int fallback = sm ? (int)sm->cm->recompute : RECOMPUTE_NONE;
    return pm_recompute_or(it, k, fallback) == RECOMPUTE_FULL;
}

/* The weight-gradient time a split schedule leaves to micro-batch k's W on stage s: none where
 * it keeps the slot whole (the closed forms read a planned iteration, whose modes it names). */
static double split_w_ms(const plan_iter *it, int k, int s)
{
    return whole_backward(NULL, it, k) ? 0 : it->mb[k].w_ms[s];
}

static int keeps_whole(const emitter *e, int k)
{
    return whole_backward(e->sm, e->it, k);
}

/* A split schedule's B and W of micro-batch k: the B alone, its W later; or, where k keeps whole,
 * the whole backward at the B and nothing at the W. */
static void em_b_split(emitter *e, int k, int c)
{
    if (keeps_whole(e, k)) em_bwd(e, k, c);
    else em_b(e, k, c, 0);
}

static void em_w_split(emitter *e, int k, int c)
{
    if (!keeps_whole(e, k)) em_w(e, k, c);
}

/* The micro-batches of replica r, in plan order. Returns their count; *list is malloc'd. */
static int replica_mbs(const plan_iter *it, int r, int **list)
{
    *list = malloc((size_t)(it->n_mb ? it->n_mb : 1) * sizeof **list);
    if (!*list) return -1;
    int m = 0;
    for (int k = 0; k < it->n_mb; k++)
        if (it->mb[k].replica == r) (*list)[m++] = k;
    return m;
}

/* Whether receive x on `stage` is the one that `send` (issued by the peer) delivers. */
static int delivers(const plan_instr *send, int peer_stage, const plan_instr *x, int pp,
                    placement_kind k)
{
    int v = placement_vstage(k, peer_stage, send->chunk, pp), act = send->op == OP_SEND_ACT;
    int to = v + (act ? 1 : -1);
    return x->op == (act ? OP_RECV_ACT : OP_RECV_GRAD) && x->mb == send->mb && x->chunk == to / pp;
}

/* Posts every stage's receives from each peer in the order the peer sends them. With two stages
 * and several chunks one link carries both activations and gradients, and the interleaved order
 * can consume them in another order than they were sent (a gradient sent before an activation is
 * needed after it). A receive that comes too late is hoisted to just before the receive that
 * needed it first: receives are posts, so this adds no wait, and every link stays in order (what
 * plan_validate requires, like NCCL's in-order point-to-point). */
static dp_status order_receives(plan_iter *it, int replica, int pp)
{
    for (int s = 0; s < pp; s++) {
        plan_rank *R = &it->ranks[replica * pp + s];
        plan_instr *out = malloc((size_t)(R->n ? R->n : 1) * sizeof *out);
        char *done = calloc((size_t)(R->n ? R->n : 1), 1);
        int *next_send = calloc((size_t)pp, sizeof *next_send);
        if (!out || !done || !next_send) {
            free(out), free(done), free(next_send);
            return DP_ERR_NOMEM;
        }
        int n = 0;
        for (int i = 0; i < R->n; i++) {
            const plan_instr *x = &R->ins[i];
            int is_recv = x->op == OP_RECV_ACT || x->op == OP_RECV_GRAD;
            if (!is_recv) {
                out[n++] = *x;
                continue;
            }
            if (done[i]) continue;
            /* emit the peer's sends to s in order, up to the one that delivers x */
            const plan_rank *P = &it->ranks[replica * pp + x->peer];
            int *j = &next_send[x->peer], found = 0;
            while (!found && *j < P->n) {
                const plan_instr *snd = &P->ins[(*j)++];
                if ((snd->op != OP_SEND_ACT && snd->op != OP_SEND_GRAD) || snd->peer != s) continue;
                for (int k = i; k < R->n; k++)
                    if (!done[k] && R->ins[k].peer == x->peer &&
                        delivers(snd, x->peer, &R->ins[k], pp, (placement_kind)it->placement)) {
                        done[k] = 1, out[n++] = R->ins[k];
                        found = k == i;
                        break;
                    }
            }
            if (!done[i]) done[i] = 1, out[n++] = *x; /* no matching send: the validator says so */
        }
        if (n) memcpy(R->ins, out, (size_t)n * sizeof *out); /* a replica may get no micro-batch */
        R->n = n;
        free(out), free(done), free(next_send);
    }
    return DP_OK;
}

typedef void (*rank_builder)(emitter *e, const int *mbs, int m);

/* Runs build for every rank of every replica. */
static dp_status for_each_rank_warm(const schedule_ctx *ctx, plan_iter *it, rank_builder build,
                                    int extra_warmup, dp_err *err)
{
    const stage_model *sm = ctx->sm;
    for (int r = 0; r < it->dp; r++) {
        int *mbs, m = replica_mbs(it, r, &mbs);
        if (m < 0) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
        for (int s = 0; s < sm->pp; s++) {
            emitter e = {sm, it, &it->ranks[r * sm->pp + s], sm->pp * sm->chunks, DP_OK,
                         extra_warmup};
            e.R->n = 0;
            build(&e, mbs, m);
            if (e.st != DP_OK) {
                free(mbs);
                return dp_fail(err, e.st, "out of memory");
            }
        }
        free(mbs);
        if (order_receives(it, r, sm->pp) != DP_OK) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    return DP_OK;
}

static dp_status for_each_rank(const schedule_ctx *ctx, plan_iter *it, rank_builder build,
                               dp_err *err)
{
    return for_each_rank_warm(ctx, it, build, 0, err);
}

static dp_status need_one_chunk(const schedule_ctx *ctx, const char *name, dp_err *err)
{
    if (ctx->sm->chunks != 1)
        return dp_fail(err, DP_ERR_INVALID,
                       "--chunks %d applies to the interleaved schedule, not %s", ctx->sm->chunks,
                       name);
    return DP_OK;
}

/* ---- gpipe ---------------------------------------------------------------------------------- */

static void gpipe_rank(emitter *e, const int *mbs, int m)
{
    for (int i = 0; i < m; i++) em_fwd(e, mbs[i], 0);
    for (int i = m - 1; i >= 0; i--) em_bwd(e, mbs[i], 0);
}

static dp_status build_gpipe(const schedule_ctx *ctx, plan_iter *it, dp_err *err)
{
    dp_status st = need_one_chunk(ctx, "gpipe", err);
    return st != DP_OK ? st : for_each_rank(ctx, it, gpipe_rank, err);
}

/* ---- 1f1b ----------------------------------------------------------------------------------- */

/* The warm-up forwards of a device whose schedule's rule asks `rule`, under the stage model's
 * --warmup cap (stage_model.warmup), and at most the n there are. */
static int warmup_of(const stage_model *sm, int rule, int n)
{
    int w = sm->warmup > 0 && sm->warmup < rule ? sm->warmup : rule;
    return w < n ? w : n;
}

static void onef1b_rank(emitter *e, const int *mbs, int m)
{
    int S = e->sm->pp, s = e->R->stage;
    int w = warmup_of(e->sm, S - s - 1, m);
    for (int i = 0; i < w; i++) em_fwd(e, mbs[i], 0);
    for (int i = 0; i < m - w; i++) {
        em_fwd(e, mbs[w + i], 0);
        em_bwd(e, mbs[i], 0);
    }
    for (int i = m - w; i < m; i++) em_bwd(e, mbs[i], 0);
}

static dp_status build_1f1b(const schedule_ctx *ctx, plan_iter *it, dp_err *err)
{
    dp_status st = need_one_chunk(ctx, "1f1b", err);
    return st != DP_OK ? st : for_each_rank(ctx, it, onef1b_rank, err);
}

/* ---- zb1 ------------------------------------------------------------------------------------ */

static void zb1_rank(emitter *e, const int *mbs, int m)
{
    int S = e->sm->pp, s = e->R->stage;
    int w = S - s - 1 < m ? S - s - 1 : m;
    /* Stage s keeps s W's back: at the end each stage's last B waits for the next stage's, so
     * later stages need more W's left to fill that wait (stage S-1 keeps S-1). */
    int defer = s;
    int next_w = 0;
    for (int i = 0; i < w; i++) em_fwd(e, mbs[i], 0);
    for (int i = 0; i < m - w; i++) {
        em_fwd(e, mbs[w + i], 0);
        em_b_split(e, mbs[i], 0);
        if (i + 1 - next_w > defer) em_w_split(e, mbs[next_w++], 0);
    }
    for (int i = m - w; i < m; i++) {
        em_b_split(e, mbs[i], 0);
        if (next_w < i + 1) em_w_split(e, mbs[next_w++], 0); /* fill the wait for the next gradient */
    }
    while (next_w < m) em_w_split(e, mbs[next_w++], 0);
}

static dp_status build_zb1(const schedule_ctx *ctx, plan_iter *it, dp_err *err)
{
    dp_status st = need_one_chunk(ctx, "zb1", err);
    return st != DP_OK ? st : for_each_rank(ctx, it, zb1_rank, err);
}

/* ---- interleaved ---------------------------------------------------------------------------- */

static void interleaved_rank(emitter *e, const int *mbs, int m)
{
    int S = e->sm->pp, C = e->sm->chunks, s = e->R->stage, n = m * C;
    int *fk = malloc((size_t)(n ? n : 1) * sizeof *fk), *fc = malloc((size_t)(n ? n : 1) * sizeof *fc);
    int *bk = malloc((size_t)(n ? n : 1) * sizeof *bk), *bc = malloc((size_t)(n ? n : 1) * sizeof *bc);
    if (!fk || !fc || !bk || !bc) {
        e->st = DP_ERR_NOMEM;
        goto out;
    }
    /* Groups of S micro-batches go through chunks 0..C-1 forward, C-1..0 backward. */
    int q = 0;
    for (int g = 0; g < m; g += S) {
        int size = m - g < S ? m - g : S;
        for (int c = 0; c < C; c++)
            for (int i = 0; i < size; i++, q++) {
                fk[q] = mbs[g + i], fc[q] = c;
                bk[q] = mbs[g + i], bc[q] = C - 1 - c;
            }
    }
    int w = warmup_of(e->sm, (S - s - 1) * 2 + (C - 1) * S + e->extra_warmup, n);
    for (int i = 0; i < w; i++) em_fwd(e, fk[i], fc[i]);
    for (int i = 0; i < n - w; i++) {
        em_fwd(e, fk[w + i], fc[w + i]);
        em_bwd(e, bk[i], bc[i]);
    }
    for (int i = n - w; i < n; i++) em_bwd(e, bk[i], bc[i]);
out:
    free(fk), free(fc), free(bk), free(bc);
}

/* Megatron's warm-up assumes m a multiple of S; with a short last group some stages can wait on
 * each other (S 4, C 3, m 5 does). Then every stage warms up one forward more, until the plan
 * runs: at worst all forwards first, an order that cannot deadlock. Under a --warmup cap the
 * extra forwards stop at the cap; a capped order that still deadlocks is refused. */
static dp_status build_interleaved(const schedule_ctx *ctx, plan_iter *it, dp_err *err)
{
    const stage_model *sm = ctx->sm;
    int S = sm->pp, C = sm->chunks, most = 0; /* the largest replica's micro-batches */
    int *per = dp_xcalloc((size_t)(it->dp > 0 ? it->dp : 1), sizeof *per);
    for (int k = 0; k < it->n_mb; k++)
        if (++per[it->mb[k].replica] > most) most = per[it->mb[k].replica];
    free(per);
    /* a device runs every chunk of its first micro-batch forward before that one's first backward
     * (chunk C - 1): the forwards of the C - 1 chunks of the first group before it */
    int least = (C - 1) * (most < S ? most : S);
    if (sm->warmup > 0 && sm->warmup < least)
        return dp_fail(err, DP_ERR_INVALID, "--warmup %d is below what the interleaved schedule "
                       "needs here, %d forwards: (chunks - 1) x min(stages, micro-batches) = "
                       "%d x %d, every chunk of a device's first micro-batch before its first "
                       "backward", sm->warmup, least, C - 1, most < S ? most : S);
    for (int extra = 0;; extra++) {
        dp_status st = for_each_rank_warm(ctx, it, interleaved_rank, extra, err);
        if (st != DP_OK) return st;
        dp_err probe = {0};
        int capped = sm->warmup > 0 && sm->warmup <= (S - 1) * 2 + (C - 1) * S + extra;
        if (extra >= it->n_mb * C || plan_validate(it, C, "interleaved", &probe) != DP_ERR_DEADLOCK)
            return DP_OK;
        if (capped) /* more warm-up is what it would take, and the cap forbids it */
            return dp_fail(err, DP_ERR_INFEASIBLE, "--warmup %d: the interleaved schedule of %d "
                           "micro-batches on %d stages x %d chunks deadlocks with so few warm-up "
                           "forwards\nhint: a larger --warmup, or 1f1b", sm->warmup,
                           it->n_mb / (it->dp > 0 ? it->dp : 1), S, C);
    }
}

/* ---- adaptive (DynaPipe) --------------------------------------------------------------------- */

/* A min-heap of (key, i), ties to the lower i: the adaptive pass's queues. */
typedef struct op_heap {
    double *key;
    int *id;
    int n;
} op_heap;

static int heap_before(const op_heap *h, int x, int y)
{
    return h->key[x] < h->key[y] || (h->key[x] == h->key[y] && h->id[x] < h->id[y]);
}

static void heap_swap(op_heap *h, int x, int y)
{
    double k = h->key[x];
    h->key[x] = h->key[y], h->key[y] = k;
    int i = h->id[x];
    h->id[x] = h->id[y], h->id[y] = i;
}

static void heap_push(op_heap *h, double key, int id)
{
    int c = h->n++;
    h->key[c] = key, h->id[c] = id;
    while (c > 0 && heap_before(h, c, (c - 1) / 2)) heap_swap(h, c, (c - 1) / 2), c = (c - 1) / 2;
}

static void heap_pop(op_heap *h)
{
    h->n--;
    heap_swap(h, 0, h->n);
    for (int c = 0;;) {
        int l = 2 * c + 1, best = c;
        if (l < h->n && heap_before(h, l, best)) best = l;
        if (l + 1 < h->n && heap_before(h, l + 1, best)) best = l + 1;
        if (best == c) break;
        heap_swap(h, c, best), c = best;
    }
}

/* The cyclic pass: in each round every device runs at most one op, seeing only what its
 * neighbours finished in earlier rounds. Backwards first (the one whose gradient came first,
 * ties to the earlier micro-batch); otherwise the next forward in order if its input is there
 * and its peak fits next to the activations the device holds (an empty device always admits, so
 * the pass cannot stall). Per device two heaps keep it O(S m log m): the backwards whose
 * gradient has come, by arrival round; the held micro-batches by transient, largest first
 * (entries whose backward ran are dropped when they surface). The m micro-batches' memory on each
 * device: stored[i * S + s] and peak[i * S + s], MB. */
static void adaptive_rank_orders(const stage_model *sm, const double *stored, const double *peak,
                                 int m, int *op_kind, int *op_mb, dp_status *st)
{
    int S = sm->pp;
    size_t cells = (size_t)S * (size_t)(m ? m : 1);
    int *fdone = malloc(cells * sizeof *fdone), *bdone = malloc(cells * sizeof *bdone);
    int *nextf = calloc((size_t)S, sizeof *nextf), *nops = calloc((size_t)S, sizeof *nops);
    double *held = calloc((size_t)S, sizeof *held), *hkey = malloc(2 * cells * sizeof *hkey);
    int *heldn = calloc((size_t)S, sizeof *heldn), *hid = malloc(2 * cells * sizeof *hid);
    op_heap *ready = calloc((size_t)S, sizeof *ready), *trans = calloc((size_t)S, sizeof *trans);
    if (!fdone || !bdone || !nextf || !nops || !held || !heldn || !hkey || !hid || !ready ||
        !trans) {
        *st = DP_ERR_NOMEM;
        goto out;
    }
    for (size_t i = 0; i < cells; i++) fdone[i] = bdone[i] = -1;
    for (int s = 0; s < S; s++) {
        size_t base = (size_t)s * 2 * (size_t)(m ? m : 1);
        ready[s] = (op_heap){hkey + base, hid + base, 0};
        trans[s] = (op_heap){hkey + base + (size_t)(m ? m : 1), hid + base + (size_t)(m ? m : 1), 0};
    }
#define FD(s, i) fdone[(size_t)(s) * (size_t)m + (size_t)(i)]
#define BD(s, i) bdone[(size_t)(s) * (size_t)m + (size_t)(i)]
    int remaining = 2 * S * m;
    for (int t = 0; remaining > 0 && t < 8 * S * m + 16; t++) {
        for (int s = 0; s < S; s++) {
            int *kind = op_kind + (size_t)s * 2 * (size_t)m, *mbk = op_mb + (size_t)s * 2 * (size_t)m;
            /* backward whose gradient arrived first (in an earlier round) */
            if (ready[s].n > 0 && ready[s].key[0] < t) {
                int best = ready[s].id[0];
                heap_pop(&ready[s]);
                BD(s, best) = t;
                if (s > 0) heap_push(&ready[s - 1], t, best);
                held[s] -= stored[(size_t)best * S + s];
                heldn[s]--;
                kind[nops[s]] = 1, mbk[nops[s]++] = best;
                remaining--;
                continue;
            }
            int i = nextf[s];
            if (i >= m) continue;
            if (s > 0 && (FD(s - 1, i) < 0 || FD(s - 1, i) >= t)) continue;
            /* admitted only if every op that can run while it is held fits: the held stored
             * activations plus the largest transient among them (stage_cost.h) */
            double xs = stored[(size_t)i * S + s], xp = peak[(size_t)i * S + s];
            double tx = fmax(0, xp - xs), tmax = tx;
            while (trans[s].n > 0 && BD(s, trans[s].id[0]) >= 0) heap_pop(&trans[s]);
            if (trans[s].n > 0) tmax = fmax(tmax, -trans[s].key[0]);
            if (heldn[s] > 0 && held[s] + xs + tmax > sm->budget_mb[s]) continue;
            FD(s, i) = t;
            if (s == S - 1) heap_push(&ready[s], t, i);
            heap_push(&trans[s], -(xp - xs), i);
            held[s] += xs;
            heldn[s]++;
            nextf[s]++;
            kind[nops[s]] = 0, mbk[nops[s]++] = i;
            remaining--;
        }
    }
    if (remaining > 0) *st = DP_ERR_DEADLOCK;
#undef FD
#undef BD
out:
    free(fdone), free(bdone), free(nextf), free(nops), free(held), free(heldn);
    free(hkey), free(hid), free(ready), free(trans);
}

/* The memory the cyclic pass sees for replica r's m micro-batches (their indices mbs), into
 * stored and peak (m x S each): each position's own; or, where the replicas run in lockstep
 * (every replica as many micro-batches), the most any replica's micro-batch at that position
 * holds, so that one order, laid out once, fits every replica and gives them all the same passes
 * (plan.h plan_iter_check_lockstep). */
static void adaptive_memory(const stage_model *sm, const plan_iter *it, int **mbs, int m,
                            int r, int together, double *stored, double *peak)
{
    int S = sm->pp;
    for (int q = 0; q < m; q++)
        for (int s = 0; s < S; s++) {
            size_t at = (size_t)q * S + s;
            stored[at] = peak[at] = 0;
            for (int x = together ? 0 : r; x < (together ? it->dp : r + 1); x++) {
                const plan_mb *b = &it->mb[mbs[x][q]];
                stored[at] = fmax(stored[at], b->stored_mb[s]);
                peak[at] = fmax(peak[at], b->peak_mb[s]);
            }
        }
}

static dp_status build_adaptive(const schedule_ctx *ctx, plan_iter *it, dp_err *err)
{
    const stage_model *sm = ctx->sm;
    dp_status st = need_one_chunk(ctx, "adaptive", err);
    if (st != DP_OK) return st;
    int D = it->dp, S = sm->pp;
    int **mbs = calloc((size_t)D, sizeof *mbs), *m = calloc((size_t)D, sizeof *m);
    st = mbs && m ? DP_OK : DP_ERR_NOMEM;
    int together = st == DP_OK && D > 1 &&
                   mb_replicas_lockstep(sm->zero_stage, D, stage_experts_span(sm));
    for (int r = 0; r < D && st == DP_OK; r++)
        if ((m[r] = replica_mbs(it, r, &mbs[r])) < 0) st = DP_ERR_NOMEM;
        else together &= m[r] == m[0];
    int *kind = NULL, *mb = NULL;
    double *stored = NULL, *peak = NULL;
    for (int r = 0; r < D && st == DP_OK; r++) {
        int n_r = m[r];
        size_t cells = (size_t)S * (size_t)(n_r ? n_r : 1), n = 2 * cells;
        if (r == 0 || !together) { /* in lockstep the first replica's order is every replica's */
            free(kind), free(mb), free(stored), free(peak);
            kind = malloc(n * sizeof *kind), mb = malloc(n * sizeof *mb);
            stored = malloc(cells * sizeof *stored), peak = malloc(cells * sizeof *peak);
            if (!kind || !mb || !stored || !peak) {
                st = DP_ERR_NOMEM;
                break;
            }
            adaptive_memory(sm, it, mbs, n_r, r, together, stored, peak);
            adaptive_rank_orders(sm, stored, peak, n_r, kind, mb, &st);
        }
        for (int s = 0; s < S && st == DP_OK; s++) {
            emitter e = {sm, it, &it->ranks[r * S + s], S, DP_OK, 0};
            e.R->n = 0;
            for (int q = 0; q < 2 * n_r; q++) {
                int k = mbs[r][mb[(size_t)s * 2 * (size_t)n_r + (size_t)q]];
                if (kind[(size_t)s * 2 * (size_t)n_r + (size_t)q]) em_bwd(&e, k, 0);
                else em_fwd(&e, k, 0);
            }
            st = e.st;
        }
    }
    free(kind), free(mb), free(stored), free(peak);
    for (int r = 0; mbs && r < D; r++) free(mbs[r]);
    free(mbs), free(m);
    if (st == DP_ERR_NOMEM) return dp_fail(err, st, "out of memory");
    if (st == DP_ERR_DEADLOCK)
        return dp_fail(err, st, "iteration %d: the adaptive schedule's cyclic pass did not finish",
                       it->id);
    return st;
}

/* ---- the V schedules: zbv, dualpipev (their orders: v_orders.h) ---------------------------- */

/* A whole backward at once: B and W, then the gradient's send (autograd's backward). */
static void em_full(emitter *e, int k, int c)
{
    int v = vstage_of(e, c);
    const plan_mb *m = &e->it->mb[k];
    if (v < e->nv - 1) push(e, OP_RECV_GRAD, k, c, device_of(e, v + 1), schedule_act_bytes(e->sm, m, v));
    push(e, OP_B, k, c, -1, 0);
    if (!keeps_whole(e, k)) push(e, OP_W, k, c, -1, 0);
    if (v > 0) push(e, OP_SEND_GRAD, k, c, device_of(e, v - 1), schedule_act_bytes(e->sm, m, v - 1));
    push(e, OP_FREE, k, c, -1, 0);
}

/* DualPipe's F&B: micro-batch kf's forward on chunk cf overlapped with kb's whole backward on
 * cb. The device runs them back to back and both results leave at the end (the sends after the
 * W), as an overlapped pair delivers them. */
static void em_pair(emitter *e, int kf, int cf, int kb, int cb)
{
    int split = !keeps_whole(e, kb); /* its W inside the B otherwise */
    int vf = vstage_of(e, cf), vb = vstage_of(e, cb);
    const plan_mb *mf = &e->it->mb[kf], *mb = &e->it->mb[kb];
    if (vf > 0)
        push(e, OP_RECV_ACT, kf, cf, device_of(e, vf - 1), schedule_act_bytes(e->sm, mf, vf - 1));
    push(e, OP_F, kf, cf, -1, 0);
    if (vb < e->nv - 1)
        push(e, OP_RECV_GRAD, kb, cb, device_of(e, vb + 1), schedule_act_bytes(e->sm, mb, vb));
    push(e, OP_B, kb, cb, -1, 0);
    if (split) push(e, OP_W, kb, cb, -1, 0);
    if (vf < e->nv - 1)
        push(e, OP_SEND_ACT, kf, cf, device_of(e, vf + 1), schedule_act_bytes(e->sm, mf, vf));
    if (vb > 0) push(e, OP_SEND_GRAD, kb, cb, device_of(e, vb - 1), schedule_act_bytes(e->sm, mb, vb - 1));
    push(e, OP_FREE, kb, cb, -1, 0);
}

/* ZB-V: the published order or the greedy one, whichever the plan's costs finish first (with
 * equal micro-batches the published one where the greedy idles more). 0, -1 out of memory, -2
 * nothing could run. */
static int zbv_order(v_orders *o, const v_costs *c)
{
    v_orders pub;
    if (v_orders_alloc(&pub, o->S, o->m) != 0) return -1;
    v_zbv_published(&pub);
    int rc = v_zbv_greedy(o, c);
    if (rc == 0 && v_orders_ms(&pub, c) < v_orders_ms(o, c)) {
        v_orders greedy = *o;
        *o = pub, pub = greedy;
    }
    v_orders_free(&pub);
    return rc;
}

static int dualpipev_order(v_orders *o, const v_costs *c)
{
    (void)c; /* a fixed order, whatever the costs */
    return v_dualpipev(o);
}

/* Every replica's ranks from the order that `order` lays out for its micro-batches. */
static dp_status build_v(const schedule_ctx *ctx, plan_iter *it, const char *name,
                         int (*order)(v_orders *o, const v_costs *c), dp_err *err)
{
    const stage_model *sm = ctx->sm;
    if (sm->chunks != 2 || sm->placement != PLACEMENT_V)
        return dp_fail(err, DP_ERR_INVALID, "--schedule %s runs 2 chunks per device in a V "
                       "(got %d chunks%s)", name, sm->chunks,
                       sm->placement == PLACEMENT_V ? "" : ", a loop");
    int S = sm->pp;
    dp_status st = DP_OK;
    for (int r = 0; r < it->dp && st == DP_OK; r++) {
        int *mbs, m = replica_mbs(it, r, &mbs);
        if (m < 0) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
        size_t n = (size_t)(m ? m : 1) * (size_t)S;
        double *t = malloc(3 * n * sizeof *t);
        v_orders o;
        if (!t || v_orders_alloc(&o, S, m) != 0) {
            free(t), free(mbs);
            return dp_fail(err, DP_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < m; i++)
            for (int d = 0; d < S; d++) {
                const plan_mb *x = &it->mb[mbs[i]];
                size_t at = (size_t)i * (size_t)S + (size_t)d;
                double w = whole_backward(sm, it, mbs[i]) ? 0 : x->w_ms[d]; /* W inside B */
                t[at] = x->fwd_ms[d] / 2;
                t[n + at] = (x->bwd_ms[d] - w) / 2;
                t[2 * n + at] = w / 2;
            }
        v_costs c = {t, t + n, t + 2 * n};
        int rc = order(&o, &c);
        if (rc != 0) st = rc == -2 ? DP_ERR_DEADLOCK : DP_ERR_NOMEM;
        for (int s = 0; s < S && st == DP_OK; s++) {
            emitter e = {sm, it, &it->ranks[r * S + s], S * sm->chunks, DP_OK, 0};
            e.R->n = 0;
            for (int q = 0; q < o.n[s]; q++) {
                const v_op *x = &o.ops[(size_t)s * (size_t)o.cap + (size_t)q];
                int k = mbs[x->mb];
                switch (x->kind) {
                case V_F: em_fwd(&e, k, x->chunk); break;
                case V_B: em_b_split(&e, k, x->chunk); break;
                case V_W: em_w_split(&e, k, x->chunk); break;
                case V_FULL: em_full(&e, k, x->chunk); break;
                case V_PAIR: em_pair(&e, k, x->chunk, mbs[x->mb2], x->chunk2); break;
                }
            }
            st = e.st;
        }
        v_orders_free(&o);
        free(t), free(mbs);
        if (st == DP_OK && order_receives(it, r, S) != DP_OK) st = DP_ERR_NOMEM;
    }
    if (st == DP_ERR_DEADLOCK)
        return dp_fail(err, st, "iteration %d: the %s pass found nothing to run", it->id, name);
    return st == DP_ERR_NOMEM ? dp_fail(err, st, "out of memory") : st;
}

static dp_status build_zbv(const schedule_ctx *ctx, plan_iter *it, dp_err *err)
{
    return build_v(ctx, it, "zbv", zbv_order, err);
}

static dp_status build_dualpipev(const schedule_ctx *ctx, plan_iter *it, dp_err *err)
{
    return build_v(ctx, it, "dualpipev", dualpipev_order, err);
}

/* ---- what each holds (schedule.h) ----------------------------------------------------------- */

/* Each: what device s of S holds with C chunks whose warm-up is w forwards (warmup_of; the
 * schedules that do not warm up ignore it). */
static double holds_pipeline(int S, int C, int s, const stage_model *sm)
{
    (void)C, (void)s, (void)sm;
    return S;
}

static double holds_1f1b(int S, int C, int s, const stage_model *sm)
{
    (void)C;
    return warmup_of(sm, S - s - 1, S) + 1;
}

static double holds_interleaved(int S, int C, int s, const stage_model *sm)
{
    int rule = (S - s - 1) * 2 + (C - 1) * S;
    return (warmup_of(sm, rule, rule) + 1) / (double)C;
}

/* DualPipeV: 2S + 1 chunk activations (the DualPipe table's PP + 1), half a micro-batch each */
static double holds_dualpipev(int S, int C, int s, const stage_model *sm)
{
    (void)C, (void)s, (void)sm;
    return S + 0.5;
}

static double holds_one(int S, int C, int s, const stage_model *sm)
{
    (void)S, (void)C, (void)s, (void)sm;
    return 1;
}

void schedule_mem_rule(const schedule *sc, const stage_model *sm, double scale, mem_rule *rule)
{
    mem_rule_uniform(rule, sm->pp, 1);
    rule->scale = scale;
    for (int s = 0; s < sm->pp; s++) rule->holds[s] = sc->holds(sm->pp, sm->chunks, s, sm);
}

/* ---- closed forms (schedule.h) ------------------------------------------------------------- */

double schedule_time_lower_bound(const schedule *sc, const plan_iter *it, int S, int C)
{
    /* per (replica, stage), in one pass over the micro-batches: busy time, cheapest forward and
     * backward; per replica, its micro-batch count */
    size_t cells = (size_t)it->dp * (size_t)S;
    double *busy = dp_xcalloc(3 * cells, sizeof *busy), *fmin = busy + cells, *bmin = fmin + cells;
    int *m = dp_xcalloc((size_t)it->dp, sizeof *m);
    for (size_t c = 0; c < cells; c++) fmin[c] = bmin[c] = INFINITY;
    for (int k = 0; k < it->n_mb; k++) {
        const plan_mb *x = &it->mb[k];
        size_t at = (size_t)x->replica * (size_t)S;
        m[x->replica]++;
        for (int s = 0; s < S; s++) { /* a MoE's exchange left out: a pair may hide it */
            double f = x->fwd_ms[s] - x->xfwd_ms[s], b = x->bwd_ms[s] - x->xbwd_ms[s];
            busy[at + s] += f + b;
            fmin[at + s] = fmin[at + s] < f ? fmin[at + s] : f;
            bmin[at + s] = bmin[at + s] < b ? bmin[at + s] : b;
        }
    }
    double best = 0;
    for (int rep = 0; rep < it->dp; rep++) {
        double fill = 0, drain = 0;
        for (int s = 0; s < S && m[rep] > 0; s++) {
            size_t at = (size_t)rep * (size_t)S + (size_t)s;
            /* the simulator rounds each op to whole ns: a ns per op of slack */
            double t = fill + busy[at] + (sc->splits_backward ? 0 : drain) -
                       1e-6 * (3.0 * C * m[rep] + S);
            best = t > best ? t : best;
            fill += fmin[at] / C, drain += bmin[at] / C;
        }
    }
    free(busy), free(m);
    return best;
}

/* sum_k t_k + (S-1) max_k u_k / C over replica rep's micro-batches, u_k = the schedule's bubble
 * unit of micro-batch k (zb: f + b - 2w per stage, else f + b; max over stages). */
static double closed_form_of(const plan_iter *it, int rep, int S, int C, int zb, double *bubble_ms)
{
    double sum = 0, unit = 0;
    for (int k = 0; k < it->n_mb; k++) {
        const plan_mb *m = &it->mb[k];
        if (m->replica != rep) continue;
        double t = 0, u = 0;
        for (int s = 0; s < S; s++) {
            t = fmax(t, m->fwd_ms[s] + m->bwd_ms[s]);
            u = fmax(u, zb ? m->fwd_ms[s] + m->bwd_ms[s] - 2 * split_w_ms(it, k, s)
                           : m->fwd_ms[s] + m->bwd_ms[s]);
        }
        sum += t, unit = fmax(unit, u);
    }
    *bubble_ms = (S - 1) * unit / C;
    return sum + *bubble_ms;
}

static double closed_form_1f1b(const plan_iter *it, int rep, int S, int C, double *bubble_ms)
{
    return closed_form_of(it, rep, S, C, 0, bubble_ms);
}

/* ZB-H1's bubble (the Zero Bubble paper, §3): with at least S micro-batches the W passes fill
 * (S - 1)(f + b - 2w) of 1F1B's; with fewer there are not W enough to fill it, and the form does
 * not hold: NAN (the caller prints none). */
static double closed_form_zb(const plan_iter *it, int rep, int S, int C, double *bubble_ms)
{
    int m = 0;
    for (int k = 0; k < it->n_mb; k++) m += it->mb[k].replica == rep;
    if (m < S) return *bubble_ms = NAN;
    return closed_form_of(it, rep, S, C, 1, bubble_ms);
}

/* ZB-V (the ZB paper §6): where a chunk's forward, input gradients and weight gradients take the
 * same time on every stage (its condition) and a replica has at least 2S - 1 micro-batches, no
 * device idles after its first op: sum t + the V's fill, (S - 1) chunk forwards. The paper gives
 * no form otherwise: NAN. */
static double closed_form_zbv(const plan_iter *it, int rep, int S, int C, double *bubble_ms)
{
    int m = 0, equal = 1;
    double sum = 0, fill = 0;
    for (int k = 0; k < it->n_mb; k++) {
        const plan_mb *x = &it->mb[k];
        if (x->replica != rep) continue;
        double t = 0;
        for (int s = 0; s < S; s++) {
            double w = split_w_ms(it, k, s), f = x->fwd_ms[s], b = x->bwd_ms[s] - w;
            equal &= fabs(f - b) <= 1e-9 * f && fabs(f - w) <= 1e-9 * f;
            t = fmax(t, x->fwd_ms[s] + x->bwd_ms[s]), fill = fmax(fill, f);
        }
        sum += t, m++;
    }
    if (m < 2 * S - 1 || !equal) return *bubble_ms = NAN;
    *bubble_ms = (S - 1) * fill / C;
    return sum + *bubble_ms;
}

/* DualPipeV (the DeepSeek-V3 report's DualPipe table; the DualPipe repository gives DualPipeV the
 * same): (S - 1)(F&B + B - 3W) with F, B (whole), W a chunk's and F&B = F + B, nothing hidden
 * between a dense model's pair, with at least 2S micro-batches a replica (else NAN). Exact where a
 * chunk's forward and input gradients take the same time. */
static double closed_form_dualpipev(const plan_iter *it, int rep, int S, int C, double *bubble_ms)
{
    int m = 0;
    double sum = 0, unit = 0;
    for (int k = 0; k < it->n_mb; k++) {
        const plan_mb *x = &it->mb[k];
        if (x->replica != rep) continue;
        double t = 0;
        for (int s = 0; s < S; s++) {
            t = fmax(t, x->fwd_ms[s] + x->bwd_ms[s]);
            unit = fmax(unit, x->fwd_ms[s] + 2 * x->bwd_ms[s] - 3 * split_w_ms(it, k, s));
        }
        sum += t, m++;
    }
    if (m < 2 * S) return *bubble_ms = NAN;
    *bubble_ms = (S - 1) * fmax(unit, 0) / C;
    return sum + *bubble_ms;
}

#define CF_1F1B closed_form_1f1b, "sum t + (S-1) max t / C"

/* name, summary, build, holds, splits_backward, closed_form, closed_form_text, chunked,
 * admits_by_memory, warms_up, placement, chunks_fixed */
static const schedule SCHEDULES[] = {
    {"gpipe", "all forwards, then all backwards", build_gpipe, holds_pipeline, 0, CF_1F1B, 0, 0, 0,
     PLACEMENT_LOOP, 0},
    {"1f1b", "one forward, one backward (Megatron-LM)", build_1f1b, holds_1f1b, 0, CF_1F1B, 0, 0,
     1, PLACEMENT_LOOP, 0},
    {"interleaved", "interleaved 1F1B with --chunks model chunks per device", build_interleaved,
     holds_interleaved, 0, CF_1F1B, 1, 0, 1, PLACEMENT_LOOP, 0},
    {"adaptive", "DynaPipe's memory-aware schedule", build_adaptive, holds_one, 0, NULL,
     "none (the order follows memory)", 0, 1, 0, PLACEMENT_LOOP, 0},
    {"zb1", "zero-bubble ZB-H1: backward split into B and W, W's fill the bubbles", build_zb1,
     holds_pipeline, 1, closed_form_zb,
     "sum t + (S-1) max (f + b - 2w), with at least S micro-batches a replica", 0, 0, 0,
     PLACEMENT_LOOP, 0},
    {"zbv", "zero-bubble in a V: 2 chunks a device, B and W split (the published order or a greedy "
     "one by the costs)", build_zbv, holds_pipeline, 1, closed_form_zbv,
     "sum t + (S-1) f/2 (the V's fill; zero bubble after it), with f = b - w = w and at least "
     "2S-1 micro-batches a replica", 1, 0, 0, PLACEMENT_V, 2},
    {"dualpipev", "DeepSeek's DualPipeV: a V of 2 chunks, forwards overlapped with backwards "
     "(F&B)", build_dualpipev, holds_dualpipev, 1, closed_form_dualpipev,
     "sum t + (S-1)(f + 2b - 3w)/2 (DeepSeek's (PP/2-1)(F&B + B - 3W)), with at least 2S "
     "micro-batches a replica", 1, 0, 0, PLACEMENT_V, 2},
};

const schedule *schedule_baseline(void)
{
    return &SCHEDULES[1];
}

const char *schedule_for_options(const char *const *names, int n)
{
    for (int i = 0; i < n; i++) {
        const schedule *sc = schedule_find(names[i]);
        if (sc && sc->chunked) return names[i];
    }
    return names[0];
}

int schedule_chunks(const schedule *sc, int requested)
{
    return sc->chunks_fixed > 0 ? sc->chunks_fixed : sc->chunked ? requested : 1;
}

static const schedule_chooser CHOOSERS[] = {
    {"auto", PLACEMENT_LOOP, 1, 1},      /* either below, per run */
    {"auto-loop", PLACEMENT_LOOP, 1, 0}, /* gpipe, 1f1b, adaptive, zb1 */
    {"auto-v", PLACEMENT_V, 2, 0},       /* zbv, dualpipev */
};

const schedule_chooser *schedule_chooser_find(const char *name)
{
    for (size_t i = 0; i < sizeof CHOOSERS / sizeof *CHOOSERS; i++)
        if (strcmp(CHOOSERS[i].name, name) == 0) return &CHOOSERS[i];
    return NULL;
}

const schedule_chooser *schedule_chooser_family(const schedule_chooser *ch,
                                                placement_kind placement)
{
    if (ch->picks_placement)
        for (size_t i = 0; i < sizeof CHOOSERS / sizeof *CHOOSERS; i++)
            if (!CHOOSERS[i].picks_placement && CHOOSERS[i].placement == placement)
                return &CHOOSERS[i];
    return ch->placement == placement ? ch : NULL;
}

const schedule_chooser *schedule_chooser_on(const schedule_chooser *ch, placement_kind placement,
                                            int chunks)
{
    const schedule_chooser *fam = schedule_chooser_family(ch, placement);
    return fam && fam->chunks == chunks ? fam : NULL;
}

int schedule_chooser_takes(const schedule_chooser *ch, const schedule *sc)
{
    /* (its chunks whatever --chunks asks: 0 where --chunks decides) */
    const schedule_chooser *fam = schedule_chooser_on(ch, sc->placement, schedule_chunks(sc, 0));
    return fam != NULL;
}

int schedule_layout(const char *name, int requested, int *chunks, placement_kind *placement)
{
    const schedule *sc = schedule_find(name);
    const schedule_chooser *ch = sc ? NULL : schedule_chooser_find(name);
    if (!sc && !ch) return -1;
    *chunks = sc ? schedule_chunks(sc, requested) : ch->chunks;
    if (placement) *placement = sc ? sc->placement : ch->placement;
    return 0;
}

const char *schedule_names(char *buf, size_t cap)
{
    size_t at = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof SCHEDULES / sizeof *SCHEDULES; i++)
        at += (size_t)snprintf(buf + at, at < cap ? cap - at : 0, "%s%s", at ? ", " : "",
                               SCHEDULES[i].name);
    for (size_t i = 0; i < sizeof CHOOSERS / sizeof *CHOOSERS; i++)
        at += (size_t)snprintf(buf + at, at < cap ? cap - at : 0, ", %s", CHOOSERS[i].name);
    return buf;
}

const schedule *schedule_find(const char *name)
{
    for (size_t i = 0; i < sizeof SCHEDULES / sizeof *SCHEDULES; i++)
        if (strcmp(SCHEDULES[i].name, name) == 0) return &SCHEDULES[i];
    return NULL;
}

const schedule *schedule_list(int *count)
{
    *count = (int)(sizeof SCHEDULES / sizeof *SCHEDULES);
    return SCHEDULES;
}

/* ---- plan_check (schedule.h) ------------------------------------------------------------------ */

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

dp_status plan_check(const plan *p, const char *where, dp_err *err)
{
    if (p->n_it < 1)
        return dp_fail(err, DP_ERR_INVALID, "%s: the plan has no iteration (rule: a plan runs at "
                       "least one iteration)", where);
    const schedule_chooser *chooser = schedule_chooser_find(p->h.schedule);
    const schedule *named = schedule_find(p->h.schedule);
    if (!chooser && !named)
        return dp_fail(err, DP_ERR_INVALID, "%s: \"schedule\" \"%s\" is not a known schedule "
                       "(rule: known names; dpsim plan --list)", where, p->h.schedule);
    /* a chooser's plan: the family of its placement (auto's either) */
    const schedule_chooser *fam =
        chooser ? schedule_chooser_on(chooser, (placement_kind)p->h.placement, p->h.chunks) : NULL;
    placement_kind place = named ? named->placement : chooser->placement;
    int chunks_fixed = named ? named->chunks_fixed : chooser->chunks;
    if (chooser ? !fam
                : p->h.placement != (int)place || (chunks_fixed && p->h.chunks != chunks_fixed))
        return dp_fail(err, DP_ERR_INVALID, "%s: \"placement\" %s with \"chunks\" %d under "
                       "\"schedule\" \"%s\" (rule: known names; %s runs %s)", where,
                       p->h.placement == PLACEMENT_V ? "\"v\"" : "a loop", p->h.chunks,
                       p->h.schedule, p->h.schedule,
                       chooser && chooser->picks_placement
                           ? "1 chunk a device (no \"placement\") or 2 in a V (\"placement\": \"v\")"
                       : place == PLACEMENT_V ? "2 chunks a device in a V (\"placement\": \"v\")"
                       : chooser ? "1 chunk a device (no \"placement\")"
                                 : "its chunks in a loop (no \"placement\")");
    for (int i = 0; i < p->n_it; i++) {
        const plan_iter *it = &p->it[i];
        const schedule *sc = it->schedule[0] ? schedule_find(it->schedule) : NULL;
        if (fam && (!sc || !schedule_chooser_takes(fam, sc)))
            return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: \"schedule\" \"%s\" (rule: "
                           "known names; an \"%s\" plan names in every iteration a schedule "
                           "that runs its %d chunk%s a device %s)", where, it->id, it->schedule,
                           chooser->name, fam->chunks, fam->chunks > 1 ? "s" : "",
                           fam->placement == PLACEMENT_V ? "in a V" : "in a loop");
        if (!chooser && it->schedule[0])
            return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: \"schedule\" \"%s\" of its own "
                           "in a plan whose header names %s (rule: known names; only a plan "
                           "whose header names auto, auto-loop or auto-v names one per "
                           "iteration)", where,
                           it->id, it->schedule, p->h.schedule);
    }
    int dynamic = p->h.recompute == RECOMPUTE_POLICY_DYNAMIC;
    int mixed = p->h.recompute == RECOMPUTE_POLICY_MIXED;
    if (p->h.recompute < 0 || p->h.recompute >= RECOMPUTE_POLICY_FASTEST)
        return dp_fail(err, DP_ERR_INVALID, "%s: \"recompute\" \"%s\" is not none, selective, "
                       "full, dynamic or mixed (rule: known names)", where,
                       p->h.recompute < 0 ? "" : recompute_policy_name(p->h.recompute));
    for (int i = 0; i < p->n_it; i++) {
        const plan_iter *it = &p->it[i];
        int m = it->recompute;
        if (m >= RECOMPUTE_COUNT)
            return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: \"recompute\" \"%s\" is not "
                           "none, selective or full (rule: known names)", where, it->id,
                           recompute_policy_name(m));
        if (mixed && m >= 0)
            return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: \"recompute\" \"%s\" in a "
                           "mixed plan (rule: known names; a mixed plan names the mode of every "
                           "micro-batch, and no iteration's)", where, it->id, recompute_name(m));
        if (dynamic && m < 0)
            return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: no \"recompute\" (rule: known "
                           "names; a dynamic plan names the mode of every iteration)", where,
                           it->id);
        if (m >= 0 && !dynamic && m != p->h.recompute)
            return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: \"recompute\" \"%s\" differs "
                           "from the plan's \"%s\" (rule: one mode, unless the plan says "
                           "\"dynamic\")", where, it->id, recompute_name(m),
                           recompute_policy_name(p->h.recompute));
        for (int k = 0; k < it->n_mb; k++)
            if ((it->mb[k].recompute >= 0) != mixed)
                return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d, micro-batch %d: %s (rule: "
                               "known names; a micro-batch names its mode exactly where the plan "
                               "says \"mixed\")", where, it->id, k,
                               mixed ? "no \"recompute\" in a mixed plan"
                                     : "a \"recompute\" of its own in a plan that is not mixed");
    }
    char why[300];
    if (stage_shard_check(p->h.shard_group, p->h.dp, p->h.cp, p->h.zero, why, sizeof why) != 0)
        return dp_fail(err, DP_ERR_INVALID, "%s: \"shard_group\" %d (rule: HSDP's groups, "
                       "stage_shard_check): %s", where, p->h.shard_group, why);
    if (plan_dtype_bytes(p->h.act_dtype) != PLAN_ACT_ELEM_BYTES)
        return dp_fail(err, DP_ERR_INVALID, "%s: \"act_dtype\" \"%s\" is not fp16 or bf16 (rule: "
                       "known names)", where, p->h.act_dtype);
    int *ids = dp_xcalloc((size_t)p->n_it, sizeof *ids);
    for (int i = 0; i < p->n_it; i++) ids[i] = p->it[i].id;
    qsort(ids, (size_t)p->n_it, sizeof *ids, cmp_int);
    dp_status st = DP_OK;
    for (int i = 1; i < p->n_it && st == DP_OK; i++)
        if (ids[i] == ids[i - 1])
            st = dp_fail(err, DP_ERR_INVALID, "%s: iteration id %d appears twice (rule: unique "
                         "iteration ids)", where, ids[i]);
    free(ids);
    for (int i = 0; i < p->n_it && st == DP_OK; i++)
        st = plan_validate(&p->it[i], p->h.chunks, where, err);
    for (int i = 0; i < p->n_it && st == DP_OK; i++) {
        const plan_iter *it = &p->it[i];
        for (int r = 0; r < it->pp * it->dp && st == DP_OK; r++)
            for (int j = 0; j < it->ranks[r].n; j++)
                if (it->ranks[r].ins[j].op == OP_W &&
                    pm_recompute(p, it, it->ranks[r].ins[j].mb) == RECOMPUTE_FULL) {
                    char a[256];
                    pm_describe(it, r, j, a, sizeof a);
                    st = dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: %s: a W under full "
                                 "recompute (rule: recompute; its B reruns the forward, whose "
                                 "activations a W after it would need held, which stored_mb does "
                                 "not count)", where, it->id, a);
                    break;
                }
    }
    return st;
}
