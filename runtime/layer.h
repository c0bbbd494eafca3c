/*
 * layer.h — a real transformer layer on the CPU, forward and backward, for dprun's cpu backend.
 *
 * Pre-LN block (GPT-2 / Megatron style), on a micro-batch of shape (B, S, H):
 *
 *   h1  = LN1(x)                           layer norm with scale and bias, eps 1e-5; RMSNorm
 *                                          (shape.rmsnorm, LLaMA): a scale, no mean, no bias
 *   qkv = h1 Wqkv + bqkv                   (B*S, HK + 2 HKV), HK = heads * kv, HKV = kv_heads *
 *                                          kv (layout.h); no biases anywhere with shape.no_bias
 *   q, k rotated (RoPE, shape.rope_base)        by each token's position in its sequence (rt_rope)
 *   ctx = softmax(q k^T / sqrt(kv) + mask) v   per (sequence, head): a row, or a varlen
 *                                          micro-batch's sample (rt_seqs); mask causal (GPT,
 *                                          T5 decoder) or none (T5 encoder)
 *   x2  = x + ctx Wo + bo
 *   h2  = LN2(x2)
 *   u   = h2 W1 + b1,  g = GELU(u)         (tanh approximation); with SwiGLU (shape.glu, LLaMA)
 *                                          u = [gate | up] (B*S, 2F), g = silu(gate) o up
 *   y   = x2 + g W2 + b2
 *
 * A T5 decoder layer (shape.cross) adds cross-attention between the self-attention and the MLP,
 * its keys and values projected from the encoder output e (B, Se, H):
 *   hc = LNc(x2), qc = hc Wqc + bqc, kvc = e Wkvc + bkvc, x2 += softmax(qc kc^T/sqrt(kv)) vc Woc + boc
 * (the MLP then reads that x2), each sample's decoder tokens attending to its own encoder
 * tokens. Its backward also returns the gradient of e.
 *
 * Every op is its own function pair (forward, backward) so that each is gradient-checked against
 * finite differences on small shapes (tests/unit/test_layer.c). The backward of the linear ops is
 * split into the input gradient (rt_linear_bwd_input, ZB-H1's B) and the weight gradient
 * (rt_linear_bwd_weight, its W). GEMMs go through CBLAS (OpenBLAS from Debian). Values are fp64:
 * dprun measures time, and fp64 keeps the gradient checks tight (the GPU's bf16 layer,
 * runtime/cuda/, is checked against this arithmetic by dprun check-gpu). What the layer stores
 * where is runtime/layout.h's.
 *
 * Matrices are row-major; shapes are in the comments as (rows, cols).
 */
#ifndef RT_LAYER_H
#define RT_LAYER_H

#include <math.h>
#include <stddef.h>

#include "../models/cost.h"
#include "layout.h"

/* y (n, out) = x (n, in) W (in, out) + b (out); b NULL: no bias */
void rt_linear_fwd(const double *x, const double *w, const double *b, double *y, int n, int in,
                   int out);
/* dx (n, in) = dy (n, out) W^T */
void rt_linear_bwd_input(const double *dy, const double *w, double *dx, int n, int in, int out);
/* dW (in, out) += x^T dy; db (out) += column sums of dy (db NULL: no bias) */
void rt_linear_bwd_weight(const double *x, const double *dy, double *dw, double *db, int n, int in,
                          int out);

/* Layer norm over rows of x (n, h): y = (x - mean) / sqrt(var + eps) * g + b. mean and rstd (n)
 * are saved for the backward. */
void rt_layernorm_fwd(const double *x, const double *g, const double *b, double *y, double *mean,
                      double *rstd, int n, int h, double eps);
/* dx (n, h) = d(LN)/dx . dy; dg, db (h) += parameter gradients. */
void rt_layernorm_bwd(const double *dy, const double *x, const double *g, const double *mean,
                      const double *rstd, double *dx, double *dg, double *db, int n, int h);

/* RMSNorm over rows of x (n, h): y = x / sqrt(mean(x^2) + eps) * g; rstd
 * (n) saved for the backward, which adds dg (h). */
void rt_rmsnorm_fwd(const double *x, const double *g, double *y, double *rstd, int n, int h,
                    double eps);
void rt_rmsnorm_bwd(const double *dy, const double *x, const double *g, const double *rstd,
                    double *dx, double *dg, int n, int h);
/* The norm of a layer of shape s: RMSNorm when s->rmsnorm (b, mean and db unused: NULL), else
 * layer norm. */
void rt_norm_fwd(const rt_layer_shape *s, const double *x, const double *g, const double *b,
                 double *y, double *mean, double *rstd, int n, int h);
void rt_norm_bwd(const rt_layer_shape *s, const double *dy, const double *x, const double *g,
                 const double *mean, const double *rstd, double *dx, double *dg, double *db, int n,
                 int h);

/* GELU, tanh approximation, elementwise over n values. */
void rt_gelu_fwd(const double *u, double *g, size_t n);
void rt_gelu_bwd(const double *dg, const double *u, double *du, size_t n);
/* SwiGLU on n rows: u (n, 2f) holds [gate | up] per row, g (n, f) = silu(gate) o up, silu(x) =
 * x sigmoid(x); the backward writes du (n, 2f) from dg (n, f). */
void rt_swiglu_fwd(const double *u, double *g, int n, int f);
void rt_swiglu_bwd(const double *dg, const double *u, double *du, int n, int f);

/* The activation of a layer's MLP: GELU, or SwiGLU when s->glu; u of rt_layer_ffn_in(s) columns,
 * g of s->ffn, on n rows. */
void rt_mlp_act_fwd(const rt_layer_shape *s, const double *u, double *g, int n);
void rt_mlp_act_bwd(const rt_layer_shape *s, const double *dg, const double *u, double *du, int n);

/* The token sequences attention runs within: sequence j is the tokens off[j] .. off[j]+len[j]-1
 * of a micro-batch's flattened B*S tokens. Whole-row attention has a sequence per row
 * (rt_seqs_rows); a varlen (THD) micro-batch one per sample, laid back to back. Tokens in no
 * sequence are padding: attention writes nothing for them. pos (NULL: all 0) is the position of
 * each sequence's first token in its sample: a context-parallel rank's queries are pieces of
 * samples (rt_cp), and a causal query at position pos[j] + i sees keys 0 .. pos[j] + i. */
typedef struct rt_seqs {
    int n;
    const int *off, *len, *pos;
} rt_seqs;

/* A micro-batch as a layer sees it: B rows of S tokens; for a cross layer an encoder output of B
 * rows of Se tokens; the sequences attention runs within, paired sample by sample (NULL: whole
 * rows); under context parallelism this rank's map of it (rt_cp, below; NULL: none). The GPU
 * layer (cuda/layer_cuda.h) takes it whole. */
struct rt_cp;
typedef struct rt_batch {
    int B, S, Se;
    const rt_seqs *seqs, *enc_seqs;
    const struct rt_cp *cp;
} rt_batch;

/* B rows of S tokens into s, with the caller's arrays off and len (B ints each). */
void rt_seqs_rows(rt_seqs *s, int B, int S, int *off, int *len);

/* The sequences of one pass over a micro-batch: mb's own, or whole rows (B of S; B of Se) built
 * in store, which rt_batch_seqs_free releases; rows: both are whole rows. Aborts when out of
 * host memory (a few ints per row). */
typedef struct rt_batch_seqs {
    rt_seqs self, enc;
    int rows;
    int *store;
} rt_batch_seqs;
void rt_batch_seqs_init(rt_batch_seqs *bs, const rt_batch *mb);
void rt_batch_seqs_free(rt_batch_seqs *bs);
/* The score entries of paired sequences, sum of qs->len[j] * ks->len[j]: per head, what the
 * attention's saved probabilities hold (the fp64 layout's B * S * Sk for rows is the bound). */
size_t rt_seqs_pairs(const rt_seqs *qs, const rt_seqs *ks);

/* Attention, a query heads and g key/value heads (g divides a; g = a without grouped-query
 * attention) of width d: sequence j of the queries qs attends to sequence j of the keys ks (the
 * same n), causally (query i sees keys 0..i of its sequence) or not. q (rows of ld_q), k and v
 * (rows of ld_kv) are row slices of wider matrices, query head h at column h*d of q, the
 * key/value head it reads (rt_kv_head, layout.h) at column rt_kv_head(h, a, g)*d of k and v; ctx
 * (rows of a*d) is written for the queries' tokens only. p keeps the softmax probabilities for
 * the backward: sequence j's (a, lq, lk) block after those of the sequences before it. */
void rt_attention_fwd(const double *q, const double *k, const double *v, int ld_q, int ld_kv,
                      double *p, double *ctx, const rt_seqs *qs, const rt_seqs *ks, int a, int g,
                      int d, int causal);
/* Gradients of q, k, v (same layouts) from dctx, added to (a key/value head's gradient sums over
 * the query heads that read it). */
void rt_attention_bwd(const double *dctx, const double *q, const double *k, const double *v,
                      int ld_q, int ld_kv, const double *p, double *dq, double *dk, double *dv,
                      const rt_seqs *qs, const rt_seqs *ks, int a, int g, int d);

/* Rotary position embeddings (LLaMA's, in Hugging Face's and Megatron's non-interleaved form):
 * in each of `heads` heads of width d at the start of a row of x (rows of ld elements: the fused
 * projection's q heads then k heads), the pair (j, j + d/2), j < d/2, of a token at position p
 * turns by the angle rt_rope_angle(p, j, d, base) = p base^(-2j/d) (a width d odd leaves its last
 * column as it is).
 * The position of token t is pos[t] (rt_seqs_positions), -1 leaving the token as it is; inverse
 * turns back (the backward: the rotation's transpose). */
#ifdef __CUDACC__
__host__ __device__
#endif
static inline double rt_rope_angle(int p, int j, int d, double base)
{
    return (double)p * pow(base, -2.0 * j / d);
}
void rt_rope(double *x, int ld, int heads, int d, double base, const int *pos, int n, int inverse);
/* The positions of n tokens within the sequences s (rt_seqs): token off[j] + i is at pos[j] + i
 * (i without pos); tokens in no sequence (padding) at -1. */
void rt_seqs_positions(const rt_seqs *s, int n, int *pos);

/* Softmax cross-entropy of logits (n, V) against targets (n): returns the mean loss and writes
 * dlogits = (softmax - onehot) / n. */
double rt_softmax_xent(const double *logits, const int *targets, double *dlogits, int n, int V);

/* The tied LM head and loss on n tokens: logits (n, V) = out (n, H) emb^T (emb (V, H)), then
 * rt_softmax_xent into dlogits for targets (i * 7919 + target_offset) % V (synthetic labels, the
 * same on every backend). logits is scratch. Returns 0, or -1 when out of host memory. */
int rt_lm_head_fwd(const double *out, const double *emb, double *logits, double *dlogits, int n,
                      int H, int V, int target_offset);
/* Its backward: dout = dlogits emb; demb += dlogits^T out. */
void rt_lm_head_bwd(const double *dlogits, const double *emb, const double *out, double *dout,
                    double *demb, int n, int H, int V);

/* The synthetic data of a run (embedding lookups, initial embedding table): value i of a fill
 * with `seed`, uniform in [-scale/2, scale/2). A hash of the index, not a sequence, so that a GPU
 * kernel computes the same values in parallel: every backend (runtime/exec.c, exec_gpu.c,
 * cuda/layer_cuda.cu) fills with this macro, so that they train on the same numbers. */
#define RT_FILL_VALUE(i, seed, scale)                                                              \
    (rt_fill_mix_((unsigned)(i) * 2654435761u ^ ((unsigned)(seed) * 40503u + 0x9e3779b9u)) *     \
     (scale))
#ifdef __CUDACC__
__host__ __device__
#endif
static inline double rt_fill_mix_(unsigned h)
{
    h ^= h >> 15, h *= 2246822519u, h ^= h >> 13, h *= 3266489917u, h ^= h >> 16;
    return (double)(h >> 8) / (double)(1u << 24) - 0.5;
}
/* v[i] = RT_FILL_VALUE(i, seed, scale) for i < n; rt_fill_at from index first on (a rank's
 * share of a fill: v[i] = RT_FILL_VALUE(first + i, ...)). */
void rt_fill(double *v, size_t n, unsigned seed, double scale);
void rt_fill_at(double *v, size_t n, size_t first, unsigned seed, double scale);
/* The sum of v[i]^2 (the executors' gradient figure, rt_result.grad_sq). */
double rt_sum_sq(const double *v, size_t n);
/* A tensor-parallel rank's share of the sum of squares of a layer's gradients (block, laid out
 * for the rank's shape s): its parts of the split parameters, and the whole ones
 * (layout.h RT_TP_WHOLE, the same on every rank) on rank 0 only, so that the group's shares
 * add up to the whole layer's figure. tp 1: rt_sum_sq of the block. */
double rt_grad_sq_share(const rt_layer_shape *s, const double *block, int tp, int tp_rank);

/* A function the layer calls between its operations (NULL, the default: none). dprun's MPI
 * executor drives MPI's progress engine there: a transfer it started before a long compute must
 * not wait for the compute's end, which it would on transports that copy through the sender
 * (shared memory without a single-copy mechanism). */
void rt_layer_set_yield(void (*fn)(void));

/* ---- tensor parallelism ---------------------------------------------------------------------- */

/* A tensor-parallel group as the layer sees it (Megatron's split, runtime/layout.h
 * rt_layer_shape_tp): its size and this rank's index, whether sequence parallelism is on, and
 * the group's collectives, which the caller supplies (dprun's cpu backend: MPI on the group's
 * sub-communicator, waited on with its timeout). Every rank of a group calls the layer on the
 * same micro-batches in the same order, so the collectives meet. NULL, or size 1: no TP.
 *
 * Where the ranks' work meets (Megatron's conjugate operators around a parallel region):
 *   without SP  the layer's input and output are whole (B*S tokens) on every rank; the norms run
 *               on every rank; the row-parallel projections' partial sums are all-reduced (in
 *               the forward after Wo and W2, in the backward after the input gradients of Wqkv
 *               and W1);
 *   with SP     the layer's input and output are this rank's B*S / t consecutive tokens (rank
 *               r's: tokens r*n/t ..), and so are the norms and residual adds; entering a
 *               parallel region all-gathers the tokens, leaving it reduce-scatters the partial
 *               sums, and their backwards are the other one. The norms' parameter gradients are
 *               then sums over this rank's tokens: the caller all-reduces them over the group
 *               (Megatron's sequence-parallel gradients) before using them.
 * The collectives: the sum (op RT_TP_SUM) or maximum (RT_TP_MAX) of n values over the group, in
 * place; the concatenation by rank of every rank's n values; the sum over the group of n * size
 * values, of which this rank keeps its n (part rank). */
enum { RT_TP_SUM, RT_TP_MAX };
typedef struct rt_tp {
    int size, rank, sp;
    void (*allreduce)(void *ctx, double *v, size_t n, int op);
    void (*allgather)(void *ctx, const double *mine, double *all, size_t n);
    void (*reduce_scatter)(void *ctx, const double *all, double *mine, size_t n);
    void *ctx;
} rt_tp;

/* ---- context parallelism --------------------------------------------------------------------- */

/* Context parallelism over c ranks (Megatron-Core's ring attention with causal load balancing, as
 * models/cost.h prices it): every piece of a micro-batch's tokens (each sample, or row, and each
 * stretch of padding between and after them) is cut into 2c equal chunks, and rank r holds chunk
 * r and chunk 2c-1-r of each piece, in the micro-batch's order: under a causal mask each rank
 * then has the same attention work. A layer on a rank runs everything but attention on its own
 * tokens; for attention it gathers the group's rotated key/value projections into the whole
 * micro-batch's order (what a ring passes round, block by block) and its queries attend to them,
 * a query at position p of its sample to keys 0 .. p; the backward's key/value gradients are
 * summed back to the ranks that hold the tokens (reduce-scatter). Weights are whole on every
 * rank: their gradients are sums over each rank's tokens, which the caller adds up over the group
 * as it does over data-parallel replicas. Encoder-decoder layers are not split (models/cost.h
 * refuses cp for them too).
 *
 * A rank's map of one micro-batch (rt_cp_split; the same on every stage, so that a pipeline's
 * transfers carry each rank's own tokens to the same rank of the next stage):
 *   n_local      its tokens: n / c;
 *   q            its query pieces: two per sample, offsets among its own tokens, pos their first
 *                position in the sample;
 *   k            piece j's keys: offsets in the gathered whole micro-batch, the sample's
 *                tokens up to the piece's last (causal) or all of them;
 *   whole        n ints: token t of rank r is token whole[r * n_local + t] of the micro-batch;
 *   size, rank   the group's size and this rank's index in it;
 *   group        the ranks' collectives (an rt_tp's all-gather and reduce-scatter, over the
 *                context-parallel ranks of one tensor-parallel rank; its sp is not read).
 * Under tensor parallelism with SP the layer's input is this rank's n_local / t tokens and the
 * tensor-parallel gather restores its n_local before attention. */
typedef struct rt_cp {
    int size, rank;
    const rt_tp *group;
    int n_local;
    rt_seqs q, k;
    const int *whole;
    int *store; /* the map's arrays, rt_cp_free's */
} rt_cp;

/* Rank `rank` of `size` of the micro-batch of n tokens whose sequences are seqs (samples or
 * rows), causal or not. Returns 0; -1 out of host memory; 1 when a piece (a sequence, or the
 * padding before, between or after them) is not a multiple of 2 * size tokens long: *bad then
 * names the piece's first token and *bad_len its length (the layout check refuses such plans).
 * group is left NULL for the caller. On failure nothing is held. */
int rt_cp_split(const rt_seqs *seqs, int n, int size, int rank, int causal, rt_cp *out, int *bad,
                int *bad_len);
/* The same for a micro-batch of B rows of S tokens whose sequences are seqs, or (NULL) the rows. */
int rt_cp_split_batch(const rt_seqs *seqs, int B, int S, int size, int rank, int causal, rt_cp *out,
                      int *bad, int *bad_len);
void rt_cp_free(rt_cp *cp);
/* The tokens a context-parallel rank holds of n: n / size (cp NULL: n). */
int rt_cp_tokens(const rt_cp *cp, int n);
/* Token t of this rank: its index in the whole micro-batch (t without cp). */
static inline int rt_cp_token(const rt_cp *cp, int t)
{
    return cp ? cp->whole[cp->rank * cp->n_local + t] : t;
}

/* The tokens a rank's layer input and output hold of n: n / size with SP, else n. */
int rt_tp_tokens(const rt_tp *tp, int n);
/* Entering a parallel region: the whole sequence (full, n_local * size values with SP) from this
 * rank's n_local values (SP: all-gather; otherwise local is already whole: copied unless full is
 * local). */
void rt_tp_gather(const rt_tp *tp, const double *local, double *full, size_t n_local);
/* Leaving one: the ranks' partial sums `partial` (n_full values) added up into local (SP: this
 * rank's n_full / size of the sum, reduce-scatter; otherwise all n_full, all-reduced in place in
 * partial and copied unless local is partial). */
void rt_tp_reduce(const rt_tp *tp, double *partial, double *local, size_t n_full);

/* The tied LM head and loss with the embedding split by vocabulary over the group (Megatron's
 * vocabulary-parallel head and cross-entropy): emb holds this rank's V / size rows (rank r's:
 * r*V/size ..), logits and dlogits (n, V / size) its columns; the softmax's maximum and sum over
 * the whole vocabulary come from all-reduces, the target's logit counts on the rank whose rows
 * hold it. out is whole (n tokens). Without TP, rt_lm_head_fwd's arithmetic. Under context
 * parallelism (cp, else NULL) the n tokens are the rank's share: each token's target is its
 * whole micro-batch index's (rt_cp_token) and the loss is the mean over all n * cp tokens.
 * Returns 0, or -1 when out of host memory. */
int rt_lm_head_fwd_tp(const rt_tp *tp, const rt_cp *cp, const double *out, const double *emb,
                      double *logits, double *dlogits, int n, int H, int V, int target_offset);
/* Its backward: dout = the group's sum of dlogits emb (rt_tp_reduce: with SP this rank's tokens
 * of it, else all n); demb (this rank's rows) += dlogits^T out. Aborts when out of host memory
 * (an (n, H) scratch). */
void rt_lm_head_bwd_tp(const rt_tp *tp, const double *dlogits, const double *emb, const double *out,
                       double *dout, double *demb, int n, int H, int V);

/* ---- experts ---------------------------------------------------------------------------------- */

/* A mixture of experts' layer (shape.experts > 0; runtime/layout.h): the MLP is replaced by
 *   logits = h2 Wr                          (tokens, experts), the router
 *   top    = each token's topk largest logits (ties to the lower expert index)
 *   gate_j = softmax over the chosen topk logits (Mixtral's; Qwen3's with norm_topk_prob)
 *   y      = x2 + sum_j gate_j expert_top_j(h2)   expert_e(x) = silu(x W1_e[gate]) o (x W1_e[up]) W2_e
 * The experts run whole (an expert is never split by tp). Under tensor parallelism with expert
 * parallelism ep (shape.ep, dividing the group's size t), tp rank r holds the experts of its
 * expert-parallel rank r % ep and routes the tokens of its group r / ep (the t / ep groups split
 * the micro-batch's tokens evenly, in order); h2 is whole on every rank (with SP after the gather
 * that enters the MLP), so the rank runs its experts on its group's copies routed to them and adds
 * their gated outputs into its partial sum, which the group's reduction adds up as it adds a dense
 * MLP's (Megatron's all-gather token dispatcher). The backward runs the same copies: each expert's
 * input gradients into the partial d(h2), and the router's logit gradients from the gates this
 * rank's copies hold (the softmax's backward is linear in them), which the same reduction adds up.
 * The router's weight gradient is then partial over the tp group and an expert's over the t / ep
 * ranks holding it (layout.h rt_param_grad_group: the executor sums them). Saved: the routing
 * (RT_A_ROUTE), each copy's W1 output (RT_A_U), activation (RT_A_G) and expert output (RT_A_OE);
 * the B keeps each copy's d(gated output), d(u) and the router's logit gradients for the W. */

/* ---- the whole layer -------------------------------------------------------------------------- */

/* rt_layer_shape, the parameters' and activations' layouts: runtime/layout.h */

/* The shape of a model's layers as the executors run them: kind RT_LAYER_GPT (causal), _ENCODER
 * (T5's, bidirectional) or _DECODER (T5's: causal with cross-attention); SwiGLU where the model's
 * MLP is gated; the model's key/value heads (grouped-query attention), its norm (RMSNorm or
 * layer norm) and biases; rotary positions for a GPT-kind layer of a model that has them. */
enum { RT_LAYER_GPT, RT_LAYER_ENCODER, RT_LAYER_DECODER };
struct model_spec;
rt_layer_shape rt_layer_shape_of(const struct model_spec *m, int kind);

/* Parameters (and their gradients, same layout) of one layer. */
typedef struct rt_layer_params {
    double *ln1_g, *ln1_b, *wqkv, *bqkv, *wo, *bo, *ln2_g, *ln2_b, *w1, *b1, *w2, *b2;
    double *wr; /* a MoE layer's router (NULL in a dense one); w1, w2 its experts' */
    double *lnc_g, *lnc_b, *wqc, *bqc, *wkvc, *bkvc, *woc, *boc; /* cross-attention (NULL if none) */
    double *block; /* one allocation holding all of them */
    size_t count;  /* doubles */
} rt_layer_params;

int rt_layer_params_alloc(rt_layer_params *p, const rt_layer_shape *s);
/* Points p's fields into a caller-owned block (NULL: only counts); returns the doubles it needs.
 * p->block stays NULL, so rt_layer_params_free frees nothing. */
size_t rt_layer_params_bind(rt_layer_params *p, const rt_layer_shape *s, double *block);
void rt_layer_params_free(rt_layer_params *p);
/* Deterministic small random init (seeded), LN scales 1. */
void rt_layer_params_init(rt_layer_params *p, const rt_layer_shape *s, unsigned seed);
/* The seed of layer l of a virtual stage placed at *place: the layer's own index in its component
 * (stage_placement.first_layer + l; a T5 decoder's apart from its encoder's), so that a layer has
 * the same parameters whatever the pipeline's depth or split (both executors). */
unsigned rt_layer_seed(const stage_placement *place, int l);

/* Saved activations of one layer's forward on (B, S) (and an encoder output of length Se for a
 * cross layer), for its backward. */
typedef struct rt_layer_acts {
    double *x, *h1, *mean1, *rstd1, *qkv, *p, *ctx, *x2, *h2, *mean2, *rstd2, *u, *g;
    double *block;
    size_t count;
    /* input-gradient pass results kept for the weight-gradient pass (ZB-H1's W) */
    double *d_qkv, *d_o, *d_u, *d_y;
    /* cross-attention: the caller points enc at the encoder output (B*Se, H) before the forward,
     * and denc at where the backward adds its gradient */
    int Se;
    const double *enc;
    double *denc;
    /* the micro-batch's sequences (its tokens', and for a cross layer the encoder output's,
     * paired sample by sample), set by the caller before the forward and kept until the
     * backward; NULL: whole rows (B of S, B of Se) */
    const rt_seqs *seqs, *enc_seqs;
    double *xc, *hc, *meanc, *rstdc, *qc, *kvc, *pc, *ctxc, *d_qc, *d_kvc, *d_oc;
    /* the tensor-parallel group the layer runs in, set by the caller like seqs (NULL: none);
     * the shape is then the rank's (rt_layer_shape_tp), B*S the whole micro-batch's tokens, and
     * with SP x, the norms' statistics, x2 and the output hold this rank's tokens only */
    const rt_tp *tp;
    /* the context-parallel map of the micro-batch (rt_cp), set like tp (NULL: none); the shape's
     * cp is then its size, B*S the whole micro-batch's tokens, and the token tensors hold
     * cp->n_local of them; kvg is RT_A_KVG */
    const rt_cp *cp;
    double *kvg;
    double *route, *oe, *d_oe, *d_logits; /* a MoE layer's (layout.h RT_A_ROUTE ..) */
} rt_layer_acts;

/* Se is the encoder length of a cross layer (ignored otherwise): rt_layer_acts_bytes(s, B, S,
 * Se, RT_FP64) / 8. */
size_t rt_layer_acts_doubles(const rt_layer_shape *s, int B, int S, int Se);
int rt_layer_acts_alloc(rt_layer_acts *a, const rt_layer_shape *s, int B, int S, int Se);
/* Lays the activations out in a caller-owned block of rt_layer_acts_doubles() doubles (a->block
 * stays NULL, so rt_layer_acts_free frees nothing). */
void rt_layer_acts_bind(rt_layer_acts *a, const rt_layer_shape *s, int B, int S, int Se,
                        double *block);
void rt_layer_acts_free(rt_layer_acts *a);

/* y (B*S, H) = layer(x); saves what the backward needs in a. With a->tp and a->cp, x and y hold
 * rt_tp_tokens(a->tp, rt_cp_tokens(a->cp, B*S)) tokens (this rank's). */
void rt_layer_fwd(const rt_layer_params *p, const rt_layer_shape *s, int B, int S,
                  const double *x, double *y, rt_layer_acts *a);
/* Selective recompute (scheduler/plan_machine.h pm_recompute): the attention cores again (the
 * self-attention's, and a cross layer's), probabilities and context, from the projections a
 * holds; the same values the forward saved, bit for bit. */
void rt_layer_recompute_attention(const rt_layer_shape *s, int B, int S, rt_layer_acts *a);
/* What a backward under recompute mode rc (scheduler/plan_machine.h pm_recompute) reruns
 * before the layer's gradients, the one rule the executor and dprun profile follow: none,
 * nothing; selective, rt_layer_recompute_attention; full, the forward from the layer's kept input
 * x (B*S, H) into a (which then need not hold anything of the first forward), its output to the
 * scratch y. Returns 1 when it reran something. Under full the caller then runs both gradient
 * passes at once (a full-recompute B is never split). */
int rt_layer_rerun(const rt_layer_params *p, const rt_layer_shape *s, int B, int S,
                   recompute_mode rc, const double *x, double *y, rt_layer_acts *a);
/* Input gradient: dx from dy; keeps the per-linear output gradients in a for rt_layer_bwd_weight.
 * Layer-norm parameter gradients are accumulated here too. */
void rt_layer_bwd_input(const rt_layer_params *p, rt_layer_params *grad, const rt_layer_shape *s,
                        int B, int S, const double *dy, double *dx, rt_layer_acts *a);
/* Weight gradients of the four linear ops, accumulated into grad. */
void rt_layer_bwd_weight(rt_layer_params *grad, const rt_layer_shape *s, int B, int S,
                         const rt_layer_acts *a);

#endif /* RT_LAYER_H */
