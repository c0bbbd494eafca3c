/* Fuzz target: the measured-timeline CSV that dpsim validate reads. */
#include "fuzz.h"

#include "../../sim/validate.h"

/* A one-iteration, one-stage plan to validate against. */
static const char PLAN[] =
    "{\"version\":1,\"pp\":1,\"iterations\":[{\"id\":0,\"microbatches\":[{\"id\":0,\"samples\":[0],"
    "\"mbs\":1,\"enc_len\":16,\"pred_ms\":{\"fwd\":[1],\"bwd\":[2]}}],\"stages\":[{\"stage\":0,"
    "\"instructions\":[{\"op\":\"F\",\"mb\":0},{\"op\":\"B\",\"mb\":0},{\"op\":\"FREE\",\"mb\":0}]}]}]}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static plan p;
    static int ready;
    dp_err err;
    if (!ready) {
        if (plan_parse(PLAN, "plan", &p, &err) != DP_OK) abort();
        ready = 1;
    }
    cluster_spec hw;
    cluster_preset("p4d", &hw);
    sim_config cfg = {0};
    cfg.hw = &hw;
    cfg.pp = 1, cfg.chunks = 1, cfg.dp = 1, cfg.mem_limit_mb = 1e9;
    const char *path = fuzz_file(data, size, ".csv");
    val_result v;
    if (validate_run(&p, 0, &cfg, path, &v, &err) == DP_OK) val_result_release(&v);
    unlink(path);
    return 0;
}
