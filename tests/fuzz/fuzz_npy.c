/* Fuzz target: DynaPipe .npy length files (NumPy header parser). */
#include "fuzz.h"

#include "../../traces/trace.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int64_t *rows = NULL;
    size_t n = 0;
    dp_err err;
    if (trace_npy_parse(data, size, "fuzz.npy", &rows, &n, &err) == DP_OK) {
        volatile uint64_t sum = 0;
        for (size_t i = 0; i < n * 3; i++) sum += (uint64_t)rows[i];
        (void)sum; /* read every row (ASan checks the reads), nothing else */
        free(rows);
    }
    return 0;
}
