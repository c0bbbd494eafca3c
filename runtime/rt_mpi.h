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

/* The links between the ranks of comm, measured as nccl-tests measures NCCL's (the median of
 * `repeats` timed runs after a warm-up, every rank at once): each collective's bus bandwidth on a
 * message of `bytes` (all-reduce 2(n-1)/n x size / time, all-gather and reduce-scatter and
 * all-to-all (n-1)/n x the whole size / time, send/receive between pairs size / time) and the
 * latency of a step from an 8-byte all-reduce's time / 2(n-1). They replace c's link inside a
 * node: intra_gbit the fastest collective's bus bandwidth, each collective's share of it
 * (coll_eff, <= 1), intra_latency_us; `dprun profile --cluster-out` writes the result, so that
 * dpsim prices the runtime's transfers and collectives at the machine's rates (a preset's are
 * rough: the cpu preset's all-reduce was 7x faster than the ranks', docs/runtime.md). Every rank
 * calls it; each run counts the slowest rank's time, so every rank gets the same figures. The bus
 * bandwidth is models/comm.h comm_busbw_factor's, the one the simulator divides by. Needs 2 or more ranks
 * (DP_ERR_INVALID otherwise); a failed MPI call fails with its reason. */
struct cluster_spec;
dp_status rt_mpi_measure_links(MPI_Comm comm, size_t bytes, int repeats, struct cluster_spec *c,
                               dp_err *err);

#endif /* RT_MPI_H */
