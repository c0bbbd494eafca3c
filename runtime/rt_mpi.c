#include "rt_mpi.h"

#include <limits.h>
#include <stdio.h>

void rt_mpi_describe(int rc, const char *call, char *msg, size_t cap)
{
    char es[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, es, &len) != MPI_SUCCESS) snprintf(es, sizeof es, "error %d", rc);
    snprintf(msg, cap, "%s failed: %s", call, es);
}

/* ---- a tensor-parallel group ---- */

static void tp_finish(rt_mpi_tp *g, MPI_Request *rq)
{
    static const char what[] = "a tensor- or context-parallel collective (the group's other ranks)";
    if (g->wait) {
        g->wait(g->ctx, rq, what);
        return;
    }
    RT_MPI_TRY(g->die, g->ctx, MPI_Wait(rq, MPI_STATUS_IGNORE));
}

/* MPI counts are ints: a larger exchange is refused by name. */
static int tp_count(rt_mpi_tp *g, size_t n)
{
    if (n > (size_t)INT_MAX) g->die(g->ctx, "a tensor-parallel collective of more than 2^31 values");
    return (int)n;
}

static void tp_allreduce(void *vg, double *v, size_t n, int op)
{
    rt_mpi_tp *g = vg;
    MPI_Request rq;
    RT_MPI_TRY(g->die, g->ctx, MPI_Iallreduce(MPI_IN_PLACE, v, tp_count(g, n), MPI_DOUBLE,
                                              op == RT_TP_MAX ? MPI_MAX : MPI_SUM, g->comm, &rq));
    tp_finish(g, &rq);
}

static void tp_allgather(void *vg, const double *mine, double *all, size_t n)
{
    rt_mpi_tp *g = vg;
    MPI_Request rq;
    int k = tp_count(g, n);
    RT_MPI_TRY(g->die, g->ctx, MPI_Iallgather(mine, k, MPI_DOUBLE, all, k, MPI_DOUBLE, g->comm, &rq));
    tp_finish(g, &rq);
}

static void tp_reduce_scatter(void *vg, const double *all, double *mine, size_t n)
{
    rt_mpi_tp *g = vg;
    MPI_Request rq;
    RT_MPI_TRY(g->die, g->ctx, MPI_Ireduce_scatter_block(all, mine, tp_count(g, n), MPI_DOUBLE,
                                                         MPI_SUM, g->comm, &rq));
    tp_finish(g, &rq);
}

void rt_mpi_tp_init(rt_mpi_tp *g, MPI_Comm comm, int sp,
                    void (*wait)(void *ctx, MPI_Request *rq, const char *what),
                    void (*die)(void *ctx, const char *msg), void *ctx)
{
    int size = 1, rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    *g = (rt_mpi_tp){{size, rank, sp && size > 1, tp_allreduce, tp_allgather, tp_reduce_scatter, g},
                     comm, wait, die, ctx};
}
