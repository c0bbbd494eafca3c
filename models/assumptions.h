/*
 * assumptions.h — the constants behind a cost model's answer that were not measured on the
 * user's system: what each is, how it was obtained (fitted, read off a benchmark on other
 * hardware, inferred, assumed), its source, and a what-if that scales it. `dpsim explain`
 * (planner/explain.h) re-runs a study with each scaled by ±10% to say how far the answer moves.
 *
 * A what-if (cost_what_if) is a multiplier per assumption, 1 leaving it as it is; it is applied
 * where the constant is resolved (a cluster's figures, the analytic model's parameters, the
 * attention kernel's rate: planner/setup.c), so every consumer of the constant sees the same
 * scaled value. Shares of a peak or of a link are capped at 1 after scaling.
 *
 * No allocation, no errors: the functions read and write the structs they are given.
 */
#ifndef MODELS_ASSUMPTIONS_H
#define MODELS_ASSUMPTIONS_H

#include <stddef.h>

#include "cost.h"

typedef enum assumption_id {
    ASSUME_GEMM_EFF,    /* analytic: the GEMMs' share of the bf16 peak (gemm_eff) */
    ASSUME_GEMM_SHAPE,  /* the GEMM shape curve's k0 (gpu_spec.gemm_k0, fp8_gemm_k0) */
    ASSUME_FP8_GEMM,    /* the best FP8 GEMM's share of the FP8 peak (fp8_matmul_eff) */
    ASSUME_ATTN_KERNEL, /* the fused attention kernel's TFLOP/s (cost_model.attn_speed) */
    ASSUME_ATTN_EFF,    /* analytic: unfused attention's share of the peak (attn_eff) */
    ASSUME_MEM_EFF,     /* analytic: memory-bound work's share of HBM bandwidth (mem_eff) */
    ASSUME_FLOOR,       /* analytic: the per-layer forward and backward floors */
    ASSUME_BWD_RATIO,   /* analytic: the backward's work over the forward's (bwd_ratio) */
    ASSUME_NVLINK_EFF,  /* NCCL's bus bandwidth inside a node over the link rate */
    ASSUME_NET_EFF,     /* NCCL's bus bandwidth between nodes over the NICs' rate */
    ASSUME_LATENCY,     /* the per-step latencies of collectives, inside and between nodes */
    ASSUME_JITTER,      /* the per-GPU speed spread behind the straggler wait (gpu_jitter) */
    ASSUME_USABLE_MEM,  /* the device memory the planner may fill (mem_limit_mb) */
    ASSUME_COUNT
} assumption_id;

/* A multiplier per assumption (1: as resolved). */
typedef struct cost_what_if {
    double scale[ASSUME_COUNT];
} cost_what_if;

/* Every multiplier 1. */
void cost_what_if_none(cost_what_if *w);
/* 1 when every multiplier is 1. */
int cost_what_if_is_none(const cost_what_if *w);

/* The what-if's figures of a cluster (links' shares, latencies, jitter, usable memory, the GPU's
 * GEMM curve and FP8 share) and of the analytic model's parameters, scaled in place. */
void cost_what_if_cluster(const cost_what_if *w, cluster_spec *c);
void cost_what_if_params(const cost_what_if *w, analytic_params *p);

typedef struct assumption_info {
    const char *name;   /* short, stable: "gemm_eff", "nvlink_eff", … */
    const char *what;   /* what it is, for a user */
    const char *how;    /* "fitted", "benchmark", "inferred", "assumed", "derived" */
} assumption_info;

const assumption_info *assumption_about(assumption_id id);

/* Whether the assumption shapes the answers of cost model cm (a profile measured its layers, so
 * the analytic model's parameters do not; the attention kernel only where attention is timed as
 * one; the GEMM curve only where the GPU has one; FP8 only under fp8; links only where the
 * layout uses them: spans_nodes 1 when the job crosses nodes, gpus the GPUs it uses). */
int assumption_applies(assumption_id id, const cost_model *cm, long long gpus);

/* The value cm resolved, as text with its unit and where it comes from ("0.619 of peak: the A100
 * fit (0.67) x H100's best GEMM over the A100's"), into buf. p: the analytic parameters in use
 * (NULL where the model is not analytic). */
void assumption_describe(assumption_id id, const cost_model *cm, const analytic_params *p,
                         char *buf, size_t cap);

#endif /* MODELS_ASSUMPTIONS_H */
