/*
 * engine.h — the discrete-event core: a priority queue of timestamped events.
 *
 * Time is an integer count of simulated nanoseconds, so ties are exact and runs are bit-for-bit
 * reproducible. Events pop in (t_ns, priority, seq) order: earlier time first; at equal times the
 * lower priority value first; at equal (time, priority) the one scheduled first (seq is the
 * insertion counter). This makes the order of simultaneous events deterministic, as git's
 * prio_queue and ROSS's tie-breaking do.
 *
 * Semantics: a handler (the caller's loop around engine_pop) may schedule new events at any time
 * >= the current time, never in the past (engine_push refuses, returning DP_ERR_INVALID). There is
 * no cancellation: a handler that wants to ignore a stale event checks its own state. Events are
 * plain values copied into the heap; nothing is freed per event.
 */
#ifndef ENGINE_H
#define ENGINE_H

#include <stdint.h>

#include "../common/dp.h"

typedef struct sim_event {
    int64_t t_ns;  /* simulated time, ns */
    int prio;      /* lower runs first at equal times */
    uint64_t seq;  /* insertion order, assigned by engine_push */
    int type;      /* the caller's event kind */
    int32_t a, b, c, d; /* the caller's arguments */
} sim_event;

typedef struct engine {
    sim_event *heap;
    size_t n, cap;
    uint64_t next_seq;
    int64_t now_ns; /* time of the last popped event */
    uint64_t popped;
} engine;

void engine_init(engine *e);
void engine_release(engine *e);
/* Empties the queue and resets the clock (keeps the allocation). */
void engine_reset(engine *e);

dp_status engine_push(engine *e, int64_t t_ns, int prio, int type, int32_t a, int32_t b,
                      int32_t c, int32_t d);

/* Pops the next event into *ev; returns 0 when the queue is empty. */
int engine_pop(engine *e, sim_event *ev);

#endif /* ENGINE_H */
