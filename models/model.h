/*
 * model.h — transformer shapes: GPT (decoder-only) and T5 (encoder-decoder).
 *
 * A model_spec holds what the cost and memory formulas need: layer counts, widths and vocabulary.
 * It comes from a preset (model_preset), a JSON file in the paper's own key names, or a Hugging Face
 * config.json.
 *
 * JSON spec (the keys of the DynaPipe artifact's experiment_configs/model_configs):
 *   {"name": "my-gpt", "arch": "gpt", "num_layers": 16, "hidden_size": 4096,
 *    "num_attn_heads": 32, "kv_channels": 128, "ffn_hidden_size": 16384, "vocab_size": 50257}
 * T5 uses "encoder_num_layers" and "decoder_num_layers" instead of "num_layers" (and "arch": "t5"
 * is then implied). "name", "arch", "kv_channels" (default hidden/heads), "ffn_hidden_size"
 * (default 4*hidden), "vocab_size" (GPT 50257, T5 32128), "max_position_embeddings" (the context:
 * GPT 2048, T5 0 = none), "position_embedding_type" (Megatron's: "learned_absolute", the default,
 * or "rope"), "glu" (false), "num_query_groups" (key/value heads for grouped-query attention, Megatron's
 * name; default the heads), "untie_embeddings_and_output_weights" (false: the LM head is the
 * word embedding), "normalization" (Megatron's: "LayerNorm", the default, or "RMSNorm"),
 * "add_bias_linear" (true: every projection has a bias), "rotary_base" (10000; with rope),
 * "norm_epsilon" (1e-5), "sliding_window" (0 or null: full attention) and "flash_attention"
 * (model_spec.flash_attn) are optional; so are a mixture of experts' and latent attention's
 * (model_spec's fields below): "num_experts", "moe_router_topk" (required with experts),
 * "moe_ffn_hidden_size" (ffn_hidden_size), "moe_shared_expert_intermediate_size" (0),
 * "moe_shared_expert_gate", "moe_router_bias", "moe_expert_bias" (false), "moe_first_dense_layers"
 * (0), "moe_layer_freq" (1), "moe_layer_phase" (0), "moe_router_num_groups" and
 * "moe_router_group_topk" (0: no group limit), "kv_lora_rank" (0: none), "q_lora_rank",
 * "qk_pos_emb_head_dim", "v_head_dim", "qk_layernorm" and "attention_sinks" (false).
 *
 * Hugging Face config.json:
 *   GPT-2 kind (n_layer, n_embd, n_head, n_inner): GPT-BigCode's multi_query is one key/value
 *   head, GPT-J's rotary_dim rotary positions; tie_word_embeddings (default true).
 *   LLaMA kind (num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, head_dim;
 *   a gated MLP) with num_key_value_heads (grouped-query attention), rope_theta (10000) and
 *   tie_word_embeddings (default: untied for the llama, mistral and qwen2 model types, tied
 *   otherwise, gemma included); those three, gemma and any config with an rms_norm_eps (phi3,
 *   qwen3) have RMSNorm and no biases unless attention_bias or mlp_bias say so (qwen2's default:
 *   biases, as its QKV projection has them). gpt_neox, phi, starcoder2, opt and falcon have an
 *   ungated MLP and layer norms with biases (unless falcon's "bias" is false); opt its MLP's
 *   width in ffn_dim and learned positions; falcon's multi_query or num_kv_heads.
 *   T5 (d_model, num_layers, num_decoder_layers, d_ff, num_heads, d_kv; tie_word_embeddings,
 *   default true).
 *   Every kind: the norms' epsilon from rms_norm_eps, layer_norm_eps, layer_norm_epsilon or
 *   norm_epsilon, the first the config has (1e-5 where none).
 * Mixtures of experts (a positive num_local_experts, num_experts or n_routed_experts; the
 * experts a token runs, num_experts_per_tok or gpt-oss's experts_per_token): Mixtral, Qwen2-MoE
 * and Qwen3-MoE (moe_intermediate_size; shared_expert_intermediate_size with its gate;
 * decoder_sparse_step: layer i is a MoE layer where (i + 1) % step == 0; mlp_only_layers must be
 * empty), DeepSeek-V2/V3 (first_k_dense_replace dense layers, then every moe_layer_freq-th;
 * n_group and topk_group, its group-limited router;
 * n_shared_experts of moe_intermediate_size; topk_method noaux_tc's per-expert score bias;
 * multi-head latent attention: q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
 * v_head_dim) and gpt-oss (biases on the router and every expert, a sink logit per head; its
 * alternating sliding layers are costed as full attention). An expert's MLP is gated, of width
 * moe_intermediate_size (else intermediate_size). Their parameters, total and active per token,
 * and FLOPs are counted (dpsim models --show); the analytic cost model plans them (COMP_MOE,
 * --ep; latent attention too), measured profiles refuse them (model_check_dense), dprun runs those
 * whose every layer routes to experts alone (runtime/exec.h rt_check_moe).
 * DeepSeek-V3's multi-token-prediction
 * module (num_nextn_predict_layers) is left out, as its published 671B leave it. A model type or
 * architecture that says experts (mixtral, *moe*) without a count is refused. Qwen3's per-head
 * query and key norms (qk_norm) are counted. A sliding attention window (sliding_window:
 * Mistral-7B-v0.1's 4096; for qwen model types only where use_sliding_window, false by default,
 * says so) is kept, and sequences longer than it are refused (model_check_seqlen).
 *
 * Parameter counts follow Megatron-LM (biases and two layer norms per block):
 *   GPT layer    = h*hk + 2h*hkv + hk + 2hkv  +  hk*h + h  +  m*h*f + (m-1)*f + h  +  4h
 *                  (no_bias: without the bias terms hk + 2hkv, h, (m-1)*f + h; rmsnorm: a norm
 *                  has h parameters, not 2h, here and in the final norms; Llama-2-7B then comes
 *                  out at its model card's 6,738,415,616)
 *   T5 encoder   = the same with bidirectional attention
 *   T5 decoder   = GPT layer + cross-attention (h*hk*4 + 3hk + h ... as self-attention) + 2h (LN)
 *   embedding    = V*h + positions*h (learned positions: GPT without rope); an untied LM head
 *                  adds V*h
 *   MoE layer    = attention + norms + router h*E (+ E with its bias) + the shared expert's gated
 *                  MLP (+ h for its gate) + E experts' gated MLPs (experts_per_token of them for
 *                  the parameters a token uses; their biases with expert_bias)
 *   latent attn  = h*ql + ql + ql*a*dk (or h*a*dk without ql) + h*(kl + r) + kl + kl*a*(dk - r +
 *                  dv) + a*dv*h, dk = kv_channels, r = qk_rope_dim, dv = v_head_dim; a MoE or
 *                  latent model's FLOPs count the parameters a token uses and attention's s x s
 *                  at 2 x a x (dk + dv) per entry
 * where hk = heads * kv_channels, hkv = kv_heads * kv_channels (= hk without grouped-query
 * attention), f = ffn, m = 2 (3 with a gated MLP). GPT-2 124M comes out at
 * 124,439,808 parameters, T5-11B's layers at the calibration files' param_mb_per_layer.
 */
#ifndef MODEL_H
#define MODEL_H

#include <stdint.h>

#include "../common/dp.h"

#define MODEL_NAME_MAX 64

typedef enum model_arch { ARCH_GPT, ARCH_T5 } model_arch;

typedef struct model_spec {
    char name[MODEL_NAME_MAX];
    model_arch arch;
    int enc_layers;  /* GPT: its (decoder-only) layers; T5: encoder layers */
    int dec_layers;  /* T5: decoder layers; GPT: 0 */
    int hidden;      /* h, model width */
    int heads;       /* a, attention heads */
    int kv_channels; /* per-head width; heads * kv_channels need not equal hidden (T5-11B) */
    int ffn;         /* f, MLP inner width */
    int vocab;       /* V */
    int glu;         /* 1: gated MLP with three matrices (LLaMA); 0: two (GPT, T5) */
    int positions;   /* the longest sequence the model takes, tokens (max_position_embeddings):
                      * with learned positions also the rows of their table (GPT-2: 1024); T5's
                      * relative positions: 0, no limit */
    char profile[64]; /* preset's measured profile under models/profiles/, "" if none */
    int kv_heads;    /* key/value heads (grouped-query attention); 0: as many as heads */
    int untied_head; /* 1: the LM head has its own weights (LLaMA); 0: tied to the embedding */
    int rope;        /* 1: rotary position embeddings (LLaMA), no learned table; 0: learned */
    int rmsnorm;     /* 1: RMSNorm (a scale, no bias: LLaMA); 0: layer norm (scale and bias) */
    int no_bias;     /* 1: the projections have no biases (LLaMA; Megatron's
                      * --disable-bias-linear); 0: every projection has one */
    double rope_base; /* rotary: the angles' base (Megatron's rotary_base, Hugging Face's
                       * rope_theta: Llama-3 500000); 0: MODEL_ROPE_BASE, LLaMA-2's 10000 */
    double norm_eps; /* the norms' epsilon (Megatron's norm_epsilon; Hugging Face's rms_norm_eps,
                      * layer_norm_eps, layer_norm_epsilon or norm_epsilon: Qwen2's and Gemma's
                      * 1e-6); 0: MODEL_NORM_EPS. What dprun's layers compute with, not what they
                      * cost */
    int window;      /* sliding-window attention: a token attends to at most this many tokens
                      * (Hugging Face's sliding_window; Mistral-7B-v0.1: 4096); 0: to all before it.
                      * dpsim's costs and dprun's layers are full attention, the same as the
                      * window's up to its length: longer sequences are refused */
    int flash_attn;  /* 1: trained with FlashAttention (fused attention: no s x s scores stored,
                      * attention timed as the GPU's fused kernel runs it; cost.h): the LLaMA-kind
                      * Hugging Face configs (llama, mistral, qwen, gemma, phi3, …, whose
                      * trainers all run it) and presets, and a dpsim spec's "flash_attention"
                      * (default: true with rotary positions); 0: unfused attention (the paper's
                      * GPT and T5 shapes, measured without it; GPT-2 kind; T5's relative
                      * position bias, which FlashAttention does not take) */
    int fp16;        /* 1: trained in fp16 mixed precision, the default --precision (cost.h): the
                      * paper's shapes, whose A100 profiles DynaPipe measured in fp16, and the
                      * validation runtime's tiny models; a dpsim spec's "precision": "fp16".
                      * 0: bf16, what 2026 trainers run */
    /* A mixture of experts (experts 0: dense). A MoE layer's MLP is `experts` gated experts of
     * width expert_ffn, experts_per_token of them run per token, beside an always-run shared
     * expert of width shared_ffn (0: none; shared_gate: with Qwen2-MoE's hidden x 1 sigmoid
     * gate) and a router (hidden x experts; router_bias: plus a bias per expert: gpt-oss,
     * DeepSeek-V3's score correction). Layer i (from 0) is a MoE layer where i >= moe_first and
     * i % moe_freq == moe_phase; the others have the dense MLP of width ffn. expert_bias: the
     * experts' projections have biases (gpt-oss), whatever no_bias says of the rest. */
    int experts, experts_per_token, expert_ffn, shared_ffn, shared_gate, router_bias, expert_bias;
    int moe_first, moe_freq, moe_phase; /* moe_freq 0 reads as 1 */
    /* A group-limited router (DeepSeek-V3's node-limited routing, Megatron-Core's
     * moe_router_num_groups / moe_router_group_topk, a config's n_group / topk_group): the experts
     * in moe_groups equal groups in expert order, a token's experts among the moe_group_topk
     * groups it scores highest. 0: none. What the exchange pays (moe.h moe_remote_nodes). */
    int moe_groups, moe_group_topk;
    /* Multi-head latent attention (DeepSeek-V2/V3; kv_lora 0: none): queries through a rank
     * q_lora down-projection (0: a full projection), keys and values through a shared rank
     * kv_lora latent with qk_rope_dim rotary dimensions beside it; a query or key head is
     * kv_channels wide (the no-position and rotary parts), a value head v_head_dim. */
    int q_lora, kv_lora, qk_rope_dim, v_head_dim;
    int qk_norm;     /* Qwen3: an RMSNorm on each head's query and key (kv_channels each) */
    int attn_sinks;  /* gpt-oss: a learned sink logit per head */
} model_spec;

/* Key/value heads: kv_heads, or heads when 0. */
int model_kv_heads(const model_spec *m);

/* The attention's widths per token as its cost sees them: the queries' and the context's mean
 * (model_attn_q_width) and the keys' and values' mean (model_attn_kv_width), so that QK^T and PV
 * are 4 x tokens x scores' keys x the q width, and the four tensors 2 x (q + kv width) elements.
 * Standard and grouped-query attention: heads x kv_channels and kv_heads x kv_channels. Latent
 * attention (kv_lora > 0): every head has its own keys (up-projected from the latent) of
 * kv_channels and values of v_head_dim, so both are heads x (kv_channels + v_head_dim) / 2. */
double model_attn_q_width(const model_spec *m);
double model_attn_kv_width(const model_spec *m);

/* The rotary embeddings' base: rope_base, or MODEL_ROPE_BASE when 0; 0 without rope. */
#define MODEL_ROPE_BASE 10000.0
double model_rope_base(const model_spec *m);

/* The norms' epsilon: norm_eps, or MODEL_NORM_EPS (Megatron's and LLaMA-2's 1e-5) when 0. */
#define MODEL_NORM_EPS 1e-5
double model_norm_eps(const model_spec *m);

/* Refuses sequences of seqlen tokens (what: what they are, for the message: "--max-seqlen 8192")
 * that the model does not take (longer than its max_position_embeddings) or that dpsim cannot
 * cost for it (model_check_window). DP_OK, or DP_ERR_INVALID with the limit and its field. */
dp_status model_check_seqlen(const model_spec *m, int seqlen, const char *what, dp_err *err);
/* The window alone: a span of seqlen tokens longer than the model's sliding attention window is
 * refused (the full attention dpsim counts would be more work than the window's). */
dp_status model_check_window(const model_spec *m, int seqlen, const char *what, dp_err *err);

/* Total layers (enc + dec). */
int model_layers(const model_spec *m);

/* Whether m is a mixture of experts, and whether its GPT layer i (from 0) is a MoE layer; how
 * many of its layers are. */
int model_is_moe(const model_spec *m);
int model_moe_layer(const model_spec *m, int layer);
int model_moe_layers(const model_spec *m);

/* What dprun runs and a measured profile holds: a dense model. DP_ERR_INVALID for a mixture of
 * experts, naming `who` ("dprun", "a measured profile") and the analytic cost model, which plans
 * experts (cost.h cost_model_set_moe). Asked by dprun and a profile's loader. */
dp_status model_check_dense(const model_spec *m, const char *who, dp_err *err);

/* Parameters of one norm: 2h for a layer norm (scale and bias), h for RMSNorm. */
int64_t model_norm_params(const model_spec *m);

/* Parameters of one layer of the given kind: 0 encoder/GPT layer, 1 T5 decoder layer; of a mixture
 * of experts, a dense layer's (model_layers_params counts each layer as it is). */
int64_t model_layer_params(const model_spec *m, int decoder);
/* A MoE layer's parameters in parts: what tensor parallelism splits (attention, the shared
 * expert), what it does not (norms, router), and one routed expert's (split by expert
 * parallelism instead: each expert whole on one GPU). */
void model_moe_layer_parts(const model_spec *m, int64_t *split, int64_t *whole, int64_t *expert);

/* Parameters of all the layers (a MoE layer with every expert), and those a token passes
 * through (a MoE layer's attention, router, shared expert and experts_per_token experts): equal
 * for a dense model. */
int64_t model_layers_params(const model_spec *m);
int64_t model_layers_active_params(const model_spec *m);

/* Parameters of the embedding (word + GPT positions). */
int64_t model_embedding_params(const model_spec *m);

/* Whole-model parameters: layers + embedding + final layer norm(s). The LM head is tied to the
 * word embedding and not counted twice. */
int64_t model_total_params(const model_spec *m);

/* The parameters one token uses: model_total_params with a MoE layer's unrouted experts left
 * out (equal for a dense model); *no_embedding (may be NULL): the same without the input
 * embedding table, which a token looks up rather than multiplies (gpt-oss's model card counts its
 * 5.1B "active" so; Mixtral's 12.9B and DeepSeek-V3's 37B count it). */
int64_t model_active_params(const model_spec *m, int64_t *no_embedding);

/* How model FLOPs count attention's two s x s products (QK^T and the scores times V).
 *   FLOPS_CAUSAL     causal self-attention (GPT; T5's decoder) at half the full square, s^2 / 2
 *                    entries per head: the work a causal kernel does and the count its benchmark
 *                    tables use (FlashAttention, cuDNN); T5's encoder and cross attention whole.
 *                    dpsim's MFU and HFU
 *   FLOPS_NONCAUSAL  every attention at the full square, as PaLM (Chowdhery et al. 2022, App. B)
 *                    and Megatron-LM's num_floating_point_operations count it: the convention of
 *                    most published MFU tables, printed beside dpsim's for comparison.
 * The two differ only in attention, and more at long sequences (Llama-3.1-8B: 2.2% at 2k tokens,
 * 26% at 128k). */
typedef enum flops_count { FLOPS_CAUSAL, FLOPS_NONCAUSAL } flops_count;

/* Model FLOPs of training on one sample of enc input (GPT: all) and dec target tokens, forward and
 * backward, with no recomputation and no padding: 6 x the parameters a token passes through (its
 * layers, and the LM head for the tokens it scores) per token, plus attention's 12 x L x heads x
 * kv_channels x len^2 (PaLM, Chowdhery et al. 2022, App. B; T5 adds the decoder's cross-attention
 * 12 x L_dec x heads x kv x enc x dec), its self-attention halved where causal under
 * FLOPS_CAUSAL. The figure MFU divides. */
double model_train_flops(const model_spec *m, int32_t enc, int32_t dec, flops_count how);

/* The forward FLOPs a recompute adds to training on that sample when it reruns the share dense of
 * each layer's GEMMs (2 x the layers' parameters per token; not the LM head's) and the share attn
 * of its attention (4 x L x heads x kv_channels x len^2, causal self-attention halved): full 1 and
 * 1, Megatron's selective 0 and 1 (the attention core), torchtitan's per-op policy its GEMM share
 * and 0 (cost.h cost_rerun_shares says which). Model FLOPs (FLOPS_CAUSAL) plus these are the
 * hardware FLOPs of HFU, what the kernels ran (Megatron's "hardware FLOPs", Narayanan et al. 2021,
 * eq. 3, whose 96 = 72 x 4/3 counts full recompute; Korthikanti et al. 2022), so that HFU never
 * exceeds the GEMMs' best share of the peak. */
double model_recompute_flops(const model_spec *m, int32_t enc, int32_t dec, double dense,
                             double attn);

/* Looks a preset up by name ("gpt-6.7b-16l"). Returns NULL when there is none. */
const model_spec *model_preset(const char *name);

/* The preset table, for listing. */
const model_spec *model_presets(int *count);

/* Checks ranges ("hidden_size must be positive"); where names the source in messages. */
/* The largest model dpsim accepts, parameters (GPT-175B is 1.75e11): sizes derived from a spec
 * are then far from int64's range. */
#define MODEL_MAX_PARAMS 1e14

dp_status model_validate(const model_spec *m, const char *where, dp_err *err);

/* Reads a JSON spec file (format above). */
dp_status model_read_json(const char *path, model_spec *m, dp_err *err);

/* Parses JSON text (for fuzzers and tests); name is used in messages. */
dp_status model_parse_json(const char *text, const char *name, model_spec *m, dp_err *err);

/* Writes m as a JSON spec (round-trips through model_read_json). */
dp_status model_write_json(const model_spec *m, const char *path, dp_err *err);
/* The spec as the JSON object model_parse_json reads (the caller deletes it); NULL: no memory. */
struct cJSON;
struct cJSON *model_to_json(const model_spec *m);

/* Imports a Hugging Face config.json. */
dp_status model_import_hf(const char *path, model_spec *m, dp_err *err);
dp_status model_parse_hf(const char *text, const char *name, model_spec *m, dp_err *err);

/* Resolves NAME as a preset, or else as a JSON spec or HF config.json file. */
dp_status model_resolve(const char *name_or_path, model_spec *m, dp_err *err);

const char *model_arch_name(model_arch a);

#endif /* MODEL_H */
