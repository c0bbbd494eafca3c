/* The software stack that trains the model (--stack): which fused attention kernel it calls on a
 * GPU and whether its elementwise work (norms, residual adds, rotary positions, the gated MLP's
 * activation, the loss over the vocabulary) runs fused or as eager PyTorch ops, one kernel an op.
 * The GEMMs, collectives and memory model are the same under every stack; what a selective
 * recompute reruns is not.
 *
 *   megatron-te    Megatron-Core / NeMo with Transformer Engine (the default): fused norms and
 *                  activations, cuDNN's fused attention on Hopper (TE's default there), the GPU's
 *                  default kernel elsewhere; what the cost model has always priced.
 *   torch-eager    PyTorch without torch.compile, as torchtitan's Llama runs it (its "FSDP" rows):
 *                  attention through scaled_dot_product_attention, whose flash backend is
 *                  FlashAttention-2; RMSNorm, rotary embedding, repeat_kv, SwiGLU, the
 *                  attention output's copy and the fp32 cross-entropy as the separate ops its
 *                  model code writes (stack_elementwise); `--recompute selective` as its per-op
 *                  policy (stack_selective_policy).
 *   torch-compile  the same model under torch.compile (torchtitan's "+ torch.compile" rows):
 *                  Inductor fuses the elementwise ops, priced as megatron-te's; attention is still
 *                  SDPA's FlashAttention-2, and selective recompute torchtitan's per-op policy.
 *
 * A stack whose kernel is not measured on a GPU (torch's FlashAttention-2 on a B200) falls back
 * to the GPU's default kernel, and stack_attention_kernel says so. Nothing here allocates. */
#ifndef DPSIM_MODELS_STACK_H
#define DPSIM_MODELS_STACK_H

#include "hw.h"

typedef enum software_stack {
    STACK_MEGATRON_TE, /* the default: 0 */
    STACK_TORCH_EAGER,
    STACK_TORCH_COMPILE,
    STACK_COUNT
} software_stack;

const char *stack_name(software_stack s);    /* "megatron-te", …; "?" out of range */
const char *stack_summary(software_stack s); /* one line: what it runs, for --help and docs */
int stack_fused(software_stack s);           /* 1: its elementwise ops run fused */
/* 0 and *s set, or -1 for a name that is none of them (s untouched). */
int stack_parse(const char *name, software_stack *s);
/* The names, comma-separated, for messages ("megatron-te, torch-eager, torch-compile"): a static
 * string built from the table on the first call. */
const char *stack_names(void);

/* The fused attention kernel stack s runs on the GPU gpu (not NULL): the kernel it calls where
 * one is measured on the architecture of the GPU's default kernel (gpu->attn; kernels of one
 * architecture share their runs_on list, hw.h), so that a cluster JSON's own H100 naming
 * cudnn-h100 takes FlashAttention-2's H100 table; else the GPU's default (maybe NULL: none
 * measured, attention unfused). *fallback (may be NULL) is set to 1 in that second case when the
 * stack names kernels of its own and the GPU has a default, 0 otherwise. megatron-te always takes
 * the GPU's default. */
const attn_kernel *stack_attention_kernel(software_stack s, const gpu_spec *gpu, int *fallback);

/* What a layer's elementwise work moves through HBM per token under a stack, in bytes per element
 * of the tensor each op works on. The cost model counts these as the forward's bytes and charges
 * the backward its fitted bwd_ratio times them, as it does every byte a layer moves
 * (cost_analytic.c); the loss's figures are forward and backward together and so are counted
 * high by that convention under every stack alike (the fused 12 as the A100 fit was made with).
 * Fused stacks: each norm reads and writes the hidden state once (4 B), each residual add
 * likewise (4 B), the rotary embedding reads and writes q and k (4 B), SwiGLU reads gate and up
 * and writes one (6 B per ffn element; GeLU 4), no copies of K and V or of the attention's
 * output, and the loss's fp32 logits are written, read and their gradient written (12 B per
 * vocabulary entry). Eager: as the ops are written (stack.c counts each). */
typedef struct stack_elementwise {
    double rmsnorm;   /* B per hidden element, one RMSNorm */
    double layernorm; /* B per hidden element, one LayerNorm (with a bias) */
    double residual;  /* B per hidden element, one residual add */
    double rope;      /* B per element of the queries and keys */
    double glu;       /* B per ffn element, a gated MLP's activation and product */
    double gelu;      /* B per ffn element, an ungated MLP's activation */
    double kv_repeat; /* B per element moved copying K and V to the query heads where the
                       * key/value heads are fewer (grouped-query attention): each read at its
                       * width and written at the queries' */
    double attn_out;  /* B per element of the attention's output (the query width), copied back
                       * from the heads' layout to the tokens' */
    double loss;      /* B per vocabulary entry per token: the loss, forward and backward */
} stack_elementwise;

/* The row of stack s: a pointer into a static table, never NULL (out of range: megatron-te's). */
const stack_elementwise *stack_elementwise_of(software_stack s);

/* What `--recompute selective` reruns in a layer's backward under a stack (the cost model times it,
 * cost_analytic.c; what is stored is counted as Megatron's under both, which keeps at least what
 * the per-op policy keeps, so "feasible => fits" holds):
 *   SELECTIVE_ATTENTION_CORE  Megatron's selective recompute (Korthikanti et al. 2022): the
 *                             attention core, with a fused kernel its forward
 *   SELECTIVE_ALTERNATE_MM    torchtitan's per-op policy (selective_ac_option "op", its default;
 *                             torchtitan/parallelisms/parallelize_llama.py at 9dec370): every op's
 *                             output is recomputed but attention's and every odd-numbered matrix
 *                             multiply's of the layer, counted in the order the model code calls
 *                             them (q, k, v, the output projection, then the MLP's gate, up and
 *                             down: k, the output projection and up are recomputed), so the
 *                             backward reruns those GEMMs and every elementwise op, not
 *                             attention */
typedef enum selective_policy {
    SELECTIVE_ATTENTION_CORE,
    SELECTIVE_ALTERNATE_MM
} selective_policy;
selective_policy stack_selective_policy(software_stack s);

#endif
