/* assumptions.c — the constants behind an answer, their sources, and what-ifs that scale them
 * (assumptions.h). */
#include "assumptions.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* Where the analytic model's defaults come from (analytic_params_provenance says it in full). */
#define FITTED_ON "fitted to the A100-40GB profile of GPT-6.7B (DynaPipe's, tp 1)"

static const assumption_info INFO[ASSUME_COUNT] = {
    [ASSUME_GEMM_EFF] = {"gemm_eff", "GEMM share of the bf16 peak (analytic model)", "fitted"},
    [ASSUME_GEMM_SHAPE] = {"gemm_k0", "GEMM efficiency by inner dimension K: K / (K + k0)",
                           "benchmark"},
    [ASSUME_FP8_GEMM] = {"fp8_matmul_eff", "best FP8 GEMM's share of the FP8 peak", "benchmark"},
    [ASSUME_ATTN_KERNEL] = {"attention_kernel", "fused attention kernel's TFLOP/s by length",
                            "benchmark"},
    [ASSUME_ATTN_EFF] = {"attn_eff", "unfused attention's share of the peak (analytic model)",
                         "fitted"},
    [ASSUME_MEM_EFF] = {"mem_eff", "memory-bound work's share of HBM bandwidth (analytic model)",
                        "assumed"},
    [ASSUME_FLOOR] = {"layer_floor", "per-layer time floor, forward / backward (analytic model)",
                      "fitted"},
    [ASSUME_BWD_RATIO] = {"bwd_ratio", "backward work over forward work (analytic model)",
                          "fitted"},
    [ASSUME_NVLINK_EFF] = {"nvlink_eff", "NCCL bus bandwidth inside a node over the link rate",
                           "benchmark"},
    [ASSUME_NET_EFF] = {"net_eff", "NCCL bus bandwidth between nodes over the NICs' rate",
                        "benchmark"},
    [ASSUME_LATENCY] = {"latency", "collective latency per step, inside / between nodes",
                        "assumed"},
    [ASSUME_JITTER] = {"gpu_jitter", "per-GPU speed spread (the straggler wait)", "derived"},
    [ASSUME_USABLE_MEM] = {"usable_memory", "device memory the planner may fill", "assumed"},
};

const assumption_info *assumption_about(assumption_id id)
{
    return id >= 0 && id < ASSUME_COUNT ? &INFO[id] : NULL;
}

void cost_what_if_none(cost_what_if *w)
{
    for (int i = 0; i < ASSUME_COUNT; i++) w->scale[i] = 1;
}

int cost_what_if_is_none(const cost_what_if *w)
{
    for (int i = 0; i < ASSUME_COUNT; i++)
        if (w->scale[i] != 1) return 0;
    return 1;
}

static double share(double v, double s)
{
    return fmin(1, v * s);
}

void cost_what_if_cluster(const cost_what_if *w, cluster_spec *c)
{
    const double *s = w->scale;
    for (int k = 0; k < COLL_COUNT; k++) {
        c->coll_eff[SCOPE_INTRA][k] = share(c->coll_eff[SCOPE_INTRA][k], s[ASSUME_NVLINK_EFF]);
        c->coll_eff[SCOPE_INTER][k] = share(c->coll_eff[SCOPE_INTER][k], s[ASSUME_NET_EFF]);
    }
    c->gpu.nvls_eff = share(c->gpu.nvls_eff, s[ASSUME_NVLINK_EFF]);
    c->intra_latency_us *= s[ASSUME_LATENCY];
    c->inter_latency_us *= s[ASSUME_LATENCY];
    c->gpu_jitter *= s[ASSUME_JITTER];
    c->mem_limit_mb = fmin(c->gpu.mem_mb, c->mem_limit_mb * s[ASSUME_USABLE_MEM]);
    c->gpu.gemm_k0 *= s[ASSUME_GEMM_SHAPE];
    c->gpu.fp8_gemm_k0 *= s[ASSUME_GEMM_SHAPE];
    c->gpu.fp8_matmul_eff = share(c->gpu.fp8_matmul_eff, s[ASSUME_FP8_GEMM]);
}

void cost_what_if_params(const cost_what_if *w, analytic_params *p)
{
    const double *s = w->scale;
    p->gemm_eff = share(p->gemm_eff, s[ASSUME_GEMM_EFF]);
    p->attn_eff = share(p->attn_eff, s[ASSUME_ATTN_EFF]);
    p->mem_eff = share(p->mem_eff, s[ASSUME_MEM_EFF]);
    p->fwd_floor_ms *= s[ASSUME_FLOOR];
    p->bwd_floor_ms *= s[ASSUME_FLOOR];
    p->bwd_ratio *= s[ASSUME_BWD_RATIO];
}

int assumption_applies(assumption_id id, const cost_model *cm, long long gpus)
{
    int analytic = cost_analytic_params(cm) != NULL;
    const cluster_spec *c = &cm->hw;
    int fused = analytic && cm->flash_attn && cm->attn;
    switch (id) {
    case ASSUME_GEMM_EFF:
    case ASSUME_MEM_EFF:
    case ASSUME_FLOOR:
    case ASSUME_BWD_RATIO: return analytic;
    case ASSUME_ATTN_EFF: return analytic && !fused;
    case ASSUME_ATTN_KERNEL: return fused;
    case ASSUME_GEMM_SHAPE: return analytic && c->gpu.gemm_k0 > 0;
    case ASSUME_FP8_GEMM: return analytic && cm->precision == PRECISION_FP8;
    case ASSUME_NVLINK_EFF:
    case ASSUME_LATENCY: return gpus > 1;
    case ASSUME_NET_EFF: return gpus > c->gpus_per_node;
    case ASSUME_JITTER: return c->gpu_jitter > 0 && gpus > 1;
    case ASSUME_USABLE_MEM: return 1;
    default: return 0;
    }
}

void assumption_describe(assumption_id id, const cost_model *cm, const analytic_params *p,
                         char *buf, size_t cap)
{
    const cluster_spec *c = &cm->hw;
    const gpu_spec *g = &c->gpu;
    int foreign = strcmp(g->name, ANALYTIC_DEFAULT_GPU) != 0;
    buf[0] = '\0';
    switch (id) {
    case ASSUME_GEMM_EFF:
        if (!p) break;
        if (foreign)
            snprintf(buf, cap, "%.3f of peak: %s, scaled by %s's best measured GEMM over the "
                     "A100's (%.1f%% / %.1f%% of peak, ml-engineering MAMF table)", p->gemm_eff,
                     FITTED_ON, g->name, 100 * g->matmul_eff, 100 * HW_A100_MATMUL_EFF);
        else
            snprintf(buf, cap, "%.3f of peak: %s", p->gemm_eff, FITTED_ON);
        break;
    case ASSUME_GEMM_SHAPE:
        snprintf(buf, cap, "k0 %.0f (bf16), %.0f (FP8): TileLang's K sweeps on an H800 (hw.c)%s",
                 g->gemm_k0, g->fp8_gemm_k0,
                 strncmp(g->name, "b200", 4) == 0 ? "; on a B200 Hopper's, assumed" : "");
        break;
    case ASSUME_FP8_GEMM:
        snprintf(buf, cap, "%.3f of %.0f TFLOP/s (ml-engineering MAMF table)", g->fp8_matmul_eff,
                 g->fp8_tflops);
        break;
    case ASSUME_ATTN_KERNEL:
        if (cm->attn) snprintf(buf, cap, "%s: %s", cm->attn->name, cm->attn->source);
        break;
    case ASSUME_ATTN_EFF:
        if (p) snprintf(buf, cap, "%.3f of peak: %s", p->attn_eff, FITTED_ON);
        break;
    case ASSUME_MEM_EFF:
        if (p) snprintf(buf, cap, "%.2f of %.0f GB/s (set to a physical 0.9 where the A100 fit "
                        "ran to its bound)", p->mem_eff, g->hbm_gbps);
        break;
    case ASSUME_FLOOR:
        if (p) snprintf(buf, cap, "%.2f / %.2f ms: %s (its launch-bound shapes)%s",
                        p->fwd_floor_ms, p->bwd_floor_ms, FITTED_ON,
                        foreign ? ", assumed on this GPU" : "");
        break;
    case ASSUME_BWD_RATIO:
        if (p) snprintf(buf, cap, "%.2f: %s%s", p->bwd_ratio, FITTED_ON,
                        foreign ? ", assumed on this GPU" : "");
        break;
    case ASSUME_NVLINK_EFF:
        snprintf(buf, cap, "%.2f (all-reduce; %s)", c->coll_eff[SCOPE_INTRA][COLL_ALL_REDUCE],
                 g->nvlink_source ? g->nvlink_source : "the cluster file");
        break;
    case ASSUME_NET_EFF:
        snprintf(buf, cap, "%.2f of %.0f Gbit/s x %d NICs (%s)",
                 c->coll_eff[SCOPE_INTER][COLL_ALL_REDUCE], c->inter_gbit, c->nics_per_node,
                 c->net_source[0] ? c->net_source : "the cluster file");
        break;
    case ASSUME_LATENCY:
        snprintf(buf, cap, "%.1f / %.1f us per step", c->intra_latency_us, c->inter_latency_us);
        break;
    case ASSUME_JITTER:
        snprintf(buf, cap, "cv %.3f (Sinha et al., arXiv 2208.11035: 8%% spread over a fleet)",
                 c->gpu_jitter);
        break;
    case ASSUME_USABLE_MEM:
        snprintf(buf, cap, "%.0f of %.0f MB (the rest: CUDA context, workspaces, fragmentation)",
                 c->mem_limit_mb, g->mem_mb);
        break;
    default: break;
    }
}
