/*
 * test_exec_loop.c — dprun's one executor loop (runtime/exec_loop.h), through a recording medium
 * written here. The plans of every schedule on 1 to 8 stages (interleaved ones on 2 chunks), all
 * stages driven by one process (the cuda backend's single-GPU mode: a receive is ready only once
 * its send was issued): every instruction is issued once, in its rank's order, each receive after
 * the send that feeds it, and with the hooks this file's own table expects (the consumed receive
 * awaited where the virtual stage has a neighbour; a B computes the weight gradients unless its
 * rank runs W, and then reduces them). One stage per process (the cpu backend) issues that
 * stage's list alone, in order. A plan whose receives come before their sends is a deadlock,
 * named; a failing hook stops the loop with its status. rt_loop_runs runs warm-ups, prepares and
 * repeats in the order its header gives, counted here from that text.
 */
#include "simworld.h"

#include "../../runtime/exec_loop.h"
#include "../../scheduler/plan_machine.h"

enum { H_AWAIT, H_BEGIN, H_RECV, H_FORWARD, H_BACKWARD, H_BACKWARD_W, H_WEIGHTS, H_REDUCE, H_SEND,
       H_RELEASE, H_END };

#define MAX_NV 16
#define MAX_MB 16
#define MAX_LOG 8192

typedef struct rec_medium {
    const plan_iter *it;
    int pp, nv;
    int log[MAX_LOG][3]; /* stage, index, hook */
    int n_log;
    unsigned char sent[2][MAX_MB][MAX_NV]; /* by (kind, mb, receiving virtual stage) */
    int fail_at;                           /* the forward that fails (1-based); 0 none */
    int forwards;
    dp_err *err;
} rec_medium;

static void logged(rec_medium *m, const pm_step *s, int hook)
{
    assert_true(m->n_log < MAX_LOG);
    m->log[m->n_log][0] = s->stage, m->log[m->n_log][1] = s->index, m->log[m->n_log][2] = hook;
    m->n_log++;
}

/* The test's own reading of an instruction: its virtual stage, and for a transfer which slot of
 * which virtual stage receives it (activations go to v + 1, gradients to v - 1). */
static int v_of(const rec_medium *m, const pm_step *s)
{
    int c = s->x->chunk, up = m->it->placement == PLACEMENT_V && c % 2; /* a V: odd chunks climb */
    return c * m->pp + (up ? m->pp - 1 - s->stage : s->stage);
}

static int rec_ready(void *vm, const pm_step *s)
{
    rec_medium *m = vm;
    int v = v_of(m, s);
    if (s->op == OP_RECV_ACT) return m->sent[0][s->x->mb][v];
    if (s->op == OP_RECV_GRAD) return m->sent[1][s->x->mb][v];
    return 1;
}

#define HOOK(name, id)                                                                             \
    static int name(void *vm, const pm_step *s)                                                    \
    {                                                                                              \
        logged(vm, s, id);                                                                         \
        return 0;                                                                                  \
    }
HOOK(rec_begin, H_BEGIN)
HOOK(rec_end, H_END)
HOOK(rec_recv, H_RECV)
HOOK(rec_await, H_AWAIT)
HOOK(rec_weights, H_WEIGHTS)
HOOK(rec_reduce, H_REDUCE)
HOOK(rec_release, H_RELEASE)

static int rec_forward(void *vm, const pm_step *s)
{
    rec_medium *m = vm;
    logged(m, s, H_FORWARD);
    if (++m->forwards == m->fail_at) {
        dp_fail(m->err, DP_ERR_EXTERNAL, "forward %d failed", m->forwards);
        return -1;
    }
    return 0;
}

static int rec_backward(void *vm, const pm_step *s, int weights)
{
    logged(vm, s, weights ? H_BACKWARD_W : H_BACKWARD);
    return 0;
}

static int rec_send(void *vm, const pm_step *s)
{
    rec_medium *m = vm;
    logged(m, s, H_SEND);
    int v = v_of(m, s);
    if (s->op == OP_SEND_ACT) m->sent[0][s->x->mb][v + 1] = 1;
    else m->sent[1][s->x->mb][v - 1] = 1;
    return 0;
}

static const rt_medium REC = {rec_ready, rec_begin,    rec_end,     rec_recv,   rec_await, rec_forward,
                              rec_backward, rec_weights, rec_reduce, rec_send, rec_release};

/* What the loop must call for instruction x of a rank on virtual stage v (nv of them), the rank
 * running W or not: the table of exec_loop.h, written out. Returns the count. */
static int expected(const plan_instr *x, int v, int nv, int rank_runs_w, int *h)
{
    int n = 0;
    switch (x->op) {
    case OP_RECV_ACT:
    case OP_RECV_GRAD: h[n++] = H_BEGIN, h[n++] = H_RECV; break;
    case OP_SEND_ACT:
    case OP_SEND_GRAD: h[n++] = H_BEGIN, h[n++] = H_SEND; break;
    case OP_F:
        if (v > 0) h[n++] = H_AWAIT;
        h[n++] = H_BEGIN, h[n++] = H_FORWARD;
        break;
    case OP_B:
        if (v < nv - 1) h[n++] = H_AWAIT;
        h[n++] = H_BEGIN;
        if (rank_runs_w) h[n++] = H_BACKWARD;
        else h[n++] = H_BACKWARD_W, h[n++] = H_REDUCE;
        break;
    case OP_W: h[n++] = H_BEGIN, h[n++] = H_WEIGHTS, h[n++] = H_REDUCE; break;
    case OP_FREE: h[n++] = H_BEGIN, h[n++] = H_RELEASE; break;
    default: break;
    }
    h[n++] = H_END;
    return n;
}

/* The log of a run against the plan: every instruction of the driven stages once, in order, with
 * its expected hooks back to back, and where every stage is driven, each receive after its send. */
static void check_log(const rec_medium *m, const plan_iter *it, int C, const unsigned char *drives)
{
    int all = 1;
    for (int r = 0; r < m->pp; r++) all &= drives[r];
    int nv = m->pp * C, next[MAX_NV] = {0};
    long sent_at[2][MAX_MB][MAX_NV];
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < MAX_MB; b++)
            for (int v = 0; v < MAX_NV; v++) sent_at[k][b][v] = -1;
    int at = 0;
    while (at < m->n_log) {
        int r = m->log[at][0], i = m->log[at][1];
        assert_true(drives[r]);
        assert_int_equal(i, next[r]); /* the rank's order, each once */
        next[r]++;
        const plan_rank *R = &it->ranks[r];
        const plan_instr *x = &R->ins[i];
        int runs_w = 0;
        for (int q = 0; q < R->n; q++) runs_w |= R->ins[q].op == OP_W;
        int up = it->placement == PLACEMENT_V && x->chunk % 2;
        int v = x->chunk * m->pp + (up ? m->pp - 1 - r : r), h[8];
        int n = expected(x, v, nv, runs_w, h);
        for (int k = 0; k < n; k++, at++) {
            assert_true(at < m->n_log);
            assert_int_equal(m->log[at][0], r);
            assert_int_equal(m->log[at][1], i);
            assert_int_equal(m->log[at][2], h[k]);
        }
        if (x->op == OP_SEND_ACT) sent_at[0][x->mb][v + 1] = at;
        if (x->op == OP_SEND_GRAD) sent_at[1][x->mb][v - 1] = at;
        if (all && x->op == OP_RECV_ACT) assert_true(sent_at[0][x->mb][v] >= 0);
        if (all && x->op == OP_RECV_GRAD) assert_true(sent_at[1][x->mb][v] >= 0);
    }
    for (int r = 0; r < m->pp; r++) assert_int_equal(next[r], drives[r] ? it->ranks[r].n : 0);
}

static void test_every_schedule_one_process(void **state)
{
    (void)state;
    int n_sched = 0;
    const schedule *list = schedule_list(&n_sched);
    unsigned seed = 5;
    int runs = 0;
    for (int k = 0; k < n_sched; k++)
        for (int S = 1; S <= 8; S *= 2) {
            const schedule *sc = &list[k];
            if (sc->chunks_fixed && S == 1) continue; /* a V needs two stages to fold over */
            int C = sc->chunked && S > 1 ? schedule_chunks(sc, 2) : 1;
            world w;
            world_init_placed(&w, S, C, sc->placement, 3, 1e15);
            plan_iter it;
            int mbs = 1 + rand_r(&seed) % 8;
            equal_iter(&w, &it, mbs, 1, 2, 0.7);
            for (int b = 0; b < mbs; b++)
                for (int s = 0; s < S; s++) it.mb[b].fwd_ms[s] = 0.3 + (rand_r(&seed) % 100) / 40.0;
            schedule_ctx ctx = {&w.sm};
            dp_err err = {0};
            if (sc->build(&ctx, &it, &err) != DP_OK) fail_msg("%s: %s", sc->name, err.msg);
            if (plan_validate(&it, C, sc->name, &err) != DP_OK) fail_msg("%s", err.msg);
            plan_machine pm;
            pm_init(&pm, &it, C);
            unsigned char all[8] = {1, 1, 1, 1, 1, 1, 1, 1};
            rec_medium *m = calloc(1, sizeof *m);
            m->it = &it, m->pp = S, m->nv = S * C, m->err = &err;
            assert_int_equal(rt_loop_iteration(&pm, 0, all, &REC, m, &err), DP_OK);
            check_log(m, &it, C, all);
            /* one stage per process: that stage's list alone (its receives posted, not waited) */
            for (int r = 0; r < S; r++) {
                unsigned char one[8] = {0};
                one[r] = 1;
                memset(m, 0, sizeof *m);
                m->it = &it, m->pp = S, m->nv = S * C, m->err = &err;
                rt_medium posted = REC;
                posted.ready = NULL;
                assert_int_equal(rt_loop_iteration(&pm, 0, one, &posted, m, &err), DP_OK);
                check_log(m, &it, C, one);
            }
            free(m);
            pm_release(&pm);
            plan_iter_release(&it);
            cost_model_free(w.cm);
            runs++;
        }
    assert_true(runs >= 4 * 4);
}

/* A plan of 2 stages whose lists are given as "OP:mb" words. */
static void crafted(const world *w, plan_iter *it, const char *s0, const char *s1)
{
    equal_iter(w, it, 2, 1, 2, 0);
    const char *lists[2] = {s0, s1};
    for (int r = 0; r < 2; r++)
        for (const char *p = lists[r];;) {
            char op[16];
            int mb, n;
            if (sscanf(p, " %15[A-Z_]:%d%n", op, &mb, &n) != 2) break;
            p += n;
            plan_op o;
            assert_int_equal(plan_op_parse(op, &o), 0);
            int peer = plan_op_is_send(o) || plan_op_is_recv(o) ? 1 - r : -1;
            assert_int_equal(plan_rank_push(&it->ranks[r], o, mb, 0, peer, 16), DP_OK);
        }
}

static void test_deadlock_and_failure(void **state)
{
    (void)state;
    world w;
    world_init(&w, 2, 1, 3, 1e15);
    plan_iter it;
    /* stage 0 waits for a gradient before sending the activation stage 1 waits for */
    crafted(&w, &it, "RECV_GRAD:0 F:0 SEND_ACT:0 B:0 FREE:0 F:1 SEND_ACT:1 RECV_GRAD:1 B:1 FREE:1",
            "RECV_ACT:0 F:0 B:0 SEND_GRAD:0 FREE:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1 FREE:1");
    plan_machine pm;
    pm_init(&pm, &it, 1);
    unsigned char all[2] = {1, 1};
    rec_medium *m = calloc(1, sizeof *m);
    dp_err err = {0};
    m->it = &it, m->pp = 2, m->nv = 2, m->err = &err;
    assert_int_equal(rt_loop_iteration(&pm, 0, all, &REC, m, &err), DP_ERR_DEADLOCK);
    assert_msg_has(err.msg, "iteration 0 deadlocks");
    assert_msg_has(err.msg, "stage 0 instruction 0 (RECV_GRAD mb 0)");
    assert_msg_has(err.msg, "stage 1 instruction 0 (RECV_ACT mb 0)");
    assert_int_equal(m->n_log, 0);
    pm_release(&pm);
    plan_iter_release(&it);
    /* a hook that fails stops the loop with its status: nothing after the failing forward */
    crafted(&w, &it, "F:0 SEND_ACT:0 F:1 SEND_ACT:1 RECV_GRAD:0 B:0 FREE:0 RECV_GRAD:1 B:1 FREE:1",
            "RECV_ACT:0 F:0 B:0 SEND_GRAD:0 FREE:0 RECV_ACT:1 F:1 B:1 SEND_GRAD:1 FREE:1");
    pm_init(&pm, &it, 1);
    memset(m, 0, sizeof *m);
    m->it = &it, m->pp = 2, m->nv = 2, m->err = &err, m->fail_at = 2;
    assert_int_equal(rt_loop_iteration(&pm, 0, all, &REC, m, &err), DP_ERR_EXTERNAL);
    assert_msg_has(err.msg, "forward 2 failed");
    assert_int_equal(m->log[m->n_log - 1][2], H_FORWARD); /* its end never came, nor anything else */
    free(m);
    pm_release(&pm);
    plan_iter_release(&it);
    cost_model_free(w.cm);
}

/* rt_loop_runs: the runs it makes, as (iteration index, seed id, record) */
typedef struct runs_log {
    const plan *pl;
    int n, row[64][3];
} runs_log;

static dp_status log_run(void *vm, const plan_iter *it, int iteration, int record)
{
    runs_log *l = vm;
    assert_true(l->n < 64);
    l->row[l->n][0] = (int)(it - l->pl->it), l->row[l->n][1] = iteration, l->row[l->n][2] = record;
    l->n++;
    return DP_OK;
}

static void test_runs(void **state)
{
    (void)state;
    plan pl;
    memset(&pl, 0, sizeof pl);
    plan_iter its[3];
    memset(its, 0, sizeof its);
    its[0].id = 7, its[1].id = 8, its[2].id = 9;
    pl.it = its, pl.n_it = 3;
    for (int warm = 0; warm <= 2; warm++)
        for (int prep = 0; prep <= 1; prep++)
            for (int rep = 1; rep <= 3; rep++)
                for (int first = 0; first <= 1; first++)
                    for (int iters = 0; iters <= 2; iters++) {
                        rt_opts o = {0};
                        o.pl = &pl, o.warmup = warm, o.repeats = rep, o.repeat_first = first;
                        o.iterations = iters, o.stall_rank = -1;
                        runs_log l = {&pl, 0, {{0}}};
                        assert_int_equal(rt_loop_runs(&o, 0, prep, log_run, &l), DP_OK);
                        /* exec_loop.h, read independently: warm-ups of the first iteration
                         * seeded 0, then per iteration a prepare (not the first's after a
                         * warm-up) and its measured runs, at least 2 for the first with
                         * repeat_first */
                        int at = 0, n_it = iters ? iters : 3;
                        for (int k = 0; k < warm; k++, at++) {
                            assert_int_equal(l.row[at][0], 0);
                            assert_int_equal(l.row[at][1], 0);
                            assert_int_equal(l.row[at][2], RT_RECORD_OFF);
                        }
                        for (int i = 0; i < n_it; i++) {
                            if (prep && !(i == 0 && warm)) {
                                assert_int_equal(l.row[at][0], i);
                                assert_int_equal(l.row[at][1], its[i].id);
                                assert_int_equal(l.row[at][2], RT_RECORD_OFF);
                                at++;
                            }
                            int measured = i == 0 && first && rep < 2 ? 2 : rep;
                            for (int r = 0; r < measured; r++, at++) {
                                assert_int_equal(l.row[at][0], i);
                                assert_int_equal(l.row[at][1], its[i].id);
                                assert_int_equal(l.row[at][2], RT_RECORD_ON + r);
                            }
                        }
                        assert_int_equal(l.n, at);
                    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_schedule_one_process),
        cmocka_unit_test(test_deadlock_and_failure),
        cmocka_unit_test(test_runs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
