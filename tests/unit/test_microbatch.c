/* Unit tests for scheduler/ batching: global batches, strategies, the exact DP against brute force. */
#include "testutil.h"

#include "analytic_util.h"

#include "../../models/cost.h"
#include "../../scheduler/batch.h"
#include "../../scheduler/microbatch.h"
#include "../../scheduler/stage_cost.h"
#include "../../traces/trace_gen.h"

/* A random cost grid, non-decreasing along every axis, for a 16-layer tiny model. */
static const char *random_profile(unsigned *seed, int t5)
{
    static char buf[1 << 18];
    static const int mbs[] = {1, 2, 4, 8, 16}, lens[] = {16, 32, 64, 128, 256};
    size_t n = (size_t)snprintf(buf, sizeof buf,
                                "tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value\n");
    static const char *const metrics[] = {"fwd_ms", "bwd_ms", "stored_act_mb", "peak_act_mb"};
    double base[4] = {0.2, 0.4, 1, 2};
    for (int k = 0; k < 4; k++) {
        double a = 0.5 + (rand_r(seed) % 100) / 100.0, b = 0.01 + (rand_r(seed) % 100) / 1000.0;
        for (int i = 0; i < 5; i++)
            for (int j = 0; j < 5; j++) {
                double tokens = mbs[i] * lens[j];
                double v = base[k] + a * tokens / 64 + b * tokens * lens[j] / 4096 +
                           (rand_r(seed) % 10) / 1000.0 * (i + j);
                n += (size_t)snprintf(buf + n, sizeof buf - n, "1,none,encoder,%s,%d,%d,0,%.9g\n",
                                      metrics[k], mbs[i], lens[j], v);
                for (int d = 0; t5 && d < 5; d++)
                    n += (size_t)snprintf(buf + n, sizeof buf - n,
                                          "1,none,decoder,%s,%d,%d,%d,%.9g\n", metrics[k], mbs[i],
                                          lens[j], lens[d], v * (1 + lens[d] / 256.0));
            }
        for (int i = 0; i < 5 && k < 2; i++)
            for (int j = 0; j < 5; j++)
                n += (size_t)snprintf(buf + n, sizeof buf - n, "1,none,postprocess,%s,%d,%d,%d,%.9g\n",
                                      metrics[k], mbs[i], t5 ? 0 : lens[j], t5 ? lens[j] : 0,
                                      0.05 * mbs[i] * lens[j] / 64);
    }
    return tmp_file(".csv", buf);
}

typedef struct fixture {
    model_spec m;
    cluster_spec hw;
    cost_model *cm;
    stage_model sm;
    batch_rules rules;
    batch_ctx ctx;
} fixture;

static void fixture_init(fixture *f, unsigned *seed, int t5, int S, int C, int D, double mem)
{
    memset(f, 0, sizeof *f);
    f->m = *model_preset(t5 ? "t5-tiny" : "gpt-tiny");
    f->m.enc_layers = 16;
    if (t5) f->m.dec_layers = 16;
    cluster_preset("p4d", &f->hw);
    dp_err err = {0};
    if (cost_profile_load(random_profile(seed, t5), &f->m, &f->hw, 1, RECOMPUTE_NONE, &f->cm,
                          &err) != DP_OK)
        fail_msg("%s", err.msg);
    /* mem is the activation budget: add the largest stage's model state to it. */
    if (stage_model_init(&f->sm, f->cm, S, C, D, 1, 1e9, &err) != DP_OK) fail_msg("%s", err.msg);
    double state = 0;
    for (int d = 0; d < S; d++) state = state > f->sm.state_mb[d] ? state : f->sm.state_mb[d];
    if (stage_model_init(&f->sm, f->cm, S, C, D, 1, state + mem, &err) != DP_OK)
        fail_msg("%s", err.msg);
    batch_rules_default(&f->rules, f->m.arch);
    f->rules.max_seqlen = 256;
    f->rules.max_dec_seqlen = 256;
    f->ctx = (batch_ctx){&f->rules, &f->sm, 2, 512, 0, NULL, DP_SPLIT_AUTO, NULL, 0};
}

static void fixture_release(fixture *f)
{
    cost_model_free(f->cm);
}

/* Cost of segment [i, j) in ns, or -1 when it does not fit: the memory rule written out here
 * (stage_cost.h): with `held` micro-batches held on every device (the default rule holds S, the
 * fallback 1), held * stored + transient / C <= budget on every device. */
/* The whole-row shape of segment [i, j): its rows padded to its longest sample. */
static cost_shape test_seg_shape(const batch_rules *r, const sample_len *s, int i, int j)
{
    int enc = 0, dec = 0;
    for (int k = i; k < j; k++) {
        if (s[k].enc > enc) enc = s[k].enc;
        if (s[k].dec > dec) dec = s[k].dec;
    }
    return cost_shape_rows(j - i, batch_pad(r, enc), batch_pad(r, dec));
}

/* A shape's time in ns under the memory rule written out, or -1 when it does not fit. */
static int64_t shape_ns(const stage_model *sm, const cost_shape *sh, int held)
{
    mb_cost c;
    if (stage_model_cost(sm, sh, &c, NULL) != DP_OK) return -1;
    for (int d = 0; d < sm->pp; d++)
        if (held * c.stored_mb[d] + (c.peak_mb[d] - c.stored_mb[d]) / sm->chunks > sm->budget_mb[d])
            return -1;
    return llround(c.t_ms * 1e6);
}

static int64_t seg_ns(const fixture *f, const sample_len *s, int i, int j, int held)
{
    cost_shape sh = test_seg_shape(&f->rules, s, i, j);
    return shape_ns(&f->sm, &sh, held);
}

/* The DP's objective times C x D, written out here: DynaPipe's (S-1)*max/C + sum/D; with one
 * stage no fill or drain, and the replicas wait for the largest micro-batch: max(sum/D, max). */
static int64_t objective_cd(int S, int C, int D, int64_t sum, int64_t mx)
{
    if (S == 1) return C * (sum > mx * D ? sum : mx * D);
    return (int64_t)(S - 1) * mx * D + sum * C;
}

/* Minimum of objective_cd over every contiguous partition, or INT64_MAX. */
static int64_t brute_force_d(const fixture *f, const sample_len *s, int n, int in_flight, int D)
{
    int64_t best = INT64_MAX;
    int S = f->sm.pp, C = f->sm.chunks;
    for (unsigned mask = 0; mask < (1u << (n - 1)); mask++) {
        int64_t sum = 0, mx = 0;
        int start = 0, ok = 1;
        for (int j = 1; j <= n && ok; j++) {
            if (j < n && !(mask & (1u << (j - 1)))) continue;
            int64_t t = seg_ns(f, s, start, j, in_flight);
            if (t < 0) ok = 0;
            sum += t;
            if (t > mx) mx = t;
            start = j;
        }
        if (!ok) continue;
        int64_t sc = objective_cd(S, C, D, sum, mx);
        if (sc < best) best = sc;
    }
    return best;
}

static int64_t brute_force(const fixture *f, const sample_len *s, int n, int in_flight)
{
    return brute_force_d(f, s, n, in_flight, f->sm.dp);
}

static int64_t plan_score(const fixture *f, const mb_list *l, const sample_len *ordered, int n)
{
    /* Recompute each micro-batch's ns cost from its samples, in the DP's order. */
    int S = f->sm.pp, C = f->sm.chunks, D = f->sm.dp, at = 0;
    int64_t sum = 0, mx = 0;
    for (int k = 0; k < l->n_mb; k++) {
        const microbatch *m = &l->mb[k];
        for (int q = 0; q < m->n_samples; q++) assert_int_equal(l->ids[m->first + q], ordered[at + q].id);
        int64_t t = seg_ns(f, ordered, at, at + m->n_samples, l->in_flight == 1 ? 1 : f->sm.pp);
        assert_true(t >= 0);
        sum += t;
        if (t > mx) mx = t;
        at += m->n_samples;
    }
    assert_int_equal(at, n);
    return objective_cd(S, C, D, sum, mx);
}

static void random_samples(unsigned *seed, sample_len *s, int n, int t5)
{
    for (int i = 0; i < n; i++) {
        s[i].id = i;
        s[i].enc = 1 + rand_r(seed) % 250;
        s[i].dec = t5 ? 3 + rand_r(seed) % 200 : 0;
    }
}

/* --cp auto: the DP, each segment priced at its fastest degree that fits (stage_model_pick_cp),
 * finds the best objective over every contiguous partition and every assignment of degrees to its
 * micro-batches (brute force, the memory rule written out); and each micro-batch of its list names
 * the degree it was priced at. Llama-kind layers on the analytic model, a group of 4 GPUs,
 * sequences to 4096 tokens, memory generous or binding. */
typedef struct cp_fixture {
    cost_model *cm;
    stage_model sm;
    batch_rules rules;
    batch_ctx ctx;
} cp_fixture;

static int64_t cp_seg_ns(const cp_fixture *f, const sample_len *s, int i, int j, int d, int held)
{
    cost_shape sh = test_seg_shape(&f->rules, s, i, j);
    sh.cp = d;
    return shape_ns(&f->sm, &sh, held);
}

static int64_t cp_brute_force(const cp_fixture *f, const sample_len *s, int n, int held)
{
    static const int degrees[] = {1, 2, 4};
    int64_t best = INT64_MAX;
    int S = f->sm.pp;
    for (unsigned mask = 0; mask < (1u << (n - 1)); mask++) {
        int cut[16], k = 0; /* the segments' ends */
        for (int j = 1; j <= n; j++)
            if (j == n || mask & (1u << (j - 1))) cut[k++] = j;
        int pick[16] = {0};
        for (;;) { /* every assignment of degrees to the k segments */
            int64_t sum = 0, mx = 0;
            int ok = 1;
            for (int q = 0, start = 0; q < k && ok; start = cut[q++]) {
                int64_t t = cp_seg_ns(f, s, start, cut[q], degrees[pick[q]], held);
                if (t < 0) ok = 0;
                sum += t, mx = t > mx ? t : mx;
            }
            if (ok && (int64_t)(S - 1) * mx + sum < best) best = (int64_t)(S - 1) * mx + sum;
            int q = 0;
            while (q < k && ++pick[q] == 3) pick[q++] = 0;
            if (q == k) break;
        }
    }
    return best;
}

static void test_cp_auto_matches_brute_force(void **state)
{
    (void)state;
    unsigned seed = 777;
    int cases = 0, mixed = 0;
    for (int rep = 0; rep < 12; rep++) {
        cp_fixture f;
        memset(&f, 0, sizeof f);
        model_spec m = *model_preset("gpt-tiny");
        m.enc_layers = 8, m.hidden = 1024, m.heads = 8, m.kv_channels = 128, m.ffn = 4096;
        cluster_spec hw;
        cluster_preset("p4d", &hw);
        analytic_params ap;
        analytic_params_default(&ap);
        dp_err err = {0};
        if (cost_analytic_new(&m, &hw, 1, RECOMPUTE_NONE, &ap, &f.cm, &err) != DP_OK) fail_msg("%s", err.msg);
        if (cost_model_set_cp_auto(f.cm, 4, 0, &err) != DP_OK) fail_msg("%s", err.msg);
        int S = 1 + rep % 2;
        double probe_state;
        if (stage_model_init(&f.sm, f.cm, S, 1, 1, 0, 1e9, &err) != DP_OK) fail_msg("%s", err.msg);
        probe_state = f.sm.state_mb[0];
        double mem = rep < 4 ? 1e6 : 300 + rand_r(&seed) % 2000; /* generous, then binding */
        if (stage_model_init(&f.sm, f.cm, S, 1, 1, 0, probe_state + mem, &err) != DP_OK)
            fail_msg("%s", err.msg);
        batch_rules_default(&f.rules, ARCH_GPT);
        f.rules.max_seqlen = 4096;
        f.ctx = (batch_ctx){&f.rules, &f.sm, 2, 512, 0, NULL, DP_SPLIT_AUTO, NULL, 0};
        int n = 3 + rand_r(&seed) % 6;
        sample_len s[12];
        for (int i = 0; i < n; i++) s[i] = (sample_len){i, 64 + rand_r(&seed) % 4000, 0};
        mb_list l;
        mb_list_init(&l);
        dp_status st = dp_batch(&f.ctx, s, n, &l, &err);
        assert_int_equal(mb_order(&f.rules, s, n), DP_OK);
        int held = S;
        int64_t bf = cp_brute_force(&f, s, n, held);
        if (bf == INT64_MAX) held = 1, bf = cp_brute_force(&f, s, n, 1);
        if (bf == INT64_MAX) {
            assert_int_equal(st, DP_ERR_INFEASIBLE);
        } else {
            if (st != DP_OK) fail_msg("%s", err.msg);
            if (mb_list_finish(&f.ctx, &l, &err) != DP_OK) fail_msg("%s", err.msg);
            int64_t sum = 0, mx = 0;
            int seen[5] = {0};
            for (int k = 0, at = 0; k < l.n_mb; at += l.mb[k++].n_samples) {
                const microbatch *mb = &l.mb[k];
                assert_true(mb->cp == 1 || mb->cp == 2 || mb->cp == 4);
                seen[mb->cp] = 1;
                int64_t t = cp_seg_ns(&f, s, at, at + mb->n_samples, mb->cp, held);
                assert_true(t >= 0);
                sum += t, mx = t > mx ? t : mx;
            }
            assert_int_equal((int64_t)(S - 1) * mx + sum, bf);
            mixed += seen[1] + seen[2] + seen[4] > 1;
            cases++;
        }
        mb_list_release(&l);
        cost_model_free(f.cm);
    }
    assert_true(cases >= 8);
    assert_true(mixed >= 1); /* some batch runs micro-batches of different degrees */
}

/* The analytic cost model of gpt-tiny widened to Llama-kind width 1024 (8 heads of 128, ffn
 * 4096), `layers` deep, on p4d, its spec in *m (the caller frees the model). */
static cost_model *tiny_analytic(int layers, model_spec *m)
{
    *m = *model_preset("gpt-tiny");
    m->enc_layers = layers, m->hidden = 1024, m->heads = 8, m->kv_channels = 128, m->ffn = 4096;
    cluster_spec hw;
    cluster_preset("p4d", &hw);
    analytic_params ap;
    analytic_params_default(&ap);
    cost_model *cm = NULL;
    dp_err err = {0};
    if (cost_analytic_new(m, &hw, 1, RECOMPUTE_NONE, &ap, &cm, &err) != DP_OK)
        fail_msg("%s", err.msg);
    return cm;
}

/* --cp auto's split of a varlen micro-batch with fewer rows than parts: its samples spread over
 * the group's G / c parts, the heaviest holding the longest sample or an even share of the tokens
 * and attention sums, whichever is more; checked against the same model at a fixed degree on the
 * part's shape written out here. */
static void test_cp_auto_spreads_samples(void **state)
{
    (void)state;
    model_spec m;
    cost_model *group = tiny_analytic(4, &m), *fixed = tiny_analytic(4, &m);
    dp_err err = {0};
    assert_int_equal(cost_model_set_cp_auto(group, 4, 0, &err), DP_OK);
    stage_model sg, sf;
    assert_int_equal(stage_model_init(&sg, group, 2, 1, 1, 0, 1e9, &err), DP_OK);
    for (int c = 1; c <= 4; c *= 2) {
        assert_int_equal(cost_model_set_cp(fixed, c, 0, &err), DP_OK);
        assert_int_equal(stage_model_init(&sf, fixed, 2, 1, 1, 0, 1e9, &err), DP_OK);
        for (int longest = 256; longest <= 4096; longest *= 4) {
            /* one packed row of 4096 tokens: the longest sample and 256-token ones */
            cost_shape row = cost_shape_rows(1, 4096, 0), part = cost_shape_rows(1, 0, 0);
            row.varlen = 1, row.enc_max = longest, row.cp = c;
            row.enc_sq = (double)longest * longest + (4096.0 - longest) / 256 * 256 * 256;
            int parts = 4 / c;
            part.varlen = 1;
            part.enc_len = (int)fmax(longest, 4096.0 / parts);
            part.enc_sq = fmax((double)longest * longest, row.enc_sq / parts);
            mb_cost a, b;
            assert_int_equal(stage_model_cost(&sg, &row, &a, &err), DP_OK);
            assert_int_equal(stage_model_cost(&sf, &part, &b, &err), DP_OK);
            for (int d = 0; d < 2; d++) {
                assert_near(a.fwd_ms[d], b.fwd_ms[d], 1e-9 * b.fwd_ms[d]);
                assert_near(a.stored_mb[d], b.stored_mb[d], 1e-9 * b.stored_mb[d]);
            }
        }
    }
    cost_model_free(group), cost_model_free(fixed);
}

static void test_dp_matches_brute_force(void **state)
{
    (void)state;
    unsigned seed = 12345;
    static const int Ss[] = {1, 2, 4, 8};
    int cases = 0, constrained = 0;
    /* one shape cache through every case: fixtures change under it (it must clear itself) */
    shape_cache *cache = shape_cache_new();
    for (int t5 = 0; t5 <= 1; t5++)
        for (int si = 0; si < 4; si++)
            for (int C = 1; C <= 2; C++)
                for (int D = 1; D <= 2; D++)
                    for (int rep = 0; rep < 8; rep++) {
                        int S = Ss[si];
                        if (t5 && S * C == 1) continue;
                        /* memory: sometimes generous, sometimes binding */
                        double mem = rep == 0 ? 1e6 : 40 + rand_r(&seed) % 200;
                        fixture f;
                        fixture_init(&f, &seed, t5, S, C, D, mem);
                        f.ctx.cache = rep % 2 ? cache : NULL;
                        int n = 2 + rand_r(&seed) % 11;
                        sample_len s[12];
                        random_samples(&seed, s, n, t5);
                        mb_list l;
                        mb_list_init(&l);
                        dp_err err = {0};
                        dp_status st = dp_batch(&f.ctx, s, n, &l, &err);
                        assert_int_equal(mb_order(&f.rules, s, n), DP_OK);
                        int64_t bf = brute_force(&f, s, n, S);
                        int in_flight = 0; /* the DP's flag: 1 when it fell back to one held */
                        if (bf == INT64_MAX) bf = brute_force(&f, s, n, 1), in_flight = 1;
                        if (bf == INT64_MAX) {
                            assert_int_equal(st, DP_ERR_INFEASIBLE);
                            assert_msg_has(err.msg, "does not fit in a micro-batch even alone");
                        } else {
                            if (st != DP_OK) fail_msg("%s", err.msg);
                            assert_int_equal(l.in_flight, in_flight);
                            assert_int_equal(plan_score(&f, &l, s, n), bf);
                            constrained += rep > 0;
                        }
                        mb_list_release(&l);
                        fixture_release(&f);
                        cases++;
                    }
    shape_cache_free(cache);
    assert_true(cases >= 240);
    assert_true(constrained > 20);
}

/* The DP's rows cut where no optimal partition can reach (dp.c seg_build: a segment whose real
 * tokens at the devices' floors already cost more than t_cap, past which a partition holding it
 * scores worse than every sample alone), on the analytic model, which has a floor: the same best
 * objective as every contiguous partition (brute force), GPT and T5 (decoder tokens), over stages,
 * chunks, replicas and memory; and the segments it tabulated (mb_list.dp_segments) exactly those
 * the rule written out here leaves, so the grid is known to reach the cut. */
static void test_dp_floor_cut_matches_brute_force(void **state)
{
    (void)state;
    analytic_params ap;
    analytic_params_default(&ap);
    unsigned seed = 4242;
    int cases = 0;
    int64_t cut = 0;
    static const int Ss[] = {1, 2, 4}, Ds[] = {1, 4};
    for (int t5 = 0; t5 <= 1; t5++)
        for (int C = 1; C <= 2; C++)
            for (int si = 0; si < 3; si++)
                for (int di = 0; di < 2; di++)
                    for (int rep = 0; rep < 4; rep++) {
                        int S = Ss[si], D = Ds[di];
                        fixture f;
                        memset(&f, 0, sizeof f);
                        f.m = *model_preset(t5 ? "t5-tiny" : "gpt-tiny");
                        f.m.enc_layers = 8, f.m.dec_layers = t5 ? 8 : 0;
                        f.m.hidden = 4096, f.m.heads = 32, f.m.kv_channels = 128, f.m.ffn = 16384;
                        cluster_preset("p4d", &f.hw);
                        dp_err err = {0};
                        if (cost_analytic_new(&f.m, &f.hw, 1, RECOMPUTE_NONE, &ap, &f.cm, &err) !=
                            DP_OK)
                            fail_msg("%s", err.msg);
                        if (stage_model_init(&f.sm, f.cm, S, C, D, 1, 1e9, &err) != DP_OK)
                            fail_msg("%s", err.msg);
                        double model_state = 0;
                        for (int d = 0; d < S; d++) model_state = fmax(model_state, f.sm.state_mb[d]);
                        double mem = rep == 0 ? 1e6 : 6000 + rand_r(&seed) % 40000;
                        if (stage_model_init(&f.sm, f.cm, S, C, D, 1, model_state + mem, &err) !=
                            DP_OK)
                            fail_msg("%s", err.msg);
                        batch_rules_default(&f.rules, f.m.arch);
                        f.rules.max_seqlen = 4096, f.rules.max_dec_seqlen = 1024;
                        f.ctx = (batch_ctx){&f.rules, &f.sm, 2, 512, 0, NULL, DP_SPLIT_GLOBAL, NULL, 0};
                        int n = 6 + rand_r(&seed) % 8;
                        sample_len smp[13];
                        for (int i = 0; i < n; i++) /* short ones and long ones */
                            smp[i] = (sample_len){i, rand_r(&seed) % 3 ? 1024 + rand_r(&seed) % 3072
                                                                      : 16 + rand_r(&seed) % 512,
                                                  t5 ? 8 + rand_r(&seed) % 1000 : 0};
                        mb_list l;
                        mb_list_init(&l);
                        dp_status st = dp_batch(&f.ctx, smp, n, &l, &err);
                        assert_int_equal(mb_order(&f.rules, smp, n), DP_OK);
                        int held = S;
                        int64_t bf = brute_force(&f, smp, n, S);
                        if (bf == INT64_MAX) bf = brute_force(&f, smp, n, 1), held = 1;
                        if (bf == INT64_MAX) {
                            assert_int_equal(st, DP_ERR_INFEASIBLE);
                        } else {
                            if (st != DP_OK) fail_msg("%s", err.msg);
                            assert_int_equal(plan_score(&f, &l, smp, n), bf);
                            /* the rule written out: every sample alone scores U; a row stops
                             * where its tokens at the floors pass U / ((S-1) D + C), or where a
                             * segment does not fit */
                            int64_t sum = 0, mx = 0, kept = 0, whole = 0;
                            for (int i = 0; i < n; i++) {
                                int64_t t = seg_ns(&f, smp, i, i + 1, held);
                                sum += t, mx = t > mx ? t : mx;
                            }
                            double cap = (double)objective_cd(S, C, D, sum, mx) /
                                         (double)(S > 1 ? (S - 1) * D + C : D * C) / 1e6;
                            for (int i = 0; i < n; i++) {
                                double enc = 0, dec = 0;
                                int stopped = 0;
                                for (int j = i + 1; j <= n; j++) {
                                    enc += smp[j - 1].enc, dec += smp[j - 1].dec;
                                    if (seg_ns(&f, smp, i, j, held) < 0) break;
                                    whole++;
                                    double least = 0;
                                    for (int d = 0; d < S; d++) {
                                        double fe, fd;
                                        stage_model_token_floor(&f.sm, d, &fe, &fd);
                                        least = fmax(least, fe * enc + fd * dec);
                                    }
                                    stopped |= j > i + 1 && least > cap + 1e-6;
                                    kept += !stopped;
                                }
                            }
                            assert_int_equal(l.dp_segments, kept);
                            cut += whole - kept;
                            cases++;
                        }
                        mb_list_release(&l);
                        fixture_release(&f);
                    }
    print_message("floor cut: %d cases agree with brute force; %lld fitting segments cut\n",
                  cases, (long long)cut);
    assert_true(cases >= 60);
    assert_true(cut > 100);
}

/* The costs a kept cache holds (dp.c: the shape table under one rule, the segment memo of recent
 * batches under any): the same batch planned again and again under other memory rules (the
 * schedules' holds, the one-held fallback, tightened scales), varlen and not, across more batches
 * than the memo keeps, cuts exactly as a call that keeps nothing (stage_model_time per segment).
 * The analytic model on four stages, 48 samples of 16-4096 tokens a batch, memory binding. */
static void test_dp_kept_costs_any_rule(void **state)
{
    (void)state;
    model_spec m;
    cost_model *cm = tiny_analytic(8, &m);
    dp_err err = {0};
    stage_model sm;
    assert_int_equal(stage_model_init(&sm, cm, 4, 1, 1, 0, 1e9, &err), DP_OK);
    double model_state = 0;
    for (int d = 0; d < 4; d++) model_state = fmax(model_state, sm.state_mb[d]);
    assert_int_equal(stage_model_init(&sm, cm, 4, 1, 1, 0, model_state + 6000, &err), DP_OK);
    batch_rules rules;
    batch_rules_default(&rules, m.arch);
    rules.max_seqlen = 4096;
    batch_ctx ctx = {&rules, &sm, 2, 512, 0, NULL, DP_SPLIT_AUTO, NULL, 0};
    static const double scales[] = {1, 0.8, 0.5, 0.25, 0.1};
    shape_cache *cache = shape_cache_new();
    enum { BATCHES = 6, N = 48 };
    sample_len batch[BATCHES][N];
    unsigned seed = 777;
    for (int b = 0; b < BATCHES; b++)
        for (int i = 0; i < N; i++) /* mostly short, a tail to 4096 */
            batch[b][i] = (sample_len){i, 16 + (int)(4080 * pow(rand_r(&seed) / (double)RAND_MAX, 4)), 0};
    int compared = 0, failed = 0;
    for (int r = 0; r < 90; r++) { /* five rules a batch; the memo keeps four of the six */
        const sample_len *s = batch[(r / 5 + (r / 30) * 2) % BATCHES];
        mem_rule rule;
        mem_rule_uniform(&rule, 4, 1 + r % 4);
        rule.scale = scales[r % 5];
        ctx.mem = &rule;
        ctx.varlen = r % 3 == 0;
        mb_list kept, none;
        mb_list_init(&kept), mb_list_init(&none);
        dp_err e1 = {0}, e2 = {0};
        ctx.cache = cache;
        dp_status a = dp_batch(&ctx, s, N, &kept, &e1);
        ctx.cache = NULL;
        dp_status b = dp_batch(&ctx, s, N, &none, &e2);
        assert_int_equal(a, b);
        if (a == DP_OK) {
            assert_int_equal(kept.n_mb, none.n_mb);
            assert_int_equal(kept.in_flight, none.in_flight);
            assert_int_equal(kept.dp_passes, none.dp_passes);
            for (int k = 0; k < kept.n_mb; k++) {
                assert_int_equal(kept.mb[k].n_samples, none.mb[k].n_samples);
                assert_int_equal(kept.mb[k].mbs, none.mb[k].mbs);
                assert_int_equal(kept.mb[k].enc_len, none.mb[k].enc_len);
            }
            assert_memory_equal(kept.ids, none.ids, (size_t)kept.n_ids * sizeof *kept.ids);
            compared++;
        } else {
            assert_string_equal(e1.msg, e2.msg);
            failed++;
        }
        mb_list_release(&kept), mb_list_release(&none);
    }
    shape_cache_free(cache);
    cost_model_free(cm);
    print_message("kept costs: %d cut alike, %d refused alike\n", compared, failed);
    assert_true(compared >= 45 && failed >= 5); /* most cut; some rules too tight for a sample */
}

/* --dp-split replica: the ordered samples dealt to the replicas in a snake (written here), then
 * each replica's partition the best of its own (D = 1 in the objective), by brute force. */
static void test_replica_split(void **state)
{
    (void)state;
    unsigned seed = 4242;
    int cases = 0;
    for (int rep = 0; rep < 24; rep++) {
        int S = 1 << (rep % 3), D = 2 + rep % 2, t5 = rep % 4 == 3;
        if (t5 && S == 1) S = 2;
        fixture f;
        fixture_init(&f, &seed, t5, S, 1, D, 1e6);
        f.ctx.dp_split = DP_SPLIT_REPLICA;
        int n = 2 * D + rand_r(&seed) % (D * 10 - 2 * D + 1); /* at most 10 per replica */
        sample_len s[30], g[3][30];
        int ng[3] = {0, 0, 0};
        random_samples(&seed, s, n, t5);
        mb_list l;
        mb_list_init(&l);
        dp_err err = {0};
        if (dp_batch(&f.ctx, s, n, &l, &err) != DP_OK) fail_msg("%s", err.msg);
        assert_true(l.replicas_set);
        assert_int_equal(mb_order(&f.rules, s, n), DP_OK);
        for (int i = 0; i < n; i++) { /* the snake: 0 1 .. D-1 D-1 .. 0 0 1 .. */
            int r = (i / D) % 2 ? D - 1 - i % D : i % D;
            g[r][ng[r]++] = s[i];
        }
        for (int r = 0; r < D; r++) {
            assert_true(ng[r] >= n / D && ng[r] <= n / D + 1);
            /* replica r's micro-batches, in order, hold exactly g[r] */
            int at = 0;
            int64_t sum = 0, mx = 0;
            for (int k = 0; k < l.n_mb; k++) {
                const microbatch *m = &l.mb[k];
                if (m->replica != r) continue;
                for (int q = 0; q < m->n_samples; q++) assert_int_equal(l.ids[m->first + q], g[r][at + q].id);
                int64_t t = seg_ns(&f, g[r], at, at + m->n_samples, l.in_flight == 1 ? 1 : S);
                assert_true(t >= 0);
                sum += t, mx = t > mx ? t : mx;
                at += m->n_samples;
            }
            assert_int_equal(at, ng[r]);
            assert_int_equal((int64_t)(S - 1) * mx + sum, brute_force_d(&f, g[r], ng[r], S, 1));
        }
        /* mb_list_finish keeps the replicas the batcher chose */
        int before[64];
        for (int k = 0; k < l.n_mb && k < 64; k++) before[k] = l.mb[k].replica;
        assert_int_equal(mb_list_finish(&f.ctx, &l, &err), DP_OK);
        for (int k = 0; k < l.n_mb && k < 64; k++) assert_int_equal(l.mb[k].replica, before[k]);
        mb_list_release(&l);
        fixture_release(&f);
        cases++;
    }
    assert_int_equal(cases, 24);
}

/* ZeRO-2/3 over D replicas (microbatch.h "Replicas in lockstep"): whatever the batcher cut,
 * mb_list_finish leaves every replica as many micro-batches when the batch has at least D samples,
 * every sample in exactly one micro-batch, each sample within its micro-batch's padded shape, the
 * rows holding its tokens, and the tokens the samples' own, ordered costliest first (so each
 * replica's k-th micro-batch meets the others' k-th). Under ZeRO-1 the same batches are dealt
 * unevenly somewhere (so the rule is what evens them). */
static void test_zero_replicas_in_lockstep(void **state)
{
    (void)state;
    unsigned seed = 2027;
    int nb, cases = 0, reshaped = 0, uneven_under_zero1 = 0;
    const batcher *B = batcher_list(&nb);
    for (int b = 0; b < nb; b++) {
        if (!B[b].split) continue;
        for (int rep = 0; rep < 8; rep++) {
            int D = 2 + rep % 3, t5 = rep % 2, S = 1 + rep / 4, n = D + rand_r(&seed) % 40;
            sample_len s[48];
            random_samples(&seed, s, n, t5);
            for (int zero = 1; zero <= 3; zero += 2) {
                fixture f;
                fixture_init(&f, &seed, t5, S, 1, D, 1e6);
                dp_err err = {0};
                if (stage_model_init(&f.sm, f.cm, S, 1, D, zero, 1e9, &err) != DP_OK)
                    fail_msg("%s", err.msg);
                f.ctx.varlen = B[b].varlen;
                mb_list l;
                mb_list_init(&l);
                if (B[b].split(&f.ctx, s, n, &l, &err) != DP_OK) fail_msg("%s: %s", B[b].name, err.msg);
                int cut = l.n_mb;
                assert_int_equal(mb_list_finish(&f.ctx, &l, &err), DP_OK);
                int count[4] = {0, 0, 0, 0}, seen[48] = {0};
                for (int k = 0; k < l.n_mb; k++) {
                    const microbatch *m = &l.mb[k];
                    int64_t enc = 0, dec = 0;
                    assert_true(m->replica >= 0 && m->replica < D);
                    count[m->replica]++;
                    assert_true(m->n_samples >= 1 && m->mbs >= 1 && m->mbs <= m->n_samples);
                    for (int q = 0; q < m->n_samples; q++) {
                        int id = l.ids[m->first + q];
                        seen[id]++;
                        assert_true(batch_pad(&f.rules, s[id].enc) <= m->enc_len || m->mbs < m->n_samples);
                        assert_true(s[id].enc <= m->enc_len && s[id].dec <= m->dec_len);
                        enc += s[id].enc, dec += s[id].dec;
                    }
                    assert_int_equal(enc, m->enc_tokens);
                    assert_int_equal(dec, m->dec_tokens);
                    assert_true(enc <= (int64_t)m->mbs * m->enc_len);
                }
                for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
                int even = 1;
                for (int d = 1; d < D; d++) even &= count[d] == count[0];
                if (zero == 3) {
                    assert_true(even);
                    for (int k = 0; k + 1 < l.n_mb; k++) /* costliest first: ranks pair up */
                        assert_true(l.mb[k].t_ms >= l.mb[k + 1].t_ms);
                    reshaped += l.n_mb != cut;
                    cases++;
                } else {
                    uneven_under_zero1 += !even;
                }
                mb_list_release(&l);
                fixture_release(&f);
            }
        }
    }
    assert_true(cases >= 100);
    assert_true(reshaped > 10);
    assert_true(uneven_under_zero1 > 10);
    /* padding with --mbs 1 over 4 replicas: 5 samples, one a micro-batch, cannot be split to 8,
     * so two neighbours merge (4, one each); 3 samples stay 3 (the built plan's check refuses) */
    for (int n = 3; n <= 5; n += 2) {
        fixture f;
        fixture_init(&f, &seed, 0, 1, 1, 4, 1e6);
        dp_err err = {0};
        if (stage_model_init(&f.sm, f.cm, 1, 1, 4, 3, 1e9, &err) != DP_OK) fail_msg("%s", err.msg);
        f.ctx.mbs = 1;
        sample_len s[5];
        random_samples(&seed, s, n, 0);
        mb_list l;
        mb_list_init(&l);
        assert_int_equal(batcher_find("padding")->split(&f.ctx, s, n, &l, &err), DP_OK);
        assert_int_equal(l.n_mb, n);
        assert_int_equal(mb_list_finish(&f.ctx, &l, &err), DP_OK);
        assert_int_equal(l.n_mb, n == 5 ? 4 : 3);
        int count[4] = {0, 0, 0, 0}, samples = 0;
        for (int k = 0; k < l.n_mb; k++) count[l.mb[k].replica]++, samples += l.mb[k].n_samples;
        assert_int_equal(samples, n);
        if (n == 5)
            for (int d = 0; d < 4; d++) assert_int_equal(count[d], 1);
        mb_list_release(&l);
        fixture_release(&f);
    }
}

static void test_thinned_never_better_and_properties(void **state)
{
    (void)state;
    unsigned seed = 777;
    for (int rep = 0; rep < 40; rep++) {
        int t5 = rep % 2;
        fixture f;
        fixture_init(&f, &seed, t5, 4, 1, 1 + rep % 2, rep % 3 ? 1e6 : 150);
        int n = 20 + rand_r(&seed) % 60;
        sample_len s[80];
        random_samples(&seed, s, n, t5);
        mb_list exact, thin, other;
        mb_list_init(&exact), mb_list_init(&thin), mb_list_init(&other);
        dp_err err = {0};
        dp_status st = dp_batch(&f.ctx, s, n, &exact, &err);
        if (st == DP_ERR_INFEASIBLE) { /* a sample too large for this memory: named, skipped */
            assert_msg_has(err.msg, "even alone");
            mb_list_release(&exact), mb_list_release(&thin), mb_list_release(&other);
            fixture_release(&f);
            continue;
        }
        if (st != DP_OK) fail_msg("%s", err.msg);
        assert_int_equal(mb_list_finish(&f.ctx, &exact, &err), DP_OK);
        assert_true(exact.feasible);
        /* every sample exactly once */
        int seen[80] = {0};
        for (int i = 0; i < exact.n_ids; i++) seen[exact.ids[i]]++;
        for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
        batch_ctx tc = f.ctx;
        tc.thin_ms = 0.5;
        if (dp_batch(&tc, s, n, &thin, &err) != DP_OK) fail_msg("%s", err.msg);
        thin.in_flight = exact.in_flight;
        assert_int_equal(mb_list_finish(&tc, &thin, &err), DP_OK);
        assert_true(thin.obj_value_ms >= exact.obj_value_ms - 1e-6);
        /* dynamic is never worse on its own objective than any other (feasible) strategy */
        int nb;
        const batcher *bs = batcher_list(&nb);
        for (int b = 0; b < nb; b++) {
            if (bs[b].chooses) continue; /* auto plans through the study, not alone */
            mb_list_clear(&other);
            dp_status bst = bs[b].split(&f.ctx, s, n, &other, &err);
            if (bst == DP_ERR_INFEASIBLE && bs[b].memory_aware) continue; /* said so, by memory */
            if (bst != DP_OK) fail_msg("%s", err.msg);
            other.in_flight = exact.in_flight;
            assert_int_equal(mb_list_finish(&f.ctx, &other, &err), DP_OK);
            int cnt[80] = {0};
            for (int i = 0; i < other.n_ids; i++) cnt[other.ids[i]]++;
            for (int i = 0; i < n; i++) assert_int_equal(cnt[i], 1);
            if (other.feasible) assert_true(exact.obj_value_ms <= other.obj_value_ms + 1e-6);
        }
        mb_list_release(&exact), mb_list_release(&thin), mb_list_release(&other);
        fixture_release(&f);
    }
}

static void test_global_batches(void **state)
{
    (void)state;
    trace t;
    trace_init(&t);
    /* GPT: input + target, truncated to 100; budget 250 tokens */
    int in[] = {50, 90, 80, 10, 200, 5};
    int tg[] = {10, 20, 0, 0, 0, 1};
    for (int i = 0; i < 6; i++) trace_push(&t, "x", in[i], tg[i]);
    batch_rules r;
    batch_rules_default(&r, ARCH_GPT);
    r.global_tokens = 250;
    r.max_seqlen = 100;
    batch_iter it;
    batch_iter_init(&it, &t, &r);
    const sample_len *b;
    int n;
    dp_err err = {0};
    /* 60 + 100 + 80 = 240; +10 = 250 fits exactly; then 100 + 6 */
    assert_int_equal(batch_next(&it, &b, &n, &err), DP_OK);
    assert_int_equal(n, 4);
    assert_int_equal(b[1].enc, 100);
    assert_int_equal(batch_next(&it, &b, &n, &err), DP_OK);
    assert_int_equal(n, 2);
    assert_int_equal(b[0].enc, 100);
    assert_int_equal(b[1].enc, 6);
    assert_int_equal(batch_next(&it, &b, &n, &err), DP_OK);
    assert_int_equal(n, 0);
    batch_iter_release(&it);
    /* T5: target capped at max_dec - 2, plus 2 */
    batch_rules_default(&r, ARCH_T5);
    r.max_dec_seqlen = 12;
    sample_len x = batch_sample(&r, &t, 1);
    assert_int_equal(x.enc, 90);
    assert_int_equal(x.dec, 12);
    x = batch_sample(&r, &t, 2);
    assert_int_equal(x.dec, 2);
    assert_int_equal(batch_pad(&r, 1), 16);
    assert_int_equal(batch_pad(&r, 17), 24);
    assert_int_equal(batch_pad(&r, 0), 0);
    /* a sample larger than the budget is an error naming it */
    batch_rules_default(&r, ARCH_GPT);
    r.global_tokens = 100;
    batch_iter_init(&it, &t, &r);
    assert_int_equal(batch_next(&it, &b, &n, &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "trace sample 1 (110 tokens");
    batch_iter_release(&it);
    trace_release(&t);
}

/* A generated FLAN-like trace of n samples. */
static void generated_trace(trace *t, size_t n)
{
    trace_gen_opts o;
    trace_gen_defaults(&o);
    o.samples = n;
    dp_err err = {0};
    trace_init(t);
    if (trace_generate(&o, t, &err) != DP_OK) fail_msg("%s", err.msg);
}

static void test_streamed_batches_match(void **state)
{
    (void)state;
    trace t;
    dp_err err = {0};
    generated_trace(&t, 5000);
    const char *path = tmp_file(".csv", "");
    assert_int_equal(trace_write_csv(&t, path, &err), DP_OK);
    batch_rules r;
    batch_rules_default(&r, ARCH_GPT);
    batch_iter a, b;
    trace_stream ts;
    assert_int_equal(trace_stream_open(&ts, path, &err), DP_OK);
    batch_iter_init(&a, &t, &r);
    batch_iter_init_stream(&b, &ts, &r);
    int batches = 0;
    for (;;) {
        const sample_len *x, *y;
        int nx, ny;
        assert_int_equal(batch_next(&a, &x, &nx, &err), DP_OK);
        assert_int_equal(batch_next(&b, &y, &ny, &err), DP_OK);
        assert_int_equal(nx, ny);
        if (nx == 0) break;
        assert_memory_equal(x, y, (size_t)nx * sizeof *x);
        batches++;
    }
    assert_true(batches > 20);
    batch_iter_release(&a), batch_iter_release(&b);
    trace_stream_close(&ts);
    trace_release(&t);
}

static void test_packing_rules(void **state)
{
    (void)state;
    unsigned seed = 1;
    fixture f;
    fixture_init(&f, &seed, 0, 2, 1, 1, 1e6);
    f.rules.max_seqlen = 100;
    f.ctx.mbs = 2;
    sample_len s[] = {{0, 60, 0}, {1, 50, 0}, {2, 40, 0}, {3, 30, 0}, {4, 70, 0}};
    mb_list l;
    mb_list_init(&l);
    dp_err err = {0};
    /* next-fit in order: [60] [50 40] [30] [70] -> 4 rows -> 2 micro-batches of 2 rows */
    assert_int_equal(batcher_find("packing")->split(&f.ctx, s, 5, &l, &err), DP_OK);
    assert_int_equal(l.n_mb, 2);
    assert_int_equal(l.mb[0].mbs, 2);
    assert_int_equal(l.mb[0].n_samples, 3);
    assert_int_equal(l.mb[0].enc_len, 104); /* rows padded to max length, rounded to 8 */
    assert_int_equal(l.mb[1].enc_tokens, 100);
    mb_list_clear(&l);
    /* first-fit decreasing: 70+30, 60+40, 50 -> 3 rows */
    assert_int_equal(batcher_find("packing-ffd")->split(&f.ctx, s, 5, &l, &err), DP_OK);
    assert_int_equal(l.n_mb, 2);
    assert_int_equal(l.mb[0].mbs + l.mb[1].mbs, 3);
    mb_list_clear(&l);
    /* padding: mbs 2, everything padded to 70 -> 72 */
    assert_int_equal(batcher_find("padding")->split(&f.ctx, s, 5, &l, &err), DP_OK);
    assert_int_equal(l.n_mb, 3);
    assert_int_equal(l.mb[2].enc_len, 72);
    mb_list_clear(&l);
    /* token: sorted 30 40 50 60 70, budget 100 padded tokens: [32x? ...] */
    f.ctx.mb_tokens = 100;
    assert_int_equal(batcher_find("token")->split(&f.ctx, s, 5, &l, &err), DP_OK);
    for (int k = 0; k < l.n_mb; k++)
        assert_true(l.mb[k].n_samples == 1 || (int64_t)l.mb[k].mbs * l.mb[k].enc_len <= 100);
    mb_list_release(&l);
    fixture_release(&f);
}

/* Megatron's --pack-dataset: batches of whole next-fit rows over the trace. Checked against a
 * next-fit written here over the whole generated trace: the batches cover the trace in order,
 * each (but the last) is exactly R rows, and packing each batch on its own rebuilds them. */
static void test_pack_dataset_batches(void **state)
{
    (void)state;
    trace t;
    dp_err err = {0};
    generated_trace(&t, 4000);
    for (int t5 = 0; t5 < 2; t5++) {
        batch_rules r;
        batch_rules_default(&r, t5 ? ARCH_T5 : ARCH_GPT);
        r.max_seqlen = 1024;
        r.max_dec_seqlen = 256;
        r.global_tokens = 20000;
        int R = batch_pack_rows(&r, 2, 3); /* 19 rows -> 18, a multiple of 6 */
        assert_int_equal(R, 18);
        /* the reference: next-fit over the whole trace, the row of every sample */
        int *row_of = malloc(t.n * sizeof *row_of), rows = 0, enc = 0, dec = 0;
        for (size_t i = 0; i < t.n; i++) {
            sample_len x = batch_sample(&r, &t, i);
            int cap_dec = t5 ? r.max_dec_seqlen : 1 << 30;
            if (i == 0 || enc + x.enc > r.max_seqlen || dec + x.dec > cap_dec) rows++, enc = dec = 0;
            enc += x.enc, dec += x.dec;
            row_of[i] = rows - 1;
        }
        batch_iter it;
        batch_iter_init(&it, &t, &r);
        batch_iter_pack_rows(&it, R);
        size_t next = 0;
        int batches = 0;
        for (;;) {
            const sample_len *b;
            int n;
            assert_int_equal(batch_next(&it, &b, &n, &err), DP_OK);
            if (n == 0) break;
            assert_int_equal(b[0].id, (int)next);
            int first_row = row_of[next], last_row = row_of[next + (size_t)n - 1];
            assert_true(next == 0 || row_of[next - 1] < first_row); /* starts a row */
            if (next + (size_t)n < t.n) assert_int_equal(last_row - first_row + 1, R);
            /* the packer, run on the batch alone, rebuilds exactly those rows (one per micro-batch
             * at mbs 1) */
            batch_ctx pc = {&r, NULL, 1, 2048, 0, NULL, DP_SPLIT_AUTO, NULL, 0};
            mb_list l;
            mb_list_init(&l);
            assert_int_equal(batcher_find("packing")->split(&pc, b, n, &l, &err), DP_OK);
            assert_int_equal(l.n_mb, last_row - first_row + 1);
            for (int k = 0; k < l.n_mb; k++)
                for (int q = 0; q < l.mb[k].n_samples; q++)
                    assert_int_equal(row_of[l.ids[l.mb[k].first + q]], first_row + k);
            mb_list_release(&l);
            next += (size_t)n;
            batches++;
        }
        assert_int_equal(next, t.n);
        assert_true(batches > 5);
        batch_iter_release(&it);
        free(row_of);
    }
    trace_release(&t);
}

static void test_kk_balances(void **state)
{
    (void)state;
    /* 8, 7, 6, 5, 4 into 2 bins: KK gives 16/14 (optimal 15/15 is not KK's); sums stay close */
    double w[] = {8, 7, 6, 5, 4};
    int bin[5];
    assert_int_equal(kk_partition(w, 5, 2, bin), DP_OK);
    double sum[2] = {0};
    for (int i = 0; i < 5; i++) sum[bin[i]] += w[i];
    assert_true(fabs(sum[0] - sum[1]) <= 2);
    double w3[] = {10, 10, 10, 1, 1, 1};
    int b3[6];
    assert_int_equal(kk_partition(w3, 6, 3, b3), DP_OK);
    double s3[3] = {0};
    for (int i = 0; i < 6; i++) s3[b3[i]] += w3[i];
    for (int k = 0; k < 3; k++) assert_near(s3[k], 11, 1e-12);
    /* pack-dataset micro-batches are all alike: every replica gets the same number */
    double eq[12];
    int be[12], count[3] = {0};
    for (int i = 0; i < 12; i++) eq[i] = 2.5;
    assert_int_equal(kk_partition(eq, 12, 3, be), DP_OK);
    for (int i = 0; i < 12; i++) count[be[i]]++;
    for (int k = 0; k < 3; k++) assert_int_equal(count[k], 4);
}

/* Karmarkar-Karp as first written (the two largest spreads found by a scan of the nodes, ties
 * to the lower slot; the last node moved into the merged one's slot): the heap in
 * kk_partition must give the very same bins. */
static void kk_by_scan(const double *w, int n, int k, int *bin)
{
    double *sum = calloc((size_t)n * (size_t)k, sizeof *sum);
    int *owner = malloc((size_t)n * (size_t)k * sizeof *owner); /* item -> (node, bin) */
    int *node_of = malloc((size_t)n * sizeof *node_of), *slot = malloc((size_t)n * sizeof *slot);
    assert_non_null(sum), assert_non_null(owner), assert_non_null(node_of), assert_non_null(slot);
    /* node x (by its original id) has k sums; item i belongs to node node_of[i], bin bin[i] */
    for (int i = 0; i < n; i++) sum[(size_t)i * k] = w[i], node_of[i] = i, bin[i] = 0, slot[i] = i;
    int alive = n;
#define SP(x) (sum[(size_t)slot[x] * k] - sum[(size_t)slot[x] * k + k - 1])
    while (alive > 1) {
        int a = 0, b = 1;
        if (SP(b) > SP(a)) a = 1, b = 0;
        for (int i = 2; i < alive; i++) {
            if (SP(i) > SP(a)) b = a, a = i;
            else if (SP(i) > SP(b)) b = i;
        }
        double *x = &sum[(size_t)slot[a] * k], *y = &sum[(size_t)slot[b] * k];
        int place[64]; /* y's bin yj joins x's bin k-1-yj; then x's bins are sorted descending */
        for (int j = 0; j < k; j++) x[j] += y[k - 1 - j];
        for (int i = 0; i < n; i++)
            if (node_of[i] == slot[b]) node_of[i] = slot[a], bin[i] = k - 1 - bin[i];
        /* insertion sort of x's bins, descending, stable as kk_sort's */
        for (int j = 0; j < k; j++) place[j] = j;
        for (int q = 1; q < k; q++)
            for (int r = q; r > 0 && x[r] > x[r - 1]; r--) {
                double t = x[r];
                x[r] = x[r - 1], x[r - 1] = t;
                int u = place[r];
                place[r] = place[r - 1], place[r - 1] = u;
            }
        int where[64];
        for (int j = 0; j < k; j++) where[place[j]] = j;
        for (int i = 0; i < n; i++)
            if (node_of[i] == slot[a]) bin[i] = where[bin[i]];
        slot[b] = slot[alive - 1];
        alive--;
    }
#undef SP
    free(sum), free(owner), free(node_of), free(slot);
}

/* The heap-ordered Karmarkar-Karp assigns exactly as the scan did, over weights with many ties
 * (a few distinct values) and without, k from 2 to 64. */
static void test_kk_heap_equals_scan(void **state)
{
    (void)state;
    unsigned seed = 4242;
    static const int ks[] = {2, 3, 8, 64};
    for (int rep = 0; rep < 48; rep++) {
        int k = ks[rep % 4], n = 1 + rand_r(&seed) % 300, distinct = rep % 3 ? 4 : 100000;
        double *w = malloc((size_t)n * sizeof *w);
        int *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
        for (int i = 0; i < n; i++) w[i] = 0.5 * (1 + rand_r(&seed) % distinct);
        assert_int_equal(kk_partition(w, n, k, got), DP_OK);
        kk_by_scan(w, n, k, want);
        for (int i = 0; i < n; i++) assert_int_equal(got[i], want[i]);
        free(w), free(got), free(want);
    }
}

/* The exact DP's range search over caps finds the objective of trying every cap one by one
 * (the thinned DP with no thinning: a pass per distinct segment cost) on batches of hundreds of
 * samples, S 2 to 8, D 1 to 16, memory generous and binding. */
static void test_exact_equals_every_cap(void **state)
{
    (void)state;
    unsigned seed = 9090;
    static const int Ss[] = {2, 4, 8}, Ds[] = {1, 4, 16};
    int cases = 0;
    for (int rep = 0; rep < 18; rep++) {
        int t5 = rep % 6 == 5, S = Ss[rep % 3], D = Ds[(rep / 3) % 3];
        fixture f;
        fixture_init(&f, &seed, t5, S, 1, D, rep % 2 ? 1e6 : 400);
        f.ctx.dp_split = DP_SPLIT_GLOBAL;
        int n = t5 ? 120 : 200 + rand_r(&seed) % 400;
        sample_len *s = malloc((size_t)n * sizeof *s);
        random_samples(&seed, s, n, t5);
        mb_list exact, every;
        mb_list_init(&exact), mb_list_init(&every);
        dp_err err = {0};
        dp_status st = dp_batch(&f.ctx, s, n, &exact, &err);
        if (st == DP_OK) {
            batch_ctx tc = f.ctx;
            tc.thin_ms = 1e-9; /* below a nanosecond: every distinct cost is a cap */
            if (dp_batch(&tc, s, n, &every, &err) != DP_OK) fail_msg("%s", err.msg);
            every.in_flight = exact.in_flight;
            assert_int_equal(mb_list_finish(&f.ctx, &exact, &err), DP_OK);
            assert_int_equal(mb_list_finish(&tc, &every, &err), DP_OK);
            assert_near(exact.obj_value_ms, every.obj_value_ms, 1e-9 * every.obj_value_ms);
            assert_true(exact.dp_passes <= every.dp_passes);
            cases++;
        } else {
            assert_int_equal(st, DP_ERR_INFEASIBLE);
        }
        mb_list_release(&exact), mb_list_release(&every);
        free(s);
        fixture_release(&f);
    }
    assert_true(cases >= 12);
}

/* dp_cut over a cost table written in the test: random segment costs (ties among them), runs
 * that stop fitting past a random length; the best (S-1)*max*D + sum*C found by trying every
 * partition of up to 12 items. */
typedef struct cut_table {
    int n;
    int64_t cost[12][13]; /* cost[i][l], -1: does not fit */
} cut_table;

static int64_t cut_cost(void *c, int i, int l)
{
    return ((cut_table *)c)->cost[i][l];
}

static void test_dp_cut_brute_force(void **state)
{
    (void)state;
    unsigned seed = 31337;
    int cases = 0;
    for (int rep = 0; rep < 300; rep++) {
        cut_table t = {1 + (int)(rand_r(&seed) % 12), {{0}}};
        int S = 1 + rep % 5, C = 1 + rep % 2, D = 1 + (rep / 5) % 3;
        for (int i = 0; i < t.n; i++) {
            int reach = 1 + (int)(rand_r(&seed) % (unsigned)(t.n - i)); /* fits up to this length */
            for (int l = 1; l <= t.n - i; l++)
                t.cost[i][l] = l <= reach ? 1 + (int64_t)(rand_r(&seed) % 9) * 100 : -1;
        }
        int64_t want = INT64_MAX;
        for (unsigned mask = 0; mask < 1u << (t.n - 1); mask++) { /* bit k: a cut after item k */
            int64_t sum = 0, mx = 0;
            int ok = 1;
            for (int i = 0; i < t.n && ok;) {
                int j = i + 1;
                while (j < t.n && !(mask >> (j - 1) & 1)) j++;
                int64_t c = t.cost[i][j - i];
                if (c < 0) ok = 0;
                sum += c, mx = c > mx ? c : mx;
                i = j;
            }
            int64_t sc = objective_cd(S, C, D, sum, mx);
            if (ok && sc < want) want = sc;
        }
        int ends[12], n_seg = 0;
        dp_err err = {0};
        assert_int_equal(dp_cut(t.n, cut_cost, &t, S, C, D, ends, &n_seg, &err), DP_OK);
        int64_t sum = 0, mx = 0;
        for (int k = 0, from = 0; k < n_seg; k++) {
            assert_true(ends[k] > from);
            int64_t c = t.cost[from][ends[k] - from];
            assert_true(c >= 0);
            sum += c, mx = c > mx ? c : mx;
            from = ends[k];
        }
        assert_int_equal(ends[n_seg - 1], t.n);
        assert_int_equal(objective_cd(S, C, D, sum, mx), want);
        cases++;
    }
    assert_int_equal(cases, 300);
    /* an item that fits nowhere is named */
    cut_table bad = {3, {{0}}};
    bad.cost[0][1] = 5, bad.cost[0][2] = 5, bad.cost[0][3] = 5;
    bad.cost[1][1] = -1, bad.cost[2][1] = 5;
    int ends[3], n_seg;
    dp_err err = {0};
    assert_int_equal(dp_cut(3, cut_cost, &bad, 2, 1, 1, ends, &n_seg, &err), DP_ERR_INFEASIBLE);
    assert_msg_has(err.msg, "item 1 does not fit");
}

/* packing-dp: every sample once, each micro-batch whole rows of packing-ffd-varlen's (the same
 * rows, so the same padding), every micro-batch fitting, and on DynaPipe's objective never worse
 * than packing-ffd-varlen at one row per micro-batch (one of the groupings it chooses from). */
static void test_packing_dp(void **state)
{
    (void)state;
    unsigned seed = 2024;
    const batcher *dp = batcher_find("packing-dp"), *ffd = batcher_find("packing-ffd-varlen");
    assert_non_null(dp);
    assert_true(dp->memory_aware && dp->varlen);
    for (int rep = 0; rep < 24; rep++) {
        int t5 = rep % 4 == 3;
        fixture f;
        fixture_init(&f, &seed, t5, 1 + rep % 4, 1, 1 + rep % 3, rep % 2 ? 1e6 : 600);
        f.ctx.varlen = 1;
        int n = 30 + (int)(rand_r(&seed) % 60);
        sample_len s[90];
        random_samples(&seed, s, n, t5);
        mb_list a, b;
        mb_list_init(&a), mb_list_init(&b);
        dp_err err = {0};
        dp_status st = dp->split(&f.ctx, s, n, &a, &err);
        if (st == DP_ERR_INFEASIBLE) { /* a row too large for this memory: said so */
            assert_msg_has(err.msg, "does not fit");
        } else {
            assert_int_equal(st, DP_OK);
            assert_int_equal(ffd->split(&f.ctx, s, n, &b, &err), DP_OK);
            assert_int_equal(mb_list_finish(&f.ctx, &a, &err), DP_OK);
            assert_int_equal(mb_list_finish(&f.ctx, &b, &err), DP_OK);
            int seen[90] = {0}, rows_a = 0, rows_b = 0;
            for (int i = 0; i < a.n_ids; i++) seen[a.ids[i]]++;
            for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
            for (int k = 0; k < a.n_mb; k++) rows_a += a.mb[k].mbs, assert_true(a.mb[k].fits);

            for (int k = 0; k < b.n_mb; k++) rows_b += b.mb[k].mbs;
            assert_int_equal(rows_a, rows_b);
            int64_t tok_a = 0, tok_b = 0;
            for (int k = 0; k < a.n_mb; k++) tok_a += a.mb[k].enc_tokens + a.mb[k].dec_tokens;
            for (int k = 0; k < b.n_mb; k++) tok_b += b.mb[k].enc_tokens + b.mb[k].dec_tokens;
            assert_int_equal(tok_a, tok_b);
            if (b.feasible) assert_true(a.obj_value_ms <= b.obj_value_ms * (1 + 1e-9));
        }
        mb_list_release(&a), mb_list_release(&b);
        fixture_release(&f);
    }
}

/* packing-dp finds the best contiguous grouping of packing-ffd-varlen's rows, ordered by tokens,
 * as mb_list_finish prices it: every grouping of up to 10 rows tried, each micro-batch built here
 * as a varlen micro-batch of those rows' samples, padded to its fullest row. */
static int cmp_row_mb(const void *a, const void *b)
{
    const microbatch *x = a, *y = b;
    int64_t tx = x->enc_tokens + x->dec_tokens, ty = y->enc_tokens + y->dec_tokens;
    if (tx != ty) return tx < ty ? -1 : 1;
    return x->first - y->first;
}

static void test_packing_dp_brute_force(void **state)
{
    (void)state;
    unsigned seed = 77;
    int cases = 0;
    for (int rep = 0; rep < 40 || cases < 20; rep++) {
        int t5 = rep % 5 == 4, S = t5 ? 2 * (1 + rep % 2) : 1 + rep % 4, D = 1 + rep % 2;
        fixture f;
        fixture_init(&f, &seed, t5, S, 1, D, rep % 3 ? 1e6 : 500);
        f.ctx.varlen = 1;
        int n = 6 + (int)(rand_r(&seed) % 10);
        sample_len s[16];
        random_samples(&seed, s, n, t5);
        mb_list rows, got, trial;
        mb_list_init(&rows), mb_list_init(&got), mb_list_init(&trial);
        batch_ctx one = f.ctx;
        one.mbs = 1;
        dp_err err = {0};
        assert_int_equal(batcher_find("packing-ffd-varlen")->split(&one, s, n, &rows, &err), DP_OK);
        int R = rows.n_mb;
        dp_status st = batcher_find("packing-dp")->split(&f.ctx, s, n, &got, &err);
        if (R > 10 || st != DP_OK) {
            if (st != DP_OK) assert_int_equal(st, DP_ERR_INFEASIBLE);
            mb_list_release(&rows), mb_list_release(&got), mb_list_release(&trial);
            fixture_release(&f);
            continue;
        }
        assert_int_equal(mb_list_finish(&f.ctx, &got, &err), DP_OK);
        qsort(rows.mb, (size_t)R, sizeof *rows.mb, cmp_row_mb);
        double best = INFINITY;
        for (unsigned mask = 0; mask < 1u << (R - 1); mask++) {
            mb_list_clear(&trial);
            for (int i = 0; i < R;) {
                int j = i + 1;
                while (j < R && !(mask >> (j - 1) & 1)) j++;
                sample_len x[16];
                int m = 0, enc = 0, dec = 0;
                for (int q = i; q < j; q++) {
                    const microbatch *w = &rows.mb[q];
                    int e = batch_pad(&f.rules, (int)w->enc_tokens), d = batch_pad(&f.rules, (int)w->dec_tokens);
                    enc = e > enc ? e : enc, dec = d > dec ? d : dec;
                    for (int k = 0; k < w->n_samples; k++, m++)
                        x[m] = (sample_len){rows.ids[w->first + k], rows.lens[2 * (w->first + k)],
                                            rows.lens[2 * (w->first + k) + 1]};
                }
                assert_int_equal(mb_list_add(&trial, &f.ctx, x, m, j - i, enc, t5 ? dec : 0), DP_OK);
                i = j;
            }
            assert_int_equal(mb_list_finish(&f.ctx, &trial, &err), DP_OK);
            if (trial.feasible && trial.obj_value_ms < best) best = trial.obj_value_ms;
        }
        assert_true(got.feasible);
        assert_near(got.obj_value_ms, best, 1e-5 * R);
        cases++;
        mb_list_release(&rows), mb_list_release(&got), mb_list_release(&trial);
        fixture_release(&f);
    }
}

/* L1 length of the path through the padded points of s (in order). */
static int64_t padded_path(const batch_rules *r, const sample_len *s, int n)
{
    int64_t len = 0;
    for (int i = 1; i < n; i++)
        len += abs(batch_pad(r, s[i].enc) - batch_pad(r, s[i - 1].enc)) +
               abs(batch_pad(r, s[i].dec) - batch_pad(r, s[i - 1].dec));
    return len;
}

static int cmp_serpentine_key(const void *a, const void *b)
{
    const int64_t *x = a, *y = b;
    return (x[0] > y[0]) - (x[0] < y[0]);
}

/* The T5 order: a permutation, each padded pair contiguous, and a shorter path through the points
 * than the serpentine it replaced (by padded input, targets alternating direction per group),
 * written here; on tiny sets, the optimal path found by trying every order. */
/* The varlen packers and balancers (microbatch.h): over random batches of GPT and T5 samples and
 * 1, 2 and 4 replicas, every sample lands in exactly one micro-batch; every micro-batch is
 * varlen with its samples' own squared padded lengths (summed here); a balancer's micro-batch is
 * one row that keeps the row rule (batch_row_fits, unless a sample alone); the balancers give
 * every replica as many micro-batches (within one where their count is not a multiple of D);
 * dp-balanced deals tokens to replicas within one sample
 * of each other. */
static void test_varlen_batchers(void **state)
{
    (void)state;
    static const char *const names[] = {"packing-varlen", "packing-ffd-varlen", "dp-balanced",
                                        "packing-kk", "packing-wlb", "dynamic-varlen"};
    unsigned seed = 99;
    int checked = 0;
    for (int t5 = 0; t5 <= 1; t5++)
        for (int D = 1; D <= 4; D *= 2) {
            fixture f;
            fixture_init(&f, &seed, t5, 2, 1, D, 1e6);
            f.ctx.varlen = 1;
            for (int trial = 0; trial < 6; trial++) {
                sample_len s[80];
                int n = 20 + (int)(rand_r(&seed) % 60);
                random_samples(&seed, s, n, t5);
                for (size_t b = 0; b < sizeof names / sizeof *names; b++) {
                    const batcher *bt = batcher_find(names[b]);
                    assert_non_null(bt);
                    assert_true(bt->varlen);
                    mb_list l;
                    mb_list_init(&l);
                    dp_err err = {0};
                    if (bt->split(&f.ctx, s, n, &l, &err) != DP_OK) fail_msg("%s: %s", names[b], err.msg);
                    assert_int_equal(mb_list_finish(&f.ctx, &l, &err), DP_OK);
                    char seen[80] = {0};
                    int per_replica[4] = {0};
                    int64_t tokens[4] = {0};
                    int balancer = strcmp(names[b], "packing-kk") == 0 ||
                                   strcmp(names[b], "packing-wlb") == 0;
                    for (int k = 0; k < l.n_mb; k++) {
                        const microbatch *m = &l.mb[k];
                        double sq = 0, dsq = 0;
                        batch_row use = {0, 0};
                        int fits = 1;
                        for (int q = 0; q < m->n_samples; q++) {
                            int id = l.ids[m->first + q];
                            assert_true(id >= 0 && id < n && !seen[id]);
                            seen[id] = 1;
                            double e = batch_pad(&f.rules, s[id].enc), d = batch_pad(&f.rules, s[id].dec);
                            sq += e * e, dsq += d * d;
                            fits = fits && batch_row_fits(&f.rules, &use, &s[id]);
                            use.enc += s[id].enc, use.dec += s[id].dec;
                            tokens[m->replica] += s[id].enc + s[id].dec;
                        }
                        assert_true(m->varlen);
                        assert_rel(m->enc_sq, sq, 1e-12);
                        if (t5) assert_rel(m->dec_sq, dsq, 1e-12);
                        if (balancer) {
                            assert_int_equal(m->mbs, 1);
                            assert_true(fits || m->n_samples == 1);
                        }
                        per_replica[m->replica]++;
                    }
                    for (int i = 0; i < n; i++) assert_true(seen[i]);
                    for (int r = 1; balancer && r < D; r++) {
                        int gap = abs(per_replica[r] - per_replica[0]);
                        assert_true(gap <= (l.n_mb % D == 0 ? 0 : 1));
                    }
                    if (strcmp(names[b], "dp-balanced") == 0 && D > 1) {
                        assert_true(l.replicas_set);
                        int64_t lo = tokens[0], hi = tokens[0];
                        for (int r = 1; r < D; r++) {
                            if (tokens[r] < lo) lo = tokens[r];
                            if (tokens[r] > hi) hi = tokens[r];
                        }
                        int64_t biggest = 0;
                        for (int i = 0; i < n; i++)
                            if (s[i].enc + s[i].dec > biggest) biggest = s[i].enc + s[i].dec;
                        assert_true(hi - lo <= biggest);
                    }
                    mb_list_release(&l);
                    checked++;
                }
            }
            fixture_release(&f);
        }
    assert_int_equal(checked, 2 * 3 * 6 * 6);
}

/* Varlen attention never makes DynaPipe's DP worse: on the same ordered samples its objective
 * with per-sample attention is at most the whole-row one's (each micro-batch costs no more). */
static void test_dynamic_varlen_never_worse(void **state)
{
    (void)state;
    unsigned seed = 5;
    for (int t5 = 0; t5 <= 1; t5++) {
        fixture f;
        fixture_init(&f, &seed, t5, 4, 1, 1, 1e6);
        for (int trial = 0; trial < 10; trial++) {
            sample_len s[60];
            random_samples(&seed, s, 60, t5);
            double obj[2];
            for (int v = 0; v <= 1; v++) {
                f.ctx.varlen = v;
                mb_list l;
                mb_list_init(&l);
                dp_err err = {0};
                if (dp_batch(&f.ctx, s, 60, &l, &err) != DP_OK) fail_msg("%s", err.msg);
                assert_int_equal(mb_list_finish(&f.ctx, &l, &err), DP_OK);
                obj[v] = l.obj_value_ms;
                mb_list_release(&l);
            }
            assert_true(obj[1] <= obj[0] + 1e-9);
        }
        fixture_release(&f);
    }
}

static void test_t5_order_is_a_short_path(void **state)
{
    (void)state;
    batch_rules r;
    batch_rules_default(&r, ARCH_T5);
    unsigned seed = 3;
    int64_t ours = 0, serp = 0;
    for (int rep = 0; rep < 40; rep++) {
        int n = rep < 20 ? 6 : 200;
        sample_len s[200], t[200];
        for (int i = 0; i < n; i++) {
            int enc = 1 + (int)(rand_r(&seed) % (rep % 2 ? 2048 : 300));
            int dec = 3 + (int)(rand_r(&seed) % (rep % 3 ? 510 : 60));
            s[i] = t[i] = (sample_len){i, enc, dec};
        }
        assert_int_equal(mb_order(&r, s, n), DP_OK);
        int seen[200] = {0};
        for (int i = 0; i < n; i++) seen[s[i].id]++;
        for (int i = 0; i < n; i++) assert_int_equal(seen[i], 1);
        for (int i = 0; i < n; i++) /* a padded pair is never visited twice */
            for (int j = i + 2; j < n; j++)
                if (batch_pad(&r, s[i].enc) == batch_pad(&r, s[j].enc) &&
                    batch_pad(&r, s[i].dec) == batch_pad(&r, s[j].dec))
                    for (int q = i + 1; q < j; q++) {
                        assert_int_equal(batch_pad(&r, s[q].enc), batch_pad(&r, s[i].enc));
                        assert_int_equal(batch_pad(&r, s[q].dec), batch_pad(&r, s[i].dec));
                    }
        int64_t mine = padded_path(&r, s, n);
        if (n == 6) { /* every order of 6 samples */
            int p[6] = {0, 1, 2, 3, 4, 5};
            int64_t best = INT64_MAX;
            for (;;) {
                sample_len q[6];
                for (int i = 0; i < 6; i++) q[i] = t[p[i]];
                int64_t len = padded_path(&r, q, 6);
                if (len < best) best = len;
                int i = 4; /* next permutation */
                while (i >= 0 && p[i] >= p[i + 1]) i--;
                if (i < 0) break;
                int j = 5;
                while (p[j] <= p[i]) j--;
                int x = p[i];
                p[i] = p[j], p[j] = x;
                for (int a = i + 1, b = 5; a < b; a++, b--) x = p[a], p[a] = p[b], p[b] = x;
            }
            assert_true(mine <= best + best / 4); /* 2-opt: near the optimum on tiny sets */
            continue;
        }
        /* the serpentine: key = padded input, then target ascending in even groups */
        int64_t key[200][2];
        int groups[4096] = {0}, g = 0;
        for (int i = 0; i < n; i++) groups[batch_pad(&r, t[i].enc) / 8] = 1;
        for (int v = 0; v < 4096; v++)
            if (groups[v]) groups[v] = ++g;
        for (int i = 0; i < n; i++) {
            int grp = groups[batch_pad(&r, t[i].enc) / 8], d = batch_pad(&r, t[i].dec);
            key[i][0] = (int64_t)grp * 100000000 + (grp % 2 ? d : 99999 - d) * 1000 + i;
            key[i][1] = i;
        }
        qsort(key, (size_t)n, sizeof *key, cmp_serpentine_key);
        sample_len q[200];
        for (int i = 0; i < n; i++) q[i] = t[key[i][1]];
        ours += mine, serp += padded_path(&r, q, n);
    }
    print_message("T5 order: path length %lld (TSP) vs %lld (serpentine) over 20 batches of 200\n",
                  (long long)ours, (long long)serp);
    assert_true(ours < serp);
}

/* stage_model.memo: a stage model with a memo answers every shape as the one without, bit for
 * bit. check_memo_shape asks both for s on cost model k. */
static void check_memo_shape(const stage_model *plain, const stage_model *memoised, int k,
                             const cost_shape *s)
{
    mb_cost a, b;
    dp_err ea = {0}, eb = {0};
    dp_status sa = stage_model_cost(&plain[k], s, &a, &ea);
    assert_int_equal(stage_model_cost(&memoised[k], s, &b, &eb), sa);
    if (sa != DP_OK) return;
    assert_true(a.t_ms == b.t_ms);
    for (int d = 0; d < plain[k].pp; d++)
        assert_true(a.fwd_ms[d] == b.fwd_ms[d] && a.bwd_ms[d] == b.bwd_ms[d] &&
                    a.stored_mb[d] == b.stored_mb[d] && a.peak_mb[d] == b.peak_mb[d] &&
                    a.xfwd_ms[d] == b.xfwd_ms[d] && a.xbwd_ms[d] == b.xbwd_ms[d]);
}

/* Over a memo of `slots`: random shapes (varlen and whole rows, per-micro-batch cp parts), each
 * followed by its variants one field off and by the other cost model's answer (with one slot, each
 * would be answered from the memo if its equality missed that field); repeats; more shapes than
 * slots. A shape the cost model refuses is refused again, not kept. */
static void check_memo(cost_model *const *cm, int slots)
{
    dp_err err = {0};
    stage_memo *memo = stage_memo_new(slots);
    assert_non_null(memo);
    stage_model plain[2], memoised[2];
    for (int k = 0; k < 2; k++) {
        assert_int_equal(stage_model_init(&plain[k], cm[k], 4, 1, 2, 1, 80000, &err), DP_OK);
        memoised[k] = plain[k], memoised[k].memo = memo;
    }
    unsigned seed = 7;
    cost_shape kept[64];
    for (int i = 0; i < 4096 + 1000; i++) {
        int k = rand_r(&seed) % 2;
        cost_shape s;
        if (i >= 4096 && i % 2) { /* repeats, some long replaced in their slot */
            s = kept[rand_r(&seed) % 64];
        } else {
            int rows = 1 + rand_r(&seed) % 8, len = 128 * (1 + rand_r(&seed) % 64);
            s = cost_shape_rows(rows, len, 0);
            if (rand_r(&seed) % 2) { /* varlen: samples' own attention */
                s.varlen = 1;
                s.enc_max = len / (1 + rand_r(&seed) % 4);
                s.enc_sq = (double)s.enc_max * s.enc_max + rows * (double)len * len / 7;
            }
            s.cp = 1 << (rand_r(&seed) % 3); /* a part at cp 1, 2 or 4 (the cp-auto model's) */
            if (i < 64) kept[i] = s;
        }
        check_memo_shape(plain, memoised, k, &s);
        cost_shape v[7] = {s, s, s, s, s, s, s};
        v[0].mbs++, v[1].enc_len += 128, v[2].varlen = !s.varlen, v[3].enc_sq += 1e6;
        v[4].enc_max = s.enc_max ? s.enc_max / 2 : s.enc_len / 2, v[5].cp = s.cp == 4 ? 2 : 4;
        for (int j = 0; j < 6; j++) {
            check_memo_shape(plain, memoised, k, &v[j]);
            check_memo_shape(plain, memoised, k, &s);
        }
        check_memo_shape(plain, memoised, !k, &v[6]); /* the other model, the same shape */
    }
    cost_shape empty = cost_shape_rows(0, 128, 0);
    mb_cost c;
    for (int i = 0; i < 2; i++) {
        dp_err e = {0};
        assert_int_equal(stage_model_cost(&memoised[1], &empty, &c, &e), DP_ERR_INFEASIBLE);
        assert_non_null(strstr(e.msg, "empty"));
    }
    stage_memo_free(memo);
}

static void test_stage_memo_answers_as_cost_model(void **state)
{
    (void)state;
    cost_model *cm[2] = {analytic("llama3-8b", "dgx-h100", 1, RECOMPUTE_NONE, NULL),
                         analytic("llama3-8b", "dgx-h100", 1, RECOMPUTE_FULL, NULL)};
    dp_err err = {0};
    assert_int_equal(cost_model_set_cp_auto(cm[0], 4, 0, &err), DP_OK);
    assert_int_equal(cost_model_set_cp_auto(cm[1], 4, 0, &err), DP_OK);
    check_memo(cm, 1); /* every shape replaces the last: each answer rests on the memo's equality */
    check_memo(cm, STAGE_MEMO_SLOTS);
    cost_model_free(cm[0]);
    cost_model_free(cm[1]);
}

/* packing-kk's search for its row count: samples of just over half a row (one a row) or a third
 * (two a row) start it at a half or two thirds of the rows it needs, past its linear steps, so
 * the doubling and the bisection must land on the fewest rows that fit; and a batch past KK's
 * bound is refused, naming the way out. */
static void test_packing_kk_rows(void **state)
{
    (void)state;
    unsigned seed = 5;
    for (int D = 1; D <= 2; D++) {
        fixture f;
        fixture_init(&f, &seed, 0, 2, 1, D, 1e6);
        f.ctx.varlen = 1;
        const batcher *kk = batcher_find("packing-kk");
        for (int n = 1; n <= 120; n += 17) {
            sample_len s[120];
            for (int per = 1; per <= 2; per++) { /* one a row fits, or two */
                for (int i = 0; i < n; i++)
                    s[i] = (sample_len){i, f.rules.max_seqlen / (per + 1) + 1 + (per == 1) * (i % 3), 0};
                mb_list l;
                mb_list_init(&l);
                dp_err err = {0};
                assert_int_equal(kk->split(&f.ctx, s, n, &l, &err), DP_OK);
                /* the fewest rows that fit (equal samples: KK deals them evenly), D at a time */
                int want = per == 1 ? n : ((n + 1) / 2 + D - 1) / D * D;
                assert_int_equal(l.n_mb, want < n ? want : n);
                mb_list_release(&l);
            }
        }
        fixture_release(&f);
    }
    fixture f;
    fixture_init(&f, &seed, 0, 2, 1, 1, 1e6);
    f.ctx.varlen = 1;
    int n = 40000; /* 8 a row: 5,000 rows, 2e8 cells */
    sample_len *s = malloc((size_t)n * sizeof *s);
    for (int i = 0; i < n; i++) s[i] = (sample_len){i, f.rules.max_seqlen / 8, 0};
    mb_list l;
    mb_list_init(&l);
    dp_err err = {0};
    assert_int_equal(batcher_find("packing-kk")->split(&f.ctx, s, n, &l, &err), DP_ERR_INFEASIBLE);
    assert_non_null(strstr(err.msg, "packing-wlb"));
    mb_list_release(&l);
    free(s);
    fixture_release(&f);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_global_batches),
        cmocka_unit_test(test_stage_memo_answers_as_cost_model),
        cmocka_unit_test(test_streamed_batches_match),
        cmocka_unit_test(test_packing_rules),
        cmocka_unit_test(test_pack_dataset_batches),
        cmocka_unit_test(test_kk_balances),
        cmocka_unit_test(test_packing_kk_rows),
        cmocka_unit_test(test_varlen_batchers),
        cmocka_unit_test(test_dynamic_varlen_never_worse),
        cmocka_unit_test(test_t5_order_is_a_short_path),
        cmocka_unit_test(test_dp_matches_brute_force),
        cmocka_unit_test(test_dp_kept_costs_any_rule),
        cmocka_unit_test(test_dp_floor_cut_matches_brute_force),
        cmocka_unit_test(test_cp_auto_matches_brute_force),
        cmocka_unit_test(test_cp_auto_spreads_samples),
        cmocka_unit_test(test_replica_split),
        cmocka_unit_test(test_zero_replicas_in_lockstep),
        cmocka_unit_test(test_thinned_never_better_and_properties),
        cmocka_unit_test(test_kk_heap_equals_scan),
        cmocka_unit_test(test_exact_equals_every_cap),
        cmocka_unit_test(test_dp_cut_brute_force),
        cmocka_unit_test(test_packing_dp),
        cmocka_unit_test(test_packing_dp_brute_force),
    };
    return cmocka_run_group_tests_name("microbatch", tests, NULL, NULL);
}
