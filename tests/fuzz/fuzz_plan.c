/* Fuzz target: the execution-plan JSON, its validator, its model rules (against the plan's own
 * model_spec, or gpt-tiny with a sliding window), and the simulator on plans that pass. */
#include "fuzz.h"

#include "../../scheduler/plan.h"
#include "../../scheduler/schedule.h" /* plan_check */
#include "../../sim/sim.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_text(data, size);
    plan p;
    dp_err err;
    if (plan_parse(text, "fuzz-plan.json", &p, &err) == DP_OK) {
        cluster_spec hw;
        cluster_preset("p4d", &hw);
        sim_config cfg = {0};
        cfg.hw = &hw;
        cfg.pp = p.h.pp;
        cfg.chunks = p.h.chunks;
        cfg.dp = p.h.dp;
        cfg.mem_limit_mb = 1e9;
        sim s;
        sim_init(&s);
        for (int i = 0; i < p.n_it; i++) {
            if (plan_validate(&p.it[i], p.h.chunks, "fuzz-plan.json", &err) != DP_OK) continue;
            sim_iter_result r;
            sim_iteration(&s, &cfg, &p.it[i], 0, NULL, &r, &err);
        }
        sim_release(&s);
        model_spec m = *model_preset("gpt-tiny");
        m.window = 64;
        if (plan_check(&p, "fuzz-plan.json", &err) == DP_OK &&
            (p.h.model_json == NULL || plan_model(&p, &m, &err) == DP_OK))
            plan_check_model(&p, &m, "fuzz-plan.json", &err);
        plan_release(&p);
    }
    free(text);
    return 0;
}
