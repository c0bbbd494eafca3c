/* tune_run.c — dpsim tune's search in forked workers (tune_run.h). */
#include "tune_run.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../common/json_util.h"
#include "../models/mesh.h"
#include "../common/outfile.h"
#include "../common/pool.h"
#include "../scheduler/microbatch.h"
#include "../scheduler/schedule.h"

/* What the workers share: the base options and environment, and a cost model per (precision, cp,
 * tp, mode), built once before the fork. */
/* The passes (planner_tune): each batching's most promising first-pass points, the rest of its
 * first pass, then everything else. */
enum { TUNE_SEED_PASS, TUNE_FIRST_PASS, TUNE_REST_PASS, TUNE_PASSES };
/* first-pass points per batching in the seed pass: those of the least floor (point_floor_ms) */
#define TUNE_SEEDS 4

typedef struct tune_job {
    const plan_request *base;
    const plan_env *env;
    const tune_space *sp;
    const tune_point *pts;
    tune_result *res;
    /* by (precision, cp, tp, ep) slot and recompute mode */
    cost_model *cm[TUNE_MAX_PRECISION][TUNE_MAX_CP][TUNE_MAX_LIST][TUNE_MAX_EP][RECOMPUTE_COUNT];
    char cm_err[TUNE_MAX_PRECISION][TUNE_MAX_CP][TUNE_MAX_LIST][TUNE_MAX_EP][RECOMPUTE_COUNT][240];
    double t0, last_line, last_write;
    int progress; /* 0 none, 1 a terminal's \r line, 2 lines every TUNE_PROGRESS_EVERY_S */
    tune_run_opts *run;
    long n, todo;  /* points in the space, and to run now */
    int jobs;
    long *order;   /* the points to run, by the pool's index */
    int *group;    /* per point: its (batching, schedule) group, for the ETA */
    double g_sum[TUNE_MAX_LIST * TUNE_MAX_LIST];  /* seconds of each group's finished points */
    long g_done[TUNE_MAX_LIST * TUNE_MAX_LIST], g_left[TUNE_MAX_LIST * TUNE_MAX_LIST];
    dp_err write_err;
    /* pruning (tune_run.h): the real tokens a point simulates at most, and per batching the
     * best throughput of its first pass (0: none, no pruning) */
    int64_t scored_tokens;
    double cutoff_tps[TUNE_MAX_LIST];
    int *phase;     /* per point: the pass it runs in (TUNE_SEED_PASS, TUNE_FIRST_PASS, or the rest) */
    /* the same per (pass, group), for the ETA: a pass's pruned points cost next to nothing */
    double p_sum[TUNE_PASSES][TUNE_MAX_LIST * TUNE_MAX_LIST];
    long p_done[TUNE_PASSES][TUNE_MAX_LIST * TUNE_MAX_LIST];
    long p_left[TUNE_PASSES][TUNE_MAX_LIST * TUNE_MAX_LIST];
    int phase_now;  /* the pass running */
    int last_phase;
    int shared_all; /* every process's results are in (over processes: after the last pass) */
} tune_job;

/* The figure pass `phase` prunes batching b's points against: the best throughput of its earlier
 * passes among the points done, as the ranking CSV writes it (0.01 tokens/s), so that a resumed
 * search cuts at the same figure. */
static double phase_cutoff(const tune_job *j, int b, int phase)
{
    const tune_result *best = NULL;
    for (long i = 0; i < j->n; i++)
        if (j->res[i].done && j->res[i].ok && j->group[i] / TUNE_MAX_LIST == b &&
            j->phase[i] < phase && (!best || j->res[i].throughput > best->throughput))
            best = &j->res[i];
    char text[64];
    snprintf(text, sizeof text, "%.2f", best ? best->throughput : 0);
    return strtod(text, NULL);
}

static int tp_slot(const tune_space *sp, int tp)
{
    for (int t = 0; t < sp->n_tps; t++)
        if (sp->tps[t] == tp) return t;
    return 0;
}

static int cp_slot(const tune_space *sp, const tune_point *pt)
{
    for (int c = 0; c < sp->n_cps; c++)
        if (sp->cps[c] == pt->cp && sp->cp_autos[c] == pt->cp_auto) return c;
    return 0;
}

static int ep_slot(const tune_space *sp, int ep)
{
    for (int e = 0; e < sp->n_eps; e++)
        if (sp->eps[e] == ep) return e;
    return 0;
}

static int precision_slot(const tune_space *sp, int precision)
{
    for (int f = 0; f < sp->n_precisions; f++)
        if (sp->precisions[f] == precision) return f;
    return 0;
}

/* The cost models a job keeps for point pt, by recompute mode. */
static cost_model *const *point_cost_models(const tune_job *j, const tune_point *pt)
{
    return j->cm[precision_slot(j->sp, pt->precision)][cp_slot(j->sp, pt)][tp_slot(j->sp, pt->tp)]
                [ep_slot(j->sp, pt->ep)];
}

/* The cost model of a point's (precision, tp, cp, ep, mode): the request's, at that precision, tp,
 * cp (cp_auto: a group of cp GPUs, each micro-batch at its own degree) and ep; each point places
 * its experts' GPUs (point_opts). */
static dp_status build_cost(const plan_request *base, const plan_env *env, int precision, int tp,
                            int cp, int cp_auto, int ep, recompute_mode m, cost_model **cm, dp_err *err)
{
    cost_request c = base->cost;
    c.cp = cp, c.cp_auto = cp_auto, c.ep = ep > 1 ? ep : 1;
    c.precision = precision;
    model_spec ms;
    cluster_spec hw;
    char source[4200];
    dp_status st = planner_build_cost_at(&c, tp, m, &ms, &hw, cm, source, sizeof source, err);
    if (st == DP_OK) (*cm)->hw = env->hw; /* with the what-if link overrides */
    return st;
}

/* The study options of point pt over the base request, with the cost models use[] (by mode); p
 * holds the request they point into. */
static void point_opts(const plan_request *base, const plan_env *env, const tune_point *pt,
                       cost_model *const *use, plan_request *p, study_opts *o)
{
    int dynamic = pt->recompute == RECOMPUTE_POLICY_DYNAMIC;
    *p = *base;
    p->batching = pt->batching, p->schedule = pt->schedule, p->chunks = pt->chunks > 1 ? pt->chunks : 1;
    p->cost.tp = pt->tp, p->cost.cp = pt->cp, p->cost.cp_auto = pt->cp_auto;
    p->pp = pt->pp, p->dp = pt->dp, p->zero = pt->zero;
    p->cost.precision = pt->precision, p->shard_group = pt->shard_group;
    p->cost.ep = pt->ep > 1 ? pt->ep : 1;
    p->mbs = pt->mbs, p->mb_tokens = pt->mb_tokens;
    p->cost.recompute = pt->recompute;
    mesh layout = mesh_of(pt->tp, pt->cp, pt->pp, pt->dp); /* the experts' GPUs on this layout */
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        if (use[m]) cost_model_place_ep(use[m], &layout);
    planner_study_opts(p, env, pt->batching, pt->schedule, o);
    o->cm = use[dynamic ? 0 : recompute_policy_mode(pt->recompute)];
    for (int m = 0; m < RECOMPUTE_COUNT; m++) o->recompute_cm[m] = dynamic ? use[m] : NULL;
}

dp_status planner_tune_point(const plan_request *base, const plan_env *env, const tune_point *pt,
                       cost_model *const *cms, double prune_ms, study_result *r, dp_err *err)
{
    int dynamic = pt->recompute == RECOMPUTE_POLICY_DYNAMIC;
    recompute_mode rc = recompute_policy_mode(pt->recompute);
    cost_model *own[RECOMPUTE_COUNT] = {NULL}, *use[RECOMPUTE_COUNT] = {NULL};
    dp_status st = DP_OK;
    memset(r, 0, sizeof *r);
    for (int m = 0; m < RECOMPUTE_COUNT && st == DP_OK; m++) {
        if (!dynamic && m != (int)rc) continue;
        if (cms) {
            use[m] = cms[m];
            if (!use[m]) st = dp_fail(err, DP_ERR_INVALID, "no cost model for tp %d", pt->tp);
            continue;
        }
        st = build_cost(base, env, pt->precision, pt->tp, pt->cp, pt->cp_auto, pt->ep,
                        (recompute_mode)m, &own[m], err);
        if (st == DP_OK) use[m] = own[m];
    }
    if (st == DP_OK) {
        plan_request p;
        study_opts o;
        point_opts(base, env, pt, use, &p, &o);
        o.prune_ms = prune_ms;
        st = study_run(&o, &env->trace, r, err);
    }
    for (int m = 0; m < RECOMPUTE_COUNT; m++) cost_model_free(own[m]);
    return st;
}

/* A lower bound on point i's simulated time from its tokens alone (study_floor_ms), ms; INFINITY
 * where its model state does not fit or its cost model could not be made, 0 where there is no
 * bound. */
static double point_floor_ms(const tune_job *j, long i)
{
    const tune_point *pt = &j->pts[i];
    cost_model *const *use = point_cost_models(j, pt);
    int dynamic = pt->recompute == RECOMPUTE_POLICY_DYNAMIC;
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        if ((dynamic || m == (int)recompute_policy_mode(pt->recompute)) && !use[m]) return INFINITY;
    plan_request p;
    study_opts o;
    point_opts(j->base, j->env, pt, use, &p, &o);
    double ms;
    dp_err ignored = {0};
    return study_floor_ms(&o, &j->env->trace, &ms, &ignored) == DP_OK ? ms : INFINITY;
}

/* A worker's reply for one point, the one writer of what tune_done reads: "OK THROUGHPUT MFU
 * PEAK SECONDS WHY". */
static void eval_reply(char *out, size_t cap, int ok, double tps, double mfu, double peak,
                       double seconds, const char *why)
{
    snprintf(out, cap, "%d %.17g %.17g %.17g %.6f %.230s", ok, tps, mfu, peak, seconds, why);
}

/* One point, in a worker (eval_reply). */
static void tune_eval(void *ctx, long k, char *out, size_t cap)
{
    tune_job *j = ctx;
    long i = j->order[k];
    double t0 = dp_now_s();
    const tune_point *pt = &j->pts[i];
    int f = precision_slot(j->sp, pt->precision), c = cp_slot(j->sp, pt);
    int t = tp_slot(j->sp, pt->tp), e = ep_slot(j->sp, pt->ep);
    int dynamic = pt->recompute == RECOMPUTE_POLICY_DYNAMIC;
    recompute_mode rc = recompute_policy_mode(pt->recompute);
    for (int m = 0; m < RECOMPUTE_COUNT; m++)
        if ((dynamic || m == (int)rc) && !j->cm[f][c][t][e][m]) { /* why it could not be made */
            eval_reply(out, cap, 0, 0, 0, 0, dp_now_s() - t0, j->cm_err[f][c][t][e][m]);
            return;
        }
    study_result r;
    dp_err err = {0};
    double cutoff = j->cutoff_tps[j->group[i] / TUNE_MAX_LIST];
    double prune_ms = cutoff > 0 && j->scored_tokens > 0 ? 1e3 * (double)j->scored_tokens / cutoff : 0;
    dp_status st = planner_tune_point(j->base, j->env, pt, j->cm[f][c][t][e], prune_ms, &r, &err);
    double peak = study_max_peak_mb(&r);
    /* a configuration that leaves an iteration out (--keep-going) does not run the trace */
    int ok = st == DP_OK && study_result_fits(&r) && !r.failed_iterations && !(r.pruned_ms > 0);
    char pruned[240];
    if (st == DP_OK && r.pruned_ms > 0)
        snprintf(pruned, sizeof pruned, TUNE_WHY_PRUNED "at most %.0f tokens/s (a lower bound on "
                 "its time%s), below the %.0f of the best configuration of the first pass%s",
                 1e3 * (double)j->scored_tokens / r.pruned_ms,
                 r.pruned_unplanned ? " from its tokens, before planning" : "", cutoff,
                 j->phase_now == TUNE_FIRST_PASS ? "'s most promising" : "");
    const char *why = st != DP_OK ? err.msg : ok ? "" : r.pruned_ms > 0 ? pruned
                      : r.why[0] ? r.why : "no iteration";
    eval_reply(out, cap, ok, ok ? r.throughput_tokens_per_s : 0, ok ? r.mfu : 0, peak,
               dp_now_s() - t0, why);
    study_result_release(&r);
}

/* Hands the results of this pass's points run here to the other processes and takes theirs
 * (tune_run_opts.allgather); every process's stop flag too: any stopped stops all. A line per
 * result: "R index ok died throughput mfu peak seconds why", and "S stopped". */
static dp_status share_pass(tune_job *j, dp_err *err)
{
    tune_run_opts *run = j->run;
    size_t cap = 64 + (size_t)j->todo * 600, at = 0; /* a line: 7 numbers and a why of < 240 */
    char *mine = malloc(cap), *all = NULL;
    if (!mine) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    at += (size_t)snprintf(mine, cap, "S %d\n", run->stopped);
    for (long k = 0; k < j->todo; k++) {
        const tune_result *r = &j->res[j->order[k]];
        if (!r->done) continue;
        at += (size_t)snprintf(mine + at, cap - at, "R %ld %d %d %.17g %.17g %.17g %.6f %.300s\n",
                               j->order[k], r->ok, r->died, r->throughput, r->mfu, r->peak_mb,
                               r->seconds, r->why);
    }
    if (run->allgather(run->allgather_ctx, mine, &all) != 0) {
        free(mine);
        return dp_fail(err, DP_ERR_IO, "the processes of the search could not exchange results");
    }
    free(mine);
    for (char *line = all; line && *line;) {
        char *end = strchr(line, '\n');
        if (end) *end = '\0';
        int stopped, used = 0, ok, died;
        long i;
        tune_result x;
        if (sscanf(line, "S %d", &stopped) == 1) {
            run->stopped |= stopped;
        } else if (sscanf(line, "R %ld %d %d %lf %lf %lf %lf %n", &i, &ok, &died, &x.throughput,
                          &x.mfu, &x.peak_mb, &x.seconds, &used) >= 7 && i >= 0 && i < j->n &&
                   !j->res[i].done) {
            tune_result *r = &j->res[i];
            r->ok = ok, r->died = died, r->done = 1;
            r->throughput = x.throughput, r->mfu = x.mfu, r->peak_mb = x.peak_mb;
            r->seconds = x.seconds;
            snprintf(r->why, sizeof r->why, "%s", line + used);
            run->ran++;
            run->died += died;
        }
        line = end ? end + 1 : NULL;
    }
    free(all);
    return DP_OK;
}

/* Writes the ranking of what is done so far to run->out (a temporary, then a rename). */
static dp_status write_ranking(const tune_job *j, const char *path, dp_err *err)
{
    tune_result *done = malloc((size_t)(j->n ? j->n : 1) * sizeof *done);
    if (!done) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    long m = 0;
    for (long i = 0; i < j->n; i++)
        if (j->res[i].done) done[m++] = j->res[i];
    tune_rank(done, m);
    out_file of;
    dp_status st = out_open(&of, path, err);
    if (st == DP_OK) {
        fprintf(of.fp, "%s\n", TUNE_CSV_HEADER);
        char row[600];
        for (long i = 0; i < m; i++) {
            tune_csv_row(&done[i], i + 1, row, sizeof row);
            fprintf(of.fp, "%s\n", row);
        }
        st = out_commit(&of, err);
    }
    free(done);
    return st;
}

static void tune_done(void *ctx, long k, const char *text)
{
    tune_job *j = ctx;
    long i = j->order[k];
    tune_result *r = &j->res[i];
    r->done = 1;
    j->run->ran++;
    j->g_left[j->group[i]]--, j->p_left[j->phase[i]][j->group[i]]--;
    int used = 0;
    if (!text || sscanf(text, "%d %lf %lf %lf %lf %n", &r->ok, &r->throughput, &r->mfu,
                        &r->peak_mb, &r->seconds, &used) < 5) {
        r->ok = 0, r->died = 1;
        j->run->died++;
        snprintf(r->why, sizeof r->why, "%s", TUNE_WHY_DIED);
        return;
    }
    snprintf(r->why, sizeof r->why, "%s", text + used);
    for (char *c = r->why; *c; c++)
        if (*c == '\n') *c = ' ';
    j->g_sum[j->group[i]] += r->seconds, j->g_done[j->group[i]]++;
    j->p_sum[j->phase[i]][j->group[i]] += r->seconds, j->p_done[j->phase[i]][j->group[i]]++;
}

/* The seconds the points not yet done will take over the workers: each (pass, batching, schedule)
 * group's mean time per point so far — the group's over its passes where the pass has none yet,
 * the overall mean where the group has none — times what it has left; NAN before any point has
 * finished. A pass runs its points in a shuffled order (planner_tune), so a mean so far is one of
 * a sample, not of the first points in the enumeration's order. */
static double eta_s(const tune_job *j)
{
    double all = 0, left = 0;
    long nall = 0;
    for (int g = 0; g < TUNE_MAX_LIST * TUNE_MAX_LIST; g++) all += j->g_sum[g], nall += j->g_done[g];
    if (nall == 0) return NAN;
    for (int q = 0; q < TUNE_PASSES; q++)
        for (int g = 0; g < TUNE_MAX_LIST * TUNE_MAX_LIST; g++) {
            double mean = j->p_done[q][g] ? j->p_sum[q][g] / j->p_done[q][g]
                          : j->g_done[g]  ? j->g_sum[g] / j->g_done[g]
                                          : all / nall;
            left += j->p_left[q][g] * mean;
        }
    return left / j->jobs;
}

/* Shuffles v[0..n) in a fixed order (the same every run: a search's results do not depend on it). */
static void shuffle_fixed(long *v, long n, unsigned seed)
{
    uint64_t x = 0x9E3779B97F4A7C15ull ^ seed;
    for (long i = n - 1; i > 0; i--) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
        long k = (long)(x % (uint64_t)(i + 1)), t = v[i];
        v[i] = v[k], v[k] = t;
    }
}

/* Where the search's time went, as a note: the (batching, schedule) groups that took the most of
 * the workers' seconds, each with its share, configurations and mean seconds (what to leave out
 * of --batchings or --schedules to search faster). */
#define TIME_WENT_GROUPS 3
static void time_went(const tune_job *j)
{
    double all = 0;
    for (int g = 0; g < TUNE_MAX_LIST * TUNE_MAX_LIST; g++) all += j->g_sum[g];
    if (!(all > 0)) return;
    char line[600];
    int at = snprintf(line, sizeof line, "dpsim tune: where the time went (workers' seconds):");
    int used[TIME_WENT_GROUPS];
    for (int k = 0; k < TIME_WENT_GROUPS; k++) {
        int best = -1;
        for (int g = 0; g < TUNE_MAX_LIST * TUNE_MAX_LIST; g++) {
            int taken = 0;
            for (int q = 0; q < k; q++) taken |= used[q] == g;
            if (!taken && j->g_done[g] && (best < 0 || j->g_sum[g] > j->g_sum[best])) best = g;
        }
        if (best < 0) break;
        used[k] = best;
        at += snprintf(line + at, sizeof line - (size_t)at, "%s %s/%s %.0f%% (%ld, %.3g s each)",
                       k ? "," : "", j->sp->batchings[best / TUNE_MAX_LIST],
                       j->sp->schedules[best % TUNE_MAX_LIST], 100 * j->g_sum[best] / all,
                       j->g_done[best], j->g_sum[best] / j->g_done[best]);
        if (at >= (int)sizeof line) break;
    }
    dp_note(DP_NOTE_LINE, "%s", line);
}

static void tune_progress(void *ctx, long finished, long n)
{
    tune_job *j = ctx;
    double now = dp_now_s();
    /* the search's last point (over processes: once the last results are shared, below) */
    int end = finished == n && j->last_phase && (j->run->ranks <= 1 || j->shared_all);
    if (j->run->out && j->run->rank == 0 &&
        (now - j->last_write >= TUNE_WRITE_EVERY_S || finished == n)) {
        if (write_ranking(j, j->run->out, &j->write_err) != DP_OK) j->run->out = NULL;
        j->last_write = now;
    }
    if (!j->progress) return;
    if (j->progress == 2 && now - j->last_line < TUNE_PROGRESS_EVERY_S && !end) return;
    j->last_line = now;
    const tune_result *best = NULL;
    long feasible = 0;
    for (long i = 0; i < j->n; i++)
        if (j->res[i].done && j->res[i].ok) {
            feasible++;
            if (!best || j->res[i].throughput > best->throughput) best = &j->res[i];
        }
    char line[600], desc[256] = "";
    long pruned = 0, done = 0; /* here, resumed, and shared by other processes */
    for (long i = 0; i < j->n; i++)
        done += j->res[i].done, pruned += j->res[i].done && tune_result_pruned(&j->res[i]);
    int at = snprintf(line, sizeof line, "dpsim tune: %ld/%ld configurations done (%ld fit",
                      done, j->n, feasible);
    at += snprintf(line + at, sizeof line - (size_t)at, pruned ? ", %ld pruned)" : ")", pruned);
    if (best) {
        tune_point_describe(&best->pt, desc, sizeof desc);
        at += snprintf(line + at, sizeof line - (size_t)at, ", best %.0f tokens/s (%s)",
                       best->throughput, desc);
    }
    double eta = eta_s(j);
    if (!end && !isnan(eta))
        snprintf(line + at, sizeof line - (size_t)at, ", ETA %.0f s", eta);
    else if (end)
        snprintf(line + at, sizeof line - (size_t)at, ", %.0f s", now - j->t0);
    dp_note(j->progress == 2 ? DP_NOTE_LINE : end ? DP_NOTE_PROGRESS_END : DP_NOTE_PROGRESS, "%s",
            line);
}

/* Each point's pass: the first-pass points (tune_first_pass) in TUNE_FIRST_PASS, but where the
 * search prunes, the TUNE_SEEDS of each batching whose tokens bound their time the least
 * (point_floor_ms; ties to the earlier point; never one whose model state does not fit) in
 * TUNE_SEED_PASS: they set the figure the rest of the first pass is cut against. Everything else
 * in TUNE_REST_PASS. */
static void assign_passes(tune_job *j)
{
    j->phase = dp_xcalloc((size_t)j->n, sizeof *j->phase);
    for (long i = 0; i < j->n; i++)
        j->phase[i] = tune_first_pass(j->sp, &j->pts[i]) ? TUNE_FIRST_PASS : TUNE_REST_PASS;
    if (j->scored_tokens <= 0) return;
    double *floor = dp_xcalloc((size_t)j->n, sizeof *floor);
    for (long i = 0; i < j->n; i++)
        floor[i] = j->phase[i] == TUNE_FIRST_PASS ? point_floor_ms(j, i) : INFINITY;
    for (int b = 0; b < j->sp->n_batchings; b++)
        for (int k = 0; k < TUNE_SEEDS; k++) {
            long best = -1;
            for (long i = 0; i < j->n; i++)
                if (j->group[i] / TUNE_MAX_LIST == b && j->phase[i] == TUNE_FIRST_PASS &&
                    isfinite(floor[i]) && (best < 0 || floor[i] < floor[best]))
                    best = i;
            if (best < 0) break;
            j->phase[best] = TUNE_SEED_PASS;
        }
    free(floor);
}

dp_status planner_tune(const plan_request *base, const plan_env *env, const tune_space *sp, int jobs,
                   tune_run_opts *run, tune_result **out, long *n_out, dp_err *err)
{
    tune_run_opts none = {0};
    if (!run) run = &none;
    run->resumed = run->ran = run->died = 0, run->stopped = 0;
    *out = NULL, *n_out = 0;
    tune_point *pts = NULL;
    long n = tune_points(sp, &pts);
    if (n == 0) {
        char eps[96] = ""; /* a MoE's ep degrees, which a stage's GPUs must hold */
        if (sp->n_eps > 1 || (sp->n_eps == 1 && sp->eps[0] > 1)) {
            int at = snprintf(eps, sizeof eps, ", ep ");
            for (int i = 0; i < sp->n_eps && at < (int)sizeof eps - 32; i++)
                at += snprintf(eps + at, sizeof eps - (size_t)at, "%s%d", i ? "," : "", sp->eps[i]);
            snprintf(eps + at, sizeof eps - (size_t)at, " dividing a stage's GPUs");
        }
        return dp_fail(err, DP_ERR_INVALID, "no configuration of %d GPUs to try (tp at most %d per "
                       "node, pp at most %d layers%s%s)", sp->gpus, sp->gpus_per_node, sp->layers,
                       eps, sp->t5 ? ", even for T5" : "");
    }
    tune_job *j = dp_xcalloc(1, sizeof *j);
    j->base = base, j->env = env, j->sp = sp, j->pts = pts;
    /* scored on the first batches and the one with the longest sample (planner/tune.h), where the
     * trace is in memory */
    plan_env *scored = NULL;
    if (!env->stream_path && base->iterations > 0) {
        scored = dp_xcalloc(1, sizeof *scored);
        *scored = *env;
        int longest;
        dp_status st = tune_scoring_trace(&env->trace, &env->rules, base->iterations,
                                          &scored->trace, &longest, err);
        if (st != DP_OK) {
            free(scored), free(j), free(pts);
            return st;
        }
        j->env = scored;
    }
    j->res = dp_xcalloc((size_t)n, sizeof *j->res);
    for (long i = 0; i < n; i++) j->res[i].pt = pts[i], j->res[i].index = i;
    j->run = run, j->n = n, j->jobs = jobs > 0 ? jobs : 1;
    j->t0 = j->last_line = j->last_write = dp_now_s();
    j->progress = run->quiet ? 0 : run->terminal ? 1 : run->progress_lines ? 2 : 0;
    struct stat sb;
    if (run->resume && run->out && stat(run->out, &sb) == 0) { /* none yet: nothing to read */
        long foreign = 0;
        dp_status st = tune_read_ranking(run->out, j->res, n, &run->resumed, &foreign, err);
        if (st == DP_OK && foreign > 0)
            st = dp_fail(err, DP_ERR_INVALID, "%s: %ld of its rows are configurations this search "
                         "does not have: it was made with other options\nhint: the same options, "
                         "or a new -o", run->out, foreign);
        if (st != DP_OK) {
            free(j->res), free(j), free(pts);
            if (scored) trace_release(&scored->trace);
            free(scored);
            return st;
        }
    }
    j->order = dp_xcalloc((size_t)n, sizeof *j->order);
    j->group = dp_xcalloc((size_t)n, sizeof *j->group);
    long todo = 0;
    for (long i = 0; i < n; i++) {
        int b = 0, q = 0;
        while (b < sp->n_batchings - 1 && strcmp(sp->batchings[b], pts[i].batching) != 0) b++;
        while (q < sp->n_schedules - 1 && strcmp(sp->schedules[q], pts[i].schedule) != 0) q++;
        j->group[i] = b * TUNE_MAX_LIST + q;
        if (!j->res[i].done) todo++, j->g_left[j->group[i]]++;
    }
    if (j->env != env && !run->exhaustive) /* the scoring trace's real tokens: what a point
                                            * simulates at most (0: no pruning) */
        for (size_t i = 0; i < j->env->trace.n; i++) {
            sample_len x = batch_sample(&j->env->rules, &j->env->trace, i);
            j->scored_tokens += x.enc + x.dec;
        }
    for (int f = 0; f < sp->n_precisions; f++) /* the cost models the points use, once */
        for (int c = 0; c < sp->n_cps; c++)
            for (int t = 0; t < sp->n_tps; t++)
                for (int x = 0; x < sp->n_eps; x++) {
                    int used = 0, ep = sp->eps[x];
                    for (long i = 0; i < n; i++)
                        used |= pts[i].tp == sp->tps[t] && cp_slot(sp, &pts[i]) == c &&
                                pts[i].precision == sp->precisions[f] && ep_slot(sp, pts[i].ep) == x;
                    for (int m = 0; used && m < RECOMPUTE_COUNT; m++) {
                        dp_err e = {0};
                        if (build_cost(base, env, sp->precisions[f], sp->tps[t], sp->cps[c],
                                       sp->cp_autos[c], ep, (recompute_mode)m,
                                       &j->cm[f][c][t][x][m], &e) != DP_OK)
                            snprintf(j->cm_err[f][c][t][x][m], sizeof j->cm_err[f][c][t][x][m],
                                     "%.230s", e.msg);
                    }
                }
    assign_passes(j);
    for (long i = 0; i < n; i++)
        if (!j->res[i].done) j->p_left[j->phase[i]][j->group[i]]++;
    if (j->progress)
        dp_note(DP_NOTE_LINE, "dpsim tune: %ld configurations on %d GPUs, %ld to run%s, %d workers",
                n, sp->gpus, todo, run->resumed ? " (the rest resumed)" : "", jobs);
    /* Three passes (assign_passes): each batching's most promising points of the first
     * schedule without recompute; the rest of those; then everything else. A point of a later
     * pass is dropped once a lower bound on its time says it cannot reach the best of its
     * batching's earlier passes (as the ranking CSV writes it, so that a resumed search cuts at
     * the same figure). The best is never dropped; which others are depends on the inputs only. */
    int ranks = run->ranks > 1 && run->allgather ? run->ranks : 1;
    dp_status sst = DP_OK;
    if (ranks > 1) { /* every process has read the resumed ranking before rank 0 rewrites it */
        long todo_all = j->todo;
        j->todo = 0;
        sst = share_pass(j, err);
        j->todo = todo_all;
    }
    /* A resumed ranking's rows of a later pass were cut at the best of the earlier passes as it
     * was then; one whose earlier passes had lost a point (a dead worker) may have cut at a lower
     * figure than they give whole. Those rows run again once the earlier passes are whole. */
    double resumed_cutoff[TUNE_PASSES][TUNE_MAX_LIST];
    for (int phase = 0; phase < TUNE_PASSES; phase++)
        for (int b = 0; b < sp->n_batchings; b++) resumed_cutoff[phase][b] = phase_cutoff(j, b, phase);
    for (int phase = 0; phase < TUNE_PASSES && !run->stopped && sst == DP_OK; phase++) {
        for (int b = 0; b < sp->n_batchings && j->scored_tokens > 0 && phase > 0; b++) {
            j->cutoff_tps[b] = phase_cutoff(j, b, phase);
            if (j->cutoff_tps[b] == resumed_cutoff[phase][b]) continue;
            for (long i = 0; i < n; i++)
                if (j->res[i].done && j->group[i] / TUNE_MAX_LIST == b && j->phase[i] == phase) {
                    j->res[i] = (tune_result){.pt = pts[i], .index = i};
                    run->resumed--, j->g_left[j->group[i]]++, j->p_left[phase][j->group[i]]++;
                }
        }
        j->todo = 0;
        long at = 0; /* this pass's points, every ranks-th one here */
        for (long i = 0; i < n; i++)
            if (!j->res[i].done && j->phase[i] == phase && at++ % ranks == run->rank)
                j->order[j->todo++] = i;
        shuffle_fixed(j->order, j->todo, (unsigned)phase); /* for the ETA's means (eta_s) */
        j->phase_now = phase;
        j->last_phase = phase == TUNE_REST_PASS;
        int rc = j->todo ? pool_run_until(j->todo, jobs, tune_eval, tune_done, tune_progress, j,
                                          run->stop)
                         : 0;
        run->stopped = rc == 1 || (rc == -1 && run->stop && *run->stop);
        if (ranks > 1) sst = share_pass(j, err);
    }
    if (ranks > 1 && sst == DP_OK) { /* the closing progress line, over every process's results */
        j->shared_all = 1, j->last_phase = 1, j->last_line = 0;
        tune_progress(j, 1, 1);
    }
    if (run->out && run->rank == 0) /* what finished, as it is */
        if (write_ranking(j, run->out, &j->write_err) != DP_OK) run->out = NULL;
    if (j->progress && ranks == 1) time_went(j);
    for (int f = 0; f < sp->n_precisions; f++)
        for (int c = 0; c < sp->n_cps; c++)
            for (int t = 0; t < sp->n_tps; t++)
                for (int x = 0; x < TUNE_MAX_EP; x++)
                    for (int m = 0; m < RECOMPUTE_COUNT; m++) cost_model_free(j->cm[f][c][t][x][m]);
    /* a dead worker's point is reported as not ok, with why, and counted in run->died */
    tune_rank(j->res, n);
    dp_status wst = sst != DP_OK ? sst : j->write_err.msg[0] ? DP_ERR_IO : DP_OK;
    if (sst == DP_OK && wst != DP_OK) *err = j->write_err;
    free(j->order), free(j->group), free(j->phase);
    *out = j->res;
    *n_out = n;
    if (scored) trace_release(&scored->trace);
    free(scored);
    free(j);
    free(pts);
    return wst;
}

void tune_config_of(const plan_request *p, const plan_env *env, const tune_space *sp,
                    const char *batchings, const char *schedules, const tune_list_arg *cps,
                    const tune_list_arg *precisions, int exhaustive, char *out, size_t cap)
{
    char cp_list[80], precision_list[40];
    plan_request_config(p, NULL, 0, out, cap > 600 ? cap - 600 : cap);
    tune_list_describe(cps, cp_list, sizeof cp_list);
    tune_list_describe(precisions, precision_list, sizeof precision_list);
    size_t at = strlen(out);
    at += (size_t)snprintf(out + at, cap - at, "gpus=%d\nbatchings=%s\nschedules=%s\ncp-list=%s\n"
                           "exhaustive=%d\n", sp->gpus, batchings, schedules, cp_list, exhaustive);
    if (sp->zero_pipeline && at < cap) /* only when set: earlier rankings resume as they were */
        at += (size_t)snprintf(out + at, cap - at, "zero-pipeline=1\n");
    if (precisions->n && at < cap) /* (the same) */
        at += (size_t)snprintf(out + at, cap - at, "precision-list=%s\n", precision_list);
    if (model_is_moe(&env->model) && at < cap) { /* (the same: the degrees searched) */
        at += (size_t)snprintf(out + at, cap - at, "ep-list=");
        for (int e = 0; e < sp->n_eps && at < cap; e++)
            at += (size_t)snprintf(out + at, cap - at, "%s%d", e ? "," : "", sp->eps[e]);
        if (at < cap) snprintf(out + at, cap - at, "\n");
    }
}

dp_status tune_output_begin(const char *out, const char *config, int resume, int rank, dp_err *err)
{
    if (!out) return DP_OK;
    char path[4200];
    planner_config_path(out, path, sizeof path);
    if (resume) {
        char *there = NULL, what[700];
        dp_err ignored = {0};
        if (json_slurp(path, &there, &ignored) != DP_OK)
            return dp_fail(err, DP_ERR_INVALID, "--resume: %s, the configuration of %s, cannot be "
                           "read: the search to go on from is unknown", path, out);
        int differs = planner_config_differs(there, config, what, sizeof what);
        free(there);
        if (differs)
            return dp_fail(err, DP_ERR_INVALID, "--resume: %s was searched with other inputs (%s)"
                           "\nhint: the same options and files, or a new -o", out, what);
        return DP_OK;
    }
    if (rank != 0) return DP_OK;
    if (unlink(out) != 0 && errno != ENOENT) /* a fresh search: no earlier ranking beside it */
        return dp_fail(err, DP_ERR_IO, "%s: cannot remove the earlier ranking: %s", out,
                       strerror(errno));
    out_file cf;
    dp_status st = out_open(&cf, path, err);
    if (st == DP_OK) {
        fputs(config, cf.fp);
        st = out_commit(&cf, err);
    }
    return st;
}

static int set_list(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    tune_list_arg *a = ctx;
    a->n = 0;
    /* one value (or auto): the request's; an ep list is always a list (the set-up checks the
     * request's ep against its own layout, and tune's points set theirs) */
    if (a->kind != TUNE_LIST_EP && (strcmp(arg, "auto") == 0 || !strchr(arg, ',')))
        return a->request_call(a->request_ctx, arg, cmd, usage);
    char why[300];
    int parsed = a->kind == TUNE_LIST_CP ? tune_parse_cp_list(arg, a->vals, &a->n, why, sizeof why)
                 : a->kind == TUNE_LIST_EP ? tune_parse_ep_list(arg, a->vals, &a->n, why, sizeof why)
                                           : tune_parse_precision_list(arg, a->vals, &a->n, why,
                                                                       sizeof why);
    if (parsed != 0) {
        cli_usage_error(cmd, usage, "%s", why);
        return -1;
    }
    if (a->kind == TUNE_LIST_CP) { /* the set-up checks auto where listed (the analytic model,
                                   * the ring form, the group: --cp-max, either side), else the
                                   * largest degree; --cp-kind applies */
        a->cost->cp_auto = 0, a->cost->cp = 1;
        for (int i = 0; i < a->n; i++)
            if (a->vals[i] == TUNE_CP_AUTO) a->cost->cp_auto = 1;
            else if (a->vals[i] > a->cost->cp) a->cost->cp = a->vals[i];
        if (a->cost->cp_auto) a->cost->cp = a->cost->cp_max;
    } else if (a->kind == TUNE_LIST_EP) { /* planner_tune_space checks each against the experts */
    } else { /* the set-up checks fp8 where listed (a GPU may have no FP8 rate), else the first */
        a->cost->precision = a->vals[0];
        for (int i = 0; i < a->n; i++)
            if (a->vals[i] == PRECISION_FP8) a->cost->precision = PRECISION_FP8;
    }
    return 0;
}

void tune_list_describe(const tune_list_arg *a, char *buf, size_t cap)
{
    if (a->n == 0) { /* (--ep's row is an int's: no show; its list is the space's) */
        if (a->request_show) a->request_show(a->request_ctx, buf, cap);
        else snprintf(buf, cap, "%s", "");
        return;
    }
    size_t at = 0;
    for (int i = 0; i < a->n && at < cap; i++)
        at += a->kind == TUNE_LIST_PRECISION
                  ? (size_t)snprintf(buf + at, cap - at, "%s%s", i ? "," : "",
                                     precision_name((train_precision)a->vals[i]))
              : a->vals[i] == TUNE_CP_AUTO
                  ? (size_t)snprintf(buf + at, cap - at, "%sauto", i ? "," : "")
                  : (size_t)snprintf(buf + at, cap - at, "%s%d", i ? "," : "", a->vals[i]);
}

static void show_list(const void *ctx, char *buf, size_t cap) { tune_list_describe(ctx, buf, cap); }

void tune_list_option(cli_opts *t, tune_list_kind kind, tune_list_arg *a, cost_request *cost)
{
    cli_opt *row = cli_opts_find(t, kind == TUNE_LIST_CP ? "cp" : kind == TUNE_LIST_EP ? "ep" : "precision");
    memset(a, 0, sizeof *a);
    a->kind = kind;
    a->cost = cost;
    a->request_call = row->call, a->request_ctx = row->ctx, a->request_show = row->show;
    row->kind = OPT_CALL; /* (--ep's is an int's) */
    row->call = set_list, row->ctx = a, row->show = show_list;
    row->meta = "LIST";
    if (kind == TUNE_LIST_CP)
        row->help = "context-parallel degrees searched (1,2,4,auto), each\n"
                    "dividing --gpus (auto: a group of --cp-max GPUs, each\n"
                    "micro-batch at its own degree); one degree or auto\n"
                    "fixes it as for plan";
    else if (kind == TUNE_LIST_EP)
        row->help = "a mixture of experts' expert-parallel degrees searched\n"
                    "(1,4,8), each dividing the experts; a layout takes those\n"
                    "dividing its tp x cp x dp [1,2,4,8 that divide the\n"
                    "experts and fit a node]";
    else
        row->help = "number formats searched (bf16,fp8), each as plan's\n"
                    "--precision runs it (fp8: Transformer Engine's recipe,\n"
                    "analytic model, a GPU with an FP8 rate); one fixes it";
}

/* The ep degrees searched (tune_space.eps): the list given, each dividing the experts, or for a
 * mixture of experts TUNE_DEFAULT_EPS's that divide them and fit a node; [1] for a dense model. */
static dp_status space_eps(const plan_env *env, const int *eps, int n_eps, tune_space *sp, dp_err *err)
{
    const model_spec *m = &env->model;
    if (n_eps > 0 && !model_is_moe(m))
        return dp_fail(err, DP_ERR_INVALID, "--ep: %s is dense (no experts to spread over GPUs)",
                       m->name);
    sp->n_eps = 0;
    for (int e = 0; e < n_eps && e < TUNE_MAX_EP; e++) {
        if (m->experts % eps[e])
            return dp_fail(err, DP_ERR_INVALID, "--ep %d does not divide the %d experts of %s",
                           eps[e], m->experts, m->name);
        sp->eps[sp->n_eps++] = eps[e];
    }
    static const int defaults[] = TUNE_DEFAULT_EPS;
    for (size_t e = 0; n_eps <= 0 && e < sizeof defaults / sizeof *defaults; e++)
        if (defaults[e] == 1 || (model_is_moe(m) && m->experts % defaults[e] == 0 &&
                                 defaults[e] <= sp->gpus_per_node))
            sp->eps[sp->n_eps++] = defaults[e];
    return DP_OK;
}

dp_status planner_tune_space(const plan_request *p, const plan_env *env, int *gpus,
                             const char *const *bs, int nb, const char *const *ss, int ns,
                             const int *cps, int n_cps, const int *precs, int n_precs,
                             const int *eps, int n_eps, tune_space *sp, dp_err *err)
{
    int have = env->hw.nodes * env->hw.gpus_per_node;
    if (*gpus == 0) *gpus = have > 0 ? have : env->hw.gpus_per_node > 0 ? env->hw.gpus_per_node : 8;
    if (have > 0 && *gpus > have && !p->allow_oversubscribe)
        return dp_fail(err, DP_ERR_INVALID, "--gpus %d, but %s has %d\nhint: a cluster with more "
                       "nodes, or --allow-oversubscribe", *gpus, env->hw.name, have);
    int layers = env->model.arch == ARCH_GPT ? env->model.enc_layers : model_layers(&env->model);
    tune_space_default(sp, *gpus, env->hw.gpus_per_node > 0 ? env->hw.gpus_per_node : 8, layers,
                       env->model.arch == ARCH_T5);
    /* tp only where the layout rule takes it (whole heads and key/value heads, an equal share of
     * the MLP width: mesh_check_model), said once: not a row of the ranking that cannot run */
    int kept = 0;
    dp_err why = {0};
    char left[64] = "";
    for (int t = 0; t < sp->n_tps; t++) {
        mesh l = mesh_of(sp->tps[t], 1, 1, 1);
        dp_err e = {0};
        if (mesh_check_model(&env->model, &l, "--tp", &e) == DP_OK) {
            sp->tps[kept++] = sp->tps[t];
            continue;
        }
        if (!why.msg[0]) why = e;
        size_t at = strlen(left);
        snprintf(left + at, sizeof left - at, "%s%d", at ? ", " : "", sp->tps[t]);
    }
    sp->n_tps = kept;
    if (left[0])
        dp_note(DP_NOTE_LINE, "dpsim tune: tp %s left out of the search: %s", left,
                strtok(why.msg, "\n"));
    /* one degree: every layout's (--cp auto: the group's) */
    int request_cp = p->cost.cp_auto ? TUNE_CP_AUTO : p->cost.cp > 1 ? p->cost.cp : 1;
    if (n_cps <= 0) cps = &request_cp, n_cps = 1;
    sp->n_cps = 0;
    for (int c = 0; c < n_cps && c < TUNE_MAX_CP; c++) {
        int cp_auto = cps[c] == TUNE_CP_AUTO, cp = cp_auto ? p->cost.cp_max : cps[c];
        if (*gpus % cp) {
            int lo = *gpus / cp * cp, hi = lo + cp;
            char near[64];
            if (lo > 0) snprintf(near, sizeof near, "--gpus %d or %d", lo, hi);
            else snprintf(near, sizeof near, "--gpus %d", hi);
            const char *opt = cp_auto ? "--cp-max" : "--cp";
            return dp_fail(err, DP_ERR_INVALID, "--gpus %d is not a multiple of %s %d: every "
                           "layout uses tp x cp x pp x dp GPUs\nhint: %s, or a %s dividing %d",
                           *gpus, opt, cp, near, opt, *gpus);
        }
        sp->cp_autos[sp->n_cps] = cp_auto;
        sp->cps[sp->n_cps++] = cp;
    }
    int request_precision = p->cost.precision >= 0 ? p->cost.precision
                                                    : (int)precision_of_model(&env->model);
    if (n_precs <= 0) precs = &request_precision, n_precs = 1;
    sp->n_precisions = 0;
    for (int f = 0; f < n_precs && f < TUNE_MAX_PRECISION; f++)
        sp->precisions[sp->n_precisions++] = precs[f];
    dp_status st = space_eps(env, eps, n_eps, sp, err);
    if (st != DP_OK) return st;
    sp->etp = p->cost.etp > 1 ? p->cost.etp : 1;
    for (int i = 0; i < nb && sp->n_batchings < TUNE_MAX_LIST; i++) sp->batchings[sp->n_batchings++] = bs[i];
    for (int j = 0; j < ns && sp->n_schedules < TUNE_MAX_LIST; j++) sp->schedules[sp->n_schedules++] = ss[j];
    return DP_OK;
}
