/*
 * hw.h — GPUs and clusters: peak rates, memory, attention kernels, links and the collectives
 * NCCL runs over them.
 *
 * A cluster_spec is what `--hw` names: a GPU, how many sit in a node, the GPU-to-GPU link inside a
 * node (NVLink: per GPU, per direction) and the network between nodes (nics_per_node NICs of
 * inter_gbit each; a rail-optimised node has one per GPU), each with a latency, and the bus
 * bandwidth NCCL achieves on them per collective as a share of the link (coll_eff; busBW as
 * nccl-tests defines it, models/comm.h turns it into time). A what-if link rate (--link-gbps)
 * keeps those shares. Ranks are placed node by node: GPUs g and g' share a node when
 * g / gpus_per_node == g' / gpus_per_node.
 *
 * Units: FLOP/s as TFLOP/s (1e12), bandwidths of memory in GB/s (1e9 bytes), link bandwidths in
 * Gbit/s (1e9 bits) as vendors quote them, latencies in microseconds, memory in MB (1e6 bytes, the
 * unit of the measured profiles), efficiencies as shares in (0, 1].
 *
 * JSON spec:
 *   {"name": "my-cluster", "gpu": "a100-40gb" | {"name":…, "peak_tflops":…, "hbm_gbps":…,
 *    "mem_mb":…}, "gpus_per_node": 8, "intra_gbit": 2400, "intra_latency_us": 2,
 *    "inter_gbit": 200, "inter_latency_us": 5, "nics_per_node": 8, "mem_limit_mb": 72000,
 *    "intra_eff": {"all_reduce": 0.77, "all_gather": …, "reduce_scatter": …, "all_to_all": …,
 *                  "send_recv": …}, "inter_eff": {…}}
 * A GPU object may also give fp8_tflops, fp8_matmul_eff, matmul_eff, gemm_k0, fp8_gemm_k0,
 * nvls_eff and attention_kernel (a name of
 * attn_kernels; none: attention is timed unfused). mem_limit_mb (optional, default
 * HW_USABLE_SHARE of the GPU's memory) is the usable device memory the planner respects; "nodes"
 * (optional, 0: as many as a layout needs) bounds the GPUs;
 * nics_per_node (optional) defaults to gpus_per_node; intra_eff and inter_eff (optional; when
 * given, every collective must be named) default to the GPU preset's own shares inside a node
 * and to 1 (the wire rate) between nodes. Every rate and share must be positive and finite, and a
 * share at most 1: anything else is refused naming the file and field.
 */
#ifndef HW_H
#define HW_H

#include "../common/dp.h"

#define HW_NAME_MAX 64

/* The collectives a training step runs, as nccl-tests names them (its *_perf binaries). */
typedef enum hw_coll {
    COLL_ALL_REDUCE,
    COLL_ALL_GATHER,
    COLL_REDUCE_SCATTER,
    COLL_ALL_TO_ALL,
    COLL_SEND_RECV,
    COLL_COUNT,
} hw_coll;

const char *hw_coll_name(hw_coll k); /* "all_reduce", …: the JSON keys */

/* Where a collective runs: over NVLink inside a node, or over the NICs between nodes. */
typedef enum hw_scope { SCOPE_INTRA, SCOPE_INTER, SCOPE_COUNT } hw_scope;

/* A fused attention kernel's measured throughput (FlashAttention's own benchmark tables), head
 * dimension 128, bf16/fp16, forward and backward, causal and not, at ATTN_KERNEL_LENS sequence
 * lengths 2k, 4k, 8k and 16k. TFLOP/s as the tables count them: a forward is 4 * s^2 * head_dim *
 * heads FLOPs per sample (halved when causal), a backward 2.5 times its forward. Between lengths
 * the throughput is interpolated in log2(length), held at the ends. */
#define ATTN_KERNEL_LENS 4
typedef struct attn_kernel {
    const char *name;                   /* "fa2-h100": what --attention-kernel takes */
    double fwd_causal[ATTN_KERNEL_LENS], bwd_causal[ATTN_KERNEL_LENS]; /* TFLOP/s */
    double fwd_full[ATTN_KERNEL_LENS], bwd_full[ATTN_KERNEL_LENS];     /* TFLOP/s, not causal */
    double hd64_share; /* throughput at head dimension 64 over 128 (linear between, 1 above) */
    const char *source;                 /* the benchmark table the figures are read from */
    const char *runs_on; /* the GPU presets of the architecture it was measured on and needs
                          * ("h100,h200,h100-hbm2e"): --attention-kernel is refused on another
                          * preset. The first is the GPU it was measured on
                          * (attn_kernel_peak_share); kernels of one architecture list the same
                          * presets in the same order, which is how a stack finds its kernel for
                          * a GPU's architecture (stack.h) */
} attn_kernel;

/* The kernel's throughput at an attention length (tokens) and head dimension, TFLOP/s. */
double attn_kernel_tflops(const attn_kernel *k, int backward, int causal, double len,
                          int head_dim);

typedef struct gpu_spec {
    char name[HW_NAME_MAX];
    double peak_tflops; /* dense bf16/fp16 tensor-core peak, TFLOP/s */
    double fp8_tflops;  /* dense fp8 tensor-core peak, TFLOP/s; 0: none (A100) */
    double hbm_gbps;    /* device memory bandwidth, GB/s */
    double mem_mb;      /* device memory, MB */
    const char *source; /* datasheet the numbers come from */
    /* NVLink per GPU, per direction, Gbit/s, and NCCL's bus bandwidth over it as a share of that
     * rate, per collective (an 8-GPU NVSwitch node, large messages), with its source; what a
     * GPU name (--hw h100) and its cluster presets use inside a node */
    double nvlink_gbit;
    double nvlink_eff[COLL_COUNT];
    const char *nvlink_source;
    double nvls_eff;   /* NVLink SHARP all-reduce (in-switch reduction: each GPU sends and
                        * receives the buffer once) as algBW / link rate; 0: none (A100) */
    double matmul_eff; /* the best bf16 GEMM throughput measured on it, share of peak: what the
                        * analytic model's GEMM efficiency, fitted on an A100, is scaled by */
    const attn_kernel *attn; /* the fused attention kernel a 2026 trainer runs on it; NULL: none
                              * measured (the analytic model then prices unfused attention) */
    const char *node;        /* the cluster preset a GPU name resolves to (its links) */
    int comm_on_cores; /* 1: its communication runs on the cores that compute (CPU ranks: MPI
                        * copies through shared memory), so none of it overlaps the compute,
                        * whatever --overlap says; 0: beside it (a GPU's NCCL kernels and copy
                        * engines). "comm_on_cores" in a cluster JSON's "gpu" */
    double fp8_matmul_eff; /* the best FP8 (e4m3) GEMM throughput measured on it, share of
                            * fp8_tflops; 0: none measured (--precision fp8 refused) */
    /* GEMM efficiency by shape: a GEMM of inner dimension K runs at K / (K + k0) of its
     * large-K rate (each output tile's fixed prologue and epilogue cost as much as k0 more of
     * K), bf16 and FP8; 0: not measured on this GPU, every shape at one rate (cost.h
     * cost_gemm_shape_eff). "gemm_k0" and "fp8_gemm_k0" in a cluster JSON's "gpu" */
    double gemm_k0, fp8_gemm_k0;
} gpu_spec;

/* The share of a GPU's memory the planner may use when a preset or a GPU name does not say:
 * 36,000 of 40,960 MB, DynaPipe's setting on p4d (the rest: CUDA context, NCCL and cuBLAS
 * workspaces, allocator fragmentation). A cluster JSON's mem_limit_mb overrides it. */
#define HW_USABLE_SHARE (36000.0 / 40960.0)

/* The A100's best measured bf16 GEMM, 271.2 of 312 TFLOP/s (ml-engineering's "Maximum Achievable
 * Matmul FLOPS" table): the GPU the analytic model's defaults were fitted on (gpu_spec.matmul_eff) */
#define HW_A100_MATMUL_EFF (271.2 / 312)

/* Per-GPU speed variation among GPUs of one part: Sinha et al., "Not All GPUs Are Created Equal"
 * (arXiv 2208.11035v3): "8% (max 22%) average performance variation even though the GPU
 * architecture and vendor SKU are identical within each cluster" (V100 and MI60 clusters of
 * hundreds of GPUs; none of H100 published). Read as the expected spread between a cluster's
 * fastest and slowest GPU, for ~256 GPUs 2 x 2.79 = 5.6 standard deviations of a normal, a per-GPU
 * coefficient of variation of 0.08 / 5.6 = 1.4%. An assumption: --gpu-jitter sets another. */
#define HW_GPU_JITTER 0.014

typedef struct cluster_spec {
    char name[HW_NAME_MAX];
    gpu_spec gpu;
    int gpus_per_node;
    int nodes;                           /* 0: as many as a layout needs; a GPU name: 1 */
    double intra_gbit, intra_latency_us; /* within a node: per GPU, per direction */
    double inter_gbit, inter_latency_us; /* between nodes: per NIC, per direction */
    int nics_per_node;                   /* NICs of inter_gbit in a node (rails) */
    double coll_eff[SCOPE_COUNT][COLL_COUNT]; /* NCCL busBW / link rate, (0, 1] */
    double mem_limit_mb;                 /* usable device memory for the planner, MB */
    double gpu_jitter;                   /* how much one GPU's speed differs from another's of the
                                          * same part, as a coefficient of variation: a
                                          * synchronous step waits for the slowest of its GPUs
                                          * (models/straggler.h). HW_GPU_JITTER for the GPU
                                          * presets and a JSON spec's default ("gpu_jitter"); 0
                                          * for p4d (DynaPipe's cost model, kept as the authors
                                          * had it) and CPU ranks (a measured run has its own) */
    int nccl_tree;                       /* 1: an all-reduce across nodes takes NCCL's tree where
                                          * that is faster than the ring (models/comm.h); 0:
                                          * rings only (p4d: DynaPipe's cost model; CPU ranks:
                                          * MPI's own). JSON "nccl_tree", default true */
    const char *net_source;              /* where the NICs and their shares come from */
} cluster_spec;

/* An attention kernel by name ("fa2-a100", …), for --attention-kernel; NULL when none. The
 * table: attn_kernels. */
const attn_kernel *attn_kernel_find(const char *name);
/* Whether kernel k runs on (and was measured for) the GPU named gpu: 1 when gpu is one of
 * k->runs_on or not a preset at all (a user's GPU, whose architecture dpsim cannot tell). */
int attn_kernel_runs_on(const attn_kernel *k, const char *gpu);
const attn_kernel *attn_kernels(int *count);
/* The share of kernel k's measured rates that GPU gpu reaches (neither NULL): its bf16 peak over the peak of the
 * GPU k was measured on (the first preset of k->runs_on), since a fused kernel's rate scales with
 * the tensor cores' clock (an H100 held to a lower power limit, a user's GPU of its own peak); 1
 * where that GPU is unknown. */
double attn_kernel_peak_share(const attn_kernel *k, const gpu_spec *gpu);

const gpu_spec *gpu_preset(const char *name);
const gpu_spec *gpu_presets(int *count);
/* The preset of a GPU from the name its driver reports ("NVIDIA H200", "NVIDIA A100-SXM4-40GB"),
 * the first preset whose part number the name holds; NULL when none does. */
const gpu_spec *gpu_preset_for_device(const char *device_name);
/* Fills c with the named cluster preset; 0 on success, -1 when there is none. */
int cluster_preset(const char *name, cluster_spec *c);
int cluster_preset_count(void);
int cluster_preset_at(int i, cluster_spec *c);

/* Resolves NAME as a cluster preset, a GPU preset (one node of its own cluster preset,
 * gpu_spec.node), or a JSON file. */
dp_status cluster_resolve(const char *name_or_path, cluster_spec *c, dp_err *err);
dp_status cluster_parse_json(const char *text, const char *name, cluster_spec *c, dp_err *err);
dp_status cluster_write_json(const cluster_spec *c, const char *path, dp_err *err);
/* The spec as the JSON object cluster_parse_json reads (the caller deletes it); NULL: no memory. */
struct cJSON;
struct cJSON *cluster_to_json(const cluster_spec *c);

/* Applies what-if overrides of both links (negative = keep): the NVLink and NIC rates become
 * gbit, the latencies latency_us; NCCL's shares of them are kept. */
void cluster_override_links(cluster_spec *c, double gbit, double latency_us);

#endif /* HW_H */
