/* Fuzz target: the profile CSV cost model (reading, grids, medians) and queries on it. */
#include "fuzz.h"

#include "../../models/cost.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_file(data, size, ".csv");
    cluster_spec hw;
    cluster_preset("p4d", &hw);
    const model_spec *models[2] = {model_preset("gpt-tiny"), model_preset("t5-tiny")};
    for (int k = 0; k < 2; k++) {
        cost_model *cm = NULL;
        dp_err err;
        if (cost_profile_load(path, models[k], &hw, 1, RECOMPUTE_NONE, &cm, &err) != DP_OK) continue;
        static const int mbs[] = {1, 3, 8, 100}, lens[] = {16, 40, 512, 9000};
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                cost_shape s = cost_shape_rows(mbs[i], lens[j], lens[3 - j]);
                cost_layer l;
                for (int c = 0; c < COMP_COUNT; c++) cost_query(cm, (cost_component)c, &s, &l, &err);
            }
        cost_model_free(cm);
    }
    unlink(path);
    return 0;
}
