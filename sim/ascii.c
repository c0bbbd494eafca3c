#include "ascii.h"

#include <stdlib.h>
#include <string.h>

void ascii_init(ascii_tl *a, int iteration)
{
    memset(a, 0, sizeof *a);
    a->iteration = iteration;
}

void ascii_release(ascii_tl *a)
{
    free(a->ops);
    memset(a, 0, sizeof *a);
}

void ascii_collect(void *ctx, const sim_op *op)
{
    ascii_tl *a = ctx;
    if (op->iteration != a->iteration) return;
    if (op->op != OP_F && op->op != OP_B && op->op != OP_W) return;
    if (dp_grow((void **)&a->ops, &a->cap, a->n + 1, sizeof *a->ops) != DP_OK) return;
    a->ops[a->n++] = *op;
}

void ascii_draw(const ascii_tl *a, int pp, int width, FILE *fp)
{
    if (a->n == 0 || width < 8) return;
    int64_t t0 = a->ops[0].start_ns, t1 = a->ops[0].end_ns;
    for (size_t i = 0; i < a->n; i++) {
        if (a->ops[i].start_ns < t0) t0 = a->ops[i].start_ns;
        if (a->ops[i].end_ns > t1) t1 = a->ops[i].end_ns;
    }
    double slice = (double)(t1 - t0) / width;
    char *row = malloc((size_t)width + 1);
    if (!row) return;
    fprintf(fp, "# iteration %d: %d columns of %.3f ms; F<k>/B<k>/W<k> = forward, backward, "
            "weight-gradient of micro-batch k, '.' = idle\n", a->iteration, width, slice / 1e6);
    int replicas = 1;
    for (size_t i = 0; i < a->n; i++)
        if (a->ops[i].replica + 1 > replicas) replicas = a->ops[i].replica + 1;
    for (int q = 0; q < replicas * pp; q++) {
        int rep = q / pp, s = q % pp;
        memset(row, '.', (size_t)width);
        row[width] = '\0';
        for (size_t i = 0; i < a->n; i++) {
            const sim_op *o = &a->ops[i];
            if (o->stage != s || o->replica != rep) continue;
            int c0 = (int)((double)(o->start_ns - t0) / slice + 0.5);
            int c1 = (int)((double)(o->end_ns - t0) / slice + 0.5);
            if (c1 > width) c1 = width;
            if (c1 <= c0) c1 = c0 + 1 <= width ? c0 + 1 : width;
            char label[16];
            int len = snprintf(label, sizeof label, "%c%d", o->op == OP_F ? 'F' : o->op == OP_B ? 'B' : 'W', o->mb);
            for (int c = c0; c < c1; c++) {
                int k = c - c0;
                row[c] = c1 - c0 >= len ? (k < len ? label[k] : (o->op == OP_F ? 'f' : o->op == OP_B ? 'b' : 'w'))
                                        : label[0];
            }
        }
        if (replicas > 1) fprintf(fp, "replica %d stage %2d |%s|\n", rep, s, row);
        else fprintf(fp, "stage %2d |%s|\n", s, row);
    }
    free(row);
}

static int cmp_start(const void *x, const void *y)
{
    const sim_op *a = x, *b = y;
    if (a->replica != b->replica) return a->replica - b->replica;
    if (a->stage != b->stage) return a->stage - b->stage;
    return (a->start_ns > b->start_ns) - (a->start_ns < b->start_ns);
}

void ascii_draw_order(const ascii_tl *a, int pp, int width, FILE *fp)
{
    if (a->n == 0 || width < 8) return;
    sim_op *ops = malloc(a->n * sizeof *ops);
    if (!ops) return;
    memcpy(ops, a->ops, a->n * sizeof *ops);
    qsort(ops, a->n, sizeof *ops, cmp_start);
    fprintf(fp, "# iteration %d, order view: each stage's ops in the order they ran, F/B/W for "
            "even micro-batches, f/b/w for odd ones\n", a->iteration);
    (void)pp;
    for (size_t i = 0; i < a->n;) {
        size_t j = i;
        while (j < a->n && ops[j].replica == ops[i].replica && ops[j].stage == ops[i].stage) j++;
        char label[32];
        snprintf(label, sizeof label, "r%d s%d", ops[i].replica, ops[i].stage);
        for (size_t k = i; k < j; k += (size_t)width) {
            fprintf(fp, "%-8s |", k == i ? label : "");
            for (size_t c = k; c < j && c < k + (size_t)width; c++) {
                char ch = ops[c].op == OP_F ? 'F' : ops[c].op == OP_B ? 'B' : 'W';
                fputc(ops[c].mb % 2 ? ch - 'A' + 'a' : ch, fp);
            }
            fputs("|\n", fp);
        }
        i = j;
    }
    free(ops);
}
