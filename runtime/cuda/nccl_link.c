/* nccl_link.c — nccl_link.h over NCCL (C; built where nccl.h is found). */
#include "nccl_link.h"

#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>

struct rt_nccl {
    ncclComm_t comm;
};

static int nccl_failed(ncclResult_t r, const char *what, char *why, size_t why_cap)
{
    if (r == ncclSuccess) return 0;
    snprintf(why, why_cap, "NCCL %s: %s", what, ncclGetErrorString(r));
    return -1;
}

int rt_nccl_world(rt_cuda *g, rt_nccl **world, char *why, size_t why_cap)
{
    (void)g; /* rt_cuda_open made g's device current: the communicator lives there */
    *world = NULL;
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ncclUniqueId id;
    ncclResult_t r = rank == 0 ? ncclGetUniqueId(&id) : ncclSuccess;
    int ok = r == ncclSuccess, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
        snprintf(why, why_cap, "NCCL could not create a unique id on rank 0: %s",
                 ncclGetErrorString(r));
        return -1;
    }
    MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
    rt_nccl *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, why_cap, "out of host memory");
        return -1;
    }
    if (nccl_failed(ncclCommInitRank(&c->comm, size, id, rank), "init", why, why_cap)) {
        free(c);
        return -1;
    }
    *world = c;
    return 0;
}

int rt_nccl_split(rt_nccl *world, int color, int key, rt_nccl **sub, char *why, size_t why_cap)
{
    *sub = NULL;
    ncclComm_t comm = NULL;
    if (nccl_failed(ncclCommSplit(world->comm, color >= 0 ? color : NCCL_SPLIT_NOCOLOR, key,
                                  &comm, NULL),
                    "split", why, why_cap))
        return -1;
    if (!comm) return 0;
    if (!(*sub = calloc(1, sizeof **sub))) {
        ncclCommDestroy(comm);
        snprintf(why, why_cap, "out of host memory");
        return -1;
    }
    (*sub)->comm = comm;
    return 0;
}

void rt_nccl_free(rt_nccl *c)
{
    if (!c) return;
    ncclCommDestroy(c->comm);
    free(c);
}

int rt_nccl_send(rt_nccl *c, const void *buf, size_t bytes, int peer, rt_cuda *g, char *why,
                 size_t why_cap)
{
    return nccl_failed(ncclSend(buf, bytes, ncclUint8, peer, c->comm, (cudaStream_t)rt_cuda_stream(g)),
                       "send", why, why_cap);
}

int rt_nccl_recv(rt_nccl *c, void *buf, size_t bytes, int peer, rt_cuda *g, char *why,
                 size_t why_cap)
{
    return nccl_failed(ncclRecv(buf, bytes, ncclUint8, peer, c->comm, (cudaStream_t)rt_cuda_stream(g)),
                       "recv", why, why_cap);
}

static ncclDataType_t nccl_type(rt_elem e)
{
    return e == RT_ELEM_F64 ? ncclFloat64 : e == RT_ELEM_F32 ? ncclFloat32 : ncclBfloat16;
}

int rt_nccl_allreduce(rt_nccl *c, void *buf, size_t n, rt_elem e, int op, rt_cuda *g, char *why,
                      size_t why_cap)
{
    return nccl_failed(ncclAllReduce(buf, buf, n, nccl_type(e), op == RT_TP_MAX ? ncclMax : ncclSum,
                                     c->comm, (cudaStream_t)rt_cuda_stream(g)),
                       "all-reduce", why, why_cap);
}

int rt_nccl_allgather(rt_nccl *c, const void *send, void *recv, size_t bytes, rt_cuda *g,
                      char *why, size_t why_cap)
{
    return nccl_failed(ncclAllGather(send, recv, bytes, ncclUint8, c->comm, (cudaStream_t)rt_cuda_stream(g)),
                       "all-gather", why, why_cap);
}

int rt_nccl_reduce_scatter(rt_nccl *c, const void *send, void *recv, size_t n, rt_elem e,
                           rt_cuda *g, char *why, size_t why_cap)
{
    return nccl_failed(ncclReduceScatter(send, recv, n, nccl_type(e), ncclSum, c->comm,
                                         (cudaStream_t)rt_cuda_stream(g)),
                       "reduce-scatter", why, why_cap);
}
