#include "profile.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "layer.h"
#ifdef DPRUN_CUDA
#include "cuda/layer_cuda.h"
#endif

#define ROTATE 4 /* activation sets cycled through while timing */

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* What one grid point measured. */
typedef struct point {
    double fwd_ms, bwd_ms, stored_mb, peak_mb;
} point;

/* stored: what the forward keeps for the backward; peak: with the backward's buffers too */
static void layer_memory(const rt_layer_shape *s, int B, int S, int Se, point *out)
{
    size_t hk = (size_t)s->heads * s->kv, n = (size_t)B * S, nh = n * (size_t)s->hidden;
    size_t grads = n * (3 * hk + 2 * (size_t)s->hidden + s->ffn) +
                   (s->cross ? n * (hk + (size_t)s->hidden) + (size_t)B * Se * 2 * hk : 0);
    size_t total = rt_layer_acts_doubles(s, B, S, Se);
    out->stored_mb = (double)(total - grads) * 8 / 1e6;
    out->peak_mb = (double)total * 8 / 1e6 + (double)nh * 8 * 3 / 1e6;
}

/* Times one layer of shape s on (B, S) (encoder output (B, Se) for a cross layer): the median of
 * R forwards and R backwards (input and weight gradients), after `warmup` unrecorded runs. ROTATE
 * sets of activations are used in turn, as a pipeline holds several micro-batches: timing one
 * warm buffer over and over would measure the cache, not the runtime. */
static dp_status time_layer(const rt_layer_params *p, rt_layer_params *g, const rt_layer_shape *s,
                            int B, int S, int Se, int R, int warmup, point *out, dp_err *err)
{
    int H = s->hidden;
    size_t nh = (size_t)B * S * H, ne = (size_t)B * Se * H;
    rt_layer_acts a[ROTATE];
    int have = 0;
    double *x = malloc(nh * sizeof *x), *y = malloc(nh * sizeof *y), *dx = malloc(nh * sizeof *dx);
    double *enc = s->cross ? malloc(ne * sizeof *enc) : NULL, *denc = s->cross ? calloc(ne, sizeof *denc) : NULL;
    double *tf = malloc((size_t)R * sizeof *tf), *tb = malloc((size_t)R * sizeof *tb);
    while (have < ROTATE && rt_layer_acts_alloc(&a[have], s, B, S, Se) == 0) have++;
    dp_status st = DP_OK;
    if (!x || !y || !dx || !tf || !tb || (s->cross && (!enc || !denc)) || have < ROTATE) {
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory at mbs %d, seqlen %d", B, S);
        goto out;
    }
    for (size_t k = 0; k < nh; k++) x[k] = (double)((k * 2654435761u) % 1000) / 1000 - 0.5;
    for (size_t k = 0; k < ne; k++) enc[k] = (double)((k * 40503u) % 1000) / 1000 - 0.5;
    for (int r = -warmup; r < R; r++) {
        rt_layer_acts *ar = &a[(r + warmup) % ROTATE];
        ar->enc = enc;
        ar->denc = denc;
        double t0 = now_ms();
        rt_layer_fwd(p, s, B, S, x, y, ar);
        double t1 = now_ms();
        rt_layer_bwd_input(p, g, s, B, S, y, dx, ar);
        rt_layer_bwd_weight(g, s, B, S, ar);
        double t2 = now_ms();
        if (r >= 0) tf[r] = t1 - t0, tb[r] = t2 - t1;
    }
    out->fwd_ms = median(tf, R);
    out->bwd_ms = median(tb, R);
    layer_memory(s, B, S, Se, out);
out:
    for (int k = 0; k < have; k++) rt_layer_acts_free(&a[k]);
    free(x), free(y), free(dx), free(enc), free(denc), free(tf), free(tb);
    return st;
}

/* Times the LM head and loss on n = B * S tokens. */
static dp_status time_head(const model_spec *m, int n, int R, int warmup, point *out, dp_err *err)
{
    int V = m->vocab, H = m->hidden;
    double *y = calloc((size_t)n * H, sizeof *y), *dy = malloc((size_t)n * H * sizeof *dy);
    double *logits = malloc((size_t)n * V * sizeof *logits), *dl = malloc((size_t)n * V * sizeof *dl);
    double *emb = calloc((size_t)V * H, sizeof *emb), *demb = calloc((size_t)V * H, sizeof *demb);
    double *pf = malloc((size_t)R * sizeof *pf), *pb = malloc((size_t)R * sizeof *pb);
    dp_status st = DP_OK;
    if (!y || !dy || !logits || !dl || !emb || !demb || !pf || !pb) {
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory for the LM head on %d tokens", n);
        goto out;
    }
    for (int r = -warmup; r < R; r++) {
        double t0 = now_ms();
        if (rt_lm_head_fwd(y, emb, logits, dl, n, H, V, 0) != 0) {
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory for the LM head on %d tokens", n);
            goto out;
        }
        double t1 = now_ms();
        rt_lm_head_bwd(dl, emb, y, dy, demb, n, H, V);
        double t2 = now_ms();
        if (r >= 0) pf[r] = t1 - t0, pb[r] = t2 - t1;
    }
    out->fwd_ms = median(pf, R);
    out->bwd_ms = median(pb, R);
out:
    free(y), free(dy), free(logits), free(dl), free(emb), free(demb), free(pf), free(pb);
    return st;
}

static void write_layer(FILE *fp, const char *comp, int B, int enc, int dec, const point *p)
{
    fprintf(fp, "1,none,%s,fwd_ms,%d,%d,%d,%.6f\n", comp, B, enc, dec, p->fwd_ms);
    fprintf(fp, "1,none,%s,bwd_ms,%d,%d,%d,%.6f\n", comp, B, enc, dec, p->bwd_ms);
    fprintf(fp, "1,none,%s,stored_act_mb,%d,%d,%d,%.6f\n", comp, B, enc, dec, p->stored_mb);
    fprintf(fp, "1,none,%s,peak_act_mb,%d,%d,%d,%.6f\n", comp, B, enc, dec, p->peak_mb);
}

#ifdef DPRUN_CUDA
/* The layer of shape s with parameters p on the GPU (l->block NULL when it cannot be). */
static void upload(const rt_layer_params *p, const rt_layer_shape *s, rt_cuda_layer *l)
{
    *l = (rt_cuda_layer){*s, rt_cuda_alloc(p->count), p->count};
    if (l->block && rt_cuda_put(l->block, p->block, p->count) != 0)
        rt_cuda_free(l->block), l->block = NULL;
}

/* One grid point on the GPU: a layer (or, with l NULL, the LM head on B*S tokens). */
static dp_status gpu_point(rt_cuda *g, const rt_cuda_layer *l, const model_spec *m, int B, int S,
                           int Se, int R, point *pt, dp_err *err)
{
    memset(pt, 0, sizeof *pt);
    int rc = l ? rt_cuda_time_layer(g, l, B, S, Se, R, &pt->fwd_ms, &pt->bwd_ms)
               : rt_cuda_time_head(g, B * S, m->hidden, m->vocab, R, &pt->fwd_ms, &pt->bwd_ms);
    if (rc != 0)
        return dp_fail(err, DP_ERR_EXTERNAL, "the GPU failed at mbs %d, seqlen %d (out of device "
                       "memory?)", B, S);
    if (l) layer_memory(&l->shape, B, S, Se, pt);
    return DP_OK;
}

/* The grid on the GPU, as the CPU's (the same layers, the same rows): CUDA-event means over the
 * repeats after a warm-up; memory from the same layout. pd/sd: T5's decoder layer (else NULL). */
static dp_status profile_gpu(const rt_profile_opts *o, const rt_layer_params *p,
                             const rt_layer_shape *s, const rt_layer_params *pd,
                             const rt_layer_shape *sd, FILE *fp, dp_err *err)
{
    char why[256];
    rt_cuda *g = rt_cuda_open(0, why, sizeof why);
    if (!g) return dp_fail(err, DP_ERR_EXTERNAL, "%s", why);
    rt_cuda_layer l, ld = {{0}, NULL, 0};
    upload(p, s, &l);
    if (pd) upload(pd, sd, &ld);
    dp_status st = DP_OK;
    if (!l.block || (pd && !ld.block))
        st = dp_fail(err, DP_ERR_EXTERNAL, "cannot copy the layer to the GPU");
    int R = o->repeats > 0 ? o->repeats : 1;
    const int *decs = o->n_dec_seqlen ? o->dec_seqlen : o->seqlen;
    int n_dec = o->n_dec_seqlen ? o->n_dec_seqlen : o->n_seqlen;
    for (int i = 0; i < o->n_mbs && st == DP_OK; i++)
        for (int j = 0; j < o->n_seqlen && st == DP_OK; j++) {
            int B = o->mbs[i], S = o->seqlen[j];
            point pt, head;
            if ((st = gpu_point(g, &l, o->model, B, S, 0, R, &pt, err)) != DP_OK) break;
            write_layer(fp, "encoder", B, S, 0, &pt);
            if (!pd) { /* GPT: the head on the same tokens */
                if ((st = gpu_point(g, NULL, o->model, B, S, 0, R, &head, err)) != DP_OK) break;
                fprintf(fp, "1,none,postprocess,fwd_ms,%d,%d,0,%.6f\n", B, S, head.fwd_ms);
                fprintf(fp, "1,none,postprocess,bwd_ms,%d,%d,0,%.6f\n", B, S, head.bwd_ms);
            }
            if (o->progress)
                fprintf(stderr, "dprun profile: mbs %d seqlen %d: fwd %.3f ms, bwd %.3f ms per layer (GPU)\n",
                        B, S, pt.fwd_ms, pt.bwd_ms);
            for (int k = 0; pd && k < n_dec && st == DP_OK; k++) { /* decoder on (enc S, dec D) */
                st = gpu_point(g, &ld, o->model, B, decs[k], S, R, &pt, err);
                if (st == DP_OK) write_layer(fp, "decoder", B, S, decs[k], &pt);
            }
        }
    for (int i = 0; pd && i < o->n_mbs && st == DP_OK; i++) /* T5's head: decoder lengths */
        for (int k = 0; k < n_dec && st == DP_OK; k++) {
            point head;
            if ((st = gpu_point(g, NULL, o->model, o->mbs[i], decs[k], 0, R, &head, err)) != DP_OK) break;
            fprintf(fp, "1,none,postprocess,fwd_ms,%d,0,%d,%.6f\n", o->mbs[i], decs[k], head.fwd_ms);
            fprintf(fp, "1,none,postprocess,bwd_ms,%d,0,%d,%.6f\n", o->mbs[i], decs[k], head.bwd_ms);
        }
    rt_cuda_free(l.block), rt_cuda_free(ld.block);
    rt_cuda_close(g);
    return st;
}
#endif

dp_status rt_profile(const rt_profile_opts *o, dp_err *err)
{
    const model_spec *m = o->model;
    int t5 = m->arch == ARCH_T5;
    FILE *fp = strcmp(o->out, "-") == 0 ? stdout : fopen(o->out, "wb");
    if (!fp) return dp_fail(err, DP_ERR_IO, "%s: cannot create: %s", o->out, strerror(errno));
    fprintf(fp, "tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value\n");
    rt_layer_shape enc_shape = {m->hidden, m->heads, m->kv_channels, m->ffn, !t5, 0};
    rt_layer_shape dec_shape = {m->hidden, m->heads, m->kv_channels, m->ffn, 1, 1};
    rt_layer_params p, g, pd, gd;
    memset(&pd, 0, sizeof pd), memset(&gd, 0, sizeof gd);
    int ok = rt_layer_params_alloc(&p, &enc_shape) == 0 && rt_layer_params_alloc(&g, &enc_shape) == 0;
    if (ok && t5)
        ok = rt_layer_params_alloc(&pd, &dec_shape) == 0 && rt_layer_params_alloc(&gd, &dec_shape) == 0;
    if (!ok) {
        if (fp != stdout) fclose(fp);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    rt_layer_params_init(&p, &enc_shape, 1);
    if (t5) rt_layer_params_init(&pd, &dec_shape, 2);
    int R = o->repeats > 0 ? o->repeats : 1;
    const int *decs = o->n_dec_seqlen ? o->dec_seqlen : o->seqlen;
    int n_dec = o->n_dec_seqlen ? o->n_dec_seqlen : o->n_seqlen;
    dp_status st = DP_OK;
    if (o->on_gpu) {
#ifdef DPRUN_CUDA
        st = profile_gpu(o, &p, &enc_shape, t5 ? &pd : NULL, t5 ? &dec_shape : NULL, fp, err);
#else
        st = dp_fail(err, DP_ERR_UNSUPPORTED, "this dprun was built without CUDA (no nvcc or "
                     "cuBLAS was found at build time)");
#endif
    }
    for (int i = 0; !o->on_gpu && i < o->n_mbs && st == DP_OK; i++)
        for (int j = 0; j < o->n_seqlen && st == DP_OK; j++) {
            int B = o->mbs[i], S = o->seqlen[j];
            point pt = {0}, head = {0};
            if (o->sync) o->sync();
            st = time_layer(&p, &g, &enc_shape, B, S, 0, R, o->warmup, &pt, err);
            if (st == DP_OK && !t5) st = time_head(m, B * S, R, o->warmup, &head, err);
            if (st != DP_OK) break;
            write_layer(fp, "encoder", B, S, 0, &pt);
            if (!t5) {
                fprintf(fp, "1,none,postprocess,fwd_ms,%d,%d,0,%.6f\n", B, S, head.fwd_ms);
                fprintf(fp, "1,none,postprocess,bwd_ms,%d,%d,0,%.6f\n", B, S, head.bwd_ms);
            }
            if (o->progress)
                fprintf(stderr, "dprun profile: mbs %d seqlen %d: fwd %.3f ms, bwd %.3f ms per layer\n",
                        B, S, pt.fwd_ms, pt.bwd_ms);
            for (int k = 0; t5 && k < n_dec && st == DP_OK; k++) { /* decoder on (enc S, dec D) */
                int D = decs[k];
                if (o->sync) o->sync();
                st = time_layer(&pd, &gd, &dec_shape, B, D, S, R, o->warmup, &pt, err);
                if (st == DP_OK) write_layer(fp, "decoder", B, S, D, &pt);
            }
        }
    for (int i = 0; t5 && !o->on_gpu && i < o->n_mbs && st == DP_OK; i++) /* T5's head: decoder */
        for (int k = 0; k < n_dec && st == DP_OK; k++) {
            point head;
            if (o->sync) o->sync();
            st = time_head(m, o->mbs[i] * decs[k], R, o->warmup, &head, err);
            if (st != DP_OK) break;
            fprintf(fp, "1,none,postprocess,fwd_ms,%d,0,%d,%.6f\n", o->mbs[i], decs[k], head.fwd_ms);
            fprintf(fp, "1,none,postprocess,bwd_ms,%d,0,%d,%.6f\n", o->mbs[i], decs[k], head.bwd_ms);
        }
    rt_layer_params_free(&p), rt_layer_params_free(&g);
    if (t5) rt_layer_params_free(&pd), rt_layer_params_free(&gd);
    int bad = fp == stdout ? fflush(fp) != 0 : fclose(fp) != 0;
    if (st == DP_OK && bad) st = dp_fail(err, DP_ERR_IO, "%s: write failed", o->out);
    return st;
}
