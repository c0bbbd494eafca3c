/* Parts of the cost-model interface shared by every kind. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cost.h"

void cost_model_free(cost_model *cm)
{
    if (!cm) return;
    if (cm->ops && cm->ops->release) cm->ops->release(cm);
    free(cm);
}

const char *recompute_name(recompute_mode r)
{
    static const char *const names[RECOMPUTE_COUNT] = {"none", "selective", "full"};
    return names[r];
}

int recompute_parse(const char *name, recompute_mode *r)
{
    for (int i = 0; i < RECOMPUTE_COUNT; i++)
        if (strcmp(name, recompute_name((recompute_mode)i)) == 0) {
            *r = (recompute_mode)i;
            return 0;
        }
    return -1;
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
