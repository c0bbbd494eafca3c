/*
 * testutil.h — small helpers for the cmocka unit tests (header-only, each test includes it once).
 *
 * cmocka 1.1.5 compares floating point in single precision, so doubles are checked here.
 */
#ifndef TESTUTIL_H
#define TESTUTIL_H

#define _DEFAULT_SOURCE /* mkstemps */

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

/* |a - b| <= tol, with both values printed on failure. */
#define assert_near(a, b, tol)                                                                     \
    do {                                                                                           \
        double a_ = (a), b_ = (b), t_ = (tol);                                                     \
        if (!(fabs(a_ - b_) <= t_))                                                                \
            fail_msg("%s = %.9g, %s = %.9g, differ by more than %g", #a, a_, #b, b_, t_);          \
    } while (0)

/* |a - b| <= rel * |b|. */
#define assert_rel(a, b, rel) assert_near((a), (b), fabs((double)(b)) * (rel))

/* The message must contain the substring. */
#define assert_msg_has(msg, sub)                                                                   \
    do {                                                                                           \
        if (!strstr((msg), (sub))) fail_msg("message \"%s\" lacks \"%s\"", (msg), (sub));          \
    } while (0)

/* Temporary files made by a test binary; removed at exit. */
static char tmp_paths[4096][64];
static int tmp_count;

static inline void tmp_cleanup(void)
{
    for (int i = 0; i < tmp_count && i < 4096; i++) unlink(tmp_paths[i]);
}

/* Writes len bytes to a fresh temporary file and returns its path (valid until exit). */
static inline const char *tmp_file_bytes(const char *suffix, const void *data, size_t len)
{
    if (tmp_count == 0) atexit(tmp_cleanup);
    assert_true(tmp_count < 4096);
    char *path = tmp_paths[tmp_count++];
    snprintf(path, 64, "/tmp/dpsim-test-XXXXXX%s", suffix);
    int fd = mkstemps(path, (int)strlen(suffix));
    assert_true(fd >= 0);
    assert_int_equal(write(fd, data, len), (ssize_t)len);
    close(fd);
    return path;
}

static inline const char *tmp_file(const char *suffix, const char *text)
{
    return tmp_file_bytes(suffix, text, strlen(text));
}

#endif /* TESTUTIL_H */
