#define _DEFAULT_SOURCE /* mkstemp, realpath */
#include "outfile.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

dp_status out_open(out_file *o, const char *path, dp_err *err)
{
    memset(o, 0, sizeof *o);
    o->path = path;
    if (strcmp(path, "-") == 0) {
        o->fp = stdout;
        return DP_OK;
    }
    struct stat sb;
    if (stat(path, &sb) == 0 && !S_ISREG(sb.st_mode)) { /* /dev/null, a FIFO: written in place */
        o->fp = fopen(path, "wb");
        o->direct = 1;
        if (!o->fp) {
            int e = errno;
            memset(o, 0, sizeof *o);
            return dp_fail(err, DP_ERR_IO, "%s: cannot open: %s", path, strerror(e));
        }
        return DP_OK;
    }
    size_t n = strlen(path) + 16;
    o->tmp = malloc(n);
    if (!o->tmp) return dp_fail(err, DP_ERR_NOMEM, "out of memory");
    snprintf(o->tmp, n, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(o->tmp);
    if (fd < 0) {
        int e = errno;
        free(o->tmp);
        memset(o, 0, sizeof *o);
        return dp_fail(err, DP_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    mode_t mask = umask(0); /* mkstemp makes 0600; an output is an ordinary file */
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    o->fp = fdopen(fd, "wb");
    if (!o->fp) {
        int e = errno;
        close(fd);
        unlink(o->tmp);
        free(o->tmp);
        memset(o, 0, sizeof *o);
        return dp_fail(err, DP_ERR_IO, "%s: cannot create: %s", path, strerror(e));
    }
    return DP_OK;
}

dp_status out_check_writable(const char *path, dp_err *err)
{
    out_file probe;
    dp_status st = out_open(&probe, path, err);
    if (st == DP_OK) out_abort(&probe);
    return st;
}

dp_status out_commit(out_file *o, dp_err *err)
{
    if (!o->fp) return dp_fail(err, DP_ERR_IO, "%s: not open", o->path ? o->path : "output");
    int bad = ferror(o->fp), e = 0;
    if (!o->tmp) { /* stdout, or a device written in place */
        bad |= o->direct ? fclose(o->fp) != 0 : fflush(o->fp) != 0;
        o->fp = NULL;
        return bad ? dp_fail(err, DP_ERR_IO, "%s: write failed", o->direct ? o->path : "standard output")
                   : DP_OK;
    }
    if (fflush(o->fp) != 0) bad = 1, e = errno;
    if (fclose(o->fp) != 0 && !e) bad = 1, e = errno;
    o->fp = NULL;
    if (!bad && rename(o->tmp, o->path) != 0) bad = 1, e = errno;
    if (bad) {
        unlink(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
        return dp_fail(err, DP_ERR_IO, "%s: write failed: %s (the file was left as it was)",
                       o->path, e ? strerror(e) : "a write did not complete");
    }
    free(o->tmp);
    o->tmp = NULL;
    return DP_OK;
}

void out_abort(out_file *o)
{
    if (!o) return;
    if (o->direct && o->fp) fclose(o->fp);
    if (o->tmp) {
        if (o->fp) fclose(o->fp);
        unlink(o->tmp);
        free(o->tmp);
    }
    memset(o, 0, sizeof *o);
}

dp_status out_install(const char *src, const char *path, dp_err *err)
{
    FILE *in = fopen(src, "rb");
    if (!in) return dp_fail(err, DP_ERR_IO, "%s: cannot read: %s", src, strerror(errno));
    out_file o;
    dp_status st = out_open(&o, path, err);
    if (st != DP_OK) {
        fclose(in);
        return st;
    }
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, o.fp) != n) break;
    int rbad = ferror(in);
    fclose(in);
    if (rbad) {
        out_abort(&o);
        return dp_fail(err, DP_ERR_IO, "%s: cannot read", src);
    }
    return out_commit(&o, err);
}

/* ---- distinctness ------------------------------------------------------------------------------ */

typedef struct file_id {
    int exists;
    dev_t dev;
    ino_t ino;
    char resolved[PATH_MAX + 256]; /* where it does not exist: resolved directory + "/" + name */
} file_id;

static void identify(const char *path, file_id *id)
{
    memset(id, 0, sizeof *id);
    struct stat sb;
    if (stat(path, &sb) == 0) {
        id->exists = 1;
        id->dev = sb.st_dev;
        id->ino = sb.st_ino;
        return;
    }
    /* not there yet: its directory, resolved, and its name */
    const char *slash = strrchr(path, '/');
    char dir[PATH_MAX];
    const char *name = slash ? slash + 1 : path;
    if (slash) {
        size_t n = (size_t)(slash - path);
        if (n == 0) n = 1; /* "/name" */
        if (n >= sizeof dir) n = sizeof dir - 1;
        memcpy(dir, path, n);
        dir[n] = '\0';
    } else {
        strcpy(dir, ".");
    }
    char real[PATH_MAX];
    if (!realpath(dir, real)) snprintf(real, sizeof real, "%s", dir);
    snprintf(id->resolved, sizeof id->resolved, "%s/%s", real, name);
}

static int same(const file_id *a, const file_id *b)
{
    if (a->exists && b->exists) return a->dev == b->dev && a->ino == b->ino;
    if (!a->exists && !b->exists) return strcmp(a->resolved, b->resolved) == 0;
    return 0;
}

dp_status out_distinct(const out_role *inputs, int n_in, const out_role *outputs, int n_out,
                       dp_err *err)
{
    const out_role *on_stdout = NULL; /* one document on stdout at a time */
    for (int i = 0; i < n_out; i++) {
        const out_role *o = &outputs[i];
        if (o->path && strcmp(o->path, "-") == 0) {
            if (on_stdout)
                return dp_fail(err, DP_ERR_INVALID, "%s - and %s - both write to stdout: their "
                               "documents would interleave\nhint: one of them to a file",
                               on_stdout->option, o->option);
            on_stdout = o;
        }
        if (!o->path || strcmp(o->path, "-") == 0) continue;
        file_id a, b;
        identify(o->path, &a);
        for (int j = 0; j < n_in; j++) {
            const out_role *in = &inputs[j];
            if (!in->path || strcmp(in->path, "-") == 0) continue;
            identify(in->path, &b);
            if (!b.exists) continue; /* a preset name, or not there: nothing to destroy */
            if (same(&a, &b))
                return dp_fail(err, DP_ERR_INVALID, "%s %s is the same file as the input %s %s: "
                               "writing it would destroy the input", o->option, o->path,
                               in->option, in->path);
        }
        for (int j = 0; j < i; j++) {
            const out_role *p = &outputs[j];
            if (!p->path || strcmp(p->path, "-") == 0) continue;
            identify(p->path, &b);
            if (same(&a, &b))
                return dp_fail(err, DP_ERR_INVALID, "%s %s and %s %s are the same file: two "
                               "outputs would overwrite each other", p->option, p->path,
                               o->option, o->path);
        }
    }
    return DP_OK;
}
