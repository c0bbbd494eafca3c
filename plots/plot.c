#include "plot.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>

static const char *terminal_for(const char *path, int w, int h, char *buf, size_t cap)
{
    const char *dot = strrchr(path, '.');
    if (dot && strcmp(dot, ".svg") == 0)
        snprintf(buf, cap, "set terminal svg size %d,%d dynamic enhanced font 'Sans,12'", w, h);
    else if (dot && strcmp(dot, ".png") == 0)
        snprintf(buf, cap, "set terminal pngcairo size %d,%d enhanced font 'Sans,11'", w, h);
    else
        return NULL;
    return buf;
}

dp_status plot_begin(plot *p, const char *out_path, int width, int height, dp_err *err)
{
    memset(p, 0, sizeof *p);
    char term[256];
    if (!terminal_for(out_path, width, height, term, sizeof term))
        return dp_fail(err, DP_ERR_INVALID,
                       "%s: unknown figure type\nhint: name the output .png or .svg", out_path);
    if (strlen(out_path) >= sizeof p->out)
        return dp_fail(err, DP_ERR_INVALID, "output path is too long");
    strcpy(p->out, out_path);
    p->fp = open_memstream(&p->text, &p->len);
    if (!p->fp) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    fprintf(p->fp, "%s\nset output '%s'\nset encoding utf8\n", term, out_path);
    return DP_OK;
}

FILE *plot_script(plot *p)
{
    return p->fp;
}

dp_status plot_finish(plot *p, dp_err *err)
{
    dp_status st = DP_OK;
    fprintf(p->fp, "unset output\n");
    fclose(p->fp);
    p->fp = NULL;
    remove(p->out);
    FILE *g = popen("gnuplot 2>&1", "w");
    if (!g) {
        st = dp_fail(err, DP_ERR_EXTERNAL, "cannot start gnuplot: %s", strerror(errno));
        goto out;
    }
    fwrite(p->text, 1, p->len, g);
    int rc = pclose(g);
    if (rc == -1 || !WIFEXITED(rc) || WEXITSTATUS(rc) != 0) {
        int code = rc != -1 && WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
        st = dp_fail(err, DP_ERR_EXTERNAL,
                     code == 127 ? "%s: gnuplot is not installed\nhint: run 'make deps' (Debian "
                                   "package gnuplot-nox)"
                                 : "%s: gnuplot failed (exit %d); its messages are above",
                     p->out, code);
        goto out;
    }
    struct stat sb;
    if (stat(p->out, &sb) != 0 || sb.st_size == 0)
        st = dp_fail(err, DP_ERR_EXTERNAL, "%s: gnuplot wrote no figure", p->out);
out:
    free(p->text);
    p->text = NULL;
    return st;
}

/* Escapes a title for a single-quoted gnuplot string. */
static void put_title(FILE *fp, const char *cmd, const char *title)
{
    fprintf(fp, "%s '", cmd);
    for (const char *c = title; *c; c++) {
        if (*c == '\'') fputc('\'', fp); /* '' is a quote inside '...' */
        if (*c == '_' || *c == '^' || *c == '{' || *c == '}' || *c == '@' || *c == '&')
            fputc('\\', fp), fputc('\\', fp); /* no enhanced-text markup from file names */
        fputc(*c, fp);
    }
    fprintf(fp, "'\n");
}

dp_status plot_lengths(const trace_stats *s, const char *title, const char *out_path, dp_err *err)
{
    plot p;
    dp_status st = plot_begin(&p, out_path, 1000, 600, err);
    if (st != DP_OK) return st;
    FILE *fp = plot_script(&p);
    /* One row per log2 bin that has samples; x is the bin's position, labelled by its range. */
    int first = TRACE_HIST_BINS, last = 0;
    for (int b = 0; b < TRACE_HIST_BINS; b++)
        if (s->hist_input[b] || s->hist_target[b]) {
            if (b < first) first = b;
            last = b;
        }
    fprintf(fp, "$data << EOD\n");
    for (int b = first; b <= last; b++)
        fprintf(fp, "%d \"%lld-%lld\" %.6f %.6f\n", b - first, (long long)trace_hist_lo(b),
                (long long)trace_hist_lo(b + 1) - 1,
                100.0 * (double)s->hist_input[b] / (double)s->count,
                100.0 * (double)s->hist_target[b] / (double)s->count);
    fprintf(fp, "EOD\n");
    put_title(fp, "set title", title);
    fprintf(fp,
            "set xlabel 'sequence length (tokens, log2 bins)'\n"
            "set ylabel 'share of samples (%%)'\n"
            "set grid ytics\nset key top right\n"
            "set style fill solid 0.7 border -1\n"
            "set boxwidth 0.4\nset xrange [-0.7:%d.7]\nset yrange [0:*]\n"
            "set xtics rotate by -35 nomirror\n"
            "plot $data using ($1-0.2):3:xtic(2) with boxes lc rgb '#1f77b4' title 'input', \\\n"
            "     $data using ($1+0.2):4 with boxes lc rgb '#ff7f0e' title 'target'\n",
            last - first);
    return plot_finish(&p, err);
}
