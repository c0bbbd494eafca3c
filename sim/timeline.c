#include "timeline.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

dp_status timeline_open(timeline_out *t, const char *csv_path, const char *chrome_path, dp_err *err)
{
    memset(t, 0, sizeof *t);
    t->csv_path = csv_path;
    t->chrome_path = chrome_path;
    t->chrome_first = 1;
    if (csv_path) {
        dp_status st = out_open(&t->csv_o, csv_path, err);
        if (st != DP_OK) return st;
        t->csv = t->csv_o.fp;
        fprintf(t->csv, "iteration,stage,op,mb,start_us,end_us,replica,chunk\n");
    }
    if (chrome_path) {
        dp_status st = out_open(&t->chrome_o, chrome_path, err);
        if (st != DP_OK) {
            timeline_abort(t);
            return st;
        }
        t->chrome = t->chrome_o.fp;
        fprintf(t->chrome, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
    }
    return DP_OK;
}

/* Chrome threads: four per stage (compute, send, receive, all-reduce) in its replica's process;
 * each process and thread is named ("ph":"M" metadata) the first time it is used. */
enum { TL_COMPUTE, TL_SEND, TL_RECV, TL_ALLREDUCE, TL_THREADS };
static const char *const THREAD_NAMES[TL_THREADS] = {"compute", "send", "receive",
                                                     "all-reduce + optimizer"};

/* Whether entry `at` of the named table was set before; sets it. */
static int named_before(timeline_out *t, size_t at)
{
    if (at >= t->named_cap) {
        size_t cap = t->named_cap;
        if (dp_grow((void **)&t->named, &cap, at + 1, 1) != DP_OK) return 1; /* names are optional */
        memset(t->named + t->named_cap, 0, cap - t->named_cap);
        t->named_cap = cap;
    }
    int was = t->named[at];
    t->named[at] = 1;
    return was;
}

static void name_thread(timeline_out *t, int pid, int stage, int kind)
{
    /* per process: entry 0 its name, then one per (stage, kind) */
    size_t base = (size_t)pid * (STAGE_MAX * TL_THREADS + 1);
    if (!named_before(t, base)) {
        fprintf(t->chrome, "%s{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, "
                "\"args\": {\"name\": \"replica %d\"}}", t->chrome_first ? "" : ",\n", pid, pid);
        t->chrome_first = 0;
    }
    int tid = stage * TL_THREADS + kind;
    if (named_before(t, base + 1 + (size_t)tid)) return;
    fprintf(t->chrome, ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, "
            "\"args\": {\"name\": \"stage %d %s\"}}", pid, tid, stage, THREAD_NAMES[kind]);
}

void timeline_on_op(void *ctx, const sim_op *o)
{
    timeline_out *t = ctx;
    int op = (int)o->op;
    const char *name = op == SIM_OP_ALLREDUCE   ? "ALLREDUCE"
                       : op == SIM_OP_OPTIMIZER ? "OPTIMIZER"
                       : op == SIM_OP_STRAGGLER ? "STRAGGLER"
                                                : plan_op_name(o->op);
    if (t->csv)
        fprintf(t->csv, "%d,%d,%s,%d,%.3f,%.3f,%d,%d\n", o->iteration, o->stage, name, o->mb,
                (double)o->start_ns / 1e3, (double)o->end_ns / 1e3, o->replica, o->chunk);
    if (t->chrome) {
        int compute = o->op == OP_F || o->op == OP_B || o->op == OP_W;
        int kind = op == SIM_OP_ALLREDUCE || op == SIM_OP_OPTIMIZER || op == SIM_OP_STRAGGLER
                       ? TL_ALLREDUCE
                   : compute                                       ? TL_COMPUTE
                   : o->op == OP_SEND_ACT || o->op == OP_SEND_GRAD ? TL_SEND
                                                                   : TL_RECV;
        name_thread(t, o->replica, o->stage, kind);
        double dur_us = (double)(o->end_ns - o->start_ns) / 1e3;
        fprintf(t->chrome,
                "%s{\"name\": \"%s%d\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"iteration\": %d, \"chunk\": %d",
                t->chrome_first ? "" : ",\n", name, o->mb < 0 ? 0 : o->mb,
                op == SIM_OP_OPTIMIZER ? "optimizer" : op == SIM_OP_STRAGGLER ? "straggler"
                : kind == TL_ALLREDUCE ? "allreduce"
                : compute ? "compute" : "comm", o->replica,
                o->stage * TL_THREADS + kind, (double)o->start_ns / 1e3, dur_us, o->iteration, o->chunk);
        const plan_mb *m = o->mb_info;
        if (m) /* what the micro-batch is: its shape, tokens and samples */
            fprintf(t->chrome, ", \"mbs\": %d, \"enc_len\": %d, \"dec_len\": %d, \"tokens\": %lld, "
                    "\"padded_tokens\": %lld, \"samples\": %d, \"simulated_ms\": %.6f",
                    m->mbs, m->enc_len, m->dec_len, (long long)(m->enc_tokens + m->dec_tokens),
                    (long long)m->mbs * (m->enc_len + m->dec_len), m->n_samples, dur_us / 1e3);
        fprintf(t->chrome, "}}");
        t->chrome_first = 0;
    }
}

void timeline_on_mem(void *ctx, const sim_mem *m)
{
    timeline_out *t = ctx;
    if (!t->chrome) return;
    fprintf(t->chrome,
            "%s{\"name\": \"activations stage %d (MB)\", \"ph\": \"C\", \"pid\": %d, \"ts\": %.3f, "
            "\"args\": {\"MB\": %.3f}}",
            t->chrome_first ? "" : ",\n", m->stage, m->replica, (double)m->t_ns / 1e3, m->mb);
    t->chrome_first = 0;
}

dp_status timeline_close(timeline_out *t, dp_err *err)
{
    dp_status st = DP_OK;
    if (t->chrome) fprintf(t->chrome, "\n]}\n");
    if (t->csv) st = out_commit(&t->csv_o, err);
    if (t->chrome && st == DP_OK) st = out_commit(&t->chrome_o, err);
    timeline_abort(t);
    return st;
}

void timeline_abort(timeline_out *t)
{
    free(t->named);
    t->named = NULL;
    t->named_cap = 0;
    out_abort(&t->csv_o);
    out_abort(&t->chrome_o);
    t->csv = t->chrome = NULL;
}

dp_status timeline_row_times(const char *path, long line, const char *start_cell,
                             const char *end_cell, double *start, double *end, dp_err *err)
{
    if (dp_parse_f64(start_cell, start) != 0 || dp_parse_f64(end_cell, end) != 0 || *end < *start ||
        *start < 0)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: start_us/end_us must be numbers with 0 <= start "
                       "<= end", path, line);
    if (*end > TIMELINE_MAX_US || *end - *start > COST_VALUE_MAX * 1e3)
        return dp_fail(err, DP_ERR_PARSE, "%s:%ld: start_us %s / end_us %s: an op of at most %.0e us "
                       "ending within %.0e us of the run's start is a measurement; this is not",
                       path, line, start_cell, end_cell, COST_VALUE_MAX * 1e3, TIMELINE_MAX_US);
    return DP_OK;
}
