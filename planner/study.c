#include "study.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/comm.h"
#include "../models/memory.h"
#include "../models/placement.h"
#include "../models/straggler.h"
#include "mixed_recompute.h"
#include "../scheduler/plan_machine.h"
#include "order_search.h"

void study_result_release(study_result *r)
{
    if (!r) return;
    free(r->iter);
    memset(r, 0, sizeof *r);
}

void study_sim_config(const stage_model *sm, const cluster_spec *hw, sim_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->hw = hw;
    cfg->pp = sm->pp;
    cfg->chunks = sm->chunks;
    cfg->dp = sm->dp;
    cfg->tp = sm->cm->tp * sm->cm->cp;  /* the GPUs of a rank */
    /* each GPU pair of the rank carries its share, side by side (placement.h) */
    cfg->wire_scale = placement_wire_share(sm->cm->tp, sm->cm->cp, sm->cm->seq_parallel);
    cfg->mem_limit_mb = sm->mem_limit_mb;
    cfg->zero_prefetch = stage_zero_prefetch(sm);
    cfg->zero_stage = sm->zero_stage, cfg->experts_span = stage_experts_span(sm);
    cfg->pair_exchange = (sm->cm->overlap & COST_OVERLAP_EP) != 0;
    if (!sm->cm->toy.on) /* every GPU of the job meets every step */
        cfg->straggler_share = straggler_share(
            hw->gpu_jitter, (long long)sm->cm->tp * sm->cm->cp * sm->pp * sm->dp);
    cfg->peak_share_max = sm->cm->precision == PRECISION_FP8 && hw->gpu.peak_tflops > 0
                              ? fmax(1, hw->gpu.fp8_tflops / hw->gpu.peak_tflops)
                              : 1;
    for (int s = 0; s < sm->pp; s++) {
        cfg->state_mb[s] = sm->state_mb[s];
        stage_state_parts(sm, s, &cfg->weights_mb[s], &cfg->grads_mb[s], &cfg->optimizer_mb[s]);
        cfg->weights_mb[s] += sm->zero3_gathered_mb[s]; /* ZeRO-3's gathered layers are weights */
        if (sm->cm->toy.on) continue; /* textbook: no gradient collective, no optimizer step */
        cfg->zero_fwd_ms[s] = sm->zero_fwd_ms[s], cfg->zero_bwd_ms[s] = sm->zero_bwd_ms[s];
        cfg->zero_layers[s] = sm->enc_layers[s] + sm->dec_layers[s];
        cfg->allreduce_ms[s] = sm->zero_iter_ms[s];
        cfg->optimizer_ms[s] = study_optimizer_ms(hw, cfg->optimizer_mb[s], sm->cm->grad_bytes);
        if (sm->cm->overlap & COST_OVERLAP_DP && sm->zero_grad_ms[s] > 0) {
            cfg->grad_ms[s] = sm->zero_grad_ms[s];
            cfg->grad_buckets[s] = (int)ceil(sm->param_mb[s] / STUDY_GRAD_BUCKET_MB);
            if (cfg->grad_buckets[s] < 1) cfg->grad_buckets[s] = 1;
        }
    }
}

double study_optimizer_ms(const cluster_spec *hw, double optimizer_mb, double grad_bytes)
{
    double params = 1e6 * optimizer_mb / BYTES_OPTIMIZER; /* the parameters of the shard */
    return params * (OPTIMIZER_STEP_BYTES + grad_bytes) /
           (hw->gpu.hbm_gbps * 1e9 * OPTIMIZER_HBM_EFF) * 1e3;
}

/* The study's own sink: hashes every op, then forwards to the caller's. */
static void hash_op(void *ctx, const sim_op *o)
{
    study_acc *a = ctx;
    /* FNV-1a over 64-bit words (not bytes): the same determinism check, 8x fewer multiplies */
    uint64_t v[6] = {(uint64_t)o->iteration, (uint64_t)o->stage << 32 | (uint32_t)o->replica,
                     (uint64_t)o->op << 32 | (uint32_t)o->mb, (uint64_t)o->chunk,
                     (uint64_t)o->start_ns, (uint64_t)o->end_ns};
    a->hash = dp_fnv1a_words(a->hash, v, 6);
    if (a->next && a->next->on_op) a->next->on_op(a->next->ctx, o);
}

static void pass_mem(void *ctx, const sim_mem *m)
{
    study_acc *a = ctx;
    if (a->next && a->next->on_mem) a->next->on_mem(a->next->ctx, m);
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void study_begin(study_acc *a, study_result *r, const sim_config *cfg, const sim_sink *sink)
{
    memset(a, 0, sizeof *a);
    memset(r, 0, sizeof *r);
    a->r = r;
    a->cfg = *cfg;
    sim_init(&a->s);
    a->hash = 14695981039346656037ULL;
    a->next = sink;
    a->sink = (sim_sink){hash_op, pass_mem, a};
    r->feasible = 1;
    r->pp = cfg->pp;
    for (int s = 0; s < cfg->pp; s++) {
        r->peak_mem_mb[s] = cfg->state_mb[s];
        r->weights_mb[s] = cfg->weights_mb[s], r->grads_mb[s] = cfg->grads_mb[s];
        r->optimizer_mb[s] = cfg->optimizer_mb[s];
    }
    r->reserved_mb = cfg->hw ? fmax(0, cfg->hw->gpu.mem_mb - cfg->mem_limit_mb) : 0;
}

/* Adds the iteration's tokens to the totals; returns its real tokens. */
static int64_t count_tokens(study_result *r, const plan_iter *it)
{
    int64_t real = 0;
    for (int k = 0; k < it->n_mb; k++) {
        const plan_mb *m = &it->mb[k];
        r->enc_tokens += m->enc_tokens;
        r->dec_tokens += m->dec_tokens;
        r->enc_padded += (int64_t)m->mbs * m->enc_len;
        r->dec_padded += (int64_t)m->mbs * m->dec_len;
        real += m->enc_tokens + m->dec_tokens;
    }
    r->microbatches += it->n_mb;
    return real;
}

/* A new entry of r->iter, zeroed. */
static study_iter *new_iter(study_acc *a, int id)
{
    study_result *r = a->r;
    study_iter *x = &a->spare;
    if (a->keep_max && r->n_iter >= a->keep_max) {
        r->iter_omitted++;
    } else {
        if (dp_grow((void **)&r->iter, &a->cap, (size_t)r->n_iter + 1, sizeof *r->iter) != DP_OK)
            return NULL;
        x = &r->iter[r->n_iter++];
    }
    a->last = x;
    memset(x, 0, sizeof *x);
    x->id = id;
    x->recompute = -1;
    return x;
}

dp_status study_skip(study_acc *a, int id, int64_t tokens, const char *why)
{
    study_iter *x = new_iter(a, id);
    if (!x) return DP_ERR_NOMEM;
    x->failed = 1;
    x->tokens = tokens;
    snprintf(x->why, sizeof x->why, "%.159s", why);
    study_result *r = a->r;
    r->failed_iterations++;
    if (r->n_first_failed < 8) r->first_failed[r->n_first_failed++] = id;
    return DP_OK;
}

/* The forward FLOPs an iteration's recompute reran (model_recompute_flops over its samples at
 * their micro-batch's mode, else the iteration's, iter_mode, the shares cost_rerun_shares gives
 * under cm's stack and tp; without cm, Megatron's); -inf when a mode or a sample's length is
 * unknown, so that the sum it joins is not finite and reads as unknown. */
static double recompute_flops(const model_spec *m, const cost_model *cm, const plan_iter *it,
                              int iter_mode)
{
    double f = 0, dense[RECOMPUTE_COUNT], attn[RECOMPUTE_COUNT];
    for (int r = 0; m && r < RECOMPUTE_COUNT; r++) /* (the shares: once per mode, not per sample) */
        cost_rerun_shares(m, cm ? cm->stack : STACK_MEGATRON_TE, (recompute_mode)r,
                          cm ? cm->tp : 1, &dense[r], &attn[r]);
    for (int k = 0; k < it->n_mb; k++) {
        const plan_mb *mb = &it->mb[k];
        int mode = mb->recompute >= 0 ? mb->recompute : iter_mode;
        if (mode == RECOMPUTE_NONE) continue;
        if (mode < 0 || mode >= RECOMPUTE_COUNT || !m) return -INFINITY;
        for (int q = 0; q < mb->n_samples; q++) {
            int32_t e = it->lens[2 * (mb->first + q)], d = it->lens[2 * (mb->first + q) + 1];
            if (e <= 0) return -INFINITY;
            f += model_recompute_flops(m, e, d, dense[mode], attn[mode]);
        }
    }
    return f;
}

/* The iteration's model FLOPs counted non-causally (model.h FLOPS_NONCAUSAL) over its samples;
 * -inf when the model or a sample's length is unknown. */
static double noncausal_flops(const model_spec *m, const plan_iter *it)
{
    double f = 0;
    for (int k = 0; k < it->n_mb; k++)
        for (int q = 0; q < it->mb[k].n_samples; q++) {
            int32_t e = it->lens[2 * (it->mb[k].first + q)], d = it->lens[2 * (it->mb[k].first + q) + 1];
            if (e <= 0 || !m) return -INFINITY;
            f += model_train_flops(m, e, d, FLOPS_NONCAUSAL);
        }
    return f;
}

/* One more iteration won by `name` (--batching or --schedule auto): names[k] counts[k], at most
 * max names, in order of their first win. */
static void study_count_win(char (*names)[32], int *counts, int *n, int max, const char *name)
{
    int k = 0;
    while (k < *n && strcmp(names[k], name) != 0) k++;
    if (k == *n && k < max) snprintf(names[(*n)++], 32, "%s", name);
    if (k < *n) counts[k]++;
}

dp_status study_add(study_acc *a, const plan_iter *it, dp_err *err)
{
    study_result *r = a->r;
    const sim_config *cfg = &a->cfg;
    sim_iter_result ir;
    double w0 = dp_now_s();
    dp_status st = sim_iteration(&a->s, cfg, it, a->t_ns, &a->sink, &ir, err);
    if (st != DP_OK) return st;
    r->sim_wall_s += dp_now_s() - w0;
    r->events += ir.events;
    int64_t tokens = count_tokens(r, it);
    for (int k = 0; a->cm && a->cm->capacity > 0 && k < it->n_mb; k++) {
        const plan_mb *m = &it->mb[k];
        double padded = (double)m->mbs * m->enc_len, copies = padded * a->cm->model.experts_per_token;
        r->moe_routed += copies;
        r->moe_dropped += copies * cost_moe_dropped_share(a->cm, padded, m->cp);
    }
    if (r->iterations == 0 || r->model_flops > 0) /* known only while every iteration says */
        r->model_flops = it->model_flops > 0 ? r->model_flops + it->model_flops : 0;
    if (r->iterations == 0 || r->model_flops_noncausal > 0)
        r->model_flops_noncausal = r->model_flops > 0 ? r->model_flops_noncausal +
                                                           noncausal_flops(a->model, it)
                                                     : 0;
    study_iter *x = new_iter(a, it->id);
    if (!x) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    if (it->recompute >= 0) {
        x->recompute = it->recompute;
        r->recompute_iterations[it->recompute]++;
    }
    if (r->iterations == 0 || r->hw_flops > 0) /* known only while every iteration's is */
        r->hw_flops = r->model_flops > 0 ? r->hw_flops + it->model_flops +
                                                recompute_flops(a->model, a->cm, it, x->recompute)
                                          : 0;
    for (int k = 0; k < it->n_mb; k++) {
        int m = it->mb[k].recompute >= 0 ? it->mb[k].recompute : x->recompute;
        if (m >= 0) r->recompute_microbatches[m]++;
    }
    x->microbatches = it->n_mb;
    x->tokens = tokens;
    snprintf(x->batching, sizeof x->batching, "%s", it->batching);
    snprintf(x->schedule, sizeof x->schedule, "%s", it->schedule);
    x->ms = (double)ir.makespan_ns / 1e6;
    /* the schedule's closed form (the iteration's own under --schedule auto), the slowest
     * replica's */
    const schedule *sc = it->schedule[0] ? schedule_find(it->schedule) : a->sched;
    if (it->schedule[0]) {
        a->per_iteration = 1;
        study_count_win(r->sched_win_name, r->sched_wins, &r->n_sched_wins, STUDY_SCHEDULES_MAX,
                        it->schedule);
    }
    double cf = sc && sc->closed_form && !a->no_closed_form ? 0 : NAN, cf_bubble = cf;
    for (int rep = 0; rep < cfg->dp && !isnan(cf); rep++) {
        double bubble, c = sc->closed_form(it, rep, cfg->pp, cfg->chunks, &bubble);
        if (isnan(c)) cf = cf_bubble = NAN; /* outside the form's assumptions: none */
        else if (c > cf) cf = c, cf_bubble = bubble;
    }
    x->closed_form_ms = cf, x->closed_form_bubble_ms = cf_bubble;
    r->sum_ms += x->ms, r->sum_closed_form_ms += cf;
    if (it->batching[0]) /* auto's winners, every iteration counted */
        study_count_win(r->win_name, r->wins, &r->n_wins, BATCH_CANDIDATES_MAX, it->batching);
    x->pipeline_ms = (double)ir.pipeline_ns / 1e6;
    a->cf_bubble_ms += cf_bubble;
    a->t_ns += ir.makespan_ns;
    a->pipe_ns += ir.pipeline_ns;
    for (int k = 0; k < 4; k++) r->op_ms[k] += (double)ir.op_ns[k] / 1e6;
    for (int s = 0; s < cfg->pp; s++) {
        a->busy[s] += ir.busy_ns[s];
        if (ir.peak_mb[s] > r->peak_mem_mb[s]) { /* the run's peak, and what it holds */
            r->peak_mem_mb[s] = ir.peak_mb[s];
            r->stored_at_peak_mb[s] = ir.stored_at_peak_mb[s];
            r->transient_at_peak_mb[s] = ir.transient_at_peak_mb[s];
        }
    }
    if (ir.oom) r->sim_oom++;
    if (ir.oom && !r->oom) {
        r->oom = 1;
        snprintf(r->why, sizeof r->why, "iteration %d peaks above the %.0f MB device memory",
                 it->id, cfg->mem_limit_mb);
    }
    r->iterations++;
    return DP_OK;
}

/* TFLOP/s per GPU of `flops` over the run's time, and that over the peak; left 0 when the FLOPs
 * or the time are unknown or the run infeasible. */
static void per_gpu_rate(const study_result *r, double flops, double gpus, double peak,
                         double *tflops, double *utilisation)
{
    if (!(r->time_s > 0 && flops > 0 && r->feasible)) return;
    *tflops = flops / r->time_s / gpus / 1e12;
    *utilisation = peak > 0 ? *tflops / peak : 0;
}

dp_status study_end(study_acc *a, dp_err *err)
{
    study_result *r = a->r;
    r->time_s = (double)a->t_ns / 1e9;
    r->tokens = r->enc_tokens + r->dec_tokens;
    r->padded_tokens = r->enc_padded + r->dec_padded;
    r->padding_efficiency = r->padded_tokens ? (double)r->tokens / (double)r->padded_tokens : 0;
    r->enc_padding_efficiency = r->enc_padded ? (double)r->enc_tokens / (double)r->enc_padded : 0;
    r->dec_padding_efficiency = r->dec_padded ? (double)r->dec_tokens / (double)r->dec_padded : 0;
    r->throughput_tokens_per_s = r->time_s > 0 && r->feasible ? (double)r->tokens / r->time_s : 0;
    r->pipeline_bubble_mean = 0;
    for (int s = 0; s < a->cfg.pp; s++) {
        r->bubble_fraction[s] = a->t_ns > 0 ? 1 - (double)a->busy[s] / (double)a->t_ns : 0;
        r->pipeline_bubble[s] = a->pipe_ns > 0 ? 1 - (double)a->busy[s] / (double)a->pipe_ns : 0;
        r->pipeline_bubble_mean += r->pipeline_bubble[s] / a->cfg.pp;
    }
    r->after_pipeline_share = a->t_ns > 0 ? 1 - (double)a->pipe_ns / (double)a->t_ns : 0;
    r->closed_form_bubble =
        r->sum_closed_form_ms > 0 ? a->cf_bubble_ms / r->sum_closed_form_ms : NAN;
    r->closed_form_text = a->no_closed_form ? a->no_closed_form
                          : a->per_iteration         ? "each iteration's schedule's own"
                          : a->sched                 ? a->sched->closed_form_text
                                                     : NULL;
    double gpus = (double)a->cfg.pp * a->cfg.dp * (a->cfg.tp > 0 ? a->cfg.tp : 1); /* tp x cp */
    double peak = a->cfg.hw ? a->cfg.hw->gpu.peak_tflops : 0;
    r->ranks = a->cfg.pp * a->cfg.dp;
    r->gpus = (long long)gpus;
    r->straggler_share = a->cfg.straggler_share;
    if (!(r->hw_flops > 0) || !isfinite(r->hw_flops)) r->hw_flops = 0;
    if (!(r->model_flops_noncausal > 0) || !isfinite(r->model_flops_noncausal))
        r->model_flops_noncausal = 0;
    double tflops_noncausal = 0;
    per_gpu_rate(r, r->model_flops_noncausal, gpus, peak, &tflops_noncausal, &r->mfu_noncausal);
    per_gpu_rate(r, r->model_flops, gpus, peak, &r->tflops_per_gpu, &r->mfu);
    per_gpu_rate(r, r->hw_flops, gpus, peak, &r->hw_tflops_per_gpu, &r->hfu);
    r->timeline_hash = a->hash;
    sim_release(&a->s);
    double over = fmax(r->mfu, r->hfu), bound = a->cfg.peak_share_max > 0 ? a->cfg.peak_share_max : 1;
    if (over > bound)
        return dp_fail(err, DP_ERR_INVALID, "the simulated run does %.0f%% of the GPU's peak "
                       "(%.3g of %.3g TFLOP/s per GPU): its op times are faster than the hardware "
                       "allows\nhint: a profile measured for another model or GPU, a fit of "
                       "another GPU, or a plan file whose times were edited",
                       100 * over, over * peak, peak);
    return DP_OK;
}

/* The stage model of each of the run's modes (*out, the caller frees it; NULL on failure). */
static dp_status stage_models(const study_opts *o, const cost_model *const *cms, int modes,
                              stage_model **out, dp_err *err)
{
    stage_model *sm = dp_xcalloc((size_t)modes, sizeof *sm);
    dp_status st = DP_OK;
    for (int m = 0; m < modes && st == DP_OK; m++) {
        st = stage_model_init_placed(&sm[m], cms[m], o->pp, o->chunks, o->dp, o->zero,
                                     o->shard_group,
                                     o->sched ? o->sched->placement : o->chooser->placement,
                                     o->mem_limit_mb, err);
        sm[m].warmup = o->warmup;
    }
    if (st != DP_OK) free(sm), sm = NULL;
    *out = sm;
    return st;
}

/* study_opts.prune_ms before planning: a lower bound on the time of an iteration of samples
 * b[0..n) from their tokens alone, ms: the busiest device of the replica with the most of them
 * (at least 1/dp), each token at the least of the modes' floors (stage_model_token_floor). */
static double batch_floor_ms(const stage_model *sm, int modes, const sample_len *b, int n)
{
    double enc = 0, dec = 0, most = 0;
    for (int i = 0; i < n; i++) enc += b[i].enc, dec += b[i].dec;
    for (int d = 0; d < sm[0].pp; d++) {
        double e = INFINITY, x = INFINITY;
        for (int m = 0; m < modes; m++) {
            double em, xm;
            stage_model_token_floor(&sm[m], d, &em, &xm);
            e = fmin(e, em), x = fmin(x, xm);
        }
        most = fmax(most, e * enc + x * dec);
    }
    return most / sm[0].dp;
}

/* The floors (batch_floor_ms) of the iterations the run will plan, each with every later one's
 * added: floor_left[k] bounds the time of iterations k, k + 1, ... Returns NULL (no bound before
 * planning) where they cannot be known ahead or the sum would not bound the run: a streamed
 * trace, --keep-going (a failed iteration adds no time), no floor at all, or the trace's batches
 * not cut (batch_next's error comes again when planning). */
static double *iteration_floors(const study_opts *o, const trace *t, const stage_model *sm,
                                int modes, int *count)
{
    *count = 0;
    if (o->stream_path || o->keep_going) return NULL;
    batch_iter bi;
    batch_iter_init(&bi, t, o->rules);
    if (o->batching->pack_dataset) batch_iter_pack_rows(&bi, batch_pack_rows(o->rules, o->mbs, o->dp));
    double *left = NULL, total = 0;
    size_t cap = 0;
    int k = 0;
    for (; !o->max_iterations || k < o->max_iterations; k++) {
        const sample_len *b;
        int n;
        dp_err ignored = {0};
        if (batch_next(&bi, &b, &n, &ignored) != DP_OK ||
            dp_grow((void **)&left, &cap, (size_t)k + 1, sizeof *left) != DP_OK) {
            k = 0;
            break;
        }
        if (n == 0) break;
        total += left[k] = batch_floor_ms(sm, modes, b, n);
    }
    batch_iter_release(&bi);
    for (int i = 0; i < k; i++) { /* suffix sums */
        double own = left[i];
        left[i] = total;
        total -= own;
    }
    if (k == 0 || !(left[0] > 0)) {
        free(left);
        return NULL;
    }
    *count = k;
    return left;
}

/* Everything one iteration's planning needs. */
typedef struct planner {
    const study_opts *o;
    const batcher *batching; /* the batching planning now: o->batching, or auto's candidate */
    const schedule *sched;   /* the schedule planning now: o->sched, or auto's candidate */
    const stage_model *sm;
    batch_ctx ctx;
    schedule_ctx sctx;
    const sim_config *cfg;
    sim *s;
    double prune_left_ms; /* > 0: the time left under o->prune_ms, checked before the adaptive
                           * order search (and the build): 0 none */
    int prune_needs_fit;  /* 1: only where the plan fits in its planned order (then the order
                           * search keeps a fitting one, and the attempt is the last) */
    double pruned_lb_ms;  /* set by plan_iteration when the plan's lower bound passed it, and by
                           * plan_modes when no mode could beat beat_ms */
    double beat_ms;       /* > 0: the time to beat (auto's best so far): --recompute fastest
                           * simulates no mode whose plan's lower bound passes it */
} planner;

/* Plans one global batch: micro-batches, their order (adaptive), the schedule, then the exact
 * memory check of the built plan (plan_machine.h): where it does not fit and the batcher cuts by
 * memory, the rule's scale is lowered by the overshoot and the batch planned again (a few times
 * at most). *answerable is 0 when the cost model cannot price a micro-batch (nothing is built);
 * l->feasible is 0, with l->why, when the plan does not fit. */
#define PLAN_ATTEMPTS 6

static dp_status plan_iteration(planner *p, const sample_len *b, int n, int id, mb_list *l,
                                plan_iter *pi, int *answerable, dp_err *err)
{
    mem_rule rule;
    double scale = 1, prev = 1;
    int last = 0; /* this attempt's plan is kept, fitting or not */
    char why[300] = "";
    dp_status st = DP_OK;
    for (int attempt = 0;; attempt++) {
        schedule_mem_rule(p->sched, p->sm, scale, &rule);
        p->ctx.mem = &rule;
        mb_list_clear(l);
        st = p->batching->split(&p->ctx, b, n, l, err);
        if (st == DP_ERR_INFEASIBLE && attempt > 0) {
            /* tightened until a sample fits nowhere: keep the previous plan, which does not fit */
            scale = prev, last = 1, st = DP_OK;
            attempt--;
            continue;
        }
        if (st != DP_OK) goto out;
        TRY(mb_list_finish(&p->ctx, l, err));
        l->out_of_step = 0;
        *answerable = 1;
        for (int k = 0; k < l->n_mb; k++)
            if (isnan(l->mb[k].t_ms)) *answerable = 0;
        if (!*answerable) break;
        if (p->prune_left_ms > 0 && (!p->prune_needs_fit || p->sched->admits_by_memory)) {
            /* study_opts.prune_ms: before the order search */
            plan_iter_release(pi);
            TRY(plan_iter_from_mbs(pi, id, l, p->sm, err));
            int final = !p->prune_needs_fit;
            if (!final) {
                TRY(p->sched->build(&p->sctx, pi, err));
                plan_machine m;
                pm_init(&m, pi, p->sm->chunks);
                double worst;
                final = pm_fits(&m, p->sm->budget_mb, &worst, NULL, 0);
                pm_release(&m);
            }
            double lb = final ? schedule_time_lower_bound(p->sched, pi, p->sm->pp, p->sm->chunks) : 0;
            if (lb > p->prune_left_ms) {
                p->pruned_lb_ms = lb;
                break;
            }
        }
        if (p->sched->admits_by_memory) /* its order: sim/order_search.h */
            TRY(order_search(p->sm, p->sched, p->cfg, p->s, ORDER_SEARCH_ALL, l, NULL, err));
        plan_iter_release(pi);
        TRY(plan_iter_from_mbs(pi, id, l, p->sm, err));
        TRY(p->sched->build(&p->sctx, pi, err));
        plan_machine m;
        pm_init(&m, pi, p->sm->chunks);
        double worst;
        int fits = pm_fits(&m, p->sm->budget_mb, &worst, why, sizeof why);
        pm_release(&m);
        if (fits) { /* the exact check is the truth; the rule was only a screen (and the
                     * replicas' lockstep, mb_list_finish's aim, checked on what was built) */
            dp_err apart = {0};
            int span = stage_experts_span(p->sm);
            l->feasible = plan_iter_check_lockstep(pi, p->sm->zero_stage, span, "this layout",
                                                   &apart) == DP_OK;
            l->out_of_step = !l->feasible;
            snprintf(l->why, sizeof l->why, "%.500s", l->feasible ? "" : apart.msg);
            break;
        }
        if (!p->batching->memory_aware || attempt + 1 == PLAN_ATTEMPTS || last) {
            snprintf(l->why, sizeof l->why, "%s%s%s", why,
                     p->batching->memory_aware ? "" : " (this batching does not cut by memory)",
                     p->sched->admits_by_memory
                         ? ""
                         : "\nhint: --schedule adaptive admits micro-batches by memory");
            l->feasible = 0, l->out_of_step = 0;
            break;
        }
        prev = scale;
        scale *= 0.98 / worst;
    }
out:
    p->ctx.mem = NULL;
    return st;
}

/* The cost models a run plans with: the modes of --recompute dynamic in order (every schedule
 * takes each: one that splits the backward leaves a full-recompute slot whole, schedule.c), or
 * cm alone. */
static int study_modes(const study_opts *o, const cost_model **cms)
{
    int n = 0;
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        if (o->recompute_cm[m]) cms[n++] = o->recompute_cm[m];
    if (n == 0) cms[n++] = o->cm;
    return n;
}

/* Points the planner at one stage model (one recompute mode) and its shape cache. */
static void planner_use(planner *p, const stage_model *sm, shape_cache *cache)
{
    p->sm = sm;
    p->ctx.sm = sm;
    p->ctx.cache = cache;
    p->sctx.sm = sm;
}

/* --recompute fastest: the mode (index into sm) whose plan of this batch fits and simulates
 * fastest, ties to the lower one; -1 when none fits (the caller then plans as --recompute dynamic
 * does, to report why); -2 when some fit but none can beat pl->beat_ms. Every mode's plan is built
 * once and simulated unless its lower bound (schedule_time_lower_bound) already passes the best
 * mode's time or beat_ms. */
static int fastest_fitting_mode(planner *pl, const stage_model *sm, shape_cache *const *cache,
                                int modes, const sample_len *b, int n, int id, mb_list *l,
                                plan_iter *pi)
{
    int best = -1, beaten = 0;
    int64_t best_ns = INT64_MAX;
    for (int m = 0; m < modes; m++) {
        planner_use(pl, &sm[m], cache[m]);
        int answerable = 0;
        dp_err why = {0};
        if (plan_iteration(pl, b, n, id, l, pi, &answerable, &why) != DP_OK || !answerable ||
            !l->feasible)
            continue;
        double lb = schedule_time_lower_bound(pl->sched, pi, pl->sm->pp, pl->sm->chunks);
        if (pl->beat_ms > 0 && lb > pl->beat_ms) {
            beaten = 1;
            continue;
        }
        if (best_ns < INT64_MAX && lb > (double)best_ns / 1e6) continue;
        sim_iter_result ir;
        if (sim_iteration(pl->s, pl->cfg, pi, 0, NULL, &ir, NULL) != DP_OK) continue;
        if (ir.makespan_ns < best_ns) best_ns = ir.makespan_ns, best = m;
    }
    return best < 0 && beaten ? -2 : best;
}

/* The batchings a run plans each iteration with: b itself, or (b->chooses) every batching that
 * shares its global batches, the memory-aware ones first (ties go to them). Their count. */
static int study_candidates(const batcher *b, const batcher **out)
{
    if (!b->chooses) return out[0] = b, 1;
    int nb, n = 0;
    const batcher *all = batcher_list(&nb);
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < nb && n < BATCH_CANDIDATES_MAX; i++)
            if (!all[i].chooses && !all[i].pack_dataset && all[i].memory_aware == !pass)
                out[n++] = &all[i];
    return n;
}

/* Points the planner at a batching. */
static void planner_batching(planner *p, const batcher *b)
{
    p->batching = b;
    p->ctx.varlen = b->varlen;
}

/* Plans one batch under the run's recompute rule: the first mode whose plan fits (the last one's
 * plan is kept, fitting or not), or with recompute_by_time the fastest that fits, planned again
 * (planning is deterministic). *mode: the index into sm used. */
static dp_status plan_modes(planner *pl, const stage_model *sm, shape_cache *const *cache, int modes,
                            const sample_len *b, int n, int id, mb_list *l, plan_iter *pi,
                            int *answerable, int *mode, dp_err *why)
{
    int fastest = pl->o->recompute_by_time && modes > 1
                      ? fastest_fitting_mode(pl, sm, cache, modes, b, n, id, l, pi)
                      : -1;
    if (fastest == -2) { /* every mode that fits loses to pl->beat_ms: nothing to plan */
        pl->pruned_lb_ms = pl->beat_ms;
        *answerable = 0, *mode = 0;
        return DP_OK;
    }
    dp_status st;
    int last = modes - 1;
    for (*mode = fastest >= 0 ? fastest : 0;; (*mode)++) {
        planner_use(pl, &sm[*mode], cache[*mode]);
        *answerable = 0;
        st = plan_iteration(pl, b, n, id, l, pi, answerable, why);
        if (fastest >= 0 || *mode >= last || pl->pruned_lb_ms > 0) break;
        if (st == DP_ERR_INFEASIBLE) continue; /* a sample fits nowhere in this mode */
        if (st != DP_OK || (*answerable && l->feasible)) break;
    }
    return st;
}

/* --recompute mixed: a fitting plan then goes down a mode per micro-batch wherever it still fits
 * (by_mode[m]: mode m's stage model, NULL where the run may not use it). What a run keeps of a
 * batch, and what --batching auto scores each candidate on. */
static dp_status relax_modes(const planner *pl, const stage_model *sm,
                             const stage_model *const *by_mode, int answerable, int mode,
                             const mb_list *l, plan_iter *pi, dp_err *why)
{
    if (!pl->o->recompute_per_mb || !answerable || !l->feasible) return DP_OK;
    return mixed_recompute_relax(pi, l, by_mode, sm[mode].cm->recompute, why);
}

/* The schedules a run plans each iteration with: o->sched, or every one its chooser takes
 * (schedule_chooser_takes: auto-loop the one-chunk ones, auto-v the V ones; auto runs as one of
 * them, study_run), the baseline (1F1B) first
 * where it is one and the rest in schedule_list order (ties go to the earlier). Their count. */
static int study_schedules(const study_opts *o, const schedule **out)
{
    if (o->sched) return out[0] = o->sched, 1;
    int ns, n = 0;
    const schedule *all = schedule_list(&ns), *base = schedule_baseline();
    if (schedule_chooser_takes(o->chooser, base)) out[n++] = base;
    for (int i = 0; i < ns && n < STUDY_SCHEDULES_MAX; i++)
        if (&all[i] != base && schedule_chooser_takes(o->chooser, &all[i])) out[n++] = &all[i];
    return n;
}

/* --batching auto, --schedule auto: the (schedule, batching) pair whose plan of this batch (under
 * the recompute rule, relaxed as the run keeps it) fits and simulates fastest, ties to the
 * earlier; its index s * n_cands + c, 0 when none fits (its plan then reports why). A pair whose
 * plan's lower bound (schedule_time_lower_bound: the simulated time is never below it) already
 * passes the best so far is not simulated (nor, adaptive, order-searched): it cannot win. Under
 * mixed and fastest recompute, whose plans change after planning, their own bounds instead: a
 * mixed plan is dropped before relaxing where even its floor (mixed_recompute_floor_ms) passes
 * the best, and fastest simulates no mode whose plan's bound passes it (beat_ms). The pair
 * `first` (the previous iteration's winner) is tried first, for an early best; the answer is the
 * same. */
static int fastest_candidate(planner *pl, const batcher *const *cands, int n_cands,
                             const schedule *const *scheds, int n_scheds, const stage_model *sm,
                             const stage_model *const *by_mode, shape_cache *const *cache,
                             int modes, const sample_len *b, int n, int id, int first,
                             mb_list *l, plan_iter *pi)
{
    int best = 0;
    int64_t best_ns = INT64_MAX;
    int bound = !pl->o->recompute_per_mb && !pl->o->recompute_by_time;
    for (int k = 0; k < n_cands * n_scheds; k++) {
        int c = k == 0 ? first : k <= first ? k - 1 : k; /* first, then the others in order */
        planner_batching(pl, cands[c % n_cands]);
        pl->sched = scheds[c / n_cands];
        double best_ms = best_ns < INT64_MAX ? (double)best_ns / 1e6 : 0;
        pl->prune_left_ms = bound ? best_ms : 0, pl->prune_needs_fit = 1, pl->pruned_lb_ms = 0;
        pl->beat_ms = pl->o->recompute_per_mb ? 0 : best_ms; /* a plan's bound before relaxing
                                                              * bounds nothing after */
        int answerable = 0, mode;
        dp_err why = {0};
        if (plan_modes(pl, sm, cache, modes, b, n, id, l, pi, &answerable, &mode, &why) != DP_OK ||
            pl->pruned_lb_ms > 0 || !answerable || !l->feasible)
            continue;
        if (pl->o->recompute_per_mb && best_ms > 0 && /* no relaxation of it can win */
            mixed_recompute_floor_ms(pi, l, by_mode, sm[mode].cm->recompute, pl->sched,
                                     pl->sm->chunks) > best_ms)
            continue;
        if (relax_modes(pl, sm, by_mode, answerable, mode, l, pi, &why) != DP_OK) continue;
        if (bound && best_ms > 0 &&
            schedule_time_lower_bound(pl->sched, pi, pl->sm->pp, pl->sm->chunks) > best_ms)
            continue;
        sim_iter_result ir;
        if (sim_iteration(pl->s, pl->cfg, pi, 0, NULL, &ir, NULL) != DP_OK || ir.oom) continue;
        if (ir.makespan_ns < best_ns || (ir.makespan_ns == best_ns && c < best))
            best_ns = ir.makespan_ns, best = c;
    }
    pl->prune_left_ms = 0, pl->pruned_lb_ms = 0, pl->beat_ms = 0;
    return best;
}

/* study_run on one placement (o->chooser, where set, one family's); first_extra_ms is added to
 * the first iteration's planning time (auto's choice of placement). */
static dp_status run_placed(const study_opts *o, const trace *t, study_result *r,
                            double first_extra_ms, dp_err *err)
{
    dp_status st = DP_OK;
    const cost_model *cms[RECOMPUTE_COUNT];
    int modes = study_modes(o, cms);
    memset(r, 0, sizeof *r);
    stage_model *sm = NULL;
    if ((st = stage_models(o, cms, modes, &sm, err)) != DP_OK) return st;
    /* model state, collectives and the optimizer step: the same in every mode (the parameters
     * are; cost_profile.c reads one size for every mode) */
    sim_config cfg;
    study_sim_config(&sm[0], &o->cm->hw, &cfg);
    study_acc acc;
    study_begin(&acc, r, &cfg, o->sink);
    acc.model = &o->cm->model;
    acc.cm = o->cm;
    acc.sched = o->sched;
    if (o->stream_path) acc.keep_max = STUDY_ITER_KEEP; /* bounded memory */
    const stage_model *by_mode[RECOMPUTE_COUNT] = {NULL}; /* --recompute mixed's lower modes */
    for (int m = 0; m < modes; m++) by_mode[cms[m]->recompute] = &sm[m];
    shape_cache *cache[RECOMPUTE_COUNT] = {NULL}; /* one per stage model: kept across batches */
    for (int m = 0; m < modes; m++) { /* and a memo of its layer costs (stage_cost.h) */
        cache[m] = shape_cache_new();
        sm[m].memo = stage_memo_new(STAGE_MEMO_SLOTS);
    }
    /* the batchings planned per iteration: o's own, or auto's candidates */
    const batcher *cands[BATCH_CANDIDATES_MAX];
    int n_cands = study_candidates(o->batching, cands);
    /* and the schedules: o's own, or the chooser's */
    const schedule *scheds[STUDY_SCHEDULES_MAX] = {NULL};
    int n_scheds = study_schedules(o, scheds);
    for (int i = 0; i < n_scheds; i++)
        if (o->warmup > 0 && scheds[i]->warms_up)
            acc.no_closed_form = "none: --warmup caps the warm-up it assumes";
    planner pl = {o, cands[0], scheds[0], &sm[0],
                  {o->rules, &sm[0], o->mbs, o->mb_tokens, o->thin_ms, NULL, o->dp_split, cache[0],
                   cands[0]->varlen},
                  {&sm[0]},
                  &cfg, &acc.s, 0, 0, 0, 0};
    batch_iter bi;
    trace_stream ts;
    int streaming = o->stream_path != NULL;
    if (streaming) {
        st = trace_stream_open(&ts, o->stream_path, err);
        if (st != DP_OK) {
            study_end(&acc, NULL);
            for (int m = 0; m < modes; m++) shape_cache_free(cache[m]), stage_memo_free(sm[m].memo);
            free(sm);
            return st;
        }
        batch_iter_init_stream(&bi, &ts, o->rules);
    } else {
        batch_iter_init(&bi, t, o->rules);
    }
    if (o->batching->pack_dataset) batch_iter_pack_rows(&bi, batch_pack_rows(o->rules, o->mbs, o->dp));
    mb_list l;
    mb_list_init(&l);
    plan_iter pi;
    plan_iter_init(&pi);
    size_t plan_cap = 0;
    double *plan_ms = NULL;
    int planned = 0;
    int64_t first_tokens = 0;
    /* study_opts.prune_ms: where a lower bound may be taken (after the fit; before it when the
     * first plan is the only one) */
    int prune_fit = o->prune_ms > 0 && !o->recompute_per_mb && !o->recompute_by_time &&
                    n_cands * n_scheds == 1;
    int winner = 0; /* auto's pair of the iteration (the previous one's is tried first) */
    int prune_early = prune_fit && modes == 1 && !o->batching->memory_aware;
    /* and before planning anything: the floors of this iteration and every later one */
    int n_floors = 0;
    double *floor_left = o->prune_ms > 0 ? iteration_floors(o, t, sm, modes, &n_floors) : NULL;
    for (;;) {
        if (o->max_iterations && planned >= o->max_iterations) break;
        const sample_len *b;
        int n;
        TRY(batch_next(&bi, &b, &n, err));
        if (n == 0) {
            if (planned == 1 && first_tokens < o->rules->global_tokens)
                r->short_batch_tokens = first_tokens; /* the trace ended inside one batch */
            break;
        }
        if (planned == 0)
            for (int i = 0; i < n; i++) first_tokens += b[i].enc + b[i].dec;
        if (planned < n_floors && (double)acc.t_ns / 1e6 + floor_left[planned] > o->prune_ms) {
            r->pruned_ms = (double)acc.t_ns / 1e6 + floor_left[planned];
            r->pruned_unplanned = 1;
            snprintf(r->why, sizeof r->why, "pruned before iteration %d: at least %.1f ms of "
                     "simulated time (its tokens and the later iterations' at their best rate), "
                     "past the search's cut-off of %.1f ms", planned, r->pruned_ms, o->prune_ms);
            break;
        }
        double t0 = dp_now_s();
        int answerable = 0, mode = 0;
        dp_err why = {0};
        /* auto: the candidate whose plan fits and simulates fastest, planned again below
         * (planning is deterministic); ties to the earlier candidate */
        winner = n_cands * n_scheds > 1
                     ? fastest_candidate(&pl, cands, n_cands, scheds, n_scheds, sm, by_mode, cache,
                                         modes, b, n, planned, winner, &l, &pi)
                     : 0;
        planner_batching(&pl, cands[winner % n_cands]);
        pl.sched = scheds[winner / n_cands];
        double spent_ms = (double)acc.t_ns / 1e6;
        pl.prune_left_ms = prune_fit ? fmax(o->prune_ms - spent_ms, 1e-300) : 0;
        pl.prune_needs_fit = !prune_early;
        pl.pruned_lb_ms = 0;
        st = plan_modes(&pl, sm, cache, modes, b, n, planned, &l, &pi, &answerable, &mode, &why);
        if (prune_fit && st == DP_OK && answerable && l.feasible && pl.pruned_lb_ms == 0) {
            double lb = schedule_time_lower_bound(pl.sched, &pi, o->pp, o->chunks);
            if (spent_ms + lb > o->prune_ms) pl.pruned_lb_ms = lb;
        }
        if (pl.pruned_lb_ms > 0) {
            r->pruned_ms = spent_ms + pl.pruned_lb_ms;
            snprintf(r->why, sizeof r->why, "pruned at iteration %d: at least %.1f ms of "
                     "simulated time, past the search's cut-off of %.1f ms", planned,
                     r->pruned_ms, o->prune_ms);
            break;
        }
        /* --recompute mixed: then a mode lower per micro-batch wherever the plan still fits */
        int relaxed = st == DP_OK && answerable && l.feasible && o->recompute_per_mb;
        if (st == DP_OK) st = relax_modes(&pl, sm, by_mode, answerable, mode, &l, &pi, &why);
        double dt_ms = (dp_now_s() - t0) * 1e3 + (planned == 0 ? first_extra_ms : 0);
        if (st != DP_OK && !(st == DP_ERR_INFEASIBLE && o->keep_going)) {
            *err = why;
            dp_err_prefix(err, "iteration %d", planned);
            goto out;
        }
        if (dp_grow((void **)&plan_ms, &plan_cap, (size_t)planned + 1, sizeof *plan_ms) != DP_OK) {
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
            goto out;
        }
        plan_ms[planned++] = dt_ms;
        /* what failed, if anything: a sample that fits nowhere, a shape beyond the cost model,
         * a plan over memory */
        const char *failure = st != DP_OK ? why.msg : !answerable || !l.feasible ? l.why : NULL;
        if (failure && !r->why[0])
            snprintf(r->why, sizeof r->why, "iteration %d: %.560s", planned - 1, failure);
        if (failure && o->keep_going) {
            int64_t tokens = 0;
            for (int i = 0; i < n; i++) tokens += b[i].enc + b[i].dec;
            st = DP_OK;
            TRY(study_skip(&acc, planned - 1, tokens, failure));
            acc.last->plan_ms = dt_ms;
            if (o->progress) o->progress(o->progress_ctx, bi.next, streaming ? 0 : t->n);
            continue;
        }
        if (l.in_flight == 1 && o->pp > 1) r->in_flight_fallback++;
        if (!answerable) { /* beyond the cost model: this configuration cannot run */
            r->feasible = 0;
            break;
        }
        if (!l.feasible) r->oom = 1, l.out_of_step ? r->planned_apart++ : r->planned_oom++;
        pi.model_flops = 0;
        for (int i = 0; i < n && !o->cm->toy.on; i++) /* textbook times have no FLOP rate */
            pi.model_flops += model_train_flops(&o->cm->model, b[i].enc, b[i].dec, FLOPS_CAUSAL);
        recompute_mode rc = cms[mode]->recompute;
        if (o->recompute_per_mb) { /* a mode per micro-batch (set above where relaxed) */
            for (int k = 0; k < pi.n_mb && !relaxed; k++) pi.mb[k].recompute = (int)rc;
            pi.recompute = -1;
        } else {
            pi.recompute = (int)rc;
        }
        snprintf(pi.batching, sizeof pi.batching, "%s",
                 n_cands > 1 ? cands[winner % n_cands]->name : "");
        snprintf(pi.schedule, sizeof pi.schedule, "%s", o->sched ? "" : pl.sched->name);
        if (o->validate) TRY(plan_validate(&pi, o->chunks, "plan", err));
        if (o->plan_out) TRY(plan_writer_add(o->plan_out, &pi, err));
        int sim_oom = r->sim_oom;
        TRY(study_add(&acc, &pi, err));
        acc.last->plan_ms = dt_ms;
        if (r->sim_oom > sim_oom && l.feasible) r->oom_unplanned++;
        if (o->progress) o->progress(o->progress_ctx, bi.next, streaming ? 0 : t->n);
    }
    if (planned > 0) {
        qsort(plan_ms, (size_t)planned, sizeof *plan_ms, cmp_d);
        r->plan_ms_median = plan_ms[planned / 2];
        r->plan_ms_p90 = plan_ms[(int)(0.9 * (planned - 1) + 0.5)];
    }
out:;
    dp_status end = study_end(&acc, st == DP_OK ? err : NULL);
    if (st == DP_OK) st = end;
    r->chunks = o->chunks;
    free(plan_ms);
    free(floor_left);
    for (int m = 0; m < modes; m++) shape_cache_free(cache[m]), stage_memo_free(sm[m].memo);
    free(sm);
    plan_iter_release(&pi);
    mb_list_release(&l);
    batch_iter_release(&bi);
    if (streaming) trace_stream_close(&ts);
    return st;
}

/* The simulated ms of o's first iteration alone (nothing written, shown or pruned); INFINITY
 * where it cannot be planned, does not fit or cannot be costed, the first line of the planner's
 * reason then in why after `what` (when why is empty). */
static double first_iteration_ms(const study_opts *o, const trace *t, const char *what, char *why,
                                 size_t why_cap)
{
    study_opts q = *o;
    q.max_iterations = 1, q.plan_out = NULL, q.sink = NULL, q.progress = NULL;
    q.validate = 0, q.keep_going = 0, q.prune_ms = 0;
    study_result r;
    dp_err e = {0};
    double ms = INFINITY;
    dp_status st = run_placed(&q, t, &r, 0, &e);
    if (st == DP_OK && r.iterations == 1 && r.feasible && !r.oom) ms = r.sum_ms;
    else if (!why[0]) { /* its first line, without the run's "iteration 0: " */
        const char *msg = st != DP_OK ? e.msg : r.why;
        if (strncmp(msg, "iteration 0: ", 13) == 0) msg += 13;
        snprintf(why, why_cap, "%s: %.*s", what, (int)strcspn(msg, "\n"), msg);
    }
    study_result_release(&r);
    return ms;
}

/* The iteration of the run (o, t) that holds its longest sample, after the first, as a trace of
 * its own (that batch's samples, in order: it cuts to that one batch again) in *out; 0 (out
 * untouched) where there is none to take: a streamed trace, a batching that packs the dataset,
 * the longest sample in the first iteration, a trace that does not cut. */
static int longest_sample_batch(const study_opts *o, const trace *t, trace *out)
{
    if (o->stream_path || o->batching->pack_dataset) return 0;
    batch_iter bi;
    batch_iter_init(&bi, t, o->rules);
    int32_t *ids = NULL;
    int n_ids = 0, at = -1, longest = 0;
    for (int it = 0; !o->max_iterations || it < o->max_iterations; it++) {
        const sample_len *b;
        int n;
        dp_err ignored = {0};
        if (batch_next(&bi, &b, &n, &ignored) != DP_OK || n == 0) break;
        int most = 0;
        for (int i = 0; i < n; i++) most = b[i].enc + b[i].dec > most ? b[i].enc + b[i].dec : most;
        if (most <= longest) continue;
        longest = most, at = it;
        int32_t *grown = realloc(ids, (size_t)n * sizeof *ids);
        if (!grown) {
            at = -1;
            break;
        }
        ids = grown, n_ids = n;
        for (int i = 0; i < n; i++) ids[i] = b[i].id;
    }
    batch_iter_release(&bi);
    int taken = at > 0;
    if (taken) {
        trace_init(out);
        for (int i = 0; i < n_ids && taken; i++) {
            const trace_sample *x = &t->samples[ids[i]];
            taken = trace_push(out, t->tasks[x->task], x->input_len, x->target_len) == DP_OK;
        }
        if (!taken) trace_release(out);
    }
    free(ids);
    return taken;
}

study_opts study_on_family(const study_opts *o, placement_kind place)
{
    study_opts f = *o;
    f.chooser = schedule_chooser_family(o->chooser, place);
    f.chunks = f.chooser->chunks;
    return f;
}

dp_status study_placement(const study_opts *o, const trace *t, study_placement_choice *c,
                          dp_err *err)
{
    memset(c, 0, sizeof *c);
    if (o->stream_path && strcmp(o->stream_path, "-") == 0)
        return dp_fail(err, DP_ERR_INVALID, "--schedule %s plans iterations under each placement "
                       "before the run, reading the trace more than once, which a stream from "
                       "standard input cannot\nhint: --schedule auto-loop or auto-v, or the trace "
                       "from a file", o->chooser->name);
    double t0 = dp_now_s(), score[2];
    trace longest;
    int has_longest = o->pp > 1 && longest_sample_batch(o, t, &longest);
    for (int f = 0; f < 2; f++) {
        study_opts fam = study_on_family(o, f ? PLACEMENT_V : PLACEMENT_LOOP);
        int tried = f == 0 || o->pp > 1;
        char *why = c->why[f];
        if (!tried) snprintf(why, sizeof c->why[f], "a V folds on two stages or more");
        c->first_ms[f] = tried ? first_iteration_ms(&fam, t, "the first iteration", why,
                                                    sizeof c->why[f])
                               : INFINITY;
        c->longest_ms[f] = !has_longest ? NAN
                           : tried      ? first_iteration_ms(&fam, &longest, "the longest sample's",
                                                             why, sizeof c->why[f])
                                        : INFINITY;
        score[f] = c->first_ms[f] + (has_longest ? c->longest_ms[f] : 0);
    }
    if (has_longest) trace_release(&longest);
    if (!isfinite(score[0]) && !isfinite(score[1])) /* neither fits both: the first decides */
        score[0] = c->first_ms[0], score[1] = c->first_ms[1];
    c->placement = score[1] < score[0] ? PLACEMENT_V : PLACEMENT_LOOP;
    c->plan_ms = (dp_now_s() - t0) * 1e3;
    return DP_OK;
}

dp_status study_run(const study_opts *o, const trace *t, study_result *r, dp_err *err)
{
    if (o->sched || !o->chooser->picks_placement)
        return run_placed(o, t, r, 0, err);
    /* auto: a loop or a V for the whole run (a plan's weights stay where they are) */
    study_placement_choice c;
    dp_status st = study_placement(o, t, &c, err);
    study_opts fam = study_on_family(o, c.placement);
    if (st == DP_OK && o->plan_out)
        st = plan_writer_set_layout(o->plan_out, fam.chunks, c.placement, err);
    if (st == DP_OK) st = run_placed(&fam, t, r, c.plan_ms, err);
    else memset(r, 0, sizeof *r);
    r->placement_chosen = 1, r->placement = (int)c.placement;
    for (int f = 0; f < 2; f++) {
        r->placement_first_ms[f] = c.first_ms[f], r->placement_longest_ms[f] = c.longest_ms[f];
        snprintf(r->placement_why[f], sizeof r->placement_why[f], "%s", c.why[f]);
    }
    return st;
}

dp_status study_floor_ms(const study_opts *o, const trace *t, double *ms, dp_err *err)
{
    if (!o->sched && o->chooser->picks_placement) { /* auto: the lower of the two families' */
        study_opts loop = study_on_family(o, PLACEMENT_LOOP), v = study_on_family(o, PLACEMENT_V);
        double lv = 0;
        dp_err ignored = {0};
        dp_status st = study_floor_ms(&loop, t, ms, err);
        if (o->pp > 1 && study_floor_ms(&v, t, &lv, &ignored) == DP_OK) {
            if (st != DP_OK) st = DP_OK, *ms = lv;
            else *ms = fmin(*ms, lv);
        }
        return st;
    }
    const cost_model *cms[RECOMPUTE_COUNT];
    int modes = study_modes(o, cms), count;
    *ms = 0;
    stage_model *sm = NULL;
    dp_status st = stage_models(o, cms, modes, &sm, err);
    double *left = st == DP_OK ? iteration_floors(o, t, sm, modes, &count) : NULL;
    if (left) *ms = left[0];
    free(left);
    free(sm);
    return st;
}

char *study_metrics_json(const study_result *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "iterations", r->iterations);
    cJSON *a = cJSON_AddArrayToObject(o, "iteration_ms");
    cJSON *c = cJSON_AddArrayToObject(o, "closed_form_ms");
    for (int i = 0; i < r->n_iter && r->feasible; i++)
        if (!r->iter[i].failed) {
            cJSON_AddItemToArray(a, cJSON_CreateNumber(r->iter[i].ms));
            cJSON_AddItemToArray(c, cJSON_CreateNumber(r->iter[i].closed_form_ms));
        }
    cJSON *per = cJSON_AddArrayToObject(o, "per_iteration");
    for (int i = 0; i < r->n_iter; i++) {
        const study_iter *x = &r->iter[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "id", x->id);
        cJSON_AddStringToObject(e, "status", x->failed ? "failed" : "ok");
        if (x->failed) cJSON_AddStringToObject(e, "why", x->why);
        cJSON_AddNumberToObject(e, "ms", x->ms);
        cJSON_AddNumberToObject(e, "closed_form_ms", x->closed_form_ms);
        cJSON_AddNumberToObject(e, "microbatches", x->microbatches);
        cJSON_AddNumberToObject(e, "tokens", (double)x->tokens);
        if (x->recompute >= 0)
            cJSON_AddStringToObject(e, "recompute", recompute_name((recompute_mode)x->recompute));
        if (x->batching[0]) cJSON_AddStringToObject(e, "batching", x->batching);
        if (x->schedule[0]) cJSON_AddStringToObject(e, "schedule", x->schedule);
        cJSON_AddNumberToObject(e, "plan_ms", x->plan_ms);
        cJSON_AddItemToArray(per, e);
    }
    if (r->iter_omitted) /* a streamed run keeps its first records only */
        cJSON_AddNumberToObject(o, "per_iteration_omitted", r->iter_omitted);
    cJSON_AddNumberToObject(o, "failed_iterations", r->failed_iterations);
    cJSON *rci = cJSON_AddObjectToObject(o, "recompute_iterations");
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        cJSON_AddNumberToObject(rci, recompute_name((recompute_mode)m), r->recompute_iterations[m]);
    cJSON *rcm = cJSON_AddObjectToObject(o, "recompute_microbatches");
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        cJSON_AddNumberToObject(rcm, recompute_name((recompute_mode)m), r->recompute_microbatches[m]);
    cJSON_AddNumberToObject(o, "time_s", r->time_s);
    cJSON_AddNumberToObject(o, "tokens", (double)r->tokens);
    cJSON_AddNumberToObject(o, "padded_tokens", (double)r->padded_tokens);
    cJSON_AddNumberToObject(o, "throughput_tokens_per_s", r->throughput_tokens_per_s);
    cJSON_AddNumberToObject(o, "padding_efficiency", r->padding_efficiency);
    cJSON_AddNumberToObject(o, "tflops_per_gpu", r->tflops_per_gpu);
    cJSON_AddNumberToObject(o, "mfu", r->mfu);
    if (r->moe_routed > 0) /* a MoE with a capacity factor */
        cJSON_AddNumberToObject(o, "moe_dropped_share", r->moe_dropped / r->moe_routed);
    cJSON_AddNumberToObject(o, "gpus", (double)r->gpus);
    cJSON_AddNumberToObject(o, "hours_per_billion_tokens", study_hours_for(r, 1e9));
    cJSON_AddNumberToObject(o, "gpu_hours_per_billion_tokens", study_gpu_hours_for(r, 1e9));
    cJSON_AddNumberToObject(o, "mfu_noncausal", r->mfu_noncausal);
    cJSON_AddNumberToObject(o, "hw_tflops_per_gpu", r->hw_tflops_per_gpu);
    cJSON_AddNumberToObject(o, "hfu", r->hfu);
    cJSON_AddNumberToObject(o, "encoder_padding_efficiency", r->enc_padding_efficiency);
    cJSON_AddNumberToObject(o, "decoder_padding_efficiency", r->dec_padding_efficiency);
    cJSON *bf = cJSON_AddArrayToObject(o, "bubble_fraction");
    cJSON *pb = cJSON_AddArrayToObject(o, "pipeline_bubble");
    cJSON *pm = cJSON_AddArrayToObject(o, "peak_mem_mb");
    cJSON_AddNumberToObject(o, "pipeline_bubble_mean", r->pipeline_bubble_mean);
    cJSON_AddNumberToObject(o, "after_pipeline_share", r->after_pipeline_share);
    cJSON_AddNumberToObject(o, "closed_form_bubble", r->closed_form_bubble);
    for (int s = 0; s < r->pp; s++) {
        cJSON_AddItemToArray(pb, cJSON_CreateNumber(r->pipeline_bubble[s]));
        cJSON_AddItemToArray(bf, cJSON_CreateNumber(r->bubble_fraction[s]));
        cJSON_AddItemToArray(pm, cJSON_CreateNumber(r->peak_mem_mb[s]));
    }
    cJSON *mb = cJSON_AddArrayToObject(o, "memory_breakdown_mb"); /* per stage, at its peak */
    for (int s = 0; s < r->pp; s++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "weights", r->weights_mb[s]);
        cJSON_AddNumberToObject(x, "gradients", r->grads_mb[s]);
        cJSON_AddNumberToObject(x, "optimizer", r->optimizer_mb[s]);
        cJSON_AddNumberToObject(x, "stored_activations", r->stored_at_peak_mb[s]);
        cJSON_AddNumberToObject(x, "transient", r->transient_at_peak_mb[s]);
        cJSON_AddNumberToObject(x, "reserved", r->reserved_mb);
        cJSON_AddItemToArray(mb, x);
    }
    cJSON *ot = cJSON_AddObjectToObject(o, "op_time_ms"); /* summed over every rank */
    static const char *const ops[4] = {"F", "B", "W", "transfers"};
    for (int k = 0; k < 4; k++) cJSON_AddNumberToObject(ot, ops[k], r->op_ms[k]);
    cJSON_AddBoolToObject(o, "oom", r->oom);
    cJSON_AddNumberToObject(o, "planned_oom_iterations", r->planned_oom);
    cJSON_AddNumberToObject(o, "planned_out_of_step_iterations", r->planned_apart);
    cJSON_AddNumberToObject(o, "sim_oom_iterations", r->sim_oom);
    cJSON_AddBoolToObject(o, "feasible", study_result_fits(r)); /* the one fit rule */
    if (r->why[0]) cJSON_AddStringToObject(o, "why", r->why);
    char h[17];
    snprintf(h, sizeof h, "%016llx", (unsigned long long)r->timeline_hash);
    cJSON_AddStringToObject(o, "timeline_hash", h);
    cJSON_AddNumberToObject(o, "plan_ms_per_iteration", r->plan_ms_median);
    if (r->placement_chosen) { /* --schedule auto's placement, and the first iterations it took */
        cJSON_AddStringToObject(o, "placement", r->placement == PLACEMENT_V ? "v" : "loop");
        static const char *const keys[2] = {"placement_first_iteration_ms",
                                            "placement_longest_sample_iteration_ms"};
        const double *of[2] = {r->placement_first_ms, r->placement_longest_ms};
        for (int j = 0; j < 2; j++) { /* [loop, V]; null: no plan fits (or no such iteration) */
            cJSON *fm = cJSON_AddArrayToObject(o, keys[j]);
            for (int k = 0; k < 2; k++)
                cJSON_AddItemToArray(fm, isfinite(of[j][k]) ? cJSON_CreateNumber(of[j][k])
                                                            : cJSON_CreateNull());
        }
        cJSON *why = cJSON_AddArrayToObject(o, "placement_why"); /* [loop, V]; "": planned */
        for (int k = 0; k < 2; k++) cJSON_AddItemToArray(why, cJSON_CreateString(r->placement_why[k]));
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    return text;
}

dp_status study_answer(const study_result *r, dp_err *err)
{
    if (r->iterations > 0 || r->failed_iterations == 0) return DP_OK;
    const char *hint = strstr(r->why, "\nhint:"); /* the first one's reason, not its hint */
    return dp_fail(err, DP_ERR_INFEASIBLE, "every iteration was left out (--keep-going): none fits, "
                   "and a run of none has no figures\n%.*s\nhint: --recompute dynamic (or full), "
                   "more --tp, --pp or --dp with --zero, or a smaller --max-seqlen",
                   hint ? (int)(hint - r->why) : (int)strlen(r->why), r->why);
}

int study_result_fits(const study_result *r)
{
    return r->feasible && !r->oom && r->iterations > 0;
}

const char *study_why_not(const study_result *r)
{
    return !r->feasible ? "infeasible"
           : r->oom     ? (study_out_of_step(r) ? "replicas out of step" : "out of memory")
           : r->iterations <= 0 ? "no iteration fits"
                                : "";
}

int study_out_of_step(const study_result *r)
{
    return r->oom && r->planned_apart > 0 && r->planned_oom == 0 && r->sim_oom == 0;
}

double study_hours_for(const study_result *r, double tokens)
{
    return study_result_fits(r) && r->throughput_tokens_per_s > 0
               ? tokens / r->throughput_tokens_per_s / 3600
               : 0;
}

double study_gpu_hours_for(const study_result *r, double tokens)
{
    return study_hours_for(r, tokens) * (double)r->gpus;
}

double study_mean_bubble(const study_result *r)
{
    double b = 0;
    for (int s = 0; s < r->pp; s++) b += r->bubble_fraction[s];
    return r->pp ? b / r->pp : 0;
}

double study_mb_per_iteration(const study_result *r)
{
    return r->iterations ? (double)r->microbatches / r->iterations : 0;
}

double study_max_peak_mb(const study_result *r)
{
    double m = 0;
    for (int s = 0; s < r->pp; s++) m = fmax(m, r->peak_mem_mb[s]);
    return m;
}
