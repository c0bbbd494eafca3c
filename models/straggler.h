/*
 * straggler.h — the expected slowest of N GPUs: what a synchronous training step waits for.
 *
 * Each GPU of a job runs at its own speed, its time on a step's work t x (1 + e), e drawn from a
 * normal of standard deviation cv (cluster_spec.gpu_jitter; hw.h cites the figure). A step in which
 * all N GPUs meet (the gradient reduction, tensor- and context-parallel collectives, pipeline
 * transfers) ends when the slowest has: on average t x (1 + cv x E[max of N standard normals]).
 *
 *   straggler_expected_max(n)    E[max of n standard normals]: 0 for n = 1, 1/sqrt(pi) for 2,
 *                                ~2.79 for 256, ~3.87 for 16,384 (GSL's adaptive integration of
 *                                x n phi(x) Phi(x)^(n-1) over the real line)
 *   straggler_share(cv, gpus)    cv x straggler_expected_max(gpus): the share of a stage's compute
 *                                time the step waits on top of it (0 for one GPU, or cv 0)
 *
 * The simulator adds the wait after each stage's last op, before the gradient collective, as an
 * op of its own (sim.h SIM_OP_STRAGGLER, "STRAGGLER" in timelines). Units: shares; gpus >= 1.
 */
#ifndef STRAGGLER_H
#define STRAGGLER_H

double straggler_expected_max(long long n);
double straggler_share(double cv, long long gpus);

#endif /* STRAGGLER_H */
