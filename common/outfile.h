/*
 * outfile.h — writing an output file so that a failure never leaves a half file where a good one
 * was, and no output destroys an input.
 *
 *   out_open    creates a temporary file beside the target ("PATH.tmp-XXXXXX", same directory, so
 *               the final rename is atomic); "-" writes to stdout directly, and so is a path
 *               that exists and is not a regular file (/dev/null, a FIFO);
 *   out_commit  checks every write (the stream's error flag), flushes, closes and renames the
 *               temporary into place; on any failure the temporary is removed, the target is left
 *               as it was, and the error names the target and the reason (a full disk says so);
 *   out_abort   removes the temporary (a no-op after a commit, or for stdout).
 *
 *   out_distinct  before anything is written: every output must differ from every input and
 *                 from every other output, as files (after resolving links: same device and inode
 *                 where the file exists, the same resolved directory and name where it does not).
 *                 NULL entries are skipped; "-" (stdin/stdout) is never compared, nor an input
 *                 that does not exist (a preset name). DP_ERR_INVALID names both options and the
 *                 path.
 */
#ifndef OUTFILE_H
#define OUTFILE_H

#include <stdio.h>

#include "dp.h"

typedef struct out_file {
    FILE *fp;        /* where to write */
    char *tmp;       /* the temporary's path (malloc'd); NULL for stdout or a device */
    int direct;      /* an existing non-regular file (/dev/null, a FIFO), written in place */
    const char *path; /* the target, as given (not owned) */
} out_file;

/* On failure o holds nothing and nothing was created. */
dp_status out_open(out_file *o, const char *path, dp_err *err);
/* Whether path could be written, checked before the work that makes it (a temporary created
 * beside it and removed): a folder that is not there or not writable fails now, naming it, not
 * after the work. Leaves nothing behind; "-" and devices pass. */
dp_status out_check_writable(const char *path, dp_err *err);
dp_status out_commit(out_file *o, dp_err *err);
void out_abort(out_file *o);

/* An input or output for out_distinct: the option that names it and the path. */
typedef struct out_role {
    const char *option; /* "--plan", "-o", ... */
    const char *path;   /* NULL: not given */
} out_role;

/* DP_ERR_INVALID, naming both, when an output is the same file as an input or another output,
 * or when two outputs are stdout ("-"): their documents would interleave. */
dp_status out_distinct(const out_role *inputs, int n_in, const out_role *outputs, int n_out,
                       dp_err *err);

/* Copies the file at src into place at path through out_open/out_commit (for a file another
 * program wrote under a safe temporary name). */
dp_status out_install(const char *src, const char *path, dp_err *err);

#endif /* OUTFILE_H */
