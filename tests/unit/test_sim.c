/* Unit tests for the schedules, the plan validator and the discrete-event simulator. */
#include "simworld.h"

#include "../../scheduler/plan.h"
#include "../../scheduler/plan_machine.h"
#include "../../scheduler/schedule.h"
#include "../../scheduler/v_orders.h"
#include "../../sim/engine.h"
#include "../../sim/sim.h"

static int64_t run_schedule(world *w, const char *name, plan_iter *it, sim_iter_result *res)
{
    const schedule *sc = schedule_find(name);
    schedule_ctx ctx = {&w->sm};
    dp_err err = {0};
    if (sc->build(&ctx, it, &err) != DP_OK) fail_msg("%s", err.msg);
    if (plan_validate(it, w->sm.chunks, name, &err) != DP_OK) fail_msg("%s", err.msg);
    sim s;
    sim_init(&s);
    if (sim_iteration(&s, &w->cfg, it, 0, NULL, res, &err) != DP_OK) fail_msg("%s", err.msg);
    sim_release(&s);
    return res->makespan_ns;
}

static void test_engine_order(void **state)
{
    (void)state;
    engine e;
    engine_init(&e);
    /* (time, priority, insertion) order */
    assert_int_equal(engine_push(&e, 50, 1, 0, 1, 0, 0, 0), DP_OK);
    assert_int_equal(engine_push(&e, 10, 1, 0, 2, 0, 0, 0), DP_OK);
    assert_int_equal(engine_push(&e, 50, 0, 0, 3, 0, 0, 0), DP_OK);
    assert_int_equal(engine_push(&e, 50, 1, 0, 4, 0, 0, 0), DP_OK);
    assert_int_equal(engine_push(&e, 10, 1, 0, 5, 0, 0, 0), DP_OK);
    int want[] = {2, 5, 3, 1, 4};
    sim_event ev;
    for (int i = 0; i < 5; i++) {
        assert_true(engine_pop(&e, &ev));
        assert_int_equal(ev.a, want[i]);
    }
    assert_false(engine_pop(&e, &ev));
    assert_int_equal(engine_push(&e, 40, 0, 0, 0, 0, 0, 0), DP_ERR_INVALID); /* in the past */
    /* differential: 5000 random events pop sorted */
    srand(3);
    for (int i = 0; i < 5000; i++) engine_push(&e, 50 + rand() % 1000, rand() % 3, 0, i, 0, 0, 0);
    sim_event prev = {0};
    for (int i = 0; i < 5000; i++) {
        assert_true(engine_pop(&e, &ev));
        if (i) {
            int ordered = prev.t_ns < ev.t_ns || (prev.t_ns == ev.t_ns && (prev.prio < ev.prio ||
                                                  (prev.prio == ev.prio && prev.seq < ev.seq)));
            assert_true(ordered);
        }
        prev = ev;
    }
    engine_release(&e);
}

static void test_gpipe_and_1f1b_closed_form(void **state)
{
    (void)state;
    static const int Ss[] = {1, 2, 4, 8}, ms[] = {1, 3, 4, 8, 13};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 5; j++) {
            int S = Ss[i], m = ms[j];
            double f = 1.5, b = 2.25;
            world w;
            world_init(&w, S, 1, 0, 1e15);
            const char *names[] = {"gpipe", "1f1b", "adaptive"};
            for (int q = 0; q < 3; q++) {
                plan_iter it;
                sim_iter_result res;
                equal_iter(&w, &it, m, f, b, 0);
                int64_t got = run_schedule(&w, names[q], &it, &res);
                assert_int_equal(got, llround((m + S - 1) * (f + b) * 1e6));
                if (q == 1) /* 1F1B holds min(S - s, m) micro-batches on stage s */
                    for (int s = 0; s < S; s++)
                        assert_near(res.peak_mb[s], S - s < m ? S - s : m, 1e-9);
                if (q == 0)
                    for (int s = 0; s < S; s++) assert_near(res.peak_mb[s], m, 1e-9);
                plan_iter_release(&it);
            }
            cost_model_free(w.cm);
        }
}

static void test_interleaved_closed_form(void **state)
{
    (void)state;
    /* m a multiple of S, each chunk f/v and b/v: m(f+b) + (S-1)(f+b)/v */
    static const int Ss[] = {2, 4}, vs[] = {2, 4};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int mult = 1; mult <= 3; mult++) {
                int S = Ss[i], v = vs[j], m = S * mult;
                double f = 2.0, b = 4.0;
                world w;
                world_init(&w, S, v, 0, 1e15);
                plan_iter it;
                sim_iter_result res;
                equal_iter(&w, &it, m, f, b, 0);
                int64_t got = run_schedule(&w, "interleaved", &it, &res);
                assert_int_equal(got, llround((m * (f + b) + (S - 1) * (f + b) / v) * 1e6));
                plan_iter_release(&it);
                cost_model_free(w.cm);
            }
}

static void test_interleaved_any_count(void **state)
{
    (void)state;
    /* any micro-batch count, not only multiples of S: on two stages one link carries activations
     * and gradients both ways round, and the receives must still be posted in send order (the
     * validator inside run_schedule checks), with no deadlock and no time below the work */
    for (int S = 2; S <= 4; S++)
        for (int v = 2; v <= 3; v++)
            for (int m = 1; m <= 13; m++) {
                double f = 2.0, b = 4.0;
                world w;
                world_init(&w, S, v, 0, 1e15);
                plan_iter it;
                sim_iter_result res;
                equal_iter(&w, &it, m, f, b, 0);
                int64_t got = run_schedule(&w, "interleaved", &it, &res);
                assert_true(got >= llround(m * (f + b) * 1e6));
                plan_iter_release(&it);
                cost_model_free(w.cm);
            }
}

/* --warmup w caps the warm-up forwards: 1F1B with any cap runs (no deadlock, every receive in
 * order) and stage s holds min(S - s, w + 1, m) micro-batches, as the planner's memory rule says;
 * interleaved runs for every cap from its least, (C - 1) x min(S, m), and holds at most w + 1
 * chunks; below that least it is refused, naming the figure. */
static void test_warmup_cap(void **state)
{
    (void)state;
    for (int S = 2; S <= 8; S *= 2)
        for (int m = 1; m <= 2 * S; m++)
            for (int cap = 1; cap <= S; cap++) {
                world w;
                world_init(&w, S, 1, 0, 1e15);
                w.sm.warmup = cap;
                plan_iter it;
                sim_iter_result res;
                equal_iter(&w, &it, m, 1.5, 2.25, 0);
                int64_t got = run_schedule(&w, "1f1b", &it, &res);
                assert_true(got >= llround((m + S - 1) * 3.75 * 1e6)); /* never below the rule's */
                mem_rule rule;
                schedule_mem_rule(schedule_find("1f1b"), &w.sm, 1, &rule);
                for (int s = 0; s < S; s++) {
                    int held = S - s < cap + 1 ? S - s : cap + 1;
                    assert_near(res.peak_mb[s], held < m ? held : m, 1e-9);
                    assert_near(rule.holds[s], held, 1e-12);
                }
                plan_iter_release(&it);
                cost_model_free(w.cm);
            }
    for (int m = 1; m <= 9; m++)
        for (int cap = 1; cap <= 12; cap++) {
            int S = 4, C = 2, least = (C - 1) * (m < S ? m : S);
            world w;
            world_init(&w, S, C, 0, 1e15);
            w.sm.warmup = cap;
            plan_iter it;
            equal_iter(&w, &it, m, 2.0, 4.0, 0);
            schedule_ctx ctx = {&w.sm};
            dp_err err = {0};
            dp_status st = schedule_find("interleaved")->build(&ctx, &it, &err);
            if (cap < least) {
                assert_int_equal(st, DP_ERR_INVALID);
                assert_msg_has(err.msg, "is below what the interleaved schedule needs here");
            } else if (st == DP_OK) {
                assert_int_equal(plan_validate(&it, C, "interleaved", &err), DP_OK);
                sim s;
                sim_iter_result res;
                sim_init(&s);
                assert_int_equal(sim_iteration(&s, &w.cfg, &it, 0, NULL, &res, &err), DP_OK);
                sim_release(&s);
                for (int d = 0; d < S; d++) assert_true(res.peak_mb[d] <= (cap + 1) / (double)C + 1e-9);
            } else { /* a capped order that deadlocks: refused, saying so */
                assert_int_equal(st, DP_ERR_INFEASIBLE);
                assert_msg_has(err.msg, "deadlocks with so few warm-up forwards");
            }
            plan_iter_release(&it);
            cost_model_free(w.cm);
        }
}

static void test_zb1_bubble(void **state)
{
    (void)state;
    /* f = b = w: 1F1B's backward is b + w; ZB-H1's bubble is (S-1)(f + b - w), a third */
    static const int Ss[] = {2, 4, 8};
    for (int i = 0; i < 3; i++) {
        int S = Ss[i], m = 3 * S;
        double f = 1, bb = 1, wgt = 1;
        world w;
        world_init(&w, S, 1, 0, 1e15);
        plan_iter a, z;
        sim_iter_result ra, rz;
        equal_iter(&w, &a, m, f, bb + wgt, wgt);
        equal_iter(&w, &z, m, f, bb + wgt, wgt);
        int64_t t1 = run_schedule(&w, "1f1b", &a, &ra);
        int64_t tz = run_schedule(&w, "zb1", &z, &rz);
        int64_t work = llround(m * (f + bb + wgt) * 1e6);
        assert_int_equal(t1 - work, llround((S - 1) * (f + bb + wgt) * 1e6));
        assert_int_equal(tz - work, llround((S - 1) * (f + bb - wgt) * 1e6));
        /* 1 MB stored each: 1F1B holds S - s on stage s; ZB-H1 frees after W and holds S on
         * every stage, the most any 1F1B stage holds */
        for (int s = 0; s < S; s++) {
            assert_near(ra.peak_mb[s], S - s, 1e-9);
            assert_near(rz.peak_mb[s], S, 1e-9);
        }
        plan_iter_release(&a), plan_iter_release(&z);
        cost_model_free(w.cm);
    }
}

static void test_schedule_closed_forms_equal_simulation(void **state)
{
    (void)state;
    /* Each schedule's closed form (schedule.h), computed by the schedule, against the simulator
     * on equal micro-batches with free links: equal wherever it claims one (m a multiple of S
     * for interleaved, as Megatron's formula assumes); and the pipeline's own time (no
     * collective, no optimizer step here) is the makespan. The textbook's figures ride along:
     * f 1, b 2, w 1 on 4 stages and 8 micro-batches gives 27.27% (gpipe, 1f1b), 15.79%
     * (interleaved, 2 chunks) and 11.11% (zb1). */
    int n;
    const schedule *all = schedule_list(&n);
    for (int q = 0; q < n; q++) {
        const schedule *sc = &all[q];
        if (!sc->closed_form) { /* the one without: an order that follows memory */
            assert_true(sc->admits_by_memory);
            continue;
        }
        int vee = sc->placement == PLACEMENT_V, interleaves = sc->chunked && !sc->chunks_fixed;
        int Cmin = vee || interleaves ? 2 : 1, Cmax = vee ? 2 : interleaves ? 3 : 1;
        /* a V's forms hold where a chunk's f = b - w (DualPipeV) and = w (ZB-V): b 2, w 1; and
         * b 1.5, w 0.5, where ZB-V's condition fails and it gives none */
        for (int shape = 0; shape < (vee ? 2 : 1); shape++)
            for (int S = 1; S <= 5; S++)
                for (int C = Cmin; C <= Cmax; C++)
                    for (int mult = 1; mult <= 3; mult++) {
                        int m = S * mult;
                        double f = 1, b = vee && shape ? 1.5 : 2;
                        double wgt = vee ? (shape ? 0.5 : 1) : sc->splits_backward ? 0.75 : 0;
                        world w;
                        world_init_placed(&w, S, C, sc->placement, 0, 1e15);
                        plan_iter it;
                        sim_iter_result res;
                        equal_iter(&w, &it, m, f, b, wgt);
                        int64_t got = run_schedule(&w, sc->name, &it, &res);
                        double bubble, cf = sc->closed_form(&it, 0, S, C, &bubble);
                        if (isnan(cf)) /* only outside the form's assumptions */
                            assert_true(vee && (m < 2 * S || shape));
                        else
                            assert_int_equal(got, llround(cf * 1e6));
                        /* DualPipeV's form holds at b 1.5, w 0.5 too (f = b - w) */
                        if (shape && m >= 2 * S && strcmp(sc->name, "dualpipev") == 0)
                            assert_false(isnan(cf));
                        assert_int_equal(res.pipeline_ns, got);
                        plan_iter_release(&it);
                        cost_model_free(w.cm);
                    }
    }
    /* with fewer micro-batches than stages ZB-H1's W passes cannot fill the bubble: the simulated
     * iteration is longer than the form, which is then not given (NAN), never a wrong figure */
    for (int S = 2; S <= 5; S++)
        for (int m = 1; m < S; m++) {
            world w;
            world_init(&w, S, 1, 0, 1e15);
            plan_iter it;
            sim_iter_result res;
            equal_iter(&w, &it, m, 1, 2, 0.75);
            int64_t got = run_schedule(&w, "zb1", &it, &res);
            double bubble, cf = schedule_find("zb1")->closed_form(&it, 0, S, 1, &bubble);
            assert_true(isnan(cf) && isnan(bubble));
            double form = m * 3.0 + (S - 1) * (3 - 2 * 0.75); /* what it would have said */
            assert_true(got > llround(form * 1e6));
            plan_iter_release(&it);
            cost_model_free(w.cm);
        }
    /* ZB-V: the V's fill, 1.5 ms of 25.5 (the ZB paper's zero bubble after it); DualPipeV:
     * (S-1)(F&B + B - 3W) = 3 x (1.5 + 1 - 1.5) of 27 */
    static const struct {
        const char *name;
        int C;
        double w, bubble;
    } textbook[] = {{"gpipe", 1, 0, 3.0 / 11}, {"1f1b", 1, 0, 3.0 / 11},
                    {"interleaved", 2, 0, 4.5 / 28.5}, {"zb1", 1, 1, 1.0 / 9},
                    {"zbv", 2, 1, 1.5 / 25.5}, {"dualpipev", 2, 1, 3.0 / 27}};
    for (int i = 0; i < 6; i++) {
        world w;
        world_init_placed(&w, 4, textbook[i].C, schedule_find(textbook[i].name)->placement, 0, 1e15);
        plan_iter it;
        sim_iter_result res;
        equal_iter(&w, &it, 8, 1, 2, textbook[i].w);
        run_schedule(&w, textbook[i].name, &it, &res);
        double bubble, cf = schedule_find(textbook[i].name)->closed_form(&it, 0, 4, textbook[i].C,
                                                                         &bubble);
        assert_near(bubble / cf, textbook[i].bubble, 1e-12);
        for (int s = 0; s < 4; s++)
            assert_near(1 - (double)res.busy_ns[s] / (double)res.pipeline_ns, textbook[i].bubble, 1e-9);
        /* stage 0 holds all 8 under GPipe, 4 under 1F1B (1 MB stored each) */
        if (i < 2) assert_near(res.peak_mb[0], i == 0 ? 8 : 4, 1e-9);
        plan_iter_release(&it);
        cost_model_free(w.cm);
    }
}

static void test_latency_on_critical_path(void **state)
{
    (void)state;
    /* 2 stages, 1 micro-batch, f = 1 ms, b = 2 ms, latency 100 us and infinite bandwidth:
     * F0 on s0 [0,1], act arrives at 1.1, F0 on s1 [1.1, 2.1], B0 on s1 [2.1, 4.1],
     * grad arrives at 4.2, B0 on s0 [4.2, 6.2]: 6.2 ms = (m+S-1)(f+b) + 2 latencies. */
    world w;
    world_init(&w, 2, 1, 100, 1e15);
    plan_iter it;
    sim_iter_result res;
    equal_iter(&w, &it, 1, 1, 2, 0);
    assert_int_equal(run_schedule(&w, "1f1b", &it, &res), 6200000);
    plan_iter_release(&it);
    /* two micro-batches: 1F1B on s1 runs F0 B0 F1 B1; s0 runs F0 F1 B0 B1.
     * s0: F0 [0,1] F1 [1,2]; s1: F0 [1.1,2.1] B0 [2.1,4.1] F1 [4.1,5.1] (act1 arrived 2.1)
     * B1 [5.1,7.1]; s0: B0 at grad 4.2 [4.2,6.2], B1 at grad 7.2 [7.2, 9.2]. */
    equal_iter(&w, &it, 2, 1, 2, 0);
    assert_int_equal(run_schedule(&w, "1f1b", &it, &res), 9200000);
    plan_iter_release(&it);
    /* bandwidth: 1 Gbit/s and an activation of 2*1*16*256 = 8192 bytes: 65.536 us per hop */
    cost_model_free(w.cm);
    world_init(&w, 2, 1, 0, 1);
    equal_iter(&w, &it, 1, 1, 2, 0);
    assert_int_equal(run_schedule(&w, "1f1b", &it, &res), 6000000 + 2 * 65536);
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

/* A 2-stage, 2-micro-batch iteration with hand-written instructions. */
static void craft(world *w, plan_iter *it, const char *s0, const char *s1)
{
    equal_iter(w, it, 2, 1, 1, 0);
    const char *lists[2] = {s0, s1};
    for (int r = 0; r < 2; r++) {
        const char *p = lists[r];
        while (*p) {
            char op[16];
            int mb, n;
            if (sscanf(p, " %15[A-Z_]:%d%n", op, &mb, &n) != 2) break;
            plan_op o;
            assert_int_equal(plan_op_parse(op, &o), 0);
            int peer = (o >= OP_SEND_ACT && o <= OP_RECV_GRAD) ? 1 - r : -1;
            int64_t bytes = peer >= 0 ? schedule_act_bytes(&w->sm, &it->mb[mb], 0) : 0;
            assert_int_equal(plan_rank_push(&it->ranks[r], o, mb, 0, peer, bytes), DP_OK);
            p += n;
        }
    }
}

static void expect_rejected(world *w, const char *s0, const char *s1, const char *want)
{
    plan_iter it;
    dp_err err = {0};
    craft(w, &it, s0, s1);
    if (plan_validate(&it, 1, "crafted", &err) == DP_OK) fail_msg("accepted, wanted \"%s\"", want);
    assert_msg_has(err.msg, want);
    assert_msg_has(err.msg, "crafted: iteration 0: ");
    assert_msg_has(err.msg, "stage ");
    plan_iter_release(&it);
}

static void test_bad_plans_rejected(void **state)
{
    (void)state;
    world w;
    world_init(&w, 2, 1, 0, 1e15);
    const char *good0 = "F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1";
    const char *good1 = "RECV_ACT:0 F:0 B:0 SEND_GRAD:0 FREE:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1 FREE:1";
    plan_iter it;
    dp_err err = {0};
    craft(&w, &it, good0, good1);
    if (plan_validate(&it, 1, "crafted", &err) != DP_OK) fail_msg("%s", err.msg);
    plan_iter_release(&it);
    /* a receive with no send: the slot is freed before it ever sends */
    expect_rejected(&w, "F:0 SEND_ACT:0 F:1 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1", good1,
                    "FREE before its SEND_ACT");
    /* crossed send orders */
    expect_rejected(&w, "F:0 F:1 SEND_ACT:1 SEND_ACT:0 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1",
                    good1, "orders cross");
    /* a shape mismatch */
    craft(&w, &it, good0, good1);
    it.ranks[1].ins[0].bytes += 8;
    assert_int_not_equal(plan_validate(&it, 1, "crafted", &err), DP_OK);
    assert_msg_has(err.msg, "differ in shape");
    plan_iter_release(&it);
    /* dependency order */
    expect_rejected(&w, "SEND_ACT:0 F:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1",
                    good1, "SEND_ACT before its F");
    /* a deadlock: stage 0 waits for gradient 0 before sending activation 1; stage 1 wants
     * activation 1 before it runs backward 0 */
    expect_rejected(&w, "F:0 SEND_ACT:0 RECV_GRAD:0 B:0 FREE:0 F:1 SEND_ACT:1 RECV_GRAD:1 B:1 FREE:1",
                    "RECV_ACT:0 F:0 RECV_ACT:1 F:1 B:0 SEND_GRAD:0 FREE:0 B:1 SEND_GRAD:1 FREE:1",
                    "deadlocks");
    /* the simulator reports the same deadlock instead of hanging */
    craft(&w, &it, "F:0 SEND_ACT:0 RECV_GRAD:0 B:0 FREE:0 F:1 SEND_ACT:1 RECV_GRAD:1 B:1 FREE:1",
          "RECV_ACT:0 F:0 RECV_ACT:1 F:1 B:0 SEND_GRAD:0 FREE:0 B:1 SEND_GRAD:1 FREE:1");
    sim s;
    sim_iter_result res;
    sim_init(&s);
    assert_int_equal(sim_iteration(&s, &w.cfg, &it, 0, NULL, &res, &err), DP_ERR_DEADLOCK);
    assert_msg_has(err.msg, "waiting: stage 0");
    sim_release(&s);
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

static uint64_t hash_ops_seen;
static void hash_op(void *ctx, const sim_op *o)
{
    (void)ctx;
    int64_t v[5] = {o->stage, o->op, o->mb, o->start_ns, o->end_ns};
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < sizeof v; i++) hash_ops_seen = (hash_ops_seen ^ p[i]) * 1099511628211ULL;
}

static void test_determinism_variable_sizes(void **state)
{
    (void)state;
    uint64_t hashes[2];
    for (int rep = 0; rep < 2; rep++) {
        world w;
        world_init(&w, 4, 1, 5, 100);
        plan_iter it;
        equal_iter(&w, &it, 9, 1, 2, 0.5);
        for (int k = 0; k < 9; k++)
            for (int s = 0; s < 4; s++) it.mb[k].fwd_ms[s] = 0.5 + 0.37 * ((k * 7 + s) % 5);
        const char *names[] = {"gpipe", "1f1b", "adaptive", "zb1"};
        hash_ops_seen = 14695981039346656037ULL;
        for (int q = 0; q < 4; q++) {
            const schedule *sc = schedule_find(names[q]);
            schedule_ctx ctx = {&w.sm};
            dp_err err = {0};
            assert_int_equal(sc->build(&ctx, &it, &err), DP_OK);
            if (plan_validate(&it, 1, names[q], &err) != DP_OK) fail_msg("%s", err.msg);
            sim s;
            sim_init(&s);
            sim_sink sink = {hash_op, NULL, NULL};
            sim_iter_result res;
            if (sim_iteration(&s, &w.cfg, &it, 0, &sink, &res, &err) != DP_OK) fail_msg("%s", err.msg);
            sim_release(&s);
        }
        hashes[rep] = hash_ops_seen;
        plan_iter_release(&it);
        cost_model_free(w.cm);
    }
    assert_int_equal(hashes[0], hashes[1]);
}

/* The V schedules on micro-batches of different sizes, 1 to 3S of them, 1 to 6 devices: every
 * plan validates and runs, and its simulated pipeline (free links) takes what v_orders_ms, a
 * second timing of the same order, says: DualPipeV's order, and for ZB-V the faster of the
 * published and the greedy order. */
static void test_v_orders_time_as_simulated(void **state)
{
    (void)state;
    int checked = 0;
    for (int S = 1; S <= 6; S++)
        for (int m = 1; m <= 3 * S; m++) {
            world w;
            world_init_placed(&w, S, 2, PLACEMENT_V, 0, 1e15);
            plan_iter it;
            equal_iter(&w, &it, m, 1, 2, 0.5);
            size_t n = (size_t)m * (size_t)S;
            double *t = malloc(3 * n * sizeof *t);
            for (int k = 0; k < m; k++)
                for (int s = 0; s < S; s++) {
                    plan_mb *x = &it.mb[k];
                    x->fwd_ms[s] = 0.5 + 0.37 * ((k * 7 + s * 3) % 5);
                    x->bwd_ms[s] = 2 * x->fwd_ms[s] + 0.11 * ((k + s) % 3);
                    x->w_ms[s] = 0.4 * x->fwd_ms[s];
                    size_t at = (size_t)k * (size_t)S + (size_t)s;
                    t[at] = x->fwd_ms[s] / 2, t[n + at] = (x->bwd_ms[s] - x->w_ms[s]) / 2;
                    t[2 * n + at] = x->w_ms[s] / 2;
                }
            v_costs c = {t, t + n, t + 2 * n};
            v_orders pub, greedy, dpv;
            assert_int_equal(v_orders_alloc(&pub, S, m), 0);
            assert_int_equal(v_orders_alloc(&greedy, S, m), 0);
            assert_int_equal(v_orders_alloc(&dpv, S, m), 0);
            v_zbv_published(&pub);
            assert_int_equal(v_zbv_greedy(&greedy, &c), 0);
            assert_int_equal(v_dualpipev(&dpv), 0);
            double want[2] = {fmin(v_orders_ms(&pub, &c), v_orders_ms(&greedy, &c)),
                              v_orders_ms(&dpv, &c)};
            const char *names[2] = {"zbv", "dualpipev"};
            for (int q = 0; q < 2; q++) {
                sim_iter_result res;
                assert_true(isfinite(want[q]));
                run_schedule(&w, names[q], &it, &res); /* builds, validates, simulates */
                if (fabs(res.pipeline_ns * 1e-6 - want[q]) >= 1e-5 * 6 * m)
                    fail_msg("%s S %d m %d: sim %.6f order %.6f", names[q], S, m,
                             res.pipeline_ns * 1e-6, want[q]);
                checked++;
            }
            v_orders_free(&pub), v_orders_free(&greedy), v_orders_free(&dpv);
            free(t);
            plan_iter_release(&it);
            cost_model_free(w.cm);
        }
    assert_int_equal(checked, 2 * 3 * (1 + 2 + 3 + 4 + 5 + 6));
}

/* ZB-V's greedy pass as first written: at every step every device scans all m micro-batches of
 * both its chunks (the builder scans only those begun and not done there). Writes device d's ops
 * as kind/mb/chunk triples into ops[d][...] and their counts into n[d]. */
static void zbv_greedy_by_scan(const v_costs *c, int S, int m, int (*ops)[3 * 6 * 24], int *n)
{
    int nv = 2 * S;
    double fd[24][12], bd[24][12], free_at[6] = {0};
    int wd[24][12] = {{0}}, held[6] = {0}, next_new[6] = {0}, wc[24][6] = {{0}};
    for (int i = 0; i < m; i++)
        for (int v = 0; v < nv; v++) fd[i][v] = bd[i][v] = -1;
    for (int d = 0; d < S; d++) n[d] = 0;
    for (int step = 0; step < 3 * nv * m; step++) {
        int best_d = -1, best_i = 0, best_c = 0, best_k = 0;
        double best_t = INFINITY;
        for (int d = 0; d < S; d++) {
            int vs[2] = {d, 2 * S - 1 - d};
            double t_b = INFINITY, t_f1 = INFINITY, t_f0 = INFINITY;
            int b_i = -1, b_c = 0, f1_i = -1, f0_i = -1, w_i = -1, w_c = 0;
            for (int i = 0; i < m; i++)
                for (int ch = 0; ch < 2; ch++) {
                    int v = vs[ch];
                    double r = v == nv - 1 ? fd[i][v] : bd[i][v + 1];
                    if (fd[i][v] >= 0 && bd[i][v] < 0 && r >= 0 && r < t_b) t_b = r, b_i = i, b_c = ch;
                    if (bd[i][v] >= 0 && !wd[i][v] && w_i < 0) w_i = i, w_c = ch;
                }
            for (int i = 0; i < m && f1_i < 0; i++)
                if (fd[i][vs[1]] < 0 && fd[i][vs[1] - 1] >= 0) t_f1 = fd[i][vs[1] - 1], f1_i = i;
            int i0 = next_new[d];
            if (i0 < m && held[d] < S && (d == 0 || fd[i0][d - 1] >= 0))
                t_f0 = d == 0 ? 0 : fd[i0][d - 1], f0_i = i0;
            double now = free_at[d], start = INFINITY;
            int k = 0, i = 0, ch = 0; /* 0 F, 1 B, 2 W */
            if (b_i >= 0 && t_b <= now) k = 1, i = b_i, ch = b_c, start = now;
            else if (f1_i >= 0 && t_f1 <= now) i = f1_i, ch = 1, start = now;
            else if (f0_i >= 0 && t_f0 <= now) i = f0_i, start = now;
            else if (w_i >= 0) k = 2, i = w_i, ch = w_c, start = now;
            else {
                start = fmin(t_b, fmin(t_f1, t_f0));
                if (!isfinite(start)) continue;
                if (start == t_b) k = 1, i = b_i, ch = b_c;
                else if (start == t_f1) i = f1_i, ch = 1;
                else i = f0_i;
            }
            if (start < best_t) best_t = start, best_d = d, best_k = k, best_i = i, best_c = ch;
        }
        assert_true(best_d >= 0);
        int d = best_d, i = best_i, v = best_c ? 2 * S - 1 - d : d;
        size_t at = (size_t)i * (size_t)S + (size_t)d;
        double end = best_t + fmax(best_k == 0 ? c->f[at] : best_k == 1 ? c->b[at] : c->w[at], 0);
        free_at[d] = end;
        if (best_k == 0) fd[i][v] = end, held[d] += !best_c, next_new[d] += !best_c;
        else if (best_k == 1) bd[i][v] = end;
        else wd[i][v] = 1, held[d] -= ++wc[i][d] == 2;
        int *x = &ops[d][3 * n[d]++];
        x[0] = best_k, x[1] = i, x[2] = best_c;
    }
}

/* v_zbv_greedy against the pass as first written: the same ops in the same order on every
 * device, over 1-6 devices and 1-24 micro-batches of costs with ties (whole numbers) and without. */
static void test_zbv_greedy_as_first_written(void **state)
{
    (void)state;
    static int ops[6][3 * 6 * 24];
    int n[6], checked = 0;
    for (int S = 1; S <= 6; S++)
        for (int m = 1; m <= 24; m += m < 8 ? 1 : 5)
            for (int ties = 0; ties < 2; ties++) {
                size_t cells = (size_t)m * (size_t)S;
                double t[3 * 6 * 24];
                for (size_t k = 0; k < cells; k++) {
                    unsigned h = (unsigned)(k * 2654435761u + (unsigned)(S * 131 + m * 7 + ties));
                    double f = ties ? 1 + h % 3 : 0.5 + (h % 997) / 331.0;
                    t[k] = f, t[cells + k] = ties ? 1 + (h >> 8) % 3 : 1.7 * f + (h % 13) / 29.0;
                    t[2 * cells + k] = ties ? (h >> 12) % 2 : 0.6 * f;
                }
                v_costs c = {t, t + cells, t + 2 * cells};
                v_orders o;
                assert_int_equal(v_orders_alloc(&o, S, m), 0);
                assert_int_equal(v_zbv_greedy(&o, &c), 0);
                zbv_greedy_by_scan(&c, S, m, ops, n);
                for (int d = 0; d < S; d++) {
                    assert_int_equal(o.n[d], n[d]);
                    for (int j = 0; j < n[d]; j++) {
                        const v_op *x = &o.ops[(size_t)d * (size_t)o.cap + (size_t)j];
                        int kind = x->kind == V_F ? 0 : x->kind == V_B ? 1 : 2;
                        if (kind != ops[d][3 * j] || x->mb != ops[d][3 * j + 1] ||
                            x->chunk != ops[d][3 * j + 2])
                            fail_msg("S %d m %d ties %d: device %d op %d differs", S, m, ties, d, j);
                    }
                }
                v_orders_free(&o);
                checked++;
            }
    assert_int_equal(checked, 6 * 11 * 2);
}

/* The adaptive schedule's cyclic pass as first written (every round, every device scans its
 * micro-batches for the backward whose gradient came first, and the held ones for the largest
 * transient): the builder's per-device F/B order must be the same, under memory that binds. */
static void adaptive_by_scan(const plan_iter *it, const double *budget, int S, int m, int *kind,
                             int *mb)
{
    int fd[8][40], bd[8][40], nextf[8] = {0}, nops[8] = {0}, heldn[8] = {0};
    double held[8] = {0};
    for (int s = 0; s < S; s++)
        for (int i = 0; i < m; i++) fd[s][i] = bd[s][i] = -1;
    int remaining = 2 * S * m;
    for (int t = 0; remaining > 0 && t < 8 * S * m + 16; t++)
        for (int s = 0; s < S; s++) {
            int best = -1, best_at = 0;
            for (int i = 0; i < m; i++) {
                if (fd[s][i] < 0 || bd[s][i] >= 0) continue;
                int at = s == S - 1 ? fd[s][i] : bd[s + 1][i];
                if (at < 0 || at >= t) continue;
                if (best < 0 || at < best_at) best = i, best_at = at;
            }
            if (best >= 0) {
                bd[s][best] = t;
                held[s] -= it->mb[best].stored_mb[s];
                heldn[s]--;
                kind[s * 2 * m + nops[s]] = 1, mb[s * 2 * m + nops[s]++] = best;
                remaining--;
                continue;
            }
            int i = nextf[s];
            if (i >= m || (s > 0 && (fd[s - 1][i] < 0 || fd[s - 1][i] >= t))) continue;
            const plan_mb *x = &it->mb[i];
            double tmax = fmax(0, x->peak_mb[s] - x->stored_mb[s]);
            for (int j = 0; j < m; j++)
                if (fd[s][j] >= 0 && bd[s][j] < 0)
                    tmax = fmax(tmax, it->mb[j].peak_mb[s] - it->mb[j].stored_mb[s]);
            if (heldn[s] > 0 && held[s] + x->stored_mb[s] + tmax > budget[s]) continue;
            fd[s][i] = t;
            held[s] += x->stored_mb[s];
            heldn[s]++;
            nextf[s]++;
            kind[s * 2 * m + nops[s]] = 0, mb[s * 2 * m + nops[s]++] = i;
            remaining--;
        }
    assert_int_equal(remaining, 0);
}

static void test_adaptive_equals_scan(void **state)
{
    (void)state;
    unsigned seed = 515;
    for (int rep = 0; rep < 60; rep++) {
        int S = 1 + rep % 8, m = 1 + (int)(rand_r(&seed) % 40);
        world w;
        world_init(&w, S, 1, 0, 1e15);
        plan_iter it;
        equal_iter(&w, &it, m, 1, 2, 0);
        for (int k = 0; k < m; k++)
            for (int s = 0; s < S; s++) {
                plan_mb *x = &it.mb[k];
                x->fwd_ms[s] = 0.5 + (rand_r(&seed) % 100) / 50.0, x->bwd_ms[s] = 2 * x->fwd_ms[s];
                x->stored_mb[s] = 1 + rand_r(&seed) % 4;
                x->peak_mb[s] = x->stored_mb[s] + rand_r(&seed) % 3;
            }
        for (int s = 0; s < S; s++) w.sm.budget_mb[s] = rep % 4 ? 6 + rand_r(&seed) % 12 : 1e9;
        schedule_ctx ctx = {&w.sm};
        dp_err err = {0};
        assert_int_equal(schedule_find("adaptive")->build(&ctx, &it, &err), DP_OK);
        int kind[8 * 80], mb[8 * 80];
        adaptive_by_scan(&it, w.sm.budget_mb, S, m, kind, mb);
        for (int s = 0; s < S; s++) {
            const plan_rank *R = &it.ranks[s];
            int q = 0;
            for (int i = 0; i < R->n; i++) {
                if (R->ins[i].op != OP_F && R->ins[i].op != OP_B) continue;
                assert_true(q < 2 * m);
                assert_int_equal(R->ins[i].op == OP_B, kind[s * 2 * m + q]);
                assert_int_equal(R->ins[i].mb, mb[s * 2 * m + q]);
                q++;
            }
            assert_int_equal(q, 2 * m);
        }
        plan_iter_release(&it);
        cost_model_free(w.cm);
    }
}

/* Replicas in lockstep (ZeRO-3 over 2-3 replicas, microbatch.h mb_replicas_lockstep): the adaptive
 * schedule lays one order out for all of them, over each position's most memory among the
 * replicas' micro-batches there, so every replica runs the same passes (plan_iter_check_lockstep)
 * and each is the scan's order (above) of that envelope; random memory and budgets, 1-4 stages.
 * Laid out replica by replica, some of these differ (the rule the envelope keeps). */
static void test_adaptive_in_lockstep(void **state)
{
    (void)state;
    unsigned seed = 808;
    int apart = 0;
    for (int rep = 0; rep < 60; rep++) {
        int S = 1 + rep % 4, D = 2 + rep % 2, per = 2 + (int)(rand_r(&seed) % 11), m = D * per;
        world w;
        world_init(&w, S, 1, 0, 1e15);
        w.sm.dp = D, w.sm.zero_stage = 3;
        for (int s = 0; s < S; s++) w.sm.budget_mb[s] = 5 + rand_r(&seed) % 10;
        plan_iter it, env;
        plan_iter_init(&it);
        assert_int_equal(plan_iter_alloc(&it, 0, S, D, m, m), DP_OK);
        equal_iter(&w, &env, per, 1, 2, 0);
        for (int k = 0; k < m; k++) {
            plan_mb *x = &it.mb[k];
            x->first = k, x->n_samples = 1, x->mbs = 1, x->enc_len = 16, x->enc_tokens = 16;
            x->replica = k % D, it.ids[k] = k;
            plan_mb *e = &env.mb[k / D];
            for (int st = 0; st < S; st++) {
                x->fwd_ms[st] = 1, x->bwd_ms[st] = 2;
                x->stored_mb[st] = 1 + rand_r(&seed) % 4;
                x->peak_mb[st] = x->stored_mb[st] + rand_r(&seed) % 3;
                if (k % D == 0) e->stored_mb[st] = e->peak_mb[st] = 0;
                e->stored_mb[st] = fmax(e->stored_mb[st], x->stored_mb[st]);
                e->peak_mb[st] = fmax(e->peak_mb[st], x->peak_mb[st]);
            }
        }
        schedule_ctx ctx = {&w.sm};
        dp_err err = {0};
        assert_int_equal(schedule_find("adaptive")->build(&ctx, &it, &err), DP_OK);
        if (plan_iter_check_lockstep(&it, 3, 0, "t", &err) != DP_OK) fail_msg("%s", err.msg);
        int kind[4 * 2 * 12], mb[4 * 2 * 12], own_kind[4 * 2 * 12], own_mb[4 * 2 * 12];
        adaptive_by_scan(&env, w.sm.budget_mb, S, per, kind, mb);
        for (int r = 0; r < D; r++) {
            plan_iter one; /* replica r alone, for the order it would get by itself */
            equal_iter(&w, &one, per, 1, 2, 0);
            for (int q = 0; q < per; q++) one.mb[q] = it.mb[q * D + r];
            adaptive_by_scan(&one, w.sm.budget_mb, S, per, own_kind, own_mb);
            apart += memcmp(own_kind, kind, sizeof(int) * (size_t)(S * 2 * per)) != 0;
            plan_iter_release(&one);
            for (int st = 0; st < S; st++) {
                const plan_rank *R = &it.ranks[r * S + st];
                int q = 0;
                for (int i = 0; i < R->n; i++) {
                    if (R->ins[i].op != OP_F && R->ins[i].op != OP_B) continue;
                    assert_int_equal(R->ins[i].op == OP_B, kind[st * 2 * per + q]);
                    assert_int_equal(R->ins[i].mb, mb[st * 2 * per + q] * D + r);
                    q++;
                }
                assert_int_equal(q, 2 * per);
            }
        }
        plan_iter_release(&it);
        plan_iter_release(&env);
        cost_model_free(w.cm);
    }
    assert_true(apart > 5);
}

/* schedule_time_lower_bound never exceeds the simulated pipeline, over random micro-batches
 * (times per stage, W shares), every schedule, 1 to 6 stages, chunks where the schedule takes
 * them, links slow or free; and it is the simulated time itself for equal micro-batches under
 * 1F1B and GPipe on free links ((m + S - 1)(f + b), tight). */
static void test_time_lower_bound(void **state)
{
    (void)state;
    unsigned seed = 99;
    int n_sched;
    const schedule *all = schedule_list(&n_sched);
    for (int rep = 0; rep < 120; rep++)
        for (int q = 0; q < n_sched; q++) {
            const schedule *sc = &all[q];
            int C = schedule_chunks(sc, 2), S = 1 + rep % 6, m = 1 + (int)(rand_r(&seed) % 12);
            if (sc->chunked && S < 2) continue;
            world w;
            world_init_placed(&w, S, C, sc->placement, rep % 2 ? 5 : 0, rep % 2 ? 10 : 1e15);
            plan_iter it;
            equal_iter(&w, &it, m, 1, 2, 0);
            for (int k = 0; k < m; k++)
                for (int s = 0; s < S; s++) {
                    plan_mb *x = &it.mb[k];
                    x->fwd_ms[s] = 0.1 + (rand_r(&seed) % 100) / 20.0;
                    x->bwd_ms[s] = x->fwd_ms[s] * (1 + (rand_r(&seed) % 100) / 50.0);
                    x->w_ms[s] = sc->splits_backward ? x->bwd_ms[s] * 0.4 : 0;
                }
            sim_iter_result res;
            int64_t got = run_schedule(&w, sc->name, &it, &res);
            double lb = schedule_time_lower_bound(sc, &it, S, C);
            assert_true(lb > 0);
            assert_true(lb * 1e6 <= (double)res.pipeline_ns && res.pipeline_ns <= got);
            plan_iter_release(&it);
            cost_model_free(w.cm);
        }
    for (int S = 1; S <= 6; S++)
        for (int m = 1; m <= 9; m += 4) {
            const char *names[] = {"gpipe", "1f1b"};
            for (int q = 0; q < 2; q++) {
                world w;
                world_init(&w, S, 1, 0, 1e15);
                plan_iter it;
                sim_iter_result res;
                equal_iter(&w, &it, m, 1.5, 2.25, 0);
                int64_t got = run_schedule(&w, names[q], &it, &res);
                assert_near(schedule_time_lower_bound(schedule_find(names[q]), &it, S, 1), got / 1e6,
                            1e-3);
                plan_iter_release(&it);
                cost_model_free(w.cm);
            }
        }
}

/* The gradient all-reduce of a stage is one collective over its replicas: it starts when the
 * slowest replica is done, on every replica (2 stages x 3 replicas, one slow micro-batch). */
typedef struct ar_seen {
    int64_t start[8], end[8];
    int n;
} ar_seen;

static void on_ar(void *ctx, const sim_op *o)
{
    ar_seen *a = ctx;
    if (o->op != SIM_OP_ALLREDUCE || a->n >= 8) return;
    a->start[o->replica * 2 + o->stage] = o->start_ns, a->end[o->replica * 2 + o->stage] = o->end_ns;
    a->n++;
}

/* Every replica's reduction of stage 1 ran [s1, e1] ms and of stage 0 [s0, e0] ms. */
static void expect_reductions(const ar_seen *a, int replicas, double s1, double e1, double s0,
                              double e0)
{
    for (int rep = 0; rep < replicas; rep++) {
        assert_int_equal(a->start[rep * 2 + 1], llround(s1 * 1e6));
        assert_int_equal(a->end[rep * 2 + 1], llround(e1 * 1e6));
        assert_int_equal(a->start[rep * 2], llround(s0 * 1e6));
        assert_int_equal(a->end[rep * 2], llround(e0 * 1e6));
    }
}

static void test_allreduce_waits_for_the_slowest_replica(void **state)
{
    (void)state;
    world w;
    world_init(&w, 2, 1, 0, 1e9);
    plan_iter it;
    plan_iter_init(&it);
    const int D = 3;
    assert_int_equal(plan_iter_alloc(&it, 0, 2, D, D, D), DP_OK);
    for (int k = 0; k < D; k++) { /* micro-batch k on replica k; replica 1's is 10x longer */
        plan_mb *x = &it.mb[k];
        x->first = k, x->n_samples = 1, x->mbs = 1, x->enc_len = 16, x->enc_tokens = 16;
        x->replica = k;
        it.ids[k] = k;
        for (int st = 0; st < 2; st++)
            x->fwd_ms[st] = k == 1 ? 10 : 1, x->bwd_ms[st] = k == 1 ? 20 : 2, x->stored_mb[st] = x->peak_mb[st] = 1;
    }
    for (int rep = 0; rep < D; rep++) { /* F to stage 1, B back, FREE */
        plan_rank *r0 = &it.ranks[rep * 2], *r1 = &it.ranks[rep * 2 + 1];
        assert_int_equal(plan_rank_push(r0, OP_F, rep, 0, -1, 0), DP_OK);
        assert_int_equal(plan_rank_push(r0, OP_SEND_ACT, rep, 0, 1, 8), DP_OK);
        assert_int_equal(plan_rank_push(r1, OP_RECV_ACT, rep, 0, 0, 8), DP_OK);
        assert_int_equal(plan_rank_push(r1, OP_F, rep, 0, -1, 0), DP_OK);
        assert_int_equal(plan_rank_push(r1, OP_B, rep, 0, -1, 0), DP_OK);
        assert_int_equal(plan_rank_push(r1, OP_SEND_GRAD, rep, 0, 0, 8), DP_OK);
        assert_int_equal(plan_rank_push(r1, OP_FREE, rep, 0, -1, 0), DP_OK);
        assert_int_equal(plan_rank_push(r0, OP_RECV_GRAD, rep, 0, 1, 8), DP_OK);
        assert_int_equal(plan_rank_push(r0, OP_B, rep, 0, -1, 0), DP_OK);
        assert_int_equal(plan_rank_push(r0, OP_FREE, rep, 0, -1, 0), DP_OK);
    }
    w.cfg.dp = D;
    w.cfg.allreduce_ms[0] = 5, w.cfg.allreduce_ms[1] = 7;
    ar_seen a = {{0}, {0}, 0};
    sim_sink sink = {on_ar, NULL, &a};
    sim s;
    sim_init(&s);
    sim_iter_result res;
    dp_err err = {0};
    if (sim_iteration(&s, &w.cfg, &it, 0, &sink, &res, &err) != DP_OK) fail_msg("%s", err.msg);
    assert_int_equal(a.n, 2 * D);
    /* stage 1 of replica 1 ends at 10 + 10 + 20 = 40 ms (the links are instant), stage 0 at 60 */
    expect_reductions(&a, D, 40, 47, 60, 65);
    assert_int_equal(res.makespan_ns, 65000000);
    /* Overlapped in 4 buckets during each stage's last backward (sim.h): stage 1's slowest
     * replica runs it 20 -> 40 ms, so the reduction ends at max(40 + 7/4, 20 + 20/4 + 7) =
     * 41.75 ms; stage 0's 40 -> 60 ms: max(60 + 5/4, 40 + 5 + 5) = 61.25 ms, the makespan */
    for (int st = 0; st < 2; st++) w.cfg.grad_ms[st] = w.cfg.allreduce_ms[st], w.cfg.grad_buckets[st] = 4;
    a.n = 0;
    if (sim_iteration(&s, &w.cfg, &it, 0, &sink, &res, &err) != DP_OK) fail_msg("%s", err.msg);
    expect_reductions(&a, D, 25, 41.75, 45, 61.25);
    assert_int_equal(res.makespan_ns, 61250000);
    sim_release(&s);
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

/* Replicas that meet (sim.h; microbatch.h mb_replicas_meet): each pass of a meeting kind is a
 * collective with the same stage's other replicas. Over random micro-batch times (1F1B, 1-3
 * stages, 2-3 replicas, 2-4 micro-batches each): under ZeRO-3 (every pass meets) and an exchange
 * of experts across replicas (F and B) the k-th meeting pass of a stage starts together on every
 * replica, each computes its own time, and the rank's next pass starts no earlier than the
 * longest of theirs has passed; under ZeRO-2 nothing meets; the iteration is never shorter
 * than with the replicas apart (ZeRO-1); on one stage it is the sum over k of the longest k-th
 * pass, written out here. */
typedef struct pass_seen {
    int n[STAGE_MAX * 4];
    int64_t start[STAGE_MAX * 4][16], end[STAGE_MAX * 4][16];
    plan_op op[STAGE_MAX * 4][16];
    int mb[STAGE_MAX * 4][16];
} pass_seen;

static void on_pass(void *ctx, const sim_op *o)
{
    pass_seen *p = ctx;
    if (o->op != OP_F && o->op != OP_B && o->op != OP_W) return;
    int r = o->replica * STAGE_MAX + o->stage, k = p->n[r]++;
    if (k >= 16) fail_msg("more than 16 passes on a rank");
    p->start[r][k] = o->start_ns, p->end[r][k] = o->end_ns;
    p->op[r][k] = o->op, p->mb[r][k] = o->mb;
}

/* A MoE's token exchange in pairs (sim.h, sim_config.pair_exchange): a forward and another
 * micro-batch's backward next to each other on a rank take max(c1 + c2, a1 + a2) together where
 * the second's data was there when the first began (c: compute, a: exchange), the second's time
 * absorbing the saving; the share of the first still to run where the data came while it ran.
 * Written out on one stage (1F1B: each B_k with F_k+1; a W between them, ZB-H1's, pairs nothing)
 * and on two stages for a gradient that arrives while the forward runs; over random plans of
 * 1F1B, ZB-V and DualPipeV, never slower than serial, never faster than serial less every
 * exchange, than a rank's compute alone or than the planner's lower bound, and faster somewhere. */
static void random_exchange(plan_iter *it, int S, unsigned seed)
{
    for (int k = 0; k < it->n_mb; k++)
        for (int d = 0; d < S; d++) {
            plan_mb *x = &it->mb[k];
            x->fwd_ms[d] = 1 + rand_r(&seed) % 9, x->bwd_ms[d] = 2 + rand_r(&seed) % 15;
            x->xfwd_ms[d] = x->fwd_ms[d] * (rand_r(&seed) % 90) / 100.0;
            x->xbwd_ms[d] = fmin(x->xfwd_ms[d] * (1 + rand_r(&seed) % 2), 0.9 * x->bwd_ms[d]);
            x->w_ms[d] = (x->bwd_ms[d] - x->xbwd_ms[d]) / 3;
        }
}

/* The time of a pair: the first's d1 (a1 of it exchange) and the second's, `share` of the
 * saving taken, out of the second's time (the first has run: at most all of it). */
static double pair_span_ms(double d1, double a1, double d2, double a2, double share)
{
    double together = fmax(d1 - a1 + d2 - a2, a1 + a2);
    return d1 + d2 - fmin(share * (d1 + d2 - together), d2);
}

typedef struct op_seen {
    int64_t start[2][8], end[2][8];
    int op[2][8], mb[2][8], n[2];
} op_seen;

static void on_compute(void *ctx, const sim_op *o)
{
    op_seen *p = ctx;
    if (o->op != OP_F && o->op != OP_B && o->op != OP_W) return;
    int k = p->n[o->stage]++;
    if (k >= 8) fail_msg("more than 8 passes on a stage");
    p->start[o->stage][k] = o->start_ns, p->end[o->stage][k] = o->end_ns;
    p->op[o->stage][k] = o->op, p->mb[o->stage][k] = o->mb;
}

static void test_exchange_pairs(void **state)
{
    (void)state;
    for (int trial = 0; trial < 20; trial++) { /* one stage */
        int m = 2 + trial % 5;
        world w;
        world_init(&w, 1, 1, 0, 1e9);
        plan_iter it;
        double serial = 0, want = 0;
        sim_iter_result res;
        for (int q = 0; q < 3; q++) {
            equal_iter(&w, &it, m, 1, 1, 0);
            random_exchange(&it, 1, 100 + trial);
            const plan_mb *x = it.mb;
            if (q == 0)
                for (int k = 0; k < m; k++) serial += x[k].fwd_ms[0] + x[k].bwd_ms[0];
            want = x[0].fwd_ms[0] + x[m - 1].bwd_ms[0];
            for (int k = 0; k + 1 < m; k++)
                want += pair_span_ms(x[k].bwd_ms[0], x[k].xbwd_ms[0], x[k + 1].fwd_ms[0],
                                     x[k + 1].xfwd_ms[0], 1);
            w.cfg.pair_exchange = q > 0;
            double got = (double)run_schedule(&w, q < 2 ? "1f1b" : "zb1", &it, &res) / 1e6;
            if (fabs(got - (q == 1 ? want : serial)) > 1e-5) fail_msg("q %d m %d: %.6f, want %.6f (serial %.6f)", q, m, got, q == 1 ? want : serial, serial);
            plan_iter_release(&it);
        }
        assert_true(want < serial);
        cost_model_free(w.cm);
    }
    { /* one stage, F0 F1 B0 F2 B1 B2: (F1, B0) and (F2, B1) pair; B0, paired, not with F2 */
        world w;
        world_init(&w, 1, 1, 0, 1e9);
        plan_iter it;
        equal_iter(&w, &it, 3, 1, 1, 0);
        random_exchange(&it, 1, 99);
        static const plan_op ops[6] = {OP_F, OP_F, OP_B, OP_F, OP_B, OP_B};
        static const int mbs[6] = {0, 1, 0, 2, 1, 2};
        for (int i = 0; i < 6; i++)
            assert_int_equal(plan_rank_push(&it.ranks[0], ops[i], mbs[i], 0, -1, 0), DP_OK);
        w.cfg.pair_exchange = 1;
        sim_iter_result res;
        dp_err err = {0};
        sim s;
        sim_init(&s);
        assert_int_equal(sim_iteration(&s, &w.cfg, &it, 0, NULL, &res, &err), DP_OK);
        sim_release(&s);
        const plan_mb *x = it.mb;
        double want = x[0].fwd_ms[0] + x[2].bwd_ms[0] +
                      pair_span_ms(x[1].fwd_ms[0], x[1].xfwd_ms[0], x[0].bwd_ms[0],
                                   x[0].xbwd_ms[0], 1) +
                      pair_span_ms(x[2].fwd_ms[0], x[2].xfwd_ms[0], x[1].bwd_ms[0],
                                   x[1].xbwd_ms[0], 1);
        assert_near((double)res.makespan_ns / 1e6, want, 1e-5);
        plan_iter_release(&it);
        cost_model_free(w.cm);
    }
    { /* two stages, 1F1B: B0's gradient reaches stage 0 a quarter before F1 there ends */
        world w;
        world_init(&w, 2, 1, 500, 1e9); /* 0.5 ms a transfer */
        plan_iter it;
        equal_iter(&w, &it, 2, 1, 1, 0);
        for (int k = 0; k < 2; k++) {
            plan_mb *x = &it.mb[k];
            x->fwd_ms[0] = 4, x->bwd_ms[0] = 6, x->xfwd_ms[0] = 2, x->xbwd_ms[0] = 3;
            x->fwd_ms[1] = 1, x->bwd_ms[1] = 1;
        }
        w.cfg.pair_exchange = 1;
        sim_iter_result res;
        op_seen seen = {0};
        sim_sink sink = {on_compute, NULL, &seen};
        const schedule *sc = schedule_find("1f1b");
        schedule_ctx ctx = {&w.sm};
        dp_err err = {0};
        assert_int_equal(sc->build(&ctx, &it, &err), DP_OK);
        sim s;
        sim_init(&s);
        assert_int_equal(sim_iteration(&s, &w.cfg, &it, 0, &sink, &res, &err), DP_OK);
        sim_release(&s);
        /* stage 0: F0 [0, 4], F1 [4, 8], B0's gradient at 4 + 0.5 + 1 + 1 + 0.5 = 7: a quarter
         * of F1 left, so B0 takes 6 - 0.25 (10 - max(5, 5)) = 4.75 */
        assert_int_equal(seen.n[0], 4);
        assert_true(seen.op[0][2] == OP_B && seen.mb[0][2] == 0 && seen.op[0][1] == OP_F);
        assert_int_equal(seen.start[0][2], 8000000);
        assert_int_equal(seen.end[0][2] - seen.start[0][2], 4750000);
        assert_near(pair_span_ms(4, 2, 6, 3, 0.25), 8.75, 1e-12);
        plan_iter_release(&it);
        cost_model_free(w.cm);
    }
    /* random plans */
    static const char *const names[] = {"1f1b", "zbv", "dualpipev"};
    for (int n = 0; n < 3; n++) {
        int faster = 0;
        for (int trial = 0; trial < 30; trial++) {
            int S = 2 + trial % 3, C = n ? 2 : 1, m = 2 * S + trial % (S + 1);
            world w;
            world_init_placed(&w, S, C, n ? PLACEMENT_V : PLACEMENT_LOOP, 50, 100);
            int64_t t[2];
            double compute = 0, exchange = 0;
            for (int q = 0; q < 2; q++) {
                plan_iter it;
                equal_iter(&w, &it, m, 1, 1, 0);
                random_exchange(&it, S, 7 * trial + n);
                w.cfg.pair_exchange = q;
                sim_iter_result res;
                t[q] = run_schedule(&w, names[n], &it, &res);
                /* the planner's lower bound holds under pairs too (schedule.h) */
                double lb = schedule_time_lower_bound(schedule_find(names[n]), &it, S, C);
                if (lb * 1e6 > (double)t[q] + 1)
                    fail_msg("%s S %d m %d pairs %d: simulated %lld ns under the bound %.0f", names[n],
                             S, m, q, (long long)t[q], lb * 1e6);
                pm_step st;
                plan_machine pm;
                pm_init(&pm, &it, C);
                for (int r = 0; r < S && q == 0; r++) {
                    double mine = 0;
                    for (int i = 0; i < it.ranks[r].n; i++) {
                        pm_resolve(&pm, r, i, &st);
                        mine += st.dur_ms - st.xchg_ms, exchange += st.xchg_ms;
                    }
                    compute = fmax(compute, mine);
                }
                pm_release(&pm);
                plan_iter_release(&it);
            }
            if (t[1] > t[0] || (double)t[1] < (double)t[0] - exchange * 1e6 - 100 ||
                (double)t[1] < compute * 1e6 - 100)
                fail_msg("%s S %d m %d: serial %lld ns, paired %lld, exchange %.3f ms, a rank's "
                         "compute %.3f ms", names[n], S, m, (long long)t[0], (long long)t[1],
                         exchange, compute);
            faster += t[1] < t[0];
            cost_model_free(w.cm);
        }
        print_message("%s: pairs shortened %d of 30 plans\n", names[n], faster);
        assert_true(faster > 0);
    }
}

static void test_replicas_meet(void **state)
{
    (void)state;
    srand(11);
    for (int trial = 0; trial < 60; trial++) {
        int S = 1 + trial % 3, D = 2 + trial % 2, per = 2 + rand() % 3, m = D * per;
        world w;
        world_init(&w, S, 1, 0, 1e15);
        plan_iter it;
        plan_iter_init(&it);
        assert_int_equal(plan_iter_alloc(&it, 0, S, D, m, m), DP_OK);
        for (int k = 0; k < m; k++) {
            plan_mb *x = &it.mb[k];
            x->first = k, x->n_samples = 1, x->mbs = 1, x->enc_len = 16, x->enc_tokens = 16;
            x->replica = k % D, it.ids[k] = k;
            for (int st = 0; st < S; st++) {
                x->fwd_ms[st] = 1 + rand() % 9, x->bwd_ms[st] = 2 + rand() % 17;
                x->stored_mb[st] = x->peak_mb[st] = 1;
            }
        }
        schedule_ctx ctx = {&w.sm};
        dp_err err = {0};
        if (schedule_find("1f1b")->build(&ctx, &it, &err) != DP_OK) fail_msg("%s", err.msg);
        w.cfg.dp = D;
        int64_t apart = 0;
        struct { int zero, span; unsigned meets; } kinds[] = {
            {1, 0, 0}, {3, 0, 1u << OP_F | 1u << OP_B}, {0, 1, 1u << OP_F | 1u << OP_B},
            {2, 0, 0}};
        for (size_t q = 0; q < sizeof kinds / sizeof kinds[0]; q++) {
            w.cfg.zero_stage = kinds[q].zero, w.cfg.experts_span = kinds[q].span;
            static pass_seen seen;
            memset(&seen, 0, sizeof seen);
            sim_sink sink = {on_pass, NULL, &seen};
            sim s;
            sim_init(&s);
            sim_iter_result res;
            if (sim_iteration(&s, &w.cfg, &it, 0, &sink, &res, &err) != DP_OK)
                fail_msg("%s", err.msg);
            sim_release(&s);
            if (q == 0) apart = res.makespan_ns;
            assert_true(res.makespan_ns >= apart);
            for (int st = 0; st < S; st++) {
                int64_t sum = 0;
                for (int k = 0; k < seen.n[st]; k++) {
                    int64_t longest = 0;
                    for (int rep = 0; rep < D; rep++) {
                        int r = rep * STAGE_MAX + st;
                        const plan_mb *x = &it.mb[seen.mb[r][k]];
                        double ms = seen.op[r][k] == OP_F ? x->fwd_ms[st] : x->bwd_ms[st];
                        longest = llround(ms * 1e6) > longest ? llround(ms * 1e6) : longest;
                    }
                    sum += longest;
                    if (!(kinds[q].meets >> seen.op[st][k] & 1u)) continue;
                    for (int rep = 0; rep < D; rep++) {
                        int r = rep * STAGE_MAX + st;
                        if (seen.start[r][k] != seen.start[st][k])
                            fail_msg("ZeRO-%d span %d, %d stages x %d replicas: pass %d of "
                                     "stage %d starts at %lld ns on replica 0, %lld on replica %d",
                                     kinds[q].zero, kinds[q].span, S, D, k, st,
                                     (long long)seen.start[st][k], (long long)seen.start[r][k],
                                     rep);
                        const plan_mb *x = &it.mb[seen.mb[r][k]];
                        double own = seen.op[r][k] == OP_F ? x->fwd_ms[st] : x->bwd_ms[st];
                        assert_int_equal(seen.end[r][k] - seen.start[r][k], llround(own * 1e6));
                        if (k + 1 < seen.n[r])
                            assert_true(seen.start[r][k + 1] >= seen.start[r][k] + longest);
                    }
                }
                if (S == 1 && kinds[q].meets == (1u << OP_F | 1u << OP_B))
                    assert_int_equal(res.makespan_ns, sum);
            }
        }
        plan_iter_release(&it);
        cost_model_free(w.cm);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine_order),
        cmocka_unit_test(test_gpipe_and_1f1b_closed_form),
        cmocka_unit_test(test_interleaved_closed_form),
        cmocka_unit_test(test_schedule_closed_forms_equal_simulation),
        cmocka_unit_test(test_interleaved_any_count),
        cmocka_unit_test(test_warmup_cap),
        cmocka_unit_test(test_zb1_bubble),
        cmocka_unit_test(test_latency_on_critical_path),
        cmocka_unit_test(test_bad_plans_rejected),
        cmocka_unit_test(test_determinism_variable_sizes),
        cmocka_unit_test(test_v_orders_time_as_simulated),
        cmocka_unit_test(test_zbv_greedy_as_first_written),
        cmocka_unit_test(test_allreduce_waits_for_the_slowest_replica),
        cmocka_unit_test(test_replicas_meet),
        cmocka_unit_test(test_exchange_pairs),
        cmocka_unit_test(test_adaptive_equals_scan),
        cmocka_unit_test(test_adaptive_in_lockstep),
        cmocka_unit_test(test_time_lower_bound),
    };
    return cmocka_run_group_tests_name("sim", tests, NULL, NULL);
}
