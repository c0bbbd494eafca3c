/*
 * plot.h — the small driver that hands data and a script to gnuplot.
 *
 * Each figure is a gnuplot script embedded here
 * as text so that a lone binary can draw: the driver writes the data as an inline datablock
 * ($data << EOD), sets the terminal from the output file's extension (.png → pngcairo,
 * .svg → svg) and pipes everything to `gnuplot`. gnuplot's exit status and any message it prints
 * decide success; a missing gnuplot is a clear error with a hint.
 */
#ifndef PLOT_H
#define PLOT_H

#include <stdio.h>

#include "../common/dp.h"
#include "../traces/trace_stats.h"

/* An open plot: the script is assembled in memory, then run by plot_finish. */
typedef struct plot {
    char *text;   /* script text */
    size_t len;
    FILE *fp;     /* open_memstream on text */
    char out[4096]; /* output file */
} plot;

/* Starts a figure written to out_path (.png or .svg) of width x height pixels. */
dp_status plot_begin(plot *p, const char *out_path, int width, int height, dp_err *err);

/* The script stream: write datablocks and commands here with fprintf. */
FILE *plot_script(plot *p);

/* Runs gnuplot on the script and checks that the output file exists and is not empty. Always
 * releases p. */
dp_status plot_finish(plot *p, dp_err *err);

/* The length histogram of a trace: input and target share per log2 bin, log-scale x. */
dp_status plot_lengths(const trace_stats *s, const char *title, const char *out_path, dp_err *err);

#endif /* PLOT_H */
