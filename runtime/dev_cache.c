#include "dev_cache.h"

#include <stdlib.h>
#include <string.h>

#include "../common/dp.h"

void rt_dev_cache_init(rt_dev_cache *c, const rt_dev_ops *ops, int max_entries, size_t max_bytes)
{
    memset(c, 0, sizeof *c);
    c->ops = *ops;
    c->max_entries = max_entries > RT_DEV_KEEP ? max_entries : RT_DEV_KEEP;
    c->max_bytes = max_bytes;
    c->e = dp_xcalloc((size_t)c->max_entries, sizeof *c->e);
}

static void drop(rt_dev_cache *c, int i)
{
    c->ops.release(c->ops.ctx, c->e[i].dev);
    free(c->e[i].host);
    c->bytes -= c->e[i].bytes;
    c->e[i] = c->e[--c->n];
}

/* Evicts the least recently used entry, unless only the RT_DEV_KEEP - 1 most recent are left
 * (with the one about to be added, the RT_DEV_KEEP most recent). */
static int evict_one(rt_dev_cache *c)
{
    if (c->n < RT_DEV_KEEP) return 0;
    int lru = 0;
    for (int i = 1; i < c->n; i++)
        if (c->e[i].last_use < c->e[lru].last_use) lru = i;
    drop(c, lru);
    return 1;
}

const void *rt_dev_cache_get(rt_dev_cache *c, const void *host, size_t bytes)
{
    if (bytes == 0) return NULL;
    uint64_t h = dp_fnv1a(DP_FNV_OFFSET, host, bytes);
    c->clock++;
    for (int i = 0; i < c->n; i++) {
        rt_dev_entry *e = &c->e[i];
        if (e->hash == h && e->bytes == bytes && memcmp(e->host, host, bytes) == 0) {
            e->last_use = c->clock;
            return e->dev;
        }
    }
    while (c->n >= c->max_entries || (c->bytes + bytes > c->max_bytes && c->n >= RT_DEV_KEEP))
        if (!evict_one(c)) break;
    void *copy = malloc(bytes), *dev = copy ? c->ops.alloc(c->ops.ctx, bytes) : NULL;
    if (!dev) {
        free(copy);
        return NULL;
    }
    memcpy(copy, host, bytes);
    if (c->ops.upload(c->ops.ctx, dev, copy, bytes) != 0) {
        c->ops.release(c->ops.ctx, dev);
        free(copy);
        return NULL;
    }
    c->e[c->n++] = (rt_dev_entry){h, c->clock, bytes, copy, dev};
    c->bytes += bytes;
    c->uploads++;
    return dev;
}

void rt_dev_cache_release(rt_dev_cache *c)
{
    if (!c) return;
    while (c->n > 0) drop(c, c->n - 1);
    free(c->e);
    memset(c, 0, sizeof *c);
}
