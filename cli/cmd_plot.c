/* dpsim plot KIND — figures drawn with gnuplot. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "../plots/plot.h"
#include "../traces/trace.h"
#include "../traces/trace_stats.h"
#include "cli.h"

static const char PLOT_USAGE[] = "dpsim plot KIND [OPTIONS] FILE -o OUT.png|OUT.svg";

static void plot_help(void)
{
    printf("usage: %s\n\n"
           "Draws a figure with gnuplot (PNG, or SVG when OUT ends in .svg).\n\n"
           "Kinds:\n"
           "  lengths FILE    log2 histogram of a trace's input and target lengths\n\n"
           "Options:\n"
           "  -o, --output OUT  figure to write (.png or .svg)             [lengths.png]\n"
           "  -f, --format F    trace format: auto | csv | jsonl | npy | cot  [auto]\n"
           "  -h, --help        this help\n",
           PLOT_USAGE);
}

static int plot_lengths_main(int argc, char **argv)
{
    static const struct option opts[] = {{"output", required_argument, 0, 'o'},
                                         {"format", required_argument, 0, 'f'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *cmd = "plot lengths", *out = "lengths.png";
    trace_format fmt = TRACE_FORMAT_AUTO;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":o:f:h", opts, NULL)) != -1) {
        switch (c) {
        case 'o': out = optarg; break;
        case 'f':
            if (trace_format_parse(optarg, &fmt) != 0)
                return cli_usage_error(cmd, PLOT_USAGE, "unknown --format \"%s\"", optarg);
            break;
        case 'h': plot_help(); return 0;
        case ':': return cli_usage_error(cmd, PLOT_USAGE, "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, PLOT_USAGE, "unknown option %s", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return cli_usage_error(cmd, PLOT_USAGE, "expected exactly one trace FILE");
    const char *path = argv[optind];
    dp_err err = {0};
    trace t;
    trace_stats s = {0};
    trace_init(&t);
    dp_status st = trace_load(path, fmt, NULL, NULL, &t, &err);
    if (st == DP_OK) st = trace_stats_compute(&t, &s, &err);
    if (st == DP_OK) {
        char title[512];
        snprintf(title, sizeof title, "Sequence lengths of %s (%zu samples)", path, t.n);
        st = plot_lengths(&s, title, out, &err);
    }
    if (st == DP_OK) fprintf(stderr, "dpsim: wrote %s\n", out);
    trace_stats_release(&s);
    trace_release(&t);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}

int cmd_plot(int argc, char **argv)
{
    if (argc < 2) return cli_usage_error("plot", PLOT_USAGE, "missing figure KIND");
    const char *kind = argv[1];
    if (strcmp(kind, "--help") == 0 || strcmp(kind, "-h") == 0) {
        plot_help();
        return 0;
    }
    if (strcmp(kind, "lengths") == 0) return plot_lengths_main(argc - 1, argv + 1);
    return cli_usage_error("plot", PLOT_USAGE, "unknown figure kind \"%s\" (lengths)", kind);
}
