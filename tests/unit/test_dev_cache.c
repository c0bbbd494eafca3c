/*
 * test_dev_cache.c — runtime/dev_cache.h over a fake device whose memory is host memory and
 * which keeps a ledger of every allocation: what each returned pointer holds (it must be the
 * content asked for), which allocations are live (a pointer handed out must be; nothing may be
 * left at the end), and how many uploads ran (one per content that was not on the device). On a
 * random stream of gets over a pool of contents, the test keeps its own record of when each
 * content was last asked for and checks every eviction against it (the least recently used
 * goes first, the RT_DEV_KEEP most recent never), and the limits: entries, and bytes unless only
 * the kept ones are left. Failed allocations and uploads leave the cache as it was.
 */
#include "testutil.h"

#include "../../runtime/dev_cache.h"

/* The fake device: allocations with their bytes, live or released. */
typedef struct fake_dev {
    void *ptr[4096];
    size_t bytes[4096];
    int live[4096];
    int n;
    int fail_alloc, fail_upload; /* the next call fails */
    long uploads, releases, live_n;
    size_t live_bytes;
    void *released[8192]; /* the pointers released, in order */
} fake_dev;

static int find(fake_dev *d, const void *p)
{
    for (int i = 0; i < d->n; i++)
        if (d->ptr[i] == p && d->live[i]) return i;
    return -1;
}

static void *fake_alloc(void *ctx, size_t bytes)
{
    fake_dev *d = ctx;
    if (d->fail_alloc) {
        d->fail_alloc = 0;
        return NULL;
    }
    assert_true(d->n < 4096);
    void *p = malloc(bytes);
    assert_non_null(p);
    d->ptr[d->n] = p, d->bytes[d->n] = bytes, d->live[d->n] = 1, d->n++;
    d->live_n++, d->live_bytes += bytes;
    return p;
}

static int fake_upload(void *ctx, void *dev, const void *host, size_t bytes)
{
    fake_dev *d = ctx;
    int i = find(d, dev);
    assert_true(i >= 0);
    assert_true(bytes <= d->bytes[i]);
    if (d->fail_upload) {
        d->fail_upload = 0;
        return -1;
    }
    memcpy(dev, host, bytes);
    d->uploads++;
    return 0;
}

static void fake_release(void *ctx, void *dev)
{
    fake_dev *d = ctx;
    int i = find(d, dev);
    assert_true(i >= 0); /* released once, and only what was allocated */
    d->live[i] = 0, d->live_n--, d->live_bytes -= d->bytes[i];
    assert_true(d->releases < 8192);
    d->released[d->releases++] = dev;
    free(dev);
    d->ptr[i] = NULL;
}

static rt_dev_ops ops_for(fake_dev *d)
{
    rt_dev_ops o = {fake_alloc, fake_upload, fake_release, d};
    return o;
}

/* Content k of the pool: (k % 5 + 1) * 16 ints, each a function of k and its index. */
static size_t content(int k, int *buf)
{
    size_t n = (size_t)(k % 5 + 1) * 16;
    for (size_t i = 0; i < n; i++) buf[i] = k * 1000003 + (int)i;
    return n * sizeof(int);
}

static void test_same_content_one_upload(void **state)
{
    (void)state;
    fake_dev d = {0};
    rt_dev_ops o = ops_for(&d);
    rt_dev_cache c;
    rt_dev_cache_init(&c, &o, 16, 1 << 20);
    int a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 5}, a2[4] = {1, 2, 3, 4};
    const void *pa = rt_dev_cache_get(&c, a, sizeof a);
    assert_non_null(pa);
    assert_ptr_equal(rt_dev_cache_get(&c, a2, sizeof a2), pa); /* equal bytes elsewhere */
    const void *pb = rt_dev_cache_get(&c, b, sizeof b);
    assert_non_null(pb);
    assert_ptr_not_equal(pa, pb);
    const void *pa3 = rt_dev_cache_get(&c, a, 3 * sizeof(int)); /* a prefix is another content */
    assert_ptr_not_equal(pa3, pa);
    assert_int_equal(d.uploads, 3);
    assert_int_equal(c.uploads, 3);
    assert_memory_equal(pa, a, sizeof a);
    assert_memory_equal(pb, b, sizeof b);
    assert_null(rt_dev_cache_get(&c, a, 0));
    assert_int_equal(d.uploads, 3);
    rt_dev_cache_release(&c);
    assert_int_equal(d.live_n, 0);
    rt_dev_cache_release(NULL);
}

static void test_failures_leave_the_cache(void **state)
{
    (void)state;
    fake_dev d = {0};
    rt_dev_ops o = ops_for(&d);
    rt_dev_cache c;
    rt_dev_cache_init(&c, &o, 8, 1 << 20);
    int a[8] = {7}, b[8] = {8};
    const void *pa = rt_dev_cache_get(&c, a, sizeof a);
    d.fail_alloc = 1;
    assert_null(rt_dev_cache_get(&c, b, sizeof b));
    assert_int_equal(c.n, 1);
    d.fail_upload = 1;
    assert_null(rt_dev_cache_get(&c, b, sizeof b));
    assert_int_equal(c.n, 1);
    assert_int_equal(d.live_n, 1); /* the failed upload's memory was given back */
    assert_int_equal(c.bytes, sizeof a);
    assert_ptr_equal(rt_dev_cache_get(&c, a, sizeof a), pa);
    const void *pb = rt_dev_cache_get(&c, b, sizeof b); /* works once the device does */
    assert_non_null(pb);
    assert_memory_equal(pb, b, sizeof b);
    rt_dev_cache_release(&c);
    assert_int_equal(d.live_n, 0);
}

/* A content larger than the whole budget is still served (and kept while it is recent). */
static void test_over_budget_content_is_served(void **state)
{
    (void)state;
    fake_dev d = {0};
    rt_dev_ops o = ops_for(&d);
    rt_dev_cache c;
    rt_dev_cache_init(&c, &o, 8, 64);
    int big[64];
    for (int i = 0; i < 64; i++) big[i] = i;
    const void *p = rt_dev_cache_get(&c, big, sizeof big);
    assert_non_null(p);
    assert_memory_equal(p, big, sizeof big);
    assert_ptr_equal(rt_dev_cache_get(&c, big, sizeof big), p);
    assert_int_equal(d.uploads, 1);
    rt_dev_cache_release(&c);
    assert_int_equal(d.live_n, 0);
}

/* Random gets over a pool of contents, under tight limits. The test's own view of what the
 * cache holds (where[]) changes only by the gets and the fake's log of releases. */
static void random_stream(int max_entries, size_t max_bytes, int pool, unsigned seed, int fits)
{
    fake_dev d = {0};
    rt_dev_ops o = ops_for(&d);
    rt_dev_cache c;
    rt_dev_cache_init(&c, &o, max_entries, max_bytes);
    int buf[96];
    uint64_t last_use[64] = {0}; /* per content: the step it was last asked for */
    const void *where[64] = {0}; /* per content: its device pointer while the cache holds it */
    int recent[RT_DEV_KEEP], n_recent = 0; /* the most recent distinct contents, newest first */
    int seen[64] = {0}, distinct = 0;
    long expected_uploads = 0;
    assert_true(pool <= 64);
    for (int step = 1; step <= 3000; step++) {
        seed = seed * 1664525u + 1013904223u;
        int k = (int)((seed >> 8) % (unsigned)(step % 7 == 0 ? 3 : pool)); /* some hot contents */
        size_t bytes = content(k, buf);
        if (!seen[k]) seen[k] = 1, distinct++;
        const void *held = where[k];
        long releases = d.releases;
        const void *p = rt_dev_cache_get(&c, buf, bytes);
        assert_non_null(p);
        assert_memory_equal(p, buf, bytes);
        if (held)
            assert_ptr_equal(p, held);
        else
            expected_uploads++;
        assert_int_equal(d.uploads, expected_uploads);
        /* each eviction of this get, in order, took the least recently used of what was held,
         * and none of the RT_DEV_KEEP - 1 most recent (with k, the RT_DEV_KEEP most recent) */
        for (long r = releases; r < d.releases; r++) {
            int gone = -1;
            for (int j = 0; j < pool; j++)
                if (where[j] == d.released[r]) gone = j;
            assert_true(gone >= 0 && gone != k);
            for (int j = 0; j < pool; j++)
                if (j != gone && where[j]) assert_true(last_use[j] > last_use[gone]);
            for (int q = 0; q < n_recent && q < RT_DEV_KEEP - 1; q++) assert_int_not_equal(recent[q], gone);
            where[gone] = NULL;
        }
        where[k] = p;
        last_use[k] = (uint64_t)step;
        int at = 0; /* k moves to the front of the recent ones */
        while (at < n_recent && recent[at] != k) at++;
        if (at == n_recent && n_recent < RT_DEV_KEEP) n_recent++;
        if (at == RT_DEV_KEEP) at = RT_DEV_KEEP - 1;
        memmove(recent + 1, recent, (size_t)at * sizeof *recent);
        recent[0] = k;
        int n_held = 0;
        size_t held_bytes = 0;
        for (int j = 0; j < pool; j++)
            if (where[j]) n_held++, held_bytes += content(j, buf), assert_true(find(&d, where[j]) >= 0);
        assert_int_equal(n_held, d.live_n); /* nothing else is allocated */
        assert_int_equal(c.n, n_held);
        assert_int_equal(held_bytes, d.live_bytes);
        assert_int_equal(c.bytes, held_bytes);
        assert_true(n_held <= c.max_entries);
        assert_true(held_bytes <= max_bytes || n_held <= RT_DEV_KEEP);
    }
    if (fits) {
        assert_int_equal(d.releases, 0);
        assert_int_equal(d.uploads, distinct);
    } else {
        assert_true(d.releases > 0); /* the limits were exercised */
    }
    rt_dev_cache_release(&c);
    assert_int_equal(d.live_n, 0);
}

static void test_random_streams(void **state)
{
    (void)state;
    random_stream(6, 1 << 20, 12, 1u, 0);  /* the entry limit binds */
    random_stream(64, 1000, 30, 2u, 0);    /* the byte limit binds (contents of 64 to 320 bytes) */
    random_stream(5, 700, 40, 3u, 0);      /* both, and only the kept ones fit at times */
    random_stream(64, 1 << 20, 20, 4u, 1); /* everything fits: one upload per content */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_content_one_upload),
        cmocka_unit_test(test_failures_leave_the_cache),
        cmocka_unit_test(test_over_budget_content_is_served),
        cmocka_unit_test(test_random_streams),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
