#include "trace_gen.h"

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const MIX_NAMES[] = {"flanv2", "flan2021-zs", "uniform", "fixed", "long-cot"};
static const char *const TOKENIZER_NAMES[] = {"t5", "gpt2"};

const char *trace_mix_name(trace_mix m)
{
    return MIX_NAMES[m];
}

int trace_mix_parse(const char *name, trace_mix *m)
{
    for (size_t i = 0; i < sizeof MIX_NAMES / sizeof *MIX_NAMES; i++)
        if (strcmp(name, MIX_NAMES[i]) == 0) {
            *m = (trace_mix)i;
            return 0;
        }
    return -1;
}

const char *trace_tokenizer_name(trace_tokenizer t)
{
    return TOKENIZER_NAMES[t];
}

int trace_tokenizer_parse(const char *name, trace_tokenizer *t)
{
    for (size_t i = 0; i < 2; i++)
        if (strcmp(name, TOKENIZER_NAMES[i]) == 0) {
            *t = (trace_tokenizer)i;
            return 0;
        }
    return -1;
}

void trace_gen_defaults(trace_gen_opts *o)
{
    memset(o, 0, sizeof *o);
    o->mix = TRACE_MIX_FLANV2;
    o->samples = 100000;
    o->seed = 1;
    o->tokenizer = TOKENIZER_T5;
    o->max_input = -1; /* the mix's own */
    o->max_target = -1;
    o->min_len = 1;
    o->max_len = 2048;
    o->len = 512;
}

/* One zero-shot (input, target) draw of task tk, in T5 tokens, before truncation. */
static void draw_zero_shot(gsl_rng *r, const flan_task *tk, double *x, double *y)
{
    double dx, dy;
    gsl_ran_bivariate_gaussian(r, tk->zs_in_sigma, tk->tgt_sigma, FLAN_RHO, &dx, &dy);
    *x = fmax(2.0, round(exp(tk->zs_in_mu + dx)) + 1.0);
    *y = fmax(2.0, round(exp(tk->tgt_mu + dy)) + 1.0);
}

/* Tokens added to the input by the exemplars of one few-shot attempt; 0 when none fits. */
static double draw_exemplars(gsl_rng *r, const flan_task *tk, double x)
{
    unsigned k;
    double scale = 1.0;
    if (tk->submix == FLAN_SUBMIX_NIV2) {
        k = 1;
        scale = FLAN_NIV2_EXEMPLAR_SCALE;
    } else {
        double q = (tk->submix == FLAN_SUBMIX_FLAN2021 || tk->submix == FLAN_SUBMIX_T0) ? 0.25
                                                                                       : 0.5;
        k = gsl_rng_uniform(r) < q ? 5 : gsl_ran_binomial(r, 0.1, 25);
    }
    double budget = FLAN_FEW_SHOT_MAX_LEN - x, sum = 0;
    for (unsigned i = 0; i < k; i++) {
        double ex, ey;
        draw_zero_shot(r, tk, &ex, &ey);
        double e = round(ex * scale) + round(ey * scale) + 2;
        if (sum + e > budget) break;
        sum += e;
    }
    return sum;
}

static int32_t finish_len(double v, trace_tokenizer tok, int32_t cap, int32_t floor_len)
{
    if (tok == TOKENIZER_GPT2) v = round(v * FLAN_GPT2_PER_T5);
    if (v < floor_len) v = floor_len;
    if (v > TRACE_MAX_LEN) v = TRACE_MAX_LEN;
    if (cap > 0 && v > cap) v = cap;
    return (int32_t)v;
}

static dp_status gen_flan(const trace_gen_opts *o, gsl_rng *r, trace *t, dp_err *err)
{
    int zs_only = o->mix == TRACE_MIX_FLAN2021_ZS;
    double *w = malloc(FLAN_N_TASKS * sizeof *w);
    if (!w) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    for (size_t j = 0; j < FLAN_N_TASKS; j++) {
        const flan_task *tk = &FLAN_TASKS[j];
        w[j] = zs_only ? (tk->submix == FLAN_SUBMIX_FLAN2021 ? tk->weight_in_submix : 0)
                       : tk->global_weight;
    }
    gsl_ran_discrete_t *table = gsl_ran_discrete_preproc(FLAN_N_TASKS, w);
    free(w);
    if (!table) return dp_fail(err, DP_ERR_NOMEM, "cannot build the task alias table");
    dp_status st = DP_OK;
    for (size_t i = 0; i < o->samples; i++) {
        const flan_task *tk = &FLAN_TASKS[gsl_ran_discrete(r, table)];
        double x, y;
        draw_zero_shot(r, tk, &x, &y);
        if (!zs_only && gsl_rng_uniform(r) < 0.5) {
            for (int attempt = 0; attempt < FLAN_FEW_SHOT_TRIES; attempt++) {
                if (attempt > 0) draw_zero_shot(r, tk, &x, &y);
                double add = draw_exemplars(r, tk, x);
                if (add > 0) {
                    x += add;
                    break;
                }
            }
        }
        int32_t in = finish_len(x, o->tokenizer, o->max_input, 1);
        int32_t tg = finish_len(y, o->tokenizer, o->max_target, 1);
        if (trace_push(t, tk->name, in, tg) != DP_OK) {
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory after %zu samples", i);
            break;
        }
    }
    gsl_ran_discrete_free(table);
    return st;
}

/* The long chain-of-thought mix's components (trace_gen.h has the sources). */
static const struct {
    const char *task;
    double weight, in_median, in_sigma, tgt_median, tgt_sigma, tgt_cap;
} LONG_COT[] = {
    {"instruction", 0.22, 290, 1.1, 225, 0.8, 0},
    {"reasoning-cot", 0.77, 200, 0.9, 5000, 0.70, LONG_COT_REASONING_CAP},
    {"long-context", 0.01, 29000, 0.75, 540, 0.8, 0},
};
#define N_LONG_COT (sizeof LONG_COT / sizeof LONG_COT[0])

static dp_status gen_long_cot(const trace_gen_opts *o, gsl_rng *r, trace *t, dp_err *err)
{
    double w[N_LONG_COT];
    for (size_t j = 0; j < N_LONG_COT; j++) w[j] = LONG_COT[j].weight;
    gsl_ran_discrete_t *table = gsl_ran_discrete_preproc(N_LONG_COT, w);
    if (!table) return dp_fail(err, DP_ERR_NOMEM, "cannot build the component alias table");
    dp_status st = DP_OK;
    for (size_t i = 0; i < o->samples && st == DP_OK; i++) {
        size_t j = gsl_ran_discrete(r, table);
        double x = round(gsl_ran_lognormal(r, log(LONG_COT[j].in_median), LONG_COT[j].in_sigma));
        double y = round(gsl_ran_lognormal(r, log(LONG_COT[j].tgt_median), LONG_COT[j].tgt_sigma));
        if (LONG_COT[j].tgt_cap > 0 && y > LONG_COT[j].tgt_cap) y = LONG_COT[j].tgt_cap;
        y = fmax(1, y);
        x = fmax(1, fmin(x, LONG_COT_MAX_TOTAL - y)); /* the total's cap: the input gives way */
        int32_t in = finish_len(x, o->tokenizer, o->max_input, 1);
        int32_t tg = finish_len(y, o->tokenizer, o->max_target, 1);
        if (trace_push(t, LONG_COT[j].task, in, tg) != DP_OK)
            st = dp_fail(err, DP_ERR_NOMEM, "out of memory after %zu samples", i);
    }
    gsl_ran_discrete_free(table);
    return st;
}

dp_status trace_generate(const trace_gen_opts *in_opts, trace *t, dp_err *err)
{
    trace_gen_opts mixed = *in_opts, *o = &mixed;
    int flan = o->mix == TRACE_MIX_FLANV2 || o->mix == TRACE_MIX_FLAN2021_ZS;
    if (o->max_input == -1) o->max_input = flan ? FLAN_MAX_INPUT : 0;
    if (o->max_target == -1) o->max_target = flan ? FLAN_MAX_TARGET : 0;
    if (o->samples == 0) return dp_fail(err, DP_ERR_INVALID, "--samples must be at least 1");
    if (o->max_input < 0 || o->max_target < 0)
        return dp_fail(err, DP_ERR_INVALID, "truncation lengths must not be negative");
    if (o->target_len < 0) return dp_fail(err, DP_ERR_INVALID, "--target-len must not be negative");
    if (o->mix == TRACE_MIX_UNIFORM && (o->min_len < 1 || o->max_len < o->min_len))
        return dp_fail(err, DP_ERR_INVALID,
                       "uniform mix needs 1 <= --min <= --max (got --min %d --max %d)",
                       (int)o->min_len, (int)o->max_len);
    if (o->mix == TRACE_MIX_FIXED && o->len < 1)
        return dp_fail(err, DP_ERR_INVALID, "fixed mix needs --len >= 1 (got %d)", (int)o->len);

    gsl_rng *r = gsl_rng_alloc(gsl_rng_mt19937);
    if (!r) return dp_fail(err, DP_ERR_NOMEM, "cannot allocate the random generator");
    gsl_rng_set(r, (unsigned long)o->seed);
    dp_status st = DP_OK;
    switch (o->mix) {
    case TRACE_MIX_FLANV2:
    case TRACE_MIX_FLAN2021_ZS: st = gen_flan(o, r, t, err); break;
    case TRACE_MIX_LONG_COT: st = gen_long_cot(o, r, t, err); break;
    case TRACE_MIX_UNIFORM:
    case TRACE_MIX_FIXED: {
        const char *task = trace_mix_name(o->mix);
        for (size_t i = 0; i < o->samples && st == DP_OK; i++) {
            int32_t in = o->mix == TRACE_MIX_FIXED
                             ? o->len
                             : o->min_len + (int32_t)gsl_rng_uniform_int(
                                                r, (unsigned long)(o->max_len - o->min_len) + 1);
            if (trace_push(t, task, in, o->target_len) != DP_OK)
                st = dp_fail(err, DP_ERR_NOMEM, "out of memory after %zu samples", i);
        }
        break;
    }
    }
    gsl_rng_free(r);
    return st;
}
