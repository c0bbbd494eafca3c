#include "ragged.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/dp.h"

int rt_ragged_bucket(int v, int floor)
{
    long long p = floor > 0 ? floor : 1;
    while (p < v) p *= 2;
    return (int)p;
}

void rt_ragged_release(rt_ragged *r)
{
    if (!r) return;
    free(r->src), free(r->seq_q), free(r->seq_k), free(r->tok_q);
    free(r->off_q), free(r->off_k), free(r->off_o);
    memset(r, 0, sizeof *r);
}

/* The sequences of s are contiguous runs of tokens, in increasing order, not overlapping. */
static int in_order(const rt_seqs *s)
{
    for (int j = 0; j < s->n; j++) {
        if (s->off[j] < 0 || s->len[j] < 0) return 0;
        if (j > 0 && s->off[j] < s->off[j - 1] + s->len[j - 1]) return 0;
    }
    return 1;
}

int rt_ragged_build(rt_ragged *r, const rt_seqs *qs, const rt_seqs *ks, int ldq, int ldkv,
                    int ldo, char *why, size_t why_cap)
{
    memset(r, 0, sizeof *r);
    if (qs->n != ks->n || !in_order(qs) || !in_order(ks)) {
        snprintf(why, why_cap, "the micro-batch's sequences are not in order, one after another");
        return -1;
    }
    int used = 0, mq = 0, mk = 0;
    for (int j = 0; j < qs->n; j++)
        if (qs->len[j] > 0 && ks->len[j] > 0) {
            used++;
            mq = qs->len[j] > mq ? qs->len[j] : mq;
            mk = ks->len[j] > mk ? ks->len[j] : mk;
        }
    if (used == 0) {
        snprintf(why, why_cap, "no sequence has both queries and keys");
        return -1;
    }
    r->used = used;
    r->n = rt_ragged_bucket(used, 1);
    r->max_q = rt_ragged_bucket(mq, RT_RAGGED_MIN_LEN);
    r->max_k = rt_ragged_bucket(mk, RT_RAGGED_MIN_LEN);
    size_t n = (size_t)r->n;
    r->src = dp_xcalloc((size_t)used, sizeof *r->src);
    r->seq_q = dp_xcalloc(n, sizeof *r->seq_q);
    r->seq_k = dp_xcalloc(n, sizeof *r->seq_k);
    r->tok_q = dp_xcalloc(n, sizeof *r->tok_q);
    r->off_q = dp_xcalloc(n + 1, sizeof *r->off_q);
    r->off_k = dp_xcalloc(n + 1, sizeof *r->off_k);
    r->off_o = dp_xcalloc(n + 1, sizeof *r->off_o);
    int c = 0;
    long long end_q = 0, end_k = 0; /* tokens: the end of the last given sequence */
    for (int j = 0; j < qs->n; j++) {
        if (qs->len[j] <= 0 || ks->len[j] <= 0) continue;
        r->src[c] = j;
        r->seq_q[c] = qs->len[j], r->seq_k[c] = ks->len[j], r->tok_q[c] = qs->off[j];
        r->off_q[c] = (long long)qs->off[j] * ldq;
        r->off_k[c] = (long long)ks->off[j] * ldkv;
        r->off_o[c] = (long long)qs->off[j] * ldo;
        end_q = (long long)qs->off[j] + qs->len[j], end_k = (long long)ks->off[j] + ks->len[j];
        c++;
    }
    for (; c <= r->n; c++) { /* the empty padding sequences, and entry n: the end */
        if (c < r->n) r->tok_q[c] = (int)end_q;
        r->off_q[c] = end_q * ldq, r->off_k[c] = end_k * ldkv, r->off_o[c] = end_q * ldo;
    }
    r->wide = r->off_q[r->n] > INT32_MAX || r->off_k[r->n] > INT32_MAX || r->off_o[r->n] > INT32_MAX;
    return 0;
}

static size_t align16(size_t b) { return (b + 15) / 16 * 16; }

size_t rt_ragged_pack(const rt_ragged *r, void *blob, size_t at[RT_RG_COUNT])
{
    size_t n = (size_t)r->n, off_bytes = r->wide ? 8 : 4, pos = 0, where[RT_RG_COUNT];
    const int *ints[3] = {r->seq_q, r->seq_k, r->tok_q};
    const long long *offs[3] = {r->off_q, r->off_k, r->off_o};
    for (int a = 0; a < 3; a++) {
        where[a] = pos;
        if (blob)
            for (size_t i = 0; i < n; i++) {
                int32_t v = ints[a][i];
                memcpy((char *)blob + pos + 4 * i, &v, 4);
            }
        pos = align16(pos + 4 * n);
    }
    for (int a = 0; a < 3; a++) {
        where[3 + a] = pos;
        if (blob)
            for (size_t i = 0; i <= n; i++) {
                int64_t w = offs[a][i];
                int32_t v = (int32_t)w;
                memcpy((char *)blob + pos + off_bytes * i, r->wide ? (const void *)&w : (const void *)&v,
                       off_bytes);
            }
        pos = align16(pos + off_bytes * (n + 1));
    }
    if (at) memcpy(at, where, sizeof where);
    return pos;
}
