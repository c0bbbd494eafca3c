#include "engine.h"

#include <stdlib.h>
#include <string.h>

void engine_init(engine *e)
{
    memset(e, 0, sizeof *e);
}

void engine_release(engine *e)
{
    free(e->heap);
    engine_init(e);
}

void engine_reset(engine *e)
{
    e->n = 0;
    e->next_seq = 0;
    e->now_ns = 0;
}

static int before(const sim_event *x, const sim_event *y)
{
    if (x->t_ns != y->t_ns) return x->t_ns < y->t_ns;
    if (x->prio != y->prio) return x->prio < y->prio;
    return x->seq < y->seq;
}

dp_status engine_push(engine *e, int64_t t_ns, int prio, int type, int32_t a, int32_t b,
                      int32_t c, int32_t d)
{
    if (t_ns < e->now_ns) return DP_ERR_INVALID;
    if (dp_grow((void **)&e->heap, &e->cap, e->n + 1, sizeof *e->heap) != DP_OK)
        return DP_ERR_NOMEM;
    sim_event ev = {t_ns, prio, e->next_seq++, type, a, b, c, d};
    size_t i = e->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&ev, &e->heap[p])) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = ev;
    return DP_OK;
}

int engine_pop(engine *e, sim_event *ev)
{
    if (e->n == 0) return 0;
    *ev = e->heap[0];
    sim_event last = e->heap[--e->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const sim_event *best = &last;
        if (l < e->n && before(&e->heap[l], best)) m = l, best = &e->heap[l];
        if (r < e->n && before(&e->heap[r], best)) m = r;
        if (m == i) break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (e->n > 0) e->heap[i] = last;
    e->now_ns = ev->t_ns;
    e->popped++;
    return 1;
}
