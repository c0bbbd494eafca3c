/*
 * pool.h — independent jobs in forked worker processes (sweep and tune points).
 *
 * pool_run runs job(ctx, i, out, cap) for every i in [0, n) in at most `jobs` forked worker
 * processes, each taking jobs one after another (forked when the run starts, or to replace one
 * that died, each seeing the caller's state as it was then; a job must leave nothing behind that
 * changes a later one's result). A job writes a text result of at most POOL_RESULT_MAX - 1 bytes into out; the parent
 * receives it with done(ctx, i, text) as each job finishes (in finishing order, not index
 * order), or done(ctx, i, NULL) when its worker died running it (a crash, a signal): that job
 * has no result, a new worker takes the next job, the others run all the same, and pool_run
 * returns -1 at the end. A pipe or fork that fails stops the starting of jobs: the ones not
 * started are reported to done with NULL too. progress(ctx, finished, n), if given, is called
 * after each. Workers share nothing with the parent after the fork: a job must report through
 * its text only. jobs = 1 still forks (a crash never takes the caller down).
 */
#ifndef POOL_H
#define POOL_H

#include <signal.h>
#include <stddef.h>

#define POOL_RESULT_MAX 16384

typedef void (*pool_job)(void *ctx, long i, char *out, size_t cap);
typedef void (*pool_done)(void *ctx, long i, const char *text);
typedef void (*pool_progress)(void *ctx, long finished, long n);

/* 0 when every job reported; -1 when one died or a pipe or fork failed (jobs not started then
 * are reported to done with NULL too, so that every index is accounted for). */
int pool_run(long n, int jobs, pool_job job, pool_done done, pool_progress progress, void *ctx);

/* The same, stopping early once *stop is set (a signal handler's flag): no job starts after
 * that, the running ones finish and report, and 1 is returned (-1 still wins: a worker died);
 * the jobs never started are not reported. With stop given the workers ignore SIGINT, so that a
 * Ctrl-C at the terminal (sent to the whole process group) lets them finish; stop NULL is
 * pool_run. */
int pool_run_until(long n, int jobs, pool_job job, pool_done done, pool_progress progress,
                   void *ctx, const volatile sig_atomic_t *stop);

#endif /* POOL_H */
