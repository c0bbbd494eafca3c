#include "pool.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* A worker process: it reads job indices from its job pipe and answers each with a
 * frame on `res_fd`: a uint32_t length, then the text. */
typedef struct worker {
    pid_t pid;    /* 0: the slot is empty */
    int job_fd;   /* the parent's write end of the worker's job pipe; -1 once closed */
    int res_fd;   /* the parent's read end of its result pipe */
    long index;   /* the job it runs; -1 when idle */
} worker;

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    size_t at = 0;
    while (at < len) {
        ssize_t wr = write(fd, p + at, len - at);
        if (wr < 0 && errno == EINTR) continue;
        if (wr <= 0) return -1;
        at += (size_t)wr;
    }
    return 0;
}

/* Reads exactly len bytes; -1 at EOF or an error before that. */
static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    size_t at = 0;
    while (at < len) {
        ssize_t got = read(fd, p + at, len - at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        at += (size_t)got;
    }
    return 0;
}

/* The worker's loop: a job per index read, a frame per job, until its job pipe closes. */
static void worker_main(int job_fd, int res_fd, pool_job job, void *ctx)
{
    long index;
    static char out[POOL_RESULT_MAX];
    while (read_all(job_fd, &index, sizeof index) == 0) {
        out[0] = '\0';
        job(ctx, index, out, sizeof out);
        uint32_t len = (uint32_t)strnlen(out, sizeof out - 1);
        if (write_all(res_fd, &len, sizeof len) != 0 || write_all(res_fd, out, len) != 0) _exit(1);
    }
    _exit(0);
}

/* Starts a worker in slot k; -1 when a pipe or the fork fails. The child closes every other
 * worker's pipe ends, so that each pipe ends when its own worker (or the parent) closes it. */
static int worker_start(worker *w, int jobs, int k, pool_job job, void *ctx,
                        const volatile sig_atomic_t *stop)
{
    int jp[2], rp[2];
    if (pipe(jp) != 0) return -1;
    if (pipe(rp) != 0) {
        close(jp[0]), close(jp[1]);
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        for (int q = 0; q < jobs; q++)
            if (q != k && w[q].pid != 0) {
                if (w[q].job_fd >= 0) close(w[q].job_fd);
                close(w[q].res_fd);
            }
        close(jp[1]), close(rp[0]);
        if (stop) signal(SIGINT, SIG_IGN); /* a Ctrl-C stops the parent's loop; the running
                                            * jobs finish and report */
        worker_main(jp[0], rp[1], job, ctx);
    }
    close(jp[0]), close(rp[1]);
    if (pid < 0) {
        close(jp[1]), close(rp[0]);
        return -1;
    }
    w[k] = (worker){pid, jp[1], rp[0], -1};
    return 0;
}

/* Ends a worker: closes its pipes and reaps it. */
static void worker_end(worker *w)
{
    if (w->job_fd >= 0) close(w->job_fd);
    close(w->res_fd);
    int status = 0;
    while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
    }
    w->pid = 0, w->job_fd = -1;
}

int pool_run(long n, int jobs, pool_job job, pool_done done, pool_progress progress, void *ctx)
{
    return pool_run_until(n, jobs, job, done, progress, ctx, NULL);
}

int pool_run_until(long n, int jobs, pool_job job, pool_done done, pool_progress progress,
                   void *ctx, const volatile sig_atomic_t *stop)
{
    if (jobs < 1) jobs = 1;
    if (jobs > n) jobs = n > 0 ? (int)n : 1;
    worker *w = calloc((size_t)jobs, sizeof *w);
    struct pollfd *pfd = calloc((size_t)jobs, sizeof *pfd);
    char *out = malloc(POOL_RESULT_MAX);
    if (!w || !pfd || !out) {
        free(w), free(pfd), free(out);
        return -1;
    }
    long next = 0, finished = 0;
    int failed = 0, stopped = 0, died = 0;
    struct sigaction ign, old_pipe; /* a worker gone idle: its pipe's write fails, not the parent */
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &old_pipe);
    while (finished < n) {
        if (stop && *stop) stopped = 1;
        /* hand the next jobs to idle workers (starting workers where a slot is empty) */
        int running = 0;
        for (int k = 0; k < jobs; k++) {
            if (w[k].pid == 0 && next < n && !failed && !stopped &&
                worker_start(w, jobs, k, job, ctx, stop) != 0)
                failed = 1;
            if (w[k].pid != 0 && w[k].index < 0 && next < n && !failed && !stopped) {
                if (write_all(w[k].job_fd, &next, sizeof next) == 0) w[k].index = next++;
                else worker_end(&w[k]); /* it died idle: the slot starts a new one next round */
            }
            running += w[k].pid != 0 && w[k].index >= 0;
        }
        if (running == 0) {
            if (!stopped) /* nothing could start: account for the rest */
                for (; next < n; next++, finished++) {
                    done(ctx, next, NULL);
                    if (progress) progress(ctx, finished + 1, n);
                }
            break;
        }
        int np = 0;
        for (int k = 0; k < jobs; k++)
            if (w[k].pid != 0 && w[k].index >= 0) pfd[np++] = (struct pollfd){w[k].res_fd, POLLIN, 0};
        if (poll(pfd, (nfds_t)np, -1) < 0) {
            if (errno == EINTR) continue;
            failed = 1;
            break;
        }
        for (int q = 0; q < np; q++) {
            if (!pfd[q].revents) continue;
            int k = 0;
            while (k < jobs && (w[k].pid == 0 || w[k].res_fd != pfd[q].fd)) k++;
            if (k == jobs) continue; /* (cannot happen: each polled fd is a running worker's) */
            uint32_t len;
            long index = w[k].index;
            w[k].index = -1;
            if (read_all(w[k].res_fd, &len, sizeof len) == 0 && len < POOL_RESULT_MAX &&
                read_all(w[k].res_fd, out, len) == 0) {
                out[len] = '\0';
                done(ctx, index, out);
            } else { /* the worker died with this job: no result; the others go on */
                worker_end(&w[k]);
                died = 1;
                done(ctx, index, NULL);
            }
            finished++;
            if (progress) progress(ctx, finished, n);
        }
    }
    for (int k = 0; k < jobs; k++) /* no more jobs: each worker sees its pipe end and exits */
        if (w[k].pid != 0 && w[k].index < 0) worker_end(&w[k]);
    for (int k = 0; k < jobs; k++) /* left running only when the loop failed */
        if (w[k].pid != 0) {
            kill(w[k].pid, SIGKILL);
            worker_end(&w[k]);
        }
    sigaction(SIGPIPE, &old_pipe, NULL);
    free(w), free(pfd), free(out);
    return failed || died ? -1 : stopped ? 1 : 0;
}
