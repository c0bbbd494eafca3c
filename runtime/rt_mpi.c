#include "rt_mpi.h"

#include <stdio.h>

void rt_mpi_describe(int rc, const char *call, char *msg, size_t cap)
{
    char es[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, es, &len) != MPI_SUCCESS) snprintf(es, sizeof es, "error %d", rc);
    snprintf(msg, cap, "%s failed: %s", call, es);
}
