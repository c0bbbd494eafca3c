/*
 * test_rt_engine.c — runtime/engine.h, what both of dprun's executors do alike: the order of a
 * chunk's layer passes and ZeRO-3's gathers around them, and the gradients' reductions (partial
 * sums, ZeRO's reduce-scatters, the end of the iteration by ZeRO stage). The operations here only
 * record what they are asked; each pass is checked against the rules written out in the test:
 * every layer computes after its parameters were awaited, from the previous layer's output, into
 * the buffer the header names; at most two gathers are in flight (one a layer parity); a gather is
 * awaited once and nothing gathered goes unawaited; the reductions reach exactly the parameters
 * listed here by hand for a GPT layer under SP, a LLaMA layer, and a MoE layer with ep over tp.
 */
#include "testutil.h"

#include <string.h>

#include "../../runtime/engine.h"
#include "../../runtime/layer.h"
#include "../../runtime/layout.h"

/* ---- the passes --------------------------------------------------------------------------- */

enum { X, Y, A, B, DY, DX, SCRATCH, N_BUFS };

typedef struct pass_log {
    int zero3;
    int layers;
    int pending[2];   /* the layer gathered in each parity slot, -1: free */
    int ready;        /* the layer whose parameters were last awaited */
    int kept[16];     /* keep_input's buffer per layer, -1: none */
    int computed[16]; /* forward or backward_input done */
    int rerun[16], weight[16];
    const void *last_out;
    int copies;
    char buf[N_BUFS];
} pass_log;

static int buf_of(pass_log *g, const void *p)
{
    for (int i = 0; i < N_BUFS; i++)
        if (p == &g->buf[i]) return i;
    fail_msg("a buffer that is none of the pass's");
    return -1;
}

static void op_gather(void *v, int l)
{
    pass_log *g = v;
    assert_true(l >= 0 && l < g->layers);
    assert_int_equal(g->pending[l & 1], -1); /* its parity slot is free */
    g->pending[l & 1] = l;
}

static void op_gather_wait(void *v, int l)
{
    pass_log *g = v;
    assert_int_equal(g->pending[l & 1], l); /* gathered, not yet awaited */
    g->pending[l & 1] = -1;
    g->ready = l;
}

static void op_keep_input(void *v, int l, const void *x)
{
    pass_log *g = v;
    g->kept[l] = buf_of(g, x);
}

static void op_forward(void *v, int l, const void *x, void *y)
{
    pass_log *g = v;
    if (g->zero3) assert_int_equal(g->ready, l);
    assert_int_equal(g->kept[l], buf_of(g, x));
    assert_ptr_equal(x, g->last_out);
    assert_false(g->computed[l]);
    int want = l == g->layers - 1 ? Y : l % 2 == 0 ? A : B;
    assert_int_equal(buf_of(g, y), want);
    assert_true(x != y);
    g->computed[l] = 1;
    g->last_out = y;
}

static void op_rerun(void *v, int l)
{
    pass_log *g = v;
    if (g->zero3) assert_int_equal(g->ready, l);
    g->rerun[l] = 1;
}

static void op_backward_input(void *v, int l, const void *dy, void *dx)
{
    pass_log *g = v;
    if (g->zero3) assert_int_equal(g->ready, l);
    assert_true(g->rerun[l]);
    assert_ptr_equal(dy, g->last_out);
    for (int k = l + 1; k < g->layers; k++) assert_true(g->computed[k]); /* last layer first */
    int want = l % 2 == 0 ? DX : SCRATCH;
    assert_int_equal(buf_of(g, dx), want);
    assert_true(dx != dy);
    g->computed[l] = 1;
    g->last_out = dx;
}

static void op_backward_weight(void *v, int l)
{
    pass_log *g = v;
    assert_false(g->weight[l]);
    g->weight[l] = 1;
}

static void op_copy(void *v, void *dst, const void *src)
{
    pass_log *g = v;
    g->copies++;
    g->last_out = dst;
    (void)src;
}

static const rt_pass_ops OPS = {op_gather, op_gather_wait, op_keep_input, op_forward, op_rerun,
                                op_backward_input, op_backward_weight, op_copy};

/* ZeRO-3's gathers do nothing where it is off: the device's rule (exec.c, exec_gpu.c) */
static void op_gather_off(void *v, int l) { (void)v, (void)l; }

static void log_open(pass_log *g, int layers, int zero3, int in)
{
    memset(g, 0, sizeof *g);
    g->layers = layers, g->zero3 = zero3;
    g->pending[0] = g->pending[1] = -1;
    g->ready = -1;
    for (int l = 0; l < 16; l++) g->kept[l] = -1;
    g->last_out = &g->buf[in];
}

/* A chunk's forward, backward (with and without the weight gradients) and W pass over 0 to 7
 * layers, with ZeRO-3's gathers and without (the device's gathers then do nothing). */
static void test_passes(void **state)
{
    (void)state;
    for (int zero3 = 0; zero3 <= 1; zero3++)
        for (int layers = 0; layers <= 7; layers++) {
            rt_pass_ops o = OPS;
            if (!zero3) o.gather = op_gather_off, o.gather_wait = op_gather_off;
            pass_log g;
            log_open(&g, layers, zero3, X);
            rt_pass_forward(&o, &g, layers, &g.buf[X], &g.buf[Y], &g.buf[A], &g.buf[B]);
            for (int l = 0; l < layers; l++) assert_true(g.computed[l]);
            assert_int_equal(g.pending[0], -1); /* every gather awaited */
            assert_int_equal(g.pending[1], -1);
            assert_ptr_equal(g.last_out, &g.buf[Y]);
            assert_int_equal(g.copies, layers == 0);
            for (int weights = 0; weights <= 1; weights++) {
                log_open(&g, layers, zero3, DY);
                rt_pass_backward(&o, &g, layers, weights, &g.buf[DY], &g.buf[DX], &g.buf[SCRATCH]);
                for (int l = 0; l < layers; l++)
                    assert_true(g.computed[l]), assert_int_equal(g.weight[l], weights);
                assert_int_equal(g.pending[0], -1);
                assert_int_equal(g.pending[1], -1);
                assert_ptr_equal(g.last_out, &g.buf[DX]);
            }
            log_open(&g, layers, zero3, X);
            rt_pass_weights(&o, &g, layers);
            for (int l = 0; l < layers; l++) assert_true(g.weight[l]);
        }
}

/* ---- the gradients ------------------------------------------------------------------------ */

typedef struct grad_log {
    int n_sum, n_scatter, n_allreduce, n_gather, n_across;
    int summed[RT_P_COUNT][2]; /* per parameter id: by group (0 tp, 1 experts), of layer 0 */
    int order_ok;              /* no partial sum after a reduce-scatter */
    const rt_layer_shape *shape;
} grad_log;

static void g_sum(void *v, int k, int l, size_t off, size_t len, int group)
{
    grad_log *g = v;
    assert_int_equal(k, 3);
    if (g->n_scatter) g->order_ok = 0;
    size_t o[RT_P_COUNT], n[RT_P_COUNT], count;
    int np = rt_layer_params_layout(g->shape, o, n, &count);
    int id = -1;
    for (int i = 0; i < np; i++)
        if (o[i] == off && n[i] == len && len) id = i;
    assert_true(id >= 0);
    assert_true(group == RT_GRAD_SUM_TP || group == RT_GRAD_SUM_EXPERTS);
    if (l == 0) g->summed[id][group == RT_GRAD_SUM_EXPERTS]++;
    g->n_sum++;
}
static void g_scatter(void *v, int k, int l)
{
    assert_int_equal(k, 3);
    (void)l, ((grad_log *)v)->n_scatter++;
}
static void g_allreduce(void *v, int k, int l) { (void)k, (void)l, ((grad_log *)v)->n_allreduce++; }
static void g_gather(void *v, int k, int l) { (void)k, (void)l, ((grad_log *)v)->n_gather++; }
static void g_across(void *v, int k, int l) { (void)k, (void)l, ((grad_log *)v)->n_across++; }

static const rt_grad_ops GOPS = {g_sum, g_scatter, g_allreduce, g_gather, g_across};

/* The end of the iteration by ZeRO stage: 0 all-reduces every layer's gradients, 2 gathers every
 * layer's parameters, 3 nothing; HSDP adds each shard's all-reduce where ZeRO shards, and a
 * device without it (across NULL) is never asked. */
static void test_end_by_zero_stage(void **state)
{
    (void)state;
    int stages[] = {0, 2, 3};
    for (int i = 0; i < 3; i++)
        for (int hsdp = 0; hsdp <= 1; hsdp++)
            for (int dev_across = 0; dev_across <= 1; dev_across++) {
                grad_log g = {0};
                rt_grad_ops o = GOPS;
                if (!dev_across) o.across = NULL;
                rt_grads_replicas(&o, &g, 3, 5, stages[i], hsdp);
                assert_int_equal(g.n_allreduce, stages[i] == 0 ? 5 : 0);
                assert_int_equal(g.n_gather, stages[i] == 2 ? 5 : 0);
                assert_int_equal(g.n_across, stages[i] && hsdp && dev_across ? 5 : 0);
                assert_int_equal(g.n_sum + g.n_scatter, 0);
            }
}

static rt_layer_shape gpt_shape(void)
{
    return (rt_layer_shape){.hidden = 16, .heads = 4, .kv = 4, .ffn = 64, .causal = 1};
}

/* Which gradients are summed over which group, by hand (Megatron's rules): under SP the norms'
 * scales and biases over tp (each rank saw its own tokens), none without SP or with one rank;
 * LLaMA's norms have no bias; a MoE layer's router over tp, its experts over the ranks holding
 * the same ones when ep < tp. */
static void test_partial_sums(void **state)
{
    (void)state;
    rt_layer_shape gpt = gpt_shape();
    rt_layer_shape llama = gpt;
    llama.rmsnorm = 1, llama.no_bias = 1, llama.glu = 1;
    rt_layer_shape moe = llama;
    moe.experts = 8, moe.topk = 2, moe.ffn = 16;
    struct {
        rt_layer_shape whole;
        int t, ep, sp;
        int tp_ids[8], n_tp; /* summed over tp */
        int exp_ids[2], n_exp;
    } cases[] = {
        {gpt, 2, 1, 1, {RT_P_LN1_G, RT_P_LN1_B, RT_P_LN2_G, RT_P_LN2_B}, 4, {0}, 0},
        {gpt, 2, 1, 0, {0}, 0, {0}, 0},
        {gpt, 1, 1, 1, {0}, 0, {0}, 0},
        {llama, 4, 1, 1, {RT_P_LN1_G, RT_P_LN2_G}, 2, {0}, 0},
        {moe, 4, 2, 1, {RT_P_LN1_G, RT_P_LN2_G, RT_P_WR}, 3, {RT_P_W1, RT_P_W2}, 2},
        {moe, 4, 4, 0, {RT_P_WR}, 1, {0}, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        rt_layer_shape s = rt_layer_shape_tp(&cases[c].whole, cases[c].t, cases[c].ep);
        grad_log g = {.shape = &s, .order_ok = 1};
        rt_grads_zero_reduce(&GOPS, &g, 3, &s, 2, cases[c].t, cases[c].sp);
        int want[RT_P_COUNT][2] = {{0}};
        for (int i = 0; i < cases[c].n_tp; i++) want[cases[c].tp_ids[i]][0] = 1;
        for (int i = 0; i < cases[c].n_exp; i++) want[cases[c].exp_ids[i]][1] = 1;
        for (int id = 0; id < RT_P_COUNT; id++)
            for (int k = 0; k < 2; k++) {
                if (g.summed[id][k] != want[id][k])
                    fail_msg("case %zu: parameter %d summed %d times over group %d, want %d", c,
                             id, g.summed[id][k], k, want[id][k]);
            }
        assert_int_equal(g.n_sum, 2 * (cases[c].n_tp + cases[c].n_exp));
        assert_int_equal(g.n_scatter, 2); /* each layer once, after every partial sum */
        assert_true(g.order_ok);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_passes),
        cmocka_unit_test(test_end_by_zero_stage),
        cmocka_unit_test(test_partial_sums),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
