/*
 * Fuzz target: sweep grid strings (planner/sweep.h). A grid the parser accepts must have between
 * 1 and SWEEP_MAX_POINTS points, and every point's key (its values as CSV cells, quoted where
 * they must be) must read back as that point: the rule a resume and the final ordering rely on.
 */
#include "fuzz.h"

#include "../../planner/sweep.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *spec = fuzz_text(data, size);
    static sweep_grid g;
    plan_request base;
    plan_request_default(&base);
    if (sweep_grid_parse(&base, spec, &g, "sweep", "fuzz") == 0) {
        if (g.points < 1 || g.points > SWEEP_MAX_POINTS) abort();
        long step = g.points > 64 ? g.points / 64 : 1;
        for (long i = 0; i < g.points; i += step) {
            static char key[SWEEP_ROW_MAX];
            sweep_point_key(&g, i, key, sizeof key);
            if (sweep_point_of_row(&base, &g, key) != i) abort();
            plan_request p;
            sweep_point_request(&base, &g, i, &p);
        }
    }
    free(spec);
    return 0;
}
