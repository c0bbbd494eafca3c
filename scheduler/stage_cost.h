/*
 * stage_cost.h — what one micro-batch costs on each pipeline stage, and whether it fits in memory.
 *
 * A stage_model binds a cost model to a pipeline layout: S stages (devices), C interleaved chunks
 * per device, D data-parallel replicas and a ZeRO stage. Layers are split evenly over the S*C
 * virtual stages (T5: encoder layers on the first half, decoder layers on the second), so a device
 * holds the layers of its C chunks.
 *
 * For a micro-batch shape it returns, per device s:
 *   fwd_ms[s], bwd_ms[s]   enc_s*(fwd, bwd of an encoder layer) + dec_s*(… decoder layer)
 *                          + the LM head on the last device
 *   stored_mb[s]           activations the micro-batch keeps on s from its forward to its backward
 *   peak_mb[s]             stored_mb[s] + the largest transient of one layer
 * and t_ms = max_s (fwd_ms[s] + bwd_ms[s]): the stage time the DP objective uses (for T5 the
 * slower of the encoder and decoder stages).
 *
 * Memory: model state per device (fp16 weights and grads, fp32 Adam, divided by ZeRO;
 * models/memory.h) leaves budget_mb[s] = mem_limit - state[s] for activations. The planner's
 * per-micro-batch rule (mem_rule) is what a schedule holds: with holds[s] micro-batches stored on
 * device s at once (the schedule's own count, schedule.h) and one op running, a micro-batch fits
 * when on every device
 *     holds[s] * stored_mb[s] + (peak_mb[s] - stored_mb[s]) / C  <=  scale * budget_mb[s]
 * which is exact for equal micro-batches. For unequal ones it is a screen: the plan built from
 * them is checked with the plan machine's exact memory (pm_rank_peak, the figure the simulator
 * reaches), and the planner lowers scale and plans again where it does not fit (sim/study.c).
 */
#ifndef STAGE_COST_H
#define STAGE_COST_H

#include "../models/cost.h"
#include "../models/placement.h"

#define STAGE_MAX 256 /* pipeline stages (devices) */
#define REPLICA_MAX 4096 /* data-parallel replicas: --dp's range, a plan file's "dp", tune's
                          * layouts */
/* The largest time (ms) or memory (MB) of one micro-batch on a stage: what a plan may hold and
 * the simulator's integer nanosecond clock adds up safely (plan_machine.h PLAN_MAX_VALUE);
 * stage_model_cost refuses a cost beyond it (DP_ERR_INFEASIBLE naming the shape). */
#define STAGE_MAX_VALUE COST_VALUE_MAX

/* A memo of layer costs by micro-batch shape (what stage_model_cost asks the cost model): a run
 * that prices the same micro-batches again — auto's candidates under each schedule, the plan built
 * from a batcher's list — looks them up instead. Fixed size (direct-mapped: a new shape replaces
 * the one in its slot); answers are the cost model's own, so a memo changes no figure. The caller
 * that makes it owns it and attaches it to stage models (stage_model.memo) whose cost model it
 * does not change while attached. */
typedef struct stage_memo stage_memo;
#define STAGE_MEMO_SLOTS 4096 /* the planner's: about 1 MB */
/* A memo of `slots` shapes (at least 1); NULL when out of memory (then no memo: as fast as
 * before). */
stage_memo *stage_memo_new(int slots);
void stage_memo_free(stage_memo *m);

typedef struct stage_model {
    const cost_model *cm;
    stage_memo *memo; /* NULL (stage_model_init's): none; else layer costs by shape, not owned */
    int pp;         /* S: devices in the pipeline */
    int chunks;     /* C: interleaved model chunks per device */
    placement_kind placement; /* how the chunks sit on the devices (placement.h): a loop, or a
                               * V (ZB-V); stage_model_init_placed */
    int head_device; /* the device of the last virtual stage: the LM head's */
    int warmup;     /* > 0: at most this many forwards (model chunks) before a device's first
                     * backward, where the schedule's warm-up rule asks more (--warmup; the
                     * schedules that warm up: schedule.h warms_up); 0: the rule. Set after
                     * stage_model_init, which leaves 0 */
    int dp;         /* D: data-parallel replicas */
    int zero_ranks; /* the GPUs of a tensor-parallel rank that hold the same weights: dp x cp
                     * (cost_model.cp). Gradients are reduced over them (Megatron's
                     * data-parallel-with-context-parallel group) */
    int zero_shard; /* the GPUs among them that ZeRO's state is split over: zero_ranks, or under
                     * hybrid sharding (HSDP, --shard-group) a group of consecutive ones (cp x k
                     * GPUs of k replicas), its shards all-reduced with the other groups' */
    int zero_stage; /* 0..3 */
    int expert_shard; /* the GPUs a MoE's routed experts' state is split over: each expert's
                       * share is replicated over a stage's tp x cp x dp / (ep x etp) GPUs, its
                       * expert-data-parallel group (Megatron's parallel folding), of which
                       * those in a shard group under HSDP (at least 1) */
    double mem_limit_mb;
    int enc_layers[STAGE_MAX], dec_layers[STAGE_MAX]; /* layers held by each device */
    int moe_layers[STAGE_MAX]; /* of enc_layers, the mixture-of-experts ones (COMP_MOE) */
    double state_mb[STAGE_MAX];                       /* model state per device, MB (with
                                                       * zero3_gathered_mb) */
    double zero3_gathered_mb[STAGE_MAX]; /* ZeRO-3 over 2+ GPUs: the running and the prefetched
                                          * unit's fp16 parameters held whole (the two largest
                                          * of layers, embedding, head), part of the
                                          * state (not of a micro-batch's peak, which interleaved
                                          * chunks share); 0 otherwise */
    double param_mb[STAGE_MAX];                       /* fp16 parameters per device, MB */
    double expert_mb[STAGE_MAX]; /* of them, the MoE layers' routed experts (cost_moe_expert_mb) */
    double budget_mb[STAGE_MAX];                      /* activation budget per device, MB */
    /* ZeRO's collectives on device s (models/comm.h comm_zero) over its data-parallel group
     * (comm_dp_group; a MoE's routed experts' bytes over their expert-data-parallel group,
     * comm_stage_group): those of every micro-batch, which stage_model_cost adds to fwd_ms /
     * bwd_ms (after the compute, or prefetched behind it with COST_OVERLAP_ZERO: the longer of
     * the two plus one layer's share of the collectives), and the end of the iteration's, which
     * the simulator runs (sim_config.allreduce_ms; grad_ms of it may overlap the last backward) */
    double zero_fwd_ms[STAGE_MAX], zero_bwd_ms[STAGE_MAX], zero_iter_ms[STAGE_MAX];
    double zero_grad_ms[STAGE_MAX];
} stage_model;

/* The planner's memory rule (above). */
typedef struct mem_rule {
    double holds[STAGE_MAX]; /* micro-batches held on each device at once, >= 1 (may be fractional:
                              * interleaved chunks hold 1/C of a micro-batch each) */
    double scale;            /* share of the activation budget the rule may use, (0, 1] */
} mem_rule;

/* Every device holds `holds` micro-batches; scale 1. */
void mem_rule_uniform(mem_rule *r, int pp, double holds);

typedef struct mb_cost {
    double fwd_ms[STAGE_MAX], bwd_ms[STAGE_MAX];
    double xfwd_ms[STAGE_MAX], xbwd_ms[STAGE_MAX]; /* of them, a MoE's token exchange (plan.h) */
    double stored_mb[STAGE_MAX], peak_mb[STAGE_MAX];
    double t_ms; /* max over devices of fwd + bwd */
} mb_cost;

/* Fails when pp exceeds the layers, a T5 pipeline has an odd pp > 1, or the model state alone
 * does not fit in memory (with the per-device figures). ZeRO-2 and 3 combine with a pipeline as
 * FSDP does under torchtitan's and Megatron-FSDP's pipeline schedules with resharding after each
 * forward: each micro-batch gathers its stage's parameters for the forward and again for the
 * backward and reduce-scatters its gradients (models/comm.h comm_zero), the running and the
 * prefetched unit held whole (zero3_gathered_mb, in state_mb: the two largest of a stage's
 * layers, embedding and head; memory_zero3_gathered_mb). FSDP that keeps the parameters gathered for the whole
 * step (torchtitan's default with a pipeline) moves and holds what ZeRO-1 does: --zero 1. */
dp_status stage_model_init(stage_model *sm, const cost_model *cm, int pp, int chunks, int dp,
                           int zero_stage, double mem_limit_mb, dp_err *err);
/* The same with ZeRO's state split over shard_group GPUs of the data-parallel group (HSDP: k
 * replicas' cp x k GPUs, those placed together, models/mesh.h) and its gradient shards
 * all-reduced across the dp / k groups (comm_zero's replicas); 0 or dp x cp: every GPU of it
 * (stage_model_init). DP_ERR_INVALID (naming --shard-group and the nearest valid sizes) for a
 * group under ZeRO 0, or one that is not cp times a divisor of dp. */
dp_status stage_model_init_sharded(stage_model *sm, const cost_model *cm, int pp, int chunks, int dp,
                                   int zero_stage, int shard_group, double mem_limit_mb, dp_err *err);
/* The same with the chunks placed as k says (a V for ZB-V: schedule.h placement); the others
 * place them in a loop. */
dp_status stage_model_init_placed(stage_model *sm, const cost_model *cm, int pp, int chunks, int dp,
                                  int zero_stage, int shard_group, placement_kind k,
                                  double mem_limit_mb, dp_err *err);
/* The GPUs ZeRO's state is split over for a --shard-group of shard_group with dp replicas at
 * context parallelism cp: shard_group where it is fewer than dp x cp (HSDP), else dp x cp (0, or
 * the whole group). The one reading of the field for the stage model, the plan header, the
 * runtime and tune. */
int stage_shard_size(int shard_group, int dp, int cp);
/* Device s's model state, MB, as ZeRO splits it (memory.h memory_model_state_parts): the
 * parameters over zero_shard GPUs, a MoE's routed experts over expert_shard. The one rule of
 * state_mb (less ZeRO-3's gathered units) and of what the study reports. */
void stage_state_parts(const stage_model *sm, int s, double *weights_mb, double *grads_mb,
                       double *optimizer_mb);
/* Whether sm's MoE layers exchange tokens across data-parallel replicas (models/mesh.h
 * mesh_experts_span_replicas): 0 for a dense model. */
int stage_experts_span(const stage_model *sm);
/* Whether shard_group is a valid --shard-group for dp replicas at context parallelism cp under
 * ZeRO stage zero (the rule above): 0, or -1 with why (naming the nearest valid sizes; why may be
 * NULL with cap 0). */
int stage_shard_check(int shard_group, int dp, int cp, int zero, char *why, size_t cap);

/* Costs of one micro-batch shape; DP_ERR_INFEASIBLE when the cost model cannot answer it, or its
 * answer exceeds STAGE_MAX_VALUE (implausible rates: the message names the shape and figure). */
dp_status stage_model_cost(const stage_model *sm, const cost_shape *s, mb_cost *out, dp_err *err);

/* A lower bound on device d's forward plus backward time of any micro-batch, per real token: one
 * of E encoder (GPT: sequence) and D decoder tokens costs it at least *enc_ms * E + *dec_ms * D
 * (cost_token_floor_ms over the device's layers, the LM head's on the last device; ZeRO's
 * collectives only add; under --cp auto the heaviest part holds at least its share). 0 and 0
 * where there is no bound (toy costs, a measured profile). A search bounds a configuration's time
 * by it before planning any micro-batch (planner/study.c). */
void stage_model_token_floor(const stage_model *sm, int d, double *enc_ms, double *dec_ms);

/* A device's compute of compute_ms with ZeRO's per-micro-batch collectives of zero_ms over its
 * `layers` layers (stage_model_cost's rule): serial, compute + zero; prefetched layer by layer
 * (each layer's gathered while the one before computes), the longer of the two streams plus one
 * layer's share of the collectives, which stays exposed. */
double stage_with_zero(double compute_ms, double zero_ms, int layers, int prefetch);
/* Whether sm's cost model prefetches ZeRO's collectives (COST_OVERLAP_ZERO). */
int stage_zero_prefetch(const stage_model *sm);
/* The inverse use: a time with_ms that stage_with_zero gave, re-priced with the collectives
 * k >= 1 times as long (dpsim validate: a runtime that moved k times the plan's bytes). Serial:
 * with + (k - 1) zero; prefetched: max(with - zero / layers, k zero) + k zero / layers, exact for
 * a time of stage_with_zero alone (on the last stage the LM head's time, which the plan adds to
 * the same figure, can make it short by up to that time where the compute lies between zero and
 * k zero). */
double stage_zero_rescaled(double with_ms, double zero_ms, int layers, int prefetch, double k);

/* Only t_ms, and whether the shape fits under the rule (the planner's inner loop). Returns DP_OK
 * and *fits; DP_ERR_INFEASIBLE when the cost model cannot answer. */
dp_status stage_model_time(const stage_model *sm, const cost_shape *s, const mem_rule *rule,
                           double *t_ms, int *fits);

/* --cp auto (cost_model.cp_auto): the degree a micro-batch of shape s (its cp ignored) runs at,
 * a divisor of the group cm->cp: the fastest that fits under the rule, the group's own where none
 * does. stage_model_time picks it for a shape whose cp is 0; stage_model_cost prices a shape at
 * its cp (0: the group's). */
int stage_model_pick_cp(const stage_model *sm, const cost_shape *s, const mem_rule *rule);

/* Whether a costed micro-batch fits under the rule; if not and why is non-NULL, says which
 * device and limit. */
int stage_model_fits(const stage_model *sm, const mb_cost *c, const mem_rule *rule, char *why,
                     size_t why_cap);
/* The same from a micro-batch's stored and peak activations per device (sm->pp of each, MB):
 * what stage_model_fits asks of its mb_cost, for a caller that kept only those. */
int stage_model_fits_mb(const stage_model *sm, const double *stored_mb, const double *peak_mb,
                        const mem_rule *rule, char *why, size_t why_cap);

#endif /* STAGE_COST_H */
