/* dpsim trace gen|import|stats — make, convert and describe length traces. */
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
           "  gen     draw a synthetic trace (FLANv2-like mixture, Flan2021 zero-shot, uniform,\n"
           "          fixed, long chain-of-thought)\n"
           "  import  read CSV, JSONL, DynaPipe .npy or FLAN CoT lengths; write a trace CSV\n"
           "  stats   count, mean and percentiles of lengths, per task, and a log2 histogram\n\n"
           "'dpsim trace SUB --help' lists each one's options.\n",
           TRACE_USAGE);
}

/* ---- gen ---------------------------------------------------------------------------------- */

static const char GEN_USAGE[] = "dpsim trace gen [--mix M] [--samples N] [--seed S] -o FILE";

static int set_mix(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    if (trace_mix_parse(arg, ctx) == 0) return 0;
    cli_usage_error(cmd, usage, "unknown --mix \"%s\" (flanv2, flan2021-zs, uniform, fixed, long-cot)", arg);
    return -1;
}

static int set_tokenizer(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    if (trace_tokenizer_parse(arg, ctx) == 0) return 0;
    cli_usage_error(cmd, usage, "unknown --tokenizer \"%s\" (t5, gpt2)", arg);
    return -1;
}

static int trace_gen_main(int argc, char **argv)
{
    const char *cmd = "trace gen";
    trace_gen_opts o;
    trace_gen_defaults(&o);
    const char *out = "-";
    int64_t samples = (int64_t)o.samples, seed = (int64_t)o.seed;
    cli_opts ot;
    cli_opts_init(&ot, cmd, GEN_USAGE,
                  "Draws a synthetic trace. FLAN mixes are \"synthetic, fitted to published FLANv2\n"
                  "statistics\", not FLANv2 itself (docs/traces.md).");
    cli_opt_call(&ot, "mix", 'm', set_mix, &o.mix, "M", "flanv2",
                 "flanv2 | flan2021-zs | uniform | fixed | long-cot (reasoning\n"
                 "fine-tuning: instructions, chains of thought to 32k, a long-context\n"
                 "tail to 128k; docs/traces.md cites its figures)");
    cli_opt_int64(&ot, "samples", 'n', &samples, "N", 1, 1000000000, "100000", "number of samples");
    cli_opt_int64(&ot, "seed", 's', &seed, "S", 0, UINT32_MAX, "1",
                  "random seed; same seed, same file");
    cli_opt_call(&ot, "tokenizer", 't', set_tokenizer, &o.tokenizer, "T", "t5",
                 "t5 | gpt2 (GPT-2 lengths are 0.90x T5's)");
    cli_opt_int(&ot, "max-input", 0, &o.max_input, "L", 0, TRACE_MAX_LEN, "FLAN 2048, else never",
                "truncate inputs to L tokens, 0 = never");
    cli_opt_int(&ot, "max-target", 0, &o.max_target, "L", 0, TRACE_MAX_LEN, "FLAN 512, else never",
                "truncate targets to L tokens, 0 = never");
    cli_opt_int(&ot, "min", 0, &o.min_len, "A", 0, TRACE_MAX_LEN, "1", "uniform: shortest input");
    cli_opt_int(&ot, "max", 0, &o.max_len, "B", 0, TRACE_MAX_LEN, "2048", "uniform: longest input");
    cli_opt_int(&ot, "len", 0, &o.len, "L", 0, TRACE_MAX_LEN, "512", "fixed: input length");
    cli_opt_int(&ot, "target-len", 0, &o.target_len, "L", 0, TRACE_MAX_LEN, "0",
                "uniform, fixed: target length");
    cli_opt_string(&ot, "output", 'o', &out, "FILE", "-", "trace CSV to write, - for stdout");
    int r = cli_opts_parse(&ot, argc, argv, NULL, 0, NULL);
    cli_opts_release(&ot);
    if (r != 0) return r == 1 ? 0 : r;
    o.samples = (size_t)samples, o.seed = (uint64_t)seed;

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

static int set_format(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    if (trace_format_parse(arg, ctx) == 0) return 0;
    cli_usage_error(cmd, usage, "unknown --format \"%s\" (auto, csv, jsonl, npy, cot)", arg);
    return -1;
}

/* The options import and stats share, into lo. */
static void load_options(cli_opts *t, load_opts *lo)
{
    cli_opt_call(t, "format", 'f', set_format, &lo->format, "F", "auto",
                 "auto | csv | jsonl | npy | cot (auto: by extension)");
    cli_opt_string(t, "task-field", 0, &lo->task_field, "F",
                   "csv: task, jsonl: task_name, cot: dataset",
                   "column/field holding the task name");
    cli_opt_string(t, "input-field", 0, &lo->input_field, "F",
                   "csv: input_len, jsonl: input_seq_len, cot: question_t5",
                   "column/field holding the input length");
    cli_opt_string(t, "target-field", 0, &lo->target_field, "F",
                   "csv: target_len, jsonl: target_seq_len, cot: target_t5",
                   "column/field holding the target length");
    cli_opt_flag(t, "no-target", 0, &lo->no_target,
                 "the data has no target lengths (decoder-only): targets are 0");
    cli_opt_string(t, "targets", 0, &lo->targets_npy, "FILE", NULL,
                   "npy: the target-length file (inputs are the main FILE)");
    cli_opt_call(t, "tokenizer", 't', set_tokenizer, &lo->tokenizer, "T", "t5",
                 "cot: t5 | gpt2 token counts");
}

/* ---- import ------------------------------------------------------------------------------- */

static const char IMPORT_USAGE[] = "dpsim trace import [--format F] FILE [-o OUT.csv]";

static int trace_import_main(int argc, char **argv)
{
    const char *cmd = "trace import";
    load_opts lo = {0};
    const char *out = "-", *file[1];
    int n_file = 0;
    cli_opts ot;
    cli_opts_init(&ot, cmd, IMPORT_USAGE,
                  "Reads a trace in any supported format and writes it as a trace CSV.");
    load_options(&ot, &lo);
    cli_opt_string(&ot, "output", 'o', &out, "FILE", "-", "trace CSV to write, - for stdout");
    int r = cli_opts_parse(&ot, argc, argv, file, 1, &n_file);
    cli_opts_release(&ot);
    if (r != 0) return r == 1 ? 0 : r;
    if (n_file != 1) return cli_usage_error(cmd, IMPORT_USAGE, "expected exactly one input FILE");
    dp_err err = {0};
    out_role in[] = {{"FILE", file[0]}}, outs[] = {{"-o", out}};
    if (planner_check_outputs(NULL, in, 1, outs, 1, &err) != DP_OK)
        return cli_usage_error(cmd, IMPORT_USAGE, "%s", err.msg);
    trace t;
    trace_init(&t);
    dp_status st = load_with(&lo, file[0], &t, &err);
    if (st == DP_OK) st = trace_write_csv(&t, out, &err);
    if (st == DP_OK)
        fprintf(stderr, "dpsim: imported %zu samples from %s, hash %016llx\n", t.n, file[0],
                (unsigned long long)trace_hash(&t));
    trace_release(&t);
    return st == DP_OK ? 0 : cli_fail(cmd, &err);
}

/* ---- stats -------------------------------------------------------------------------------- */

static const char STATS_USAGE[] = "dpsim trace stats [--json] [--tasks N] FILE";

static int trace_stats_main(int argc, char **argv)
{
    const char *cmd = "trace stats";
    load_opts lo = {0};
    int json = 0, n_file = 0;
    int64_t max_tasks = 20;
    const char *file[1];
    cli_opts ot;
    cli_opts_init(&ot, cmd, STATS_USAGE,
                  "Count, mean, p10/p50/p90/p99 and max of input, target and total\n"
                  "(input+target) lengths; the same per task; and a log2 histogram.");
    load_options(&ot, &lo);
    cli_opt_flag(&ot, "json", 'j', &json, "print one JSON object (every task) instead of tables");
    cli_opt_int64(&ot, "tasks", 'k', &max_tasks, "N", 0, INT32_MAX, "20",
                  "tasks shown in the table, most samples first, 0 = all");
    int r = cli_opts_parse(&ot, argc, argv, file, 1, &n_file);
    cli_opts_release(&ot);
    if (r != 0) return r == 1 ? 0 : r;
    if (n_file != 1) return cli_usage_error(cmd, STATS_USAGE, "expected exactly one trace FILE");
    const char *path = file[0];
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
