/*
 * schedule.h — pipeline schedules: the per-rank instruction order of one iteration.
 *
 * Every schedule accepts micro-batches of different sizes (each carries its own per-stage times,
 * memory and transfer bytes) and fills plan_iter.ranks for every replica, using the replica's
 * micro-batches in plan order. Choose with --schedule; schedule_list prints them.
 *
 *   gpipe        all forwards, then all backwards (in reverse order).
 *   1f1b         warm-up min(S-s-1, m) forwards, then one forward + one backward, then the
 *                remaining backwards (Megatron-LM's PipeDream-flush): at most min(S-s, m)
 *                micro-batches held on stage s.
 *   interleaved  Megatron's interleaved 1F1B with C chunks per device: forwards walk groups of S
 *                micro-batches through chunks 0..C-1, backwards through C-1..0; warm-up
 *                min((S-s-1)*2 + (C-1)*S, m*C) steps, more where m is not a multiple of S and
 *                that warm-up would deadlock.
 *   zb1          zero-bubble ZB-H1 (Qi et al., arXiv 2401.10241): the backward is split into an
 *                input-gradient B and a weight-gradient W; stage s runs 1F1B with B and keeps s W's
 *                back, issuing them into the cool-down waits, so its bubble is (S-1)(f+b-w).
 *                A micro-batch is freed after its W, so every stage holds up to min(S, m)
 *                micro-batches: the most any 1F1B stage holds (stage 0's), as the ZB paper's
 *                ZB-H1 does. The W share of a backward is plan_mb.w_ms (from the analytic FLOP
 *                split; see plan.c).
 *   zbv          zero-bubble in a V (Qi et al.'s ZB-V): two chunks per device, chunk 0 down the
 *                devices and chunk 1 back up (placement.h's V: the loss on device 0), the
 *                backward split into B and W. For micro-batches of any size its order is the
 *                published ZB-V order or a greedy pass over the cost model's times, whichever
 *                the plan's costs finish first (v_orders.h). It holds at most S micro-batches a
 *                device (2S chunk activations), as ZB-H1's first stage.
 *   dualpipev    DeepSeek's DualPipeV on the same V (v_orders.h): in its main step each forward
 *                paired with another micro-batch's whole backward (F&B), emitted as F, B, W and
 *                then both sends, so that what the pair produces leaves when it ends; B and W
 *                split at the ends. It holds 2S + 1 chunk activations (S + 1/2 micro-batches).
 *   adaptive     DynaPipe's memory-aware schedule: a cyclic pass decides each device's order
 *                (backwards first; a micro-batch's forward only when its peak memory fits next to
 *                what the device already holds), then that order is run event-driven, without the
 *                cycle barriers.
 *
 * Transfers: every forward on virtual stage v > 0 is preceded by its RECV_ACT, every backward on
 * v < last by its RECV_GRAD; sends follow the compute that produces them; FREE follows the last
 * use of a micro-batch's activations (B, or W when split). Receives from each peer are then
 * posted in the order the peer sends (one hoisted before another where the schedule consumes
 * them the other way round: interleaved on two stages, where one link carries both kinds).
 */
#ifndef SCHEDULE_H
#define SCHEDULE_H

#include "plan.h"
#include "stage_cost.h"

typedef struct schedule_ctx {
    const stage_model *sm; /* pp, chunks, memory budgets, model (for transfer bytes) */
} schedule_ctx;

typedef struct schedule {
    const char *name;
    const char *summary;
    dp_status (*build)(const schedule_ctx *ctx, plan_iter *it, dp_err *err);
    /* Micro-batches (device units) stage s of S holds at once with C chunks, for the planner's
     * memory rule: 1f1b S-s; zb1 S; interleaved (Megatron's warm-up + 1) chunks / C; adaptive 1
     * (it admits by memory itself); gpipe S, a first guess, since it holds all m (the exact
     * check after planning decides, see stage_cost.h). */
    double (*holds)(int S, int C, int s, const stage_model *sm); /* sm: its --warmup cap */
    int splits_backward; /* its plans run a W after the B of every micro-batch not under full
                          * recompute (zb1, the V's; a full-recompute one's B computes the
                          * weight gradients too: plan_machine.h rule "recompute") */
    /* The textbook estimate of replica rep's iteration on S stages with C chunks (its
     * micro-batches k, t_k = max over stages of f + b, per stage as planned), ms, and in
     * *bubble_ms (never NULL) its bubble term; NULL for a schedule without one (adaptive: its
     * order follows memory; planner/study.h then reports NAN). For equal micro-batches it is
     * exact under free links: gpipe, 1f1b and interleaved sum t + (S-1) max t / C; zb1
     * sum t + (S-1) max (f + b - 2w), the ZB paper's (S-1)(F + B - W) with its B the input-
     * gradient part, b - w here (never below 0), where a replica has at least S micro-batches
     * (with fewer the W passes cannot fill the bubble: NAN). */
    double (*closed_form)(const plan_iter *it, int rep, int S, int C, double *bubble_ms);
    const char *closed_form_text; /* the formula, as printed beside the figure */
    int chunked;          /* runs --chunks model chunks per device (interleaved); the others one */
    int admits_by_memory; /* orders its micro-batches by memory with the simulator (adaptive:
                           * planner/order_search.h), so its plans never fail the memory rule for
                           * want of an order */
    int warms_up;         /* runs forwards ahead of its first backward by a rule that --warmup
                           * caps (stage_model.warmup: 1f1b, interleaved) */
    placement_kind placement; /* how its chunks sit on the devices (placement.h): a loop, or a V
                               * (zbv) */
    int chunks_fixed;     /* > 0: the chunks it always runs (zbv: 2, a V), whatever --chunks
                           * says; 0: --chunks (a chunked one) or 1 */
} schedule;

/* Megatron-LM's default (1F1B): the schedule the baselines run (packing + it is the paper's
 * MLM+DS). */
const schedule *schedule_baseline(void);

/* Of the n schedule names (known ones), the one a run's options are checked against before it
 * plans each: the chunked one where one is listed (--chunks is its), else the first. */
const char *schedule_for_options(const char *const *names, int n);

const schedule *schedule_find(const char *name);
/* The chunks a device runs under schedule sc when --chunks asks for `requested`: its fixed count
 * (zbv: 2), the request's for a chunked one, else 1. */
int schedule_chunks(const schedule *sc, int requested);

/* The names that choose the schedule per iteration (--schedule auto, auto-loop, auto-v; a plan's
 * header then, each iteration naming its own): every schedule that runs the plan's chunks on its
 * placement plans the batch, and the fastest whose plan fits is kept (planner/study.h). A plan has
 * one placement (where each layer's weights live), so the candidates of an iteration share it:
 * "auto-loop" the one-chunk schedules on a loop (gpipe, 1f1b, adaptive, zb1), "auto-v" those on a
 * V (zbv, dualpipev), and "auto" either family, the placement chosen once a run (study_run: by
 * the first iteration, the family whose fastest plan of it simulates faster). Not schedules of the
 * list: schedule_find does not know them. */
typedef struct schedule_chooser {
    const char *name;
    placement_kind placement; /* its candidates' placement and chunks: the plan's (auto: before */
    int chunks;               /* the placement is chosen, the loop's) */
    int picks_placement;      /* 1 (auto): a loop or a V, chosen per run */
} schedule_chooser;

const schedule_chooser *schedule_chooser_find(const char *name);
/* Whether ch chooses among sc: sc runs ch's chunks on ch's placement whatever --chunks says
 * (auto: either family's). */
int schedule_chooser_takes(const schedule_chooser *ch, const schedule *sc);
/* The chooser of one family that ch runs as on `placement`: ch itself where it has that
 * placement, auto-loop's or auto-v's for auto; NULL where ch cannot. */
const schedule_chooser *schedule_chooser_family(const schedule_chooser *ch,
                                                placement_kind placement);
/* The same where the family also runs `chunks` a device; NULL otherwise. */
const schedule_chooser *schedule_chooser_on(const schedule_chooser *ch, placement_kind placement,
                                            int chunks);
/* The chunks and placement (NULL: not wanted) a device runs under the schedule or chooser `name`
 * when --chunks asks for `requested` (schedule_chunks; a chooser's own, auto's the loop's until
 * the run chooses). The one rule of the set-up, the study and the plan's header. -1 (outputs
 * untouched) for an unknown name, else 0. */
int schedule_layout(const char *name, int requested, int *chunks, placement_kind *placement);
/* "gpipe, 1f1b, ..., auto, auto-loop, auto-v": every name --schedule takes, for messages. */
const char *schedule_names(char *buf, size_t cap);

/* The planner's memory rule of schedule sc on sm's layout, at the given scale (stage_cost.h). */
void schedule_mem_rule(const schedule *sc, const stage_model *sm, double scale, mem_rule *rule);
const schedule *schedule_list(int *count);

/* A lower bound on the pipeline time of iteration it on S stages with C chunks, ms, whatever
 * order schedule sc gives its micro-batches: on each replica's device s the first forward waits
 * for the cheapest forward of every device before it, the device runs all its ops one at a time,
 * and its last backward leaves at least the cheapest backward of each device before it to run
 * (not counted where sc splits the backward: a W may come last). Each op counts its compute only,
 * less a MoE's exchange (plan_mb xfwd_ms, xbwd_ms), which a pair may hide (sim.h). The simulated iteration (links,
 * the gradient reduction and optimizer step after the pipeline) is never shorter; a search uses
 * it to drop a configuration before simulating it (planner/study.h prune_ms). */
double schedule_time_lower_bound(const schedule *sc, const plan_iter *it, int S, int C);

/* Bytes of the activation sent from virtual stage v to v+1 (and of the gradient back). */
int64_t schedule_act_bytes(const stage_model *sm, const plan_mb *m, int v);

/* Every rule a whole plan must keep, beyond the syntax: at least one iteration, unique iteration
 * ids, a known schedule (above), recompute mode and activation dtype, a shard group that
 * stage_shard_check takes, and plan_validate (the plan machine's rules) on every iteration. where
 * names the plan. */
dp_status plan_check(const plan *p, const char *where, dp_err *err);

#endif /* SCHEDULE_H */
