/* Fuzz target: JSONL trace import (cJSON underneath). */
#include "fuzz.h"

#include "../../traces/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *fp = fuzz_stream(data, size);
    if (!fp) return 0;
    trace t;
    trace_init(&t);
    dp_err err;
    trace_read_jsonl_stream(fp, "fuzz.jsonl", NULL, &t, &err);
    trace_release(&t);
    fclose(fp);
    return 0;
}
