#include "model.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_util.h"

#define GPT_VOCAB 50257
#define T5_VOCAB 32128
#define A100_GPT "a100_gpt_6.7b_profile.csv"
#define A100_T5 "a100_t5_11b_profile.csv"

/* Presets: the paper's shapes (shared/paper/model_configs, DynaPipe artifact) and a few common
 * ones. {name, arch, enc, dec, hidden, heads, kv, ffn, vocab, glu, positions, profile, kv_heads,
 * untied_head, rope, rmsnorm, no_bias, rope_base, norm_eps, window, flash_attn, fp16}. The paper's GPT shapes
 * learn 8192 positions: it runs them at max lengths up to 8192, which Megatron allows only with a
 * position table that long. DENSE: no experts, no latent attention (the fields after fp16). */
#define DENSE 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
static const model_spec PRESETS[] = {
    {"gpt-6.7b-16l", ARCH_GPT, 16, 0, 4096, 32, 128, 16384, GPT_VOCAB, 0, 8192, A100_GPT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    {"gpt-6.7b-32l", ARCH_GPT, 32, 0, 4096, 32, 128, 16384, GPT_VOCAB, 0, 8192, A100_GPT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    {"gpt-13b-40l", ARCH_GPT, 40, 0, 5140, 40, 128, 20560, GPT_VOCAB, 0, 8192, "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    {"gpt-175b-16l", ARCH_GPT, 16, 0, 12288, 96, 128, 49152, GPT_VOCAB, 0, 8192, "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    {"t5-11b-8l", ARCH_T5, 8, 8, 1024, 128, 128, 65536, T5_VOCAB, 0, 0, A100_T5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    {"t5-11b-12l", ARCH_T5, 12, 12, 1024, 128, 128, 65536, T5_VOCAB, 0, 0, A100_T5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    {"t5-11b-24l", ARCH_T5, 24, 24, 1024, 128, 128, 65536, T5_VOCAB, 0, 0, A100_T5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    {"t5-11b-48l", ARCH_T5, 48, 48, 1024, 128, 128, 65536, T5_VOCAB, 0, 0, A100_T5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    {"t5-11b-96l", ARCH_T5, 96, 96, 1024, 128, 128, 65536, T5_VOCAB, 0, 0, A100_T5, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    /* GPT-3 6.7B as published (32 layers), GPT-2 small, T5 v1.0 base, LLaMA-2 7B. */
    {"gpt-6.7b", ARCH_GPT, 32, 0, 4096, 32, 128, 16384, GPT_VOCAB, 0, 2048, A100_GPT, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    {"gpt2-124m", ARCH_GPT, 12, 0, 768, 12, 64, 3072, GPT_VOCAB, 0, 1024, "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, DENSE},
    {"t5-base", ARCH_T5, 12, 12, 768, 12, 64, 3072, T5_VOCAB, 0, 0, "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, DENSE},
    {"llama2-7b", ARCH_GPT, 32, 0, 4096, 32, 128, 11008, 32000, 1, 4096, "", 0, 1, 1, 1, 1, 10000, 0, 0, 1, 0, DENSE},
    /* Llama-3-8B and Llama-3.1-70B as their config.json files say (grouped-query attention with
     * 8 key/value heads, an untied head, rope_theta 500000): 8,030,261,248 and 70,553,706,496
     * parameters */
    {"llama3-8b", ARCH_GPT, 32, 0, 4096, 32, 128, 14336, 128256, 1, 8192, "", 8, 1, 1, 1, 1, 500000, 0, 0, 1, 0, DENSE},
    /* Llama 3.1 8B: Llama 3's shapes with a 131,072-token context (its config.json, rope scaling) */
    {"llama3.1-8b", ARCH_GPT, 32, 0, 4096, 32, 128, 14336, 128256, 1, 131072, "", 8, 1, 1, 1, 1, 500000, 0, 0, 1, 0, DENSE},
    {"llama3.1-70b", ARCH_GPT, 80, 0, 8192, 64, 128, 28672, 128256, 1, 131072, "", 8, 1, 1, 1, 1, 500000, 0, 0, 1, 0, DENSE},
    /* Llama 3.1 405B as its config.json says: 405,853,388,800 parameters */
    {"llama3.1-405b", ARCH_GPT, 126, 0, 16384, 128, 128, 53248, 128256, 1, 131072, "", 8, 1, 1, 1, 1, 500000, 0, 0, 1, 0, DENSE},
    /* Small enough for the CPU validation runtime on a 2-core machine. */
    {"gpt-tiny", ARCH_GPT, 4, 0, 256, 4, 64, 1024, 1024, 0, 2048, "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
    {"t5-tiny", ARCH_T5, 2, 2, 256, 4, 64, 1024, 1024, 0, 0, "", 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, DENSE},
};
#define N_PRESETS ((int)(sizeof PRESETS / sizeof PRESETS[0]))

const char *model_arch_name(model_arch a)
{
    return a == ARCH_T5 ? "t5" : "gpt";
}

dp_status model_check_window(const model_spec *m, int seqlen, const char *what, dp_err *err)
{
    if (m->window > 0 && seqlen > m->window)
        return dp_fail(err, DP_ERR_INVALID, "%s is longer than %s's sliding attention window of %d "
                       "tokens (its sliding_window): dpsim costs full attention, which past the "
                       "window is more work than the model does", what, m->name, m->window);
    return DP_OK;
}

dp_status model_check_seqlen(const model_spec *m, int seqlen, const char *what, dp_err *err)
{
    if (m->positions > 0 && seqlen > m->positions)
        return dp_fail(err, DP_ERR_INVALID, "%s is longer than the %d tokens %s takes (its "
                       "max_position_embeddings)", what, m->positions, m->name);
    return model_check_window(m, seqlen, what, err);
}

int model_layers(const model_spec *m)
{
    return m->enc_layers + m->dec_layers;
}

int model_kv_heads(const model_spec *m)
{
    return m->kv_heads > 0 ? m->kv_heads : m->heads;
}

double model_attn_q_width(const model_spec *m)
{
    if (m->kv_lora > 0) return (double)m->heads * (m->kv_channels + m->v_head_dim) / 2;
    return (double)m->heads * m->kv_channels;
}

double model_attn_kv_width(const model_spec *m)
{
    if (m->kv_lora > 0) return model_attn_q_width(m);
    return (double)model_kv_heads(m) * m->kv_channels;
}

double model_norm_eps(const model_spec *m)
{
    return m->norm_eps > 0 ? m->norm_eps : MODEL_NORM_EPS;
}

double model_rope_base(const model_spec *m)
{
    return !m->rope ? 0 : m->rope_base > 0 ? m->rope_base : MODEL_ROPE_BASE;
}

/* One attention block: Q, K, V (K and V over the key/value heads) and output projections, with
 * their biases unless no_bias; Qwen3's query and key norms, gpt-oss's sinks. Multi-head latent
 * attention (DeepSeek): the query's down-projection, its norm and up-projection (or one
 * projection), the keys' and values' shared latent with the rotary keys beside it, its norm and
 * up-projection, the output projection. */
static int64_t attention_params(const model_spec *m)
{
    int64_t h = m->hidden, H = m->heads, hk = H * m->kv_channels,
            hkv = (int64_t)model_kv_heads(m) * m->kv_channels;
    int64_t extra = (m->qk_norm ? 2 * (int64_t)m->kv_channels : 0) + (m->attn_sinks ? H : 0);
    if (m->kv_lora > 0) {
        int64_t ql = m->q_lora, kl = m->kv_lora, nope = m->kv_channels - m->qk_rope_dim;
        int64_t q = ql > 0 ? h * ql + ql + ql * hk : h * hk;
        int64_t kv = h * (kl + m->qk_rope_dim) + kl + kl * H * (nope + m->v_head_dim);
        return q + kv + H * m->v_head_dim * h + extra;
    }
    return h * hk + 2 * h * hkv + hk * h + (m->no_bias ? 0 : hk + 2 * hkv + h) + extra;
}

int model_is_moe(const model_spec *m)
{
    return m->experts > 0;
}

int model_moe_layer(const model_spec *m, int layer)
{
    int freq = m->moe_freq > 0 ? m->moe_freq : 1;
    return model_is_moe(m) && m->arch == ARCH_GPT && layer >= m->moe_first &&
           layer % freq == m->moe_phase;
}

int model_moe_layers(const model_spec *m)
{
    if (!model_is_moe(m)) return 0; /* (model_train_flops asks it for every sample) */
    int n = 0;
    for (int i = 0; i < m->enc_layers; i++) n += model_moe_layer(m, i);
    return n;
}

dp_status model_check_dense(const model_spec *m, const char *who, dp_err *err)
{
    if (!model_is_moe(m)) return DP_OK;
    return dp_fail(err, DP_ERR_INVALID, "%s is a mixture of experts (%d experts, %d a token), and "
                   "%s has no expert layers: dpsim plans and simulates it with the analytic cost "
                   "model (--ep for expert parallelism)\nhint: dpsim sim --analytic --model %s",
                   m->name, m->experts, m->experts_per_token, who, m->name);
}

int64_t model_norm_params(const model_spec *m)
{
    return (m->rmsnorm ? 1 : 2) * (int64_t)m->hidden;
}

/* An MLP of width f: its matrices (three gated), and their biases where it has them. */
static int64_t mlp_params(const model_spec *m, int64_t f, int bias)
{
    int64_t h = m->hidden, mats = m->glu ? 3 : 2;
    return mats * h * f + (bias ? (mats - 1) * f + h : 0);
}

int64_t model_layer_params(const model_spec *m, int decoder)
{
    int64_t p = attention_params(m) + mlp_params(m, m->ffn, !m->no_bias) + 2 * model_norm_params(m);
    if (decoder) p += attention_params(m) + model_norm_params(m); /* cross-attention, its norm */
    return p;
}

/* A MoE layer's parameters with `routed` of its experts (all of them, or the ones a token runs):
 * the layer's attention and norms, the router, the shared expert and its gate, the experts. */
static int64_t moe_layer_params(const model_spec *m, int routed)
{
    int64_t h = m->hidden, e = m->experts;
    int64_t router = h * e + (m->router_bias ? e : 0);
    int64_t shared = m->shared_ffn > 0 ? mlp_params(m, m->shared_ffn, 0) + (m->shared_gate ? h : 0) : 0;
    return attention_params(m) + 2 * model_norm_params(m) + router + shared +
           routed * mlp_params(m, m->expert_ffn, m->expert_bias);
}

void model_moe_layer_parts(const model_spec *m, int64_t *split, int64_t *whole, int64_t *expert)
{
    int64_t h = m->hidden, e = m->experts;
    int64_t shared =
        m->shared_ffn > 0 ? mlp_params(m, m->shared_ffn, 0) + (m->shared_gate ? h : 0) : 0;
    *split = attention_params(m) + shared;
    *whole = 2 * model_norm_params(m) + h * e + (m->router_bias ? e : 0);
    *expert = mlp_params(m, m->expert_ffn, m->expert_bias);
}

/* The layers' parameters, each MoE layer with `routed` experts (-1: all of them). */
static int64_t layers_params(const model_spec *m, int routed)
{
    int moe = model_moe_layers(m);
    int64_t p = (int64_t)(m->enc_layers - moe) * model_layer_params(m, 0) +
                (int64_t)m->dec_layers * model_layer_params(m, 1);
    return p + moe * moe_layer_params(m, routed < 0 ? m->experts : routed);
}

int64_t model_layers_params(const model_spec *m)
{
    return layers_params(m, -1);
}

int64_t model_layers_active_params(const model_spec *m)
{
    return layers_params(m, m->experts_per_token);
}

int64_t model_embedding_params(const model_spec *m)
{
    return (int64_t)m->vocab * m->hidden + (m->rope ? 0 : (int64_t)m->positions * m->hidden);
}

int64_t model_total_params(const model_spec *m)
{
    int64_t final_ln = (m->arch == ARCH_T5 ? 2 : 1) * model_norm_params(m);
    int64_t head = m->untied_head ? (int64_t)m->vocab * m->hidden : 0; /* its own weights */
    return model_layers_params(m) + model_embedding_params(m) + head + final_ln;
}

int64_t model_active_params(const model_spec *m, int64_t *no_embedding)
{
    int64_t all = model_total_params(m) - model_layers_params(m) + model_layers_active_params(m);
    /* the embedding table, when the LM head has its own (a tied head multiplies by it) */
    if (no_embedding) *no_embedding = all - (m->untied_head ? (int64_t)m->vocab * m->hidden : 0);
    return all;
}

const model_spec *model_preset(const char *name)
{
    for (int i = 0; i < N_PRESETS; i++)
        if (strcmp(PRESETS[i].name, name) == 0) return &PRESETS[i];
    return NULL;
}

const model_spec *model_presets(int *count)
{
    *count = N_PRESETS;
    return PRESETS;
}

dp_status model_validate(const model_spec *m, const char *where, dp_err *err)
{
    struct {
        const char *field;
        int value, min;
    } checks[] = {
        {m->arch == ARCH_T5 ? "encoder_num_layers" : "num_layers", m->enc_layers, 1},
        {"decoder_num_layers", m->dec_layers, m->arch == ARCH_T5 ? 1 : 0},
        {"hidden_size", m->hidden, 1},
        {"num_attn_heads", m->heads, 1},
        {"kv_channels", m->kv_channels, 1},
        {"ffn_hidden_size", m->ffn, 1},
        {"vocab_size", m->vocab, 1},
        {"max_position_embeddings", m->positions, 0},
        {"num_query_groups", m->kv_heads, 0},
        {"sliding_window", m->window, 0},
    };
    for (size_t i = 0; i < sizeof checks / sizeof *checks; i++)
        if (checks[i].value < checks[i].min)
            return dp_fail(err, DP_ERR_INVALID, "%s: field \"%s\" is %d, must be at least %d",
                           where, checks[i].field, checks[i].value, checks[i].min);
    if (m->arch == ARCH_GPT && m->dec_layers != 0)
        return dp_fail(err, DP_ERR_INVALID, "%s: a GPT model has no decoder_num_layers", where);
    if (m->kv_heads > m->heads || m->heads % model_kv_heads(m) != 0)
        return dp_fail(err, DP_ERR_INVALID, "%s: %d key/value heads must divide the %d attention "
                       "heads (grouped-query attention)", where, model_kv_heads(m), m->heads);
    /* every field within its range can still multiply past int64: the parameter count, in
     * floating point first, must stay below MODEL_MAX_PARAMS (then the integer sums cannot
     * overflow, nor can bytes = 16 x params) */
    struct {
        const char *field;
        int value, min, max;
    } moe[] = {
        {"num_experts", m->experts, 0, 1 << 20},
        {"moe_router_topk", m->experts_per_token, m->experts > 0, m->experts},
        {"moe_ffn_hidden_size", m->expert_ffn, m->experts > 0, m->experts > 0 ? 1 << 26 : 0},
        {"moe_shared_expert_intermediate_size", m->shared_ffn, 0, m->experts > 0 ? 1 << 26 : 0},
        {"moe_first_dense_layers", m->moe_first, 0, m->experts > 0 ? 1 << 20 : 0},
        {"moe_layer_freq", m->moe_freq, 0, m->experts > 0 ? 1 << 20 : 0},
        {"moe_layer_phase", m->moe_phase, 0, m->moe_freq > 1 ? m->moe_freq - 1 : 0},
        {"kv_lora_rank", m->kv_lora, 0, 1 << 20},
        {"q_lora_rank", m->q_lora, 0, m->kv_lora > 0 ? 1 << 20 : 0},
        {"qk_pos_emb_head_dim", m->qk_rope_dim, m->kv_lora > 0, m->kv_lora > 0 ? m->kv_channels - 1 : 0},
        {"v_head_dim", m->v_head_dim, m->kv_lora > 0, m->kv_lora > 0 ? 1 << 20 : 0},
    };
    for (size_t i = 0; i < sizeof moe / sizeof *moe; i++)
        if (moe[i].value < moe[i].min || moe[i].value > moe[i].max)
            return dp_fail(err, DP_ERR_INVALID, "%s: field \"%s\" is %d, must be in [%d, %d]%s",
                           where, moe[i].field, moe[i].value, moe[i].min, moe[i].max,
                           i < 7 && !m->experts ? " (a dense model: num_experts 0)"
                           : i > 7 && !m->kv_lora ? " (no latent attention: kv_lora_rank 0)" : "");
    if (m->experts > 0 && m->arch != ARCH_GPT)
        return dp_fail(err, DP_ERR_INVALID, "%s: experts in a T5 model: dpsim takes them in GPT "
                       "(decoder-only) models", where);
    if (m->moe_groups < 0 || m->moe_groups > m->experts ||
        (m->moe_groups > 0 && m->experts % m->moe_groups))
        return dp_fail(err, DP_ERR_INVALID, "%s: field \"moe_router_num_groups\" (n_group) is %d: "
                       "it must divide the %d experts (0: no group limit)", where, m->moe_groups,
                       m->experts);
    if (m->moe_group_topk < (m->moe_groups > 0) || m->moe_group_topk > m->moe_groups ||
        (m->moe_groups > 0 &&
         (long long)m->moe_group_topk * (m->experts / m->moe_groups) < m->experts_per_token))
        return dp_fail(err, DP_ERR_INVALID, "%s: field \"moe_router_group_topk\" (topk_group) is "
                       "%d: it must be in [1, %d groups] and its groups hold the %d experts a token "
                       "runs (0 without groups)", where, m->moe_group_topk, m->moe_groups,
                       m->experts_per_token);
    double h = m->hidden, f = m->ffn, hk = (double)m->heads * m->kv_channels;
    double ql = m->q_lora, kl = m->kv_lora, heads = m->heads;
    double attn = 4 * h * hk + 4 * hk + 2 * (double)m->kv_channels + heads + h * ql + ql * hk +
                  h * (kl + m->qk_rope_dim) + kl * heads * ((double)m->kv_channels + m->v_head_dim) +
                  heads * m->v_head_dim * h;
    double mlp = 3 * h * f + 2 * f + 5 * h + (double)m->experts * (3 * h * m->expert_ffn + 3 * m->expert_ffn + h + 1) +
                 3 * h * m->shared_ffn + h;
    double total = (double)m->enc_layers * (attn + mlp) + (double)m->dec_layers * (2 * attn + mlp + 2 * h) +
                   ((double)m->vocab + (m->rope ? 0 : m->positions)) * h;
    if (total > MODEL_MAX_PARAMS)
        return dp_fail(err, DP_ERR_INVALID, "%s: %.3g parameters, more than the %.0e dpsim "
                       "models (the fields are each in range, their product is not)",
                       where, total, MODEL_MAX_PARAMS);
    return DP_OK;
}

/* The model types of the num_hidden_layers kind whose MLP is not gated (two matrices, GELU or
 * ReLU), which keep layer norms and biases too; the others are LLaMA's (SwiGLU, GeGLU). */
static int ungated_mlp(const char *model_type)
{
    static const char *const types[] = {"gpt_neox", "phi", "starcoder2", "opt", "falcon"};
    for (size_t i = 0; i < sizeof types / sizeof *types; i++)
        if (strcmp(model_type, types[i]) == 0) return 1;
    return 0;
}

dp_status model_parse_json(const char *text, const char *name, model_spec *m, dp_err *err)
{
    dp_status st = DP_OK;
    cJSON *root = NULL;
    TRY(json_parse_object(text, name, &root, err));
    memset(m, 0, sizeof *m);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(root, "name");
    snprintf(m->name, sizeof m->name, "%s",
             cJSON_IsString(nm) ? nm->valuestring : "custom");
    int has_dec = cJSON_HasObjectItem(root, "decoder_num_layers");
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(root, "arch");
    if (arch && !(cJSON_IsString(arch) && (strcmp(arch->valuestring, "gpt") == 0 ||
                                           strcmp(arch->valuestring, "t5") == 0))) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: field \"arch\" must be \"gpt\" or \"t5\"", name);
        goto out;
    }
    m->arch = arch ? (strcmp(arch->valuestring, "t5") == 0 ? ARCH_T5 : ARCH_GPT)
                   : (has_dec ? ARCH_T5 : ARCH_GPT);
    if (m->arch == ARCH_T5) {
        TRY(json_int(root, "encoder_num_layers", name, 1, 1 << 20, -1, &m->enc_layers, err));
        TRY(json_int(root, "decoder_num_layers", name, 1, 1 << 20, -1, &m->dec_layers, err));
    } else {
        TRY(json_int(root, "num_layers", name, 1, 1 << 20, -1, &m->enc_layers, err));
    }
    TRY(json_int(root, "hidden_size", name, 1, 1 << 24, -1, &m->hidden, err));
    TRY(json_int(root, "num_attn_heads", name, 1, 1 << 16, -1, &m->heads, err));
    TRY(json_int(root, "kv_channels", name, 1, 1 << 20,
                 m->hidden % m->heads == 0 ? m->hidden / m->heads : -1, &m->kv_channels, err));
    TRY(json_int(root, "ffn_hidden_size", name, 1, 1 << 26, 4 * m->hidden, &m->ffn, err));
    TRY(json_int(root, "vocab_size", name, 1, 1 << 24,
                 m->arch == ARCH_T5 ? T5_VOCAB : GPT_VOCAB, &m->vocab, err));
    TRY(json_int(root, "max_position_embeddings", name, 0, 1 << 24,
                 m->arch == ARCH_T5 ? 0 : 2048, &m->positions, err));
    TRY(json_choice(root, "position_embedding_type", name, "learned_absolute", "rope", &m->rope,
                    err));
    TRY(json_bool(root, "glu", name, 0, &m->glu, err));
    TRY(json_int(root, "num_query_groups", name, 1, 1 << 16, m->heads, &m->kv_heads, err));
    TRY(json_bool(root, "untie_embeddings_and_output_weights", name, 0, &m->untied_head, err));
    TRY(json_choice(root, "normalization", name, "LayerNorm", "RMSNorm", &m->rmsnorm, err));
    TRY(json_double(root, "rotary_base", name, 1, 1e12, 0, MODEL_ROPE_BASE, &m->rope_base, err));
    TRY(json_double(root, "norm_epsilon", name, 1e-30, 1, 0, MODEL_NORM_EPS, &m->norm_eps, err));
    TRY(json_int(root, "sliding_window", name, 0, 1 << 24, 0, &m->window, err)); /* null: none */
    TRY(json_bool(root, "flash_attention", name, m->rope, &m->flash_attn, err));
    TRY(json_choice(root, "precision", name, "bf16", "fp16", &m->fp16, err));
    int bias;
    TRY(json_bool(root, "add_bias_linear", name, 1, &bias, err));
    m->no_bias = !bias;
    /* experts and latent attention (model.h), in Megatron-Core's names where it has them */
    TRY(json_int(root, "num_experts", name, 0, 1 << 20, 0, &m->experts, err));
    TRY(json_int(root, "moe_router_topk", name, 0, 1 << 20, m->experts ? -1 : 0, &m->experts_per_token, err));
    TRY(json_int(root, "moe_ffn_hidden_size", name, 0, 1 << 26, m->experts ? m->ffn : 0, &m->expert_ffn, err));
    TRY(json_int(root, "moe_shared_expert_intermediate_size", name, 0, 1 << 26, 0, &m->shared_ffn, err));
    TRY(json_bool(root, "moe_shared_expert_gate", name, 0, &m->shared_gate, err));
    TRY(json_bool(root, "moe_router_bias", name, 0, &m->router_bias, err));
    TRY(json_bool(root, "moe_expert_bias", name, 0, &m->expert_bias, err));
    TRY(json_int(root, "moe_first_dense_layers", name, 0, 1 << 20, 0, &m->moe_first, err));
    TRY(json_int(root, "moe_layer_freq", name, 0, 1 << 20, m->experts ? 1 : 0, &m->moe_freq, err));
    TRY(json_int(root, "moe_layer_phase", name, 0, 1 << 20, 0, &m->moe_phase, err));
    TRY(json_int(root, "moe_router_num_groups", name, 0, 1 << 20, 0, &m->moe_groups, err));
    TRY(json_int(root, "moe_router_group_topk", name, 0, 1 << 20, 0, &m->moe_group_topk, err));
    TRY(json_int(root, "kv_lora_rank", name, 0, 1 << 20, 0, &m->kv_lora, err));
    TRY(json_int(root, "q_lora_rank", name, 0, 1 << 20, 0, &m->q_lora, err));
    TRY(json_int(root, "qk_pos_emb_head_dim", name, 0, 1 << 20, 0, &m->qk_rope_dim, err));
    TRY(json_int(root, "v_head_dim", name, 0, 1 << 20, 0, &m->v_head_dim, err));
    TRY(json_bool(root, "qk_layernorm", name, 0, &m->qk_norm, err));
    TRY(json_bool(root, "attention_sinks", name, 0, &m->attn_sinks, err));
    const cJSON *prof = cJSON_GetObjectItemCaseSensitive(root, "profile");
    if (prof) { /* a file name under models/profiles/, as the presets carry */
        if (!cJSON_IsString(prof) || !prof->valuestring[0] || strchr(prof->valuestring, '/') ||
            strlen(prof->valuestring) >= sizeof m->profile) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: field \"profile\" must be a file name under "
                         "models/profiles/ (no '/', under %zu characters)", name, sizeof m->profile);
            goto out;
        }
        snprintf(m->profile, sizeof m->profile, "%s", prof->valuestring);
    }
    TRY(model_validate(m, name, err));
out:
    cJSON_Delete(root);
    return st;
}

dp_status model_read_json(const char *path, model_spec *m, dp_err *err)
{
    char *text = NULL;
    dp_status st = json_slurp(path, &text, err);
    if (st == DP_OK) st = model_parse_json(text, path, m, err);
    free(text);
    return st;
}

cJSON *model_to_json(const model_spec *m)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON_AddStringToObject(o, "arch", model_arch_name(m->arch));
    if (m->arch == ARCH_T5) {
        cJSON_AddNumberToObject(o, "encoder_num_layers", m->enc_layers);
        cJSON_AddNumberToObject(o, "decoder_num_layers", m->dec_layers);
    } else {
        cJSON_AddNumberToObject(o, "num_layers", m->enc_layers);
    }
    cJSON_AddNumberToObject(o, "hidden_size", m->hidden);
    cJSON_AddNumberToObject(o, "num_attn_heads", m->heads);
    cJSON_AddNumberToObject(o, "kv_channels", m->kv_channels);
    cJSON_AddNumberToObject(o, "ffn_hidden_size", m->ffn);
    cJSON_AddNumberToObject(o, "vocab_size", m->vocab);
    cJSON_AddNumberToObject(o, "max_position_embeddings", m->positions);
    if (m->arch == ARCH_GPT)
        cJSON_AddStringToObject(o, "position_embedding_type", m->rope ? "rope" : "learned_absolute");
    cJSON_AddBoolToObject(o, "glu", m->glu);
    cJSON_AddNumberToObject(o, "num_query_groups", model_kv_heads(m));
    cJSON_AddBoolToObject(o, "untie_embeddings_and_output_weights", m->untied_head);
    cJSON_AddStringToObject(o, "normalization", m->rmsnorm ? "RMSNorm" : "LayerNorm");
    cJSON_AddBoolToObject(o, "add_bias_linear", !m->no_bias);
    if (m->rope) cJSON_AddNumberToObject(o, "rotary_base", model_rope_base(m));
    if (m->norm_eps > 0 && m->norm_eps != MODEL_NORM_EPS)
        cJSON_AddNumberToObject(o, "norm_epsilon", m->norm_eps);
    if (m->window > 0) cJSON_AddNumberToObject(o, "sliding_window", m->window);
    cJSON_AddBoolToObject(o, "flash_attention", m->flash_attn);
    cJSON_AddStringToObject(o, "precision", m->fp16 ? "fp16" : "bf16");
    if (m->experts) {
        cJSON_AddNumberToObject(o, "num_experts", m->experts);
        cJSON_AddNumberToObject(o, "moe_router_topk", m->experts_per_token);
        cJSON_AddNumberToObject(o, "moe_ffn_hidden_size", m->expert_ffn);
        if (m->shared_ffn) {
            cJSON_AddNumberToObject(o, "moe_shared_expert_intermediate_size", m->shared_ffn);
            cJSON_AddBoolToObject(o, "moe_shared_expert_gate", m->shared_gate);
        }
        cJSON_AddBoolToObject(o, "moe_router_bias", m->router_bias);
        cJSON_AddBoolToObject(o, "moe_expert_bias", m->expert_bias);
        cJSON_AddNumberToObject(o, "moe_first_dense_layers", m->moe_first);
        cJSON_AddNumberToObject(o, "moe_layer_freq", m->moe_freq > 0 ? m->moe_freq : 1);
        cJSON_AddNumberToObject(o, "moe_layer_phase", m->moe_phase);
        if (m->moe_groups) {
            cJSON_AddNumberToObject(o, "moe_router_num_groups", m->moe_groups);
            cJSON_AddNumberToObject(o, "moe_router_group_topk", m->moe_group_topk);
        }
    }
    if (m->kv_lora) {
        cJSON_AddNumberToObject(o, "q_lora_rank", m->q_lora);
        cJSON_AddNumberToObject(o, "kv_lora_rank", m->kv_lora);
        cJSON_AddNumberToObject(o, "qk_pos_emb_head_dim", m->qk_rope_dim);
        cJSON_AddNumberToObject(o, "v_head_dim", m->v_head_dim);
    }
    if (m->qk_norm) cJSON_AddTrueToObject(o, "qk_layernorm");
    if (m->attn_sinks) cJSON_AddTrueToObject(o, "attention_sinks");
    if (m->profile[0]) cJSON_AddStringToObject(o, "profile", m->profile);
    return o;
}

dp_status model_write_json(const model_spec *m, const char *path, dp_err *err)
{
    cJSON *o = model_to_json(m);
    if (!o) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    dp_status st = json_write_file(o, path, err);
    cJSON_Delete(o);
    return st;
}

/* A Hugging Face config's model name: the last part of its _name_or_path
 * ("meta-llama/Meta-Llama-3-8B" → "Meta-Llama-3-8B"), else its file's name without ".json" (the
 * folder's for a config.json), else its model type. Printable ASCII only, cut to fit. */
static void hf_model_name(const cJSON *root, const char *path, const char *mtype, char *out,
                          size_t cap)
{
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(root, "_name_or_path");
    char buf[256] = "";
    if (cJSON_IsString(np) && np->valuestring[0]) {
        const char *slash = strrchr(np->valuestring, '/');
        snprintf(buf, sizeof buf, "%s", slash && slash[1] ? slash + 1 : np->valuestring);
    } else if (path && strlen(path) > 5 && strcmp(path + strlen(path) - 5, ".json") == 0) {
        snprintf(buf, sizeof buf, "%.*s", (int)(strlen(path) - 5), path);
        char *base = strrchr(buf, '/');
        if (strcmp(base ? base + 1 : buf, "config") == 0 && base) { /* .../Llama-3-8B/config */
            *base = '\0';
            char *parent = strrchr(buf, '/');
            memmove(buf, parent ? parent + 1 : buf, strlen(parent ? parent + 1 : buf) + 1);
        } else if (base) {
            memmove(buf, base + 1, strlen(base + 1) + 1);
        } else if (strcmp(buf, "config") == 0) {
            buf[0] = '\0';
        }
    }
    if (!buf[0]) snprintf(buf, sizeof buf, "%s", mtype[0] ? mtype : "hf");
    size_t o = 0;
    for (size_t i = 0; buf[i] && o + 1 < cap; i++)
        out[o++] = buf[i] > ' ' && buf[i] < 127 ? buf[i] : '_';
    out[o] = '\0';
}

/* The per-head width: the config's own (head_key, where it has one), else the width over the
 * heads, which must then divide it (a width the heads do not split is no model). */
static dp_status head_dim_of(const cJSON *root, const char *head_key, const char *width_key,
                             const char *heads_key, const char *name, model_spec *m, dp_err *err)
{
    if (head_key && cJSON_HasObjectItem(root, head_key))
        return json_int(root, head_key, name, 1, 1 << 20, -1, &m->kv_channels, err);
    if (m->hidden % m->heads != 0)
        return dp_fail(err, DP_ERR_INVALID, "%s: field \"%s\" %d is not a multiple of field "
                       "\"%s\" %d: the heads must split the width%s%s%s", name, width_key,
                       m->hidden, heads_key, m->heads, head_key ? " (or the config names its head "
                       "width, \"" : "", head_key ? head_key : "", head_key ? "\")" : "");
    m->kv_channels = m->hidden / m->heads;
    return DP_OK;
}

/* A MoE config's experts (model.h): their width, the shared expert, which layers, the router's
 * and experts' biases. */
static dp_status hf_experts(const cJSON *root, const char *name, const char *mtype, int n,
                            int per_token, model_spec *m, dp_err *err)
{
    dp_status st = DP_OK;
    if (per_token > n)
        return dp_fail(err, DP_ERR_INVALID, "%s: %d experts per token (num_experts_per_tok) of %d "
                       "experts", name, per_token, n);
    m->experts = n, m->experts_per_token = per_token;
    TRY(json_int(root, "moe_intermediate_size", name, 1, 1 << 26, m->ffn, &m->expert_ffn, err));
    /* Qwen2-MoE's shared expert (with its sigmoid gate), or DeepSeek's n_shared_experts of the
     * experts' width */
    int shared;
    TRY(json_int(root, "shared_expert_intermediate_size", name, 0, 1 << 26, 0, &m->shared_ffn, err));
    m->shared_gate = m->shared_ffn > 0;
    TRY(json_int(root, "n_shared_experts", name, 0, 1 << 10, 0, &shared, err));
    if (shared > 0) m->shared_ffn = shared * m->expert_ffn, m->shared_gate = 0;
    /* which layers: DeepSeek's dense first ones and frequency; Qwen's sparse step */
    int step;
    TRY(json_int(root, "first_k_dense_replace", name, 0, 1 << 20, 0, &m->moe_first, err));
    if (m->moe_first > m->enc_layers) /* (all dense at the count itself: a dense model) */
        return dp_fail(err, DP_ERR_INVALID, "%s: field \"first_k_dense_replace\" (%d dense first "
                       "layers) is beyond num_hidden_layers (%d)", name, m->moe_first,
                       m->enc_layers);
    TRY(json_int(root, "moe_layer_freq", name, 1, 1 << 20, 1, &m->moe_freq, err));
    TRY(json_int(root, "decoder_sparse_step", name, 1, 1 << 20, 1, &step, err));
    if (step > 1) m->moe_freq = step, m->moe_phase = step - 1; /* (i + 1) % step == 0 */
    const cJSON *only = cJSON_GetObjectItemCaseSensitive(root, "mlp_only_layers");
    if (only && !cJSON_IsNull(only) && !(cJSON_IsArray(only) && cJSON_GetArraySize(only) == 0))
        return dp_fail(err, DP_ERR_INVALID, "%s: field \"mlp_only_layers\": dpsim takes MoE layers "
                       "by a step (decoder_sparse_step), not a list of dense ones", name);
    /* DeepSeek's group-limited router (0 where the config has none) */
    TRY(json_int(root, "n_group", name, 0, 1 << 20, 0, &m->moe_groups, err));
    TRY(json_int(root, "topk_group", name, 0, 1 << 20, 0, &m->moe_group_topk, err));
    if (m->moe_groups <= 1) m->moe_groups = m->moe_group_topk = 0; /* one group limits nothing */
    const cJSON *topk = cJSON_GetObjectItemCaseSensitive(root, "topk_method");
    m->router_bias = strcmp(mtype, "gpt_oss") == 0 ||
                     (cJSON_IsString(topk) && strcmp(topk->valuestring, "noaux_tc") == 0);
    m->expert_bias = strcmp(mtype, "gpt_oss") == 0;
out:
    return st;
}

/* DeepSeek's multi-head latent attention (model.h), where the config has a kv_lora_rank. */
static dp_status hf_latent_attention(const cJSON *root, const char *name, model_spec *m, dp_err *err)
{
    dp_status st = DP_OK;
    TRY(json_int(root, "kv_lora_rank", name, 0, 1 << 20, 0, &m->kv_lora, err));
    if (!m->kv_lora) return DP_OK;
    int nope = 0;
    TRY(json_int(root, "q_lora_rank", name, 0, 1 << 20, 0, &m->q_lora, err));
    TRY(json_int(root, "qk_nope_head_dim", name, 1, 1 << 20, JSON_REQUIRED, &nope, err));
    TRY(json_int(root, "qk_rope_head_dim", name, 1, 1 << 20, JSON_REQUIRED, &m->qk_rope_dim, err));
    TRY(json_int(root, "v_head_dim", name, 1, 1 << 20, JSON_REQUIRED, &m->v_head_dim, err));
    m->kv_channels = nope + m->qk_rope_dim;
out:
    return st;
}

dp_status model_parse_hf(const char *text, const char *name, model_spec *m, dp_err *err)
{
    dp_status st = DP_OK;
    cJSON *root = NULL;
    TRY(json_parse_object(text, name, &root, err));
    memset(m, 0, sizeof *m);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    hf_model_name(root, name, cJSON_IsString(type) ? type->valuestring : "", m->name,
                  sizeof m->name);
    const char *mtype = cJSON_IsString(type) ? type->valuestring : "";
    /* experts by any of their names: Mixtral's and gpt-oss's, Qwen-MoE's and OLMoE's,
     * DeepSeek's count; the number a token runs (num_experts_per_tok, gpt-oss's
     * experts_per_token); or by the model type or architecture */
    static const char *const expert_keys[] = {"num_local_experts", "num_experts", "n_routed_experts",
                                              "num_experts_per_tok", "experts_per_token"};
    int counts[5] = {0};
    const char *experts = strstr(mtype, "moe") || strcmp(mtype, "mixtral") == 0 ? mtype : NULL;
    const cJSON *arch = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(root, "architectures"), 0);
    if (!experts && cJSON_IsString(arch) &&
        (strstr(arch->valuestring, "Moe") || strstr(arch->valuestring, "MoE") ||
         strstr(arch->valuestring, "Mixtral")))
        experts = arch->valuestring;
    for (size_t i = 0; i < sizeof expert_keys / sizeof *expert_keys; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, expert_keys[i]);
        if (!v || cJSON_IsNull(v)) continue;
        /* a count of 0 is a dense model; anything else present is experts, and a count written
         * as text, a list, a boolean or a negative number is no count at all */
        if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != floor(v->valuedouble) ||
            v->valuedouble > 1 << 20) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: field \"%s\" must be a whole number of experts "
                         "(0 for a dense model)", name, expert_keys[i]);
            goto out;
        }
        counts[i] = (int)v->valuedouble;
        if (counts[i] > 0 && !experts) experts = expert_keys[i];
    }
    int n_experts = counts[0] ? counts[0] : counts[1] ? counts[1] : counts[2];
    int per_token = counts[3] ? counts[3] : counts[4];
    if (experts && (!n_experts || !per_token)) {
        st = dp_fail(err, DP_ERR_INVALID, "%s: a mixture-of-experts model (%s) that names no %s: "
                     "dpsim cannot count it, and counting it as dense would be silently wrong",
                     name, experts, !n_experts ? "expert count (num_local_experts, num_experts or "
                     "n_routed_experts)" : "experts per token (num_experts_per_tok)");
        goto out;
    }
    /* a vision-language config (Qwen2-VL's, LLaVA's, Llama 4's): dpsim models its language
     * model; the vision tower is left out, and said so (once a process) */
    static const char *const vision_keys[] = {"vision_config", "vision_tower", "visual"};
    static int told_vision;
    for (size_t i = 0; i < sizeof vision_keys / sizeof *vision_keys && !told_vision; i++)
        if (cJSON_HasObjectItem(root, vision_keys[i])) {
            told_vision = 1;
            dp_note(DP_NOTE_LINE, "dpsim: note: %s is a vision-language config (\"%s\"): its "
                    "language model is modelled, its vision tower left out (its parameters, FLOPs "
                    "and memory are in no figure)", name, vision_keys[i]);
        }
    /* the norms' epsilon, by whichever of its names the config uses */
    static const char *const eps_keys[] = {"rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon",
                                           "norm_epsilon"};
    for (size_t i = 0; i < sizeof eps_keys / sizeof *eps_keys && !m->norm_eps; i++)
        TRY(json_double(root, eps_keys[i], name, 1e-30, 1, 0, 0, &m->norm_eps, err));
    if (cJSON_HasObjectItem(root, "d_model")) { /* T5 */
        m->arch = ARCH_T5;
        TRY(json_int(root, "num_layers", name, 1, 1 << 20, -1, &m->enc_layers, err));
        TRY(json_int(root, "num_decoder_layers", name, 1, 1 << 20, m->enc_layers, &m->dec_layers,
                     err));
        TRY(json_int(root, "d_model", name, 1, 1 << 24, -1, &m->hidden, err));
        TRY(json_int(root, "num_heads", name, 1, 1 << 16, -1, &m->heads, err));
        TRY(head_dim_of(root, "d_kv", "d_model", "num_heads", name, m, err));
        TRY(json_int(root, "d_ff", name, 1, 1 << 26, -1, &m->ffn, err));
        TRY(json_int(root, "vocab_size", name, 1, 1 << 24, T5_VOCAB, &m->vocab, err));
        const cJSON *act = cJSON_GetObjectItemCaseSensitive(root, "feed_forward_proj");
        m->glu = cJSON_IsString(act) && strncmp(act->valuestring, "gated", 5) == 0;
        int tied; /* T5 v1.1 and Flan-T5 untie their LM head; T5 v1.0 ties it (the default) */
        TRY(json_bool(root, "tie_word_embeddings", name, 1, &tied, err));
        m->untied_head = !tied;
    } else if (cJSON_HasObjectItem(root, "n_layer")) { /* GPT-2 */
        m->arch = ARCH_GPT;
        TRY(json_int(root, "n_layer", name, 1, 1 << 20, -1, &m->enc_layers, err));
        TRY(json_int(root, "n_embd", name, 1, 1 << 24, -1, &m->hidden, err));
        TRY(json_int(root, "n_head", name, 1, 1 << 16, -1, &m->heads, err));
        TRY(head_dim_of(root, NULL, "n_embd", "n_head", name, m, err));
        TRY(json_int(root, "n_inner", name, 1, 1 << 26, 4 * m->hidden, &m->ffn, err));
        TRY(json_int(root, "vocab_size", name, 1, 1 << 24, GPT_VOCAB, &m->vocab, err));
        TRY(json_int(root, "n_positions", name, 0, 1 << 24, 1024, &m->positions, err));
        int mqa; /* GPT-BigCode (StarCoder): one key/value head */
        TRY(json_bool(root, "multi_query", name, 0, &mqa, err));
        m->kv_heads = mqa ? 1 : 0;
        /* GPT-J and CodeGen rotate (rotary_dim) and untie their LM head; GPT-2 ties it */
        m->rope = cJSON_HasObjectItem(root, "rotary_dim");
        int tied;
        TRY(json_bool(root, "tie_word_embeddings", name, 1, &tied, err));
        m->untied_head = !tied;
    } else if (cJSON_HasObjectItem(root, "num_hidden_layers")) { /* LLaMA-style */
        m->arch = ARCH_GPT;
        int is_opt = strcmp(mtype, "opt") == 0;
        TRY(json_int(root, "num_hidden_layers", name, 1, 1 << 20, -1, &m->enc_layers, err));
        TRY(json_int(root, "hidden_size", name, 1, 1 << 24, -1, &m->hidden, err));
        TRY(json_int(root, "num_attention_heads", name, 1, 1 << 16, -1, &m->heads, err));
        TRY(head_dim_of(root, "head_dim", "hidden_size", "num_attention_heads", name, m, err));
        TRY(json_int(root, is_opt ? "ffn_dim" : "intermediate_size", name, 1, 1 << 26,
                     4 * m->hidden, &m->ffn, err));
        TRY(json_int(root, "vocab_size", name, 1, 1 << 24, 32000, &m->vocab, err));
        TRY(json_int(root, "max_position_embeddings", name, 0, 1 << 24, 2048, &m->positions, err));
        m->rope = !is_opt; /* LLaMA-style models (and GPT-NeoX) rotate; OPT learns its positions */
        m->flash_attn = 1; /* what every trainer of this kind of model runs */
        TRY(json_double(root, "rope_theta", name, 1, 1e12, 0, MODEL_ROPE_BASE, &m->rope_base, err));
        /* Qwen's configs name a window they do not use unless use_sliding_window (false by
         * default there); Mistral's have no such switch */
        int use_window;
        TRY(json_bool(root, "use_sliding_window", name, strncmp(mtype, "qwen", 4) != 0, &use_window,
                      err));
        if (use_window) TRY(json_int(root, "sliding_window", name, 0, 1 << 24, 0, &m->window, err));
        m->glu = !ungated_mlp(mtype);
        /* gpt-oss alternates sliding and full attention layers (layer_types): the full ones bound
         * a sequence, the sliding ones are costed as full */
        const cJSON *types = cJSON_GetObjectItemCaseSensitive(root, "layer_types");
        for (int i = 0; m->window && i < cJSON_GetArraySize(types); i++) {
            const cJSON *t = cJSON_GetArrayItem(types, i);
            if (cJSON_IsString(t) && strcmp(t->valuestring, "full_attention") == 0) m->window = 0;
        }
        m->qk_norm = strncmp(mtype, "qwen3", 5) == 0; /* q_norm and k_norm, a head wide */
        m->attn_sinks = strcmp(mtype, "gpt_oss") == 0;
        if (n_experts) TRY(hf_experts(root, name, mtype, n_experts, per_token, m, err));
        TRY(hf_latent_attention(root, name, m, err));
        /* key/value heads: num_key_value_heads, or Falcon's num_kv_heads, or its multi_query's
         * one */
        int mqa, kv_default;
        TRY(json_bool(root, "multi_query", name, 0, &mqa, err));
        TRY(json_int(root, "num_kv_heads", name, 1, 1 << 16, mqa ? 1 : m->heads, &kv_default, err));
        TRY(json_int(root, "num_key_value_heads", name, 1, 1 << 16, kv_default, &m->kv_heads, err));
        /* a layer-norm model's biases, where its config says (Falcon's "bias") */
        int bias;
        TRY(json_bool(root, "bias", name, 1, &bias, err));
        m->no_bias = !bias;
        /* Hugging Face's own defaults: llama, mistral and qwen2 untie the LM head (gemma ties it) */
        int untied_default = strcmp(mtype, "llama") == 0 || strcmp(mtype, "mistral") == 0 ||
                             strcmp(mtype, "qwen2") == 0, tied;
        TRY(json_bool(root, "tie_word_embeddings", name, !untied_default, &tied, err));
        m->untied_head = !tied;
        /* those, gemma, and any config that names an rms_norm_eps (phi3, qwen3, ...; GPT-NeoX
         * names layer_norm_eps): RMSNorm, and biases only where the config (or qwen2's QKV) has
         * them */
        if (untied_default || strcmp(mtype, "gemma") == 0 || cJSON_HasObjectItem(root, "rms_norm_eps")) {
            int attn_bias, mlp_bias;
            TRY(json_bool(root, "attention_bias", name, strcmp(mtype, "qwen2") == 0, &attn_bias, err));
            TRY(json_bool(root, "mlp_bias", name, 0, &mlp_bias, err));
            m->rmsnorm = 1, m->no_bias = !attn_bias && !mlp_bias;
        }
    } else {
        st = dp_fail(err, DP_ERR_PARSE,
                     "%s: not a recognised Hugging Face config (no n_layer, num_hidden_layers or "
                     "d_model)",
                     name);
        goto out;
    }
    if (n_experts && !m->experts) {
        st = dp_fail(err, DP_ERR_INVALID, "%s: experts (%s) in a %s config: dpsim takes them in "
                     "the decoder-only kind of num_hidden_layers (Mixtral, Qwen-MoE, DeepSeek, "
                     "gpt-oss)", name, experts, m->arch == ARCH_T5 ? "T5" : "GPT-2");
        goto out;
    }
    TRY(model_validate(m, name, err));
out:
    cJSON_Delete(root);
    return st;
}

dp_status model_import_hf(const char *path, model_spec *m, dp_err *err)
{
    char *text = NULL;
    dp_status st = json_slurp(path, &text, err);
    if (st == DP_OK) st = model_parse_hf(text, path, m, err);
    free(text);
    return st;
}

dp_status model_resolve(const char *name_or_path, model_spec *m, dp_err *err)
{
    const model_spec *p = model_preset(name_or_path);
    if (p) {
        *m = *p;
        return DP_OK;
    }
    char *text = NULL;
    dp_status st = json_slurp(name_or_path, &text, NULL);
    if (st != DP_OK)
        return dp_fail(err, DP_ERR_INVALID,
                       "unknown model \"%s\": neither a preset nor a readable file\nhint: 'dpsim "
                       "models' lists the presets",
                       name_or_path);
    cJSON *probe = cJSON_Parse(text);
    int hf = probe && (cJSON_HasObjectItem(probe, "n_layer") ||
                       cJSON_HasObjectItem(probe, "num_hidden_layers") ||
                       cJSON_HasObjectItem(probe, "d_model"));
    cJSON_Delete(probe);
    st = hf ? model_parse_hf(text, name_or_path, m, err)
            : model_parse_json(text, name_or_path, m, err);
    free(text);
    return st;
}

/* Attention's s x s forward FLOPs of one sample over the layers (2 x heads x (the query and key
 * width + the value width) per score entry: 4 x heads x kv_channels but for latent attention),
 * causal self-attention at half the square unless counted non-causally. */
static double attention_flops(const model_spec *m, double e, double d, flops_count how)
{
    double v = m->v_head_dim > 0 ? m->v_head_dim : m->kv_channels;
    double hk = (double)m->heads * (m->kv_channels + v) / 2, half = how == FLOPS_CAUSAL ? 0.5 : 1;
    if (m->arch == ARCH_GPT) return 4 * hk * (double)m->enc_layers * e * e * half;
    return 4 * hk * ((double)m->enc_layers * e * e + (double)m->dec_layers * (d * d * half + e * d));
}

double model_train_flops(const model_spec *m, int32_t enc, int32_t dec, flops_count how)
{
    double head = (double)m->vocab * m->hidden;
    double e = enc, d = dec; /* the LM head's 2·V·h per token counts once, tied or not */
    double attn = 3 * attention_flops(m, e, d, how); /* forward, and twice it backward */
    if (m->arch == ARCH_GPT) /* (a mixture of experts: the parameters a token runs) */
        return 6 * ((double)model_layers_active_params(m) * e + head * e) + attn;
    return 6 * ((double)m->enc_layers * (double)model_layer_params(m, 0) * e +
                (double)m->dec_layers * (double)model_layer_params(m, 1) * d + head * d) +
           attn;
}

double model_recompute_flops(const model_spec *m, int32_t enc, int32_t dec, double dense,
                             double attn)
{
    if (!(dense > 0) && !(attn > 0)) return 0;
    double e = enc, d = dec;
    double layers = (double)model_layers_active_params(m) * e;
    if (m->arch == ARCH_T5)
        layers = (double)m->enc_layers * (double)model_layer_params(m, 0) * e +
                 (double)m->dec_layers * (double)model_layer_params(m, 1) * d;
    return (dense > 0 ? dense * 2 * layers : 0) +
           (attn > 0 ? attn * attention_flops(m, e, d, FLOPS_CAUSAL) : 0);
}
