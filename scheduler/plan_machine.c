#include "plan_machine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/comm.h"

/* The virtual stage a transfer on virtual stage v meets: activations go to v+1 and come from
 * v-1, gradients the other way. */
static int transfer_peer(plan_op op, int v)
{
    return op == OP_SEND_ACT || op == OP_RECV_GRAD ? v + 1 : v - 1;
}

void pm_init(plan_machine *m, const plan_iter *it, int chunks)
{
    memset(m, 0, sizeof *m);
    m->it = it;
    m->pp = it->pp;
    m->chunks = chunks;
    m->placement = (placement_kind)it->placement;
    m->nv = it->pp * chunks;
    m->nr = it->pp * it->dp;
    m->nmb = it->n_mb;
    m->split = dp_xcalloc(pm_slots(m), 1);
    for (int r = 0; r < m->nr; r++)
        for (int i = 0; i < it->ranks[r].n; i++) {
            const plan_instr *x = &it->ranks[r].ins[i];
            if (x->op == OP_W && x->mb >= 0 && x->mb < m->nmb && x->chunk >= 0 && x->chunk < chunks)
                m->split[pm_slot(m, r, x->mb, x->chunk)] = 1; /* bounds: pm_check's, later */
        }
}

void pm_release(plan_machine *m)
{
    if (!m) return;
    free(m->split);
    free(m->flags);
    free(m->pc);
    memset(m, 0, sizeof *m);
}

void pm_resolve(const plan_machine *m, int r, int i, pm_step *s)
{
    const plan_rank *R = &m->it->ranks[r];
    const plan_instr *x = &R->ins[i];
    const plan_mb *mb = &m->it->mb[x->mb];
    int pp = m->pp, st = R->stage, C = m->chunks;
    memset(s, 0, sizeof *s);
    s->x = x;
    s->op = x->op;
    s->rank = r;
    s->index = i;
    s->stage = st;
    s->v = placement_vstage(m->placement, st, x->chunk, pp);
    s->kind = s->waits = s->peer_rank = s->peer_chunk = s->peer_v = -1;
    double transient = fmax(0, mb->peak_mb[st] - mb->stored_mb[st]) / C;
    switch (x->op) {
    case OP_F:
        if (s->v > 0) s->waits = PM_ACT;
        s->dur_ms = mb->fwd_ms[st] / C;
        s->xchg_ms = mb->xfwd_ms[st] / C;
        s->stored_mb = mb->stored_mb[st] / C;
        s->transient_mb = transient;
        break;
    case OP_B:
        if (s->v < m->nv - 1) s->waits = PM_GRAD;
        s->split = m->split[pm_slot(m, r, x->mb, x->chunk)];
        s->dur_ms = (mb->bwd_ms[st] - (s->split ? mb->w_ms[st] : 0)) / C;
        s->xchg_ms = mb->xbwd_ms[st] / C;
        s->transient_mb = transient;
        break;
    case OP_W: s->dur_ms = mb->w_ms[st] / C; break;
    case OP_FREE: s->stored_mb = mb->stored_mb[st] / C; break;
    default: { /* transfers */
        s->kind = x->op == OP_SEND_ACT || x->op == OP_RECV_ACT ? PM_ACT : PM_GRAD;
        int pv = transfer_peer(x->op, s->v);
        s->peer_rank = R->replica * pp + placement_device(m->placement, pv, pp);
        s->peer_chunk = pv / pp;
        s->peer_v = pv;
    }
    }
}

double pm_rank_peak_parts(const plan_machine *m, int r, double *held_end, double *held_at_peak,
                          double *transient_at_peak)
{
    double held = 0, peak = 0, hp = 0, tp = 0;
    pm_step s;
    for (int i = 0; i < m->it->ranks[r].n; i++) {
        pm_resolve(m, r, i, &s);
        if (s.op == OP_F) held += s.stored_mb;
        if (s.op == OP_FREE) held -= s.stored_mb;
        if ((s.op == OP_F || s.op == OP_B || s.op == OP_W) && held + s.transient_mb > peak)
            peak = held + s.transient_mb, hp = held, tp = s.transient_mb;
    }
    if (held_end) *held_end = held;
    if (held_at_peak) *held_at_peak = hp;
    if (transient_at_peak) *transient_at_peak = tp;
    return peak;
}

double pm_rank_peak(const plan_machine *m, int r, double *held_end)
{
    return pm_rank_peak_parts(m, r, held_end, NULL, NULL);
}

/* pm_fits over ranks [r0, r1). */
static int ranks_fit(const plan_machine *m, int r0, int r1, const double *budget_mb, double *worst,
                     char *why, size_t cap)
{
    int fits = 1;
    *worst = 0;
    for (int r = r0; r < r1; r++) {
        int s = m->it->ranks[r].stage;
        double peak = pm_rank_peak(m, r, NULL), ratio = peak / budget_mb[s];
        if (ratio <= *worst) continue;
        *worst = ratio;
        if (peak > budget_mb[s] * (1 + 1e-9)) {
            fits = 0;
            if (why)
                snprintf(why, cap, "stage %d (replica %d) holds %.0f MB of activations at its "
                         "peak under the schedule, over the %.0f MB free after model state",
                         s, m->it->ranks[r].replica, peak, budget_mb[s]);
        }
    }
    return fits;
}

int pm_fits(const plan_machine *m, const double *budget_mb, double *worst, char *why, size_t cap)
{
    return ranks_fit(m, 0, m->nr, budget_mb, worst, why, cap);
}

int pm_replica_fits(const plan_machine *m, int replica, const double *budget_mb)
{
    double worst;
    return ranks_fit(m, replica * m->pp, (replica + 1) * m->pp, budget_mb, &worst, NULL, 0);
}

void pm_describe(const plan_iter *it, int r, int i, char *buf, size_t cap)
{
    const plan_rank *R = &it->ranks[r];
    const plan_instr *x = &R->ins[i];
    if (plan_op_is_send(x->op) || plan_op_is_recv(x->op))
        snprintf(buf, cap, "stage %d (replica %d) instruction %d (%s mb %d chunk %d %s stage %d, "
                 "%lld bytes)", R->stage, R->replica, i, plan_op_name(x->op), x->mb, x->chunk,
                 plan_op_is_send(x->op) ? "to" : "from", x->peer, (long long)x->bytes);
    else
        snprintf(buf, cap, "stage %d (replica %d) instruction %d (%s mb %d chunk %d)", R->stage,
                 R->replica, i, plan_op_name(x->op), x->mb, x->chunk);
}

/* Fails naming the plan, iteration, instruction i of rank r (and, with q >= 0, instruction j
 * of rank q), the rule and why. */
static dp_status fail_at(const plan_machine *m, dp_err *err, dp_status st, const char *where,
                         int r, int i, int q, int j, const char *rule, const char *why)
{
    char a[256], b[256] = "";
    pm_describe(m->it, r, i, a, sizeof a);
    if (q >= 0) pm_describe(m->it, q, j, b, sizeof b);
    return dp_fail(err, st, "%s: iteration %d: %s%s%s: %s (rule: %s)", where, m->it->id, a,
                   q >= 0 ? " and " : "", b, why, rule);
}

/* ---- static rules ----------------------------------------------------------------------------- */

/* What one rank's list does with one slot: how often each op, and where first. */
typedef struct seen {
    int n[OP_COUNT];
    int at[OP_COUNT];
} seen;

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Rule "samples": each micro-batch trains a sample at least, and the iteration each of its
 * samples once (no id in two micro-batches, or twice in one). */
static dp_status check_samples(const plan_iter *it, const char *where, dp_err *err)
{
    for (int k = 0; k < it->n_mb; k++)
        if (it->mb[k].n_samples < 1)
            return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: micro-batch %d trains no sample "
                           "(rule: samples)", where, it->id, k);
    int32_t *sorted = dp_xcalloc((size_t)(it->n_ids ? it->n_ids : 1), sizeof *sorted);
    memcpy(sorted, it->ids, (size_t)it->n_ids * sizeof *sorted);
    qsort(sorted, (size_t)it->n_ids, sizeof *sorted, cmp_i32);
    dp_status st = DP_OK;
    for (int i = 1; i < it->n_ids && st == DP_OK; i++)
        if (sorted[i] == sorted[i - 1])
            st = dp_fail(err, DP_ERR_INVALID, "%s: iteration %d holds sample %d twice: an "
                         "iteration trains a sample once (rule: samples)", where, it->id,
                         (int)sorted[i]);
    free(sorted);
    return st;
}

static dp_status check_microbatches(const plan_machine *m, const char *where, dp_err *err)
{
    const plan_iter *it = m->it;
    if (it->n_mb < 1)
        return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d has no micro-batch (rule: a plan "
                       "runs at least one micro-batch per iteration)", where, it->id);
    for (int k = 0; k < it->n_mb; k++) {
        const plan_mb *x = &it->mb[k];
        if (x->replica < 0 || x->replica >= it->dp)
            return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: micro-batch %d: replica %d of "
                           "%d (rule: replicas)", where, it->id, k, x->replica, it->dp);
        if (x->enc_tokens > (int64_t)x->mbs * x->enc_len || x->dec_tokens > (int64_t)x->mbs * x->dec_len)
            return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: micro-batch %d holds %lld + "
                           "%lld real tokens in %d x (%d + %d) padded ones (rule: tokens <= "
                           "padded_tokens)", where, it->id, k, (long long)x->enc_tokens,
                           (long long)x->dec_tokens, x->mbs, x->enc_len, x->dec_len);
        for (int s = 0; s < it->pp; s++) {
            double v[7] = {x->fwd_ms[s],  x->bwd_ms[s],    x->w_ms[s],   x->xfwd_ms[s],
                           x->xbwd_ms[s], x->stored_mb[s], x->peak_mb[s]};
            static const char *const names[7] = {"pred_ms.fwd",      "pred_ms.bwd",
                                                 "pred_ms.w",        "pred_ms.xchg_fwd",
                                                 "pred_ms.xchg_bwd", "mem_mb.stored",
                                                 "mem_mb.peak"};
            for (int q = 0; q < 7; q++)
                if (!isfinite(v[q]) || v[q] < 0 || v[q] > PLAN_MAX_VALUE)
                    return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: micro-batch %d: "
                                   "%s[%d] = %g (rule: times and memory finite, >= 0 and "
                                   "at most 1e7 ms or MB)",
                                   where, it->id, k, names[q], s, v[q]);
            if (x->w_ms[s] > x->bwd_ms[s])
                return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: micro-batch %d: "
                               "pred_ms.w[%d] = %g exceeds pred_ms.bwd[%d] = %g (rule: 0 <= w <= "
                               "bwd, W is a share of the backward)",
                               where, it->id, k, s, x->w_ms[s], s, x->bwd_ms[s]);
            if (x->xfwd_ms[s] > x->fwd_ms[s] || x->xbwd_ms[s] > x->bwd_ms[s] - x->w_ms[s])
                return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: micro-batch %d: "
                               "pred_ms.xchg_fwd[%d] = %g, xchg_bwd[%d] = %g against fwd %g, bwd "
                               "%g, w %g (rule: xchg_fwd <= fwd, xchg_bwd <= bwd - w: the "
                               "exchange is a share of the forward and of B)", where, it->id, k,
                               s, x->xfwd_ms[s], s, x->xbwd_ms[s], x->fwd_ms[s], x->bwd_ms[s],
                               x->w_ms[s]);
        }
    }
    return check_samples(it, where, err);
}

/* Indices, owners and peers of every instruction. */
static dp_status check_indices(const plan_machine *m, const char *where, dp_err *err)
{
    const plan_iter *it = m->it;
    char why[160];
    for (int r = 0; r < m->nr; r++) {
        const plan_rank *R = &it->ranks[r];
        for (int i = 0; i < R->n; i++) {
            const plan_instr *x = &R->ins[i];
            if (x->op < 0 || x->op >= OP_COUNT)
                return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: stage %d instruction %d: "
                               "unknown op", where, it->id, R->stage, i);
            if (x->mb < 0 || x->mb >= m->nmb)
                return fail_at(m, err, DP_ERR_INVALID, where, r, i, -1, 0, "indices", "no such micro-batch");
            if (x->chunk < 0 || x->chunk >= m->chunks)
                return fail_at(m, err, DP_ERR_INVALID, where, r, i, -1, 0, "indices", "no such chunk");
            if (it->mb[x->mb].replica != R->replica) {
                snprintf(why, sizeof why, "micro-batch %d belongs to replica %d", x->mb,
                         it->mb[x->mb].replica);
                return fail_at(m, err, DP_ERR_INVALID, where, r, i, -1, 0, "replicas", why);
            }
            if (plan_op_is_send(x->op) || plan_op_is_recv(x->op)) {
                int v = placement_vstage(m->placement, R->stage, x->chunk, m->pp);
                int pv = transfer_peer(x->op, v);
                int peer = pv < 0 || pv >= m->nv ? -1 : placement_device(m->placement, pv, m->pp);
                if (peer < 0 || x->peer != peer) {
                    snprintf(why, sizeof why, "the peer of virtual stage %d must be stage %d", v,
                             peer);
                    return fail_at(m, err, DP_ERR_INVALID, where, r, i, -1, 0, "transfers", why);
                }
                if (x->bytes <= 0)
                    return fail_at(m, err, DP_ERR_INVALID, where, r, i, -1, 0, "transfers",
                                   "bytes must be positive");
            }
        }
    }
    return DP_OK;
}

/* Per rank, in order: each instruction against what its slot has seen. */
static dp_status check_order(const plan_machine *m, const char *where, dp_err *err)
{
    const plan_iter *it = m->it;
    size_t nslots = (size_t)m->nmb * (size_t)m->chunks;
    seen *sn = dp_xcalloc(nslots, sizeof *sn);
    dp_status st = DP_OK;
    char why[200];
    for (int r = 0; r < m->nr && st == DP_OK; r++) {
        const plan_rank *R = &it->ranks[r];
        memset(sn, 0, nslots * sizeof *sn);
        for (int i = 0; i < R->n && st == DP_OK; i++) {
            const plan_instr *x = &R->ins[i];
            seen *e = &sn[(size_t)x->mb * (size_t)m->chunks + (size_t)x->chunk];
            int v = placement_vstage(m->placement, R->stage, x->chunk, m->pp), last = v == m->nv - 1;
            const char *rule = NULL, *bad = NULL;
            if (e->n[OP_FREE]) {
                snprintf(why, sizeof why, "uses micro-batch %d chunk %d after its FREE "
                         "(instruction %d)", x->mb, x->chunk, e->at[OP_FREE]);
                st = fail_at(m, err, DP_ERR_INVALID, where, r, i, -1, 0, "no use after FREE", why);
                break;
            }
            if (e->n[x->op]) {
                snprintf(why, sizeof why, "a second %s of micro-batch %d chunk %d (the first is "
                         "instruction %d)", plan_op_name(x->op), x->mb, x->chunk, e->at[x->op]);
                rule = x->op == OP_F || x->op == OP_B ? "one F and one B per (micro-batch, chunk)"
                       : x->op == OP_W               ? "one W per (micro-batch, chunk)"
                       : x->op == OP_FREE            ? "one FREE per (micro-batch, chunk)"
                                                     : "one transfer of each kind per (micro-batch, chunk)";
                st = fail_at(m, err, DP_ERR_INVALID, where, r, i, -1, 0, rule, why);
                break;
            }
            switch (x->op) {
            case OP_F:
                if (v > 0 && !e->n[OP_RECV_ACT]) bad = "F before the RECV_ACT of its input", rule = "transfers";
                break;
            case OP_B:
                if (!e->n[OP_F]) bad = "B before its F", rule = "F before B";
                else if (!last && !e->n[OP_RECV_GRAD])
                    bad = "B before the RECV_GRAD of its gradient", rule = "transfers";
                break;
            case OP_W:
                if (!e->n[OP_B]) bad = "W before its B", rule = "W after B";
                break;
            case OP_SEND_ACT:
                if (!e->n[OP_F]) bad = "SEND_ACT before its F", rule = "transfers";
                break;
            case OP_SEND_GRAD:
                if (!e->n[OP_B]) bad = "SEND_GRAD before its B", rule = "transfers";
                break;
            case OP_FREE:
                if (!e->n[OP_F] || !e->n[OP_B]) bad = "FREE before its F and B", rule = "FREE last";
                else if (m->split[pm_slot(m, r, x->mb, x->chunk)] && !e->n[OP_W])
                    bad = "FREE before its W", rule = "FREE last";
                else if (!last && !e->n[OP_SEND_ACT]) bad = "FREE before its SEND_ACT", rule = "FREE last";
                else if (v > 0 && !e->n[OP_SEND_GRAD]) bad = "FREE before its SEND_GRAD", rule = "FREE last";
                break;
            default: break;
            }
            if (bad) {
                st = fail_at(m, err, DP_ERR_INVALID, where, r, i, -1, 0, rule, bad);
                break;
            }
            e->n[x->op]++;
            e->at[x->op] = i;
        }
        /* what each slot of this rank's replica must have had */
        for (int k = 0; k < m->nmb && st == DP_OK; k++) {
            if (it->mb[k].replica != R->replica) continue;
            for (int c = 0; c < m->chunks && st == DP_OK; c++) {
                const seen *e = &sn[(size_t)k * (size_t)m->chunks + (size_t)c];
                static const struct {
                    plan_op op;
                    const char *rule;
                } must[3] = {{OP_F, "one F and one B per (micro-batch, chunk)"},
                             {OP_B, "one F and one B per (micro-batch, chunk)"},
                             {OP_FREE, "one FREE per (micro-batch, chunk)"}};
                for (int q = 0; q < 3 && st == DP_OK; q++)
                    if (!e->n[must[q].op])
                        st = dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: stage %d (replica %d) "
                                     "never runs %s of micro-batch %d chunk %d (rule: %s)", where,
                                     it->id, R->stage, R->replica, plan_op_name(must[q].op), k, c,
                                     must[q].rule);
            }
        }
    }
    free(sn);
    return st;
}

/* Sends and receives match pair by pair (self-sends too), in order. */
static dp_status check_matching(const plan_machine *m, const char *where, dp_err *err)
{
    const plan_iter *it = m->it;
    char why[160];
    pm_step x;
    for (int r = 0; r < m->nr; r++) {
        const plan_rank *R = &it->ranks[r];
        for (int p = 0; p < m->pp; p++) {
            int q = R->replica * m->pp + p;
            const plan_rank *P = &it->ranks[q];
            int j = 0;
            for (int i = 0; i < R->n; i++) {
                if (!plan_op_is_send(R->ins[i].op) || R->ins[i].peer != p) continue;
                pm_resolve(m, r, i, &x);
                while (j < P->n && !(plan_op_is_recv(P->ins[j].op) && P->ins[j].peer == R->stage)) j++;
                if (j == P->n) {
                    snprintf(why, sizeof why, "has no matching receive on stage %d", p);
                    return fail_at(m, err, DP_ERR_INVALID, where, r, i, -1, 0, "transfers", why);
                }
                const plan_instr *y = &P->ins[j];
                if (y->op != (x.op == OP_SEND_ACT ? OP_RECV_ACT : OP_RECV_GRAD) || y->mb != x.x->mb)
                    return fail_at(m, err, DP_ERR_INVALID, where, r, i, q, j, "transfers",
                                   "matched in that order, the send and receive orders cross");
                if (y->chunk != x.peer_chunk || y->bytes != R->ins[i].bytes)
                    return fail_at(m, err, DP_ERR_INVALID, where, r, i, q, j, "transfers",
                                   "differ in shape (bytes or chunk)");
                j++;
            }
            for (; j < P->n; j++)
                if (plan_op_is_recv(P->ins[j].op) && P->ins[j].peer == R->stage) {
                    snprintf(why, sizeof why, "has no matching send on stage %d", R->stage);
                    return fail_at(m, err, DP_ERR_INVALID, where, q, j, -1, 0, "transfers", why);
                }
        }
    }
    return DP_OK;
}

dp_status pm_check(const plan_machine *m, const char *where, dp_err *err)
{
    if (m->nr < 1 || m->chunks < 1)
        return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: empty pipeline", where, m->it->id);
    dp_status st = check_microbatches(m, where, err);
    if (st == DP_OK) st = check_indices(m, where, err);
    if (st == DP_OK) st = check_order(m, where, err);
    if (st == DP_OK) st = check_matching(m, where, err);
    return st;
}

/* ---- the untimed run ------------------------------------------------------------------------- */

enum { GOT_ACT = 1, GOT_GRAD = 2 };

dp_status pm_run(plan_machine *m, const char *where, dp_err *err)
{
    const plan_iter *it = m->it;
    free(m->flags), free(m->pc);
    m->flags = dp_xcalloc(pm_slots(m), 1);
    m->pc = dp_xcalloc((size_t)m->nr, sizeof *m->pc);
#define FLAG(r, mb, c) m->flags[pm_slot(m, r, mb, c)]
    pm_step s;
    for (int progress = 1; progress;) {
        progress = 0;
        for (int r = 0; r < m->nr; r++)
            for (; m->pc[r] < it->ranks[r].n; m->pc[r]++, progress = 1) {
                pm_resolve(m, r, m->pc[r], &s);
                if (s.waits >= 0 && !(FLAG(r, s.x->mb, s.x->chunk) & (s.waits == PM_ACT ? GOT_ACT : GOT_GRAD)))
                    break;
                if (plan_op_is_send(s.op))
                    FLAG(s.peer_rank, s.x->mb, s.peer_chunk) |= s.kind == PM_ACT ? GOT_ACT : GOT_GRAD;
            }
    }
#undef FLAG
    char waiting[640] = "", a[256];
    size_t used = 0;
    for (int r = 0; r < m->nr; r++)
        if (m->pc[r] < it->ranks[r].n && used < sizeof waiting - 80) {
            pm_describe(it, r, m->pc[r], a, sizeof a);
            used += (size_t)snprintf(waiting + used, sizeof waiting - used, "%s%s", used ? "; " : "", a);
        }
    if (used)
        return dp_fail(err, DP_ERR_DEADLOCK, "%s: iteration %d: the plan deadlocks: waiting: %s "
                       "(rule: no deadlock)", where, it->id, waiting);
    return DP_OK;
}

/* ---- plan_validate (plan.h) ------------------------------------------------------------------- */

dp_status plan_validate(const plan_iter *it, int chunks, const char *where, dp_err *err)
{
    plan_machine m;
    pm_init(&m, it, chunks);
    dp_status st = pm_check(&m, where, err);
    if (st == DP_OK) st = pm_run(&m, where, err);
    pm_release(&m);
    return st;
}

/* ---- recompute per micro-batch (plan_machine.h) ------------------------------------------------ */

recompute_mode pm_recompute_or(const plan_iter *it, int mb, int policy)
{
    if (it->mb[mb].recompute >= 0) return (recompute_mode)it->mb[mb].recompute;
    return recompute_policy_mode(it->recompute >= 0 ? it->recompute : policy);
}

recompute_mode pm_recompute(const plan *p, const plan_iter *it, int mb)
{
    return pm_recompute_or(it, mb, p->h.recompute);
}

/* A micro-batch's attention spans within the model's context and sliding window
 * (model_check_seqlen: its max_position_embeddings, and dpsim costs, and dprun runs, full
 * attention): a varlen row's samples, each attending to itself; else its rows' samples, at most
 * the plan's max_seqlen (the padding after them, which a padded row can add past max_seqlen — to
 * 2048 for Phi-3's window of 2047 —, is attended to by none of them). */
static dp_status check_window(const plan *p, const plan_iter *it, int k, const model_spec *m,
                              const char *where, dp_err *err)
{
    if (m->window <= 0 && m->positions <= 0) return DP_OK;
    const plan_mb *mb = &it->mb[k];
    int span = mb->enc_len < p->h.rules.max_seqlen ? mb->enc_len : p->h.rules.max_seqlen;
    if (mb->varlen) {
        span = 0;
        for (int s = 0; s < mb->n_samples; s++) {
            int len = it->lens[2 * (mb->first + s)];
            span = len > span ? len : span;
        }
    }
    char what[160];
    snprintf(what, sizeof what, "%s: iteration %d: micro-batch %d's %s of %d tokens", where, it->id,
             k, mb->varlen ? "longest sample" : "rows", span);
    if (model_check_seqlen(m, span, what, err) != DP_OK)
        return dp_fail(err, DP_ERR_INVALID, "%s (rule: attention spans within the model's context "
                       "and window)", err->msg);
    return DP_OK;
}

dp_status plan_check_model(const plan *p, const model_spec *m, const char *where, dp_err *err)
{
    dp_status st = DP_OK;
    int nv = p->h.pp * p->h.chunks;
    for (int i = 0; i < p->n_it; i++) {
        const plan_iter *it = &p->it[i];
        for (int r = 0; r < it->pp * it->dp; r++)
            for (int j = 0; j < it->ranks[r].n; j++) {
                /* the transfer between virtual stages u and u+1 carries the activation (or its
                 * gradient) of u, sized by the model: what the executors allocate and move */
                const plan_instr *x = &it->ranks[r].ins[j];
                if (!(plan_op_is_send(x->op) || plan_op_is_recv(x->op))) continue;
                int v = x->chunk * p->h.pp + it->ranks[r].stage, pv = transfer_peer(x->op, v);
                int u = v < pv ? v : pv;
                const plan_mb *mb = &it->mb[x->mb];
                int64_t want = comm_transfer_bytes(m, u, nv, mb->mbs, mb->enc_len, mb->dec_len);
                if (x->bytes != want) {
                    char a[256];
                    pm_describe(it, r, j, a, sizeof a);
                    return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: %s: %s's micro-batch of "
                                   "%d x (%d + %d) moves %lld bytes there (rule: transfer bytes "
                                   "match the model's activations)", where, it->id, a, m->name,
                                   mb->mbs, mb->enc_len, mb->dec_len, (long long)want);
                }
            }
        for (int k = 0; k < p->it[i].n_mb; k++) {
            TRY(check_window(p, &p->it[i], k, m, where, err));
            int dec = p->it[i].mb[k].dec_len;
            if (m->arch == ARCH_T5 && dec < 1)
                return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: micro-batch %d has no "
                               "dec_len, and %s is a T5 model (rule: T5 micro-batches have a "
                               "decoder length)", where, p->it[i].id, k, m->name);
            if (m->arch == ARCH_GPT && dec != 0)
                return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d: micro-batch %d has dec_len "
                               "%d, and %s is decoder-only (rule: GPT micro-batches have no "
                               "decoder length)", where, p->it[i].id, k, dec, m->name);
        }
    }
out:
    return st;
}
