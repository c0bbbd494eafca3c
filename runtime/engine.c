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
    if (layers > 0) o->prefetch_begin(ctx, 0);
    for (int l = 0; l < layers; l++) {
        void *dst = l == layers - 1 ? y : l % 2 == 0 ? a : b;
        o->prefetch(ctx, l, l + 1);
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
    if (layers > 0) o->prefetch_begin(ctx, layers - 1);
    for (int l = layers - 1; l >= 0; l--) {
        void *dst = l % 2 == 0 ? dx : scratch; /* layer 0's into dx */
        o->prefetch(ctx, l, l - 1);
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
