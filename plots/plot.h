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
#include "../planner/panels.h"
#include "../traces/trace_stats.h"

/* An open plot: the script is assembled in memory, then run by plot_finish.
 *
 * No user text can run a command: gnuplot is given only a temporary output path of our own making
 * (mkstemps in /tmp: letters and digits), which plot_finish then installs at the requested path
 * (common/outfile.h: a failure leaves any earlier figure as it was); every user string (titles,
 * labels, series and group names, which carry file names and CSV cells) reaches gnuplot as a
 * single-quoted literal or a datablock field with quotes doubled or replaced and every control
 * character (a newline would end the string and start a command) and backquote replaced by a
 * space. gnuplot's own output goes to stderr, never to stdout. */
typedef struct plot {
    char *text;   /* script text */
    size_t len;
    FILE *fp;     /* open_memstream on text */
    char out[4096]; /* output file, as the user named it */
    char tmp[64];   /* where gnuplot writes it */
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

/* One bar of a throughput chart. */
typedef struct plot_bar {
    const char *group;  /* the row's first name (e.g. the batching) */
    const char *series; /* its second name and colour (e.g. the schedule) */
    double value;       /* tokens/s; 0 draws no bar (OOM or infeasible) */
    const char *none;   /* with value 0: what the row says instead ("out of memory"); NULL:
                         * "no bar" */
} plot_bar;

/* Horizontal bars of throughput, one row per bar in the given order ("group / series" on the
 * left, a colour per series), with the value (or `none`) printed at the bar's end: labels never
 * collide however many rows. */
dp_status plot_throughput(const plot_bar *bars, int n, const char *title, const char *xlabel,
                          const char *out_path, dp_err *err);

/* One box of a Gantt chart: row (stage), [t0, t1) in ms, kind 0 forward / 1 backward / 2 W,
 * and a label (the micro-batch). */
typedef struct plot_box {
    int row;
    double t0_ms, t1_ms;
    int kind;
    int label;
} plot_box;

/* The pipeline timeline: one row per stage, forwards and backwards in two shades labelled by
 * micro-batch; the gaps are the bubbles. */
dp_status plot_gantt(const plot_box *boxes, int n, int rows, const char *title,
                     const char *out_path, dp_err *err);

/* Panels of pipeline timelines, one per panel (e.g. schedule) on one shared time axis, each with
 * its title (schedule, iteration time, pipeline bubble and its closed form): forwards in blues
 * and backwards in oranges, a shade per interleaved chunk, weight gradients in green; every box
 * labelled with its stable micro-batch id, and with its size ("3: 7×96", samples × padded
 * length) where that fits. title NULL: none above the panels. gnuplot's failure is
 * DP_ERR_EXTERNAL naming the figure; out_path is written whole or not at all. */
dp_status plot_panels(const panel *ps, int n, const char *title, const char *out_path, dp_err *err);

/* Each panel's memory over its iteration: a step line per stage (model state + activations) on
 * an axis fitted to the lines, so their differences show; the device limit as a dashed line
 * where it lies near them, else said in the panel's title. */
dp_status plot_panel_memory(const panel *ps, int n, const char *title, const char *out_path,
                            dp_err *err);

/* A point of series `series` (plot_lines). */
typedef struct plot_point {
    int series;
    double x, y;
} plot_point;

/* Lines of y against x per series (e.g. throughput vs max length per method). */
dp_status plot_lines(const plot_point *pts, int n, const char *const *series_names, int series,
                     const char *title, const char *xlabel, const char *ylabel, int logx,
                     const char *out_path, dp_err *err);

#endif /* PLOT_H */
