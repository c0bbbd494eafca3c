#include "memory.h"

void memory_model_state_parts(double param_mb, int zero_stage, int dp, double *weights_mb,
                              double *grads_mb, double *optimizer_mb)
{
    double params_m = param_mb / BYTES_WEIGHT; /* millions of parameters */
    double d = dp > 0 ? dp : 1;
    double w = BYTES_WEIGHT * params_m, g = BYTES_GRAD * params_m, o = BYTES_OPTIMIZER * params_m;
    if (zero_stage >= 1) o /= d;
    if (zero_stage >= 2) g /= d;
    if (zero_stage >= 3) w /= d;
    *weights_mb = w, *grads_mb = g, *optimizer_mb = o;
}

double memory_model_state_mb(double param_mb, int zero_stage, int dp)
{
    double w, g, o;
    memory_model_state_parts(param_mb, zero_stage, dp, &w, &g, &o);
    return w + g + o;
}

/* Splits n items over k parts as evenly as possible; part i gets base (+1 for the first rem). */
static int share(int n, int k, int i)
{
    return n / k + (i < n % k ? 1 : 0);
}

void memory_stage_layers(const model_spec *m, int stage, int stages, int *enc, int *dec)
{
    if (m->arch == ARCH_GPT || stages == 1) {
        *enc = m->arch == ARCH_GPT ? share(m->enc_layers, stages, stage)
                                   : m->enc_layers;
        *dec = m->arch == ARCH_GPT ? 0 : m->dec_layers;
        return;
    }
    int enc_stages = stages / 2, dec_stages = stages - enc_stages;
    if (stage < enc_stages) {
        *enc = share(m->enc_layers, enc_stages, stage);
        *dec = 0;
    } else {
        *enc = 0;
        *dec = share(m->dec_layers, dec_stages, stage - enc_stages);
    }
}

double memory_stage_param_mb(const cost_model *cm, int stage, int stages)
{
    int enc, dec;
    memory_stage_layers(&cm->model, stage, stages, &enc, &dec);
    double mb = enc * cm->param_mb[COMP_ENCODER] + dec * cm->param_mb[COMP_DECODER];
    return mb + memory_embedding_share_mb(cm, stage, stages);
}

double memory_embedding_share_mb(const cost_model *cm, int stage, int stages)
{
    if (cm->toy.on) return 0; /* textbook stages are equal: no embedding, no head */
    double mb = stage == 0 ? cm->embedding_param_mb : 0;
    if (stage == stages - 1 && (stages > 1 || cm->model.untied_head))
        mb += cm->embedding_param_mb; /* the head: V x h (and the positions' h per position) */
    return mb;
}
