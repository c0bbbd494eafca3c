/* dpsim trace gen|import|stats — make, convert and describe length traces. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../traces/trace.h"
#include "../traces/trace_gen.h"
#include "../traces/trace_stats.h"
#include "cli.h"

static const char TRACE_USAGE[] = "dpsim trace gen|import|stats [OPTIONS] ...";

static void trace_help(void)
{
    printf("usage: %s\n\n"
           "Make, convert and describe sequence-length traces (CSV: task,input_len,target_len).\n\n"
           "  gen     draw a synthetic trace (FLANv2-like mixture, Flan2021 zero-shot, uniform, fixed)\n"
           "  import  read CSV, JSONL, DynaPipe .npy or FLAN CoT lengths; write a trace CSV\n"
           "  stats   count, mean and percentiles of lengths, per task, and a log2 histogram\n\n"
           "'dpsim trace SUB --help' lists each one's options.\n",
           TRACE_USAGE);
}

/* ---- gen ---------------------------------------------------------------------------------- */

static const char GEN_USAGE[] = "dpsim trace gen [--mix M] [--samples N] [--seed S] -o FILE";

static void gen_help(void)
{
    printf("usage: %s\n\n"
           "Draws a synthetic trace. FLAN mixes are \"synthetic, fitted to published FLANv2\n"
           "statistics\", not FLANv2 itself (see README, \"Traces\").\n\n"
           "  -m, --mix M          flanv2 | flan2021-zs | uniform | fixed      [flanv2]\n"
           "  -n, --samples N      number of samples                           [100000]\n"
           "  -s, --seed S         random seed; same seed, same file           [1]\n"
           "  -t, --tokenizer T    t5 | gpt2 (GPT-2 lengths are 0.90x T5's)    [t5]\n"
           "      --max-input L    truncate inputs to L tokens, 0 = never      [2048]\n"
           "      --max-target L   truncate targets to L tokens, 0 = never     [512]\n"
           "      --min A          uniform: shortest input                     [1]\n"
           "      --max B          uniform: longest input                      [2048]\n"
           "      --len L          fixed: input length                         [512]\n"
           "      --target-len L   uniform, fixed: target length               [0]\n"
           "  -o, --output FILE    trace CSV to write, - for stdout            [-]\n"
           "  -h, --help           this help\n",
           GEN_USAGE);
}

static int trace_gen_main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"mix", required_argument, 0, 'm'},      {"samples", required_argument, 0, 'n'},
        {"seed", required_argument, 0, 's'},     {"tokenizer", required_argument, 0, 't'},
        {"max-input", required_argument, 0, 1},  {"max-target", required_argument, 0, 2},
        {"min", required_argument, 0, 3},        {"max", required_argument, 0, 4},
        {"len", required_argument, 0, 5},        {"target-len", required_argument, 0, 6},
        {"output", required_argument, 0, 'o'},   {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    const char *cmd = "trace gen";
    trace_gen_opts o;
    trace_gen_defaults(&o);
    const char *out = "-";
    int64_t v;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":m:n:s:t:o:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm':
            if (trace_mix_parse(optarg, &o.mix) != 0)
                return cli_usage_error(cmd, GEN_USAGE,
                                       "unknown --mix \"%s\" (flanv2, flan2021-zs, uniform, fixed)",
                                       optarg);
            break;
        case 'n':
            if (cli_int(cmd, "--samples", optarg, 1, 1000000000, &v)) return EXIT_USAGE;
            o.samples = (size_t)v;
            break;
        case 's':
            if (cli_int(cmd, "--seed", optarg, 0, UINT32_MAX, &v)) return EXIT_USAGE;
            o.seed = (uint64_t)v;
            break;
        case 't':
            if (trace_tokenizer_parse(optarg, &o.tokenizer) != 0)
                return cli_usage_error(cmd, GEN_USAGE, "unknown --tokenizer \"%s\" (t5, gpt2)",
                                       optarg);
            break;
        case 1:
        case 2:
        case 3:
        case 4:
        case 5:
        case 6: {
            static const char *const names[] = {"", "--max-input", "--max-target", "--min",
                                                "--max", "--len", "--target-len"};
            if (cli_int(cmd, names[c], optarg, 0, TRACE_MAX_LEN, &v)) return EXIT_USAGE;
            int32_t *dst[] = {NULL, &o.max_input, &o.max_target, &o.min_len,
                              &o.max_len, &o.len, &o.target_len};
            *dst[c] = (int32_t)v;
            break;
        }
        case 'o': out = optarg; break;
        case 'h': gen_help(); return 0;
        case ':': return cli_usage_error(cmd, GEN_USAGE, "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, GEN_USAGE, "unknown option %s", argv[optind - 1]);
        }
    }
    if (optind < argc)
        return cli_usage_error(cmd, GEN_USAGE, "unexpected argument \"%s\"", argv[optind]);

    dp_err err = {0};
    trace t;
    trace_init(&t);
    dp_status st = trace_generate(&o, &t, &err);
    if (st == DP_OK) st = trace_write_csv(&t, out, &err);
    if (st == DP_OK)
        fprintf(stderr, "dpsim: wrote %zu samples (%s, seed %llu, %s tokens) to %s, hash %016llx\n",
                t.n, trace_mix_name(o.mix), (unsigned long long)o.seed,
                trace_tokenizer_name(o.tokenizer), out, (unsigned long long)trace_hash(&t));
    trace_release(&t);
    if (st == DP_ERR_INVALID) return cli_usage_error(cmd, GEN_USAGE, "%s", err.msg);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}

/* ---- options shared by import and stats ----------------------------------------------------- */

typedef struct load_opts {
    trace_format format;
    const char *task_field, *input_field, *target_field, *targets_npy;
    trace_tokenizer tokenizer;
    int no_target;
} load_opts;

static const char LOAD_OPTS_HELP[] =
    "  -f, --format F       auto | csv | jsonl | npy | cot (auto: by extension)  [auto]\n"
    "      --task-field F   column/field holding the task name\n"
    "                       [csv: task, jsonl: task_name, cot: dataset]\n"
    "      --input-field F  column/field holding the input length\n"
    "                       [csv: input_len, jsonl: input_seq_len, cot: question_t5]\n"
    "      --target-field F column/field holding the target length\n"
    "                       [csv: target_len, jsonl: target_seq_len, cot: target_t5]\n"
    "      --no-target      the data has no target lengths (decoder-only): targets are 0\n"
    "      --targets FILE   npy: the target-length file (inputs are the main FILE)\n"
    "  -t, --tokenizer T    cot: t5 | gpt2 token counts                       [t5]\n";

/* Loads FILE with the options; fills err. */
static dp_status load_with(const load_opts *lo, const char *path, trace *t, dp_err *err)
{
    trace_format fmt = lo->format == TRACE_FORMAT_AUTO ? trace_format_for_path(path) : lo->format;
    const trace_fields *base = NULL;
    if (fmt == TRACE_FORMAT_COT)
        base = lo->tokenizer == TOKENIZER_GPT2 ? &TRACE_FIELDS_COT_GPT2 : &TRACE_FIELDS_COT_T5;
    int custom = lo->task_field || lo->input_field || lo->target_field || lo->no_target;
    if (!custom) return trace_load(path, fmt, base, lo->targets_npy, t, err);
    if (!base) base = fmt == TRACE_FORMAT_JSONL ? &TRACE_FIELDS_JSONL : &TRACE_FIELDS_CSV;
    trace_fields f = *base;
    if (lo->task_field) f.task = lo->task_field;
    if (lo->input_field) f.input = lo->input_field;
    if (lo->target_field) f.target = lo->target_field;
    if (lo->no_target) f.target = NULL;
    if (!f.default_task) f.default_task = "all";
    return trace_load(path, fmt, &f, lo->targets_npy, t, err);
}

/* Handles one shared load option; returns 1 if c was one, 0 if not, -1 on a usage error. */
static int load_opt(load_opts *lo, int c, const char *cmd, const char *usage)
{
    switch (c) {
    case 'f':
        if (trace_format_parse(optarg, &lo->format) != 0) {
            cli_usage_error(cmd, usage, "unknown --format \"%s\" (auto, csv, jsonl, npy, cot)",
                            optarg);
            return -1;
        }
        return 1;
    case 't':
        if (trace_tokenizer_parse(optarg, &lo->tokenizer) != 0) {
            cli_usage_error(cmd, usage, "unknown --tokenizer \"%s\" (t5, gpt2)", optarg);
            return -1;
        }
        return 1;
    case 20: lo->task_field = optarg; return 1;
    case 21: lo->input_field = optarg; return 1;
    case 22: lo->target_field = optarg; return 1;
    case 23: lo->targets_npy = optarg; return 1;
    case 24: lo->no_target = 1; return 1;
    }
    return 0;
}

#define LOAD_LONG_OPTS                                                                             \
    {"format", required_argument, 0, 'f'}, {"tokenizer", required_argument, 0, 't'},              \
        {"task-field", required_argument, 0, 20}, {"input-field", required_argument, 0, 21},       \
        {"target-field", required_argument, 0, 22}, {"targets", required_argument, 0, 23},         \
        {"no-target", no_argument, 0, 24}

/* ---- import ------------------------------------------------------------------------------- */

static const char IMPORT_USAGE[] = "dpsim trace import [--format F] FILE [-o OUT.csv]";

static int trace_import_main(int argc, char **argv)
{
    static const struct option opts[] = {LOAD_LONG_OPTS,
                                         {"output", required_argument, 0, 'o'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *cmd = "trace import";
    load_opts lo = {0};
    const char *out = "-";
    int c, r;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":f:t:o:h", opts, NULL)) != -1) {
        if ((r = load_opt(&lo, c, cmd, IMPORT_USAGE)) != 0) {
            if (r < 0) return EXIT_USAGE;
            continue;
        }
        switch (c) {
        case 'o': out = optarg; break;
        case 'h':
            printf("usage: %s\n\nReads a trace in any supported format and writes it as a trace "
                   "CSV.\n\n%s"
                   "  -o, --output FILE    trace CSV to write, - for stdout            [-]\n"
                   "  -h, --help           this help\n",
                   IMPORT_USAGE, LOAD_OPTS_HELP);
            return 0;
        case ':': return cli_usage_error(cmd, IMPORT_USAGE, "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, IMPORT_USAGE, "unknown option %s", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return cli_usage_error(cmd, IMPORT_USAGE, "expected exactly one input FILE");
    dp_err err = {0};
    out_role in[] = {{"FILE", argv[optind]}}, outs[] = {{"-o", out}};
    if (cli_check_outputs(NULL, in, 1, outs, 1, &err) != DP_OK)
        return cli_usage_error(cmd, IMPORT_USAGE, "%s", err.msg);
    trace t;
    trace_init(&t);
    dp_status st = load_with(&lo, argv[optind], &t, &err);
    if (st == DP_OK) st = trace_write_csv(&t, out, &err);
    if (st == DP_OK)
        fprintf(stderr, "dpsim: imported %zu samples from %s, hash %016llx\n", t.n, argv[optind],
                (unsigned long long)trace_hash(&t));
    trace_release(&t);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}

/* ---- stats -------------------------------------------------------------------------------- */

static const char STATS_USAGE[] = "dpsim trace stats [--json] [--tasks N] FILE";

static int trace_stats_main(int argc, char **argv)
{
    static const struct option opts[] = {LOAD_LONG_OPTS,
                                         {"json", no_argument, 0, 'j'},
                                         {"tasks", required_argument, 0, 'k'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    const char *cmd = "trace stats";
    load_opts lo = {0};
    int json = 0, c, r;
    int64_t max_tasks = 20;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":f:t:jk:h", opts, NULL)) != -1) {
        if ((r = load_opt(&lo, c, cmd, STATS_USAGE)) != 0) {
            if (r < 0) return EXIT_USAGE;
            continue;
        }
        switch (c) {
        case 'j': json = 1; break;
        case 'k':
            if (cli_int(cmd, "--tasks", optarg, 0, INT32_MAX, &max_tasks)) return EXIT_USAGE;
            break;
        case 'h':
            printf("usage: %s\n\nCount, mean, p10/p50/p90/p99 and max of input, target and total\n"
                   "(input+target) lengths; the same per task; and a log2 histogram.\n\n%s"
                   "  -j, --json           print one JSON object (every task) instead of tables\n"
                   "  -k, --tasks N        tasks shown in the table, most samples first, 0 = all"
                   " [20]\n"
                   "  -h, --help           this help\n",
                   STATS_USAGE, LOAD_OPTS_HELP);
            return 0;
        case ':': return cli_usage_error(cmd, STATS_USAGE, "%s needs a value", argv[optind - 1]);
        default: return cli_usage_error(cmd, STATS_USAGE, "unknown option %s", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return cli_usage_error(cmd, STATS_USAGE, "expected exactly one trace FILE");
    const char *path = argv[optind];
    dp_err err = {0};
    trace t;
    trace_stats s;
    trace_init(&t);
    memset(&s, 0, sizeof s);
    dp_status st = load_with(&lo, path, &t, &err);
    if (st == DP_OK) st = trace_stats_compute(&t, &s, &err);
    if (st == DP_OK) {
        if (json) {
            char *text = trace_stats_json(&t, &s, path);
            if (text) puts(text);
            else st = dp_fail(&err, DP_ERR_NOMEM, "out of memory");
            free(text);
        } else {
            trace_stats_print(&t, &s, path, (size_t)max_tasks, stdout);
        }
    }
    trace_stats_release(&s);
    trace_release(&t);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}

int cmd_trace(int argc, char **argv)
{
    if (argc < 2) return cli_usage_error("trace", TRACE_USAGE, "missing subcommand");
    const char *sub = argv[1];
    if (strcmp(sub, "--help") == 0 || strcmp(sub, "-h") == 0) {
        trace_help();
        return 0;
    }
    if (strcmp(sub, "gen") == 0) return trace_gen_main(argc - 1, argv + 1);
    if (strcmp(sub, "import") == 0) return trace_import_main(argc - 1, argv + 1);
    if (strcmp(sub, "stats") == 0) return trace_stats_main(argc - 1, argv + 1);
    return cli_usage_error("trace", TRACE_USAGE, "unknown subcommand \"%s\"", sub);
}
