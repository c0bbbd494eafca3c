/*
 * tier: full (30 s of the fake GPU's plans; make check runs it, make test not)
 * test_exec_gpu.c — the single-GPU executor's host logic (runtime/exec_gpu.c) on the host fake of
 * the CUDA layer (fake_cuda.c: synchronous streams, events as ticks). What it checks: every
 * instruction of every stage runs once, each receive after the send that feeds it, F before B
 * and W per (micro-batch, chunk); a plan that deadlocks is reported, and a transfer whose bytes
 * disagree with the shapes is refused. In bf16 the fake checks every buffer the executor hands
 * it against layout.h's sizes for that type (it aborts otherwise) and rounds where the GPU's
 * bf16 layer stores: the gradients come out near fp64's, not equal. (The layer's numerics on a
 * GPU are dprun check-gpu's.)
 */
#include "testutil.h"

#include "../../common/json_util.h"
#include "../../runtime/exec.h"

#include <math.h>

#define GOLDEN "tests/cli/golden/"

static void load(const char *path, plan *pl, model_spec *m)
{
    char *text = NULL;
    dp_err err = {0};
    if (json_slurp(path, &text, &err) != DP_OK) fail_msg("%s", err.msg);
    if (plan_parse(text, path, pl, &err) != DP_OK) fail_msg("%s", err.msg);
    free(text);
    if (model_resolve(pl->h.model, m, &err) != DP_OK) fail_msg("%s", err.msg);
}

/* Index of the record of (stage, op, mb, chunk) in iteration `iteration`, or -1. */
static long find(const rt_record *r, size_t n, int iteration, int stage, int op, int mb, int chunk)
{
    for (size_t i = 0; i < n; i++)
        if (r[i].iteration == iteration && r[i].stage == stage && r[i].op == op && r[i].mb == mb &&
            r[i].chunk == chunk)
            return (long)i;
    return -1;
}

/* Runs the plan at dt, checks its records, and returns the gradient figure. */
static double run_and_check(const char *path, rt_dtype dt)
{
    plan pl;
    model_spec m;
    load(path, &pl, &m);
    rt_opts o = {&pl, &m, 60, 1, 0, -1, 0, 0, dt, 0, 1};
    rt_result res;
    dp_err err = {0};
    if (rt_execute_gpu(&o, &res, &err) != DP_OK) fail_msg("%s: %s", path, err.msg);
    rt_record *rec = res.rec;
    size_t n = res.n_rec;
    assert_true(res.grad_sq > 0 && res.grad_sq < 1e30); /* the loss reached every parameter */
    size_t want = 0;
    for (int i = 0; i < pl.n_it; i++)
        for (int r = 0; r < pl.it[i].pp; r++) want += (size_t)pl.it[i].ranks[r].n;
    assert_int_equal(n, want);
    for (int i = 0; i < pl.n_it; i++) {
        const plan_iter *it = &pl.it[i];
        for (int s = 0; s < it->pp; s++)
            for (int k = 0; k < it->ranks[s].n; k++) {
                const plan_instr *x = &it->ranks[s].ins[k];
                long me = find(rec, n, it->id, s, x->op, x->mb, x->chunk);
                assert_true(me >= 0);
                assert_true(rec[me].end_us >= rec[me].start_us);
                if (x->op == OP_RECV_ACT || x->op == OP_RECV_GRAD) {
                    /* the sender's chunk: activations come from virtual stage v-1, gradients v+1 */
                    int v = x->chunk * it->pp + s + (x->op == OP_RECV_ACT ? -1 : 1);
                    long snd = find(rec, n, it->id, x->peer,
                                    x->op == OP_RECV_ACT ? OP_SEND_ACT : OP_SEND_GRAD, x->mb,
                                    v / it->pp);
                    assert_true(snd >= 0);
                    assert_true(rec[me].start_us >= rec[snd].end_us);
                }
                if (x->op == OP_B || x->op == OP_W) {
                    long f = find(rec, n, it->id, s, OP_F, x->mb, x->chunk);
                    assert_true(f >= 0 && rec[me].start_us >= rec[f].end_us);
                }
            }
    }
    free(rec);
    plan_release(&pl);
    return res.grad_sq;
}

static void test_schedules_run(void **state)
{
    (void)state;
    static const char *plans[] = {GOLDEN "plan_4ranks.json",          /* 1F1B, 4 stages */
                                  GOLDEN "plan_zb1_4stages.json",     /* B and W split */
                                  GOLDEN "plan_interleaved_2x2.json"}; /* 2 chunks on 2 stages */
    for (int i = 0; i < 3; i++) {
        double f64 = run_and_check(plans[i], RT_FP64), b16 = run_and_check(plans[i], RT_BF16);
        double d = fabs(b16 - f64) / f64;
        assert_true(d > 1e-9 && d < 2e-2); /* rounded, and only by bf16's rounding */
    }
}

extern long fake_cuda_layer_fwd_calls; /* fake_cuda.c */
extern int fake_cuda_fwd_len[8192];

/* The prepare pass runs every iteration once more, unrecorded, right before its measured run
 * (so that the plan caches need hold one iteration's shapes), and changes nothing measured. */
static void test_prepare_runs_every_iteration_unrecorded(void **state)
{
    (void)state;
    plan pl;
    model_spec m;
    load(GOLDEN "plan_zb1_4stages.json", &pl, &m);
    assert_true(pl.n_it >= 2);
    rt_result r[3];
    long calls[3];
    for (int k = 0; k < 3; k++) { /* iteration 0 alone; all (warm-up 1); all, prepared */
        rt_opts o = {&pl, &m, 60, k == 0 ? 0 : 1, k == 0 ? 1 : 0, -1, 0, 0, RT_FP64, k == 2, 1};
        dp_err err = {0};
        long before = fake_cuda_layer_fwd_calls;
        if (rt_execute_gpu(&o, &r[k], &err) != DP_OK) fail_msg("%s", err.msg);
        calls[k] = fake_cuda_layer_fwd_calls - before;
    }
    /* plain: iteration 0 twice (warm-up, measured) and the others once; prepared: every one twice */
    assert_true(calls[0] > 0);
    assert_int_equal(calls[2] - calls[1], calls[1] - 2 * calls[0]);
    assert_true(calls[2] > calls[1]);
    assert_int_equal(r[2].n_rec, r[1].n_rec);
    assert_true(r[2].grad_sq == r[1].grad_sq); /* gradients are each iteration's own */
    /* iteration 1 has a micro-batch of a length iteration 0 has not: without the prepare pass
     * each of the 4 stages meets it first in a measured run (the fake counts a new layer shape
     * as a plan built), with it none does */
    assert_int_equal(r[1].timed_gemm_plans, 4);
    assert_int_equal(r[2].timed_gemm_plans, 0);
    for (size_t i = 0; i < r[1].n_rec; i++) {
        assert_int_equal(r[2].rec[i].iteration, r[1].rec[i].iteration);
        assert_int_equal(r[2].rec[i].op, r[1].rec[i].op);
        assert_int_equal(r[2].rec[i].repeat, 0);
    }
    /* the order, by the micro-batch lengths of the layer forwards (the plan's iterations
     * differ): without warm-up or noise repeat, each iteration's calls come twice in a row */
    rt_opts o = {&pl, &m, 60, 0, 0, -1, 0, 0, RT_FP64, 1, 1};
    dp_err err = {0};
    rt_result rp;
    fake_cuda_layer_fwd_calls = 0;
    if (rt_execute_gpu(&o, &rp, &err) != DP_OK) fail_msg("%s", err.msg);
    long per = calls[0], total = fake_cuda_layer_fwd_calls; /* calls[0]: one iteration's */
    assert_int_equal(total, 2 * pl.n_it * per);
    assert_true(total <= 8192);
    for (int i = 0; i < pl.n_it; i++)
        assert_memory_equal(fake_cuda_fwd_len + 2 * i * per, fake_cuda_fwd_len + (2 * i + 1) * per,
                            (size_t)per * sizeof(int));
    assert_memory_not_equal(fake_cuda_fwd_len, fake_cuda_fwd_len + 2 * per, (size_t)per * sizeof(int));
    free(rp.rec);
    for (int k = 0; k < 3; k++) free(r[k].rec);
    plan_release(&pl);
}

static void test_deadlock_reported(void **state)
{
    (void)state;
    plan pl;
    model_spec m;
    load(GOLDEN "plan_4ranks.json", &pl, &m);
    /* stage 0 first waits for a gradient that needs its own forward: nothing can move */
    plan_rank *R = &pl.it[0].ranks[0];
    int g = -1;
    for (int k = 0; k < R->n && g < 0; k++)
        if (R->ins[k].op == OP_RECV_GRAD) g = k;
    assert_true(g > 0);
    plan_instr x = R->ins[g];
    memmove(&R->ins[1], &R->ins[0], (size_t)g * sizeof x);
    R->ins[0] = x;
    rt_opts o = {&pl, &m, 60, 0, 0, -1, 0, 0, RT_FP64, 0, 1};
    rt_result res;
    dp_err err = {0};
    assert_int_equal(rt_execute_gpu(&o, &res, &err), DP_ERR_DEADLOCK);
    assert_null(res.rec); /* nothing to free after a failure */
    assert_msg_has(err.msg, "deadlocks");
    plan_release(&pl);
}

static void test_wrong_bytes_refused(void **state)
{
    (void)state;
    plan pl;
    model_spec m;
    load(GOLDEN "plan_4ranks.json", &pl, &m);
    plan_rank *R = &pl.it[0].ranks[1];
    for (int k = 0; k < R->n; k++)
        if (R->ins[k].op == OP_SEND_ACT) {
            R->ins[k].bytes += 2;
            break;
        }
    rt_opts o = {&pl, &m, 60, 0, 0, -1, 0, 0, RT_FP64, 0, 1};
    rt_result res;
    dp_err err = {0};
    assert_int_equal(rt_execute_gpu(&o, &res, &err), DP_ERR_INVALID);
    assert_null(res.rec); /* nothing to free after a failure */
    assert_msg_has(err.msg, "bytes");
    plan_release(&pl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schedules_run),
        cmocka_unit_test(test_prepare_runs_every_iteration_unrecorded),
        cmocka_unit_test(test_deadlock_reported),
        cmocka_unit_test(test_wrong_bytes_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
