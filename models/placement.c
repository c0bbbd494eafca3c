/* placement.c — what each virtual stage runs and what its transfers carry (placement.h). */
#include "placement.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Part i of n items split over k parts as evenly as possible (the first n mod k get one more). */
static int share(int n, int k, int i)
{
    return n / k + (i < n % k ? 1 : 0);
}

/* The items of parts 0 .. i-1 of share's split: sum of share(n, k, j) for j < i. */
static int shares_before(int n, int k, int i)
{
    return i * (n / k) + (i < n % k ? i : n % k);
}

int placement_vstage(placement_kind k, int stage, int chunk, int pp)
{
    return chunk * pp + (k == PLACEMENT_V && chunk % 2 ? pp - 1 - stage : stage);
}

int placement_device(placement_kind k, int v, int pp)
{
    int c = v / pp, r = v % pp;
    return k == PLACEMENT_V && c % 2 ? pp - 1 - r : r;
}

placement_roles placement_device_roles(placement_kind k, int device, int pp, int chunks)
{
    placement_roles r = {placement_device(k, 0, pp) == device,
                         placement_device(k, pp * chunks - 1, pp) == device};
    return r;
}

stage_placement placement_stage(const model_spec *m, const pipeline_split *split, int v, int nv)
{
    stage_placement p = {0};
    p.embedding = v == 0;
    p.head = v == nv - 1;
    if (m->arch == ARCH_GPT) {
        if (split && split->n == nv) { /* as listed: at most PLACEMENT_SPLIT_MAX stages */
            p.enc_layers = split->layers[v];
            for (int u = 0; u < v; u++) p.first_layer += split->layers[u];
        } else { /* the rule (placement.h): even over the layers and the ends' stand-ins */
            int a = split ? split->less_first : 0, b = split ? split->less_last : 0;
            int all = m->enc_layers + a + b;
            p.enc_layers = share(all, nv, v) - (v == 0 ? a : 0) - (v == nv - 1 ? b : 0);
            p.first_layer = shares_before(all, nv, v) - (v > 0 ? a : 0);
        }
        return p;
    }
    if (nv == 1) { /* T5 on one stage: the whole model */
        p.enc_layers = m->enc_layers, p.dec_layers = m->dec_layers;
        return p;
    }
    int enc_stages = nv / 2, dec_stages = nv - enc_stages;
    if (v < enc_stages) {
        p.enc_layers = share(m->enc_layers, enc_stages, v);
        p.first_layer = shares_before(m->enc_layers, enc_stages, v);
    } else {
        p.dec_layers = share(m->dec_layers, dec_stages, v - enc_stages);
        p.first_layer = shares_before(m->dec_layers, dec_stages, v - enc_stages);
        p.decoder = 1;
        p.first_decoder = v == enc_stages;
    }
    return p;
}

double placement_act_elems(const model_spec *m, int v, int nv, int mbs, int enc_len, int dec_len)
{
    double unit = (double)mbs * m->hidden;
    if (m->arch == ARCH_GPT || nv == 1) return unit * enc_len;
    if (v < nv / 2) return unit * enc_len;     /* an encoder stage: its hidden state (the last:
                                                * the encoder output) */
    return unit * ((double)dec_len + enc_len); /* decoder hidden state + the encoder output */
}

placement_wire placement_wire_parts(const stage_placement *p, int grad, int send)
{
    placement_wire w = {1, p->decoder};
    /* the first decoder stage's other side is the encoder: the encoder output comes in alone
     * and its gradient goes back alone */
    if (p->first_decoder && grad == send) w.hidden = 0;
    return w;
}

int placement_token_shards(int tp, int seq_parallel)
{
    return tp > 1 && seq_parallel ? tp : 1;
}

double placement_wire_share(int tp, int cp, int seq_parallel)
{
    return 1.0 / ((cp > 1 ? cp : 1) * placement_token_shards(tp, seq_parallel));
}

dp_status placement_split_check(const model_spec *m, const pipeline_split *split, int nv,
                                dp_err *err)
{
    if (split && split->n == 0 && (split->less_first || split->less_last)) {
        if (m->arch != ARCH_GPT)
            return dp_fail(err, DP_ERR_INVALID, "--layers-per-stage less:%d,%d: %s is an "
                           "encoder-decoder model; its encoder and decoder layers are split evenly "
                           "over their halves", split->less_first, split->less_last, m->name);
        for (int v = 0; v < nv; v++) {
            int n = placement_stage(m, split, v, nv).enc_layers;
            if (n < (v == 0 || v == nv - 1 ? 0 : 1))
                return dp_fail(err, DP_ERR_INVALID, "--layers-per-stage less:%d,%d over %d virtual "
                               "stages (pp x chunks) leaves stage %d %s of %s's %d layers",
                               split->less_first, split->less_last, nv, v,
                               n < 0 ? "fewer than none" : "none", m->name, m->enc_layers);
        }
        return DP_OK;
    }
    if (!split || split->n == 0) {
        if (m->arch == ARCH_GPT && nv > m->enc_layers)
            return dp_fail(err, DP_ERR_INVALID, "--pp x --chunks = %d is more pipeline stages than "
                           "%s has layers (%d)", nv, m->name, m->enc_layers);
        if (m->arch == ARCH_T5 && nv > 1 &&
            (nv % 2 || nv / 2 > m->enc_layers || nv / 2 > m->dec_layers))
            return dp_fail(err, DP_ERR_INVALID, "--pp x --chunks = %d does not fit %s: a T5 pipeline "
                           "needs an even number of stages, at most %d per side", nv, m->name,
                           m->enc_layers < m->dec_layers ? m->enc_layers : m->dec_layers);
        return DP_OK;
    }
    if (m->arch != ARCH_GPT)
        return dp_fail(err, DP_ERR_INVALID, "--layers-per-stage: %s is an encoder-decoder model; "
                       "its encoder and decoder layers are split evenly over their halves",
                       m->name);
    if (split->n != nv)
        return dp_fail(err, DP_ERR_INVALID, "--layers-per-stage lists %d stages, but the pipeline "
                       "has %d (pp x chunks)", split->n, nv);
    long sum = 0;
    for (int v = 0; v < nv; v++) {
        if (split->layers[v] < (v == 0 || v == nv - 1 ? 0 : 1))
            return dp_fail(err, DP_ERR_INVALID, "--layers-per-stage: stage %d holds no layer; only "
                           "the first and the last may (the embedding or the head alone)", v);
        sum += split->layers[v];
    }
    if (sum != m->enc_layers)
        return dp_fail(err, DP_ERR_INVALID, "--layers-per-stage adds up to %ld layers, but %s has "
                       "%d", sum, m->name, m->enc_layers);
    return DP_OK;
}

int placement_split_parse(const char *text, pipeline_split *split)
{
    split->n = 0;
    split->less_first = split->less_last = 0;
    if (text && strncmp(text, "less:", 5) == 0) { /* two whole numbers, digits only */
        int ab[2] = {0, 0}, i = 0;
        const char *c = text + 5;
        for (; i < 2; i++, c++) {
            if (*c < '0' || *c > '9') return -1;
            for (; *c >= '0' && *c <= '9'; c++)
                if ((ab[i] = ab[i] * 10 + (*c - '0')) > 1 << 20) return -1;
            if (*c != (i == 0 ? ',' : '\0')) return -1;
        }
        split->less_first = ab[0], split->less_last = ab[1];
        return 0;
    }
    for (const char *c = text; c && *c;) {
        char *end;
        errno = 0;
        long v = strtol(c, &end, 10);
        if (end == c || errno || v < 0 || v > 1 << 20 || (*end && *end != ',') ||
            split->n == PLACEMENT_SPLIT_MAX || *c == '+' || *c == '-' || *c == ' ')
            return -1;
        split->layers[split->n++] = (int)v;
        c = *end ? end + 1 : end;
        if (*end == ',' && !*c) return -1; /* a trailing comma */
    }
    return split->n > 0 ? 0 : -1;
}

void placement_split_format(const pipeline_split *split, char *buf, size_t cap)
{
    size_t at = 0;
    if (cap) buf[0] = '\0';
    if (split->n == 0 && (split->less_first || split->less_last)) {
        snprintf(buf, cap, "less:%d,%d", split->less_first, split->less_last);
        return;
    }
    for (int v = 0; v < split->n && at < cap; v++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%d", v ? "," : "", split->layers[v]);
}

int placement_moe_layers(const model_spec *m, const stage_placement *pl)
{
    if (!model_is_moe(m) || m->arch != ARCH_GPT) return 0;
    int n = 0;
    for (int i = 0; i < pl->enc_layers; i++) n += model_moe_layer(m, pl->first_layer + i);
    return n;
}
