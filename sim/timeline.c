#include "timeline.h"

#include <errno.h>
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

void timeline_on_op(void *ctx, const sim_op *o)
{
    timeline_out *t = ctx;
    if (t->csv)
        fprintf(t->csv, "%d,%d,%s,%d,%.3f,%.3f,%d,%d\n", o->iteration, o->stage,
                plan_op_name(o->op), o->mb, (double)o->start_ns / 1e3, (double)o->end_ns / 1e3,
                o->replica, o->chunk);
    if (t->chrome) {
        int compute = o->op == OP_F || o->op == OP_B || o->op == OP_W;
        fprintf(t->chrome,
                "%s{\"name\": \"%s%d\", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, "
                "\"ts\": %.3f, \"dur\": %.3f, \"args\": {\"iteration\": %d, \"chunk\": %d}}",
                t->chrome_first ? "" : ",\n", plan_op_name(o->op), o->mb,
                compute ? "compute" : "comm", o->replica, o->stage * 3 + (compute ? 0 : o->op == OP_SEND_ACT || o->op == OP_SEND_GRAD ? 1 : 2),
                (double)o->start_ns / 1e3, (double)(o->end_ns - o->start_ns) / 1e3, o->iteration,
                o->chunk);
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
    out_abort(&t->csv_o);
    out_abort(&t->chrome_o);
    t->csv = t->chrome = NULL;
}
