/*
 * layout.h — what one transformer layer of the runtime stores, where and in what element type:
 * the one rule that the CPU layer (layer.c), the GPU layer (cuda/), the executors (exec.c,
 * exec_gpu.c), dprun profile and the host fake of the GPU (tests/unit/fake_cuda.c) all read.
 *
 * Element types (rt_dtype):
 *   fp64  every tensor is a double: the exact-check path (the CPU layer; the GPU layer's fp64
 *         mode, which agrees with it to rounding);
 *   bf16  training precision (the GPU layer's default): activations, their gradients and the
 *         wire in bf16 (2 bytes, as the plan's act_dtype counts them); layer-norm statistics and
 *         the attention's softmax statistics in fp32; parameters as fp32 master weights with a
 *         bf16 working copy that the GEMMs read (an optimizer would refresh it after its step);
 *         gradients accumulated in fp32.
 *
 * With SwiGLU (shape.glu) the MLP's first projection, its bias and the tensors u and d_u are twice
 * as wide (gate and up side by side); g and W2 keep the ffn width.
 *
 * Parameters of a layer are `count` elements (rt_layer_params_layout: element offsets, the same
 * in every type). A parameter block at a type (rt_param_block_bytes) is
 *   fp64  [count doubles]
 *   bf16  [count fp32 masters | pad to RT_ALIGN | count bf16 copies]   (rt_param_copy_offset)
 * and its gradient block (rt_grad_block_bytes) is count doubles (fp64) or count floats (bf16).
 *
 * Saved activations of one layer's forward on a micro-batch (B rows of S tokens; a T5 decoder
 * layer also reads an encoder output of Se tokens per row) are RT_A_COUNT tensors in one block,
 * each at a byte offset (rt_layer_acts_layout). Under context parallelism (shape.cp = c > 1) a
 * rank's layer holds B*S/c of the tokens, its probabilities are its queries' against the whole
 * sequence (B * heads * S/c * S), and RT_A_KVG keeps the gathered (rotated) keys and values of
 * all B*S tokens, rows of 2 x kv_heads x kv: [k | v] (0 elements without cp). Their sizes depend on the type:
 *   - activation tensors (x, qkv, u, ...): elements of the type (8 or 2 bytes);
 *   - layer-norm mean and rstd per token: 8 or 4 bytes (RMSNorm: no mean, 0 elements);
 *   - the attention's saved state RT_A_P (and RT_A_PC): fp64 keeps the softmax probabilities,
 *     B * heads * S * Sk doubles (what layer.c's backward reads); bf16 keeps only the softmax's
 *     log-sum-exp per query, B * heads * S floats, as fused (flash) attention does, whose
 *     backward recomputes the probabilities: no S^2 term is stored.
 * fp64 tensors follow each other without padding (the CPU layer's block); bf16 tensors start at
 * multiples of RT_ALIGN bytes (what cuBLASLt and cuDNN want of their operands).
 * The tensors RT_A_D_* are the input-gradient pass's results kept for the weight-gradient pass
 * (ZB-H1's W); the others are what the forward saves (rt_act_is_forward).
 *
 * Everything here is host arithmetic, without a device; nothing fails.
 */
#ifndef RT_LAYOUT_H
#define RT_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum rt_dtype { RT_FP64, RT_BF16 } rt_dtype;

#define RT_ALIGN 256 /* bytes: where each bf16 tensor of a block starts */

const char *rt_dtype_name(rt_dtype dt); /* "fp64", "bf16" */
/* 0 and *dt set for "fp64" or "bf16"; -1 otherwise. */
int rt_dtype_parse(const char *name, rt_dtype *dt);
size_t rt_dtype_act_bytes(rt_dtype dt);  /* activations, their gradients, the wire: 8 | 2 */
size_t rt_dtype_stat_bytes(rt_dtype dt); /* statistics, master weights, gradients, logits: 8 | 4 */

/* bf16 <-> double on the host: round to nearest even (NaN stays NaN), and exact widening. */
uint16_t rt_bf16_from_double(double v);
double rt_bf16_to_double(uint16_t b);
/* n elements of type dt at dst from doubles, and back (fp64: a copy). */
void rt_to_dtype(void *dst, const double *src, size_t n, rt_dtype dt);
void rt_from_dtype(double *dst, const void *src, size_t n, rt_dtype dt);
/* Statistics-type elements (8 or 4 bytes) from and to doubles: gradients, master weights. */
void rt_to_stat(void *dst, const double *src, size_t n, rt_dtype dt);
void rt_from_stat(double *dst, const void *src, size_t n, rt_dtype dt);

/* The layer's shape (runtime/layer.h's, here so that the layout needs nothing else). */
typedef struct rt_layer_shape {
    int hidden, heads, kv, ffn; /* kv: a head's width (kv_channels) */
    int causal; /* masked self-attention (GPT, T5 decoder) or not (T5 encoder) */
    int cross;  /* a T5 decoder layer: cross-attention to the encoder output */
    int glu;    /* SwiGLU MLP (LLaMA): W1 (hidden, 2 ffn) holds [gate | up], g = silu(gate) o up;
                 * 0: GELU, W1 (hidden, ffn) */
    int kv_heads; /* key/value heads, grouped-query attention (a divisor of heads); 0: heads */
    int rmsnorm;  /* RMSNorm (LLaMA): a scale, no bias, no mean saved; 0: layer norm */
    int no_bias;  /* the projections have no biases (LLaMA); 0: each has one */
    double rope_base; /* rotary position embeddings on the self-attention's queries and keys
                       * (LLaMA): their base (models/model.h model_rope_base); 0: none */
    double norm_eps;  /* the norms' epsilon (models/model.h model_norm_eps); 0: RT_NORM_EPS */
    int cp;           /* context parallelism (runtime/layer.h rt_cp): the layer holds 1/cp of a
                       * micro-batch's tokens and attends over the whole; 0 or 1: none */
    int experts;      /* a mixture of experts' layer (layer.h "Experts"): its MLP is `experts`
                       * gated experts of width ffn and a router; 0: the dense MLP */
    int topk;         /* the experts each token runs (experts > 0) */
    int ep;           /* expert parallelism: the experts are split over ep tensor-parallel ranks,
                       * each holding experts / ep of them (rt_layer_local_experts); 0 or 1: none */
} rt_layer_shape;

/* The experts a rank's layer holds: experts / ep (0 for a dense layer). */
static inline int rt_layer_local_experts(const rt_layer_shape *s)
{
    return s->experts > 0 ? s->experts / (s->ep > 1 ? s->ep : 1) : 0;
}

/* The norms' epsilon where a shape does not say (every backend's): Megatron's and LLaMA-2's. */
#define RT_NORM_EPS 1e-5
static inline double rt_layer_norm_eps(const rt_layer_shape *s)
{
    return s->norm_eps > 0 ? s->norm_eps : RT_NORM_EPS;
}

/* Grouped-query attention: the keys and values have kv_heads heads, each shared by heads /
 * kv_heads consecutive query heads (query head h reads key/value head
 * rt_kv_head(h, heads, kv_heads), as Megatron's query groups and Hugging Face's repeat_kv). The fused projection's row is
 * [q: heads x kv | k: kv_heads x kv | v: kv_heads x kv], and a cross layer's KV projection's
 * [k | v] over kv_heads too, as models/model.c counts them. */
static inline int rt_layer_kv_heads(const rt_layer_shape *s)
{
    return s->kv_heads > 0 ? s->kv_heads : s->heads;
}
static inline int rt_kv_head(int h, int heads, int kv_heads) { return h / (heads / kv_heads); }
/* Attention's GEMMs batched over heads (the GPU layers' GEMM paths): with a query heads on g
 * key/value heads, r = a / g, query head h = group * r + i reads key/value head `group`. The
 * GEMMs run once per i < r, batched over the g groups: an operand on the query heads (q, o, the
 * scores) starts at its head i and steps r heads per batch entry; one on the key/value heads (k,
 * v) starts at head 0 and steps one head (head_elems: the elements from one head to the next).
 * Without grouping (r = 1) that is one GEMM over the a heads. Each batch entry writes its own
 * output, so a key/value gradient's r contributions add up one GEMM after another. */
enum { RT_HEADS_KV_A = 1, RT_HEADS_KV_B = 2, RT_HEADS_KV_C = 4 }; /* operands on key/value heads */
typedef struct rt_head_step {
    long long off, stride; /* elements: the first batch entry's head, and from entry to entry */
} rt_head_step;
static inline rt_head_step rt_head_step_of(int i, int r, long long head_elems, int kv_side)
{
    rt_head_step s;
    s.off = kv_side ? 0 : i * head_elems;
    s.stride = kv_side ? head_elems : r * head_elems;
    return s;
}

static inline int rt_layer_q_width(const rt_layer_shape *s) { return s->heads * s->kv; }
static inline int rt_layer_kv_width(const rt_layer_shape *s) { return rt_layer_kv_heads(s) * s->kv; }
static inline int rt_layer_qkv_width(const rt_layer_shape *s)
{
    return rt_layer_q_width(s) + 2 * rt_layer_kv_width(s);
}

/* The MLP's first projection width: 2 ffn with SwiGLU (every expert is gated), else ffn. */
static inline int rt_layer_ffn_in(const rt_layer_shape *s)
{
    return s->glu || s->experts > 0 ? 2 * s->ffn : s->ffn;
}

/* ---- parameters ------------------------------------------------------------------------------ */

enum {
    RT_P_LN1_G, RT_P_LN1_B, RT_P_WQKV, RT_P_BQKV, RT_P_WO, RT_P_BO, RT_P_LN2_G, RT_P_LN2_B,
    RT_P_W1, RT_P_B1, RT_P_W2, RT_P_B2,
    RT_P_WR, /* a MoE layer's router (hidden, experts); its W1 and W2 are then the rank's experts'
              * stacked, (experts, hidden, 2 ffn) and (experts, ffn, hidden), without biases */
    /* cross-attention (T5 decoder layers) */
    RT_P_LNC_G, RT_P_LNC_B, RT_P_WQC, RT_P_BQC, RT_P_WKVC, RT_P_BKVC, RT_P_WOC, RT_P_BOC,
    RT_P_COUNT
};

/* Element offsets and lengths of the layer's parameters (a weight W (in, out) row-major);
 * returns how many the shape has (13, or 21 with cross-attention); *count gets the total. The
 * router has length 0 in a dense layer. The
 * norms' biases have length 0 under RMSNorm, the projections' biases under no_bias (their offset
 * is where the next tensor starts: nothing reads them). */
int rt_layer_params_layout(const rt_layer_shape *s, size_t off[RT_P_COUNT], size_t len[RT_P_COUNT],
                           size_t *count);
/* 1 for a projection's bias (RT_P_BQKV, _BO, _B1, _B2, _BQC, _BKVC, _BOC), for a norm's bias
 * (RT_P_LN1_B, _LN2_B, _LNC_B); 0 otherwise. */
int rt_param_is_bias(int id);
int rt_param_is_norm_bias(int id);
/* A parameter's short name ("wqkv", "ln1_g"; Megatron's tensor names shortened), for messages;
 * "?" out of range. */
const char *rt_param_name(int id);
/* Bytes of one parameter as the layer reads it: the fp64 block's double, or the bf16 copy's 2
 * (what ZeRO's gathers move). */
static inline size_t rt_param_read_bytes(rt_dtype dt) { return rt_dtype_act_bytes(dt); }

/* Bytes of a parameter block of `count` elements at dt, the byte offset of its bf16 copy
 * (bf16; 0 for fp64), and the bytes of its gradient block. */
size_t rt_param_block_bytes(size_t count, rt_dtype dt);
size_t rt_param_copy_offset(size_t count, rt_dtype dt);
size_t rt_grad_block_bytes(size_t count, rt_dtype dt);
/* Fills a parameter block (rt_param_block_bytes) from count host doubles: fp64 copies them;
 * bf16 writes the fp32 masters and their bf16 copies. */
void rt_param_block_pack(void *dst, const double *src, size_t count, rt_dtype dt);

/* ---- tensor parallelism ---------------------------------------------------------------------- */

/* Megatron's split of a layer over t tensor-parallel ranks: each holds heads / t query heads,
 * kv_heads / t key/value heads (query head h and the key/value head it reads stay on one rank)
 * and ffn / t MLP columns; the hidden width is whole. rt_layer_shape_tp is what one rank's layer
 * runs (t divides heads, kv_heads and ffn: the runtime's layout check refuses other plans); of a
 * MoE layer (s->experts), the experts whole, split over ep of the t ranks (its ep; 1: each rank
 * holds all of them). s is a whole layer's (its ep 0 or 1). */
rt_layer_shape rt_layer_shape_tp(const rt_layer_shape *s, int t, int ep);

/* How a parameter splits over the group:
 *   RT_TP_COLUMNS  column-parallel (the fused QKV projection and its bias, W1 and b1, a cross
 *                  layer's Wqc, Wkvc and their biases): each of its column segments (q | k | v;
 *                  SwiGLU's gate | up; k | v) is cut into t equal parts, rank r holding part r of
 *                  each, side by side;
 *   RT_TP_ROWS     row-parallel (Wo, W2, Woc): cut along its input rows;
 *   RT_TP_WHOLE    the norms and the row-parallel projections' biases, whole on every rank (a
 *                  row-parallel bias is added once, after the ranks' partial sums meet). */
enum { RT_TP_WHOLE, RT_TP_COLUMNS, RT_TP_ROWS, RT_TP_EXPERTS };
int rt_param_tp_split(int id);
/* The same on a layer of shape s: a MoE layer's W1 and W2 are RT_TP_EXPERTS, each rank holding
 * whole the experts of its expert-parallel rank (rt_layer_expert_rank: experts j E/ep .. (j+1)
 * E/ep - 1 of rank j), its router whole. */
int rt_param_split(const rt_layer_shape *s, int id);

/* Expert parallelism folded over a tensor-parallel group of t ranks (the planner folds ep over a
 * stage's tp x cp x dp GPUs the same way, tp fastest: models/cost.h cost_model_place_ep): tp rank
 * r is rank r % ep of the expert-parallel group of the ep consecutive ranks holding it, and those
 * groups (t / ep of them) each route their share of the tokens (rt_layer_expert_group: r / ep). */
static inline int rt_layer_expert_rank(const rt_layer_shape *s, int tp_rank)
{
    return s->ep > 1 ? tp_rank % s->ep : 0;
}
static inline int rt_layer_expert_group(const rt_layer_shape *s, int tp_rank)
{
    return s->ep > 1 ? tp_rank / s->ep : tp_rank;
}

/* Which ranks' gradients of a parameter are partial sums that the executor adds up (all-reduces)
 * before using them, on a tp group of t ranks with sequence parallelism sp:
 *   RT_GRAD_OWN           none: a rank's gradient is its own (t 1, a split parameter, a
 *                         row-parallel bias, the sum over the gathered tokens);
 *   RT_GRAD_SUM_TP        the tp group: the norms' scales and biases under SP (each rank sums over
 *                         its own tokens), a MoE layer's router (each rank's over the copies its
 *                         experts ran);
 *   RT_GRAD_SUM_EXPERTS   the t / ep ranks holding the same experts (rt_layer_expert_rank), each of
 *                         which ran them on its group's tokens: a MoE layer's W1 and W2 where
 *                         t > ep. */
enum { RT_GRAD_OWN, RT_GRAD_SUM_TP, RT_GRAD_SUM_EXPERTS };
int rt_param_grad_group(const rt_layer_shape *s, int id, int t, int sp);
/* Rank r's share (laid out as rt_layer_shape_tp(s, t, ep) lays parameters out) of the parameters
 * src of a whole layer of shape s, into dst. Element-wise copies; nothing fails. */
void rt_layer_params_shard(const rt_layer_shape *s, const double *src, int t, int ep, int r,
                           double *dst);

/* ---- saved activations ----------------------------------------------------------------------- */

enum {
    RT_A_X, RT_A_H1, RT_A_MEAN1, RT_A_RSTD1, RT_A_QKV, RT_A_P, RT_A_CTX, RT_A_X2, RT_A_H2,
    RT_A_MEAN2, RT_A_RSTD2, RT_A_U, RT_A_G, RT_A_D_QKV, RT_A_D_O, RT_A_D_U, RT_A_D_Y,
    RT_A_KVG, /* context parallelism: the whole micro-batch's rotated projections, gathered */
    /* a MoE layer (layer.h "Experts"; 0 elements in a dense one), per token of the rank's group
     * share: its experts and gates (route, 2 topk doubles: k expert indices then k gates) and the
     * router's logit gradients (d_logits, experts); per routed copy its experts run here: the
     * expert's output before the gate (oe, hidden) and the gated output's gradient (d_oe). RT_A_U,
     * _G and _D_U then hold a row per copy. */
    RT_A_ROUTE, RT_A_OE, RT_A_D_OE, RT_A_D_LOGITS,
    /* cross-attention (T5 decoder layers) */
    RT_A_XC, RT_A_HC, RT_A_MEANC, RT_A_RSTDC, RT_A_QC, RT_A_KVC, RT_A_PC, RT_A_CTXC, RT_A_D_QC,
    RT_A_D_KVC, RT_A_D_OC,
    RT_A_COUNT
};

typedef struct rt_acts_layout {
    int count;                  /* tensors the shape has (22, or 33 with cross-attention) */
    size_t off[RT_A_COUNT];     /* byte offset in the block */
    size_t bytes[RT_A_COUNT];   /* bytes of the tensor (0 past count) */
    size_t elems[RT_A_COUNT];   /* its elements */
    size_t total;               /* bytes of the block */
} rt_acts_layout;

void rt_layer_acts_layout(const rt_layer_shape *s, int B, int S, int Se, rt_dtype dt,
                          rt_acts_layout *out);
size_t rt_layer_acts_bytes(const rt_layer_shape *s, int B, int S, int Se, rt_dtype dt);
/* 1 for what the forward saves for the backward, 0 for the RT_A_D_* tensors kept for W. */
int rt_act_is_forward(int id);
/* Bytes of the tensors the forward saves (rt_act_is_forward) in a layout. */
size_t rt_acts_forward_bytes(const rt_acts_layout *l);

#ifdef __cplusplus
}
#endif

#endif /* RT_LAYOUT_H */
