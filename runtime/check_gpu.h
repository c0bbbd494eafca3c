/*
 * check_gpu.h — `dprun check-gpu`: the GPU layer's numerics (fp64 against the CPU layer, bf16
 * against fp64) and its speed in bf16 (TFLOP/s, MFU, cuBLASLt's GEMM rate).
 *
 * Tolerances, relative errors in norm (||a - b|| / ||b|| over all elements of a quantity):
 *   RT_CHECK_FP64_TOL       both compute in fp64 and differ only in summation order;
 *   RT_CHECK_BF16_OUT_TOL   a bf16 value carries a relative rounding error up to 2^-8 (0.4%);
 *                           the output rounds the input, the weights' bf16 copy and the
 *                           intermediate activations (about ten roundings in series with fp32
 *                           accumulation; in norm they should add up like a random walk, to
 *                           about 1%: an expectation, not yet a GPU measurement): 2%;
 *   RT_CHECK_BF16_GRAD_TOL  the gradients go back through the same roundings once more and
 *                           through the softmax's recomputation: 5%.
 * A bf16 path that computes something else (a wrong mask, a transposed operand, a missing bias)
 * is off by tens of percent or more, far above these. Each parameter tensor's gradient is also
 * compared on its own (relative to its own norm: a bias or a norm's gain can be wrong and hardly
 * move the norm of all of them), the worst shown:
 *   fp64                    under RT_CHECK_FP64_TOL, as above;
 *   RT_CHECK_BF16_TENSOR_TOL a gradient missing, or another tensor's, is off by about 100%; a
 *                           tensor's rounding error relative to its own norm exceeds the
 *                           gradients' 5% where its gradient partly cancels (a key bias's is 0
 *                           in exact arithmetic, beside the query and value biases' in one
 *                           tensor): 20%.
 * Recompute (scheduler/plan_machine.h pm_recompute): the same passes with the backward's rerun
 * (rt_cuda_layer_rerun: selective, then full) against the same type without it, which the rerun
 * must give back:
 *   RT_CHECK_RERUN_TOL      in either type the rerun recomputes what the forward had; the
 *                           backward itself may differ from one run to the next (cuDNN's
 *                           attention backward and the bias and norm gradients add fp32 partial
 *                           sums with atomics, in no fixed order): 1e-3, far under a rerun that
 *                           is missing or reads another layer's state (tens of percent).
 */
#ifndef RT_CHECK_GPU_H
#define RT_CHECK_GPU_H

#include "../models/model.h"

#define RT_CHECK_FP64_TOL 1e-9
#define RT_CHECK_BF16_OUT_TOL 2e-2
#define RT_CHECK_BF16_GRAD_TOL 5e-2
#define RT_CHECK_BF16_TENSOR_TOL 2e-1
#define RT_CHECK_RERUN_TOL 1e-3

/* Returns 0 when every check passed (prints the tables and "N passed, N failed"). hw names the
 * GPU preset for MFU (NULL: found from the device's name; MFU is left out when unknown); speed 0
 * leaves the speed table out. */
int rt_check_gpu(const model_spec *m, const char *hw, int speed);

#endif /* RT_CHECK_GPU_H */
