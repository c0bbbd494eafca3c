/*
 * dev_cache.h — device copies of the small host arrays a GPU layer call needs beside its tensors
 * (the ragged form's lengths and offsets, runtime/ragged.h; RoPE's token positions; the padded
 * rows' lengths): each distinct content is uploaded once and then shared, so that the layers of
 * a micro-batch, and its forward and backward, read one copy.
 *
 * Why: a host-to-device copy from pageable memory may wait for the stream before it returns.
 * One per layer call would hold up the host thread that enqueues every stage's work (the
 * single-GPU mode drives several streams from one thread), so the streams would run in lock step
 * and the measured timeline would not be the plan's. With the cache, an iteration's uploads
 * happen in dprun's unrecorded prepare pass (exec.h rt_opts.prepare), and the recorded runs find
 * every array on the device. rt_dev_cache_uploads counts what went up, for tests and checks.
 *
 * Host logic only — lookup by content, least-recently-used eviction, a byte budget — over the
 * device operations it is given (runtime/cuda/ gives stream-ordered CUDA ones), so that it is
 * tested without a GPU (tests/unit/test_dev_cache.c).
 *
 * Ownership: the cache owns the device copies and a host copy of each content (to compare
 * against); a pointer it returns stays valid until RT_DEV_KEEP more distinct contents have been
 * added after it, or rt_dev_cache_release. An entry leaves the cache through ops.release, which
 * must not free memory that work already enqueued still reads (CUDA: cudaFreeAsync on the stream
 * every user of the cache enqueues on).
 */
#ifndef RT_DEV_CACHE_H
#define RT_DEV_CACHE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The device side: alloc returns `bytes` of device memory or NULL; upload copies `bytes` from
 * host (a copy the cache keeps until the entry leaves, so the copy may still be in flight when
 * upload returns) to dev, 0 or -1; release gives dev back. ctx is passed to each. */
typedef struct rt_dev_ops {
    void *(*alloc)(void *ctx, size_t bytes);
    int (*upload)(void *ctx, void *dev, const void *host, size_t bytes);
    void (*release)(void *ctx, void *dev);
    void *ctx;
} rt_dev_ops;

/* The most recently used contents are never evicted, whatever the budget: a layer call may hold
 * up to this many pointers from the cache at once. */
#define RT_DEV_KEEP 4

typedef struct rt_dev_entry {
    uint64_t hash;      /* FNV-1a of the content (common/dp.h dp_fnv1a) */
    uint64_t last_use;  /* the cache's clock at the last get */
    size_t bytes;
    void *host, *dev;   /* the content on the host (to compare) and on the device */
} rt_dev_entry;

typedef struct rt_dev_cache {
    rt_dev_ops ops;
    rt_dev_entry *e;     /* [max_entries] */
    int n, max_entries;  /* entries held; at most max_entries (>= RT_DEV_KEEP) */
    size_t bytes;        /* device bytes held */
    size_t max_bytes;    /* the budget: all but the RT_DEV_KEEP most recent entries are
                          * evicted to stay within it */
    uint64_t clock;      /* gets so far */
    uint64_t uploads;    /* contents uploaded so far (misses) */
} rt_dev_cache;

/* An empty cache of at most max_entries contents (raised to RT_DEV_KEEP) and max_bytes of
 * device memory. Aborts when out of host memory (a fixed table). */
void rt_dev_cache_init(rt_dev_cache *c, const rt_dev_ops *ops, int max_entries, size_t max_bytes);

/* The device copy of the `bytes` (> 0) at host: the one already held when the same bytes were
 * got before, else a new upload (evicting least-recently-used entries first, to stay within the
 * budget). NULL when the device has no memory for it or the upload failed: the cache is then as
 * it was, less what it evicted. bytes 0 returns NULL and changes nothing. */
const void *rt_dev_cache_get(rt_dev_cache *c, const void *host, size_t bytes);

/* Releases every entry (ops.release) and the table; c is then empty and must be initialised
 * again before use. NULL-safe. */
void rt_dev_cache_release(rt_dev_cache *c);

#ifdef __cplusplus
}
#endif

#endif /* RT_DEV_CACHE_H */
