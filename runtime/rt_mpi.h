/*
 * rt_mpi.h — checking MPI's return codes in the runtime (MPI_ERRORS_RETURN is set): a failed call
 * is named with MPI's reason and handed to the caller's fatal handler (an executor's die, which
 * prints the rank and ends the job), instead of surfacing later as a time-out.
 */
#ifndef RT_MPI_H
#define RT_MPI_H

#include <mpi.h>
#include <stddef.h>

#include "layer.h"

/* "CALL failed: MPI's reason" for return code rc. */
void rt_mpi_describe(int rc, const char *call, char *msg, size_t cap);

/* Runs call; on failure, die_fn(ctx, message) (die_fn does not return). */
#define RT_MPI_TRY(die_fn, ctx, call)                                                              \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        if (rc_ != MPI_SUCCESS) {                                                                  \
            char m_[MPI_MAX_ERROR_STRING + 300];                                                   \
            rt_mpi_describe(rc_, #call, m_, sizeof m_);                                            \
            die_fn((ctx), m_);                                                                     \
        }                                                                                          \
    } while (0)

/* A tensor-parallel group (runtime/layer.h rt_tp) over an MPI communicator, its ranks in the
 * communicator's order: the collectives are nonblocking MPI calls, each finished by the caller's
 * wait(ctx, request, what) (an executor's, with its timeout; NULL: MPI_Wait), a failed call handed
 * to die(ctx, message), which does not return. The layer is given &g->tp. */
typedef struct rt_mpi_tp {
    rt_tp tp;
    MPI_Comm comm;
    void (*wait)(void *ctx, MPI_Request *rq, const char *what);
    void (*die)(void *ctx, const char *msg);
    void *ctx;
} rt_mpi_tp;

/* Sets g up on comm (the caller's; g does not own it), sequence parallelism on or off. */
void rt_mpi_tp_init(rt_mpi_tp *g, MPI_Comm comm, int sp,
                    void (*wait)(void *ctx, MPI_Request *rq, const char *what),
                    void (*die)(void *ctx, const char *msg), void *ctx);

#endif /* RT_MPI_H */
