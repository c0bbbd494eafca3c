/* setup.c — a request resolved into what a run needs: the cost model, the trace, the rules
 * (setup.h). */
#include "setup.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../models/assumptions.h"
#include "../scheduler/microbatch.h"
#include "../scheduler/schedule.h"
#include "study.h"

#define STREAM_ABOVE_BYTES (256L << 20) /* trace CSVs larger than this are streamed */


/* --mem-limit above the GPU's memory: a plan that fits it would not fit the GPU; refused unless
 * asked for as a what-if (--allow-oversubscribe). Planning and a plan's replay alike. */
static dp_status mem_limit_check(const plan_request *p, const cluster_spec *hw, dp_err *err)
{
    if (p->mem_limit_mb > hw->gpu.mem_mb && !p->allow_oversubscribe)
        return dp_fail(err, DP_ERR_INVALID,
                       "--mem-limit %.0f MB is more than %s's %.0f MB: a plan that fits it would "
                       "not fit the GPU\nhint: --allow-oversubscribe for a what-if of a larger "
                       "memory",
                       p->mem_limit_mb, hw->gpu.name, hw->gpu.mem_mb);
    return DP_OK;
}
/* Whether the run uses FlashAttention: what the options force, else the model's own. */
static int flash_of(const cost_request *o, const model_spec *m)
{
    return o->flash_attn ? 1 : o->no_flash_attn ? 0 : m->flash_attn;
}

/* The routing model o asks of m's experts over o->ep ranks: a named one, a measured histogram
 * (--routing FILE: one count an expert), or a plan's ranks' shares (spread evenly over each
 * rank's experts, which gives the same shares back). */
static dp_status routing_of(const cost_request *o, const model_spec *m, moe_routing *r, dp_err *err)
{
    if (o->routing != MOE_ROUTE_HISTOGRAM)
        return moe_routing_init(r, (moe_route_kind)o->routing, m->experts, o->ep,
                                o->routing_alpha, NULL, err);
    static double counts[MOE_EXPERTS_MAX];
    int n = 0;
    const char *from = o->routing_file ? o->routing_file : "the plan's \"routing_shares\"";
    if (o->routing_file) {
        dp_status st = moe_histogram_read(o->routing_file, counts, MOE_EXPERTS_MAX, &n, err);
        if (st != DP_OK) return st;
    } else if (o->routing_n_shares == o->ep && o->ep > 0 && m->experts % o->ep == 0) {
        int per = m->experts / o->ep;
        for (int e = 0; e < m->experts; e++) counts[e] = o->routing_shares[e / per] / per;
        n = m->experts;
    }
    if (n != m->experts)
        return dp_fail(err, DP_ERR_INVALID, "%s: %d counts, and %s has %d experts (one an "
                       "expert, in order)", from, n, m->name, m->experts);
    dp_err why = {0};
    dp_status st = moe_routing_init(r, MOE_ROUTE_HISTOGRAM, m->experts, o->ep, 0, counts, &why);
    return st == DP_OK ? DP_OK : dp_fail(err, st, "%s: %s", from, why.msg);
}

/* Applies the attention, overlap and context-parallel options to a cost model just built (st
 * its constructor's status), with sequence parallelism as the request says or, for a measured
 * profile, as it was measured (cost.h COST_SP_AS_MEASURED); on failure the model is freed. */
static dp_status finish_sp(dp_status st, const cost_request *o, const model_spec *m, int sp,
                           cost_model **cm, dp_err *err)
{
    if (st != DP_OK) return st;
    if ((st = cost_model_set_stack(*cm, (software_stack)o->stack, flash_of(o, m),
                                   attn_kernel_find(o->attn_kernel), err)) != DP_OK) {
        cost_model_free(*cm);
        *cm = NULL;
        return st;
    }
    if (o->what_if) (*cm)->attn_speed = o->what_if->scale[ASSUME_ATTN_KERNEL];
    /* a device whose cores move the data overlaps nothing (hw.h gpu_spec.comm_on_cores) */
    (*cm)->overlap = (*cm)->hw.gpu.comm_on_cores ? 0 : o->overlap;
    (*cm)->seq_parallel = sp; /* what the analytic model, the plan and the padding read */
    (*cm)->split = o->split; /* what the stage and memory models place */
    train_precision prec =
        o->precision >= 0 ? (train_precision)o->precision : precision_of_model(m);
    if ((st = cost_model_set_precision(*cm, prec, (grad_reduce)o->grad_reduce, err)) != DP_OK) {
        cost_model_free(*cm);
        *cm = NULL;
        return st;
    }
    if ((st = o->cp_auto ? cost_model_set_cp_auto(*cm, o->cp, o->cp_alltoall, err)
                         : cost_model_set_cp(*cm, o->cp, o->cp_alltoall, err)) != DP_OK) {
        cost_model_free(*cm);
        *cm = NULL;
        return st;
    }
    /* experts (the stage's GPUs that ep folds over are the layout's: planner_check_request) */
    moe_routing routing, *r = NULL;
    if (model_is_moe(m) && o->routing != MOE_ROUTE_UNIFORM) {
        if ((st = routing_of(o, m, &routing, err)) != DP_OK) {
            cost_model_free(*cm);
            *cm = NULL;
            return st;
        }
        r = &routing;
    }
    if ((st = cost_model_set_moe(*cm, o->ep, r, err)) != DP_OK ||
        (st = cost_model_set_etp(*cm, o->etp > 1 ? o->etp : 1, err)) != DP_OK ||
        (st = cost_model_set_capacity(*cm, o->capacity, err)) != DP_OK ||
        (st = cost_model_set_dispatch(*cm, (moe_dispatch)o->dispatch, err)) != DP_OK) {
        cost_model_free(*cm);
        *cm = NULL;
    }
    return st;
}

static dp_status finish(dp_status st, const cost_request *o, const model_spec *m, cost_model **cm,
                        dp_err *err)
{
    return finish_sp(st, o, m, !o->no_sp, cm, err);
}

/* What the source line says of a built cost model's attention: ", FlashAttention (the model's
 * default; the GPU's default kernel, cudnn-h100)" where it is timed as a fused kernel (timed: the
 * analytic model; or "--attention-kernel K" where the user chose it, or "the torch-eager stack's
 * kernel" where a stack chose it), ", FlashAttention memory" where only memory follows it (a
 * profile, or no fused kernel measured on the GPU), or ""; and whether the model's default chose
 * it. */
static const char *attention_note(const cost_model *cm, const cost_request *o, int timed, char *buf,
                                  size_t cap)
{
    if (!cm->flash_attn) return "";
    const char *why = o->flash_attn ? "" : "the model's default";
    int fallback = 0;
    const attn_kernel *own = stack_attention_kernel(cm->stack, &cm->hw.gpu, &fallback);
    char by[160];
    if (o->attn_kernel) snprintf(by, sizeof by, "--attention-kernel ");
    else if (cm->stack != STACK_MEGATRON_TE && !fallback && own == cm->attn)
        snprintf(by, sizeof by, "the %s stack's kernel, ", stack_name(cm->stack));
    else if (fallback)
        snprintf(by, sizeof by, "the %s stack's kernel is not measured on %s: the GPU's default, ",
                 stack_name(cm->stack), cm->hw.gpu.name);
    else snprintf(by, sizeof by, "the GPU's default kernel, ");
    if (timed && cm->attn)
        snprintf(buf, cap, ", FlashAttention (%s%s%s%s)", why, why[0] ? "; " : "", by,
                 cm->attn->name);
    else
        snprintf(buf, cap, ", FlashAttention memory%s%s%s", why[0] ? " (" : "", why,
                 why[0] ? ")" : "");
    return buf;
}

/* What the source line says of a stack other than the default: ", the torch-eager stack (its
 * elementwise ops as separate kernels; selective recompute per op: …)", or "". */
static const char *stack_note(const cost_model *cm, char *buf, size_t cap)
{
    if (cm->stack == STACK_MEGATRON_TE) return "";
    snprintf(buf, cap, ", the %s stack (its elementwise ops %s%s)", stack_name(cm->stack),
             stack_fused(cm->stack) ? "fused" : "as separate kernels",
             stack_selective_policy(cm->stack) == SELECTIVE_ALTERNATE_MM
                 ? "; selective recompute per op: every second GEMM and the elementwise ops"
                 : "");
    return buf;
}

dp_status planner_build_cost(const cost_request *o, model_spec *m, cluster_spec *hw, cost_model **cm,
                         char *source, size_t source_cap, dp_err *err)
{
    if (o->recompute >= RECOMPUTE_COUNT)
        return dp_fail(err, DP_ERR_INVALID, "--recompute %s chooses a mode per %s; it applies to "
                       "plan, sim, compare and sweep", recompute_policy_name(o->recompute),
                       o->recompute == RECOMPUTE_POLICY_MIXED ? "micro-batch" : "iteration");
    recompute_mode mode = recompute_policy_mode(o->recompute);
    dp_status st = o->model_json ? model_parse_json(o->model_json, "the plan's model_spec", m, err)
                                 : model_resolve(o->model, m, err);
    if (st == DP_OK)
        st = o->hw_json ? cluster_parse_json(o->hw_json, "the plan's cluster_spec", hw, err)
                        : cluster_resolve(o->hw, hw, err);
    if (st != DP_OK) return st;
    if (o->what_if) cost_what_if_cluster(o->what_if, hw);
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
    const attn_kernel *chosen = attn_kernel_find(o->attn_kernel);
    if (chosen && !attn_kernel_runs_on(chosen, hw->gpu.name)) {
        char names[256] = "";
        int n;
        const attn_kernel *ks = attn_kernels(&n);
        for (int i = 0; i < n; i++)
            if (attn_kernel_runs_on(&ks[i], hw->gpu.name))
                snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s",
                         names[0] ? ", " : "", ks[i].name);
        return dp_fail(err, DP_ERR_INVALID, "--attention-kernel %s was measured on %s and needs "
                       "their architecture: %s cannot run it\nhint: %s%s, or --no-flash-attention",
                       chosen->name, chosen->runs_on, hw->gpu.name,
                       names[0] ? "on it: " : "no fused kernel is measured on it", names);
    }
    char note[256], stk[160];
    char sp[96];
    snprintf(sp, sizeof sp, "%s%s", o->tp < 2 ? "" : o->no_sp ? ", no sequence parallelism"
                                                              : ", sequence parallelism",
             o->cp < 2 ? "" : o->cp_auto ? ", context parallelism per micro-batch (ring, group)"
                            : o->cp_alltoall ? ", context parallelism (all-to-all)"
                                             : ", context parallelism (ring)");
    if (o->fit) {
        st = finish(cost_fit_load(o->fit, m, hw, o->tp, mode, cm, err), o, m, cm, err);
        if (st == DP_OK)
            snprintf(source, source_cap, "analytic, fitted (%s), at tp %d, recompute %s%s%s%s",
                     o->fit, o->tp, recompute_name(mode), stack_note(*cm, stk, sizeof stk),
                     attention_note(*cm, o, 1, note, sizeof note), sp);
        return st;
    }
    const char *profile = o->profile;
    char buf[4096];
    if (!profile && !o->analytic && m->profile[0] && strcmp(hw->gpu.name, "a100-40gb") == 0) {
        char rel[256];
        snprintf(rel, sizeof rel, "models/profiles/%s", m->profile);
        profile = planner_data_path(rel, buf, sizeof buf);
        if (!profile)
            return dp_fail(err, DP_ERR_IO,
                           "%s: the measured profile of %s is missing\nhint: set DPSIM_DATA to the "
                           "dpsim source folder, or pass --profile or --analytic",
                           buf, m->name);
    }
    if (profile && !o->analytic) {
        /* a profile measured at the request's cp, when it asks for one (--cp auto asks for
         * every degree, which no profile holds: finish says so) */
        int at_cp = o->cp > 1 && !o->cp_auto ? o->cp : 1;
        /* sequence parallelism as asked, or by default as the profile was measured (the
         * DynaPipe authors' A100 grids were not: they plan without it) */
        st = cost_profile_load_at(profile, m, hw, o->tp, at_cp, o->no_sp ? 0 : COST_SP_AS_MEASURED,
                                  mode, cm, err);
        int sp_on = st == DP_OK && (*cm)->seq_parallel;
        st = finish_sp(st, o, m, sp_on, cm, err);
        char cp[24] = "";
        if (o->cp > 1) snprintf(cp, sizeof cp, ", cp %d", o->cp);
        const char *as_measured =
            o->tp > 1 && !sp_on && !o->no_sp
                ? ", no sequence parallelism: the profile was measured without it"
                : "";
        if (st == DP_OK)
            snprintf(source, source_cap, "profile %s (tp %d%s, recompute %s%s%s)", profile, o->tp,
                     cp, recompute_name(mode), attention_note(*cm, o, 0, note, sizeof note),
                     as_measured);
        return st;
    }
    analytic_params p;
    analytic_params_for_gpu(&hw->gpu, &p);
    if (o->what_if) cost_what_if_params(o->what_if, &p);
    const char *fitted_on = analytic_params_provenance();
    int foreign = strcmp(hw->gpu.name, ANALYTIC_DEFAULT_GPU) != 0;
    static int told;
    if (foreign && !told && !o->quiet) {
        told = 1;
        dp_note(DP_NOTE_LINE, "dpsim: note: the analytic model's efficiencies and per-layer floor are "
                "%s; on %s its GEMM efficiency is scaled by the GPU's best measured matmul (%.0f%% "
                "of peak against the A100's %.0f%%) and the floor and byte efficiency are an "
                "assumption\nhint: measure a profile on it (dprun profile) and fit them: dpsim "
                "calibrate --profile CSV --hw %s -o fit.json, then --fit fit.json", fitted_on,
                hw->gpu.name, 100 * hw->gpu.matmul_eff, 100 * HW_A100_MATMUL_EFF, hw->gpu.name);
    }
    st = finish(cost_analytic_new(m, hw, o->tp, mode, &p, cm, err), o, m, cm, err);
    if (st == DP_OK)
        snprintf(source, source_cap, "analytic on %s (default parameters, fitted on %s%s)%s%s%s",
                 hw->gpu.name, ANALYTIC_DEFAULT_GPU,
                 foreign ? ": GEMM efficiency scaled by this GPU's measured matmul, the rest "
                           "assumed"
                         : "",
                 stack_note(*cm, stk, sizeof stk), attention_note(*cm, o, 1, note, sizeof note), sp);
    return st;
}

void planner_plan_header(const plan_request *p, const plan_env *env, plan_header *h)
{
    memset(h, 0, sizeof *h);
    snprintf(h->model, sizeof h->model, "%s", env->model.name); /* names; the specs below */
    snprintf(h->hw, sizeof h->hw, "%s", env->hw.name);
    snprintf(h->schedule, sizeof h->schedule, "%s", p->schedule);
    snprintf(h->batching, sizeof h->batching, "%s", p->batching);
    h->recompute = recompute_plan_policy(&p->cost);
    h->pp = p->pp, h->dp = p->dp, h->tp = p->cost.tp, h->zero = p->zero;
    placement_kind place = PLACEMENT_LOOP;
    h->chunks = 1;
    schedule_layout(p->schedule, p->chunks, &h->chunks, &place); /* (a known name: set_schedule) */
    h->placement = place;
    h->cp = p->cost.cp, h->cp_alltoall = p->cost.cp_alltoall, h->cp_auto = p->cost.cp_auto;
    h->split = p->cost.split;
    h->ep = env->cm->ep > 1 ? env->cm->ep : 1;
    h->etp = env->cm->etp > 1 ? env->cm->etp : 1;
    h->capacity = env->cm->capacity;
    h->dispatch = (int)env->cm->dispatch;
    const moe_routing *r = env->cm->routing;
    h->routing = r ? (int)r->kind : MOE_ROUTE_UNIFORM, h->routing_alpha = r ? r->alpha : 0;
    if (h->routing == MOE_ROUTE_HISTOGRAM) { /* the ranks' shares: what a replay needs of it */
        h->routing_n_shares = r->ep;
        for (int k = 0; k < r->ep; k++) h->routing_shares[k] = r->q[k];
    }
    int shard = stage_shard_size(p->shard_group, p->dp, p->cost.cp);
    h->shard_group = shard < stage_shard_size(0, p->dp, p->cost.cp) ? shard : 0; /* whole: none */
    h->sp = p->cost.tp > 1 && env->cm->seq_parallel;
    h->rules = env->rules;
    h->textbook = env->cm->toy.on;
    h->overlap = env->cm->overlap; /* what it was priced with (none on CPU ranks: hw.h) */
    h->precision = (int)env->cm->precision, h->grad_bytes = env->cm->grad_bytes;
    h->stack = (int)env->cm->stack;
    /* the specs themselves: the name above may be a relative path, or longer than its field */
    cluster_spec planned_on = env->hw; /* with the memory it was planned for (--mem-limit too) */
    planned_on.mem_limit_mb = env->mem_limit_mb;
    planned_on.gpu.attn = env->cm->attn; /* the kernel that timed it (--attention-kernel, --stack) */
    cJSON *mj = model_to_json(&env->model), *hj = cluster_to_json(&planned_on);
    h->model_json = mj ? cJSON_PrintUnformatted(mj) : NULL;
    h->hw_json = hj ? cJSON_PrintUnformatted(hj) : NULL;
    cJSON_Delete(mj), cJSON_Delete(hj);
}

void planner_run_title(const char *verb, const plan_request *p, const plan_env *env, char *buf,
                       size_t cap)
{
    char zero[96] = ""; /* ZeRO where it shards anything, with its group under HSDP */
    int group = stage_shard_size(0, p->dp, p->cost.cp);
    int shard = stage_shard_size(p->shard_group, p->dp, p->cost.cp);
    if (p->zero > 0 && group > 1)
        snprintf(zero, sizeof zero, ", ZeRO-%d over %d GPUs%s", p->zero, shard,
                 shard < group ? " (HSDP: replicated across)" : "");
    snprintf(buf, cap, "%s: %s, %s, %s on %s, tp %d x cp %d x pp %d x dp %d = %lld GPUs%s; trace "
             "%.300s; cost %.500s", verb, p->batching, p->schedule, env->model.name, env->hw.name,
             p->cost.tp, p->cost.cp, p->pp, p->dp, plan_request_gpus(p), zero, env->trace_path,
             env->cost_source);
}

dp_status planner_cost_answer(const cost_model *cm, int pp, const cost_shape *s, cost_answer *a,
                              dp_err *err)
{
    memset(a, 0, sizeof *a);
    stage_model sm;
    dp_status st = stage_model_init(&sm, cm, pp, 1, 1, 0, 1e15, err);
    if (st != DP_OK) return DP_ERR_INVALID;
    for (int k = 0; k < 2; k++)
        a->has_fit[k] = cost_profile_attn_fit(cm, (cost_component)k, &a->fit[k], NULL) == DP_OK;
    st = cost_query(cm, COMP_ENCODER, s, &a->layer[0], err);
    if (st == DP_OK && cm->model.arch == ARCH_T5) st = cost_query(cm, COMP_DECODER, s, &a->layer[1], err);
    a->has_moe = model_is_moe(&cm->model);
    if (st == DP_OK && a->has_moe) {
        st = cost_query(cm, COMP_MOE, s, &a->moe, err);
        double routed = (double)s->mbs * s->enc_len / cm->cp / cm->tp * cm->model.experts_per_token;
        a->moe_imbalance = cost_moe_imbalance(cm, routed);
        a->moe_dropped = cost_moe_dropped_share(cm, (double)s->mbs * s->enc_len, 0);
    }
    if (st == DP_OK) st = stage_model_cost(&sm, s, &a->stage, err);
    const mb_cost *c = &a->stage;
    for (int d = 1; st == DP_OK && d < sm.pp; d++)
        if (c->fwd_ms[d] + c->bwd_ms[d] > c->fwd_ms[a->slowest] + c->bwd_ms[a->slowest]) a->slowest = d;
    a->feasible = st == DP_OK;
    return st == DP_ERR_INFEASIBLE ? DP_OK : st;
}

dp_status planner_build_cost_at(const cost_request *o, int tp, recompute_mode rc, model_spec *m,
                            cluster_spec *hw, cost_model **cm, char *source, size_t source_cap,
                            dp_err *err)
{
    cost_request one = *o;
    one.tp = tp;
    one.recompute = rc;
    return planner_build_cost(&one, m, hw, cm, source, source_cap, err);
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

dp_status planner_setup(const plan_request *p, plan_env *env, dp_err *err)
{
    memset(env, 0, sizeof *env);
    trace_init(&env->trace);
    dp_status st;
    if (p->cost.recompute >= RECOMPUTE_COUNT) { /* a cost model per mode, chosen per iteration */
        for (int m = RECOMPUTE_COUNT - 1; m >= 0; m--) { /* none last: the source names it */
            st = planner_build_cost_at(&p->cost, p->cost.tp, (recompute_mode)m, &env->model, &env->hw,
                                   &env->recompute_cm[m], env->cost_source,
                                   sizeof env->cost_source, err);
            if (st != DP_OK) return st;
        }
        env->cm = env->recompute_cm[0];
        size_t at = strlen(env->cost_source);
        snprintf(env->cost_source + at, sizeof env->cost_source - at,
                 p->cost.recompute == RECOMPUTE_POLICY_MIXED
                     ? "; --recompute mixed: none, selective or full per micro-batch"
                 : p->cost.recompute == RECOMPUTE_POLICY_FASTEST
                     ? "; --recompute fastest: per iteration, the mode that simulates fastest"
                     : "; --recompute dynamic: none, selective or full per iteration");
    } else {
        st = planner_build_cost(&p->cost, &env->model, &env->hw, &env->cm, env->cost_source,
                            sizeof env->cost_source, err);
        if (st != DP_OK) return st;
    }
    cost_toy toy = {0};
    if (p->toy_costs && (st = cost_toy_parse(p->toy_costs, &toy, err)) != DP_OK) return st;
    if (toy.on && p->cost.recompute == RECOMPUTE_SELECTIVE)
        return dp_fail(err, DP_ERR_INVALID, "--recompute selective reruns the attention, which "
                       "--toy-costs does not separate from the rest of the forward\nhint: "
                       "--recompute full (the backward reruns the forward: b + f) or none");
    if (toy.on && env->recompute_cm[RECOMPUTE_SELECTIVE]) { /* dynamic, mixed, fastest: without it */
        cost_model_free(env->recompute_cm[RECOMPUTE_SELECTIVE]);
        env->recompute_cm[RECOMPUTE_SELECTIVE] = NULL;
    }
    int free_links = toy.on && p->link_gbit < 0 && p->link_latency_us < 0;
    cluster_override_links(&env->hw, free_links ? COST_TOY_FREE_LINK_GBIT : p->link_gbit,
                           free_links ? 0 : p->link_latency_us);
    if (p->gpu_jitter >= 0) env->hw.gpu_jitter = p->gpu_jitter;
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
    mesh layout = mesh_of(p->cost.tp, p->cost.cp, p->pp, p->dp);
    cost_model_place_ep(env->cm, &layout); /* the experts' GPUs */
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        if (env->recompute_cm[m]) cost_model_place_ep(env->recompute_cm[m], &layout);
    if (toy.on) {
        size_t at = strlen(env->cost_source);
        snprintf(env->cost_source + at, sizeof env->cost_source - at,
                 "; textbook costs: f %g, b %g, w %g ms per micro-batch of %.0f tokens on every "
                 "stage, no LM head, %s, no optimizer step",
                 toy.f_ms, toy.b_ms, toy.w_ms, toy.unit_tokens,
                 free_links ? "free links" : "links as given");
    }
    env->mem_limit_mb = p->mem_limit_mb > 0 ? p->mem_limit_mb : env->hw.mem_limit_mb;
    /* the padded length splits as the layout cuts it (models/mesh.h): 2 cp chunks of ring
     * attention, each cp rank's tokens over tp under sequence parallelism */
    int multiple = mesh_token_multiple(&layout, env->cm->seq_parallel), m = env->rules.pad_multiple;
    while (m % multiple) m += env->rules.pad_multiple;
    env->rules.pad_multiple = m;
    /* Pad to at least the profile's shortest measured length, so short samples stay answerable. */
    cost_profile_range range;
    if (cost_profile_range_of(env->cm, COMP_ENCODER, &range) == DP_OK && range.enc_min > 0)
        env->rules.min_padded = range.enc_min;
    st = batch_rules_validate(&env->rules, err);
    if (st != DP_OK) return st;
    /* the model's context, and its attention window: a GPT sequence (input + target) is truncated
     * at --max-seqlen, which must not exceed either, and padded to the layout's multiple, which
     * must not exceed the context (padding past a sliding window attends to nothing new; T5's
     * relative positions have no limit) */
    const model_spec *md = &env->model;
    char what[96];
    int pad = env->rules.pad_multiple, longest = (env->rules.max_seqlen + pad - 1) / pad * pad;
    snprintf(what, sizeof what, "--max-seqlen %d", env->rules.max_seqlen);
    st = model_check_seqlen(md, env->rules.max_seqlen, what, err);
    if (st == DP_OK && longest > env->rules.max_seqlen) {
        snprintf(what, sizeof what, "--max-seqlen %d padded to a multiple of %d (%d)",
                 env->rules.max_seqlen, pad, longest);
        st = md->arch == ARCH_GPT && md->positions > 0 && longest > md->positions
                 ? model_check_seqlen(md, longest, what, err) : DP_OK;
    }
    if (st != DP_OK) {
        int ctx = md->positions > 0 && longest > md->positions;
        int limit = ctx ? md->positions : md->window;
        return dp_fail(err, DP_ERR_INVALID, "%s\nhint: --max-seqlen %d or less%s", err->msg,
                       ctx ? limit / pad * pad : limit,
                       ctx ? ", or a model spec with a longer context (\"max_position_embeddings\" "
                             "in its JSON)" : "");
    }
    const schedule *sc = schedule_find(p->schedule); /* dynamic skips the modes it refuses */
    int fixed = 0; /* the chunks it runs whatever --chunks asks (0: --chunks decides) */
    schedule_layout(p->schedule, 0, &fixed, NULL);
    if (p->chunks > 1 && fixed == 1)
        return dp_fail(err, DP_ERR_INVALID, "--chunks applies to --schedule interleaved only%s",
                       sc ? "" : " (auto, auto-loop and auto-v set the chunks: 1 a device on a "
                                 "loop, 2 on a V)");
    if (p->chunks > 1 && fixed > 1 && p->chunks != fixed)
        return dp_fail(err, DP_ERR_INVALID, "--schedule %s runs %d chunks a device (a V), not "
                       "--chunks %d", p->schedule, fixed, p->chunks);
    int chunks = 1;
    schedule_layout(p->schedule, p->chunks, &chunks, NULL);
    const pipeline_split *split = &p->cost.split; /* (a list: checked by stage_cost) */
    int nv = p->pp * chunks, rule = split->n == 0 && (split->less_first || split->less_last);
    if (rule || (split->n == 0 && (nv > model_layers(&env->model) ||
                                   (env->model.arch == ARCH_GPT && nv > env->model.enc_layers)))) {
        dp_status split_ok = placement_split_check(&env->model, split, nv, err);
        if (split_ok != DP_OK) return split_ok;
    }
    char why[300];
    if (stage_shard_check(p->shard_group, p->dp, p->cost.cp, p->zero, why, sizeof why) != 0)
        return dp_fail(err, DP_ERR_INVALID, "%s", why);
    int stage_gpus = p->cost.tp * p->cost.cp * p->dp;
    if (p->cost.ep > 1 && stage_gpus % p->cost.ep)
        return dp_fail(err, DP_ERR_INVALID, "--ep %d does not divide a stage's %d GPUs (tp %d x cp "
                       "%d x dp %d: the expert-parallel ranks fold over them)", p->cost.ep,
                       stage_gpus, p->cost.tp, p->cost.cp, p->dp);
    int expert_gpus = (p->cost.ep > 1 ? p->cost.ep : 1) * (p->cost.etp > 1 ? p->cost.etp : 1);
    if (p->cost.etp > 1 && stage_gpus % expert_gpus)
        return dp_fail(err, DP_ERR_INVALID, "--ep %d x --etp %d does not divide a stage's %d GPUs "
                       "(tp %d x cp %d x dp %d: an ep rank is etp of them)", p->cost.ep, p->cost.etp,
                       stage_gpus, p->cost.tp, p->cost.cp, p->dp);
    if (p->warmup > 0 && sc && !sc->warms_up)
        return dp_fail(err, DP_ERR_INVALID, "--warmup caps the warm-up of 1f1b and interleaved; "
                       "%s has none to cap", sc->name);
    int64_t gpus = plan_request_gpus(p),
            have = (int64_t)env->hw.nodes * env->hw.gpus_per_node;
    char cp[32] = "";
    if (p->cost.cp > 1)
        snprintf(cp, sizeof cp, p->cost.cp_auto ? " x --cp-max %d" : " x --cp %d", p->cost.cp);
    dp_status mst = mem_limit_check(p, &env->hw, err);
    if (mst != DP_OK) return mst;
    if (env->hw.nodes > 0 && gpus > have && !p->allow_oversubscribe)
        return dp_fail(err, DP_ERR_INVALID,
                       "--tp %d%s x --pp %d x --dp %d = %lld GPUs, but %s has %d node%s of %d GPUs "
                       "(%lld)\nhint: a cluster with more nodes (--hw, \"nodes\" in its JSON), or "
                       "--allow-oversubscribe for a what-if",
                       p->cost.tp, cp, p->pp, p->dp, (long long)gpus, env->hw.name, env->hw.nodes,
                       env->hw.nodes == 1 ? "" : "s", env->hw.gpus_per_node, (long long)have);
    if (toy.on && !p->trace) /* the textbook's equal micro-batches, one iteration */
        return toy_trace(p->microbatches, &env->rules, env->trace_path, sizeof env->trace_path,
                         &env->trace, err);
    const char *path = p->trace;
    if (!path) {
        path = planner_data_path(PLANNER_DEFAULT_TRACE, env->trace_path, sizeof env->trace_path);
        if (!path)
            return dp_fail(err, DP_ERR_IO,
                           "the default trace %s is missing\nhint: pass --trace, or set DPSIM_DATA "
                           "to the dpsim source folder",
                           PLANNER_DEFAULT_TRACE);
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

void planner_study_opts(const plan_request *p, const plan_env *env, const char *batching,
                    const char *sched, study_opts *o)
{
    memset(o, 0, sizeof *o);
    o->cm = env->cm;
    o->rules = &env->rules;
    o->batching = batcher_find(batching);
    o->sched = schedule_find(sched);
    o->chooser = o->sched ? NULL : schedule_chooser_find(sched);
    o->pp = p->pp;
    o->chunks = 1;
    schedule_layout(sched, p->chunks, &o->chunks, NULL);
    o->warmup = p->warmup;
    o->dp = p->dp;
    o->zero = p->zero;
    o->shard_group = p->shard_group;
    o->mem_limit_mb = env->mem_limit_mb;
    o->mbs = p->mbs;
    o->mb_tokens = p->mb_tokens;
    o->thin_ms = p->thin_ms;
    o->dp_split = p->dp_split;
    o->max_iterations = p->iterations;
    o->stream_path = env->stream_path;
    o->keep_going = p->keep_going;
    for (int m = 0; m < RECOMPUTE_COUNT; m++) o->recompute_cm[m] = env->recompute_cm[m];
    o->recompute_per_mb = p->cost.recompute == RECOMPUTE_POLICY_MIXED;
    o->recompute_by_time = p->cost.recompute == RECOMPUTE_POLICY_FASTEST;
}

/* The simulator's configuration for a plan read from a file: its header's model, hardware, TP,
 * recompute and ZeRO give model state and links (with the what-if overrides of p). */
/* planner_sim_config's work, keeping its cost model in *keep on success (keep NULL: freed). */
static dp_status sim_config_of(const plan *pl, const char *where, const plan_request *p,
                               cluster_spec *hw, model_spec *model, sim_config *cfg,
                               cost_model **keep, dp_err *err)
{
    cost_request co = p->cost;
    if (pl->h.model[0]) co.model = pl->h.model;
    if (pl->h.hw[0]) co.hw = pl->h.hw;
    co.model_json = pl->h.model_json; /* a self-contained plan runs from anywhere */
    co.hw_json = pl->h.hw_json;
    co.tp = pl->h.tp;
    co.no_sp = !pl->h.sp;
    co.cp = pl->h.cp, co.cp_alltoall = pl->h.cp_alltoall, co.cp_auto = pl->h.cp_auto;
    co.split = pl->h.split;
    co.ep = pl->h.ep > 1 ? pl->h.ep : 1;
    co.etp = pl->h.etp > 1 ? pl->h.etp : 1;
    co.capacity = pl->h.capacity;
    co.dispatch = pl->h.dispatch;
    co.routing = pl->h.routing, co.routing_alpha = pl->h.routing_alpha;
    co.routing_shares = pl->h.routing_shares, co.routing_n_shares = pl->h.routing_n_shares;
    if (pl->h.ep > 1) co.analytic = 1; /* experts are priced analytically */
    co.quiet = 1; /* the plan's times are its own: the cost model's are not used */
    /* a cp plan was priced on the analytic model or a profile at its cp: without a profile or fit
     * named, the model's own (measured without cp) cannot stand for it */
    if (pl->h.cp > 1 && (pl->h.cp_auto || (!co.profile && !co.fit))) co.analytic = 1;
    /* model state, the config's only use of the mode, is the same in every mode */
    co.recompute = recompute_policy_mode(pl->h.recompute);
    co.overlap = pl->h.overlap; /* the replay overlaps what the plan's simulation did */
    co.precision = pl->h.precision; /* its model state and gradient collectives as priced */
    co.grad_reduce = pl->h.grad_bytes == 4 ? GRAD_REDUCE_FP32 : GRAD_REDUCE_16;
    co.stack = pl->h.stack;
    if (pl->h.precision == PRECISION_FP8) co.analytic = 1; /* fp8 is priced analytically */
    if (pl->h.stack != STACK_MEGATRON_TE) co.analytic = 1; /* so is a stack */
    model_spec m;
    cost_model *cm = NULL;
    char source[4200];
    stage_model sm;
    dp_status st = DP_OK;
    st = planner_build_cost(&co, &m, hw, &cm, source, sizeof source, err);
    if (st != DP_OK) { /* the header's values, checked as their options are: say where from */
        dp_err_prefix(err, "%s: the plan's header", where);
        goto out;
    }
    cluster_override_links(hw, p->link_gbit, p->link_latency_us);
    if (p->gpu_jitter >= 0) hw->gpu_jitter = p->gpu_jitter;
    if ((st = mem_limit_check(p, hw, err)) != DP_OK) goto out;
    cm->hw = *hw;
    cost_model_set_attention(cm, cm->flash_attn, hw->gpu.attn); /* the kernel the plan recorded */
    cm->toy.on = pl->h.textbook; /* no LM head's state, no collective, no optimizer step */
    mesh layout = mesh_of(pl->h.tp, pl->h.cp, pl->h.pp, pl->h.dp);
    cost_model_place_ep(cm, &layout);
    cm->toy.unit_tokens = 1;     /* the plan carries its times: only the flag matters here */
    if (model) *model = m;
    TRY(stage_model_init_placed(&sm, cm, pl->h.pp, pl->h.chunks, pl->h.dp, pl->h.zero,
                                pl->h.shard_group, (placement_kind)pl->h.placement,
                                p->mem_limit_mb > 0 ? p->mem_limit_mb : hw->mem_limit_mb, err));
    TRY(plan_check_model(pl, &m, where, err));
    study_sim_config(&sm, hw, cfg);
    if (keep) *keep = cm, cm = NULL;
out:
    cost_model_free(cm);
    return st;
}

dp_status planner_sim_config(const plan *pl, const char *where, const plan_request *p, cluster_spec *hw,
                              model_spec *model, sim_config *cfg, dp_err *err)
{
    return sim_config_of(pl, where, p, hw, model, cfg, NULL, err);
}

dp_status planner_replay(const plan *pl, const char *where, const plan_request *p,
                         const sim_sink *sink, cluster_spec *hw, sim_config *cfg,
                         study_result *res, dp_err *err)
{
    model_spec model;
    cost_model *cm = NULL;
    dp_status st = sim_config_of(pl, where, p, hw, &model, cfg, &cm, err);
    if (st != DP_OK) return st;
    cfg->hw = hw;
    study_acc acc;
    study_begin(&acc, res, cfg, sink);
    acc.model = &model;
    acc.cm = cm; /* a MoE's dropped copies at the plan's capacity factor */
    acc.sched = schedule_find(pl->h.schedule);
    for (int i = 0; i < pl->n_it && st == DP_OK; i++) st = study_add(&acc, &pl->it[i], err);
    dp_status end = study_end(&acc, st == DP_OK ? err : NULL);
    cost_model_free(cm);
    return st == DP_OK ? end : st;
}

