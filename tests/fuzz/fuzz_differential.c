/*
 * tier: full (its corpus replay runs the fake GPU and the CPU executor, 12 s: make check)
 * Differential fuzz target: a plan that the validator accepts (plan_check, plan_check_model) must
 * simulate, and run on the fake-GPU executor (every stage in one process, the CPU layer on host
 * "streams") without a crash and with a gradient norm; where it has one stage and one replica it
 * also runs on the CPU executor (one MPI rank), and both norms must agree to 1e-9. Plans of other
 * models than gpt-tiny and t5-tiny, with data parallelism, or of more than a few million
 * activation elements are skipped (the harness's budget, not a rule).
 */
#include "fuzz.h"

#include <math.h>
#include <mpi.h>

#include "../../runtime/exec.h"
#include "../../scheduler/plan.h"
#include "../../scheduler/schedule.h" /* plan_check */
#include "../../sim/sim.h"

/* MPI's one-time allocations are not this code's (make fuzz: no ASAN_OPTIONS; tests/run.sh sets
 * the same for the replay) */
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "detect_leaks=0"; }

static int small_enough(const plan *p, const model_spec *m)
{
    double elements = 0;
    for (int i = 0; i < p->n_it; i++)
        for (int k = 0; k < p->it[i].n_mb; k++) {
            const plan_mb *x = &p->it[i].mb[k];
            elements += (double)x->mbs * ((double)x->enc_len + x->dec_len) * m->hidden;
            elements += (double)x->mbs * ((double)x->enc_len + x->dec_len) * m->vocab;
        }
    return elements * (m->enc_layers + m->dec_layers) < 2e7;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int mpi_up;
    if (!mpi_up) {
        MPI_Init(NULL, NULL);
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        mpi_up = 1;
    }
    char *text = fuzz_text(data, size);
    plan p;
    dp_err err;
    model_spec m;
    if (plan_parse(text, "fuzz-plan.json", &p, &err) != DP_OK) goto done;
    if (plan_check(&p, "fuzz-plan.json", &err) != DP_OK || p.h.dp != 1 ||
        (strcmp(p.h.model, "gpt-tiny") != 0 && strcmp(p.h.model, "t5-tiny") != 0) ||
        model_resolve(p.h.model, &m, &err) != DP_OK ||
        plan_check_model(&p, &m, "fuzz-plan.json", &err) != DP_OK || !small_enough(&p, &m))
        goto release;
    /* 1. the simulator runs every accepted iteration */
    cluster_spec hw;
    cluster_preset("p4d", &hw);
    sim_config cfg = {0};
    cfg.hw = &hw, cfg.pp = p.h.pp, cfg.chunks = p.h.chunks, cfg.dp = p.h.dp, cfg.mem_limit_mb = 1e9;
    sim s;
    sim_init(&s);
    for (int i = 0; i < p.n_it; i++) {
        sim_iter_result r;
        if (sim_iteration(&s, &cfg, &p.it[i], 0, NULL, &r, &err) != DP_OK) {
            fprintf(stderr, "differential: the validator accepted what the simulator refuses: %s\n", err.msg);
            abort();
        }
    }
    sim_release(&s);
    /* 2. the fake-GPU executor runs it (T5 needs an encoder and a decoder stage, no chunks) */
    int t5_ok = m.arch != ARCH_T5 || (p.h.chunks == 1 && p.h.pp >= 2);
    rt_opts o = {&p, &m, 30, 0, 0, -1, 0, 0, RT_FP64, 0, 1};
    rt_result g = {0}, c = {0};
    if (t5_ok) {
        if (rt_execute_gpu(&o, &g, &err) != DP_OK) {
            fprintf(stderr, "differential: the validator accepted what the GPU executor refuses: %s\n", err.msg);
            abort();
        }
        free(g.rec);
    }
    /* 3. one stage: the CPU executor on this one rank, same gradient norm */
    if (t5_ok && p.h.pp == 1) {
        if (rt_execute(&o, &c, &err) != DP_OK) {
            fprintf(stderr, "differential: the validator accepted what the CPU executor refuses: %s\n", err.msg);
            abort();
        }
        free(c.rec);
        if (!(fabs(c.grad_sq - g.grad_sq) <= 1e-9 * fmax(1e-300, fabs(c.grad_sq)))) {
            fprintf(stderr, "differential: gradient norms differ: cpu %.15g, gpu %.15g\n",
                    sqrt(c.grad_sq), sqrt(g.grad_sq));
            abort();
        }
    }
    if (getenv("DIFFERENTIAL_VERBOSE"))
        fprintf(stderr, "differential: %s pp %d: simulated, %s%s\n", p.h.model, p.h.pp,
                t5_ok ? "fake GPU" : "not run (T5 layout)", t5_ok && p.h.pp == 1 ? ", CPU rank, same norm" : "");
release:
    plan_release(&p);
done:
    free(text);
    return 0;
}
