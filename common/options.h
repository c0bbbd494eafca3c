/*
 * options.h — one declarative option table per subcommand: it parses argv (getopt_long, built
 * from the table), range-checks every value, and prints --help with each option's default, for
 * every dpsim subcommand (cli/cmd_*.c). The options several subcommands share (the cost
 * model's, the plan's) are rows that the planner's request tables (planner/request.h) append to
 * a command's table, so they are written once; a sweep sets them by name (cli_opts_set).
 *
 * A row says: the long name (and a short letter), what the value is (a flag, a whole number or a
 * real number in [lo, hi], a string, or a value that a callback parses), where it goes, the
 * metavariable and help text for --help, and the default it shows ("[2048]"). Values are stored
 * as they are parsed, left to right; a later option overwrites an earlier one.
 *
 * Messages (all usage errors: exit 2, printed by cli_usage_error): "--mbs \"0\" must be a whole
 * number in [1, 1048576]" (cli_int's), "unknown option --x", "--mbs needs a value", "unexpected
 * argument \"x\"". Marks let a command ask which options were given: the first row given with
 * a mark is kept in cli_opts.first[mark] (OPT_FIXED_BY_PLAN: what a plan file fixes, refused beside
 * --plan; OPT_TUNED: what tune searches, refused beside it); cli_opt_label names it.
 *
 * Ownership: a table holds pointers to the caller's destinations and strings (static, or alive
 * as long as the table); cli_opts_release frees the table's own rows only.
 */
#ifndef OPTIONS_H
#define OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Exit codes of the drivers: 0 success, 1 runtime failure (bad input file, infeasible plan, I/O),
 * 2 usage error (unknown option or subcommand, bad option value). */
enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

/* The program that messages name ("dpsim", the default; "dprun"). */
void cli_opts_program(const char *name);

/* Prints "PROGRAM CMD: message" and "usage: USAGE" (and a --help hint) on stderr; returns
 * EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Parses an option value as an integer in [lo, hi]; on failure prints a usage error naming the
 * option and returns -1 (caller returns EXIT_USAGE). */
int cli_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
            int64_t *out);

/* Parses a finite floating-point option value in [lo, hi], as cli_int. */
int cli_double(const char *cmd, const char *opt, const char *text, double lo, double hi,
               double *out);

typedef enum cli_opt_kind {
    OPT_FLAG,   /* no value: *(int *)dest = flag_value (1 when 0) */
    OPT_INT,    /* a whole number in [lo, hi]: *(int *)dest */
    OPT_INT64,  /* a whole number in [lo, hi]: *(int64_t *)dest */
    OPT_DOUBLE, /* a finite number in [lo, hi]: *(double *)dest */
    OPT_STRING, /* *(const char **)dest = the argument */
    OPT_CALL,   /* call(ctx, arg, cmd, usage) parses it: 0 done, -1 usage error printed */
} cli_opt_kind;

enum { OPT_FIXED_BY_PLAN = 1, OPT_TUNED = 2 }; /* marks (bits) */
#define OPT_MARKS 3                           /* first[] slots: index = the mark's bit value */
#define OPT_NO_RESULT 4 /* a mark of its own: the option changes no result (--stream), so a
                         * configuration's description leaves it out */

typedef struct cli_opt {
    const char *name;  /* long name without "--" */
    char letter;       /* short option, 0: none */
    cli_opt_kind kind;
    void *dest;
    const char *meta;  /* the value's name in --help ("N", "FILE"); NULL for flags */
    const char *help;  /* help text; '\n' starts a further line */
    const char *deflt; /* the default --help shows as [..]; NULL: none shown */
    double lo, hi;     /* OPT_INT, OPT_INT64, OPT_DOUBLE: the accepted range */
    int (*call)(void *ctx, const char *arg, const char *cmd, const char *usage);
    void *ctx;         /* OPT_CALL's first argument */
    int marks;         /* OPT_FIXED_BY_PLAN | OPT_TUNED */
    const char *mark_name; /* how a mark names it ("--batching (use --batchings)"); NULL: --name */
    int flag_value;    /* OPT_FLAG: the value stored; 0 means 1 */
    /* OPT_CALL: writes the current value as it would be given (cli_opt_value) */
    void (*show)(const void *ctx, char *buf, size_t cap);
    /* "Only with": an option that does nothing unless another says so. applies(applies_ctx),
     * asked once every option is parsed, reads their destinations; given where it returns 0, the
     * option is refused as "--cp-max applies only with --cp auto" (only_with), not ignored. NULL:
     * it always applies. */
    int (*applies)(const void *ctx);
    const void *applies_ctx;
    const char *only_with;
    int given; /* set by cli_opts_parse: the option was on the command line */
} cli_opt;

typedef struct cli_opts {
    const char *cmd;   /* "cost": messages say "dpsim cost: ..." */
    const char *usage; /* the usage line */
    const char *about; /* --help's paragraph after the usage line */
    cli_opt *row;
    int n, cap;
    const cli_opt *first[OPT_MARKS]; /* after parsing: the first row given with each mark (valid
                                      * while the table is) */
    int help_hides; /* marks whose rows --help leaves out (tune: OPT_TUNED, which it refuses) */
    int defer_only_with; /* 1: cli_opts_parse skips the "only with" check (a sweep, whose grid may
                          * set the condition point by point: its base options are not refused) */
} cli_opts;

/* An empty table for cmd (no rows; --help is always understood). */
void cli_opts_init(cli_opts *t, const char *cmd, const char *usage, const char *about);
void cli_opts_release(cli_opts *t);

/* Appends a row (aborts when out of memory, as dp_xcalloc). Returns the row for marks. */
cli_opt *cli_opts_add(cli_opts *t, cli_opt row);

/* Shorthands for the common rows. */
cli_opt *cli_opt_flag(cli_opts *t, const char *name, char letter, int *dest, const char *help);
cli_opt *cli_opt_int(cli_opts *t, const char *name, char letter, int *dest, const char *meta,
                     int64_t lo, int64_t hi, const char *deflt, const char *help);
cli_opt *cli_opt_int64(cli_opts *t, const char *name, char letter, int64_t *dest,
                       const char *meta, int64_t lo, int64_t hi, const char *deflt,
                       const char *help);
cli_opt *cli_opt_double(cli_opts *t, const char *name, char letter, double *dest,
                        const char *meta, double lo, double hi, const char *deflt,
                        const char *help);
cli_opt *cli_opt_string(cli_opts *t, const char *name, char letter, const char **dest,
                        const char *meta, const char *deflt, const char *help);
cli_opt *cli_opt_call(cli_opts *t, const char *name, char letter,
                      int (*call)(void *ctx, const char *arg, const char *cmd, const char *usage),
                      void *ctx, const char *meta, const char *deflt, const char *help);

/* Marks row o as applying only when applies(ctx) (cli_opt.applies); returns o. */
cli_opt *cli_opt_only_with(cli_opt *o, int (*applies)(const void *ctx), const void *ctx,
                           const char *only_with);

/* Parses argv[1 ..] (argv[0] is the subcommand). Arguments that are not options go to pos (at
 * most max_pos of them, *n_pos set; pos may be NULL when none is accepted). Returns 0 to go on,
 * 1 when --help was printed on stdout (the command returns 0), or EXIT_USAGE (2) after printing
 * a usage error. */
int cli_opts_parse(cli_opts *t, int argc, char **argv, const char **pos, int max_pos, int *n_pos);

/* Applies one option by its long name, as if given on the command line (sweep's grid keys; a
 * flag takes true or false, 1 or 0 here): 1 applied, 0 no such option in the table, -1 a usage
 * error printed. */
int cli_opts_set(cli_opts *t, const char *name, const char *value);

/* The row of a long name, or NULL. */
cli_opt *cli_opts_find(cli_opts *t, const char *name);

/* A row's current value as text, as it would be given: a flag "true"/"false", numbers in full
 * precision, a string ("" when unset), a call's by its show function. */
void cli_opt_value(const cli_opt *o, char *buf, size_t cap);

/* How messages name a row: its mark_name, or "--name" (in buf). */
const char *cli_opt_label(const cli_opt *o, char *buf, size_t cap);

/* The --help text: usage, about, one line per option (short and long name, metavariable, help,
 * default), and -h, --help. A table without usage or about prints its rows alone (dprun --help
 * shows each subcommand's). */
void cli_opts_help(const cli_opts *t, FILE *fp);

#endif /* OPTIONS_H */
