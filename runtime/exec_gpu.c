/*
 * exec_gpu.c — dprun's cuda backend: GPT and T5 plans on GPUs, in two modes (exec.h). T5 as on
 * the cpu backend: encoder stages first, then decoder stages whose transfers carry the encoder
 * output (and its gradient) along.
 *
 * A process drives some of the plan's stages: every stage of replica 0 (single-GPU mode), or the
 * one stage of its rank (multi-GPU mode: one GPU each, placed by exec.h rt_place_of; under tensor
 * parallelism its share of each layer, rt_layer_shape_tp, under context parallelism its pieces
 * of each micro-batch, rt_cp; the groups' collectives go over their NCCL communicators on the
 * stage's stream, layer_cuda.h rt_cuda_tp). Each driven
 * stage has a CUDA stream. The executor loop (exec_loop.h, the cpu backend's too) walks the
 * driven stages' instruction lists round-robin, and this backend's medium enqueues each
 * instruction on its stage's stream, so that the streams see the plan's order and dependencies
 * and nothing else:
 *   - a transfer between two stages of this process is a CUDA event: the RECV is ready only once
 *     the matching SEND has been enqueued, and its stream then waits for the sender's event and
 *     copies the buffer (a pass in which no stage can move is a deadlock, which the loop reports);
 *   - a transfer to a stage of another rank goes over NCCL on a stream of its own per directed
 *     link (this stage to the next for activations, to the previous for gradients, and back),
 *     each link its own two-rank communicator: NCCL runs one communicator's operations in
 *     enqueue order, so the two directions and the two neighbours must not share one, or a
 *     receive posted early would hold up a send behind it. The SEND's link stream waits for the
 *     stage to reach the SEND; the RECV is posted when the stage reaches it, and the F or B
 *     that consumes it waits for its arrival. The plan's receive order is its sender's send
 *     order (scheduler/schedule.c, checked by plan_validate), which is the order NCCL needs.
 * Timestamps are CUDA events around every instruction (an F or B from the arrival of what it
 * consumes, as on the cpu backend; a remote SEND or RECV from the moment the stage reaches it to
 * its completion), relative to an event recorded at the start of each iteration, after an MPI
 * barrier in multi-GPU mode.
 *
 * Device memory: every micro-batch's buffers of an iteration are allocated before the iteration
 * (FREE is recorded but frees nothing until the iteration ends), so no allocation is timed.
 * Failures: the single-GPU mode returns them; in the multi-GPU mode every rank agrees on the
 * set-up before NCCL starts, and a failure or a stall past --timeout after that ends the job
 * (MPI_Abort) with a message from the rank that saw it, as the cpu backend does.
 */
#include "exec.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef DPRUN_CUDA
#include <limits.h>
#include <mpi.h>
#include <time.h>
#include <unistd.h>

#include "../models/placement.h"
#include "../scheduler/plan_machine.h"
#include "cuda/layer_cuda.h"
#include "engine.h"
#include "exec_loop.h"
#include "layer.h"
#include "rt_mpi.h"
#ifdef DPRUN_NCCL
#include "cuda/nccl_link.h"
#endif

enum { KIND_ACT, KIND_GRAD };
/* The multi-GPU mode's links of this rank; in each link's communicator the sender is rank 0. */
/* A process's directed links to its pipeline neighbours: per kind, sending or receiving, towards
 * a higher stage or a lower one (a loop sends each kind one way, a V both: chunk 0 down the
 * stages, chunk 1 back up). */
enum { N_LINKS = 8 };
static int link_of(int kind, int send, int peer_higher)
{
    return (kind == KIND_ACT ? 0 : 4) + (send ? 0 : 2) + (peer_higher ? 1 : 0);
}

typedef struct gchunk { /* the layers of one virtual stage */
    int layers;
    stage_placement place; /* what it runs (embedding, head, T5 decoder layers) and what its
                            * transfers carry (placement.h) */
    rt_cuda_layer *p, *g;
    rt_layer_shape shape;
    void **pshard, **gshard; /* ZeRO-2/3: this rank's shard of each layer's parameters (the
                              * elements the layer reads: fp64, or the bf16 copy) and of its
                              * reduced gradients; NULL otherwise */
    size_t shard;            /* ... elements of each: a layer's count / dp, rounded up */
} gchunk;

/* Buffers of one (micro-batch, virtual stage). What a stage sends and receives is
 * placement_wire_parts': a transfer of both parts (a T5 decoder stage's hidden state and the
 * encoder output, or their gradients) goes through one wire buffer, [hidden | enc], packed at
 * the end of F and B and unpacked at their start; a single part moves from its own buffer. */
typedef struct gslot {
    int B, S, Se;                  /* S: this stage's length; Se: the encoder's (decoders) */
    size_t nh, ne;                 /* elements: this rank's tokens x H (with SP, B*S / tp of
                                    * them), B*Se*H */
    size_t na;                     /* bytes of one layer's saved activations (layout.h) */
    void *in, *out, *dout, *din, *acts, *dlogits; /* elements of the run's dtype */
    void *head_in;                 /* last virtual stage under SP: the whole output, (B*S, H) */
    recompute_mode recompute; /* what its B reruns (plan_machine.h pm_recompute) */
    void *ckpt, *rerun; /* full recompute: the layers' inputs (layers x nh), a rerun's output (nh);
                         * acts then holds one layer's activations, not every layer's */
    void *enc, *denc, *wire[2];    /* decoder stages */
    void *arrived[2]; /* a remote RECV's completion event, per kind; NULL when local */
    rt_seqs seqs[2];  /* varlen: the encoder's (GPT's) and decoder's sequences (exec.h) */
    int *seq_store[2];
    rt_batch mb;      /* what the layers see: B, S, Se, the sequences and the CP map */
    rt_cp cp;         /* under context parallelism this rank's map of the micro-batch (size 0:
                       * none), rt_cp_free's */
    int n;            /* the micro-batch's tokens here: B*S, or the map's n_local */
} gslot;

typedef struct gmsg { /* a local SEND that a RECV may consume */
    int posted;
    void *ev;
    const void *src;
    size_t n; /* elements */
} gmsg;

typedef struct gtimed {
    int stage, op, mb, chunk;
    void *e0, *e1;
} gtimed;

/* A tensor- or context-parallel group's hooks' context (layer_cuda.h rt_cuda_tp): the executor,
 * and which of its communicators. */
struct gctx;
typedef struct ggroup {
    struct gctx *c;
    int cp; /* 0: the tp group's communicator; 1: the cp group's */
} ggroup;

typedef struct gctx {
    const rt_opts *o;
    int pp, chunks, nv, hidden, vocab;
    rt_dtype dt;               /* what the layers compute in and the wire carries (layout.h) */
    size_t eb;                 /* bytes of one activation element: rt_dtype_act_bytes(dt) */
    int multi;                 /* multi-GPU mode: this process drives one stage */
    int rank, stage, replica;  /* multi-GPU mode: this rank's place (exec.h rt_place) */
    int tp, tp_rank;           /* its tensor-parallel group's size and its index there */
    int cp, cp_rank;           /* its context-parallel group's (layer.h rt_cp) */
    int shards;                /* the parts a layer's tokens are cut into over the tp group:
                                * placement_token_shards (tp with SP, else 1) */
    int zranks, zrank;         /* the ranks a stage's gradients are summed over (its replicas and
                                * cp ranks, the same tp rank of each) and this one's index there */
    int vocab_local;           /* the LM head's rows here: vocab / tp */
    rt_cuda_tp tpg, cpg;       /* the groups' collectives (NCCL, on the stage's stream) */
    ggroup tp_hooks, cp_hooks; /* ... their context */
    char host[64];
    int iteration;             /* for messages */
    int seed;                  /* the inputs' seed: the iteration's id (warm-up runs: 0) */
    const plan_iter *it;       /* the iteration being run */
    plan_machine pm;           /* the plan's semantics for it */
    unsigned char *drives;     /* per stage: 1 where this process drives it */
    gtimed *cur;               /* the instruction being enqueued: its timing events */
    int cur_remote;            /* ... is a transfer over NCCL, its end on the link stream */
    rt_result *res;            /* where measured runs' records go */
    size_t cap_rec;            /* res->rec's capacity */
    int recording;             /* the run is measured: count its reruns */
    long rerun[2];             /* layer forwards (full), attention cores (selective) rerun */
    rt_cuda **stream;          /* per stage; NULL for the stages of other ranks */
    gchunk *ch;                /* nv; layers only for driven virtual stages */
    void *emb, *demb, *logits; /* the tied embedding's parameter and gradient blocks; scratch */
    size_t logits_cap;         /* elements */
    gslot *slots;              /* n_mb * nv */
    gmsg *msgs;                /* 2 * n_mb * nv, by (kind, mb, receiving virtual stage) */
    gtimed *timed;             /* this iteration's timed instructions */
    size_t n_timed, cap_timed;
    size_t n_events;           /* entries of timed whose events exist (reused across iterations) */
    void *start;               /* the iteration's time origin */
    rt_cuda *link_stream[N_LINKS];
    /* ZeRO-2/3 over the stage's replicas (multi-GPU mode; exec.h): */
    int zero;                  /* the plan's ZeRO stage where it shards (2 or 3, dp > 1), else 0 */
    rt_cuda *zstream;          /* every operation on the replicas' communicator, in order */
    void *zscratch;            /* one shard of reduced gradients (the largest chunk's) */
    void *zmark, *zdone[2], *zback; /* events: the stage's point a ZeRO operation starts after;
                                     * a layer's gather done (by the layer's parity); a ZeRO step
                                     * done, which the stage waits for */
#ifdef DPRUN_NCCL
    rt_nccl *world, *replicas, *tpc, *cpc, *link[N_LINKS];
#endif
    dp_err *err;
} gctx;

static int drives(const gctx *c, int stage) { return !c->multi || stage == c->stage; }
/* The stage (device) of virtual stage v, as the plan places its chunks (a loop or a V). */
static int stage_of_v(const gctx *c, int v)
{
    return placement_device((placement_kind)c->o->pl->h.placement, v, c->pp);
}

static dp_status no_memory(gctx *c, const char *what)
{
    return dp_fail(c->err, DP_ERR_NOMEM,
                   "dprun (cuda): out of device memory for %s: the executor holds every "
                   "micro-batch of an iteration; try a plan with fewer or smaller micro-batches",
                   what);
}

/* Multi-GPU mode, after set-up: a failure ends the job (the other ranks would wait in NCCL). */
static void die(const gctx *c, const char *what)
{
    fprintf(stderr, "dprun: rank %d (stage %d, replica %d, tp rank %d, cuda) on %s: iteration %d: "
            "%s\n", c->rank, c->stage, c->replica, c->tp_rank, c->host, c->iteration, what);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3); /* not reached */
}

/* A collective over NCCL whose failure ends the job: `call` returns non-zero and fills `why`. */
#ifdef DPRUN_NCCL
static void nccl_check(const gctx *c, int rc, const char *why)
{
    if (rc != 0) die(c, why);
}
#define NCCL_DO(c, call) do { char why[256]; nccl_check(c, call, why); } while (0)
#else
#define NCCL_DO(c, call) die(c, "this dprun was built without NCCL")
#endif

#define MPI_TRY(c, call) RT_MPI_TRY(die, c, call) /* a failed MPI call ends the job, named */

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
    for (size_t k = 0; c->slots && k < n; k++) {
        gslot *s = &c->slots[k];
        rt_cuda_free(s->in), rt_cuda_free(s->out), rt_cuda_free(s->dout), rt_cuda_free(s->din);
        rt_cuda_free(s->acts), rt_cuda_free(s->dlogits), rt_cuda_free(s->enc);
        rt_cuda_free(s->head_in);
        rt_cuda_free(s->ckpt), rt_cuda_free(s->rerun);
        rt_cuda_free(s->denc), rt_cuda_free(s->wire[0]), rt_cuda_free(s->wire[1]);
        free(s->seq_store[0]), free(s->seq_store[1]);
        rt_cp_free(&s->cp);
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
            if (!drives(c, stage_of_v(c, v))) continue;
            gslot *s = &c->slots[(size_t)mb * c->nv + v];
            const gchunk *ch = &c->ch[v];
            s->B = it->mb[mb].mbs;
            s->S = ch->place.decoder ? it->mb[mb].dec_len : it->mb[mb].enc_len;
            s->Se = ch->place.decoder ? it->mb[mb].enc_len : 0;
            s->ne = (size_t)s->B * s->Se * c->hidden;
            s->na = rt_layer_acts_bytes(&ch->shape, s->B, s->S, s->Se, c->dt);
            for (int side = 0; side < 2; side++)
                if (rt_mb_seqs(it, &it->mb[mb], side, &s->seqs[side], &s->seq_store[side]) != 0)
                    return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
            const rt_seqs *own = &s->seqs[ch->place.decoder ? 1 : 0];
            s->n = s->B * s->S;
            if (c->cp > 1) { /* this rank's pieces of the micro-batch (rt_plan_check_layout checked
                              * that they split) */
                int bad = 0, bad_len = 0;
                int rc = rt_cp_split_batch(own->n ? own : NULL, s->B, s->S, c->cp, c->cp_rank,
                                           ch->shape.causal, &s->cp, &bad, &bad_len);
                if (rc < 0) return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
                if (rc > 0) return dp_fail(c->err, DP_ERR_INVALID, "a micro-batch that context "
                                           "parallelism cannot split (token %d, a piece of %d)",
                                           bad, bad_len);
                s->n = s->cp.n_local;
            }
            s->mb = (rt_batch){s->B, s->S, s->Se, own->n ? own : NULL,
                               ch->place.decoder && s->seqs[0].n ? &s->seqs[0] : NULL,
                               c->cp > 1 ? &s->cp : NULL};
            s->nh = (size_t)s->n / (size_t)c->shards * c->hidden; /* this rank's tokens */
            size_t bh = s->nh * c->eb, be = s->ne * c->eb;
            s->in = rt_cuda_alloc(bh), s->out = rt_cuda_alloc(bh);
            s->dout = rt_cuda_alloc(bh), s->din = rt_cuda_alloc(bh);
            s->recompute = pm_recompute(c->o->pl, it, mb);
            int full = s->recompute == RECOMPUTE_FULL && ch->layers > 0;
            s->acts = rt_cuda_alloc(s->na * (size_t)(full ? 1 : ch->layers));
            size_t rows = (size_t)s->n * c->vocab_local; /* the head's logits here */
            if (ch->place.head) s->dlogits = rt_cuda_alloc(rows * c->eb);
            if (ch->place.head && c->shards > 1) /* SP: the head reads every token */
                s->head_in = rt_cuda_alloc(bh * (size_t)c->shards);
            int bad = !s->in || !s->out || !s->dout || !s->din || !s->acts ||
                      (ch->place.head && (!s->dlogits || (c->shards > 1 && !s->head_in)));
            if (full) {
                s->ckpt = rt_cuda_alloc(bh * (size_t)ch->layers), s->rerun = rt_cuda_alloc(bh);
                bad |= !s->ckpt || !s->rerun;
            }
            if (ch->place.decoder) {
                s->enc = rt_cuda_alloc(be), s->denc = rt_cuda_alloc(be);
                s->wire[KIND_ACT] = rt_cuda_alloc(bh + be);
                s->wire[KIND_GRAD] = rt_cuda_alloc(bh + be);
                bad |= !s->enc || !s->denc || !s->wire[KIND_ACT] || !s->wire[KIND_GRAD];
            }
            if (bad) return no_memory(c, "the micro-batches' activations");
            if (ch->place.head && rows > c->logits_cap) {
                rt_cuda_free(c->logits);
                c->logits = rt_cuda_alloc(rows * rt_dtype_stat_bytes(c->dt));
                c->logits_cap = rows;
                if (!c->logits) return no_memory(c, "the logits");
            }
        }
    return DP_OK;
}

/* Where a transfer of `kind` is read from (send) or lands (receive) on slot s, and its size in
 * elements. */
static void *wire_of(const gchunk *ch, gslot *s, int kind, int send, size_t *n)
{
    placement_wire w = placement_wire_parts(&ch->place, kind == KIND_GRAD, send);
    *n = (w.hidden ? s->nh : 0) + (w.enc ? s->ne : 0);
    if (w.hidden && w.enc) return s->wire[kind]; /* [hidden | enc], packed and unpacked */
    if (w.enc) return kind == KIND_ACT ? s->enc : s->denc;
    return kind == KIND_ACT ? (send ? s->out : s->in) : (send ? s->din : s->dout);
}

/* Whether a transfer of `kind` holds both parts (placement_wire_parts), [hidden | enc] in the
 * slot's wire buffer, packed at the end of F and B and unpacked at their start. */
static int packed(const gchunk *ch, int kind, int send)
{
    placement_wire w = placement_wire_parts(&ch->place, kind == KIND_GRAD, send);
    return w.hidden && w.enc;
}

/* [a | b] to or from a decoder stage's wire buffer (eb bytes per element). */
static void pack(rt_cuda *g, gslot *s, int kind, const void *a, const void *b, size_t eb)
{
    rt_cuda_copy(g, s->wire[kind], a, s->nh * eb);
    rt_cuda_copy(g, (char *)s->wire[kind] + s->nh * eb, b, s->ne * eb);
}

static void unpack(rt_cuda *g, gslot *s, int kind, void *a, void *b, size_t eb)
{
    rt_cuda_copy(g, a, s->wire[kind], s->nh * eb);
    rt_cuda_copy(g, b, (const char *)s->wire[kind] + s->nh * eb, s->ne * eb);
}

/* Layer l's saved activations in a slot's block (full recompute: the one layer's at a time), and
 * its input kept under full recompute. */
static void *acts_at(const gslot *s, int l) { return (char *)s->acts + (s->ckpt ? 0 : (size_t)l * s->na); }
static void *ckpt_at(const gctx *c, const gslot *s, int l) { return (char *)s->ckpt + (size_t)l * s->nh * c->eb; }

/* The tensor- and context-parallel groups' collectives (layer_cuda.h rt_cuda_tp), over NCCL on
 * the stream of the layer that calls them: every rank of a group enqueues them in the same order.
 * A group's hooks take its ggroup. */
#ifdef DPRUN_NCCL
static rt_nccl *group_comm(const ggroup *gr) { return gr->cp ? gr->c->cpc : gr->c->tpc; }
#endif

static void group_allreduce(void *vg, rt_cuda *g, void *buf, size_t n, rt_elem e, int op)
{
    ggroup *gr = vg;
    (void)g, (void)buf, (void)n, (void)e, (void)op;
    NCCL_DO(gr->c, rt_nccl_allreduce(group_comm(gr), buf, n, e, op, g, why, sizeof why));
}

static void group_allgather(void *vg, rt_cuda *g, const void *mine, void *all, size_t n, rt_elem e)
{
    ggroup *gr = vg;
    (void)g, (void)mine, (void)all, (void)n, (void)e;
    NCCL_DO(gr->c, rt_nccl_allgather(group_comm(gr), mine, all, n * rt_elem_bytes(e), g, why,
                                     sizeof why));
}

static void group_reduce_scatter(void *vg, rt_cuda *g, const void *all, void *mine, size_t n, rt_elem e)
{
    ggroup *gr = vg;
    (void)g, (void)all, (void)mine, (void)n, (void)e;
    NCCL_DO(gr->c, rt_nccl_reduce_scatter(group_comm(gr), all, mine, n, e, g, why, sizeof why));
}

static const rt_cuda_tp *cp_of(const gctx *c) { return c->cp > 1 ? &c->cpg : NULL; }
static const rt_cuda_tp *tp_of(const gctx *c) { return c->tp > 1 ? &c->tpg : NULL; }

/* ---- ZeRO-2/3 over the stage's replicas (multi-GPU mode), as the cpu backend runs them (exec.h):
 * ZeRO-3 gathers each layer's parameters for every forward and backward, one layer ahead: the
 * gather of the next layer runs on the ZeRO stream while the stage stream computes the layer
 * before (FSDP's prefetch); ZeRO-2 and 3 reduce-scatter a micro-batch's gradients when its B or W
 * completes them, adding this rank's share to its shard, inside that op's time; ZeRO-2 gathers
 * the parameters after the iteration. Every operation on the replicas' communicator runs on the
 * ZeRO stream, in the same order on every replica (rt_plan_check_layout checks they run the same
 * sequence), as NCCL needs. Whole blocks stay allocated: the runtime times, it does not save
 * memory. Failures end the job (multi-GPU mode). */

/* The ZeRO stream starts after the stage stream's work enqueued so far. */
static void zero_follow(gctx *c, rt_cuda *g)
{
    rt_cuda_event_record(g, c->zmark);
    rt_cuda_wait_event(c->zstream, c->zmark);
}

/* Where the elements a layer reads start in its parameter block (the bf16 copy, or fp64). */
static void *read_part(const gctx *c, const rt_cuda_layer *p)
{
    return (char *)p->block + rt_param_copy_offset(p->count, c->dt);
}

/* Layer l's parameters gathered from the replicas' shards, done when c->zdone[l & 1] is. */
static void zero3_gather(gctx *c, rt_cuda *g, const gchunk *ch, int l)
{
    (void)ch; /* (without NCCL) */
    zero_follow(c, g); /* after every earlier reader of the block */
    NCCL_DO(c, rt_nccl_allgather(c->replicas, ch->pshard[l], read_part(c, &ch->p[l]),
                                 ch->shard * rt_param_read_bytes(c->dt), c->zstream, why,
                                 sizeof why));
    rt_cuda_event_record(c->zstream, c->zdone[l & 1]);
}

/* The cuda device's collectives (engine.h rt_grad_ops) on chunk k's layer l: the partial sums
 * on the stage's stream g, the replicas' on the ZeRO stream after the stage's work so far. This
 * backend runs no MoE layer (rt_check_moe), so its partial sums are the norms' under SP. */
typedef struct gpu_grads {
    gctx *c;
    rt_cuda *g;
} gpu_grads;

static void grad_sum_group(void *v, int k, int l, size_t off, size_t len, int group)
{
    gpu_grads *q = v;
    gctx *c = q->c;
    if (group != RT_GRAD_SUM_TP) die(c, "an expert group's gradients on the cuda backend");
    char *at = (char *)c->ch[k].g[l].block + off * rt_dtype_stat_bytes(c->dt);
    c->tpg.allreduce(c->tpg.ctx, q->g, at, len, rt_elem_stat(c->dt), RT_TP_SUM);
}

static void grad_reduce_scatter(void *v, int k, int l)
{
    gpu_grads *q = v;
    gctx *c = q->c;
    gchunk *ch = &c->ch[k];
    if (l == 0) zero_follow(c, q->g); /* once, after the B or W and the partial sums (the engine
                                       * reduce-scatters layer 0 first, after every sum) */
    NCCL_DO(c, rt_nccl_reduce_scatter(c->replicas, ch->g[l].block, c->zscratch, ch->shard,
                                      rt_elem_stat(c->dt), c->zstream, why, sizeof why));
    rt_cuda_add_grads(c->zstream, ch->gshard[l], c->zscratch, ch->shard, c->dt);
    rt_cuda_zero(c->zstream, ch->g[l].block, rt_grad_block_bytes(ch->shard * c->zranks, c->dt));
}

static void grad_allreduce(void *v, int k, int l)
{
    gpu_grads *q = v;
    gctx *c = q->c;
    (void)k, (void)l; /* (without NCCL) */
    NCCL_DO(c, rt_nccl_allreduce(c->replicas, c->ch[k].g[l].block, c->ch[k].g[l].count,
                                 rt_elem_stat(c->dt), RT_TP_SUM, q->g, why, sizeof why)); /* (no
                                                                     * ZeRO: the stage's stream) */
}

static void grad_gather_params(void *v, int k, int l)
{
    gpu_grads *q = v;
    gctx *c = q->c;
    (void)k, (void)l; /* (without NCCL) */
    NCCL_DO(c, rt_nccl_allgather(c->replicas, c->ch[k].pshard[l], read_part(c, &c->ch[k].p[l]),
                                 c->ch[k].shard * rt_param_read_bytes(c->dt), c->zstream, why,
                                 sizeof why));
}

static const rt_grad_ops GPU_GRADS = {grad_sum_group, grad_reduce_scatter, grad_allreduce,
                                      grad_gather_params, NULL};

/* ZeRO-2/3: the gradients a B or W left in chunk v's blocks (engine.h rt_grads_zero_reduce); the
 * stage stream waits for it. */
static void zero_reduce(gctx *c, rt_cuda *g, int v)
{
    gpu_grads q = {c, g};
    rt_grads_zero_reduce(&GPU_GRADS, &q, v, &c->ch[v].shape, c->ch[v].layers, c->tp, c->shards > 1);
    rt_cuda_event_record(c->zstream, c->zback);
    rt_cuda_wait_event(g, c->zback);
}

/* The input embedding's lookups of this rank's tokens (exec.c fill_input: a hash of each token's
 * index in the whole micro-batch, so that every layout trains on the same numbers; under SP its
 * 1/tp of the cp rank's tokens, under CP the cp rank's pieces), a fill per run of consecutive
 * tokens. */
static size_t input_token(const gctx *c, const gslot *s, size_t n, size_t t)
{
    return (size_t)rt_input_token(c->cp > 1 ? &s->cp : NULL, c->shards, c->tp_rank, (int)n, (int)t);
}

static void fill_input(const gctx *c, rt_cuda *g, gslot *s, unsigned seed)
{
    size_t H = (size_t)c->hidden, n = s->nh / H;
    for (size_t t = 0; t < n;) {
        size_t run = 1, at = input_token(c, s, n, t);
        while (t + run < n && input_token(c, s, n, t + run) == at + run) run++;
        rt_cuda_fill_at(g, (char *)s->in + t * H * c->eb, run * H, at * H, c->dt, seed, 1.0);
        t += run;
    }
}

/* ---- The cuda device's layer operations (engine.h rt_pass_ops) on one (micro-batch, chunk), each
 * enqueued on the stage's stream g */

typedef struct gpu_pass {
    gctx *c;
    rt_cuda *g;
    const gchunk *ch;
    gslot *s;
} gpu_pass;

static void layer_gather(void *v, int l)
{
    gpu_pass *p = v;
    if (p->c->zero >= 3) zero3_gather(p->c, p->g, p->ch, l);
}

static void layer_gather_wait(void *v, int l)
{
    gpu_pass *p = v;
    if (p->c->zero >= 3) rt_cuda_wait_event(p->g, p->c->zdone[l & 1]);
}

static void layer_keep_input(void *v, int l, const void *x)
{
    gpu_pass *p = v;
    if (p->s->ckpt) rt_cuda_copy(p->g, ckpt_at(p->c, p->s, l), x, p->s->nh * p->c->eb);
}

static void layer_forward(void *v, int l, const void *x, void *y)
{
    gpu_pass *p = v;
    rt_cuda_layer_fwd(p->g, &p->ch->p[l], &p->s->mb, x, y, acts_at(p->s, l), p->s->enc);
}

static void layer_rerun(void *v, int l)
{
    gpu_pass *p = v;
    gslot *s = p->s;
    if (rt_cuda_layer_rerun(p->g, &p->ch->p[l], &s->mb, s->recompute,
                            s->ckpt ? ckpt_at(p->c, s, l) : NULL, s->rerun, acts_at(s, l), s->enc))
        p->c->rerun[s->ckpt ? 0 : 1] += p->c->recording;
}

static void layer_backward_input(void *v, int l, const void *dy, void *dx)
{
    gpu_pass *p = v;
    rt_cuda_layer_bwd_input(p->g, &p->ch->p[l], &p->ch->g[l], &p->s->mb, dy, dx, acts_at(p->s, l),
                            p->s->denc);
}

static void layer_backward_weight(void *v, int l)
{
    gpu_pass *p = v;
    rt_cuda_layer_bwd_weight(p->g, &p->ch->g[l], &p->s->mb, acts_at(p->s, l), p->s->enc);
}

static void layer_copy(void *v, void *dst, const void *src)
{
    gpu_pass *p = v;
    rt_cuda_copy(p->g, dst, src, p->s->nh * p->c->eb);
}

static const rt_pass_ops GPU_PASS = {layer_gather, layer_gather_wait, layer_keep_input,
                                     layer_forward, layer_rerun, layer_backward_input,
                                     layer_backward_weight, layer_copy};

static void forward(gctx *c, rt_cuda *g, const gchunk *ch, gslot *s, int mb, int iteration)
{
    if (ch->place.first_decoder) /* the target embedding; the encoder output has arrived in enc */
        fill_input(c, g, s, (unsigned)(mb * 977 + iteration));
    else if (ch->place.embedding) /* the input embedding */
        fill_input(c, g, s, (unsigned)(mb * 131 + iteration));
    else if (packed(ch, KIND_ACT, 0))
        unpack(g, s, KIND_ACT, s->in, s->enc, c->eb);
    gpu_pass p = {c, g, ch, s};
    rt_pass_forward(&GPU_PASS, &p, ch->layers, s->in, s->out, s->din, s->dout); /* (scratch) */
    if (ch->place.head) { /* the tied embedding, split by vocabulary under TP, and the loss */
        if (s->head_in) /* SP: the head reads every token (of this cp rank) */
            c->tpg.allgather(c->tpg.ctx, g, s->out, s->head_in, s->nh, rt_elem_act(c->dt));
        rt_cuda_lm_head_fwd(g, tp_of(c), s->mb.cp, s->head_in ? s->head_in : s->out, c->emb,
                            c->logits, s->dlogits, s->n, c->hidden, c->vocab, mb, c->dt);
    } else if (packed(ch, KIND_ACT, 1))
        pack(g, s, KIND_ACT, s->out, s->enc, c->eb);
}

/* A B: the input gradients, last layer first, and with `weights` each layer's weight gradients
 * right after its input gradients (the cpu backend's order; a full-recompute B always has them:
 * plan_machine.h's rule "recompute"). */
static void backward(gctx *c, rt_cuda *g, const gchunk *ch, gslot *s, int weights)
{
    if (ch->place.head) {
        rt_cuda_lm_head_bwd(g, tp_of(c), s->dlogits, c->emb, s->head_in ? s->head_in : s->out,
                            s->dout, c->demb, s->n, c->hidden, c->vocab, c->dt);
        if (ch->place.decoder) rt_cuda_zero(g, s->denc, s->ne * c->eb);
    } else if (packed(ch, KIND_GRAD, 0)) {
        unpack(g, s, KIND_GRAD, s->dout, s->denc, c->eb);
    }
    /* in is scratch by now (the layer inputs are kept in acts or ckpt); every decoder layer adds
     * its encoder-output gradient to denc. pm_recompute: selective reruns each layer's attention
     * cores before its backward; full its forward from the kept input, then its gradients, one
     * layer's activations at a time */
    gpu_pass p = {c, g, ch, s};
    rt_pass_backward(&GPU_PASS, &p, ch->layers, weights, s->dout, s->din, s->in);
    if (packed(ch, KIND_GRAD, 1)) pack(g, s, KIND_GRAD, s->din, s->denc, c->eb);
}

static void backward_weight(gctx *c, rt_cuda *g, const gchunk *ch, gslot *s)
{
    gpu_pass p = {c, g, ch, s};
    rt_pass_weights(&GPU_PASS, &p, ch->layers);
}

/* A transfer with a stage of another rank: the link stream waits for the stage to reach the
 * instruction (t->e0), moves the buffer over NCCL, and records t->e1. */
static int remote_transfer(gctx *c, gtimed *t, int send, int kind, int peer_stage, void *buf,
                           size_t n)
{
#ifdef DPRUN_NCCL
    int link = link_of(kind, send, peer_stage > c->stage);
    rt_cuda *ls = c->link_stream[link];
    char why[256];
    rt_cuda_wait_event(ls, t->e0);
    int rc = send ? rt_nccl_send(c->link[link], buf, n * c->eb, 1, ls, why, sizeof why)
                  : rt_nccl_recv(c->link[link], buf, n * c->eb, 0, ls, why, sizeof why);
    if (rc != 0) {
        dp_fail(c->err, DP_ERR_EXTERNAL, "%s", why);
        return -1;
    }
    rt_cuda_event_record(ls, t->e1);
    return 0;
#else
    (void)t, (void)send, (void)kind, (void)peer_stage, (void)buf, (void)n;
    dp_fail(c->err, DP_ERR_UNSUPPORTED, "this dprun was built without NCCL");
    return -1;
#endif
}

/* ---- The cuda medium of the executor loop (exec_loop.h): each instruction enqueued on its
 * stage's stream, timed by CUDA events; failures return -1 with c->err set. */

static gslot *gslot_at(gctx *c, const pm_step *s) { return &c->slots[(size_t)s->x->mb * c->nv + s->v]; }
/* Whether this process drives a transfer's other end (plan_machine.h pm_step.peer_v) */
static int remote(const gctx *c, const pm_step *s) { return !drives(c, s->peer_rank % c->pp); }
/* The local SEND a RECV of slot (mb, v) consumes, by kind */
static gmsg *msg_of(gctx *c, int kind, int mb, int v)
{
    return &c->msgs[((size_t)kind * c->it->n_mb + (size_t)mb) * c->nv + (size_t)v];
}

/* The buffer and elements a transfer moves (wire_of), checked against the plan's bytes. */
static void *transfer_buf(gctx *c, const pm_step *s, int send, size_t *n)
{
    void *buf = wire_of(&c->ch[s->v], gslot_at(c, s), s->kind, send, n);
    size_t eb = (size_t)c->o->pl->h.act_elem_bytes;
    size_t whole = *n * (size_t)(c->shards * c->cp); /* the plan counts the whole activation */
    if ((size_t)s->x->bytes == eb * whole) return buf;
    dp_fail(c->err, DP_ERR_INVALID, "%s mb %d on stage %d: the plan says %lld bytes, the "
            "micro-batch's shape needs %zu (%zu %s elements)", plan_op_name(s->op), s->x->mb,
            s->stage, (long long)s->x->bytes, eb * whole, whole, c->o->pl->h.act_dtype);
    return NULL;
}

/* A local RECV waits for its SEND to be enqueued (on another stage's stream of this process). */
static int gpu_ready(void *vc, const pm_step *s)
{
    gctx *c = vc;
    return !plan_op_is_recv(s->op) || remote(c, s) || msg_of(c, s->kind, s->x->mb, s->v)->posted;
}

static int gpu_begin(void *vc, const pm_step *s)
{
    gctx *c = vc;
    if (!(c->cur = timed_new(c, s->stage, s->op, s->x->mb, s->x->chunk))) {
        no_memory(c, "timing events");
        return -1;
    }
    c->cur_remote = 0;
    rt_cuda_event_record(c->stream[s->stage], c->cur->e0);
    return 0;
}

/* A remote transfer's end is recorded on its link stream (remote_transfer) */
static int gpu_end(void *vc, const pm_step *s)
{
    gctx *c = vc;
    if (!c->cur_remote) rt_cuda_event_record(c->stream[s->stage], c->cur->e1);
    return 0;
}

static int gpu_recv(void *vc, const pm_step *s)
{
    gctx *c = vc;
    size_t n = 0;
    void *buf = transfer_buf(c, s, 0, &n);
    if (!buf) return -1;
    if (remote(c, s)) {
        c->cur_remote = 1;
        if (remote_transfer(c, c->cur, 0, s->kind, s->peer_rank % c->pp, buf, n) != 0) return -1;
        gslot_at(c, s)->arrived[s->kind] = c->cur->e1;
        return 0;
    }
    const gmsg *in = msg_of(c, s->kind, s->x->mb, s->v);
    rt_cuda_wait_event(c->stream[s->stage], in->ev);
    rt_cuda_copy(c->stream[s->stage], buf, in->src, n * c->eb);
    return 0;
}

static int gpu_await(void *vc, const pm_step *s)
{
    gctx *c = vc;
    void *arrived = gslot_at(c, s)->arrived[s->waits]; /* NULL: a local copy, in stream order */
    if (arrived) rt_cuda_wait_event(c->stream[s->stage], arrived);
    return 0;
}

static int gpu_forward(void *vc, const pm_step *s)
{
    gctx *c = vc;
    forward(c, c->stream[s->stage], &c->ch[s->v], gslot_at(c, s), s->x->mb, c->seed);
    return 0;
}

static int gpu_backward(void *vc, const pm_step *s, int weights)
{
    gctx *c = vc;
    gslot *sl = gslot_at(c, s);
    backward(c, c->stream[s->stage], &c->ch[s->v], sl, weights);
    return 0;
}

static int gpu_weights(void *vc, const pm_step *s)
{
    gctx *c = vc;
    backward_weight(c, c->stream[s->stage], &c->ch[s->v], gslot_at(c, s));
    return 0;
}

static int gpu_send(void *vc, const pm_step *s)
{
    gctx *c = vc;
    size_t n = 0;
    void *buf = transfer_buf(c, s, 1, &n);
    if (!buf) return -1;
    if (remote(c, s)) {
        c->cur_remote = 1;
        return remote_transfer(c, c->cur, 1, s->kind, s->peer_rank % c->pp, buf, n);
    }
    gmsg *out = msg_of(c, s->kind, s->x->mb, s->peer_v);
    if (!out->ev && !(out->ev = rt_cuda_event_new())) {
        no_memory(c, "transfer events");
        return -1;
    }
    rt_cuda_event_record(c->stream[s->stage], out->ev);
    out->src = buf, out->n = n;
    out->posted = 1;
    return 0;
}

static int gpu_reduce(void *vc, const pm_step *s)
{
    gctx *c = vc;
    if (c->zero) zero_reduce(c, c->stream[s->stage], s->v);
    return 0;
}

/* FREE: the slot is released (plan_machine.h); its device buffers, allocated before the iteration
 * so that no allocation is timed, are reused after it */
static int gpu_release(void *vc, const pm_step *s)
{
    (void)vc, (void)s;
    return 0;
}

static const rt_medium GPU_MEDIUM = {gpu_ready,   gpu_begin,   gpu_end,      gpu_recv,
                                     gpu_await,   gpu_forward, gpu_backward, gpu_weights,
                                     gpu_reduce,  gpu_send,    gpu_release};

/* The end of the iteration over the replicas (multi-GPU mode; engine.h rt_grads_replicas), timed
 * on the stage stream. */
static dp_status enqueue_allreduce(gctx *c)
{
    rt_cuda *g = c->stream[c->stage];
    gtimed *t = timed_new(c, c->stage, RT_OP_ALLREDUCE, 0, 0);
    if (!t) return no_memory(c, "timing events");
    rt_cuda_event_record(g, t->e0);
    if (c->zero) zero_follow(c, g);
    gpu_grads q = {c, g};
    for (int k = 0; k < c->chunks; k++)
        rt_grads_replicas(&GPU_GRADS, &q, k * c->pp + c->stage, c->ch[k * c->pp + c->stage].layers,
                          c->zero, 0);
    /* the tied embedding's gradient on the last stage too, as the cpu backend sums it */
    if (c->stage == c->pp - 1 && c->demb)
        NCCL_DO(c, rt_nccl_allreduce(c->replicas, c->demb, (size_t)c->vocab_local * c->hidden,
                                     rt_elem_stat(c->dt), RT_TP_SUM, c->zero ? c->zstream : g, why,
                                     sizeof why));
    if (c->zero) rt_cuda_event_record(c->zstream, c->zback), rt_cuda_wait_event(g, c->zback);
    rt_cuda_event_record(g, t->e1);
    return DP_OK;
}

/* Stream i of this process: the stages' (NULL for other ranks' stages), the links', ZeRO's. */
#define N_STREAMS(c) ((c)->pp + N_LINKS + 1)
static rt_cuda *stream_at(const gctx *c, int i)
{
    return i < c->pp ? c->stream[i] : i < c->pp + N_LINKS ? c->link_stream[i - c->pp] : c->zstream;
}

/* Waits, up to the timeout, for every stream of this process to finish the iteration. */
static dp_status wait_streams(gctx *c, const plan_iter *it)
{
    struct timespec t0, now, nap = {0, 50000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char why[256];
    for (int i = 0; i < N_STREAMS(c);) {
        rt_cuda *g = stream_at(c, i);
        int q = g ? rt_cuda_query(g, why, sizeof why) : 1;
        if (q < 0) return dp_fail(c->err, DP_ERR_EXTERNAL, "dprun (cuda): iteration %d: %s", it->id, why);
        if (q > 0) {
            i++;
            continue;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) * 1e-9 >
            c->o->timeout_s)
            return dp_fail(c->err, DP_ERR_EXTERNAL, "dprun (cuda): timed out after %.1f s waiting "
                           "for the GPU to finish iteration %d%s", c->o->timeout_s, it->id,
                           c->multi ? " (a transfer whose peer rank stalled or failed?)" : "");
        nanosleep(&nap, NULL);
    }
    return DP_OK;
}

/* Multi-GPU mode: every rank at the start of the iteration, with the timeout. */
static void barrier(gctx *c)
{
    MPI_Request bar;
    MPI_TRY(c, MPI_Ibarrier(MPI_COMM_WORLD, &bar));
    double deadline = MPI_Wtime() + c->o->timeout_s;
    struct timespec nap = {0, 20000};
    for (int done = 0; !done; nanosleep(&nap, NULL)) {
        MPI_TRY(c, MPI_Test(&bar, &done, MPI_STATUS_IGNORE));
        if (!done && MPI_Wtime() > deadline) {
            char msg[200];
            snprintf(msg, sizeof msg, "timed out after %.1f s waiting for the other ranks at the "
                     "start of the iteration", c->o->timeout_s);
            die(c, msg);
        }
    }
}

/* The slow first calls of this process's stages so far (layer_cuda.h rt_cuda_firsts). */
static rt_cuda_firsts firsts(const gctx *c)
{
    rt_cuda_firsts sum = {0, 0, 0};
    for (int r = 0; r < c->pp; r++) {
        if (!c->stream[r]) continue;
        rt_cuda_firsts f;
        rt_cuda_firsts_of(c->stream[r], &f);
        sum.gemm_plans += f.gemm_plans, sum.attn_graphs += f.attn_graphs, sum.uploads += f.uploads;
    }
    return sum;
}

/* One run of an iteration (exec_loop.h rt_run_fn). */
static dp_status run_iteration(void *vc, const plan_iter *it, int iteration, int record)
{
    gctx *c = vc;
    rt_result *res = c->res;
    rt_cuda_firsts before = firsts(c);
    c->iteration = it->id;
    c->it = it;
    pm_init(&c->pm, it, c->chunks);
    c->recording = record != RT_RECORD_OFF;
    dp_status st = alloc_slots(c, it);
    if (c->multi) {
        if (st != DP_OK) die(c, c->err->msg);
        barrier(c);
    }
    int first = -1; /* the first driven stage's stream holds the time origin */
    for (int r = 0; r < c->pp && first < 0; r++)
        if (c->stream[r]) first = r;
    if (st == DP_OK) {
        /* gradients are the iteration's own (a warm-up run adds nothing to the measured one) */
        for (int v = 0; v < c->nv; v++) {
            rt_cuda *g = c->stream[stage_of_v(c, v)];
            for (int l = 0; g && l < c->ch[v].layers; l++) {
                rt_cuda_zero(g, c->ch[v].g[l].block, rt_grad_block_bytes(c->ch[v].g[l].count, c->dt));
                if (c->zero) rt_cuda_zero(g, c->ch[v].gshard[l], rt_grad_block_bytes(c->ch[v].shard, c->dt));
            }
        }
        if (c->demb)
            rt_cuda_zero(c->stream[c->pp - 1], c->demb,
                         rt_grad_block_bytes((size_t)c->vocab_local * c->hidden, c->dt));
        rt_cuda_event_record(c->stream[first], c->start);
        for (int r = first + 1; r < c->pp; r++)
            if (c->stream[r]) rt_cuda_wait_event(c->stream[r], c->start);
        c->seed = iteration;
        st = rt_loop_iteration(&c->pm, c->replica, c->drives, &GPU_MEDIUM, c, c->err);
    }
    if (st == DP_OK && !c->zero) /* (ZeRO-2/3 summed them before each reduce-scatter) */
        for (int v = 0; v < c->nv; v++) {
            gpu_grads q = {c, c->stream[stage_of_v(c, v)]};
            if (q.g) rt_grads_partial(&GPU_GRADS, &q, v, &c->ch[v].shape, c->ch[v].layers, c->tp,
                                      c->shards > 1);
        }
    if (st == DP_OK && c->multi && c->zranks > 1) st = enqueue_allreduce(c);
    if (c->multi && st != DP_OK) die(c, c->err->msg);
    dp_status waited = wait_streams(c, it); /* also after a failure: the buffers go next */
    if (st == DP_OK) st = waited;
    if (c->multi && st != DP_OK) die(c, c->err->msg);
    int records = record && rt_rank_records(c->tp_rank, c->cp_rank);
    for (size_t i = 0; st == DP_OK && records && i < c->n_timed; i++) {
        const gtimed *t = &c->timed[i];
        if (dp_grow((void **)&res->rec, &c->cap_rec, res->n_rec + 1, sizeof *res->rec) != DP_OK) {
            st = dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
            break;
        }
        res->rec[res->n_rec++] = (rt_record){iteration, t->stage, c->replica, t->op, t->mb,
                                             t->chunk, record - RT_RECORD_ON, rt_cuda_event_ms(c->start, t->e0) * 1e3,
                                             rt_cuda_event_ms(c->start, t->e1) * 1e3};
    }
    c->n_timed = 0;
    free_slots(c, (size_t)it->n_mb * (size_t)c->nv);
    pm_release(&c->pm);
    if (record != RT_RECORD_OFF) { /* slow first calls made inside a measured run */
        rt_cuda_firsts after = firsts(c);
        res->timed_gemm_plans += after.gemm_plans - before.gemm_plans;
        res->timed_attn_graphs += after.attn_graphs - before.attn_graphs;
        res->timed_uploads += after.uploads - before.uploads;
    }
    return st;
}

static dp_status open_stream(gctx *c, int device, rt_cuda **g)
{
    char why[256];
    if (!(*g = rt_cuda_open(device, why, sizeof why)))
        return dp_fail(c->err, DP_ERR_EXTERNAL, "dprun (cuda): %s", why);
    return DP_OK;
}

/* Multi-GPU mode: this rank's GPU is its place among the ranks of its host. */
static dp_status pick_device(gctx *c, int *device)
{
    MPI_Comm node;
    int local, n_local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_size(node, &n_local);
    MPI_Comm_free(&node);
    int n_dev = rt_cuda_device_count();
    if (n_local > n_dev)
        return dp_fail(c->err, DP_ERR_UNSUPPORTED, "%d ranks run on host %s, which has %d GPU%s: "
                       "the multi-GPU mode runs one rank per GPU (NCCL refuses two ranks on one "
                       "GPU); start fewer ranks per host, or run the plan on one GPU without "
                       "mpirun", n_local, c->host, n_dev, n_dev == 1 ? "" : "s");
    *device = local;
    return DP_OK;
}

/* A device parameter block of `count` parameters (layout.h, at the run's dtype) from host doubles,
 * and a zeroed gradient block beside it. */
/* ... with room for `whole` >= count elements (ZeRO: its shards, end to end) in the part the
 * layer reads and in the gradient block. */
static dp_status upload_params(gctx *c, rt_cuda *g, const double *host, size_t count, size_t whole,
                               void **params, void **grads)
{
    size_t gb = rt_grad_block_bytes(whole, c->dt);
    *params = rt_cuda_params_new_room(host, count, c->dt, (whole - count) * rt_param_read_bytes(c->dt));
    *grads = rt_cuda_alloc(gb);
    if (!*params || !*grads) return no_memory(c, "the parameters");
    rt_cuda_zero(g, *grads, gb);
    return DP_OK;
}

static dp_status zero_no_memory(gctx *c)
{
    return dp_fail(c->err, DP_ERR_NOMEM, "dprun (cuda): out of device memory for ZeRO's shards and "
                   "buffers (the whole layers stay allocated beside them: the runtime times ZeRO, it "
                   "does not save memory); try fewer layers per stage");
}

/* ZeRO-2/3: this rank's shards of layer l of a chunk (its replica's slice of the parameters the
 * layer reads; zeroed reduced gradients), the chunk's lists allocated at its first layer. */
static dp_status zero_shards(gctx *c, rt_cuda *g, gchunk *ch, int l)
{
    if (!ch->pshard) { /* both lists or neither (teardown walks both) */
        void **p = calloc((size_t)ch->layers, sizeof *p), **g2 = calloc((size_t)ch->layers, sizeof *g2);
        if (!p || !g2) {
            free(p), free(g2);
            return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
        }
        ch->pshard = p, ch->gshard = g2;
    }
    size_t gb = rt_grad_block_bytes(ch->shard, c->dt), pb = ch->shard * rt_param_read_bytes(c->dt);
    ch->pshard[l] = rt_cuda_alloc(pb), ch->gshard[l] = rt_cuda_alloc(gb);
    if (!ch->pshard[l] || !ch->gshard[l]) return zero_no_memory(c);
    rt_cuda_copy(g, ch->pshard[l], (char *)read_part(c, &ch->p[l]) + (size_t)c->zrank * pb, pb);
    rt_cuda_zero(g, ch->gshard[l], gb);
    return DP_OK;
}

static dp_status setup(gctx *c, const model_spec *m)
{
    char why[256];
    int device = 0;
    c->stream = calloc((size_t)c->pp, sizeof *c->stream);
    c->ch = calloc((size_t)c->nv, sizeof *c->ch);
    c->drives = calloc((size_t)c->pp, 1);
    if (!c->stream || !c->ch || !c->drives) return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
    for (int r = 0; r < c->pp; r++) c->drives[r] = (unsigned char)drives(c, r);
    dp_status st;
    if (c->multi && (st = pick_device(c, &device)) != DP_OK) return st;
    for (int r = 0; r < c->pp; r++)
        if (drives(c, r) && (st = open_stream(c, device, &c->stream[r])) != DP_OK) return st;
    for (int k = 0; c->multi && k < N_LINKS; k++)
        if ((st = open_stream(c, device, &c->link_stream[k])) != DP_OK) return st;
    rt_cuda *g0 = c->stream[c->multi ? c->stage : 0];
    int has_last = 0;
    for (int v = 0; v < c->nv; v++) {
        if (!drives(c, stage_of_v(c, v))) continue;
        gchunk *ch = &c->ch[v];
        rt_chunk_plan chunk = rt_chunk_plan_of(&c->o->pl->h, m, v); /* engine.h: as exec.c's */
        ch->place = chunk.place, ch->shape = chunk.shape;
        has_last |= ch->place.head;
        int layers = chunk.layers;
        ch->p = calloc((size_t)layers + 1, sizeof *ch->p);
        ch->g = calloc((size_t)layers + 1, sizeof *ch->g);
        if (!ch->p || !ch->g) return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
        ch->layers = layers; /* teardown frees this many */
        size_t count = chunk.count; /* a layer's, here */
        for (int l = 0; l < layers; l++) {
            double *mine = malloc(count * sizeof *mine);
            if (!mine || rt_chunk_layer_params(&chunk, &c->o->pl->h, c->tp_rank, l, mine) != 0) {
                free(mine);
                return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
            }
            rt_cuda_layer d = {ch->shape, c->dt, NULL, count, tp_of(c), cp_of(c)};
            ch->p[l] = ch->g[l] = d;
            size_t zr = (size_t)c->zranks;
            ch->shard = c->zero ? rt_zero_shard(count, (int)zr) : 0;
            st = upload_params(c, g0, mine, count, c->zero ? ch->shard * zr : count, &ch->p[l].block,
                               &ch->g[l].block);
            free(mine);
            if (st != DP_OK) return st;
            if (c->zero && (st = zero_shards(c, g0, ch, l)) != DP_OK) return st;
        }
    }
    if (c->zero) { /* the replicas' communicator's stream, its events, a shard of scratch */
        size_t most = 0;
        for (int v = 0; v < c->nv; v++) most = c->ch[v].shard > most ? c->ch[v].shard : most;
        if ((st = open_stream(c, device, &c->zstream)) != DP_OK) return st;
        c->zscratch = rt_cuda_alloc(rt_grad_block_bytes(most, c->dt));
        c->zmark = rt_cuda_event_new(), c->zback = rt_cuda_event_new();
        c->zdone[0] = rt_cuda_event_new(), c->zdone[1] = rt_cuda_event_new();
        if (!c->zscratch || !c->zmark || !c->zback || !c->zdone[0] || !c->zdone[1])
            return zero_no_memory(c);
    }
    if (has_last) { /* the tied embedding: the LM head's weights (under TP this rank's rows) */
        size_t ne = (size_t)c->vocab_local * m->hidden;
        double *host = malloc(ne * sizeof *host);
        if (!host) return dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
        rt_embedding_rows(host, ne, c->tp_rank);
        st = upload_params(c, g0, host, ne, ne, &c->emb, &c->demb);
        free(host);
        if (st != DP_OK) return st;
    }
    if (!(c->start = rt_cuda_event_new())) return no_memory(c, "an event");
    return rt_cuda_sync(g0, why, sizeof why) == 0
               ? DP_OK
               : dp_fail(c->err, DP_ERR_EXTERNAL, "dprun (cuda): %s", why);
}

/* Multi-GPU mode: whether every rank's set-up succeeded; if not, every rank returns the message
 * of the first rank that failed. */
static dp_status agree(gctx *c, dp_status mine)
{
    int size, first = 0, me = mine == DP_OK ? INT_MAX : c->rank;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_TRY(c, MPI_Allreduce(&me, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first == INT_MAX) return DP_OK;
    char msg[DP_ERR_MSG_MAX], host[64];
    int status = mine;
    snprintf(msg, sizeof msg, "%s", c->err->msg);
    snprintf(host, sizeof host, "%s", c->host);
    MPI_TRY(c, MPI_Bcast(msg, (int)sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD));
    MPI_TRY(c, MPI_Bcast(host, (int)sizeof host, MPI_CHAR, first, MPI_COMM_WORLD));
    MPI_TRY(c, MPI_Bcast(&status, 1, MPI_INT, first, MPI_COMM_WORLD));
    return dp_fail(c->err, (dp_status)status, "rank %d on %s: %s", first, host, msg);
}

#ifdef DPRUN_NCCL
/* Multi-GPU mode: the world communicator, a two-rank one per directed link of each replica, and
 * one per stage across replicas. Collective: every rank makes the same calls in the same order. */
static void connect_ranks(gctx *c)
{
    char why[256];
    rt_cuda *g = c->stream[c->stage];
    if (rt_nccl_world(g, &c->world, why, sizeof why) != 0) die(c, why);
    mesh layout = rt_plan_mesh(&c->o->pl->h);
    mesh_coord here = mesh_place(&layout, c->rank);
    mesh_group pipe = mesh_group_of(&layout, here, MESH_PP);
    int vee = c->o->pl->h.placement == PLACEMENT_V;
    for (int kind = KIND_ACT; kind <= KIND_GRAD; kind++)
        for (int from = 0; from < c->pp && c->pp > 1; from++)
            for (int way = 0; way < 2; way++) {
                /* a loop: activations to the next stage, gradients to the previous (round the
                 * loop when interleaved); a V: both kinds to both neighbours */
                int to = vee ? from + (way ? -1 : 1)
                             : (from + (kind == KIND_ACT ? 1 : c->pp - 1)) % c->pp;
                if (!vee && way) continue;
                if (to < 0 || to >= c->pp) continue;
                /* without interleaving, nothing flows from the last stage to the first */
                if (!vee && c->chunks == 1 && (kind == KIND_ACT ? to < from : to > from)) continue;
                int member = c->stage == from || c->stage == to;
                rt_nccl *sub = NULL; /* the same tp and cp rank of the two stages of a replica */
                if (rt_nccl_split(c->world, member ? pipe.colour : -1, c->stage == from ? 0 : 1,
                                  &sub, why, sizeof why) != 0)
                    die(c, why);
                if (c->stage == from) c->link[link_of(kind, 1, to > from)] = sub;
                if (c->stage == to) c->link[link_of(kind, 0, from > to)] = sub;
            }
    /* the stage's replicas and cp ranks (ZeRO's and the gradients' group), the tp group, the cp ring */
    mesh_kind kinds[] = {MESH_DP_CP, MESH_TP, MESH_CP};
    rt_nccl **comms[] = {&c->replicas, &c->tpc, &c->cpc};
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        mesh_group grp = mesh_group_of(&layout, here, kinds[i]);
        if (grp.size > 1 && rt_nccl_split(c->world, grp.colour, grp.key, comms[i], why, sizeof why) != 0)
            die(c, why);
    }
}
#endif

static void teardown(gctx *c)
{
#ifdef DPRUN_NCCL
    for (int k = 0; k < N_LINKS; k++) rt_nccl_free(c->link[k]);
    rt_nccl_free(c->replicas), rt_nccl_free(c->tpc), rt_nccl_free(c->cpc), rt_nccl_free(c->world);
#endif
    for (int v = 0; c->ch && v < c->nv; v++) {
        gchunk *ch = &c->ch[v];
        for (int l = 0; l < ch->layers && ch->p; l++) {
            rt_cuda_free(ch->p[l].block), rt_cuda_free(ch->g[l].block);
            if (ch->pshard) rt_cuda_free(ch->pshard[l]), rt_cuda_free(ch->gshard[l]);
        }
        free(ch->p), free(ch->g), free(ch->pshard), free(ch->gshard);
    }
    rt_cuda_close(c->zstream), rt_cuda_free(c->zscratch);
    rt_cuda_event_free(c->zmark), rt_cuda_event_free(c->zback);
    rt_cuda_event_free(c->zdone[0]), rt_cuda_event_free(c->zdone[1]);
    free(c->ch);
    rt_cuda_free(c->emb), rt_cuda_free(c->demb), rt_cuda_free(c->logits);
    for (int r = 0; c->stream && r < c->pp; r++) rt_cuda_close(c->stream[r]);
    free(c->stream), free(c->drives);
    for (int k = 0; k < N_LINKS; k++) rt_cuda_close(c->link_stream[k]);
    for (size_t i = 0; i < c->n_events; i++)
        rt_cuda_event_free(c->timed[i].e0), rt_cuda_event_free(c->timed[i].e1);
    free(c->timed);
    rt_cuda_event_free(c->start);
}

/* *acc += this rank's share of the sum of squares of a gradient block of n elements on the
 * device: a layer's of `shape` (layer.h rt_grad_sq_share: under TP the group's shares add up to
 * the whole layer's), or with shape NULL all of it (the embedding's rows here). */
static dp_status add_sum_sq(gctx *c, const rt_layer_shape *shape, const void *dev, size_t n,
                            double *acc)
{
    double *h = malloc((n ? n : 1) * sizeof *h);
    dp_status st = DP_OK;
    if (!h)
        st = dp_fail(c->err, DP_ERR_NOMEM, "out of host memory");
    else if (rt_cuda_grads_get(h, dev, n, c->dt) != 0)
        st = dp_fail(c->err, DP_ERR_EXTERNAL, "dprun (cuda): could not read the gradients back");
    else
        *acc += shape ? rt_grad_sq_share(shape, h, c->tp, c->tp_rank) : rt_sum_sq(h, n);
    free(h);
    return st;
}

/* ZeRO-2/3: the reduced gradients' shards gathered whole into the gradient blocks, for the
 * figure (the cpu backend's too). */
static dp_status zero_gather_grads(gctx *c)
{
#ifdef DPRUN_NCCL
    char why[256];
    for (int v = 0; v < c->nv; v++) {
        gchunk *ch = &c->ch[v];
        for (int l = 0; ch->gshard && l < ch->layers; l++)
            if (rt_nccl_allgather(c->replicas, ch->gshard[l], ch->g[l].block,
                                  rt_grad_block_bytes(ch->shard, c->dt), c->zstream, why, sizeof why) != 0)
                return dp_fail(c->err, DP_ERR_EXTERNAL, "%s", why);
    }
    return rt_cuda_sync(c->zstream, why, sizeof why) == 0
               ? DP_OK
               : dp_fail(c->err, DP_ERR_EXTERNAL, "dprun (cuda): %s", why);
#else
    return dp_fail(c->err, DP_ERR_UNSUPPORTED, "this dprun was built without NCCL");
#endif
}

/* The sum of squares of the gradients this process holds (rt_result.grad_sq). */
static dp_status gradient_figure(gctx *c, double *grad_sq)
{
    dp_status st = DP_OK;
    *grad_sq = 0;
    for (int v = 0; v < c->nv; v++)
        for (int l = 0; st == DP_OK && l < c->ch[v].layers; l++)
            st = add_sum_sq(c, &c->ch[v].shape, c->ch[v].g[l].block, c->ch[v].g[l].count, grad_sq);
    if (st == DP_OK && c->demb)
        st = add_sum_sq(c, NULL, c->demb, (size_t)c->vocab_local * c->hidden, grad_sq);
    return st;
}

dp_status rt_execute_gpu(const rt_opts *o, rt_result *res, dp_err *err)
{
    const plan *pl = o->pl;
    const model_spec *m = o->model;
    memset(res, 0, sizeof *res);
    int size = 1, initialised = 0;
    MPI_Initialized(&initialised);
    if (initialised) MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (m->arch == ARCH_T5 && (pl->h.chunks > 1 || pl->h.pp < 2))
        return dp_fail(err, DP_ERR_UNSUPPORTED, "dprun runs T5 plans on at least 2 stages "
                       "(encoder, then decoder) and without interleaving");
    if (size == 1 && (pl->h.tp > 1 || pl->h.cp > 1))
        return dp_fail(err, DP_ERR_UNSUPPORTED, "one GPU runs plans without tensor or context "
                       "parallelism (this plan: tp %d, cp %d); start tp x cp x pp x dp ranks, one "
                       "per GPU", pl->h.tp, pl->h.cp);
    if (size == 1 && pl->h.dp != 1)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "one GPU runs plans without data parallelism "
                       "(this plan: dp %d); start pp x dp ranks, one per GPU", pl->h.dp);
#ifndef DPRUN_NCCL
    if (size > 1)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "this dprun was built without NCCL (no nccl.h "
                       "at build time): --backend cuda runs on one GPU only, without mpirun");
#endif
    gctx c = {0};
    c.o = o, c.err = err;
    c.pp = pl->h.pp, c.chunks = pl->h.chunks, c.nv = c.pp * c.chunks;
    c.hidden = m->hidden, c.vocab = m->vocab;
    c.dt = o->dtype, c.eb = rt_dtype_act_bytes(o->dtype);
    c.multi = size > 1;
    c.tp = rt_plan_tp(&pl->h), c.shards = placement_token_shards(c.tp, pl->h.sp);
    c.cp = rt_plan_cp(&pl->h);
    c.vocab_local = m->vocab / c.tp;
    if (c.multi) {
        MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
        rt_place at = rt_place_of(&pl->h, c.rank);
        c.stage = at.stage, c.replica = at.replica, c.tp_rank = at.tp_rank, c.cp_rank = at.cp_rank;
    }
    mesh layout = rt_plan_mesh(&pl->h); /* ZeRO's group: the stage's replicas and cp ranks */
    mesh_coord here = {c.tp_rank, c.cp_rank, c.stage, c.replica};
    mesh_group zg = mesh_group_of(&layout, here, MESH_DP_CP);
    c.zranks = zg.size, c.zrank = zg.key;
    c.tp_hooks = (ggroup){&c, 0}, c.cp_hooks = (ggroup){&c, 1};
    c.tpg = (rt_cuda_tp){c.tp, c.tp_rank, pl->h.sp, group_allreduce, group_allgather,
                         group_reduce_scatter, &c.tp_hooks};
    c.cpg = (rt_cuda_tp){c.cp, c.cp_rank, 0, group_allreduce, group_allgather, group_reduce_scatter,
                         &c.cp_hooks};
    c.zero = c.multi ? rt_zero_stage(&pl->h, c.zranks) : 0;
    gethostname(c.host, sizeof c.host - 1);
    dp_status st = setup(&c, m);
    if (c.multi) {
        st = agree(&c, st);
#ifdef DPRUN_NCCL
        if (st == DP_OK) connect_ranks(&c);
#endif
    }
    c.res = res;
    if (st == DP_OK) st = rt_loop_runs(o, c.rank, o->prepare, run_iteration, &c);
    if (st == DP_OK && c.zero) st = zero_gather_grads(&c);
    if (st == DP_OK) st = gradient_figure(&c, &res->grad_sq);
    res->rerun_layers = c.rerun[0], res->rerun_attention = c.rerun[1];
    teardown(&c);
    if (st != DP_OK) {
        free(res->rec);
        memset(res, 0, sizeof *res);
    }
    return st;
}

#else

dp_status rt_execute_gpu(const rt_opts *o, rt_result *res, dp_err *err)
{
    (void)o;
    memset(res, 0, sizeof *res);
    return dp_fail(err, DP_ERR_UNSUPPORTED, "this dprun was built without CUDA (no nvcc, cuBLAS, "
                   "cuBLASLt or cuDNN was found at build time): --backend cuda is not available");
}

#endif
