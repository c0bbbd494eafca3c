/* placement.c — what each virtual stage runs and what its transfers carry (placement.h). */
#include "placement.h"

/* Part i of n items split over k parts as evenly as possible (the first n mod k get one more). */
static int share(int n, int k, int i)
{
    return n / k + (i < n % k ? 1 : 0);
}

stage_placement placement_stage(const model_spec *m, int v, int nv)
{
    stage_placement p = {0};
    p.embedding = v == 0;
    p.head = v == nv - 1;
    if (m->arch == ARCH_GPT) {
        p.enc_layers = share(m->enc_layers, nv, v);
        return p;
    }
    if (nv == 1) { /* T5 on one stage: the whole model */
        p.enc_layers = m->enc_layers, p.dec_layers = m->dec_layers;
        return p;
    }
    int enc_stages = nv / 2, dec_stages = nv - enc_stages;
    if (v < enc_stages) {
        p.enc_layers = share(m->enc_layers, enc_stages, v);
    } else {
        p.dec_layers = share(m->dec_layers, dec_stages, v - enc_stages);
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
