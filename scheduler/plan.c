#include "plan.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_util.h"
#include "../models/comm.h"
#include "../models/stack.h"

static const char *const OP_NAMES[OP_COUNT] = {"F",        "B",         "W",         "SEND_ACT",
                                               "RECV_ACT", "SEND_GRAD", "RECV_GRAD", "FREE"};

const char *plan_op_name(plan_op op)
{
    return OP_NAMES[op];
}

int plan_op_parse(const char *name, plan_op *op)
{
    for (int i = 0; i < OP_COUNT; i++)
        if (strcmp(name, OP_NAMES[i]) == 0) {
            *op = (plan_op)i;
            return 0;
        }
    return -1;
}

int plan_dtype_bytes(const char *name)
{
    static const struct {
        const char *name;
        int bytes;
    } T[] = {{"fp16", 2}, {"bf16", 2}, {"fp32", 4}, {"fp64", 8}};
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        if (strcmp(name, T[i].name) == 0) return T[i].bytes;
    return 0;
}

void plan_iter_init(plan_iter *it)
{
    memset(it, 0, sizeof *it);
    it->recompute = -1; /* the header's */
}

void plan_iter_release(plan_iter *it)
{
    if (!it) return;
    if (it->ranks)
        for (int r = 0; r < it->pp * it->dp; r++) free(it->ranks[r].ins);
    free(it->ranks);
    free(it->ids);
    free(it->lens);
    free(it->mb);
    free(it->per_stage);
    plan_iter_init(it);
}


void plan_mb_bind(plan_mb *m, double *v, int pp)
{
    m->fwd_ms = v, m->bwd_ms = v + pp, m->w_ms = v + 2 * pp;
    m->xfwd_ms = v + 3 * pp, m->xbwd_ms = v + 4 * pp;
    m->stored_mb = v + 5 * pp, m->peak_mb = v + 6 * pp;
}

dp_status plan_iter_alloc(plan_iter *it, int id, int pp, int dp, int n_mb, int n_ids)
{
    plan_iter_init(it);
    it->id = id;
    it->pp = pp;
    it->dp = dp;
    it->n_mb = n_mb;
    it->n_ids = n_ids;
    it->mb = calloc((size_t)(n_mb ? n_mb : 1), sizeof *it->mb);
    it->ids = calloc((size_t)(n_ids ? n_ids : 1), sizeof *it->ids);
    it->lens = calloc((size_t)(n_ids ? n_ids : 1) * 2, sizeof *it->lens);
    it->per_stage =
        calloc((size_t)(n_mb ? n_mb : 1) * PLAN_MB_ARRAYS * (size_t)pp, sizeof *it->per_stage);
    it->ranks = calloc((size_t)pp * (size_t)dp, sizeof *it->ranks);
    if (!it->mb || !it->ids || !it->lens || !it->per_stage || !it->ranks) return DP_ERR_NOMEM;
    for (int k = 0; k < n_mb; k++) {
        plan_mb *m = &it->mb[k];
        m->id = k;
        m->recompute = -1;
        plan_mb_bind(m, it->per_stage + (size_t)k * PLAN_MB_ARRAYS * (size_t)pp, pp);
    }
    for (int r = 0; r < pp * dp; r++) {
        it->ranks[r].stage = r % pp;
        it->ranks[r].replica = r / pp;
    }
    return DP_OK;
}

/* Weight-gradient share of a backward (ZB-H1's W). With dense FLOPs d and attention FLOPs a of
 * the forward, the backward does ~2d + 2a: input gradients d + 2a (attention has no weights),
 * weight gradients d; and what it reruns first (plan_machine.h pm_recompute), which is B's:
 * cost_rerun_shares' of d and a (selective: a, or under torchtitan's per-op policy its share of
 * d; full: d + a). So W = bwd * d / (2d + 2a + rerun), from the analytic FLOP counts of the
 * shape. */
static double w_fraction(const model_spec *m, const cost_shape *s, int tp, recompute_mode rc,
                         software_stack stack)
{
    double d = 0, a = 0, dd, aa;
    analytic_flops(m, COMP_ENCODER, s, tp, &dd, &aa);
    d += dd, a += aa;
    if (m->arch == ARCH_T5) {
        analytic_flops(m, COMP_DECODER, s, tp, &dd, &aa);
        d += dd, a += aa;
    }
    double dense, attn;
    cost_rerun_shares(m, stack, rc, tp, &dense, &attn);
    double rerun = dense * d + attn * a;
    return d + a > 0 ? d / (2 * d + 2 * a + rerun) : 0.5;
}

double plan_round(double v)
{
    return round(v * 1e6) / 1e6;
}

dp_status plan_mb_cost(plan_mb *m, int pp, const microbatch *src, const stage_model *sm,
                       mb_cost *scratch, dp_err *err)
{
    cost_shape s = mb_shape(src);
    dp_status st = stage_model_cost(sm, &s, scratch, err);
    if (st != DP_OK) return st;
    const cost_toy *toy = &sm->cm->toy;
    double wf = toy->on ? toy->w_ms / cost_toy_bwd_ms(toy, sm->cm->recompute)
                        : w_fraction(&sm->cm->model, &s, sm->cm->tp, sm->cm->recompute,
                                     sm->cm->stack);
    for (int d = 0; d < pp; d++) { /* as the plan file holds them: a replay runs the same plan */
        m->fwd_ms[d] = plan_round(scratch->fwd_ms[d]);
        m->bwd_ms[d] = plan_round(scratch->bwd_ms[d]);
        /* W: a share of the backward's compute; the exchange is B's */
        m->w_ms[d] = plan_round((scratch->bwd_ms[d] - scratch->xbwd_ms[d]) * wf);
        m->xfwd_ms[d] = plan_round(scratch->xfwd_ms[d]);
        m->xbwd_ms[d] = plan_round(scratch->xbwd_ms[d]);
        m->stored_mb[d] = plan_round(scratch->stored_mb[d]);
        m->peak_mb[d] = plan_round(scratch->peak_mb[d]);
    }
    return DP_OK;
}

dp_status plan_iter_from_mbs(plan_iter *it, int id, const mb_list *l, const stage_model *sm,
                             dp_err *err)
{
    int pp = sm->pp;
    if (plan_iter_alloc(it, id, pp, sm->dp, l->n_mb, l->n_ids) != DP_OK)
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    it->placement = sm->placement;
    memcpy(it->ids, l->ids, (size_t)l->n_ids * sizeof *it->ids);
    if (l->n_ids) memcpy(it->lens, l->lens, (size_t)l->n_ids * 2 * sizeof *it->lens);
    mb_cost *c = malloc(sizeof *c);
    if (!c) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    dp_status st = DP_OK;
    for (int k = 0; k < l->n_mb && st == DP_OK; k++) {
        const microbatch *src = &l->mb[k];
        plan_mb *m = &it->mb[k];
        m->first = src->first;
        m->n_samples = src->n_samples;
        m->mbs = src->mbs;
        m->enc_len = src->enc_len;
        m->dec_len = src->dec_len;
        m->enc_tokens = src->enc_tokens;
        m->dec_tokens = src->dec_tokens;
        m->replica = src->replica;
        m->varlen = src->varlen;
        m->cp = src->cp;
        st = plan_mb_cost(m, pp, src, sm, c, err);
        if (st != DP_OK) dp_err_prefix(err, "iteration %d, micro-batch %d", id, k);
    }
    free(c);
    it->has_objective = 1;
    it->obj_value_ms = l->obj_value_ms;
    it->obj_tmax_ms = l->obj_tmax_ms;
    it->obj_sum_ms = l->obj_sum_ms;
    return st;
}

dp_status plan_rank_push(plan_rank *r, plan_op op, int mb, int chunk, int peer, int64_t bytes)
{
    size_t cap = (size_t)r->cap;
    if (dp_grow((void **)&r->ins, &cap, (size_t)r->n + 1, sizeof *r->ins) != DP_OK)
        return DP_ERR_NOMEM;
    r->cap = (int)cap;
    r->ins[r->n++] = (plan_instr){op, mb, chunk, peer, bytes};
    return DP_OK;
}

int plan_op_is_send(plan_op op)
{
    return op == OP_SEND_ACT || op == OP_SEND_GRAD;
}

int plan_op_is_recv(plan_op op)
{
    return op == OP_RECV_ACT || op == OP_RECV_GRAD;
}

/* ---- JSON ------------------------------------------------------------------------------------ */

static cJSON *array_of(const double *v, int n)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(plan_round(v[i])));
    return a;
}

static cJSON *iter_json(const plan_iter *it)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", it->id);
    cJSON *mbs = cJSON_AddArrayToObject(o, "microbatches");
    for (int k = 0; k < it->n_mb; k++) {
        const plan_mb *m = &it->mb[k];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddNumberToObject(x, "id", m->id);
        cJSON *ids = cJSON_AddArrayToObject(x, "samples");
        for (int q = 0; q < m->n_samples; q++)
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(it->ids[m->first + q]));
        cJSON_AddNumberToObject(x, "mbs", m->mbs);
        cJSON_AddNumberToObject(x, "enc_len", m->enc_len);
        cJSON_AddNumberToObject(x, "dec_len", m->dec_len);
        cJSON_AddNumberToObject(x, "tokens", (double)(m->enc_tokens + m->dec_tokens));
        cJSON_AddNumberToObject(x, "padded_tokens",
                                (double)m->mbs * ((double)m->enc_len + m->dec_len));
        cJSON_AddNumberToObject(x, "enc_tokens", (double)m->enc_tokens);
        cJSON_AddNumberToObject(x, "dec_tokens", (double)m->dec_tokens);
        cJSON_AddNumberToObject(x, "replica", m->replica);
        if (m->varlen) {
            cJSON_AddStringToObject(x, "attention", "varlen");
            cJSON *lens = cJSON_AddArrayToObject(x, "seq_lens");
            for (int q = 0; q < m->n_samples; q++)
                cJSON_AddItemToArray(lens, cJSON_CreateNumber(it->lens[2 * (m->first + q)]));
            if (m->dec_len > 0) {
                cJSON *dl = cJSON_AddArrayToObject(x, "dec_lens");
                for (int q = 0; q < m->n_samples; q++)
                    cJSON_AddItemToArray(dl, cJSON_CreateNumber(it->lens[2 * (m->first + q) + 1]));
            }
        }
        if (m->recompute >= 0)
            cJSON_AddStringToObject(x, "recompute", recompute_name((recompute_mode)m->recompute));
        if (m->cp > 0) cJSON_AddNumberToObject(x, "cp", m->cp);
        cJSON *pred = cJSON_AddObjectToObject(x, "pred_ms");
        cJSON_AddItemToObject(pred, "fwd", array_of(m->fwd_ms, it->pp));
        cJSON_AddItemToObject(pred, "bwd", array_of(m->bwd_ms, it->pp));
        cJSON_AddItemToObject(pred, "w", array_of(m->w_ms, it->pp));
        int xchg = 0;
        for (int d = 0; d < it->pp; d++) xchg |= m->xfwd_ms[d] > 0 || m->xbwd_ms[d] > 0;
        if (xchg) { /* a MoE's token exchange: a dense model's plans stay as they were */
            cJSON_AddItemToObject(pred, "xchg_fwd", array_of(m->xfwd_ms, it->pp));
            cJSON_AddItemToObject(pred, "xchg_bwd", array_of(m->xbwd_ms, it->pp));
        }
        cJSON *mem = cJSON_AddObjectToObject(x, "mem_mb");
        cJSON_AddItemToObject(mem, "stored", array_of(m->stored_mb, it->pp));
        cJSON_AddItemToObject(mem, "peak", array_of(m->peak_mb, it->pp));
        cJSON_AddItemToArray(mbs, x);
    }
    cJSON *stages = cJSON_AddArrayToObject(o, "stages");
    for (int r = 0; r < it->pp * it->dp; r++) {
        const plan_rank *R = &it->ranks[r];
        cJSON *s = cJSON_CreateObject();
        cJSON_AddNumberToObject(s, "stage", R->stage);
        cJSON_AddNumberToObject(s, "replica", R->replica);
        cJSON *ins = cJSON_AddArrayToObject(s, "instructions");
        for (int i = 0; i < R->n; i++) {
            const plan_instr *x = &R->ins[i];
            cJSON *j = cJSON_CreateObject();
            cJSON_AddStringToObject(j, "op", OP_NAMES[x->op]);
            cJSON_AddNumberToObject(j, "mb", x->mb);
            if (x->chunk) cJSON_AddNumberToObject(j, "chunk", x->chunk);
            if (plan_op_is_send(x->op) || plan_op_is_recv(x->op)) {
                cJSON_AddNumberToObject(j, "peer", x->peer);
                cJSON_AddNumberToObject(j, "bytes", (double)x->bytes);
            }
            cJSON_AddItemToArray(ins, j);
        }
        cJSON_AddItemToArray(stages, s);
    }
    if (it->model_flops > 0) cJSON_AddNumberToObject(o, "model_flops", it->model_flops);
    if (it->recompute >= 0)
        cJSON_AddStringToObject(o, "recompute", recompute_name((recompute_mode)it->recompute));
    if (it->batching[0]) cJSON_AddStringToObject(o, "batching", it->batching);
    if (it->schedule[0]) cJSON_AddStringToObject(o, "schedule", it->schedule);
    if (it->has_objective) {
        cJSON *ob = cJSON_AddObjectToObject(o, "objective");
        cJSON_AddNumberToObject(ob, "value", it->obj_value_ms);
        cJSON_AddNumberToObject(ob, "tmax", it->obj_tmax_ms);
        cJSON_AddNumberToObject(ob, "sum", it->obj_sum_ms);
    }
    return o;
}

/* head with its "chunks" set and, right after it, "placement": "v" for a V (none for a loop): the
 * one place both are written. head is consumed; its members move into the object returned
 * (head itself where memory runs out). */
static cJSON *head_with_layout(cJSON *head, int chunks, int placement)
{
    cJSON *out = cJSON_CreateObject(), *x;
    if (!out) return head;
    while ((x = head->child) != NULL) {
        cJSON_DetachItemViaPointer(head, x);
        int is_chunks = strcmp(x->string, "chunks") == 0;
        if (is_chunks) {
            cJSON_AddNumberToObject(out, "chunks", chunks);
            if (placement == PLACEMENT_V) cJSON_AddStringToObject(out, "placement", "v");
        }
        if (is_chunks || strcmp(x->string, "placement") == 0)
            cJSON_Delete(x);
        else
            cJSON_AddItemToObject(out, x->string, x); /* (the key copied, then the old freed) */
    }
    cJSON_Delete(head);
    return out;
}

dp_status plan_writer_open(plan_writer *w, const char *path, const plan_header *h, dp_err *err)
{
    memset(w, 0, sizeof *w);
    w->path = path;
    dp_status st = out_open(&w->o, path, err);
    if (st != DP_OK) return st;
    w->fp = w->o.fp;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "version", 1);
    cJSON_AddStringToObject(o, "model", h->model);
    cJSON_AddStringToObject(o, "hw", h->hw);
    cJSON_AddNumberToObject(o, "pp", h->pp);
    cJSON_AddNumberToObject(o, "dp", h->dp);
    cJSON_AddNumberToObject(o, "tp", h->tp);
    if (h->tp > 1) cJSON_AddBoolToObject(o, "sp", h->sp);
    if (h->cp > 1) {
        cJSON_AddNumberToObject(o, "cp", h->cp);
        cJSON_AddStringToObject(o, "cp_kind", h->cp_alltoall ? "all-to-all" : "ring");
        if (h->cp_auto) cJSON_AddTrueToObject(o, "cp_auto");
    }
    cJSON_AddNumberToObject(o, "chunks", h->chunks); /* and "placement": head_with_layout */
    if (h->split.n > 0) {
        cJSON *lps = cJSON_AddArrayToObject(o, "layers_per_stage");
        for (int v = 0; v < h->split.n; v++)
            cJSON_AddItemToArray(lps, cJSON_CreateNumber(h->split.layers[v]));
    } else if (h->split.less_first || h->split.less_last) { /* the rule (placement.h) */
        cJSON_AddNumberToObject(o, "first_stage_less_layers", h->split.less_first);
        cJSON_AddNumberToObject(o, "last_stage_less_layers", h->split.less_last);
    }
    cJSON_AddNumberToObject(o, "zero", h->zero);
    if (h->shard_group > 0) cJSON_AddNumberToObject(o, "shard_group", h->shard_group);
    if (h->ep > 1) cJSON_AddNumberToObject(o, "ep", h->ep);
    if (h->etp > 1) cJSON_AddNumberToObject(o, "etp", h->etp);
    if (h->capacity > 0) cJSON_AddNumberToObject(o, "capacity_factor", h->capacity);
    if (h->dispatch != MOE_DISPATCH_ALLTOALL)
        cJSON_AddStringToObject(o, "dispatcher", moe_dispatch_name((moe_dispatch)h->dispatch));
    if (h->routing != MOE_ROUTE_UNIFORM) {
        char rn[48];
        cJSON_AddStringToObject(o, "routing", moe_routing_name((moe_route_kind)h->routing,
                                                                h->routing_alpha, rn, sizeof rn));
        if (h->routing == MOE_ROUTE_HISTOGRAM)
            cJSON_AddItemToObject(o, "routing_shares",
                                  cJSON_CreateDoubleArray(h->routing_shares, h->routing_n_shares));
    }
    cJSON_AddStringToObject(o, "recompute", recompute_policy_name(h->recompute));
    cJSON_AddStringToObject(o, "act_dtype", h->act_dtype[0] ? h->act_dtype : PLAN_ACT_DTYPE);
    if (h->textbook) cJSON_AddTrueToObject(o, "textbook");
    char ov[32];
    cJSON_AddStringToObject(o, "overlap", cost_overlap_name(h->overlap, ov, sizeof ov));
    if (h->precision >= 0) cJSON_AddStringToObject(o, "precision", precision_name(h->precision));
    cJSON_AddStringToObject(o, "grad_reduce", h->grad_bytes == 4 ? "fp32" : "16-bit");
    if (h->stack != STACK_MEGATRON_TE)
        cJSON_AddStringToObject(o, "stack", stack_name((software_stack)h->stack));
    if (h->model_json) cJSON_AddItemToObject(o, "model_spec", cJSON_Parse(h->model_json));
    if (h->hw_json) cJSON_AddItemToObject(o, "cluster_spec", cJSON_Parse(h->hw_json));
    cJSON_AddStringToObject(o, "schedule", h->schedule);
    cJSON_AddStringToObject(o, "batching", h->batching);
    cJSON *r = cJSON_AddObjectToObject(o, "rules");
    cJSON_AddNumberToObject(r, "global_tokens", (double)h->rules.global_tokens);
    cJSON_AddNumberToObject(r, "max_seqlen", h->rules.max_seqlen);
    cJSON_AddNumberToObject(r, "max_dec_seqlen", h->rules.max_dec_seqlen);
    cJSON_AddNumberToObject(r, "dec_extra", h->rules.dec_extra);
    cJSON_AddNumberToObject(r, "pad_multiple", h->rules.pad_multiple);
    cJSON_AddNumberToObject(r, "min_padded", h->rules.min_padded);
    w->head = head_with_layout(o, h->chunks, h->placement); /* written with the first iteration: a
                                                               * chooser may set its layout first */
    return DP_OK;
}

dp_status plan_writer_set_layout(plan_writer *w, int chunks, int placement, dp_err *err)
{
    if (!w->head)
        return dp_fail(err, DP_ERR_INVALID, "%s: the plan's header is written already: its "
                       "layout is set before the first iteration", w->path);
    w->head = head_with_layout(w->head, chunks, placement);
    return DP_OK;
}

/* The header, once: before the first iteration or the close. */
static dp_status write_head(plan_writer *w, dp_err *err)
{
    if (!w->head) return DP_OK;
    char *text = cJSON_PrintUnformatted(w->head);
    cJSON_Delete(w->head);
    w->head = NULL;
    if (!text) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    size_t len = strlen(text);
    text[len - 1] = '\0'; /* drop the closing brace: iterations follow */
    fprintf(w->fp, "%s,\n\"iterations\": [\n", text);
    w->bytes = len + 20;
    free(text);
    return DP_OK; /* a failed write is caught by plan_writer_close */
}

dp_status plan_writer_add(plan_writer *w, const plan_iter *it, dp_err *err)
{
    dp_status st = write_head(w, err);
    if (st != DP_OK) return st;
    cJSON *o = iter_json(it);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!text) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    w->bytes += strlen(text) + 2;
    if (w->bytes + 8 > JSON_MAX_BYTES) { /* what sim --plan and dprun would refuse to read */
        free(text);
        return dp_fail(err, DP_ERR_INVALID, "%s: the plan grows past %u MB at iteration %d, more "
                       "than sim --plan and dprun read\nhint: fewer --iterations per plan file",
                       w->path, JSON_MAX_BYTES >> 20, it->id);
    }
    int bad = fprintf(w->fp, "%s%s", w->count ? ",\n" : "", text) < 0;
    free(text);
    w->count++;
    return bad ? dp_fail(err, DP_ERR_IO, "%s: write failed: %s", w->path, strerror(errno)) : DP_OK;
}

dp_status plan_writer_close(plan_writer *w, dp_err *err)
{
    dp_status st = write_head(w, err);
    if (st != DP_OK) {
        plan_writer_abort(w);
        return st;
    }
    fprintf(w->fp, "\n]}\n");
    w->fp = NULL;
    return out_commit(&w->o, err);
}

void plan_writer_abort(plan_writer *w)
{
    cJSON_Delete(w->head);
    w->head = NULL;
    out_abort(&w->o);
    w->fp = NULL;
}

/* ---- reading --------------------------------------------------------------------------------- */

static dp_status read_doubles(const cJSON *arr, int n, double *out, const char *what,
                              const char *name, int it, int k, dp_err *err)
{
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n)
        return dp_fail(err, DP_ERR_PARSE,
                       "%s: iterations[%d].microbatches[%d].%s must be an array of %d numbers",
                       name, it, k, what, n);
    int i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < 0)
            return dp_fail(err, DP_ERR_PARSE,
                           "%s: iterations[%d].microbatches[%d].%s[%d] must be a number >= 0",
                           name, it, k, what, i);
        out[i++] = v->valuedouble;
    }
    return DP_OK;
}

/* A micro-batch's "seq_lens" or "dec_lens" (arr, NULL: absent, left 0): one length per sample in
 * 0..len, together at most the mbs x len tensor; written every second int32 from out. */
static dp_status read_lens(const cJSON *arr, const char *what, const plan_mb *x, int len,
                           int32_t *out, const char *name, const char *where, int k, dp_err *err)
{
    if (!arr) return DP_OK;
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != x->n_samples)
        return dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].%s must hold a length per "
                       "sample (%d)", name, where, k, what, x->n_samples);
    int i = 0;
    int64_t sum = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, arr)
    {
        if (!cJSON_IsNumber(v) || v->valuedouble != (double)(int)v->valuedouble ||
            v->valuedouble < 0 || v->valuedouble > len)
            return dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].%s[%d] must be a whole "
                           "number of tokens from 0 to the micro-batch's length %d", name, where,
                           k, what, i, len);
        out[2 * i++] = (int32_t)v->valuedouble;
        sum += (int64_t)v->valuedouble;
    }
    if (sum > (int64_t)x->mbs * len)
        return dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].%s adds up to %lld tokens, more "
                       "than the %d x %d tensor holds", name, where, k, what, (long long)sum,
                       x->mbs, len);
    return DP_OK;
}

static dp_status parse_iter(const cJSON *o, int idx, const plan_header *h, const char *name,
                            plan_iter *it, dp_err *err)
{
    dp_status st = DP_OK;
    char where[96];
    snprintf(where, sizeof where, "iterations[%d]", idx);
    const cJSON *mbs = cJSON_GetObjectItemCaseSensitive(o, "microbatches");
    const cJSON *stages = cJSON_GetObjectItemCaseSensitive(o, "stages");
    if (!cJSON_IsObject(o) || !cJSON_IsArray(mbs) || !cJSON_IsArray(stages))
        return dp_fail(err, DP_ERR_PARSE, "%s: %s needs \"microbatches\" and \"stages\" arrays",
                       name, where);
    int n_mb = cJSON_GetArraySize(mbs), n_ids = 0, id;
    const cJSON *m;
    cJSON_ArrayForEach(m, mbs)
    {
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(m, "samples");
        if (!cJSON_IsArray(s))
            return dp_fail(err, DP_ERR_PARSE, "%s: %s: a micro-batch lacks \"samples\"", name,
                           where);
        n_ids += cJSON_GetArraySize(s);
    }
    TRY(json_int(o, "id", name, 0, 1 << 30, idx, &id, err));
    if (plan_iter_alloc(it, id, h->pp, h->dp, n_mb, n_ids) != DP_OK)
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    int k = 0, at = 0;
    cJSON_ArrayForEach(m, mbs)
    {
        plan_mb *x = &it->mb[k];
        int mid;
        TRY(json_int(m, "id", name, 0, 1 << 30, JSON_REQUIRED, &mid, err));
        if (mid != k) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].id is %d, expected %d", name,
                         where, k, mid, k);
            goto out;
        }
        TRY(json_int(m, "mbs", name, 1, 1 << 24, JSON_REQUIRED, &x->mbs, err));
        TRY(json_int(m, "enc_len", name, 1, 1 << 24, JSON_REQUIRED, &x->enc_len, err));
        TRY(json_int(m, "dec_len", name, 0, 1 << 24, 0, &x->dec_len, err));
        TRY(json_int(m, "replica", name, 0, h->dp - 1, 0, &x->replica, err));
        double et = 0, dt = 0;
        TRY(json_double(m, "enc_tokens", name, 0, 1e15, 0, 0, &et, err));
        TRY(json_double(m, "dec_tokens", name, 0, 1e15, 0, 0, &dt, err));
        int split = et > 0 || dt > 0; /* else an older plan's total, read as the encoder's */
        double total = -1, padded = -1;
        TRY(json_double(m, "tokens", name, 0, 1e15, 0, -1, &total, err));
        TRY(json_double(m, "padded_tokens", name, 0, 1e15, 0, -1, &padded, err));
        if (!split && total > 0) et = total;
        /* the summaries the writer adds must say what the fields they sum say */
        if (split && total >= 0 && total != et + dt) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].tokens is %.0f, but "
                         "enc_tokens + dec_tokens is %.0f", name, where, k, total, et + dt);
            goto out;
        }
        if (padded >= 0 && padded != (double)x->mbs * ((double)x->enc_len + x->dec_len)) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].padded_tokens is %.0f, but "
                         "mbs x (enc_len + dec_len) is %.0f", name, where, k, padded,
                         (double)x->mbs * ((double)x->enc_len + x->dec_len));
            goto out;
        }
        x->enc_tokens = (int64_t)et;
        x->dec_tokens = (int64_t)dt;
        const cJSON *attn = cJSON_GetObjectItemCaseSensitive(m, "attention");
        if (attn && (!cJSON_IsString(attn) || (strcmp(attn->valuestring, "varlen") != 0 &&
                                               strcmp(attn->valuestring, "rows") != 0))) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].attention must be \"varlen\" "
                         "or \"rows\"", name, where, k);
            goto out;
        }
        x->varlen = attn && strcmp(attn->valuestring, "varlen") == 0;
        const cJSON *mode = cJSON_GetObjectItemCaseSensitive(m, "recompute");
        recompute_mode rc;
        if (mode && (!cJSON_IsString(mode) || recompute_parse(mode->valuestring, &rc) != 0)) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].recompute must be \"none\", "
                         "\"selective\" or \"full\"", name, where, k);
            goto out;
        }
        x->recompute = mode ? (int)rc : -1;
        TRY(json_int(m, "cp", name, 1, 1024, 0, &x->cp, err));
        if (h->cp_auto && (x->cp == 0 || h->cp % x->cp)) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].cp must be a divisor of the "
                         "plan's cp %d (the context-parallel group it runs in), and is %s%d", name,
                         where, k, h->cp, x->cp ? "" : "missing: ", x->cp);
            goto out;
        }
        if (!h->cp_auto && x->cp > 0) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].cp: a micro-batch names its "
                         "own degree only in a \"cp_auto\" plan", name, where, k);
            goto out;
        }
        const cJSON *s = cJSON_GetObjectItemCaseSensitive(m, "samples"), *v;
        x->first = at;
        cJSON_ArrayForEach(v, s)
        {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble > INT32_MAX) {
                st = dp_fail(err, DP_ERR_PARSE, "%s: %s.microbatches[%d].samples holds a bad id",
                             name, where, k);
                goto out;
            }
            it->ids[at++] = (int32_t)v->valuedouble;
        }
        x->n_samples = at - x->first;
        for (int side = 0; side < 2 && st == DP_OK; side++)
            st = read_lens(cJSON_GetObjectItemCaseSensitive(m, side ? "dec_lens" : "seq_lens"),
                           side ? "dec_lens" : "seq_lens", x, side ? x->dec_len : x->enc_len,
                           it->lens + 2 * x->first + side, name, where, k, err);
        if (st != DP_OK) goto out;
        const cJSON *pred = cJSON_GetObjectItemCaseSensitive(m, "pred_ms");
        const cJSON *mem = cJSON_GetObjectItemCaseSensitive(m, "mem_mb");
        TRY(read_doubles(cJSON_GetObjectItemCaseSensitive(pred, "fwd"), h->pp, x->fwd_ms,
                         "pred_ms.fwd", name, idx, k, err));
        TRY(read_doubles(cJSON_GetObjectItemCaseSensitive(pred, "bwd"), h->pp, x->bwd_ms,
                         "pred_ms.bwd", name, idx, k, err));
        if (cJSON_GetObjectItemCaseSensitive(pred, "w"))
            TRY(read_doubles(cJSON_GetObjectItemCaseSensitive(pred, "w"), h->pp, x->w_ms,
                             "pred_ms.w", name, idx, k, err));
        static const char *const xchg[2] = {"xchg_fwd", "xchg_bwd"};
        for (int q = 0; q < 2; q++) {
            char field[32];
            snprintf(field, sizeof field, "pred_ms.%s", xchg[q]);
            if (cJSON_GetObjectItemCaseSensitive(pred, xchg[q]))
                TRY(read_doubles(cJSON_GetObjectItemCaseSensitive(pred, xchg[q]), h->pp,
                                 q ? x->xbwd_ms : x->xfwd_ms, field, name, idx, k, err));
        }
        if (mem) {
            TRY(read_doubles(cJSON_GetObjectItemCaseSensitive(mem, "stored"), h->pp, x->stored_mb,
                             "mem_mb.stored", name, idx, k, err));
            TRY(read_doubles(cJSON_GetObjectItemCaseSensitive(mem, "peak"), h->pp, x->peak_mb,
                             "mem_mb.peak", name, idx, k, err));
        }
        k++;
    }
    if (cJSON_GetArraySize(stages) != h->pp * h->dp) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: %s has %d stage lists, pp x dp = %d", name, where,
                     cJSON_GetArraySize(stages), h->pp * h->dp);
        goto out;
    }
    const cJSON *sj;
    int seen = 0;
    cJSON_ArrayForEach(sj, stages)
    {
        int stage, replica;
        TRY(json_int(sj, "stage", name, 0, h->pp - 1, JSON_REQUIRED, &stage, err));
        TRY(json_int(sj, "replica", name, 0, h->dp - 1, 0, &replica, err));
        plan_rank *R = &it->ranks[replica * h->pp + stage];
        if (R->ins || R->n) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: %s lists stage %d (replica %d) twice", name,
                         where, stage, replica);
            goto out;
        }
        const cJSON *ins = cJSON_GetObjectItemCaseSensitive(sj, "instructions"), *x;
        if (!cJSON_IsArray(ins)) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: %s stage %d lacks \"instructions\"", name, where,
                         stage);
            goto out;
        }
        int i = 0;
        cJSON_ArrayForEach(x, ins)
        {
            const cJSON *op = cJSON_GetObjectItemCaseSensitive(x, "op");
            plan_op o2;
            if (!cJSON_IsString(op) || plan_op_parse(op->valuestring, &o2) != 0) {
                st = dp_fail(err, DP_ERR_PARSE,
                             "%s: %s stage %d instruction %d: \"op\" must be one of F, B, W, "
                             "SEND_ACT, RECV_ACT, SEND_GRAD, RECV_GRAD, FREE",
                             name, where, stage, i);
                goto out;
            }
            int mb, chunk, peer;
            double bytes;
            TRY(json_int(x, "mb", name, 0, n_mb > 0 ? n_mb - 1 : 0, JSON_REQUIRED, &mb, err));
            TRY(json_int(x, "chunk", name, 0, h->chunks - 1, 0, &chunk, err));
            TRY(json_int(x, "peer", name, 0, h->pp - 1, 0, &peer, err));
            TRY(json_double(x, "bytes", name, 0, 1e18, 0, 0, &bytes, err));
            if (!(plan_op_is_send(o2) || plan_op_is_recv(o2))) peer = -1;
            if (plan_rank_push(R, o2, mb, chunk, peer, (int64_t)bytes) != DP_OK) {
                st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
                goto out;
            }
            i++;
        }
        seen++;
    }
    (void)seen;
    TRY(json_double(o, "model_flops", name, 0, 1e30, 0, 0, &it->model_flops, err));
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(o, "recompute");
    recompute_mode mode = RECOMPUTE_NONE;
    if (rc && (!cJSON_IsString(rc) || recompute_parse(rc->valuestring, &mode) != 0)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: %s: \"recompute\" must be \"none\", \"selective\" or "
                     "\"full\" (rule: known names)", name, where);
        goto out;
    }
    it->recompute = rc ? (int)mode : -1;
    it->placement = h->placement;
    const cJSON *bt = cJSON_GetObjectItemCaseSensitive(o, "batching");
    if (bt && (!cJSON_IsString(bt) || !batcher_find(bt->valuestring))) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: %s: \"batching\" must name a batching", name, where);
        goto out;
    }
    snprintf(it->batching, sizeof it->batching, "%s", bt ? bt->valuestring : "");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(o, "schedule"); /* (plan_check: known) */
    if (sc && (!cJSON_IsString(sc) || !sc->valuestring[0] ||
               strlen(sc->valuestring) >= sizeof it->schedule)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: %s: \"schedule\" must name a schedule", name, where);
        goto out;
    }
    snprintf(it->schedule, sizeof it->schedule, "%s", sc ? sc->valuestring : "");
    const cJSON *ob = cJSON_GetObjectItemCaseSensitive(o, "objective");
    if (cJSON_IsObject(ob)) {
        it->has_objective = 1;
        TRY(json_double(ob, "value", name, 0, 1e18, 0, 0, &it->obj_value_ms, err));
        TRY(json_double(ob, "tmax", name, 0, 1e18, 0, 0, &it->obj_tmax_ms, err));
        TRY(json_double(ob, "sum", name, 0, 1e18, 0, 0, &it->obj_sum_ms, err));
    }
out:
    return st;
}

dp_status plan_parse(const char *text, const char *name, plan *p, dp_err *err)
{
    memset(p, 0, sizeof *p);
    cJSON *root = NULL;
    dp_status st = json_parse_object(text, name, &root, err);
    if (st != DP_OK) return st;
    plan_header *h = &p->h;
    int version;
    TRY(json_int(root, "version", name, 1, 1, JSON_REQUIRED, &version, err));
    TRY(json_int(root, "pp", name, 1, STAGE_MAX, JSON_REQUIRED, &h->pp, err));
    TRY(json_int(root, "dp", name, 1, REPLICA_MAX, 1, &h->dp, err));
    TRY(json_int(root, "tp", name, 1, 4096, 1, &h->tp, err));
    TRY(json_bool(root, "sp", name, 1, &h->sp, err));
    h->sp = h->sp && h->tp > 1;
    TRY(json_int(root, "cp", name, 1, 1024, 1, &h->cp, err));
    TRY(json_choice(root, "cp_kind", name, "ring", "all-to-all", &h->cp_alltoall, err));
    TRY(json_bool(root, "cp_auto", name, 0, &h->cp_auto, err));
    if (h->cp_auto && (h->cp < 2 || h->cp_alltoall)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: \"cp_auto\" needs a group (\"cp\" of 2 or more) "
                     "in the ring form (\"cp_kind\": \"ring\")", name);
        goto out;
    }
    TRY(json_int(root, "chunks", name, 1, 64, 1, &h->chunks, err));
    TRY(json_choice(root, "placement", name, "loop", "v", &h->placement, err));
    const cJSON *lps = cJSON_GetObjectItemCaseSensitive(root, "layers_per_stage");
    h->split.n = 0;
    if (lps) {
        int nv = h->pp * h->chunks;
        if (!cJSON_IsArray(lps) || cJSON_GetArraySize(lps) != nv || nv > PLACEMENT_SPLIT_MAX) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: \"layers_per_stage\" must list the layers of "
                         "each of the pp x chunks = %d virtual stages", name, nv);
            goto out;
        }
        const cJSON *v;
        cJSON_ArrayForEach(v, lps)
        {
            if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
                v->valuedouble > 1 << 20) {
                st = dp_fail(err, DP_ERR_PARSE, "%s: \"layers_per_stage\"[%d] must be a whole "
                             "number of layers", name, h->split.n);
                goto out;
            }
            h->split.layers[h->split.n++] = (int)v->valuedouble;
        }
    }
    TRY(json_int(root, "first_stage_less_layers", name, 0, 1 << 20, 0, &h->split.less_first, err));
    TRY(json_int(root, "last_stage_less_layers", name, 0, 1 << 20, 0, &h->split.less_last, err));
    if (h->split.n > 0 && (h->split.less_first || h->split.less_last)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: \"layers_per_stage\" lists the layers; "
                     "\"first_stage_less_layers\" and \"last_stage_less_layers\" give them by a "
                     "rule instead: one or the other", name);
        goto out;
    }
    TRY(json_int(root, "zero", name, 0, 3, 0, &h->zero, err));
    TRY(json_int(root, "shard_group", name, 0, 1 << 20, 0, &h->shard_group, err));
    TRY(json_int(root, "ep", name, 1, MOE_EP_MAX, 1, &h->ep, err));
    TRY(json_int(root, "etp", name, 1, MOE_EP_MAX, 1, &h->etp, err));
    TRY(json_double(root, "capacity_factor", name, 0, 1000, 0, 0, &h->capacity, err));
    const cJSON *di = cJSON_GetObjectItemCaseSensitive(root, "dispatcher");
    moe_dispatch dk = MOE_DISPATCH_ALLTOALL;
    if (di && (!cJSON_IsString(di) || moe_dispatch_parse(di->valuestring, &dk) != 0)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: \"dispatcher\" must be \"alltoall\" or \"deepep\" "
                     "(what --dispatcher reads)", name);
        goto out;
    }
    h->dispatch = (int)dk;
    const cJSON *ro = cJSON_GetObjectItemCaseSensitive(root, "routing");
    moe_route_kind rk = MOE_ROUTE_UNIFORM;
    h->routing_alpha = 0;
    int hist = ro && cJSON_IsString(ro) && strcmp(ro->valuestring, "histogram") == 0;
    if (ro && !hist &&
        (!cJSON_IsString(ro) || moe_routing_parse(ro->valuestring, &rk, &h->routing_alpha) != 0)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: \"routing\" must be \"uniform\", \"even\", "
                     "\"skewed:ALPHA\" (what --routing reads) or \"histogram\"", name);
        goto out;
    }
    h->routing = hist ? MOE_ROUTE_HISTOGRAM : (int)rk;
    h->routing_n_shares = 0;
    const cJSON *shares = cJSON_GetObjectItemCaseSensitive(root, "routing_shares"), *share;
    if (hist && (!cJSON_IsArray(shares) || cJSON_GetArraySize(shares) != h->ep)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: a \"histogram\" routing needs \"routing_shares\", "
                     "one share for each of the \"ep\" %d ranks", name, h->ep);
        goto out;
    }
    if (hist)
        cJSON_ArrayForEach(share, shares)
        {
            if (!cJSON_IsNumber(share) || !(share->valuedouble >= 0 && share->valuedouble <= 1)) {
                st = dp_fail(err, DP_ERR_PARSE, "%s: \"routing_shares\"[%d] must be a share in "
                             "[0, 1]", name, h->routing_n_shares);
                goto out;
            }
            h->routing_shares[h->routing_n_shares++] = share->valuedouble;
        }
    TRY(json_bool(root, "textbook", name, 0, &h->textbook, err));
    const cJSON *ov = cJSON_GetObjectItemCaseSensitive(root, "overlap");
    h->overlap = COST_OVERLAP_DEFAULT; /* plans written before it was recorded */
    if (ov && (!cJSON_IsString(ov) || cost_overlap_parse(ov->valuestring, &h->overlap) != 0)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: \"overlap\" must be \"none\", \"all\" or a list of "
                     "dp, zero, tp (what --overlap reads)", name);
        goto out;
    }
    const cJSON *pr = cJSON_GetObjectItemCaseSensitive(root, "precision");
    train_precision prec = PRECISION_BF16;
    if (pr && (!cJSON_IsString(pr) || precision_parse(pr->valuestring, &prec) != 0)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: \"precision\" must be \"bf16\", \"fp16\" or "
                     "\"fp8\" (what --precision reads)", name);
        goto out;
    }
    h->precision = pr ? (int)prec : -1; /* older plans: the model's default */
    int grad32;
    TRY(json_choice(root, "grad_reduce", name, "16-bit", "fp32", &grad32, err));
    h->grad_bytes = grad32 ? 4 : 2;
    const cJSON *sk = cJSON_GetObjectItemCaseSensitive(root, "stack");
    software_stack stack = STACK_MEGATRON_TE;
    if (sk && (!cJSON_IsString(sk) || stack_parse(sk->valuestring, &stack) != 0)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: \"stack\" must be one of %s (what --stack reads)",
                     name, stack_names());
        goto out;
    }
    h->stack = (int)stack;
    static const struct {
        const char *key;
        size_t off, cap;
    } strs[] = {{"model", offsetof(plan_header, model), 64},
                {"hw", offsetof(plan_header, hw), 64},
                {"schedule", offsetof(plan_header, schedule), 32},
                {"batching", offsetof(plan_header, batching), 32},
                {"act_dtype", offsetof(plan_header, act_dtype), 8}};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, strs[i].key);
        snprintf((char *)h + strs[i].off, strs[i].cap, "%s", cJSON_IsString(v) ? v->valuestring : "");
    }
    const cJSON *rc = cJSON_GetObjectItemCaseSensitive(root, "recompute");
    h->recompute = -1;
    if (rc && (!cJSON_IsString(rc) || recompute_policy_parse(rc->valuestring, &h->recompute) != 0 ||
               h->recompute == RECOMPUTE_POLICY_FASTEST)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: \"recompute\" must be \"none\", \"selective\", \"full\", "
                     "\"dynamic\" or \"mixed\" (rule: known names)", name);
        goto out;
    }
    static const char *const specs[2] = {"model_spec", "cluster_spec"};
    for (int k = 0; k < 2; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, specs[k]);
        if (!v) continue;
        char *spec = cJSON_IsObject(v) ? cJSON_PrintUnformatted(v) : NULL;
        if (!spec) {
            st = dp_fail(err, DP_ERR_PARSE, "%s: \"%s\" must be an object", name, specs[k]);
            goto out;
        }
        *(k ? &h->hw_json : &h->model_json) = spec;
    }
    if (!h->act_dtype[0]) snprintf(h->act_dtype, sizeof h->act_dtype, "%s", PLAN_ACT_DTYPE);
    h->act_elem_bytes = plan_dtype_bytes(h->act_dtype);
    if (h->act_elem_bytes != 2) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: \"act_dtype\" \"%s\": the plan's activations must "
                     "be fp16 or bf16", name, h->act_dtype);
        goto out;
    }
    batch_rules_default(&h->rules, ARCH_GPT);
    const cJSON *rules = cJSON_GetObjectItemCaseSensitive(root, "rules");
    if (cJSON_IsObject(rules)) {
        double gt;
        TRY(json_double(rules, "global_tokens", name, 1, 1e15, 0, 65536, &gt, err));
        h->rules.global_tokens = (int64_t)gt;
        TRY(json_int(rules, "max_seqlen", name, 1, 1 << 24, 2048, &h->rules.max_seqlen, err));
        TRY(json_int(rules, "max_dec_seqlen", name, 0, 1 << 24, 512, &h->rules.max_dec_seqlen, err));
    }
    const cJSON *its = cJSON_GetObjectItemCaseSensitive(root, "iterations");
    if (!cJSON_IsArray(its)) {
        st = dp_fail(err, DP_ERR_PARSE, "%s: missing array \"iterations\"", name);
        goto out;
    }
    p->n_it = cJSON_GetArraySize(its);
    p->it = calloc((size_t)(p->n_it ? p->n_it : 1), sizeof *p->it);
    if (!p->it) {
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory");
        goto out;
    }
    const cJSON *o;
    int i = 0;
    cJSON_ArrayForEach(o, its)
    {
        st = parse_iter(o, i, h, name, &p->it[i], err);
        i++;
        if (st != DP_OK) break;
    }
out:
    cJSON_Delete(root);
    if (st != DP_OK) plan_release(p);
    return st;
}

dp_status plan_read(const char *path, plan *p, dp_err *err)
{
    char *text = NULL;
    dp_status st = json_slurp(path, &text, err);
    if (st == DP_OK) st = plan_parse(text, path, p, err);
    free(text);
    return st;
}

void plan_release(plan *p)
{
    if (!p) return;
    for (int i = 0; i < p->n_it; i++) plan_iter_release(&p->it[i]);
    free(p->it);
    free(p->h.model_json);
    free(p->h.hw_json);
    memset(p, 0, sizeof *p);
}

dp_status plan_model(const plan *p, model_spec *m, dp_err *err)
{
    if (p->h.model_json) return model_parse_json(p->h.model_json, "the plan's model_spec", m, err);
    return model_resolve(p->h.model, m, err);
}

dp_status plan_cluster(const plan *p, cluster_spec *c, dp_err *err)
{
    if (p->h.hw_json) return cluster_parse_json(p->h.hw_json, "the plan's cluster_spec", c, err);
    return cluster_resolve(p->h.hw, c, err);
}

static int is_pass(plan_op op)
{
    return op == OP_F || op == OP_B || op == OP_W;
}

dp_status plan_iter_check_lockstep(const plan_iter *it, int zero, int experts_span,
                                   const char *where, dp_err *err)
{
    if (!mb_replicas_lockstep(zero, it->dp, experts_span)) return DP_OK; /* none to keep in step */
    char meet[120];
    if (zero >= 2) snprintf(meet, sizeof meet, "ZeRO-%d over %d replicas, whose collectives meet "
                            "in order (FSDP's ranks step together)", zero, it->dp);
    else snprintf(meet, sizeof meet, "%d replicas whose experts exchange tokens across them (every "
                  "MoE layer's all-to-all meets in order)", it->dp);
    for (int st = 0; st < it->pp; st++) {
        const plan_rank *a = &it->ranks[st];
        int na = 0;
        for (int q = 0; q < a->n; q++) na += is_pass(a->ins[q].op);
        for (int r = 1; r < it->dp; r++) {
            const plan_rank *b = &it->ranks[r * it->pp + st];
            int nb = 0, qa = 0, differ = -1;
            for (int qb = 0; qb < b->n; qb++) {
                if (!is_pass(b->ins[qb].op)) continue;
                while (qa < a->n && !is_pass(a->ins[qa].op)) qa++;
                if (differ < 0 && (qa >= a->n || a->ins[qa].op != b->ins[qb].op ||
                                   a->ins[qa].chunk != b->ins[qb].chunk))
                    differ = nb;
                nb++, qa++;
            }
            if (differ < 0 && na == nb) continue;
            return dp_fail(err, DP_ERR_UNSUPPORTED, "%s: %s, and in iteration %d stage %d "
                           "replica 0 runs %d forwards and backwards, replica %d %d, %s: running "
                           "it would hang or measure another layout\nhint: %splan it again with "
                           "this dpsim: it gives every replica as many micro-batches where a "
                           "global batch has a sample for each", where, meet, it->id, st, na, r,
                           nb, na == nb ? "in another order" : "a different count",
                           zero >= 2 ? "--zero 1, or " : "");
        }
    }
    return DP_OK;
}
