/*
 * trace_gen.h — synthetic length traces: a FLANv2-like mixture, Flan2021 zero-shot, uniform, fixed,
 * and a long chain-of-thought reasoning mix.
 *
 * The FLAN generator follows ../shared/flan/README.md ("The generator"), with the per-task
 * parameters of flan_task_generator_params_t5.csv carried inside dpsim (traces/flan_tasks.c,
 * generated from traces/data/ by tools/gen_flan_table.py). Per sample:
 *
 *   task j      ~ Categorical(global_weight)                 (GSL alias table, gsl_ran_discrete)
 *   (lx, ly)    ~ bivariate normal, means (zs_in_mu_j, tgt_mu_j), sds (zs_in_sigma_j, tgt_sigma_j),
 *                 correlation FLAN_RHO                       (gsl_ran_bivariate_gaussian)
 *   X, Y        = round(exp(lx)) + 1, round(exp(ly)) + 1     (+1 = EOS; at least 2)
 *   with probability 1/2 the sample is few-shot:
 *       k = 5 with prob q (0.25 Flan2021/T0, 0.5 NIv2/CoT/Dialog), else Binomial(25, 0.1);
 *       NIv2: k = 1 and the exemplar is 1.4x larger (it carries an explanation);
 *       exemplars (x_i, y_i) are drawn from the same task and x_i + y_i + 2 is added to X while
 *       the exemplars' sum stays <= FLAN_FEW_SHOT_MAX_LEN - X;
 *       when none fits the example is drawn again (FLAN drops it); after FLAN_FEW_SHOT_TRIES
 *       tries it stays zero-shot.
 *   GPT-2 tokenizer: X and Y are scaled by FLAN_GPT2_PER_T5 (GPT-2 BPE needs ~0.90x T5's tokens).
 *   truncate: X = min(X, max_input), Y = min(Y, max_target)  (Flan-T5: 2048 / 512).
 *
 * Output is "synthetic, fitted to published FLANv2 statistics", never FLANv2 itself. The same
 * options and seed give the same trace on any machine (GSL's mt19937 is portable).
 */
#ifndef TRACE_GEN_H
#define TRACE_GEN_H

#include <stddef.h>
#include <stdint.h>

#include "trace.h"

#define FLAN_RHO 0.3                /* input/target log-length correlation (estimate) */
#define FLAN_FEW_SHOT_MAX_LEN 1920  /* FLAN FEW_SHOT_MAX_LEN, tokens */
#define FLAN_FEW_SHOT_TRIES 20
#define FLAN_NIV2_EXEMPLAR_SCALE 1.4
#define FLAN_GPT2_PER_T5 0.90
#define FLAN_MAX_INPUT 2048         /* Flan-T5 training truncation (FLAN issue #36) */
#define FLAN_MAX_TARGET 512

typedef enum flan_submix {
    FLAN_SUBMIX_FLAN2021,
    FLAN_SUBMIX_T0,
    FLAN_SUBMIX_NIV2,
    FLAN_SUBMIX_COT,
    FLAN_SUBMIX_DIALOG,
} flan_submix;

typedef struct flan_task {
    const char *name;
    flan_submix submix;
    double global_weight;    /* probability in the whole mix */
    double weight_in_submix; /* probability inside its sub-mixture */
    double zs_in_mu, zs_in_sigma; /* lognormal of the zero-shot input length, T5 tokens */
    double tgt_mu, tgt_sigma;     /* lognormal of the target length, T5 tokens */
} flan_task;

extern const flan_task FLAN_TASKS[];
extern const size_t FLAN_N_TASKS;

typedef enum trace_mix {
    TRACE_MIX_FLANV2,      /* the whole FLANv2 mix, zero- and few-shot */
    TRACE_MIX_FLAN2021_ZS, /* Flan2021 zero-shot only: the DynaPipe experiments' data */
    TRACE_MIX_UNIFORM,     /* input ~ U{min_len..max_len} */
    TRACE_MIX_FIXED,       /* input = len */
    TRACE_MIX_LONG_COT,    /* reasoning fine-tuning: instructions, chains of thought, long
                            * context (below) */
} trace_mix;

/* The long chain-of-thought mix (--mix long-cot): three lognormal components of (input, target)
 * lengths in tokens, each length exp(N(log median, sigma)) independently, the sample's total
 * capped at LONG_COT_MAX_TOTAL (the input gives way). From published figures (docs/traces.md
 * has the table):
 *   instruction   22%  input median 290 (sigma 1.1), target 225 (0.8): Llama 3's SFT mix,
 *                      535.7 context / 310.4 response tokens on average (arXiv 2407.21783
 *                      Table 7); its weight DeepSeek-R1's 22.1% non-reasoning samples (arXiv
 *                      2501.12948 Table 5)
 *   reasoning     77%  input median 200 (0.9), target (the chain of thought) median 5,000 (0.70)
 *                      capped at 32,768: mean ~6.4k against DeepSeek-R1's reasoning mean ~6.5k
 *                      (Table 5), 75% under 8k as OpenR1-Math-220k reports, none above R1's
 *                      32,768 generation limit (s1K: 0%, arXiv 2501.19393)
 *   long context   1%  input median 29,000 (0.75), target 540 (0.8): Llama 3's long-context
 *                      SFT samples, 37,395 context / 740.5 response on average, in buckets to
 *                      128k (Table 7, Sec. 4.3.4); weighted 1% of samples (Llama 3 mixes 0.11%;
 *                      ten times that keeps a tail in a trace of thousands), ~6.7% of tokens
 * About 4.7% of samples exceed 16k tokens, 0.8% 32k, 0.15% 64k. */
#define LONG_COT_MAX_TOTAL 131072
#define LONG_COT_REASONING_CAP 32768

typedef enum trace_tokenizer { TOKENIZER_T5, TOKENIZER_GPT2 } trace_tokenizer;

typedef struct trace_gen_opts {
    trace_mix mix;
    size_t samples;            /* number of samples to draw */
    uint64_t seed;             /* master seed */
    trace_tokenizer tokenizer; /* lengths in T5 or GPT-2 tokens (FLAN mixes only) */
    int32_t max_input;         /* truncation of inputs, tokens; 0 = none; -1: the mix's own
                                * (FLAN 2048 and 512, the others none) */
    int32_t max_target;        /* truncation of targets, tokens; 0 = none; -1 as above */
    int32_t min_len, max_len;  /* uniform: input range, tokens */
    int32_t len;               /* fixed: input length, tokens */
    int32_t target_len;        /* uniform and fixed: target length, tokens */
} trace_gen_opts;

/* Defaults: flanv2, 100000 samples, seed 1, T5, the mix's truncation, uniform 1..2048, fixed 512. */
void trace_gen_defaults(trace_gen_opts *o);

/* Appends o->samples samples to t (which is normally empty). Fails with DP_ERR_INVALID on
 * inconsistent options (min_len > max_len, zero samples, ...). */
dp_status trace_generate(const trace_gen_opts *o, trace *t, dp_err *err);

/* Mix and tokenizer names ("flanv2", "flan2021-zs", "uniform", "fixed", "long-cot"; "t5", "gpt2"). The
 * parsers return 0 on success, -1 for an unknown name. */
const char *trace_mix_name(trace_mix m);
int trace_mix_parse(const char *name, trace_mix *m);
const char *trace_tokenizer_name(trace_tokenizer t);
int trace_tokenizer_parse(const char *name, trace_tokenizer *t);

#endif /* TRACE_GEN_H */
