#define _DEFAULT_SOURCE /* realpath */
#include "cli.h"
#include "../planner/study.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../scheduler/schedule.h"

#ifndef DPSIM_SRCDIR
#define DPSIM_SRCDIR "."
#endif

int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dpsim %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: %s\nTry 'dpsim %s --help' for the options.\n", usage, cmd);
    return EXIT_USAGE;
}

int cli_fail(const char *cmd, const dp_err *err)
{
    fprintf(stderr, "dpsim %s: error: %s\n", cmd, err->msg);
    return EXIT_RUNTIME;
}

int cli_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
            int64_t *out)
{
    if (dp_parse_i64(text, lo, hi, out) == 0) return 0;
    fprintf(stderr, "dpsim %s: %s \"%s\" must be a whole number in [%lld, %lld]\n", cmd, opt, text,
            (long long)lo, (long long)hi);
    return -1;
}

int cli_double(const char *cmd, const char *opt, const char *text, double lo, double hi,
               double *out)
{
    if (dp_parse_f64(text, out) == 0 && *out >= lo && *out <= hi) return 0;
    fprintf(stderr, "dpsim %s: %s \"%s\" must be a number in [%g, %g]\n", cmd, opt, text, lo, hi);
    return -1;
}

static int readable(const char *path)
{
    return access(path, R_OK) == 0;
}

const char *cli_data_path(const char *rel, char *buf, size_t cap)
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

void cli_warn_short_trace(const study_result *r, int64_t global_tokens)
{
    static int told;
    if (told || r->short_batch_tokens <= 0) return;
    told = 1;
    fprintf(stderr, "dpsim: warning: the whole trace is one global batch of %lld tokens, less "
            "than the %lld asked (--global-tokens): every figure is of that smaller batch\n"
            "hint: a longer trace (dpsim trace gen -n), or --global-tokens %lld\n",
            (long long)r->short_batch_tokens, (long long)global_tokens,
            (long long)r->short_batch_tokens);
}

int cli_stderr_is_tty(void)
{
    return isatty(STDERR_FILENO);
}

void cost_opts_default(cost_opts *o)
{
    memset(o, 0, sizeof *o);
    o->model = "gpt-6.7b-16l";
    o->hw = "p4d";
    o->tp = 1;
    o->cp = 1;
    o->recompute = RECOMPUTE_NONE;
    o->overlap = COST_OVERLAP_DEFAULT;
}

/* Whether the run uses FlashAttention: what the options force, else the model's own. */
static int flash_of(const cost_opts *o, const model_spec *m)
{
    return o->flash_attn ? 1 : o->no_flash_attn ? 0 : m->flash_attn;
}

/* Applies the attention, overlap and context-parallel options to a cost model just built (st
 * its constructor's status); on failure the model is freed. */
static dp_status finish(dp_status st, const cost_opts *o, const model_spec *m, cost_model **cm,
                        dp_err *err)
{
    if (st != DP_OK) return st;
    cost_model_set_attention(*cm, flash_of(o, m), attn_kernel_find(o->attn_kernel));
    (*cm)->overlap = o->overlap;
    (*cm)->seq_parallel = !o->no_sp; /* what the analytic model reads */
    if ((st = cost_model_set_cp(*cm, o->cp, o->cp_alltoall, err)) != DP_OK) {
        cost_model_free(*cm);
        *cm = NULL;
    }
    return st;
}

/* What the source line says of a built cost model's attention: ", FlashAttention (cudnn-h100)"
 * where it is timed as a fused kernel (timed: the analytic model), ", FlashAttention memory"
 * where only memory follows it (a profile, or no fused kernel measured on the GPU), or ""; and
 * whether the model's default chose it. */
static const char *attention_note(const cost_model *cm, const cost_opts *o, int timed, char *buf,
                                  size_t cap)
{
    if (!cm->flash_attn) return "";
    const char *why = o->flash_attn ? "" : "the model's default";
    if (timed && cm->attn)
        snprintf(buf, cap, ", FlashAttention (%s%s%s)", cm->attn->name, why[0] ? ": " : "", why);
    else
        snprintf(buf, cap, ", FlashAttention memory%s%s%s", why[0] ? " (" : "", why,
                 why[0] ? ")" : "");
    return buf;
}

dp_status cli_build_cost(const cost_opts *o, model_spec *m, cluster_spec *hw, cost_model **cm,
                         char *source, size_t source_cap, dp_err *err)
{
    if (o->recompute_dynamic)
        return dp_fail(err, DP_ERR_INVALID, "--recompute %s chooses a mode per %s; it applies to "
                       "plan, sim, compare and sweep", recompute_choice_name(o),
                       o->recompute_dynamic == RECOMPUTE_PER_MB ? "micro-batch" : "iteration");
    dp_status st = o->model_json ? model_parse_json(o->model_json, "the plan's model_spec", m, err)
                                 : model_resolve(o->model, m, err);
    if (st == DP_OK)
        st = o->hw_json ? cluster_parse_json(o->hw_json, "the plan's cluster_spec", hw, err)
                        : cluster_resolve(o->hw, hw, err);
    if (st != DP_OK) return st;
    if (o->flash_attn && o->no_flash_attn)
        return dp_fail(err, DP_ERR_INVALID, "--flash-attention and --no-flash-attention contradict "
                       "each other");
    if (o->attn_kernel && !attn_kernel_find(o->attn_kernel)) {
        char names[256] = "";
        int n;
        const attn_kernel *ks = attn_kernels(&n);
        for (int i = 0; i < n; i++)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     ks[i].name);
        return dp_fail(err, DP_ERR_INVALID, "unknown --attention-kernel \"%s\" (one of %s)",
                       o->attn_kernel, names);
    }
    char note[128];
    char sp[96];
    snprintf(sp, sizeof sp, "%s%s", o->tp < 2 ? "" : o->no_sp ? ", no sequence parallelism"
                                                              : ", sequence parallelism",
             o->cp < 2 ? "" : o->cp_alltoall ? ", context parallelism (all-to-all)"
                                             : ", context parallelism (ring)");
    if (o->fit) {
        st = finish(cost_fit_load(o->fit, m, hw, o->tp, o->recompute, cm, err), o, m, cm, err);
        if (st == DP_OK)
            snprintf(source, source_cap, "analytic, fitted (%s), at tp %d, recompute %s%s%s",
                     o->fit, o->tp, recompute_name(o->recompute),
                     attention_note(*cm, o, 1, note, sizeof note), sp);
        return st;
    }
    const char *profile = o->profile;
    char buf[4096];
    if (!profile && !o->analytic && m->profile[0] && strcmp(hw->gpu.name, "a100-40gb") == 0) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/profiles/%s", m->profile);
        profile = cli_data_path(rel, buf, sizeof buf);
        if (!profile)
            return dp_fail(err, DP_ERR_IO,
                           "%s: the measured profile of %s is missing\nhint: set DPSIM_DATA to the "
                           "dpsim source folder, or pass --profile or --analytic",
                           buf, m->name);
    }
    if (profile && !o->analytic) {
        st = finish(cost_profile_load(profile, m, hw, o->tp, o->recompute, cm, err), o, m, cm, err);
        if (st == DP_OK)
            snprintf(source, source_cap, "profile %s (tp %d, recompute %s%s)", profile, o->tp,
                     recompute_name(o->recompute), attention_note(*cm, o, 0, note, sizeof note));
        return st;
    }
    analytic_params p;
    analytic_params_for_gpu(&hw->gpu, &p);
    const char *fitted_on = analytic_params_provenance();
    int foreign = strcmp(hw->gpu.name, ANALYTIC_DEFAULT_GPU) != 0;
    static int told;
    if (foreign && !told && !o->quiet) {
        told = 1;
        fprintf(stderr, "dpsim: note: the analytic model's efficiencies and per-layer floor are %s; "
                "on %s its GEMM efficiency is scaled by the GPU's best measured matmul (%.0f%% of "
                "peak against the A100's %.0f%%) and the floor and byte efficiency are an "
                "assumption\nhint: measure a profile on it (dprun profile) and fit them: dpsim "
                "calibrate --profile CSV --hw %s -o fit.json, then --fit fit.json\n", fitted_on,
                hw->gpu.name, 100 * hw->gpu.matmul_eff, 100 * HW_A100_MATMUL_EFF, hw->gpu.name);
    }
    st = finish(cost_analytic_new(m, hw, o->tp, o->recompute, &p, cm, err), o, m, cm, err);
    if (st == DP_OK)
        snprintf(source, source_cap, "analytic on %s (default parameters, fitted on %s%s)%s%s",
                 hw->gpu.name, ANALYTIC_DEFAULT_GPU,
                 foreign ? ": GEMM efficiency scaled by this GPU's measured matmul, the rest "
                           "assumed"
                         : "",
                 attention_note(*cm, o, 1, note, sizeof note), sp);
    return st;
}

dp_status cli_build_cost_at(const cost_opts *o, int tp, recompute_mode rc, model_spec *m,
                            cluster_spec *hw, cost_model **cm, char *source, size_t source_cap,
                            dp_err *err)
{
    cost_opts one = *o;
    one.recompute_dynamic = 0;
    one.tp = tp;
    one.recompute = rc;
    return cli_build_cost(&one, m, hw, cm, source, source_cap, err);
}

static int set_recompute(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_opts *o = ctx;
    o->recompute_dynamic = strcmp(arg, "dynamic") == 0   ? RECOMPUTE_PER_ITERATION
                           : strcmp(arg, "mixed") == 0   ? RECOMPUTE_PER_MB
                           : strcmp(arg, "fastest") == 0 ? RECOMPUTE_FASTEST
                                                         : 0;
    if (o->recompute_dynamic) o->recompute = RECOMPUTE_NONE;
    else if (recompute_parse(arg, &o->recompute) != 0) {
        cli_usage_error(cmd, usage, "unknown --recompute \"%s\" (none, selective, full, dynamic, "
                        "mixed, fastest)", arg);
        return -1;
    }
    return 0;
}

const char *recompute_choice_name(const cost_opts *o)
{
    return o->recompute_dynamic == RECOMPUTE_FASTEST ? "fastest" : recompute_plan_name(o);
}

const char *recompute_plan_name(const cost_opts *o)
{
    return o->recompute_dynamic == RECOMPUTE_PER_MB ? "mixed"
           : o->recompute_dynamic                   ? "dynamic"
                                                    : recompute_name(o->recompute);
}

static int set_overlap(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_opts *o = ctx;
    if (cost_overlap_parse(arg, &o->overlap) == 0) return 0;
    cli_usage_error(cmd, usage, "unknown --overlap \"%s\" (none, all, or a list of dp, zero, tp)",
                    arg);
    return -1;
}

static void show_overlap(const void *ctx, char *buf, size_t cap)
{
    cost_overlap_name(((const cost_opts *)ctx)->overlap, buf, cap);
}

static void show_recompute(const void *ctx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", recompute_choice_name(ctx));
}

static int set_cp_kind(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    cost_opts *o = ctx;
    if (strcmp(arg, "ring") == 0) o->cp_alltoall = 0;
    else if (strcmp(arg, "all-to-all") == 0 || strcmp(arg, "ulysses") == 0) o->cp_alltoall = 1;
    else {
        cli_usage_error(cmd, usage, "unknown --cp-kind \"%s\" (ring, all-to-all)", arg);
        return -1;
    }
    return 0;
}

static void show_cp_kind(const void *ctx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", ((const cost_opts *)ctx)->cp_alltoall ? "all-to-all" : "ring");
}

void cli_cost_options(cli_opts *t, cost_opts *o)
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
    cli_opt_int(t, "cp", 0, &o->cp, "C", 1, 1024, "1",
                "context-parallel degree: each sequence split over C GPUs (with\n"
                "their tp), 2C chunks for causal balance (analytic model, GPT)")->marks =
        OPT_FIXED_BY_PLAN;
    cli_opt *ck = cli_opt_call(t, "cp-kind", 0, set_cp_kind, o, "K", "ring",
                               "ring (K/V passed around behind the attention) | all-to-all\n"
                               "(DeepSpeed-Ulysses: heads across the group)");
    ck->marks = OPT_FIXED_BY_PLAN, ck->show = show_cp_kind;
    cli_opt_flag(t, "no-sp", 0, &o->no_sp,
                 "tensor parallelism without Megatron's sequence parallelism (on by\n"
                 "default with --tp > 1, analytic model: norms' and dropouts'\n"
                 "activations split along the sequence, all-gather + reduce-scatter)");
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
                   "fa3-h100, cudnn-h100, fa4-b200 (dpsim models lists them)");
    cli_opt *ov = cli_opt_call(t, "overlap", 0, set_overlap, o, "LIST", "dp,zero",
                               "communication that overlaps compute: dp (gradient reduction in\n"
                               "buckets during the last backward), zero (ZeRO/FSDP prefetch),\n"
                               "tp (TP collectives behind GEMMs), all, or none (serial: the\n"
                               "upper bound)");
    ov->show = show_overlap;
}

void cli_progress(void *ctx, size_t done, size_t total)
{
    static const void *who;
    static size_t last;
    static double t0;
    double now = dp_now_s();
    if (who != ctx || done < last) who = ctx, last = 0, t0 = now; /* a new run */
    if (total == 0 || (done != total && done - last < total / 200)) return;
    last = done;
    double el = now - t0;
    double frac = (double)done / (double)total;
    fprintf(stderr, "\r%s: %5.1f%% of the trace", (const char *)ctx, 100 * frac);
    if (frac > 0.01 && done != total) fprintf(stderr, ", ETA %.0f s   ", el * (1 - frac) / frac);
    if (done == total) fprintf(stderr, ", %.1f s          \n", el);
}

int cli_jobs_default(void)
{
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    return ncpu > 0 ? (int)ncpu : 1;
}

int cli_split_list(char *buf, const char **items, int max)
{
    int n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        if (n == max) return -1;
        items[n++] = tok;
    }
    return n;
}

int cli_method_lists(const char *cmd, const char *usage, const char *batchings,
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
    out->nb = cli_split_list(out->buf_b, out->batchings, METHOD_LIST_MAX);
    out->ns = cli_split_list(out->buf_s, out->schedules, METHOD_LIST_MAX);
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
    for (int i = 0; i < out->ns; i++) {
        int known = schedule_find(out->schedules[i]) != NULL;
        if (!known || (!interleaved_ok && schedule_find(out->schedules[i])->chunked)) {
            cli_usage_error(cmd, usage, "%sschedule \"%s\" in --schedules (one of gpipe, 1f1b, "
                            "%sadaptive, zb1)", known ? "" : "unknown ", out->schedules[i],
                            interleaved_ok ? "interleaved, " : "");
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
