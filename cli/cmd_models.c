/* dpsim models — the model, GPU and cluster presets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/hw.h"
#include "../models/model.h"
#include "../common/json_util.h"
#include "cli.h"

static const char MODELS_USAGE[] = "dpsim models [--show NAME]";

static void print_model(const model_spec *m)
{
    char ctx[16] = "-";
    if (m->positions) snprintf(ctx, sizeof ctx, "%d%s", m->positions, m->rope ? "r" : "");
    printf("%-14s %-4s %4d %4d %6d %5d %5d %5d %6d %6d %4s %6s %9.2f  %s\n", m->name,
           model_arch_name(m->arch), m->enc_layers, m->dec_layers, m->hidden, m->heads,
           model_kv_heads(m), m->kv_channels, m->ffn, m->vocab, m->glu ? "yes" : "no", ctx,
           (double)model_total_params(m) / 1e9, m->profile[0] ? m->profile : "-");
}

int cmd_models(int argc, char **argv)
{
    const char *show = NULL;
    cli_opts ot;
    cli_opts_init(&ot, "models", MODELS_USAGE,
                  "Lists the model, GPU and cluster presets that --model and --hw\n"
                  "accept (a JSON or Hugging Face config.json file works too).");
    cli_opt_string(&ot, "show", 's', &show, "NAME", NULL,
                   "print one model or cluster as a JSON spec");
    int r = cli_opts_parse(&ot, argc, argv, NULL, 0, NULL);
    cli_opts_release(&ot);
    if (r != 0) return r == 1 ? 0 : r;
    dp_err err = {0};
    if (show) {
        model_spec m;
        cluster_spec cl;
        dp_err merr = {0};
        if (model_resolve(show, &m, &merr) == DP_OK)
            return model_write_json(&m, "-", &err) == DP_OK ? 0 : cli_fail("models", &err);
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
    int n;
    const model_spec *ms = model_presets(&n);
    printf("# models (--model); context: the longest sequence, tokens (r: rotary positions, no "
           "learned table; -: no limit)\n%-14s %-4s %4s %4s %6s %5s %5s %5s %6s %6s %4s %6s %9s  %s\n",
           "name", "arch", "enc", "dec", "hidden", "heads", "kvh", "kv", "ffn", "vocab", "glu",
           "ctx", "params", "measured profile");
    printf("%-14s %-4s %4s %4s %6s %5s %5s %5s %6s %6s %4s %6s %9s\n", "#", "", "layer", "layer", "",
           "", "", "", "", "", "", "tokens", "billions");
    for (int i = 0; i < n; i++) print_model(&ms[i]);
    const gpu_spec *gs = gpu_presets(&n);
    printf("\n# GPUs\n%-10s %11s %9s %9s  %s\n", "name", "peak", "HBM", "memory", "source");
    printf("%-10s %11s %9s %9s\n", "#", "TFLOP/s", "GB/s", "MB");
    for (int i = 0; i < n; i++)
        printf("%-10s %11.1f %9.0f %9.0f  %s\n", gs[i].name, gs[i].peak_tflops, gs[i].hbm_gbps,
               gs[i].mem_mb, gs[i].source);
    printf("\n# clusters (--hw; a GPU name means one node of 8 with NVLink)\n"
           "# mem_limit: what the planner may use; reserved: kept back for the CUDA context, library\n"
           "# workspaces and fragmentation (DynaPipe's 36,000 of 40,960 MB share where a preset\n"
           "# does not say)\n"
           "%-10s %-10s %8s %10s %10s %10s %10s %9s %9s\n",
           "name", "gpu", "per_node", "intra", "intra_lat", "inter", "inter_lat", "mem_limit", "reserved");
    printf("%-10s %-10s %8s %10s %10s %10s %10s %9s %9s\n", "#", "", "GPUs", "Gbit/s", "us", "Gbit/s",
           "us", "MB", "MB");
    for (int i = 0; i < cluster_preset_count(); i++) {
        cluster_spec cl;
        cluster_preset_at(i, &cl);
        printf("%-10s %-10s %8d %10.0f %10.0f %10.0f %10.0f %9.0f %9.0f\n", cl.name, cl.gpu.name,
               cl.gpus_per_node, cl.intra_gbit, cl.intra_latency_us, cl.inter_gbit,
               cl.inter_latency_us, cl.mem_limit_mb, cl.gpu.mem_mb - cl.mem_limit_mb);
    }
    return 0;
}
