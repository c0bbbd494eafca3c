#include "profile.h"

#include <errno.h>
#include <math.h>
#include <gsl/gsl_sort.h>
#include <gsl/gsl_statistics_double.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/outfile.h"
#include "layer.h"
#ifdef DPRUN_CUDA
#include "cuda/layer_cuda.h"
#endif

#define ROTATE 4 /* activation sets, and copies of a layer's parameters, cycled through */
/* The most host memory the parameter copies of one layer kind take (their gradients as much
 * again): a layer above it has one copy, whose weights no cache holds anyway. */
#define PARAM_COPIES_MB 256.0

/* The median of v[0..n), which it sorts (GSL). */
static double median(double *v, int n)
{
    gsl_sort(v, 1, (size_t)n);
    return gsl_stats_median_from_sorted_data(v, 1, (size_t)n);
}

/* What one grid point measured. */
typedef struct point {
    double fwd_ms, bwd_ms, stored_mb, peak_mb;
} point;

/* stored: what the forward keeps for the backward (layout.h; under full recompute the layer's
 * input); peak: with the gradients kept for the weight pass and three activation-sized buffers of
 * the backward too, at type dt (under full the rerun's whole block and its output besides) */
static void layer_memory(const rt_layer_shape *s, int B, int S, int Se, rt_dtype dt,
                         recompute_mode rc, point *out)
{
    rt_acts_layout l;
    rt_layer_acts_layout(s, B, S, Se, dt, &l);
    size_t n = (size_t)B * S / (s->cp > 1 ? (size_t)s->cp : 1); /* this rank's tokens */
    double h = (double)(n * (size_t)s->hidden * rt_dtype_act_bytes(dt)) / 1e6;
    out->stored_mb = rc == RECOMPUTE_FULL ? h : (double)rt_acts_forward_bytes(&l) / 1e6;
    out->peak_mb = (double)l.total / 1e6 + 3 * h + (rc == RECOMPUTE_FULL ? 2 * h : 0);
}

/* A layer kind's parameters and gradients on the host, in `copies` copies that successive timed
 * runs take in turn (next: the copy the next run takes). */
typedef struct layer_copies {
    rt_layer_params p[ROTATE], g[ROTATE];
    int copies, next;
} layer_copies;

/* Times one layer of shape s on (B, S) (encoder output (B, Se) for a cross layer): the median of
 * R forwards and R backwards (input and weight gradients), after `warmup` unrecorded runs. ROTATE
 * sets of activations are used in turn, as a pipeline holds several micro-batches, and each run
 * takes the next copy of the parameters, as a stage runs its other layers before it comes back
 * to this one: timing one warm buffer, or one layer's weights, over and over would measure the
 * cache, not the runtime (on the CPU a small micro-batch's GEMMs read the weights faster from the
 * cache: gpt-tiny's 1 x 72 forward took 5-7% less with one copy than with several, 4-5% less than
 * the same layer in a run). */
/* One forward (bwd 0) or backward (1: the executor's under rc, input and weight gradients) of a
 * layer on activation set a, with the next copy of the parameters; its time, ms. */
static double layer_op(layer_copies *lc, const rt_layer_shape *s, int B, int S, recompute_mode rc,
                       rt_layer_acts *a, const double *x, double *y, double *dx, double *ry, int bwd)
{
    const rt_layer_params *p = &lc->p[lc->next];
    rt_layer_params *g = &lc->g[lc->next];
    lc->next = (lc->next + 1) % lc->copies;
    double t0 = 1e3 * dp_now_s();
    if (!bwd) {
        rt_layer_fwd(p, s, B, S, x, y, a);
    } else {
        rt_layer_rerun(p, s, B, S, rc, x, ry, a);
        rt_layer_bwd_input(p, g, s, B, S, y, dx, a);
        rt_layer_bwd_weight(g, s, B, S, a);
    }
    return 1e3 * dp_now_s() - t0;
}

static dp_status time_layer(layer_copies *lc, const rt_layer_shape *s, int B, int S, int Se,
                            recompute_mode rc, int R, int warmup, const rt_tp *tp, const rt_cp *cp,
                            point *out, dp_err *err)
{
    int H = s->hidden;
    size_t nh = (size_t)rt_cp_tokens(cp, B * S) * H, ne = (size_t)B * Se * H;
    rt_layer_acts a[ROTATE];
    int have = 0;
    double *x = malloc(nh * sizeof *x), *y = malloc(nh * sizeof *y), *dx = malloc(nh * sizeof *dx);
    double *ry = malloc(nh * sizeof *ry); /* a full rerun's output */
    double *enc = s->cross ? malloc(ne * sizeof *enc) : NULL, *denc = s->cross ? calloc(ne, sizeof *denc) : NULL;
    double *tf = malloc((size_t)R * sizeof *tf), *tb = malloc((size_t)R * sizeof *tb);
    while (have < ROTATE && rt_layer_acts_alloc(&a[have], s, B, S, Se) == 0) have++;
    dp_status st = DP_OK;
    if (!x || !y || !dx || !ry || !tf || !tb || (s->cross && (!enc || !denc)) || have < ROTATE) {
        st = dp_fail(err, DP_ERR_NOMEM, "out of memory at mbs %d, seqlen %d", B, S);
        goto out;
    }
    for (size_t k = 0; k < nh; k++) x[k] = (double)((k * 2654435761u) % 1000) / 1000 - 0.5;
    for (size_t k = 0; k < ne; k++) enc[k] = (double)((k * 40503u) % 1000) / 1000 - 0.5;
    for (int k = 0; k < ROTATE; k++) a[k].enc = enc, a[k].denc = denc, a[k].tp = tp, a[k].cp = cp;
    /* 1F1B's steady state: micro-batch k's backward runs after k+1's forward, so that it reads
     * activations other work has pushed out of the caches, as in a run. The first forward, then
     * `warmup` unrecorded steps (a forward and a backward each), then R recorded ones. */
    layer_op(lc, s, B, S, rc, &a[0], x, y, dx, ry, 0);
    for (int r = -warmup, next = 1; r < R; r++, next++) {
        double f = layer_op(lc, s, B, S, rc, &a[next % ROTATE], x, y, dx, ry, 0);
        double b = layer_op(lc, s, B, S, rc, &a[(next - 1) % ROTATE], x, y, dx, ry, 1);
        if (r >= 0) tf[r] = f, tb[r] = b;
    }
    out->fwd_ms = median(tf, R);
    out->bwd_ms = median(tb, R);
    layer_memory(s, B, S, Se, RT_FP64, rc, out);
out:
    for (int k = 0; k < have; k++) rt_layer_acts_free(&a[k]);
    free(x), free(y), free(dx), free(ry), free(enc), free(denc), free(tf), free(tb);
    return st;
}

/* Times the LM head and loss on n tokens (under cp this rank's share of them). */
static dp_status time_head(const model_spec *m, int n, int R, int warmup, const rt_tp *tp,
                           const rt_cp *cp, point *out, dp_err *err)
{
    int H = m->hidden, V = tp && tp->size > 1 ? m->vocab / tp->size : m->vocab; /* this rank's rows */
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
        double t0 = 1e3 * dp_now_s();
        if (rt_lm_head_fwd_tp(tp, cp, y, emb, logits, dl, n, H, m->vocab, 0) != 0) {
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory for the LM head on %d tokens", n);
            goto out;
        }
        double t1 = 1e3 * dp_now_s();
        rt_lm_head_bwd_tp(tp, dl, emb, y, dy, demb, n, H, m->vocab);
        double t2 = 1e3 * dp_now_s();
        if (r >= 0) pf[r] = t1 - t0, pb[r] = t2 - t1;
    }
    out->fwd_ms = median(pf, R);
    out->bwd_ms = median(pb, R);
out:
    free(y), free(dy), free(logits), free(dl), free(emb), free(demb), free(pf), free(pb);
    return st;
}

/* The layout a profile's rows were measured with: tp, cp (a column where cp > 1) and, where tp > 1,
 * whether sequence parallelism was on (a column: an SP-off profile must not price SP-on plans). */
typedef struct row_layout {
    int tp, cp, sp;
} row_layout;

/* One row: the layout's tp, the cell, the figure, and the cp and sp columns where written. */
static void write_row(FILE *fp, const row_layout *l, const char *mode, const char *comp,
                      const char *metric, int B, int enc, int dec, double v)
{
    fprintf(fp, "%d,%s,%s,%s,%d,%d,%d,%.6f", l->tp, mode, comp, metric, B, enc, dec, v);
    if (l->cp > 1) fprintf(fp, ",%d", l->cp);
    if (l->tp > 1) fprintf(fp, ",%d", l->sp);
    fputc('\n', fp);
}

static void write_layer(FILE *fp, const row_layout *l, recompute_mode rc, const char *comp, int B,
                        int enc, int dec, const point *p)
{
    const char *m = recompute_name(rc);
    write_row(fp, l, m, comp, "fwd_ms", B, enc, dec, p->fwd_ms);
    write_row(fp, l, m, comp, "bwd_ms", B, enc, dec, p->bwd_ms);
    write_row(fp, l, m, comp, "stored_act_mb", B, enc, dec, p->stored_mb);
    write_row(fp, l, m, comp, "peak_act_mb", B, enc, dec, p->peak_mb);
}

/* The LM head's rows (it does not recompute: the same figures in every mode measured). */
static void write_head(FILE *fp, const row_layout *l, unsigned modes, int B, int enc, int dec,
                       const point *p)
{
    for (int rc = 0; rc < RECOMPUTE_COUNT; rc++) {
        if (!(modes >> rc & 1)) continue;
        const char *m = recompute_name((recompute_mode)rc);
        write_row(fp, l, m, "postprocess", "fwd_ms", B, enc, dec, p->fwd_ms);
        write_row(fp, l, m, "postprocess", "bwd_ms", B, enc, dec, p->bwd_ms);
    }
}

/* The context-parallel map of B rows of S tokens on this rank (cp_group NULL or of size 1: none,
 * *out NULL). Returns DP_OK, or fails naming a seqlen that 2 cp does not divide. */
static dp_status rows_cp(const rt_tp *cp_group, int B, int S, int causal, rt_cp *map,
                         const rt_cp **out, dp_err *err)
{
    *out = NULL;
    if (!cp_group || cp_group->size < 2) return DP_OK;
    int bad = 0, bad_len = 0;
    int rc = rt_cp_split_batch(NULL, B, S, cp_group->size, cp_group->rank, causal, map, &bad, &bad_len);
    if (rc < 0) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    if (rc > 0)
        return dp_fail(err, DP_ERR_INVALID, "seqlen %d: context parallelism cuts each sequence "
                       "into 2 x cp = %d chunks (a --seqlen that %d divides)", S,
                       2 * cp_group->size, 2 * cp_group->size);
    map->group = cp_group;
    *out = map;
    return DP_OK;
}

/* The backend a grid point is measured on: the CPU layer, or (on_gpu) the CUDA layer with the
 * same parameters. The layer at index 1 is T5's decoder. */
typedef struct prober {
    const rt_profile_opts *o;
    const rt_layer_shape *shape[2];
    layer_copies host[2]; /* parameters and gradients on the host */
#ifdef DPRUN_CUDA
    rt_cuda *gpu;
    rt_cuda_layer dev[2];
#endif
} prober;

static dp_status prober_open(prober *pr, dp_err *err)
{
    int t5 = pr->shape[1] != NULL;
    for (int k = 0; k <= t5; k++) {
        layer_copies *lc = &pr->host[k];
        double mb = 8e-6 * (double)rt_layer_params_bind(&lc->p[0], pr->shape[k], NULL);
        lc->copies = pr->o->on_gpu ? 1 : (int)fmin(ROTATE, fmax(1, PARAM_COPIES_MB / mb));
        for (int c = 0; c < lc->copies; c++) {
            if (rt_layer_params_alloc(&lc->p[c], pr->shape[k]) != 0 ||
                rt_layer_params_alloc(&lc->g[c], pr->shape[k]) != 0)
                return dp_fail(err, DP_ERR_NOMEM, "out of memory");
            rt_layer_params_init(&lc->p[c], pr->shape[k], (unsigned)k + 1);
        }
    }
    if (!pr->o->on_gpu) return DP_OK;
#ifdef DPRUN_CUDA
    char why[256];
    if (!(pr->gpu = rt_cuda_open(0, why, sizeof why))) return dp_fail(err, DP_ERR_EXTERNAL, "%s", why);
    for (int k = 0; k <= t5; k++) {
        rt_cuda_layer *l = &pr->dev[k];
        size_t n = pr->host[k].p[0].count;
        *l = (rt_cuda_layer){*pr->shape[k], pr->o->dtype,
                             rt_cuda_params_new(pr->host[k].p[0].block, n, pr->o->dtype), n, NULL, NULL};
        if (!l->block) return dp_fail(err, DP_ERR_EXTERNAL, "cannot copy the layer to the GPU");
    }
    return DP_OK;
#else
    return dp_fail(err, DP_ERR_UNSUPPORTED, "this dprun was built without CUDA (no nvcc, cuBLAS, "
                   "cuBLASLt or cuDNN was found at build time)");
#endif
}

static void prober_close(prober *pr)
{
    for (int k = 0; k < 2; k++)
        for (int c = 0; c < pr->host[k].copies; c++)
            rt_layer_params_free(&pr->host[k].p[c]), rt_layer_params_free(&pr->host[k].g[c]);
#ifdef DPRUN_CUDA
    for (int k = 0; k < 2; k++) rt_cuda_free(pr->dev[k].block);
    if (pr->gpu) rt_cuda_close(pr->gpu);
#endif
}

/* One layer (k: 0 the encoder / GPT layer, 1 T5's decoder) on (B, S), against an encoder output
 * of length Se for the decoder. */
static dp_status probe_layer(prober *pr, int k, int B, int S, int Se, recompute_mode rc, point *pt,
                             dp_err *err)
{
    const rt_profile_opts *o = pr->o;
    int R = o->repeats > 0 ? o->repeats : 1;
    if (o->sync) o->sync();
    if (!o->on_gpu) {
        rt_cp map;
        const rt_cp *cp;
        dp_status st = rows_cp(o->cp, B, S, pr->shape[k]->causal, &map, &cp, err);
        if (st == DP_OK)
            st = time_layer(&pr->host[k], pr->shape[k], B, S, Se, rc, R, o->warmup, o->tp,
                            cp, pt, err);
        if (cp) rt_cp_free(&map);
        return st;
    }
#ifdef DPRUN_CUDA
    memset(pt, 0, sizeof *pt);
    rt_batch mb = {B, S, Se, NULL, NULL, NULL};
    if (rt_cuda_time_layer(pr->gpu, &pr->dev[k], &mb, rc, R, &pt->fwd_ms, &pt->bwd_ms) != 0) {
        char why[240] = "";
        rt_cuda_sync(pr->gpu, why, sizeof why);
        return dp_fail(err, DP_ERR_EXTERNAL, "the GPU failed at mbs %d, seqlen %d: %s", B, S,
                       why[0] ? why : "out of device memory?");
    }
    layer_memory(pr->shape[k], B, S, Se, o->dtype, rc, pt);
#endif
    return DP_OK;
}

/* The LM head and loss on B x S tokens. */
static dp_status probe_head(prober *pr, int B, int S, point *pt, dp_err *err)
{
    const rt_profile_opts *o = pr->o;
    int R = o->repeats > 0 ? o->repeats : 1, n = B * S;
    if (o->sync) o->sync();
    if (!o->on_gpu) {
        rt_cp map;
        const rt_cp *cp;
        dp_status st = rows_cp(o->cp, B, S, 1, &map, &cp, err);
        if (st == DP_OK) st = time_head(o->model, rt_cp_tokens(cp, n), R, o->warmup, o->tp, cp, pt, err);
        if (cp) rt_cp_free(&map);
        return st;
    }
#ifdef DPRUN_CUDA
    memset(pt, 0, sizeof *pt);
    if (rt_cuda_time_head(pr->gpu, n, o->model->hidden, o->model->vocab, o->dtype, R,
                          &pt->fwd_ms, &pt->bwd_ms) != 0)
        return dp_fail(err, DP_ERR_EXTERNAL, "the GPU failed on the LM head at %d tokens (out of "
                       "device memory?)", n);
#endif
    return DP_OK;
}

/* One point of the grid: the LM head on B x S tokens (layer < 0; T5's on its decoder length), or
 * a layer (0 the encoder / GPT layer, 1 T5's decoder) on (B, S) against an encoder output of Se,
 * under recompute mode rc; its rows are written as (B, enc, dec). */
typedef struct cell {
    int layer, B, S, Se, rc, enc, dec;
    double *tf, *tb; /* one figure a pass */
    point pt;
} cell;

static dp_status probe_cell(prober *pr, cell *c, point *pt, dp_err *err)
{
    return c->layer < 0 ? probe_head(pr, c->B, c->S, pt, err)
                        : probe_layer(pr, c->layer, c->B, c->S, c->Se, (recompute_mode)c->rc, pt,
                                      err);
}

/* The grid's points in the order their rows are written; *n of them (malloc'd). */
static cell *grid_cells(const rt_profile_opts *o, int t5, unsigned modes, int *n)
{
    const int *decs = o->n_dec_seqlen ? o->dec_seqlen : o->seqlen;
    int n_dec = o->n_dec_seqlen ? o->n_dec_seqlen : o->n_seqlen, cap = 0, k = 0;
    cap = o->n_mbs * o->n_seqlen * (1 + RECOMPUTE_COUNT * (1 + n_dec)) + o->n_mbs * n_dec;
    cell *c = calloc((size_t)cap, sizeof *c);
    if (!c) return NULL;
    for (int i = 0; i < o->n_mbs; i++)
        for (int j = 0; j < o->n_seqlen; j++) {
            int B = o->mbs[i], S = o->seqlen[j];
            if (!t5) c[k++] = (cell){-1, B, S, 0, 0, S, 0, NULL, NULL, {0, 0, 0, 0}};
            for (int rc = 0; rc < RECOMPUTE_COUNT; rc++) {
                if (!(modes >> rc & 1)) continue;
                c[k++] = (cell){0, B, S, 0, rc, S, 0, NULL, NULL, {0, 0, 0, 0}};
                for (int d = 0; t5 && d < n_dec; d++) /* decoder on (enc S, dec D) */
                    c[k++] = (cell){1, B, decs[d], S, rc, S, decs[d], NULL, NULL, {0, 0, 0, 0}};
            }
        }
    for (int i = 0; t5 && i < o->n_mbs; i++) /* T5's head: decoder lengths */
        for (int d = 0; d < n_dec; d++)
            c[k++] = (cell){-1, o->mbs[i], decs[d], 0, 0, 0, decs[d], NULL, NULL, {0, 0, 0, 0}};
    *n = k;
    return c;
}

dp_status rt_profile(const rt_profile_opts *o, dp_err *err)
{
    const model_spec *m = o->model;
    int t5 = m->arch == ARCH_T5;
    int tp = o->tp && o->tp->size > 1 ? o->tp->size : 1, cp = o->cp && o->cp->size > 1 ? o->cp->size : 1;
    rt_layer_shape enc_whole = rt_layer_shape_of(m, t5 ? RT_LAYER_ENCODER : RT_LAYER_GPT);
    rt_layer_shape dec_shape = rt_layer_shape_of(m, RT_LAYER_DECODER);
    rt_layer_shape enc_shape = rt_layer_shape_tp(&enc_whole, tp, 1); /* this rank's share */
    enc_shape.cp = cp;                                            /* ... of the tokens */
    prober pr;
    memset(&pr, 0, sizeof pr);
    unsigned modes = o->modes ? o->modes : 1u << RECOMPUTE_NONE;
    int n = 0, R = o->repeats > 0 ? o->repeats : 1;
    /* On the CPU the repeats are passes over the whole grid, each point's median taken at the
     * end: an interruption of the machine (another process, a neighbour's burst) then spoils one
     * pass of many points, which the median drops, instead of every repeat of a few points (the
     * CPU round trip's error varied 1.6-12% with the profile measured repeat by repeat). The GPU
     * times its repeats back to back (CUDA events, no such interruptions). */
    int passes = o->on_gpu ? 1 : R;
    rt_profile_opts per = *o;
    per.repeats = o->on_gpu ? R : 1;
    pr.o = &per;
    pr.shape[0] = &enc_shape;
    pr.shape[1] = t5 ? &dec_shape : NULL;
    cell *cells = grid_cells(o, t5, modes, &n);
    double *times = cells ? malloc((size_t)n * 2 * (size_t)passes * sizeof *times) : NULL;
    if (!cells || !times) {
        free(cells), free(times);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++)
        cells[i].tf = times + (size_t)i * 2 * passes, cells[i].tb = cells[i].tf + passes;
    dp_status st = prober_open(&pr, err);
    out_file of;
    int opened = 0;
    if (st == DP_OK) st = out_open(&of, o->out, err), opened = st == DP_OK;
    for (int p = 0; p < passes && st == DP_OK; p++)
        for (int i = 0; i < n && st == DP_OK; i++) {
            point pt = {0};
            if ((st = probe_cell(&pr, &cells[i], &pt, err)) != DP_OK) break;
            cells[i].tf[p] = pt.fwd_ms, cells[i].tb[p] = pt.bwd_ms;
            cells[i].pt = pt; /* the memory figures: the same every pass */
        }
    if (st == DP_OK) {
        FILE *fp = of.fp;
        row_layout lay = {tp, cp, o->tp && o->tp->size > 1 ? o->tp->sp : 0};
        fprintf(fp, "tp,recompute,component,metric,mbs,enc_seqlen,dec_seqlen,value%s%s\n",
                cp > 1 ? ",cp" : "", tp > 1 ? ",sp" : "");
        for (int i = 0; i < n; i++) {
            cell *c = &cells[i];
            c->pt.fwd_ms = median(c->tf, passes);
            c->pt.bwd_ms = median(c->tb, passes);
            if (c->layer < 0) {
                write_head(fp, &lay, modes, c->B, c->enc, c->dec, &c->pt);
                continue;
            }
            write_layer(fp, &lay, (recompute_mode)c->rc, c->layer ? "decoder" : "encoder", c->B,
                        c->enc, c->dec, &c->pt);
            if (o->progress && c->layer == 0)
                fprintf(stderr, "dprun profile: mbs %d seqlen %d%s%s: fwd %.3f ms, bwd %.3f ms per "
                        "layer (%s, %s)\n", c->B, c->S, c->rc ? ", recompute " : "",
                        c->rc ? recompute_name((recompute_mode)c->rc) : "", c->pt.fwd_ms,
                        c->pt.bwd_ms, o->on_gpu ? "GPU" : "CPU", rt_dtype_name(o->dtype));
        }
    }
    prober_close(&pr);
    free(cells), free(times);
    if (opened) {
        if (st == DP_OK) st = out_commit(&of, err);
        else out_abort(&of);
    }
    return st;
}
