/*
 * memory.h — model state memory per GPU: 16-bit weights and gradients, fp32 Adam state, with ZeRO.
 *
 * Mixed-precision Adam keeps per parameter (Rajbhandari et al. 2020, ZeRO, §3.1): 2 bytes 16-bit
 * weight, 2 bytes 16-bit gradient, 12 bytes fp32 optimizer state (master weight, momentum,
 * variance): DynaPipe's 16 bytes. What the precision changes (cost.h): gradients accumulated and
 * reduced in fp32 hold 4 bytes (Megatron-LM's bf16 default: its distributed optimizer's table
 * gives 18 bytes per parameter, 6 + 12/d sharded); fp8 keeps the weights' FP8 copy and its
 * transpose beside them, 2 bytes more. ZeRO partitions across the D data-parallel replicas: stage 1
 * the optimizer state, stage 2 also the gradients, stage 3 also the weights (and their FP8 copies).
 */
#ifndef MEMORY_H
#define MEMORY_H

#include "cost.h"

#define BYTES_WEIGHT 2.0
#define BYTES_GRAD 2.0
#define BYTES_OPTIMIZER 12.0
#define BYTES_FP8_WEIGHT_COPIES 2.0 /* the FP8 weight and its transpose (Hopper's wgrad) */

/* Bytes per parameter of each part of the model state. */
typedef struct state_bytes {
    double weight, grad, optimizer;
} state_bytes;

/* A precision's: weights 2 (+ BYTES_FP8_WEIGHT_COPIES under fp8), gradients grad_bytes (cost.h
 * grad_reduce_bytes; a cost model's cost_model.grad_bytes), optimizer 12. */
state_bytes memory_state_bytes(train_precision p, int grad_bytes);

/* Model state MB on one GPU holding param_mb of 16-bit parameters (i.e. param_mb / 2 M params),
 * at b's bytes per parameter (NULL: DynaPipe's 2, 2, 12). */
double memory_model_state_mb(double param_mb, const state_bytes *b, int zero_stage, int dp);
/* Its three parts: weights, gradients, fp32 optimizer state, each after ZeRO. */
void memory_model_state_parts(double param_mb, const state_bytes *b, int zero_stage, int dp,
                              double *weights_mb, double *grads_mb, double *optimizer_mb);

/* fp16 parameter MB of virtual stage `stage` of `stages`: its layers and embedding or head as
 * placement.h places them (the last stage's head a copy of the tied embedding). */
double memory_stage_param_mb(const cost_model *cm, int stage, int stages);
/* fp16 parameter MB of enc GPT / T5-encoder layers, moe of them MoE layers (each with its ep
 * share of the experts), and dec T5 decoder layers: the one sum the stage model and
 * memory_stage_param_mb take. */
double memory_layers_param_mb(const cost_model *cm, int enc, int moe, int dec);

/* The embedding's and LM head's fp16 parameters on a device that holds what r says
 * (placement_device_roles): the embedding where it holds it; the head as a copy of the tied
 * embedding (Megatron keeps one there) on another device, or as its own weights when it is
 * untied (on the embedding's device a tied head is the embedding: a pipeline of one stage, or a
 * V's first device). */
double memory_embedding_share_mb(const cost_model *cm, placement_roles r);
/* The same as units gathered whole under ZeRO-3: the embedding's and the head's, each its own
 * (at most 2, into unit_mb), their sum memory_embedding_share_mb. Returns how many. */
int memory_embedding_units(const cost_model *cm, placement_roles r, double unit_mb[2]);
/* ZeRO-3's gathered working set on a device, MB: the unit that runs and the one prefetched behind
 * it, i.e. the two largest of the units it gathers whole (each of its `layers` layers of
 * layer_mb, and the embedding and the head where it holds them); 0 without ZeRO-3 over 2+ GPUs. */
double memory_zero3_gathered_mb(const cost_model *cm, placement_roles r, int layers,
                                double layer_mb, int zero_stage, int zero_ranks);

#endif /* MEMORY_H */
