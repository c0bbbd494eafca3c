/*
 * moe.h — a mixture of experts' routing as a planner prices it: how unevenly one micro-batch's
 * routed tokens fall on the expert-parallel ranks, and what moving them there and back costs.
 *
 * The routing model (moe_routing): p_e, the probability that a routed copy (one of a token's top-k
 * choices) goes to expert e (sum 1), each copy drawn on its own, one of
 *   uniform     p_e = 1/E: a router trained with a load-balancing loss, in expectation;
 *   skewed      p_e proportional to (e + 1)^-alpha (Zipf's law; alpha 0 is uniform), the skew
 *               named by its one parameter;
 *   histogram   measured per-expert token counts (a router's statistics), normalised;
 *   even        a what-if bound: uniform shares and every rank exactly its mean load (the
 *               imbalance a run would lose; moe_imbalance 1 at every size).
 * Experts sit on the ep ranks in blocks of E/ep (expert e on rank e / (E/ep), as Megatron places
 * them), so rank r receives a routed token with probability q_r, the sum of its experts' p_e.
 *
 * A micro-batch routes n = tokens x k copies, multinomially over the ranks. Rank r's load is taken
 * as Binomial(n, q_r), the ranks apart, and the MoE layer waits for the busiest rank (the normal
 * approximation below leaves out the binomials' right skew, which raises the real maximum, and
 * the multinomial's negative correlation and a real router's distinct choices per token, which
 * narrow the spread: against samples, 0-1.2% low of independent copies and within 0.3% of a
 * uniform router's distinct top-k, test_moe):
 *   moe_busiest_load(r, n)     E[max_r L_r] = x0 + integral over x >= x0 of 1 - prod_r F_r(x), each
 *                              F_r the normal approximation of rank r's binomial (mean n q_r,
 *                              variance n q_r (1 - q_r), continuity-corrected), x0 below every
 *                              rank's mean by 12 of its deviations (GSL's adaptive integration);
 *   moe_imbalance(r, n)        that over the mean load n / ep: 1 for one rank; it falls as n grows
 *                              (a micro-batch of few tokens routes unevenly even under a uniform
 *                              router) toward max_r q_r x ep, the router's own skew.
 * Checked in tests against a brute-force sample of the routing model, and of a uniform router
 * whose k choices are distinct experts, for the loads a planner meets (n in the hundreds and up).
 *
 * The token exchange: dispatch sends each routed copy's hidden state to its expert's rank and
 * combine brings it back (each an NCCL all-to-all over the ep ranks of bytes = n x hidden x the
 * element size per GPU, at the cluster's measured all-to-all bus bandwidth: models/comm.h
 * comm_coll_ms), forward and again backward.
 *
 * Errors: moe_routing_init refuses (DP_ERR_INVALID, naming the field) an expert count below 1, an
 * ep that does not divide it, a negative skew, a histogram with a negative, non-finite or all-zero
 * count or of the wrong length. Units: tokens, ms; pure functions but for the routing's storage.
 */
#ifndef MOE_H
#define MOE_H

#include <stddef.h>

#include "../common/dp.h"
#include "comm.h"

typedef enum moe_route_kind {
    MOE_ROUTE_UNIFORM,
    MOE_ROUTE_SKEWED,
    MOE_ROUTE_HISTOGRAM,
    MOE_ROUTE_EVEN, /* a what-if: every rank exactly the mean (no imbalance at any size) */
} moe_route_kind;

#define MOE_EXPERTS_MAX 4096
#define MOE_EP_MAX 1024
#define MOE_COUNT_MAX 1e15 /* a histogram's count of one expert (a whole run's tokens, and more) */

/* A routing model over E experts on ep ranks, with the ranks' shares q_r filled in. */
typedef struct moe_routing {
    moe_route_kind kind;
    int experts, ep;
    double alpha;              /* skewed: the Zipf exponent */
    double zipf_sum;           /* skewed: sum over the experts of (e + 1)^-alpha (an expert's
                                * share is its term over this) */
    double q[MOE_EP_MAX];      /* rank r's share of the routed copies, sum 1 */
} moe_routing;

/* Fills r for `experts` experts on `ep` ranks: uniform (alpha and hist ignored), skewed with
 * alpha, or from hist (experts counts). DP_OK, or DP_ERR_INVALID naming what is wrong (r is then
 * left uniform over one rank). */
dp_status moe_routing_init(moe_routing *r, moe_route_kind kind, int experts, int ep, double alpha,
                           const double *hist, dp_err *err);

/* The expected load of the busiest rank when a micro-batch routes n copies (tokens x top-k),
 * copies; n <= 0: 0. */
double moe_busiest_load(const moe_routing *r, double n);

/* moe_busiest_load over the mean n / ep: the busiest rank's time over an even split's (>= 1; 1 for
 * ep 1 or n <= 0). */
double moe_imbalance(const moe_routing *r, double n);

/* With a capacity factor C (GShard's and Switch's; 0: dropless, as Megatron-Core and DeepSeek
 * train), each expert takes at most C x n / E of a micro-batch's n routed copies and drops the
 * rest (the tokens go on through the residual). The expected share of the n copies dropped,
 * sum over experts of E[(X_e - C n / E)+] / n, each expert's load X_e the normal approximation of
 * Binomial(n, p_e), p_e the router's own (uniform, skewed) or for a histogram, whose ranks' shares
 * alone a routing keeps, its rank's share spread evenly over the rank's experts:
 *   E[(X - c)+] = sigma phi(z) + (mu - c) Q(z),  z = (c - mu) / sigma;
 * even (every expert exactly its mean): 1 - C where C < 1, else 0. 0 for capacity <= 0 or n <= 0;
 * in [0, 1]. */
double moe_dropped_share(const moe_routing *r, double n, double capacity);

/* The routing model's name as --routing and a plan's "routing" read it: "uniform", "even" or
 * "skewed:ALPHA" (a Zipf exponent, 0 to 100). moe_routing_parse returns 0, or -1 for another text;
 * moe_routing_name writes it back into buf. */
int moe_routing_parse(const char *text, moe_route_kind *kind, double *alpha);
const char *moe_routing_name(moe_route_kind kind, double alpha, char *buf, size_t cap);

/* A measured routing histogram (--routing FILE): a CSV whose column "tokens" holds each expert's
 * routed tokens, one row an expert in expert order (common/csv_table.h's rules; other columns,
 * such as "expert", ignored). Fills counts[0..*n) (at most max). DP_OK; DP_ERR_PARSE naming the
 * file, line and field for a count that is not a number, more rows than max, or no rows (an
 * unreadable file: DP_ERR_IO). The counts' own rules (not negative, not all 0, one an expert) are
 * moe_routing_init's and its caller's. */
dp_status moe_histogram_read(const char *path, double *counts, int max, int *n, dp_err *err);

/* How the token exchange crosses nodes (--dispatcher; cost_model.dispatch):
 *   ALLTOALL  NCCL all-to-alls of every routed copy (Megatron-Core's alltoall token dispatcher,
 *             its default): a GPU's copies for other nodes' GPUs cross its NIC, those for its own
 *             node's go over NVLink
 *   DEDUP     DeepEP's (the DeepSeek-V3 report, §3.2.2; Megatron-Core's flex dispatcher): a
 *             token crosses to each other node holding one of its experts once, over the NICs,
 *             and goes on to that node's expert GPUs over NVLink; with a group-limited router
 *             (model.h moe_groups) it reaches at most moe_group_topk nodes' worth of groups */
typedef enum moe_dispatch { MOE_DISPATCH_ALLTOALL, MOE_DISPATCH_DEDUP } moe_dispatch;
/* "alltoall" or "deepep" (what --dispatcher and a plan's "dispatcher" read): 0, or -1. */
int moe_dispatch_parse(const char *text, moe_dispatch *d);
const char *moe_dispatch_name(moe_dispatch d);

/* The expected number of nodes other than its own that a token's experts lie on, m's experts in
 * expert order over `nodes` nodes (E / nodes each), its k experts uniform among them:
 * (nodes - 1) (1 - P), P = C(E - E/nodes, k) / C(E, k) that a node holds none. Under a group
 * limit whose groups sit whole on nodes (moe_groups a multiple of nodes) a node is reached where
 * one of its groups is among the token's moe_group_topk: P = C(G - G/nodes, gk) / C(G, gk) (each
 * chosen group taken to receive one of the k). 0 for one node. */
double moe_remote_nodes(const model_spec *m, int nodes);

/* One step of the token exchange (dispatch or combine) over the ep ranks of group g on `nodes`
 * nodes (q = g->n / nodes of them a node): each GPU holding `tokens` tokens routes m's
 * experts_per_token (k) copies of its hidden elements, elem_bytes each; ms, 0 for one rank.
 * Inside one node: NCCL's all-to-all at the node's bus bandwidth (comm_coll_ms). Across nodes,
 * side by side, the longer of what crosses the NICs at the group's bus bandwidth over them (a
 * token's copies for the other nodes: k (n - q) / n of them under ALLTOALL, moe_remote_nodes
 * under DEDUP) and what goes over NVLink at the node's all-to-all bandwidth (k (q - 1) / n copies
 * for the node's other GPUs, and under DEDUP the forwarding of the k (n - q) / n remote ones to
 * the (q - 1) / q of a node's GPUs they did not land on), plus n - 1 latencies across nodes. With
 * a GPU a node (q = 1) ALLTOALL is comm_coll_ms's all-to-all over the NICs. */
double moe_exchange_ms(const cluster_spec *c, const comm_group *g, int nodes, const model_spec *m,
                       moe_dispatch d, double tokens, double elem_bytes);

#endif /* MOE_H */
