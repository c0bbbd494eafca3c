/*
 * placement.h — what each virtual pipeline stage runs and what its transfers carry: the one rule
 * that the memory model, the stage costs, the plan's transfers, the simulator and both dprun
 * executors ask.
 *
 * Layers are split evenly over the virtual stages (the first stages take one more where they do
 * not divide): GPT's over all of them; T5's encoder layers over the first half and its decoder
 * layers over the second (a T5 pipeline has an even number of stages; with one stage it holds
 * both) — or, for GPT, as a split lists them (pipeline_split: --layers-per-stage, where the first
 * and last virtual stages may hold no layer, the embedding or the head alone, as Megatron's
 * uneven first and last stages and Llama 3's pipeline do). Virtual stage 0 holds the input
 * embedding, the last one the LM head. Device s of a pipeline of S devices holds one virtual
 * stage of each chunk c: in a loop (Megatron's interleaving) stage c S + s; in a V (ZB-V,
 * DualPipeV) chunk c runs down the devices where c is even and back up where it is odd, so device
 * s holds c S + s, or c S + S - 1 - s, and the last device holds chunk 0's end and chunk 1's start
 * (their transfer stays on it): placement_vstage, placement_device.
 *
 * What crosses from virtual stage v to v + 1 per micro-batch of mbs samples: GPT's hidden state
 * (mbs x seq x hidden); a T5 encoder stage's hidden state (mbs x enc x hidden); a T5 decoder
 * stage's hidden state and the encoder output it passes along (mbs x (dec + enc) x hidden). The
 * gradients going back have the same sizes. Over tensor (and context) parallelism each GPU pair
 * carries its share side by side (placement_wire_share).
 */
#ifndef PLACEMENT_H
#define PLACEMENT_H

#include <stddef.h>

#include "model.h"

typedef struct stage_placement {
    int enc_layers;    /* GPT's layers, or T5's encoder layers, on the stage */
    int first_layer;   /* the index of its first layer in its component (GPT's layers, T5's
                        * encoder or decoder), whatever the split: what a layer is, everywhere */
    int dec_layers;    /* T5's decoder layers on the stage */
    int decoder;       /* 1: a T5 decoder stage (of a pipeline of several stages) */
    int first_decoder; /* 1: the first decoder stage: it receives the encoder output alone and
                        * embeds the targets itself */
    int embedding;     /* 1: holds the input embedding (the first stage) */
    int head;          /* 1: holds the LM head and the loss (the last stage) */
} stage_placement;

/* The layers of each virtual stage where they are not split evenly: listed, or (GPT, n 0) by
 * torchtitan's rule (generate_llm_fqn_per_model_part; its pipeline_parallel_first_stage_less_layers
 * and _last_stage_less_layers, default 1 each; Megatron's --account-for-embedding- and
 * --account-for-loss-in-pipeline-split with 1): the model's L layers and less_first + less_last
 * more, standing for the embedding and the head, split evenly over the nv virtual stages (the first
 * take one more where they do not divide), then the first stage holds less_first fewer and the
 * last less_last fewer. Both 0 is the even split. Where the first and last virtual stages share a
 * device (a V), that device holds the embedding and the head, and the rule lightens it most. */
#define PLACEMENT_SPLIT_MAX 256
typedef struct pipeline_split {
    int n;                              /* virtual stages listed; 0: by the rule */
    int layers[PLACEMENT_SPLIT_MAX];    /* of virtual stage v, in order */
    int less_first, less_last;          /* the rule's (n 0): 0 and 0, the even split */
} pipeline_split;

/* How virtual stages sit on the devices (above). */
typedef enum placement_kind { PLACEMENT_LOOP = 0, PLACEMENT_V = 1 } placement_kind;

/* The virtual stage of chunk `chunk` on device `stage` of pp, and the device of virtual stage v
 * (its chunk is v / pp under both kinds). */
int placement_vstage(placement_kind k, int stage, int chunk, int pp);
int placement_device(placement_kind k, int v, int pp);

/* What device `device` of pp (chunks each) holds of the embedding (virtual stage 0's) and the LM
 * head (the last virtual stage's), placed as k says. */
typedef struct placement_roles {
    int embedding, head;
} placement_roles;
placement_roles placement_device_roles(placement_kind k, int device, int pp, int chunks);

/* The placement of virtual stage v of nv, with the layers as split lists them or its rule gives
 * them (NULL: the even split; a split must have passed placement_split_check for nv). */
stage_placement placement_stage(const model_spec *m, const pipeline_split *split, int v, int nv);
/* Of a stage's GPT layers (pl), the mixture-of-experts ones (model_moe_layer; 0 for a dense
 * model): what the stage and memory models price as COMP_MOE, the rest as dense layers. */
int placement_moe_layers(const model_spec *m, const stage_placement *pl);

/* Whether m can be placed on nv virtual stages (--pp x --chunks): split evenly (NULL or the rule
 * at 0, 0), a layer at least on each (GPT), an even number of stages each side at least one layer
 * (T5); by the rule otherwise, a GPT model whose stages but the first and last each get a layer at
 * least, and the first and last not fewer than none; as a split lists them, a GPT model, one count
 * per virtual stage, together the model's layers, each at least 1 but the first's and last's
 * (which may hold the embedding or the head alone). DP_ERR_INVALID naming the options and what is
 * wrong. The one rule of the planner and dprun. */
dp_status placement_split_check(const model_spec *m, const pipeline_split *split, int nv,
                                dp_err *err);

/* Reads "L0,L1,..." (whole numbers from 0), or the rule as "less:F,L" (less_first, less_last),
 * into *split; -1 on anything else or more than PLACEMENT_SPLIT_MAX. Writes it back the same way
 * (the even split: ""). */
int placement_split_parse(const char *text, pipeline_split *split);
void placement_split_format(const pipeline_split *split, char *buf, size_t cap);

/* Elements of one activation (or its gradient) sent from virtual stage v of nv to the next, for a
 * micro-batch of mbs samples of enc_len (GPT: seq) and dec_len tokens. */
double placement_act_elems(const model_spec *m, int v, int nv, int mbs, int enc_len, int dec_len);

/* What one transfer of a virtual stage holds, side by side: its own hidden state (or that
 * state's gradient) first, then the encoder output passed along (or its gradient). grad: 0 the
 * activation, 1 its gradient; send: 1 what the stage sends, 0 what it receives. A GPT or T5
 * encoder stage moves its hidden state alone (the last encoder stage receives the encoder
 * output's gradient there); a decoder stage both; the first decoder stage receives the encoder
 * output alone and sends back its gradient alone. Both dprun executors pack and size their wire
 * buffers by it; placement_act_elems counts what a stage sends. */
typedef struct placement_wire {
    int hidden, enc; /* 1 where the part is there */
} placement_wire;
placement_wire placement_wire_parts(const stage_placement *p, int grad, int send);

/* The share of a transfer that one GPU pair carries, side by side with the others of its rank:
 * 1/cp (each context-parallel GPU holds its share of the tokens), and 1/tp more with sequence
 * parallelism (each tensor-parallel GPU holds 1/tp of the tokens between layers; without it every
 * tensor-parallel GPU holds, and sends, the whole activation). */
double placement_wire_share(int tp, int cp, int seq_parallel);

/* The number of parts the tensor-parallel GPUs of a rank cut a transfer's tokens into: tp with
 * sequence parallelism, else 1 (each sends the whole). */
int placement_token_shards(int tp, int seq_parallel);

#endif /* PLACEMENT_H */
