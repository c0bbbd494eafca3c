/*
 * setup.h — a request (request.h) resolved into what a run needs (plan_env: model, hardware with
 * the what-if overrides, the cost model or one per recompute mode, the trace loaded or streamed,
 * the length rules, the memory budget), and the study options (study.h) that run it. Also the
 * simulator's configuration of a plan read from a file.
 *
 * Ownership: plan_env owns its cost models and trace; plan_env_release frees them (and is safe on
 * an env whose set-up failed). Errors: DP_ERR_INVALID for contradictory or unknown choices,
 * DP_ERR_IO for files, with the message naming the option or file.
 */
#ifndef PLANNER_SETUP_H
#define PLANNER_SETUP_H

#include "../scheduler/batch.h"
#include "../sim/sim.h"
#include "../traces/trace.h"
#include "request.h"

/* Resolves model and hardware and builds the cost model the options ask for. The model's measured
 * profile is used by default when the hardware's GPU is the one it was measured on (A100-40GB);
 * otherwise the analytic model. *source describes the choice for the user. The analytic model at
 * its default parameters on a GPU they were not fitted to says so on stderr, once per process
 * (analytic_params_provenance). */
dp_status planner_build_cost(const cost_request *o, model_spec *m, cluster_spec *hw, cost_model **cm,
                         char *source, size_t source_cap, dp_err *err);

/* The same at tensor parallelism tp and one recompute mode rc, whatever o says of them (one of
 * --recompute dynamic's modes, a point of tune's search). */
dp_status planner_build_cost_at(const cost_request *o, int tp, recompute_mode rc, model_spec *m,
                            cluster_spec *hw, cost_model **cm, char *source, size_t source_cap,
                            dp_err *err);

/* dpsim cost's answer for one micro-batch shape: its layers' figures, and the planner's own stage
 * model's (stage_cost.h, memory unbounded: a query) on pp stages. */
typedef struct cost_answer {
    cost_layer layer[2];   /* the encoder's (GPT: the layer's), T5's decoder's */
    int has_moe;           /* a mixture of experts: its MoE layer's below */
    cost_layer moe;
    double moe_imbalance;  /* the busiest ep rank's load over the mean at this shape */
    double moe_dropped;    /* the share of its routed copies dropped (--capacity-factor; 0) */
    mb_cost stage;         /* per stage: times and activation memory */
    int slowest;           /* the stage of the largest forward + backward */
    int feasible;          /* 0: the cost model cannot answer the shape (err says why) */
    cost_attn_fit fit[2];  /* a profile's fitted attention term per component, where has_fit */
    int has_fit[2];
} cost_answer;

/* Answers shape s on cm over pp stages into *a. DP_OK with a->feasible 0 and err filled when the
 * cost model cannot answer it; DP_ERR_INVALID when the stages do not take the model (err says
 * why); other errors as stage_model_cost's. */
dp_status planner_cost_answer(const cost_model *cm, int pp, const cost_shape *s, cost_answer *a,
                              dp_err *err);

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

/* The header of the plan file that p on env writes: names, degrees, rules, what it was priced
 * with, and the model and cluster specs as JSON text (so that it runs from any directory), which
 * h->model_json and h->hw_json own (the caller frees both; NULL when out of memory). */
void planner_plan_header(const plan_request *p, const plan_env *env, plan_header *h);

/* The title of a run's summary: "VERB: batching, schedule, model on cluster, tp x cp x pp x dp =
 * N GPUs; trace …; cost …" into buf. */
void planner_run_title(const char *verb, const plan_request *p, const plan_env *env, char *buf,
                       size_t cap);

/* Resolves p into env (loads the trace and the cost model). Usage-like problems (unknown
 * strategy, contradictory flags) come back as DP_ERR_INVALID. */
dp_status planner_setup(const plan_request *p, plan_env *env, dp_err *err);
void plan_env_release(plan_env *env);

/* A study (planner/study.h) of batching + schedule with the plan options and the resolved env; the
 * caller adds what it needs (plan output, timeline sink, progress, validation). */
struct study_opts;
void planner_study_opts(const plan_request *p, const plan_env *env, const char *batching,
                    const char *sched, struct study_opts *o);

/* The simulator configuration of a plan read from a file (model state, links), from its header;
 * hw receives the hardware and must outlive cfg. Checks the plan against its model
 * (plan_check_model; where names the plan). */
dp_status planner_sim_config(const plan *pl, const char *where, const plan_request *p, cluster_spec *hw,
                              model_spec *model, sim_config *cfg, dp_err *err);

/* Simulates a plan read from a file as its header says (planner_sim_config), every iteration into
 * res (study.h; the caller releases it), each op to sink (NULL: none); hw and cfg receive the
 * hardware and configuration it ran on. DP_OK, or the first failure (res then holds what ran). */
struct sim_sink;
struct study_result;
dp_status planner_replay(const plan *pl, const char *where, const plan_request *p,
                         const struct sim_sink *sink, cluster_spec *hw, sim_config *cfg,
                         struct study_result *res, dp_err *err);

#endif /* PLANNER_SETUP_H */
