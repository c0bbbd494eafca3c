/*
 * profile.h — dprun profile: measure the calibration grid on a backend.
 *
 * For every (mbs, seqlen) of the grid it times one transformer layer's forward and backward
 * (input and weight gradients) and the LM head + loss, with warm-up runs and the median of the
 * repeats (on the CPU, repeats are passes over the whole grid: profile.c says why), as a run
 * meets them on the CPU: in 1F1B's steady state (a micro-batch's backward after the next one's
 * forward) over several activation sets and copies of the layer's parameters (the run's other
 * layers), so that neither the activations nor the weights are warm in the caches as they would be
 * timing one buffer over and over. It writes the profile CSV contract (models/cost.h): tp 1, metrics fwd_ms, bwd_ms,
 * stored_act_mb (activations the layer keeps for its backward) and peak_act_mb (those plus the
 * backward's gradient buffers), for each recompute mode asked for (rows "none", "selective",
 * "full"). Under a mode the backward is the executor's (runtime/layer.h rt_layer_rerun first) and
 * the memory what it holds: selective reruns the attention cores and keeps what none keeps (the
 * bf16 layer stores no S^2 term anyway; the fp64 one keeps its probabilities); full keeps the
 * layer's input, and its backward holds one layer's activations and the rerun's output besides.
 * The LM head does not recompute: its rows are measured once and written for every mode. GPT: components encoder (its layer) and
 * postprocess on (mbs, seqlen). T5: encoder on (mbs, enc), decoder on (mbs, enc, dec) over the
 * decoder lengths, postprocess on (mbs, dec). `dpsim --profile` uses the file directly.
 *
 * With on_gpu (dprun profile --backend cuda, a CUDA build) the same grid is timed on the GPU
 * layer (runtime/cuda/) instead, by CUDA-event means, at the element type `dtype` (bf16, the
 * training precision, by default; the stored and peak memory then are the bf16 layer's: no S^2
 * attention term, layout.h). The CPU layer is fp64.
 *
 * With a tensor-parallel group (rt_profile_opts.tp, dprun profile --tp T under mpirun -np T) the
 * CPU layer is timed as a tp plan runs it: each rank its share, the group's collectives
 * (all-reduces, or with sequence parallelism all-gathers and reduce-scatters) inside the times,
 * and the rows say tp T, which `dpsim plan --tp T --profile` reads.
 *
 * With a context-parallel group (rt_profile_opts.cp, dprun profile --cp C under mpirun -np
 * tp x C) each rank times its share of every grid point's tokens (runtime/layer.h rt_cp_split:
 * 2 C must divide each seqlen), and the rows say cp C in their own column.
 *
 * Under mpirun every rank measures the same grid at the same time (a barrier per point), so the
 * timings include the contention of busy neighbouring ranks, as in a run; rank 0 writes the file.
 */
#ifndef RT_PROFILE_H
#define RT_PROFILE_H

#include "../models/model.h"
#include "layer.h"

typedef struct rt_profile_opts {
    const model_spec *model;
    const int *mbs;
    int n_mbs;
    const int *seqlen;     /* GPT: sequence lengths; T5: encoder lengths */
    int n_seqlen;
    const int *dec_seqlen; /* T5: decoder lengths (NULL: the same as seqlen) */
    int n_dec_seqlen;
    int repeats, warmup;
    const char *out;
    int progress; /* a line per grid point on stderr */
    void (*sync)(void); /* called before each grid point (MPI_Barrier when all ranks profile) */
    int on_gpu; /* on the CUDA layer (CUDA-event means; not under mpirun) */
    rt_dtype dtype; /* the layer's element type (RT_FP64 on the CPU) */
    unsigned modes; /* recompute modes measured, bits 1 << recompute_mode; 0: none alone */
    const rt_tp *tp; /* a tensor-parallel group (runtime/layer.h; the cpu layer only): every rank
                      * of it times its share of the layer (rt_layer_shape_tp) and of the
                      * vocabulary-parallel head, with the group's collectives, at the same time,
                      * as a tp plan runs them; rows say tp = its size. NULL: tp 1 */
    const rt_tp *cp; /* a context-parallel group's collectives (runtime/layer.h rt_cp; the cpu
                      * layer, GPT-kind): every rank of it times its share of each (mbs, seqlen)
                      * micro-batch's tokens, the key/value gathers and gradient reduce-scatters
                      * inside the times, as a cp plan runs them; rows carry a cp column, which
                      * `dpsim plan --cp C --profile` reads. NULL: cp 1 (no column) */
} rt_profile_opts;

dp_status rt_profile(const rt_profile_opts *o, dp_err *err);

#endif /* RT_PROFILE_H */
