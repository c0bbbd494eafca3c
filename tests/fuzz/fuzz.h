/*
 * fuzz.h — helpers for the fuzz targets (libFuzzer entry points, also replayed by replay.c).
 *
 * Every target must end every input without a crash, a hang or a sanitizer report; a parser may
 * (and mostly will) reject the input with a message, which is fine.
 */
#ifndef FUZZ_H
#define FUZZ_H

#define _DEFAULT_SOURCE /* fmemopen, mkstemp */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated copy of the input (caller frees). */
static inline char *fuzz_text(const uint8_t *data, size_t size)
{
    char *t = malloc(size + 1);
    if (!t) abort();
    memcpy(t, data, size);
    t[size] = '\0';
    return t;
}

/* The input as a read-only stream (fmemopen needs a non-empty buffer). */
static inline FILE *fuzz_stream(const uint8_t *data, size_t size)
{
    static const char empty[1] = {0};
    return fmemopen(size ? (void *)data : (void *)empty, size, "rb");
}

/* The input written to a private temporary file; returns its path (static buffer). */
static inline const char *fuzz_file(const uint8_t *data, size_t size, const char *suffix)
{
    static char path[128];
    snprintf(path, sizeof path, "/tmp/dpsim-fuzz-%d%s", (int)getpid(), suffix);
    FILE *fp = fopen(path, "wb");
    if (!fp) abort();
    if (size && fwrite(data, 1, size, fp) != size) abort();
    fclose(fp);
    return path;
}

#endif /* FUZZ_H */
