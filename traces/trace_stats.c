#include "trace_stats.h"

#include <cjson/cJSON.h>
#include <gsl/gsl_statistics_double.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Summarises v[0..n) (sorted in place). n >= 1. */
static len_summary summarise(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    len_summary s;
    s.mean = gsl_stats_mean(v, 1, n);
    s.p10 = gsl_stats_quantile_from_sorted_data(v, 1, n, 0.10);
    s.p50 = gsl_stats_quantile_from_sorted_data(v, 1, n, 0.50);
    s.p90 = gsl_stats_quantile_from_sorted_data(v, 1, n, 0.90);
    s.p99 = gsl_stats_quantile_from_sorted_data(v, 1, n, 0.99);
    s.min = (int64_t)v[0];
    s.max = (int64_t)v[n - 1];
    return s;
}

static int hist_bin(int32_t len)
{
    int b = 0;
    while (len > 0 && b < TRACE_HIST_BINS - 1) {
        len >>= 1;
        b++;
    }
    return b;
}

int64_t trace_hist_lo(int b)
{
    return b == 0 ? 0 : (int64_t)1 << (b - 1);
}


static int cmp_task_stats(const void *a, const void *b)
{
    const trace_task_stats *x = a, *y = b;
    if (x->count != y->count) return x->count < y->count ? 1 : -1;
    return strcmp(x->name, y->name);
}

dp_status trace_stats_compute(const trace *t, trace_stats *s, dp_err *err)
{
    memset(s, 0, sizeof *s);
    if (t->n == 0) return dp_fail(err, DP_ERR_INVALID, "the trace has no samples");
    size_t n = t->n, nt = t->n_tasks;
    double *in = malloc(n * sizeof *in), *tg = malloc(n * sizeof *tg), *tot = malloc(n * sizeof *tot);
    size_t *start = calloc(nt + 1, sizeof *start), *fill = calloc(nt, sizeof *fill);
    s->tasks = calloc(nt, sizeof *s->tasks);
    if (!in || !tg || !tot || !start || !fill || !s->tasks) {
        free(in), free(tg), free(tot), free(start), free(fill);
        trace_stats_release(s);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    /* Group samples by task (counting sort), keeping each group's lengths contiguous. */
    for (size_t i = 0; i < n; i++) start[t->samples[i].task + 1]++;
    for (size_t j = 0; j < nt; j++) start[j + 1] += start[j];
    for (size_t i = 0; i < n; i++) {
        const trace_sample *x = &t->samples[i];
        size_t k = start[x->task] + fill[x->task]++;
        in[k] = x->input_len;
        tg[k] = x->target_len;
        tot[k] = (double)x->input_len + x->target_len;
        s->hist_input[hist_bin(x->input_len)]++;
        s->hist_target[hist_bin(x->target_len)]++;
    }
    for (size_t j = 0; j < nt; j++) {
        trace_task_stats *ts = &s->tasks[s->n_tasks];
        size_t c = start[j + 1] - start[j];
        if (c == 0) continue;
        ts->task = (uint32_t)j;
        ts->name = t->tasks[j];
        ts->count = c;
        ts->input = summarise(in + start[j], c);
        ts->target = summarise(tg + start[j], c);
        ts->total = summarise(tot + start[j], c);
        s->n_tasks++;
    }
    qsort(s->tasks, s->n_tasks, sizeof *s->tasks, cmp_task_stats);
    s->count = n;
    s->input = summarise(in, n);
    s->target = summarise(tg, n);
    s->total = summarise(tot, n);
    free(in), free(tg), free(tot), free(start), free(fill);
    return DP_OK;
}

void trace_stats_release(trace_stats *s)
{
    if (!s) return;
    free(s->tasks);
    memset(s, 0, sizeof *s);
}

static void print_summary(FILE *fp, const char *field, const len_summary *l)
{
    fprintf(fp, "%-8s %9.1f %7.0f %7.0f %7.0f %7.0f %7lld %7lld\n", field, l->mean, l->p10, l->p50,
            l->p90, l->p99, (long long)l->min, (long long)l->max);
}

void trace_stats_print(const trace *t, const trace_stats *s, const char *name, size_t max_tasks,
                       FILE *fp)
{
    fprintf(fp, "# trace %s\n# samples %zu, tasks %zu, hash %016llx\n", name, s->count,
            s->n_tasks, (unsigned long long)trace_hash(t));
    fprintf(fp, "%-8s %9s %7s %7s %7s %7s %7s %7s\n", "field", "mean", "p10", "p50", "p90", "p99",
            "min", "max");
    fprintf(fp, "%-8s %9s %7s %7s %7s %7s %7s %7s\n", "#", "tokens", "tokens", "tokens", "tokens",
            "tokens", "tokens", "tokens");
    print_summary(fp, "input", &s->input);
    print_summary(fp, "target", &s->target);
    print_summary(fp, "total", &s->total);

    size_t shown = max_tasks && max_tasks < s->n_tasks ? max_tasks : s->n_tasks;
    fprintf(fp, "\n# per task: %zu of %zu, most samples first%s\n", shown, s->n_tasks,
            shown < s->n_tasks ? " (--tasks 0 shows all)" : "");
    fprintf(fp, "%-32s %8s %6s %8s %6s %6s %6s %8s %6s %6s %6s\n", "task", "samples", "share",
            "in_mean", "in_p50", "in_p90", "in_p99", "tg_mean", "tg_p50", "tg_p90", "tg_p99");
    for (size_t i = 0; i < shown; i++) {
        const trace_task_stats *ts = &s->tasks[i];
        fprintf(fp, "%-32s %8zu %5.2f%% %8.1f %6.0f %6.0f %6.0f %8.1f %6.0f %6.0f %6.0f\n",
                t->tasks[ts->task], ts->count, 100.0 * (double)ts->count / (double)s->count,
                ts->input.mean, ts->input.p50, ts->input.p90, ts->input.p99, ts->target.mean,
                ts->target.p50, ts->target.p90, ts->target.p99);
    }

    int last = 0;
    for (int b = 0; b < TRACE_HIST_BINS; b++)
        if (s->hist_input[b] || s->hist_target[b]) last = b;
    fprintf(fp, "\n# log2 histogram of lengths: share of samples per bin [lo, hi) tokens\n");
    fprintf(fp, "%10s %10s %7s %7s  %s\n", "lo", "hi", "input", "target", "input (#) / target (=)");
    for (int b = 0; b <= last; b++) {
        double pi = 100.0 * (double)s->hist_input[b] / (double)s->count;
        double pt = 100.0 * (double)s->hist_target[b] / (double)s->count;
        fprintf(fp, "%10lld %10lld %6.2f%% %6.2f%%  ", (long long)trace_hist_lo(b),
                (long long)trace_hist_lo(b + 1), pi, pt);
        for (int k = 0; k < (int)(pi / 2 + 0.5); k++) fputc('#', fp);
        fputc('|', fp);
        for (int k = 0; k < (int)(pt / 2 + 0.5); k++) fputc('=', fp);
        fputc('\n', fp);
    }
}

static cJSON *summary_json(const len_summary *l)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "mean", l->mean);
    cJSON_AddNumberToObject(o, "p10", l->p10);
    cJSON_AddNumberToObject(o, "p50", l->p50);
    cJSON_AddNumberToObject(o, "p90", l->p90);
    cJSON_AddNumberToObject(o, "p99", l->p99);
    cJSON_AddNumberToObject(o, "min", (double)l->min);
    cJSON_AddNumberToObject(o, "max", (double)l->max);
    return o;
}

char *trace_stats_json(const trace *t, const trace_stats *s, const char *name)
{
    cJSON *root = cJSON_CreateObject();
    char hash[17];
    snprintf(hash, sizeof hash, "%016llx", (unsigned long long)trace_hash(t));
    cJSON_AddStringToObject(root, "trace", name);
    cJSON_AddNumberToObject(root, "samples", (double)s->count);
    cJSON_AddStringToObject(root, "hash", hash);
    cJSON_AddItemToObject(root, "input", summary_json(&s->input));
    cJSON_AddItemToObject(root, "target", summary_json(&s->target));
    cJSON_AddItemToObject(root, "total", summary_json(&s->total));
    cJSON *tasks = cJSON_AddArrayToObject(root, "tasks");
    for (size_t i = 0; i < s->n_tasks; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "task", t->tasks[s->tasks[i].task]);
        cJSON_AddNumberToObject(o, "samples", (double)s->tasks[i].count);
        cJSON_AddItemToObject(o, "input", summary_json(&s->tasks[i].input));
        cJSON_AddItemToObject(o, "target", summary_json(&s->tasks[i].target));
        cJSON_AddItemToObject(o, "total", summary_json(&s->tasks[i].total));
        cJSON_AddItemToArray(tasks, o);
    }
    cJSON *hist = cJSON_AddArrayToObject(root, "histogram");
    for (int b = 0; b < TRACE_HIST_BINS; b++) {
        if (!s->hist_input[b] && !s->hist_target[b]) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "lo", (double)trace_hist_lo(b));
        cJSON_AddNumberToObject(o, "hi", (double)trace_hist_lo(b + 1));
        cJSON_AddNumberToObject(o, "input", (double)s->hist_input[b]);
        cJSON_AddNumberToObject(o, "target", (double)s->hist_target[b]);
        cJSON_AddItemToArray(hist, o);
    }
    char *text = cJSON_Print(root);
    cJSON_Delete(root);
    return text;
}
