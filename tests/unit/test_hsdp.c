/*
 * test_hsdp.c — hybrid sharding (HSDP, --shard-group): ZeRO's state split over a group of the
 * data-parallel GPUs and the groups' gradient shards all-reduced across them
 * (stage_cost.h stage_model_init_sharded, stage_shard_check; models/comm.h comm_zero).
 *
 * Checked against what can disagree with the code: the rule of valid groups against a brute
 * force written here (and its hint's sizes, each valid and the nearest), the whole group against
 * the plain stage model field by field, a group inside a node against the ring all-gather's closed
 * form on NVLink, the model state against memory.h's rule at the group's size, and the collectives
 * against their order over the group sizes (less state and more per-micro-batch traffic as the
 * group grows; the cross-group all-reduce gone at the whole group).
 */
#include "analytic_util.h"

#include <stdlib.h>
#include <string.h>

#include "../../models/comm.h"
#include "../../models/memory.h"
#include "../../scheduler/stage_cost.h"

/* The rule, independently: the whole group (0 or dp x cp) always; else under ZeRO 1-3, cp x k
 * GPUs of k < dp replicas, k dividing dp. */
static int valid_group(int g, int dp, int cp, int zero)
{
    if (g == 0 || g == dp * cp) return 1;
    if (zero < 1) return 0;
    for (int k = 1; k < dp; k++)
        if (dp % k == 0 && g == cp * k) return 1;
    return 0;
}

static void test_shard_rule_against_brute_force(void **state)
{
    (void)state;
    int checked = 0, refused = 0;
    for (int dp = 1; dp <= 24; dp++)
        for (int cp = 1; cp <= 4; cp *= 2)
            for (int zero = 0; zero <= 3; zero++)
                for (int g = 0; g <= dp * cp + 3; g++) {
                    char why[300] = "";
                    int ok = stage_shard_check(g, dp, cp, zero, why, sizeof why) == 0;
                    assert_int_equal(ok, valid_group(g, dp, cp, zero));
                    checked++;
                    if (ok) continue;
                    refused++;
                    assert_non_null(strstr(why, "--shard-group"));
                    const char *hint = strstr(why, "hint: --shard-group ");
                    if (zero < 1) { /* no size helps: ZeRO 0 shards nothing */
                        assert_non_null(strstr(why, "--zero"));
                        continue;
                    }
                    assert_non_null(hint);
                    /* every size the hint offers is valid, and none valid lies nearer to g */
                    char *end;
                    const char *at = hint + strlen("hint: --shard-group ");
                    int offered = 0;
                    for (;;) {
                        long v = strtol(at, &end, 10);
                        if (end == at) break;
                        offered++;
                        assert_true(valid_group((int)v, dp, cp, zero) && v > 0);
                        int lo = v < g ? (int)v : g, hi = v < g ? g : (int)v;
                        for (int x = lo + 1; x < hi; x++)
                            if (x > 0) assert_false(valid_group(x, dp, cp, zero));
                        at = end;
                        if (strncmp(at, " or ", 4) != 0) break;
                        at += 4;
                    }
                    assert_true(offered >= 1);
                }
    assert_true(checked > 4000 && refused > 1000);
}

/* Llama-3-8B on 64 H100 (8 a node), pp 1, ZeRO-3 over groups of 2 .. 64 GPUs. */
static void test_hsdp_stage_model(void **state)
{
    (void)state;
    cost_model *cm = analytic("llama3-8b", "dgx-h100", 1, RECOMPUTE_NONE, NULL);
    cm->hw.nodes = 8;
    const int dp = 64;
    dp_err err = {0};
    stage_model whole, all, g[7];
    assert_int_equal(stage_model_init(&whole, cm, 1, 1, dp, 3, 1e9, &err), DP_OK);
    assert_int_equal(stage_model_init_sharded(&all, cm, 1, 1, dp, 3, dp, 1e9, &err), DP_OK);
    /* the whole group is the plain model, figure by figure */
    assert_int_equal(all.zero_shard, dp);
    assert_true(all.state_mb[0] == whole.state_mb[0] && all.zero_fwd_ms[0] == whole.zero_fwd_ms[0] &&
                all.zero_bwd_ms[0] == whole.zero_bwd_ms[0] &&
                all.zero_iter_ms[0] == whole.zero_iter_ms[0] &&
                all.zero_grad_ms[0] == whole.zero_grad_ms[0] && whole.zero_iter_ms[0] == 0);
    state_bytes sb = memory_state_bytes(cm->precision, cm->grad_bytes);
    double bytes = 1e6 * whole.param_mb[0];
    int n = 0;
    for (int size = 2; size <= 32; size *= 2, n++) {
        stage_model *s = &g[n];
        assert_int_equal(stage_model_init_sharded(s, cm, 1, 1, dp, 3, size, 1e9, &err), DP_OK);
        assert_int_equal(s->zero_shard, size);
        assert_int_equal(s->zero_ranks, dp);
        /* the state: memory.h's rule at the group's size, with the two gathered units */
        assert_rel(s->state_mb[0],
                   memory_model_state_mb(s->param_mb[0], &sb, 3, size) + s->zero3_gathered_mb[0],
                   1e-12);
        assert_true(s->state_mb[0] > whole.state_mb[0]);
        if (n > 0) assert_true(s->state_mb[0] < g[n - 1].state_mb[0]);
        /* inside a node (8 GPUs, replicas placed together at tp 1 x pp 1): the forward's
         * all-gather is the NVLink ring's closed form */
        if (size <= 8) {
            double lat = cm->hw.intra_latency_us / 1e3;
            double bw = cm->hw.intra_gbit / 8 * 1e9 * cm->hw.coll_eff[SCOPE_INTRA][COLL_ALL_GATHER];
            assert_rel(s->zero_fwd_ms[0],
                       (size - 1) * lat + (size - 1.0) / size * bytes / bw * 1e3, 1e-12);
            assert_true(s->zero_bwd_ms[0] < whole.zero_bwd_ms[0]); /* no NIC in it */
        }
        /* the shards' all-reduce across the dp / k groups, once an iteration: it reduces
         * gradients (it may overlap the last backward), and it is all ZeRO-3 leaves to the end */
        assert_true(s->zero_iter_ms[0] > 0);
        assert_true(s->zero_grad_ms[0] == s->zero_iter_ms[0]);
        comm_group across = {.n = dp / size}; /* at least its bytes' latency-free NVLink time */
        across.spans_nodes = 0;
        double grad_bytes = bytes / BYTES_WEIGHT * cm->grad_bytes;
        assert_true(s->zero_iter_ms[0] >=
                    comm_coll_ms(&cm->hw, COLL_ALL_REDUCE, &across, grad_bytes / size) * 0.999);
    }
    /* a smaller group all-reduces a larger shard across more groups */
    for (int k = 1; k < n; k++) assert_true(g[k].zero_iter_ms[0] < g[k - 1].zero_iter_ms[0]);
    /* ZeRO-1 HSDP (Megatron's distributed-optimizer instances): the cross-group all-reduce is part
     * of the gradient reduction, the all-gather after the step inside the group */
    stage_model z1, z1w;
    assert_int_equal(stage_model_init_sharded(&z1, cm, 1, 1, dp, 1, 8, 1e9, &err), DP_OK);
    assert_int_equal(stage_model_init(&z1w, cm, 1, 1, dp, 1, 1e9, &err), DP_OK);
    assert_true(z1.zero_fwd_ms[0] == 0 && z1.zero_bwd_ms[0] == 0);
    assert_true(z1.zero_grad_ms[0] < z1.zero_iter_ms[0]);
    assert_true(z1.state_mb[0] > z1w.state_mb[0]);
    /* refused: a group under ZeRO 0, or one that is not cp x a divisor of dp */
    assert_int_equal(stage_model_init_sharded(&z1, cm, 1, 1, dp, 0, 8, 1e9, &err), DP_ERR_INVALID);
    assert_int_equal(stage_model_init_sharded(&z1, cm, 1, 1, dp, 3, 12, 1e9, &err), DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--shard-group 8 or 16"));
    cost_model_free(cm);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_rule_against_brute_force),
        cmocka_unit_test(test_hsdp_stage_model),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
