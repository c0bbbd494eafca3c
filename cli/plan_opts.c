/* Options shared by plan, sim, compare and sweep, and their resolution into a plan_env. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../scheduler/microbatch.h"
#include "../scheduler/schedule.h"
#include "../planner/study.h"
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
    ((plan_cli *)ctx)->batching = arg;
    return 0;
}

static int set_schedule(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    if (!schedule_find(arg) && strcmp(arg, "auto") != 0) {
        cli_usage_error(cmd, usage, "unknown --schedule \"%s\" (gpipe, 1f1b, interleaved, "
                        "adaptive, zb1, auto)", arg);
        return -1;
    }
    ((plan_cli *)ctx)->schedule = arg;
    return 0;
}

static int set_dp_split(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    plan_cli *p = ctx;
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
    snprintf(buf, cap, "%s", ((const plan_cli *)ctx)->batching);
}

static void show_schedule(const void *ctx, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s", ((const plan_cli *)ctx)->schedule);
}

static void show_dp_split(const void *ctx, char *buf, size_t cap)
{
    int m = ((const plan_cli *)ctx)->dp_split;
    snprintf(buf, cap, "%s", m == DP_SPLIT_GLOBAL ? "global" : m == DP_SPLIT_REPLICA ? "replica" : "auto");
}

void cli_plan_options(cli_opts *t, plan_cli *p)
{
    enum { F = OPT_FIXED_BY_PLAN, T = OPT_TUNED };
    cli_cost_options(t, &p->cost);
    cli_opt_string(t, "trace", 0, &p->trace, "FILE", "traces/flanv2-100k.csv, synthetic",
                   "trace (CSV, JSONL, .npy)")->marks = F;
    cli_opt *o = cli_opt_call(t, "batching", 0, set_batching, p, "B", "dynamic",
                              "padding | packing | packing-batch | packing-ffd | token | dynamic\n"
                              "(packing: Megatron's --pack-dataset); varlen (attention per\n"
                              "sample): packing-varlen | packing-ffd-varlen | dp-balanced |\n"
                              "packing-kk | packing-wlb | dynamic-varlen; auto: per iteration\n"
                              "every one not packing the dataset, simulated, the fastest that fits");
    o->marks = F | T, o->mark_name = "--batching (use --batchings)", o->show = show_batching;
    o = cli_opt_call(t, "schedule", 0, set_schedule, p, "S", "1f1b",
                     "gpipe | 1f1b | interleaved | adaptive | zb1 | auto (plan and sim:\n"
                     "each run, the one of the highest throughput that fits)");
    o->marks = F | T, o->mark_name = "--schedule (use --schedules)", o->show = show_schedule;
    cli_opt_int(t, "pp", 0, &p->pp, "S", 1, STAGE_MAX, "4", "pipeline stages (devices)")->marks =
        F | T;
    cli_opt_int(t, "dp", 0, &p->dp, "D", 1, 4096, "1", "data-parallel replicas")->marks = F | T;
    cli_opt_int(t, "chunks", 0, &p->chunks, "C", 1, 64, "1",
                "model chunks per device (interleaved)")->marks = F;
    cli_opt_int(t, "zero", 0, &p->zero, "Z", 0, 3, "1",
                "ZeRO stage 0..3 (3: FSDP, with a pipeline too: each\n"
                "micro-batch gathers its stage's parameters and reduce-scatters)")->marks = F | T;
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
                     "auto (global up to 64 replicas)");
    o->marks = F, o->show = show_dp_split;
    cli_opt_int(t, "iterations", 0, &p->iterations, "K", 0, 1 << 30, "0",
                "iterations to plan, 0 = the whole trace")->marks = F;
    cli_opt_double(t, "mem-limit", 0, &p->mem_limit_mb, "MB", 1, 1e9,
                   "the hardware's usable memory", "device memory the plan must fit");
    cli_opt_double(t, "link-gbps", 0, &p->link_gbit, "G", 1e-6, 1e9, "the cluster's",
                   "what-if: every link's bandwidth, Gbit/s");
    cli_opt_double(t, "link-latency-us", 0, &p->link_latency_us, "U", 0, 1e9, "the cluster's",
                   "what-if: every link's latency, us");
    cli_opt_flag(t, "stream", 0, &p->stream,
                 "read a trace CSV as a stream, in bounded memory (automatic for\n"
                 "files over 256 MB)")->marks = F | OPT_NO_RESULT;
    cli_opt_flag(t, "allow-oversubscribe", 0, &p->allow_oversubscribe,
                 "a layout of more GPUs (tp x pp x dp) than the cluster has,\n"
                 "as a what-if (refused otherwise)")->marks = OPT_NO_RESULT;
    cli_opt_string(t, "toy-costs", 0, &p->toy_costs, "F,B[,W]", NULL,
                   "textbook costs: every stage F ms forward, B backward (of which W\n"
                   "weight gradients) per micro-batch of --max-seqlen tokens; no\n"
                   "embedding or LM head, free links unless --link-* is given, no\n"
                   "optimizer step; without --trace, --microbatches equal samples")->marks = F;
    cli_opt_int(t, "microbatches", 0, &p->microbatches, "N", 1, 1 << 16, "8",
                "with --toy-costs and no --trace: N equal micro-batches")->marks = F;
    cli_opt_flag(t, "keep-going", 0, &p->keep_going,
                 "an iteration that cannot be planned to fit (out of memory, a\n"
                 "sample that fits nowhere) is counted, named and left out (else: stop)")
        ->marks = F;
}

void cli_plan_parsed(const cli_opts *t, plan_cli *p)
{
    p->fixed_by_plan = t->first[OPT_FIXED_BY_PLAN] ? t->first[OPT_FIXED_BY_PLAN]->name : NULL;
}

int cli_plan_set(plan_cli *p, const char *name, const char *value, const char *cmd,
                 const char *usage)
{
    cli_opts t;
    cli_opts_init(&t, cmd, usage, NULL);
    cli_plan_options(&t, p);
    int r = cli_opts_set(&t, name, value);
    cli_opts_release(&t);
    return r;
}

/* n equal samples of the rules' full lengths (GPT: max_seqlen; T5: max_seqlen in, the decoder's
 * cap out), as one global batch of exactly those tokens. */
static dp_status toy_trace(int n, batch_rules *rules, char *name, size_t name_cap, trace *t,
                           dp_err *err)
{
    int32_t in = rules->max_seqlen, out = rules->max_dec_seqlen - rules->dec_extra;
    if (rules->arch == ARCH_GPT) in = rules->max_seqlen - rules->max_seqlen / 2, out = rules->max_seqlen / 2;
    for (int i = 0; i < n; i++)
        if (trace_push(t, "textbook", in, out) != DP_OK)
            return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    sample_len x = batch_sample(rules, t, 0);
    rules->global_tokens = (int64_t)n * (x.enc + x.dec);
    snprintf(name, name_cap, "%d equal samples of %d tokens (textbook)", n, x.enc + x.dec);
    return DP_OK;
}

void cli_plan_config(const plan_cli *p, const char *const *skip, int n_skip, char *buf, size_t cap)
{
    cli_plan_describe(p, skip, n_skip, buf, cap > 1024 ? cap - 1024 : cap);
    size_t at = strlen(buf);
    char def[4096];
    const struct {
        const char *name, *path;
    } in[] = {{"trace", p->trace ? p->trace : cli_data_path(DEFAULT_TRACE, def, sizeof def)},
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

int cli_config_differs(const char *there, const char *here, char *what, size_t cap)
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

int cli_plan_canonical(const plan_cli *base, const char *name, const char *value, char *buf,
                       size_t cap)
{
    plan_cli probe = *base;
    cli_opts t;
    cli_opts_init(&t, "describe", "", NULL);
    cli_plan_options(&t, &probe);
    cli_opt *o = cli_opts_find(&t, name);
    int ok = o && cli_opts_set(&t, name, value) == 1;
    if (ok) cli_opt_value(o, buf, cap);
    cli_opts_release(&t);
    return ok ? 0 : -1;
}

dp_status cli_choose_schedule(plan_cli *p, dp_err *err)
{
    if (strcmp(p->schedule, "auto") != 0) return DP_OK;
    plan_cli q = *p;
    int n;
    const schedule *all = schedule_list(&n);
    const char *names[16];
    for (int i = 0; i < n && i < 16; i++) names[i] = all[i].name;
    /* the set-up's checks: with --chunks against the chunked schedule, else the baseline */
    q.schedule = p->chunks > 1 ? schedule_for_options(names, n) : schedule_baseline()->name;
    plan_env env;
    dp_status st = cli_plan_setup(&q, &env, err);
    const schedule *best = NULL;
    double thr[16] = {0};
    if (st == DP_OK) {
        study_opts o;
        cli_study_opts(&q, &env, q.batching, q.schedule, &o);
        o.chunks = p->chunks;
        st = study_best_schedule(&o, &env.trace, &best, thr, err);
    }
    plan_env_release(&env);
    if (st != DP_OK) return st;
    p->schedule = best->name;
    fprintf(stderr, "dpsim: --schedule auto chose %s (tokens/s:", best->name);
    for (int i = 0; i < n && i < 16; i++)
        if (thr[i] > 0) fprintf(stderr, " %s %.0f", all[i].name, thr[i]);
    fprintf(stderr, ")\n");
    return DP_OK;
}

dp_status cli_plan_setup(const plan_cli *p, plan_env *env, dp_err *err)
{
    memset(env, 0, sizeof *env);
    trace_init(&env->trace);
    if (strcmp(p->schedule, "auto") == 0)
        return dp_fail(err, DP_ERR_INVALID, "--schedule auto applies to plan and sim (compare "
                       "and tune list schedules: --schedules)");
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
                 p->cost.recompute_dynamic == RECOMPUTE_PER_MB
                     ? "; --recompute mixed: none, selective or full per micro-batch"
                 : p->cost.recompute_dynamic == RECOMPUTE_FASTEST
                     ? "; --recompute fastest: per iteration, the mode that simulates fastest"
                     : "; --recompute dynamic: none, selective or full per iteration");
    } else {
        st = cli_build_cost(&p->cost, &env->model, &env->hw, &env->cm, env->cost_source,
                            sizeof env->cost_source, err);
        if (st != DP_OK) return st;
    }
    cost_toy toy = {0};
    if (p->toy_costs && (st = cost_toy_parse(p->toy_costs, &toy, err)) != DP_OK) return st;
    int free_links = toy.on && p->link_gbit < 0 && p->link_latency_us < 0;
    cluster_override_links(&env->hw, free_links ? COST_TOY_FREE_LINK_GBIT : p->link_gbit,
                           free_links ? 0 : p->link_latency_us);
    batch_rules_default(&env->rules, env->model.arch);
    env->rules.global_tokens = p->global_tokens;
    if (p->max_seqlen) env->rules.max_seqlen = p->max_seqlen;
    if (p->max_dec_seqlen) env->rules.max_dec_seqlen = p->max_dec_seqlen;
    /* textbook costs are per micro-batch of one full-length sample */
    toy.unit_tokens = env->rules.max_seqlen +
                      (env->model.arch == ARCH_T5 ? env->rules.max_dec_seqlen : 0);
    env->cm->hw = env->hw, env->cm->toy = toy;
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        if (env->recompute_cm[m]) env->recompute_cm[m]->hw = env->hw, env->recompute_cm[m]->toy = toy;
    if (toy.on) {
        size_t at = strlen(env->cost_source);
        snprintf(env->cost_source + at, sizeof env->cost_source - at,
                 "; textbook costs: f %g, b %g, w %g ms per micro-batch of %.0f tokens on every "
                 "stage, no LM head, %s, no optimizer step",
                 toy.f_ms, toy.b_ms, toy.w_ms, toy.unit_tokens,
                 free_links ? "free links" : "links as given");
    }
    env->mem_limit_mb = p->mem_limit_mb > 0 ? p->mem_limit_mb : env->hw.mem_limit_mb;
    /* Pad to at least the profile's shortest measured length, so short samples stay answerable. */
    cost_profile_range range;
    if (cost_profile_range_of(env->cm, COMP_ENCODER, &range) == DP_OK && range.enc_min > 0)
        env->rules.min_padded = range.enc_min;
    st = batch_rules_validate(&env->rules, err);
    if (st != DP_OK) return st;
    /* the model's context, and its attention window: a GPT sequence (input + target) is truncated
     * at --max-seqlen, which must not exceed either (T5's relative positions have no limit) */
    char what[48];
    snprintf(what, sizeof what, "--max-seqlen %d", env->rules.max_seqlen);
    if (model_check_seqlen(&env->model, env->rules.max_seqlen, what, err) != DP_OK) {
        const model_spec *m = &env->model;
        int ctx = m->positions > 0 && env->rules.max_seqlen > m->positions;
        return dp_fail(err, DP_ERR_INVALID, "%s\nhint: --max-seqlen %d or less%s", err->msg,
                       ctx ? m->positions : m->window,
                       ctx ? ", or a model spec with a longer context (\"max_position_embeddings\" "
                             "in its JSON)" : "");
    }
    if (p->pp * p->chunks > model_layers(&env->model) ||
        (env->model.arch == ARCH_GPT && p->pp * p->chunks > env->model.enc_layers))
        return dp_fail(err, DP_ERR_INVALID,
                       "--pp %d x --chunks %d is more pipeline stages than %s has layers (%d)",
                       p->pp, p->chunks, env->model.name, model_layers(&env->model));
    const schedule *sc = schedule_find(p->schedule); /* dynamic skips the modes it refuses */
    if (p->chunks > 1 && !(sc && sc->chunked))
        return dp_fail(err, DP_ERR_INVALID, "--chunks applies to --schedule interleaved only");
    if (sc && !p->cost.recompute_dynamic &&
        (st = schedule_check_recompute(sc, env->cm->recompute, err)) != DP_OK)
        return st;
    int64_t gpus = cli_plan_gpus(p),
            have = (int64_t)env->hw.nodes * env->hw.gpus_per_node;
    char cp[32] = "";
    if (p->cost.cp > 1) snprintf(cp, sizeof cp, " x --cp %d", p->cost.cp);
    if (env->hw.nodes > 0 && gpus > have && !p->allow_oversubscribe)
        return dp_fail(err, DP_ERR_INVALID,
                       "--tp %d%s x --pp %d x --dp %d = %lld GPUs, but %s has %d node%s of %d GPUs "
                       "(%lld)\nhint: a cluster with more nodes (--hw, \"nodes\" in its JSON), or "
                       "--allow-oversubscribe for a what-if",
                       p->cost.tp, cp, p->pp, p->dp, (long long)gpus, env->hw.name, env->hw.nodes,
                       env->hw.nodes == 1 ? "" : "s", env->hw.gpus_per_node, (long long)have);
    /* ring attention cuts each sequence into 2 cp chunks: the padded length must split evenly */
    if (p->cost.cp > 1 && env->rules.pad_multiple % (2 * p->cost.cp) != 0) {
        int m = env->rules.pad_multiple;
        while (m % (2 * p->cost.cp)) m += env->rules.pad_multiple;
        env->rules.pad_multiple = m;
    }
    if (toy.on && !p->trace) /* the textbook's equal micro-batches, one iteration */
        return toy_trace(p->microbatches, &env->rules, env->trace_path, sizeof env->trace_path,
                         &env->trace, err);
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
    o->chunks = o->sched && o->sched->chunked ? p->chunks : 1;
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
    o->recompute_per_mb = p->cost.recompute_dynamic == RECOMPUTE_PER_MB;
    o->recompute_by_time = p->cost.recompute_dynamic == RECOMPUTE_FASTEST;
}

/* The simulator's configuration for a plan read from a file: its header's model, hardware, TP,
 * recompute and ZeRO give model state and links (with the what-if overrides of p). */
dp_status cli_plan_sim_config(const plan *pl, const char *where, const plan_cli *p, cluster_spec *hw,
                              model_spec *model, sim_config *cfg, dp_err *err)
{
    cost_opts co = p->cost;
    if (pl->h.model[0]) co.model = pl->h.model;
    if (pl->h.hw[0]) co.hw = pl->h.hw;
    co.model_json = pl->h.model_json; /* a self-contained plan runs from anywhere */
    co.hw_json = pl->h.hw_json;
    co.tp = pl->h.tp;
    co.no_sp = !pl->h.sp;
    co.cp = pl->h.cp, co.cp_alltoall = pl->h.cp_alltoall;
    co.recompute_dynamic = 0; /* model state, the config's only use of it, is the same in every mode */
    co.quiet = 1;             /* the plan's times are its own: the cost model's are not used */
    if (recompute_parse(pl->h.recompute, &co.recompute) != 0) co.recompute = RECOMPUTE_NONE;
    model_spec m;
    cost_model *cm = NULL;
    char source[4200];
    stage_model sm;
    dp_status st = DP_OK;
    TRY(cli_build_cost(&co, &m, hw, &cm, source, sizeof source, err));
    cluster_override_links(hw, p->link_gbit, p->link_latency_us);
    cm->hw = *hw;
    cm->toy.on = pl->h.textbook; /* no LM head's state, no collective, no optimizer step */
    cm->toy.unit_tokens = 1;     /* the plan carries its times: only the flag matters here */
    if (model) *model = m;
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
    /* every row of the plan options' table: an option added there is described too */
    plan_cli q = *p;
    if (!q.trace) q.trace = DEFAULT_TRACE;
    cli_opts t;
    cli_opts_init(&t, "describe", "", NULL);
    cli_plan_options(&t, &q);
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
