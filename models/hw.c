#include "hw.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_util.h"

static const gpu_spec GPUS[] = {
    {"a100-40gb", 312, 1555, 40960, "NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB), 2021"},
    {"a100-80gb", 312, 2039, 81920, "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB), 2021"},
    {"h100", 989, 3350, 81920, "NVIDIA H100 Tensor Core GPU datasheet (SXM5), 2023"},
    {"h200", 989, 4800, 144384, "NVIDIA H200 Tensor Core GPU datasheet (SXM), 2024"},
    /* A 2-core CPU rank of the validation runtime; rates are placeholders for the analytic
     * model until `dpsim calibrate` fits a measured profile. */
    {"cpu", 0.05, 10, 4096, "rough figures for one core of a small x86 server"},
};
#define N_GPUS ((int)(sizeof GPUS / sizeof GPUS[0]))

/* A cluster preset: the GPU by name, so that the GPU table stays the one source of its figures. */
typedef struct cluster_row {
    const char *name, *gpu;
    int gpus_per_node;
    double intra_gbit, intra_latency_us, inter_gbit, inter_latency_us;
    double mem_limit_mb; /* 0: the GPU's memory */
} cluster_row;

static const cluster_row CLUSTERS[] = {
    /* DynaPipe's experiments: AWS p4d.24xlarge, 600 GB/s NVLink, 100 Gbit/s between nodes with
     * 4 ms latency in the authors' cost model; 36,000 MB planner limit on the 40 GB cards. The
     * others (mem_limit 0) keep back the same share, HW_USABLE_SHARE, for the CUDA context, the
     * libraries' workspaces and fragmentation. */
    {"p4d", "a100-40gb", 8, 4800, 0, 100, 4000, 36000},
    {"dgx-a100", "a100-80gb", 8, 4800, 2, 1600, 5, 0},
    {"dgx-h100", "h100", 8, 7200, 2, 3200, 5, 0},
    {"h200-node", "h200", 8, 7200, 2, 3200, 5, 0},
    {"cpu", "cpu", 16, 80, 1, 10, 50, 0},
};
#define N_CLUSTERS ((int)(sizeof CLUSTERS / sizeof CLUSTERS[0]))

const gpu_spec *gpu_preset(const char *name)
{
    for (int i = 0; i < N_GPUS; i++)
        if (strcmp(GPUS[i].name, name) == 0) return &GPUS[i];
    return NULL;
}

const gpu_spec *gpu_preset_for_device(const char *device_name)
{
    static const struct {
        const char *part, *preset;
    } by_name[] = {{"H200", "h200"}, {"H100", "h100"}, {"A100-SXM4-80GB", "a100-80gb"},
                   {"A100 80GB", "a100-80gb"}, {"A100", "a100-40gb"}};
    for (size_t i = 0; device_name && i < sizeof by_name / sizeof by_name[0]; i++)
        if (strstr(device_name, by_name[i].part)) return gpu_preset(by_name[i].preset);
    return NULL;
}

const gpu_spec *gpu_presets(int *count)
{
    *count = N_GPUS;
    return GPUS;
}

int cluster_preset_count(void)
{
    return N_CLUSTERS;
}

int cluster_preset_at(int i, cluster_spec *c)
{
    if (i < 0 || i >= N_CLUSTERS) return -1;
    const cluster_row *r = &CLUSTERS[i];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", r->name);
    c->gpu = *gpu_preset(r->gpu);
    c->gpus_per_node = r->gpus_per_node;
    c->intra_gbit = r->intra_gbit;
    c->intra_latency_us = r->intra_latency_us;
    c->inter_gbit = r->inter_gbit;
    c->inter_latency_us = r->inter_latency_us;
    c->mem_limit_mb = r->mem_limit_mb > 0 ? r->mem_limit_mb : HW_USABLE_SHARE * c->gpu.mem_mb;
    return 0;
}

int cluster_preset(const char *name, cluster_spec *c)
{
    for (int i = 0; i < N_CLUSTERS; i++)
        if (strcmp(CLUSTERS[i].name, name) == 0) return cluster_preset_at(i, c);
    return -1;
}

void cluster_override_links(cluster_spec *c, double gbit, double latency_us)
{
    if (gbit > 0) c->intra_gbit = c->inter_gbit = gbit;
    if (latency_us >= 0) c->intra_latency_us = c->inter_latency_us = latency_us;
}

dp_status cluster_parse_json(const char *text, const char *name, cluster_spec *c, dp_err *err)
{
    dp_status st = DP_OK;
    cJSON *root = NULL;
    TRY(json_parse_object(text, name, &root, err));
    memset(c, 0, sizeof *c);
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(root, "name");
    snprintf(c->name, sizeof c->name, "%s", cJSON_IsString(nm) ? nm->valuestring : "custom");
    const cJSON *g = cJSON_GetObjectItemCaseSensitive(root, "gpu");
    if (cJSON_IsString(g)) {
        const gpu_spec *p = gpu_preset(g->valuestring);
        if (!p) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: field \"gpu\": unknown GPU preset \"%s\"", name,
                         g->valuestring);
            goto out;
        }
        c->gpu = *p;
    } else if (cJSON_IsObject(g)) {
        const cJSON *gn = cJSON_GetObjectItemCaseSensitive(g, "name");
        snprintf(c->gpu.name, sizeof c->gpu.name, "%s", cJSON_IsString(gn) ? gn->valuestring : "gpu");
        TRY(json_double(g, "peak_tflops", name, 1e-6, 1e6, 1, 0, &c->gpu.peak_tflops, err));
        TRY(json_double(g, "hbm_gbps", name, 1e-3, 1e7, 1, 0, &c->gpu.hbm_gbps, err));
        TRY(json_double(g, "mem_mb", name, 1, 1e9, 1, 0, &c->gpu.mem_mb, err));
        c->gpu.source = "user JSON";
    } else {
        st = dp_fail(err, DP_ERR_PARSE, "%s: field \"gpu\" must be a preset name or an object",
                     name);
        goto out;
    }
    TRY(json_int(root, "gpus_per_node", name, 1, 1 << 20, 8, &c->gpus_per_node, err));
    TRY(json_int(root, "nodes", name, 0, 1 << 20, 0, &c->nodes, err));
    TRY(json_double(root, "intra_gbit", name, 1e-6, 1e9, 1, 0, &c->intra_gbit, err));
    TRY(json_double(root, "intra_latency_us", name, 0, 1e9, 0, 0, &c->intra_latency_us, err));
    TRY(json_double(root, "inter_gbit", name, 1e-6, 1e9, 0, c->intra_gbit, &c->inter_gbit, err));
    TRY(json_double(root, "inter_latency_us", name, 0, 1e9, 0, c->intra_latency_us,
                    &c->inter_latency_us, err));
    TRY(json_double(root, "mem_limit_mb", name, 1, 1e9, 0, HW_USABLE_SHARE * c->gpu.mem_mb,
                    &c->mem_limit_mb, err));
out:
    cJSON_Delete(root);
    return st;
}

dp_status cluster_resolve(const char *name_or_path, cluster_spec *c, dp_err *err)
{
    if (cluster_preset(name_or_path, c) == 0) return DP_OK;
    const gpu_spec *g = gpu_preset(name_or_path);
    if (g) { /* one node of this GPU with NVLink-class links */
        cluster_preset("dgx-h100", c);
        c->gpu = *g;
        c->mem_limit_mb = HW_USABLE_SHARE * g->mem_mb;
        c->nodes = 1;
        snprintf(c->name, sizeof c->name, "%s", g->name);
        return DP_OK;
    }
    char *text = NULL;
    if (json_slurp(name_or_path, &text, NULL) != DP_OK)
        return dp_fail(err, DP_ERR_INVALID,
                       "unknown hardware \"%s\": neither a preset nor a readable file\nhint: "
                       "'dpsim models' lists the presets",
                       name_or_path);
    dp_status st = cluster_parse_json(text, name_or_path, c, err);
    free(text);
    return st;
}

cJSON *cluster_to_json(const cluster_spec *c)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON *g = cJSON_AddObjectToObject(o, "gpu");
    cJSON_AddStringToObject(g, "name", c->gpu.name);
    cJSON_AddNumberToObject(g, "peak_tflops", c->gpu.peak_tflops);
    cJSON_AddNumberToObject(g, "hbm_gbps", c->gpu.hbm_gbps);
    cJSON_AddNumberToObject(g, "mem_mb", c->gpu.mem_mb);
    cJSON_AddNumberToObject(o, "gpus_per_node", c->gpus_per_node);
    if (c->nodes) cJSON_AddNumberToObject(o, "nodes", c->nodes);
    cJSON_AddNumberToObject(o, "intra_gbit", c->intra_gbit);
    cJSON_AddNumberToObject(o, "intra_latency_us", c->intra_latency_us);
    cJSON_AddNumberToObject(o, "inter_gbit", c->inter_gbit);
    cJSON_AddNumberToObject(o, "inter_latency_us", c->inter_latency_us);
    cJSON_AddNumberToObject(o, "mem_limit_mb", c->mem_limit_mb);
    return o;
}

dp_status cluster_write_json(const cluster_spec *c, const char *path, dp_err *err)
{
    cJSON *o = cluster_to_json(c);
    if (!o) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    dp_status st = json_write_file(o, path, err);
    cJSON_Delete(o);
    return st;
}
