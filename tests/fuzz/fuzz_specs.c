/* Fuzz target: model, hardware, Hugging Face config.json and fitted-model JSON specs. */
#include "fuzz.h"

#include "../../models/cost.h"
#include "../../models/hw.h"
#include "../../models/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    model_spec m;
    cluster_spec c;
    dp_err err;
    if (model_parse_json(text, "fuzz.json", &m, &err) == DP_OK) (void)model_total_params(&m);
    if (model_parse_hf(text, "config.json", &m, &err) == DP_OK) (void)model_total_params(&m);
    cluster_parse_json(text, "hw.json", &c, &err);
    cost_model *cm = NULL;
    if (cost_fit_parse(text, "fit.json", model_preset("gpt-tiny"), NULL, 0, 0, &cm, &err) == DP_OK) {
        cost_shape s = cost_shape_rows(2, 64, 0);
        cost_layer l;
        cost_query(cm, COMP_ENCODER, &s, &l, &err);
        cost_model_free(cm);
    }
    free(text);
    return 0;
}
