/* Fuzz target: model, hardware, Hugging Face config.json and fitted-model JSON specs. A
 * hardware or fitted-model spec the parser accepts then plans a small batch with DynaPipe's DP on
 * a two-stage pipeline (the analytic model on that cluster, or the fit's): every rate it allows
 * must give either micro-batches with finite times within the simulator's range or a refusal
 * (stage_model_cost's range check before the DP's integer clock), never an overflow. */
#include "fuzz.h"

#include <math.h>

#include "../../models/cost.h"
#include "../../models/hw.h"
#include "../../models/model.h"
#include "../../scheduler/microbatch.h"
#include "../../scheduler/stage_cost.h"

/* The DP on six samples of 16 to 1024 tokens with cm; owns nothing. */
static void plan_small(const cost_model *cm, double mem_mb)
{
    stage_model sm;
    dp_err err;
    if (stage_model_init(&sm, cm, 2, 1, 1, 0, mem_mb, &err) != DP_OK) return;
    batch_rules r;
    batch_rules_default(&r, ARCH_GPT);
    r.max_seqlen = 1024;
    batch_ctx ctx = {&r, &sm, 2, 512, 0, NULL, DP_SPLIT_AUTO, NULL, 0};
    sample_len s[6] = {{0, 16, 0}, {1, 100, 0}, {2, 1024, 0}, {3, 300, 0}, {4, 64, 0}, {5, 700, 0}};
    mb_list l;
    mb_list_init(&l);
    if (dp_batch(&ctx, s, 6, &l, &err) == DP_OK && mb_list_finish(&ctx, &l, &err) == DP_OK)
        for (int k = 0; k < l.n_mb; k++)
            if (!(l.mb[k].t_ms >= 0 && l.mb[k].t_ms <= STAGE_MAX_VALUE * 2)) abort();
    mb_list_release(&l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    model_spec m;
    cluster_spec c;
    dp_err err;
    if (model_parse_json(text, "fuzz.json", &m, &err) == DP_OK) (void)model_total_params(&m);
    if (model_parse_hf(text, "config.json", &m, &err) == DP_OK) (void)model_total_params(&m);
    if (model_parse_hf(text, "config.json", &m, &err) == DP_OK ||
        model_parse_json(text, "fuzz.json", &m, &err) == DP_OK) { /* experts, latent attention */
        int64_t bare;
        if (model_active_params(&m, &bare) > model_total_params(&m) || bare < 0) abort();
        if (!(model_train_flops(&m, 4096, 0, FLOPS_CAUSAL) >= 0)) abort();
    }
    cost_model *cm = NULL;
    analytic_params ap;
    analytic_params_default(&ap);
    if (cluster_parse_json(text, "hw.json", &c, &err) == DP_OK &&
        cost_analytic_new(model_preset("gpt-tiny"), &c, 1, RECOMPUTE_NONE, &ap, &cm, &err) == DP_OK) {
        plan_small(cm, c.mem_limit_mb);
        cost_model_free(cm);
        cm = NULL;
    }
    if (cost_fit_parse(text, "fit.json", model_preset("gpt-tiny"), NULL, 0, 0, &cm, &err) == DP_OK) {
        cost_shape s = cost_shape_rows(2, 64, 0);
        cost_layer l;
        cost_query(cm, COMP_ENCODER, &s, &l, &err);
        plan_small(cm, cm->hw.mem_limit_mb);
        cost_model_free(cm);
    }
    free(text);
    return 0;
}
