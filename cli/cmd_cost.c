/* dpsim cost — one cost-model query; dpsim calibrate — fit the analytic model to a profile. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../models/calibrate.h"
#include "cli.h"

static const char COST_USAGE[] =
    "dpsim cost [--model M] (--profile CSV | --hw H) --mbs N --seqlen L [--dec-seqlen D] "
    "[--samples LIST] [--json]";

/* --samples: the lengths of the samples in the micro-batch (T5: INPUT:TARGET pairs), attending
 * each to itself (varlen, cost.h): their padded squares summed into s. */
static int parse_samples(const char *cmd, const char *arg, const model_spec *m, cost_shape *s)
{
    batch_rules r;
    batch_rules_default(&r, m->arch);
    char buf[4096];
    const char *item[512];
    if (strlen(arg) >= sizeof buf)
        return cli_usage_error(cmd, COST_USAGE, "--samples is longer than %zu characters",
                               sizeof buf - 1);
    strcpy(buf, arg);
    int n = planner_split_list(buf, item, 512);
    if (n <= 0) return cli_usage_error(cmd, COST_USAGE, "--samples needs 1 to 512 lengths");
    s->varlen = 1;
    int64_t sum_e = 0, sum_d = 0; /* the samples fill the micro-batch's rows, at most */
    for (int i = 0; i < n; i++) {
        int64_t e = 0, d = 0;
        char *colon = strchr(item[i], ':');
        if (colon) *colon = '\0';
        if (dp_parse_i64(item[i], 1, 1 << 24, &e) != 0 ||
            (colon && dp_parse_i64(colon + 1, 1, 1 << 24, &d) != 0) ||
            (m->arch == ARCH_T5) != (colon != NULL))
            return cli_usage_error(cmd, COST_USAGE, "--samples item %d \"%s%s%s\" is not %s", i + 1,
                                   item[i], colon ? ":" : "", colon ? colon + 1 : "",
                                   m->arch == ARCH_T5 ? "INPUT:TARGET (whole numbers >= 1)"
                                                      : "a length (a whole number >= 1)");
        char what[64];
        dp_err err = {0};
        snprintf(what, sizeof what, "--samples item %d (%lld tokens)", i + 1, (long long)e);
        if (model_check_seqlen(m, (int)e, what, &err) != DP_OK)
            return cli_usage_error(cmd, COST_USAGE, "%s", err.msg);
        sum_e += e, sum_d += d;
        if (e > s->enc_len || d > s->dec_len || sum_e > (int64_t)s->mbs * s->enc_len ||
            sum_d > (int64_t)s->mbs * s->dec_len)
            return cli_usage_error(cmd, COST_USAGE, "--samples item %d (%lld tokens) does not fit "
                                   "the micro-batch: --mbs %d rows of --seqlen %d%s (%lld tokens "
                                   "so far)", i + 1, (long long)(e + d), s->mbs, s->enc_len,
                                   m->arch == ARCH_T5 ? " and --dec-seqlen" : "",
                                   (long long)(sum_e + sum_d));
        double pe = batch_pad(&r, (int)e), pd = batch_pad(&r, (int)d);
        s->enc_sq += pe * pe, s->dec_sq += pd * pd, s->enc_dec += pe * pd;
    }
    return 0;
}

/* The cost query JSON contract (docs/formats.md). */
static void print_cost_json(const model_spec *m, const char *source, const cost_answer *a,
                            const dp_err *why)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "feasible", a->feasible);
    cJSON_AddStringToObject(o, "cost_model", source);
    if (!a->feasible) {
        cJSON_AddStringToObject(o, "reason", why->msg);
    } else {
        /* T5: the slower of its encoder and decoder layers */
        int t5 = m->arch == ARCH_T5;
        const cost_layer *l = t5 && a->layer[1].fwd_ms + a->layer[1].bwd_ms >
                                        a->layer[0].fwd_ms + a->layer[0].bwd_ms
                                  ? &a->layer[1]
                                  : &a->layer[0];
        if (a->has_moe && a->moe.fwd_ms + a->moe.bwd_ms > l->fwd_ms + l->bwd_ms) l = &a->moe;
        const mb_cost *c = &a->stage;
        int at = a->slowest;
        cJSON_AddNumberToObject(o, "fwd_ms_per_layer", l->fwd_ms);
        cJSON_AddNumberToObject(o, "bwd_ms_per_layer", l->bwd_ms);
        cJSON_AddNumberToObject(o, "fwd_ms_per_stage", c->fwd_ms[at]);
        cJSON_AddNumberToObject(o, "bwd_ms_per_stage", c->bwd_ms[at]);
        cJSON_AddNumberToObject(o, "stored_act_mb_per_layer", l->stored_act_mb);
        cJSON_AddNumberToObject(o, "stored_act_mb_per_stage", c->stored_mb[at]);
        cJSON_AddNumberToObject(o, "peak_act_mb", c->peak_mb[at]);
        cJSON_AddNumberToObject(o, "stage", at);
        for (int k = 0; t5 && k < 2; k++) {
            cJSON *e = cJSON_AddObjectToObject(o, k ? "decoder_layer" : "encoder_layer");
            cJSON_AddNumberToObject(e, "fwd_ms", a->layer[k].fwd_ms);
            cJSON_AddNumberToObject(e, "bwd_ms", a->layer[k].bwd_ms);
        }
    }
    char *text = cJSON_Print(o);
    puts(text);
    free(text);
    cJSON_Delete(o);
}

static void print_cost_text(const model_spec *m, const cost_request *co, const cost_shape *s,
                            const char *source, const char *samples, int pp, const cost_answer *a,
                            const dp_err *why)
{
    int t5 = m->arch == ARCH_T5;
    printf("# model %s, tp %d, recompute %s, mbs %d, seqlen %d", m->name, co->tp,
           recompute_policy_name(co->recompute), s->mbs, s->enc_len);
    if (t5) printf(", dec-seqlen %d", s->dec_len);
    printf("\n# cost model: %s\n", source);
    if (samples) printf("# attention per sample (varlen) over %s\n", samples);
    for (int k = 0; k < 2; k++)
        if (a->has_fit[k])
            printf("# the profile's %s attention term (what varlen and --flash-attention "
                   "move) is fitted over %d grid points above the launch floor: held-out "
                   "error median %.1f%%, max %.1f%%\n", component_name((cost_component)k),
                   a->fit[k].n_points, a->fit[k].median_err_pct, a->fit[k].max_err_pct);
    if (!a->feasible) {
        printf("infeasible: %s\n", why->msg);
        return;
    }
    printf("%-16s %10s %10s %12s %12s\n", "component", "fwd", "bwd", "stored_act", "peak_act");
    printf("%-16s %10s %10s %12s %12s\n", "#", "ms", "ms", "MB", "MB");
    int dense = !a->has_moe || model_moe_layers(m) < m->enc_layers;
    for (int k = 0; k < (t5 ? 2 : 1) && dense; k++)
        printf("%-16s %10.3f %10.3f %12.1f %12.1f\n",
               k ? "decoder layer" : (t5 ? "encoder layer" : a->has_moe ? "dense layer" : "layer"),
               a->layer[k].fwd_ms, a->layer[k].bwd_ms, a->layer[k].stored_act_mb,
               a->layer[k].peak_act_mb);
    if (a->has_moe)
        printf("%-16s %10.3f %10.3f %12.1f %12.1f\n", "MoE layer", a->moe.fwd_ms, a->moe.bwd_ms,
               a->moe.stored_act_mb, a->moe.peak_act_mb);
    const mb_cost *c = &a->stage;
    int at = a->slowest;
    printf("%-16s %10.3f %10.3f %12.1f %12.1f\n", "slowest stage", c->fwd_ms[at], c->bwd_ms[at],
           c->stored_mb[at], c->peak_mb[at]);
    printf("# slowest of %d stage%s: stage %d (the planner's stage model: the last stage adds the "
           "LM head, its activations included)\n", pp, pp == 1 ? "" : "s", at);
    if (a->has_moe)
        printf("# MoE layers: %d of %d, %d experts, %d a token; the busiest expert-parallel rank "
               "computes %.3fx the mean at this shape (moe.h)\n", model_moe_layers(m), m->enc_layers,
               m->experts, m->experts_per_token, a->moe_imbalance);
    if (a->has_moe && a->moe_dropped > 0)
        printf("# at the capacity factor, %.2f%% of the routed copies are dropped at this shape\n",
               100 * a->moe_dropped);
}

/* The shape --mbs, --seqlen, --dec-seqlen and --samples describe, checked against the model: 0,
 * or a usage error's exit status (printed). */
static int cost_shape_of(const char *cmd, const model_spec *m, int64_t mbs, int64_t seqlen,
                         int64_t dec, const char *samples, cost_shape *s)
{
    dp_err err = {0};
    if (m->arch == ARCH_T5 && dec == 0)
        return cli_usage_error(cmd, COST_USAGE, "a T5 model needs --dec-seqlen");
    if (m->arch == ARCH_GPT && dec != 0)
        return cli_usage_error(cmd, COST_USAGE, "a GPT model has no decoder: drop --dec-seqlen");
    /* the rows' attention spans the row; --samples' spans each sample */
    char what[48];
    snprintf(what, sizeof what, "--seqlen %lld", (long long)seqlen);
    if (!samples && model_check_seqlen(m, (int)seqlen, what, &err) != DP_OK)
        return cli_usage_error(cmd, COST_USAGE, "%s", err.msg);
    *s = cost_shape_rows((int)mbs, (int)seqlen, (int)dec);
    return samples ? parse_samples(cmd, samples, m, s) : 0;
}

int cmd_cost(int argc, char **argv)
{
    const char *cmd = "cost";
    cost_request co;
    cost_request_default(&co);
    int64_t mbs = -1, seqlen = -1, dec = 0, pp = 1;
    int json = 0;
    const char *samples = NULL;
    cli_opts t;
    cli_opts_init(&t, cmd, COST_USAGE,
                  "One cost-model query: forward and backward time per layer and per\n"
                  "stage, and stored/peak activation memory, for one micro-batch shape.");
    cli_opt_int64(&t, "mbs", 'b', &mbs, "N", 1, 1 << 24, "required", "micro-batch size (samples)");
    cli_opt_int64(&t, "seqlen", 'l', &seqlen, "L", 1, 1 << 24, "required",
                  "sequence length; T5: encoder length, tokens");
    cli_opt_int64(&t, "dec-seqlen", 'd', &dec, "D", 1, 1 << 24, "T5: required",
                  "T5 decoder length, tokens");
    cli_opt_int64(&t, "pp", 'p', &pp, "S", 1, 4096, "1",
                  "pipeline stages, for the per-stage figures");
    cli_opt_string(&t, "samples", 'S', &samples, "LIST", NULL,
                   "the micro-batch's samples (T5: IN:TARGET pairs), each\n"
                   "attending to itself (varlen/THD): attention per sample");
    cli_opt_flag(&t, "json", 'j', &json, "print the cost query JSON contract");
    cost_request_options(&t, &co);
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    cli_opts_release(&t);
    if (r != 0) return r == 1 ? 0 : r;
    if (mbs < 0 || seqlen < 0) return cli_usage_error(cmd, COST_USAGE, "--mbs and --seqlen are required");

    dp_err err = {0};
    model_spec m;
    cluster_spec hw;
    cost_model *cm = NULL;
    char source[4200];
    dp_status st = planner_build_cost(&co, &m, &hw, &cm, source, sizeof source, &err);
    if (st == DP_ERR_INVALID) return cli_usage_error(cmd, COST_USAGE, "%s", err.msg);
    if (st != DP_OK) return cli_fail(cmd, &err);
    cost_shape s;
    cost_answer a;
    if ((r = cost_shape_of(cmd, &m, mbs, seqlen, dec, samples, &s)) != 0) {
        cost_model_free(cm);
        return r;
    }
    st = planner_cost_answer(cm, (int)pp, &s, &a, &err);
    cost_model_free(cm);
    if (st == DP_ERR_INVALID) return cli_usage_error(cmd, COST_USAGE, "%s", err.msg);
    if (st != DP_OK) return cli_fail(cmd, &err);
    if (json) print_cost_json(&m, source, &a, &err);
    else print_cost_text(&m, &co, &s, source, samples, (int)pp, &a, &err);
    return a.feasible ? 0 : EXIT_RUNTIME;
}

/* ---- calibrate ------------------------------------------------------------------------------- */

static const char CALIB_USAGE[] =
    "dpsim calibrate --profile CSV [--model M] [--hw H] [--tp T] [--holdout F] -o fit.json";

int cmd_calibrate(int argc, char **argv)
{
    const char *cmd = "calibrate", *out = NULL;
    cost_request co;
    cost_request_default(&co);
    double holdout = 0.2;
    int64_t seed = 1;
    cli_opts t;
    cli_opts_init(&t, cmd, CALIB_USAGE,
                  "Fits the analytic cost model's free parameters (efficiencies,\n"
                  "floors, backward ratio) to a measured profile with GSL's nonlinear least\n"
                  "squares, and reports the error on held-out grid points. The fitted JSON is a\n"
                  "cost model: pass it to --fit.");
    cli_opt_double(&t, "holdout", 'H', &holdout, "F", 0, 0.9, "0.2",
                   "fraction of grid points held out for the error");
    cli_opt_int64(&t, "seed", 's', &seed, "S", 0, UINT32_MAX, "1", "seed of the hold-out draw");
    cli_opt_string(&t, "output", 'o', &out, "FILE", NULL, "fitted model JSON, - for stdout");
    cost_request_options(&t, &co);
    int r = cli_opts_parse(&t, argc, argv, NULL, 0, NULL);
    cli_opts_release(&t);
    if (r != 0) return r == 1 ? 0 : r;
    if (co.fit || co.analytic)
        return cli_usage_error(cmd, CALIB_USAGE, "calibrate fits a profile: drop --fit/--analytic");
    if (co.stack != STACK_MEGATRON_TE)
        return cli_usage_error(cmd, CALIB_USAGE, "calibrate fits the analytic model as the default "
                               "stack (megatron-te) prices it: drop --stack");
    dp_err err = {0};
    model_spec m;
    cluster_spec hw;
    cost_model *profile = NULL;
    char source[4200];
    out_role in[] = {{"--profile", co.profile}, {"--model", co.model}, {"--hw", co.hw}},
             outs[] = {{"-o", out}};
    if (planner_check_outputs(NULL, in, 3, outs, 1, &err) != DP_OK)
        return cli_usage_error(cmd, CALIB_USAGE, "%s", err.msg);
    dp_status st = planner_build_cost(&co, &m, &hw, &profile, source, sizeof source, &err);
    if (st == DP_ERR_INVALID) return cli_usage_error(cmd, CALIB_USAGE, "%s", err.msg);
    if (st != DP_OK) return cli_fail(cmd, &err);
    if (strncmp(source, "profile", 7) != 0) {
        cost_model_free(profile);
        return cli_usage_error(cmd, CALIB_USAGE, "no measured profile for %s on %s: pass --profile",
                               m.name, hw.gpu.name);
    }
    calib_result res;
    st = calibrate_fit(profile, holdout, (uint64_t)seed, &res, &err);
    if (st == DP_OK) {
        printf("# calibrated the analytic model of %s on %s to %s\n", m.name, hw.gpu.name, source);
        printf("# %zu grid points fitted, %zu held out (seed %lld), %d iterations\n", res.n_fit,
               res.n_holdout, (long long)seed, res.iterations);
        double a[ANALYTIC_N_PARAMS];
        analytic_params_to_array(&res.params, a);
        for (int i = 0; i < ANALYTIC_N_PARAMS; i++)
            printf("%-14s %10.4f\n", ANALYTIC_PARAM_NAMES[i], a[i]);
        printf("fit median APE        %6.2f %%\n", res.fit_median_ape);
        if (res.n_holdout)
            printf("held-out median APE   %6.2f %%\nheld-out p90 APE      %6.2f %%\n",
                   res.holdout_median_ape, res.holdout_p90_ape);
        if (out) st = calibrate_write(&res, profile, co.hw, out, &err);
    }
    cost_model_free(profile);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}
