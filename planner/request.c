/* request.c — what a study asks for: defaults, the option rows that fill it, its description
 * (request.h). */
#define _DEFAULT_SOURCE /* realpath */
#include "request.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../scheduler/microbatch.h"
#include "../scheduler/schedule.h"

#ifndef DPSIM_SRCDIR
#define DPSIM_SRCDIR "."
#endif

static int readable(const char *path)
{
    return access(path, R_OK) == 0;
}

const char *planner_data_path(const char *rel, char *buf, size_t cap)
{
    const char *env = getenv("DPSIM_DATA");
    if (env && *env) {
        snprintf(buf, cap, "%s/%s", env, rel);
        if (readable(buf)) return buf;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0'; /* the build/ folder */
            snprintf(buf, cap, "%s/../%s", exe, rel);
            char real[PATH_MAX];
            if (readable(buf) && realpath(buf, real)) snprintf(buf, cap, "%s", real);
            if (readable(buf)) return buf;
        }
    }
    snprintf(buf, cap, "%s/%s", DPSIM_SRCDIR, rel);
    return readable(buf) ? buf : NULL;
}

void cost_request_default(cost_request *o)
{
    memset(o, 0, sizeof *o);
    o->model = "gpt-6.7b-16l";
    o->hw = "p4d";
    o->tp = 1;
    o->cp = 1;
    o->cp_max = 4;
    o->recompute = RECOMPUTE_NONE;
    o->overlap = COST_OVERLAP_DEFAULT;
    o->precision = -1;
    o->grad_reduce = GRAD_REDUCE_AUTO;
    o->ep = 1, o->etp = 1;
    o->routing = MOE_ROUTE_UNIFORM;
}

static int set_routing(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_request *o = ctx;
    moe_route_kind k;
    if (moe_routing_parse(arg, &k, &o->routing_alpha) == 0) {
        o->routing = (int)k, o->routing_file = NULL;
        return 0;
    }
    struct stat st;
    int path = strncmp(arg, "skewed:", 7) != 0, found = path && stat(arg, &st) == 0;
    if (found && S_ISREG(st.st_mode)) {
        o->routing = MOE_ROUTE_HISTOGRAM, o->routing_file = arg; /* read with the model */
        return 0;
    }
    if (found || (path && (strchr(arg, '/') || strchr(arg, '.')))) /* a file, by its look */
        cli_usage_error(cmd, usage, "--routing \"%s\": cannot read it as a file (%s): a CSV of "
                        "each expert's tokens", arg,
                        found ? "not a regular file" : strerror(errno));
    else
        cli_usage_error(cmd, usage, "unknown --routing \"%s\" (uniform, even, skewed:ALPHA with "
                        "a Zipf exponent ALPHA from 0 to 100, or a CSV file of each expert's "
                        "tokens)", arg);
    return -1;
}

static int set_dispatcher(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    moe_dispatch d;
    if (moe_dispatch_parse(arg, &d) != 0) {
        cli_usage_error(cmd, usage, "unknown --dispatcher \"%s\" (alltoall, deepep)", arg);
        return -1;
    }
    ((cost_request *)ctx)->dispatch = (int)d;
    return 0;
}

static void show_dispatcher(const void *ctx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", moe_dispatch_name((moe_dispatch)((const cost_request *)ctx)->dispatch));
}

static void show_routing(const void *ctx, char *buf, size_t cap)
{
    const cost_request *o = ctx;
    if (o->routing_file) snprintf(buf, cap, "%s", o->routing_file);
    else moe_routing_name((moe_route_kind)o->routing, o->routing_alpha, buf, cap);
}

static int set_precision(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_request *o = ctx;
    train_precision p;
    if (precision_parse(arg, &p) == 0) {
        o->precision = (int)p;
        return 0;
    }
    cli_usage_error(cmd, usage, "unknown --precision \"%s\" (bf16, fp16, fp8)", arg);
    return -1;
}

static void show_precision(const void *ctx, char *buf, size_t cap)
{
    int p = ((const cost_request *)ctx)->precision;
    snprintf(buf, cap, "%s", p < 0 ? "the model's" : precision_name((train_precision)p));
}

static int set_stack(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    software_stack st;
    if (stack_parse(arg, &st) != 0) {
        cli_usage_error(cmd, usage, "unknown --stack \"%s\" (%s)", arg, stack_names());
        return -1;
    }
    ((cost_request *)ctx)->stack = (int)st;
    return 0;
}

static void show_stack(const void *ctx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", stack_name((software_stack)((const cost_request *)ctx)->stack));
}

static int set_grad_reduce(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_request *o = ctx;
    if (strcmp(arg, "fp32") == 0) o->grad_reduce = GRAD_REDUCE_FP32;
    else if (strcmp(arg, "bf16") == 0 || strcmp(arg, "fp16") == 0) o->grad_reduce = GRAD_REDUCE_16;
    else if (strcmp(arg, "auto") == 0) o->grad_reduce = GRAD_REDUCE_AUTO;
    else {
        cli_usage_error(cmd, usage, "unknown --grad-reduce-dtype \"%s\" (fp32, bf16, auto)", arg);
        return -1;
    }
    return 0;
}

static void show_grad_reduce(const void *ctx, char *buf, size_t cap)
{
    int g = ((const cost_request *)ctx)->grad_reduce;
    snprintf(buf, cap, "%s", g == GRAD_REDUCE_FP32 ? "fp32" : g == GRAD_REDUCE_16 ? "bf16" : "auto");
}

static int set_recompute(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_request *o = ctx;
    if (recompute_policy_parse(arg, &o->recompute) != 0) {
        cli_usage_error(cmd, usage, "unknown --recompute \"%s\" (none, selective, full, dynamic, "
                        "mixed, fastest)", arg);
        return -1;
    }
    return 0;
}

int recompute_plan_policy(const cost_request *o)
{
    return o->recompute == RECOMPUTE_POLICY_FASTEST ? RECOMPUTE_POLICY_DYNAMIC : o->recompute;
}

static int set_overlap(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_request *o = ctx;
    if (cost_overlap_parse(arg, &o->overlap) == 0) return 0;
    cli_usage_error(cmd, usage, "unknown --overlap \"%s\" (none, all, or a list of dp, zero, tp)",
                    arg);
    return -1;
}

static int set_split(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_request *o = ctx;
    if (placement_split_parse(arg, &o->split) == 0) return 0;
    cli_usage_error(cmd, usage, "--layers-per-stage \"%s\" must list whole numbers of layers, one "
                    "per virtual stage (pp x chunks of them, at most %d), separated by commas, or "
                    "be less:F,L (the first and last stages F and L layers fewer, e.g. less:1,1)",
                    arg, PLACEMENT_SPLIT_MAX);
    return -1;
}

static void show_split(const void *ctx, char *buf, size_t cap)
{
    const cost_request *o = ctx;
    if (o->split.n || o->split.less_first || o->split.less_last)
        placement_split_format(&o->split, buf, cap);
    else snprintf(buf, cap, "even");
}

static void show_overlap(const void *ctx, char *buf, size_t cap)
{
    cost_overlap_name(((const cost_request *)ctx)->overlap, buf, cap);
}

static void show_recompute(const void *ctx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", recompute_policy_name(((const cost_request *)ctx)->recompute));
}

static int set_cp_kind(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_request *o = ctx;
    if (strcmp(arg, "ring") == 0) o->cp_alltoall = 0;
    else if (strcmp(arg, "all-to-all") == 0 || strcmp(arg, "ulysses") == 0) o->cp_alltoall = 1;
    else {
        cli_usage_error(cmd, usage, "unknown --cp-kind \"%s\" (ring, all-to-all)", arg);
        return -1;
    }
    return 0;
}

/* --cp C or auto, and --cp-max G, in either order: under auto cp is the group, cp_max */
/* "Only with" conditions (options.h cli_opt_only_with), read once every option is parsed. */
static int cp_auto_on(const void *ctx)
{
    return ((const cost_request *)ctx)->cp_auto;
}

static int cp_on(const void *ctx)
{
    const cost_request *o = ctx;
    return o->cp > 1 || o->cp_auto;
}

static int toy_without_trace(const void *ctx)
{
    const plan_request *p = ctx;
    return p->toy_costs && !p->trace;
}

static int set_cp(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_request *o = ctx;
    int64_t v;
    if (strcmp(arg, "auto") == 0) {
        o->cp_auto = 1, o->cp = o->cp_max;
        return 0;
    }
    if (dp_parse_i64(arg, 1, 1024, &v) != 0) {
        cli_usage_error(cmd, usage, "--cp \"%s\" is not a degree in [1, 1024] or auto", arg);
        return -1;
    }
    o->cp_auto = 0, o->cp = (int)v;
    return 0;
}

static void show_cp(const void *ctx, char *buf, size_t cap)
{
    const cost_request *o = ctx;
    if (o->cp_auto) snprintf(buf, cap, "auto");
    else snprintf(buf, cap, "%d", o->cp);
}

static int set_cp_max(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_request *o = ctx;
    int64_t v;
    if (dp_parse_i64(arg, 2, 1024, &v) != 0) {
        cli_usage_error(cmd, usage, "--cp-max \"%s\" is not a group of 2 to 1024 GPUs", arg);
        return -1;
    }
    o->cp_max = (int)v;
    if (o->cp_auto) o->cp = o->cp_max;
    return 0;
}

static void show_cp_max(const void *ctx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%d", ((const cost_request *)ctx)->cp_max);
}

static void show_cp_kind(const void *ctx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", ((const cost_request *)ctx)->cp_alltoall ? "all-to-all" : "ring");
}

void cost_request_options(cli_opts *t, cost_request *o)
{
    cli_opt_string(t, "model", 0, &o->model, "M",
                   "gpt-6.7b-16l", "model preset or JSON/HF config file (dpsim models)")
        ->marks = OPT_FIXED_BY_PLAN;
    cli_opt_string(t, "hw", 0, &o->hw, "H", "p4d", "cluster or GPU preset, or JSON file")->marks =
        OPT_FIXED_BY_PLAN;
    cli_opt_string(t, "profile", 0, &o->profile, "CSV", "the model's own on A100-40GB",
                   "measured cost profile");
    cli_opt_string(t, "fit", 0, &o->fit, "FILE", NULL,
                   "fitted analytic model from 'dpsim calibrate -o'");
    cli_opt_flag(t, "analytic", 0, &o->analytic, "analytic cost model even where a profile exists");
    cli_opt_int(t, "tp", 0, &o->tp, "T", 1, 1024, "1", "tensor-parallel degree")->marks =
        OPT_FIXED_BY_PLAN | OPT_TUNED;
    cli_opt *cpo = cli_opt_call(t, "cp", 0, set_cp, o, "C", "1",
                                "context-parallel degree: each sequence split over C GPUs (with\n"
                                "their tp), 2C chunks for causal balance (analytic model, GPT);\n"
                                "auto: a group of --cp-max GPUs, each micro-batch at its own\n"
                                "degree dividing it (its rows split whole over the rest), the\n"
                                "fastest that fits (ring form)");
    cpo->marks = OPT_FIXED_BY_PLAN, cpo->show = show_cp;
    cli_opt *cpm = cli_opt_call(t, "cp-max", 0, set_cp_max, o, "G", "4",
                                "with --cp auto: the GPUs of a context-parallel group");
    cpm->marks = OPT_FIXED_BY_PLAN, cpm->show = show_cp_max;
    cli_opt_only_with(cpm, cp_auto_on, o, "--cp auto");
    cli_opt *ck = cli_opt_call(t, "cp-kind", 0, set_cp_kind, o, "K", "ring",
                               "ring (K/V passed around behind the attention) | all-to-all\n"
                               "(DeepSpeed-Ulysses: heads across the group)");
    ck->marks = OPT_FIXED_BY_PLAN, ck->show = show_cp_kind;
    cli_opt_only_with(ck, cp_on, o, "--cp above 1 or auto");
    cli_opt_flag(t, "no-sp", 0, &o->no_sp,
                 "tensor parallelism without Megatron's sequence parallelism (on by\n"
                 "default with --tp > 1: norms' and dropouts' activations split along\n"
                 "the sequence, all-gather + reduce-scatter; a measured profile\n"
                 "without it plans without it)")
        ->marks = OPT_FIXED_BY_PLAN;
    cli_opt *r = cli_opt_call(t, "recompute", 0, set_recompute, o, "R", "none",
                              "none | selective | full | dynamic (per iteration, the first\n"
                              "of none, selective, full whose plan fits; DynaPipe's rule) |\n"
                              "mixed (dynamic's plan, then per micro-batch a mode lower\n"
                              "wherever it still fits) | fastest (per iteration, the mode\n"
                              "whose plan simulates fastest of those that fit)");
    r->marks = OPT_FIXED_BY_PLAN | OPT_TUNED, r->show = show_recompute;
    cli_opt_flag(t, "flash-attention", 0, &o->flash_attn,
                 "FlashAttention: attention scores never stored, and (analytic\n"
                 "model) attention timed as the GPU's fused kernel runs it, causal\n"
                 "work halved; the default for LLaMA-kind models (dpsim models)");
    cli_opt_flag(t, "no-flash-attention", 0, &o->no_flash_attn,
                 "unfused attention even where the model defaults to FlashAttention");
    cli_opt_string(t, "attention-kernel", 0, &o->attn_kernel, "K", "the GPU's",
                   "fused attention kernel's measured tables: fa2-a100, fa2-h100,\n"
                   "fa3-h100, cudnn-h100, triton-h100, fa4-b200, each on its own GPUs\n"
                   "(dpsim models lists them)");
    cli_opt *sk = cli_opt_call(t, "stack", 0, set_stack, o, "S", "megatron-te",
                               "the software that trains it: megatron-te (Transformer Engine's\n"
                               "fused kernels, cuDNN attention on Hopper), torch-eager\n"
                               "(torchtitan without compile: SDPA's FlashAttention-2, norms,\n"
                               "rotary, SwiGLU and loss as separate ops), torch-compile (the\n"
                               "same attention, elementwise ops fused); analytic model");
    sk->show = show_stack, sk->marks = OPT_FIXED_BY_PLAN;
    cli_opt *ov = cli_opt_call(t, "overlap", 0, set_overlap, o, "LIST", "dp,zero",
                               "communication that overlaps compute: dp (gradient reduction in\n"
                               "buckets during the last backward), zero (ZeRO/FSDP prefetch),\n"
                               "tp (TP collectives behind GEMMs), ep (a MoE's all-to-alls\n"
                               "behind the compute of another micro-batch next to it in the\n"
                               "order: a forward and a backward paired), all, or none\n"
                               "(serial: the upper bound)");
    ov->show = show_overlap, ov->marks = OPT_FIXED_BY_PLAN;
    cli_opt *pr = cli_opt_call(t, "precision", 0, set_precision, o, "P", "the model's",
                               "bf16 | fp16 | fp8 (Transformer Engine's recipe: the layers'\n"
                               "GEMMs at the GPU's measured FP8 rate, casts and FP8 weight\n"
                               "copies counted, attention and the LM head in bf16; analytic\n"
                               "model); the model's: fp16 for the paper's shapes, else bf16");
    pr->show = show_precision, pr->marks = OPT_FIXED_BY_PLAN;
    cli_opt *gr = cli_opt_call(t, "grad-reduce-dtype", 0, set_grad_reduce, o, "D", "auto",
                               "fp32 | bf16: the gradients' buffer and collectives (fp32: 4\n"
                               "bytes a parameter, twice the bytes moved); auto: fp32 under\n"
                               "bf16 and fp8 (Megatron-LM's and torchtitan's default), 16-bit\n"
                               "under fp16");
    gr->show = show_grad_reduce, gr->marks = OPT_FIXED_BY_PLAN;
    cli_opt_int(t, "ep", 0, &o->ep, "E", 1, MOE_EP_MAX, "1",
                "a mixture of experts: expert parallelism, the experts split over E\n"
                "GPUs of each stage's tp x cp x dp, each expert whole (E divides the\n"
                "experts and those GPUs; analytic model)")->marks = OPT_FIXED_BY_PLAN;
    cli_opt_int(t, "etp", 0, &o->etp, "T", 1, MOE_EP_MAX, "1",
                "a mixture of experts: expert tensor parallelism, each expert's MLP\n"
                "split over T GPUs (an ep rank is T GPUs: ep x T divides a stage's\n"
                "tp x cp x dp; T divides the expert width)")->marks = OPT_FIXED_BY_PLAN;
    cli_opt_double(t, "capacity-factor", 0, &o->capacity, "C", 0, 1000, "0: dropless",
                   "a mixture of experts: each expert takes at most C x its even share\n"
                   "of a micro-batch's routed tokens and drops the rest (GShard, Switch;\n"
                   "the share dropped is reported); 0: dropless, as Megatron-Core and\n"
                   "DeepSeek train")->marks = OPT_FIXED_BY_PLAN;
    cli_opt *ro = cli_opt_call(t, "routing", 0, set_routing, o, "R", "uniform",
                               "a mixture of experts: how routed tokens fall on the experts,\n"
                               "uniform, skewed:ALPHA (Zipf, expert e's share (e+1)^-ALPHA),\n"
                               "even (a what-if: no imbalance), or a CSV file whose column tokens\n"
                               "holds each expert's measured count; a micro-batch waits for its\n"
                               "busiest ep rank");
    ro->show = show_routing, ro->marks = OPT_FIXED_BY_PLAN;
    cli_opt *di = cli_opt_call(t, "dispatcher", 0, set_dispatcher, o, "D", "alltoall",
                               "a mixture of experts: how the token exchange crosses nodes,\n"
                               "alltoall (NCCL all-to-alls of every routed copy: Megatron's\n"
                               "default) or deepep (DeepEP: a token crosses to each node once,\n"
                               "within its router's group limit, then NVLink)");
    di->show = show_dispatcher, di->marks = OPT_FIXED_BY_PLAN;
}

int planner_jobs_default(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu > 0 ? (int)ncpu : 1;
}

int planner_split_list(char *buf, const char **items, int max)
{
    int n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == max) return -1;
        items[n++] = tok;
    }
    return n;
}

int planner_method_lists(const char *cmd, const char *usage, const char *batchings,
                     const char *schedules, int interleaved_ok, method_lists *out)
{
    memset(out, 0, sizeof *out);
    if (strlen(batchings) >= sizeof out->buf_b || strlen(schedules) >= sizeof out->buf_s) {
        cli_usage_error(cmd, usage, "--batchings or --schedules is longer than %zu characters",
                        sizeof out->buf_b - 1);
        return -1;
    }
    strcpy(out->buf_b, batchings);
    strcpy(out->buf_s, schedules);
    out->nb = planner_split_list(out->buf_b, out->batchings, METHOD_LIST_MAX);
    out->ns = planner_split_list(out->buf_s, out->schedules, METHOD_LIST_MAX);
    if (out->nb < 0 || out->ns < 0) {
        cli_usage_error(cmd, usage, "more than %d items in --%s", METHOD_LIST_MAX,
                        out->nb < 0 ? "batchings" : "schedules");
        return -1;
    }
    for (int i = 0; i < out->nb; i++)
        if (!batcher_find(out->batchings[i])) {
            cli_usage_error(cmd, usage, "unknown batching \"%s\" in --batchings", out->batchings[i]);
            return -1;
        }
    for (int i = 0; i < out->ns; i++) { /* auto, auto-loop, auto-v: per iteration, as --schedule says */
        const schedule *sc = schedule_find(out->schedules[i]);
        int known = sc || schedule_chooser_find(out->schedules[i]);
        if (!known || (!interleaved_ok && sc && sc->chunked)) {
            char names[256];
            cli_usage_error(cmd, usage, "%sschedule \"%s\" in --schedules (one of %s%s)",
                            known ? "" : "unknown ", out->schedules[i],
                            schedule_names(names, sizeof names),
                            interleaved_ok ? "" : "; not interleaved here");
            return -1;
        }
    }
    if (out->nb == 0 || out->ns == 0) {
        cli_usage_error(cmd, usage, "empty --batchings or --schedules");
        return -1;
    }
    for (int k = 0; k < 2; k++) { /* a name twice would run, and rank, the same rows twice */
        const char *const *v = k ? out->schedules : out->batchings;
        for (int i = 0, n = k ? out->ns : out->nb; i < n; i++)
            for (int j = 0; j < i; j++)
                if (strcmp(v[i], v[j]) == 0) {
                    cli_usage_error(cmd, usage, "--%s names \"%s\" twice",
                                    k ? "schedules" : "batchings", v[i]);
                    return -1;
                }
    }
    return 0;
}

void plan_request_default(plan_request *p)
{
    memset(p, 0, sizeof *p);
    cost_request_default(&p->cost);
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
    p->gpu_jitter = -1;
    p->microbatches = 8;
}

static int set_batching(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    if (!batcher_find(arg)) {
        char names[512] = "";
        int nb;
        const batcher *bs = batcher_list(&nb);
        for (int i = 0; i < nb; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     bs[i].name);
        cli_usage_error(cmd, usage, "unknown --batching \"%s\" (%s)", arg, names);
        return -1;
    }
    ((plan_request *)ctx)->batching = arg;
    return 0;
}

static int set_schedule(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    if (!schedule_find(arg) && !schedule_chooser_find(arg)) {
        char names[256];
        cli_usage_error(cmd, usage, "unknown --schedule \"%s\" (%s)", arg,
                        schedule_names(names, sizeof names));
        return -1;
    }
    ((plan_request *)ctx)->schedule = arg;
    return 0;
}

static int set_dp_split(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    plan_request *p = ctx;
    if (strcmp(arg, "auto") == 0) p->dp_split = DP_SPLIT_AUTO;
    else if (strcmp(arg, "global") == 0) p->dp_split = DP_SPLIT_GLOBAL;
    else if (strcmp(arg, "replica") == 0) p->dp_split = DP_SPLIT_REPLICA;
    else {
        cli_usage_error(cmd, usage, "unknown --dp-split \"%s\" (auto, global, replica)", arg);
        return -1;
    }
    return 0;
}

static void show_batching(const void *ctx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", ((const plan_request *)ctx)->batching);
}

static void show_schedule(const void *ctx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", ((const plan_request *)ctx)->schedule);
}

static void show_dp_split(const void *ctx, char *buf, size_t cap)
{
    int m = ((const plan_request *)ctx)->dp_split;
    snprintf(buf, cap, "%s", m == DP_SPLIT_GLOBAL ? "global" : m == DP_SPLIT_REPLICA ? "replica" : "auto");
}

void plan_request_options(cli_opts *t, plan_request *p)
{
    enum { F = OPT_FIXED_BY_PLAN, T = OPT_TUNED };
    cost_request_options(t, &p->cost);
    cli_opt_string(t, "trace", 0, &p->trace, "FILE", "traces/flanv2-100k.csv, synthetic",
                   "trace (CSV, JSONL, .npy)")->marks = F;
    cli_opt *o = cli_opt_call(t, "batching", 0, set_batching, p, "B", "dynamic",
                              "padding | packing | packing-batch | packing-ffd | token | dynamic\n"
                              "(packing: Megatron's --pack-dataset); varlen (attention per\n"
                              "sample): packing-varlen | packing-ffd-varlen | dp-balanced |\n"
                              "packing-kk | packing-wlb | dynamic-varlen; varlen rows capped,\n"
                              "tapered or grouped by the DP: packing-half | packing-quarter |\n"
                              "packing-taper | packing-dp; auto: per iteration every one not\n"
                              "packing the dataset, simulated, the fastest that fits");
    o->marks = F | T, o->mark_name = "--batching (use --batchings)", o->show = show_batching;
    o = cli_opt_call(t, "schedule", 0, set_schedule, p, "S", "1f1b",
                     "gpipe | 1f1b | interleaved | adaptive | zb1 | zbv (ZB-V: 2 chunks a\n"
                     "device in a V) | dualpipev (DeepSeek's DualPipeV: the same V,\n"
                     "forwards overlapped with backwards) | auto-loop (per\n"
                     "iteration the one-chunk schedule whose plan fits and simulates\n"
                     "fastest, named in the plan) | auto-v (the same among zbv and\n"
                     "dualpipev) | auto (a loop or a V for the run, whichever plans\n"
                     "the first iteration and the one with the longest sample faster,\n"
                     "both fitting; then as auto-loop or auto-v)");
    o->marks = F | T, o->mark_name = "--schedule (use --schedules)", o->show = show_schedule;
    cli_opt_int(t, "pp", 0, &p->pp, "S", 1, STAGE_MAX, "4", "pipeline stages (devices)")->marks =
        F | T;
    cli_opt_int(t, "dp", 0, &p->dp, "D", 1, REPLICA_MAX, "1", "data-parallel replicas")->marks = F | T;
    cli_opt_int(t, "chunks", 0, &p->chunks, "C", 1, 64, "1",
                "model chunks per device (interleaved)")->marks = F | T;
    cli_opt_int(t, "warmup", 0, &p->warmup, "N", 0, 1 << 20, "the schedule's",
                "1f1b, interleaved: at most N forwards (model chunks) before each\n"
                "device's first backward, fewer than the schedule's rule where it\n"
                "asks more: less memory held, more bubble (0: the rule)")->marks = F;
    o = cli_opt_call(t, "layers-per-stage", 0, set_split, &p->cost, "LIST", "even",
                     "GPT: the layers of each virtual stage, pp x chunks of them in\n"
                     "order, e.g. 7,8,8,7 (the first and last may be 0: the embedding or\n"
                     "the LM head alone, as Megatron's uneven first and last stages); or\n"
                     "less:F,L, an even split of the layers and F + L more standing for\n"
                     "the embedding and the head, the first stage then F fewer and the\n"
                     "last L fewer (torchtitan's default is less:1,1; on a V both ends\n"
                     "share device 0)");
    o->marks = F | T, o->show = show_split;
    cli_opt_int(t, "zero", 0, &p->zero, "Z", 0, 3, "1",
                "ZeRO stage 0..3 (3: FSDP, with a pipeline too: each\n"
                "micro-batch gathers its stage's parameters and reduce-scatters)")->marks = F | T;
    cli_opt_int(t, "shard-group", 0, &p->shard_group, "G", 0, 1 << 20, "all of them",
                "HSDP: ZeRO's state split over G GPUs of the dp x cp group (k\n"
                "replicas' cp x k GPUs, those placed together: a node's), the\n"
                "groups' gradient shards all-reduced across (FSDP's HYBRID_SHARD,\n"
                "Megatron's distributed-optimizer instances)")->marks = F | T;
    cli_opt_int(t, "mbs", 0, &p->mbs, "N", 1, 1 << 20, "1",
                "padding/packing: samples or rows per micro-batch")->marks = F | T;
    cli_opt_int64(t, "mb-tokens", 0, &p->mb_tokens, "N", 1, INT64_C(1) << 40, "2048",
                  "token: padded tokens per micro-batch")->marks = F | T;
    cli_opt_int64(t, "global-tokens", 0, &p->global_tokens, "N", 1, INT64_C(1) << 40, "65536",
                  "tokens per iteration (global batch)")->marks = F;
    cli_opt_int(t, "max-seqlen", 0, &p->max_seqlen, "L", 1, 1 << 24, "2048",
                "input (GPT: sequence) truncation, tokens")->marks = F;
    cli_opt_int(t, "max-dec-seqlen", 0, &p->max_dec_seqlen, "L", 3, 1 << 24, "512",
                "T5 decoder length cap incl. BOS/EOS")->marks = F;
    cli_opt_double(t, "dp-thin", 0, &p->thin_ms, "MS", 0, 1e6, "0",
                   "dynamic: DynaPipe's candidate thinning, 0 = exact")->marks = F;
    o = cli_opt_call(t, "dp-split", 0, set_dp_split, p, "M", "auto",
                     "dynamic with replicas: global (one DP, then Karmarkar-Karp) |\n"
                     "replica (samples dealt to replicas, one DP each) |\n"
                     "auto (global up to 1024 replicas)");
    o->marks = F, o->show = show_dp_split;
    cli_opt_int(t, "iterations", 0, &p->iterations, "K", 0, 1 << 30, "0",
                "iterations to plan, 0 = the whole trace")->marks = F;
    cli_opt_double(t, "mem-limit", 0, &p->mem_limit_mb, "MB", 1, 1e9,
                   "the hardware's usable memory", "device memory the plan must fit");
    cli_opt_double(t, "link-gbps", 0, &p->link_gbit, "G", 1e-6, 1e9, "the cluster's",
                   "what-if: every link's bandwidth, Gbit/s");
    cli_opt_double(t, "link-latency-us", 0, &p->link_latency_us, "U", 0, 1e9, "the cluster's",
                   "what-if: every link's latency, us");
    cli_opt_double(t, "gpu-jitter", 0, &p->gpu_jitter, "CV", 0, 0.5, "the cluster's",
                   "per-GPU speed variation (coefficient of variation): each step\n"
                   "waits CV x E[max of N normals] of its compute for the slowest\n"
                   "of the job's N GPUs; 0 turns it off (dpsim models: 1.4% for\n"
                   "GPU presets, 0 for p4d and CPU ranks)");
    cli_opt_flag(t, "stream", 0, &p->stream,
                 "read a trace CSV as a stream, in bounded memory (automatic for\n"
                 "files over 256 MB)")->marks = F | OPT_NO_RESULT;
    cli_opt_flag(t, "allow-oversubscribe", 0, &p->allow_oversubscribe,
                 "a layout of more GPUs (tp x cp x pp x dp) than the cluster has,\n"
                 "or a --mem-limit above the GPU's memory, as a what-if (refused\n"
                 "otherwise)")->marks = OPT_NO_RESULT;
    cli_opt_string(t, "toy-costs", 0, &p->toy_costs, "F,B[,W]", NULL,
                   "textbook costs: every stage F ms forward, B backward (of which W\n"
                   "weight gradients) per micro-batch of --max-seqlen tokens; no\n"
                   "embedding or LM head, free links unless --link-* is given, no\n"
                   "optimizer step; without --trace, --microbatches equal samples;\n"
                   "full recompute adds F to each backward")->marks = F;
    cli_opt_only_with(cli_opt_int(t, "microbatches", 0, &p->microbatches, "N", 1, 1 << 16, "8",
                                  "with --toy-costs and no --trace: N equal micro-batches"),
                      toy_without_trace, p, "--toy-costs and no --trace")
        ->marks = F;
    cli_opt_flag(t, "keep-going", 0, &p->keep_going,
                 "an iteration that cannot be planned to fit (out of memory, a\n"
                 "sample that fits nowhere) is counted, named and left out (else: stop)")
        ->marks = F;
}

void plan_request_parsed(const cli_opts *t, plan_request *p)
{
    p->fixed_by_plan = t->first[OPT_FIXED_BY_PLAN] ? t->first[OPT_FIXED_BY_PLAN]->name : NULL;
}

int plan_request_set(plan_request *p, const char *name, const char *value, const char *cmd,
                 const char *usage)
{
    cli_opts t;
    cli_opts_init(&t, cmd, usage, NULL);
    plan_request_options(&t, p);
    int r = cli_opts_set(&t, name, value);
    cli_opts_release(&t);
    return r;
}

void plan_request_config(const plan_request *p, const char *const *skip, int n_skip, char *buf, size_t cap)
{
    plan_request_describe(p, skip, n_skip, buf, cap > 1024 ? cap - 1024 : cap);
    size_t at = strlen(buf);
    char def[4096];
    const struct {
        const char *name, *path;
    } in[] = {{"trace", p->trace ? p->trace : planner_data_path(PLANNER_DEFAULT_TRACE, def, sizeof def)},
              {"model", p->cost.model}, {"hw", p->cost.hw}, {"profile", p->cost.profile},
              {"fit", p->cost.fit}};
    for (size_t i = 0; i < sizeof in / sizeof in[0]; i++) {
        int skipped = 0;
        for (int j = 0; j < n_skip; j++) skipped |= strcmp(skip[j], in[i].name) == 0;
        uint64_t h;
        struct stat sb; /* a file (a preset's name is none): its content, not its path */
        if (skipped || !in[i].path || stat(in[i].path, &sb) != 0 || !S_ISREG(sb.st_mode) ||
            dp_hash_file(in[i].path, &h) != 0)
            continue;
        at += (size_t)snprintf(buf + at, cap - at, "%s_hash=%016llx\n", in[i].name,
                               (unsigned long long)h);
        if (at >= cap) return;
    }
    snprintf(buf + at, cap - at, "dpsim=%s\n", DPSIM_VERSION);
}

int planner_config_differs(const char *there, const char *here, char *what, size_t cap)
{
    while (*there || *here) {
        size_t a = strcspn(there, "\n"), b = strcspn(here, "\n");
        if (a != b || strncmp(there, here, a) != 0) {
            snprintf(what, cap, "%.*s there, %.*s here", (int)(a < 300 ? a : 300), there,
                     (int)(b < 300 ? b : 300), here);
            return 1;
        }
        there += a + (there[a] == '\n');
        here += b + (here[b] == '\n');
    }
    return 0;
}

int plan_request_canonical(const plan_request *base, const char *name, const char *value, char *buf,
                       size_t cap)
{
    plan_request probe = *base;
    cli_opts t;
    cli_opts_init(&t, "describe", "", NULL);
    plan_request_options(&t, &probe);
    cli_opt *o = cli_opts_find(&t, name);
    int ok = o && cli_opts_set(&t, name, value) == 1;
    if (ok) cli_opt_value(o, buf, cap);
    cli_opts_release(&t);
    return ok ? 0 : -1;
}

void planner_config_path(const char *out, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s.config", out ? out : "");
}

dp_status planner_check_outputs(const plan_request *p, const out_role *extra_in, int n_extra,
                            const out_role *outs, int n_out, dp_err *err)
{
    out_role in[16];
    int n = 0;
    char def[4096];
    if (p) {
        const char *tr = p->trace ? p->trace : planner_data_path(PLANNER_DEFAULT_TRACE, def, sizeof def);
        in[n++] = (out_role){"--trace", tr};
        in[n++] = (out_role){"--profile", p->cost.profile};
        in[n++] = (out_role){"--fit", p->cost.fit};
        in[n++] = (out_role){"--model", p->cost.model};
        in[n++] = (out_role){"--hw", p->cost.hw};
    }
    for (int i = 0; i < n_extra && n < 16; i++) in[n++] = extra_in[i];
    return out_distinct(in, n, outs, n_out, err);
}

void plan_request_describe(const plan_request *p, const char *const *skip, int n_skip, char *buf,
                       size_t cap)
{
    /* every row of the plan options' table: an option added there is described too */
    plan_request q = *p;
    if (!q.trace) q.trace = PLANNER_DEFAULT_TRACE;
    cli_opts t;
    cli_opts_init(&t, "describe", "", NULL);
    plan_request_options(&t, &q);
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < t.n && at < cap; i++) {
        const cli_opt *o = &t.row[i];
        int skipped = (o->marks & OPT_NO_RESULT) != 0;
        for (int j = 0; j < n_skip; j++) skipped |= strcmp(skip[j], o->name) == 0;
        if (skipped) continue;
        char v[4200];
        cli_opt_value(o, v, sizeof v);
        at += (size_t)snprintf(buf + at, cap - at, "%s=%s\n", o->name, v);
    }
    cli_opts_release(&t);
}

