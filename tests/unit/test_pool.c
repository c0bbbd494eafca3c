/* Unit tests for common/pool.c: jobs in forked workers, results by index, a worker that dies
 * costs its job only, a stop flag starts nothing more. */
#include "testutil.h"

#include <signal.h>
#include <unistd.h>

#include "../../common/pool.h"

typedef struct seen {
    long n;
    char text[64][64];
    int got[64], died[64];
    long progress_calls, last_finished;
    int crash_every;            /* jobs i with i % crash_every == crash_every - 1 die; 0 none */
    volatile sig_atomic_t stop; /* set by done once `stop_after` results came */
    long stop_after, results;
} seen;

static void job(void *ctx, long i, char *out, size_t cap)
{
    const seen *s = ctx;
    if (s->crash_every && i % s->crash_every == s->crash_every - 1) raise(SIGKILL);
    static long ran_here; /* jobs this worker ran before: workers are reused */
    snprintf(out, cap, "job %ld pid %ld after %ld", i, (long)getpid(), ran_here++);
}

static void done(void *ctx, long i, const char *text)
{
    seen *s = ctx;
    assert_true(i >= 0 && i < s->n);
    assert_int_equal(s->got[i] + s->died[i], 0); /* each index once */
    if (text) s->got[i] = 1, snprintf(s->text[i], sizeof s->text[i], "%s", text);
    else s->died[i] = 1;
    if (++s->results == s->stop_after) s->stop = 1;
}

static void progress(void *ctx, long finished, long n)
{
    seen *s = ctx;
    assert_int_equal(n, s->n);
    assert_int_equal(finished, s->last_finished + 1);
    s->last_finished = finished;
    s->progress_calls++;
}

static void test_every_job_once(void **state)
{
    (void)state;
    static const int jobs[] = {1, 2, 3, 8, 40};
    for (int q = 0; q < 5; q++) {
        seen s = {.n = 37};
        assert_int_equal(pool_run(s.n, jobs[q], job, done, progress, &s), 0);
        long reused = 0;
        for (long i = 0; i < s.n; i++) {
            assert_int_equal(s.got[i], 1);
            long idx, pid, before;
            assert_int_equal(sscanf(s.text[i], "job %ld pid %ld after %ld", &idx, &pid, &before), 3);
            assert_int_equal(idx, i);
            assert_true(pid != (long)getpid()); /* never in the caller */
            reused += before > 0;
        }
        assert_int_equal(s.progress_calls, s.n);
        if (jobs[q] < s.n) assert_true(reused > 0); /* a worker takes jobs one after another */
    }
    seen none = {.n = 0};
    assert_int_equal(pool_run(0, 4, job, done, progress, &none), 0);
    assert_int_equal(none.progress_calls, 0);
}

static void test_dead_worker_costs_its_job(void **state)
{
    (void)state;
    seen s = {.n = 30, .crash_every = 7};
    assert_int_equal(pool_run(s.n, 3, job, done, progress, &s), -1);
    for (long i = 0; i < s.n; i++) {
        int dies = i % 7 == 6;
        assert_int_equal(s.died[i], dies);
        assert_int_equal(s.got[i], !dies);
    }
    assert_int_equal(s.progress_calls, s.n);
}

static void test_stop_starts_nothing_more(void **state)
{
    (void)state;
    seen s = {.n = 50, .stop_after = 5};
    assert_int_equal(pool_run_until(s.n, 2, job, done, progress, &s, &s.stop), 1);
    long reported = 0;
    for (long i = 0; i < s.n; i++) reported += s.got[i] + s.died[i];
    /* what was running when the flag was set still reports; nothing starts after it */
    assert_true(reported >= 5 && reported <= 5 + 2);
    for (long i = 0; i < reported; i++) assert_int_equal(s.got[i], 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_job_once),
        cmocka_unit_test(test_dead_worker_costs_its_job),
        cmocka_unit_test(test_stop_starts_nothing_more),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
