/*
 * mixed_recompute.h — recompute chosen per micro-batch, where it pays (--recompute mixed).
 *
 * DynaPipe chooses one recompute mode per iteration: the first of none, selective, full whose
 * plan fits (--recompute dynamic). Where none does not fit, every micro-batch then pays for its
 * reruns, although the memory is often short by much less than that mode frees. A mixed plan
 * starts from that fitting plan and gives back, one micro-batch at a time, the reruns that the
 * memory can afford: a micro-batch goes down a mode (full to selective, selective to none) while
 * the plan still fits, best first by compute time saved per share of the activation budget it
 * takes (the most on any stage).
 *
 * What is kept: the micro-batches and every rank's instructions (the schedule's order, or the
 * adaptive schedule's searched one). What changes: a lowered micro-batch's per-stage times and
 * memory, re-costed on the stage model of its new mode (plan_mb_cost), and its mode
 * (plan_mb.recompute). Since the order is fixed and only compute times fall, the simulated
 * iteration is never slower than the uniform plan it started from, and the exact memory check
 * (pm_fits) holds after every step. The result is maximal: no micro-batch can go down one more
 * mode and keep the plan fitting (a step that does not fit now cannot fit later, as every step
 * only adds memory).
 *
 * A greedy choice, not an optimum: the best assignment of modes under a memory limit is a
 * knapsack over the schedule's peaks. tests/unit/test_study.c simulates every assignment on small
 * iterations (GPT-6.7B, 8192 tokens, 4 stages of 30 GB): the greedy was optimal in 17 of 19,
 * 0.013% from the optimum on average, 0.23% at most.
 */
#ifndef MIXED_RECOMPUTE_H
#define MIXED_RECOMPUTE_H

#include "../scheduler/microbatch.h"
#include "../scheduler/plan.h"
#include "../scheduler/schedule.h"
#include "../scheduler/stage_cost.h"

/* Lowers the recompute of it's micro-batches where memory allows. it was built from l (its
 * micro-batch k is l->mb[k], plan_iter_from_mbs) on sm[from] and fits (pm_fits against
 * sm[from]->budget_mb); sm[m] is the stage model of mode m, NULL where the run may not use it.
 * Every micro-batch of it gets its mode in plan_mb.recompute (from, where none could go down).
 * A micro-batch whose shape
 * a lower mode's cost model cannot price stays where it is. Fails only with DP_ERR_NOMEM, which
 * leaves it as it came but for the modes set. */
dp_status mixed_recompute_relax(plan_iter *it, const mb_list *l,
                                const stage_model *const sm[RECOMPUTE_COUNT], recompute_mode from,
                                dp_err *err);

/* The least time any relaxation of it (above) can take, ms: schedule_time_lower_bound of sc over
 * it on it->pp stages of `chunks` chunks, each micro-batch's forward and backward on each stage at
 * the least over the modes it may go down to (sm[m] non-NULL, m < from, where m's cost model
 * prices it) and its own, a MoE's exchange left out as that bound leaves it. A search that already
 * has a plan faster than this drops it before relaxing (planner/study.c). it comes back as it
 * came; 0 (no bound) when out of memory. */
double mixed_recompute_floor_ms(plan_iter *it, const mb_list *l,
                                const stage_model *const sm[RECOMPUTE_COUNT], recompute_mode from,
                                const schedule *sc, int chunks);

#endif /* MIXED_RECOMPUTE_H */
