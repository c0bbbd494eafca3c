#include "pool.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct worker {
    pid_t pid;
    int fd;
    long index;
} worker;

/* Reads the whole result of a finished worker (it has exited: the pipe ends at EOF). */
static ssize_t read_all(int fd, char *buf, size_t cap)
{
    size_t at = 0;
    while (at + 1 < cap) {
        ssize_t got = read(fd, buf + at, cap - 1 - at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) break;
        at += (size_t)got;
    }
    buf[at] = '\0';
    return (ssize_t)at;
}

int pool_run(long n, int jobs, pool_job job, pool_done done, pool_progress progress, void *ctx)
{
    return pool_run_until(n, jobs, job, done, progress, ctx, NULL);
}

int pool_run_until(long n, int jobs, pool_job job, pool_done done, pool_progress progress,
                   void *ctx, const volatile sig_atomic_t *stop)
{
    if (jobs < 1) jobs = 1;
    worker *w = calloc((size_t)jobs, sizeof *w);
    if (!w) return -1;
    long next = 0, finished = 0;
    int running = 0, failed = 0, stopped = 0, died = 0;
    while (finished < n) {
        if (stop && *stop) stopped = 1;
        if (stopped && running == 0) break; /* the rest is not started */
        while (running < jobs && next < n && !failed && !stopped) {
            int fds[2];
            if (pipe(fds) != 0) {
                failed = 1;
                break;
            }
            fflush(NULL);
            pid_t pid = fork();
            if (pid == 0) {
                close(fds[0]);
                if (stop) signal(SIGINT, SIG_IGN); /* a Ctrl-C stops the parent's loop; the
                                                    * running jobs finish and report */
                char out[POOL_RESULT_MAX];
                out[0] = '\0';
                job(ctx, next, out, sizeof out);
                size_t len = strnlen(out, sizeof out - 1), at = 0;
                while (at < len) {
                    ssize_t wr = write(fds[1], out + at, len - at);
                    if (wr < 0 && errno == EINTR) continue;
                    if (wr <= 0) _exit(1);
                    at += (size_t)wr;
                }
                _exit(0);
            }
            close(fds[1]);
            if (pid < 0) {
                close(fds[0]);
                failed = 1;
                break;
            }
            for (int k = 0; k < jobs; k++)
                if (w[k].pid == 0) {
                    w[k] = (worker){pid, fds[0], next};
                    break;
                }
            running++;
            next++;
        }
        if (running == 0) { /* nothing could start: account for the rest */
            for (; next < n; next++, finished++) {
                done(ctx, next, NULL);
                if (progress) progress(ctx, finished + 1, n);
            }
            break;
        }
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            failed = 1;
            break;
        }
        for (int k = 0; k < jobs; k++) {
            if (w[k].pid != pid) continue;
            char out[POOL_RESULT_MAX];
            read_all(w[k].fd, out, sizeof out);
            close(w[k].fd);
            w[k].pid = 0;
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                done(ctx, w[k].index, out);
            } else { /* this job has no result; the others go on */
                died = 1;
                done(ctx, w[k].index, NULL);
            }
            running--;
            finished++;
            if (progress) progress(ctx, finished, n);
        }
    }
    free(w);
    return failed || died ? -1 : stopped ? 1 : 0;
}
