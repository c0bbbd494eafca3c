/* Unit tests for common/options.c: the declarative option tables of the dpsim subcommands. */
#include "testutil.h"

#include "../../planner/request.h"
#include "../../common/options.h"

typedef struct vals {
    int flag, mode, n;
    int64_t big;
    double x;
    const char *name;
    int calls;
} vals;

static int count_call(void *ctx, const char *arg, const char *cmd, const char *usage)
{
    (void)cmd, (void)usage;
    vals *v = ctx;
    if (strcmp(arg, "bad") == 0) return -1;
    v->calls++;
    return 0;
}

static void table(cli_opts *t, vals *v)
{
    memset(v, 0, sizeof *v);
    v->n = 7;
    cli_opts_init(t, "test", "dpsim test [OPTIONS] [FILE]", "A table of every kind.");
    cli_opt_flag(t, "flag", 'f', &v->flag, "a flag");
    cli_opt_flag(t, "mode-two", 0, &v->mode, "sets mode 2")->flag_value = 2;
    cli_opt_int(t, "n", 'n', &v->n, "N", 1, 10, "7", "a small number")->marks = OPT_FIXED_BY_PLAN;
    cli_opt_int64(t, "big", 0, &v->big, "N", 0, INT64_C(1) << 40, "0", "a big number")->marks =
        OPT_TUNED | OPT_FIXED_BY_PLAN;
    cli_opt_double(t, "x", 0, &v->x, "X", 0, 1, "0.5", "a fraction\non two lines");
    cli_opt_string(t, "name", 0, &v->name, "S", NULL, "a string");
    cli_opt *c = cli_opt_call(t, "call", 'c', count_call, v, "V", NULL, "a callback");
    c->marks = OPT_TUNED, c->mark_name = "--call (use --calls)";
}

static int parse(cli_opts *t, int argc, const char **argv, const char **pos, int *n_pos)
{
    return cli_opts_parse(t, argc, (char **)argv, pos, 2, n_pos);
}

static void test_values_and_positionals(void **state)
{
    (void)state;
    cli_opts t;
    vals v;
    table(&t, &v);
    const char *argv[] = {"test", "-f", "--mode-two", "--n", "3", "--big", "1099511627776",
                          "--x=0.25", "--name", "abc", "a.csv", "-c", "one", "--call", "two",
                          "b.csv"};
    const char *pos[2];
    int n_pos = 0;
    assert_int_equal(parse(&t, 16, argv, pos, &n_pos), 0);
    assert_int_equal(v.flag, 1);
    assert_int_equal(v.mode, 2);
    assert_int_equal(v.n, 3);
    assert_true(v.big == (INT64_C(1) << 40));
    assert_true(v.x == 0.25);
    assert_string_equal(v.name, "abc");
    assert_int_equal(v.calls, 2);
    assert_int_equal(n_pos, 2);
    assert_string_equal(pos[0], "a.csv");
    assert_string_equal(pos[1], "b.csv");
    /* marks: the first row given with each */
    assert_string_equal(t.first[OPT_FIXED_BY_PLAN]->name, "n");
    char buf[64];
    assert_string_equal(cli_opt_label(t.first[OPT_TUNED], buf, sizeof buf), "--big");
    assert_string_equal(cli_opt_label(t.first[OPT_FIXED_BY_PLAN], buf, sizeof buf), "--n");
    /* by name, as sweep's grid sets them */
    assert_int_equal(cli_opts_set(&t, "n", "9"), 1);
    assert_int_equal(v.n, 9);
    assert_int_equal(cli_opts_set(&t, "nope", "9"), 0);
    assert_int_equal(cli_opts_set(&t, "n", "11"), -1);
    assert_int_equal(v.n, 9);
    assert_int_equal(cli_opts_set(&t, "flag", "false"), 1); /* a flag by name: true or false */
    assert_int_equal(v.flag, 0);
    assert_int_equal(cli_opts_set(&t, "flag", "true"), 1);
    assert_int_equal(v.flag, 1);
    assert_int_equal(cli_opts_set(&t, "mode-two", "0"), 1);
    assert_int_equal(v.mode, 0);
    assert_int_equal(cli_opts_set(&t, "mode-two", "1"), 1);
    assert_int_equal(v.mode, 2);
    assert_int_equal(cli_opts_set(&t, "flag", "maybe"), -1);
    assert_int_equal(v.flag, 1);
    cli_opts_release(&t);
}

static void test_usage_errors(void **state)
{
    (void)state;
    /* every bad command line is a usage error (2), the destination untouched */
    static const char *const bad[][3] = {{"--n", "0", NULL},    {"--n", "x", NULL},
                                         {"--x", "1.5", NULL},  {"--x", "nan", NULL},
                                         {"--big", "-1", NULL}, {"--call", "bad", NULL},
                                         {"--nope", NULL, NULL}, {"--n", NULL, NULL},
                                         {"-z", NULL, NULL},    {"a", "b", "c"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cli_opts t;
        vals v;
        table(&t, &v);
        const char *argv[4] = {"test"};
        int argc = 1;
        for (int k = 0; k < 3 && bad[i][k]; k++) argv[argc++] = bad[i][k];
        const char *pos[2];
        int n_pos = 0;
        assert_int_equal(parse(&t, argc, argv, pos, &n_pos), EXIT_USAGE);
        assert_int_equal(v.n, 7);
        assert_true(v.x == 0);
        cli_opts_release(&t);
    }
    /* positionals where none is accepted */
    cli_opts t;
    vals v;
    table(&t, &v);
    const char *argv[] = {"test", "extra"};
    assert_int_equal(cli_opts_parse(&t, 2, (char **)argv, NULL, 0, NULL), EXIT_USAGE);
    cli_opts_release(&t);
}

static void test_help_lists_every_row_with_defaults(void **state)
{
    (void)state;
    cli_opts t;
    vals v;
    table(&t, &v);
    FILE *fp = tmpfile();
    assert_non_null(fp);
    cli_opts_help(&t, fp);
    static char text[8192];
    rewind(fp);
    size_t n = fread(text, 1, sizeof text - 1, fp);
    text[n] = '\0';
    fclose(fp);
    assert_non_null(strstr(text, "usage: dpsim test [OPTIONS] [FILE]\n\nA table of every kind."));
    static const char *const want[] = {"  -f, --flag ", "      --mode-two ", "  -n, --n N ",
                                       "[7]", "      --big N ", "[0]", "      --x X ",
                                       "a fraction", "on two lines", "[0.5]", "  -c, --call V ",
                                       "  -h, --help "};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(text, want[i])) fail_msg("help lacks \"%s\":\n%s", want[i], text);
    /* --help itself: 1, so the command returns 0 */
    const char *argv[] = {"test", "--help"};
    FILE *saved = stdout;
    stdout = tmpfile();
    int r = cli_opts_parse(&t, 2, (char **)argv, NULL, 0, NULL);
    fclose(stdout);
    stdout = saved;
    assert_int_equal(r, 1);
    cli_opts_release(&t);
}

static void test_shared_plan_options(void **state)
{
    (void)state;
    /* the shared plan and cost rows: values, marks (what a plan fixes, what tune searches) */
    cli_opts t;
    plan_request p;
    plan_request_default(&p);
    cli_opts_init(&t, "test", "dpsim test", NULL);
    plan_request_options(&t, &p);
    const char *argv[] = {"test", "--mem-limit", "1000", "--pp", "2", "--batching", "packing-kk",
                          "--recompute", "dynamic", "--tp", "2"};
    assert_int_equal(cli_opts_parse(&t, 11, (char **)argv, NULL, 0, NULL), 0);
    plan_request_parsed(&t, &p);
    assert_int_equal(p.pp, 2);
    assert_int_equal(p.cost.tp, 2);
    assert_true(p.cost.recompute >= RECOMPUTE_COUNT);
    assert_string_equal(p.batching, "packing-kk");
    assert_true(p.mem_limit_mb == 1000);
    assert_string_equal(p.fixed_by_plan, "pp"); /* --mem-limit is not fixed by a plan */
    char buf[64];
    assert_string_equal(cli_opt_label(t.first[OPT_TUNED], buf, sizeof buf), "--pp");
    cli_opts_release(&t);
    /* the configuration a sweep records: a line per row of the table, so no option is missed;
     * the ones that change no result and the skipped (grid) keys are left out */
    static char desc[8192];
    const char *skip[] = {"pp"};
    plan_request_describe(&p, skip, 1, desc, sizeof desc);
    static const char *const want[] = {"\nrecompute=dynamic\n", "\nbatching=packing-kk\n",
                                       "\ntp=2\n", "\nmem-limit=1000\n", "\nflash-attention=false\n",
                                       "\ndp-split=auto\n", "\ntrace=traces/flanv2-100k.csv\n"};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++)
        if (!strstr(desc, want[i])) fail_msg("the description lacks %s:\n%s", want[i], desc);
    assert_null(strstr(desc, "\npp="));
    assert_null(strstr(desc, "stream="));
    assert_null(strstr(desc, "allow-oversubscribe="));
    cli_opts_init(&t, "test", "dpsim test", NULL);
    plan_request_options(&t, &p);
    int lines = 0, described = 0;
    for (const char *c = desc; *c; c++) lines += *c == '\n';
    for (int i = 0; i < t.n; i++) described += !(t.row[i].marks & OPT_NO_RESULT);
    assert_int_equal(lines, described - 1); /* every row but the skipped one */
    cli_opts_release(&t);
    /* the sweep's setter reaches the same rows */
    assert_int_equal(plan_request_set(&p, "max-seqlen", "4096", "test", "usage"), 1);
    assert_int_equal(p.max_seqlen, 4096);
    assert_int_equal(plan_request_set(&p, "batching", "magic", "test", "usage"), -1);
    assert_string_equal(p.batching, "packing-kk");
}

/* No option is accepted and ignored: every row of the plan options that applies only with
 * another, given alone at its default value, is refused naming what it needs; given with its
 * condition, accepted. */
static void test_only_with_rows_refused_alone(void **state)
{
    (void)state;
    static const struct {
        const char *name, *with[4];
    } cond[] = {{"cp-max", {"--cp", "auto"}},
                {"cp-kind", {"--cp", "2"}},
                {"microbatches", {"--toy-costs", "1,2"}}};
    cli_opts t;
    plan_request p;
    plan_request_default(&p);
    cli_opts_init(&t, "test", "dpsim test", NULL);
    plan_request_options(&t, &p);
    int checked = 0;
    for (int i = 0; i < t.n; i++) {
        const cli_opt *o = &t.row[i];
        if (!o->applies) continue;
        char opt[64];
        snprintf(opt, sizeof opt, "--%s", o->name);
        char *argv[] = {"test", opt, (char *)o->deflt, NULL};
        int argc = o->kind == OPT_FLAG ? 2 : 3;
        cli_opts u;
        plan_request q;
        plan_request_default(&q);
        cli_opts_init(&u, "test", "dpsim test", NULL);
        plan_request_options(&u, &q);
        assert_int_equal(cli_opts_parse(&u, argc, argv, NULL, 0, NULL), EXIT_USAGE);
        cli_opts_release(&u);
        size_t k = 0;
        while (k < sizeof cond / sizeof *cond && strcmp(cond[k].name, o->name) != 0) k++;
        if (k == sizeof cond / sizeof *cond) fail_msg("--%s: add its condition here", o->name);
        char *with[] = {"test", opt, (char *)o->deflt, (char *)cond[k].with[0],
                        (char *)cond[k].with[1], NULL};
        plan_request_default(&q);
        cli_opts_init(&u, "test", "dpsim test", NULL);
        plan_request_options(&u, &q);
        assert_int_equal(cli_opts_parse(&u, 5, with, NULL, 0, NULL), 0);
        cli_opts_release(&u);
        checked++;
    }
    assert_true(checked >= 3);
    cli_opts_release(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_values_and_positionals),
        cmocka_unit_test(test_usage_errors),
        cmocka_unit_test(test_help_lists_every_row_with_defaults),
        cmocka_unit_test(test_shared_plan_options),
        cmocka_unit_test(test_only_with_rows_refused_alone),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
