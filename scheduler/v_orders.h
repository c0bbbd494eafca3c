/*
 * v_orders.h — the per-device orders of the V schedules (schedule.h zbv and dualpipev), apart
 * from the plan's instructions: what each device runs, in what order, and how long that order
 * takes under given per-chunk times.
 *
 * In a V (placement.h) device d of S runs virtual stage d (chunk 0) and 2S-1-d (chunk 1): a
 * micro-batch's forward goes down the devices on chunk 0 and back up on chunk 1 to the loss on
 * device 0, its backward the other way. An order is a list of ops per device:
 *   V_F     a chunk's forward;
 *   V_B     its input gradients (the backward's B; a V_W of the same chunk comes later);
 *   V_W     its weight gradients;
 *   V_FULL  its whole backward at once (B then W, the gradient sent after both);
 *   V_PAIR  a forward and another micro-batch's whole backward overlapped on the device
 *           (DualPipe's F&B): both start on the device together and what they send leaves when
 *           both end (schedule.c emits F, B, W, then the two sends).
 * Micro-batches are indices 0..m-1 of one replica, in plan order; chunk is 0 or 1.
 *
 * The orders:
 *   v_zbv_published  Qi et al.'s ZB-V (arXiv 2401.10241 §6) as PyTorch's ScheduleZBVZeroBubble
 *                    lays it out: device d warms up with 2(S-d)-1 chunk-0 forwards, d pairs of
 *                    chunk-1 and chunk-0 forwards, S-d rounds of chunk-1 F, B, W; then rounds of
 *                    F, B, W on chunk 0 and on chunk 1; then the cool-down's B's, their W's last.
 *                    With equal micro-batches and f = b = w a chunk it idles no device after its
 *                    first op (the paper's zero bubble): the iteration is m(f + b + w) per
 *                    device plus the V's fill, (S-1) chunk forwards.
 *   v_zbv_greedy     a pass over time with the given costs: a device, when free, runs the ready
 *                    B that became ready first, else the next chunk-1 forward, else a new
 *                    micro-batch's chunk-0 forward while it holds fewer than S micro-batches,
 *                    else its oldest pending W (the W's fill what unequal forwards leave idle).
 *   v_dualpipev      DeepSeek's DualPipeV (the DualPipe repository's V variant, as PyTorch's
 *                    ScheduleDualPipeV lays it out) in 8 steps on device d: 2(S-d-1) chunk-0
 *                    forwards; d+1 pairs of chunk-0 and chunk-1 forwards; S-d-1 rounds of chunk-1
 *                    B, a pending W, chunk-1 F; the main step of m-2S+d+1 rounds of two F&B pairs
 *                    (F0 with chunk 1's backward, F1 with chunk 0's; the last device's first F0
 *                    and backward not overlapped); S-d-1 rounds of a chunk-1 backward and an F1&B0
 *                    pair; d+1 rounds of chunk-1 and chunk-0 backwards, whole in the first half
 *                    and split (B, W later) in the second; S-d-1 rounds of a pending W and a
 *                    chunk-0 B; the pending W's. Its bubble is the DeepSeek-V3 report's
 *                    (S-1)(F&B + B - 3W) a device with F, B, W a chunk's (B whole), exact where
 *                    a chunk's forward and input-gradient times are equal.
 * The published orders assume at least 2S-1 (ZB-V) or 2S (DualPipeV) micro-batches: with fewer,
 * they are laid out for that many and the missing micro-batches' ops left out (a micro-batch's
 * ops depend only on each other, so what remains still runs).
 *
 * Memory, in chunk activations a device holds from a forward to the end of its backward (W): ZB-V
 * at most 2S (S micro-batches of a stage, as ZB-H1's first stage), DualPipeV 2S + 1.
 */
#ifndef V_ORDERS_H
#define V_ORDERS_H

typedef enum { V_F, V_B, V_W, V_FULL, V_PAIR } v_kind;

typedef struct v_op {
    v_kind kind;
    int mb, chunk;   /* the op's micro-batch and chunk (V_PAIR: the forward's) */
    int mb2, chunk2; /* V_PAIR: the backward's; else unused */
} v_op;

/* The orders of S devices over m micro-batches: device d's n[d] ops from ops + d * cap
 * (cap = 6m, the most any order here has). Owned: v_orders_alloc / v_orders_free. */
typedef struct v_orders {
    int S, m, cap;
    v_op *ops;
    int *n;
} v_orders;

/* 0, or -1 out of memory (o then holds nothing to free). */
int v_orders_alloc(v_orders *o, int S, int m);
void v_orders_free(v_orders *o);

/* Per-chunk times, ms, of micro-batch i on device d at [i * S + d]: f the forward, b the
 * backward's input-gradient part, w its weight part. */
typedef struct v_costs {
    const double *f, *b, *w;
} v_costs;

void v_zbv_published(v_orders *o);
/* 0; -1 out of memory; -2 when no op could run (never, for S >= 1: the cap admits a micro-batch
 * on an idle device). */
int v_zbv_greedy(v_orders *o, const v_costs *c);
/* 0, or -1 out of memory (o's orders then empty). */
int v_dualpipev(v_orders *o);

/* The time the orders take under the costs with free transfers (each op as early as its device
 * and its inputs allow, a V_PAIR's results at its end), ms; INFINITY when they deadlock. */
double v_orders_ms(const v_orders *o, const v_costs *c);

#endif /* V_ORDERS_H */
