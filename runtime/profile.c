#include "profile.h"

#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "layer.h"

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

dp_status rt_profile(const rt_profile_opts *o, dp_err *err)
{
    const model_spec *m = o->model;
    if (m->arch != ARCH_GPT)
        return dp_fail(err, DP_ERR_UNSUPPORTED, "dprun profile measures GPT layers for now; %s is T5", m->name);
    FILE *fp = strcmp(o->out, "-") == 0 ? stdout : fopen(o->out, "wb");
    if (!fp) return dp_fail(err, DP_ERR_IO, "%s: cannot create: %s", o->out, strerror(errno));
    fprintf(fp, "tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value\n");
    rt_layer_shape s = {m->hidden, m->heads, m->kv_channels, m->ffn, 1};
    rt_layer_params p, g;
    if (rt_layer_params_alloc(&p, &s) != 0 || rt_layer_params_alloc(&g, &s) != 0) {
        if (fp != stdout) fclose(fp);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    rt_layer_params_init(&p, &s, 1);
    int R = o->repeats > 0 ? o->repeats : 1, V = m->vocab, H = m->hidden;
    double *tf = malloc((size_t)R * sizeof *tf), *tb = malloc((size_t)R * sizeof *tb);
    double *pf = malloc((size_t)R * sizeof *pf), *pb = malloc((size_t)R * sizeof *pb);
    double *emb = calloc((size_t)V * H, sizeof *emb), *demb = calloc((size_t)V * H, sizeof *demb);
    dp_status st = DP_OK;
    for (int i = 0; i < o->n_mbs && st == DP_OK; i++)
        for (int j = 0; j < o->n_seqlen && st == DP_OK; j++) {
            int B = o->mbs[i], S = o->seqlen[j], n = B * S;
            size_t nh = (size_t)n * H;
            if (o->sync) o->sync();
            /* ROTATE sets of activations in turn, as a pipeline holds several micro-batches:
             * timing one warm buffer over and over would measure the cache, not the runtime */
            rt_layer_acts a[ROTATE];
            int have = 0;
            double *x = malloc(nh * sizeof *x), *y = malloc(nh * sizeof *y), *dx = malloc(nh * sizeof *dx);
            double *logits = malloc((size_t)n * V * sizeof *logits), *dl = malloc((size_t)n * V * sizeof *dl);
            int *t = malloc((size_t)n * sizeof *t);
            while (have < ROTATE && rt_layer_acts_alloc(&a[have], &s, B, S) == 0) have++;
            if (!x || !y || !dx || !logits || !dl || !t || have < ROTATE) {
                st = dp_fail(err, DP_ERR_NOMEM, "out of memory at mbs %d, seqlen %d", B, S);
                free(x), free(y), free(dx), free(logits), free(dl), free(t);
                for (int k = 0; k < have; k++) rt_layer_acts_free(&a[k]);
                break;
            }
            for (size_t k = 0; k < nh; k++) x[k] = (double)((k * 2654435761u) % 1000) / 1000 - 0.5;
            for (int k = 0; k < n; k++) t[k] = (k * 7919) % V;
            for (int r = -o->warmup; r < R; r++) {
                rt_layer_acts *ar = &a[(r + o->warmup) % ROTATE];
                double t0 = now_ms();
                rt_layer_fwd(&p, &s, B, S, x, y, ar);
                double t1 = now_ms();
                rt_layer_bwd_input(&p, &g, &s, B, S, y, dx, ar);
                rt_layer_bwd_weight(&g, &s, B, S, ar);
                double t2 = now_ms();
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, V, H, 1.0, y, H, emb, H, 0.0, logits, V);
                rt_softmax_xent(logits, t, dl, n, V);
                double t3 = now_ms();
                cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, H, V, 1.0, dl, V, emb, H, 0.0, dx, H);
                cblas_dgemm(CblasRowMajor, CblasTrans, CblasNoTrans, V, H, n, 1.0, dl, V, y, H, 1.0, demb, H);
                double t4 = now_ms();
                if (r >= 0) tf[r] = t1 - t0, tb[r] = t2 - t1, pf[r] = t3 - t2, pb[r] = t4 - t3;
            }
            size_t grads = (size_t)n * (3 * (size_t)s.heads * s.kv + 2 * (size_t)H + s.ffn);
            double stored = (double)(rt_layer_acts_doubles(&s, B, S) - grads) * 8 / 1e6;
            double peak = (double)rt_layer_acts_doubles(&s, B, S) * 8 / 1e6 + (double)nh * 8 * 3 / 1e6;
            fprintf(fp, "1,none,encoder,fwd_ms,%d,%d,0,%.6f\n", B, S, median(tf, R));
            fprintf(fp, "1,none,encoder,bwd_ms,%d,%d,0,%.6f\n", B, S, median(tb, R));
            fprintf(fp, "1,none,encoder,stored_act_mb,%d,%d,0,%.6f\n", B, S, stored);
            fprintf(fp, "1,none,encoder,peak_act_mb,%d,%d,0,%.6f\n", B, S, peak);
            fprintf(fp, "1,none,postprocess,fwd_ms,%d,%d,0,%.6f\n", B, S, median(pf, R));
            fprintf(fp, "1,none,postprocess,bwd_ms,%d,%d,0,%.6f\n", B, S, median(pb, R));
            if (o->progress)
                fprintf(stderr, "dprun profile: mbs %d seqlen %d: fwd %.3f ms, bwd %.3f ms per layer\n",
                        B, S, median(tf, R), median(tb, R));
            for (int k = 0; k < ROTATE; k++) rt_layer_acts_free(&a[k]);
            free(x), free(y), free(dx), free(logits), free(dl), free(t);
        }
    free(tf), free(tb), free(pf), free(pb), free(emb), free(demb);
    rt_layer_params_free(&p);
    rt_layer_params_free(&g);
    int bad = fp == stdout ? fflush(fp) != 0 : fclose(fp) != 0;
    if (st == DP_OK && bad) st = dp_fail(err, DP_ERR_IO, "%s: write failed", o->out);
    return st;
}
