/*
 * exec_loop.h — dprun's one executor loop: what every instruction of a plan does, in what order,
 * on any medium.
 *
 * Both backends run a plan through these two functions and differ only in the per-medium work
 * they plug in (rt_medium): a compute call, a send or receive, a timestamp. The cpu backend
 * (exec.c) computes on the host and moves data over MPI, one stage per process; the cuda backend
 * (exec_gpu.c) enqueues the same instructions on CUDA streams and moves data over NCCL or, between
 * two stages that one process drives, with a CUDA event and a copy.
 *
 * rt_loop_iteration steps the instruction lists of the stages a process drives through the plan
 * machine (scheduler/plan_machine.h pm_resolve: which slot, what it waits for, which rank and
 * chunk a transfer meets, whether a B leaves its weight gradients to a W) and issues each:
 *   RECV_*  begin, recv, end                       (posts the receive; never waits for it)
 *   F       await (when it consumes a receive), begin, forward, end
 *   B       await, begin, backward (weights too unless the rank is split), reduce when that
 *           completed the micro-batch's weight gradients, end
 *   W       begin, weights, reduce, end
 *   SEND_*  begin, send, end                       (starts the send; never waits for it)
 *   FREE    begin, release, end
 * Stages are walked round-robin, each as far as it can go: an instruction whose `ready` says no (a
 * receive from a stage of the same process whose send is not issued yet) holds its stage until a
 * later pass. A pass in which no stage moves is a deadlock in the plan, reported with every
 * waiting instruction (DP_ERR_DEADLOCK). A process that drives one stage never waits there.
 *
 * rt_loop_runs is the run of a whole plan (rt_opts, exec.h): warm-up runs of the first iteration,
 * then for each iteration an unrecorded prepare run where the medium asks for one, its measured
 * runs (rt_runs_of), and a progress line (rt_progress).
 */
#ifndef RT_EXEC_LOOP_H
#define RT_EXEC_LOOP_H

#include "../scheduler/plan_machine.h"
#include "exec.h"

/* The per-medium work of the executor. Every hook gets the medium's state and the resolved
 * instruction, and returns 0, or -1 having written the failure into the dp_err given to
 * rt_loop_iteration (a medium that ends the job on a failure, as the cpu backend does under MPI,
 * never returns -1). `ready` and `reduce` may be NULL (always ready; nothing to reduce). */
typedef struct rt_medium {
    int (*ready)(void *m, const pm_step *s);   /* 1: it may be issued now, 0: not yet */
    int (*begin)(void *m, const pm_step *s);   /* the instruction's start (its timestamp) */
    int (*end)(void *m, const pm_step *s);     /* its end, and its record */
    int (*recv)(void *m, const pm_step *s);    /* RECV_*: the slot opened, the receive posted */
    int (*await)(void *m, const pm_step *s);   /* F, B: the receive of kind s->waits has landed */
    int (*forward)(void *m, const pm_step *s); /* F: the slot opened, the chunk's forward */
    /* B: the input gradients, and with `weights` the weight gradients too */
    int (*backward)(void *m, const pm_step *s, int weights);
    int (*weights)(void *m, const pm_step *s); /* W: the weight gradients */
    int (*reduce)(void *m, const pm_step *s);  /* the micro-batch's weight gradients are complete */
    int (*send)(void *m, const pm_step *s);    /* SEND_*: the send started */
    int (*release)(void *m, const pm_step *s); /* FREE: the slot released */
} rt_medium;

/* Runs the instructions of iteration pm->it of the stages of `replica` that drives[stage] marks
 * (pp entries), through md on state m. DP_OK; the status a hook failed with (err holds its
 * message); or DP_ERR_DEADLOCK naming every waiting instruction. pm is initialised for the
 * iteration by the caller (pm_init) and not changed. */
dp_status rt_loop_iteration(const plan_machine *pm, int replica, const unsigned char *drives,
                            const rt_medium *md, void *m, dp_err *err);

/* One run of a plan iteration on a medium: `iteration` is the id its inputs are seeded with (the
 * warm-up runs use 0), record RT_RECORD_OFF or RT_RECORD_ON + r for its r-th measured run. */
typedef dp_status (*rt_run_fn)(void *m, const plan_iter *it, int iteration, int record);

/* The runs of o's plan on this process (rank: its place in MPI_COMM_WORLD, 0 alone): first the
 * fault injection (rank o->stall_rank sleeps o->stall_s), then o->warmup unrecorded runs of the
 * first iteration; then for each iteration (o->iterations, 0: all), with `prepare`, an unrecorded
 * run right before its measured ones (not the first iteration's after a warm-up), then its
 * rt_runs_of measured runs, then rt_progress. Stops at the first run that fails and returns its
 * status. */
dp_status rt_loop_runs(const rt_opts *o, int rank, int prepare, rt_run_fn run, void *m);

/* Progress on stderr while the plan runs, from rank 0: on a terminal "\rdprun: iteration 3 of
 * 20, ETA 12 s" after every iteration (the ETA from the time since started_s, dp_now_s
 * seconds) and a last line when done == total; elsewhere (a log, or mpirun, which forwards
 * stderr through pipes) a line per tenth of the run once it has taken RT_PROGRESS_AFTER_S.
 * rt_loop_runs calls it after each iteration, for both backends. */
#define RT_PROGRESS_AFTER_S 2.0
void rt_progress(int rank, int done, int total, double started_s);

#endif /* RT_EXEC_LOOP_H */
