/*
 * ascii.h — a small pipeline timeline drawn in the terminal, for teaching.
 *
 * One row per stage, one character per time slice: the micro-batch number of a forward (F) or
 * backward (B) running in that slice — shown as "F3"/"B3" blocks when the slice run is wide
 * enough, else the letters F, B or W —, and '.' where the stage idles (a bubble). Compute ops of
 * one iteration are collected with ascii_collect (a sim_sink) and drawn by ascii_draw: every
 * replica, each row labelled with its replica and stage.
 *
 * The order view (ascii_draw_order) drops the time axis for many micro-batches: each stage's ops
 * in the order they ran, one letter each (F, B, W; upper case for even micro-batches, lower case
 * for odd ones, so neighbours can be told apart), wrapped at `width` columns.
 */
#ifndef ASCII_H
#define ASCII_H

#include <stdio.h>

#include "sim.h"

typedef struct ascii_tl {
    sim_op *ops;
    size_t n, cap;
    int iteration; /* only this iteration is collected */
} ascii_tl;

void ascii_init(ascii_tl *a, int iteration);
void ascii_release(ascii_tl *a);
void ascii_collect(void *ctx, const sim_op *op); /* sim_sink.on_op */

/* Draws the collected ops of every replica in `width` columns. */
void ascii_draw(const ascii_tl *a, int pp, int width, FILE *fp);

/* The order view (above). */
void ascii_draw_order(const ascii_tl *a, int pp, int width, FILE *fp);

#endif /* ASCII_H */
