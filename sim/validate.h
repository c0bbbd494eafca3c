/*
 * validate.h — how far the simulation was from the measurement.
 *
 * A measured timeline (dprun --out, the timeline CSV contract) is compared with the simulation of
 * the same plan: per iteration the predicted makespan (simulated) against the measured one (the
 * latest end of any op of the iteration, times being from the iteration's start barrier), and per
 * op type (F, B, W, and the stages' gradient collective: VAL_OPS below) the mean predicted
 * duration against the mean measured one over the ops present in both.
 *
 *   error_pct    = 100 * (predicted - measured) / measured
 *   mape_pct     = mean |error_pct| over iterations;  max_abs_pct = max |error_pct|
 *
 * Like with like: the plan's transfer bytes count its act_dtype's elements (2 bytes); a runtime
 * that moves another type says so in the measured CSV's optional column wire_elem_bytes (dprun's
 * fp64 layers move 8), and the simulation is then run with the bytes the runtime moved
 * (sim_config.wire_scale = wire_elem_bytes / the plan's element size; the gradient all-reduce's
 * time scaled alike, and ZeRO-2/3's collectives that the plan's forward and backward times hold,
 * re-priced by scheduler/stage_cost.h stage_zero_rescaled: the runtime's parameters are of its
 * element type too). All rows must agree. The simulation is of what the runtime runs: the
 * gradient all-reduce after each rank's last op (dprun's executors do not overlap it), and no
 * optimizer step when the timeline records none (dprun steps no optimizer).
 *
 * Noise: dprun runs an iteration several times in a row (--repeats R; by default the first
 * iteration once more) and marks the rows of its r-th run repeat = r. An iteration's measured
 * makespan is then the median of its runs' (and an op's duration the median of its runs'), and
 * the spread of the runs, (slowest - fastest) / median, is the error the machine alone makes:
 * noise_pct, the median spread over the iterations run more than once, reported beside the
 * simulation's error as its band.
 */
#ifndef VALIDATE_H
#define VALIDATE_H

#include "sim.h"

#define VAL_REPEATS_MAX 16 /* runs of one iteration a timeline may hold (dprun --repeats) */
/* The ops compared one by one: F, B, W (plan_op's numbers), then VAL_ALLREDUCE, a stage's gradient
 * collective after its last op (the timeline's ALLREDUCE rows: the all-reduce, or under ZeRO-2
 * the parameters' all-gather), where both the simulation and the measurement have it; its
 * measured time is the shortest of the stage's replicas' (the one that came last waited least for
 * the others: its time is the collective's own). */
enum { VAL_ALLREDUCE = 3, VAL_OPS = 4 };
const char *val_op_name(int k); /* "F", "B", "W", "ALLREDUCE" */

typedef struct val_op_stats {
    int count;
    double pred_ms, meas_ms; /* means over the matched ops */
    double mape_pct;         /* mean |error| of the individual ops */
} val_op_stats;

typedef struct val_result {
    int iterations;
    int *id;
    double *predicted_ms, *measured_ms;
    double mape_pct, max_abs_pct;
    val_op_stats per_op[VAL_OPS]; /* F, B, W, and the stages' gradient collective */
    int wire_elem_bytes;    /* what the runtime moved per element (0: as the plan says) */
    double noise_pct;       /* the machine's noise band: the median over the iterations run more
                             * than once of (slowest - fastest run) / median run, %; -1 when no
                             * iteration was */
    int noise_iterations;   /* iterations run more than once */
    int runs_max;           /* the most runs of one iteration */
    double wire_scale;      /* the simulation's bytes per plan byte */
    int zero_repriced;      /* ZeRO's per-micro-batch collectives inside the plan's forward and
                             * backward times were re-priced at wire_scale (a runtime that moved
                             * other bytes: stage_zero_rescaled) */
} val_result;

void val_result_release(val_result *v);

/* Simulates pl (with cfg) and compares with the measured timeline CSV at measured_path. A
 * measured row must name an op of the plan (iteration, stage, replica, op, micro-batch, chunk),
 * else DP_ERR_INVALID names the line; where the CSV has dprun's plan_hash column and plan_hash
 * is not 0, every row's must be plan_hash (dp_hash_text of the plan file), else the timeline
 * belongs to another plan and is refused. */
dp_status validate_run(const plan *pl, uint64_t plan_hash, const sim_config *cfg,
                       const char *measured_path, val_result *v, dp_err *err);

char *validate_json(const val_result *v);

#endif /* VALIDATE_H */
