/*
 * plan_machine.h — the one meaning of an execution plan's instructions.
 *
 * The validator (plan_validate), the simulator (sim/sim.c) and dprun's executor loop
 * (runtime/exec_loop.h, which both of its backends run) step each rank's instruction list through
 * this module and derive nothing themselves: what an instruction waits for, which buffers it creates and releases,
 * whether a backward leaves its weight gradients to a W, how long a compute takes and what memory
 * it holds all come from pm_resolve.
 *
 * A rank (stage s of replica r, index r * pp + s) holds, for every micro-batch k of its replica
 * and every chunk c of its device, one *slot*: the buffers of (k, c) on virtual stage
 * v = c * pp + s (in a loop; in a V, odd chunks count down: placement.h placement_vstage). The
 * instructions, in the rank's order:
 *
 *   RECV_ACT k c   posts the receive of k's activation from virtual stage v-1 (rank of stage
 *                  (v-1) % pp, chunk (v-1) / pp); it opens the slot and never blocks.
 *   RECV_GRAD k c  posts the receive of k's output gradient from v+1; likewise.
 *   F k c          opens the slot; waits for its RECV_ACT's data when v > 0; computes the
 *                  forward (fwd_ms[s] / C); creates the slot's stored activations (stored_mb[s]
 *                  / C) and, while it runs, a transient ((peak_mb[s] - stored_mb[s]) / C).
 *   B k c          waits for its RECV_GRAD's data when v < nv-1; computes the input gradients and,
 *                  unless the slot is split, the weight gradients: (bwd_ms[s] - w_ms[s]) / C when
 *                  split, bwd_ms[s] / C otherwise; holds the same transient as F.
 *   W k c          the weight gradients ((w_ms[s] / C), no transient). A slot is *split* when
 *                  its rank runs a W for it, after its B (ZB-H1, the V's); a zero-bubble rank
 *                  leaves the slots under full recompute whole (rule "recompute").
 *   SEND_ACT k c   sends F's output to v+1 and SEND_GRAD k c sends B's input gradient to v-1,
 *                  once the rank's compute issued before them has ended (stream order: the cpu
 *                  executor computes before it sends, the cuda one's link stream waits for an
 *                  event recorded there; a plan may put compute between a producer and its send,
 *                  as a DualPipe F&B pair does); a send never blocks the instructions after it.
 *                  Transfers of one kind between two ranks are matched
 *                  in order (NCCL's and MPI's order on one link).
 *   FREE k c       releases the slot. It is stream-ordered: the stored activations go when the
 *                  rank's compute before it has finished (no later), as cudaFreeAsync does;
 *                  a transport may keep a send's wire buffer until that send completes. Nothing
 *                  may use the slot after its FREE.
 *
 * Memory of a rank (activation MB, model state excluded) is therefore a function of its order
 * alone: held = the stored activations of the slots between their F and their FREE; while a
 * compute runs, held + its transient. pm_rank_peak gives the maximum; the simulator's timed
 * accounting reaches the same figure, and the planner's memory check is this function.
 *
 * Rules of a valid plan (plan_validate checks them all, and names the plan, the iteration, the
 * rank, the instruction and the rule that was broken):
 *   one-F-one-B  every slot of a rank's replica has exactly one F and one B, F before B;
 *   W            at most one W per slot, after its B (and FREE after it);
 *   transfers    one RECV_ACT before F and one SEND_ACT after it where v > 0 / v < nv-1, one
 *                RECV_GRAD before B and one SEND_GRAD after it where v < nv-1 / v > 0, to the
 *                neighbouring virtual stage's rank (a self-send where the interleaved placement
 *                puts v+1 on the same device), matched pair by pair in order with equal bytes;
 *   FREE         exactly one per slot, after every other instruction of the slot;
 *   times        0 <= w <= bwd, every time and memory finite, >= 0 and at most PLAN_MAX_VALUE
 *                (1e7 ms: the simulator's integer nanoseconds then cannot overflow);
 *   tokens       real tokens <= padded tokens (mbs * length), per encoder and decoder;
 *   samples      a micro-batch trains a sample at least; an iteration each of its samples once;
 *   recompute    no W of a micro-batch under full recompute (plan_check; see pm_recompute);
 *   no deadlock  the untimed run of every rank (receives complete once their send is issued)
 *                finishes.
 */
#ifndef PLAN_MACHINE_H
#define PLAN_MACHINE_H

#include <stdint.h>

#include "plan.h"

enum { PM_ACT = 0, PM_GRAD = 1 };

#define PLAN_MAX_VALUE STAGE_MAX_VALUE /* the largest time (ms) or memory (MB) of one micro-batch
                                       * on a stage (stage_cost.h) */

/* One instruction, resolved against its plan. */
typedef struct pm_step {
    const plan_instr *x;
    plan_op op;
    int rank;         /* replica * pp + stage */
    int index;        /* its place in the rank's list */
    int stage, v;     /* device stage; virtual stage (placement_vstage) */
    int kind;         /* SEND_* / RECV_*: PM_ACT or PM_GRAD; -1 otherwise */
    int waits;        /* F, B: the received kind it consumes (PM_ACT, PM_GRAD); -1 none */
    int peer_rank;    /* SEND_* / RECV_*: the rank at the other end; -1 otherwise */
    int peer_chunk;   /* its chunk */
    int peer_v;       /* its virtual stage; -1 otherwise */
    int split;        /* B: weight gradients left to a W */
    double dur_ms;    /* F, B, W: compute time; 0 otherwise */
    double xchg_ms;   /* F, B: of dur_ms, a MoE's token exchange (plan_mb xfwd_ms, xbwd_ms: all
                       * of the backward's in B, none in W); 0 otherwise */
    double stored_mb; /* F: stored activations created; FREE: released; 0 otherwise */
    double transient_mb; /* F, B: working memory while it runs; 0 otherwise */
} pm_step;

/* Per-iteration facts every stepper needs, computed once. */
typedef struct plan_machine {
    const plan_iter *it;
    int pp, chunks, nv, nr, nmb;
    placement_kind placement; /* the iteration's (plan_iter.placement) */
    uint8_t *split;    /* per slot (pm_slot): the rank runs a W for it */
    /* untimed state (pm_run): */
    uint8_t *flags;    /* per slot (pm_slot) */
    int *pc;           /* per rank */
} plan_machine;

/* Prepares the machine for iteration it with `chunks` chunks per device (its bookkeeping comes
 * from the checked allocator, dp_xcalloc: it cannot fail). pm_release frees it. */
void pm_init(plan_machine *m, const plan_iter *it, int chunks);
void pm_release(plan_machine *m);

/* The per-(rank, micro-batch, chunk) state a run keeps, indexed compactly: a micro-batch lives on
 * one replica (rule: replicas), so (micro-batch, stage, chunk) names the rank's slot, and there
 * are pm_slots = n_mb x pp x chunks of them however many replicas there are. */
static inline size_t pm_slot(const plan_machine *m, int r, int mb, int c)
{
    return ((size_t)mb * (size_t)m->pp + (size_t)(r % m->pp)) * (size_t)m->chunks + (size_t)c;
}
static inline size_t pm_slots(const plan_machine *m)
{
    return (size_t)(m->nmb ? m->nmb : 1) * (size_t)m->pp * (size_t)m->chunks;
}

/* Resolves instruction i of rank r. Needs the plan to have passed plan_validate's checks on
 * micro-batch, chunk and peer indices (pm_resolve does not bound-check them). */
void pm_resolve(const plan_machine *m, int r, int i, pm_step *s);

/* The activation memory a rank holds at its peak (see above), MB; with *held_end the memory
 * still held after its last instruction (0 in a valid plan). */
double pm_rank_peak(const plan_machine *m, int r, double *held_end);
/* The same, with the peak's two parts: stored activations held then, and the running op's
 * transient (either may be NULL). */
double pm_rank_peak_parts(const plan_machine *m, int r, double *held_end, double *held_at_peak,
                          double *transient_at_peak);

/* Whether every rank's peak (pm_rank_peak) fits its device's activation budget
 * budget_mb[stage]. *worst receives the largest peak / budget ratio over the ranks; when it
 * does not fit and why is non-NULL, why names the rank and the figures. */
int pm_fits(const plan_machine *m, const double *budget_mb, double *worst, char *why, size_t cap);
/* pm_fits over the ranks of one replica alone: what a change to one of its micro-batches' times
 * or memory can move. The machine reads the plan's figures as they are when called, so one
 * machine serves while they change (the instructions may not). */
int pm_replica_fits(const plan_machine *m, int replica, const double *budget_mb);

/* The untimed run of every rank (no deadlock rule). DP_ERR_DEADLOCK names every waiting
 * instruction. Needs pm_check to have passed. */
dp_status pm_run(plan_machine *m, const char *where, dp_err *err);

/* What the B of micro-batch mb of iteration it reruns before its backward: the micro-batch's
 * own mode (a "mixed" plan), else the iteration's ("dynamic"), else the plan header's
 * (plan_check has checked every name, and that each is where the plan's kind says):
 *   none       nothing: F saved every layer's activations;
 *   selective  every layer's attention core (scores, softmax and context, from the saved queries,
 *              keys and values), then that layer's backward (Korthikanti et al.'s selective
 *              recompute; fwd/bwd times in the plan already count it, cost_analytic.c);
 *   full       F saved only each layer's input; B reruns each layer's forward from it, last layer
 *              first, then that layer's input and weight gradients, so that one layer's
 *              activations exist at a time. Hence the rule "recompute": a W after such a B would
 *              need them all held past B, which the plan's stored_mb does not count, so the
 *              slot is not split (its B computes the weight gradients too). */
recompute_mode pm_recompute(const plan *p, const plan_iter *it, int mb);
/* The same rule where no plan header is at hand (a schedule building an iteration): `policy`
 * (a recompute_policy) stands for the header's. */
recompute_mode pm_recompute_or(const plan_iter *it, int mb, int policy);

/* The static rules above (everything but the untimed run) on one iteration. */
dp_status pm_check(const plan_machine *m, const char *where, dp_err *err);

/* Human description of instruction i of rank r ("stage 1 (replica 0) instruction 4 (F mb 2
 * chunk 0)"), into buf. */
void pm_describe(const plan_iter *it, int r, int i, char *buf, size_t cap);

#endif /* PLAN_MACHINE_H */
