/*
 * cuda_host.c — the host side of moving a layer's data to and from the GPU at an element type
 * (cuda/layer_cuda.h "host staging"): the executor, dprun profile and check-gpu upload parameter
 * blocks and host doubles, and read gradients back, through these alone. Only rt_cuda_alloc,
 * rt_cuda_put and rt_cuda_get are called, so the host fake (tests/unit/fake_cuda.c) serves too.
 */
#ifdef DPRUN_CUDA
#include <stdlib.h>

#include "cuda/layer_cuda.h"

/* A device block of `bytes`, filled on the host by fill from n doubles; NULL on failure. */
static void *staged_put(size_t bytes, void (*fill)(void *dst, const double *src, size_t n, rt_dtype dt),
                        const double *src, size_t n, rt_dtype dt)
{
    void *staging = malloc(bytes ? bytes : 1), *d = rt_cuda_alloc(bytes);
    if (staging && d) fill(staging, src, n, dt);
    if (!staging || !d || rt_cuda_put(d, staging, bytes) != 0) rt_cuda_free(d), d = NULL;
    free(staging);
    return d;
}

void *rt_cuda_params_new(const double *host, size_t count, rt_dtype dt)
{
    return staged_put(rt_param_block_bytes(count, dt), rt_param_block_pack, host, count, dt);
}

void *rt_cuda_acts_new(const double *host, size_t n, rt_dtype dt)
{
    return staged_put(n * rt_dtype_act_bytes(dt), rt_to_dtype, host, n, dt);
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

#endif
