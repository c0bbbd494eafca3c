/* Options shared by plan, sim, compare and sweep, and their resolution into a plan_env. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../scheduler/microbatch.h"
#include "../scheduler/schedule.h"
#include "../sim/study.h"
#include "cli.h"

#define DEFAULT_TRACE "traces/flanv2-100k.csv"
#define STREAM_ABOVE_BYTES (256L << 20) /* trace CSVs larger than this are streamed */

void plan_cli_default(plan_cli *p)
{
    memset(p, 0, sizeof *p);
    cost_opts_default(&p->cost);
    p->batching = "dynamic";
    p->schedule = "1f1b";
    p->pp = 4;
    p->dp = 1;
    p->chunks = 1;
    p->zero = 1;
    p->mbs = 1;
    p->mb_tokens = 2048;
    p->global_tokens = 65536;
    p->link_gbit = -1;
    p->link_latency_us = -1;
}

const char PLAN_OPTS_HELP[] =
    "      --trace FILE     trace (CSV, JSONL, .npy)     [traces/flanv2-100k.csv, synthetic]\n"
    "      --batching B     padding | packing | packing-batch | packing-ffd | token |\n"
    "                       dynamic (packing: Megatron's --pack-dataset)      [dynamic]\n"
    "      --schedule S     gpipe | 1f1b | interleaved | adaptive | zb1         [1f1b]\n"
    "      --pp S           pipeline stages (devices)                         [4]\n"
    "      --dp D           data-parallel replicas                            [1]\n"
    "      --chunks C       model chunks per device (interleaved)             [1]\n"
    "      --zero Z         ZeRO stage 0..3                                   [1]\n"
    "      --mbs N          padding/packing: samples or rows per micro-batch  [1]\n"
    "      --mb-tokens N    token: padded tokens per micro-batch              [2048]\n"
    "      --global-tokens N  tokens per iteration (global batch)             [65536]\n"
    "      --max-seqlen L   input (GPT: sequence) truncation, tokens          [2048]\n"
    "      --max-dec-seqlen L  T5 decoder length cap incl. BOS/EOS           [512]\n"
    "      --dp-thin MS     dynamic: DynaPipe's candidate thinning, 0 = exact [0]\n"
    "      --dp-split M     dynamic with replicas: global (one DP, then Karmarkar-Karp) |\n"
    "                       replica (samples dealt to replicas, one DP each) |\n"
    "                       auto (global up to 64 replicas)                   [auto]\n"
    "      --iterations K   iterations to plan, 0 = the whole trace           [0]\n"
    "      --mem-limit MB   device memory the plan must fit     [the hardware's usable memory]\n"
    "      --link-gbps G    what-if: every link's bandwidth, Gbit/s           [the cluster's]\n"
    "      --link-latency-us U  what-if: every link's latency, us            [the cluster's]\n"
    "      --stream         read a trace CSV as a stream, in bounded memory (automatic for\n"
    "                       files over 256 MB)\n"
    "      --allow-oversubscribe  a layout of more GPUs (tp x pp x dp) than the cluster has,\n"
    "                       as a what-if                                        [refused]\n"
    "      --keep-going     an iteration that cannot be planned to fit (out of memory, a\n"
    "                       sample that fits nowhere) is counted, named and left out [stop]\n";

/* The options whose value a plan file carries (its header, micro-batches and instructions). */
static const char *fixed_by_plan(int c)
{
    static const struct {
        int code;
        const char *name;
    } T[] = {{300, "--model"}, {301, "--hw"}, {305, "--tp"}, {306, "--recompute"}, {320, "--trace"},
             {321, "--batching"}, {322, "--schedule"}, {323, "--pp"}, {324, "--dp"},
             {325, "--chunks"}, {326, "--zero"}, {327, "--mbs"}, {328, "--mb-tokens"},
             {329, "--global-tokens"}, {330, "--max-seqlen"}, {331, "--max-dec-seqlen"},
             {332, "--dp-thin"}, {333, "--iterations"}, {337, "--stream"}, {339, "--keep-going"}, {340, "--dp-split"}};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        if (T[i].code == c) return T[i].name;
    return NULL;
}

int cli_plan_opt(plan_cli *p, int c, const char *arg, const char *cmd, const char *usage)
{
    if (!p->fixed_by_plan) p->fixed_by_plan = fixed_by_plan(c);
    int r = cli_cost_opt(&p->cost, c, arg, cmd, usage);
    if (r != 0) return r;
    int64_t v;
    double d;
    switch (c) {
    case 320: p->trace = arg; return 1;
    case 321:
        if (!batcher_find(arg)) {
            char names[256] = "";
            int nb;
            const batcher *bs = batcher_list(&nb);
            for (int i = 0; i < nb; i++)
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                         bs[i].name);
            cli_usage_error(cmd, usage, "unknown --batching \"%s\" (%s)", arg, names);
            return -1;
        }
        p->batching = arg;
        return 1;
    case 322:
        if (!schedule_find(arg)) {
            cli_usage_error(cmd, usage,
                            "unknown --schedule \"%s\" (gpipe, 1f1b, interleaved, adaptive, zb1)", arg);
            return -1;
        }
        p->schedule = arg;
        return 1;
    case 323:
        if (cli_int(cmd, "--pp", arg, 1, STAGE_MAX, &v)) return -1;
        p->pp = (int)v;
        return 1;
    case 324:
        if (cli_int(cmd, "--dp", arg, 1, 4096, &v)) return -1;
        p->dp = (int)v;
        return 1;
    case 325:
        if (cli_int(cmd, "--chunks", arg, 1, 64, &v)) return -1;
        p->chunks = (int)v;
        return 1;
    case 326:
        if (cli_int(cmd, "--zero", arg, 0, 3, &v)) return -1;
        p->zero = (int)v;
        return 1;
    case 327:
        if (cli_int(cmd, "--mbs", arg, 1, 1 << 20, &v)) return -1;
        p->mbs = (int)v;
        return 1;
    case 328:
        if (cli_int(cmd, "--mb-tokens", arg, 1, INT64_C(1) << 40, &v)) return -1;
        p->mb_tokens = v;
        return 1;
    case 329:
        if (cli_int(cmd, "--global-tokens", arg, 1, INT64_C(1) << 40, &v)) return -1;
        p->global_tokens = v;
        return 1;
    case 330:
        if (cli_int(cmd, "--max-seqlen", arg, 1, 1 << 24, &v)) return -1;
        p->max_seqlen = (int)v;
        return 1;
    case 331:
        if (cli_int(cmd, "--max-dec-seqlen", arg, 3, 1 << 24, &v)) return -1;
        p->max_dec_seqlen = (int)v;
        return 1;
    case 332:
        if (cli_double(cmd, "--dp-thin", arg, 0, 1e6, &p->thin_ms)) return -1;
        return 1;
    case 333:
        if (cli_int(cmd, "--iterations", arg, 0, 1 << 30, &v)) return -1;
        p->iterations = (int)v;
        return 1;
    case 334:
        if (cli_double(cmd, "--mem-limit", arg, 1, 1e9, &p->mem_limit_mb)) return -1;
        return 1;
    case 335:
        if (cli_double(cmd, "--link-gbps", arg, 1e-6, 1e9, &d)) return -1;
        p->link_gbit = d;
        return 1;
    case 336:
        if (cli_double(cmd, "--link-latency-us", arg, 0, 1e9, &d)) return -1;
        p->link_latency_us = d;
        return 1;
    case 337: p->stream = 1; return 1;
    case 338: p->allow_oversubscribe = 1; return 1;
    case 339: p->keep_going = 1; return 1;
    case 340:
        if (strcmp(arg, "auto") == 0) p->dp_split = DP_SPLIT_AUTO;
        else if (strcmp(arg, "global") == 0) p->dp_split = DP_SPLIT_GLOBAL;
        else if (strcmp(arg, "replica") == 0) p->dp_split = DP_SPLIT_REPLICA;
        else {
            cli_usage_error(cmd, usage, "unknown --dp-split \"%s\" (auto, global, replica)", arg);
            return -1;
        }
        return 1;
    }
    return 0;
}

int cli_plan_set(plan_cli *p, const char *name, const char *value, const char *cmd,
                 const char *usage)
{
    static const struct option table[] = {PLAN_LONG_OPTS, {0, 0, 0, 0}};
    for (const struct option *o = table; o->name; o++)
        if (strcmp(o->name, name) == 0) return cli_plan_opt(p, o->val, value, cmd, usage);
    return 0;
}

dp_status cli_plan_setup(const plan_cli *p, plan_env *env, dp_err *err)
{
    memset(env, 0, sizeof *env);
    trace_init(&env->trace);
    dp_status st;
    if (p->cost.recompute_dynamic) { /* one cost model per mode, tried in order per iteration */
        for (int m = RECOMPUTE_COUNT - 1; m >= 0; m--) { /* none last: the source names it */
            st = cli_build_cost_at(&p->cost, p->cost.tp, (recompute_mode)m, &env->model, &env->hw,
                                   &env->recompute_cm[m], env->cost_source,
                                   sizeof env->cost_source, err);
            if (st != DP_OK) return st;
        }
        env->cm = env->recompute_cm[0];
        size_t at = strlen(env->cost_source);
        snprintf(env->cost_source + at, sizeof env->cost_source - at,
                 "; --recompute dynamic: none, selective or full per iteration");
    } else {
        st = cli_build_cost(&p->cost, &env->model, &env->hw, &env->cm, env->cost_source,
                            sizeof env->cost_source, err);
        if (st != DP_OK) return st;
    }
    cluster_override_links(&env->hw, p->link_gbit, p->link_latency_us);
    env->cm->hw = env->hw;
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        if (env->recompute_cm[m]) env->recompute_cm[m]->hw = env->hw;
    env->mem_limit_mb = p->mem_limit_mb > 0 ? p->mem_limit_mb : env->hw.mem_limit_mb;
    batch_rules_default(&env->rules, env->model.arch);
    env->rules.global_tokens = p->global_tokens;
    if (p->max_seqlen) env->rules.max_seqlen = p->max_seqlen;
    if (p->max_dec_seqlen) env->rules.max_dec_seqlen = p->max_dec_seqlen;
    /* Pad to at least the profile's shortest measured length, so short samples stay answerable. */
    cost_profile_range range;
    if (cost_profile_range_of(env->cm, COMP_ENCODER, &range) == DP_OK && range.enc_min > 0)
        env->rules.min_padded = range.enc_min;
    st = batch_rules_validate(&env->rules, err);
    if (st != DP_OK) return st;
    if (p->pp * p->chunks > model_layers(&env->model) ||
        (env->model.arch == ARCH_GPT && p->pp * p->chunks > env->model.enc_layers))
        return dp_fail(err, DP_ERR_INVALID,
                       "--pp %d x --chunks %d is more pipeline stages than %s has layers (%d)",
                       p->pp, p->chunks, env->model.name, model_layers(&env->model));
    if (p->chunks > 1 && strcmp(p->schedule, "interleaved") != 0)
        return dp_fail(err, DP_ERR_INVALID, "--chunks applies to --schedule interleaved only");
    int64_t gpus = (int64_t)p->cost.tp * p->pp * p->dp, have = (int64_t)env->hw.nodes * env->hw.gpus_per_node;
    if (env->hw.nodes > 0 && gpus > have && !p->allow_oversubscribe)
        return dp_fail(err, DP_ERR_INVALID,
                       "--tp %d x --pp %d x --dp %d = %lld GPUs, but %s has %d node%s of %d GPUs "
                       "(%lld)\nhint: a cluster with more nodes (--hw, \"nodes\" in its JSON), or "
                       "--allow-oversubscribe for a what-if",
                       p->cost.tp, p->pp, p->dp, (long long)gpus, env->hw.name, env->hw.nodes,
                       env->hw.nodes == 1 ? "" : "s", env->hw.gpus_per_node, (long long)have);
    const char *path = p->trace;
    if (!path) {
        path = cli_data_path(DEFAULT_TRACE, env->trace_path, sizeof env->trace_path);
        if (!path)
            return dp_fail(err, DP_ERR_IO,
                           "the default trace %s is missing\nhint: pass --trace, or set DPSIM_DATA "
                           "to the dpsim source folder",
                           DEFAULT_TRACE);
    } else {
        snprintf(env->trace_path, sizeof env->trace_path, "%s", path);
    }
    struct stat sb;
    int big = stat(env->trace_path, &sb) == 0 && sb.st_size > STREAM_ABOVE_BYTES;
    if ((p->stream || big) && trace_format_for_path(env->trace_path) == TRACE_FORMAT_CSV) {
        env->stream_path = env->trace_path; /* opened by each run */
        return DP_OK;
    }
    return trace_load(env->trace_path, TRACE_FORMAT_AUTO, NULL, NULL, &env->trace, err);
}

void plan_env_release(plan_env *env)
{
    if (!env->recompute_cm[0]) cost_model_free(env->cm);
    for (int m = 0; m < RECOMPUTE_COUNT; m++) cost_model_free(env->recompute_cm[m]);
    trace_release(&env->trace);
    memset(env, 0, sizeof *env);
}

void cli_study_opts(const plan_cli *p, const plan_env *env, const char *batching,
                    const char *sched, study_opts *o)
{
    memset(o, 0, sizeof *o);
    o->cm = env->cm;
    o->rules = &env->rules;
    o->batching = batcher_find(batching);
    o->sched = schedule_find(sched);
    o->pp = p->pp;
    o->chunks = strcmp(sched, "interleaved") == 0 ? p->chunks : 1;
    o->dp = p->dp;
    o->zero = p->zero;
    o->mem_limit_mb = env->mem_limit_mb;
    o->mbs = p->mbs;
    o->mb_tokens = p->mb_tokens;
    o->thin_ms = p->thin_ms;
    o->dp_split = p->dp_split;
    o->max_iterations = p->iterations;
    o->stream_path = env->stream_path;
    o->keep_going = p->keep_going;
    for (int m = 0; m < RECOMPUTE_COUNT; m++) o->recompute_cm[m] = env->recompute_cm[m];
}

/* The simulator's configuration for a plan read from a file: its header's model, hardware, TP,
 * recompute and ZeRO give model state and links (with the what-if overrides of p). */
dp_status cli_plan_sim_config(const plan *pl, const char *where, const plan_cli *p, cluster_spec *hw,
                              sim_config *cfg, dp_err *err)
{
    cost_opts co = p->cost;
    if (pl->h.model[0]) co.model = pl->h.model;
    if (pl->h.hw[0]) co.hw = pl->h.hw;
    co.model_json = pl->h.model_json; /* a self-contained plan runs from anywhere */
    co.hw_json = pl->h.hw_json;
    co.tp = pl->h.tp;
    co.recompute_dynamic = 0; /* model state, the config's only use of it, is the same in every mode */
    if (recompute_parse(pl->h.recompute, &co.recompute) != 0) co.recompute = RECOMPUTE_NONE;
    model_spec m;
    cost_model *cm = NULL;
    char source[4200];
    stage_model sm;
    dp_status st = DP_OK;
    TRY(cli_build_cost(&co, &m, hw, &cm, source, sizeof source, err));
    cluster_override_links(hw, p->link_gbit, p->link_latency_us);
    TRY(stage_model_init(&sm, cm, pl->h.pp, pl->h.chunks, pl->h.dp, pl->h.zero,
                         p->mem_limit_mb > 0 ? p->mem_limit_mb : hw->mem_limit_mb, err));
    TRY(plan_check_model(pl, &m, where, err));
    study_sim_config(&sm, hw, cfg);
out:
    cost_model_free(cm);
    return st;
}

dp_status cli_check_outputs(const plan_cli *p, const out_role *extra_in, int n_extra,
                            const out_role *outs, int n_out, dp_err *err)
{
    out_role in[16];
    int n = 0;
    char def[4096];
    if (p) {
        const char *tr = p->trace ? p->trace : cli_data_path(DEFAULT_TRACE, def, sizeof def);
        in[n++] = (out_role){"--trace", tr};
        in[n++] = (out_role){"--profile", p->cost.profile};
        in[n++] = (out_role){"--fit", p->cost.fit};
        in[n++] = (out_role){"--model", p->cost.model};
        in[n++] = (out_role){"--hw", p->cost.hw};
    }
    for (int i = 0; i < n_extra && n < 16; i++) in[n++] = extra_in[i];
    return out_distinct(in, n, outs, n_out, err);
}

void cli_plan_describe(const plan_cli *p, const char *const *skip, int n_skip, char *buf,
                       size_t cap)
{
    char v[32][160];
    const char *k[32];
    int n = 0;
#define ADD(key, ...) (k[n] = (key), snprintf(v[n], sizeof v[n], __VA_ARGS__), n++)
    ADD("model", "%s", p->cost.model ? p->cost.model : "");
    ADD("hw", "%s", p->cost.hw ? p->cost.hw : "");
    ADD("profile", "%s", p->cost.profile ? p->cost.profile : "");
    ADD("fit", "%s", p->cost.fit ? p->cost.fit : "");
    ADD("analytic", "%s", p->cost.analytic ? "true" : "false");
    ADD("tp", "%d", p->cost.tp);
    ADD("recompute", "%s", p->cost.recompute_dynamic ? "dynamic" : recompute_name(p->cost.recompute));
    ADD("trace", "%s", p->trace ? p->trace : DEFAULT_TRACE);
    ADD("batching", "%s", p->batching);
    ADD("schedule", "%s", p->schedule);
    ADD("pp", "%d", p->pp);
    ADD("dp", "%d", p->dp);
    ADD("chunks", "%d", p->chunks);
    ADD("zero", "%d", p->zero);
    ADD("mbs", "%d", p->mbs);
    ADD("mb-tokens", "%lld", (long long)p->mb_tokens);
    ADD("global-tokens", "%lld", (long long)p->global_tokens);
    ADD("max-seqlen", "%d", p->max_seqlen);
    ADD("max-dec-seqlen", "%d", p->max_dec_seqlen);
    ADD("dp-thin", "%.17g", p->thin_ms);
    ADD("dp-split", "%s", p->dp_split == DP_SPLIT_GLOBAL ? "global" : p->dp_split == DP_SPLIT_REPLICA ? "replica" : "auto");
    ADD("iterations", "%d", p->iterations);
    ADD("mem-limit", "%.17g", p->mem_limit_mb);
    ADD("link-gbps", "%.17g", p->link_gbit);
    ADD("link-latency-us", "%.17g", p->link_latency_us);
    ADD("keep-going", "%d", p->keep_going);
#undef ADD
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && at < cap; i++) {
        int skipped = 0;
        for (int j = 0; j < n_skip; j++) skipped |= strcmp(skip[j], k[i]) == 0;
        if (!skipped) at += (size_t)snprintf(buf + at, cap - at, "%s=%s\n", k[i], v[i]);
    }
}
