/*
 * test_ragged.c — runtime/ragged.h, the packed-sequence (THD) description that cuDNN's ragged
 * attention reads: on random micro-batches (rows holding several samples, some without keys),
 * every query token the kernel is told of is checked against the rt_seqs it came from, token by
 * token (a walk written here over the tokens, not over the offsets), the padding to the buckets
 * and the end entries against their definitions, the upload unpacked again at 32 and 64 bits,
 * and the refusals. cuDNN's ragged attention as its documentation defines it, emulated on the
 * host from nothing but the description, must give the CPU layer's attention output, and the
 * statistics moved into layout.h's blocks a log-sum-exp computed here. Where the CUDA backend
 * is built, cuDNN itself then checks every descriptor of the attention graphs built from them
 * (runtime/cuda/sdpa_cudnn.cu; host-side finalisation, no GPU needed): whole rows and ragged,
 * causal and not, self- and cross-attention, 32- and 64-bit offsets.
 */
#include "testutil.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../runtime/ragged.h"
#ifdef DPRUN_CUDA
#include "../../runtime/cuda/layer_cuda.h"
#endif

static void test_bucket(void **state)
{
    (void)state;
    assert_int_equal(rt_ragged_bucket(1, 64), 64);
    assert_int_equal(rt_ragged_bucket(64, 64), 64);
    assert_int_equal(rt_ragged_bucket(65, 64), 128);
    assert_int_equal(rt_ragged_bucket(5, 1), 8);
    assert_int_equal(rt_ragged_bucket(1, 1), 1);
    assert_int_equal(rt_ragged_bucket(0, 1), 1);
}

/* A micro-batch of B rows of S tokens, each row cut into samples of random lengths; the keys
 * are the same sequences (self-attention) or another packing (cross-attention, some samples
 * without encoder tokens). */
typedef struct batch {
    int n, off[256], len[256], koff[256], klen[256];
} batch;

static unsigned lcg(unsigned *s)
{
    *s = *s * 1664525u + 1013904223u;
    return *s >> 8;
}

static void random_batch(batch *b, int B, int S, int Se, int cross, unsigned *seed)
{
    b->n = 0;
    for (int r = 0; r < B; r++) {
        int at = 0, kat = 0;
        while (at < S && b->n < 256) {
            int len = 1 + (int)(lcg(seed) % (unsigned)S);
            if (len > S - at) len = S - at;
            if (lcg(seed) % 5 == 0 && at + len < S) at += 1; /* a padding token between samples */
            if (at + len > S) break;
            int klen = cross ? (int)(lcg(seed) % 4) * 3 : len; /* cross: 0, 3, 6 or 9 keys */
            if (cross && kat + klen > Se) klen = 0;
            b->off[b->n] = r * S + at, b->len[b->n] = len;
            b->koff[b->n] = cross ? r * Se + kat : r * S + at, b->klen[b->n] = klen;
            b->n++, at += len, kat += klen;
        }
    }
}

static void check_against_tokens(const batch *b, const rt_ragged *r, int ldq, int ldkv, int ldo,
                                 int B, int S)
{
    /* the query tokens each given sequence covers, from the kernel's view */
    int *seen = calloc((size_t)B * S, sizeof *seen), given = 0, mq = 0, mk = 0;
    assert_non_null(seen);
    for (int c = 0; c < r->n; c++) {
        if (c >= r->used) { /* padding: empty, at the end */
            assert_int_equal(r->seq_q[c], 0);
            assert_int_equal(r->seq_k[c], 0);
        }
        for (int i = 0; i < r->seq_q[c]; i++) {
            long long e = r->off_q[c] + (long long)i * ldq;
            assert_int_equal(e % ldq, 0);
            long long t = e / ldq;
            assert_true(t >= 0 && t < (long long)B * S);
            assert_int_equal(seen[t], 0);
            seen[t] = c + 1;
            assert_int_equal(r->off_o[c] + (long long)i * ldo, t * ldo);
        }
        assert_int_equal(r->tok_q[c] * (long long)ldq, r->off_q[c]);
        assert_true(r->off_q[c + 1] >= r->off_q[c] + (long long)r->seq_q[c] * ldq);
        assert_true(r->off_k[c + 1] >= r->off_k[c] + (long long)r->seq_k[c] * ldkv);
    }
    for (int j = 0, c = 0; j < b->n; j++) {
        int has = b->len[j] > 0 && b->klen[j] > 0;
        for (int i = 0; i < b->len[j]; i++)
            assert_int_equal(seen[b->off[j] + i] != 0, has);
        if (!has) continue;
        given++;
        mq = b->len[j] > mq ? b->len[j] : mq, mk = b->klen[j] > mk ? b->klen[j] : mk;
        assert_int_equal(r->src[c], j);
        assert_int_equal(seen[b->off[j]], c + 1);
        assert_int_equal(r->seq_k[c], b->klen[j]);
        assert_int_equal(r->off_k[c], (long long)b->koff[j] * ldkv);
        c++;
    }
    assert_int_equal(r->used, given);
    assert_int_equal(r->n, rt_ragged_bucket(given, 1));
    assert_true(r->n >= given && r->n < 2 * given + 1);
    assert_int_equal(r->max_q, rt_ragged_bucket(mq, RT_RAGGED_MIN_LEN));
    assert_int_equal(r->max_k, rt_ragged_bucket(mk, RT_RAGGED_MIN_LEN));
    /* entry n is the end of the last given sequence */
    int last = r->src[r->used - 1];
    assert_int_equal(r->off_q[r->n], ((long long)b->off[last] + b->len[last]) * ldq);
    assert_int_equal(r->off_k[r->n], ((long long)b->koff[last] + b->klen[last]) * ldkv);
    free(seen);
}

static void test_random_batches(void **state)
{
    (void)state;
    unsigned seed = 11;
    for (int trial = 0; trial < 400; trial++) {
        int B = 1 + (int)(lcg(&seed) % 4), S = 8 + (int)(lcg(&seed) % 200), Se = 40;
        int cross = trial % 3 == 2, hk = 64 * (1 + (int)(lcg(&seed) % 4));
        int ldq = cross ? hk : 3 * hk, ldkv = cross ? 2 * hk : 3 * hk, ldo = hk;
        batch b;
        random_batch(&b, B, S, Se, cross, &seed);
        rt_seqs qs = {.n = b.n, .off = b.off, .len = b.len}, ks = {.n = b.n, .off = b.koff, .len = b.klen};
        rt_ragged r;
        char why[128] = "";
        int given = 0;
        for (int j = 0; j < b.n; j++) given += b.len[j] > 0 && b.klen[j] > 0;
        int rc = rt_ragged_build(&r, &qs, &ks, ldq, ldkv, ldo, why, sizeof why);
        if (given == 0) {
            assert_int_equal(rc, -1);
            assert_true(why[0] != '\0');
            continue;
        }
        if (rc != 0) fail_msg("trial %d: refused: %s", trial, why);
        assert_int_equal(r.wide, 0);
        check_against_tokens(&b, &r, ldq, ldkv, ldo, B, S);
        rt_ragged_release(&r);
        assert_null(r.seq_q);
    }
}

/* The upload unpacked: every array at its offset, 16-byte aligned, in 32 or 64 bits. */
static void unpack_matches(const rt_ragged *r)
{
    size_t at[RT_RG_COUNT], bytes = rt_ragged_pack(r, NULL, at);
    unsigned char *blob = malloc(bytes);
    assert_non_null(blob);
    memset(blob, 0xAB, bytes);
    size_t again[RT_RG_COUNT];
    assert_int_equal(rt_ragged_pack(r, blob, again), bytes);
    const int *ints[3] = {r->seq_q, r->seq_k, r->tok_q};
    const long long *offs[3] = {r->off_q, r->off_k, r->off_o};
    for (int a = 0; a < RT_RG_COUNT; a++) {
        assert_int_equal(at[a], again[a]);
        assert_int_equal(at[a] % 16, 0);
        if (a > 0) assert_true(at[a] > at[a - 1]);
    }
    for (int a = 0; a < 3; a++)
        for (int i = 0; i < r->n; i++) {
            int32_t v;
            memcpy(&v, blob + at[a] + 4 * (size_t)i, 4);
            assert_int_equal(v, ints[a][i]);
        }
    for (int a = 0; a < 3; a++)
        for (int i = 0; i <= r->n; i++) {
            long long v;
            if (r->wide) {
                int64_t w;
                memcpy(&w, blob + at[3 + a] + 8 * (size_t)i, 8);
                v = w;
            } else {
                int32_t w;
                memcpy(&w, blob + at[3 + a] + 4 * (size_t)i, 4);
                v = w;
            }
            assert_int_equal(v, offs[a][i]);
        }
    assert_true(at[RT_RG_OFF_O] + (r->wide ? 8u : 4u) * (size_t)(r->n + 1) <= bytes);
    free(blob);
}

static void test_pack(void **state)
{
    (void)state;
    int off[3] = {0, 5, 40}, len[3] = {5, 30, 7};
    rt_seqs s = {.n = 3, .off = off, .len = len};
    rt_ragged r;
    char why[128];
    assert_int_equal(rt_ragged_build(&r, &s, &s, 3 * 4096, 3 * 4096, 4096, why, sizeof why), 0);
    assert_int_equal(r.n, 4);
    assert_int_equal(r.max_q, 64);
    assert_int_equal(r.wide, 0);
    assert_int_equal(r.off_q[3], 47LL * 3 * 4096); /* the padding entry and the end */
    assert_int_equal(r.off_q[4], 47LL * 3 * 4096);
    unpack_matches(&r);
    rt_ragged_release(&r);
    /* offsets beyond 32 bits: a long micro-batch of a wide model (T5-11B's 49152-element rows) */
    int off2[2] = {0, 50000}, len2[2] = {50000, 16000};
    rt_seqs s2 = {.n = 2, .off = off2, .len = len2};
    assert_int_equal(rt_ragged_build(&r, &s2, &s2, 49152, 49152, 16384, why, sizeof why), 0);
    assert_int_equal(r.wide, 1);
    assert_int_equal(r.max_q, 65536);
    assert_int_equal(r.off_q[1], 50000LL * 49152);
    unpack_matches(&r);
    rt_ragged_release(&r);
    rt_ragged_release(NULL);
}

static void test_refusals(void **state)
{
    (void)state;
    rt_ragged r;
    char why[128];
    int off[2] = {10, 0}, len[2] = {4, 4}; /* out of order */
    rt_seqs s = {.n = 2, .off = off, .len = len};
    why[0] = '\0';
    assert_int_equal(rt_ragged_build(&r, &s, &s, 8, 8, 8, why, sizeof why), -1);
    assert_true(why[0] != '\0');
    assert_null(r.seq_q);
    int off2[2] = {0, 3}, len2[2] = {4, 4}; /* overlapping */
    rt_seqs s2 = {.n = 2, .off = off2, .len = len2};
    assert_int_equal(rt_ragged_build(&r, &s2, &s2, 8, 8, 8, why, sizeof why), -1);
    int koff[2] = {0, 4}, klen[2] = {0, 0}; /* no keys anywhere */
    int off3[2] = {0, 4}, len3[2] = {4, 4};
    rt_seqs q3 = {.n = 2, .off = off3, .len = len3}, k3 = {.n = 2, .off = koff, .len = klen};
    why[0] = '\0';
    assert_int_equal(rt_ragged_build(&r, &q3, &k3, 8, 8, 8, why, sizeof why), -1);
    assert_non_null(strstr(why, "keys"));
    rt_seqs k1 = {.n = 1, .off = koff, .len = klen}; /* counts differ */
    assert_int_equal(rt_ragged_build(&r, &q3, &k1, 8, 8, 8, why, sizeof why), -1);
}

/* cuDNN's ragged attention as documented, reading nothing but r: entry c's query i, head h, at
 * q + off_q[c] + i ldq + h d, its key j at k + off_k[c] + j ldkv + h d (values alike), rows
 * i < seq_q[c] and keys j < seq_k[c] (j <= i when causal, the top-left causal mask), the output
 * at o + off_o[c] + i ldo + h d and max + log(sum) into the dense statistics. */
static void emulate_cudnn_fwd(const rt_ragged *r, const double *q, const double *k,
                              const double *v, int ldq, int ldkv, int ldo, int a, int d,
                              int causal, double *o, double *stats)
{
    double *sc = malloc((size_t)r->max_k * sizeof *sc);
    assert_non_null(sc);
    for (int c = 0; c < r->n; c++)
        for (int h = 0; h < a; h++)
            for (int i = 0; i < r->seq_q[c]; i++) {
                const double *qi = q + r->off_q[c] + (long long)i * ldq + h * d;
                int keys = causal && i + 1 < r->seq_k[c] ? i + 1 : r->seq_k[c];
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < keys; j++) {
                    const double *kj = k + r->off_k[c] + (long long)j * ldkv + h * d;
                    double dot = 0;
                    for (int e = 0; e < d; e++) dot += qi[e] * kj[e];
                    sc[j] = dot / sqrt((double)d);
                    mx = sc[j] > mx ? sc[j] : mx;
                }
                for (int j = 0; j < keys; j++) sum += exp(sc[j] - mx);
                double *oi = o + r->off_o[c] + (long long)i * ldo + h * d;
                for (int e = 0; e < d; e++) {
                    double acc = 0;
                    for (int j = 0; j < keys; j++)
                        acc += exp(sc[j] - mx) / sum * v[r->off_k[c] + (long long)j * ldkv + h * d + e];
                    oi[e] = acc;
                }
                stats[rt_ragged_stat_at(a, r->max_q, c, h, i)] = mx + log(sum);
            }
    free(sc);
}

static void fill(double *x, size_t n, unsigned *seed)
{
    for (size_t i = 0; i < n; i++) x[i] = (double)(lcg(seed) % 2001) / 1000.0 - 1.0;
}

static void test_emulated_cudnn_is_the_layers_attention(void **state)
{
    (void)state;
    unsigned seed = 5;
    const int a = 2, d = 4, hk = a * d;
    for (int trial = 0; trial < 60; trial++) {
        int B = 1 + (int)(lcg(&seed) % 3), S = 8 + (int)(lcg(&seed) % 40), Se = 40;
        int cross = trial % 2, causal = !cross;
        int ldq = cross ? hk : 3 * hk, ldkv = cross ? 2 * hk : 3 * hk, ldo = hk;
        batch b;
        random_batch(&b, B, S, Se, cross, &seed);
        rt_seqs qs = {.n = b.n, .off = b.off, .len = b.len}, ks = {.n = b.n, .off = b.koff, .len = b.klen};
        rt_ragged r;
        char why[128];
        if (rt_ragged_build(&r, &qs, &ks, ldq, ldkv, ldo, why, sizeof why) != 0) continue;
        size_t nq = (size_t)B * S, nk = cross ? (size_t)B * Se : nq;
        double *qm = malloc(nq * ldq * sizeof *qm), *km = cross ? malloc(nk * ldkv * sizeof *km) : qm;
        double *o = calloc(nq * ldo, sizeof *o), *ctx = calloc(nq * ldo, sizeof *ctx);
        double *p = calloc((size_t)a * rt_seqs_pairs(&qs, &ks) + 1, sizeof *p);
        double *stats = calloc((size_t)r.n * a * r.max_q, sizeof *stats);
        double *lse = calloc(nq * a, sizeof *lse);
        assert_true(qm && km && o && ctx && p && stats && lse);
        fill(qm, nq * ldq, &seed);
        if (cross) fill(km, nk * ldkv, &seed);
        /* self-attention: q, k, v are the fused projection's thirds; cross: q apart, [k | v] */
        const double *q = qm, *k = cross ? km : qm + hk, *v = cross ? km + hk : qm + 2 * hk;
        emulate_cudnn_fwd(&r, q, k, v, ldq, ldkv, ldo, a, d, causal, o, stats);
        rt_attention_fwd(q, k, v, ldq, ldkv, p, ctx, &qs, &ks, a, a, d, causal);
        for (size_t i = 0; i < nq * ldo; i++)
            if (fabs(o[i] - ctx[i]) > 1e-12)
                fail_msg("trial %d: output element %zu: emulated cuDNN %.15g, the layer %.15g", trial,
                         i, o[i], ctx[i]);
        /* the statistics moved as the kernel moves them, then read at layout.h's place */
        for (int c = 0; c < r.used; c++)
            for (int h = 0; h < a; h++)
                for (int i = 0; i < r.seq_q[c]; i++)
                    lse[rt_ragged_lse_at(a, r.tok_q[c], r.seq_q[c], h, i)] =
                        stats[rt_ragged_stat_at(a, r.max_q, c, h, i)];
        for (int j = 0; j < b.n; j++) {
            if (b.len[j] == 0 || b.klen[j] == 0) continue;
            for (int h = 0; h < a; h++)
                for (int i = 0; i < b.len[j]; i++) {
                    /* layout.h: sequence j's (a, lq) block at a * off[j] */
                    double got = lse[(size_t)a * b.off[j] + (size_t)h * b.len[j] + i], sum = 0;
                    int keys = causal && i + 1 < b.klen[j] ? i + 1 : b.klen[j];
                    for (int t = 0; t < keys; t++) {
                        double dot = 0;
                        for (int e = 0; e < d; e++)
                            dot += q[(size_t)(b.off[j] + i) * ldq + h * d + e] *
                                   k[(size_t)(b.koff[j] + t) * ldkv + h * d + e];
                        sum += exp(dot / sqrt((double)d));
                    }
                    if (fabs(got - log(sum)) > 1e-12)
                        fail_msg("trial %d: sequence %d head %d query %d: log-sum-exp %.15g, expected %.15g",
                                 trial, j, h, i, got, log(sum));
                }
        }
        free(qm);
        if (cross) free(km);
        free(o), free(ctx), free(p), free(stats), free(lse);
        rt_ragged_release(&r);
    }
}

static void test_cudnn_accepts_the_attention_descriptors(void **state)
{
    (void)state;
#ifdef DPRUN_CUDA
    char why[400];
    int off[3] = {0, 40, 128}, len[3] = {40, 88, 60}; /* two rows of 128: 2 + 1 samples */
    int eoff[3] = {0, 30, 64}, elen[3] = {30, 34, 50}; /* their encoder tokens, rows of 64 */
    rt_seqs seqs = {.n = 3, .off = off, .len = len}, enc = {.n = 3, .off = eoff, .len = elen};
    struct {
        const char *name;
        rt_batch mb;
        int a, g, d, causal, cross;
    } cases[] = {
        {"GPT rows", {2, 128, 0, NULL, NULL, NULL}, 4, 4, 64, 1, 0},
        {"T5 encoder rows", {2, 128, 0, NULL, NULL, NULL}, 4, 4, 64, 0, 0},
        {"T5 cross rows", {2, 128, 64, NULL, NULL, NULL}, 4, 4, 64, 0, 1},
        {"GPT ragged", {2, 128, 0, &seqs, NULL, NULL}, 4, 4, 64, 1, 0},
        {"T5 encoder ragged", {2, 128, 0, &seqs, NULL, NULL}, 4, 4, 64, 0, 0},
        {"T5 cross ragged", {2, 128, 64, &seqs, &enc, NULL}, 4, 4, 64, 0, 1},
        {"GPT-6.7B ragged", {2, 128, 0, &seqs, NULL, NULL}, 32, 32, 128, 1, 0},
        /* grouped-query attention: Llama-3-8B's 32 query heads on 8, rows and ragged; MQA */
        {"Llama-3-8B rows", {2, 128, 0, NULL, NULL, NULL}, 32, 8, 128, 1, 0},
        {"Llama-3-8B ragged", {2, 128, 0, &seqs, NULL, NULL}, 32, 8, 128, 1, 0},
        {"multi-query cross ragged", {2, 128, 64, &seqs, &enc, NULL}, 4, 1, 64, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        why[0] = '\0';
        if (rt_cuda_sdpa_check_descriptors(&cases[i].mb, cases[i].a, cases[i].g, cases[i].d,
                                           cases[i].causal, cases[i].cross, why, sizeof why) != 0)
            fail_msg("%s: cuDNN refused a descriptor: %s", cases[i].name, why);
    }
    /* 64-bit offsets: T5-11B's width (128 heads of 128) over 66,000 tokens */
    int woff[2] = {0, 50000}, wlen[2] = {50000, 16000};
    rt_seqs wide = {.n = 2, .off = woff, .len = wlen};
    rt_batch mb = {1, 66000, 0, &wide, NULL, NULL};
    if (rt_cuda_sdpa_check_descriptors(&mb, 128, 128, 128, 0, 0, why, sizeof why) != 0)
        fail_msg("64-bit offsets: cuDNN refused a descriptor: %s", why);
    /* and what cannot be given to cuDNN is said */
    int boff[2] = {64, 0}, blen[2] = {10, 10};
    rt_seqs bad = {.n = 2, .off = boff, .len = blen};
    rt_batch mb_bad = {1, 128, 0, &bad, NULL, NULL};
    assert_int_equal(rt_cuda_sdpa_check_descriptors(&mb_bad, 4, 4, 64, 1, 0, why, sizeof why), -1);
    assert_non_null(strstr(why, "order"));
#else
    skip();
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bucket),
        cmocka_unit_test(test_random_batches),
        cmocka_unit_test(test_pack),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_emulated_cudnn_is_the_layers_attention),
        cmocka_unit_test(test_cudnn_accepts_the_attention_descriptors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
