/*
 * fake_cuda.c — runtime/cuda/layer_cuda.h and runtime/cuda/nccl_link.h on the host, for testing
 * runtime/exec_gpu.c without a GPU. "Device" memory is host memory, the layer is the CPU layer
 * (runtime/layer.h), and the GPU work of a stream runs synchronously when it is enqueued. An
 * event records a global tick, so that a test can check the order in which the executor
 * enqueued its work.
 *
 * Every buffer the executor hands over is checked against the allocation it lies in, at the bytes
 * the layer's element type needs (runtime/layout.h): a size computed for the wrong type aborts.
 * A bf16 layer runs the fp64 CPU layer on values rounded to bf16 where the GPU's bf16 layer
 * stores them (inputs, outputs, the parameters' bf16 copy), with fp32 gradient blocks; its
 * saved fp64 activations live beside the (smaller) bf16 activation block.
 *
 * NCCL is MPI: a communicator is an MPI communicator (ncclCommSplit: MPI_Comm_split), a send or
 * receive is an MPI_Isend / MPI_Irecv left pending on its stream, and it completes when another
 * stream waits for an event recorded after it, or when its stream is synchronised or queried
 * done — where a real stream would have waited for NCCL. So the multi-GPU mode runs under
 * mpirun on any machine, its transfers really moving the data.
 */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/cuda/layer_cuda.h"
#include "../../runtime/cuda/nccl_link.h"
#include "../../common/dp.h"
#include "../../runtime/layer.h"

struct rt_cuda {
    int device;
    MPI_Request *pending; /* this stream's transfers not known to be complete */
    size_t n_pending, cap;
    unsigned gen;         /* bumped when pending empties: older events are complete */
    int shapes[512][4];   /* the layer shapes seen (B, S, Se, kind): the GPU's plan caches */
    int n_shapes;
    long gemm_plans;      /* a new shape "builds" its GEMM configurations (rt_cuda_firsts) */
};

typedef struct fake_event {
    uint64_t tick;
    rt_cuda *on;   /* the stream it was recorded on */
    unsigned gen;  /* ... in this generation */
    size_t upto;   /* ... after its first `upto` pending transfers */
} fake_event;

static uint64_t tick;

rt_cuda *rt_cuda_open(int device, char *why, size_t why_cap)
{
    (void)why, (void)why_cap;
    rt_cuda *g = calloc(1, sizeof *g);
    if (g) g->device = device;
    return g;
}

static void complete(rt_cuda *g, size_t upto)
{
    for (size_t i = 0; i < upto; i++) MPI_Wait(&g->pending[i], MPI_STATUS_IGNORE);
    if (upto == g->n_pending) g->n_pending = 0, g->gen++;
}

void rt_cuda_close(rt_cuda *g)
{
    if (!g) return;
    complete(g, g->n_pending);
    free(g->pending);
    free(g);
}

int rt_cuda_sync(rt_cuda *g, char *why, size_t why_cap)
{
    (void)why, (void)why_cap;
    complete(g, g->n_pending);
    return 0;
}

int rt_cuda_query(rt_cuda *g, char *why, size_t why_cap)
{
    (void)why, (void)why_cap;
    int done = 1;
    if (g->n_pending) MPI_Testall((int)g->n_pending, g->pending, &done, MPI_STATUSES_IGNORE);
    if (done) complete(g, g->n_pending);
    return done;
}

void *rt_cuda_stream(rt_cuda *g) { return g; }

void rt_cuda_device_name(rt_cuda *g, char *buf, size_t cap)
{
    snprintf(buf, cap, "fake GPU %d (the CPU layer on the host)", g->device);
}

/* FAKE_CUDA_DEVICES (default 8): how many GPUs the fake pretends to have. */
int rt_cuda_device_count(void)
{
    const char *e = getenv("FAKE_CUDA_DEVICES");
    return e ? atoi(e) : 8;
}

/* ---- device memory: host blocks whose every use is checked against what was allocated ---- */

typedef struct fake_block {
    char *base;
    size_t bytes;
} fake_block;

static fake_block *blocks; /* live allocations, unordered */
static size_t n_blocks, cap_blocks;

void *rt_cuda_alloc(size_t bytes)
{
    char *p = calloc(bytes ? bytes : 1, 1);
    if (!p) return NULL;
    if (dp_grow((void **)&blocks, &cap_blocks, n_blocks + 1, sizeof *blocks) != DP_OK) abort();
    blocks[n_blocks++] = (fake_block){p, bytes};
    return p;
}

static void forget_side_acts(const char *base, size_t bytes);

void rt_cuda_free(void *p)
{
    if (!p) return;
    for (size_t i = 0; i < n_blocks; i++)
        if (blocks[i].base == p) {
            forget_side_acts(blocks[i].base, blocks[i].bytes);
            blocks[i] = blocks[--n_blocks];
            free(p);
            return;
        }
    fprintf(stderr, "fake_cuda: rt_cuda_free of %p, which rt_cuda_alloc did not return\n", p);
    abort();
}

/* [p, p + bytes) must lie inside one allocation: an executor that sizes a buffer for another
 * element type, or a layout that overruns its block, stops the test here. */
static void in_bounds(const void *p, size_t bytes, const char *what)
{
    const char *c = p;
    if (bytes == 0) return;
    for (size_t i = 0; i < n_blocks; i++)
        if (c >= blocks[i].base && c + bytes <= blocks[i].base + blocks[i].bytes) return;
    fprintf(stderr, "fake_cuda: %s: %zu bytes at %p are not inside one device allocation\n", what,
            bytes, p);
    abort();
}

int rt_cuda_put(void *dst, const void *src, size_t bytes)
{
    in_bounds(dst, bytes, "rt_cuda_put");
    memcpy(dst, src, bytes);
    return 0;
}

int rt_cuda_get(void *dst, const void *src, size_t bytes)
{
    in_bounds(src, bytes, "rt_cuda_get");
    memcpy(dst, src, bytes);
    return 0;
}

/* ---- the layer: the CPU layer in fp64 on values of the buffers' element type ---------------- */

/* n elements of type dt at dev, widened to a new host array (NULL: abort). */
/* Host scratch of doubles for the layer calls, reused: each call needs a few buffers of a layer's
 * parameters or activations, and allocating them per call (fresh pages each time; under ASan
 * fresh poisoned mappings) was most of the fake's time. host_get hands out a free buffer of at
 * least n doubles (zeroed with zero 1), host_put takes it back (NULL is ignored). The fake runs
 * one thread a process. */
enum { HOST_SCRATCH = 16 };
static struct {
    double *p;
    size_t cap;
    int used;
} host_scratch[HOST_SCRATCH];

static double *host_get(size_t n, int zero)
{
    n = n ? n : 1;
    int pick = -1;
    for (int i = 0; i < HOST_SCRATCH; i++) /* the smallest free buffer that holds n, else any */
        if (!host_scratch[i].used &&
            (pick < 0 || (host_scratch[i].cap >= n &&
                          (host_scratch[pick].cap < n || host_scratch[i].cap < host_scratch[pick].cap))))
            pick = i;
    if (pick < 0) abort(); /* more live buffers than any call holds */
    if (host_scratch[pick].cap < n) {
        free(host_scratch[pick].p);
        if (!(host_scratch[pick].p = malloc(n * sizeof(double)))) abort();
        host_scratch[pick].cap = n;
    }
    host_scratch[pick].used = 1;
    if (zero) memset(host_scratch[pick].p, 0, n * sizeof(double));
    return host_scratch[pick].p;
}

static void host_put(double *p)
{
    for (int i = 0; p && i < HOST_SCRATCH; i++)
        if (host_scratch[i].p == p) host_scratch[i].used = 0;
}

static double *widen(const void *dev, size_t n, rt_dtype dt, const char *what)
{
    in_bounds(dev, n * rt_dtype_act_bytes(dt), what);
    double *h = host_get(n, 0);
    rt_from_dtype(h, dev, n, dt);
    return h;
}

static void narrow(void *dev, const double *h, size_t n, rt_dtype dt, const char *what)
{
    in_bounds(dev, n * rt_dtype_act_bytes(dt), what);
    rt_to_dtype(dev, h, n, dt);
}

/* The parameters the GEMMs read: fp64 the block itself; bf16 its bf16 working copy, widened. */
static double *params_read(const void *block, size_t count, rt_dtype dt)
{
    in_bounds(block, rt_param_block_bytes(count, dt), "parameter block");
    return widen((const char *)block + rt_param_copy_offset(count, dt), count, dt, "bf16 copy");
}

/* A gradient block (fp64 or fp32) as doubles, and back after accumulating. */
static double *grads_read(const void *block, size_t count, rt_dtype dt)
{
    in_bounds(block, rt_grad_block_bytes(count, dt), "gradient block");
    double *h = host_get(count, 0);
    rt_from_stat(h, block, count, dt);
    return h;
}

static void grads_write(void *block, double *h, size_t count, rt_dtype dt)
{
    rt_to_stat(block, h, count, dt);
    host_put(h);
}

/* The fp64 activations the CPU layer saves for a device activation block, kept beside it (a
 * bf16 block is too small for them: it has no S^2 term), keyed by the block's address. */
typedef struct side_acts {
    const char *key;
    double *block;
    size_t doubles;
} side_acts;
static side_acts *sides;
static size_t n_sides, cap_sides;

static double *side_for(const void *acts, size_t doubles)
{
    for (size_t i = 0; i < n_sides; i++)
        if (sides[i].key == acts) {
            if (sides[i].doubles < doubles) {
                free(sides[i].block);
                if (!(sides[i].block = calloc(doubles, sizeof(double)))) abort();
                sides[i].doubles = doubles;
            }
            return sides[i].block;
        }
    if (dp_grow((void **)&sides, &cap_sides, n_sides + 1, sizeof *sides) != DP_OK) abort();
    double *b = calloc(doubles ? doubles : 1, sizeof *b);
    if (!b) abort();
    sides[n_sides++] = (side_acts){acts, b, doubles};
    return b;
}

static void forget_side_acts(const char *base, size_t bytes)
{
    for (size_t i = 0; i < n_sides;)
        if (sides[i].key >= base && sides[i].key < base + (bytes ? bytes : 1)) {
            free(sides[i].block);
            sides[i] = sides[--n_sides];
        } else {
            i++;
        }
}

/* Binds the CPU layer's activations for the device block `acts` of layer l on (B, S, Se),
 * checking that the device block is as large as layout.h says for the layer's type. */
static void bind_acts(const rt_cuda_layer *l, int B, int S, int Se, const void *acts,
                      rt_layer_acts *a)
{
    in_bounds(acts, rt_layer_acts_bytes(&l->shape, B, S, Se, l->dtype), "activation block");
    size_t doubles = rt_layer_acts_doubles(&l->shape, B, S, Se);
    rt_layer_acts_bind(a, &l->shape, B, S, Se,
                       l->dtype == RT_FP64 ? (double *)acts : side_for(acts, doubles));
}

/* The GPU layer builds cuBLASLt and cuDNN plans on the first call of a shape: counted here, so
 * that the executor's accounting of first calls inside measured runs is tested. */
static void first_call(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb)
{
    int key[4] = {mb->B, mb->S, mb->Se, l->shape.cross * 4 + (int)l->dtype};
    for (int i = 0; i < g->n_shapes; i++)
        if (memcmp(g->shapes[i], key, sizeof key) == 0) return;
    if (g->n_shapes < 512) memcpy(g->shapes[g->n_shapes++], key, sizeof key);
    g->gemm_plans++;
}

void rt_cuda_firsts_of(rt_cuda *g, rt_cuda_firsts *f)
{
    f->gemm_plans = g->gemm_plans, f->attn_graphs = 0, f->uploads = 0;
}

/* FAKE_CUDA_POISON_ATTENTION (set): every forward leaves NaN in its saved attention cores
 * (probabilities and context, self and cross), as if the activations kept were those of
 * selective recompute, which drops them: a backward that does not rerun them (the executor's
 * pm_recompute) then gives NaN gradients (tests/cli/test_dprun_cli.sh). */
static void poison_attention(const rt_layer_shape *s, int B, int S, int Se, rt_layer_acts *a)
{
    size_t n = (size_t)B * S, hk = (size_t)rt_layer_q_width(s);
    size_t np = (size_t)B * s->heads * S * S, npc = (size_t)B * s->heads * S * Se;
    for (size_t i = 0; i < n * hk; i++) a->ctx[i] = NAN;
    for (size_t i = 0; i < np; i++) a->p[i] = NAN;
    if (s->cross) {
        for (size_t i = 0; i < n * hk; i++) a->ctxc[i] = NAN;
        for (size_t i = 0; i < npc; i++) a->pc[i] = NAN;
    }
}

/* A device layer's tensor-parallel group (layer_cuda.h rt_cuda_tp) as the CPU layer's (layer.h
 * rt_tp): each collective stages the CPU layer's doubles through device memory, calls the
 * executor's hook with fp64 elements (the fake computes in fp64 whatever the layer's type) and
 * completes at once, as the CPU layer reads the result next. */
typedef struct fake_tp {
    const rt_cuda_tp *dev;
    rt_cuda *g;
    rt_tp cpu;
} fake_tp;

static void *staged(const double *h, size_t n)
{
    void *d = rt_cuda_alloc((n ? n : 1) * sizeof(double));
    if (!d) abort();
    if (h) memcpy(d, h, n * sizeof(double));
    return d;
}

static void unstage(double *h, void *d, size_t n)
{
    memcpy(h, d, n * sizeof(double));
    rt_cuda_free(d);
}

static void ftp_allreduce(void *ctx, double *v, size_t n, int op)
{
    fake_tp *f = ctx;
    void *d = staged(v, n);
    f->dev->allreduce(f->dev->ctx, f->g, d, n, RT_ELEM_F64, op);
    complete(f->g, f->g->n_pending);
    unstage(v, d, n);
}

static void ftp_allgather(void *ctx, const double *mine, double *all, size_t n)
{
    fake_tp *f = ctx;
    void *d = staged(mine, n), *a = staged(NULL, n * (size_t)f->dev->size);
    f->dev->allgather(f->dev->ctx, f->g, d, a, n, RT_ELEM_F64);
    complete(f->g, f->g->n_pending);
    rt_cuda_free(d);
    unstage(all, a, n * (size_t)f->dev->size);
}

static void ftp_reduce_scatter(void *ctx, const double *all, double *mine, size_t n)
{
    fake_tp *f = ctx;
    void *a = staged(all, n * (size_t)f->dev->size), *d = staged(NULL, n);
    f->dev->reduce_scatter(f->dev->ctx, f->g, a, d, n, RT_ELEM_F64);
    complete(f->g, f->g->n_pending);
    rt_cuda_free(a);
    unstage(mine, d, n);
}

/* The CPU layer's group for a device layer's (NULL for none). */
static const rt_tp *fake_tp_of(const rt_cuda_tp *dev, rt_cuda *g, fake_tp *f)
{
    if (!dev || dev->size <= 1) return NULL;
    f->dev = dev, f->g = g;
    f->cpu = (rt_tp){dev->size, dev->rank, dev->sp, ftp_allreduce, ftp_allgather,
                     ftp_reduce_scatter, f};
    return &f->cpu;
}

/* A micro-batch's context-parallel map (rt_batch.cp) for the CPU layer, its group the device
 * layer's cp group (NULL for none). */
typedef struct fake_cp {
    fake_tp group;
    rt_cp map;
} fake_cp;

static const rt_cp *fake_cp_of(const rt_cuda_layer *l, const rt_batch *mb, rt_cuda *g, fake_cp *f)
{
    if (!mb->cp || mb->cp->size <= 1) return NULL;
    f->map = *mb->cp;
    f->map.group = fake_tp_of(l->cp_group, g, &f->group);
    if (!f->map.group) {
        fprintf(stderr, "fake_cuda: a context-parallel micro-batch on a layer without a cp group\n");
        abort();
    }
    return &f->map;
}

/* The tokens of a layer's input and output on this rank: its cp rank's, of which TP with SP its
 * share. */
static size_t rank_tokens(const rt_cuda_layer *l, const rt_batch *mb)
{
    return (size_t)rt_cuda_tp_tokens(l->tp, rt_cp_tokens(mb->cp, mb->B * mb->S));
}

long fake_cuda_layer_fwd_calls; /* for the tests: layer forwards run so far, */
int fake_cuda_fwd_len[8192];     /* and the first 8192's micro-batch lengths (S) */

void rt_cuda_layer_fwd(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb, const void *x,
                       void *y, void *acts, const void *enc)
{
    first_call(g, l, mb);
    if (fake_cuda_layer_fwd_calls < 8192) fake_cuda_fwd_len[fake_cuda_layer_fwd_calls] = mb->S;
    fake_cuda_layer_fwd_calls++;
    int B = mb->B, S = mb->S, Se = mb->Se;
    size_t nh = rank_tokens(l, mb) * l->shape.hidden, ne = (size_t)B * Se * l->shape.hidden;
    rt_layer_params p;
    rt_layer_acts a;
    fake_tp ft;
    fake_cp fc;
    double *w = params_read(l->block, l->count, l->dtype);
    double *xh = widen(x, nh, l->dtype, "layer input"), *yh = host_get(nh + 1, 1);
    double *eh = l->shape.cross ? widen(enc, ne, l->dtype, "encoder output") : NULL;
    rt_layer_params_bind(&p, &l->shape, w);
    bind_acts(l, B, S, Se, acts, &a);
    a.enc = eh, a.seqs = mb->seqs, a.enc_seqs = mb->enc_seqs, a.tp = fake_tp_of(l->tp, g, &ft);
    a.cp = fake_cp_of(l, mb, g, &fc);
    rt_layer_fwd(&p, &l->shape, B, S, xh, yh, &a);
    narrow(y, yh, nh, l->dtype, "layer output");
    if (getenv("FAKE_CUDA_POISON_ATTENTION")) poison_attention(&l->shape, B, S, Se, &a);
    host_put(w), host_put(xh), host_put(yh), host_put(eh);
}

void rt_cuda_layer_recompute_attention(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb,
                                       void *acts)
{
    int B = mb->B, S = mb->S, Se = mb->Se;
    rt_layer_acts a;
    fake_tp ft;
    fake_cp fc;
    bind_acts(l, B, S, Se, acts, &a);
    a.seqs = mb->seqs, a.enc_seqs = mb->enc_seqs, a.tp = fake_tp_of(l->tp, g, &ft);
    a.cp = fake_cp_of(l, mb, g, &fc);
    rt_layer_recompute_attention(&l->shape, B, S, &a);
}

/* The encoder output a cross layer's weight pass reads (the executor keeps it untouched since
 * the forward), widened into *own. NULL for other layers. */
static const double *enc_for_backward(const rt_cuda_layer *l, const void *enc, size_t ne,
                                      double **own)
{
    *own = l->shape.cross ? widen(enc, ne, l->dtype, "encoder output") : NULL;
    return *own;
}

/* FAKE_CUDA_FAULT=NAME (a parameter, layout.h's rt_param_name: "b1", "ln2_g"): the bf16 layer's
 * backward leaves that parameter's gradient as it was, as a bf16 kernel that never ran would, so
 * that a test sees dprun check-gpu find it (tests/cli/test_dprun_cli.sh). */
typedef struct fake_fault {
    size_t off, len;
    double *saved; /* NULL: no fault here */
} fake_fault;

static fake_fault fault_save(const rt_layer_shape *s, rt_dtype dt, const double *gr)
{
    fake_fault f = {0, 0, NULL};
    const char *name = getenv("FAKE_CUDA_FAULT");
    size_t off[RT_P_COUNT], len[RT_P_COUNT], count;
    int n = name && dt == RT_BF16 ? rt_layer_params_layout(s, off, len, &count) : 0;
    for (int i = 0; i < n; i++)
        if (len[i] && strcmp(rt_param_name(i), name) == 0) {
            f.off = off[i], f.len = len[i];
            if (!(f.saved = malloc(len[i] * sizeof *f.saved))) abort();
            memcpy(f.saved, gr + off[i], len[i] * sizeof *f.saved);
        }
    return f;
}

static void fault_restore(fake_fault *f, double *gr)
{
    if (f->saved) memcpy(gr + f->off, f->saved, f->len * sizeof *f->saved);
    free(f->saved);
}

void rt_cuda_layer_bwd_input(rt_cuda *g, const rt_cuda_layer *l, rt_cuda_layer *grad,
                             const rt_batch *mb, const void *dy, void *dx, void *acts, void *denc)
{
    int B = mb->B, S = mb->S, Se = mb->Se;
    size_t nh = rank_tokens(l, mb) * l->shape.hidden, ne = (size_t)B * Se * l->shape.hidden;
    rt_layer_params p, gp;
    rt_layer_acts a;
    fake_tp ft;
    fake_cp fc;
    double *w = params_read(l->block, l->count, l->dtype);
    double *gr = grads_read(grad->block, grad->count, grad->dtype);
    double *dyh = widen(dy, nh, l->dtype, "output gradient"), *dxh = host_get(nh + 1, 1);
    double *dench = denc ? widen(denc, ne, l->dtype, "encoder-output gradient") : NULL;
    rt_layer_params_bind(&p, &l->shape, w);
    rt_layer_params_bind(&gp, &l->shape, gr);
    bind_acts(l, B, S, Se, acts, &a);
    a.denc = dench, a.seqs = mb->seqs, a.enc_seqs = mb->enc_seqs, a.tp = fake_tp_of(l->tp, g, &ft);
    a.cp = fake_cp_of(l, mb, g, &fc);
    fake_fault f = fault_save(&l->shape, grad->dtype, gr);
    rt_layer_bwd_input(&p, &gp, &l->shape, B, S, dyh, dxh, &a);
    fault_restore(&f, gr);
    narrow(dx, dxh, nh, l->dtype, "input gradient");
    if (denc) narrow(denc, dench, ne, l->dtype, "encoder-output gradient");
    grads_write(grad->block, gr, grad->count, grad->dtype);
    host_put(w), host_put(dyh), host_put(dxh), host_put(dench);
}

void rt_cuda_layer_bwd_weight(rt_cuda *g, rt_cuda_layer *grad, const rt_batch *mb,
                              const void *acts, const void *enc)
{
    int B = mb->B, S = mb->S, Se = mb->Se;
    size_t ne = (size_t)B * Se * grad->shape.hidden;
    rt_layer_params gp;
    rt_layer_acts a;
    fake_tp ft;
    fake_cp fc;
    double *gr = grads_read(grad->block, grad->count, grad->dtype), *own;
    rt_layer_params_bind(&gp, &grad->shape, gr);
    bind_acts(grad, B, S, Se, acts, &a);
    a.enc = enc_for_backward(grad, enc, ne, &own);
    a.seqs = mb->seqs, a.enc_seqs = mb->enc_seqs, a.tp = fake_tp_of(grad->tp, g, &ft);
    a.cp = fake_cp_of(grad, mb, g, &fc);
    fake_fault f = fault_save(&grad->shape, grad->dtype, gr);
    rt_layer_bwd_weight(&gp, &grad->shape, B, S, &a);
    fault_restore(&f, gr);
    grads_write(grad->block, gr, grad->count, grad->dtype);
    host_put(own);
}

/* The fake's timings: its FLOPs at FAKE_TFLOPS plus its bytes at FAKE_GBPS, backward twice the
 * forward, so that the rehearsal's profiles, fits and validations see plausible numbers (the
 * work is not run). */
#define FAKE_TFLOPS 100.0
#define FAKE_GBPS 2000.0
static double fake_ms(double flops) { return flops / (FAKE_TFLOPS * 1e9); }
static double fake_bytes_ms(double bytes) { return bytes / (FAKE_GBPS * 1e6); }

int rt_cuda_time_layer(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb, recompute_mode rc,
                       int repeats, double *fwd_ms, double *bwd_ms)
{
    (void)g, (void)repeats;
    int B = mb->B, S = mb->S, Se = l->shape.cross ? mb->Se : 0;
    rt_batch_seqs bs;
    rt_batch_seqs_init(&bs, mb);
    double n = (double)B * S, hk = (double)l->shape.heads * l->shape.kv;
    double attn = 4 * (double)rt_seqs_pairs(&bs.self, &bs.self) * hk;
    if (l->shape.cross) attn += 4 * (double)rt_seqs_pairs(&bs.self, &bs.enc) * hk;
    double flops = 2 * n * (double)l->count + attn;
    rt_batch_seqs_free(&bs);
    /* the weights once, the saved activations written (read again in the backward) */
    double bytes = (double)rt_param_block_bytes(l->count, l->dtype) +
                   (double)rt_layer_acts_bytes(&l->shape, B, S, Se, l->dtype);
    *fwd_ms = fake_ms(flops) + fake_bytes_ms(bytes) + 0.01;
    *bwd_ms = 2 * fake_ms(flops) + 2 * fake_bytes_ms(bytes) + 0.02;
    *bwd_ms += rc == RECOMPUTE_FULL ? *fwd_ms : rc == RECOMPUTE_SELECTIVE ? fake_ms(attn) : 0;
    return 0;
}

int rt_cuda_time_gemm(rt_cuda *g, int M, int N, int K, rt_dtype dt, int repeats, double *ms)
{
    (void)g, (void)dt, (void)repeats;
    *ms = fake_ms(2.0 * M * N * K);
    return 0;
}

void rt_cuda_set_attention(rt_cuda *g, int mode) { (void)g, (void)mode; }

const char *rt_cuda_attention_path(rt_cuda *g)
{
    (void)g;
    return "fake (the CPU layer)";
}

void *rt_cuda_event_new(void) { return calloc(1, sizeof(fake_event)); }
void rt_cuda_event_free(void *e) { free(e); }

void rt_cuda_event_record(rt_cuda *g, void *e)
{
    *(fake_event *)e = (fake_event){++tick, g, g->gen, g->n_pending};
}

void rt_cuda_wait_event(rt_cuda *g, void *e)
{
    (void)g;
    fake_event *ev = e;
    if (ev->tick == 0) abort(); /* waiting for an event never recorded: an executor bug */
    if (ev->on->gen == ev->gen) complete(ev->on, ev->upto);
}

double rt_cuda_event_ms(void *from, void *to)
{
    return (double)((fake_event *)to)->tick - (double)((fake_event *)from)->tick;
}

void rt_cuda_copy(rt_cuda *g, void *dst, const void *src, size_t bytes)
{
    (void)g;
    in_bounds(dst, bytes, "rt_cuda_copy destination");
    in_bounds(src, bytes, "rt_cuda_copy source");
    memmove(dst, src, bytes);
}

void rt_cuda_zero(rt_cuda *g, void *v, size_t bytes)
{
    (void)g;
    in_bounds(v, bytes, "rt_cuda_zero");
    memset(v, 0, bytes);
}

void rt_cuda_add_grads(rt_cuda *g, void *dst, const void *src, size_t n, rt_dtype dt)
{
    (void)g;
    in_bounds(dst, rt_grad_block_bytes(n, dt), "rt_cuda_add_grads destination");
    in_bounds(src, rt_grad_block_bytes(n, dt), "rt_cuda_add_grads source");
    for (size_t i = 0; i < n; i++)
        if (dt == RT_BF16) ((float *)dst)[i] += ((const float *)src)[i];
        else ((double *)dst)[i] += ((const double *)src)[i];
}

void rt_cuda_fill_at(rt_cuda *g, void *v, size_t n, size_t first, rt_dtype dt, unsigned seed,
                     double scale)
{
    (void)g;
    double *h = malloc((n ? n : 1) * sizeof *h);
    if (!h) abort();
    rt_fill_at(h, n, first, seed, scale);
    narrow(v, h, n, dt, "rt_cuda_fill");
    free(h);
}

void rt_cuda_fill(rt_cuda *g, void *v, size_t n, rt_dtype dt, unsigned seed, double scale)
{
    rt_cuda_fill_at(g, v, n, 0, dt, seed, scale);
}

/* The head split by vocabulary under TP (layer.h rt_lm_head_fwd_tp): emb, logits and dlogits
 * hold this rank's V / size of it. */
void rt_cuda_lm_head_fwd(rt_cuda *g, const rt_cuda_tp *tp, const rt_cp *cp, const void *out,
                         const void *emb, void *logits, void *dlogits, int n, int H, int V,
                         int target_offset, rt_dtype dt)
{
    fake_tp ft;
    const rt_tp *cpu = fake_tp_of(tp, g, &ft);
    size_t nv = (size_t)n * (cpu ? V / cpu->size : V);
    in_bounds(logits, nv * rt_dtype_stat_bytes(dt), "logits scratch");
    double *oh = widen(out, (size_t)n * H, dt, "LM head input");
    double *eh = params_read(emb, nv / (size_t)n * H, dt);
    double *lh = host_get(nv, 0), *dlh = host_get(nv, 0);
    if (rt_lm_head_fwd_tp(cpu, cp && cp->size > 1 ? cp : NULL, oh, eh, lh, dlh, n, H, V, target_offset) != 0)
        abort();
    narrow(dlogits, dlh, nv, dt, "logit gradients");
    host_put(oh), host_put(eh), host_put(lh), host_put(dlh);
}

void rt_cuda_lm_head_bwd(rt_cuda *g, const rt_cuda_tp *tp, const void *dlogits, const void *emb,
                         const void *out, void *dout, void *demb, int n, int H, int V, rt_dtype dt)
{
    fake_tp ft;
    const rt_tp *cpu = fake_tp_of(tp, g, &ft);
    size_t nh = (size_t)n * H, vh = (size_t)(cpu ? V / cpu->size : V) * H;
    size_t nlh = (size_t)rt_cuda_tp_tokens(tp, n) * H; /* d(out): this rank's tokens */
    double *dlh = widen(dlogits, vh / H * n, dt, "logit gradients");
    double *eh = params_read(emb, vh, dt), *oh = widen(out, nh, dt, "LM head input");
    double *doh = host_get(nh + 1, 1), *gr = grads_read(demb, vh, dt);
    rt_lm_head_bwd_tp(cpu, dlh, eh, oh, doh, gr, n, H, V);
    narrow(dout, doh, nlh, dt, "LM head input gradient");
    grads_write(demb, gr, vh, dt);
    host_put(dlh), host_put(eh), host_put(oh), host_put(doh);
}

int rt_cuda_time_head(rt_cuda *g, int n, int H, int V, rt_dtype dt, int repeats, double *fwd_ms,
                      double *bwd_ms)
{
    (void)g, (void)dt, (void)repeats;
    *fwd_ms = fake_ms(2.0 * n * H * V) + 0.01;
    *bwd_ms = fake_ms(4.0 * n * H * V) + 0.02;
    return 0;
}

/* ---- NCCL over MPI ------------------------------------------------------------------------- */

struct rt_nccl {
    MPI_Comm comm;
};

/* Bytes this process handed to NCCL sends, and its ZeRO collectives; with FAKE_CUDA_REPORT set,
 * printed at exit ("fake_cuda: rank R sent N bytes over NCCL, A all-gathers, S reduce-scatters")
 * so that a test can hold them to the plan's. */
static size_t fake_nccl_sent_bytes;
static long fake_allgathers, fake_reduce_scatters;
static int fake_rank;

static void report_sent(void)
{
    fprintf(stderr, "fake_cuda: rank %d sent %zu bytes over NCCL, %ld all-gathers, %ld reduce-scatters\n",
            fake_rank, fake_nccl_sent_bytes, fake_allgathers, fake_reduce_scatters);
}

static void push(rt_cuda *g, MPI_Request r)
{
    if (dp_grow((void **)&g->pending, &g->cap, g->n_pending + 1, sizeof *g->pending) != DP_OK)
        abort();
    g->pending[g->n_pending++] = r;
}

int rt_nccl_world(rt_cuda *g, rt_nccl **world, char *why, size_t why_cap)
{
    (void)g, (void)why, (void)why_cap;
    *world = calloc(1, sizeof **world);
    MPI_Comm_dup(MPI_COMM_WORLD, &(*world)->comm);
    MPI_Comm_rank(MPI_COMM_WORLD, &fake_rank);
    if (getenv("FAKE_CUDA_REPORT")) atexit(report_sent);
    return 0;
}

int rt_nccl_split(rt_nccl *world, int color, int key, rt_nccl **sub, char *why, size_t why_cap)
{
    (void)why, (void)why_cap;
    MPI_Comm c;
    MPI_Comm_split(world->comm, color >= 0 ? color : MPI_UNDEFINED, key, &c);
    *sub = NULL;
    if (c != MPI_COMM_NULL) {
        *sub = calloc(1, sizeof **sub);
        (*sub)->comm = c;
    }
    return 0;
}

void rt_nccl_free(rt_nccl *c)
{
    if (!c) return;
    MPI_Comm_free(&c->comm);
    free(c);
}

int rt_nccl_send(rt_nccl *c, const void *buf, size_t bytes, int peer, rt_cuda *g, char *why,
                 size_t why_cap)
{
    (void)why, (void)why_cap;
    in_bounds(buf, bytes, "NCCL send");
    MPI_Request r;
    fake_nccl_sent_bytes += bytes;
    MPI_Isend(buf, (int)bytes, MPI_BYTE, peer, 0, c->comm, &r);
    push(g, r);
    return 0;
}

int rt_nccl_recv(rt_nccl *c, void *buf, size_t bytes, int peer, rt_cuda *g, char *why,
                 size_t why_cap)
{
    (void)why, (void)why_cap;
    in_bounds(buf, bytes, "NCCL receive");
    MPI_Request r;
    MPI_Irecv(buf, (int)bytes, MPI_BYTE, peer, 0, c->comm, &r);
    push(g, r);
    return 0;
}

/* ZeRO's collectives complete at enqueue, as the fake's compute does (the stream's earlier
 * transfers first, as a real stream orders them) */
int rt_nccl_allgather(rt_nccl *c, const void *send, void *recv, size_t bytes, rt_cuda *g,
                      char *why, size_t why_cap)
{
    (void)why, (void)why_cap;
    int ranks;
    MPI_Comm_size(c->comm, &ranks);
    in_bounds(send, bytes, "NCCL all-gather source");
    in_bounds(recv, bytes * (size_t)ranks, "NCCL all-gather destination");
    complete(g, g->n_pending);
    fake_allgathers++;
    MPI_Allgather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, c->comm);
    return 0;
}

/* MPI's type for an element kind: the fake's collectives move doubles and floats (its layers'
 * tensor-parallel collectives are fp64 whatever the layer's type: fake_tp) */
static MPI_Datatype mpi_type(rt_elem e)
{
    if (e == RT_ELEM_BF16) {
        fprintf(stderr, "fake_cuda: a collective on bf16 elements, which the fake does not sum\n");
        abort();
    }
    return e == RT_ELEM_F64 ? MPI_DOUBLE : MPI_FLOAT;
}

int rt_nccl_reduce_scatter(rt_nccl *c, const void *send, void *recv, size_t n, rt_elem e,
                           rt_cuda *g, char *why, size_t why_cap)
{
    (void)why, (void)why_cap;
    int ranks;
    MPI_Comm_size(c->comm, &ranks);
    in_bounds(send, n * (size_t)ranks * rt_elem_bytes(e), "NCCL reduce-scatter source");
    in_bounds(recv, n * rt_elem_bytes(e), "NCCL reduce-scatter destination");
    complete(g, g->n_pending);
    fake_reduce_scatters++;
    MPI_Reduce_scatter_block(send, recv, (int)n, mpi_type(e), MPI_SUM, c->comm);
    return 0;
}

int rt_nccl_allreduce(rt_nccl *c, void *buf, size_t n, rt_elem e, int op, rt_cuda *g, char *why,
                      size_t why_cap)
{
    (void)why, (void)why_cap;
    in_bounds(buf, n * rt_elem_bytes(e), "NCCL all-reduce");
    complete(g, g->n_pending); /* after the stream's earlier work, as a stream orders it */
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_type(e), op == RT_TP_MAX ? MPI_MAX : MPI_SUM,
                   c->comm, &r);
    push(g, r);
    return 0;
}
