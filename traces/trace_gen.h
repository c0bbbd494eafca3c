/*
 * trace_gen.h — synthetic length traces: a FLANv2-like mixture, Flan2021 zero-shot, uniform, fixed.
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
} trace_mix;

typedef enum trace_tokenizer { TOKENIZER_T5, TOKENIZER_GPT2 } trace_tokenizer;

typedef struct trace_gen_opts {
    trace_mix mix;
    size_t samples;            /* number of samples to draw */
    uint64_t seed;             /* master seed */
    trace_tokenizer tokenizer; /* lengths in T5 or GPT-2 tokens (FLAN mixes only) */
    int32_t max_input;         /* truncation of inputs, tokens; 0 = none */
    int32_t max_target;        /* truncation of targets, tokens; 0 = none */
    int32_t min_len, max_len;  /* uniform: input range, tokens */
    int32_t len;               /* fixed: input length, tokens */
    int32_t target_len;        /* uniform and fixed: target length, tokens */
} trace_gen_opts;

/* Defaults: flanv2, 100000 samples, seed 1, T5, truncation 2048/512, uniform 1..2048, fixed 512. */
void trace_gen_defaults(trace_gen_opts *o);

/* Appends o->samples samples to t (which is normally empty). Fails with DP_ERR_INVALID on
 * inconsistent options (min_len > max_len, zero samples, ...). */
dp_status trace_generate(const trace_gen_opts *o, trace *t, dp_err *err);

/* Mix and tokenizer names ("flanv2", "flan2021-zs", "uniform", "fixed"; "t5", "gpt2"). The
 * parsers return 0 on success, -1 for an unknown name. */
const char *trace_mix_name(trace_mix m);
int trace_mix_parse(const char *name, trace_mix *m);
const char *trace_tokenizer_name(trace_tokenizer t);
int trace_tokenizer_parse(const char *name, trace_tokenizer *t);

#endif /* TRACE_GEN_H */
