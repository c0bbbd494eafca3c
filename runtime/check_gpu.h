/* check_gpu.h — `dprun check-gpu`: GPU layer numerics against the CPU layer, and GPU timings. */
#ifndef RT_CHECK_GPU_H
#define RT_CHECK_GPU_H

#include "../models/model.h"

/* Returns 0 when every check passed (prints a table and "N passed, N failed"). */
int rt_check_gpu(const model_spec *m);

#endif /* RT_CHECK_GPU_H */
