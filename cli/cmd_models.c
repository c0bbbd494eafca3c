/* dpsim models — the model, GPU and cluster presets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/hw.h"
#include "../models/stack.h"
#include "../models/memory.h"
#include "../models/model.h"
#include "../common/json_util.h"
#include "cli.h"

static const char MODELS_USAGE[] = "dpsim models [--show NAME [--seqlen L] [--dp D]]";

/* 8030261248 as "8,030,261,248" */
static const char *grouped(int64_t v, char *buf, size_t cap)
{
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%lld", (long long)v), o = 0;
    for (int i = 0; i < n && o + 2 < (int)cap; i++) {
        if (i && (n - i) % 3 == 0 && digits[i - 1] != '-') buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

/* What a shown model costs, on stderr beside its spec (stdout stays a spec --model reads back):
 * its parameters, training FLOPs per token at seqlen tokens, and model state per GPU under each
 * ZeRO stage over dp replicas (models/memory.h). */
static void print_model_sizes(const model_spec *m, int seqlen, int dp)
{
    char buf[40];
    int64_t params = model_total_params(m);
    int dec = m->arch == ARCH_T5 ? seqlen : 0;
    double per_token = model_train_flops(m, seqlen, dec, FLOPS_CAUSAL) / (seqlen + dec);
    double whole = model_train_flops(m, seqlen, dec, FLOPS_NONCAUSAL) / (seqlen + dec);
    double rerun = model_recompute_flops(m, seqlen, dec, 1, 1) / (seqlen + dec);
    fprintf(stderr, "# %s: %s parameters (%.2f GB of 16-bit weights)\n", m->name,
            grouped(params, buf, sizeof buf), 2e-9 * (double)params);
    if (model_is_moe(m)) {
        int64_t bare, active = model_active_params(m, &bare);
        char abuf[40];
        char groups[80] = "";
        if (m->moe_groups > 0)
            snprintf(groups, sizeof groups, " (from %d of %d groups)", m->moe_group_topk,
                     m->moe_groups);
        fprintf(stderr, "# active per token: %s parameters (%s without the embedding table); %d "
                "experts, %d a token%s, in %d of its %d layers%s\n",
                grouped(active, buf, sizeof buf), grouped(bare, abuf, sizeof abuf), m->experts,
                m->experts_per_token, groups, model_moe_layers(m), m->enc_layers,
                m->shared_ffn ? ", and a shared expert" : "");
    }
    fprintf(stderr, "# training FLOPs per token at %d tokens%s: %.2f GFLOP (MFU's count: causal "
            "attention at half the square), %.2f with attention whole (PaLM's and Megatron-LM's "
            "count), %.2f with full recompute (HFU's)\n", seqlen,
            dec ? " (encoder and decoder each)" : "", per_token / 1e9, whole / 1e9,
            (per_token + rerun) / 1e9);
    train_precision prec = precision_of_model(m);
    state_bytes sb = memory_state_bytes(prec, grad_reduce_bytes(prec, GRAD_REDUCE_AUTO));
    fprintf(stderr, "# model state per GPU over %d replicas, GB (one stage, tp 1: divide by tp x "
            "pp), %s weights, %s grads, fp32 Adam\n#   zero  weights    grads  optimizer"
            "    total\n", dp, precision_name(prec), sb.grad == 4 ? "fp32" : precision_name(prec));
    double param_mb = 2e-6 * (double)params;
    for (int z = 0; z <= 3; z++) {
        double w, g, o;
        memory_model_state_parts(param_mb, &sb, z, dp, &w, &g, &o);
        fprintf(stderr, "#   %4d %8.2f %8.2f %10.2f %8.2f\n", z, w / 1e3, g / 1e3, o / 1e3,
                (w + g + o) / 1e3);
    }
}

static void print_model(const model_spec *m)
{
    char ctx[16] = "-";
    if (m->positions) snprintf(ctx, sizeof ctx, "%d%s", m->positions, m->rope ? "r" : "");
    printf("%-14s %-4s %4d %4d %6d %5d %5d %5d %6d %6d %4s %6s %9.2f %-7s  %s\n", m->name,
           model_arch_name(m->arch), m->enc_layers, m->dec_layers, m->hidden, m->heads,
           model_kv_heads(m), m->kv_channels, m->ffn, m->vocab, m->glu ? "yes" : "no", ctx,
           (double)model_total_params(m) / 1e9, m->flash_attn ? "flash" : "unfused",
           m->profile[0] ? m->profile : "-");
}

/* --show NAME: a model's or a cluster's JSON spec on stdout (a model's sizes on stderr). */
static int show_preset(const char *show, int seqlen, int dp)
{
    model_spec m;
    cluster_spec cl;
    dp_err err = {0}, merr = {0};
    if (model_resolve(show, &m, &merr) == DP_OK) {
        if (model_write_json(&m, "-", &err) != DP_OK) return cli_fail("models", &err);
        fflush(stdout);
        print_model_sizes(&m, seqlen, dp);
        return 0;
    }
    if (cluster_resolve(show, &cl, &err) == DP_OK)
        return cluster_write_json(&cl, "-", &err) == DP_OK ? 0 : cli_fail("models", &err);
    /* neither: report the reason of the kind the file looks like (a cluster names its GPU) */
    char *text = NULL;
    cJSON *root = NULL;
    int cluster_like = 0;
    if (json_slurp(show, &text, NULL) == DP_OK && json_parse_object(text, show, &root, NULL) == DP_OK)
        cluster_like = cJSON_GetObjectItemCaseSensitive(root, "gpu") ||
                       cJSON_GetObjectItemCaseSensitive(root, "gpus_per_node");
    cJSON_Delete(root);
    free(text);
    return cli_fail("models", cluster_like ? &err : &merr);
}

static void list_models(void)
{
    int n;
    const model_spec *ms = model_presets(&n);
    printf("# models (--model); context: the longest sequence, tokens (r: rotary positions, no "
           "learned table; -: no limit);\n# attention: what it trains with by default "
           "(--flash-attention, --no-flash-attention)\n"
           "%-14s %-4s %4s %4s %6s %5s %5s %5s %6s %6s %4s %6s %9s %-7s  %s\n",
           "name", "arch", "enc", "dec", "hidden", "heads", "kvh", "kv", "ffn", "vocab", "glu",
           "ctx", "params", "attention", "measured profile");
    printf("%-14s %-4s %4s %4s %6s %5s %5s %5s %6s %6s %4s %6s %9s\n", "#", "", "layer", "layer", "",
           "", "", "", "", "", "", "tokens", "billions");
    for (int i = 0; i < n; i++) print_model(&ms[i]);
}

static void list_gpus(void)
{
    int n;
    const gpu_spec *gs = gpu_presets(&n);
    printf("\n# GPUs (dense peaks; NVLink per direction, and NCCL's bus bandwidth over it on an "
           "8-GPU node:\n# all-reduce as a ring and with NVLink SHARP (algBW), all-gather, "
           "send/recv; matmul: best measured bf16 GEMM)\n"
           "%-10s %8s %8s %6s %7s %7s %6s %6s %6s %6s %7s %-11s  %s\n", "name", "bf16", "fp8",
           "HBM", "memory", "nvlink", "ar", "nvls", "ag", "p2p", "matmul", "attention", "source");
    printf("%-10s %8s %8s %6s %7s %7s %6s %6s %6s %6s %7s\n", "#", "TFLOP/s", "TFLOP/s", "GB/s",
           "GB", "GB/s", "GB/s", "GB/s", "GB/s", "GB/s", "%");
    for (int i = 0; i < n; i++) {
        const gpu_spec *g = &gs[i];
        double link = g->nvlink_gbit / 8;
        printf("%-10s %8.1f %8.0f %6.0f %7.1f %7.0f %6.0f %6.0f %6.0f %6.0f %7.1f %-11s  %s; %s\n",
               g->name, g->peak_tflops, g->fp8_tflops, g->hbm_gbps, g->mem_mb / 1024, link,
               link * g->nvlink_eff[COLL_ALL_REDUCE], link * g->nvls_eff,
               link * g->nvlink_eff[COLL_ALL_GATHER], link * g->nvlink_eff[COLL_SEND_RECV],
               100 * g->matmul_eff, g->attn ? g->attn->name : "unfused", g->source,
               g->nvlink_source);
    }
    int nk;
    const attn_kernel *ks = attn_kernels(&nk);
    printf("\n# attention kernels (--attention-kernel): TFLOP/s at 2k / 4k / 8k / 16k tokens, head "
           "dim 128\n%-11s %-23s %-23s %-23s %-23s  %s\n", "name", "fwd causal", "bwd causal",
           "fwd full", "bwd full", "source");
    for (int i = 0; i < nk; i++) {
        const double *v[4] = {ks[i].fwd_causal, ks[i].bwd_causal, ks[i].fwd_full, ks[i].bwd_full};
        printf("%-11s", ks[i].name);
        for (int j = 0; j < 4; j++)
            printf(" %5.0f %5.0f %5.0f %5.0f", v[j][0], v[j][1], v[j][2], v[j][3]);
        printf("  %s\n", ks[i].source);
    }
    printf("\n# software stacks (--stack): the attention kernel each runs on each GPU preset "
           "(-: none, unfused), and how its elementwise ops run\n%-14s", "name");
    for (int j = 0; j < n; j++) printf(" %-11s", gs[j].name);
    printf("  what\n");
    for (int s = 0; s < STACK_COUNT; s++) {
        printf("%-14s", stack_name((software_stack)s));
        for (int j = 0; j < n; j++) {
            int fallback;
            const attn_kernel *k = stack_attention_kernel((software_stack)s, &gs[j], &fallback);
            char cell[24];
            snprintf(cell, sizeof cell, "%s%s", k ? k->name : "-", fallback ? "*" : "");
            printf(" %-11s", cell);
        }
        printf("  %s\n", stack_summary((software_stack)s));
    }
    printf("# *: the stack's own kernel is not measured on that GPU; its default times it\n");
}

static void list_clusters(void)
{
    printf("\n# clusters (--hw; a GPU name means one node of its own cluster preset)\n"
           "# mem_limit: what the planner may use; reserved: kept back for the CUDA context, library\n"
           "# workspaces and fragmentation (DynaPipe's 36,000 of 40,960 MB share where a preset\n"
           "# does not say); inter: per NIC, nics of them per node, busBW: NCCL's across nodes\n"
           "%-10s %-10s %8s %10s %10s %6s %10s %8s %10s %9s %9s  %s\n",
           "name", "gpu", "per_node", "intra", "intra_lat", "nics", "inter", "busBW", "inter_lat",
           "mem_limit", "reserved", "network");
    printf("%-10s %-10s %8s %10s %10s %6s %10s %8s %10s %9s %9s\n", "#", "", "GPUs", "Gbit/s", "us",
           "", "Gbit/s", "GB/s", "us", "MB", "MB");
    for (int i = 0; i < cluster_preset_count(); i++) {
        cluster_spec cl;
        cluster_preset_at(i, &cl);
        printf("%-10s %-10s %8d %10.0f %10.0f %6d %10.0f %8.1f %10.0f %9.0f %9.0f  %s\n", cl.name,
               cl.gpu.name, cl.gpus_per_node, cl.intra_gbit, cl.intra_latency_us, cl.nics_per_node,
               cl.inter_gbit, cl.inter_gbit / 8 * cl.coll_eff[SCOPE_INTER][COLL_ALL_REDUCE],
               cl.inter_latency_us, cl.mem_limit_mb, cl.gpu.mem_mb - cl.mem_limit_mb,
               cl.net_source);
    }
}

int cmd_models(int argc, char **argv)
{
    const char *show = NULL;
    int seqlen = 2048, dp = 8;
    cli_opts ot;
    cli_opts_init(&ot, "models", MODELS_USAGE,
                  "Lists the model, GPU and cluster presets that --model and --hw\n"
                  "accept (a JSON or Hugging Face config.json file works too).");
    cli_opt_string(&ot, "show", 's', &show, "NAME", NULL,
                   "print one model or cluster as a JSON spec (a model's parameters,\n"
                   "FLOPs per token and model state per GPU on stderr beside it)");
    cli_opt_int(&ot, "seqlen", 0, &seqlen, "L", 1, 1 << 24, "2048",
                "--show: the sequence length of the FLOPs per token");
    cli_opt_int(&ot, "dp", 0, &dp, "D", 1, 1 << 20, "8",
                "--show: the data-parallel replicas ZeRO shards the model state over");
    int r = cli_opts_parse(&ot, argc, argv, NULL, 0, NULL);
    cli_opts_release(&ot);
    if (r != 0) return r == 1 ? 0 : r;
    if (show) return show_preset(show, seqlen, dp);
    list_models();
    list_gpus();
    list_clusters();
    return 0;
}
