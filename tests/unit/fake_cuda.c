/*
 * fake_cuda.c — runtime/cuda/layer_cuda.h and runtime/cuda/nccl_link.h on the host, for testing
 * runtime/exec_gpu.c without a GPU. "Device" memory is host memory, the layer is the CPU layer
 * (runtime/layer.h), and the GPU work of a stream runs synchronously when it is enqueued. An
 * event records a global tick, so that a test can check the order in which the executor
 * enqueued its work.
 *
 * NCCL is MPI: a communicator is an MPI communicator (ncclCommSplit: MPI_Comm_split), a send or
 * receive is an MPI_Isend / MPI_Irecv left pending on its stream, and it completes when another
 * stream waits for an event recorded after it, or when its stream is synchronised or queried
 * done — where a real stream would have waited for NCCL. So the multi-GPU mode runs under
 * mpirun on any machine, its transfers really moving the data.
 */
#include <mpi.h>
#include <stdint.h>
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

/* FAKE_CUDA_DEVICES (default 8): how many GPUs the fake pretends to have. */
int rt_cuda_device_count(void)
{
    const char *e = getenv("FAKE_CUDA_DEVICES");
    return e ? atoi(e) : 8;
}

double *rt_cuda_alloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
void rt_cuda_free(double *p) { free(p); }

int rt_cuda_put(double *dst, const double *src, size_t n)
{
    memcpy(dst, src, n * sizeof *dst);
    return 0;
}

int rt_cuda_get(double *dst, const double *src, size_t n) { return rt_cuda_put(dst, src, n); }

void rt_cuda_layer_fwd(rt_cuda *g, const rt_cuda_layer *l, int B, int S, const double *x,
                       double *y, double *acts, const double *enc, int Se)
{
    (void)g;
    rt_layer_params p;
    rt_layer_acts a;
    rt_layer_params_bind(&p, &l->shape, l->block);
    rt_layer_acts_bind(&a, &l->shape, B, S, Se, acts);
    a.enc = enc;
    rt_layer_fwd(&p, &l->shape, B, S, x, y, &a);
}

void rt_cuda_layer_bwd_input(rt_cuda *g, const rt_cuda_layer *l, rt_cuda_layer *grad, int B,
                             int S, const double *dy, double *dx, double *acts, int Se,
                             double *denc)
{
    (void)g;
    rt_layer_params p, gp;
    rt_layer_acts a;
    rt_layer_params_bind(&p, &l->shape, l->block);
    rt_layer_params_bind(&gp, &l->shape, grad->block);
    rt_layer_acts_bind(&a, &l->shape, B, S, Se, acts);
    a.denc = denc;
    rt_layer_bwd_input(&p, &gp, &l->shape, B, S, dy, dx, &a);
}

void rt_cuda_layer_bwd_weight(rt_cuda *g, rt_cuda_layer *grad, int B, int S, const double *acts,
                              const double *enc, int Se)
{
    (void)g;
    rt_layer_params gp;
    rt_layer_acts a;
    rt_layer_params_bind(&gp, &grad->shape, grad->block);
    rt_layer_acts_bind(&a, &grad->shape, B, S, Se, (double *)acts);
    a.enc = enc;
    rt_layer_bwd_weight(&gp, &grad->shape, B, S, &a);
}

int rt_cuda_time_layer(rt_cuda *g, const rt_cuda_layer *l, int B, int S, int Se, int repeats,
                       double *fwd_ms, double *bwd_ms)
{
    (void)g, (void)l, (void)B, (void)S, (void)Se, (void)repeats;
    *fwd_ms = *bwd_ms = 0;
    return 0;
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

void rt_cuda_copy(rt_cuda *g, double *dst, const double *src, size_t n)
{
    (void)g;
    memmove(dst, src, n * sizeof *dst);
}

void rt_cuda_zero(rt_cuda *g, double *v, size_t n)
{
    (void)g;
    memset(v, 0, n * sizeof *v);
}

void rt_cuda_fill(rt_cuda *g, double *v, size_t n, unsigned seed, double scale)
{
    (void)g;
    rt_fill(v, n, seed, scale);
}

void rt_cuda_lm_head_fwd(rt_cuda *g, const double *out, const double *emb, double *logits,
                         double *dlogits, int n, int H, int V, int target_offset)
{
    (void)g;
    if (rt_lm_head_fwd(out, emb, logits, dlogits, n, H, V, target_offset) != 0) abort();
}

void rt_cuda_lm_head_bwd(rt_cuda *g, const double *dlogits, const double *emb, const double *out,
                         double *dout, double *demb, int n, int H, int V)
{
    (void)g;
    rt_lm_head_bwd(dlogits, emb, out, dout, demb, n, H, V);
}

int rt_cuda_time_head(rt_cuda *g, int n, int H, int V, int repeats, double *fwd_ms,
                      double *bwd_ms)
{
    (void)g, (void)n, (void)H, (void)V, (void)repeats;
    *fwd_ms = *bwd_ms = 0;
    return 0;
}

/* ---- NCCL over MPI ------------------------------------------------------------------------- */

struct rt_nccl {
    MPI_Comm comm;
};

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

int rt_nccl_send(rt_nccl *c, const double *buf, size_t n, int peer, rt_cuda *g, char *why,
                 size_t why_cap)
{
    (void)why, (void)why_cap;
    MPI_Request r;
    MPI_Isend(buf, (int)n, MPI_DOUBLE, peer, 0, c->comm, &r);
    push(g, r);
    return 0;
}

int rt_nccl_recv(rt_nccl *c, double *buf, size_t n, int peer, rt_cuda *g, char *why,
                 size_t why_cap)
{
    (void)why, (void)why_cap;
    MPI_Request r;
    MPI_Irecv(buf, (int)n, MPI_DOUBLE, peer, 0, c->comm, &r);
    push(g, r);
    return 0;
}

int rt_nccl_allreduce(rt_nccl *c, double *buf, size_t n, rt_cuda *g, char *why, size_t why_cap)
{
    (void)why, (void)why_cap;
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, c->comm, &r);
    push(g, r);
    return 0;
}
