#include "stage_cost.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/comm.h"
#include "../models/memory.h"
#include "../models/placement.h"

int stage_shard_size(int shard_group, int dp, int cp)
{
    int group = dp * (cp > 1 ? cp : 1);
    return shard_group > 0 && shard_group < group ? shard_group : group;
}

int stage_shard_check(int shard_group, int dp, int cp, int zero, char *why, size_t cap)
{
    cp = cp > 1 ? cp : 1;
    if (shard_group == 0 || shard_group == dp * cp) return 0;
    if (zero < 1) {
        snprintf(why, cap, "--shard-group %d: ZeRO 0 shards nothing (HSDP splits ZeRO's state "
                 "within a group)\nhint: --zero 1, 2 or 3", shard_group);
        return -1;
    }
    if (shard_group >= cp && shard_group % cp == 0 && dp % (shard_group / cp) == 0 &&
        shard_group / cp < dp)
        return 0;
    int below = 0, above = 0; /* the nearest valid sizes: cp x a divisor of dp */
    for (int k = 1; k <= dp; k++)
        if (dp % k == 0) {
            if (k * cp < shard_group) below = k * cp;
            else if (!above && k * cp > shard_group) above = k * cp;
        }
    char near[64];
    if (below && above) snprintf(near, sizeof near, "%d or %d", below, above);
    else snprintf(near, sizeof near, "%d", below ? below : above);
    snprintf(why, cap, "--shard-group %d: a shard group is the cp x k GPUs of k data-parallel "
             "replicas, k dividing --dp %d (cp %d)\nhint: --shard-group %s", shard_group, dp, cp,
             near);
    return -1;
}

dp_status stage_model_init(stage_model *sm, const cost_model *cm, int pp, int chunks, int dp,
                           int zero_stage, double mem_limit_mb, dp_err *err)
{
    return stage_model_init_sharded(sm, cm, pp, chunks, dp, zero_stage, 0, mem_limit_mb, err);
}

dp_status stage_model_init_sharded(stage_model *sm, const cost_model *cm, int pp, int chunks, int dp,
                                   int zero_stage, int shard_group, double mem_limit_mb, dp_err *err)
{
    return stage_model_init_placed(sm, cm, pp, chunks, dp, zero_stage, shard_group, PLACEMENT_LOOP,
                                   mem_limit_mb, err);
}

dp_status stage_model_init_placed(stage_model *sm, const cost_model *cm, int pp, int chunks, int dp,
                                  int zero_stage, int shard_group, placement_kind place,
                                  double mem_limit_mb, dp_err *err)
{
    memset(sm, 0, sizeof *sm);
    const model_spec *m = &cm->model;
    if (pp < 1 || pp > STAGE_MAX)
        return dp_fail(err, DP_ERR_INVALID, "--pp must be in [1, %d]", STAGE_MAX);
    if (chunks < 1) return dp_fail(err, DP_ERR_INVALID, "--chunks must be at least 1");
    if (dp < 1) return dp_fail(err, DP_ERR_INVALID, "--dp must be at least 1");
    if (zero_stage < 0 || zero_stage > 3)
        return dp_fail(err, DP_ERR_INVALID, "--zero must be 0, 1, 2 or 3");
    int virt = pp * chunks;
    dp_status split_ok = placement_split_check(m, &cm->split, virt, err);
    if (split_ok != DP_OK) return split_ok;
    sm->cm = cm;
    sm->pp = pp;
    sm->chunks = chunks;
    sm->dp = dp;
    sm->zero_stage = zero_stage;
    sm->mem_limit_mb = mem_limit_mb;
    sm->placement = place;
    sm->head_device = placement_device(place, virt - 1, pp);
    /* Device s holds one virtual stage of each chunk (placement.h: in a loop or a V) */
    for (int v = 0; v < virt; v++) {
        stage_placement pl = placement_stage(m, &cm->split, v, virt);
        sm->enc_layers[placement_device(place, v, pp)] += pl.enc_layers;
        sm->dec_layers[placement_device(place, v, pp)] += pl.dec_layers;
        sm->moe_layers[placement_device(place, v, pp)] += placement_moe_layers(m, &pl);
    }
    sm->zero_ranks = dp * cm->cp;
    char why[300];
    if (stage_shard_check(shard_group, dp, cm->cp, zero_stage, why, sizeof why) != 0)
        return dp_fail(err, DP_ERR_INVALID, "%s", why);
    sm->zero_shard = stage_shard_size(shard_group, dp, cm->cp);
    /* HSDP: a shard group is the first k replicas' GPUs (mesh.h: replicas outermost), the
     * replicas' shards all-reduced over the dp / k groups: a mesh of k replicas for the one, and
     * for the other a mesh whose "stages" are the k replicas' pipelines, dp / k replicas */
    int k = sm->zero_shard / (cm->cp > 1 ? cm->cp : 1), hybrid = sm->zero_shard < sm->zero_ranks;
    int expert_ranks = (cm->ep > 1 ? cm->ep : 1) * (cm->etp > 1 ? cm->etp : 1);
    int edp_shard = cm->tp * sm->zero_shard / expert_ranks; /* (ep x etp divides tp x cp x dp) */
    sm->expert_shard = edp_shard > 1 ? edp_shard : 1;
    mesh in_group = mesh_of(cm->tp, cm->cp, pp, k), across = mesh_of(cm->tp, cm->cp, pp * k, dp / k);
    /* the experts' gradients and ZeRO's collectives run over their expert-data-parallel group:
     * the edp GPUs of a stage ep x etp apart (an expert rank's ep x etp GPUs are consecutive,
     * cost_model_place_ep), a shard group of expert_shard of them under HSDP and the rest its
     * replicas; their bytes are the experts' alone, the rest of the stage's over dp x cp */
    mesh layout = mesh_of(cm->tp, cm->cp, pp, dp);
    int edp = cm->tp * sm->zero_ranks / expert_ranks;
    edp = edp > 1 ? edp : 1;
    for (int s = 0; s < pp; s++) {
        double layers_mb = memory_layers_param_mb(cm, sm->enc_layers[s], sm->moe_layers[s],
                                                  sm->dec_layers[s]);
        placement_roles roles = placement_device_roles(place, s, pp, chunks);
        double param_mb = layers_mb + memory_embedding_share_mb(cm, roles);
        sm->param_mb[s] = param_mb;
        sm->expert_mb[s] = sm->moe_layers[s] * cost_moe_expert_mb(m, cm->ep, cm->etp);
        /* ZeRO-3 (FSDP): while a unit runs its whole parameters are gathered, and the next
         * unit's behind it (prefetch), as FSDP's and DeepSpeed's prefetch of one unit hold them,
         * whatever the micro-batch: the two largest of its layers, embedding and head */
        int layers = sm->enc_layers[s] + sm->dec_layers[s];
        double unit_mb = sm->moe_layers[s] > 0 ? cm->param_mb[COMP_MOE] /* the largest layer */
                         : layers > 0           ? layers_mb / layers
                                                : 0;
        sm->zero3_gathered_mb[s] = memory_zero3_gathered_mb(cm, roles, layers, unit_mb, zero_stage,
                                                            sm->zero_shard);
        double weights, grads, optimizer;
        stage_state_parts(sm, s, &weights, &grads, &optimizer);
        sm->state_mb[s] = weights + grads + optimizer + sm->zero3_gathered_mb[s];
        sm->budget_mb[s] = mem_limit_mb - sm->state_mb[s];
        /* the rings of each tensor-parallel rank over the dp x cp GPUs (ranks of tp x cp GPUs),
         * or over a shard group's and across the groups */
        comm_group g = comm_group_resized(comm_dp_group(&cm->hw, &in_group, s), sm->zero_shard);
        comm_group r = hybrid ? comm_group_resized(comm_dp_group(&cm->hw, &across, s), dp / k)
                              : comm_group_flat(1, 0);
        double dense_mb = param_mb - sm->expert_mb[s];
        zero_comm z = comm_zero(&cm->hw, zero_stage, &g, &r, 1e6 * dense_mb,
                                1e6 * dense_mb / BYTES_WEIGHT * cm->grad_bytes);
        if (sm->expert_mb[s] > 0) { /* the routed experts over their own group (above) */
            comm_group whole = comm_stage_group(&cm->hw, &layout, edp, expert_ranks, s);
            comm_group ge = comm_group_resized(whole, sm->expert_shard);
            comm_group re = comm_group_resized(whole, edp / sm->expert_shard);
            zero_comm ze = comm_zero(&cm->hw, zero_stage, &ge, &re, 1e6 * sm->expert_mb[s],
                                     1e6 * sm->expert_mb[s] / BYTES_WEIGHT * cm->grad_bytes);
            z.fwd_ms += ze.fwd_ms, z.bwd_ms += ze.bwd_ms, z.iter_ms += ze.iter_ms;
            z.grad_ms += ze.grad_ms;
        }
        sm->zero_fwd_ms[s] = z.fwd_ms, sm->zero_bwd_ms[s] = z.bwd_ms, sm->zero_iter_ms[s] = z.iter_ms;
        sm->zero_grad_ms[s] = z.grad_ms;
        if (sm->budget_mb[s] <= 0) {
            char experts[120] = "";
            if (sm->expert_mb[s] > 0)
                snprintf(experts, sizeof experts, "; of them %.0f MB of routed experts, their "
                         "state over %d (tp x cp x dp / ep / etp)", sm->expert_mb[s],
                         sm->expert_shard);
            return dp_fail(err, DP_ERR_INFEASIBLE,
                           "the model state of stage %d (%.0f MB: weights, %s gradients and Adam "
                           "state of %.0f MB of 16-bit parameters, ZeRO-%d over %d GPUs%s) "
                           "exceeds the %.0f MB of device memory\nhint: more --pp, --tp or --dp "
                           "with --zero",
                           s, sm->state_mb[s], cm->grad_bytes == 4 ? "fp32" : "16-bit", param_mb,
                           zero_stage, sm->zero_shard, experts, mem_limit_mb);
        }
    }
    return DP_OK;
}

void stage_state_parts(const stage_model *sm, int s, double *weights_mb, double *grads_mb,
                       double *optimizer_mb)
{
    state_bytes sb = memory_state_bytes(sm->cm->precision, sm->cm->grad_bytes);
    double w, g, o;
    memory_model_state_parts(sm->param_mb[s] - sm->expert_mb[s], &sb, sm->zero_stage,
                             sm->zero_shard, weights_mb, grads_mb, optimizer_mb);
    memory_model_state_parts(sm->expert_mb[s], &sb, sm->zero_stage, sm->expert_shard, &w, &g, &o);
    *weights_mb += w, *grads_mb += g, *optimizer_mb += o;
}

/* Per-layer costs of both components (decoder zero for GPT) and of the LM head. Under --cp auto
 * at the shape's degree c (cost_shape.cp): the group's cp GPUs run the micro-batch as cp / c parts
 * side by side, each at context parallelism c, the micro-batch's time and memory its heaviest
 * part's. Whole rows are split whole (the most rows any part gets); a varlen micro-batch with
 * fewer rows than parts has its samples spread over them instead (as Megatron-Core's dynamic CP
 * regroups its ranks around a long sample): the heaviest part holds the longest sample or an even
 * share of the tokens and of the attention sums, whichever is more (a balanced spread's bound);
 * with as many rows as parts or more, rows go whole and the sums by their share. */
static dp_status layer_costs(const stage_model *sm, const cost_shape *s, cost_layer *enc,
                             cost_layer *dec, cost_layer *head, cost_layer *moe, dp_err *err)
{
    const cost_model *cm = sm->cm;
    cost_model at;
    cost_shape part = *s;
    if (cm->cp_auto && s->cp > 0 && s->cp != cm->cp) {
        int parts = cm->cp / s->cp;
        at = *cm, at.cp = s->cp, cm = &at;
        if (s->varlen && s->mbs < parts) { /* samples spread over the parts */
            double tokens = (double)s->mbs * s->enc_len, longest = s->enc_max > 0 ? s->enc_max : s->enc_len;
            part.mbs = 1;
            part.enc_len = (int)ceil(fmax(longest, tokens / parts));
            part.enc_sq = fmax(longest * longest, s->enc_sq / parts);
        } else {
            part.mbs = (s->mbs + parts - 1) / parts;
            double share = (double)part.mbs / s->mbs;
            part.enc_sq = s->enc_sq * share, part.dec_sq = s->dec_sq * share;
            part.enc_dec = s->enc_dec * share;
        }
    }
    memset(dec, 0, sizeof *dec);
    memset(moe, 0, sizeof *moe);
    dp_status st = cost_query(cm, COMP_ENCODER, &part, enc, err);
    if (st == DP_OK && cm->model.arch == ARCH_T5) st = cost_query(cm, COMP_DECODER, &part, dec, err);
    if (st == DP_OK && model_is_moe(&cm->model)) st = cost_query(cm, COMP_MOE, &part, moe, err);
    if (st == DP_OK) st = cost_query(cm, COMP_POSTPROCESS, &part, head, err);
    return st;
}

int stage_experts_span(const stage_model *sm)
{
    const cost_model *cm = sm->cm;
    mesh layout = mesh_of(cm->tp, cm->cp, sm->pp, sm->dp);
    return model_is_moe(&cm->model) && mesh_experts_span_replicas(&layout, cm->ep, cm->etp);
}

int stage_zero_prefetch(const stage_model *sm)
{
    return (sm->cm->overlap & COST_OVERLAP_ZERO) != 0;
}

/* The larger of a and b; b where either is NaN (fmax's answer where a is; where b is, the NaN
 * goes on to in_range, which refuses it). */
static inline double larger(double a, double b)
{
    return a > b ? a : b;
}

double stage_with_zero(double compute_ms, double zero_ms, int layers, int prefetch)
{
    if (!prefetch || layers < 1 || zero_ms <= 0) return compute_ms + zero_ms;
    return larger(compute_ms, zero_ms) + zero_ms / layers;
}

double stage_zero_rescaled(double with_ms, double zero_ms, int layers, int prefetch, double k)
{
    if (zero_ms <= 0 || k == 1) return with_ms;
    if (!prefetch || layers < 1) return with_ms + (k - 1) * zero_ms;
    /* with = max(c, z) + z/L: c = with - z/L where c > z; else c <= z <= kz, which max hides */
    return fmax(with_ms - zero_ms / layers, k * zero_ms) + k * zero_ms / layers;
}

static double transient(const cost_layer *l)
{
    return larger(0, l->peak_act_mb - l->stored_act_mb);
}

/* A micro-batch's figures within what a plan and the simulator's integer clock hold
 * (STAGE_MAX_VALUE ms or MB): beyond that the cost model's rates are implausible (a hardware JSON
 * or fit of near-zero rates), said here rather than as a plan rule broken later. */
static dp_status in_range(const stage_model *sm, const cost_shape *s, const mb_cost *c, dp_err *err)
{
    for (int d = 0; d < sm->pp; d++) {
        const double v[4] = {c->fwd_ms[d], c->bwd_ms[d], c->stored_mb[d], c->peak_mb[d]};
        for (int k = 0; k < 4; k++)
            if (!(v[k] >= 0 && v[k] <= STAGE_MAX_VALUE))
                return dp_fail(err, DP_ERR_INFEASIBLE,
                               "a micro-batch of %d x %d tokens costs %.3g %s on stage %d (%s), "
                               "beyond the simulator's range of %.0e: the cost model's rates are "
                               "implausible\nhint: check the hardware's peak_tflops and hbm_gbps, "
                               "or the fit's efficiencies", s->mbs, s->enc_len + s->dec_len, v[k],
                               k < 2 ? "ms" : "MB", d,
                               k == 0 ? "forward" : k == 1 ? "backward" : "stored activations",
                               STAGE_MAX_VALUE);
    }
    return DP_OK;
}

/* ---- the memo (stage_memo) ------------------------------------------------------------------ */

typedef struct memo_slot {
    int used;
    uint64_t serial; /* the cost model's (cost_model.serial) */
    cost_shape s;
    cost_layer enc, dec, head, moe;
} memo_slot;

struct stage_memo {
    size_t slots;
    memo_slot *slot;
};

stage_memo *stage_memo_new(int slots)
{
    stage_memo *m = calloc(1, sizeof *m);
    if (!m) return NULL;
    m->slots = slots > 1 ? (size_t)slots : 1;
    m->slot = calloc(m->slots, sizeof *m->slot);
    if (!m->slot) free(m), m = NULL;
    return m;
}

void stage_memo_free(stage_memo *m)
{
    if (m) free(m->slot);
    free(m);
}

static int same_shape(const cost_shape *a, const cost_shape *b)
{
    return a->mbs == b->mbs && a->enc_len == b->enc_len && a->dec_len == b->dec_len &&
           a->varlen == b->varlen && a->enc_sq == b->enc_sq && a->dec_sq == b->dec_sq &&
           a->enc_dec == b->enc_dec && a->cp == b->cp && a->enc_max == b->enc_max;
}

static uint64_t bits(double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    return u;
}

static memo_slot *memo_slot_of(stage_memo *m, uint64_t serial, const cost_shape *s)
{
    const uint64_t w[10] = {serial,           (uint64_t)s->mbs,    (uint64_t)s->enc_len,
                            (uint64_t)s->dec_len, (uint64_t)s->varlen, bits(s->enc_sq),
                            bits(s->dec_sq),  bits(s->enc_dec),    (uint64_t)s->cp,
                            (uint64_t)s->enc_max};
    uint64_t h = dp_fnv1a_words(DP_FNV_OFFSET, w, 10);
    return &m->slot[(h ^ h >> 29) % m->slots];
}

/* layer_costs through sm's memo, where it has one (failures are not kept: asked again, they say
 * why again) */
static dp_status layer_costs_memo(const stage_model *sm, const cost_shape *s, cost_layer *enc,
                                  cost_layer *dec, cost_layer *head, cost_layer *moe, dp_err *err)
{
    if (!sm->memo) return layer_costs(sm, s, enc, dec, head, moe, err);
    memo_slot *x = memo_slot_of(sm->memo, sm->cm->serial, s);
    if (x->used && x->serial == sm->cm->serial && same_shape(&x->s, s)) {
        *enc = x->enc, *dec = x->dec, *head = x->head, *moe = x->moe;
        return DP_OK;
    }
    dp_status st = layer_costs(sm, s, enc, dec, head, moe, err);
    if (st == DP_OK) {
        x->used = 1, x->serial = sm->cm->serial, x->s = *s;
        x->enc = *enc, x->dec = *dec, x->head = *head, x->moe = *moe;
    }
    return st;
}

dp_status stage_model_cost(const stage_model *sm, const cost_shape *s, mb_cost *out, dp_err *err)
{
    cost_layer enc, dec, head, moe;
    dp_status st = layer_costs_memo(sm, s, &enc, &dec, &head, &moe, err);
    if (st != DP_OK) return st;
    out->t_ms = 0;
    int prefetch = stage_zero_prefetch(sm);
    const cost_toy *toy = &sm->cm->toy;
    double scale = toy->on ? cost_toy_scale(toy, s) : 0;
    double tr_enc = transient(&enc), tr_dec = transient(&dec), tr_head = transient(&head);
    double tr_moe = transient(&moe);
    /* the DP prices every segment of a batch here, a stage at a time: maxima by comparison, not
     * libm's fmax (a call each) */
    for (int d = 0; d < sm->pp; d++) {
        int nm = sm->moe_layers[d], ne = sm->enc_layers[d] - nm, nd = sm->dec_layers[d];
        double tr = larger(larger(ne ? tr_enc : 0, nd ? tr_dec : 0), nm ? tr_moe : 0);
        out->stored_mb[d] = ne * enc.stored_act_mb + nd * dec.stored_act_mb + nm * moe.stored_act_mb;
        out->xfwd_ms[d] = toy->on ? 0 : nm * moe.fwd_xchg_ms;
        out->xbwd_ms[d] = toy->on ? 0 : nm * moe.bwd_xchg_ms;
        if (toy->on) { /* textbook: equal stages, no LM head, no collectives; the layers' memory */
            out->fwd_ms[d] = toy->f_ms * scale;
            out->bwd_ms[d] = cost_toy_bwd_ms(toy, sm->cm->recompute) * scale;
        } else {
            out->fwd_ms[d] = stage_with_zero(ne * enc.fwd_ms + nd * dec.fwd_ms + nm * moe.fwd_ms,
                                             sm->zero_fwd_ms[d], ne + nd + nm, prefetch);
            out->bwd_ms[d] = stage_with_zero(ne * enc.bwd_ms + nd * dec.bwd_ms + nm * moe.bwd_ms,
                                             sm->zero_bwd_ms[d], ne + nd + nm, prefetch);
            if (d == sm->head_device) {
                out->fwd_ms[d] += head.fwd_ms;
                out->bwd_ms[d] += head.bwd_ms;
                out->stored_mb[d] += head.stored_act_mb;
                tr = larger(tr, tr_head);
            }
        }
        out->peak_mb[d] = out->stored_mb[d] + tr;
        out->t_ms = larger(out->t_ms, out->fwd_ms[d] + out->bwd_ms[d]);
    }
    return in_range(sm, s, out, err);
}

void stage_model_token_floor(const stage_model *sm, int d, double *enc_ms, double *dec_ms)
{
    const cost_model *cm = sm->cm;
    *enc_ms = *dec_ms = 0;
    if (cm->toy.on) return;
    *enc_ms = (sm->enc_layers[d] - sm->moe_layers[d]) * cost_token_floor_ms(cm, COMP_ENCODER) +
              sm->moe_layers[d] * cost_token_floor_ms(cm, COMP_MOE);
    *dec_ms = sm->dec_layers[d] * cost_token_floor_ms(cm, COMP_DECODER);
    if (d == sm->head_device) /* the head runs over the decoder's tokens (T5), or the sequence's */
        *(cm->model.arch == ARCH_T5 ? dec_ms : enc_ms) += cost_token_floor_ms(cm, COMP_POSTPROCESS);
}

void mem_rule_uniform(mem_rule *r, int pp, double holds)
{
    memset(r, 0, sizeof *r);
    for (int s = 0; s < pp && s < STAGE_MAX; s++) r->holds[s] = holds;
    r->scale = 1;
}

int stage_model_fits_mb(const stage_model *sm, const double *stored_mb, const double *peak_mb,
                        const mem_rule *rule, char *why, size_t why_cap)
{
    for (int d = 0; d < sm->pp; d++) {
        double holds = rule->holds[d] > 1 ? rule->holds[d] : 1;
        double transient = larger(0, peak_mb[d] - stored_mb[d]) / sm->chunks;
        double need = holds * stored_mb[d] + transient, have = rule->scale * sm->budget_mb[d];
        if (need > have) {
            if (why)
                snprintf(why, why_cap,
                         "stage %d would hold %.0f MB of activations (%.3g micro-batches of %.0f MB "
                         "stored, + %.0f MB while one runs), over %s%.0f MB free after model state",
                         d, need, holds, stored_mb[d], transient,
                         rule->scale < 1 ? "the planner's share of the " : "the ", have);
            return 0;
        }
    }
    return 1;
}

int stage_model_fits(const stage_model *sm, const mb_cost *c, const mem_rule *rule, char *why,
                     size_t why_cap)
{
    return stage_model_fits_mb(sm, c->stored_mb, c->peak_mb, rule, why, why_cap);
}

/* --cp auto: the fastest degree that fits (its time in *t_ms), or 0 with none fitting. */
static int pick_cp(const stage_model *sm, const cost_shape *s, const mem_rule *rule, double *t_ms)
{
    int group = sm->cm->cp, best = 0;
    mb_cost c;
    for (int d = 1; d <= group; d++) {
        if (group % d) continue;
        cost_shape at = *s;
        at.cp = d;
        if (stage_model_cost(sm, &at, &c, NULL) != DP_OK || !stage_model_fits(sm, &c, rule, NULL, 0))
            continue;
        if (!best || c.t_ms < *t_ms) *t_ms = c.t_ms, best = d;
    }
    return best;
}

dp_status stage_model_time(const stage_model *sm, const cost_shape *s, const mem_rule *rule,
                           double *t_ms, int *fits)
{
    cost_shape at = *s;
    if (sm->cm->cp_auto && s->cp == 0) {
        if ((at.cp = pick_cp(sm, s, rule, t_ms)) != 0) {
            *fits = 1;
            return DP_OK;
        }
        at.cp = sm->cm->cp; /* none fits: priced at the group's own degree */
    }
    mb_cost c;
    dp_status st = stage_model_cost(sm, &at, &c, NULL);
    if (st != DP_OK) return st;
    *t_ms = c.t_ms;
    *fits = stage_model_fits(sm, &c, rule, NULL, 0);
    return DP_OK;
}

int stage_model_pick_cp(const stage_model *sm, const cost_shape *s, const mem_rule *rule)
{
    double t;
    int d = pick_cp(sm, s, rule, &t);
    return d ? d : sm->cm->cp;
}
