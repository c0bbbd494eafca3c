#include "rt_mpi.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>

#include "../models/comm.h"
#include "../models/hw.h"

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

/* ---- measured links ---- */

/* The median time (s) of `repeats` runs of collective k on `bytes` (after one warm-up), every rank
 * starting together, the slowest rank's time each run. */
static int time_coll(MPI_Comm comm, hw_coll k, size_t bytes, int repeats, double *buf, double *out,
                     double *median_s)
{
    int n, me, rc = MPI_SUCCESS;
    MPI_Comm_size(comm, &n);
    MPI_Comm_rank(comm, &me);
    int count = (int)(bytes / sizeof(double)), part = count / n;
    double *t = malloc((size_t)(repeats + 1) * sizeof *t);
    if (!t) return MPI_ERR_NO_MEM;
    for (int r = -1; r < repeats && rc == MPI_SUCCESS; r++) {
        MPI_Barrier(comm);
        double t0 = MPI_Wtime();
        MPI_Request rq = MPI_REQUEST_NULL; /* the nonblocking forms, as the executors call them */
        switch (k) {
        case COLL_ALL_REDUCE: rc = MPI_Iallreduce(buf, out, count, MPI_DOUBLE, MPI_SUM, comm, &rq); break;
        case COLL_ALL_GATHER:
            rc = MPI_Iallgather(buf, part, MPI_DOUBLE, out, part, MPI_DOUBLE, comm, &rq);
            break;
        case COLL_REDUCE_SCATTER:
            rc = MPI_Ireduce_scatter_block(buf, out, part, MPI_DOUBLE, MPI_SUM, comm, &rq);
            break;
        case COLL_ALL_TO_ALL:
            rc = MPI_Ialltoall(buf, part, MPI_DOUBLE, out, part, MPI_DOUBLE, comm, &rq);
            break;
        default: { /* pairs (0,1), (2,3), ...: the even rank sends, the odd receives */
            int peer = me ^ 1;
            if (peer < n)
                rc = me % 2 ? MPI_Irecv(out, count, MPI_DOUBLE, peer, 7, comm, &rq)
                            : MPI_Isend(buf, count, MPI_DOUBLE, peer, 7, comm, &rq);
        }
        }
        if (rc == MPI_SUCCESS) rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
        double dt = MPI_Wtime() - t0, slowest = dt;
        if (rc == MPI_SUCCESS) rc = MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
        if (r >= 0) t[r] = slowest;
    }
    if (rc == MPI_SUCCESS) {
        gsl_sort(t, 1, (size_t)repeats);
        *median_s = gsl_stats_median_from_sorted_data(t, 1, (size_t)repeats);
    }
    free(t);
    return rc;
}

dp_status rt_mpi_measure_links(MPI_Comm comm, size_t bytes, int repeats, cluster_spec *c, dp_err *err)
{
    int n;
    MPI_Comm_size(comm, &n);
    if (n < 2) return dp_fail(err, DP_ERR_INVALID, "measuring links needs 2 or more ranks, and there is %d", n);
    bytes = bytes / ((size_t)n * sizeof(double)) * (size_t)n * sizeof(double); /* whole parts */
    /* every run's time is the slowest rank's (time_coll), so every rank reads the same figures */
    double *buf = malloc(bytes), *out = malloc(bytes), busbw[COLL_COUNT], best = 0, t = 0, lat_s = 0;
    if (!buf || !out) {
        free(buf), free(out);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory for a %zu-byte message", bytes);
    }
    for (size_t i = 0; i < bytes / sizeof(double); i++) buf[i] = (double)(i % 1000) / 1000;
    int rc = MPI_SUCCESS;
    for (int k = 0; k < COLL_COUNT && rc == MPI_SUCCESS; k++) {
        rc = time_coll(comm, (hw_coll)k, bytes, repeats, buf, out, &t);
        busbw[k] = t > 0 ? bytes * comm_busbw_factor((hw_coll)k, n) / t / 1e9 : 0; /* GB/s */
        if (busbw[k] > best) best = busbw[k];
    }
    if (rc == MPI_SUCCESS) rc = time_coll(comm, COLL_ALL_REDUCE, sizeof(double) * (size_t)n, repeats,
                                          buf, out, &lat_s);
    free(buf), free(out);
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING + 64];
        rt_mpi_describe(rc, "a collective timed for --cluster-out", msg, sizeof msg);
        return dp_fail(err, DP_ERR_EXTERNAL, "%s", msg);
    }
    if (!(best > 0)) return dp_fail(err, DP_ERR_EXTERNAL, "the timed collectives took no time");
    c->intra_gbit = best * 8;
    for (int k = 0; k < COLL_COUNT; k++) c->coll_eff[SCOPE_INTRA][k] = busbw[k] > 0 ? busbw[k] / best : 1e-3;
    c->intra_latency_us = lat_s / (2.0 * (n - 1)) * 1e6;
    c->gpu.nvls_eff = 0; /* no switch reductions between processes */
    return DP_OK;
}
