/* Fuzz target: the trace CSV reader (libcsv underneath). */
#include "fuzz.h"

#include "../../traces/trace.h"
#include "../../traces/trace_stats.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    FILE *fp = fuzz_stream(data, size);
    if (!fp) return 0;
    trace t;
    trace_init(&t);
    dp_err err;
    if (trace_read_csv_stream(fp, "fuzz.csv", NULL, &t, &err) == DP_OK) {
        trace_stats s;
        if (trace_stats_compute(&t, &s, &err) == DP_OK) trace_stats_release(&s);
    }
    trace_release(&t);
    fclose(fp);
    return 0;
}
