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
    stage_placement pl = placement_stage(&cm->model, &cm->split, stage, stages);
    double mb = memory_layers_param_mb(cm, pl.enc_layers, placement_moe_layers(&cm->model, &pl),
                                       pl.dec_layers);
    placement_roles r = {pl.embedding, pl.head};
    return mb + memory_embedding_share_mb(cm, r);
}

double memory_layers_param_mb(const cost_model *cm, int enc, int moe, int dec)
{
    return (enc - moe) * cm->param_mb[COMP_ENCODER] + moe * cm->param_mb[COMP_MOE] +
           dec * cm->param_mb[COMP_DECODER];
}

int memory_embedding_units(const cost_model *cm, placement_roles r, double unit_mb[2])
{
    if (cm->toy.on) return 0; /* textbook stages are equal: no embedding, no head */
    int n = 0;
    if (r.embedding) unit_mb[n++] = cm->embedding_param_mb;
    if (r.head && (!r.embedding || cm->model.untied_head))
        unit_mb[n++] = cm->embedding_param_mb; /* the head: V x h (and the positions' h each) */
    return n;
}

double memory_embedding_share_mb(const cost_model *cm, placement_roles r)
{
    double unit[2], mb = 0;
    int n = memory_embedding_units(cm, r, unit);
    for (int i = 0; i < n; i++) mb += unit[i];
    return mb;
}

double memory_zero3_gathered_mb(const cost_model *cm, placement_roles r, int layers,
                                double layer_mb, int zero_stage, int zero_ranks)
{
    if (zero_stage < 3 || zero_ranks < 2) return 0;
    double unit[2], first = 0, second = 0; /* the two largest units */
    int n = memory_embedding_units(cm, r, unit);
    for (int i = 0; i < n + (layers > 0 ? 2 : 0); i++) { /* two layers stand for all of them */
        double u = i < n ? unit[i] : layer_mb;
        if (u > first) second = first, first = u;
        else if (u > second) second = u;
    }
    return first + second;
}
