#include "batch.h"

#include <stdlib.h>
#include <string.h>

void batch_rules_default(batch_rules *r, model_arch arch)
{
    r->arch = arch;
    r->global_tokens = 65536;
    r->max_seqlen = 2048;
    r->max_dec_seqlen = 512;
    r->dec_extra = 2;
    r->pad_multiple = 8;
    r->min_padded = 16;
}

dp_status batch_rules_validate(const batch_rules *r, dp_err *err)
{
    if (r->global_tokens < 1) return dp_fail(err, DP_ERR_INVALID, "--global-tokens must be at least 1");
    if (r->max_seqlen < 1) return dp_fail(err, DP_ERR_INVALID, "--max-seqlen must be at least 1");
    if (r->arch == ARCH_T5 && r->max_dec_seqlen <= r->dec_extra)
        return dp_fail(err, DP_ERR_INVALID, "--max-dec-seqlen must exceed the %d BOS/EOS tokens",
                       r->dec_extra);
    if (r->pad_multiple < 1) return dp_fail(err, DP_ERR_INVALID, "--pad-multiple must be at least 1");
    return DP_OK;
}

int batch_pad(const batch_rules *r, int len)
{
    if (len <= 0) return 0;
    int p = (len + r->pad_multiple - 1) / r->pad_multiple * r->pad_multiple;
    return p < r->min_padded ? r->min_padded : p;
}

sample_len batch_sample(const batch_rules *r, const trace *t, size_t i)
{
    return batch_sample_of(r, &t->samples[i], i);
}

int64_t batch_trace_tokens(const batch_rules *r, const trace *t)
{
    int64_t n = 0;
    for (size_t i = 0; i < t->n; i++) {
        sample_len x = batch_sample(r, t, i);
        n += x.enc + x.dec;
    }
    return n;
}

sample_len batch_sample_of(const batch_rules *r, const trace_sample *s, size_t i)
{
    sample_len x = {(int32_t)i, 0, 0};
    if (r->arch == ARCH_GPT) {
        int64_t total = (int64_t)s->input_len + s->target_len;
        x.enc = (int32_t)(total < r->max_seqlen ? total : r->max_seqlen);
    } else {
        x.enc = s->input_len < r->max_seqlen ? s->input_len : r->max_seqlen;
        int cap = r->max_dec_seqlen - r->dec_extra;
        x.dec = (s->target_len < cap ? s->target_len : cap) + r->dec_extra;
    }
    return x;
}

int batch_row_fits(const batch_rules *r, const batch_row *w, const sample_len *x)
{
    return w->enc + x->enc <= r->max_seqlen &&
           (r->arch == ARCH_GPT || w->dec + x->dec <= r->max_dec_seqlen);
}

int batch_pack_rows(const batch_rules *r, int mbs, int dp)
{
    int64_t unit = (int64_t)mbs * dp, rows = r->global_tokens / r->max_seqlen;
    if (rows > (1 << 30)) rows = 1 << 30;
    rows = rows / unit * unit;
    return (int)(rows < unit ? unit : rows);
}

void batch_iter_pack_rows(batch_iter *it, int rows)
{
    it->pack_rows = rows;
}

void batch_iter_init(batch_iter *it, const trace *t, const batch_rules *r)
{
    memset(it, 0, sizeof *it);
    it->t = t;
    it->r = r;
}

void batch_iter_init_stream(batch_iter *it, trace_stream *ts, const batch_rules *r)
{
    memset(it, 0, sizeof *it);
    it->ts = ts;
    it->r = r;
}

/* The next sample of the source (without consuming it); *eof at the end. */
static dp_status peek(batch_iter *it, trace_sample *s, int *eof, dp_err *err)
{
    *eof = 0;
    if (it->t) {
        if (it->next >= it->t->n) *eof = 1;
        else *s = it->t->samples[it->next];
        return DP_OK;
    }
    if (!it->has_pending) {
        dp_status st = trace_stream_next(it->ts, &it->pending, eof, err);
        if (st != DP_OK || *eof) return st;
        it->has_pending = 1;
    }
    *s = it->pending;
    return DP_OK;
}

void batch_iter_release(batch_iter *it)
{
    free(it->buf);
    it->buf = NULL;
}

dp_status batch_next(batch_iter *it, const sample_len **out, int *n, dp_err *err)
{
    *n = 0;
    *out = it->buf;
    int64_t tokens = 0;
    int rows = 0;
    batch_row row = {0, 0};
    for (;;) {
        trace_sample ts;
        int eof;
        dp_status st = peek(it, &ts, &eof, err);
        if (st != DP_OK) return st;
        if (eof) break;
        sample_len x = batch_sample_of(it->r, &ts, it->next);
        int64_t tok = (int64_t)x.enc + x.dec;
        if (it->pack_rows > 0) { /* whole next-fit rows */
            if (rows == 0 || !batch_row_fits(it->r, &row, &x)) {
                if (rows == it->pack_rows) break;
                rows++;
                row = (batch_row){0, 0};
            }
            row.enc += x.enc, row.dec += x.dec;
        } else if (tok > it->r->global_tokens)
            return dp_fail(err, DP_ERR_INVALID,
                           "trace sample %d (%d tokens after truncation) is larger than "
                           "--global-tokens %lld\nhint: raise --global-tokens or lower --max-seqlen",
                           x.id, (int)tok, (long long)it->r->global_tokens);
        else if (tokens + tok > it->r->global_tokens) break;
        size_t cap = (size_t)it->cap;
        if (dp_grow((void **)&it->buf, &cap, (size_t)*n + 1, sizeof *it->buf) != DP_OK)
            return dp_fail(err, DP_ERR_NOMEM, "out of memory");
        it->cap = (int)cap;
        it->buf[(*n)++] = x;
        tokens += tok;
        it->next++;
        it->has_pending = 0;
    }
    *out = it->buf;
    if (*n) it->iteration++;
    return DP_OK;
}
