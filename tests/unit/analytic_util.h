/*
 * analytic_util.h — an analytic cost model of a preset on a GPU or cluster preset, as the planner
 * builds one (header-only, for the unit tests of the cost models, the precisions and the floor).
 */
#ifndef ANALYTIC_UTIL_H
#define ANALYTIC_UTIL_H

#include "testutil.h"

#include "../../models/cost.h"
#include "../../models/hw.h"
#include "../../models/model.h"

/* Model preset `model` on `hw` at tp, in recompute mode rc, with the GPU's default parameters
 * (p NULL) or p; the model's own attention. The caller frees it. */
static cost_model *analytic(const char *model, const char *hw, int tp, recompute_mode rc,
                            const analytic_params *p)
{
    cluster_spec c;
    assert_int_equal(cluster_resolve(hw, &c, NULL), DP_OK);
    analytic_params ap;
    if (p) ap = *p;
    else analytic_params_for_gpu(&c.gpu, &ap);
    cost_model *cm = NULL;
    dp_err err = {0};
    if (cost_analytic_new(model_preset(model), &c, tp, rc, &ap, &cm, &err) != DP_OK)
        fail_msg("%s", err.msg);
    cost_model_set_attention(cm, cm->model.flash_attn, NULL);
    return cm;
}

#endif /* ANALYTIC_UTIL_H */
