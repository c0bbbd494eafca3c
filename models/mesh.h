/*
 * mesh.h — where every GPU of a layout sits: the one rule for rank numbers, the groups that
 * communicate and the GPUs each spans. The simulator's collectives (which GPUs share a node and
 * its NICs), dprun's MPI and NCCL communicators and its profile groups all ask it; no other module
 * computes a rank from degrees.
 *
 * A layout has four degrees, fastest first: tensor parallelism (tp), context parallelism (cp), the
 * data-parallel replicas (dp) and the pipeline's stages (pp). A GPU's rank (its MPI rank in dprun,
 * its GPU number in the simulator) is
 *
 *     rank = ((stage * dp + replica) * cp + cp_rank) * tp + tp_rank
 *
 * Megatron-Core's default order (parallel_state's "tp-cp-ep-dp-pp", the first fastest) and
 * torchtitan's device mesh (["pp", "dp_replicate", "dp_shard", "cp", "tp"], the last fastest): a
 * pipeline rank's tp x cp GPUs are consecutive, tensor-parallel ones innermost (on one node's
 * NVLink first), then a stage's replicas, so that its data-parallel (and expert) groups sit
 * together, and the stages outermost. GPUs are numbered on nodes in rank order (gpus_per_node
 * consecutive ranks to a node). A plan's rank index (plan_iter.ranks, `group` below) is
 * replica * pp + stage, whatever the GPU order.
 *
 * A group of kind k is the GPUs that differ only in k's dimensions: its colour numbers the group
 * among the groups of its kind (0 .. mesh_groups - 1, a valid MPI_Comm_split colour), its key a
 * member's place in it (0 .. size - 1; the dimensions of k flattened, fastest first). Adding a
 * dimension is a field here, its place in the order, and the kinds that contain it.
 *
 * Degrees below 1 count as 1. Pure functions of their arguments; nothing to free.
 */
#ifndef MESH_H
#define MESH_H

#include "../common/dp.h"
#include "model.h"

typedef struct mesh {
    int tp, cp, pp, dp;
} mesh;

/* A GPU's place: its coordinate along each degree. */
typedef struct mesh_coord {
    int tp_rank, cp_rank, stage, replica;
} mesh_coord;

/* The groups that communicate, by the dimensions their members differ in. */
typedef enum mesh_kind {
    MESH_TP,       /* tensor parallelism: the tp GPUs of one (cp rank, stage, replica) */
    MESH_CP,       /* context parallelism: the cp GPUs of one (tp rank, stage, replica) */
    MESH_PP,       /* one pipeline: the pp stages of one (tp rank, cp rank, replica) */
    MESH_DP,       /* the dp replicas of one (tp rank, cp rank, stage) */
    MESH_DP_CP,    /* the gradients' and ZeRO's group: the dp x cp GPUs of one (tp rank, stage),
                    * which hold the same parameters (cp rank fastest) */
    MESH_TP_CP,    /* one pipeline rank: the tp x cp GPUs running its instructions together */
    MESH_KINDS
} mesh_kind;

/* One GPU's group of a kind. */
typedef struct mesh_group {
    int colour; /* which group of the kind (0 .. mesh_groups - 1) */
    int key;    /* the GPU's place in it (0 .. size - 1) */
    int size;   /* its members */
} mesh_group;

/* A mesh of the given degrees (below 1 read as 1). */
mesh mesh_of(int tp, int cp, int pp, int dp);
/* GPUs in the mesh: tp x cp x pp x dp. */
long long mesh_size(const mesh *m);
/* GPUs per pipeline rank: tp x cp. */
int mesh_width(const mesh *m);

/* The rank of the GPU at c (coordinates are taken modulo their degree). */
long long mesh_rank(const mesh *m, mesh_coord c);
/* The coordinates of rank r (0 <= r < mesh_size). */
mesh_coord mesh_place(const mesh *m, long long r);
/* The plan's rank index (plan_iter.ranks) of the pipeline rank holding c: replica * pp + stage. */
int mesh_group_index(const mesh *m, mesh_coord c);
/* The rank of the first GPU (tp and cp rank 0) of the plan's rank index `group`. */
long long mesh_group_first(const mesh *m, int group);

/* The group of kind k that the GPU at c belongs to. */
mesh_group mesh_group_of(const mesh *m, mesh_coord c, mesh_kind k);
/* How many groups of kind k the mesh holds (mesh_size / their size). */
long long mesh_groups(const mesh *m, mesh_kind k);
/* The rank of member `key` (0 .. size - 1) of the group of kind k that holds c. */
long long mesh_member(const mesh *m, mesh_coord c, mesh_kind k, int key);

/* Whether kind k's groups contain the dimension of degree `which` (0 tp, 1 cp, 2 pp, 3 dp: this
 * numbering, not the rank order's). */
int mesh_kind_has(mesh_kind k, int which);

/* What a layout needs of a model, the one rule the planner's cost model and dprun both apply:
 * tensor parallelism gives each of its tp GPUs whole attention heads, whole key/value heads and an
 * equal share of the MLP width (Megatron's column-parallel layers divide them; the vocabulary it
 * pads, so that need not divide). degree names tp in the message ("--tp" for an option, "tp" for
 * a plan's). DP_OK, or DP_ERR_INVALID naming the first width not divided, with the largest tp
 * dividing them all as the hint. */
dp_status mesh_check_model(const model_spec *m, const mesh *l, const char *degree, dp_err *err);

/* The multiple every micro-batch's padded length must be of on this layout: context parallelism
 * cuts each sequence into 2 cp chunks (the causal balance), and sequence parallelism splits each
 * cp rank's tokens over tp (seq_parallel 1); 1 without either. */
int mesh_token_multiple(const mesh *l, int seq_parallel);

/* Whether a mixture of experts' exchange group reaches across data-parallel replicas: an expert
 * rank is ep x etp consecutive GPUs of a stage's tp x cp x dp (Megatron's parallel folding), so
 * it spans replicas where ep x etp exceeds a replica's tp x cp, and the replicas' micro-batches
 * meet in every MoE layer's all-to-all. */
int mesh_experts_span_replicas(const mesh *m, int ep, int etp);

#endif /* MESH_H */
