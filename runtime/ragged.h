/*
 * ragged.h — one attention call's packed sequences as a fused attention kernel takes them: the
 * THD ("ragged") form of cuDNN's scaled-dot-product attention, whose Q, K, V and O tensors carry
 * ragged offsets and whose scores a padding mask cuts to each sequence's lengths
 * (runtime/cuda/sdpa_cudnn.cu). Host arithmetic only, so that it is tested without a GPU.
 *
 * A micro-batch's queries are sequences qs (layer.h rt_seqs: token offsets and lengths within
 * its B*S rows), sequence j attending to sequence j of the keys ks. The kernel sees a batch of n
 * sequences of at most max_q queries and max_k keys; its sequence c has seq_q[c] queries whose
 * first element is off_q[c] elements into the query matrix (the token offset times the matrix's
 * row length ldq), seq_k[c] keys at off_k[c] (rows of ldkv; the values share the keys' offsets)
 * and its output at off_o[c] (rows of ldo).
 *
 * Which sequences, and why the padding:
 *   - the given ones are qs's sequences that have queries and keys, in order (one without either
 *     has nothing to attend: the caller's zeroed output stands, as on the GEMM path);
 *   - then empty ones (lengths 0, offsets at the end of the last) up to n, a power of two, and
 *     max_q, max_k are powers of two of at least RT_RAGGED_MIN_LEN: cuDNN builds a plan per
 *     shape, an expensive step, so micro-batches of similar shape share one;
 *   - entry n of each offset array is the end of the last sequence (the kernel's convention).
 * The kernel needs each sequence's tokens contiguous and the sequences in increasing order, as
 * rt_seqs makes them; other input is refused, and the caller runs its GEMM path instead.
 *
 * The arrays go to the device in one upload (rt_ragged_pack): seq_q, seq_k and tok_q (the given
 * sequences' first query token, for the log-sum-exp's layout; n int32 each), then off_q, off_k,
 * off_o (n + 1 each: int32, or int64 when some offset exceeds INT32_MAX: `wide`), each array at a
 * multiple of 16 bytes.
 */
#ifndef RT_RAGGED_H
#define RT_RAGGED_H

#include <stddef.h>
#include <stdint.h>

#include "layer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RT_RAGGED_MIN_LEN 64 /* the smallest max_q, max_k: tokens */

typedef struct rt_ragged {
    int n;            /* sequences the kernel sees (a power of two) */
    int used;         /* the given ones among them: the first `used` */
    int max_q, max_k; /* the kernel's sequence dimensions: tokens */
    int wide;         /* the offsets need 64 bits */
    int *src;         /* [used]: the index in qs of given sequence c */
    int *seq_q, *seq_k, *tok_q;       /* [n]: tokens */
    long long *off_q, *off_k, *off_o; /* [n + 1]: elements */
} rt_ragged;

/* Builds r from the paired sequences qs and ks (the same count) and the row lengths (elements) of
 * the query, key/value and output matrices. 0 on success; -1 with r empty and `why` (a sentence)
 * when the sequences cannot be given to the kernel: none has queries and keys, or they are not
 * contiguous and in order. Aborts when out of host memory (a few ints per sequence). */
int rt_ragged_build(rt_ragged *r, const rt_seqs *qs, const rt_seqs *ks, int ldq, int ldkv,
                    int ldo, char *why, size_t why_cap);
void rt_ragged_release(rt_ragged *r); /* frees the arrays; r empty; NULL-safe */

/* The upload's arrays in order, and their byte offsets (at[]) within it. */
enum { RT_RG_SEQ_Q, RT_RG_SEQ_K, RT_RG_TOK_Q, RT_RG_OFF_Q, RT_RG_OFF_K, RT_RG_OFF_O, RT_RG_COUNT };

/* Writes the upload into blob (NULL: only sizes it) and at[] (may be NULL); returns its bytes. */
size_t rt_ragged_pack(const rt_ragged *r, void *blob, size_t at[RT_RG_COUNT]);

/* The power of two >= max(v, floor) (floor >= 1). */
int rt_ragged_bucket(int v, int floor);

/* The softmax statistics of query i (head h) of given sequence c, which starts at token tok_q
 * and has lq queries: where the kernel keeps it in its dense [n, a, max_q] statistics, and where
 * layout.h keeps it (the sequence's (a, lq) block at a * tok_q). The CUDA kernel that moves them
 * between the two and the tests both use these. */
#if defined(__CUDACC__)
#define RT_RAGGED_HD __host__ __device__
#else
#define RT_RAGGED_HD
#endif
static inline RT_RAGGED_HD long long rt_ragged_stat_at(int a, int max_q, int c, int h, int i)
{
    return ((long long)c * a + h) * max_q + i;
}
static inline RT_RAGGED_HD long long rt_ragged_lse_at(int a, int tok_q, int lq, int h, int i)
{
    return (long long)a * tok_q + (long long)h * lq + i;
}

#ifdef __cplusplus
}
#endif

#endif /* RT_RAGGED_H */
