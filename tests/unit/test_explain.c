/*
 * test_explain.c — the assumptions behind an answer (planner/explain.h, models/assumptions.h):
 * a what-if reaches the run by the same road as the constant it scales (checked against the same
 * run built from a fit file holding the scaled parameter), moves go the way physics says, and a
 * run lists only the constants it rests on (a profile's measured layers have no analytic
 * parameters; one node has no network).
 */
#include "testutil.h"

#include "../../models/assumptions.h"
#include "../../planner/explain.h"
#include "../../planner/setup.h"
#include "../../planner/study.h"
#include "../../planner/tune_run.h"

#define TRACE DPSIM_SRCDIR "/traces/flanv2-100k.csv"

static void small_run(plan_request *p, const char *model, const char *hw)
{
    plan_request_default(p);
    p->cost.model = model;
    p->cost.hw = hw;
    p->cost.quiet = 1;
    p->trace = TRACE;
    p->pp = 2, p->dp = 2;
    p->max_seqlen = 2048;
    p->global_tokens = 65536;
    p->iterations = 1;
}

static const explain_row *row_of(const explain_result *x, assumption_id id)
{
    for (int i = 0; i < x->n; i++)
        if (x->row[i].id == id) return &x->row[i];
    return NULL;
}

static double throughput(const plan_request *p)
{
    plan_env env;
    dp_err err = {0};
    study_result r;
    memset(&r, 0, sizeof r);
    if (planner_setup(p, &env, &err) != DP_OK) fail_msg("%s", err.msg);
    study_opts o;
    planner_study_opts(p, &env, p->batching, p->schedule, &o);
    if (study_run(&o, &env.trace, &r, &err) != DP_OK) fail_msg("%s", err.msg);
    double tps = r.throughput_tokens_per_s;
    study_result_release(&r);
    plan_env_release(&env);
    return tps;
}

/* Llama-3.1-8B on one H100 node, analytic: the GEMM efficiency 10% higher is the same run as one
 * priced by a fit file holding 1.1 x the H100's GEMM efficiency (cost_fit_load: another road to
 * the same parameter); faster GEMMs are faster, a larger backward ratio slower; no network row
 * on one node, no FP8 row under bf16, no unfused-attention row under a fused kernel. */
static void test_explain_analytic_run(void **state)
{
    (void)state;
    plan_request p;
    small_run(&p, "llama3.1-8b", "h100");
    explain_result *x = calloc(1, sizeof *x);
    dp_err err = {0};
    assert_int_equal(explain_run(&p, 0.1, x, NULL, NULL, &err), DP_OK);
    assert_true(x->base_fits && x->base_tps > 0);
    assert_rel(x->base_tps, throughput(&p), 1e-12);
    const explain_row *g = row_of(x, ASSUME_GEMM_EFF), *b = row_of(x, ASSUME_BWD_RATIO);
    assert_non_null(g);
    assert_non_null(b);
    assert_true(g->change[0] < 0 && g->change[1] > 0);
    assert_true(b->change[0] > 0 && b->change[1] < 0);
    assert_null(row_of(x, ASSUME_NET_EFF));
    assert_null(row_of(x, ASSUME_FP8_GEMM));
    assert_null(row_of(x, ASSUME_ATTN_EFF));
    assert_non_null(row_of(x, ASSUME_ATTN_KERNEL));
    for (int i = 1; i < x->n; i++) /* the largest move first */
        assert_true(fmax(fabs(x->row[i - 1].change[0]), fabs(x->row[i - 1].change[1])) >=
                    fmax(fabs(x->row[i].change[0]), fabs(x->row[i].change[1])));

    /* the same GEMM efficiency through a fit file */
    analytic_params ap;
    analytic_params_for_gpu(gpu_preset("h100"), &ap);
    char path[] = "/tmp/dpsim-explain-fit-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "{\"kind\": \"analytic\", \"hw\": \"h100\", \"tp\": 1, \"params\": {\"gemm_eff\": "
            "%.17g, \"attn_eff\": %.17g, \"mem_eff\": %.17g, \"fwd_floor_ms\": %.17g, "
            "\"bwd_floor_ms\": %.17g, \"bwd_ratio\": %.17g}}\n", ap.gemm_eff * 1.1, ap.attn_eff,
            ap.mem_eff, ap.fwd_floor_ms, ap.bwd_floor_ms, ap.bwd_ratio);
    fclose(f);
    plan_request q = p;
    q.cost.fit = path;
    assert_rel(throughput(&q), g->tps[1], 1e-12);
    /* under --fit the parameters are the user's own measurements: not listed */
    explain_result *y = calloc(1, sizeof *y);
    assert_int_equal(explain_run(&q, 0.1, y, NULL, NULL, &err), DP_OK);
    assert_null(row_of(y, ASSUME_GEMM_EFF));
    assert_non_null(row_of(y, ASSUME_NVLINK_EFF));
    unlink(path);
    free(x), free(y);
}

/* GPT-6.7B on its measured A100 profile: the layers are measured, so no analytic parameter or
 * kernel is listed; the links and memory are. A share outside (0, 1) is refused. */
static void test_explain_profile_run(void **state)
{
    (void)state;
    plan_request p;
    small_run(&p, "gpt-6.7b-16l", "p4d");
    explain_result *x = calloc(1, sizeof *x);
    dp_err err = {0};
    assert_int_equal(explain_run(&p, 0.1, x, NULL, NULL, &err), DP_OK);
    for (int id = ASSUME_GEMM_EFF; id <= ASSUME_BWD_RATIO; id++)
        assert_null(row_of(x, (assumption_id)id));
    assert_non_null(row_of(x, ASSUME_USABLE_MEM));
    assert_int_equal(explain_run(&p, 0, x, NULL, NULL, &err), DP_ERR_INVALID);
    assert_non_null(strstr(err.msg, "--share"));
    free(x);
}

/* A what-if scales what it names and nothing else; shares stay at most 1. */
static void test_what_if_scales_one_constant(void **state)
{
    (void)state;
    cluster_spec c, d;
    assert_int_equal(cluster_resolve("dgx-h100", &c, NULL), DP_OK);
    for (int id = 0; id < ASSUME_COUNT; id++) {
        cost_what_if w;
        cost_what_if_none(&w);
        assert_true(cost_what_if_is_none(&w));
        d = c;
        cost_what_if_cluster(&w, &d);
        assert_memory_equal(&c, &d, sizeof c); /* none: untouched */
        w.scale[id] = 1.1;
        assert_false(cost_what_if_is_none(&w));
        d = c;
        cost_what_if_cluster(&w, &d);
        for (int k = 0; k < COLL_COUNT; k++)
            assert_true(d.coll_eff[SCOPE_INTER][k] <= 1 && d.coll_eff[SCOPE_INTRA][k] <= 1);
        assert_true(d.mem_limit_mb <= d.gpu.mem_mb);
        if (id == ASSUME_LATENCY) assert_rel(d.inter_latency_us, 1.1 * c.inter_latency_us, 1e-12);
        else assert_rel(d.inter_latency_us, c.inter_latency_us, 0);
        if (id == ASSUME_GEMM_SHAPE) assert_rel(d.gpu.gemm_k0, 1.1 * c.gpu.gemm_k0, 1e-12);
        else assert_rel(d.gpu.gemm_k0, c.gpu.gemm_k0, 0);
        analytic_params a, b;
        analytic_params_default(&a);
        b = a;
        cost_what_if_params(&w, &b);
        if (id == ASSUME_BWD_RATIO) assert_rel(b.bwd_ratio, 1.1 * a.bwd_ratio, 1e-12);
        else assert_rel(b.bwd_ratio, a.bwd_ratio, 0);
        assert_true(b.mem_eff <= 1 && b.gemm_eff <= 1);
    }
}

typedef struct notes {
    int n, left_out, assumed;
} notes;

static void collect(void *ctx, dp_note_kind kind, const char *text)
{
    notes *c = ctx;
    assert_int_equal(kind, DP_NOTE_LINE);
    c->n++;
    c->left_out += strstr(text, "tp 8 left out of the search") != NULL;
    c->assumed += strstr(text, "the analytic model's efficiencies") != NULL;
}

/* Library code reports through the notes' sink (common/dp.h), never on stderr: the set-up's note
 * on an analytic model used off its fitted GPU and tune's note on a tp the heads refuse reach the
 * sink, and stderr (a file here) stays empty. First in the list: the set-up's note is told once a
 * process. */
static void test_library_notes_through_the_sink(void **state)
{
    (void)state;
    plan_request p;
    small_run(&p, "gpt2-124m", "h100"); /* 12 heads: tune leaves tp 8 out */
    p.cost.quiet = 0;
    p.max_seqlen = 1024;
    notes seen = {0};
    dp_set_note_sink(collect, &seen);
    fflush(stderr);
    FILE *err_file = tmpfile();
    assert_non_null(err_file);
    int saved = dup(STDERR_FILENO);
    dup2(fileno(err_file), STDERR_FILENO);
    dp_err err = {0};
    plan_env env;
    dp_status st = planner_setup(&p, &env, &err);
    tune_space sp;
    int gpus = 8;
    static const char *const one[] = {"packing"};
    if (st == DP_OK) st = planner_tune_space(&p, &env, &gpus, one, 1, one, 0, NULL, 0, NULL, 0, NULL, 0, &sp, &err);
    plan_env_release(&env);
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    dp_set_note_sink(NULL, NULL);
    if (st != DP_OK) fail_msg("%s", err.msg);
    assert_int_equal(sp.n_tps, 3); /* 1, 2, 4 */
    assert_int_equal(seen.left_out, 1);
    assert_int_equal(seen.assumed, 1);
    fseek(err_file, 0, SEEK_END);
    assert_int_equal(ftell(err_file), 0);
    fclose(err_file);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_library_notes_through_the_sink),
        cmocka_unit_test(test_explain_analytic_run),
        cmocka_unit_test(test_explain_profile_run),
        cmocka_unit_test(test_what_if_scales_one_constant),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
