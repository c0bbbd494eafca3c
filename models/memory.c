#include "memory.h"

#include "placement.h"

state_bytes memory_state_bytes(train_precision p, int grad_bytes)
{
    state_bytes b = {BYTES_WEIGHT, grad_bytes, BYTES_OPTIMIZER};
    if (p == PRECISION_FP8) b.weight += BYTES_FP8_WEIGHT_COPIES;
    return b;
}

void memory_model_state_parts(double param_mb, const state_bytes *b, int zero_stage, int dp,
                              double *weights_mb, double *grads_mb, double *optimizer_mb)
{
    static const state_bytes dynapipe = {BYTES_WEIGHT, BYTES_GRAD, BYTES_OPTIMIZER};
    if (!b) b = &dynapipe;
    double params_m = param_mb / BYTES_WEIGHT; /* millions of parameters */
    double d = dp > 0 ? dp : 1;
    double w = b->weight * params_m, g = b->grad * params_m, o = b->optimizer * params_m;
    if (zero_stage >= 1) o /= d;
    if (zero_stage >= 2) g /= d;
    if (zero_stage >= 3) w /= d;
    *weights_mb = w, *grads_mb = g, *optimizer_mb = o;
}

double memory_model_state_mb(double param_mb, const state_bytes *b, int zero_stage, int dp)
{
    double w, g, o;
    memory_model_state_parts(param_mb, b, zero_stage, dp, &w, &g, &o);
    return w + g + o;
}

double memory_stage_param_mb(const cost_model *cm, int stage, int stages)
{
    stage_placement pl = placement_stage(&cm->model, stage, stages);
    double mb = pl.enc_layers * cm->param_mb[COMP_ENCODER] + pl.dec_layers * cm->param_mb[COMP_DECODER];
    return mb + memory_embedding_share_mb(cm, stage, stages);
}

double memory_embedding_share_mb(const cost_model *cm, int stage, int stages)
{
    if (cm->toy.on) return 0; /* textbook stages are equal: no embedding, no head */
    stage_placement pl = placement_stage(&cm->model, stage, stages);
    double mb = pl.embedding ? cm->embedding_param_mb : 0;
    if (pl.head && (stages > 1 || cm->model.untied_head))
        mb += cm->embedding_param_mb; /* the head: V x h (and the positions' h per position) */
    return mb;
}
