/*
 * The analytic cost model: FLOPs and bytes against the GPU's peak rates.
 *
 * Notation (per layer, on one GPU of a TP group of t): b micro-batch size, s sequence length
 * (T5 decoder: s_d, encoder output s_e), h hidden, a heads, hk = a * kv_channels, hkv = the
 * key/value heads * kv_channels (= hk without grouped-query attention), f ffn width, m = 2 MLP
 * matrices (3 when gated), V vocabulary. All FLOPs count a multiply-add as 2.
 *
 * Forward FLOPs (Narayanan et al. 2021, "Efficient large-scale language model training on GPU
 * clusters", eq. 3, generalised to hk != h and f != 4h):
 *   GPT / T5 encoder layer   dense = 2bs(h*hk + 2h*hkv + hk*h + m*h*f)  attn = 4*b*s^2*hk
 *   T5 decoder layer         dense = 2b*s_d(h*hk + 2h*hkv + hk*h) + 2b*s_d(2h*hk) + 2b*s_e(2h*hkv)
 *                                    + 2b*s_d*m*h*f                      attn = 4b*hk(s_d^2 + s_d*s_e)
 *   postprocess (LM head)    dense = 2*b*s*h*V  (s = s_d for T5)         attn = 0
 * each divided by t. Causal masking is not subtracted from these model FLOPs: unfused attention
 * (as in the profiles) computes the full s^2 matrix. With varlen attention (cost.h) b*s^2 is the
 * sum of the samples' own s_i^2 (T5: s_d^2 and s_d*s_e likewise), so a packed row's samples do not
 * see each other.
 *
 * Bytes moved through HBM: the layer's fp16 weights once, plus its elementwise traffic at the
 * software stack's bytes per element (models/stack.h, token_bytes): under a fused stack (the
 * default) 8 passes over (b, s, h) fp16 activations (the two norms' reads and writes, the two
 * residual adds with their dropouts), 2 passes over (b, s, f / t) for an ungated MLP's activation
 * (GeLU: read, write), 3 for a gated one (SwiGLU reads the gate's and the up projection's outputs
 * and writes one), and with rotary positions 2 over the queries and keys (b, s, (hk + hkv) / t;
 * latent attention: the heads' rotary parts and the shared rotary key), which are read and
 * rotated in place; the postprocess adds fp32 softmax over (b, s, V / t). An eager stack moves
 * what its separate ops read and write (stack.c counts them). The GPT-2-kind layer the A100
 * profile measured (layer norms, GeLU, dropout) is the fused 8 + 2 passes the fit was made with.
 *
 * Tensor parallelism (t > 1) adds Megatron's all-reduces of the (b, s, h) fp16 activations, two
 * per layer forward (after attention and after the MLP; three in a T5 decoder layer) and as many
 * in the backward (twice with full recompute, which reruns the forward), each an NCCL all-reduce
 * over the t GPUs (comm.h: NVLink's achieved bus bandwidth unless t exceeds a node). With
 * COST_OVERLAP_TP they hide behind the layer's GEMMs: only what exceeds the GEMM time is added.
 * With sequence parallelism each all-reduce is an all-gather before and a reduce-scatter after
 * the block (the same bytes), and the elementwise passes over (b, s, h) are split over the t GPUs.
 *
 * Time (each term against its ceiling, then a soft floor for launch-bound small shapes):
 *   work_fwd = dense / (P * gemm_eff) + t_attn_fwd + bytes / (BW * mem_eff)
 *   fwd_ms   = smoothmax(fwd_floor, work_fwd)           smoothmax(x, y) = (x^4 + y^4)^(1/4)
 *   bwd_ms   = smoothmax(bwd_floor, bwd_ratio * (work_fwd - t_attn_fwd) + t_attn_bwd + recompute)
 * where recompute is work_fwd (full) or t_attn_fwd (selective; under a torch stack torchtitan's
 * per-op policy instead: alternate_share of the GEMMs, their weights read again, and the tokens'
 * bytes, stack.h). The floor is a smooth maximum, not a sum: the profiles show a flat ~1.5 ms per
 * layer at small shapes and linear growth beyond, with no floor added on top. Attention:
 *   unfused      t_attn_fwd = attn / (P * attn_eff), t_attn_bwd = bwd_ratio * t_attn_fwd
 *                (the full s^2 matrix, softmax and dropout through HBM: the fit to the A100
 *                profile, measured without FlashAttention)
 *   FlashAttention (cost_model.flash_attn with a kernel, cost_model.attn)
 *                t_attn_fwd = attn_fwd / kernel_fwd(len, head_dim),
 *                t_attn_bwd = 2.5 * attn_fwd / kernel_bwd(len, head_dim)
 *                where attn_fwd is attn halved for causal self-attention (GPT, T5's decoder; a
 *                T5 encoder and cross attention are not causal), len the attention length
 *                (varlen: sum s_i^2 / rows' tokens, the samples' length weighted by their work),
 *                and kernel_* the kernel's measured TFLOP/s (hw.h attn_kernel: FlashAttention's
 *                own benchmark tables, which count FLOPs this way; the backward reruns the
 *                forward's QK^T, hence 2.5).
 *
 * Activation memory (Korthikanti et al. 2022, arXiv 2205.05198, Table 2, fp16 with 1-byte dropout
 * masks), generalised; rep = t with sequence parallelism (cost_model.seq_parallel), else 1:
 *   attention block(sq, skv) = 5*sq*b*h/rep + (4*sq*hk + 4*skv*hkv) * b / t + 5*a*sq*skv*b / t
 *                              (Q and the context over the query heads, K and V over the
 *                              key/value heads)
 *   MLP block(s)             = 5*s*b*h/rep + 2m*s*b*f / t
 *   GPT / T5 encoder layer   = attention(s, s) + MLP(s)           (= sbh(10 + 24/t + 5as/(ht))
 *                                                                    for hk = h, f = 4h, m = 2;
 *                                                                    sbh(34/t + 5as/(ht)) with SP)
 *   T5 decoder layer         = attention(s_d, s_d) + attention(s_d, s_e) + MLP(s_d)
 *   selective recompute drops the 5*a*sq*skv*b/t terms (score entries: varlen, the samples' own);
 *   so does FlashAttention memory (cost_model.flash_attn), whatever the recompute mode; full
 *   recompute keeps the input, 2*s*b*h/rep.
 *   transient over the stored ones (the peak during a layer's backward): what recomputation
 *   rebuilds, plus one (b, s, f/t) fp16 gradient buffer.
 *   postprocess: the fp16 logits, 2*b*s*V/t, stored; fp32 softmax, 4*b*s*V/t, transient.
 *
 * A mixture of experts' layer (COMP_MOE: model_moe_layer's; the dense ones stay COMP_ENCODER) is
 * priced as the dense layer of equal work (moe_layer): a GPU's T tokens (its share of the cp
 * group's) split over its tp group before routing (Megatron's sequence parallelism, which it
 * requires with experts and tp), each routing k copies, n = T k / t of them; the expert-parallel
 * group's busiest rank computes imb = cost_moe_imbalance(n) times the mean (models/moe.h), and the
 * whole group waits for it. So the layer is the dense one with an MLP of width
 *   f_eq = k * imb * f_expert + f_shared      (gated)
 * which is the experts' and the shared expert's FLOPs, elementwise bytes and stored activations
 * exactly (an expert runs whole on its GPU, over tokens already split by tp: the same FLOPs per GPU
 * as a tp-split dense MLP over all of them). On top: the router, 2 (T/t) h E FLOPs; its weights
 * read once, attention and shared expert over t and E/ep experts whole (cost_moe_param_mb); the
 * GEMMs' shape multipliers with the experts' rows the busiest rank's tokens per expert,
 * n imb ep / E (grouped GEMMs: few tokens an expert slow the weight gradient, cost_gemm_shape_eff
 * of its inner dimension); the token exchange, an all-to-all of n copies of h bf16 elements per
 * dispatch and per combine over the ep group (moe_exchange_ms: NCCL's formula at the cluster's
 * measured all-to-all bus bandwidth inside a node; across nodes the copies for other nodes over
 * the NICs beside those for the node's GPUs over NVLink, or DeepEP's one crossing a token per
 * node, as cost_model_place_ep places the group and --dispatcher says), two forward, two
 * backward, two more under full recompute, serial (cost_layer says how much: COST_OVERLAP_EP
 * overlaps it in the simulator's pairs); stored, the permuted copies (2 n imb h
 * bytes) and the router's fp32 probabilities (4 (T/t) E). One expert run by every token is then
 * the dense layer (no router FLOPs, exchange or permutation; its h router parameters read).
 * Expert tensor parallelism (cost_model.etp): an ep rank is etp GPUs, each with 1/etp of every
 * expert; a GPU runs its rank's copies gathered from the etp GPUs (etp times the rows:
 * tokens_per_expert) on GEMMs 1/etp as wide, the same FLOPs; the gather before and the reduce-scatter after join each
 * dispatch and combine (a2a_ms), and the gathered copies are stored. A capacity factor caps the
 * busiest rank at C x the mean (cost_moe_imbalance). The ep peers' micro-batches are taken to
 * route as this one does (the imbalance is of ep times its copies); where they are other replicas'
 * micro-batches, the simulator makes the layer wait for the slowest of them (sim.h: replicas that
 * meet). The experts' gradients and their state are the stage model's (stage_cost.h: over the
 * expert-data-parallel group).
 *
 * Multi-head latent attention (DeepSeek-V2/V3: model.h kv_lora) is priced by its own GEMMs
 * (mla_projections, layer_gemms): the down-projections to the query latent and to the key/value
 * latent with its rotary key run whole on every GPU of the tp group (Megatron-Core duplicates
 * them), the up-projections and the output projection split over the heads; attention reads
 * every head's up-projected keys (kv_channels) and values (v_head_dim), so its FLOPs, the kernel's
 * work and the stored Q, K, V and context take model.h's widths, heads x (kv_channels +
 * v_head_dim) / 2 (the kernel at its kv_channels rate); the latents the up-projections read are
 * stored on top, 2 bytes each, split by SP.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_util.h"
#include "comm.h"
#include "cost.h"

#define FLOOR_SHARPNESS 4       /* exponent of the smooth maximum (an integer: smoothmax squares twice) */

const char *const ANALYTIC_PARAM_NAMES[ANALYTIC_N_PARAMS] = {
    "gemm_eff", "attn_eff", "mem_eff", "fwd_floor_ms", "bwd_floor_ms", "bwd_ratio"};

void analytic_params_default(analytic_params *p)
{
    /* Fitted to the A100 GPT-6.7B TP1 no-recompute grid (dpsim calibrate), rounded; mem_eff ran
     * to its bound of 1 there (the byte term is nearly collinear with the GEMM term) and is
     * set to a physical 0.9. */
    p->gemm_eff = 0.67;
    p->attn_eff = 0.14;
    p->mem_eff = 0.90;
    p->fwd_floor_ms = 1.6;
    p->bwd_floor_ms = 1.5;
    p->bwd_ratio = 1.77;
}

void analytic_params_for_gpu(const gpu_spec *g, analytic_params *p)
{
    analytic_params_default(p);
    if (g->matmul_eff > 0) p->gemm_eff *= g->matmul_eff / HW_A100_MATMUL_EFF;
}

const char *analytic_params_provenance(void)
{
    return "fitted (dpsim calibrate) to the A100-40GB measurements of GPT-6.7B, tp 1, no "
           "recompute (models/profiles/a100_gpt_6.7b_profile.csv, the DynaPipe authors' "
           "profiling)";
}

void analytic_params_to_array(const analytic_params *p, double *a)
{
    a[0] = p->gemm_eff, a[1] = p->attn_eff, a[2] = p->mem_eff;
    a[3] = p->fwd_floor_ms, a[4] = p->bwd_floor_ms, a[5] = p->bwd_ratio;
}

void analytic_params_from_array(const double *a, analytic_params *p)
{
    p->gemm_eff = a[0], p->attn_eff = a[1], p->mem_eff = a[2];
    p->fwd_floor_ms = a[3], p->bwd_floor_ms = a[4], p->bwd_ratio = a[5];
}

/* Latent attention's projections per token (model.h kv_lora; DeepSeek-V2/V3, Megatron-Core's
 * MLA): split over tp (the query up-projection, or the query projection without a query latent;
 * the key/value up-projection; the output projection) and on every tp GPU (the down-projections to
 * the query latent and to the key/value latent with its rotary key), weights' elements. */
static void mla_projections(const model_spec *m, double *split, double *whole)
{
    double h = m->hidden, a = m->heads, dk = m->kv_channels, dv = m->v_head_dim;
    double ql = m->q_lora, kl = m->kv_lora, r = m->qk_rope_dim;
    *split = (ql > 0 ? ql : h) * a * dk + kl * a * (dk - r + dv) + a * dv * h;
    *whole = (ql > 0 ? h * ql : 0) + h * (kl + r);
}

void analytic_flops(const model_spec *m, cost_component c, const cost_shape *s, int tp,
                    double *dense, double *attn)
{
    double b = s->mbs, h = m->hidden, hk = model_attn_q_width(m), f = m->ffn;
    double hkv = model_attn_kv_width(m), mats = m->glu ? 3 : 2;
    double se = s->enc_len, sd = s->dec_len, ee, dd, ed;
    cost_shape_attn(s, &ee, &dd, &ed);
    switch (c) {
    case COMP_ENCODER:
        if (m->kv_lora > 0) { /* the down-projections run whole on every GPU of the group */
            double split, whole;
            mla_projections(m, &split, &whole);
            *dense = 2 * b * se * (split + whole * tp + mats * h * f);
        } else {
            *dense = 2 * b * se * (h * hk + 2 * h * hkv + hk * h + mats * h * f);
        }
        *attn = 4 * ee * hk;
        break;
    case COMP_DECODER:
        *dense = 2 * b * sd * (h * hk + 2 * h * hkv + hk * h) + 2 * b * sd * (2 * h * hk) +
                 2 * b * se * (2 * h * hkv) + 2 * b * sd * mats * h * f;
        *attn = 4 * hk * (dd + ed);
        break;
    default: {
        double s_out = m->arch == ARCH_T5 ? sd : se;
        *dense = 2 * b * s_out * h * m->vocab;
        *attn = 0;
    }
    }
    *dense /= tp;
    *attn /= tp;
}

/* scores: the sum over rows (varlen: over samples) of sq * skv, the attention score entries; rep:
 * the GPUs the sequence-wise terms (layer norm input, dropout mask, residual) are split over
 * (tp with sequence parallelism, else 1) */
static double attention_block(double b, double sq, double skv, double scores, double h, double hk,
                              double hkv, double a, double t, double rep, int keep_scores)
{
    return 5 * sq * b * h / rep + (4 * sq * hk + 4 * skv * hkv) * b / t +
           (keep_scores ? 5 * a * scores / t : 0);
}

/* The stored bytes, without the attention scores when flash (FlashAttention never stores them). */
static double stored_bytes(const model_spec *m, cost_component c, const cost_shape *s, int tp,
                           recompute_mode rc, int flash, int sp)
{
    double b = s->mbs, h = m->hidden, hk = model_attn_q_width(m), f = m->ffn;
    double hkv = model_attn_kv_width(m), a = m->heads, t = tp, mats = m->glu ? 3 : 2, rep = sp ? t : 1;
    double se = s->enc_len, sd = s->dec_len;
    if (c == COMP_POSTPROCESS) return 2 * b * (m->arch == ARCH_T5 ? sd : se) * m->vocab / t;
    double sq = c == COMP_DECODER ? sd : se;
    if (rc == RECOMPUTE_FULL) return 2 * sq * b * h / rep;
    int keep = rc == RECOMPUTE_NONE && !flash;
    double ee, dd, ed;
    cost_shape_attn(s, &ee, &dd, &ed);
    double mlp = 5 * sq * b * h / rep + 2 * mats * sq * b * f / t;
    double bytes = attention_block(b, sq, sq, c == COMP_DECODER ? dd : ee, h, hk, hkv, a, t, rep,
                                   keep) + mlp;
    if (m->kv_lora > 0) /* latent attention: the latents the up-projections read (and their norms'
                         * inputs), computed on every GPU of the group */
        bytes += 2 * 2 * sq * b * (m->q_lora + m->kv_lora + m->qk_rope_dim) / rep;
    if (c == COMP_DECODER) bytes += attention_block(b, sd, se, ed, h, hk, hkv, a, t, rep, keep);
    return bytes;
}

double analytic_stored_act_bytes(const model_spec *m, cost_component c, const cost_shape *s,
                                 int tp, recompute_mode rc, int sp)
{
    return stored_bytes(m, c, s, tp, rc, 0, sp);
}

/* A component's GEMM shape cost where every GEMM's rows are the same tokens m (all but a T5
 * decoder's: gemm_shape_multipliers): the forward's, and the backward's as bwd0 + (m + k0) / m / 2,
 * kept with the k0s and tp they were computed at (valid 1). */
typedef struct gemm_shape_sums {
    int valid, tp;
    double k0, fp8_k0, fwd, bwd0;
} gemm_shape_sums;

typedef struct analytic {
    analytic_params p;
    /* the fitted layer's GEMM shape cost on the GPU of k0 ref_k0 (gemm_shape_multipliers), kept
     * between queries: it depends on nothing else */
    double ref_k0, ref_fwd, ref_bwd;
    gemm_shape_sums shape[COMP_COUNT][2]; /* by component and fp8 */
    /* the GPU's tensor- and context-parallel groups (layout_group), kept between queries with
     * what they were placed from */
    struct {
        int tp, cp, gpus_per_node, nics_per_node;
        comm_group g;
    } group[2];
} analytic;

/* The group of kind k (MESH_TP or MESH_CP) of a GPU of cm's tp x cp layout, as the mesh places it
 * (comm_mesh_group); the DP prices a batch's every segment, and placing it was a tenth of that. */
static comm_group layout_group(const cost_model *cm, mesh_kind k)
{
    analytic *a = cm->impl;
    int at = k == MESH_CP;
    const cluster_spec *hw = &cm->hw;
    if (a->group[at].tp != cm->tp || a->group[at].cp != cm->cp ||
        a->group[at].gpus_per_node != hw->gpus_per_node ||
        a->group[at].nics_per_node != hw->nics_per_node) {
        mesh layout = mesh_of(cm->tp, cm->cp, 1, 1);
        a->group[at].g = comm_mesh_group(hw, &layout, k);
        a->group[at].tp = cm->tp, a->group[at].cp = cm->cp;
        a->group[at].gpus_per_node = hw->gpus_per_node, a->group[at].nics_per_node = hw->nics_per_node;
    }
    return a->group[at].g;
}

/* Time of attention work of `flops` forward FLOPs in the fused kernel, ms: the forward, or
 * (backward) its backward, 2.5 times the FLOPs, at the kernel's measured rate for that length on
 * this GPU (attn_kernel_peak_share). */
static double kernel_ms(const cost_model *cm, double flops, int backward, int causal, double len)
{
    double tflops = cm->attn_speed * attn_kernel_peak_share(cm->attn, &cm->hw.gpu) *
                    attn_kernel_tflops(cm->attn, backward, causal, len, cm->model.kv_channels);
    return (backward ? 2.5 : 1) * flops / (tflops * 1e12) * 1e3;
}

/* FlashAttention's times of a layer's attention on one GPU, ms: forward and backward. */
static void flash_attention_ms(const cost_model *cm, cost_component c, const cost_shape *s,
                               double len_div, double *fwd_ms, double *bwd_ms)
{
    const model_spec *m = &cm->model;
    double hk = model_attn_q_width(m) / cm->tp, ee, dd, ed;
    cost_shape_attn(s, &ee, &dd, &ed);
    /* self-attention: causal in GPT and T5's decoder; T5's encoder and cross attention are not */
    double self_sq = c == COMP_DECODER ? dd : ee;
    int causal = m->arch == ARCH_GPT || c == COMP_DECODER;
    double rows_tokens = (double)s->mbs * (c == COMP_DECODER ? s->dec_len : s->enc_len);
    double len = rows_tokens > 0 ? self_sq / rows_tokens / len_div : 0;
    double flops = 4 * self_sq * hk * (causal ? 0.5 : 1);
    *fwd_ms = kernel_ms(cm, flops, 0, causal, len);
    *bwd_ms = kernel_ms(cm, flops, 1, causal, len);
    if (c == COMP_DECODER) { /* cross attention: s_d queries over s_e keys */
        double x = 4 * ed * hk, xlen = s->dec_len > 0 ? ed / ((double)s->mbs * s->dec_len) : 0;
        *fwd_ms += kernel_ms(cm, x, 0, 0, xlen);
        *bwd_ms += kernel_ms(cm, x, 1, 0, xlen);
    }
}

/* Context parallelism's exposed communication per layer on one GPU, ms (cost.h
 * cost_model_set_cp): ring, cp - 1 steps of a K/V block each way round the group, a step hidden
 * behind that step's share of the attention (t_attn: the GPU's whole attention, forward or
 * backward) where shorter; or the all-to-all form's four all-to-alls, not hidden. */
static void cp_comm_ms(const cost_model *cm, const cost_shape *s, double t_attn, double t_attn_bwd,
                       double *fwd_ms, double *bwd_ms)
{
    const model_spec *m = &cm->model;
    int cp = cm->cp, tp = cm->tp;
    double hk = model_attn_q_width(m), hkv = model_attn_kv_width(m);
    double tokens = (double)s->mbs * s->enc_len, elem = COMM_ACT_ELEM_BYTES;
    /* one ring per tensor-parallel rank, its members tp GPUs apart, all at once: across nodes
     * they share the node's NICs */
    comm_group g = layout_group(cm, MESH_CP);
    if (cm->cp_alltoall) { /* Q, K, V to heads-sharded full sequences, and the output back */
        double local = tokens / cp * elem / tp;
        double one = comm_coll_ms(&cm->hw, COLL_ALL_TO_ALL, &g, local * hk) * 2 +
                     comm_coll_ms(&cm->hw, COLL_ALL_TO_ALL, &g, local * hkv) * 2;
        *fwd_ms = *bwd_ms = one;
        return;
    }
    /* each of the cp - 1 steps carries one block of what the ring moves */
    double step = comm_coll_ms(&cm->hw, COLL_SEND_RECV, &g,
                               analytic_cp_ring_bytes(m, s, tp, cp, 0) / (cp - 1));
    double step_bwd = comm_coll_ms(&cm->hw, COLL_SEND_RECV, &g,
                                   analytic_cp_ring_bytes(m, s, tp, cp, 1) / (cp - 1));
    *fwd_ms = (cp - 1) * fmax(0, step - t_attn / cp);
    *bwd_ms = (cp - 1) * fmax(0, step_bwd - t_attn_bwd / cp);
}

double analytic_cp_merge_bytes(const model_spec *m, const cost_shape *s, int tp, int cp,
                               int backward)
{
    if (cp <= 1) return 0;
    double width = model_attn_q_width(m) + (backward ? 2 * model_attn_kv_width(m) : 0);
    return 3.0 * COMM_ACT_ELEM_BYTES * s->mbs * s->enc_len * width / tp; /* read 2, write 1 */
}

double analytic_cp_ring_bytes(const model_spec *m, const cost_shape *s, int tp, int cp,
                              int backward)
{
    double hkv = model_attn_kv_width(m);
    double kv = 2.0 * s->mbs * s->enc_len * hkv * COMM_ACT_ELEM_BYTES / tp; /* K and V, all tokens */
    return (backward ? 2 : 1) * (cp - 1) * kv / cp;
}

/* Bytes the FP8 casts of one layer's forward move on one GPU for `tokens` tokens (its share): each
 * activation operand of the four linear GEMMs (the QKV and MLP inputs, h wide, gathered whole
 * under SP; the attention output, hk / t; the MLP's hidden, f / t; a T5 decoder layer's cross
 * attention adds its query input and output) is read twice in bf16 (current scaling: the amax,
 * then the cast; Transformer Engine's Float8CurrentScaling "requires reading the tensor twice"),
 * written once in FP8 and transposed for the weight gradient (Hopper, TE's "Performance
 * considerations"): 2 + 2 + 1 + 2 bytes an element. The backward casts the output gradients
 * alike; bwd_ratio carries it with the rest of the byte term. */
#define FP8_CAST_BYTES_PER_ELEM 7.0
static double fp8_cast_bytes(const model_spec *m, cost_component c, double tokens, double t)
{
    double h = m->hidden, hk = model_attn_q_width(m), f = m->ffn;
    double elems = 2 * h + (hk + f) / t;
    if (c == COMP_DECODER) elems += h + hk / t;
    return FP8_CAST_BYTES_PER_ELEM * tokens * elems;
}

/* One GEMM of a layer on one GPU: its forward FLOPs, rows m (tokens), inner dimension k and
 * output width n. */
typedef struct gemm {
    double flops, m, k, n;
} gemm;

static gemm gemm_of(double m, double k, double n)
{
    gemm g = {2 * m * k * n, m, k, n};
    return g;
}

/* A layer's widths as its GEMMs see them: hidden, query heads x head size, key/value heads x head
 * size, ffn, MLP matrices (3 when gated), vocabulary; latent attention's (mla_projections): the
 * query latent (0: none), the key/value latent with the rotary key, the latent's width, and the
 * query, key/value up- and output projections' widths over the heads. */
typedef struct layer_dims {
    double h, hk, hkv, f, mats, vocab;
    int mla;
    double ql, kv_down, kl, q, kv_up, o;
} layer_dims;

static layer_dims dims_of(const model_spec *m)
{
    layer_dims d = {m->hidden, (double)m->heads * m->kv_channels,
                    (double)model_kv_heads(m) * m->kv_channels, m->ffn, m->glu ? 3 : 2, m->vocab,
                    m->kv_lora > 0, m->q_lora, (double)m->kv_lora + m->qk_rope_dim, m->kv_lora,
                    (double)m->heads * m->kv_channels,
                    (double)m->heads * (m->kv_channels - m->qk_rope_dim + m->v_head_dim),
                    (double)m->heads * m->v_head_dim};
    return d;
}

/* The self-attention's projections of a layer on one GPU of a TP group of t over tq tokens, into
 * g; returns how many (2, or latent attention's 4 or 5; each: 4, Q, K and V each their own). */
static int attention_gemms(const layer_dims *d, double tq, double t, int each, gemm *g)
{
    double h = d->h;
    int n = 0;
    if (d->mla) { /* latent attention: the down-projections whole on every GPU of the group */
        if (d->ql > 0) g[n++] = gemm_of(tq, h, d->ql), g[n++] = gemm_of(tq, d->ql, d->q / t);
        else g[n++] = gemm_of(tq, h, d->q / t);
        g[n++] = gemm_of(tq, h, d->kv_down);
        g[n++] = gemm_of(tq, d->kl, d->kv_up / t);
        g[n++] = gemm_of(tq, d->o / t, h);
    } else if (each) {
        g[n++] = gemm_of(tq, h, d->hk / t);
        g[n++] = gemm_of(tq, h, d->hkv / t);
        g[n++] = gemm_of(tq, h, d->hkv / t);
        g[n++] = gemm_of(tq, d->hk / t, h);
    } else {
        g[n++] = gemm_of(tq, h, (d->hk + 2 * d->hkv) / t); /* Q, K and V */
        g[n++] = gemm_of(tq, d->hk / t, h);                /* the attention's output projection */
    }
    return n;
}

/* The GEMMs of a layer on one GPU of a TP group of t, whose self-attention queries and MLP run
 * over tq tokens and (T5 decoder) cross attention's keys and values over tkv: their FLOPs add up
 * to analytic_flops' dense term. Fused as Megatron runs them (QKV, K and V of the cross attention,
 * gate and up), or with each 1 each projection its own, in the order a model's code calls them
 * (q, k, v, the output; the cross attention's alike; gate, up, down): what torchtitan's per-op
 * recompute counts (alternate_share). Returns how many (at most 11: a T5 decoder's each). */
#define LAYER_GEMMS_MAX 12
static int layer_gemms(const layer_dims *d, cost_component c, double tq, double tkv, double t,
                       int each, gemm *g)
{
    double h = d->h, hk = d->hk, hkv = d->hkv, f = d->f;
    int n = 0;
    if (c == COMP_POSTPROCESS) {
        g[n++] = gemm_of(tq, h, d->vocab / t);
        return n;
    }
    n = attention_gemms(d, tq, t, each, g);
    if (c == COMP_DECODER) {                     /* cross attention: Q, then K and V of the encoder */
        g[n++] = gemm_of(tq, h, hk / t);
        if (each) g[n++] = gemm_of(tkv, h, hkv / t), g[n++] = gemm_of(tkv, h, hkv / t);
        else g[n++] = gemm_of(tkv, h, 2 * hkv / t);
        g[n++] = gemm_of(tq, hk / t, h);
    }
    if (each) /* gate, up (an ungated MLP: up) */
        for (int i = 1; i < (int)d->mats; i++) g[n++] = gemm_of(tq, h, f / t);
    else
        g[n++] = gemm_of(tq, h, (d->mats - 1) * f / t); /* up (and gate) */
    g[n++] = gemm_of(tq, f / t, h);                     /* down */
    return n;
}

/* The shape's cost over the layer's GEMMs at their large-K rate, forward and backward: the FLOPs
 * weighted by 1 / cost_gemm_shape_eff of the forward's K; the backward's data gradient (inner
 * dimension the forward's n) and weight gradient (inner dimension the tokens) each half. */
static void gemm_factors(const gpu_spec *gpu, int fp8, const gemm *g, double *fwd, double *bwd)
{
    *fwd = 1 / cost_gemm_shape_eff(gpu, fp8, g->k);
    *bwd = (1 / cost_gemm_shape_eff(gpu, fp8, g->n) + 1 / cost_gemm_shape_eff(gpu, fp8, g->m)) / 2;
}

static void gemm_shape_cost(const gpu_spec *gpu, int fp8, const gemm *g, int n, double *fwd,
                            double *bwd)
{
    double total = 0, f = 0, b = 0;
    for (int i = 0; i < n; i++) {
        double fi, bi;
        gemm_factors(gpu, fp8, &g[i], &fi, &bi);
        total += g[i].flops;
        f += g[i].flops * fi;
        b += g[i].flops * bi;
    }
    *fwd = total > 0 ? f / total : 1;
    *bwd = total > 0 ? b / total : 1;
}

/* The share of a layer's forward GEMMs that torchtitan's per-op selective recompute reruns
 * (stack.h, SELECTIVE_ALTERNATE_MM): every second matrix multiply in the order the model code calls
 * them (layer_gemms, each projection its own; latent attention's in attention_gemms' order, the
 * model's), weighted by their FLOPs (gpu NULL) or by their time at their shapes on gpu
 * (cost_gemm_shape_eff of each one's K). Llama-3.1-8B: k, the output projection and up, 36.5% of
 * the FLOPs. A mixture of experts' layer is counted as the dense layer it is priced as (its router
 * left out): torchtitan's policy as written for its dense Llama, carried over. */
static double alternate_share(const layer_dims *d, cost_component c, double tq, double tkv,
                              double t, const gpu_spec *gpu, int fp8)
{
    gemm g[LAYER_GEMMS_MAX];
    int n = layer_gemms(d, c, tq, tkv, t, 1, g);
    double all = 0, rerun = 0;
    for (int i = 0; i < n; i++) {
        double w = g[i].flops / (gpu ? cost_gemm_shape_eff(gpu, fp8, g[i].k) : 1);
        all += w;
        if (i % 2 == 1) rerun += w; /* the second, the fourth, … */
    }
    return all > 0 ? rerun / all : 0;
}

void cost_rerun_shares(const model_spec *m, software_stack s, recompute_mode rc, int tp,
                       double *dense, double *attn)
{
    *dense = *attn = 0;
    if (rc == RECOMPUTE_FULL) {
        *dense = *attn = 1;
    } else if (rc == RECOMPUTE_SELECTIVE && stack_selective_policy(s) == SELECTIVE_ALTERNATE_MM) {
        layer_dims d = dims_of(m);
        *dense = alternate_share(&d, COMP_ENCODER, 1, 1, tp > 1 ? tp : 1, NULL, 0);
    } else if (rc == RECOMPUTE_SELECTIVE) {
        *attn = 1;
    }
}

/* The layer the A100 fit measured (GPT-6.7B: hidden 4,096, ffn 16,384, 32 heads of 128, tp 1;
 * analytic_params_default) at 4,096 tokens, the profile's middle: its GEMMs' shape cost is the one
 * the fitted efficiency already holds, so a layer's GEMM time scales by its own shape cost over
 * this one's. */
static const layer_dims FIT_LAYER = {4096, 4096, 4096, 16384, 2, 0, 0, 0, 0, 0, 0, 0, 0};
#define FIT_TOKENS 4096.0

/* The analytic state of cm with the fitted layer's GEMM shape cost on cm's GPU filled in. */
static const analytic *fit_layer_cost(const cost_model *cm)
{
    analytic *a = cm->impl;
    const gpu_spec *gpu = &cm->hw.gpu;
    if (a->ref_k0 != gpu->gemm_k0 || !(a->ref_fwd > 0)) {
        gemm ref[LAYER_GEMMS_MAX];
        int nref = layer_gemms(&FIT_LAYER, COMP_ENCODER, FIT_TOKENS, FIT_TOKENS, 1, 0, ref);
        gemm_shape_cost(gpu, 0, ref, nref, &a->ref_fwd, &a->ref_bwd);
        a->ref_k0 = gpu->gemm_k0;
    }
    return a;
}

/* The time multipliers of a layer's GEMMs for their shapes, forward and backward (1 on a GPU
 * without a measured K curve): its shape cost over the fitted layer's in bf16, the precision the
 * fit and the GPUs' best-GEMM ratios (cost_gemm_speedup) are stated in. FP8's larger k0 makes its
 * speed-up over bf16 at a shape r s_fp8(K) / s_bf16(K), never above r. */
static void gemm_shape_multipliers(const cost_model *cm, cost_component c, double tq, double tkv,
                                   int fp8, double *fwd, double *bwd)
{
    const gpu_spec *gpu = &cm->hw.gpu;
    if (!(gpu->gemm_k0 > 0) && !(fp8 && gpu->fp8_gemm_k0 > 0)) {
        *fwd = *bwd = 1; /* no curve: every shape at the fitted rate */
        return;
    }
    analytic *a = (analytic *)fit_layer_cost(cm);
    double f, b;
    if (c != COMP_DECODER) { /* one row count: the weighted factors but the weight gradient's are
                              * the tokens' own, so the sums are kept (gemm_shape_cost, factored) */
        gemm_shape_sums *k = &a->shape[c][fp8 ? 1 : 0];
        if (!k->valid || k->tp != cm->tp || k->k0 != gpu->gemm_k0 || k->fp8_k0 != gpu->fp8_gemm_k0) {
            gemm g[LAYER_GEMMS_MAX];
            layer_dims d = dims_of(&cm->model);
            int n = layer_gemms(&d, c, 1, 1, cm->tp, 0, g);
            double total = 0, sf = 0, sb = 0;
            for (int i = 0; i < n; i++) {
                total += g[i].flops;
                sf += g[i].flops / cost_gemm_shape_eff(gpu, fp8, g[i].k);
                sb += g[i].flops / cost_gemm_shape_eff(gpu, fp8, g[i].n);
            }
            k->fwd = total > 0 ? sf / total : 1;
            k->bwd0 = total > 0 ? sb / total / 2 : 0.5;
            k->valid = 1, k->tp = cm->tp, k->k0 = gpu->gemm_k0, k->fp8_k0 = gpu->fp8_gemm_k0;
        }
        f = k->fwd;
        b = k->bwd0 + 1 / cost_gemm_shape_eff(gpu, fp8, tq) / 2;
    } else {
        gemm g[LAYER_GEMMS_MAX];
        layer_dims d = dims_of(&cm->model);
        int n = layer_gemms(&d, c, tq, tkv, cm->tp, 0, g);
        gemm_shape_cost(gpu, fp8, g, n, &f, &b);
    }
    *fwd = f / a->ref_fwd;
    *bwd = b / a->ref_bwd;
}

/* The least multipliers gemm_shape_multipliers can give the layer's GEMMs on cm's GPU, whatever
 * the tokens: each GEMM's own factors as the tokens grow without bound (the weight gradient's
 * inner dimension is the tokens), the least of them (every mix of the GEMMs' FLOPs, a T5
 * decoder's encoder tokens in it, averages them). */
static void gemm_floor_multipliers(const cost_model *cm, const model_spec *m, cost_component c,
                                   int fp8, double *fwd, double *bwd)
{
    const gpu_spec *gpu = &cm->hw.gpu;
    *fwd = *bwd = 1;
    if (!(gpu->gemm_k0 > 0) && !(fp8 && gpu->fp8_gemm_k0 > 0)) return;
    gemm g[LAYER_GEMMS_MAX];
    layer_dims d = dims_of(m);
    int n = layer_gemms(&d, c, 1e300, 1e300, cm->tp, 0, g);
    const analytic *a = fit_layer_cost(cm);
    double f = INFINITY, b = INFINITY;
    for (int i = 0; i < n; i++) {
        double fi, bi;
        gemm_factors(gpu, fp8, &g[i], &fi, &bi);
        f = fmin(f, fi), b = fmin(b, bi);
    }
    *fwd = f / a->ref_fwd;
    *bwd = b / a->ref_bwd;
}

/* The memory-bound bytes a layer (or the head) moves for `tokens` tokens on one GPU in its forward
 * (the backward's are bwd_ratio times them): the loss over the vocabulary; a layer's two norms and
 * two residual adds over (tokens, h), split along the sequence with SP; the MLP's activation over
 * (tokens, f / t); rotary positions over the queries and keys (latent attention: each head's
 * rotary part and the shared rotary key); where the stack copies K and V to the query heads
 * (grouped-query attention, eager) and the attention's output back, those copies; each at the
 * stack's bytes per element (stack_elementwise, models/stack.h); and under fp8 the casts of its
 * GEMMs' activation operands (fp8_cast_bytes). Linear in the tokens. */
static double token_bytes(const cost_model *cm, const model_spec *m, cost_component c, double tokens)
{
    const stack_elementwise *ew = stack_elementwise_of(cm->stack);
    double h = m->hidden, t = cm->tp;
    if (c == COMP_POSTPROCESS) return ew->loss * tokens * m->vocab / t;
    int sp = cm->seq_parallel && cm->tp > 1;
    double norm = m->rmsnorm ? ew->rmsnorm : ew->layernorm;
    double per_token = 2 * (norm + ew->residual) * h / (sp ? t : 1) +
                       (m->glu ? ew->glu : ew->gelu) * m->ffn / t;
    double q = model_attn_q_width(m), kv = model_attn_kv_width(m);
    per_token += ew->attn_out * q / t;
    if (m->rope)
        per_token += ew->rope * (m->kv_lora > 0 ? (double)m->heads * m->qk_rope_dim / t + m->qk_rope_dim
                                                : (q + kv) / t);
    if (m->kv_lora == 0 && kv < q) per_token += ew->kv_repeat * 2 * (kv + q) / t;
    double bytes = tokens * per_token;
    if (cm->precision == PRECISION_FP8) bytes += fp8_cast_bytes(m, c, tokens, t);
    return bytes;
}

static double smoothmax(double floor_ms, double work_ms)
{
    if (floor_ms <= 0) return work_ms;
    _Static_assert(FLOOR_SHARPNESS == 4, "the 4-norm below: squares and square roots, not pow");
    double f2 = floor_ms * floor_ms, w2 = work_ms * work_ms; /* pow's time, a fifth of a query's */
    return sqrt(sqrt(f2 * f2 + w2 * w2));
}

/* What a MoE layer adds to the dense layer it is priced as (moe_layer, the header). */
typedef struct moe_extra {
    double param_mb;          /* its weights on one GPU (cost_model.param_mb[COMP_MOE]) */
    double router_flops;      /* the router's forward FLOPs on this GPU */
    double routed;            /* copies the busiest ep rank computes */
    double tokens_per_expert; /* of them, each of its experts' on one GPU (the grouped GEMMs'
                               * rows: under etp, the ep rank's etp GPUs' gathered) */
    double a2a_ms;            /* one step of the token exchange (dispatch or combine): the
                               * all-to-all, and under etp the gather (or reduce-scatter) over the
                               * ep rank's GPUs */
    double extra_bytes;       /* stored: the permuted copies and the router's probabilities */
} moe_extra;

/* A MoE layer's GEMM shape multipliers (gemm_shape_multipliers' for a dense layer): the attention's
 * and the shared expert's over the tokens tq, the routed experts' over the busiest rank's tokens
 * per expert, their inner dimensions h and the expert's width (each expert whole: no tp). */
static void moe_shape_multipliers(const cost_model *cm, double tq, const moe_extra *x, int fp8,
                                  double *fwd, double *bwd)
{
    const gpu_spec *gpu = &cm->hw.gpu;
    *fwd = *bwd = 1;
    if (!(gpu->gemm_k0 > 0) && !(fp8 && gpu->fp8_gemm_k0 > 0)) return;
    const model_spec *m = &cm->model;
    const analytic *a = fit_layer_cost(cm);
    layer_dims d = dims_of(m);
    double t = cm->tp, sh = m->shared_ffn, tpe = fmax(x->tokens_per_expert, 1);
    double fe = (double)m->expert_ffn / (cm->etp > 1 ? cm->etp : 1); /* an expert's share here */
    gemm g[10];
    int n = attention_gemms(&d, tq, t, 0, g);
    if (sh > 0) g[n++] = gemm_of(tq, d.h, 2 * sh / t), g[n++] = gemm_of(tq, sh / t, d.h);
    g[n++] = (gemm){2 * x->routed * d.h * 2 * m->expert_ffn, tpe, d.h, 2 * fe}; /* up and gate */
    g[n++] = (gemm){2 * x->routed * m->expert_ffn * d.h, tpe, fe, d.h};         /* down */
    double f, b;
    gemm_shape_cost(gpu, fp8, g, n, &f, &b);
    *fwd = f / a->ref_fwd;
    *bwd = b / a->ref_bwd;
}

/* A MoE layer over shape s as the dense layer of equal work (cost_analytic.c's header): its MLP of
 * width k x imbalance x the expert's (+ the shared expert's), gated, in *dense; the rest in *x.
 * A GPU's tokens (its share of the cp group's) are split over its tp group before routing
 * (sequence parallelism, which Megatron requires with experts and tp); each routes k copies; the
 * ep group's busiest rank computes imbalance (cost_moe_imbalance) times the mean. */
static void moe_layer(const cost_model *cm, const cost_shape *s, model_spec *dense, moe_extra *x)
{
    const model_spec *m = &cm->model;
    double h = m->hidden, E = m->experts, k = m->experts_per_token;
    double routed_from = (double)s->mbs * s->enc_len / cm->cp / cm->tp;
    double n = routed_from * k, imb = cost_moe_imbalance(cm, n);
    *dense = *m;
    dense->glu = 1;
    dense->ffn = (int)fmax(1, lround(k * imb * m->expert_ffn + m->shared_ffn));
    double etp = cm->etp > 1 ? cm->etp : 1;
    x->param_mb = cm->param_mb[COMP_MOE];
    x->routed = n * imb;
    /* under etp each GPU of an ep rank runs the rank's copies gathered from its etp GPUs on its
     * 1/etp of every expert: the same FLOPs, etp times the rows */
    x->tokens_per_expert = x->routed * etp * cm->ep / E;
    /* one expert routes nothing: no router, no exchange, no permutation */
    x->router_flops = E > 1 ? 2 * routed_from * h * E : 0;
    x->a2a_ms = E > 1 ? moe_exchange_ms(&cm->hw, &cm->ep_group, cm->ep_nodes, m, cm->dispatch,
                                        routed_from, COMM_ACT_ELEM_BYTES)
                      : 0;
    if (etp > 1) /* the gather of the rank's copies over its GPUs (a reduce-scatter as long back) */
        x->a2a_ms += comm_coll_ms(&cm->hw, COLL_ALL_GATHER, &cm->etp_group,
                                  x->routed * etp * h * COMM_ACT_ELEM_BYTES);
    x->extra_bytes = E > 1 ? 2.0 * x->routed * etp * h + 4.0 * routed_from * E : 0;
}

/* One layer (or the head) of model m under component c's formulas; moe: a MoE layer's extras
 * (m then the dense layer of equal work), else NULL. */
static dp_status layer_query(const cost_model *cm, const model_spec *m, cost_component c,
                             const moe_extra *moe, const cost_shape *s, cost_layer *out, dp_err *err)
{
    const analytic_params *p = &((const analytic *)cm->impl)->p;
    if (s->mbs < 1 || s->enc_len < (c == COMP_ENCODER || m->arch == ARCH_GPT ? 1 : 0) ||
        (m->arch == ARCH_T5 && c != COMP_ENCODER && s->dec_len < 1))
        return dp_fail(err, DP_ERR_INFEASIBLE, "shape mbs %d, enc %d, dec %d is empty", s->mbs,
                       s->enc_len, s->dec_len);
    if (c == COMP_DECODER && m->arch != ARCH_T5)
        return dp_fail(err, DP_ERR_INFEASIBLE, "a GPT model has no decoder layers");
    double dense, attn;
    analytic_flops(m, c, s, cm->tp, &dense, &attn);
    /* context parallelism: each of the cp GPUs takes 1/cp of the tokens and (load-balanced
     * chunks, or 1/cp of the heads) of the attention; the head's logits too */
    double cp = cm->cp;
    dense /= cp, attn /= cp;
    if (moe) dense += moe->router_flops; /* (of this GPU's tokens already) */
    double peak = cm->hw.gpu.peak_tflops * 1e12, bw = cm->hw.gpu.hbm_gbps * 1e9;
    double b = s->mbs / cp, h = m->hidden, t = cm->tp; /* b: the token share, as rows */
    int sp = cm->seq_parallel && cm->tp > 1;
    double sq = c == COMP_DECODER || (c == COMP_POSTPROCESS && m->arch == ARCH_T5) ? s->dec_len
                                                                                   : s->enc_len;
    /* the weights read once (the head's: its vocabulary projection), and what the tokens move */
    double weights_mb = moe ? moe->param_mb : cm->param_mb[c];
    double moved = token_bytes(cm, m, c, b * sq);
    double bytes = (c == COMP_POSTPROCESS ? 2.0 * m->vocab * h / t : 1e6 * weights_mb) + moved;
    double t_attn = attn / (peak * p->attn_eff) * 1e3, t_attn_bwd = p->bwd_ratio * t_attn;
    if (cm->flash_attn && cm->attn && c != COMP_POSTPROCESS) {
        /* ring steps run blocks of 1/cp of the sequence; all-to-all keeps it whole */
        flash_attention_ms(cm, c, s, cm->cp_alltoall ? 1 : cp, &t_attn, &t_attn_bwd);
        t_attn /= cp, t_attn_bwd /= cp;
    }
    /* fp8 (cost.h): the layer's GEMMs at the GPU's FP8 rate over its bf16 one, their activation
     * operands cast (fp8_cast_bytes); the LM head stays bf16 (Megatron's output layer is not a
     * Transformer Engine module) */
    int fp8 = cm->precision == PRECISION_FP8 && c != COMP_POSTPROCESS;
    /* each GEMM at its shape's share of the large-K rate (cost_gemm_shape_eff), as the fitted
     * layer's were; the rows are this GPU's tokens (a T5 decoder's cross K/V: the encoder's) */
    double shape_fwd, shape_bwd;
    if (moe) moe_shape_multipliers(cm, b * sq, moe, fp8, &shape_fwd, &shape_bwd);
    else gemm_shape_multipliers(cm, c, b * sq, b * s->enc_len, fp8, &shape_fwd, &shape_bwd);
    double t_gemm = dense / (peak * p->gemm_eff * (fp8 ? cost_gemm_speedup(cm) : 1)) * 1e3;
    double t_bytes = bytes / (bw * p->mem_eff) * 1e3;
    double rest = t_gemm * shape_fwd + t_bytes; /* all but attention */
    double rest_bwd = t_gemm * shape_bwd + t_bytes;
    double work = rest + t_attn;
    /* what the backward reruns first (stack.h, stack_selective_policy): the whole forward; the
     * attention core (Megatron's selective); or torchtitan's per-op policy, every second GEMM
     * and every elementwise op but not attention. The head is never recomputed. */
    int alternate = stack_selective_policy(cm->stack) == SELECTIVE_ALTERNATE_MM;
    int reruns_attn = cm->recompute == RECOMPUTE_FULL ||
                      (cm->recompute == RECOMPUTE_SELECTIVE && !alternate);
    double recompute = 0;
    if (c == COMP_POSTPROCESS) {
        /* none */
    } else if (cm->recompute == RECOMPUTE_FULL) {
        recompute = work;
    } else if (cm->recompute == RECOMPUTE_SELECTIVE && alternate) {
        /* the rerun GEMMs at their shapes' time and reading their weights again; every byte the
         * tokens move (the elementwise ops) */
        layer_dims d = dims_of(m);
        double tkv = b * s->enc_len;
        recompute = t_gemm * shape_fwd * alternate_share(&d, c, b * sq, tkv, t, &cm->hw.gpu, fp8) +
                    (alternate_share(&d, c, b * sq, tkv, t, NULL, 0) * 1e6 * weights_mb + moved) /
                        (bw * p->mem_eff) * 1e3;
    } else if (cm->recompute == RECOMPUTE_SELECTIVE) {
        recompute = t_attn;
    }
    out->fwd_ms = smoothmax(p->fwd_floor_ms, work);
    out->bwd_ms = smoothmax(p->bwd_floor_ms, p->bwd_ratio * rest_bwd + t_attn_bwd + recompute);
    if (cp > 1 && c != COMP_POSTPROCESS) {
        double fwd_cp, bwd_cp;
        cp_comm_ms(cm, s, t_attn, t_attn_bwd, &fwd_cp, &bwd_cp);
        if (!cm->cp_alltoall) { /* the ring's merges of its steps' partial results */
            fwd_cp += analytic_cp_merge_bytes(m, s, cm->tp, cm->cp, 0) / (bw * p->mem_eff) * 1e3;
            bwd_cp += analytic_cp_merge_bytes(m, s, cm->tp, cm->cp, 1) / (bw * p->mem_eff) * 1e3;
        }
        out->fwd_ms += fwd_cp; /* a recomputed attention reruns it */
        out->bwd_ms += bwd_cp + (reruns_attn ? fwd_cp : 0);
    }
    if (cm->tp > 1 && c != COMP_POSTPROCESS) {
        /* Megatron's tensor-parallel all-reduces of the (b, s, h) fp16 activations: after the
         * attention and after the MLP (a T5 decoder layer also after its cross attention), the
         * same in the backward on the gradients */
        double n_ar = c == COMP_DECODER ? 3 : 2, act = 2.0 * b * sq * h;
        comm_group g = layout_group(cm, MESH_TP);
        double gather = comm_coll_ms(&cm->hw, COLL_ALL_GATHER, &g, act);
        double one = sp ? gather + comm_coll_ms(&cm->hw, COLL_REDUCE_SCATTER, &g, act)
                        : comm_coll_ms(&cm->hw, COLL_ALL_REDUCE, &g, act);
        double ar = n_ar * one;
        /* a recompute reruns them: full, all; torchtitan's per-op policy, which saves the
         * reduce-scatters, the all-gathers (each feeds a rerun GEMM) or without sequence
         * parallelism every all-reduce but the last (whose sum feeds only the layer's output) */
        double rerun = cm->recompute == RECOMPUTE_FULL ? ar
                       : cm->recompute == RECOMPUTE_SELECTIVE && alternate
                           ? (sp ? n_ar * gather : (n_ar - 1) * one)
                           : 0;
        double fwd_ar = ar, bwd_ar = ar + rerun;
        if (cm->overlap & COST_OVERLAP_TP) { /* hidden behind the GEMMs where shorter */
            fwd_ar = fmax(0, fwd_ar - t_gemm * shape_fwd);
            bwd_ar = fmax(0, bwd_ar - p->bwd_ratio * t_gemm * shape_bwd);
        }
        out->fwd_ms += fwd_ar;
        out->bwd_ms += bwd_ar;
    }
    if (moe && moe->a2a_ms > 0) {
        /* the token exchange: dispatch and combine forward, their gradients backward (and the
         * forward's again under full recompute), serial; COST_OVERLAP_EP overlaps it in the
         * simulator, with a paired micro-batch's compute */
        double fwd_a2a = 2 * moe->a2a_ms;
        double bwd_a2a = fwd_a2a * (cm->recompute == RECOMPUTE_FULL ? 2 : 1);
        out->fwd_ms += fwd_a2a;
        out->bwd_ms += bwd_a2a;
        out->fwd_xchg_ms = fwd_a2a, out->bwd_xchg_ms = bwd_a2a;
    }
    double stored = stored_bytes(m, c, s, cm->tp, cm->recompute, cm->flash_attn, sp) / cp;
    double transient;
    if (c == COMP_POSTPROCESS) {
        transient = 4 * b * sq * m->vocab / t;
    } else {
        double full = cm->recompute == RECOMPUTE_NONE
                          ? stored
                          : stored_bytes(m, c, s, cm->tp, RECOMPUTE_NONE, cm->flash_attn, sp) / cp;
        transient = (full - stored) + 2 * b * sq * m->ffn / t;
    }
    if (moe && cm->recompute != RECOMPUTE_FULL) stored += moe->extra_bytes;
    out->stored_act_mb = stored / 1e6;
    out->peak_act_mb = (stored + transient) / 1e6;
    return DP_OK;
}

static dp_status analytic_query(const cost_model *cm, cost_component c, const cost_shape *s,
                                cost_layer *out, dp_err *err)
{
    if (c != COMP_MOE) return layer_query(cm, &cm->model, c, NULL, s, out, err);
    if (cm->model.arch != ARCH_GPT || !model_is_moe(&cm->model))
        return dp_fail(err, DP_ERR_INFEASIBLE, "%s has no mixture-of-experts layers",
                       cm->model.name);
    model_spec dense;
    moe_extra x;
    moe_layer(cm, s, &dense, &x);
    return layer_query(cm, &dense, COMP_ENCODER, &x, s, out, err);
}

/* cost_ops.token_floor: of analytic_query's time, what grows with the tokens at its best rate —
 * the GEMMs at their least shape multipliers (gemm_floor_multipliers), the bytes the tokens move
 * (token_bytes), a full recompute's forward again in the backward — per token of the component's
 * sequence on one GPU of the cp group. Left out, each at least 0: the per-layer floor (the smooth
 * maximum is at least the work), the weights' bytes, attention, the collectives. */
static double token_floor_of(const cost_model *cm, const model_spec *m, cost_component c)
{
    const analytic_params *p = &((const analytic *)cm->impl)->p;
    if (c == COMP_DECODER && m->arch != ARCH_T5) return 0;
    cost_shape one = cost_shape_rows(1, 0, 0); /* one token of the component's own sequence */
    if (c == COMP_DECODER || (c == COMP_POSTPROCESS && m->arch == ARCH_T5)) one.dec_len = 1;
    else one.enc_len = 1;
    double dense, attn, cp = cm->cp;
    analytic_flops(m, c, &one, cm->tp, &dense, &attn);
    int fp8 = cm->precision == PRECISION_FP8 && c != COMP_POSTPROCESS;
    double mf, mb;
    gemm_floor_multipliers(cm, m, c, fp8, &mf, &mb);
    double peak = cm->hw.gpu.peak_tflops * 1e12, bw = cm->hw.gpu.hbm_gbps * 1e9;
    double t_gemm = dense / cp / (peak * p->gemm_eff * (fp8 ? cost_gemm_speedup(cm) : 1)) * 1e3;
    double t_bytes = token_bytes(cm, m, c, 1 / cp) / (bw * p->mem_eff) * 1e3;
    double fwd = t_gemm * mf + t_bytes, bwd = p->bwd_ratio * (t_gemm * mb + t_bytes);
    if (cm->recompute == RECOMPUTE_FULL && c != COMP_POSTPROCESS) bwd += fwd;
    return fwd + bwd;
}

/* A MoE layer's: the dense layer of equal work at an even split (imbalance 1, the least), its
 * router and exchange left out; the least GEMM multiplier also over the experts' own inner
 * dimensions (h and their width), which the dense layer's do not have. */
static double analytic_token_floor(const cost_model *cm, cost_component c)
{
    if (c != COMP_MOE) return token_floor_of(cm, &cm->model, c);
    const model_spec *m = &cm->model;
    if (!model_is_moe(m)) return 0;
    model_spec dense = *m;
    dense.glu = 1;
    dense.ffn = (int)fmax(1, lround(m->experts_per_token * (double)m->expert_ffn + m->shared_ffn));
    double floor = token_floor_of(cm, &dense, COMP_ENCODER);
    /* the experts' GEMMs may run at a K (their width) the equal dense layer's do not: scale the
     * GEMM part down where that K's factor is smaller (a lower bound stays one) */
    const gpu_spec *gpu = &cm->hw.gpu;
    int fp8 = cm->precision == PRECISION_FP8;
    if (gpu->gemm_k0 > 0 || (fp8 && gpu->fp8_gemm_k0 > 0)) {
        double mf, mb, want = fmin(1 / cost_gemm_shape_eff(gpu, fp8, m->expert_ffn),
                                   1 / cost_gemm_shape_eff(gpu, fp8, m->hidden)) /
                              fit_layer_cost(cm)->ref_fwd;
        gemm_floor_multipliers(cm, &dense, COMP_ENCODER, fp8, &mf, &mb);
        if (want < mf && mf > 0) floor *= want / mf;
    }
    return floor;
}

static void analytic_release(cost_model *cm)
{
    free(cm->impl);
    cm->impl = NULL;
}

static const cost_ops ANALYTIC_OPS = {"analytic", 1, 1, 1, 1, analytic_query, analytic_token_floor,
                                       analytic_release};

const analytic_params *cost_analytic_params(const cost_model *cm)
{
    return cm && cm->ops == &ANALYTIC_OPS ? &((const analytic *)cm->impl)->p : NULL;
}

dp_status cost_analytic_new(const model_spec *m, const cluster_spec *hw, int tp,
                            recompute_mode rc, const analytic_params *p, cost_model **out,
                            dp_err *err)
{
    *out = NULL;
    if (tp < 1) return dp_fail(err, DP_ERR_INVALID, "--tp must be at least 1");
    mesh layout = mesh_of(tp, 1, 1, 1); /* what tp needs of the model: the layout rule */
    dp_status ok = mesh_check_model(m, &layout, "--tp", err);
    if (ok != DP_OK) {
        size_t at = err ? strlen(err->msg) : 0;
        if (err && tp > hw->gpus_per_node) /* the hint's tp: and what the asked one would cost */
            snprintf(err->msg + at, sizeof err->msg - at, "; and a tensor-parallel group wider "
                     "than a node's GPUs runs its all-reduces over the NICs");
        return ok;
    }
    cost_model *cm = calloc(1, sizeof *cm);
    if (cm) cm->serial = cost_model_next_serial(), cm->cp = 1, cm->grad_bytes = 2, cm->attn_speed = 1;
    analytic *a = calloc(1, sizeof *a);
    if (!cm || !a) {
        free(cm), free(a);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    a->p = *p;
    cm->ops = &ANALYTIC_OPS;
    cm->model = *m;
    cm->hw = *hw;
    cm->tp = tp;
    cm->recompute = rc;
    cm->attn = hw->gpu.attn;
    cm->overlap = COST_OVERLAP_DEFAULT;
    cm->seq_parallel = 1;
    cm->impl = a;
    cm->param_mb[COMP_ENCODER] = 2.0 * (double)model_layer_params(m, 0) / tp / 1e6;
    cm->param_mb[COMP_DECODER] = m->dec_layers ? 2.0 * (double)model_layer_params(m, 1) / tp / 1e6 : 0;
    cm->param_mb[COMP_MOE] = cost_moe_param_mb(m, tp, 1, 1); /* every expert: --ep sets it */
    cm->ep = 1;
    cm->ep_group = comm_group_flat(1, 0);
    cm->embedding_param_mb = 2.0 * (double)model_embedding_params(m) / tp / 1e6;
    *out = cm;
    return DP_OK;
}

dp_status cost_fit_parse(const char *text, const char *name, const model_spec *m,
                         const cluster_spec *run_hw, int want_tp, int want_rc, cost_model **out,
                         dp_err *err)
{
    dp_status st = DP_OK;
    cJSON *root = NULL;
    *out = NULL;
    TRY(json_parse_object(text, name, &root, err));
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(root, "kind");
    if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "analytic") != 0) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: field \"kind\" must be \"analytic\"", name);
        goto out;
    }
    const cJSON *hwname = cJSON_GetObjectItemCaseSensitive(root, "hw");
    cluster_spec hw;
    if (!cJSON_IsString(hwname)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: missing field \"hw\" (a hardware preset)", name);
        goto out;
    }
    TRY(cluster_resolve(hwname->valuestring, &hw, err));
    if (run_hw) { /* the run's cluster (its links, nodes, memory), on the GPU the fit describes */
        if (strcmp(run_hw->gpu.name, hw.gpu.name) != 0) {
            st = dp_fail(err, DP_ERR_INVALID, "%s was fitted on %s (\"hw\": \"%s\"), but --hw %s "
                         "has %s: its efficiencies describe another GPU\nhint: a --hw of %s GPUs, or "
                         "fit a profile of %s (dprun profile, then dpsim calibrate)", name,
                         hw.gpu.name, hwname->valuestring, run_hw->name, run_hw->gpu.name,
                         hw.gpu.name, run_hw->gpu.name);
            goto out;
        }
        hw = *run_hw;
    }
    int tp;
    TRY(json_int(root, "tp", name, 1, 1 << 16, 1, &tp, err));
    const cJSON *rcj = cJSON_GetObjectItemCaseSensitive(root, "recompute");
    recompute_mode rc = RECOMPUTE_NONE;
    if (rcj && (!cJSON_IsString(rcj) || recompute_parse(rcj->valuestring, &rc) != 0)) {
        st = dp_fail(err, DP_ERR_PARSE,
                     "%s: field \"recompute\" must be \"none\", \"selective\" or \"full\"", name);
        goto out;
    }
    const cJSON *pj = cJSON_GetObjectItemCaseSensitive(root, "params");
    if (!cJSON_IsObject(pj)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: missing object \"params\"", name);
        goto out;
    }
    analytic_params p;
    analytic_params_default(&p);
    double arr[ANALYTIC_N_PARAMS];
    analytic_params_to_array(&p, arr);
    for (int i = 0; i < ANALYTIC_N_PARAMS; i++) /* each one: a fit states all six */
        TRY(json_double(pj, ANALYTIC_PARAM_NAMES[i], name, 0, 1e6, 1, arr[i], &arr[i], err));
    analytic_params_from_array(arr, &p);
    for (int i = 0; i < 3; i++) /* gemm_eff, attn_eff, mem_eff: shares of a peak */
        if (!(arr[i] > 0 && arr[i] <= 1)) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: field \"params.%s\" must be a share in (0, 1], "
                         "not %g", name, ANALYTIC_PARAM_NAMES[i], arr[i]);
            goto out;
        }
    if (!(p.bwd_ratio >= 1)) { /* a backward runs two GEMMs for each of the forward's */
        st = dp_fail(err, DP_ERR_PARSE, "%s: field \"params.bwd_ratio\" must be at least 1 (a "
                     "backward does the forward's work twice over), not %g", name, p.bwd_ratio);
        goto out;
    }
    if (want_tp >= 1) tp = want_tp, rc = (recompute_mode)want_rc;
    TRY(cost_analytic_new(m, &hw, tp, rc, &p, out, err));
out:
    cJSON_Delete(root);
    return st;
}

dp_status cost_fit_load(const char *path, const model_spec *m, const cluster_spec *hw, int tp, int rc,
                        cost_model **out, dp_err *err)
{
    char *text = NULL;
    dp_status st = json_slurp(path, &text, err);
    if (st == DP_OK) st = cost_fit_parse(text, path, m, hw, tp, rc, out, err);
    free(text);
    return st;
}
