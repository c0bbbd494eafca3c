/*
 * cuda_host.c — the host side of moving a layer's data to and from the GPU at an element type
 * (cuda/layer_cuda.h "host staging"): the executor, dprun profile and check-gpu upload parameter
 * blocks and host doubles, and read gradients back, through these alone; and what a backward
 * reruns under recompute (rt_cuda_layer_rerun), for the executor and dprun profile alike. Only
 * rt_cuda_* calls of layer_cuda.h are made, so the host fake (tests/unit/fake_cuda.c) serves too.
 */
#ifdef DPRUN_CUDA
#include <stdlib.h>

#include "cuda/layer_cuda.h"

/* A device block of `bytes` and `room` zeroed bytes after them, filled on the host by fill from
 * n doubles; NULL on failure. */
static void *staged_put(size_t bytes, size_t room,
                        void (*fill)(void *dst, const double *src, size_t n, rt_dtype dt),
                        const double *src, size_t n, rt_dtype dt)
{
    void *staging = calloc(bytes + room ? bytes + room : 1, 1), *d = rt_cuda_alloc(bytes + room);
    if (staging && d) fill(staging, src, n, dt);
    if (!staging || !d || rt_cuda_put(d, staging, bytes + room) != 0) rt_cuda_free(d), d = NULL;
    free(staging);
    return d;
}

void *rt_cuda_params_new_room(const double *host, size_t count, rt_dtype dt, size_t room)
{
    return staged_put(rt_param_block_bytes(count, dt), room, rt_param_block_pack, host, count, dt);
}

void *rt_cuda_params_new(const double *host, size_t count, rt_dtype dt)
{
    return rt_cuda_params_new_room(host, count, dt, 0);
}

void *rt_cuda_acts_new(const double *host, size_t n, rt_dtype dt)
{
    return staged_put(n * rt_dtype_act_bytes(dt), 0, rt_to_dtype, host, n, dt);
}

/* n elements of `elem` bytes from the device, widened to host doubles by widen. */
static int staged_get(double *host, const void *dev, size_t n, size_t elem,
                      void (*widen)(double *dst, const void *src, size_t n, rt_dtype dt), rt_dtype dt)
{
    size_t bytes = n * elem;
    void *staging = malloc(bytes ? bytes : 1);
    int rc = staging && rt_cuda_get(staging, dev, bytes) == 0 ? 0 : -1;
    if (rc == 0) widen(host, staging, n, dt);
    free(staging);
    return rc;
}

int rt_cuda_acts_get(double *host, const void *dev, size_t n, rt_dtype dt)
{
    return staged_get(host, dev, n, rt_dtype_act_bytes(dt), rt_from_dtype, dt);
}

int rt_cuda_grads_get(double *host, const void *dev, size_t count, rt_dtype dt)
{
    return staged_get(host, dev, count, rt_dtype_stat_bytes(dt), rt_from_stat, dt);
}

int rt_cuda_layer_rerun(rt_cuda *g, const rt_cuda_layer *l, const rt_batch *mb, recompute_mode rc,
                        const void *x, void *y, void *acts, const void *enc)
{
    if (rc == RECOMPUTE_FULL) rt_cuda_layer_fwd(g, l, mb, x, y, acts, enc);
    else if (rc == RECOMPUTE_SELECTIVE) rt_cuda_layer_recompute_attention(g, l, mb, acts);
    return rc == RECOMPUTE_FULL || rc == RECOMPUTE_SELECTIVE;
}
#endif
