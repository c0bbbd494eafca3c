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
        t->csv = fopen(csv_path, "wb");
        if (!t->csv) return dp_fail(err, DP_ERR_IO, "%s: cannot create: %s", csv_path, strerror(errno));
        fprintf(t->csv, "iteration,stage,op,mb,start_us,end_us,replica,chunk\n");
    }
    if (chrome_path) {
        t->chrome = fopen(chrome_path, "wb");
        if (!t->chrome) {
            if (t->csv) fclose(t->csv);
            t->csv = NULL;
            return dp_fail(err, DP_ERR_IO, "%s: cannot create: %s", chrome_path, strerror(errno));
        }
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
    int bad = 0;
    if (t->csv) bad |= fclose(t->csv) != 0;
    if (t->chrome) {
        fprintf(t->chrome, "\n]}\n");
        bad |= fclose(t->chrome) != 0;
    }
    t->csv = t->chrome = NULL;
    return bad ? dp_fail(err, DP_ERR_IO, "timeline: write failed") : DP_OK;
}
