/*
 * test_plan_machine.c — the one meaning of a plan (scheduler/plan_machine.h): a crafted plan per
 * validator rule, each breaking exactly that rule; the simulator's memory against the machine's;
 * the adaptive schedule's order timed by the simulator against an independent evaluator written
 * here; the link streams of the simulator; and T5's order on inputs where sorting by raw input
 * length and by padded input length differ.
 */
#include "simworld.h"

#include "../../scheduler/microbatch.h"
#include "../../scheduler/plan_machine.h"
#include "../../scheduler/schedule.h"
#include "../../sim/sim.h"

/* Instruction lists per stage, "OP:mb" or "OP:mb:chunk" words; transfers go to the neighbouring
 * virtual stage's device, with the bytes of the schedules. */
static void craft(const world *w, plan_iter *it, int m, const char *const *lists)
{
    int S = w->sm.pp, C = w->sm.chunks;
    equal_iter(w, it, m, 1, 1, 0);
    for (int r = 0; r < S; r++) {
        const char *p = lists[r];
        for (;;) {
            char op[16];
            int mb, n, chunk = 0;
            if (sscanf(p, " %15[A-Z_]:%d%n", op, &mb, &n) != 2) break;
            p += n;
            if (sscanf(p, ":%d%n", &chunk, &n) == 1) p += n;
            plan_op o;
            assert_int_equal(plan_op_parse(op, &o), 0);
            int v = chunk * S + r, peer = -1;
            int64_t bytes = 0;
            if (o == OP_SEND_ACT || o == OP_RECV_GRAD) peer = (v + 1) % S, bytes = schedule_act_bytes(&w->sm, &it->mb[mb], v);
            if (o == OP_RECV_ACT || o == OP_SEND_GRAD) peer = (v - 1 + S * C) % S, bytes = schedule_act_bytes(&w->sm, &it->mb[mb], v - 1 < 0 ? 0 : v - 1);
            assert_int_equal(plan_rank_push(&it->ranks[r], o, mb, chunk, peer, bytes), DP_OK);
        }
    }
}

static const char *GOOD0 = "F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1";
static const char *GOOD1 = "RECV_ACT:0 F:0 B:0 SEND_GRAD:0 FREE:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1 FREE:1";

/* A 2-stage plan whose stage lists are s0, s1 must be refused, naming the rule. */
static void refused(const char *s0, const char *s1, const char *why, const char *rule)
{
    world w;
    world_init(&w, 2, 1, 0, 1e15);
    const char *lists[2] = {s0, s1};
    plan_iter it;
    craft(&w, &it, 2, lists);
    dp_err err = {0};
    if (plan_validate(&it, 1, "rules.json", &err) == DP_OK) fail_msg("accepted, wanted \"%s\"", why);
    assert_msg_has(err.msg, "rules.json: iteration 0: ");
    assert_msg_has(err.msg, why);
    assert_msg_has(err.msg, rule);
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

static void test_each_instruction_rule(void **state)
{
    (void)state;
    world w;
    world_init(&w, 2, 1, 0, 1e15);
    /* GOOD0 and GOOD1; and a rank that splits micro-batch 0 (B, then W) and leaves 1 whole, and
     * the simulator times its B's as such: 0's B its input-gradient share, 1's whole */
    const char *mix = "F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 RECV_GRAD:1 B:1 FREE:1 W:0 FREE:0";
    const char *good[2][2] = {{GOOD0, GOOD1}, {mix, GOOD1}};
    for (int g = 0; g < 2; g++) {
        plan_iter it;
        craft(&w, &it, 2, good[g]);
        for (int k = 0; k < 2; k++) it.mb[k].w_ms[0] = 0.25;
        dp_err err = {0};
        if (plan_validate(&it, 1, "rules.json", &err) != DP_OK) fail_msg("%s", err.msg);
        plan_machine m;
        pm_init(&m, &it, 1);
        pm_step st;
        for (int i = 0; i < it.ranks[0].n; i++) {
            pm_resolve(&m, 0, i, &st);
            if (st.op == OP_B) assert_int_equal(st.split, g == 1 && st.x->mb == 0);
            if (st.op == OP_B) assert_near(st.dur_ms, st.split ? 0.75 : 1, 1e-12);
        }
        pm_release(&m);
        plan_iter_release(&it);
    }
    cost_model_free(w.cm);
    /* one F and one B per (micro-batch, chunk) */
    refused("F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1",
            "RECV_ACT:0 F:0 F:0 B:0 SEND_GRAD:0 FREE:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1 FREE:1",
            "instruction 2 (F mb 0 chunk 0): a second F of micro-batch 0", "rule: one F and one B");
    refused("F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1", GOOD1,
            "a second B of micro-batch 0", "rule: one F and one B");
    refused("F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1", GOOD1,
            "never runs B of micro-batch 1", "rule: one F and one B");
    refused("F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 FREE:1", GOOD1,
            "FREE before its F and B", "rule: FREE last");
    refused("F:0 SEND_ACT:0 SEND_ACT:1 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1", GOOD1,
            "SEND_ACT before its F", "rule: transfers");
    refused("B:0 F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 FREE:0 RECV_GRAD:1 B:1 FREE:1", GOOD1,
            "B before its F", "rule: F before B");
    /* W: at most one per slot, after its B, FREE after it; a slot without one is whole (its B
     * computes the weight gradients), which a rank may mix with split ones */
    refused("F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 FREE:0 W:0 RECV_GRAD:1 B:1 FREE:1", GOOD1,
            "FREE before its W", "rule: FREE last");
    refused("F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 W:0 W:0 FREE:0 RECV_GRAD:1 B:1 W:1 FREE:1",
            GOOD1, "a second W of micro-batch 0", "rule: one W");
    refused("F:0 SEND_ACT:0 F:1 SEND_ACT:1 W:0 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 W:1 FREE:1",
            GOOD1, "W before its B", "rule: W after B");
    /* no use after FREE; FREE after the sends and W that read the slot */
    refused("F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 FREE:0 B:0 RECV_GRAD:1 B:1 FREE:1", GOOD1,
            "FREE before its F and B", "rule: FREE last");
    refused(GOOD0, "RECV_ACT:0 F:0 B:0 FREE:0 SEND_GRAD:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1 FREE:1",
            "FREE before its SEND_GRAD", "rule: FREE last");
    refused(GOOD0, "RECV_ACT:0 F:0 B:0 SEND_GRAD:0 FREE:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1 FREE:1 F:0",
            "uses micro-batch 0 chunk 0 after its FREE", "rule: no use after FREE");
    refused(GOOD0, "RECV_ACT:0 F:0 B:0 SEND_GRAD:0 FREE:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1 FREE:1 FREE:1",
            "after its FREE", "rule: no use after FREE");
    refused(GOOD0, "RECV_ACT:0 F:0 B:0 SEND_GRAD:0 FREE:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1",
            "never runs FREE of micro-batch 1", "rule: one FREE");
    /* transfers: before their compute, matched in order, no deadlock */
    refused(GOOD0, "F:0 RECV_ACT:0 B:0 SEND_GRAD:0 FREE:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1 FREE:1",
            "F before the RECV_ACT of its input", "rule: transfers");
    refused("F:0 F:1 SEND_ACT:1 SEND_ACT:0 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1", GOOD1,
            "orders cross", "rule: transfers");
    refused("F:0 SEND_ACT:0 RECV_GRAD:0 B:0 FREE:0 F:1 SEND_ACT:1 RECV_GRAD:1 B:1 FREE:1",
            "RECV_ACT:0 F:0 RECV_ACT:1 F:1 B:0 SEND_GRAD:0 FREE:0 B:1 SEND_GRAD:1 FREE:1",
            "the plan deadlocks", "rule: no deadlock");
}

/* Data rules: one iteration broken by `edit`, refused with why. */
static void refused_data(void (*edit)(plan_iter *), const char *why)
{
    world w;
    world_init(&w, 2, 1, 0, 1e15);
    const char *good[2] = {GOOD0, GOOD1};
    plan_iter it;
    craft(&w, &it, 2, good);
    edit(&it);
    dp_err err = {0};
    if (plan_validate(&it, 1, "rules.json", &err) == DP_OK) fail_msg("accepted, wanted \"%s\"", why);
    assert_msg_has(err.msg, "rules.json: iteration 0");
    assert_msg_has(err.msg, why);
    assert_msg_has(err.msg, "(rule: ");
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

static void w_over_bwd(plan_iter *it) { it->mb[1].w_ms[0] = it->mb[1].bwd_ms[0] + 0.5; }
static void negative_time(plan_iter *it) { it->mb[0].fwd_ms[1] = -1; }
static void huge_time(plan_iter *it) { it->mb[1].bwd_ms[0] = 1e12; }
static void nan_memory(plan_iter *it) { it->mb[0].peak_mb[0] = NAN; }
static void too_many_tokens(plan_iter *it) { it->mb[1].enc_tokens = 17; }
static void sample_twice(plan_iter *it) { it->ids[it->mb[1].first] = it->ids[it->mb[0].first]; }
static void no_sample(plan_iter *it) { it->mb[1].n_samples = 0; }
static void no_microbatch(plan_iter *it)
{
    for (int r = 0; r < 2; r++) it->ranks[r].n = 0;
    it->n_mb = 0;
}
static void wrong_peer(plan_iter *it) { it->ranks[0].ins[1].peer = 0; }
static void wrong_bytes(plan_iter *it) { it->ranks[1].ins[0].bytes += 2; }

static void test_each_data_rule(void **state)
{
    (void)state;
    refused_data(w_over_bwd, "exceeds pred_ms.bwd[0] = 1 (rule: 0 <= w <= bwd");
    refused_data(negative_time, "pred_ms.fwd[1] = -1 (rule: times and memory finite, >= 0");
    refused_data(huge_time, "pred_ms.bwd[0] = 1e+12 (rule: times and memory finite, >= 0 and at most 1e7");
    refused_data(nan_memory, "mem_mb.peak[0] = nan");
    refused_data(too_many_tokens, "holds 17 + 0 real tokens in 1 x (16 + 0) padded ones (rule: tokens <= padded_tokens)");
    refused_data(sample_twice, "holds sample 0 twice: an iteration trains a sample once (rule: samples)");
    refused_data(no_sample, "micro-batch 1 trains no sample (rule: samples)");
    refused_data(no_microbatch, "has no micro-batch");
    refused_data(wrong_peer, "the peer of virtual stage 0 must be stage 1");
    refused_data(wrong_bytes, "differ in shape");
    /* the simulator, given such a plan anyway, names the instruction instead of running it */
    world w;
    world_init(&w, 2, 1, 0, 1e15);
    const char *zb[2] = {"F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 W:0 FREE:0 RECV_GRAD:1 B:1 W:1 FREE:1", GOOD1};
    plan_iter it;
    craft(&w, &it, 2, zb);
    dp_err err = {0};
    if (plan_validate(&it, 1, "zb.json", &err) != DP_OK) fail_msg("%s", err.msg);
    w_over_bwd(&it);
    sim s;
    sim_init(&s);
    sim_iter_result res;
    assert_int_equal(sim_iteration(&s, &w.cfg, &it, 0, NULL, &res, &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "stage 0 (replica 0) instruction 9 (B mb 1 chunk 0) lasts -0.5 ms");
    sim_release(&s);
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

/* One device, two chunks: virtual stage 0 sends to virtual stage 1 on the same device. */
static void test_self_send(void **state)
{
    (void)state;
    world w;
    world_init(&w, 1, 2, 0, 1e15);
    const char *one[1] = {"F:0:0 SEND_ACT:0:0 RECV_ACT:0:1 F:0:1 B:0:1 SEND_GRAD:0:1 FREE:0:1 "
                          "RECV_GRAD:0:0 B:0:0 FREE:0:0"};
    plan_iter it;
    craft(&w, &it, 1, one);
    dp_err err = {0};
    if (plan_validate(&it, 2, "self.json", &err) != DP_OK) fail_msg("%s", err.msg);
    sim s;
    sim_init(&s);
    sim_iter_result res;
    if (sim_iteration(&s, &w.cfg, &it, 0, NULL, &res, &err) != DP_OK) fail_msg("%s", err.msg);
    assert_int_equal(res.makespan_ns, 2000000); /* f + b of the micro-batch over two chunks */
    sim_release(&s);
    /* the receive posted before the send is fine; a self-receive of the wrong kind is not */
    it.ranks[0].ins[2].op = OP_RECV_GRAD;
    assert_int_not_equal(plan_validate(&it, 2, "self.json", &err), DP_OK);
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

static void test_plan_level_rules(void **state)
{
    (void)state;
    /* the golden 4-rank plan, edited as text */
    char *text = NULL;
    dp_err err = {0};
    FILE *fp = fopen("tests/cli/golden/plan_4ranks.json", "rb");
    assert_non_null(fp);
    text = calloc(1 << 20, 1);
    size_t n = fread(text, 1, (1 << 20) - 1, fp);
    fclose(fp);
    assert_true(n > 100);
    plan p;
    assert_int_equal(plan_parse(text, "p.json", &p, &err), DP_OK);
    if (plan_check(&p, "p.json", &err) != DP_OK) fail_msg("%s", err.msg);
    model_spec t5 = *model_preset("t5-tiny"), gpt = *model_preset("gpt-tiny");
    assert_int_equal(plan_check_model(&p, &gpt, "p.json", &err), DP_OK);
    assert_int_equal(plan_check_model(&p, &t5, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "rule: T5 micro-batches have a decoder length");
    /* a sliding attention window: rows up to it pass, one token more does not; a varlen row is
     * its samples' spans, each attending to itself */
    int longest = 0, widest = 0;
    for (int k = 0; k < p.it[0].n_mb; k++)
        if (p.it[0].mb[k].enc_len > longest) longest = p.it[0].mb[k].enc_len, widest = k;
    gpt.window = longest;
    assert_int_equal(plan_check_model(&p, &gpt, "p.json", &err), DP_OK);
    gpt.window = longest - 1;
    assert_int_equal(plan_check_model(&p, &gpt, "p.json", &err), DP_ERR_INVALID);
    char want[160];
    snprintf(want, sizeof want, "micro-batch %d's rows of %d tokens is longer than gpt-tiny's "
             "sliding attention window of %d tokens", widest, longest, longest - 1);
    assert_msg_has(err.msg, want);
    assert_msg_has(err.msg, "rule: attention spans within the model's context and window");
    /* the context (max_position_embeddings) the same way: rows up to it pass, one token more not */
    gpt.window = 0, gpt.positions = longest;
    assert_int_equal(plan_check_model(&p, &gpt, "p.json", &err), DP_OK);
    gpt.positions = longest - 1;
    assert_int_equal(plan_check_model(&p, &gpt, "p.json", &err), DP_ERR_INVALID);
    snprintf(want, sizeof want, "micro-batch %d's rows of %d tokens is longer than the %d tokens "
             "gpt-tiny takes", widest, longest, longest - 1);
    assert_msg_has(err.msg, want);
    gpt.positions = 0, gpt.window = longest - 1;
    /* a row padded past the plan's max_seqlen (Phi-3's window and max_seqlen 2047, its rows
     * padded to 2048) holds at most max_seqlen tokens of samples: within the window */
    int max_seqlen = p.h.rules.max_seqlen;
    p.h.rules.max_seqlen = longest - 1;
    assert_int_equal(plan_check_model(&p, &gpt, "p.json", &err), DP_OK);
    p.h.rules.max_seqlen = max_seqlen;
    for (int k = 0; k < p.it[0].n_mb; k++) { /* every sample half the row: within the window */
        plan_mb *mb = &p.it[0].mb[k];
        mb->varlen = 1;
        for (int q = 0; q < mb->n_samples; q++) p.it[0].lens[2 * (mb->first + q)] = mb->enc_len / 2;
    }
    assert_int_equal(plan_check_model(&p, &gpt, "p.json", &err), DP_OK);
    p.it[0].lens[2 * p.it[0].mb[widest].first] = longest; /* one sample the whole row */
    assert_int_equal(plan_check_model(&p, &gpt, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "longest sample of");
    for (int k = 0; k < p.it[0].n_mb; k++) p.it[0].mb[k].varlen = 0;
    gpt.window = 0;
    strcpy(p.h.schedule, "2f2b");
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "\"2f2b\" is not a known schedule");
    strcpy(p.h.schedule, "1f1b");
    p.h.recompute = -1; /* the file said none (an unknown name is refused by the parser) */
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "\"recompute\" \"\" is not none, selective, full, dynamic or mixed");
    p.h.recompute = RECOMPUTE_POLICY_FASTEST; /* a run's rule, never a plan's */
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "\"fastest\" is not none, selective, full, dynamic or mixed");
    /* a dynamic plan names every iteration's mode; a fixed one names none other than its own */
    p.h.recompute = RECOMPUTE_POLICY_DYNAMIC;
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "a dynamic plan names the mode of every iteration");
    for (int i = 0; i < p.n_it; i++) p.it[i].recompute = RECOMPUTE_SELECTIVE;
    if (plan_check(&p, "p.json", &err) != DP_OK) fail_msg("%s", err.msg);
    p.h.recompute = RECOMPUTE_NONE;
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "\"selective\" differs from the plan's \"none\"");
    p.it[0].recompute = RECOMPUTE_POLICY_MIXED; /* a rule where a mode belongs */
    p.h.recompute = RECOMPUTE_POLICY_DYNAMIC;
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "\"mixed\" is not none, selective or full");
    p.it[0].recompute = RECOMPUTE_FULL;
    /* a mixed plan names every micro-batch's mode and no iteration's; no other plan names any */
    p.h.recompute = RECOMPUTE_POLICY_MIXED;
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "iteration 0: \"recompute\" \"full\" in a mixed plan");
    for (int i = 0; i < p.n_it; i++) p.it[i].recompute = -1;
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "iteration 0, micro-batch 0: no \"recompute\" in a mixed plan");
    for (int i = 0; i < p.n_it; i++)
        for (int k = 0; k < p.it[i].n_mb; k++) p.it[i].mb[k].recompute = k % RECOMPUTE_COUNT;
    if (plan_check(&p, "p.json", &err) != DP_OK) fail_msg("%s", err.msg);
    p.h.recompute = RECOMPUTE_POLICY_DYNAMIC;
    for (int i = 0; i < p.n_it; i++) p.it[i].recompute = RECOMPUTE_NONE;
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "micro-batch 0: a \"recompute\" of its own in a plan that is not mixed");
    for (int i = 0; i < p.n_it; i++) {
        p.it[i].recompute = -1;
        for (int k = 0; k < p.it[i].n_mb; k++) p.it[i].mb[k].recompute = -1;
    }
    p.h.recompute = RECOMPUTE_NONE;
    int n_it = p.n_it;
    p.n_it = 0;
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "the plan has no iteration");
    p.n_it = n_it;
    plan_release(&p);
    /* an iteration listed twice */
    char *at = strstr(text, "\"iterations\": [");
    assert_non_null(at);
    char *body = strchr(at, '[') + 1, *end = strrchr(text, ']');
    size_t len = (size_t)(end - body);
    char *twice = malloc(2 * strlen(text));
    snprintf(twice, 2 * strlen(text), "%.*s%.*s,%.*s]}", (int)(body - text), text, (int)len, body, (int)len, body);
    assert_int_equal(plan_parse(twice, "p.json", &p, &err), DP_OK);
    assert_int_equal(plan_check(&p, "p.json", &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "iteration id 0 appears twice (rule: unique iteration ids)");
    plan_release(&p);
    free(twice);
    /* an unknown activation dtype */
    char *dt = malloc(strlen(text) + 64);
    snprintf(dt, strlen(text) + 64, "{\"act_dtype\": \"fp8\", %s", text + 1);
    assert_int_equal(plan_parse(dt, "p.json", &p, &err), DP_ERR_PARSE);
    assert_msg_has(err.msg, "\"act_dtype\" \"fp8\"");
    free(dt);
    free(text);
}

/* ---- memory: the simulator's timed accounting equals the machine's ---------------------------- */

/* Rule "recompute": a W under full recompute is refused (its B reran the forward; W would need
 * those activations held past B, which stored_mb does not count), by the mode that applies to
 * the micro-batch (pm_recompute: its own, else its iteration's, else the header's); a plan
 * without W takes every mode. */
static void test_recompute_rule(void **state)
{
    (void)state;
    static const char *const files[2] = {"tests/cli/golden/plan_zb1_4stages.json",
                                         "tests/cli/golden/plan_4ranks.json"};
    for (int f = 0; f < 2; f++) {
        plan p;
        dp_err err = {0};
        assert_int_equal(plan_read(files[f], &p, &err), DP_OK);
        for (int m = 0; m < RECOMPUTE_COUNT; m++) {
            p.h.recompute = m;
            assert_int_equal(pm_recompute(&p, &p.it[0], 0), m);
            dp_status st = plan_check(&p, "p.json", &err);
            if (f == 0 && m == RECOMPUTE_FULL) {
                assert_int_equal(st, DP_ERR_INVALID);
                assert_msg_has(err.msg, "p.json: iteration 0: stage 0 (replica 0) instruction");
                assert_msg_has(err.msg, "a W under full recompute (rule: recompute");
            } else if (st != DP_OK) {
                fail_msg("%s under %s: %s", files[f], recompute_name((recompute_mode)m), err.msg);
            }
        }
        /* a dynamic plan: the iteration's own mode applies */
        p.h.recompute = RECOMPUTE_POLICY_DYNAMIC;
        for (int i = 0; i < p.n_it; i++) p.it[i].recompute = RECOMPUTE_SELECTIVE;
        assert_int_equal(plan_check(&p, "p.json", &err), DP_OK);
        p.it[p.n_it - 1].recompute = RECOMPUTE_FULL;
        assert_int_equal(pm_recompute(&p, &p.it[p.n_it - 1], 0), RECOMPUTE_FULL);
        assert_int_equal(plan_check(&p, "p.json", &err), f == 0 ? DP_ERR_INVALID : DP_OK);
        /* a mixed plan: the micro-batch's own mode applies; one full micro-batch of a split plan
         * is refused at its W, the others take selective */
        p.h.recompute = RECOMPUTE_POLICY_MIXED;
        const plan_iter *last = &p.it[p.n_it - 1];
        for (int i = 0; i < p.n_it; i++) {
            p.it[i].recompute = -1;
            for (int k = 0; k < p.it[i].n_mb; k++) p.it[i].mb[k].recompute = RECOMPUTE_SELECTIVE;
        }
        assert_int_equal(plan_check(&p, "p.json", &err), DP_OK);
        int k = last->n_mb - 1;
        last->mb[k].recompute = RECOMPUTE_FULL;
        assert_int_equal(pm_recompute(&p, last, k), RECOMPUTE_FULL);
        assert_int_equal(pm_recompute(&p, last, 0), k > 0 ? RECOMPUTE_SELECTIVE : RECOMPUTE_FULL);
        dp_status st = plan_check(&p, "p.json", &err);
        assert_int_equal(st, f == 0 ? DP_ERR_INVALID : DP_OK);
        if (f == 0) {
            char want[64];
            snprintf(want, sizeof want, "(W mb %d chunk 0)", k);
            assert_msg_has(err.msg, want);
        }
        plan_release(&p);
    }
}

/* ZB-H1's W share of a backward: the weight gradients' d of the backward's 2d + 2a analytic FLOPs
 * (dense d, attention a), and of 2d + 3a under selective recompute, whose B reruns the attention
 * (a) first; computed here from analytic_flops for micro-batches of several shapes. */
static void test_w_share_of_the_backward(void **state)
{
    (void)state;
    model_spec m = *model_preset("gpt-6.7b-16l");
    cluster_spec hw;
    cluster_preset("p4d", &hw);
    analytic_params ap;
    analytic_params_default(&ap);
    for (int rc = RECOMPUTE_NONE; rc <= RECOMPUTE_SELECTIVE; rc++) {
        cost_model *cm = NULL;
        stage_model sm;
        dp_err err = {0};
        assert_int_equal(cost_analytic_new(&m, &hw, 1, (recompute_mode)rc, &ap, &cm, &err), DP_OK);
        assert_int_equal(stage_model_init(&sm, cm, 2, 1, 1, 0, 1e9, &err), DP_OK);
        mb_list l;
        mb_list_init(&l);
        static const int mbs[3] = {8, 2, 1}, len[3] = {256, 2048, 8192};
        for (int k = 0; k < 3; k++) {
            sample_len one = {k, len[k], 0};
            assert_int_equal(mb_list_add(&l, NULL, &one, 1, mbs[k], len[k], 0), DP_OK);
        }
        plan_iter pi;
        plan_iter_init(&pi);
        assert_int_equal(plan_iter_from_mbs(&pi, 0, &l, &sm, &err), DP_OK);
        for (int k = 0; k < 3; k++) {
            double d, a;
            cost_shape sh = cost_shape_rows(mbs[k], len[k], 0);
            analytic_flops(&m, COMP_ENCODER, &sh, 1, &d, &a);
            double want = d / (2 * d + 2 * a + (rc == RECOMPUTE_SELECTIVE ? a : 0));
            if (len[k] >= 2048) assert_true(a > 0.05 * d); /* where attention matters */
            for (int s = 0; s < 2; s++) /* both held to the plan's nanosecond (plan_round) */
                assert_near(pi.mb[k].w_ms[s], want * pi.mb[k].bwd_ms[s], 1e-6);
        }
        plan_iter_release(&pi);
        mb_list_release(&l);
        cost_model_free(cm);
    }
}

static void test_sim_memory_is_the_machine_memory(void **state)
{
    (void)state;
    unsigned seed = 11;
    const char *names[] = {"gpipe", "1f1b", "interleaved", "adaptive", "zb1"};
    for (int rep = 0; rep < 40; rep++) {
        int S = 1 << (rep % 4), C = strcmp(names[rep % 5], "interleaved") == 0 ? 2 : 1;
        world w;
        world_init(&w, S, C, 3, 1e15);
        plan_iter it;
        int m = 1 + rand_r(&seed) % 12;
        equal_iter(&w, &it, m, 1, 2, 0.7);
        for (int k = 0; k < m; k++)
            for (int s = 0; s < S; s++) {
                it.mb[k].fwd_ms[s] = 0.2 + (rand_r(&seed) % 100) / 50.0;
                it.mb[k].bwd_ms[s] = 2 * it.mb[k].fwd_ms[s];
                it.mb[k].w_ms[s] = 0.4 * it.mb[k].bwd_ms[s];
                it.mb[k].stored_mb[s] = 1 + rand_r(&seed) % 50;
                it.mb[k].peak_mb[s] = it.mb[k].stored_mb[s] * (1 + (rand_r(&seed) % 10) / 4.0);
            }
        schedule_ctx ctx = {&w.sm};
        dp_err err = {0};
        if (schedule_find(names[rep % 5])->build(&ctx, &it, &err) != DP_OK) fail_msg("%s", err.msg);
        if (plan_validate(&it, C, names[rep % 5], &err) != DP_OK) fail_msg("%s", err.msg);
        sim s;
        sim_init(&s);
        sim_iter_result res;
        if (sim_iteration(&s, &w.cfg, &it, 0, NULL, &res, &err) != DP_OK) fail_msg("%s", err.msg);
        plan_machine pm;
        pm_init(&pm, &it, C);
        for (int r = 0; r < S; r++) {
            /* the peak and what it holds: the simulator's timed sweep against the machine's walk */
            double left, held, transient;
            assert_near(res.peak_mb[r], pm_rank_peak_parts(&pm, r, &left, &held, &transient), 1e-6);
            assert_near(left, 0, 1e-9);
            assert_near(res.stored_at_peak_mb[r], held, 1e-6);
            assert_near(res.transient_at_peak_mb[r], transient, 1e-6);
        }
        /* the fit: every stage's budget at its peak fits, and 1% less on one stage does not,
         * for the whole plan and for its one replica alike */
        double budget[STAGE_MAX], worst;
        for (int r = 0; r < S; r++) budget[r] = pm_rank_peak(&pm, r, NULL);
        assert_true(pm_fits(&pm, budget, &worst, NULL, 0) && pm_replica_fits(&pm, 0, budget));
        budget[rep % S] *= 0.99;
        assert_false(pm_fits(&pm, budget, &worst, NULL, 0) || pm_replica_fits(&pm, 0, budget));
        pm_release(&pm);
        sim_release(&s);
        plan_iter_release(&it);
        cost_model_free(w.cm);
    }
}

/* pm_replica_fits looks at its replica's ranks and no other: 1F1B on 2 replicas of 4 stages, the
 * budget at each stage's peak over both; one micro-batch of replica 1 grown breaks replica 1 and
 * the whole plan, not replica 0. */
static void test_replica_fit(void **state)
{
    (void)state;
    world w;
    world_init(&w, 4, 1, 3, 1e15);
    w.sm.dp = 2;
    plan_iter it;
    assert_int_equal(plan_iter_alloc(&it, 0, 4, 2, 8, 8), DP_OK);
    for (int k = 0; k < 8; k++) {
        plan_mb *x = &it.mb[k];
        x->first = k, x->n_samples = 1, x->mbs = 1, x->enc_len = 16, x->enc_tokens = 16;
        x->replica = k % 2;
        it.ids[k] = k;
        for (int s = 0; s < 4; s++)
            x->fwd_ms[s] = 1, x->bwd_ms[s] = 2, x->stored_mb[s] = 1 + k, x->peak_mb[s] = 2 + k;
    }
    schedule_ctx ctx = {&w.sm};
    dp_err err = {0};
    if (schedule_find("1f1b")->build(&ctx, &it, &err) != DP_OK) fail_msg("%s", err.msg);
    if (plan_validate(&it, 1, "1f1b", &err) != DP_OK) fail_msg("%s", err.msg);
    plan_machine pm;
    pm_init(&pm, &it, 1);
    double budget[STAGE_MAX] = {0}, worst;
    for (int r = 0; r < 8; r++) budget[r % 4] = fmax(budget[r % 4], pm_rank_peak(&pm, r, NULL));
    assert_true(pm_fits(&pm, budget, &worst, NULL, 0));
    assert_true(pm_replica_fits(&pm, 0, budget) && pm_replica_fits(&pm, 1, budget));
    for (int s = 0; s < 4; s++) it.mb[7].stored_mb[s] += 100, it.mb[7].peak_mb[s] += 100;
    assert_false(pm_replica_fits(&pm, 1, budget) || pm_fits(&pm, budget, &worst, NULL, 0));
    assert_true(pm_replica_fits(&pm, 0, budget));
    pm_release(&pm);
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

/* ---- the adaptive order against an independent evaluator ------------------------------------ */

/* Times each device's op list (F or B of micro-batch k, in order) with free links: an op starts
 * when its device is free and its input is there (F: the previous stage's F; B: the next stage's
 * B, or the last stage's own F). Ops are placed by repeated sweeps until all are. */
static int64_t evaluate(const plan_iter *it, int S)
{
    int m = it->n_mb;
    int64_t *fend = malloc(sizeof(int64_t) * (size_t)(S * m)), *bend = malloc(sizeof(int64_t) * (size_t)(S * m));
    int *pos = calloc((size_t)S, sizeof *pos);
    int64_t *free_at = calloc((size_t)S, sizeof *free_at), end = 0;
    for (int i = 0; i < S * m; i++) fend[i] = bend[i] = -1;
    for (int moved = 1; moved;) {
        moved = 0;
        for (int s = 0; s < S; s++) {
            const plan_rank *R = &it->ranks[s];
            while (pos[s] < R->n) {
                const plan_instr *x = &R->ins[pos[s]];
                if (x->op != OP_F && x->op != OP_B) {
                    pos[s]++;
                    continue;
                }
                int k = x->mb;
                int64_t ready = x->op == OP_F ? (s == 0 ? 0 : fend[(s - 1) * m + k])
                                              : (s == S - 1 ? fend[s * m + k] : bend[(s + 1) * m + k]);
                if (ready < 0) break;
                int64_t start = ready > free_at[s] ? ready : free_at[s];
                double ms = x->op == OP_F ? it->mb[k].fwd_ms[s] : it->mb[k].bwd_ms[s];
                free_at[s] = start + llround(ms * 1e6);
                (x->op == OP_F ? fend : bend)[s * m + k] = free_at[s];
                if (free_at[s] > end) end = free_at[s];
                pos[s]++;
                moved = 1;
            }
        }
    }
    for (int s = 0; s < S; s++) assert_int_equal(pos[s], it->ranks[s].n);
    free(fend), free(bend), free(pos), free(free_at);
    return end;
}

static void test_adaptive_matches_independent_evaluator(void **state)
{
    (void)state;
    unsigned seed = 5;
    int cases = 0;
    for (int S = 2; S <= 8; S *= 2)
        for (int rep = 0; rep < 12; rep++) {
            world w;
            world_init(&w, S, 1, 0, 1e15);
            plan_iter it;
            int m = 2 + rand_r(&seed) % 20;
            equal_iter(&w, &it, m, 1, 2, 0);
            for (int k = 0; k < m; k++) {
                double size = 0.3 + (rand_r(&seed) % 1000) / 250.0;
                for (int s = 0; s < S; s++) {
                    it.mb[k].fwd_ms[s] = size * (1 + 0.1 * s);
                    it.mb[k].bwd_ms[s] = 2 * size;
                    it.mb[k].stored_mb[s] = size;
                    it.mb[k].peak_mb[s] = 1.5 * size;
                }
            }
            if (rep % 2) w.sm.budget_mb[0] = 6; /* memory that makes the admission bite */
            schedule_ctx ctx = {&w.sm};
            dp_err err = {0};
            if (schedule_find("adaptive")->build(&ctx, &it, &err) != DP_OK) fail_msg("%s", err.msg);
            if (plan_validate(&it, 1, "adaptive", &err) != DP_OK) fail_msg("%s", err.msg);
            sim s;
            sim_init(&s);
            sim_iter_result res;
            if (sim_iteration(&s, &w.cfg, &it, 0, NULL, &res, &err) != DP_OK) fail_msg("%s", err.msg);
            assert_int_equal(res.makespan_ns, evaluate(&it, S));
            sim_release(&s);
            plan_iter_release(&it);
            cost_model_free(w.cm);
            cases++;
        }
    assert_int_equal(cases, 36);
}

/* ---- link streams ------------------------------------------------------------------------------ */

static int64_t b0_start_on_stage1;
static void on_op(void *ctx, const sim_op *o)
{
    (void)ctx;
    if (o->stage == 1 && o->op == OP_B && o->mb == 0) b0_start_on_stage1 = o->start_ns;
}

/* Stage 1 receives an activation from stage 0 and a gradient from stage 2. Stage 0's second
 * forward is slow (50 ms), so its activation transfer cannot start before 51 ms; the gradient of
 * micro-batch 0 is ready at 4.2 ms. On separate links it arrives at 4.3 ms and stage 1 runs B0
 * then (stage 1 does B0 before F1, as an adaptive order may); one receive stream per rank would
 * hold it behind the activation until 51.2 ms. */
static void test_links_do_not_wait_for_each_other(void **state)
{
    (void)state;
    world w;
    world_init(&w, 3, 1, 100, 1e15);
    const char *lists[3] = {
        "F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1",
        "RECV_ACT:0 F:0 SEND_ACT:0 RECV_ACT:1 RECV_GRAD:0 B:0 SEND_GRAD:0 FREE:0 F:1 SEND_ACT:1 "
        "RECV_GRAD:1 B:1 SEND_GRAD:1 FREE:1",
        "RECV_ACT:0 F:0 B:0 SEND_GRAD:0 FREE:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1 FREE:1"};
    plan_iter it;
    craft(&w, &it, 2, lists);
    it.mb[1].fwd_ms[0] = 50;
    dp_err err = {0};
    if (plan_validate(&it, 1, "links", &err) != DP_OK) fail_msg("%s", err.msg);
    sim s;
    sim_init(&s);
    sim_sink sink = {on_op, NULL, NULL};
    sim_iter_result res;
    if (sim_iteration(&s, &w.cfg, &it, 0, &sink, &res, &err) != DP_OK) fail_msg("%s", err.msg);
    assert_int_equal(b0_start_on_stage1, 4300000);
    /* events: one per transfer, every one handled: 2 micro-batches x 2 links x 2 kinds */
    assert_int_equal(res.events, 8);
    sim_release(&s);
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

/* Placement: with tensor parallelism a rank spans tp GPUs, so stage boundaries cross nodes where
 * the GPU index (rank * tp) does, not where the rank index would. */
static void test_placement_counts_tensor_parallelism(void **state)
{
    (void)state;
    world w;
    world_init(&w, 2, 1, 0, 1e15);
    w.hw.gpus_per_node = 8;
    w.hw.intra_latency_us = 1, w.hw.inter_latency_us = 1000;
    const char *good[2] = {GOOD0, GOOD1};
    plan_iter it;
    craft(&w, &it, 2, good);
    sim s;
    sim_init(&s);
    sim_iter_result one, eight;
    dp_err err = {0};
    w.cfg.tp = 1; /* ranks 0 and 1 on GPUs 0 and 1: one node */
    if (sim_iteration(&s, &w.cfg, &it, 0, NULL, &one, &err) != DP_OK) fail_msg("%s", err.msg);
    w.cfg.tp = 8; /* GPUs 0-7 and 8-15: two nodes, every transfer inter-node */
    if (sim_iteration(&s, &w.cfg, &it, 0, NULL, &eight, &err) != DP_OK) fail_msg("%s", err.msg);
    /* every transfer on the critical path now pays the inter-node latency (999 us more each) */
    int64_t more = eight.makespan_ns - one.makespan_ns;
    assert_true(more >= 2 * 999000);
    assert_int_equal(more % 999000, 0);
    sim_release(&s);
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

/* ---- T5 order ---------------------------------------------------------------------------------- */

static void test_t5_order_is_the_short_path(void **state)
{
    (void)state;
    batch_rules r;
    batch_rules_default(&r, ARCH_T5);
    r.pad_multiple = 8;
    /* inputs 17..24 pad to 24; sorted by raw input the targets would read 90 5 80 7. Padded
     * points: (24,16) x2 [ids 1, 3], (24,80), (24,96), (32,56), (32,16). The shortest open path
     * from the smallest point: (24,16) (32,16) (32,56) (24,80) (24,96), L1 length 96 (visiting
     * the 24 group first and then 32 would be 168) */
    sample_len s[6] = {{0, 17, 90}, {1, 18, 5}, {2, 19, 80}, {3, 20, 7}, {4, 30, 50}, {5, 31, 3}};
    assert_int_equal(mb_order(&r, s, 6), DP_OK);
    int want[6] = {1, 3, 5, 4, 2, 0};
    for (int i = 0; i < 6; i++) assert_int_equal(s[i].id, want[i]);
}

/* Replicas in lockstep (plan.h plan_iter_check_lockstep, the planner's and dprun's one rule):
 * under ZeRO-2/3 every replica of a stage runs the same passes in the same order, micro-batch ids
 * aside; the transfers do not count. Each replica's pass list written out here. */
static void lockstep_case_as(const char *const *passes, int dp, int zero, int span, int want_ok,
                             const char *who, const char *why)
{
    plan_iter it;
    plan_iter_init(&it);
    assert_int_equal(plan_iter_alloc(&it, 7, 1, dp, 8, 8), DP_OK);
    for (int r = 0; r < dp; r++)
        for (const char *at = passes[r]; *at; at++) {
            plan_op op = *at == 'F' ? OP_F : *at == 'B' ? OP_B : *at == 'W' ? OP_W : OP_FREE;
            int chunk = at[1] == '1' ? 1 : 0;
            assert_int_equal(plan_rank_push(&it.ranks[r], op, r, chunk, -1, 0), DP_OK);
            if (at[1] == '1' || at[1] == '0') at++;
        }
    dp_err err = {0};
    dp_status st = plan_iter_check_lockstep(&it, zero, span, "p.json", &err);
    if (want_ok) {
        assert_int_equal(st, DP_OK);
    } else {
        assert_int_equal(st, DP_ERR_UNSUPPORTED);
        assert_msg_has(err.msg, who);
        assert_msg_has(err.msg, "iteration 7 stage 0");
        assert_msg_has(err.msg, why);
    }
    plan_iter_release(&it);
}

static void lockstep_case(const char *const *passes, int dp, int want_ok, const char *why)
{
    lockstep_case_as(passes, dp, 3, 0, want_ok, "p.json: ZeRO-3 over", why);
}

static void test_replicas_in_lockstep(void **state)
{
    (void)state;
    assert_true(mb_replicas_lockstep(2, 2, 0) && mb_replicas_lockstep(3, 8, 0));
    assert_true(mb_replicas_lockstep(0, 2, 1) && mb_replicas_lockstep(1, 8, 1));
    assert_false(mb_replicas_lockstep(1, 8, 0) || mb_replicas_lockstep(3, 1, 1));
    const unsigned F = 1u << OP_F, B = 1u << OP_B, W = 1u << OP_W;
    assert_int_equal(mb_replicas_meet(3, 2, 0), F | B); /* the gathers; a W needs no weights */
    assert_int_equal(mb_replicas_meet(2, 2, 0), 0);     /* reduce-scatters behind the compute */
    assert_int_equal(mb_replicas_meet(1, 2, 1), F | B); /* the experts' exchange */
    assert_int_equal(mb_replicas_meet(3, 1, 1), 0);
    assert_int_equal(W & mb_replicas_meet(3, 8, 1), 0);
    const char *same[] = {"FBFB", "FXBFXB"}; /* X: a FREE, which does not count */
    lockstep_case(same, 2, 1, NULL);
    const char *fewer[] = {"FBFB", "FB"};
    lockstep_case(fewer, 2, 0, "replica 0 runs 4 forwards and backwards, replica 1 2, a different count");
    const char *more[] = {"FB", "FBFB"};
    lockstep_case(more, 2, 0, "a different count");
    const char *order[] = {"FFBB", "FBFB"};
    lockstep_case(order, 2, 0, "in another order");
    const char *chunks[] = {"F0F1B1B0", "F1F0B1B0"};
    lockstep_case(chunks, 2, 0, "in another order");
    const char *third[] = {"FBW", "FBW", "FB"};
    lockstep_case(third, 3, 0, "replica 2 2, a different count");
    /* experts exchanging tokens across replicas meet too; under ZeRO-1 without them nothing does */
    lockstep_case_as(fewer, 2, 1, 1, 0, "2 replicas whose experts exchange tokens across them",
                     "a different count");
    lockstep_case_as(fewer, 2, 1, 0, 1, NULL, NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_instruction_rule),
        cmocka_unit_test(test_replicas_in_lockstep),
        cmocka_unit_test(test_each_data_rule),
        cmocka_unit_test(test_self_send),
        cmocka_unit_test(test_plan_level_rules),
        cmocka_unit_test(test_recompute_rule),
        cmocka_unit_test(test_w_share_of_the_backward),
        cmocka_unit_test(test_sim_memory_is_the_machine_memory),
        cmocka_unit_test(test_replica_fit),
        cmocka_unit_test(test_adaptive_matches_independent_evaluator),
        cmocka_unit_test(test_links_do_not_wait_for_each_other),
        cmocka_unit_test(test_placement_counts_tensor_parallelism),
        cmocka_unit_test(test_t5_order_is_the_short_path),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
