#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/comm.h"

enum { EV_COMPUTE_DONE, EV_TRANSFER_DONE };
enum { KIND_ACT, KIND_GRAD };

/* Per (rank, micro-batch, chunk) state. */
typedef struct slot {
    int64_t posted[2];  /* RECV posted (act, grad); -1 not yet */
    int64_t arrived[2]; /* data arrived; -1 not yet */
    int64_t f_end, b_end, w_end; /* -1 not issued */
    double stored_mb;   /* this slot's stored activations (per chunk) */
} slot;

typedef struct rank_state {
    int pc;
    int64_t compute_free, send_free, recv_free;
    int *sendq; /* instruction indices of queued sends */
    int send_head, send_tail;
    int64_t busy;
} rank_state;

typedef struct run {
    const sim_config *cfg;
    const plan_iter *it;
    const sim_sink *sink;
    engine *eng;
    int nr, nmb, C, nv;
    slot *slots;
    rank_state *ranks;
    int *sendq_pool;
    /* memory changes, swept after the run */
    sim_mem *mem;
    size_t n_mem, cap_mem;
    dp_status st;
} run;

static slot *slot_at(run *u, int r, int mb, int c)
{
    return &u->slots[((size_t)r * (size_t)u->nmb + (size_t)mb) * (size_t)u->C + (size_t)c];
}

static int64_t ms_to_ns(double ms)
{
    return llround(ms * 1e6);
}

static void emit_op(run *u, int r, plan_op op, int mb, int chunk, int64_t start, int64_t end)
{
    if (!u->sink || !u->sink->on_op) return;
    sim_op o = {u->it->id, r % u->cfg->pp, r / u->cfg->pp, op, mb, chunk, start, end};
    u->sink->on_op(u->sink->ctx, &o);
}

static void mem_change(run *u, int r, int64_t t, double delta)
{
    if (u->st != DP_OK) return;
    if (dp_grow((void **)&u->mem, &u->cap_mem, u->n_mem + 1, sizeof *u->mem) != DP_OK) {
        u->st = DP_ERR_NOMEM;
        return;
    }
    /* mb holds the delta until the sweep turns it into a level */
    u->mem[u->n_mem++] = (sim_mem){r % u->cfg->pp, r / u->cfg->pp, t, delta};
}

static void push_event(run *u, int64_t t, int type, int a, int b, int c, int d)
{
    if (u->st != DP_OK) return;
    dp_status st = engine_push(u->eng, t, type == EV_TRANSFER_DONE ? 0 : 1, type, a, b, c, d);
    if (st != DP_OK) u->st = st;
}

static int vstage(const run *u, int r, int chunk)
{
    return chunk * u->cfg->pp + r % u->cfg->pp;
}

/* Starts the queued sends of rank a whose receivers have posted, in issue order. A send waiting
 * for its receiver does not hold up sends to other peers (it does not occupy the stream). */
static void try_sends(run *u, int a, int64_t now)
{
    rank_state *A = &u->ranks[a];
    const plan_rank *R = &u->it->ranks[a];
    int pp = u->cfg->pp, keep = A->send_head;
    for (int q = A->send_head; q < A->send_tail; q++) {
        const plan_instr *x = &R->ins[A->sendq[q]];
        int kind = x->op == OP_SEND_ACT ? KIND_ACT : KIND_GRAD;
        int v = vstage(u, a, x->chunk), pv = kind == KIND_ACT ? v + 1 : v - 1;
        int b = (a / pp) * pp + x->peer, cb = pv / pp;
        slot *src = slot_at(u, a, x->mb, x->chunk), *dst = slot_at(u, b, x->mb, cb);
        if (dst->posted[kind] < 0) { /* the receiver has not posted yet: keep it queued */
            A->sendq[keep++] = A->sendq[q];
            continue;
        }
        int64_t start = kind == KIND_ACT ? src->f_end : src->b_end;
        if (dst->posted[kind] > start) start = dst->posted[kind];
        if (A->send_free > start) start = A->send_free;
        if (u->ranks[b].recv_free > start) start = u->ranks[b].recv_free;
        if (now > start) start = now;
        int64_t end = start + ms_to_ns(comm_p2p_ms(u->cfg->hw, a, b, (double)x->bytes));
        A->send_free = u->ranks[b].recv_free = end;
        push_event(u, end, EV_TRANSFER_DONE, b, x->mb, cb, kind);
        emit_op(u, a, x->op, x->mb, x->chunk, start, end);
        emit_op(u, b, kind == KIND_ACT ? OP_RECV_ACT : OP_RECV_GRAD, x->mb, cb, start, end);
    }
    A->send_tail = keep;
}

/* Issues rank r's instructions until one must wait for data. */
static void advance(run *u, int r, int64_t now)
{
    rank_state *Rs = &u->ranks[r];
    const plan_rank *R = &u->it->ranks[r];
    int pp = u->cfg->pp, s = r % pp, C = u->C;
    while (Rs->pc < R->n && u->st == DP_OK) {
        const plan_instr *x = &R->ins[Rs->pc];
        slot *sl = slot_at(u, r, x->mb, x->chunk);
        const plan_mb *m = &u->it->mb[x->mb];
        int v = vstage(u, r, x->chunk);
        switch (x->op) {
        case OP_RECV_ACT:
        case OP_RECV_GRAD: {
            int kind = x->op == OP_RECV_ACT ? KIND_ACT : KIND_GRAD;
            sl->posted[kind] = now;
            try_sends(u, (r / pp) * pp + x->peer, now);
            break;
        }
        case OP_F:
        case OP_B:
        case OP_W: {
            int64_t dep = now, dur;
            if (x->op == OP_F) {
                if (v > 0 && sl->arrived[KIND_ACT] < 0) return;
                dur = ms_to_ns(m->fwd_ms[s] / C);
            } else if (x->op == OP_B) {
                if (sl->f_end < 0) return; /* the validator refuses such plans */
                if (v < u->nv - 1 && sl->arrived[KIND_GRAD] < 0) return;
                if (sl->f_end > dep) dep = sl->f_end;
                double b = m->bwd_ms[s] - (u->cfg->split_backward ? m->w_ms[s] : 0);
                dur = ms_to_ns(b / C);
            } else {
                if (sl->b_end < 0) return;
                if (sl->b_end > dep) dep = sl->b_end;
                dur = ms_to_ns(m->w_ms[s] / C);
            }
            int64_t start = Rs->compute_free > dep ? Rs->compute_free : dep;
            int64_t end = start + dur;
            Rs->compute_free = end;
            Rs->busy += dur;
            double transient = fmax(0, m->peak_mb[s] - m->stored_mb[s]) / C;
            if (x->op == OP_F) {
                sl->f_end = end;
                sl->stored_mb = m->stored_mb[s] / C;
                mem_change(u, r, start, sl->stored_mb);
            } else if (x->op == OP_B) {
                sl->b_end = end;
            } else {
                sl->w_end = end;
            }
            if (x->op != OP_W && transient > 0) {
                mem_change(u, r, start, transient);
                mem_change(u, r, end, -transient);
            }
            push_event(u, end, EV_COMPUTE_DONE, r, Rs->pc, 0, 0);
            emit_op(u, r, x->op, x->mb, x->chunk, start, end);
            break;
        }
        case OP_SEND_ACT:
        case OP_SEND_GRAD:
            if ((x->op == OP_SEND_ACT ? sl->f_end : sl->b_end) < 0) return;
            Rs->sendq[Rs->send_tail++] = Rs->pc;
            try_sends(u, r, now);
            break;
        case OP_FREE: {
            int64_t t = sl->w_end >= 0 ? sl->w_end : sl->b_end;
            if (t < 0) return;
            mem_change(u, r, t > now ? t : now, -sl->stored_mb);
            sl->stored_mb = 0;
            break;
        }
        default: break;
        }
        Rs->pc++;
    }
}

void sim_init(sim *s)
{
    memset(s, 0, sizeof *s);
    engine_init(&s->eng);
}

void sim_release(sim *s)
{
    engine_release(&s->eng);
    free(s->scratch);
    memset(s, 0, sizeof *s);
}

dp_status sim_iteration(sim *s, const sim_config *cfg, const plan_iter *it, int64_t t0_ns,
                        const sim_sink *sink, sim_iter_result *res, dp_err *err)
{
    memset(res, 0, sizeof *res);
    run u = {cfg, it, sink, &s->eng, cfg->pp * cfg->dp, it->n_mb, cfg->chunks,
             cfg->pp * cfg->chunks, NULL, NULL, NULL, NULL, 0, 0, DP_OK};
    if (it->pp != cfg->pp || it->dp != cfg->dp)
        return dp_fail(err, DP_ERR_INVALID, "iteration %d has %d x %d ranks, the simulation %d x %d",
                       it->id, it->pp, it->dp, cfg->pp, cfg->dp);
    size_t nslots = (size_t)u.nr * (size_t)(u.nmb ? u.nmb : 1) * (size_t)u.C;
    size_t max_ins = 0;
    for (int r = 0; r < u.nr; r++) max_ins += (size_t)it->ranks[r].n;
    size_t need = nslots * sizeof(slot) + (size_t)u.nr * sizeof(rank_state) + (max_ins + 1) * sizeof(int);
    if (need > s->scratch_cap) {
        free(s->scratch);
        s->scratch = malloc(need);
        s->scratch_cap = s->scratch ? need : 0;
        if (!s->scratch) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    u.slots = s->scratch;
    u.ranks = (rank_state *)(u.slots + nslots);
    u.sendq_pool = (int *)(u.ranks + u.nr);
    for (size_t i = 0; i < nslots; i++)
        u.slots[i] = (slot){{-1, -1}, {-1, -1}, -1, -1, -1, 0};
    size_t at = 0;
    for (int r = 0; r < u.nr; r++) {
        u.ranks[r] = (rank_state){0, t0_ns, t0_ns, t0_ns, u.sendq_pool + at, 0, 0, 0};
        at += (size_t)it->ranks[r].n;
    }
    engine_reset(&s->eng);
    s->eng.now_ns = t0_ns;
    uint64_t popped0 = s->eng.popped;
    for (int r = 0; r < u.nr; r++) advance(&u, r, t0_ns);
    sim_event ev;
    while (u.st == DP_OK && engine_pop(&s->eng, &ev)) {
        if (ev.type == EV_TRANSFER_DONE) {
            slot_at(&u, ev.a, ev.b, ev.c)->arrived[ev.d] = ev.t_ns;
            advance(&u, ev.a, ev.t_ns);
        }
    }
    res->events = s->eng.popped - popped0;
    dp_status st = u.st;
    if (st != DP_OK) {
        dp_fail(err, st, st == DP_ERR_NOMEM ? "out of memory" : "internal: event in the past");
        goto out;
    }
    /* Deadlock: instructions left with nothing more to happen. */
    char waiting[600] = "";
    size_t used = 0;
    for (int r = 0; r < u.nr; r++) {
        const plan_rank *R = &it->ranks[r];
        if (u.ranks[r].pc >= R->n || used > sizeof waiting - 120) continue;
        const plan_instr *x = &R->ins[u.ranks[r].pc];
        used += (size_t)snprintf(waiting + used, sizeof waiting - used,
                                 "%sstage %d (replica %d) instruction %d %s mb %d chunk %d",
                                 used ? "; " : "", R->stage, R->replica, u.ranks[r].pc,
                                 plan_op_name(x->op), x->mb, x->chunk);
    }
    if (used) {
        st = dp_fail(err, DP_ERR_DEADLOCK, "iteration %d deadlocks: waiting: %s", it->id, waiting);
        goto out;
    }
    /* End: the last compute or transfer, then each stage's gradient all-reduce. */
    int64_t end = t0_ns;
    for (int r = 0; r < u.nr; r++) {
        rank_state *R = &u.ranks[r];
        int64_t done = R->compute_free;
        if (R->send_free > done) done = R->send_free;
        if (R->recv_free > done) done = R->recv_free;
        done += ms_to_ns(cfg->dp > 1 ? cfg->allreduce_ms[r % cfg->pp] : 0);
        if (done > end) end = done;
        res->busy_ns[r % cfg->pp] += R->busy / cfg->dp;
    }
    res->makespan_ns = end - t0_ns;
    /* Memory sweep per rank. Each rank's changes were recorded in time order (its compute
     * stream is sequential, and a FREE follows its B), so grouping them by rank, stably, orders
     * them: a counting sort instead of a comparison sort. */
    size_t *start = calloc((size_t)u.nr + 1, sizeof *start);
    sim_mem *byrank = malloc((u.n_mem ? u.n_mem : 1) * sizeof *byrank);
    if (!start || !byrank) {
        free(start), free(byrank);
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < u.n_mem; i++) start[u.mem[i].replica * cfg->pp + u.mem[i].stage + 1]++;
    for (int r = 0; r < u.nr; r++) start[r + 1] += start[r];
    for (size_t i = 0; i < u.n_mem; i++) byrank[start[u.mem[i].replica * cfg->pp + u.mem[i].stage]++] = u.mem[i];
    for (int s2 = 0; s2 < cfg->pp; s2++) res->peak_mb[s2] = cfg->state_mb[s2];
    double level = 0;
    for (size_t i = 0; i < u.n_mem; i++) {
        const sim_mem *m = &byrank[i];
        if (i == 0 || m->stage != byrank[i - 1].stage || m->replica != byrank[i - 1].replica)
            level = 0;
        level += m->mb;
        if (level < 1e-9 && level > -1e-9) level = 0;
        double total = cfg->state_mb[m->stage] + level;
        if (total > res->peak_mb[m->stage]) res->peak_mb[m->stage] = total;
        if (sink && sink->on_mem) {
            sim_mem lv = *m;
            lv.mb = level;
            sink->on_mem(sink->ctx, &lv);
        }
    }
    free(start), free(byrank);
    for (int s2 = 0; s2 < cfg->pp; s2++)
        if (res->peak_mb[s2] > cfg->mem_limit_mb) res->oom = 1;
out:
    free(u.mem);
    return st;
}
