/*
 * cost.h — how long one micro-batch takes on one layer, and how much activation memory it holds.
 *
 * Every cost model answers the same query behind one interface (a const table of function
 * pointers chosen by name, like nccl-tests' struct testColl):
 *
 *   cost_query(cm, component, shape, &out, err)
 *
 * for a component (an encoder layer — for GPT its decoder-only layer —, a T5 decoder layer, or the
 * postprocess: LM head + loss, counted once per model), and a shape (micro-batch size, encoder
 * length, decoder length in tokens, padded). The answer is per layer (postprocess: per model):
 *
 *   fwd_ms, bwd_ms    forward and backward time, ms (backward includes any recomputation)
 *   stored_act_mb     activations kept from the forward until the backward, MB (1e6 bytes)
 *   peak_act_mb       transient peak of a forward over the stored activations before it, MB: the
 *                     profile's measurement (taken over up to three layers, so an upper bound
 *                     for one), or stored + transient for the analytic model
 *
 * A shape the model cannot answer is DP_ERR_INFEASIBLE with a reason: outside the measured region,
 * or in a cell the profile lacks because it ran out of memory when measured. It is never a silent
 * extrapolation and never a sentinel value. err may be NULL (the planner's inner loops) to skip
 * formatting the reason.
 *
 * Kinds:
 *   profile   measured per-layer grids (profile CSV contract), linear interpolation in (mbs, enc,
 *             dec) between grid points; exact on grid points; repeated keys combined by median.
 *   analytic  FLOPs and bytes against the GPU's peak rates (cost_analytic.c has the formulas and
 *             their sources), with free parameters that `dpsim calibrate` fits to a profile.
 */
#ifndef COST_H
#define COST_H

#include <stddef.h>
#include <stdint.h>

#include "../common/dp.h"
#include "hw.h"
#include "model.h"
#include "moe.h"
#include "placement.h"
#include "stack.h"

typedef enum cost_component {
    COMP_ENCODER,     /* GPT layer, or T5 encoder layer */
    COMP_DECODER,     /* T5 decoder layer */
    COMP_POSTPROCESS, /* LM head + loss, once per model, on the last stage */
    COMP_MOE,         /* GPT mixture-of-experts layer (model_moe_layer; analytic model only) */
    COMP_COUNT,
} cost_component;

typedef enum recompute_mode {
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE, /* attention core recomputed (Korthikanti et al. 2022); under a torch
                          * stack torchtitan's per-op policy (stack.h, cost_rerun_shares) */
    RECOMPUTE_FULL,      /* whole layer recomputed; only its input is stored */
    RECOMPUTE_COUNT,
} recompute_mode;

typedef struct cost_shape {
    int mbs;     /* samples (or packed rows) in the micro-batch */
    int enc_len; /* padded encoder (GPT: whole sequence) length, tokens */
    int dec_len; /* padded decoder length, tokens (0 for GPT) */
    /* Variable-length attention (THD with cu_seqlens, as Megatron-Core's packed sequences, Hugging
     * Face's DataCollatorWithFlattening or PyTorch's varlen_attn run it): when varlen is set, each
     * sample attends to itself only, so attention's s-squared work and memory are sums over the
     * samples of their own padded lengths: enc_sq = sum e_i^2, dec_sq = sum d_i^2, enc_dec = sum
     * e_i * d_i (T5's cross attention). The GEMMs, element-wise work and transfers stay on the
     * mbs x enc_len (x dec_len) tensor. varlen 0 (a zeroed shape): attention over whole rows. */
    int varlen;
    double enc_sq, dec_sq, enc_dec;
    /* Per-micro-batch context parallelism (cost_model.cp_auto): the degree this micro-batch runs
     * at, a divisor of the group cost_model.cp; 0 (a zeroed shape): the group's own degree. The
     * stage model prices it (scheduler/stage_cost.h); a cost model's query ignores it. */
    int cp;
    /* varlen: the longest sample's padded encoder (GPT: sequence) length, which the stage model's
     * per-micro-batch CP split keeps in one part; 0: unknown (taken as enc_len) */
    int enc_max;
} cost_shape;

/* A shape of whole rows (varlen 0). */
static inline cost_shape cost_shape_rows(int mbs, int enc_len, int dec_len)
{
    cost_shape s = {0};
    s.mbs = mbs, s.enc_len = enc_len, s.dec_len = dec_len;
    return s;
}

/* The attention sums a shape costs (above): its varlen sums, each at most the padded rows' (a
 * sample padded to the pad multiple can push a full row's sum past it), or for whole rows
 * mbs * enc_len^2, mbs * dec_len^2 and mbs * enc_len * dec_len. */
void cost_shape_attn(const cost_shape *s, double *enc_sq, double *dec_sq, double *enc_dec);

/* The largest time (ms) or memory (MB) a cost model's answer may hold: what one micro-batch on a
 * stage may cost in a plan (scheduler/stage_cost.h STAGE_MAX_VALUE is it); a profile value past it
 * is refused at its line. */
#define COST_VALUE_MAX 1e7

typedef struct cost_layer {
    double fwd_ms, bwd_ms;
    double fwd_xchg_ms, bwd_xchg_ms; /* of them, a MoE layer's token exchange (its all-to-alls),
                                      * serial: what the simulator overlaps with a paired
                                      * micro-batch's compute under COST_OVERLAP_EP; 0 otherwise */
    double stored_act_mb, peak_act_mb;
} cost_layer;

typedef struct cost_model cost_model;

/* The training's number format (--precision), as mixed-precision trainers run it:
 *   bf16  bf16 GEMMs and activations, fp32 master weights and Adam state (the default for every
 *         model but those measured in fp16)
 *   fp16  the same in fp16 with loss scaling: what DynaPipe's A100 profiles were measured in, the
 *         default of its paper shapes (model_spec.fp16)
 *   fp8   Transformer Engine's recipe: the linear layers' three GEMMs (forward, input gradient,
 *         weight gradient) in FP8 at the GPU's FP8 rate, attention and the other ops in bf16, each
 *         GEMM's activation operands cast to FP8 (current scaling reads a tensor twice, and
 *         Hopper transposes the cast copy for the weight gradient), the weights' FP8 copy and its
 *         transpose kept beside the bf16 weights (TE docs, "Low precision training": "both
 *         weight and weight^T quantized versions are created"; "Performance considerations").
 *         Refused on a GPU without an FP8 peak. MFU stays against the bf16 peak, as published
 *         tables state it. */
typedef enum train_precision {
    PRECISION_BF16,
    PRECISION_FP16,
    PRECISION_FP8,
    PRECISION_COUNT
} train_precision;
const char *precision_name(train_precision p); /* "bf16", "fp16", "fp8" */
int precision_parse(const char *name, train_precision *p); /* 0, or -1 for another name */

/* The gradients' reduction dtype (--grad-reduce-dtype): fp32, what Megatron-LM does for bf16
 * (arguments.py: "bfloat16 requires gradient accumulation and all-reduce to be done in fp32",
 * unless --grad-reduce-in-bf16) and torchtitan's FSDP (mixed_precision_reduce "float32"): the
 * gradient buffer holds 4 bytes per parameter and every gradient collective moves twice the
 * 16-bit bytes; or the 16-bit training type, as fp16 training (and DeepSpeed's bf16 default)
 * reduce. GRAD_REDUCE_AUTO: fp32 for bf16 and fp8, 16-bit for fp16. */
typedef enum grad_reduce { GRAD_REDUCE_AUTO, GRAD_REDUCE_FP32, GRAD_REDUCE_16 } grad_reduce;
/* Bytes per gradient element that a precision and a reduce choice give: 4 or 2. */
int grad_reduce_bytes(train_precision p, grad_reduce g);
/* The precision a model trains in unless --precision says: fp16 where its spec says so
 * (model_spec.fp16: the paper's shapes), else bf16. */
static inline train_precision precision_of_model(const model_spec *m)
{
    return m->fp16 ? PRECISION_FP16 : PRECISION_BF16;
}

/* Textbook costs (--toy-costs F,B[,W]), for teaching: every stage takes f_ms forward and b_ms
 * backward (W's share w_ms of it, which a schedule that splits the backward runs as its own op)
 * per micro-batch of unit_tokens padded tokens, a micro-batch of n tokens n / unit_tokens of
 * that; no embedding or LM head on any stage (equal stages, equal model state); no optimizer step
 * and no gradient collective (planner/study.h); links free unless the caller sets them. Memory stays
 * the cost model's (the layers' activations), so a schedule's memory still shows. */
typedef struct cost_toy {
    int on;
    double f_ms, b_ms, w_ms; /* w_ms <= b_ms; 0: no W share (a split schedule's W is empty) */
    double unit_tokens;      /* > 0 */
} cost_toy;

/* A textbook micro-batch's backward under recompute mode rc, ms per unit: b_ms, and under full
 * recompute the forward rerun before it, b_ms + f_ms (what the closed forms then count in t).
 * Selective recompute reruns the attention, which textbook costs do not separate: the set-up
 * refuses it (and --recompute dynamic, mixed and fastest go without it). */
double cost_toy_bwd_ms(const cost_toy *toy, recompute_mode rc);

/* The links of textbook mode when none is given: the fastest a cluster spec holds (1e9 Gbit/s,
 * latency 0), so a transfer of a GB takes nanoseconds. */
#define COST_TOY_FREE_LINK_GBIT 1e9

/* The smallest toy cost, ms: the simulator's clock tick (1 ns); a smaller one would time as 0. */
#define COST_TOY_MIN_MS 1e-6

/* Parses "F,B" or "F,B,W" (ms, finite, F and B at least COST_TOY_MIN_MS, W 0 or at least that and
 * at most B) into out (unit_tokens left as it was); DP_ERR_INVALID naming the field otherwise. */
dp_status cost_toy_parse(const char *text, cost_toy *out, dp_err *err);

/* The scale a shape's costs take under toy costs: its padded tokens / unit_tokens. */
double cost_toy_scale(const cost_toy *t, const cost_shape *s);

#define COST_MOE_IMB_POINTS 161 /* 2^0 .. 2^40 routed copies a GPU, four a doubling */

typedef struct cost_ops {
    const char *kind;
    int context_parallel; /* 1: the kind prices cost_model.cp > 1 (the analytic model) */
    int fp8;              /* 1: the kind prices --precision fp8 from rates (the analytic model); a
                           * measured profile times the format it was measured in */
    int experts;          /* 1: the kind prices a mixture of experts' layers (COMP_MOE: the
                           * analytic model) */
    int stacks;           /* 1: the kind prices a software stack's kernels and elementwise ops
                           * (stack.h: the analytic model); a measured profile times what ran */
    dp_status (*query)(const cost_model *cm, cost_component c, const cost_shape *s,
                       cost_layer *out, dp_err *err);
    double (*token_floor)(const cost_model *cm, cost_component c); /* cost_token_floor_ms; NULL:
                                                                    * none (0) */
    void (*release)(cost_model *cm);
} cost_ops;

struct cost_model {
    const cost_ops *ops;
    model_spec model;
    cluster_spec hw;
    int tp;                       /* tensor-parallel degree */
    recompute_mode recompute;
    double param_mb[COMP_COUNT];  /* fp16 parameters per layer on one GPU (after TP), MB */
    double embedding_param_mb;    /* fp16 word (+position) embedding on one GPU, MB */
    int flash_attn;               /* FlashAttention: the s x s scores and their dropout mask are
                                   * never stored (recomputed in the backward kernel), so stored
                                   * and peak activations lose the attention score terms; the
                                   * analytic model also times attention as the GPU's fused kernel
                                   * runs it (attn below; causal work halved). A profile's times
                                   * stay as measured. Set by the caller after construction,
                                   * before the first query (cost_model_set_attention) */
    const attn_kernel *attn;      /* the fused kernel that times it: the GPU's (gpu_spec.attn)
                                   * unless the caller chose another; NULL: none, attention is
                                   * then timed unfused even with flash_attn */
    double attn_speed;            /* the kernel's measured rate times this (a what-if:
                                   * assumptions.h); 1 (the constructors') */
    unsigned overlap;             /* COST_OVERLAP_* bits: which communication overlaps compute */
    int seq_parallel;             /* Megatron's sequence parallelism with tp > 1 (Korthikanti et
                                   * al. 2022): the layer norms', dropouts' and residuals'
                                   * activations and work split along the sequence over the tp
                                   * GPUs, each all-reduce an all-gather plus a reduce-scatter
                                   * (analytic model; a profile measured what it measured). On by
                                   * default, as Megatron recommends with tp > 1 */
    int cp;                       /* context parallelism: the cp GPUs of a rank (each with its tp)
                                   * share every sequence, 2cp chunks so that causal work
                                   * balances (Megatron-Core's CP); >= 1, 1 (the constructors'):
                                   * none. Set with cost_model_set_cp */
    int cp_alltoall;              /* 1: the all-to-all form (DeepSpeed-Ulysses: heads across the
                                   * group, four all-to-alls per layer), 0: ring attention (K/V
                                   * blocks passed around the group behind each step's attention) */
    int cp_auto;                  /* --cp auto: cp is a group of GPUs, and each micro-batch runs at
                                   * its own degree c dividing it (cost_shape.cp; ring form), the
                                   * group's GPUs splitting its rows into cp / c parts side by side
                                   * (Megatron-Core's dynamic CP); 0: every micro-batch at cp.
                                   * Set with cost_model_set_cp */
    train_precision precision;    /* the number format (above): bf16 (the constructors') */
    int grad_bytes;               /* bytes of a gradient element as reduced and held: 4 (fp32) or
                                   * 2; the constructors' 2. Set with cost_model_set_precision */
    software_stack stack;         /* the software that runs it (stack.h): its elementwise bytes
                                   * and what a selective recompute reruns. The constructors'
                                   * megatron-te. Set with cost_model_set_stack */
    pipeline_split split;         /* --layers-per-stage: the layers of each virtual stage, listed
                                   * or by rule (n 0; less 0, 0: split evenly, placement.h);
                                   * what the stage model and the memory model place. The
                                   * constructors': even */
    int ep;                       /* expert parallelism (a mixture of experts): the experts split
                                   * over ep GPUs of a stage's tp x cp x dp, each expert whole on
                                   * one (Megatron's parallel folding with expert tp 1); 1 (the
                                   * constructors'): every expert on every GPU. Set with
                                   * cost_model_set_moe */
    moe_routing *routing;         /* how a micro-batch's routed tokens fall on the ep ranks
                                   * (moe.h), owned (cost_model_free); NULL until
                                   * cost_model_set_moe (a uniform router): on the heap, since the
                                   * stage model copies a cost model by value on its hot path */
    comm_group ep_group;          /* the ep GPUs' token exchange (the all-to-alls) */
    int ep_nodes;                 /* the nodes an exchange's ep GPUs are on (cost_model_place_ep) */
    moe_dispatch dispatch;        /* how the exchange crosses nodes (moe.h); ALLTOALL (the
                                   * constructors'). Set with cost_model_set_dispatch */
    int etp;                      /* expert tensor parallelism: each expert's MLP split over etp
                                   * GPUs (Megatron's expert_tensor_parallel_size), an ep rank
                                   * being etp GPUs; 0 or 1 (the constructors'): every expert
                                   * whole. Set with cost_model_set_etp */
    comm_group etp_group;         /* the etp GPUs of an ep rank (their gathers of its copies) */
    double moe_imb[COST_MOE_IMB_POINTS]; /* the busiest rank's load over the mean (moe_imbalance)
                                   * at 2^(i/4) routed copies a GPU, interpolated between */
    double capacity;              /* a MoE's capacity factor (moe.h moe_dropped_share): the busiest
                                   * rank computes at most capacity x the mean; 0 (the
                                   * constructors'): dropless. Set with cost_model_set_capacity */
    cost_toy toy;                 /* textbook costs (above) in place of the kind's times when on:
                                   * stage_cost.h asks it; set by the caller after construction */
    void *impl;                   /* the kind's own state */
    uint64_t serial;              /* unique among the cost models this process made: what caches
                                   * of its answers key on (an address may be reused) */
};

/* What communication overlaps compute (cost_model.overlap); without a bit it runs serially
 * after the compute, the upper bound.
 *   DP    the gradients' reduction (ZeRO 0 all-reduce, ZeRO-1 reduce-scatter) in buckets during
 *         each stage's last backward, as PyTorch DDP and Megatron's overlap_grad_reduce do
 *         (sim.h)
 *   ZERO  ZeRO-2/3 (FSDP) per-micro-batch gathers and reduce-scatters prefetched layer by
 *         layer behind the compute: only the first layer's is exposed (stage_cost.h)
 *   TP    tensor-parallel collectives hidden behind the layer's GEMMs where they are shorter
 *         (Megatron/Transformer Engine's TP communication overlap; analytic model only) */
#define COST_OVERLAP_DP 1u
#define COST_OVERLAP_ZERO 2u
#define COST_OVERLAP_TP 4u
#define COST_OVERLAP_EP 8u /* a MoE layer's token exchange (its all-to-alls) behind another
                            * micro-batch's compute, as DualPipe's F&B pairs and Megatron's EP
                            * overlap run it: on the simulator's streams, where a plan puts a
                            * forward and another micro-batch's backward next to each other
                            * (sim.h: pairs); the layer's cost stays serial (cost_layer) */
#define COST_OVERLAP_DEFAULT (COST_OVERLAP_DP | COST_OVERLAP_ZERO) /* DDP's and FSDP's defaults */
/* Parses "none", "all" or a comma list of dp, zero, tp, ep into *bits; -1 on anything else. */
int cost_overlap_parse(const char *text, unsigned *bits);
/* "dp,zero", "none", …: what cost_overlap_parse reads back. */
const char *cost_overlap_name(unsigned bits, char *buf, size_t cap);

/* Context parallelism of degree cp (>= 1), ring or all-to-all; on failure the model is unchanged.
 * DP_ERR_INVALID, naming the option and why, for a cost kind that does not price it (a profile
 * measured at another cp: cost_profile_load_at; or in the ring form, for all-to-all), an
 * encoder-decoder model, or (all-to-all) heads or key/value heads that tp x cp does not divide.
 * What each form costs (analytic model, cost_analytic.c):
 *   both   the layer's tokens, FLOPs, elementwise bytes, tensor-parallel collectives and stored
 *          activations split over the cp GPUs; weights whole on each
 *   ring   cp - 1 steps per layer, each passing a K/V block of 1/cp of the sequence to the next
 *          GPU: forward (cp-1)/cp of the layer's K and V bytes, backward twice that (K/V and
 *          their gradients); each step hidden behind that step's attention where shorter; and
 *          beside the ring, not hidden, the merges of its steps' partial results
 *          (analytic_cp_merge_bytes) at the byte rate
 *   a2a    four all-to-alls of 1/cp of the tokens (Q, K, V in, the output back) forward, four
 *          backward, not hidden */
dp_status cost_model_set_cp(cost_model *cm, int cp, int alltoall, dp_err *err);

/* A mixture of experts' layout: its experts over ep GPUs (which must divide each stage's tp x cp x
 * dp: the set-up's check, planner_check_request), routed as `routing` says (moe.h
 * moe_routing_init's, for cm's experts over ep ranks; NULL: uniform), the token exchange among ep
 * consecutive GPUs (cost_model_place_ep places them where the layout does). DP_ERR_INVALID naming
 * --ep for a dense model with ep > 1, an ep that does not divide the experts, or a cost kind that
 * does not price experts (a measured profile); cm is then unchanged. What a MoE layer costs: cost_analytic.c's header. */
dp_status cost_model_set_moe(cost_model *cm, int ep, const moe_routing *routing, dp_err *err);
/* The expert-parallel groups where layout places them (mesh.h: ep consecutive GPUs of a stage's
 * tp x cp x dp, tp fastest, a stage's GPUs side by side): across nodes when any group's GPUs are
 * on two (then each GPU with a NIC's bandwidth: comm_group_flat), else inside one; ep_nodes the
 * most nodes a group is on. Nothing for ep 1. The set-up calls it once the layout is known;
 * cost_model_set_moe assumes ep consecutive GPUs. */
void cost_model_place_ep(cost_model *cm, const mesh *layout);
/* How the token exchange crosses nodes (moe.h moe_dispatch). DP_ERR_INVALID naming --dispatcher
 * for DEDUP on a dense model; cm is then unchanged. */
dp_status cost_model_set_dispatch(cost_model *cm, moe_dispatch d, dp_err *err);
/* A MoE layer's fp16 parameters on one GPU of tp, ep and etp, MB: its attention and shared expert
 * over tp, norms and router over tp too (as a dense layer's are counted), E/ep experts, each split
 * over etp GPUs (0 for a dense model). */
double cost_moe_param_mb(const model_spec *m, int tp, int ep, int etp);
/* Of it, the routed experts' (E/ep of them, 1/etp of each), MB: the part replicated not over the
 * stage's data-parallel GPUs but over its expert-data-parallel ones (stage_cost.h expert_shard). */
double cost_moe_expert_mb(const model_spec *m, int ep, int etp);
/* Expert tensor parallelism for cm's experts (1: none): each expert's MLP split over etp GPUs, the
 * copies routed to an ep rank gathered over its etp GPUs before the experts and their outputs
 * reduce-scattered after (cost_analytic.c's MoE layer). Call after cost_model_set_moe.
 * DP_ERR_INVALID naming --etp for one below 1, one not dividing the expert width, or one on a
 * dense model; cm is then unchanged. */
dp_status cost_model_set_etp(cost_model *cm, int etp, dp_err *err);
/* The busiest ep rank's load over the mean when each GPU routes n copies (cm's table, 1 for a
 * dense model or ep 1), at most cm's capacity factor where it has one. */
double cost_moe_imbalance(const cost_model *cm, double n);
/* A capacity factor for cm's experts (0: dropless). DP_ERR_INVALID naming --capacity-factor for a
 * negative or non-finite one, or one on a dense model; cm is then unchanged. */
dp_status cost_model_set_capacity(cost_model *cm, double capacity, dp_err *err);
/* The expected share of the routed copies a micro-batch of `tokens` tokens (all of them, padding
 * included: they are routed too) drops at cm's capacity factor, on a GPU of its cp (0: cm's) x tp
 * group (moe.h moe_dropped_share); 0 when dropless or dense. */
double cost_moe_dropped_share(const cost_model *cm, double tokens, int cp);
/* The same for --cp auto: a group of cp GPUs whose micro-batches each run at their own degree
 * (cost_model.cp_auto); DP_ERR_INVALID also for a cost kind priced at one degree (a profile) and
 * the all-to-all form. */
dp_status cost_model_set_cp_auto(cost_model *cm, int cp, int alltoall, dp_err *err);

/* Sets the precision and the gradients' reduction dtype, after construction and before the first
 * query (caches key on cost_model.serial, not on the precision); on failure the model is unchanged.
 * DP_ERR_INVALID naming --precision for fp8 on a GPU with no FP8 peak (gpu_spec.fp8_tflops), and
 * for a cost kind that does not price fp8 (a profile measured what it measured: fp8 needs the
 * analytic model). */
dp_status cost_model_set_precision(cost_model *cm, train_precision p, grad_reduce g, dp_err *err);

/* The GEMM throughput a precision reaches over the bf16 one on the model's GPU: 1 for bf16 and
 * fp16; for fp8 the GPU's best measured FP8 GEMM over its best bf16 one (gpu_spec.fp8_matmul_eff
 * x fp8_tflops over matmul_eff x peak_tflops: H100 1.77). */
double cost_gemm_speedup(const cost_model *cm);

/* A GEMM's share of its large-K rate on GPU g at inner dimension k (bf16, or FP8 when fp8):
 * k / (k + k0) with the GPU's measured k0 (gpu_spec.gemm_k0, fp8_gemm_k0); 1 where the GPU has
 * none or k is not positive. The analytic model times each of a layer's GEMMs by it: forward at
 * its K, backward's data gradient at the forward's N and weight gradient at its tokens, relative
 * to the layer its efficiency was fitted on (cost_analytic.c). */
double cost_gemm_shape_eff(const gpu_spec *g, int fp8, double k);

/* Sets FlashAttention on or off, and the kernel that times it (NULL: the GPU's own). */
void cost_model_set_attention(cost_model *cm, int flash, const attn_kernel *kernel);

/* Sets the software stack (stack.h) after construction and before the first query: its
 * elementwise bytes, and the attention kernel (stack_attention_kernel) unless kernel names one
 * (an explicit --attention-kernel); flash as cost_model_set_attention takes it. DP_ERR_INVALID
 * naming --stack for a stack other than megatron-te on a kind that times what was measured
 * (cost_ops.stacks 0: a profile), the model then unchanged. */
dp_status cost_model_set_stack(cost_model *cm, software_stack s, int flash, const attn_kernel *kernel,
                               dp_err *err);

/* The next serial number (constructors call it). */
uint64_t cost_model_next_serial(void);

static inline dp_status cost_query(const cost_model *cm, cost_component c, const cost_shape *s,
                                   cost_layer *out, dp_err *err)
{
    *out = (cost_layer){0}; /* what a kind does not price (an exchange) is 0 */
    return cm->ops->query(cm, c, s, out, err);
}

/* A lower bound, per token, on a layer's (c: one layer of that component, or the LM head)
 * forward plus backward time, ms: for every shape s that cost_query answers,
 *     fwd_ms + bwd_ms >= cost_token_floor_ms(cm, c) * tokens(s),
 * tokens(s) = s->mbs * s->enc_len (a T5 decoder and its head: * s->dec_len), the padded tokens
 * of the component's own sequence, whatever the attention, the padding or the cp degree of the
 * shape (under cm's cp: the token share of one GPU). The part of the time that grows with the
 * tokens, at its best rate; what a search bounds a configuration's time by before planning it
 * (scheduler/stage_cost.h stage_model_token_floor). 0 (no bound): a kind without one (a measured
 * profile). */
static inline double cost_token_floor_ms(const cost_model *cm, cost_component c)
{
    return cm->ops->token_floor ? cm->ops->token_floor(cm, c) : 0;
}

/* Frees a cost model of any kind; NULL is a no-op. */
void cost_model_free(cost_model *cm);

const char *recompute_name(recompute_mode r);
int recompute_parse(const char *name, recompute_mode *r);

/* How a run chooses recompute (--recompute, a plan's header, a tune point): one mode for every
 * micro-batch (the first RECOMPUTE_COUNT values, equal to recompute_mode's), or a rule. */
typedef enum recompute_policy {
    RECOMPUTE_POLICY_DYNAMIC = RECOMPUTE_COUNT, /* per iteration, the first of none, selective,
                                                 * full whose plan fits (DynaPipe's rule) */
    RECOMPUTE_POLICY_MIXED,   /* dynamic's plan, then per micro-batch a lower mode where it fits */
    RECOMPUTE_POLICY_FASTEST, /* per iteration, the mode whose plan simulates fastest of those
                               * that fit (a plan's header says "dynamic": a mode per iteration) */
    RECOMPUTE_POLICY_END
} recompute_policy;

/* The one parser and printer of recompute's names: "none", "selective", "full", "dynamic",
 * "mixed", "fastest". recompute_policy_parse returns 0, or -1 for another name. */
int recompute_policy_parse(const char *name, int *policy);
const char *recompute_policy_name(int policy);
/* The mode of a policy that is one (RECOMPUTE_NONE for a rule: the first a rule tries). */
static inline recompute_mode recompute_policy_mode(int policy)
{
    return policy < RECOMPUTE_COUNT ? (recompute_mode)policy : RECOMPUTE_NONE;
}
const char *component_name(cost_component c);

/* ---- profile ------------------------------------------------------------------------------- */

/* Loads the grid for (tp, recompute) from a profile CSV. If a `*_params.csv` sits beside it, its
 * parameter sizes are used and checked against the model (a profile of another width is refused);
 * otherwise they are computed from the model. Fails when the file has no rows for (tp, recompute)
 * or lacks a component the model needs (a GPT profile for a T5 model). */
dp_status cost_profile_load(const char *path, const model_spec *m, const cluster_spec *hw, int tp,
                            recompute_mode rc, cost_model **out, dp_err *err);
/* The same for rows measured at context parallelism cp (the optional column "cp", 1 where the
 * file has none: dprun profile --cp C writes it), each row one rank's share of the (mbs, seqlen)
 * micro-batch, the ring's passes inside its times, and with or without sequence parallelism (sp:
 * where tp > 1, the optional column "sp" must say the same; a file without it was measured with
 * it, dprun's default: an SP-off profile does not price an SP-on plan; sp COST_SP_AS_MEASURED:
 * as the file's rows at (tp, cp, recompute) were measured, with SP where it has both; the
 * model's seq_parallel says which). The model then prices cp (cost_model.cp = cp) as measured:
 * cost_model_set_cp accepts that cp and no other. */
#define COST_SP_AS_MEASURED (-1)
dp_status cost_profile_load_at(const char *path, const model_spec *m, const cluster_spec *hw,
                               int tp, int cp, int sp, recompute_mode rc, cost_model **out,
                               dp_err *err);

/* Range of the loaded grid for a component: smallest and largest mbs and lengths. */
typedef struct cost_profile_range {
    int mbs_min, mbs_max, enc_min, enc_max, dec_min, dec_max;
} cost_profile_range;
dp_status cost_profile_range_of(const cost_model *cm, cost_component c, cost_profile_range *r);

/* One measured grid point of a profile (every metric present at that cell). */
typedef struct cost_point {
    cost_component comp;
    cost_shape shape;
    cost_layer cost;
} cost_point;

/* How well a profile's attention term is separated from the rest (cost_profile.c fits it over
 * the grid: the s-squared terms against the token-linear ones; varlen shapes and FlashAttention
 * memory move only that term). The error is the fit's relative error on held-out grid points
 * (every 4th, left out of a second fit), fwd_ms and bwd_ms, median and largest. */
typedef struct cost_attn_fit {
    int ok;                 /* every metric fitted (enough points) */
    int n_points;           /* grid points with fwd_ms */
    int n_held_out;         /* held-out points the errors are over (fwd and bwd) */
    double median_err_pct, max_err_pct;
} cost_attn_fit;

/* The fit of component c (encoder or decoder); fwd_ms_per_sq, when non-NULL, receives the
 * forward time per squared token of attention (enc^2; T5 decoder: dec^2), ms. UNSUPPORTED for
 * another kind of cost model, INFEASIBLE for a component the profile lacks. */
dp_status cost_profile_attn_fit(const cost_model *cm, cost_component c, cost_attn_fit *out,
                                double *fwd_ms_per_sq);

/* Every measured cell of the loaded grid with fwd_ms and bwd_ms (memory metrics NaN when the
 * profile lacks them), encoder and decoder layers only. *pts is malloc'd. */
dp_status cost_profile_points(const cost_model *cm, cost_point **pts, size_t *n, dp_err *err);

/* ---- analytic ------------------------------------------------------------------------------ */

/* The analytic model's free parameters (fitted by calibration). */
typedef struct analytic_params {
    double gemm_eff;     /* fraction of peak FLOP/s reached by the dense projections and MLP */
    double attn_eff;     /* fraction of peak reached by attention's s^2 work, softmax included */
    double mem_eff;      /* fraction of HBM bandwidth reached by weight and elementwise traffic */
    double fwd_floor_ms; /* per-layer forward time floor (kernel launches, framework) */
    double bwd_floor_ms; /* per-layer backward time floor */
    double bwd_ratio;    /* backward work over forward work (2 for plain GEMMs) */
} analytic_params;

#define ANALYTIC_N_PARAMS 6

/* Defaults: the fit to the A100 GPT-6.7B TP1 grid, rounded (docs/cost-models.md). */
void analytic_params_default(analytic_params *p);
/* The defaults carried to GPU g: the GEMM efficiency scaled by g's best measured GEMM over the
 * A100's (gpu_spec.matmul_eff / HW_A100_MATMUL_EFF); the rest as fitted. */
void analytic_params_for_gpu(const gpu_spec *g, analytic_params *p);

/* Where the defaults come from, for the user: the GPU (ANALYTIC_DEFAULT_GPU, a gpu_spec name)
 * and the data they were fitted to. On any other GPU they are an assumption. */
#define ANALYTIC_DEFAULT_GPU "a100-40gb"
const char *analytic_params_provenance(void);

/* Array view for fitting: params as double[ANALYTIC_N_PARAMS] in the order above. */
void analytic_params_to_array(const analytic_params *p, double *a);
void analytic_params_from_array(const double *a, analytic_params *p);
extern const char *const ANALYTIC_PARAM_NAMES[ANALYTIC_N_PARAMS];

/* The parameters an analytic cost model runs with; NULL for any other kind. */
const analytic_params *cost_analytic_params(const cost_model *cm);

dp_status cost_analytic_new(const model_spec *m, const cluster_spec *hw, int tp,
                            recompute_mode rc, const analytic_params *p, cost_model **out,
                            dp_err *err);

/* What a layer's backward reruns before its own under recompute mode rc and stack s, as shares of
 * its forward on one GPU of a TP group of tp: *dense of its GEMMs' FLOPs, *attn of its attention's.
 * none 0, 0; full 1, 1; selective 0, 1 (Megatron's: the attention core), or under a stack with
 * torchtitan's per-op policy (stack.h) every second GEMM's share of the FLOPs and 0 (a T5 model's
 * decoder layers counted at its encoder layer's share). The one rule of the cost model's time, the
 * ZB schedules' weight-gradient share (scheduler/plan.c) and the hardware FLOPs of HFU. */
void cost_rerun_shares(const model_spec *m, software_stack s, recompute_mode rc, int tp,
                       double *dense, double *attn);

/* Forward FLOPs of one layer (or the postprocess) on one GPU, split into the dense part and the
 * attention s^2 part. Exposed for tests and MFU. */
void analytic_flops(const model_spec *m, cost_component c, const cost_shape *s, int tp,
                    double *dense, double *attn);

/* Stored activation bytes of one layer under a recompute mode (Korthikanti et al. 2022, Table 2,
 * generalised to kv_channels*heads != hidden and ffn != 4*hidden), with sequence parallelism
 * (sp) or without. */
double analytic_stored_act_bytes(const model_spec *m, cost_component c, const cost_shape *s,
                                 int tp, recompute_mode rc, int sp);

/* Bytes a GPU sends around the context-parallel ring for one layer of shape s (ring form, GPT):
 * cp - 1 blocks of 1/cp of the layer's K and V (fp16, its tp share of the key/value heads)
 * forward; backward twice that (K/V and their gradients). */
double analytic_cp_ring_bytes(const model_spec *m, const cost_shape *s, int tp, int cp,
                              int backward);
/* Bytes the busiest GPU of the ring reads and writes merging the steps' partial results for one
 * layer of shape s (ring form; 0 at cp 1), as Transformer Engine's ring attention does them
 * (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py,
 * AttnFuncWithCPAndKVP2P): forward, each step's output is added into the output after the ring
 * (flash_attn_fwd_out_correction: out += out_step x exp(lse_step - lse), 16-bit: read both, write
 * one), backward each step's dq into dq and its dk, dv into the gradient passed on (add_). The
 * last rank's steps each cover all its queries (the others' later steps half), so it merges cp
 * blocks of its tokens / cp: 6 bytes x the sequence's tokens x (q heads x head size) / tp
 * forward, x (q + 2 kv heads) x head size / tp backward, whatever cp is. Memory-bound work
 * beside the ring, not hidden by it. */
double analytic_cp_merge_bytes(const model_spec *m, const cost_shape *s, int tp, int cp,
                               int backward);

/* Reads a fitted model (`dpsim calibrate -o fit.json`): {"kind": "analytic", "params": {...},
 * "hw": "...", "tp": T, "recompute": "none"}. The model comes from the caller. The fitted
 * parameters (efficiencies, floors, backward ratio: properties of the GPU and its kernels) are
 * applied at tensor parallelism tp and recompute mode rc, which the analytic formulas carry; the
 * file's "tp" and "recompute" say only what the fit was made at (tp < 1: the file's own). The
 * cluster is hw, the run's (--hw: its links price the tensor-parallel collectives, as they price
 * the simulator's), which must have the GPU the fit names (else DP_ERR_INVALID); NULL: the file's
 * "hw". Efficiencies outside (0, 1] are refused naming the field. */
dp_status cost_fit_load(const char *path, const model_spec *m, const cluster_spec *hw, int tp,
                        int rc, cost_model **out, dp_err *err);
dp_status cost_fit_parse(const char *text, const char *name, const model_spec *m,
                         const cluster_spec *hw, int tp, int rc, cost_model **out, dp_err *err);

#endif /* COST_H */
