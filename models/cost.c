/* Parts of the cost-model interface shared by every kind. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"

void cost_model_free(cost_model *cm)
{
    if (!cm) return;
    if (cm->ops && cm->ops->release) cm->ops->release(cm);
    free(cm->routing);
    free(cm);
}

const char *recompute_name(recompute_mode r)
{
    return recompute_policy_name(r);
}

int recompute_parse(const char *name, recompute_mode *r)
{
    int p;
    if (recompute_policy_parse(name, &p) != 0 || p >= RECOMPUTE_COUNT) return -1;
    *r = (recompute_mode)p;
    return 0;
}

static const char *const POLICY_NAMES[RECOMPUTE_POLICY_END] = {"none", "selective", "full",
                                                                  "dynamic", "mixed", "fastest"};

const char *recompute_policy_name(int policy)
{
    return policy >= 0 && policy < RECOMPUTE_POLICY_END ? POLICY_NAMES[policy] : "?";
}

int recompute_policy_parse(const char *name, int *policy)
{
    for (int i = 0; i < RECOMPUTE_POLICY_END; i++)
        if (strcmp(name, POLICY_NAMES[i]) == 0) {
            *policy = i;
            return 0;
        }
    return -1;
}

static const char *const PRECISION_NAMES[PRECISION_COUNT] = {"bf16", "fp16", "fp8"};

const char *precision_name(train_precision p)
{
    return p >= 0 && p < PRECISION_COUNT ? PRECISION_NAMES[p] : "?";
}

int precision_parse(const char *name, train_precision *p)
{
    for (int i = 0; i < PRECISION_COUNT; i++)
        if (strcmp(name, PRECISION_NAMES[i]) == 0) {
            *p = (train_precision)i;
            return 0;
        }
    return -1;
}

int grad_reduce_bytes(train_precision p, grad_reduce g)
{
    if (g == GRAD_REDUCE_AUTO) g = p == PRECISION_FP16 ? GRAD_REDUCE_16 : GRAD_REDUCE_FP32;
    return g == GRAD_REDUCE_FP32 ? 4 : 2;
}

dp_status cost_model_set_precision(cost_model *cm, train_precision p, grad_reduce g, dp_err *err)
{
    if (p == PRECISION_FP8) {
        if (!(cm->hw.gpu.fp8_tflops > 0))
            return dp_fail(err, DP_ERR_INVALID, "--precision fp8: %s has no FP8 tensor cores (no "
                           "fp8_tflops in its spec)\nhint: bf16, or a GPU with FP8 (h100, h200, "
                           "b200)", cm->hw.gpu.name);
        if (!(cm->hw.gpu.fp8_matmul_eff > 0))
            return dp_fail(err, DP_ERR_INVALID, "--precision fp8: %s's spec has an FP8 peak but no "
                           "measured FP8 GEMM (fp8_matmul_eff) to time FP8 GEMMs with",
                           cm->hw.gpu.name);
        if (!cm->ops->fp8)
            return dp_fail(err, DP_ERR_INVALID, "--precision fp8 needs the analytic cost model: a "
                           "%s cost model times what was measured\nhint: --analytic, or a profile "
                           "measured in FP8", cm->ops->kind);
    }
    cm->precision = p;
    cm->grad_bytes = grad_reduce_bytes(p, g);
    return DP_OK;
}

double cost_gemm_speedup(const cost_model *cm)
{
    const gpu_spec *g = &cm->hw.gpu;
    if (cm->precision != PRECISION_FP8 || !(g->matmul_eff > 0)) return 1;
    return g->fp8_tflops * g->fp8_matmul_eff / (g->peak_tflops * g->matmul_eff);
}

double cost_gemm_shape_eff(const gpu_spec *g, int fp8, double k)
{
    double k0 = fp8 ? g->fp8_gemm_k0 : g->gemm_k0;
    return k0 > 0 && k > 0 ? k / (k + k0) : 1;
}

uint64_t cost_model_next_serial(void)
{
    static uint64_t next;
    return ++next;
}

void cost_shape_attn(const cost_shape *s, double *enc_sq, double *dec_sq, double *enc_dec)
{
    double b = s->mbs, e = s->enc_len, d = s->dec_len;
    *enc_sq = b * e * e;
    *dec_sq = b * d * d;
    *enc_dec = b * e * d;
    if (!s->varlen) return;
    *enc_sq = fmin(*enc_sq, s->enc_sq);
    *dec_sq = fmin(*dec_sq, s->dec_sq);
    *enc_dec = fmin(*enc_dec, s->enc_dec);
}

dp_status cost_model_set_cp(cost_model *cm, int cp, int alltoall, dp_err *err)
{
    const model_spec *m = &cm->model;
    if (cp < 1) return dp_fail(err, DP_ERR_INVALID, "--cp must be at least 1");
    if (cp > 1 && !cm->ops->context_parallel && cm->cp != cp)
        return dp_fail(err, DP_ERR_INVALID, "--cp %d needs the analytic cost model or a profile "
                       "measured at cp %d: this %s timed %s\nhint: --analytic, or dprun profile "
                       "--cp %d", cp, cp, cm->ops->kind, cm->cp > 1 ? "another cp" : "whole "
                       "sequences on one GPU", cp);
    if (cp > 1 && !cm->ops->context_parallel && alltoall)
        return dp_fail(err, DP_ERR_INVALID, "--cp %d --cp-kind all-to-all: the %s was measured in "
                       "the ring form\nhint: --cp-kind ring, or --analytic", cp, cm->ops->kind);
    if (cp > 1 && m->arch != ARCH_GPT)
        return dp_fail(err, DP_ERR_INVALID, "--cp %d: context parallelism splits the sequence of "
                       "a decoder-only model; %s is an encoder-decoder", cp, m->name);
    int width = cm->tp * cp;
    if (cp > 1 && alltoall && (m->heads % width || model_kv_heads(m) % width))
        return dp_fail(err, DP_ERR_INVALID, "--cp %d --cp-kind all-to-all: the all-to-all form "
                       "gives each of the tp x cp = %d GPUs whole heads, and %s has %d heads and %d "
                       "key/value heads\nhint: --cp-kind ring, or a --cp that divides them",
                       cp, width, m->name, m->heads, model_kv_heads(m));
    cm->cp = cp;
    cm->cp_alltoall = alltoall && cp > 1;
    cm->cp_auto = 0;
    return DP_OK;
}

double cost_moe_expert_mb(const model_spec *m, int ep, int etp)
{
    if (!model_is_moe(m)) return 0;
    int64_t split, whole, expert;
    model_moe_layer_parts(m, &split, &whole, &expert);
    double experts_here = m->experts / (ep > 0 ? ep : 1);
    return 2.0 * (double)expert * experts_here / (etp > 1 ? etp : 1) / 1e6;
}

double cost_moe_param_mb(const model_spec *m, int tp, int ep, int etp)
{
    if (!model_is_moe(m)) return 0;
    int64_t split, whole, expert;
    model_moe_layer_parts(m, &split, &whole, &expert);
    return 2.0 * (double)(split + whole) / tp / 1e6 + cost_moe_expert_mb(m, ep, etp);
}

dp_status cost_model_set_etp(cost_model *cm, int etp, dp_err *err)
{
    const model_spec *m = &cm->model;
    if (etp < 1)
        return dp_fail(err, DP_ERR_INVALID, "--etp %d: a degree of 1 or more", etp);
    if (etp > 1 && !model_is_moe(m))
        return dp_fail(err, DP_ERR_INVALID, "--etp %d: %s has no experts to split", etp, m->name);
    if (etp > 1 && m->expert_ffn % etp)
        return dp_fail(err, DP_ERR_INVALID, "--etp %d does not divide %s's expert width %d (each "
                       "GPU holds an equal share of every expert's MLP)", etp, m->name, m->expert_ffn);
    int node = cm->hw.gpus_per_node > 0 ? cm->hw.gpus_per_node : 1;
    cm->etp = etp;
    cm->etp_group = comm_group_flat(etp, etp > node); /* consecutive GPUs: cost_model_place_ep */
    cm->param_mb[COMP_MOE] = cost_moe_param_mb(m, cm->tp, cm->ep, etp);
    return DP_OK;
}

dp_status cost_model_set_moe(cost_model *cm, int ep, const moe_routing *routing, dp_err *err)
{
    const model_spec *m = &cm->model;
    if (!model_is_moe(m)) {
        if (ep > 1)
            return dp_fail(err, DP_ERR_INVALID, "--ep %d: %s has no experts to split (expert "
                           "parallelism is for a mixture of experts)", ep, m->name);
        return DP_OK;
    }
    if (!cm->ops->experts)
        return dp_fail(err, DP_ERR_INVALID, "%s is a mixture of experts, which the analytic cost "
                       "model prices; a measured %s has no expert layers\nhint: --analytic",
                       m->name, cm->ops->kind);
    if (ep < 1 || m->experts % ep)
        return dp_fail(err, DP_ERR_INVALID, "--ep %d does not divide %s's %d experts (each GPU "
                       "holds a whole block of them)", ep, m->name, m->experts);
    moe_routing r;
    if (routing) r = *routing;
    else if (moe_routing_init(&r, MOE_ROUTE_UNIFORM, m->experts, ep, 0, NULL, err) != DP_OK)
        return DP_ERR_INVALID;
    if (r.experts != m->experts || r.ep != ep)
        return dp_fail(err, DP_ERR_INVALID, "the routing model is over %d experts on %d ranks, "
                       "%s has %d on --ep %d", r.experts, r.ep, m->name, m->experts, ep);
    int node = cm->hw.gpus_per_node > 0 ? cm->hw.gpus_per_node : 1;
    if (!cm->routing && !(cm->routing = malloc(sizeof *cm->routing)))
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    cm->ep = ep;
    *cm->routing = r;
    cm->param_mb[COMP_MOE] = cost_moe_param_mb(m, cm->tp, ep, cm->etp);
    cm->ep_nodes = (ep + node - 1) / node; /* consecutive GPUs: cost_model_place_ep */
    cm->ep_group = comm_group_flat(ep, cm->ep_nodes > 1);
    for (int i = 0; i < COST_MOE_IMB_POINTS; i++)
        cm->moe_imb[i] = ep > 1 ? moe_imbalance(&r, pow(2, i / 4.0) * ep) : 1;
    return DP_OK;
}

/* The most nodes any group of `size` GPUs `stride` apart in a stage's flattened tp x cp x dp (tp
 * fastest: mesh.h's order within a stage; blocks of size x stride GPUs, each holding stride such
 * groups) spans: its members' ranks rise with the index, so a node change is a new node. */
static int group_nodes(const mesh *layout, int node, int size, int stride)
{
    int tp = layout->tp > 1 ? layout->tp : 1, cp = layout->cp > 1 ? layout->cp : 1;
    int pp = layout->pp > 1 ? layout->pp : 1, dp = layout->dp > 1 ? layout->dp : 1;
    int per_stage = tp * cp * dp, block = size * stride, most = 1;
    for (int s = 0; s < pp; s++)
        for (int b = 0; b + block <= per_stage; b += block)
            for (int o = 0; o < stride; o++) {
                long long last = -1;
                int nodes = 0;
                for (int j = 0; j < size; j++) {
                    int f = b + o + j * stride;
                    mesh_coord c = {f % tp, (f / tp) % cp, s, f / (tp * cp)};
                    long long at = mesh_rank(layout, c) / node;
                    nodes += at != last, last = at;
                }
                most = nodes > most ? nodes : most;
            }
    return most;
}

void cost_model_place_ep(cost_model *cm, const mesh *layout)
{
    int node = cm->hw.gpus_per_node > 0 ? cm->hw.gpus_per_node : 1, etp = cm->etp > 1 ? cm->etp : 1;
    /* an ep rank is etp consecutive GPUs; the ep ranks of an exchange are etp GPUs apart */
    if (cm->ep > 1) {
        cm->ep_nodes = group_nodes(layout, node, cm->ep, etp);
        cm->ep_group = comm_group_flat(cm->ep, cm->ep_nodes > 1);
    }
    if (etp > 1) cm->etp_group = comm_group_flat(etp, group_nodes(layout, node, etp, 1) > 1);
}

dp_status cost_model_set_dispatch(cost_model *cm, moe_dispatch d, dp_err *err)
{
    if (d != MOE_DISPATCH_ALLTOALL && !model_is_moe(&cm->model))
        return dp_fail(err, DP_ERR_INVALID, "--dispatcher %s: %s has no experts to dispatch to",
                       moe_dispatch_name(d), cm->model.name);
    cm->dispatch = d;
    return DP_OK;
}

dp_status cost_model_set_capacity(cost_model *cm, double capacity, dp_err *err)
{
    if (!(capacity >= 0) || !isfinite(capacity))
        return dp_fail(err, DP_ERR_INVALID, "--capacity-factor %g: a factor of 0 (dropless) or "
                       "more", capacity);
    if (capacity > 0 && !model_is_moe(&cm->model))
        return dp_fail(err, DP_ERR_INVALID, "--capacity-factor %g: %s has no experts to cap",
                       capacity, cm->model.name);
    cm->capacity = capacity;
    return DP_OK;
}

double cost_moe_dropped_share(const cost_model *cm, double tokens, int cp)
{
    if (!(cm->capacity > 0) || !cm->routing || !model_is_moe(&cm->model)) return 0;
    double per_gpu = tokens / (cp > 0 ? cp : cm->cp > 1 ? cm->cp : 1) / (cm->tp > 1 ? cm->tp : 1);
    return moe_dropped_share(cm->routing, per_gpu * cm->model.experts_per_token, cm->capacity);
}

/* The busiest rank's load over the mean from cm's table, uncapped. */
static double moe_table_imbalance(const cost_model *cm, double n)
{
    if (cm->ep <= 1 || !(n > 0)) return 1;
    double x = 4 * log2(n); /* the table's index */
    if (x <= 0) return cm->moe_imb[0];
    if (x >= COST_MOE_IMB_POINTS - 1) return cm->moe_imb[COST_MOE_IMB_POINTS - 1];
    int i = (int)x;
    double f = x - i; /* log-linear between the two points */
    return exp((1 - f) * log(cm->moe_imb[i]) + f * log(cm->moe_imb[i + 1]));
}

double cost_moe_imbalance(const cost_model *cm, double n)
{
    double imb = moe_table_imbalance(cm, n);
    return cm->capacity > 0 ? fmin(imb, cm->capacity) : imb;
}

dp_status cost_model_set_cp_auto(cost_model *cm, int cp, int alltoall, dp_err *err)
{
    if (!cm->ops->context_parallel)
        return dp_fail(err, DP_ERR_INVALID, "--cp auto prices each micro-batch at its own degree, "
                       "which needs the analytic cost model: a measured %s timed one degree"
                       "\nhint: --analytic", cm->ops->kind);
    if (alltoall)
        return dp_fail(err, DP_ERR_INVALID, "--cp auto runs the ring form: --cp-kind all-to-all "
                       "fixes the heads each GPU holds\nhint: --cp-kind ring");
    dp_status st = cost_model_set_cp(cm, cp, 0, err);
    if (st == DP_OK) cm->cp_auto = 1;
    return st;
}

void cost_model_set_attention(cost_model *cm, int flash, const attn_kernel *kernel)
{
    cm->flash_attn = flash;
    cm->attn = kernel ? kernel : cm->hw.gpu.attn;
}

dp_status cost_model_set_stack(cost_model *cm, software_stack s, int flash, const attn_kernel *kernel,
                               dp_err *err)
{
    if (s != STACK_MEGATRON_TE && !cm->ops->stacks)
        return dp_fail(err, DP_ERR_INVALID, "--stack %s prices the analytic model's kernels and "
                       "elementwise ops: a %s cost model has its own measured times\nhint: add "
                       "--analytic", stack_name(s), cm->ops->kind);
    cm->stack = s;
    cost_model_set_attention(cm, flash, kernel ? kernel : stack_attention_kernel(s, &cm->hw.gpu, NULL));
    return DP_OK;
}

dp_status cost_toy_parse(const char *text, cost_toy *out, dp_err *err)
{
    static const char *const FIELD[3] = {"F (forward)", "B (backward)", "W (weight gradients)"};
    double v[3] = {0, 0, 0};
    int n = 0;
    const char *p = text;
    for (;;) {
        char *end;
        errno = 0;
        double x = strtod(p, &end);
        if (n == 3 || end == p || errno || !isfinite(x) || x < 0 || x > 1e6 ||
            (*end != ',' && *end != '\0'))
            return dp_fail(err, DP_ERR_INVALID, "--toy-costs \"%s\": %s must be a number of ms "
                           "in [0, 1e6]; give F,B or F,B,W (e.g. 1,2,1)", text,
                           n < 3 ? FIELD[n] : "a fourth value is not allowed:");
        v[n++] = x;
        if (*end == '\0') break;
        p = end + 1;
    }
    if (n < 2)
        return dp_fail(err, DP_ERR_INVALID, "--toy-costs \"%s\": B (backward) is missing; give "
                       "F,B or F,B,W (e.g. 1,2,1)", text);
    /* the simulator's clock ticks in nanoseconds: a cost below one tick would time as nothing */
    if (!(v[0] >= COST_TOY_MIN_MS && v[1] >= COST_TOY_MIN_MS) || (v[2] > 0 && v[2] < COST_TOY_MIN_MS))
        return dp_fail(err, DP_ERR_INVALID, "--toy-costs \"%s\": F and B must be at least %g ms "
                       "(W 0 or at least that): the simulator's clock ticks in nanoseconds", text,
                       COST_TOY_MIN_MS);
    if (v[2] > v[1])
        return dp_fail(err, DP_ERR_INVALID, "--toy-costs \"%s\": W (%g ms) is the weight-gradient "
                       "share of the backward B (%g ms), so at most B", text, v[2], v[1]);
    out->on = 1;
    out->f_ms = v[0], out->b_ms = v[1], out->w_ms = v[2];
    return DP_OK;
}

double cost_toy_bwd_ms(const cost_toy *toy, recompute_mode rc)
{
    return toy->b_ms + (rc == RECOMPUTE_FULL ? toy->f_ms : 0);
}

double cost_toy_scale(const cost_toy *t, const cost_shape *s)
{
    return (double)s->mbs * ((double)s->enc_len + s->dec_len) / t->unit_tokens;
}

static const struct {
    const char *name;
    unsigned bit;
} OVERLAPS[] = {{"dp", COST_OVERLAP_DP},
               {"zero", COST_OVERLAP_ZERO},
               {"tp", COST_OVERLAP_TP},
               {"ep", COST_OVERLAP_EP}};
#define N_OVERLAPS (sizeof OVERLAPS / sizeof OVERLAPS[0])

int cost_overlap_parse(const char *text, unsigned *bits)
{
    if (strcmp(text, "none") == 0) return *bits = 0, 0;
    if (strcmp(text, "all") == 0)
        return *bits = COST_OVERLAP_DP | COST_OVERLAP_ZERO | COST_OVERLAP_TP | COST_OVERLAP_EP, 0;
    unsigned b = 0;
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, ","), i;
        for (i = 0; i < N_OVERLAPS; i++)
            if (n == strlen(OVERLAPS[i].name) && strncmp(p, OVERLAPS[i].name, n) == 0) break;
        if (i == N_OVERLAPS) return -1;
        b |= OVERLAPS[i].bit;
        p += n;
        if (*p == ',' && !*++p) return -1; /* a trailing comma */
    }
    if (p == text) return -1;
    *bits = b;
    return 0;
}

const char *cost_overlap_name(unsigned bits, char *buf, size_t cap)
{
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < N_OVERLAPS; i++)
        if (bits & OVERLAPS[i].bit && used < cap)
            used += (size_t)snprintf(buf + used, cap - used, "%s%s", used ? "," : "",
                                     OVERLAPS[i].name);
    if (!used) snprintf(buf, cap, "none");
    return buf;
}
