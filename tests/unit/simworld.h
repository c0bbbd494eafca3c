/*
 * simworld.h — a small simulated world for the schedule and plan-machine tests (header-only):
 * a 16-layer tiny GPT on the analytic cost model, S stages x C chunks, links of one latency and
 * bandwidth, and iterations of equal micro-batches.
 */
#ifndef SIMWORLD_H
#define SIMWORLD_H

#include "testutil.h"

#include "../../scheduler/plan.h"
#include "../../scheduler/schedule.h"
#include "../../sim/sim.h"

typedef struct world {
    model_spec m;
    cluster_spec hw;
    cost_model *cm;
    stage_model sm;
    sim_config cfg;
} world;

/* A 16-layer tiny GPT on S stages with C chunks placed as k says (placement.h); links with the
 * given latency and bandwidth. */
static void world_init_placed(world *w, int S, int C, placement_kind place, double latency_us,
                              double gbit)
{
    memset(w, 0, sizeof *w);
    w->m = *model_preset("gpt-tiny");
    w->m.enc_layers = 16;
    cluster_preset("p4d", &w->hw);
    w->hw.gpus_per_node = 64;
    w->hw.intra_gbit = w->hw.inter_gbit = gbit;
    w->hw.intra_latency_us = w->hw.inter_latency_us = latency_us;
    for (int sc = 0; sc < SCOPE_COUNT; sc++) /* the wire's rate: transfers are bytes / gbit */
        for (int k = 0; k < COLL_COUNT; k++) w->hw.coll_eff[sc][k] = 1;
    analytic_params p;
    analytic_params_default(&p);
    dp_err err = {0};
    assert_int_equal(cost_analytic_new(&w->m, &w->hw, 1, RECOMPUTE_NONE, &p, &w->cm, &err), DP_OK);
    if (stage_model_init_placed(&w->sm, w->cm, S, C, 1, 0, 0, place, 1e9, &err) != DP_OK)
        fail_msg("%s", err.msg);
    memset(&w->cfg, 0, sizeof w->cfg);
    w->cfg.hw = &w->hw;
    w->cfg.pp = S;
    w->cfg.chunks = C;
    w->cfg.dp = 1;
    w->cfg.mem_limit_mb = 1e9;
}

/* The same in a loop (Megatron's interleaving, or one chunk). */
static void world_init(world *w, int S, int C, double latency_us, double gbit)
{
    world_init_placed(w, S, C, PLACEMENT_LOOP, latency_us, gbit);
}

/* m equal micro-batches: per device f, b (backward incl. w), w ms; 1 MB stored each. */
static void equal_iter(const world *w, plan_iter *it, int m, double f, double b, double wgt)
{
    int S = w->sm.pp;
    assert_int_equal(plan_iter_alloc(it, 0, S, 1, m, m), DP_OK);
    it->placement = w->sm.placement;
    for (int k = 0; k < m; k++) {
        plan_mb *x = &it->mb[k];
        x->first = k, x->n_samples = 1, x->mbs = 1, x->enc_len = 16, x->enc_tokens = 16;
        it->ids[k] = k;
        for (int s = 0; s < S; s++) {
            x->fwd_ms[s] = f, x->bwd_ms[s] = b, x->w_ms[s] = wgt;
            x->stored_mb[s] = 1, x->peak_mb[s] = 1;
        }
    }
}

#endif /* SIMWORLD_H */
