#include "exec.h"

#include <mpi.h>
#include <sched.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../models/placement.h"
#include "../scheduler/plan_machine.h"
#include "../scheduler/stage_cost.h"
#include "engine.h"
#include "exec_loop.h"
#include "layer.h"
#include "rt_mpi.h"

enum { KIND_ACT, KIND_GRAD };

/* Model state of one chunk (the layers of one virtual stage) on this rank. */
typedef struct chunk_state {
    int layers;
    rt_layer_params *p, *g; /* under ZeRO-2/3 over several ranks: blocks of shard x ranks doubles */
    double **ps, **gs;      /* ... and this rank's shards of each layer's parameters and reduced
                             * gradients (ZeRO-2/3; NULL otherwise) */
    size_t shard;           /* doubles of a shard: a layer's count / ranks, rounded up */
    rt_layer_shape shape;
    stage_placement place; /* what it runs (embedding, head, T5 decoder layers that cross-attend to
                            * the encoder output) and what its transfers carry (placement.h) */
} chunk_state;

/* Buffers of one (micro-batch, chunk). What travels (the wire buffers, sized by the plan's
 * bytes) is packed from and unpacked into the compute buffers by placement_wire_parts: the
 * hidden part is out (sent activation), in (received), din (sent gradient), dout (received); the
 * encoder part enc or denc. */
typedef struct slot {
    int alive, B, S, Se;           /* S: this stage's length; Se: the encoder's (decoders only) */
    int n;                         /* this rank's tokens of the B*S: B*S / cp */
    size_t nh, ne;                 /* this rank's tokens x H (with SP, n / tp of them); B*Se*H */
    double *in, *out, *dout, *din; /* (B*S, H) */
    double *enc, *denc;            /* decoder stages: the encoder output and its gradient */
    double *rx[2], *tx[2];         /* wire buffers of each kind (activation, gradient) */
    size_t rx_n[2], tx_n[2];       /* their sizes, doubles */
    rt_layer_acts *acts;           /* one per layer; under full recompute none between F and B */
    double *ckpt;                  /* full recompute: each layer's input, layers x (B*S, H) */
    recompute_mode recompute;      /* what its B reruns (plan_machine.h pm_recompute) */
    rt_seqs seqs[2];               /* varlen: the encoder's (GPT's) and decoder's sequences */
    int *seq_store[2];
    double *dlogits;               /* last virtual stage: (B*S, V / tp) */
    double *head_in;               /* last virtual stage under SP: the whole output, (n, H) */
    rt_cp cp;                      /* context parallelism: this rank's share of the tokens */
    MPI_Request recv[2], send[2];
    int free_pending;              /* FREE came before its sends completed */
} slot;

/* Buffers are reused across micro-batches (first-touch page faults would otherwise be measured
 * as compute time, which the profile, warm, does not see). */
typedef struct pool {
    double **ptr;
    size_t *size; /* doubles */
    size_t n, cap, cap2;
} pool;

typedef struct ctx {
    const rt_opts *o;
    pool pool;
    const plan_iter *it;
    plan_machine pm;    /* the plan's semantics for this iteration */
    int rank, stage, replica, pp, chunks, nv;
    int hidden, vocab;
    int tp_rank;        /* this process's index in its tensor-parallel group (rt_place) */
    int cp_rank;        /* ... and in its context-parallel group */
    int vocab_local;    /* the LM head's rows here: vocab / tp */
    rt_mpi_tp tpg;      /* the tensor-parallel group (size 1: none) */
    rt_mpi_tp cpg;      /* the context-parallel group (size 1: none; its sp unused) */
    rt_mpi_tp expg;     /* the tp ranks holding this one's experts (layout.h RT_GRAD_SUM_EXPERTS;
                         * size 1: none; its sp unused) */
    MPI_Comm tp_comm, cp_comm, exp_comm;
    MPI_Comm stage_comm; /* this stage's replicas and cp ranks (the same tp rank of each): the
                          * gradient all-reduce's */
    MPI_Comm shard_comm; /* those of them ZeRO shards over: all, or under HSDP the plan's
                          * shard_group consecutive ones (models/mesh.h: k replicas' cp ranks) */
    MPI_Comm across_comm; /* the same shard of every shard group (size 1 but under HSDP): the
                           * shards' all-reduce after the iteration */
    int zero;           /* the plan's ZeRO stage where it shards (2 or 3 over more than one rank
                         * of shard_comm), else 0 */
    int zranks, zrank;  /* shard_comm's size and this rank's index: its shard */
    int across;         /* across_comm's size */
    chunk_state *ch;
    double *emb, *demb; /* tied embedding / LM head (V, H), on the first and last stages */
    slot *slots;        /* n_mb * chunks */
    char host[64];
    rt_record *rec;
    size_t n_rec, cap_rec;
    double t0;
    int iteration;
    long rerun[2];            /* measured runs: layer forwards (full), attention cores (selective) */
    int record;         /* RT_RECORD_OFF, or RT_RECORD_ON + the measured run (exec.h) */
    double t_op;        /* the running instruction's start, MPI_Wtime s */
    unsigned char *drives; /* per stage: 1 for this process's (rt_loop_iteration) */
} ctx;

/* Drives MPI's progress engine (the layer calls it between its GEMMs): with transports that
 * copy through the sender, a send started before a compute would otherwise move only when the
 * compute ends (measured: validation error 24% instead of 3% on 2 ranks without CMA). */
static void mpi_progress(void)
{
    int flag;
    MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE);
}

static void die(const ctx *c, const char *what)
{
    fprintf(stderr, "dprun: rank %d (stage %d, replica %d) on %s: iteration %d: %s\n", c->rank,
            c->stage, c->replica, c->host, c->iteration, what);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
    exit(3); /* not reached */
}


#define MPI_TRY(c, call) RT_MPI_TRY(die, c, call)

/* Waits for a request, polling, until the timeout; checks for truncated messages. spin_s: how
 * long it polls, giving the core way between polls (sched_yield), before it naps between them.
 * A collective (a tensor- or context-parallel group's, the gradient all-reduce) moves only when
 * its ranks poll, and a nap costs the timer's slack, some 60 us, at every step: it polls to the
 * end (with naps the gradient all-reduce of gpt-tiny over 2 ranks took 66 ms instead of 10, and
 * the tp 2 round trip's error was 9.3%; docs/runtime.md). A
 * pipeline peer may be a whole compute away, and an oversubscribed core is better left to it:
 * point-to-point waits nap at once. */
#define RT_SPIN_COLLECTIVE_S 1e9
static void wait_poll(const ctx *c, MPI_Request *r, const char *what, double spin_s);
/* The groups' collectives wait as every other request does (with the timeout) */
static void group_wait(void *vc, MPI_Request *rq, const char *what)
{
    wait_poll(vc, rq, what, RT_SPIN_COLLECTIVE_S);
}
static void tp_die(void *vc, const char *msg) { die(vc, msg); }

/* The layer's view of the tensor-parallel group: NULL without TP. */
static const rt_tp *tp_of(const ctx *c) { return c->tpg.tp.size > 1 ? &c->tpg.tp : NULL; }
/* The tp ranks a layer's tokens are spread over: the group's size with SP (each holds, and sends
 * to the next stage, its 1/tp of the tokens), else 1 (each holds the whole). */
static int tp_shards(const ctx *c)
{
    return tp_of(c) ? placement_token_shards(c->tpg.tp.size, c->tpg.tp.sp) : 1;
}
/* ... and the ranks of the group: times the cp ranks (each holds 1/cp of every micro-batch) */
static int token_shards(const ctx *c) { return tp_shards(c) * c->cpg.tp.size; }
/* The layer's view of a slot's context-parallel map: NULL without CP. */
static const rt_cp *cp_of(const slot *s) { return s->cp.size > 1 ? &s->cp : NULL; }

/* Size class of a request: the next power of two, so that a block is reused only by requests of
 * its own class (best-fit across classes let small requests eat large blocks and kept the pool
 * growing, i.e. faulting fresh pages). */
static size_t pool_class(size_t n)
{
    size_t c = 1024;
    while (c < n) c <<= 1;
    return c;
}

static double *pool_get(ctx *c, size_t n)
{
    pool *p = &c->pool;
    size_t want = pool_class(n);
    for (size_t i = 0; i < p->n; i++)
        if (p->size[i] == want) {
            double *d = p->ptr[i];
            p->ptr[i] = p->ptr[--p->n];
            p->size[i] = p->size[p->n];
            return d; /* not cleared: every buffer is written before it is read */
        }
    double *d = malloc(want * sizeof *d);
    if (!d) die(c, "out of host memory");
    return d;
}

static void pool_put(ctx *c, double *d, size_t n)
{
    if (!d) return;
    pool *p = &c->pool;
    if (dp_grow((void **)&p->ptr, &p->cap, p->n + 1, sizeof *p->ptr) != DP_OK ||
        dp_grow((void **)&p->size, &p->cap2, p->n + 1, sizeof *p->size) != DP_OK) {
        free(d);
        return;
    }
    p->ptr[p->n] = d;
    p->size[p->n++] = pool_class(n);
}

static void *xcalloc(const ctx *c, size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p) die(c, "out of host memory");
    return p;
}

static int tag_of(int mb, int chunk, int kind)
{
    return (mb * 64 + chunk) * 2 + kind;
}

static void wait_poll(const ctx *c, MPI_Request *r, const char *what, double spin_s)
{
    if (*r == MPI_REQUEST_NULL) return;
    double start = MPI_Wtime(), deadline = start + c->o->timeout_s;
    struct timespec nap = {0, 20000};
    for (;;) {
        int flag = 0;
        MPI_Status st;
        int rc = MPI_Test(r, &flag, &st); /* errors come back as rc (MPI_ERRORS_RETURN) */
        if (rc != MPI_SUCCESS) {
            char msg[400], es[MPI_MAX_ERROR_STRING];
            int len = 0;
            MPI_Error_string(rc, es, &len);
            snprintf(msg, sizeof msg, "%s failed: %s (a message larger than the plan's shape: the "
                     "ranks disagree on the plan?)", what, es);
            die(c, msg);
        }
        if (flag) return;
        if (MPI_Wtime() > deadline) {
            char msg[300];
            snprintf(msg, sizeof msg, "timed out after %.1f s waiting for %s", c->o->timeout_s, what);
            die(c, msg);
        }
        if (MPI_Wtime() - start >= spin_s) nanosleep(&nap, NULL);
        else sched_yield();
    }
}

static void wait_req(const ctx *c, MPI_Request *r, const char *what) { wait_poll(c, r, what, 0); }

static void record(ctx *c, int op, int mb, int chunk, double t_start, double t_end)
{
    if (!c->record || !rt_rank_records(c->tp_rank, c->cp_rank)) return;
    if (dp_grow((void **)&c->rec, &c->cap_rec, c->n_rec + 1, sizeof *c->rec) != DP_OK)
        die(c, "out of host memory");
    c->rec[c->n_rec++] = (rt_record){c->iteration, c->stage, c->replica, op, mb, chunk, c->record - RT_RECORD_ON,
                                     (t_start - c->t0) * 1e6, (t_end - c->t0) * 1e6};
}

int rt_mb_seqs(const plan_iter *it, const plan_mb *m, int dec, rt_seqs *s, int **store)
{
    memset(s, 0, sizeof *s);
    *store = NULL;
    if (!m->varlen || m->n_samples == 0) return 0;
    int *b = malloc(2 * (size_t)m->n_samples * sizeof *b);
    if (!b) return -1;
    for (int q = 0, at = 0; q < m->n_samples; q++) {
        int len = it->lens[2 * (m->first + q) + (dec ? 1 : 0)];
        b[q] = at, b[m->n_samples + q] = len;
        at += len;
    }
    s->n = m->n_samples, s->off = b, s->len = b + m->n_samples;
    *store = b;
    return 0;
}

dp_status rt_plan_check_lens(const plan *pl, const char *path, dp_err *err)
{
    for (int i = 0; i < pl->n_it; i++)
        for (int k = 0; k < pl->it[i].n_mb; k++) {
            const plan_iter *it = &pl->it[i];
            const plan_mb *m = &it->mb[k];
            int64_t sum = 0;
            for (int q = 0; m->varlen && q < m->n_samples; q++) sum += it->lens[2 * (m->first + q)];
            if (m->varlen && m->n_samples > 0 && sum == 0)
                return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d, micro-batch %d has varlen "
                               "attention but no \"seq_lens\" (the samples' own lengths, which "
                               "the runtime attends over); plan it again with this dpsim", path,
                               it->id, k);
        }
    return DP_OK;
}

dp_status rt_check_tp(const model_spec *m, int tp, const char *where, dp_err *err)
{
    if (tp > 1 && m->arch == ARCH_T5)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "%s: tp %d, and dprun splits GPT-kind layers only "
                       "(T5's cross-attention is not split)", where, tp);
    mesh layout = mesh_of(tp, 1, 1, 1);
    dp_status st = mesh_check_model(m, &layout, "tp", err); /* the layout rule: heads, MLP width */
    if (st != DP_OK) {
        dp_err_prefix(err, "%s", where);
        return st;
    }
    if (tp > 1 && m->vocab % tp) /* dprun's own: it splits the head without padding the vocabulary */
        return dp_fail(err, DP_ERR_INVALID, "%s: tp %d does not divide the %d-token vocabulary of "
                       "%s, and dprun splits the LM head by vocabulary without padding it (as "
                       "Megatron would)", where, tp, m->vocab, m->name);
    return DP_OK;
}

dp_status rt_check_moe(const model_spec *m, int ep, int tp, int on_gpu, const char *where, dp_err *err)
{
    if (!model_is_moe(m)) return DP_OK;
    if (on_gpu)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "%s: %s is a mixture of experts, and the cuda "
                       "backend has no expert layers\nhint: --backend cpu runs it", where, m->name);
    const char *missing = m->arch != ARCH_GPT ? "encoder-decoder layers"
                          : m->kv_lora > 0 ? "latent attention (kv_lora_rank)"
                          : m->shared_ffn > 0 ? "a shared expert (moe_shared_expert_intermediate_size)"
                          : m->moe_first > 0 || m->moe_freq > 1 ? "dense layers between the MoE ones "
                                                                  "(moe_first_dense_layers, moe_layer_freq)"
                          : m->router_bias ? "a router bias (moe_router_bias)"
                          : m->expert_bias ? "biases on the experts (moe_expert_bias)"
                          : NULL;
    if (missing)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "%s: %s is a mixture of experts with %s, which "
                       "dprun does not run: it runs one whose every layer is a GPT-kind layer routing "
                       "to its experts alone\nhint: dpsim sim --analytic plans and simulates it",
                       where, m->name, missing);
    if (ep > 1 && (tp % ep || m->experts % ep))
        return dp_fail(err, DP_ERR_UNSUPPORTED, "%s: ep %d, and dprun folds expert parallelism over "
                       "the tensor-parallel group: ep must divide tp (%d) and the %d experts\nhint: "
                       "plan with --tp a multiple of --ep", where, ep, tp, m->experts);
    return DP_OK;
}

/* Whether context parallelism of degree cp splits every micro-batch of the plan (rt_cp_split's
 * rule: 2 cp divides each sample and each stretch of padding), and then tensor parallelism with SP
 * each rank's share (cp 1: the whole micro-batch). */
static dp_status check_token_split(const plan *pl, int cp, int tp, int sp, const char *path, dp_err *err)
{
    for (int i = 0; i < pl->n_it; i++)
        for (int k = 0; k < pl->it[i].n_mb; k++) {
            const plan_iter *it = &pl->it[i];
            const plan_mb *mb = &it->mb[k];
            int n = mb->mbs * mb->enc_len, *store = NULL, bad = 0, bad_len = 0, rc;
            rt_seqs seqs;
            rt_cp map;
            if (rt_mb_seqs(it, mb, 0, &seqs, &store) != 0) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
            rc = cp > 1 ? rt_cp_split_batch(seqs.n ? &seqs : NULL, mb->mbs, mb->enc_len, cp, 0, 1, &map,
                                            &bad, &bad_len)
                        : 0;
            if (rc == 0 && cp > 1) rt_cp_free(&map);
            free(store);
            if (rc < 0) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
            if (rc > 0)
                return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d, micro-batch %d: context "
                               "parallelism cuts each sample (and each stretch of padding) into 2 "
                               "x cp = %d chunks, and the %s at token %d is %d tokens long\nhint: "
                               "plan it again with this dpsim (it pads to a multiple of 2 x cp), "
                               "without a varlen batching", path, it->id, k, 2 * cp,
                               seqs.n ? "sample or padding" : "padding", bad, bad_len);
            if (sp && tp > 1 && n / cp % tp)
                return dp_fail(err, DP_ERR_INVALID, "%s: iteration %d, micro-batch %d has %d x %d "
                               "tokens%s, which sequence parallelism cannot split over tp %d (plan "
                               "with --no-sp, or a --pad-multiple that tp divides)", path, it->id, k,
                               mb->mbs, mb->enc_len, cp > 1 ? ", their 1/cp on a cp rank" : "", tp);
        }
    return DP_OK;
}

dp_status rt_plan_check_layout(const plan *pl, const model_spec *m, int ranks, int on_gpu,
                               const char *path, dp_err *err)
{
    const plan_header *h = &pl->h;
    int tp = rt_plan_tp(h), cp = rt_plan_cp(h), need = h->pp * h->dp * tp * cp;
    dp_status st = rt_check_moe(m, rt_plan_ep(h), tp, on_gpu, path, err);
    if (st != DP_OK) return st;
    if (h->etp > 1)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "%s is planned with expert tensor parallelism (etp "
                       "%d), and dprun runs each expert whole on its rank: running it here would "
                       "measure another layout\nhint: plan with --etp 1 to validate on this runtime",
                       path, h->etp);
    if (h->cp_auto)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "%s is planned with a context-parallel degree per "
                       "micro-batch (--cp auto, a group of %d), and dprun runs one degree for "
                       "every micro-batch: running it here would measure another layout\nhint: "
                       "plan with --cp N to validate on this runtime", path, cp);
    if (cp > 1 && h->cp_alltoall)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "%s is planned for cp %d in the all-to-all form, and "
                       "dprun runs the ring form: running it here would measure another layout\n"
                       "hint: plan with --cp-kind ring to validate on this runtime", path, cp);
    if (cp > 1 && m->arch != ARCH_GPT)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "%s: cp %d, and context parallelism splits the "
                       "sequence of a decoder-only model; %s is an encoder-decoder", path, cp, m->name);
    if (on_gpu && stage_shard_size(h->shard_group, h->dp, cp) < h->dp * cp)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "%s is planned with ZeRO-%d sharded over groups of "
                       "%d GPUs and replicated across them (HSDP, \"shard_group\"), and the cuda "
                       "backend shards over the whole data-parallel group: running it here would "
                       "measure another layout\nhint: --backend cpu runs it, or plan without "
                       "--shard-group", path, h->zero, h->shard_group);
    if ((st = rt_check_tp(m, tp, path, err)) != DP_OK) return st;
    if ((st = placement_split_check(m, &h->split, h->pp * h->chunks, err)) != DP_OK) {
        dp_err_prefix(err, "%s", path);
        return st;
    }
    if ((tp > 1 || cp > 1) && on_gpu && ranks == 1)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "%s is planned for tp %d and cp %d, and one GPU runs "
                       "tp 1, cp 1 plans (every stage in one process); it runs one rank per GPU: "
                       "mpirun -np %d (tp x cp x pp x dp = %d x %d x %d x %d)", path, tp, cp, need, tp,
                       cp, h->pp, h->dp);
    mesh whole = mesh_of(tp, cp, h->pp, h->dp);
    int span = model_is_moe(m) && mesh_experts_span_replicas(&whole, rt_plan_ep(h), h->etp);
    for (int i = 0; i < pl->n_it; i++) /* (OK where nothing keeps in step) */
        if ((st = plan_iter_check_lockstep(&pl->it[i], h->zero, span, path, err)) != DP_OK)
            return st;
    if ((st = check_token_split(pl, cp, tp, h->sp, path, err)) != DP_OK) return st;
    if (ranks != need && !(on_gpu && ranks == 1)) {
        char layout[80];
        if (cp > 1)
            snprintf(layout, sizeof layout, "tp x cp x pp x dp = %d x %d x %d x %d", tp, cp, h->pp, h->dp);
        else if (tp > 1)
            snprintf(layout, sizeof layout, "tp x pp x dp = %d x %d x %d", tp, h->pp, h->dp);
        else
            snprintf(layout, sizeof layout, "pp x dp = %d x %d", h->pp, h->dp);
        return dp_fail(err, DP_ERR_INVALID, "%s needs %s = %d ranks%s, but mpirun started %d", path,
                       layout, need, on_gpu ? " (one per GPU), or 1 to run every stage on one GPU" : "",
                       ranks);
    }
    return DP_OK;
}

static slot *slot_of(ctx *c, int mb, int chunk)
{
    return &c->slots[(size_t)mb * (size_t)c->chunks + (size_t)chunk];
}

/* The sequences a layer of this slot's chunk attends within: its own side's, and (decoders) the
 * encoder's; NULL for whole rows. */
static const rt_seqs *self_seqs(const slot *s, const chunk_state *ch)
{
    const rt_seqs *q = &s->seqs[ch->place.decoder ? 1 : 0];
    return q->n ? q : NULL;
}

static const rt_seqs *enc_seqs(const slot *s, const chunk_state *ch)
{
    return ch->place.decoder && s->seqs[0].n ? &s->seqs[0] : NULL;
}

/* The slot's shape on this rank: its share of the tokens under CP (the map, from the micro-batch's
 * sequences, as rt_plan_check_layout checked it) and under SP; then its buffers. */
static void slot_open_shape(ctx *c, slot *s, const chunk_state *ch)
{
    if (c->cpg.tp.size > 1) {
        int bad = 0, bad_len = 0;
        int rc = rt_cp_split_batch(self_seqs(s, ch), s->B, s->S, c->cpg.tp.size, c->cp_rank,
                                   ch->shape.causal, &s->cp, &bad, &bad_len);
        if (rc < 0) die(c, "out of host memory");
        if (rc > 0) die(c, "a micro-batch that context parallelism cannot split (the layout check "
                           "passed it?)");
        s->cp.group = &c->cpg.tp;
        s->n = s->cp.n_local;
    }
    s->nh = (size_t)rt_tp_tokens(tp_of(c), s->n) * c->hidden; /* this rank's tokens */
    s->in = pool_get(c, s->nh);
    s->out = pool_get(c, s->nh);
    s->dout = pool_get(c, s->nh);
    s->din = pool_get(c, s->nh);
    if (ch->place.decoder) {
        s->enc = pool_get(c, s->ne);
        s->denc = pool_get(c, s->ne);
    }
}

static void slot_open(ctx *c, slot *s, const plan_mb *m, const chunk_state *ch)
{
    if (s->alive) return;
    s->alive = 1;
    s->recompute = pm_recompute(c->o->pl, c->it, m->id);
    s->B = m->mbs;
    s->S = ch->place.decoder ? m->dec_len : m->enc_len;
    s->Se = ch->place.decoder ? m->enc_len : 0;
    s->n = s->B * s->S;
    s->ne = (size_t)s->B * s->Se * c->hidden;
    s->recv[0] = s->recv[1] = s->send[0] = s->send[1] = MPI_REQUEST_NULL;
    for (int side = 0; side < 2; side++)
        if (rt_mb_seqs(c->it, m, side, &s->seqs[side], &s->seq_store[side]) != 0)
            die(c, "out of host memory");
    slot_open_shape(c, s, ch);
}

static void slot_free(ctx *c, slot *s, const chunk_state *ch)
{
    wait_req(c, &s->send[0], "SEND_ACT completion");
    wait_req(c, &s->send[1], "SEND_GRAD completion");
    size_t na = rt_layer_acts_doubles(&ch->shape, s->B, s->S, s->Se);
    if (s->acts)
        for (int l = 0; l < ch->layers; l++) pool_put(c, s->acts[l].x, na); /* x: the block's start */
    pool_put(c, s->ckpt, (size_t)ch->layers * s->nh);
    pool_put(c, s->in, s->nh), pool_put(c, s->out, s->nh), pool_put(c, s->dout, s->nh);
    pool_put(c, s->din, s->nh), pool_put(c, s->enc, s->ne), pool_put(c, s->denc, s->ne);
    for (int k = 0; k < 2; k++) pool_put(c, s->rx[k], s->rx_n[k]), pool_put(c, s->tx[k], s->tx_n[k]);
    pool_put(c, s->dlogits, (size_t)s->n * c->vocab_local);
    pool_put(c, s->head_in, (size_t)s->n * c->hidden);
    rt_cp_free(&s->cp);
    free(s->acts);
    free(s->seq_store[0]), free(s->seq_store[1]);
    memset(s, 0, sizeof *s);
}

/* Frees the slots whose FREE has come and whose sends have completed. */
static void release_sent(ctx *c)
{
    size_t n = (size_t)c->it->n_mb * (size_t)c->chunks;
    for (size_t k = 0; k < n; k++) {
        slot *s = &c->slots[k];
        if (!s->alive || !s->free_pending) continue;
        int done0 = 0, done1 = 0;
        MPI_TRY(c, MPI_Test(&s->send[0], &done0, MPI_STATUS_IGNORE));
        MPI_TRY(c, MPI_Test(&s->send[1], &done1, MPI_STATUS_IGNORE));
        if (done0 && done1) slot_free(c, s, &c->ch[k % (size_t)c->chunks]);
    }
}

/* The wire size a transfer of the plan must have for this stage's shapes; a mismatch means the
 * plan and the model disagree, which is refused rather than sent. */
static void check_wire(const ctx *c, const plan_instr *x, size_t want)
{
    int eb = c->o->pl->h.act_elem_bytes;
    size_t whole = want * (size_t)token_shards(c); /* the plan counts the whole activation */
    if ((size_t)x->bytes == (size_t)eb * whole) return;
    char msg[240];
    snprintf(msg, sizeof msg, "%s mb %d: the plan says %lld bytes, the micro-batch's shape needs "
             "%zu (%zu %s elements)", plan_op_name(x->op), x->mb, (long long)x->bytes,
             (size_t)eb * whole, whole, c->o->pl->h.act_dtype);
    die(c, msg);
}

/* One layer's activation block from the pool, for full recompute's forward and rerun. */
static void scratch_open(ctx *c, const slot *s, const chunk_state *ch, rt_layer_acts *a)
{
    size_t na = rt_layer_acts_doubles(&ch->shape, s->B, s->S, s->Se);
    rt_layer_acts_bind(a, &ch->shape, s->B, s->S, s->Se, pool_get(c, na));
}

static void scratch_close(ctx *c, const slot *s, const chunk_state *ch, rt_layer_acts *a)
{
    pool_put(c, a->x, rt_layer_acts_doubles(&ch->shape, s->B, s->S, s->Se));
}

/* The input embedding's lookups of this rank's tokens (a hash of each token's index in the whole
 * micro-batch, so that every layout trains on the same numbers): under SP its 1/tp of the cp
 * rank's tokens, under CP the cp rank's pieces. */
static void fill_input(const ctx *c, const slot *s, unsigned seed)
{
    size_t H = (size_t)c->hidden, n = s->nh / H;
    for (size_t t = 0; t < n; t++)
        rt_fill_at(s->in + t * H, H, (size_t)rt_input_token(cp_of(s), tp_shards(c), c->tp_rank, (int)n, (int)t) * H,
                   seed, 1.0);
}

/* ---- ZeRO-2/3 over the stage's ranks (DeepSpeed's and FSDP's sharding as the stage model prices
 * it, models/comm.h comm_zero: ZeRO-3 gathers each layer's parameters for every micro-batch's
 * forward and backward, one layer ahead; ZeRO-2 and 3 reduce-scatter each micro-batch's gradients
 * after its backward; ZeRO-2 gathers the parameters after the iteration, where an optimizer would
 * have stepped its shard). Each rank keeps its shard of every layer; the whole blocks stay
 * allocated (the CPU runtime times, it does not save memory). */

static void zero_gather_start(ctx *c, chunk_state *ch, int l, MPI_Request *rq)
{
    if (ch->shard > (size_t)INT_MAX) die(c, "a parameter shard of more than 2^31 values");
    MPI_TRY(c, MPI_Iallgather(ch->ps[l], (int)ch->shard, MPI_DOUBLE, ch->p[l].block, (int)ch->shard,
                              MPI_DOUBLE, c->shard_comm, rq));
}

/* The cpu device's collectives on chunk k's layer l (engine.h rt_grad_ops). */
static void grad_sum_group(void *vc, int k, int l, size_t off, size_t len, int group)
{
    ctx *c = vc;
    rt_mpi_tp *g = group == RT_GRAD_SUM_EXPERTS ? &c->expg : &c->tpg;
    g->tp.allreduce(g, c->ch[k].g[l].block + off, len, RT_TP_SUM);
}

static void grad_reduce_scatter(void *vc, int k, int l)
{
    ctx *c = vc;
    chunk_state *ch = &c->ch[k];
    double *mine = pool_get(c, ch->shard);
    MPI_Request rq;
    MPI_TRY(c, MPI_Ireduce_scatter_block(ch->g[l].block, mine, (int)ch->shard, MPI_DOUBLE, MPI_SUM,
                                         c->shard_comm, &rq));
    wait_poll(c, &rq, "a ZeRO gradient reduce-scatter", RT_SPIN_COLLECTIVE_S);
    for (size_t i = 0; i < ch->shard; i++) ch->gs[l][i] += mine[i];
    memset(ch->g[l].block, 0, ch->shard * (size_t)c->zranks * sizeof(double));
    pool_put(c, mine, ch->shard);
}

/* n values summed in place over comm, with the timeout */
static void allreduce_on(ctx *c, MPI_Comm comm, double *v, size_t n, const char *what)
{
    MPI_Request rq;
    if (n > (size_t)INT_MAX) die(c, "a gradient block of more than 2^31 values");
    MPI_TRY(c, MPI_Iallreduce(MPI_IN_PLACE, v, (int)n, MPI_DOUBLE, MPI_SUM, comm, &rq));
    wait_poll(c, &rq, what, RT_SPIN_COLLECTIVE_S);
}

static void grad_allreduce(void *vc, int k, int l)
{
    ctx *c = vc;
    allreduce_on(c, c->stage_comm, c->ch[k].g[l].block, c->ch[k].g[l].count,
                 "the gradient all-reduce across replicas");
}

static void grad_gather_params(void *vc, int k, int l)
{
    ctx *c = vc;
    MPI_Request rq;
    zero_gather_start(c, &c->ch[k], l, &rq);
    wait_poll(c, &rq, "a ZeRO-2 parameter gather", RT_SPIN_COLLECTIVE_S);
}

static void grad_across(void *vc, int k, int l)
{
    ctx *c = vc;
    allreduce_on(c, c->across_comm, c->ch[k].gs[l], c->ch[k].shard,
                 "the HSDP shards' all-reduce across shard groups");
}

static const rt_grad_ops CPU_GRADS = {grad_sum_group, grad_reduce_scatter, grad_allreduce,
                                      grad_gather_params, grad_across};

/* ZeRO-2/3: chunk k's gradients after a B or W (engine.h rt_grads_zero_reduce). */
static void zero_reduce(ctx *c, int k)
{
    if (c->zero) rt_grads_zero_reduce(&CPU_GRADS, c, k, &c->ch[k].shape, c->ch[k].layers,
                                      c->tpg.tp.size, c->tpg.tp.sp);
}

/* The elements of a transfer of `kind` that slot s sends or receives (placement_wire_parts). */
static size_t wire_elems(const chunk_state *ch, const slot *s, int kind, int send)
{
    placement_wire w = placement_wire_parts(&ch->place, kind == KIND_GRAD, send);
    return (w.hidden ? s->nh : 0) + (w.enc ? s->ne : 0);
}

/* A received transfer into the compute buffers: in or dout, then enc or denc. */
static void wire_unpack(const chunk_state *ch, slot *s, int kind)
{
    placement_wire w = placement_wire_parts(&ch->place, kind == KIND_GRAD, 0);
    const double *at = s->rx[kind];
    if (w.hidden) memcpy(kind == KIND_ACT ? s->in : s->dout, at, s->nh * sizeof(double)), at += s->nh;
    if (w.enc) memcpy(kind == KIND_ACT ? s->enc : s->denc, at, s->ne * sizeof(double));
}

/* ---- The cpu device's layer operations (engine.h rt_pass_ops) on one (micro-batch, chunk) */

typedef struct cpu_pass {
    ctx *c;
    chunk_state *ch;
    slot *s;
    int full;              /* under full recompute: one layer's activations at a time */
    rt_layer_acts scratch; /* ... in this block */
    double *rerun_y;       /* ... and the rerun forward's output */
    MPI_Request zrq[2];    /* ZeRO-3's gathers, by the layer's parity */
} cpu_pass;

static rt_layer_acts *pass_acts(cpu_pass *p, int l) { return p->full ? &p->scratch : &p->s->acts[l]; }

static void layer_gather(void *v, int l)
{
    cpu_pass *p = v;
    if (p->c->zero >= 3) zero_gather_start(p->c, p->ch, l, &p->zrq[l & 1]);
}

static void layer_gather_wait(void *v, int l)
{
    cpu_pass *p = v;
    if (p->c->zero >= 3)
        wait_poll(p->c, &p->zrq[l & 1], "a ZeRO-3 parameter gather", RT_SPIN_COLLECTIVE_S);
}

static void layer_keep_input(void *v, int l, const void *x)
{
    cpu_pass *p = v;
    if (p->full) memcpy(p->s->ckpt + (size_t)l * p->s->nh, x, p->s->nh * sizeof(double));
}

/* The micro-batch as a layer of the chunk sees it (its sequences, the tp group, the cp map). */
static void acts_see(cpu_pass *p, rt_layer_acts *a)
{
    a->enc = p->s->enc;
    a->seqs = self_seqs(p->s, p->ch), a->enc_seqs = enc_seqs(p->s, p->ch);
    a->tp = tp_of(p->c), a->cp = cp_of(p->s);
}

static void layer_forward(void *v, int l, const void *x, void *y)
{
    cpu_pass *p = v;
    rt_layer_acts *a = pass_acts(p, l);
    acts_see(p, a);
    rt_layer_fwd(&p->ch->p[l], &p->ch->shape, p->s->B, p->s->S, x, y, a);
}

static void layer_rerun(void *v, int l)
{
    cpu_pass *p = v;
    slot *s = p->s;
    rt_layer_acts *a = pass_acts(p, l);
    acts_see(p, a);
    if (rt_layer_rerun(&p->ch->p[l], &p->ch->shape, s->B, s->S, s->recompute,
                       p->full ? s->ckpt + (size_t)l * s->nh : NULL, p->rerun_y, a))
        p->c->rerun[p->full ? 0 : 1] += p->c->record != RT_RECORD_OFF;
}

static void layer_backward_input(void *v, int l, const void *dy, void *dx)
{
    cpu_pass *p = v;
    rt_layer_acts *a = pass_acts(p, l);
    a->denc = p->s->denc; /* every decoder layer adds its encoder-output gradient */
    rt_layer_bwd_input(&p->ch->p[l], &p->ch->g[l], &p->ch->shape, p->s->B, p->s->S, dy, dx, a);
}

static void layer_backward_weight(void *v, int l)
{
    cpu_pass *p = v;
    rt_layer_bwd_weight(&p->ch->g[l], &p->ch->shape, p->s->B, p->s->S, pass_acts(p, l));
}

static void layer_copy(void *v, void *dst, const void *src)
{
    memcpy(dst, src, ((cpu_pass *)v)->s->nh * sizeof(double));
}

static const rt_pass_ops CPU_PASS = {layer_gather, layer_gather_wait, layer_keep_input,
                                     layer_forward, layer_rerun, layer_backward_input,
                                     layer_backward_weight, layer_copy};

static void do_forward(ctx *c, const plan_instr *x, slot *s)
{
    chunk_state *ch = &c->ch[x->chunk];
    int n = s->n, H = c->hidden;
    /* unpack the received activation */
    if (ch->place.embedding) /* input embedding: this rank's tokens of it */
        fill_input(c, s, (unsigned)(x->mb * 131 + c->iteration));
    else
        wire_unpack(ch, s, KIND_ACT);
    if (ch->place.first_decoder) /* its input is the target embedding (the encoder output came in) */
        rt_fill(s->in, s->nh, (unsigned)(x->mb * 977 + c->iteration), 1.0);
    cpu_pass p = {.c = c, .ch = ch, .s = s, .full = s->recompute == RECOMPUTE_FULL};
    if (p.full && !s->ckpt) s->ckpt = pool_get(c, (size_t)ch->layers * s->nh);
    if (!p.full && !s->acts) {
        s->acts = xcalloc(c, (size_t)ch->layers, sizeof *s->acts);
        size_t na = rt_layer_acts_doubles(&ch->shape, s->B, s->S, s->Se);
        for (int l = 0; l < ch->layers; l++)
            rt_layer_acts_bind(&s->acts[l], &ch->shape, s->B, s->S, s->Se, pool_get(c, na));
    }
    if (p.full) scratch_open(c, s, ch, &p.scratch); /* one layer's activations at a time */
    rt_pass_forward(&CPU_PASS, &p, ch->layers, s->in, s->out, s->din, s->dout); /* (scratch) */
    if (p.full) scratch_close(c, s, ch, &p.scratch);
    if (ch->place.head) { /* LM head (tied embedding, split by vocabulary under TP) and loss */
        size_t nv = (size_t)n * c->vocab_local;
        const double *head_in = s->out;
        if (tp_shards(c) > 1) { /* SP: the head reads every token of this cp rank */
            s->head_in = pool_get(c, (size_t)n * H);
            rt_tp_gather(tp_of(c), s->out, s->head_in, s->nh);
            head_in = s->head_in;
        }
        double *logits = pool_get(c, nv);
        s->dlogits = pool_get(c, nv);
        if (rt_lm_head_fwd_tp(tp_of(c), cp_of(s), head_in, c->emb, logits, s->dlogits, n, H, c->vocab,
                              x->mb) != 0)
            die(c, "out of host memory");
        pool_put(c, logits, nv);
    }
}

/* A B: the input gradients of the chunk's layers, last first, and with `weights` each layer's
 * weight gradients right after its input gradients (as autograd orders them, and as dprun
 * profile times a layer's backward); a full-recompute B always has them (plan_machine.h's rule
 * "recompute": its B is never split). */
static void do_backward(ctx *c, const plan_instr *x, slot *s, int weights)
{
    chunk_state *ch = &c->ch[x->chunk];
    int n = s->n, H = c->hidden;
    if (ch->place.head) { /* LM head backward: d(out) and d(embedding) */
        rt_lm_head_bwd_tp(tp_of(c), s->dlogits, c->emb, s->head_in ? s->head_in : s->out, s->dout,
                          c->demb, n, H, c->vocab);
        if (ch->place.decoder) memset(s->denc, 0, s->ne * sizeof(double));
    } else {
        wire_unpack(ch, s, KIND_GRAD);
    }
    /* pm_recompute: selective reruns each layer's attention core before its backward; full its
     * whole forward from the saved input, then its gradients, so that one layer's activations
     * exist at a time (in is scratch by now: the inputs are kept in acts or ckpt) */
    cpu_pass p = {.c = c, .ch = ch, .s = s, .full = s->recompute == RECOMPUTE_FULL};
    if (p.full) scratch_open(c, s, ch, &p.scratch), p.rerun_y = pool_get(c, s->nh);
    rt_pass_backward(&CPU_PASS, &p, ch->layers, weights, s->dout, s->din, s->in);
    if (p.full) scratch_close(c, s, ch, &p.scratch), pool_put(c, p.rerun_y, s->nh);
}

/* A W: the weight gradients its B left (a split rank). */
static void do_backward_weight(ctx *c, const plan_instr *x, slot *s)
{
    cpu_pass p = {.c = c, .ch = &c->ch[x->chunk], .s = s};
    rt_pass_weights(&CPU_PASS, &p, p.ch->layers);
}

/* Packs what a send carries into its wire buffer. */
static double *pack(ctx *c, const plan_instr *x, slot *s, int kind)
{
    const chunk_state *ch = &c->ch[x->chunk];
    placement_wire parts = placement_wire_parts(&ch->place, kind == KIND_GRAD, 1);
    size_t n = wire_elems(ch, s, kind, 1);
    check_wire(c, x, n);
    double *w = pool_get(c, n), *at = w;
    s->tx[kind] = w;
    s->tx_n[kind] = n;
    if (parts.hidden) memcpy(at, kind == KIND_ACT ? s->out : s->din, s->nh * sizeof(double)), at += s->nh;
    if (parts.enc) memcpy(at, kind == KIND_ACT ? s->enc : s->denc, s->ne * sizeof(double));
    return w;
}

/* ---- The cpu medium of the executor loop (exec_loop.h): host compute, MPI transfers, MPI_Wtime
 * timestamps. Faults end the job (die), so no hook returns -1. */

static slot *slot_at(ctx *c, const pm_step *s) { return slot_of(c, s->x->mb, s->x->chunk); }
/* the world rank at the other end of a transfer: the same (cp, tp) rank of the peer's group */
static int peer_of(const ctx *c, const pm_step *s)
{
    return rt_world_rank(&c->o->pl->h, s->peer_rank, c->cp_rank, c->tp_rank);
}

static int cpu_begin(void *vc, const pm_step *s)
{
    (void)s;
    ((ctx *)vc)->t_op = MPI_Wtime();
    return 0;
}

static int cpu_end(void *vc, const pm_step *s)
{
    ctx *c = vc;
    record(c, s->op, s->x->mb, s->x->chunk, c->t_op, MPI_Wtime());
    return 0;
}

static int cpu_recv(void *vc, const pm_step *s)
{
    ctx *c = vc;
    slot *sl = slot_at(c, s);
    slot_open(c, sl, &c->it->mb[s->x->mb], &c->ch[s->x->chunk]);
    size_t n = wire_elems(&c->ch[s->x->chunk], sl, s->kind, 0);
    check_wire(c, s->x, n);
    sl->rx[s->kind] = pool_get(c, n);
    sl->rx_n[s->kind] = n;
    MPI_TRY(c, MPI_Irecv(sl->rx[s->kind], (int)n, MPI_DOUBLE, peer_of(c, s),
                         tag_of(s->x->mb, s->x->chunk, s->kind), MPI_COMM_WORLD, &sl->recv[s->kind]));
    return 0;
}

static int cpu_await(void *vc, const pm_step *s)
{
    ctx *c = vc;
    char what[160];
    snprintf(what, sizeof what, "instruction %d (%s mb %d chunk %d)", s->index, plan_op_name(s->op),
             s->x->mb, s->x->chunk);
    wait_req(c, &slot_at(c, s)->recv[s->waits], what);
    return 0;
}

static int cpu_forward(void *vc, const pm_step *s)
{
    ctx *c = vc;
    slot *sl = slot_at(c, s);
    slot_open(c, sl, &c->it->mb[s->x->mb], &c->ch[s->x->chunk]);
    do_forward(c, s->x, sl);
    return 0;
}

static int cpu_backward(void *vc, const pm_step *s, int weights)
{
    ctx *c = vc;
    slot *sl = slot_at(c, s);
    do_backward(c, s->x, sl, weights);
    return 0;
}

static int cpu_weights(void *vc, const pm_step *s)
{
    do_backward_weight(vc, s->x, slot_at(vc, s));
    return 0;
}

static int cpu_reduce(void *vc, const pm_step *s)
{
    ctx *c = vc;
    zero_reduce(c, s->x->chunk);
    return 0;
}

static int cpu_send(void *vc, const pm_step *s)
{
    ctx *c = vc;
    slot *sl = slot_at(c, s);
    double *buf = pack(c, s->x, sl, s->kind);
    MPI_TRY(c, MPI_Isend(buf, (int)sl->tx_n[s->kind], MPI_DOUBLE, peer_of(c, s),
                         tag_of(s->x->mb, s->peer_chunk, s->kind), MPI_COMM_WORLD, &sl->send[s->kind]));
    return 0;
}

/* plan_machine.h: the slot is released here; the wire buffers of its sends go once those
 * complete (waiting here could deadlock a plan whose receiver posts later, with rendezvous-sized
 * messages): FREE marks, sweeps release */
static int cpu_release(void *vc, const pm_step *s)
{
    ctx *c = vc;
    slot_at(c, s)->free_pending = 1;
    release_sent(c);
    return 0;
}

static const rt_medium CPU_MEDIUM = {NULL,        cpu_begin,   cpu_end,     cpu_recv,
                                     cpu_await,   cpu_forward, cpu_backward, cpu_weights,
                                     cpu_reduce,  cpu_send,    cpu_release};

/* One run of an iteration (exec_loop.h rt_run_fn); faults abort, so it returns DP_OK. */
static dp_status run_iteration(void *vc, const plan_iter *it, int iteration, int recording)
{
    ctx *c = vc;
    c->it = it;
    c->iteration = iteration;
    c->record = recording;
    size_t nslots = (size_t)it->n_mb * (size_t)c->chunks;
    c->slots = xcalloc(c, nslots, sizeof *c->slots);
    pm_init(&c->pm, it, c->chunks);
    /* gradients are the iteration's own (a warm-up run adds nothing to the measured one) */
    for (int k = 0; k < c->chunks; k++)
        for (int l = 0; l < c->ch[k].layers; l++) {
            chunk_state *ch = &c->ch[k];
            memset(ch->g[l].block, 0, (c->zero ? ch->shard * c->zranks : ch->g[l].count) * sizeof(double));
            if (c->zero) memset(ch->gs[l], 0, ch->shard * sizeof(double));
        }
    if (c->demb) memset(c->demb, 0, (size_t)c->vocab_local * c->hidden * sizeof(double));
    MPI_Request bar;
    MPI_TRY(c, MPI_Ibarrier(MPI_COMM_WORLD, &bar)); /* with the timeout: a stalled rank must not hang the rest */
    wait_req(c, &bar, "the other ranks at the start of the iteration");
    c->t0 = MPI_Wtime();
    dp_err err = {0};
    if (rt_loop_iteration(&c->pm, c->replica, c->drives, &CPU_MEDIUM, c, &err) != DP_OK)
        die(c, err.msg); /* (the hooks abort on faults; this is the loop's own verdict) */
    for (size_t k = 0; k < nslots; k++)
        if (c->slots[k].alive) slot_free(c, &c->slots[k], &c->ch[k % (size_t)c->chunks]);
    free(c->slots);
    c->slots = NULL;
    pm_release(&c->pm);
    for (int k = 0; !c->zero && k < c->chunks; k++) /* (ZeRO-2/3 summed them before each
                                                       * reduce-scatter) */
        rt_grads_partial(&CPU_GRADS, c, k, &c->ch[k].shape, c->ch[k].layers, c->tpg.tp.size,
                         c->tpg.tp.sp);
    if (c->o->pl->h.dp * c->cpg.tp.size > 1) { /* the stage's replicas and cp ranks (each summed
                                                * over its own tokens) */
        double t = MPI_Wtime();
        for (int k = 0; k < c->chunks; k++)
            rt_grads_replicas(&CPU_GRADS, c, k, c->ch[k].layers, c->zero, c->across > 1);
        if (c->demb)
            allreduce_on(c, c->stage_comm, c->demb, (size_t)c->vocab_local * c->hidden,
                         "the gradient all-reduce across replicas");
        record(c, RT_OP_ALLREDUCE, 0, 0, t, MPI_Wtime());
    }
    return DP_OK;
}

dp_status rt_execute(const rt_opts *o, rt_result *res, dp_err *err)
{
    const plan *pl = o->pl;
    const model_spec *m = o->model;
    ctx c = {0};
    c.o = o;
    memset(res, 0, sizeof *res);
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    gethostname(c.host, sizeof c.host - 1);
    c.pp = pl->h.pp;
    c.chunks = pl->h.chunks;
    c.nv = c.pp * c.chunks;
    rt_place at = rt_place_of(&pl->h, c.rank);
    c.stage = at.stage, c.replica = at.replica, c.tp_rank = at.tp_rank, c.cp_rank = at.cp_rank;
    if (m->arch == ARCH_T5 && (c.chunks > 1 || c.nv < 2))
        return dp_fail(err, DP_ERR_UNSUPPORTED,
                       "dprun runs T5 plans on at least 2 stages (encoder, then decoder) and "
                       "without interleaving");
    int tp = rt_plan_tp(&pl->h), cp = rt_plan_cp(&pl->h);
    c.hidden = m->hidden;
    c.vocab = m->vocab;
    c.vocab_local = m->vocab / tp;
    mesh layout = rt_plan_mesh(&pl->h);
    mesh_coord here = mesh_place(&layout, c.rank);
    mesh_group g = mesh_group_of(&layout, here, MESH_TP);
    MPI_TRY(&c, MPI_Comm_split(MPI_COMM_WORLD, g.colour, g.key, &c.tp_comm));
    rt_mpi_tp_init(&c.tpg, c.tp_comm, pl->h.sp, group_wait, tp_die, &c);
    g = mesh_group_of(&layout, here, MESH_CP);
    MPI_TRY(&c, MPI_Comm_split(MPI_COMM_WORLD, g.colour, g.key, &c.cp_comm));
    rt_mpi_tp_init(&c.cpg, c.cp_comm, 0, group_wait, tp_die, &c);
    /* this stage's replicas and cp ranks, the same tp rank of each */
    g = mesh_group_of(&layout, here, MESH_DP_CP);
    MPI_TRY(&c, MPI_Comm_split(MPI_COMM_WORLD, g.colour, g.key, &c.stage_comm));
    int shard = stage_shard_size(pl->h.shard_group, pl->h.dp, cp); /* g.size GPUs, or HSDP's */
    MPI_TRY(&c, MPI_Comm_split(c.stage_comm, g.key / shard, g.key % shard, &c.shard_comm));
    MPI_TRY(&c, MPI_Comm_split(c.stage_comm, g.key % shard, g.key / shard, &c.across_comm));
    MPI_Comm_size(c.shard_comm, &c.zranks);
    MPI_Comm_rank(c.shard_comm, &c.zrank);
    MPI_Comm_size(c.across_comm, &c.across);
    c.zero = rt_zero_stage(&pl->h, c.zranks);
    c.ch = xcalloc(&c, (size_t)c.chunks, sizeof *c.ch);
    for (int k = 0; k < c.chunks; k++) {
        int v = placement_vstage((placement_kind)pl->h.placement, c.stage, k, c.pp);
        rt_chunk_plan chunk = rt_chunk_plan_of(&pl->h, m, v);
        chunk_state *ch = &c.ch[k];
        ch->place = chunk.place, ch->shape = chunk.shape, ch->layers = chunk.layers;
        ch->p = xcalloc(&c, (size_t)ch->layers, sizeof *ch->p);
        ch->g = xcalloc(&c, (size_t)ch->layers, sizeof *ch->g);
        ch->shard = c.zero ? rt_zero_shard(chunk.count, c.zranks) : 0;
        size_t block = c.zero ? ch->shard * (size_t)c.zranks : chunk.count; /* ZeRO: whole shards */
        if (c.zero) {
            ch->ps = xcalloc(&c, (size_t)ch->layers, sizeof *ch->ps);
            ch->gs = xcalloc(&c, (size_t)ch->layers, sizeof *ch->gs);
        }
        for (int l = 0; l < ch->layers; l++) {
            double *pb = xcalloc(&c, block, sizeof *pb), *gb = xcalloc(&c, block, sizeof *gb);
            rt_layer_params_bind(&ch->p[l], &ch->shape, pb), ch->p[l].block = pb;
            rt_layer_params_bind(&ch->g[l], &ch->shape, gb), ch->g[l].block = gb;
            if (rt_chunk_layer_params(&chunk, &pl->h, c.tp_rank, l, pb) != 0)
                die(&c, "out of host memory");
            if (c.zero) { /* this rank's shard of the parameters; its gradients' */
                ch->ps[l] = xcalloc(&c, ch->shard, sizeof(double));
                ch->gs[l] = xcalloc(&c, ch->shard, sizeof(double));
                memcpy(ch->ps[l], pb + (size_t)c.zrank * ch->shard, ch->shard * sizeof(double));
            }
        }
        if (ch->place.head) { /* under TP this rank's rows of the vocabulary */
            size_t rows = (size_t)c.vocab_local * m->hidden;
            c.emb = xcalloc(&c, rows, sizeof(double));
            c.demb = xcalloc(&c, rows, sizeof(double));
            rt_embedding_rows(c.emb, rows, c.tp_rank);
        }
    }
    /* the tp ranks holding the same experts (layout.h rt_layer_expert_rank; the layer shape's ep,
     * 0 for a dense model: one group) */
    MPI_TRY(&c, MPI_Comm_split(c.tp_comm, rt_layer_expert_rank(&c.ch[0].shape, c.tp_rank),
                               rt_layer_expert_group(&c.ch[0].shape, c.tp_rank), &c.exp_comm));
    rt_mpi_tp_init(&c.expg, c.exp_comm, 0, group_wait, tp_die, &c);
    c.drives = xcalloc(&c, (size_t)c.pp, 1);
    c.drives[c.stage] = 1; /* the group's one stage */
    rt_layer_set_yield(mpi_progress);
    rt_loop_runs(o, c.rank, 0, run_iteration, &c); /* no plans to prepare on the host */
    rt_layer_set_yield(NULL);
    free(c.drives);
    for (int k = 0; c.zero && k < c.chunks; k++) /* the reduced gradients whole, for the figure */
        for (int l = 0; l < c.ch[k].layers; l++)
            MPI_TRY(&c, MPI_Allgather(c.ch[k].gs[l], (int)c.ch[k].shard, MPI_DOUBLE,
                                      c.ch[k].g[l].block, (int)c.ch[k].shard, MPI_DOUBLE,
                                      c.shard_comm));
    MPI_Comm_free(&c.across_comm);
    MPI_Comm_free(&c.shard_comm);
    MPI_Comm_free(&c.stage_comm);
    MPI_Comm_free(&c.tp_comm);
    MPI_Comm_free(&c.cp_comm);
    MPI_Comm_free(&c.exp_comm);
    res->grad_sq = 0;
    for (int k = 0; k < c.chunks; k++) {
        for (int l = 0; l < c.ch[k].layers; l++) {
            res->grad_sq += rt_grad_sq_share(&c.ch[k].shape, c.ch[k].g[l].block, tp, c.tp_rank);
            rt_layer_params_free(&c.ch[k].p[l]);
            rt_layer_params_free(&c.ch[k].g[l]);
            if (c.zero) free(c.ch[k].ps[l]), free(c.ch[k].gs[l]);
        }
        free(c.ch[k].p), free(c.ch[k].g), free(c.ch[k].ps), free(c.ch[k].gs);
    }
    if (c.demb) res->grad_sq += rt_sum_sq(c.demb, (size_t)c.vocab_local * m->hidden);
    free(c.ch), free(c.emb), free(c.demb);
    for (size_t i = 0; i < c.pool.n; i++) free(c.pool.ptr[i]);
    free(c.pool.ptr), free(c.pool.size);
    res->rec = c.rec;
    res->n_rec = c.n_rec;
    res->rerun_layers = c.rerun[0], res->rerun_attention = c.rerun[1];
    return DP_OK;
}

