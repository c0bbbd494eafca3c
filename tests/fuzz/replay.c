/* Replays fuzz inputs (seed corpora and every crash found) through a target without libFuzzer,
 * so that `make check` keeps them as regression tests. Usage: replay FILE_OR_DIR... */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "replay: %s: cannot open\n", path);
        return 1;
    }
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    size_t got = n > 0 ? fread(buf, 1, (size_t)n, fp) : 0;
    fclose(fp);
    LLVMFuzzerTestOneInput(buf, got);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) continue;
        if (!S_ISDIR(st.st_mode)) {
            bad |= run_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char path[4096];
            snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
            bad |= run_file(path);
            files++;
        }
        if (d) closedir(d);
    }
    printf("[==========] Running %d test(s).\n", files);
    if (bad) printf("[  FAILED  ] 1 test(s), listed below:\n");
    else printf("[  PASSED  ] %d test(s).\n", files);
    return bad;
}
