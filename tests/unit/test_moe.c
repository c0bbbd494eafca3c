/*
 * test_moe.c — a mixture of experts' routing (models/moe.h): the expected busiest expert-parallel
 * rank's load against a brute-force sample of the routing model (each token's top-k choices
 * distinct experts, drawn by their probabilities), the imbalance falling toward the router's own
 * skew as a micro-batch grows, the rank shares of each model, the refusals naming the field, and
 * the token exchange's all-to-all from NCCL's formula at the preset's measured bus bandwidth. The
 * analytic cost model's MoE layer (cost_analytic.c): one expert run by every token is the dense
 * layer (to the router's bytes); its tokens' floor never above it; the exchange added with ep and
 * hidden with --overlap ep; small micro-batches pay more a token (imbalance, few tokens an
 * expert); the experts' weights split by ep.
 */
#include "testutil.h"

#include <gsl/gsl_rng.h>

#include "../../models/comm.h"
#include "../../models/cost.h"
#include "../../models/moe.h"
#include "../../scheduler/microbatch.h"
#include "../../scheduler/stage_cost.h"

/* The mean over `trials` micro-batches of tokens tokens of the busiest rank's routed copies, each
 * token choosing k experts one after another with probability proportional to p_e: among those
 * not yet chosen (distinct), or among all (the routing model's independent copies). */
static double sampled_busiest(const double *p, int experts, int ep, int k, int tokens, int trials,
                              int distinct, gsl_rng *rng)
{
    int per = experts / ep;
    double total = 0;
    int load[MOE_EP_MAX];
    char taken[MOE_EXPERTS_MAX];
    for (int t = 0; t < trials; t++) {
        memset(load, 0, sizeof load);
        for (int i = 0; i < tokens; i++) {
            memset(taken, 0, (size_t)experts);
            double left = 0;
            for (int e = 0; e < experts; e++) left += p[e];
            for (int j = 0; j < k; j++) {
                double u = gsl_rng_uniform(rng) * left, acc = 0;
                int e = 0;
                for (; e < experts - 1; e++) {
                    if (taken[e]) continue;
                    acc += p[e];
                    if (u < acc) break;
                }
                while (taken[e]) e--; /* rounding at the end: the last one left */
                if (distinct) taken[e] = 1, left -= p[e];
                load[e / per]++;
            }
        }
        int mx = 0;
        for (int r = 0; r < ep; r++) mx = load[r] > mx ? load[r] : mx;
        total += mx;
    }
    return total / trials;
}

static void test_busiest_load_against_a_sample(void **state)
{
    (void)state;
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 11);
    static const struct {
        moe_route_kind kind;
        int experts, ep, k, tokens;
        double alpha;
    } cases[] = {
        {MOE_ROUTE_UNIFORM, 64, 8, 8, 64, 0},    /* 512 copies on 8 ranks */
        {MOE_ROUTE_UNIFORM, 128, 16, 8, 256, 0}, /* Qwen3-30B-A3B's 128 experts, top-8 */
        {MOE_ROUTE_UNIFORM, 8, 8, 2, 512, 0},    /* Mixtral: 8 experts, top-2, one a rank */
        {MOE_ROUTE_SKEWED, 64, 8, 8, 128, 0.5},
        {MOE_ROUTE_HISTOGRAM, 32, 4, 4, 200, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        double p[MOE_EXPERTS_MAX];
        for (int e = 0; e < cases[c].experts; e++)
            p[e] = cases[c].kind == MOE_ROUTE_SKEWED ? pow(e + 1.0, -cases[c].alpha)
                   : cases[c].kind == MOE_ROUTE_HISTOGRAM ? 1 + (e % 5) * 0.5
                                                          : 1;
        moe_routing r;
        dp_err err = {0};
        assert_int_equal(moe_routing_init(&r, cases[c].kind, cases[c].experts, cases[c].ep,
                                          cases[c].alpha, p, &err),
                         DP_OK);
        double got = moe_busiest_load(&r, (double)cases[c].tokens * cases[c].k);
        /* the routing model itself: the normal approximation leaves out the binomials' right
         * skew (the real maximum is higher) and the multinomial's negative correlation (lower):
         * low by 0.0-1.2% here */
        double want = sampled_busiest(p, cases[c].experts, cases[c].ep, cases[c].k,
                                      cases[c].tokens, 2000, 0, rng);
        if (!(got >= want * 0.98 && got <= want * 1.01))
            fail_msg("case %zu: model %.2f, sample %.2f", c, got, want);
        /* a uniform router whose k choices are distinct experts (narrower): within 0.3% here */
        if (cases[c].kind != MOE_ROUTE_UNIFORM) continue;
        want = sampled_busiest(p, cases[c].experts, cases[c].ep, cases[c].k, cases[c].tokens, 2000,
                               1, rng);
        if (!(got >= want * 0.99 && got <= want * 1.01))
            fail_msg("case %zu: model %.2f, distinct sample %.2f", c, got, want);
    }
    gsl_rng_free(rng);
}

static void test_imbalance_falls_with_tokens(void **state)
{
    (void)state;
    moe_routing u, s;
    dp_err err = {0};
    assert_int_equal(moe_routing_init(&u, MOE_ROUTE_UNIFORM, 256, 64, 0, NULL, &err), DP_OK);
    assert_int_equal(moe_routing_init(&s, MOE_ROUTE_SKEWED, 256, 64, 0.2, NULL, &err), DP_OK);
    double skew = 0; /* the skewed router's own: the busiest rank's share x ep */
    for (int k = 0; k < 64; k++) skew = fmax(skew, s.q[k] * 64);
    double prev_u = INFINITY, prev_s = INFINITY;
    for (double n = 64; n <= 1 << 24; n *= 4) {
        double iu = moe_imbalance(&u, n), is = moe_imbalance(&s, n);
        assert_true(iu >= 1 && iu < prev_u);
        assert_true(is >= skew * (1 - 1e-9) && is <= prev_s * (1 + 1e-12));
        prev_u = iu, prev_s = is;
    }
    assert_true(prev_u < 1.01);              /* 16M copies: a uniform router is even */
    assert_true(prev_s < skew * 1.01);       /* and a skewed one its own skew */
    assert_true(moe_imbalance(&u, 512) > 1.5); /* 8 copies a rank on average: uneven */
    /* the what-if router: no imbalance at any size; the names round-trip */
    moe_routing ev;
    assert_int_equal(moe_routing_init(&ev, MOE_ROUTE_EVEN, 256, 64, 0, NULL, &err), DP_OK);
    assert_true(moe_imbalance(&ev, 64) == 1 && moe_busiest_load(&ev, 6400) == 100);
    static const char *names[] = {"uniform", "even", "skewed:0.25"};
    for (int i = 0; i < 3; i++) {
        moe_route_kind k;
        double a;
        char back[32];
        assert_int_equal(moe_routing_parse(names[i], &k, &a), 0);
        assert_string_equal(moe_routing_name(k, a, back, sizeof back), names[i]);
    }
    static const char *bad[] = {"skewed:", "skewed:-1", "skewed:1x", "zipf", ""};
    for (int i = 0; i < 5; i++) {
        moe_route_kind k;
        double a;
        assert_int_equal(moe_routing_parse(bad[i], &k, &a), -1);
    }
    /* one rank, or nothing routed: even */
    moe_routing one;
    assert_int_equal(moe_routing_init(&one, MOE_ROUTE_UNIFORM, 8, 1, 0, NULL, &err), DP_OK);
    assert_true(moe_imbalance(&one, 100) == 1 && moe_busiest_load(&one, 100) == 100);
    assert_true(moe_imbalance(&u, 0) == 1 && moe_busiest_load(&u, 0) == 0);
}

static void test_rank_shares_and_refusals(void **state)
{
    (void)state;
    moe_routing r;
    dp_err err = {0};
    double hist[8] = {8, 0, 4, 4, 1, 1, 1, 1};
    assert_int_equal(moe_routing_init(&r, MOE_ROUTE_HISTOGRAM, 8, 4, 0, hist, &err), DP_OK);
    assert_true(fabs(r.q[0] - 0.4) < 1e-12 && fabs(r.q[1] - 0.4) < 1e-12 &&
                fabs(r.q[2] - 0.1) < 1e-12 && fabs(r.q[3] - 0.1) < 1e-12);
    assert_int_equal(moe_routing_init(&r, MOE_ROUTE_SKEWED, 4, 2, 1, NULL, &err), DP_OK);
    double h = 1 + 1 / 2.0 + 1 / 3.0 + 1 / 4.0;
    assert_true(fabs(r.q[0] - 1.5 / h) < 1e-12 && fabs(r.q[1] - (1 / 3.0 + 0.25) / h) < 1e-12);
    struct {
        moe_route_kind kind;
        int experts, ep;
        double alpha, h0;
        const char *says;
    } bad[] = {
        {MOE_ROUTE_UNIFORM, 64, 6, 0, 1, "--ep 6 does not divide the 64 experts"},
        {MOE_ROUTE_UNIFORM, 0, 1, 0, 1, "experts 0"},
        {MOE_ROUTE_SKEWED, 64, 8, -1, 1, "skew -1"},
        {MOE_ROUTE_HISTOGRAM, 8, 4, 0, -2, "count of expert 0 is -2"},
        {MOE_ROUTE_HISTOGRAM, 8, 4, 0, 0, "sums to 0"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        double hh[8] = {bad[i].h0, 0, 0, 0, 0, 0, 0, 0};
        if (bad[i].h0 == 1) hh[1] = 1;
        dp_err e = {0};
        assert_int_equal(moe_routing_init(&r, bad[i].kind, bad[i].experts, bad[i].ep, bad[i].alpha,
                                          hh, &e),
                         DP_ERR_INVALID);
        assert_msg_has(e.msg, bad[i].says);
    }
}

/* A model of E experts, k a token, hidden h, and a router limited to gk of g groups (0: none). */
static model_spec moe_shape(int experts, int k, int hidden, int groups, int group_topk)
{
    model_spec m = *model_preset("llama3-8b");
    m.experts = experts, m.experts_per_token = k, m.expert_ffn = 2048, m.hidden = hidden;
    m.moe_groups = groups, m.moe_group_topk = group_topk;
    return m;
}

/* The exchange (moe_exchange_ms), written out from the preset: dispatch of 4,096 tokens x top-8 x
 * 7,168 bf16 elements. Inside a DGX H100 node, NCCL's all-to-all: (n - 1) / n of the bytes at the
 * node's bus bandwidth plus n - 1 latencies. Over 64 nodes, a GPU each, the same over the NICs.
 * Over 8 nodes of 8 GPUs, the copies for other nodes (56 / 64) over the NICs beside those for the
 * node's 7 other GPUs over NVLink, the longer of the two; DeepEP's dispatch sends a token once to
 * each other node it reaches (moe_remote_nodes) and forwards the remote copies inside the node. */
static void test_exchange_written_out(void **state)
{
    (void)state;
    cluster_spec hw;
    assert_int_equal(cluster_preset("dgx-h100", &hw), 0);
    model_spec m = moe_shape(256, 8, 7168, 0, 0);
    double copy = 4096.0 * 7168 * 2, bytes = copy * 8;
    comm_group node = comm_group_flat(8, 0);
    double busbw = comm_busbw_gbps(&hw, COLL_ALL_TO_ALL, &node) * 1e9;
    double want = 7 * hw.intra_latency_us / 1e3 + bytes * 7 / 8 / busbw * 1e3;
    for (int d = 0; d < 2; d++) /* one node: DeepEP's is NVLink's all-to-all too */
        assert_near(moe_exchange_ms(&hw, &node, 1, &m, (moe_dispatch)d, 4096, 2), want, 1e-9 * want);
    comm_group across = comm_group_flat(64, 1);
    double nic = comm_busbw_gbps(&hw, COLL_ALL_TO_ALL, &across) * 1e9;
    double lat = 63 * hw.inter_latency_us / 1e3;
    want = lat + bytes * 63 / 64 / nic * 1e3;
    assert_near(moe_exchange_ms(&hw, &across, 64, &m, MOE_DISPATCH_ALLTOALL, 4096, 2), want,
                1e-9 * want);
    assert_true(want > moe_exchange_ms(&hw, &node, 1, &m, MOE_DISPATCH_ALLTOALL, 4096, 2));
    double nvlink = hw.intra_gbit / 8 * hw.coll_eff[SCOPE_INTRA][COLL_ALL_TO_ALL] * 1e9;
    want = lat + fmax(bytes * 56 / 64 / nic, bytes * 7 / 64 / nvlink) * 1e3;
    assert_near(moe_exchange_ms(&hw, &across, 8, &m, MOE_DISPATCH_ALLTOALL, 4096, 2), want,
                1e-9 * want);
    double remote = moe_remote_nodes(&m, 8);
    want = lat + fmax(copy * remote / nic, copy * 8 * (7.0 / 64 + 56.0 / 64 * 7 / 8) / nvlink) * 1e3;
    double dedup = moe_exchange_ms(&hw, &across, 8, &m, MOE_DISPATCH_DEDUP, 4096, 2);
    assert_near(dedup, want, 1e-9 * want);
    assert_true(dedup < moe_exchange_ms(&hw, &across, 8, &m, MOE_DISPATCH_ALLTOALL, 4096, 2));
    comm_group alone = comm_group_flat(1, 0);
    assert_true(moe_exchange_ms(&hw, &alone, 1, &m, MOE_DISPATCH_ALLTOALL, 4096, 2) == 0);
}

/* moe_remote_nodes against a brute-force sample of routings: k distinct experts uniform over E
 * (or, under a group limit, gk distinct groups, then k distinct experts among their experts with
 * each chosen group given one first, as the formula takes them), experts in order over the nodes,
 * the distinct nodes other than the sender's (node 0) counted; within 1.5% (200,000 tokens). */
static void test_remote_nodes_by_sampling(void **state)
{
    (void)state;
    const struct {
        int experts, k, groups, gk, nodes;
    } cases[] = {{256, 8, 0, 0, 2},  {256, 8, 0, 0, 4},  {256, 8, 0, 0, 32}, {128, 8, 0, 0, 8},
                 {8, 2, 0, 0, 8},    {256, 8, 8, 4, 2},  {256, 8, 8, 4, 4},  {256, 8, 8, 4, 8},
                 {64, 6, 8, 3, 4}};
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 17);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        model_spec m = moe_shape(cases[c].experts, cases[c].k, 1024, cases[c].groups, cases[c].gk);
        int E = m.experts, k = m.experts_per_token, G = cases[c].groups, nodes = cases[c].nodes;
        double sum = 0;
        int tokens = 200000, *pick = calloc((size_t)E, sizeof *pick), *gpick = calloc(64, sizeof *gpick);
        for (int t = 0; t < tokens; t++) {
            memset(pick, 0, (size_t)E * sizeof *pick);
            int chosen = 0;
            if (G > 0) { /* gk groups, one expert in each, the rest among their experts */
                memset(gpick, 0, 64 * sizeof *gpick);
                for (int g = 0; g < cases[c].gk;) {
                    int x = (int)gsl_rng_uniform_int(rng, (unsigned long)G);
                    if (!gpick[x]) gpick[x] = 1, g++;
                }
                int per = E / G;
                for (int g = 0; g < G; g++)
                    if (gpick[g]) pick[g * per + (int)gsl_rng_uniform_int(rng, (unsigned long)per)] = 1, chosen++;
                while (chosen < k) {
                    int x = (int)gsl_rng_uniform_int(rng, (unsigned long)E);
                    if (gpick[x / per] && !pick[x]) pick[x] = 1, chosen++;
                }
            } else {
                while (chosen < k) {
                    int x = (int)gsl_rng_uniform_int(rng, (unsigned long)E);
                    if (!pick[x]) pick[x] = 1, chosen++;
                }
            }
            int per_node = E / nodes, seen = 0;
            for (int n = 1; n < nodes; n++) { /* the other nodes */
                int hit = 0;
                for (int e = n * per_node; e < (n + 1) * per_node && !hit; e++) hit = pick[e];
                seen += hit;
            }
            sum += seen;
        }
        double got = moe_remote_nodes(&m, nodes), want = sum / tokens;
        if (fabs(got - want) > 0.015 * want)
            fail_msg("E %d k %d groups %d/%d over %d nodes: %.4f, sampled %.4f", E, k, cases[c].gk,
                     G, nodes, got, want);
        free(pick), free(gpick);
    }
    gsl_rng_free(rng);
    model_spec one = moe_shape(256, 8, 1024, 8, 4);
    assert_true(moe_remote_nodes(&one, 1) == 0);
}

/* Qwen3-30B-A3B from its Hugging Face config (tests/data/hf). */
static model_spec qwen3_30b(void)
{
    model_spec m;
    dp_err err = {0};
    if (model_resolve("tests/data/hf/qwen3-30b-a3b.json", &m, &err) != DP_OK) fail_msg("%s", err.msg);
    return m;
}

static cost_model *analytic_of(const model_spec *m, int tp, recompute_mode rc)
{
    cluster_spec hw;
    assert_int_equal(cluster_preset("dgx-h100", &hw), 0);
    analytic_params ap;
    analytic_params_for_gpu(&hw.gpu, &ap);
    cost_model *cm = NULL;
    dp_err err = {0};
    if (cost_analytic_new(m, &hw, tp, rc, &ap, &cm, &err) != DP_OK) fail_msg("%s", err.msg);
    return cm;
}

/* Llama-3-8B as a mixture of one expert (its MLP) that every token runs: the same stage costs,
 * to the router's h parameters read a micro-batch (a relative 1e-5: 3e-6 under full recompute,
 * which reads them twice, at 256 tokens), at tp 1 in every recompute mode, and with the exchange
 * and imbalance of one rank: none. */
static void test_one_expert_is_the_dense_layer(void **state)
{
    (void)state;
    const model_spec *dense = model_preset("llama3-8b");
    model_spec moe = *dense;
    moe.experts = 1, moe.experts_per_token = 1, moe.expert_ffn = dense->ffn;
    moe.moe_first = 0, moe.moe_freq = 1, moe.moe_phase = 0;
    assert_int_equal(model_moe_layers(&moe), dense->enc_layers);
    for (int rc = 0; rc < RECOMPUTE_COUNT; rc++) {
        cost_model *a = analytic_of(dense, 1, (recompute_mode)rc);
        cost_model *b = analytic_of(&moe, 1, (recompute_mode)rc);
        dp_err err = {0};
        assert_int_equal(cost_model_set_moe(b, 1, NULL, &err), DP_OK);
        stage_model sa, sb;
        assert_int_equal(stage_model_init(&sa, a, 4, 1, 1, 0, 1e9, &err), DP_OK);
        assert_int_equal(stage_model_init(&sb, b, 4, 1, 1, 0, 1e9, &err), DP_OK);
        static const int lens[] = {256, 2048, 8192};
        for (int i = 0; i < 3; i++) {
            cost_shape sh = cost_shape_rows(2, lens[i], 0);
            mb_cost ca, cb;
            assert_int_equal(stage_model_cost(&sa, &sh, &ca, &err), DP_OK);
            assert_int_equal(stage_model_cost(&sb, &sh, &cb, &err), DP_OK);
            for (int d = 0; d < 4; d++) {
                assert_true(fabs(cb.fwd_ms[d] / ca.fwd_ms[d] - 1) < 1e-5);
                assert_true(fabs(cb.bwd_ms[d] / ca.bwd_ms[d] - 1) < 1e-5);
                assert_true(fabs(cb.stored_mb[d] / ca.stored_mb[d] - 1) < 1e-9);
            }
        }
        cost_model_free(a), cost_model_free(b);
    }
}

/* The share of n routed copies that experts with capacity C x n / E drop (moe_dropped_share),
 * against a brute-force sample of the routing model (each copy drawn on its own by p_e; an
 * expert's excess over its capacity counted): uniform and Zipf-skewed routers, Qwen3's and
 * Mixtral's expert counts, capacity factors 1 to 2; within 8% of the sample or 0.0005 of the
 * copies (1.3% at 256 copies an expert and more; the normal approximation runs low at fewer, by
 * the binomial's right skew: 7% at 64); 0 when dropless; an even router drops
 * 1 - C below 1 and nothing above; the share falls as C grows. */
static void test_dropped_share_against_a_sample(void **state)
{
    (void)state;
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    gsl_rng_set(rng, 23);
    static const struct {
        moe_route_kind kind;
        int experts, ep, copies;
        double alpha, capacity;
    } cases[] = {
        {MOE_ROUTE_UNIFORM, 128, 8, 4096 * 8, 0, 1.0},  {MOE_ROUTE_UNIFORM, 128, 8, 1024 * 8, 0, 1.25},
        {MOE_ROUTE_UNIFORM, 8, 8, 2048 * 2, 0, 1.0},    {MOE_ROUTE_UNIFORM, 64, 1, 512 * 8, 0, 1.1},
        {MOE_ROUTE_SKEWED, 128, 8, 2048 * 8, 0.5, 1.1}, {MOE_ROUTE_SKEWED, 8, 4, 1024 * 2, 1.0, 2.0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int E = cases[c].experts;
        double p[MOE_EXPERTS_MAX], sum = 0, cdf[MOE_EXPERTS_MAX];
        for (int e = 0; e < E; e++)
            p[e] = cases[c].kind == MOE_ROUTE_SKEWED ? pow(e + 1.0, -cases[c].alpha) : 1, sum += p[e];
        for (int e = 0; e < E; e++) cdf[e] = (e ? cdf[e - 1] : 0) + p[e] / sum;
        moe_routing r;
        dp_err err = {0};
        assert_int_equal(moe_routing_init(&r, cases[c].kind, E, cases[c].ep, cases[c].alpha, NULL,
                                          &err),
                         DP_OK);
        int n = cases[c].copies, trials = 100, load[MOE_EXPERTS_MAX];
        double cap = cases[c].capacity * n / E, sampled = 0;
        for (int t = 0; t < trials; t++) {
            memset(load, 0, sizeof load);
            for (int i = 0; i < n; i++) {
                double u = gsl_rng_uniform(rng);
                int lo = 0, hi = E - 1;
                while (lo < hi) { /* the first expert whose cumulative share passes u */
                    int mid = (lo + hi) / 2;
                    if (cdf[mid] > u) hi = mid;
                    else lo = mid + 1;
                }
                load[lo]++;
            }
            for (int e = 0; e < E; e++) sampled += fmax(0, load[e] - cap) / n;
        }
        sampled /= trials;
        double got = moe_dropped_share(&r, n, cases[c].capacity);
        if (!(fabs(got - sampled) <= fmax(0.08 * sampled, 0.0005)))
            fail_msg("case %zu: model %.5f, sample %.5f", c, got, sampled);
        assert_true(moe_dropped_share(&r, n, 0) == 0);
        assert_true(moe_dropped_share(&r, n, cases[c].capacity * 1.5) <= got);
    }
    moe_routing even;
    dp_err err = {0};
    assert_int_equal(moe_routing_init(&even, MOE_ROUTE_EVEN, 64, 8, 0, NULL, &err), DP_OK);
    assert_true(fabs(moe_dropped_share(&even, 4096, 0.75) - 0.25) < 1e-12);
    assert_true(moe_dropped_share(&even, 4096, 1.0) == 0);
    gsl_rng_free(rng);
}

/* A capacity factor caps the busiest rank's load at C x the mean, is refused on a dense model and
 * when negative; a plan of Qwen3-30B-A3B at capacity 1 drops what moe_dropped_share says. */
static void test_capacity_factor_costs(void **state)
{
    (void)state;
    model_spec m;
    dp_err err = {0};
    m = qwen3_30b();
    cost_model *cm = analytic_of(&m, 1, RECOMPUTE_NONE);
    moe_routing skew;
    assert_int_equal(moe_routing_init(&skew, MOE_ROUTE_SKEWED, 128, 8, 0.8, NULL, &err), DP_OK);
    assert_int_equal(cost_model_set_moe(cm, 8, &skew, &err), DP_OK);
    double free_imb = cost_moe_imbalance(cm, 8192);
    assert_true(free_imb > 1.5); /* the skew: well above 1.2 */
    assert_int_equal(cost_model_set_capacity(cm, 1.2, &err), DP_OK);
    assert_true(fabs(cost_moe_imbalance(cm, 8192) - 1.2) < 1e-12);
    assert_true(cost_moe_imbalance(cm, 8) <= 1.2);
    double share = cost_moe_dropped_share(cm, 1024, 0);
    assert_true(fabs(share - moe_dropped_share(&skew, 1024 * 8, 1.2)) < 1e-12 && share > 0.05);
    assert_int_equal(cost_model_set_capacity(cm, -1, &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "--capacity-factor");
    assert_true(cm->capacity == 1.2); /* unchanged */
    cost_model_free(cm);
    const model_spec *dense = model_preset("llama3-8b");
    cost_model *d = analytic_of(dense, 1, RECOMPUTE_NONE);
    assert_int_equal(cost_model_set_capacity(d, 1.25, &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "no experts to cap");
    assert_int_equal(cost_model_set_capacity(d, 0, &err), DP_OK);
    assert_true(cost_moe_dropped_share(d, 4096, 0) == 0);
    cost_model_free(d);
}

/* DeepSeek-V3's latent attention (cost_analytic.c mla_projections): a dense layer's FLOPs written
 * out from its config's numbers (hidden 7,168, 128 heads of 192 query/key and 128 value elements,
 * query latent 1,536, key/value latent 512 with a 64-wide rotary key, dense MLP 18,432 gated), the
 * down-projections whole on every GPU of a tp group and the rest split; QK^T and PV over 192 and
 * 128 a head. Its MoE model is planned (a cost model is made with ep 8). */
static void test_latent_attention_flops(void **state)
{
    (void)state;
    model_spec m;
    dp_err err = {0};
    if (model_resolve("tests/data/hf/deepseek-v3.json", &m, &err) != DP_OK) fail_msg("%s", err.msg);
    double h = 7168, a = 128, dk = 192, dv = 128, ql = 1536, kl = 512, r = 64, f = 18432;
    double down = h * ql + h * (kl + r);
    double up = ql * a * dk + kl * a * (128 + dv) + a * dv * h + 3 * h * f;
    cost_shape sh = cost_shape_rows(2, 4096, 0);
    double ee, dd, ed;
    cost_shape_attn(&sh, &ee, &dd, &ed);
    for (int tp = 1; tp <= 8; tp *= 2) {
        double dense, attn;
        analytic_flops(&m, COMP_ENCODER, &sh, tp, &dense, &attn);
        double want = 2 * 2 * 4096 * (up / tp + down);
        assert_true(fabs(dense / want - 1) < 1e-12);
        assert_true(fabs(attn / (2 * ee * a * (dk + dv) / tp) - 1) < 1e-12);
    }
    assert_true(fabs(model_attn_q_width(&m) - a * (dk + dv) / 2) < 1e-9);
    assert_true(fabs(model_attn_kv_width(&m) - a * (dk + dv) / 2) < 1e-9);
    const model_spec *llama = model_preset("llama3-8b"); /* grouped-query: the widths as they were */
    assert_true(model_attn_q_width(llama) == 32.0 * 128 && model_attn_kv_width(llama) == 8.0 * 128);
    cost_model *cm = analytic_of(&m, 1, RECOMPUTE_NONE);
    assert_int_equal(cost_model_set_moe(cm, 8, NULL, &err), DP_OK);
    cost_layer res;
    assert_int_equal(cost_query(cm, COMP_MOE, &sh, &res, &err), DP_OK);
    assert_true(res.fwd_ms > 0 && res.bwd_ms > res.fwd_ms);
    cost_model_free(cm);
}

/* Qwen3-30B-A3B on H100 (128 experts, 8 a token): the tokens' floor never above a MoE layer's
 * query over random shapes, layouts and modes; ep 8 adds the exchange, which --overlap ep hides
 * where the compute is longer; a small micro-batch pays more a token than a large one; ep
 * divides the experts' weights. */
static void test_moe_layer_costs(void **state)
{
    (void)state;
    model_spec m;
    dp_err err = {0};
    m = qwen3_30b();
    srand(5);
    long checked = 0;
    for (int tp = 1; tp <= 4; tp *= 2)
        for (int ep = 1; ep <= 64; ep *= 8)
            for (int rc = 0; rc < RECOMPUTE_COUNT; rc++) {
                cost_model *cm = analytic_of(&m, tp, (recompute_mode)rc);
                assert_int_equal(cost_model_set_moe(cm, ep, NULL, &err), DP_OK);
                /* and expert tensor parallelism on every other layout */
                assert_int_equal(cost_model_set_etp(cm, 1 + (tp + ep + rc) % 2, &err), DP_OK);
                double floor = cost_token_floor_ms(cm, COMP_MOE);
                assert_true(floor > 0);
                for (int k = 0; k < 40; k++) {
                    cost_shape sh = cost_shape_rows(1 + rand() % 8, 16 * (1 + rand() % 512), 0);
                    cost_layer l;
                    assert_int_equal(cost_query(cm, COMP_MOE, &sh, &l, &err), DP_OK);
                    double tokens = (double)sh.mbs * sh.enc_len;
                    if (!(l.fwd_ms + l.bwd_ms >= floor * tokens * (1 - 1e-12)))
                        fail_msg("tp %d ep %d rc %d: %d x %d takes %.6g ms, floor %.6g", tp, ep,
                                 rc, sh.mbs, sh.enc_len, l.fwd_ms + l.bwd_ms, floor * tokens);
                    checked++;
                }
                cost_model_free(cm);
            }
    assert_true(checked == 3 * 3 * RECOMPUTE_COUNT * 40);
    /* the exchange: dispatch and combine each way (its share of the layer's times, for the
     * simulator's pairs), none at ep 1; the overlap is the simulator's, the layer stays serial */
    cost_model *one = analytic_of(&m, 1, RECOMPUTE_NONE), *eight = analytic_of(&m, 1, RECOMPUTE_NONE);
    assert_int_equal(cost_model_set_moe(one, 1, NULL, &err), DP_OK);
    assert_int_equal(cost_model_set_moe(eight, 8, NULL, &err), DP_OK);
    cost_shape big = cost_shape_rows(4, 4096, 0), small = cost_shape_rows(1, 256, 0);
    cost_layer l1, l8, l8o, s8;
    assert_int_equal(cost_query(one, COMP_MOE, &big, &l1, &err), DP_OK);
    assert_int_equal(cost_query(eight, COMP_MOE, &big, &l8, &err), DP_OK);
    double a2a = moe_exchange_ms(&eight->hw, &eight->ep_group, eight->ep_nodes, &m,
                                 MOE_DISPATCH_ALLTOALL, 4.0 * 4096, 2);
    assert_true(a2a > 0);
    assert_near(l8.fwd_xchg_ms, 2 * a2a, 1e-12 * a2a);
    assert_near(l8.bwd_xchg_ms, 2 * a2a, 1e-12 * a2a);
    assert_true(l8.fwd_xchg_ms < l8.fwd_ms && l8.bwd_xchg_ms < l8.bwd_ms);
    assert_true(l1.fwd_xchg_ms == 0 && l1.bwd_xchg_ms == 0);
    eight->overlap |= COST_OVERLAP_EP;
    assert_int_equal(cost_query(eight, COMP_MOE, &big, &l8o, &err), DP_OK);
    assert_true(l8o.fwd_ms == l8.fwd_ms && l8o.bwd_ms == l8.bwd_ms);
    cost_model *full = analytic_of(&m, 1, RECOMPUTE_FULL); /* the forward's exchange again */
    assert_int_equal(cost_model_set_moe(full, 8, NULL, &err), DP_OK);
    cost_layer lf;
    assert_int_equal(cost_query(full, COMP_MOE, &big, &lf, &err), DP_OK);
    assert_near(lf.fwd_xchg_ms, 2 * a2a, 1e-12 * a2a);
    assert_near(lf.bwd_xchg_ms, 4 * a2a, 1e-12 * a2a);
    cost_model_free(full);
    /* ep 8 reads an eighth of the experts' weights, and splits their memory */
    assert_true(eight->param_mb[COMP_MOE] < one->param_mb[COMP_MOE] / 4);
    int64_t split, whole, expert;
    model_moe_layer_parts(&m, &split, &whole, &expert);
    assert_true(fabs(eight->param_mb[COMP_MOE] - 2.0 * (split + whole + 16 * expert) / 1e6) < 1e-9);
    /* a small micro-batch pays more a token: the busiest rank's share and few tokens an expert */
    eight->overlap &= ~COST_OVERLAP_EP;
    assert_int_equal(cost_query(eight, COMP_MOE, &small, &s8, &err), DP_OK);
    assert_true((s8.fwd_ms + s8.bwd_ms) / 256 > (l8.fwd_ms + l8.bwd_ms) / (4 * 4096));
    assert_true(cost_moe_imbalance(eight, 256 * 8) > cost_moe_imbalance(eight, 4 * 4096 * 8));
    cost_model_free(one), cost_model_free(eight);
}

/* Expert tensor parallelism (cost_model_set_etp): each expert split over etp GPUs holds 1/etp of
 * the experts' weights; on a GPU without a GEMM shape curve (the same FLOPs at the same rate) it
 * adds exactly a gather of the ep rank's copies over its etp GPUs per dispatch and per combine
 * (NCCL's formula at the preset's bandwidth), forward, less at most the time its smaller share of
 * the weights took to read, and stores the gathered copies; refused
 * where etp does not divide the expert width, and on a dense model. */
static void test_expert_tensor_parallelism(void **state)
{
    (void)state;
    model_spec m;
    dp_err err = {0};
    m = qwen3_30b();
    cost_model *cm[2];
    cost_layer l[2];
    cost_shape sh = cost_shape_rows(2, 4096, 0);
    for (int i = 0; i < 2; i++) {
        cm[i] = analytic_of(&m, 1, RECOMPUTE_NONE);
        cm[i]->hw.gpu.gemm_k0 = 0, cm[i]->hw.gpu.fp8_gemm_k0 = 0; /* no shape curve */
        assert_int_equal(cost_model_set_moe(cm[i], 8, NULL, &err), DP_OK);
        assert_int_equal(cost_model_set_etp(cm[i], i ? 4 : 1, &err), DP_OK);
        assert_int_equal(cost_query(cm[i], COMP_MOE, &sh, &l[i], &err), DP_OK);
    }
    int64_t split, whole, expert;
    model_moe_layer_parts(&m, &split, &whole, &expert);
    assert_true(fabs(cm[1]->param_mb[COMP_MOE] - 2.0 * (split + whole + 16 * expert / 4.0) / 1e6) <
                1e-9);
    double routed = 2.0 * 4096 * 8 * cost_moe_imbalance(cm[1], 2.0 * 4096 * 8);
    double gather = comm_coll_ms(&cm[1]->hw, COLL_ALL_GATHER, &cm[1]->etp_group,
                                 routed * 4 * m.hidden * 2);
    assert_true(gather > 0);
    /* less of the experts' weights read once: at most their bytes at the HBM's bandwidth fewer */
    double read_ms = (cm[0]->param_mb[COMP_MOE] - cm[1]->param_mb[COMP_MOE]) * 1e6 /
                     (cm[1]->hw.gpu.hbm_gbps * 1e9) * 1e3 / 0.9;
    double added = l[1].fwd_ms - l[0].fwd_ms;
    if (!(added <= 2 * gather + 1e-9 && added >= 2 * gather - read_ms))
        fail_msg("etp 4 adds %.6f ms forward, two gathers are %.6f, the weights read %.6f", added,
                 2 * gather, read_ms);
    assert_true(fabs((l[1].stored_act_mb - l[0].stored_act_mb) * 1e6 - 2.0 * routed * 3 * m.hidden) <
                1);
    assert_int_equal(cost_model_set_etp(cm[1], 5, &err), DP_ERR_INVALID); /* 768 % 5 */
    assert_msg_has(err.msg, "--etp 5 does not divide");
    assert_int_equal(cm[1]->etp, 4); /* unchanged */
    cost_model_free(cm[0]), cost_model_free(cm[1]);
    cost_model *d = analytic_of(model_preset("llama3-8b"), 1, RECOMPUTE_NONE);
    assert_int_equal(cost_model_set_etp(d, 2, &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "no experts to split");
    cost_model_free(d);
}

/* A MoE's routed experts keep their state over their own data-parallel group: each expert's share
 * is replicated over a stage's tp x cp x dp / (ep x etp) GPUs (Megatron's parallel folding), which
 * ZeRO splits it over, while the rest splits over dp x cp. Written out here from the layer's parts,
 * at ZeRO 1, 2 and 3: ep 4 over tp 2 x dp 8 (4 copies of each expert), ep 16 (one: the experts'
 * Adam state whole on every GPU), ep 4 with etp 2 (2 copies). */
static void test_experts_state_over_their_group(void **state)
{
    (void)state;
    model_spec m;
    dp_err err = {0};
    m = qwen3_30b();
    int64_t split, whole, expert;
    model_moe_layer_parts(&m, &split, &whole, &expert);
    const int tp = 2, dp = 8, pp = 2;
    struct { int ep, etp, copies; } cases[] = {{4, 1, 4}, {16, 1, 1}, {4, 2, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int zero = 1; zero <= 3; zero++) {
            cost_model *cm = analytic_of(&m, tp, RECOMPUTE_FULL);
            assert_int_equal(cost_model_set_moe(cm, cases[c].ep, NULL, &err), DP_OK);
            assert_int_equal(cost_model_set_etp(cm, cases[c].etp, &err), DP_OK);
            stage_model sm;
            if (stage_model_init(&sm, cm, pp, 1, dp, zero, 1e9, &err) != DP_OK)
                fail_msg("%s", err.msg);
            assert_int_equal(sm.expert_shard, cases[c].copies);
            for (int s = 0; s < pp; s++) {
                /* 16-bit MB of the stage's experts, and bytes a parameter: 2, 4 (fp32 gradients),
                 * 12 (Adam), each split over its group from the ZeRO stage that shards it */
                double e_mb = sm.moe_layers[s] * 2.0 * expert * (m.experts / cases[c].ep) /
                              cases[c].etp / 1e6;
                double d_mb = sm.param_mb[s] - e_mb;
                double bytes[3] = {2, cm->grad_bytes, 12}, want = 0;
                for (int k = 0; k < 3; k++) {
                    int sharded = zero >= 3 - k; /* optimizer from ZeRO-1, gradients 2, weights 3 */
                    want += d_mb / 2 * bytes[k] / (sharded ? dp : 1) +
                            e_mb / 2 * bytes[k] / (sharded ? cases[c].copies : 1);
                }
                double got = sm.state_mb[s] - sm.zero3_gathered_mb[s];
                if (fabs(got - want) > 1e-6 * want)
                    fail_msg("ep %d etp %d ZeRO-%d stage %d: state %.3f MB, want %.3f",
                             cases[c].ep, cases[c].etp, zero, s, got, want);
                assert_true(sm.moe_layers[s] > 0 && e_mb > 0);
            }
            cost_model_free(cm);
        }
}

/* ...and reduce their gradients over it: the experts' bytes over the stage's tp x cp x dp /
 * (ep x etp) GPUs ep x etp apart, the rest over dp x cp (NCCL's formula, models/comm.h). Written
 * out for Qwen3-30B-A3B at tp 1, one stage, on dgx-h100 (8 GPUs and 8 NICs a node), ZeRO 0 and 1:
 * dp 8 and ep 8 (no expert replica: nothing to reduce), dp 8 and ep 2 (4 replicas, 2 apart, in
 * the node), dp 16 and ep 8 (2 replicas, one a node: a NIC each). */
static void test_experts_gradients_over_their_group(void **state)
{
    (void)state;
    model_spec m;
    dp_err err = {0};
    m = qwen3_30b();
    struct { int dp, ep; comm_group dense, experts; } cases[] = {
        {8, 8, {8, 0, 1, 8}, {1, 0, 1, 1}},
        {8, 2, {8, 0, 1, 8}, {4, 0, 1, 4}},
        {16, 8, {16, 1, 8, 8}, {2, 1, 1, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int zero = 0; zero <= 1; zero++) {
            cost_model *cm = analytic_of(&m, 1, RECOMPUTE_FULL);
            assert_int_equal(cost_model_set_moe(cm, cases[c].ep, NULL, &err), DP_OK);
            stage_model sm;
            if (stage_model_init(&sm, cm, 1, 1, cases[c].dp, zero, 1e9, &err) != DP_OK)
                fail_msg("%s", err.msg);
            double e_bytes = 1e6 * sm.expert_mb[0], d_bytes = 1e6 * sm.param_mb[0] - e_bytes;
            double g = cm->grad_bytes / 2.0, want_iter = 0, want_grad = 0;
            const comm_group *grp[2] = {&cases[c].dense, &cases[c].experts};
            double bytes[2] = {d_bytes, e_bytes};
            for (int k = 0; k < 2; k++) {
                if (zero == 0) {
                    double ar = comm_coll_ms(&cm->hw, COLL_ALL_REDUCE, grp[k], g * bytes[k]);
                    want_iter += ar, want_grad += ar;
                } else {
                    double rs = comm_coll_ms(&cm->hw, COLL_REDUCE_SCATTER, grp[k], g * bytes[k]);
                    want_iter += rs + comm_coll_ms(&cm->hw, COLL_ALL_GATHER, grp[k], bytes[k]);
                    want_grad += rs;
                }
            }
            if (fabs(sm.zero_iter_ms[0] - want_iter) > 1e-9 * want_iter ||
                fabs(sm.zero_grad_ms[0] - want_grad) > 1e-9 * want_grad)
                fail_msg("dp %d ep %d ZeRO-%d: %.6f ms at the end (%.6f reducing), want %.6f "
                         "(%.6f)", cases[c].dp, cases[c].ep, zero, sm.zero_iter_ms[0],
                         sm.zero_grad_ms[0], want_iter, want_grad);
            assert_true(e_bytes > d_bytes); /* the experts are most of the bytes */
            cost_model_free(cm);
        }
}

/* Whether the experts' exchange reaches across replicas (stage_experts_span, mesh.h's rule): an
 * expert rank is ep x etp consecutive GPUs, a replica tp x cp; so the replicas then meet in
 * lockstep (microbatch.h mb_replicas_meet) even under ZeRO-1. */
static void test_experts_span_replicas(void **state)
{
    (void)state;
    model_spec m;
    dp_err err = {0};
    m = qwen3_30b();
    struct { int tp, dp, ep, etp, span; } cases[] = {
        {1, 4, 4, 1, 1}, {4, 2, 4, 1, 0}, {4, 2, 8, 1, 1}, {2, 4, 1, 2, 0}, {2, 4, 2, 2, 1},
        {1, 4, 1, 1, 0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        cost_model *cm = analytic_of(&m, cases[c].tp, RECOMPUTE_FULL);
        assert_int_equal(cost_model_set_moe(cm, cases[c].ep, NULL, &err), DP_OK);
        assert_int_equal(cost_model_set_etp(cm, cases[c].etp, &err), DP_OK);
        stage_model sm;
        if (stage_model_init(&sm, cm, 2, 1, cases[c].dp, 1, 1e9, &err) != DP_OK)
            fail_msg("%s", err.msg);
        assert_int_equal(stage_experts_span(&sm), cases[c].span);
        assert_int_equal(mb_replicas_lockstep(1, cases[c].dp, stage_experts_span(&sm)),
                         cases[c].span);
        cost_model_free(cm);
    }
    cost_model *d = analytic_of(model_preset("llama3-8b"), 1, RECOMPUTE_FULL);
    stage_model sm;
    if (stage_model_init(&sm, d, 2, 1, 4, 1, 1e9, &err) != DP_OK) fail_msg("%s", err.msg);
    assert_int_equal(stage_experts_span(&sm), 0);
    cost_model_free(d);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_busiest_load_against_a_sample),
        cmocka_unit_test(test_imbalance_falls_with_tokens),
        cmocka_unit_test(test_rank_shares_and_refusals),
        cmocka_unit_test(test_exchange_written_out),
        cmocka_unit_test(test_remote_nodes_by_sampling),
        cmocka_unit_test(test_one_expert_is_the_dense_layer),
        cmocka_unit_test(test_moe_layer_costs),
        cmocka_unit_test(test_latent_attention_flops),
        cmocka_unit_test(test_dropped_share_against_a_sample),
        cmocka_unit_test(test_capacity_factor_costs),
        cmocka_unit_test(test_expert_tensor_parallelism),
        cmocka_unit_test(test_experts_state_over_their_group),
        cmocka_unit_test(test_experts_gradients_over_their_group),
        cmocka_unit_test(test_experts_span_replicas),
    };
    return cmocka_run_group_tests_name("moe", tests, NULL, NULL);
}
