/*
 * tune_run.h — dpsim tune's search run: every point of a search space (tune.h) simulated in
 * forked workers (common/pool.h), ranked, written as it goes and resumable; compare --tuned runs
 * the same search.
 */
#ifndef PLANNER_TUNE_RUN_H
#define PLANNER_TUNE_RUN_H

#include <signal.h>

#include "setup.h"
#include "study.h"
#include "tune.h"

/* tune's --cp, --precision and --ep: a list to search ("1,2,4", "bf16,fp8", "1,8"), or, as for
 * plan and sim, one value (--cp: or auto; then the request's cost_request holds it and n is 0;
 * --ep is always a list, of one degree or more, and leaves the request's ep at 1).
 * tune_list_option rewires the table's row of that name (from cost_request_options) to fill this;
 * pass vals and n to planner_tune_space. A list leaves the request at the value the set-up is to
 * check (--cp: its largest degree, where --cp-kind applies; --precision: fp8 where listed, the one a
 * GPU may lack, else the first), and each point sets its own. */
typedef enum tune_list_kind { TUNE_LIST_CP, TUNE_LIST_PRECISION, TUNE_LIST_EP } tune_list_kind;
typedef struct tune_list_arg {
    tune_list_kind kind;
    int vals[TUNE_MAX_CP], n; /* (TUNE_MAX_CP >= TUNE_MAX_PRECISION, TUNE_MAX_EP) */
    cost_request *cost;
    int (*request_call)(void *ctx, const char *arg, const char *cmd, const char *usage);
    void *request_ctx;
    void (*request_show)(const void *ctx, char *buf, size_t cap);
} tune_list_arg;
void tune_list_option(cli_opts *t, tune_list_kind kind, tune_list_arg *a, cost_request *cost);
/* The list as given ("1,2,4"; one value or "auto" as the request shows it). */
void tune_list_describe(const tune_list_arg *a, char *buf, size_t cap);

/* The ranking's configuration, OUT.config beside out (the options, the inputs' contents, the
 * search's lists: config), before a search. resume: the one there must be config (DP_ERR_INVALID
 * naming the first line that differs, or that it cannot be read); else, on rank 0, an earlier
 * ranking at out is removed and config written through a temporary (DP_ERR_IO naming the file).
 * out NULL: nothing. */
/* What a ranking means, the text tune_output_begin keeps beside it and a resume compares: the
 * request's options and inputs (plan_request_config), the GPUs, the batchings and schedules,
 * --cp's list, whether exhaustive, and where they differ from the defaults earlier rankings were
 * made with, --zero-pipeline, --precision's list and a mixture of experts' ep list; into out. */
void tune_config_of(const plan_request *p, const plan_env *env, const tune_space *sp,
                    const char *batchings, const char *schedules, const tune_list_arg *cps,
                    const tune_list_arg *precisions, int exhaustive, char *out, size_t cap);

dp_status tune_output_begin(const char *out, const char *config, int resume, int rank, dp_err *err);

/* Runs one point of the search with base's other options on env's trace and length rules (what
 * tune scores it on). cms[m], when given, are the cost models of the point's precision, tp and cp
 * per recompute mode (tune builds them once); NULL: they are built for this run. prune_ms > 0: the run stops
 * once it cannot finish within that much simulated time (study_opts.prune_ms; r->pruned_ms). */
dp_status planner_tune_point(const plan_request *base, const plan_env *env, const tune_point *pt,
                       cost_model *const *cms, double prune_ms, study_result *r, dp_err *err);
/* The search space of *gpus GPUs (0: the cluster's, else a node's) over the batchings, the
 * schedules (a chunked one at each of the space's chunk counts), the context-parallel degrees
 * cps[0 .. n_cps - 1] (n_cps 0: the request's --cp alone, its group under auto) and the precisions
 * precs[0 .. n_precs - 1] (train_precision values; n_precs 0: the request's --precision, else the
 * model's) and a mixture of experts' expert-parallel degrees eps[0 .. n_eps - 1] (n_eps 0:
 * TUNE_DEFAULT_EPS's that divide the experts and fit a node; a dense model: 1); DP_ERR_INVALID when
 * the cluster has fewer GPUs (unless --allow-oversubscribe), a degree does not divide *gpus (naming
 * it and the nearest counts), an ep does not divide the experts, or --ep names a dense model. */
dp_status planner_tune_space(const plan_request *p, const plan_env *env, int *gpus,
                             const char *const *bs, int nb, const char *const *ss, int ns,
                             const int *cps, int n_cps, const int *precs, int n_precs,
                             const int *eps, int n_eps, tune_space *sp, dp_err *err);
/* How a search runs (all zero: quietly but for a terminal's progress, nothing written, to the
 * end). */
typedef struct tune_run_opts {
    const char *out;      /* the ranking CSV, rewritten as results come (through a temporary and a
                           * rename, every TUNE_WRITE_EVERY_S and at the end: a crash leaves a
                           * valid CSV of what finished); NULL: none. A write that fails sets it
                           * NULL (no more writes) and planner_tune returns that DP_ERR_IO at the
                           * end, with the results */
    int resume;           /* read out's rows first and run only the other points */
    int quiet;            /* no progress lines */
    int progress_lines;   /* a progress line (dp_note) every TUNE_PROGRESS_EVERY_S, terminal
                           * or not (else only on a terminal) */
    int terminal;         /* the notes go to a terminal: one progress line rewritten in place */
    const volatile sig_atomic_t *stop; /* set by a signal: no point starts after it (pool.h) */
    int exhaustive;       /* every point simulated to the end, none pruned (below) */
    /* Spread over processes (dpsim tune under mpirun): this process is `rank` of `ranks` and runs
     * every ranks-th point of each pass; after each pass allgather(ctx, mine, &all) hands every
     * process the others' results (a collective: every rank calls it as often, in the same
     * order; `all` is malloc'd, the ranks' texts one after another; 0 on success). Only rank 0
     * writes out. ranks 0 or 1: one process (allgather unused). */
    int rank, ranks;
    int (*allgather)(void *ctx, const char *mine, char **all);
    void *allgather_ctx;
    /* filled in: */
    long resumed;         /* points read back from out */
    long ran, died;       /* points run now, and of those the ones whose worker died */
    int stopped;          /* 1: *stop cut the search short (the ranking holds what finished) */
} tune_run_opts;
#define TUNE_WRITE_EVERY_S 2.0
#define TUNE_PROGRESS_EVERY_S 5.0

/* dpsim tune's search (planner/tune.h) over sp, every configuration simulated with the base options
 * (its --iterations global batches, tune_scoring_trace's, where the trace is in memory; lengths,
 * memory) in `jobs` forked workers, one cost model per (precision, cp, tp, mode) built before the
 * fork. *out
 * (ranked, tune_rank; the caller frees it) holds n results; those not run (stopped) have
 * done 0. run may be NULL. Progress lines give done/total, the best so far and an ETA from the
 * work left (each batching's mean time per configuration so far, over the workers).
 *
 * Pruning, where the trace is in memory: the search runs in three passes. The first pass is each
 * batching's points of the first schedule without recompute (tune_first_pass), run as two: its
 * four "seeds" whose tokens alone bound their time the least (study_floor_ms), then the rest of
 * it; the last pass is everything else. A point of a later pass runs with a cut-off from its
 * batching's best of the earlier passes (as the CSV writes it): one whose lower bound on time
 * (before planning an iteration, its and the later iterations' tokens at their best rate; after,
 * schedule_time_lower_bound; summed over its iterations) says it cannot reach that throughput
 * stops there, not ok, its why TUNE_WHY_PRUNED and the throughput it could at most reach. So a
 * batching's best is never pruned, and which points are depends on the inputs only (a resumed
 * search prunes the same ones: where an earlier pass had lost a point to a dead worker, the later
 * rows it read, cut at the figure without that point, run again once the earlier passes are
 * whole and give another figure). */
dp_status planner_tune(const plan_request *base, const plan_env *env, const tune_space *sp, int jobs,
                   tune_run_opts *run, tune_result **out, long *n, dp_err *err);

#endif /* PLANNER_TUNE_RUN_H */
