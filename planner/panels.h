/*
 * panels.h — one iteration of a run, collected for a figure: every compute op of one replica with
 * a micro-batch id that is stable across schedules, and each stage's memory over time. The
 * figures (plots/plot.h plot_panels, plot_panel_memory) and the interactive page (plots/html.h) draw
 * what this collects; `dpsim plot schedules` puts several side by side, `compare` draws its
 * figure row's.
 *
 * Stable ids: a schedule may reorder micro-batches (the adaptive schedule searches an order and
 * renumbers them), so a panel numbers each micro-batch by the rank of its smallest trace sample
 * id among the iteration's micro-batches: the same micro-batch carries the same number in every
 * panel of the same batching.
 *
 * Ownership: a panel owns its arrays; panel_release frees them. A failed panel_collect leaves
 * the panel released (empty).
 */
#ifndef PANELS_H
#define PANELS_H

#include "study.h"

typedef struct panel_op {
    int stage, op, chunk; /* op: OP_F, OP_B or OP_W */
    int id;               /* stable micro-batch id (above) */
    double t0_ms, t1_ms;  /* from the iteration's start */
    int mbs, enc_len, dec_len, n_samples; /* the micro-batch's shape */
} panel_op;

typedef struct panel_mem {
    int stage;
    double t_ms;
    double mb; /* the stage's model state + activations held after the change */
} panel_mem;

typedef struct panel {
    char schedule[32];
    int pp, chunks;
    double makespan_ms;      /* the iteration's simulated time */
    double pipeline_bubble;  /* the iteration's pipeline bubble (study.h), mean of stages */
    double closed_form_bubble; /* the iteration's closed form's; NAN: none */
    double mem_limit_mb;
    int microbatches;
    int oom;
    panel_op *ops;
    size_t n_ops, cap_ops;
    panel_mem *mem;
    size_t n_mem, cap_mem;
} panel;

/* Collecting from a run of one's own: a sink (on_op, on_mem with the collector as ctx) that
 * keeps iteration `iteration` of replica `replica`, then panel_finish with the run's result. */
typedef struct panel_collector {
    panel *p;
    int iteration, replica;
    int64_t t0_ns; /* the iteration's first op start */
    int have_t0;
    int32_t *keys; /* per op: the micro-batch's smallest sample id */
    size_t cap_keys;
    int past;      /* an op of a later iteration was seen: nothing more is kept */
    dp_status st;
} panel_collector;

void panel_collector_init(panel_collector *c, panel *out, int iteration, int replica);
void panel_on_op(void *collector, const sim_op *o);
void panel_on_mem(void *collector, const sim_mem *m);
/* Completes the panel from the run's result r (schedule, pp and chunks as run, the device
 * memory): times from the iteration's start, stable ids, each stage's model state added to its
 * memory. INVALID when the run has fewer iterations than asked (nothing collected); frees the
 * collector's own memory either way, and on failure releases the panel. */
dp_status panel_finish(panel_collector *c, const study_result *r, const char *sched_name, int pp,
                       int chunks, double mem_limit_mb, dp_err *err);

/* Frees what the collector holds and releases its panel: after a failed panel_finish or none,
 * and after a successful one too (the panel is then gone: draw it first). */
void panel_collector_release(panel_collector *c);

/* Runs study o (its sink is replaced) on trace t up to iteration `iteration` and collects that
 * iteration's ops and memory of replica `replica` (the two steps above). INVALID when the run
 * has fewer iterations or replicas; the study's errors as they come. */
dp_status panel_collect(const study_opts *o, const trace *t, int iteration, int replica, panel *out,
                        dp_err *err);
void panel_release(panel *p);

/* A panel's title, as every figure and the page print it: "zb1: 27.00 ms, 8 micro-batches,
 * pipeline bubble 11.11% (closed form 11.11%)", and ", out of memory" where it is. */
void panel_heading(const panel *p, char *buf, size_t cap);

#endif /* PANELS_H */
