/* Unit tests for traces/: readers, writers, round trips, bad input, generators and statistics. */
#include "testutil.h"

#include "../../common/csv_table.h"
#include "../../traces/trace.h"
#include "../../traces/trace_gen.h"
#include "../../traces/trace_stats.h"

/* Reads text as a trace CSV; returns the status and keeps the message in err. */
static dp_status read_csv_text(const char *text, trace *t, dp_err *err)
{
    trace_init(t);
    return trace_read_csv(tmp_file(".csv", text), NULL, t, err);
}

/* Expects text to be rejected with a message containing want (and a file:line prefix). */
static void expect_csv_error(const char *text, const char *want)
{
    trace t;
    dp_err err = {0};
    dp_status st = read_csv_text(text, &t, &err);
    if (st == DP_OK) fail_msg("accepted bad CSV, wanted \"%s\"", want);
    assert_msg_has(err.msg, want);
    assert_msg_has(err.msg, "/tmp/dpsim-test-");
    trace_release(&t);
}

static void test_csv_reads_contract(void **state)
{
    (void)state;
    trace t;
    dp_err err = {0};
    assert_int_equal(read_csv_text("task,input_len,target_len\na,10,2\nb,7,0\na,3,1\n", &t, &err),
                     DP_OK);
    assert_int_equal(t.n, 3);
    assert_int_equal(t.n_tasks, 2);
    assert_int_equal(t.samples[1].input_len, 7);
    assert_int_equal(t.samples[1].target_len, 0);
    assert_int_equal(t.samples[2].task, t.samples[0].task);
    assert_string_equal(t.tasks[t.samples[1].task], "b");
    trace_release(&t);
}

static void test_csv_round_trip_keeps_extras_and_quotes(void **state)
{
    (void)state;
    const char *text = "id,task,input_len,note,target_len\n"
                       "1,\"qa, hard\",10,\"say \"\"hi\"\"\",2\n"
                       "2,plain,7,,0\n";
    trace t, u;
    dp_err err = {0};
    assert_int_equal(read_csv_text(text, &t, &err), DP_OK);
    assert_int_equal(t.n_extra, 2);
    assert_string_equal(t.extra_names[0], "id");
    assert_string_equal(t.extra_names[1], "note");
    assert_string_equal(t.extra[1], "say \"hi\"");
    const char *out = tmp_file(".csv", "");
    assert_int_equal(trace_write_csv(&t, out, &err), DP_OK);
    trace_init(&u);
    assert_int_equal(trace_read_csv(out, NULL, &u, &err), DP_OK);
    assert_int_equal(u.n, t.n);
    assert_int_equal(trace_hash(&u), trace_hash(&t));
    assert_string_equal(u.tasks[u.samples[0].task], "qa, hard");
    for (size_t i = 0; i < t.n * t.n_extra; i++) assert_string_equal(u.extra[i], t.extra[i]);
    trace_release(&t);
    trace_release(&u);
}

static void test_csv_generated_round_trip(void **state)
{
    (void)state;
    trace_gen_opts o;
    trace_gen_defaults(&o);
    o.samples = 5000;
    o.seed = 7;
    trace t, u;
    dp_err err = {0};
    trace_init(&t);
    trace_init(&u);
    assert_int_equal(trace_generate(&o, &t, &err), DP_OK);
    const char *out = tmp_file(".csv", "");
    assert_int_equal(trace_write_csv(&t, out, &err), DP_OK);
    assert_int_equal(trace_read_csv(out, NULL, &u, &err), DP_OK);
    assert_int_equal(u.n, 5000);
    assert_int_equal(trace_hash(&u), trace_hash(&t));
    trace_release(&t);
    trace_release(&u);
}

static void test_csv_accepts_crlf_and_bom(void **state)
{
    (void)state;
    trace t;
    dp_err err = {0};
    assert_int_equal(
        read_csv_text("\xEF\xBB\xBFtask,input_len,target_len\r\na,10,2\r\n\r\nb,5,1\r\n", &t, &err),
        DP_OK);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.samples[1].input_len, 5);
    trace_release(&t);
}

static void test_csv_long_line(void **state)
{
    (void)state;
    size_t big = 1 << 20;
    char *text = malloc(big + 100);
    strcpy(text, "task,input_len,target_len\n");
    size_t n = strlen(text);
    memset(text + n, 'x', big);
    strcpy(text + n + big, ",10,2\n");
    trace t;
    dp_err err = {0};
    assert_int_equal(read_csv_text(text, &t, &err), DP_OK);
    assert_int_equal(strlen(t.tasks[0]), big);
    trace_release(&t);
    free(text);
}

/* csv_format_field: every awkward field read back as itself by the CSV reader; a field that does
 * not fit comes back empty, never cut. */
typedef struct fields_seen {
    char got[8][64];
    size_t n;
} fields_seen;

static dp_status keep_fields(void *ctx, const csv_row *r, dp_err *err)
{
    fields_seen *f = ctx;
    (void)err;
    for (size_t i = 0; i < r->nfields && i < 8; i++) snprintf(f->got[i], sizeof f->got[i], "%s", r->fields[i]);
    f->n = r->nfields;
    return DP_OK;
}

static void test_csv_format_field_round_trip(void **state)
{
    (void)state;
    static const char *const fields[] = {"plain", "a\"b", "x,y", " lead", "trail ", "\"", "two\nlines", ""};
    char line[1024] = "h0,h1,h2,h3,h4,h5,h6,h7\n";
    size_t n = strlen(line);
    for (int i = 0; i < 8; i++) {
        n += csv_format_field(line + n, sizeof line - n, fields[i]);
        line[n++] = i < 7 ? ',' : '\n';
        line[n] = '\0';
    }
    FILE *fp = fmemopen(line, n, "rb");
    assert_non_null(fp);
    fields_seen f = {0};
    dp_err err = {0};
    assert_int_equal(csv_read_stream(fp, "cells.csv", 1, NULL, keep_fields, &f, &err), DP_OK);
    fclose(fp);
    assert_int_equal(f.n, 8);
    for (int i = 0; i < 8; i++) assert_string_equal(f.got[i], fields[i]);
    char small[5];
    assert_int_equal(csv_format_field(small, sizeof small, "a\"bc"), 0); /* "a""bc" needs 8 */
    assert_string_equal(small, "");
    assert_int_equal(csv_format_field(small, sizeof small, "abcd"), 4);
    assert_string_equal(small, "abcd");
}

static void test_csv_bad_input(void **state)
{
    (void)state;
    expect_csv_error("", "file is empty");
    expect_csv_error("task,input_len,target_len\n", ":1: the header has no data rows");
    expect_csv_error("task,input_len\na,3\n", ":1: missing column \"target_len\"");
    expect_csv_error("task,input_len,target_len,input_len\na,1,2,3\n",
                     ":1: column \"input_len\" appears twice");
    expect_csv_error("task,input_len,target_len\na,ten,2\n", ":2: input_len \"ten\" is not a whole");
    expect_csv_error("task,input_len,target_len\na,1.5,2\n", ":2: input_len \"1.5\" is not a whole");
    expect_csv_error("task,input_len,target_len\na,4,2\nb,5,-3\n", ":3: target_len \"-3\" is negative");
    expect_csv_error("task,input_len,target_len\na,0,2\n", ":2: input_len \"0\" must be at least 1");
    expect_csv_error("task,input_len,target_len\na,2147483648,2\n", "is too large");
    expect_csv_error("task,input_len,target_len\na,99999999999999999999999,2\n", "is too large");
    expect_csv_error("task,input_len,target_len\na,nan,2\n", "input_len \"nan\" is not a whole");
    expect_csv_error("task,input_len,target_len\na,inf,2\n", "input_len \"inf\"");
    expect_csv_error("task,input_len,target_len\na,4\n", ":2: row has 2 fields, the header has 3");
    expect_csv_error("task,input_len,target_len\n,4,1\n", ":2: task is empty");
    expect_csv_error("task,input_len,target_len\n\"a,4,1\n", "quoted field is not closed");
    expect_csv_error("task,input_len,target_len\na\"b,4,1\n", ":2: malformed quoting");
    expect_csv_error("task,input_len,target_len\na,,1\n", ":2: input_len \"\" is not a whole");
    static const char nul[] = "task,input_len,target_len\na,4\0,1\n";
    trace t;
    dp_err err = {0};
    trace_init(&t);
    assert_int_not_equal(trace_read_csv(tmp_file_bytes(".csv", nul, sizeof nul - 1), NULL, &t, &err),
                         DP_OK);
    assert_msg_has(err.msg, "NUL byte");
    trace_release(&t);
    assert_int_equal(trace_read_csv("/nonexistent/x.csv", NULL, &t, &err), DP_ERR_IO);
    assert_msg_has(err.msg, "/nonexistent/x.csv: cannot open");
}

static void test_csv_custom_fields_and_cot(void **state)
{
    (void)state;
    const char *text = "dataset,row,question_chars,target_chars,question_t5,target_t5,"
                       "question_gpt2,target_gpt2\naqua,0,156,72,64,36,69,42\nqasc,1,1,1,5,3,6,2\n";
    trace t;
    dp_err err = {0};
    trace_init(&t);
    const char *p = tmp_file(".csv", text);
    assert_int_equal(trace_load(p, TRACE_FORMAT_COT, NULL, NULL, &t, &err), DP_OK);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.samples[0].input_len, 64);
    assert_int_equal(t.samples[0].target_len, 36);
    assert_int_equal(t.n_extra, 5); /* unmapped columns are kept */
    trace_release(&t);
    trace_init(&t);
    assert_int_equal(trace_load(p, TRACE_FORMAT_COT, &TRACE_FIELDS_COT_GPT2, NULL, &t, &err), DP_OK);
    assert_int_equal(t.samples[0].input_len, 69);
    assert_string_equal(t.tasks[t.samples[1].task], "qasc");
    trace_release(&t);
    /* No task column: every sample gets the default task. */
    trace_fields f = {NULL, "question_t5", NULL, "cot"};
    trace_init(&t);
    assert_int_equal(trace_read_csv(p, &f, &t, &err), DP_OK);
    assert_int_equal(t.samples[1].target_len, 0);
    assert_string_equal(t.tasks[0], "cot");
    trace_release(&t);
}

static void test_jsonl_import(void **state)
{
    (void)state;
    const char *text = "{\"input_seq_len\": 12, \"target_seq_len\": 3, \"task_name\": \"a\"}\n"
                       "\n"
                       "{\"task_name\": \"b\", \"target_seq_len\": 0, \"input_seq_len\": 900}\n";
    trace t;
    dp_err err = {0};
    trace_init(&t);
    assert_int_equal(trace_load(tmp_file(".jsonl", text), TRACE_FORMAT_AUTO, NULL, NULL, &t, &err),
                     DP_OK);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.samples[1].input_len, 900);
    assert_string_equal(t.tasks[t.samples[1].task], "b");
    trace_release(&t);
    trace_fields f = {"t", "in", "out", "x"};
    trace_init(&t);
    assert_int_equal(trace_read_jsonl(tmp_file(".jsonl", "{\"in\":5,\"out\":1}\n"), &f, &t, &err),
                     DP_OK);
    assert_string_equal(t.tasks[0], "x");
    trace_release(&t);
}

static void expect_jsonl_error(const char *text, const char *want)
{
    trace t;
    dp_err err = {0};
    trace_init(&t);
    if (trace_read_jsonl(tmp_file(".jsonl", text), NULL, &t, &err) == DP_OK)
        fail_msg("accepted bad JSONL, wanted \"%s\"", want);
    assert_msg_has(err.msg, want);
    trace_release(&t);
}

static void test_jsonl_bad_input(void **state)
{
    (void)state;
    expect_jsonl_error("", "no samples");
    expect_jsonl_error("{\"input_seq_len\": 3, \"target_seq_len\": 1}\n{\"input_seq_len\": 3,\n",
                       ":2: malformed JSON");
    expect_jsonl_error("[1,2]\n", ":1: expected a JSON object");
    expect_jsonl_error("{\"target_seq_len\": 1}\n", ":1: missing field \"input_seq_len\"");
    expect_jsonl_error("{\"input_seq_len\": \"7\", \"target_seq_len\": 1}\n", "is not a number");
    expect_jsonl_error("{\"input_seq_len\": 7.5, \"target_seq_len\": 1}\n", "not a whole number");
    expect_jsonl_error("{\"input_seq_len\": 7, \"target_seq_len\": -1}\n", "is negative");
    expect_jsonl_error("{\"input_seq_len\": 3e12, \"target_seq_len\": 1}\n", "too large");
    expect_jsonl_error("{\"input_seq_len\": 3, \"target_seq_len\": 1, \"task_name\": 5}\n",
                       "\"task_name\" is not a string");
    /* JSON is UTF-8 (RFC 8259): a stray byte, an overlong form, a surrogate, a code point past
     * U+10FFFF or a cut sequence is refused where it is */
    expect_jsonl_error("{\"input_seq_len\": 3, \"target_seq_len\": 1}\n"
                       "{\"input_seq_len\": 3, \"target_seq_len\": 1, \"task_name\": \"a\xff\"}\n",
                       ":2: not UTF-8 text (byte 0xFF at column 58)");
    static const char *const bad[] = {"\xc0\xaf", "\xe0\x80\xaf", "\xed\xa0\x80", "\xf4\x90\x80\x80",
                                      "\xe2\x82", "\x80", "\xf8\x88\x80\x80\x80"};
    for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
        char line[128];
        snprintf(line, sizeof line, "{\"input_seq_len\": 3, \"task_name\": \"x%sy\"}\n", bad[k]);
        expect_jsonl_error(line, ":1: not UTF-8 text");
    }
    /* A nesting bomb is refused by cJSON's nesting limit, not by a crash. */
    size_t depth = 100000;
    char *bomb = malloc(depth + 2);
    memset(bomb, '[', depth);
    bomb[depth] = '\n';
    bomb[depth + 1] = '\0';
    expect_jsonl_error(bomb, ":1: malformed JSON");
    free(bomb);
}

/* The code point of the sequence at s of length n by the bits alone, or -1 where it is not one
 * (a reference written apart from dp_utf8_invalid_at: lead bits, continuation bits, then the
 * shortest form, the surrogates and the last code point). */
static long decode_one(const unsigned char *s, int n)
{
    static const unsigned lead_mask[] = {0, 0x80, 0xE0, 0xF0, 0xF8}, lead_bits[] = {0, 0, 0xC0, 0xE0, 0xF0};
    static const long least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (n == 1) return s[0] < 0x80 ? s[0] : -1;
    if ((s[0] & lead_mask[n]) != lead_bits[n]) return -1;
    long cp = s[0] & (0x7F >> n);
    for (int k = 1; k < n; k++) {
        if ((s[k] & 0xC0) != 0x80) return -1;
        cp = cp << 6 | (s[k] & 0x3F);
    }
    if (cp < least[n] || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return -1;
    return cp;
}

static void test_utf8_against_a_decoder(void **state)
{
    (void)state;
    /* every sequence of one and two bytes, every three-byte one with a lead of 0xE0-0xEF, and
     * four-byte ones over every lead and second byte: valid exactly where the reference decodes
     * it whole */
    unsigned char b[5] = {0};
    long checked = 0;
    for (unsigned x = 1; x < 256; x++)
        for (unsigned y = 0; y < 256; y++) {
            b[0] = (unsigned char)x, b[1] = (unsigned char)y, b[2] = 0;
            int n = y ? 2 : 1;
            int whole = n == 2 ? decode_one(b, 2) >= 0 || (decode_one(b, 1) >= 0 && decode_one(b + 1, 1) >= 0)
                               : decode_one(b, 1) >= 0;
            assert_int_equal(dp_utf8_invalid_at((const char *)b) < 0, whole);
            checked++;
        }
    for (unsigned x = 0xE0; x <= 0xEF; x++)
        for (unsigned y = 1; y < 256; y++)
            for (unsigned z = 1; z < 256; z++) {
                b[0] = (unsigned char)x, b[1] = (unsigned char)y, b[2] = (unsigned char)z, b[3] = 0;
                assert_int_equal(dp_utf8_invalid_at((const char *)b) < 0, decode_one(b, 3) >= 0);
            }
    for (unsigned x = 0xF0; x <= 0xFF; x++)
        for (unsigned y = 0x70; y < 0xD0; y++) {
            b[0] = (unsigned char)x, b[1] = (unsigned char)y, b[2] = 0x80, b[3] = 0xBF, b[4] = 0;
            assert_int_equal(dp_utf8_invalid_at((const char *)b) < 0, decode_one(b, 4) >= 0);
        }
    assert_true(checked > 60000);
    /* where: the first byte of the first bad sequence */
    assert_int_equal(dp_utf8_invalid_at("ab\xc3\xa9" "c\xe2\x82"), 5);
    assert_int_equal(dp_utf8_invalid_at("caf\xc3\xa9 \xf0\x9f\x98\x80"), -1);
}

/* Builds a .npy image with the given header dict and rows. */
static const char *npy_file(const char *dict, const int64_t *vals, size_t nvals, int version)
{
    unsigned char buf[4096];
    size_t dlen = strlen(dict), off = version == 1 ? 10 : 12;
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (unsigned char)version;
    buf[7] = 0;
    for (size_t i = 0; i < off - 8; i++) buf[8 + i] = (unsigned char)((dlen + 1) >> (8 * i));
    memcpy(buf + off, dict, dlen);
    buf[off + dlen] = '\n';
    size_t n = off + dlen + 1;
    for (size_t i = 0; i < nvals; i++)
        for (int b = 0; b < 8; b++) buf[n++] = (unsigned char)((uint64_t)vals[i] >> (8 * b));
    return tmp_file_bytes(".npy", buf, n);
}

static void test_npy_round_trip(void **state)
{
    (void)state;
    trace t, u;
    dp_err err = {0};
    trace_init(&t);
    trace_init(&u);
    assert_int_equal(trace_push(&t, "npy", 10, 3), DP_OK);
    assert_int_equal(trace_push(&t, "npy", 700, 0), DP_OK);
    assert_int_equal(trace_push(&t, "npy", 1, 12), DP_OK);
    const char *in = tmp_file(".npy", ""), *tg = tmp_file(".npy", "");
    assert_int_equal(trace_write_npy(&t, 0, in, &err), DP_OK);
    assert_int_equal(trace_write_npy(&t, 1, tg, &err), DP_OK);
    assert_int_equal(trace_read_npy(in, tg, &u, &err), DP_OK);
    assert_int_equal(trace_hash(&u), trace_hash(&t));
    trace_release(&t);
    trace_release(&u);
}

static void test_npy_header_variants(void **state)
{
    (void)state;
    int64_t c_order[] = {0, 5, 5, 5, 12, 7};
    int64_t f_order[] = {0, 5, 5, 12, 5, 7}; /* same two rows, column-major */
    const char *a = npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }",
                             c_order, 6, 1);
    const char *b = npy_file("{\"shape\":(2,3),\"fortran_order\":True,\"descr\":\"<i8\"}", f_order,
                             6, 2);
    trace t, u;
    dp_err err = {0};
    trace_init(&t);
    trace_init(&u);
    assert_int_equal(trace_read_npy(a, NULL, &t, &err), DP_OK);
    assert_int_equal(trace_read_npy(b, NULL, &u, &err), DP_OK);
    assert_int_equal(t.n, 2);
    assert_int_equal(t.samples[1].input_len, 7);
    assert_int_equal(t.samples[1].target_len, 0);
    assert_int_equal(trace_hash(&u), trace_hash(&t));
    trace_release(&t);
    trace_release(&u);
}

static void expect_npy_error(const char *path, const char *want)
{
    trace t;
    dp_err err = {0};
    trace_init(&t);
    if (trace_read_npy(path, NULL, &t, &err) == DP_OK) fail_msg("accepted bad .npy: %s", want);
    assert_msg_has(err.msg, want);
    trace_release(&t);
}

static void test_npy_bad_input(void **state)
{
    (void)state;
    int64_t rows[] = {0, 5, 5, 5, 12, 7};
    int64_t neg[] = {0, 5, -5};
    expect_npy_error(tmp_file(".npy", ""), "bad magic");
    expect_npy_error(tmp_file(".npy", "not numpy at all"), "bad magic");
    expect_npy_error(npy_file("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", rows,
                              6, 1),
                     "dtype '<f8' is not supported");
    expect_npy_error(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", rows,
                              5, 1),
                     "truncated");
    expect_npy_error(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (3, 2), }", rows,
                              6, 1),
                     "shape must be (N, 3)");
    expect_npy_error(npy_file("{'descr': '<i8', 'shape': (2, 3), }", rows, 6, 1), "lacks one of");
    expect_npy_error(npy_file("{'descr': '<i8' 'oops'", rows, 6, 1), "malformed .npy header");
    expect_npy_error(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 3), }", neg,
                              3, 1),
                     "row 0: len -5 is negative");
    expect_npy_error(npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (0, 3), }", rows,
                              0, 1),
                     "no samples");
    unsigned char hdr[] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, 0xff, 0x7f, '{'};
    expect_npy_error(tmp_file_bytes(".npy", hdr, sizeof hdr), "truncated .npy header");
    /* Inputs and targets of different lengths. */
    const char *two = npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }", rows,
                               6, 1);
    const char *one = npy_file("{'descr': '<i8', 'fortran_order': False, 'shape': (1, 3), }", rows,
                               3, 1);
    trace t;
    dp_err err = {0};
    trace_init(&t);
    assert_int_not_equal(trace_read_npy(two, one, &t, &err), DP_OK);
    assert_msg_has(err.msg, "has 2 rows but");
    trace_release(&t);
}

static void gen_stats(trace_gen_opts *o, trace *t, trace_stats *s)
{
    dp_err err = {0};
    trace_init(t);
    assert_int_equal(trace_generate(o, t, &err), DP_OK);
    assert_int_equal(trace_stats_compute(t, s, &err), DP_OK);
}

static void test_gen_uniform_and_fixed(void **state)
{
    (void)state;
    trace_gen_opts o;
    trace t;
    trace_stats s;
    trace_gen_defaults(&o);
    o.mix = TRACE_MIX_UNIFORM;
    o.samples = 1000000;
    o.min_len = 100;
    o.max_len = 900;
    gen_stats(&o, &t, &s);
    assert_int_equal(s.input.min, 100);
    assert_int_equal(s.input.max, 900);
    assert_rel(s.input.mean, 500.0, 0.02);
    assert_rel(s.input.p10, 180.0, 0.02);
    assert_rel(s.input.p90, 820.0, 0.02);
    trace_stats_release(&s);
    trace_release(&t);

    o.mix = TRACE_MIX_FIXED;
    o.len = 333;
    o.target_len = 7;
    gen_stats(&o, &t, &s);
    assert_near(s.input.mean, 333, 1e-9);
    assert_int_equal(s.input.min, 333);
    assert_int_equal(s.input.max, 333);
    assert_near(s.target.mean, 7, 1e-9);
    trace_stats_release(&s);
    trace_release(&t);
}

static void test_gen_deterministic(void **state)
{
    (void)state;
    trace_gen_opts o;
    trace_gen_defaults(&o);
    o.samples = 20000;
    trace a, b, c;
    dp_err err = {0};
    trace_init(&a), trace_init(&b), trace_init(&c);
    assert_int_equal(trace_generate(&o, &a, &err), DP_OK);
    assert_int_equal(trace_generate(&o, &b, &err), DP_OK);
    o.seed = 2;
    assert_int_equal(trace_generate(&o, &c, &err), DP_OK);
    assert_int_equal(trace_hash(&a), trace_hash(&b));
    assert_int_not_equal(trace_hash(&a), trace_hash(&c));
    /* Truncation holds. */
    for (size_t i = 0; i < a.n; i++) {
        assert_true(a.samples[i].input_len <= 2048);
        assert_true(a.samples[i].target_len <= 512);
    }
    trace_release(&a), trace_release(&b), trace_release(&c);
}

/* The whole-mix statistics of ../shared/flan/README.md ("Expected output", T5 tokens, before
 * truncation) within 5%. */
static void test_gen_flanv2_matches_published_table(void **state)
{
    (void)state;
    trace_gen_opts o;
    trace t;
    trace_stats s;
    trace_gen_defaults(&o);
    o.samples = 400000;
    o.max_input = 0;
    o.max_target = 0;
    gen_stats(&o, &t, &s);
    assert_rel(s.input.mean, 463, 0.05);
    assert_rel(s.input.p50, 227, 0.05);
    assert_rel(s.input.p90, 1360, 0.05);
    assert_rel(s.target.mean, 32, 0.05);
    assert_rel(s.target.p50, 10, 0.05);
    assert_rel(s.target.p90, 64, 0.05);
    trace_stats_release(&s);
    trace_release(&t);

    o.mix = TRACE_MIX_FLAN2021_ZS; /* DynaPipe-like preset: 201 (51, 456), target 48 (17) */
    gen_stats(&o, &t, &s);
    assert_rel(s.input.mean, 201, 0.05);
    assert_rel(s.input.p50, 51, 0.05);
    assert_rel(s.input.p90, 456, 0.05);
    assert_rel(s.target.mean, 48, 0.05);
    assert_rel(s.target.p50, 17, 0.05);
    assert_int_equal(s.n_tasks, 70);
    trace_stats_release(&s);
    trace_release(&t);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void test_gen_long_cot_mix(void **state)
{
    (void)state;
    /* 100,000 draws against the mix's stated parameters (trace_gen.h): component shares within
     * 4 standard errors, each component's median lengths within 3%, the reasoning chains capped
     * at 32,768 and every total at 131,072, no truncation by FLAN's defaults */
    trace_gen_opts o;
    trace_gen_defaults(&o);
    o.mix = TRACE_MIX_LONG_COT;
    o.samples = 100000;
    trace t;
    trace_init(&t);
    assert_int_equal(trace_generate(&o, &t, NULL), DP_OK);
    static const struct {
        const char *task;
        double w, in_med, tg_med;
    } want[] = {{"instruction", 0.22, 290, 225},
                {"reasoning-cot", 0.77, 200, 5000},
                {"long-context", 0.01, 29000, 540}};
    double *in = malloc(t.n * sizeof *in), *tg = malloc(t.n * sizeof *tg);
    size_t above16k = 0;
    for (int k = 0; k < 3; k++) {
        size_t n = 0;
        for (size_t i = 0; i < t.n; i++) {
            const trace_sample *x = &t.samples[i];
            assert_true(x->input_len >= 1 && x->target_len >= 1);
            assert_true((int64_t)x->input_len + x->target_len <= LONG_COT_MAX_TOTAL);
            if (strcmp(t.tasks[x->task], want[k].task) != 0) continue;
            if (k == 1) assert_true(x->target_len <= LONG_COT_REASONING_CAP);
            in[n] = x->input_len, tg[n] = x->target_len, n++;
        }
        double share = (double)n / t.n, se = sqrt(want[k].w * (1 - want[k].w) / t.n);
        assert_true(fabs(share - want[k].w) < 4 * se);
        qsort(in, n, sizeof *in, cmp_double);
        qsort(tg, n, sizeof *tg, cmp_double);
        assert_true(fabs(in[n / 2] / want[k].in_med - 1) < 0.03 + (k == 2 ? 0.08 : 0));
        assert_true(fabs(tg[n / 2] / want[k].tg_med - 1) < 0.03 + (k == 2 ? 0.08 : 0));
    }
    for (size_t i = 0; i < t.n; i++)
        above16k += (int64_t)t.samples[i].input_len + t.samples[i].target_len > 16384;
    /* the header's figure: about 4.7% of samples above 16k */
    assert_true(fabs((double)above16k / t.n - 0.047) < 0.01);
    free(in), free(tg);
    trace_release(&t);
}

static void test_gen_gpt2_scales_lengths(void **state)
{
    (void)state;
    trace_gen_opts o;
    trace t5, g;
    trace_stats s5, sg;
    trace_gen_defaults(&o);
    o.samples = 100000;
    o.max_input = 0;
    o.max_target = 0;
    gen_stats(&o, &t5, &s5);
    o.tokenizer = TOKENIZER_GPT2;
    gen_stats(&o, &g, &sg);
    assert_rel(sg.input.mean / s5.input.mean, 0.90, 0.01);
    trace_stats_release(&s5), trace_stats_release(&sg);
    trace_release(&t5), trace_release(&g);
}

static void test_gen_rejects_bad_options(void **state)
{
    (void)state;
    trace_gen_opts o;
    trace t;
    dp_err err = {0};
    trace_gen_defaults(&o);
    trace_init(&t);
    o.mix = TRACE_MIX_UNIFORM;
    o.min_len = 10;
    o.max_len = 5;
    assert_int_equal(trace_generate(&o, &t, &err), DP_ERR_INVALID);
    assert_msg_has(err.msg, "--min");
    o.samples = 0;
    assert_int_equal(trace_generate(&o, &t, &err), DP_ERR_INVALID);
    trace_release(&t);
}

static void test_stats_closed_form(void **state)
{
    (void)state;
    trace t;
    trace_stats s;
    dp_err err = {0};
    trace_init(&t);
    /* inputs 1..100, targets 0; task a has the odd inputs, b the even ones. */
    for (int i = 1; i <= 100; i++) assert_int_equal(trace_push(&t, i % 2 ? "a" : "b", i, 0), DP_OK);
    assert_int_equal(trace_stats_compute(&t, &s, &err), DP_OK);
    assert_near(s.input.mean, 50.5, 1e-12);
    assert_near(s.input.p50, 50.5, 1e-12);  /* numpy: percentile(1..100, 50) = 50.5 */
    assert_near(s.input.p90, 90.1, 1e-9);   /* 1 + 0.9 * 99 */
    assert_near(s.input.p99, 99.01, 1e-9);
    assert_int_equal(s.input.max, 100);
    assert_int_equal(s.n_tasks, 2);
    assert_int_equal(s.tasks[0].count, 50);
    assert_string_equal(s.tasks[0].name, "a"); /* ties by name */
    assert_near(s.tasks[0].input.mean, 50.0, 1e-12);
    assert_near(s.tasks[1].input.mean, 51.0, 1e-12);
    /* log2 bins: [1,2) 1, [2,4) 2, [4,8) 4, [8,16) 8, [16,32) 16, [32,64) 32, [64,128) 37 */
    assert_int_equal(s.hist_input[1], 1);
    assert_int_equal(s.hist_input[2], 2);
    assert_int_equal(s.hist_input[6], 32);
    assert_int_equal(s.hist_input[7], 37);
    assert_int_equal(s.hist_target[0], 100);
    char *json = trace_stats_json(&t, &s, "x");
    assert_non_null(json);
    assert_msg_has(json, "\"samples\":");
    free(json);
    trace_stats_release(&s);
    trace_release(&t);
}

static void test_stream_matches_in_memory(void **state)
{
    (void)state;
    trace_gen_opts o;
    trace_gen_defaults(&o);
    o.samples = 3000;
    trace t;
    dp_err err = {0};
    trace_init(&t);
    assert_int_equal(trace_generate(&o, &t, &err), DP_OK);
    const char *path = tmp_file(".csv", "");
    assert_int_equal(trace_write_csv(&t, path, &err), DP_OK);
    trace_stream ts;
    assert_int_equal(trace_stream_open(&ts, path, &err), DP_OK);
    size_t n = 0;
    for (;;) {
        trace_sample x;
        int eof;
        assert_int_equal(trace_stream_next(&ts, &x, &eof, &err), DP_OK);
        if (eof) break;
        assert_true(n < t.n);
        assert_int_equal(x.input_len, t.samples[n].input_len);
        assert_int_equal(x.target_len, t.samples[n].target_len);
        assert_string_equal(ts.tasks.tasks[x.task], t.tasks[t.samples[n].task]);
        n++;
    }
    assert_int_equal(n, t.n);
    trace_stream_close(&ts);
    trace_release(&t);
    /* bad rows fail with FILE:LINE while streaming too */
    assert_int_equal(trace_stream_open(&ts, tmp_file(".csv", "task,input_len,target_len\na,3,1\nb,-1,0\n"), &err), DP_OK);
    trace_sample x;
    int eof;
    assert_int_equal(trace_stream_next(&ts, &x, &eof, &err), DP_OK);
    assert_int_not_equal(trace_stream_next(&ts, &x, &eof, &err), DP_OK);
    assert_msg_has(err.msg, ":3: input_len \"-1\" is negative");
    trace_stream_close(&ts);
    assert_int_not_equal(trace_stream_open(&ts, tmp_file(".csv", "task,input_len\n"), &err), DP_OK);
    assert_msg_has(err.msg, "missing column \"target_len\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_csv_reads_contract),
        cmocka_unit_test(test_csv_round_trip_keeps_extras_and_quotes),
        cmocka_unit_test(test_csv_generated_round_trip),
        cmocka_unit_test(test_csv_accepts_crlf_and_bom),
        cmocka_unit_test(test_csv_long_line),
        cmocka_unit_test(test_csv_bad_input),
        cmocka_unit_test(test_csv_format_field_round_trip),
        cmocka_unit_test(test_csv_custom_fields_and_cot),
        cmocka_unit_test(test_jsonl_import),
        cmocka_unit_test(test_jsonl_bad_input),
        cmocka_unit_test(test_utf8_against_a_decoder),
        cmocka_unit_test(test_npy_round_trip),
        cmocka_unit_test(test_npy_header_variants),
        cmocka_unit_test(test_npy_bad_input),
        cmocka_unit_test(test_gen_uniform_and_fixed),
        cmocka_unit_test(test_gen_deterministic),
        cmocka_unit_test(test_gen_flanv2_matches_published_table),
        cmocka_unit_test(test_gen_long_cot_mix),
        cmocka_unit_test(test_gen_gpt2_scales_lengths),
        cmocka_unit_test(test_gen_rejects_bad_options),
        cmocka_unit_test(test_stats_closed_form),
        cmocka_unit_test(test_stream_matches_in_memory),
    };
    return cmocka_run_group_tests_name("trace", tests, NULL, NULL);
}
