#include "engine.h"

#include <stdlib.h>

#include "exec.h"
#include "layer.h"

rt_chunk_plan rt_chunk_plan_of(const plan_header *h, const model_spec *m, int v)
{
    rt_chunk_plan c = {.v = v};
    c.place = placement_stage(m, &h->split, v, h->pp * h->chunks);
    c.whole = rt_layer_shape_of(m, c.place.decoder      ? RT_LAYER_DECODER
                                   : m->arch == ARCH_T5 ? RT_LAYER_ENCODER
                                                        : RT_LAYER_GPT);
    c.shape = rt_layer_shape_tp(&c.whole, rt_plan_tp(h), rt_plan_ep(h));
    c.shape.cp = rt_plan_cp(h); /* ... on its share of the tokens */
    c.layers = c.place.decoder ? c.place.dec_layers : c.place.enc_layers;
    rt_layer_params unused;
    c.count = rt_layer_params_bind(&unused, &c.shape, NULL);
    return c;
}

int rt_chunk_layer_params(const rt_chunk_plan *c, const plan_header *h, int tp_rank, int l,
                          double *mine)
{
    rt_layer_params full;
    if (rt_layer_params_alloc(&full, &c->whole) != 0) return -1;
    rt_layer_params_init(&full, &c->whole, rt_layer_seed(&c->place, l));
    rt_layer_params_shard(&c->whole, full.block, rt_plan_tp(h), rt_plan_ep(h), tp_rank, mine);
    rt_layer_params_free(&full);
    return 0;
}

void rt_embedding_rows(double *rows, size_t n, int tp_rank)
{
    rt_fill_at(rows, n, (size_t)tp_rank * n, 99, 0.04);
}

void rt_pass_forward(const rt_pass_ops *o, void *ctx, int layers, const void *x, void *y, void *a,
                     void *b)
{
    const void *cur = x;
    if (layers > 0) o->gather(ctx, 0);
    for (int l = 0; l < layers; l++) {
        void *dst = l == layers - 1 ? y : l % 2 == 0 ? a : b;
        o->gather_wait(ctx, l);
        if (l + 1 < layers) o->gather(ctx, l + 1);
        o->keep_input(ctx, l, cur);
        o->forward(ctx, l, cur, dst);
        cur = dst;
    }
    if (layers == 0) o->copy(ctx, y, x);
}

void rt_pass_backward(const rt_pass_ops *o, void *ctx, int layers, int weights, const void *dy,
                      void *dx, void *scratch)
{
    const void *cur = dy;
    if (layers > 0) o->gather(ctx, layers - 1);
    for (int l = layers - 1; l >= 0; l--) {
        void *dst = l % 2 == 0 ? dx : scratch; /* layer 0's into dx */
        o->gather_wait(ctx, l);
        if (l > 0) o->gather(ctx, l - 1);
        o->rerun(ctx, l);
        o->backward_input(ctx, l, cur, dst);
        if (weights) o->backward_weight(ctx, l);
        cur = dst;
    }
    if (layers == 0) o->copy(ctx, dx, dy);
}

void rt_pass_weights(const rt_pass_ops *o, void *ctx, int layers)
{
    for (int l = layers - 1; l >= 0; l--) o->backward_weight(ctx, l);
}

rt_layer_end rt_zero_layer_end(int zero_stage)
{
    return zero_stage == 0 ? RT_END_ALLREDUCE_GRADS : zero_stage == 2 ? RT_END_GATHER_PARAMS
                                                                      : RT_END_NOTHING;
}

void rt_grads_partial(const rt_grad_ops *o, void *ctx, int k, const rt_layer_shape *shape,
                      int layers, int t, int sp)
{
    if (t <= 1) return;
    for (int l = 0; l < layers; l++) {
        size_t off[RT_P_COUNT], len[RT_P_COUNT], count;
        int np = rt_layer_params_layout(shape, off, len, &count);
        for (int id = 0; id < np; id++) {
            int group = len[id] ? rt_param_grad_group(shape, id, t, sp) : RT_GRAD_OWN;
            if (group != RT_GRAD_OWN) o->sum_group(ctx, k, l, off[id], len[id], group);
        }
    }
}

void rt_grads_zero_reduce(const rt_grad_ops *o, void *ctx, int k, const rt_layer_shape *shape,
                          int layers, int t, int sp)
{
    rt_grads_partial(o, ctx, k, shape, layers, t, sp);
    for (int l = 0; l < layers; l++) o->reduce_scatter(ctx, k, l);
}

void rt_grads_replicas(const rt_grad_ops *o, void *ctx, int k, int layers, int zero, int hsdp)
{
    rt_layer_end what = rt_zero_layer_end(zero);
    for (int l = 0; l < layers; l++) {
        if (what == RT_END_ALLREDUCE_GRADS) o->allreduce(ctx, k, l);
        else if (what == RT_END_GATHER_PARAMS) o->gather_params(ctx, k, l);
    }
    for (int l = 0; zero && hsdp && o->across && l < layers; l++) o->across(ctx, k, l);
}
