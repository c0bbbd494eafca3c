#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/comm.h"
#include "../scheduler/plan_machine.h"

enum {
    EV_TRANSFER_DONE, /* a transfer reached its receiver */
    EV_MET            /* the replicas of a meeting are all there: the waiting ones go on */
};

/* Per (rank, micro-batch, chunk) timing state, indexed by pm_slot. */
typedef struct slot {
    int64_t posted[2];  /* RECV posted (act, grad); -1 not yet */
    int64_t arrived[2]; /* data arrived; -1 not yet */
    int64_t f_end, b_end; /* producers of the sends; -1 not issued */
} slot;

/* A memory change on a rank: stored activations or the running op's transient. */
typedef struct mem_delta {
    int rank;
    int transient; /* 1: a transient, 0: stored activations */
    int64_t t_ns;
    double mb;
} mem_delta;

/* A send waiting on its link, in issue order. */
typedef struct queued {
    int ins;        /* instruction index */
    int64_t issued; /* when the rank reached it */
    int64_t after;  /* when the compute issued before it on the rank ends (stream order) */
} queued;

/* A rank's directed links, each a stream at either end: per kind (activation, gradient) one
 * towards higher stages and one towards lower (or itself). A loop sends each kind to one peer;
 * a V sends activations down on chunk 0 and up on chunk 1, each on its own link. */
#define SIM_LINKS 4
static int link_of(int kind, int from_stage, int to_stage)
{
    return 2 * kind + (to_stage > from_stage);
}

/* The k-th meeting pass of a stage (sim.h: replicas that meet): how many of its replicas have
 * reached it, when the last can start, the longest of their durations. */
typedef struct meeting {
    int arrived;
    int64_t ready, dur;
} meeting;

/* The last compute op a rank issued: what a pair (sim.h) needs of it. */
typedef struct last_op {
    int op, mb;      /* -1: none yet */
    int paired;      /* it was the second of a pair: it pairs no further */
    int64_t start, dur, xchg; /* its start, its duration and its exchange's (ns) */
} last_op;

typedef struct rank_state {
    int pc;
    last_op last;
    int pass;    /* meeting passes issued so far: the next one's k */
    int waiting; /* 1: counted at meeting `pass`, waiting for the other replicas */
    int64_t compute_free, busy;
    int64_t last_start;                 /* start of the last compute op (its gradients) */
    int64_t send_free[SIM_LINKS], recv_free[SIM_LINKS]; /* link streams (link_of) */
    queued *q[SIM_LINKS];               /* sends waiting per link: q[l][head..tail) */
    int head[SIM_LINKS], tail[SIM_LINKS];
} rank_state;

typedef struct run {
    const sim_config *cfg;
    const plan_iter *it;
    const sim_sink *sink;
    engine *eng;
    plan_machine pm;
    int nr, nmb, C;
    mesh layout; /* where each rank's GPUs are (models/mesh.h) */
    double wire_scale;
    slot *slots;
    rank_state *ranks;
    unsigned meet;      /* the passes at which replicas meet (bits 1 << op; 0: none) */
    meeting *meetings;  /* per stage, max_meet of them */
    int max_meet;
    mem_delta *mem; /* memory changes, swept after the run */
    size_t n_mem, cap_mem;
    dp_status st;
    int64_t op_ns[4]; /* F, B, W, transfers */
    char bad[512]; /* what went wrong, for DP_ERR_INVALID */
} run;

static slot *slot_at(run *u, int r, int mb, int c)
{
    return &u->slots[pm_slot(&u->pm, r, mb, c)];
}

static int64_t ms_to_ns(double ms)
{
    return llround(ms * 1e6);
}

int64_t sim_grad_overlap_end(int64_t start, int64_t end, int64_t grad_ns, int buckets,
                             int64_t *first_ns)
{
    int64_t k = buckets > 0 ? buckets : 1, each = grad_ns / k, d = end - start;
    *first_ns = start + d / k; /* the first bucket's gradients are ready */
    int64_t a = end + each, b = *first_ns + grad_ns;
    return a > b ? a : b;
}

static void emit_op(run *u, int r, plan_op op, int mb, int chunk, int64_t start, int64_t end)
{
    if (!u->sink || !u->sink->on_op) return;
    sim_op o = {u->it->id, r % u->cfg->pp, r / u->cfg->pp, op, mb, chunk, start, end,
                mb >= 0 ? &u->it->mb[mb] : NULL, u->it};
    u->sink->on_op(u->sink->ctx, &o);
}

static void mem_change(run *u, int r, int transient, int64_t t, double delta)
{
    if (u->st != DP_OK || delta == 0) return;
    if (dp_grow((void **)&u->mem, &u->cap_mem, u->n_mem + 1, sizeof *u->mem) != DP_OK) {
        u->st = DP_ERR_NOMEM;
        return;
    }
    u->mem[u->n_mem++] = (mem_delta){r, transient, t, delta};
}

/* Starts the sends of rank a's `kind` stream, in issue order, while the one at the head has its
 * receiver posted (links are in order, as NCCL's and MPI's are). */
static void try_sends(run *u, int a, int link)
{
    rank_state *A = &u->ranks[a];
    int kind = link / 2;
    pm_step s;
    while (A->head[link] < A->tail[link] && u->st == DP_OK) {
        const queued *q = &A->q[link][A->head[link]];
        pm_resolve(&u->pm, a, q->ins, &s);
        int b = s.peer_rank, mb = s.x->mb;
        slot *src = slot_at(u, a, mb, s.x->chunk), *dst = slot_at(u, b, mb, s.peer_chunk);
        if (dst->posted[kind] < 0) return; /* the receiver has not posted yet */
        int64_t start = q->issued;
        int64_t ready = kind == PM_ACT ? src->f_end : src->b_end;
        if (ready > start) start = ready;
        if (q->after > start) start = q->after;
        if (dst->posted[kind] > start) start = dst->posted[kind];
        if (A->send_free[link] > start) start = A->send_free[link];
        if (u->ranks[b].recv_free[link] > start) start = u->ranks[b].recv_free[link];
        double bytes = (double)s.x->bytes * u->wire_scale;
        double ms = comm_p2p_ms(u->cfg->hw, (int)mesh_group_first(&u->layout, a),
                                (int)mesh_group_first(&u->layout, b), bytes);
        if (!(ms <= PLAN_MAX_VALUE)) { /* integer ns would overflow: refuse, do not wrap */
            char what[200];
            pm_describe(u->it, a, q->ins, what, sizeof what);
            snprintf(u->bad, sizeof u->bad, "%s takes %.3g ms on its link, beyond the simulator's "
                     "range (1e7 ms)", what, ms);
            u->st = DP_ERR_INVALID;
            return;
        }
        int64_t end = start + ms_to_ns(ms);
        A->send_free[link] = u->ranks[b].recv_free[link] = end;
        u->op_ns[3] += end - start;
        dp_status st = engine_push(u->eng, end, 0, EV_TRANSFER_DONE, b, mb, s.peer_chunk, kind);
        if (st != DP_OK) u->st = st;
        emit_op(u, a, s.op, mb, s.x->chunk, start, end);
        emit_op(u, b, kind == PM_ACT ? OP_RECV_ACT : OP_RECV_GRAD, mb, s.peer_chunk, start, end);
        A->head[link]++;
    }
}

/* A pair (sim.h): what compute op s of rank r, of duration dur ns, saves by running beside the
 * rank's previous compute op p: a forward and another micro-batch's backward, either first.
 * Together they take the longer of their computes and of their exchanges, max(c1 + c2, a1 + a2),
 * a saving of min(c1 + c2, a1 + a2), where s's data was there when p began; where it came while p
 * ran, the share of p still to run then. s's time absorbs it (at most all of it). */
static int64_t pair_saving(const run *u, const rank_state *Rs, const pm_step *s, const slot *sl,
                           int64_t dur)
{
    const last_op *p = &Rs->last;
    if (!u->cfg->pair_exchange || p->paired || (s->op != OP_F && s->op != OP_B) ||
        (p->op != OP_F && p->op != OP_B) || p->op == (int)s->op || p->mb == s->x->mb ||
        p->dur <= 0)
        return 0;
    int64_t arrived = s->waits >= 0 ? sl->arrived[s->waits] : p->start;
    double share = arrived <= p->start ? 1 : (double)(p->start + p->dur - arrived) / (double)p->dur;
    if (share <= 0) return 0; /* it came after p's time: s runs alone */
    int64_t a1 = p->xchg, a2 = ms_to_ns(s->xchg_ms);
    int64_t comm = a1 + a2, comp = (p->dur - a1) + (dur - a2);
    int64_t save = (int64_t)((double)(comm < comp ? comm : comp) * share);
    return save <= 0 ? 0 : save < dur ? save : dur;
}

/* Issues rank r's instructions until one must wait for data. */
static void advance(run *u, int r, int64_t now)
{
    rank_state *Rs = &u->ranks[r];
    const plan_rank *R = &u->it->ranks[r];
    pm_step s;
    while (Rs->pc < R->n && u->st == DP_OK) {
        pm_resolve(&u->pm, r, Rs->pc, &s);
        slot *sl = slot_at(u, r, s.x->mb, s.x->chunk);
        switch (s.op) {
        case OP_RECV_ACT:
        case OP_RECV_GRAD:
            sl->posted[s.kind] = now;
            try_sends(u, s.peer_rank, link_of(s.kind, s.peer_rank % u->cfg->pp, s.stage));
            break;
        case OP_F:
        case OP_B:
        case OP_W: {
            if (s.waits >= 0 && sl->arrived[s.waits] < 0) return;
            if (s.dur_ms < 0 || !isfinite(s.dur_ms)) {
                char what[200];
                pm_describe(u->it, r, Rs->pc, what, sizeof what);
                snprintf(u->bad, sizeof u->bad, "%s lasts %g ms (its W exceeds its backward?)",
                         what, s.dur_ms);
                u->st = DP_ERR_INVALID;
                return;
            }
            int64_t whole = ms_to_ns(s.dur_ms), saved = pair_saving(u, Rs, &s, sl, whole);
            int64_t dur = whole - saved;
            int64_t start = Rs->compute_free > now ? Rs->compute_free : now, met = dur;
            if (u->meet >> s.op & 1u) { /* a collective with the stage's other replicas */
                meeting *m = &u->meetings[s.stage * u->max_meet + Rs->pass];
                if (!Rs->waiting) {
                    Rs->waiting = 1, m->arrived++;
                    m->ready = start > m->ready ? start : m->ready;
                    m->dur = dur > m->dur ? dur : m->dur;
                    if (m->arrived == u->cfg->dp) /* the last: wake the others */
                        for (int rep = 0; rep < u->cfg->dp && u->st == DP_OK; rep++) {
                            int q = rep * u->cfg->pp + s.stage;
                            dp_status st = q == r ? DP_OK
                                                  : engine_push(u->eng, now, 0, EV_MET, q, 0, 0, 0);
                            if (st != DP_OK) u->st = st;
                        }
                }
                if (m->arrived < u->cfg->dp) return;
                Rs->waiting = 0, Rs->pass++;
                start = m->ready, met = m->dur;
            }
            int64_t end = start + met; /* the rank computes dur of it, and waits the rest */
            Rs->last = (last_op){(int)s.op, s.x->mb, saved > 0, start, whole,
                                 ms_to_ns(s.xchg_ms)};
            Rs->compute_free = end;
            Rs->last_start = start;
            Rs->busy += dur;
            u->op_ns[s.op == OP_F ? 0 : s.op == OP_B ? 1 : 2] += dur;
            if (s.op == OP_F) sl->f_end = end, mem_change(u, r, 0, start, s.stored_mb);
            if (s.op == OP_B) sl->b_end = end;
            mem_change(u, r, 1, start, s.transient_mb);
            mem_change(u, r, 1, end, -s.transient_mb);
            emit_op(u, r, s.op, s.x->mb, s.x->chunk, start, start + dur);
            break;
        }
        case OP_SEND_ACT:
        case OP_SEND_GRAD: {
            int l = link_of(s.kind, s.stage, s.peer_rank % u->cfg->pp);
            Rs->q[l][Rs->tail[l]++] = (queued){Rs->pc, now, Rs->compute_free};
            try_sends(u, r, l);
            break;
        }
        case OP_FREE: /* stream-ordered: when the compute issued before it has ended */
            mem_change(u, r, 0, Rs->compute_free > now ? Rs->compute_free : now, -s.stored_mb);
            break;
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

/* Per rank, memory changes in time order (each rank's are recorded in program order, which is
 * time order: its compute stream is sequential and a FREE takes the end of the compute before
 * it), grouped by rank with a stable counting sort, then turned into levels (stored and
 * transient apart, for the breakdown at the peak) and peaks. */
static dp_status sweep_memory(run *u, sim_iter_result *res, dp_err *err)
{
    const sim_config *cfg = u->cfg;
    size_t *start = calloc((size_t)u->nr + 1, sizeof *start);
    mem_delta *byrank = malloc((u->n_mem ? u->n_mem : 1) * sizeof *byrank);
    if (!start || !byrank) {
        free(start), free(byrank);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < u->n_mem; i++) start[u->mem[i].rank + 1]++;
    for (int r = 0; r < u->nr; r++) start[r + 1] += start[r];
    for (size_t i = 0; i < u->n_mem; i++) byrank[start[u->mem[i].rank]++] = u->mem[i];
    for (int s2 = 0; s2 < cfg->pp; s2++) res->peak_mb[s2] = cfg->state_mb[s2];
    double level[2] = {0, 0}; /* stored, transient */
    for (size_t i = 0; i < u->n_mem; i++) {
        const mem_delta *m = &byrank[i];
        int stage = m->rank % cfg->pp;
        if (i == 0 || m->rank != byrank[i - 1].rank) level[0] = level[1] = 0;
        level[m->transient] += m->mb;
        if (level[m->transient] < 1e-9 && level[m->transient] > -1e-9) level[m->transient] = 0;
        double total = cfg->state_mb[stage] + level[0] + level[1];
        if (total > res->peak_mb[stage]) {
            res->peak_mb[stage] = total;
            res->stored_at_peak_mb[stage] = level[0];
            res->transient_at_peak_mb[stage] = level[1];
        }
        if (u->sink && u->sink->on_mem) {
            sim_mem lv = {stage, m->rank / cfg->pp, m->t_ns, level[0] + level[1]};
            u->sink->on_mem(u->sink->ctx, &lv);
        }
    }
    free(start), free(byrank);
    for (int s2 = 0; s2 < cfg->pp; s2++)
        if (res->peak_mb[s2] > cfg->mem_limit_mb) res->oom = 1;
    return DP_OK;
}

dp_status sim_iteration(sim *s, const sim_config *cfg, const plan_iter *it, int64_t t0_ns,
                        const sim_sink *sink, sim_iter_result *res, dp_err *err)
{
    memset(res, 0, sizeof *res);
    if (it->pp != cfg->pp || it->dp != cfg->dp)
        return dp_fail(err, DP_ERR_INVALID, "iteration %d has %d x %d ranks, the simulation %d x %d",
                       it->id, it->pp, it->dp, cfg->pp, cfg->dp);
    run u;
    memset(&u, 0, sizeof u);
    u.cfg = cfg, u.it = it, u.sink = sink, u.eng = &s->eng;
    u.nr = cfg->pp * cfg->dp, u.nmb = it->n_mb, u.C = cfg->chunks;
    u.layout = mesh_of(cfg->tp, 1, cfg->pp, cfg->dp); /* a rank's tp x cp GPUs as one block */
    u.wire_scale = cfg->wire_scale > 0 ? cfg->wire_scale : 1;
    dp_status st = DP_OK;
    u.meet = mb_replicas_meet(cfg->zero_stage, cfg->dp, cfg->experts_span);
    dp_err apart = {0}; /* replicas with other passes cannot meet: they run apart (sim.h) */
    if (u.meet &&
        plan_iter_check_lockstep(it, cfg->zero_stage, cfg->experts_span, "", &apart) != DP_OK)
        u.meet = 0;
    for (int r = 0; u.meet && r < u.nr; r++) {
        int k = 0;
        for (int q = 0; q < it->ranks[r].n; q++) k += u.meet >> it->ranks[r].ins[q].op & 1u;
        u.max_meet = k > u.max_meet ? k : u.max_meet;
    }
    if (u.max_meet &&
        !(u.meetings = calloc((size_t)cfg->pp * (size_t)u.max_meet, sizeof *u.meetings)))
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    pm_init(&u.pm, it, cfg->chunks);
    size_t nslots = pm_slots(&u.pm);
    size_t n_ins = 0;
    for (int r = 0; r < u.nr; r++) n_ins += (size_t)it->ranks[r].n;
    size_t need = nslots * sizeof(slot) + (size_t)u.nr * sizeof(rank_state) +
                  (SIM_LINKS * n_ins + SIM_LINKS) * sizeof(queued);
    if (need > s->scratch_cap) {
        free(s->scratch);
        s->scratch = malloc(need);
        s->scratch_cap = s->scratch ? need : 0;
        if (!s->scratch) {
            pm_release(&u.pm);
            free(u.meetings);
            return dp_fail(err, DP_ERR_NOMEM, "out of memory");
        }
    }
    u.slots = s->scratch;
    u.ranks = (rank_state *)(u.slots + nslots);
    queued *pool = (queued *)(u.ranks + u.nr);
    for (size_t i = 0; i < nslots; i++) u.slots[i] = (slot){{-1, -1}, {-1, -1}, -1, -1};
    for (int r = 0; r < u.nr; r++) {
        rank_state *R = &u.ranks[r];
        memset(R, 0, sizeof *R);
        R->last.op = R->last.mb = -1;
        R->compute_free = R->last_start = t0_ns;
        for (int l = 0; l < SIM_LINKS; l++) {
            R->send_free[l] = R->recv_free[l] = t0_ns;
            R->q[l] = pool;
            pool += it->ranks[r].n;
        }
    }
    engine_reset(&s->eng);
    s->eng.now_ns = t0_ns;
    uint64_t popped0 = s->eng.popped;
    for (int r = 0; r < u.nr; r++) advance(&u, r, t0_ns);
    sim_event ev;
    while (u.st == DP_OK && engine_pop(&s->eng, &ev)) {
        if (ev.type == EV_TRANSFER_DONE) slot_at(&u, ev.a, ev.b, ev.c)->arrived[ev.d] = ev.t_ns;
        advance(&u, ev.a, ev.t_ns);
    }
    res->events = s->eng.popped - popped0;
    st = u.st;
    if (st != DP_OK) {
        if (st == DP_ERR_NOMEM) dp_fail(err, st, "out of memory");
        else if (u.bad[0]) dp_fail(err, st, "iteration %d: %s", it->id, u.bad);
        else dp_fail(err, st, "iteration %d: the simulator scheduled an event in the past "
                     "(a bug: please report it with the plan)", it->id);
        goto out;
    }
    /* Deadlock: instructions left with nothing more to happen. */
    char waiting[600] = "", what[256];
    size_t used = 0;
    for (int r = 0; r < u.nr; r++) {
        if (u.ranks[r].pc >= it->ranks[r].n || used > sizeof waiting - 120) continue;
        pm_describe(it, r, u.ranks[r].pc, what, sizeof what);
        used += (size_t)snprintf(waiting + used, sizeof waiting - used, "%s%s", used ? "; " : "", what);
    }
    if (used) {
        st = dp_fail(err, DP_ERR_DEADLOCK, "iteration %d deadlocks: waiting: %s", it->id, waiting);
        goto out;
    }
    /* End: the last compute or transfer of every rank; then, with replicas, each stage's gradient
     * collective, once per stage over its replicas: serially after the slowest of them is done,
     * or its gradient part (grad_ms) in buckets during the stage's last compute op
     * (sim_grad_overlap_end) */
    int64_t end = t0_ns, stage_done[STAGE_MAX], last_start[STAGE_MAX], last_end[STAGE_MAX];
    for (int s2 = 0; s2 < cfg->pp; s2++) stage_done[s2] = last_start[s2] = last_end[s2] = t0_ns;
    for (int r = 0; r < u.nr; r++) {
        rank_state *R = &u.ranks[r];
        int s2 = r % cfg->pp;
        int64_t done = R->compute_free;
        for (int l = 0; l < SIM_LINKS; l++) {
            if (R->send_free[l] > done) done = R->send_free[l];
            if (R->recv_free[l] > done) done = R->recv_free[l];
        }
        if (done > stage_done[s2]) stage_done[s2] = done;
        if (done - t0_ns > res->pipeline_ns) res->pipeline_ns = done - t0_ns;
        if (R->last_start > last_start[s2]) last_start[s2] = R->last_start;
        if (R->compute_free > last_end[s2]) last_end[s2] = R->compute_free;
        res->busy_ns[s2] += R->busy / cfg->dp;
    }
    for (int s2 = 0; s2 < cfg->pp; s2++) {
        int64_t done = stage_done[s2];
        int64_t wait = cfg->straggler_share > 0
                           ? (int64_t)llround(cfg->straggler_share * (double)res->busy_ns[s2])
                           : 0;
        if (wait > 0) { /* the job's slowest GPU (models/straggler.h) */
            for (int rep = 0; u.sink && rep < cfg->dp; rep++)
                emit_op(&u, rep * cfg->pp + s2, SIM_OP_STRAGGLER, -1, 0, done, done + wait);
            done += wait;
        }
        if (cfg->allreduce_ms[s2] > 0) { /* over the stage's dp x cp ranks (0 with one) */
            int64_t ar = ms_to_ns(cfg->allreduce_ms[s2]);
            int64_t grad = ms_to_ns(fmin(cfg->grad_ms[s2], cfg->allreduce_ms[s2]));
            if (grad > 0 && cfg->grad_buckets[s2] > 0) {
                int64_t first, gend = sim_grad_overlap_end(last_start[s2], last_end[s2], grad,
                                                           cfg->grad_buckets[s2], &first);
                for (int rep = 0; u.sink && rep < cfg->dp; rep++)
                    emit_op(&u, rep * cfg->pp + s2, SIM_OP_ALLREDUCE, -1, 0, first, gend);
                if (gend > done) done = gend;
                ar -= grad;
            }
            for (int rep = 0; u.sink && ar > 0 && rep < cfg->dp; rep++) /* every rank takes part */
                emit_op(&u, rep * cfg->pp + s2, SIM_OP_ALLREDUCE, -1, 0, done, done + ar);
            done += ar;
        }
        if (cfg->optimizer_ms[s2] > 0) {
            int64_t step = ms_to_ns(cfg->optimizer_ms[s2]);
            for (int rep = 0; u.sink && rep < cfg->dp; rep++)
                emit_op(&u, rep * cfg->pp + s2, SIM_OP_OPTIMIZER, -1, 0, done, done + step);
            done += step;
        }
        if (done > end) end = done;
    }
    res->makespan_ns = end - t0_ns;
    memcpy(res->op_ns, u.op_ns, sizeof res->op_ns);
    st = sweep_memory(&u, res, err);
out:
    free(u.mem);
    free(u.meetings);
    pm_release(&u.pm);
    return st;
}
