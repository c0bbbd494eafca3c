/* Software stacks (stack.h): their attention kernel and their elementwise byte counts. */
#include <stdio.h>
#include <string.h>

#include "stack.h"

typedef struct stack_row {
    const char *name, *summary;
    const char *const *kernels; /* the kernels it calls, by GPU architecture; NULL: the GPU's */
    int fused;                  /* 1: elementwise ops fused (FUSED_EW) */
    stack_elementwise ew;
    selective_policy selective; /* what --recompute selective reruns */
} stack_row;

/* PyTorch's scaled_dot_product_attention runs its flash backend, FlashAttention-2 (PyTorch 2.2
 * release notes, "FlashAttention-2 in SDPA"), on Ampere and Hopper. */
static const char *const SDPA_KERNELS[] = {"fa2-a100", "fa2-h100", NULL};

/* Fused (Transformer Engine's kernels; Inductor's fusions): each op one read and one write of
 * what it works on, bf16 (stack.h). */
#define FUSED_EW {4, 4, 4, 4, 6, 4, 0, 0, 12}

/* Eager, counted from torchtitan as its performance tables ran it (commit 9dec370, 2024-12-26:
 * torchtitan/models/norms.py and torchtitan/models/llama/model.py), each op reading its inputs
 * and writing its output, bf16 2 B and fp32 4 B an element:
 *   RMSNorm: _norm(x.float()).type_as(x) * weight with _norm = x * rsqrt(x.pow(2).mean(-1) + eps):
 *     .float() 2 + 4, pow 4 + 4, mean 4, x * rsqrt 4 + 4, type_as 4 + 2, * weight 2 + 2     = 36
 *   LayerNorm: nn.LayerNorm, one native kernel, 2 + 2                                        = 4
 *   residual add h = x + y: 2 + 2 + 2                                                       = 6
 *   apply_rotary_emb on q and k: .float() 2 + 4, complex product 4 + 4, type_as 4 + 2      = 20
 *   SwiGLU w2(silu(w1 x) * w3 x): silu 2 + 2, product 2 + 2 + 2                             = 10
 *   GeLU: one kernel, 2 + 2                                                                 = 4
 *   repeat_kv: expand then reshape copies K and V to the query heads: 2 B read or written
 *   the attention's output, output.transpose(1, 2).contiguous(): 2 + 2                      = 4
 *   cross_entropy(pred.float(), labels) over the vocabulary: forward .float() 2 + 4 and
 *     log_softmax 4 + 4; backward nll's dense gradient 4, log_softmax's 4 + 4 + 4 and
 *     .float()'s 4 + 2                                                                      = 36 */
#define EAGER_EW {36, 4, 6, 20, 10, 4, 2, 4, 36}

static const stack_row STACKS[STACK_COUNT] = {
    [STACK_MEGATRON_TE] = {"megatron-te",
                           "Megatron-Core/NeMo with Transformer Engine: fused norms and "
                           "activations, the GPU's default attention kernel (cuDNN on Hopper)",
                           NULL, 1, FUSED_EW, SELECTIVE_ATTENTION_CORE},
    [STACK_TORCH_EAGER] = {"torch-eager",
                           "PyTorch without torch.compile (torchtitan's FSDP rows): SDPA's "
                           "FlashAttention-2, norms, rotary, SwiGLU and loss as separate ops; "
                           "selective recompute reruns every second GEMM and the elementwise ops",
                           SDPA_KERNELS, 0, EAGER_EW, SELECTIVE_ALTERNATE_MM},
    [STACK_TORCH_COMPILE] = {"torch-compile",
                             "PyTorch with torch.compile (torchtitan's compiled rows): SDPA's "
                             "FlashAttention-2, elementwise ops fused by Inductor; selective "
                             "recompute as torch-eager's",
                             SDPA_KERNELS, 1, FUSED_EW, SELECTIVE_ALTERNATE_MM},
};

const char *stack_name(software_stack s)
{
    return (unsigned)s < STACK_COUNT ? STACKS[s].name : "?";
}

const char *stack_summary(software_stack s)
{
    return (unsigned)s < STACK_COUNT ? STACKS[s].summary : "?";
}

int stack_fused(software_stack s)
{
    return (unsigned)s < STACK_COUNT ? STACKS[s].fused : 1;
}

int stack_parse(const char *name, software_stack *s)
{
    for (int i = 0; name && i < STACK_COUNT; i++)
        if (strcmp(name, STACKS[i].name) == 0) {
            *s = (software_stack)i;
            return 0;
        }
    return -1;
}

const char *stack_names(void)
{
    static char names[128];
    if (!names[0])
        for (int i = 0; i < STACK_COUNT; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     STACKS[i].name);
    return names;
}

const attn_kernel *stack_attention_kernel(software_stack s, const gpu_spec *gpu, int *fallback)
{
    if (fallback) *fallback = 0;
    const char *const *names = (unsigned)s < STACK_COUNT ? STACKS[s].kernels : NULL;
    if (!names || !gpu->attn) return gpu->attn; /* no fused kernel on it: none of a stack's */
    /* the architecture is the GPU default kernel's: a user's GPU (a cluster JSON naming
     * cudnn-h100) is a Hopper like a preset's */
    for (int i = 0; names[i]; i++) {
        const attn_kernel *k = attn_kernel_find(names[i]);
        if (k && strcmp(k->runs_on, gpu->attn->runs_on) == 0) return k;
    }
    if (fallback) *fallback = 1;
    return gpu->attn;
}

const stack_elementwise *stack_elementwise_of(software_stack s)
{
    return &STACKS[(unsigned)s < STACK_COUNT ? s : STACK_MEGATRON_TE].ew;
}

selective_policy stack_selective_policy(software_stack s)
{
    return STACKS[(unsigned)s < STACK_COUNT ? s : STACK_MEGATRON_TE].selective;
}
