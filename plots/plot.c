#define _DEFAULT_SOURCE /* mkstemps */
#include "plot.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../common/outfile.h"

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
    /* gnuplot writes to a name of our own; plot_finish installs it at out_path */
    const char *ext = strrchr(out_path, '.');
    snprintf(p->tmp, sizeof p->tmp, "/tmp/dpsim-figure-XXXXXX%s", ext);
    int fd = mkstemps(p->tmp, (int)strlen(ext));
    if (fd < 0) return dp_fail(err, DP_ERR_IO, "%s: cannot create a temporary figure: %s", p->tmp, strerror(errno));
    close(fd);
    p->fp = open_memstream(&p->text, &p->len);
    if (!p->fp) {
        unlink(p->tmp);
        return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    }
    fprintf(p->fp, "%s\nset output '%s'\nset encoding utf8\n", term, p->tmp);
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
    const char *keep = getenv("DPSIM_GNUPLOT_SCRIPT"); /* tests read what gnuplot was given */
    if (keep && *keep) {
        FILE *k = fopen(keep, "wb");
        if (k) fwrite(p->text, 1, p->len, k), fclose(k);
    }
    FILE *g = popen("gnuplot 1>&2", "w"); /* a fixed command: no user text reaches the shell */
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
    if (stat(p->tmp, &sb) != 0 || sb.st_size == 0)
        st = dp_fail(err, DP_ERR_EXTERNAL, "%s: gnuplot wrote no figure", p->out);
    else
        st = out_install(p->tmp, p->out, err);
out:
    unlink(p->tmp);
    free(p->text);
    p->text = NULL;
    return st;
}

/* Writes text as a gnuplot single-quoted string: '' for a quote, a space for every control
 * character and backquote (a newline would end the literal and start a command), and
 * enhanced-text markup neutralised (file names are not markup). */
static void put_text(FILE *fp, const char *text, int breaks)
{
    fputc('\'', fp);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '\n' && breaks) { /* a line break: the quoted string joined to a fixed "\n" */
            fputs("' . \"\\n\" . '", fp);
            continue;
        }
        if (*c < 0x20 || *c == 0x7f || *c == '`') {
            fputc(' ', fp);
            continue;
        }
        if (*c == '\'') fputc('\'', fp);
        if (*c == '_' || *c == '^' || *c == '{' || *c == '}' || *c == '@' || *c == '&')
            fputc('\\', fp);
        fputc(*c, fp);
    }
    fputc('\'', fp);
}

static void put_str(FILE *fp, const char *text)
{
    put_text(fp, text, 0);
}

/* A title or label: put_str's, but a newline in it breaks the line. */
static void put_title(FILE *fp, const char *cmd, const char *title)
{
    fprintf(fp, "%s ", cmd);
    put_text(fp, title, 1);
    fputc('\n', fp);
}

/* A datablock field: double-quoted, with quotes, control characters and backquotes replaced. */
static void put_field(FILE *fp, const char *text)
{
    fputc('"', fp);
    for (const unsigned char *c = (const unsigned char *)text; *c; c++)
        fputc(*c < 0x20 || *c == 0x7f || *c == '`' ? ' ' : *c == '"' ? '\'' : *c, fp);
    fputc('"', fp);
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

static int find_name(const char **names, int n, const char *s)
{
    for (int i = 0; i < n; i++)
        if (strcmp(names[i], s) == 0) return i;
    return -1;
}

dp_status plot_throughput(const plot_bar *bars, int n, const char *title, const char *xlabel,
                          const char *out_path, dp_err *err)
{
    static const unsigned colors[] = {0x1f77b4, 0xff7f0e, 0x2ca02c, 0xd62728, 0x9467bd, 0x8c564b};
    const char *series[64];
    int ns = 0;
    double vmax = 0;
    for (int i = 0; i < n; i++) {
        if (find_name(series, ns, bars[i].series) < 0 && ns < 64) series[ns++] = bars[i].series;
        vmax = fmax(vmax, bars[i].value);
    }
    plot p;
    dp_status st = plot_begin(&p, out_path, 1000, 130 + 26 * (n > 0 ? n : 1), err);
    if (st != DP_OK) return st;
    FILE *fp = plot_script(&p);
    /* one row per bar, top to bottom: y, "group / series", value (0: none), colour, the text at
     * its end (the value, or why there is no bar) */
    fprintf(fp, "$data << EOD\n");
    for (int i = 0; i < n; i++) {
        char label[200], text[64];
        snprintf(label, sizeof label, "%s / %s", bars[i].group, bars[i].series);
        if (bars[i].value > 0) snprintf(text, sizeof text, "%.0f", bars[i].value);
        else snprintf(text, sizeof text, "%s", bars[i].none ? bars[i].none : "no bar");
        fprintf(fp, "%d ", i);
        put_field(fp, label);
        fprintf(fp, " %.6g %u ", bars[i].value > 0 ? bars[i].value : 0,
                colors[(unsigned)find_name(series, ns, bars[i].series) % 6]); /* -1 past 64 */
        put_field(fp, text);
        fprintf(fp, "\n");
    }
    fprintf(fp, "EOD\n");
    put_title(fp, "set title", title);
    fprintf(fp, "set xlabel ");
    put_str(fp, xlabel);
    /* the values' labels sit right of the bars: room for them past the longest */
    fprintf(fp, "\nset grid xtics\nunset key\nset style fill solid 0.75 border -1\n"
                "set yrange [%d.6:-0.6]\nset xrange [0:%.6g]\nset ytics nomirror font ',9'\n"
                "set format x '%%.0f'\nset lmargin 26\n"
                "plot $data using ($3/2):1:($3/2):(0.38):4:ytic(2) with boxxyerror lc rgb variable, \\\n"
                "     $data using 3:1:5 with labels left offset 0.6,0 font ',9'\n",
            n > 0 ? n - 1 : 0, vmax > 0 ? vmax * 1.18 : 1);
    return plot_finish(&p, err);
}

dp_status plot_gantt(const plot_box *boxes, int n, int rows, const char *title,
                     const char *out_path, dp_err *err)
{
    plot p;
    dp_status st = plot_begin(&p, out_path, 1400, 140 + 70 * rows, err);
    if (st != DP_OK) return st;
    FILE *fp = plot_script(&p);
    double tmax = 0;
    for (int k = 0; k < 3; k++) {
        fprintf(fp, "$k%d << EOD\n", k);
        for (int i = 0; i < n; i++) {
            const plot_box *b = &boxes[i];
            if (b->kind != k) continue;
            fprintf(fp, "%.6f %.6f %d %d\n", b->t0_ms, b->t1_ms, b->row, b->label);
            if (b->t1_ms > tmax) tmax = b->t1_ms;
        }
        fprintf(fp, "0 0 -10 0\nEOD\n"); /* keeps every block non-empty */
    }
    put_title(fp, "set title", title);
    fprintf(fp, "set xlabel 'time (ms)'\nset ylabel 'pipeline stage'\nset yrange [%d.6:-0.6]\n"
                "set xrange [0:%g]\nset ytics 1\nset grid xtics\nset key outside right top\n"
                "set style fill solid 0.85 border lc rgb '#333333'\n"
                "plot $k0 using (($1+$2)/2):3:(($2-$1)/2):(0.38) with boxxyerror lc rgb '#4c9be8' "
                "title 'forward', \\\n"
                "     $k1 using (($1+$2)/2):3:(($2-$1)/2):(0.38) with boxxyerror lc rgb '#e8744c' "
                "title 'backward', \\\n"
                "     $k2 using (($1+$2)/2):3:(($2-$1)/2):(0.38) with boxxyerror lc rgb '#7bc96f' "
                "title 'weight grad', \\\n"
                "     $k0 using (($1+$2)/2):3:(($2-$1) > %g ? sprintf('%%d', $4) : '') with labels "
                "font ',8' notitle, \\\n"
                "     $k1 using (($1+$2)/2):3:(($2-$1) > %g ? sprintf('%%d', $4) : '') with labels "
                "font ',8' notitle\n",
            rows - 1, tmax * 1.01, tmax / 90, tmax / 90);
    return plot_finish(&p, err);
}

/* ---- panels (several schedules on one time axis) ---------------------------------------------- */

/* Shades per chunk: forward blues, backward oranges (chunk 0 the strongest). */
static const unsigned FWD_SHADE[4] = {0x4c9be8, 0x9cc8f2, 0x1f5fa8, 0x6fb0ee};
static const unsigned BWD_SHADE[4] = {0xe8744c, 0xf2b09a, 0xb04a25, 0xee9473};
#define W_SHADE 0x7bc96fu

static unsigned op_colour(const panel_op *o)
{
    if (o->op == OP_W) return W_SHADE;
    return (o->op == OP_F ? FWD_SHADE : BWD_SHADE)[o->chunk % 4];
}

/* A box's label: "id: samples×length" where it fits, else the id, else nothing (about 6.5 px a
 * character at font 8 over px pixels of time axis). */
static void box_label(const panel_op *o, double tmax, double px, char *buf, size_t cap)
{
    double chars = (o->t1_ms - o->t0_ms) / tmax * px / 6.5;
    char size[48];
    snprintf(size, sizeof size, "%d: %d×%d", o->id, o->mbs, o->enc_len + o->dec_len);
    if (chars >= (double)strlen(size) - 1) snprintf(buf, cap, "%s", size); /* × is 2 bytes */
    else if (chars >= (o->id >= 10 ? 2.2 : 1.2)) snprintf(buf, cap, "%d", o->id);
    else buf[0] = '\0';
}

static double panels_tmax(const panel *ps, int n)
{
    double tmax = 0;
    for (int k = 0; k < n; k++)
        for (size_t i = 0; i < ps[k].n_ops; i++) tmax = fmax(tmax, ps[k].ops[i].t1_ms);
    return tmax > 0 ? tmax : 1;
}

dp_status plot_panels(const panel *ps, int n, const char *title, const char *out_path, dp_err *err)
{
    const int width = 1400, axis_px = 1180;
    int height = 70;
    for (int k = 0; k < n; k++) height += 90 + 46 * ps[k].pp;
    plot p;
    dp_status st = plot_begin(&p, out_path, width, height, err);
    if (st != DP_OK) return st;
    FILE *fp = plot_script(&p);
    double tmax = panels_tmax(ps, n);
    for (int k = 0; k < n; k++) {
        fprintf(fp, "$p%d << EOD\n", k);
        for (size_t i = 0; i < ps[k].n_ops; i++) {
            const panel_op *o = &ps[k].ops[i];
            char label[64];
            box_label(o, tmax, axis_px, label, sizeof label);
            fprintf(fp, "%.6f %.6f %d %u ", o->t0_ms, o->t1_ms, o->stage, op_colour(o));
            put_field(fp, label);
            fputc('\n', fp);
        }
        fprintf(fp, "0 0 -10 0 \"\"\nEOD\n"); /* never empty */
    }
    fprintf(fp, "set multiplot layout %d,1", n);
    if (title) {
        fprintf(fp, " title ");
        put_str(fp, title);
    }
    fprintf(fp, "\nset xrange [0:%g]\nset grid xtics\nunset key\nset ytics 1\n"
                "set style fill solid 0.85 border lc rgb '#333333'\nset lmargin 10\nset rmargin 4\n",
            tmax * 1.01);
    for (int k = 0; k < n; k++) {
        char heading[256];
        panel_heading(&ps[k], heading, sizeof heading);
        put_title(fp, "set title", heading);
        fprintf(fp, "set yrange [%d.6:-0.6]\nset ylabel 'stage'\nset xlabel %s\n"
                    "plot $p%d using (($1+$2)/2):3:(($2-$1)/2):(0.4):4 with boxxyerror "
                    "lc rgb variable, \\\n"
                    "     $p%d using (($1+$2)/2):3:5 with labels font ',8'\n",
                ps[k].pp - 1, k == n - 1 ? "'time (ms)'" : "''", k, k);
    }
    fprintf(fp, "unset multiplot\n");
    return plot_finish(&p, err);
}

dp_status plot_panel_memory(const panel *ps, int n, const char *title, const char *out_path,
                            dp_err *err)
{
    plot p;
    dp_status st = plot_begin(&p, out_path, 1400, 70 + 300 * n, err);
    if (st != DP_OK) return st;
    FILE *fp = plot_script(&p);
    double tmax = panels_tmax(ps, n);
    for (int k = 0; k < n; k++) {
        for (int s = 0; s < ps[k].pp; s++) {
            fprintf(fp, "$m%d_%d << EOD\n", k, s);
            int any = 0;
            for (size_t i = 0; i < ps[k].n_mem; i++)
                if (ps[k].mem[i].stage == s)
                    fprintf(fp, "%.6f %.3f\n", ps[k].mem[i].t_ms, ps[k].mem[i].mb), any = 1;
            if (!any) fprintf(fp, "0 NaN\n");
            fprintf(fp, "EOD\n");
        }
    }
    fprintf(fp, "set multiplot layout %d,1", n);
    if (title) {
        fprintf(fp, " title ");
        put_str(fp, title);
    }
    fprintf(fp, "\nset xrange [0:%g]\nset grid\nset key outside right top\nset lmargin 12\n", tmax * 1.01);
    for (int k = 0; k < n; k++) {
        double lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < ps[k].n_mem; i++) lo = fmin(lo, ps[k].mem[i].mb), hi = fmax(hi, ps[k].mem[i].mb);
        if (!(hi >= lo)) lo = 0, hi = 1;
        double pad = fmax(0.08 * (hi - lo), 1);
        int limit_shown = ps[k].mem_limit_mb > 0 && ps[k].mem_limit_mb <= hi + 3 * (hi - lo + pad);
        if (limit_shown) hi = fmax(hi, ps[k].mem_limit_mb);
        char heading[256];
        int at = snprintf(heading, sizeof heading, "%s: memory per stage (model state + activations)",
                          ps[k].schedule);
        if (!limit_shown && ps[k].mem_limit_mb > 0 && at > 0)
            snprintf(heading + at, sizeof heading - (size_t)at, "; device limit %.0f MB, above",
                     ps[k].mem_limit_mb);
        put_title(fp, "set title", heading);
        fprintf(fp, "set yrange [%g:%g]\nset ylabel 'MB'\nset xlabel %s\nplot ", lo - pad, hi + pad,
                k == n - 1 ? "'time (ms)'" : "''");
        for (int s = 0; s < ps[k].pp; s++)
            fprintf(fp, "%s$m%d_%d using 1:2 with steps lw 2 title 'stage %d'", s ? ", \\\n     " : "",
                    k, s, s);
        if (limit_shown)
            fprintf(fp, ", \\\n     %g with lines dt 2 lw 2 lc rgb '#d62728' title 'device limit'",
                    ps[k].mem_limit_mb);
        fputc('\n', fp);
    }
    fprintf(fp, "unset multiplot\n");
    return plot_finish(&p, err);
}

dp_status plot_lines(const plot_point *pts, int n, const char *const *series_names, int series,
                     const char *title, const char *xlabel, const char *ylabel, int logx,
                     const char *out_path, dp_err *err)
{
    plot p;
    dp_status st = plot_begin(&p, out_path, 1000, 600, err);
    if (st != DP_OK) return st;
    FILE *fp = plot_script(&p);
    for (int k = 0; k < series; k++) {
        fprintf(fp, "$s%d << EOD\n", k);
        for (int i = 0; i < n; i++)
            if (pts[i].series == k) fprintf(fp, "%.9g %.9g\n", pts[i].x, pts[i].y);
        fprintf(fp, "EOD\n");
    }
    put_title(fp, "set title", title);
    fprintf(fp, "set xlabel ");
    put_str(fp, xlabel);
    fprintf(fp, "\nset ylabel ");
    put_str(fp, ylabel);
    fprintf(fp, "\nset grid\nset key outside right top\nset yrange [0:*]\nset offsets graph 0.02, graph 0.02, 0, 0\n%s\nplot ",
            logx ? "set logscale x 2\nset format x '%.0f'" : "");
    for (int k = 0; k < series; k++) {
        fprintf(fp, "%s$s%d using 1:2 with linespoints lw 2 pt 7 title ", k ? ", \\\n     " : "", k);
        put_str(fp, series_names[k]);
    }
    fprintf(fp, "\n");
    return plot_finish(&p, err);
}
