/*
 * fake_cuda.c — runtime/cuda/layer_cuda.h on the host, for testing runtime/exec_gpu.c without a
 * GPU. "Device" memory is host memory, every stream runs synchronously at enqueue time, the
 * layer is the CPU layer (runtime/layer.h), and an event records a global tick, so that a test
 * can check the order in which the executor enqueued its work.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/cuda/layer_cuda.h"
#include "../../runtime/layer.h"

struct rt_cuda {
    int device;
};

static uint64_t tick;

rt_cuda *rt_cuda_open(int device, char *why, size_t why_cap)
{
    (void)why, (void)why_cap;
    rt_cuda *g = calloc(1, sizeof *g);
    if (g) g->device = device;
    return g;
}

void rt_cuda_close(rt_cuda *g) { free(g); }

int rt_cuda_sync(rt_cuda *g, char *why, size_t why_cap)
{
    (void)g, (void)why, (void)why_cap;
    return 0;
}

double *rt_cuda_alloc(size_t n) { return calloc(n ? n : 1, sizeof(double)); }
void rt_cuda_free(double *p) { free(p); }

int rt_cuda_put(double *dst, const double *src, size_t n)
{
    memcpy(dst, src, n * sizeof *dst);
    return 0;
}

int rt_cuda_get(double *dst, const double *src, size_t n) { return rt_cuda_put(dst, src, n); }

static rt_layer_shape shape_of(const rt_cuda_layer *l)
{
    return (rt_layer_shape){l->hidden, l->heads, l->kv, l->ffn, l->causal, 0};
}

void rt_cuda_layer_fwd(rt_cuda *g, const rt_cuda_layer *l, int B, int S, const double *x,
                       double *y, double *acts)
{
    (void)g;
    rt_layer_shape s = shape_of(l);
    rt_layer_params p;
    rt_layer_acts a;
    rt_layer_params_bind(&p, &s, l->block);
    rt_layer_acts_bind(&a, &s, B, S, 0, acts);
    rt_layer_fwd(&p, &s, B, S, x, y, &a);
}

void rt_cuda_layer_bwd_input(rt_cuda *g, const rt_cuda_layer *l, rt_cuda_layer *grad, int B,
                             int S, const double *dy, double *dx, double *acts)
{
    (void)g;
    rt_layer_shape s = shape_of(l);
    rt_layer_params p, gp;
    rt_layer_acts a;
    rt_layer_params_bind(&p, &s, l->block);
    rt_layer_params_bind(&gp, &s, grad->block);
    rt_layer_acts_bind(&a, &s, B, S, 0, acts);
    rt_layer_bwd_input(&p, &gp, &s, B, S, dy, dx, &a);
}

void rt_cuda_layer_bwd_weight(rt_cuda *g, rt_cuda_layer *grad, int B, int S, const double *acts)
{
    (void)g;
    rt_layer_shape s = shape_of(grad);
    rt_layer_params gp;
    rt_layer_acts a;
    rt_layer_params_bind(&gp, &s, grad->block);
    rt_layer_acts_bind(&a, &s, B, S, 0, (double *)acts);
    rt_layer_bwd_weight(&gp, &s, B, S, &a);
}

int rt_cuda_time_layer(rt_cuda *g, const rt_cuda_layer *l, int B, int S, int repeats,
                       double *fwd_ms, double *bwd_ms)
{
    (void)g, (void)l, (void)B, (void)S, (void)repeats;
    *fwd_ms = *bwd_ms = 0;
    return 0;
}

void *rt_cuda_event_new(void) { return calloc(1, sizeof(uint64_t)); }
void rt_cuda_event_free(void *e) { free(e); }

void rt_cuda_event_record(rt_cuda *g, void *e)
{
    (void)g;
    *(uint64_t *)e = ++tick;
}

void rt_cuda_wait_event(rt_cuda *g, void *e)
{
    (void)g;
    if (*(uint64_t *)e == 0) abort(); /* waiting for an event never recorded: an executor bug */
}

double rt_cuda_event_ms(void *from, void *to)
{
    return (double)*(uint64_t *)to - (double)*(uint64_t *)from;
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
    for (size_t i = 0; i < n; i++) v[i] = (double)((i * 2654435761u + seed) % 1000) / 1000.0 * scale;
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
