/*
 * dprun — the validation runtime: runs dpsim's execution plans on real MPI ranks, or measures a
 * cost profile.
 *
 *   mpirun -np R dprun --plan plan.json --backend cpu --out measured.csv [--timeout S]
 *   mpirun -np R dprun --plan plan.json --backend cuda --out measured.csv   (one rank per GPU)
 *   dprun --plan plan.json --backend cuda --out measured.csv                (every stage, one GPU)
 *   dprun profile --backend cpu|cuda --model gpt-tiny [--mbs 1,2,4] [--seqlen 32,64,128] -o prof.csv
 *   mpirun -np T dprun profile --tp T [--no-sp] ...             (a layer as a tp T plan runs it)
 *   mpirun -np C dprun profile --cp C ...                       (... as a cp C plan runs it)
 *
 * Exit status: 0 success, 1 a plan or set-up problem (every rank reports it alike), 2 usage,
 * 3 a run-time fault (a timeout, a truncated message): the failing rank prints why and MPI_Abort
 * ends every rank. A rank killed from outside makes mpirun end the others.
 */
#include <cblas.h>
#include <malloc.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_util.h"
#include "../common/options.h"
#include "../common/outfile.h"
#include "../models/hw.h"
#include "../scheduler/plan.h"
#include "../scheduler/schedule.h"
#include "check_gpu.h"
#include "exec.h"
#include "layer.h"
#include "rt_mpi.h"
#include "profile.h"

static const char RUN_USAGE[] =
    "dprun [run] --plan FILE --backend cpu|cuda [--dtype bf16|fp64] --out FILE [--timeout S]";
static const char PROFILE_USAGE[] =
    "dprun profile --backend cpu|cuda [--dtype bf16|fp64] --model M [--mbs LIST] [--seqlen LIST]\n"
    "                     [--tp T [--no-sp]] [--cp C] [--cluster-out FILE] -o FILE";
static const char CHECK_USAGE[] = "dprun check-gpu [MODEL] [--hw GPU] [--no-speed]";
static const char ABOUT[] =
    "Runs an execution plan from 'dpsim plan -o' on real ranks (one MPI rank per pipeline\n"
    "stage, data-parallel replica, tensor-parallel and context-parallel rank: mpirun -np\n"
    "tp x cp x pp x dp, tp ranks fastest, then cp) and writes the measured timeline CSV, for\n"
    "'dpsim validate', and the gradient norm at the end (the same plan gives the same norm on\n"
    "every backend, to rounding). The plan's recompute runs as planned: selective reruns each\n"
    "layer's attention core in the backward, full keeps only each layer's input and reruns its\n"
    "forward (dprun says how many). 'profile' measures a per-layer cost grid in the profile CSV\n"
    "format; 'check-gpu' checks the GPU layer.";

/* The options of each subcommand (one table each, common/options.h): where they go. */
typedef struct int_list {
    int v[32], n;
    const char *name; /* its option, for messages */
} int_list;

typedef struct run_args {
    const char *plan, *out, *backend, *dtype;
    double timeout, stall_s;
    int64_t iterations, warmup, stall_rank, repeats;
    int no_noise, no_prepare, no_plan_check;
} run_args;

typedef struct profile_args {
    const char *model, *out, *backend, *dtype, *cluster_out, *hw;
    int64_t tp, cp, repeats;
    int no_sp;
    int_list mbs, seq, dec;
    unsigned modes;
} profile_args;

typedef struct check_args {
    const char *hw;
    int no_speed;
} check_args;

static int parse_list(const char *text, int *out);
static int parse_modes(const char *text, unsigned *modes);

#define PROFILE_MAX_TOKENS (1 << 24) /* a profile point's mbs x seqlen */

static int set_list(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    int_list *l = ctx;
    if ((l->n = parse_list(arg, l->v)) > 0) return 0;
    cli_usage_error(cmd, usage, "bad %s list \"%s\": up to 32 whole numbers in [1, 1048576], "
                    "comma-separated", l->name, arg);
    return -1;
}

static int set_modes(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    if (parse_modes(arg, ctx) == 0) return 0;
    cli_usage_error(cmd, usage, "bad --recompute list (none, selective, full): %s", arg);
    return -1;
}

static void run_table(cli_opts *t, run_args *a)
{
    *a = (run_args){.backend = "cpu", .timeout = 60, .warmup = 1, .stall_rank = -1, .repeats = 1};
    cli_opts_init(t, "run", RUN_USAGE, ABOUT);
    cli_opt_string(t, "plan", 'p', &a->plan, "FILE", NULL, "execution plan JSON (required)");
    cli_opt_string(t, "backend", 'b', &a->backend, "B", "cpu",
                   "cpu (MPI ranks) | cuda (under mpirun one rank per GPU,\n"
                   "NCCL between them; without mpirun every stage on one GPU)");
    cli_opt_string(t, "dtype", 'd', &a->dtype, "T", "bf16 on cuda, fp64 on cpu",
                   "what the layers compute in and the transfers carry: bf16\n"
                   "(training precision: cuBLASLt, cuDNN attention, fp32 master\n"
                   "weights) or fp64 (the exact check); the cpu backend is fp64");
    cli_opt_string(t, "out", 'o', &a->out, "FILE", NULL,
                   "measured timeline CSV, written by rank 0 (required)");
    cli_opt_string(t, "output", 0, &a->out, "FILE", NULL, "the same as --out");
    cli_opt_double(t, "timeout", 't', &a->timeout, "S", 1e-3, 1e7, "60",
                   "a wait longer than S seconds aborts the job");
    cli_opt_int64(t, "iterations", 'n', &a->iterations, "K", 0, 1 << 30, "0",
                  "run the first K iterations, 0 = all");
    cli_opt_int64(t, "warmup", 'w', &a->warmup, "N", 0, 100, "1",
                  "unrecorded runs of the first iteration");
    cli_opt_flag(t, "no-prepare", 0, &a->no_prepare,
                 "cuda: skip the unrecorded run of every iteration before its\n"
                 "measured one (it keeps cuBLASLt's and cuDNN's per-shape plan\n"
                 "building, slow first calls, out of the timeline)");
    cli_opt_int64(t, "repeats", 'r', &a->repeats, "R", 1, 16, "1",
                  "measured runs of every iteration in a row, rows marked repeat\n"
                  "0 .. R-1: dpsim validate compares each iteration's median and\n"
                  "reports the runs' spread as the machine's noise band");
    cli_opt_flag(t, "no-noise", 0, &a->no_noise,
                 "skip the noise repeat: with --repeats 1 the first iteration\n"
                 "is run once more, recorded with repeat 1");
    cli_opt_int64(t, "stall-rank", 0, &a->stall_rank, "R", 0, 1 << 20, NULL,
                  "fault injection: rank R sleeps --stall-s seconds first");
    cli_opt_double(t, "stall-s", 0, &a->stall_s, "S", 0, 1e6, "0", "fault injection: the sleep");
    cli_opt_flag(t, "no-plan-check", 0, &a->no_plan_check,
                 "fault injection: skip the same-plan-on-every-rank hash check");
}

static void profile_table(cli_opts *t, profile_args *a)
{
    *a = (profile_args){.model = "gpt-tiny", .backend = "cpu", .hw = "cpu", .tp = 1, .cp = 1,
                        .repeats = 5, .mbs = {{1, 2, 4, 8}, 4, "--mbs"},
                        .seq = {{32, 64, 128, 256}, 4, "--seqlen"}, .dec = {{0}, 0, "--dec-seqlen"},
                        .modes = 1u << RECOMPUTE_NONE};
    cli_opts_init(t, "profile", PROFILE_USAGE,
                  "Measures a per-layer cost grid (forward, backward per micro-batch size and\n"
                  "length) in the profile CSV format that dpsim --profile reads.");
    cli_opt_string(t, "backend", 'b', &a->backend, "B", "cpu", "cpu | cuda (CUDA-event means)");
    cli_opt_string(t, "dtype", 'd', &a->dtype, "T", "bf16 on cuda",
                   "bf16 | fp64 (cuda; the cpu layer is fp64)");
    cli_opt_string(t, "model", 'm', &a->model, "M", "gpt-tiny",
                   "model preset or JSON spec (GPT or T5)");
    cli_opt_call(t, "mbs", 0, set_list, &a->mbs, "LIST", "1,2,4,8", "micro-batch sizes");
    cli_opt_call(t, "seqlen", 0, set_list, &a->seq, "LIST", "32,64,128,256",
                 "sequence lengths (T5: encoder lengths)");
    cli_opt_call(t, "dec-seqlen", 0, set_list, &a->dec, "LIST", "the --seqlen list",
                 "T5: decoder lengths");
    cli_opt_call(t, "recompute", 0, set_modes, &a->modes, "LIST", "none",
                 "recompute modes measured (none, selective, full): each\n"
                 "backward as dprun runs it under the mode");
    cli_opt_int64(t, "repeats", 'r', &a->repeats, "N", 1, 1000, "5",
                  "timed repeats per point, their median (cpu: passes over the\n"
                  "whole grid)");
    cli_opt_int64(t, "tp", 0, &a->tp, "T", 1, 1024, "1",
                  "time the layer as a tp T plan runs it: under mpirun -np T (or\n"
                  "a multiple), each rank its share, the group's collectives\n"
                  "in the times; rows say tp T (cpu backend)");
    cli_opt_flag(t, "no-sp", 0, &a->no_sp, "with --tp: without sequence parallelism (all-reduces)");
    cli_opt_int64(t, "cp", 0, &a->cp, "C", 1, 1024, "1",
                  "time the layer as a cp C plan runs it (ring attention): under\n"
                  "mpirun -np tp x C, each rank its share of each micro-batch's\n"
                  "tokens, the key/value gathers in the times; rows carry a cp\n"
                  "column (cpu backend, GPT-kind models; 2C divides each\n"
                  "--seqlen)");
    cli_opt_string(t, "cluster-out", 0, &a->cluster_out, "FILE", NULL,
                   "also measure the links between the ranks (each collective's\n"
                   "bus bandwidth on 8 MB, nccl-tests' way, and a step's latency)\n"
                   "and write them as a cluster JSON for dpsim's --hw: the --hw\n"
                   "preset with its in-node link replaced (under mpirun -np 2+)");
    cli_opt_string(t, "hw", 0, &a->hw, "H", "cpu", "the cluster --cluster-out starts from");
    cli_opt_string(t, "out", 'o', &a->out, "FILE", NULL, "profile CSV (required)");
    cli_opt_string(t, "output", 0, &a->out, "FILE", NULL, "the same as --out");
}

static void check_table(cli_opts *t, check_args *a)
{
    *a = (check_args){0};
    cli_opts_init(t, "check-gpu", CHECK_USAGE,
                  "The GPU layer of MODEL [gpt-tiny] in fp64 against the CPU layer (to 1e-9), in\n"
                  "bf16 against fp64 (stated tolerances), and a GPT-6.7B-width layer's TFLOP/s and\n"
                  "MFU beside cuBLASLt's GEMM rate (needs a build with CUDA and a GPU; make\n"
                  "check-gpu).");
    cli_opt_string(t, "hw", 0, &a->hw, "GPU", "found from the device's name",
                   "the GPU preset for MFU");
    cli_opt_flag(t, "no-speed", 0, &a->no_speed, "numerics only (no GPT-6.7B-width timing)");
}

/* Parses argv with table t (positional arguments into pos, at most max_pos) and frees it: -1 to
 * go on, else the command's exit status (0 after --help, EXIT_USAGE after a usage error). */
static int parse_with(cli_opts *t, int argc, char **argv, const char **pos, int max_pos)
{
    int n_pos = 0, r = cli_opts_parse(t, argc, argv, pos, max_pos, pos ? &n_pos : NULL);
    cli_opts_release(t);
    return r == 0 ? -1 : r == 1 ? 0 : r;
}

/* dprun --help: what dprun does, then each subcommand's options. */
static void help(void)
{
    printf("usage: %s\n       %s\n       %s\n\n%s\n", RUN_USAGE, PROFILE_USAGE, CHECK_USAGE, ABOUT);
    cli_opts t;
    run_args r;
    profile_args pa;
    check_args c;
    run_table(&t, &r);
    t.usage = NULL, t.about = NULL;
    printf("\nrun:\n");
    cli_opts_help(&t, stdout);
    cli_opts_release(&t);
    profile_table(&t, &pa);
    t.usage = NULL, t.about = NULL;
    printf("\nprofile:\n");
    cli_opts_help(&t, stdout);
    cli_opts_release(&t);
    check_table(&t, &c);
    t.usage = NULL, t.about = NULL;
    printf("\ncheck-gpu [MODEL]:\n");
    cli_opts_help(&t, stdout);
    cli_opts_release(&t);
}

/* Parses "1,2,4" into at most 32 positive ints. */
static int parse_list(const char *text, int *out)
{
    int n = 0;
    const char *p = text;
    while (*p && n < 32) {
        int64_t v;
        char buf[32];
        size_t len = strcspn(p, ",");
        if (len == 0 || len >= sizeof buf) return -1;
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (dp_parse_i64(buf, 1, 1 << 20, &v) != 0) return -1;
        out[n++] = (int)v;
        p += len + (p[len] == ',');
    }
    return n;
}

/* Parses "none,full" into bits 1 << recompute_mode. 0, or -1 on an unknown or empty name. */
static int parse_modes(const char *text, unsigned *modes)
{
    *modes = 0;
    for (const char *p = text;; p++) {
        char buf[16];
        size_t len = strcspn(p, ",");
        recompute_mode rc;
        if (len == 0 || len >= sizeof buf) return -1;
        memcpy(buf, p, len);
        buf[len] = '\0';
        if (recompute_parse(buf, &rc) != 0) return -1;
        *modes |= 1u << rc;
        p += len;
        if (!*p) return 0;
    }
}

/* The element type of a run or profile: --dtype's (NULL: bf16 on the GPU, fp64 on the CPU).
 * 0, or -1 with the reason in msg. */
static int resolve_dtype(const char *arg, int on_gpu, rt_dtype *dt, char *msg, size_t cap)
{
    if (!arg) return *dt = on_gpu ? RT_BF16 : RT_FP64, 0;
    if (rt_dtype_parse(arg, dt) != 0) {
        snprintf(msg, cap, "unknown --dtype \"%s\" (bf16 or fp64)", arg);
        return -1;
    }
    if (!on_gpu && *dt != RT_FP64) {
        snprintf(msg, cap, "--dtype %s needs --backend cuda: the cpu backend's layers compute in "
                 "fp64", arg);
        return -1;
    }
    return 0;
}

static void barrier(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
}

static void mpi_check(int rc, const char *call);

/* A failed collective of dprun profile's tensor-parallel group: said, and the job ends. */
static void profile_die(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "dprun profile: error: %s\n", msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

static int profile_main(int argc, char **argv)
{
    profile_args a;
    cli_opts t;
    profile_table(&t, &a);
    int r = parse_with(&t, argc, argv, NULL, 0);
    if (r >= 0) return r;
    if (!a.out) return cli_usage_error("profile", PROFILE_USAGE, "profile needs --out");
    const char *model = a.model, *out = a.out, *backend = a.backend, *dtype = a.dtype;
    const char *cluster_out = a.cluster_out, *hw = a.hw;
    int64_t tp = a.tp, cp = a.cp, repeats = a.repeats;
    int sp = !a.no_sp;
    int *mbs = a.mbs.v, *seq = a.seq.v, *dec = a.dec.v, n_mbs = a.mbs.n, n_seq = a.seq.n, n_dec = a.dec.n;
    unsigned modes = a.modes;
    { /* no output over an input or the other output; both folders writable, before any work */
        dp_err derr = {0};
        out_role in[] = {{"--model", model}, {"--hw", cluster_out ? hw : NULL}},
                 outs[] = {{"-o", out}, {"--cluster-out", cluster_out}};
        if (out_distinct(in, 2, outs, 2, &derr) != DP_OK)
            return cli_usage_error("profile", PROFILE_USAGE, "%s", derr.msg);
        for (int i = 0; i < 2; i++)
            if (outs[i].path && out_check_writable(outs[i].path, &derr) != DP_OK) {
                fprintf(stderr, "dprun profile: error: %s %s (refused before anything ran)\n",
                        outs[i].option, derr.msg);
                return 1;
            }
    }
    cluster_spec links;
    dp_err herr = {0};
    if (cluster_out && cluster_resolve(hw, &links, &herr) != DP_OK) {
        fprintf(stderr, "dprun profile: error: --hw: %s\n", herr.msg);
        return 1;
    }
    int on_gpu = strcmp(backend, "cuda") == 0;
    if (!on_gpu && strcmp(backend, "cpu") != 0) {
        fprintf(stderr, "dprun profile: unknown backend \"%s\" (cpu or cuda)\n", backend);
        return 1;
    }
    rt_dtype dt;
    char why[200];
    if (resolve_dtype(dtype, on_gpu, &dt, why, sizeof why) != 0)
        return cli_usage_error("profile", PROFILE_USAGE, "%s", why);
    dp_err err = {0};
    model_spec m;
    /* a profile holds dense layers (cost_profile.c refuses a MoE one): a MoE model's would be
     * measured and then unusable */
    if (model_resolve(model, &m, &err) != DP_OK || model_check_dense(&m, "dprun profile", &err) != DP_OK) {
        fprintf(stderr, "dprun profile: error: %s\n", err.msg);
        return 1;
    }
    char where[64];
    snprintf(where, sizeof where, "dprun profile --tp %d", (int)tp);
    if (rt_check_tp(&m, (int)tp, where, &err) != DP_OK) {
        fprintf(stderr, "dprun profile: error: %s\n", err.msg);
        return 1;
    }
    if (tp > 1 && on_gpu) { /* a rank's share timed alone would leave out the group's collectives */
        fprintf(stderr, "dprun profile: error: --tp %d: the cuda backend times whole layers (tp 1); "
                "the cpu backend profiles tensor parallelism (--backend cpu)\n", (int)tp);
        return 1;
    }
    if (cp > 1 && (on_gpu || m.arch != ARCH_GPT)) {
        fprintf(stderr, "dprun profile: error: --cp %d: context parallelism runs on the cpu "
                "backend, for decoder-only models (%s%s)\n", (int)cp, on_gpu ? "not cuda" : m.name,
                on_gpu ? "" : " is an encoder-decoder");
        return 1;
    }
    for (int i = 0; i < n_mbs; i++) /* a point's tokens, and its rows of vocabulary, counted in int */
        for (int j = 0; j < n_seq; j++)
            if ((long long)mbs[i] * seq[j] > PROFILE_MAX_TOKENS) {
                fprintf(stderr, "dprun profile: error: mbs %d x seqlen %d = %lld tokens: a profile "
                        "point times at most %d\n", mbs[i], seq[j], (long long)mbs[i] * seq[j],
                        PROFILE_MAX_TOKENS);
                return 1;
            }
    for (int j = 0; cp > 1 && j < n_seq; j++)
        if (seq[j] % (2 * cp)) {
            fprintf(stderr, "dprun profile: error: seqlen %d: context parallelism cuts each "
                    "sequence into 2 x cp = %d chunks (a --seqlen that %d divides)\n", seq[j],
                    (int)(2 * cp), (int)(2 * cp));
            return 1;
        }
    for (int i = 0; sp && tp > 1 && i < n_mbs; i++)
        for (int j = 0; j < n_seq; j++)
            if ((long long)mbs[i] * seq[j] / cp % tp) {
                fprintf(stderr, "dprun profile: error: mbs %d x seqlen %d tokens%s cannot be split "
                        "over tp %d by sequence parallelism (--no-sp, or lengths tp divides)\n",
                        mbs[i], seq[j], cp > 1 ? ", 1/cp of them on a rank," : "", (int)tp);
                return 1;
            }
    openblas_set_num_threads(1);
    int mpi = getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE"), rank = 0, size = 1;
    if (mpi) {
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        MPI_Comm_size(MPI_COMM_WORLD, &size);
    }
    int width = (int)(tp * cp);
    if (size % width != 0) {
        if (rank == 0)
            fprintf(stderr, "dprun profile: error: --tp %d --cp %d needs a multiple of %d ranks "
                    "(mpirun -np %d), but %s %d\n", (int)tp, (int)cp, width, width,
                    mpi ? "mpirun started" : "it runs without mpirun, on", size);
        if (mpi) MPI_Finalize();
        return 1;
    }
    /* the ranks as a plan of one stage places them (models/mesh.h: tp fastest, then cp), as many
     * copies of the tp x cp group as mpirun started */
    mesh layout = mesh_of((int)tp, (int)cp, 1, size / width);
    mesh_coord here = mesh_place(&layout, rank);
    MPI_Comm tp_comm = MPI_COMM_NULL, cp_comm = MPI_COMM_NULL;
    rt_mpi_tp group, cp_group;
    if (tp > 1) {
        mesh_group g = mesh_group_of(&layout, here, MESH_TP);
        mpi_check(MPI_Comm_split(MPI_COMM_WORLD, g.colour, g.key, &tp_comm), "MPI_Comm_split");
        rt_mpi_tp_init(&group, tp_comm, sp, NULL, profile_die, NULL);
    }
    if (cp > 1) {
        mesh_group g = mesh_group_of(&layout, here, MESH_CP);
        mpi_check(MPI_Comm_split(MPI_COMM_WORLD, g.colour, g.key, &cp_comm), "MPI_Comm_split");
        rt_mpi_tp_init(&cp_group, cp_comm, 0, NULL, profile_die, NULL);
    }
    rt_profile_opts o = {&m, mbs, n_mbs, seq, n_seq, n_dec ? dec : NULL, n_dec, (int)repeats, 1,
                         rank == 0 ? out : "/dev/null", rank == 0, mpi ? barrier : NULL, on_gpu, dt,
                         modes, tp > 1 ? &group.tp : NULL, cp > 1 ? &cp_group.tp : NULL};
    int rc = 0;
    if (cluster_out && size < 2) {
        fprintf(stderr, "dprun profile: error: --cluster-out measures the links between ranks: run "
                "it under mpirun -np 2 or more (it runs on %d)\n", size);
        rc = 1;
    } else if (rt_profile(&o, &err) != DP_OK) {
        fprintf(stderr, "dprun profile: rank %d: error: %s\n", rank, err.msg);
        rc = 1;
    } else if (rank == 0) {
        fprintf(stderr, "dprun: wrote %s\n", out);
    }
    if (rc == 0 && cluster_out) { /* the links between the ranks, as dpsim's --hw reads them */
        snprintf(links.name, sizeof links.name, "%s-measured", hw);
        dp_status st = rt_mpi_measure_links(MPI_COMM_WORLD, (size_t)8 << 20, repeats > 5 ? (int)repeats : 5,
                                            &links, &err);
        if (st == DP_OK && rank == 0) st = cluster_write_json(&links, cluster_out, &err);
        if (st != DP_OK) {
            fprintf(stderr, "dprun profile: rank %d: error: %s\n", rank, err.msg);
            rc = 1;
        } else if (rank == 0) {
            fprintf(stderr, "dprun: wrote %s (the links between %d ranks: all-reduce %.2f GB/s bus "
                    "bandwidth, send/receive %.2f GB/s, %.1f us a step)\n", cluster_out, size,
                    links.intra_gbit / 8 * links.coll_eff[SCOPE_INTRA][COLL_ALL_REDUCE],
                    links.intra_gbit / 8 * links.coll_eff[SCOPE_INTRA][COLL_SEND_RECV],
                    links.intra_latency_us);
        }
    }
    if (tp_comm != MPI_COMM_NULL) MPI_Comm_free(&tp_comm);
    if (cp_comm != MPI_COMM_NULL) MPI_Comm_free(&cp_comm);
    if (mpi) MPI_Finalize();
    return rc;
}

/* dprun check-gpu [MODEL] [--hw GPU] [--no-speed] */
static int check_gpu_main(int argc, char **argv)
{
    check_args a;
    cli_opts t;
    check_table(&t, &a);
    const char *pos[1] = {"gpt-tiny"};
    int r = parse_with(&t, argc, argv, pos, 1);
    if (r >= 0) return r;
    const char *hw = a.hw, *model = pos[0];
    int speed = !a.no_speed;
    model_spec m;
    dp_err err = {0};
    if (model_resolve(model, &m, &err) != DP_OK || model_check_dense(&m, "dprun", &err) != DP_OK) {
        fprintf(stderr, "dprun check-gpu: error: %s\n", err.msg);
        return 1;
    }
    return rt_check_gpu(&m, hw, speed);
}

/* A failed collective (MPI_ERRORS_RETURN is set): the rank says which and why, the job ends. */
static void mpi_check(int rc, const char *call)
{
    if (rc == MPI_SUCCESS) return;
    char msg[MPI_MAX_ERROR_STRING + 300];
    int rank = -1;
    rt_mpi_describe(rc, call, msg, sizeof msg);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    fprintf(stderr, "dprun: rank %d: %s\n", rank, msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 3);
}

/* Every rank has the same problem: rank 0 says it, all exit 1. */
static int fail_all(int rank, const char *msg)
{
    if (rank == 0) fprintf(stderr, "dprun: error: %s\n", msg);
    MPI_Finalize();
    return 1;
}

static int run_main(int argc, char **argv)
{
    run_args a;
    cli_opts t;
    run_table(&t, &a);
    int parsed = parse_with(&t, argc, argv, NULL, 0);
    if (parsed >= 0) return parsed;
    if (!a.plan || !a.out) return cli_usage_error("run", RUN_USAGE, "run needs --plan and --out");
    const char *plan_path = a.plan, *out = a.out, *backend = a.backend, *dtype = a.dtype;
    double timeout = a.timeout, stall_s = a.stall_s;
    int64_t iterations = a.iterations, warmup = a.warmup, stall_rank = a.stall_rank,
            repeats = a.repeats;
    int repeat_first = !a.no_noise, prepare = !a.no_prepare, check_plan = !a.no_plan_check;
    rt_dtype dt = RT_FP64;
    {
        char why[200];
        int gpu = strcmp(backend, "cuda") == 0;
        if ((gpu || strcmp(backend, "cpu") == 0) && resolve_dtype(dtype, gpu, &dt, why, sizeof why) != 0)
            return cli_usage_error("run", RUN_USAGE, "%s", why);
    }
    {
        dp_err derr = {0};
        out_role in[] = {{"--plan", plan_path}}, outs[] = {{"--out", out}};
        if (out_distinct(in, 1, outs, 1, &derr) != DP_OK)
            return cli_usage_error("run", RUN_USAGE, "%s", derr.msg);
    }
    MPI_Init(&argc, &argv);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char msg[DP_ERR_MSG_MAX + 200];
    int on_gpu = strcmp(backend, "cuda") == 0;
    if (!on_gpu && strcmp(backend, "cpu") != 0) {
        snprintf(msg, sizeof msg, "unknown backend \"%s\" (cpu or cuda)", backend);
        return fail_all(rank, msg);
    }
    openblas_set_num_threads(1);
    /* the same plan on every rank, checked by hash */
    dp_err err = {0};
    char *text = NULL;
    int ok = json_slurp(plan_path, &text, &err) == DP_OK;
    uint64_t h = ok ? dp_hash_text(text) : 0, *all = calloc((size_t)size, sizeof *all);
    mpi_check(MPI_Allgather(&h, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, MPI_COMM_WORLD), "MPI_Allgather");
    int bad_rank = -1;
    for (int r = 0; r < size; r++)
        if (all[r] != all[0]) bad_rank = r;
    free(all);
    if (!ok) {
        free(text);
        if (rank == 0 || bad_rank >= 0) fprintf(stderr, "dprun: rank %d: error: %s\n", rank, err.msg);
        MPI_Finalize();
        return 1;
    }
    if (bad_rank >= 0 && check_plan) {
        free(text);
        snprintf(msg, sizeof msg, "the plan file %s differs between ranks (rank %d's hash differs from "
                 "rank 0's): every rank must run the same plan", plan_path, bad_rank);
        return fail_all(rank, msg);
    }
    plan pl;
    dp_status st = plan_parse(text, plan_path, &pl, &err);
    free(text);
    if (st != DP_OK) return fail_all(rank, err.msg);
    st = plan_check(&pl, plan_path, &err);
    model_spec m;
    if (st == DP_OK) st = plan_model(&pl, &m, &err);
    if (st == DP_OK) st = plan_check_model(&pl, &m, plan_path, &err);
    if (st == DP_OK) st = rt_plan_check_lens(&pl, plan_path, &err);
    /* a layout the executors do not build, or another rank count, is refused, never run as
     * another layout */
    if (st == DP_OK) st = rt_plan_check_layout(&pl, &m, size, on_gpu, plan_path, &err);
    if (st != DP_OK) {
        plan_release(&pl);
        snprintf(msg, sizeof msg, "%s (refused before anything ran)", err.msg);
        return fail_all(rank, msg);
    }
    /* the timeline's file checked before the run: a folder that is not there or cannot be
     * written is refused before anything ran, not after the whole run (it is written at the end:
     * a run killed on the way leaves nothing) */
    int writable = rank == 0 ? out_check_writable(out, &err) == DP_OK : 1;
    mpi_check(MPI_Bcast(&writable, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
    if (!writable) {
        plan_release(&pl);
        snprintf(msg, sizeof msg, "%s (refused before anything ran)", err.msg);
        return fail_all(rank, msg);
    }
    rt_opts o = {&pl, &m, timeout, (int)warmup, (int)iterations, (int)stall_rank, stall_s,
                 repeat_first, dt, prepare, (int)repeats};
    rt_result res;
    st = on_gpu ? rt_execute_gpu(&o, &res, &err) : rt_execute(&o, &res, &err);
    if (st != DP_OK) {
        plan_release(&pl);
        return fail_all(rank, err.msg);
    }
    rt_record *rec = res.rec;
    size_t n_rec = res.n_rec;
    /* the gradient norm: replicas and cp ranks hold the same (all-reduced) gradients, so replica
     * 0's stages on cp rank 0 sum it */
    rt_place at = rt_place_of(&pl.h, rank);
    double grad_sq = 0, mine_sq = at.replica == 0 && at.cp_rank == 0 ? res.grad_sq : 0;
    mpi_check(MPI_Reduce(&mine_sq, &grad_sq, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce");
    /* what the measured runs did beside the plan's instructions, every rank's: slow first calls
     * (GEMM configurations, attention graphs, uploads) and the backwards' reruns */
    long mine_n[5] = {res.timed_gemm_plans, res.timed_attn_graphs, res.timed_uploads,
                      res.rerun_layers, res.rerun_attention}, all_n[5] = {0};
    mpi_check(MPI_Reduce(mine_n, all_n, 5, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD), "MPI_Reduce");
    /* gather every rank's records on rank 0 */
    int mine = (int)(n_rec * sizeof *rec), *counts = NULL, *displs = NULL, total = 0;
    if (rank == 0) counts = calloc((size_t)size, sizeof *counts), displs = calloc((size_t)size, sizeof *displs);
    mpi_check(MPI_Gather(&mine, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Gather");
    char *buf = NULL;
    if (rank == 0) {
        for (int r = 0; r < size; r++) displs[r] = total, total += counts[r];
        buf = malloc((size_t)total + 1);
    }
    mpi_check(MPI_Gatherv(rec, mine, MPI_BYTE, buf, counts, displs, MPI_BYTE, 0, MPI_COMM_WORLD),
              "MPI_Gatherv");
    int rc = 0;
    if (rank == 0) {
        dp_err werr = {0};
        out_file of;
        if (out_open(&of, out, &werr) == DP_OK) { /* (checked before the run) */
            /* wire_elem_bytes: what a transfer moved per element (the plan's bytes count
             * act_dtype elements), so that dpsim validate simulates the bytes really moved;
             * plan_hash: the plan file's, so that dpsim validate refuses another plan's timeline */
            fprintf(of.fp, "iteration,stage,op,mb,start_us,end_us,replica,chunk,wire_elem_bytes,"
                    "plan_hash,repeat,tp,cp\n");
            const rt_record *r = (const rt_record *)buf;
            for (size_t i = 0; i < (size_t)total / sizeof *r; i++)
                fprintf(of.fp, "%d,%d,%s,%d,%.3f,%.3f,%d,%d,%d,%016llx,%d,%d,%d\n", r[i].iteration,
                        r[i].stage, r[i].op < 0 ? "ALLREDUCE" : plan_op_name((plan_op)r[i].op),
                        r[i].mb, r[i].start_us, r[i].end_us, r[i].replica, r[i].chunk,
                        (int)rt_dtype_act_bytes(dt), (unsigned long long)h, r[i].repeat,
                        rt_plan_tp(&pl.h), rt_plan_cp(&pl.h));
            if (out_commit(&of, &werr) != DP_OK) rc = 1;
        } else {
            rc = 1;
        }
        if (rc) fprintf(stderr, "dprun: error: %s\n", werr.msg);
        int n_run = iterations > 0 && iterations < pl.n_it ? (int)iterations : pl.n_it;
        if (on_gpu && size == 1)
            fprintf(stderr, "dprun: %d stages on one GPU ran %d iterations in %s", pl.h.pp,
                    n_run, rt_dtype_name(dt));
        else
            fprintf(stderr, "dprun: %d ranks%s ran %d iterations in %s", size,
                    on_gpu ? " (one GPU each)" : "", n_run, rt_dtype_name(dt));
        fprintf(stderr, "; gradient norm %.12e; %s %s\n", sqrt(grad_sq),
                rc ? "could not write" : "wrote", out);
        if (!isfinite(grad_sq)) { /* the timeline stands; the numerics do not */
            fprintf(stderr, "dprun: error: the gradient norm is not finite: the layers' "
                    "arithmetic went wrong on this backend (the timeline was written)\n");
            rc = 1;
        }
        if (all_n[3] + all_n[4] > 0) /* the plan's recompute, done */
            fprintf(stderr, "dprun: recompute (the plan's %s): the backwards reran %ld layer "
                    "forwards and %ld attention cores\n", recompute_policy_name(pl.h.recompute), all_n[3],
                    all_n[4]);
        if (all_n[0] + all_n[1] + all_n[2] > 0)
            fprintf(stderr, "dprun: warning: the measured runs built %ld GEMM configurations "
                    "and %ld attention graphs and uploaded %ld small arrays, slow first calls "
                    "that their times include (%s)\n", all_n[0], all_n[1], all_n[2],
                    prepare ? "the plan caches did not keep an iteration's shapes"
                            : "--no-prepare left them in");
    }
    free(buf), free(counts), free(displs), free(rec);
    plan_release(&pl);
    MPI_Finalize();
    return rc;
}

int main(int argc, char **argv)
{
    /* Keep freed memory in the process: micro-batches of changing shapes would otherwise have
     * glibc return and re-fault pages, and the kernel's page clearing would be timed as compute
     * (seen: 15% of a run). The profile runs under the same setting. */
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 1 << 30);
    cli_opts_program("dprun");
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        help();
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "profile") == 0) return profile_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "check-gpu") == 0) return check_gpu_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "run") == 0) return run_main(argc - 1, argv + 1);
    return run_main(argc, argv);
}
