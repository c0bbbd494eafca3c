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
#include <getopt.h>
#include <malloc.h>
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../common/json_util.h"
#include "../common/outfile.h"
#include "../models/hw.h"
#include "../scheduler/plan.h"
#include "check_gpu.h"
#include "exec.h"
#include "layer.h"
#include "rt_mpi.h"
#include "profile.h"

static const char USAGE[] =
    "dprun [run] --plan FILE --backend cpu|cuda [--dtype bf16|fp64] --out FILE [--timeout S]\n"
    "       dprun profile --backend cpu|cuda [--dtype bf16|fp64] --model M [--mbs LIST]\n"
    "                     [--seqlen LIST] [--tp T [--no-sp]] [--cp C] [--cluster-out FILE] -o FILE\n"
    "       dprun check-gpu [MODEL] [--hw GPU] [--no-speed]";

static void help(void)
{
    printf("usage: %s\n\n"
           "Runs an execution plan from 'dpsim plan -o' on real ranks (one MPI rank per pipeline\n"
           "stage, data-parallel replica, tensor-parallel and context-parallel rank: mpirun -np\n"
           "tp x cp x pp x dp, tp ranks fastest, then cp) and writes the measured timeline CSV, for 'dpsim\n"
           "validate', and the gradient norm at the end (the same plan gives the same norm on\n"
           "every backend, to rounding). The plan's recompute runs as planned: selective\n"
           "reruns each layer's attention core in the backward, full keeps only each layer's\n"
           "input and reruns its forward (dprun says how many). 'profile' measures a per-layer\n"
           "cost grid in the profile CSV format.\n\n"
           "run:\n"
           "  -p, --plan FILE       execution plan JSON                          (required)\n"
           "  -b, --backend B       cpu (MPI ranks) | cuda (under mpirun one rank per GPU,\n"
           "                        NCCL between them; without mpirun every stage on one GPU) [cpu]\n"
           "  -d, --dtype T         what the layers compute in and the transfers carry: bf16\n"
           "                        (training precision: cuBLASLt, cuDNN attention, fp32 master\n"
           "                        weights) or fp64 (the exact check); the cpu backend is fp64\n"
           "                        [bf16 on cuda, fp64 on cpu]\n"
           "  -o, --out FILE        measured timeline CSV, written by rank 0      (required)\n"
           "  -t, --timeout S       a wait longer than S seconds aborts the job   [60]\n"
           "  -n, --iterations K    run the first K iterations, 0 = all           [0]\n"
           "  -w, --warmup N        unrecorded runs of the first iteration        [1]\n"
           "      --no-prepare      cuda: skip the unrecorded run of every iteration before its\n"
           "                        measured one (it keeps cuBLASLt's and cuDNN's per-shape plan\n"
           "                        building, slow first calls, out of the timeline)       [on]\n"
           "  -r, --repeats R       measured runs of every iteration in a row, rows marked repeat\n"
           "                        0 .. R-1: dpsim validate compares each iteration's median and\n"
           "                        reports the runs' spread as the machine's noise band (1-16) [1]\n"
           "      --no-noise        skip the noise repeat: with --repeats 1 the first iteration\n"
           "                        is run once more, recorded with repeat 1              [on]\n"
           "      --stall-rank R --stall-s S   fault injection: rank R sleeps S seconds first\n"
           "      --no-plan-check  fault injection: skip the same-plan-on-every-rank hash check\n"
           "profile:\n"
           "  -b, --backend B       cpu | cuda (CUDA-event means)                  [cpu]\n"
           "  -d, --dtype T         bf16 | fp64 (cuda; the cpu layer is fp64)  [bf16 on cuda]\n"
           "  -m, --model M         model preset or JSON spec (GPT or T5)        [gpt-tiny]\n"
           "      --mbs LIST        micro-batch sizes                             [1,2,4,8]\n"
           "      --seqlen LIST     sequence lengths (T5: encoder lengths)        [32,64,128,256]\n"
           "      --dec-seqlen LIST T5: decoder lengths                           [the --seqlen list]\n"
           "      --recompute LIST  recompute modes measured (none, selective, full): each\n"
           "                        backward as dprun runs it under the mode      [none]\n"
           "  -r, --repeats N       timed repeats per point, their median (cpu: passes over the\n"
           "                        whole grid)                                  [5]\n"
           "      --tp T            time the layer as a tp T plan runs it: under mpirun -np T (or\n"
           "                        a multiple), each rank its share, the group's collectives\n"
           "                        in the times; rows say tp T (cpu backend)    [1]\n"
           "      --no-sp           with --tp: without sequence parallelism (all-reduces)\n"
           "      --cp C            time the layer as a cp C plan runs it (ring attention): under\n"
           "                        mpirun -np tp x C, each rank its share of each micro-batch's\n"
           "                        tokens, the key/value gathers in the times; rows carry a cp\n"
           "                        column (cpu backend, GPT-kind models; 2C divides each\n"
           "                        --seqlen)                                    [1]\n"
           "      --cluster-out FILE  also measure the links between the ranks (each collective's\n"
           "                        bus bandwidth on 8 MB, nccl-tests' way, and a step's latency)\n"
           "                        and write them as a cluster JSON for dpsim's --hw: the --hw\n"
           "                        preset with its in-node link replaced (under mpirun -np 2+)\n"
           "      --hw H            the cluster --cluster-out starts from           [cpu]\n"
           "  -o, --out FILE        profile CSV                                   (required)\n"
           "check-gpu [MODEL]       the GPU layer in fp64 against the CPU layer (to 1e-9), in bf16\n"
           "                        against fp64 (stated tolerances), GPT-6.7B-width layer\n"
           "                        TFLOP/s and MFU beside cuBLASLt's GEMM rate (needs a build\n"
           "                        with CUDA and a GPU; make check-gpu)           [gpt-tiny]\n"
           "      --hw GPU          the GPU preset for MFU       [found from the device's name]\n"
           "      --no-speed        numerics only (no GPT-6.7B-width timing)\n"
           "  -h, --help            this help\n",
           USAGE);
}

static int usage_error(const char *msg, const char *arg)
{
    fprintf(stderr, "dprun: %s%s%s\nusage: %s\n", msg, arg ? " " : "", arg ? arg : "", USAGE);
    return 2;
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
    static const struct option opts[] = {
        {"backend", required_argument, 0, 'b'}, {"model", required_argument, 0, 'm'},
        {"dtype", required_argument, 0, 'd'},
        {"mbs", required_argument, 0, 1},       {"seqlen", required_argument, 0, 2},
        {"dec-seqlen", required_argument, 0, 3}, {"recompute", required_argument, 0, 4},
        {"repeats", required_argument, 0, 'r'}, {"out", required_argument, 0, 'o'},
        {"output", required_argument, 0, 'o'},  {"help", no_argument, 0, 'h'},
        {"tp", required_argument, 0, 5},        {"no-sp", no_argument, 0, 6},
        {"cp", required_argument, 0, 7},        {"cluster-out", required_argument, 0, 8},
        {"hw", required_argument, 0, 9},        {0, 0, 0, 0}};
    const char *model = "gpt-tiny", *out = NULL, *backend = "cpu", *dtype = NULL;
    const char *cluster_out = NULL, *hw = "cpu";
    int64_t tp = 1, cp = 1;
    int sp = 1;
    int mbs[32] = {1, 2, 4, 8}, seq[32] = {32, 64, 128, 256}, dec[32], n_mbs = 4, n_seq = 4, n_dec = 0;
    int64_t repeats = 5;
    unsigned modes = 1u << RECOMPUTE_NONE;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":b:m:d:r:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'b': backend = optarg; break;
        case 'm': model = optarg; break;
        case 'd': dtype = optarg; break;
        case 1:
            if ((n_mbs = parse_list(optarg, mbs)) <= 0) return usage_error("bad --mbs list", optarg);
            break;
        case 2:
            if ((n_seq = parse_list(optarg, seq)) <= 0) return usage_error("bad --seqlen list", optarg);
            break;
        case 3:
            if ((n_dec = parse_list(optarg, dec)) <= 0) return usage_error("bad --dec-seqlen list", optarg);
            break;
        case 4:
            if (parse_modes(optarg, &modes) != 0)
                return usage_error("bad --recompute list (none, selective, full):", optarg);
            break;
        case 'r':
            if (dp_parse_i64(optarg, 1, 1000, &repeats) != 0) return usage_error("bad --repeats", optarg);
            break;
        case 5:
            if (dp_parse_i64(optarg, 1, 1024, &tp) != 0) return usage_error("bad --tp (1-1024)", optarg);
            break;
        case 6: sp = 0; break;
        case 7:
            if (dp_parse_i64(optarg, 1, 1024, &cp) != 0) return usage_error("bad --cp (1-1024)", optarg);
            break;
        case 8: cluster_out = optarg; break;
        case 9: hw = optarg; break;
        case 'o': out = optarg; break;
        case 'h': help(); return 0;
        default: return usage_error("unknown or incomplete option", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("unexpected argument", argv[optind]);
    if (!out) return usage_error("profile needs --out", NULL);
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
    if (resolve_dtype(dtype, on_gpu, &dt, why, sizeof why) != 0) return usage_error(why, NULL);
    dp_err err = {0};
    model_spec m;
    if (model_resolve(model, &m, &err) != DP_OK) {
        fprintf(stderr, "dprun profile: error: %s\n", err.msg);
        return 1;
    }
    char where[64];
    snprintf(where, sizeof where, "dprun profile --tp %d", (int)tp);
    if (rt_check_tp(&m, (int)tp, on_gpu, where, &err) != DP_OK) {
        fprintf(stderr, "dprun profile: error: %s\n", err.msg);
        return 1;
    }
    if (cp > 1 && (on_gpu || m.arch != ARCH_GPT)) {
        fprintf(stderr, "dprun profile: error: --cp %d: context parallelism runs on the cpu "
                "backend, for decoder-only models (%s%s)\n", (int)cp, on_gpu ? "not cuda" : m.name,
                on_gpu ? "" : " is an encoder-decoder");
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
    /* consecutive ranks form the tensor-parallel groups, then the context-parallel ones (tp
     * fastest, then cp, as dprun runs a plan) */
    MPI_Comm tp_comm = MPI_COMM_NULL, cp_comm = MPI_COMM_NULL;
    rt_mpi_tp group, cp_group;
    if (tp > 1) {
        mpi_check(MPI_Comm_split(MPI_COMM_WORLD, rank / (int)tp, rank % (int)tp, &tp_comm),
                  "MPI_Comm_split");
        rt_mpi_tp_init(&group, tp_comm, sp, NULL, profile_die, NULL);
    }
    if (cp > 1) {
        mpi_check(MPI_Comm_split(MPI_COMM_WORLD, rank / width * (int)tp + rank % (int)tp,
                                 rank / (int)tp % (int)cp, &cp_comm), "MPI_Comm_split");
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
    static const struct option opts[] = {{"hw", required_argument, 0, 1},
                                         {"no-speed", no_argument, 0, 2},
                                         {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *hw = NULL, *model = "gpt-tiny";
    int c, speed = 1;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        switch (c) {
        case 1: hw = optarg; break;
        case 2: speed = 0; break;
        case 'h': help(); return 0;
        default: return usage_error("unknown or incomplete option", argv[optind - 1]);
        }
    }
    if (optind < argc) model = argv[optind++];
    if (optind < argc) return usage_error("unexpected argument", argv[optind]);
    model_spec m;
    dp_err err = {0};
    if (model_resolve(model, &m, &err) != DP_OK) {
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
    static const struct option opts[] = {
        {"plan", required_argument, 0, 'p'},  {"backend", required_argument, 0, 'b'},
        {"dtype", required_argument, 0, 'd'},
        {"out", required_argument, 0, 'o'},   {"output", required_argument, 0, 'o'},
        {"timeout", required_argument, 0, 't'}, {"iterations", required_argument, 0, 'n'},
        {"warmup", required_argument, 0, 'w'}, {"stall-rank", required_argument, 0, 1},
        {"no-noise", no_argument, 0, 4},       {"no-prepare", no_argument, 0, 5},
        {"repeats", required_argument, 0, 'r'},
        {"stall-s", required_argument, 0, 2},  {"no-plan-check", no_argument, 0, 3},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *plan_path = NULL, *out = NULL, *backend = "cpu", *dtype = NULL;
    double timeout = 60;
    int64_t iterations = 0, warmup = 1, stall_rank = -1, repeats = 1;
    int repeat_first = 1, prepare = 1;
    double stall_s = 0;
    int c, check_plan = 1;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":p:b:d:o:t:n:w:r:h", opts, NULL)) != -1) {
        switch (c) {
        case 'p': plan_path = optarg; break;
        case 'r':
            if (dp_parse_i64(optarg, 1, 16, &repeats) != 0) return usage_error("bad --repeats (1-16)", optarg);
            break;
        case 'b': backend = optarg; break;
        case 'd': dtype = optarg; break;
        case 'o': out = optarg; break;
        case 't':
            if (dp_parse_f64(optarg, &timeout) != 0 || timeout <= 0) return usage_error("bad --timeout", optarg);
            break;
        case 'n':
            if (dp_parse_i64(optarg, 0, 1 << 30, &iterations) != 0) return usage_error("bad --iterations", optarg);
            break;
        case 'w':
            if (dp_parse_i64(optarg, 0, 100, &warmup) != 0) return usage_error("bad --warmup", optarg);
            break;
        case 1:
            if (dp_parse_i64(optarg, 0, 1 << 20, &stall_rank) != 0) return usage_error("bad --stall-rank", optarg);
            break;
        case 2:
            if (dp_parse_f64(optarg, &stall_s) != 0 || stall_s < 0) return usage_error("bad --stall-s", optarg);
            break;
        case 3: check_plan = 0; break;
        case 4: repeat_first = 0; break;
        case 5: prepare = 0; break;
        case 'h': help(); return 0;
        default: return usage_error("unknown or incomplete option", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("unexpected argument", argv[optind]);
    if (!plan_path || !out) return usage_error("run needs --plan and --out", NULL);
    rt_dtype dt = RT_FP64;
    {
        char why[200];
        int gpu = strcmp(backend, "cuda") == 0;
        if ((gpu || strcmp(backend, "cpu") == 0) && resolve_dtype(dtype, gpu, &dt, why, sizeof why) != 0)
            return usage_error(why, NULL);
    }
    {
        dp_err derr = {0};
        out_role in[] = {{"--plan", plan_path}}, outs[] = {{"--out", out}};
        if (out_distinct(in, 1, outs, 1, &derr) != DP_OK) return usage_error(derr.msg, NULL);
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
        out_file of;
        dp_err werr = {0};
        if (out_open(&of, out, &werr) != DP_OK) {
            fprintf(stderr, "dprun: error: %s\n", werr.msg);
            rc = 1;
        } else {
            /* wire_elem_bytes: what a transfer moved per element (the plan's bytes count
             * act_dtype elements), so that dpsim validate simulates the bytes really moved;
             * plan_hash: the plan file's, so that dpsim validate refuses another plan's timeline */
            FILE *fp = of.fp;
            fprintf(fp, "iteration,stage,op,mb,start_us,end_us,replica,chunk,wire_elem_bytes,plan_hash,"
                    "repeat,tp,cp\n");
            const rt_record *r = (const rt_record *)buf;
            for (size_t i = 0; i < (size_t)total / sizeof *r; i++)
                fprintf(fp, "%d,%d,%s,%d,%.3f,%.3f,%d,%d,%d,%016llx,%d,%d,%d\n", r[i].iteration, r[i].stage,
                        r[i].op < 0 ? "ALLREDUCE" : plan_op_name((plan_op)r[i].op), r[i].mb,
                        r[i].start_us, r[i].end_us, r[i].replica, r[i].chunk, (int)rt_dtype_act_bytes(dt),
                        (unsigned long long)h, r[i].repeat, rt_plan_tp(&pl.h), rt_plan_cp(&pl.h));
            if (out_commit(&of, &werr) != DP_OK) {
                fprintf(stderr, "dprun: error: %s\n", werr.msg);
                rc = 1;
            }
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
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        help();
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "profile") == 0) return profile_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "check-gpu") == 0) return check_gpu_main(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "run") == 0) return run_main(argc - 1, argv + 1);
    return run_main(argc, argv);
}
