#include "exec_loop.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

void rt_progress(int rank, int done, int total, double started_s)
{
    static int last_tenth; /* not a terminal: the tenth of the run last reported */
    if (rank != 0 || total <= 0 || done <= 0) return;
    double el = dp_now_s() - started_s, eta = el * (total - done) / done;
    if (isatty(STDERR_FILENO)) {
        fprintf(stderr, "\rdprun: iteration %d of %d", done, total);
        if (done < total) fprintf(stderr, ", ETA %.0f s   ", eta);
        else fprintf(stderr, ", %.1f s          \n", el);
        return;
    }
    /* a log (mpirun forwards ranks' stderr through pipes): a line per tenth of a long run */
    int tenth = 10 * done / total;
    if (done == 1) last_tenth = 0;
    if (el < RT_PROGRESS_AFTER_S || tenth <= last_tenth) return;
    last_tenth = tenth;
    fprintf(stderr, "dprun: iteration %d of %d, %.1f s%s", done, total, el,
            done < total ? "" : " (done)");
    if (done < total) fprintf(stderr, ", ETA %.0f s", eta);
    fputc('\n', stderr);
}

/* What instruction s does, through the medium (the table in exec_loop.h). */
static int issue(const rt_medium *md, void *m, const pm_step *s)
{
    int rc = 0;
    switch (s->op) {
    case OP_RECV_ACT:
    case OP_RECV_GRAD: return md->begin(m, s) || md->recv(m, s) || md->end(m, s) ? -1 : 0;
    case OP_SEND_ACT:
    case OP_SEND_GRAD: return md->begin(m, s) || md->send(m, s) || md->end(m, s) ? -1 : 0;
    case OP_F:
        if (s->waits >= 0) rc = md->await(m, s);
        return rc || md->begin(m, s) || md->forward(m, s) || md->end(m, s) ? -1 : 0;
    case OP_B: {
        int weights = !s->split; /* plan_machine.h: a split rank leaves them to its W */
        if (s->waits >= 0) rc = md->await(m, s);
        rc = rc || md->begin(m, s) || md->backward(m, s, weights);
        if (!rc && weights && md->reduce) rc = md->reduce(m, s);
        return rc || md->end(m, s) ? -1 : 0;
    }
    case OP_W:
        rc = md->begin(m, s) || md->weights(m, s);
        if (!rc && md->reduce) rc = md->reduce(m, s);
        return rc || md->end(m, s) ? -1 : 0;
    case OP_FREE: return md->begin(m, s) || md->release(m, s) || md->end(m, s) ? -1 : 0;
    default: return 0;
    }
}

dp_status rt_loop_iteration(const plan_machine *pm, int replica, const unsigned char *drives,
                            const rt_medium *md, void *m, dp_err *err)
{
    int pp = pm->pp, left = 0;
    int *pc = dp_xcalloc((size_t)pp, sizeof *pc);
    const plan_rank *R = &pm->it->ranks[replica * pp];
    for (int r = 0; r < pp; r++)
        if (drives[r]) left += R[r].n;
    dp_status st = DP_OK;
    pm_step step;
    while (st == DP_OK && left > 0) {
        int moved = 0;
        for (int r = 0; r < pp && st == DP_OK; r++)
            while (drives[r] && pc[r] < R[r].n) {
                pm_resolve(pm, replica * pp + r, pc[r], &step);
                if (md->ready && !md->ready(m, &step)) break;
                if (issue(md, m, &step) != 0) {
                    st = err && err->status != DP_OK ? err->status : DP_ERR_EXTERNAL;
                    break;
                }
                pc[r]++, left--, moved = 1;
            }
        if (st == DP_OK && !moved) {
            char where[512] = "";
            size_t at = 0;
            for (int r = 0; r < pp && at < sizeof where; r++)
                if (drives[r] && pc[r] < R[r].n) {
                    const plan_instr *x = &R[r].ins[pc[r]];
                    at += (size_t)snprintf(where + at, sizeof where - at,
                                           "%sstage %d instruction %d (%s mb %d)", at ? "; " : "",
                                           r, pc[r], plan_op_name(x->op), x->mb);
                }
            st = dp_fail(err, DP_ERR_DEADLOCK, "iteration %d deadlocks: every stage waits for a "
                         "receive whose send comes later: %s", pm->it->id, where);
        }
    }
    free(pc);
    return st;
}

dp_status rt_loop_runs(const rt_opts *o, int rank, int prepare, rt_run_fn run, void *m)
{
    const plan *pl = o->pl;
    int n_it = o->iterations > 0 && o->iterations < pl->n_it ? o->iterations : pl->n_it;
    if (o->stall_rank == rank && o->stall_s > 0) {
        fprintf(stderr, "dprun: rank %d stalls for %.1f s (fault injection)\n", rank, o->stall_s);
        sleep((unsigned)o->stall_s);
    }
    dp_status st = DP_OK;
    for (int w = 0; st == DP_OK && w < o->warmup && n_it > 0; w++)
        st = run(m, &pl->it[0], 0, RT_RECORD_OFF);
    double started = dp_now_s();
    for (int i = 0; st == DP_OK && i < n_it; i++) {
        const plan_iter *it = &pl->it[i];
        /* right before the measured runs, so that what it prepares need hold one iteration */
        if (prepare && !(i == 0 && o->warmup > 0)) st = run(m, it, it->id, RT_RECORD_OFF);
        for (int r = 0; st == DP_OK && r < rt_runs_of(o, i); r++) /* repeats: the machine's noise */
            st = run(m, it, it->id, RT_RECORD_ON + r);
        if (st == DP_OK) rt_progress(rank, i + 1, n_it, started);
    }
    return st;
}
