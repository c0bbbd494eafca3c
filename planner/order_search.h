/*
 * order_search.h — the micro-batch order of the adaptive schedule: candidates, simulated, the best
 * that fits in memory kept.
 *
 * Candidates (order_candidates), as DynaPipe's planner and a few more:
 *   - the planned order (ascending, as the batcher cut it), its reverse, and the two alternations
 *     of largest and smallest (dpsim's earlier four-order search, ORDER_SEARCH_FIXED);
 *   - DynaPipe's cluster permutations (ORDER_SEARCH_CLUSTERS): the micro-batches clustered by
 *     k-means on (forward and backward time of the first and of the last stage), k = 4 clusters
 *     up to 20 micro-batches and 3 beyond, and every ordering of the clusters (k! orders), each
 *     cluster's micro-batches kept in planned order; with k or fewer micro-batches, every
 *     permutation of them. DynaPipe shuffles inside a cluster at random; here the k-means is
 *     seeded from the time quantiles and the inside order is the planned one, so that a plan is
 *     deterministic.
 * Duplicates are dropped; at most 24 + 4 candidates. Each is built with the schedule and simulated
 * (sim_iteration): the shortest that fits in memory wins, or the one with the lowest peak when
 * none fits. Ties go to the earlier candidate, so the planned order wins when nothing is better.
 */
#ifndef ORDER_SEARCH_H
#define ORDER_SEARCH_H

#include "../scheduler/microbatch.h"
#include "../scheduler/schedule.h"
#include "../sim/sim.h"

enum { ORDER_SEARCH_FIXED = 1, ORDER_SEARCH_CLUSTERS = 2, ORDER_SEARCH_ALL = 3 };

#define ORDER_MAX_CANDIDATES 28

/* Candidate orders of l's costed micro-batches: perm[c * n + k] is the index (into l->mb) of the
 * k-th micro-batch of candidate c. Returns the number of candidates (>= 1) and fills *perm
 * (malloc'd, the caller frees); 0 with *perm NULL when out of memory. The costs per stage come
 * from sm (the clustering features). */
int order_candidates(const mb_list *l, const stage_model *sm, int which, int **perm);

typedef struct order_result {
    int candidates;   /* orders simulated */
    int best;         /* the winner's index among them */
    double best_ms;   /* its simulated iteration, ms */
    int fits;         /* whether it fits in memory */
} order_result;

/* Reorders l's micro-batches to the best candidate of `which` under schedule sched (see above),
 * simulating each on s with cfg; res (may be NULL) says which won. On failure l is left in its
 * planned order. */
dp_status order_search(const stage_model *sm, const schedule *sched, const sim_config *cfg, sim *s,
                       int which, mb_list *l, order_result *res, dp_err *err);

#endif /* ORDER_SEARCH_H */
