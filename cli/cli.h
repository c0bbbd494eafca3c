/*
 * cli.h — helpers shared by the dpsim subcommands: errors, numbers, data files, version.
 *
 * Exit codes: 0 success, 1 runtime failure (bad input file, infeasible plan, I/O), 2 usage error
 * (unknown option or subcommand, bad option value, subcommand not built yet).
 */
#ifndef CLI_H
#define CLI_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "../common/dp.h"
#include "../models/cost.h"
#include "../scheduler/batch.h"
#include "../scheduler/plan.h"
#include "../sim/sim.h"
#include "../traces/trace.h"
#include "options.h"

#define DPSIM_VERSION "0.1.0"

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* Prints "dpsim CMD: message" and "usage: USAGE" (and a --help hint) on stderr; returns 2. */
int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prints "dpsim CMD: error: message" (multi-line messages keep their hint lines); returns 1. */
int cli_fail(const char *cmd, const dp_err *err);

/* Parses an option value as an integer in [lo, hi]; on failure prints a usage error naming the
 * option and returns -1 (caller returns EXIT_USAGE). */
int cli_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
            int64_t *out);

/* Parses a finite floating-point option value in [lo, hi], as cli_int. */
int cli_double(const char *cmd, const char *opt, const char *text, double lo, double hi,
               double *out);

/* Resolves a file shipped with dpsim (e.g. "traces/flanv2-100k.csv"). Looks in $DPSIM_DATA,
 * then beside the executable's parent folder (build/..), then in the source tree dpsim was
 * built from. Returns buf, or NULL when not found (buf then holds the last candidate). */
const char *cli_data_path(const char *rel, char *buf, size_t cap);

/* 1 when stderr is a terminal (progress bars are drawn only then). */
int cli_stderr_is_tty(void);

/* Warns on stderr, once per process, when a run's whole trace was one global batch smaller than
 * asked (study_result.short_batch_tokens): its figures are not those of the batch asked for. */
struct study_result;
void cli_warn_short_trace(const struct study_result *r, int64_t global_tokens);

/* A study_opts.progress callback: "\rWHAT: 42.0% of the trace, ETA 12 s" on stderr (ctx is the
 * WHAT string; the ETA from the elapsed time since the first call for that ctx). */
void cli_progress(void *ctx, size_t done, size_t total);

/* Subcommand entry points: argc/argv start at the subcommand name. */
int cmd_trace(int argc, char **argv);
int cmd_plot(int argc, char **argv);


/* ---- choosing a cost model from options (shared by cost, calibrate, plan, sim, compare) ---- */


/* cost_opts.recompute_dynamic: --recompute dynamic (DynaPipe's first mode that fits), mixed
 * (then per micro-batch), fastest (per iteration, the mode whose plan simulates fastest among
 * those that fit) */
enum { RECOMPUTE_PER_ITERATION = 1, RECOMPUTE_PER_MB = 2, RECOMPUTE_FASTEST = 3 };

typedef struct cost_opts {
    const char *model;   /* preset or file                               [gpt-6.7b-16l] */
    const char *hw;      /* cluster/GPU preset or file                   [p4d] */
    const char *profile; /* measured profile CSV; NULL = the model's own when the GPU matches */
    const char *fit;     /* fitted analytic model (dpsim calibrate -o) */
    int analytic;        /* 1: use the analytic model even if a profile exists */
    int tp;              /* tensor parallelism                           [1] */
    int cp;              /* context parallelism (cost_model_set_cp)      [1] */
    int cp_alltoall;     /* --cp-kind all-to-all (else ring)                 */
    recompute_mode recompute; /*                                          [none] */
    int recompute_dynamic;    /* --recompute dynamic (RECOMPUTE_PER_ITERATION): a mode per
                               * iteration (plan_env.recompute_cm); mixed (RECOMPUTE_PER_MB): then
                               * per micro-batch; 0: recompute for all. cli_build_cost refuses
                               * both */
    const char *model_json, *hw_json; /* specs given as JSON text (a plan's): used instead of
                                       * resolving model / hw */
    int flash_attn;      /* --flash-attention: FlashAttention whatever the model says
                          * (cost_model.flash_attn) */
    int no_flash_attn;   /* --no-flash-attention: unfused attention whatever the model says;
                          * neither: the model's own (model_spec.flash_attn) */
    const char *attn_kernel; /* --attention-kernel: the fused kernel's tables (hw.h); NULL: the
                              * GPU's own */
    unsigned overlap;    /* --overlap: COST_OVERLAP_* bits          [dp,zero] */
    int no_sp;           /* --no-sp: tensor parallelism without Megatron's sequence parallelism
                          * (cost_model.seq_parallel, on by default) */
    int quiet;           /* 1: no note on stderr about the analytic defaults (a cost model built
                          * for what is not timed: a plan's model state) */
} cost_opts;

void cost_opts_default(cost_opts *o);

/* What --recompute said: "none", "selective", "full", "dynamic", "mixed" or "fastest". */
const char *recompute_choice_name(const cost_opts *o);
/* What a plan made with it says in its header (plan.h): "fastest" is "dynamic" there, a mode per
 * iteration like DynaPipe's rule; the others as said. */
const char *recompute_plan_name(const cost_opts *o);

/* Resolves model and hardware and builds the cost model the options ask for. The model's measured
 * profile is used by default when the hardware's GPU is the one it was measured on (A100-40GB);
 * otherwise the analytic model. *source describes the choice for the user. The analytic model at
 * its default parameters on a GPU they were not fitted to says so on stderr, once per process
 * (analytic_params_provenance). */
dp_status cli_build_cost(const cost_opts *o, model_spec *m, cluster_spec *hw, cost_model **cm,
                         char *source, size_t source_cap, dp_err *err);

/* The same at tensor parallelism tp and one recompute mode rc, whatever o says of them (one of
 * --recompute dynamic's modes, a point of tune's search). */
dp_status cli_build_cost_at(const cost_opts *o, int tp, recompute_mode rc, model_spec *m,
                            cluster_spec *hw, cost_model **cm, char *source, size_t source_cap,
                            dp_err *err);

/* Appends the cost-model options (--model, --hw, --profile, --fit, --analytic, --tp, --no-sp,
 * --recompute, --flash-attention, --no-flash-attention, --attention-kernel, --overlap) into o to
 * a command's table (options.h). */
void cli_cost_options(cli_opts *t, cost_opts *o);

/* ---- plan options (shared by plan, sim, compare, sweep) ---------------------------------------- */


typedef struct plan_cli {
    cost_opts cost;
    const char *trace;     /* trace file                       [traces/flanv2-100k.csv] */
    const char *batching;  /*                                   [dynamic] */
    const char *schedule;  /*                                   [1f1b] */
    int pp, dp, chunks, zero, mbs;
    int64_t mb_tokens, global_tokens;
    int max_seqlen, max_dec_seqlen; /* 0: defaults (2048; T5 decoder: 512) */
    double thin_ms;
    int dp_split;          /* DP_SPLIT_AUTO | _GLOBAL | _REPLICA                 [auto] */
    int iterations;        /* 0: the whole trace */
    double mem_limit_mb;   /* 0: the hardware's */
    double link_gbit, link_latency_us; /* what-if overrides; < 0 keeps the cluster's */
    int stream;            /* read the trace CSV as a stream (bounded memory) */
    int allow_oversubscribe;   /* a layout of more GPUs than the cluster has, as a what-if */
    int keep_going;            /* iterations that cannot be planned to fit are left out */
    const char *toy_costs;     /* --toy-costs F,B[,W]: textbook costs (cost.h cost_toy) */
    int microbatches;          /* with toy_costs and no trace: that many equal samples of
                                * --max-seqlen tokens, one iteration                  [8] */
    const char *fixed_by_plan; /* the first option given that a plan file fixes ("pp", "model",
                                * ...: its long name), NULL if none: refused beside --plan */
} plan_cli;

void plan_cli_default(plan_cli *p);

/* Appends the plan options (the cost model's, then --trace, --batching, --schedule, --pp, ...)
 * into p to a command's table (options.h). Those a plan file fixes carry OPT_FIXED_BY_PLAN, those
 * tune searches OPT_TUNED; after parsing, cli_plan_parsed copies the first fixed one given into
 * p->fixed_by_plan. */
void cli_plan_options(cli_opts *t, plan_cli *p);
void cli_plan_parsed(const cli_opts *t, plan_cli *p);

/* Everything a plan needs, resolved: model, hardware (with overrides), cost model, trace, rules. */
typedef struct plan_env {
    model_spec model;
    cluster_spec hw;
    cost_model *cm;
    cost_model *recompute_cm[RECOMPUTE_COUNT]; /* --recompute dynamic: one per mode (cm is the
                                                * first); all NULL otherwise */
    char cost_source[4200];
    trace trace;
    char trace_path[4096];
    const char *stream_path; /* set when the trace is streamed rather than loaded */
    batch_rules rules;
    double mem_limit_mb;
} plan_env;

/* Sets one plan option by its long name ("max-seqlen", "batching", ...), as a sweep grid does:
 * 1 set, 0 no such option, -1 bad value (message printed). */
int cli_plan_set(plan_cli *p, const char *name, const char *value, const char *cmd,
                 const char *usage);

/* A study's configuration as text, to tell whether a resumed output was made with the same
 * inputs: cli_plan_describe's lines (less skip), then "NAME_hash=..." of the contents of every
 * input file (trace, model, hw, profile, fit; a preset's name has none), then the dpsim
 * version. Two configurations are compared line by line with cli_config_differs. */
void cli_plan_config(const plan_cli *p, const char *const *skip, int n_skip, char *buf, size_t cap);
/* The first line where two configurations differ, as "NAME=A there, NAME=B here" in what; 0 if
 * none. */
int cli_config_differs(const char *there, const char *here, char *what, size_t cap);

/* The canonical text of a plan option's value ("1" and "true" of a flag are both "true"; 4 and
 * 04 are "4"), as the option table prints it: what tells two grid values apart. 0, or -1 when
 * the name is not a plan option or the value is refused (the option's usage error is printed,
 * as on the command line). */
int cli_plan_canonical(const plan_cli *base, const char *name, const char *value, char *buf,
                       size_t cap);

/* --schedule auto: runs the plan options under every schedule (planner/study.h study_best_schedule)
 * and sets p->schedule to the fastest that fits, saying so on stderr; any other schedule is left
 * as it is. The set-up's errors as cli_plan_setup's. */
dp_status cli_choose_schedule(plan_cli *p, dp_err *err);

/* Resolves p into env (loads the trace and the cost model). Usage-like problems (unknown
 * strategy, contradictory flags) come back as DP_ERR_INVALID. */
dp_status cli_plan_setup(const plan_cli *p, plan_env *env, dp_err *err);
/* The GPUs of a layout: tp x cp x pp x dp (the set-up's check, compare's title, sweep --gpus). */
static inline long long cli_plan_gpus(const plan_cli *p)
{
    return (long long)p->cost.tp * p->cost.cp * p->pp * p->dp;
}
void plan_env_release(plan_env *env);

/* A study (planner/study.h) of batching + schedule with the plan options and the resolved env; the
 * caller adds what it needs (plan output, timeline sink, progress, validation). */
struct study_opts;
void cli_study_opts(const plan_cli *p, const plan_env *env, const char *batching,
                    const char *sched, struct study_opts *o);

/* The simulator configuration of a plan read from a file (model state, links), from its header;
 * hw receives the hardware and must outlive cfg. Checks the plan against its model
 * (plan_check_model; where names the plan). */
dp_status cli_plan_sim_config(const plan *pl, const char *where, const plan_cli *p, cluster_spec *hw,
                              model_spec *model, sim_config *cfg, dp_err *err);

/* Every plan and cost option's value as "name=value" lines, in the order of their table rows
 * (cli_plan_options: an option added there is described too), leaving out those that change
 * no result (OPT_NO_RESULT) and those named in skip (a sweep's grid keys): a study's
 * configuration, comparable as text. */
void cli_plan_describe(const plan_cli *p, const char *const *skip, int n_skip, char *buf,
                       size_t cap);

/* Refuses (DP_ERR_INVALID, common/outfile.h) outputs that are the same file as an input of the
 * plan options (the trace, or the default trace; profile, fit, model and hardware files),
 * extra inputs (e.g. --plan), or each other. p may be NULL (no plan options). */
dp_status cli_check_outputs(const plan_cli *p, const out_role *extra_in, int n_extra,
                            const out_role *outs, int n_out, dp_err *err);

/* Splits a comma list into at most max names (pointers into buf, which strtok cuts); -1 when
 * it has more. */
int cli_split_list(char *buf, const char **items, int max);

/* --batchings and --schedules of compare and tune, split and checked: every name a known
 * batcher or schedule (interleaved only where interleaved_ok), neither list empty, at most
 * METHOD_LIST_MAX each. 0, or -1 after a usage error. */
#define METHOD_LIST_MAX 16
typedef struct method_lists {
    char buf_b[256], buf_s[256]; /* the lists, cut by cli_split_list */
    const char *batchings[METHOD_LIST_MAX], *schedules[METHOD_LIST_MAX];
    int nb, ns;
} method_lists;
int cli_method_lists(const char *cmd, const char *usage, const char *batchings,
                     const char *schedules, int interleaved_ok, method_lists *out);

/* The machine's cores: the default worker count of sweep and tune. */
int cli_jobs_default(void);

struct tune_space;
struct tune_result;
struct tune_point;
struct study_result;
/* Runs one point of the search with base's other options on env's trace and length rules (what
 * tune scores it on). cms[m], when given, are the cost models of the point's tp per recompute
 * mode (tune builds them once); NULL: they are built for this run. */
dp_status cli_tune_run(const plan_cli *base, const plan_env *env, const struct tune_point *pt,
                       cost_model *const *cms, struct study_result *r, dp_err *err);
/* The search space of *gpus GPUs (0: the cluster's, else a node's) over the batchings and the
 * schedules (interleaved left out); DP_ERR_INVALID when the cluster has fewer GPUs (unless
 * --allow-oversubscribe). */
dp_status cli_tune_space(const plan_cli *p, const plan_env *env, int *gpus, const char *const *bs,
                         int nb, const char *const *ss, int ns, struct tune_space *sp, dp_err *err);
/* How a search runs (all zero: quietly but for a terminal's progress, nothing written, to the
 * end). */
typedef struct tune_run_opts {
    const char *out;      /* the ranking CSV, rewritten as results come (through a temporary and a
                           * rename, every TUNE_WRITE_EVERY_S and at the end: a crash leaves a
                           * valid CSV of what finished); NULL: none. A write that fails sets it
                           * NULL (no more writes) and cli_tune returns that DP_ERR_IO at the
                           * end, with the results */
    int resume;           /* read out's rows first and run only the other points */
    int quiet;            /* no progress lines */
    int progress_lines;   /* a progress line every TUNE_PROGRESS_EVERY_S on stderr, terminal
                           * or not (else only on a terminal) */
    const volatile sig_atomic_t *stop; /* set by a signal: no point starts after it (pool.h) */
    /* filled in: */
    long resumed;         /* points read back from out */
    long ran, died;       /* points run now, and of those the ones whose worker died */
    int stopped;          /* 1: *stop cut the search short (the ranking holds what finished) */
} tune_run_opts;
#define TUNE_WRITE_EVERY_S 2.0
#define TUNE_PROGRESS_EVERY_S 5.0

/* dpsim tune's search (planner/tune.h) over sp, every configuration simulated with the base options
 * (its --iterations global batches, tune_scoring_trace's, where the trace is in memory; lengths,
 * memory) in `jobs` forked workers, one cost model per (tp, mode) built before the fork. *out
 * (ranked, tune_rank; the caller frees it) holds n results; those not run (stopped) have
 * done 0. run may be NULL. Progress lines give done/total, the best so far and an ETA from the
 * work left (each batching's mean time per configuration so far, over the workers). */
dp_status cli_tune(const plan_cli *base, const plan_env *env, const struct tune_space *sp, int jobs,
                   tune_run_opts *run, struct tune_result **out, long *n, dp_err *err);

int cmd_plan(int argc, char **argv);
int cmd_tune(int argc, char **argv);
int cmd_validate(int argc, char **argv);
int cmd_sim(int argc, char **argv);
int cmd_compare(int argc, char **argv);
int cmd_sweep(int argc, char **argv);

int cmd_models(int argc, char **argv);
int cmd_cost(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);

#endif /* CLI_H */
