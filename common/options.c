/* The declarative option tables of the dpsim subcommands (options.h). */
#include "options.h"

#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dp.h"

static const char *program = "dpsim";

void cli_opts_program(const char *name)
{
    program = name;
}

int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", program, cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: %s\nTry '%s %s --help' for the options.\n", usage, program, cmd);
    return EXIT_USAGE;
}

int cli_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
            int64_t *out)
{
    if (dp_parse_i64(text, lo, hi, out) == 0) return 0;
    fprintf(stderr, "%s %s: %s \"%s\" must be a whole number in [%lld, %lld]\n", program, cmd, opt,
            text, (long long)lo, (long long)hi);
    return -1;
}

int cli_double(const char *cmd, const char *opt, const char *text, double lo, double hi,
               double *out)
{
    if (dp_parse_f64(text, out) == 0 && *out >= lo && *out <= hi) return 0;
    fprintf(stderr, "%s %s: %s \"%s\" must be a number in [%g, %g]\n", program, cmd, opt, text, lo,
            hi);
    return -1;
}

#define CODE_BASE 1000 /* getopt code of row i without a letter: CODE_BASE + i */
#define HELP_COLUMN 24 /* where --help's text starts */
#define HELP_WIDTH 96 /* a default that would pass it goes on the next line */

void cli_opts_init(cli_opts *t, const char *cmd, const char *usage, const char *about)
{
    memset(t, 0, sizeof *t);
    t->cmd = cmd, t->usage = usage, t->about = about;
}

void cli_opts_release(cli_opts *t)
{
    free(t->row);
    t->row = NULL;
    t->n = t->cap = 0;
}

cli_opt *cli_opts_add(cli_opts *t, cli_opt row)
{
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 32;
        cli_opt *grown = dp_xcalloc((size_t)cap, sizeof *grown);
        if (t->n) memcpy(grown, t->row, (size_t)t->n * sizeof *grown);
        free(t->row);
        t->row = grown, t->cap = cap;
    }
    t->row[t->n] = row;
    return &t->row[t->n++];
}

cli_opt *cli_opt_flag(cli_opts *t, const char *name, char letter, int *dest, const char *help)
{
    return cli_opts_add(t, (cli_opt){.name = name, .letter = letter, .kind = OPT_FLAG,
                                     .dest = dest, .help = help});
}

cli_opt *cli_opt_int(cli_opts *t, const char *name, char letter, int *dest, const char *meta,
                     int64_t lo, int64_t hi, const char *deflt, const char *help)
{
    return cli_opts_add(t, (cli_opt){.name = name, .letter = letter, .kind = OPT_INT, .dest = dest,
                                     .meta = meta, .help = help, .deflt = deflt,
                                     .lo = (double)lo, .hi = (double)hi});
}

cli_opt *cli_opt_int64(cli_opts *t, const char *name, char letter, int64_t *dest,
                       const char *meta, int64_t lo, int64_t hi, const char *deflt,
                       const char *help)
{
    return cli_opts_add(t, (cli_opt){.name = name, .letter = letter, .kind = OPT_INT64,
                                     .dest = dest, .meta = meta, .help = help, .deflt = deflt,
                                     .lo = (double)lo, .hi = (double)hi});
}

cli_opt *cli_opt_double(cli_opts *t, const char *name, char letter, double *dest,
                        const char *meta, double lo, double hi, const char *deflt,
                        const char *help)
{
    return cli_opts_add(t, (cli_opt){.name = name, .letter = letter, .kind = OPT_DOUBLE,
                                     .dest = dest, .meta = meta, .help = help, .deflt = deflt,
                                     .lo = lo, .hi = hi});
}

cli_opt *cli_opt_string(cli_opts *t, const char *name, char letter, const char **dest,
                        const char *meta, const char *deflt, const char *help)
{
    return cli_opts_add(t, (cli_opt){.name = name, .letter = letter, .kind = OPT_STRING,
                                     .dest = (void *)dest, .meta = meta, .help = help,
                                     .deflt = deflt});
}

cli_opt *cli_opt_call(cli_opts *t, const char *name, char letter,
                      int (*call)(void *ctx, const char *arg, const char *cmd, const char *usage),
                      void *ctx, const char *meta, const char *deflt, const char *help)
{
    return cli_opts_add(t, (cli_opt){.name = name, .letter = letter, .kind = OPT_CALL,
                                     .call = call, .ctx = ctx, .meta = meta, .help = help,
                                     .deflt = deflt});
}

/* Stores one value; 0 done, -1 a usage error printed. */
static int apply(cli_opts *t, const cli_opt *o, const char *arg)
{
    char opt[80];
    snprintf(opt, sizeof opt, "--%s", o->name);
    int64_t v;
    switch (o->kind) {
    case OPT_FLAG: /* on the command line it takes no value; by name (a grid) true or false */
        if (!arg || strcmp(arg, "true") == 0 || strcmp(arg, "1") == 0) {
            *(int *)o->dest = o->flag_value ? o->flag_value : 1;
        } else if (strcmp(arg, "false") == 0 || strcmp(arg, "0") == 0) {
            *(int *)o->dest = 0;
        } else {
            cli_usage_error(t->cmd, t->usage, "%s \"%s\" must be true or false", opt, arg);
            return -1;
        }
        break;
    case OPT_INT:
    case OPT_INT64:
        if (cli_int(t->cmd, opt, arg, (int64_t)o->lo, (int64_t)o->hi, &v)) return -1;
        if (o->kind == OPT_INT) *(int *)o->dest = (int)v;
        else *(int64_t *)o->dest = v;
        break;
    case OPT_DOUBLE: {
        double d; /* cli_double parses before it range-checks: a refused value is not stored */
        if (cli_double(t->cmd, opt, arg, o->lo, o->hi, &d)) return -1;
        *(double *)o->dest = d;
        break;
    }
    case OPT_STRING: *(const char **)o->dest = arg; break;
    case OPT_CALL:
        if (o->call(o->ctx, arg, t->cmd, t->usage) != 0) return -1;
        break;
    }
    for (int m = 1; m < OPT_MARKS; m++)
        if ((o->marks & m) && !t->first[m]) t->first[m] = o;
    ((cli_opt *)o)->given = 1;
    return 0;
}

cli_opt *cli_opt_only_with(cli_opt *o, int (*applies)(const void *ctx), const void *ctx,
                           const char *only_with)
{
    o->applies = applies, o->applies_ctx = ctx, o->only_with = only_with;
    return o;
}

int cli_opts_parse(cli_opts *t, int argc, char **argv, const char **pos, int max_pos, int *n_pos)
{
    struct option *lo = dp_xcalloc((size_t)t->n + 2, sizeof *lo);
    char *shorts = dp_xcalloc((size_t)(2 * t->n + 4), 1);
    size_t ns = 0;
    shorts[ns++] = ':'; /* a missing value is ':', not '?' */
    for (int i = 0; i < t->n; i++) {
        const cli_opt *o = &t->row[i];
        int has_arg = o->kind == OPT_FLAG ? no_argument : required_argument;
        lo[i] = (struct option){o->name, has_arg, 0, o->letter ? o->letter : CODE_BASE + i};
        if (o->letter) {
            shorts[ns++] = o->letter;
            if (has_arg) shorts[ns++] = ':';
        }
    }
    lo[t->n] = (struct option){"help", no_argument, 0, 'h'};
    shorts[ns++] = 'h';
    int c, rc = 0;
    if (n_pos) *n_pos = 0;
    for (int m = 0; m < OPT_MARKS; m++) t->first[m] = NULL;
    for (int i = 0; i < t->n; i++) t->row[i].given = 0;
    optind = 1;
    opterr = 0;
    while (rc == 0 && (c = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        if (c == 'h') {
            cli_opts_help(t, stdout);
            rc = 1;
            break;
        }
        if (c == ':') {
            rc = cli_usage_error(t->cmd, t->usage, "%s needs a value", argv[optind - 1]);
            break;
        }
        const cli_opt *o = NULL;
        for (int i = 0; i < t->n && !o; i++)
            if (c == (t->row[i].letter ? t->row[i].letter : CODE_BASE + i)) o = &t->row[i];
        if (!o) {
            rc = cli_usage_error(t->cmd, t->usage, "unknown option %s", argv[optind - 1]);
            break;
        }
        if (apply(t, o, optarg) != 0) rc = EXIT_USAGE;
    }
    for (int i = 0; rc == 0 && !t->defer_only_with && i < t->n; i++) { /* nothing ignored */
        const cli_opt *o = &t->row[i];
        if (o->given && o->applies && !o->applies(o->applies_ctx))
            rc = cli_usage_error(t->cmd, t->usage, "--%s applies only with %s", o->name,
                                 o->only_with);
    }
    for (; rc == 0 && optind < argc; optind++) {
        if (!pos || !n_pos || *n_pos >= max_pos) {
            rc = cli_usage_error(t->cmd, t->usage, "unexpected argument \"%s\"", argv[optind]);
            break;
        }
        pos[(*n_pos)++] = argv[optind];
    }
    free(lo);
    free(shorts);
    return rc;
}

void cli_opt_value(const cli_opt *o, char *buf, size_t cap)
{
    const char *str;
    switch (o->kind) {
    case OPT_FLAG: snprintf(buf, cap, "%s", *(const int *)o->dest ? "true" : "false"); break;
    case OPT_INT: snprintf(buf, cap, "%d", *(const int *)o->dest); break;
    case OPT_INT64: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)o->dest); break;
    case OPT_DOUBLE: snprintf(buf, cap, "%.17g", *(const double *)o->dest); break;
    case OPT_STRING:
        str = *(const char *const *)o->dest;
        snprintf(buf, cap, "%s", str ? str : "");
        break;
    case OPT_CALL:
        if (o->show) o->show(o->ctx, buf, cap);
        else snprintf(buf, cap, "?");
        break;
    }
}

cli_opt *cli_opts_find(cli_opts *t, const char *name)
{
    for (int i = 0; i < t->n; i++)
        if (strcmp(t->row[i].name, name) == 0) return &t->row[i];
    return NULL;
}

const char *cli_opt_label(const cli_opt *o, char *buf, size_t cap)
{
    if (o->mark_name) return o->mark_name;
    snprintf(buf, cap, "--%s", o->name);
    return buf;
}

int cli_opts_set(cli_opts *t, const char *name, const char *value)
{
    const cli_opt *o = cli_opts_find(t, name);
    return !o ? 0 : apply(t, o, value) == 0 ? 1 : -1;
}

/* Prints text from column `at` (where the cursor is), wrapping its '\n' lines at HELP_COLUMN. */
static void help_text(FILE *fp, int at, const char *text, const char *deflt)
{
    const char *s = text ? text : "";
    for (int first = 1;; first = 0) {
        const char *nl = strchr(s, '\n');
        int len = nl ? (int)(nl - s) : (int)strlen(s);
        if (!first) at = fprintf(fp, "%*s", HELP_COLUMN, "");
        if (at < HELP_COLUMN) at += fprintf(fp, "%*s", HELP_COLUMN - at, "");
        at += fprintf(fp, "%.*s", len, s);
        if (!nl) break;
        fputc('\n', fp);
        s = nl + 1;
    }
    if (deflt) { /* after the text, or under it where the line would pass HELP_WIDTH */
        int w = (int)strlen(deflt) + 2;
        if (at + 2 + w > HELP_WIDTH) fprintf(fp, "\n%*s", HELP_COLUMN, "");
        else fprintf(fp, "  ");
        fprintf(fp, "[%s]", deflt);
    }
    fputc('\n', fp);
}

void cli_opts_help(const cli_opts *t, FILE *fp)
{
    if (t->usage) fprintf(fp, "usage: %s\n\n", t->usage); /* NULL: the rows alone */
    if (t->about && t->about[0]) fprintf(fp, "%s\n\n", t->about);
    for (int i = 0; i < t->n; i++) {
        const cli_opt *o = &t->row[i];
        if (o->marks & t->help_hides) continue;
        int at = o->letter ? fprintf(fp, "  -%c, --%s", o->letter, o->name)
                           : fprintf(fp, "      --%s", o->name);
        if (o->meta) at += fprintf(fp, " %s", o->meta);
        if (at >= HELP_COLUMN - 1) at += fprintf(fp, "  ");
        help_text(fp, at, o->help, o->deflt);
    }
    int at = fprintf(fp, "  -h, --help");
    help_text(fp, at, "this help", NULL);
}
