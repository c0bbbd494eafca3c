#include "cli.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DPSIM_SRCDIR
#define DPSIM_SRCDIR "."
#endif

int cli_usage_error(const char *cmd, const char *usage, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dpsim %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: %s\nTry 'dpsim %s --help' for the options.\n", usage, cmd);
    return EXIT_USAGE;
}

int cli_fail(const char *cmd, const dp_err *err)
{
    fprintf(stderr, "dpsim %s: error: %s\n", cmd, err->msg);
    return EXIT_RUNTIME;
}

int cli_int(const char *cmd, const char *opt, const char *text, int64_t lo, int64_t hi,
            int64_t *out)
{
    if (dp_parse_i64(text, lo, hi, out) == 0) return 0;
    fprintf(stderr, "dpsim %s: %s \"%s\" must be a whole number in [%lld, %lld]\n", cmd, opt, text,
            (long long)lo, (long long)hi);
    return -1;
}

int cli_double(const char *cmd, const char *opt, const char *text, double lo, double hi,
               double *out)
{
    if (dp_parse_f64(text, out) == 0 && *out >= lo && *out <= hi) return 0;
    fprintf(stderr, "dpsim %s: %s \"%s\" must be a number in [%g, %g]\n", cmd, opt, text, lo, hi);
    return -1;
}

static int readable(const char *path)
{
    return access(path, R_OK) == 0;
}

const char *cli_data_path(const char *rel, char *buf, size_t cap)
{
    const char *env = getenv("DPSIM_DATA");
    if (env && *env) {
        snprintf(buf, cap, "%s/%s", env, rel);
        if (readable(buf)) return buf;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0'; /* the build/ folder */
            snprintf(buf, cap, "%s/../%s", exe, rel);
            if (readable(buf)) return buf;
        }
    }
    snprintf(buf, cap, "%s/%s", DPSIM_SRCDIR, rel);
    return readable(buf) ? buf : NULL;
}

int cli_stderr_is_tty(void)
{
    return isatty(STDERR_FILENO);
}
