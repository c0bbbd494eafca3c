/*
 * memory.h — model state memory per GPU: fp16 weights and gradients, fp32 Adam state, with ZeRO.
 *
 * Mixed-precision Adam keeps per parameter (Rajbhandari et al. 2020, ZeRO, §3.1): 2 bytes fp16
 * weight, 2 bytes fp16 gradient, 12 bytes fp32 optimizer state (master weight, momentum,
 * variance). ZeRO partitions across the D data-parallel replicas: stage 1 the optimizer state,
 * stage 2 also the gradients, stage 3 also the weights.
 */
#ifndef MEMORY_H
#define MEMORY_H

#include "cost.h"

#define BYTES_WEIGHT 2.0
#define BYTES_GRAD 2.0
#define BYTES_OPTIMIZER 12.0

/* Model state MB on one GPU holding param_mb of fp16 parameters (i.e. param_mb / 2 M params). */
double memory_model_state_mb(double param_mb, int zero_stage, int dp);
/* Its three parts: fp16 weights, fp16 gradients, fp32 optimizer state, each after ZeRO. */
void memory_model_state_parts(double param_mb, int zero_stage, int dp, double *weights_mb,
                              double *grads_mb, double *optimizer_mb);

/* fp16 parameter MB of virtual stage `stage` of `stages`: its layers and embedding or head as
 * placement.h places them (the last stage's head a copy of the tied embedding). */
double memory_stage_param_mb(const cost_model *cm, int stage, int stages);

/* The embedding's and LM head's fp16 parameters on device `stage` of `stages`: the embedding on
 * the first; the head on the last, as a copy of the tied embedding (Megatron keeps one there)
 * when there are several stages, or as its own weights when it is untied. */
double memory_embedding_share_mb(const cost_model *cm, int stage, int stages);

#endif /* MEMORY_H */
