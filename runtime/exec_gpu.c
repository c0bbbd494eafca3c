/*
 * exec_gpu.c — dprun's single-GPU plan executor: one process drives every stage of a GPT plan on
 * one GPU, a CUDA stream per stage, CUDA events for the plan's transfers and for the timestamps.
 *
 * The host walks the stages' instruction lists round-robin and enqueues each instruction on its
 * stage's stream; a RECV can be enqueued only once the matching SEND has been (the stream then
 * waits for the sender's event and copies the buffer), so the streams see the plan's order and
 * dependencies and nothing else. A pass in which no stage can move is a deadlock in the plan,
 * reported as such. Timestamps are CUDA events around every instruction, relative to an event all
 * streams wait for at the start of the iteration.
 *
 * Device memory: every micro-batch's buffers of an iteration are allocated before the iteration
 * (FREE is recorded but frees nothing until the iteration ends), so no allocation is timed.
 */
#include "exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DPRUN_CUDA
#include "../models/memory.h"
#include "cuda/layer_cuda.h"
#include "layer.h"

enum { KIND_ACT, KIND_GRAD };

typedef struct gchunk { /* the layers of one virtual stage */
    int layers, first, last;
    rt_cuda_layer *p, *g;
    rt_layer_shape shape;
} gchunk;

typedef struct gslot { /* buffers of one (micro-batch, virtual stage) */
    int B, S, split;
    size_t nh, na;
    double *in, *out, *dout, *din, *acts, *dlogits;
} gslot;

typedef struct gmsg { /* a SEND that a RECV may consume */
    int posted;
    void *ev;
    const double *src;
} gmsg;

typedef struct gtimed {
    int stage, op, mb, chunk;
    void *e0, *e1;
} gtimed;

typedef struct gctx {
    int pp, chunks, nv, hidden, vocab;
    rt_cuda **stream; /* one per stage */
    gchunk *ch;       /* nv */
    double *emb, *demb, *logits;
    size_t logits_cap;
    gslot *slots; /* n_mb * nv */
    gmsg *msgs;   /* 2 * n_mb * nv, by (kind, mb, receiving virtual stage) */
    gtimed *timed;              /* this iteration's timed instructions */
    size_t n_timed, cap_timed;
    size_t n_events;            /* entries of timed whose events exist (reused across iterations) */
    dp_err *err;
} gctx;

static dp_status no_memory(gctx *c, const char *what)
{
    return dp_fail(c->err, DP_ERR_NOMEM,
                   "dprun (cuda): out of device memory for %s: the single-GPU executor holds every "
                   "micro-batch of an iteration; try a plan with fewer or smaller micro-batches",
                   what);
}

/* The next timing slot; its two events are created once and reused by later iterations, so the
 * enqueue loop does no event creation after the first iteration. */
static gtimed *timed_new(gctx *c, int stage, int op, int mb, int chunk)
{
    if (dp_grow((void **)&c->timed, &c->cap_timed, c->n_timed + 1, sizeof *c->timed) != DP_OK)
        return NULL;
    gtimed *t = &c->timed[c->n_timed];
    if (c->n_timed == c->n_events) {
        t->e0 = rt_cuda_event_new();
        t->e1 = rt_cuda_event_new();
        if (!t->e0 || !t->e1) {
            rt_cuda_event_free(t->e0), rt_cuda_event_free(t->e1);
            return NULL;
        }
        c->n_events++;
    }
    t->stage = stage, t->op = op, t->mb = mb, t->chunk = chunk;
    c->n_timed++;
    return t;
}

static void free_slots(gctx *c, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        gslot *s = &c->slots[k];
        rt_cuda_free(s->in), rt_cuda_free(s->out), rt_cuda_free(s->dout), rt_cuda_free(s->din);
        rt_cuda_free(s->acts), rt_cuda_free(s->dlogits);
    }
    free(c->slots);
    c->slots = NULL;
    for (size_t k = 0; c->msgs && k < 2 * n; k++) rt_cuda_event_free(c->msgs[k].ev);
    free(c->msgs);
    c->msgs = NULL;
}

static dp_status alloc_slots(gctx *c, const plan_iter *it)
{
    size_t n = (size_t)it->n_mb * (size_t)c->nv;
    c->slots = calloc(n, sizeof *c->slots);
    c->msgs = calloc(2 * n, sizeof *c->msgs);
    if (!c->slots || !c->msgs) return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
    for (int mb = 0; mb < it->n_mb; mb++)
        for (int v = 0; v < c->nv; v++) {
            gslot *s = &c->slots[(size_t)mb * c->nv + v];
            const gchunk *ch = &c->ch[v];
            s->B = it->mb[mb].mbs;
            s->S = it->mb[mb].enc_len;
            s->nh = (size_t)s->B * s->S * c->hidden;
            s->na = rt_layer_acts_doubles(&ch->shape, s->B, s->S, 0);
            s->in = rt_cuda_alloc(s->nh), s->out = rt_cuda_alloc(s->nh);
            s->dout = rt_cuda_alloc(s->nh), s->din = rt_cuda_alloc(s->nh);
            s->acts = rt_cuda_alloc(s->na * (size_t)ch->layers);
            if (ch->last) s->dlogits = rt_cuda_alloc((size_t)s->B * s->S * c->vocab);
            if (!s->in || !s->out || !s->dout || !s->din || !s->acts || (ch->last && !s->dlogits))
                return no_memory(c, "the micro-batches' activations");
            size_t rows = (size_t)s->B * s->S * c->vocab;
            if (ch->last && rows > c->logits_cap) {
                rt_cuda_free(c->logits);
                c->logits = rt_cuda_alloc(rows);
                c->logits_cap = rows;
                if (!c->logits) return no_memory(c, "the logits");
            }
        }
    for (size_t k = 0; k < 2 * n; k++)
        if (!(c->msgs[k].ev = rt_cuda_event_new())) return no_memory(c, "transfer events");
    return DP_OK;
}

static void forward(gctx *c, rt_cuda *g, const gchunk *ch, gslot *s, int mb, int iteration)
{
    if (ch->first) rt_cuda_fill(g, s->in, s->nh, (unsigned)(mb * 131 + iteration), 1.0);
    const double *cur = s->in;
    for (int l = 0; l < ch->layers; l++) {
        double *dst = l == ch->layers - 1 ? s->out : l % 2 == 0 ? s->din : s->dout; /* scratch */
        rt_cuda_layer_fwd(g, &ch->p[l], s->B, s->S, cur, dst, s->acts + (size_t)l * s->na);
        cur = dst;
    }
    if (ch->layers == 0) rt_cuda_copy(g, s->out, s->in, s->nh);
    if (ch->last)
        rt_cuda_lm_head_fwd(g, s->out, c->emb, c->logits, s->dlogits, s->B * s->S, c->hidden,
                            c->vocab, mb);
}

static void backward_input(gctx *c, rt_cuda *g, const gchunk *ch, gslot *s)
{
    if (ch->last)
        rt_cuda_lm_head_bwd(g, s->dlogits, c->emb, s->out, s->dout, c->demb, s->B * s->S,
                            c->hidden, c->vocab);
    /* ping-pong between din and in (the layer inputs are kept in acts, so in is scratch by now),
     * ending in din at layer 0 */
    const double *cur = s->dout;
    for (int l = ch->layers - 1; l >= 0; l--) {
        double *dst = l % 2 == 0 ? s->din : s->in;
        rt_cuda_layer_bwd_input(g, &ch->p[l], &ch->g[l], s->B, s->S, cur, dst,
                                s->acts + (size_t)l * s->na);
        cur = dst;
    }
    if (ch->layers == 0) rt_cuda_copy(g, s->din, s->dout, s->nh);
}

static void backward_weight(rt_cuda *g, const gchunk *ch, gslot *s)
{
    for (int l = ch->layers - 1; l >= 0; l--)
        rt_cuda_layer_bwd_weight(g, &ch->g[l], s->B, s->S, s->acts + (size_t)l * s->na);
}

/* Enqueues instruction x of stage `stage`; returns 0 when it must wait for a SEND not yet
 * enqueued, 1 when enqueued, -1 on failure (c->err set). */
static int enqueue(gctx *c, const plan_iter *it, int stage, const plan_instr *x, int iteration)
{
    rt_cuda *g = c->stream[stage];
    int v = x->chunk * c->pp + stage;
    gslot *s = &c->slots[(size_t)x->mb * c->nv + v];
    const gchunk *ch = &c->ch[v];
    int kind = x->op == OP_SEND_ACT || x->op == OP_RECV_ACT ? KIND_ACT : KIND_GRAD;
    gmsg *in_msg = &c->msgs[((size_t)kind * it->n_mb + x->mb) * c->nv + v];
    if ((x->op == OP_RECV_ACT || x->op == OP_RECV_GRAD) && !in_msg->posted) return 0;
    if ((x->op == OP_SEND_ACT || x->op == OP_SEND_GRAD || x->op == OP_RECV_ACT ||
         x->op == OP_RECV_GRAD) &&
        (size_t)x->bytes != 2 * s->nh) {
        dp_fail(c->err, DP_ERR_INVALID, "%s mb %d on stage %d: the plan says %lld bytes, the "
                "micro-batch's shape needs %zu", plan_op_name(x->op), x->mb, stage,
                (long long)x->bytes, 2 * s->nh);
        return -1;
    }
    gtimed *t = timed_new(c, stage, x->op, x->mb, x->chunk);
    if (!t) {
        no_memory(c, "timing events");
        return -1;
    }
    rt_cuda_event_record(g, t->e0);
    switch (x->op) {
    case OP_F: forward(c, g, ch, s, x->mb, iteration); break;
    case OP_B:
        backward_input(c, g, ch, s);
        if (!s->split) backward_weight(g, ch, s);
        break;
    case OP_W: backward_weight(g, ch, s); break;
    case OP_SEND_ACT:
    case OP_SEND_GRAD: {
        int dst = v + (kind == KIND_ACT ? 1 : -1);
        gmsg *out = &c->msgs[((size_t)kind * it->n_mb + x->mb) * c->nv + dst];
        rt_cuda_event_record(g, out->ev);
        out->src = kind == KIND_ACT ? s->out : s->din;
        out->posted = 1;
        break;
    }
    case OP_RECV_ACT:
    case OP_RECV_GRAD:
        rt_cuda_wait_event(g, in_msg->ev);
        rt_cuda_copy(g, kind == KIND_ACT ? s->in : s->dout, in_msg->src, s->nh);
        break;
    default: break; /* FREE: buffers live until the iteration ends */
    }
    rt_cuda_event_record(g, t->e1);
    return 1;
}

static dp_status run_iteration(gctx *c, const plan_iter *it, int iteration, int record,
                               rt_record **rec, size_t *n_rec, size_t *cap_rec)
{
    dp_status st = alloc_slots(c, it);
    for (int r = 0; st == DP_OK && r < c->pp; r++)
        for (int i = 0; i < it->ranks[r].n; i++)
            if (it->ranks[r].ins[i].op == OP_W) {
                const plan_instr *x = &it->ranks[r].ins[i];
                c->slots[(size_t)x->mb * c->nv + x->chunk * c->pp + r].split = 1;
            }
    void *start = st == DP_OK ? rt_cuda_event_new() : NULL;
    if (st == DP_OK && !start) st = no_memory(c, "an event");
    if (st == DP_OK) {
        rt_cuda_event_record(c->stream[0], start);
        for (int r = 1; r < c->pp; r++) rt_cuda_wait_event(c->stream[r], start);
        int *pc = calloc((size_t)c->pp, sizeof *pc), left = 0;
        if (!pc) st = dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
        for (int r = 0; r < c->pp && pc; r++) left += it->ranks[r].n;
        while (st == DP_OK && left > 0) {
            int moved = 0;
            for (int r = 0; r < c->pp && st == DP_OK; r++)
                while (pc[r] < it->ranks[r].n) {
                    int k = enqueue(c, it, r, &it->ranks[r].ins[pc[r]], iteration);
                    if (k < 0) st = c->err->status; /* enqueue set c->err */
                    if (k <= 0) break;
                    pc[r]++, left--, moved = 1;
                }
            if (st == DP_OK && !moved) {
                char where[512] = "";
                size_t at = 0;
                for (int r = 0; r < c->pp && at < sizeof where; r++)
                    if (pc[r] < it->ranks[r].n) {
                        const plan_instr *x = &it->ranks[r].ins[pc[r]];
                        at += (size_t)snprintf(where + at, sizeof where - at,
                                               "%sstage %d instruction %d (%s mb %d)",
                                               at ? "; " : "", r, pc[r], plan_op_name(x->op), x->mb);
                    }
                st = dp_fail(c->err, DP_ERR_DEADLOCK, "iteration %d deadlocks: every stage waits "
                             "for a receive whose send comes later: %s", it->id, where);
            }
        }
        free(pc);
    }
    char why[256];
    for (int r = 0; r < c->pp; r++)
        if (rt_cuda_sync(c->stream[r], why, sizeof why) != 0 && st == DP_OK)
            st = dp_fail(c->err, DP_ERR_IO, "dprun (cuda): iteration %d, stage %d: %s", it->id, r,
                         why);
    for (size_t i = 0; st == DP_OK && record && i < c->n_timed; i++) {
        const gtimed *t = &c->timed[i];
        if (dp_grow((void **)rec, cap_rec, *n_rec + 1, sizeof **rec) != DP_OK) {
            st = dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
            break;
        }
        (*rec)[(*n_rec)++] = (rt_record){iteration, t->stage, 0, t->op, t->mb, t->chunk,
                                         rt_cuda_event_ms(start, t->e0) * 1e3,
                                         rt_cuda_event_ms(start, t->e1) * 1e3};
    }
    rt_cuda_event_free(start);
    c->n_timed = 0;
    free_slots(c, (size_t)it->n_mb * (size_t)c->nv);
    return st;
}

static dp_status setup(gctx *c, const model_spec *m)
{
    char why[256];
    c->stream = calloc((size_t)c->pp, sizeof *c->stream);
    c->ch = calloc((size_t)c->nv, sizeof *c->ch);
    if (!c->stream || !c->ch) return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
    for (int r = 0; r < c->pp; r++)
        if (!(c->stream[r] = rt_cuda_open(0, why, sizeof why)))
            return dp_fail(c->err, DP_ERR_IO, "dprun (cuda): %s", why);
    for (int v = 0; v < c->nv; v++) {
        gchunk *ch = &c->ch[v];
        int enc, dec;
        memory_stage_layers(m, v, c->nv, &enc, &dec);
        ch->first = v == 0;
        ch->last = v == c->nv - 1;
        ch->shape = (rt_layer_shape){m->hidden, m->heads, m->kv_channels, m->ffn, 1, 0};
        ch->p = calloc((size_t)enc + 1, sizeof *ch->p);
        ch->g = calloc((size_t)enc + 1, sizeof *ch->g);
        if (!ch->p || !ch->g) return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
        ch->layers = enc; /* teardown frees this many */
        for (int l = 0; l < enc; l++) {
            rt_layer_params host;
            if (rt_layer_params_alloc(&host, &ch->shape) != 0)
                return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
            rt_layer_params_init(&host, &ch->shape, (unsigned)(v * 1000 + l));
            rt_cuda_layer d = {m->hidden, m->heads, m->kv_channels, m->ffn, 1, NULL, host.count};
            ch->p[l] = ch->g[l] = d;
            ch->p[l].block = rt_cuda_alloc(host.count);
            ch->g[l].block = rt_cuda_alloc(host.count);
            int bad = !ch->p[l].block || !ch->g[l].block ||
                      rt_cuda_put(ch->p[l].block, host.block, host.count) != 0;
            rt_layer_params_free(&host);
            if (bad) return no_memory(c, "the parameters");
            rt_cuda_zero(c->stream[0], ch->g[l].block, host.count);
        }
    }
    size_t ne = (size_t)m->vocab * m->hidden;
    c->emb = rt_cuda_alloc(ne), c->demb = rt_cuda_alloc(ne);
    if (!c->emb || !c->demb) return no_memory(c, "the embedding");
    rt_cuda_fill(c->stream[0], c->emb, ne, 99, 0.04);
    rt_cuda_zero(c->stream[0], c->demb, ne);
    return rt_cuda_sync(c->stream[0], why, sizeof why) == 0
               ? DP_OK
               : dp_fail(c->err, DP_ERR_IO, "dprun (cuda): %s", why);
}

static void teardown(gctx *c)
{
    for (int v = 0; c->ch && v < c->nv; v++) {
        for (int l = 0; l < c->ch[v].layers && c->ch[v].p; l++)
            rt_cuda_free(c->ch[v].p[l].block), rt_cuda_free(c->ch[v].g[l].block);
        free(c->ch[v].p), free(c->ch[v].g);
    }
    free(c->ch);
    rt_cuda_free(c->emb), rt_cuda_free(c->demb), rt_cuda_free(c->logits);
    for (int r = 0; c->stream && r < c->pp; r++) rt_cuda_close(c->stream[r]);
    free(c->stream);
    for (size_t i = 0; i < c->n_events; i++)
        rt_cuda_event_free(c->timed[i].e0), rt_cuda_event_free(c->timed[i].e1);
    free(c->timed);
}

dp_status rt_execute_gpu(const rt_opts *o, rt_record **rec, size_t *n_rec, dp_err *err)
{
    const plan *pl = o->pl;
    const model_spec *m = o->model;
    if (m->arch != ARCH_GPT || pl->h.dp != 1)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "the single-GPU executor runs GPT plans without "
                       "data parallelism (this plan: %s, dp %d)", m->name, pl->h.dp);
    gctx c = {0};
    c.err = err;
    c.pp = pl->h.pp, c.chunks = pl->h.chunks, c.nv = c.pp * c.chunks;
    c.hidden = m->hidden, c.vocab = m->vocab;
    dp_status st = setup(&c, m);
    int n_it = o->iterations > 0 && o->iterations < pl->n_it ? o->iterations : pl->n_it;
    size_t cap = 0;
    *rec = NULL, *n_rec = 0;
    for (int w = 0; st == DP_OK && w < o->warmup && n_it > 0; w++)
        st = run_iteration(&c, &pl->it[0], 0, 0, rec, n_rec, &cap);
    for (int i = 0; st == DP_OK && i < n_it; i++)
        st = run_iteration(&c, &pl->it[i], pl->it[i].id, 1, rec, n_rec, &cap);
    teardown(&c);
    return st;
}

#else

dp_status rt_execute_gpu(const rt_opts *o, rt_record **rec, size_t *n_rec, dp_err *err)
{
    (void)o, (void)rec, (void)n_rec;
    return dp_fail(err, DP_ERR_UNSUPPORTED, "this dprun was built without CUDA (no nvcc or cuBLAS "
                   "was found at build time): --backend cuda is not available");
}

#endif
