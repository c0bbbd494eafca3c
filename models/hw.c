#include "hw.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_util.h"

/* ---- attention kernels ----------------------------------------------------------------------
 * TFLOP/s at 2k, 4k, 8k and 16k tokens, head dimension 128, 16-bit, read from the kernels' own
 * benchmark figures (batch x length = 16k tokens, 2048 wide, FlashAttention's
 * benchmarks/benchmark_flash_attention.py, which counts a forward as 4 s^2 d heads FLOPs, halved
 * when causal, and a backward as 2.5 forwards). Where a figure was not published it is inferred
 * from the same kernel family, and the source says how. The head dimension 64 share is the same
 * figures' forward at 16k, not causal, hd 64 over hd 128 (B200: FlashAttention-3's). */
static const attn_kernel KERNELS[] = {
    {"fa2-a100",
     {183, 194, 202, 206}, {146, 161, 172, 178}, {222, 225, 227, 228}, {178, 187, 193, 197},
     324 / 370.0,
     "FlashAttention-2 on A100 (Dao 2023, arXiv 2307.08691: forward up to 73% and backward up to "
     "63% of the 312 TFLOP/s peak at 16k, not causal); the shape over lengths and the causal "
     "share are FlashAttention-2's on H100 (FlashAttention-3 paper, arXiv 2407.08608, Figs. 5-6)",
     "a100-40gb,a100-80gb"},
    {"fa2-h100",
     {298, 315, 328, 335}, {240, 263, 282, 291}, {362, 365, 368, 370}, {291, 305, 316, 322},
     324 / 370.0,
     "FlashAttention-2 on H100 SXM5 (FlashAttention-3 paper, arXiv 2407.08608, Figs. 5-6); causal "
     "backward inferred as the non-causal backward times the forward's causal share",
     "h100,h200,h100-hbm2e"},
    {"fa3-h100",
     {521, 579, 602, 616}, {418, 492, 521, 533}, {625, 638, 646, 648}, {501, 542, 559, 561},
     497 / 648.0,
     "FlashAttention-3 on H100 SXM5 (arXiv 2407.08608, Figs. 5-6, bf16); causal backward "
     "inferred as the non-causal backward times the forward's causal share", "h100,h200,h100-hbm2e"},
    {"cudnn-h100",
     {484, 510, 527, 539}, {365, 410, 445, 469}, {617, 610, 602, 595}, {465, 490, 508, 518},
     413 / 617.0,
     "cuDNN 9 fused attention (Transformer Engine's and Megatron-Core's default on Hopper) on "
     "H100 SXM5, as benchmarked in the FlashAttention-3 paper (arXiv 2407.08608, Figs. 5-6); "
     "causal backward inferred as for FlashAttention-3", "h100,h200,h100-hbm2e"},
    {"fa4-b200",
     {1345, 1463, 1503, 1534}, {1076, 1244, 1300, 1328}, {1613, 1613, 1613, 1613},
     {1293, 1370, 1396, 1397}, 497 / 648.0,
     "FlashAttention-4 on B200 (arXiv 2603.05451: forward 1,613 TFLOP/s bf16, 71% of peak); the "
     "causal share and the backward over the forward are FlashAttention-3's on H100 (inferred: "
     "no B200 backward has been published)", "b200"},
    {"triton-h100",
     {323, 353, 369, 378}, {260, 295, 317, 328}, {389, 389, 392, 395}, {313, 325, 337, 344},
     403 / 395.0,
     "Triton's fused attention (the kernel FlexAttention and torch.compile stacks generate) on "
     "H100 SXM5, forward as benchmarked in the FlashAttention-3 paper (arXiv 2407.08608, Fig. 5, "
     "hd 128; hd 64: 403 against 395 at 16k); backward not published: inferred as "
     "FlashAttention-2's backward times Triton's forward over FlashAttention-2's at each length",
     "h100,h200,h100-hbm2e"},
};
#define N_KERNELS ((int)(sizeof KERNELS / sizeof KERNELS[0]))
static const double KERNEL_LENS[ATTN_KERNEL_LENS] = {2048, 4096, 8192, 16384};

static double by_length(const double *v, double len)
{
    if (!(len > KERNEL_LENS[0])) return v[0]; /* the tables start at 2k: held below */
    for (int i = 1; i < ATTN_KERNEL_LENS; i++)
        if (len <= KERNEL_LENS[i]) {
            double f = log2(len / KERNEL_LENS[i - 1]); /* the lengths double */
            return v[i - 1] + f * (v[i] - v[i - 1]);
        }
    return v[ATTN_KERNEL_LENS - 1];
}

double attn_kernel_tflops(const attn_kernel *k, int backward, int causal, double len, int head_dim)
{
    const double *v = backward ? (causal ? k->bwd_causal : k->bwd_full)
                               : (causal ? k->fwd_causal : k->fwd_full);
    double share = head_dim >= 128 ? 1
                   : head_dim <= 64 ? k->hd64_share
                                    : k->hd64_share + (1 - k->hd64_share) * (head_dim - 64) / 64.0;
    return by_length(v, len) * share;
}

const attn_kernel *attn_kernel_find(const char *name)
{
    for (int i = 0; name && i < N_KERNELS; i++)
        if (strcmp(KERNELS[i].name, name) == 0) return &KERNELS[i];
    return NULL;
}

int attn_kernel_runs_on(const attn_kernel *k, const char *gpu)
{
    if (!gpu_preset(gpu)) return 1;
    size_t n = strlen(gpu);
    for (const char *p = k->runs_on; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        if (len == n && strncmp(p, gpu, n) == 0) return 1;
        p = comma ? comma + 1 : p + len;
    }
    return 0;
}

const attn_kernel *attn_kernels(int *count)
{
    *count = N_KERNELS;
    return KERNELS;
}

const char *hw_coll_name(hw_coll k)
{
    static const char *const names[COLL_COUNT] = {"all_reduce", "all_gather", "reduce_scatter",
                                                  "all_to_all", "send_recv"};
    return k >= 0 && k < COLL_COUNT ? names[k] : "?";
}

/* ---- GPUs ------------------------------------------------------------------------------------
 * NVLink rates per direction (half the datasheets' bidirectional totals). NCCL's bus bandwidth
 * on an 8-GPU NVSwitch node at large messages, over that rate:
 *   A100: 235 GB/s of 300 (NCCL's own tuning caps sm80 at 235, src/graph/tuning.cc; nccl-tests
 *         all_reduce_perf ~235), send/recv 195 at 1 GB; all-to-all not published: the ring figure
 *   H100/H200: ~370 GB/s of 450 for rings and the other collectives (NCCL maintainers in
 *         nccl-tests #212 and nccl #1442; topo.h SM90_NVLINK_BW 20.6 x 18 links); all-reduce with
 *         NVLink SHARP ~480 GB/s busBW = 275 GB/s algBW (nccl-tests #212, #272; nccl #1455)
 *   B200: NCCL's model 40.1 x 18 = 722 GB/s of 900 (topo.h SM100_NVLINK_BW); NVLS all-reduce
 *         830 GB/s busBW reported by a user (nccl #1807)
 * Best measured bf16 GEMM (ml-engineering, "Maximum Achievable Matmul FLOPS" table, torch.mm):
 * A100 271.2, H100 794.5, B200 1745 TFLOP/s; FP8 e4m3 in the same table: H100 1402.6 (70.9% of
 * 1,979), H200 1453.4 (73.4%), B200 3432.5 (76.3% of 4,500) TFLOP/s.
 * GEMM efficiency by inner dimension K on Hopper: TileLang's autotuned GEMMs on an H800 SXM (the
 * H100 SXM's compute), M = N = 8192, K = 256 … 16384 (tile-ai/tilelang benchmark/matmul and
 * benchmark/matmul_fp8 READMEs): fp16 386, 520, 628, 705, 736, 758, 766 TFLOP/s and FP8 569, 858,
 * 1129, 1343, 1467, 1507, 1541. Both follow K / (K + k0) of a large-K rate, each output tile's
 * fixed work worth k0 more of K: solved from K = 1024 and 16384, k0 = 244 (fp16; the curve then
 * lies within 3.1% of all seven points) and 409 (FP8: its main loop is twice as fast, the epilogue
 * is not; within 7%). B200: no published K sweep; Hopper's k0 assumed. A100: none; its figures
 * are the fitted profile's own (0). */
#define HOPPER_GEMM_K0 244.0
#define HOPPER_FP8_GEMM_K0 409.0
#define NV3 {235 / 300.0, 235 / 300.0, 235 / 300.0, 235 / 300.0, 195 / 300.0}
#define NV4 {370 / 450.0, 370 / 450.0, 370 / 450.0, 370 / 450.0, 370 / 450.0}
#define NV5 {722 / 900.0, 722 / 900.0, 722 / 900.0, 722 / 900.0, 722 / 900.0}
#define NV3_SRC "NVLink3 12 x 25 GB/s per direction; NCCL busBW 235 GB/s (tuning.cc sm80 cap), " \
                "send/recv 195 GB/s (nccl-tests, 1 GB)"
#define NV4_SRC "NVLink4 18 x 25 GB/s per direction; NCCL busBW ~370 GB/s (nccl-tests #212), " \
                "NVLS all-reduce 275 GB/s algBW"
#define NV5_SRC "NVLink5 18 x 50 GB/s per direction; NCCL busBW 722 GB/s (topo.h " \
                "SM100_NVLINK_BW x 18), NVLS all-reduce 474 GB/s algBW (user report, nccl #1807)"
static const gpu_spec GPUS[] = {
    {"a100-40gb", 312, 0, 1555, 40960, "NVIDIA A100 Tensor Core GPU datasheet (SXM4 40GB), 2021",
     2400, NV3, NV3_SRC, 0, HW_A100_MATMUL_EFF, &KERNELS[0], "dgx-a100", 0, 0, 0, 0},
    {"a100-80gb", 312, 0, 2039, 81920, "NVIDIA A100 Tensor Core GPU datasheet (SXM4 80GB), 2021",
     2400, NV3, NV3_SRC, 0, HW_A100_MATMUL_EFF, &KERNELS[0], "dgx-a100", 0, 0, 0, 0},
    {"h100", 989, 1979, 3350, 81920, "NVIDIA H100 Tensor Core GPU datasheet (SXM5), 2023", 3600,
     NV4, NV4_SRC, 275 / 450.0, 794.5 / 989, &KERNELS[3], "dgx-h100", 0, 1402.6 / 1979,
     HOPPER_GEMM_K0, HOPPER_FP8_GEMM_K0},
    {"h200", 989, 1979, 4800, 144384, "NVIDIA H200 Tensor Core GPU datasheet (SXM), 2024", 3600,
     NV4, NV4_SRC, 275 / 450.0, 794.5 / 989, &KERNELS[3], "h200-node", 0, 1453.4 / 1979,
     HOPPER_GEMM_K0, HOPPER_FP8_GEMM_K0},
    /* torchtitan's benchmark H100 (Meta's Grand Teton; torchtitan docs/performance.md): SXM,
     * 96 GB of HBM2e at 2.4 TB/s, a 500 W limit, its peak "between SXM and NVL" by its authors'
     * footnote: the midpoint of 989 (SXM5) and 835 (H100 NVL, datasheet: 1,671 sparse) TFLOP/s.
     * The best GEMM, attention and FP8 shares are the SXM5's, of this peak. */
    {"h100-hbm2e", 912, 1824, 2400, 98304, "torchtitan's Grand Teton H100 (its docs/performance.md: "
     "SXM, 96 GB HBM2e at 2.4 TB/s, 500 W; peak between the SXM5's 989 and the NVL's 835 "
     "TFLOP/s bf16: the midpoint, assumed)", 3600, NV4, NV4_SRC, 275 / 450.0, 794.5 / 989,
     &KERNELS[3], "grand-teton", 0, 1402.6 / 1979, HOPPER_GEMM_K0, HOPPER_FP8_GEMM_K0},
    {"b200", 2250, 4500, 8000, 184320, "NVIDIA DGX B200 datasheet (per GPU: 1,440 GB and 72 "
     "PFLOP/s fp8 sparse over 8), 2024", 7200, NV5, NV5_SRC, 474 / 900.0, 1745.0 / 2250,
     &KERNELS[4], "dgx-b200", 0, 3432.5 / 4500, HOPPER_GEMM_K0, HOPPER_FP8_GEMM_K0},
    /* A 2-core CPU rank of the validation runtime; rates are placeholders for the analytic
     * model until `dpsim calibrate` fits a measured profile. */
    {"cpu", 0.05, 0, 10, 4096, "rough figures for one core of a small x86 server", 80,
     {1, 1, 1, 1, 1}, "shared memory, as fast as the wire", 0, HW_A100_MATMUL_EFF, NULL, "cpu", 1, 0, 0, 0},
};
#define N_GPUS ((int)(sizeof GPUS / sizeof GPUS[0]))

/* A cluster preset: the GPU by name, so that the GPU table stays the one source of its figures
 * (its NVLink rate and NCCL's shares of it too, unless intra_gbit says otherwise). */
typedef struct cluster_row {
    const char *name, *gpu;
    int gpus_per_node;
    double intra_gbit; /* 0: the GPU's NVLink */
    double intra_latency_us, inter_gbit, inter_latency_us;
    int nics_per_node;
    double inter_eff;   /* NCCL busBW over the NIC rate, every collective */
    double mem_limit_mb; /* 0: HW_USABLE_SHARE of the GPU's memory */
    const char *net_source;
    double gpu_jitter;   /* cluster_spec.gpu_jitter */
    int nccl_tree;       /* cluster_spec.nccl_tree */
} cluster_row;

/* Between nodes: ~24 GB/s busBW per 200 Gbit/s HDR NIC and ~48 per 400 Gbit/s NDR one, 0.96 of
 * the wire (NCCL maintainer in nccl-tests #119; nccl-tests #319: 8 x 400G ~ 396 GB/s). */
#define IB_EFF 0.96
static const cluster_row CLUSTERS[] = {
    /* DynaPipe's experiments: AWS p4d.24xlarge. Its network is the authors' cost model's (100
     * Gbit/s per ring with 4 ms latency, 0 µs inside a node), kept so that the paper's
     * experiments are planned as they were; NVLink is the A100's with NCCL's shares. 36,000 MB
     * planner limit on the 40 GB cards. The others (mem_limit 0) keep back the same share,
     * HW_USABLE_SHARE, for the CUDA context, the libraries' workspaces and fragmentation. */
    {"p4d", "a100-40gb", 8, 0, 0, 100, 4000, 8, 1, 36000,
     "DynaPipe's cost model (100 Gbit/s per ring, 4 ms)", 0, 0},
    {"dgx-a100", "a100-80gb", 8, 0, 2, 200, 5, 8, IB_EFF, 0,
     "8 x ConnectX-6 HDR 200 Gbit/s (DGX A100), 24 GB/s busBW each (nccl-tests #119)", HW_GPU_JITTER, 1},
    {"dgx-h100", "h100", 8, 0, 2, 400, 5, 8, IB_EFF, 0,
     "8 x ConnectX-7 NDR 400 Gbit/s (DGX H100), 48 GB/s busBW each (nccl-tests #319)", HW_GPU_JITTER, 1},
    {"h200-node", "h200", 8, 0, 2, 400, 5, 8, IB_EFF, 0,
     "8 x ConnectX-7 NDR 400 Gbit/s (HGX H200), 48 GB/s busBW each (nccl-tests #319)", HW_GPU_JITTER, 1},
    {"grand-teton", "h100-hbm2e", 8, 0, 2, 400, 5, 8, IB_EFF, 0,
     "400 Gbit/s RDMA a GPU (torchtitan's Grand Teton hosts), 48 GB/s busBW each (nccl-tests #319)",
     HW_GPU_JITTER, 1},
    {"dgx-b200", "b200", 8, 0, 2, 400, 5, 8, IB_EFF, 0,
     "8 x ConnectX-7 400 Gbit/s (DGX B200), 48 GB/s busBW each (nccl-tests #319)", HW_GPU_JITTER, 1},
    {"cpu", "cpu", 16, 80, 1, 10, 50, 16, 1, 0, "loopback, as fast as the wire", 0, 0},
};
#define N_CLUSTERS ((int)(sizeof CLUSTERS / sizeof CLUSTERS[0]))

const gpu_spec *gpu_preset(const char *name)
{
    for (int i = 0; i < N_GPUS; i++)
        if (strcmp(GPUS[i].name, name) == 0) return &GPUS[i];
    return NULL;
}

double attn_kernel_peak_share(const attn_kernel *k, const gpu_spec *gpu)
{
    size_t n = strcspn(k->runs_on, ","); /* the first preset listed: where it was measured */
    for (int i = 0; i < N_GPUS; i++)
        if (strncmp(GPUS[i].name, k->runs_on, n) == 0 && GPUS[i].name[n] == '\0')
            return GPUS[i].peak_tflops > 0 && gpu->peak_tflops > 0
                       ? gpu->peak_tflops / GPUS[i].peak_tflops
                       : 1;
    return 1;
}

const gpu_spec *gpu_preset_for_device(const char *device_name)
{
    static const struct {
        const char *part, *preset;
    } by_name[] = {{"B200", "b200"}, {"H200", "h200"}, {"H100", "h100"},
                   {"A100-SXM4-80GB", "a100-80gb"},
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

/* NCCL's shares inside a node: the GPU's own */
static void intra_shares_of_gpu(cluster_spec *c)
{
    for (int k = 0; k < COLL_COUNT; k++) c->coll_eff[SCOPE_INTRA][k] = c->gpu.nvlink_eff[k];
}

int cluster_preset_at(int i, cluster_spec *c)
{
    if (i < 0 || i >= N_CLUSTERS) return -1;
    const cluster_row *r = &CLUSTERS[i];
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", r->name);
    c->gpu = *gpu_preset(r->gpu);
    c->gpus_per_node = r->gpus_per_node;
    c->intra_gbit = r->intra_gbit > 0 ? r->intra_gbit : c->gpu.nvlink_gbit;
    c->intra_latency_us = r->intra_latency_us;
    c->inter_gbit = r->inter_gbit;
    c->inter_latency_us = r->inter_latency_us;
    c->nics_per_node = r->nics_per_node;
    intra_shares_of_gpu(c);
    for (int k = 0; k < COLL_COUNT; k++) c->coll_eff[SCOPE_INTER][k] = r->inter_eff;
    c->mem_limit_mb = r->mem_limit_mb > 0 ? r->mem_limit_mb : HW_USABLE_SHARE * c->gpu.mem_mb;
    c->net_source = r->net_source;
    c->gpu_jitter = r->gpu_jitter;
    c->nccl_tree = r->nccl_tree;
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

/* "intra_eff" / "inter_eff": absent, keep *eff; present, every collective's share in (0, 1]. */
static dp_status parse_shares(const cJSON *root, const char *key, const char *name, double *eff,
                              dp_err *err)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!o || cJSON_IsNull(o)) return DP_OK;
    if (!cJSON_IsObject(o))
        return dp_fail(err, DP_ERR_PARSE, "%s: field \"%s\" must be an object of shares (%s, %s, "
                       "%s, %s, %s)", name, key, hw_coll_name(0), hw_coll_name(1), hw_coll_name(2),
                       hw_coll_name(3), hw_coll_name(4));
    char where[300];
    snprintf(where, sizeof where, "%s: field \"%s\"", name, key);
    dp_status st = DP_OK;
    for (int k = 0; k < COLL_COUNT; k++)
        TRY(json_double(o, hw_coll_name((hw_coll)k), where, 1e-6, 1, 1, 0, &eff[k], err));
out:
    return st;
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
        char where[300];
        snprintf(where, sizeof where, "%s: field \"gpu\"", name);
        const cJSON *gn = cJSON_GetObjectItemCaseSensitive(g, "name");
        snprintf(c->gpu.name, sizeof c->gpu.name, "%s", cJSON_IsString(gn) ? gn->valuestring : "gpu");
        TRY(json_double(g, "peak_tflops", where, 1e-6, 1e6, 1, 0, &c->gpu.peak_tflops, err));
        TRY(json_double(g, "fp8_tflops", where, 0, 1e7, 0, 0, &c->gpu.fp8_tflops, err));
        TRY(json_double(g, "hbm_gbps", where, 1e-3, 1e7, 1, 0, &c->gpu.hbm_gbps, err));
        TRY(json_double(g, "mem_mb", where, 1, 1e9, 1, 0, &c->gpu.mem_mb, err));
        TRY(json_double(g, "matmul_eff", where, 1e-6, 1, 0, HW_A100_MATMUL_EFF, &c->gpu.matmul_eff,
                        err));
        TRY(json_double(g, "nvls_eff", where, 0, 1, 0, 0, &c->gpu.nvls_eff, err));
        TRY(json_double(g, "fp8_matmul_eff", where, 0, 1, 0, 0, &c->gpu.fp8_matmul_eff, err));
        TRY(json_double(g, "gemm_k0", where, 0, 1e6, 0, 0, &c->gpu.gemm_k0, err));
        TRY(json_double(g, "fp8_gemm_k0", where, 0, 1e6, 0, 0, &c->gpu.fp8_gemm_k0, err));
        TRY(json_bool(g, "comm_on_cores", where, 0, &c->gpu.comm_on_cores, err));
        const cJSON *ak = cJSON_GetObjectItemCaseSensitive(g, "attention_kernel");
        if (ak && !cJSON_IsNull(ak)) {
            c->gpu.attn = cJSON_IsString(ak) ? attn_kernel_find(ak->valuestring) : NULL;
            if (!c->gpu.attn) {
                st = dp_fail(err, DP_ERR_PARSE, "%s.attention_kernel: unknown kernel%s%s%s "
                             "(dpsim models lists them)", where, cJSON_IsString(ak) ? " \"" : "",
                             cJSON_IsString(ak) ? ak->valuestring : "",
                             cJSON_IsString(ak) ? "\"" : "");
                goto out;
            }
        }
        c->gpu.source = "user JSON";
        c->gpu.nvlink_source = "user JSON";
        for (int k = 0; k < COLL_COUNT; k++) c->gpu.nvlink_eff[k] = 1;
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
    TRY(json_int(root, "nics_per_node", name, 1, 1 << 20, c->gpus_per_node, &c->nics_per_node,
                 err));
    intra_shares_of_gpu(c);
    for (int k = 0; k < COLL_COUNT; k++) c->coll_eff[SCOPE_INTER][k] = 1;
    TRY(parse_shares(root, "intra_eff", name, c->coll_eff[SCOPE_INTRA], err));
    TRY(parse_shares(root, "inter_eff", name, c->coll_eff[SCOPE_INTER], err));
    TRY(json_double(root, "mem_limit_mb", name, 1, 1e9, 0, HW_USABLE_SHARE * c->gpu.mem_mb,
                    &c->mem_limit_mb, err));
    if (c->mem_limit_mb > c->gpu.mem_mb) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: field \"mem_limit_mb\" %.0f is more than the GPU's "
                     "memory (%s: %.0f MB): a plan cannot use memory the GPU does not have", name,
                     c->mem_limit_mb, c->gpu.name, c->gpu.mem_mb);
        goto out;
    }
    TRY(json_double(root, "gpu_jitter", name, 0, 0.5, 0, HW_GPU_JITTER, &c->gpu_jitter, err));
    TRY(json_bool(root, "nccl_tree", name, 1, &c->nccl_tree, err));
    c->net_source = "user JSON";
out:
    cJSON_Delete(root);
    return st;
}

dp_status cluster_resolve(const char *name_or_path, cluster_spec *c, dp_err *err)
{
    if (cluster_preset(name_or_path, c) == 0) return DP_OK;
    const gpu_spec *g = gpu_preset(name_or_path);
    if (g) { /* one node of this GPU's own cluster preset */
        cluster_preset(g->node, c);
        c->gpu = *g;
        intra_shares_of_gpu(c);
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
    if (c->gpu.fp8_tflops > 0) cJSON_AddNumberToObject(g, "fp8_tflops", c->gpu.fp8_tflops);
    cJSON_AddNumberToObject(g, "matmul_eff", c->gpu.matmul_eff);
    if (c->gpu.nvls_eff > 0) cJSON_AddNumberToObject(g, "nvls_eff", c->gpu.nvls_eff);
    if (c->gpu.fp8_matmul_eff > 0)
        cJSON_AddNumberToObject(g, "fp8_matmul_eff", c->gpu.fp8_matmul_eff);
    if (c->gpu.gemm_k0 > 0) cJSON_AddNumberToObject(g, "gemm_k0", c->gpu.gemm_k0);
    if (c->gpu.fp8_gemm_k0 > 0) cJSON_AddNumberToObject(g, "fp8_gemm_k0", c->gpu.fp8_gemm_k0);
    if (c->gpu.comm_on_cores) cJSON_AddTrueToObject(g, "comm_on_cores");
    if (c->gpu.attn) cJSON_AddStringToObject(g, "attention_kernel", c->gpu.attn->name);
    cJSON_AddNumberToObject(o, "gpus_per_node", c->gpus_per_node);
    if (c->nodes) cJSON_AddNumberToObject(o, "nodes", c->nodes);
    cJSON_AddNumberToObject(o, "intra_gbit", c->intra_gbit);
    cJSON_AddNumberToObject(o, "intra_latency_us", c->intra_latency_us);
    cJSON_AddNumberToObject(o, "inter_gbit", c->inter_gbit);
    cJSON_AddNumberToObject(o, "inter_latency_us", c->inter_latency_us);
    cJSON_AddNumberToObject(o, "nics_per_node", c->nics_per_node);
    static const char *const scope_key[SCOPE_COUNT] = {"intra_eff", "inter_eff"};
    for (int sc = 0; sc < SCOPE_COUNT; sc++) {
        cJSON *e = cJSON_AddObjectToObject(o, scope_key[sc]);
        for (int k = 0; k < COLL_COUNT; k++)
            cJSON_AddNumberToObject(e, hw_coll_name((hw_coll)k), c->coll_eff[sc][k]);
    }
    cJSON_AddNumberToObject(o, "mem_limit_mb", c->mem_limit_mb);
    cJSON_AddNumberToObject(o, "gpu_jitter", c->gpu_jitter);
    cJSON_AddBoolToObject(o, "nccl_tree", c->nccl_tree);
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
