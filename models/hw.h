/*
 * hw.h — GPUs and clusters: peak rates, memory, and the links between pipeline stages.
 *
 * A cluster_spec is what `--hw` names: a GPU, how many sit in a node, and two kinds of link
 * (intra-node and inter-node), each with a bandwidth and a latency. Consecutive pipeline stages
 * (and data-parallel replicas) are placed node by node: ranks r and r+1 share a node when
 * r / gpus_per_node == (r+1) / gpus_per_node.
 *
 * Units: FLOP/s as TFLOP/s (1e12), bandwidths of memory in GB/s (1e9 bytes), link bandwidths in
 * Gbit/s (1e9 bits) as vendors quote them, latencies in microseconds, memory in MB (1e6 bytes, the
 * unit of the measured profiles).
 *
 * JSON spec:
 *   {"name": "my-cluster", "gpu": "a100-40gb" | {"name":…, "peak_tflops":…, "hbm_gbps":…,
 *    "mem_mb":…}, "gpus_per_node": 8, "intra_gbit": 4800, "intra_latency_us": 0,
 *    "inter_gbit": 100, "inter_latency_us": 4000, "mem_limit_mb": 36000}
 * mem_limit_mb (optional, default HW_USABLE_SHARE of the GPU's memory) is the usable device
 * memory the planner respects; "nodes" (optional, 0: as many as a layout needs) bounds the GPUs.
 */
#ifndef HW_H
#define HW_H

#include "../common/dp.h"

#define HW_NAME_MAX 64

typedef struct gpu_spec {
    char name[HW_NAME_MAX];
    double peak_tflops; /* dense bf16/fp16 tensor-core peak, TFLOP/s */
    double hbm_gbps;    /* device memory bandwidth, GB/s */
    double mem_mb;      /* device memory, MB */
    const char *source; /* datasheet the numbers come from */
} gpu_spec;

/* The share of a GPU's memory the planner may use when a preset or a GPU name does not say:
 * 36,000 of 40,960 MB, DynaPipe's setting on p4d (the rest: CUDA context, NCCL and cuBLAS
 * workspaces, allocator fragmentation). A cluster JSON's mem_limit_mb overrides it. */
#define HW_USABLE_SHARE (36000.0 / 40960.0)

typedef struct cluster_spec {
    char name[HW_NAME_MAX];
    gpu_spec gpu;
    int gpus_per_node;
    int nodes;                           /* 0: as many as a layout needs; a GPU name: 1 */
    double intra_gbit, intra_latency_us; /* within a node */
    double inter_gbit, inter_latency_us; /* between nodes */
    double mem_limit_mb;                 /* usable device memory for the planner, MB */
} cluster_spec;

const gpu_spec *gpu_preset(const char *name);
const gpu_spec *gpu_presets(int *count);
/* The preset of a GPU from the name its driver reports ("NVIDIA H200", "NVIDIA A100-SXM4-40GB"),
 * the first preset whose part number the name holds; NULL when none does. */
const gpu_spec *gpu_preset_for_device(const char *device_name);
/* Fills c with the named cluster preset; 0 on success, -1 when there is none. */
int cluster_preset(const char *name, cluster_spec *c);
int cluster_preset_count(void);
int cluster_preset_at(int i, cluster_spec *c);

/* Resolves NAME as a cluster preset, a GPU preset (one node of 8 with NVLink), or a JSON file. */
dp_status cluster_resolve(const char *name_or_path, cluster_spec *c, dp_err *err);
dp_status cluster_parse_json(const char *text, const char *name, cluster_spec *c, dp_err *err);
dp_status cluster_write_json(const cluster_spec *c, const char *path, dp_err *err);
/* The spec as the JSON object cluster_parse_json reads (the caller deletes it); NULL: no memory. */
struct cJSON;
struct cJSON *cluster_to_json(const cluster_spec *c);

/* Applies what-if overrides of both links (negative = keep). */
void cluster_override_links(cluster_spec *c, double gbit, double latency_us);

#endif /* HW_H */
